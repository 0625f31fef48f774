//! The child's stdout and stderr, drained from the start: through the
//! redactor into files, a bounded tail of each, lines split for the callback,
//! and an output budget that stops a child writing too much.
//!
//! Not for what a line means: callers parse it (the agent adapters).

use super::command::{Command, LineCallback};
use super::shorten::JsonShortener;
use crate::secret::StreamRedactor;
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long the reader tasks may go on after the child is gone and its
/// group killed: a descendant that escaped the sweep and still holds a pipe
/// is abandoned after this.
pub const READER_LINGER: Duration = Duration::from_secs(2);

/// Size of one read from a child's pipe, in bytes.
const READ_CHUNK: usize = 64 * 1024;

/// The output both streams of one child may still carry
/// ([`Command::max_output`]), shared by their readers.
pub(super) struct OutputBudget {
    pub(super) left: std::sync::atomic::AtomicU64,
    /// Fired once the budget is spent: the child is stopped.
    pub(super) spent: CancellationToken,
}

impl OutputBudget {
    /// Takes `n` bytes; false (and `spent` fired) when they do not fit.
    pub(super) fn take(&self, n: u64) -> bool {
        let fits = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(n)
            })
            .is_ok();
        if !fits {
            self.left.store(0, Ordering::SeqCst);
            self.spent.cancel();
        }
        fits
    }
}

/// The tasks that read a child's stdout and stderr and write its stdin.
pub(super) struct Streams {
    pub(super) stdout: Option<JoinHandle<StreamResult>>,
    pub(super) stderr: Option<JoinHandle<StreamResult>>,
    pub(super) stdin: Option<JoinHandle<()>>,
}

impl Streams {
    /// Starts them: each stream redacted into its file (`files`: stdout's,
    /// stderr's), its tail and the shared output `budget`; stdout also to
    /// the line callback and, when asked, kept whole; `stdin` (the call's, when it has one) given its bytes.
    /// They stop when `stop` fires.
    pub(super) fn start(
        child: &mut tokio::process::Child,
        stdin: Option<tokio::net::unix::pipe::Sender>,
        cmd: &mut Command,
        files: (Option<tokio::fs::File>, Option<tokio::fs::File>),
        budget: Option<Arc<OutputBudget>>,
        stop: &CancellationToken,
    ) -> Streams {
        let (stdout_file, stderr_file) = files;
        let stdout = child.stdout.take().map(|pipe| {
            tokio::spawn(read_stream(
                pipe,
                StreamSink {
                    redactor: cmd.redactor.stream(),
                    file: stdout_file,
                    tail: Tail::new(cmd.tail_bytes),
                    lines: cmd.on_stdout_line.take().map(|callback| {
                        LineSplitter::new(callback, cmd.line_max).json(cmd.json_lines)
                    }),
                    bytes: 0,
                    whole: cmd.capture_stdout.then(Vec::new),
                    budget: budget.clone(),
                },
                stop.clone(),
            ))
        });
        let stderr = child.stderr.take().map(|pipe| {
            tokio::spawn(read_stream(
                pipe,
                StreamSink {
                    redactor: cmd.redactor.stream(),
                    file: stderr_file,
                    tail: Tail::new(cmd.tail_bytes),
                    lines: None,
                    bytes: 0,
                    whole: None,
                    budget: budget.clone(),
                },
                stop.clone(),
            ))
        });
        let stdin = match (stdin, cmd.stdin.take()) {
            (Some(mut pipe), Some(bytes)) => Some(tokio::spawn(async move {
                // A child that exits without reading its stdin gives EPIPE: not
                // an error of the call.
                if let Err(error) = pipe.write_all(&bytes).await {
                    tracing::debug!(%error, "stdin not fully written");
                }
                drop(pipe);
            })),
            _ => None,
        };
        Streams {
            stdout,
            stderr,
            stdin,
        }
    }

    /// After the child's end: stops writing stdin and gives the readers
    /// [`READER_LINGER`] to drain what is left (then `stop` ends them).
    /// Returns (stdout, stderr).
    pub(super) async fn finish(self, stop: &CancellationToken) -> (StreamResult, StreamResult) {
        if let Some(writer) = self.stdin {
            writer.abort();
        }
        let linger_until = tokio::time::Instant::now() + READER_LINGER;
        let stdout = finish_reader(self.stdout, stop, linger_until).await;
        let stderr = finish_reader(self.stderr, stop, linger_until).await;
        (stdout, stderr)
    }
}

/// Where one output stream goes.
struct StreamSink {
    redactor: StreamRedactor,
    file: Option<tokio::fs::File>,
    tail: Tail,
    lines: Option<LineSplitter>,
    bytes: u64,
    /// Every raw byte, when the whole stream is kept.
    whole: Option<Vec<u8>>,
    budget: Option<std::sync::Arc<OutputBudget>>,
}

/// What a reader hands back.
#[derive(Default)]
pub(super) struct StreamResult {
    pub(super) tail: String,
    pub(super) bytes: u64,
    pub(super) whole: Vec<u8>,
}

/// Reads `pipe` until EOF, an error or `stop`, then flushes everything.
async fn read_stream<R>(mut pipe: R, sink: StreamSink, stop: CancellationToken) -> StreamResult
where
    R: AsyncRead + Unpin,
{
    let StreamSink {
        mut redactor,
        file,
        mut tail,
        mut lines,
        mut bytes,
        mut whole,
        budget,
    } = sink;
    let mut file = file.map(|file| BufWriter::with_capacity(READ_CHUNK, file));
    let mut file_failed = false;
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let read = tokio::select! {
            // Reading from a pipe is cancel-safe: a cancelled read loses nothing.
            read = pipe.read(&mut buf) => read,
            () = stop.cancelled() => {
                tracing::warn!("abandoning a pipe still held open by a descendant");
                break;
            }
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                tracing::warn!(%error, "reading child output failed");
                break;
            }
        };
        bytes += n as u64;
        if let Some(whole) = whole.as_mut() {
            whole.extend_from_slice(&buf[..n]);
        }
        let clean = redactor.push(&buf[..n]);
        if budget.as_ref().is_some_and(|b| !b.take(n as u64)) {
            // Over the cap: only the tail still moves (the child is being
            // stopped), so the files and memory stop growing.
            tail.push(&clean);
            continue;
        }
        deliver(&clean, &mut file, &mut file_failed, &mut tail, &mut lines).await;
    }
    let clean = redactor.finish();
    deliver(&clean, &mut file, &mut file_failed, &mut tail, &mut lines).await;
    if let Some(lines) = lines.as_mut() {
        lines.finish();
    }
    if let Some(file) = file.as_mut()
        && !file_failed
        && let Err(error) = file.flush().await
    {
        tracing::warn!(%error, "flushing child output file failed");
    }
    StreamResult {
        tail: tail.into_string(),
        bytes,
        whole: whole.unwrap_or_default(),
    }
}

async fn deliver(
    clean: &[u8],
    file: &mut Option<BufWriter<tokio::fs::File>>,
    file_failed: &mut bool,
    tail: &mut Tail,
    lines: &mut Option<LineSplitter>,
) {
    if clean.is_empty() {
        return;
    }
    // Flushed at each chunk read: the file is what a person (and the
    // board's live output, docs/serve.md#live-output) reads while the call
    // runs; a chunk is what one read of the pipe gave, so a busy child still
    // writes in large pieces.
    if let Some(file) = file.as_mut()
        && !*file_failed
        && let Err(error) = async {
            file.write_all(clean).await?;
            file.flush().await
        }
        .await
    {
        // A full disk must not stop the child or the run: keep reading (or
        // the child blocks) and keep the tail.
        tracing::warn!(%error, "writing child output file failed; keeping only the tail");
        *file_failed = true;
    }
    tail.push(clean);
    if let Some(lines) = lines.as_mut() {
        lines.push(clean);
    }
}

/// Waits for a reader until `linger_until`, then tells it to stop and takes
/// what it has.
async fn finish_reader(
    reader: Option<JoinHandle<StreamResult>>,
    stop: &CancellationToken,
    linger_until: tokio::time::Instant,
) -> StreamResult {
    let Some(mut reader) = reader else {
        return StreamResult::default();
    };
    let joined = match tokio::time::timeout_at(linger_until, &mut reader).await {
        Ok(joined) => joined,
        Err(_) => {
            stop.cancel();
            reader.await
        }
    };
    joined.unwrap_or_else(|error| {
        tracing::warn!(%error, "output reader task failed");
        StreamResult::default()
    })
}

/// The last `cap` bytes of a stream.
pub(super) struct Tail {
    cap: usize,
    buf: VecDeque<u8>,
}

impl Tail {
    pub(super) fn new(cap: usize) -> Tail {
        Tail {
            cap,
            buf: VecDeque::with_capacity(cap.min(READ_CHUNK)),
        }
    }

    pub(super) fn push(&mut self, bytes: &[u8]) {
        if self.cap == 0 {
            return;
        }
        let bytes = &bytes[bytes.len().saturating_sub(self.cap)..];
        let overflow = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(bytes);
    }

    /// Lossy UTF-8, without a character cut in half at the start.
    pub(super) fn into_string(self) -> String {
        let bytes: Vec<u8> = self.buf.into();
        let start = bytes
            .iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count();
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

/// Splits a byte stream into lines for the callback.
pub(super) struct LineSplitter {
    callback: LineCallback,
    partial: Vec<u8>,
    pub(super) max: usize,
    /// The current line was longer than `max` and has been delivered cut.
    overflowed: bool,
    /// Lines are JSON: an overlong one is shortened, not cut.
    pub(super) json: bool,
    /// The overlong JSON line being shortened.
    shortening: Option<JsonShortener>,
}

impl LineSplitter {
    pub(super) fn new(callback: LineCallback, max: usize) -> LineSplitter {
        LineSplitter {
            callback,
            partial: Vec::new(),
            max,
            overflowed: false,
            json: false,
            shortening: None,
        }
    }

    pub(super) fn json(mut self, json: bool) -> LineSplitter {
        self.json = json;
        self
    }

    pub(super) fn push(&mut self, mut bytes: &[u8]) {
        while let Some(newline) = memchr::memchr(b'\n', bytes) {
            if let Some(mut sh) = self.shortening.take() {
                sh.push(&bytes[..newline]);
                self.end_shortening(sh);
            } else if !self.overflowed {
                self.append(&bytes[..newline]);
                self.emit();
            }
            self.partial.clear();
            self.overflowed = false;
            bytes = &bytes[newline + 1..];
        }
        if let Some(sh) = self.shortening.as_mut() {
            sh.push(bytes);
            return;
        }
        if !self.overflowed {
            let room = self.max.saturating_sub(self.partial.len());
            self.append(bytes);
            if self.partial.len() >= self.max {
                if self.json {
                    // Everything of the line so far goes through the
                    // shortener; the rest of it follows as it comes.
                    let mut sh = JsonShortener::new(self.max);
                    sh.push(&self.partial);
                    sh.push(&bytes[bytes.len().min(room)..]);
                    self.partial.clear();
                    self.shortening = Some(sh);
                    return;
                }
                self.emit();
                self.partial.clear();
                self.overflowed = true;
            }
        }
    }

    fn append(&mut self, bytes: &[u8]) {
        let room = self.max.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn emit(&mut self) {
        let line = self.partial.strip_suffix(b"\r").unwrap_or(&self.partial);
        (self.callback)(&String::from_utf8_lossy(line));
    }

    /// Hands over a shortened line, or its first `max` bytes when it could
    /// not be shortened enough.
    fn end_shortening(&mut self, sh: JsonShortener) {
        let out = sh.finish();
        let line = out.strip_suffix(b"\r").unwrap_or(&out);
        let line = &line[..line.len().min(self.max)];
        (self.callback)(&String::from_utf8_lossy(line));
    }

    pub(super) fn finish(&mut self) {
        if let Some(sh) = self.shortening.take() {
            self.end_shortening(sh);
        } else if !self.overflowed && !self.partial.is_empty() {
            self.emit();
        }
        self.partial.clear();
    }
}
