//! `nightshift drain` and `nightshift run [ITEM]` (docs/commands.md, docs/contract.md, docs/limits.md, docs/ledger.md).
//!
//! Resolves everything a run needs — snapshot, ledger, lock, approval (or the
//! crashed run to resume), zone and deadline, GitHub, the agents' scrubbed
//! environment, signal handling — then hands over to [`crate::run::drain`]
//! and prints the report.

use std::sync::Arc;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use crate::cli::plan::snapshot;
use crate::cli::{Cli, RunArgs, Startup, ledger, progress, repo_id};
use crate::contract::{self, Plan};
use crate::error::{Error, Result};
use crate::ledger::records as rec;
use crate::outcome::PrRecord;
use crate::run::{self, Night, Selection};
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
async fn drain_with(
    cli: &Cli,
    args: &RunArgs,
    item: Option<Option<String>>,
    startup: &Startup,
    schedule_stop: Option<&CancellationToken>,
) -> Result<()> {
    let scheduled = schedule_stop.is_some();
    if let Some(sha) = &args.approve {
        let ok = sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit());
        if !ok {
            return Err(Error::argument(format!(
                "--approve {sha:?} is not a SHA-256 (64 hex characters); give the plan SHA `nightshift plan` printed"
            )));
        }
    }
    let snap = snapshot(cli)?;
    let mut plan = snap.plan.clone();
    let config = snap.loaded.config.clone();
    // Before anything is consumed or started (docs/security.md).
    if let Some(why) = crate::cli::plan::agents_as_root_refusal(&config, &snap.loaded.path) {
        return Err(Error::config(why));
    }
    let selection = match &item {
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

    let lg = ledger().await?;
    let pool = lg.pool.clone();
    let id = repo_id(&snap.repo, &config.remote);
    rec::save_plan(&pool, &id, &plan).await?;
    // `run '#N'` names a PR: its card, as it is now, is what is approved.
    if let Selection::Pr(n) = selection {
        plan = with_tend_cards(&snap, &pool, &id, startup, plan).await?;
        if let Some(why) = no_card_to_tend(&plan, n) {
            println!(
                "PR #{n} will not be tended: {why}\nnothing was run, and no approval was asked for or used"
            );
            return Ok(());
        }
    }

    // One drain per repository (docs/ledger.md).
    let holder = ledger_mod::HolderInfo::current();
    let lock = match lg
        .try_lock_repo(&id, &holder)
        .await
        .map_err(|e| Error::Ledger {
            detail: e.to_string(),
            outage: false,
            source: None,
        })? {
        ledger_mod::RepoLockAttempt::Acquired(guard) => guard,
        ledger_mod::RepoLockAttempt::Held { holder } => {
            let who = holder
                .map(|h| h.to_string())
                .unwrap_or_else(|| "another process".into());
            return Err(Error::refused(format!(
                "another nightshift run holds the lock of {} ({who}); wait for it to finish or stop it",
                snap.repo.display()
            )));
        }
    };
    // The checkouts too, whatever database another drain uses.
    let slots_lock = match crate::slot::lock_slots(&crate::cli::data_dir(), &snap.repo) {
        Ok(Ok(l)) => l,
        Ok(Err(pid)) => {
            return Err(Error::refused(format!(
                "another nightshift run (pid {pid}) is using the checkouts of {} under {}, perhaps with another database; wait for it to finish or stop it",
                snap.repo.display(),
                crate::cli::data_dir().display()
            )));
        }
        Err(e) => {
            return Err(Error::failed(format!(
                "cannot lock the checkouts under {}: {e}",
                crate::cli::data_dir().display()
            )));
        }
    };
    // A data directory that is already full or read-only would stop the run
    // at its first item: say so before an approval is used.
    if let Err(why) = slots_lock.check() {
        return Err(Error::failed(format!(
            "{why}; nothing was run and the approval is still unused"
        )));
    }
    let crashed = rec::mark_dead_runs_crashed(&pool, &id).await?;
    for r in &crashed {
        eprintln!(
            "note: run {} (pid {}) ended without finishing; marked crashed",
            r.id,
            r.pid.unwrap_or(0)
        );
    }

    // GitHub (docs/github.md#token): token from the variables main removed, else `gh`.
    let remote_url = crate::git::Git::new(&snap.repo)
        .text(&["remote", "get-url", &config.remote])
        .ok()
        .map(|s| s.trim().to_string());
    let token = forge::resolve_token(&startup.removed);
    let (forge, forge_missing) = match &token {
        Some((t, _)) => match crate::cli::github_client(&snap.repo, &config, t, Some(deadline)) {
            Ok(f) => (Some(f), None),
            Err(why) => (None, Some(why)),
        },
        None => (
            None,
            Some(crate::cli::no_token(&config, remote_url.as_deref()).to_string()),
        ),
    };
    // `run ITEM` on an item that will not run says so before an approval
    // is asked for, and uses none (docs/commands.md).
    if let Selection::One(i) = selection
        && let Some(entry) = plan.entries.iter().find(|e| e.index == i)
        && let Some(why) = will_not_run(&WontRun {
            pool: &pool,
            repo_id: &id,
            entry,
            forge: forge.as_ref(),
            config: &config,
            repo: &snap.repo,
            remote_url: remote_url.as_deref(),
            token: token.as_ref().map(|(t, _)| t.expose()),
        })
        .await?
    {
        println!(
            "item {i} ({}) will not run: {why}\nnothing was run, and no approval was asked for or used",
            entry.item.title
        );
        return Ok(());
    }
    // Approvals are verified with the data directory's key (docs/contract.md).
    install_approval_key()?;
    // Resume a crashed run under its own approval while it is valid (docs/contract.md#approval),
    // else find a fresh approval.
    let mut resume = None;
    let mut chosen = None;
    if args.approve.is_none()
        && matches!(selection, Selection::All)
        && let Some((r, a, shas)) = crashed_run_to_resume(&pool, &id, &plan, now).await?
    {
        let how = if r.status == crate::outcome::RunStatus::StoppedSignal {
            "stopped"
        } else {
            "crashed"
        };
        eprintln!(
            "resuming {how} run {} under its approval (given {})",
            r.id,
            a.created_at.with_timezone(&tz).format("%H:%M %Z")
        );
        chosen = Some((a, shas));
        resume = Some(r);
    }
    if chosen.is_none()
        && let Selection::Pr(n) = selection
    {
        chosen = card_approval(&pool, &id, &plan, n, args.approve.as_deref(), now).await?;
    }
    let (approval, approved) = match chosen {
        Some(c) => c,
        None => {
            match crate::approval::find(
                &pool,
                &id,
                &plan,
                selection.item(),
                args.approve.as_deref(),
                now,
            )
            .await?
            {
                Ok(c) => c,
                Err(refusal) => {
                    let mut shown = plan.clone();
                    crate::cli::plan::mark_earlier_work(&pool, &id, &mut shown).await?;
                    print_cards(&shown, &selection);
                    // The cards of yesterday's PRs are not looked up for a
                    // refused run (it asks GitHub nothing): say where they are.
                    if !rec::open_prs(&pool, &id).await?.is_empty() {
                        println!(
                            "(nightshift has open PRs: `nightshift plan` looks at them on GitHub and lists those to tend in the plan to approve)"
                        );
                    }
                    rec::event(
                        &pool,
                        None,
                        "refused",
                        serde_json::json!({"reason": refusal.to_string(), "plan_sha": plan.sha}),
                    )
                    .await?;
                    if scheduled {
                        rec::event(&pool, None, crate::outcome::Outcome::NotApproved.as_str(), serde_json::json!({"reason": refusal.to_string(), "plan_sha": plan.sha, "by": "schedule"})).await?;
                    }
                    return Err(refusal.into());
                }
            }
        }
    };

    // Yesterday's PRs, looked at again now that an approval is in hand (a
    // refused run asks GitHub nothing): the approved set covers the cards
    // as they are tonight (docs/github.md "The second night").
    if matches!(selection, Selection::All) {
        plan = with_tend_cards(&snap, &pool, &id, startup, plan).await?;
    }

    // nightshift keeps such a password out of argv, the checkouts and its
    // records, but the user's own .git/config holds it, and agents running
    // as this user can read that file (the checkout's alternates name it).
    if remote_url
        .as_deref()
        .and_then(crate::secret::url_password)
        .is_some()
    {
        eprintln!(
            "warning: the URL of the remote {:?} carries a password or token; agents running as you can read it in {}/.git/config. Give git the token through a credential helper or GITHUB_TOKEN instead",
            config.remote,
            snap.repo.display()
        );
    }
    if remote_url.is_none() {
        return Err(Error::config(format!(
            "{}: the remote {:?} does not exist; add it (`git remote add {} URL`) or set `remote` in the config",
            snap.repo.display(),
            config.remote,
            config.remote
        )));
    }
    // Read once, like the backlog: the whole run fetches and pushes here.
    let remote_urls = crate::git::remote_urls(&snap.repo, &config.remote)
        .map_err(|e| Error::config(format!("{}: {e}", snap.repo.display())))?;
    // Every item starts from <remote>/<base>: a missing base would fail each
    // item in turn. Checked before the approval is consumed; a remote that
    // cannot be reached now is left to the items (it may come back).
    let probe = crate::git::Git::new(&snap.repo)
        .token(token.as_ref().map(|(t, _)| t.expose()))
        .timeout(std::time::Duration::from_secs(60))
        .text(&[
            "ls-remote",
            "--heads",
            "--",
            remote_url.as_deref().unwrap_or_default(),
            &format!("refs/heads/{}", config.base),
        ]);
    match probe {
        Ok(out) if out.trim().is_empty() => {
            return Err(Error::config(format!(
                "the base branch {:?} does not exist on the remote {:?}; push it or set `base` in the config",
                config.base, config.remote
            )));
        }
        Ok(_) => {}
        Err(e) => eprintln!(
            "warning: cannot reach the remote to check the base branch: {}",
            crate::secret::redact_known(&e.to_string())
        ),
    }

    // `main` wipes the config's `secrets` from our own environment, finding
    // the config before it is loaded; one it missed is still readable by
    // agents in /proc/<nightshift>/environ (though not in theirs).
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
    // The agents' environment: no tokens, no ledger URL, no configured secrets.
    let source = ledger_mod::db_source_from_env();
    let mut agent_env = crate::cli::agents_environment(&config);
    let mut gate_env = agent_env.clone();
    for v in &config.gate_env {
        // Never passed on, whatever the config says: say so rather than
        // leave a gate wondering why the variable is empty.
        let ledger_var = source.env_var() == Some(v.as_str());
        // PGPASSWORD is the ledger's when its URL has no password of its own.
        let ledger_password = v == "PGPASSWORD"
            && matches!(&source, ledger_mod::DbSource::Url { url, .. } if crate::secret::url_password(url.expose()).is_none());
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
    let mut secrets: Vec<String> = startup
        .removed
        .iter()
        .filter(|(n, s)| n != "PGPASSWORD" || !crate::secret::is_weak_password(s.expose()))
        .map(|(_, s)| s.expose().to_string())
        .collect();
    if let Some((t, _)) = &token {
        secrets.push(t.expose().to_string());
    }
    for v in &config.secrets {
        if let Ok(val) = std::env::var(v) {
            secrets.push(val);
        }
    }
    if let ledger_mod::DbSource::Url { url, .. } = &source {
        secrets.push(url.expose().to_string());
        secrets.extend(crate::secret::url_password_forms(url.expose()));
    }
    crate::secret::remember(&secrets);
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
    if let Some(u) = &run_as {
        // claude and codex keep their login and settings under HOME.
        if !u.home.is_dir() {
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
    }
    let data_dir = crate::cli::data_dir();
    if run_as.is_some() {
        // The checkout's top directory and .git stay the runner's (see
        // `run::grant_checkout`); the agent's own git must trust it.
        let slot = crate::slot::slot_path(&data_dir, &snap.repo, 0);
        trust_directory(&mut agent_env, &slot);
        trust_directory(&mut gate_env, &slot);
    }

    // Before the approval is consumed: a missing agent CLI is a usage error.
    for (role, a) in [
        (crate::agent::Role::Writer, &config.writer),
        (crate::agent::Role::Reviewer, &config.reviewer),
    ] {
        if let Err(why) =
            crate::agent::preflight(role, a, agent_env.get("PATH").map(String::as_str))
        {
            rec::event(
                &pool,
                None,
                "refused",
                serde_json::json!({"reason": why, "plan_sha": plan.sha}),
            )
            .await?;
            return Err(Error::config(why));
        }
    }
    if crate::cli::plan::agents_run_as_root(&config) {
        eprintln!("warning: {}", crate::report::AGENTS_AS_ROOT_NOTE);
    }
    let cancel = schedule_stop
        .map(CancellationToken::child_token)
        .unwrap_or_default();
    let _signals = spawn_signal_handler(cancel.clone());
    let night = Night {
        repo: snap.repo.clone(),
        repo_id: id.clone(),
        config,
        plan,
        pool: pool.clone(),
        tz,
        deadline,
        data_dir,
        forge,
        forge_missing,
        forge_down: std::sync::Mutex::new(None),
        token: token.map(|(t, _)| t),
        agent_env,
        gate_env,
        secrets,
        run_as,
        cancel,
        clock: Arc::new(schedule::SystemClock),
        pushed: Default::default(),
        remote_down: Default::default(),
        remote_urls,
        ledger: lg.clone(),
        db_source: source.clone(),
        lock: tokio::sync::Mutex::new(Some(lock)),
        slots_lock: Some(slots_lock),
        systemic: Default::default(),
        base_pin: Default::default(),
    };
    let watched: Vec<progress::Entry> = match &selection {
        Selection::All => night
            .plan
            .entries
            .iter()
            .map(|e| progress::Entry {
                key: e.item.key.clone(),
                title: e.item.title.clone(),
            })
            .collect(),
        Selection::One(i) => night
            .plan
            .entries
            .iter()
            .filter(|e| e.index == *i)
            .map(|e| progress::Entry {
                key: e.item.key.clone(),
                title: e.item.title.clone(),
            })
            .collect(),
        Selection::Pr(_) => vec![],
    };
    let watch = progress::watch(
        pool.clone(),
        id.clone(),
        watched,
        tz,
        progress::Mode::detect(cli.quiet),
    );
    let end = run::drain(&night, selection, &approval, &approved, resume.as_ref()).await;
    watch.stop().await;
    let end = end?;
    tracing::info!(run = %end.run_id, status = %end.status, "run finished");
    let run_row = rec::run_row(&pool, &id, Some(end.run_id))
        .await?
        .ok_or_else(|| Error::failed("the run vanished from the ledger"))?;
    let items = rec::run_items(&pool, end.run_id).await?;
    let slept = rec::slept_seconds(&pool, end.run_id).await?;
    crate::cli::notify::run_ended(&night, &run_row, &items, slept).await;
    let tended = rec::tended_items(&pool, end.run_id).await?;
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
        let next = match item {
            None => {
                "Once that is fixed, `nightshift drain` resumes this run under its approval (within 24 h of it)"
            }
            Some(_) => {
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
    let Some(a) = rec::approval_by_id(pool, aid).await? else {
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
    crate::git::Git::new(w.repo)
        .token(w.token)
        .timeout(std::time::Duration::from_secs(60))
        .text(&[
            "ls-remote",
            "--heads",
            "--",
            url,
            &format!("refs/heads/{branch}"),
        ])
        .is_ok_and(|out| !out.trim().is_empty())
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
async fn with_tend_cards(
    snap: &crate::cli::plan::Snapshot,
    pool: &sqlx::PgPool,
    id: &str,
    startup: &Startup,
    plan: Plan,
) -> Result<Plan> {
    let cards = crate::cli::plan::tend_cards(snap, pool, id, startup).await?;
    if cards.is_empty() {
        return Ok(plan);
    }
    let plan = plan.with_tend(cards);
    rec::save_plan(pool, id, &plan).await?;
    rec::save_tend_cards(pool, &plan.sha, plan.entries.len(), &plan.tend).await?;
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
    let list = rec::approvals_of(pool, repo, &sha).await?;
    Ok(list
        .into_iter()
        .find(|a| {
            a.contract_sha.as_deref() == Some(sha.as_str())
                && approval::check_usable(a, now).is_ok()
        })
        .map(|a| (a, vec![sha])))
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
            print!("{}", contract::render_plan(plan));
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

/// Reads the approval key of the data directory and installs it for the
/// approval checks ([`approval::install_key`]); no key means no approval
/// verifies (approve again).
///
/// # Errors
/// Exit 2 when the key file is unreadable, malformed or open to others.
pub(crate) fn install_approval_key() -> Result<()> {
    let data_dir = crate::cli::data_dir();
    let key = approval::load_key(&data_dir).map_err(|e| Error::config(e.to_string()))?;
    approval::install_key(key, approval::key_path(&data_dir));
    Ok(())
}
