//! What a person watching a run sees, and what is kept of it (docs/commands.md#global-options,
//! docs/files.md#logs).
//!
//! Progress is read from the ledger — the phase, item, round and sleep the
//! run records as it goes — so the run loop knows nothing of terminals: on a
//! TTY an `indicatif` spinner shows item i/N, phase, round, elapsed time or
//! "sleeping until 03:12"; elsewhere (cron, CI, a pipe) one plain line per
//! change. Every change is also a `tracing` event, and a run's `tracing`
//! events are written as JSON lines to one file per run under the log
//! directory.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::outcome::{Phase, RunStatus};

/// How often the ledger is read for progress.
const POLL: Duration = Duration::from_millis(200);

pub use crate::settings::log_dir;

/// The path of this process's run log, once opened.
pub static RUN_LOG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// A new log file for this run: `<log dir>/run-<UTC time>-<pid>.jsonl`.
///
/// # Errors
/// The I/O error when the directory or the file cannot be created.
pub fn open_run_log(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!(
        "run-{}-{}.jsonl",
        Utc::now().format("%Y%m%dT%H%M%SZ"),
        std::process::id()
    ));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    Ok((path, file))
}

/// Installs the `tracing` subscriber: human lines on stderr at the level of
/// `-v`/`-q` (or `NIGHTSHIFT_LOG`), plus, when `run_log` is given, JSON
/// lines at info level (debug with `-vv`) into that file.
pub fn init_tracing(verbose: u8, quiet: bool, run_log: Option<std::fs::File>) {
    use tracing_subscriber::{
        EnvFilter, Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _,
    };
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        _ => "debug",
    };
    let stderr_filter = EnvFilter::try_from_env("NIGHTSHIFT_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("nightshift={level}")));
    // Colour only on a terminal (and not with NO_COLOR): escape codes in a
    // cron mail or a log file are noise.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(Redacting(std::io::stderr))
        .with_ansi(ansi)
        .with_target(false)
        .with_filter(stderr_filter);
    let file = run_log.map(|f| {
        let file_level = if verbose >= 2 { "debug" } else { "info" };
        let file = std::sync::Arc::new(std::sync::Mutex::new(f));
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(Redacting(move || LockedFile(file.clone())))
            .with_current_span(false)
            .with_filter(EnvFilter::new(format!("nightshift={file_level}")))
    });
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
}

/// A log writer that masks every secret nightshift holds
/// ([`crate::secret::redact_known`]) in each line before it is written: a
/// warning quoting a git, GitHub or agent error must not put a token in the
/// run's log file or on stderr (docs/agents.md). The formatter hands over one whole
/// event per write, so a secret is never cut between two writes.
struct Redacting<M>(M);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for Redacting<M>
{
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter(self.0.make_writer())
    }
}

/// The writer of [`Redacting`].
struct RedactingWriter<W>(W);

impl<W: std::io::Write> std::io::Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0
            .write_all(crate::secret::redact_known(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The run log behind its lock, for one event.
struct LockedFile(std::sync::Arc<std::sync::Mutex<std::fs::File>>);

impl std::io::Write for LockedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nothing (`-q`).
    Silent,
    /// One line per change on stderr (not a terminal).
    Plain,
    /// A spinner on stderr (a terminal).
    Spinner,
}

impl Mode {
    /// The mode for this process: silent with `-q`, a spinner when stderr is
    /// a terminal, plain lines otherwise.
    pub fn detect(quiet: bool) -> Mode {
        if quiet {
            Mode::Silent
        } else if std::io::stderr().is_terminal() {
            Mode::Spinner
        } else {
            Mode::Plain
        }
    }
}

/// One item of the run as progress names it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Item key.
    pub key: String,
    /// Title.
    pub title: String,
}

/// What the run is doing, as read from its ledger row.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Now {
    key: Option<String>,
    phase: Option<Phase>,
    round: Option<i32>,
    sleeping_until: Option<DateTime<Utc>>,
}

/// A running progress display; [`Watch::stop`] ends it.
pub struct Watch {
    cancel: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// Stops the display (clearing the spinner) and waits for it.
    pub async fn stop(self) {
        self.cancel.cancel();
        let _ = self.handle.await;
    }
}

/// Follows this process's running run of `repo_id` in the ledger and shows
/// it; `entries` are the items the run will go through, in order.
pub fn watch(
    pool: PgPool,
    repo_id: String,
    entries: Vec<Entry>,
    tz: chrono_tz::Tz,
    mode: Mode,
) -> Watch {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let handle = tokio::spawn(async move {
        let bar = (mode == Mode::Spinner).then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            b
        });
        let mut last: Option<Now> = None;
        let pid = std::process::id() as i32;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(POLL) => {}
            }
            let Ok(Some(row)) = crate::views::run_row(&pool, &repo_id, None).await else {
                continue;
            };
            if row.status != RunStatus::Running || row.pid != Some(pid) {
                continue;
            }
            let now = Now {
                key: row.current_item_key.clone(),
                phase: row.phase,
                round: row.current_round,
                sleeping_until: row.sleeping_until,
            };
            let line = describe(&now, &entries, tz, Utc::now() - row.started_at);
            if last.as_ref() != Some(&now) {
                tracing::info!(run = %row.id, item = now.key.as_deref().unwrap_or("-"), phase = now.phase.map_or("-", Phase::as_str), round = now.round.unwrap_or(0), sleeping_until = ?now.sleeping_until, "progress");
                if mode == Mode::Plain {
                    // A hung-up terminal or a closed pipe must not end the watch with a panic.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
                last = Some(now);
            }
            if let Some(b) = &bar {
                b.set_message(line);
                b.tick();
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
    });
    Watch { cancel, handle }
}

/// `[2/5] Add mul · round 1 · gate · 0:42`, or the sleep.
fn describe(now: &Now, entries: &[Entry], tz: chrono_tz::Tz, elapsed: chrono::Duration) -> String {
    let n = entries.len();
    let (i, title) = match now
        .key
        .as_deref()
        .and_then(|k| entries.iter().position(|e| e.key == k))
    {
        Some(p) => (p + 1, entries[p].title.as_str()),
        None => (0, "starting"),
    };
    let secs = elapsed.num_seconds().max(0);
    let clock = if secs >= 3600 {
        format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    };
    let what = match (now.sleeping_until, now.phase, now.round) {
        (Some(until), _, _) => format!(
            "sleeping until {} (usage limit)",
            until.with_timezone(&tz).format("%H:%M")
        ),
        (None, Some(p), Some(r)) => format!("round {r} · {p}"),
        (None, Some(p), None) => p.to_string(),
        (None, None, _) => "starting".to_string(),
    };
    format!("[{i}/{n}] {title} · {what} · {clock}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_items_rounds_and_sleeps() {
        let entries = vec![
            Entry {
                key: "a".into(),
                title: "Add sub".into(),
            },
            Entry {
                key: "b".into(),
                title: "Add mul".into(),
            },
        ];
        let now = Now {
            key: Some("b".into()),
            phase: Some(Phase::Gate),
            round: Some(2),
            sleeping_until: None,
        };
        assert_eq!(
            describe(
                &now,
                &entries,
                chrono_tz::UTC,
                chrono::Duration::seconds(42)
            ),
            "[2/2] Add mul · round 2 · gate · 0:42"
        );
        let until = "2026-12-01T03:12:00Z".parse().unwrap();
        let sleep = Now {
            sleeping_until: Some(until),
            ..now
        };
        assert_eq!(
            describe(
                &sleep,
                &entries,
                chrono_tz::Asia::Taipei,
                chrono::Duration::seconds(3725)
            ),
            "[2/2] Add mul · sleeping until 11:12 (usage limit) · 1:02:05"
        );
    }
}
