//! `nightshift report` and `nightshift status` (docs/commands.md): read from the
//! ledger only; they never start work.

use chrono::Utc;
use uuid::Uuid;

use crate::cli::{Cli, ledger, repo_root};
use crate::error::{Error, Result};
use crate::ledger::records as rec;
use crate::outcome::{Phase, RunKind, RunStatus};

/// How `report` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReportFormat {
    /// The terminal table.
    Text,
    /// docs/commands.md#json-output (plus totals).
    Json,
    /// Markdown for pasting.
    Markdown,
}

/// `nightshift report [--run ID] [--json | --markdown] [--show-body]`.
pub(crate) async fn report(
    cli: &Cli,
    run: Option<&str>,
    format: ReportFormat,
    show_body: bool,
) -> Result<()> {
    let (repo, lg, row) = chosen_run(cli, run).await?;
    let Some(row) = row else {
        if let Some(r) = run {
            return Err(Error::argument(format!(
                "no run {r} in the ledger of {}",
                repo.display()
            )));
        }
        // Nothing has run yet: not an error, just nothing to report.
        match format {
            ReportFormat::Json => println!("null"),
            _ => println!(
                "no run of {} yet; `nightshift drain` makes one",
                repo.display()
            ),
        }
        return Ok(());
    };
    let items = rec::run_items(&lg.pool, row.id).await?;
    let slept = rec::slept_seconds(&lg.pool, row.id).await?;
    let not_started = not_started(&lg.pool, &row, &items).await?;
    let now = Utc::now();
    // Yesterday's PRs this run tended (docs/github.md "The second night").
    let tended = crate::tend::tended_items(&lg.pool, row.id).await?;
    match format {
        ReportFormat::Json => {
            let totals = crate::report::totals(&row, &items, slept, now);
            let mut v = crate::report::to_json_with(&row, &items, Some(&totals));
            v["not_started"] = not_started.iter().map(|(index, title, sha)| serde_json::json!({"index": index, "title": title, "contract_sha": sha})).collect();
            v["tended"] = tended.iter().map(crate::tend::Tended::to_json).collect();
            println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
        }
        ReportFormat::Markdown => {
            print!(
                "{}",
                crate::report::to_markdown(&row, &items, slept, show_body, now)
            );
            let section = crate::tend::report_section(&tended);
            if !section.is_empty() {
                println!("\n```text\n{}```", section.replace("```", "'''"));
            }
            if !not_started.is_empty() {
                println!(
                    "\n**Not started** (the run stopped before them): {}",
                    not_started
                        .iter()
                        .map(|(i, t, _)| format!("{i}. {t}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                );
            }
        }
        ReportFormat::Text => {
            print!(
                "{}",
                crate::report::to_text_at(&row, &items, slept, show_body, now)
            );
            let section = crate::tend::report_section(&tended);
            if !section.is_empty() {
                print!("\n{}", crate::secret::redact_known(&section));
            }
            print_text_tail(&row, &not_started);
        }
    }
    Ok(())
}

/// The repository, the ledger and the run `--run` names (a full id or a
/// prefix), else the newest; `None` when the repository has no run yet.
///
/// # Errors
/// An unknown or ambiguous `--run` (exit 2); the ledger.
async fn chosen_run(
    cli: &Cli,
    run: Option<&str>,
) -> Result<(
    std::path::PathBuf,
    crate::ledger::Ledger,
    Option<rec::RunRow>,
)> {
    let repo = repo_root(cli)?;
    let id = crate::cli::repo_identity(cli, &repo);
    let lg = ledger().await?;
    let run_id = match run {
        Some(r) => Some(resolve_run_id(&lg.pool, &id, r).await?),
        None => None,
    };
    let row = rec::run_row(&lg.pool, &id, run_id).await?;
    Ok((repo, lg, row))
}

/// The plan items a drain stopped by a signal or a crash never reached
/// (index, title, contract SHA); none for other runs: the deadline records
/// them itself, as `deadline` items.
///
/// # Errors
/// Database errors.
async fn not_started(
    pool: &sqlx::PgPool,
    row: &rec::RunRow,
    items: &[rec::ItemRow],
) -> Result<Vec<(i32, String, String)>> {
    Ok(match (row.kind, row.status) {
        (RunKind::Drain, RunStatus::StoppedSignal | RunStatus::Crashed) => {
            rec::plan_items_after(
                pool,
                &row.plan_sha,
                items.iter().map(|i| i.item_index).max().unwrap_or(0),
            )
            .await?
        }
        _ => Vec::new(),
    })
}

/// What the terminal report adds after its table: the items not started,
/// and where the rounds' own words are (prompts, agent outputs, gate logs).
fn print_text_tail(row: &rec::RunRow, not_started: &[(i32, String, String)]) {
    if !not_started.is_empty() {
        println!("not started (the run stopped before them):");
        for (index, title, _) in not_started {
            println!("  {index:>3}  {title}");
        }
    }
    let logs = crate::cli::data_dir().join("logs").join(row.id.to_string());
    if logs.is_dir() {
        println!(
            "each round's prompt, agent output and gate log: {}",
            logs.display()
        );
    }
}

/// `nightshift report --html [FILE]`: the run as one self-contained page
/// (see [`crate::timeline`]). No `FILE`: `.nightshift/reports/<run id>.html`
/// in the repository; `-`: standard output. Prints the path written.
///
/// # Errors
/// No run, an unknown run id (exit 2), the ledger, or the file not writable.
pub(crate) async fn html(
    cli: &Cli,
    run: Option<&str>,
    file: Option<&std::path::Path>,
) -> Result<()> {
    let (repo, lg, row) = chosen_run(cli, run).await?;
    let Some(row) = row else {
        return Err(Error::argument(format!(
            "no run of {} yet to draw; `nightshift drain` makes one",
            repo.display()
        )));
    };
    let Some(timeline) = crate::timeline::Timeline::load(&lg.pool, row.id).await? else {
        return Err(Error::argument(format!("no run {} in the ledger", row.id)));
    };
    let page = crate::secret::redact_known(&timeline.to_html());
    let path = match file {
        Some(f) if f.as_os_str() == "-" => {
            print!("{page}");
            return Ok(());
        }
        Some(f) => f.to_path_buf(),
        None => crate::report::page_path(&repo, row.id),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(&path, page)
        .map_err(|e| Error::failed(format!("cannot write {}: {e}", path.display())))?;
    println!("{}", path.display());
    Ok(())
}

/// `nightshift report --history [--since 30d] [--json]`: what the nights in
/// the window are worth ([`crate::history`]). PRs last known open are asked
/// from GitHub first and what it says is remembered; without GitHub the
/// history says which fates it could not know.
///
/// # Errors
/// A `--since` that is not a duration (exit 2); the ledger.
pub(crate) async fn history(
    cli: &Cli,
    since: &str,
    json: bool,
    startup: &crate::cli::Startup,
) -> Result<()> {
    let window = crate::duration::parse(since).map_err(|e| {
        Error::argument(format!(
            "--since {since:?}: {e}; write a duration such as 30d, 2w or 12h"
        ))
    })?;
    let repo = repo_root(cli)?;
    let loaded = crate::cli::load_config(cli, &repo)?;
    let id = crate::cli::repo_identity(cli, &repo);
    let lg = ledger().await?;
    let unknown = refresh_fates(&lg.pool, &repo, &id, &loaded.config, startup).await?;
    let since =
        Utc::now() - chrono::Duration::from_std(window).unwrap_or(chrono::Duration::days(366));
    let recipes: Vec<String> = loaded
        .config
        .recipes
        .iter()
        .map(|r| r.prefix.clone())
        .collect();
    let mut h = crate::history::load(&lg.pool, &id, since, &recipes).await?;
    h.unknown = unknown;
    if json {
        println!("{}", serde_json::to_string_pretty(&h).expect("JSON"));
    } else {
        let tz = crate::schedule::resolve_zone(loaded.config.timezone.as_deref())
            .map(|(tz, _)| tz)
            .unwrap_or(chrono_tz::UTC);
        print!("{}", crate::secret::redact_known(&h.to_text(tz)));
    }
    Ok(())
}

/// Asks GitHub what became of every PR the ledger last knew open and
/// remembers it. Returns what could not be known, if anything.
async fn refresh_fates(
    pool: &sqlx::PgPool,
    repo: &std::path::Path,
    id: &str,
    config: &crate::config::Config,
    startup: &crate::cli::Startup,
) -> Result<Option<String>> {
    use crate::history::PrFate;
    let open = crate::history::unsettled(pool, id).await?;
    if open.is_empty() {
        return Ok(None);
    }
    let Some((token, _)) = crate::forge::resolve_token(&startup.removed) else {
        let why = crate::cli::no_token_in(repo, config);
        return Ok(Some(format!(
            "what became of {} PR(s) last known open (counted open): {why}",
            open.len()
        )));
    };
    let forge = crate::cli::github_client(repo, config, &token, None).map_err(Error::config)?;
    for (key, branch, number) in &open {
        match forge.pr_fate(*number as u64).await {
            Ok(f) => {
                let fate = match f.state {
                    crate::forge::PrState::Open => PrFate::Open,
                    crate::forge::PrState::Merged => {
                        PrFate::Merged(f.merged_at.unwrap_or_else(Utc::now))
                    }
                    crate::forge::PrState::Closed => PrFate::Closed(f.closed_at),
                };
                crate::history::remember(pool, id, key, branch, fate).await?;
            }
            Err(e) => {
                return Ok(Some(format!(
                    "GitHub did not answer for PR #{number} ({e}); PR states are as last known"
                )));
            }
        }
    }
    Ok(None)
}

/// `nightshift status [--json]`.
pub(crate) async fn status(cli: &Cli, json: bool) -> Result<()> {
    let repo = repo_root(cli)?;
    let id = crate::cli::repo_identity(cli, &repo);
    let lg = ledger().await?;
    let row = rec::run_row(&lg.pool, &id, None).await?;
    let dead = row
        .as_ref()
        .filter(|r| r.status == RunStatus::Running && died_here(r));
    let running = row
        .as_ref()
        .filter(|r| r.status == RunStatus::Running && dead.is_none());
    let tz = running.map_or(chrono_tz::UTC, rec::RunRow::zone);
    let current_item = current_item(&lg.pool, running).await?;
    let (to_resume, key_lost) = match (running, dead) {
        (None, None) => run_to_resume(&lg.pool, &id, row.as_ref()).await?,
        _ => (None, false),
    };
    let workers = match running {
        Some(r) => crate::queue::live_workers(&lg.pool, r.id).await?,
        None => Vec::new(),
    };
    let st = Status {
        running,
        dead,
        to_resume,
        key_lost,
        current_item,
        tz,
        workers,
    };
    let text = st.text();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&st.json(text)).expect("JSON")
        );
    } else {
        println!("{text}");
    }
    Ok(())
}

/// What `status` found in the ledger about the newest run.
struct Status<'a> {
    /// The newest run, when it is marked running and not known dead.
    running: Option<&'a rec::RunRow>,
    /// The newest run, when it is marked running but its process died here.
    dead: Option<&'a rec::RunRow>,
    /// The stopped run the next drain resumes (or would, but for `key_lost`).
    to_resume: Option<rec::RunRow>,
    /// That run's approval can no longer be verified: the key was lost.
    key_lost: bool,
    /// The running item as `plan` and `report` name it, `-` for none.
    current_item: String,
    /// The running run's zone (UTC otherwise).
    tz: chrono_tz::Tz,
    /// The run's live workers, on every host (docs/workers.md).
    workers: Vec<crate::queue::WorkerRow>,
}

impl Status<'_> {
    /// What `status` prints: the run's line, then, when more than one
    /// worker runs it, one line per live worker (host, pid, item, round,
    /// phase, lease expiry).
    fn text(&self) -> String {
        let Some(r) = self.running else {
            return self.idle_text();
        };
        let mut out = self.run_line(r);
        if self.workers.len() > 1 {
            for w in &self.workers {
                out.push_str(&format!(
                    "\n  worker {} · host {} · pid {} · item {} · round {} · {} · lease until {}",
                    w.id,
                    w.host,
                    w.pid,
                    w.item_key.as_deref().map_or("-", |k| &k[..k.len().min(8)]),
                    w.round.map_or("-".to_string(), |n| n.to_string()),
                    w.phase.as_deref().unwrap_or("idle"),
                    w.lease_until.with_timezone(&self.tz).format("%H:%M:%S"),
                ));
            }
        }
        out
    }

    /// The running run's own line.
    fn run_line(&self, r: &rec::RunRow) -> String {
        match (r.sleeping_until, &r.phase) {
            (Some(until), _) => format!(
                "sleeping until {} (usage limit, {})",
                until.with_timezone(&self.tz).format("%H:%M"),
                r.sleeping_agent.as_deref().unwrap_or("agent")
            ),
            (None, phase) => format!(
                "run {} · item {} · round {} · {}",
                r.id,
                self.current_item,
                r.current_round.map(|n| n.to_string()).unwrap_or("-".into()),
                phase.map_or("starting", Phase::as_str)
            ),
        }
    }

    /// The line when no run is in progress: a dead one, one to resume (or
    /// to approve again), or none.
    fn idle_text(&self) -> String {
        match (self.dead, &self.to_resume) {
            (Some(r), _) => format!(
                "idle: run {} ended without finishing (pid {} is gone); the next `nightshift drain` marks it crashed and resumes it",
                r.id,
                r.pid.unwrap_or(0)
            ),
            (None, Some(r)) if self.key_lost => format!(
                "idle: run {} stopped before its end; its approval can no longer be verified (the approval key in {} is gone or changed): run `nightshift plan` and approve again, then `nightshift drain` runs what is left",
                r.id,
                crate::approval::key_path(&crate::cli::data_dir()).display()
            ),
            (None, Some(r)) => format!(
                "idle: run {} stopped before its end ({}; `nightshift report` says why); the next `nightshift drain` resumes it",
                r.id,
                if r.status == RunStatus::StoppedSignal {
                    "stopped by a signal"
                } else {
                    RunStatus::Crashed.as_str()
                }
            ),
            (None, None) => "idle: no run is in progress".to_string(),
        }
    }

    /// `status --json` (docs/commands.md#json-output), with `text`.
    fn json(&self, text: String) -> serde_json::Value {
        let running = self.running;
        serde_json::json!({
            "running": running.is_some(),
            "dead_run_id": self.dead.map(|r| r.id.to_string()),
            "resumable_run_id": self.to_resume.as_ref().filter(|_| !self.key_lost).map(|r| r.id.to_string()),
            "run_id": running.map(|r| r.id.to_string()),
            "phase": running.and_then(|r| r.phase),
            "item_key": running.and_then(|r| r.current_item_key.clone()),
            "round": running.and_then(|r| r.current_round),
            "sleeping_until": running.and_then(|r| r.sleeping_until),
            "sleeping_agent": running.and_then(|r| r.sleeping_agent.clone()),
            "pid": running.and_then(|r| r.pid),
            "workers": self.workers,
            "now": Utc::now(),
            "text": text,
        })
    }
}

/// The item `running` works on as `plan` and `report` name it: index,
/// title, short key (the short key alone before its row exists); `-`
/// when nothing runs.
///
/// # Errors
/// Database errors.
async fn current_item(pool: &sqlx::PgPool, running: Option<&rec::RunRow>) -> Result<String> {
    let Some((run, key)) = running.and_then(|r| r.current_item_key.as_deref().map(|k| (r.id, k)))
    else {
        return Ok("-".to_string());
    };
    let short = &key[..8.min(key.len())];
    let item = rec::run_items(pool, run)
        .await?
        .into_iter()
        .rev()
        .find(|i| i.item_key == key);
    Ok(match item {
        Some(i) => format!("{} {:?} ({short})", i.item_index, i.title),
        None => short.to_string(),
    })
}

/// A run that stopped on a failure outside its items waits to be resumed
/// (while its approval allows, docs/contract.md#approval) when it is the
/// `newest`. Also says whether its approval, younger than 24 h, can no
/// longer be verified: the approval key was lost (docs/security.md), so it
/// needs a new approval rather than a resume.
///
/// # Errors
/// Database errors.
async fn run_to_resume(
    pool: &sqlx::PgPool,
    id: &str,
    newest: Option<&rec::RunRow>,
) -> Result<(Option<rec::RunRow>, bool)> {
    let to_resume = rec::resumable_run(pool, id)
        .await?
        .filter(|r| newest.is_some_and(|n| n.id == r.id));
    let Some(aid) = to_resume.as_ref().and_then(|r| r.approval_id) else {
        return Ok((to_resume, false));
    };
    // A key that cannot be read only means nothing is shown resumable.
    let _ = crate::cli::install_approval_key();
    let approval = crate::approval::by_id(pool, aid).await?;
    let resumable = approval
        .as_ref()
        .is_some_and(|a| a.plan_sha.is_some() && crate::approval::may_resume(a, Utc::now()));
    let key_lost = !resumable
        && approval.as_ref().is_some_and(|a| {
            a.plan_sha.is_some()
                && Utc::now() < a.expires_at
                && crate::approval::check_signed(a).is_err()
        });
    if !resumable && !key_lost {
        return Ok((None, false));
    }
    Ok((to_resume, key_lost))
}

/// True when a run marked `running` belonged to a process of this host that
/// no longer exists (killed, machine rebooted). Runs of other hosts sharing
/// the ledger cannot be checked from here and count as running.
fn died_here(r: &rec::RunRow) -> bool {
    let this_host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok());
    match (r.pid, r.host.as_deref(), this_host.as_deref()) {
        (Some(pid), Some(host), Some(here)) if host == here && pid > 0 => {
            matches!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                Err(nix::errno::Errno::ESRCH)
            )
        }
        _ => false,
    }
}

/// A run id from `--run`: a full UUID, or a unique prefix of at least four
/// hex digits (as the report's first line shows it). A wrong or ambiguous
/// one lists the repository's recent runs.
async fn resolve_run_id(pool: &sqlx::PgPool, repo: &str, given: &str) -> Result<Uuid> {
    let g = given.trim().to_ascii_lowercase();
    if let Ok(u) = Uuid::parse_str(&g) {
        return Ok(u);
    }
    let recent = rec::recent_runs(pool, repo, 10).await?;
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
        let hits = rec::runs_with_prefix(pool, repo, &g).await?;
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
