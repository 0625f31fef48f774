//! How values are written in the config file: durations (`"45m"`, `"1h30m"`), sizes (`"1GiB"`)
//! and times of day (`"07:00"`), read and written back. Not what range a value may take (see
//! `validate`).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The longest duration a config accepts: 366 days, in seconds.
pub const MAX_DURATION_SECS: u64 = crate::duration::MAX_SECS;

/// Parses a human duration with the one grammar of [`crate::duration`]
/// (`90s`, `45m`, `2h`, `1h30m`, `10 minutes`, `1d`).
///
/// # Errors
/// A message naming what is wrong and the accepted forms.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse(s).map_err(|e| e.to_string())
}

/// Formats a duration the way the config writes it (`1h30m`, `45m`, `90s`);
/// [`crate::duration::format`].
pub fn format_duration(d: Duration) -> String {
    crate::duration::format(d)
}

/// Formats a size the way the config's sealed JSON and the card write it,
/// in IEC units (`1.0 GiB`, `64.0 KiB`).
pub fn format_size(bytes: u64) -> String {
    bytesize::ByteSize(bytes).display().iec().to_string()
}

/// Deserializes `deadline`: a string that [`parse_hhmm`] accepts.
pub(super) fn de_hhmm<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    parse_hhmm(&s).map_err(serde::de::Error::custom)?;
    Ok(s)
}

/// Parses a local time of day `HH:MM` (24-hour clock) into (hour, minute).
///
/// # Errors
/// A message naming the accepted form.
pub fn parse_hhmm(s: &str) -> Result<(u32, u32), String> {
    let (h, m) = s
        .trim()
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not a time of day; write HH:MM, e.g. \"07:00\""))?;
    let h: u32 = h
        .parse()
        .map_err(|_| format!("{s:?}: hour is not a number; write HH:MM"))?;
    let m: u32 = m
        .parse()
        .map_err(|_| format!("{s:?}: minute is not a number; write HH:MM"))?;
    if h > 23 || m > 59 || s.trim().len() != 5 {
        return Err(format!(
            "{s:?} is not a valid time of day; write HH:MM between 00:00 and 23:59"
        ));
    }
    Ok((h, m))
}

/// Sizes written as `"1GiB"`, `"500MB"`, `"64KiB"` or a number of bytes
/// (the `bytesize` crate's forms: SI and IEC units, any case).
pub(super) mod human_size {
    use super::*;
    /// The size in IEC units (`"1 GiB"`).
    pub fn serialize<S: serde::Serializer>(bytes: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_size(*bytes))
    }
    /// A number of bytes, or a size with a unit.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Size {
            Bytes(u64),
            Text(String),
        }
        match Size::deserialize(d)? {
            Size::Bytes(n) => Ok(n),
            Size::Text(s) => s.trim().parse::<bytesize::ByteSize>().map(|b| b.0).map_err(|_| {
                serde::de::Error::custom(format!(
                    "{s:?} is not a size; write a number with a unit, e.g. \"1GiB\", \"500MB\", \"64KiB\""
                ))
            }),
        }
    }
}

/// An optional size in the forms of [`human_size`]; absent is `None`.
pub(super) mod human_size_opt {
    use super::*;
    /// The size in IEC units (`"1 GiB"`); called only for `Some`
    /// (`skip_serializing_if = "Option::is_none"`).
    pub fn serialize<S: serde::Serializer>(bytes: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::human_size::serialize(b, s),
            None => s.serialize_none(),
        }
    }
    /// A number of bytes, or a size with a unit.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        super::human_size::deserialize(d).map(Some)
    }
}

/// Durations written as `"45m"`, `"2h"`, `"1h30m"` (see [`super::parse_duration`]).
pub(super) mod human_duration {
    use super::*;
    /// The duration as the config writes it.
    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }
    /// A duration in the one grammar of [`crate::duration`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map_err(serde::de::Error::custom)
    }
}
