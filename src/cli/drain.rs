//! `nightshift drain` and `nightshift run [ITEM]` (docs/commands.md, docs/contract.md, docs/limits.md, docs/ledger.md).
//!
//! Resolves everything a run needs — snapshot, ledger, lock, approval (or the
//! crashed run to resume), zone and deadline, GitHub, the agents' scrubbed
//! environment, signal handling — then hands over to [`crate::run::drain`]
//! and prints the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use tokio_util::sync::CancellationToken;

use crate::cli::plan::snapshot;
use crate::cli::{Cli, RunArgs, Startup, install_approval_key, ledger, progress, repo_id};
use crate::config::Config;
use crate::contract;
use crate::error::{Error, Result};
use crate::ledger::records as rec;
use crate::outcome::{PrRecord, RunStatus};
use crate::plan::{self, Plan};
use crate::run::{self, Night, Selection};
use crate::secret::Secret;
use crate::slot::SlotsLock;
use crate::{approval, forge, ledger as ledger_mod, process, schedule};

/// `drain` (item = None) or `run [ITEM]` (item = Some).
pub(crate) async fn drain(
    cli: &Cli,
    args: &RunArgs,
    item: Option<Option<String>>,
    startup: &Startup,
) -> Result<()> {
    drain_with(cli, args, item, startup, None).await
}

/// One fire of `schedule`: a `drain` that records `not_approved` for the
/// plan in the ledger when no valid approval exists (docs/contract.md#approval), and stops
/// when `stop` (the schedule's signal) fires, even one that came before the
/// drain's own handler was installed.
pub(crate) async fn drain_scheduled(
    cli: &Cli,
    args: &RunArgs,
    startup: &Startup,
    stop: &CancellationToken,
) -> Result<()> {
    drain_with(cli, args, None, startup, Some(stop)).await
}

/// `schedule_stop`: the schedule's token when this drain is one of its fires.
///
/// The steps, in the order a person sees their effects: resolve the request
/// (arguments, snapshot, zone, deadline), take the ledger and its locks,
/// reach GitHub, refuse an item that will not run, find the approval (or
/// the run to resume), check the remote, build the agents' environments,
/// check the agent CLIs, install the signal handler, run, print.
async fn drain_with(
    cli: &Cli,
    args: &RunArgs,
    item: Option<Option<String>>,
    startup: &Startup,
    schedule_stop: Option<&CancellationToken>,
) -> Result<()> {
    let mut req = Request::resolve(cli, args, item.as_ref(), schedule_stop.is_some())?;
    let held = Held::take(&req).await?;
    // `run '#N'` names a PR: its card, as it is now, is what is approved.
    if let Selection::Pr(n) = req.selection {
        req.plan = with_tend_cards(&req, &held, startup).await?;
        if let Some(why) = no_card_to_tend(&req.plan, n) {
            println!(
                "PR #{n} will not be tended: {why}\nnothing was run, and no approval was asked for or used"
            );
            return Ok(());
        }
    }
    let isolation = build_output(&req)?;
    let github = GitHub::resolve(&req, startup);
    // `run ITEM` on an item that will not run says so before an approval
    // is asked for, and uses none (docs/commands.md).
    if let Some(note) = item_will_not_run(&req, &held, &github).await? {
        println!("{note}");
        return Ok(());
    }
    // Approvals are verified with the data directory's key (docs/contract.md).
    install_approval_key()?;
    let approved = approve(&req, &held).await?;
    // Yesterday's PRs, looked at again now that an approval is in hand (a
    // refused run asks GitHub nothing): the approved set covers the cards
    // as they are tonight (docs/github.md "The second night").
    if matches!(req.selection, Selection::All) {
        req.plan = with_tend_cards(&req, &held, startup).await?;
    }
    let remote_urls = check_remote(&req, &github)?;
    let env = Environments::resolve(&req, startup, &github, isolation)?;
    env.print_isolation(&req);
    preflight_agents(&req, &held, &env).await?;
    if crate::cli::plan::agents_run_as_root(&req.config) {
        eprintln!("warning: {}", crate::report::AGENTS_AS_ROOT_NOTE);
    }
    let cancel = schedule_stop
        .map(CancellationToken::child_token)
        .unwrap_or_default();
    let _signals = spawn_signal_handler(cancel.clone());
    let selection = req.selection.clone();
    let resolved = Resolved {
        req,
        held,
        github,
        remote_urls,
        env,
    };
    let night = resolved.into_night(cancel);
    let end = run_watched(cli, &night, selection.clone(), &approved).await?;
    finish(cli, &night, &selection, end).await
}

/// What `drain` or `run [ITEM]` asks for, resolved from its arguments and
/// the snapshot before the ledger is touched. A new option of the command
/// is resolved here and carried to [`Resolved::into_night`].
struct Request {
    /// The user's repository root (never written to).
    repo: PathBuf,
    /// The config file as found and read (for the second night's cards).
    loaded: crate::config::Loaded,
    /// The config, as loaded for the snapshot.
    config: Config,
    /// The snapshot's sealed plan.
    plan: Plan,
    /// Every item (`drain`) or one (`run [ITEM]`).
    selection: Selection,
    /// `--approve SHA`: a plan or contract SHA-256 (64 hex characters).
    approve: Option<String>,
    /// The resolved time zone.
    tz: Tz,
    /// When the run must stop (UTC).
    deadline: DateTime<Utc>,
    /// When the command started (UTC): approvals are judged at this time.
    now: DateTime<Utc>,
    /// Whether this drain is one of `schedule`'s fires.
    scheduled: bool,
}

impl Request {
    /// Checks `--approve`, takes the snapshot, refuses agents that would run
    /// as root (docs/security.md), picks the items (`item`: `None` for
    /// `drain`) and resolves the zone and the deadline (docs/limits.md).
    ///
    /// # Errors
    /// Exit 2: a malformed `--approve`, zone or deadline, an unknown item, a
    /// bad config or backlog.
    fn resolve(
        cli: &Cli,
        args: &RunArgs,
        item: Option<&Option<String>>,
        scheduled: bool,
    ) -> Result<Request> {
        check_approve_arg(args.approve.as_deref())?;
        let snap = snapshot(cli)?;
        let plan = snap.plan;
        let mut config = snap.loaded.config.clone();
        if let Some(jobs) = args.jobs {
            config.jobs = checked_jobs(jobs, item.is_some())?;
        }
        // Before anything is consumed or started (docs/security.md).
        if let Some(why) = crate::cli::plan::agents_as_root_refusal(&config, &snap.loaded.path) {
            return Err(Error::config(why));
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
        let now = Utc::now();
        let deadline = schedule::parse_deadline(
            args.deadline.as_deref().unwrap_or(&config.deadline),
            now,
            tz,
        )
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
            scheduled,
        })
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

/// The ledger and the holds that make this drain the repository's only
/// one (docs/ledger.md): the lock in the ledger and the lock on the
/// checkouts under the data directory.
struct Held {
    /// The connected ledger.
    ledger: ledger_mod::Ledger,
    /// The repository's identity in the ledger (see `cli::repo_id`).
    repo_id: String,
    /// The one-drain-per-repository lock in the ledger (`None` for a
    /// `worker`, which joins the drain that holds it).
    lock: Option<ledger_mod::RepoLock>,
    /// The hold on the repository's checkouts.
    slots_lock: SlotsLock,
}

impl Held {
    /// Connects to the ledger, records the plan, takes both locks, checks
    /// the data directory can be written, and marks the runs that died
    /// `crashed` (saying so on stderr).
    ///
    /// # Errors
    /// Exit 1 when the ledger is unreachable or the data directory cannot
    /// be locked or written; refused when another run holds a lock.
    async fn take(req: &Request) -> Result<Held> {
        ledger_mod::size_pool_for(req.config.jobs);
        let ledger = ledger().await?;
        let repo_id = repo_id(&req.repo, &req.config.remote);
        crate::run::save_plan(&ledger.pool, &repo_id, &req.plan).await?;
        let lock = lock_repo(&ledger, &repo_id, &req.repo).await?;
        let slots_lock = lock_checkouts(&req.repo)?;
        let crashed = rec::mark_dead_runs_crashed(&ledger.pool, &repo_id).await?;
        for r in &crashed {
            eprintln!(
                "note: run {} (pid {}) ended without finishing; marked crashed",
                r.id,
                r.pid.unwrap_or(0)
            );
        }
        Ok(Held {
            ledger,
            repo_id,
            lock: Some(lock),
            slots_lock,
        })
    }

    /// The ledger's pool.
    fn pool(&self) -> &sqlx::PgPool {
        &self.ledger.pool
    }
}

/// One drain per repository (docs/ledger.md): the ledger's lock of `repo_id`.
///
/// # Errors
/// A ledger error; refused, naming the holder, when another run holds it.
async fn lock_repo(
    ledger: &ledger_mod::Ledger,
    repo_id: &str,
    repo: &Path,
) -> Result<ledger_mod::RepoLock> {
    let holder = ledger_mod::HolderInfo::current();
    let attempt = ledger
        .try_lock_repo(repo_id, &holder)
        .await
        .map_err(|e| Error::Ledger {
            detail: e.to_string(),
            outage: false,
            source: None,
        })?;
    match attempt {
        ledger_mod::RepoLockAttempt::Acquired(guard) => Ok(guard),
        ledger_mod::RepoLockAttempt::Held { holder } => {
            let who = holder
                .map(|h| h.to_string())
                .unwrap_or_else(|| "another process".into());
            Err(Error::refused(format!(
                "another nightshift run holds the lock of {} ({who}); wait for it to finish or stop it",
                repo.display()
            )))
        }
    }
}

/// The checkouts too, whatever database another drain uses; a data
/// directory that is already full or read-only would stop the run at its
/// first item, so that is said before an approval is used.
///
/// # Errors
/// Refused when another process holds the checkouts; exit 1 when they
/// cannot be locked or the directory cannot be written.
fn lock_checkouts(repo: &Path) -> Result<SlotsLock> {
    let data_dir = crate::cli::data_dir();
    let slots_lock = match crate::slot::lock_slots(&data_dir, repo) {
        Ok(Ok(l)) => l,
        Ok(Err(pid)) => {
            return Err(Error::refused(format!(
                "another nightshift run (pid {pid}) is using the checkouts of {} under {}, perhaps with another database; wait for it to finish or stop it",
                repo.display(),
                data_dir.display()
            )));
        }
        Err(e) => {
            return Err(Error::failed(format!(
                "cannot lock the checkouts under {}: {e}",
                data_dir.display()
            )));
        }
    };
    if let Err(why) = slots_lock.check() {
        return Err(Error::failed(format!(
            "{why}; nothing was run and the approval is still unused"
        )));
    }
    Ok(slots_lock)
}

/// GitHub and the remote as this run sees them (docs/github.md#token).
struct GitHub {
    /// The configured remote's URL; `None` when there is no such remote.
    remote_url: Option<String>,
    /// The token, from the variables `main` removed, else from `gh`.
    token: Option<Secret>,
    /// The client, when a token and a GitHub repository are known.
    forge: Option<forge::Forge>,
    /// Why there is no client (shown in the report).
    forge_missing: Option<String>,
}

impl GitHub {
    /// Reads the remote's URL, finds the token and builds the client (its
    /// calls end by the deadline). Nothing here fails the run: without
    /// GitHub it pushes branches only.
    fn resolve(req: &Request, startup: &Startup) -> GitHub {
        let remote_url = crate::git::Git::new(&req.repo)
            .text(&["remote", "get-url", &req.config.remote])
            .ok()
            .map(|s| s.trim().to_string());
        let token = forge::resolve_token(&startup.removed).map(|(t, _)| t);
        let (forge, forge_missing) = match &token {
            Some(t) => {
                match crate::cli::github_client(&req.repo, &req.config, t, Some(req.deadline)) {
                    Ok(f) => (Some(f), None),
                    Err(why) => (None, Some(why)),
                }
            }
            None => (
                None,
                Some(crate::cli::no_token(&req.config, remote_url.as_deref()).to_string()),
            ),
        };
        GitHub {
            remote_url,
            token,
            forge,
            forge_missing,
        }
    }

    /// The token's text, for git's askpass helper.
    fn token_text(&self) -> Option<&str> {
        self.token.as_ref().map(Secret::expose)
    }
}

/// For `run ITEM`: the line to print when the item would do nothing
/// ([`will_not_run`]); `None` for `drain` and for an item that will run.
///
/// # Errors
/// Database errors.
async fn item_will_not_run(req: &Request, held: &Held, github: &GitHub) -> Result<Option<String>> {
    let Selection::One(i) = req.selection else {
        return Ok(None);
    };
    let Some(entry) = req.plan.entries.iter().find(|e| e.index == i) else {
        return Ok(None);
    };
    let why = will_not_run(&WontRun {
        pool: held.pool(),
        repo_id: &held.repo_id,
        entry,
        forge: github.forge.as_ref(),
        config: &req.config,
        repo: &req.repo,
        remote_url: github.remote_url.as_deref(),
        token: github.token_text(),
    })
    .await?;
    Ok(why.map(|why| {
        format!(
            "item {i} ({}) will not run: {why}\nnothing was run, and no approval was asked for or used",
            entry.item.title
        )
    }))
}

/// The approval a run works under, and the run it resumes.
struct Approved {
    /// The approval.
    approval: approval::Approval,
    /// The contract SHAs it approves.
    contracts: Vec<String>,
    /// The crashed or stopped run taken up again, if any.
    resume: Option<rec::RunRow>,
}

/// Resumes a crashed run under its own approval while it is valid
/// (docs/contract.md#approval), else finds a fresh approval. On refusal the
/// cards to approve are printed and the refusal recorded (a scheduled fire
/// records `not_approved` too).
///
/// # Errors
/// Database errors; the refusal (exit 3) when no approval is usable.
async fn approve(req: &Request, held: &Held) -> Result<Approved> {
    let pool = held.pool();
    if req.approve.is_none()
        && matches!(req.selection, Selection::All)
        && let Some((r, a, shas)) =
            crashed_run_to_resume(pool, &held.repo_id, &req.plan, req.now).await?
    {
        let how = if r.status == RunStatus::StoppedSignal {
            "stopped"
        } else {
            RunStatus::Crashed.as_str()
        };
        eprintln!(
            "resuming {how} run {} under its approval (given {})",
            r.id,
            a.created_at.with_timezone(&req.tz).format("%H:%M %Z")
        );
        return Ok(Approved {
            approval: a,
            contracts: shas,
            resume: Some(r),
        });
    }
    if let Selection::Pr(n) = req.selection
        && let Some((approval, contracts)) = card_approval(
            pool,
            &held.repo_id,
            &req.plan,
            n,
            req.approve.as_deref(),
            req.now,
        )
        .await?
    {
        return Ok(Approved {
            approval,
            contracts,
            resume: None,
        });
    }
    let found = approval::find(
        pool,
        &held.repo_id,
        &req.plan,
        req.selection.item(),
        req.approve.as_deref(),
        req.now,
    )
    .await?;
    match found {
        Ok((approval, contracts)) => Ok(Approved {
            approval,
            contracts,
            resume: None,
        }),
        Err(refusal) => {
            record_refusal(req, held, &refusal.to_string()).await?;
            Err(refusal.into())
        }
    }
}

/// Prints the cards a person must approve and records the refusal
/// (`reason`), and `not_approved` for a scheduled fire.
///
/// # Errors
/// Database errors.
async fn record_refusal(req: &Request, held: &Held, reason: &str) -> Result<()> {
    let pool = held.pool();
    let mut shown = req.plan.clone();
    crate::cli::plan::mark_earlier_work(pool, &held.repo_id, &mut shown).await?;
    print_cards(&shown, &req.selection);
    // The cards of yesterday's PRs are not looked up for a refused run (it
    // asks GitHub nothing): say where they are.
    if !rec::open_prs(pool, &held.repo_id).await?.is_empty() {
        println!(
            "(nightshift has open PRs: `nightshift plan` looks at them on GitHub and lists those to tend in the plan to approve)"
        );
    }
    rec::event(
        pool,
        None,
        crate::outcome::Event::Refused.as_str(),
        serde_json::json!({"reason": reason, "plan_sha": req.plan.sha}),
    )
    .await?;
    if req.scheduled {
        rec::event(
            pool,
            None,
            crate::outcome::Event::NotApproved.as_str(),
            serde_json::json!({"reason": reason, "plan_sha": req.plan.sha, "by": "schedule"}),
        )
        .await?;
    }
    Ok(())
}

/// Warns of a password in the remote's URL, refuses a missing remote, reads
/// its (fetch, push) URLs once — like the backlog, the whole run fetches and
/// pushes there — and checks the base branch is on it.
///
/// # Errors
/// Exit 2 when the remote or its base branch does not exist.
fn check_remote(req: &Request, github: &GitHub) -> Result<(String, String)> {
    let config = &req.config;
    // nightshift keeps such a password out of argv, the checkouts and its
    // records, but the user's own .git/config holds it, and agents running
    // as this user can read that file (the checkout's alternates name it).
    if github
        .remote_url
        .as_deref()
        .and_then(crate::secret::url_password)
        .is_some()
    {
        eprintln!(
            "warning: the URL of the remote {:?} carries a password or token; agents running as you can read it in {}/.git/config. Give git the token through a credential helper or GITHUB_TOKEN instead",
            config.remote,
            req.repo.display()
        );
    }
    let Some(url) = github.remote_url.as_deref() else {
        return Err(Error::config(format!(
            "{}: the remote {:?} does not exist; add it (`git remote add {} URL`) or set `remote` in the config",
            req.repo.display(),
            config.remote,
            config.remote
        )));
    };
    let remote_urls = crate::git::remote_urls(&req.repo, &config.remote)
        .map_err(|e| Error::config(format!("{}: {e}", req.repo.display())))?;
    check_base_branch(req, github, url)?;
    Ok(remote_urls)
}

/// Every item starts from `<remote>/<base>`: a missing base would fail each
/// item in turn. Checked before the approval is consumed; a remote that
/// cannot be reached now is left to the items (it may come back).
///
/// # Errors
/// Exit 2 when the remote at `url` answers without the base branch.
fn check_base_branch(req: &Request, github: &GitHub, url: &str) -> Result<()> {
    let config = &req.config;
    match remote_has_branch(&req.repo, github.token_text(), url, &config.base) {
        Ok(false) => {
            return Err(Error::config(format!(
                "the base branch {:?} does not exist on the remote {:?}; push it or set `base` in the config",
                config.base, config.remote
            )));
        }
        Ok(true) => {}
        Err(e) => eprintln!(
            "warning: cannot reach the remote to check the base branch: {}",
            crate::secret::redact_known(&e.to_string())
        ),
    }
    Ok(())
}

/// What agents and gates run with (docs/security.md): environments without
/// tokens, the ledger's URL or the configured secrets, the values to
/// redact, and the account they run as.
struct Environments {
    /// The agents' environment.
    agent_env: BTreeMap<String, String>,
    /// The gates' environment: the agents' plus `gate_env`.
    gate_env: BTreeMap<String, String>,
    /// Secret values to redact wherever output is kept or shown.
    secrets: Vec<String>,
    /// The unprivileged account for agents and gates (as root with
    /// `agent_user`).
    run_as: Option<process::RunAs>,
    /// Where the ledger lives.
    db_source: ledger_mod::DbSource,
    /// The data directory (checkouts, logs).
    data_dir: PathBuf,
    /// What each slot's own build directory replaces (the run's header).
    isolation: crate::build_output::Isolation,
}

impl Environments {
    /// Builds the environments, remembers the secrets for redaction and
    /// looks up `agent_user`; warns of secrets still in nightshift's own
    /// environment and of `gate_env` entries it never passes on.
    ///
    /// # Errors
    /// Exit 2 when `agent_user` does not exist, or has no home directory
    /// while a real agent CLI (claude, codex) would need one.
    fn resolve(
        req: &Request,
        startup: &Startup,
        github: &GitHub,
        isolation: crate::build_output::Isolation,
    ) -> Result<Environments> {
        let config = &req.config;
        warn_secrets_left(config);
        let db_source = ledger_mod::db_source_from_env();
        let mut agent_env = crate::cli::agents_environment(config);
        let mut gate_env = gate_environment(config, startup, &db_source, agent_env.clone());
        let secrets = secrets_to_redact(config, startup, github.token.as_ref(), &db_source);
        crate::secret::remember(&secrets);
        let run_as = agent_account(config)?;
        let data_dir = crate::cli::data_dir();
        if run_as.is_some() {
            // The checkout's top directory and .git stay the runner's (see
            // `run::grant_checkout`); the agent's own git must trust it.
            for n in 0..config.jobs as usize {
                let slot = crate::slot::slot_path(&data_dir, &req.repo, n);
                trust_directory(&mut agent_env, &slot);
                trust_directory(&mut gate_env, &slot);
            }
        }
        Ok(Environments {
            agent_env,
            gate_env,
            secrets,
            run_as,
            db_source,
            data_dir,
            isolation,
        })
    }

    /// The run's header line on build output (stderr), when there are
    /// several slots or a variable of this environment was replaced.
    fn print_isolation(&self, req: &Request) {
        if req.config.jobs > 1 || !self.isolation.replaced.is_empty() {
            let slot = crate::slot::slot_path(&self.data_dir, &req.repo, 0);
            let slots = slot.parent().unwrap_or(&slot);
            eprintln!("{}", self.isolation.header(slots));
        }
    }
}

/// What each slot's own build directory will replace, checked before an
/// approval is used (docs/loop.md#build-output-per-slot): the variables
/// agents and gates would get from this environment (its `secrets` aside).
///
/// # Errors
/// Exit 2 naming the variable and the fix when it would point every slot at
/// one virtualenv, `node_modules` or the like while `jobs > 1`.
fn build_output(req: &Request) -> Result<crate::build_output::Isolation> {
    let seen = process::child_env(std::env::vars(), &req.config.secrets);
    crate::build_output::check(&seen, req.config.jobs)
        .map_err(|shared| Error::config(shared.to_string()))
}

/// `main` wipes the config's `secrets` from our own environment, finding
/// the config before it is loaded; one it missed is still readable by
/// agents in /proc/<nightshift>/environ (though not in theirs): warns of each.
fn warn_secrets_left(config: &Config) {
    for v in config
        .secrets
        .iter()
        .filter(|v| std::env::var_os(v).is_some())
    {
        eprintln!(
            "warning: {v}, listed in `secrets`, is still in nightshift's own environment (the config was not found at start-up); agents running as you can read it in /proc/{}/environ",
            std::process::id()
        );
    }
}

/// The gates' environment: `agent_env` plus each `gate_env` variable
/// nightshift may pass on (never the GitHub token or the ledger's URL or
/// password: each such entry is warned of and skipped).
fn gate_environment(
    config: &Config,
    startup: &Startup,
    source: &ledger_mod::DbSource,
    mut gate_env: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    for v in &config.gate_env {
        // Never passed on, whatever the config says: say so rather than
        // leave a gate wondering why the variable is empty.
        let ledger_var = source.env_var() == Some(v.as_str());
        // PGPASSWORD is the ledger's when its URL has no password of its own.
        let ledger_password = v == "PGPASSWORD"
            && matches!(source, ledger_mod::DbSource::Url { url, .. } if crate::secret::url_password(url.expose()).is_none());
        if crate::secret::token_vars().contains(&v.as_str())
            || ledger_var
            || ledger_password
            || v == "NIGHTSHIFT_DATABASE_URL"
        {
            eprintln!(
                "warning: gate_env lists {v}, which nightshift never passes to gates (it holds the GitHub token or the ledger's URL or password); give the gate its own variable"
            );
            continue;
        }
        // DATABASE_URL (PGPASSWORD) when the ledger is elsewhere is the
        // project's own (its tests' database): wiped from our environment at
        // start-up like every possible ledger variable, but the gate may have it.
        if (v == "DATABASE_URL" || v == "PGPASSWORD")
            && let Some((_, val)) = startup.removed.iter().find(|(n, _)| n == v)
        {
            gate_env.insert(v.clone(), val.expose().to_string());
            continue;
        }
        // Not in `secrets` too: the config refuses that overlap.
        if let Ok(val) = std::env::var(v) {
            gate_env.insert(v.clone(), val);
        }
    }
    gate_env
}

/// The values to redact: what `main` removed from the environment (but a
/// weak `PGPASSWORD`, which would redact common words), the token, the
/// configured secrets and the ledger's URL with its password's forms.
fn secrets_to_redact(
    config: &Config,
    startup: &Startup,
    token: Option<&Secret>,
    source: &ledger_mod::DbSource,
) -> Vec<String> {
    let mut secrets: Vec<String> = startup
        .removed
        .iter()
        .filter(|(n, s)| n != "PGPASSWORD" || !crate::secret::is_weak_password(s.expose()))
        .map(|(_, s)| s.expose().to_string())
        .collect();
    if let Some(t) = token {
        secrets.push(t.expose().to_string());
    }
    for v in &config.secrets {
        if let Ok(val) = std::env::var(v) {
            secrets.push(val);
        }
    }
    if let ledger_mod::DbSource::Url { url, .. } = source {
        secrets.push(url.expose().to_string());
        secrets.extend(crate::secret::url_password_forms(url.expose()));
    }
    secrets
}

/// The account agents run as: `agent_user` when nightshift runs as root,
/// else none. claude and codex keep their login and settings under HOME,
/// so a missing home directory is refused for them (a warning for command
/// agents).
///
/// # Errors
/// Exit 2 when the user does not exist or lacks the home a real agent needs.
fn agent_account(config: &Config) -> Result<Option<process::RunAs>> {
    let run_as = match &config.agent_user {
        Some(u) if nix::unistd::geteuid().is_root() => {
            Some(process::RunAs::lookup(u).map_err(|e| {
                Error::config(format!(
                    "agent_user {u:?}: {e}; create the user or fix `agent_user`"
                ))
            })?)
        }
        _ => None,
    };
    if let Some(u) = &run_as
        && !u.home.is_dir()
    {
        let real = [&config.writer, &config.reviewer]
            .iter()
            .any(|a| a.kind != crate::config::AgentKind::Command);
        let msg = format!(
            "agent_user {:?} has no home directory ({} does not exist); agents run with HOME there. Create it: `usermod -d /home/{} -m {}`",
            u.user,
            u.home.display(),
            u.user,
            u.user
        );
        if real {
            return Err(Error::config(msg));
        }
        eprintln!("warning: {msg}");
    }
    Ok(run_as)
}

/// Before the approval is consumed: a missing agent CLI is a usage error,
/// recorded as a refusal.
///
/// # Errors
/// Exit 2 naming the missing CLI; database errors.
async fn preflight_agents(req: &Request, held: &Held, env: &Environments) -> Result<()> {
    let config = &req.config;
    for (role, a) in [
        (crate::agent::Role::Writer, &config.writer),
        (crate::agent::Role::Reviewer, &config.reviewer),
    ] {
        if let Err(why) =
            crate::agent::preflight(role, a, env.agent_env.get("PATH").map(String::as_str))
        {
            rec::event(
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
struct Resolved {
    /// The request.
    req: Request,
    /// The ledger and the locks.
    held: Held,
    /// GitHub and the remote's URL.
    github: GitHub,
    /// The remote's (fetch URL, push URL) when the run started.
    remote_urls: (String, String),
    /// The agents' and gates' environments.
    env: Environments,
}

impl Resolved {
    /// The run's shared state; `cancel` fires on a stop signal.
    fn into_night(self, cancel: CancellationToken) -> Arc<Night> {
        let Resolved {
            req,
            held,
            github,
            remote_urls,
            env,
        } = self;
        // nightshift's own writes there must not make every state stale.
        let own = vec![env.data_dir.clone(), progress::log_dir()];
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
            clock: Arc::new(schedule::SystemClock),
            remote_urls,
            db_source: env.db_source,
        };
        let state = run::RunState::new(held.ledger, held.lock, Some(held.slots_lock));
        Arc::new(Night { settings, state })
    }
}

/// Runs the drain under `approved` while the progress display watches the
/// selected items.
///
/// # Errors
/// What [`run::drain`] returns.
async fn run_watched(
    cli: &Cli,
    night: &Arc<Night>,
    selection: Selection,
    approved: &Approved,
) -> Result<run::RunEnd> {
    let watched: Vec<progress::Entry> = night
        .plan
        .entries
        .iter()
        .filter(|e| match selection {
            Selection::All => true,
            Selection::One(i) => e.index == i,
            Selection::Pr(_) => false,
        })
        .map(|e| progress::Entry {
            key: e.item.key.clone(),
            title: e.item.title.clone(),
        })
        .collect();
    let watch = progress::watch(
        night.pool.clone(),
        night.repo_id.clone(),
        watched,
        night.tz,
        progress::Mode::detect(cli.quiet),
    );
    let end = run::drain(
        night.clone(),
        selection,
        &approved.approval,
        &approved.contracts,
        approved.resume.as_ref(),
    )
    .await;
    watch.stop().await;
    end
}

/// After the run: notifies, prints the report (unless `--quiet`) and ends
/// the command as the run ended.
///
/// # Errors
/// [`Error::RunStopped`] when something outside the items stopped the run,
/// naming how to go on; else the run's own result; database errors.
async fn finish(cli: &Cli, night: &Night, selection: &Selection, end: run::RunEnd) -> Result<()> {
    tracing::info!(run = %end.run_id, status = %end.status, "run finished");
    let pool = &night.pool;
    let run_row = rec::run_row(pool, &night.repo_id, Some(end.run_id))
        .await?
        .ok_or_else(|| Error::failed("the run vanished from the ledger"))?;
    let items = rec::run_items(pool, end.run_id).await?;
    let slept = rec::slept_seconds(pool, end.run_id).await?;
    crate::cli::notify::run_ended(night, &run_row, &items, slept).await;
    let tended = crate::tend::tended_items(pool, end.run_id).await?;
    let section = crate::tend::report_section(&tended);
    if !cli.quiet {
        // After a hang-up there is no terminal left to print to: the run is
        // recorded, so a failed print is not worth a panic.
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = write!(
            out,
            "{}",
            crate::report::to_text(&run_row, &items, slept, false)
        );
        if !section.is_empty() {
            let _ = write!(out, "\n{}", crate::secret::redact_known(&section));
        }
        if let Some(log) = progress::RUN_LOG.get() {
            let _ = writeln!(out, "log: {}", log.display());
        }
        let _ = out.flush();
    }
    if let Some(why) = end.stopped_by {
        let next = match selection {
            Selection::All => {
                "Once that is fixed, `nightshift drain` resumes this run under its approval (within 24 h of it)"
            }
            Selection::One(_) | Selection::Pr(_) => {
                "Once that is fixed, run `nightshift run` again (approve the item again if its approval was used)"
            }
        };
        return Err(Error::RunStopped {
            why,
            next: next.to_string(),
        });
    }
    end.result
}

/// The newest crashed, not yet resumed run whose plan approval may still be
/// resumed (younger than 24 h, docs/contract.md#resume) and shares contracts with the
/// snapshot: the run, its approval and the approved contract SHAs.
async fn crashed_run_to_resume(
    pool: &sqlx::PgPool,
    repo: &str,
    plan: &Plan,
    now: chrono::DateTime<Utc>,
) -> sqlx::Result<Option<(rec::RunRow, approval::Approval, Vec<String>)>> {
    let Some(r) = rec::resumable_run(pool, repo).await? else {
        return Ok(None);
    };
    let Some(aid) = r.approval_id else {
        return Ok(None);
    };
    let Some(a) = approval::by_id(pool, aid).await? else {
        return Ok(None);
    };
    let Some(plan_sha) = a
        .plan_sha
        .as_deref()
        .filter(|_| approval::may_resume(&a, now))
    else {
        return Ok(None);
    };
    let shas = rec::plan_contracts(pool, plan_sha).await?;
    if !plan.entries.iter().any(|e| shas.contains(&e.contract_sha)) {
        return Ok(None);
    }
    Ok(Some((r, a, shas)))
}

/// What [`will_not_run`] looks at for one item of `run ITEM`.
struct WontRun<'a> {
    pool: &'a sqlx::PgPool,
    repo_id: &'a str,
    entry: &'a contract::PlanEntry,
    forge: Option<&'a forge::Forge>,
    config: &'a crate::config::Config,
    repo: &'a std::path::Path,
    remote_url: Option<&'a str>,
    token: Option<&'a str>,
}

/// Why `run ITEM` would do nothing for this item, the same checks the run
/// makes before its writer (docs/loop.md): blocked in the backlog; an open
/// or merged PR (GitHub's word, else the ledger's); a branch pushed by an
/// earlier night without GitHub access that this run cannot open a PR for
/// either; a writer's question still unanswered; `max_attempts` used up.
/// `None`: the item would run (or GitHub could not tell; the run decides).
///
/// # Errors
/// Database errors.
async fn will_not_run(w: &WontRun<'_>) -> Result<Option<String>> {
    let e = w.entry;
    let key = &e.item.key;
    if let Some(b) = &e.blocked {
        return Ok(Some(format!("it is blocked: {b}")));
    }
    let rows = rec::prs_of_item(w.pool, w.repo_id, key).await?;
    if let Some(f) = w.forge {
        let branch = crate::slot::branch_name(&e.item.title, key);
        for b in std::iter::once(branch).chain(rows.iter().map(|r| r.branch.clone())) {
            match f.find_pr(&b, key, &w.config.label).await {
                Ok(Some(pr)) if pr.state == forge::PrState::Open => {
                    return Ok(Some(format!("its PR #{} is open: {}", pr.number, pr.url)));
                }
                Ok(Some(pr)) if pr.state == forge::PrState::Merged => {
                    return Ok(Some(format!(
                        "its PR #{} was merged: {}",
                        pr.number, pr.url
                    )));
                }
                Ok(_) => {}
                Err(_) => return Ok(None),
            }
        }
    } else if let Some(r) = rows.iter().find(|r| {
        matches!(
            r.state,
            PrRecord::Open | PrRecord::Merged | PrRecord::Planned
        )
    }) {
        let why = match r.state {
            PrRecord::Merged => format!("its PR #{} was merged", r.number.unwrap_or(0)),
            PrRecord::Open => format!("its PR #{} is open", r.number.unwrap_or(0)),
            _ if branch_on_remote(w, &r.branch) => format!(
                "its branch {} was pushed by an earlier night without GitHub access and has no PR; give nightshift GitHub access (GITHUB_TOKEN) and run it again to open the PR, or delete the branch on the remote to redo the item",
                r.branch
            ),
            _ => return Ok(None),
        };
        return Ok(Some(why));
    }
    if let Some((q, _, _)) = rec::open_question(w.pool, w.repo_id, key, &e.contract_sha).await? {
        return Ok(Some(format!(
            "it waits for an answer to the writer's question ({q}); answer it in the item and plan again"
        )));
    }
    let attempts = rec::failed_attempts(w.pool, w.repo_id, key, &e.contract_sha).await?;
    let max = w.config.limits.max_attempts as i64;
    if attempts >= max {
        return Ok(Some(format!(
            "it failed on {attempts} earlier run(s) with this contract (max_attempts = {max}); edit the item or raise max_attempts"
        )));
    }
    Ok(None)
}

/// Whether `branch` is on the remote (`git ls-remote`); an unreachable
/// remote counts as "no": the run then decides.
fn branch_on_remote(w: &WontRun<'_>, branch: &str) -> bool {
    let Some(url) = w.remote_url else {
        return false;
    };
    remote_has_branch(w.repo, w.token, url, branch).unwrap_or(false)
}

/// Whether the remote at `url` has `branch` (`git ls-remote --heads`, with
/// the token for https remotes, killed after 60 s).
///
/// # Errors
/// The git error when the remote cannot be reached.
fn remote_has_branch(
    repo: &Path,
    token: Option<&str>,
    url: &str,
    branch: &str,
) -> std::result::Result<bool, crate::git::GitError> {
    let out = crate::git::Git::new(repo)
        .token(token)
        .timeout(std::time::Duration::from_secs(60))
        .text(&[
            "ls-remote",
            "--heads",
            "--",
            url,
            &format!("refs/heads/{branch}"),
        ])?;
    Ok(!out.trim().is_empty())
}

/// Adds `safe.directory = DIR` to a child's git configuration through
/// `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` (git ≥ 2.31
/// treats these like `-c`, a scope `safe.directory` is honoured from),
/// after any entries the environment already carries.
fn trust_directory(env: &mut std::collections::BTreeMap<String, String>, dir: &std::path::Path) {
    let n: usize = env
        .get("GIT_CONFIG_COUNT")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    env.insert(format!("GIT_CONFIG_KEY_{n}"), "safe.directory".into());
    env.insert(format!("GIT_CONFIG_VALUE_{n}"), dir.display().to_string());
    env.insert("GIT_CONFIG_COUNT".into(), (n + 1).to_string());
}

/// `plan` with the tend cards of nightshift's open PRs as GitHub shows
/// them now (none, with a warning, when GitHub cannot be asked), stored so
/// the run's plan and its cards are in the ledger.
///
/// # Errors
/// Database errors.
async fn with_tend_cards(req: &Request, held: &Held, startup: &Startup) -> Result<Plan> {
    let (pool, id) = (held.pool(), held.repo_id.as_str());
    let snap = crate::cli::plan::Snapshot {
        repo: req.repo.clone(),
        loaded: req.loaded.clone(),
        plan: req.plan.clone(),
    };
    let cards = crate::cli::plan::tend_cards(&snap, pool, id, startup).await?;
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
fn pr_selected(sel: &str) -> Option<u64> {
    sel.trim().strip_prefix('#')?.trim().parse().ok()
}

/// Why `run '#N'` has nothing to do, if it has nothing: no open PR of
/// nightshift's with that number was looked at, or its card calls for no
/// work tonight (nothing new, left alone).
fn no_card_to_tend(plan: &Plan, n: u64) -> Option<String> {
    let Some(card) = plan.tend.iter().find(|c| c.number == n) else {
        return Some(
            "it is not one of nightshift's open PRs that `nightshift plan` lists (or GitHub could not be asked)".into(),
        );
    };
    match &card.verdict {
        crate::tend::Verdict::LeftAlone { reason } => Some(format!("it is left alone: {reason}")),
        crate::tend::Verdict::Nothing => {
            Some("nothing new on it since nightshift's last push".into())
        }
        _ => None,
    }
}

/// For `run '#N'`: a valid, unused approval of that PR's card (`nightshift
/// approve <CARD_SHA>`, or the SHA given with `--approve`), as an item's
/// contract approval serves `run ITEM`. `None`: look for a plan approval.
///
/// # Errors
/// Database errors.
async fn card_approval(
    pool: &sqlx::PgPool,
    repo: &str,
    plan: &Plan,
    n: u64,
    explicit: Option<&str>,
    now: chrono::DateTime<Utc>,
) -> Result<Option<(approval::Approval, Vec<String>)>> {
    let Some(sha) = plan
        .tend
        .iter()
        .find(|c| c.number == n)
        .and_then(|c| c.sealed.as_ref())
        .map(|s| s.sha.clone())
    else {
        return Ok(None);
    };
    if explicit.is_some_and(|e| !e.eq_ignore_ascii_case(&sha)) {
        return Ok(None);
    }
    let list = approval::approvals_of(pool, repo, &sha).await?;
    Ok(list
        .into_iter()
        .find(|a| {
            a.contract_sha.as_deref() == Some(sha.as_str())
                && approval::check_usable(a, now).is_ok()
        })
        .map(|a| (a, vec![sha])))
}

/// `--jobs N`: 1 to [`crate::config::MAX_JOBS`] workers, for `drain` (and
/// `worker`) only — `run` runs one item.
///
/// # Errors
/// [`Error::Argument`] naming the flag and the fix.
pub(crate) fn checked_jobs(jobs: u32, one_item: bool) -> Result<u32> {
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

/// Prints what a person must approve (on refusal).
fn print_cards(plan: &Plan, selection: &Selection) {
    match selection {
        Selection::All => {
            print!("{}", plan::render_plan(plan));
            println!("approve it with: nightshift approve {}", plan.sha);
            println!("{}", crate::cli::plan::approval_key_note());
        }
        Selection::One(i) => {
            if let Some(e) = plan.entries.iter().find(|e| e.index == *i) {
                print!("{}", contract::card(e));
                println!(
                    "approve it with: nightshift approve {}   (or the plan: nightshift approve {})",
                    e.contract_sha, plan.sha
                );
            }
        }
        Selection::Pr(n) => {
            if let Some(c) = plan.tend.iter().find(|c| c.number == *n) {
                print!("{}", crate::tend::card(c));
                if let Some(s) = &c.sealed {
                    println!(
                        "approve it with: nightshift approve {}   (or the plan: nightshift approve {})",
                        s.sha, plan.sha
                    );
                }
            }
        }
    }
}

/// SIGINT/SIGTERM — and SIGHUP (the terminal closed) and SIGQUIT (Ctrl-\\),
/// whose default action would kill nightshift and leave its agent running
/// on in the checkout — cancel the run: the current agent is killed, the
/// item recorded `interrupted`, its checkout cleaned (docs/limits.md).
/// The handlers are installed before this returns, so no signal after it
/// falls to the default action (which would leave the run `running`).
/// The returned guard ends the handler when the drain is over, so the
/// fires of `schedule` do not pile up handlers.
fn spawn_signal_handler(cancel: CancellationToken) -> Option<AbortOnDrop> {
    let mut stop = StopSignals::install()?;
    Some(AbortOnDrop(tokio::spawn(async move {
        let name = stop.recv().await;
        // Cancel before printing: after a hang-up stderr may be gone.
        cancel.cancel();
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "nightshift: {name} received; stopping the current item"
        );
    })))
}

/// The signals that stop a run or a schedule: SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT (docs/limits.md).
pub(crate) struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Installs the handlers; `None` if one cannot be installed.
    pub(crate) fn install() -> Option<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Some(StopSignals {
            int: signal(SignalKind::interrupt()).ok()?,
            term: signal(SignalKind::terminate()).ok()?,
            hup: signal(SignalKind::hangup()).ok()?,
            quit: signal(SignalKind::quit()).ok()?,
        })
    }

    /// Waits for the first of them; returns its name.
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
            _ = self.hup.recv() => "SIGHUP",
            _ = self.quit.recv() => "SIGQUIT",
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `nightshift worker [--jobs N]` (docs/workers.md#nightshift-worker): joins
/// the live run of this repository, whichever host's `drain` opened it, and
/// claims its items until the plan is drained, the run ends or its deadline
/// comes. It works on the run's sealed contracts read from the ledger, never
/// on this clone's backlog, and needs no approval of its own.
///
/// # Errors
/// Exit 3 when no run of this repository is live; exit 2 when the run's
/// agents or gate commands cannot start here, or a bad config; exit 1 when
/// the ledger or the data directory fail.
pub(crate) async fn worker(cli: &Cli, jobs: Option<u32>, startup: &Startup) -> Result<()> {
    let Joined {
        req,
        held,
        run,
        approved,
    } = join_live_run(cli, jobs).await?;
    let isolation = build_output(&req)?;
    let github = GitHub::resolve(&req, startup);
    let remote_urls = check_remote(&req, &github)?;
    let env = Environments::resolve(&req, startup, &github, isolation)?;
    env.print_isolation(&req);
    // The agents are the contracts', not this host's config: say so.
    preflight_agents(&req, &held, &env).await.map_err(|e| match e {
        Error::Config { problem } => Error::config(format!(
            "{problem} (on this host: the run's contracts name this agent; install it here, on the PATH agents get)"
        )),
        e => e,
    })?;
    if crate::cli::plan::agents_run_as_root(&req.config) {
        eprintln!("warning: {}", crate::report::AGENTS_AS_ROOT_NOTE);
    }
    let cancel = CancellationToken::new();
    let _signals = spawn_signal_handler(cancel.clone());
    let jobs = req.config.jobs;
    let resolved = Resolved {
        req,
        held,
        github,
        remote_urls,
        env,
    };
    let night = resolved.into_night(cancel);
    eprintln!(
        "worker: joined run {} ({} item(s), deadline {}) with {jobs} worker(s)",
        run.id,
        night.plan.entries.len(),
        night
            .deadline
            .with_timezone(&night.tz)
            .format("%Y-%m-%d %H:%M %Z")
    );
    let ran = run::join(night.clone(), run.id, &approved, jobs).await?;
    println!("worker: ended {ran} item(s) of run {}", run.id);
    if night.cancel.is_cancelled() {
        return Err(Error::RunEnded {
            status: crate::outcome::RunStatus::StoppedSignal,
            failed_items: 0,
        });
    }
    Ok(())
}

/// What `worker` joins: the request built from the run (its verified plan,
/// zone and deadline, this host's config with the contracts' agents), the
/// ledger and the hold on this host's checkouts, the run, and the contract
/// SHAs its approval covers.
struct Joined {
    req: Request,
    held: Held,
    run: rec::RunRow,
    approved: Vec<String>,
}

/// Finds the live run of this repository and checks it as docs/workers.md
/// says: this host's root rule, the plan's SHAs, the contracts' agents and
/// gates on this host, the run's signed approval.
///
/// # Errors
/// As [`worker`].
async fn join_live_run(cli: &Cli, jobs: Option<u32>) -> Result<Joined> {
    let repo = crate::cli::repo_root(cli)?;
    let loaded = crate::cli::load_config(cli, &repo)?;
    // This host's own rule for agents as root holds (docs/security.md).
    if let Some(why) = crate::cli::plan::agents_as_root_refusal(&loaded.config, &loaded.path) {
        return Err(Error::config(why));
    }
    let mut config = loaded.config.clone();
    if let Some(jobs) = jobs {
        config.jobs = checked_jobs(jobs, false)?;
    }
    ledger_mod::size_pool_for(config.jobs);
    let ledger = ledger().await?;
    let repo_id = repo_id(&repo, &config.remote);
    let run = live_run(&ledger, &repo_id, &repo).await?;
    let pool = &ledger.pool;
    let stored = rec::plan_stored(pool, &run.plan_sha).await?;
    let plan = plan::plan_from_ledger(&run.plan_sha, &stored).map_err(Error::refused)?;
    adopt_contract_agents(&mut config, &plan)?;
    check_gates_runnable(&plan)?;
    // Only contracts the run's signed approval covers run here.
    let approved = run_approval(pool, &run, &stored).await?;
    let req = Request {
        repo: repo.clone(),
        loaded,
        config,
        plan,
        selection: Selection::All,
        approve: None,
        tz: run.zone(),
        deadline: run.deadline.unwrap_or_else(Utc::now),
        now: Utc::now(),
        scheduled: false,
    };
    let held = Held {
        ledger,
        repo_id,
        lock: None,
        slots_lock: lock_checkouts(&repo)?,
    };
    Ok(Joined {
        req,
        held,
        run,
        approved,
    })
}

/// The repository's run a `drain` is running now: the newest `running` run
/// while another process holds the repository's lock.
///
/// # Errors
/// Refused (exit 3), saying how to start one, when there is none.
async fn live_run(ledger: &ledger_mod::Ledger, repo_id: &str, repo: &Path) -> Result<rec::RunRow> {
    let none = || {
        Error::refused(format!(
            "no run of {} is live: start one with `nightshift drain` on the host that approved the plan, then start `nightshift worker` again",
            repo.display()
        ))
    };
    let run = rec::running_run(&ledger.pool, repo_id)
        .await?
        .ok_or_else(none)?;
    let me = ledger_mod::HolderInfo::current();
    match ledger.try_lock_repo(repo_id, &me).await {
        // Nobody holds the lock: the run's drain is gone (it is resumed
        // by the next drain). The lock is released when the guard drops.
        Ok(ledger_mod::RepoLockAttempt::Acquired(_)) => Err(none()),
        // The lock's holder must be the drain that opened this run.
        Ok(ledger_mod::RepoLockAttempt::Held { holder: Some(h) })
            if run.host.as_deref().is_some_and(|rh| rh != h.host)
                || run.pid.is_some_and(|rp| rp != h.pid as i32) =>
        {
            Err(none())
        }
        Ok(ledger_mod::RepoLockAttempt::Held { .. }) => Ok(run),
        Err(e) => Err(Error::failed(format!("ledger: {e}"))),
    }
}

/// The contracts of `stored` (the run's plan) that the run's approval
/// covers, checked as `drain` checks an approval (docs/workers.md): the
/// approval row exists, carries a valid signature by this host's copy of
/// the approval key, and names a plan whose stored contracts hash to it (or
/// one contract). A run or plan rewritten in the ledger runs nothing.
///
/// # Errors
/// Refused (exit 3) saying what failed and, for the key, how to copy it;
/// database errors.
async fn run_approval(
    pool: &sqlx::PgPool,
    run: &rec::RunRow,
    stored: &[(String, Option<serde_json::Value>)],
) -> Result<Vec<String>> {
    install_approval_key()?;
    let refuse = |why: String| Error::refused(format!("run {}: {why}; nothing was run", run.id));
    let id = run
        .approval_id
        .ok_or_else(|| refuse("it has no approval".into()))?;
    let a = approval::by_id(pool, id)
        .await?
        .ok_or_else(|| refuse("its approval is not in the ledger".into()))?;
    let key = approval::key_path(&crate::cli::data_dir());
    approval::check_signed(&a).map_err(|e| {
        refuse(format!(
            "{e}. A worker checks the run's approval with the approving host's key: copy its {} to {} (mode 0600)",
            approval::KEY_FILE,
            key.display()
        ))
    })?;
    let covered = match (&a.plan_sha, &a.contract_sha) {
        (Some(plan), _) => {
            let shas = rec::plan_contracts(pool, plan).await?;
            if Plan::sha_of(shas.iter().map(String::as_str)) != *plan {
                return Err(refuse(format!(
                    "the contracts of its approved plan {plan} in the ledger do not hash to it"
                )));
            }
            shas
        }
        (None, Some(contract)) => vec![contract.clone()],
        (None, None) => return Err(refuse("its approval names no plan or contract".into())),
    };
    Ok(stored
        .iter()
        .map(|(sha, _)| sha.clone())
        .filter(|sha| covered.contains(sha))
        .collect())
}

/// A worker runs the agents the run's contracts were sealed with, not the
/// ones its own config names (only `account` stays this host's).
///
/// # Errors
/// Exit 2 when a contract names an agent kind this build does not know.
fn adopt_contract_agents(config: &mut Config, plan: &Plan) -> Result<()> {
    let Some(first) = plan.entries.first() else {
        return Ok(());
    };
    let c = &first.contract;
    if let Some(e) = plan
        .entries
        .iter()
        .find(|e| e.contract.writer != c.writer || e.contract.reviewer != c.reviewer)
    {
        return Err(Error::refused(format!(
            "the run's contracts name different agents (item {:?} differs from item {:?}); a worker runs one pair",
            e.item.title, first.item.title
        )));
    }
    for (agent, spec) in [
        (&mut config.writer, &c.writer),
        (&mut config.reviewer, &c.reviewer),
    ] {
        agent.kind = serde_json::from_value(serde_json::Value::from(spec.kind.as_str())).map_err(|_| {
            Error::config(format!(
                "the run's contracts name the agent kind {:?}, which this nightshift does not know; install the same nightshift version on every host",
                spec.kind
            ))
        })?;
        agent.command = spec.command.clone();
        agent.permission_flags = spec.permission_flags.clone();
        agent.model = spec.model.clone();
    }
    Ok(())
}

/// Every gate and setup command of the run's contracts must be able to
/// start here: its program (the first word) is a shell builtin, a path
/// that exists in this clone, or a name on `PATH`.
///
/// # Errors
/// Exit 2 naming the command and the item.
fn check_gates_runnable(plan: &Plan) -> Result<()> {
    for e in &plan.entries {
        let c = &e.contract;
        for command in c.verify.iter().chain(&c.setup) {
            if let Some(program) = missing_program(command) {
                return Err(Error::config(format!(
                    "item {:?}: the command `{command}` of its contract cannot run on this host ({program} is not found); install it, or run this worker where it is",
                    e.item.title
                )));
            }
        }
    }
    Ok(())
}

/// The program `command` starts, when it cannot be found on this host.
fn missing_program(command: &str) -> Option<String> {
    const BUILTINS: &[&str] = &[
        "cd", "true", "false", "test", "[", "echo", "export", "exit", "set", ":", ".", "exec",
        "printf", "if", "for", "while", "!", "{", "(", "source", "command", "env",
    ];
    let program = command
        .split_whitespace()
        .find(|w| !w.contains('='))?
        .trim_start_matches('(');
    if program.is_empty() || BUILTINS.contains(&program) {
        return None;
    }
    if program.contains('/') {
        return None;
    }
    which::which_global(program)
        .is_err()
        .then(|| program.to_string())
}
