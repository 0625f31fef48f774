//! The `ci_watches` and `ci_checks` tables (docs/ledger.md#tables,
//! docs/github.md#ci): one watch of a PR's checks per item of a run, the
//! head it follows, how it ended, and the checks it saw. Rows only: when a
//! watch ends, and in which state, is `run`'s.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::outcome::{CiState, Event};

use super::text::{Result, pg, pgo};

/// A watch as the ledger keeps it.
#[derive(Debug, Clone, FromRow)]
pub struct WatchRow {
    pub id: i64,
    pub run_id: Uuid,
    pub item_key: String,
    pub pr_number: i64,
    /// The head commit followed now.
    pub head_sha: String,
    /// The base commit the run started from.
    pub base_sha: Option<String>,
    /// `None` while the watch goes on.
    pub ci_state: Option<CiState>,
    pub reason: Option<String>,
    /// No required check was known: every reported check counted.
    pub all_reported: bool,
    pub fix_rounds: i32,
    pub started_at: DateTime<Utc>,
    /// When the watch gives up waiting (`ci_wait` after the latest push,
    /// capped by the deadline).
    pub wait_until: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// One check a watch saw, for one head.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct CheckRow {
    pub head_sha: String,
    pub name: String,
    pub required: bool,
    /// GitHub's conclusion, or its status while running.
    pub conclusion: String,
    pub url: Option<String>,
}

/// What [`open_watch`] writes.
#[derive(Debug, Clone)]
pub struct NewWatch<'a> {
    pub run: Uuid,
    pub key: &'a str,
    pub pr_number: u64,
    pub head_sha: &'a str,
    pub base_sha: Option<&'a str>,
    pub wait_until: DateTime<Utc>,
}

/// Opens the watch of item `key` in run `run`, or, when it has one, points
/// it at the new head (a push by a fix round): the state and end are
/// cleared, the fix rounds kept. Returns the watch's id.
///
/// # Errors
/// Database errors.
pub async fn open_watch(db: impl PgExecutor<'_>, w: &NewWatch<'_>) -> Result<i64> {
    sqlx::query_scalar(
        "WITH w AS (INSERT INTO ci_watches (run_id, item_key, pr_number, head_sha, base_sha, wait_until) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (run_id, item_key) DO UPDATE SET pr_number = EXCLUDED.pr_number, head_sha = EXCLUDED.head_sha, base_sha = coalesce(ci_watches.base_sha, EXCLUDED.base_sha), wait_until = EXCLUDED.wait_until, ci_state = NULL, reason = NULL, ended_at = NULL \
         RETURNING id, run_id, item_key, pr_number, head_sha), \
         e AS (INSERT INTO events (run_id, kind, data) SELECT run_id, $7, jsonb_build_object('key', item_key, 'pr', pr_number, 'head', head_sha) FROM w) \
         SELECT id FROM w",
    )
    .bind(w.run)
    .bind(w.key)
    .bind(w.pr_number as i64)
    .bind(w.head_sha)
    .bind(w.base_sha)
    .bind(w.wait_until)
    .bind(Event::CiWatch.as_str())
    .fetch_one(db)
    .await
}

/// Records the checks watch `watch` saw for `head_sha` (a check seen again
/// is updated: its conclusion changes as it runs).
///
/// # Errors
/// Database errors.
pub async fn record_checks(db: impl PgExecutor<'_>, watch: i64, checks: &[CheckRow]) -> Result<()> {
    if checks.is_empty() {
        return Ok(());
    }
    let heads: Vec<String> = checks.iter().map(|c| pg(&c.head_sha)).collect();
    let names: Vec<String> = checks.iter().map(|c| pg(&c.name)).collect();
    let required: Vec<bool> = checks.iter().map(|c| c.required).collect();
    let conclusions: Vec<String> = checks.iter().map(|c| pg(&c.conclusion)).collect();
    let urls: Vec<Option<String>> = checks.iter().map(|c| pgo(&c.url)).collect();
    sqlx::query(
        "INSERT INTO ci_checks (watch_id, head_sha, name, required, conclusion, url) \
         SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bool[], $5::text[], $6::text[]) \
         ON CONFLICT (watch_id, head_sha, name) DO UPDATE SET required = EXCLUDED.required, conclusion = EXCLUDED.conclusion, url = EXCLUDED.url, seen_at = now()",
    )
    .bind(watch)
    .bind(&heads)
    .bind(&names)
    .bind(&required)
    .bind(&conclusions)
    .bind(&urls)
    .execute(db)
    .await?;
    Ok(())
}

/// Ends watch `watch` in `state` with `reason`; `all_reported` says every
/// reported check counted as required (none were known).
///
/// # Errors
/// Database errors.
pub async fn end_watch(
    db: impl PgExecutor<'_>,
    watch: i64,
    state: CiState,
    reason: Option<&str>,
    all_reported: bool,
) -> Result<()> {
    sqlx::query(
        "WITH w AS (UPDATE ci_watches SET ci_state = $2, reason = $3, all_reported = $4, ended_at = now() WHERE id = $1 \
                    RETURNING run_id, item_key, pr_number, ci_state, reason) \
         INSERT INTO events (run_id, kind, data) SELECT run_id, $5, \
                jsonb_build_object('key', item_key, 'pr', pr_number, 'state', ci_state, 'reason', reason) FROM w",
    )
    .bind(watch)
    .bind(state)
    .bind(reason.map(pg))
    .bind(all_reported)
    .bind(Event::CiEnded.as_str())
    .execute(db)
    .await?;
    Ok(())
}

/// Counts one more fix round of watch `watch`; returns the new count.
///
/// # Errors
/// Database errors.
pub async fn add_fix_round(db: impl PgExecutor<'_>, watch: i64) -> Result<i32> {
    sqlx::query_scalar(
        "UPDATE ci_watches SET fix_rounds = fix_rounds + 1 WHERE id = $1 RETURNING fix_rounds",
    )
    .bind(watch)
    .fetch_one(db)
    .await
}

/// The watches of run `run`, in the order they were opened.
///
/// # Errors
/// Database errors.
pub async fn watches_of_run(db: impl PgExecutor<'_>, run: Uuid) -> Result<Vec<WatchRow>> {
    sqlx::query_as("SELECT id, run_id, item_key, pr_number, head_sha, base_sha, ci_state, reason, all_reported, fix_rounds, started_at, wait_until, ended_at FROM ci_watches WHERE run_id = $1 ORDER BY id")
        .bind(run)
        .fetch_all(db)
        .await
}

/// The checks watch `watch` saw for `head_sha`, by name.
///
/// # Errors
/// Database errors.
pub async fn checks_of(
    db: impl PgExecutor<'_>,
    watch: i64,
    head_sha: &str,
) -> Result<Vec<CheckRow>> {
    sqlx::query_as("SELECT head_sha, name, required, conclusion, url FROM ci_checks WHERE watch_id = $1 AND head_sha = $2 ORDER BY name")
        .bind(watch)
        .bind(head_sha)
        .fetch_all(db)
        .await
}
