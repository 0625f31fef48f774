//! Settings resolved once: what a `drain`, `run [ITEM]` or `worker` works
//! under, resolved from the command's raw flags ([`Flags`], no I/O) in a
//! second step that may read files, the environment, git, GitHub and the
//! ledger (ripgrep's low-level args → high-level args). The result is one
//! read-only [`crate::run::Settings`] (with the [`crate::run::RunState`] it
//! starts from) that the run takes: the config and the snapshot's plan
//! ([`repo`]), the ledger and the locks ([`held`]), GitHub and the remote
//! ([`github`]), the approval or the run to resume ([`mod@approve`]), the
//! agents' environments ([`mod@env`]) and, for a worker, the live run it joins
//! ([`worker`]).
//!
//! Not for presenting anything (the CLI prints the cards, the report and
//! the notes), nor for running items ([`crate::run`]). Its warnings go to
//! stderr as they are found, as before a run starts.

mod approve;
mod env;
mod github;
mod held;
mod repo;
pub mod toolchain;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::run::{self, Night, Selection};
use crate::schedule;

pub use approve::{Approved, approve, record_refusal};
pub use env::{Environments, Startup, agents_environment, build_output, data_dir, log_dir};
pub use github::{GitHub, NoToken, check_remote, github_client, no_token, no_token_in, tend_cards};
pub use held::{Held, install_approval_key, ledger, ledger_serial};
pub use repo::{
    Location, Snapshot, agents_as_root_refusal, agents_run_as_root, checked_load, load_config,
    normalize_remote_url, read_backlog, repo_id, repo_root, sandbox_builds, sandbox_state,
    snapshot,
};
pub use worker::{Joined, join_live_run};

/// The raw flags of `drain` and `run [ITEM]` (and a `schedule` fire), as
/// given: nothing here is checked or read yet ([`Request::resolve`] does).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--repo` and `--config`.
    pub location: Location,
    /// `--approve SHA`.
    pub approve: Option<String>,
    /// `--deadline HH:MM|RFC3339`.
    pub deadline: Option<String>,
    /// `--tz ZONE`.
    pub tz: Option<String>,
    /// `--jobs N`.
    pub jobs: Option<u32>,
    /// `None` for `drain`; `Some(ITEM)` for `run [ITEM]` (`ITEM` may be
    /// `#N`, a PR to tend).
    pub item: Option<Option<String>>,
    /// Whether this drain is one of `schedule`'s fires.
    pub scheduled: bool,
}

/// What `drain` or `run [ITEM]` asks for, resolved from its arguments and
/// the snapshot before the ledger is touched. A new option of the command
/// is resolved here and carried to [`Resolved::into_night`].
pub struct Request {
    /// The user's repository root (never written to).
    pub repo: PathBuf,
    /// The config file as found and read (for the second night's cards).
    pub loaded: crate::config::Loaded,
    /// The config, as loaded for the snapshot.
    pub config: Config,
    /// The snapshot's sealed plan.
    pub plan: Plan,
    /// Every item (`drain`) or one (`run [ITEM]`).
    pub selection: Selection,
    /// `--approve SHA`: a plan or contract SHA-256 (64 hex characters).
    pub approve: Option<String>,
    /// The resolved time zone.
    pub tz: Tz,
    /// When the run must stop (UTC).
    pub deadline: DateTime<Utc>,
    /// When the command started (UTC): approvals are judged at this time.
    pub now: DateTime<Utc>,
    /// The deadline as given (`HH:MM` or RFC 3339), to resolve it again by
    /// the ledger server's clock ([`Request::reclock`]).
    pub deadline_input: String,
    /// Whether this drain is one of `schedule`'s fires.
    pub scheduled: bool,
}

impl Request {
    /// Checks `--approve`, takes the snapshot, refuses agents that would run
    /// as root (docs/security.md), picks the items (`item`: `None` for
    /// `drain`) and resolves the zone and the deadline (docs/limits.md).
    ///
    /// # Errors
    /// Exit 2: a malformed `--approve`, zone or deadline, an unknown item, a
    /// bad config or backlog.
    pub fn resolve(flags: &Flags) -> Result<Request> {
        let (args, item) = (flags, flags.item.as_ref());
        check_approve_arg(args.approve.as_deref())?;
        let snap = snapshot(&flags.location)?;
        let plan = snap.plan;
        let mut config = snap.loaded.config.clone();
        if let Some(jobs) = args.jobs {
            config.jobs = checked_jobs(jobs, item.is_some())?;
        }
        // Before anything is consumed or started (docs/security.md).
        if let Some(why) = agents_as_root_refusal(&config, &snap.loaded.path) {
            return Err(Error::config(why));
        }
        // Once, at the top of the run (docs/security.md#the-sandbox).
        match sandbox_state(&config, &snap.loaded.path) {
            Err(why) => return Err(Error::config(why)),
            Ok(Some(warning)) => eprintln!("warning: {warning}"),
            Ok(None) => {}
        }
        let selection = match item {
            None => Selection::All,
            Some(sel) => match sel.as_deref().and_then(pr_selected) {
                Some(n) => Selection::Pr(n),
                None => Selection::One(select_item(&plan, sel.as_deref())?),
            },
        };
        let (tz, zone_source) =
            schedule::resolve_zone(args.tz.as_deref().or(config.timezone.as_deref()))
                .map_err(|e| Error::argument(format!("time zone: {e}")))?;
        if let Some(w) = zone_source.warning() {
            eprintln!("warning: {w}");
        }
        let now = schedule::server_now();
        let deadline_input = args.deadline.clone().unwrap_or(config.deadline.clone());
        let deadline = schedule::parse_deadline(&deadline_input, now, tz)
            .map_err(|e| Error::argument(format!("deadline: {e}")))?;
        Ok(Request {
            repo: snap.repo,
            loaded: snap.loaded,
            config,
            plan,
            selection,
            approve: args.approve.clone(),
            tz,
            deadline,
            now,
            deadline_input,
            scheduled: flags.scheduled,
        })
    }

    /// Judges `now` and the deadline again by the ledger server's clock,
    /// once [`Held::take`] measured it: a host whose clock is off neither
    /// moves the night's end nor expires an approval early
    /// (docs/workers.md#what-clocks-must-agree).
    ///
    /// # Errors
    /// Exit 2 for a deadline that no longer parses (it parsed before).
    pub fn reclock(&mut self) -> Result<()> {
        self.now = schedule::server_now();
        self.deadline = schedule::parse_deadline(&self.deadline_input, self.now, self.tz)
            .map_err(|e| Error::argument(format!("deadline: {e}")))?;
        Ok(())
    }
}

/// `--approve SHA` must be a SHA-256: 64 hex characters.
///
/// # Errors
/// Exit 2 naming the SHA `nightshift plan` prints instead.
fn check_approve_arg(approve: Option<&str>) -> Result<()> {
    if let Some(sha) = approve {
        let ok = sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit());
        if !ok {
            return Err(Error::argument(format!(
                "--approve {sha:?} is not a SHA-256 (64 hex characters); give the plan SHA `nightshift plan` printed"
            )));
        }
    }
    Ok(())
}

/// Before the approval is consumed: a missing agent CLI is a usage error,
/// recorded as a refusal.
///
/// # Errors
/// Exit 2 naming the missing CLI; database errors.
pub async fn preflight_agents(req: &Request, held: &Held, env: &Environments) -> Result<()> {
    let config = &req.config;
    // The fallbacks too (docs/limits.md#fallback): one missing at 03:00 would stop the night.
    for (writes, table, a) in &config.agents_in_play() {
        let role = if *writes {
            crate::agent::Role::Writer
        } else {
            crate::agent::Role::Reviewer
        };
        if let Err(why) =
            crate::agent::preflight(role, a, env.agent_env.get("PATH").map(String::as_str))
        {
            let why = crate::config::Config::name_table(&why, *writes, table);
            crate::ledger::events::event(
                held.pool(),
                None,
                crate::outcome::Event::Refused.as_str(),
                serde_json::json!({"reason": why, "plan_sha": req.plan.sha}),
            )
            .await?;
            return Err(Error::config(why));
        }
    }
    Ok(())
}

/// Everything `drain` resolved before the run, in one place; the run's
/// [`Night`] is made of it.
pub struct Resolved {
    /// The request.
    pub req: Request,
    /// The ledger and the locks.
    pub held: Held,
    /// GitHub and the remote's URL.
    pub github: GitHub,
    /// The remote's (fetch URL, push URL) when the run started.
    pub remote_urls: (String, String),
    /// The agents' and gates' environments.
    pub env: Environments,
}

impl Resolved {
    /// The run's shared state; `cancel` fires on a stop signal.
    pub fn into_night(self, cancel: CancellationToken) -> Arc<Night> {
        let Resolved {
            req,
            held,
            github,
            remote_urls,
            env,
        } = self;
        // nightshift's own writes there must not make every state stale.
        let own = vec![env.data_dir.clone(), log_dir()];
        let sandbox = sandbox_builds(&req.config);
        let settings = run::Settings {
            repo_watch: crate::user_repo::Watch::new(&req.repo, own),
            repo: req.repo,
            repo_id: held.repo_id,
            config: req.config,
            plan: req.plan,
            pool: held.ledger.pool.clone(),
            tz: req.tz,
            deadline: req.deadline,
            data_dir: env.data_dir,
            forge: github.forge,
            forge_missing: github.forge_missing,
            token: github.token,
            agent_env: env.agent_env,
            gate_env: env.gate_env,
            secrets: env.secrets,
            run_as: env.run_as,
            cancel,
            // Every host's shared decisions are judged by the ledger
            // server's clock (docs/workers.md#what-clocks-must-agree).
            clock: Arc::new(schedule::server_clock().clone()),
            remote_urls,
            db_source: env.db_source,
            sandbox,
        };
        let state = run::RunState::new(held.ledger, held.lock, Some(held.slots_lock));
        Arc::new(Night { settings, state })
    }
}

/// `plan` with the tend cards of nightshift's open PRs as GitHub shows
/// them now (none, with a warning, when GitHub cannot be asked), stored so
/// the run's plan and its cards are in the ledger.
///
/// # Errors
/// Database errors.
pub async fn with_tend_cards(req: &Request, held: &Held, startup: &Startup) -> Result<Plan> {
    let (pool, id) = (held.pool(), held.repo_id.as_str());
    let snap = Snapshot {
        repo: req.repo.clone(),
        loaded: req.loaded.clone(),
        plan: req.plan.clone(),
    };
    let cards = tend_cards(&snap, pool, id, startup).await?;
    if cards.is_empty() {
        return Ok(snap.plan);
    }
    let plan = snap.plan.with_tend(cards);
    crate::run::save_plan(pool, id, &plan).await?;
    crate::run::save_tend_cards(pool, &plan).await?;
    Ok(plan)
}

/// The PR number `run '#N'` names (docs/commands.md#run), if the argument
/// is of that form.
pub fn pr_selected(sel: &str) -> Option<u64> {
    sel.trim().strip_prefix('#')?.trim().parse().ok()
}

/// `--jobs N`: 1 to [`crate::config::MAX_JOBS`] workers, for `drain` (and
/// `worker`) only — `run` runs one item.
///
/// # Errors
/// [`Error::Argument`] naming the flag and the fix.
pub fn checked_jobs(jobs: u32, one_item: bool) -> Result<u32> {
    if one_item && jobs != 1 {
        return Err(Error::argument(
            "--jobs is for `drain` and `worker`: `run` runs one item; use `nightshift drain --jobs N`",
        ));
    }
    if jobs == 0 || jobs > crate::config::MAX_JOBS {
        return Err(Error::argument(format!(
            "--jobs {jobs}: give 1 to {} workers",
            crate::config::MAX_JOBS
        )));
    }
    Ok(jobs)
}

/// Resolves `run [ITEM]` to a plan index.
fn select_item(plan: &Plan, sel: Option<&str>) -> Result<usize> {
    let open: Vec<_> = plan.entries.iter().collect();
    match sel {
        None => open
            .iter()
            .find(|e| e.blocked.is_none())
            .or(open.first())
            .map(|e| e.index)
            .ok_or_else(|| Error::argument("no open items in the backlog; nothing to run")),
        Some(s) => {
            if let Ok(n) = s.trim().parse::<usize>() {
                return open
                    .iter()
                    .find(|e| e.index == n)
                    .map(|e| e.index)
                    .ok_or_else(|| {
                        Error::argument(format!(
                            "no open item {n}; `nightshift plan` lists {} open item(s)",
                            open.len()
                        ))
                    });
            }
            let needle = s.to_lowercase();
            let hits: Vec<_> = open
                .iter()
                .filter(|e| e.item.title.to_lowercase().contains(&needle))
                .collect();
            match hits.len() {
                1 => Ok(hits[0].index),
                0 => Err(Error::argument(format!(
                    "no open item's title contains {s:?}; `nightshift plan` lists them"
                ))),
                _ => Err(Error::argument(format!(
                    "{s:?} matches {} open items ({}); give more of the title or the index",
                    hits.len(),
                    hits.iter()
                        .map(|e| format!("{}: {}", e.index, e.item.title))
                        .collect::<Vec<_>>()
                        .join("; ")
                ))),
            }
        }
    }
}
