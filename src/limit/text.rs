//! Reading text line by line with the patterns of [`super::patterns`]: which trigger matched,
//! whether its kind holds (a per-minute window, a short wait), and what surrounds the line (the
//! lines that continue a wrapped message, the rest of an error body). A usage limit's reset is
//! read by [`super::usage`].

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use regex::Regex;

use super::patterns::{
    CONTEXT_WINDOW, GOOGLE_DAILY_QUOTA, PER_DAY, PER_MINUTE, SOFT_QUOTA, TRANSIENT_TRIGGERS,
    Trigger, USAGE_TRIGGERS, WINDOW_WORD, normalize,
};
use super::reset::stated_reset;
use super::usage::read_usage;
use super::wait::{field_wait, stated_wait};
use super::{LONG_WAIT, LimitKind, LimitReading, accept_reset, stronger};

/// Reads a message (several lines allowed) with the text patterns, labelling the source.
pub(super) fn scan_message(text: &str, now: DateTime<Utc>, tz: Tz, origin: &str) -> LimitReading {
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

/// What may precede a message on its own line (see [`super::read_stream_line`]): whitespace, TUI
/// glyphs and emoji (`⎿ ■ ✕ ⚡ 🖐 ⚠️`, and Gemini CLI's `ℹ`, which Unicode files as a letter),
/// `[..]` tags, the bracket Gemini CLI opens its error with (`✕ [You have exhausted your daily
/// quota on this model.]`), timestamps, `ERROR:` / `Error:` / `API Error:` / `SomeError:`
/// labels, codex's `stream disconnected before completion:`.
static MESSAGE_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?ix)^(?:
            \s+
          | [^\p{L}\p{N}\s(\[{"'`]+
          | \x{2139}\x{FE0F}?
          | \[api\ error\b\s*:?
          | \[[^\]]{0,40}\]
          | \[
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
pub(super) static STATUS_PREFIX: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[45]\d\d\b[\s:\-]*").unwrap());

/// The line without what may precede its message, and whether that included an
/// exception-class label (`openai.RateLimitError:`, `anthropic.api.ApiException:`), after which
/// the rest is an error's text.
pub(super) fn strip_message_prefix(line: &str) -> (&str, bool) {
    match MESSAGE_PREFIX.captures(line) {
        Some(c) => {
            let end = c.get(0).map_or(0, |m| m.end());
            (line[end..].trim_start(), c.name("exc").is_some())
        }
        None => (line.trim_start(), false),
    }
}

/// True when `text` begins with a known limit message.
pub(super) fn begins_with_message(text: &str) -> bool {
    USAGE_TRIGGERS
        .iter()
        .chain(TRANSIENT_TRIGGERS.iter())
        .any(|t| t.re.find(text).is_some_and(|m| m.start() == 0))
}

/// True when `text` holds a known limit message anywhere.
pub(super) fn holds_message(text: &str) -> bool {
    USAGE_TRIGGERS
        .iter()
        .chain(TRANSIENT_TRIGGERS.iter())
        .any(|t| t.re.is_match(text))
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
    fn new(
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

    /// A transient reading of this line, with the wait it states, if any.
    fn transient(&self, retry_after: Option<Duration>, source: String) -> LimitReading {
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
struct Windows {
    per_minute: bool,
    per_day: bool,
    /// A Google per-day quota id (see `GOOGLE_DAILY_QUOTA`).
    google_daily: bool,
}

impl Windows {
    fn of(body: &str) -> Windows {
        Windows {
            per_minute: PER_MINUTE.is_match(body),
            per_day: PER_DAY.is_match(body),
            google_daily: GOOGLE_DAILY_QUOTA.is_match(body),
        }
    }

    /// A per-day quota outlasts a per-minute one listed beside it and any short retry.
    fn daily(self) -> bool {
        self.per_day || self.google_daily
    }
}

/// Reads one line by the text patterns; `around` gives the lines that continue it (for a reset
/// or a wait), the rest of its error body (for quota ids and fields) and the line it was wrapped
/// from (for a reset written before the error type).
pub(super) fn scan_line(
    line: &str,
    around: &Around<'_>,
    now: DateTime<Utc>,
    tz: Tz,
    origin: &str,
) -> LimitReading {
    let message = line.trim();
    if message.is_empty() {
        return LimitReading::none();
    }
    let scan = Scan::new(message, around, now, tz, origin);
    let windows = Windows::of(&scan.body);
    let usage = usage_trigger(message);
    if let Some((start, trig)) = usage
        && usage_holds(&scan, trig, windows)
    {
        return read_usage(&scan, start, trig, windows.daily());
    }
    let transient = TRANSIENT_TRIGGERS
        .iter()
        .filter_map(|t| t.re.find(message).map(|m| (m.start(), t)))
        .min_by_key(|(start, _)| *start);
    let name = match (transient, usage) {
        (Some((_, t)), _) => t.name,
        (None, Some(_)) if windows.per_minute => "per-minute quota",
        (None, Some(_)) => "quota with a short retry",
        (None, None) => return not_a_limit(&scan),
    };
    read_throttling(&scan, name, windows)
}

/// A line with no limit trigger: `none`, and when it states a context-window limit, a `none`
/// that says so (its message kept, for `limit parse`): the round fails with that reason.
fn not_a_limit(scan: &Scan<'_>) -> LimitReading {
    if !CONTEXT_WINDOW.is_match(scan.message) {
        return LimitReading::none();
    }
    LimitReading {
        source: format!(
            "{}: context-window limit (not a usage limit: the round fails with this reason)",
            scan.origin
        ),
        message: scan.message.to_string(),
        ..LimitReading::none()
    }
}

/// The first usage trigger in `message` (its start and the trigger), skipping a machine
/// resource's limit, a plain rate limit and a context-window limit ("You've hit your context
/// limit"); none when the message says it is not a usage limit.
fn usage_trigger(message: &str) -> Option<(usize, &'static Trigger)> {
    if TRANSIENT_TRIGGERS[0].re.is_match(message) {
        return None;
    }
    USAGE_TRIGGERS
        .iter()
        .filter_map(|t| t.re.find(message).map(|m| (m, t)))
        .filter(|(m, _)| !resource_word_before(message, m.start()))
        .filter(|(m, _)| !plain_rate_limit(m.as_str()))
        .filter(|(m, _)| !CONTEXT_WINDOW.is_match(m.as_str()))
        .map(|(m, t)| (m.start(), t))
        .min_by_key(|(start, _)| *start)
}

/// False when a usage trigger is throttling after all: a soft quota (Google's, OpenAI's) that
/// names a per-minute window or a short retry, and no per-day quota.
fn usage_holds(scan: &Scan<'_>, trig: &Trigger, windows: Windows) -> bool {
    let soft = SOFT_QUOTA.contains(&trig.name);
    let short_retry = stated_wait(&scan.whole, true).is_some_and(|w| w.duration <= LONG_WAIT);
    !(soft && !windows.daily() && (windows.per_minute || short_retry))
}

/// Reads a throttling message (trigger `name`): a short retry, unless a long stated wait, a far
/// stated reset or a per-day quota makes it the account's usage limit.
fn read_throttling(scan: &Scan<'_>, name: &str, windows: Windows) -> LimitReading {
    let (origin, now) = (scan.origin, scan.now);
    let wait = stated_wait(&scan.whole, false).or_else(|| field_wait(&scan.body));
    // A long stated wait is the account's reset, whatever the wording.
    if let Some(w) = wait
        .as_ref()
        .filter(|w| !w.own_retry && w.duration > LONG_WAIT)
    {
        let mut reading = scan.usage(format!("{origin}: {name} (reset unknown)"));
        let reset = chrono::TimeDelta::from_std(w.duration)
            .ok()
            .map(|d| now + d);
        let label = format!("{origin}: {name}, {} (longer than a short retry)", w.text);
        accept_reset(&mut reading, reset, now, &label);
        return reading;
    }
    let capacity = matches!(name, "overloaded" | "high demand" | "not your usage limit");
    if windows.google_daily && !capacity {
        return scan.usage(format!(
            "{origin}: {name}, per-day quota id (reset unknown)"
        ));
    }
    // The agent's own retry loop ("Retrying in 26 seconds…") says nothing of the account.
    let stated = wait.as_ref().filter(|w| !w.own_retry);
    if stated.is_none()
        && !capacity
        && let Some(reading) = stated_reset_reading(scan, name)
    {
        return reading;
    }
    // A per-day quota with no wait stated lasts until the day's reset.
    if windows.per_day && !windows.per_minute && stated.is_none() && !capacity {
        return scan.usage(format!("{origin}: {name}, per-day quota (reset unknown)"));
    }
    let source = match &wait {
        Some(w) => format!("{origin}: {name}, {}", w.text),
        None => format!("{origin}: {name}"),
    };
    scan.transient(wait.map(|w| w.duration), source)
}

/// A reset instant a throttling message states (`X-RateLimit-Reset`, "resets at 10:00 UTC") is
/// a wait too: a far one is the account's reset, a near one a short retry.
fn stated_reset_reading(scan: &Scan<'_>, name: &str) -> Option<LimitReading> {
    let (origin, now) = (scan.origin, scan.now);
    let (reset, text) = stated_reset(&scan.whole, &scan.body, now, scan.tz)?;
    let until = reset - now;
    if until > chrono::TimeDelta::from_std(LONG_WAIT).unwrap_or_default() {
        let mut reading = scan.usage(format!("{origin}: {name} (reset unknown)"));
        let label = format!("{origin}: {name}, {text} (longer than a short retry)");
        accept_reset(&mut reading, Some(reset), now, &label);
        return Some(reading);
    }
    let wait = until.to_std().unwrap_or(Duration::ZERO);
    Some(scan.transient(Some(wait), format!("{origin}: {name}, {text}")))
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

#[cfg(test)]
mod high_demand_tests {
    use super::*;
    use crate::limit::read_text;

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

    #[test]
    fn a_trigger_that_names_the_context_window_is_not_a_usage_limit() {
        assert!(usage_trigger("You've hit your context limit · /compact or /clear").is_none());
        assert!(usage_trigger("You've hit your limit · resets 8pm (UTC)").is_some());
        let now = chrono::Utc::now();
        let r = scan_line(
            "Context limit reached",
            &Around::default(),
            now,
            Tz::UTC,
            "t",
        );
        assert_eq!(r.kind, LimitKind::None);
        assert!(r.source.contains("context-window limit"), "{r:?}");
        let plain = scan_line(
            "Compiling nightshift",
            &Around::default(),
            now,
            Tz::UTC,
            "t",
        );
        assert_eq!(plain, LimitReading::none());
    }

    #[test]
    fn gemini_cli_brackets_and_info_glyph_precede_a_message() {
        for (line, rest) in [
            (
                "✕ [You have exhausted your daily quota on this model.]",
                "You have exhausted your daily quota on this model.]",
            ),
            (
                "ℹ⚡ You have reached your daily gemini-2.5-pro quota limit.",
                "You have reached your daily gemini-2.5-pro quota limit.",
            ),
            (
                "[API Error: Resource has been exhausted (e.g. check quota).]",
                "Resource has been exhausted (e.g. check quota).]",
            ),
        ] {
            assert_eq!(strip_message_prefix(line).0, rest);
            assert!(begins_with_message(rest), "{rest}");
        }
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
}
