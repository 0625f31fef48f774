//! The project's `.nightshift/config.toml` (docs/config.md).
//!
//! Every key is optional; a missing file means all defaults. Unknown keys and
//! bad values are errors that name the file, the line and the key, so a typo
//! made at 23:00 is caught by `plan`, not discovered at 03:00. This module
//! only reads and validates; how a limit is finally resolved for one item
//! (flag › item › recipe › policy caps › default) is the contract's business.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// Directory nightshift keeps inside the user's repository (docs/files.md).
pub const DIR: &str = ".nightshift";
/// Config file name inside [`DIR`].
pub const FILE: &str = "config.toml";

/// A validated configuration. Durations are [`Duration`]s, money is USD.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Backlog path relative to the repository root.
    pub backlog: String,
    /// Branch PRs are based on and target.
    pub base: String,
    /// Git remote to fetch from and push to.
    pub remote: String,
    /// Label put on every PR (created if missing).
    pub label: String,
    /// Label put on issues made from `FINDINGS:` blocks (docs/loop.md#findings-and-questions).
    pub findings_label: String,
    /// Gate commands, run with `sh -c` in the checkout (docs/loop.md#gate).
    pub verify: Vec<String>,
    /// Local time of the morning stop, `HH:MM` (docs/limits.md#deadline).
    #[serde(deserialize_with = "de_hhmm")]
    pub deadline: String,
    /// IANA zone name; default `$TZ`, then the system zone.
    pub timezone: Option<String>,
    /// `OWNER/REPO`; default `GH_REPO`, then the remote's URL (docs/github.md#repository).
    pub github_repo: Option<String>,
    /// Tick the backlog box inside each item's PR instead of `sync`.
    pub tick_in_pr: bool,
    /// Commands run in each fresh checkout before the writer.
    pub setup: Vec<String>,
    /// Unprivileged user that runs agents and gates when nightshift is root.
    pub agent_user: Option<String>,
    /// As root without `agent_user`, agents run only when this is `true`:
    /// they then run as root and can read everything nightshift holds (its
    /// memory with the GitHub token, the ledger's URL, the approval key);
    /// see docs/security.md. Ignored when `agent_user` is set or nightshift
    /// is not root.
    pub agents_as_root: bool,
    /// More variables agents and gates never see.
    pub secrets: Vec<String>,
    /// Variables passed to gate commands only.
    pub gate_env: Vec<String>,
    /// At most this many `FINDINGS:` issues are filed per item.
    pub max_findings_per_item: u32,
    /// Bytes one agent call may print (stdout and stderr together) before it
    /// is killed and its round fails; written `"1GiB"`, `"500MB"`, `"64KiB"`
    /// (docs/config.md). Default 1 GiB.
    #[serde(with = "human_size")]
    pub max_agent_output: u64,
    /// No new PR is opened while this many nightshift PRs of the repository
    /// are open: the items not started end `review_queue_full`
    /// (docs/loop.md "Before the checkout"). `None`: no limit (the default).
    pub max_open_prs: Option<u32>,
    /// Open PRs as drafts (GitHub's `draft: true`; docs/github.md#pull-requests).
    pub draft: bool,
    /// Globs of paths no writer may change, whatever its item's `scope:`
    /// (`scope:`'s matching rules, docs/backlog.md#details); a round that
    /// changes one breaks a rule (docs/loop.md#proof). Sealed in every
    /// contract. Default: none.
    pub protected: Vec<String>,
    /// Hard caps; an item may lower them, never raise them.
    pub limits: Limits,
    /// The agent that changes the code.
    pub writer: AgentConfig,
    /// The read-only agent that gives the verdict.
    pub reviewer: AgentConfig,
    /// Title prefix → prompt template (docs/backlog.md#recipes).
    pub recipes: Vec<Recipe>,
    /// Where a message goes when a run ends (docs/config.md#notify).
    pub notify: Targets,
    /// Workers per host: items drained at once, each in its own checkout
    /// slot (docs/workers.md). Default 1; `--jobs N` overrides it.
    pub jobs: u32,
    /// How long a worker's claim on an item lives without a heartbeat
    /// (docs/workers.md#leases): written like `"2m"`; at least 5 s.
    #[serde(with = "human_duration")]
    pub lease: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backlog: "NEXT.md".into(),
            base: "main".into(),
            remote: "origin".into(),
            label: "autopilot".into(),
            findings_label: "autopilot-found".into(),
            verify: vec!["cargo test".into()],
            deadline: "07:00".into(),
            timezone: None,
            github_repo: None,
            tick_in_pr: false,
            setup: vec![],
            agent_user: None,
            agents_as_root: false,
            secrets: vec![],
            gate_env: vec![],
            max_findings_per_item: 5,
            max_agent_output: DEFAULT_MAX_AGENT_OUTPUT,
            max_open_prs: None,
            draft: false,
            protected: vec![],
            limits: Limits::default(),
            writer: AgentConfig::default(),
            reviewer: AgentConfig::default(),
            recipes: vec![],
            notify: Targets::default(),
            jobs: 1,
            lease: crate::queue::DEFAULT_LEASE,
        }
    }
}

/// Policy caps (docs/config.md#limits). Durations in the file are written like
/// `45m`, `2h`, `120s` or `1h30m`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Writer rounds per item.
    pub rounds: u32,
    /// Wall time of one agent call.
    #[serde(with = "human_duration")]
    pub agent_timeout: Duration,
    /// Wall time of one gate command.
    #[serde(with = "human_duration")]
    pub gate_timeout: Duration,
    /// Wall time of one item, all rounds together.
    #[serde(with = "human_duration")]
    pub item_timeout: Duration,
    /// Tokens per item, as reported by the agents: input (cache reads and
    /// writes included, as claude and codex count them) plus output. Agents
    /// re-read their context every turn, so a long session reads millions of
    /// cached tokens for a few dollars: the default (20,000,000) sits near
    /// the default cost cap, not below it.
    pub max_tokens: u64,
    /// USD per item, as reported by the agents.
    pub max_cost_usd: f64,
    /// USD for the whole run.
    pub max_cost_usd_per_run: f64,
    /// Nights an item may fail before it is blocked.
    pub max_attempts: u32,
    /// Writer rounds one tended PR gets per night (docs/github.md "The
    /// second night"); across nights `max_attempts` bounds it.
    pub max_tend_rounds: u32,
    /// Added to a usage-limit reset before waking.
    #[serde(with = "human_duration")]
    pub limit_buffer: Duration,
    /// Shortest usage-limit sleep.
    #[serde(with = "human_duration")]
    pub limit_sleep_min: Duration,
    /// Longest usage-limit sleep.
    #[serde(with = "human_duration")]
    pub limit_sleep_max: Duration,
    /// Files one item's change may touch (added, modified, deleted or
    /// renamed, counted once each), from git (docs/loop.md#proof).
    pub max_changed_files: u64,
    /// Lines one item's change may add and remove together, from git
    /// (binary files count no lines).
    pub max_diff_lines: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            rounds: 3,
            agent_timeout: Duration::from_secs(60 * 60),
            gate_timeout: Duration::from_secs(20 * 60),
            item_timeout: Duration::from_secs(2 * 60 * 60),
            max_tokens: 20_000_000,
            max_cost_usd: 20.0,
            max_cost_usd_per_run: 100.0,
            max_attempts: 3,
            max_tend_rounds: 3,
            limit_buffer: Duration::from_secs(120),
            limit_sleep_min: Duration::from_secs(60),
            limit_sleep_max: Duration::from_secs(6 * 60 * 60),
            max_changed_files: DEFAULT_MAX_CHANGED_FILES,
            max_diff_lines: DEFAULT_MAX_DIFF_LINES,
        }
    }
}

/// The default `[limits] max_changed_files` (docs/config.md#limits).
pub const DEFAULT_MAX_CHANGED_FILES: u64 = 100;

/// The default `[limits] max_diff_lines` (docs/config.md#limits).
pub const DEFAULT_MAX_DIFF_LINES: u64 = 5000;

/// Which adapter drives an agent (docs/agents.md).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// Claude Code, `claude -p --output-format stream-json`.
    Claude,
    /// Codex CLI, `codex exec --json`.
    Codex,
    /// Any argv speaking the `command` protocol of docs/agents.md#command-protocol.
    Command,
}

impl fmt::Display for AgentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AgentKind::Claude => "claude",
            AgentKind::Codex => "codex",
            AgentKind::Command => "command",
        })
    }
}

/// One agent role's configuration (`[writer]`, `[reviewer]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Adapter.
    pub kind: AgentKind,
    /// argv: the executable and any extra arguments. Left out, it is the
    /// kind's own CLI (`claude`, `codex`); a `command` agent must name one.
    #[serde(default)]
    pub command: Vec<String>,
    /// Extra permission flags for a claude writer (default lets an
    /// unattended writer edit files and run commands: `--permission-mode
    /// acceptEdits --allowedTools Bash`).
    pub permission_flags: Option<Vec<String>>,
    /// Model name passed to the CLI, if any.
    pub model: Option<String>,
    /// The usage-limit account this agent's calls count against; every
    /// worker (on any host) using the same account pauses when one of them
    /// hits its limit (docs/workers.md#usage-limits). Default: the kind.
    pub account: Option<String>,
}

impl AgentConfig {
    /// The account its usage limits belong to (`account`, else the kind).
    pub fn account(&self) -> String {
        self.account
            .clone()
            .unwrap_or_else(|| self.kind.to_string())
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            kind: AgentKind::Claude,
            command: vec!["claude".into()],
            permission_flags: None,
            model: None,
            account: None,
        }
    }
}

/// A title prefix that selects a prompt template (docs/backlog.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Title prefix, matched after trimming (e.g. `加深`, `fix:`).
    pub prefix: String,
    /// Template file, relative to the repository root.
    pub prompt: String,
    /// Optional per-recipe round count (never above the policy cap).
    #[serde(default)]
    pub rounds: Option<u32>,
}

/// The `[notify]` table of the config. Every target is optional; none set:
/// nothing is sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Targets {
    /// URL that receives the run's summary ([`crate::notify::Summary`]) as a JSON `POST`.
    pub webhook: Option<String>,
    /// A Slack incoming-webhook URL: the same facts as Slack text and blocks.
    pub slack_webhook: Option<String>,
    /// A program and its arguments, run with the JSON summary on stdin (no
    /// shell; the agents' scrubbed environment).
    pub command: Vec<String>,
}

impl Targets {
    /// True when no target is set.
    pub fn is_empty(&self) -> bool {
        self.webhook.is_none() && self.slack_webhook.is_none() && self.command.is_empty()
    }

    /// Checks the URLs parse as http(s) URLs.
    ///
    /// # Errors
    /// The key and what is wrong with it.
    pub fn validate(&self) -> Result<(), String> {
        for (key, url) in [
            ("notify.webhook", &self.webhook),
            ("notify.slack_webhook", &self.slack_webhook),
        ] {
            if let Some(u) = url {
                let parsed = url::Url::parse(u).map_err(|e| {
                    format!("`{key}`: {e}; write a full URL such as \"https://example.com/hook\"")
                })?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!(
                        "`{key}`: only http and https URLs are sent to, not {}",
                        parsed.scheme()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A config that could not be used. Display gives `file:line: message`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read: not a regular file, too
    /// large, or an I/O error (the message names the file).
    #[error("cannot read the config: {0}")]
    Read(crate::file::FileError),
    /// TOML syntax, an unknown key or a bad value.
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        key: Option<String>,
        message: String,
    },
}

/// Where the config was found and what it says.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The config file path (it may not exist: then all defaults).
    pub path: PathBuf,
    /// Whether the file existed.
    pub exists: bool,
    /// The values.
    pub config: Config,
}

/// Reads the config at `path`, or the defaults if it does not exist.
///
/// # Errors
/// [`ConfigError::Read`] when the file cannot be read, and
/// [`ConfigError::Invalid`] naming file, line and key for TOML errors,
/// unknown keys (`deny_unknown_fields`) and bad values.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let text = match crate::file::read_regular_text(path, crate::file::MAX_TEXT_BYTES) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => {
            return Ok(Loaded {
                path: path.to_path_buf(),
                exists: false,
                config: Config::default(),
            });
        }
        Err(e) => return Err(ConfigError::Read(e)),
    };
    let config = parse(path, &text)?;
    Ok(Loaded {
        path: path.to_path_buf(),
        exists: true,
        config,
    })
}

/// Parses config text; `path` is only used in error messages.
///
/// # Errors
/// [`ConfigError::Invalid`] as for [`load`].
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let config: Config = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
        let message = e.message().trim().to_string();
        let key = key_in_message(&message).or_else(|| e.span().and_then(|s| key_at(text, s.start)));
        let line_text = text.lines().nth(line - 1).unwrap_or("");
        let message = with_fix(key.as_deref(), &with_hint(&message), line_text);
        let message = match &key {
            Some(k) if !message.contains(&format!("`{k}`")) => format!("`{k}`: {message}"),
            _ => message,
        };
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            key,
            message,
        }
    })?;
    let mut config = config;
    for a in [&mut config.writer, &mut config.reviewer] {
        if a.command.is_empty() {
            match a.kind {
                AgentKind::Claude => a.command = vec!["claude".into()],
                AgentKind::Codex => a.command = vec!["codex".into()],
                // Left empty: `validate` says what to write.
                AgentKind::Command => {}
            }
        }
    }
    validate(path, text, &config)?;
    validate_workers(path, text, &config)?;
    Ok(config)
}

/// `jobs` and `lease` (docs/workers.md): at least one worker, at most
/// [`MAX_JOBS`]; a lease a heartbeat fits in.
fn validate_workers(path: &Path, text: &str, c: &Config) -> Result<(), ConfigError> {
    let bad = |key: &str, message: String| refusal(path, text, key, message);
    if c.jobs == 0 || c.jobs > MAX_JOBS {
        return Err(bad(
            "jobs",
            format!(
                "must be between 1 and {MAX_JOBS} (workers on this host, each with its own checkout)"
            ),
        ));
    }
    if c.lease < crate::queue::MIN_LEASE {
        return Err(bad(
            "lease",
            "must be at least \"5s\" (a heartbeat renews it every third of it); the default is \"2m\"".into(),
        ));
    }
    let named = [
        ("writer.account", &c.writer),
        ("reviewer.account", &c.reviewer),
    ];
    if let Some((key, _)) = named
        .iter()
        .find(|(_, a)| a.account.as_deref().is_some_and(|n| n.trim().is_empty()))
    {
        return Err(bad(
            key,
            "must not be empty: name the account, or leave the key out (the agent's kind)".into(),
        ));
    }
    Ok(())
}

/// The most workers one host may run (`jobs`): each holds a checkout and
/// an agent session.
pub const MAX_JOBS: u32 = 64;

/// Checks that serde cannot express (ranges, emptiness, consistency),
/// table by table; the first refusal names the file, the line and the key.
fn validate(path: &Path, text: &str, c: &Config) -> Result<(), ConfigError> {
    let bad = |key: &str, message: String| refusal(path, text, key, message);
    validate_limits(&c.limits, &bad)?;
    validate_env(c, &bad)?;
    if let Err(message) = c.notify.validate() {
        let key = message.split('`').nth(1).unwrap_or("notify").to_string();
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            line: line_of_key(text, key.trim_start_matches("notify.")),
            key: Some(key),
            message,
        });
    }
    validate_agents(c, &bad)?;
    validate_names(c, &bad)?;
    validate_review_work(c, &bad)?;
    validate_recipes(c, &bad)
}

/// How a `validate_*` check refuses a value: the key and what is wrong.
type Refuse<'a> = dyn Fn(&str, String) -> ConfigError + 'a;

/// `[limits]`: rounds, tokens, attempts, money, sleeps and change sizes in range.
fn validate_limits(l: &Limits, bad: &Refuse<'_>) -> Result<(), ConfigError> {
    if l.rounds == 0 {
        return Err(bad("rounds", "must be at least 1".into()));
    }
    if l.rounds > MAX_ROUNDS {
        return Err(bad(
            "rounds",
            format!(
                "must be at most {MAX_ROUNDS} (more rounds of the same item rarely help; no_progress stops them anyway)"
            ),
        ));
    }
    if l.max_tokens < 1000 {
        return Err(bad(
            "max_tokens",
            "must be at least 1000 (a single agent call uses more)".into(),
        ));
    }
    if l.max_attempts == 0 {
        return Err(bad("max_attempts", "must be at least 1".into()));
    }
    if l.max_tend_rounds == 0 || l.max_tend_rounds > MAX_ROUNDS {
        return Err(bad(
            "max_tend_rounds",
            format!("must be between 1 and {MAX_ROUNDS}"),
        ));
    }
    for (key, usd) in [
        ("max_cost_usd", l.max_cost_usd),
        ("max_cost_usd_per_run", l.max_cost_usd_per_run),
    ] {
        if !(usd > 0.0 && usd.is_finite()) {
            return Err(bad(key, "must be a positive number of USD".into()));
        }
        if usd > MAX_COST_USD {
            return Err(bad(
                key,
                format!(
                    "must be at most {MAX_COST_USD} USD (a cap is for a night's spend; a higher one is no cap at all)"
                ),
            ));
        }
    }
    if l.limit_sleep_min > l.limit_sleep_max {
        return Err(bad(
            "limit_sleep_min",
            "is longer than `limit_sleep_max`; lower it or raise `limit_sleep_max`".into(),
        ));
    }
    for (key, n) in [
        ("max_changed_files", l.max_changed_files),
        ("max_diff_lines", l.max_diff_lines),
    ] {
        if n == 0 {
            return Err(bad(
                key,
                "must be at least 1 (every change touches something)".into(),
            ));
        }
    }
    Ok(())
}

/// `secrets`, `gate_env` and `max_agent_output`: what agents and gates see.
fn validate_env(c: &Config, bad: &Refuse<'_>) -> Result<(), ConfigError> {
    if let Some(bad_name) = c
        .secrets
        .iter()
        .find(|n| n.trim().is_empty() || n.contains('=') || ESSENTIAL_VARS.contains(&n.as_str()))
    {
        return Err(bad(
            "secrets",
            format!(
                "{bad_name:?} cannot be a secret: {} agents and gates need it; list the variables that hold credentials",
                if bad_name.trim().is_empty() || bad_name.contains('=') {
                    "not a variable name;".to_string()
                } else {
                    format!("{bad_name} is one")
                }
            ),
        ));
    }
    // A secret is kept from gates, a `gate_env` variable is handed to
    // them: one name cannot be both (docs/security.md).
    if let Some(both) = c.secrets.iter().find(|n| c.gate_env.contains(n)) {
        return Err(bad(
            "gate_env",
            format!(
                "{both:?} is also listed in `secrets`: a secret never reaches a gate, a `gate_env` variable does; remove it from `secrets` (the gate gets it, agents still do not) or from `gate_env` (no one gets it)"
            ),
        ));
    }
    if c.max_agent_output < MIN_AGENT_OUTPUT {
        return Err(bad(
            "max_agent_output",
            format!(
                "must be at least {MIN_AGENT_OUTPUT} bytes (\"1KiB\"); the default is \"1GiB\""
            ),
        ));
    }
    Ok(())
}

/// `[writer]` and `[reviewer]`: an executable, and no codex flag nightshift owns.
fn validate_agents(c: &Config, bad: &Refuse<'_>) -> Result<(), ConfigError> {
    for (name, a) in [("writer", &c.writer), ("reviewer", &c.reviewer)] {
        if a.command.is_empty() || a.command[0].trim().is_empty() {
            let example = if a.kind == AgentKind::Command {
                "./scripts/agent.sh".to_string()
            } else {
                a.kind.to_string()
            };
            return Err(bad(
                "command",
                format!("[{name}] command must name an executable, e.g. command = [\"{example}\"]"),
            ));
        }
        if a.kind == AgentKind::Codex
            && let Some(arg) = codex_conflicting_argument(&a.command)
        {
            return Err(bad(
                "command",
                format!(
                    "[{name}] command must not carry {arg:?}: nightshift sets codex's --json, --sandbox (writer workspace-write, reviewer read-only) and --output-schema itself"
                ),
            ));
        }
    }
    Ok(())
}

/// Names and paths of the top level: non-empty, a known zone, `OWNER/REPO`,
/// real commands, a backlog inside the repository.
fn validate_names(c: &Config, bad: &Refuse<'_>) -> Result<(), ConfigError> {
    for (key, v) in [
        ("backlog", &c.backlog),
        ("base", &c.base),
        ("remote", &c.remote),
        ("label", &c.label),
    ] {
        if v.trim().is_empty() {
            return Err(bad(key, "must not be empty".into()));
        }
    }
    if let Some(tz) = &c.timezone
        && tz.parse::<chrono_tz::Tz>().is_err()
    {
        return Err(bad(
            "timezone",
            format!("unknown time zone {tz:?}; use an IANA name such as \"Asia/Taipei\""),
        ));
    }
    if let Some(r) = &c.github_repo {
        let parts: Vec<&str> = r.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(bad(
                "github_repo",
                format!("{r:?} is not OWNER/REPO; write e.g. `github_repo = \"owner/repo\"`"),
            ));
        }
    }
    if let Some(key) = [("verify", &c.verify), ("setup", &c.setup)]
        .into_iter()
        .find(|(_, cmds)| cmds.iter().any(|v| v.trim().is_empty()))
        .map(|(key, _)| key)
    {
        return Err(bad(
            key,
            "an empty command would always pass; remove it or write the command".into(),
        ));
    }
    if !is_inside_repo(&c.backlog) {
        return Err(bad(
            "backlog",
            format!(
                "{:?} must be a path inside the repository (relative, no `..`)",
                c.backlog
            ),
        ));
    }
    Ok(())
}

/// `max_open_prs` and `protected` (docs/config.md): a limit of at least one
/// PR, and globs that compile under `scope:`'s rules.
fn validate_review_work(c: &Config, bad: &Refuse<'_>) -> Result<(), ConfigError> {
    if c.max_open_prs == Some(0) {
        return Err(bad(
            "max_open_prs",
            "must be at least 1; remove the key for no limit, e.g. `max_open_prs = 10`".into(),
        ));
    }
    for glob in &c.protected {
        if glob.trim().is_empty() || glob.trim() == "/" || glob.trim() == "./" {
            return Err(bad(
                "protected",
                format!(
                    "{glob:?} is not a path glob; write e.g. `protected = [\"migrations/**\", \".github/**\"]`"
                ),
            ));
        }
        if let Err(e) = crate::proof::Scope::new(std::slice::from_ref(glob)) {
            let why = match e {
                crate::proof::ProofError::Scope { source, .. } => source.kind().to_string(),
                other => other.to_string(),
            };
            return Err(bad(
                "protected",
                format!(
                    "bad glob {glob:?}: {why}; write e.g. `protected = [\"migrations/**\", \".github/**\"]`"
                ),
            ));
        }
    }
    Ok(())
}

/// `[[recipes]]`: a template inside the repository, a prefix, rounds within the cap.
fn validate_recipes(c: &Config, bad: &Refuse<'_>) -> Result<(), ConfigError> {
    for r in &c.recipes {
        if !is_inside_repo(&r.prompt) {
            return Err(bad(
                "prompt",
                format!(
                    "recipe {:?}: the template {:?} must be a path inside the repository (relative, no `..`)",
                    r.prefix, r.prompt
                ),
            ));
        }
        if r.prefix.trim().is_empty() {
            return Err(bad(
                "prefix",
                "a recipe needs a non-empty title prefix".into(),
            ));
        }
        if let Some(n) = r.rounds
            && (n == 0 || n > c.limits.rounds)
        {
            return Err(bad(
                "rounds",
                format!(
                    "recipe {:?}: rounds must be 1..={} (the policy cap)",
                    r.prefix, c.limits.rounds
                ),
            ));
        }
    }
    Ok(())
}

/// A value `validate` refuses, at the line of `key`, with what to write:
/// the message's own fix, else the key's line in [`TEMPLATE`].
fn refusal(path: &Path, text: &str, key: &str, message: String) -> ConfigError {
    let says_fix = [
        "e.g.", "write", "remove", "lower", "list the", "use ", "create",
    ]
    .iter()
    .any(|w| message.contains(w));
    let message = match example_line(key) {
        Some(l) if !says_fix => format!("{message}; write e.g. `{l}`"),
        _ => message,
    };
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line: line_of_key(text, key),
        key: Some(key.to_string()),
        message: format!("`{key}`: {message}"),
    }
}

/// A relative path that cannot leave the repository root.
fn is_inside_repo(p: &str) -> bool {
    let path = Path::new(p);
    !p.trim().is_empty()
        && path.is_relative()
        && !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// serde's "unknown field `x`, expected one of `a`, `b`" with the nearest
/// known key as a suggestion, and where the keys are documented.
fn with_hint(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    let given = rest.split('`').next().unwrap_or("");
    let known: Vec<&str> = message
        .split("expected ")
        .nth(1)
        .map(|l| l.split('`').skip(1).step_by(2).collect())
        .unwrap_or_default();
    let nearest = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(given, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min();
    if let Some((_, k)) = nearest {
        return format!(
            "{message}; did you mean `{k}`? (the README's Configuration section lists every key)"
        );
    }
    // A key of another table, most often one appended at the end of the file,
    // where it lands in the last `[table]` above it.
    for (table, keys) in [
        ("the top level", keys_of("")),
        ("[limits]", keys_of("[limits]")),
    ] {
        if keys.iter().map(String::as_str).eq(known.iter().copied()) {
            continue;
        }
        if let Some((_, k)) = keys
            .iter()
            .map(|k| (strsim::damerau_levenshtein(given, k), k))
            .filter(|(d, k)| *d <= 2.max(k.len() / 3))
            .min()
        {
            let place = if table == "the top level" {
                "above the first `[table]` line"
            } else {
                "under the `[limits]` line"
            };
            return format!(
                "{message}; `{k}` is a key of {table}: move it {place} (a key belongs to the last `[table]` header above it)"
            );
        }
    }
    format!(
        "{message}; remove the key or fix its spelling (the README's Configuration section lists every key)"
    )
}

/// `message` with the fix for a config read error that has none yet: the
/// line to write instead, from the key's own value where it can be kept
/// (`verify = "sh test.sh"` → `verify = ["sh test.sh"]`), else the key's line
/// in [`TEMPLATE`] (`rounds = 3`). `line_text` is the offending line.
fn with_fix(key: Option<&str>, message: &str, line_text: &str) -> String {
    // unknown fields and validate's own messages already say what to do.
    if message.contains("; did you mean")
        || message.contains("; remove the key")
        || message.contains("is a key of")
        || message.contains("; write ")
        || message.contains("; use ")
    {
        return message.to_string();
    }
    let value = line_text
        .split_once('=')
        .map(|(_, v)| v.trim())
        .unwrap_or("");
    let fix = match key {
        Some(k) if message.contains("expected a sequence") && !value.is_empty() => {
            if value.starts_with('"') || value.starts_with('\'') {
                format!("write the list in brackets: `{k} = [{value}]`")
            } else {
                format!("write a list of strings: `{k} = [\"{}\"]`", value.trim_matches(['"', '\'']))
            }
        }
        Some(k) if message.contains("expected struct") || message.contains("expected a map") => {
            format!("`{k}` is a table: write `[{k}]` on its own line and its keys below it (see the template `nightshift init` writes)")
        }
        Some(k) if message.starts_with("unknown variant") => {
            let given = message.split('`').nth(1).unwrap_or("");
            let known: Vec<&str> = message
                .split("expected ")
                .nth(1)
                .map(|l| l.split('`').skip(1).step_by(2).collect())
                .unwrap_or_default();
            let nearest = known
                .iter()
                .min_by_key(|v| strsim::damerau_levenshtein(given, v))
                .copied()
                .unwrap_or("");
            format!("write e.g. `{k} = \"{nearest}\"`")
        }
        Some(k) if message.starts_with("missing field") => match example_line(k) {
            Some(line) => format!("add `{line}`"),
            None => format!("add the key `{k}`"),
        },
        Some(k) if message.starts_with("duplicate") => {
            format!("keep one `{k}` line and delete the other")
        }
        Some(k) => match example_line(k) {
            Some(line) => format!("write e.g. `{line}`"),
            None => "see the README's Configuration section for the key's form".to_string(),
        },
        _ if message.contains("expected a sequence")
            && line_text.trim_start().starts_with('[')
            && !line_text.trim_start().starts_with("[[") =>
        {
            format!(
                "write `[{}]` (double brackets: each one adds an entry to the list)",
                line_text.trim()
            )
        }
        None if message.contains("string") || message.contains("quote") => {
            "put text values in double quotes, e.g. `base = \"main\"`, and lists in brackets, e.g. `verify = [\"make test\"]`".to_string()
        }
        None => "each line is `key = value` (text in double quotes, lists in brackets, `[table]` headers on their own line); see the README's Configuration section".to_string(),
    };
    format!("{message}; {fix}")
}

/// The `key = value` line [`TEMPLATE`] shows for `key` (commented-out
/// defaults included, trailing comment dropped), if it shows one.
fn example_line(key: &str) -> Option<String> {
    TEMPLATE.lines().find_map(|l| {
        let l = l.trim_start_matches(['#', ' ']);
        let (k, rest) = l.split_once('=')?;
        if k.trim() != key {
            return None;
        }
        let value = match rest.find(" #") {
            Some(i) => &rest[..i],
            None => rest,
        };
        Some(format!("{key} = {}", value.trim()))
    })
}

/// The keys serde accepts in `table` (`""`: the top level, or a header such
/// as `"[limits]"`), read from its own "unknown field … expected one of"
/// message, so the list never drifts from the structs.
fn keys_of(table: &str) -> Vec<String> {
    let probe = format!("{table}\nnightshift_probe_key = 1\n");
    let Err(e) = toml::from_str::<Config>(&probe) else {
        return Vec::new();
    };
    e.message()
        .split("expected ")
        .nth(1)
        .map(|l| {
            l.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// 1-based line number of byte offset `at`.
pub fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// The key serde names in `message`: only in the messages that quote a
/// key (`unknown field`, `missing field`, `duplicate field`); in "invalid
/// type: integer `5`" the quoted text is the value.
fn key_in_message(message: &str) -> Option<String> {
    if !["unknown field", "missing field", "duplicate field"]
        .iter()
        .any(|p| message.starts_with(p))
    {
        return None;
    }
    let start = message.find('`')? + 1;
    let end = start + message[start..].find('`')?;
    Some(message[start..end].to_string())
}

fn key_at(text: &str, at: usize) -> Option<String> {
    let line_start = text[..at.min(text.len())]
        .rfind('\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    let line = text[line_start..].lines().next()?;
    let key = line.split('=').next()?.trim();
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_string())
}

fn line_of_key(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            l.trim_start().starts_with(key)
                && l[l.find(key).unwrap_or(0) + key.len()..]
                    .trim_start()
                    .starts_with('=')
        })
        .map(|i| i + 1)
        .unwrap_or(1)
}

fn de_hhmm<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    parse_hhmm(&s).map_err(serde::de::Error::custom)?;
    Ok(s)
}

/// Parses a local time of day `HH:MM` (24-hour clock) into (hour, minute).
///
/// # Errors
/// A message naming the accepted form.
pub fn parse_hhmm(s: &str) -> Result<(u32, u32), String> {
    let (h, m) = s
        .trim()
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not a time of day; write HH:MM, e.g. \"07:00\""))?;
    let h: u32 = h
        .parse()
        .map_err(|_| format!("{s:?}: hour is not a number; write HH:MM"))?;
    let m: u32 = m
        .parse()
        .map_err(|_| format!("{s:?}: minute is not a number; write HH:MM"))?;
    if h > 23 || m > 59 || s.trim().len() != 5 {
        return Err(format!(
            "{s:?} is not a valid time of day; write HH:MM between 00:00 and 23:59"
        ));
    }
    Ok((h, m))
}

/// The names in the config's `secrets` list, read before anything else so
/// that `main` can wipe them from nightshift's own environment while it
/// still has one thread (docs/agents.md: an agent running as the same user can read
/// `/proc/<nightshift>/environ`). `args` are the command-line arguments
/// (for `--config PATH` and `--repo PATH`, else `NIGHTSHIFT_CONFIG` and
/// `NIGHTSHIFT_REPO`); the config is that file, else
/// `.nightshift/config.toml` in the nearest directory that has one, from the
/// repository path (or the current directory) up. Lenient: an unreadable or invalid config gives no
/// names here (the real load reports it).
pub fn secret_names_hint(args: &[String]) -> Vec<String> {
    let flag = |name: &str| {
        args.iter().enumerate().find_map(|(i, a)| {
            a.strip_prefix(&format!("{name}="))
                .map(String::from)
                .or_else(|| (a == name).then(|| args.get(i + 1).cloned()).flatten())
        })
    };
    // `--repo` may name any directory inside the repository (git finds its
    // top): search up from it as from the current directory.
    let nearest = |start: PathBuf| {
        start
            .canonicalize()
            .unwrap_or(start)
            .ancestors()
            .map(|a| a.join(DIR).join(FILE))
            .find(|p| p.is_file())
    };
    // The flags, else their variables (as clap reads them: `NIGHTSHIFT_CONFIG`,
    // `NIGHTSHIFT_REPO`; a cron job sets these rather than a working directory).
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let path = match (
        flag("--config").or_else(|| var("NIGHTSHIFT_CONFIG")),
        flag("--repo").or_else(|| var("NIGHTSHIFT_REPO")),
    ) {
        (Some(c), _) => Some(PathBuf::from(c)),
        (None, Some(r)) => nearest(PathBuf::from(r)),
        (None, None) => std::env::current_dir().ok().and_then(nearest),
    };
    // A special file here is refused later, by `load`, with its message.
    let Some(text) =
        path.and_then(|p| crate::file::read_regular_text(&p, crate::file::MAX_TEXT_BYTES).ok())
    else {
        return Vec::new();
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    table
        .get("secrets")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_str)
        .filter(|n| !n.is_empty() && !n.contains(['=', '\0']))
        .map(String::from)
        .collect()
}

/// The most rounds a config accepts for one item.
pub const MAX_ROUNDS: u32 = 100;

/// The highest `max_cost_usd` / `max_cost_usd_per_run` accepted, in USD: far above any
/// night's spend, and small enough that cards and reports print it as a plain number.
pub const MAX_COST_USD: f64 = 1_000_000.0;

/// Variables agents and gates cannot run without: never `secrets`.
const ESSENTIAL_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "LANG", "TERM",
];

/// The longest duration a config accepts: 366 days, in seconds.
pub const MAX_DURATION_SECS: u64 = crate::duration::MAX_SECS;

/// Parses a human duration with the one grammar of [`crate::duration`]
/// (`90s`, `45m`, `2h`, `1h30m`, `10 minutes`, `1d`).
///
/// # Errors
/// A message naming what is wrong and the accepted forms.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse(s).map_err(|e| e.to_string())
}

/// Formats a duration the way the config writes it (`1h30m`, `45m`, `90s`);
/// [`crate::duration::format`].
pub fn format_duration(d: Duration) -> String {
    crate::duration::format(d)
}

/// The default `max_agent_output`: 1 GiB, far above what an agent prints in
/// an hour of honest work, far below a full disk.
pub const DEFAULT_MAX_AGENT_OUTPUT: u64 = 1024 * 1024 * 1024;

/// The smallest `max_agent_output`: 1 KiB (a smaller cap would kill every
/// agent at its first lines).
const MIN_AGENT_OUTPUT: u64 = 1024;

/// Sizes written as `"1GiB"`, `"500MB"`, `"64KiB"` or a number of bytes
/// (the `bytesize` crate's forms: SI and IEC units, any case).
mod human_size {
    use super::*;
    pub fn serialize<S: serde::Serializer>(bytes: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&bytesize::ByteSize(*bytes).display().iec().to_string())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Size {
            Bytes(u64),
            Text(String),
        }
        match Size::deserialize(d)? {
            Size::Bytes(n) => Ok(n),
            Size::Text(s) => s.trim().parse::<bytesize::ByteSize>().map(|b| b.0).map_err(|_| {
                serde::de::Error::custom(format!(
                    "{s:?} is not a size; write a number with a unit, e.g. \"1GiB\", \"500MB\", \"64KiB\""
                ))
            }),
        }
    }
}

mod human_duration {
    use super::*;
    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

/// The gate `nightshift init` writes when it finds no test command in the
/// repository: it fails every item with a message saying what to set, and
/// `doctor` and `plan` refuse it by name (docs/config.md `verify`).
pub const PLACEHOLDER_GATE: &str = "echo 'nightshift: no gate set; write your test command in verify in .nightshift/config.toml' >&2; exit 1";

/// [`TEMPLATE`] with `verify` set to `gate` (a guessed command), or to
/// [`PLACEHOLDER_GATE`] marked as one when `gate` is `None`.
pub fn template_with_gate(gate: Option<&str>) -> String {
    let line = TEMPLATE
        .lines()
        .find(|l| l.starts_with("verify = "))
        .expect("the template sets verify");
    let new = match gate {
        Some(g) => format!(
            "verify = {}        # gate commands, run with `sh -c` in the checkout (guessed by init)",
            toml::Value::from(vec![g])
        ),
        None => format!(
            "# PLACEHOLDER: set your test command (e.g. [\"sh test.sh\"]); nightshift init found none.\nverify = {}",
            toml::Value::from(vec![PLACEHOLDER_GATE])
        ),
    };
    TEMPLATE.replacen(line, &new, 1)
}

/// The commented config `nightshift init` writes (docs/config.md).
pub const TEMPLATE: &str = r#"# nightshift configuration (README: Configuration). Every key is optional; the values
# shown are the defaults unless marked "example".

backlog = "NEXT.md"            # the markdown checkbox backlog
base = "main"                  # PRs start from <remote>/<base> and target it
remote = "origin"
label = "autopilot"            # put on every PR (created if missing)
findings_label = "autopilot-found"
verify = ["cargo test"]        # gate commands, run with `sh -c` in the checkout
deadline = "07:00"             # no item or round starts after this local time
# timezone = "Asia/Taipei"     # default: $TZ, then the system zone
# github_repo = "owner/repo"   # default: GH_REPO, then the remote's URL
tick_in_pr = false             # true: each PR ticks its own box (PRs then conflict)
setup = []                     # e.g. ["npm ci"], run in each fresh checkout
# agent_user = "nightshift"    # run agents and gates as this user when root
# agents_as_root = false       # root without agent_user: true lets agents run as root (they can read the token)
secrets = []                   # more variables agents and gates never see
gate_env = []                  # variables passed to gate commands only
max_findings_per_item = 5      # writer FINDINGS filed as issues, per item
max_agent_output = "1GiB"      # an agent call printing more is killed; its round fails
# max_open_prs = 10            # example: no new PR while 10 nightshift PRs are open (default: no limit)
draft = false                  # true: open PRs as drafts
protected = []                 # e.g. ["migrations/**", ".github/**"]: paths no writer may change

[limits]                       # caps; an item may lower them, never raise them.
# The defaults, shown commented out: uncomment a line to set your own cap
# (cards then show it as "policy" rather than "default").
# rounds = 3
# agent_timeout = "60m"
# gate_timeout = "20m"
# item_timeout = "2h"
# max_tokens = 20000000          # per item, input (cache reads included) + output, as the agents report
# max_cost_usd = 20.0            # per item
# max_cost_usd_per_run = 100.0   # for the whole night
# max_attempts = 3               # nights an item may fail before it is blocked
# max_tend_rounds = 3            # writer rounds per tended PR per night
# limit_buffer = "120s"
# limit_sleep_min = "60s"
# limit_sleep_max = "6h"
# max_changed_files = 100        # files one item's change may touch
# max_diff_lines = 5000          # lines one item's change may add and remove

[writer]
kind = "claude"                # claude | codex | command
command = ["claude"]           # the executable and any extra arguments

[reviewer]
kind = "claude"
command = ["claude"]

# [[recipes]]                  # a title prefix selects a prompt template
# prefix = "fix:"
# prompt = "docs/FIX.md"
"#;

/// The first argument of a configured codex `command` that would fight the
/// flags nightshift sets itself (`--json`, the sandbox, the reviewer's output
/// schema) or lift the sandbox (`--dangerously-bypass-approvals-and-sandbox`,
/// a `-c sandbox_mode=…` override), if any. [`validate`] rejects such a
/// command (docs/agents.md#read-only-reviewer: the reviewer is read-only by construction).
pub fn codex_conflicting_argument(command: &[String]) -> Option<String> {
    const OWNED: &[&str] = &[
        "--json",
        "--sandbox",
        "-s",
        "--output-schema",
        "--dangerously-bypass-approvals-and-sandbox",
        "--yolo",
        "--full-auto",
    ];
    let mut config_value = false;
    for a in command.iter().skip(1) {
        if config_value {
            config_value = false;
            if a.trim_start().starts_with("sandbox_mode") {
                return Some(a.clone());
            }
            continue;
        }
        if a == "-c" || a == "--config" {
            config_value = true;
            continue;
        }
        let name = a.split('=').next().unwrap_or(a);
        if OWNED.contains(&name) || (a.starts_with("-s") && !a.starts_with("--") && a.len() > 2) {
            return Some(a.clone());
        }
    }
    None
}
#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (usize, Option<String>, String) {
        match parse(Path::new(".nightshift/config.toml"), text) {
            Err(ConfigError::Invalid {
                line, key, message, ..
            }) => (line, key, message),
            other => panic!("expected an invalid config, got {other:?}"),
        }
    }

    #[test]
    fn template_parses_to_the_defaults() {
        let c = parse(Path::new("t"), TEMPLATE).unwrap();
        let d = Config::default();
        assert_eq!(c.limits, d.limits);
        assert_eq!(c.verify, d.verify);
        assert_eq!(c.writer, d.writer);
        // The commented-out caps are the defaults, so uncommenting one changes nothing by itself.
        let mut in_limits = false;
        let uncommented: String = TEMPLATE
            .lines()
            .map(|l| {
                if l.starts_with('[') {
                    in_limits = l.starts_with("[limits]");
                }
                if in_limits {
                    l.strip_prefix("# ")
                        .filter(|r| r.split_whitespace().nth(1) == Some("="))
                        .unwrap_or(l)
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert!(uncommented.contains("\nrounds = 3\n"), "{uncommented}");
        assert_eq!(
            parse(Path::new("t"), &uncommented).unwrap().limits,
            d.limits
        );
    }

    #[test]
    fn init_writes_a_guessed_gate_or_a_marked_placeholder() {
        let c = parse(Path::new("t"), &template_with_gate(Some("go test ./..."))).unwrap();
        assert_eq!(c.verify, ["go test ./..."]);
        let text = template_with_gate(None);
        assert!(
            text.contains("# PLACEHOLDER: set your test command"),
            "{text}"
        );
        assert_eq!(
            parse(Path::new("t"), &text).unwrap().verify,
            [PLACEHOLDER_GATE]
        );
    }

    #[test]
    fn every_read_error_says_what_to_write() {
        let cases = [
            ("verify = \"sh test.sh\"\n", "`verify = [\"sh test.sh\"]`"),
            ("setup = \"npm ci\"\n", "`setup = [\"npm ci\"]`"),
            ("backlog = 5\n", "`backlog = \"NEXT.md\"`"),
            ("tick_in_pr = \"yes\"\n", "`tick_in_pr = false`"),
            (
                "max_findings_per_item = \"5\"\n",
                "`max_findings_per_item = 5`",
            ),
            ("[limits]\nrounds = -1\n", "`rounds = 3`"),
            ("[limits]\nmax_cost_usd = \"20\"\n", "`max_cost_usd = 20.0`"),
            (
                "[limits]\nagent_timeout = 45\n",
                "`agent_timeout = \"60m\"`",
            ),
            (
                "[limits]\nagent_timeout = \"0s\"\n",
                "`agent_timeout = \"60m\"`",
            ),
            ("[limits]\ngate_timeout = \"soon\"\n", "write e.g. \"45m\""),
            ("[writer]\nkind = \"claud\"\n", "`kind = \"claude\"`"),
            (
                "[writer]\ncommand = \"claude\"\n",
                "`command = [\"claude\"]`",
            ),
            ("writer = \"claude\"\n", "write `[writer]` on its own line"),
            ("deadline = \"7am\"\n", "write HH:MM"),
            ("timezone = \"Mars/Base\"\n", "use an IANA name"),
            ("github_repo = \"nope\"\n", "`github_repo = \"owner/repo\"`"),
            ("base = main\n", "`base = \"main\"`"),
            ("base = \"a\"\nbase = \"b\"\n", "keep one"),
            (
                "[[recipes]]\nprefix = \"fix:\"\n",
                "add `prompt = \"docs/FIX.md\"`",
            ),
            ("[recipes]\nprefix = \"fix:\"\n", "[[recipes]]"),
            ("[limits]\nlimit_sleep_min = \"7h\"\n", "lower it or raise"),
            ("base = \"\"\n", "`base = \"main\"`"),
            ("max_open_prs = 0\n", "`max_open_prs = 10`"),
            ("max_open_prs = \"many\"\n", "`max_open_prs = 10`"),
            ("draft = 1\n", "`draft = false`"),
            ("protected = \"x/**\"\n", "`protected = [\"x/**\"]`"),
            ("protected = [\"a[b\"]\n", "`protected = [\"migrations/**\""),
            (
                "[limits]\nmax_changed_files = 0\n",
                "`max_changed_files = 100`",
            ),
            (
                "[limits]\nmax_diff_lines = \"5k\"\n",
                "`max_diff_lines = 5000`",
            ),
        ];
        for (text, fix) in cases {
            let (line, _, message) = err(text);
            assert!(line >= 1, "{text}");
            assert!(message.contains(fix), "{text:?} → {message}");
        }
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let (line, key, message) = err("base = \"main\"\nverfy = [\"x\"]\n");
        assert_eq!(line, 2);
        assert_eq!(key.as_deref(), Some("verfy"));
        assert!(message.contains("unknown field"), "{message}");
    }

    #[test]
    fn unknown_key_in_a_table() {
        let (line, key, message) = err("[limits]\nrounds = 2\nroundz = 3\n");
        assert_eq!(line, 3);
        assert_eq!(key.as_deref(), Some("roundz"));
        assert!(message.contains("did you mean `rounds`?"), "{message}");
    }

    #[test]
    fn a_key_appended_below_another_table_is_told_where_it_belongs() {
        let tail = "[reviewer]\nkind = \"claude\"\n";
        let (line, _, message) = err(&format!("{tail}verfy = [\"x\"]\n"));
        assert_eq!(line, 3);
        assert!(
            message.contains(
                "`verify` is a key of the top level: move it above the first `[table]` line"
            ),
            "{message}"
        );
        let (_, _, message) = err(&format!("{tail}rounds = 5\n"));
        assert!(
            message.contains("`rounds` is a key of [limits]: move it under the `[limits]` line"),
            "{message}"
        );
        assert!(
            keys_of("").contains(&"verify".to_string())
                && keys_of("[limits]").contains(&"item_timeout".to_string())
        );
    }

    #[test]
    fn a_misspelt_key_gets_the_nearest_known_one_and_junk_gets_none() {
        assert!(
            err("verfiy = [\"x\"]\n")
                .2
                .contains("did you mean `verify`?")
        );
        assert!(
            err("[writer]\ncomand = [\"x\"]\n")
                .2
                .contains("did you mean `command`?")
        );
        let (_, _, message) = err("zzzzzz = 1\n");
        assert!(
            !message.contains("did you mean")
                && message.contains("remove the key or fix its spelling"),
            "{message}"
        );
    }

    #[test]
    fn cost_caps_are_positive_finite_and_at_most_a_million() {
        let (line, key, message) = err("[limits]\nmax_cost_usd_per_run = 1e300\n");
        assert_eq!(
            (line, key.as_deref()),
            (2, Some("max_cost_usd_per_run")),
            "{message}"
        );
        assert!(message.contains("at most 1000000 USD"), "{message}");
        assert!(
            err("[limits]\nmax_cost_usd = -1.0\n")
                .2
                .contains("positive number of USD")
        );
        assert!(
            err("[limits]\nmax_cost_usd = nan\n")
                .2
                .contains("positive number of USD")
        );
        assert!(
            parse(
                Path::new("c"),
                "[limits]\nmax_cost_usd_per_run = 1000000.0\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn durations_longer_than_a_year_are_refused() {
        let (line, _, message) = err("[limits]\nlimit_sleep_max = \"9999999999999h\"\n");
        assert_eq!(line, 2);
        assert!(
            message.contains("duration too large") || message.contains("longer than a year"),
            "{message}"
        );
        let (_, _, message) = err("[limits]\nlimit_buffer = \"400d\"\n");
        assert!(message.contains("longer than a year"), "{message}");
        assert!(parse_duration("366d").is_ok());
    }

    #[test]
    fn a_left_out_command_is_the_kinds_own_cli_and_a_command_agent_must_name_one() {
        let c = parse(
            Path::new("t"),
            "[writer]\nkind = \"codex\"\n[reviewer]\nkind = \"claude\"\n",
        )
        .unwrap();
        assert_eq!(c.writer.command, ["codex"]);
        assert_eq!(c.reviewer.command, ["claude"]);
        let (line, _, message) = err("[writer]\nkind = \"command\"\n");
        assert!(
            line >= 1 && message.contains("[writer] command must name an executable"),
            "{message}"
        );
    }

    #[test]
    fn max_tend_rounds_defaults_to_three_and_is_bounded() {
        assert_eq!(Config::default().limits.max_tend_rounds, 3);
        let c = parse(Path::new("t"), "[limits]\nmax_tend_rounds = 5\n").unwrap();
        assert_eq!(c.limits.max_tend_rounds, 5);
        for bad in ["0", "101"] {
            let (line, key, message) = err(&format!("[limits]\nmax_tend_rounds = {bad}\n"));
            assert_eq!(
                (line, key.as_deref()),
                (2, Some("max_tend_rounds")),
                "{message}"
            );
        }
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key() {
        let (line, key, message) = err("base = \"main\"\nbacklog = 5\n");
        assert_eq!((line, key.as_deref()), (2, Some("backlog")));
        assert!(message.starts_with("`backlog`: invalid type"), "{message}");
        let (_, key, message) = err("[limits]\nrounds = -1\n");
        assert_eq!(key.as_deref(), Some("rounds"), "{message}");
        assert!(message.starts_with("`rounds`:"), "{message}");
    }

    #[test]
    fn limits_and_secrets_that_cannot_work_are_refused() {
        assert!(
            err("[limits]\nmax_tokens = 0\n")
                .2
                .contains("at least 1000")
        );
        assert!(
            err("[limits]\nrounds = 4294967295\n")
                .2
                .contains("at most 100")
        );
        assert!(err("secrets = [\"PATH\"]\n").2.contains("PATH is one"));
        assert!(err("secrets = [\"\"]\n").2.contains("not a variable name"));
        let (_, key, message) = err("secrets = [\"TEST_DB\"]\ngate_env = [\"TEST_DB\"]\n");
        assert_eq!(key.as_deref(), Some("gate_env"));
        assert!(
            message.contains("`secrets`") && message.contains("TEST_DB"),
            "{message}"
        );
        assert!(
            parse(
                Path::new("t"),
                "secrets = [\"OPENAI_API_KEY\"]\n[limits]\nrounds = 100\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn bad_duration_names_line() {
        let (line, _, message) = err("[limits]\nagent_timeout = \"soon\"\n");
        assert_eq!(line, 2);
        assert!(
            message.contains("agent_timeout") && message.contains("45m"),
            "{message}"
        );
    }

    #[test]
    fn bad_types_and_values() {
        assert_eq!(err("[limits]\nrounds = \"x\"\n").0, 2);
        assert_eq!(err("\n[limits]\nrounds = 0\n").0, 3);
        assert_eq!(err("deadline = \"7am\"\n").0, 1);
        assert_eq!(
            err("timezone = \"Mars/Base\"\n").1.as_deref(),
            Some("timezone")
        );
        assert_eq!(err("[writer]\nkind = \"gpt\"\n").0, 2);
        assert_eq!(
            err("github_repo = \"nope\"\n").1.as_deref(),
            Some("github_repo")
        );
        assert!(!err("base = [\n").2.is_empty());
    }

    #[test]
    fn type_errors_and_duplicates_name_the_key() {
        let (line, key, message) = err("[limits]\nrounds = \"3\"\n");
        assert_eq!((line, key.as_deref()), (2, Some("rounds")));
        assert!(message.starts_with("`rounds`"), "{message}");
        let (line, _, message) = err("base = \"a\"\nbase = \"b\"\n");
        assert_eq!(line, 2);
        assert!(message.contains("base"), "{message}");
    }

    #[test]
    fn paths_stay_inside_the_repository_and_commands_are_not_empty() {
        assert_eq!(
            err("backlog = \"../../etc/hostname\"\n").1.as_deref(),
            Some("backlog")
        );
        assert_eq!(
            err("backlog = \"/etc/hostname\"\n").1.as_deref(),
            Some("backlog")
        );
        assert_eq!(
            err("[[recipes]]\nprefix = \"x\"\nprompt = \"/etc/shadow\"\n")
                .1
                .as_deref(),
            Some("prompt")
        );
        assert_eq!(err("verify = [\"\"]\n").1.as_deref(), Some("verify"));
    }

    #[test]
    fn agent_output_caps_are_sizes() {
        let cap = |toml: &str| parse(Path::new("c.toml"), toml).map(|c| c.max_agent_output);
        assert_eq!(cap("").unwrap(), 1 << 30);
        assert_eq!(cap("max_agent_output = \"1GiB\"\n").unwrap(), 1 << 30);
        assert_eq!(cap("max_agent_output = \"500MB\"\n").unwrap(), 500_000_000);
        assert_eq!(cap("max_agent_output = \"64 KiB\"\n").unwrap(), 65536);
        assert_eq!(cap("max_agent_output = 4096\n").unwrap(), 4096);
        let (line, key, message) = err("\nmax_agent_output = \"lots\"\n");
        assert_eq!((line, key.as_deref()), (2, Some("max_agent_output")));
        assert!(message.contains("\"1GiB\""), "{message}");
        let (_, key, message) = err("max_agent_output = \"10B\"\n");
        assert_eq!(key.as_deref(), Some("max_agent_output"), "{message}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("45m").unwrap(), Duration::from_secs(2700));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert!(
            parse_duration("120").is_err(),
            "a bare number needs its unit"
        );
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("m").is_err());
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
    }
}
