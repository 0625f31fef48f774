//! Fix rounds for a red required check (docs/github.md#fix-rounds).
//!
//! When the watcher ([`super::ci`]) judges a PR `ci_failed` on a required
//! check that passes on the run's base, and the item's sealed `ci_rounds`
//! budget and the deadline allow, it asks for a fix round
//! ([`super::ci_ask::want`]): the
//! watch keeps the failure (the check's name, conclusion, output and the
//! end of its job's log, masked and bounded, framed as untrusted data) and
//! the item goes back on the run's queue. A worker claims it like an item
//! (leases, fencing: [`super::worker`]) and, seeing the wanted fix
//! ([`wanted`]), runs one round ([`run`]) on the PR's branch taken at the
//! watched head: writer (told the failure), gate, reviewer (told the
//! failure and that weakening tests or editing CI is a rejection), then
//! [`super::ci_fix_push::ship`]: a commit, a push with `--force-with-lease` at that head to the
//! same branch (same PR) and one PR comment. The round's end is recorded
//! with the claim's ([`super::record::Record::end_fix`]) and the watch goes
//! on at the new head; the watcher, not this module, decides the CI state.
//!
//! An interrupted round is not spent: one a signal or the deadline stopped
//! before it pushed does not count against `ci_rounds` (the watch may ask
//! for it again), and one whose worker died (`kill -9`) is taken over by
//! the next worker after the lease, which redoes it — or, when the dead
//! attempt had pushed already, counts that push instead of redoing it.

use uuid::Uuid;

use crate::contract::PlanEntry;
use crate::error::Error;
use crate::ledger::ci::{self as rows, FixEnd, FixWanted};
use crate::ledger::items::ItemEnd;
use crate::outcome::Outcome;
use crate::slot::{self, Slot, SlotError};

use super::Night;
use super::attempt::{self, Course, Delivery};
use super::ci_fix_push::Fix;
use super::decide::{self, Fact};
use super::item::{self, Item};
use super::record::Record;

/// The fix round wanted for `entry`'s item in this run, if its claim is
/// one ([`rows::fix_wanted`]).
///
/// # Errors
/// The ledger stays away.
pub(super) async fn wanted(
    night: &Night,
    record: &Record<'_>,
    entry: &PlanEntry,
) -> Result<Option<FixWanted>, Error> {
    let (pool, run, key) = (&night.pool, record.run_id(), entry.item.key.as_str());
    night.db(|| rows::fix_wanted(pool, run, key)).await
}

/// Whether a fix round may still be wanted in run `run`: a PR's CI is
/// still watched (the workers wait for work while it is).
///
/// # Errors
/// The ledger stays away.
pub(super) async fn may_come(night: &Night, run: uuid::Uuid) -> Result<bool, Error> {
    if night.forge.is_none() {
        return Ok(false);
    }
    let pool = &night.pool;
    Ok(night.db(|| rows::open_watches(pool, run)).await? > 0)
}

/// Where a fix round runs: the run, the worker's checkout slot, the
/// contract SHAs the run's approval covers, and the claim's ledger handle.
pub(super) struct FixAt<'a> {
    pub night: &'a Night,
    pub run_id: Uuid,
    pub slot: usize,
    pub approved: &'a super::Approved,
    pub record: &'a Record<'a>,
}

/// Runs the fix round `wanted` for `entry`'s item under the claim
/// `at.record` holds, and records its end with the claim's.
///
/// # Errors
/// The ledger stays away, or the claim was lost.
pub(super) async fn run(at: &FixAt<'_>, entry: &PlanEntry, wanted: FixWanted) -> Result<(), Error> {
    let (night, record) = (at.night, at.record);
    let fix = Fix::new(&wanted, entry.contract.limits.ci_rounds.value);
    let attempt = item::Attempt {
        night,
        run_id: at.run_id,
        item_id: wanted.item_id,
        entry,
        approved: at.approved,
        slot: at.slot,
        record: *record,
        cancel: record.cancel(),
    };
    let end = match lost_push(night, record, entry, &wanted).await? {
        Some(end) => {
            fix.set_pushed(&end.1);
            end.0
        }
        None => fix_round(&attempt, &fix).await?,
    };
    let pushed = fix.pushed();
    // A round stopped from outside before it pushed is not spent: by a
    // signal, or by the deadline once it has passed (then the watch asks
    // for no other). A usage limit that resets after the deadline, met
    // before it, counts: asked again, the round would meet it again.
    let interrupted = match end.outcome {
        Outcome::Interrupted => true,
        Outcome::Deadline => night.clock.now() >= night.deadline,
        _ => false,
    };
    let counted = pushed.is_some() || !interrupted;
    let result = match (&pushed, end.facts.reason.as_deref()) {
        (Some(_), Some(why)) => why.to_string(),
        (None, why) => format!(
            "nothing was pushed ({}): {}",
            end.outcome,
            why.unwrap_or("no reason given")
        ),
        (Some(head), None) => format!("pushed {head}"),
    };
    let result = match counted {
        true => result,
        false => format!("{result} (interrupted before its push: not counted against ci_rounds)"),
    };
    let result = night.redact(&result);
    let wait_until = super::ci::wait_until(night, entry.contract.limits.ci_wait());
    let worker = record.worker_id();
    let done = FixEnd {
        watch: wanted.watch_id,
        pushed: pushed.as_deref(),
        result: &result,
        worker: &worker,
        wait_until,
        counted,
    };
    record.end_fix(&done).await
}

/// The end of a fix round an earlier attempt already pushed (its worker
/// died after the push, before the round's end was recorded: its `pushed`
/// event is in the ledger), with the head it pushed; `None` when no
/// earlier attempt pushed from the watched head.
async fn lost_push(
    night: &Night,
    record: &Record<'_>,
    entry: &PlanEntry,
    wanted: &FixWanted,
) -> Result<Option<(ItemEnd, String)>, Error> {
    if record.attempt_no() < 2 {
        return Ok(None);
    }
    let (pool, run, key) = (&night.pool, record.run_id(), entry.item.key.as_str());
    let (pr, from) = (wanted.pr_number, wanted.head_sha.as_str());
    let Some(to) = night
        .db(|| rows::lost_fix_push(pool, run, key, pr, from))
        .await?
    else {
        return Ok(None);
    };
    let why = format!(
        "fix round {}: pushed {} → {} by the attempt this one took over (its worker stopped after the push)",
        wanted.fix_rounds + 1,
        super::ci_fix_push::short(from),
        super::ci_fix_push::short(&to)
    );
    Ok(Some((decide::end(Fact::PrUpdated(why)), to)))
}

/// The fix round in a checkout of the PR's branch at the watched head;
/// the checkout is discarded after it (the work is on the remote, or
/// nowhere).
async fn fix_round(at: &item::Attempt<'_>, fix: &Fix<'_>) -> Result<ItemEnd, Error> {
    let entry = at.entry;
    // The PR's branch as the ledger has it (a PR tended tonight may be on
    // an earlier title's branch), else the item's.
    let number = Some(fix.wanted.pr_number);
    let branch = (at.record.prs_of_item(&entry.item.key).await?)
        .into_iter()
        .find(|r| r.number == number)
        .map_or_else(
            || slot::branch_name(&entry.item.title, &entry.item.key),
            |r| r.branch,
        );
    let mut slot = match item::checkout(at, &branch).await? {
        Ok(slot) => slot,
        Err(end) => return Ok(end),
    };
    let end = in_slot(at, &branch, fix, &mut slot).await;
    let _ = tokio::task::block_in_place(|| slot.discard());
    end
}

/// The round itself: the run's base pinned, the branch taken at the
/// watched head, then one round along the item's loop.
async fn in_slot(
    at: &item::Attempt<'_>,
    branch: &str,
    fix: &Fix<'_>,
    slot: &mut Slot,
) -> Result<ItemEnd, Error> {
    let night = at.night;
    if let Some(fact) = item::pin_base(night, &at.record, slot).await? {
        return Ok(decide::end(fact));
    }
    let token = night.git_token();
    let head = &fix.wanted.head_sha;
    match tokio::task::block_in_place(|| slot.take_pushed_branch(token.as_deref(), head)) {
        Ok(()) => slot.set_tip(head),
        Err(e @ SlotError::Moved { .. }) => {
            return Ok(decide::end(Fact::LeftAlone(e.to_string())));
        }
        Err(e) => {
            let why = night.redact(&format!("cannot take up the PR's branch: {e}"));
            return Ok(decide::end(Fact::Fault(why)));
        }
    }
    let key = &at.entry.item.key;
    let dir = night
        .data_dir
        .join("logs")
        .join(at.run_id.to_string())
        .join(format!(
            "ci-fix-pr-{}-{}-{}",
            fix.wanted.pr_number,
            fix.wanted.fix_rounds + 1,
            &key[..8]
        ));
    let item = Item {
        night,
        run_id: at.run_id,
        item_id: at.item_id,
        entry: at.entry,
        slot,
        branch,
        dir: &dir,
        record: at.record,
        cancel: at.cancel,
        contract_json: at.entry.contract.canonical_json(),
        token,
    };
    let course = Course {
        cap: 1,
        cap_name: "one fix round",
        first: None,
        context: fix.wanted.failure.clone(),
        review_context: super::ci_ask::reviewer_note(&fix.wanted.checks),
        first_round: u32::try_from(at.record.rounds_begun(at.run_id, key).await?).unwrap_or(0) + 1,
    };
    attempt::item_loop(&item, course, Delivery::CiFix(fix)).await
}
