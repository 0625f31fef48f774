//! The `quota_readings` and `quota_stops` tables (docs/ledger.md#tables,
//! docs/limits.md#gauges): every agent call's quota readings per account,
//! and the reserve's stops of an account shared by every worker on every
//! host. Rows only: what a reading means is [`crate::limit::gauge`]'s, what
//! the night does about it the run's.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use super::text::{Result, pg, pgj};

/// One reading to record (a row of `quota_readings`).
#[derive(Debug, Clone)]
pub struct ReadingRow<'a> {
    /// The account of the agent config (`account`, else the kind).
    pub account: &'a str,
    /// `claude` or `codex`.
    pub source: &'a str,
    /// The run of the call, if any.
    pub run_id: Option<Uuid>,
    /// The item of the call, if any.
    pub item_id: Option<i64>,
    /// `writer` or `reviewer`.
    pub role: Option<&'a str>,
    /// The round of the call.
    pub round: Option<i32>,
    /// The window's name as the CLI printed it.
    pub window: &'a str,
    /// The window's length in minutes, when known.
    pub window_minutes: Option<i64>,
    /// Use in percent, as read (may be negative or over 100).
    pub percent: Option<f64>,
    /// The utilization exactly as printed.
    pub raw_utilization: Option<&'a str>,
    /// `allowed`, `allowed_warning`, `rejected`, as printed.
    pub status: Option<&'a str>,
    /// The window's reset, as read.
    pub resets_at: Option<DateTime<Utc>>,
    /// Whether paid overage was in use.
    pub overage_in_use: Option<bool>,
    /// Claude's `overageStatus`.
    pub overage_status: Option<&'a str>,
    /// The object read, unknown fields kept.
    pub raw: Value,
}

/// Records the readings of one agent call.
///
/// # Errors
/// Database errors.
pub async fn record_readings(db: &mut PgConnection, rows: &[ReadingRow<'_>]) -> Result<()> {
    for r in rows {
        sqlx::query(
            "INSERT INTO quota_readings (account, source, run_id, run_item_id, role, round, quota_window, window_minutes, percent, raw_utilization, status, resets_at, overage_in_use, overage_status, raw) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .bind(pg(r.account))
        .bind(r.source)
        .bind(r.run_id)
        .bind(r.item_id)
        .bind(r.role)
        .bind(r.round)
        .bind(pg(r.window))
        .bind(r.window_minutes)
        .bind(r.percent)
        .bind(r.raw_utilization.map(pg))
        .bind(r.status.map(pg))
        .bind(r.resets_at)
        .bind(r.overage_in_use)
        .bind(r.overage_status.map(pg))
        .bind(pgj(r.raw.clone()))
        .execute(&mut *db)
        .await?;
    }
    Ok(())
}

/// A recorded reading, as `status` and `report` show it.
#[derive(Debug, Clone, FromRow, Serialize)]
pub struct Reading {
    /// The account.
    pub account: String,
    /// `claude` or `codex`.
    pub source: String,
    /// The window's name.
    pub quota_window: String,
    /// The window's length in minutes, when known.
    pub window_minutes: Option<i64>,
    /// Use in percent, as read.
    pub percent: Option<f64>,
    /// The utilization exactly as printed.
    pub raw_utilization: Option<String>,
    /// The CLI's status word.
    pub status: Option<String>,
    /// The window's reset, as read.
    pub resets_at: Option<DateTime<Utc>>,
    /// Whether paid overage was in use.
    pub overage_in_use: Option<bool>,
    /// Claude's `overageStatus`.
    pub overage_status: Option<String>,
    /// When it was recorded (server clock).
    pub read_at: DateTime<Utc>,
}

/// The columns of a [`Reading`], for `concat!`.
macro_rules! reading_columns {
    () => {
        "account, source, quota_window, window_minutes, percent, raw_utilization, status, resets_at, overage_in_use, overage_status, read_at"
    };
}

/// The latest reading of every account's every window, by account and
/// window name.
///
/// # Errors
/// Database errors.
pub async fn latest(pool: &PgPool) -> Result<Vec<Reading>> {
    sqlx::query_as(concat!(
        "SELECT DISTINCT ON (account, quota_window) ",
        reading_columns!(),
        " FROM quota_readings ORDER BY account, quota_window, read_at DESC, id DESC"
    ))
    .fetch_all(pool)
    .await
}

/// The latest reading of `account`'s every window.
///
/// # Errors
/// Database errors.
pub async fn latest_of(pool: &PgPool, account: &str) -> Result<Vec<Reading>> {
    sqlx::query_as(concat!(
        "SELECT DISTINCT ON (quota_window) ",
        reading_columns!(),
        " FROM quota_readings WHERE account = $1 ORDER BY quota_window, read_at DESC, id DESC"
    ))
    .bind(account)
    .fetch_all(pool)
    .await
}

/// A run's first and last reading of each account's window, in the order
/// of the first readings: the night's use (`report`).
///
/// # Errors
/// Database errors.
pub async fn run_span(pool: &PgPool, run: Uuid) -> Result<Vec<(Reading, Reading)>> {
    let rows = run_readings(pool, run).await?;
    let mut out: Vec<(Reading, Reading)> = Vec::new();
    for r in rows {
        match out
            .iter_mut()
            .find(|(f, _)| f.account == r.account && f.quota_window == r.quota_window)
        {
            Some((_, last)) => *last = r,
            None => out.push((r.clone(), r)),
        }
    }
    Ok(out)
}

/// Every reading of run `run`, in the order read.
///
/// # Errors
/// Database errors.
pub async fn run_readings(pool: &PgPool, run: Uuid) -> Result<Vec<Reading>> {
    sqlx::query_as(concat!(
        "SELECT ",
        reading_columns!(),
        " FROM quota_readings WHERE run_id = $1 ORDER BY read_at, id"
    ))
    .bind(run)
    .fetch_all(pool)
    .await
}

/// A reserve stop to record (a row of `quota_stops`).
#[derive(Debug, Clone)]
pub struct StopRow<'a> {
    /// The account stopped.
    pub account: &'a str,
    /// The window whose reading crossed the reserve.
    pub window: &'a str,
    /// That reading's use, percent.
    pub percent: f64,
    /// The reserve, percent.
    pub reserve: f64,
    /// The window's reset, when read.
    pub resets_at: Option<DateTime<Utc>>,
    /// Until when the account starts nothing.
    pub until: DateTime<Utc>,
    /// The run that saw it.
    pub run_id: Option<Uuid>,
    /// The worker that saw it.
    pub worker: &'a str,
}

/// Records a reserve stop of an account.
///
/// # Errors
/// Database errors.
pub async fn record_stop(db: impl PgExecutor<'_>, s: &StopRow<'_>) -> Result<()> {
    sqlx::query("INSERT INTO quota_stops (account, quota_window, percent, reserve, resets_at, until, run_id, worker) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
        .bind(pg(s.account))
        .bind(pg(s.window))
        .bind(s.percent)
        .bind(s.reserve)
        .bind(s.resets_at)
        .bind(s.until)
        .bind(s.run_id)
        .bind(s.worker)
        .execute(db)
        .await?;
    Ok(())
}

/// A running reserve stop, as the run reads it.
#[derive(Debug, Clone, FromRow)]
pub struct Stop {
    /// The window whose reading crossed the reserve.
    pub quota_window: String,
    /// That reading's use, percent.
    pub percent: f64,
    /// The reserve, percent.
    pub reserve: f64,
    /// The window's reset, when read.
    pub resets_at: Option<DateTime<Utc>>,
    /// Until when the account starts nothing.
    pub until: DateTime<Utc>,
}

/// The latest running reserve stop of `account` (by the server's clock).
///
/// # Errors
/// Database errors.
pub async fn running_stop(pool: &PgPool, account: &str) -> Result<Option<Stop>> {
    sqlx::query_as("SELECT quota_window, percent, reserve, resets_at, until FROM quota_stops WHERE account = $1 AND until > now() ORDER BY at DESC, id DESC LIMIT 1")
        .bind(account)
        .fetch_optional(pool)
        .await
}

/// Whether `account` has a running reserve stop of `window`.
///
/// # Errors
/// Database errors.
pub async fn stopped(pool: &PgPool, account: &str, window: &str) -> Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM quota_stops WHERE account = $1 AND quota_window = $2 AND until > now())")
        .bind(account)
        .bind(window)
        .fetch_one(pool)
        .await
}

/// Ends `account`'s running stops of `window` now when a reading under
/// the reserve belongs to a later window than the stop's (its reset
/// `resets_at` more than a minute after the stop's, or the stop's reset
/// unknown): the window reset, and every worker of the account resumes. A
/// reading of the same window (a call that read it earlier, another
/// model's traffic) ends nothing. Returns how many were ended.
///
/// # Errors
/// Database errors.
pub async fn end_stops(
    pool: &PgPool,
    account: &str,
    window: &str,
    resets_at: Option<DateTime<Utc>>,
) -> Result<u64> {
    let done = sqlx::query("UPDATE quota_stops SET until = now() WHERE account = $1 AND quota_window = $2 AND until > now() AND (resets_at IS NULL OR $3 > resets_at + interval '1 minute')")
        .bind(account)
        .bind(window)
        .bind(resets_at)
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}

/// One agent call a fallback agent made (docs/limits.md#fallback): the
/// item's key, its round, the role and the fallback's name, from
/// `agent_calls` (`meta.fallback`).
#[derive(Debug, Clone, FromRow, Serialize)]
pub struct FallbackCall {
    /// The item's key.
    pub item_key: String,
    /// The item's index in the plan (from 1).
    pub item_index: i32,
    /// The round (0 when the call was in none).
    pub round: i32,
    /// `writer` or `reviewer`.
    pub role: String,
    /// The agent's kind.
    pub kind: String,
    /// The fallback's name in the config.
    pub agent: String,
}

/// Run `run`'s calls made by fallback agents, one per item, round and role,
/// in the order made.
///
/// # Errors
/// Database errors.
pub async fn fallback_calls(pool: &PgPool, run: Uuid) -> Result<Vec<FallbackCall>> {
    sqlx::query_as(
        "SELECT DISTINCT ON (i.item_key, coalesce(r.n, 0), a.role) i.item_key, i.item_index, coalesce(r.n, 0) AS round, a.role, a.kind, a.meta->>'fallback' AS agent \
         FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id LEFT JOIN rounds r ON r.id = a.round_id \
         WHERE i.run_id = $1 AND a.meta->>'fallback' IS NOT NULL \
         ORDER BY i.item_key, coalesce(r.n, 0), a.role, a.id",
    )
    .bind(run)
    .fetch_all(pool)
    .await
}
