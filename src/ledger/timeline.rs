//! The timed facts of one run as `report --html` draws them
//! (docs/commands.md#report): the run's times, its items, rounds, agent
//! calls, gate runs, usage-limit sleeps and the CI fix rounds its watches
//! asked for, read in a few statements. Rows
//! only: the bars, lanes and page are [`crate::timeline`]'s.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

use crate::outcome::{Event, Outcome};

use super::text::Result;

/// One item as the table under the timeline lists it.
#[derive(Debug, Clone, FromRow)]
pub struct ItemLine {
    /// Row id in `run_items`.
    pub id: i64,
    /// Index in the plan (1-based).
    pub item_index: i32,
    /// Title from the backlog.
    pub title: String,
    /// Outcome (`None` while running).
    pub outcome: Option<Outcome>,
    /// Why it ended so (failures, blocked, …).
    pub reason: Option<String>,
    /// The PR, once opened.
    pub pr_url: Option<String>,
    /// Its number.
    pub pr_number: Option<i64>,
    /// Rounds used.
    pub rounds: i32,
    /// Tokens used by its agent calls.
    pub tokens: i64,
    /// Cost in US dollars, where the agents report one.
    pub cost_usd: Option<f64>,
    /// Start (UTC).
    pub started_at: DateTime<Utc>,
    /// End (UTC), `None` while running.
    pub ended_at: Option<DateTime<Utc>>,
    /// The worker that ran it (`host:pid:n`), when the ledger knows.
    pub worker: Option<String>,
}

/// The run's own times, status and zone.
#[derive(Debug, Clone, FromRow)]
pub struct RunFacts {
    /// Its status word.
    pub status: String,
    /// Start (UTC).
    pub started_at: DateTime<Utc>,
    /// End (UTC), once it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// Its last heartbeat (UTC).
    pub heartbeat_at: DateTime<Utc>,
    /// The deadline (UTC).
    pub deadline: Option<DateTime<Utc>>,
    /// The zone the deadline was resolved in.
    pub timezone: String,
}

/// A usage-limit sleep: (run item id, agent, from, until).
pub type SleepFacts = (Option<i64>, String, DateTime<Utc>, DateTime<Utc>);

/// One round's times.
#[derive(Debug, Clone, FromRow)]
pub struct RoundFacts {
    /// Row id in `rounds`.
    pub id: i64,
    /// Its item's row id.
    pub run_item_id: i64,
    /// Its item's key.
    pub item_key: String,
    /// The round (1-based).
    pub n: i32,
    /// Start (UTC).
    pub started_at: DateTime<Utc>,
    /// End (UTC), once it ended.
    pub ended_at: Option<DateTime<Utc>>,
}

/// One agent call's times.
#[derive(Debug, Clone, FromRow)]
pub struct CallFacts {
    /// Its round, if it was in one.
    pub round_id: Option<i64>,
    /// The agent's role (`writer`, `reviewer`, …).
    pub role: String,
    /// Start (UTC).
    pub started_at: DateTime<Utc>,
    /// Wall time in milliseconds.
    pub duration_ms: i64,
}

/// A fix round a CI watch of the run asked for (its `ci_fix_wanted`
/// event, docs/github.md#fix-rounds): the rounds of the item that start
/// after it are that fix round's.
#[derive(Debug, Clone, FromRow)]
pub struct FixFacts {
    /// The item's key.
    pub item_key: String,
    /// Its number among the PR's fix rounds (1-based).
    pub n: i32,
    /// The failed required checks it is to repair, as the watch named them
    /// (`` `lint`, `test` ``).
    pub checks: String,
    /// When it was asked for (UTC).
    pub at: DateTime<Utc>,
}

/// Everything [`timeline_rows`] reads of one run.
#[derive(Debug, Clone)]
pub struct TimelineRows {
    /// The run's times.
    pub run: RunFacts,
    /// Its items in plan order.
    pub items: Vec<ItemLine>,
    /// Its rounds in time order.
    pub rounds: Vec<RoundFacts>,
    /// Its agent calls in time order.
    pub calls: Vec<CallFacts>,
    /// Its gate runs: (round id, milliseconds), in order.
    pub gates: Vec<(i64, i64)>,
    /// Its usage-limit sleeps in time order.
    pub sleeps: Vec<SleepFacts>,
    /// The fix rounds its CI watches asked for, in time order.
    pub fixes: Vec<FixFacts>,
}

/// Reads the timed facts of run `run`; `Ok(None)`: no such run.
///
/// # Errors
/// Database errors.
pub async fn timeline_rows(pool: &PgPool, run: Uuid) -> Result<Option<TimelineRows>> {
    let facts: Option<RunFacts> = sqlx::query_as(
        "SELECT status, started_at, ended_at, heartbeat_at, deadline, timezone FROM runs WHERE id = $1",
    )
    .bind(run)
    .fetch_optional(pool)
    .await?;
    let Some(facts) = facts else { return Ok(None) };
    Ok(Some(TimelineRows {
        run: facts,
        items: rows_of_run(
            "SELECT id, item_index, title, outcome, reason, pr_url, pr_number, rounds, tokens, cost_usd, \
             started_at, ended_at, worker FROM run_items WHERE run_id = $1 ORDER BY item_index, id",
            run,
            pool,
        )
        .await?,
        rounds: rows_of_run(
            "SELECT r.id, r.run_item_id, i.item_key, r.n, r.started_at, r.ended_at FROM rounds r \
             JOIN run_items i ON i.id = r.run_item_id WHERE i.run_id = $1 ORDER BY r.started_at, r.id",
            run,
            pool,
        )
        .await?,
        calls: rows_of_run(
            "SELECT c.round_id, c.role, c.started_at, c.duration_ms FROM agent_calls c \
             JOIN run_items i ON i.id = c.run_item_id WHERE i.run_id = $1 ORDER BY c.started_at, c.id",
            run,
            pool,
        )
        .await?,
        gates: rows_of_run(
            "SELECT g.round_id, g.duration_ms FROM gate_runs g JOIN rounds r ON r.id = g.round_id \
             JOIN run_items i ON i.id = r.run_item_id WHERE i.run_id = $1 ORDER BY g.id",
            run,
            pool,
        )
        .await?,
        sleeps: rows_of_run(
            "SELECT run_item_id, agent, slept_from, slept_until FROM limit_sleeps WHERE run_id = $1 ORDER BY slept_from",
            run,
            pool,
        )
        .await?,
        fixes: sqlx::query_as(
            "SELECT data->>'key' AS item_key, coalesce((data->>'n')::int, 1) AS n, \
             coalesce(data->>'checks', '') AS checks, at FROM events \
             WHERE run_id = $1 AND kind = $2 AND data ? 'key' ORDER BY seq",
        )
        .bind(run)
        .bind(Event::CiFixWanted.as_str())
        .fetch_all(pool)
        .await?,
    }))
}

/// Every row `sql` (whose one parameter, `$1`, is the run's id) returns
/// for run `run`.
async fn rows_of_run<T>(sql: &'static str, run: Uuid, pool: &PgPool) -> Result<Vec<T>>
where
    T: for<'r> FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(sql).bind(run).fetch_all(pool).await
}
