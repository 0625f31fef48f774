//! Delivering a tended PR's approved change (docs/github.md "The second
//! night"): the secret and conflict-marker checks, the commit of the
//! night's work on the PR's branch, a last look at the PR, the push with
//! `--force-with-lease` against the head nightshift last pushed, the new
//! head and body recorded, the body's evidence card rewritten and one
//! answering comment. It is the tend's [`super::attempt::Delivery`]; it
//! does not prepare the checkout or decide whether the change ships (that
//! is [`super::tend`] and the driver).

use serde_json::json;

use crate::error::Error;
use crate::ledger::items::ItemEnd;
use crate::outcome::{Event, Phase};
use crate::report;
use crate::slot::SlotError;
use crate::tend::{self as cards, LeftAlone, Sealed, TendCard};

use super::decide::Fact;
use super::item::Round;
use super::round::Approved;
use super::ship::{evidence, runner_identity, secret_in_change};

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

/// Ships an approved tend (docs/github.md "The second night"): the secret
/// and conflict-marker checks, the commit of the night's work, a last look
/// at the PR, the push to the same branch with `--force-with-lease`
/// against the head nightshift last pushed, the new head recorded, the
/// body's evidence card rewritten and one answering comment. Nothing is
/// pushed when any step before the push fails.
///
/// # Errors
/// The ledger stays away (see [`super::Night::db`]).
pub(super) async fn ship(r: &mut Round<'_>, t: &Tend<'_>, a: Approved) -> Result<ItemEnd, Error> {
    let (item, night) = (r.item, r.item.night);
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
    // The new head's CI is watched as a new PR's is (docs/github.md#ci).
    let watched = super::ci::Watched {
        key,
        pr_number: t.card.number,
        head: &new_head,
        base: &item.slot.base_commit,
    };
    let wait = item.entry.contract.limits.ci_wait();
    super::ci::open(night, item.record.run_id(), &watched, wait).await?;
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
        r.end(Fact::MarkersLeft(format!(
            "conflict markers are still in {}; nothing was pushed",
            marked.join(", ")
        )))
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
                return Err(Box::new(r.end(Fact::Fault(format!("commit failed: {e}")))));
            }
        },
        Err(e) => {
            return Err(Box::new(r.end(Fact::Fault(format!("commit failed: {e}")))));
        }
    };
    if head.eq_ignore_ascii_case(&t.sealed.contract.head) {
        let why =
            "nothing to push: the writer changed nothing and the branch was already on its base"
                .to_string();
        return Err(Box::new(r.end(Fact::NoChanges(why))));
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
        return Some(r.end(Fact::GithubUnanswered(why)));
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
            return Some(r.end(Fact::GithubUnanswered(why)));
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
    Some(r.end(Fact::LeftAlone(why)))
}

/// Pushes the branch with a lease on the head nightshift last pushed; the
/// item's end when the push is refused (someone pushed meanwhile: left
/// alone) or fails.
async fn push(r: &Round<'_>, t: &Tend<'_>) -> Option<ItemEnd> {
    let (night, slot, branch) = (r.item.night, r.item.slot, r.item.branch);
    if r.item.cancel.is_cancelled() {
        return Some(r.end(Fact::Signal("stopped by a signal before the push".into())));
    }
    let token = night.git_token();
    let lease = &t.sealed.contract.head;
    let pushed = night
        .until_signal(r.item.cancel, |stop| {
            slot.push_with_lease(token.as_deref(), lease, Some(stop))
        })
        .await;
    let e = pushed.err()?;
    if r.item.cancel.is_cancelled() {
        let why = format!("stopped by a signal during the push of {branch}; nothing was pushed");
        return Some(r.end(Fact::Signal(why)));
    }
    let text = night.redact(&e.to_string());
    if text.contains("stale info") || text.contains("rejected") {
        let why = format!(
            "someone else pushed to {branch} while nightshift worked on it (the lease on {} was refused); nothing was pushed",
            &lease[..12.min(lease.len())]
        );
        return Some(r.end(Fact::LeftAlone(why)));
    }
    Some(r.end(Fact::PushFailed(format!("push of {branch} failed: {text}"))))
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
    r.end(Fact::PrUpdated(why)).with(|f| {
        f.branch = Some(item.branch.to_string());
        f.pr_number = Some(t.card.number);
        f.pr_url = t.url.clone();
        f.pr_body = Some(body);
    })
}
