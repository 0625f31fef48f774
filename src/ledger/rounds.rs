//! The `rounds`, `agent_calls`, `gate_runs`, `reviews` and `proofs` tables
//! (docs/ledger.md#tables): a round of an item and what happened in it.
//! Rows only: the caller turns its agent reports, gate runs and proofs into
//! the row types here.

use serde_json::{Value, json};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::outcome::{Event, Outcome, RoundResult};

use super::text::{Result, pg, pgj};

/// Starts round `n` (from 1) of attempt `attempt` (from 1; a takeover by
/// another worker is the next attempt, docs/workers.md); returns its id.
///
/// # Errors
/// Database errors.
pub async fn start_round(
    db: impl PgExecutor<'_>,
    item_id: i64,
    attempt: u32,
    n: u32,
) -> Result<i64> {
    sqlx::query_scalar(
        "WITH r AS (INSERT INTO rounds (run_item_id, attempt, n, started_at) VALUES ($1, $2, $3, now()) RETURNING id), \
         e AS (INSERT INTO events (run_id, kind, data) SELECT i.run_id, $4, jsonb_build_object('item_id', i.id, 'key', i.item_key, 'round_id', r.id, 'round', $3::int, 'attempt', $2::int) \
               FROM r, run_items i WHERE i.id = $1) \
         SELECT id FROM r",
    )
    .bind(item_id)
    .bind(attempt.max(1) as i32)
    .bind(n as i32)
    .bind(Event::RoundStarted.as_str())
    .fetch_one(db)
    .await
}

/// Ends a round with its result, diff hash, failure signature and the
/// feedback it produced.
///
/// # Errors
/// Database errors.
pub async fn finish_round(
    db: impl PgExecutor<'_>,
    round_id: i64,
    result: RoundResult,
    diff_hash: Option<&str>,
    failure_sig: Option<&str>,
    feedback: Option<&str>,
) -> Result<()> {
    sqlx::query("UPDATE rounds SET ended_at = now(), result = $2, diff_hash = $3, failure_sig = $4, feedback = $5 WHERE id = $1")
        .bind(round_id)
        .bind(result.as_str())
        .bind(diff_hash)
        .bind(failure_sig)
        .bind(feedback.map(pg))
        .execute(db)
        .await?;
    Ok(())
}

/// Ends the rounds of an item still open when the item ended (cut short
/// by a timeout, a budget, a signal or the deadline) with its outcome.
///
/// # Errors
/// Database errors.
pub async fn close_open_rounds(
    db: impl PgExecutor<'_>,
    item_id: i64,
    outcome: Outcome,
) -> Result<()> {
    sqlx::query("UPDATE rounds SET ended_at = now(), result = $2 WHERE run_item_id = $1 AND ended_at IS NULL").bind(item_id).bind(outcome).execute(db).await?;
    Ok(())
}

/// One agent call, as the `agent_calls` table keeps it. Its text is masked
/// ([`crate::secret::redact_known`]) on the way in.
#[derive(Debug, Clone)]
pub struct AgentCallRow<'a> {
    /// The item row the call worked for.
    pub item_id: i64,
    /// The round, if the call was in one.
    pub round_id: Option<i64>,
    /// `writer`, `reviewer`, … (the agent's role).
    pub role: &'a str,
    /// The agent kind (`claude`, `codex`, `command`).
    pub kind: &'a str,
    /// The command line.
    pub argv: &'a [String],
    /// Wall time (stored in milliseconds; the call started that long ago).
    pub duration: std::time::Duration,
    /// Exit code (`None`: killed by a signal or the timeout).
    pub exit_code: Option<i32>,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Input tokens, where reported.
    pub tokens_in: Option<u64>,
    /// Output tokens, where reported.
    pub tokens_out: Option<u64>,
    /// Cost in USD, where reported.
    pub cost_usd: Option<f64>,
    /// The limit the call hit (`usage_limit`, `transient`), if any.
    pub limit_kind: Option<&'a str>,
    /// The end of the agent's answer (the caller cuts it to size).
    pub stdout_tail: &'a str,
    /// The end of its stderr.
    pub stderr_tail: &'a str,
    /// Everything else worth keeping, as a JSON object (the `meta` column).
    pub meta: Value,
}

/// Records one agent call.
///
/// # Errors
/// Database errors.
pub async fn record_agent_call(db: impl PgExecutor<'_>, r: &AgentCallRow<'_>) -> Result<()> {
    let big = |t: Option<u64>| t.map(|t| i64::try_from(t).unwrap_or(i64::MAX));
    sqlx::query(
        "INSERT INTO agent_calls (run_item_id, round_id, role, kind, argv, started_at, duration_ms, exit_code, timed_out, tokens_in, tokens_out, cost_usd, limit_kind, stdout_tail, stderr_tail, meta) \
         VALUES ($1, $2, $3, $4, $5, now() - ($6 * interval '1 millisecond'), $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(r.item_id)
    .bind(r.round_id)
    .bind(r.role)
    .bind(r.kind)
    .bind(pgj(json!(r.argv)))
    .bind(r.duration.as_millis() as i64)
    .bind(r.exit_code)
    .bind(r.timed_out)
    .bind(big(r.tokens_in))
    .bind(big(r.tokens_out))
    .bind(r.cost_usd)
    .bind(r.limit_kind)
    .bind(pg(r.stdout_tail))
    .bind(pg(r.stderr_tail))
    .bind(pgj(r.meta.clone()))
    .execute(db)
    .await?;
    Ok(())
}

/// One gate command's run, as the `gate_runs` table keeps it.
#[derive(Debug, Clone)]
pub struct GateRunRow<'a> {
    /// The command as written.
    pub command: &'a str,
    /// Exit code (`None`: killed by a signal or the timeout).
    pub exit_code: Option<i32>,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// The end of its output.
    pub output_tail: &'a str,
}

/// Records one gate command's run in round `round_id`.
///
/// # Errors
/// Database errors.
pub async fn record_gate_run(
    db: impl PgExecutor<'_>,
    round_id: i64,
    g: &GateRunRow<'_>,
) -> Result<()> {
    sqlx::query(
        "WITH g AS (INSERT INTO gate_runs (round_id, command, exit_code, timed_out, duration_ms, output_tail) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id) \
         INSERT INTO events (run_id, kind, data) SELECT i.run_id, $7, jsonb_build_object('item_id', i.id, 'key', i.item_key, 'round', r.n, 'gate_run_id', g.id, \
           'command', $2::text, 'exit_code', $3::int, 'timed_out', $4::bool, 'duration_ms', $5::bigint) \
         FROM g, rounds r JOIN run_items i ON i.id = r.run_item_id WHERE r.id = $1",
    )
        .bind(round_id)
        .bind(pg(g.command))
        .bind(g.exit_code)
        .bind(g.timed_out)
        .bind(g.duration_ms as i64)
        .bind(pg(g.output_tail))
        .bind(Event::GateRan.as_str())
        .execute(db)
        .await?;
    Ok(())
}

/// Records a review (verdict, findings, or why it was void).
///
/// # Errors
/// Database errors.
pub async fn record_review(
    db: impl PgExecutor<'_>,
    round_id: i64,
    verdict: &str,
    findings: &[String],
    void_reason: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "WITH v AS (INSERT INTO reviews (round_id, verdict, findings, void_reason) VALUES ($1, $2, $3, $4) RETURNING id) \
         INSERT INTO events (run_id, kind, data) SELECT i.run_id, $5, jsonb_build_object('item_id', i.id, 'key', i.item_key, 'round', r.n, 'review_id', v.id, \
           'verdict', $2::text, 'findings', jsonb_array_length($3::jsonb), 'void_reason', $4::text) \
         FROM v, rounds r JOIN run_items i ON i.id = r.run_item_id WHERE r.id = $1",
    )
    .bind(round_id)
    .bind(verdict)
    .bind(pgj(json!(findings)))
    .bind(void_reason.map(pg))
    .bind(Event::Reviewed.as_str())
    .execute(db)
    .await?;
    Ok(())
}

/// A round's proof of work, as the `proofs` table keeps it. The file lists
/// are JSON (paths are the writer's to name, so they are masked too).
#[derive(Debug, Clone)]
pub struct ProofRow<'a> {
    /// The base commit (40 hex).
    pub base: &'a str,
    /// The head before the round.
    pub head_before: &'a str,
    /// The head after it.
    pub head_after: &'a str,
    /// The files the round changed (a JSON array).
    pub changed: Value,
    /// Files the writer claimed that git does not show changed.
    pub claimed_not_in_git: &'a [String],
    /// Changed files outside the contract's scope.
    pub out_of_scope: &'a [String],
    /// The writer moved HEAD.
    pub head_moved: bool,
    /// The writer switched branches.
    pub branch_switched: bool,
    /// Hash of the round's diff.
    pub diff_hash: &'a str,
}

/// Records a proof of work of round `round_id`.
///
/// # Errors
/// Database errors.
pub async fn record_proof(db: impl PgExecutor<'_>, round_id: i64, p: &ProofRow<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO proofs (round_id, base, head_before, head_after, changed, claimed_not_in_git, out_of_scope, head_moved, branch_switched, diff_hash) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(round_id)
    .bind(p.base)
    .bind(p.head_before)
    .bind(p.head_after)
    // Paths are the writer's to name: a file may be named after a secret.
    .bind(pgj(p.changed.clone()))
    .bind(pgj(json!(p.claimed_not_in_git)))
    .bind(pgj(json!(p.out_of_scope)))
    .bind(p.head_moved)
    .bind(p.branch_switched)
    .bind(p.diff_hash)
    .execute(db)
    .await?;
    Ok(())
}

/// The rounds the run `run` began of the item `key` (whatever their end):
/// a resumed run that began one did the work of a PR found afterwards.
///
/// # Errors
/// Database errors.
pub async fn rounds_begun(pool: &PgPool, run: Uuid, key: &str) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM rounds r JOIN run_items i ON i.id = r.run_item_id WHERE i.run_id = $1 AND i.item_key = $2",
    )
    .bind(run)
    .bind(key)
    .fetch_one(pool)
    .await
}

/// What the agent calls of run `run` cost so far (USD, where reported),
/// except those of item row `except`.
///
/// # Errors
/// Database errors.
pub async fn run_spent(pool: &PgPool, run: Uuid, except: Option<i64>) -> Result<f64> {
    sqlx::query_scalar(
        "SELECT coalesce(sum(a.cost_usd), 0)::float8 FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id \
         WHERE i.run_id = $1 AND ($2::bigint IS NULL OR i.id <> $2)",
    )
    .bind(run)
    .bind(except)
    .fetch_one(pool)
    .await
}
