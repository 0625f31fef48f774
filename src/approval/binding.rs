//! A run's binding to its approval (docs/contract.md#the-runs-binding).
//!
//! An approval's signature covers what it approves, not the run that uses
//! it: a ledger writer without the key could point a live or crashed run at
//! another genuine approval (expired, used, or of a superseded plan). So
//! when a run starts, the facts that tie it to its approval — run id, plan
//! SHA, approval id and SHA, its start and the approval's use (both the
//! database server's clock), the run it resumes — are signed with the
//! approval key and stored with the run ([`bind`]). Every host that joins
//! or resumes the run checks them again ([`verify`]) and refuses, naming
//! each fact that did not verify, when one does not.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use hmac::Mac;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ledger::runs::{self, BindingFacts, BoundRow, RunRow};
use crate::plan::Plan;

use super::{Approval, Refusal, check_signed, installed_key, mac, target};

/// What a run's binding signs, and the signature: stored as JSON in the
/// run's `binding` column. Instants are UTC and signed in microseconds, as
/// the ledger keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// The run.
    pub run: Uuid,
    /// Its plan SHA (the snapshot's plan when it started).
    pub plan_sha: String,
    /// The approval it runs under.
    pub approval: Uuid,
    /// The plan or contract SHA that approval approves.
    pub approved: String,
    /// The run's start (database server time).
    pub started_at: DateTime<Utc>,
    /// The run it resumes, if any.
    pub resumes: Option<Uuid>,
    /// The run that consumed the approval: this run, or for a resumed run
    /// the first of its chain.
    pub used_by: Uuid,
    /// When the approval was consumed (database server time).
    pub used_at: DateTime<Utc>,
    /// Hex HMAC-SHA256 of [`Binding::message`] by the approval key.
    pub signature: String,
}

impl Binding {
    /// What the signature covers.
    pub fn message(&self) -> String {
        format!(
            "nightshift run binding v1\nrun {}\nplan {}\napproval {}\napproved {}\nstarted {}\nresumes {}\nused by {} at {}\n",
            self.run,
            self.plan_sha,
            self.approval,
            self.approved,
            self.started_at.timestamp_micros(),
            self.resumes
                .map_or_else(|| "-".to_string(), |r| r.to_string()),
            self.used_by,
            self.used_at.timestamp_micros()
        )
    }
}

/// One fact of a run that did not verify; each names the field, the run or
/// approval it concerns, and what was found.
#[derive(Debug, Clone, PartialEq)]
pub enum Mismatch {
    /// The run carries no binding (started by a nightshift older than
    /// bindings, or the binding was removed).
    Unbound,
    /// The binding is not the JSON a binding is.
    Unreadable { why: String },
    /// The binding's signature does not verify with the installed key.
    Signature { key: PathBuf },
    /// A column of the run's row differs from the value its binding signed.
    Field {
        field: &'static str,
        row: String,
        signed: String,
    },
    /// The run names no approval.
    NoApproval,
    /// The approval the run names is not in the ledger.
    ApprovalMissing { approval: Uuid },
    /// The approval itself does not verify (its own signature).
    Approval { approval: Uuid, why: String },
    /// The approval had expired when the run started.
    Expired {
        approval: Uuid,
        expires_at: DateTime<Utc>,
        started_at: DateTime<Utc>,
    },
    /// No use of the approval is recorded.
    UseMissing { approval: Uuid },
    /// The approval's use record names another run than this run's binding.
    UsedElsewhere {
        approval: Uuid,
        used_by: Uuid,
        expected: Uuid,
    },
    /// Another run, not of this run's resume chain, names the approval.
    AlsoNamedBy { approval: Uuid, other: Uuid },
    /// The approved plan's stored contracts do not hash to its SHA.
    PlanHash { plan: String },
    /// The approval names no plan and no contract.
    NoTarget { approval: Uuid },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Unbound => f.write_str("binding: the run has no signed binding"),
            Mismatch::Unreadable { why } => write!(f, "binding: unreadable ({why})"),
            Mismatch::Signature { key } => write!(
                f,
                "binding: its signature does not verify with the key in {}",
                key.display()
            ),
            Mismatch::Field { field, row, signed } => write!(
                f,
                "{field}: the run's row says {row} but its binding signed {signed}"
            ),
            Mismatch::NoApproval => f.write_str("approval_id: the run names no approval"),
            Mismatch::ApprovalMissing { approval } => {
                write!(f, "approval_id: approval {approval} is not in the ledger")
            }
            Mismatch::Approval { approval, why } => write!(f, "approval {approval}: {why}"),
            Mismatch::Expired {
                approval,
                expires_at,
                started_at,
            } => write!(
                f,
                "expires_at: approval {approval} expired at {expires_at}, before the run started at {started_at}"
            ),
            Mismatch::UseMissing { approval } => write!(
                f,
                "approval_uses: no use of approval {approval} is recorded"
            ),
            Mismatch::UsedElsewhere {
                approval,
                used_by,
                expected,
            } => write!(
                f,
                "approval_uses: approval {approval} was used by run {used_by}, not by run {expected}"
            ),
            Mismatch::AlsoNamedBy { approval, other } => write!(
                f,
                "approval_uses: approval {approval} is also named by run {other} (approvals are single use)"
            ),
            Mismatch::PlanHash { plan } => write!(
                f,
                "plan_sha: the contracts of the approved plan {plan} in the ledger do not hash to it"
            ),
            Mismatch::NoTarget { approval } => {
                write!(f, "approval {approval}: it names no plan or contract")
            }
        }
    }
}

/// The problems of a refused run, one after another.
pub(super) fn listed(problems: &[Mismatch]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The binding of a new run under `approval`, as JSON for
/// [`runs::create_run`]: `facts` signed with the installed key.
///
/// # Errors
/// [`Refusal::Expired`] when the approval had expired at the run's start
/// by the database server's clock; [`Refusal::Unverified`] when no use of
/// the approval is recorded (a resumed run whose first run's use was
/// deleted); [`Refusal::BadSignature`] without a key.
pub fn bind(approval: &Approval, facts: &BindingFacts) -> Result<serde_json::Value, Refusal> {
    let sha = target(approval);
    if facts.started_at >= approval.expires_at {
        return Err(Refusal::Expired {
            sha,
            expires_at: approval.expires_at,
        });
    }
    let Some((used_by, used_at)) = facts.used else {
        return Err(Refusal::Unverified {
            run: facts.resumes.unwrap_or(facts.run),
            approval: approval.id.to_string(),
            problems: vec![Mismatch::UseMissing {
                approval: approval.id,
            }],
        });
    };
    let (key, path) = installed_key();
    let Some(key) = key else {
        return Err(Refusal::BadSignature { sha, key: path });
    };
    let mut b = Binding {
        run: facts.run,
        plan_sha: facts.plan_sha.clone(),
        approval: approval.id,
        approved: sha,
        started_at: facts.started_at,
        resumes: facts.resumes,
        used_by,
        used_at,
        signature: String::new(),
    };
    let mut m = mac(&key);
    m.update(b.message().as_bytes());
    b.signature = hex::encode(m.finalize().into_bytes());
    Ok(serde_json::to_value(b).expect("a binding serialises"))
}

/// A run whose binding verified: its approval and the contract SHAs that
/// approval covers.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The approval.
    pub approval: Approval,
    /// The approved plan's contract SHAs (or the one approved contract).
    pub contracts: Vec<String>,
}

/// Checks run `run` as a host that joins or resumes it must
/// (docs/contract.md#the-runs-binding): its binding is signed by the
/// installed key and matches the run's row (id, plan SHA, approval, start,
/// the run it resumes); its approval is signed, was unexpired at the run's
/// start, its use record names this run (or the first run of its resume
/// chain) and no other run names it; the approved plan's contracts hash
/// to its SHA.
///
/// # Errors
/// Database errors; [`Refusal::Unverified`] (inside `Ok`, exit 3) naming
/// every fact that did not verify.
pub async fn verify(pool: &sqlx::PgPool, run: &RunRow) -> sqlx::Result<Result<Verified, Refusal>> {
    let bound = runs::bound_row(pool, run.id).await?.unwrap_or(BoundRow {
        binding: None,
        resumes: None,
    });
    let mut problems = Vec::new();
    let binding = match bound.binding.map(serde_json::from_value::<Binding>) {
        None => {
            problems.push(Mismatch::Unbound);
            None
        }
        Some(Err(e)) => {
            problems.push(Mismatch::Unreadable { why: e.to_string() });
            None
        }
        Some(Ok(b)) => {
            problems.extend(check_binding(&b, run, bound.resumes));
            Some(b)
        }
    };
    let approval = match run.approval_id {
        None => {
            problems.push(Mismatch::NoApproval);
            None
        }
        Some(id) => {
            let found = super::by_id(pool, id).await?;
            if found.is_none() {
                problems.push(Mismatch::ApprovalMissing { approval: id });
            }
            found
        }
    };
    let mut contracts = Vec::new();
    if let Some(a) = &approval {
        problems.extend(check_approval(a, run, binding.as_ref()));
        let used = runs::approval_use(pool, a.id).await?;
        let expected = binding.as_ref().map_or(run.id, |b| b.used_by);
        match used {
            None => problems.push(Mismatch::UseMissing { approval: a.id }),
            Some((by, _)) if by != expected => problems.push(Mismatch::UsedElsewhere {
                approval: a.id,
                used_by: by,
                expected,
            }),
            Some(_) => {}
        }
        let named = runs::runs_of_approval(pool, a.id).await?;
        let consumer = used.map_or(expected, |(by, _)| by);
        problems.extend(others_naming(a.id, run.id, consumer, &named));
        match covered(pool, a).await? {
            Ok(c) => contracts = c,
            Err(m) => problems.push(m),
        }
    }
    match approval {
        Some(approval) if problems.is_empty() => Ok(Ok(Verified {
            approval,
            contracts,
        })),
        _ => Ok(Err(Refusal::Unverified {
            run: run.id,
            approval: run
                .approval_id
                .map_or_else(|| "none".to_string(), |a| a.to_string()),
            problems,
        })),
    }
}

/// The binding's signature, and each column of the run's row against the
/// value the binding signed.
fn check_binding(b: &Binding, run: &RunRow, resumes: Option<Uuid>) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let (key, path) = installed_key();
    let signed = key.is_some_and(|key| {
        let mut m = mac(&key);
        m.update(b.message().as_bytes());
        hex::decode(&b.signature).is_ok_and(|s| m.verify_slice(&s).is_ok())
    });
    if !signed {
        out.push(Mismatch::Signature { key: path });
    }
    let show = |u: Option<Uuid>| u.map_or_else(|| "none".to_string(), |u| u.to_string());
    let fields = [
        ("id", run.id.to_string(), b.run.to_string()),
        ("plan_sha", run.plan_sha.clone(), b.plan_sha.clone()),
        ("approval_id", show(run.approval_id), b.approval.to_string()),
        (
            "started_at",
            run.started_at.to_rfc3339(),
            b.started_at.to_rfc3339(),
        ),
        ("resumes", show(resumes), show(b.resumes)),
    ];
    for (field, row, signed) in fields {
        if row != signed {
            out.push(Mismatch::Field { field, row, signed });
        }
    }
    out
}

/// The approval's own signature, its expiry at the run's start, and that
/// it approves what the binding says it does.
fn check_approval(a: &Approval, run: &RunRow, b: Option<&Binding>) -> Vec<Mismatch> {
    let mut out = Vec::new();
    if let Err(r) = check_signed(a) {
        out.push(Mismatch::Approval {
            approval: a.id,
            why: r.to_string(),
        });
    }
    if run.started_at >= a.expires_at {
        out.push(Mismatch::Expired {
            approval: a.id,
            expires_at: a.expires_at,
            started_at: run.started_at,
        });
    }
    if let Some(b) = b.filter(|b| b.approval == a.id && b.approved != target(a)) {
        out.push(Mismatch::Field {
            field: "approved",
            row: target(a),
            signed: b.approved.clone(),
        });
    }
    out
}

/// Runs other than `run` that name `approval` but do not lead, through the
/// runs they resume, to `consumer`, the run that used it: a second run
/// from one approval (its use record deleted) or a run pointed at it.
/// `named` is (id, resumes, start) of every run naming the approval.
fn others_naming(
    approval: Uuid,
    run: Uuid,
    consumer: Uuid,
    named: &[(Uuid, Option<Uuid>, DateTime<Utc>)],
) -> Vec<Mismatch> {
    let resumes = |id: Uuid| named.iter().find(|n| n.0 == id).and_then(|n| n.1);
    let leads_to_consumer = |start: Uuid| {
        let mut at = Some(start);
        // A chain is at most as long as the runs naming the approval.
        for _ in 0..=named.len() {
            match at {
                Some(id) if id == consumer => return true,
                Some(id) => at = resumes(id),
                None => return false,
            }
        }
        false
    };
    named
        .iter()
        .filter(|n| n.0 != run && !leads_to_consumer(n.0))
        .map(|n| Mismatch::AlsoNamedBy {
            approval,
            other: n.0,
        })
        .collect()
}

/// The contract SHAs `a` covers: its plan's stored contracts, which must
/// hash to the plan's SHA, or its one contract.
///
/// # Errors
/// Database errors; the mismatch (inside `Ok`).
async fn covered(pool: &sqlx::PgPool, a: &Approval) -> sqlx::Result<Result<Vec<String>, Mismatch>> {
    Ok(match (&a.plan_sha, &a.contract_sha) {
        (Some(plan), _) => {
            let shas = crate::ledger::plans::plan_contracts(pool, plan).await?;
            if Plan::sha_of(shas.iter().map(String::as_str)) == *plan {
                Ok(shas)
            } else {
                Err(Mismatch::PlanHash { plan: plan.clone() })
            }
        }
        (None, Some(contract)) => Ok(vec![contract.clone()]),
        (None, None) => Err(Mismatch::NoTarget { approval: a.id }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    #[test]
    fn a_second_run_outside_the_resume_chain_is_named() {
        let (r1, r2, r3, other) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        let a = Uuid::new_v4();
        // r2 resumes r1, r3 resumes r2: one chain, r1 used the approval.
        let chain = vec![
            (r1, None, at(1)),
            (r2, Some(r1), at(2)),
            (r3, Some(r2), at(3)),
        ];
        assert!(others_naming(a, r3, r1, &chain).is_empty());
        // A new run under the same approval leads nowhere: named.
        let mut two = chain.clone();
        two.push((other, None, at(4)));
        assert_eq!(
            others_naming(a, r3, r1, &two),
            vec![Mismatch::AlsoNamedBy { approval: a, other }]
        );
        // Seen from the second run (its own use record after a deletion),
        // the first run and its chain are named.
        assert_eq!(others_naming(a, other, other, &two).len(), 3);
    }

    #[test]
    fn no_binding_past_expiry_or_without_a_use() {
        let a = Approval {
            id: Uuid::new_v4(),
            plan_sha: Some("p".into()),
            contract_sha: None,
            created_at: at(0),
            expires_at: at(100),
            used_by: None,
            repo: "r".into(),
            signature: None,
        };
        let facts = |started: i64, used: bool| BindingFacts {
            run: Uuid::new_v4(),
            plan_sha: "p".into(),
            approval_id: a.id,
            started_at: at(started),
            resumes: None,
            used: used.then(|| (Uuid::new_v4(), at(started))),
        };
        // The server's clock at the run's start decides, not the host's.
        assert!(matches!(
            bind(&a, &facts(100, true)),
            Err(Refusal::Expired { .. })
        ));
        assert!(matches!(
            bind(&a, &facts(50, false)),
            Err(Refusal::Unverified { .. })
        ));
    }

    #[test]
    fn every_signed_fact_changes_the_message() {
        let b = Binding {
            run: Uuid::nil(),
            plan_sha: "p".into(),
            approval: Uuid::nil(),
            approved: "p".into(),
            started_at: at(10),
            resumes: None,
            used_by: Uuid::nil(),
            used_at: at(10),
            signature: String::new(),
        };
        let edits: [fn(&mut Binding); 8] = [
            |b| b.run = Uuid::max(),
            |b| b.plan_sha = "q".into(),
            |b| b.approval = Uuid::max(),
            |b| b.approved = "q".into(),
            |b| b.started_at = at(11),
            |b| b.resumes = Some(Uuid::nil()),
            |b| b.used_by = Uuid::max(),
            |b| b.used_at = at(11),
        ];
        for edit in edits {
            let mut c = b.clone();
            edit(&mut c);
            assert_ne!(b.message(), c.message());
        }
    }
}
