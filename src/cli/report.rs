//! `nightshift report` and `nightshift status` (docs/commands.md): read from the
//! ledger only; they never start work.

use chrono::Utc;

use crate::cli::{Cli, ledger, repo_root};
use crate::error::{Error, Result};
use crate::ledger::Ledger;
use crate::views;

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
        return no_run(&repo, run, format);
    };
    let quota = crate::report::quota::NightQuota::load(&lg.pool, row.id).await?;
    let view = views::RunView::of(&lg.pool, row).await?;
    let not_started = view.not_started(&lg.pool).await?;
    let now = Utc::now();
    // Yesterday's PRs this run tended (docs/github.md "The second night").
    let views::RunView {
        run: row,
        items,
        slept,
        tended,
        foreign_refs,
        sandbox_unavailable,
        sandbox_refused,
        ci,
    } = view;
    let run_ended = row.ended_at.is_some();
    let mut sections = after_table(&tended, &foreign_refs, quota.text(row.zone()));
    let sandbox = crate::report::sandbox_section(sandbox_unavailable.as_deref(), &sandbox_refused);
    let ci_text = crate::report::ci::section(&ci, run_ended);
    sections.extend([sandbox, ci_text].into_iter().filter(|s| !s.is_empty()));
    match format {
        ReportFormat::Json => {
            let totals = crate::report::totals(&row, &items, slept, now);
            let mut v = crate::report::to_json_with(&row, &items, Some(&totals));
            v["not_started"] = not_started.iter().map(|(index, title, sha)| serde_json::json!({"index": index, "title": title, "contract_sha": sha})).collect();
            v["tended"] = tended.iter().map(crate::tend::Tended::to_json).collect();
            v["foreign_refs"] = foreign_refs.iter().map(|f| f.to_json()).collect();
            v["sandbox_refused"] = serde_json::json!(sandbox_refused);
            v["sandbox_unavailable"] = serde_json::json!(sandbox_unavailable);
            crate::report::ci::attach(&mut v, &ci, run_ended);
            v["quota"] = quota.json();
            quota.attach(&mut v);
            println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
        }
        ReportFormat::Markdown => {
            print!(
                "{}",
                crate::report::to_markdown(&row, &items, slept, show_body, now)
            );
            for section in &sections {
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
            for section in &sections {
                print!("\n{}", crate::secret::redact_known(section));
            }
            print_text_tail(row.id, &not_started);
        }
    }
    Ok(())
}

/// `report` when the ledger holds no run: an error for a run asked for by
/// id, else nothing to report yet (not an error).
fn no_run(repo: &std::path::Path, run: Option<&str>, format: ReportFormat) -> Result<()> {
    if let Some(r) = run {
        return Err(Error::argument(format!(
            "no run {r} in the ledger of {}",
            repo.display()
        )));
    }
    match format {
        ReportFormat::Json => println!("null"),
        _ => println!(
            "no run of {} yet; `nightshift drain` makes one",
            repo.display()
        ),
    }
    Ok(())
}

/// The text sections after the report's table, those with something to
/// say: the tended PRs, the refs nightshift did not push, the quota used
/// (`quota`, docs/limits.md#gauges).
fn after_table(
    tended: &[crate::tend::Tended],
    foreign_refs: &[crate::user_repo::foreign::ForeignRef],
    quota: String,
) -> Vec<String> {
    [
        crate::tend::report_section(tended),
        crate::report::foreign_refs_section(foreign_refs),
        quota,
    ]
    .into_iter()
    .filter(|s| !s.is_empty())
    .collect()
}

/// The repository, the ledger and the run `--run` names (a full id or a
/// prefix), else the newest; `None` when the repository has no run yet.
///
/// # Errors
/// An unknown or ambiguous `--run` (exit 2); the ledger.
async fn chosen_run(
    cli: &Cli,
    run: Option<&str>,
) -> Result<(std::path::PathBuf, Ledger, Option<views::RunRow>)> {
    let repo = repo_root(cli)?;
    let id = crate::cli::repo_identity(cli, &repo);
    let lg = ledger().await?;
    let run_id = match run {
        Some(r) => Some(views::resolve_run_id(&lg.pool, &id, r).await?),
        None => None,
    };
    let row = views::run_row(&lg.pool, &id, run_id).await?;
    Ok((repo, lg, row))
}

/// What the terminal report adds after its table: the items not started,
/// and where the rounds' own words are (prompts, agent outputs, gate logs).
fn print_text_tail(run: uuid::Uuid, not_started: &[(i32, String, String)]) {
    if !not_started.is_empty() {
        println!("not started (the run stopped before them):");
        for (index, title, _) in not_started {
            println!("  {index:>3}  {title}");
        }
    }
    let logs = crate::cli::data_dir().join("logs").join(run.to_string());
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
    let board = crate::report::board::load(&lg.pool, &row).await?;
    let page = crate::secret::redact_known(&timeline.to_html_with(&board));
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
    let window = since_window(since)?;
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

/// The window of `--since`: a duration such as `30d`, `2w` or `12h`.
///
/// # Errors
/// Exit 2 for anything else; a bare number (`14`) is named as the number
/// of days it most likely means, not read as minutes.
fn since_window(since: &str) -> Result<std::time::Duration> {
    let t = since.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::argument(format!(
            "--since {t:?} has no unit: write --since {t}d for {t} days (or {t}h for hours, {t}w for weeks)"
        )));
    }
    crate::duration::parse(since).map_err(|e| {
        Error::argument(format!(
            "--since {since:?}: {e}; write a duration such as 30d, 2w or 12h"
        ))
    })
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
    // A key that cannot be read only means nothing is shown resumable.
    let _ = crate::cli::install_approval_key();
    let key = crate::approval::key_path(&crate::cli::data_dir());
    // The accounts whose gauges are shown: the configured claude and codex
    // agents' (a `command` agent has none); none when the config is unreadable.
    let accounts: Vec<String> = crate::cli::context::load_config(cli, &repo)
        .map(|l| crate::status::gauge_accounts(&l.config))
        .unwrap_or_default();
    let st = crate::status::Status::load(&lg.pool, &id, key)
        .await?
        .with_quota(&lg.pool, &accounts)
        .await?;
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
