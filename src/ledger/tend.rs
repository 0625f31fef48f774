//! The ledger side of tending open PRs (docs/github.md "The second night"):
//! tend cards stored as contracts of a plan, the attempts at a PR's head,
//! and the tended items of a run. Rows only: what a card asks is `tend`'s.

use serde_json::Value;
use sqlx::PgPool;
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
    .bind(
        Outcome::ALL
            .iter()
            .filter(|o| o.counts_as_attempt())
            .map(|o| o.as_str())
            .collect::<Vec<_>>(),
    )
    .fetch_one(pool)
    .await
}

/// Stores a plan's tend cards that call for work — their contracts and
/// their places in `plan_contracts` (kind `tend`, after the plan's items'
/// positions) — so an approval of the plan covers exactly them
/// (idempotent).
///
/// # Errors
/// Database errors.
pub async fn save_tend_cards(
    pool: &PgPool,
    plan_sha: &str,
    items: usize,
    cards: &[crate::tend::TendCard],
) -> Result<()> {
    let mut tx = pool.begin().await?;
    let sealed = cards
        .iter()
        .filter_map(|c| c.sealed.as_ref().map(|s| (c, s)));
    for (pos, (card, sealed)) in sealed.enumerate() {
        let json: Value =
            serde_json::from_str(&sealed.canonical_json).expect("canonical JSON parses");
        sqlx::query("INSERT INTO contracts (sha, item_key, title, json, created_at) VALUES ($1, $2, $3, $4, now()) ON CONFLICT (sha) DO NOTHING")
            .bind(&sealed.sha)
            .bind(&card.item_key)
            .bind(pg(&format!("tend PR #{}: {}", card.number, card.title)))
            .bind(pgj(json))
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index, blocked, kind, pr_number) VALUES ($1, $2, $3, 0, NULL, 'tend', $4) ON CONFLICT DO NOTHING")
            .bind(plan_sha)
            .bind((items + pos) as i32)
            .bind(&sealed.sha)
            .bind(card.number as i64)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// The tended PRs of run `run` for the report's section: run items whose
/// outcome is `pr_updated` or `pr_left_alone`, or whose contract is a tend
/// card (a tend that failed), by PR number; with what the card asked and
/// the head nightshift pushed last.
///
/// # Errors
/// Database errors.
pub async fn tended_items(pool: &PgPool, run: Uuid) -> Result<Vec<crate::tend::Tended>> {
    /// pr_number, title, outcome, reason, contract JSON, pushed head.
    type Row = (
        Option<i64>,
        String,
        Option<Outcome>,
        Option<String>,
        Option<Value>,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT ri.pr_number, ri.title, ri.outcome, ri.reason, c.json, p.head_sha \
         FROM run_items ri JOIN runs r ON r.id = ri.run_id \
         LEFT JOIN contracts c ON c.sha = ri.contract_sha \
         LEFT JOIN pull_requests p ON p.repo = r.repo AND p.item_key = ri.item_key AND p.branch = ri.branch \
         WHERE ri.run_id = $1 AND (ri.outcome = ANY($2) OR (c.json::jsonb ? 'pr' AND c.json::jsonb ? 'action')) \
         ORDER BY ri.pr_number, ri.id",
    )
    .bind(run)
    .bind(vec![Outcome::PrUpdated.as_str(), Outcome::PrLeftAlone.as_str()])
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(pr, title, outcome, reason, card, head)| {
            let card = card.filter(|c| c.get("pr").is_some() && c.get("action").is_some());
            crate::tend::Tended {
                pr: pr.unwrap_or(0) as u64,
                title,
                outcome,
                reason,
                action: card
                    .as_ref()
                    .and_then(|c| c["action"].as_str().map(str::to_string)),
                asked: card
                    .as_ref()
                    .and_then(|c| serde_json::from_value(c["comments"].clone()).ok())
                    .unwrap_or_default(),
                old_head: card
                    .as_ref()
                    .and_then(|c| c["head"].as_str().map(str::to_string)),
                new_head: head,
            }
        })
        .collect())
}
