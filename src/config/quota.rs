//! The `[quota]` table (docs/config.md#quota, docs/limits.md#reserve): the
//! share of an account's long usage windows kept for the day, and whether
//! paid overage may be used. Percentages are written `"25%"` (or a bare
//! number, `25`); anything outside 0–100 is refused with the key's line.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `[quota]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Quota {
    /// The share (percent, 0–100) of every window longer than 5 hours
    /// (weekly, model-specific weekly) the night leaves for the day: at a
    /// reading of `100 - reserve` percent the account starts no new item or
    /// round until the window resets. `0` turns it off. Default 25.
    #[serde(serialize_with = "ser_percent", deserialize_with = "de_percent")]
    pub reserve: f64,
    /// The same for the 5-hour window; `None` (the default) keeps the
    /// usage-limit behaviour: sleep until its reset.
    #[serde(
        serialize_with = "ser_opt_percent",
        deserialize_with = "de_opt_percent"
    )]
    pub session_reserve: Option<f64>,
    /// Whether the night may draw on paid overage (docs/limits.md#overage).
    pub overage: Overage,
}

/// The default `[quota] reserve`, percent.
pub const DEFAULT_RESERVE: f64 = 25.0;

impl Default for Quota {
    fn default() -> Self {
        Quota {
            reserve: DEFAULT_RESERVE,
            session_reserve: None,
            overage: Overage::Never,
        }
    }
}

/// `[quota] overage`: whether paid overage (extra usage beyond the plan)
/// may be used.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Overage {
    /// A reading that says overage is in use is the plan's limit: the
    /// account pauses after the running round (the default).
    #[default]
    Never,
    /// Overage may be used; the report shows it.
    Allow,
}

impl fmt::Display for Overage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Overage::Never => "never",
            Overage::Allow => "allow",
        })
    }
}

/// Parses a percentage: `"30%"`, `"30"`, `"12.5 %"` (0–100).
///
/// # Errors
/// A message naming the accepted form.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let n = t.strip_suffix('%').unwrap_or(t).trim();
    match n.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a percentage between 0% and 100%; write it like \"25%\""
        )),
    }
}

/// A percentage written as a string or a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Text(String),
    Number(f64),
}

fn de_percent<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = match Written::deserialize(d)? {
        Written::Text(s) => s,
        Written::Number(n) => n.to_string(),
    };
    parse_percent(&v).map_err(serde::de::Error::custom)
}

fn de_opt_percent<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    de_percent(d).map(Some)
}

fn ser_percent<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v}%"))
}

fn ser_opt_percent<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => ser_percent(v, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_are_read_in_both_forms_and_refused_out_of_range() {
        assert_eq!(parse_percent("30%"), Ok(30.0));
        assert_eq!(parse_percent(" 12.5 % "), Ok(12.5));
        assert_eq!(parse_percent("0"), Ok(0.0));
        assert!(parse_percent("101%").is_err());
        assert!(parse_percent("-1%").is_err());
        assert!(parse_percent("lots").unwrap_err().contains("\"25%\""));
        let q: Quota =
            toml::from_str("reserve = \"30%\"\nsession_reserve = 10\noverage = \"allow\"").unwrap();
        assert_eq!(
            (q.reserve, q.session_reserve, q.overage),
            (30.0, Some(10.0), Overage::Allow)
        );
        let q: Quota = toml::from_str("").unwrap();
        assert_eq!(q, Quota::default());
        assert_eq!(q.reserve, 25.0);
        assert!(toml::from_str::<Quota>("reserve = \"130%\"").is_err());
        assert!(toml::from_str::<Quota>("overage = \"sometimes\"").is_err());
    }
}
