//! The ledger as a run writes it (docs/ledger.md): [`Record`] is the one
//! handle the walk, the items, the rounds and shipping record through. It
//! owns the wait for a ledger that stopped answering (through
//! [`Night::db`], docs/ledger.md#outage-wait) and, for an attempt at an item,
//! the fence (docs/workers.md#fencing): every write of the attempt commits in
//! a transaction that holds the attempt's claim, so a worker that lost its
//! claim (paused past its lease, partitioned) writes nothing more. Its
//! methods take the run's typed values, never ledger strings, and turn them
//! into the ledger's rows (an agent's report, a gate run, a proof, a plan
//! and its tend cards): the ledger knows only its rows. It does not decide
//! anything; the SQL itself is in the ledger's modules, one per table
//! family ([`crate::ledger`]).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::contract::PlanEntry;
use crate::error::Error;
use crate::ledger::items::ItemEnd;
use crate::ledger::{claims, events, items, limits, plans, prs, rounds, runs, tend};
use crate::outcome::{Event, Outcome, Phase, PrRecord, RoundResult};
use crate::queue::{self, Claim, FenceError, LostClaim};

use super::{Night, decide};

type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

/// Runs `$write` (an expression using the connection `$c`) in one
/// transaction of `$rec` (fenced on the attempt's claim, see
/// [`Record::begin`]), waiting out an outage and running it again
/// (docs/ledger.md#outage-wait). A macro, not a closure: the write borrows
/// the connection and its arguments, which a closure over a connection
/// cannot say to the compiler in a way that keeps the future `Send`.
macro_rules! write {
    ($rec:expr, |$c:ident| $write:expr) => {{
        let rec = $rec;
        let mut since = None;
        loop {
            let tried: sqlx::Result<Result<_, LostClaim>> = async {
                let mut tx = match rec.begin().await? {
                    Ok(tx) => tx,
                    Err(lost) => return Ok(Err(lost)),
                };
                let $c: &mut PgConnection = &mut tx;
                let v = $write.await?;
                tx.commit().await?;
                Ok(Ok(v))
            }
            .await;
            match tried {
                Ok(Ok(v)) => break Ok(v),
                Ok(Err(lost)) => break Err(rec.lost(lost)),
                Err(e) if crate::ledger::is_outage(&e) => {
                    rec.night.wait_for_ledger(e, &mut since).await?
                }
                Err(e) => break Err(Error::from(e)),
            }
        }
    }};
}

/// An attempt's hold on its item: the claim every write is fenced on, and
/// the token that stops the attempt's agents and gates once the claim is
/// lost or a signal came (docs/workers.md#fencing).
pub(super) struct Fence {
    /// The claim (its id is the fencing token).
    pub claim: Claim,
    /// A child of the night's signal token; cancelled when the claim is lost.
    pub cancel: CancellationToken,
}

impl Fence {
    /// The fence of `claim`, stopped by `signal` too.
    pub fn new(claim: Claim, signal: &CancellationToken) -> Fence {
        Fence {
            claim,
            cancel: signal.child_token(),
        }
    }

    /// Marks the claim lost and stops the attempt's work.
    pub fn lose(&self) {
        self.cancel.cancel();
    }
}

/// The ledger handle of a run, or of one attempt at an item when `fence` is
/// set (see the module docs).
#[derive(Clone, Copy)]
pub(super) struct Record<'a> {
    night: &'a Night,
    run_id: Uuid,
    fence: Option<&'a Fence>,
}

impl<'a> Record<'a> {
    /// The run's handle: writes are not fenced (the run's own rows).
    pub fn run(night: &'a Night, run_id: Uuid) -> Record<'a> {
        Record {
            night,
            run_id,
            fence: None,
        }
    }

    /// The handle of the attempt holding `fence`.
    pub fn attempt(night: &'a Night, run_id: Uuid, fence: &'a Fence) -> Record<'a> {
        Record {
            night,
            run_id,
            fence: Some(fence),
        }
    }

    /// Begins the transaction one write runs in: holding the claim for an
    /// attempt (`Ok(Err(_))` when it is lost), else a plain one.
    async fn begin(&self) -> sqlx::Result<Result<Tx, LostClaim>> {
        let pool = &self.night.pool;
        match self.fence {
            None => Ok(Ok(pool.begin().await?)),
            Some(fence) => match fence.claim.begin(pool).await {
                Ok(tx) => Ok(Ok(tx)),
                Err(FenceError::Lost(l)) => Ok(Err(l)),
                Err(FenceError::Db(e)) => Err(e),
            },
        }
    }

    /// The error of a write that found the claim lost; the attempt's work
    /// is stopped.
    fn lost(&self, lost: LostClaim) -> Error {
        if let Some(f) = self.fence {
            f.lose();
        }
        Error::ClaimLost {
            why: lost.to_string(),
        }
    }

    /// The worker's name for the ledger (`host:pid:n`), if this is an attempt.
    fn worker(&self) -> Option<String> {
        self.fence.map(|f| f.claim.worker.clone())
    }

    /// The worker's name (`host:pid:n`; this process's first worker for
    /// the run's own handle).
    pub fn worker_id(&self) -> String {
        self.worker()
            .unwrap_or_else(|| queue::WorkerId::this_process(1).to_string())
    }

    /// The attempt's number at its item in this run (1, then 2 after a
    /// takeover, …); 1 for the run's own handle.
    pub fn attempt_no(&self) -> i32 {
        self.fence.map_or(1, |f| f.claim.attempt.max(1))
    }

    /// What stops the attempt's work: the fence's token (a signal, or the
    /// claim lost), else the night's signal.
    pub fn cancel(&self) -> &'a CancellationToken {
        match self.fence {
            Some(f) => &f.cancel,
            None => &self.night.cancel,
        }
    }

    /// The run this handle writes for.
    pub fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// Checks that the attempt still holds its claim, before a step no
    /// transaction can span (a push, a PR created on GitHub).
    ///
    /// # Errors
    /// [`Error::ClaimLost`] when another worker owns the item now (the
    /// attempt's work is stopped); ledger errors.
    pub async fn hold(&self) -> Result<(), Error> {
        write!(self, |_c| std::future::ready(sqlx::Result::<()>::Ok(())))
    }

    /// How many items claimed before this attempt are still being worked on
    /// ([`claims::earlier_live_items`]); 0 for the run's own handle.
    pub async fn earlier_live_items(&self) -> Result<u64, Error> {
        let Some(fence) = self.fence else {
            return Ok(0);
        };
        let (pool, run, id) = (&self.night.pool, self.run_id, fence.claim.id);
        let n = (self.night)
            .db(|| claims::earlier_live_items(pool, run, id))
            .await?;
        Ok(n.max(0) as u64)
    }

    /// The branches this run pushed so far (any worker, any host), with the
    /// files each changes, for the merge-order note of a PR body.
    pub async fn pushed_in_run(&self) -> Result<Vec<events::Overlap>, Error> {
        let (pool, repo, run) = (&self.night.pool, self.night.repo_id.as_str(), self.run_id);
        self.night
            .db(|| events::pushed_in_run(pool, repo, run))
            .await
    }

    /// Starts (or, for a takeover, starts again) the item row of `entry`.
    pub async fn start_item(&self, entry: &PlanEntry) -> Result<i64, Error> {
        let worker = self.worker();
        let run = self.run_id;
        let row = items::ItemStart {
            key: &entry.item.key,
            contract_sha: &entry.contract_sha,
            index: entry.index,
            title: &entry.item.title,
        };
        write!(self, |c| items::start_row(c, run, &row, worker.as_deref()))
    }

    /// Starts the row of a tended PR's card (`row`), unfenced: the second
    /// night's cards are worked before the workers start.
    pub async fn start_row(&self, row: &items::ItemStart<'_>) -> Result<i64, Error> {
        let run = self.run_id;
        write!(self, |c| items::start_row(c, run, row, None))
    }

    /// Records `body` as the PR body of item `key` on `branch`.
    pub async fn pr_body_set(&self, key: &str, branch: &str, body: &str) -> Result<(), Error> {
        let repo = self.night.repo_id.as_str();
        write!(self, |c| prs::set_pr_body(c, repo, key, branch, body))
    }

    /// Records the item's end and, for an attempt, ends its claim
    /// (`finished`: the item is done for this run, or `released`: it stays
    /// on the queue for another worker), with the run's `item_finished`
    /// event — in one fenced transaction.
    pub async fn finish_item(
        &self,
        item_id: i64,
        key: &str,
        end: &ItemEnd,
        release: bool,
    ) -> Result<(), Error> {
        let how = match release {
            true => queue::ClaimEnd::Released,
            false => queue::ClaimEnd::Finished,
        };
        let claim = self.fence.map(|f| &f.claim);
        let run = Some(self.run_id);
        let what =
            serde_json::json!({"key": key, "outcome": end.outcome, "reason": end.facts.reason});
        write!(self, |c| async {
            items::finish_item(&mut *c, item_id, end).await?;
            let kind = Event::ItemFinished.as_str();
            events::event(&mut *c, run, kind, what.clone()).await?;
            match claim {
                Some(cl) => queue::end_in(c, cl, how).await,
                None => Ok(()),
            }
        })
    }

    /// Records the end of a fix round (docs/github.md#fix-rounds) and ends
    /// the attempt's claim `finished` (its item is done again), in one
    /// fenced transaction: a worker that lost the claim records nothing.
    pub async fn end_fix(&self, end: &crate::ledger::ci::FixEnd<'_>) -> Result<(), Error> {
        let claim = self.fence.map(|f| &f.claim);
        write!(self, |c| async {
            crate::ledger::ci::end_fix(&mut *c, end).await?;
            match claim {
                Some(cl) => queue::end_in(c, cl, queue::ClaimEnd::Finished).await,
                None => Ok(()),
            }
        })
    }

    /// Appends an event of `kind` with `data` to the run's log.
    pub async fn event(&self, kind: Event, data: Value) -> Result<(), Error> {
        let run = Some(self.run_id);
        write!(self, |c| events::event(c, run, kind.as_str(), data.clone()))
    }

    /// Records what the run (and this attempt's worker) is doing: `phase` of
    /// item `key`, in `round` (from 1) if in one.
    pub async fn phase(&self, phase: Phase, key: &str, round: Option<u32>) -> Result<(), Error> {
        let (run, worker) = (self.run_id, self.worker());
        write!(self, |c| async {
            runs::set_phase(&mut *c, run, phase, Some(key), round).await?;
            match &worker {
                Some(w) => queue::doing(c, w, Some(key), round, Some(phase)).await,
                None => Ok(()),
            }
        })
    }

    /// Records that the run sleeps until `until` (UTC) on `agent`, for
    /// `kind` (`usage_limit`, `quota_reserve`).
    pub async fn sleeping(
        &self,
        until: DateTime<Utc>,
        agent: &str,
        kind: &str,
    ) -> Result<(), Error> {
        let (run, worker) = (self.run_id, self.worker());
        write!(self, |c| async {
            runs::set_sleeping(&mut *c, run, until, (agent, kind)).await?;
            match &worker {
                Some(w) => queue::doing_phase(c, w, Phase::Sleeping).await,
                None => Ok(()),
            }
        })
    }

    /// Starts round `n` (from 1) of the item row `item_id`; returns its id.
    pub async fn start_round(&self, item_id: i64, n: u32) -> Result<i64, Error> {
        let attempt = self.attempt_no() as u32;
        write!(self, |c| rounds::start_round(c, item_id, attempt, n))
    }

    /// Ends round `round_id` with `result`, its diff hash, failure
    /// signature and the feedback it produced.
    pub async fn finish_round(
        &self,
        round_id: i64,
        result: RoundResult,
        diff: Option<&str>,
        sig: Option<&str>,
        note: Option<&str>,
    ) -> Result<(), Error> {
        write!(self, |c| rounds::finish_round(
            c, round_id, result, diff, sig, note
        ))
    }

    /// Ends the item's rounds still open with the item's `outcome`.
    pub async fn close_open_rounds(&self, item_id: i64, outcome: Outcome) -> Result<(), Error> {
        write!(self, |c| rounds::close_open_rounds(c, item_id, outcome))
    }

    /// Records one agent call of `role` (agent `kind`) in a round.
    pub async fn agent_call(&self, call: &AgentCall<'_>) -> Result<(), Error> {
        let answer = crate::gate::tail_of(&call.report.text, 8192);
        let row = call.row(&answer);
        write!(self, |c| rounds::record_agent_call(c, &row))?;
        let readings = call.readings(self.run_id);
        if readings.is_empty() {
            return Ok(());
        }
        write!(self, |c| crate::ledger::quota::record_readings(
            c, &readings
        ))
    }

    /// Records the connections the sandbox's proxy refused to a call
    /// (`call`: writer, reviewer, gate or setup) of item `item_id`, each
    /// as `host:port` (docs/security.md#the-sandbox); nothing when none.
    pub async fn sandbox_refused(
        &self,
        item_id: i64,
        call: &str,
        hosts: &[String],
    ) -> Result<(), Error> {
        if hosts.is_empty() {
            return Ok(());
        }
        let data = serde_json::json!({"item_id": item_id, "call": call, "hosts": hosts});
        self.event(Event::SandboxRefused, data).await
    }

    /// Records one gate command's run in round `round_id`.
    pub async fn gate_run(&self, round_id: i64, g: &crate::gate::GateRun) -> Result<(), Error> {
        let row = rounds::GateRunRow {
            command: &g.command,
            exit_code: g.exit_code,
            timed_out: g.timed_out,
            duration_ms: g.duration_ms,
            output_tail: &g.output_tail,
        };
        write!(self, |c| rounds::record_gate_run(c, round_id, &row))
    }

    /// Records the reviewer's verdict (`None`: void, for `void_reason`).
    pub async fn review(
        &self,
        round_id: i64,
        verdict: Option<&crate::review::Verdict>,
        void_reason: Option<&str>,
    ) -> Result<(), Error> {
        let (word, findings): (&str, &[String]) = match verdict {
            Some(v) => (v.verdict.as_str(), &v.findings),
            None => ("void", &[]),
        };
        write!(self, |c| rounds::record_review(
            c,
            round_id,
            word,
            findings,
            void_reason
        ))
    }

    /// Records the round's proof of work.
    pub async fn proof(&self, round_id: i64, p: &crate::proof::Proof) -> Result<(), Error> {
        let row = rounds::ProofRow {
            base: &p.base,
            head_before: &p.head_before,
            head_after: &p.head_after,
            changed: serde_json::to_value(&p.changed).unwrap_or(Value::Null),
            claimed_not_in_git: &p.claimed_not_in_git,
            out_of_scope: &p.out_of_scope,
            head_moved: p.head_moved,
            branch_switched: p.branch_switched,
            diff_hash: &p.diff_hash,
        };
        write!(self, |c| rounds::record_proof(c, round_id, &row))
    }

    /// Records a usage-limit sleep or a throttling wait.
    pub async fn limit_sleep(&self, s: &limits::LimitSleep<'_>) -> Result<(), Error> {
        write!(self, |c| limits::record_limit_sleep(c, s))
    }

    /// Records a pushed branch and its PR (or its absence).
    pub async fn upsert_pr(&self, p: &prs::PrUpsert<'_>) -> Result<(), Error> {
        write!(self, |c| prs::upsert_pr(c, p))
    }

    /// Sets where the PR of `key` on `branch` stands.
    pub async fn pr_state(&self, key: &str, branch: &str, state: PrRecord) -> Result<(), Error> {
        let repo = self.night.repo_id.as_str();
        write!(self, |c| prs::set_pr_state(c, repo, key, branch, state))
    }

    /// Records `head`, the commit nightshift pushed to `branch` of item
    /// `key` (the next night tells a person's push from its own by it).
    pub async fn pr_head(&self, key: &str, branch: &str, head: &str) -> Result<(), Error> {
        let repo = self.night.repo_id.as_str();
        write!(self, |c| prs::set_pr_head(c, repo, key, branch, head))
    }

    /// Records one of the writer's findings, with its issue (number, URL)
    /// if filed.
    pub async fn finding(
        &self,
        item_id: i64,
        title: &str,
        issue: Option<(i64, &str)>,
    ) -> Result<(), Error> {
        let (number, url) = (issue.map(|i| i.0), issue.map(|i| i.1));
        write!(self, |c| items::record_finding(
            c, item_id, title, number, url
        ))
    }

    /// The item rows of run `run`.
    pub async fn run_items(&self, run: Uuid) -> Result<Vec<items::ItemRow>, Error> {
        let pool = &self.night.pool;
        self.night.db(|| items::run_items(pool, run)).await
    }

    /// The run's base commit if an item pinned it yet
    /// ([`runs::pinned_base`]): later items check out that commit without
    /// fetching.
    pub async fn pinned_base(&self) -> Result<Option<String>, Error> {
        let (pool, run) = (&self.night.pool, self.run_id);
        self.night.db(|| runs::pinned_base(pool, run)).await
    }

    /// How many rounds run `run` began of item `key` (any attempt).
    pub async fn rounds_begun(&self, run: Uuid, key: &str) -> Result<i64, Error> {
        let pool = &self.night.pool;
        self.night.db(|| rounds::rounds_begun(pool, run, key)).await
    }

    /// The items (key, title) the contracts `shas` were sealed for.
    pub async fn contract_items(
        &self,
        shas: &[String],
    ) -> Result<Vec<crate::approval::Held>, Error> {
        let pool = &self.night.pool;
        let items = self.night.db(|| plans::contract_items(pool, shas)).await?;
        Ok((items.into_iter())
            .map(|(key, title)| crate::approval::Held { key, title })
            .collect())
    }

    /// The writer's question waiting for an answer in item `key` under
    /// `contract_sha`: (question, run asked in, when).
    pub async fn open_question(
        &self,
        key: &str,
        contract_sha: &str,
    ) -> Result<Option<(String, Uuid, Option<DateTime<Utc>>)>, Error> {
        let (pool, repo) = (&self.night.pool, self.night.repo_id.as_str());
        self.night
            .db(|| items::open_question(pool, repo, key, contract_sha))
            .await
    }

    /// Earlier runs in which item `key` failed under `contract_sha`.
    pub async fn failed_attempts(&self, key: &str, contract_sha: &str) -> Result<i64, Error> {
        let (pool, repo) = (&self.night.pool, self.night.repo_id.as_str());
        self.night
            .db(|| items::failed_attempts(pool, repo, key, contract_sha))
            .await
    }

    /// The PR rows of item `key`, newest first.
    pub async fn prs_of_item(&self, key: &str) -> Result<Vec<prs::PrRow>, Error> {
        let (pool, repo) = (&self.night.pool, self.night.repo_id.as_str());
        self.night.db(|| prs::prs_of_item(pool, repo, key)).await
    }

    /// The stored PR body of item `key` on `branch`.
    pub async fn pr_body(&self, key: &str, branch: &str) -> Result<String, Error> {
        let (pool, repo) = (&self.night.pool, self.night.repo_id.as_str());
        self.night
            .db(|| prs::pr_body(pool, repo, key, branch))
            .await
    }

    /// What the run's agent calls cost so far (USD), over every worker and
    /// host, except those of item row `except` (whose own totals the caller
    /// holds): the run's cost cap counts them all (docs/workers.md).
    pub async fn run_spent(&self, except: Option<i64>) -> Result<f64, Error> {
        let (pool, run) = (&self.night.pool, self.run_id);
        self.night.db(|| rounds::run_spent(pool, run, except)).await
    }

    /// The run's base commit: the one already recorded, else `proposed`
    /// (the first checkout's) is recorded and returned — one base for every
    /// worker on every host (docs/loop.md#checkout).
    pub async fn base_commit(&self, proposed: &str) -> Result<String, Error> {
        let run = self.run_id;
        // The run's row, not the attempt's: not fenced.
        let unfenced = Record::run(self.night, run);
        write!(&unfenced, |c| runs::pin_base(c, run, proposed))
    }
}

/// One agent call to record (see [`Record::agent_call`]).
pub(super) struct AgentCall<'a> {
    /// The item row the call worked for.
    pub item_id: i64,
    /// The round, if the call was in one.
    pub round_id: Option<i64>,
    /// The agent's role.
    pub role: crate::agent::Role,
    /// The agent kind (`claude`, `codex`, `command`).
    pub kind: &'a str,
    /// The account the call counts against (the agent config's `account`).
    pub account: &'a str,
    /// The round's number, if the call was in one.
    pub round: Option<u32>,
    /// The fallback's name when a fallback agent made the call
    /// (docs/limits.md#fallback); kept in the row's `meta`.
    pub fallback: Option<&'a str>,
    /// What the call gave back.
    pub report: &'a crate::agent::Report,
}

impl AgentCall<'_> {
    /// The ledger rows of the call's quota gauges (docs/limits.md#gauges),
    /// one per window, as read.
    fn readings(&self, run_id: Uuid) -> Vec<crate::ledger::quota::ReadingRow<'_>> {
        self.report
            .gauges
            .iter()
            .map(|g| crate::ledger::quota::ReadingRow {
                account: self.account,
                source: g.source.as_str(),
                run_id: Some(run_id),
                item_id: Some(self.item_id),
                role: Some(self.role.as_str()),
                round: self.round.and_then(|n| i32::try_from(n).ok()),
                window: &g.window,
                window_minutes: g.window_minutes,
                percent: g.percent,
                raw_utilization: g.raw_utilization.as_deref(),
                status: g.status.as_deref(),
                resets_at: g.resets_at,
                overage_in_use: g.overage_in_use,
                overage_status: g.overage_status.as_deref(),
                raw: g.raw.clone(),
            })
            .collect()
    }

    /// The ledger row of this call, with `answer` (the end of the agent's
    /// answer) as its stdout tail and the rest of its report in `meta`.
    fn row<'s>(&'s self, answer: &'s str) -> rounds::AgentCallRow<'s> {
        let (r, o) = (self.report, &self.report.outcome);
        let meta = serde_json::json!({
            "failure": r.failure,
            "tools": r.tools,
            "mcp_servers": r.mcp_servers,
            "claimed_files": r.claimed_files,
            "notes": r.notes,
            "limit": r.limit.as_ref().map(|l| serde_json::json!({"resets_at": l.resets_at, "source": l.source})),
            "stdout_path": o.stdout_path,
            "stderr_path": o.stderr_path,
            "stdout_bytes": o.stdout_bytes,
            "stderr_bytes": o.stderr_bytes,
            "signal": o.signal,
            "fallback": self.fallback,
        });
        rounds::AgentCallRow {
            item_id: self.item_id,
            round_id: self.round_id,
            role: self.role.as_str(),
            kind: self.kind,
            argv: &r.argv,
            duration: o.duration,
            exit_code: o.exit_code,
            timed_out: o.timed_out,
            tokens_in: r.usage.tokens_in,
            tokens_out: r.usage.tokens_out,
            cost_usd: r.usage.cost_usd,
            limit_kind: r.limit.as_ref().map(|l| l.kind.as_str()),
            stdout_tail: answer,
            stderr_tail: &o.stderr_tail,
            meta,
        }
    }
}

/// Marks `repo`'s runs still `running` as crashed and returns them, newest
/// first ([`crate::ledger::runs::mark_dead_runs_crashed`]); their items without an end get
/// `decide::LEFT_BY_CRASH`. The caller holds the repo lock, so every such
/// run is dead.
///
/// # Errors
/// Database errors.
pub async fn mark_dead_runs_crashed(
    pool: &sqlx::PgPool,
    repo: &str,
) -> sqlx::Result<Vec<runs::RunRow>> {
    crate::ledger::runs::mark_dead_runs_crashed(pool, repo, decide::LEFT_BY_CRASH).await
}

/// Stores `plan` for `repo` in the ledger, its contracts and their order
/// ([`plans::save_plan`]), unless a plan of that SHA is stored already.
///
/// # Errors
/// Database errors.
pub async fn save_plan(
    pool: &sqlx::PgPool,
    repo: &str,
    plan: &crate::plan::Plan,
) -> sqlx::Result<()> {
    if plans::plan_exists(pool, &plan.sha).await? {
        return Ok(());
    }
    let (path, json) = (
        plan.backlog_path.display().to_string(),
        plan.to_json_string(),
    );
    let row = plans::PlanRow {
        sha: &plan.sha,
        repo,
        backlog_path: &path,
        backlog_sha: &plan.backlog_sha,
        json: &json,
    };
    let entries: Vec<plans::PlanEntryRow<'_>> = (plan.entries.iter())
        .map(|e| plans::PlanEntryRow {
            contract_sha: &e.contract_sha,
            item_key: &e.item.key,
            title: &e.item.title,
            item_index: e.index,
            blocked: e.blocked.as_deref(),
        })
        .collect();
    let contract_json = |i: usize| plan.entries[i].contract.canonical_json();
    plans::save_plan(pool, &row, &entries, contract_json).await
}

/// Stores the tend cards of `plan` that call for work (the sealed ones) as
/// its contracts after its items ([`tend::save_tend_cards`]).
///
/// # Errors
/// Database errors.
pub async fn save_tend_cards(pool: &sqlx::PgPool, plan: &crate::plan::Plan) -> sqlx::Result<()> {
    let cards: Vec<tend::TendCardRow<'_>> = (plan.tend.iter())
        .filter_map(|c| c.sealed.as_ref().map(|s| (c, s)))
        .map(|(card, sealed)| tend::TendCardRow {
            sha: &sealed.sha,
            item_key: &card.item_key,
            title: format!("tend PR #{}: {}", card.number, card.title),
            json: serde_json::from_str(&sealed.canonical_json).expect("canonical JSON parses"),
            pr_number: card.number,
        })
        .collect();
    tend::save_tend_cards(pool, &plan.sha, plan.entries.len(), &cards).await
}
