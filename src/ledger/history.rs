//! The rows `report --history` reads (docs/commands.md#report-history): every
//! run item of a repository's runs since an instant, with what became of its
//! PR, and the time each run slept at usage limits. Rows only: the nights,
//! totals and rates are [`crate::history`]'s to count.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

use crate::outcome::{Outcome, PrRecord};

use super::text::Result;

/// One run item of the history, with its run and its PR's fate.
#[derive(Debug, Clone, FromRow)]
pub struct HistoryRow {
    /// The run.
    pub run_id: Uuid,
    /// When the run started (UTC).
    pub started_at: DateTime<Utc>,
    /// The item's title.
    pub title: String,
    /// How the item ended (`None` while running).
    pub outcome: Option<Outcome>,
    /// Rounds used.
    pub rounds: i32,
    /// Tokens used.
    pub tokens: i64,
    /// Cost in USD, where reported.
    pub cost_usd: Option<f64>,
    /// Its PR's number, if it has one.
    pub pr_number: Option<i64>,
    /// Where that PR stands, as last learnt.
    pub pr_state: Option<PrRecord>,
    /// When the PR row was created (UTC).
    pub pr_created_at: Option<DateTime<Utc>>,
    /// When the PR was merged (UTC), if it was.
    pub merged_at: Option<DateTime<Utc>>,
    /// Its PR's CI state as the run's watch ended it (`ci_pending` for a
    /// watch its run left open); `None` when its CI was not watched
    /// (docs/github.md#ci).
    pub ci_state: Option<String>,
}

/// The run items of `repo`'s runs started at or after `since`, by run start,
/// run and plan index.
///
/// # Errors
/// Database errors.
pub async fn history_rows(
    pool: &PgPool,
    repo: &str,
    since: DateTime<Utc>,
) -> Result<Vec<HistoryRow>> {
    sqlx::query_as(
        "SELECT r.id AS run_id, r.started_at, i.title, i.outcome, i.rounds, i.tokens, i.cost_usd, i.pr_number, \
                p.state AS pr_state, p.created_at AS pr_created_at, p.merged_at, \
                CASE WHEN w.id IS NULL THEN NULL ELSE coalesce(w.ci_state, 'ci_pending') END AS ci_state \
         FROM runs r JOIN run_items i ON i.run_id = r.id \
         LEFT JOIN pull_requests p ON p.repo = r.repo AND p.item_key = i.item_key AND p.number = i.pr_number \
         LEFT JOIN ci_watches w ON w.run_id = r.id AND w.item_key = i.item_key \
         WHERE r.repo = $1 AND r.started_at >= $2 ORDER BY r.started_at, r.id, i.item_index",
    )
    .bind(repo)
    .bind(since)
    .fetch_all(pool)
    .await
}

/// Seconds slept at usage limits by each of `repo`'s runs started at or
/// after `since` that slept: `(run, seconds)`.
///
/// # Errors
/// Database errors.
pub async fn slept_by_run(
    pool: &PgPool,
    repo: &str,
    since: DateTime<Utc>,
) -> Result<Vec<(Uuid, f64)>> {
    sqlx::query_as(
        "SELECT s.run_id, sum(extract(epoch FROM s.slept_until - s.slept_from))::float8 FROM limit_sleeps s \
         JOIN runs r ON r.id = s.run_id WHERE r.repo = $1 AND r.started_at >= $2 GROUP BY s.run_id",
    )
    .bind(repo)
    .bind(since)
    .fetch_all(pool)
    .await
}
