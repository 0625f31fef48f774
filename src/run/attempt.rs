//! The driver of an item's life (docs/loop.md): it holds the stages of an
//! attempt and decides each next one. For a plan entry: the checks before
//! any work (blocked, not approved, an earlier PR, an open question, too
//! many attempts, the run's cost cap, a full review queue —
//! docs/loop.md#before-the-checkout), the checkout, the setup, then round
//! after round ([`super::round`] runs one and says how it went: retry,
//! approved or the item's end), and for an approved change its delivery
//! ([`Delivery`]: a new PR, [`super::ship`], or a push to a tended PR,
//! [`super::tend_push`]). What every ending shares (rounds cut short
//! closed, the writer's findings filed, the checkout discarded) is here too.
//! A tended PR (docs/github.md "The second night") goes through the same
//! rounds and delivery from [`super::tend`], which prepares its checkout.
//! It does not run a step itself: the stages live in [`super::item`],
//! [`super::round`], [`super::ship`] and [`super::tend_push`].

use std::time::Instant;

use crate::agent;
use crate::error::Error;
use crate::ledger::items::ItemEnd;
use crate::outcome::{Phase, PrRecord};
use crate::slot;

use super::checks::grant_checkout;
use super::decide::{self, Fact};
use super::item::{
    Attempt, Item, Progress, Round, before_round, checkout, file_findings, pin_base, setup,
};
use super::round::{self, RoundEnd};
use super::tend_push::Tend;
use super::{local, review_queue, ship};

/// How an approved change leaves the checkout.
#[derive(Clone, Copy)]
pub(super) enum Delivery<'a> {
    /// A new branch and PR ([`ship::ship`]).
    NewPr,
    /// A push to the PR this tend card is for ([`super::tend_push::ship`]).
    Tend(&'a Tend<'a>),
    /// A fix round's push to the PR whose CI is red ([`super::ci_fix_push::ship`]).
    CiFix(&'a super::ci_fix_push::Fix<'a>),
}

/// What shapes an item's rounds besides its contract.
pub(super) struct Course {
    /// Rounds at most.
    pub cap: u32,
    /// What the cap is called in the reason of an item that used it up.
    pub cap_name: &'static str,
    /// What nightshift itself did in place of the first round's writer
    /// (a tended PR rebased cleanly, nothing asked), if anything: that
    /// round starts at the proof.
    pub first: Option<agent::Report>,
    /// What the writer is told before anything else in every round (a
    /// tend's conflict and requests); empty for an item.
    pub context: String,
    /// What the reviewer is told besides the contract (a fix round's
    /// failure, docs/github.md#fix-rounds); empty for an item.
    pub review_context: String,
    /// The number of the first round (1; a fix round's comes after the
    /// rounds its item had in the run).
    pub first_round: u32,
}

impl Course {
    /// The course of a plan item: its contract's rounds, nothing before
    /// the writer's feedback.
    pub fn of_item(item: &Item<'_>) -> Course {
        Course {
            cap: item.entry.contract.limits.rounds.value,
            cap_name: "the cap",
            first: None,
            context: String::new(),
            review_context: String::new(),
            first_round: 1,
        }
    }
}

/// Decides what happens to one plan entry and runs it if it should run;
/// the run's cost cap counts what every worker spent (docs/workers.md).
///
/// # Errors
/// The ledger stays away (see [`super::Night::db`]), or the claim was lost.
pub(super) async fn one_item(at: &Attempt<'_>) -> Result<ItemEnd, Error> {
    let (night, entry) = (at.night, at.entry);
    let branch = slot::branch_name(&entry.item.title, &entry.item.key);
    if let Some(end) = not_to_run(at, &branch).await? {
        return Ok(end);
    }
    let cap = night.run_cost_cap();
    if at.record.run_spent(Some(at.item_id)).await? >= cap {
        return Ok(decide::end(Fact::RunCapUsed(cap)));
    }
    let mut slot = match checkout(at, &branch).await? {
        Ok(slot) => slot,
        Err(end) => return Ok(end),
    };
    if let Some(fact) = pin_base(night, &at.record, &mut slot).await? {
        return Ok(decide::end(fact).with(|f| f.branch = Some(branch)));
    }
    let token = night.git_token();
    // The lease of the item's push: what its branch holds right after the
    // claim, so a worker that lost the claim while paused cannot push over
    // the takeover's branch (docs/workers.md#fencing).
    if let Err(e) = tokio::task::block_in_place(|| slot.read_lease(token.as_deref())) {
        tracing::warn!(
            "cannot read {branch} on the remote after the claim (its push reads it then): {e}"
        );
    }
    let dir = item_log_dir(night, at.run_id, entry);
    let item = Item {
        night,
        run_id: at.run_id,
        item_id: at.item_id,
        entry,
        slot: &slot,
        branch: &branch,
        dir: &dir,
        record: at.record,
        cancel: at.cancel,
        contract_json: entry.contract.canonical_json(),
        token,
    };
    let course = Course::of_item(&item);
    let mut end = match item_loop(&item, course, Delivery::NewPr).await {
        Ok(end) => end,
        Err(e) => {
            // The ledger is gone for good, a signal came while waiting for
            // it, or the claim passed to another worker: the item is redone
            // (by the next drain, or that worker) from a clean checkout.
            let _ = tokio::task::block_in_place(|| slot.discard());
            return Err(e);
        }
    };
    // A failed item leaves nothing behind (docs/loop.md#outcomes). A
    // shipped one's work is on its branch: its slot is reset by the next
    // item's checkout, not twice.
    let shipped = decide::shipped(end.outcome);
    if !shipped && let Err(e) = tokio::task::block_in_place(|| slot.discard()) {
        end.facts.reason = Some(format!(
            "{}; cleaning the checkout failed: {e}",
            end.facts.reason.unwrap_or_default()
        ));
    }
    end.facts.branch.get_or_insert(branch);
    Ok(end)
}

/// Item `entry`'s log directory in run `run_id` (docs/ledger.md#logs):
/// its calls' directories (`round-NN-ROLE-K/`) live under it.
pub(super) fn item_log_dir(
    night: &super::Night,
    run_id: uuid::Uuid,
    entry: &crate::contract::PlanEntry,
) -> std::path::PathBuf {
    let key = &entry.item.key;
    night
        .data_dir
        .join("logs")
        .join(run_id.to_string())
        .join(format!("item-{:03}-{}", entry.index, &key[..8]))
}

/// Why the entry does not run, if it does not: blocked, not approved, an
/// earlier PR, a question waiting for its answer, too many failed attempts,
/// a full review queue.
async fn not_to_run(at: &Attempt<'_>, branch: &str) -> Result<Option<ItemEnd>, Error> {
    let (night, entry, approved) = (at.night, at.entry, at.approved);
    let key = &entry.item.key;
    if let Some(b) = &entry.blocked {
        let question = entry.contract.questions.first().cloned();
        return Ok(Some(
            decide::end(Fact::Waits(b.clone())).with(|f| f.question = question),
        ));
    }
    if !approved.contains(&entry.contract_sha) {
        return Ok(Some(not_approved(at).await?));
    }
    // An earlier PR of this item (ledger, confirmed on GitHub). GitHub may
    // be slow or retried: `status` says so rather than a stale phase.
    at.record.phase(Phase::Github, key, None).await?;
    if let Some(end) = ship::earlier_pr(night, &at.record, entry, branch).await? {
        return Ok(Some(end));
    }
    if let Some(end) = waiting(at).await? {
        return Ok(Some(end));
    }
    // An agent account without credit this night (docs/limits.md#no-credit):
    // nothing of it can run.
    if let Some(why) = super::agent_call::without_credit(night).await? {
        let why = format!("not started: {why}");
        return Ok(Some(decide::end(Fact::NoCredit(why))));
    }
    // An account whose quota is kept for the day (docs/limits.md#reserve):
    // waited for when its window resets before the deadline.
    let ids = (at.run_id, Some(at.item_id));
    match super::quota::wait_reserve(night, &at.record, ids, at.cancel).await? {
        super::quota::Reserve::Free => {}
        super::quota::Reserve::Reserved(why) => {
            let why = format!("not started: {why}");
            return Ok(Some(decide::end(Fact::QuotaReserved(why))));
        }
        super::quota::Reserve::Signal => {
            let why = "stopped by a signal while waiting for a quota window to reset".into();
            return Ok(Some(decide::end(Fact::Signal(why))));
        }
    }
    // Last, right before the work: no agent time for a PR that would not
    // be opened (config `max_open_prs`).
    review_queue::full(night, &at.record, entry, None).await
}

/// A changed (same key, or a reworded item where a gone one sat) or added
/// item: why it is not approved (docs/contract.md).
async fn not_approved(at: &Attempt<'_>) -> Result<ItemEnd, Error> {
    let (night, entry) = (at.night, at.entry);
    let held = at.record.contract_items(at.approved.in_order()).await?;
    let current: Vec<crate::approval::Held> = night
        .plan
        .entries
        .iter()
        .map(|e| crate::approval::Held {
            key: e.item.key.clone(),
            title: e.item.title.clone(),
        })
        .collect();
    let why = crate::approval::why_not_approved(&held, &current, &entry.item.key);
    Ok(decide::end(Fact::NotApproved(why.reason().into())))
}

/// A question the writer asked of this contract waits for its answer (an
/// edit of the item), instead of costing a writer call every night; and an
/// item that failed `max_attempts` times with this contract waits for an
/// edit too (docs/loop.md#before-the-checkout).
async fn waiting(attempt: &Attempt<'_>) -> Result<Option<ItemEnd>, Error> {
    let (night, entry) = (attempt.night, attempt.entry);
    let (key, sha) = (&entry.item.key, &entry.contract_sha);
    if let Some((q, asked_in, at)) = attempt.record.open_question(key, sha).await? {
        let when = at
            .map(|t| format!(" on {}", local(t, night.tz)))
            .unwrap_or_default();
        let why = format!(
            "waiting for an answer to the writer's question (asked in run {}{when}); answer it in the item (a detail line, or `accept:`) and the changed item runs again",
            &asked_in.to_string()[..8]
        );
        return Ok(Some(
            decide::end(Fact::Waits(why)).with(|f| f.question = Some(q)),
        ));
    }
    let attempts = attempt.record.failed_attempts(key, sha).await?;
    let max_attempts = night.config.limits.max_attempts as i64;
    if attempts >= max_attempts {
        return Ok(Some(decide::end(Fact::Waits(format!(
            "failed on {attempts} earlier run(s) with this contract (max_attempts = {max_attempts}); read its last report, then edit the item (a new contract starts over) or raise max_attempts"
        )))));
    }
    Ok(None)
}

/// What [`will_not_run`] looks at for one item of `run ITEM`, before any
/// approval is asked for: no run, no [`super::Night`] yet.
pub struct Preview<'a> {
    /// The ledger.
    pub pool: &'a sqlx::PgPool,
    /// The repository's identity in the ledger.
    pub repo_id: &'a str,
    /// The item's plan entry.
    pub entry: &'a crate::contract::PlanEntry,
    /// The GitHub client, when there is one.
    pub forge: Option<&'a crate::forge::Forge>,
    /// The config (the PR label, `max_attempts`).
    pub config: &'a crate::config::Config,
    /// The user's repository root (git runs there).
    pub repo: &'a std::path::Path,
    /// The remote's URL; `None` when there is no such remote.
    pub remote_url: Option<&'a str>,
    /// The GitHub token's text, for an https remote.
    pub token: Option<&'a str>,
}

/// Why `run ITEM` would do nothing for this item: `not_to_run`'s checks
/// before the writer (docs/loop.md#before-the-checkout), read only and in
/// its order, worded for the person who asked — blocked in the backlog; an
/// open or merged PR (GitHub's word, else the ledger's, a pushed branch
/// judged by `ship::branch_on_remote`'s one rule); a writer's question
/// still unanswered; `max_attempts` used up. `None`: the item would run (or
/// GitHub could not tell; the run decides). Approval and the review queue
/// are the run's to check.
///
/// # Errors
/// Database errors.
pub async fn will_not_run(p: &Preview<'_>) -> Result<Option<String>, Error> {
    let e = p.entry;
    let key = &e.item.key;
    if let Some(b) = &e.blocked {
        return Ok(Some(format!("it is blocked: {b}")));
    }
    let rows = crate::ledger::prs::prs_of_item(p.pool, p.repo_id, key).await?;
    if let Some(f) = p.forge {
        let branch = slot::branch_name(&e.item.title, key);
        for b in std::iter::once(branch).chain(rows.iter().map(|r| r.branch.clone())) {
            match f.find_pr(&b, key, &p.config.label).await {
                Ok(Some(pr)) if pr.state == crate::forge::PrState::Open => {
                    return Ok(Some(format!("its PR #{} is open: {}", pr.number, pr.url)));
                }
                Ok(Some(pr)) if pr.state == crate::forge::PrState::Merged => {
                    return Ok(Some(format!(
                        "its PR #{} was merged: {}",
                        pr.number, pr.url
                    )));
                }
                Ok(_) => {}
                Err(_) => return Ok(None),
            }
        }
    } else if let Some(why) = earlier_in_ledger(&rows, |branch| {
        p.remote_url
            .is_some_and(|url| ship::branch_on_remote(p.repo, p.token, url, branch))
    }) {
        return Ok(Some(why));
    }
    let sha = &e.contract_sha;
    if let Some((q, _, _)) =
        crate::ledger::items::open_question(p.pool, p.repo_id, key, sha).await?
    {
        return Ok(Some(format!(
            "it waits for an answer to the writer's question ({q}); answer it in the item and plan again"
        )));
    }
    let attempts = crate::ledger::items::failed_attempts(p.pool, p.repo_id, key, sha).await?;
    let max = p.config.limits.max_attempts as i64;
    if attempts >= max {
        return Ok(Some(format!(
            "it failed on {attempts} earlier run(s) with this contract (max_attempts = {max}); edit the item or raise max_attempts"
        )));
    }
    Ok(None)
}

/// Without GitHub, what the ledger's rows say of an earlier PR, worded for
/// `run ITEM`: open, merged, or a branch pushed with no PR while it is
/// still on the remote (`on_remote`); a branch gone from the remote is
/// redone, as the run does.
fn earlier_in_ledger(
    rows: &[crate::ledger::prs::PrRow],
    on_remote: impl Fn(&str) -> bool,
) -> Option<String> {
    let r = ship::earlier_in_ledger(rows)?;
    let number = r.number.unwrap_or(0);
    match r.state {
        PrRecord::Merged => Some(format!("its PR #{number} was merged")),
        PrRecord::Open => Some(format!("its PR #{number} is open")),
        _ if on_remote(&r.branch) => Some(format!(
            "its branch {} was pushed by an earlier night without GitHub access and has no PR; give nightshift GitHub access (GITHUB_TOKEN) and run it again to open the PR, or delete the branch on the remote to redo the item",
            r.branch
        )),
        _ => None,
    }
}

/// The rounds of one item (docs/loop.md#rounds) along `course`, each
/// approved change delivered by `delivery`, then what every ending shares:
/// a round cut short ends with the item, and the writer's `FINDINGS:` are
/// filed as issues (proposals, docs/loop.md#findings-and-questions)
/// whether or not the item succeeded.
///
/// # Errors
/// The ledger stays away (see [`super::Night::db`]), or the claim was lost.
pub(super) async fn item_loop(
    item: &Item<'_>,
    course: Course,
    delivery: Delivery<'_>,
) -> Result<ItemEnd, Error> {
    let mut st = Progress::new(item);
    st.feedback = course.context.clone();
    st.review_context = course.review_context.clone();
    let end = rounds(item, &mut st, course, delivery).await?;
    // A round cut short (timeout, budget, signal, deadline) ends with the item.
    item.record
        .close_open_rounds(item.item_id, end.outcome)
        .await?;
    file_findings(item, &st.findings).await?;
    Ok(end)
}

/// The checkout handed to `agent_user`, the setup, and the rounds up to
/// the course's cap: each round retried, delivered or the item's end.
async fn rounds(
    item: &Item<'_>,
    st: &mut Progress,
    mut course: Course,
    delivery: Delivery<'_>,
) -> Result<ItemEnd, Error> {
    // Under `agent_user`, the checkout must be the agent's to write
    // (docs/security.md#with-agent_user).
    if let Some(why) = grant_checkout(item.night, item.slot).await {
        return Ok(st.end(Fact::Fault(why), 0));
    }
    if let Some(end) = setup(item, st).await? {
        return Ok(end);
    }
    for n in course.first_round..course.first_round + course.cap {
        if let Some(end) = before_round(item, st, n) {
            return Ok(end);
        }
        let id = item.record.start_round(item.item_id, n).await?;
        let mut r = Round {
            item,
            st,
            n,
            id,
            started: Instant::now(),
        };
        match round::run(&mut r, course.first.take()).await? {
            RoundEnd::Retry(feedback) if course.context.is_empty() => st.feedback = feedback,
            // What was asked stays in front of what went wrong.
            RoundEnd::Retry(feedback) => st.feedback = format!("{}\n{feedback}", course.context),
            RoundEnd::Approved(a) => return deliver(&mut r, *a, delivery).await,
            RoundEnd::End(end) => return Ok(end),
        }
    }
    let (last, mut reason) = st.last_failure.clone();
    if reason.is_empty() {
        reason = "no round ran".into();
    }
    let why = format!(
        "{reason} (after {} round(s), {})",
        course.cap, course.cap_name
    );
    Ok(st.end(Fact::RoundsUsedUp { last, why }, course.cap))
}

/// Delivers the change round `r` approved as `delivery` says.
async fn deliver(
    r: &mut Round<'_>,
    a: round::Approved,
    delivery: Delivery<'_>,
) -> Result<ItemEnd, Error> {
    match delivery {
        Delivery::NewPr => ship::ship(r, a).await,
        // A tended PR is pushed anew, not opened (docs/github.md).
        Delivery::Tend(t) => super::tend_push::ship(r, t, a).await,
        Delivery::CiFix(f) => super::ci_fix_push::ship(r, f, a).await,
    }
}

#[cfg(test)]
mod tests {
    use super::{earlier_in_ledger, ship};
    use crate::ledger::prs::PrRow;
    use crate::outcome::PrRecord;

    fn pushed(branch: &str) -> PrRow {
        PrRow {
            item_key: "k".into(),
            branch: branch.into(),
            number: None,
            url: None,
            state: PrRecord::Planned,
            contract_sha: "c".into(),
        }
    }

    /// `run ITEM` once had its own copy of the run's checks and said an item
    /// with a pushed branch would run when the remote could not be reached,
    /// while the run then skipped it (`branch_pushed`). The preview now
    /// asks the run's one rule.
    #[test]
    fn run_item_says_a_pushed_branch_will_not_run_when_the_remote_is_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().join("gone.git").display().to_string();
        let rows = [pushed("nightshift/x")];
        let why = earlier_in_ledger(&rows, |b| ship::branch_on_remote(dir.path(), None, &url, b));
        assert!(
            why.as_deref()
                .is_some_and(|w| w.contains("its branch nightshift/x was pushed")),
            "{why:?}"
        );
        // A branch the remote says is gone is redone.
        assert_eq!(earlier_in_ledger(&rows, |_| false), None);
    }
}
