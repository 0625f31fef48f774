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

/// Why an item of the current plan is not under the approval that started
/// the run (docs/contract.md "approval"): the report's reason for
/// `not_approved`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotApproved {
    /// The approval held this item with another contract (same key: its
    /// details or the config changed), or an item that is gone now and sat
    /// where this one sits (a reworded title or a moved section: a new key).
    Changed,
    /// Nothing in the approval stands for this item.
    Added,
}

impl NotApproved {
    /// The report's reason, with what to do.
    pub fn reason(self) -> &'static str {
        match self {
            NotApproved::Changed => {
                "the item changed since the approval (its title, section or details, or the config, differ from the approved contract); run `nightshift plan` and approve the new SHA"
            }
            NotApproved::Added => {
                "the item is not in the approved plan (added after it); run `nightshift plan` and approve the new SHA"
            }
        }
    }
}

/// One item as the approval or the current plan holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The item's key (docs/backlog.md).
    pub key: String,
    /// Its title.
    pub title: String,
}

/// Decides [`NotApproved`] for the current item `key`. `approved` and
/// `current` are the approved and the current plan's items in backlog order.
///
/// The same key in the approval: changed. Otherwise the item may be a
/// reworded one: the items whose keys both plans hold are anchors, and
/// between two anchors the approved items that are gone are paired with the
/// current items that are new, each gone item with the most similar new
/// title (Jaro–Winkler), in order. A new item paired so is changed; an
/// unpaired one was added.
pub fn why_not_approved(approved: &[Held], current: &[Held], key: &str) -> NotApproved {
    if approved.iter().any(|a| a.key == key) {
        return NotApproved::Changed;
    }
    let in_approved = |k: &str| approved.iter().any(|a| a.key == k);
    let in_current = |k: &str| current.iter().any(|c| c.key == k);
    let Some(at) = current.iter().position(|c| c.key == key) else {
        return NotApproved::Added;
    };
    // The anchor before this item (its key in both plans), if any.
    let anchor_before = current[..at].iter().rev().find(|c| in_approved(&c.key));
    let anchor_after = current[at + 1..].iter().find(|c| in_approved(&c.key));
    let start = anchor_before
        .and_then(|a| approved.iter().position(|x| x.key == a.key))
        .map_or(0, |i| i + 1);
    let end = anchor_after
        .and_then(|a| approved.iter().position(|x| x.key == a.key))
        .unwrap_or(approved.len());
    let mut gone: Vec<&Held> = approved
        .get(start..end.max(start))
        .unwrap_or_default()
        .iter()
        .filter(|a| !in_current(&a.key))
        .collect();
    let cur_start = anchor_before
        .and_then(|a| current.iter().position(|x| x.key == a.key))
        .map_or(0, |i| i + 1);
    let cur_end = anchor_after
        .and_then(|a| current.iter().position(|x| x.key == a.key))
        .unwrap_or(current.len());
    let new: Vec<&Held> = current[cur_start..cur_end]
        .iter()
        .filter(|c| !in_approved(&c.key))
        .collect();
    // Each gone item takes the most similar new title still free, in order.
    let mut taken = vec![false; new.len()];
    for g in gone.drain(..) {
        let best = new
            .iter()
            .enumerate()
            .filter(|(i, _)| !taken[*i])
            .map(|(i, n)| {
                (
                    strsim::jaro_winkler(&g.title.to_lowercase(), &n.title.to_lowercase()),
                    i,
                )
            })
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, i)) = best {
            taken[i] = true;
        }
    }
    match new.iter().position(|n| n.key == key) {
        Some(i) if taken[i] => NotApproved::Changed,
        _ => NotApproved::Added,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(items: &[&str]) -> Vec<Held> {
        items
            .iter()
            .map(|t| Held {
                key: format!("key of {t}"),
                title: t.to_string(),
            })
            .collect()
    }

    #[test]
    fn a_reworded_item_is_changed_and_a_new_one_added() {
        let approved = held(&["Add sub", "Add mul", "Add div"]);
        let current = held(&["Add sub", "Add mul", "Add pow", "Add division"]);
        let why = |t: &str| why_not_approved(&approved, &current, &format!("key of {t}"));
        assert_eq!(why("Add division"), NotApproved::Changed);
        assert_eq!(why("Add pow"), NotApproved::Added);
        // The same key with another contract.
        assert_eq!(why("Add mul"), NotApproved::Changed);
        // Nothing gone: every new item was added.
        let current = held(&["Add sub", "Add mul", "Add div", "Add pow"]);
        assert_eq!(
            why_not_approved(&approved, &current, "key of Add pow"),
            NotApproved::Added
        );
        // A reworded first item, before any anchor.
        let current = held(&["Subtract", "Add mul", "Add div"]);
        assert_eq!(
            why_not_approved(&approved, &current, "key of Subtract"),
            NotApproved::Changed
        );
    }

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
