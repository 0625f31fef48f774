//! The `run_queue` and `claims` tables (docs/ledger.md#tables,
//! docs/workers.md): a run's items in backlog order, and the claims workers
//! hold on them. Leases are the server's clock (`now()`). Not when to
//! claim, renew or give up (that is [`crate::queue`]'s): these functions
//! only read and write the rows.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, PgPool};
use uuid::Uuid;

use crate::outcome::RunStatus;

use super::text::Result;
use super::workers::WorkerName;

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

/// A live claim on one item: the attempt's fencing token. What a worker
/// does with it (renew, fence, end) is [`crate::queue`]'s.
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

/// What one claim statement ([`claim_next`]) found.
#[derive(Debug)]
pub enum ClaimTry {
    /// The item is this worker's.
    Claimed(Claim),
    /// No item is left to claim now: every item is done or held by a live
    /// claim.
    Nothing,
    /// Another worker's claim of the item this statement chose committed
    /// while it ran (its snapshot did not show it): try again, a new
    /// statement sees it and passes the item by.
    Raced,
}

/// Claims, in one statement (one round trip, its own transaction), one item
/// for each worker of `who` (a process's workers waiting at once; one
/// worker is a slice of one): the first items of `run` in backlog order that
/// are not done and have no live claim, the first for `who[0]`, the next
/// for `who[1]`, …, each with a lease of `lease` from the server's clock;
/// ends as `lost` every claim of `run` whose lease passed, so its item can
/// be taken over as a new attempt (that takeover may take a second
/// statement: see [`ClaimTry::Raced`]). Returns one [`ClaimTry`] per worker,
/// in the order of `who`; a worker past the items left gets
/// [`ClaimTry::Nothing`].
///
/// Why it is safe (docs/workers.md#claims): `FOR UPDATE SKIP LOCKED` keeps
/// two statements off one queue row while either runs, and the unique
/// index of live claims (`claims_one_live`, and the attempt's unique key)
/// turns the one race it leaves — a statement whose snapshot predates
/// another's committed claim of the same item — into no row
/// (`ON CONFLICT DO NOTHING`), never a second live claim. One statement for
/// many workers is why twenty workers of a process starting at once wait
/// for one round trip, not twenty (issue 27).
///
/// # Errors
/// Database errors.
pub async fn claim_next(
    conn: &mut PgConnection,
    run: Uuid,
    who: &[WorkerName<'_>],
    lease: Duration,
) -> Result<Vec<ClaimTry>> {
    type Row = (
        i64,
        i32,
        String,
        String,
        Option<i64>,
        Option<i32>,
        Option<DateTime<Utc>>,
    );
    let names: Vec<&str> = who.iter().map(|w| w.name).collect();
    let hosts: Vec<&str> = who.iter().map(|w| w.host).collect();
    let pids: Vec<i32> = who.iter().map(|w| w.pid as i32).collect();
    let rows: Vec<Row> = sqlx::query_as(
        "WITH expired AS ( \
           UPDATE claims SET ended_at = now(), end_reason = 'lost' \
           WHERE run_id = $1 AND ended_at IS NULL AND lease_until <= now() RETURNING id), \
         free AS ( \
           SELECT q.position, q.item_key, q.contract_sha FROM run_queue q \
           WHERE q.run_id = $1 AND q.done_at IS NULL \
             AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.run_id = q.run_id \
                             AND c.item_key = q.item_key AND c.ended_at IS NULL \
                             AND c.lease_until > now()) \
           ORDER BY q.position FOR UPDATE SKIP LOCKED LIMIT cardinality($2::text[])), \
         next AS ( \
           SELECT f.position, f.item_key, f.contract_sha, \
                  row_number() OVER (ORDER BY f.position) AS k FROM free f), \
         who AS ( \
           SELECT w.name, w.host, w.pid, w.k \
           FROM unnest($2::text[], $3::text[], $4::int[]) WITH ORDINALITY AS w(name, host, pid, k)), \
         won AS ( \
           INSERT INTO claims (run_id, item_key, attempt, worker, host, pid, lease_until) \
           SELECT $1, n.item_key, \
                  COALESCE((SELECT max(attempt) FROM claims c WHERE c.run_id = $1 AND c.item_key = n.item_key), 0) + 1, \
                  w.name, w.host, w.pid, now() + make_interval(secs => $5) \
           FROM next n JOIN who w ON w.k = n.k \
           ON CONFLICT DO NOTHING \
           RETURNING id, item_key, attempt, lease_until) \
         SELECT n.k, n.position, n.item_key, n.contract_sha, w.id, w.attempt, w.lease_until \
         FROM next n LEFT JOIN won w ON w.item_key = n.item_key ORDER BY n.k",
    )
    .bind(run)
    .bind(&names)
    .bind(&hosts)
    .bind(&pids)
    .bind(lease.as_secs_f64())
    .fetch_all(conn)
    .await?;
    let mut tries: Vec<ClaimTry> = who.iter().map(|_| ClaimTry::Nothing).collect();
    for (k, position, item_key, contract_sha, id, attempt, lease_until) in rows {
        // k is the worker's 1-based place in `who`.
        let Some(i) = usize::try_from(k - 1).ok().filter(|&i| i < who.len()) else {
            continue;
        };
        tries[i] = match (id, attempt, lease_until) {
            (Some(id), Some(attempt), Some(lease_until)) => ClaimTry::Claimed(Claim {
                id,
                run_id: run,
                position,
                item_key,
                contract_sha,
                attempt,
                worker: who[i].name.to_string(),
                lease_until,
            }),
            _ => ClaimTry::Raced,
        };
    }
    Ok(tries)
}

/// Ends every claim of `run` still open (`lost`), whatever its lease says:
/// the run was declared crashed, so no attempt of it goes on (an outage past
/// the deadline would otherwise leave its claim open for ever). Returns how
/// many were open.
///
/// # Errors
/// Database errors.
pub async fn end_open(pool: &PgPool, run: Uuid) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE claims SET ended_at = now(), end_reason = 'lost' WHERE run_id = $1 AND ended_at IS NULL",
    )
    .bind(run)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Locks claim `claim_id`'s row for the rest of the transaction `tx` if the
/// claim is still live and its run still running (a run the drain ended,
/// by a signal or its end, takes no more writes from any worker). True when
/// it holds.
///
/// # Errors
/// Database errors.
pub async fn hold(tx: &mut PgConnection, claim_id: i64) -> Result<bool> {
    let live: Option<(i64,)> = sqlx::query_as(
        "SELECT c.id FROM claims c JOIN runs r ON r.id = c.run_id \
         WHERE c.id = $1 AND c.ended_at IS NULL AND c.lease_until > now() AND r.status = $2 \
         FOR UPDATE OF c",
    )
    .bind(claim_id)
    .bind(RunStatus::Running)
    .fetch_optional(tx)
    .await?;
    Ok(live.is_some())
}

/// Ends `claim` inside `c`, a transaction that already holds it
/// (`crate::queue::Claim::begin`): `Finished` also marks the item done on
/// the queue.
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

/// How many items of `run`'s plan (not tend cards) are still being worked on
/// under a live claim older than `claim_id` (a smaller id), on any worker
/// or host: each may open a PR, so the review queue (`max_open_prs`,
/// docs/workers.md "What holds across all workers") counts them. Only
/// earlier claims count, so that of two items claimed at once the earlier
/// one goes on. An item whose PR's CI is watched (its live claim is a fix
/// round's, docs/github.md#fix-rounds) opened its PR already and opens
/// none: it does not count.
///
/// # Errors
/// Database errors.
pub async fn earlier_live_items(pool: &PgPool, run: Uuid, claim_id: i64) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM claims c \
         JOIN runs r ON r.id = c.run_id \
         JOIN run_queue q ON q.run_id = c.run_id AND q.item_key = c.item_key \
         JOIN plan_contracts pc ON pc.plan_sha = r.plan_sha AND pc.contract_sha = q.contract_sha \
         WHERE c.run_id = $1 AND c.id < $2 AND c.ended_at IS NULL AND pc.kind = 'item' \
           AND NOT EXISTS (SELECT 1 FROM ci_watches w WHERE w.run_id = c.run_id AND w.item_key = c.item_key)",
    )
    .bind(run)
    .bind(claim_id)
    .fetch_one(pool)
    .await
}
