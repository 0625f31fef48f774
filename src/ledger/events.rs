//! The `events` table (docs/ledger.md#tables): the append-only event log,
//! its commit sequence and notifications (docs/serve.md#events), its
//! pruning, and the branches a run pushed as its `pushed` events name them.
//! Not what an event means to the run.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgListener;
use sqlx::{Connection, PgExecutor, PgPool};
use uuid::Uuid;

use super::text::{Result, pgj};

/// Appends to the event log (server-assigned sequence).
///
/// # Errors
/// Database errors.
pub async fn event(
    db: impl PgExecutor<'_>,
    run: Option<Uuid>,
    kind: &str,
    data: Value,
) -> Result<()> {
    sqlx::query("INSERT INTO events (run_id, kind, data) VALUES ($1, $2, $3)")
        .bind(run)
        .bind(kind)
        .bind(pgj(data))
        .execute(db)
        .await?;
    Ok(())
}

/// The data of run `run`'s events of kind `kind`, oldest first.
///
/// # Errors
/// Database errors.
pub async fn of_kind_in_run(pool: &PgPool, run: Uuid, kind: &str) -> Result<Vec<Value>> {
    let rows: Vec<(Value,)> =
        sqlx::query_as("SELECT data FROM events WHERE run_id = $1 AND kind = $2 ORDER BY seq")
            .bind(run)
            .bind(kind)
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(|(d,)| d).collect())
}

/// A branch a run pushed, as its `pushed` event names it: the report and
/// a later PR's body list it as an overlap when it changes some of the same
/// files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// That item's title.
    pub title: String,
    /// Its branch.
    pub branch: String,
    /// Its PR number, when GitHub opened one.
    pub pr_number: Option<u64>,
    /// The files it changes (repository-relative paths); of an overlap,
    /// the files both change.
    pub files: Vec<String>,
}

/// The branches run `run` pushed (its `pushed` events), oldest first, each
/// with its title, the files it changes and its PR number once opened.
///
/// # Errors
/// Database errors.
pub async fn pushed_in_run(pool: &PgPool, repo: &str, run: Uuid) -> Result<Vec<Overlap>> {
    let rows: Vec<(Value, Option<i64>)> = sqlx::query_as(
        "SELECT e.data, p.number FROM events e LEFT JOIN pull_requests p \
           ON p.repo = $1 AND p.item_key = e.data->>'key' AND p.branch = e.data->>'branch' \
         WHERE e.run_id = $2 AND e.kind = $3 ORDER BY e.seq",
    )
    .bind(repo)
    .bind(run)
    .bind(crate::outcome::Event::Pushed.as_str())
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(d, number)| Overlap {
            title: d["title"].as_str().unwrap_or_default().to_string(),
            branch: d["branch"].as_str().unwrap_or_default().to_string(),
            pr_number: number.map(|n| n as u64),
            files: (d["files"].as_array().into_iter().flatten())
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect(),
        })
        .collect())
}

/// The channel every committed event is announced on, its payload only the
/// event's commit sequence number (migration `0024_event_seq.sql`).
pub const CHANNEL: &str = "nightshift_events";

/// One event as a reader of the log sees it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct EventRow {
    /// Its number in commit order: from 1, without gaps, an event committed
    /// later has a larger one.
    pub seq: i64,
    /// When it was written (server clock).
    pub at: DateTime<Utc>,
    /// The run that wrote it, if any.
    pub run_id: Option<Uuid>,
    /// Its kind (`outcome::Event`'s words, and `run_finished`).
    pub kind: String,
    /// What it says; text in it is masked as every row is.
    pub data: Value,
}

/// The committed events numbered after `after`, oldest first, at most
/// `limit` of them.
///
/// # Errors
/// Database errors.
pub async fn after(pool: &PgPool, after: i64, limit: i64) -> Result<Vec<EventRow>> {
    sqlx::query_as(
        "SELECT commit_seq AS seq, at, run_id, kind, data FROM events \
         WHERE commit_seq > $1 ORDER BY commit_seq LIMIT $2",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The number of the last committed event (0 when none was).
///
/// # Errors
/// Database errors.
pub async fn last(pool: &PgPool) -> Result<i64> {
    sqlx::query_scalar("SELECT last FROM event_counter")
        .fetch_one(pool)
        .await
}

/// A listener on [`CHANNEL`] through `pool`'s connection options. A
/// notification names only a number: after a reconnect (when notifications
/// were lost) the reader reads the log again from its last number.
///
/// # Errors
/// Database errors.
pub async fn listen(pool: &PgPool) -> Result<PgListener> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Deletes the events written more than `keep` ago, except those of a run
/// still marked `running` (its events stay while it is live); returns how
/// many. `keep` comes from `[serve] retention` (docs/serve.md#pruning).
///
/// # Errors
/// Database errors.
pub async fn prune(pool: &PgPool, keep: std::time::Duration) -> Result<u64> {
    let mut c = pool.acquire().await?;
    let mut tx = c.begin().await?;
    sqlx::query("SELECT set_config('nightshift.prune_events', 'on', true)")
        .execute(&mut *tx)
        .await?;
    let gone = sqlx::query(
        "DELETE FROM events e WHERE e.at < now() - make_interval(secs => $1) \
         AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = e.run_id AND r.status = 'running')",
    )
    .bind(keep.as_secs_f64())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(gone)
}
