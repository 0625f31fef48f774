//! The ledger as a work queue: claims, leases, fencing and account pauses
//! (docs/workers.md).
//!
//! A run's items are enqueued once, in backlog order ([`enqueue`]). Workers —
//! tasks of one process (`drain --jobs N`) or processes on other hosts
//! (`nightshift worker`) — [`claim`] the first item nobody holds with
//! `FOR UPDATE SKIP LOCKED`, hold it by a lease renewed by [`Claim::renew`],
//! and end it with [`Claim::finish`]. A worker that stops renewing (killed,
//! paused, partitioned) loses the claim when the lease passes; the next
//! [`claim`] takes the item over as a new attempt. Every write of an attempt
//! runs inside [`Claim::fenced`], which commits only while the claim is still
//! live, so a worker that lost its item writes nothing more. Leases are judged
//! by the server's clock (`now()`), never a host's.
//!
//! This module is not the item loop (that is `run`) and knows nothing of
//! agents or git: it only hands out items and says who holds what.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

/// Result of a queue call.
pub type Result<T> = std::result::Result<T, sqlx::Error>;

/// The shortest lease a config may set: a heartbeat must fit inside it with
/// room for a slow database round trip (docs/config.md, `lease`).
pub const MIN_LEASE: Duration = Duration::from_secs(5);

/// The default lease (`lease = "2m"`).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);

/// Who a worker is: `host:pid:n`, unique while the process lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerId {
    /// Host name as the OS reports it.
    pub host: String,
    /// Process id on that host.
    pub pid: u32,
    /// The worker's number within its process (1-based).
    pub n: u32,
}

impl WorkerId {
    /// Worker `n` (1-based) of this process.
    pub fn this_process(n: u32) -> WorkerId {
        let host = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown-host".to_string());
        WorkerId {
            host,
            pid: std::process::id(),
            n,
        }
    }
}

impl std::fmt::Display for WorkerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.host, self.pid, self.n)
    }
}

/// One item of a run as it is enqueued.
#[derive(Debug, Clone)]
pub struct QueuedItem {
    /// Position in backlog order (0-based).
    pub position: i32,
    /// The item's key (hex SHA-256).
    pub item_key: String,
    /// The sealed contract it runs under (hex SHA-256).
    pub contract_sha: String,
}

/// Puts a run's items on its queue, in backlog order, in one statement.
/// Enqueuing again is a no-op for items already there (a resumed drain).
///
/// # Errors
/// Database errors.
pub async fn enqueue(pool: &PgPool, run: Uuid, items: &[QueuedItem]) -> Result<()> {
    let positions: Vec<i32> = items.iter().map(|i| i.position).collect();
    let keys: Vec<&str> = items.iter().map(|i| i.item_key.as_str()).collect();
    let shas: Vec<&str> = items.iter().map(|i| i.contract_sha.as_str()).collect();
    sqlx::query(
        "INSERT INTO run_queue (run_id, position, item_key, contract_sha) \
         SELECT $1, p, k, c FROM UNNEST($2::int[], $3::text[], $4::text[]) AS t(p, k, c) \
         ON CONFLICT DO NOTHING",
    )
    .bind(run)
    .bind(&positions)
    .bind(&keys)
    .bind(&shas)
    .execute(pool)
    .await?;
    Ok(())
}

/// A live claim on one item: the attempt's fencing token.
#[derive(Debug, Clone, FromRow)]
pub struct Claim {
    /// The claim's id (the fencing token; a later attempt has a larger id).
    pub id: i64,
    /// The run.
    pub run_id: Uuid,
    /// Position of the item in backlog order (0-based).
    pub position: i32,
    /// The item's key.
    pub item_key: String,
    /// The contract it runs under.
    pub contract_sha: String,
    /// 1 for the first attempt in this run, 2 after one takeover, …
    pub attempt: i32,
    /// The worker holding it (`host:pid:n`).
    pub worker: String,
    /// When the lease runs out unless renewed (server clock, UTC).
    pub lease_until: DateTime<Utc>,
}

/// Why a claim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimEnd {
    /// The item ended (any outcome): it is done for this run.
    Finished,
    /// The lease passed before the holder renewed it; another worker may take
    /// the item over.
    Lost,
    /// The holder gave the item back unfinished (a signal, the deadline): it
    /// stays on the queue.
    Released,
}

impl ClaimEnd {
    /// The ledger's word for it (`claims.end_reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimEnd::Finished => "finished",
            ClaimEnd::Lost => "lost",
            ClaimEnd::Released => "released",
        }
    }
}

/// The claim is no longer this worker's: its lease passed or another attempt
/// took the item over. The worker must stop the item and write nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostClaim {
    /// The claim that was lost.
    pub claim_id: i64,
    /// The item.
    pub item_key: String,
}

impl std::fmt::Display for LostClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "claim {} on item {} was lost (its lease passed): another worker owns the item now",
            self.claim_id,
            &self.item_key[..self.item_key.len().min(8)]
        )
    }
}

/// A fenced step could not run: the claim was lost, or the database failed.
/// Nothing was written either way.
#[derive(Debug)]
pub enum FenceError {
    /// The claim is no longer live.
    Lost(LostClaim),
    /// The database failed.
    Db(sqlx::Error),
}

impl std::fmt::Display for FenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FenceError::Lost(l) => l.fmt(f),
            FenceError::Db(e) => write!(f, "ledger: {e}"),
        }
    }
}

impl std::error::Error for FenceError {}

impl From<sqlx::Error> for FenceError {
    fn from(e: sqlx::Error) -> Self {
        FenceError::Db(e)
    }
}

/// Claims the first item of `run` in backlog order that is not done and not
/// held by a live claim; an item whose claim's lease passed is taken over as
/// a new attempt (its old claim is ended `lost`). `None`: nothing is left to
/// claim now (every item is done or held).
///
/// `lease` is how long the claim lives without a renewal.
///
/// # Errors
/// Database errors.
pub async fn claim(
    pool: &PgPool,
    run: Uuid,
    worker: &WorkerId,
    lease: Duration,
) -> Result<Option<Claim>> {
    let mut tx = pool.begin().await?;
    expire(&mut tx, run).await?;
    // The row lock alone does not keep two workers off one item: a worker
    // whose SELECT took its snapshot before another's claim committed finds
    // the row unlocked once that claim's transaction ends, and its snapshot
    // does not see the claim. The INSERT (a new statement, a fresh snapshot,
    // under the row's lock) therefore claims only an item with no live claim;
    // when it finds one, the next SELECT sees it too and passes the item by.
    loop {
        let Some(next) = next_unclaimed(&mut tx, run).await? else {
            tx.commit().await?;
            return Ok(None);
        };
        if let Some(claim) = insert_claim(&mut tx, run, worker, lease, next).await? {
            tx.commit().await?;
            return Ok(Some(claim));
        }
    }
}

/// The first item of `run` in backlog order that is not done and has no live
/// claim as this statement sees it, locked (`FOR UPDATE SKIP LOCKED`):
/// (position, key, contract SHA).
async fn next_unclaimed(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
) -> Result<Option<(i32, String, String)>> {
    sqlx::query_as(
        "SELECT q.position, q.item_key, q.contract_sha FROM run_queue q \
         WHERE q.run_id = $1 AND q.done_at IS NULL \
           AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.run_id = q.run_id \
                           AND c.item_key = q.item_key AND c.ended_at IS NULL) \
         ORDER BY q.position FOR UPDATE SKIP LOCKED LIMIT 1",
    )
    .bind(run)
    .fetch_optional(&mut **tx)
    .await
}

/// Inserts the next attempt's claim on the locked item `next` for `worker`,
/// unless a live claim on it committed meanwhile (`None`).
async fn insert_claim(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    worker: &WorkerId,
    lease: Duration,
    next: (i32, String, String),
) -> Result<Option<Claim>> {
    let (position, item_key, contract_sha) = next;
    sqlx::query_as(
        "INSERT INTO claims (run_id, item_key, attempt, worker, host, pid, lease_until) \
         SELECT $1, $2, COALESCE(MAX(attempt), 0) + 1, $3, $4, $5, \
                now() + make_interval(secs => $6) \
         FROM claims WHERE run_id = $1 AND item_key = $2 \
         HAVING count(*) FILTER (WHERE ended_at IS NULL) = 0 \
         RETURNING id, run_id, $7::int AS position, item_key, $8::text AS contract_sha, attempt, worker, lease_until",
    )
    .bind(run)
    .bind(&item_key)
    .bind(worker.to_string())
    .bind(&worker.host)
    .bind(worker.pid as i32)
    .bind(lease.as_secs_f64())
    .bind(position)
    .bind(&contract_sha)
    .fetch_optional(&mut **tx)
    .await
}

/// Ends every claim of `run` whose lease has passed (`lost`).
async fn expire(tx: &mut Transaction<'_, Postgres>, run: Uuid) -> Result<()> {
    sqlx::query(
        "UPDATE claims SET ended_at = now(), end_reason = 'lost' \
         WHERE run_id = $1 AND ended_at IS NULL AND lease_until <= now()",
    )
    .bind(run)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Locks the claim's row for the rest of `tx` if the claim is still live
/// and its run still running (a run the drain ended, by a signal or its
/// end, takes no more writes from any worker), so that no takeover can end
/// it before `tx` commits.
async fn hold(tx: &mut Transaction<'_, Postgres>, claim: &Claim) -> Result<bool> {
    let live: Option<(i64,)> = sqlx::query_as(
        "SELECT c.id FROM claims c JOIN runs r ON r.id = c.run_id \
         WHERE c.id = $1 AND c.ended_at IS NULL AND c.lease_until > now() AND r.status = $2 \
         FOR UPDATE OF c",
    )
    .bind(claim.id)
    .bind(crate::outcome::RunStatus::Running)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(live.is_some())
}

impl Claim {
    fn lost(&self) -> LostClaim {
        LostClaim {
            claim_id: self.id,
            item_key: self.item_key.clone(),
        }
    }

    /// Extends the lease to `lease` from now (the heartbeat). A claim whose
    /// lease already passed is not revived: [`LostClaim`].
    ///
    /// # Errors
    /// [`FenceError::Lost`] when the claim is gone; [`FenceError::Db`].
    pub async fn renew(
        &mut self,
        pool: &PgPool,
        lease: Duration,
    ) -> std::result::Result<(), FenceError> {
        let until: Option<(DateTime<Utc>,)> = sqlx::query_as(
            "UPDATE claims SET lease_until = now() + make_interval(secs => $2) \
             WHERE id = $1 AND ended_at IS NULL AND lease_until > now() RETURNING lease_until",
        )
        .bind(self.id)
        .bind(lease.as_secs_f64())
        .fetch_optional(pool)
        .await?;
        match until {
            Some((t,)) => {
                self.lease_until = t;
                Ok(())
            }
            None => Err(FenceError::Lost(self.lost())),
        }
    }

    /// Begins a transaction that holds this claim's row until it ends, so
    /// that no takeover can end the claim before it commits: every ledger
    /// write of an attempt, and the records of its push and PR, go into such
    /// a transaction (docs/workers.md#fencing). Commit it to keep the writes.
    ///
    /// # Errors
    /// [`FenceError::Lost`] when the claim is no longer live (nothing may be
    /// written); [`FenceError::Db`].
    pub async fn begin(
        &self,
        pool: &PgPool,
    ) -> std::result::Result<Transaction<'static, Postgres>, FenceError> {
        let mut tx = pool.begin().await?;
        if !hold(&mut tx, self).await? {
            return Err(FenceError::Lost(self.lost()));
        }
        Ok(tx)
    }

    /// True while the claim is live (a check before an irreversible step such
    /// as a push, where no transaction can span the step itself).
    ///
    /// # Errors
    /// Database errors.
    pub async fn is_live(&self, pool: &PgPool) -> Result<bool> {
        let mut tx = pool.begin().await?;
        let live = hold(&mut tx, self).await?;
        tx.commit().await?;
        Ok(live)
    }

    /// Ends the claim: `Finished` also marks the item done on the queue, in
    /// the same fenced transaction; `Released` leaves it for another worker.
    ///
    /// # Errors
    /// [`FenceError::Lost`] when the claim was already lost (the item belongs
    /// to another attempt; nothing is written); [`FenceError::Db`].
    pub async fn end(&self, pool: &PgPool, how: ClaimEnd) -> std::result::Result<(), FenceError> {
        let mut tx = self.begin(pool).await?;
        end_in(&mut tx, self, how).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Ends `claim` inside `c`, a transaction that already holds it
/// ([`Claim::begin`]): `Finished` also marks the item done on the queue.
///
/// # Errors
/// Database errors.
pub async fn end_in(c: &mut PgConnection, claim: &Claim, how: ClaimEnd) -> Result<()> {
    sqlx::query("UPDATE claims SET ended_at = now(), end_reason = $2 WHERE id = $1")
        .bind(claim.id)
        .bind(how.as_str())
        .execute(&mut *c)
        .await?;
    if how == ClaimEnd::Finished {
        sqlx::query("UPDATE run_queue SET done_at = now() WHERE run_id = $1 AND item_key = $2")
            .bind(claim.run_id)
            .bind(&claim.item_key)
            .execute(&mut *c)
            .await?;
    }
    Ok(())
}

/// Says in the worker's row what it does now, for `status`: item `key`,
/// `round` (from 1), `phase`.
///
/// # Errors
/// Database errors.
pub async fn doing(
    c: &mut PgConnection,
    worker: &str,
    key: Option<&str>,
    round: Option<u32>,
    phase: Option<crate::outcome::Phase>,
) -> Result<()> {
    sqlx::query("UPDATE workers SET item_key = $2, round = $3, phase = $4 WHERE id = $1")
        .bind(worker)
        .bind(key)
        .bind(round.map(|r| r as i32))
        .bind(phase.map(|p| p.as_str()))
        .execute(c)
        .await?;
    Ok(())
}

/// Sets only the worker's phase (a sleep keeps its item and round).
///
/// # Errors
/// Database errors.
pub async fn doing_phase(
    c: &mut PgConnection,
    worker: &str,
    phase: crate::outcome::Phase,
) -> Result<()> {
    sqlx::query("UPDATE workers SET phase = $2 WHERE id = $1")
        .bind(worker)
        .bind(phase.as_str())
        .execute(c)
        .await?;
    Ok(())
}

/// How many of the run's items are not done yet (held or waiting).
///
/// # Errors
/// Database errors.
pub async fn pending(pool: &PgPool, run: Uuid) -> Result<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM run_queue WHERE run_id = $1 AND done_at IS NULL")
            .bind(run)
            .fetch_one(pool)
            .await?;
    Ok(n)
}

/// The earliest instant a live claim of `run` expires (to know how long to
/// wait before a held item can be taken over), or `None` if nothing is held.
///
/// # Errors
/// Database errors.
pub async fn next_expiry(pool: &PgPool, run: Uuid) -> Result<Option<DateTime<Utc>>> {
    let (t,): (Option<DateTime<Utc>>,) = sqlx::query_as(
        "SELECT min(lease_until) FROM claims WHERE run_id = $1 AND ended_at IS NULL",
    )
    .bind(run)
    .fetch_one(pool)
    .await?;
    Ok(t)
}

/// The attempts at one item in one run, oldest first: (attempt, worker,
/// end reason or `None` while live).
///
/// # Errors
/// Database errors.
pub async fn attempts(
    pool: &PgPool,
    run: Uuid,
    item_key: &str,
) -> Result<Vec<(i32, String, Option<String>)>> {
    sqlx::query_as(
        "SELECT attempt, worker, end_reason FROM claims WHERE run_id = $1 AND item_key = $2 ORDER BY attempt",
    )
    .bind(run)
    .bind(item_key)
    .fetch_all(pool)
    .await
}

/// Records that `account` hit its usage limit and is paused until `until`
/// (UTC): every worker of that account, on any host, starts no call of it
/// before then ([`account_paused_until`]).
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
    sqlx::query(
        "INSERT INTO account_pauses (account, paused_until, run_id, worker, message) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(account)
    .bind(until)
    .bind(run)
    .bind(worker)
    .bind(crate::secret::redact_known(message))
    .execute(pool)
    .await?;
    Ok(())
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
    sqlx::query(
        "INSERT INTO account_pauses (account, paused_until, run_id, worker, message, no_credit) VALUES ($1, $2, $3, $4, $5, true)",
    )
    .bind(account)
    .bind(until)
    .bind(run)
    .bind(worker)
    .bind(crate::secret::redact_known(message))
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

/// Registers worker `id` on `run` (again, after a restart of the same id).
///
/// # Errors
/// Database errors.
pub async fn join(pool: &PgPool, run: Uuid, id: &WorkerId, lease: Duration) -> Result<()> {
    sqlx::query(
        "INSERT INTO workers (id, run_id, host, pid, lease_until) \
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) \
         ON CONFLICT (id) DO UPDATE SET run_id = $2, started_at = now(), heartbeat_at = now(), \
           lease_until = EXCLUDED.lease_until, item_key = NULL, round = NULL, phase = NULL, stopped_at = NULL",
    )
    .bind(id.to_string())
    .bind(run)
    .bind(&id.host)
    .bind(id.pid as i32)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

/// What a worker is doing, for `status`.
#[derive(Debug, Clone, Default)]
pub struct Doing<'a> {
    /// The item's key, if it holds one.
    pub item_key: Option<&'a str>,
    /// The round (1-based).
    pub round: Option<u32>,
    /// The phase word.
    pub phase: Option<&'a str>,
}

/// The worker's heartbeat: says what it is doing and extends its own lease.
///
/// # Errors
/// Database errors.
pub async fn beat(pool: &PgPool, id: &WorkerId, doing: &Doing<'_>, lease: Duration) -> Result<()> {
    sqlx::query(
        "UPDATE workers SET heartbeat_at = now(), lease_until = now() + make_interval(secs => $2), \
         item_key = $3, round = $4, phase = $5 WHERE id = $1",
    )
    .bind(id.to_string())
    .bind(lease.as_secs_f64())
    .bind(doing.item_key)
    .bind(doing.round.map(|r| r as i32))
    .bind(doing.phase)
    .execute(pool)
    .await?;
    Ok(())
}

/// The worker stopped (drained, deadline, signal).
///
/// # Errors
/// Database errors.
pub async fn leave(pool: &PgPool, id: &WorkerId) -> Result<()> {
    sqlx::query(
        "UPDATE workers SET stopped_at = now(), item_key = NULL, phase = NULL WHERE id = $1",
    )
    .bind(id.to_string())
    .execute(pool)
    .await?;
    Ok(())
}

/// The workers of `run` that have not stopped and whose heartbeat still
/// vouches for them, by host and pid.
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

/// Extends worker `id`'s own lease (the heartbeat's second half: `status`
/// lists a worker while its lease runs).
///
/// # Errors
/// Database errors.
pub async fn beat_lease(pool: &PgPool, id: &str, lease: Duration) -> Result<()> {
    sqlx::query(
        "UPDATE workers SET heartbeat_at = now(), lease_until = now() + make_interval(secs => $2) WHERE id = $1",
    )
    .bind(id)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}
