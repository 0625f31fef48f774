//! [`JsonShortener`]: shortens over-long JSON lines (long strings cut in the
//! middle, with their length) before a line callback sees them.
//!
//! Not for parsing the JSON: it works on bytes and keeps the line valid.

/// Shortens the long string values of one JSON text as it streams by: each
/// string keeps its first and last `keep` bytes (a sixteenth of the line
/// cap) around a `…[N bytes cut]…` note, never splitting an escape sequence
/// (a surrogate pair included) or a UTF-8 character, so the result is the
/// same JSON with less text: an event's small fields (type, usage, exit
/// code) survive a 50 MiB tool output, and a final message keeps its last
/// words (where verdicts and blocks are). Bytes outside strings are kept;
/// once the output exceeds the cap it stops growing and the caller cuts it.
pub(super) struct JsonShortener {
    out: Vec<u8>,
    pub(super) max: usize,
    keep: usize,
    in_string: bool,
    /// A pending escape sequence (`\n`, `\u00e9`, `\ud83d\ude00`): its
    /// bytes and how many.
    escape: [u8; 12],
    escape_len: usize,
    /// Content bytes of the current string written to `out`.
    head: usize,
    /// The head is closed: later bytes of the string go to `tail`.
    head_closed: bool,
    /// The last bytes of the current string after its head, from
    /// `tail_start` on; always starts at a whole escape sequence or
    /// character.
    pub(super) tail: Vec<u8>,
    /// Where the tail begins in `tail` (dropped bytes before it are removed
    /// in bulk now and then).
    tail_start: usize,
    /// Bytes of the current string dropped between head and tail.
    dropped: usize,
}

impl JsonShortener {
    pub(super) fn new(max: usize) -> JsonShortener {
        JsonShortener {
            out: Vec::new(),
            max,
            keep: (max / 16).max(16),
            in_string: false,
            escape: [0; 12],
            escape_len: 0,
            head: 0,
            head_closed: false,
            tail: Vec::new(),
            tail_start: 0,
            dropped: 0,
        }
    }

    pub(super) fn push(&mut self, mut bytes: &[u8]) {
        // Runs without a quote or backslash are handled whole: a 50 MiB
        // string is a few slice copies, not 50 million steps.
        while let Some(&first) = bytes.first() {
            // A plain loop: the runs are short, and a memchr call costs more
            // than it saves on them.
            let n = if !self.in_string {
                bytes.iter().position(|&c| c == b'"').unwrap_or(bytes.len())
            } else if self.escape_len == 0 {
                bytes
                    .iter()
                    .position(|&c| c == b'"' || c == b'\\')
                    .unwrap_or(bytes.len())
            } else {
                0
            };
            if n == 0 {
                self.byte(first);
                bytes = &bytes[1..];
            } else {
                if self.in_string {
                    self.run(&bytes[..n]);
                } else {
                    self.write(&bytes[..n]);
                }
                bytes = &bytes[n..];
            }
        }
    }

    /// A run of plain string content (no quote, no backslash): any
    /// character boundary in it is a unit boundary.
    pub(super) fn run(&mut self, mut run: &[u8]) {
        if !self.head_closed {
            let mut take = self.keep.saturating_sub(self.head).min(run.len());
            while take < run.len() && run[take] & 0xC0 == 0x80 {
                take += 1;
            }
            self.head += take;
            self.write(&run[..take]);
            run = &run[take..];
            if run.is_empty() {
                return;
            }
            self.head_closed = true;
        }
        if run.len() >= self.keep {
            // All the tail so far goes; the run's last bytes are the tail.
            let mut start = run.len() - self.keep;
            while start < run.len() && run[start] & 0xC0 == 0x80 {
                start += 1;
            }
            self.dropped += self.tail_len() + start;
            self.tail.clear();
            self.tail_start = 0;
            self.tail.extend_from_slice(&run[start..]);
        } else {
            self.tail.extend_from_slice(run);
            self.trim_tail();
        }
    }

    fn tail_len(&self) -> usize {
        self.tail.len() - self.tail_start
    }

    /// Drops the tail's first `n` bytes.
    fn drop_tail(&mut self, n: usize) {
        self.tail_start += n;
        self.dropped += n;
        if self.tail_start > self.keep {
            self.tail.drain(..self.tail_start);
            self.tail_start = 0;
        }
    }

    /// Lets the tail grow to twice `keep` before trimming it back (a
    /// trim scans what it drops), so each byte is looked at about once.
    fn trim_tail(&mut self) {
        if self.tail_len() > 2 * self.keep {
            self.cut_tail();
        }
    }

    /// Drops whole units from the tail's front until it holds at most
    /// `keep` bytes.
    fn cut_tail(&mut self) {
        let t = &self.tail[self.tail_start..];
        if t.len() <= self.keep {
            return;
        }
        let excess = t.len() - self.keep;
        let mut i = 0;
        while i < excess {
            // Plain ASCII, the common case, in a tight loop.
            while i < excess && t[i] < 0x80 && t[i] != b'\\' {
                i += 1;
            }
            if i < excess {
                i += unit_len(&t[i..]);
            }
        }
        self.drop_tail(i.min(t.len()));
    }

    /// One byte of structure, of an escape sequence, or a quote.
    fn byte(&mut self, b: u8) {
        if !self.in_string {
            self.write(&[b]);
            if b == b'"' {
                self.in_string = true;
                self.head = 0;
                self.head_closed = false;
                self.tail.clear();
                self.tail_start = 0;
                self.dropped = 0;
            }
            return;
        }
        if self.escape_len > 0 {
            self.escape[self.escape_len] = b;
            self.escape_len += 1;
            let e = &self.escape[..self.escape_len];
            let high = |h: &[u8]| {
                matches!(
                    std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u16::from_str_radix(h, 16).ok()),
                    Some(0xD800..=0xDBFF)
                )
            };
            let done = match e.len() {
                2 => e[1] != b'u',
                6 => !high(&e[2..6]),
                // A high surrogate is one unit with the low one after it.
                7 if b != b'\\' => true,
                8 if b != b'u' => true,
                12 => true,
                _ => false,
            };
            if done {
                let (unit, n) = (self.escape, self.escape_len);
                self.escape_len = 0;
                if n == 7 || n == 8 {
                    // Not a pair after all: the surrogate stands alone and
                    // the bytes after it are read again.
                    self.content(&unit[..6]);
                    for &c in &unit[6..n] {
                        self.byte(c);
                    }
                } else {
                    self.content(&unit[..n]);
                }
            }
            return;
        }
        match b {
            b'\\' => {
                self.escape[0] = b;
                self.escape_len = 1;
            }
            b'"' => {
                self.end_string();
                self.write(b"\"");
                self.in_string = false;
            }
            _ => self.content(&[b]),
        }
    }

    /// One whole unit of string content: an escape sequence or one byte.
    fn content(&mut self, unit: &[u8]) {
        // A UTF-8 continuation byte stays with the character it continues.
        let continues = unit.len() == 1 && unit[0] & 0xC0 == 0x80;
        if !self.head_closed && (self.head < self.keep || continues) {
            self.head += unit.len();
            self.write(unit);
            return;
        }
        self.head_closed = true;
        self.tail.extend_from_slice(unit);
        self.trim_tail();
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.out.len() <= self.max {
            self.out.extend_from_slice(bytes);
        }
    }

    /// The shortened text; a string the text ends in stays unfinished, as
    /// it came.
    pub(super) fn finish(mut self) -> Vec<u8> {
        if self.in_string {
            self.end_string();
        }
        self.out
    }

    /// Writes what the current string kept of its end, after a note of the
    /// bytes cut from its middle (if any).
    fn end_string(&mut self) {
        self.cut_tail();
        if self.dropped > 0 {
            let note = format!("…[{} bytes cut]…", self.dropped);
            self.write(note.as_bytes());
        }
        let tail = std::mem::take(&mut self.tail);
        self.write(&tail[self.tail_start..]);
    }
}

/// The length of the string unit `t` begins with: an escape sequence (a
/// surrogate pair is one), or a UTF-8 character with its continuation bytes.
fn unit_len(t: &[u8]) -> usize {
    let n = match t.first() {
        Some(b'\\') => {
            let is_u = t.get(1) == Some(&b'u');
            let high = is_u
                && matches!(t.get(2), Some(b'd' | b'D'))
                && matches!(t.get(3), Some(b'8' | b'9' | b'a' | b'b' | b'A' | b'B'));
            if high && t.get(6) == Some(&b'\\') && t.get(7) == Some(&b'u') {
                12
            } else if is_u {
                6
            } else {
                2
            }
        }
        Some(_) => 1 + t.iter().skip(1).take_while(|c| **c & 0xC0 == 0x80).count(),
        None => 0,
    };
    n.clamp(1, t.len().max(1))
}
