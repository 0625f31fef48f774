//! Reading an agent's output streams: JSON lines among other stdout noise,
//! the stderr lines that tell why a call failed, a usage limit in text, and
//! [`EndWatch`], which notices the final event so a lingering CLI can be stopped.
//!
//! Not for any one CLI's events: the backends parse those.

use std::time::Duration;

use chrono_tz::Tz;
use tokio_util::sync::CancellationToken;

use crate::limit::{self, LimitKind, LimitReading};
use crate::review::cut_chars;

/// One stdout line of an agent that prints JSON lines, as read.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct JsonLine {
    /// The JSON objects on the line, in order: usually one; none for a
    /// line that is not JSON (a Node warning, a debug print, a blank line);
    /// several when events were printed without a newline between them or
    /// as one JSON array (`--output-format json --verbose`).
    pub objects: Vec<serde_json::Value>,
    /// The line began as a JSON object but ended inside it: the agent was
    /// killed while writing, or the line was cut at the runner's line cap.
    pub cut: bool,
}

/// What a JSON-lines agent printed on stdout besides its events: counted
/// and remembered so a failure can say what the agent printed instead.
#[derive(Debug, Default, Clone)]
pub struct StdoutNoise {
    /// Non-empty stdout lines that held no event (warnings, debug prints).
    pub other_lines: u32,
    /// The last of them, cut to 300 characters.
    pub last_other_line: Option<String>,
    /// The last non-empty stdout line began an event and was cut off.
    pub cut_last_line: bool,
}

impl StdoutNoise {
    /// Reads `line` with [`json_line`] and returns its events (none for a
    /// blank or non-JSON line), keeping count of what was not an event.
    pub fn read(&mut self, line: &str) -> Vec<serde_json::Value> {
        let read = json_line(line);
        if line.trim().is_empty() {
            return read.objects;
        }
        self.cut_last_line = read.cut;
        if read.objects.is_empty() && !read.cut {
            self.other_lines += 1;
            self.last_other_line = Some(cut_chars(line.trim(), 300));
        }
        read.objects
    }
}

/// Reads one stdout line of a JSON-lines agent (claude stream-json, codex
/// `exec --json`) the way real output comes: around the JSON may be
/// whitespace, a `\r`, a byte-order mark, or a prefix printed by something
/// else without a newline (an ANSI escape, a progress text); a line that
/// holds no JSON object is no event and never an error. Only the first
/// [`JSON_PREFIX_SCAN`] bytes are searched for where the JSON starts.
pub fn json_line(line: &str) -> JsonLine {
    use serde_json::Value;
    let t = line.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if t.is_empty() {
        return JsonLine::default();
    }
    let objects_of = |v: Value| -> Vec<Value> {
        match v {
            Value::Object(_) => vec![v],
            Value::Array(a) => a.into_iter().filter(Value::is_object).collect(),
            _ => Vec::new(),
        }
    };
    if t.starts_with('{') || t.starts_with('[') {
        match serde_json::from_str::<Value>(t) {
            Ok(v) => {
                return JsonLine {
                    objects: objects_of(v),
                    cut: false,
                };
            }
            // A value that runs to the end of the line unfinished.
            Err(e) if e.is_eof() => {
                return JsonLine {
                    objects: Vec::new(),
                    cut: t.starts_with('{'),
                };
            }
            // Events glued together (`{…}{…}`) or followed by junk.
            Err(_) => {}
        }
    }
    let limit = t.len().min(JSON_PREFIX_SCAN);
    let mut cut_start = false;
    // Only a `{` that opens an object (`{"…` or `{}`) starts an event.
    let opens_object = |i: usize| matches!(t[i + 1..].trim_start().chars().next(), Some('"' | '}'));
    for (start, _) in t
        .char_indices()
        .take_while(|(i, _)| *i < limit)
        .filter(|(i, c)| *c == '{' && opens_object(*i))
    {
        let mut objects = Vec::new();
        let mut cut = false;
        let mut values = serde_json::Deserializer::from_str(&t[start..]).into_iter::<Value>();
        loop {
            match values.next() {
                Some(Ok(v)) if v.is_object() => objects.push(v),
                Some(Err(e)) if e.is_eof() => {
                    cut = true;
                    break;
                }
                _ => break,
            }
        }
        if !objects.is_empty() {
            return JsonLine { objects, cut };
        }
        // The first `{` opened a value the line never closed: an event cut
        // short behind a prefix (inner braces of it are no better).
        if cut {
            cut_start = true;
            break;
        }
    }
    JsonLine {
        objects: Vec::new(),
        cut: cut_start,
    }
}

/// How far into a line [`json_line`] looks for the start of the JSON, in
/// bytes: prefixes printed before an event are short; a long line of prose
/// with braces in it is no event.
pub const JSON_PREFIX_SCAN: usize = 256;

/// The stderr line that says what went wrong: a crash first — a Rust panic
/// of any thread (`thread 'tokio-runtime-worker' panicked at src/x.rs:1:2:`,
/// with the message the line after it, as Rust prints it since 1.73) or a
/// runtime's panic line (Bun, which the claude binary is built on:
/// `panic(main thread): Segmentation fault at address 0x113`) — since
/// error lines logged before it (codex logs benign ERROR lines) did not end
/// the agent; else the first line that starts with `error` (any case;
/// clap's usage errors, Node's `Error: …`), `fatal` or `panic`, names an
/// uncaught exception, or is a log line at level ERROR
/// (`2026-03-04T17:48:31Z ERROR codex_api: …`); else the last non-empty
/// line that is not one of Node's warnings; `None` when stderr is blank.
pub fn telling_stderr_line(stderr: &str) -> Option<String> {
    let all: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let rust_panic = |l: &str| l.starts_with("thread '") && l.contains("' panicked at");
    if let Some(i) = all.iter().position(|l| rust_panic(l)) {
        let message = all.get(i + 1).filter(|m| {
            all[i].ends_with(':') && !m.starts_with("note: ") && !m.starts_with("stack backtrace")
        });
        let line = match message {
            Some(m) => format!("{} {m}", all[i]),
            None => all[i].to_string(),
        };
        return Some(cut_chars(&line, 400));
    }
    if let Some(l) = all
        .iter()
        .find(|l| l.starts_with("panic(") || l.starts_with("panic:"))
    {
        return Some(cut_chars(l, 400));
    }
    let is_error = |l: &&&str| {
        let lower = l.to_ascii_lowercase();
        lower.starts_with("error")
            || lower.starts_with("fatal")
            || lower.starts_with("panic")
            || lower.contains("uncaught")
            || lower.split_whitespace().nth(1) == Some("error")
    };
    let node_warning = |l: &&&str| l.starts_with("(node:") || l.starts_with("(Use `node --trace-");
    all.iter()
        .find(is_error)
        .or_else(|| all.iter().rev().find(|l| !node_warning(l)))
        .or(all.last())
        .map(|l| cut_chars(l, 400))
}

/// Ends a call whose agent printed its final event but does not exit.
///
/// Real CLIs sometimes stay alive after their last word (claude 2.1.38
/// printed its `result` and kept stdout open until killed,
/// anthropics/claude-code#25629): without this the call would run into its
/// timeout, an hour later, and its finished work would be thrown away as
/// timed out. The adapter calls [`EndSignal::ended`] when the final event
/// arrives and [`EndSignal::activity`] on any later output; once the agent
/// has been silent for the grace period after its final event, the watch
/// cancels its own child token, which the process runner treats like a
/// cancellation (SIGTERM to the group, then SIGKILL). A cancellation of the
/// parent token (a signal to nightshift) passes through unchanged.
pub(crate) struct EndWatch {
    pub(super) token: CancellationToken,
    pub(super) signal: EndSignal,
    task: tokio::task::JoinHandle<()>,
}

/// The handle the stdout callback uses to tell an [`EndWatch`] what it saw.
#[derive(Clone)]
pub(crate) struct EndSignal(std::sync::Arc<std::sync::Mutex<EndState>>);

#[derive(Default)]
struct EndState {
    /// When the final event was seen (and nothing since).
    ended_at: Option<std::time::Instant>,
    /// The watch ended the process.
    fired: bool,
}

impl EndSignal {
    /// The agent printed its final event now.
    pub(crate) fn ended(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.ended_at = Some(std::time::Instant::now());
        }
    }
    /// The agent printed something after its final event: it is still
    /// working (a queued turn), so the grace starts again at its next final
    /// event.
    pub(crate) fn activity(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.ended_at = None;
        }
    }
}

/// Variable that sets the exit grace of `claude` and `codex` (how long the
/// CLI may stay silent after its final event before nightshift ends it; 30 s
/// by default) to this many milliseconds. For the tests of that grace;
/// production leaves it unset. Read from the call's environment, which is
/// nightshift's own less its secrets, so a test may also set it per call.
pub const EXIT_GRACE_ENV: &str = "NIGHTSHIFT_EXIT_GRACE_MS";

/// `default`, or the milliseconds in [`EXIT_GRACE_ENV`] of `env` when that is a number.
pub fn exit_grace(
    env: &std::collections::BTreeMap<String, String>,
    default: std::time::Duration,
) -> std::time::Duration {
    env.get(EXIT_GRACE_ENV)
        .and_then(|v| v.trim().parse().ok())
        .map_or(default, std::time::Duration::from_millis)
}

impl EndWatch {
    /// Starts watching; pass [`EndWatch::token`] to the process runner
    /// instead of `parent`.
    pub(crate) fn start(parent: &CancellationToken, grace: Duration) -> EndWatch {
        let token = parent.child_token();
        let signal = EndSignal(Default::default());
        let (t, s) = (token.clone(), signal.clone());
        let tick = (grace / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = t.cancelled() => return,
                    _ = tokio::time::sleep(tick) => {}
                }
                let Ok(mut st) = s.0.lock() else { return };
                if st.ended_at.is_some_and(|at| at.elapsed() >= grace) {
                    st.fired = true;
                    t.cancel();
                    return;
                }
            }
        });
        EndWatch {
            token,
            signal,
            task,
        }
    }
    /// The token the agent's process runs under.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }
    /// A handle for the stdout callback.
    pub(crate) fn signal(&self) -> EndSignal {
        self.signal.clone()
    }
    /// Stops watching; true when the watch ended the agent after its final
    /// event (not a cancellation from outside).
    pub(crate) fn finish(self, parent: &CancellationToken) -> bool {
        self.task.abort();
        !parent.is_cancelled() && self.signal.0.lock().map(|s| s.fired).unwrap_or(false)
    }
}

/// Reads a usage limit from free text that is the agent's error/result
/// channel (docs/limits.md), with the call's zone.
pub(crate) fn limit_in_text(text: &str, tz: Tz) -> Option<LimitReading> {
    let r = limit::read_text(text, crate::schedule::server_now(), tz);
    (r.kind != LimitKind::None).then_some(r)
}
