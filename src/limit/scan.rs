//! One line of an agent's output as it is read: the [`Scan`] a reading is built from, and what
//! surrounds the line ([`Around`]: the lines that continue a wrapped message, the rest of an error
//! body, the line it was wrapped from). Not the patterns (see [`super::patterns`]) nor the rules
//! that decide a line's kind (see [`super::text`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::patterns::{GOOGLE_DAILY_QUOTA, PER_DAY, PER_MINUTE};
use super::{LimitKind, LimitReading};

/// What surrounds one line of a text: the lines that may continue its message, the rest of its
/// error body, and the line it continues when a terminal wrapped it.
#[derive(Default)]
pub(super) struct Around<'a> {
    /// See [`continuation`].
    pub(super) cont: String,
    /// See [`block`].
    pub(super) block: String,
    /// See [`wrapped_from`]; empty when the line starts a message.
    pub(super) prev: &'a str,
}

/// What surrounds line `i` of `lines`.
pub(super) fn around<'a>(lines: &[&'a str], i: usize) -> Around<'a> {
    Around {
        cont: continuation(lines, i),
        block: block(lines, i),
        prev: wrapped_from(lines, i),
    }
}

/// The previous line when line `i` continues it: the line is indented and the previous one
/// stops mid-sentence (claude wraps `API Error: 402 {"error":{"message":"… Resets at 10:00 UTC.
/// Top up … at` / `     https://…","type":"insufficient_quota"}}` so).
fn wrapped_from<'a>(lines: &[&'a str], i: usize) -> &'a str {
    let Some(prev) = i.checked_sub(1).map(|p| lines[p].trim()) else {
        return "";
    };
    let indented = lines[i].starts_with(char::is_whitespace);
    let open = !prev.is_empty() && !prev.ends_with(['.', '!', '?', '}', ']', ')', ':']);
    if indented && open { prev } else { "" }
}

/// How many following lines may continue a message: a terminal wraps a long message, and
/// codex's full limit text (~190 characters) takes three lines at 80 columns.
const CONTINUATION_LINES: usize = 3;

/// The lines after line `i` that may continue it (up to [`CONTINUATION_LINES`], stopping at a
/// blank line), trimmed and joined with spaces.
fn continuation(lines: &[&str], i: usize) -> String {
    following(lines, i, CONTINUATION_LINES)
}

/// How many following lines may belong to one error body (to a blank line): a pretty-printed
/// Gemini error puts its quota ids and `retryDelay` 15–30 lines below its message.
const BLOCK_LINES: usize = 40;

/// The lines after line `i` up to [`BLOCK_LINES`] or a blank line, trimmed and joined with
/// spaces: where the structured parts of an error body are looked for.
fn block(lines: &[&str], i: usize) -> String {
    following(lines, i, BLOCK_LINES)
}

/// Up to `n` lines after line `i`, stopping at a blank line, trimmed and joined with spaces.
fn following(lines: &[&str], i: usize, n: usize) -> String {
    lines
        .iter()
        .skip(i + 1)
        .take(n)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// One line being read, with what it is read against: the lines that continue it (`whole`, where
/// a wait or a reset is looked for) and the rest of its error body (`body`, where quota ids and
/// fields are looked for), and the reading's instant, zone and origin.
pub(super) struct Scan<'a> {
    /// The line, trimmed.
    pub(super) message: &'a str,
    /// The line and the lines that continue it, joined with spaces.
    pub(super) whole: String,
    /// The line and the rest of its error body (`whole` when that is longer).
    pub(super) body: String,
    /// What surrounds the line.
    pub(super) around: &'a Around<'a>,
    /// The instant the output is read at.
    pub(super) now: DateTime<Utc>,
    /// The agent's zone, for local times that name none.
    pub(super) tz: Tz,
    /// Where the line came from, for `source` (`text`, `line`, `codex error`, …).
    pub(super) origin: &'a str,
}

impl<'a> Scan<'a> {
    pub(super) fn new(
        message: &'a str,
        around: &'a Around<'a>,
        now: DateTime<Utc>,
        tz: Tz,
        origin: &'a str,
    ) -> Scan<'a> {
        let (cont, block) = (around.cont.as_str(), around.block.as_str());
        let whole = if cont.is_empty() {
            message.to_string()
        } else {
            format!("{message} {cont}")
        };
        // An error body's structured parts (Gemini's quota ids, `retryDelay`, OpenRouter's
        // `X-RateLimit-Reset`) may sit many lines below its message when it is pretty-printed.
        let body = if block.len() > cont.len() {
            format!("{message} {block}")
        } else {
            whole.clone()
        };
        Scan {
            message,
            whole,
            body,
            around,
            now,
            tz,
            origin,
        }
    }

    /// A usage-limit reading of this line, its reset not (yet) known.
    pub(super) fn usage(&self, source: String) -> LimitReading {
        LimitReading {
            kind: LimitKind::UsageLimit,
            resets_at: None,
            retry_after: None,
            source,
            message: self.message.to_string(),
        }
    }

    /// A no-credit reading of this line: the account cannot run at all.
    pub(super) fn no_credit(&self, source: String) -> LimitReading {
        LimitReading {
            kind: LimitKind::NoCredit,
            resets_at: None,
            retry_after: None,
            source,
            message: self.message.to_string(),
        }
    }

    /// A transient reading of this line, with the wait it states, if any.
    pub(super) fn transient(&self, retry_after: Option<Duration>, source: String) -> LimitReading {
        LimitReading {
            kind: LimitKind::Transient,
            resets_at: None,
            retry_after,
            source,
            message: self.message.to_string(),
        }
    }
}

/// The windows a line's quota names (looked for in its whole error body).
#[derive(Debug, Clone, Copy)]
pub(super) struct Windows {
    /// A per-minute window (`PER_MINUTE`).
    pub(super) per_minute: bool,
    /// A per-day window (`PER_DAY`).
    pub(super) per_day: bool,
    /// A Google per-day quota id (see `GOOGLE_DAILY_QUOTA`).
    pub(super) google_daily: bool,
}

impl Windows {
    /// The windows named in `body`.
    pub(super) fn of(body: &str) -> Windows {
        Windows {
            per_minute: PER_MINUTE.is_match(body),
            per_day: PER_DAY.is_match(body),
            google_daily: GOOGLE_DAILY_QUOTA.is_match(body),
        }
    }

    /// A per-day quota outlasts a per-minute one listed beside it and any short retry.
    pub(super) fn daily(self) -> bool {
        self.per_day || self.google_daily
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_line_knows_the_line_it_continues() {
        let lines = [
            "API Error: 402 {\"error\":{\"message\":\"Resets at 10:00 UTC. Top up at",
            "     https://example.test\",\"type\":\"insufficient_quota\"}}",
            "Done.",
            "     indented, but the line before ended a sentence",
        ];
        assert_eq!(wrapped_from(&lines, 1), lines[0]);
        assert_eq!(wrapped_from(&lines, 0), "");
        assert_eq!(wrapped_from(&lines, 2), "");
        assert_eq!(wrapped_from(&lines, 3), "");
    }
}
