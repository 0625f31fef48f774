//! The live end of each running call's output, for the board
//! (docs/serve.md#live-output): every [`EVERY`] one task of the process
//! reads, for each claim it holds, the newest `*.stdout` of the item's calls
//! (the agent's, or the gate's), turns its last lines into what a person
//! reads ([`crate::agent::live::readable`]), masks them, and writes the
//! changed ones in one statement ([`crate::ledger::workers::show_output`]).
//! So a board on any host that shares the ledger shows what an agent is
//! doing before its call ends, at the cost of one statement per process
//! every few seconds, and only while some output changed.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sqlx::PgPool;

use super::heart::Heart;

/// How often the outputs are read.
pub const EVERY: Duration = Duration::from_secs(2);

/// How much of a file's end is read: enough for [`LINES`] lines of events.
const TAIL_BYTES: u64 = 32 * 1024;

/// How many readable lines are shown.
pub const LINES: usize = 12;

/// Starts the task; it ends when the returned handle is aborted.
pub(super) fn start(heart: Arc<Heart>, pool: PgPool) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(EVERY).await;
            let shown = heart.shown();
            if shown.is_empty() {
                continue;
            }
            let read = tokio::task::spawn_blocking(move || {
                shown
                    .into_iter()
                    .filter_map(|(id, s)| {
                        let (file, at) = newest_output(&s.dir)?;
                        (Some(at) != s.seen).then(|| (id, at, s.worker, s.key, tail(&file)))
                    })
                    .collect::<Vec<_>>()
            });
            let Ok(changed) = read.await else { continue };
            if changed.is_empty() {
                continue;
            }
            let rows: Vec<(String, String, String)> = changed
                .iter()
                .map(|(_, _, w, k, t)| (w.clone(), k.clone(), t.clone()))
                .collect();
            // A ledger away only delays the board: the next tick writes again.
            let write = crate::ledger::workers::show_output(&pool, &rows);
            if let Ok(Ok(())) = tokio::time::timeout(EVERY * 5, write).await {
                for (id, at, ..) in changed {
                    heart.seen(id, at);
                }
            }
        }
    })
}

/// The most recently written `*.stdout` of the calls under `dir` (one
/// directory per call: `round-NN-ROLE-K/`), with its modification time.
fn newest_output(dir: &Path) -> Option<(PathBuf, SystemTime)> {
    let mut best: Option<(PathBuf, SystemTime)> = None;
    for call in std::fs::read_dir(dir).ok()?.flatten() {
        let Ok(files) = std::fs::read_dir(call.path()) else {
            continue;
        };
        for f in files.flatten() {
            let path = f.path();
            let Ok(meta) = f.metadata() else { continue };
            let is_output = path.extension().is_some_and(|e| e == "stdout");
            let Ok(at) = meta.modified() else { continue };
            if is_output
                && meta.is_file()
                && meta.len() > 0
                && best.as_ref().is_none_or(|(_, b)| at > *b)
            {
                best = Some((path, at));
            }
        }
    }
    best
}

/// The last [`LINES`] readable lines of `file` (a regular file; only its
/// last [`TAIL_BYTES`] are read), masked.
fn tail(file: &Path) -> String {
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::File::open(file)?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Ok(String::new());
        }
        let from = meta.len().saturating_sub(TAIL_BYTES);
        f.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::with_capacity(TAIL_BYTES as usize);
        f.take(TAIL_BYTES).read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes);
        // A read that starts mid-file starts mid-line: drop that part.
        let whole = match (from, text.find('\n')) {
            (0, _) | (_, None) => &text[..],
            (_, Some(nl)) => &text[nl + 1..],
        };
        let lines: Vec<String> = whole
            .lines()
            .flat_map(crate::agent::live::readable)
            .collect();
        let start = lines.len().saturating_sub(LINES);
        Ok(lines[start..].join("\n"))
    };
    crate::secret::redact_known(&read().unwrap_or_default())
}
