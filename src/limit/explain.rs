//! What `nightshift limit parse` prints for a reading: the JSON shape and the human text.
//! Not the reading itself, nor the sleep rule (see [`super::sleep`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::{Value, json};

use super::{LimitKind, LimitReading, SleepPolicy, sleep_for};

/// The `limit parse --json` shape (docs/commands.md#json-output):
/// `{"kind": "usage_limit"|"transient"|"no_credit"|"none", "resets_at": RFC3339-UTC|null,
///   "sleep_seconds": N|null, "source": S}` plus `retry_after_ms`, `resets_at_local`
/// (RFC 3339 with the offset of `tz`), `zone` and `message`. `resets_at` is the instant the limit
/// lifts: a usage limit's reset, or for transient throttling `now` plus the wait it states (the
/// instant the text form's sleep ends at, unless clamped); null when unknown (docs/commands.md).
pub fn explain(reading: &LimitReading, now: DateTime<Utc>, tz: Tz, policy: &SleepPolicy) -> Value {
    let sleep = matches!(reading.kind, LimitKind::UsageLimit | LimitKind::Transient)
        .then(|| sleep_for(reading, now, policy));
    let lifts = lifts_at(reading, now);
    json!({
        "kind": reading.kind.as_str(),
        "resets_at": lifts.map(rfc3339_utc),
        "resets_at_local": lifts.map(|t| t.with_timezone(&tz).to_rfc3339()),
        "zone": tz.name(),
        "sleep_seconds": sleep.map(|d| d.as_secs_f64().ceil() as u64),
        "retry_after_ms": reading.retry_after.map(|d| d.as_millis() as u64),
        "source": reading.source,
        "message": reading.message,
    })
}

/// The human form of [`explain`]: kind, reset in UTC and in `tz`, and the sleep, one per line.
/// Example:
/// ```text
/// usage limit (account)
/// reset: 2026-03-05T13:00:00Z = 2026-03-05 21:00 CST (Asia/Taipei)
/// sleep: 6h until 2026-03-04T23:50:00Z (2026-03-05 07:50:00 CST)
/// source: text: resets 9pm
/// ```
pub fn explain_text(
    reading: &LimitReading,
    now: DateTime<Utc>,
    tz: Tz,
    policy: &SleepPolicy,
) -> String {
    let mut out = String::new();
    match reading.kind {
        LimitKind::None => {
            out.push_str("not a usage limit: nothing to wait for\n");
            if !reading.message.is_empty() {
                out.push_str(&format!("source: {}\n", reading.source));
            }
            return out;
        }
        LimitKind::NoCredit => {
            out.push_str("no credit (the account cannot run: billing or credits exhausted)\n");
            out.push_str("sleep: none: the account's work stops for the night, later items of it are not started (outcome no_credit)\n");
            out.push_str(&format!("source: {}\n", reading.source));
            return out;
        }
        LimitKind::UsageLimit => out.push_str("usage limit (account)\n"),
        LimitKind::Transient => out.push_str("transient throttling (short retry)\n"),
    }
    match lifts_at(reading, now) {
        Some(reset) => {
            let local = reset.with_timezone(&tz);
            out.push_str(&format!(
                "reset: {} = {} ({})\n",
                rfc3339_utc(reset),
                local.format("%Y-%m-%d %H:%M %Z"),
                tz.name()
            ));
        }
        None if reading.kind == LimitKind::UsageLimit => out.push_str("reset: unknown\n"),
        None => {}
    }
    if let Some(retry) = reading.retry_after {
        out.push_str(&format!("retry after: {} ms\n", retry.as_millis()));
    }
    let sleep = sleep_for(reading, now, policy);
    let wake = now + chrono::TimeDelta::from_std(sleep).unwrap_or_default();
    out.push_str(&format!(
        "sleep: {} until {} ({})\n",
        human_duration(sleep),
        rfc3339_utc(wake),
        wake.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z")
    ));
    // Say why the wake-up is not the reset plus the buffer.
    if reading.kind == LimitKind::UsageLimit {
        match reading.resets_at {
            Some(reset) if wake < reset => out.push_str(&format!(
                "note: the sleep is capped at limit_sleep_max ({}); nightshift then retries and sleeps again if the limit holds\n",
                human_duration(policy.max)
            )),
            Some(reset) if reset + chrono::TimeDelta::from_std(policy.buffer).unwrap_or_default() < wake => out.push_str(&format!(
                "note: the sleep is raised to limit_sleep_min ({})\n",
                human_duration(policy.min)
            )),
            None => out.push_str(&format!("note: no reset time could be read: nightshift sleeps {} and tries again\n", human_duration(policy.unknown))),
            _ => {}
        }
    }
    out.push_str(&format!("source: {}\n", reading.source));
    out
}

/// When the limit of `reading` lifts (UTC): a usage limit's reset; for transient throttling
/// `now` plus the wait the message states (`Please try again in 9.816s`); `None` when unknown or
/// not a limit.
fn lifts_at(reading: &LimitReading, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match reading.kind {
        LimitKind::UsageLimit => reading.resets_at,
        LimitKind::Transient => reading
            .retry_after
            .and_then(|d| chrono::TimeDelta::from_std(d).ok())
            .map(|d| now + d),
        LimitKind::None | LimitKind::NoCredit => None,
    }
}

/// Whole seconds in the one format of [`crate::duration`] (`6h`, `1h12m`, `45s`).
fn human_duration(d: Duration) -> String {
    crate::duration::format(Duration::from_secs(d.as_secs()))
}

pub(super) fn rfc3339_utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_lifts_when_its_stated_wait_ends() {
        let now = DateTime::parse_from_rfc3339("2026-03-04T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut r = LimitReading {
            kind: LimitKind::Transient,
            resets_at: None,
            retry_after: Some(Duration::from_millis(20_500)),
            source: "t".into(),
            message: "Please try again in 20.5s".into(),
        };
        let v = explain(&r, now, Tz::UTC, &SleepPolicy::default());
        assert_eq!(v["resets_at"], "2026-03-04T12:00:20.500Z", "{v}");
        assert_eq!(v["resets_at_local"], "2026-03-04T12:00:20.500+00:00", "{v}");
        r.retry_after = None;
        assert!(explain(&r, now, Tz::UTC, &SleepPolicy::default())["resets_at"].is_null());
    }
}
