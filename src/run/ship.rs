//! Shipping an approved change (docs/loop.md#ship-or-retry,
//! docs/github.md#pull-requests): the secret check, the PR body, the commit,
//! the push and one PR; and the PR an earlier run made or left to make
//! (`already_open`, `already_merged`, a `pr_failed` branch opened now). It
//! does not decide whether a change ships (the round does) nor talk to
//! GitHub's API itself ([`crate::forge`]).

use std::time::Duration;

use serde_json::json;

use crate::agent;
use crate::contract::PlanEntry;
use crate::error::Error;
use crate::forge::PrState;
use crate::ledger::items::ItemEnd;
use crate::ledger::prs;
use crate::ledger::prs::PrRow;
use crate::outcome::{Event, Outcome, Phase, PrRecord};
use crate::report::{self, Evidence};
use crate::slot::{self, Slot};

use super::Night;
use super::decide::{self, Fact};
use super::item::Round;
use super::record::Record;
use super::round::Approved;

/// The runner is the committer of every item commit (docs/loop.md#ship-or-retry).
pub(super) fn runner_identity() -> slot::Identity {
    slot::Identity {
        name: "nightshift".into(),
        email: "nightshift@localhost".into(),
    }
}

/// Where a PR row is written: the item, its run and its branch.
#[derive(Clone, Copy)]
struct PrAt<'a> {
    night: &'a Night,
    /// The attempt's ledger handle.
    record: &'a Record<'a>,
    entry: &'a PlanEntry,
    branch: &'a str,
}

impl PrAt<'_> {
    /// Records the branch's PR row as `state`, with its number and URL once
    /// GitHub made it.
    async fn record(
        &self,
        pr: Option<(u64, &str)>,
        state: PrRecord,
        body: &str,
    ) -> Result<(), Error> {
        let row = prs::PrUpsert {
            repo: &self.night.repo_id,
            key: &self.entry.item.key,
            contract_sha: &self.entry.contract_sha,
            run: self.record.run_id(),
            branch: self.branch,
            number: pr.map(|p| p.0),
            url: pr.map(|p| p.1),
            state,
            body,
        };
        self.record.upsert_pr(&row).await
    }
}

/// Ships the approved change of round `r`: checks it for secrets, writes
/// the PR body, commits, pushes and opens the PR. Returns the item's end.
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn ship(r: &mut Round<'_>, a: Approved) -> Result<ItemEnd, Error> {
    let (item, night, n) = (r.item, r.item.night, r.n);
    let (entry, branch, key) = (item.entry, item.branch, item.entry.item.key.as_str());
    if let Some(why) = secret_in_change(r, &a.reviewed.gated.tree) {
        return Ok(why);
    }
    // Items of this night, on any worker or host, that changed the same
    // files are named in the body (merge order).
    let pushed = item.record.pushed_in_run().await?;
    let body = night.redact(&report::pr_body(&evidence(r, &a, &pushed)));
    r.phase(Phase::Push).await?;
    if let Some(end) = commit(r, &a.reviewed.gated.tree) {
        return Ok(end);
    }
    if item.cancel.is_cancelled() {
        let why = "stopped by a signal before the push".to_string();
        return Ok(r.end(Fact::Signal(why)));
    }
    // Nothing is pushed for a claim another worker took over.
    item.record.hold().await?;
    let token = night.git_token();
    if let Err(e) = push_or_stop(night, item, token.as_deref()).await {
        if item.cancel.is_cancelled() {
            let why =
                format!("stopped by a signal during the push of {branch}; nothing was pushed");
            return Ok(r.end(Fact::Signal(why)));
        }
        let why = night.redact(&format!("push of {branch} failed: {e}"));
        return Ok(r.end(Fact::PushFailed(why)));
    }
    let at = PrAt {
        night,
        record: &item.record,
        entry,
        branch,
    };
    let state = if night.forge.is_some() {
        PrRecord::PrFailed
    } else {
        PrRecord::Planned
    };
    at.record(None, state, &body).await?;
    // The head nightshift pushed: the next night tells a person's push
    // from its own by it (docs/github.md "The second night").
    let head = tokio::task::block_in_place(|| item.slot.head()).ok();
    if let Some(head) = &head {
        item.record.pr_head(key, branch, head).await?;
    }
    let files: Vec<&str> = (a.reviewed.gated.proof.changed.iter())
        .map(|f| f.path.as_str())
        .collect();
    let title = &entry.contract.title;
    let what = json!({"key": key, "branch": branch, "title": title, "files": files});
    item.record.event(Event::Pushed, what).await?;
    let mut end = open_pr(at, &body, item.cancel).await?;
    // The PR's own CI is watched from now on, by the run's watcher, not by
    // this worker (docs/github.md#ci).
    if let (Some(number), Some(head), Outcome::PrOpened) = (end.facts.pr_number, &head, end.outcome)
    {
        let run = item.record.run_id();
        let wait = entry.contract.limits.ci_wait();
        let base = item.slot.base_commit.clone();
        let watch = super::ci::Watched {
            key,
            pr_number: number,
            head,
            base: &base,
        };
        super::ci::open(night, run, &watch, wait).await?;
    }
    let totals = &r.st.totals;
    end.facts.rounds = n;
    end.facts.tokens = totals.tokens;
    end.facts.cost_usd = totals.cost_known.then_some(totals.cost);
    Ok(end)
}

/// A secret's value in the change would be pushed in clear (the PR body
/// only masks it): the item ends without a push. Read from the blobs, not
/// the diff text, which shows no content of a binary file.
pub(super) fn secret_in_change(r: &Round<'_>, tree: &str) -> Option<ItemEnd> {
    let (night, slot) = (r.item.night, r.item.slot);
    let secrets = crate::secret::Redactor::with_known(&night.secrets);
    let found = tokio::task::block_in_place(|| {
        crate::proof::secret_in_change(&slot.path, &slot.base_commit, tree, &secrets)
    });
    match found {
        Ok(None) => None,
        Ok(Some(file)) => {
            let file = night.redact(&file);
            Some(r.end(Fact::RuleBroken(format!(
                "the change writes the value of a secret (the GitHub token, the ledger URL or one of `secrets`, maybe encoded) into {file} or its name; nothing was pushed"
            ))))
        }
        Err(e) => Some(r.end(Fact::Fault(format!(
            "cannot read the change to check it for secrets: {e}"
        )))),
    }
}

/// What the PR body shows (docs/github.md#pr-body).
pub(super) fn evidence(r: &Round<'_>, a: &Approved, pushed: &[report::Overlap]) -> Evidence {
    let (item, st) = (r.item, &r.st);
    let g = &a.reviewed.gated;
    let (slot, c) = (item.slot, &item.entry.contract);
    let diff = tokio::task::block_in_place(|| slot.diff_text(&slot.base_commit, &g.tree))
        .unwrap_or_default();
    let (writer, reviewer) = (&g.writer, &a.reviewed.reviewer);
    // Work inside a submodule is invisible to git here: say so.
    let submodules = tokio::task::block_in_place(|| slot.filled_submodule_dirs()).unwrap_or_default().into_iter().map(|p| format!("checkout: Files were written inside the submodule `{p}`; they are not part of this PR (submodules are not checked out or committed by nightshift)"));
    Evidence {
        contract: c.clone(),
        contract_sha: item.entry.contract_sha.clone(),
        run_id: item.run_id,
        branch: item.branch.to_string(),
        base_commit: slot.base_commit.clone(),
        setup: st.setup.clone(),
        changed: g.proof.changed.clone(),
        rounds: st.rounds.clone(),
        verdict: a.verdict.clone(),
        duration: st.started.elapsed(),
        tokens: st.totals.tokens,
        cost_usd: st.totals.cost_known.then_some(st.totals.cost),
        findings: st.findings.clone(),
        diff,
        writer_note: agent::strip_blocks(&writer.text),
        reviewer_note: agent::strip_blocks(&reviewer.text),
        agent_notes: writer
            .notes
            .iter()
            .map(|n| format!("writer: {n}"))
            .chain(reviewer.notes.iter().map(|n| format!("reviewer: {n}")))
            .chain(submodules)
            .collect(),
        overlaps: report::overlaps(pushed, &g.proof.changed),
    }
}

/// Ticks the item in the checkout when `tick_in_pr` is set, then commits
/// the change; the item's end when either fails.
fn commit(r: &Round<'_>, tree: &str) -> Option<ItemEnd> {
    let (item, night) = (r.item, r.item.night);
    let (c, key) = (&item.entry.contract, &item.entry.item.key);
    let message = format!(
        "nightshift: {}\n\nContract sha256 {}\nRun {}\n",
        c.title, item.entry.contract_sha, item.run_id
    );
    if night.config.tick_in_pr {
        // `tick_in_pr = true` (docs/backlog.md): the item PR carries its own tick.
        let ticked = crate::backlog::tick_in_checkout(&item.slot.path, &night.config.backlog, key);
        if let Err(e) = ticked {
            let fact = match e {
                crate::backlog::TickError::Unsafe(e) => {
                    Fact::RuleBroken(format!("tick_in_pr: {e}"))
                }
                crate::backlog::TickError::Io(e) => Fact::Fault(format!("tick_in_pr: {e}")),
            };
            return Some(r.end(fact));
        }
    }
    let me = runner_identity();
    // The tree the reviewer approved is committed as it is, unless the
    // backlog's tick was just written into the checkout.
    let committed = tokio::task::block_in_place(|| match night.config.tick_in_pr {
        true => item.slot.commit_all(&message, &me, &me),
        false => item.slot.commit_tree(tree, &message, &me, &me),
    });
    let e = committed.err()?;
    Some(r.end(Fact::Fault(format!("commit failed: {e}"))))
}

/// Pushes the item's branch; a signal kills the push (git, its hooks and
/// helpers) at once instead of waiting for it (docs/limits.md#signals).
async fn push_or_stop(
    night: &Night,
    item: &super::item::Item<'_>,
    token: Option<&str>,
) -> Result<(), slot::SlotError> {
    let slot: &Slot = item.slot;
    night
        .until_signal(item.cancel, |stop| slot.push_stoppable(token, Some(stop)))
        .await
}

/// The PR title: GitHub refuses titles over 256 characters (422 "title is
/// too long"), which would fail this PR on every run.
fn pr_title(entry: &PlanEntry) -> String {
    let full = format!("nightshift: {}", entry.item.title);
    if full.chars().count() > 256 {
        format!("{}…", full.chars().take(255).collect::<String>())
    } else {
        full
    }
}

/// Opens the PR of a pushed branch; without GitHub, records the PR that
/// would have been opened (docs/github.md#without-github).
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
async fn open_pr(
    at: PrAt<'_>,
    body: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<ItemEnd, Error> {
    let (night, entry, branch) = (at.night, at.entry, at.branch);
    let unopened = |fact: Fact| {
        decide::end(fact).with(|f| {
            f.branch = Some(branch.into());
            f.pr_body = Some(body.into());
        })
    };
    let Some(forge) = &night.forge else {
        let why = night
            .forge_missing
            .clone()
            .unwrap_or_else(|| "no GitHub access".into());
        return Ok(unopened(Fact::BranchPushed(why)));
    };
    if let Some(down) = night.github_down() {
        at.record(None, PrRecord::PrFailed, body).await?;
        return Ok(unopened(Fact::PrFailed(night.redact(&format!("branch {branch} pushed; GitHub was unreachable earlier in this run ({down}); the next run opens the PR")))));
    }
    // No PR for a claim another worker took over (the key marker on PRs
    // is the last guard, docs/workers.md#fencing).
    at.record.hold().await?;
    let req = crate::forge::PrRequest {
        title: pr_title(entry),
        head: branch.to_string(),
        base: night.config.base.clone(),
        body: body.to_string(),
        labels: vec![night.config.label.clone()],
        item_key: entry.item.key.clone(),
        draft: night.config.draft,
    };
    let created = tokio::select! {
        r = forge.create_pr(&req) => r,
        // A signal does not wait for a slow GitHub (docs/limits.md#signals).
        // The ledger keeps the branch as `pr_failed`: the next run finds the
        // PR if GitHub made it, or opens it.
        _ = cancel.cancelled() => {
            return Ok(unopened(Fact::Signal(format!("stopped by a signal while opening the PR of {branch} (pushed); the next run finds or opens it"))));
        }
    };
    match created {
        Ok(pr) => opened(&at, pr, body).await,
        Err(e) => {
            if e.scope() == crate::forge::Scope::Run {
                night.mark_github_down(&e.to_string());
            }
            at.record(None, PrRecord::PrFailed, body).await?;
            let why = night.redact(&format!(
                "branch {branch} pushed, PR not created: {e}; retried on the next run"
            ));
            Ok(unopened(Fact::PrFailed(why)))
        }
    }
}

/// Records a PR GitHub opened; one opened but not labelled (the label could
/// not be made or added) stands, and the report says why it lacks the label.
async fn opened(at: &PrAt<'_>, pr: crate::forge::PrInfo, body: &str) -> Result<ItemEnd, Error> {
    let night = at.night;
    at.record(Some((pr.number, &pr.url)), PrRecord::Open, body)
        .await?;
    let key = &at.entry.item.key;
    let what = json!({"key": key, "number": pr.number, "url": pr.url});
    at.record.event(Event::PrOpened, what).await?;
    let reason = pr.label_error.as_ref().map(|e| {
        night.redact(&format!(
            "PR opened without the label {:?}: {e}",
            night.config.label
        ))
    });
    Ok(decide::end(Fact::PrOpened(reason)).with(|f| {
        f.branch = Some(at.branch.into());
        f.pr_number = Some(pr.number);
        f.pr_url = Some(pr.url);
        f.pr_body = Some(body.into());
    }))
}

/// An earlier PR of this item (docs/loop.md#before-the-checkout):
/// `already_open`, `already_merged`, `branch_pushed` (pushed earlier without
/// GitHub access), or a `pr_failed` PR opened now.
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn earlier_pr(
    night: &Night,
    record: &Record<'_>,
    entry: &PlanEntry,
    branch: &str,
) -> Result<Option<ItemEnd>, Error> {
    let key = &entry.item.key;
    let rows = record.prs_of_item(key).await?;
    let at = PrAt {
        night,
        record,
        entry,
        branch,
    };
    if night.forge.is_none() || night.github_down().is_some() {
        return from_ledger(at, &rows).await;
    }
    if let Some(end) = on_github(&at, &rows).await? {
        return Ok(Some(end));
    }
    // Pushed earlier, PR never made (it failed, or that night had no
    // GitHub access): open it now (docs/github.md#retries), if the branch
    // is still there.
    if let Some(r) = rows.iter().find(|r| {
        r.state == PrRecord::PrFailed
            || (r.state == PrRecord::Planned && branch_on_the_remote(night, &r.branch))
    }) {
        // A PR opened now is a new one for the review queue too.
        if let Some(end) =
            super::review_queue::full(night, record, entry, Some(r.branch.as_str())).await?
        {
            return Ok(Some(end));
        }
        let body = record.pr_body(key, &r.branch).await?;
        let at = PrAt {
            branch: &r.branch,
            ..at
        };
        return Ok(Some(open_pr(at, &body, record.cancel()).await?));
    }
    Ok(None)
}

/// Looks the item's branches (this run's and the ledger's) up on GitHub:
/// an open or merged PR ends the item.
async fn on_github(at: &PrAt<'_>, rows: &[PrRow]) -> Result<Option<ItemEnd>, Error> {
    let night = at.night;
    let Some(forge) = &night.forge else {
        return Ok(None);
    };
    let key = &at.entry.item.key;
    let branches: Vec<String> = std::iter::once(at.branch.to_string())
        .chain(rows.iter().map(|r| r.branch.clone()))
        .collect();
    for b in &branches {
        match forge.find_pr(b, key, &night.config.label).await {
            Ok(Some(pr)) => {
                let why = format!("PR #{} from an earlier run", pr.number);
                let (fact, state) = match pr.state {
                    PrState::Open if pushed_by_this_run(at.record, &pr.head).await? => {
                        (taken_over_pr(pr.number), PrRecord::Open)
                    }
                    PrState::Open => (Fact::EarlierPrOpen(why), PrRecord::Open),
                    PrState::Merged => (Fact::EarlierPrMerged(why), PrRecord::Merged),
                    PrState::Closed => continue,
                };
                let found = PrAt {
                    branch: &pr.head,
                    ..*at
                };
                found.record(Some((pr.number, &pr.url)), state, "").await?;
                return Ok(Some(decide::end(fact).with(|f| {
                    f.branch = Some(pr.head.clone());
                    f.pr_number = Some(pr.number);
                    f.pr_url = Some(pr.url.clone());
                })));
            }
            Ok(None) => {}
            // Do the work anyway: the create looks up again before it
            // opens anything, so no duplicate can come of it.
            Err(e) if e.scope() == crate::forge::Scope::Run => {
                tracing::warn!("GitHub unusable, going on without it for this run: {e}");
                night.mark_github_down(&e.to_string());
                break;
            }
            Err(e) => {
                tracing::warn!("looking up an earlier PR of branch {b} failed: {e}");
            }
        }
    }
    Ok(None)
}

/// Without GitHub the ledger is all we know of an earlier PR.
async fn from_ledger(at: PrAt<'_>, rows: &[PrRow]) -> Result<Option<ItemEnd>, Error> {
    let (night, entry) = (at.night, at.entry);
    let Some(r) = earlier_in_ledger(rows) else {
        return Ok(None);
    };
    if r.state == PrRecord::Planned && !branch_on_the_remote(night, &r.branch) {
        // A branch someone deleted from the remote means the work is to be
        // done again.
        let key = &entry.item.key;
        at.record.pr_state(key, &r.branch, PrRecord::Gone).await?;
        return Ok(None);
    }
    let earlier = format!("PR #{} from an earlier run", r.number.unwrap_or(0));
    let ours = pushed_by_this_run(at.record, &r.branch).await?;
    let fact = match r.state {
        PrRecord::Merged => Fact::EarlierPrMerged(earlier),
        PrRecord::Planned if ours => Fact::BranchPushed(format!(
            "branch {} was pushed by an earlier attempt of this run (taken over; no GitHub access to open its PR)",
            r.branch
        )),
        PrRecord::Planned => Fact::BranchPushed(format!(
            "branch {} was pushed by an earlier run (no GitHub access to open its PR)",
            r.branch
        )),
        _ if ours => taken_over_pr(r.number.map_or(0, |n| n as u64)),
        _ => Fact::EarlierPrOpen(earlier),
    };
    Ok(Some(decide::end(fact).with(|f| {
        f.branch = Some(r.branch.clone());
        f.pr_number = r.number.map(|n| n as u64);
        f.pr_url = r.url.clone();
    })))
}

/// Whether a lost attempt of this run pushed `branch` (its `pushed` event):
/// a takeover that finds its PR or branch reports the run's own work, not an
/// earlier night's. Asked only when an earlier PR or branch was found.
async fn pushed_by_this_run(record: &Record<'_>, branch: &str) -> Result<bool, Error> {
    let pushed = record.pushed_in_run().await?;
    Ok(pushed.iter().any(|p| p.branch == branch))
}

/// The end of an item whose PR `number` a lost attempt of this run opened.
fn taken_over_pr(number: u64) -> Fact {
    Fact::PrOpened(Some(format!(
        "PR #{number} opened by an earlier attempt of this run (taken over)"
    )))
}

/// Whether `branch` exists on the configured remote ([`branch_on_remote`]
/// at the run's push URL).
fn branch_on_the_remote(night: &Night, branch: &str) -> bool {
    let token = night.git_token();
    branch_on_remote(&night.repo, token.as_deref(), &night.remote_urls.1, branch)
}

/// Whether `branch` exists on the remote at `url` (read only): see
/// [`remote_has_branch`]. The one rule for an unreachable remote, for the
/// run and for `run ITEM`'s preview ([`super::will_not_run`]) alike: it
/// counts as "yes", so nothing is redone (nor promised) on a network
/// hiccup.
pub(super) fn branch_on_remote(
    repo: &std::path::Path,
    token: Option<&str>,
    url: &str,
    branch: &str,
) -> bool {
    match tokio::task::block_in_place(|| remote_has_branch(repo, token, url, branch)) {
        Ok(there) => there,
        Err(e) => {
            tracing::warn!("cannot check {branch} on the remote: {e}");
            true
        }
    }
}

/// Whether the remote at `url` has `branch` ([`crate::git::Git::remote_refs`], run
/// in `repo` with `token` for an https remote, killed after 60 s).
///
/// # Errors
/// The git error when the remote cannot be reached.
pub fn remote_has_branch(
    repo: &std::path::Path,
    token: Option<&str>,
    url: &str,
    branch: &str,
) -> Result<bool, crate::git::GitError> {
    let name = format!("refs/heads/{branch}");
    let refs = (crate::git::Git::new(repo).token(token))
        .timeout(Duration::from_secs(60))
        .remote_refs(url, crate::git::RefsWanted::Branch(&name))?;
    Ok(!refs.is_empty())
}

/// The earlier PR of an item the ledger alone knows of (no GitHub): the
/// first of its rows that is open, merged or planned (a branch pushed whose
/// PR is still to be opened). Shared by the run and `run ITEM`'s preview.
pub(super) fn earlier_in_ledger(rows: &[PrRow]) -> Option<&PrRow> {
    rows.iter().find(|r| {
        matches!(
            r.state,
            PrRecord::Open | PrRecord::Merged | PrRecord::Planned
        )
    })
}

#[cfg(test)]
mod tests {
    use super::branch_on_remote;

    /// `run ITEM` once promised work for a pushed branch when the remote
    /// could not be reached, while the run itself counted the branch as
    /// there and skipped the item: one rule now, the safe one.
    #[test]
    fn an_unreachable_remote_counts_as_having_the_branch() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("no-such-remote.git");
        let url = gone.display().to_string();
        assert!(branch_on_remote(dir.path(), None, &url, "nightshift/x"));
    }
}
