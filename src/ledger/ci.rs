//! The `ci_watches` and `ci_checks` tables (docs/ledger.md#tables,
//! docs/github.md#ci): one watch of a PR's checks per item of a run, the
//! head it follows, how it ended, and the checks it saw. Rows only: when a
//! watch ends, and in which state, is `run`'s.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::outcome::{CiState, Event};

use super::text::{Result, pg, pgo};

/// The columns of a [`WatchRow`], in a `SELECT` of `ci_watches`.
const WATCH_COLUMNS: &str = "id, run_id, item_key, pr_number, head_sha, base_sha, ci_state, reason, all_reported, fix_rounds, started_at, wait_until, ended_at, fix_failure IS NOT NULL AS fixing, fix_note";

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
    /// A fix round is wanted or running (its item is on the queue again):
    /// the watch waits for its end.
    pub fixing: bool,
    /// How the latest fix round ended, if one ran.
    pub fix_note: Option<String>,
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
    let q = format!("SELECT {WATCH_COLUMNS} FROM ci_watches WHERE run_id = $1 ORDER BY id");
    sqlx::query_as(sqlx::AssertSqlSafe(q))
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

/// A fix round a watch wants (see [`want_fix`]), as the worker that
/// claimed its item reads it.
#[derive(Debug, Clone, FromRow)]
pub struct FixWanted {
    /// The watch.
    pub watch_id: i64,
    pub pr_number: i64,
    /// The PR's head the round starts from (its push's lease).
    pub head_sha: String,
    /// Fix rounds this watch ran before this one.
    pub fix_rounds: i32,
    /// What the round's writer is told (masked, bounded, framed).
    pub failure: String,
    /// The failed checks' names, for the PR comment and the report.
    pub checks: String,
    /// The item's row in the run (the round's rounds and calls are its).
    pub item_id: i64,
}

/// What [`want_fix`] asks for.
#[derive(Debug, Clone)]
pub struct WantFix<'a> {
    pub watch: i64,
    /// The head the watch follows (the ask holds only while it does).
    pub head: &'a str,
    /// Fix rounds the watch ran so far (likewise).
    pub fix_rounds: i32,
    /// What the round's writer is told.
    pub failure: &'a str,
    /// The failed checks' names.
    pub checks: &'a str,
    /// The item's contract, for a queue row the run did not have (a PR
    /// tended before the workers started).
    pub contract_sha: &'a str,
}

/// Asks for a fix round of watch `f.watch` (docs/github.md#fix-rounds): the
/// watch keeps the failure and the checks, and its item goes back on the
/// run's queue for a worker to claim (put there after the others when the
/// run had not queued it). Only while the watch is open, at `f.head`, with
/// `f.fix_rounds` rounds run and no fix wanted yet (two watchers of one
/// run ask once). Returns whether it was asked.
///
/// # Errors
/// Database errors.
pub async fn want_fix(db: impl PgExecutor<'_>, f: &WantFix<'_>) -> Result<bool> {
    let asked: Option<i64> = sqlx::query_scalar(
        "WITH w AS (UPDATE ci_watches SET fix_failure = $2, fix_checks = $3 \
                    WHERE id = $1 AND ci_state IS NULL AND fix_failure IS NULL AND head_sha = $4 AND fix_rounds = $5 \
                    RETURNING id, run_id, item_key, pr_number, head_sha, fix_rounds), \
         q AS (INSERT INTO run_queue (run_id, position, item_key, contract_sha) \
               SELECT w.run_id, coalesce((SELECT max(position) + 1 FROM run_queue WHERE run_id = w.run_id), 0), w.item_key, $7 FROM w \
               ON CONFLICT (run_id, item_key) DO UPDATE SET done_at = NULL RETURNING item_key), \
         e AS (INSERT INTO events (run_id, kind, data) SELECT run_id, $6, \
                jsonb_build_object('key', item_key, 'pr', pr_number, 'head', head_sha, 'n', fix_rounds + 1, 'checks', $3::text) FROM w) \
         SELECT w.id FROM w",
    )
    .bind(f.watch)
    .bind(pg(f.failure))
    .bind(pg(f.checks))
    .bind(f.head)
    .bind(f.fix_rounds)
    .bind(Event::CiFixWanted.as_str())
    .bind(f.contract_sha)
    .fetch_optional(db)
    .await?;
    Ok(asked.is_some())
}

/// The fix round wanted for item `key` of run `run`, if one is.
///
/// # Errors
/// Database errors.
pub async fn fix_wanted(
    db: impl PgExecutor<'_>,
    run: Uuid,
    key: &str,
) -> Result<Option<FixWanted>> {
    sqlx::query_as(
        "SELECT w.id AS watch_id, w.pr_number, w.head_sha, w.fix_rounds, w.fix_failure AS failure, \
                coalesce(w.fix_checks, '') AS checks, i.id AS item_id \
         FROM ci_watches w JOIN run_items i ON i.run_id = w.run_id AND i.item_key = w.item_key \
         WHERE w.run_id = $1 AND w.item_key = $2 AND w.fix_failure IS NOT NULL",
    )
    .bind(run)
    .bind(key)
    .fetch_optional(db)
    .await
}

/// How a fix round ended, as [`end_fix`] writes it.
#[derive(Debug, Clone)]
pub struct FixEnd<'a> {
    pub watch: i64,
    /// The head the round pushed; `None`: it pushed nothing.
    pub pushed: Option<&'a str>,
    /// How it ended, in a sentence.
    pub result: &'a str,
    /// The worker that ran it (`host:pid:n`).
    pub worker: &'a str,
    /// The watch's new wait after a push (`ci_wait` from now, capped by
    /// the deadline).
    pub wait_until: DateTime<Utc>,
    /// Whether the round counts against `ci_rounds`: `false` for one a
    /// signal or the deadline interrupted before it pushed (it is not
    /// spent; the watch is free to ask for it again).
    pub counted: bool,
}

/// Ends the fix round watch `f.watch` wanted: one more fix round counted,
/// its row and event written, and the watch goes on — at the pushed head
/// with a new wait, or at the same head (its checks are judged again). A
/// round not `counted` only withdraws the wish ([`withdraw_fix`]).
///
/// # Errors
/// Database errors.
pub async fn end_fix(db: &mut sqlx::PgConnection, f: &FixEnd<'_>) -> Result<()> {
    if !f.counted {
        return withdraw_fix(db, f).await;
    }
    sqlx::query(
        "WITH old AS (SELECT id, head_sha, fix_checks FROM ci_watches WHERE id = $1 AND fix_failure IS NOT NULL FOR UPDATE), \
         w AS (UPDATE ci_watches c SET fix_failure = NULL, fix_checks = NULL, fix_rounds = fix_rounds + 1, fix_note = $3, \
                      head_sha = coalesce($2, c.head_sha), \
                      wait_until = CASE WHEN $2::text IS NULL THEN c.wait_until ELSE $5 END, \
                      started_at = CASE WHEN $2::text IS NULL THEN c.started_at ELSE now() END \
               FROM old WHERE c.id = old.id \
               RETURNING c.id, c.run_id, c.item_key, c.pr_number, c.fix_rounds, old.head_sha AS from_head, coalesce(old.fix_checks, '') AS checks), \
         r AS (INSERT INTO ci_fix_rounds (watch_id, n, checks, from_head, to_head, result, worker) \
               SELECT id, fix_rounds, checks, from_head, $2, $3, $4 FROM w) \
         INSERT INTO events (run_id, kind, data) SELECT run_id, $6, \
                jsonb_build_object('key', item_key, 'pr', pr_number, 'n', fix_rounds, 'checks', checks, 'from', from_head, 'to', $2::text, 'result', $3::text, 'worker', $4::text, 'counted', true) FROM w",
    )
    .bind(f.watch)
    .bind(f.pushed)
    .bind(pg(f.result))
    .bind(f.worker)
    .bind(f.wait_until)
    .bind(Event::CiFixRound.as_str())
    .execute(db)
    .await?;
    Ok(())
}

/// Withdraws the fix round watch `f.watch` wanted without counting it (a
/// signal or the deadline stopped it before it pushed): the wish and its
/// failure text are cleared, `fix_rounds` stays, no `ci_fix_rounds` row is
/// written, and a `ci_fix_round` event says `counted: false`. The watch
/// then judges its head again and asks anew if the budget and the deadline
/// still allow.
///
/// # Errors
/// Database errors.
async fn withdraw_fix(db: &mut sqlx::PgConnection, f: &FixEnd<'_>) -> Result<()> {
    sqlx::query(
        "WITH old AS (SELECT id, head_sha, fix_checks FROM ci_watches WHERE id = $1 AND fix_failure IS NOT NULL FOR UPDATE), \
         w AS (UPDATE ci_watches c SET fix_failure = NULL, fix_checks = NULL FROM old WHERE c.id = old.id \
               RETURNING c.run_id, c.item_key, c.pr_number, c.fix_rounds, old.head_sha AS from_head, coalesce(old.fix_checks, '') AS checks) \
         INSERT INTO events (run_id, kind, data) SELECT run_id, $4, \
                jsonb_build_object('key', item_key, 'pr', pr_number, 'n', fix_rounds + 1, 'checks', checks, 'from', from_head, 'to', NULL, 'result', $2::text, 'worker', $3::text, 'counted', false) FROM w",
    )
    .bind(f.watch)
    .bind(pg(f.result))
    .bind(f.worker)
    .bind(Event::CiFixRound.as_str())
    .execute(db)
    .await?;
    Ok(())
}

/// The head an earlier attempt of a fix round pushed to PR `pr` of item
/// `key` in run `run` from `from` (its `pushed` event), if one did: a
/// worker that died after its push but before the round's end was
/// recorded. The worker that takes the round over counts that push
/// instead of redoing it.
///
/// # Errors
/// Database errors.
pub async fn lost_fix_push(
    db: impl PgExecutor<'_>,
    run: Uuid,
    key: &str,
    pr: i64,
    from: &str,
) -> Result<Option<String>> {
    sqlx::query_scalar(
        "SELECT data->>'to' FROM events WHERE run_id = $1 AND kind = $2 AND data->>'key' = $3 \
         AND data->'pr' = to_jsonb($4::bigint) AND data->>'from' = $5 AND data->>'to' IS NOT NULL ORDER BY seq DESC LIMIT 1",
    )
    .bind(run)
    .bind(Event::Pushed.as_str())
    .bind(key)
    .bind(pr)
    .bind(from)
    .fetch_optional(db)
    .await
}

/// One fix round of a watch, as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct FixRow {
    pub n: i32,
    /// The failed checks it was to repair (names, comma-separated).
    pub checks: String,
    pub from_head: String,
    /// The head it pushed; `None`: nothing was pushed.
    pub to_head: Option<String>,
    pub result: String,
    pub worker: Option<String>,
}

/// The fix rounds of watch `watch`, in order.
///
/// # Errors
/// Database errors.
pub async fn fix_rounds_of(db: impl PgExecutor<'_>, watch: i64) -> Result<Vec<FixRow>> {
    sqlx::query_as("SELECT n, checks, from_head, to_head, result, worker FROM ci_fix_rounds WHERE watch_id = $1 ORDER BY n")
        .bind(watch)
        .fetch_all(db)
        .await
}

/// How many watches of run `run` are still open: while one is, a fix
/// round may still be wanted, so the run's workers wait for work.
///
/// # Errors
/// Database errors.
pub async fn open_watches(db: impl PgExecutor<'_>, run: Uuid) -> Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM ci_watches WHERE run_id = $1 AND ci_state IS NULL")
        .bind(run)
        .fetch_one(db)
        .await
}

/// A watch with its head's checks and its fix rounds, as the morning
/// reads it.
#[derive(Debug, Clone)]
pub struct WatchView {
    pub watch: WatchRow,
    /// The checks seen for the watch's current head.
    pub checks: Vec<CheckRow>,
    pub fixes: Vec<FixRow>,
}

/// The watches of run `run` with their head's checks and fix rounds.
///
/// # Errors
/// Database errors.
pub async fn views_of_run(pool: &sqlx::PgPool, run: Uuid) -> Result<Vec<WatchView>> {
    let mut out = Vec::new();
    for watch in watches_of_run(pool, run).await? {
        let checks = checks_of(pool, watch.id, &watch.head_sha).await?;
        let fixes = fix_rounds_of(pool, watch.id).await?;
        out.push(WatchView {
            watch,
            checks,
            fixes,
        });
    }
    Ok(out)
}

/// The conclusions of a failed check as GitHub words them (check runs and
/// statuses), as `ci_checks` keeps them.
const FAILED: &[&str] = &[
    "failure",
    "timed_out",
    "cancelled",
    "action_required",
    "startup_failure",
    "stale",
    "error",
];

/// The required checks that ended red on `head`, the head nightshift last
/// pushed to PR `pr` of item `key` in `repo`, as the latest watch of that
/// PR saw them when it ended `ci_failed` at that head — not when the
/// failure was the base's too (docs/github.md#fix-rounds). Empty
/// otherwise.
///
/// # Errors
/// Database errors.
pub async fn red_at(
    db: &sqlx::PgPool,
    repo: &str,
    key: &str,
    pr: u64,
    head: &str,
) -> Result<Vec<String>> {
    let failed: Vec<String> = FAILED.iter().map(|s| s.to_string()).collect();
    sqlx::query_scalar(
        "WITH last AS (SELECT w.* FROM ci_watches w JOIN runs r ON r.id = w.run_id \
                       WHERE r.repo = $1 AND w.item_key = $2 AND w.pr_number = $3 ORDER BY w.id DESC LIMIT 1) \
         SELECT c.name FROM last JOIN ci_checks c ON c.watch_id = last.id AND c.head_sha = last.head_sha \
         WHERE last.head_sha = $4 AND last.ci_state = 'ci_failed' \
           AND coalesce(last.reason, '') NOT LIKE '%fails on the base%' \
           AND c.required AND c.conclusion = ANY($5) ORDER BY c.name",
    )
    .bind(repo)
    .bind(key)
    .bind(pr as i64)
    .bind(head)
    .bind(&failed)
    .fetch_all(db)
    .await
}
