//! The ledger side of tending open PRs (docs/github.md "The second night"):
//! tend cards stored as contracts of a plan, the attempts at a PR's head,
//! and the tended items of a run. Rows only: what a card asks is `tend`'s.

use serde_json::Value;
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

use crate::outcome::Outcome;

use super::items::CARRIED_REASON;
use super::text::{Result, pg, pgj};

/// Number of distinct runs in which tending PR `pr` from `head` (the head
/// nightshift last pushed) ended in a failure that counts against
/// `max_attempts` (docs/github.md "The second night"): a tend card names
/// its PR and head, so a successful push (a new head) starts over, and a
/// new comment (a new card on the same head) does not.
///
/// # Errors
/// Database errors.
pub async fn tend_attempts(
    pool: &PgPool,
    repo: &str,
    key: &str,
    pr: u64,
    head: &str,
) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT count(DISTINCT i.run_id) FROM run_items i JOIN runs r ON r.id = i.run_id JOIN contracts c ON c.sha = i.contract_sha \
         WHERE r.repo = $1 AND i.item_key = $2 AND c.json ->> 'pr' = $3 AND c.json ->> 'head' = $4 \
         AND i.outcome = ANY($6) AND NOT starts_with(coalesce(i.reason, ''), $5) AND NOT starts_with(coalesce(i.reason, ''), 'checkout failed:')",
    )
    .bind(repo)
    .bind(key)
    .bind(pr.to_string())
    .bind(head)
    .bind(CARRIED_REASON)
    .bind(super::items::attempt_outcomes())
    .fetch_one(pool)
    .await
}

/// A tend card that calls for work, as a contract of a plan keeps it
/// (`contracts`, and `plan_contracts` of kind `tend`).
#[derive(Debug, Clone)]
pub struct TendCardRow<'a> {
    /// The sealed card's SHA.
    pub sha: &'a str,
    /// The item key of the PR.
    pub item_key: &'a str,
    /// The contract's title (`tend PR #N: title`).
    pub title: String,
    /// The sealed card as JSON.
    pub json: Value,
    /// The PR's number.
    pub pr_number: u64,
}

/// Stores a plan's tend cards that call for work (`cards`) — their
/// contracts and their places in `plan_contracts` (kind `tend`, after the
/// plan's `items` items' positions) — so an approval of the plan covers
/// exactly them (idempotent).
///
/// # Errors
/// Database errors.
pub async fn save_tend_cards(
    pool: &PgPool,
    plan_sha: &str,
    items: usize,
    cards: &[TendCardRow<'_>],
) -> Result<()> {
    let mut tx = pool.begin().await?;
    for (pos, card) in cards.iter().enumerate() {
        sqlx::query("INSERT INTO contracts (sha, item_key, title, json, created_at) VALUES ($1, $2, $3, $4, now()) ON CONFLICT (sha) DO NOTHING")
            .bind(card.sha)
            .bind(card.item_key)
            .bind(pg(&card.title))
            .bind(pgj(card.json.clone()))
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index, blocked, kind, pr_number) VALUES ($1, $2, $3, 0, NULL, 'tend', $4) ON CONFLICT DO NOTHING")
            .bind(plan_sha)
            .bind((items + pos) as i32)
            .bind(card.sha)
            .bind(card.pr_number as i64)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// A tended PR of a run, as the ledger holds it: the run item's PR number,
/// title, outcome and reason, its contract's JSON (a tend card, or an
/// item's contract for a PR left alone) and the head nightshift pushed
/// last.
#[derive(Debug, Clone, FromRow)]
pub struct TendedRow {
    /// The PR number (`None` for a row that has none).
    pub pr_number: Option<i64>,
    /// The item's title.
    pub title: String,
    /// How it ended; `None` while it runs.
    pub outcome: Option<Outcome>,
    /// Why.
    pub reason: Option<String>,
    /// The contract's JSON, if the ledger holds it.
    pub card: Option<Value>,
    /// The head nightshift pushed last (40 hex).
    pub head: Option<String>,
}

/// The tended PRs of run `run` for the report's section: run items whose
/// outcome is `pr_updated` or `pr_left_alone`, or whose contract is a tend
/// card (a tend that failed), by PR number; with the card and the head
/// nightshift pushed last.
///
/// # Errors
/// Database errors.
pub async fn tended_items(pool: &PgPool, run: Uuid) -> Result<Vec<TendedRow>> {
    sqlx::query_as(
        "SELECT ri.pr_number, ri.title, ri.outcome, ri.reason, c.json AS card, p.head_sha AS head \
         FROM run_items ri JOIN runs r ON r.id = ri.run_id \
         LEFT JOIN contracts c ON c.sha = ri.contract_sha \
         LEFT JOIN pull_requests p ON p.repo = r.repo AND p.item_key = ri.item_key AND p.branch = ri.branch \
         WHERE ri.run_id = $1 AND (ri.outcome = ANY($2) OR (c.json::jsonb ? 'pr' AND c.json::jsonb ? 'action')) \
         ORDER BY ri.pr_number, ri.id",
    )
    .bind(run)
    .bind(vec![Outcome::PrUpdated.as_str(), Outcome::PrLeftAlone.as_str()])
    .fetch_all(pool)
    .await
}
