//! The command line (docs/commands.md): argument definitions, the shared set-up every
//! command needs (repository, config, ledger, zone), and dispatch to one file
//! per subcommand. Errors become exit codes in `error.rs`, nowhere else.

mod db;
mod doctor;
mod drain;
mod init;
mod limit;
pub(crate) mod notify;
mod plan;
mod progress;
mod report;
mod schedule;
mod sync;

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::config::Loaded;
use crate::error::{ExitCode, Result};

pub use crate::settings::{
    NoToken, Startup, data_dir, github_client, ledger, ledger_serial, no_token, repo_id,
};
pub(crate) use crate::settings::{agents_environment, install_approval_key, no_token_in};

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
        /// Index as `plan` shows it, a text fragment matching exactly one
        /// open title, or `#N` to tend nightshift's open PR N.
        item: Option<String>,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Join the live run of this repository (from any host sharing the
    /// ledger) and claim its items until it is drained or its deadline.
    Worker {
        /// Workers in this process, each in its own checkout (default:
        /// config `jobs`, 1).
        #[arg(long, value_name = "N")]
        jobs: Option<u32>,
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
        /// Write the run as one self-contained HTML page with a timeline of
        /// the night, to FILE (`-`: standard output; default:
        /// `.nightshift/reports/<run id>.html`).
        #[arg(long, value_name = "FILE", num_args = 0..=1, conflicts_with_all = ["json", "markdown", "show_body"])]
        html: Option<Option<std::path::PathBuf>>,
        /// Night by night over a window: PRs opened, merged, closed, failures,
        /// tokens, cost, sleeps; merge rate and cost per merged PR.
        #[arg(long, conflicts_with_all = ["markdown", "show_body", "html", "run", "run_id"])]
        history: bool,
        /// The window of `--history`, back from now (e.g. `30d`, `2w`, `12h`).
        #[arg(
            long,
            value_name = "DURATION",
            default_value = "30d",
            requires = "history"
        )]
        since: String,
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
    /// Send a sample end-of-run message to the config's `[notify]` targets.
    Notify {
        /// Required: a sample, not a real run's summary.
        #[arg(long)]
        test: bool,
    },
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
    /// Workers in this process, each in its own checkout (`drain`; `run` takes none;
    /// default: config `jobs`, 1).
    #[arg(long, value_name = "N")]
    pub jobs: Option<u32>,
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
        Command::Drain(_) | Command::Run { .. } | Command::Worker { .. } => {
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
    let code: ExitCode = crate::error::exit_code(&result);
    if let Err(e) = result
        && !e.already_reported()
    {
        // An outage names where the ledger lives: the source is read here,
        // where the command's environment is known, not where it failed.
        let e = e.with_ledger_source(|| crate::ledger::db_source_from_env().describe());
        eprintln!("error: {}", crate::secret::redact_known(&e.to_string()));
    }
    std::process::ExitCode::from(code as u8)
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

async fn dispatch(cli: Cli, startup: Startup) -> Result<()> {
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
        Command::Worker { jobs } => drain::worker(&cli, *jobs, &startup).await,
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
            html,
            history,
            since,
        } => {
            if *history {
                return report::history(&cli, since, *json, &startup).await;
            }
            if let Some(file) = html {
                return report::html(&cli, run_id.as_deref().or(run.as_deref()), file.as_deref())
                    .await;
            }
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
        Command::Notify { test } => notify::notify_test(&cli, *test, &startup).await,
    }
}

/// `--repo` and `--config` as given.
pub(crate) fn location(cli: &Cli) -> crate::settings::Location {
    crate::settings::Location {
        repo: cli.repo.clone(),
        config: cli.config.clone(),
    }
}

/// The user's repository root: `--repo` or the current directory's repo
/// ([`crate::settings::repo_root`]).
///
/// # Errors
/// Exit 2 when it is not inside a git repository.
pub fn repo_root(cli: &Cli) -> Result<PathBuf> {
    crate::settings::repo_root(cli.repo.as_deref())
}

/// Loads the config of `repo` (or `--config`; [`crate::settings::load_config`]).
///
/// # Errors
/// Exit 2 with file:line for a bad config.
pub fn load_config(cli: &Cli, repo: &Path) -> Result<Loaded> {
    crate::settings::load_config(cli.config.as_deref(), repo)
}

/// [`repo_id`] with the remote named by the config (read leniently: a
/// command that only reads the ledger should not fail on a config typo).
pub fn repo_identity(cli: &Cli, repo: &Path) -> String {
    let remote = load_config(cli, repo)
        .map(|l| l.config.remote)
        .unwrap_or_else(|_| "origin".into());
    repo_id(repo, &remote)
}
