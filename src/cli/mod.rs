//! The command line (docs/commands.md): the arguments ([`args`]), the
//! set-up every command needs ([`context`]: repository, config, ledger),
//! and here the entry point and the dispatch to one file per subcommand,
//! each of which calls the run, the settings or a read-only view and
//! prints. Errors become exit codes in `error.rs`, nowhere else.

mod args;
mod context;
mod db;
mod doctor;
mod drain;
mod init;
mod limit;
mod notify;
mod plan;
mod progress;
mod report;
mod schedule;
mod serve;
mod sync;

use std::path::Path;

use clap::Parser;

use crate::error::{ExitCode, Result};

pub use args::{Cli, Command, DbCommand, LimitCommand, RunArgs};
pub use context::*;
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
        Command::Drain { .. } | Command::Run { .. } | Command::Worker { .. } => {
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
        Command::Drain { args, serve } => {
            drain::drain_serving(&cli, args, serve.as_deref(), &startup).await
        }
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
        Command::Serve { listen, run } => serve::serve(&cli, listen, run.as_deref()).await,
        Command::Sync => sync::sync(&cli, &startup).await,
        Command::Doctor => doctor::doctor(&cli, &startup).await,
        Command::Notify { test } => notify::notify_test(&cli, *test, &startup).await,
    }
}
