//! Read-only views of the ledger that the commands present: one run with
//! its items (`report`, the end of `drain`), the items a plan will not run
//! because of earlier work (`plan`, a refused `drain`), a run named by an
//! id prefix, whether nightshift has open PRs. The CLI prints what these
//! return and reads the ledger nowhere else; `status` has its own view
//! ([`crate::status`]), `report --history` and `--html` theirs
//! ([`crate::history`], [`crate::timeline`]).
//!
//! Not for writing anything, nor for rendering (see [`crate::report`]).

use uuid::Uuid;

use crate::error::{Error, Result};
use crate::ledger::items::{self, ItemRow};
use crate::ledger::runs;
use crate::ledger::{limits, plans, prs};
use crate::outcome::{PrRecord, RunKind, RunStatus};
use crate::plan::Plan;

pub use crate::ledger::runs::RunRow;
use crate::tend::Tended;

/// One run as `report` and the end of `drain` show it.
#[derive(Debug, Clone)]
pub struct RunView {
    /// The run's row.
    pub run: RunRow,
    /// Its items, in the order they ran.
    pub items: Vec<ItemRow>,
    /// Seconds it slept on usage limits.
    pub slept: i64,
    /// Yesterday's PRs it tended (docs/github.md "The second night").
    pub tended: Vec<Tended>,
    /// `nightshift/` branches on the remote whose head nightshift did not
    /// push, as the run found them (docs/security.md#processes).
    pub foreign_refs: Vec<crate::user_repo::foreign::ForeignRef>,
    /// Why the run's calls ran without the sandbox (mode `off`, or `auto`
    /// on a kernel that cannot build it), as its start recorded it.
    pub sandbox_unavailable: Option<String>,
    /// Each connection the sandbox's proxy refused to the run's calls
    /// (`host:port`, in order; docs/security.md#the-sandbox).
    pub sandbox_refused: Vec<String>,
    /// The CI watches of its PRs, each with its head's checks
    /// (docs/github.md#ci).
    pub ci: Vec<crate::ledger::ci::WatchView>,
}

impl RunView {
    /// The view of `run`: its items, its sleep and its tended PRs.
    ///
    /// # Errors
    /// Database errors.
    pub async fn of(pool: &sqlx::PgPool, run: RunRow) -> Result<RunView> {
        let items = items::run_items(pool, run.id).await?;
        let slept = limits::slept_seconds(pool, run.id).await?;
        let tended = crate::tend::tended_items(pool, run.id).await?;
        let foreign = crate::outcome::Event::ForeignRef.as_str();
        let foreign_refs = (crate::ledger::events::of_kind_in_run(pool, run.id, foreign).await?)
            .iter()
            .filter_map(crate::user_repo::foreign::ForeignRef::from_json)
            .collect();
        let started = crate::outcome::Event::RunStarted.as_str();
        let sandbox_unavailable = (crate::ledger::events::of_kind_in_run(pool, run.id, started)
            .await?)
            .iter()
            .find_map(|v| v["sandbox_unavailable"].as_str().map(str::to_string));
        let refused = crate::outcome::Event::SandboxRefused.as_str();
        let sandbox_refused = (crate::ledger::events::of_kind_in_run(pool, run.id, refused)
            .await?)
            .iter()
            .filter_map(|v| v["hosts"].as_array())
            .flatten()
            .filter_map(|h| h.as_str().map(str::to_string))
            .collect();
        let ci = crate::ledger::ci::views_of_run(pool, run.id).await?;
        Ok(RunView {
            run,
            items,
            slept,
            tended,
            foreign_refs,
            sandbox_unavailable,
            sandbox_refused,
            ci,
        })
    }

    /// The plan items a drain stopped by a signal or a crash never reached
    /// (index, title, contract SHA); none for other runs: the deadline
    /// records them itself, as `deadline` items.
    ///
    /// # Errors
    /// Database errors.
    pub async fn not_started(&self, pool: &sqlx::PgPool) -> Result<Vec<(i32, String, String)>> {
        let row = &self.run;
        Ok(match (row.kind, row.status) {
            (RunKind::Drain, RunStatus::StoppedSignal | RunStatus::Crashed) => {
                plans::plan_items_after(
                    pool,
                    &row.plan_sha,
                    self.items.iter().map(|i| i.item_index).max().unwrap_or(0),
                )
                .await?
            }
            _ => Vec::new(),
        })
    }
}

/// The items of run `run` that this process's workers ended (their
/// worker is `host:pid:n` with this host and pid, docs/workers.md), in
/// plan order: what `worker` says it did before it exits.
///
/// # Errors
/// Database errors.
pub async fn items_of_this_process(pool: &sqlx::PgPool, run: Uuid) -> Result<Vec<ItemRow>> {
    let me = crate::queue::WorkerId::this_process(1);
    let prefix = format!("{}:{}:", me.host, me.pid);
    Ok(items::run_items(pool, run)
        .await?
        .into_iter()
        .filter(|i| {
            i.ended_at.is_some() && i.worker.as_deref().is_some_and(|w| w.starts_with(&prefix))
        })
        .collect())
}

/// The run `run` of repository `repo` (its id), else its newest; `None`
/// when there is no such run.
///
/// # Errors
/// Database errors.
pub async fn run_row(pool: &sqlx::PgPool, repo: &str, run: Option<Uuid>) -> Result<Option<RunRow>> {
    Ok(runs::run_row(pool, repo, run).await?)
}

/// [`RunView`] of [`run_row`]'s run, if there is one.
///
/// # Errors
/// Database errors.
pub async fn run_view(
    pool: &sqlx::PgPool,
    repo: &str,
    run: Option<Uuid>,
) -> Result<Option<RunView>> {
    match run_row(pool, repo, run).await? {
        Some(row) => Ok(Some(RunView::of(pool, row).await?)),
        None => Ok(None),
    }
}

/// Whether nightshift has open PRs in repository `repo` (the ledger's
/// word; GitHub is not asked).
///
/// # Errors
/// Database errors.
pub async fn has_open_prs(pool: &sqlx::PgPool, repo: &str) -> Result<bool> {
    Ok(!prs::open_prs(pool, repo).await?.is_empty())
}

/// Marks the items a drain will not run because of earlier runs (docs/commands.md:
/// listed with `blocked` saying why): a PR open or merged, a branch pushed
/// whose PR is still to be opened, a writer's question still unanswered.
/// Display only: the plan's SHA and contracts do not change.
///
/// # Errors
/// Database errors.
pub async fn mark_earlier_work(pool: &sqlx::PgPool, repo_id: &str, plan: &mut Plan) -> Result<()> {
    // Two statements for the whole backlog, not two per item.
    let open: Vec<(&str, &str)> = plan
        .entries
        .iter()
        .filter(|e| e.blocked.is_none())
        .map(|e| (e.item.key.as_str(), e.contract_sha.as_str()))
        .collect();
    let keys: Vec<&str> = open.iter().map(|(k, _)| *k).collect();
    let mut prs: std::collections::HashMap<String, Vec<prs::PrRow>> = Default::default();
    for p in prs::prs_of_items(pool, repo_id, &keys).await? {
        prs.entry(p.item_key.clone()).or_default().push(p);
    }
    let questions: std::collections::HashMap<(String, String), String> =
        items::open_questions(pool, repo_id, &open)
            .await?
            .into_iter()
            .map(|(k, c, q)| ((k, c), q))
            .collect();
    for e in plan.entries.iter_mut().filter(|e| e.blocked.is_none()) {
        let prs = prs.get(&e.item.key).map(Vec::as_slice).unwrap_or_default();
        if let Some(p) = prs.iter().find(|p| {
            matches!(
                p.state,
                PrRecord::Open | PrRecord::Merged | PrRecord::Planned | PrRecord::PrFailed
            )
        }) {
            e.blocked = Some(match (p.state, p.number) {
                (PrRecord::Merged, Some(n)) => format!("already merged: PR #{n}"),
                (_, Some(n)) => format!("already open: PR #{n}"),
                _ if p.state == PrRecord::Planned => format!(
                    "branch {} already pushed by an earlier run without GitHub access; a run with a GitHub token opens its PR",
                    p.branch
                ),
                _ => format!(
                    "branch {} already pushed by an earlier run whose PR failed to open; the next run opens it",
                    p.branch
                ),
            });
        } else if !questions.is_empty()
            && let Some(q) = questions.get(&(e.item.key.clone(), e.contract_sha.clone()))
        {
            e.blocked = Some(format!(
                "waiting for an answer to the writer's question: {q} (edit the item to answer it)"
            ));
        }
    }
    Ok(())
}

/// A run id from `--run`: a full UUID, or a unique prefix of at least four
/// hex digits (as the report's first line shows it). A wrong or ambiguous
/// one lists the repository's recent runs.
///
/// # Errors
/// Exit 2 for an unknown, ambiguous or too short id; database errors.
pub async fn resolve_run_id(pool: &sqlx::PgPool, repo: &str, given: &str) -> Result<Uuid> {
    let g = given.trim().to_ascii_lowercase();
    if let Ok(u) = Uuid::parse_str(&g) {
        return Ok(u);
    }
    let recent = runs::recent_runs(pool, repo, 10).await?;
    let list = if recent.is_empty() {
        "  (none yet: `nightshift drain` starts the first)".to_string()
    } else {
        recent
            .iter()
            .map(|(i, t, st)| {
                format!(
                    "  {}  {}  {st}",
                    &i.to_string()[..8],
                    t.format("%Y-%m-%d %H:%M UTC")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let hexish = g.len() >= 4 && g.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if hexish {
        let hits = runs::runs_with_prefix(pool, repo, &g).await?;
        if hits.len() == 1 {
            return Ok(hits[0]);
        }
        if hits.len() > 1 {
            return Err(Error::argument(format!(
                "run {given:?} matches {} runs; give more of the id. Recent runs:\n{list}",
                hits.len()
            )));
        }
    }
    if !g.is_empty() && g.len() < 4 && g.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::argument(format!(
            "run {given:?} is too short: give at least 4 hex digits of the run id. Recent runs:\n{list}"
        )));
    }
    Err(Error::argument(format!(
        "run {given:?} is not a run of this repository (a run id or a prefix of at least 4 hex digits). Recent runs:\n{list}"
    )))
}

/// What `sha` names: `Some(false)` a plan nightshift made, `Some(true)` a
/// contract, `None` neither (`approve`'s question).
///
/// # Errors
/// Database errors.
pub async fn names_contract(pool: &sqlx::PgPool, sha: &str) -> Result<Option<bool>> {
    if plans::plan_exists(pool, sha).await? {
        return Ok(Some(false));
    }
    Ok(plans::contract_exists(pool, sha).await?.then_some(true))
}

/// The contract SHAs of the stored plan `plan_sha`.
///
/// # Errors
/// Database errors.
pub async fn plan_contracts(pool: &sqlx::PgPool, plan_sha: &str) -> Result<Vec<String>> {
    Ok(plans::plan_contracts(pool, plan_sha).await?)
}
