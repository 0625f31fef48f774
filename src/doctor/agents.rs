//! `doctor`'s agent checks: each agent's CLI found and answering
//! `--version`, and its local login state (claude's and codex's own files
//! and status commands; a `command` agent is not run). No agent usage is
//! spent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{AgentConfig, AgentKind, Config};
use crate::process;

use super::{Check, PROBE_TIMEOUT, which};

/// Writer and reviewer executables and their fallbacks, with their versions and login state
/// where that costs nothing (docs/agents.md). Each probe runs as the agent would:
/// the same environment (no token, no ledger URL, no configured secrets)
/// and, under root with `agent_user`, as that account with its HOME.
pub(super) async fn agent_checks(out: &mut Vec<Check>, config: &Config) {
    let probe = Probe {
        env: crate::settings::agents_environment(config),
        run_as: match &config.agent_user {
            Some(u) if nix::unistd::geteuid().is_root() => process::RunAs::lookup(u).ok(),
            _ => None,
        },
    };
    // The fallbacks too: a night may call them (docs/limits.md#fallback).
    for (writes, table, a) in config.agents_in_play() {
        let name = match (writes, table.as_str()) {
            (true, "writer") => "writer",
            (false, "reviewer") => "reviewer",
            (true, _) => "writer fallback",
            (false, _) => "reviewer fallback",
        };
        out.push(agent_check(name, &table, &a, &probe).await);
    }
}

/// How an agent CLI is asked about itself: the agents' environment and
/// account.
struct Probe {
    env: BTreeMap<String, String>,
    run_as: Option<process::RunAs>,
}

impl Probe {
    /// Runs `argv` killed after [`PROBE_TIMEOUT`]; the outcome or why it
    /// could not start.
    async fn run(&self, argv: &[String]) -> std::result::Result<process::Outcome, String> {
        let mut cmd = process::Command::new(argv[0].clone())
            .args(argv[1..].iter().cloned())
            .env_map(self.env.clone())
            .timeout(PROBE_TIMEOUT)
            .grace(Duration::from_secs(1));
        if let Some(u) = &self.run_as {
            cmd = cmd.run_as(u.clone());
        }
        let o = process::run(cmd, &tokio_util::sync::CancellationToken::new())
            .await
            .map_err(|e| e.to_string())?;
        if o.timed_out {
            return Err(format!("no answer within {} s", PROBE_TIMEOUT.as_secs()));
        }
        Ok(o)
    }

    /// Who the probe runs as, for hints.
    fn who(&self) -> String {
        self.run_as.as_ref().map_or_else(
            || "the user nightshift runs as".to_string(),
            |u| format!("agent_user {:?}", u.user),
        )
    }

    /// `cmd` as the probe's account types it (`runuser` under agent_user).
    fn typed(&self, cmd: &str) -> String {
        match &self.run_as {
            Some(u) => format!("`runuser -u {} -- {cmd}`", u.user),
            None => format!("`{cmd}`"),
        }
    }
}

/// One agent (`name`: writer or reviewer): its executable found and
/// runnable, and for claude and codex their version and login. A command
/// agent is only located (running it may do real work).
async fn agent_check(name: &'static str, table: &str, a: &AgentConfig, probe: &Probe) -> Check {
    let Some(exe) = a.command.first() else {
        return Check::fail(
            name,
            "no command configured",
            format!("set [{table}] command = [\"…\"] in the config"),
        );
    };
    // A file that is there but cannot be run is not "missing".
    if exe.contains('/') && Path::new(exe).is_file() && which(exe).is_none() {
        return Check::fail(
            name,
            format!("{exe} exists but is not executable"),
            format!("chmod +x {exe}"),
        );
    }
    let Some(path) = which(exe) else {
        let hint = match a.kind {
            AgentKind::Claude => "install Claude Code (`npm install -g @anthropic-ai/claude-code`) or set the full path in `command`".to_string(),
            AgentKind::Codex => "install Codex (`npm install -g @openai/codex`) or set the full path in `command`".to_string(),
            AgentKind::Command => format!("make {exe} exist and be executable, or fix [{table}] command"),
        };
        return Check::fail(
            name,
            format!("{} agent {exe:?} not found on PATH", a.kind),
            hint,
        );
    };
    if a.kind == AgentKind::Command {
        // A custom agent may do real work when run: it is only located.
        return Check::pass(name, format!("command agent {}", path.display()));
    }
    let bin = path.display().to_string();
    let version = match agent_version(name, a, &bin, probe).await {
        Ok(v) => v,
        Err(failed) => return failed,
    };
    let found = format!("{} {version} ({bin})", a.kind);
    login_check(name, a, &found, &bin, probe).await
}

/// The first line `--version` prints for the claude or codex CLI at `bin`;
/// the failed check when it does not answer.
async fn agent_version(
    name: &'static str,
    a: &AgentConfig,
    bin: &str,
    probe: &Probe,
) -> std::result::Result<String, Check> {
    match probe.run(&[bin.to_string(), "--version".into()]).await {
        Ok(o) if o.success() => Ok(o
            .stdout_tail
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()),
        Ok(o) => Err(Check::fail(
            name,
            format!(
                "{} at {bin} does not answer --version: {}",
                a.kind,
                ended(&o)
            ),
            "reinstall the agent CLI",
        )),
        Err(e) => Err(Check::fail(
            name,
            format!("{} at {bin} does not answer --version: {e}", a.kind),
            "reinstall the agent CLI",
        )),
    }
}

/// The agent's line with its login state (`found`: kind, version, path),
/// failing with how to log in, as the probe's account, when it is out.
async fn login_check(
    name: &'static str,
    a: &AgentConfig,
    found: &str,
    bin: &str,
    probe: &Probe,
) -> Check {
    let login = match a.kind {
        AgentKind::Claude => claude_login(bin, probe).await,
        _ => codex_login(bin, a, probe).await,
    };
    match login {
        Login::In(how) => Check::pass(name, format!("{found}, logged in: {how}")),
        Login::Unknown(why) => Check::pass(name, format!("{found}, login not checked: {why}")),
        Login::Out(what) => {
            let hint = match a.kind {
                AgentKind::Claude => format!(
                    "log in as {}: {} (or set ANTHROPIC_API_KEY, or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`)",
                    probe.who(),
                    probe.typed("claude auth login")
                ),
                _ => format!(
                    "log in as {}: {} (or `printenv OPENAI_API_KEY | codex login --with-api-key`)",
                    probe.who(),
                    probe.typed("codex login")
                ),
            };
            Check::fail(name, format!("{found}, {what}"), hint)
        }
    }
}

/// What an agent CLI says of its login.
#[derive(Debug)]
enum Login {
    /// Logged in; how.
    In(String),
    /// Not logged in; the CLI's words.
    Out(String),
    /// The CLI cannot say; why.
    Unknown(String),
}

/// `claude auth status --json`: `{"loggedIn": bool, "authMethod": S, …}`,
/// exit 1 when logged out (Claude Code 2.x). It reads local credentials and
/// spends no usage. Older CLIs without the subcommand: unknown.
async fn claude_login(bin: &str, probe: &Probe) -> Login {
    let o = match probe
        .run(&[
            bin.to_string(),
            "auth".into(),
            "status".into(),
            "--json".into(),
        ])
        .await
    {
        Ok(o) => o,
        Err(e) => return Login::Unknown(format!("`claude auth status` failed: {e}")),
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(o.stdout_tail.trim()) else {
        return Login::Unknown(format!(
            "`claude auth status` gave no status ({})",
            ended(&o)
        ));
    };
    match v.get("loggedIn").and_then(serde_json::Value::as_bool) {
        Some(true) => {
            let method = v
                .get("authMethod")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("unknown method");
            match v.get("apiKeySource").and_then(serde_json::Value::as_str) {
                Some(src) => Login::In(format!("{method} from {src}")),
                None => Login::In(method.to_string()),
            }
        }
        Some(false) => Login::Out("not logged in (`claude auth status`)".into()),
        None => Login::Unknown("`claude auth status` did not say loggedIn".into()),
    }
}

/// Codex: a custom model provider (`-c model_provider=…` in the command, or
/// `model_provider` in `$CODEX_HOME/config.toml`) needs no OpenAI login;
/// otherwise `codex login status` (exit 0 when logged in; it spends no
/// usage). A key in `CODEX_API_KEY` / `OPENAI_API_KEY` also serves `codex
/// exec`.
async fn codex_login(bin: &str, a: &AgentConfig, probe: &Probe) -> Login {
    // Global options only: what follows `exec` belongs to exec.
    let globals: Vec<String> = a
        .command
        .iter()
        .skip(1)
        .take_while(|x| *x != "exec" && *x != "e")
        .cloned()
        .collect();
    if let Some(p) = codex_provider(&globals, probe).filter(|p| p != "openai") {
        return Login::In(format!("model provider {p:?} (no OpenAI login needed)"));
    }
    let mut argv = vec![bin.to_string()];
    argv.extend(globals);
    argv.extend(["login".to_string(), "status".to_string()]);
    let o = match probe.run(&argv).await {
        Ok(o) => o,
        Err(e) => return Login::Unknown(format!("`codex login status` failed: {e}")),
    };
    // The CLI prints its answer on stderr or stdout beside WARNING lines.
    let said = format!("{}\n{}", o.stdout_tail, o.stderr_tail)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("WARNING"))
        .unwrap_or("")
        .to_string();
    if o.success() {
        return Login::In(if said.is_empty() {
            "`codex login status` exit 0".into()
        } else {
            said
        });
    }
    if let Some(var) = ["CODEX_API_KEY", "OPENAI_API_KEY"]
        .into_iter()
        .find(|v| probe.env.get(*v).is_some_and(|x| !x.is_empty()))
    {
        return Login::In(format!("not logged in, but {var} is set for `codex exec`"));
    }
    Login::Out(if said.is_empty() {
        format!("not logged in (`codex login status`: {})", ended(&o))
    } else {
        format!("not logged in (`codex login status`: {said})")
    })
}

/// The model provider codex will use: the last `-c model_provider=X` of the
/// command, else `model_provider` in `$CODEX_HOME/config.toml` (default
/// `~/.codex` of the agents' account).
fn codex_provider(globals: &[String], probe: &Probe) -> Option<String> {
    let from_args = globals
        .windows(2)
        .filter(|w| w[0] == "-c" || w[0] == "--config")
        .filter_map(|w| w[1].strip_prefix("model_provider="))
        .chain(
            globals
                .iter()
                .filter_map(|g| g.strip_prefix("--config=model_provider=")),
        )
        .last()
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string());
    if from_args.is_some() {
        return from_args;
    }
    let home = probe.env.get("CODEX_HOME").map(PathBuf::from).or_else(|| {
        let h = probe
            .run_as
            .as_ref()
            .map(|u| u.home.clone())
            .or_else(|| probe.env.get("HOME").map(PathBuf::from))?;
        Some(h.join(".codex"))
    })?;
    let text =
        crate::file::read_regular_text(&home.join("config.toml"), crate::file::MAX_TEXT_BYTES)
            .ok()?;
    let table: toml::Table = text.parse().ok()?;
    table.get("model_provider")?.as_str().map(str::to_string)
}

/// How a probe ended, for a message.
fn ended(o: &process::Outcome) -> String {
    let err = o
        .stderr_tail
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("");
    let how = match (o.exit_code, o.signal) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "no exit status".to_string(),
    };
    if err.is_empty() {
        how
    } else {
        format!("{how}: {err}")
    }
}
