//! The `workers` and `account_pauses` tables (docs/ledger.md#tables,
//! docs/workers.md): who works on a run, what each does now (for
//! `status`), their own leases, and the usage-limit pauses of an agent
//! account that every worker honours. Not the heartbeat's timing (that is
//! [`crate::run`]'s) nor the claims on items ([`super::claims`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, PgPool};
use uuid::Uuid;

use crate::outcome::{Event, Phase};

use super::text::{Result, pg};

/// A worker as its rows name it: `host:pid:n`, its host and process id.
#[derive(Debug, Clone, Copy)]
pub struct WorkerName<'a> {
    /// `host:pid:n`.
    pub name: &'a str,
    /// Host name.
    pub host: &'a str,
    /// Process id on that host.
    pub pid: u32,
}

/// A live worker as `status` lists it.
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct WorkerRow {
    /// `host:pid:n`.
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id on that host.
    pub pid: i32,
    /// The item it holds, if any (key).
    pub item_key: Option<String>,
    /// The round it is in (1-based).
    pub round: Option<i32>,
    /// The phase it is in (the ledger's phase word).
    pub phase: Option<String>,
    /// Until when its last heartbeat vouches for it (server clock, UTC).
    pub lease_until: DateTime<Utc>,
}

/// Registers worker `who` on `run` (again, after a restart of the same
/// name), its own lease `lease` from now.
///
/// # Errors
/// Database errors.
pub async fn join(pool: &PgPool, run: Uuid, who: WorkerName<'_>, lease: Duration) -> Result<()> {
    sqlx::query(
        "WITH w AS (INSERT INTO workers (id, run_id, host, pid, lease_until) \
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) \
         ON CONFLICT (id) DO UPDATE SET run_id = $2, started_at = now(), heartbeat_at = now(), \
           lease_until = EXCLUDED.lease_until, item_key = NULL, round = NULL, phase = NULL, stopped_at = NULL RETURNING id) \
         INSERT INTO events (run_id, kind, data) SELECT $2, $6, jsonb_build_object('worker', id, 'host', $3::text, 'pid', $4::int) FROM w",
    )
    .bind(who.name)
    .bind(run)
    .bind(who.host)
    .bind(who.pid as i32)
    .bind(lease.as_secs_f64())
    .bind(Event::WorkerJoined.as_str())
    .execute(pool)
    .await?;
    Ok(())
}

/// One process's heartbeat in one statement (docs/workers.md#heartbeats):
/// extends the leases of its workers `workers` (`host:pid:n`) and of its
/// claims `claims` (ids) to `lease` from now. A claim that ended or whose
/// lease already passed is not revived. One `worker_beat` event per run
/// of the process (`{"workers": [...], "lease_until": …}`), not one per
/// worker: at 20 workers a process, 20 times fewer rows for the board's
/// log to keep. Returns the ids of the claims it renewed and the server's
/// clock at the statement (UTC).
///
/// # Errors
/// Database errors.
pub async fn beat_process(
    pool: &PgPool,
    workers: &[String],
    claims: &[i64],
    lease: Duration,
) -> Result<(Vec<i64>, DateTime<Utc>)> {
    sqlx::query_as(
        "WITH w AS (UPDATE workers SET heartbeat_at = now(), \
                      lease_until = now() + make_interval(secs => $3) WHERE id = ANY($1) \
                      RETURNING id, run_id, lease_until), \
              c AS (UPDATE claims SET lease_until = now() + make_interval(secs => $3) \
                      WHERE id = ANY($2) AND ended_at IS NULL AND lease_until > now() RETURNING id), \
              e AS (INSERT INTO events (run_id, kind, data) \
                      SELECT run_id, $4, jsonb_build_object('workers', jsonb_agg(id ORDER BY id), \
                                                            'lease_until', max(lease_until)) \
                      FROM w GROUP BY run_id) \
         SELECT coalesce(array_agg(c.id), '{}'::bigint[]), clock_timestamp() FROM c",
    )
    .bind(workers)
    .bind(claims)
    .bind(lease.as_secs_f64())
    .bind(Event::WorkerBeat.as_str())
    .fetch_one(pool)
    .await
}

/// Worker `name` stopped (drained, deadline, signal).
///
/// # Errors
/// Database errors.
pub async fn leave(pool: &PgPool, name: &str) -> Result<()> {
    sqlx::query(
        "WITH w AS (UPDATE workers SET stopped_at = now(), item_key = NULL, phase = NULL WHERE id = $1 RETURNING id, run_id) \
         INSERT INTO events (run_id, kind, data) SELECT run_id, $2, jsonb_build_object('worker', id) FROM w",
    )
    .bind(name)
    .bind(Event::WorkerLeft.as_str())
    .execute(pool)
    .await?;
    Ok(())
}

/// Says in worker `worker`'s row what it does now, for `status`: item
/// `key`, `round` (from 1), `phase`.
///
/// # Errors
/// Database errors.
pub async fn doing(
    c: &mut PgConnection,
    worker: &str,
    key: Option<&str>,
    round: Option<u32>,
    phase: Option<Phase>,
) -> Result<()> {
    // Another item (or none): the last call's output is not this one's.
    sqlx::query(
        "UPDATE workers SET item_key = $2, round = $3, phase = $4, \
           output_tail = CASE WHEN item_key IS DISTINCT FROM $2 THEN NULL ELSE output_tail END \
         WHERE id = $1",
    )
    .bind(worker)
    .bind(key)
    .bind(round.map(|r| r as i32))
    .bind(phase.map(|p| p.as_str()))
    .execute(c)
    .await?;
    Ok(())
}

/// Writes the live ends of running calls' output, in one statement:
/// `(worker, item key, tail)` each, the tail already masked. A row whose
/// worker no longer works on that item is left alone (the output belongs
/// to the item, docs/serve.md#live-output).
///
/// # Errors
/// Database errors.
pub async fn show_output(pool: &PgPool, tails: &[(String, String, String)]) -> Result<()> {
    let ids: Vec<&str> = tails.iter().map(|t| t.0.as_str()).collect();
    let keys: Vec<&str> = tails.iter().map(|t| t.1.as_str()).collect();
    let texts: Vec<&str> = tails.iter().map(|t| t.2.as_str()).collect();
    sqlx::query(
        "UPDATE workers w SET output_tail = t.tail, output_at = now() \
           FROM unnest($1::text[], $2::text[], $3::text[]) AS t(id, key, tail) \
          WHERE w.id = t.id AND w.item_key = t.key AND w.stopped_at IS NULL",
    )
    .bind(ids)
    .bind(keys)
    .bind(texts)
    .execute(pool)
    .await?;
    Ok(())
}

/// Sets only the worker's phase (a sleep keeps its item and round).
///
/// # Errors
/// Database errors.
pub async fn doing_phase(c: &mut PgConnection, worker: &str, phase: Phase) -> Result<()> {
    sqlx::query("UPDATE workers SET phase = $2 WHERE id = $1")
        .bind(worker)
        .bind(phase.as_str())
        .execute(c)
        .await?;
    Ok(())
}

/// The workers of `run` that have not stopped and whose heartbeat still
/// vouches for them (their own lease or a claim's), by host and pid.
///
/// # Errors
/// Database errors.
pub async fn live_workers(pool: &PgPool, run: Uuid) -> Result<Vec<WorkerRow>> {
    sqlx::query_as(
        "SELECT w.id, w.host, w.pid, w.item_key, w.round, w.phase, \
           greatest(w.lease_until, (SELECT max(c.lease_until) FROM claims c \
                                    WHERE c.worker = w.id AND c.ended_at IS NULL)) AS lease_until \
         FROM workers w WHERE w.run_id = $1 AND w.stopped_at IS NULL AND w.lease_until > now() ORDER BY w.host, w.pid, w.id",
    )
    .bind(run)
    .fetch_all(pool)
    .await
}

/// Records that `account` hit its usage limit and is paused until `until`
/// (UTC), as worker `worker` of `run` saw it (`message`, redacted here):
/// every worker of that account, on any host, starts no call of it before
/// then ([`account_paused_until`]).
///
/// # Errors
/// Database errors.
pub async fn pause_account(
    pool: &PgPool,
    account: &str,
    until: DateTime<Utc>,
    run: Option<Uuid>,
    worker: &str,
    message: &str,
) -> Result<()> {
    insert_pause(pool, account, until, run, worker, message, false).await
}

/// Records that `account` has no credit (docs/limits.md#no-credit): it is
/// paused until `until` (the run's deadline), marked so, and every worker of
/// it, on any host, starts no item of it before then
/// ([`account_without_credit`]).
///
/// # Errors
/// Database errors.
pub async fn stop_account_without_credit(
    pool: &PgPool,
    account: &str,
    until: DateTime<Utc>,
    run: Option<Uuid>,
    worker: &str,
    message: &str,
) -> Result<()> {
    insert_pause(pool, account, until, run, worker, message, true).await
}

/// Inserts a pause of `account` (see [`pause_account`]), a no-credit stop
/// when `no_credit`.
async fn insert_pause(
    pool: &PgPool,
    account: &str,
    until: DateTime<Utc>,
    run: Option<Uuid>,
    worker: &str,
    message: &str,
    no_credit: bool,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO account_pauses (account, paused_until, run_id, worker, message, no_credit) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(account)
    .bind(until)
    .bind(run)
    .bind(worker)
    .bind(pg(message))
    .bind(no_credit)
    .execute(pool)
    .await?;
    Ok(())
}

/// The message of a running no-credit stop of `account` (the latest), if it
/// has one (by the server's clock).
///
/// # Errors
/// Database errors.
pub async fn account_without_credit(pool: &PgPool, account: &str) -> Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT message FROM account_pauses WHERE account = $1 AND no_credit AND paused_until > now() ORDER BY at DESC, id DESC LIMIT 1",
    )
    .bind(account)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(m,)| m))
}

/// The instant `account` is paused until, if a pause is still running (by the
/// server's clock).
///
/// # Errors
/// Database errors.
pub async fn account_paused_until(pool: &PgPool, account: &str) -> Result<Option<DateTime<Utc>>> {
    let (t,): (Option<DateTime<Utc>>,) = sqlx::query_as(
        "SELECT max(paused_until) FROM account_pauses WHERE account = $1 AND paused_until > now()",
    )
    .bind(account)
    .fetch_one(pool)
    .await?;
    Ok(t)
}

/// The database server's clock now (`clock_timestamp()`, UTC): the one clock
/// every host's decisions are judged by (docs/workers.md#what-clocks-must-agree).
///
/// # Errors
/// Database errors.
pub async fn server_time(pool: &PgPool) -> Result<DateTime<Utc>> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(pool)
        .await
}

/// A heartbeat that vouches for a run: who gave it and how long ago (server
/// clock).
#[derive(Debug, Clone, FromRow)]
pub struct Vouch {
    /// `drain` for the run's own drain, else the worker's `host:pid:n`.
    pub who: String,
    /// The host it beat from.
    pub host: String,
    /// Its process id there.
    pub pid: i32,
    /// Seconds since its last heartbeat, by the server's clock.
    pub age_secs: f64,
}

/// The heartbeats of run `run` newer than `within`: its drain's
/// (`runs.heartbeat_at`) and those of its workers that have not stopped,
/// freshest first.
///
/// # Errors
/// Database errors.
pub async fn recent_beats(pool: &PgPool, run: Uuid, within: Duration) -> Result<Vec<Vouch>> {
    sqlx::query_as(
        "SELECT who, host, pid, age_secs FROM ( \
           SELECT 'drain' AS who, coalesce(host, '') AS host, coalesce(pid, 0) AS pid, \
                  extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 AS age_secs \
           FROM runs WHERE id = $1 AND heartbeat_at IS NOT NULL \
           UNION ALL \
           SELECT id, host, pid, extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 \
           FROM workers WHERE run_id = $1 AND stopped_at IS NULL \
         ) b WHERE age_secs < $2 ORDER BY age_secs",
    )
    .bind(run)
    .bind(within.as_secs_f64())
    .fetch_all(pool)
    .await
}

/// Server connections of nightshift processes on this ledger's database,
/// per host (from `pg_stat_activity`, by [`super::application_name`]), leaving out
/// the process `except` (`host:pid`, the one asking); hosts sorted.
///
/// # Errors
/// Database errors.
pub async fn connections_by_host(pool: &PgPool, except: &str) -> Result<Vec<(String, i64)>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT application_name, count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND starts_with(application_name, $1) GROUP BY 1",
    )
    .bind(format!("{} ", super::APPLICATION))
    .fetch_all(pool)
    .await?;
    let mut by_host: std::collections::BTreeMap<String, i64> = Default::default();
    for (name, n) in rows {
        let who = name.trim_start_matches(super::APPLICATION).trim_start();
        if who == except {
            continue;
        }
        let host = who.rsplit_once(':').map_or(who, |(h, _)| h);
        *by_host.entry(host.to_string()).or_default() += n;
    }
    Ok(by_host.into_iter().collect())
}
