//! Reading text line by line with the patterns of [`super::patterns`]: which trigger matched and
//! whether its kind holds (a per-minute window, a short wait, a machine resource, a context
//! window). A usage limit's reset is read by [`super::usage`], a throttling message by
//! [`super::throttle`]; what surrounds a line is [`super::scan`]'s.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::patterns::{
    CONTEXT_WINDOW, GOOGLE_QUOTA, NO_CREDIT_TRIGGERS, SOFT_QUOTA, TRANSIENT_TRIGGERS, Trigger,
    USAGE_TRIGGERS, WINDOW_WORD, normalize,
};
use super::reset::stated_reset;
use super::scan::{Around, Scan, Windows, around};
use super::throttle::read_throttling;
use super::usage::read_usage;
use super::wait::stated_wait;
use super::{LONG_WAIT, LimitReading, stronger};

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
    if let Some((start, trig)) = no_credit_trigger(&scan, windows) {
        // A stated reset or wait (OpenGateway's 402 "Free quota used … Resets at 10:00 UTC",
        // `insufficient_quota`) makes it a usage limit that lifts then.
        let words = format!("{} {}", scan.around.prev, scan.whole);
        let stated = stated_wait(&scan.whole, true).is_some()
            || stated_reset(&words, &scan.body, now, tz).is_some();
        if !stated {
            return scan.no_credit(format!("{origin}: {} (no credit)", trig.name));
        }
        if usage_trigger(message).is_none() {
            return read_usage(&scan, start, trig, windows.daily());
        }
    }
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

/// The first no-credit trigger in the line (its start and the trigger): the account's credit or
/// billing is exhausted. Not Google's quota errors, which share OpenAI's words (their quota ids,
/// status or windows mark them, anywhere in the error body).
fn no_credit_trigger(scan: &Scan<'_>, windows: Windows) -> Option<(usize, &'static Trigger)> {
    let (start, trig) = NO_CREDIT_TRIGGERS
        .iter()
        .filter_map(|t| t.re.find(scan.message).map(|m| (m.start(), t)))
        .min_by_key(|(start, _)| *start)?;
    let google = GOOGLE_QUOTA.is_match(&scan.body)
        || GOOGLE_QUOTA.is_match(scan.around.prev)
        || windows.per_minute
        || windows.per_day
        || windows.google_daily;
    (!(google && trig.name == "insufficient_quota")).then_some((start, trig))
}

/// False when a usage trigger is throttling after all: a soft quota (Google's, OpenAI's) that
/// names a per-minute window or a short retry, and no per-day quota.
fn usage_holds(scan: &Scan<'_>, trig: &Trigger, windows: Windows) -> bool {
    let soft = SOFT_QUOTA.contains(&trig.name);
    let short_retry = stated_wait(&scan.whole, true).is_some_and(|w| w.duration <= LONG_WAIT);
    !(soft && !windows.daily() && (windows.per_minute || short_retry))
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
    use crate::limit::{LimitKind, read_text};

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
    use crate::limit::LimitKind;

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
    fn a_plain_rate_limit_is_throttling_one_with_a_window_is_not() {
        assert!(plain_rate_limit("You've hit your global rate limit"));
        assert!(plain_rate_limit("You've hit your rate-limit"));
        assert!(!plain_rate_limit("You've reached your weekly rate limit"));
        assert!(!plain_rate_limit(
            "you've exceeded your 5 hour session limits"
        ));
        assert!(!plain_rate_limit("You've hit your limit"));
    }
}
