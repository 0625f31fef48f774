//! A throttling message read: a short retry (per-minute limits, `529 Overloaded`, "Retrying in
//! 21s"), unless a long stated wait, a far stated reset or a per-day quota makes it the account's
//! usage limit. Not the choice of a line's trigger (see [`super::text`]), nor a usage limit's
//! reset (see [`super::usage`]).

use std::time::Duration;

use super::reset::stated_reset;
use super::scan::{Scan, Windows};
use super::wait::{field_wait, stated_wait};
use super::{LONG_WAIT, LimitReading, accept_reset};

/// Reads a throttling message (trigger `name`): a short retry, unless a long stated wait, a far
/// stated reset or a per-day quota makes it the account's usage limit.
pub(super) fn read_throttling(scan: &Scan<'_>, name: &str, windows: Windows) -> LimitReading {
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
