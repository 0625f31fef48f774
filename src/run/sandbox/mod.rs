//! The sandbox policy of each call of an item (docs/security.md#the-sandbox):
//! which paths a gate, a setup command or an agent sees, and which hosts
//! it may reach through the proxy, from the contract's sealed `[sandbox]`
//! and the agent's kind.
//!
//! Not for building the sandbox (`crate::sandbox`, entered by `process`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::agent::Role;
use crate::config::{AgentConfig, AgentKind};
use crate::contract::Contract;
use crate::sandbox::{Allow, Network, Policy};

use super::Night;

/// The home directory inside when the environment names none.
const HOME: &str = "/home/sandbox";

/// The policy of a gate or setup command in `slot`: the slot and its build
/// directory writable, the sealed `write` and `read`; `None` when the
/// item's calls run without a sandbox. `env`'s `HOME` becomes the private
/// home (set when missing).
pub(super) fn for_gate(
    night: &Night,
    c: &Contract,
    slot: &Path,
    env: &mut BTreeMap<String, String>,
) -> Option<Policy> {
    if !wanted(night, c) {
        return None;
    }
    let build = crate::build_output::slot_build_dir(slot);
    let _ = std::fs::create_dir_all(&build);
    let mut write = vec![slot.to_path_buf()];
    if build.is_dir() {
        write.push(build);
    }
    let hosts = c
        .sandbox
        .allow_hosts
        .iter()
        .chain(&c.sandbox.gate_allow_hosts);
    Some(policy(c, (write, alternates(slot)), hosts, env))
}

/// The object directories the slot's clone borrows from (its
/// `.git/objects/info/alternates`: your repository's `.git/objects`),
/// shown read-only so that git inside can read the history the checkout
/// shares with your repository (docs/security.md#the-sandbox). Nothing
/// else of your repository is shown.
fn alternates(slot: &Path) -> Vec<PathBuf> {
    let objects = slot.join(".git/objects");
    let Ok(text) = std::fs::read_to_string(objects.join("info/alternates")) else {
        return vec![];
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| objects.join(l))
        .filter(|d| d.is_dir())
        .collect()
}

/// The policy of a call of a `role` agent whose config is `agent`, in
/// `slot`, whose own files are in `log_dir`: the slot writable for the
/// writer and read-only for the reviewer, the call's directory writable
/// (its prompt, contract and feedback files, its usage report). claude and
/// codex also get their login files read-only in the private home, their
/// program's package read-only and their API host through the proxy
/// (`agent_files`).
pub(super) fn for_agent(
    night: &Night,
    c: &Contract,
    (role, agent): (Role, &AgentConfig),
    (slot, log_dir): (&Path, &Path),
    env: &mut BTreeMap<String, String>,
) -> Option<Policy> {
    if !wanted(night, c) {
        return None;
    }
    let _ = std::fs::create_dir_all(log_dir);
    let (write, mut read) = match role {
        Role::Writer => (vec![slot.to_path_buf(), log_dir.to_path_buf()], vec![]),
        Role::Reviewer => (vec![log_dir.to_path_buf()], vec![slot.to_path_buf()]),
    };
    read.extend(alternates(slot));
    let host_home = as_account(night.run_as.as_ref(), env);
    let hosts = c.sandbox.allow_hosts.iter().chain(&agent.allow_hosts);
    let mut p = policy(c, (write, read), hosts, env);
    if agent.kind != AgentKind::Command {
        agent_files(agent, host_home.as_deref(), env, &mut p);
    }
    Some(p)
}

/// The home whose login files an agent call is given: the `agent_user`
/// account's own when the call runs as it (nightshift's `HOME`, root's
/// home, is not the account's to read), set as `env`'s `HOME` so that the
/// private home inside is at the account's path, where the account's
/// `HOME` points; else `env`'s `HOME`. An inherited `CODEX_HOME` or
/// `CLAUDE_CONFIG_DIR` is nightshift's, so it is dropped for the account's
/// `~/.codex` and `~/.claude`.
fn as_account(
    run_as: Option<&crate::process::RunAs>,
    env: &mut BTreeMap<String, String>,
) -> Option<PathBuf> {
    if let Some(a) = run_as {
        env.insert("HOME".into(), a.home.display().to_string());
        env.remove("CODEX_HOME");
        env.remove("CLAUDE_CONFIG_DIR");
    }
    env.get("HOME").map(PathBuf::from)
}

/// Whether the item's calls get a sandbox: this host builds one and the
/// contract was not sealed with mode `off`.
fn wanted(night: &Night, c: &Contract) -> bool {
    night.sandbox && c.sandbox.mode != crate::sandbox::Mode::Off
}

/// The policy with the contract's sealed paths added and `hosts` allowed
/// (the sealed `[sandbox] allow_hosts` and the call's own: the agent's
/// `allow_hosts`, or `gate_allow_hosts`); with any allowed host, `env`
/// gets the proxy's variables.
fn policy<'a>(
    c: &Contract,
    (mut write, mut read): (Vec<PathBuf>, Vec<PathBuf>),
    hosts: impl Iterator<Item = &'a String>,
    env: &mut BTreeMap<String, String>,
) -> Policy {
    write.extend(c.sandbox.write.iter().map(PathBuf::from));
    read.extend(c.sandbox.read.iter().map(PathBuf::from));
    let home = env
        .entry("HOME".into())
        .or_insert_with(|| HOME.into())
        .clone();
    let mut allow = guarded();
    for h in hosts {
        // Checked when the config was loaded (config::validate).
        let _ = allow.add(h);
    }
    let mut p = Policy {
        write,
        read,
        home: PathBuf::from(home),
        home_files: vec![],
        home_dirs: vec![],
        network: Network::None,
        tmp_size: c.sandbox.tmp_size,
    };
    set_network(&mut p, allow, env);
    p
}

/// An empty allow list that keeps the ledger out (docs/security.md#the-network):
/// the host and port of the database URL nightshift uses, refused even when
/// it is not a local address, unless an entry names it exactly.
fn guarded() -> Allow {
    let mut allow = Allow::default();
    if let Some((host, port)) = ledger_host() {
        allow.keep_out_ledger(&host, port);
    }
    allow
}

/// The ledger's TCP host and port (the URL's port, else PostgreSQL's
/// 5432); `None` for the embedded cluster or a URL naming a Unix socket.
fn ledger_host() -> Option<(String, u16)> {
    let crate::ledger::DbSource::Url { url, .. } = crate::ledger::db_source_from_env() else {
        return None;
    };
    let u = url::Url::parse(url.expose()).ok()?;
    // `?host=/run/postgresql`: a socket, whatever the authority says.
    if u.query_pairs()
        .any(|(k, v)| k == "host" && v.starts_with('/'))
    {
        return None;
    }
    let host = match u.host()? {
        url::Host::Ipv6(a) => a.to_string(),
        h => h.to_string(),
    };
    Some((host, u.port().unwrap_or(5432)))
}

/// `allow` as the policy's network: the proxy and its variables in `env`
/// when anything is allowed.
fn set_network(p: &mut Policy, allow: Allow, env: &mut BTreeMap<String, String>) {
    if allow.is_empty() {
        return;
    }
    for (k, v) in crate::sandbox::proxy_env() {
        env.insert(k.to_string(), v);
    }
    p.network = Network::Proxy(allow);
}

/// What a claude or codex call needs besides the slot
/// (docs/security.md#claude-and-codex-in-the-sandbox): its login files
/// read-only at their paths in the private home (claude:
/// `.credentials.json` and `settings.json` of `$CLAUDE_CONFIG_DIR` or
/// `~/.claude`, shown in `~/.claude`; codex: `$CODEX_HOME` or `~/.codex`,
/// `auth.json` and `config.toml`), the `node_modules` its program lies in
/// read-only, and its API hosts: the vendor's, or the host of the base URL
/// its environment, arguments or config name (claude: the environment's
/// `ANTHROPIC_BASE_URL`, else its user settings' `env`).
fn agent_files(
    agent: &AgentConfig,
    host_home: Option<&Path>,
    env: &mut BTreeMap<String, String>,
    p: &mut Policy,
) {
    let mut allow = match &p.network {
        Network::Proxy(a) => a.clone(),
        Network::None => guarded(),
    };
    let mut files = Vec::new();
    match agent.kind {
        AgentKind::Claude => claude_files(host_home, env, &p.home, &mut files, &mut allow),
        AgentKind::Codex => {
            let dir = env
                .get("CODEX_HOME")
                .map(PathBuf::from)
                .or_else(|| host_home.map(|h| h.join(".codex")));
            // Inside, codex's home is a directory of the private home (it
            // writes its sessions there), its login and config shown in it.
            let inside = p.home.join(".codex");
            if let Some(d) = &dir {
                for f in ["auth.json", "config.toml"] {
                    files.push((d.join(f), inside.join(f)));
                }
            }
            env.insert("CODEX_HOME".into(), inside.display().to_string());
            p.home_dirs.push(inside);
            let config = (dir.as_ref())
                .and_then(|d| std::fs::read_to_string(d.join("config.toml")).ok())
                .unwrap_or_default();
            let mut named: Vec<String> = base_urls(&config);
            for a in &agent.command {
                named.extend(base_urls(a));
            }
            named.extend(env.get("OPENAI_BASE_URL").and_then(|u| host_of(u)));
            if named.is_empty() {
                named = vec![
                    "api.openai.com:443".into(),
                    "chatgpt.com:443".into(),
                    "auth.openai.com:443".into(),
                ];
            }
            for h in named {
                add(&mut allow, &h);
            }
        }
        AgentKind::Command => {}
    }
    for (host, inside) in files.into_iter().filter(|(f, _)| f.is_file()) {
        p.home_files.push((host, inside));
    }
    if let Some(dir) = agent.command.first().and_then(|prog| package_of(prog, env)) {
        p.read.push(dir);
    }
    set_network(p, allow, env);
}

/// Claude Code's part of [`agent_files`]: its login and user settings from
/// its config directory (`CLAUDE_CONFIG_DIR`, else `~/.claude`) into
/// `files`, shown in `~/.claude` of the private `home`, where the variable
/// then points; its API host into `allow`.
fn claude_files(
    host_home: Option<&Path>,
    env: &mut BTreeMap<String, String>,
    home: &Path,
    files: &mut Vec<(PathBuf, PathBuf)>,
    allow: &mut Allow,
) {
    let dir = (env.get("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()))
        .map(PathBuf::from)
        .or_else(|| host_home.map(|h| h.join(".claude")));
    let inside = home.join(".claude");
    if env.contains_key("CLAUDE_CONFIG_DIR") {
        env.insert("CLAUDE_CONFIG_DIR".into(), inside.display().to_string());
    }
    let settings = dir.as_ref().map(|d| d.join("settings.json"));
    if let Some(d) = &dir {
        for f in [".credentials.json", "settings.json"] {
            files.push((d.join(f), inside.join(f)));
        }
    }
    // Claude Code applies its user settings' `env` under its own
    // environment: the variable wins, then the settings' value.
    let base = (env.get("ANTHROPIC_BASE_URL").cloned())
        .or_else(|| settings.as_deref().and_then(settings_base_url));
    match base.as_deref().and_then(host_of) {
        Some(h) => add(allow, &h),
        None => add(allow, "api.anthropic.com:443"),
    }
}

/// The `ANTHROPIC_BASE_URL` of the `env` table of Claude Code's user
/// settings (`~/.claude/settings.json`), read as a regular file of at most
/// [`crate::file::MAX_TEXT_BYTES`]; `None` when it is missing, unreadable,
/// not JSON or sets none. The project's `.claude/settings.json` is not
/// read: it is the slot's, which the writer may change.
fn settings_base_url(path: &Path) -> Option<String> {
    let text = crate::file::read_regular_text(path, crate::file::MAX_TEXT_BYTES).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(
        v.get("env")?
            .get("ANTHROPIC_BASE_URL")?
            .as_str()?
            .to_string(),
    )
}

/// Adds `host` (checked: a base URL's host and port) to `allow`.
fn add(allow: &mut Allow, host: &str) {
    if let Err(e) = allow.add(host) {
        tracing::warn!(host, error = %e, "an agent's API host is not a host");
    }
}

/// `host:port` of a URL (the scheme's port when it names none).
fn host_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url.trim()).ok()?;
    let host = match u.host()? {
        url::Host::Ipv6(a) => format!("[{a}]"),
        h => h.to_string(),
    };
    Some(format!("{host}:{}", u.port_or_known_default()?))
}

/// The hosts of every `base_url = "…"` in `text` (a codex config, or a
/// `-c model_providers.…` argument).
fn base_urls(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("base_url") {
        rest = &rest[i + "base_url".len()..];
        let value = rest.trim_start().strip_prefix('=').map(str::trim_start);
        let Some(v) = value else { continue };
        let Some(q) = v.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        if let Some(end) = v[1..].find(q) {
            out.extend(host_of(&v[1..=end]));
        }
    }
    out
}

/// The `node_modules` directory a CLI's program lies in (after links),
/// found on the call's `PATH` when given by name; `None` for a program
/// outside one (its own file is shown by `process`).
pub fn package_of(program: &str, env: &BTreeMap<String, String>) -> Option<PathBuf> {
    let found = if program.contains('/') {
        PathBuf::from(program)
    } else {
        std::env::split_paths(env.get("PATH")?)
            .map(|d| d.join(program))
            .find(|p| p.is_file())?
    };
    let real = std::fs::canonicalize(found).ok()?;
    real.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy with nothing in it but its private `home`.
    fn empty_policy(home: &Path) -> Policy {
        Policy {
            write: vec![],
            read: vec![],
            home: home.to_path_buf(),
            home_files: vec![],
            home_dirs: vec![],
            network: Network::None,
            tmp_size: None,
        }
    }

    /// An agent of `kind` run as `program`.
    fn agent_of(kind: AgentKind, program: &str) -> AgentConfig {
        AgentConfig {
            kind,
            command: vec![program.into()],
            ..AgentConfig::default()
        }
    }

    /// A `CLAUDE_CONFIG_DIR` outside the home is where claude's login and
    /// settings are read from (its settings' base URL too), shown in the
    /// private home's `~/.claude`, where the variable then points.
    #[test]
    fn claude_config_dir_is_read_and_shown_in_the_private_home() {
        let host = tempfile::tempdir().unwrap();
        let dir = host.path().join("claude-config");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(".credentials.json"), "{}").unwrap();
        let settings = r#"{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4100"}}"#;
        std::fs::write(dir.join("settings.json"), settings).unwrap();
        let private = tempfile::tempdir().unwrap();
        let mut env = BTreeMap::from([
            ("HOME".to_string(), host.path().display().to_string()),
            ("CLAUDE_CONFIG_DIR".to_string(), dir.display().to_string()),
        ]);
        let mut p = empty_policy(private.path());
        let agent = agent_of(AgentKind::Claude, "claude");
        agent_files(&agent, Some(host.path()), &mut env, &mut p);
        let inside = private.path().join(".claude");
        assert_eq!(
            p.home_files,
            [
                (
                    dir.join(".credentials.json"),
                    inside.join(".credentials.json")
                ),
                (dir.join("settings.json"), inside.join("settings.json")),
            ]
        );
        assert_eq!(env["CLAUDE_CONFIG_DIR"], inside.display().to_string());
        let Network::Proxy(allow) = &p.network else {
            panic!("the settings' base URL is allowed: {:?}", p.network)
        };
        assert!(format!("{allow:?}").contains("127.0.0.1"), "{allow:?}");
    }

    /// As `agent_user`, codex's login and config are the account's, shown
    /// in the private home at the account's path, where `CODEX_HOME` then
    /// points: not nightshift's `HOME` nor its `CODEX_HOME`.
    #[test]
    fn codex_as_agent_user_gets_the_accounts_login_at_the_accounts_home() {
        let account = tempfile::tempdir().unwrap();
        let home = account.path().to_path_buf();
        std::fs::create_dir_all(home.join(".codex")).unwrap();
        std::fs::write(home.join(".codex/auth.json"), "{}").unwrap();
        let run_as = crate::process::RunAs {
            uid: 1000,
            gid: 1000,
            home: home.clone(),
            user: "agent".into(),
        };
        let mut env = BTreeMap::from([
            ("HOME".to_string(), "/root".to_string()),
            ("CODEX_HOME".to_string(), "/root/.codex".to_string()),
            ("PATH".to_string(), "/usr/bin".to_string()),
        ]);
        let host_home = as_account(Some(&run_as), &mut env);
        assert_eq!(host_home.as_deref(), Some(home.as_path()));
        let mut p = empty_policy(&home);
        let agent = agent_of(AgentKind::Codex, "codex");
        agent_files(&agent, host_home.as_deref(), &mut env, &mut p);
        let inside = home.join(".codex");
        assert_eq!(
            p.home_files,
            [(inside.join("auth.json"), inside.join("auth.json"))]
        );
        assert_eq!(p.home_dirs, std::slice::from_ref(&inside));
        assert_eq!(env["CODEX_HOME"], inside.display().to_string());
        assert_eq!(env["HOME"], home.display().to_string());
        // Without an account: nightshift's own HOME, as before.
        let mut env = BTreeMap::from([("HOME".to_string(), "/root".to_string())]);
        assert_eq!(as_account(None, &mut env), Some(PathBuf::from("/root")));
    }
}
