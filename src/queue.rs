//! The ledger as a work queue: claims, leases, fencing and account pauses
//! (docs/workers.md).
//!
//! A run's items are enqueued once, in backlog order ([`enqueue`]). Workers —
//! tasks of one process (`drain --jobs N`) or processes on other hosts
//! (`nightshift worker`) — [`claim`] the first item nobody holds with
//! `FOR UPDATE SKIP LOCKED`, hold it by a lease renewed by [`beat_process`],
//! and end it with [`Claim::end`]. A worker that stops renewing (killed,
//! paused, partitioned) loses the claim when the lease passes; the next
//! [`claim`] takes the item over as a new attempt. Every write of an attempt
//! runs inside [`Claim::begin`]'s transaction, which commits only while the
//! claim is still live, so a worker that lost its item writes nothing more.
//! Leases are judged by the server's clock (`now()`), never a host's.
//!
//! This module is not the item loop (that is `run`) and knows nothing of
//! agents or git: it only hands out items and says who holds what. Its rows
//! and their SQL are the ledger's ([`crate::ledger::claims`],
//! [`crate::ledger::workers`]); the plain reads and writes of those are
//! re-exported here under the queue's name.

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::ledger::claims::{self, ClaimTry};
use crate::ledger::workers::{self, WorkerName};

pub use crate::ledger::claims::{
    Claim, ClaimEnd, QueuedItem, attempts, end_in, enqueue, next_expiry, pending,
};
pub use crate::ledger::workers::{
    WorkerRow, account_paused_until, account_without_credit, doing, doing_phase, live_workers,
    pause_account, stop_account_without_credit,
};

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

impl WorkerId {
    /// How the ledger's rows name this worker.
    fn with_name<'a>(&'a self, name: &'a str) -> WorkerName<'a> {
        WorkerName {
            name,
            host: &self.host,
            pid: self.pid,
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

/// Where one claim's time went, as the claiming worker measured it (the
/// run log's `claim_ms` and its parts; examples/bench_workers reads them).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClaimTimes {
    /// Waiting for the connection: the process's claim line
    /// ([`ClaimLine`]), or the pool for a plain [`claim`].
    pub acquire: Duration,
    /// The claim's statements (each its own transaction, commit included).
    pub statements: Duration,
}

/// Claims the first item of `run` in backlog order that is not done and not
/// held by a live claim; an item whose claim's lease passed is taken over as
/// a new attempt (its old claim is ended `lost`). `None`: nothing is left to
/// claim now (every item is done or held). The connection comes from `pool`
/// (a worker claims through its process's [`ClaimLine`] instead).
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
    let mut conn = pool.acquire().await?;
    let mut claims = claim_on(&mut conn, run, std::slice::from_ref(worker), lease).await?;
    Ok(claims.pop().flatten())
}

/// The connection a process's claims go through
/// (docs/workers.md#connections): taken from the process's pool at its first
/// claim and kept, so that a claim never waits for the pool behind the
/// heartbeat and the attempts' fenced writes — at twenty workers a process
/// those keep every pooled connection busy, and a claim that queued behind
/// them waited seconds (issue 27). The workers of the process that ask
/// while a claim statement runs are answered together by the next one
/// ([`claims::claim_next`] takes many workers), so twenty workers starting
/// at once wait for two round trips, not twenty. The line counts in the
/// pool's size: the process's other statements share the rest of the pool.
#[derive(Default)]
pub struct ClaimLine {
    conn: tokio::sync::Mutex<Option<PoolConnection<Postgres>>>,
    /// The workers waiting for an answer, each with where it goes.
    waiting: std::sync::Mutex<Vec<Waiting>>,
}

/// One worker's claim waiting on a [`ClaimLine`].
struct Waiting {
    worker: WorkerId,
    asked: std::time::Instant,
    answer: tokio::sync::oneshot::Sender<(Option<Claim>, ClaimTimes)>,
}

impl ClaimLine {
    /// [`claim`] through this line (its connection taken from `pool` the
    /// first time, or again after a failure), with where its time went:
    /// answered by this call's own statement, together with the other
    /// workers then waiting, or by the statement of a call before it.
    ///
    /// # Errors
    /// Database errors; the line's connection is given back to the pool
    /// then, and the next claim takes one again. The workers waiting on a
    /// failed statement each claim again.
    pub async fn claim(
        &self,
        pool: &PgPool,
        run: Uuid,
        worker: &WorkerId,
        lease: Duration,
    ) -> Result<(Option<Claim>, ClaimTimes)> {
        let asked = std::time::Instant::now();
        loop {
            let (tx, mut rx) = tokio::sync::oneshot::channel();
            self.wait(Waiting {
                worker: worker.clone(),
                asked,
                answer: tx,
            });
            let mut line = self.conn.lock().await;
            match rx.try_recv() {
                // A statement before this one answered it.
                Ok(answer) => return Ok(answer),
                // That statement failed: ask again.
                Err(tokio::sync::oneshot::error::TryRecvError::Closed) => continue,
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
            }
            // Taken before anything can fail, so that no worker's request
            // outlives its answer: on an error the batch is dropped and the
            // others ask again. A worker that stopped waiting (its claim
            // cancelled) gets no item.
            let mut batch =
                std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|e| e.into_inner()));
            batch.retain(|w| !w.answer.is_closed());
            let conn = match &mut *line {
                Some(conn) => conn,
                None => line.insert(pool.acquire().await?),
            };
            let began = std::time::Instant::now();
            let workers: Vec<WorkerId> = batch.iter().map(|w| w.worker.clone()).collect();
            let claims = match claim_on(conn, run, &workers, lease).await {
                Ok(claims) => claims,
                Err(e) => {
                    // A connection that failed (an outage, a broken socket)
                    // is not kept: the pool tests or replaces it. The others
                    // waiting see their answer gone and ask again.
                    *line = None;
                    return Err(e);
                }
            };
            let statements = began.elapsed();
            for (w, claim) in batch.into_iter().zip(claims) {
                let times = ClaimTimes {
                    acquire: began.saturating_duration_since(w.asked),
                    statements,
                };
                let _ = w.answer.send((claim, times));
            }
            if let Ok(answer) = rx.try_recv() {
                return Ok(answer);
            }
        }
    }

    fn wait(&self, w: Waiting) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(w);
    }
}

/// The claims (see [`claim`]) of `workers` on `conn`, one per worker in
/// their order: one statement ([`claims::claim_next`], its own
/// transaction) for all of them, and again for those whose item another
/// worker's claim took while it ran.
async fn claim_on(
    conn: &mut PgConnection,
    run: Uuid,
    workers: &[WorkerId],
    lease: Duration,
) -> Result<Vec<Option<Claim>>> {
    let names: Vec<String> = workers.iter().map(WorkerId::to_string).collect();
    let mut claimed: Vec<Option<Claim>> = workers.iter().map(|_| None).collect();
    let mut asking: Vec<usize> = (0..workers.len()).collect();
    // Each race means another claim committed: the items run out, so this
    // ends; the bound only keeps a fault from spinning.
    for _ in 0..1000 {
        if asking.is_empty() {
            break;
        }
        let who: Vec<WorkerName<'_>> = asking
            .iter()
            .map(|&i| workers[i].with_name(&names[i]))
            .collect();
        let tries = claims::claim_next(conn, run, &who, lease).await?;
        let mut raced = Vec::new();
        for (i, t) in asking.into_iter().zip(tries) {
            match t {
                ClaimTry::Claimed(c) => claimed[i] = Some(c),
                ClaimTry::Nothing => {}
                ClaimTry::Raced => raced.push(i),
            }
        }
        asking = raced;
    }
    Ok(claimed)
}

/// What a worker does with its claim (the row is the ledger's,
/// [`claims::Claim`]): renew its lease, fence its writes, end it.
impl Claim {
    fn lost(&self) -> LostClaim {
        LostClaim {
            claim_id: self.id,
            item_key: self.item_key.clone(),
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
        if !claims::hold(&mut tx, self.id).await? {
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
        let live = claims::hold(&mut tx, self.id).await?;
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

/// Registers worker `id` on `run` (again, after a restart of the same id).
///
/// # Errors
/// Database errors.
pub async fn join(pool: &PgPool, run: Uuid, id: &WorkerId, lease: Duration) -> Result<()> {
    let name = id.to_string();
    workers::join(pool, run, id.with_name(&name), lease).await
}

/// The worker stopped (drained, deadline, signal).
///
/// # Errors
/// Database errors.
pub async fn leave(pool: &PgPool, id: &WorkerId) -> Result<()> {
    workers::leave(pool, &id.to_string()).await
}

/// The heartbeat of one process (docs/workers.md#heartbeats), one
/// statement however many workers it runs: extends the leases of its
/// `workers` and of their `claims` (ids) to `lease` from now, and measures
/// this process's offset to the server's clock on the way
/// ([`crate::schedule::server_clock`]). Returns the ids of the claims it
/// renewed: a claim missing from them was lost (ended, or its lease passed
/// before this beat; it is not revived).
///
/// # Errors
/// Database errors.
pub async fn beat_process(
    pool: &PgPool,
    workers: &[String],
    claims: &[i64],
    lease: Duration,
) -> Result<Vec<i64>> {
    let before = chrono::Utc::now();
    let (renewed, server) = workers::beat_process(pool, workers, claims, lease).await?;
    let after = chrono::Utc::now();
    crate::schedule::server_clock().observe(before, server, after);
    Ok(renewed)
}

/// Measures this process's offset to the ledger server's clock
/// ([`crate::schedule::server_clock`]); returns (this host's clock, the
/// server's) at the same instant, for [`crate::schedule::skew_note`].
///
/// # Errors
/// Database errors.
pub async fn sync_clock(
    pool: &PgPool,
) -> Result<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> {
    let before = chrono::Utc::now();
    let server = workers::server_time(pool).await?;
    let after = chrono::Utc::now();
    crate::schedule::server_clock().observe(before, server, after);
    Ok((before + (after - before) / 2, server))
}

/// Who still vouches for run `run` (the drain that opened it, or a worker
/// of it), if anyone: a process on this host counts while it lives; one on
/// another host while its heartbeat is younger than `within` (server clock).
/// A run someone vouches for is live, whoever holds the repository lock —
/// a server restart drops the lock with its session (docs/ledger.md#locking).
///
/// # Errors
/// Database errors.
pub async fn vouched(pool: &PgPool, run: Uuid, within: Duration) -> Result<Option<String>> {
    let this_host = WorkerId::this_process(0).host;
    let beats = workers::recent_beats(pool, run, within).await?;
    Ok(beats
        .into_iter()
        .find(|b| b.host != this_host || process_lives(b.pid))
        .map(|b| {
            let who = if b.who == "drain" {
                "its drain".to_string()
            } else {
                format!("its worker {}", b.who)
            };
            format!(
                "{who} (host {}, pid {}) beat {:.0} s ago",
                b.host, b.pid, b.age_secs
            )
        }))
}

/// Whether process `pid` of this host is a live nightshift (not a zombie,
/// not another program that reused the pid after a reboot).
fn process_lives(pid: i32) -> bool {
    if pid as u32 == std::process::id() {
        return true;
    }
    if pid <= 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let comm = stat
                .split_once('(')
                .and_then(|(_, r)| r.rsplit_once(')'))
                .map(|(c, rest)| (c.to_string(), rest.trim_start().starts_with('Z')));
            comm.is_some_and(|(c, zombie)| !zombie && c.starts_with("nightshift"))
        }
        // No procfs (macOS): ask the kernel.
        Err(_) => nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok(),
    }
}

/// The drain's heartbeat of run `run`: see [`crate::ledger::runs::beat_run`].
///
/// # Errors
/// Database errors.
pub async fn beat_run(pool: &PgPool, run: Uuid) -> Result<()> {
    crate::ledger::runs::beat_run(pool, run).await
}

/// Seconds since the drain of run `run` last beat (server clock), if the
/// run exists.
///
/// # Errors
/// Database errors.
pub async fn drain_beat_age(pool: &PgPool, run: Uuid) -> Result<Option<f64>> {
    Ok(
        workers::recent_beats(pool, run, Duration::from_secs(u32::MAX as u64))
            .await?
            .into_iter()
            .find(|b| b.who == "drain")
            .map(|b| b.age_secs),
    )
}
