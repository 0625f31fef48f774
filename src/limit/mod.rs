//! Reading an agent's output into a typed usage-limit result, and the sleep that follows (docs/limits.md#sleep-policy).
//!
//! This module turns what claude, codex, gemini or an API-key agent printed into a
//! [`LimitReading`]: an account **usage limit** (with the reset instant when one can be read),
//! **transient** throttling (a short retry: per-minute limits, `529 Overloaded`, "not your usage
//! limit", `Retrying in 21s`), or **none**. Structured sources are read first (claude's
//! `rate_limit_event`, claude's `result` with `api_error_status: 429`, codex's `error` /
//! `turn.failed` events, codex's raw 429 body with `resets_at`), then every known text form.
//! [`sleep_for`] turns a reading into a clamped sleep, [`explain()`] / [`explain_text`] describe it
//! for `nightshift limit parse`.
//!
//! It is not the sleeper (see `schedule::sleep_until`), not the process runner, and it is
//! handed only an agent's error channel (docs/limits.md#channels): claude's error `result`,
//! `rate_limit_event` and synthetic `rate_limit` message, codex's `error` / `turn.failed`
//! events, stderr of a failed call. The assistant's answer, its tool output and a `command`
//! agent's stdout never reach it: prose, a README table or a diff that quotes a limit banner is
//! no limit. [`read_stream_line`] is a stricter reader for a log line that may be prose.
//!
//! Reading rules worth knowing:
//! - A bare time of day ("resets 7pm") means its next occurrence in the zone the message names,
//!   else in the `tz` argument (nightshift sets the agent's `TZ` to it, so codex's zone-less
//!   local times are read right); if it passed at most 15 minutes ago the reset is `now`.
//! - A date without a year takes the year that puts it nearest to `now`; a date without a time
//!   ("resets Oct 24") is the start of that day in its zone (the earliest the reset can be); a
//!   weekday ("resets Friday 2pm") is its next occurrence; "tomorrow" counts only with a time.
//! - Local times in a DST gap resolve to the end of the gap, ambiguous ones to the earlier instant.
//! - A message wrapped by a terminal is read with up to three following lines (to a blank line);
//!   its reset may also sit on the line it was wrapped from, and an error body's structured parts
//!   (quota ids, `retryDelay`, `X-RateLimit-Reset`) up to 40 lines below it.
//! - Zones: a tzdb name, `UTC`/`GMT`, an offset (`GMT+8`, `UTC+05:30`, the sign as written) or an
//!   abbreviation. An abbreviation the agent's own zone uses is read in that zone (`CST` in
//!   Asia/Taipei is +8, `IST` in Europe/Dublin is Irish time); otherwise a fixed table:
//!   `CST` is US Central, `IST` India, `BST` British Summer Time, `PT`/`ET`/`CT`/`MT` follow US
//!   DST (see `abbreviation_zone`). A zone word nothing knows is read in `tz`, never an error.
//! - A wait stated by the service ("try again in 15m44s", "Your quota will reset after
//!   12h22m45s", `Retry-After: 3600`) longer than [`LONG_WAIT`] (5 min) is an account usage
//!   limit with that reset, whatever the wording; shorter ones are transient. So is a reset
//!   instant a throttling message states (OpenRouter's `X-RateLimit-Reset` in epoch milliseconds,
//!   "Resets at 10:00 UTC"). The agent's own retry loop ("Retrying in 2892 seconds…") is never a
//!   reset.
//! - A rate limit is throttling unless it names a window: Copilot's "You've hit your global rate
//!   limit … wait 6 seconds" is transient, "You've reached your weekly rate limit" and "you've
//!   exceeded your 5 hour session limits" are usage limits, and "Sorry, you've hit a rate limit
//!   … try again in 58 hours" is one by its wait.
//! - Google's `RESOURCE_EXHAUSTED` alone is transient, with a per-day quota a usage limit; "You
//!   exceeded your current quota" is a usage limit unless it names a per-minute window or a
//!   short retry. A per-day quota id (`…PerDay…`, Gemini CLI's own rule) wins over a per-minute
//!   one beside it and over the seconds Google suggests: it lasts until the day's reset.
//! - A clearly-a-limit message whose time cannot be read is a usage limit with an unknown reset
//!   (the caller sleeps `SleepPolicy::unknown`, 1 h); reading never fails or panics.
//! - A reset more than 15 minutes in the past or more than 8 days ahead is not believed
//!   (stale message, or a misreading): the reading stays a usage limit with an unknown reset,
//!   and `source` says what was ignored.
//! - `Etc/GMT+5` is the POSIX-inverted name of UTC−5; `GMT-3` written bare (gemini) is UTC−3.
//! - Context-window, prompt-length and output-length limits ("Context limit reached", "You've
//!   hit your context limit", "prompt is too long: 216327 tokens > 200000 maximum", codex's "ran
//!   out of room in the model's context window") are `none` whose `source` says so: waiting does
//!   not help, the round fails with that reason (docs/limits.md).
//! - Look-alikes are `none`: context-length errors ("Context limit reached"), network errors
//!   (`Connection refused`, `ENOTFOUND`, a bare `Retrying in 5s`), authentication failures,
//!   warnings ("Approaching usage limit", "You've used 90% of your session limit", codex's
//!   "Heads up, you have less than 25% of your 5h limit left", "You're now using extra
//!   usage"), claude's `/usage` panel, machine resources ("Disk quota exceeded", "Memory usage
//!   limit exceeded"), numbers that merely read 429 or 529, and error ids outside quotes (a test
//!   named `usage_limit_reached_resets`).
//! - Judgment call: `⚠ Claude rate limit reached` (another tool's own summary, no reset, never
//!   printed by the agents nightshift runs) is **not** read as a limit; so any prose saying
//!   "rate limit reached" does not pause a night. `Rate limit reached for <model> in
//!   organization …` (the OpenAI API text) is transient.

mod claude;
mod codex;
mod event;
mod explain;
pub mod gauge;
mod message;
mod patterns;
mod reset;
mod scan;
mod sleep;
mod text;
mod throttle;
mod usage;
mod wait;
mod zone;

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

pub use claude::read_claude_event;
pub use codex::read_codex_event;
pub use explain::{explain, explain_text};
pub use gauge::{Gauge, GaugeSource};
pub use sleep::{SleepPolicy, sleep_for};

use event::{json_object, read_json};
use explain::rfc3339_utc;
use message::{STATUS_PREFIX, begins_with_message, holds_message, strip_message_prefix};
use patterns::normalize;
use scan::{Around, around};
use text::scan_line;

/// How far in the past a read reset may lie and still be believed (docs/limits.md#formats: a bare time that
/// passed at most 15 minutes ago means "now").
pub const PAST_GRACE: chrono::TimeDelta = chrono::TimeDelta::minutes(15);

/// How far ahead a read reset may lie and still be believed: a weekly limit resets within
/// 7 days; one day of slack for zones and rounding.
pub const FUTURE_HORIZON: chrono::TimeDelta = chrono::TimeDelta::days(8);

/// What kind of limit a piece of agent output reports (docs/limits.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// The account's usage limit: sleep until the reset, then retry the same round.
    UsageLimit,
    /// Server-side or per-minute throttling: retry after a short wait, not a sleep until reset.
    Transient,
    /// Not a limit at all (including look-alikes such as network or context-length errors).
    None,
    /// The account cannot run at all: its credit or billing is exhausted ("Credit balance is too
    /// low", `insufficient_quota`, "You exceeded your current quota, please check your plan and
    /// billing details", `402 Payment Required`) and no reset is stated. Waiting does not help:
    /// the account's work stops for the night (docs/limits.md#no-credit).
    NoCredit,
}

impl LimitKind {
    /// The name used in `limit parse --json` (docs/commands.md#json-output): `usage_limit`,
    /// `transient`, `no_credit` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::UsageLimit => "usage_limit",
            LimitKind::Transient => "transient",
            LimitKind::NoCredit => "no_credit",
            LimitKind::None => "none",
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of reading agent output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitReading {
    /// Usage limit, transient throttling, or none.
    pub kind: LimitKind,
    /// When the usage limit resets (UTC); `None` when unknown or not a usage limit.
    /// Always within [now − 15 min, now + 8 days] of the `now` it was read with.
    pub resets_at: Option<DateTime<Utc>>,
    /// For transient throttling: the wait the message asks for (`Retrying in 21s`, `174ms`).
    pub retry_after: Option<Duration>,
    /// What matched, e.g. `claude rate_limit_event` or `text: resets 7pm (Asia/Taipei)`.
    pub source: String,
    /// The message (or line) the reading was taken from, trimmed; empty for `None`.
    pub message: String,
}

impl LimitReading {
    /// A reading that found no limit (`source` says so, for `limit parse`).
    pub fn none() -> LimitReading {
        LimitReading {
            kind: LimitKind::None,
            resets_at: None,
            retry_after: None,
            source: "no usage-limit or throttling message found".to_string(),
            message: String::new(),
        }
    }

    /// True for a usage limit or transient throttling.
    pub fn is_limit(&self) -> bool {
        self.kind != LimitKind::None
    }

    /// Ordering used to pick the strongest of several readings of one output:
    /// no credit > usage limit with a reset > usage limit without > transient > none.
    pub fn rank(&self) -> u8 {
        match (self.kind, self.resets_at) {
            (LimitKind::NoCredit, _) => 4,
            (LimitKind::UsageLimit, Some(_)) => 3,
            (LimitKind::UsageLimit, None) => 2,
            (LimitKind::Transient, _) => 1,
            (LimitKind::None, _) => 0,
        }
    }
}

/// Keeps the stronger reading; on a tie the earlier one (output order), unless only the later
/// one states its wait (an error body's first line names the 429, a later one the wait) or,
/// between two `none`, only the later one names what it found (a context-window limit).
fn stronger(best: LimitReading, next: LimitReading) -> LimitReading {
    let tie = next.rank() == best.rank();
    let more_exact = tie
        && ((best.retry_after.is_none() && next.retry_after.is_some())
            || (best.message.is_empty() && !next.message.is_empty()));
    if next.rank() > best.rank() || more_exact {
        next
    } else {
        best
    }
}

/// Reads a piece of agent output from the error/result channel (stderr, a `result` text, an
/// error event's message, or text pasted into `nightshift limit parse`).
///
/// Every line is read; a line holding a JSON object is read as a claude or codex event
/// (structured fields first), other lines by the text patterns, which may match anywhere in
/// the line. The strongest reading wins (usage limit with reset > without > transient > none).
/// `now` is the current instant; `tz` is the zone the agent ran in (its `TZ`), used for local
/// times that name no zone. docs/limits.md.
pub fn read_text(text: &str, now: DateTime<Utc>, tz: Tz) -> LimitReading {
    let text = normalize(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut best = LimitReading::none();
    for (i, line) in lines.iter().enumerate() {
        let reading = if let Some(value) = json_object(line) {
            read_json(&value, now, tz).unwrap_or_else(LimitReading::none)
        } else {
            scan_line(line, &around(&lines, i), now, tz, "text")
        };
        best = stronger(best, reading);
        if best.rank() == 4 {
            break;
        }
    }
    best
}

/// Reads one line of a log where prose may mention limits (a TUI log pasted by hand), strictly.
/// nightshift never reads an agent's ordinary output for limits at all (docs/limits.md#channels):
/// this is for tools that must look at a line of such a log.
///
/// The rule: after stripping what may precede a message on its own line (whitespace, TUI
/// glyphs and emoji `⎿ ■ ✕ ⚡ ● 🖐 ⚠️`, `[..]` tags, timestamps, `ERROR:` / `Error:` /
/// `API Error:` / `SomeError:` labels, codex's `stream disconnected before completion:`, an
/// HTTP status such as `429`), the rest of the line must *begin* with a known limit message
/// ("You've hit your limit", "Claude AI usage limit reached|…", "529 Overloaded", "Rate limit
/// reached for …", …). A sentence that merely mentions a limit somewhere inside is `none`.
/// One exception: after an exception-class label (`openai.RateLimitError:`,
/// `anthropic.api.ApiException:`) the rest is an error's text, and a limit anywhere in it
/// counts. Accepted lines are then read exactly as [`read_text`] reads them. docs/limits.md#formats.
pub fn read_stream_line(line: &str, now: DateTime<Utc>, tz: Tz) -> LimitReading {
    let normalized = normalize(line);
    let trimmed = normalized.trim();
    if let Some(value) = json_object(trimmed) {
        return read_json(&value, now, tz).unwrap_or_else(LimitReading::none);
    }
    let (rest, labelled) = strip_message_prefix(trimmed);
    let after_status = STATUS_PREFIX.find(rest).map_or(rest, |m| &rest[m.end()..]);
    let labelled_error = labelled && holds_message(rest);
    if !(begins_with_message(rest) || begins_with_message(after_status) || labelled_error) {
        return LimitReading::none();
    }
    scan_line(trimmed, &Around::default(), now, tz, "line")
}

/// Reads a whole failed agent call from its error channel (docs/limits.md#channels): every
/// stdout line that is a JSON event through [`read_claude_event`] / [`read_codex_event`] (which
/// read only error results, error events and rate-limit events, never the model's messages or
/// tool output), and stderr through [`read_text`]. Other stdout lines are the agent's answer and
/// are not read. The strongest reading wins. docs/agents.md, docs/limits.md.
pub fn read_output(stdout: &str, stderr: &str, now: DateTime<Utc>, tz: Tz) -> LimitReading {
    let mut best = LimitReading::none();
    for value in stdout.lines().filter_map(|l| json_object(l.trim())) {
        best = stronger(
            best,
            read_json(&value, now, tz).unwrap_or_else(LimitReading::none),
        );
    }
    stronger(best, read_text(stderr, now, tz))
}

/// A stated wait longer than this is an account limit, not throttling: it is longer than the
/// longest transient retry (`SleepPolicy::default().transient_max`, 5 min), so retrying sooner
/// is sure to fail. Gemini says `Your quota will reset after 12h22m45s`, Groq's per-day cap
/// `Please try again in 15m44s`.
pub const LONG_WAIT: Duration = Duration::from_secs(5 * 60);

/// Stores a reset if it is believable (within [now − 15 min, now + 8 days]); otherwise keeps
/// the reset unknown and says why in `source`.
fn accept_reset(
    reading: &mut LimitReading,
    reset: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    label: &str,
) {
    match reset {
        Some(t) if t >= now - PAST_GRACE && t <= now + FUTURE_HORIZON => {
            reading.resets_at = Some(t);
            reading.source = label.to_string();
        }
        Some(t) => {
            let why = if t < now {
                "in the past"
            } else {
                "more than 8 days ahead"
            };
            reading.resets_at = None;
            reading.source = format!("{label} (reset {} ignored: {why})", rfc3339_utc(t));
        }
        None => {
            reading.source = format!("{label} (not a valid time)");
        }
    }
}
