//! A usage-limit reading and its reset: claude's legacy `|epoch`, a reset field, codex's
//! `resets_in_seconds`, a stated wait, or a reset time in words, in that order.

use std::sync::LazyLock;

use regex::Regex;

use super::patterns::Trigger;
use super::reset::{RESET_AT, epoch_instant, field_reset, reset_from_captures};
use super::scan::Scan;
use super::wait::stated_wait;
use super::{LONG_WAIT, LimitReading, accept_reset};

static PIPE_EPOCH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)claude ai usage limit reached\b[^|\n]{0,40}\|(\S*)").unwrap()
});

static JSON_RESETS_IN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)\\?"?resets_in_seconds\\?"?\s*[:=]\s*(\d+)"#).unwrap());

/// Builds a usage-limit reading of `scan`'s line, whose trigger `trig` starts at byte `start`,
/// and looks for its reset after the trigger (in the line and the lines that continue it), then
/// before it. `daily`: the quota is per day, so a short wait beside it is not its reset.
pub(super) fn read_usage(
    scan: &Scan<'_>,
    start: usize,
    trig: &Trigger,
    daily: bool,
) -> LimitReading {
    let (origin, now, message) = (scan.origin, scan.now, scan.message);
    let mut reading = scan.usage(format!("{origin}: {} (reset unknown)", trig.name));
    let cont = scan.around.cont.trim();
    let window = format!("{} {cont}", &message[start..]);
    // Fields may come before the trigger (a JSON body with sorted keys), even on the line a
    // terminal wrapped it from.
    let body = format!("{} {message} {cont}", scan.around.prev);

    if trig.name == "claude usage limit |epoch" {
        pipe_epoch(&mut reading, &window, scan);
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
        let reset = now + chrono::TimeDelta::seconds(secs);
        accept_reset(&mut reading, Some(reset), now, &label);
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
            if let Some((instant, label)) = reset_from_captures(&c, now, scan.tz) {
                let label = format!("{origin}: {}, {label}", trig.name);
                accept_reset(&mut reading, Some(instant), now, &label);
                return reading;
            }
        }
    }
    reading
}

/// Claude's legacy `|epoch`: the token after the pipe is the whole answer (`|invalid` → no time).
fn pipe_epoch(reading: &mut LimitReading, window: &str, scan: &Scan<'_>) {
    let Some(token) = PIPE_EPOCH.captures(window).and_then(|c| c.get(1)) else {
        return;
    };
    let token = token
        .as_str()
        .trim_end_matches(|c: char| !c.is_ascii_digit());
    if let Ok(epoch) = token.parse::<i64>() {
        let label = format!("{}: claude usage limit |{epoch}", scan.origin);
        accept_reset(reading, epoch_instant(epoch), scan.now, &label);
    }
}
