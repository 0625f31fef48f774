//! Quota gauges: how full an agent account's usage windows are, as the
//! agent CLIs report it on every call, long before a limit is hit
//! (docs/limits.md#gauges).
//!
//! Two shapes are read, each exactly as the pinned CLIs print it:
//! - Claude Code's `rate_limit_event` (stream-json, subscription logins
//!   only): `rate_limit_info` holds the representative window
//!   (`rateLimitType`, `status`, `resetsAt`, sometimes `utilization` and
//!   `surpassedThreshold`), the account's overage flags (`isUsingOverage`,
//!   `overageInUse`, `overageStatus`) and `unifiedWindows`, one object per
//!   window (`five_hour`, `seven_day`, …) with `utilization` as a
//!   **fraction** (0.7 = 70 %), `resetsAt` in epoch seconds and `status`.
//! - Codex's `rate_limits` snapshot (`primary` / `secondary` with
//!   `used_percent` as a **percentage**, `window_minutes`, `resets_at` in
//!   epoch seconds, or the older `resets_in_seconds`), which `codex exec
//!   --json` does not print but writes to its session file (see
//!   [`codex_gauges`]).
//!
//! Reading never fails: a missing field is `None`, a value of the wrong
//! type or out of range is kept as read (`raw_utilization`, `raw`), and a
//! reading nothing can be taken from yields no gauge. What a gauge means
//! for the night (the reserve, overage) is the run's business.

use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;
use serde_json::Value;

/// The agent CLI a gauge was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GaugeSource {
    /// Claude Code's `rate_limit_event`.
    Claude,
    /// Codex's `rate_limits` snapshot.
    Codex,
}

impl GaugeSource {
    /// `claude` or `codex` (the ledger's `source` column).
    pub fn as_str(self) -> &'static str {
        match self {
            GaugeSource::Claude => "claude",
            GaugeSource::Codex => "codex",
        }
    }
}

/// One window's reading from one agent call (docs/limits.md#gauges).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gauge {
    /// Where it was read.
    pub source: GaugeSource,
    /// The window: claude's name (`five_hour`, `seven_day`,
    /// `seven_day_opus`, `seven_day_sonnet`, `overage`, …, kept as
    /// printed), codex's `primary` or `secondary`.
    pub window: String,
    /// The window's length in minutes: codex's `window_minutes`, claude's
    /// known from its name (300 for `five_hour`, 10080 for `seven_day*`);
    /// `None` when unknown.
    pub window_minutes: Option<i64>,
    /// Use of the window in percent (claude's fraction × 100, codex's
    /// percentage as is); as read, so possibly negative or over 100.
    /// `None` when the reading had none or it was not a number.
    pub percent: Option<f64>,
    /// The utilization value exactly as printed (`0.7`, `42.5`, `"abc"`).
    pub raw_utilization: Option<String>,
    /// `allowed`, `allowed_warning`, `rejected` (claude), as printed.
    pub status: Option<String>,
    /// When the window resets (UTC), as read (it may lie in the past).
    pub resets_at: Option<DateTime<Utc>>,
    /// Whether the account is drawing on paid overage (claude's
    /// `isUsingOverage` or `overageInUse`); `None` when not said.
    pub overage_in_use: Option<bool>,
    /// Claude's `overageStatus` (`allowed`, `allowed_warning`, `rejected`).
    pub overage_status: Option<String>,
    /// The whole object the gauge was read from, unknown fields kept.
    pub raw: Value,
}

/// Minutes of a 5-hour window.
pub const FIVE_HOURS_MINUTES: i64 = 300;

impl Gauge {
    /// Whether the window is longer than the 5-hour one (weekly, and any
    /// model-specific weekly window): the windows `[quota] reserve` keeps
    /// a share of (docs/limits.md#reserve). Unknown length: by claude's
    /// name (`seven_day…`).
    pub fn is_long(&self) -> bool {
        match self.window_minutes {
            Some(m) => m > FIVE_HOURS_MINUTES,
            None => self.window.starts_with("seven_day"),
        }
    }

    /// Whether this is the 5-hour session window.
    pub fn is_session(&self) -> bool {
        self.window_minutes == Some(FIVE_HOURS_MINUTES) || self.window == "five_hour"
    }

    /// The use the run acts on: the percentage clamped to at most 100, or
    /// `None` when it is unknown, not finite or negative (a reading that
    /// cannot be right does not stop a night on its own).
    pub fn usable_percent(&self) -> Option<f64> {
        self.percent
            .filter(|p| p.is_finite() && *p >= 0.0)
            .map(|p| p.min(100.0))
    }

    /// Whether the reading says paid overage is being drawn on or is the
    /// window in play (docs/limits.md#overage): `isUsingOverage` /
    /// `overageInUse` true, the `overage` window itself, or overage
    /// `allowed` while the plan window is `rejected`.
    pub fn says_overage(&self) -> bool {
        let allowed = matches!(
            self.overage_status.as_deref(),
            Some("allowed" | "allowed_warning")
        );
        self.overage_in_use == Some(true)
            || (self.window == "overage" && self.status.as_deref() != Some("rejected"))
            || (allowed && self.status.as_deref() == Some("rejected"))
    }
}

/// Window length of a claude window name, when known.
fn claude_minutes(window: &str) -> Option<i64> {
    if window == "five_hour" {
        Some(FIVE_HOURS_MINUTES)
    } else if window.starts_with("seven_day") {
        Some(7 * 24 * 60)
    } else {
        None
    }
}

/// A number as printed: JSON numbers, and numeric strings (a CLI that
/// quotes them). The text as printed is returned beside it.
fn number(v: Option<&Value>) -> (Option<f64>, Option<String>) {
    match v {
        None | Some(Value::Null) => (None, None),
        Some(Value::Number(n)) => (n.as_f64(), Some(n.to_string())),
        Some(Value::String(s)) => (s.trim().parse::<f64>().ok(), Some(s.clone())),
        Some(other) => (None, Some(other.to_string())),
    }
}

/// An instant: epoch seconds (milliseconds when over 10¹²), as a number or
/// a numeric string, or an RFC 3339 string. Anything else is `None`.
pub fn instant(v: Option<&Value>) -> Option<DateTime<Utc>> {
    if let Some(s) = v.and_then(Value::as_str)
        && let Ok(t) = DateTime::parse_from_rfc3339(s.trim())
    {
        return Some(t.with_timezone(&Utc));
    }
    let (n, _) = number(v);
    let n = n.filter(|n| n.is_finite() && *n > 0.0)?;
    let secs = if n > 1e12 { n / 1000.0 } else { n };
    Utc.timestamp_opt(secs as i64, 0).single()
}

/// Claude's utilization in percent. Claude Code prints fractions (`0.7`
/// is 70 %, `1.2` is 120 %), so a value up to 2 in size is a fraction × 100;
/// a larger one cannot be a believable fraction and is taken as a
/// percentage already (a CLI that prints 70 for 70 %). Negatives keep
/// their sign: recorded as read.
fn claude_percent(v: f64) -> f64 {
    if v.abs() <= 2.0 { v * 100.0 } else { v }
}

/// The gauges of one Claude Code `rate_limit_event` line (its
/// `rate_limit_info`): one per `unifiedWindows` entry, and one for the
/// representative window (`rateLimitType`) when the entries do not hold
/// it. The account's overage flags go on every gauge of the event. An
/// event without `rate_limit_info` gives none.
pub fn claude_gauges(event: &Value) -> Vec<Gauge> {
    let Some(info) = event.get("rate_limit_info").filter(|i| i.is_object()) else {
        return Vec::new();
    };
    let flag = |k: &str| info.get(k).and_then(Value::as_bool);
    let overage_in_use = match (flag("isUsingOverage"), flag("overageInUse")) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(false) || b.unwrap_or(false)),
    };
    let overage_status = info
        .get("overageStatus")
        .and_then(Value::as_str)
        .map(String::from);
    let one = |window: &str, w: &Value| {
        let (v, raw_utilization) = number(w.get("utilization"));
        Gauge {
            source: GaugeSource::Claude,
            window: window.to_string(),
            window_minutes: claude_minutes(window),
            percent: v.map(claude_percent),
            raw_utilization,
            status: w.get("status").and_then(Value::as_str).map(String::from),
            resets_at: instant(w.get("resetsAt")),
            overage_in_use,
            overage_status: overage_status.clone(),
            raw: w.clone(),
        }
    };
    let mut out: Vec<Gauge> = info
        .get("unifiedWindows")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, w)| w.is_object())
        .map(|(name, w)| one(name, w))
        .collect();
    let top = info
        .get("rateLimitType")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    match out.iter_mut().find(|g| g.window == top) {
        // The representative window's own status wins when it is refused.
        Some(g) => {
            if info.get("status").and_then(Value::as_str) == Some("rejected") {
                g.status = Some("rejected".into());
            }
        }
        None => {
            let mut g = one(top, info);
            g.raw = info.clone();
            out.push(g);
        }
    }
    out
}

/// The gauges of a codex `rate_limits` snapshot: `primary` and
/// `secondary` (each with `used_percent`, `window_minutes`, `resets_at` or
/// `resets_in_seconds`, measured from `now`). A window that is `null` or
/// absent gives none; the snapshot's other fields (`credits`, `plan_type`,
/// `limit_id`, …) are kept in each gauge's `raw` under `snapshot`.
pub fn codex_snapshot(limits: &Value, now: DateTime<Utc>) -> Vec<Gauge> {
    let mut out = Vec::new();
    for name in ["primary", "secondary"] {
        let Some(w) = limits.get(name).filter(|w| w.is_object()) else {
            continue;
        };
        let (percent, raw_utilization) = number(w.get("used_percent"));
        let resets_at = instant(w.get("resets_at")).or_else(|| {
            let (secs, _) = number(w.get("resets_in_seconds"));
            secs.filter(|s| s.is_finite() && s.abs() < 1e10)
                .map(|s| now + chrono::Duration::seconds(s as i64))
        });
        let mut raw = w.clone();
        let mut rest = limits.clone();
        if let Some(o) = rest.as_object_mut() {
            o.remove("primary");
            o.remove("secondary");
        }
        if let Some(o) = raw.as_object_mut() {
            o.insert("snapshot".into(), rest);
        }
        out.push(Gauge {
            source: GaugeSource::Codex,
            window: name.to_string(),
            window_minutes: w.get("window_minutes").and_then(Value::as_i64),
            percent,
            raw_utilization,
            status: None,
            resets_at,
            overage_in_use: None,
            overage_status: None,
            raw,
        });
    }
    out
}

/// The gauges in one line of codex output or of its session file: a
/// `rate_limits` object at the top, under `msg` (legacy `token_count`
/// events on stdout) or under `payload` (the session file's `event_msg`
/// of type `token_count`). A line without one gives none.
pub fn codex_gauges(line: &Value, now: DateTime<Utc>) -> Vec<Gauge> {
    ["/rate_limits", "/msg/rate_limits", "/payload/rate_limits"]
        .iter()
        .find_map(|p| line.pointer(p).filter(|v| v.is_object()))
        .map(|l| codex_snapshot(l, now))
        .unwrap_or_default()
}

/// The latest gauge of each window, in the order windows were first seen:
/// what one call leaves as its reading.
pub fn latest_per_window(gauges: &[Gauge]) -> Vec<Gauge> {
    let mut out: Vec<Gauge> = Vec::new();
    merge(&mut out, gauges.iter().cloned());
    out
}

/// Takes `more` into `into`, keeping the latest gauge of each window (so a
/// stream of many events holds one gauge per window, not one per event).
pub fn merge(into: &mut Vec<Gauge>, more: impl IntoIterator<Item = Gauge>) {
    for g in more {
        match into.iter_mut().find(|o| o.window == g.window) {
            Some(o) => *o = g,
            None => into.push(g),
        }
    }
}

/// Whether a reading of a window resetting at `resets_at` is stale at
/// `now`: the window reset since (or had already when it was read), so
/// its use says nothing of the window now (docs/limits.md#gauges).
pub fn is_stale(resets_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    resets_at.is_some_and(|r| r <= now)
}

/// A duration for a person: `45s`, `12m`, `3h 5m`, `2d 4h`.
fn age(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// One reading as `status` shows it: the window, its use (as read when it
/// is not a number), the overage flag, the reading's age and the reset in
/// `tz`, and `stale` when the window reset since it was read.
#[allow(clippy::too_many_arguments)]
pub fn describe(
    window: &str,
    percent: Option<f64>,
    raw: Option<&str>,
    overage: Option<bool>,
    resets_at: Option<DateTime<Utc>>,
    read_at: DateTime<Utc>,
    now: DateTime<Utc>,
    tz: chrono_tz::Tz,
) -> String {
    let used = match (percent, raw) {
        (Some(p), _) => format!("{p:.0}%"),
        (None, Some(r)) => format!("unreadable utilization {r:?}"),
        (None, None) => "use unknown".to_string(),
    };
    let mut out = format!("{window} {used}");
    if overage == Some(true) {
        out.push_str(" · overage in use");
    }
    out.push_str(&format!(" · read {} ago", age(now - read_at)));
    if let Some(r) = resets_at {
        let when = r.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z");
        if is_stale(resets_at, now) {
            out.push_str(&format!(" · stale: the window reset at {when}"));
        } else {
            out.push_str(&format!(" · resets {when}"));
        }
    }
    out
}

#[cfg(test)]
#[path = "gauge_tests.rs"]
mod tests;
