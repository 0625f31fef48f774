//! The `runs` table (docs/ledger.md#tables): a run's row from creation to its
//! end, what `status` shows while it works, crash marking and resuming, and
//! its pinned base commit. Not its items (see [`super::items`]).

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{FromRow, PgExecutor, PgPool};
use uuid::Uuid;

use crate::outcome::{Event, Outcome, Phase, RunKind, RunStatus};

use super::events::event;
use super::text::Result;

/// What a new run row needs.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    /// Repository identity (its remote URL, see `cli::repo_id`).
    pub repo: &'a str,
    /// `drain` or `run`.
    pub kind: RunKind,
    /// The snapshot's plan SHA.
    pub plan_sha: &'a str,
    /// The approval it runs under.
    pub approval_id: Uuid,
    /// Consume the approval (a new run) or not (a resumed crashed run,
    /// whose approval its first run consumed).
    pub consume: bool,
    /// The crashed run this one resumes.
    pub resumes: Option<Uuid>,
    /// The deadline (UTC).
    pub deadline: DateTime<Utc>,
    /// The zone name the deadline was resolved in.
    pub timezone: &'a str,
    /// Its agents run as root without `agent_user` (config
    /// `agents_as_root`); the report says what they could read.
    pub agents_as_root: bool,
}

/// The facts a run's binding signs (docs/contract.md#the-runs-binding),
/// as the ledger holds them when the run is created: its start and the
/// approval's use are the database server's clock.
#[derive(Debug, Clone)]
pub struct BindingFacts {
    /// The new run's id.
    pub run: Uuid,
    /// Its plan SHA.
    pub plan_sha: String,
    /// The approval it runs under.
    pub approval_id: Uuid,
    /// Its start (server time, microseconds).
    pub started_at: DateTime<Utc>,
    /// The run it resumes, if any.
    pub resumes: Option<Uuid>,
    /// The approval's use: the run that consumed it and when (server
    /// time); `None` when no use is recorded.
    pub used: Option<(Uuid, DateTime<Utc>)>,
}

/// What [`create_run`] did.
#[derive(Debug)]
pub enum Opened<E> {
    /// The run was created, bound and (for a new run) consumed its approval.
    Run(Uuid),
    /// The approval was consumed already: by this run (its use record), or
    /// named by this run although its use record is gone. Nothing was written.
    Used(Uuid),
    /// The binder refused the facts; nothing was written.
    Refused(E),
}

/// Creates the run row and, for a new run, consumes the approval in the same
/// transaction, then stores the binding `bind` makes of the facts (its JSON,
/// signature included) in that transaction too. A new run is
/// [`Opened::Used`] when a use of the approval is recorded, or when
/// another run names the approval (a deleted use record does not make an
/// approval usable again).
///
/// # Errors
/// Database errors.
pub async fn create_run<E>(
    pool: &PgPool,
    r: &NewRun<'_>,
    bind: impl FnOnce(&BindingFacts) -> std::result::Result<serde_json::Value, E>,
) -> Result<Opened<E>> {
    let id = Uuid::new_v4();
    let mut tx = pool.begin().await?;
    if r.consume
        && let Some(other) = sqlx::query_scalar::<_, Option<Uuid>>(
            "SELECT coalesce((SELECT run_id FROM approval_uses WHERE approval_id = $1), \
             (SELECT id FROM runs WHERE approval_id = $1 ORDER BY started_at LIMIT 1))",
        )
        .bind(r.approval_id)
        .fetch_one(&mut *tx)
        .await?
    {
        return Ok(Opened::Used(other));
    }
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let started_at: DateTime<Utc> = sqlx::query_scalar(
        "INSERT INTO runs (id, repo, kind, plan_sha, approval_id, status, started_at, deadline, timezone, host, pid, heartbeat_at, resumes, agents_as_root) \
         VALUES ($1, $2, $3, $4, $5, $11, now(), $6, $7, $8, $9, now(), $10, $12) RETURNING started_at",
    )
    .bind(id)
    .bind(r.repo)
    .bind(r.kind)
    .bind(r.plan_sha)
    .bind(r.approval_id)
    .bind(r.deadline)
    .bind(r.timezone)
    .bind(host)
    .bind(std::process::id() as i32)
    .bind(r.resumes)
    .bind(RunStatus::Running)
    .bind(r.agents_as_root)
    .fetch_one(&mut *tx)
    .await?;
    if r.consume {
        let done = sqlx::query("INSERT INTO approval_uses (approval_id, run_id, used_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING")
            .bind(r.approval_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            let other = approval_use(&mut *tx, r.approval_id).await?;
            return Ok(Opened::Used(other.map_or(id, |(run, _)| run)));
        }
    }
    let facts = BindingFacts {
        run: id,
        plan_sha: r.plan_sha.to_string(),
        approval_id: r.approval_id,
        started_at,
        resumes: r.resumes,
        used: approval_use(&mut *tx, r.approval_id).await?,
    };
    let binding = match bind(&facts) {
        Ok(b) => b,
        Err(e) => return Ok(Opened::Refused(e)),
    };
    sqlx::query("UPDATE runs SET binding = $2 WHERE id = $1")
        .bind(id)
        .bind(binding)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Opened::Run(id))
}

/// The recorded use of `approval`: the run that consumed it and when.
///
/// # Errors
/// Database errors.
pub async fn approval_use(
    db: impl PgExecutor<'_>,
    approval: Uuid,
) -> Result<Option<(Uuid, DateTime<Utc>)>> {
    sqlx::query_as("SELECT run_id, used_at FROM approval_uses WHERE approval_id = $1")
        .bind(approval)
        .fetch_optional(db)
        .await
}

/// What a run's binding is checked against besides [`RunRow`]: the
/// binding stored with it (its JSON) and the run it resumes.
#[derive(Debug, Clone, FromRow)]
pub struct BoundRow {
    /// The binding, if it has one (runs from before bindings have none).
    pub binding: Option<serde_json::Value>,
    /// The run it resumes, if any.
    pub resumes: Option<Uuid>,
}

/// The binding and `resumes` of run `run`.
///
/// # Errors
/// Database errors.
pub async fn bound_row(pool: &PgPool, run: Uuid) -> Result<Option<BoundRow>> {
    sqlx::query_as("SELECT binding, resumes FROM runs WHERE id = $1")
        .bind(run)
        .fetch_optional(pool)
        .await
}

/// The runs that name `approval`, oldest first: (id, the run it resumes,
/// start).
///
/// # Errors
/// Database errors.
pub async fn runs_of_approval(
    pool: &PgPool,
    approval: Uuid,
) -> Result<Vec<(Uuid, Option<Uuid>, DateTime<Utc>)>> {
    sqlx::query_as(
        "SELECT id, resumes, started_at FROM runs WHERE approval_id = $1 ORDER BY started_at",
    )
    .bind(approval)
    .fetch_all(pool)
    .await
}

/// A run row as `report` and resume read it.
#[derive(Debug, Clone, FromRow)]
pub struct RunRow {
    /// Run id.
    pub id: Uuid,
    /// `drain` or `run`.
    pub kind: RunKind,
    /// Plan SHA of its snapshot.
    pub plan_sha: String,
    /// Approval it ran under.
    pub approval_id: Option<Uuid>,
    /// How it ended, or that it is running.
    pub status: RunStatus,
    /// Start (UTC).
    pub started_at: DateTime<Utc>,
    /// End (UTC).
    pub ended_at: Option<DateTime<Utc>>,
    /// Deadline (UTC).
    pub deadline: Option<DateTime<Utc>>,
    /// Zone name.
    pub timezone: Option<String>,
    /// Host that ran it.
    pub host: Option<String>,
    /// Its pid.
    pub pid: Option<i32>,
    /// Current phase (while running).
    pub phase: Option<Phase>,
    /// Current item key.
    pub current_item_key: Option<String>,
    /// Current round.
    pub current_round: Option<i32>,
    /// Sleeping until (UTC).
    pub sleeping_until: Option<DateTime<Utc>>,
    /// Agent whose limit it sleeps on.
    pub sleeping_agent: Option<String>,
    /// What it sleeps for: `usage_limit` or `quota_reserve` (`None`:
    /// a usage limit, as every sleep before the reserve's).
    pub sleeping_kind: Option<String>,
    /// Exit code it ended with.
    pub exit_code: Option<i32>,
    /// Its agents ran as root without `agent_user` (docs/security.md).
    pub agents_as_root: bool,
}

impl RunRow {
    /// The zone the run recorded; UTC when it recorded none or an unknown one.
    pub fn zone(&self) -> chrono_tz::Tz {
        self.timezone
            .as_deref()
            .and_then(|z| z.parse().ok())
            .unwrap_or(chrono_tz::UTC)
    }
}

const RUN_COLUMNS: &str = "SELECT id, kind, plan_sha, approval_id, status, started_at, ended_at, deadline, timezone, host, pid, phase, current_item_key, current_round, sleeping_until, sleeping_agent, sleeping_kind, exit_code, agents_as_root FROM runs";

/// The newest run of `repo`, or the run `id`.
///
/// # Errors
/// Database errors.
pub async fn run_row(pool: &PgPool, repo: &str, id: Option<Uuid>) -> Result<Option<RunRow>> {
    match id {
        Some(id) => {
            sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!("{RUN_COLUMNS} WHERE id = $1")))
                .bind(id)
                .fetch_optional(pool)
                .await
        }
        None => {
            sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
                "{RUN_COLUMNS} WHERE repo = $1 ORDER BY started_at DESC LIMIT 1"
            )))
            .bind(repo)
            .fetch_optional(pool)
            .await
        }
    }
}

/// The newest `limit` runs of `repo`: (id, start in UTC, status).
///
/// # Errors
/// Database errors.
pub async fn recent_runs(
    pool: &PgPool,
    repo: &str,
    limit: i64,
) -> Result<Vec<(Uuid, DateTime<Utc>, RunStatus)>> {
    sqlx::query_as(
        "SELECT id, started_at, status FROM runs WHERE repo = $1 ORDER BY started_at DESC LIMIT $2",
    )
    .bind(repo)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Ids of `repo`'s runs that start with `prefix` (lowercase hex).
///
/// # Errors
/// Database errors.
pub async fn runs_with_prefix(pool: &PgPool, repo: &str, prefix: &str) -> Result<Vec<Uuid>> {
    sqlx::query_scalar("SELECT id FROM runs WHERE repo = $1 AND id::text LIKE $2 || '%'")
        .bind(repo)
        .bind(prefix)
        .fetch_all(pool)
        .await
}

/// Runs of `repo` still marked `running`. Called while holding the repo
/// lock once nobody vouches for them, so every one of them is dead: they
/// are marked `crashed` and returned (newest first), their items without an
/// end get `left_items` (the run decides which outcome that is) and their
/// open claims end `lost`.
///
/// # Errors
/// Database errors.
pub async fn mark_dead_runs_crashed(
    pool: &PgPool,
    repo: &str,
    left_items: Outcome,
) -> Result<Vec<RunRow>> {
    let rows = sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
        "{RUN_COLUMNS} WHERE repo = $1 AND status = $2 ORDER BY started_at DESC"
    )))
    .bind(repo)
    .bind(RunStatus::Running)
    .fetch_all(pool)
    .await?;
    for r in &rows {
        sqlx::query("UPDATE runs SET status = $2, ended_at = coalesce(ended_at, heartbeat_at), phase = NULL, sleeping_until = NULL WHERE id = $1").bind(r.id).bind(RunStatus::Crashed).execute(pool).await?;
        sqlx::query("UPDATE run_items SET outcome = $2, reason = 'the run crashed', ended_at = now() WHERE run_id = $1 AND outcome IS NULL").bind(r.id).bind(left_items).execute(pool).await?;
        super::claims::end_open(pool, r.id).await?;
        event(
            pool,
            Some(r.id),
            "run_crashed",
            json!({"pid": r.pid, "host": r.host}),
        )
        .await?;
    }
    Ok(rows)
}

/// The newest crashed or signal-stopped run of `repo` that has not been
/// resumed yet (either is resumed under its own approval; docs/ledger.md).
///
/// # Errors
/// Database errors.
pub async fn resumable_run(pool: &PgPool, repo: &str) -> Result<Option<RunRow>> {
    sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
        "{RUN_COLUMNS} r WHERE repo = $1 AND status IN ($2, $3) AND NOT EXISTS (SELECT 1 FROM runs n WHERE n.resumes = r.id) ORDER BY started_at DESC LIMIT 1"
    )))
    .bind(repo)
    .bind(RunStatus::Crashed)
    // A run a signal stopped is taken up like a crashed one (docs/ledger.md).
    .bind(RunStatus::StoppedSignal)
    .fetch_optional(pool)
    .await
}

/// Updates what `status` shows: phase, item, round; clears a sleep; and
/// writes the `phase` event, always.
///
/// The run's row is updated only when no other transaction holds it: with
/// many workers every one of them changes phase about seven times an item,
/// and when each waited for the row, their fenced transactions queued on
/// it one commit at a time (issue 27: 2,800 phase updates of 400 items took
/// 325 ms each, holding the pool's connections while they waited). The row
/// says what one worker of the run does; each worker's own phase is its
/// `workers` row's, and a skipped update is one another writer of the row
/// overtook.
///
/// # Errors
/// Database errors.
pub async fn set_phase(
    db: impl PgExecutor<'_>,
    run: Uuid,
    phase: Phase,
    item_key: Option<&str>,
    round: Option<u32>,
) -> Result<()> {
    sqlx::query(
        "WITH free AS (SELECT id FROM runs WHERE id = $1 FOR NO KEY UPDATE SKIP LOCKED), \
              u AS (UPDATE runs r SET phase = $2, current_item_key = $3, current_round = $4, sleeping_until = NULL, sleeping_agent = NULL, sleeping_kind = NULL, heartbeat_at = now() FROM free WHERE r.id = free.id) \
         INSERT INTO events (run_id, kind, data) SELECT id, $5, jsonb_build_object('phase', $2::text, 'key', $3::text, 'round', $4::int) FROM runs WHERE id = $1",
    )
        .bind(run)
        .bind(phase)
        .bind(item_key)
        .bind(round.map(|r| r as i32))
        .bind(Event::PhaseChanged.as_str())
        .execute(db)
        .await?;
    Ok(())
}

/// Marks the run as sleeping until `until` on `agent` (an account), for
/// `kind`: `usage_limit` or `quota_reserve` (the `limit_sleeps` kinds).
///
/// # Errors
/// Database errors.
pub async fn set_sleeping(
    db: impl PgExecutor<'_>,
    run: Uuid,
    until: DateTime<Utc>,
    (agent, kind): (&str, &str),
) -> Result<()> {
    sqlx::query(
        "WITH u AS (UPDATE runs SET phase = $4, sleeping_until = $2, sleeping_agent = $3, sleeping_kind = $6, heartbeat_at = now() WHERE id = $1 RETURNING id) \
         INSERT INTO events (run_id, kind, data) SELECT id, $5, jsonb_build_object('until', $2::timestamptz, 'agent', $3::text, 'kind', $6::text) FROM u",
    )
    .bind(run)
    .bind(until)
    .bind(agent)
    .bind(Phase::Sleeping)
    .bind(Event::Sleeping.as_str())
    .bind(kind)
    .execute(db)
    .await?;
    Ok(())
}

/// Ends a run with its final status and exit code.
///
/// # Errors
/// Database errors.
pub async fn finish_run(pool: &PgPool, run: Uuid, status: RunStatus, exit_code: i32) -> Result<()> {
    sqlx::query(
        "WITH u AS (UPDATE runs SET status = $2, exit_code = $3, ended_at = now(), phase = NULL, sleeping_until = NULL WHERE id = $1 RETURNING id) \
         INSERT INTO events (run_id, kind, data) SELECT id, $4, jsonb_build_object('status', $2::text, 'exit_code', $3::int) FROM u",
    )
    .bind(run)
    .bind(status)
    .bind(exit_code)
    .bind(Event::RunFinished.as_str())
    .execute(pool)
    .await?;
    Ok(())
}

/// The base commit of run `run`: the recorded one, else `proposed` is
/// recorded (the first writer wins) and returned. Once a base is recorded
/// it is only read: the row is not locked for it (every item of every
/// worker asks, issue 27).
///
/// # Errors
/// Database errors.
pub async fn pin_base(db: impl PgExecutor<'_>, run: Uuid, proposed: &str) -> Result<String> {
    // A writer that finds no base updates the row; one that committed a
    // base meanwhile wins: the UPDATE reads the row again under its lock.
    sqlx::query_scalar(
        "WITH pinned AS (SELECT base_commit FROM runs WHERE id = $1 AND base_commit IS NOT NULL), \
              u AS (UPDATE runs SET base_commit = coalesce(base_commit, $2) \
                    WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM pinned) RETURNING base_commit) \
         SELECT base_commit FROM pinned UNION ALL SELECT base_commit FROM u",
    )
    .bind(run)
    .bind(proposed)
    .fetch_one(db)
    .await
}

/// The base commit run `run` pinned (40 hex), if an item pinned it yet.
///
/// # Errors
/// Database errors.
pub async fn pinned_base(pool: &PgPool, run: Uuid) -> Result<Option<String>> {
    sqlx::query_scalar("SELECT base_commit FROM runs WHERE id = $1")
        .bind(run)
        .fetch_optional(pool)
        .await
        .map(Option::flatten)
}

/// The status of run `run`, if it exists.
///
/// # Errors
/// Database errors.
pub async fn run_status(pool: &PgPool, run: Uuid) -> Result<Option<RunStatus>> {
    sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
        .bind(run)
        .fetch_optional(pool)
        .await
}

/// The newest `running` run of `repo`, if any (whether its drain lives is
/// the repository lock's to say).
///
/// # Errors
/// Database errors.
pub async fn running_run(pool: &PgPool, repo: &str) -> Result<Option<RunRow>> {
    let id: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM runs WHERE repo = $1 AND status = $2 ORDER BY started_at DESC LIMIT 1",
    )
    .bind(repo)
    .bind(RunStatus::Running)
    .fetch_optional(pool)
    .await?;
    match id {
        Some(id) => run_row(pool, repo, Some(id)).await,
        None => Ok(None),
    }
}

/// Records `run`'s cost cap in USD (`max_cost_usd_per_run` of the plan that
/// started it), which every host then holds the run to ([`cost_cap`]).
///
/// # Errors
/// Database errors.
pub async fn set_cost_cap(pool: &PgPool, run: Uuid, usd: f64) -> Result<()> {
    sqlx::query("UPDATE runs SET cost_cap_usd = $2 WHERE id = $1")
        .bind(run)
        .bind(usd)
        .execute(pool)
        .await?;
    Ok(())
}

/// `run`'s recorded cost cap in USD; `None` for a run recorded before caps
/// were (each host's own config applies then).
///
/// # Errors
/// Database errors.
pub async fn cost_cap(pool: &PgPool, run: Uuid) -> Result<Option<f64>> {
    let cap: Option<Option<f64>> =
        sqlx::query_scalar("SELECT cost_cap_usd FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(pool)
            .await?;
    Ok(cap.flatten())
}

/// The drain's heartbeat for run `run` (`runs.heartbeat_at`, server clock):
/// while it is fresh no other drain declares the run crashed, whatever the
/// repository lock says (a server restart drops the lock with its session;
/// docs/ledger.md#locking). Only a running run beats.
///
/// # Errors
/// Database errors.
pub async fn beat_run(pool: &PgPool, run: Uuid) -> Result<()> {
    sqlx::query("UPDATE runs SET heartbeat_at = now() WHERE id = $1 AND status = $2")
        .bind(run)
        .bind(RunStatus::Running)
        .execute(pool)
        .await?;
    Ok(())
}
