//! Reading an agent's output into a typed usage-limit result, and the sleep that follows (SPEC §7).
//!
//! This module turns what claude, codex, gemini or an API-key agent printed into a
//! [`LimitReading`]: an account **usage limit** (with the reset instant when one can be read),
//! **transient** throttling (a short retry: per-minute limits, `529 Overloaded`, "not your usage
//! limit", `Retrying in 21s`), or **none**. Structured sources are read first (claude's
//! `rate_limit_event`, claude's `result` with `api_error_status: 429`, codex's `error` /
//! `turn.failed` events, codex's raw 429 body with `resets_at`), then every known text form.
//! [`sleep_for`] turns a reading into a clamped sleep, [`explain`] / [`explain_text`] describe it
//! for `nightshift limit parse`.
//!
//! It is not the sleeper (see `schedule::sleep_until`), not the process runner, and it never
//! looks at an agent's ordinary prose: model text inside `assistant` events is ignored, and
//! [`read_stream_line`] accepts a stdout line only when the line *is* the message.
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

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use chrono_tz::Tz;
use regex::Regex;
use serde_json::{Value, json};

use crate::schedule::resolve_local;

/// How far in the past a read reset may lie and still be believed (SPEC §7: a bare time that
/// passed at most 15 minutes ago means "now").
pub const PAST_GRACE: chrono::TimeDelta = chrono::TimeDelta::minutes(15);

/// How far ahead a read reset may lie and still be believed: a weekly limit resets within
/// 7 days; one day of slack for zones and rounding.
pub const FUTURE_HORIZON: chrono::TimeDelta = chrono::TimeDelta::days(8);

/// What kind of limit a piece of agent output reports (SPEC §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// The account's usage limit: sleep until the reset, then retry the same round.
    UsageLimit,
    /// Server-side or per-minute throttling: retry after a short wait, not a sleep until reset.
    Transient,
    /// Not a limit at all (including look-alikes such as network or context-length errors).
    None,
}

impl LimitKind {
    /// The name used in `limit parse --json` (SPEC §2): `usage_limit`, `transient` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::UsageLimit => "usage_limit",
            LimitKind::Transient => "transient",
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
    /// usage limit with a reset > usage limit without > transient > none.
    fn rank(&self) -> u8 {
        match (self.kind, self.resets_at) {
            (LimitKind::UsageLimit, Some(_)) => 3,
            (LimitKind::UsageLimit, None) => 2,
            (LimitKind::Transient, _) => 1,
            (LimitKind::None, _) => 0,
        }
    }
}

/// Keeps the stronger reading; on a tie the earlier one (output order), unless only the later
/// one states its wait (an error body's first line names the 429, a later one the wait).
fn stronger(best: LimitReading, next: LimitReading) -> LimitReading {
    let more_exact =
        next.rank() == best.rank() && best.retry_after.is_none() && next.retry_after.is_some();
    if next.rank() > best.rank() || more_exact {
        next
    } else {
        best
    }
}

// ---------------------------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------------------------

/// Reads a piece of agent output from the error/result channel (stderr, a `result` text, an
/// error event's message, or text pasted into `nightshift limit parse`).
///
/// Every line is read; a line holding a JSON object is read as a claude or codex event
/// (structured fields first), other lines by the text patterns, which may match anywhere in
/// the line. The strongest reading wins (usage limit with reset > without > transient > none).
/// `now` is the current instant; `tz` is the zone the agent ran in (its `TZ`), used for local
/// times that name no zone. SPEC §7.
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
        if best.rank() == 3 {
            break;
        }
    }
    best
}

/// Reads one line of an agent's ordinary output (stdout of a `command` agent, a TUI log),
/// where the agent's own prose may mention limits.
///
/// The rule: after stripping what may precede a message on its own line (whitespace, TUI
/// glyphs and emoji `⎿ ■ ✕ ⚡ ● 🖐 ⚠️`, `[..]` tags, timestamps, `ERROR:` / `Error:` /
/// `API Error:` / `SomeError:` labels, codex's `stream disconnected before completion:`, an
/// HTTP status such as `429`), the rest of the line must *begin* with a known limit message
/// ("You've hit your limit", "Claude AI usage limit reached|…", "529 Overloaded", "Rate limit
/// reached for …", …). A sentence that merely mentions a limit somewhere inside is `none`.
/// One exception: after an exception-class label (`openai.RateLimitError:`,
/// `anthropic.api.ApiException:`) the rest is an error's text, and a limit anywhere in it
/// counts. Accepted lines are then read exactly as [`read_text`] reads them. SPEC §7.
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

/// Reads one claude stream-json / json event.
///
/// Returns `Some` only when the event reports a limit:
/// - `rate_limit_event` with `rate_limit_info.status == "rejected"`: a usage limit, reset from
///   `resetsAt` (epoch seconds), or `overageResetsAt` when that is earlier; `allowed` /
///   `allowed_warning` is not a limit, nor is `rejected` while extra usage carries the call
///   (`overageStatus` `allowed` / `allowed_warning`, or `isUsingOverage: true`);
/// - `result` with `is_error: true`: its `result` (or `error`) text is read; with
///   `api_error_status: 429` an unreadable text is still transient throttling;
/// - `assistant` with `error: "rate_limit"` (claude's synthetic limit message): its text is read,
///   transient if unreadable.
///
/// `subtype` is never used (claude says `subtype: "success"` on failures); model text in an
/// ordinary `assistant` event is never read. SPEC §6, §7.
pub fn read_claude_event(ev: &Value, now: DateTime<Utc>, tz: Tz) -> Option<LimitReading> {
    let ty = ev.get("type").and_then(Value::as_str);
    match ty {
        Some("rate_limit_event") => {
            let info = ev.get("rate_limit_info")?;
            let field = |k: &str| info.get(k).and_then(Value::as_str);
            if field("status") != Some("rejected") {
                return None;
            }
            // claude's own rule (`isUsingOverage`): the plan's limit is hit but extra usage
            // is allowed, so the call goes on, paid from extra usage. Not a limit.
            let using_overage = match field("overageStatus") {
                Some("allowed" | "allowed_warning") => true,
                Some(_) => false,
                None => info.get("isUsingOverage").and_then(Value::as_bool) == Some(true),
            };
            if using_overage {
                return None;
            }
            let which = field("rateLimitType").unwrap_or("unspecified");
            let mut reading = LimitReading {
                kind: LimitKind::UsageLimit,
                resets_at: None,
                retry_after: None,
                source: format!("claude rate_limit_event (status rejected, {which})"),
                message: compact(ev),
            };
            // With extra usage rejected too, whichever resets first frees the account (claude
            // prints that one); a reset outside the believable window is not taken.
            let resets: Vec<(&str, i64)> = ["resetsAt", "overageResetsAt"]
                .into_iter()
                .filter_map(|k| Some((k, info.get(k).and_then(epoch_of)?)))
                .collect();
            let believable =
                |t: &DateTime<Utc>| *t >= now - PAST_GRACE && *t <= now + FUTURE_HORIZON;
            let chosen = resets
                .iter()
                .filter(|(_, e)| epoch_instant(*e).is_some_and(|t| believable(&t)))
                .min_by_key(|(_, e)| *e)
                .or(resets.first());
            if let Some((name, epoch)) = chosen {
                let label = format!("{}: {name} {epoch}", reading.source);
                accept_reset(&mut reading, epoch_instant(*epoch), now, &label);
            }
            Some(reading)
        }
        Some("assistant") => {
            let error = ev
                .get("error")
                .or_else(|| ev.pointer("/message/error"))
                .and_then(Value::as_str)?;
            if error != "rate_limit" {
                return None;
            }
            let text = content_text(ev.pointer("/message/content"));
            let inner = scan_message(&text, now, tz, "claude assistant error rate_limit");
            Some(if inner.kind == LimitKind::None {
                LimitReading {
                    kind: LimitKind::Transient,
                    resets_at: None,
                    retry_after: None,
                    source: "claude assistant error rate_limit (text not a usage limit)".into(),
                    message: text.trim().to_string(),
                }
            } else {
                inner
            })
        }
        Some("result") | None => {
            if ev.get("is_error").and_then(Value::as_bool) != Some(true) {
                return None;
            }
            let text = ev
                .get("result")
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .or_else(|| ev.get("error").and_then(Value::as_str))
                .or_else(|| ev.pointer("/error/message").and_then(Value::as_str))
                .unwrap_or("");
            let status = ev.get("api_error_status").and_then(Value::as_u64);
            let origin = match status {
                Some(code) => format!("claude result (api_error_status {code})"),
                None => "claude result".to_string(),
            };
            let inner = scan_message(text, now, tz, &origin);
            if inner.kind != LimitKind::None {
                return Some(inner);
            }
            (status == Some(429)).then(|| LimitReading {
                kind: LimitKind::Transient,
                resets_at: None,
                retry_after: None,
                source: format!("{origin}: 429 without a usage-limit message"),
                message: text.trim().to_string(),
            })
        }
        _ => None,
    }
}

/// Reads one `codex exec --json` event.
///
/// Returns `Some` only for a limit reported by an `error` event (`message`), a `turn.failed`
/// event (`error.message`) or an `item.*` event whose item is of type `error`. codex's own
/// retry notices (`Reconnecting... 2/5 (…)`, `…; retrying 1/5 in 209ms…`) are not final and
/// return `None`; agent messages and reasoning are never read. SPEC §6, §7.
pub fn read_codex_event(ev: &Value, now: DateTime<Utc>, tz: Tz) -> Option<LimitReading> {
    let ty = ev.get("type").and_then(Value::as_str)?;
    let message = match ty {
        "error" => ev.get("message").and_then(Value::as_str)?,
        "turn.failed" => ev
            .pointer("/error/message")
            .and_then(Value::as_str)
            .or_else(|| ev.get("error").and_then(Value::as_str))?,
        t if t.starts_with("item.") => {
            if ev.pointer("/item/type").and_then(Value::as_str) != Some("error") {
                return None;
            }
            ev.pointer("/item/message").and_then(Value::as_str)?
        }
        _ => return None,
    };
    // codex's own retry notices ("Reconnecting... 2/5 (…)", "stream error: …; retrying 1/5
    // in 209ms…") are not final: the turn goes on, and its `turn.failed` decides.
    static RETRY_NOTICE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i);\s*retrying\s+\d+/\d+\s+in\b").unwrap());
    if message.trim_start().starts_with("Reconnecting") || RETRY_NOTICE.is_match(message) {
        return None;
    }
    let reading = scan_message(message, now, tz, &format!("codex {ty}"));
    (reading.kind != LimitKind::None).then_some(reading)
}

/// Reads a whole agent call: every stdout line that is a JSON event through
/// [`read_claude_event`] / [`read_codex_event`], other stdout lines through
/// [`read_stream_line`], and stderr through [`read_text`]. The strongest reading wins.
/// This is what the agent adapters call after a failed call. SPEC §6, §7.
pub fn read_output(stdout: &str, stderr: &str, now: DateTime<Utc>, tz: Tz) -> LimitReading {
    let mut best = LimitReading::none();
    for line in stdout.lines() {
        let reading = match json_object(line.trim()) {
            Some(value) => read_json(&value, now, tz).unwrap_or_else(LimitReading::none),
            None => read_stream_line(line, now, tz),
        };
        best = stronger(best, reading);
    }
    stronger(best, read_text(stderr, now, tz))
}

/// How long to sleep for a reading (SPEC §7, §11 `limit_buffer`, `limit_sleep_min`,
/// `limit_sleep_max`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SleepPolicy {
    /// Added to a known reset (default 120 s).
    pub buffer: Duration,
    /// Shortest usage-limit sleep (default 60 s).
    pub min: Duration,
    /// Longest usage-limit sleep (default 6 h).
    pub max: Duration,
    /// Usage-limit sleep when no reset could be read (default 1 h).
    pub unknown: Duration,
    /// Shortest transient retry wait (default 1 s).
    pub transient_min: Duration,
    /// Longest transient retry wait (default 5 min).
    pub transient_max: Duration,
    /// Transient wait when the message names none (default 30 s).
    pub transient_default: Duration,
}

impl Default for SleepPolicy {
    fn default() -> Self {
        SleepPolicy {
            buffer: Duration::from_secs(120),
            min: Duration::from_secs(60),
            max: Duration::from_secs(6 * 3600),
            unknown: Duration::from_secs(3600),
            transient_min: Duration::from_secs(1),
            transient_max: Duration::from_secs(300),
            transient_default: Duration::from_secs(30),
        }
    }
}

/// The sleep that follows a reading, measured from `now`.
///
/// Usage limit: `resets_at − now + buffer`, clamped to [`min`, `max`]; `unknown` (clamped the
/// same way) when the reset is unknown. Transient: `retry_after` (or `transient_default`)
/// clamped to [`transient_min`, `transient_max`]. None: zero. SPEC §7.
///
/// [`min`]: SleepPolicy::min
/// [`max`]: SleepPolicy::max
/// [`unknown`]: SleepPolicy::unknown
/// [`transient_min`]: SleepPolicy::transient_min
/// [`transient_max`]: SleepPolicy::transient_max
/// [`transient_default`]: SleepPolicy::transient_default
pub fn sleep_for(reading: &LimitReading, now: DateTime<Utc>, policy: &SleepPolicy) -> Duration {
    match reading.kind {
        LimitKind::None => Duration::ZERO,
        LimitKind::Transient => {
            let wait = reading.retry_after.unwrap_or(policy.transient_default);
            clamp(wait, policy.transient_min, policy.transient_max)
        }
        LimitKind::UsageLimit => match reading.resets_at {
            None => clamp(policy.unknown, policy.min, policy.max),
            Some(reset) => {
                let until_reset_ms = (reset - now).num_milliseconds();
                let buffer_ms = i64::try_from(policy.buffer.as_millis()).unwrap_or(i64::MAX);
                let total_ms = until_reset_ms.saturating_add(buffer_ms).max(0);
                clamp(
                    Duration::from_millis(total_ms as u64),
                    policy.min,
                    policy.max,
                )
            }
        },
    }
}

/// Clamps to [lo, hi]; a policy with lo > hi yields hi (the cap wins).
fn clamp(d: Duration, lo: Duration, hi: Duration) -> Duration {
    d.max(lo).min(hi)
}

/// The `limit parse --json` shape (SPEC §2):
/// `{"kind": "usage_limit"|"transient"|"none", "resets_at": RFC3339-UTC|null,
///   "sleep_seconds": N|null, "source": S}` plus `retry_after_ms`, `resets_at_local`
/// (RFC 3339 with the offset of `tz`), `zone` and `message`.
pub fn explain(reading: &LimitReading, now: DateTime<Utc>, tz: Tz, policy: &SleepPolicy) -> Value {
    let sleep = (reading.kind != LimitKind::None).then(|| sleep_for(reading, now, policy));
    json!({
        "kind": reading.kind.as_str(),
        "resets_at": reading.resets_at.map(rfc3339_utc),
        "resets_at_local": reading.resets_at.map(|t| t.with_timezone(&tz).to_rfc3339()),
        "zone": tz.name(),
        "sleep_seconds": sleep.map(|d| d.as_secs_f64().ceil() as u64),
        "retry_after_ms": reading.retry_after.map(|d| d.as_millis() as u64),
        "source": reading.source,
        "message": reading.message,
    })
}

/// The human form of [`explain`]: kind, reset in UTC and in `tz`, and the sleep, one per line.
/// Example:
/// ```text
/// usage limit (account)
/// reset: 2026-03-05T13:00:00Z = 2026-03-05 21:00 CST (Asia/Taipei)
/// sleep: 19h 12m → clamped to 6h 0m, until 2026-03-04T23:50:00Z
/// source: text: resets 9pm
/// ```
pub fn explain_text(
    reading: &LimitReading,
    now: DateTime<Utc>,
    tz: Tz,
    policy: &SleepPolicy,
) -> String {
    let mut out = String::new();
    match reading.kind {
        LimitKind::None => {
            out.push_str("not a usage limit: nothing to wait for\n");
            return out;
        }
        LimitKind::UsageLimit => out.push_str("usage limit (account)\n"),
        LimitKind::Transient => out.push_str("transient throttling (short retry)\n"),
    }
    match reading.resets_at {
        Some(reset) => {
            let local = reset.with_timezone(&tz);
            out.push_str(&format!(
                "reset: {} = {} ({})\n",
                rfc3339_utc(reset),
                local.format("%Y-%m-%d %H:%M %Z"),
                tz.name()
            ));
        }
        None if reading.kind == LimitKind::UsageLimit => out.push_str("reset: unknown\n"),
        None => {}
    }
    if let Some(retry) = reading.retry_after {
        out.push_str(&format!("retry after: {} ms\n", retry.as_millis()));
    }
    let sleep = sleep_for(reading, now, policy);
    let wake = now + chrono::TimeDelta::from_std(sleep).unwrap_or_default();
    out.push_str(&format!(
        "sleep: {} until {} ({})\n",
        human_duration(sleep),
        rfc3339_utc(wake),
        wake.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z")
    ));
    // Say why the wake-up is not the reset plus the buffer.
    if reading.kind == LimitKind::UsageLimit {
        match reading.resets_at {
            Some(reset) if wake < reset => out.push_str(&format!(
                "note: the sleep is capped at limit_sleep_max ({}); nightshift then retries and sleeps again if the limit holds\n",
                human_duration(policy.max)
            )),
            Some(reset) if reset + chrono::TimeDelta::from_std(policy.buffer).unwrap_or_default() < wake => out.push_str(&format!(
                "note: the sleep is raised to limit_sleep_min ({})\n",
                human_duration(policy.min)
            )),
            None => out.push_str(&format!("note: no reset time could be read: nightshift sleeps {} and tries again\n", human_duration(policy.unknown))),
            _ => {}
        }
    }
    out.push_str(&format!("source: {}\n", reading.source));
    out
}

fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m {sec}s"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

fn rfc3339_utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

// ---------------------------------------------------------------------------------------------
// Structured sources
// ---------------------------------------------------------------------------------------------

/// Parses a line as a JSON object, if it is one.
fn json_object(line: &str) -> Option<Value> {
    let t = line.trim();
    if !(t.starts_with('{') && t.ends_with('}')) {
        return None;
    }
    serde_json::from_str::<Value>(t)
        .ok()
        .filter(Value::is_object)
}

/// Dispatches a JSON object to the claude or codex reader; an object of neither shape (a raw
/// API error body) is read as text.
fn read_json(v: &Value, now: DateTime<Utc>, tz: Tz) -> Option<LimitReading> {
    let ty = v.get("type").and_then(Value::as_str);
    match ty {
        Some("rate_limit_event" | "result" | "assistant" | "system" | "user") => {
            read_claude_event(v, now, tz)
        }
        Some("error") if v.get("message").is_some_and(Value::is_string) => {
            read_codex_event(v, now, tz)
        }
        Some(t)
            if t == "turn.failed"
                || t.starts_with("item.")
                || t.starts_with("thread.")
                || t.starts_with("turn.") =>
        {
            read_codex_event(v, now, tz)
        }
        None if v.get("is_error").is_some() => read_claude_event(v, now, tz),
        _ => {
            let reading = scan_message(&compact(v), now, tz, "json");
            (reading.kind != LimitKind::None).then_some(reading)
        }
    }
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Concatenated `text` of a claude message content array (or a plain string).
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn epoch_of(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_f64().map(|f| f as i64))
        .or_else(|| v.as_str()?.trim().parse().ok())
}

/// Epoch seconds (or milliseconds, when the number is too large for seconds) as an instant.
fn epoch_instant(epoch: i64) -> Option<DateTime<Utc>> {
    let secs = if epoch > 100_000_000_000 {
        epoch / 1000
    } else {
        epoch
    };
    DateTime::from_timestamp(secs, 0)
}

/// Reads a message (several lines allowed) with the text patterns, labelling the source.
fn scan_message(text: &str, now: DateTime<Utc>, tz: Tz, origin: &str) -> LimitReading {
    let text = normalize(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut best = LimitReading::none();
    for (i, line) in lines.iter().enumerate() {
        best = stronger(best, scan_line(line, &around(&lines, i), now, tz, origin));
    }
    best
}

/// What surrounds one line of a text: the lines that may continue its message, the rest of its
/// error body, and the line it continues when a terminal wrapped it.
#[derive(Default)]
struct Around<'a> {
    /// See [`continuation`].
    cont: String,
    /// See [`block`].
    block: String,
    /// See [`wrapped_from`]; empty when the line starts a message.
    prev: &'a str,
}

/// What surrounds line `i` of `lines`.
fn around<'a>(lines: &[&'a str], i: usize) -> Around<'a> {
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
    lines
        .iter()
        .skip(i + 1)
        .take(CONTINUATION_LINES)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many following lines may belong to one error body (to a blank line): a pretty-printed
/// Gemini error puts its quota ids and `retryDelay` 15–30 lines below its message.
const BLOCK_LINES: usize = 40;

/// The lines after line `i` up to [`BLOCK_LINES`] or a blank line, trimmed and joined with
/// spaces: where the structured parts of an error body are looked for.
fn block(lines: &[&str], i: usize) -> String {
    lines
        .iter()
        .skip(i + 1)
        .take(BLOCK_LINES)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A stated wait longer than this is an account limit, not throttling: it is longer than the
/// longest transient retry (`SleepPolicy::default().transient_max`, 5 min), so retrying sooner
/// is sure to fail. Gemini says `Your quota will reset after 12h22m45s`, Groq's per-day cap
/// `Please try again in 15m44s`.
pub const LONG_WAIT: Duration = Duration::from_secs(5 * 60);

// ---------------------------------------------------------------------------------------------
// Text patterns
// ---------------------------------------------------------------------------------------------

/// Curly quotes to straight, non-breaking spaces to spaces, ANSI escapes removed.
fn normalize(text: &str) -> String {
    static ANSI: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]").unwrap());
    let text = ANSI.replace_all(text, "");
    text.chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' | '\u{02bc}' => '\'',
            '\u{00a0}' | '\u{202f}' => ' ',
            '\u{2212}' => '-',
            c => c,
        })
        .collect()
}

struct Trigger {
    name: &'static str,
    re: Regex,
}

fn trigger(name: &'static str, pattern: &str) -> Trigger {
    Trigger {
        name,
        re: Regex::new(&format!("(?i){pattern}")).expect("trigger pattern"),
    }
}

/// An error-type identifier as it appears in a JSON or Python error body (`"usage_limit_reached"`,
/// `'insufficient_quota'`, `\"RESOURCE_EXHAUSTED\"`): quoted, so that a test or function named
/// `usage_limit_reached_resets` in a log is not read as the error.
fn quoted(ident: &str) -> String {
    format!(r#"['"]{ident}['"\\]"#)
}

/// Usage-trigger names whose kind depends on what else the message says (Google and OpenAI
/// quota bodies): a per-minute window, or a short stated retry without a per-day quota, makes
/// them transient.
const SOFT_QUOTA: [&str; 3] = ["quota metric", "quota exceeded", "exceeded current quota"];

/// Phrases that state an account usage limit. Order matters only for the source label.
static USAGE_TRIGGERS: LazyLock<Vec<Trigger>> = LazyLock::new(|| {
    vec![
        trigger(
            "claude usage limit |epoch",
            r"claude ai usage limit reached\|",
        ),
        trigger("claude usage limit", r"claude (?:ai )?usage limit reached"),
        // "5-hour limit reached", "Session limit reached", "Opus weekly limit reached".
        trigger(
            "claude limit reached",
            r"\b(?:(?:5-hour|five-hour|weekly|session|daily|opus|sonnet)\s+){1,2}limit reached",
        ),
        // claude: "You've hit your {limit|session limit|weekly limit|Opus limit|Sonnet limit|
        // usage limit}"; codex: "You've hit your usage limit[ for <model>]".
        trigger(
            "you've hit your limit",
            r"you(?:'ve| have) hit your\b[^.·∙\n]{0,40}?\blimit\b",
        ),
        // The Codex app: "You have reached the usage limit. Upgrade or add credits …".
        trigger(
            "you've reached the usage limit",
            r"\byou(?:'ve| have) reached (?:the|your)\b[^.·∙\n]{0,30}?\busage limits?\b",
        ),
        // A limit with a window, whatever it is called: Copilot's "You've reached your weekly
        // rate limit", "Sorry, you've exceeded your 5 hour session limits".
        trigger(
            "limit with a window",
            r"\byou(?:'ve| have) (?:hit|reached|exceeded) your\b[^.·∙\n]{0,30}?\b(?:weekly|daily|monthly|session|hourly|\d+[- ]?hours?)\b[^.·∙\n]{0,20}?\blimits?\b",
        ),
        // claude with extra usage on: "You're out of extra usage · resets 9pm".
        trigger(
            "out of extra usage",
            r"\byou(?:'re| are) out of extra usage\b",
        ),
        // codex, a workspace owner's credits: "Your workspace is out of credits."
        trigger(
            "workspace out of credits",
            r"\byour workspace is out of credits\b",
        ),
        trigger(
            "usage limit reached",
            r"\busage limit (?:has been )?(?:reached|exceeded)",
        ),
        trigger(
            "codex 429 usage_limit_reached",
            &quoted("usage_limit_reached"),
        ),
        trigger(
            "daily quota",
            r"you have reached your daily\b[^\n]{0,60}?\bquota limit",
        ),
        // Gemini / Antigravity: "Individual quota reached. Resets in 157h".
        trigger(
            "quota reached",
            r"\b(?:individual |daily |weekly |monthly )?quota (?:limit )?(?:is |has been )?reached\b",
        ),
        trigger("quota metric", r"quota exceeded for quota metric"),
        // codex's `CodexErr::QuotaExceeded` text; a bare "quota exceeded" is too common
        // (EDQUOT "Disk quota exceeded").
        trigger(
            "quota exceeded",
            &format!(
                r"\bquota exceeded\.\s+check your plan|{}",
                quoted("quota_?exceeded")
            ),
        ),
        trigger(
            "exceeded current quota",
            &format!(
                r"you exceeded your current quota|{}",
                quoted("insufficient_quota")
            ),
        ),
        trigger(
            "usage not included",
            &format!(
                r"to use codex with your chatgpt plan, upgrade|{}",
                quoted("usage_?not_?included")
            ),
        ),
        trigger(
            "gemini plan limits",
            r"to increase your limits, upgrade to a plan with higher limits",
        ),
        // A dumped 429 response of the subscription API (claude's own reading of it).
        trigger(
            "anthropic unified status rejected",
            r"\banthropic-ratelimit-unified-status\W{1,4}rejected\b",
        ),
    ]
});

/// Phrases that state throttling that clears in seconds or minutes. The first entry negates a
/// usage limit ("not your usage limit") and must stay first.
static TRANSIENT_TRIGGERS: LazyLock<Vec<Trigger>> = LazyLock::new(|| {
    vec![
        trigger(
            "not your usage limit",
            r"not your usage limit|server is temporarily limiting requests",
        ),
        // "529 Overloaded", "Repeated 529 Overloaded errors", "(529 {…overloaded_error…})", the
        // API's `overloaded_error`; not a compiler's "call of overloaded".
        trigger(
            "overloaded",
            &format!(
                r#"\b(?:repeated\s+)?529\b[^\n]{{0,20}}?\boverloaded\b|^\(?529\s*(?:\{{|\)|:)|{}|"message":\s*"overloaded\b|\b(?:api|server|model|service)\s+(?:is\s+)?(?:currently\s+)?overloaded\b|^overloaded\b"#,
                quoted("overloaded_error")
            ),
        ),
        trigger(
            "http 429",
            r#"^\(?429\s*(?:\{|\)|:|too many|rate limit)|(?:\bstatus(?: code)?[:\s]+|\berror(?: code)?:?\s+|\bapi error:?\s*\(|\bhttp\s+|\b(?:request\s+)?rejected\s+\(|\breturned\s+|"code":\s*)429\b|\b429 too many requests\b"#,
        ),
        trigger(
            "rate_limit_error",
            &format!(
                r"{}|\bratelimiterror\s*:|{}",
                quoted("rate_limit_error"),
                quoted("rate_limit_exceeded")
            ),
        ),
        trigger(
            "rate limit reached for",
            r"\brate limit (?:is |has been |was )?(?:reached|exceeded) for\b",
        ),
        // "Rate limit exceeded. Please try again in 20s.", codex on Azure: "Rate limit is
        // exceeded. Try again in 11 seconds."
        // "Rate limit exceeded. Please try again later", "Provider rate limit reached. Please
        // retry shortly."
        trigger(
            "rate limit exceeded",
            r"^\W*rate limit (?:is |has been )?exceeded\b|\brate limit (?:is |has been |was )?(?:reached|exceeded)(?:\s*[.!;]\s*(?:please\s+)?|\W+please\s+)(?:try again|retry)\b",
        ),
        // GitHub Copilot: "Sorry, your request was rate-limited. Please wait 17 seconds …",
        // "Sorry, you've hit a rate limit that restricts …", "You've hit your global rate limit.";
        // a long stated wait makes them a usage limit (see `scan_line`).
        trigger(
            "copilot rate limited",
            r"\bsorry, (?:your request was (?:rate|speed)[- ]limited|you(?:'ve| have) (?:been rate[- ]limited|hit a rate limit))|\byou(?:'ve| have) hit your (?:\w+ )?rate limit\b",
        ),
        // aider: "The API provider has rate limited you."; claude: "… (429) · Rate limited."
        trigger(
            "rate limited",
            r"\b(?:the\s+)?(?:api\s+)?(?:provider|server|service)\s+has\s+rate[- ]limited\s+you\b|^\W*rate[- ]limited\b",
        ),
        trigger(
            "per-minute limit",
            r"\b(?:tokens|requests|input tokens|output tokens) per min(?:ute)?\b",
        ),
        trigger(
            "gemini capacity",
            r"you have exhausted your capacity on this model",
        ),
        trigger(
            "quota reset after",
            r"\byour quota will reset (?:after|in)\b",
        ),
        // Google's status alone (Vertex: "Resource has been exhausted (e.g. check quota)"):
        // shared capacity, retried shortly; a per-day quota makes it a usage limit.
        trigger(
            "resource exhausted",
            &format!(r"{}|\bresource_exhausted:", quoted("resource_exhausted")),
        ),
        // Codex after its provider's 5xx retries: "We’re currently experiencing
        // high demand, which may cause temporary errors."
        trigger(
            "high demand",
            r"\bexperiencing (?:high|heavy|unusually high) demand\b",
        ),
        // No trigger for a bare "Retrying in 5s": network errors print it too, and they are
        // failures, not limits; the wait is read only once another trigger matched.
    ]
});

/// Flags a per-minute quota (so `RESOURCE_EXHAUSTED` / `Quota exceeded` is transient).
static PER_MINUTE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bper[- ]?min(?:ute)?\b|perminute|\(tpm\)|\(rpm\)|limit_[rt]pm\b").unwrap()
});

/// Flags a per-day quota (Gemini's `…PerDay…` quota ids, Groq's "tokens per day (TPD)",
/// OpenRouter's `free-models-per-day`).
static PER_DAY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bper[- ]?day\b|perday|\(tpd\)|\(rpd\)|limit_[rt]pd\b").unwrap()
});

/// A Google quota id or limit that is per day (`"quotaId": "GenerateRequestsPerDayPerProject…"`,
/// `"quota_limit": "Gemini25ProRequestsPerDay"`). Gemini CLI's own rule (`classifyGoogleError`):
/// such a violation is terminal whatever else the body says (a per-minute violation beside it,
/// a `retryDelay` of seconds): it lasts until the day's reset.
static GOOGLE_DAILY_QUOTA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bquota_?(?:id|limit)\W{1,12}[\w-]*(?:per_?day|daily)").unwrap()
});

/// Names a window ("weekly", "5 hour", "session"): a rate limit with a window is the account's
/// limit, not throttling.
static WINDOW_WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:weekly|daily|monthly|session|hourly|\d+[- ]?hours?|five[- ]hours?)\b")
        .unwrap()
});

const DURATION: &str = r"(?:\d+(?:\.\d+)?\s*(?:milliseconds?|ms|days?|d|hours?|hrs?|hr|h|minutes?|mins?|min|m|seconds?|secs?|sec|s)\b[\s,]*(?:and\s+)?)+";

/// "try again in 2h 4m", "Your quota will reset after 12h22m45s", "resets in about 2 hours",
/// "Please wait 17 seconds before trying again" (Copilot), "Retrying in 4 seconds" (the `kw`
/// group tells the agent's own retry from a stated wait).
static RETRY_DURATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b(?:(?P<kw>try again|retrying|retry|resets?|wait)\s+(?:in|after)|wait(?:\s+for)?)\s+(?:about\s+|approximately\s+|roughly\s+|~\s*)?(?P<d>{DURATION})"
    ))
    .unwrap()
});

/// A wait stated as a field: Google's `"retryDelay": "34.07s"`, a `Retry-After: 20` header.
static RETRY_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\bretry_?delay\\?"?\s*:\s*\\?"(?P<delay>\d+(?:\.\d+)?)s\b|\bretry[-_]after\\?"?\s*[:=]\s*\\?"?(?P<after>\d+(?:\.\d+)?)\b"#,
    )
    .unwrap()
});

static DURATION_PART: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(\d+(?:\.\d+)?)\s*(milliseconds?|ms|days?|d|hours?|hrs?|hr|h|minutes?|mins?|min|m|seconds?|secs?|sec|s)\b").unwrap()
});

/// Splits compact durations so their parts have word boundaries: `12h22m45s` → `12h 22m 45s`,
/// `2m12.19s` → `2m 12.19s` (Gemini and Groq print them so).
fn spaced_durations(text: &str) -> String {
    static JOINED: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)(\d(?:ms|h|m|s|d))(\d)").unwrap());
    let once = JOINED.replace_all(text, "$1 $2");
    JOINED.replace_all(&once, "$1 $2").into_owned()
}

/// A wait a message states, with its text and whether it is the agent's own retry loop
/// ("Retrying in 4 seconds…": claude keeps retrying by itself; not the account's reset).
struct StatedWait {
    duration: Duration,
    text: String,
    own_retry: bool,
}

/// The first wait `text` states ("try again in …", "reset after …", "Retrying in …",
/// `retryDelay`, `Retry-After`); `stated_only` skips the agent's own retry loop.
fn stated_wait(text: &str, stated_only: bool) -> Option<StatedWait> {
    let spaced = spaced_durations(text);
    let from_words = RETRY_DURATION.captures_iter(&spaced).find_map(|c| {
        let own_retry = c
            .name("kw")
            .is_some_and(|k| k.as_str().eq_ignore_ascii_case("retrying"));
        if stated_only && own_retry {
            return None;
        }
        let d = c["d"].trim().trim_end_matches(',').trim();
        let whole = c.get(0)?.as_str().trim().trim_end_matches(',').trim();
        Some(StatedWait {
            duration: parse_duration(d)?,
            text: whole.to_string(),
            own_retry,
        })
    });
    from_words.or_else(|| field_wait(text))
}

/// A wait stated as a field (`"retryDelay": "34.07s"`, `Retry-After: 20`).
fn field_wait(text: &str) -> Option<StatedWait> {
    let c = RETRY_FIELD.captures(text)?;
    let (secs, text) = match (c.name("delay"), c.name("after")) {
        (Some(d), _) => (d.as_str(), format!("retryDelay {}s", d.as_str())),
        (None, Some(a)) => (a.as_str(), format!("retry-after {}", a.as_str())),
        (None, None) => return None,
    };
    let secs: f64 = secs.parse().ok()?;
    (secs.is_finite() && secs < 1e9).then(|| StatedWait {
        duration: Duration::from_secs_f64(secs),
        text,
        own_retry: false,
    })
}

static PIPE_EPOCH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)claude ai usage limit reached\|(\S*)").unwrap());

/// A reset instant given as a field: epoch seconds (or milliseconds) or an RFC 3339 string
/// (codex's 429 body `resets_at`, claude's `resetsAt`, Gemini's `quotaResetTimeStamp`, the
/// `anthropic-ratelimit-unified-reset` header, OpenRouter's `X-RateLimit-Reset` in epoch
/// milliseconds). A small `X-RateLimit-Reset` (seconds until the reset, as some APIs send it) has
/// fewer than nine digits and is not taken.
static FIELD_RESET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\\?"?(?P<name>resets_at|resetsAt|reset_at|resetAt|quotaResetTimeStamp|anthropic-ratelimit-unified-reset|x-ratelimit-reset)\\?"?\s*[:=]\s*\\?"?(?:(?P<epoch>\d{9,13})\b|(?P<iso>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})))"#,
    )
    .unwrap()
});

static JSON_RESETS_IN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)\\?"?resets_in_seconds\\?"?\s*[:=]\s*(\d+)"#).unwrap());

/// `resets 7pm`, `reset at 1pm (Etc/GMT+5)`, `resets Jan 30, 11:30am (Asia/Calcutta)`,
/// `resets Apr 23 at 4pm`, `resets Oct 24` (a date alone), `try again at Mar 10th, 2026
/// 3:39 AM`, `try again after September 6, 2026, 11:15`, `Access resets at 10:57 PM GMT-3`,
/// `resets Friday 2:00 PM`, `resets tomorrow at 9am`, `resets at midnight (PT)`, ISO forms.
/// At least a date, a weekday or a time must follow; which one is decided in
/// [`reset_from_captures`].
static RESET_AT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)
        \b(?:resets?|try\ again|available|regain\ access)\s+(?:at\s+|on\s+|after\s+)?
        (?:
          (?P<iso>\d{4}-\d{2}-\d{2}(?:[T\ ]|\s+at\s+)\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)
          (?:\s*(?P<isoutc>\b(?:utc|gmt)\b))?
        |
          (?:(?P<rel>today|tomorrow)\b,?\s*(?:at\s+)?)?
          (?:(?P<wd>mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+(?:at\s+)?)?
          (?:
            (?:
              (?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?\b
            | (?P<day2>\d{1,2})(?:st|nd|rd|th)?\s+(?P<mon2>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b\.?
            )
            (?:,?\s*(?P<year>\d{4})\b)?
            ,?\s*(?:at\s+)?
          )?
          (?:
            (?P<h>\d{1,2})(?::(?P<mi>\d{2}))?\s*(?P<ampm>[ap]\.?\s?m\b\.?)?
          | (?P<named>noon|midnight)\b
          )?
          (?:
             \s*\((?P<zone>[^()\n]{1,40})\)
          |  \s*(?P<off>\b(?:utc|gmt)\s?[+-]\s?\d{1,2}(?::?\d{2})?\b)
          |  \s+(?P<abbr>(?-i:[A-Z]{2,5}))\b
          |  \s*(?P<utc>\b(?:utc|gmt)\b)
          )?
        )",
    )
    .unwrap()
});

/// What may precede a message on its own line (see [`read_stream_line`]): whitespace, TUI
/// glyphs and emoji (`⎿ ■ ✕ ⚡ 🖐 ⚠️`), `[..]` tags, timestamps, `ERROR:` / `Error:` /
/// `API Error:` / `SomeError:` labels, codex's `stream disconnected before completion:`.
static MESSAGE_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?ix)^(?:
            \s+
          | [^\p{L}\p{N}\s(\[{"'`]+
          | \[api\ error\b\s*:?
          | \[[^\]]{0,40}\]
          | \d{4}[-/]\d{2}[-/]\d{2}(?:[T\ ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?Z?)?
          | \d{2}:\d{2}:\d{2}
          | (?P<exc>(?-i:[\w.]*[a-z0-9](?:Error|Exception)))\s*:
          | (?:api\ |stream\ )?error\b\s*:?
          | [\w.]*(?:error|exception)\s*:
          | warn(?:ing)?\s*:
          | stream\ disconnected\ before\ completion\s*:
        )*"#,
    )
    .unwrap()
});

/// An HTTP status that may open an error's text (`429 You exceeded your current quota`).
static STATUS_PREFIX: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[45]\d\d\b[\s:\-]*").unwrap());

/// The line without what may precede its message, and whether that included an
/// exception-class label (`openai.RateLimitError:`, `anthropic.api.ApiException:`), after which
/// the rest is an error's text.
fn strip_message_prefix(line: &str) -> (&str, bool) {
    match MESSAGE_PREFIX.captures(line) {
        Some(c) => {
            let end = c.get(0).map_or(0, |m| m.end());
            (line[end..].trim_start(), c.name("exc").is_some())
        }
        None => (line.trim_start(), false),
    }
}

/// True when `text` begins with a known limit message.
fn begins_with_message(text: &str) -> bool {
    USAGE_TRIGGERS
        .iter()
        .chain(TRANSIENT_TRIGGERS.iter())
        .any(|t| t.re.find(text).is_some_and(|m| m.start() == 0))
}

/// True when `text` holds a known limit message anywhere.
fn holds_message(text: &str) -> bool {
    USAGE_TRIGGERS
        .iter()
        .chain(TRANSIENT_TRIGGERS.iter())
        .any(|t| t.re.is_match(text))
}

/// Reads one line by the text patterns; `around` gives the lines that continue it (for a reset
/// or a wait), the rest of its error body (for quota ids and fields) and the line it was wrapped
/// from (for a reset written before the error type).
fn scan_line(
    line: &str,
    around: &Around<'_>,
    now: DateTime<Utc>,
    tz: Tz,
    origin: &str,
) -> LimitReading {
    let (cont, block) = (around.cont.as_str(), around.block.as_str());
    let message = line.trim();
    if message.is_empty() {
        return LimitReading::none();
    }
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
    let negated = TRANSIENT_TRIGGERS[0].re.is_match(message);
    let usage = if negated {
        None
    } else {
        USAGE_TRIGGERS
            .iter()
            .filter_map(|t| t.re.find(message).map(|m| (m, t)))
            .filter(|(m, _)| !resource_word_before(message, m.start()))
            .filter(|(m, _)| !plain_rate_limit(m.as_str()))
            .map(|(m, t)| (m.start(), t))
            .min_by_key(|(start, _)| *start)
    };
    let per_minute = PER_MINUTE.is_match(&body);
    let per_day = PER_DAY.is_match(&body);
    let google_daily = GOOGLE_DAILY_QUOTA.is_match(&body);
    if let Some((start, trig)) = usage {
        let soft = SOFT_QUOTA.contains(&trig.name);
        let short_retry = stated_wait(&whole, true).is_some_and(|w| w.duration <= LONG_WAIT);
        // A per-day quota outlasts a per-minute one listed beside it and any short retry.
        let daily = per_day || google_daily;
        if !(soft && !daily && (per_minute || short_retry)) {
            return read_usage(message, start, trig, around, daily, now, tz, origin);
        }
    }
    let transient = TRANSIENT_TRIGGERS
        .iter()
        .filter_map(|t| t.re.find(message).map(|m| (m.start(), t)))
        .min_by_key(|(start, _)| *start);
    if transient.is_none() && usage.is_none() {
        return LimitReading::none();
    }
    let name = match (transient, usage) {
        (Some((_, t)), _) => t.name,
        (None, _) if per_minute => "per-minute quota",
        (None, _) => "quota with a short retry",
    };
    let wait = stated_wait(&whole, false).or_else(|| field_wait(&body));
    let usage_reading = |source: String| LimitReading {
        kind: LimitKind::UsageLimit,
        resets_at: None,
        retry_after: None,
        source,
        message: message.to_string(),
    };
    // A long stated wait is the account's reset, whatever the wording.
    if let Some(w) = wait
        .as_ref()
        .filter(|w| !w.own_retry && w.duration > LONG_WAIT)
    {
        let mut reading = usage_reading(format!("{origin}: {name} (reset unknown)"));
        let reset = chrono::TimeDelta::from_std(w.duration)
            .ok()
            .map(|d| now + d);
        let label = format!("{origin}: {name}, {} (longer than a short retry)", w.text);
        accept_reset(&mut reading, reset, now, &label);
        return reading;
    }
    let capacity = matches!(name, "overloaded" | "high demand" | "not your usage limit");
    if google_daily && !capacity {
        return usage_reading(format!(
            "{origin}: {name}, per-day quota id (reset unknown)"
        ));
    }
    // The agent's own retry loop ("Retrying in 26 seconds…") says nothing of the account.
    let stated = wait.as_ref().filter(|w| !w.own_retry);
    // A reset instant the service states (`X-RateLimit-Reset`, "resets at 10:00 UTC") is a wait
    // too: a far one is the account's reset, a near one a short retry.
    if stated.is_none()
        && !capacity
        && let Some((reset, text)) = stated_reset(&whole, &body, now, tz)
    {
        let until = reset - now;
        if until > chrono::TimeDelta::from_std(LONG_WAIT).unwrap_or_default() {
            let mut reading = usage_reading(format!("{origin}: {name} (reset unknown)"));
            let label = format!("{origin}: {name}, {text} (longer than a short retry)");
            accept_reset(&mut reading, Some(reset), now, &label);
            return reading;
        }
        return LimitReading {
            kind: LimitKind::Transient,
            resets_at: None,
            retry_after: Some(until.to_std().unwrap_or(Duration::ZERO)),
            source: format!("{origin}: {name}, {text}"),
            message: message.to_string(),
        };
    }
    // A per-day quota with no wait stated lasts until the day's reset.
    if per_day && !per_minute && stated.is_none() && !capacity {
        return usage_reading(format!("{origin}: {name}, per-day quota (reset unknown)"));
    }
    let source = match &wait {
        Some(w) => format!("{origin}: {name}, {}", w.text),
        None => format!("{origin}: {name}"),
    };
    LimitReading {
        kind: LimitKind::Transient,
        resets_at: None,
        retry_after: wait.map(|w| w.duration),
        source,
        message: message.to_string(),
    }
}

/// A reset instant a throttling message states: a field (`"X-RateLimit-Reset":"1779321600000"`,
/// `resets_at`) anywhere in its `body`, else a time in its words ("Resets at 10:00 UTC").
fn stated_reset(
    words: &str,
    body: &str,
    now: DateTime<Utc>,
    tz: Tz,
) -> Option<(DateTime<Utc>, String)> {
    if let Some((instant, text)) = field_reset(body) {
        return Some((instant?, text));
    }
    RESET_AT
        .captures_iter(words)
        .find_map(|c| reset_from_captures(&c, now, tz))
}

/// The first reset field in `text`: its instant (`None` when it is not a valid time) and
/// `name=value`.
fn field_reset(text: &str) -> Option<(Option<DateTime<Utc>>, String)> {
    let c = FIELD_RESET.captures(text)?;
    let instant = match (c.name("epoch"), c.name("iso")) {
        (Some(e), _) => e.as_str().parse::<i64>().ok().and_then(epoch_instant),
        (None, Some(iso)) => DateTime::parse_from_rfc3339(iso.as_str())
            .ok()
            .map(|t| t.with_timezone(&Utc)),
        (None, None) => None,
    };
    let value = c.name("epoch").or(c.name("iso")).map_or("", |m| m.as_str());
    Some((instant, format!("{}={value}", &c["name"])))
}

/// True for a plain rate limit ("You've hit your global rate limit"): throttling, unless it
/// names a window ("your weekly rate limit", "your 5 hour session limits").
fn plain_rate_limit(matched: &str) -> bool {
    let lower = matched.to_ascii_lowercase();
    (lower.contains("rate limit") || lower.contains("rate-limit")) && !WINDOW_WORD.is_match(matched)
}

/// True when the word before `start` names a machine resource ("Memory usage limit exceeded",
/// "disk quota exceeded"): those are not an agent account's usage limit.
fn resource_word_before(message: &str, start: usize) -> bool {
    const RESOURCES: [&str; 12] = [
        "memory",
        "cpu",
        "disk",
        "storage",
        "bandwidth",
        "gpu",
        "ram",
        "heap",
        "file",
        "inode",
        "process",
        "swap",
    ];
    message[..start]
        .split(|c: char| !c.is_alphanumeric())
        .rfind(|w| !w.is_empty())
        .is_some_and(|w| RESOURCES.contains(&w.to_ascii_lowercase().as_str()))
}

/// Builds a usage-limit reading and looks for its reset after the trigger (in the line and the
/// lines that continue it).
#[allow(clippy::too_many_arguments)]
fn read_usage(
    message: &str,
    start: usize,
    trig: &Trigger,
    around: &Around<'_>,
    daily: bool,
    now: DateTime<Utc>,
    tz: Tz,
    origin: &str,
) -> LimitReading {
    let mut reading = LimitReading {
        kind: LimitKind::UsageLimit,
        resets_at: None,
        retry_after: None,
        source: format!("{origin}: {} (reset unknown)", trig.name),
        message: message.to_string(),
    };
    let cont = around.cont.trim();
    let window = format!("{} {cont}", &message[start..]);
    // Fields may come before the trigger (a JSON body with sorted keys), even on the line a
    // terminal wrapped it from.
    let body = format!("{} {message} {cont}", around.prev);

    // Claude's legacy `|epoch`: the token after the pipe is the whole answer (`|invalid` → no time).
    if trig.name == "claude usage limit |epoch" {
        if let Some(token) = PIPE_EPOCH.captures(&window).and_then(|c| c.get(1)) {
            let token = token
                .as_str()
                .trim_end_matches(|c: char| !c.is_ascii_digit());
            if let Ok(epoch) = token.parse::<i64>() {
                let label = format!("{}: claude usage limit |{epoch}", origin);
                accept_reset(&mut reading, epoch_instant(epoch), now, &label);
            }
        }
        return reading;
    }
    if let Some((instant, text)) = field_reset(&body) {
        let label = format!("{origin}: {} {text}", trig.name);
        accept_reset(&mut reading, instant, now, &label);
        return reading;
    }
    if let Some(c) = JSON_RESETS_IN.captures(&body)
        && let Ok(secs) = c[1].parse::<i64>()
    {
        let label = format!("{origin}: {} resets_in_seconds={secs}", trig.name);
        accept_reset(
            &mut reading,
            Some(now + chrono::TimeDelta::seconds(secs)),
            now,
            &label,
        );
        return reading;
    }
    // "try again in 2 days 17 hours"; not a client's own "Retrying in 0.2 seconds…" backoff, nor
    // the seconds Google states beside a per-day quota (it lasts until the day's reset).
    if let Some(w) = stated_wait(&window, true).filter(|w| !(daily && w.duration <= LONG_WAIT)) {
        let label = format!("{origin}: {}, {}", trig.name, w.text);
        let reset = chrono::TimeDelta::from_std(w.duration)
            .ok()
            .map(|d| now + d);
        accept_reset(&mut reading, reset, now, &label);
        return reading;
    }
    // The reset is read after the trigger first; an error body may put it before (OpenGateway's
    // "Resets at 10:00 UTC. …","type":"insufficient_quota").
    for text in [&window, &body] {
        for c in RESET_AT.captures_iter(text) {
            if let Some((instant, label)) = reset_from_captures(&c, now, tz) {
                let label = format!("{origin}: {}, {label}", trig.name);
                accept_reset(&mut reading, Some(instant), now, &label);
                return reading;
            }
        }
    }
    reading
}

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

/// Parses `2 days 17 hours 14 minutes`, `21s`, `2892 seconds`, `9.816s`, `174ms`, `2h 4m`,
/// `12h22m45s`, `2m12.19s`.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = spaced_durations(text);
    let mut total = 0f64;
    let mut any = false;
    for c in DURATION_PART.captures_iter(&text) {
        let n: f64 = c[1].parse().ok()?;
        let unit = c[2].to_ascii_lowercase();
        let secs = match unit.as_str() {
            "ms" | "millisecond" | "milliseconds" => n / 1000.0,
            u if u.starts_with('d') => n * 86_400.0,
            u if u.starts_with('h') => n * 3600.0,
            u if u.starts_with("mi") || u == "m" => n * 60.0,
            _ => n,
        };
        total += secs;
        any = true;
    }
    (any && total.is_finite() && total < 1e9).then(|| Duration::from_secs_f64(total))
}

/// A time zone read from a message: a tzdb name or a fixed offset.
#[derive(Debug, Clone, Copy)]
enum Zone {
    Named(Tz),
    Fixed(FixedOffset),
}

impl Zone {
    fn local_now(self, now: DateTime<Utc>) -> NaiveDateTime {
        match self {
            Zone::Named(tz) => now.with_timezone(&tz).naive_local(),
            Zone::Fixed(off) => now.with_timezone(&off).naive_local(),
        }
    }

    fn to_utc(self, local: NaiveDateTime) -> DateTime<Utc> {
        match self {
            Zone::Named(tz) => resolve_local(&tz, local),
            Zone::Fixed(off) => resolve_local(&off, local),
        }
    }
}

/// `GMT-3`, `UTC+5:30`, `UTC +0800`, `+08:00` → a fixed offset (the sign as written: GMT-3 is
/// UTC−3, as Intl and Gemini print it; only the tzdb names `Etc/GMT±N` are inverted).
fn parse_offset(text: &str) -> Option<FixedOffset> {
    static OFFSET: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)^(?:utc|gmt)?\s?([+-])\s?(\d{1,2})(?::?(\d{2}))?$").unwrap()
    });
    let c = OFFSET.captures(text.trim())?;
    let sign = if &c[1] == "-" { -1 } else { 1 };
    let h: i32 = c[2].parse().ok()?;
    let m: i32 = c.get(3).map_or(Some(0), |m| m.as_str().parse().ok())?;
    if h > 14 || m > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

/// Time-zone abbreviations as claude, Gemini (Intl `timeZoneName: "short"`) and people print
/// them. Judgment calls: `CST` is US Central (Intl en-US prints China as `GMT+8`), `IST` India
/// (the common case in these messages; Irish and Israel time are read only when the agent's
/// zone itself says `IST`), `BST` British Summer Time, `AST` Atlantic. The generic `PT`/`ET`/
/// `CT`/`MT` name a zone that follows DST; the rest are fixed offsets. An abbreviation the
/// agent's own zone uses is read in that zone first (so `CST` in Asia/Taipei is +8).
fn abbreviation_zone(abbr: &str) -> Option<Zone> {
    let named = |name: &str| Tz::from_str(name).ok().map(Zone::Named);
    let fixed = |minutes: i32| FixedOffset::east_opt(minutes * 60).map(Zone::Fixed);
    match abbr.to_ascii_uppercase().as_str() {
        "UTC" | "GMT" | "UT" | "UCT" | "ZULU" | "WET" => fixed(0),
        "PT" => named("America/Los_Angeles"),
        "MT" => named("America/Denver"),
        "CT" => named("America/Chicago"),
        "ET" => named("America/New_York"),
        "PST" => fixed(-8 * 60),
        "PDT" | "MST" => fixed(-7 * 60),
        "MDT" | "CST" => fixed(-6 * 60),
        "CDT" | "EST" => fixed(-5 * 60),
        "EDT" | "AST" => fixed(-4 * 60),
        "ADT" | "BRT" | "ART" => fixed(-3 * 60),
        "NST" => fixed(-(3 * 60 + 30)),
        "NDT" => fixed(-(2 * 60 + 30)),
        "AKST" => fixed(-9 * 60),
        "AKDT" => fixed(-8 * 60),
        "HST" => fixed(-10 * 60),
        "BST" | "CET" | "WEST" | "WAT" => fixed(60),
        "CEST" | "EET" | "SAST" | "CAT" => fixed(2 * 60),
        "EEST" | "MSK" | "EAT" => fixed(3 * 60),
        "PKT" => fixed(5 * 60),
        "IST" => fixed(5 * 60 + 30),
        "ICT" | "WIB" => fixed(7 * 60),
        "HKT" | "SGT" | "AWST" | "PHT" => fixed(8 * 60),
        "JST" | "KST" => fixed(9 * 60),
        "ACST" => fixed(9 * 60 + 30),
        "AEST" => fixed(10 * 60),
        "ACDT" => fixed(10 * 60 + 30),
        "AEDT" => fixed(11 * 60),
        "NZST" => fixed(12 * 60),
        "NZDT" => fixed(13 * 60),
        _ => None,
    }
}

/// True when the agent's zone `tz` calls itself `abbr` now or half a year away (its other
/// DST side).
fn tz_uses_abbreviation(tz: Tz, abbr: &str, now: DateTime<Utc>) -> bool {
    use chrono_tz::OffsetName;
    [now, now + chrono::TimeDelta::days(182)].iter().any(|t| {
        t.with_timezone(&tz)
            .offset()
            .abbreviation()
            .is_some_and(|a| a.eq_ignore_ascii_case(abbr))
    })
}

/// Reads a zone as a message writes it: a tzdb name (`Asia/Taipei`, `Etc/GMT+5`), `UTC`, an
/// offset (`GMT+8`, `UTC+05:30`) or an abbreviation (`PST`, `CEST`). `None` when it is none
/// of these.
fn zone_from_text(text: &str, tz: Tz, now: DateTime<Utc>) -> Option<Zone> {
    let t = text.trim();
    // A short all-letter word is an abbreviation first: chrono-tz also knows a few of them as
    // zones ("CET" follows Brussels' DST), which would contradict what the message wrote.
    if (2..=5).contains(&t.len()) && t.chars().all(|c| c.is_ascii_alphabetic()) {
        if tz_uses_abbreviation(tz, t, now) {
            return Some(Zone::Named(tz));
        }
        if let Some(zone) = abbreviation_zone(t) {
            return Some(zone);
        }
    }
    if let Ok(named) = Tz::from_str(t) {
        return Some(Zone::Named(named));
    }
    parse_offset(t).map(Zone::Fixed)
}

fn month_number(name: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let key = name.get(..3)?.to_ascii_lowercase();
    MONTHS.iter().position(|m| *m == key).map(|i| i as u32 + 1)
}

fn weekday_of(name: &str) -> Option<chrono::Weekday> {
    use chrono::Weekday::*;
    match name.get(..3)?.to_ascii_lowercase().as_str() {
        "mon" => Some(Mon),
        "tue" => Some(Tue),
        "wed" => Some(Wed),
        "thu" => Some(Thu),
        "fri" => Some(Fri),
        "sat" => Some(Sat),
        "sun" => Some(Sun),
        _ => None,
    }
}

/// Turns one `RESET_AT` match into an instant and a label; `None` when the match is not a
/// time (nothing after the lead word, a bare number without am/pm or minutes, an hour out of
/// range, a bad date).
///
/// A date without a time is the start of that day (the earliest the reset can be); a weekday
/// is its next occurrence; `tomorrow` is the next calendar day in the zone.
fn reset_from_captures(
    c: &regex::Captures<'_>,
    now: DateTime<Utc>,
    tz: Tz,
) -> Option<(DateTime<Utc>, String)> {
    let whole = c.get(0)?.as_str().trim();
    if let Some(iso) = c.name("iso") {
        // "2025-06-01 at 00:00" (Anthropic's workspace limit) is read as "2025-06-01 00:00".
        static AT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)\s+at\s+").unwrap());
        let s = AT.replace(iso.as_str(), " ");
        let s = s.as_ref();
        let zone = if c.name("isoutc").is_some() {
            Tz::UTC
        } else {
            tz
        };
        let instant = DateTime::parse_from_rfc3339(&s.replace(' ', "T"))
            .map(|t| t.with_timezone(&Utc))
            .ok()
            .or_else(|| {
                let naive = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
                    .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S"))
                    .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M"))
                    .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M"))
                    .ok()?;
                Some(resolve_local(&zone, naive))
            })?;
        return Some((instant, whole.to_string()));
    }
    let month = c.name("mon").or(c.name("mon2"));
    let day = c.name("day").or(c.name("day2"));
    let weekday = c.name("wd").and_then(|w| weekday_of(w.as_str()));
    let relative = c.name("rel").map(|r| r.as_str().to_ascii_lowercase());
    let time = match (c.name("h"), c.name("named")) {
        (Some(h), _) => {
            let hour: u32 = h.as_str().parse().ok()?;
            let minute: u32 = match c.name("mi") {
                Some(m) => m.as_str().parse().ok()?,
                None => 0,
            };
            let hour = match c.name("ampm") {
                Some(ap) => {
                    if !(1..=12).contains(&hour) {
                        return None;
                    }
                    let pm = ap.as_str().to_ascii_lowercase().starts_with('p');
                    match (hour, pm) {
                        (12, false) => 0,
                        (12, true) => 12,
                        (h, true) => h + 12,
                        (h, false) => h,
                    }
                }
                // Without am/pm only `HH:MM` (24-hour) is a time; a bare number is not.
                None if c.name("mi").is_some() => hour,
                None => return None,
            };
            Some(NaiveTime::from_hms_opt(hour, minute, 0)?)
        }
        (None, Some(n)) if n.as_str().eq_ignore_ascii_case("noon") => {
            NaiveTime::from_hms_opt(12, 0, 0)
        }
        (None, Some(_)) => NaiveTime::from_hms_opt(0, 0, 0),
        (None, None) => None,
    };
    // A date or a weekday may stand alone; "tomorrow" (prose) only with a time.
    if time.is_none() && month.is_none() && weekday.is_none() {
        return None;
    }
    let (zone, zone_note) = if let Some(name) = c.name("zone") {
        match zone_from_text(name.as_str(), tz, now) {
            Some(z) => (z, String::new()),
            None => (
                Zone::Named(tz),
                format!(" (unknown zone, read in {})", tz.name()),
            ),
        }
    } else if let Some(off) = c.name("off") {
        (Zone::Fixed(parse_offset(off.as_str())?), String::new())
    } else if let Some(abbr) = c
        .name("abbr")
        .and_then(|a| zone_from_text(a.as_str(), tz, now))
    {
        (abbr, String::new())
    } else if c.name("utc").is_some() {
        (Zone::Named(Tz::UTC), String::new())
    } else {
        (Zone::Named(tz), format!(" (read in {})", tz.name()))
    };
    let local_now = zone.local_now(now);
    let at_time = time.unwrap_or(NaiveTime::MIN);
    let instant = if let (Some(mon), Some(day)) = (month, day) {
        let month = month_number(mon.as_str())?;
        let day: u32 = day.as_str().parse().ok()?;
        match c.name("year") {
            Some(y) => {
                let year: i32 = y.as_str().parse().ok()?;
                zone.to_utc(NaiveDate::from_ymd_opt(year, month, day)?.and_time(at_time))
            }
            None => nearest_year(&zone, local_now.year(), month, day, at_time, now)?,
        }
    } else if let Some(rel) = relative {
        let date = if rel == "tomorrow" {
            local_now.date().succ_opt()?
        } else {
            local_now.date()
        };
        zone.to_utc(date.and_time(at_time))
    } else if let Some(weekday) = weekday {
        next_weekday(&zone, local_now, weekday, at_time, now)
    } else {
        next_occurrence(&zone, local_now, time?, now)
    };
    Some((instant, format!("{whole}{zone_note}")))
}

/// The date `month/day` at `time` in the year (of last, this or next) nearest to `now`.
fn nearest_year(
    zone: &Zone,
    year: i32,
    month: u32,
    day: u32,
    time: NaiveTime,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    (year - 1..=year + 1)
        .filter_map(|y| NaiveDate::from_ymd_opt(y, month, day))
        .map(|d| zone.to_utc(d.and_time(time)))
        .min_by_key(|t| (*t - now).num_seconds().abs())
}

/// The next occurrence of a time of day, unless today's passed at most 15 minutes ago (then:
/// `now`). Steps calendar days, so DST days are handled by the zone mapping.
fn next_occurrence(
    zone: &Zone,
    local_now: NaiveDateTime,
    time: NaiveTime,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let today = local_now.date();
    let candidate = zone.to_utc(today.and_time(time));
    if candidate >= now {
        return candidate;
    }
    if candidate >= now - PAST_GRACE {
        return now;
    }
    let mut day = today;
    for _ in 0..3 {
        day = day.succ_opt().unwrap_or(day);
        let t = zone.to_utc(day.and_time(time));
        if t > now {
            return t;
        }
    }
    candidate
}

/// The next `weekday` at `time` (today's counts while it is ahead, or passed at most 15
/// minutes ago: then `now`).
fn next_weekday(
    zone: &Zone,
    local_now: NaiveDateTime,
    weekday: chrono::Weekday,
    time: NaiveTime,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let mut day = local_now.date();
    for _ in 0..8 {
        if day.weekday() == weekday {
            let t = zone.to_utc(day.and_time(time));
            if t >= now {
                return t;
            }
            if t >= now - PAST_GRACE {
                return now;
            }
        }
        day = day.succ_opt().unwrap_or(day);
    }
    // Unreachable: some day in eight is the weekday and in the future.
    now
}

#[cfg(test)]
mod high_demand_tests {
    use super::*;

    #[test]
    fn codex_high_demand_is_a_short_retry() {
        let now = Utc::now();
        let r = read_text(
            "We’re currently experiencing high demand, which may cause temporary errors.",
            now,
            chrono_tz::UTC,
        );
        assert_eq!(r.kind, LimitKind::Transient, "{r:?}");
        assert_eq!(
            read_text(
                "The product is in high demand this season.",
                now,
                chrono_tz::UTC
            )
            .kind,
            LimitKind::None
        );
        let r = read_text(
            "Rate limit exceeded. Please try again in 20s.",
            now,
            chrono_tz::UTC,
        );
        assert_eq!(r.kind, LimitKind::Transient, "{r:?}");
        assert_eq!(r.retry_after, Some(std::time::Duration::from_secs(20)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn durations_parse_every_unit() {
        assert_eq!(
            parse_duration("2 days 17 hours 14 minutes"),
            Some(Duration::from_secs(2 * 86400 + 17 * 3600 + 14 * 60))
        );
        assert_eq!(parse_duration("174ms"), Some(Duration::from_millis(174)));
        assert_eq!(parse_duration("9.816s"), Some(Duration::from_millis(9816)));
        assert_eq!(
            parse_duration("2h 4m"),
            Some(Duration::from_secs(2 * 3600 + 4 * 60))
        );
        assert_eq!(
            parse_duration("2892 seconds"),
            Some(Duration::from_secs(2892))
        );
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn a_plain_rate_limit_is_throttling_one_with_a_window_is_not() {
        assert!(plain_rate_limit("You've hit your global rate limit"));
        assert!(plain_rate_limit("You've hit your rate-limit"));
        assert!(!plain_rate_limit("You've reached your weekly rate limit"));
        assert!(!plain_rate_limit(
            "you've exceeded your 5 hour session limits"
        ));
        assert!(!plain_rate_limit("You've hit your limit"));
    }

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

    #[test]
    fn copilot_waits_are_read_without_in() {
        let w = stated_wait(
            "Please wait 587 hours 33 minutes before trying again.",
            true,
        )
        .unwrap();
        assert_eq!(w.duration, Duration::from_secs(587 * 3600 + 33 * 60));
        assert!(!w.own_retry);
        let w = stated_wait("Retrying in 26 seconds… (attempt 5/10)", false).unwrap();
        assert!(w.own_retry);
        assert!(stated_wait("Please wait and try sending again later.", false).is_none());
    }

    #[test]
    fn offsets_keep_the_written_sign() {
        assert_eq!(parse_offset("GMT-3"), FixedOffset::east_opt(-3 * 3600));
        assert_eq!(
            parse_offset("UTC+5:30"),
            FixedOffset::east_opt(5 * 3600 + 1800)
        );
        assert_eq!(parse_offset("UTC +0800"), FixedOffset::east_opt(8 * 3600));
    }

    #[test]
    fn a_time_passed_ten_minutes_ago_means_now() {
        let now = at("2026-03-04T13:10:00Z"); // 21:10 in Taipei
        let r = read_text(
            "5-hour limit reached ∙ resets 9pm",
            now,
            chrono_tz::Asia::Taipei,
        );
        assert_eq!(r.resets_at, Some(now));
    }

    #[test]
    fn ambiguous_local_time_takes_the_earlier_instant() {
        // 01:20 EDT on the fall-back day; 1:30am happens twice, the first is 05:30Z.
        let now = at("2026-11-01T05:20:00Z");
        let r = read_text(
            "You've hit your limit · resets 1:30am",
            now,
            chrono_tz::America::New_York,
        );
        assert_eq!(r.resets_at, Some(at("2026-11-01T05:30:00Z")));
    }

    #[test]
    fn time_in_a_dst_gap_is_the_end_of_the_gap() {
        // 2026-03-08 01:00 EST in New York; 2:30am does not exist, the gap ends at 03:00 EDT.
        let now = at("2026-03-08T06:00:00Z");
        let r = read_text(
            "You've hit your limit · resets 2:30am",
            now,
            chrono_tz::America::New_York,
        );
        assert_eq!(r.resets_at, Some(at("2026-03-08T07:00:00Z")));
    }
}
