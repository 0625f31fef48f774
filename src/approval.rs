//! Approval rules (docs/contract.md).
//!
//! An approval binds to one plan SHA (or, for `run`, one contract SHA). It is
//! a ledger row that is never updated, expires 24 hours after it was given and
//! is consumed by exactly one run (a separate `approval_uses` row whose primary
//! key is the approval id). There is no standing approval. This module decides
//! whether an approval may start a run; storing rows is the ledger's job.
//!
//! Each approval is signed (HMAC-SHA256) with a key that `approve` creates in
//! nightshift's data directory ([`KEY_FILE`], mode 0600): anyone who can
//! reach the database but not that file (an agent running as `agent_user`)
//! cannot forge one. An unsigned or wrongly signed approval is refused
//! (docs/contract.md, docs/security.md); losing the key only means approving
//! again.
//!
//! A run is bound to its approval by a second signature ([`binding`]):
//! every host that joins or resumes a run checks that binding.

pub mod binding;

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use chrono::{DateTime, Duration, Utc};
use hmac::{KeyInit, Mac};
use uuid::Uuid;

use crate::ledger::approvals::{self as ledger};

/// The key's file name in the data directory.
pub const KEY_FILE: &str = "approval.key";

/// How long an approval stays valid after it was given.
pub const TTL_HOURS: i64 = 24;

/// An approval as the ledger stores it: the domain uses the ledger's row
/// as it is (the same eight fields; a copy only had to be kept in step).
pub use crate::ledger::approvals::ApprovalRow as Approval;

/// Why an approval cannot start a run. Each maps to exit code 3.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Refusal {
    /// Nothing approved matches.
    #[error(
        "no valid approval for plan {plan_sha}: approve it with `nightshift approve {plan_sha}`"
    )]
    Missing { plan_sha: String },
    /// `run ITEM`: nothing usable approves that item (its contract or the plan).
    #[error(
        "no valid approval for item {index}: approve it with `nightshift approve {contract_sha}` (or the whole plan: `nightshift approve {plan_sha}`)"
    )]
    MissingItem {
        index: usize,
        contract_sha: String,
        plan_sha: String,
    },
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
    /// Not signed by this data directory's key (inserted by someone else, or
    /// given before approvals were signed).
    #[error(
        "the approval of {sha} is not signed: it was not given by `nightshift approve` with the key in {key}; approve again with `nightshift approve {sha}`"
    )]
    Unsigned { sha: String, key: PathBuf },
    /// Signed, but not by this key (forged, or the key was replaced or lost).
    #[error(
        "the approval of {sha} has a wrong signature for the key in {key} (forged, or the key was replaced or lost); approve again with `nightshift approve {sha}`"
    )]
    BadSignature { sha: String, key: PathBuf },
    /// A run's binding to its approval does not verify
    /// (docs/contract.md#the-runs-binding): its row was edited by someone
    /// without the approval key, or it was started before runs were bound.
    #[error(
        "run {run} (approval {approval}) does not verify: {}. Nothing of it was run and no ledger row was lost. Do not resume or join it: approve the current plan (`nightshift plan`, then `nightshift approve <PLAN_SHA>`) and start a new run with `nightshift drain`; see docs/security.md for what a ledger writer without the key can do",
        binding::listed(problems)
    )]
    Unverified {
        run: Uuid,
        approval: String,
        problems: Vec<binding::Mismatch>,
    },
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

/// Checks that `a` may start a new run at `now` (UTC): unused, unexpired,
/// and signed by the installed key ([`install_key`]).
///
/// # Errors
/// [`Refusal::Used`], [`Refusal::Expired`], [`Refusal::Unsigned`] or
/// [`Refusal::BadSignature`].
pub fn check_usable(a: &Approval, now: DateTime<Utc>) -> Result<(), Refusal> {
    let sha = target(a);
    if let Some(run) = a.used_by {
        return Err(Refusal::Used { sha, run });
    }
    if now >= a.expires_at {
        return Err(Refusal::Expired {
            sha,
            expires_at: a.expires_at,
        });
    }
    check_signed(a)
}

/// Whether a crashed run may be resumed under its approval at `now`:
/// only while the approval is younger than 24 h (docs/contract.md#approval).
pub fn may_resume(a: &Approval, now: DateTime<Utc>) -> bool {
    now < a.expires_at && check_signed(a).is_ok()
}

/// A 32-byte approval key.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(****)")
    }
}

/// Why the key could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file is unreadable, not a regular file, or not 64 hex digits.
    #[error("approval key {}: {why}; remove it and approve again (a new key is made)", path.display())]
    Bad { path: PathBuf, why: String },
    /// Others than its owner may read it.
    #[error("approval key {}: readable by others (mode {mode:o}); run `chmod 600 {}`", path.display(), path.display())]
    Open { path: PathBuf, mode: u32 },
    /// Writing a new key failed.
    #[error("approval key {}: cannot create it: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where the key of the data directory `data_dir` lives.
pub fn key_path(data_dir: &Path) -> PathBuf {
    data_dir.join(KEY_FILE)
}

/// The key in `data_dir`, if there is one.
///
/// # Errors
/// [`KeyError::Bad`] for a file that is not a 0600 regular file of 64 hex
/// digits, [`KeyError::Open`] when group or others may read it.
pub fn load_key(data_dir: &Path) -> Result<Option<Key>, KeyError> {
    use std::os::unix::fs::PermissionsExt;
    let path = key_path(data_dir);
    let bad = |why: String| KeyError::Bad {
        path: path.clone(),
        why,
    };
    let text = match crate::file::read_regular_text(&path, 1024) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let mode = std::fs::metadata(&path)
        .map_err(|e| bad(e.to_string()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(KeyError::Open {
            path,
            mode: mode & 0o777,
        });
    }
    let bytes = hex::decode(text.trim()).map_err(|e| bad(e.to_string()))?;
    let key: [u8; 32] = bytes.try_into().map_err(|_| bad("not 32 bytes".into()))?;
    Ok(Some(Key(key)))
}

/// The key in `data_dir`, made (32 random bytes, hex, mode 0600) when there
/// is none yet; `approve` calls it.
///
/// # Errors
/// Those of [`load_key`], and [`KeyError::Create`].
pub fn load_or_create_key(data_dir: &Path) -> Result<Key, KeyError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(key) = load_key(data_dir)? {
        return Ok(key);
    }
    let path = key_path(data_dir);
    let create = |source| KeyError::Create {
        path: path.clone(),
        source,
    };
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| create(std::io::Error::other(e.to_string())))?;
    std::fs::create_dir_all(data_dir).map_err(create)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(create)?;
    file.write_all(format!("{}\n", hex::encode(key)).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(create)?;
    Ok(Key(key))
}

/// The key [`check_usable`] and [`may_resume`] verify with, and its path:
/// installed once by the command that reads approvals (`drain`, `run`,
/// `report`) so that every check in the run loop sees it.
static INSTALLED: RwLock<Option<(Option<Key>, PathBuf)>> = RwLock::new(None);

/// Installs the key of `data_dir` (or its absence) for [`check_usable`].
pub fn install_key(key: Option<Key>, path: PathBuf) {
    *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = Some((key, path));
}

/// The installed key (if any) and its path ([`install_key`]).
fn installed_key() -> (Option<Key>, PathBuf) {
    let installed = INSTALLED.read().unwrap_or_else(|e| e.into_inner());
    match installed.as_ref() {
        Some((key, path)) => (key.clone(), path.clone()),
        None => (None, PathBuf::from(KEY_FILE)),
    }
}

/// Whether a key is installed: a host without one verifies nothing.
pub fn key_installed() -> bool {
    installed_key().0.is_some()
}

/// The SHA `a` approves: its plan's, else its contract's.
fn target(a: &Approval) -> String {
    a.plan_sha
        .clone()
        .or_else(|| a.contract_sha.clone())
        .unwrap_or_default()
}

/// What an approval's signature covers: every field that decides what it
/// lets run and until when (timestamps in microseconds, as the ledger keeps
/// them).
pub fn signed_message(a: &Approval) -> String {
    format!(
        "nightshift approval v1\nid {}\nrepo {}\nplan {}\ncontract {}\ncreated {}\nexpires {}\n",
        a.id,
        a.repo,
        a.plan_sha.as_deref().unwrap_or("-"),
        a.contract_sha.as_deref().unwrap_or("-"),
        a.created_at.timestamp_micros(),
        a.expires_at.timestamp_micros()
    )
}

fn mac(key: &Key) -> hmac::Hmac<sha2::Sha256> {
    <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&key.0)
        .expect("HMAC takes a key of any length")
}

/// The hex signature of `a` by `key`.
pub fn sign(key: &Key, a: &Approval) -> String {
    let mut m = mac(key);
    m.update(signed_message(a).as_bytes());
    hex::encode(m.finalize().into_bytes())
}

/// Whether `a` carries a valid signature by the installed key.
///
/// # Errors
/// [`Refusal::Unsigned`] (no signature, or no key to check it with: the
/// key was lost) or [`Refusal::BadSignature`].
pub fn check_signed(a: &Approval) -> Result<(), Refusal> {
    let sha = target(a);
    let (key, path) = installed_key();
    let Some(signature) = a.signature.as_deref() else {
        return Err(Refusal::Unsigned { sha, key: path });
    };
    let Some(key) = key else {
        return Err(Refusal::BadSignature { sha, key: path });
    };
    let mut m = mac(&key);
    m.update(signed_message(a).as_bytes());
    match hex::decode(signature) {
        Ok(bytes) if m.verify_slice(&bytes).is_ok() => Ok(()),
        _ => Err(Refusal::BadSignature { sha, key: path }),
    }
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
    // Sets, not scans: both plans may hold 20,000 items.
    let approved_keys: std::collections::HashSet<&str> =
        approved.iter().map(|a| a.key.as_str()).collect();
    let current_keys: std::collections::HashSet<&str> =
        current.iter().map(|c| c.key.as_str()).collect();
    let in_approved = |k: &str| approved_keys.contains(k);
    let in_current = |k: &str| current_keys.contains(k);
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

/// Finds the approval to run under (docs/contract.md#approval).
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
    plan: &crate::plan::Plan,
    item: Option<usize>,
    explicit: Option<&str>,
    now: DateTime<Utc>,
) -> sqlx::Result<Result<(Approval, Vec<String>), Refusal>> {
    if let Some(sha) = explicit {
        let list = approvals_of(pool, repo_id, sha).await?;
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
    // `--approve` (docs/contract.md#approval), as a plan approval serves `drain`.
    if let Some(i) = item
        && let Some(e) = plan.entries.iter().find(|e| e.index == i)
    {
        let list = approvals_of(pool, repo_id, &e.contract_sha).await?;
        if let Some(a) = list.iter().find(|a| {
            a.contract_sha.as_deref() == Some(e.contract_sha.as_str())
                && check_usable(a, now).is_ok()
        }) {
            return Ok(Ok((a.clone(), vec![e.contract_sha.clone()])));
        }
    }
    let list = usable_plan_approvals(pool, repo_id, now).await?;
    if let Some(a) = list
        .iter()
        .find(|a| a.plan_sha.as_deref() == Some(plan.sha.as_str()))
    {
        return approved_set(pool, plan, item, a.clone()).await;
    }
    let current = current_shas(plan);
    for a in &list {
        let shas =
            crate::ledger::plans::plan_contracts(pool, a.plan_sha.as_deref().unwrap_or("")).await?;
        if shas.iter().any(|s| current.contains(&s.as_str())) {
            return Ok(Ok((a.clone(), shas)));
        }
    }
    // `run ITEM`: name what to approve now, this item's contract, rather
    // than an older plan approval that was used (docs/contract.md).
    if let Some(e) = item.and_then(|i| plan.entries.iter().find(|e| e.index == i)) {
        return Ok(Err(Refusal::MissingItem {
            index: e.index,
            contract_sha: e.contract_sha.clone(),
            plan_sha: plan.sha.clone(),
        }));
    }
    // This very plan was approved, but the approval is used up or expired:
    // say which, rather than that none was given.
    if let Some(a) = approvals_of(pool, repo_id, &plan.sha).await?.first()
        && let Err(r) = check_usable(a, now)
    {
        return Ok(Err(r));
    }
    Ok(Err(Refusal::Missing {
        plan_sha: plan.sha.clone(),
    }))
}

/// The contract SHAs of `plan` an approval may hold: its sealed tend
/// cards' (docs/github.md "The second night") and its items'.
fn current_shas(plan: &crate::plan::Plan) -> Vec<&str> {
    plan.tend
        .iter()
        .filter_map(|c| c.sealed.as_ref().map(|s| s.sha.as_str()))
        .chain(plan.entries.iter().map(|e| e.contract_sha.as_str()))
        .collect()
}

async fn approved_set(
    pool: &sqlx::PgPool,
    plan: &crate::plan::Plan,
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
        crate::ledger::plans::plan_contracts(pool, a.plan_sha.as_deref().unwrap_or("")).await?;
    if !current_shas(plan)
        .iter()
        .any(|c| shas.iter().any(|s| s == c))
    {
        return Ok(Err(Refusal::OtherPlan {
            sha: a.plan_sha.clone().unwrap_or_default(),
            plan_sha: plan.sha.clone(),
        }));
    }
    Ok(Ok((a, shas)))
}

/// Gives a new approval of a plan (or, with `is_contract`, of one contract)
/// for `repo`, signed with `key` ([`sign`]), stores it as given by `by`
/// and records the `approved` event (docs/ledger.md#events).
///
/// # Errors
/// Database errors.
pub async fn give(
    pool: &sqlx::PgPool,
    repo: &str,
    sha: &str,
    is_contract: bool,
    by: &str,
    key: &Key,
) -> sqlx::Result<Approval> {
    use chrono::SubsecRound;
    // An approval's 24 h are the ledger server's, as every host that uses
    // or resumes under it judges them (docs/workers.md#what-clocks-must-agree);
    // the ledger keeps microseconds: sign what it will give back.
    let (_, server) = crate::queue::sync_clock(pool).await?;
    let now = server.trunc_subsecs(6);
    let mut a = Approval {
        id: Uuid::new_v4(),
        plan_sha: (!is_contract).then(|| sha.to_string()),
        contract_sha: is_contract.then(|| sha.to_string()),
        created_at: now,
        expires_at: expiry(now),
        used_by: None,
        repo: repo.to_string(),
        signature: None,
    };
    a.signature = Some(sign(key, &a));
    ledger::insert_approval(pool, &a, by).await?;
    crate::ledger::events::event(
        pool,
        None,
        crate::outcome::Event::Approved.as_str(),
        serde_json::json!({"sha": sha, "approval": a.id, "by": by}),
    )
    .await?;
    Ok(a)
}

/// Approvals of `sha` (plan or contract) for `repo`, newest first.
///
/// # Errors
/// Database errors.
pub async fn approvals_of(
    pool: &sqlx::PgPool,
    repo: &str,
    sha: &str,
) -> sqlx::Result<Vec<Approval>> {
    ledger::approvals_of(pool, repo, sha).await
}

/// One approval by id.
///
/// # Errors
/// Database errors.
pub async fn by_id(pool: &sqlx::PgPool, id: Uuid) -> sqlx::Result<Option<Approval>> {
    ledger::approval_by_id(pool, id).await
}

/// Unused, unexpired plan approvals of `repo` with a valid signature
/// ([`check_signed`]), newest first.
async fn usable_plan_approvals(
    pool: &sqlx::PgPool,
    repo: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<Vec<Approval>> {
    let rows = ledger::usable_plan_approvals(pool, repo, now).await?;
    Ok(rows
        .into_iter()
        .filter(|a| check_signed(a).is_ok())
        .collect())
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

    fn key() -> Key {
        Key([7u8; 32])
    }

    fn approval(age_h: i64, used: bool) -> Approval {
        install_key(Some(key()), PathBuf::from("/data/approval.key"));
        let created = Utc::now() - Duration::hours(age_h);
        let mut a = Approval {
            id: Uuid::new_v4(),
            plan_sha: Some("ab".into()),
            contract_sha: None,
            created_at: created,
            expires_at: expiry(created),
            used_by: used.then(Uuid::new_v4),
            repo: "r".into(),
            signature: None,
        };
        a.signature = Some(sign(&key(), &a));
        a
    }

    #[test]
    fn unsigned_and_wrongly_signed_are_refused() {
        let good = approval(1, false);
        let mut unsigned = good.clone();
        unsigned.signature = None;
        assert!(matches!(
            check_usable(&unsigned, Utc::now()),
            Err(Refusal::Unsigned { .. })
        ));
        // Every signed field counts: another plan, a later expiry.
        let mut other = good.clone();
        other.plan_sha = Some("cd".into());
        let mut longer = good.clone();
        longer.expires_at += Duration::hours(48);
        let mut other_key = good.clone();
        other_key.signature = Some(sign(&Key([8u8; 32]), &good));
        for a in [other, longer, other_key] {
            assert!(matches!(
                check_usable(&a, Utc::now()),
                Err(Refusal::BadSignature { .. })
            ));
            assert!(!may_resume(&a, Utc::now()));
        }
    }

    #[test]
    fn a_new_key_is_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        assert!(load_key(dir.path()).unwrap().is_none());
        let made = load_or_create_key(dir.path()).unwrap();
        let path = key_path(dir.path());
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_key(dir.path()).unwrap().unwrap().0, made.0);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(load_key(dir.path()), Err(KeyError::Open { .. })));
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
