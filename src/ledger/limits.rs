//! The `limit_sleeps` table (docs/ledger.md#tables, docs/limits.md#sleep-policy):
//! usage-limit sleeps and throttling waits. Not how a limit is read from an
//! agent's output (that is [`crate::limit`]'s).

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::text::{Result, pg};

/// One usage-limit sleep or throttling wait, as the `limit_sleeps` table
/// keeps it (docs/ledger.md#tables, docs/limits.md#sleep-policy).
#[derive(Debug, Clone)]
pub struct LimitSleep<'a> {
    /// The run that slept.
    pub run_id: Uuid,
    /// The item whose call hit the limit, if any.
    pub item_id: Option<i64>,
    /// The agent kind (`claude`, `codex`, `command`).
    pub agent: &'a str,
    /// A usage limit (slept until its reset) or throttling (a short wait).
    pub kind: &'a str,
    /// The agent's own words, redacted.
    pub message: &'a str,
    /// When the sleep began (UTC).
    pub from: DateTime<Utc>,
    /// When it ends (UTC).
    pub until: DateTime<Utc>,
    /// When the agent said the limit resets (UTC), if it said.
    pub resets_at: Option<DateTime<Utc>>,
}

/// Records a usage-limit sleep.
///
/// # Errors
/// Database errors.
pub async fn record_limit_sleep(db: impl PgExecutor<'_>, s: &LimitSleep<'_>) -> Result<()> {
    sqlx::query("INSERT INTO limit_sleeps (run_id, run_item_id, agent, kind, message, slept_from, slept_until, resets_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
        .bind(s.run_id)
        .bind(s.item_id)
        .bind(s.agent)
        .bind(s.kind)
        .bind(pg(s.message))
        .bind(s.from)
        .bind(s.until)
        .bind(s.resets_at)
        .execute(db)
        .await?;
    Ok(())
}

/// Seconds slept at usage limits during a run.
///
/// # Errors
/// Database errors.
pub async fn slept_seconds(pool: &PgPool, run: Uuid) -> Result<i64> {
    let s: Option<f64> = sqlx::query_scalar("SELECT sum(extract(epoch FROM slept_until - slept_from))::float8 FROM limit_sleeps WHERE run_id = $1").bind(run).fetch_one(pool).await?;
    Ok(s.unwrap_or(0.0) as i64)
}
