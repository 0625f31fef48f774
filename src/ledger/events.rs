//! The `events` table (docs/ledger.md#tables): the append-only event log, and
//! the branches a run pushed as its `pushed` events name them. Not what an
//! event means to the run.

use serde_json::Value;
use sqlx::{PgExecutor, PgPool};
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
