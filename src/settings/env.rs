//! What agents and gates run with (docs/security.md, docs/agents.md#environment):
//! the token variables `main` removed at start-up ([`Startup`]), the data
//! and log directories, the agents' and gates' scrubbed environments, the
//! secrets to redact, the account agents run as, and each slot's own build
//! directory. Not the process runner that applies them ([`crate::process`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::ledger as ledger_mod;
use crate::process;
use crate::secret::Secret;

use super::{GitHub, Request};

/// What `main` hands over: the token variables it removed from its own
/// environment at start-up (docs/agents.md#environment), kept in memory only.
pub struct Startup {
    /// (variable, value) pairs removed before any thread started.
    pub removed: Vec<(String, Secret)>,
}

/// nightshift's data directory (slots, logs, the embedded cluster; docs/files.md#data-directory):
/// `NIGHTSHIFT_DATA_DIR`, else `/var/lib/nightshift` as root, else the XDG
/// data dir.
pub fn data_dir() -> PathBuf {
    use crate::ledger::embedded;
    embedded::nightshift_data_dir(&embedded::process_env, embedded::running_as_root())
}

/// The log directory: `$XDG_STATE_HOME/nightshift/logs` when that is set,
/// else `<data dir>/logs` (beside the per-item agent logs).
pub fn log_dir() -> PathBuf {
    match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(state) => PathBuf::from(state).join("nightshift").join("logs"),
        None => data_dir().join("logs"),
    }
}

/// The environment agents run with (docs/agents.md#environment): ours without the token
/// variables, the ledger's (both URL variables and `PG*`), the config's
/// `secrets` and its `gate_env` (see [`crate::process::child_env`]).
pub fn agents_environment(
    config: &crate::config::Config,
) -> std::collections::BTreeMap<String, String> {
    // `gate_env` is for gates only (docs/security.md): the gates' environment
    // adds it back.
    let hidden: Vec<String> = config
        .secrets
        .iter()
        .chain(&config.gate_env)
        .cloned()
        .collect();
    crate::process::child_env(std::env::vars(), &hidden)
}

/// What agents and gates run with (docs/security.md): environments without
/// tokens, the ledger's URL or the configured secrets, the values to
/// redact, and the account they run as.
pub struct Environments {
    /// The agents' environment.
    pub agent_env: BTreeMap<String, String>,
    /// The gates' environment: the agents' plus `gate_env`.
    pub gate_env: BTreeMap<String, String>,
    /// Secret values to redact wherever output is kept or shown.
    pub secrets: Vec<String>,
    /// The unprivileged account for agents and gates (as root with
    /// `agent_user`).
    pub run_as: Option<process::RunAs>,
    /// Where the ledger lives.
    pub db_source: ledger_mod::DbSource,
    /// The data directory (checkouts, logs).
    pub data_dir: PathBuf,
    /// What each slot's own build directory replaces (the run's header).
    pub isolation: crate::build_output::Isolation,
}

impl Environments {
    /// Builds the environments, remembers the secrets for redaction and
    /// looks up `agent_user`; warns of secrets still in nightshift's own
    /// environment and of `gate_env` entries it never passes on.
    ///
    /// # Errors
    /// Exit 2 when `agent_user` does not exist, or has no home directory
    /// while a real agent CLI (claude, codex) would need one.
    pub fn resolve(
        req: &Request,
        startup: &Startup,
        github: &GitHub,
        isolation: crate::build_output::Isolation,
    ) -> Result<Environments> {
        let config = &req.config;
        warn_secrets_left(config);
        let db_source = ledger_mod::db_source_from_env();
        let mut agent_env = agents_environment(config);
        let mut gate_env = gate_environment(config, startup, &db_source, agent_env.clone());
        let secrets = secrets_to_redact(config, startup, github.token.as_ref(), &db_source);
        crate::secret::remember(&secrets);
        let run_as = agent_account(config)?;
        let data_dir = data_dir();
        if run_as.is_some() {
            // The checkout's top directory and .git stay the runner's (see
            // `run::grant_checkout`); the agent's own git must trust it.
            for n in 0..config.jobs as usize {
                let slot = crate::slot::slot_path(&data_dir, &req.repo, n);
                trust_directory(&mut agent_env, &slot);
                trust_directory(&mut gate_env, &slot);
            }
        }
        Ok(Environments {
            agent_env,
            gate_env,
            secrets,
            run_as,
            db_source,
            data_dir,
            isolation,
        })
    }

    /// The run's header line on build output (for stderr), when there are
    /// several slots or a variable of this environment was replaced.
    pub fn isolation_header(&self, req: &Request) -> Option<String> {
        if req.config.jobs > 1 || !self.isolation.replaced.is_empty() {
            let slot = crate::slot::slot_path(&self.data_dir, &req.repo, 0);
            let slots = slot.parent().unwrap_or(&slot);
            return Some(self.isolation.header(slots));
        }
        None
    }
}

/// What each slot's own build directory will replace, checked before an
/// approval is used (docs/loop.md#build-output-per-slot): the variables
/// agents and gates would get from this environment (its `secrets` aside).
///
/// # Errors
/// Exit 2 naming the variable and the fix when it would point every slot at
/// one virtualenv, `node_modules` or the like while `jobs > 1`.
pub fn build_output(req: &Request) -> Result<crate::build_output::Isolation> {
    let seen = process::child_env(std::env::vars(), &req.config.secrets);
    crate::build_output::check(&seen, req.config.jobs)
        .map_err(|shared| Error::config(shared.to_string()))
}

/// `main` wipes the config's `secrets` from our own environment, finding
/// the config before it is loaded; one it missed is still readable by
/// agents in `/proc/<nightshift>/environ` (though not in theirs): warns of each.
fn warn_secrets_left(config: &Config) {
    for v in config
        .secrets
        .iter()
        .filter(|v| std::env::var_os(v).is_some())
    {
        eprintln!(
            "warning: {v}, listed in `secrets`, is still in nightshift's own environment (the config was not found at start-up); agents running as you can read it in /proc/{}/environ",
            std::process::id()
        );
    }
}

/// The gates' environment: `agent_env` plus each `gate_env` variable
/// nightshift may pass on (never the GitHub token or the ledger's URL or
/// password: each such entry is warned of and skipped).
fn gate_environment(
    config: &Config,
    startup: &Startup,
    source: &ledger_mod::DbSource,
    mut gate_env: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    for v in &config.gate_env {
        // Never passed on, whatever the config says: say so rather than
        // leave a gate wondering why the variable is empty.
        let ledger_var = source.env_var() == Some(v.as_str());
        // PGPASSWORD is the ledger's when its URL has no password of its own.
        let ledger_password = v == "PGPASSWORD"
            && matches!(source, ledger_mod::DbSource::Url { url, .. } if crate::secret::url_password(url.expose()).is_none());
        if crate::secret::token_vars().contains(&v.as_str())
            || ledger_var
            || ledger_password
            || v == "NIGHTSHIFT_DATABASE_URL"
        {
            eprintln!(
                "warning: gate_env lists {v}, which nightshift never passes to gates (it holds the GitHub token or the ledger's URL or password); give the gate its own variable"
            );
            continue;
        }
        // DATABASE_URL (PGPASSWORD) when the ledger is elsewhere is the
        // project's own (its tests' database): wiped from our environment at
        // start-up like every possible ledger variable, but the gate may have it.
        if (v == "DATABASE_URL" || v == "PGPASSWORD")
            && let Some((_, val)) = startup.removed.iter().find(|(n, _)| n == v)
        {
            gate_env.insert(v.clone(), val.expose().to_string());
            continue;
        }
        // Not in `secrets` too: the config refuses that overlap.
        if let Ok(val) = std::env::var(v) {
            gate_env.insert(v.clone(), val);
        }
    }
    gate_env
}

/// The values to redact: what `main` removed from the environment (but a
/// weak `PGPASSWORD`, which would redact common words), the token, the
/// configured secrets and the ledger's URL with its password's forms.
fn secrets_to_redact(
    config: &Config,
    startup: &Startup,
    token: Option<&Secret>,
    source: &ledger_mod::DbSource,
) -> Vec<String> {
    let mut secrets: Vec<String> = startup
        .removed
        .iter()
        .filter(|(n, s)| n != "PGPASSWORD" || !crate::secret::is_weak_password(s.expose()))
        .map(|(_, s)| s.expose().to_string())
        .collect();
    if let Some(t) = token {
        secrets.push(t.expose().to_string());
    }
    for v in &config.secrets {
        if let Ok(val) = std::env::var(v) {
            secrets.push(val);
        }
    }
    if let ledger_mod::DbSource::Url { url, .. } = source {
        secrets.push(url.expose().to_string());
        secrets.extend(crate::secret::url_password_forms(url.expose()));
    }
    secrets
}

/// The account agents run as: `agent_user` when nightshift runs as root,
/// else none. claude and codex keep their login and settings under HOME,
/// so a missing home directory is refused for them (a warning for command
/// agents).
///
/// # Errors
/// Exit 2 when the user does not exist or lacks the home a real agent needs.
fn agent_account(config: &Config) -> Result<Option<process::RunAs>> {
    let run_as = match &config.agent_user {
        Some(u) if nix::unistd::geteuid().is_root() => {
            Some(process::RunAs::lookup(u).map_err(|e| {
                Error::config(format!(
                    "agent_user {u:?}: {e}; create the user or fix `agent_user`"
                ))
            })?)
        }
        _ => None,
    };
    if let Some(u) = &run_as
        && !u.home.is_dir()
    {
        let real = [&config.writer, &config.reviewer]
            .iter()
            .any(|a| a.kind != crate::config::AgentKind::Command);
        let msg = format!(
            "agent_user {:?} has no home directory ({} does not exist); agents run with HOME there. Create it: `usermod -d /home/{} -m {}`",
            u.user,
            u.home.display(),
            u.user,
            u.user
        );
        if real {
            return Err(Error::config(msg));
        }
        eprintln!("warning: {msg}");
    }
    Ok(run_as)
}

/// Adds `safe.directory = DIR` to a child's git configuration through
/// `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` (git ≥ 2.31
/// treats these like `-c`, a scope `safe.directory` is honoured from),
/// after any entries the environment already carries.
fn trust_directory(env: &mut std::collections::BTreeMap<String, String>, dir: &std::path::Path) {
    let n: usize = env
        .get("GIT_CONFIG_COUNT")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    env.insert(format!("GIT_CONFIG_KEY_{n}"), "safe.directory".into());
    env.insert(format!("GIT_CONFIG_VALUE_{n}"), dir.display().to_string());
    env.insert("GIT_CONFIG_COUNT".into(), (n + 1).to_string());
}
