//! The night's use of each account's quota windows in the report
//! (docs/limits.md#gauges): per account and window, the first reading of
//! the run and the last, and whether paid overage was drawn on.

use chrono_tz::Tz;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::ledger::quota::{self, FallbackCall, Reading};

/// The run's quota use: (first, last) reading of every account's window,
/// in the order first read; and the calls fallback agents made
/// (docs/limits.md#fallback).
pub struct NightQuota(pub Vec<(Reading, Reading)>, pub Vec<FallbackCall>);

impl NightQuota {
    /// Reads run `run`'s readings and fallback calls from the ledger.
    ///
    /// # Errors
    /// Database errors.
    pub async fn load(pool: &sqlx::PgPool, run: Uuid) -> sqlx::Result<NightQuota> {
        Ok(NightQuota(
            quota::run_span(pool, run).await?,
            quota::fallback_calls(pool, run).await?,
        ))
    }

    /// Sets each item of `report --json` (`v["items"]`) its `fallback`:
    /// `[{"round": N, "role": "writer", "agent": NAME, "kind": KIND}]`, the
    /// rounds and roles a fallback agent played (empty when none).
    pub fn attach(&self, v: &mut Value) {
        for item in v["items"].as_array_mut().into_iter().flatten() {
            item["fallback"] = self
                .1
                .iter()
                .filter(|c| item["key"] == c.item_key.as_str())
                .map(
                    |c| json!({"round": c.round, "role": c.role, "agent": c.agent, "kind": c.kind}),
                )
                .collect();
        }
    }

    /// The report's lines of the rounds fallback agents played
    /// (`item 1 round 1: writer codex (codex)`), empty when none.
    fn fallback_text(&self) -> String {
        let mut s = String::new();
        if self.1.is_empty() {
            return s;
        }
        s.push_str(
            "rounds played by a fallback agent (the configured one's account was paused):\n",
        );
        for c in &self.1 {
            s.push_str(&format!(
                "  item {} round {}: {} {} ({})\n",
                c.item_index,
                c.round,
                c.role,
                crate::secret::redact_known(&c.agent),
                c.kind
            ));
        }
        s
    }

    /// `report --json`'s `quota`: one object per account and window with
    /// `account`, `window`, `first_percent`, `last_percent` (as read),
    /// `first_read_at`, `last_read_at`, `resets_at` (the last reading's)
    /// and `overage_in_use` (either reading said so).
    pub fn json(&self) -> Value {
        self.0
            .iter()
            .map(|(f, l)| {
                json!({
                    "account": l.account,
                    "window": l.quota_window,
                    "first_percent": f.percent,
                    "last_percent": l.percent,
                    "first_read_at": f.read_at,
                    "last_read_at": l.read_at,
                    "resets_at": l.resets_at,
                    "overage_in_use": f.overage_in_use == Some(true) || l.overage_in_use == Some(true),
                })
            })
            .collect()
    }

    /// The report's text section, empty when no agent reported a gauge:
    /// `quota: claude seven_day 40% → 100% (resets …)`, one line each, and
    /// `overage used` where paid overage was in use.
    pub fn text(&self, tz: Tz) -> String {
        if self.0.is_empty() {
            return self.fallback_text();
        }
        let pct = |r: &Reading| match (r.percent, &r.raw_utilization) {
            (Some(p), _) => format!("{p:.0}%"),
            (None, Some(raw)) => format!("{raw:?}"),
            (None, None) => "?".into(),
        };
        let mut s = String::from("quota used this night (first reading → last):\n");
        for (f, l) in &self.0 {
            let reset = l
                .resets_at
                .map(|t| format!(" (resets {})", reset_time(t, tz)))
                .unwrap_or_default();
            let overage = if f.overage_in_use == Some(true) || l.overage_in_use == Some(true) {
                " · overage used"
            } else {
                ""
            };
            s.push_str(&format!(
                "  {} {} {} → {}{reset}{overage}\n",
                l.account,
                l.quota_window,
                pct(f),
                pct(l)
            ));
        }
        s + &self.fallback_text()
    }
}

/// What `plan` says of each account's quota before the night
/// (docs/limits.md#reserve): per account of `accounts` (the configured
/// claude and codex agents'), the latest reading of each window and, for
/// a window the reserve covers (`reserve` percent for the windows longer
/// than 5 hours, `session_reserve` for the 5-hour one), the room it
/// leaves the night; `gauge unknown` for an account without readings.
/// Returns (text lines, JSON).
///
/// # Errors
/// Database errors.
pub async fn room(
    pool: &sqlx::PgPool,
    accounts: &[String],
    quota_cfg: &crate::config::Quota,
    tz: Tz,
) -> sqlx::Result<(Vec<String>, Value)> {
    let now = chrono::Utc::now();
    let (mut lines, mut js) = (Vec::new(), serde_json::Map::new());
    for a in accounts {
        let readings = quota::latest_of(pool, a).await?;
        if readings.is_empty() {
            lines.push(format!("quota {a}: gauge unknown (no reading yet)"));
            js.insert(a.clone(), json!({"gauge": "unknown", "windows": []}));
            continue;
        }
        let mut windows = Vec::new();
        for r in &readings {
            let long = r
                .window_minutes
                .map_or(r.quota_window.starts_with("seven_day"), |m| {
                    m > crate::limit::gauge::FIVE_HOURS_MINUTES
                });
            let reserve = if long {
                Some(quota_cfg.reserve)
            } else {
                quota_cfg.session_reserve
            }
            .filter(|r| *r > 0.0);
            let stale = crate::limit::gauge::is_stale(r.resets_at, now);
            let used = r.percent.filter(|p| p.is_finite() && *p >= 0.0 && !stale);
            let room = reserve
                .zip(used)
                .map(|(res, p)| (100.0 - res - p.min(100.0)).max(0.0));
            let what = describe_reading(r, now, tz);
            let tail = match (reserve, room) {
                (Some(res), Some(room)) => {
                    format!(" · the reserve ({res:.0}%) leaves the night {room:.0}%")
                }
                (Some(res), None) => format!(" · reserve {res:.0}%, room unknown"),
                (None, _) => String::new(),
            };
            lines.push(format!("quota {a}: {what}{tail}"));
            windows.push(json!({
                "window": r.quota_window,
                "percent": r.percent,
                "resets_at": r.resets_at,
                "read_at": r.read_at,
                "stale": stale,
                "reserve": reserve,
                "room": room,
            }));
        }
        js.insert(a.clone(), json!({"gauge": "known", "windows": windows}));
    }
    Ok((lines, Value::Object(js)))
}

/// How a recorded reading reads to a person (`status`, `plan`): its window,
/// use, overage, reset and age ([`crate::limit::gauge::describe`]).
pub fn describe_reading(
    r: &crate::ledger::quota::Reading,
    now: chrono::DateTime<chrono::Utc>,
    tz: chrono_tz::Tz,
) -> String {
    crate::limit::gauge::describe(
        &r.quota_window,
        r.percent,
        r.raw_utilization.as_deref(),
        r.overage_in_use,
        r.resets_at,
        r.read_at,
        now,
        tz,
    )
}

/// One account's window over the night, as the run's page draws it
/// (docs/limits.md#gauges): its readings' use in time order.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Series {
    /// The account.
    pub account: String,
    /// The window (`five_hour`, `seven_day`, `primary`, …), as read.
    pub window: String,
    /// (read at, percent as read), readings without a usable percent left out.
    pub points: Vec<(chrono::DateTime<chrono::Utc>, f64)>,
    /// The last reading's reset, if known.
    pub resets_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The series of `readings` (one run's, in time order): one per account
/// and window, in the order first read.
pub fn series(readings: &[Reading]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in readings {
        let i = match out
            .iter()
            .position(|s| s.account == r.account && s.window == r.quota_window)
        {
            Some(i) => i,
            None => {
                out.push(Series {
                    account: r.account.clone(),
                    window: r.quota_window.clone(),
                    points: Vec::new(),
                    resets_at: None,
                });
                out.len() - 1
            }
        };
        let s = &mut out[i];
        if let Some(p) = r.percent.filter(|p| p.is_finite()) {
            s.points.push((r.read_at, p));
        }
        s.resets_at = r.resets_at.or(s.resets_at);
    }
    out.retain(|s| !s.points.is_empty());
    out
}

/// Reads run `run`'s series ([`series`]) from the ledger.
///
/// # Errors
/// Database errors.
pub async fn load_series(pool: &sqlx::PgPool, run: Uuid) -> sqlx::Result<Vec<Series>> {
    Ok(series(&quota::run_readings(pool, run).await?))
}

/// Line colours of the chart, one per series in turn.
const COLOURS: [&str; 6] = [
    "#4e79a7", "#e15759", "#59a14f", "#b07aa1", "#f28e2b", "#76b7b2",
];

/// Height of the chart's plot (0–100 %), in the SVG's units.
const PLOT: f64 = 90.0;

/// The run page's quota chart (docs/limits.md#gauges), drawn under the
/// timeline on its time axis: `x` maps an instant to the timeline's x
/// coordinate, `left`/`width` are its margins. Each series is a line of
/// its readings (0–100 %, a reading over 100 % drawn at the top) with a
/// point per reading whose title says the use and the time, and a legend
/// line; empty without series. Every name is HTML-escaped: window names
/// come from the agents.
pub fn chart(
    series: &[Series],
    x: &dyn Fn(chrono::DateTime<chrono::Utc>) -> f64,
    (left, width): (f64, f64),
    tz: Tz,
) -> String {
    if series.is_empty() {
        return String::new();
    }
    let y = |p: f64| 6.0 + PLOT * (1.0 - p.clamp(0.0, 100.0) / 100.0);
    let h = PLOT + 16.0;
    let mut s = format!(
        "<h2>Quota over the night</h2><div class=\"tl\"><svg class=\"quota\" viewBox=\"0 0 {width} {h}\" role=\"img\" aria-label=\"quota use of each window over the night\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    for p in [0.0, 50.0, 100.0] {
        s.push_str(&format!(
            "<line x1=\"{left}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d0d7de\" stroke-width=\"1\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{p:.0}%</text>",
            width - 10.0,
            left - 4.0,
            y(p) + 4.0,
            y = y(p)
        ));
    }
    let mut legend = String::from("<div class=\"legend quota-legend\">");
    for (k, sr) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let name = html_escape(&format!("{} {}", sr.account, sr.window));
        let points: Vec<String> = sr
            .points
            .iter()
            .map(|(t, p)| format!("{:.1},{:.1}", x(*t), y(*p)))
            .collect();
        s.push_str(&format!(
            "<polyline class=\"quota-line\" points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"><title>{name}</title></polyline>",
            points.join(" ")
        ));
        for (t, p) in &sr.points {
            s.push_str(&format!(
                "<circle class=\"quota-point\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"><title>{name} {p:.0}% at {}</title></circle>",
                x(*t),
                y(*p),
                t.with_timezone(&tz).format("%H:%M:%S")
            ));
        }
        let (first, last) = (sr.points[0].1, sr.points[sr.points.len() - 1].1);
        let reset = sr
            .resets_at
            .map(|t| format!(", resets {}", reset_time(t, tz)))
            .unwrap_or_default();
        legend.push_str(&format!(
            "<span><i style=\"background:{colour}\"></i>{name} {first:.0}% → {last:.0}%{}</span>",
            html_escape(&reset)
        ));
    }
    s.push_str("</svg></div>");
    s + &legend + "</div>"
}

/// A window's reset as the report and the page write it, in `tz`.
fn reset_time(t: chrono::DateTime<chrono::Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string()
}

/// `s` escaped for HTML text and attribute values.
fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    pulldown_cmark_escape::escape_html(&mut out, s).expect("writing to a String");
    out
}
