//! Secrets: a newtype that never prints its value, a redactor that masks known
//! secret values in child output (also when a value is split across reads or
//! lines, or printed base64-, hex- or percent-encoded, or with some or all of
//! its bytes written as `%hh`, `\uhhhh` or `\xhh` escapes), the process-wide set of
//! the secret values nightshift holds ([`remember`], [`known`]), and the
//! start-up scrub of the token variables from nightshift's own environment
//! (docs/agents.md).
//!
//! This module is not where secrets come from (config, the forge and the
//! ledger find them) and it does not decide which variables a child sees:
//! that is `crate::process::child_env`. It only keeps values out of logs,
//! files, tails, the ledger and `/proc/PID/environ`.

use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};

/// What every redacted secret value is replaced with, and what `Secret`
/// prints through `Debug` and `Display`.
pub const MASK: &str = "****";

/// Secret values shorter than this many bytes are not redacted: masking
/// every `true` or `1234` in an agent's output would make logs unreadable and
/// such short values are not worth hiding.
pub const MIN_SECRET_LEN: usize = 6;

/// An encoded form (base64, hex, percent-encoding) of a secret is masked only
/// when it is at least this long: the base64 of a short value at an odd
/// alignment leaves few characters of its own.
const MIN_FORM_LEN: usize = 8;

/// The most bytes one decoded byte is written with in the searched text
/// (`\u00hh`, see [`Decoded`]): a stream holds back this many times the
/// longest form, so an escaped secret is seen whole.
const MAX_ESCAPE_LEN: usize = 6;

/// A line break and the blanks around it that a [`StreamRedactor`] holds back
/// at most, when a stream ends in one: a secret cut by more blank space than
/// this is not joined again.
const MAX_HELD_BLANKS: usize = 64 * 1024;

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
/// [`MIN_SECRET_LEN`] bytes are ignored. Each value is looked for in every
/// form an agent or a tool commonly prints it in: as is, base64
/// and url-safe base64 (at each of the three alignments it can have inside a
/// longer encoded blob), hex (both cases), percent-encoded and JSON-escaped.
/// A value is also found when a line break cuts it: the text is searched
/// with every line break and the blanks around it (a real `\n` or `\r`, or
/// the `\n`/`\r` escapes of JSON output) taken out, and each piece of a cut
/// value is masked while the breaks stay. A value is also found with any of
/// its bytes (some or all, upper- or lower-case hex) written as a
/// percent-escape `%hh`, a JSON `\uhhhh` or `\/` `\"` `\\` escape, or a
/// `\xhh` escape: the text is searched a second time with those escapes
/// decoded (`Decoded`), and a match there masks the escapes it came from.
/// Overlapping values are matched
/// leftmost-longest, so a secret that contains another is masked whole.
/// Cheap to clone (the automaton is shared).
#[derive(Clone, Default)]
pub struct Redactor {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    matcher: AhoCorasick,
    /// Length in bytes of the longest pattern (line breaks taken out).
    max_len: usize,
}

impl Inner {
    /// The spans `[start, end)` of `text` (a [`Squeezed`] text) that hold a
    /// secret as is or escaped, sorted and merged where they overlap; a
    /// span is listed only when it starts before `boundary`.
    fn spans(&self, text: &[u8], boundary: usize) -> Vec<(usize, usize)> {
        let mut spans: Vec<(usize, usize)> = self
            .matcher
            .find_iter(text)
            .map(|m| (m.start(), m.end()))
            .take_while(|&(start, _)| start < boundary)
            .collect();
        for plus_is_space in [false, true] {
            let Some(decoded) = Decoded::new(text, plus_is_space) else {
                break;
            };
            spans.extend(
                self.matcher
                    .find_iter(&decoded.text)
                    .map(|m| decoded.source(m.start(), m.end()))
                    .filter(|&(start, _)| start < boundary),
            );
        }
        spans.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
        for (start, end) in spans {
            match merged.last_mut() {
                Some(last) if start < last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
    }

    /// Whether `text` (a [`Squeezed`] text) holds a secret as is or escaped.
    fn finds_in(&self, text: &[u8]) -> bool {
        self.matcher.is_match(text)
            || [false, true].into_iter().any(|plus_is_space| {
                Decoded::new(text, plus_is_space)
                    .is_some_and(|decoded| self.matcher.is_match(&decoded.text))
            })
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self
            .inner
            .as_ref()
            .map_or(0, |inner| inner.matcher.patterns_len());
        f.debug_struct("Redactor")
            .field("patterns", &count)
            .finish()
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
        let mut patterns: Vec<Vec<u8>> = values
            .into_iter()
            .filter(|value| value.as_ref().len() >= MIN_SECRET_LEN)
            .flat_map(|value| forms(value.as_ref()))
            .collect();
        patterns.sort();
        patterns.dedup();
        if patterns.is_empty() {
            return Redactor { inner: None };
        }
        let max_len = patterns.iter().map(Vec::len).max().unwrap_or(0);
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .expect("a handful of literal secret values always builds an automaton");
        Redactor {
            inner: Some(Arc::new(Inner { matcher, max_len })),
        }
    }

    /// A redactor for `values` and every value [`remember`]ed so far.
    pub fn with_known<I, S>(values: I) -> Redactor
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut all: Vec<String> = values.into_iter().map(|v| v.as_ref().to_owned()).collect();
        all.extend(known_values());
        Redactor::new(all)
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// `s` with every secret value (in every form above, also cut by
    /// line breaks) replaced by `****`, and the password of every URL that
    /// carries one (`https://user:PASSWORD@host/…`, known or not) as well.
    pub fn redact(&self, s: &str) -> String {
        let masked = match &self.inner {
            None => s.to_owned(),
            Some(_) => {
                let out = self.redact_bytes(s.as_bytes());
                String::from_utf8(out)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
            }
        };
        mask_url_passwords(&masked)
    }

    /// `bytes` with every secret value replaced by `****` (byte-wise, so
    /// invalid UTF-8 around a secret does not matter). URL passwords that
    /// are not known values are left alone here (see [`Redactor::redact`]).
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let Some(inner) = self.inner.as_deref() else {
            return bytes.to_vec();
        };
        let sq = Squeezed::new(bytes);
        let mut out = Vec::with_capacity(bytes.len());
        let mut pos = 0;
        for (start, end) in inner.spans(&sq.text, usize::MAX) {
            pos = sq.mask(bytes, start, end, pos, &mut out);
        }
        out.extend_from_slice(&bytes[pos..]);
        out
    }

    /// Whether `bytes` hold a secret value in any form [`Redactor::redact_bytes`]
    /// would mask (also cut by line breaks).
    pub fn finds_in(&self, bytes: &[u8]) -> bool {
        match self.inner.as_deref() {
            None => false,
            Some(inner) => inner.finds_in(&Squeezed::new(bytes).text),
        }
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

/// The byte forms of one secret value that are looked for, each with its
/// line breaks taken out as the searched text's are (see [`Squeezed`]):
/// the value; its base64 and url-safe base64 at alignments 0, 1 and 2 (only
/// the characters that depend on the value alone, so the value is found
/// inside a longer encoded blob too); lower- and upper-case hex; its
/// percent-encodings (RFC 3986, `encodeURIComponent`, form-style `+` for
/// spaces, upper- and lower-case hex digits); and its JSON string escape.
fn forms(value: &str) -> Vec<Vec<u8>> {
    let raw = value.as_bytes();
    let mut out: Vec<Vec<u8>> = vec![raw.to_vec()];
    let mut encoded: Vec<Vec<u8>> = Vec::new();
    for pad in 0..3usize {
        let mut data = vec![0u8; pad];
        data.extend_from_slice(raw);
        let b64 = base64(&data);
        // Character i covers bits [6i, 6i + 6) of `data`; the prefix covers
        // bits [0, 8·pad), and the last character may share bits with
        // whatever follows the value.
        let first = (8 * pad).div_ceil(6);
        let end = (8 * data.len()) / 6;
        if first < end {
            let inner = b64[first..end].to_vec();
            encoded.push(
                inner
                    .iter()
                    .map(|&c| match c {
                        b'+' => b'-',
                        b'/' => b'_',
                        c => c,
                    })
                    .collect(),
            );
            encoded.push(inner);
        }
    }
    encoded.push(hex::encode(raw).into_bytes());
    encoded.push(hex::encode_upper(raw).into_bytes());
    for style in [Percent::Rfc3986, Percent::UriComponent, Percent::Form] {
        let upper = percent_encode(raw, style);
        encoded.push(lower_hex_escapes(&upper));
        encoded.push(upper);
    }
    if let Ok(json) = serde_json::to_string(value) {
        encoded.push(json.as_bytes()[1..json.len() - 1].to_vec());
    }
    out.extend(encoded.into_iter().filter(|f| f.len() >= MIN_FORM_LEN));
    out.into_iter()
        .map(|f| Squeezed::new(&f).text)
        .filter(|f| f.len() >= MIN_SECRET_LEN)
        .collect()
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .encode(data)
        .into_bytes()
}

/// Which characters a percent-encoding leaves as they are.
#[derive(Clone, Copy)]
enum Percent {
    /// RFC 3986 unreserved: letters, digits, `-._~` (curl, jq `@uri`, Python `quote`).
    Rfc3986,
    /// JavaScript's `encodeURIComponent`: also `!'()*`.
    UriComponent,
    /// HTML forms (Python `quote_plus`): unreserved, and a space as `+`.
    Form,
}

fn percent_encode(raw: &[u8], style: Percent) -> Vec<u8> {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
    const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    const URI_COMPONENT: &AsciiSet = &UNRESERVED
        .remove(b'!')
        .remove(b'\'')
        .remove(b'(')
        .remove(b')')
        .remove(b'*');
    let set = if matches!(style, Percent::UriComponent) {
        URI_COMPONENT
    } else {
        UNRESERVED
    };
    let encoded = percent_encoding::percent_encode(raw, set).to_string();
    // A literal `+` was encoded as `%2B`, so every `%20` left is a space.
    let encoded = if matches!(style, Percent::Form) {
        encoded.replace("%20", "+")
    } else {
        encoded
    };
    encoded.into_bytes()
}

/// `s` with the two hex digits after each `%` in lower case.
fn lower_hex_escapes(s: &[u8]) -> Vec<u8> {
    let mut out = s.to_vec();
    for i in 0..out.len() {
        if out[i] == b'%' {
            for c in out.iter_mut().take(i + 3).skip(i + 1) {
                c.make_ascii_lowercase();
            }
        }
    }
    out
}

/// A text with its line breaks taken out, and where each remaining piece
/// came from. A break is a run of blanks (space, tab, `\r`, `\n`), JSON
/// escapes (`\n`, `\r`, `\t` as two characters) and line continuations (a
/// backslash ending a line) holding at least one real or escaped `\n` or
/// `\r`; runs of blanks without one stay.
struct Squeezed {
    /// The text without its breaks.
    text: Vec<u8>,
    /// Each piece of `text` between breaks: (offset in `text`, offset in
    /// the original), in order.
    pieces: Vec<(usize, usize)>,
}

impl Squeezed {
    fn new(bytes: &[u8]) -> Squeezed {
        let mut text = Vec::with_capacity(bytes.len());
        let mut pieces = vec![(0, 0)];
        let mut i = 0;
        while i < bytes.len() {
            let (end, is_break) = blank_run(bytes, i);
            if end == i {
                text.push(bytes[i]);
                i += 1;
                continue;
            }
            if is_break {
                if pieces.last().is_some_and(|&(t, _)| t == text.len()) {
                    pieces.pop();
                }
                pieces.push((text.len(), end));
            } else {
                text.extend_from_slice(&bytes[i..end]);
            }
            i = end;
        }
        Squeezed { text, pieces }
    }

    /// The original offset of `text[at]` (`at` < `text.len()`).
    fn original(&self, at: usize) -> usize {
        let k = self.pieces.partition_point(|&(t, _)| t <= at) - 1;
        let (t, o) = self.pieces[k];
        o + (at - t)
    }

    /// Appends to `out` the original bytes from `pos` up to the match
    /// `[start, end)` of `text`, then a mask for each piece of the match,
    /// keeping the breaks between pieces; returns the original offset after
    /// the match.
    fn mask(
        &self,
        original: &[u8],
        start: usize,
        end: usize,
        pos: usize,
        out: &mut Vec<u8>,
    ) -> usize {
        let from = self.original(start);
        out.extend_from_slice(&original[pos.min(from)..from]);
        let mut k = self.pieces.partition_point(|&(t, _)| t <= start) - 1;
        let mut at = start;
        let mut last_end = from;
        while at < end {
            let (t, o) = self.pieces[k];
            let piece_end = self
                .pieces
                .get(k + 1)
                .map_or(self.text.len(), |&(next, _)| next);
            let stop = end.min(piece_end);
            let (o_start, o_end) = (o + (at - t), o + (stop - t));
            if o_start > last_end {
                out.extend_from_slice(&original[last_end..o_start]);
            }
            out.extend_from_slice(MASK.as_bytes());
            last_end = o_end;
            at = stop;
            k += 1;
        }
        last_end
    }
}

/// A text with its escapes decoded, and where each decoded byte came from:
/// `%hh` (percent-encoding, either case of hex digit), `\uhhhh` (JSON,
/// JavaScript; a surrogate is left as it is), `\xhh` (C, Python, shell),
/// `\/`, `\"` and `\\` (JSON), and, when asked, `+` for a space (HTML
/// forms, searched apart because `+` is also itself). Any mix of escaped
/// and plain bytes decodes to the plain value, so a secret with some or all
/// bytes escaped is found by searching the decoded text for it.
struct Decoded {
    /// The decoded text.
    text: Vec<u8>,
    /// For each byte of `text`, the span `[start, end)` of the source it came
    /// from.
    spans: Vec<(usize, usize)>,
}

impl Decoded {
    /// `None` when decoding changes nothing (no escape, and no `+` when
    /// `plus_is_space`): the search there would find what it found before.
    fn new(source: &[u8], plus_is_space: bool) -> Option<Decoded> {
        let escapes = source.iter().any(|&b| b == b'%' || b == b'\\');
        if !(escapes || plus_is_space && source.contains(&b'+')) {
            return None;
        }
        let mut text = Vec::with_capacity(source.len());
        let mut spans = Vec::with_capacity(source.len());
        let mut decoded_any = false;
        let mut i = 0;
        while i < source.len() {
            if !matches!(source[i], b'%' | b'\\' | b'+') {
                text.push(source[i]);
                spans.push((i, i + 1));
                i += 1;
                continue;
            }
            let (bytes, len) = match unescape(&source[i..]) {
                Some(escape) => escape,
                None if plus_is_space && source[i] == b'+' => (vec![b' '], 1),
                None => (vec![source[i]], 1),
            };
            decoded_any |= len > 1 || bytes[..] != source[i..i + 1];
            for b in bytes {
                text.push(b);
                spans.push((i, i + len));
            }
            i += len;
        }
        decoded_any.then_some(Decoded { text, spans })
    }

    /// The source span of the decoded match `[start, end)` (`start < end`).
    fn source(&self, start: usize, end: usize) -> (usize, usize) {
        (self.spans[start].0, self.spans[end - 1].1)
    }
}

/// The bytes the escape at the start of `s` stands for and its length, or
/// `None` when `s` does not start with one (see [`Decoded`]).
fn unescape(s: &[u8]) -> Option<(Vec<u8>, usize)> {
    let hex_at = |from: usize, digits: usize| -> Option<u32> {
        let part = s.get(from..from + digits)?;
        if !part.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(part).ok()?, 16).ok()
    };
    match (s.first()?, s.get(1)) {
        (b'%', _) => Some((vec![hex_at(1, 2)? as u8], 3)),
        (b'\\', Some(b'x')) => Some((vec![hex_at(2, 2)? as u8], 4)),
        (b'\\', Some(b'u')) => {
            let c = char::from_u32(hex_at(2, 4)?)?;
            Some((c.to_string().into_bytes(), 6))
        }
        (b'\\', Some(&c @ (b'/' | b'"' | b'\\'))) => Some((vec![c], 2)),
        _ => None,
    }
}

/// The blank run starting at `i`: its end (`i` when there is none) and
/// whether it holds a line break.
fn blank_run(bytes: &[u8], i: usize) -> (usize, bool) {
    let mut j = i;
    let mut is_break = false;
    while j < bytes.len() {
        match bytes[j] {
            b' ' | b'\t' => j += 1,
            b'\n' | b'\r' => {
                is_break = true;
                j += 1;
            }
            b'\\' if matches!(bytes.get(j + 1), Some(b'n' | b'r' | b't')) => {
                is_break |= bytes[j + 1] != b't';
                j += 2;
            }
            // A line continuation (shell, C, Python, Makefile).
            b'\\' if matches!(bytes.get(j + 1), Some(b'\n' | b'\r')) => {
                is_break = true;
                j += 2;
            }
            _ => break,
        }
    }
    (j, is_break)
}

/// Masks the password of every URL that carries one (`scheme://user:PASSWORD@`),
/// known or not: git and HTTP libraries print such URLs in their errors.
pub fn mask_url_passwords(s: &str) -> String {
    static URL_PASSWORD: OnceLock<regex::Regex> = OnceLock::new();
    let re = URL_PASSWORD.get_or_init(|| {
        regex::Regex::new(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s/?#@:]*):([^\s/?#@]+)@")
            .expect("a valid pattern")
    });
    if !s.contains("://") {
        return s.to_owned();
    }
    re.replace_all(s, |c: &regex::Captures<'_>| {
        if &c[2] == MASK {
            c[0].to_string()
        } else {
            format!("{}:{MASK}@", &c[1])
        }
    })
    .into_owned()
}

/// The password a URL carries, as written in it (percent-encoded), if any:
/// `scheme://user:PASSWORD@host/…`, or a `password=` query parameter (which
/// libpq and sqlx read). `None` for a URL without one.
pub fn url_password(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
        && !password.is_empty()
    {
        return Some(password.to_string());
    }
    let query = rest.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or(query);
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("password="))
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}

/// [`url_password`] in both spellings a message may show it, as written and
/// percent-decoded — the forms worth masking: none when the password is weak
/// ([`is_weak_password`]).
pub fn url_password_forms(url: &str) -> Vec<String> {
    let Some(raw) = url_password(url) else {
        return Vec::new();
    };
    let decoded = percent_decode(&raw);
    if is_weak_password(&decoded) {
        return Vec::new();
    }
    if decoded == raw {
        vec![raw]
    } else {
        vec![raw, decoded]
    }
}

/// `s` with its `%hh` escapes decoded (invalid UTF-8 replaced).
pub fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Whether a password found on its own (in a URL, in `PGPASSWORD`) is too
/// weak to be worth masking: shorter than [`MIN_SECRET_LEN`], or a single
/// lower-case word shorter than 16 letters (`postgres`, `password`, the
/// defaults of development databases). Such a value hides nothing anyone
/// could not guess, and masking it would mask every `postgres` in the logs
/// and refuse every change that mentions one. A whole URL holding it is
/// still a secret.
pub fn is_weak_password(p: &str) -> bool {
    p.len() < MIN_SECRET_LEN || (p.len() < 16 && p.bytes().all(|b| b.is_ascii_lowercase()))
}

/// Redacts a byte stream that arrives in chunks of any size.
///
/// A secret split across two chunks, or across a line break that arrives
/// in another chunk, is still masked: `push` holds back what could be the
/// start of a secret (at most `MAX_ESCAPE_LEN` times the longest form − 1
/// bytes, so a fully escaped one is seen whole, plus the line
/// breaks among them, plus a trailing blank run of up to
/// 64 KiB) and emits it with the next chunk or at
/// [`StreamRedactor::finish`]. With no secrets it holds back nothing.
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
        let sq = Squeezed::new(&data);
        // A match that starts before `boundary` (in the squeezed text) fits
        // entirely in what arrived, so the automaton has seen all of it; one
        // starting at or after it may still grow with the next chunk.
        let hold = inner.max_len * MAX_ESCAPE_LEN;
        let boundary = sq.text.len().saturating_sub(hold - 1);
        let mut out = Vec::with_capacity(data.len());
        let mut pos = 0;
        for (start, end) in inner.spans(&sq.text, boundary) {
            pos = sq.mask(&data, start, end, pos, &mut out);
        }
        // What is held back: from the boundary on, and any blank run at the
        // end (the next chunk may make it a line break inside a secret).
        let mut keep_from = if boundary < sq.text.len() {
            sq.original(boundary)
        } else {
            data.len()
        };
        let mut tail = data.len();
        while tail > 0 && matches!(data[tail - 1], b' ' | b'\t' | b'\r' | b'\n' | b'\\') {
            tail -= 1;
        }
        if tail < data.len() && data.len() - tail <= MAX_HELD_BLANKS {
            keep_from = keep_from.min(tail);
        }
        let keep_from = keep_from
            .max(pos)
            .max(data.len().saturating_sub(hold + MAX_HELD_BLANKS));
        out.extend_from_slice(&data[pos.min(keep_from)..keep_from]);
        self.pending = data[keep_from..].to_vec();
        out
    }

    /// Ends the stream and returns the held-back bytes, redacted.
    pub fn finish(self) -> Vec<u8> {
        self.redactor.redact_bytes(&self.pending)
    }
}

/// The secret values this process holds, for every text that leaves it.
static KNOWN: RwLock<Known> = RwLock::new(Known {
    values: Vec::new(),
    redactor: Redactor { inner: None },
});

struct Known {
    values: Vec<String>,
    redactor: Redactor,
}

/// Adds secret values (a token, the ledger's URL and password, a password
/// found in a remote's URL, the config's `secrets`) to the process-wide set
/// that [`known`] masks. Every sink that keeps or sends text — the ledger,
/// the log files, the PR bodies and issues, error messages — redacts with
/// it, so a secret learnt late (from `gh auth token`, from a remote URL)
/// is masked from then on everywhere. Values shorter than
/// [`MIN_SECRET_LEN`] are ignored.
pub fn remember<I, S>(values: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let new: Vec<String> = values
        .into_iter()
        .map(|v| v.as_ref().to_owned())
        .filter(|v| v.len() >= MIN_SECRET_LEN)
        .collect();
    let mut known = KNOWN.write().unwrap_or_else(|e| e.into_inner());
    let before = known.values.len();
    for v in new {
        if !known.values.contains(&v) {
            known.values.push(v);
        }
    }
    if known.values.len() != before {
        known.redactor = Redactor::new(&known.values);
    }
}

/// The redactor of every value [`remember`]ed so far.
pub fn known() -> Redactor {
    KNOWN
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .redactor
        .clone()
}

/// The values [`remember`]ed so far.
fn known_values() -> Vec<String> {
    KNOWN
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .values
        .clone()
}

/// `s` redacted with [`known`] (and URL passwords masked): for text that
/// leaves the process or is kept (ledger rows, log lines, messages).
pub fn redact_known(s: &str) -> String {
    known().redact(s)
}

/// The variables that carry a GitHub token (docs/agents.md, docs/github.md). They are removed
/// from nightshift's own environment at start-up and from every child's.
pub fn token_vars() -> &'static [&'static str] {
    &["GITHUB_TOKEN", "GH_TOKEN"]
}

/// Removes the token variables ([`token_vars`]) and the `extra` variables
/// from nightshift's own environment and returns the removed non-empty
/// values, in that order, to keep in memory only (docs/agents.md: an agent running
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
        // SAFETY: the environment is unsafe to touch in edition 2024 only
        // because another thread could read or write it at the same time.
        // The assertion above proved this process has exactly one thread,
        // and only this thread could start another, so nothing runs
        // concurrently.
        let entries = unsafe { environ_entries(name) };
        // SAFETY: as above, one thread.
        unsafe { std::env::remove_var(name) };
        for (ptr, len) in entries {
            let addr = ptr as usize;
            // Only the exec-time block, which libc never manages; strings a
            // `setenv` allocated belong to libc and are left alone.
            if exec_block
                .as_ref()
                .is_some_and(|block| block.contains(&addr) && addr + len <= block.end)
            {
                // SAFETY: the entry is no longer referenced by `environ`
                // (removed just above) and lies in our own writable stack
                // memory.
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
    /// `input` through a redacting stream in three pushes, cut at `i` and `j`.
    fn stream_in_three(redactor: &Redactor, input: &[u8], i: usize, j: usize) -> Vec<u8> {
        let mut stream = redactor.stream();
        let mut out = stream.push(&input[..i]);
        out.extend(stream.push(&input[i..j]));
        out.extend(stream.push(&input[j..]));
        out.extend(stream.finish());
        out
    }

    #[test]
    fn stream_redacts_secrets_split_at_every_position() {
        let redactor = Redactor::new(["TOKEN123456", "TOKEN123456789", "xyzxyz"]);
        let input = b"pre TOKEN123456789 mid TOKEN123456 TOKxyzxyzxyzEN123456 end TOKEN12345";
        let expected = redactor.redact_bytes(input);
        assert!(!String::from_utf8_lossy(&expected).contains("TOKEN123456"));
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let out = stream_in_three(&redactor, input, i, j);
                assert_eq!(out, expected, "cut at {i} and {j}");
            }
        }
    }

    #[test]
    fn stream_holds_back_less_than_the_longest_form() {
        // Hex is the longest form of this value: 20 bytes, which escaped
        // bytes can make six times as long.
        let redactor = Redactor::new(["0123456789"]);
        let mut stream = redactor.stream();
        let out = stream.push(&[b'a'; 140]);
        assert_eq!(out.len(), 140 - 119);
        let out = stream.push(b"012345678");
        assert_eq!(
            out.len(),
            9,
            "the held back a's are released as the prefix comes"
        );
        // A match is let out once nothing longer could start where it does.
        let out = stream.push(b"9!");
        assert_eq!(String::from_utf8_lossy(&out), "aa");
        assert_eq!(
            String::from_utf8_lossy(&stream.finish()),
            format!("{}****!", "a".repeat(108))
        );
    }

    /// The encodings an agent reaches for: base64 alone or inside a longer
    /// blob (every alignment), url-safe, wrapped by `base64` at 76 columns,
    /// hex, percent-encoded, JSON-escaped.
    #[test]
    fn encoded_forms_are_masked() {
        let token = "ghp_Enc0ded/Token+Value_1234";
        let redactor = Redactor::new([token, "p@ss word/with:all"]);
        let blob = |prefix: &str| {
            String::from_utf8(base64(format!("{prefix}{token} and more").as_bytes())).unwrap()
        };
        for text in [
            blob(""),
            blob("x"),
            blob("xy"),
            blob("xy").replace('+', "-").replace('/', "_"),
            // `base64` wraps its output at 76 columns, here inside the token.
            blob(&"A".repeat(40))
                .as_bytes()
                .chunks(76)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
                .join("\n"),
            hex::encode(token),
            hex::encode_upper(token),
            "p%40ss%20word%2Fwith%3Aall".into(),
            "p%40ss+word%2fwith%3aall".into(),
            format!("{{\"t\":\"{token}\"}}"),
        ] {
            let out = redactor.redact(&text);
            assert!(out.contains(MASK), "{text} -> {out}");
            assert!(!redactor.finds_in(out.as_bytes()), "{text} -> {out}");
        }
        // Nothing else is touched.
        assert_eq!(
            redactor.redact("ghp_ plain words 0123"),
            "ghp_ plain words 0123"
        );
    }

    /// A value with every byte, or only some, written as an escape (`%hh`
    /// in either case, `\uhhhh`, `\xhh`), alone or inside other text, is
    /// masked whole and found by the change check.
    #[test]
    fn escaped_bytes_are_masked_all_or_some() {
        let token = "can_Escape/Token+9";
        let redactor = Redactor::new([token, "a b/c d e"]);
        let every = |f: fn(u8) -> String| token.bytes().map(f).collect::<String>();
        for text in [
            every(|b| format!("%{b:02X}")),
            every(|b| format!("%{b:02x}")),
            every(|b| format!("\\u{:04x}", b)),
            every(|b| format!("\\x{b:02x}")),
            "c%61n_Esc%61pe%2FToken%2b9".into(),
            "%63an_Escape/Token+9".into(),
            "can\\u005fEscape\\/Token+9".into(),
            "a+b%2Fc+d+e".into(),
        ] {
            let wrapped = format!("url=https://h/?q={text}&next=1");
            let out = redactor.redact(&wrapped);
            assert_eq!(out, "url=https://h/?q=****&next=1", "{text}");
            assert!(redactor.finds_in(text.as_bytes()), "{text}");
            assert!(!redactor.finds_in(out.as_bytes()), "{text} -> {out}");
        }
        // Escapes of other bytes are left as they are.
        assert_eq!(redactor.redact("100%25 \\u0041 %zz"), "100%25 \\u0041 %zz");
    }

    proptest::proptest! {
        /// Any mix of plain and escaped bytes of a secret, inside any text
        /// and through a stream cut anywhere, is masked.
        #[test]
        fn any_mix_of_escaped_bytes_is_masked(
            secret in "[!-~]{6,24}",
            ways in proptest::collection::vec(0u8..5, 24),
            before in "[ -~]{0,12}",
            after in "[ -~]{0,12}",
            cut in 0usize..200,
        ) {
            let mixed: String = secret
                .bytes()
                .zip(ways)
                .map(|(b, way)| match way {
                    0 => (b as char).to_string(),
                    1 => format!("%{b:02X}"),
                    2 => format!("%{b:02x}"),
                    3 => format!("\\u{:04X}", b),
                    _ => format!("\\x{b:02x}"),
                })
                .collect();
            let redactor = Redactor::new([secret.as_str()]);
            let text = format!("{before}{mixed}{after}");
            let out = redactor.redact_bytes(text.as_bytes());
            proptest::prop_assert!(!redactor.finds_in(&out), "{} -> {}", text, String::from_utf8_lossy(&out));
            let cut = cut.min(text.len());
            let streamed = stream_in_three(&redactor, text.as_bytes(), cut / 2, cut);
            proptest::prop_assert_eq!(streamed, out);
        }
    }

    /// A value cut by a line break (real, CRLF, indented, or a JSON `\n`
    /// escape) is masked piece by piece; the break stays.
    #[test]
    fn a_secret_cut_by_a_line_break_is_masked_and_the_lines_stay() {
        let redactor = Redactor::new(["ghp_SplitToken_987654"]);
        assert_eq!(
            redactor.redact("a ghp_Split\nToken_987654 b"),
            "a ****\n**** b"
        );
        assert_eq!(
            redactor.redact("x: ghp_Split\r\n  Token_98\n7654\ny"),
            "x: ****\r\n  ****\n****\ny"
        );
        assert_eq!(
            redactor.redact("{\"t\":\"ghp_Spl\\nitToken_987654\"}"),
            "{\"t\":\"****\\n****\"}"
        );
        // Blanks without a line break do not join words.
        assert_eq!(
            redactor.redact("ghp_Split Token_987654"),
            "ghp_Split Token_987654"
        );
        assert_eq!(
            redactor.redact("T=ghp_Split\\\n  Token_987654"),
            "T=****\\\n  ****"
        );
        // A multi-line secret (a key) is found printed as is, or on one line.
        let pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX\n-----END KEY-----\n";
        let key = Redactor::new([pem]);
        assert!(!key.redact(&format!("key:\n{pem}")).contains("MIIBOg"));
        assert!(!key.redact(&pem.replace('\n', "")).contains("MIIBOg"));
    }

    /// Every way of cutting a text with secrets across lines into three
    /// chunks gives what redacting it whole gives.
    #[test]
    fn stream_redacts_secrets_cut_by_lines_and_reads_alike() {
        let redactor = Redactor::new(["TOKEN123456", "k/e y+9"]);
        let input = b"pre TOK\nEN123456 mid TOKEN12\r\n  3456 k%2Fe%20y%2B9 \\n end TOKEN1234\n\n";
        let expected = redactor.redact_bytes(input);
        assert!(
            !redactor.finds_in(&expected),
            "{}",
            String::from_utf8_lossy(&expected)
        );
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let out = stream_in_three(&redactor, input, i, j);
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&expected),
                    "cut at {i} and {j}"
                );
            }
        }
    }

    #[test]
    fn url_passwords_are_masked_known_or_not() {
        let none = Redactor::new(Vec::<String>::new());
        assert_eq!(
            none.redact(
                "fatal: unable to access 'https://x-access-token:ghs_abc@github.com/o/r.git/': 403"
            ),
            "fatal: unable to access 'https://x-access-token:****@github.com/o/r.git/': 403"
        );
        assert_eq!(
            none.redact("postgres://u:p%40ss@db:5432/x and http://host:8080/a@b"),
            "postgres://u:****@db:5432/x and http://host:8080/a@b"
        );
        assert_eq!(
            none.redact("git@github.com:o/r.git https://github.com/o/r"),
            "git@github.com:o/r.git https://github.com/o/r"
        );
    }

    #[test]
    fn passwords_are_read_from_urls() {
        assert_eq!(
            url_password("https://x-access-token:ghp_1@github.com/o/r"),
            Some("ghp_1".into())
        );
        assert_eq!(
            url_password_forms("postgres://u:p%40ssw0rd@h:5432/db?sslmode=require"),
            ["p%40ssw0rd", "p@ssw0rd"]
        );
        // A development default hides nothing: not masked on its own.
        assert!(url_password_forms("postgres://postgres:postgres@localhost/db").is_empty());
        assert!(
            is_weak_password("password")
                && !is_weak_password("hunter2hunter2")
                && !is_weak_password("correcthorsebatterystaple")
        );
        assert_eq!(
            url_password("postgres://u@h/db?sslmode=disable&password=s3cret"),
            Some("s3cret".into())
        );
        assert_eq!(url_password("postgres://u@h/db"), None);
        assert_eq!(url_password("https://user@host/a:b@c"), None);
        assert_eq!(url_password("/srv/git/repo.git"), None);
    }

    #[test]
    fn remembered_values_are_masked_by_known() {
        remember(["remembered-secret-value-1"]);
        assert_eq!(redact_known("a remembered-secret-value-1 b"), "a **** b");
        assert!(
            Redactor::with_known(["other-secret-value"]).finds_in(b"x remembered-secret-value-1")
        );
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
