//! One item's stages that come before and around its rounds (docs/loop.md):
//! the item's fixed facts ([`Item`]) and what its rounds gather
//! ([`Progress`], [`Round`]), the checkout (docs/loop.md#checkout), the setup
//! commands, the checks before each round and the filing of the writer's
//! findings. It does not decide which stage comes next (that is the driver,
//! [`super::attempt`]) nor run a round ([`super::round`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config;
use crate::contract::PlanEntry;
use crate::error::Error;
use crate::gate::{self, GateRun, GateSpec};
use crate::ledger::items::ItemEnd;
use crate::outcome::Phase;
use crate::report::RoundSummary;
use crate::slot::{self, Slot};

use super::checks::last_line;
use super::decide::{self, Fact, RoundFailure};
use super::record::Record;
use super::{Night, Totals, local};

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
}

/// One round of an item as its steps, its agent calls and its delivery see
/// it: the item, what the item's rounds gathered so far, and this round's
/// number (from 1) and ledger id. The driver ([`super::attempt`]) opens it.
pub(super) struct Round<'a> {
    /// The item (fixed while it runs).
    pub item: &'a Item<'a>,
    /// What the item's rounds gathered (totals, feedback, history).
    pub st: &'a mut Progress,
    /// The round's number, from 1.
    pub n: u32,
    /// The round's row in the ledger.
    pub id: i64,
    /// When the round began (for its summary in the PR body).
    pub started: Instant,
}

impl Round<'_> {
    /// The item's end for `fact` in this round.
    pub fn end(&self, fact: Fact) -> ItemEnd {
        self.st.end(fact, self.n)
    }

    /// Records the phase the round is in.
    ///
    /// # Errors
    /// The ledger stays away (see [`Night::db`]), or the claim was lost.
    pub async fn phase(&self, phase: Phase) -> Result<(), Error> {
        let key = self.item.entry.item.key.as_str();
        self.item.record.phase(phase, key, Some(self.n)).await
    }
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
    /// What the reviewer is told besides the contract (a fix round's
    /// failure); empty for an item.
    pub review_context: String,
    /// (diff hash, failure signature) of each failed round, for the
    /// no-progress rule (docs/loop.md#no-progress).
    pub history: Vec<(String, String)>,
    /// The rounds' summaries, for the PR body.
    pub rounds: Vec<RoundSummary>,
    /// The latest round's failure and its reason ("" and `None` before one
    /// failed): the item's end when the rounds run out, and what a later
    /// stop (`timed_out`, `budget_exceeded`) adds to its reason.
    pub last_failure: (Option<RoundFailure>, String),
    /// The setup commands' runs, for the PR body.
    pub setup: Vec<GateRun>,
    /// Who plays the writer and the reviewer now: the configured agents
    /// or their fallbacks (docs/limits.md#fallback).
    pub cast: super::fallback::Cast,
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
            review_context: String::new(),
            history: Vec::new(),
            rounds: Vec::new(),
            last_failure: (None, String::new()),
            setup: Vec::new(),
            cast: Default::default(),
        }
    }

    /// The item's end for `fact` after `rounds` rounds, with its totals
    /// (see [`decide::after_rounds`]).
    pub fn end(&self, fact: Fact, rounds: u32) -> ItemEnd {
        decide::after_rounds(fact, &self.last_failure.1).with(|f| {
            f.rounds = rounds;
            f.tokens = self.totals.tokens;
            f.cost_usd = self.totals.cost_known.then_some(self.totals.cost);
        })
    }
}

impl Item<'_> {
    /// How setup and gate commands run in the checkout: the gate's
    /// environment, `timeout` each, their logs under `log_dir`.
    pub fn gate_spec(&self, timeout: Duration, log_dir: PathBuf) -> GateSpec {
        // Each slot its own build output (docs/loop.md#build-output-per-slot).
        let mut env = crate::build_output::for_slot(&self.night.gate_env, &self.slot.path);
        let c = &self.entry.contract;
        let sandbox = super::sandbox::for_gate(self.night, c, &self.slot.path, &mut env);
        GateSpec {
            cwd: self.slot.path.clone(),
            env,
            timeout,
            log_dir,
            secrets: self.night.secrets.clone(),
            run_as: self.night.run_as.clone(),
            sandbox,
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
    let token = night.git_token();
    let failed = |fact: Fact| decide::end(fact).with(|f| f.branch = Some(branch.to_string()));
    if let Some(why) = night.remote_down() {
        return Ok(Err(failed(Fact::CheckoutFailed(format!(
            "not tried, the remote could not be fetched earlier in this run ({why})"
        )))));
    }
    let pinned = at.record.pinned_base().await?;
    let kept = night.take_kept_walk(&slot_dir);
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
        Err(_) if at.cancel.is_cancelled() => Ok(Err(failed(Fact::Signal(
            "stopped by a signal while the checkout was prepared".into(),
        )))),
        Err(e) => {
            let why = night.redact(&e.to_string());
            if e.is_remote_unreachable() {
                night.mark_remote_down(why.lines().next().unwrap_or_default());
            }
            Ok(Err(failed(Fact::CheckoutFailed(why))))
        }
    }
}

/// Puts the checkout on the base the run took first, on every worker and
/// host (docs/loop.md#checkout): the fact that ends the item when it
/// cannot.
///
/// # Errors
/// The ledger stays away (see [`Night::db`]), or the claim was lost.
pub(super) async fn pin_base(
    night: &Night,
    record: &Record<'_>,
    slot: &mut Slot,
) -> Result<Option<Fact>, Error> {
    let pin = record.base_commit(&slot.base_commit).await?;
    let token = night.git_token();
    let pinned = tokio::task::block_in_place(|| slot.pin_base(&pin, token.as_deref()));
    Ok(pinned.err().map(|e| {
        Fact::CheckoutFailed(format!(
            "cannot check out the run's base {pin}: {}",
            night.redact(&e.to_string())
        ))
    }))
}

/// Why round `n` does not start, if it does not: a signal, the deadline,
/// the item's timeout (docs/limits.md#deadline).
pub(super) fn before_round(item: &Item<'_>, st: &Progress, n: u32) -> Option<ItemEnd> {
    let night = item.night;
    let fact = if item.cancel.is_cancelled() {
        Fact::Signal(format!("stopped by a signal before round {n}"))
    } else if night.clock.now() >= night.deadline {
        Fact::Deadline(format!(
            "round {n} not started: the deadline {} passed",
            local(night.deadline, night.tz)
        ))
    } else if Instant::now() >= st.deadline {
        Fact::TimedOut(format!(
            "the item timeout of {} was reached before round {n}",
            config::format_duration(item.entry.contract.limits.item_timeout())
        ))
    } else {
        return None;
    };
    Some(st.end(fact, n - 1))
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
            return Ok(Some(st.end(Fact::SetupFailed(why), 0)));
        }
    };
    let Some(bad) = runs.iter().find(|r| !r.passed()) else {
        st.setup = runs;
        return Ok(None);
    };
    if item.cancel.is_cancelled() {
        let why = "stopped by a signal during setup".to_string();
        return Ok(Some(st.end(Fact::Signal(why), 0)));
    }
    let why = format!(
        "setup command `{}` failed ({}): {}",
        bad.command,
        bad.exit_code
            .map(|c| format!("exit {c}"))
            .unwrap_or("timed out".into()),
        last_line(&bad.output_tail)
    );
    Ok(Some(st.end(Fact::SetupFailed(why), 0)))
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
