//! The second night in a run (docs/github.md "The second night"): the
//! plan's tend cards are worked before its new items. A card left alone
//! (someone pushed, the hands-off label, `/nightshift stop`) is recorded
//! `pr_left_alone`; an approved card takes the PR's branch up at the head
//! nightshift last pushed, brings it onto the run's base (a clean rebase
//! when it applies; else the branch's change as one, with the conflicts
//! left for the writer), and runs the item's rounds on it — the same round
//! steps as any item ([`super::round`]): writer (with the conflict and the
//! requests as its feedback), proof, gate, review, decide, within
//! `max_tend_rounds` and the item's budgets. A clean rebase with nothing
//! asked needs no writer: its first round starts at the proof. Shipping a
//! tend ([`super::ship`]) pushes to the same branch with `--force-with-lease`
//! against that head, rewrites the PR body's evidence card, posts one
//! answering comment and records the new head; a failure pushes nothing.
//! A tend card takes its item's place in the run: the item is not also
//! run (it would only find its PR open).

use uuid::Uuid;

use crate::agent;
use crate::contract::PlanEntry;
use crate::error::Error;
use crate::git::Rebase;
use crate::ledger::items::ItemEnd;
use crate::ledger::{self, items};
use crate::outcome::{Event, Outcome, RunStatus};
use crate::plan::Plan;
use crate::slot::{Slot, SlotError};
use crate::tend::{self as cards, LeftAlone, Sealed, TendCard, Verdict};

use super::attempt::{self, Course, Delivery};
use super::decide::{self, Fact};
use super::item::{self, Item};
use super::ship::runner_identity;
use super::tend_push::Tend;
use super::{Night, Walk, local};

/// Whether the run records `card` in its item's place: a card to act on,
/// or a PR left alone for a reason that lasts. A PR merged or closed
/// meanwhile is its item's business (`already_merged`, or done again).
fn takes_over(card: &TendCard) -> bool {
    match &card.verdict {
        Verdict::Conflict { .. } | Verdict::ChangesRequested { .. } | Verdict::CiFailed { .. } => {
            card.sealed.is_some()
        }
        Verdict::LeftAlone { reason } => !matches!(reason, LeftAlone::Merged | LeftAlone::Closed),
        Verdict::Nothing => false,
    }
}

/// The items whose tend card a run records instead of running them (see
/// [`takes_over`]), by key.
pub(super) fn taken_over(plan: &Plan) -> Vec<&str> {
    plan.tend
        .iter()
        .filter(|c| takes_over(c))
        .map(|c| c.item_key.as_str())
        .collect()
}

impl Walk<'_> {
    /// Works the plan's tend cards before its items: every one for
    /// `drain`, PR `only` for `run '#N'`. First records what the trust rule
    /// ignored on each card looked at (a `tend_ignored` event per PR, read
    /// by the report). `false` when the run stops.
    ///
    /// # Errors
    /// The ledger stays away (see [`Night::db`]); the lock was lost.
    pub(super) async fn tend(&mut self, only: Option<u64>) -> Result<bool, Error> {
        let night = self.night;
        let record = super::record::Record::run(night, self.run_id);
        let looked_at = night
            .plan
            .tend
            .iter()
            .filter(|c| only.is_none_or(|n| n == c.number));
        for card in looked_at.filter(|c| !c.ignored.is_empty()) {
            let data = serde_json::json!({"pr": card.number, "title": card.title, "ignored": card.ignored});
            record.event(Event::TendIgnored, data).await?;
        }
        let chosen = night
            .plan
            .tend
            .iter()
            .filter(|c| takes_over(c) && only.is_none_or(|n| n == c.number));
        for card in chosen {
            if !self.tend_card(card).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Records one card as a run item and works it unless the run stops
    /// first; `false` when the run stops after it (or before it). A card
    /// the resumed run finished is carried over as it ended, as an item is.
    async fn tend_card(&mut self, card: &TendCard) -> Result<bool, Error> {
        let (night, run_id) = (self.night, self.run_id);
        if night.cancel.is_cancelled() {
            self.status = RunStatus::StoppedSignal;
            return Ok(false);
        }
        let sha = card
            .sealed
            .as_ref()
            .map_or(card.contract_sha.as_str(), |s| s.sha.as_str());
        let (key, title) = (&card.item_key, &card.title);
        let carried_over = self
            .finished_before
            .get(key)
            .filter(|prev| prev.contract_sha == sha)
            .cloned();
        if carried_over.is_none() {
            night.hold_lock().await?;
            if let Some(why) = night.systemic_problem() {
                self.status = RunStatus::Crashed;
                self.stopped_by = Some(why);
                return Ok(false);
            }
        }
        let record = super::record::Record::run(night, run_id);
        let row = items::ItemStart {
            key,
            contract_sha: sha,
            index: 0,
            title,
        };
        let item_id = record.start_row(&row).await?;
        let mut end = match carried_over {
            Some(prev) => super::carried(&prev, self.resumed_from),
            None => self.run_card(card, item_id).await?,
        };
        end.facts.pr_number.get_or_insert(card.number);
        end.facts.branch.get_or_insert_with(|| card.branch.clone());
        record.finish_item(item_id, key, &end, false).await?;
        Ok(!self.status.fails_run())
    }

    /// Works one card this run has not finished, unless the deadline
    /// passed; sets the run's status from how it ended (as
    /// `Walk::run_item` does for an item).
    async fn run_card(&mut self, card: &TendCard, item_id: i64) -> Result<ItemEnd, Error> {
        let night = self.night;
        if self.status == RunStatus::StoppedDeadline || night.clock.now() >= night.deadline {
            self.status = RunStatus::StoppedDeadline;
            let deadline = local(night.deadline, night.tz);
            return Ok(decide::end(Fact::NotStarted(deadline)));
        }
        let at = At {
            night,
            run_id: self.run_id,
            item_id,
            record: super::record::Record::run(night, self.run_id),
        };
        let mut end = one_card(&at, card, self.approved).await?;
        self.systemic(&mut end);
        match end.outcome {
            Outcome::Deadline => self.status = RunStatus::StoppedDeadline,
            Outcome::Interrupted if self.status != RunStatus::Crashed => {
                self.status = RunStatus::StoppedSignal
            }
            _ => {}
        }
        Ok(end)
    }
}

/// Where a tend runs: the run and the card's row in it.
struct At<'a> {
    night: &'a Night,
    run_id: Uuid,
    item_id: i64,
    /// The run's ledger handle (cards are worked before the workers start,
    /// on the drain's own slot 0).
    record: super::record::Record<'a>,
}

/// A PR left alone for `why`: nothing was touched.
fn left_alone(why: String) -> ItemEnd {
    decide::end(Fact::LeftAlone(why))
}

/// Decides what happens to one card and works it if it should run.
/// The run's cost cap counts what the run spent so far (from the ledger).
async fn one_card(
    at: &At<'_>,
    card: &TendCard,
    approved: &super::Approved,
) -> Result<ItemEnd, Error> {
    let night = at.night;
    let Some(sealed) = &card.sealed else {
        let why = match &card.verdict {
            Verdict::LeftAlone { reason } => reason.to_string(),
            _ => "nothing to do".to_string(),
        };
        return Ok(left_alone(why));
    };
    if let Some(end) = not_to_tend(night, card, sealed, approved).await? {
        return Ok(end);
    }
    let Some(entry) = night
        .plan
        .entries
        .iter()
        .find(|e| e.item.key == card.item_key)
    else {
        return Ok(left_alone(
            "its item is no longer open in the backlog".into(),
        ));
    };
    let (run_cost, cap) = (
        at.record.run_spent(Some(at.item_id)).await?,
        night.run_cost_cap(),
    );
    if run_cost >= cap {
        return Ok(decide::end(Fact::RunCapUsed(cap)));
    }
    let attempt = item::Attempt {
        night,
        run_id: at.run_id,
        item_id: at.item_id,
        entry,
        approved,
        slot: 0,
        record: at.record,
        cancel: &night.cancel,
    };
    let mut slot = match item::checkout(&attempt, &card.branch).await? {
        Ok(slot) => slot,
        Err(end) => return Ok(end),
    };
    let end = in_slot(at, (card, sealed), entry, &mut slot).await;
    let discarded = tokio::task::block_in_place(|| slot.discard());
    let mut end = end?;
    if !decide::shipped(end.outcome)
        && let Err(e) = discarded
    {
        end.facts.reason = Some(format!(
            "{}; cleaning the checkout failed: {e}",
            end.facts.reason.unwrap_or_default()
        ));
    }
    Ok(end)
}

/// Why an approved-looking card does not run, if it does not: its SHA is
/// not in the approved plan (it changed since: a new comment, a push), or
/// tending this PR from this head failed `max_attempts` times already.
async fn not_to_tend(
    night: &Night,
    card: &TendCard,
    sealed: &Sealed,
    approved: &super::Approved,
) -> Result<Option<ItemEnd>, Error> {
    if !approved.contains(&sealed.sha) {
        return Ok(Some(decide::end(Fact::NotApproved(format!(
            "the card of PR #{} changed after the plan was approved (a new comment or review since); run `nightshift plan` and approve it to act on what is asked now",
            card.number
        )))));
    }
    let head = &sealed.contract.head;
    let (pool, repo) = (&night.pool, &night.repo_id);
    let attempts = night
        .db(|| ledger::tend::tend_attempts(pool, repo, &card.item_key, card.number, head))
        .await?;
    let max = night.config.limits.max_attempts as i64;
    if attempts >= max {
        return Ok(Some(decide::end(Fact::Waits(format!(
            "tending PR #{} failed on {attempts} earlier night(s) since nightshift's last push (max_attempts = {max}); read its last report, then change the PR or its item by hand, or raise max_attempts",
            card.number
        )))));
    }
    Ok(None)
}

/// The tend in its prepared checkout: the run's base pinned, the branch
/// taken up and brought onto it, then the rounds.
async fn in_slot(
    at: &At<'_>,
    (card, sealed): (&TendCard, &Sealed),
    entry: &PlanEntry,
    slot: &mut Slot,
) -> Result<ItemEnd, Error> {
    let night = at.night;
    if let Some(fact) = item::pin_base(night, &at.record, slot).await? {
        return Ok(decide::end(fact));
    }
    let token = night.git_token();
    let onto = match bring_onto_base(night, slot, &sealed.contract.head) {
        Ok(onto) => onto,
        Err(end) => return Ok(*end),
    };
    let url = at
        .record
        .prs_of_item(&card.item_key)
        .await?
        .into_iter()
        .find(|r| r.branch == card.branch)
        .and_then(|r| r.url);
    let mut context = context(night, card, slot, &onto);
    let mut review_context = String::new();
    // A PR whose CI ended red (docs/github.md#fix-rounds): the checks'
    // output and log, read now, are the writer's feedback.
    if let Verdict::CiFailed { checks } = &card.verdict {
        let told = super::ci_ask::told_for(night, &sealed.contract.head, checks).await;
        context = if context.is_empty() {
            told
        } else {
            format!("{context}\n{told}")
        };
        review_context = super::ci_ask::reviewer_note(&checks.join(", "));
    }
    let tend = Tend {
        card,
        sealed,
        context,
        resolved: onto.resolved(),
        work_from: onto.work_from(),
        moved: match &onto {
            Onto::Rebased { head } => !head.eq_ignore_ascii_case(&sealed.contract.head),
            Onto::Squashed { .. } => true,
        },
        url,
    };
    let dir = night
        .data_dir
        .join("logs")
        .join(at.run_id.to_string())
        .join(format!("tend-pr-{}-{}", card.number, &card.item_key[..8]));
    let item = Item {
        night,
        run_id: at.run_id,
        item_id: at.item_id,
        entry,
        slot,
        branch: &card.branch,
        dir: &dir,
        record: at.record,
        cancel: &night.cancel,
        // The agents read the card: the item's contract, the PR, the requests.
        contract_json: sealed.canonical_json.clone(),
        token,
    };
    let course = Course {
        cap: sealed.contract.rounds.max(1),
        cap_name: "max_tend_rounds",
        first: onto.writer_free(&night.config.base, card),
        context: tend.context.clone(),
        review_context,
        first_round: 1,
    };
    attempt::item_loop(&item, course, Delivery::Tend(&tend)).await
}

/// How the branch came onto the base.
enum Onto {
    /// Its commits rebased cleanly; the branch is at `head`.
    Rebased { head: String },
    /// Its change was brought onto the base as one (`files` conflicted;
    /// `tree` is the change staged with their markers).
    Squashed { files: Vec<String>, tree: String },
}

impl Onto {
    fn resolved(&self) -> Option<Vec<String>> {
        match self {
            Onto::Rebased { .. } => None,
            Onto::Squashed { files, .. } => Some(files.clone()),
        }
    }

    fn work_from(&self) -> String {
        match self {
            Onto::Rebased { head } => head.clone(),
            Onto::Squashed { tree, .. } => tree.clone(),
        }
    }

    /// What nightshift did, as the report of a round without a writer,
    /// when nothing is left for a writer to do: no conflict and nothing
    /// asked.
    fn writer_free(&self, base: &str, card: &TendCard) -> Option<agent::Report> {
        let done = match self {
            _ if !card.verdict.comments().is_empty() => return None,
            // Red CI is the writer's to fix.
            _ if matches!(card.verdict, Verdict::CiFailed { .. }) => return None,
            Onto::Squashed { files, .. } if !files.is_empty() => return None,
            Onto::Rebased { .. } => format!(
                "nightshift rebased the branch onto {base}; it applied cleanly, so no writer was called."
            ),
            Onto::Squashed { .. } => format!(
                "nightshift brought the branch's change onto {base} as one; it applied cleanly, so no writer was called."
            ),
        };
        Some(nightshift_report(done))
    }
}

/// The report of a "call" nightshift made itself: no agent ran.
fn nightshift_report(text: String) -> agent::Report {
    agent::Report {
        argv: vec![],
        outcome: crate::process::Outcome {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            cancelled: false,
            output_capped: false,
            duration: std::time::Duration::ZERO,
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            stdout_path: None,
            stderr_path: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout: vec![],
            refused: vec![],
        },
        text,
        verdict: None,
        usage: agent::Usage::default(),
        limit: None,
        failure: None,
        tools: None,
        mcp_servers: None,
        claimed_files: vec![],
        edited_files: vec![],
        notes: vec![],
        gauges: vec![],
    }
}

/// Takes the PR's branch up at `head` (the head nightshift last pushed)
/// and brings it onto the slot's base: a clean rebase, else the change as
/// one with its conflicts in the files. The item's end when someone else
/// pushed (left alone) or git fails.
fn bring_onto_base(night: &Night, slot: &mut Slot, head: &str) -> Result<Onto, Box<ItemEnd>> {
    let token = night.git_token();
    let failed = |what: &str, e: SlotError| {
        Box::new(decide::end(Fact::Fault(
            night.redact(&format!("{what}: {e}")),
        )))
    };
    match tokio::task::block_in_place(|| slot.take_pushed_branch(token.as_deref(), head)) {
        Ok(()) => {}
        Err(e @ SlotError::Moved { .. }) => return Err(Box::new(left_alone(e.to_string()))),
        Err(e) => return Err(failed("cannot take up the PR's branch", e)),
    }
    let rebased = tokio::task::block_in_place(|| slot.rebase_onto_base(&runner_identity()));
    match rebased {
        Ok(Rebase::Clean { head }) => {
            slot.set_tip(&head);
            Ok(Onto::Rebased { head })
        }
        Ok(Rebase::Conflict { .. }) => {
            let squashed = tokio::task::block_in_place(|| {
                slot.rebase_abort()?;
                slot.squash_onto_base(head)
            });
            match squashed {
                Ok((files, tree)) => Ok(Onto::Squashed { files, tree }),
                Err(e) => Err(failed("cannot bring the branch onto its base", e)),
            }
        }
        Err(e) => {
            let _ = tokio::task::block_in_place(|| slot.rebase_abort());
            Err(failed("cannot rebase the branch onto its base", e))
        }
    }
}

/// What the writer is told before anything else in every round: the
/// conflict to resolve (both sides, the files) and the requests verbatim.
fn context(night: &Night, card: &TendCard, slot: &Slot, onto: &Onto) -> String {
    let mut s = String::new();
    if let Onto::Squashed { files, .. } = onto
        && !files.is_empty()
    {
        s.push_str(&cards::conflict_prompt(&cards::ConflictFacts {
            pr: card.number,
            branch: &card.branch,
            base: &night.config.base,
            onto: &slot.base_commit,
            applying: card
                .sealed
                .as_ref()
                .map_or("", |s| s.contract.head.as_str()),
            files,
        }));
    }
    let asked = card.verdict.comments();
    if !asked.is_empty() {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(&cards::writer_feedback(card.number, asked));
    }
    s
}
