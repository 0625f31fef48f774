//! A run: one approved plan drained item by item (docs/loop.md,
//! docs/commands.md).
//!
//! This module holds the run's types ([`Night`]: the [`Settings`] the run
//! was given and the [`RunState`] it keeps; [`Selection`]; [`RunEnd`]) and
//! the walk over the plan ([`drain`]): it records the run under its
//! approval (or takes up the crashed run it resumes) and takes each entry
//! in backlog order, stopping at the deadline, a signal or a failure of the
//! environment (the run ends `crashed`, for the next drain to resume,
//! docs/loop.md#run-statuses).
//! It does not run an item. The driver of an item's life is [`attempt`]
//! (which stage comes next); its stages are [`item`] (checkout, setup, the
//! checks before a round), [`round`] (one round, a state machine that
//! returns how it went), [`agent_call`] (an agent call with its limit
//! sleeps), [`ship`] (a new PR) and [`tend_push`] (a push to a tended PR);
//! [`decide`] turns what they saw into the item's outcome; [`tend`] prepares
//! the second night's cards; the ledger wait and the lock are [`night`].
//! The backends (agents, git, GitHub, PostgreSQL) live in their own modules.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::approval::{Approval, Refusal};

/// The contract SHAs a run's approval covers: in plan order (the order the
/// ledger gives items back in) and as a set, since every item asks whether
/// its SHA is in (a scan of 20,000 per item would make a drain quadratic).
#[derive(Debug, Clone, Default)]
pub(crate) struct Approved {
    in_order: Vec<String>,
    set: std::collections::HashSet<String>,
}

impl Approved {
    /// The SHAs `in_order` (duplicates kept in the order).
    pub(crate) fn new(in_order: Vec<String>) -> Approved {
        let set = in_order.iter().cloned().collect();
        Approved { in_order, set }
    }

    /// Whether contract `sha` is covered.
    pub(crate) fn contains(&self, sha: &str) -> bool {
        self.set.contains(sha)
    }

    /// The SHAs in plan order.
    pub(crate) fn in_order(&self) -> &[String] {
        &self.in_order
    }
}
use crate::config::{self, Config};
use crate::contract::PlanEntry;
use crate::error::Error;
use crate::forge::Forge;
use crate::ledger::items::ItemEnd;
use crate::ledger::{items, runs};
use crate::limit;
use crate::outcome::{Event, RunKind, RunStatus};
use crate::plan::Plan;
use crate::queue;
use crate::schedule;
use crate::slot;

mod agent_call;
mod attempt;
mod checks;
pub mod ci;
mod ci_ask;
mod ci_fix;
mod ci_fix_push;
mod decide;
mod ended;
mod fallback;
mod heart;
mod item;
mod live_output;
mod night;
mod quota;
mod record;
mod review_queue;
mod round;
mod sandbox;
mod ship;
mod tend;
mod tend_push;
mod worker;

pub use attempt::{Preview, will_not_run};
pub use ended::ended;
pub use record::{mark_dead_runs_crashed, save_plan, save_tend_cards};
pub use sandbox::package_of;
pub use ship::remote_has_branch;

/// Rounds in a row with the same diff and the same failure that mean no
/// progress (docs/loop.md#no-progress).
pub const NO_PROGRESS_ROUNDS: usize = 3;

/// GitHub's limit on one file (bytes); larger files make a push fail.
pub const MAX_FILE_BYTES: u64 = 100 * 1024 * 1024;

/// Short retries of a throttled call before it counts as a failure.
const MAX_THROTTLE_RETRIES: u32 = 5;

/// A run: what it was given ([`Settings`], read-only) and what it keeps
/// while it goes ([`RunState`]). Reads of the settings go through
/// [`std::ops::Deref`] (`night.config`), as nearly every stage reads them;
/// the state is reached only through [`Night`]'s methods (docs/loop.md).
pub struct Night {
    /// What the run was given, resolved by the CLI; never changed.
    pub settings: Settings,
    /// What the run learns and holds while it goes.
    pub state: RunState,
}

impl std::ops::Deref for Night {
    type Target = Settings;

    fn deref(&self) -> &Settings {
        &self.settings
    }
}

/// What a run needs from the outside world, resolved by the CLI before the
/// run starts; read-only while it runs (what changes is [`RunState`]).
pub struct Settings {
    /// The user's repository root (never written to).
    pub repo: PathBuf,
    /// The state of `repo` around agent calls, read again only after
    /// something there changed (docs/security.md "What is protected").
    pub repo_watch: crate::user_repo::Watch,
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
    /// Cancelled on SIGINT/SIGTERM (the CLI fires it; the run only listens).
    pub cancel: CancellationToken,
    /// Clock (injectable for tests of sleeps).
    pub clock: std::sync::Arc<dyn schedule::Clock>,
    /// The remote's (fetch URL, push URL) as they were when the run started;
    /// every item fetches and pushes there.
    pub remote_urls: (String, String),
    /// Where the ledger lives (an embedded cluster is restarted by the run
    /// that finds it dead).
    pub db_source: crate::ledger::DbSource,
    /// Whether calls get a sandbox (`[sandbox] mode` not `off` and the
    /// kernel can build one); a contract sealed with mode `off` runs
    /// without it all the same (docs/security.md#the-sandbox).
    pub sandbox: bool,
}

/// What a run learns and holds while it goes, shared by its workers: what
/// was found down (GitHub, the remote), what stopped the run, the kept
/// walks of the checkouts, and the locks it holds. Every field is behind a
/// lock; [`Night`]'s methods read and set them.
pub struct RunState {
    /// Set once GitHub stayed unreachable after the forge's retries: later
    /// items do their work without waiting for it again, and their pushed
    /// branches are recorded `pr_failed` (retried by the next run).
    forge_down: std::sync::Mutex<Option<String>>,
    /// Set once the remote could not be fetched: later items are not tried
    /// against it (each would wait out the same network timeout).
    remote_down: std::sync::Mutex<Option<String>>,
    /// Each slot's walk after its last review, watched since, by slot
    /// directory: the next item's reset undoes only what changed
    /// ([`crate::slot::KeptWalk`]).
    kept_walks: std::sync::Mutex<std::collections::HashMap<PathBuf, crate::slot::KeptWalk>>,
    /// The connected ledger, to reconnect and take the lock again after an
    /// outage (docs/ledger.md#outage-wait).
    ledger: crate::ledger::Ledger,
    /// The one-drain-per-repo lock; `None` only after it was lost.
    lock: tokio::sync::Mutex<Option<crate::ledger::RepoLock>>,
    /// Whether this process is the drain that holds the repository lock
    /// (a `worker` never takes it, not even after an outage).
    holds_lock: bool,
    /// The hold on the repository's checkouts under the data directory; also
    /// how the run notices that directory was removed or filled up.
    slots_lock: Option<slot::SlotsLock>,
    /// Set when something outside the items stops the run (an agent that
    /// cannot be started, a data directory that is full, read-only or gone):
    /// the current item is recorded `interrupted`, the run `crashed`, and
    /// the next `drain` resumes it once the cause is fixed.
    systemic: std::sync::Mutex<Option<String>>,
    /// The run's cost cap in USD, as the run recorded it when it started
    /// ([`Night::hold_cost_cap`]); `None` until then.
    cost_cap: std::sync::OnceLock<f64>,
}

impl RunState {
    /// The state of a run that starts with `ledger` connected, holding the
    /// repository's `lock` and the checkouts' `slots_lock` (when it has
    /// one), nothing found down yet.
    pub fn new(
        ledger: crate::ledger::Ledger,
        lock: Option<crate::ledger::RepoLock>,
        slots_lock: Option<slot::SlotsLock>,
    ) -> RunState {
        RunState {
            forge_down: Default::default(),
            remote_down: Default::default(),
            kept_walks: Default::default(),
            ledger,
            holds_lock: lock.is_some(),
            lock: tokio::sync::Mutex::new(lock),
            slots_lock,
            systemic: Default::default(),
            cost_cap: Default::default(),
        }
    }
}

/// How long a run waits for a ledger that stopped answering before it gives
/// up (docs/ledger.md#outage-wait): enough for a restart, a failover or an upgrade of the
/// server. A signal or the deadline ends the wait sooner.
pub const LEDGER_PATIENCE: Duration = Duration::from_secs(30 * 60);

/// Which items to run.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Every item of the plan (`drain`).
    All,
    /// One item by plan index (`run`).
    One(usize),
    /// One tended PR by number (`run '#N'`, docs/github.md "The second
    /// night").
    Pr(u64),
}

impl Selection {
    /// The plan index of the one item, for `run`.
    pub fn item(&self) -> Option<usize> {
        match self {
            Selection::One(i) => Some(*i),
            Selection::All | Selection::Pr(_) => None,
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

/// Drains the plan (or one item of it) under an approval, with
/// `config.jobs` workers (one for `run`), each in its own checkout slot,
/// claiming the items from the ledger's queue (docs/workers.md).
///
/// The caller holds the repository lock. `resume` is a crashed run whose
/// approval is still valid: the new run takes it up without consuming
/// another approval and carries over the items that run finished.
///
/// # Errors
/// Refusals (exit 3) and systemic failures (exit 1) as [`Error`]; item
/// failures are outcomes, not errors.
pub async fn drain(
    night: Arc<Night>,
    selection: Selection,
    approval: &Approval,
    approved: &[String],
    resume: Option<&runs::RunRow>,
) -> Result<RunEnd, Error> {
    let kind = match selection {
        Selection::All => RunKind::Drain,
        Selection::One(_) | Selection::Pr(_) => RunKind::Run,
    };
    let approved = Approved::new(approved.to_vec());
    let run_id = open_run(&night, kind, approval, resume).await?;
    // Beats for the run and keeps the lock until the run is recorded ended.
    let _keeper = Night::keep_alive(night.clone(), run_id);
    record_cost_cap(&night, run_id, resume).await?;
    let resumed_from = resume.map(|r| Resumed {
        id: r.id,
        stopped_by_signal: r.status == RunStatus::StoppedSignal,
    });
    let finished = finished_before(&night, resume).await?;
    // Yesterday's PRs first, by the drain itself (docs/github.md "The second
    // night"); a tended PR's item is not run again.
    let mut walk = Walk {
        night: &night,
        run_id,
        approved: &approved,
        resumed_from,
        finished_before: finished.clone(),
        status: RunStatus::Completed,
        stopped_by: None,
    };
    let go_on = match selection {
        Selection::All => walk.tend(None).await?,
        Selection::Pr(n) => walk.tend(Some(n)).await?,
        Selection::One(_) => true,
    };
    let (tend_status, tend_stop) = (walk.status, walk.stopped_by.take());
    if !go_on {
        return finish_run(&night, run_id, tend_status, tend_stop).await;
    }
    let tended = tend::taken_over(&night.plan);
    let entries: Vec<&PlanEntry> = match selection {
        Selection::All => night.plan.entries.iter().collect(),
        Selection::One(i) => night.plan.entries.iter().filter(|e| e.index == i).collect(),
        Selection::Pr(_) => vec![],
    };
    let entries: Vec<&PlanEntry> = entries
        .into_iter()
        .filter(|e| {
            matches!(selection, Selection::One(_)) || !tended.contains(&e.item.key.as_str())
        })
        .collect();
    let queued = carry_over(&night, run_id, &finished, resumed_from, &entries).await?;
    let (pool, n) = (&night.pool, queued.len());
    night.db(|| queue::enqueue(pool, run_id, &queued)).await?;
    let jobs = match selection {
        Selection::All => night.config.jobs.clamp(1, n.max(1) as u32),
        Selection::One(_) | Selection::Pr(_) => 1,
    };
    let crew = Arc::new(worker::Crew {
        night: night.clone(),
        run_id,
        approved,
        resumed_from,
        owner: true,
        stop: Default::default(),
        ended: Default::default(),
        drain_silent_since: Default::default(),
        heart: Default::default(),
        claim_line: Default::default(),
    });
    let worked = run_workers(&crew, jobs).await;
    let (status, stopped_by) = crew.stopped().unwrap_or((tend_status, tend_stop));
    worked?;
    finish_run(&night, run_id, status, stopped_by).await
}

/// Records run `run_id`'s cost cap and holds the run to it: a resumed run
/// keeps the cap its first start recorded; a new one records its plan's.
///
/// # Errors
/// The ledger stays away.
async fn record_cost_cap(
    night: &Night,
    run_id: Uuid,
    resume: Option<&runs::RunRow>,
) -> Result<(), Error> {
    let cap = match resume {
        Some(r) => (night.db(|| runs::cost_cap(&night.pool, r.id)).await?)
            .unwrap_or(night.plan.run_cost_cap.value),
        None => night.plan.run_cost_cap.value,
    };
    let pool = &night.pool;
    night.db(|| runs::set_cost_cap(pool, run_id, cap)).await?;
    night.hold_cost_cap(Some(cap));
    Ok(())
}

/// Joins run `run_id`, which another process's `drain` opened, with
/// `jobs` workers of this process (`nightshift worker`,
/// docs/workers.md#nightshift-worker); `approved` are the contract SHAs of
/// the run's plan. Returns how many items this process's workers ended.
///
/// # Errors
/// The ledger stayed away.
pub async fn join(
    night: Arc<Night>,
    run_id: Uuid,
    approved: &[String],
    jobs: u32,
) -> Result<usize, Error> {
    let cap = night.db(|| runs::cost_cap(&night.pool, run_id)).await?;
    night.hold_cost_cap(cap);
    let crew = Arc::new(worker::Crew {
        night: night.clone(),
        run_id,
        approved: Approved::new(approved.to_vec()),
        resumed_from: None,
        owner: false,
        stop: Default::default(),
        ended: Default::default(),
        drain_silent_since: Default::default(),
        heart: Default::default(),
        claim_line: Default::default(),
    });
    run_workers(&crew, jobs.max(1)).await?;
    let (pool, prefix) = (
        &night.pool,
        format!(
            "{}:{}:",
            crate::queue::WorkerId::this_process(1).host,
            std::process::id()
        ),
    );
    night
        .db(|| items::items_by_worker(pool, run_id, &prefix))
        .await
}

/// Runs `jobs` workers of `crew` to their end.
///
/// # Errors
/// The first worker's error (the ledger stayed away, the lock was lost),
/// once every worker stopped.
async fn run_workers(crew: &Arc<worker::Crew>, jobs: u32) -> Result<(), Error> {
    let night = &crew.night;
    let beat = heart::start(crew.heart.clone(), night.pool.clone(), night.config.lease);
    let output = live_output::start(crew.heart.clone(), night.pool.clone());
    // The PRs' CI is watched beside the workers, which never wait for it
    // (docs/github.md#ci); the run ends once every watch did too.
    let workers_done = CancellationToken::new();
    let watcher = tokio::spawn(ci::watch(
        crew.night.clone(),
        crew.run_id,
        workers_done.clone(),
    ));
    let tasks: Vec<_> = (1..=jobs)
        .map(|n| tokio::spawn(worker::work(crew.clone(), n)))
        .collect();
    let mut first = Ok(());
    for t in tasks {
        let r = t
            .await
            .unwrap_or_else(|e| Err(Error::failed(format!("a worker of this run panicked: {e}"))));
        if first.is_ok() {
            first = r;
        }
    }
    beat.abort();
    output.abort();
    workers_done.cancel();
    let watched = watcher.await.unwrap_or_else(|e| {
        Err(Error::failed(format!(
            "the CI watcher of this run panicked: {e}"
        )))
    });
    first.and(watched)
}

/// Records the run's end: `status`, what stopped it, and the exit code
/// from the items every worker (on every host) ended.
async fn finish_run(
    night: &Night,
    run_id: Uuid,
    status: RunStatus,
    stopped_by: Option<String>,
) -> Result<RunEnd, Error> {
    let record = record::Record::run(night, run_id);
    if let Some(why) = &stopped_by {
        record
            .event(Event::RunStopped, json!({"reason": why}))
            .await?;
    }
    let items = record.run_items(run_id).await?;
    // Another host's worker may have met the deadline while this
    // process's workers did not: the run stopped at it all the same (an
    // item carried over from a resumed run names no worker).
    let status = match status {
        RunStatus::Completed
            if items.iter().any(|i| {
                i.outcome == Some(crate::outcome::Outcome::Deadline) && i.worker.is_some()
            }) =>
        {
            RunStatus::StoppedDeadline
        }
        s => s,
    };
    let failures = items
        .iter()
        .filter(|i| i.outcome.is_some_and(|o| o.fails_run()))
        .count();
    let result = Error::of_run(status, failures);
    let code = crate::error::exit_code(&result);
    let pool = &night.pool;
    night
        .db(|| runs::finish_run(pool, run_id, status, code as i32))
        .await?;
    prune_events(night).await;
    Ok(RunEnd {
        run_id,
        status,
        result,
        stopped_by,
    })
}

/// Deletes the ledger's events older than `[serve] retention` (never a
/// running run's) once the run has ended, so that the retention holds
/// whether or not a `serve` runs (docs/serve.md#pruning). Best effort: a
/// failure is logged, the run's end stands; bounded so that a slow delete
/// never holds the end of the night.
async fn prune_events(night: &Night) {
    let keep = night.config.serve.retention;
    let pruning = crate::ledger::events::prune(&night.pool, keep);
    match tokio::time::timeout(std::time::Duration::from_secs(30), pruning).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::info!(
            "pruned {n} ledger events older than {} ([serve] retention)",
            crate::duration::format(keep)
        ),
        Ok(Err(e)) => tracing::warn!("pruning old ledger events failed: {e}"),
        Err(_) => tracing::warn!("pruning old ledger events took over 30 s; left for the next run"),
    }
}

/// Records the entries the resumed run finished as they ended (an
/// interrupted item runs again, a pushed one without its PR gets it,
/// docs/ledger.md#outage-wait) and returns the others, for the queue.
async fn carry_over(
    night: &Night,
    run_id: Uuid,
    finished: &BTreeMap<String, items::ItemRow>,
    from: Option<Resumed>,
    entries: &[&PlanEntry],
) -> Result<Vec<queue::QueuedItem>, Error> {
    let record = record::Record::run(night, run_id);
    let mut queued = Vec::new();
    for (position, entry) in entries.iter().enumerate() {
        match finished.get(&entry.item.key) {
            Some(prev) => {
                let item_id = record.start_item(entry).await?;
                let end = carried(prev, from);
                record
                    .finish_item(item_id, &entry.item.key, &end, false)
                    .await?;
            }
            None => queued.push(queue::QueuedItem {
                position: position as i32,
                item_key: entry.item.key.clone(),
                contract_sha: entry.contract_sha.clone(),
            }),
        }
    }
    Ok(queued)
}

/// Items the crashed run `resume` finished, by key, carried over as they
/// ended (docs/ledger.md#outage-wait): an interrupted item runs again, a
/// pushed one without its PR gets it.
async fn finished_before(
    night: &Night,
    resume: Option<&runs::RunRow>,
) -> Result<BTreeMap<String, items::ItemRow>, Error> {
    let Some(r) = resume else {
        return Ok(BTreeMap::new());
    };
    let record = record::Record::run(night, r.id);
    Ok(record
        .run_items(r.id)
        .await?
        .into_iter()
        .filter(|i| i.outcome.is_some_and(|o| !o.resumes()))
        .map(|i| (i.item_key.clone(), i))
        .collect())
}

/// The drain's own walk over the second night's cards, before the workers
/// start ([`tend`]): what they came to and what stopped the run.
struct Walk<'a> {
    night: &'a Night,
    run_id: Uuid,
    approved: &'a Approved,
    /// The crashed or stopped run this one resumes, if any.
    resumed_from: Option<Resumed>,
    finished_before: BTreeMap<String, items::ItemRow>,
    status: RunStatus,
    /// What outside the items stopped the run, if anything.
    stopped_by: Option<String>,
}

impl Walk<'_> {
    /// A failure the environment caused is not the card's (see
    /// `worker::systemic`): the card is recorded `interrupted` and the run
    /// stops `crashed`.
    fn systemic(&mut self, end: &mut ItemEnd) {
        let before = end.outcome;
        worker::systemic(self.night, end);
        if let Some(why) = self.night.systemic_problem()
            && before.fails_run()
        {
            self.status = RunStatus::Crashed;
            self.stopped_by = Some(why);
        }
    }
}

/// Records the new run (consuming the approval unless it resumes `resume`)
/// and its start; an approval another run used is refused.
async fn open_run(
    night: &Night,
    kind: RunKind,
    approval: &Approval,
    resume: Option<&runs::RunRow>,
) -> Result<Uuid, Error> {
    let pool = &night.pool;
    // The run is bound to its approval, signed, as it is created
    // (docs/contract.md#the-runs-binding).
    let opened = runs::create_run(
        pool,
        &runs::NewRun {
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
        |facts| crate::approval::binding::bind(approval, facts),
    )
    .await?;
    let run_id = match opened {
        runs::Opened::Run(id) => id,
        runs::Opened::Refused(refusal) => return Err(refusal.into()),
        runs::Opened::Used(run) => {
            return Err(Refusal::Used {
                sha: approval
                    .plan_sha
                    .clone()
                    .or(approval.contract_sha.clone())
                    .unwrap_or_default(),
                run,
            }
            .into());
        }
    };
    // Where this host's approval key is, for a `worker` elsewhere to name
    // the file to copy (docs/workers.md).
    let key = crate::approval::key_path(&night.data_dir);
    let started = json!({"plan_sha": night.plan.sha, "approval": approval.id, "resumes": resume.map(|r| r.id), "deadline": night.deadline, "jobs": night.config.jobs, "approval_key": key, "sandbox_unavailable": sandbox_unavailable(night)});
    record::Record::run(night, run_id)
        .event(Event::RunStarted, started)
        .await?;
    Ok(run_id)
}

/// Why the run's calls get no sandbox, for the report (said once at the
/// top of the run too; docs/security.md#modes); `None` when they get one.
fn sandbox_unavailable(night: &Night) -> Option<String> {
    if night.sandbox {
        return None;
    }
    Some(match crate::sandbox::probe() {
        _ if night.config.sandbox.mode == crate::sandbox::Mode::Off => {
            "the sandbox is off (`[sandbox] mode = \"off\"`)".to_string()
        }
        Err(missing) => format!("the sandbox cannot be built here: {missing}"),
        Ok(()) => "the sandbox was not built".to_string(),
    })
}

/// The run a drain resumes: its id, and whether a signal stopped it (else
/// it crashed).
#[derive(Debug, Clone, Copy)]
struct Resumed {
    id: Uuid,
    stopped_by_signal: bool,
}

/// The end of an item the resumed run `from` finished, as this run records
/// it ([`decide::carried`]).
fn carried(prev: &items::ItemRow, from: Option<Resumed>) -> ItemEnd {
    let (from_id, stopped) = from.map_or((Uuid::nil(), false), |r| (r.id, r.stopped_by_signal));
    decide::carried(prev, from_id, stopped)
}

/// An item the resumed run `from` was working on when it died: a PR found
/// open now is the one that run opened (it began rounds of the item), so
/// the item ends `pr_opened` with those rounds, not `already_open`, and the
/// night counts the PR (docs/loop.md). The local branch that run left in the
/// checkout is dropped either way.
///
/// # Errors
/// Ledger errors.
async fn take_over_from(
    night: &Night,
    record: &record::Record<'_>,
    from: Resumed,
    entry: &PlanEntry,
    slot_index: usize,
    end: &mut ItemEnd,
) -> Result<(), Error> {
    let key = &entry.item.key;
    let begun = record.rounds_begun(from.id, key).await?;
    decide::opened_before_stop(end, begun, from.id, from.stopped_by_signal);
    let slot_dir = slot::slot_path(&night.data_dir, &night.repo, slot_index);
    let ours = slot::branch_name(&entry.item.title, key);
    tokio::task::block_in_place(|| {
        slot::drop_local_branch(&slot_dir, &ours);
        if let Some(b) = end.facts.branch.as_deref().filter(|b| *b != ours) {
            slot::drop_local_branch(&slot_dir, b);
        }
    });
    Ok(())
}

fn local(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string()
}

/// Per-item running totals.
#[derive(Default)]
struct Totals {
    tokens: u64,
    cost: f64,
    cost_known: bool,
}

/// The sleep policy (docs/limits.md#sleep-policy) from the config's limits.
pub fn sleep_policy(l: &config::Limits) -> limit::SleepPolicy {
    limit::SleepPolicy {
        buffer: l.limit_buffer,
        min: l.limit_sleep_min,
        max: l.limit_sleep_max,
        ..limit::SleepPolicy::default()
    }
}
