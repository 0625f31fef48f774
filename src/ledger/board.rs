//! The reads of the live board and the morning page (docs/serve.md): a
//! run's queue of items not yet started, its writer findings, and the ends
//! of an item's recorded output. Rows only; what they mean is the report's
//! view model (`report::board`).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::text::Result;

/// An item of a run's queue that no worker has started.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Waiting {
    /// Its place in the queue (from 0, backlog order).
    pub position: i32,
    /// Its key.
    pub item_key: String,
    /// Its title, from its contract.
    pub title: String,
}

/// The items of run `run`'s queue not done and never claimed, in order.
///
/// # Errors
/// Database errors.
pub async fn waiting(pool: &PgPool, run: Uuid) -> Result<Vec<Waiting>> {
    sqlx::query_as(
        "SELECT q.position, q.item_key, c.title FROM run_queue q JOIN contracts c ON c.sha = q.contract_sha \
         WHERE q.run_id = $1 AND q.done_at IS NULL \
           AND NOT EXISTS (SELECT 1 FROM claims k WHERE k.run_id = q.run_id AND k.item_key = q.item_key AND k.ended_at IS NULL) \
           AND NOT EXISTS (SELECT 1 FROM run_items i WHERE i.run_id = q.run_id AND i.item_key = q.item_key) \
         ORDER BY q.position",
    )
    .bind(run)
    .fetch_all(pool)
    .await
}

/// A writer finding of a run.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Finding {
    /// The item's key.
    pub item_key: String,
    /// The finding's title (masked).
    pub title: String,
    /// The issue it was filed as, if any.
    pub url: Option<String>,
}

/// The writer findings of run `run`, oldest first.
///
/// # Errors
/// Database errors.
pub async fn findings(pool: &PgPool, run: Uuid) -> Result<Vec<Finding>> {
    sqlx::query_as(
        "SELECT i.item_key, f.title, f.url FROM findings f JOIN run_items i ON i.id = f.run_item_id \
         WHERE i.run_id = $1 ORDER BY f.id",
    )
    .bind(run)
    .fetch_all(pool)
    .await
}

/// One recorded piece of an item's output: an agent call's or a gate
/// command's tail (masked when written).
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct OutputTail {
    /// `writer`, `reviewer`, … or `gate`.
    pub what: String,
    /// When it ended (server clock).
    pub at: DateTime<Utc>,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The end of its output.
    pub tail: String,
}

/// The last `n` pieces of output recorded for item `key` of run `run`
/// (agent calls and gate commands of its last attempt, and the live end of
/// the call running now, `PHASE (running)`), oldest first.
///
/// # Errors
/// Database errors.
pub async fn output(pool: &PgPool, run: Uuid, key: &str, n: i64) -> Result<Vec<OutputTail>> {
    let mut rows: Vec<OutputTail> = sqlx::query_as(
        "SELECT * FROM ( \
           SELECT a.role AS what, a.started_at + make_interval(secs => a.duration_ms / 1000.0) AS at, a.exit_code, \
                  CASE WHEN a.stderr_tail = '' THEN a.stdout_tail ELSE a.stdout_tail || E'\\n' || a.stderr_tail END AS tail \
             FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id WHERE i.run_id = $1 AND i.item_key = $2 \
           UNION ALL \
           SELECT 'gate', coalesce(r.ended_at, r.started_at), g.exit_code, g.command || E'\\n' || g.output_tail \
             FROM gate_runs g JOIN rounds r ON r.id = g.round_id JOIN run_items i ON i.id = r.run_item_id \
            WHERE i.run_id = $1 AND i.item_key = $2 \
           UNION ALL \
           SELECT coalesce(w.phase, 'call') || ' (running)', w.output_at, NULL::integer, w.output_tail \
             FROM workers w WHERE w.run_id = $1 AND w.item_key = $2 AND w.stopped_at IS NULL \
              AND w.output_tail IS NOT NULL \
         ) o ORDER BY at DESC LIMIT $3",
    )
    .bind(run)
    .bind(key)
    .bind(n)
    .fetch_all(pool)
    .await?;
    rows.reverse();
    Ok(rows)
}
