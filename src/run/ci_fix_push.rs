//! Delivering a fix round's approved change (docs/github.md#fix-rounds):
//! the secret check, one commit on the PR's branch, the push with
//! `--force-with-lease` at the head the watch followed (same branch, same
//! PR), the new head recorded and one PR comment. It is the fix round's
//! [`super::attempt::Delivery`]; the round itself is [`super::ci_fix`]'s.

use std::sync::Mutex;

use serde_json::json;

use crate::error::Error;
use crate::ledger::ci::FixWanted;
use crate::ledger::items::ItemEnd;
use crate::outcome::{Event, Phase};
use crate::slot::SlotError;

use super::decide::Fact;
use super::item::Round;
use super::round::Approved;
use super::ship::{runner_identity, secret_in_change};

/// A fix round's facts while it runs: what the watch wants, the budget,
/// and the head the round pushed (set by [`ship`]).
pub(super) struct Fix<'a> {
    pub wanted: &'a FixWanted,
    /// The item's sealed `ci_rounds`.
    pub budget: u32,
    pushed: Mutex<Option<String>>,
}

impl<'a> Fix<'a> {
    /// The fix round `wanted`, of `budget`, nothing pushed yet.
    pub fn new(wanted: &'a FixWanted, budget: u32) -> Fix<'a> {
        Fix {
            wanted,
            budget,
            pushed: Mutex::new(None),
        }
    }

    /// The head the round pushed, if it did.
    pub fn pushed(&self) -> Option<String> {
        self.pushed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records that the round pushed `head` (its own push, or the push of
    /// the attempt it took over).
    pub fn set_pushed(&self, head: &str) {
        *self.pushed.lock().unwrap_or_else(|e| e.into_inner()) = Some(head.to_string());
    }
}

/// Ships a fix round's approved change: the secret check, one commit on
/// the PR's branch, the push with `--force-with-lease` at the watched head
/// (nothing is pushed over a person's push), the new head recorded, and
/// one PR comment: which check failed, what the round changed, the new
/// head.
///
/// # Errors
/// The ledger stays away, or the claim was lost.
pub(super) async fn ship(r: &mut Round<'_>, fix: &Fix<'_>, a: Approved) -> Result<ItemEnd, Error> {
    let (item, night) = (r.item, r.item.night);
    if let Some(end) = secret_in_change(r, &a.reviewed.gated.tree) {
        return Ok(end);
    }
    r.phase(Phase::Push).await?;
    let (from, n) = (&fix.wanted.head_sha, fix.wanted.fix_rounds + 1);
    let message = format!(
        "nightshift: fix CI of PR #{} ({})\n\nFix round {n} for the failed check(s) {}\nContract sha256 {}\nRun {}\n",
        fix.wanted.pr_number,
        item.entry.contract.title,
        fix.wanted.checks,
        item.entry.contract_sha,
        item.run_id
    );
    let me = runner_identity();
    let committed = tokio::task::block_in_place(|| {
        item.slot
            .commit_tree(&a.reviewed.gated.tree, &message, &me, &me)
    });
    let new_head = match committed {
        Ok(head) => head,
        Err(SlotError::NothingToCommit { .. }) => {
            let why = "the fix round changed nothing; nothing was pushed".to_string();
            return Ok(r.end(Fact::NoChanges(why)));
        }
        Err(e) => return Ok(r.end(Fact::Fault(format!("commit failed: {e}")))),
    };
    if let Some(end) = push(r, from).await? {
        return Ok(end);
    }
    let (key, branch) = (&item.entry.item.key, item.branch);
    item.record.pr_head(key, branch, &new_head).await?;
    let changed = tokio::task::block_in_place(|| item.slot.changed_files(from, &new_head))
        .unwrap_or_default();
    let what = json!({"key": key, "branch": branch, "title": item.entry.contract.title, "files": changed, "pr": fix.wanted.pr_number, "from": from, "to": new_head});
    item.record.event(Event::Pushed, what).await?;
    fix.set_pushed(&new_head);
    let mut why = format!(
        "fix round {n}: pushed {} → {} ({} file(s) changed)",
        short(from),
        short(&new_head),
        changed.len()
    );
    if let Err(e) = comment(r, fix, &a, (&changed, &new_head)).await {
        why.push_str(&format!("; the PR comment was not posted: {e}"));
    }
    Ok(r.end(Fact::PrUpdated(night.redact(&why))))
}

/// Pushes the fix with a lease on `from`, the head the watch followed;
/// the round's end when the push is refused (someone pushed meanwhile:
/// left alone) or fails. The claim is held right before.
async fn push(r: &Round<'_>, from: &str) -> Result<Option<ItemEnd>, Error> {
    let (item, night) = (r.item, r.item.night);
    if item.cancel.is_cancelled() {
        let why = "stopped by a signal before the push".to_string();
        return Ok(Some(r.end(Fact::Signal(why))));
    }
    // Nothing is pushed for a claim another worker took over.
    item.record.hold().await?;
    let token = night.git_token();
    let slot = item.slot;
    let pushed = night
        .until_signal(item.cancel, |stop| {
            slot.push_with_lease(token.as_deref(), from, Some(stop))
        })
        .await;
    let Err(e) = pushed else {
        return Ok(None);
    };
    let branch = item.branch;
    if item.cancel.is_cancelled() {
        let why = format!("stopped by a signal during the push of {branch}; nothing was pushed");
        return Ok(Some(r.end(Fact::Signal(why))));
    }
    let text = night.redact(&e.to_string());
    if text.contains("stale info") || text.contains("rejected") {
        let why = format!(
            "someone else pushed to {branch} while the fix round worked (the lease on {} was refused); nothing was pushed",
            short(from)
        );
        return Ok(Some(r.end(Fact::LeftAlone(why))));
    }
    let why = format!("push of {branch} failed: {text}");
    Ok(Some(r.end(Fact::PushFailed(why))))
}

/// The one PR comment of a pushed fix round: the check(s) that failed on
/// the old head, the files the round changed and the writer's note, the
/// gate and the review, the new head.
async fn comment(
    r: &Round<'_>,
    fix: &Fix<'_>,
    a: &Approved,
    (changed, new_head): (&[String], &str),
) -> Result<(), String> {
    let night = r.item.night;
    let Some(forge) = &night.forge else {
        return Err("no GitHub access".into());
    };
    let files: Vec<String> = changed
        .iter()
        .map(|f| format!("- {}", crate::report::md_code(f)))
        .collect();
    let note = crate::agent::strip_blocks(&a.reviewed.gated.writer.text);
    let note: String = note.trim().chars().take(600).collect();
    let gate: Vec<String> = (a.reviewed.gated.gates.iter())
        .map(|g| {
            let code = g
                .exit_code
                .map_or("no exit code".into(), |c| format!("exit {c}"));
            format!("{} ({code})", crate::report::md_code(&g.command))
        })
        .collect();
    let body = format!(
        "nightshift fix round {} of {}: the required check(s) {} failed on `{}`.\n\n\
         What this round changed:\n{}\n\nThe writer's note: {}\n\n\
         Gate: {}; reviewer: {}.\n\nNew head: `{}` — its checks are watched again.\n",
        fix.wanted.fix_rounds + 1,
        fix.budget,
        crate::report::md_text(&fix.wanted.checks),
        short(&fix.wanted.head_sha),
        if files.is_empty() {
            "(no file)".to_string()
        } else {
            files.join("\n")
        },
        crate::report::md_text(&note),
        if gate.is_empty() {
            "none".into()
        } else {
            gate.join(", ")
        },
        a.verdict.verdict.as_str(),
        short(new_head)
    );
    let body = night.redact(&body);
    let me = forge.own_login().await.map_err(|e| e.to_string())?;
    forge
        .post_comment(fix.wanted.pr_number as u64, &me, &body)
        .await
        .map(|_| ())
        .map_err(|e| night.redact(&e.to_string()))
}

/// The first 12 characters of a commit id.
pub(super) fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}
