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
//! - A date without a year takes the year that puts it nearest to `now`.
//! - Local times in a DST gap resolve to the end of the gap, ambiguous ones to the earlier instant.
//! - A reset more than 15 minutes in the past or more than 8 days ahead is not believed
//!   (stale message, or a misreading): the reading stays a usage limit with an unknown reset,
//!   and `source` says what was ignored.
//! - `Etc/GMT+5` is the POSIX-inverted name of UTC−5; `GMT-3` written bare (gemini) is UTC−3.
//! - Look-alikes are `none`: context-length errors, network errors (`Connection refused`,
//!   `ENOTFOUND`, a bare `Retrying in 5s`), authentication failures, the warning "Approaching
//!   usage limit", machine resources ("Disk quota exceeded", "Memory usage limit exceeded"),
//!   numbers that merely read 429 or 529.
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

/// Keeps the stronger reading; on a tie the earlier one (output order).
fn stronger(best: LimitReading, next: LimitReading) -> LimitReading {
    if next.rank() > best.rank() {
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
            let next = lines.get(i + 1).copied().unwrap_or("");
            scan_line(line, next, now, tz, "text")
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
/// glyphs `⎿ ■ ✕ ⚡ ●`, `[..]` tags, timestamps, `ERROR:` / `Error:` / `API Error:` /
/// `SomeError:` labels), the rest of the line must *begin* with a known limit message
/// ("You've hit your limit", "Claude AI usage limit reached|…", "529 Overloaded", "Rate limit
/// reached for …", …). A sentence that merely mentions a limit somewhere inside is `none`.
/// Accepted lines are then read exactly as [`read_text`] reads them. SPEC §7.
pub fn read_stream_line(line: &str, now: DateTime<Utc>, tz: Tz) -> LimitReading {
    let normalized = normalize(line);
    let trimmed = normalized.trim();
    if let Some(value) = json_object(trimmed) {
        return read_json(&value, now, tz).unwrap_or_else(LimitReading::none);
    }
    let rest = strip_message_prefix(trimmed);
    let starts_with_message = USAGE_TRIGGERS
        .iter()
        .chain(TRANSIENT_TRIGGERS.iter())
        .any(|t| t.re.find(rest).is_some_and(|m| m.start() == 0));
    if !starts_with_message {
        return LimitReading::none();
    }
    scan_line(trimmed, "", now, tz, "line")
}

/// Reads one claude stream-json / json event.
///
/// Returns `Some` only when the event reports a limit:
/// - `rate_limit_event` with `rate_limit_info.status == "rejected"`: a usage limit, reset from
///   `resetsAt` (epoch seconds); `allowed` / `allowed_warning` is not a limit;
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
            if info.get("status").and_then(Value::as_str) != Some("rejected") {
                return None;
            }
            let which = info
                .get("rateLimitType")
                .and_then(Value::as_str)
                .unwrap_or("unspecified");
            let mut reading = LimitReading {
                kind: LimitKind::UsageLimit,
                resets_at: None,
                retry_after: None,
                source: format!("claude rate_limit_event (status rejected, {which})"),
                message: compact(ev),
            };
            if let Some(epoch) = info.get("resetsAt").and_then(epoch_of) {
                let label = format!("{}: resetsAt {epoch}", reading.source);
                accept_reset(&mut reading, epoch_instant(epoch), now, &label);
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
/// retry notices (`Reconnecting... 2/5 (…)`) are not final and return `None`; agent messages
/// and reasoning are never read. SPEC §6, §7.
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
    if message.trim_start().starts_with("Reconnecting") {
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
        let next = lines.get(i + 1).copied().unwrap_or("");
        best = stronger(best, scan_line(line, next, now, tz, origin));
    }
    best
}

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

/// Phrases that state an account usage limit. Order matters only for the source label.
static USAGE_TRIGGERS: LazyLock<Vec<Trigger>> = LazyLock::new(|| {
    vec![
        trigger(
            "claude usage limit |epoch",
            r"claude ai usage limit reached\|",
        ),
        trigger("claude usage limit", r"claude (?:ai )?usage limit reached"),
        trigger(
            "claude limit reached",
            r"(?:5-hour|five-hour|weekly|session|daily|opus|sonnet) limit reached",
        ),
        trigger(
            "you've hit your limit",
            r"you(?:'ve| have) hit your\b[^.·∙\n]{0,40}?\blimit\b",
        ),
        trigger(
            "usage limit reached",
            r"\busage limit (?:has been )?(?:reached|exceeded)",
        ),
        trigger("codex 429 usage_limit_reached", r"usage_limit_reached"),
        trigger(
            "daily quota",
            r"you have reached your daily\b[^\n]{0,60}?\bquota limit",
        ),
        trigger("quota metric", r"quota exceeded for quota metric"),
        // codex's `CodexErr::QuotaExceeded` text; a bare "quota exceeded" is too common
        // (EDQUOT "Disk quota exceeded").
        trigger(
            "quota exceeded",
            r"\bquota exceeded\.\s+check your plan|\bquota_?exceeded\b",
        ),
        trigger(
            "exceeded current quota",
            r"you exceeded your current quota|\bresource_exhausted\b|\binsufficient_quota\b",
        ),
        trigger(
            "usage not included",
            r"to use codex with your chatgpt plan, upgrade|\busage_?not_?included\b",
        ),
        trigger(
            "gemini plan limits",
            r"to increase your limits, upgrade to a plan with higher limits",
        ),
    ]
});

/// Phrases that state throttling that clears in seconds or minutes.
static TRANSIENT_TRIGGERS: LazyLock<Vec<Trigger>> = LazyLock::new(|| {
    vec![
        trigger(
            "not your usage limit",
            r"not your usage limit|server is temporarily limiting requests",
        ),
        // "529 Overloaded", the API's `overloaded_error`; not a compiler's "call of overloaded".
        trigger(
            "overloaded",
            r#"\b529\b[^\n]{0,20}?\boverloaded\b|\boverloaded_error\b|"message":\s*"overloaded"|\b(?:api|server|model|service)\s+(?:is\s+)?(?:currently\s+)?overloaded\b|^overloaded\b"#,
        ),
        trigger(
            "http 429",
            r#"^\(?429\s*(?:\{|\)|:|too many|rate limit)|(?:\bstatus(?: code)?[:\s]+|\berror:?\s+|\bapi error:?\s*\(|\bhttp\s+|\brejected \(|"code":\s*)429\b|\b429 too many requests\b"#,
        ),
        trigger(
            "rate_limit_error",
            r"\brate_limit_error\b|\bratelimiterror\b|\brate_limit_exceeded\b",
        ),
        trigger(
            "rate limit reached for",
            r"\brate limit (?:reached|exceeded) for\b",
        ),
        // "Rate limit exceeded. Please try again in 20s." (a per-minute API limit).
        trigger(
            "rate limit exceeded",
            r"^\W*rate limit exceeded\b|\brate limit exceeded\W+(?:please\s+)?(?:try again|retry) in\b",
        ),
        trigger(
            "per-minute limit",
            r"\b(?:tokens|requests|input tokens|output tokens) per min(?:ute)?\b",
        ),
        trigger(
            "gemini capacity",
            r"you have exhausted your capacity on this model",
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
static PER_MINUTE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\bper min(?:ute)?\b").unwrap());

const DURATION: &str = r"(?:\d+(?:\.\d+)?\s*(?:milliseconds?|ms|days?|d|hours?|hrs?|hr|h|minutes?|mins?|m|seconds?|secs?|sec|s)\b[\s,]*(?:and\s+)?)+";

static RETRY_DURATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b(?:try again|retry|retrying|resets?|wait)\s+(?:in|after)\s+({DURATION})"
    ))
    .unwrap()
});

static DURATION_PART: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(\d+(?:\.\d+)?)\s*(milliseconds?|ms|days?|d|hours?|hrs?|hr|h|minutes?|mins?|m|seconds?|secs?|sec|s)\b").unwrap()
});

static PIPE_EPOCH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)claude ai usage limit reached\|(\S*)").unwrap());

static JSON_EPOCH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\\?"?(resets_at|resetsAt|reset_at)\\?"?\s*[:=]\s*\\?"?(\d{9,13})"#).unwrap()
});

static JSON_RESETS_IN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)\\?"?resets_in_seconds\\?"?\s*[:=]\s*(\d+)"#).unwrap());

/// `resets 7pm`, `reset at 1pm (Etc/GMT+5)`, `resets Jan 30, 11:30am (Asia/Calcutta)`,
/// `try again at Mar 10th, 2026 3:39 AM`, `Access resets at 10:57 PM GMT-3`, ISO forms.
static RESET_AT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)
        \b(?:resets?|try\ again|available)\s+(?:at\s+|on\s+)?
        (?:
          (?P<iso>\d{4}-\d{2}-\d{2}[T\ ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)
        |
          (?:(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+
             (?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s*
             (?:(?P<year>\d{4}),?\s*)?
             (?:at\s+)?)?
          (?P<h>\d{1,2})(?::(?P<mi>\d{2}))?\s*(?P<ampm>[ap]\.?\s?m\b\.?)?
          (?:\s*
             (?:\((?P<zone>[A-Za-z][A-Za-z0-9_+\-/]*)\)
             |(?P<off>\b(?:utc|gmt)\s?[+-]\s?\d{1,2}(?::?\d{2})?\b)
             |(?P<utc>\b(?:utc|gmt)\b)
             )
          )?
        )",
    )
    .unwrap()
});

/// What may precede a message on its own line (see [`read_stream_line`]).
static MESSAGE_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)^(?:
            \s+
          | [⎿■✕✖⚡●•>*\-]+
          | \[[^\]]{0,40}\]
          | \d{4}[-/]\d{2}[-/]\d{2}(?:[T\ ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?Z?)?
          | \d{2}:\d{2}:\d{2}
          | (?:api\ |stream\ )?error\b\s*:?
          | [\w.]*(?:error|exception)\s*:
          | warn(?:ing)?\s*:
        )*",
    )
    .unwrap()
});

fn strip_message_prefix(line: &str) -> &str {
    let end = MESSAGE_PREFIX.find(line).map_or(0, |m| m.end());
    line[end..].trim_start()
}

/// Reads one line (with the next line as a continuation for a reset) by the text patterns.
fn scan_line(line: &str, next: &str, now: DateTime<Utc>, tz: Tz, origin: &str) -> LimitReading {
    let message = line.trim();
    if message.is_empty() {
        return LimitReading::none();
    }
    let negated = TRANSIENT_TRIGGERS[0].re.is_match(message);
    let usage = if negated {
        None
    } else {
        USAGE_TRIGGERS
            .iter()
            .filter_map(|t| t.re.find(message).map(|m| (m.start(), t)))
            .filter(|(start, _)| !resource_word_before(message, *start))
            .min_by_key(|(start, _)| *start)
    };
    if let Some((start, trig)) = usage {
        let per_minute = PER_MINUTE.is_match(message)
            && matches!(
                trig.name,
                "quota metric" | "quota exceeded" | "exceeded current quota"
            );
        if !per_minute {
            return read_usage(message, start, trig, next, now, tz, origin);
        }
    }
    let transient = TRANSIENT_TRIGGERS
        .iter()
        .filter_map(|t| t.re.find(message).map(|m| (m.start(), t)))
        .min_by_key(|(start, _)| *start);
    let per_minute_quota = PER_MINUTE.is_match(message) && usage.is_some();
    if transient.is_none() && !per_minute_quota {
        return LimitReading::none();
    }
    let name = transient.map_or("per-minute quota", |(_, t)| t.name);
    let retry = RETRY_DURATION.captures(message).and_then(|c| {
        let text = c.get(1)?.as_str().trim();
        Some((parse_duration(text)?, text.to_string()))
    });
    let source = match &retry {
        Some((_, text)) => format!("{origin}: {name}, retry in {text}"),
        None => format!("{origin}: {name}"),
    };
    LimitReading {
        kind: LimitKind::Transient,
        resets_at: None,
        retry_after: retry.map(|(d, _)| d),
        source,
        message: message.to_string(),
    }
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

/// Builds a usage-limit reading and looks for its reset after the trigger.
fn read_usage(
    message: &str,
    start: usize,
    trig: &Trigger,
    next: &str,
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
    let window = format!("{} {}", &message[start..], next.trim());

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
    if let Some(c) = JSON_EPOCH.captures(&window)
        && let Ok(epoch) = c[2].parse::<i64>()
    {
        let label = format!("{origin}: {} {}={epoch}", trig.name, &c[1]);
        accept_reset(&mut reading, epoch_instant(epoch), now, &label);
        return reading;
    }
    if let Some(c) = JSON_RESETS_IN.captures(&window)
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
    if let Some(c) = RETRY_DURATION.captures(&window) {
        let text = c[1].trim();
        if let Some(d) = parse_duration(text) {
            let label = format!("{origin}: {}, try again in {text}", trig.name);
            let reset = chrono::TimeDelta::from_std(d).ok().map(|d| now + d);
            accept_reset(&mut reading, reset, now, &label);
            return reading;
        }
    }
    for c in RESET_AT.captures_iter(&window) {
        if let Some((instant, label)) = reset_from_captures(&c, now, tz) {
            let label = format!("{origin}: {}, {label}", trig.name);
            accept_reset(&mut reading, Some(instant), now, &label);
            return reading;
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

/// Parses `2 days 17 hours 14 minutes`, `21s`, `2892 seconds`, `9.816s`, `174ms`, `2h 4m`.
fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut any = false;
    for c in DURATION_PART.captures_iter(text) {
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

/// `GMT-3`, `UTC+5:30`, `UTC +0800` → a fixed offset (the sign as written: GMT-3 is UTC−3).
fn parse_offset(text: &str) -> Option<FixedOffset> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let rest = &t[3..];
    let (sign, digits) = rest.split_at(1);
    let sign = if sign == "-" { -1 } else { 1 };
    let (h, m) = match digits.split_once(':') {
        Some((h, m)) => (h.parse::<i32>().ok()?, m.parse::<i32>().ok()?),
        None if digits.len() > 2 => (
            digits[..digits.len() - 2].parse().ok()?,
            digits[digits.len() - 2..].parse().ok()?,
        ),
        None => (digits.parse().ok()?, 0),
    };
    if h > 14 || m > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

fn month_number(name: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let key = name.get(..3)?.to_ascii_lowercase();
    MONTHS.iter().position(|m| *m == key).map(|i| i as u32 + 1)
}

/// Turns one `RESET_AT` match into an instant and a label; `None` when the match is not a
/// time (no am/pm and no minutes, hour out of range, bad date).
fn reset_from_captures(
    c: &regex::Captures<'_>,
    now: DateTime<Utc>,
    tz: Tz,
) -> Option<(DateTime<Utc>, String)> {
    let whole = c.get(0)?.as_str().trim();
    if let Some(iso) = c.name("iso") {
        let s = iso.as_str();
        let instant = DateTime::parse_from_rfc3339(&s.replace(' ', "T"))
            .map(|t| t.with_timezone(&Utc))
            .ok()
            .or_else(|| {
                let naive = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
                    .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S"))
                    .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M"))
                    .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M"))
                    .ok()?;
                Some(resolve_local(&tz, naive))
            })?;
        return Some((instant, whole.to_string()));
    }
    let hour: u32 = c.name("h")?.as_str().parse().ok()?;
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
    let time = NaiveTime::from_hms_opt(hour, minute, 0)?;
    let (zone, zone_note) = if let Some(name) = c.name("zone") {
        match Tz::from_str(name.as_str()) {
            Ok(named) => (Zone::Named(named), String::new()),
            Err(_) => (
                Zone::Named(tz),
                format!(" (unknown zone, read in {})", tz.name()),
            ),
        }
    } else if let Some(off) = c.name("off") {
        (Zone::Fixed(parse_offset(off.as_str())?), String::new())
    } else if c.name("utc").is_some() {
        (Zone::Named(Tz::UTC), String::new())
    } else {
        (Zone::Named(tz), format!(" (read in {})", tz.name()))
    };
    let local_now = zone.local_now(now);
    let instant = match (c.name("mon"), c.name("day")) {
        (Some(mon), Some(day)) => {
            let month = month_number(mon.as_str())?;
            let day: u32 = day.as_str().parse().ok()?;
            match c.name("year") {
                Some(y) => {
                    let year: i32 = y.as_str().parse().ok()?;
                    zone.to_utc(NaiveDate::from_ymd_opt(year, month, day)?.and_time(time))
                }
                None => nearest_year(&zone, local_now.year(), month, day, time, now)?,
            }
        }
        _ => next_occurrence(&zone, local_now, time, now),
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

#[cfg(test)]
mod high_demand_tests {
    use super::*;

    #[test]
    fn codex_high_demand_is_a_short_retry() {
        let now = Utc::now();
        let r = read_text("We’re currently experiencing high demand, which may cause temporary errors.", now, chrono_tz::UTC);
        assert_eq!(r.kind, LimitKind::Transient, "{r:?}");
        assert_eq!(read_text("The product is in high demand this season.", now, chrono_tz::UTC).kind, LimitKind::None);
        let r = read_text("Rate limit exceeded. Please try again in 20s.", now, chrono_tz::UTC);
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
