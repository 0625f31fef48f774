//! The config's types: [`Config`] and its tables (`[limits]`, `[writer]`/`[reviewer]`,
//! `[[recipes]]`, `[notify]`) with their defaults, as serde reads them. Not the checks serde
//! cannot express (see `validate`), nor the wording of a refusal (see `error`), nor how values are
//! written in the file (see `forms`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::forms::{de_hhmm, human_duration, human_size, human_size_opt};

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
    /// Open PRs as drafts (GitHub's `draft: true`; docs/github.md#pull-requests);
    /// a draft is marked ready for review once its checks are green
    /// (docs/github.md#ci).
    pub draft: bool,
    /// Lines of a failed GitHub Actions job's log (its end) given to a fix
    /// round's writer (docs/github.md#ci). Default 80.
    pub ci_log_lines: u32,
    /// Globs of paths no writer may change, whatever its item's `scope:`
    /// (`scope:`'s matching rules, docs/backlog.md#details); a round that
    /// changes one breaks a rule (docs/loop.md#proof). Added to
    /// [`crate::config::DEFAULT_PROTECTED`], never instead of it (see
    /// [`crate::config::protected_paths`]); the effective list is sealed in
    /// every contract. Default: none beyond the built-in ones.
    pub protected: Vec<String>,
    /// Hard caps; an item may lower them, never raise them.
    pub limits: Limits,
    /// The agent that changes the code.
    pub writer: AgentConfig,
    /// The read-only agent that gives the verdict.
    pub reviewer: AgentConfig,
    /// `[agents.NAME]`: more agents, by name, that `[writer] fallback` and
    /// `[reviewer] fallback` may name (docs/limits.md#fallback). Left out
    /// of the serialised config while empty.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub agents: std::collections::BTreeMap<String, AgentConfig>,
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
    /// `[quota]`: the reserve of the long usage windows kept for the day,
    /// and paid overage (docs/limits.md#reserve).
    pub quota: super::quota::Quota,
    /// `[serve]`: how long the board's events are kept (docs/serve.md#pruning).
    pub serve: super::serve::Serve,
    /// `[sandbox]`: the sandbox every writer, reviewer, gate and setup call
    /// runs in (docs/config.md#sandbox, docs/security.md#the-sandbox).
    pub sandbox: SandboxConfig,
}

/// `[sandbox]` (docs/config.md#sandbox). Sealed in every contract (left
/// out of its JSON while it is all default). Fields in alphabetical order:
/// the contract's canonical JSON writes them as declared.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Hosts (`name`, `name:port`, an address) every sandboxed call (agent,
    /// gate, setup) may reach through the filtering proxy, besides an
    /// agent kind's own API host (docs/security.md#the-network).
    pub allow_hosts: Vec<String>,
    /// Hosts only gate and setup calls may reach (a package registry the
    /// build fetches from); left out of the contract while empty, so that
    /// contracts sealed before it keep their SHA.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gate_allow_hosts: Vec<String>,
    /// `required`, `auto` (the default) or `off`.
    pub mode: crate::sandbox::Mode,
    /// Absolute paths shown read-only inside (a toolchain outside the
    /// system directories); each must exist.
    pub read: Vec<String>,
    /// The size cap, in bytes, of each private tmpfs of a call (`/tmp`,
    /// the home, `/dev`, `/dev/shm`): written `"2GiB"`, at least 1 MiB.
    /// `None`: [`crate::sandbox::default_tmp_size`]; left out of the
    /// contract then, so that contracts sealed before it keep their SHA.
    #[serde(
        with = "human_size_opt",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub tmp_size: Option<u64>,
    /// Absolute paths shown read-write inside besides the slot (a shared
    /// cache); each must exist.
    pub write: Vec<String>,
}

impl SandboxConfig {
    /// Whether it is all default (then left out of the contract's JSON, so
    /// that contracts sealed before it keep their SHA).
    pub fn is_default(&self) -> bool {
        *self == SandboxConfig::default()
    }
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
            ci_log_lines: DEFAULT_CI_LOG_LINES,
            protected: vec![],
            limits: Limits::default(),
            writer: AgentConfig::default(),
            reviewer: AgentConfig::default(),
            agents: Default::default(),
            recipes: vec![],
            notify: Targets::default(),
            jobs: 1,
            lease: crate::queue::DEFAULT_LEASE,
            quota: super::quota::Quota::default(),
            serve: super::serve::Serve::default(),
            sandbox: SandboxConfig::default(),
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
    /// Fix rounds per item for a red required check of its PR on GitHub
    /// (docs/github.md#ci); `0` turns fixing off. Sealed in the contract.
    pub ci_rounds: u32,
    /// How long to wait for a conclusive CI result after each push
    /// (docs/github.md#ci). Sealed in the contract.
    #[serde(with = "human_duration")]
    pub ci_wait: Duration,
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
            ci_rounds: DEFAULT_CI_ROUNDS,
            ci_wait: DEFAULT_CI_WAIT,
        }
    }
}

/// The default `[limits] max_changed_files` (docs/config.md#limits).
pub const DEFAULT_MAX_CHANGED_FILES: u64 = 100;

/// The default `[limits] max_diff_lines` (docs/config.md#limits).
pub const DEFAULT_MAX_DIFF_LINES: u64 = 5000;

/// The default `[limits] ci_rounds` (docs/config.md#limits, docs/github.md#ci).
pub const DEFAULT_CI_ROUNDS: u32 = 2;

/// The default `[limits] ci_wait`: 45 minutes (docs/github.md#ci).
pub const DEFAULT_CI_WAIT: Duration = Duration::from_secs(45 * 60);

/// The default `ci_log_lines` (docs/config.md, docs/github.md#ci).
pub const DEFAULT_CI_LOG_LINES: u32 = 80;

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
    /// `[writer]`/`[reviewer]` only: another agent (an `[agents.NAME]`
    /// name, or a kind, `claude`/`codex`, for that kind's own CLI) used for
    /// new items and rounds while this agent's account is paused
    /// (docs/limits.md#fallback); see [`Config::fallback_of`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Hosts only this agent's calls may reach through the sandbox's proxy,
    /// besides `[sandbox] allow_hosts` and its kind's API host
    /// (docs/security.md#the-network); checked as `[sandbox] allow_hosts` is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
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
            fallback: None,
            allow_hosts: vec![],
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

/// The default `max_agent_output`: 1 GiB, far above what an agent prints in
/// an hour of honest work, far below a full disk.
pub const DEFAULT_MAX_AGENT_OUTPUT: u64 = 1024 * 1024 * 1024;
