//! `nightshift schedule --cron EXPR [--tz ZONE]` (docs/commands.md, docs/contract.md): stays in the
//! foreground and starts a drain at each fire time, or prints a crontab line
//! or systemd units that do the same.
//!
//! Each fire runs the same drain as `nightshift drain`, in this process: it
//! takes the repository lock and needs a valid, unused approval of the
//! current plan. There is no standing approval (docs/contract.md#approval): a fire without one
//! records `not_approved` for the plan in the ledger and waits for the next
//! fire; a fire while another drain holds the lock is skipped the same way.
//! SIGINT/SIGTERM stop the schedule (and the drain in progress, which ends
//! `stopped_signal`).

use chrono::Utc;
use chrono_tz::Tz;
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, RunArgs, Startup, drain, repo_root};
use crate::error::{Error, Result};
use crate::schedule::{self, CronSchedule, SleepOutcome, SystemClock};

/// What `schedule` was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Stay in the foreground and drain at each fire time.
    Foreground,
    /// Print a crontab line.
    Crontab,
    /// Print a systemd service and timer.
    Systemd,
}

/// `nightshift schedule --cron EXPR [--tz ZONE] [--print-crontab | --print-systemd]`.
///
/// # Errors
/// Exit 2 for a bad expression or zone, or an expression the printed unit
/// cannot say. The foreground loop ends only on a signal: exit 0 between
/// fires, or the stopped drain's code (1, `stopped_signal`) during one.
pub(crate) async fn schedule(
    cli: &Cli,
    expr: &str,
    tz: Option<&str>,
    mode: Mode,
    startup: &Startup,
) -> Result<()> {
    let repo = repo_root(cli)?;
    let config_zone = crate::cli::load_config(cli, &repo)
        .ok()
        .and_then(|l| l.config.timezone.clone());
    let (zone, source) = schedule::resolve_zone(tz.or(config_zone.as_deref()))
        .map_err(|e| Error::argument(format!("time zone: {e}")))?;
    if let Some(w) = source.warning() {
        eprintln!("warning: {w}");
    }
    let cron = CronSchedule::parse(expr).map_err(|e| Error::argument(e.to_string()))?;
    // cron and systemd start jobs with a minimal PATH (`/usr/bin:/bin`): the
    // agents and gate commands found from this shell would be missing there.
    let path_var = std::env::var("PATH").ok();
    match mode {
        Mode::Crontab => {
            print!(
                "{}",
                schedule::print_crontab(
                    expr,
                    &schedule::current_binary(),
                    &repo,
                    zone,
                    path_var.as_deref()
                )
                .map_err(|e| Error::argument(e.to_string()))?
            );
            Ok(())
        }
        Mode::Systemd => {
            let units = schedule::print_systemd(
                expr,
                &schedule::current_binary(),
                &repo,
                zone,
                path_var.as_deref(),
            )
            .map_err(|e| Error::argument(e.to_string()))?;
            // Each unit's first line is a comment naming its file.
            println!("{}\n{}", units.service, units.timer);
            Ok(())
        }
        Mode::Foreground => foreground(cli, &cron, zone, startup).await,
    }
}

/// The foreground loop: sleep (in wall-clock slices) to the next fire time,
/// drain, repeat, until a signal.
async fn foreground(cli: &Cli, cron: &CronSchedule, zone: Tz, startup: &Startup) -> Result<()> {
    let stop = CancellationToken::new();
    spawn_stop_on_signal(stop.clone());
    let args = RunArgs {
        approve: None,
        deadline: None,
        tz: Some(zone.name().to_string()),
        jobs: None,
    };
    let mut fires = 0u64;
    loop {
        let next = cron
            .next_after(Utc::now(), zone)
            .map_err(|e| Error::argument(e.to_string()))?;
        eprintln!(
            "schedule {:?} ({}): next drain at {}",
            cron.expr(),
            zone.name(),
            next.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S %Z")
        );
        if schedule::sleep_until(&SystemClock, next, &stop, schedule::DEFAULT_SLICE).await
            == SleepOutcome::Cancelled
        {
            break;
        }
        fires += 1;
        let result = drain::drain_scheduled(cli, &args, startup, &stop).await;
        let code = crate::error::exit_code(&result);
        let drained = match result {
            Ok(()) => {
                eprintln!("schedule: fire {fires} drained (exit {})", code as u8);
                Ok(())
            }
            Err(e) if e.already_reported() => {
                eprintln!("schedule: fire {fires} drained (exit {})", code as u8);
                Err(e)
            }
            // Refusals (no approval, lock held) and failures wait for the next fire.
            Err(e) => {
                eprintln!(
                    "schedule: fire {fires} did not drain (exit {}): {}",
                    code as u8,
                    crate::secret::redact_known(&e.to_string())
                );
                Ok(())
            }
        };
        if stop.is_cancelled() {
            eprintln!("schedule: stopped by a signal during fire {fires}");
            // A drain the signal stopped says how it ended (1, `stopped_signal`).
            return drained;
        }
    }
    eprintln!("schedule: stopped by a signal after {fires} fire(s)");
    Ok(())
}

/// SIGINT/SIGTERM/SIGHUP/SIGQUIT stop the schedule; a drain in progress
/// sees the same signal through its own handler and stops its item cleanly.
/// The handlers are installed before this returns, so a signal arriving
/// right after start-up is not lost to the default action.
fn spawn_stop_on_signal(stop: CancellationToken) {
    let Some(mut signals) = drain::StopSignals::install() else {
        return;
    };
    tokio::spawn(async move {
        signals.recv().await;
        stop.cancel();
    });
}
