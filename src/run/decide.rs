//! Where an item's end is decided (docs/loop.md#outcomes): the stages of an
//! item (the checks before it, the checkout, the setup, a round's steps, an
//! agent call, the delivery) say what happened as a [`Fact`], and this
//! module alone maps each fact to the item's [`Outcome`] and reason — and
//! re-decides an end when the run learns more (a systemic stop, a resumed
//! run's PR, an item carried over). `error` is the outcome of true faults
//! (nightshift could not read, write or run what it needed) and of the few
//! named situations that have always ended so ([`Fact::outcome`] lists
//! them). It records nothing and runs nothing.

use uuid::Uuid;

use crate::ledger::items;
use crate::ledger::items::ItemEnd;
use crate::outcome::Outcome;

/// What happened to an item, as the stage that saw it tells it; the
/// strings are the situation's own words (already redacted where they may
/// hold a secret), completed into the item's reason by [`Fact::reason`].
pub(super) enum Fact {
    // Before any work (docs/loop.md#before-the-checkout).
    /// The item waits for a person: blocked in the backlog, a question to
    /// answer, too many failed attempts.
    Waits(String),
    /// The item (or card) is not covered by the run's approval.
    NotApproved(String),
    /// The run's cost cap (`max_cost_usd_per_run`, USD) was used up before
    /// the item started.
    RunCapUsed(f64),
    /// Too many nightshift PRs wait for review (`max_open_prs`).
    ReviewQueueFull(String),
    /// An open PR of the item from an earlier run.
    EarlierPrOpen(String),
    /// A merged PR of the item from an earlier run.
    EarlierPrMerged(String),
    /// The deadline (local time, as shown) passed before the item started.
    NotStarted(String),
    /// A tended PR left alone (someone pushed, hands-off, closed, …).
    LeftAlone(String),

    // Stops.
    /// A signal stopped the item.
    Signal(String),
    /// The run's deadline stops the item.
    Deadline(String),
    /// The item's own time ran out.
    TimedOut(String),
    /// The agent's account has no credit: its work stops for the night
    /// (docs/limits.md#no-credit).
    NoCredit(String),
    /// The account's quota reached its reserve: kept for the day
    /// (docs/limits.md#reserve); the window, its use and its reset in the
    /// words.
    QuotaReserved(String),
    /// The item or the run went over its cost or token cap.
    OverBudget(String),

    // What the work came to.
    /// The writer asked a question of the contract.
    Question,
    /// An agent broke a rule (scope, git, a secret, a tick that is not safe).
    RuleBroken(String),
    /// The writer changed nothing (or a tend had nothing to push).
    NoChanges(String),
    /// Rounds in a row with the same diff and the same failure.
    NoProgress(String),
    /// The review is void (the reviewer changed or reached out).
    ReviewVoid(String),
    /// Every round was used and the last one failed as `last` says.
    RoundsUsedUp {
        /// The last failed round's failure, if a round failed.
        last: Option<RoundFailure>,
        /// The item's reason.
        why: String,
    },

    // Named situations that end `error` (as they always have).
    /// The checkout could not be made or put on the run's base.
    CheckoutFailed(String),
    /// A setup command could not run or failed.
    SetupFailed(String),
    /// An agent cannot be started (the run stops, see `worker::systemic`).
    AgentUnusable(String),
    /// The change holds a file GitHub refuses (100 MiB or more).
    FileTooLarge(String),
    /// A tend's writer left conflict markers in a file it was to resolve.
    MarkersLeft(String),
    /// GitHub could not be asked about a tended PR before its push.
    GithubUnanswered(String),
    /// Nightshift itself could not read, write or run what it needed (the
    /// checkout, git, the gate, the commit): a true fault.
    Fault(String),

    // Delivery (docs/loop.md#ship-or-retry).
    /// The push of the item's branch failed.
    PushFailed(String),
    /// The branch is pushed; no GitHub access to open its PR.
    BranchPushed(String),
    /// The branch is pushed; its PR could not be opened (retried later).
    PrFailed(String),
    /// The PR is open (the reason names a label that could not be added).
    PrOpened(Option<String>),
    /// A tended PR's branch was pushed anew.
    PrUpdated(String),
}

/// How a round failed when the next round may fix it
/// (docs/loop.md#ship-or-retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RoundFailure {
    /// The gate failed.
    TestsFailed,
    /// The reviewer requested changes.
    ReviewRejected,
    /// The writer failed (a crash, a nonzero exit, an error result).
    WriterFailed,
    /// The reviewer failed or gave no verdict.
    NoVerdict,
}

impl RoundFailure {
    /// The round's (and, when the rounds run out, the item's) outcome.
    pub fn outcome(self) -> Outcome {
        match self {
            RoundFailure::TestsFailed => Outcome::TestsFailed,
            RoundFailure::ReviewRejected => Outcome::ReviewRejected,
            RoundFailure::WriterFailed | RoundFailure::NoVerdict => Outcome::Error,
        }
    }
}

/// The outcome of an item a crashed run left without an end, set when the
/// next drain finds that run dead ([`super::mark_dead_runs_crashed`]).
pub(super) const LEFT_BY_CRASH: Outcome = Outcome::Interrupted;

impl Fact {
    /// The item's outcome for this fact: the one place it is decided.
    pub fn outcome(&self) -> Outcome {
        match self {
            Fact::Waits(_) | Fact::Question => Outcome::Blocked,
            Fact::NotApproved(_) => Outcome::NotApproved,
            Fact::RunCapUsed(_) | Fact::OverBudget(_) => Outcome::BudgetExceeded,
            Fact::ReviewQueueFull(_) => Outcome::ReviewQueueFull,
            Fact::EarlierPrOpen(_) => Outcome::AlreadyOpen,
            Fact::EarlierPrMerged(_) => Outcome::AlreadyMerged,
            Fact::NotStarted(_) | Fact::Deadline(_) => Outcome::Deadline,
            Fact::LeftAlone(_) => Outcome::PrLeftAlone,
            Fact::Signal(_) => Outcome::Interrupted,
            Fact::TimedOut(_) => Outcome::TimedOut,
            Fact::NoCredit(_) => Outcome::NoCredit,
            Fact::QuotaReserved(_) => Outcome::QuotaReserved,
            Fact::RuleBroken(_) => Outcome::RuleBroken,
            Fact::NoChanges(_) => Outcome::NoChanges,
            Fact::NoProgress(_) => Outcome::NoProgress,
            Fact::ReviewVoid(_) => Outcome::ReviewVoid,
            Fact::RoundsUsedUp { last, .. } => last.map_or(Outcome::Error, RoundFailure::outcome),
            Fact::CheckoutFailed(_)
            | Fact::SetupFailed(_)
            | Fact::AgentUnusable(_)
            | Fact::FileTooLarge(_)
            | Fact::MarkersLeft(_)
            | Fact::GithubUnanswered(_)
            | Fact::Fault(_) => Outcome::Error,
            Fact::PushFailed(_) => Outcome::PushFailed,
            Fact::BranchPushed(_) => Outcome::BranchPushed,
            Fact::PrFailed(_) => Outcome::PrFailed,
            Fact::PrOpened(_) => Outcome::PrOpened,
            Fact::PrUpdated(_) => Outcome::PrUpdated,
        }
    }

    /// The item's reason for this fact (`None` only for a PR opened as asked).
    pub fn reason(self) -> Option<String> {
        Some(match self {
            Fact::RunCapUsed(cap) => format!("the run's cost cap of ${cap:.2} is used up"),
            Fact::NotStarted(deadline) => format!("not started before the deadline {deadline}"),
            Fact::Question => "the writer asked a question".into(),
            Fact::CheckoutFailed(why) => format!("checkout failed: {why}"),
            Fact::PrOpened(why) => return why,
            Fact::RoundsUsedUp { why, .. }
            | Fact::Waits(why)
            | Fact::NotApproved(why)
            | Fact::ReviewQueueFull(why)
            | Fact::EarlierPrOpen(why)
            | Fact::EarlierPrMerged(why)
            | Fact::LeftAlone(why)
            | Fact::Signal(why)
            | Fact::Deadline(why)
            | Fact::TimedOut(why)
            | Fact::NoCredit(why)
            | Fact::QuotaReserved(why)
            | Fact::OverBudget(why)
            | Fact::RuleBroken(why)
            | Fact::NoChanges(why)
            | Fact::NoProgress(why)
            | Fact::ReviewVoid(why)
            | Fact::SetupFailed(why)
            | Fact::AgentUnusable(why)
            | Fact::FileTooLarge(why)
            | Fact::MarkersLeft(why)
            | Fact::GithubUnanswered(why)
            | Fact::Fault(why)
            | Fact::PushFailed(why)
            | Fact::BranchPushed(why)
            | Fact::PrFailed(why)
            | Fact::PrUpdated(why) => why,
        })
    }
}

/// The item's end for `fact`, with nothing else known (no rounds, no
/// totals, no branch or PR): callers add those with [`ItemEnd::with`].
pub(super) fn end(fact: Fact) -> ItemEnd {
    let outcome = fact.outcome();
    ItemEnd::of(outcome).with(|f| f.reason = fact.reason())
}

/// Whether an item that ended with `outcome` may owe it to the
/// environment (see [`systemic`]): a failure, other than a branch pushed
/// whose PR is retried.
pub(super) fn may_be_systemic(outcome: Outcome) -> bool {
    outcome.fails_run() && outcome != Outcome::PrFailed
}

/// Whether an item that ended with `outcome` left its work on its branch
/// (pushed, with or without its PR, or a tended PR pushed anew): its
/// checkout is reset by the next item's, not discarded now.
pub(super) fn shipped(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::PrOpened | Outcome::PrFailed | Outcome::BranchPushed | Outcome::PrUpdated
    )
}

/// A failure the environment caused (`why`: the disk filled up, the data
/// directory went away, the agent's executable vanished) is not the
/// item's: the item is recorded `interrupted`, with its own error kept in
/// the reason, and the run stops to be resumed once the cause is fixed.
/// An item that did not fail the run, a `pr_failed` branch, and an item
/// whose broken rule is the stop's cause (an agent's push) keep their end.
pub(super) fn systemic(end: &mut ItemEnd, why: &str) {
    if !may_be_systemic(end.outcome) {
        return;
    }
    if end.outcome == Outcome::RuleBroken
        && end.facts.reason.as_deref().is_some_and(|r| r.contains(why))
    {
        return;
    }
    let own = end
        .facts
        .reason
        .take()
        .filter(|r| !r.is_empty() && !why.contains(r.as_str()));
    end.outcome = Outcome::Interrupted;
    end.facts.reason = Some(format!(
        "stopped: {why}{}",
        own.map(|r| format!(" (the item's own error: {r})"))
            .unwrap_or_default()
    ));
}

/// An item the resumed run `from` (stopped by a signal when `stopped`) was
/// working on when it died and that now finds its PR open: that run opened
/// it after `begun` rounds (more than 0), so the item ends `pr_opened` with
/// those rounds, not `already_open`, and the night counts the PR
/// (docs/loop.md). Any other end stays.
pub(super) fn opened_before_stop(end: &mut ItemEnd, begun: i64, from: Uuid, stopped: bool) {
    if end.outcome != Outcome::AlreadyOpen || begun <= 0 {
        return;
    }
    end.outcome = Outcome::PrOpened;
    end.facts.rounds = end.facts.rounds.max(begun as u32);
    let opened = format!(
        "its PR #{} was opened by it before it stopped",
        end.facts.pr_number.unwrap_or(0)
    );
    end.facts.reason = Some(items::carried_reason(Some(&opened), from, stopped));
}

/// The end of an item the resumed run `from` (stopped by a signal when
/// `stopped`) finished, as this run records it: the same outcome. Its reason
/// starts with [`items::CARRIED_REASON`], so `max_attempts` counts the attempt
/// once, not once per resume, and names the run that finished it once,
/// however many resumes carried it ([`items::carried_reason`]).
pub(super) fn carried(prev: &items::ItemRow, from: Uuid, stopped: bool) -> ItemEnd {
    ItemEnd {
        // Always set: only items that ended are carried over.
        outcome: prev.outcome.unwrap_or(Outcome::Error),
        facts: items::ItemFacts {
            reason: Some(items::carried_reason(
                prev.facts.reason.as_deref(),
                from,
                stopped,
            )),
            ..prev.facts.clone()
        },
    }
}

/// The item's end for `fact` in or after its rounds: a stop for the item's
/// time or a cap (`timed_out`, `budget_exceeded`) names the failure of the
/// round before it, `last` ("" when none failed).
pub(super) fn after_rounds(fact: Fact, last: &str) -> ItemEnd {
    let outcome = fact.outcome();
    let reason = fact
        .reason()
        .map(|why| crate::report::after_failure(outcome, why, last));
    ItemEnd::of(outcome).with(|f| f.reason = reason)
}
