//! The checks of `nightshift doctor` (docs/commands.md): everything a night needs — git, the
//! repository and its remote, the base branch there, the backlog and the
//! gate's programs, the GitHub token and its scopes, the API, the label, the
//! agents, the root/`agent_user` rule, the ledger and the data directory —
//! one line per check with a fix hint, exit 1 if any fails.
//!
//! It spends no agent usage (agents are asked `--version` and their local
//! login state only, and custom `command` agents are not run at all) and changes nothing on GitHub (the
//! label is looked up, not created). It checks and says; the CLI prints
//! the lines and turns failures into the exit code.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod agents;
mod ci;
mod sandbox;

use crate::config::{AgentKind, Config, Loaded};
use crate::forge::{self, Forge};
use crate::git::Git;
use crate::settings::{Location, Startup, load_config};

/// Timeout of each local probe (`git --version`, `agent --version`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Timeout of each network probe (`git ls-remote`, the database).
const NETWORK_TIMEOUT: Duration = Duration::from_secs(20);

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Short name (`git`, `remote`, `token`, …).
    pub name: &'static str,
    /// Passed (a warning passes: the night runs, with a risk named).
    pub ok: bool,
    /// Passed with a risk worth knowing (agents as root, say).
    pub warn: bool,
    /// What was found.
    pub detail: String,
    /// How to fix it (empty when ok).
    pub hint: String,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            warn: false,
            detail: detail.into(),
            hint: String::new(),
        }
    }
    fn warn(name: &'static str, detail: impl Into<String>, hint: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            warn: true,
            detail: detail.into(),
            hint: hint.into(),
        }
    }
    fn fail(name: &'static str, detail: impl Into<String>, hint: impl Into<String>) -> Check {
        Check {
            name,
            ok: false,
            warn: false,
            detail: detail.into(),
            hint: hint.into(),
        }
    }
    /// The line `doctor` prints: `ok  `, `warn` or `FAIL`, the name, what
    /// was found, and the fix.
    pub fn line(&self) -> String {
        let status = match (self.ok, self.warn) {
            (false, _) => "FAIL",
            (true, true) => "warn",
            (true, false) => "ok  ",
        };
        if self.hint.is_empty() {
            format!("{status} {:<9} {}", self.name, self.detail)
        } else {
            format!(
                "{status} {:<9} {} — fix: {}",
                self.name, self.detail, self.hint
            )
        }
    }
}

/// Every check, in the order `doctor` prints them: git, the repository and
/// its remote, the base branch, backlog and gate, GitHub, the agents, root,
/// the ledger and the data directory. Without a repository or a config only
/// the machine-wide checks follow.
pub async fn run_checks(at: &Location, startup: &Startup) -> Vec<Check> {
    let mut out = Vec::new();
    let start = at
        .repo
        .clone()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."));
    let git = Git::new(&start).timeout(PROBE_TIMEOUT);
    let git_ok = git_check(&mut out, &git);
    // The repository and its config.
    let repo = if git_ok {
        git.text(&["rev-parse", "--show-toplevel"])
            .ok()
            .map(|t| PathBuf::from(t.trim()))
    } else {
        None
    };
    let Some(repo) = repo else {
        out.push(Check::fail(
            "repo",
            format!("{}: not inside a git repository", start.display()),
            "run doctor in your project or pass --repo PATH",
        ));
        return finish_without_repo(out, startup).await;
    };
    let loaded = match load_config(at.config.as_deref(), &repo) {
        Ok(l) => l,
        Err(e) => {
            out.push(Check::fail(
                "config",
                e.to_string(),
                "fix the config file (or `nightshift init` to write one)",
            ));
            return finish_without_repo(out, startup).await;
        }
    };
    let config = loaded.config.clone();
    let remote_url = Git::new(&repo)
        .timeout(PROBE_TIMEOUT)
        .text(&["remote", "get-url", &config.remote])
        .ok()
        .map(|s| s.trim().to_string());
    out.push(remote_check(&repo, &config, remote_url.as_deref()));
    let token = forge::resolve_token(&startup.removed);
    out.push(if remote_url.is_some() {
        base_check(&repo, &config, token.as_ref().map(|(t, _)| t))
    } else {
        Check::fail("base", "skipped: no remote", "fix the remote first")
    });
    backlog_and_gate_checks(&mut out, &repo, &loaded);
    github_checks(&mut out, &repo, &config, remote_url.as_deref(), token).await;
    agents::agent_checks(&mut out, &config).await;
    out.push(root_check(&config));
    out.push(sandbox::sandbox_check(&loaded));
    database_and_data_checks(&mut out).await;
    out
}

/// git itself: its version, or how to install it. True when it runs.
fn git_check(out: &mut Vec<Check>, git: &Git) -> bool {
    match git.text(&["--version"]) {
        Ok(v) => {
            out.push(Check::pass("git", v.trim().to_string()));
            true
        }
        Err(e) => {
            out.push(Check::fail(
                "git",
                format!("cannot run git: {e}"),
                "install git (e.g. `apt-get install git`) and put it on PATH",
            ));
            false
        }
    }
}

/// The repository and its remote (`remote_url`, `None` when there is no
/// such remote): a warning when the URL carries a password.
fn remote_check(repo: &Path, config: &Config, remote_url: Option<&str>) -> Check {
    match remote_url {
        Some(url) if crate::secret::url_password(url).is_some() => Check::warn(
            "repo",
            format!(
                "{} · remote {} = {} carries a password or token in its URL; agents running as you can read it in .git/config",
                repo.display(),
                config.remote,
                crate::secret::mask_url_passwords(url)
            ),
            "give git the token through a credential helper or GITHUB_TOKEN, and remove it from the URL (`git remote set-url`)",
        ),
        Some(url) => Check::pass(
            "repo",
            format!("{} · remote {} = {}", repo.display(), config.remote, url),
        ),
        None => Check::fail(
            "repo",
            format!("{}: no remote named {:?}", repo.display(), config.remote),
            format!(
                "`git remote add {} URL`, or set `remote` in .nightshift/config.toml",
                config.remote
            ),
        ),
    }
}

/// The base branch on the remote (with the token for https remotes).
fn base_check(repo: &Path, config: &Config, token: Option<&forge::Secret>) -> Check {
    let heads = Git::new(repo)
        .timeout(NETWORK_TIMEOUT)
        .token(token.map(forge::Secret::expose))
        .text(&["ls-remote", "--heads", &config.remote, &config.base]);
    match heads {
        Ok(t)
            if t.lines()
                .any(|l| l.ends_with(&format!("refs/heads/{}", config.base))) =>
        {
            Check::pass("base", format!("{}/{} exists", config.remote, config.base))
        }
        Ok(_) => Check::fail(
            "base",
            format!("no branch {:?} on {}", config.base, config.remote),
            format!(
                "push it (`git push {} {}`) or set `base` in the config",
                config.remote, config.base
            ),
        ),
        Err(e) => Check::fail(
            "base",
            format!("cannot list {}: {e}", config.remote),
            "check the remote URL and your credentials (`git ls-remote` must work)",
        ),
    }
}

/// The backlog (found, readable, every item well formed: what `plan` needs)
/// and the gate (each `verify` command's programs exist where the gate runs
/// them; a project tool has its project file). docs/commands.md `doctor`.
fn backlog_and_gate_checks(out: &mut Vec<Check>, repo: &Path, loaded: &Loaded) {
    let config = &loaded.config;
    // The config's gate, then each open item's own `verify:` lines.
    let mut gates: Vec<(String, String)> = config
        .verify
        .iter()
        .map(|v| (format!("verify in {}", loaded.path.display()), v.clone()))
        .collect();
    match crate::settings::read_backlog(repo, loaded) {
        Err(e) => out.push(Check::fail("backlog", e.to_string(), "create it, or point `backlog` in the config at it; `nightshift init` writes an example")),
        Ok(bl) => {
            let open = bl.items.iter().filter(|i| !i.done).count();
            match crate::plan::build_plan(repo, &bl, loaded) {
                Err(problems) => {
                    let shown: Vec<String> = problems.iter().take(3).map(ToString::to_string).collect();
                    let more = problems.len().saturating_sub(shown.len());
                    out.push(Check::fail(
                        "backlog",
                        format!("{} problem(s): {}{}", problems.len(), shown.join("; "), if more > 0 { format!("; and {more} more") } else { String::new() }),
                        "fix each line named (`nightshift plan` lists them all)",
                    ));
                }
                Ok(_) => out.push(Check::pass("backlog", format!("{}: {open} open item(s), well formed", config.backlog))),
            }
            for item in bl.items.iter().filter(|i| !i.done) {
                let lines = item.details.lines.iter().filter(|l| l.kind == crate::backlog::DetailKind::Verify);
                for (line, v) in lines.zip(&item.details.verify) {
                    gates.push((format!("{}:{} verify:", config.backlog, line.line), v.clone()));
                }
            }
        }
    }
    out.push(gate_check(repo, &loaded.path, &gates));
    // Setup commands run in the sandbox as the gate does.
    let setup = config.setup.iter();
    gates.extend(setup.map(|s| (format!("setup in {}", loaded.path.display()), s.clone())));
    out.extend(sandbox::hidden_programs(loaded, repo, &gates));
}

/// One line for every gate command: FAIL when a program is missing (every
/// item would end `tests_failed`), warn when a project tool has no project.
fn gate_check(repo: &Path, config_path: &Path, gates: &[(String, String)]) -> Check {
    use crate::gate::Program;
    let mut missing = Vec::new();
    let mut odd = Vec::new();
    for (origin, command) in gates {
        let mut after_cd = false;
        for p in crate::gate::programs(command) {
            match &p {
                Program::Builtin(b) => after_cd |= b == "cd",
                Program::Unknown(_) => {}
                Program::Path(path) => {
                    let full = repo.join(path);
                    if !full.is_file() {
                        missing.push(format!(
                            "{origin} `{command}`: {path} is not a file of the repository"
                        ));
                    } else if which(&full.display().to_string()).is_none() {
                        missing.push(format!("{origin} `{command}`: {path} is not executable (`chmod +x {path}`, or run it with `sh {path}`)"));
                    }
                }
                Program::Name(name) => {
                    if which(name).is_none() {
                        missing.push(format!("{origin} `{command}`: `{name}` is not on PATH"));
                    } else if let Some(files) = crate::gate::project_files(name)
                        && !after_cd
                        && !files.iter().any(|f| repo.join(f).is_file())
                    {
                        odd.push(format!(
                            "{origin} `{command}` runs {name}, but the repository has no {}",
                            files.join(" or ")
                        ));
                    }
                }
            }
        }
    }
    let suggestion = match crate::gate::guess(repo) {
        Some(g) => format!("e.g. `verify = [\"{}\"]` ({})", g.command, g.because),
        None => "e.g. `verify = [\"sh test.sh\"]`".to_string(),
    };
    let fix = format!(
        "set `verify` in {} to the project's own test command, {suggestion}",
        config_path.display()
    );
    if gates
        .iter()
        .any(|(_, c)| c == crate::config::PLACEHOLDER_GATE)
    {
        Check::fail(
            "gate",
            "`verify` is still the placeholder `nightshift init` wrote (it found no test command)",
            fix,
        )
    } else if !missing.is_empty() {
        Check::fail(
            "gate",
            missing.join("; "),
            format!("install what is missing, or {fix}"),
        )
    } else if !odd.is_empty() {
        Check::warn("gate", odd.join("; "), fix)
    } else if gates.is_empty() {
        Check::warn(
            "gate",
            "no gate command: every item would pass unverified",
            fix,
        )
    } else {
        let shown: Vec<&str> = gates.iter().map(|(_, c)| c.as_str()).collect();
        Check::pass(
            "gate",
            format!("`{}`: every program found", shown.join("`, `")),
        )
    }
}

/// Without a repository only the machine-wide checks can run.
async fn finish_without_repo(mut out: Vec<Check>, _startup: &Startup) -> Vec<Check> {
    database_and_data_checks(&mut out).await;
    out
}

/// Token, scopes, API, label and the PRs' CI (docs/github.md).
async fn github_checks(
    out: &mut Vec<Check>,
    _repo: &Path,
    config: &Config,
    remote_url: Option<&str>,
    token: Option<(forge::Secret, &'static str)>,
) {
    let Some((token, source)) = token else {
        // Without a token the night still runs (docs/github.md#token): branches are pushed
        // and the report shows the PRs that would have been opened. That is a
        // failure only when the repository is on GitHub, where PRs are wanted.
        let why = crate::settings::no_token(config, remote_url);
        out.push(if why.on_github {
            Check::fail("token", why.what, why.fix)
        } else {
            Check::warn("token", why.what, why.fix)
        });
        for name in ["api", "label", "ci"] {
            out.push(Check::warn(
                name,
                "not checked: no GitHub token",
                "see the token line",
            ));
        }
        return;
    };
    let id = match forge::resolve_repo(
        std::env::var("GH_REPO").ok().as_deref(),
        config.github_repo.as_deref(),
        remote_url,
    ) {
        Ok(id) => id,
        Err(e) => {
            out.push(Check::pass("token", format!("from {source}")));
            out.push(Check::fail(
                "api",
                e.to_string(),
                "set GH_REPO=OWNER/REPO or `github_repo` in the config",
            ));
            return;
        }
    };
    let actions_env = std::env::var("GITHUB_ACTIONS").ok();
    let actions_token = ci::is_actions_token(actions_env.as_deref(), source, token.expose());
    let base = forge::api_base();
    let f = match Forge::new(&base, token, id.clone(), None) {
        // Two tries, 10 s each: a check, not a night's patience.
        Ok(f) => f.with_retry_policy(forge::RetryPolicy {
            max_attempts: 2,
            request_timeout: Duration::from_secs(10),
            ..forge::RetryPolicy::from_env()
        }),
        Err(e) => {
            out.push(Check::fail("api", e.to_string(), "check GITHUB_API_URL"));
            return;
        }
    };
    let probe = match f.probe_repo().await {
        Ok(p) => p,
        Err(e) => {
            out.push(Check::pass("token", format!("from {source}")));
            out.push(Check::fail("api", format!("{base} for {id}: {e}"), "check the network, GITHUB_API_URL, the token's validity and its access to the repository"));
            return;
        }
    };
    out.push(scope_check(source, probe.scopes.as_deref()));
    out.push(api_check(&base, &id, &probe));
    out.push(label_check(&f, &config.label, &probe).await);
    out.push(ci::ci_check(&f, &config.base, actions_token).await);
}

/// The token's source and scopes (`None`: a fine-grained or app token,
/// for which GitHub lists none): it needs `repo` or `public_repo`.
fn scope_check(source: &str, scopes: Option<&str>) -> Check {
    match scopes {
        None => Check::pass(
            "token",
            format!("from {source} (fine-grained or app token: GitHub lists no scopes)"),
        ),
        Some(s)
            if s.split(',')
                .any(|x| matches!(x.trim(), "repo" | "public_repo")) =>
        {
            Check::pass("token", format!("from {source}, scopes: {s}"))
        }
        Some(s) => Check::fail(
            "token",
            format!(
                "from {source}, scopes: {}",
                if s.is_empty() { "none" } else { s }
            ),
            "the token needs the `repo` scope (or `public_repo` for a public repository) to push and open PRs",
        ),
    }
}

/// The repository `id` at the API `base`: archived (every PR refused), moved
/// (GitHub redirects), or readable.
fn api_check(base: &str, id: &forge::RepoId, probe: &forge::RepoProbe) -> Check {
    let moved = probe
        .full_name
        .as_deref()
        .filter(|n| !n.eq_ignore_ascii_case(&id.to_string()));
    if probe.archived {
        Check::fail(
            "api",
            format!(
                "{base} reachable, but {id} is archived: GitHub refuses every PR and label there"
            ),
            "unarchive it on GitHub (Settings → General), or point GH_REPO / `github_repo` and the remote at the active repository",
        )
    } else if let Some(now) = moved {
        Check::warn(
            "api",
            format!(
                "{base} reachable; {id} is now {now} (renamed or transferred; GitHub redirects, nightshift follows)"
            ),
            format!("set GH_REPO / `github_repo` or the remote URL to {now}"),
        )
    } else {
        Check::pass("api", format!("{base} reachable, {id} readable"))
    }
}

/// The PR label: present, or missing and creatable with the first PR
/// (unless the token may not push, going by `probe`).
async fn label_check(f: &Forge, label: &str, probe: &forge::RepoProbe) -> Check {
    match f.label_exists(label).await {
        Ok(true) => Check::pass("label", format!("{label:?} exists")),
        Ok(false) if probe.can_push != Some(false) => Check::pass(
            "label",
            format!("{label:?} missing; it will be created with the first PR"),
        ),
        Ok(false) => Check::fail(
            "label",
            format!("{label:?} missing and the token cannot create it (no push permission)"),
            format!("create the label {label:?} on GitHub, or use a token with write access"),
        ),
        Err(e) => Check::fail(
            "label",
            e.to_string(),
            "check the token's access to the repository",
        ),
    }
}

/// The executable `exe` resolves to: a path with `/` as is, else the first
/// executable file of that name on PATH.
fn which(exe: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if exe.contains('/') {
        let p = PathBuf::from(exe);
        return executable(&p).then_some(p);
    }
    which::which_global(exe).ok()
}

/// Root needs `agent_user` when the claude writer skips permissions, and
/// otherwise `agent_user` or `agents_as_root = true`; a configured
/// `agent_user` must exist (docs/security.md).
fn root_check(config: &Config) -> Check {
    let root = nix::unistd::geteuid().is_root();
    let skip = config
        .writer
        .permission_flags
        .iter()
        .flatten()
        .chain(config.writer.command.iter())
        .any(|f| f == "--dangerously-skip-permissions");
    match (&config.agent_user, root) {
        (Some(u), true) => match nix::unistd::User::from_name(u) {
            Ok(Some(_)) => Check::pass(
                "user",
                format!("running as root; agents and gates run as {u:?}"),
            ),
            _ => Check::fail(
                "user",
                format!("running as root; agent_user {u:?} does not exist"),
                format!("create it (`useradd -m {u}`) or fix `agent_user`"),
            ),
        },
        (None, true) if skip && config.writer.kind == AgentKind::Claude => Check::fail(
            "user",
            "running as root without agent_user, and the claude writer uses --dangerously-skip-permissions (claude refuses that under root)",
            "set `agent_user = \"<unprivileged user>\"` or run nightshift as a normal user",
        ),
        (None, true) if config.agents_as_root => Check::warn(
            "user",
            "running as root without agent_user (agents_as_root = true): agents and gates run as root and can read everything nightshift holds, the GitHub token in its memory included",
            "set `agent_user = \"<unprivileged user>\"` in the config to confine them",
        ),
        (None, true) => Check::fail(
            "user",
            "running as root without agent_user: drain refuses to run agents as root (they could read the GitHub token in nightshift's memory)",
            "set `agent_user = \"<unprivileged user>\"`, or `agents_as_root = true` to accept that",
        ),
        (_, false) => Check::pass("user", format!("running as uid {}", nix::unistd::geteuid())),
    }
}

/// The ledger (reachable, migrated) and the data directory (writable).
async fn database_and_data_checks(out: &mut Vec<Check>) {
    let src = crate::ledger::db_source_from_env();
    let what = src.describe();
    // One plain connection first: the pool would retry a refused connection
    // until its timeout, where one attempt already says enough.
    if let crate::ledger::DbSource::Url { url, .. } = &src {
        use sqlx::Connection as _;
        let once = tokio::time::timeout(
            NETWORK_TIMEOUT,
            sqlx::postgres::PgConnection::connect(url.expose()),
        )
        .await;
        let err = match once {
            Ok(Ok(c)) => {
                let _ = c.close().await;
                None
            }
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {} s", NETWORK_TIMEOUT.as_secs())),
        };
        if let Some(e) = err {
            out.push(Check::fail("database", format!("{what}: {}", crate::secret::Redactor::new([url.expose()]).redact(&e)), "start PostgreSQL or fix NIGHTSHIFT_DATABASE_URL / DATABASE_URL (unset both to use the embedded cluster: `nightshift db start`)"));
            data_dir_check(out);
            return;
        }
    }
    match crate::ledger::Ledger::connect_with_timeout(&src, NETWORK_TIMEOUT).await {
        Ok(lg) => {
            let applied = crate::ledger::applied_migrations(&lg.pool).await;
            let expected = sqlx::migrate!().migrations.len() as i64;
            out.push(match applied {
                Ok(n) if n >= expected => Check::pass("database", format!("{what}: reachable, {n} migration(s) applied")),
                Ok(n) => Check::fail("database", format!("{what}: {n} of {expected} migrations applied"), "run any nightshift command against it to migrate, or check the database user's rights"),
                Err(e) => Check::fail("database", format!("{what}: cannot read the migrations: {e}"), "check the database user's rights"),
            });
            out.push(clock_check(&lg.pool).await);
        }
        Err(e) => out.push(Check::fail("database", format!("{e}"), "start PostgreSQL or fix NIGHTSHIFT_DATABASE_URL / DATABASE_URL (unset both to use the embedded cluster: `nightshift db start`)")),
    }
    data_dir_check(out);
}

/// This host's clock against the ledger server's: every host's deadline,
/// sleeps and leases are judged by the server's, but a host off by more
/// than a few seconds is told so (docs/workers.md#what-clocks-must-agree).
async fn clock_check(pool: &sqlx::PgPool) -> Check {
    let read = tokio::time::timeout(NETWORK_TIMEOUT, crate::queue::sync_clock(pool)).await;
    match read {
        Ok(Ok((host, server))) => match crate::schedule::skew_note(host, server) {
            None => Check::pass(
                "clock",
                format!(
                    "this host's clock agrees with the ledger server's (within {} s)",
                    crate::schedule::MAX_SKEW.as_secs()
                ),
            ),
            Some(note) => Check::warn(
                "clock",
                note,
                "synchronise this host's clock (NTP: `timedatectl set-ntp true`)",
            ),
        },
        Ok(Err(e)) => Check::warn(
            "clock",
            format!("cannot read the ledger server's clock: {e}"),
            "check the database user's rights",
        ),
        Err(_) => Check::warn(
            "clock",
            format!(
                "the ledger server did not tell its time within {} s",
                NETWORK_TIMEOUT.as_secs()
            ),
            "check the database server",
        ),
    }
}

/// The data directory (slots, logs) must be writable.
fn data_dir_check(out: &mut Vec<Check>) {
    let dir = crate::settings::data_dir();
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    let written = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&probe, b"ok"));
    let _ = std::fs::remove_file(&probe);
    out.push(match written {
        Ok(()) => Check::pass("data dir", format!("{} writable", dir.display())),
        Err(e) => Check::fail(
            "data dir",
            format!("{}: {e}", dir.display()),
            "make it a writable directory, or set NIGHTSHIFT_DATA_DIR",
        ),
    });
}
