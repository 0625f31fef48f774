//! What the night does with an agent call's quota gauges
//! (docs/limits.md#reserve, docs/limits.md#overage): the reserve of the
//! long windows (an account whose reading reaches `100% - reserve` starts
//! no new item or round until the window resets, on every worker and host,
//! through the ledger's `quota_stops`), and paid overage with `[quota]
//! overage = "never"` (the account pauses as at a usage limit once the
//! round that saw it is done). The
//! readings themselves are recorded with the call ([`super::record`]); how
//! they are read is [`crate::limit::gauge`]'s.

use chrono::{DateTime, Utc};

use crate::agent::{self, Role};
use crate::config::{AgentConfig, Overage};
use crate::error::Error;
use crate::ledger::quota as rows;
use crate::limit::{Gauge, LimitKind, LimitReading};

use super::{Night, local};

/// The reserve (percent) that applies to `g` under `night`'s `[quota]`:
/// `reserve` for the windows longer than 5 hours, `session_reserve` (when
/// set) for the 5-hour one; `None` when no reserve applies or it is 0.
fn reserve_of(night: &Night, g: &Gauge) -> Option<f64> {
    let q = &night.config.quota;
    let r = if g.is_long() {
        Some(q.reserve)
    } else if g.is_session() {
        q.session_reserve
    } else {
        None
    };
    r.filter(|r| *r > 0.0)
}

/// Until when an account whose window `g` crossed the reserve starts
/// nothing: the window's reset when it lies ahead, else the deadline.
fn stop_until(night: &Night, g: &Gauge, now: DateTime<Utc>) -> DateTime<Utc> {
    g.resets_at.filter(|t| *t > now).unwrap_or(night.deadline)
}

/// Acts on the gauges of a call of `cfg`'s account (recorded already):
/// a long window at or over `100% - reserve` stops the account (a row of
/// `quota_stops` every worker reads before its next item or round); a
/// reading under it of a later window (it reset) ends a running stop of
/// that window: every worker resumes. Overage is acted on at the next round's start
/// ([`overage_pause`]). `worker` and `run` are who saw it. A call without
/// gauges changes nothing.
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn after_call(
    night: &Night,
    cfg: &AgentConfig,
    report: &agent::Report,
    run: uuid::Uuid,
    worker: &str,
) -> Result<(), Error> {
    let (pool, account) = (&night.pool, cfg.account());
    let now = night.clock.now();
    for g in &report.gauges {
        log_reading(&account, g);
        let Some(reserve) = reserve_of(night, g) else {
            continue;
        };
        let Some(percent) = g.usable_percent() else {
            continue;
        };
        if percent >= 100.0 - reserve {
            if night
                .db(|| rows::stopped(pool, &account, &g.window))
                .await?
            {
                continue;
            }
            let row = rows::StopRow {
                account: &account,
                window: &g.window,
                percent,
                reserve,
                resets_at: g.resets_at,
                until: stop_until(night, g, now),
                run_id: Some(run),
                worker,
            };
            night.db(|| rows::record_stop(pool, &row)).await?;
            tracing::warn!(account = %account, window = %g.window, percent, reserve, "quota reserve reached: the account starts no new item or round");
        } else {
            let ended = night
                .db(|| rows::end_stops(pool, &account, &g.window, g.resets_at))
                .await?;
            if ended > 0 {
                tracing::info!(account = %account, window = %g.window, percent, "quota window under the reserve again: the account resumes");
            }
        }
    }
    Ok(())
}

/// Until when an account drawing on overage pauses: the latest reset
/// ahead among the plan windows of `gauges` (one call's readings) that are
/// refused or full (the plan's limit), else among all of them, else an hour
/// from `now`.
fn overage_until(gauges: &[Gauge], now: DateTime<Utc>) -> DateTime<Utc> {
    let ahead = |g: &&Gauge| g.window != "overage" && g.resets_at.is_some_and(|t| t > now);
    let full = |g: &&Gauge| {
        g.status.as_deref() == Some("rejected") || g.usable_percent().is_some_and(|p| p >= 100.0)
    };
    let latest = |gs: Vec<&Gauge>| gs.iter().filter_map(|g| g.resets_at).max();
    let gs: Vec<&Gauge> = gauges.iter().filter(ahead).collect();
    latest(gs.iter().copied().filter(full).collect())
        .or_else(|| latest(gs))
        .unwrap_or(now + chrono::Duration::hours(1))
}

/// A recorded reading as a gauge (for the rules of [`Gauge`]).
fn gauge_of(r: &rows::Reading) -> Gauge {
    Gauge {
        source: if r.source == "codex" {
            crate::limit::GaugeSource::Codex
        } else {
            crate::limit::GaugeSource::Claude
        },
        window: r.quota_window.clone(),
        window_minutes: r.window_minutes,
        percent: r.percent,
        raw_utilization: r.raw_utilization.clone(),
        status: r.status.clone(),
        resets_at: r.resets_at,
        overage_in_use: r.overage_in_use,
        overage_status: r.overage_status.clone(),
        raw: serde_json::Value::Null,
    }
}

/// With `[quota] overage = "never"` (docs/limits.md#overage): when the
/// latest call of `cfg`'s account (on any worker or host) read paid
/// overage in use, the account pauses as at a usage limit, until the plan
/// window resets: a usage-limit reading with that reset, for the start of
/// the next round (the round that saw it finished). `None` when overage is
/// allowed, not in use, or its pause has passed.
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn overage_pause(
    night: &Night,
    cfg: &AgentConfig,
) -> Result<Option<LimitReading>, Error> {
    if night.config.quota.overage != Overage::Never {
        return Ok(None);
    }
    let (pool, account) = (&night.pool, cfg.account());
    let latest = night.db(|| rows::latest_of(pool, &account)).await?;
    let Some(last) = latest.iter().map(|r| r.read_at).max() else {
        return Ok(None);
    };
    // The windows of the account's latest call (recorded together).
    let call: Vec<Gauge> = latest
        .iter()
        .filter(|r| r.read_at == last)
        .map(gauge_of)
        .collect();
    let Some(g) = call.iter().find(|g| g.says_overage()) else {
        return Ok(None);
    };
    let now = night.clock.now();
    let until = overage_until(&call, now);
    if until <= now {
        return Ok(None);
    }
    Ok(Some(LimitReading {
        kind: LimitKind::UsageLimit,
        resets_at: Some(until),
        retry_after: None,
        source: "quota gauge: paid overage in use".into(),
        message: format!(
            "the {account} account is drawing on paid overage ({} window{}) and [quota] overage is \"never\": it pauses as at a usage limit until {}",
            g.window,
            g.status
                .as_deref()
                .map(|s| format!(" {s}"))
                .unwrap_or_default(),
            local(until, night.tz)
        ),
    }))
}

/// Logs a reading at each 10 % step it has reached, for `drain`'s log.
fn log_reading(account: &str, g: &Gauge) {
    match g.usable_percent() {
        Some(p) => {
            let step = (p / 10.0).floor() * 10.0;
            tracing::info!(account = %account, window = %g.window, percent = p, step, resets_at = ?g.resets_at, "quota gauge");
        }
        None => {
            tracing::info!(account = %account, window = %g.window, raw = ?g.raw_utilization, "quota gauge without a usable utilization")
        }
    }
}

/// A reserve stop that keeps the item from starting
/// (docs/limits.md#reserve): why (the window, its use, the reserve and the
/// reset in the words), until when, and the account.
struct Held {
    why: String,
    until: DateTime<Utc>,
    resets_at: Option<DateTime<Utc>>,
    account: String,
}

/// The running reserve stop (recorded by any worker on any host) of the
/// writer's or the reviewer's account that keeps new items and rounds from
/// starting, if one does: every agent of the role stopped (the configured
/// one's, with its fallback's account stopped too).
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
async fn held(night: &Night) -> Result<Option<Held>, Error> {
    for (role, cfg) in [
        (Role::Writer, &night.config.writer),
        (Role::Reviewer, &night.config.reviewer),
    ] {
        let account = cfg.account();
        // A fallback free of a stop lets the item start (docs/limits.md#fallback).
        let Some(stop) = all_stopped(night, cfg).await? else {
            continue;
        };
        let reset = stop
            .resets_at
            .map(|t| format!("resets at {}", local(t, night.tz)))
            .unwrap_or_else(|| "reset unknown".into());
        let why = format!(
            "the {} agent's account {account:?} has used {:.0}% of its {} window ({reset}); [quota] reserve keeps {:.0}% for the day, so nothing more of it starts until {}",
            role.as_str(),
            stop.percent,
            stop.quota_window,
            stop.reserve,
            local(stop.until, night.tz)
        );
        return Ok(Some(Held {
            why,
            until: stop.until,
            resets_at: stop.resets_at,
            account,
        }));
    }
    Ok(None)
}

/// How long a worker waiting for a reserve stop sleeps between looks at
/// the ledger: another worker's reading of the reset window ends the stop
/// early (docs/limits.md#reserve), and every waiting worker sees it then.
const RESERVE_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// How a wait for a reserve stop ended ([`wait_reserve`]).
pub(super) enum Reserve {
    /// No stop holds the item's accounts (any more): it may start.
    Free,
    /// A stop lasts until the deadline or later: the reason the item ends
    /// `quota_reserved` with.
    Reserved(String),
    /// A signal came while waiting.
    Signal,
}

/// Before an item or a round (docs/limits.md#reserve): while a reserve
/// stop holds the writer's or the reviewer's account and ends before the
/// deadline (the window resets tonight), waits for it — recorded as a
/// `quota_reserve` sleep of item `item_id` — looking at the ledger every
/// [`RESERVE_POLL`], so that a stop another worker ended (it read the reset
/// window) or one that expired lets every waiting worker go on. A stop that
/// lasts until the deadline is not waited for: [`Reserve::Reserved`].
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn wait_reserve(
    night: &Night,
    record: &super::record::Record<'_>,
    (run_id, item_id): (uuid::Uuid, Option<i64>),
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Reserve, Error> {
    let mut recorded = None;
    loop {
        let Some(h) = held(night).await? else {
            if recorded.is_some() {
                tracing::info!("quota reserve stop over: the account resumes");
            }
            return Ok(Reserve::Free);
        };
        if h.until >= night.deadline {
            return Ok(Reserve::Reserved(h.why));
        }
        let now = night.clock.now();
        if recorded != Some(h.until) {
            let sleep = crate::ledger::limits::LimitSleep {
                run_id,
                item_id,
                agent: &h.account,
                kind: "quota_reserve",
                message: &h.why,
                from: now,
                until: h.until,
                resets_at: h.resets_at,
            };
            record.limit_sleep(&sleep).await?;
            record.sleeping(h.until, &h.account, sleep.kind).await?;
            tracing::info!(account = %h.account, until = %h.until, "quota reserve: waiting for the window to reset");
            recorded = Some(h.until);
        }
        let poll = chrono::Duration::from_std(RESERVE_POLL).unwrap_or_default();
        let next = h.until.min(now + poll);
        let slept = crate::schedule::sleep_until(
            night.clock.as_ref(),
            next,
            cancel,
            crate::schedule::DEFAULT_SLICE,
        )
        .await;
        if slept == crate::schedule::SleepOutcome::Cancelled {
            return Ok(Reserve::Signal);
        }
    }
}

/// The reserve stop that keeps `primary` (`[writer]` or `[reviewer]`) and
/// its fallback, if any, from starting: `primary`'s stop when the
/// fallback's account is stopped too; `None` when one of them is free.
async fn all_stopped(night: &Night, primary: &AgentConfig) -> Result<Option<rows::Stop>, Error> {
    let pool = &night.pool;
    let fallback = night.config.fallback_of(primary).map(|(_, a)| a.account());
    let mut first = None;
    for account in std::iter::once(primary.account()).chain(fallback) {
        match night.db(|| rows::running_stop(pool, &account)).await? {
            Some(stop) => {
                first.get_or_insert(stop);
            }
            None => return Ok(None),
        }
    }
    Ok(first)
}
