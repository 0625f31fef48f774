//! The `approvals` and `approval_uses` tables (docs/ledger.md#tables): insert-only
//! approval rows and which run consumed each (both refuse updates and
//! deletes by trigger). Rows only: signing and checking an approval is
//! [`crate::approval`]'s.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

use super::text::Result;

/// An approval row, with the run that consumed it (`approval_uses`) if one
/// did.
#[derive(Debug, Clone, FromRow)]
pub struct ApprovalRow {
    /// Row id.
    pub id: Uuid,
    /// The plan it approves (drain), or
    pub plan_sha: Option<String>,
    /// the contract it approves (run).
    pub contract_sha: Option<String>,
    /// When it was given (UTC, microseconds).
    pub created_at: DateTime<Utc>,
    /// When it expires (UTC).
    pub expires_at: DateTime<Utc>,
    /// The run that consumed it (its `approval_uses` row), else the first
    /// run that names it (a use record deleted by someone who dropped the
    /// trigger does not make it unused); `None` when neither exists.
    pub used_by: Option<Uuid>,
    /// The repository identity it was given for.
    pub repo: String,
    /// Hex HMAC-SHA256 of `approval::signed_message` by the data
    /// directory's key; `None` for a row not written by `approve`.
    pub signature: Option<String>,
}

const APPROVAL_COLUMNS: &str = "SELECT a.id, a.plan_sha, a.contract_sha, a.created_at, a.expires_at, coalesce(u.run_id, (SELECT r.id FROM runs r WHERE r.approval_id = a.id ORDER BY r.started_at LIMIT 1)) AS used_by, a.repo, a.signature FROM approvals a LEFT JOIN approval_uses u ON u.approval_id = a.id";

/// Records approval `a` (its `used_by` is ignored), given by `by`. The row
/// is never updated afterwards.
///
/// # Errors
/// Database errors.
pub async fn insert_approval(pool: &PgPool, a: &ApprovalRow, by: &str) -> Result<()> {
    sqlx::query("INSERT INTO approvals (id, plan_sha, contract_sha, repo, approved_by, created_at, expires_at, signature) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
        .bind(a.id)
        .bind(&a.plan_sha)
        .bind(&a.contract_sha)
        .bind(&a.repo)
        .bind(by)
        .bind(a.created_at)
        .bind(a.expires_at)
        .bind(&a.signature)
        .execute(pool)
        .await?;
    Ok(())
}

/// Approvals of `sha` (plan or contract) for `repo`, newest first.
///
/// # Errors
/// Database errors.
pub async fn approvals_of(pool: &PgPool, repo: &str, sha: &str) -> Result<Vec<ApprovalRow>> {
    let q = format!(
        "{APPROVAL_COLUMNS} WHERE a.repo = $1 AND (a.plan_sha = $2 OR a.contract_sha = $2) ORDER BY a.created_at DESC"
    );
    sqlx::query_as::<_, ApprovalRow>(sqlx::AssertSqlSafe(q))
        .bind(repo)
        .bind(sha)
        .fetch_all(pool)
        .await
}

/// Unused (no use recorded, no run names it), unexpired plan approvals of
/// `repo`, newest first (whether
/// their signatures hold is the caller's to check).
///
/// # Errors
/// Database errors.
pub async fn usable_plan_approvals(
    pool: &PgPool,
    repo: &str,
    now: DateTime<Utc>,
) -> Result<Vec<ApprovalRow>> {
    let q = format!(
        "{APPROVAL_COLUMNS} WHERE a.repo = $1 AND a.plan_sha IS NOT NULL AND u.run_id IS NULL AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.approval_id = a.id) AND a.expires_at > $2 ORDER BY a.created_at DESC"
    );
    sqlx::query_as::<_, ApprovalRow>(sqlx::AssertSqlSafe(q))
        .bind(repo)
        .bind(now)
        .fetch_all(pool)
        .await
}

/// One approval by id.
///
/// # Errors
/// Database errors.
pub async fn approval_by_id(pool: &PgPool, id: Uuid) -> Result<Option<ApprovalRow>> {
    let q = format!("{APPROVAL_COLUMNS} WHERE a.id = $1");
    sqlx::query_as::<_, ApprovalRow>(sqlx::AssertSqlSafe(q))
        .bind(id)
        .fetch_optional(pool)
        .await
}
