//! Time zones as messages write them: tzdb names, `UTC`/`GMT`, offsets (`GMT-3`, `UTC+05:30`)
//! and abbreviations (`PST`, `CEST`, `IST`), read against the agent's own zone first.

use std::str::FromStr;

use chrono::{DateTime, FixedOffset, NaiveDateTime, Utc};
use chrono_tz::Tz;
use regex::Regex;
use std::sync::LazyLock;

use crate::schedule::resolve_local;

/// A time zone read from a message: a tzdb name or a fixed offset.
#[derive(Debug, Clone, Copy)]
pub(super) enum Zone {
    Named(Tz),
    Fixed(FixedOffset),
}

impl Zone {
    pub(super) fn local_now(self, now: DateTime<Utc>) -> NaiveDateTime {
        match self {
            Zone::Named(tz) => now.with_timezone(&tz).naive_local(),
            Zone::Fixed(off) => now.with_timezone(&off).naive_local(),
        }
    }

    pub(super) fn to_utc(self, local: NaiveDateTime) -> DateTime<Utc> {
        match self {
            Zone::Named(tz) => resolve_local(&tz, local),
            Zone::Fixed(off) => resolve_local(&off, local),
        }
    }
}

/// `GMT-3`, `UTC+5:30`, `UTC +0800`, `+08:00` → a fixed offset (the sign as written: GMT-3 is
/// UTC−3, as Intl and Gemini print it; only the tzdb names `Etc/GMT±N` are inverted).
pub(super) fn parse_offset(text: &str) -> Option<FixedOffset> {
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
pub(super) fn zone_from_text(text: &str, tz: Tz, now: DateTime<Utc>) -> Option<Zone> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_keep_the_written_sign() {
        assert_eq!(parse_offset("GMT-3"), FixedOffset::east_opt(-3 * 3600));
        assert_eq!(
            parse_offset("UTC+5:30"),
            FixedOffset::east_opt(5 * 3600 + 1800)
        );
        assert_eq!(parse_offset("UTC +0800"), FixedOffset::east_opt(8 * 3600));
    }
}
