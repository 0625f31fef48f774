//! Contracts and their cards (docs/contract.md).
//!
//! A contract is produced by the program, never by a model: the item's key,
//! title and detail lines verbatim (less the indentation they share), its
//! context, one acceptance condition per `accept:`, the gate and setup
//! commands, the scope, the resolved limits with the source of each value,
//! and the writer and reviewer configuration. It is
//! serialised as canonical JSON (sorted keys, no spaces) and sealed with
//! SHA-256. It deliberately leaves out the base commit, the date and the
//! item's index, so the same item under the same config seals to the same
//! SHA night after night. A plan is the ordered list of contracts of every
//! open item; its SHA covers all of them in order (see [`crate::plan`], which
//! builds, renders and loads plans). This module does no I/O except reading
//! recipe templates from the repository.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backlog::{Item, Problem};
use crate::config::{self, AgentConfig, Config};

pub use crate::backlog::sha256_hex;

/// Where a resolved limit came from, highest precedence first (docs/contract.md#limit-sources:
/// flag › item › recipe › policy caps › default).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A detail line of the item (`rounds:`, `timeout:`).
    Item,
    /// The recipe selected by the title prefix.
    Recipe,
    /// The config file's `[limits]`.
    Policy,
    /// nightshift's built-in default.
    Default,
}

impl Source {
    /// The lowercase name the card shows (and the JSON holds).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Item => "item",
            Source::Recipe => "recipe",
            Source::Policy => "policy",
            Source::Default => "default",
        }
    }
}

/// A limit value and where it came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resolved<T> {
    /// Its provenance.
    pub source: Source,
    /// The value (durations in whole seconds).
    pub value: T,
}

/// The limits one item runs under. Durations are seconds, money USD.
/// Fields in byte order of their names (see [`Contract`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResolvedLimits {
    /// Wall time of one agent call, seconds.
    pub agent_timeout_secs: Resolved<u64>,
    /// Fix rounds for a red required check on GitHub (docs/github.md#ci);
    /// 0: none. Left out of the JSON at the built-in default, as
    /// `max_changed_files` is, so contracts sealed before it keep their SHA.
    #[serde(default = "default_ci_rounds", skip_serializing_if = "at_default")]
    pub ci_rounds: Resolved<u32>,
    /// How long to wait for a conclusive CI result after each push,
    /// seconds; left out of the JSON at the built-in default.
    #[serde(default = "default_ci_wait", skip_serializing_if = "at_default")]
    pub ci_wait_secs: Resolved<u64>,
    /// Wall time of one gate command, seconds.
    pub gate_timeout_secs: Resolved<u64>,
    /// Wall time of the whole item, seconds.
    pub item_timeout_secs: Resolved<u64>,
    /// Files the item's change may touch (docs/loop.md#proof). Left out of
    /// the canonical JSON at nightshift's built-in default (source
    /// `default`), as contracts sealed before this limit existed were, so
    /// their SHAs stay the same (docs/contract.md#limit-sources).
    #[serde(
        default = "default_max_changed_files",
        skip_serializing_if = "at_default"
    )]
    pub max_changed_files: Resolved<u64>,
    /// USD for the item (enforced only where the agent reports a cost).
    pub max_cost_usd: Resolved<f64>,
    /// Lines the item's change may add and remove together; left out of the
    /// JSON at the built-in default, as `max_changed_files` is.
    #[serde(default = "default_max_diff_lines", skip_serializing_if = "at_default")]
    pub max_diff_lines: Resolved<u64>,
    /// Tokens for the item.
    pub max_tokens: Resolved<u64>,
    /// Writer rounds.
    pub rounds: Resolved<u32>,
}

/// Whether a limit is nightshift's built-in default (not set by the policy
/// or the item): such a limit added after version 2 is not serialised.
fn at_default<T>(r: &Resolved<T>) -> bool {
    r.source == Source::Default
}

fn default_max_changed_files() -> Resolved<u64> {
    Resolved {
        value: config::DEFAULT_MAX_CHANGED_FILES,
        source: Source::Default,
    }
}

fn default_ci_rounds() -> Resolved<u32> {
    Resolved {
        value: config::DEFAULT_CI_ROUNDS,
        source: Source::Default,
    }
}

fn default_ci_wait() -> Resolved<u64> {
    Resolved {
        value: config::DEFAULT_CI_WAIT.as_secs(),
        source: Source::Default,
    }
}

fn default_max_diff_lines() -> Resolved<u64> {
    Resolved {
        value: config::DEFAULT_MAX_DIFF_LINES,
        source: Source::Default,
    }
}

impl ResolvedLimits {
    /// Item timeout as a [`Duration`].
    pub fn item_timeout(&self) -> Duration {
        Duration::from_secs(self.item_timeout_secs.value)
    }
    /// Agent-call timeout as a [`Duration`].
    pub fn agent_timeout(&self) -> Duration {
        Duration::from_secs(self.agent_timeout_secs.value)
    }
    /// Gate timeout as a [`Duration`].
    pub fn gate_timeout(&self) -> Duration {
        Duration::from_secs(self.gate_timeout_secs.value)
    }
    /// The CI wait after each push as a [`Duration`].
    pub fn ci_wait(&self) -> Duration {
        Duration::from_secs(self.ci_wait_secs.value)
    }
}

impl Contract {
    /// The limits a round's change is held to (docs/loop.md#proof): the
    /// sealed `max_changed_files`, `max_diff_lines`, `protected` and
    /// `allow`. The protected globs are [`Contract::protected_paths`].
    pub fn change_limits(&self) -> crate::proof::ChangeLimits<'_> {
        crate::proof::ChangeLimits {
            max_changed_files: self.limits.max_changed_files.value,
            max_diff_lines: self.limits.max_diff_lines.value,
            protected: self.protected_paths(),
            allow: &self.allow,
        }
    }

    /// The globs a round may not change unless `allow` names them: the
    /// sealed `protected`, and nightshift's defaults
    /// ([`config::DEFAULT_PROTECTED`]) even when the contract was sealed
    /// before they existed (a plan stored in the ledger by an older
    /// version), so no contract runs without them.
    pub fn protected_paths(&self) -> Vec<String> {
        config::protected_paths(&self.protected)
    }
}

/// The recipe a title prefix selected, with its template sealed in.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecipeRef {
    /// Template path relative to the repository root.
    pub path: String,
    /// The matching prefix.
    pub prefix: String,
    /// SHA-256 of the template bytes.
    pub sha256: String,
    /// The template text.
    pub template: String,
}

/// An agent role as sealed in the contract.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentSpec {
    /// Hosts only this agent's calls may reach through the sandbox's proxy
    /// (its table's `allow_hosts`, docs/security.md#the-network); left out
    /// of the JSON when none, so contracts sealed before keep their SHA.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// argv as configured.
    pub command: Vec<String>,
    /// `claude`, `codex` or `command`.
    pub kind: String,
    /// Model, if configured.
    pub model: Option<String>,
    /// A fallback's name in the config (`[writer] fallback`); left out of
    /// the JSON for the writer and the reviewer themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Extra permission flags (claude writer), if configured.
    pub permission_flags: Option<Vec<String>>,
}

impl From<&AgentConfig> for AgentSpec {
    fn from(a: &AgentConfig) -> Self {
        AgentSpec {
            kind: a.kind.to_string(),
            command: a.command.clone(),
            permission_flags: a.permission_flags.clone(),
            model: a.model.clone(),
            name: None,
            allow_hosts: a.allow_hosts.clone(),
        }
    }
}

/// The fallback of `primary` as sealed (docs/limits.md#fallback): its
/// spec with its name.
fn fallback_spec(c: &Config, primary: &AgentConfig) -> Option<AgentSpec> {
    c.fallback_of(primary).map(|(name, a)| AgentSpec {
        name: Some(name),
        ..AgentSpec::from(&a)
    })
}

/// One sealed contract (docs/contract.md#contract). Serialises to canonical JSON via
/// [`Contract::canonical_json`]; its SHA is [`Contract::sha`].
///
/// Its fields, and those of every struct in it, are declared in byte order
/// of their JSON names: serde writes them in that order, which makes the
/// canonical JSON one pass (see [`Contract::canonical_json`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Contract {
    /// One acceptance condition per `accept:` line.
    pub accept: Vec<String>,
    /// Globs of protected paths this item may change anyway (its `allow:`
    /// lines, docs/backlog.md#details); left out of the JSON when empty, so
    /// the contract of an item without them has the same shape as before
    /// the key existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Branch the PR targets.
    pub base: String,
    /// Block-quote context: the document preamble, then the section's.
    pub context: Vec<String>,
    /// Every nested line of the item, verbatim but for the indentation
    /// they all share (a list's nesting, not the item's text).
    pub details: Vec<String>,
    /// The item's key (docs/backlog.md#keys).
    pub key: String,
    /// Label put on the PR.
    pub label: String,
    /// Resolved limits with provenance.
    pub limits: ResolvedLimits,
    /// Free context lines for the writer.
    pub notes: Vec<String>,
    /// Globs of paths no writer may change, whatever the scope, unless
    /// `allow` names them: nightshift's defaults, then the config's
    /// `protected` ([`config::protected_paths`]). Never empty in a contract
    /// sealed since the defaults exist; left out of the JSON when empty, as
    /// in contracts sealed before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<String>,
    /// Open questions; an item with any is blocked.
    pub questions: Vec<String>,
    /// The recipe, if a title prefix selected one.
    pub recipe: Option<RecipeRef>,
    /// The read-only reviewer.
    pub reviewer: AgentSpec,
    /// The reviewer used while the reviewer's account is paused, or while
    /// the writer's fallback is of the reviewer's vendor
    /// (docs/limits.md#fallback); left out of the JSON when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer_fallback: Option<AgentSpec>,
    /// `[sandbox]` as the item's calls run under it (docs/security.md#the-sandbox):
    /// mode, `allow_hosts`, `read`, `write`, `tmp_size`. Left out while all default, so
    /// contracts sealed before it keep their SHA (absent reads as default).
    #[serde(default, skip_serializing_if = "config::SandboxConfig::is_default")]
    pub sandbox: config::SandboxConfig,
    /// Paths the writer may change (empty: everything).
    pub scope: Vec<String>,
    /// The `##` heading the item sits under, verbatim.
    pub section: Option<String>,
    /// Setup commands run in each fresh checkout.
    pub setup: Vec<String>,
    /// The item's title, verbatim.
    pub title: String,
    /// Gate commands (the item's `verify:` lines, else the config's).
    pub verify: Vec<String>,
    /// Format version of this JSON: 2 since `details` lost their shared
    /// indentation.
    pub version: u32,
    /// The writer.
    pub writer: AgentSpec,
    /// The writer used for new items and rounds while the writer's account
    /// is paused (docs/limits.md#fallback); left out of the JSON when none,
    /// so contracts without one keep their SHA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_fallback: Option<AgentSpec>,
}

impl Contract {
    /// Canonical JSON: keys sorted at every level, no insignificant
    /// whitespace. Written in one pass: the structs declare their fields in
    /// byte order of their names, so the bytes are those of going through a
    /// `serde_json::Value` (whose map sorts its keys), without building one
    /// (20,000 contracts a plan). Debug builds check that at every call.
    pub fn canonical_json(&self) -> String {
        let mut buf = Vec::with_capacity(1536);
        serde_json::to_writer(&mut buf, self).expect("a contract always serialises");
        let json = String::from_utf8(buf).expect("serde_json writes UTF-8");
        #[cfg(debug_assertions)]
        assert_eq!(
            json,
            self.canonical_json_by_value(),
            "a field of Contract is out of byte order"
        );
        json
    }

    /// The canonical JSON through a sorted `serde_json::Value`: what sealed
    /// SHAs were made with before [`Contract::canonical_json`] wrote it
    /// directly, kept to check that it still gives the same bytes.
    #[cfg(any(test, debug_assertions))]
    fn canonical_json_by_value(&self) -> String {
        let value = serde_json::to_value(self).expect("a contract always serialises");
        serde_json::to_string(&value).expect("a JSON value always serialises")
    }

    /// SHA-256 of [`Contract::canonical_json`], lowercase hex.
    pub fn sha(&self) -> String {
        sha256_hex(self.canonical_json().as_bytes())
    }
}

/// One open item of a plan.
#[derive(Debug, Clone)]
pub struct PlanEntry {
    /// 1-based among open items, in backlog order (the number `run` takes).
    pub index: usize,
    /// The backlog item.
    pub item: Item,
    /// Its sealed contract.
    pub contract: Contract,
    /// `contract.sha()`.
    pub contract_sha: String,
    /// Why the item will not run, if it will not (a question).
    pub blocked: Option<String>,
}

/// The contract of one open `item` of the backlog at `path` under config `c`; `policy_keys`
/// are the `[limits]` keys the config file sets (for each limit's source).
///
/// # Errors
/// Limits above the policy caps and unreadable recipe templates, each with file:line.
pub(crate) fn seal(
    repo: &Path,
    path: &Path,
    item: &Item,
    c: &Config,
    policy_keys: &[String],
) -> Result<Contract, Vec<Problem>> {
    let mut problems = Vec::new();
    let problem = |line: usize, message: String| Problem {
        path: path.to_path_buf(),
        line,
        message,
    };
    let recipe = c
        .recipes
        .iter()
        .find(|r| item.title.trim_start().starts_with(r.prefix.trim()));
    let recipe_ref = match recipe {
        Some(r) if !inside_repo(repo, &r.prompt) => {
            problems.push(problem(item.line, format!("recipe {:?} selects template {}, which is not a file inside the repository; give a path relative to the repository root in `prompt` in .nightshift/config.toml", r.prefix, r.prompt)));
            None
        }
        Some(r) => {
            match crate::file::read_regular(&repo.join(&r.prompt), crate::file::MAX_TEXT_BYTES) {
                Ok(bytes) => Some(RecipeRef {
                    prefix: r.prefix.clone(),
                    path: r.prompt.clone(),
                    sha256: sha256_hex(&bytes),
                    template: String::from_utf8_lossy(&bytes).into_owned(),
                }),
                Err(e) => {
                    problems.push(problem(item.line, format!("recipe {:?} selects template {}, which cannot be read ({e}); make it a regular file or fix `prompt` in .nightshift/config.toml", r.prefix, r.prompt)));
                    None
                }
            }
        }
        None => None,
    };
    let limits = resolve_limits(item, recipe, c, policy_keys, &mut |line, message| {
        problems.push(problem(line, message))
    });
    if !problems.is_empty() {
        return Err(problems);
    }
    let d = &item.details;
    Ok(Contract {
        version: 2,
        key: item.key.clone(),
        title: item.title.clone(),
        section: item.section.clone(),
        details: d.lines.iter().map(|l| l.relative.clone()).collect(),
        context: item.context.clone(),
        accept: d.accept.clone(),
        allow: d.allow.clone(),
        verify: if d.verify.is_empty() {
            c.verify.clone()
        } else {
            d.verify.clone()
        },
        setup: c.setup.clone(),
        scope: d.scope.clone(),
        protected: config::protected_paths(&c.protected),
        questions: d.questions.clone(),
        notes: d.notes.clone(),
        limits,
        writer: (&c.writer).into(),
        writer_fallback: fallback_spec(c, &c.writer),
        reviewer: (&c.reviewer).into(),
        reviewer_fallback: fallback_spec(c, &c.reviewer),
        sandbox: c.sandbox.clone(),
        recipe: recipe_ref,
        base: c.base.clone(),
        label: c.label.clone(),
    })
}

/// The item's limits with their sources (docs/contract.md#limit-sources):
/// its own detail lines, else the recipe's rounds, else the policy caps,
/// else the defaults. A detail line above its cap is reported to `problem`
/// (its line and the message) and kept as written.
fn resolve_limits(
    item: &Item,
    recipe: Option<&config::Recipe>,
    c: &Config,
    policy_keys: &[String],
    problem: &mut dyn FnMut(usize, String),
) -> ResolvedLimits {
    let caps = &c.limits;
    let source = |key: &str| {
        if policy_keys.iter().any(|k| k == key) {
            Source::Policy
        } else {
            Source::Default
        }
    };
    let cap = |key: &str, value: u64| Resolved {
        value,
        source: source(key),
    };
    let d = &item.details;
    ResolvedLimits {
        rounds: rounds(d, recipe, caps.rounds, source("rounds"), problem),
        item_timeout_secs: item_timeout(d, caps.item_timeout, source("item_timeout"), problem),
        agent_timeout_secs: cap("agent_timeout", caps.agent_timeout.as_secs()),
        gate_timeout_secs: cap("gate_timeout", caps.gate_timeout.as_secs()),
        ci_rounds: Resolved {
            value: caps.ci_rounds,
            source: source("ci_rounds"),
        },
        ci_wait_secs: cap("ci_wait", caps.ci_wait.as_secs()),
        max_tokens: cap("max_tokens", caps.max_tokens),
        max_cost_usd: Resolved {
            value: caps.max_cost_usd,
            source: source("max_cost_usd"),
        },
        max_changed_files: lowered(
            "max_changed_files",
            d.max_changed_files,
            cap("max_changed_files", caps.max_changed_files),
            problem,
        ),
        max_diff_lines: lowered(
            "max_diff_lines",
            d.max_diff_lines,
            cap("max_diff_lines", caps.max_diff_lines),
            problem,
        ),
    }
}

/// Rounds: the item's `rounds:` (a problem above `cap`), else the recipe's
/// (clamped to `cap`), else `cap` from `cap_source`.
fn rounds(
    d: &crate::backlog::Details,
    recipe: Option<&config::Recipe>,
    cap: u32,
    cap_source: Source,
    problem: &mut dyn FnMut(usize, String),
) -> Resolved<u32> {
    match (d.rounds, recipe.and_then(|r| r.rounds)) {
        (Some((n, line)), _) => {
            if n > cap {
                problem(
                    line,
                    format!(
                        "`rounds: {n}` is above the policy cap of {cap}; lower it or raise [limits] rounds"
                    ),
                );
            }
            Resolved {
                value: n,
                source: Source::Item,
            }
        }
        (None, Some(n)) => Resolved {
            value: n.min(cap),
            source: Source::Recipe,
        },
        (None, None) => Resolved {
            value: cap,
            source: cap_source,
        },
    }
}

/// The item timeout in seconds: the item's `timeout:` (a problem above
/// `cap`), else `cap` from `cap_source`.
fn item_timeout(
    d: &crate::backlog::Details,
    cap: Duration,
    cap_source: Source,
    problem: &mut dyn FnMut(usize, String),
) -> Resolved<u64> {
    match d.timeout {
        Some((t, line)) => {
            if t > cap {
                problem(
                    line,
                    format!(
                        "`timeout: {}` is above the policy cap of {}; lower it or raise [limits] item_timeout",
                        config::format_duration(t),
                        config::format_duration(cap)
                    ),
                );
            }
            Resolved {
                value: t.as_secs(),
                source: Source::Item,
            }
        }
        None => Resolved {
            value: cap.as_secs(),
            source: cap_source,
        },
    }
}

/// A count limit an item line (`key: N` and its line) may lower: the
/// item's value (a problem above the cap), else the cap.
fn lowered(
    key: &str,
    given: Option<(u64, usize)>,
    cap: Resolved<u64>,
    problem: &mut dyn FnMut(usize, String),
) -> Resolved<u64> {
    let Some((n, line)) = given else {
        return cap;
    };
    if n > cap.value {
        problem(
            line,
            format!(
                "`{key}: {n}` is above the policy cap of {}; lower it or raise [limits] {key}",
                cap.value
            ),
        );
    }
    Resolved {
        value: n,
        source: Source::Item,
    }
}

/// True when `rel` names a path inside `repo` (docs/config.md#recipes: a path inside
/// the repository): relative, no `..`, and not a symlink leading out of it. A
/// missing file counts as inside here; reading it reports that.
fn inside_repo(repo: &Path, rel: &str) -> bool {
    let p = Path::new(rel);
    if p.is_absolute()
        || p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return false;
    }
    match (repo.join(p).canonicalize(), repo.canonicalize()) {
        (Ok(file), Ok(root)) => file.starts_with(root),
        _ => true,
    }
}

/// Renders the card of one plan entry: what a person approves (docs/contract.md#card).
pub fn card(e: &PlanEntry) -> String {
    let mut s = String::new();
    write_card(&mut s, e);
    s
}

/// Appends the card of `e` to `s` ([`card`]; a plan's 20,000 cards go into
/// one string).
pub(crate) fn write_card(s: &mut String, e: &PlanEntry) {
    let c = &e.contract;
    let _ = writeln!(s, "── item {} · {}", e.index, c.title);
    let _ = writeln!(s, "   key       {}", &c.key[..16.min(c.key.len())]);
    if let Some(sec) = &c.section {
        let _ = writeln!(s, "   section   {sec}");
    }
    if let Some(b) = &e.blocked {
        let _ = writeln!(s, "   not run   {b}");
    }
    card_rules(s, c);
    card_limits(s, c);
    let _ = writeln!(s, "   contract  sha256 {}", e.contract_sha);
}

/// The card's lines of what the item must meet and may touch: conditions,
/// gate, setup, scope, recipe, notes and context.
fn card_rules(s: &mut String, c: &Contract) {
    for a in &c.accept {
        let _ = writeln!(s, "   accept    {a}");
    }
    if c.accept.is_empty() {
        let _ = writeln!(
            s,
            "   accept    (none written: the gate and the reviewer decide)"
        );
    }
    for v in &c.verify {
        let _ = writeln!(s, "   gate      {v}");
    }
    if c.verify.is_empty() {
        let _ = writeln!(s, "   gate      (none: no tests are run for this item)");
    }
    for v in &c.setup {
        let _ = writeln!(s, "   setup     {v}");
    }
    let _ = writeln!(
        s,
        "   scope     {}",
        if c.scope.is_empty() {
            "(anything)".to_string()
        } else {
            c.scope.join(", ")
        }
    );
    if let Some(r) = &c.recipe {
        let _ = writeln!(
            s,
            "   recipe    {} → {} (sha256 {})",
            r.prefix,
            r.path,
            &r.sha256[..12]
        );
    }
    for n in &c.notes {
        let _ = writeln!(s, "   note      {n}");
    }
    if !c.context.is_empty() {
        let _ = writeln!(
            s,
            "   context   {} line(s) of block-quote rules",
            c.context.len()
        );
    }
}

/// The card's lines of limits and budget, the change's size and the
/// protected paths, each with where it came from, and the two agents.
fn card_limits(s: &mut String, c: &Contract) {
    let l = &c.limits;
    let src = Source::as_str;
    let _ = writeln!(
        s,
        "   limits    rounds {} ({}) · item {} ({}) · agent call {} ({}) · gate {} ({})",
        l.rounds.value,
        src(l.rounds.source),
        config::format_duration(l.item_timeout()),
        src(l.item_timeout_secs.source),
        config::format_duration(l.agent_timeout()),
        src(l.agent_timeout_secs.source),
        config::format_duration(l.gate_timeout()),
        src(l.gate_timeout_secs.source),
    );
    let cost_note = cost_note(&c.writer, &c.reviewer);
    let _ = writeln!(
        s,
        "   budget    {} tokens ({}) · ${:.2} ({}){cost_note}",
        l.max_tokens.value,
        src(l.max_tokens.source),
        l.max_cost_usd.value,
        src(l.max_cost_usd.source)
    );
    let _ = writeln!(
        s,
        "   change    at most {} files ({}) · {} lines added and removed ({})",
        l.max_changed_files.value,
        src(l.max_changed_files.source),
        l.max_diff_lines.value,
        src(l.max_diff_lines.source)
    );
    let _ = writeln!(
        s,
        "   ci        {} fix round(s) for a red required check ({}) · wait {} after each push ({})",
        l.ci_rounds.value,
        src(l.ci_rounds.source),
        config::format_duration(l.ci_wait()),
        src(l.ci_wait_secs.source)
    );
    if !c.protected.is_empty() {
        let _ = writeln!(
            s,
            "   protected {} (never changed, whatever the scope)",
            c.protected.join(", ")
        );
    }
    if !c.allow.is_empty() {
        let _ = writeln!(
            s,
            "   allow     {} (lifts protected paths for this item)",
            c.allow.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "   writer    {} {}{}",
        c.writer.kind,
        c.writer.command.join(" "),
        card_fallback(c.writer_fallback.as_ref())
    );
    let _ = writeln!(
        s,
        "   reviewer  {} {} (read-only){}",
        c.reviewer.kind,
        c.reviewer.command.join(" "),
        card_fallback(c.reviewer_fallback.as_ref())
    );
    card_sandbox(s, c);
}

/// What the card adds to an agent's line for its fallback
/// (docs/limits.md#fallback): its name, kind and command.
fn card_fallback(f: Option<&AgentSpec>) -> String {
    f.map(|f| {
        format!(
            " · fallback {} ({} {}) while its account is paused",
            f.name.as_deref().unwrap_or(&f.kind),
            f.kind,
            f.command.join(" ")
        )
    })
    .unwrap_or_default()
}

/// The card's sandbox line (docs/security.md#the-sandbox): the mode, what
/// runs in it, the network (every call's hosts, then those of one agent or
/// of the gate only), the paths it adds and its tmpfs cap when set.
fn card_sandbox(s: &mut String, c: &Contract) {
    let b = &c.sandbox;
    let net = if b.allow_hosts.is_empty() {
        "no network but claude's and codex's API host".to_string()
    } else {
        format!(
            "allowed hosts {} (through the filtering proxy) and claude's and codex's API host",
            b.allow_hosts.join(", ")
        )
    };
    let mut line = match b.mode {
        crate::sandbox::Mode::Off => "   sandbox   off (nothing runs in it)".to_string(),
        mode => format!("   sandbox   {mode} · every agent, gate and setup · {net}"),
    };
    let agents = [
        ("writer", Some(&c.writer)),
        ("writer fallback", c.writer_fallback.as_ref()),
        ("reviewer", Some(&c.reviewer)),
        ("reviewer fallback", c.reviewer_fallback.as_ref()),
    ];
    let own = (agents.into_iter())
        .filter_map(|(who, a)| Some((who, &a?.allow_hosts)))
        .chain([("gate and setup", &b.gate_allow_hosts)]);
    for (who, hosts) in own.filter(|(_, h)| !h.is_empty()) {
        if b.mode != crate::sandbox::Mode::Off {
            line.push_str(&format!(" · {who} only: {}", hosts.join(", ")));
        }
    }
    if !b.read.is_empty() {
        line.push_str(&format!(" · read {}", b.read.join(", ")));
    }
    if !b.write.is_empty() {
        line.push_str(&format!(" · write {}", b.write.join(", ")));
    }
    if let Some(n) = b.tmp_size {
        let size = config::format_size(n);
        line.push_str(&format!(" · /tmp and home at most {size} each"));
    }
    let _ = writeln!(s, "{line}");
}

/// What the card says about the cost caps (docs/contract.md, docs/agents.md): they are enforced
/// only on costs an agent reports. claude reports one per call; codex never
/// does; a `command` agent only if it writes a usage report.
fn cost_note(writer: &AgentSpec, reviewer: &AgentSpec) -> String {
    let mut silent = Vec::new();
    let mut maybe = Vec::new();
    for (role, a) in [("writer", writer), ("reviewer", reviewer)] {
        match a.kind.as_str() {
            "codex" => silent.push(format!("{role} (codex: no cost reported)")),
            "command" => maybe.push(format!("{role} (command: only if it reports cost_usd)")),
            _ => {}
        }
    }
    let mut parts = Vec::new();
    if !silent.is_empty() {
        parts.push(format!(
            "not enforced for codex, the {}",
            silent.join(" and ")
        ));
    }
    if !maybe.is_empty() {
        parts.push(format!("enforced for the {}", maybe.join(" and ")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; cost cap {}", parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Plan, build_plan};

    /// The plan of `backlog` under the config text `config` (no file when empty).
    fn plan(backlog: &str, config: &str) -> Plan {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        if !config.is_empty() {
            std::fs::write(&path, config).unwrap();
        }
        let loaded = config::load(&path).unwrap();
        let backlog = crate::backlog::parse(Path::new("NEXT.md"), backlog);
        build_plan(dir.path(), &backlog, &loaded).unwrap()
    }

    fn limit_keys(p: &Plan) -> Vec<String> {
        let v: serde_json::Value =
            serde_json::from_str(&p.entries[0].contract.canonical_json()).unwrap();
        v["limits"].as_object().unwrap().keys().cloned().collect()
    }

    /// A contract with every optional part set and text that JSON must
    /// escape: unicode, quotes, backslashes, control characters, NUL.
    fn rich_contract() -> Contract {
        let mut c = plan(
            "# B\n\n> ctx \"q\"\n\n## Séction\n\n- [ ] Add \\ sub 🦀\n  - accept: ok\n  - rounds: 2\n  - max_changed_files: 3\n",
            "protected = [\".github/**\"]\n[limits]\nmax_diff_lines = 300\nmax_cost_usd = 0.1\n[writer]\nkind = \"claude\"\nmodel = \"m\"\npermission_flags = [\"--x\"]\n",
        )
        .entries
        .remove(0)
        .contract;
        c.recipe = Some(RecipeRef {
            prefix: "fix:".into(),
            path: "r/fix.md".into(),
            sha256: "ab".repeat(32),
            template: "line\n\ttab \u{7f} \u{1} \u{2028} \"x\" \\ é 中".into(),
        });
        c.section = Some("Sé\u{0}ction \u{1b}[31m".into());
        c.notes = vec!["\u{0}nul".into(), "</script>".into(), String::new()];
        c.questions = vec!["why?\r\n".into()];
        c.allow = vec![".github/workflows/ci.yml".into(), "é/**".into()];
        c.limits.max_cost_usd.value = 1e21;
        c
    }

    #[test]
    fn canonical_json_is_byte_for_byte_what_the_sorted_value_gave() {
        let rich = rich_contract();
        assert!(rich.recipe.is_some() && rich.section.is_some());
        assert!(!rich.protected.is_empty() && !rich.allow.is_empty());
        assert!(rich.writer.model.is_some());
        let mut bare = plan("- [ ] Add sub\n", "").entries.remove(0).contract;
        bare.limits.max_cost_usd.value = 0.1 + 0.2;
        for c in [&rich, &bare] {
            assert_eq!(c.canonical_json(), c.canonical_json_by_value());
        }
        // Pinned: the SHA this item seals to since the protected defaults
        // (docs/config.md#protected); a change here breaks every approval
        // of it.
        let mut item = plan("- [ ] Add sub\n", "").entries.remove(0);
        assert_eq!(
            item.contract_sha,
            "9c64328c9799f7cd1eafb8b7e61b1433435bdcd2aba54a4cee4f80f7fb78bdbb"
        );
        // Without them (as sealed before), the bytes are still those the
        // one-pass writer was pinned to: no other field moved.
        item.contract.protected.clear();
        assert_eq!(
            item.contract.sha(),
            "d32214bf447772b8976abaf37b35ffdef120ccf4ccc882ae6005ec387952ffd5"
        );
    }

    proptest::proptest! {
        #[test]
        fn canonical_json_matches_the_sorted_value_for_any_text(
            texts in proptest::collection::vec(".*", 1..6),
            section in proptest::option::of(".*"),
            cost in proptest::num::f64::NORMAL,
        ) {
            let mut c = rich_contract();
            c.title = texts[0].clone();
            c.details = texts.clone();
            c.section = section;
            c.writer.model = texts.last().cloned();
            c.limits.max_cost_usd.value = cost;
            proptest::prop_assert_eq!(c.canonical_json(), c.canonical_json_by_value());
        }
    }

    #[test]
    fn limits_added_after_version_2_leave_the_json_alone_at_their_defaults() {
        let p = plan("- [ ] Add sub\n", "");
        // The six limits version 2 sealed, and nothing else: a contract
        // sealed before the change limits existed keeps its SHA.
        assert_eq!(
            limit_keys(&p),
            [
                "agent_timeout_secs",
                "gate_timeout_secs",
                "item_timeout_secs",
                "max_cost_usd",
                "max_tokens",
                "rounds"
            ]
        );
        let json = p.entries[0].contract.canonical_json();
        // The protected defaults are sealed, so the approval covers them;
        // an item without `allow:` seals no `allow` key.
        assert!(
            json.contains(r#""protected":[".github/workflows/**","#),
            "{json}"
        );
        assert!(!json.contains("\"allow\""), "{json}");
        let c = &p.entries[0].contract;
        assert_eq!(c.limits.max_changed_files.value, 100);
        assert_eq!(c.limits.max_diff_lines.value, 5000);
        // Read back, the left-out limits are the defaults again.
        let back: Contract = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, c);
    }

    #[test]
    fn change_limits_set_by_the_policy_or_the_item_are_sealed() {
        let base = plan("- [ ] Add sub\n", "").entries[0].contract_sha.clone();
        let policy = plan("- [ ] Add sub\n", "[limits]\nmax_diff_lines = 300\n");
        assert!(limit_keys(&policy).contains(&"max_diff_lines".to_string()));
        assert_eq!(
            policy.entries[0].contract.limits.max_diff_lines.source,
            Source::Policy
        );
        assert_ne!(policy.entries[0].contract_sha, base);
        let item = plan("- [ ] Add sub\n  - max_changed_files: 3\n", "");
        let files = &item.entries[0].contract.limits.max_changed_files;
        assert_eq!((files.value, files.source), (3, Source::Item));
        assert_ne!(item.entries[0].contract_sha, base);
        let protected = plan("- [ ] Add sub\n", "protected = [\"migrations/**\"]\n");
        let sealed = &protected.entries[0].contract.protected;
        assert_eq!(sealed.len(), config::DEFAULT_PROTECTED.len() + 1);
        assert_eq!(&sealed[..sealed.len() - 1], config::DEFAULT_PROTECTED);
        assert_eq!(sealed.last().unwrap(), "migrations/**");
        assert_ne!(protected.entries[0].contract_sha, base);
        let allow = plan("- [ ] Add sub\n  - allow: .github/workflows/ci.yml\n", "");
        let c = &allow.entries[0].contract;
        assert_eq!(c.allow, [".github/workflows/ci.yml"]);
        assert!(
            c.canonical_json()
                .contains(r#""allow":[".github/workflows/ci.yml"]"#)
        );
        assert_ne!(allow.entries[0].contract_sha, base);
        // Not sealed: they are the night's, not the item's.
        let night = plan("- [ ] Add sub\n", "max_open_prs = 3\ndraft = true\n");
        assert_eq!(night.entries[0].contract_sha, base);
    }

    #[test]
    fn an_item_may_lower_a_change_limit_never_raise_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[limits]\nmax_changed_files = 5\n").unwrap();
        let loaded = config::load(&path).unwrap();
        let backlog = crate::backlog::parse(
            Path::new("NEXT.md"),
            "- [ ] Add sub\n  - max_changed_files: 6\n  - max_diff_lines: 6000\n",
        );
        let problems = build_plan(dir.path(), &backlog, &loaded).unwrap_err();
        let lines: Vec<usize> = problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, [2, 3], "{problems:?}");
        assert!(
            problems[0]
                .message
                .contains("raise [limits] max_changed_files")
        );
        assert!(problems[1].message.contains("policy cap of 5000"));
    }

    #[test]
    fn the_card_shows_the_protected_paths_and_the_allow_line() {
        let p = plan(
            "- [ ] Fix CI\n  - allow: `.github/workflows/ci.yml`\n- [ ] Add sub\n",
            "protected = [\"migrations/**\"]\n",
        );
        let allowed = card(&p.entries[0]);
        assert!(
            allowed.contains("\n   protected .github/workflows/**, .github/actions/**, "),
            "{allowed}"
        );
        assert!(
            allowed
                .contains(", .nightshift/**, migrations/** (never changed, whatever the scope)\n"),
            "{allowed}"
        );
        assert!(
            allowed.contains(
                "\n   allow     .github/workflows/ci.yml (lifts protected paths for this item)\n"
            ),
            "{allowed}"
        );
        assert!(!card(&p.entries[1]).contains("   allow "));
    }

    #[test]
    fn a_contract_sealed_before_the_defaults_still_protects_them() {
        let mut c = plan("- [ ] Add sub\n", "").entries.remove(0).contract;
        c.protected = vec!["migrations/**".into()];
        let limits = c.change_limits();
        let all = crate::proof::Scope::new(&limits.protected).unwrap();
        assert!(all.matches(".github/workflows/ci.yml"));
        assert!(all.matches("migrations/0001.sql"));
        assert!(limits.allow.is_empty());
    }
}
