//! One item of the plan (docs/loop.md): the checks before any work
//! (blocked, not approved, an earlier PR, an open question, too many
//! attempts, the run's cost cap — docs/loop.md#before-the-checkout), the
//! checkout (docs/loop.md#checkout), the setup commands, the loop over
//! rounds within the item's limits, and what every ending shares (the
//! checkout discarded, the cost counted against the run, the writer's
//! findings filed). One round itself is [`super::round`]; the walk over the
//! plan is [`super::drain`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config;
use crate::contract::PlanEntry;
use crate::error::Error;
use crate::gate::{self, GateRun, GateSpec};
use crate::ledger::records::ItemEnd;
use crate::outcome::{Outcome, Phase};
use crate::report::RoundSummary;
use crate::slot::{self, Slot};

use super::checks::{grant_checkout, last_line};
use super::record::Record;
use super::{Night, Totals, local, review_queue, round, ship};

/// One item's fixed facts while its rounds run.
pub(super) struct Item<'a> {
    pub night: &'a Night,
    pub run_id: Uuid,
    pub item_id: i64,
    pub entry: &'a PlanEntry,
    /// The fresh checkout the agents work in.
    pub slot: &'a Slot,
    /// The item's branch (`nightshift/…`, docs/loop.md#checkout).
    pub branch: &'a str,
    /// The item's log directory.
    pub dir: &'a Path,
    /// The attempt's ledger handle (fenced on its claim).
    pub record: Record<'a>,
    /// Stops the attempt's agents and gates: a signal, or the claim lost.
    pub cancel: &'a CancellationToken,
    /// The contract as the agents receive it.
    pub contract_json: String,
    /// The GitHub token for git's askpass, if any (never an agent's).
    pub token: Option<String>,
    /// The PR this item tends, when it is a tend card of the second night
    /// (docs/github.md "The second night"): it ships by pushing to that PR.
    pub tend: Option<&'a super::tend::Tend<'a>>,
}

/// What an item's rounds gather as they go.
pub(super) struct Progress {
    /// Tokens and cost so far.
    pub totals: Totals,
    /// When the item's time is up; usage-limit sleeps move it later, as
    /// they are not the item's work time (docs/limits.md#sleep-policy).
    pub deadline: Instant,
    /// When the item began.
    pub started: Instant,
    /// The writer's findings of every round, without repeats.
    pub findings: Vec<String>,
    /// What the writer is told in the next round.
    pub feedback: String,
    /// (diff hash, failure signature) of each failed round, for the
    /// no-progress rule (docs/loop.md#no-progress).
    pub history: Vec<(String, String)>,
    /// The rounds' summaries, for the PR body.
    pub rounds: Vec<RoundSummary>,
    /// The latest round's failure: the item's end when the rounds run out.
    pub last_failure: (Outcome, String),
    /// The setup commands' runs, for the PR body.
    pub setup: Vec<GateRun>,
}

impl Progress {
    pub(super) fn new(item: &Item<'_>) -> Self {
        let started = Instant::now();
        Progress {
            totals: Totals::default(),
            deadline: started + item.entry.contract.limits.item_timeout(),
            started,
            findings: Vec::new(),
            feedback: String::new(),
            history: Vec::new(),
            rounds: Vec::new(),
            // The last failed round's step and telling line ("" before one
            // failed): what a later stop (`timed_out`, `budget_exceeded`)
            // adds to its reason.
            last_failure: (Outcome::Error, String::new()),
            setup: Vec::new(),
        }
    }

    /// The item's end after `rounds` rounds, with its totals.
    pub fn end(&self, outcome: Outcome, reason: String, rounds: u32) -> ItemEnd {
        ItemEnd {
            reason: Some(reason),
            rounds,
            tokens: self.totals.tokens,
            cost_usd: self.totals.cost_known.then_some(self.totals.cost),
            ..ItemEnd::of(outcome)
        }
    }
}

impl Item<'_> {
    /// How setup and gate commands run in the checkout: the gate's
    /// environment, `timeout` each, their logs under `log_dir`.
    pub fn gate_spec(&self, timeout: Duration, log_dir: PathBuf) -> GateSpec {
        GateSpec {
            cwd: self.slot.path.clone(),
            // Each slot its own build output (docs/loop.md#build-output-per-slot).
            env: crate::build_output::for_slot(&self.night.gate_env, &self.slot.path),
            timeout,
            log_dir,
            secrets: self.night.secrets.clone(),
            run_as: self.night.run_as.clone(),
        }
    }
}

/// One attempt at a claimed item, as a worker hands it over.
pub(super) struct Attempt<'a> {
    pub night: &'a Night,
    pub run_id: Uuid,
    /// The item's row in the ledger.
    pub item_id: i64,
    pub entry: &'a PlanEntry,
    /// The contract SHAs the run's approval covers.
    pub approved: &'a super::Approved,
    /// The worker's checkout slot (0-based).
    pub slot: usize,
    /// The attempt's ledger handle.
    pub record: Record<'a>,
    /// Stops the attempt's work: a signal, or the claim lost.
    pub cancel: &'a CancellationToken,
}

/// Decides what happens to one plan entry and runs it if it should run;
/// the run's cost cap counts what every worker spent (docs/workers.md).
///
/// # Errors
/// The ledger stays away (see [`Night::db`]), or the claim was lost.
pub(super) async fn one_item(at: &Attempt<'_>) -> Result<ItemEnd, Error> {
    let (night, entry) = (at.night, at.entry);
    let branch = slot::branch_name(&entry.item.title, &entry.item.key);
    if let Some(end) = not_to_run(at, &branch).await? {
        return Ok(end);
    }
    let cap = night.config.limits.max_cost_usd_per_run;
    if at.record.run_spent(Some(at.item_id)).await? >= cap {
        return Ok(ItemEnd {
            reason: Some(format!("the run's cost cap of ${cap:.2} is used up")),
            ..ItemEnd::of(Outcome::BudgetExceeded)
        });
    }
    let mut slot = match checkout(at, &branch).await? {
        Ok(slot) => slot,
        Err(end) => return Ok(end),
    };
    // Every item is built from the base the run took first, on every
    // worker and host (docs/loop.md#checkout).
    let pin = at.record.base_commit(&slot.base_commit).await?;
    let token = night.token.as_ref().map(|t| t.expose().to_string());
    if let Err(e) = tokio::task::block_in_place(|| slot.pin_base(&pin, token.as_deref())) {
        return Ok(ItemEnd {
            reason: Some(format!(
                "checkout failed: cannot check out the run's base {pin}: {}",
                night.redact(&e.to_string())
            )),
            branch: Some(branch),
            ..ItemEnd::of(Outcome::Error)
        });
    }
    let key = &entry.item.key;
    let dir = night
        .data_dir
        .join("logs")
        .join(at.run_id.to_string())
        .join(format!("item-{:03}-{}", entry.index, &key[..8]));
    let item = Item {
        night,
        run_id: at.run_id,
        item_id: at.item_id,
        entry,
        slot: &slot,
        branch: &branch,
        dir: &dir,
        record: at.record,
        cancel: at.cancel,
        contract_json: entry.contract.canonical_json(),
        token,
        tend: None,
    };
    let mut end = match item_loop(&item).await {
        Ok(end) => end,
        Err(e) => {
            // The ledger is gone for good, a signal came while waiting for
            // it, or the claim passed to another worker: the item is redone
            // (by the next drain, or that worker) from a clean checkout.
            let _ = tokio::task::block_in_place(|| slot.discard());
            return Err(e);
        }
    };
    // A failed item leaves nothing behind (docs/loop.md#outcomes). A
    // shipped one's work is on its branch: its slot is reset by the next
    // item's checkout, not twice.
    let shipped = matches!(
        end.outcome,
        Outcome::PrOpened | Outcome::PrFailed | Outcome::BranchPushed
    );
    if !shipped && let Err(e) = tokio::task::block_in_place(|| slot.discard()) {
        end.reason = Some(format!(
            "{}; cleaning the checkout failed: {e}",
            end.reason.unwrap_or_default()
        ));
    }
    end.branch.get_or_insert(branch);
    Ok(end)
}

/// Why the entry does not run, if it does not: blocked, not approved, an
/// earlier PR, a question waiting for its answer, too many failed attempts,
/// a full review queue.
async fn not_to_run(at: &Attempt<'_>, branch: &str) -> Result<Option<ItemEnd>, Error> {
    let (night, entry, approved) = (at.night, at.entry, at.approved);
    let key = &entry.item.key;
    if let Some(b) = &entry.blocked {
        return Ok(Some(ItemEnd {
            reason: Some(b.clone()),
            question: entry.contract.questions.first().cloned(),
            ..ItemEnd::of(Outcome::Blocked)
        }));
    }
    if !approved.contains(&entry.contract_sha) {
        return Ok(Some(not_approved(at).await?));
    }
    // An earlier PR of this item (ledger, confirmed on GitHub). GitHub may
    // be slow or retried: `status` says so rather than a stale phase.
    at.record.phase(Phase::Github, key, None).await?;
    if let Some(end) = ship::earlier_pr(night, &at.record, entry, branch).await? {
        return Ok(Some(end));
    }
    if let Some(end) = waiting(at).await? {
        return Ok(Some(end));
    }
    // Last, right before the work: no agent time for a PR that would not
    // be opened (config `max_open_prs`).
    review_queue::full(night, entry, None).await
}

/// A changed (same key, or a reworded item where a gone one sat) or added
/// item: why it is not approved (docs/contract.md).
async fn not_approved(at: &Attempt<'_>) -> Result<ItemEnd, Error> {
    let (night, entry) = (at.night, at.entry);
    let held = at.record.contract_items(at.approved.in_order()).await?;
    let current: Vec<crate::approval::Held> = night
        .plan
        .entries
        .iter()
        .map(|e| crate::approval::Held {
            key: e.item.key.clone(),
            title: e.item.title.clone(),
        })
        .collect();
    let why = crate::approval::why_not_approved(&held, &current, &entry.item.key);
    Ok(ItemEnd {
        reason: Some(why.reason().into()),
        ..ItemEnd::of(Outcome::NotApproved)
    })
}

/// A question the writer asked of this contract waits for its answer (an
/// edit of the item), instead of costing a writer call every night; and an
/// item that failed `max_attempts` times with this contract waits for an
/// edit too (docs/loop.md#before-the-checkout).
async fn waiting(attempt: &Attempt<'_>) -> Result<Option<ItemEnd>, Error> {
    let (night, entry) = (attempt.night, attempt.entry);
    let (key, sha) = (&entry.item.key, &entry.contract_sha);
    if let Some((q, asked_in, at)) = attempt.record.open_question(key, sha).await? {
        let when = at
            .map(|t| format!(" on {}", local(t, night.tz)))
            .unwrap_or_default();
        return Ok(Some(ItemEnd {
            reason: Some(format!(
                "waiting for an answer to the writer's question (asked in run {}{when}); answer it in the item (a detail line, or `accept:`) and the changed item runs again",
                &asked_in.to_string()[..8]
            )),
            question: Some(q),
            ..ItemEnd::of(Outcome::Blocked)
        }));
    }
    let attempts = attempt.record.failed_attempts(key, sha).await?;
    let max_attempts = night.config.limits.max_attempts as i64;
    if attempts >= max_attempts {
        return Ok(Some(ItemEnd {
            reason: Some(format!(
                "failed on {attempts} earlier run(s) with this contract (max_attempts = {max_attempts}); read its last report, then edit the item (a new contract starts over) or raise max_attempts"
            )),
            ..ItemEnd::of(Outcome::Blocked)
        }));
    }
    Ok(None)
}

/// Prepares the item's checkout on its branch (docs/loop.md#checkout), or
/// the item's end when it cannot be made. A remote that could not be
/// fetched is not tried again in this run.
pub(super) async fn checkout(
    at: &Attempt<'_>,
    branch: &str,
) -> Result<Result<Slot, ItemEnd>, Error> {
    let night = at.night;
    at.record
        .phase(Phase::Checkout, &at.entry.item.key, None)
        .await?;
    let slot_dir = slot::slot_path(&night.data_dir, &night.repo, at.slot);
    let token = night.token.as_ref().map(|t| t.expose().to_string());
    let failed = |outcome: Outcome, why: String| ItemEnd {
        reason: Some(why),
        branch: Some(branch.to_string()),
        ..ItemEnd::of(outcome)
    };
    if let Some(why) = night.remote_down.lock().map(|g| g.clone()).unwrap_or(None) {
        return Ok(Err(failed(
            Outcome::Error,
            format!(
                "checkout failed: not tried, the remote could not be fetched earlier in this run ({why})"
            ),
        )));
    }
    let pinned = at.record.pinned_base().await?;
    let kept = night
        .kept_walks
        .lock()
        .ok()
        .and_then(|mut k| k.remove(&slot_dir));
    let prepared = night
        .until_signal(at.cancel, |stop| {
            let at = slot::PrepareAt {
                dir: &slot_dir,
                repo: &night.repo,
                remote: &night.config.remote,
                urls: night.remote_urls.clone(),
                base: &night.config.base,
                branch,
                token: token.as_deref(),
                stop: Some(stop),
                pinned: pinned.as_deref(),
                kept,
            };
            Slot::prepare_at(at)
        })
        .await;
    match prepared {
        Ok(s) => Ok(Ok(s)),
        Err(_) if at.cancel.is_cancelled() => Ok(Err(failed(
            Outcome::Interrupted,
            "stopped by a signal while the checkout was prepared".into(),
        ))),
        Err(e) => {
            let why = night.redact(&e.to_string());
            if e.is_remote_unreachable()
                && let Ok(mut g) = night.remote_down.lock()
            {
                g.get_or_insert_with(|| why.lines().next().unwrap_or_default().to_string());
            }
            Ok(Err(failed(
                Outcome::Error,
                format!("checkout failed: {why}"),
            )))
        }
    }
}

/// The rounds of one item (docs/loop.md#rounds), then what every ending
/// shares: a round cut short ends with the item, and the writer's
/// `FINDINGS:` are filed as issues (proposals, docs/loop.md#findings-and-questions)
/// whether or not the item succeeded.
async fn item_loop(item: &Item<'_>) -> Result<ItemEnd, Error> {
    let mut st = Progress::new(item);
    let end = rounds(item, &mut st).await?;
    // A round cut short (timeout, budget, signal, deadline) ends with the item.
    item.record
        .close_open_rounds(item.item_id, end.outcome)
        .await?;
    file_findings(item, &st.findings).await?;
    Ok(end)
}

/// The checkout handed to `agent_user`, the setup, and the rounds up to
/// the contract's cap.
async fn rounds(item: &Item<'_>, st: &mut Progress) -> Result<ItemEnd, Error> {
    // Under `agent_user`, the checkout must be the agent's to write
    // (docs/security.md#with-agent_user).
    if let Some(why) = grant_checkout(item.night, item.slot).await {
        return Ok(st.end(Outcome::Error, why, 0));
    }
    if let Some(end) = setup(item, st).await? {
        return Ok(end);
    }
    let rounds = item.entry.contract.limits.rounds.value;
    for n in 1..=rounds {
        if let Some(end) = before_round(item, st, n) {
            return Ok(end);
        }
        if let Some(end) = round::run(item, st, n).await? {
            return Ok(end);
        }
    }
    let (outcome, mut reason) = st.last_failure.clone();
    if reason.is_empty() {
        reason = "no round ran".into();
    }
    let why = format!("{reason} (after {rounds} round(s), the cap)");
    Ok(st.end(outcome, why, rounds))
}

/// Why round `n` does not start, if it does not: a signal, the deadline,
/// the item's timeout (docs/limits.md#deadline).
pub(super) fn before_round(item: &Item<'_>, st: &Progress, n: u32) -> Option<ItemEnd> {
    let night = item.night;
    let (outcome, why) = if item.cancel.is_cancelled() {
        (
            Outcome::Interrupted,
            format!("stopped by a signal before round {n}"),
        )
    } else if night.clock.now() >= night.deadline {
        (
            Outcome::Deadline,
            format!(
                "round {n} not started: the deadline {} passed",
                local(night.deadline, night.tz)
            ),
        )
    } else if Instant::now() >= st.deadline {
        (
            Outcome::TimedOut,
            crate::report::after_failure(
                Outcome::TimedOut,
                format!(
                    "the item timeout of {} was reached before round {n}",
                    config::format_duration(item.entry.contract.limits.item_timeout())
                ),
                &st.last_failure.1,
            ),
        )
    } else {
        return None;
    };
    Some(st.end(outcome, why, n - 1))
}

/// The contract's setup commands, in the fresh checkout; the item's end
/// when one fails.
pub(super) async fn setup(item: &Item<'_>, st: &mut Progress) -> Result<Option<ItemEnd>, Error> {
    let c = &item.entry.contract;
    if c.setup.is_empty() {
        return Ok(None);
    }
    let key = &item.entry.item.key;
    item.record.phase(Phase::Setup, key, None).await?;
    let timeout = c.limits.gate_timeout().min(c.limits.item_timeout());
    let spec = item.gate_spec(timeout, item.dir.to_path_buf());
    let runs = match gate::run_all("setup", &c.setup, &spec, item.cancel).await {
        Ok(runs) => runs,
        Err(e) => {
            let why = format!("setup could not run: {e}");
            return Ok(Some(st.end(Outcome::Error, why, 0)));
        }
    };
    let Some(bad) = runs.iter().find(|r| !r.passed()) else {
        st.setup = runs;
        return Ok(None);
    };
    if item.cancel.is_cancelled() {
        let why = "stopped by a signal during setup".to_string();
        return Ok(Some(st.end(Outcome::Interrupted, why, 0)));
    }
    let why = format!(
        "setup command `{}` failed ({}): {}",
        bad.command,
        bad.exit_code
            .map(|c| format!("exit {c}"))
            .unwrap_or("timed out".into()),
        last_line(&bad.output_tail)
    );
    Ok(Some(st.end(Outcome::Error, why, 0)))
}

/// Files the writer's `FINDINGS:` as GitHub issues labelled
/// `findings_label` (docs/loop.md#findings-and-questions, docs/github.md#findings-issues): proposals, never backlog items. At most
/// `max_findings_per_item` distinct titles per item; an open issue with the
/// same title is reused, not duplicated. Each is recorded in the ledger, with
/// its issue when GitHub took it; a GitHub failure is logged and does not
/// fail the item. After a signal nothing is posted (docs/limits.md#signals: stop at once).
pub(super) async fn file_findings(item: &Item<'_>, findings: &[String]) -> Result<(), Error> {
    let night = item.night;
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
        if let Some(forge) = night.forge.as_ref().filter(|_| !item.cancel.is_cancelled()) {
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
        let issue = number.zip(url.as_deref());
        item.record.finding(item.item_id, &title, issue).await?;
    }
    Ok(())
}
