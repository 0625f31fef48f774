//! The `pull_requests` table (docs/ledger.md#tables, docs/github.md): the PR
//! row of each item branch nightshift pushed, its state, body and pushed
//! head. Not GitHub itself (that is `forge`).

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor, PgPool};
use uuid::Uuid;

use crate::outcome::PrRecord;

use super::text::{Result, pg};

/// A PR nightshift opened (or pushed a branch for).
#[derive(Debug, Clone, FromRow)]
pub struct PrRow {
    /// Item key.
    pub item_key: String,
    /// Branch.
    pub branch: String,
    /// PR number (None: pushed, PR not created yet).
    pub number: Option<i64>,
    /// PR URL.
    pub url: Option<String>,
    /// Where its PR stands.
    pub state: PrRecord,
    /// Contract it was made under.
    pub contract_sha: String,
}

/// The PR row of an item's branch, as [`upsert_pr`] writes it
/// (docs/ledger.md#tables, docs/github.md#pull-requests).
#[derive(Debug, Clone)]
pub struct PrUpsert<'a> {
    /// Repository identity.
    pub repo: &'a str,
    /// Item key.
    pub key: &'a str,
    /// The contract the branch was made under.
    pub contract_sha: &'a str,
    /// The run that writes the row.
    pub run: Uuid,
    /// The pushed branch.
    pub branch: &'a str,
    /// PR number, once GitHub made it (`None` keeps a known one).
    pub number: Option<u64>,
    /// PR URL, once GitHub made it (`None` keeps a known one).
    pub url: Option<&'a str>,
    /// Where its PR stands.
    pub state: PrRecord,
    /// The PR body (kept to open the PR later).
    pub body: &'a str,
}

/// Upserts the PR row of an item's branch.
///
/// # Errors
/// Database errors.
pub async fn upsert_pr(db: impl PgExecutor<'_>, p: &PrUpsert<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO pull_requests (repo, item_key, contract_sha, run_id, branch, number, url, state, body, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), now()) \
         ON CONFLICT (repo, item_key, branch) DO UPDATE SET number = coalesce(EXCLUDED.number, pull_requests.number), url = coalesce(EXCLUDED.url, pull_requests.url), state = EXCLUDED.state, body = EXCLUDED.body, contract_sha = EXCLUDED.contract_sha, run_id = EXCLUDED.run_id, updated_at = now()",
    )
    .bind(p.repo)
    .bind(p.key)
    .bind(p.contract_sha)
    .bind(p.run)
    .bind(p.branch)
    .bind(p.number.map(|n| n as i64))
    .bind(p.url)
    .bind(p.state)
    .bind(pg(p.body))
    .execute(db)
    .await?;
    Ok(())
}

/// The PR rows of an item key (newest first).
///
/// # Errors
/// Database errors.
pub async fn prs_of_item(pool: &PgPool, repo: &str, key: &str) -> Result<Vec<PrRow>> {
    sqlx::query_as::<_, PrRow>("SELECT item_key, branch, number, url, state, contract_sha FROM pull_requests WHERE repo = $1 AND item_key = $2 ORDER BY updated_at DESC")
        .bind(repo)
        .bind(key)
        .fetch_all(pool)
        .await
}

/// How many of `repo`'s item PRs the ledger holds open, or waiting to be
/// opened (a branch pushed without its PR: `planned`, `pr_failed`), not
/// counting `except_key`'s own: the review queue `max_open_prs` counts
/// when GitHub cannot be asked (docs/loop.md#before-the-checkout).
///
/// # Errors
/// Database errors.
pub async fn review_queue(pool: &PgPool, repo: &str, except_key: &str) -> Result<i64> {
    let states = [PrRecord::Open, PrRecord::Planned, PrRecord::PrFailed].map(PrRecord::as_str);
    sqlx::query_scalar(
        "SELECT count(*) FROM pull_requests WHERE repo = $1 AND item_key <> $2 AND state = ANY($3::text[])",
    )
    .bind(repo)
    .bind(except_key)
    .bind(&states[..])
    .fetch_one(pool)
    .await
}

/// The PR rows of several item keys at once (newest first), for `plan`,
/// which asks about every item of a backlog: one statement, not one per
/// item.
///
/// # Errors
/// Database errors.
pub async fn prs_of_items(pool: &PgPool, repo: &str, keys: &[&str]) -> Result<Vec<PrRow>> {
    sqlx::query_as::<_, PrRow>("SELECT item_key, branch, number, url, state, contract_sha FROM pull_requests WHERE repo = $1 AND item_key = ANY($2::text[]) ORDER BY updated_at DESC")
        .bind(repo)
        .bind(keys)
        .fetch_all(pool)
        .await
}

/// The stored body of an item's PR on `branch` (to open a `pr_failed` PR).
///
/// # Errors
/// Database errors (also when there is no such row).
pub async fn pr_body(pool: &PgPool, repo: &str, key: &str, branch: &str) -> Result<String> {
    sqlx::query_scalar(
        "SELECT body FROM pull_requests WHERE repo = $1 AND item_key = $2 AND branch = $3",
    )
    .bind(repo)
    .bind(key)
    .bind(branch)
    .fetch_one(pool)
    .await
}

/// PRs nightshift opened that are open or merged, oldest first (`sync`).
///
/// # Errors
/// Database errors.
pub async fn opened_prs(pool: &PgPool, repo: &str) -> Result<Vec<PrRow>> {
    sqlx::query_as("SELECT item_key, branch, number, url, state, contract_sha FROM pull_requests WHERE repo = $1 AND number IS NOT NULL AND state = ANY($2) ORDER BY updated_at")
        .bind(repo)
        .bind([PrRecord::Open.as_str(), PrRecord::Merged.as_str()])
        .fetch_all(pool)
        .await
}

/// Updates the state of a known PR (e.g. `merged`, seen on GitHub).
///
/// # Errors
/// Database errors.
pub async fn set_pr_state(
    db: impl PgExecutor<'_>,
    repo: &str,
    key: &str,
    branch: &str,
    state: PrRecord,
) -> Result<()> {
    sqlx::query("UPDATE pull_requests SET state = $4, updated_at = now() WHERE repo = $1 AND item_key = $2 AND branch = $3").bind(repo).bind(key).bind(branch).bind(state).execute(db).await?;
    Ok(())
}

/// A PR nightshift opened that the ledger knows open, with the head it last
/// pushed (for tending, docs/github.md "The second night").
#[derive(Debug, Clone, FromRow)]
pub struct TendRow {
    /// Item key.
    pub item_key: String,
    /// Branch.
    pub branch: String,
    /// PR number.
    pub number: i64,
    /// Contract the PR was made under.
    pub contract_sha: String,
    /// The branch head nightshift last pushed (40 hex); `None` for a PR
    /// pushed before the ledger recorded heads.
    pub head_sha: Option<String>,
    /// When that push was recorded (UTC).
    pub head_pushed_at: Option<DateTime<Utc>>,
}

/// nightshift's PRs of `repo` that are open as far as the ledger knows, by
/// PR number.
///
/// # Errors
/// Database errors.
pub async fn open_prs(pool: &PgPool, repo: &str) -> Result<Vec<TendRow>> {
    sqlx::query_as("SELECT item_key, branch, number, contract_sha, head_sha, head_pushed_at FROM pull_requests WHERE repo = $1 AND number IS NOT NULL AND state = 'open' ORDER BY number")
        .bind(repo)
        .fetch_all(pool)
        .await
}

/// Every branch nightshift pushed in `repo`, any night, with the head it
/// last pushed there (`None` when unrecorded: an old ledger, or a head that
/// could not be read after the push); a branch pushed for several items
/// appears once per row.
///
/// # Errors
/// Database errors.
pub async fn pushed_heads(pool: &PgPool, repo: &str) -> Result<Vec<(String, Option<String>)>> {
    sqlx::query_as("SELECT branch, head_sha FROM pull_requests WHERE repo = $1 ORDER BY branch")
        .bind(repo)
        .fetch_all(pool)
        .await
}

/// Records `sha` as the head nightshift pushed to an item's `branch`, now:
/// called right after each successful push (a first push or a tend), so the
/// next night can tell a person's push from its own.
///
/// # Errors
/// Database errors.
pub async fn set_pr_head(
    db: impl PgExecutor<'_>,
    repo: &str,
    key: &str,
    branch: &str,
    sha: &str,
) -> Result<()> {
    sqlx::query("UPDATE pull_requests SET head_sha = $4, head_pushed_at = now(), updated_at = now() WHERE repo = $1 AND item_key = $2 AND branch = $3")
        .bind(repo)
        .bind(key)
        .bind(branch)
        .bind(sha)
        .execute(db)
        .await?;
    Ok(())
}

/// Replaces the body the ledger keeps for an item's `branch` (a tended PR
/// whose evidence card was rewritten); its run, contract and state stay.
///
/// # Errors
/// Database errors.
pub async fn set_pr_body(
    db: impl PgExecutor<'_>,
    repo: &str,
    key: &str,
    branch: &str,
    body: &str,
) -> Result<()> {
    sqlx::query("UPDATE pull_requests SET body = $4, updated_at = now() WHERE repo = $1 AND item_key = $2 AND branch = $3")
        .bind(repo)
        .bind(key)
        .bind(branch)
        .bind(pg(body))
        .execute(db)
        .await?;
    Ok(())
}

/// The PRs of `repo` whose fate is not settled (open, or never checked), as
/// `(item key, branch, number)`, by number.
///
/// # Errors
/// Database errors.
pub async fn unsettled_prs(pool: &PgPool, repo: &str) -> Result<Vec<(String, String, i64)>> {
    sqlx::query_as(
        "SELECT item_key, branch, number FROM pull_requests \
         WHERE repo = $1 AND number IS NOT NULL AND state = $2 ORDER BY number",
    )
    .bind(repo)
    .bind(PrRecord::Open)
    .fetch_all(pool)
    .await
}

/// What GitHub last said of the PR of item `key` on `branch`: its `state`
/// and when it was merged or closed (UTC), checked now.
///
/// # Errors
/// Database errors.
pub async fn set_pr_fate(
    pool: &PgPool,
    repo: &str,
    key: &str,
    branch: &str,
    state: PrRecord,
    merged_at: Option<DateTime<Utc>>,
    closed_at: Option<DateTime<Utc>>,
) -> Result<()> {
    sqlx::query(
        "UPDATE pull_requests SET state = $4, merged_at = $5, closed_at = $6, checked_at = now() \
         WHERE repo = $1 AND item_key = $2 AND branch = $3",
    )
    .bind(repo)
    .bind(key)
    .bind(branch)
    .bind(state)
    .bind(merged_at)
    .bind(closed_at)
    .execute(pool)
    .await?;
    Ok(())
}
