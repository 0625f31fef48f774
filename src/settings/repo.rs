//! The repository and its config as a command finds them: the root
//! (`--repo`), the config (`--config`, with the codex adapter's rule on
//! the flags nightshift owns), the repository's identity in the ledger,
//! and the snapshot every command that runs items starts from (the backlog
//! read once, the plan sealed). Not the config's own parsing and
//! validation ([`crate::config`]) nor the plan's building ([`crate::plan`]).

use std::path::{Path, PathBuf};

use crate::backlog;
use crate::config::{self, Loaded};
use crate::error::{Error, Result};
use crate::plan::{self as plans, Plan};

/// Where a command looks: `--repo` and `--config` as given (raw; see
/// [`repo_root`] and [`load_config`]).
#[derive(Debug, Clone, Default)]
pub struct Location {
    /// `--repo PATH`: the repository (default: the current directory's).
    pub repo: Option<PathBuf>,
    /// `--config PATH`: the config file (default:
    /// `<repo>/.nightshift/config.toml`).
    pub config: Option<PathBuf>,
}

/// The user's repository root: `given` (`--repo`) or the current
/// directory's repo.
///
/// # Errors
/// Exit 2 when it is not inside a git repository.
pub fn repo_root(given: Option<&Path>) -> Result<PathBuf> {
    let start = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir()
            .map_err(|e| Error::config(format!("cannot read the current directory: {e}")))?,
    };
    if !start.exists() {
        return Err(Error::argument(format!(
            "{}: no such directory (given with --repo)",
            start.display()
        )));
    }
    match crate::git::top_level(&start) {
        Some(top) => Ok(top),
        None => Err(Error::argument(format!(
            "{}: not inside a git repository; run nightshift in your project or pass --repo PATH",
            start.display()
        ))),
    }
}

/// Loads the config of `repo` (or `given`, `--config`).
///
/// # Errors
/// Exit 2 with file:line for a bad config.
pub fn load_config(given: Option<&Path>, repo: &Path) -> Result<Loaded> {
    let path = given
        .map(Path::to_path_buf)
        .unwrap_or_else(|| repo.join(config::DIR).join(config::FILE));
    if given.is_some() && !path.exists() {
        return Err(Error::argument(format!(
            "{}: config file not found (given with --config)",
            path.display()
        )));
    }
    let mut loaded = checked_load(&path)?;
    // An agent given by a relative path (`./tools/writer.sh`) means the
    // repository's file; agents run in the checkout, where that relative
    // path would point elsewhere (or nowhere).
    let c = &mut loaded.config;
    for a in [&mut c.writer, &mut c.reviewer]
        .into_iter()
        .chain(c.agents.values_mut())
    {
        if let Some(exe) = a.command.first_mut()
            && exe.contains('/')
            && Path::new(exe.as_str()).is_relative()
        {
            *exe = repo.join(exe.as_str()).display().to_string();
        }
    }
    Ok(loaded)
}

/// Loads the config at `path` ([`config::load`]) and applies the codex
/// adapter's rule: no codex `command` may carry a flag nightshift sets
/// itself or one that lifts the sandbox
/// ([`crate::agent::codex::conflicting_argument`],
/// docs/agents.md#read-only-reviewer).
///
/// # Errors
/// Exit 2 naming the file, the line and the key, as for any bad config.
pub fn checked_load(path: &Path) -> Result<Loaded> {
    let loaded = config::load(path)?;
    codex_rule(&loaded)?;
    Ok(loaded)
}

/// The refusal of a codex `command` that fights nightshift's own flags, at
/// the line of its `command` key.
fn codex_rule(loaded: &Loaded) -> std::result::Result<(), config::ConfigError> {
    let c = &loaded.config;
    let agents = c.agents.iter().map(|(n, a)| (format!("agents.{n}"), a));
    for (name, a) in [
        ("writer".to_string(), &c.writer),
        ("reviewer".into(), &c.reviewer),
    ]
    .into_iter()
    .chain(agents)
    {
        if a.kind == config::AgentKind::Codex
            && let Some(arg) = crate::agent::codex::conflicting_argument(&a.command)
        {
            // Only a file can name a command: the defaults carry no flag.
            let text = std::fs::read_to_string(&loaded.path).unwrap_or_default();
            return Err(config::refusal(
                &loaded.path,
                &text,
                "command",
                format!(
                    "[{name}] command must not carry {arg:?}: nightshift sets codex's --json, --sandbox (writer workspace-write, reviewer read-only) and --output-schema itself"
                ),
            ));
        }
    }
    Ok(())
}

/// The repository's identity in the ledger and for the drain lock: the URL
/// of its remote, so that two clones of one repository share one lock, one
/// history and one set of PRs (two clones must not both run an item and
/// force-push over each other's branch); without that remote, its canonical
/// path. Moving a checkout keeps its history.
pub fn repo_id(repo: &Path, remote: &str) -> String {
    match crate::git::remote_url(repo, remote) {
        Ok(url) => normalize_remote_url(&url, repo),
        Err(_) => std::fs::canonicalize(repo)
            .unwrap_or_else(|_| repo.to_path_buf())
            .display()
            .to_string(),
    }
}

/// A remote URL in one spelling, so that every way of writing one
/// repository's address is one identity: see
/// [`crate::remote::RemoteUrl::identity`] (`git@github.com:o/r.git` and
/// `https://github.com/o/r` are both `github.com/o/r`; a local remote is its
/// canonical path, relative paths resolved against `repo`).
pub fn normalize_remote_url(url: &str, repo: &Path) -> String {
    crate::remote::RemoteUrl::parse(url).identity(repo)
}

/// The snapshot every command that runs items starts from.
pub struct Snapshot {
    /// Repository root.
    pub repo: PathBuf,
    /// Config.
    pub loaded: Loaded,
    /// Sealed plan.
    pub plan: Plan,
}

/// Reads the backlog once and seals the plan.
///
/// # Errors
/// Exit 2: missing backlog, malformed items (every problem with file:line),
/// a bad config, or a config that cannot run (claude as root).
pub fn snapshot(at: &Location) -> Result<Snapshot> {
    let repo = repo_root(at.repo.as_deref())?;
    let loaded = load_config(at.config.as_deref(), &repo)?;
    check_runnable(&loaded)?;
    let bl = read_backlog(&repo, &loaded)?;
    let plan = plans::build_plan(&repo, &bl, &loaded).map_err(|problems| {
        let mut msg = format!(
            "{} problem(s) in the backlog; no card was made:\n",
            problems.len()
        );
        for p in &problems {
            msg.push_str(&format!("  {p}\n"));
        }
        Error::config(msg.trim_end().to_string())
    })?;
    Ok(Snapshot { repo, loaded, plan })
}

/// Reads and parses the configured backlog (problems are in the result, not
/// an error).
///
/// # Errors
/// Exit 2: the backlog is missing, not a regular file, unreadable or not
/// UTF-8; each message names the path and the fix.
pub fn read_backlog(repo: &std::path::Path, loaded: &Loaded) -> Result<backlog::Backlog> {
    let path = repo.join(&loaded.config.backlog);
    // A FIFO or a device would block the read (or never end): only a
    // regular file (or a link to one) of sane size is a backlog.
    let text = match crate::file::read_regular(&path, crate::file::MAX_TEXT_BYTES) {
        Ok(b) => backlog::decode(&PathBuf::from(&loaded.config.backlog), b)
            .map_err(|e| Error::config(e.to_string()))?,
        Err(e) if e.is_not_found() => {
            return Err(Error::config(format!(
                "{}: backlog not found; create it (`nightshift init` writes one from the example) or set `backlog` in {}",
                path.display(),
                loaded.path.display()
            )));
        }
        Err(e) => {
            return Err(Error::config(format!(
                "cannot read the backlog: {e} (or set `backlog` in {})",
                loaded.path.display()
            )));
        }
    };
    let display_path = PathBuf::from(&loaded.config.backlog);
    Ok(backlog::parse(&display_path, &text))
}

/// Configurations that cannot run unattended (docs/agents.md#running-as-root).
fn check_runnable(loaded: &Loaded) -> Result<()> {
    let c = &loaded.config;
    let root = nix::unistd::geteuid().is_root();
    let skip = c
        .writer
        .permission_flags
        .iter()
        .flatten()
        .any(|f| f == "--dangerously-skip-permissions")
        || c.writer
            .command
            .iter()
            .any(|f| f == "--dangerously-skip-permissions");
    if root && skip && c.writer.kind == config::AgentKind::Claude && c.agent_user.is_none() {
        return Err(Error::config(format!(
            "{}: the claude writer uses --dangerously-skip-permissions, which claude refuses under root (\"cannot be used with root/sudo privileges\"); set `agent_user = \"<unprivileged user>\"` or run nightshift as a normal user",
            loaded.path.display()
        )));
    }
    // Caught now rather than when the drain starts, after bedtime.
    if let Some(u) = &c.agent_user
        && root
        && !matches!(nix::unistd::User::from_name(u), Ok(Some(_)))
    {
        return Err(Error::config(format!(
            "{}: agent_user {u:?} is not an account on this machine; create it (`useradd -m {u}`) or fix `agent_user`",
            loaded.path.display()
        )));
    }
    Ok(())
}

/// Whether agents of a run under `c` would run as root: nightshift is root
/// and `agent_user` is not set (whether that is allowed is
/// [`agents_as_root_refusal`]'s question).
pub fn agents_run_as_root(c: &config::Config) -> bool {
    c.agent_user.is_none() && nix::unistd::geteuid().is_root()
}

/// Why agents may not start under `config_path`'s `c`, with the fix: as
/// root without `agent_user` they could read nightshift's memory (the
/// token), so that takes `agents_as_root = true` (docs/security.md).
/// `None` when they may.
pub fn agents_as_root_refusal(c: &config::Config, config_path: &std::path::Path) -> Option<String> {
    (agents_run_as_root(c) && !c.agents_as_root).then(|| format!(
        "{}: nightshift runs as root without `agent_user`, so agents would run as root and could read everything nightshift holds (its memory with the GitHub token, the approval key); set `agent_user = \"<unprivileged user>\"` to confine them, or `agents_as_root = true` to accept that",
        config_path.display()
    ))
}

/// Whether the calls of a run under `c` are built a sandbox
/// (docs/security.md#the-sandbox): `[sandbox] mode` is not `off` and this
/// kernel can build one (`sandbox::probe`).
pub fn sandbox_builds(c: &config::Config) -> bool {
    c.sandbox.mode != crate::sandbox::Mode::Off && crate::sandbox::probe().is_ok()
}

/// What the sandbox of a run under `config_path`'s `c` is on this host, in
/// one line for the top of the run and `doctor`: `Ok(None)` when it is
/// built; `Ok(Some(warning))` when it is not (mode `off`, or `auto` on a
/// kernel that cannot); `Err` (a refusal with the missing feature and its
/// fix) under `required` on such a kernel.
///
/// # Errors
/// The refusal's text, for exit 2.
pub fn sandbox_state(
    c: &config::Config,
    config_path: &std::path::Path,
) -> std::result::Result<Option<String>, String> {
    use crate::sandbox::Mode;
    if c.sandbox.mode == Mode::Off {
        return Ok(Some(
            "the sandbox is off (`[sandbox] mode = \"off\"`; `\"auto\"`, the default, builds it): agents, gates and setup run with everything their user can read and the whole network (docs/security.md#the-sandbox)".into(),
        ));
    }
    match crate::sandbox::probe() {
        Ok(()) => Ok(None),
        Err(missing) if c.sandbox.mode == Mode::Required => Err(format!(
            "{}: `[sandbox] mode = \"required\"` but the sandbox cannot be built here: {missing}; or set `mode = \"auto\"` to run without it",
            config_path.display()
        )),
        Err(missing) => Ok(Some(format!(
            "the sandbox cannot be built here, so agents, gates and setup run without it (`[sandbox] mode = \"auto\"`): {missing}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::normalize_remote_url;
    use std::path::Path;

    /// The codex flag rule is the codex adapter's, applied when the config
    /// is loaded for a command: same refusal, same file, line and key.
    #[test]
    fn a_codex_command_that_fights_the_sandbox_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let toml = "[writer]\nkind = \"codex\"\ncommand = [\"codex\", \"--sandbox\", \"danger-full-access\"]\n";
        std::fs::write(&path, toml).unwrap();
        let e = super::checked_load(&path).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::ExitCode::Usage);
        let e = e.to_string();
        assert!(e.contains("--sandbox") && e.contains("[writer]"), "{e}");
        assert!(e.contains("config.toml:3"), "{e}");
        // The rule is not config's own: parsing alone lets it through.
        assert!(crate::config::parse(&path, toml).is_ok());
    }

    #[test]
    fn one_repository_is_one_identity_however_its_remote_is_spelt() {
        let here = Path::new("/nonexistent-repo");
        for url in [
            "https://github.com/Owner/Repo.git",
            "https://github.com/owner/repo",
            "https://github.com/owner/repo/",
            "http://user:pw@github.com/owner/repo.git",
            "git@github.com:owner/repo.git",
            "git@GitHub.com:Owner/Repo",
            "ssh://git@github.com/owner/repo.git",
            "ssh://git@github.com:22/owner/repo",
            "git://github.com/owner/repo.git",
        ] {
            assert_eq!(
                normalize_remote_url(url, here),
                "github.com/owner/repo",
                "{url}"
            );
        }
        // Elsewhere the path keeps its case; the host does not.
        assert_eq!(
            normalize_remote_url("git@GHE.example.com:Team/App.git", here),
            "ghe.example.com/Team/App"
        );
        assert_eq!(
            normalize_remote_url("https://ghe.example.com/Team/App", here),
            "ghe.example.com/Team/App"
        );
        assert_eq!(
            normalize_remote_url("ssh://git@gitlab.example.com:2222/~/grp/app.git", here),
            "gitlab.example.com/grp/app"
        );
        assert_eq!(
            normalize_remote_url("ssh://git@[::1]:22/o/r", here),
            "[::1]/o/r"
        );
        // Two different repositories stay two.
        assert_ne!(
            normalize_remote_url("git@github.com:owner/repo", here),
            normalize_remote_url("git@github.com:owner/repo2", here)
        );
    }

    #[test]
    fn local_remotes_are_canonical_paths() {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("remote.git");
        std::fs::create_dir_all(&bare).unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let want = std::fs::canonicalize(&bare).unwrap().display().to_string();
        let want = want.strip_suffix(".git").unwrap().to_string();
        for url in [
            bare.display().to_string(),
            format!("file://{}", bare.display()),
            "../remote.git".to_string(),
            "../remote".to_string(),
        ] {
            assert_eq!(normalize_remote_url(&url, &repo), want, "{url}");
        }
    }
}
