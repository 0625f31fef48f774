//! The workers of a run (docs/workers.md): each claims the run's items from
//! the ledger's queue in backlog order ([`crate::queue::claim`]), one at a
//! time, in its own checkout slot, and runs each claim as an attempt: the
//! claim's lease is renewed by a heartbeat while the attempt runs, every
//! write of the attempt is fenced on the claim ([`super::record`]), and an
//! attempt whose claim is lost stops its agents and writes nothing more. A
//! worker stops when the queue is drained, at a signal, at a stop of the
//! whole run, or — for a worker that joined another process's run — when
//! that run is no longer live. It does not decide what an item does (that is
//! [`super::attempt`]) nor end the run (that is [`super::drain`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use crate::contract::PlanEntry;
use crate::error::Error;
use crate::ledger::items::ItemEnd;
use crate::ledger::runs;
use crate::outcome::{Event, Outcome, RunStatus};
use crate::queue::{self, Claim, WorkerId};

use super::decide::{self, Fact};
use super::heart::Heart;
use super::record::{Fence, Record};
use super::{Night, Resumed, attempt, item, local, take_over_from};

/// What the workers of one process share while they drain a run.
pub(super) struct Crew {
    pub night: Arc<Night>,
    pub run_id: Uuid,
    /// The contract SHAs the run's approval covers.
    pub approved: super::Approved,
    /// The crashed or stopped run this one resumes, if any.
    pub resumed_from: Option<Resumed>,
    /// This process opened the run and holds the repository's lock (a
    /// `drain`); `false` for `nightshift worker`, which joined it.
    pub owner: bool,
    /// Why the workers stop early, once something stopped the run.
    pub stop: Mutex<Option<(RunStatus, Option<String>)>>,
    /// Wakes this process's idle workers when one of its workers ends an
    /// item (the last one may have ended; see [`wait_for_work`]).
    pub ended: tokio::sync::Notify,
    /// Since when (this host's monotonic clock) a joined run's drain has
    /// not beaten within a lease; `None` while it beats (see
    /// [`drain_gone`]).
    pub drain_silent_since: Mutex<Option<std::time::Instant>>,
    /// The process's one heartbeat: its workers' rows and their claims.
    pub heart: Arc<Heart>,
    /// The one connection its workers claim through (docs/workers.md#connections).
    pub claim_line: queue::ClaimLine,
}

impl Crew {
    /// Records that the run stops with `status` (the first stop wins, but a
    /// crash outranks a deadline).
    fn stop_with(&self, status: RunStatus, why: Option<String>) {
        let mut g = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        match &*g {
            Some((RunStatus::Crashed, _)) => {}
            Some(_) if status != RunStatus::Crashed => {}
            _ => *g = Some((status, why)),
        }
    }

    /// The stop recorded so far, if any.
    pub fn stopped(&self) -> Option<(RunStatus, Option<String>)> {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The plan entry a claim is for.
    fn entry(&self, claim: &Claim) -> Option<&PlanEntry> {
        self.night
            .plan
            .entries
            .iter()
            .find(|e| e.item.key == claim.item_key)
    }
}

/// Worker `n` (from 1) of this process: claims and runs items until the
/// queue is drained or the run stops.
///
/// # Errors
/// The ledger stays away, or the repository's lock was lost.
pub(super) async fn work(crew: Arc<Crew>, n: u32) -> Result<(), Error> {
    let night = &*crew.night;
    let id = WorkerId::this_process(n);
    let lease = night.config.lease;
    let (pool, run) = (&night.pool, crew.run_id);
    night.db(|| queue::join(pool, run, &id, lease)).await?;
    let name = id.to_string();
    crew.heart.join(&name);
    let done = claims(&crew, &id, n as usize - 1).await;
    crew.heart.leave(&name);
    // Best effort: a worker row that is not closed expires with its lease.
    let _ = queue::leave(pool, &id).await;
    done
}

/// The claim loop of worker `id` in checkout slot `slot`.
async fn claims(crew: &Crew, id: &WorkerId, slot: usize) -> Result<(), Error> {
    let night = &*crew.night;
    let (pool, run, lease) = (&night.pool, crew.run_id, night.config.lease);
    loop {
        if let Some(status) = should_stop(crew).await? {
            crew.stop_with(status.0, status.1);
            return Ok(());
        }
        let asked = std::time::Instant::now();
        let (claimed, times) = night
            .db(|| crew.claim_line.claim(pool, run, id, lease))
            .await?;
        if let Some(c) = &claimed {
            // The claim's latency as this worker saw it (a connection from
            // the pool, then the claim's statement): the run log's
            // `claim_ms` and its parts, which examples/bench_workers reads.
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            tracing::info!(
                item = %c.item_key,
                attempt = c.attempt,
                claim_ms = ms(asked.elapsed()),
                acquire_ms = ms(times.acquire),
                statements_ms = ms(times.statements),
                "claimed"
            );
        }
        let Some(claim) = claimed else {
            // A PR's CI still watched may want a fix round yet.
            if night.db(|| queue::pending(pool, run)).await? == 0
                && !super::ci_fix::may_come(night, run).await?
            {
                return Ok(());
            }
            wait_for_work(crew).await?;
            continue;
        };
        let Some(entry) = crew.entry(&claim) else {
            return Err(Error::failed(format!(
                "the run's queue holds item {} which is not in the plan this worker read",
                claim.item_key
            )));
        };
        let done = attempt(crew, slot, claim, entry).await;
        crew.ended.notify_waiters();
        done?;
    }
}

/// Why the worker claims no more items, if it should not: a signal, a stop
/// of the whole run, the repository's lock lost, or a joined run that ended.
async fn should_stop(crew: &Crew) -> Result<Option<(RunStatus, Option<String>)>, Error> {
    let night = &*crew.night;
    if night.cancel.is_cancelled() {
        return Ok(Some((RunStatus::StoppedSignal, None)));
    }
    if let Some((status, why)) = crew.stopped()
        && status != RunStatus::StoppedDeadline
    {
        return Ok(Some((status, why)));
    }
    if let Some(why) = night.systemic_problem() {
        return Ok(Some((RunStatus::Crashed, Some(why))));
    }
    if crew.owner {
        night.hold_lock().await?;
    } else {
        let (pool, run) = (&night.pool, crew.run_id);
        let row = night.db(|| runs::run_status(pool, run)).await?;
        if row != Some(RunStatus::Running) {
            return Ok(Some((row.unwrap_or(RunStatus::Crashed), None)));
        }
        if let Some(why) = drain_gone(crew).await? {
            eprintln!("warning: {why}; this worker stops claiming items");
            return Ok(Some((RunStatus::Crashed, Some(why))));
        }
    }
    Ok(None)
}

/// For a `worker`: why the run's drain is gone, if it is — its heartbeat
/// (server clock) stayed older than a lease for a whole lease of this
/// worker's watching. An outage stops the drain's beat too, but the drain
/// beats again within seconds of the ledger's return, so a worker that
/// comes back from one does not stop; one whose drain died does, so that
/// its own heartbeats stop vouching for a dead run (docs/workers.md).
async fn drain_gone(crew: &Crew) -> Result<Option<String>, Error> {
    let night = &*crew.night;
    let (pool, run, lease) = (&night.pool, crew.run_id, night.config.lease);
    let age = night.db(|| queue::drain_beat_age(pool, run)).await?;
    let silent = age.is_none_or(|a| a > lease.as_secs_f64());
    let mut since = crew
        .drain_silent_since
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if !silent {
        *since = None;
        return Ok(None);
    }
    let first = *since.get_or_insert_with(std::time::Instant::now);
    Ok((first.elapsed() >= lease).then(|| {
        format!(
            "the drain of run {run} has not beaten for {} (server clock); it is gone, and the next `nightshift drain` resumes the run",
            crate::config::format_duration(Duration::from_secs_f64(age.unwrap_or_default()))
        )
    }))
}

/// Waits until a held item may be taken over (the earliest lease's end) or
/// another worker finishes one: at most a few seconds, less at a signal or
/// when a worker of this process ends an item.
async fn wait_for_work(crew: &Crew) -> Result<(), Error> {
    let night = &*crew.night;
    let (pool, run) = (&night.pool, crew.run_id);
    let expiry = night.db(|| queue::next_expiry(pool, run)).await?;
    let until_expiry = expiry
        .and_then(|t| (t - night.clock.now()).to_std().ok())
        .unwrap_or_default();
    let pause = until_expiry.clamp(Duration::from_millis(200), Duration::from_secs(2));
    tokio::select! {
        () = tokio::time::sleep(pause) => {}
        () = night.cancel.cancelled() => {}
        () = crew.ended.notified() => {}
    }
    Ok(())
}

/// One attempt at the claimed `entry`: the item row, the item's work (or
/// its carried-over end), and its end with the claim's — fenced on the
/// claim, with the process's heartbeat renewing its lease meanwhile
/// ([`super::heart`]). A lost claim stops
/// the attempt quietly: another worker owns the item now.
///
/// # Errors
/// The ledger stays away, or the repository's lock was lost.
async fn attempt(crew: &Crew, slot: usize, claim: Claim, entry: &PlanEntry) -> Result<(), Error> {
    let night = &*crew.night;
    let fence = Arc::new(Fence::new(claim, &night.cancel));
    crew.heart.hold(
        &fence,
        super::attempt::item_log_dir(night, crew.run_id, entry),
    );
    let record = Record::attempt(night, crew.run_id, &fence);
    // A claim of an item whose PR's CI is red is a fix round's
    // (docs/github.md#fix-rounds), not the item's again.
    let done = match super::ci_fix::wanted(night, &record, entry).await {
        Ok(Some(fix)) => {
            let at = super::ci_fix::FixAt {
                night,
                run_id: crew.run_id,
                slot,
                approved: &crew.approved,
                record: &record,
            };
            super::ci_fix::run(&at, entry, fix).await
        }
        Ok(None) => run_claimed(crew, slot, &record, entry).await,
        Err(e) => Err(e),
    };
    crew.heart.release(fence.claim.id);
    match done {
        // The item's checkout was discarded on the way out (see
        // `attempt::one_item`).
        Err(Error::ClaimLost { why }) => {
            tracing::warn!("{why}; this worker stops the item and writes nothing more");
            let _ = std::io::Write::write_fmt(
                &mut std::io::stderr(),
                format_args!(
                    "warning: {why}; this worker stopped the item and wrote nothing more\n"
                ),
            );
            Ok(())
        }
        other => other,
    }
}

/// The claimed item's work and its end (see [`attempt()`]).
async fn run_claimed(
    crew: &Crew,
    slot: usize,
    record: &Record<'_>,
    entry: &PlanEntry,
) -> Result<(), Error> {
    let night = &*crew.night;
    let attempt_no = record.attempt_no();
    if attempt_no > 1 {
        let what = json!({"key": entry.item.key, "attempt": attempt_no});
        record.event(Event::TakenOver, what).await?;
        // The lost attempt's agent may have pushed before it died.
        let branch = crate::slot::branch_name(&entry.item.title, &entry.item.key);
        super::ended::look_for_foreign_refs(night, crew.run_id, Some(&branch)).await?;
    }
    let item_id = record.start_item(entry).await?;
    let end = run_item(crew, slot, record, entry, item_id).await?;
    if end.outcome == Outcome::Deadline {
        crew.stop_with(RunStatus::StoppedDeadline, None);
    }
    if let Some(why) = night.systemic_problem() {
        crew.stop_with(RunStatus::Crashed, Some(why));
    } else if end.outcome == Outcome::Interrupted {
        crew.stop_with(RunStatus::StoppedSignal, None);
    }
    // An interrupted item stays on the queue: a worker that goes on (on
    // another host) may take it up.
    let release = end.outcome == Outcome::Interrupted;
    record
        .finish_item(item_id, &entry.item.key, &end, release)
        .await
}

/// Runs one entry this run has not finished, unless the deadline passed.
async fn run_item(
    crew: &Crew,
    slot: usize,
    record: &Record<'_>,
    entry: &PlanEntry,
    item_id: i64,
) -> Result<ItemEnd, Error> {
    let night = &*crew.night;
    let past_deadline = crew
        .stopped()
        .is_some_and(|s| s.0 == RunStatus::StoppedDeadline);
    if past_deadline || night.clock.now() >= night.deadline {
        let deadline = local(night.deadline, night.tz);
        return Ok(decide::end(Fact::NotStarted(deadline)));
    }
    let at = item::Attempt {
        night,
        run_id: crew.run_id,
        item_id,
        entry,
        approved: &crew.approved,
        slot,
        record: *record,
        cancel: record.cancel(),
    };
    let mut end = attempt::one_item(&at).await?;
    if let Some(from) = crew.resumed_from {
        take_over_from(night, record, from, entry, slot, &mut end).await?;
    }
    systemic(night, &mut end);
    Ok(end)
}

/// A failure the environment caused (the disk filled up, the data
/// directory went away, the agent's executable vanished) is not the item's:
/// it is not an attempt of it; the item is recorded `interrupted` and the
/// run stops, to be resumed once the cause is fixed.
pub(super) fn systemic(night: &Night, end: &mut ItemEnd) {
    if !decide::may_be_systemic(end.outcome) {
        return;
    }
    if let Some(why) = night.systemic_problem() {
        decide::systemic(end, &why);
    }
}
