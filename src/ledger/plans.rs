//! The `plans`, `contracts` and `plan_contracts` tables (docs/ledger.md#tables):
//! a sealed plan stored whole and content-addressed, the contracts it holds
//! and their order, and the reads `approve`, `run` and `worker` make of them.
//! Rows only: what a plan or a contract means is the domain's (`contract`).

use serde_json::Value;
use sqlx::PgPool;

use super::text::{Result, verbatim, verbatim_json_text};

/// A plan as the `plans` table keeps it.
#[derive(Debug, Clone)]
pub struct PlanRow<'a> {
    /// The plan's SHA (its content address).
    pub sha: &'a str,
    /// Repository identity.
    pub repo: &'a str,
    /// The backlog file, as displayed.
    pub backlog_path: &'a str,
    /// SHA-256 of the backlog bytes.
    pub backlog_sha: &'a str,
    /// The whole plan as JSON text (kept verbatim but for NUL bytes).
    pub json: &'a str,
}

/// One entry of a plan (`plan_contracts`) and the contract it names
/// (`contracts`), in plan order.
#[derive(Debug, Clone)]
pub struct PlanEntryRow<'a> {
    /// The contract's SHA.
    pub contract_sha: &'a str,
    /// The item's key.
    pub item_key: &'a str,
    /// The item's title.
    pub title: &'a str,
    /// The item's 1-based index among open items.
    pub item_index: usize,
    /// Why the item is blocked, if it is.
    pub blocked: Option<&'a str>,
}

/// Stores the plan, its contracts and their order (idempotent), in a few
/// statements whatever the number of items: the rows go over as arrays
/// (`UNNEST`), so a backlog of 20,000 items costs no 40,000 round trips.
/// Plans are content-addressed and stored whole in one transaction; of a
/// new plan only the contracts the ledger does not hold yet are sent, and
/// `contract_json(i)` (the canonical JSON of the contract of `entries[i]`)
/// is only asked of those. A caller skips a plan already stored
/// ([`plan_exists`]).
///
/// # Errors
/// Database errors.
pub async fn save_plan(
    pool: &PgPool,
    plan: &PlanRow<'_>,
    entries: &[PlanEntryRow<'_>],
    contract_json: impl Fn(usize) -> String,
) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO plans (sha, repo, backlog_path, backlog_sha, created_at, json) VALUES ($1, $2, $3, $4, now(), $5::json) ON CONFLICT (sha) DO NOTHING")
        .bind(plan.sha)
        .bind(plan.repo)
        .bind(plan.backlog_path)
        .bind(plan.backlog_sha)
        .bind(verbatim_json_text(plan.json.to_string()))
        .execute(&mut *tx)
        .await?;
    let shas: Vec<&str> = entries.iter().map(|e| e.contract_sha).collect();
    let stored: std::collections::HashSet<String> =
        sqlx::query_scalar("SELECT sha FROM contracts WHERE sha = ANY($1::text[])")
            .bind(&shas)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
    insert_contracts(&mut tx, entries, &stored, contract_json).await?;
    let n = entries.len();
    let (mut positions, mut indexes, mut blocked) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (pos, e) in entries.iter().enumerate() {
        positions.push(pos as i32);
        indexes.push(e.item_index as i32);
        blocked.push(e.blocked.map(verbatim));
    }
    sqlx::query("INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index, blocked) SELECT $1, p, c, i, b FROM UNNEST($2::int4[], $3::text[], $4::int4[], $5::text[]) AS u(p, c, i, b) ON CONFLICT DO NOTHING")
        .bind(plan.sha)
        .bind(&positions)
        .bind(&shas)
        .bind(&indexes)
        .bind(&blocked)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// Inserts the contracts of `entries` whose SHA is not in `stored`, in one
/// statement (a contract twice in the plan is sent once).
async fn insert_contracts(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    entries: &[PlanEntryRow<'_>],
    stored: &std::collections::HashSet<String>,
    contract_json: impl Fn(usize) -> String,
) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    let (mut shas, mut keys, mut titles, mut jsons) = (vec![], vec![], vec![], vec![]);
    for (i, e) in entries.iter().enumerate() {
        if stored.contains(e.contract_sha) || !seen.insert(e.contract_sha) {
            continue;
        }
        shas.push(e.contract_sha);
        keys.push(e.item_key);
        titles.push(verbatim(e.title));
        jsons.push(verbatim_json_text(contract_json(i)));
    }
    if shas.is_empty() {
        return Ok(());
    }
    sqlx::query("INSERT INTO contracts (sha, item_key, title, json, created_at) SELECT s, k, t, j::json, now() FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[]) AS u(s, k, t, j) ON CONFLICT (sha) DO NOTHING")
        .bind(&shas)
        .bind(&keys)
        .bind(&titles)
        .bind(&jsons)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Whether a plan with this SHA was stored. Plans are content-addressed: two
/// clones of one repository with the same backlog and config seal the same
/// plan, and an approval (which names its repository) binds to that content.
///
/// # Errors
/// Database errors.
pub async fn plan_exists(pool: &PgPool, sha: &str) -> Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM plans WHERE sha = $1")
        .bind(sha)
        .fetch_one(pool)
        .await?;
    Ok(n > 0)
}

/// Whether a contract with this SHA was stored.
///
/// # Errors
/// Database errors.
pub async fn contract_exists(pool: &PgPool, sha: &str) -> Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM contracts WHERE sha = $1")
        .bind(sha)
        .fetch_one(pool)
        .await?;
    Ok(n > 0)
}

/// Contract SHAs of a stored plan, in order.
///
/// # Errors
/// Database errors.
pub async fn plan_contracts(pool: &PgPool, plan_sha: &str) -> Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT contract_sha FROM plan_contracts WHERE plan_sha = $1 ORDER BY position",
    )
    .bind(plan_sha)
    .fetch_all(pool)
    .await
}

/// Whether any of the contracts `shas` is one of item `key` (a contract of
/// that item under other details or config).
///
/// # Errors
/// Database errors.
pub async fn item_in_contracts(pool: &PgPool, shas: &[String], key: &str) -> Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM contracts WHERE sha = ANY($1) AND item_key = $2)",
    )
    .bind(shas)
    .bind(key)
    .fetch_one(pool)
    .await
}

/// The items of the contracts `shas` as `(key, title)`, in the order of
/// `shas` (an approved plan's, i.e. backlog order); unknown SHAs are left out.
///
/// # Errors
/// Database errors.
pub async fn contract_items(pool: &PgPool, shas: &[String]) -> Result<Vec<(String, String)>> {
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT sha, item_key, title FROM contracts WHERE sha = ANY($1)")
            .bind(shas)
            .fetch_all(pool)
            .await?;
    // By SHA: a plan of 20,000 contracts would make a scan per SHA quadratic.
    let by_sha: std::collections::HashMap<&str, (&String, &String)> =
        rows.iter().map(|(s, k, t)| (s.as_str(), (k, t))).collect();
    Ok(shas
        .iter()
        .filter_map(|s| by_sha.get(s.as_str()))
        .map(|(key, title)| ((*key).clone(), (*title).clone()))
        .collect())
}

/// The items of plan `plan_sha` after index `after` (the plan's 1-based
/// `index`, docs/commands.md), in backlog order, as `(index, title, contract_sha)`:
/// what a run stopped at item `after` never started.
///
/// # Errors
/// Database errors.
pub async fn plan_items_after(
    pool: &PgPool,
    plan_sha: &str,
    after: i32,
) -> Result<Vec<(i32, String, String)>> {
    sqlx::query_as::<_, (i32, String, String)>(
        "SELECT pc.item_index, c.title, pc.contract_sha FROM plan_contracts pc JOIN contracts c ON c.sha = pc.contract_sha WHERE pc.plan_sha = $1 AND pc.kind = 'item' AND pc.item_index > $2 ORDER BY pc.item_index",
    )
    .bind(plan_sha)
    .bind(after)
    .fetch_all(pool)
    .await
}

/// The stored canonical JSON of contract `sha`, if it was ever planned.
///
/// # Errors
/// Database errors.
pub async fn contract_json(pool: &PgPool, sha: &str) -> Result<Option<Value>> {
    sqlx::query_scalar("SELECT json FROM contracts WHERE sha = $1")
        .bind(sha)
        .fetch_optional(pool)
        .await
}

/// The contracts of plan `plan_sha` in plan order, each with its stored
/// JSON (`None` when the ledger lost it), for `nightshift worker`.
///
/// # Errors
/// Database errors.
pub async fn plan_stored(pool: &PgPool, plan_sha: &str) -> Result<Vec<(String, Option<Value>)>> {
    sqlx::query_as(
        "SELECT pc.contract_sha, c.json FROM plan_contracts pc LEFT JOIN contracts c ON c.sha = pc.contract_sha \
         WHERE pc.plan_sha = $1 ORDER BY pc.position",
    )
    .bind(plan_sha)
    .fetch_all(pool)
    .await
}
