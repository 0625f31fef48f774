//! One round of an item's loop as a state machine (docs/loop.md#rounds):
//! writer → proof → gate → review → decide, each step a function that takes
//! the round ([`Round`]) and returns the next [`Step`]; the round ends in a
//! [`RoundEnd`] — a retry (with feedback for the writer), an approved change
//! or the item's end — which the driver ([`super::attempt`]) acts on. Every
//! step records what it saw in the ledger before it returns. It does not
//! start or end the item, call agents itself ([`super::agent_call`]), ship
//! or push.

use std::time::{Duration, Instant};

use crate::agent::{self, Role};
use crate::error::Error;
use crate::gate::{self, GateRun};
use crate::ledger::items::ItemEnd;
use crate::outcome::{Outcome, Phase, RoundResult};
use crate::proof::{Proof, RoundStart};
use crate::report::RoundSummary;
use crate::review::{self, Decision, Verdict};
use crate::snapshot::Snapshot;

use super::agent_call::{Called, call_agent};
use super::decide::{Fact, RoundFailure};
use super::item::Round;
use super::{MAX_FILE_BYTES, NO_PROGRESS_ROUNDS, checks};

/// Where a round goes next; each variant carries what the steps before it
/// produced.
pub(super) enum Step {
    /// The writer works (the first step).
    Writer,
    /// The writer answered: read its proof of work from git.
    Proof(Box<Wrote>),
    /// The proof holds: run the gate.
    Gate(Box<Proved>),
    /// The gate passed: the reviewer reads the change.
    Review(Box<Gated>),
    /// The reviewer answered: approve, retry or end.
    Decide(Box<Reviewed>),
    /// The round is over: how it went, for the driver.
    Done(RoundEnd),
}

/// How a round went, for the driver ([`super::attempt`]) to decide what
/// comes next; a round never ships.
pub(super) enum RoundEnd {
    /// The next round, with this feedback for the writer.
    Retry(String),
    /// The reviewer approved the change: the driver delivers it.
    Approved(Box<Approved>),
    /// The item ends.
    End(ItemEnd),
}

impl Step {
    /// The item ends with `end`.
    fn end(end: ItemEnd) -> Step {
        Step::Done(RoundEnd::End(end))
    }
}

/// The writer's answer and the checkout as it was before.
pub(super) struct Wrote {
    report: agent::Report,
    before: RoundStart,
}

/// The writer's answer, its proof of work, the tree it was read from and
/// the checkout's walk before the gate.
pub(super) struct Proved {
    writer: agent::Report,
    proof: Proof,
    /// The tree of the writer's work (40 hex, [`crate::slot::Slot::snapshot_tree`]).
    tree: String,
    /// The checkout after the writer: what the gate changes is measured
    /// from it.
    walked: Snapshot,
    /// inotify's watch of the checkout since that walk, to bring it up to
    /// date after the gate without walking again (`None`: walk).
    follow: Option<crate::snapshot::Follow>,
}

/// What passed the gate: the proof and the writer's tree the gate ran on.
pub(super) struct Gated {
    pub writer: agent::Report,
    pub proof: Proof,
    /// The tree of the writer's work (the gate's leftovers are not in it).
    pub tree: String,
    pub gates: Vec<GateRun>,
    /// The checkout as the reviewer gets it (after the gate, restored
    /// where the gate touched the work): the read-only check's "before".
    pub before_review: Snapshot,
}

/// A gated change and the reviewer's answer.
pub(super) struct Reviewed {
    pub gated: Gated,
    pub reviewer: agent::Report,
}

/// A change the reviewer approved, with its verdict held to the contract.
pub(super) struct Approved {
    pub reviewed: Reviewed,
    pub verdict: Verdict,
}

/// A round that failed in a way the next round may fix
/// (docs/loop.md#ship-or-retry).
struct Failed {
    /// How the round failed.
    failure: RoundFailure,
    /// The item's reason if no later round does better.
    why: String,
    /// The round's one line in the PR body.
    note: String,
    gate: Vec<GateRun>,
    verdict: Option<Verdict>,
    /// The failure's signature and the diff, for the no-progress rule.
    sig: String,
    diff_hash: String,
    /// The item's reason when this makes no progress.
    stuck: String,
    /// What the writer is told in the next round.
    feedback: String,
}

/// Runs round `r` from the writer, or, when `work` says what nightshift
/// itself did instead of a writer call (a tended PR's branch rebased
/// cleanly onto its base, docs/github.md "The second night"), from the
/// proof of the checkout as it is now; either way on through gate, review
/// and decide. Returns how the round went; it does not ship.
///
/// # Errors
/// The ledger stays away (see [`super::Night::db`]).
pub(super) async fn run(r: &mut Round<'_>, work: Option<agent::Report>) -> Result<RoundEnd, Error> {
    let n = r.n;
    let mut step = match work {
        None => Step::Writer,
        Some(report) => match tokio::task::block_in_place(|| RoundStart::record(r.item.slot)) {
            Ok(before) => Step::Proof(Box::new(Wrote { report, before })),
            Err(e) => {
                let why = format!("cannot read the checkout before round {n}: {e}");
                Step::end(r.end(Fact::Fault(why)))
            }
        },
    };
    loop {
        step = match step {
            Step::Writer => writer(r).await?,
            Step::Proof(w) => proof(r, *w).await?,
            Step::Gate(p) => gate(r, *p).await?,
            Step::Review(g) => review(r, *g).await?,
            Step::Decide(v) => decide(r, *v).await?,
            Step::Done(end) => return Ok(end),
        }
    }
}

impl Round<'_> {
    /// Records the round as ended with `outcome`.
    async fn close(
        &self,
        outcome: Outcome,
        diff: Option<&str>,
        sig: Option<&str>,
        note: Option<&str>,
    ) -> Result<(), Error> {
        let result = RoundResult::Ended(outcome);
        self.item
            .record
            .finish_round(self.id, result, diff, sig, note)
            .await
    }

    /// Records the round as ended for `fact`, its reason as the round's
    /// note, and ends the item.
    async fn close_and_end(&self, fact: Fact, diff: Option<&str>) -> Result<Step, Error> {
        let end = self.end(fact);
        self.close(end.outcome, diff, None, end.facts.reason.as_deref())
            .await?;
        Ok(Step::end(end))
    }

    /// A failed round: its summary, then the next round, unless the last
    /// [`NO_PROGRESS_ROUNDS`] rounds had the same diff and the same failure
    /// (docs/loop.md#no-progress).
    fn retry(&mut self, f: Failed) -> Step {
        // The stop names the failure it repeats (docs/loop.md#no-progress).
        let stuck = format!("{}: {}", f.stuck, f.why);
        self.st.last_failure = (Some(f.failure), f.why);
        self.st.rounds.push(RoundSummary {
            n: self.n,
            seconds: self.started.elapsed().as_secs(),
            result: RoundResult::Ended(f.failure.outcome()),
            note: f.note,
            gate: f.gate,
            verdict: f.verdict,
            agents: self.st.cast.describe(self.item.night),
        });
        if checks::no_progress(&mut self.st.history, &f.diff_hash, &f.sig) {
            return Step::end(self.end(Fact::NoProgress(stuck)));
        }
        Step::Done(RoundEnd::Retry(f.feedback))
    }
}

/// The writer's call (docs/loop.md#writer), with what it may not reach
/// watched around it; its findings are kept, its question ends the item.
async fn writer(r: &mut Round<'_>) -> Result<Step, Error> {
    let (item, n) = (r.item, r.n);
    let (night, slot) = (item.night, item.slot);
    r.phase(Phase::Writer).await?;
    // The gate's restore and git's checkout leave files owned by the
    // runner; hand the checkout back to the agent before it writes.
    if n > 1
        && let Some(why) = checks::grant_checkout(night, slot).await
    {
        return Ok(Step::end(r.st.end(Fact::Fault(why), n - 1)));
    }
    let before = match tokio::task::block_in_place(|| RoundStart::record(slot)) {
        Ok(b) => b,
        Err(e) => {
            let why = format!("cannot read the checkout before round {n}: {e}");
            return Ok(Step::end(r.end(Fact::Fault(why))));
        }
    };
    // What the writer could reach besides its checkout: the remote, and
    // the user's repository (its path is in the slot's alternates).
    let token = item.token.as_deref();
    let remote_before = tokio::task::block_in_place(|| slot.remote_refs(token))
        .map_err(|e| tracing::warn!("cannot list the remote's refs before the writer: {e}"))
        .ok();
    let user_git_before = tokio::task::block_in_place(|| night.repo_watch.state());
    let report = match call_agent(r, Role::Writer).await? {
        Called::Done(report) => *report,
        Called::Stop(end) => return Ok(Step::end(end)),
    };
    let reach = (remote_before.as_ref(), &user_git_before);
    if let Some(why) = checks::outside_reach(night, Role::Writer, slot, reach.0, reach.1, token) {
        return r.close_and_end(Fact::RuleBroken(why), None).await;
    }
    let others = item.record.run_spent(Some(item.item_id)).await?;
    if let Some(why) = checks::over_run_budget(night, others, &r.st.totals) {
        return r.close_and_end(Fact::OverBudget(why), None).await;
    }
    let blocks = agent::parse_blocks(&report.text);
    for f in blocks.findings.iter() {
        if !r.st.findings.contains(f) {
            r.st.findings.push(f.clone());
        }
    }
    if let Some(q) = &blocks.question {
        let end = r.end(Fact::Question).with(|f| f.question = Some(q.clone()));
        r.close(end.outcome, None, None, None).await?;
        return Ok(Step::end(end));
    }
    Ok(Step::Proof(Box::new(Wrote { report, before })))
}

/// The proof of work, from git (docs/loop.md#proof): what changed, within
/// the contract's scope and the rules; a writer that failed is retried.
/// The checkout is walked once (by metadata) and written once as a tree;
/// the proof, the gate's snapshot and the commit all come from that tree.
async fn proof(r: &mut Round<'_>, w: Wrote) -> Result<Step, Error> {
    let (item, slot) = (r.item, r.item.slot);
    r.phase(Phase::Proof).await?;
    let path = &slot.path;
    let (walked, follow) = match tokio::task::block_in_place(|| Snapshot::take_following(path)) {
        Ok(s) => s,
        Err(e) => {
            let why = format!("cannot walk the checkout after the writer: {e}");
            return Ok(Step::end(r.end(Fact::Fault(why))));
        }
    };
    if walked.has_file_of_at_least(MAX_FILE_BYTES)
        && let Some(step) = too_large(r).await?
    {
        return Ok(step);
    }
    let scope = &item.entry.contract.scope;
    let collected = tokio::task::block_in_place(|| {
        let tree = slot
            .snapshot_tree_from(&walked)
            .map_err(|e| e.to_string())?;
        let claimed = &w.report.claimed_files;
        Proof::collect_tree(&slot.path, &w.before, &tree, claimed, scope)
            .map(|p| (tree, p))
            .map_err(|e| e.to_string())
    });
    let (tree, proof) = match collected {
        Ok(p) => p,
        // No .git left to read: the writer removed or replaced it.
        Err(_) if !slot.path.join(".git").join("HEAD").is_file() => {
            let note = Some("the writer removed the checkout's .git");
            let why = "the writer removed or replaced the checkout's .git directory";
            let end = r.end(Fact::RuleBroken(why.into()));
            r.close(end.outcome, None, None, note).await?;
            return Ok(Step::end(end));
        }
        Err(e) => {
            // A full disk stops the run (resumed once there is room), it
            // is not the item's fault.
            if let Some(full) = crate::file::disk_full(&e.to_string(), &slot.path) {
                item.night.stop_systemic(&full);
                return Ok(Step::end(r.end(Fact::Fault(full))));
            }
            let why = format!("cannot read the proof of work from git: {e}");
            return Ok(Step::end(r.end(Fact::Fault(why))));
        }
    };
    item.record.proof(r.id, &proof).await?;
    if let Some(step) = proof_broken(r, &proof).await? {
        return Ok(step);
    }
    // A writer that crashed (a signal, an OOM kill, a nonzero exit, an
    // error result) may have left half-done work: never gate, review or
    // push it as if it were finished. Its changes stay for the next round.
    if let Some(f) = &w.report.failure {
        return writer_failed(r, &proof, f).await;
    }
    if proof.is_empty() {
        return no_changes(r, &proof, &w.report).await;
    }
    let writer = w.report;
    Ok(Step::Gate(Box::new(Proved {
        writer,
        proof,
        tree,
        walked,
        follow,
    })))
}

/// The rules the proof breaks (scope, git, a nested repository, the
/// change's size and protected paths, docs/loop.md#proof): the item's end
/// when it breaks any.
async fn proof_broken(r: &Round<'_>, proof: &Proof) -> Result<Option<Step>, Error> {
    let (item, slot) = (r.item, r.item.slot);
    // A git repository the writer made inside the checkout would be
    // committed as a dangling submodule link.
    let nested = proof.changed.iter().find(|f| slot.path.join(&f.path).join(".git").exists()).map(|f| format!("the writer created a nested git repository at {} (it would be committed as a broken submodule link)", f.path));
    let beyond = match proof.beyond_limits(&item.entry.contract.change_limits()) {
        Ok(b) => b,
        Err(e) => {
            let why = format!("cannot hold the change to its limits: {e}");
            return Ok(Some(Step::end(r.end(Fact::Fault(why)))));
        }
    };
    let broken: Vec<String> = [proof.rule_broken(), nested, beyond]
        .into_iter()
        .flatten()
        .collect();
    if broken.is_empty() {
        return Ok(None);
    }
    let why = broken.join("; ");
    let end = r
        .close_and_end(Fact::RuleBroken(why), Some(&proof.diff_hash))
        .await?;
    Ok(Some(end))
}

/// GitHub refuses any file of 100 MiB or more: the item ends now, with the
/// reason, before a minute of diffing it and a gate and review that cannot
/// lead to a push. Asked only when the walk saw a file that large, which
/// may still be ignored or unchanged.
async fn too_large(r: &Round<'_>) -> Result<Option<Step>, Error> {
    let path = &r.item.slot.path;
    let Ok(big) =
        tokio::task::block_in_place(|| crate::proof::files_of_at_least(path, MAX_FILE_BYTES))
    else {
        return Ok(None);
    };
    let Some((path, size)) = big.first() else {
        return Ok(None);
    };
    let note = Some("a file too large for GitHub");
    let why = format!(
        "{path} is {} MiB; GitHub refuses files of 100 MiB or more (the writer should not produce it)",
        size >> 20
    );
    let end = r.end(Fact::FileTooLarge(why));
    r.close(end.outcome, None, None, note).await?;
    Ok(Some(Step::end(end)))
}

/// A writer call that failed: the next round finishes its work.
async fn writer_failed(r: &mut Round<'_>, proof: &Proof, f: &str) -> Result<Step, Error> {
    let diff = Some(proof.diff_hash.as_str());
    let failure = RoundFailure::WriterFailed;
    r.close(failure.outcome(), diff, Some("writer_failed"), Some(f))
        .await?;
    let feedback = if proof.is_empty() {
        format!("Your previous attempt failed: {f}\n")
    } else {
        format!(
            "Your previous attempt failed before it finished: {f}\nIts changes are still in the checkout; check them and finish the work.\n"
        )
    };
    Ok(r.retry(Failed {
        failure,
        why: format!("the writer failed: {f}"),
        note: f.to_string(),
        gate: vec![],
        verdict: None,
        sig: "writer_failed".into(),
        diff_hash: proof.diff_hash.clone(),
        stuck: format!(
            "{NO_PROGRESS_ROUNDS} rounds in a row with the same diff and the same failure"
        ),
        feedback,
    }))
}

/// A writer that changed nothing ends the item, saying why when the agent's
/// own channels said (a denied write, a failed edit).
async fn no_changes(r: &Round<'_>, proof: &Proof, writer: &agent::Report) -> Result<Step, Error> {
    let diff = Some(proof.diff_hash.as_str());
    let why = if writer.notes.is_empty() {
        "the writer changed nothing".to_string()
    } else {
        r.item.night.redact(&format!(
            "the writer changed nothing; its CLI reported: {}",
            writer.notes.join("; ")
        ))
    };
    let end = r.end(Fact::NoChanges(why));
    r.close(end.outcome, diff, None, None).await?;
    Ok(Step::end(end))
}

/// The gate (docs/loop.md#gate), run by nightshift on a snapshot of the
/// writer's work; what it leaves behind is not the writer's work.
async fn gate(r: &mut Round<'_>, p: Proved) -> Result<Step, Error> {
    let (item, slot, n) = (r.item, r.item.slot, r.n);
    r.phase(Phase::Gate).await?;
    let c = &item.entry.contract;
    let left = r.st.deadline.saturating_duration_since(Instant::now());
    let timeout = c
        .limits
        .gate_timeout()
        .min(left.max(Duration::from_secs(1)));
    let spec = item.gate_spec(timeout, item.dir.join(format!("round-{n:02}-gate")));
    let gates = match gate::run_all("gate", &c.verify, &spec, item.cancel).await {
        Ok(g) => g,
        Err(e) => {
            let why = format!("the gate could not run: {e}");
            return Ok(Step::end(r.end(Fact::Fault(why))));
        }
    };
    let restored = tokio::task::block_in_place(|| after_gate(slot, &p.walked, p.follow, &p.tree));
    for g in &gates {
        item.record.gate_run(r.id, g).await?;
        (item.record)
            .sandbox_refused(item.item_id, "gate", &g.refused)
            .await?;
    }
    let before_review = match restored {
        Ok(s) => s,
        Err(e) => {
            let why = format!("cannot restore the checkout after the gate: {e}");
            return Ok(Step::end(r.end(Fact::Fault(why))));
        }
    };
    if item.cancel.is_cancelled() {
        let why = format!("stopped by a signal during the gate of round {n}");
        return Ok(Step::end(r.end(Fact::Signal(why))));
    }
    if let Some(bad) = gates.iter().find(|g| !g.passed()) {
        return gate_failed(r, &p.proof, &gates, bad).await;
    }
    let (writer, proof, tree) = (p.writer, p.proof, p.tree);
    Ok(Step::Review(Box::new(Gated {
        writer,
        proof,
        tree,
        gates,
        before_review,
    })))
}

/// Puts the checkout back to the writer's `tree` when the gate touched
/// the work — a file git would commit, HEAD or a branch — and returns the
/// checkout's walk as the reviewer gets it. What the gate changed is read
/// from `walked` (before it) and the checkout now: `walked` brought up to
/// date from inotify's events (`follow`), else a second walk. Build output
/// in ignored paths stays, as [`crate::slot::Slot::restore_tree`] would
/// leave it.
///
/// # Errors
/// The checkout cannot be walked, or git cannot tell ignored paths or
/// restore the tree.
fn after_gate(
    slot: &crate::slot::Slot,
    walked: &Snapshot,
    follow: Option<crate::snapshot::Follow>,
    tree: &str,
) -> Result<Snapshot, String> {
    let walk = || Snapshot::take(&slot.path).map_err(|e| format!("cannot walk the checkout: {e}"));
    let restore = || {
        slot.restore_tree(tree).map_err(|e| e.to_string())?;
        walk()
    };
    // What inotify cannot see (a write through a memory mapping) leaves the
    // refreshed walk behind the checkout: the review's full walk after the
    // reviewer then shows it as a change, and the review is void rather
    // than blind (docs/security.md).
    let now = match follow.and_then(|f| f.refresh(walked)) {
        Some(now) => now,
        None => walk()?,
    };
    let mut work = Vec::new();
    for c in now.diff(walked) {
        match c.path.strip_prefix(b".git/") {
            // HEAD moved or a branch changed: put the item's branch back.
            Some(rest)
                if rest == b"HEAD" || rest == b"packed-refs" || rest.starts_with(b"refs/") =>
            {
                return restore();
            }
            // Objects, logs, the index's stat cache: not the work.
            Some(_) => {}
            // A directory's files are compared on their own.
            None if c.dir || c.path.is_empty() || c.path == b".git" => {}
            None => work.push(c.path),
        }
    }
    if work.is_empty() || slot.ignored(&work).map_err(|e| e.to_string())?.len() == work.len() {
        return Ok(now);
    }
    restore()
}

/// A failed gate: the writer gets its output in the next round.
async fn gate_failed(
    r: &mut Round<'_>,
    proof: &Proof,
    gates: &[GateRun],
    bad: &GateRun,
) -> Result<Step, Error> {
    let sig = bad.signature();
    let feedback = gate::feedback(gates);
    let diff = Some(proof.diff_hash.as_str());
    let failure = RoundFailure::TestsFailed;
    r.close(failure.outcome(), diff, Some(&sig), Some(&feedback))
        .await?;
    let said = checks::last_line(&bad.output_tail);
    Ok(r.retry(Failed {
        failure,
        why: crate::report::gate_failure(&bad.command, bad.exit_code, &said, r.n),
        // The round's note is the telling line of the output (the
        // signature, command and exit code, is already in its gate list).
        note: said.clone(),
        gate: gates.to_vec(),
        verdict: None,
        stuck: format!(
            "{NO_PROGRESS_ROUNDS} rounds in a row with the same diff and the same failure"
        ),
        sig,
        diff_hash: proof.diff_hash.clone(),
        feedback,
    }))
}

/// The review (docs/loop.md#review): read-only, verified — a reviewer that
/// changed the checkout or reached outside it is void.
async fn review(r: &mut Round<'_>, g: Gated) -> Result<Step, Error> {
    let (item, night, slot) = (r.item, r.item.night, r.item.slot);
    r.phase(Phase::Review).await?;
    let token = item.token.as_deref();
    let remote_before = tokio::task::block_in_place(|| slot.remote_refs(token)).ok();
    let user_git_before = tokio::task::block_in_place(|| night.repo_watch.state());
    let reviewer = match call_agent(r, Role::Reviewer).await? {
        Called::Done(report) => *report,
        Called::Stop(end) => return Ok(Step::end(end)),
    };
    let diff = Some(g.proof.diff_hash.as_str());
    let reach = (remote_before.as_ref(), &user_git_before);
    if let Some(why) = checks::outside_reach(night, Role::Reviewer, slot, reach.0, reach.1, token) {
        return void(r, diff, why).await;
    }
    let others = item.record.run_spent(Some(item.item_id)).await?;
    if let Some(why) = checks::over_run_budget(night, others, &r.st.totals) {
        return r.close_and_end(Fact::OverBudget(why), diff).await;
    }
    let walked = tokio::task::block_in_place(|| Snapshot::take_following(&slot.path));
    let (fp_after, follow) = match walked {
        Ok(w) => w,
        Err(e) => {
            let why = format!("cannot walk the checkout after the review: {e}");
            return Ok(Step::end(r.end(Fact::Fault(why))));
        }
    };
    let kind = r.st.cast.agent(night, Role::Reviewer).kind;
    let fp_before = &g.before_review;
    let void_reason = agent::review_void_reason(kind, &reviewer, fp_before, &fp_after);
    // The next item's reset starts from this walk, kept up to date by its
    // watch whatever happens to the checkout until then.
    let kept = follow.and_then(|f| crate::slot::KeptWalk::new(slot, fp_after, f));
    if let Some(k) = kept {
        night.keep_walk(slot.path.clone(), k);
    }
    if let Some(why) = void_reason {
        return void(r, diff, why).await;
    }
    Ok(Step::Decide(Box::new(Reviewed { gated: g, reviewer })))
}

/// A void review ends the item.
async fn void(r: &Round<'_>, diff: Option<&str>, why: String) -> Result<Step, Error> {
    r.item.record.review(r.id, None, Some(&why)).await?;
    r.close_and_end(Fact::ReviewVoid(why), diff).await
}

/// The decision (docs/loop.md#ship-or-retry): an approval held to the
/// contract's conditions ships; requested changes, a failed reviewer or no
/// verdict retry.
async fn decide(r: &mut Round<'_>, v: Reviewed) -> Result<Step, Error> {
    // A verdict from a reviewer that then failed (nonzero exit, error
    // result) is not trusted: the round is retried like any failure.
    let verdict = match (&v.reviewer.verdict, &v.reviewer.failure) {
        (Some(verdict), None) => {
            review::hold_to_conditions(verdict.clone(), &r.item.entry.contract.accept)
        }
        (_, failure) => return no_verdict(r, &v, failure.as_deref()).await,
    };
    r.item.record.review(r.id, Some(&verdict), None).await?;
    if verdict.verdict == Decision::RequestChanges {
        return rejected(r, &v.gated, verdict).await;
    }
    let diff = Some(v.gated.proof.diff_hash.as_str());
    let approved = RoundResult::Approved;
    r.item
        .record
        .finish_round(r.id, approved, diff, None, None)
        .await?;
    r.st.rounds.push(RoundSummary {
        n: r.n,
        seconds: r.started.elapsed().as_secs(),
        result: RoundResult::Approved,
        note: String::new(),
        gate: v.gated.gates.clone(),
        verdict: Some(verdict.clone()),
        agents: r.st.cast.describe(r.item.night),
    });
    Ok(Step::Done(RoundEnd::Approved(Box::new(Approved {
        reviewed: v,
        verdict,
    }))))
}

/// A reviewer that failed or gave no verdict: the round is retried.
async fn no_verdict(r: &mut Round<'_>, v: &Reviewed, failure: Option<&str>) -> Result<Step, Error> {
    let (sig, why) = match failure {
        Some(f) => ("reviewer_failed", format!("the reviewer failed: {f}")),
        None => ("no_verdict", review::no_verdict_reason(&v.reviewer.text)),
    };
    let diff = Some(v.gated.proof.diff_hash.as_str());
    let failure = RoundFailure::NoVerdict;
    r.close(failure.outcome(), diff, Some(sig), Some(&why))
        .await?;
    Ok(r.retry(Failed {
        failure,
        why: why.clone(),
        note: why,
        gate: v.gated.gates.clone(),
        verdict: None,
        sig: sig.into(),
        diff_hash: v.gated.proof.diff_hash.clone(),
        stuck: format!(
            "{NO_PROGRESS_ROUNDS} rounds in a row with the same diff and the same failure"
        ),
        feedback: r.st.feedback.clone(),
    }))
}

/// The reviewer requested changes: the writer gets its findings.
async fn rejected(r: &mut Round<'_>, g: &Gated, verdict: Verdict) -> Result<Step, Error> {
    // The same set of findings (docs/loop.md#no-progress): order and
    // repeats do not count.
    let mut sorted: Vec<&str> = verdict.findings.iter().map(|f| f.trim()).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let sig = format!(
        "review:{}",
        crate::contract::sha256_hex(sorted.join("\n").as_bytes())
    );
    let listed: Vec<String> = verdict.findings.iter().map(|f| format!("- {f}")).collect();
    let feedback = format!("The reviewer requested changes:\n{}\n", listed.join("\n"));
    let diff = Some(g.proof.diff_hash.as_str());
    let failure = RoundFailure::ReviewRejected;
    r.close(failure.outcome(), diff, Some(&sig), Some(&feedback))
        .await?;
    let joined = verdict.findings.join("; ");
    Ok(r.retry(Failed {
        failure,
        why: format!("the reviewer requested changes in round {}: {joined}", r.n),
        note: joined,
        gate: g.gates.clone(),
        verdict: Some(verdict),
        sig,
        diff_hash: g.proof.diff_hash.clone(),
        stuck: format!(
            "{NO_PROGRESS_ROUNDS} rounds in a row with the same diff and the same findings"
        ),
        feedback,
    }))
}
