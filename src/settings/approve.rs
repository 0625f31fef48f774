//! The approval a run works under (docs/contract.md#approval): a crashed
//! run's own while it may be resumed, a PR card's for `run '#N'`, else the
//! plan's or the item's contract's; and the record of a refusal. Not the
//! approvals' signing and checking ([`crate::approval`]) nor the cards
//! shown on refusal (the CLI prints them).

use chrono::Utc;

use crate::approval;
use crate::error::Result;
use crate::ledger::runs::RunRow;
use crate::ledger::{events, runs};
use crate::outcome::{Event, RunStatus};
use crate::plan::Plan;
use crate::run::Selection;

use super::{Held, Request};

/// The approval a run works under, and the run it resumes.
pub struct Approved {
    /// The approval.
    pub approval: approval::Approval,
    /// The contract SHAs it approves.
    pub contracts: Vec<String>,
    /// The crashed or stopped run taken up again, if any.
    pub resume: Option<RunRow>,
}

/// Resumes a crashed run under its own approval while it is valid
/// (docs/contract.md#approval), else finds a fresh approval. On refusal
/// the caller shows the cards to approve and records it
/// ([`record_refusal`]).
///
/// # Errors
/// Database errors. `Ok(Err(refusal))` (exit 3 once it is an error) when no
/// approval is usable.
pub async fn approve(
    req: &Request,
    held: &Held,
) -> Result<std::result::Result<Approved, approval::Refusal>> {
    let pool = held.pool();
    // A crashed run whose binding does not verify is not resumed: a fresh
    // approval may still start a new run; without one, the refusal names
    // what did not verify (docs/contract.md#the-runs-binding).
    let mut unverified = None;
    if req.approve.is_none() && matches!(req.selection, Selection::All) {
        match crashed_run_to_resume(pool, &held.repo_id, &req.plan, req.now).await? {
            Resumable::Run(found) => {
                let (r, a, shas) = *found;
                let how = if r.status == RunStatus::StoppedSignal {
                    "stopped"
                } else {
                    RunStatus::Crashed.as_str()
                };
                eprintln!(
                    "resuming {how} run {} under its approval (given {})",
                    r.id,
                    a.created_at.with_timezone(&req.tz).format("%H:%M %Z")
                );
                return Ok(Ok(Approved {
                    approval: a,
                    contracts: shas,
                    resume: Some(r),
                }));
            }
            Resumable::Unverified(refusal) => unverified = Some(refusal),
            Resumable::None => {}
        }
    }
    if let Selection::Pr(n) = req.selection
        && let Some((approval, contracts)) = card_approval(
            pool,
            &held.repo_id,
            &req.plan,
            n,
            req.approve.as_deref(),
            req.now,
        )
        .await?
    {
        return Ok(Ok(Approved {
            approval,
            contracts,
            resume: None,
        }));
    }
    let found = approval::find(
        pool,
        &held.repo_id,
        &req.plan,
        req.selection.item(),
        req.approve.as_deref(),
        req.now,
    )
    .await?;
    match (found, unverified) {
        (Ok((approval, contracts)), unverified) => {
            if let Some(refusal) = unverified {
                eprintln!("warning: not resumed: {refusal}");
            }
            Ok(Ok(Approved {
                approval,
                contracts,
                resume: None,
            }))
        }
        (Err(_), Some(refusal)) | (Err(refusal), None) => Ok(Err(refusal)),
    }
}

/// Records a refused run (`reason`): a `refused` event, and `not_approved`
/// too for a scheduled fire (docs/contract.md#approval).
///
/// # Errors
/// Database errors.
pub async fn record_refusal(req: &Request, held: &Held, reason: &str) -> Result<()> {
    let pool = held.pool();
    events::event(
        pool,
        None,
        Event::Refused.as_str(),
        serde_json::json!({"reason": reason, "plan_sha": req.plan.sha}),
    )
    .await?;
    if req.scheduled {
        events::event(
            pool,
            None,
            Event::NotApproved.as_str(),
            serde_json::json!({"reason": reason, "plan_sha": req.plan.sha, "by": "schedule"}),
        )
        .await?;
    }
    Ok(())
}

/// What the newest crashed or stopped run offers a drain.
enum Resumable {
    /// The run, its approval and the approved contract SHAs: resume it.
    Run(Box<(RunRow, approval::Approval, Vec<String>)>),
    /// Its binding does not verify: it is not resumed.
    Unverified(approval::Refusal),
    /// Nothing to resume (none, its approval is too old to resume under,
    /// or it shares no contract with the snapshot).
    None,
}

/// The newest crashed, not yet resumed run, checked as every host that
/// resumes a run checks it ([`approval::binding::verify`]), whose plan
/// approval may still be resumed (younger than 24 h, docs/contract.md#resume)
/// and shares contracts with the snapshot.
async fn crashed_run_to_resume(
    pool: &sqlx::PgPool,
    repo: &str,
    plan: &Plan,
    now: chrono::DateTime<Utc>,
) -> sqlx::Result<Resumable> {
    let Some(r) = runs::resumable_run(pool, repo).await? else {
        return Ok(Resumable::None);
    };
    let verified = match approval::binding::verify(pool, &r).await? {
        Ok(v) => v,
        Err(refusal) => return Ok(Resumable::Unverified(refusal)),
    };
    let a = verified.approval;
    if a.plan_sha.is_none() || !approval::may_resume(&a, now) {
        return Ok(Resumable::None);
    }
    let shas = verified.contracts;
    if !plan.entries.iter().any(|e| shas.contains(&e.contract_sha)) {
        return Ok(Resumable::None);
    }
    Ok(Resumable::Run(Box::new((r, a, shas))))
}

/// For `run '#N'`: a valid, unused approval of that PR's card (`nightshift
/// approve <CARD_SHA>`, or the SHA given with `--approve`), as an item's
/// contract approval serves `run ITEM`. `None`: look for a plan approval.
///
/// # Errors
/// Database errors.
async fn card_approval(
    pool: &sqlx::PgPool,
    repo: &str,
    plan: &Plan,
    n: u64,
    explicit: Option<&str>,
    now: chrono::DateTime<Utc>,
) -> Result<Option<(approval::Approval, Vec<String>)>> {
    let Some(sha) = plan
        .tend
        .iter()
        .find(|c| c.number == n)
        .and_then(|c| c.sealed.as_ref())
        .map(|s| s.sha.clone())
    else {
        return Ok(None);
    };
    if explicit.is_some_and(|e| !e.eq_ignore_ascii_case(&sha)) {
        return Ok(None);
    }
    let list = approval::approvals_of(pool, repo, &sha).await?;
    Ok(list
        .into_iter()
        .find(|a| {
            a.contract_sha.as_deref() == Some(sha.as_str())
                && approval::check_usable(a, now).is_ok()
        })
        .map(|a| (a, vec![sha])))
}
