//! Approval rules (SPEC §4).
//!
//! An approval binds to one plan SHA (or, for `run`, one contract SHA). It is
//! a ledger row that is never updated, expires 24 hours after it was given and
//! is consumed by exactly one run (a separate `approval_uses` row whose primary
//! key is the approval id). There is no standing approval. This module decides
//! whether an approval may start a run; storing rows is the ledger's job.

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

/// How long an approval stays valid after it was given.
pub const TTL_HOURS: i64 = 24;

/// An approval as stored in the ledger.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Approval {
    /// Row id.
    pub id: Uuid,
    /// The plan it approves (drain), or
    pub plan_sha: Option<String>,
    /// the contract it approves (run).
    pub contract_sha: Option<String>,
    /// When it was given (UTC).
    pub created_at: DateTime<Utc>,
    /// `created_at` + 24 h (UTC).
    pub expires_at: DateTime<Utc>,
    /// The run that consumed it, if any.
    pub used_by: Option<Uuid>,
}

/// Why an approval cannot start a run. Each maps to exit code 3.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Refusal {
    /// Nothing approved matches.
    #[error(
        "no valid approval for plan {plan_sha}: approve it with `nightshift approve {plan_sha}`"
    )]
    Missing { plan_sha: String },
    /// No approval with that SHA exists.
    #[error(
        "no approval was given for {sha}: run `nightshift plan`, read the cards, then `nightshift approve <PLAN_SHA>`"
    )]
    Unknown { sha: String },
    /// Older than 24 h.
    #[error(
        "the approval of {sha} expired at {expires_at} (approvals last {TTL_HOURS} h): approve the current plan again"
    )]
    Expired {
        sha: String,
        expires_at: DateTime<Utc>,
    },
    /// Already consumed by a run.
    #[error(
        "the approval of {sha} was already used by run {run}: approvals are single use; approve again"
    )]
    Used { sha: String, run: Uuid },
    /// It approves another item's contract than the one `run` selected.
    #[error(
        "the approval {sha} is for another contract than this item's ({contract_sha}); approve this item with `nightshift approve {contract_sha}`"
    )]
    OtherContract { sha: String, contract_sha: String },
    /// It approves another plan than the snapshot's.
    #[error(
        "the approval {sha} is for another plan than the backlog's current one ({plan_sha}); approve the current plan"
    )]
    OtherPlan { sha: String, plan_sha: String },
}

/// The instant an approval given at `created_at` expires.
pub fn expiry(created_at: DateTime<Utc>) -> DateTime<Utc> {
    created_at + Duration::hours(TTL_HOURS)
}

/// Checks that `a` may start a new run at `now` (UTC).
///
/// # Errors
/// [`Refusal::Expired`] or [`Refusal::Used`].
pub fn check_usable(a: &Approval, now: DateTime<Utc>) -> Result<(), Refusal> {
    let sha = a
        .plan_sha
        .clone()
        .or_else(|| a.contract_sha.clone())
        .unwrap_or_default();
    if let Some(run) = a.used_by {
        return Err(Refusal::Used { sha, run });
    }
    if now >= a.expires_at {
        return Err(Refusal::Expired {
            sha,
            expires_at: a.expires_at,
        });
    }
    Ok(())
}

/// Whether a crashed run may be resumed under its approval at `now`:
/// only while the approval is younger than 24 h (SPEC §4).
pub fn may_resume(a: &Approval, now: DateTime<Utc>) -> bool {
    now < a.expires_at
}

/// Finds the approval to run under (SPEC §4).
///
/// `item` is the plan index `run` was given (`None` for `drain`).
/// With `explicit` (a plan or contract SHA), that approval; without, the
/// newest valid unused plan approval of the repository whose plan is the
/// snapshot's, else the newest one sharing contracts with it (items outside
/// it are then `not_approved`).
///
/// # Errors
/// Database errors; [`Refusal`] (inside `Ok`) when none is usable.
pub async fn find(
    pool: &sqlx::PgPool,
    repo_id: &str,
    plan: &crate::contract::Plan,
    item: Option<usize>,
    explicit: Option<&str>,
    now: DateTime<Utc>,
) -> sqlx::Result<Result<(Approval, Vec<String>), Refusal>> {
    if let Some(sha) = explicit {
        let list = crate::ledger::records::approvals_of(pool, repo_id, sha).await?;
        let Some(a) = list.first() else {
            return Ok(Err(Refusal::Unknown {
                sha: sha.to_string(),
            }));
        };
        if let Err(r) = check_usable(a, now) {
            // A newer usable approval of the same SHA may exist after an expired one.
            if let Some(ok) = list.iter().find(|a| check_usable(a, now).is_ok()) {
                return approved_set(pool, plan, item, ok.clone()).await;
            }
            return Ok(Err(r));
        }
        return approved_set(pool, plan, item, a.clone()).await;
    }
    // `run ITEM`: an approval of that item's contract serves without
    // `--approve` (SPEC §4), as a plan approval serves `drain`.
    if let Some(i) = item
        && let Some(e) = plan.entries.iter().find(|e| e.index == i)
    {
        let list = crate::ledger::records::approvals_of(pool, repo_id, &e.contract_sha).await?;
        if let Some(a) = list.iter().find(|a| {
            a.contract_sha.as_deref() == Some(e.contract_sha.as_str())
                && check_usable(a, now).is_ok()
        }) {
            return Ok(Ok((a.clone(), vec![e.contract_sha.clone()])));
        }
    }
    let list = crate::ledger::records::usable_plan_approvals(pool, repo_id, now).await?;
    if let Some(a) = list
        .iter()
        .find(|a| a.plan_sha.as_deref() == Some(plan.sha.as_str()))
    {
        return approved_set(pool, plan, item, a.clone()).await;
    }
    let current: Vec<&str> = plan
        .entries
        .iter()
        .map(|e| e.contract_sha.as_str())
        .collect();
    for a in &list {
        let shas =
            crate::ledger::records::plan_contracts(pool, a.plan_sha.as_deref().unwrap_or(""))
                .await?;
        if shas.iter().any(|s| current.contains(&s.as_str())) {
            return Ok(Ok((a.clone(), shas)));
        }
    }
    // This very plan was approved, but the approval is used up or expired:
    // say which, rather than that none was given.
    if let Some(a) = crate::ledger::records::approvals_of(pool, repo_id, &plan.sha)
        .await?
        .first()
        && let Err(r) = check_usable(a, now)
    {
        return Ok(Err(r));
    }
    Ok(Err(Refusal::Missing {
        plan_sha: plan.sha.clone(),
    }))
}

async fn approved_set(
    pool: &sqlx::PgPool,
    plan: &crate::contract::Plan,
    item: Option<usize>,
    a: Approval,
) -> sqlx::Result<Result<(Approval, Vec<String>), Refusal>> {
    if let Some(c) = &a.contract_sha {
        let wanted = item.and_then(|i| {
            plan.entries
                .iter()
                .find(|e| e.index == i)
                .map(|e| e.contract_sha.clone())
        });
        if wanted.as_deref() != Some(c.as_str()) {
            return Ok(Err(match wanted {
                Some(contract_sha) => Refusal::OtherContract {
                    sha: c.clone(),
                    contract_sha,
                },
                // A contract approval given to `drain`: it needs the plan's.
                None => Refusal::OtherPlan {
                    sha: c.clone(),
                    plan_sha: plan.sha.clone(),
                },
            }));
        }
        return Ok(Ok((a.clone(), vec![c.clone()])));
    }
    let shas =
        crate::ledger::records::plan_contracts(pool, a.plan_sha.as_deref().unwrap_or("")).await?;
    if !plan.entries.iter().any(|e| shas.contains(&e.contract_sha)) {
        return Ok(Err(Refusal::OtherPlan {
            sha: a.plan_sha.clone().unwrap_or_default(),
            plan_sha: plan.sha.clone(),
        }));
    }
    Ok(Ok((a, shas)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(age_h: i64, used: bool) -> Approval {
        let created = Utc::now() - Duration::hours(age_h);
        Approval {
            id: Uuid::new_v4(),
            plan_sha: Some("ab".into()),
            contract_sha: None,
            created_at: created,
            expires_at: expiry(created),
            used_by: used.then(Uuid::new_v4),
        }
    }

    #[test]
    fn fresh_unused_is_usable() {
        assert!(check_usable(&approval(1, false), Utc::now()).is_ok());
    }

    #[test]
    fn expired_and_used_are_refused() {
        assert!(matches!(
            check_usable(&approval(25, false), Utc::now()),
            Err(Refusal::Expired { .. })
        ));
        assert!(matches!(
            check_usable(&approval(1, true), Utc::now()),
            Err(Refusal::Used { .. })
        ));
        assert!(may_resume(&approval(23, true), Utc::now()));
        assert!(!may_resume(&approval(24, true), Utc::now()));
    }
}
