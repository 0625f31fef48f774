//! Reset instants in a message: a field (`resets_at`, `X-RateLimit-Reset`, …) or words
//! (`resets 7pm (Asia/Taipei)`, `try again at Mar 10th, 2026 3:39 AM`, `resets Friday 2pm`),
//! read in the zone the message names, else the agent's, and the epoch numbers such fields hold.
//! Not durations (see [`super::wait`]).

use std::sync::LazyLock;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use chrono_tz::Tz;
use regex::Regex;
use serde_json::Value;

use super::PAST_GRACE;
use super::zone::{Zone, parse_offset, zone_from_text};
use crate::schedule::resolve_local;

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

/// `resets 7pm`, `reset at 1pm (Etc/GMT+5)`, `resets Jan 30, 11:30am (Asia/Calcutta)`,
/// `resets Apr 23 at 4pm`, `resets Oct 24` (a date alone), `try again at Mar 10th, 2026
/// 3:39 AM`, `try again after September 6, 2026, 11:15`, `Access resets at 10:57 PM GMT-3`,
/// `resets Friday 2:00 PM`, `resets tomorrow at 9am`, `resets at midnight (PT)`, ISO forms.
/// At least a date, a weekday or a time must follow; which one is decided in
/// [`reset_from_captures`].
pub(super) static RESET_AT: LazyLock<Regex> = LazyLock::new(|| {
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

/// A reset instant a throttling message states: a field (`"X-RateLimit-Reset":"1779321600000"`,
/// `resets_at`) anywhere in its `body`, else a time in its words ("Resets at 10:00 UTC").
pub(super) fn stated_reset(
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
pub(super) fn field_reset(text: &str) -> Option<(Option<DateTime<Utc>>, String)> {
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
pub(super) fn reset_from_captures(
    c: &regex::Captures<'_>,
    now: DateTime<Utc>,
    tz: Tz,
) -> Option<(DateTime<Utc>, String)> {
    let whole = c.get(0)?.as_str().trim();
    if let Some(iso) = c.name("iso") {
        let zone = if c.name("isoutc").is_some() {
            Tz::UTC
        } else {
            tz
        };
        return Some((iso_instant(iso.as_str(), zone)?, whole.to_string()));
    }
    let month = c.name("mon").or(c.name("mon2"));
    let weekday = c.name("wd").and_then(|w| weekday_of(w.as_str()));
    let time = time_of_day(c)?;
    // A date or a weekday may stand alone; "tomorrow" (prose) only with a time.
    if time.is_none() && month.is_none() && weekday.is_none() {
        return None;
    }
    let (zone, zone_note) = zone_of(c, tz, now)?;
    let local_now = zone.local_now(now);
    let at_time = time.unwrap_or(NaiveTime::MIN);
    let instant = if let (Some(mon), Some(day)) = (month, c.name("day").or(c.name("day2"))) {
        let month = month_number(mon.as_str())?;
        let day: u32 = day.as_str().parse().ok()?;
        match c.name("year") {
            Some(y) => {
                let year: i32 = y.as_str().parse().ok()?;
                zone.to_utc(NaiveDate::from_ymd_opt(year, month, day)?.and_time(at_time))
            }
            None => nearest_year(&zone, local_now.year(), month, day, at_time, now)?,
        }
    } else if let Some(rel) = c.name("rel") {
        let date = if rel.as_str().eq_ignore_ascii_case("tomorrow") {
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

/// An ISO date-time as a message writes it (`2026-03-10T03:39:00Z`, `2025-06-01 at 00:00`); one
/// without an offset is local time in `zone`.
fn iso_instant(iso: &str, zone: Tz) -> Option<DateTime<Utc>> {
    // "2025-06-01 at 00:00" (Anthropic's workspace limit) is read as "2025-06-01 00:00".
    static AT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)\s+at\s+").unwrap());
    let s = AT.replace(iso, " ");
    let s = s.as_ref();
    DateTime::parse_from_rfc3339(&s.replace(' ', "T"))
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            let naive = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
                .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S"))
                .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M"))
                .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M"))
                .ok()?;
            Some(resolve_local(&zone, naive))
        })
}

/// The time of day of a `RESET_AT` match: `Some(None)` when it names none, `None` when what it
/// names is not a time (a bare number without am/pm or minutes, an hour out of range).
fn time_of_day(c: &regex::Captures<'_>) -> Option<Option<NaiveTime>> {
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
    Some(time)
}

/// The zone a `RESET_AT` match is read in, and a note for the label when it is not the one the
/// message names (an unknown zone word, or none: then `tz`). `None` for a bad offset.
fn zone_of(c: &regex::Captures<'_>, tz: Tz, now: DateTime<Utc>) -> Option<(Zone, String)> {
    Some(if let Some(name) = c.name("zone") {
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
    })
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

/// An epoch number in a JSON field: an integer, a float (its whole seconds) or a numeric string.
pub(super) fn epoch_of(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_f64().map(|f| f as i64))
        .or_else(|| v.as_str()?.trim().parse().ok())
}

/// Epoch seconds (or milliseconds, when the number is too large for seconds) as an instant.
pub(super) fn epoch_instant(epoch: i64) -> Option<DateTime<Utc>> {
    let secs = if epoch > 100_000_000_000 {
        epoch / 1000
    } else {
        epoch
    };
    DateTime::from_timestamp(secs, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::read_text;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
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
