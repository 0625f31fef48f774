//! The `run_items` and `findings` tables (docs/ledger.md#tables): an item's row in
//! a run from its start to its end, the counts `max_attempts` and questions
//! read from earlier runs, and the writer's findings. Not its rounds (see
//! [`super::rounds`]).

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgExecutor, PgPool, Row};
use uuid::Uuid;

use crate::outcome::{Event, Outcome, RunStatus};

use super::text::{Result, pg, pgo};

/// What an item row starts with: key, the contract (or card) SHA it runs
/// under, its plan index (0 for a tended PR's card) and title.
pub struct ItemStart<'a> {
    /// The item's key.
    pub key: &'a str,
    /// The contract (or tend card) SHA it runs under.
    pub contract_sha: &'a str,
    /// Its 1-based plan index (0 for a tended PR's card).
    pub index: usize,
    /// Its title.
    pub title: &'a str,
}

/// Creates the run item row `row` in `run` (an item's, or a tended PR's
/// card's), or, when an attempt of it already wrote one (a takeover by
/// another worker, docs/workers.md), starts it again: the end of the
/// earlier attempt is cleared. `worker` is who runs this attempt
/// (`host:pid:n`), `None` for an item that is only recorded. Returns the
/// row's id.
///
/// # Errors
/// Database errors.
pub async fn start_row(
    db: impl PgExecutor<'_>,
    run: Uuid,
    row: &ItemStart<'_>,
    worker: Option<&str>,
) -> Result<i64> {
    sqlx::query_scalar(
        "WITH r AS (INSERT INTO run_items (run_id, item_key, contract_sha, item_index, title, started_at, worker) VALUES ($1, $2, $3, $4, $5, now(), $6) \
         ON CONFLICT (run_id, item_key) DO UPDATE SET started_at = now(), worker = $6, outcome = NULL, ended_at = NULL RETURNING id), \
         e AS (INSERT INTO events (run_id, kind, data) SELECT $1, $7, jsonb_build_object('item_id', id, 'key', $2::text, 'index', $4::int, 'title', $5::text, 'worker', $6::text) FROM r) \
         SELECT id FROM r",
    )
    .bind(run)
    .bind(row.key)
    .bind(row.contract_sha)
    .bind(row.index as i32)
    .bind(pg(row.title))
    .bind(worker)
    .bind(Event::ItemStarted.as_str())
    .fetch_one(db)
    .await
}

/// What an item's row holds about its end besides the outcome: the
/// `run_items` columns `reason` … `pr_body` (docs/ledger.md#tables), shared
/// by the end a run writes ([`ItemEnd`]) and the row `report` reads
/// ([`ItemRow`]). Counts are unsigned here; the columns are signed
/// (`integer`, `bigint`), and a negative one reads as 0.
#[derive(Debug, Clone, Default)]
pub struct ItemFacts {
    /// Why, in a sentence.
    pub reason: Option<String>,
    /// A question for a person (blocked items).
    pub question: Option<String>,
    /// Branch pushed or planned.
    pub branch: Option<String>,
    /// PR number.
    pub pr_number: Option<u64>,
    /// PR URL.
    pub pr_url: Option<String>,
    /// Rounds used.
    pub rounds: u32,
    /// Tokens used.
    pub tokens: u64,
    /// Cost in USD, where reported.
    pub cost_usd: Option<f64>,
    /// The PR body (opened, or would have been opened without a token).
    pub pr_body: Option<String>,
}

impl<'r> FromRow<'r, PgRow> for ItemFacts {
    fn from_row(row: &'r PgRow) -> Result<Self> {
        let pr_number: Option<i64> = row.try_get("pr_number")?;
        let rounds: i32 = row.try_get("rounds")?;
        let tokens: i64 = row.try_get("tokens")?;
        Ok(ItemFacts {
            reason: row.try_get("reason")?,
            question: row.try_get("question")?,
            branch: row.try_get("branch")?,
            pr_number: pr_number.map(|n| n.max(0) as u64),
            pr_url: row.try_get("pr_url")?,
            rounds: rounds.max(0) as u32,
            tokens: tokens.max(0) as u64,
            cost_usd: row.try_get("cost_usd")?,
            pr_body: row.try_get("pr_body")?,
        })
    }
}

/// The final facts of one item in one run: its outcome and the rest.
#[derive(Debug, Clone)]
pub struct ItemEnd {
    /// How the item ended.
    pub outcome: Outcome,
    /// Reason, question, branch, PR, rounds, tokens, cost and PR body.
    pub facts: ItemFacts,
}

impl ItemEnd {
    /// An end with `outcome` and nothing else known yet (no reason, no
    /// rounds, tokens or cost).
    pub fn of(outcome: Outcome) -> ItemEnd {
        ItemEnd {
            outcome,
            facts: ItemFacts::default(),
        }
    }

    /// This end with its facts changed by `set` (a branch, a PR, a
    /// question added to what the outcome's decision said).
    #[must_use]
    pub fn with(mut self, set: impl FnOnce(&mut ItemFacts)) -> ItemEnd {
        set(&mut self.facts);
        self
    }
}

/// Records an item's end.
///
/// # Errors
/// Database errors.
pub async fn finish_item(db: impl PgExecutor<'_>, item_id: i64, end: &ItemEnd) -> Result<()> {
    let e = &end.facts;
    sqlx::query(
        "UPDATE run_items SET outcome = $2, reason = $3, question = $4, branch = $5, pr_number = $6, pr_url = $7, rounds = $8, tokens = $9, cost_usd = $10, pr_body = $11, ended_at = now() WHERE id = $1",
    )
    .bind(item_id)
    .bind(end.outcome)
    .bind(pgo(&e.reason))
    .bind(pgo(&e.question))
    .bind(&e.branch)
    .bind(e.pr_number.map(|n| n as i64))
    .bind(&e.pr_url)
    .bind(e.rounds as i32)
    .bind(i64::try_from(e.tokens).unwrap_or(i64::MAX))
    .bind(e.cost_usd)
    .bind(pgo(&e.pr_body))
    .execute(db)
    .await?;
    Ok(())
}

/// Records one writer finding and the issue it was filed as, if any.
///
/// # Errors
/// Database errors.
pub async fn record_finding(
    db: impl PgExecutor<'_>,
    item_id: i64,
    title: &str,
    issue_number: Option<i64>,
    url: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO findings (run_item_id, title, issue_number, url) VALUES ($1, $2, $3, $4)",
    )
    .bind(item_id)
    .bind(pg(title))
    .bind(issue_number)
    .bind(url)
    .execute(db)
    .await?;
    Ok(())
}

/// Number of distinct runs in which the item ended in a failure outcome
/// (for `max_attempts`).
///
/// # Errors
/// Database errors.
pub async fn failed_attempts(
    pool: &PgPool,
    repo: &str,
    key: &str,
    contract_sha: &str,
) -> Result<i64> {
    // Counted per contract: editing the item (or the policy) seals a new
    // contract, which is a person's answer to the failures, so it starts over.
    // A remote that could not be fetched or pushed is not the item's fault.
    sqlx::query_scalar(
        "SELECT count(DISTINCT i.run_id) FROM run_items i JOIN runs r ON r.id = i.run_id WHERE r.repo = $1 AND i.item_key = $2 AND i.contract_sha = $4 \
         AND i.outcome = ANY($5) \
         AND NOT starts_with(coalesce(i.reason, ''), $3) AND NOT starts_with(coalesce(i.reason, ''), 'checkout failed:')",
    )
    .bind(repo)
    .bind(key)
    .bind(CARRIED_REASON)
    .bind(contract_sha)
    .bind(attempt_outcomes())
    .fetch_one(pool)
    .await
}

/// The outcomes that count as a failed attempt (`max_attempts`), as the
/// ledger spells them.
pub(super) fn attempt_outcomes() -> Vec<&'static str> {
    (Outcome::ALL.iter())
        .filter(|o| o.counts_as_attempt())
        .map(|o| o.as_str())
        .collect()
}

/// The question a writer asked about this very contract in an earlier run
/// (outcome `blocked` after at least one round), with that run's id and
/// when it ended, newest first; `None` if it asked none. The item waits for
/// a person's answer: editing the item seals a new contract (docs/loop.md#findings-and-questions).
///
/// # Errors
/// Database errors.
pub async fn open_question(
    pool: &PgPool,
    repo: &str,
    key: &str,
    contract_sha: &str,
) -> Result<Option<(String, Uuid, Option<DateTime<Utc>>)>> {
    sqlx::query_as(
        "SELECT i.question, i.run_id, i.ended_at FROM run_items i JOIN runs r ON r.id = i.run_id \
         WHERE r.repo = $1 AND i.item_key = $2 AND i.contract_sha = $3 AND i.outcome = $4 AND i.rounds > 0 AND i.question IS NOT NULL \
         ORDER BY i.started_at DESC LIMIT 1",
    )
    .bind(repo)
    .bind(key)
    .bind(contract_sha)
    .bind(Outcome::Blocked)
    .fetch_optional(pool)
    .await
}

/// [`open_question`] for several `(item key, contract SHA)` pairs at once
/// (`plan` asks about every item): the newest question of each pair that
/// has one, as `(key, contract SHA, question)`, in one statement.
///
/// # Errors
/// Database errors.
pub async fn open_questions(
    pool: &PgPool,
    repo: &str,
    pairs: &[(&str, &str)],
) -> Result<Vec<(String, String, String)>> {
    let (keys, shas): (Vec<&str>, Vec<&str>) = pairs.iter().copied().unzip();
    sqlx::query_as(
        "SELECT DISTINCT ON (i.item_key, i.contract_sha) i.item_key, i.contract_sha, i.question FROM run_items i JOIN runs r ON r.id = i.run_id \
         JOIN UNNEST($2::text[], $3::text[]) AS w(k, c) ON w.k = i.item_key AND w.c = i.contract_sha \
         WHERE r.repo = $1 AND i.outcome = 'blocked' AND i.rounds > 0 AND i.question IS NOT NULL \
         ORDER BY i.item_key, i.contract_sha, i.started_at DESC",
    )
    .bind(repo)
    .bind(&keys)
    .bind(&shas)
    .fetch_all(pool)
    .await
}

/// A run item as `report` shows it.
#[derive(Debug, Clone, FromRow)]
pub struct ItemRow {
    /// Index in the plan.
    pub item_index: i32,
    /// Key.
    pub item_key: String,
    /// Title.
    pub title: String,
    /// Contract SHA.
    pub contract_sha: String,
    /// Outcome (None while running).
    pub outcome: Option<Outcome>,
    /// Reason, question, branch, PR, rounds, tokens, cost and PR body.
    #[sqlx(flatten)]
    pub facts: ItemFacts,
    /// Started (UTC).
    pub started_at: DateTime<Utc>,
    /// Ended (UTC).
    pub ended_at: Option<DateTime<Utc>>,
    /// The worker that ran its last attempt (`host:pid:n`,
    /// docs/workers.md); `None` for an item only recorded.
    pub worker: Option<String>,
}

/// Items of a run, in plan order.
///
/// # Errors
/// Database errors.
pub async fn run_items(pool: &PgPool, run: Uuid) -> Result<Vec<ItemRow>> {
    sqlx::query_as::<_, ItemRow>(
        "SELECT item_index, item_key, title, contract_sha, outcome, reason, question, branch, pr_number, pr_url, rounds, tokens, cost_usd, started_at, ended_at, pr_body, worker FROM run_items WHERE run_id = $1 ORDER BY item_index, id",
    )
    .bind(run)
    .fetch_all(pool)
    .await
}

/// How the reason of an item carried over from a crashed or stopped run
/// begins (`finished by the crashed run <id>: …`, or `the stopped run`);
/// such rows are not attempts of their own.
pub const CARRIED_REASON: &str = "finished by the ";

/// The reason of an item a resumed run finished (`from`, crashed unless
/// `stopped` by a signal), as the resuming run records it: `prev`, the
/// reason that run gave, after [`CARRIED_REASON`] and `from`. A reason that
/// was itself carried over keeps its text, so after several resumes it
/// still names the one run that finished the item, at one level.
pub fn carried_reason(prev: Option<&str>, from: Uuid, stopped: bool) -> String {
    if let Some(r) = prev.filter(|r| r.starts_with(CARRIED_REASON)) {
        return r.to_string();
    }
    let how = if stopped {
        "stopped"
    } else {
        RunStatus::Crashed.as_str()
    };
    format!(
        "{CARRIED_REASON}{how} run {from}{}",
        prev.map(|r| format!(": {r}")).unwrap_or_default()
    )
}

/// How many items of run `run` ended under a worker whose name starts
/// with `prefix` (`host:pid:`, one process's workers).
///
/// # Errors
/// Database errors.
pub async fn items_by_worker(pool: &PgPool, run: Uuid, prefix: &str) -> Result<usize> {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM run_items WHERE run_id = $1 AND ended_at IS NOT NULL AND starts_with(worker, $2)",
    )
    .bind(run)
    .bind(prefix)
    .fetch_one(pool)
    .await?;
    Ok(n as usize)
}
