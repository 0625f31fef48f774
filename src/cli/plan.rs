//! `nightshift plan` and `nightshift approve` (docs/commands.md, docs/contract.md).

use crate::cli::{Cli, Startup, ledger, location, repo_id, repo_root};
use crate::config;
use crate::error::{Error, Result};
use crate::plan as plans;
use crate::settings::{Snapshot, agents_as_root_refusal, agents_run_as_root, tend_cards};

/// Why the plan of `snap` cannot run, one sentence with its fix each: an
/// agent executable that is not there (checked as `drain` checks it before
/// consuming an approval), the placeholder gate `init` writes when it finds
/// no test command, or a program the sandbox would hide
/// (docs/security.md#toolchains). Empty when it can run.
fn cannot_run(snap: &Snapshot) -> Vec<String> {
    let loaded = &snap.loaded;
    let c = &loaded.config;
    let path = std::env::var("PATH").ok();
    // The fallbacks too (docs/limits.md#fallback).
    let mut out: Vec<String> = c
        .agents_in_play()
        .into_iter()
        .filter_map(|(writes, table, a)| {
            let role = if writes {
                crate::agent::Role::Writer
            } else {
                crate::agent::Role::Reviewer
            };
            let why = crate::agent::preflight(role, &a, path.as_deref()).err()?;
            Some(config::Config::name_table(&why, writes, &table))
        })
        .collect();
    out.extend(agents_as_root_refusal(c, &loaded.path));
    if c.verify.iter().any(|v| v == config::PLACEHOLDER_GATE) {
        out.push(format!(
            "`verify` is still the placeholder `nightshift init` wrote; set it to your test command in {}, e.g. verify = [\"sh test.sh\"]",
            loaded.path.display()
        ));
    }
    out.extend(hidden_programs(snap));
    out
}

/// The programs of the plan's gates, setup commands and agents the sandbox
/// would hide, each named with where it was found, then the
/// `[sandbox] read` line that shows them all.
fn hidden_programs(snap: &Snapshot) -> Vec<String> {
    use crate::settings::toolchain;
    let hidden = toolchain::hidden_in_plan(&snap.loaded, &snap.repo, &snap.plan);
    if hidden.is_empty() {
        return vec![];
    }
    let mut out: Vec<String> = hidden.iter().map(toolchain::Hidden::describe).collect();
    out.push(format!(
        "show them to the sandbox: write `{}` under `[sandbox]` in {} (docs/security.md#toolchains)",
        toolchain::read_line(&snap.loaded.config.sandbox.read, &hidden),
        snap.loaded.path.display()
    ));
    out
}

/// `nightshift plan [--json]`.
pub(crate) async fn plan(cli: &Cli, json: bool, startup: &Startup) -> Result<()> {
    let snap = crate::settings::snapshot(&location(cli))?;
    // A plan whose agents cannot start (or whose gate is init's placeholder)
    // would only spend its approval on a refusal: no SHA is offered, and the
    // plan is not stored, so nothing can approve it.
    let blockers = cannot_run(&snap);
    if !blockers.is_empty() && !snap.plan.entries.is_empty() {
        if json {
            let v = serde_json::json!({"plan_sha": null, "runnable": false, "problems": blockers});
            println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
        }
        return Err(Error::config(format!(
            "this plan cannot run, so it has no SHA to approve; fix {} and run `nightshift plan` again:\n  {}",
            snap.loaded.path.display(),
            blockers.join("\n  ")
        )));
    }
    // One connection: every statement below waits for the one before.
    let lg = crate::cli::ledger_serial().await?;
    let id = repo_id(&snap.repo, &snap.loaded.config.remote);
    let cards = tend_cards(&snap, &lg.pool, &id, startup).await?;
    let Snapshot { repo, loaded, plan } = snap;
    let mut plan = plan.with_tend(cards);
    crate::run::save_plan(&lg.pool, &id, &plan).await?;
    crate::run::save_tend_cards(&lg.pool, &plan).await?;
    crate::views::mark_earlier_work(&lg.pool, &id, &mut plan).await?;
    if crate::git::remote_url(&repo, &loaded.config.remote).is_err() {
        eprintln!(
            "warning: the remote {:?} does not exist; `drain` needs it to push (git remote add {} URL)",
            loaded.config.remote, loaded.config.remote
        );
    }
    // Each account's room under the reserve (docs/limits.md#reserve).
    let accounts = crate::status::gauge_accounts(&loaded.config);
    let tz = crate::schedule::resolve_zone(loaded.config.timezone.as_deref())
        .map_or(chrono_tz::UTC, |(tz, _)| tz);
    let (room, room_json) =
        crate::report::quota::room(&lg.pool, &accounts, &loaded.config.quota, tz).await?;
    if json {
        let mut v = plan.to_json();
        v["quota"] = room_json;
        if agents_run_as_root(&loaded.config) {
            v["agents_as_root"] = crate::report::AGENTS_AS_ROOT_NOTE.into();
        }
        println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
    } else {
        print!("{}", plans::render_plan(&plan));
        for line in &room {
            println!("{line}");
        }
        if agents_run_as_root(&loaded.config) {
            println!("warning: {}", crate::report::AGENTS_AS_ROOT_NOTE);
        }
        if !plan.entries.is_empty() || plan.tend.iter().any(|c| c.sealed.is_some()) {
            println!("approve it with: nightshift approve {}", plan.sha);
            println!("{}", approval_key_note());
        }
    }
    Ok(())
}

/// Where approvals are signed, for the card: an approval is a signed row,
/// and the key's loss only means approving again (docs/contract.md).
pub(crate) fn approval_key_note() -> String {
    format!(
        "(approvals are signed with the key in {}, readable by you only; without it, approve again)",
        crate::approval::key_path(&crate::cli::data_dir()).display()
    )
}

/// What `approve` recorded: the SHA and its kind, until when (local time)
/// the approval holds, and where its signing key is.
fn print_approved(
    sha: &str,
    is_contract: bool,
    expires_at: chrono::DateTime<chrono::Utc>,
    data_dir: &std::path::Path,
) {
    let kind = if is_contract { "contract" } else { "plan" };
    println!("approved {kind} {sha}");
    let until = expires_at.with_timezone(&chrono::Local);
    println!(
        "valid until {} (single use)",
        until.format("%Y-%m-%d %H:%M %Z")
    );
    println!(
        "signed with the key in {} (keep it private; if it is lost, approve again)",
        crate::approval::key_path(data_dir).display()
    );
}

/// `nightshift approve SHA`.
pub(crate) async fn approve(cli: &Cli, sha: &str) -> Result<()> {
    let sha = sha.trim().to_ascii_lowercase();
    if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::argument(format!(
            "{sha:?} is not a SHA-256 (64 hex characters); copy the plan SHA that `nightshift plan` printed"
        )));
    }
    let repo = repo_root(cli)?;
    let lg = ledger().await?;
    let id = crate::cli::repo_identity(cli, &repo);
    let Some(is_contract) = crate::views::names_contract(&lg.pool, &sha).await? else {
        return Err(Error::argument(format!(
            "no plan or contract with SHA {sha} was made in {}; run `nightshift plan` and approve the SHA it prints",
            repo.display()
        )));
    };
    let by = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| format!("uid {}", nix::unistd::getuid()));
    let data_dir = crate::cli::data_dir();
    let key =
        crate::approval::load_or_create_key(&data_dir).map_err(|e| Error::config(e.to_string()))?;
    let a = crate::approval::give(&lg.pool, &id, &sha, is_contract, &by, &key).await?;
    print_approved(&sha, is_contract, a.expires_at, &data_dir);
    // An approval of an older plan is allowed (docs/contract.md#approval: only its unchanged
    // contracts run), but the person should know before going to bed.
    if let Ok(now) = crate::settings::snapshot(&location(cli)) {
        let current: Vec<&str> = now
            .plan
            .entries
            .iter()
            .map(|e| e.contract_sha.as_str())
            .collect();
        if is_contract && !current.contains(&sha.as_str()) {
            eprintln!(
                "warning: this contract is not in the current backlog (the item or the config changed since it was planned); `nightshift run` will refuse it. Run `nightshift plan` and approve the new SHA."
            );
        } else if !is_contract && now.plan.sha != sha {
            let approved = crate::views::plan_contracts(&lg.pool, &sha).await?;
            let kept = current
                .iter()
                .filter(|c| approved.iter().any(|a| a == *c))
                .count();
            // A plan with tend cards has another SHA than the backlog's
            // alone (docs/github.md "The second night"): only a changed
            // item is worth the warning.
            if kept == current.len() {
                return Ok(());
            }
            eprintln!(
                "warning: the backlog or the config changed since this plan was made; the current plan is {}.\n  A drain under this approval runs only the {kept} of {} current item(s) whose contracts did not change; the others end `not_approved`.\n  To run them all: nightshift approve {}",
                now.plan.sha,
                current.len(),
                now.plan.sha
            );
        }
    }
    Ok(())
}
