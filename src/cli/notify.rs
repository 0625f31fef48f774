//! `nightshift notify --test`: a sample end-of-run message to every target
//! of the config's `[notify]` table (docs/commands.md#notify).

use crate::cli::{Cli, Startup, load_config, repo_identity, repo_root};
use crate::error::{Error, Result};

/// Sends [`crate::notify::sample`] to each target and prints one line per
/// target.
///
/// # Errors
/// Without `--test` or without targets: [`Error::Config`] (exit 2); a
/// target that did not take it: [`Error::Failed`] (exit 1).
pub(crate) async fn notify_test(cli: &Cli, test: bool, _startup: &Startup) -> Result<()> {
    if !test {
        return Err(Error::config(
            "`nightshift notify` only sends a sample: run `nightshift notify --test` (a run's own message goes out when it ends)",
        ));
    }
    let repo = repo_root(cli)?;
    let loaded = load_config(cli, &repo)?;
    let targets = &loaded.config.notify;
    if targets.is_empty() {
        return Err(Error::config(format!(
            "no [notify] target in {}: add `webhook = \"https://…\"`, `slack_webhook = \"https://hooks.slack.com/…\"` or `command = [\"…\"]` under [notify]",
            loaded.path.display()
        )));
    }
    let summary = crate::notify::sample(&repo_identity(cli, &repo));
    let env = crate::cli::agents_environment(&loaded.config);
    let sent = crate::notify::deliver(targets, &summary, &crate::secret::redact_known, &env).await;
    let mut failed = 0;
    for d in &sent {
        match &d.error {
            None => println!("{}: sent", d.target),
            Some(e) => {
                failed += 1;
                println!(
                    "{}: not sent after {} attempt(s): {}",
                    d.target,
                    d.attempts,
                    crate::secret::redact_known(e)
                );
            }
        }
    }
    match failed {
        0 => Ok(()),
        n => Err(Error::failed(format!(
            "{n} of {} notification target(s) did not take the sample",
            sent.len()
        ))),
    }
}

/// Tells the config's `[notify]` targets that a run ended (completed, stopped
/// by the deadline, a signal or a failure outside its items): writes the
/// run's HTML page under `.nightshift/reports/` for the message to point at,
/// sends one summary to each target, and records each target that did not
/// take it as a `notify_failed` event. Never fails the run: a failure is a
/// warning on stderr and a ledger row.
pub(crate) async fn run_ended(
    night: &crate::run::Night,
    run: &crate::ledger::records::RunRow,
    items: &[crate::ledger::records::ItemRow],
    slept: i64,
) {
    let targets = &night.config.notify;
    if targets.is_empty() {
        return;
    }
    let report = write_page(night, run.id).await;
    let summary = crate::notify::Summary::from_ledger(run, &night.repo_id, items, slept, report);
    let sent = crate::notify::deliver(
        targets,
        &summary,
        &crate::secret::redact_known,
        &night.agent_env,
    )
    .await;
    for d in sent.iter().filter(|d| d.error.is_some()) {
        let why = crate::secret::redact_known(d.error.as_deref().unwrap_or(""));
        eprintln!(
            "warning: the end-of-run message to {} was not sent after {} attempt(s): {why}",
            d.target, d.attempts
        );
        let data = serde_json::json!({"target": d.target, "attempts": d.attempts, "error": why});
        if let Err(e) = crate::ledger::records::event(
            &night.pool,
            Some(run.id),
            crate::outcome::Event::NotifyFailed.as_str(),
            data,
        )
        .await
        {
            eprintln!("warning: could not record it in the ledger: {e}");
        }
    }
}

/// The run's HTML page at `.nightshift/reports/<run id>.html`, or `None`
/// when it could not be written (the message goes out without it).
async fn write_page(night: &crate::run::Night, run: uuid::Uuid) -> Option<String> {
    let timeline = crate::timeline::Timeline::load(&night.pool, run)
        .await
        .ok()??;
    let path = crate::report::page_path(&night.repo, run);
    std::fs::create_dir_all(path.parent()?).ok()?;
    std::fs::write(&path, crate::secret::redact_known(&timeline.to_html())).ok()?;
    Some(path.display().to_string())
}
