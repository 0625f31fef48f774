//! `nightshift drain` and `nightshift run [ITEM]` (docs/commands.md, docs/contract.md, docs/limits.md, docs/ledger.md).
//!
//! Resolves everything a run needs — snapshot, ledger, lock, approval (or the
//! crashed run to resume), zone and deadline, GitHub, the agents' scrubbed
//! environment, signal handling — then hands over to [`crate::run::drain`]
//! and prints the report.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, RunArgs, Startup, install_approval_key, location, progress};
use crate::contract;
use crate::error::{Error, Result};
use crate::plan::{self, Plan};
use crate::run::{self, Night, Selection};
use crate::settings::{
    self, Approved, Environments, Flags, GitHub, Held, Joined, Request, Resolved,
};

/// `drain` (item = None) or `run [ITEM]` (item = Some).
pub(crate) async fn drain(
    cli: &Cli,
    args: &RunArgs,
    item: Option<Option<String>>,
    startup: &Startup,
) -> Result<()> {
    drain_with(cli, args, item, startup, None, None).await
}

/// `drain [--serve [ADDR]]`: with `--serve`, the board is served on its own
/// task and pool while the drain runs (docs/serve.md).
pub(crate) async fn drain_serving(
    cli: &Cli,
    args: &RunArgs,
    serve: Option<&str>,
    startup: &Startup,
) -> Result<()> {
    drain_with(cli, args, None, startup, None, serve).await
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
    drain_with(cli, args, None, startup, Some(stop), None).await
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
    serve: Option<&str>,
) -> Result<()> {
    let flags = Flags {
        location: location(cli),
        approve: args.approve.clone(),
        deadline: args.deadline.clone(),
        tz: args.tz.clone(),
        jobs: args.jobs,
        item,
        scheduled: schedule_stop.is_some(),
    };
    let mut req = Request::resolve(&flags)?;
    let held = Held::take(&req).await?;
    let _board = super::serve::beside(cli, serve).await?;
    req.reclock()?;
    // `run '#N'` names a PR: its card, as it is now, is what is approved.
    if let Selection::Pr(n) = req.selection {
        req.plan = settings::with_tend_cards(&req, &held, startup).await?;
        if let Some(why) = no_card_to_tend(&req.plan, n) {
            println!(
                "PR #{n} will not be tended: {why}\nnothing was run, and no approval was asked for or used"
            );
            return Ok(());
        }
    }
    let isolation = settings::build_output(&req)?;
    let github = GitHub::resolve(&req, startup);
    // `run ITEM` on an item that will not run says so before an approval
    // is asked for, and uses none (docs/commands.md).
    if let Some(note) = item_will_not_run(&req, &held, &github).await? {
        println!("{note}");
        return Ok(());
    }
    // Approvals are verified with the data directory's key (docs/contract.md).
    install_approval_key()?;
    let approved = match settings::approve(&req, &held).await? {
        Ok(approved) => approved,
        Err(refusal) => {
            show_refusal(&req, &held).await?;
            settings::record_refusal(&req, &held, &refusal.to_string()).await?;
            return Err(refusal.into());
        }
    };
    // Yesterday's PRs, looked at again now that an approval is in hand (a
    // refused run asks GitHub nothing): the approved set covers the cards
    // as they are tonight (docs/github.md "The second night").
    if matches!(req.selection, Selection::All) {
        req.plan = settings::with_tend_cards(&req, &held, startup).await?;
    }
    let remote_urls = settings::check_remote(&req, &github)?;
    let env = Environments::resolve(&req, startup, &github, isolation)?;
    print_isolation(&env, &req);
    settings::preflight_agents(&req, &held, &env).await?;
    if settings::agents_run_as_root(&req.config) {
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

/// For `run ITEM`: the line to print when the item would do nothing
/// ([`run::will_not_run`]); `None` for `drain` and for an item that will run.
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
    let why = run::will_not_run(&run::Preview {
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

/// Prints the cards a person must approve (on refusal), with the items
/// earlier runs settled marked.
///
/// # Errors
/// Database errors.
async fn show_refusal(req: &Request, held: &Held) -> Result<()> {
    let pool = held.pool();
    let mut shown = req.plan.clone();
    crate::views::mark_earlier_work(pool, &held.repo_id, &mut shown).await?;
    print_cards(&shown, &req.selection);
    // The cards of yesterday's PRs are not looked up for a refused run (it
    // asks GitHub nothing): say where they are.
    if crate::views::has_open_prs(pool, &held.repo_id).await? {
        println!(
            "(nightshift has open PRs: `nightshift plan` looks at them on GitHub and lists those to tend in the plan to approve)"
        );
    }
    Ok(())
}

/// The run's header line on build output, when it has one.
fn print_isolation(env: &Environments, req: &Request) {
    if let Some(header) = env.isolation_header(req) {
        eprintln!("{header}");
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
    let view = run::ended(night, end.run_id).await?;
    let section = crate::tend::report_section(&view.tended);
    if !cli.quiet {
        // After a hang-up there is no terminal left to print to: the run is
        // recorded, so a failed print is not worth a panic.
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = write!(
            out,
            "{}",
            crate::report::to_text_after_drain(
                &view.run,
                &view.items,
                view.slept,
                &view.sandbox_refused
            )
        );
        if !section.is_empty() {
            let _ = write!(out, "\n{}", crate::secret::redact_known(&section));
        }
        let foreign = crate::report::foreign_refs_section(&view.foreign_refs);
        if !foreign.is_empty() {
            let _ = write!(out, "\n{foreign}");
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
    } = settings::join_live_run(&location(cli), jobs).await?;
    let isolation = settings::build_output(&req)?;
    let github = GitHub::resolve(&req, startup);
    let remote_urls = settings::check_remote(&req, &github)?;
    let env = Environments::resolve(&req, startup, &github, isolation)?;
    print_isolation(&env, &req);
    // The agents are the contracts', not this host's config: say so.
    settings::preflight_agents(&req, &held, &env).await.map_err(|e| match e {
        Error::Config { problem } => Error::config(format!(
            "{problem} (on this host: the run's contracts name this agent; install it here, on the PATH agents get)"
        )),
        e => e,
    })?;
    if settings::agents_run_as_root(&req.config) {
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
    run::join(night.clone(), run.id, &approved, jobs).await?;
    let mine = crate::views::items_of_this_process(&night.pool, run.id).await?;
    print!(
        "{}",
        crate::secret::redact_known(&crate::report::worker_summary(run.id, &mine))
    );
    // The exit code follows `drain`'s rules (docs/commands.md#exit-codes),
    // for the items this process ended.
    let status = if night.cancel.is_cancelled() {
        crate::outcome::RunStatus::StoppedSignal
    } else {
        crate::outcome::RunStatus::Completed
    };
    let failed = mine
        .iter()
        .filter(|i| i.outcome.is_some_and(crate::outcome::Outcome::fails_run))
        .count();
    Error::of_run(status, failed)
}
