//! Secrets: a newtype that never prints its value, a redactor that masks known
//! secret values in child output (also when a value is split across reads),
//! and the start-up scrub of the token variables from nightshift's own
//! environment (SPEC §6).
//!
//! This module is not where secrets come from (config, the forge and the
//! ledger find them) and it does not decide which variables a child sees:
//! that is `crate::process::child_env`. It only keeps values out of logs,
//! files, tails and `/proc/PID/environ`.

use std::fmt;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};

/// What every redacted secret value is replaced with, and what `Secret`
/// prints through `Debug` and `Display`.
pub const MASK: &str = "****";

/// Secret values shorter than this many bytes are not redacted: masking
/// every `true` or `1234` in an agent's output would make logs unreadable and
/// such short values are not worth hiding.
pub const MIN_SECRET_LEN: usize = 6;

/// A secret value (token, database URL with password, API key). `Debug` and
/// `Display` print `****`; the value is reached only through
/// [`Secret::expose`], so every place that uses it is greppable.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret value itself. Use only at the point where it is handed to
    /// its consumer (an HTTP header, a connection string).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

/// Replaces every occurrence of a set of secret values with `****`.
///
/// Built once from the values nightshift holds (tokens, the ledger URL,
/// variables the config lists under `secrets`); values shorter than
/// [`MIN_SECRET_LEN`] bytes are ignored. Overlapping values are matched
/// leftmost-longest, so a secret that contains another is masked whole.
/// Cheap to clone (the automaton is shared).
#[derive(Clone, Default)]
pub struct Redactor {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    matcher: AhoCorasick,
    /// Length in bytes of the longest secret value.
    max_len: usize,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self
            .inner
            .as_ref()
            .map_or(0, |inner| inner.matcher.patterns_len());
        f.debug_struct("Redactor").field("secrets", &count).finish()
    }
}

impl Redactor {
    /// A redactor for the given values; empty values and values shorter than
    /// [`MIN_SECRET_LEN`] bytes are dropped, duplicates are harmless.
    pub fn new<I, S>(values: I) -> Redactor
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut patterns: Vec<String> = values
            .into_iter()
            .map(|value| value.as_ref().to_owned())
            .filter(|value| value.len() >= MIN_SECRET_LEN)
            .collect();
        patterns.sort();
        patterns.dedup();
        if patterns.is_empty() {
            return Redactor { inner: None };
        }
        let max_len = patterns.iter().map(String::len).max().unwrap_or(0);
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .expect("a handful of literal secret values always builds an automaton");
        Redactor {
            inner: Some(Arc::new(Inner { matcher, max_len })),
        }
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// `s` with every secret value replaced by `****`.
    pub fn redact(&self, s: &str) -> String {
        match &self.inner {
            None => s.to_owned(),
            Some(inner) => inner
                .matcher
                .replace_all(s, &vec![MASK; inner.matcher.patterns_len()]),
        }
    }

    /// `bytes` with every secret value replaced by `****` (byte-wise, so
    /// invalid UTF-8 around a secret does not matter).
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        match &self.inner {
            None => out.extend_from_slice(bytes),
            Some(inner) => {
                let mut pos = 0;
                for m in inner.matcher.find_iter(bytes) {
                    out.extend_from_slice(&bytes[pos..m.start()]);
                    out.extend_from_slice(MASK.as_bytes());
                    pos = m.end();
                }
                out.extend_from_slice(&bytes[pos..]);
            }
        }
        out
    }

    /// A streaming redactor for one output stream (stdout or stderr of one
    /// child).
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            redactor: self.clone(),
            pending: Vec::new(),
        }
    }
}

/// Redacts a byte stream that arrives in chunks of any size.
///
/// A secret split across two chunks is still masked: `push` holds back at
/// most `longest secret − 1` bytes that could be the start of a secret and
/// emits them with the next chunk or at [`StreamRedactor::finish`]. With no
/// secrets it holds back nothing.
#[derive(Debug)]
pub struct StreamRedactor {
    redactor: Redactor,
    pending: Vec<u8>,
}

impl StreamRedactor {
    /// Takes the next chunk and returns the bytes that are now safe to emit.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(inner) = self.redactor.inner.as_deref() else {
            return chunk.to_vec();
        };
        let data: Vec<u8> = if self.pending.is_empty() {
            chunk.to_vec()
        } else {
            let mut data = std::mem::take(&mut self.pending);
            data.extend_from_slice(chunk);
            data
        };
        // A secret that starts before `boundary` fits entirely in `data`
        // (boundary + max_len − 1 = data.len()), so the automaton has seen all
        // of it; only a match starting at or after `boundary` may still grow
        // with the next chunk.
        let boundary = data.len().saturating_sub(inner.max_len - 1);
        let mut out = Vec::with_capacity(data.len());
        let mut pos = 0;
        for m in inner.matcher.find_iter(&data) {
            if m.start() >= boundary {
                break;
            }
            out.extend_from_slice(&data[pos..m.start()]);
            out.extend_from_slice(MASK.as_bytes());
            pos = m.end();
        }
        let keep_from = pos.max(boundary);
        out.extend_from_slice(&data[pos..keep_from]);
        self.pending = data[keep_from..].to_vec();
        out
    }

    /// Ends the stream and returns the held-back bytes, redacted.
    pub fn finish(self) -> Vec<u8> {
        self.redactor.redact_bytes(&self.pending)
    }
}

/// The variables that carry a GitHub token (SPEC §6, §8). They are removed
/// from nightshift's own environment at start-up and from every child's.
pub fn token_vars() -> &'static [&'static str] {
    &["GITHUB_TOKEN", "GH_TOKEN"]
}

/// Removes the token variables ([`token_vars`]) and the `extra` variables
/// from nightshift's own environment and returns the removed non-empty
/// values, in that order, to keep in memory only (SPEC §6: an agent running
/// as the same user can read its parent's `/proc/PID/environ`).
///
/// `remove_var` alone is not enough for that: it takes the variable out of
/// the `environ` array, but `/proc/PID/environ` shows the block the kernel
/// wrote at exec, which still holds `NAME=value`. So the entry's bytes in that
/// block are overwritten with NULs as well.
///
/// Call it once, first thing in `main`, before the tokio runtime or any other
/// thread exists.
///
/// # Panics
/// When the process already has more than one thread (or the thread count
/// cannot be read from `/proc/self/task`): that is a programming error, and
/// changing the environment then could race with another thread's `getenv`.
pub fn scrub_own_env(extra: &[&str]) -> Vec<(String, Secret)> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map(|dir| dir.count())
        .unwrap_or(0);
    assert!(
        threads == 1,
        "scrub_own_env must run before any thread is started (found {threads} threads in /proc/self/task)"
    );
    let exec_block = exec_env_block();
    let mut removed: Vec<(String, Secret)> = Vec::new();
    for name in token_vars().iter().chain(extra.iter()) {
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        // SAFETY (for the three unsafe calls below): the environment is
        // unsafe to touch in edition 2024 only because another thread could
        // read or write it at the same time. The assertion above proved this
        // process has exactly one thread, and only this thread could start
        // another, so nothing runs concurrently.
        let entries = unsafe { environ_entries(name) };
        unsafe { std::env::remove_var(name) };
        for (ptr, len) in entries {
            let addr = ptr as usize;
            // Only the exec-time block, which libc never manages; strings a
            // `setenv` allocated belong to libc and are left alone.
            if exec_block
                .as_ref()
                .is_some_and(|block| block.contains(&addr) && addr + len <= block.end)
            {
                // The entry is no longer referenced by `environ` (removed just
                // above) and lies in our own writable stack memory.
                unsafe { std::ptr::write_bytes(ptr, 0, len) };
            }
        }
        let value = value.to_string_lossy().into_owned();
        if !value.is_empty() && !removed.iter().any(|(n, _)| n == name) {
            removed.push(((*name).to_owned(), Secret(value)));
        }
    }
    removed
}

/// The address range of the environment block the kernel wrote at exec
/// (fields 50 and 51, `env_start` and `env_end`, of `/proc/self/stat`).
fn exec_env_block() -> Option<std::ops::Range<usize>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields are counted after the command name's last `)`; field 3 is the
    // first one after it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_ascii_whitespace().collect();
    let start: usize = fields.get(50 - 3)?.parse().ok()?;
    let end: usize = fields.get(51 - 3)?.parse().ok()?;
    (start < end).then_some(start..end)
}

unsafe extern "C" {
    /// The C library's environment array (glibc and musl).
    static mut environ: *mut *mut libc::c_char;
}

/// Pointers to and lengths of the `NAME=value` strings in `environ`.
///
/// # Safety
/// No other thread may change the environment during the call.
unsafe fn environ_entries(name: &str) -> Vec<(*mut u8, usize)> {
    let prefix = format!("{name}=");
    let mut entries = Vec::new();
    // SAFETY: the caller guarantees exclusive access; `environ` is a
    // NULL-terminated array of NUL-terminated strings.
    unsafe {
        let mut cursor = *std::ptr::addr_of!(environ);
        if cursor.is_null() {
            return entries;
        }
        while !(*cursor).is_null() {
            let entry = std::ffi::CStr::from_ptr(*cursor);
            if entry.to_bytes().starts_with(prefix.as_bytes()) {
                entries.push(((*cursor).cast::<u8>(), entry.to_bytes().len()));
            }
            cursor = cursor.add(1);
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_prints_mask() {
        let secret = Secret::from("ghp_abcdefghijklmnop".to_owned());
        assert_eq!(format!("{secret}"), "****");
        assert_eq!(format!("{secret:?}"), "****");
        assert_eq!(secret.expose(), "ghp_abcdefghijklmnop");
    }

    #[test]
    fn redact_masks_every_occurrence_and_ignores_short_values() {
        let redactor = Redactor::new(["hunter2hunter2", "abc", ""]);
        assert_eq!(
            redactor.redact("a hunter2hunter2 b hunter2hunter2hunter2hunter2 abc"),
            "a **** b ******** abc"
        );
    }

    #[test]
    fn redact_prefers_the_longer_of_overlapping_secrets() {
        let redactor = Redactor::new(["secret1", "secret1-and-more"]);
        assert_eq!(
            redactor.redact("x secret1-and-more y secret1"),
            "x **** y ****"
        );
    }

    #[test]
    fn empty_redactor_passes_through() {
        let redactor = Redactor::new(Vec::<String>::new());
        assert!(redactor.is_empty());
        let mut stream = redactor.stream();
        assert_eq!(stream.push(b"abc"), b"abc");
        assert!(stream.finish().is_empty());
    }

    /// Every way of cutting the input into two or three chunks gives the
    /// same result as redacting it whole.
    #[test]
    fn stream_redacts_secrets_split_at_every_position() {
        let redactor = Redactor::new(["TOKEN123456", "TOKEN123456789", "xyzxyz"]);
        let input = b"pre TOKEN123456789 mid TOKEN123456 TOKxyzxyzxyzEN123456 end TOKEN12345";
        let expected = redactor.redact_bytes(input);
        assert!(!String::from_utf8_lossy(&expected).contains("TOKEN123456"));
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let mut stream = redactor.stream();
                let mut out = stream.push(&input[..i]);
                out.extend(stream.push(&input[i..j]));
                out.extend(stream.push(&input[j..]));
                out.extend(stream.finish());
                assert_eq!(out, expected, "cut at {i} and {j}");
            }
        }
    }

    #[test]
    fn stream_holds_back_less_than_the_longest_secret() {
        let redactor = Redactor::new(["0123456789"]);
        let mut stream = redactor.stream();
        let out = stream.push(b"aaaaaaaaaaaaaaaaaaaa");
        assert_eq!(out.len(), 20 - 9);
        let out = stream.push(b"012345678");
        assert_eq!(
            out.len(),
            9,
            "the held back a's are released, the prefix is held"
        );
        let out = stream.push(b"9!");
        assert_eq!(out, b"****", "the last byte could start another secret");
        assert_eq!(stream.finish(), b"!");
    }

    #[test]
    fn token_vars_are_the_github_ones() {
        assert_eq!(token_vars(), ["GITHUB_TOKEN", "GH_TOKEN"]);
    }

    #[test]
    #[should_panic(expected = "before any thread")]
    fn scrub_refuses_a_multithreaded_process() {
        // A second thread that outlives the call, whatever the harness does.
        let (_keep_alive, parked) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || parked.recv());
        let _ = scrub_own_env(&[]);
    }
}
