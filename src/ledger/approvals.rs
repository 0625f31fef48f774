//! The `approvals` and `approval_uses` tables (docs/ledger.md#tables): insert-only
//! approval rows and which run consumed each. Rows only: signing and checking
//! an approval is [`crate::approval`]'s.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::approval::{self, Approval};

use super::text::Result;

const APPROVAL_COLUMNS: &str = "SELECT a.id, a.plan_sha, a.contract_sha, a.created_at, a.expires_at, u.run_id AS used_by, a.repo, a.signature FROM approvals a LEFT JOIN approval_uses u ON u.approval_id = a.id";

/// Records an approval of a plan (or, with `is_contract`, of one contract),
/// signed with `key` ([`approval::sign`]). The row is never updated
/// afterwards.
///
/// # Errors
/// Database errors.
pub async fn insert_approval(
    pool: &PgPool,
    repo: &str,
    sha: &str,
    is_contract: bool,
    by: &str,
    key: &approval::Key,
) -> Result<Approval> {
    use chrono::SubsecRound;
    // The ledger keeps microseconds: sign what it will give back.
    let now = Utc::now().trunc_subsecs(6);
    let (plan, contract) = if is_contract {
        (None, Some(sha))
    } else {
        (Some(sha), None)
    };
    let mut a = Approval {
        id: Uuid::new_v4(),
        plan_sha: plan.map(String::from),
        contract_sha: contract.map(String::from),
        created_at: now,
        expires_at: approval::expiry(now),
        used_by: None,
        repo: repo.to_string(),
        signature: None,
    };
    a.signature = Some(approval::sign(key, &a));
    sqlx::query("INSERT INTO approvals (id, plan_sha, contract_sha, repo, approved_by, created_at, expires_at, signature) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
        .bind(a.id)
        .bind(plan)
        .bind(contract)
        .bind(repo)
        .bind(by)
        .bind(a.created_at)
        .bind(a.expires_at)
        .bind(&a.signature)
        .execute(pool)
        .await?;
    Ok(a)
}

/// Approvals of `sha` (plan or contract) for `repo`, newest first.
///
/// # Errors
/// Database errors.
pub async fn approvals_of(pool: &PgPool, repo: &str, sha: &str) -> Result<Vec<Approval>> {
    let q = format!(
        "{APPROVAL_COLUMNS} WHERE a.repo = $1 AND (a.plan_sha = $2 OR a.contract_sha = $2) ORDER BY a.created_at DESC"
    );
    sqlx::query_as::<_, Approval>(sqlx::AssertSqlSafe(q))
        .bind(repo)
        .bind(sha)
        .fetch_all(pool)
        .await
}

/// Unused, unexpired plan approvals of `repo` with a valid signature
/// ([`approval::check_signed`]), newest first.
///
/// # Errors
/// Database errors.
pub async fn usable_plan_approvals(
    pool: &PgPool,
    repo: &str,
    now: DateTime<Utc>,
) -> Result<Vec<Approval>> {
    let q = format!(
        "{APPROVAL_COLUMNS} WHERE a.repo = $1 AND a.plan_sha IS NOT NULL AND u.run_id IS NULL AND a.expires_at > $2 ORDER BY a.created_at DESC"
    );
    let all = sqlx::query_as::<_, Approval>(sqlx::AssertSqlSafe(q))
        .bind(repo)
        .bind(now)
        .fetch_all(pool)
        .await?;
    Ok(all
        .into_iter()
        .filter(|a| approval::check_signed(a).is_ok())
        .collect())
}

/// One approval by id.
///
/// # Errors
/// Database errors.
pub async fn approval_by_id(pool: &PgPool, id: Uuid) -> Result<Option<Approval>> {
    let q = format!("{APPROVAL_COLUMNS} WHERE a.id = $1");
    sqlx::query_as::<_, Approval>(sqlx::AssertSqlSafe(q))
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// The run that consumed an approval, if one did.
///
/// # Errors
/// Database errors.
pub async fn approval_used_by(pool: &PgPool, approval: Uuid) -> Result<Option<Uuid>> {
    sqlx::query_scalar("SELECT run_id FROM approval_uses WHERE approval_id = $1")
        .bind(approval)
        .fetch_optional(pool)
        .await
}
