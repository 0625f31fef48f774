//! The command line's arguments as clap parses them (docs/commands.md): the
//! global flags ([`Cli`]), the subcommands ([`Command`]) and their own
//! flags. Raw values only: nothing here reads a file or checks a value
//! (see [`crate::settings`] and each command's file).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    Drain {
        #[command(flatten)]
        args: RunArgs,
        /// Also serve the live board (as `nightshift serve`) at ADDR while
        /// the drain runs (default 127.0.0.1:7420), on its own task and
        /// its own small pool.
        #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = crate::serve::DEFAULT_LISTEN)]
        serve: Option<String>,
    },
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
    /// Serve the live board of this repository's night over HTTP, read from
    /// the ledger (docs/serve.md): workers, queue, deadline, finished items,
    /// what needs you; an event stream and the state as JSON.
    Serve {
        /// Address to listen on, HOST:PORT (default 127.0.0.1:7420; any
        /// other than loopback needs the token printed at start-up).
        #[arg(long, value_name = "ADDR", default_value = crate::serve::DEFAULT_LISTEN)]
        listen: String,
        /// The run to show: its id or a prefix of 4+ hex digits (default:
        /// the newest run, whichever it is now).
        #[arg(long, value_name = "ID")]
        run: Option<String>,
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
