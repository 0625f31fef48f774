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
//! tend ([`ship`]) pushes to the same branch with `--force-with-lease`
//! against that head, rewrites the PR body's evidence card, posts one
//! answering comment and records the new head; a failure pushes nothing.
//! A tend card takes its item's place in the run: the item is not also
//! run (it would only find its PR open).

use serde_json::json;
use uuid::Uuid;

use crate::agent;
use crate::contract::PlanEntry;
use crate::error::Error;
use crate::git::Rebase;
use crate::ledger::records::{self as rec, ItemEnd};
use crate::outcome::{Event, Outcome, Phase, RunStatus};
use crate::plan::Plan;
use crate::report;
use crate::slot::{Slot, SlotError};
use crate::tend::{self as cards, LeftAlone, Sealed, TendCard, Verdict};

use super::checks;
use super::item::{self, Item, Progress};
use super::round::{self, Approved, Round};
use super::ship::{evidence, runner_identity, secret_in_change};
use super::{Night, Walk, local};

/// What a tend's rounds and its shipping need besides the item's own facts.
pub(super) struct Tend<'a> {
    /// The PR's card as the plan sealed it.
    pub card: &'a TendCard,
    pub sealed: &'a Sealed,
    /// What the writer is told in every round, before what went wrong in
    /// the last one: the conflict to resolve and the requests, verbatim.
    pub context: String,
    /// The files the writer had to resolve when the branch's change was
    /// brought onto the base as one; `None` after a clean rebase.
    pub resolved: Option<Vec<String>>,
    /// The commit or tree tonight's own work is measured from (the rebased
    /// head, or the staged change with its conflict markers), for the
    /// answer's "Changed".
    pub work_from: String,
    /// Whether the branch now sits on another base than before (rebased
    /// or brought onto it as one change), for the answer.
    pub moved: bool,
    /// The PR's URL, from the ledger.
    pub url: Option<String>,
}

/// Whether the run records `card` in its item's place: a card to act on,
/// or a PR left alone for a reason that lasts. A PR merged or closed
/// meanwhile is its item's business (`already_merged`, or done again).
fn takes_over(card: &TendCard) -> bool {
    match &card.verdict {
        Verdict::Conflict { .. } | Verdict::ChangesRequested { .. } => card.sealed.is_some(),
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
    /// `drain`, PR `only` for `run '#N'`. `false` when the run stops.
    ///
    /// # Errors
    /// The ledger stays away (see [`Night::db`]); the lock was lost.
    pub(super) async fn tend(&mut self, only: Option<u64>) -> Result<bool, Error> {
        let night = self.night;
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
        let row = rec::ItemStart {
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
        end.pr_number.get_or_insert(card.number);
        end.branch.get_or_insert_with(|| card.branch.clone());
        record.finish_item(item_id, key, &end, false).await?;
        Ok(!self.status.fails_run())
    }

    /// Works one card this run has not finished, unless the deadline
    /// passed; sets the run's status from how it ended (as
    /// [`Walk::run_item`] does for an item).
    async fn run_card(&mut self, card: &TendCard, item_id: i64) -> Result<ItemEnd, Error> {
        let night = self.night;
        if self.status == RunStatus::StoppedDeadline || night.clock.now() >= night.deadline {
            self.status = RunStatus::StoppedDeadline;
            let why = format!(
                "not started before the deadline {}",
                local(night.deadline, night.tz)
            );
            return Ok(ItemEnd {
                reason: Some(why),
                ..ItemEnd::of(Outcome::Deadline)
            });
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
    ItemEnd {
        reason: Some(why),
        ..ItemEnd::of(Outcome::PrLeftAlone)
    }
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
    let run_cost = at.record.run_spent(Some(at.item_id)).await?;
    if run_cost >= night.config.limits.max_cost_usd_per_run {
        return Ok(ItemEnd {
            reason: Some(format!(
                "the run's cost cap of ${:.2} is used up",
                night.config.limits.max_cost_usd_per_run
            )),
            ..ItemEnd::of(Outcome::BudgetExceeded)
        });
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
    if end.outcome != Outcome::PrUpdated
        && let Err(e) = discarded
    {
        end.reason = Some(format!(
            "{}; cleaning the checkout failed: {e}",
            end.reason.unwrap_or_default()
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
        return Ok(Some(ItemEnd {
            reason: Some(format!(
                "the card of PR #{} changed after the plan was approved (a new comment or review since); run `nightshift plan` and approve it to act on what is asked now",
                card.number
            )),
            ..ItemEnd::of(Outcome::NotApproved)
        }));
    }
    let head = &sealed.contract.head;
    let (pool, repo) = (&night.pool, &night.repo_id);
    let attempts = night
        .db(|| rec::tend_attempts(pool, repo, &card.item_key, card.number, head))
        .await?;
    let max = night.config.limits.max_attempts as i64;
    if attempts >= max {
        return Ok(Some(ItemEnd {
            reason: Some(format!(
                "tending PR #{} failed on {attempts} earlier night(s) since nightshift's last push (max_attempts = {max}); read its last report, then change the PR or its item by hand, or raise max_attempts",
                card.number
            )),
            ..ItemEnd::of(Outcome::Blocked)
        }));
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
    // Every item of a run is built from the base it took first (docs/loop.md).
    let pin = at.record.base_commit(&slot.base_commit).await?;
    let token = night.token.as_ref().map(|t| t.expose().to_string());
    if let Err(e) = tokio::task::block_in_place(|| slot.pin_base(&pin, token.as_deref())) {
        let why = format!(
            "checkout failed: cannot check out the run's base {pin}: {}",
            night.redact(&e.to_string())
        );
        return Ok(ItemEnd {
            reason: Some(why),
            ..ItemEnd::of(Outcome::Error)
        });
    }
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
    let tend = Tend {
        card,
        sealed,
        context: context(night, card, slot, &onto),
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
        tend: Some(&tend),
    };
    let first = onto.writer_free(&night.config.base, card);
    tend_loop(&item, &tend, first).await
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
    }
}

/// Takes the PR's branch up at `head` (the head nightshift last pushed)
/// and brings it onto the slot's base: a clean rebase, else the change as
/// one with its conflicts in the files. The item's end when someone else
/// pushed (left alone) or git fails.
fn bring_onto_base(night: &Night, slot: &mut Slot, head: &str) -> Result<Onto, Box<ItemEnd>> {
    let token = night.token.as_ref().map(|t| t.expose().to_string());
    let failed = |what: &str, e: SlotError| {
        Box::new(ItemEnd {
            reason: Some(night.redact(&format!("{what}: {e}"))),
            ..ItemEnd::of(Outcome::Error)
        })
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

/// The tend's rounds, then what every ending shares (rounds cut short
/// closed, the writer's findings filed), as for an item.
async fn tend_loop(
    item: &Item<'_>,
    t: &Tend<'_>,
    first: Option<agent::Report>,
) -> Result<ItemEnd, Error> {
    let mut st = Progress::new(item);
    st.feedback = t.context.clone();
    let end = rounds(item, t, &mut st, first).await?;
    item.record
        .close_open_rounds(item.item_id, end.outcome)
        .await?;
    item::file_findings(item, &st.findings).await?;
    Ok(end)
}

/// The checkout handed to `agent_user`, the setup, and up to the card's
/// `rounds` (config `max_tend_rounds`, sealed) rounds; the first starts at
/// the proof when `first` says what nightshift did instead of a writer.
async fn rounds(
    item: &Item<'_>,
    t: &Tend<'_>,
    st: &mut Progress,
    mut first: Option<agent::Report>,
) -> Result<ItemEnd, Error> {
    if let Some(why) = checks::grant_checkout(item.night, item.slot).await {
        return Ok(st.end(Outcome::Error, why, 0));
    }
    if let Some(end) = item::setup(item, st).await? {
        return Ok(end);
    }
    let cap = t.sealed.contract.rounds.max(1);
    for n in 1..=cap {
        if let Some(end) = item::before_round(item, st, n) {
            return Ok(end);
        }
        let ran = match first.take() {
            Some(work) => round::run_checked(item, st, n, work).await?,
            None => round::run(item, st, n).await?,
        };
        if let Some(end) = ran {
            return Ok(end);
        }
        // What was asked stays in front of what went wrong.
        if !t.context.is_empty() {
            st.feedback = format!("{}\n{}", t.context, st.feedback);
        }
    }
    let (outcome, mut reason) = st.last_failure.clone();
    if reason.is_empty() {
        reason = "no round ran".into();
    }
    let why = format!("{reason} (after {cap} round(s), max_tend_rounds)");
    Ok(st.end(outcome, why, cap))
}

/// Ships an approved tend (docs/github.md "The second night"): the secret
/// and conflict-marker checks, the commit of the night's work, a last look
/// at the PR, the push to the same branch with `--force-with-lease`
/// against the head nightshift last pushed, the new head recorded, the
/// body's evidence card rewritten and one answering comment. Nothing is
/// pushed when any step before the push fails.
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn ship(r: &mut Round<'_>, a: Approved) -> Result<ItemEnd, Error> {
    let (item, night) = (r.item, r.item.night);
    let Some(t) = item.tend else {
        return super::ship::ship(r, a).await;
    };
    if let Some(end) = secret_in_change(r, &a.reviewed.gated.tree) {
        return Ok(end);
    }
    if let Some(end) = markers_left(r, t) {
        return Ok(end);
    }
    let pushed = item.record.pushed_in_run().await?;
    let body = night.redact(&report::pr_body(&evidence(r, &a, &pushed)));
    r.phase(Phase::Push).await?;
    let new_head = match commit(r, t) {
        Ok(head) => head,
        Err(end) => return Ok(*end),
    };
    if let Some(end) = still_ours(r, t).await {
        return Ok(end);
    }
    if let Some(end) = push(r, t).await {
        return Ok(end);
    }
    let (key, branch) = (&item.entry.item.key, item.branch);
    item.record.pr_head(key, branch, &new_head).await?;
    item.record.pr_body_set(key, branch, &body).await?;
    let files: Vec<&str> = (a.reviewed.gated.proof.changed.iter())
        .map(|f| f.path.as_str())
        .collect();
    let pushed = json!({"key": key, "branch": branch, "title": item.entry.contract.title, "files": files, "pr": t.card.number, "from": t.sealed.contract.head, "to": new_head});
    item.record.event(Event::Pushed, pushed).await?;
    let notes = answer(r, t, &a, &body, &new_head).await;
    Ok(updated(r, t, body, &new_head, notes))
}

/// Conflict markers the writer left in a file it was to resolve: nothing
/// is pushed.
fn markers_left(r: &Round<'_>, t: &Tend<'_>) -> Option<ItemEnd> {
    let files = t.resolved.as_deref()?;
    let path = &r.item.slot.path;
    let marked: Vec<&str> = files
        .iter()
        .filter(|f| {
            std::fs::read(path.join(f)).is_ok_and(|b| {
                String::from_utf8_lossy(&b)
                    .lines()
                    .any(|l| l.starts_with("<<<<<<< ") || l.starts_with(">>>>>>> "))
            })
        })
        .map(String::as_str)
        .collect();
    (!marked.is_empty()).then(|| {
        r.end(
            Outcome::Error,
            format!(
                "conflict markers are still in {}; nothing was pushed",
                marked.join(", ")
            ),
        )
    })
}

/// Commits the night's work on the branch (when there is any) and returns
/// the branch's new head; the item's end when there is nothing to push.
fn commit(r: &Round<'_>, t: &Tend<'_>) -> Result<String, Box<ItemEnd>> {
    let (item, slot) = (r.item, r.item.slot);
    let message = format!(
        "nightshift: {} (PR #{})\n\nTend card sha256 {}\nRun {}\n",
        item.entry.contract.title, t.card.number, t.sealed.sha, item.run_id
    );
    let committed = tokio::task::block_in_place(|| {
        slot.commit_all(&message, &runner_identity(), &runner_identity())
    });
    let head = match committed {
        Ok(head) => head,
        Err(SlotError::NothingToCommit { .. }) => match tokio::task::block_in_place(|| slot.head())
        {
            Ok(head) => head,
            Err(e) => {
                return Err(Box::new(
                    r.end(Outcome::Error, format!("commit failed: {e}")),
                ));
            }
        },
        Err(e) => {
            return Err(Box::new(
                r.end(Outcome::Error, format!("commit failed: {e}")),
            ));
        }
    };
    if head.eq_ignore_ascii_case(&t.sealed.contract.head) {
        let why =
            "nothing to push: the writer changed nothing and the branch was already on its base"
                .to_string();
        return Err(Box::new(r.end(Outcome::NoChanges, why)));
    }
    Ok(head)
}

/// A last look at the PR before the push: still open, still at the head
/// nightshift pushed, not marked hands-off. The item's end when it is not,
/// or when GitHub cannot say (nothing is pushed without a PR to answer on).
async fn still_ours(r: &Round<'_>, t: &Tend<'_>) -> Option<ItemEnd> {
    let night = r.item.night;
    let n = t.card.number;
    let Some(forge) = night
        .forge
        .as_ref()
        .filter(|_| night.github_down().is_none())
    else {
        let why = format!("GitHub is not reachable to update PR #{n}; nothing was pushed");
        return Some(r.end(Outcome::Error, why));
    };
    let pr = match forge.pr_detail(n).await {
        Ok(pr) => pr,
        Err(e) => {
            if e.scope() == crate::forge::Scope::Run {
                night.mark_github_down(&e.to_string());
            }
            let why = night.redact(&format!(
                "GitHub did not answer about PR #{n} before the push ({e}); nothing was pushed"
            ));
            return Some(r.end(Outcome::Error, why));
        }
    };
    let pushed = &t.sealed.contract.head;
    let reason = match pr.state {
        crate::forge::PrState::Merged => Some(LeftAlone::Merged),
        crate::forge::PrState::Closed => Some(LeftAlone::Closed),
        crate::forge::PrState::Open if pr.labels.iter().any(|l| l == cards::HANDS_OFF_LABEL) => {
            Some(LeftAlone::HandsOff)
        }
        crate::forge::PrState::Open if !pr.head_sha.eq_ignore_ascii_case(pushed) => {
            Some(LeftAlone::SomeonePushed {
                pushed: pushed.clone(),
                found: pr.head_sha.clone(),
            })
        }
        crate::forge::PrState::Open => None,
    }?;
    let why = format!("{reason} while nightshift worked on it; nothing was pushed");
    Some(r.end(Outcome::PrLeftAlone, why))
}

/// Pushes the branch with a lease on the head nightshift last pushed; the
/// item's end when the push is refused (someone pushed meanwhile: left
/// alone) or fails.
async fn push(r: &Round<'_>, t: &Tend<'_>) -> Option<ItemEnd> {
    let (night, slot, branch) = (r.item.night, r.item.slot, r.item.branch);
    if r.item.cancel.is_cancelled() {
        return Some(r.end(
            Outcome::Interrupted,
            "stopped by a signal before the push".into(),
        ));
    }
    let token = night.token.as_ref().map(|t| t.expose().to_string());
    let lease = &t.sealed.contract.head;
    let pushed = night
        .until_signal(r.item.cancel, |stop| {
            slot.push_with_lease(token.as_deref(), lease, Some(stop))
        })
        .await;
    let e = pushed.err()?;
    if r.item.cancel.is_cancelled() {
        let why = format!("stopped by a signal during the push of {branch}; nothing was pushed");
        return Some(r.end(Outcome::Interrupted, why));
    }
    let text = night.redact(&e.to_string());
    if text.contains("stale info") || text.contains("rejected") {
        let why = format!(
            "someone else pushed to {branch} while nightshift worked on it (the lease on {} was refused); nothing was pushed",
            &lease[..12.min(lease.len())]
        );
        return Some(r.end(Outcome::PrLeftAlone, why));
    }
    Some(r.end(
        Outcome::PushFailed,
        format!("push of {branch} failed: {text}"),
    ))
}

/// After the push: the body's evidence card rewritten (`PATCH`, body only)
/// and the one comment answering each request. What failed is returned as
/// notes for the reason: the branch is pushed either way.
async fn answer(
    r: &Round<'_>,
    t: &Tend<'_>,
    a: &Approved,
    body: &str,
    new_head: &str,
) -> Vec<String> {
    let (night, slot) = (r.item.night, r.item.slot);
    let Some(forge) = &night.forge else {
        return vec!["no GitHub access to update the PR".into()];
    };
    let n = t.card.number;
    let mut notes = Vec::new();
    if let Err(e) = forge.update_pr_body(n, body, &t.card.item_key).await {
        notes.push(night.redact(&format!("the PR body was not updated: {e}")));
    }
    let changed = tokio::task::block_in_place(|| slot.changed_files(&t.work_from, new_head))
        .unwrap_or_default();
    let gate: Vec<(String, Option<i32>)> = a
        .reviewed
        .gated
        .gates
        .iter()
        .map(|g| (g.command.clone(), g.exit_code))
        .collect();
    let text = cards::answer_comment(&cards::Answer {
        requests: t.card.verdict.comments(),
        rebased: t.moved.then(|| t.resolved.as_deref().unwrap_or(&[])),
        base: &night.config.base,
        changed: &changed,
        gate: &gate,
        verdict: a.verdict.verdict.as_str(),
        old_head: &t.sealed.contract.head,
        new_head,
    });
    let posted = match forge.own_login().await {
        Ok(me) => forge.post_comment(n, &me, &text).await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = posted {
        notes.push(night.redact(&format!("the answering comment was not posted: {e}")));
    }
    notes
}

/// The end of a tend that pushed: `pr_updated`, with what was done.
fn updated(
    r: &Round<'_>,
    t: &Tend<'_>,
    body: String,
    new_head: &str,
    notes: Vec<String>,
) -> ItemEnd {
    let (item, night) = (r.item, r.item.night);
    let base = &night.config.base;
    let how = match t.resolved.as_deref() {
        None if !t.moved => format!("already on {base}"),
        None => format!("rebased onto {base}"),
        Some([]) => format!("brought onto {base} as one change"),
        Some(files) => format!(
            "brought onto {base}; the writer resolved {}",
            files.join(", ")
        ),
    };
    let asked = t.card.verdict.comments().len();
    let mut why = format!(
        "pushed {} → {}: {how}",
        &t.sealed.contract.head[..12.min(t.sealed.contract.head.len())],
        &new_head[..12.min(new_head.len())]
    );
    if asked > 0 {
        why.push_str(&format!("; {asked} request(s) answered"));
    }
    for n in notes {
        why.push_str("; ");
        why.push_str(&n);
    }
    let totals = &r.st.totals;
    ItemEnd {
        reason: Some(why),
        branch: Some(item.branch.to_string()),
        pr_number: Some(t.card.number),
        pr_url: t.url.clone(),
        pr_body: Some(body),
        rounds: r.n,
        tokens: totals.tokens,
        cost_usd: totals.cost_known.then_some(totals.cost),
        ..ItemEnd::of(Outcome::PrUpdated)
    }
}
