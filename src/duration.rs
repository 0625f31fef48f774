//! The one duration grammar of nightshift: the config's `[limits]` values
//! (`agent_timeout = "45m"`) and the backlog's `timeout:` lines (`timeout: 45
//! minutes`) read the same forms, and every message prints durations one way
//! (docs/config.md, docs/backlog.md).
//!
//! Parsing is `humantime`'s grammar — number–unit pairs summed, spaces allowed
//! between them (`1h30m`, `1h 30m`, `45 min`, `2 hours`, `1.5h`) — after two
//! widenings a backlog written in Chinese or with an IME needs: full-width
//! digits and letters are read as ASCII, units are case-insensitive (`1H30M`),
//! and the units 天, 小時 (小时, 時, 时), 分鐘 (分钟, 分) and 秒 are read as
//! `d`, `h`, `min` and `s`. On top of the grammar three rules hold: every
//! number needs its unit (a bare `45` could mean seconds or minutes), the total
//! is whole seconds above zero (a zero timeout cannot run), and at most a year.
//!
//! Not for agents' messages (`try again in 2 days 17 hours`): those are read
//! leniently inside prose by `limit`.

use std::time::Duration;

/// The longest duration accepted: 366 days, in seconds. Nothing nightshift
/// waits for lasts a year; a longer value is a typo that would overflow date
/// arithmetic later.
pub const MAX_SECS: u64 = 366 * 86_400;

/// The forms a message suggests.
pub const EXAMPLES: &str = "\"45m\", \"2h\", \"90s\" or \"1h30m\"";

/// Why a text is not a duration. Display says what is wrong and the accepted
/// forms; callers add where it was written (file:line, key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing but whitespace.
    #[error("no duration given; write e.g. {EXAMPLES}")]
    Empty,
    /// A number without its unit (`45`).
    #[error("{given:?} has no unit; write \"{number}m\" for minutes or \"{number}s\" for seconds")]
    NoUnit { given: String, number: String },
    /// Not number–unit pairs, or a unit humantime does not know.
    #[error(
        "{given:?} is not a duration; write e.g. {EXAMPLES} (units: s, m/min, h, d, and their words)"
    )]
    Malformed { given: String },
    /// Zero in total.
    #[error("{given:?}: a duration must be longer than zero")]
    Zero { given: String },
    /// A fraction of a second remains (`1500ms`).
    #[error("{given:?}: durations are whole seconds; write e.g. {EXAMPLES}")]
    Fractional { given: String },
    /// Longer than [`MAX_SECS`] (or beyond any number).
    #[error("{given:?}: longer than a year (366d); write a shorter duration")]
    TooLong { given: String },
}

/// Parses a duration written by a person (see the module doc for the forms).
///
/// # Errors
/// A [`DurationError`] naming what is wrong and the accepted forms.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let given = text.trim().to_string();
    let wide = normalize(&given);
    if wide.is_empty() {
        return Err(DurationError::Empty);
    }
    if wide.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DurationError::NoUnit {
            number: wide.clone(),
            given,
        });
    }
    // humantime skips spaces inside a number (`4 5m` is 45m): a typo, not a duration.
    let chars: Vec<char> = wide.chars().collect();
    let split_number = chars
        .windows(3)
        .any(|w| w[0].is_ascii_digit() && w[1].is_whitespace() && w[2].is_ascii_digit())
        || wide
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| {
                w[0].bytes().all(|b| b.is_ascii_digit())
                    && w[1].starts_with(|c: char| c.is_ascii_digit())
            });
    if split_number {
        return Err(DurationError::Malformed { given });
    }
    let d = match humantime::parse_duration(&wide) {
        Ok(d) => d,
        Err(humantime::DurationError::NumberOverflow) => {
            return Err(DurationError::TooLong { given });
        }
        Err(humantime::DurationError::UnknownUnit { unit, value, .. }) if unit.is_empty() => {
            return Err(DurationError::NoUnit {
                given,
                number: value.to_string(),
            });
        }
        Err(_) => return Err(DurationError::Malformed { given }),
    };
    if d.is_zero() {
        return Err(DurationError::Zero { given });
    }
    if d.subsec_nanos() != 0 {
        return Err(DurationError::Fractional { given });
    }
    if d.as_secs() > MAX_SECS {
        return Err(DurationError::TooLong { given });
    }
    Ok(d)
}

/// Full-width forms as ASCII, units lowercased and CJK units as humantime's.
fn normalize(text: &str) -> String {
    let narrow: String = text
        .chars()
        .map(|c| match c {
            '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            '\u{3000}' => ' ',
            c => c,
        })
        .collect();
    let mut out = narrow.trim().to_lowercase();
    // Longest first: 分鐘 before 分, 小時 before 時.
    for (cjk, unit) in [
        ("小時", "h"),
        ("小时", "h"),
        ("分鐘", "min"),
        ("分钟", "min"),
        ("天", "d"),
        ("時", "h"),
        ("时", "h"),
        ("分", "min"),
        ("秒", "s"),
    ] {
        out = out.replace(cjk, unit);
    }
    out
}

/// Formats a duration the way the config writes it: `1h30m`, `45m`, `90s`,
/// `26h` (hours are not folded into days); under a second, `250ms`; zero is `0s`.
pub fn format(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        return match d.as_millis() {
            0 => "0s".to_string(),
            ms => format!("{ms}ms"),
        };
    }
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (sec, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_the_config_or_the_backlog_accepted_still_parses() {
        for (text, want) in [
            ("45m", 2700),
            ("2h", 7200),
            ("90s", 90),
            ("1h30m", 5400),
            ("1h 30m", 5400),
            ("1H30M", 5400),
            ("1d", 86_400),
            ("45 min", 2700),
            ("45mins", 2700),
            ("2 hours", 7200),
            ("2 hrs", 7200),
            ("10 minutes", 600),
            ("1 hour 30 minutes", 5400),
            ("30 secs", 30),
            ("45分鐘", 2700),
            ("45分钟", 2700),
            ("2小時", 7200),
            ("1時30分", 5400),
            ("1天", 86_400),
            ("１ｈ３０ｍ", 5400),
            ("30 秒", 30),
            ("1.5h", 5400),
            ("366d", 366 * 86_400),
        ] {
            assert_eq!(parse(text).map(|d| d.as_secs()), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn what_is_refused_and_why() {
        assert_eq!(parse("  "), Err(DurationError::Empty));
        assert!(matches!(parse("45"), Err(DurationError::NoUnit { .. })));
        assert!(parse("45").unwrap_err().to_string().contains("\"45m\""));
        for bad in [
            "m",
            "4 5m",
            "1x",
            "-1h",
            "abc",
            "45 furlongs",
            "m45",
            "1h 30",
        ] {
            assert!(
                matches!(
                    parse(bad),
                    Err(DurationError::Malformed { .. } | DurationError::NoUnit { .. })
                ),
                "{bad:?}: {:?}",
                parse(bad)
            );
        }
        assert!(matches!(parse("0m"), Err(DurationError::Zero { .. })));
        assert!(matches!(
            parse("1500ms"),
            Err(DurationError::Fractional { .. })
        ));
        assert!(matches!(parse("400d"), Err(DurationError::TooLong { .. })));
        assert!(matches!(
            parse("99999999999999999999h"),
            Err(DurationError::TooLong { .. })
        ));
    }

    #[test]
    fn one_format() {
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_secs(2700)), "45m");
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
        assert_eq!(format(Duration::from_secs(93_600)), "26h");
        assert_eq!(format(Duration::from_millis(250)), "250ms");
        assert_eq!(format(Duration::ZERO), "0s");
        for s in [1, 59, 61, 3599, 3600, 86_399, 86_400, 90_061] {
            let d = Duration::from_secs(s);
            assert_eq!(parse(&format(d)), Ok(d), "{s}");
        }
    }
}
