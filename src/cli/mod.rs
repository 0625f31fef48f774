//! The command line (SPEC §2): argument definitions, the shared set-up every
//! command needs (repository, config, ledger, zone), and dispatch to one file
//! per subcommand. Errors become exit codes in `error.rs`, nowhere else.

mod db;
mod doctor;
mod drain;
mod init;
mod limit;
mod plan;
mod progress;
mod report;
mod schedule;
mod sync;

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::config::{self, Loaded};
use crate::error::{Error, ExitCode, Result};
use crate::secret::Secret;

/// nightshift — drain a markdown backlog overnight with coding agents, one
/// reviewed, green, labelled PR per item. It never merges.
#[derive(Debug, Parser)]
#[command(name = "nightshift", version, about, propagate_version = true)]
pub struct Cli {
    /// Repository to work on (default: the one containing the current directory).
    #[arg(long, global = true, env = "NIGHTSHIFT_REPO", value_name = "PATH")]
    pub repo: Option<PathBuf>,
    /// Config file (default: REPO/.nightshift/config.toml).
    #[arg(long, global = true, env = "NIGHTSHIFT_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// More log output (-v, -vv).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Less output: errors only.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create .nightshift/ (config, .gitignore) and NEXT.md from the example if none.
    Init,
    /// Snapshot the backlog, seal one contract per open item, print the cards and the plan SHA.
    Plan {
        /// Print JSON (shape in the README, "JSON output").
        #[arg(long)]
        json: bool,
    },
    /// Record an approval of that exact plan (or contract) SHA: immutable, 24 h, single use.
    Approve {
        /// The plan SHA `plan` printed (or a contract SHA, for `run`).
        sha: String,
    },
    /// Run every item of an approved plan, in backlog order, until done or the deadline.
    Drain(RunArgs),
    /// Run one item (default: the first open one), one PR, then stop.
    Run {
        /// Index as `plan` shows it, or a text fragment matching exactly one open title.
        item: Option<String>,
        #[command(flatten)]
        args: RunArgs,
    },
    /// What a run did, item by item (default: the latest run).
    Report {
        /// The run to show: its id or a prefix of 4+ hex digits (default:
        /// the latest). Also accepted as `--run ID`.
        #[arg(value_name = "RUN", conflicts_with = "run")]
        run_id: Option<String>,
        /// Run id (same as the positional RUN).
        #[arg(long)]
        run: Option<String>,
        /// Print JSON (shape in the README, "JSON output").
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// Print markdown, for pasting into an issue or a chat.
        #[arg(long)]
        markdown: bool,
        /// Print the PR bodies (and the PRs that would have been opened).
        #[arg(long)]
        show_body: bool,
    },
    /// What is running now: item, round, phase, or the usage-limit sleep.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Open one PR that ticks the backlog boxes of items whose PRs were merged.
    Sync,
    /// Check git, remote, token, API, label, agents, database and data dir; one line each.
    Doctor,
    /// Stay in the foreground and start a drain at each fire time of a cron expression.
    Schedule {
        /// Cron expression: 5 fields `min hour day month weekday`, or 6 with seconds first.
        #[arg(long, value_name = "EXPR")]
        cron: String,
        /// Zone of the fire times (default: config `timezone`, $TZ, system).
        #[arg(long, value_name = "ZONE")]
        tz: Option<String>,
        /// Print a crontab line instead of staying in the foreground.
        #[arg(long, conflicts_with = "print_systemd")]
        print_crontab: bool,
        /// Print a systemd service and timer instead of staying in the foreground.
        #[arg(long)]
        print_systemd: bool,
    },
    /// Explain how a piece of agent output is read as a usage limit.
    Limit {
        #[command(subcommand)]
        what: LimitCommand,
    },
    /// The embedded database (a private PostgreSQL cluster).
    Db {
        #[command(subcommand)]
        what: DbCommand,
    },
}

/// Flags shared by `drain` and `run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// The plan (or, for `run`, contract) SHA to run under.
    #[arg(long, value_name = "SHA")]
    pub approve: Option<String>,
    /// Stop starting work at this time: HH:MM (local) or RFC 3339 (default: config `deadline`).
    #[arg(long, value_name = "HH:MM|RFC3339")]
    pub deadline: Option<String>,
    /// Time zone for the deadline and limit messages (default: config, $TZ, system).
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
}

/// `limit` subcommands.
#[derive(Debug, Subcommand)]
pub enum LimitCommand {
    /// Read TEXT (or stdin) as agent output.
    Parse {
        /// The text (default: stdin).
        text: Option<String>,
        /// Pretend it is this instant (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// Zone of local times in the text (default: $TZ, system).
        #[arg(long)]
        tz: Option<String>,
        /// Print JSON (shape in the README, "JSON output").
        #[arg(long)]
        json: bool,
    },
}

/// `db` subcommands.
#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Start the embedded cluster (created on first use).
    Start,
    /// Stop the embedded cluster.
    Stop,
    /// Say where it is and whether it runs.
    Status,
}

/// What `main` hands over: the token variables it removed from its own
/// environment at start-up (SPEC §6), kept in memory only.
pub struct Startup {
    /// (variable, value) pairs removed before any thread started.
    pub removed: Vec<(String, Secret)>,
}

/// Runs the CLI and returns the process exit code.
pub fn main(startup: Startup) -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return std::process::ExitCode::from(code);
        }
    };
    // A relative data dir would land wherever the command runs: in the
    // user's working tree, most often.
    if let Some(d) = std::env::var_os("NIGHTSHIFT_DATA_DIR")
        .filter(|d| !d.is_empty() && Path::new(d).is_relative())
    {
        eprintln!(
            "error: NIGHTSHIFT_DATA_DIR={} is a relative path; give an absolute one (e.g. $HOME/.local/share/nightshift)",
            Path::new(&d).display()
        );
        return std::process::ExitCode::from(2);
    }
    // A run keeps its tracing events as JSON lines, one file per run.
    let run_log = match cli.command {
        Command::Drain(_) | Command::Run { .. } => {
            match progress::open_run_log(&progress::log_dir()) {
                Ok((path, file)) => {
                    let _ = progress::RUN_LOG.set(path);
                    Some(file)
                }
                Err(e) => {
                    eprintln!(
                        "warning: cannot open a log file in {}: {e}; logging to stderr only",
                        progress::log_dir().display()
                    );
                    None
                }
            }
        }
        _ => None,
    };
    progress::init_tracing(cli.verbose, cli.quiet, run_log);
    quiet_broken_pipe();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let result = rt.block_on(dispatch(cli, startup));
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(code) => std::process::ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {}", crate::secret::redact_known(&e.message));
            std::process::ExitCode::from(e.code as u8)
        }
    }
}

/// `nightshift plan | head` closes our stdout early: like other Unix tools,
/// stop quietly with success instead of panicking with a backtrace.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

async fn dispatch(cli: Cli, startup: Startup) -> Result<ExitCode> {
    match &cli.command {
        Command::Limit {
            what:
                LimitCommand::Parse {
                    text,
                    now,
                    tz,
                    json,
                },
        } => limit::parse(text.clone(), now.as_deref(), tz.as_deref(), *json),
        Command::Db { what } => db::run(what).await,
        Command::Init => init::run(&cli),
        Command::Plan { json } => plan::plan(&cli, *json, &startup).await,
        Command::Approve { sha } => plan::approve(&cli, sha).await,
        Command::Drain(args) => drain::drain(&cli, args, None, &startup).await,
        Command::Run { item, args } => drain::drain(&cli, args, Some(item.clone()), &startup).await,
        Command::Schedule {
            cron,
            tz,
            print_crontab,
            print_systemd,
        } => {
            let mode = match (print_crontab, print_systemd) {
                (true, _) => schedule::Mode::Crontab,
                (_, true) => schedule::Mode::Systemd,
                _ => schedule::Mode::Foreground,
            };
            schedule::schedule(&cli, cron, tz.as_deref(), mode, &startup).await
        }
        Command::Report {
            run_id,
            run,
            json,
            markdown,
            show_body,
        } => {
            let format = if *json {
                report::ReportFormat::Json
            } else if *markdown {
                report::ReportFormat::Markdown
            } else {
                report::ReportFormat::Text
            };
            report::report(
                &cli,
                run_id.as_deref().or(run.as_deref()),
                format,
                *show_body,
            )
            .await
        }
        Command::Status { json } => report::status(&cli, *json).await,
        Command::Sync => sync::sync(&cli, &startup).await,
        Command::Doctor => doctor::doctor(&cli, &startup).await,
    }
}

/// The user's repository root: `--repo` or the current directory's repo.
///
/// # Errors
/// Exit 2 when it is not inside a git repository.
pub fn repo_root(cli: &Cli) -> Result<PathBuf> {
    let start = match &cli.repo {
        Some(p) => p.clone(),
        None => std::env::current_dir()
            .map_err(|e| Error::usage(format!("cannot read the current directory: {e}")))?,
    };
    if !start.exists() {
        return Err(Error::usage(format!(
            "{}: no such directory (given with --repo)",
            start.display()
        )));
    }
    let out = crate::git::Git::new(&start).text(&["rev-parse", "--show-toplevel"]);
    match out {
        Ok(top) => Ok(PathBuf::from(top.trim())),
        Err(_) => Err(Error::usage(format!(
            "{}: not inside a git repository; run nightshift in your project or pass --repo PATH",
            start.display()
        ))),
    }
}

/// Loads the config of `repo` (or `--config`).
///
/// # Errors
/// Exit 2 with file:line for a bad config.
pub fn load_config(cli: &Cli, repo: &Path) -> Result<Loaded> {
    let path = cli
        .config
        .clone()
        .unwrap_or_else(|| repo.join(config::DIR).join(config::FILE));
    if cli.config.is_some() && !path.exists() {
        return Err(Error::usage(format!(
            "{}: config file not found (given with --config)",
            path.display()
        )));
    }
    let mut loaded = config::load(&path)?;
    // An agent given by a relative path (`./tools/writer.sh`) means the
    // repository's file; agents run in the checkout, where that relative
    // path would point elsewhere (or nowhere).
    for a in [&mut loaded.config.writer, &mut loaded.config.reviewer] {
        if let Some(exe) = a.command.first_mut()
            && exe.contains('/')
            && Path::new(exe.as_str()).is_relative()
        {
            *exe = repo.join(exe.as_str()).display().to_string();
        }
    }
    Ok(loaded)
}

/// The repository's identity in the ledger and for the drain lock: the URL
/// of its remote, so that two clones of one repository share one lock, one
/// history and one set of PRs (two clones must not both run an item and
/// force-push over each other's branch); without that remote, its canonical
/// path. Moving a checkout keeps its history.
pub fn repo_id(repo: &Path, remote: &str) -> String {
    match crate::git::Git::new(repo).text(&["remote", "get-url", "--", remote]) {
        Ok(url) => normalize_remote_url(url.trim(), repo),
        Err(_) => std::fs::canonicalize(repo)
            .unwrap_or_else(|_| repo.to_path_buf())
            .display()
            .to_string(),
    }
}

/// A remote URL in one spelling, so that every way of writing one
/// repository's address is one identity:
/// - a network URL (`https://`, `http://`, `ssh://`, `git://`, scp-like
///   `user@host:path`) becomes `host/path`: no scheme, user or port, the
///   host in lower case, no leading `/` or `~/`, no trailing `/` or `.git`
///   (so `git@github.com:o/r.git` and `https://github.com/o/r` are both
///   `github.com/o/r`); GitHub's owner and name are case-insensitive, so
///   a `github.com` path is lower-cased too;
/// - a local path (absolute, relative to the repository, or `file://`)
///   becomes its canonical path, without `.git`.
pub(crate) fn normalize_remote_url(url: &str, repo: &Path) -> String {
    let url = url.trim().trim_end_matches('/');
    let url = url
        .strip_suffix(".git")
        .unwrap_or(url)
        .trim_end_matches('/');
    let scp_like = !url.contains("://")
        && url
            .split_once(':')
            .is_some_and(|(host, _)| !host.contains('/'));
    let network = if let Some((scheme, rest)) = url.split_once("://") {
        (scheme != "file").then(|| {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            (authority.to_string(), path.to_string())
        })
    } else if scp_like {
        url.split_once(':')
            .map(|(a, p)| (a.to_string(), p.to_string()))
    } else {
        None
    };
    if let Some((authority, path)) = network {
        let host_port = authority
            .rsplit_once('@')
            .map_or(authority.as_str(), |(_, h)| h);
        // `[::1]:22` keeps its brackets; `host:22` loses its port.
        let host = match host_port.rsplit_once(':') {
            Some((h, port))
                if port.chars().all(|c| c.is_ascii_digit())
                    && (!h.starts_with('[') || h.ends_with(']')) =>
            {
                h
            }
            _ => host_port,
        }
        .to_ascii_lowercase();
        let path = path.trim_start_matches('/').trim_start_matches("~/");
        let path = if host == "github.com" {
            path.to_ascii_lowercase()
        } else {
            path.to_string()
        };
        return format!("{host}/{path}");
    }
    let p = url.strip_prefix("file://").unwrap_or(url);
    let path = repo.join(p);
    let canonical = std::fs::canonicalize(&path)
        .or_else(|_| std::fs::canonicalize(format!("{}.git", path.display())))
        .unwrap_or(path);
    let shown = canonical.display().to_string();
    shown.strip_suffix(".git").unwrap_or(&shown).to_string()
}

/// [`repo_id`] with the remote named by the config (read leniently: a
/// command that only reads the ledger should not fail on a config typo).
pub fn repo_identity(cli: &Cli, repo: &Path) -> String {
    let remote = load_config(cli, repo)
        .map(|l| l.config.remote)
        .unwrap_or_else(|_| "origin".into());
    repo_id(repo, &remote)
}

/// The GitHub client for `repo` (SPEC §8): owner/repo from `GH_REPO`, else
/// config `github_repo`, else the remote's URL; API base from
/// `GITHUB_API_URL`; the retry policy from the environment. `deadline`
/// bounds the waits of its retries.
///
/// # Errors
/// A sentence saying why there is no client (no GitHub repository, a bad
/// API base) and how to fix it.
pub fn github_client(
    repo: &Path,
    config: &crate::config::Config,
    token: &Secret,
    deadline: Option<chrono::DateTime<chrono::Utc>>,
) -> std::result::Result<crate::forge::Forge, String> {
    use crate::forge;
    let remote_url = crate::git::Git::new(repo)
        .text(&["remote", "get-url", "--", &config.remote])
        .ok()
        .map(|s| s.trim().to_string());
    let id = forge::resolve_repo(
        std::env::var("GH_REPO").ok().as_deref(),
        config.github_repo.as_deref(),
        remote_url.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let f = forge::Forge::new(&forge::api_base(), token.clone(), id, deadline)
        .map_err(|e| e.to_string())?;
    Ok(f.with_retry_policy(forge::RetryPolicy::from_env()))
}

/// The environment agents run with (SPEC §6): ours without the token
/// variables, the ledger's (both URL variables and `PG*`) and the config's
/// `secrets` (see [`crate::process::child_env`]).
pub(crate) fn agents_environment(
    config: &crate::config::Config,
) -> std::collections::BTreeMap<String, String> {
    crate::process::child_env(std::env::vars(), &config.secrets)
}

/// Why nightshift has no GitHub token, and how to give it one.
pub const NO_TOKEN: &str =
    "no GitHub token: set GITHUB_TOKEN or GH_TOKEN, or log in with `gh auth login`";

/// nightshift's data directory (slots, logs, the embedded cluster; SPEC §10):
/// `NIGHTSHIFT_DATA_DIR`, else `/var/lib/nightshift` as root, else the XDG
/// data dir.
pub fn data_dir() -> PathBuf {
    use crate::ledger::embedded;
    embedded::nightshift_data_dir(&embedded::process_env, embedded::running_as_root())
}

/// Connects to the ledger chosen by the environment (SPEC §9).
///
/// # Errors
/// Exit 1 with the source named when the database is unreachable.
pub async fn ledger() -> Result<crate::ledger::Ledger> {
    let src = crate::ledger::db_source_from_env();
    crate::ledger::Ledger::connect(&src)
        .await
        .map_err(|e| match e {
            // A URL that cannot be a PostgreSQL URL is a configuration error.
            crate::ledger::LedgerError::BadUrl { .. } => Error::usage(format!("ledger: {e}")),
            e => Error::failure(format!("ledger: {e}")),
        })
}

#[cfg(test)]
mod identity_tests {
    use super::normalize_remote_url;
    use std::path::Path;

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
