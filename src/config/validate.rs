//! The checks serde cannot express: ranges, emptiness and consistency, table by table; the
//! first refusal names the file, the line and the key. Not the wording of serde's own errors
//! (see `error`), nor whether a codex `command` fights the flags nightshift sets: that is the
//! codex adapter's rule, applied where the config is resolved (`crate::settings`).

use std::path::Path;

use super::error::{ConfigError, line_of_key, refusal};
use super::types::{AgentKind, Config, Limits};

/// `jobs` and `lease` (docs/workers.md): at least one worker, at most
/// [`MAX_JOBS`]; a lease a heartbeat fits in.
pub(super) fn validate_workers(path: &Path, text: &str, c: &Config) -> Result<(), ConfigError> {
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
pub(super) fn validate(path: &Path, text: &str, c: &Config) -> Result<(), ConfigError> {
    let bad = |key: &str, message: String| refusal(path, text, key, message);
    validate_limits(&c.limits, &bad)?;
    validate_env(c, &bad)?;
    validate_sandbox(c, &bad)?;
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
    validate_ci(c, &bad)?;
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

/// `[writer]` and `[reviewer]`: an executable.
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

/// Longest `[limits] ci_wait`: a day (docs/github.md#ci).
pub const MAX_CI_WAIT: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// Most `ci_log_lines` (docs/github.md#ci): the writer's prompt stays small.
pub const MAX_CI_LOG_LINES: u32 = 1000;

/// `[limits] ci_rounds` and `ci_wait`, and `ci_log_lines` in range
/// (docs/config.md, docs/github.md#ci).
fn validate_ci(c: &Config, bad: &Refuse<'_>) -> Result<(), ConfigError> {
    let l = &c.limits;
    if l.ci_rounds > MAX_ROUNDS {
        return Err(bad(
            "ci_rounds",
            format!("must be between 0 (no fix rounds) and {MAX_ROUNDS}"),
        ));
    }
    if l.ci_wait < std::time::Duration::from_secs(1) || l.ci_wait > MAX_CI_WAIT {
        return Err(bad(
            "ci_wait",
            "must be between \"1s\" and \"24h\", e.g. `ci_wait = \"45m\"`".into(),
        ));
    }
    if c.ci_log_lines == 0 || c.ci_log_lines > MAX_CI_LOG_LINES {
        return Err(bad(
            "ci_log_lines",
            format!("must be between 1 and {MAX_CI_LOG_LINES}"),
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

/// A relative path that cannot leave the repository root.
fn is_inside_repo(p: &str) -> bool {
    let path = Path::new(p);
    !p.trim().is_empty()
        && path.is_relative()
        && !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
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

/// The smallest `max_agent_output`: 1 KiB (a smaller cap would kill every
/// agent at its first lines).
const MIN_AGENT_OUTPUT: u64 = 1024;

/// The smallest `[sandbox] tmp_size`: 1 MiB (a smaller `/tmp` and home
/// would fail most programs at their first files).
const MIN_TMP_SIZE: u64 = 1 << 20;

/// `[sandbox]` (docs/config.md#sandbox): `read` and `write` paths absolute
/// and existing, each `allow_hosts` and `gate_allow_hosts` entry, and each
/// agent table's `allow_hosts` entry, a host name or address with an
/// optional port; `tmp_size` at least [`MIN_TMP_SIZE`].
fn validate_sandbox(
    c: &Config,
    bad: &impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let b = &c.sandbox;
    if b.tmp_size.is_some_and(|n| n < MIN_TMP_SIZE) {
        return Err(bad(
            "tmp_size",
            format!(
                "must be at least {MIN_TMP_SIZE} bytes (\"1MiB\"): it caps the sandbox's private `/tmp` and home; write e.g. `tmp_size = \"2GiB\"` under `[sandbox]`, or leave it out for the default (4 GiB, or a quarter of the memory when less)"
            ),
        ));
    }
    for (key, paths) in [("read", &b.read), ("write", &b.write)] {
        for p in paths {
            if !Path::new(p).is_absolute() {
                return Err(bad(
                    key,
                    format!("`{p}` is not an absolute path: write it from `/`"),
                ));
            }
            if !Path::new(p).exists() {
                return Err(bad(
                    key,
                    format!("`{p}` does not exist: create it, or take it out of `[sandbox] {key}`"),
                ));
            }
        }
    }
    let mut lists = vec![
        ("[sandbox]".to_string(), "allow_hosts", &b.allow_hosts),
        (
            "[sandbox]".to_string(),
            "gate_allow_hosts",
            &b.gate_allow_hosts,
        ),
        ("[writer]".to_string(), "allow_hosts", &c.writer.allow_hosts),
        (
            "[reviewer]".to_string(),
            "allow_hosts",
            &c.reviewer.allow_hosts,
        ),
    ];
    for (name, a) in &c.agents {
        lists.push((format!("[agents.{name}]"), "allow_hosts", &a.allow_hosts));
    }
    for (table, key, hosts) in lists {
        if let Some(h) = hosts.iter().find(|h| !crate::sandbox::Allow::is_host(h)) {
            return Err(bad(
                key,
                format!(
                    "`{h}` in {table} is not a host: write a name or address, optionally with a port (`registry.npmjs.org`, `127.0.0.1:8080`)"
                ),
            ));
        }
    }
    Ok(())
}
