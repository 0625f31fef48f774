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
                .map(|t| {
                    format!(
                        " (resets {})",
                        t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z")
                    )
                })
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
