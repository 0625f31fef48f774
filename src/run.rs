//! A run: one approved plan drained item by item (SPEC §4–§7).
//!
//! [`drain`] takes the snapshot's plan, finds the approval it runs under
//! (or the crashed run it resumes), takes the repository lock, and walks the
//! plan in backlog order: blocked, unapproved, already-PR'd and over-attempted
//! items are recorded without running; the others go through the item loop
//! of SPEC §5 — checkout, setup, writer ↔ proof ↔ gate ↔ reviewer rounds
//! within the limits, then commit, push and one PR. The deadline, usage-limit
//! sleeps and signals stop it cleanly. Everything is recorded in the ledger as
//! it happens, so a killed run can be resumed; a ledger that goes away is
//! waited for ([`Night::db`]), and a failure of the environment (an agent that
//! cannot start, a data directory full, read-only or gone) stops the run as
//! `crashed`, for the next drain to resume. This module decides; the
//! backends (agents, git, GitHub, PostgreSQL) live in their own modules.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::agent::{self, Role};
use crate::approval::{Approval, Refusal};
use crate::config::{self, Config};
use crate::contract::{Plan, PlanEntry};
use crate::error::Error;
use crate::forge::{Forge, PrState};
use crate::gate::{self, GateRun, GateSpec};
use crate::ledger::records::{self as rec, ItemEnd};
use crate::limit::{self, LimitKind};
use crate::outcome::{Outcome, Phase, PrRecord, RoundResult, RunKind, RunStatus};
use crate::proof::{Proof, RoundStart};
use crate::report::{self, Evidence, RoundSummary};
use crate::review::{self, Decision};
use crate::schedule;
use crate::slot::{self, Slot};

/// Rounds in a row with the same diff and the same failure that mean no
/// progress (SPEC §5.6).
pub const NO_PROGRESS_ROUNDS: usize = 3;

/// GitHub's limit on one file (bytes); larger files make a push fail.
pub const MAX_FILE_BYTES: u64 = 100 * 1024 * 1024;

/// Short retries of a throttled call before it counts as a failure.
const MAX_THROTTLE_RETRIES: u32 = 5;

/// What a run needs from the outside world, resolved by the CLI.
pub struct Night {
    /// The user's repository root (never written to).
    pub repo: PathBuf,
    /// Repository identity in the ledger and for the lock (its remote URL, see `cli::repo_id`).
    pub repo_id: String,
    /// The config.
    pub config: Config,
    /// The snapshot's plan.
    pub plan: Plan,
    /// Ledger pool.
    pub pool: PgPool,
    /// Resolved zone.
    pub tz: Tz,
    /// Deadline (UTC).
    pub deadline: DateTime<Utc>,
    /// Data directory (slots, logs).
    pub data_dir: PathBuf,
    /// GitHub, when a token and a GitHub repo are known.
    pub forge: Option<Forge>,
    /// Why there is no forge (shown in the report).
    pub forge_missing: Option<String>,
    /// Set once GitHub stayed unreachable after the forge's retries: later
    /// items do their work without waiting for it again, and their pushed
    /// branches are recorded `pr_failed` (retried by the next run).
    pub forge_down: std::sync::Mutex<Option<String>>,
    /// The GitHub token, kept in memory only (used by `git push` through the
    /// askpass helper).
    pub token: Option<crate::secret::Secret>,
    /// Environment of agent calls (no tokens, no ledger URL, no secrets).
    pub agent_env: BTreeMap<String, String>,
    /// Environment of gate commands (agent env + `gate_env`).
    pub gate_env: BTreeMap<String, String>,
    /// Secret values to redact.
    pub secrets: Vec<String>,
    /// Unprivileged account for agents and gates.
    pub run_as: Option<crate::process::RunAs>,
    /// Cancelled on SIGINT/SIGTERM.
    pub cancel: CancellationToken,
    /// Clock (injectable for tests of sleeps).
    pub clock: std::sync::Arc<dyn schedule::Clock>,
    /// The branches this run pushed, with the files each changes: a later
    /// PR touching the same files says so (merge order).
    pub pushed: std::sync::Mutex<Vec<report::Overlap>>,
    /// Set once the remote could not be fetched: later items are not tried
    /// against it (each would wait out the same network timeout).
    pub remote_down: std::sync::Mutex<Option<String>>,
    /// The remote's (fetch URL, push URL) as they were when the run started;
    /// every item fetches and pushes there.
    pub remote_urls: (String, String),
    /// The connected ledger, to reconnect and take the lock again after an
    /// outage (SPEC §9).
    pub ledger: crate::ledger::Ledger,
    /// Where the ledger lives (an embedded cluster is restarted by the run
    /// that finds it dead).
    pub db_source: crate::ledger::DbSource,
    /// The one-drain-per-repo lock; `None` only after it was lost.
    pub lock: tokio::sync::Mutex<Option<crate::ledger::RepoLock>>,
    /// The hold on the repository's checkouts under the data directory; also
    /// how the run notices that directory was removed or filled up.
    pub slots_lock: Option<slot::SlotsLock>,
    /// Set when something outside the items stops the run (an agent that
    /// cannot be started, a data directory that is full, read-only or gone):
    /// the current item is recorded `interrupted`, the run `crashed`, and
    /// the next `drain` resumes it once the cause is fixed.
    pub systemic: std::sync::Mutex<Option<String>>,
    /// The commit of `<remote>/<base>` the run took at its first checkout:
    /// every item is built from it, and from it only (docs/loop.md).
    pub base_pin: std::sync::OnceLock<String>,
}

/// How long a run waits for a ledger that stopped answering before it gives
/// up (SPEC §9): enough for a restart, a failover or an upgrade of the
/// server. A signal or the deadline ends the wait sooner.
pub const LEDGER_PATIENCE: Duration = Duration::from_secs(30 * 60);

/// Which items to run.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Every item of the plan (`drain`).
    All,
    /// One item by plan index (`run`).
    One(usize),
}

impl Selection {
    /// The plan index of the one item, for `run`.
    pub fn item(&self) -> Option<usize> {
        match self {
            Selection::All => None,
            Selection::One(i) => Some(*i),
        }
    }
}

/// How the run ended, for the CLI.
#[derive(Debug)]
pub struct RunEnd {
    /// Run id.
    pub run_id: Uuid,
    /// Final status.
    pub status: RunStatus,
    /// How the command ends: `Ok` when the run completed (or the deadline
    /// stopped it) without a failed item, else [`Error::RunEnded`].
    pub result: Result<(), Error>,
    /// What outside the items stopped the run (status `crashed`), if anything.
    pub stopped_by: Option<String>,
}

/// Drains the plan (or one item of it) under an approval.
///
/// The caller holds the repository lock. `resume` is a crashed run whose
/// approval is still valid: the new run takes it up without consuming
/// another approval and skips the items that run finished.
///
/// # Errors
/// Refusals (exit 3) and systemic failures (exit 1) as [`Error`]; item
/// failures are outcomes, not errors.
pub async fn drain(
    night: &Night,
    selection: Selection,
    approval: &Approval,
    approved: &[String],
    resume: Option<&rec::RunRow>,
) -> Result<RunEnd, Error> {
    let pool = &night.pool;
    let kind = match selection {
        Selection::All => RunKind::Drain,
        Selection::One(_) => RunKind::Run,
    };
    let Some(run_id) = rec::create_run(
        pool,
        &rec::NewRun {
            repo: &night.repo_id,
            kind,
            plan_sha: &night.plan.sha,
            approval_id: approval.id,
            consume: resume.is_none(),
            resumes: resume.map(|r| r.id),
            deadline: night.deadline,
            timezone: night.tz.name(),
            agents_as_root: night.run_as.is_none() && nix::unistd::geteuid().is_root(),
        },
    )
    .await?
    else {
        let run = night
            .db(|| rec::approval_used_by(&night.pool, approval.id))
            .await?
            .unwrap_or_default();
        return Err(Refusal::Used {
            sha: approval
                .plan_sha
                .clone()
                .or(approval.contract_sha.clone())
                .unwrap_or_default(),
            run,
        }
        .into());
    };
    night.db(|| rec::event(pool, Some(run_id), "run_started", json!({"plan_sha": night.plan.sha, "approval": approval.id, "resumes": resume.map(|r| r.id), "deadline": night.deadline}))).await?;
    // Items the crashed run finished, carried over as they ended (SPEC §9):
    // an interrupted item runs again, a pushed one without its PR gets it.
    let finished_before: BTreeMap<String, rec::ItemRow> = match resume {
        Some(r) => night
            .db(|| rec::run_items(pool, r.id))
            .await?
            .into_iter()
            .filter(|i| i.outcome.is_some_and(|o| !o.resumes()))
            .map(|i| (i.item_key.clone(), i))
            .collect(),
        None => BTreeMap::new(),
    };

    let mut failures = 0usize;
    let mut run_cost = 0.0f64;
    let mut status = RunStatus::Completed;
    let entries: Vec<&PlanEntry> = match selection {
        Selection::All => night.plan.entries.iter().collect(),
        Selection::One(i) => night.plan.entries.iter().filter(|e| e.index == i).collect(),
    };
    let mut stopped_by = None;
    for entry in entries {
        if night.cancel.is_cancelled() {
            status = RunStatus::StoppedSignal;
            break;
        }
        let carried_over = finished_before.get(&entry.item.key);
        // Before work starts: the lock still ours, the data directory still
        // usable. A run that cannot write its checkouts stops here rather
        // than fail every item in turn.
        if carried_over.is_none() {
            night.hold_lock().await?;
            if let Some(why) = night.systemic_problem() {
                status = RunStatus::Crashed;
                stopped_by = Some(why);
                break;
            }
        }
        let item_id = night
            .db(|| {
                rec::start_item(
                    pool,
                    run_id,
                    &entry.item.key,
                    &entry.contract_sha,
                    entry.index,
                    &entry.item.title,
                )
            })
            .await?;
        let end = if let Some(prev) = carried_over {
            carried(prev, resume.map(|r| r.id).unwrap_or_default())
        } else if status == RunStatus::StoppedDeadline || night.clock.now() >= night.deadline {
            status = RunStatus::StoppedDeadline;
            ItemEnd {
                reason: Some(format!(
                    "not started before the deadline {}",
                    local(night.deadline, night.tz)
                )),
                ..ItemEnd::of(Outcome::Deadline)
            }
        } else {
            let mut end = one_item(night, run_id, item_id, entry, approved, &mut run_cost).await?;
            // A failure the environment caused (the disk filled up, the data
            // directory went away, the agent's executable vanished) is not
            // the item's: it is not an attempt of it, and the run stops, to
            // be resumed once the cause is fixed.
            let systemic = if !end.outcome.fails_run() || end.outcome == Outcome::PrFailed {
                None
            } else {
                night.systemic_problem()
            };
            // An item whose broken rule is the stop's cause (an agent's
            // push) keeps its outcome.
            if let Some(why) = systemic.clone().filter(|why| {
                end.outcome == Outcome::RuleBroken
                    && end
                        .reason
                        .as_deref()
                        .is_some_and(|r| r.contains(why.as_str()))
            }) {
                status = RunStatus::Crashed;
                stopped_by = Some(why);
            } else if let Some(why) = systemic {
                let own = end
                    .reason
                    .take()
                    .filter(|r| !r.is_empty() && !why.contains(r.as_str()));
                end.outcome = Outcome::Interrupted;
                end.reason = Some(format!(
                    "stopped: {why}{}",
                    own.map(|r| format!(" (the item's own error: {r})"))
                        .unwrap_or_default()
                ));
                status = RunStatus::Crashed;
                stopped_by = Some(why);
            }
            if end.outcome == Outcome::Deadline {
                status = RunStatus::StoppedDeadline;
            }
            if end.outcome == Outcome::Interrupted && status != RunStatus::Crashed {
                status = RunStatus::StoppedSignal;
            }
            end
        };
        if end.outcome.fails_run() {
            failures += 1;
        }
        night.db(|| rec::finish_item(pool, item_id, &end)).await?;
        night
            .db(|| {
                rec::event(
                    pool,
                    Some(run_id),
                    "item_finished",
                    json!({"key": entry.item.key, "outcome": end.outcome, "reason": end.reason}),
                )
            })
            .await?;
        if status.fails_run() {
            break;
        }
    }
    if let Some(why) = &stopped_by {
        night
            .db(|| rec::event(pool, Some(run_id), "run_stopped", json!({"reason": why})))
            .await?;
    }
    let result = Error::of_run(status, failures);
    let code = crate::error::exit_code(&result);
    night
        .db(|| rec::finish_run(pool, run_id, status, code as i32))
        .await?;
    Ok(RunEnd {
        run_id,
        status,
        result,
        stopped_by,
    })
}

/// The end of an item the crashed run `from` finished, as this run records
/// it. Its reason starts with [`rec::CARRIED_REASON`], so `max_attempts`
/// counts the attempt once, not once per resume.
fn carried(prev: &rec::ItemRow, from: Uuid) -> ItemEnd {
    ItemEnd {
        // Always set: only items that ended are carried over.
        outcome: prev.outcome.unwrap_or(Outcome::Error),
        reason: Some(format!(
            "{} {from}{}",
            rec::CARRIED_REASON,
            prev.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        )),
        question: prev.question.clone(),
        branch: prev.branch.clone(),
        pr_number: prev.pr_number.map(|n| n as u64),
        pr_url: prev.pr_url.clone(),
        rounds: prev.rounds.max(0) as u32,
        tokens: prev.tokens.max(0) as u64,
        cost_usd: prev.cost_usd,
        pr_body: prev.pr_body.clone(),
    }
}

fn local(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string()
}

/// Decides what happens to one plan entry and runs it if it should run.
async fn one_item(
    night: &Night,
    run_id: Uuid,
    item_id: i64,
    entry: &PlanEntry,
    approved: &[String],
    run_cost: &mut f64,
) -> Result<ItemEnd, Error> {
    let pool = &night.pool;
    let key = &entry.item.key;
    if let Some(b) = &entry.blocked {
        return Ok(ItemEnd {
            reason: Some(b.clone()),
            question: entry.contract.questions.first().cloned(),
            ..ItemEnd::of(Outcome::Blocked)
        });
    }
    if !approved.contains(&entry.contract_sha) {
        // Changed (same key, or a reworded item where a gone one sat) or added.
        let held = night.db(|| rec::contract_items(pool, approved)).await?;
        let current: Vec<crate::approval::Held> = night
            .plan
            .entries
            .iter()
            .map(|e| crate::approval::Held {
                key: e.item.key.clone(),
                title: e.item.title.clone(),
            })
            .collect();
        let why = crate::approval::why_not_approved(&held, &current, key);
        return Ok(ItemEnd {
            reason: Some(why.reason().into()),
            ..ItemEnd::of(Outcome::NotApproved)
        });
    }
    let branch = slot::branch_name(&entry.item.title, key);
    // An earlier PR of this item (ledger, confirmed on GitHub). GitHub may
    // be slow or retried: `status` says so rather than a stale phase.
    night
        .db(|| rec::set_phase(pool, run_id, Phase::Github, Some(key), None))
        .await?;
    if let Some(end) = earlier_pr(night, run_id, entry, &branch).await? {
        return Ok(end);
    }
    // A question the writer asked of this contract waits for its answer
    // (an edit of the item), instead of costing a writer call every night.
    if let Some((q, asked_in, at)) = night
        .db(|| rec::open_question(pool, &night.repo_id, key, &entry.contract_sha))
        .await?
    {
        let when = at
            .map(|t| format!(" on {}", local(t, night.tz)))
            .unwrap_or_default();
        return Ok(ItemEnd {
            reason: Some(format!(
                "waiting for an answer to the writer's question (asked in run {}{when}); answer it in the item (a detail line, or `accept:`) and the changed item runs again",
                &asked_in.to_string()[..8]
            )),
            question: Some(q),
            ..ItemEnd::of(Outcome::Blocked)
        });
    }
    let attempts = night
        .db(|| rec::failed_attempts(pool, &night.repo_id, key, &entry.contract_sha))
        .await?;
    let max_attempts = night.config.limits.max_attempts as i64;
    if attempts >= max_attempts {
        return Ok(ItemEnd {
            reason: Some(format!(
                "failed on {attempts} earlier run(s) with this contract (max_attempts = {max_attempts}); read its last report, then edit the item (a new contract starts over) or raise max_attempts"
            )),
            ..ItemEnd::of(Outcome::Blocked)
        });
    }
    if *run_cost >= night.config.limits.max_cost_usd_per_run {
        return Ok(ItemEnd {
            reason: Some(format!(
                "the run's cost cap of ${:.2} is used up",
                night.config.limits.max_cost_usd_per_run
            )),
            ..ItemEnd::of(Outcome::BudgetExceeded)
        });
    }
    night
        .db(|| rec::set_phase(pool, run_id, Phase::Checkout, Some(key), None))
        .await?;
    let item_dir = night
        .data_dir
        .join("logs")
        .join(run_id.to_string())
        .join(format!("item-{:03}-{}", entry.index, &key[..8]));
    let slot_dir = slot::slot_path(&night.data_dir, &night.repo, 0);
    let token = night.token.as_ref().map(|t| t.expose().to_string());
    if let Some(why) = night.remote_down.lock().map(|g| g.clone()).unwrap_or(None) {
        return Ok(ItemEnd {
            reason: Some(format!(
                "checkout failed: not tried, the remote could not be fetched earlier in this run ({why})"
            )),
            branch: Some(branch),
            ..ItemEnd::of(Outcome::Error)
        });
    }
    let prepared = until_signal(night, |stop| {
        Slot::prepare_at(
            &slot_dir,
            &night.repo,
            &night.config.remote,
            night.remote_urls.clone(),
            &night.config.base,
            &branch,
            token.as_deref(),
            Some(stop),
        )
    })
    .await;
    let slot = match prepared {
        Ok(s) => s,
        Err(_) if night.cancel.is_cancelled() => {
            return Ok(ItemEnd {
                reason: Some("stopped by a signal while the checkout was prepared".into()),
                branch: Some(branch),
                ..ItemEnd::of(Outcome::Interrupted)
            });
        }
        Err(e) => {
            let why = night.redact(&e.to_string());
            if e.is_remote_unreachable()
                && let Ok(mut g) = night.remote_down.lock()
            {
                g.get_or_insert_with(|| why.lines().next().unwrap_or_default().to_string());
            }
            return Ok(ItemEnd {
                reason: Some(format!("checkout failed: {why}")),
                branch: Some(branch),
                ..ItemEnd::of(Outcome::Error)
            });
        }
    };
    let mut slot = slot;
    let pin = night.base_pin.get_or_init(|| slot.base_commit.clone());
    if let Err(e) = tokio::task::block_in_place(|| slot.pin_base(pin, token.as_deref())) {
        return Ok(ItemEnd {
            reason: Some(format!(
                "checkout failed: cannot check out the run's base {pin}: {}",
                night.redact(&e.to_string())
            )),
            branch: Some(branch),
            ..ItemEnd::of(Outcome::Error)
        });
    }
    let mut end = match item_loop(
        night, run_id, item_id, entry, &slot, &branch, &item_dir, run_cost,
    )
    .await
    {
        Ok(end) => end,
        Err(e) => {
            // The ledger is gone for good (or a signal came while waiting
            // for it): the next drain redoes the item from a clean checkout.
            let _ = tokio::task::block_in_place(|| slot.discard());
            return Err(e);
        }
    };
    if end.outcome != Outcome::PrOpened && end.outcome != Outcome::PrFailed {
        // A failed item leaves nothing behind (SPEC §5.6).
        if let Err(e) = tokio::task::block_in_place(|| slot.discard()) {
            end.reason = Some(format!(
                "{}; cleaning the checkout failed: {e}",
                end.reason.unwrap_or_default()
            ));
        }
    } else {
        let _ = tokio::task::block_in_place(|| slot.discard());
    }
    end.branch.get_or_insert(branch);
    Ok(end)
}

/// An earlier PR of this item: `already_open`, `already_merged`, or a
/// `pr_failed` PR opened now.
async fn earlier_pr(
    night: &Night,
    run_id: Uuid,
    entry: &PlanEntry,
    branch: &str,
) -> Result<Option<ItemEnd>, Error> {
    let pool = &night.pool;
    let key = &entry.item.key;
    let rows = night
        .db(|| rec::prs_of_item(pool, &night.repo_id, key))
        .await?;
    if let Some(forge) = night
        .forge
        .as_ref()
        .filter(|_| night.github_down().is_none())
    {
        let branches: Vec<String> = std::iter::once(branch.to_string())
            .chain(rows.iter().map(|r| r.branch.clone()))
            .collect();
        for b in &branches {
            match forge.find_pr(b, key, &night.config.label).await {
                Ok(Some(pr)) => {
                    let (outcome, state) = match pr.state {
                        PrState::Open => (Outcome::AlreadyOpen, PrRecord::Open),
                        PrState::Merged => (Outcome::AlreadyMerged, PrRecord::Merged),
                        PrState::Closed => continue,
                    };
                    night
                        .db(|| {
                            rec::upsert_pr(
                                pool,
                                &night.repo_id,
                                key,
                                &entry.contract_sha,
                                run_id,
                                &pr.head,
                                Some(pr.number),
                                Some(&pr.url),
                                state,
                                "",
                            )
                        })
                        .await?;
                    return Ok(Some(ItemEnd {
                        reason: Some(format!("PR #{} from an earlier run", pr.number)),
                        branch: Some(pr.head.clone()),
                        pr_number: Some(pr.number),
                        pr_url: Some(pr.url.clone()),
                        ..ItemEnd::of(outcome)
                    }));
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
        // Pushed earlier, PR never made (it failed, or that night had no
        // GitHub access): open it now (SPEC §8), if the branch is still there.
        if let Some(r) = rows.iter().find(|r| {
            r.state == PrRecord::PrFailed
                || (r.state == PrRecord::Planned && branch_on_remote(night, &r.branch))
        }) {
            let body = night
                .db(|| rec::pr_body(pool, &night.repo_id, key, &r.branch))
                .await?;
            return Ok(Some(open_pr(night, run_id, entry, &r.branch, &body).await?));
        }
        return Ok(None);
    }
    if let Some(r) = rows.iter().find(|r| {
        matches!(
            r.state,
            PrRecord::Open | PrRecord::Merged | PrRecord::Planned
        )
    }) {
        if r.state == PrRecord::Planned && !branch_on_remote(night, &r.branch) {
            // Without GitHub the ledger is all we know: a branch someone
            // deleted from the remote means the work is to be done again.
            night
                .db(|| rec::set_pr_state(pool, &night.repo_id, key, &r.branch, PrRecord::Gone))
                .await?;
            return Ok(None);
        }
        let outcome = if r.state == PrRecord::Merged {
            Outcome::AlreadyMerged
        } else {
            Outcome::AlreadyOpen
        };
        let why = if r.state == PrRecord::Planned {
            format!(
                "branch {} was pushed by an earlier run (no GitHub access to open its PR)",
                r.branch
            )
        } else {
            format!("PR #{} from an earlier run", r.number.unwrap_or(0))
        };
        return Ok(Some(ItemEnd {
            reason: Some(why),
            branch: Some(r.branch.clone()),
            pr_number: r.number.map(|n| n as u64),
            pr_url: r.url.clone(),
            ..ItemEnd::of(outcome)
        }));
    }
    Ok(None)
}

/// Whether `branch` exists on the configured remote (`git ls-remote`, read
/// only). An unreachable remote counts as "yes": nothing is redone on a
/// network hiccup.
fn branch_on_remote(night: &Night, branch: &str) -> bool {
    let token = night.token.as_ref().map(|t| t.expose().to_string());
    let probe = tokio::task::block_in_place(|| {
        crate::git::Git::new(&night.repo)
            .token(token.as_deref())
            .timeout(Duration::from_secs(60))
            .text(&[
                "ls-remote",
                "--heads",
                "--",
                &night.remote_urls.1,
                &format!("refs/heads/{branch}"),
            ])
    });
    match probe {
        Ok(out) => !out.trim().is_empty(),
        Err(e) => {
            tracing::warn!("cannot check {branch} on the remote: {e}");
            true
        }
    }
}

/// Per-item running totals.
#[derive(Default)]
struct Totals {
    tokens: u64,
    cost: f64,
    cost_known: bool,
}

/// The writer ↔ proof ↔ gate ↔ reviewer rounds of one item (SPEC §5), then
/// what every ending shares: the item's cost counts against the run's cap
/// whatever the outcome, and the writer's `FINDINGS:` are filed as issues
/// (proposals, SPEC §5.8) whether or not the item succeeded.
#[allow(clippy::too_many_arguments)]
async fn item_loop(
    night: &Night,
    run_id: Uuid,
    item_id: i64,
    entry: &PlanEntry,
    slot: &Slot,
    branch: &str,
    item_dir: &Path,
    run_cost: &mut f64,
) -> Result<ItemEnd, Error> {
    let mut findings = Vec::new();
    let end = item_rounds(
        night,
        run_id,
        item_id,
        entry,
        slot,
        branch,
        item_dir,
        *run_cost,
        &mut findings,
    )
    .await?;
    // A round cut short (timeout, budget, signal, deadline) ends with the item.
    night
        .db(|| rec::close_open_rounds(&night.pool, item_id, end.outcome))
        .await?;
    *run_cost += end.cost_usd.unwrap_or(0.0);
    file_findings(night, item_id, &findings).await?;
    Ok(end)
}

/// The rounds of [`item_loop`]. `run_cost` is what the run spent before this
/// item; `findings_all` collects the writer's findings of every round.
#[allow(clippy::too_many_arguments)]
async fn item_rounds(
    night: &Night,
    run_id: Uuid,
    item_id: i64,
    entry: &PlanEntry,
    slot: &Slot,
    branch: &str,
    item_dir: &Path,
    run_cost: f64,
    findings_all: &mut Vec<String>,
) -> Result<ItemEnd, Error> {
    let pool = &night.pool;
    let c = &entry.contract;
    let key = &entry.item.key;
    let started = Instant::now();
    // Moved later by usage-limit sleeps, which are not the item's work time.
    let mut item_deadline = started + c.limits.item_timeout();
    let fail = |outcome: Outcome, reason: String, rounds: u32, t: &Totals| ItemEnd {
        reason: Some(reason),
        rounds,
        tokens: t.tokens,
        cost_usd: t.cost_known.then_some(t.cost),
        ..ItemEnd::of(outcome)
    };
    let mut totals = Totals::default();
    let gate_spec = |timeout: Duration, dir: PathBuf| GateSpec {
        cwd: slot.path.clone(),
        env: night.gate_env.clone(),
        timeout,
        log_dir: dir,
        secrets: night.secrets.clone(),
        run_as: night.run_as.clone(),
    };

    // Under `agent_user`, the checkout must be the agent's to write (SPEC §6).
    if let Some(why) = grant_checkout(night, slot).await {
        return Ok(fail(Outcome::Error, why, 0, &totals));
    }
    // Setup commands, in the fresh checkout.
    let mut setup_runs: Vec<GateRun> = Vec::new();
    if !c.setup.is_empty() {
        night
            .db(|| rec::set_phase(pool, run_id, Phase::Setup, Some(key), None))
            .await?;
        let runs = gate::run_all(
            "setup",
            &c.setup,
            &gate_spec(
                c.limits.gate_timeout().min(c.limits.item_timeout()),
                item_dir.to_path_buf(),
            ),
            &night.cancel,
        )
        .await;
        match runs {
            Ok(runs) if runs.iter().all(GateRun::passed) => setup_runs = runs,
            Ok(runs) => {
                if night.cancel.is_cancelled() {
                    return Ok(fail(
                        Outcome::Interrupted,
                        "stopped by a signal during setup".into(),
                        0,
                        &totals,
                    ));
                }
                let bad = runs.iter().find(|r| !r.passed()).expect("a failed run");
                return Ok(fail(
                    Outcome::Error,
                    format!(
                        "setup command `{}` failed ({}): {}",
                        bad.command,
                        bad.exit_code
                            .map(|c| format!("exit {c}"))
                            .unwrap_or("timed out".into()),
                        last_line(&bad.output_tail)
                    ),
                    0,
                    &totals,
                ));
            }
            Err(e) => {
                return Ok(fail(
                    Outcome::Error,
                    format!("setup could not run: {e}"),
                    0,
                    &totals,
                ));
            }
        }
    }

    let base_commit = slot.base_commit.clone();
    let contract_json = c.canonical_json();
    let mut feedback = String::new();
    let mut history: Vec<(String, String)> = Vec::new(); // (diff hash, failure signature)
    let mut rounds_done: Vec<RoundSummary> = Vec::new();
    let mut last_failure: (Outcome, String) = (Outcome::Error, "no round ran".into());
    let rounds = c.limits.rounds.value;
    for n in 1..=rounds {
        if night.cancel.is_cancelled() {
            return Ok(fail(
                Outcome::Interrupted,
                format!("stopped by a signal before round {n}"),
                n - 1,
                &totals,
            ));
        }
        if night.clock.now() >= night.deadline {
            return Ok(fail(
                Outcome::Deadline,
                format!(
                    "round {n} not started: the deadline {} passed",
                    local(night.deadline, night.tz)
                ),
                n - 1,
                &totals,
            ));
        }
        if Instant::now() >= item_deadline {
            return Ok(fail(
                Outcome::TimedOut,
                format!(
                    "the item timeout of {} was reached before round {n}",
                    config::format_duration(c.limits.item_timeout())
                ),
                n - 1,
                &totals,
            ));
        }
        let round_id = night.db(|| rec::start_round(pool, item_id, n)).await?;
        let round_started = Instant::now();
        night
            .db(|| rec::set_phase(pool, run_id, Phase::Writer, Some(key), Some(n)))
            .await?;
        // The gate's restore and git's checkout leave files owned by the
        // runner; hand the checkout back to the agent before it writes.
        if n > 1
            && let Some(why) = grant_checkout(night, slot).await
        {
            return Ok(fail(Outcome::Error, why, n - 1, &totals));
        }
        let before = match tokio::task::block_in_place(|| RoundStart::record(slot)) {
            Ok(b) => b,
            Err(e) => {
                return Ok(fail(
                    Outcome::Error,
                    format!("cannot read the checkout before round {n}: {e}"),
                    n,
                    &totals,
                ));
            }
        };
        // What the writer could reach besides its checkout: the remote, and
        // the user's repository (its path is in the slot's alternates).
        let token = night.token.as_ref().map(|t| t.expose().to_string());
        let remote_before = tokio::task::block_in_place(|| slot.remote_refs(token.as_deref()))
            .map_err(|e| tracing::warn!("cannot list the remote's refs before the writer: {e}"))
            .ok();
        let user_git_before =
            tokio::task::block_in_place(|| crate::user_repo::snapshot(&night.repo));
        let prompt = agent::compose_prompt(Role::Writer, c, &feedback, &base_commit);
        let writer = match call_agent(
            night,
            run_id,
            item_id,
            round_id,
            entry,
            Role::Writer,
            n,
            prompt,
            &contract_json,
            &feedback,
            slot,
            item_dir,
            &mut item_deadline,
            &mut totals,
        )
        .await?
        {
            Step::Done(r) => *r,
            Step::Stop(end) => return Ok(ItemEnd { rounds: n, ..end }),
        };
        if let Some(why) = outside_reach(
            night,
            Role::Writer,
            slot,
            remote_before.as_ref(),
            &user_git_before,
            token.as_deref(),
        ) {
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::RuleBroken),
                        None,
                        None,
                        Some(&why),
                    )
                })
                .await?;
            return Ok(fail(Outcome::RuleBroken, why, n, &totals));
        }
        if let Some(why) = over_run_budget(night, run_cost, &totals) {
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::BudgetExceeded),
                        None,
                        None,
                        Some(&why),
                    )
                })
                .await?;
            return Ok(fail(Outcome::BudgetExceeded, why, n, &totals));
        }
        let blocks = agent::parse_blocks(&writer.text);
        for f in blocks.findings.iter() {
            if !findings_all.contains(f) {
                findings_all.push(f.clone());
            }
        }
        if let Some(q) = &blocks.question {
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::Blocked),
                        None,
                        None,
                        None,
                    )
                })
                .await?;
            return Ok(ItemEnd {
                reason: Some("the writer asked a question".into()),
                question: Some(q.clone()),
                rounds: n,
                tokens: totals.tokens,
                cost_usd: totals.cost_known.then_some(totals.cost),
                ..ItemEnd::of(Outcome::Blocked)
            });
        }
        // Proof of work, from git.
        night
            .db(|| rec::set_phase(pool, run_id, Phase::Proof, Some(key), Some(n)))
            .await?;
        // GitHub refuses any file of 100 MiB or more: fail now, with the reason,
        // before a minute of diffing it and a gate and review that cannot lead to a push.
        if let Ok(big) = tokio::task::block_in_place(|| {
            crate::proof::files_of_at_least(&slot.path, MAX_FILE_BYTES)
        }) && let Some((path, size)) = big.first()
        {
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::Error),
                        None,
                        None,
                        Some("a file too large for GitHub"),
                    )
                })
                .await?;
            return Ok(fail(
                Outcome::Error,
                format!(
                    "{path} is {} MiB; GitHub refuses files of 100 MiB or more (the writer should not produce it)",
                    size >> 20
                ),
                n,
                &totals,
            ));
        }
        let proof = match tokio::task::block_in_place(|| {
            Proof::collect(&slot.path, &before, &writer.claimed_files, &c.scope)
        }) {
            Ok(p) => p,
            // No .git left to read: the writer removed or replaced it.
            Err(_) if !slot.path.join(".git").join("HEAD").is_file() => {
                night
                    .db(|| {
                        rec::finish_round(
                            pool,
                            round_id,
                            RoundResult::Ended(Outcome::RuleBroken),
                            None,
                            None,
                            Some("the writer removed the checkout's .git"),
                        )
                    })
                    .await?;
                return Ok(fail(
                    Outcome::RuleBroken,
                    "the writer removed or replaced the checkout's .git directory".into(),
                    n,
                    &totals,
                ));
            }
            Err(e) => {
                return Ok(fail(
                    Outcome::Error,
                    format!("cannot read the proof of work from git: {e}"),
                    n,
                    &totals,
                ));
            }
        };
        night
            .db(|| rec::record_proof(pool, round_id, &proof))
            .await?;
        // A git repository the writer made inside the checkout would be
        // committed as a dangling submodule link.
        let nested = proof.changed.iter().find(|f| slot.path.join(&f.path).join(".git").exists()).map(|f| format!("the writer created a nested git repository at {} (it would be committed as a broken submodule link)", f.path));
        if let Some(why) = proof.rule_broken().or(nested) {
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::RuleBroken),
                        Some(&proof.diff_hash),
                        None,
                        Some(&why),
                    )
                })
                .await?;
            return Ok(fail(Outcome::RuleBroken, why, n, &totals));
        }
        // A writer that crashed (a signal, an OOM kill, a nonzero exit, an
        // error result) may have left half-done work: never gate, review or
        // push it as if it were finished. Its changes stay for the next round.
        if let Some(f) = &writer.failure {
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::Error),
                        Some(&proof.diff_hash),
                        Some("writer_failed"),
                        Some(f),
                    )
                })
                .await?;
            last_failure = (Outcome::Error, format!("the writer failed: {f}"));
            feedback = if proof.is_empty() {
                format!("Your previous attempt failed: {f}\n")
            } else {
                format!(
                    "Your previous attempt failed before it finished: {f}\nIts changes are still in the checkout; check them and finish the work.\n"
                )
            };
            rounds_done.push(RoundSummary {
                n,
                seconds: round_started.elapsed().as_secs(),
                result: RoundResult::Ended(Outcome::Error),
                note: f.clone(),
                gate: vec![],
                verdict: None,
            });
            if no_progress(&mut history, &proof.diff_hash, "writer_failed") {
                return Ok(fail(
                    Outcome::NoProgress,
                    format!(
                        "{NO_PROGRESS_ROUNDS} rounds in a row with the same diff and the same failure"
                    ),
                    n,
                    &totals,
                ));
            }
            continue;
        }
        if proof.is_empty() {
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::NoChanges),
                        Some(&proof.diff_hash),
                        None,
                        None,
                    )
                })
                .await?;
            // Why, when the agent's own channels said (a denied write, a
            // failed edit): otherwise a person sees nothing to act on.
            let why = if writer.notes.is_empty() {
                "the writer changed nothing".to_string()
            } else {
                night.redact(&format!(
                    "the writer changed nothing; its CLI reported: {}",
                    writer.notes.join("; ")
                ))
            };
            return Ok(ItemEnd {
                reason: Some(why),
                rounds: n,
                tokens: totals.tokens,
                cost_usd: totals.cost_known.then_some(totals.cost),
                ..ItemEnd::of(Outcome::NoChanges)
            });
        }
        // Gate, run by nightshift; what it leaves behind is not the writer's work.
        night
            .db(|| rec::set_phase(pool, run_id, Phase::Gate, Some(key), Some(n)))
            .await?;
        let writer_tree = match tokio::task::block_in_place(|| slot.snapshot_tree()) {
            Ok(t) => t,
            Err(e) => {
                return Ok(fail(
                    Outcome::Error,
                    format!("cannot snapshot the checkout before the gate: {e}"),
                    n,
                    &totals,
                ));
            }
        };
        let gate_timeout = c.limits.gate_timeout().min(
            item_deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1)),
        );
        let gates = match gate::run_all(
            "gate",
            &c.verify,
            &gate_spec(gate_timeout, item_dir.join(format!("round-{n:02}-gate"))),
            &night.cancel,
        )
        .await
        {
            Ok(g) => g,
            Err(e) => {
                return Ok(fail(
                    Outcome::Error,
                    format!("the gate could not run: {e}"),
                    n,
                    &totals,
                ));
            }
        };
        for g in &gates {
            night.db(|| rec::record_gate_run(pool, round_id, g)).await?;
        }
        if let Err(e) = tokio::task::block_in_place(|| slot.restore_tree(&writer_tree)) {
            return Ok(fail(
                Outcome::Error,
                format!("cannot restore the checkout after the gate: {e}"),
                n,
                &totals,
            ));
        }
        if night.cancel.is_cancelled() {
            return Ok(fail(
                Outcome::Interrupted,
                format!("stopped by a signal during the gate of round {n}"),
                n,
                &totals,
            ));
        }
        if let Some(bad) = gates.iter().find(|g| !g.passed()) {
            let sig = bad.signature();
            feedback = gate::feedback(&gates);
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::TestsFailed),
                        Some(&proof.diff_hash),
                        Some(&sig),
                        Some(&feedback),
                    )
                })
                .await?;
            last_failure = (
                Outcome::TestsFailed,
                format!(
                    "`{}` failed ({}) in round {n}: {}",
                    bad.command,
                    bad.exit_code
                        .map(|c| format!("exit {c}"))
                        .unwrap_or("timed out".into()),
                    last_line(&bad.output_tail)
                ),
            );
            // The round's note is the telling line of the output (the
            // signature, command and exit code, is already in its gate list).
            rounds_done.push(RoundSummary {
                n,
                seconds: round_started.elapsed().as_secs(),
                result: RoundResult::Ended(Outcome::TestsFailed),
                note: last_line(&bad.output_tail),
                gate: gates.clone(),
                verdict: None,
            });
            if no_progress(&mut history, &proof.diff_hash, &sig) {
                let how = bad
                    .exit_code
                    .map(|c| format!("exited {c}"))
                    .unwrap_or_else(|| "timed out".into());
                let said = last_line(&bad.output_tail);
                let said = if said.trim().is_empty() {
                    "it printed nothing".to_string()
                } else {
                    format!("it printed: {said}")
                };
                return Ok(fail(
                    Outcome::NoProgress,
                    format!(
                        "{NO_PROGRESS_ROUNDS} rounds in a row with the same diff and the same gate failure: `{}` {how} ({said})",
                        bad.command
                    ),
                    n,
                    &totals,
                ));
            }
            continue;
        }
        // Review, read-only, verified.
        night
            .db(|| rec::set_phase(pool, run_id, Phase::Review, Some(key), Some(n)))
            .await?;
        let fp_before =
            match tokio::task::block_in_place(|| crate::proof::worktree_fingerprint(&slot.path)) {
                Ok(fp) => fp,
                Err(e) => {
                    return Ok(fail(
                        Outcome::Error,
                        format!("cannot fingerprint the checkout before the review: {e}"),
                        n,
                        &totals,
                    ));
                }
            };
        let remote_before = tokio::task::block_in_place(|| slot.remote_refs(token.as_deref())).ok();
        let user_git_before =
            tokio::task::block_in_place(|| crate::user_repo::snapshot(&night.repo));
        let prompt = agent::compose_prompt(Role::Reviewer, c, "", &base_commit);
        let reviewer = match call_agent(
            night,
            run_id,
            item_id,
            round_id,
            entry,
            Role::Reviewer,
            n,
            prompt,
            &contract_json,
            "",
            slot,
            item_dir,
            &mut item_deadline,
            &mut totals,
        )
        .await?
        {
            Step::Done(r) => *r,
            Step::Stop(end) => return Ok(ItemEnd { rounds: n, ..end }),
        };
        if let Some(why) = outside_reach(
            night,
            Role::Reviewer,
            slot,
            remote_before.as_ref(),
            &user_git_before,
            token.as_deref(),
        ) {
            night
                .db(|| rec::record_review(pool, round_id, "void", &[], Some(&why)))
                .await?;
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::ReviewVoid),
                        Some(&proof.diff_hash),
                        None,
                        Some(&why),
                    )
                })
                .await?;
            return Ok(fail(Outcome::ReviewVoid, why, n, &totals));
        }
        if let Some(why) = over_run_budget(night, run_cost, &totals) {
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::BudgetExceeded),
                        Some(&proof.diff_hash),
                        None,
                        Some(&why),
                    )
                })
                .await?;
            return Ok(fail(Outcome::BudgetExceeded, why, n, &totals));
        }
        let fp_after =
            match tokio::task::block_in_place(|| crate::proof::worktree_fingerprint(&slot.path)) {
                Ok(fp) => fp,
                Err(e) => {
                    return Ok(fail(
                        Outcome::Error,
                        format!("cannot fingerprint the checkout after the review: {e}"),
                        n,
                        &totals,
                    ));
                }
            };
        let void =
            agent::review_void_reason(night.config.reviewer.kind, &reviewer, &fp_before, &fp_after);
        if let Some(why) = void {
            night
                .db(|| rec::record_review(pool, round_id, "void", &[], Some(&why)))
                .await?;
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::ReviewVoid),
                        Some(&proof.diff_hash),
                        None,
                        Some(&why),
                    )
                })
                .await?;
            return Ok(fail(Outcome::ReviewVoid, why, n, &totals));
        }
        // A verdict from a reviewer that then failed (nonzero exit, error
        // result) is not trusted: the round is retried like any failure.
        let verdict = match (&reviewer.verdict, &reviewer.failure) {
            (Some(v), None) => review::hold_to_conditions(v.clone(), &c.accept),
            (_, failure) => {
                let (sig, why) = match failure {
                    Some(f) => ("reviewer_failed", format!("the reviewer failed: {f}")),
                    None => ("no_verdict", review::no_verdict_reason(&reviewer.text)),
                };
                night
                    .db(|| {
                        rec::finish_round(
                            pool,
                            round_id,
                            RoundResult::Ended(Outcome::Error),
                            Some(&proof.diff_hash),
                            Some(sig),
                            Some(&why),
                        )
                    })
                    .await?;
                last_failure = (Outcome::Error, why.clone());
                rounds_done.push(RoundSummary {
                    n,
                    seconds: round_started.elapsed().as_secs(),
                    result: RoundResult::Ended(Outcome::Error),
                    note: why,
                    gate: gates.clone(),
                    verdict: None,
                });
                if no_progress(&mut history, &proof.diff_hash, sig) {
                    return Ok(fail(
                        Outcome::NoProgress,
                        format!(
                            "{NO_PROGRESS_ROUNDS} rounds in a row with the same diff and the same failure"
                        ),
                        n,
                        &totals,
                    ));
                }
                continue;
            }
        };
        night
            .db(|| {
                rec::record_review(
                    pool,
                    round_id,
                    verdict.verdict.as_str(),
                    &verdict.findings,
                    None,
                )
            })
            .await?;
        if verdict.verdict == Decision::RequestChanges {
            // The same set of findings (SPEC §5.6): order and repeats do not count.
            let mut sorted: Vec<&str> = verdict.findings.iter().map(|f| f.trim()).collect();
            sorted.sort_unstable();
            sorted.dedup();
            let sig = format!(
                "review:{}",
                crate::contract::sha256_hex(sorted.join("\n").as_bytes())
            );
            feedback = format!(
                "The reviewer requested changes:\n{}\n",
                verdict
                    .findings
                    .iter()
                    .map(|f| format!("- {f}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            night
                .db(|| {
                    rec::finish_round(
                        pool,
                        round_id,
                        RoundResult::Ended(Outcome::ReviewRejected),
                        Some(&proof.diff_hash),
                        Some(&sig),
                        Some(&feedback),
                    )
                })
                .await?;
            last_failure = (
                Outcome::ReviewRejected,
                format!(
                    "the reviewer requested changes in round {n}: {}",
                    verdict.findings.join("; ")
                ),
            );
            rounds_done.push(RoundSummary {
                n,
                seconds: round_started.elapsed().as_secs(),
                result: RoundResult::Ended(Outcome::ReviewRejected),
                note: verdict.findings.join("; "),
                gate: gates.clone(),
                verdict: Some(verdict.clone()),
            });
            if no_progress(&mut history, &proof.diff_hash, &sig) {
                return Ok(fail(
                    Outcome::NoProgress,
                    format!(
                        "{NO_PROGRESS_ROUNDS} rounds in a row with the same diff and the same findings"
                    ),
                    n,
                    &totals,
                ));
            }
            continue;
        }
        // Green gate and approve: commit, push, PR.
        night
            .db(|| {
                rec::finish_round(
                    pool,
                    round_id,
                    RoundResult::Approved,
                    Some(&proof.diff_hash),
                    None,
                    None,
                )
            })
            .await?;
        rounds_done.push(RoundSummary {
            n,
            seconds: round_started.elapsed().as_secs(),
            result: RoundResult::Approved,
            note: String::new(),
            gate: gates.clone(),
            verdict: Some(verdict.clone()),
        });
        let diff = tokio::task::block_in_place(|| slot.diff_text(&base_commit, &writer_tree))
            .unwrap_or_default();
        // A secret's value in the change would be pushed in clear (the PR
        // body only masks it): never push it. Read from the blobs, not the
        // diff text, which shows no content of a binary file.
        let secrets = crate::secret::Redactor::with_known(&night.secrets);
        match tokio::task::block_in_place(|| {
            crate::proof::secret_in_change(&slot.path, &base_commit, &writer_tree, &secrets)
        }) {
            Ok(None) => {}
            Ok(Some(file)) => {
                let file = night.redact(&file);
                return Ok(fail(
                    Outcome::RuleBroken,
                    format!(
                        "the change writes the value of a secret (the GitHub token, the ledger URL or one of `secrets`, maybe encoded) into {file} or its name; nothing was pushed"
                    ),
                    n,
                    &totals,
                ));
            }
            Err(e) => {
                return Ok(fail(
                    Outcome::Error,
                    format!("cannot read the change to check it for secrets: {e}"),
                    n,
                    &totals,
                ));
            }
        }
        let evidence = Evidence {
            contract: c.clone(),
            contract_sha: entry.contract_sha.clone(),
            run_id,
            branch: branch.to_string(),
            base_commit: base_commit.clone(),
            setup: setup_runs.clone(),
            changed: proof.changed.clone(),
            rounds: rounds_done.clone(),
            verdict: verdict.clone(),
            duration: started.elapsed(),
            tokens: totals.tokens,
            cost_usd: totals.cost_known.then_some(totals.cost),
            findings: findings_all.clone(),
            diff,
            writer_note: agent::strip_blocks(&writer.text),
            reviewer_note: agent::strip_blocks(&reviewer.text),
            agent_notes: writer
                .notes
                .iter()
                .map(|n| format!("writer: {n}"))
                .chain(reviewer.notes.iter().map(|n| format!("reviewer: {n}")))
                // Work inside a submodule is invisible to git here: say so.
                .chain(tokio::task::block_in_place(|| slot.filled_submodule_dirs()).unwrap_or_default().into_iter().map(|p| format!("checkout: Files were written inside the submodule `{p}`; they are not part of this PR (submodules are not checked out or committed by nightshift)")))
                .collect(),
            overlaps: report::overlaps(&night.pushed.lock().unwrap_or_else(|e| e.into_inner()), &proof.changed),
        };
        let body = night.redact(&report::pr_body(&evidence));
        night
            .db(|| rec::set_phase(pool, run_id, Phase::Push, Some(key), Some(n)))
            .await?;
        let message = format!(
            "nightshift: {}\n\nContract sha256 {}\nRun {}\n",
            c.title, entry.contract_sha, run_id
        );
        if night.config.tick_in_pr {
            // `tick_in_pr = true` (SPEC §3): the item PR carries its own tick.
            let ticked = crate::backlog::tick_in_checkout(&slot.path, &night.config.backlog, key);
            if let Err(e) = ticked {
                let (outcome, e) = match e {
                    crate::backlog::TickError::Unsafe(e) => (Outcome::RuleBroken, e),
                    crate::backlog::TickError::Io(e) => (Outcome::Error, e),
                };
                return Ok(fail(outcome, format!("tick_in_pr: {e}"), n, &totals));
            }
        }
        if let Err(e) = tokio::task::block_in_place(|| {
            slot.commit_all(&message, &runner_identity(), &runner_identity())
        }) {
            return Ok(fail(
                Outcome::Error,
                format!("commit failed: {e}"),
                n,
                &totals,
            ));
        }
        if night.cancel.is_cancelled() {
            return Ok(fail(
                Outcome::Interrupted,
                "stopped by a signal before the push".into(),
                n,
                &totals,
            ));
        }
        let token = night.token.as_ref().map(|t| t.expose().to_string());
        if let Err(e) = push_or_stop(night, slot, token.as_deref()).await {
            if night.cancel.is_cancelled() {
                return Ok(fail(
                    Outcome::Interrupted,
                    format!("stopped by a signal during the push of {branch}; nothing was pushed"),
                    n,
                    &totals,
                ));
            }
            return Ok(fail(
                Outcome::PushFailed,
                night.redact(&format!("push of {branch} failed: {e}")),
                n,
                &totals,
            ));
        }
        night
            .db(|| {
                rec::upsert_pr(
                    pool,
                    &night.repo_id,
                    key,
                    &entry.contract_sha,
                    run_id,
                    branch,
                    None,
                    None,
                    if night.forge.is_some() {
                        PrRecord::PrFailed
                    } else {
                        PrRecord::Planned
                    },
                    &body,
                )
            })
            .await?;
        night
            .db(|| {
                rec::event(
                    pool,
                    Some(run_id),
                    "pushed",
                    json!({"key": key, "branch": branch}),
                )
            })
            .await?;
        let mut end = open_pr(night, run_id, entry, branch, &body).await?;
        night
            .pushed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(report::Overlap {
                title: c.title.clone(),
                branch: branch.to_string(),
                pr_number: end.pr_number,
                files: proof.changed.iter().map(|f| f.path.clone()).collect(),
            });
        end.rounds = n;
        end.tokens = totals.tokens;
        end.cost_usd = totals.cost_known.then_some(totals.cost);
        return Ok(end);
    }
    let (outcome, reason) = last_failure;
    Ok(fail(
        outcome,
        format!("{reason} (after {rounds} round(s), the cap)"),
        rounds,
        &totals,
    ))
}

/// Pushes the item's branch; a signal kills the push (git, its hooks and
/// helpers) at once instead of waiting for it (SPEC §7).
async fn push_or_stop(
    night: &Night,
    slot: &Slot,
    token: Option<&str>,
) -> Result<(), slot::SlotError> {
    until_signal(night, |stop| slot.push_stoppable(token, Some(stop))).await
}

/// Runs blocking git work `f`, handing it a flag that turns true when the
/// night's signal arrives (so git is killed at once rather than awaited).
async fn until_signal<T>(
    night: &Night,
    f: impl FnOnce(std::sync::Arc<std::sync::atomic::AtomicBool>) -> T,
) -> T {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
        night.cancel.is_cancelled(),
    ));
    let (flag, cancel) = (stop.clone(), night.cancel.clone());
    let watcher = tokio::spawn(async move {
        cancel.cancelled().await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let out = tokio::task::block_in_place(|| f(stop));
    watcher.abort();
    out
}

/// Opens the PR of a pushed branch; without GitHub, records the PR that
/// would have been opened.
async fn open_pr(
    night: &Night,
    run_id: Uuid,
    entry: &PlanEntry,
    branch: &str,
    body: &str,
) -> Result<ItemEnd, Error> {
    let pool = &night.pool;
    let key = &entry.item.key;
    // GitHub refuses titles over 256 characters (422 "title is too long"),
    // which would fail this PR on every run.
    let full = format!("nightshift: {}", entry.item.title);
    let title = if full.chars().count() > 256 {
        format!("{}…", full.chars().take(255).collect::<String>())
    } else {
        full
    };
    let Some(forge) = &night.forge else {
        let why = night
            .forge_missing
            .clone()
            .unwrap_or_else(|| "no GitHub access".into());
        return Ok(ItemEnd {
            reason: Some(why),
            branch: Some(branch.into()),
            pr_body: Some(body.into()),
            ..ItemEnd::of(Outcome::PrOpened)
        });
    };
    if let Some(down) = night.github_down() {
        night
            .db(|| {
                rec::upsert_pr(
                    pool,
                    &night.repo_id,
                    key,
                    &entry.contract_sha,
                    run_id,
                    branch,
                    None,
                    None,
                    PrRecord::PrFailed,
                    body,
                )
            })
            .await?;
        return Ok(ItemEnd { reason: Some(night.redact(&format!("branch {branch} pushed; GitHub was unreachable earlier in this run ({down}); the next run opens the PR"))), branch: Some(branch.into()), pr_body: Some(body.into()), ..ItemEnd::of(Outcome::PrFailed) });
    }
    let req = crate::forge::PrRequest {
        title: title.clone(),
        head: branch.to_string(),
        base: night.config.base.clone(),
        body: body.to_string(),
        labels: vec![night.config.label.clone()],
        item_key: key.clone(),
    };
    let created = tokio::select! {
        r = forge.create_pr(&req) => r,
        // A signal does not wait for a slow GitHub (SPEC §7). The ledger keeps
        // the branch as `pr_failed`: the next run finds the PR if GitHub made
        // it, or opens it.
        _ = night.cancel.cancelled() => {
            return Ok(ItemEnd { reason: Some(format!("stopped by a signal while opening the PR of {branch} (pushed); the next run finds or opens it")), branch: Some(branch.into()), pr_body: Some(body.into()), ..ItemEnd::of(Outcome::Interrupted) });
        }
    };
    match created {
        Ok(pr) => {
            night
                .db(|| {
                    rec::upsert_pr(
                        pool,
                        &night.repo_id,
                        key,
                        &entry.contract_sha,
                        run_id,
                        branch,
                        Some(pr.number),
                        Some(&pr.url),
                        PrRecord::Open,
                        body,
                    )
                })
                .await?;
            night
                .db(|| {
                    rec::event(
                        pool,
                        Some(run_id),
                        Outcome::PrOpened.as_str(),
                        json!({"key": key, "number": pr.number, "url": pr.url}),
                    )
                })
                .await?;
            // Opened but not labelled (the label could not be made or added):
            // the PR stands; the report says why it lacks the label.
            let reason = pr.label_error.as_ref().map(|e| {
                night.redact(&format!(
                    "PR opened without the label {:?}: {e}",
                    night.config.label
                ))
            });
            Ok(ItemEnd {
                reason,
                branch: Some(branch.into()),
                pr_number: Some(pr.number),
                pr_url: Some(pr.url),
                pr_body: Some(body.into()),
                ..ItemEnd::of(Outcome::PrOpened)
            })
        }
        Err(e) => {
            if e.scope() == crate::forge::Scope::Run {
                night.mark_github_down(&e.to_string());
            }
            night
                .db(|| {
                    rec::upsert_pr(
                        pool,
                        &night.repo_id,
                        key,
                        &entry.contract_sha,
                        run_id,
                        branch,
                        None,
                        None,
                        PrRecord::PrFailed,
                        body,
                    )
                })
                .await?;
            Ok(ItemEnd {
                reason: Some(night.redact(&format!(
                    "branch {branch} pushed, PR not created: {e}; retried on the next run"
                ))),
                branch: Some(branch.into()),
                pr_body: Some(body.into()),
                ..ItemEnd::of(Outcome::PrFailed)
            })
        }
    }
}

/// Files the writer's `FINDINGS:` as GitHub issues labelled
/// `findings_label` (SPEC §5.8, §11): proposals, never backlog items. At most
/// `max_findings_per_item` distinct titles per item; an open issue with the
/// same title is reused, not duplicated. Each is recorded in the ledger, with
/// its issue when GitHub took it; a GitHub failure is logged and does not
/// fail the item. After a signal nothing is posted (SPEC §7: stop at once).
async fn file_findings(night: &Night, item_id: i64, findings: &[String]) -> Result<(), Error> {
    let mut titles: Vec<String> = Vec::new();
    for f in findings {
        // GitHub caps issue titles at 256 characters.
        let t: String = night.redact(f.trim()).chars().take(256).collect();
        if !t.is_empty() && !titles.contains(&t) {
            titles.push(t);
        }
    }
    for title in titles
        .into_iter()
        .take(night.config.max_findings_per_item as usize)
    {
        let mut number = None;
        let mut url = None;
        // After a signal the run stops promptly: findings stay in the ledger only.
        if let Some(forge) = night
            .forge
            .as_ref()
            .filter(|_| !night.cancel.is_cancelled())
        {
            let body = format!(
                "Found by nightshift while working on an item; a proposal, not part of the backlog.\n\n{}\n",
                crate::report::md_text(&title)
            );
            match forge
                .find_or_create_issue(&title, &body, &night.config.findings_label)
                .await
            {
                Ok(issue) => {
                    number = Some(issue.number as i64);
                    url = Some(issue.url);
                }
                Err(e) => {
                    tracing::warn!(finding = %title, error = %night.redact(&e.to_string()), "could not file a finding as an issue")
                }
            }
        }
        night
            .db(|| rec::record_finding(&night.pool, item_id, &title, number, url.as_deref()))
            .await?;
    }
    Ok(())
}

/// The run's cost cap (`max_cost_usd_per_run`, SPEC §4, §11) counted over
/// the items before this one and this one's calls so far; only costs the
/// agents reported count.
fn over_run_budget(night: &Night, run_cost: f64, t: &Totals) -> Option<String> {
    let cap = night.config.limits.max_cost_usd_per_run;
    let spent = run_cost + t.cost;
    (t.cost_known && spent > cap).then(|| {
        format!("the run has spent ${spent:.2}, above its cap of ${cap:.2} (max_cost_usd_per_run)")
    })
}

/// Under `agent_user` (SPEC §6), hands the checkout to that account so the
/// writer, setup and gates (which run as it) can write it; returns why not
/// when they cannot. Everything below the top directory except `.git` is
/// chowned to the account; the top directory stays the runner's, group-owned
/// by the account's group and group-writable, and `.git` stays the runner's
/// (read-only to the agent): git and libgit2 refuse a repository whose top
/// directory or `.git` another user owns, and the agent's git trusts the
/// checkout through `safe.directory` in its environment (see `cli::drain`).
/// The top directory is sticky, so the agent cannot rename `.git` away and
/// plant its own.
/// Only entries with another owner are changed, so a reused checkout costs a
/// walk, not a rewrite of every inode's ctime. The first call also checks, as
/// the account, that it can reach and write the checkout (a 0700 parent such
/// as `/root` would stop it).
async fn grant_checkout(night: &Night, slot: &Slot) -> Option<String> {
    let account = night.run_as.as_ref()?;
    let top = slot.path.clone();
    if let Err(e) = tokio::task::block_in_place(|| slot::hand_over(&top, account.uid, account.gid))
    {
        return Some(format!(
            "cannot hand the checkout {} to agent_user {}: {e}",
            top.display(),
            account.user
        ));
    }
    let probe = crate::process::Command::shell("test -w . && test -r .git/HEAD")
        .cwd(&top)
        .env_map(night.agent_env.clone())
        .timeout(Duration::from_secs(30))
        .run_as(account.clone());
    let why = match crate::process::run(probe, &night.cancel).await {
        Ok(o) if o.success() => return None,
        Ok(o) => format!("exit {:?}: {}", o.exit_code, last_line(&o.stderr_tail)),
        // Entering the directory as the account fails before anything runs.
        Err(e) => e.to_string().lines().next().unwrap_or_default().to_string(),
    };
    Some(format!(
        "agent_user {} cannot enter and write the checkout {} ({why}); every parent directory must be searchable by it — a 0700 home such as /root is not; set NIGHTSHIFT_DATA_DIR to a directory it can reach",
        account.user,
        top.display()
    ))
}

fn no_progress(history: &mut Vec<(String, String)>, diff_hash: &str, sig: &str) -> bool {
    history.push((diff_hash.to_string(), sig.to_string()));
    history.len() >= NO_PROGRESS_ROUNDS
        && history[history.len() - NO_PROGRESS_ROUNDS..]
            .iter()
            .all(|h| h.0 == diff_hash && h.1 == sig)
}

/// What a writer changed outside its checkout, if anything: a ref on the
/// remote that now points at an object the checkout has (the writer pushed;
/// a person's push at night brings objects the checkout has never seen), a
/// deleted `nightshift/` branch, or the user's own repository (its `.git`
/// config and hooks, refs, HEAD, index, working tree: [`crate::user_repo`]).
fn outside_reach(
    night: &Night,
    role: Role,
    slot: &Slot,
    remote_before: Option<&std::collections::BTreeMap<String, String>>,
    user_git_before: &crate::user_repo::RepoState,
    token: Option<&str>,
) -> Option<String> {
    let after = tokio::task::block_in_place(|| crate::user_repo::snapshot(&night.repo));
    let changed = crate::user_repo::changes(user_git_before, &after);
    if !changed.is_empty() {
        return Some(format!(
            "the {} changed {} in {} during its call; check it before you run git there again",
            role.as_str(),
            changed.join(", "),
            night.repo.display()
        ));
    }
    let before = remote_before?;
    let after = match tokio::task::block_in_place(|| slot.remote_refs(token)) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!("cannot list the remote's refs after the writer: {e}");
            return None;
        }
    };
    let pushed = slot::remote_moves(before, &after, |oid| {
        tokio::task::block_in_place(|| slot.has_object(oid))
    });
    let why = (!pushed.is_empty()).then(|| {
        format!(
            "the {} pushed to the remote: {}; only the runner pushes",
            role.as_str(),
            pushed.join(", ")
        )
    })?;
    // The remote is no longer what the run started from: nothing more is
    // built or pushed tonight (docs/loop.md).
    night.stop_systemic(&why);
    Some(why)
}

/// The most telling line of a command's output tail, for a one-line
/// reason: the last line that names a failure (a panic, an assertion, a
/// failing test, a compiler error), else the last non-empty line. Generic
/// trailers such as cargo's "test failed, to rerun pass `--lib`" say nothing.
fn last_line(s: &str) -> String {
    // In order of how much they tell: the assertion itself, then the failing
    // test or error, then anything that says it failed.
    const TELLING: &[&[&str]] = &[
        &["assertion", "AssertionError", "expected", "panicked at"],
        &[
            "error[",
            "Error:",
            "error:",
            "FAIL:",
            "not found",
            "No such file",
        ],
        &["FAILED", "failed", "Traceback"],
    ];
    const GENERIC: &[&str] = &[
        "test failed, to rerun",
        "could not compile",
        "aborting due to",
        "Some tests failed",
        "npm ERR! Test failed",
        "test result:",
    ];
    let lines: Vec<&str> = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !GENERIC.iter().any(|g| l.contains(g)))
        .collect();
    let telling = TELLING.iter().find_map(|group| {
        lines
            .iter()
            .rev()
            .find(|l| group.iter().any(|t| l.contains(t)))
    });
    telling
        .or(lines.last())
        .or(s.lines().rev().find(|l| !l.trim().is_empty()).as_ref())
        .map(|l| l.trim())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

enum Step {
    Done(Box<agent::Report>),
    Stop(ItemEnd),
}

/// One agent call with usage-limit sleeps and short throttling retries; the
/// interrupted call does not use up a round (SPEC §7).
#[allow(clippy::too_many_arguments)]
async fn call_agent(
    night: &Night,
    run_id: Uuid,
    item_id: i64,
    round_id: i64,
    entry: &PlanEntry,
    role: Role,
    n: u32,
    prompt: String,
    contract_json: &str,
    feedback: &str,
    slot: &Slot,
    item_dir: &Path,
    item_deadline: &mut Instant,
    totals: &mut Totals,
) -> Result<Step, Error> {
    let pool = &night.pool;
    let c = &night.config;
    let key = entry.item.key.as_str();
    // The caps sealed in the approved contract, not the config of the moment.
    let caps = &entry.contract.limits;
    let agent_cfg = match role {
        Role::Writer => &c.writer,
        Role::Reviewer => &c.reviewer,
    };
    let agent_kind = agent_cfg.kind.to_string();
    let stop = |outcome: Outcome, reason: String, t: &Totals| {
        Step::Stop(ItemEnd {
            reason: Some(reason),
            tokens: t.tokens,
            cost_usd: t.cost_known.then_some(t.cost),
            ..ItemEnd::of(outcome)
        })
    };
    let mut attempt = 0u32;
    let mut throttles = 0u32;
    loop {
        attempt += 1;
        let left = item_deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(stop(
                Outcome::TimedOut,
                format!("the item timeout was reached during round {n}"),
                totals,
            ));
        }
        let call = agent::Call {
            role,
            round: n,
            prompt: prompt.clone(),
            contract_json: contract_json.to_string(),
            feedback: feedback.to_string(),
            cwd: slot.path.clone(),
            timeout: caps.agent_timeout().min(left),
            env: night.agent_env.clone(),
            tz: night.tz,
            log_dir: agent::call_dir(item_dir, n, role, attempt),
            secrets: night.secrets.clone(),
            run_as: night.run_as.clone(),
            max_output: c.max_agent_output,
        };
        let report = match agent::call(agent_cfg, &call, &night.cancel).await {
            Ok(r) => r,
            // The same executable would fail every item: the run stops
            // and is resumed once it is fixed.
            Err(e) => {
                let why = night.redact(&format!(
                    "{e}; fix [{}] command in the config or the agent's installation",
                    role.as_str()
                ));
                night.stop_systemic(&why);
                return Ok(stop(Outcome::Error, why, totals));
            }
        };
        night
            .db(|| {
                rec::record_agent_call(
                    pool,
                    item_id,
                    Some(round_id),
                    role.as_str(),
                    &agent_kind,
                    &report,
                )
            })
            .await?;
        totals.tokens = totals.tokens.saturating_add(report.usage.total_tokens());
        if let Some(cost) = report.usage.cost_usd {
            totals.cost += cost;
            totals.cost_known = true;
        }
        if night.cancel.is_cancelled() {
            return Ok(stop(
                Outcome::Interrupted,
                format!(
                    "stopped by a signal during the {} call of round {n}",
                    role.as_str()
                ),
                totals,
            ));
        }
        if totals.tokens > caps.max_tokens.value {
            return Ok(stop(
                Outcome::BudgetExceeded,
                format!(
                    "{} tokens used, above the cap of {}",
                    totals.tokens, caps.max_tokens.value
                ),
                totals,
            ));
        }
        if totals.cost_known && totals.cost > caps.max_cost_usd.value {
            return Ok(stop(
                Outcome::BudgetExceeded,
                format!(
                    "${:.2} spent, above the item cap of ${:.2}",
                    totals.cost, caps.max_cost_usd.value
                ),
                totals,
            ));
        }
        if let Some(reading) = report.limit.clone() {
            let now = night.clock.now();
            let message = night.redact(&reading.message);
            match reading.kind {
                LimitKind::UsageLimit => {
                    let policy = sleep_policy(&c.limits);
                    let sleep = limit::sleep_for(&reading, now, &policy);
                    let until = now
                        + chrono::Duration::from_std(sleep).unwrap_or(chrono::Duration::hours(1));
                    if until >= night.deadline {
                        // No sleep is taken (nor recorded): the run stops now.
                        let reset = reading
                            .resets_at
                            .map(|r| local(r, night.tz))
                            .unwrap_or_else(|| "an unknown time".into());
                        night.db(|| rec::event(pool, Some(run_id), "usage_limit_after_deadline", serde_json::json!({"agent": agent_cfg.kind.to_string(), "resets_at": reading.resets_at, "message": night.redact(&reading.message)}))).await?;
                        return Ok(stop(
                            Outcome::Deadline,
                            format!(
                                "the {} agent's usage limit resets at {reset}, after the deadline {}",
                                role.as_str(),
                                local(night.deadline, night.tz)
                            ),
                            totals,
                        ));
                    }
                    night
                        .db(|| {
                            rec::record_limit_sleep(
                                pool,
                                run_id,
                                Some(item_id),
                                &agent_kind,
                                LimitKind::UsageLimit.as_str(),
                                &message,
                                now,
                                until,
                                reading.resets_at,
                            )
                        })
                        .await?;
                    night
                        .db(|| rec::set_sleeping(pool, run_id, until, &agent_kind))
                        .await?;
                    tracing::info!(until = %until, agent = %agent_cfg.kind, "usage limit: sleeping until reset");
                    let slept_from = Instant::now();
                    let slept = schedule::sleep_until(
                        night.clock.as_ref(),
                        until,
                        &night.cancel,
                        schedule::DEFAULT_SLICE,
                    )
                    .await;
                    // Sleeping at a limit is not the item's work time (SPEC §7): its timeout moves on.
                    *item_deadline += slept_from.elapsed();
                    if slept == schedule::SleepOutcome::Cancelled {
                        return Ok(stop(
                            Outcome::Interrupted,
                            "stopped by a signal while sleeping at a usage limit".into(),
                            totals,
                        ));
                    }
                    night
                        .db(|| rec::set_phase(pool, run_id, role.phase(), Some(key), Some(n)))
                        .await?;
                    continue;
                }
                LimitKind::Transient if throttles < MAX_THROTTLE_RETRIES => {
                    throttles += 1;
                    let policy = sleep_policy(&c.limits);
                    let wait = limit::sleep_for(&reading, now, &policy);
                    let until = now
                        + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(30));
                    night
                        .db(|| {
                            rec::record_limit_sleep(
                                pool,
                                run_id,
                                Some(item_id),
                                &agent_kind,
                                LimitKind::Transient.as_str(),
                                &message,
                                now,
                                until,
                                None,
                            )
                        })
                        .await?;
                    if schedule::sleep_until(
                        night.clock.as_ref(),
                        until,
                        &night.cancel,
                        schedule::DEFAULT_SLICE,
                    )
                    .await
                        == schedule::SleepOutcome::Cancelled
                    {
                        return Ok(stop(
                            Outcome::Interrupted,
                            "stopped by a signal while waiting out throttling".into(),
                            totals,
                        ));
                    }
                    continue;
                }
                _ => {}
            }
        }
        if report.outcome.timed_out {
            return Ok(stop(
                Outcome::TimedOut,
                format!(
                    "the {} call of round {n} was killed after {}",
                    role.as_str(),
                    config::format_duration(call.timeout)
                ),
                totals,
            ));
        }
        return Ok(Step::Done(Box::new(report)));
    }
}

impl Night {
    /// Runs the ledger call `f`. When the ledger stopped answering
    /// ([`crate::ledger::is_outage`]) the run waits for it — restarting the
    /// embedded cluster if that is the ledger, taking the repository lock
    /// again — and runs `f` again: a restart of PostgreSQL during a night
    /// costs a pause, not the item's work (SPEC §9).
    ///
    /// # Errors
    /// A query error as [`Error`]; an outage that outlasts
    /// [`LEDGER_PATIENCE`], the deadline or a signal as an [`Error`] saying
    /// the next drain resumes the run.
    pub async fn db<T, Fut>(&self, f: impl Fn() -> Fut) -> Result<T, Error>
    where
        Fut: std::future::Future<Output = sqlx::Result<T>>,
    {
        let mut waiting: Option<Instant> = None;
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) if crate::ledger::is_outage(&e) => {
                    self.wait_for_ledger(e, &mut waiting).await?
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits until the ledger answers again after `e`; `since` is when this
    /// outage began (set on the first call). Returns when it is back and the
    /// lock is ours again.
    async fn wait_for_ledger(
        &self,
        e: sqlx::Error,
        since: &mut Option<Instant>,
    ) -> Result<(), Error> {
        let began = *since.get_or_insert_with(|| {
            let msg = format!(
                "the ledger ({}) stopped answering: {}; the run waits for it (at most {}, or until the deadline or a signal)",
                self.db_source.describe(),
                outage_text(&e),
                config::format_duration(LEDGER_PATIENCE)
            );
            tracing::info!("{msg}");
            let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("warning: {msg}\n"));
            Instant::now()
        });
        let mut pause = Duration::from_millis(500);
        let mut last = e;
        loop {
            let give_up = if self.cancel.is_cancelled() {
                Some("a signal came")
            } else if self.clock.now() >= self.deadline {
                Some("the deadline passed")
            } else if began.elapsed() >= LEDGER_PATIENCE {
                Some("it stayed away too long")
            } else {
                None
            };
            if let Some(why) = give_up {
                return Err(Error::failed(format!(
                    "ledger: the database stopped answering ({}) and {why} while the run waited for it; {}. Nothing recorded is lost: once it is back, `nightshift drain` resumes this run",
                    outage_text(&last),
                    self.db_source.describe()
                )));
            }
            if let crate::ledger::DbSource::Embedded { data_dir } = &self.db_source {
                // Our own private cluster died (a crash, an OOM kill): start it again.
                match crate::ledger::embedded::Cluster::resolve(
                    data_dir,
                    &crate::ledger::embedded::process_env,
                )
                .await
                {
                    Ok(c) => {
                        if let Err(err) = c.start().await {
                            tracing::warn!("restarting the embedded database failed: {err}");
                        }
                    }
                    Err(err) => tracing::warn!("the embedded database: {err}"),
                }
            }
            // The pool itself may wait a while for a connection: a signal
            // does not wait with it.
            let probe = tokio::select! {
                r = sqlx::query("SELECT 1").execute(&self.pool) => Some(r),
                () = self.cancel.cancelled() => None,
            };
            match probe {
                Some(Ok(_)) => {
                    self.retake_lock().await?;
                    let msg = format!(
                        "the ledger answers again after {}; the run goes on",
                        config::format_duration(Duration::from_secs(
                            began.elapsed().as_secs().max(1)
                        ))
                    );
                    tracing::info!("{msg}");
                    let _ = std::io::Write::write_fmt(
                        &mut std::io::stderr(),
                        format_args!("note: {msg}\n"),
                    );
                    return Ok(());
                }
                Some(Err(err)) => last = err,
                None => continue,
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.cancel.cancelled() => {}
            }
            pause = (pause * 2).min(Duration::from_secs(10));
        }
    }

    /// Checks that the repository lock is still this run's (a server restart
    /// drops it with its connection) and takes it again if it is not.
    ///
    /// # Errors
    /// Another run took the lock meanwhile (this run must stop: both would
    /// do the same items), or the ledger stays away (see [`Night::db`]).
    pub async fn hold_lock(&self) -> Result<(), Error> {
        let held = match self.lock.lock().await.as_mut() {
            Some(l) => l.still_held().await,
            None => Ok(false),
        };
        match held {
            Ok(true) => Ok(()),
            Ok(false) => self.retake_lock().await,
            // Its connection is gone: the server restarted or is away.
            Err(_) => {
                self.db(|| sqlx::query("SELECT 1").execute(&self.pool))
                    .await?;
                self.retake_lock().await
            }
        }
    }

    /// Takes the repository lock again if this run no longer holds it.
    async fn retake_lock(&self) -> Result<(), Error> {
        let mut guard = self.lock.lock().await;
        if let Some(l) = guard.as_mut()
            && matches!(l.still_held().await, Ok(true))
        {
            return Ok(());
        }
        *guard = None;
        match self
            .ledger
            .try_lock_repo(&self.repo_id, &crate::ledger::HolderInfo::current())
            .await
        {
            Ok(crate::ledger::RepoLockAttempt::Acquired(l)) => {
                *guard = Some(l);
                Ok(())
            }
            Ok(crate::ledger::RepoLockAttempt::Held { holder }) => Err(Error::refused(format!(
                "this run lost the lock of {} while the ledger was away, and another nightshift run took it ({}); this run stops so that the two do not do the same items",
                self.repo.display(),
                holder
                    .map(|h| h.to_string())
                    .unwrap_or_else(|| "another process".into())
            ))),
            Err(e) => Err(Error::Ledger {
                detail: format!("taking the lock of {} again: {e}", self.repo.display()),
                outage: false,
                source: None,
            }),
        }
    }

    /// Records that the run must stop for `why` (see [`Night::systemic`]).
    fn stop_systemic(&self, why: &str) {
        if let Ok(mut g) = self.systemic.lock() {
            g.get_or_insert_with(|| why.to_string());
        }
    }

    /// Why the run cannot go on, if it cannot: a cause already recorded, or
    /// a data directory that is gone, read-only or full.
    fn systemic_problem(&self) -> Option<String> {
        if let Some(why) = self.systemic.lock().ok().and_then(|g| g.clone()) {
            return Some(why);
        }
        let why = self.slots_lock.as_ref().and_then(|l| l.check().err())?;
        self.stop_systemic(&why);
        Some(why)
    }

    /// Why GitHub is considered down for the rest of this run, if it is.
    pub fn github_down(&self) -> Option<String> {
        self.forge_down.lock().map(|g| g.clone()).unwrap_or(None)
    }

    fn mark_github_down(&self, why: &str) {
        if let Ok(mut g) = self.forge_down.lock() {
            g.get_or_insert_with(|| why.to_string());
        }
    }

    /// Redacts every secret (token, ledger URL, configured secrets, and
    /// every value [`crate::secret::remember`]ed, such as a password of the
    /// remote's URL) from `s`, in every form [`crate::secret::Redactor`] knows.
    pub fn redact(&self, s: &str) -> String {
        crate::secret::Redactor::with_known(self.secrets.iter()).redact(s)
    }
}

/// The server's own words for an outage, without the driver's decoration.
fn outage_text(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => db.message().to_string(),
        e => e.to_string(),
    }
}

/// The runner is the committer of every item commit (SPEC §5.6).
fn runner_identity() -> slot::Identity {
    slot::Identity {
        name: "nightshift".into(),
        email: "nightshift@localhost".into(),
    }
}

/// The sleep policy of SPEC §7 from the config's limits.
pub fn sleep_policy(l: &config::Limits) -> limit::SleepPolicy {
    limit::SleepPolicy {
        buffer: l.limit_buffer,
        min: l.limit_sleep_min,
        max: l.limit_sleep_max,
        ..limit::SleepPolicy::default()
    }
}

#[cfg(test)]
mod tests {
    use super::last_line;

    #[test]
    fn the_telling_line_of_a_failure() {
        let cargo = "running 3 tests\ntest t::a ... ok\ntest t::b ... FAILED\n\nfailures:\n\n---- t::b stdout ----\n\nthread 't::b' panicked at src/lib.rs:9:9:\nassertion `left == right` failed: modulo\n  left: 1\n right: 3\n\nfailures:\n    t::b\n\ntest result: FAILED. 2 passed; 1 failed\n\nerror: test failed, to rerun pass `--lib`\n";
        assert_eq!(last_line(cargo), "assertion `left == right` failed: modulo");
        assert_eq!(
            last_line("sh: 1: nope: not found\n"),
            "sh: 1: nope: not found"
        );
        assert_eq!(last_line("all good\nbut exit 1\n"), "but exit 1");
        assert_eq!(
            last_line("error: test failed, to rerun pass `--lib`\n"),
            "error: test failed, to rerun pass `--lib`"
        );
    }
}
