//! The end of a run, after its items (docs/commands.md#drain): the run as
//! the report shows it, read back from the ledger, and the config's
//! `[notify]` targets told (docs/notify.md), each failure recorded as a
//! `notify_failed` event. Not the printing of the report (the CLI does
//! that) nor the run's own end row ([`super::drain`] writes it).

use crate::error::Error;
use crate::ledger::{events, prs};
use crate::outcome::Event;
use crate::user_repo::foreign::{self, ForeignRef};
use crate::views::RunView;

use super::Night;

/// The run `run` as the report shows it, after telling the `[notify]`
/// targets it ended (completed, stopped by the deadline, a signal or a
/// failure outside its items). A failed message is a warning on stderr
/// and a ledger row, never an error.
///
/// # Errors
/// Database errors; [`Error::Failed`] when the run is not in the ledger.
pub async fn ended(night: &Night, run: uuid::Uuid) -> Result<RunView, Error> {
    let row = crate::views::run_row(&night.pool, &night.repo_id, Some(run))
        .await?
        .ok_or_else(|| Error::failed("the run vanished from the ledger"))?;
    look_for_foreign_refs(night, run, None).await?;
    let view = RunView::of(&night.pool, row).await?;
    notify(night, &view).await;
    Ok(view)
}

/// Tells the config's `[notify]` targets that a run ended (completed, stopped
/// by the deadline, a signal or a failure outside its items): writes the
/// run's HTML page under `.nightshift/reports/` for the message to point at,
/// sends one summary to each target, and records each target that did not
/// take it as a `notify_failed` event. Never fails the run: a failure is a
/// warning on stderr and a ledger row.
async fn notify(night: &Night, view: &RunView) {
    let (run, items, slept) = (&view.run, &view.items, view.slept);
    let targets = &night.config.notify;
    if targets.is_empty() {
        return;
    }
    let report = write_page(night, run.id).await;
    // The remote as git names it (an identity may be a path that is not there).
    let remote = crate::remote::without_userinfo(&night.remote_urls.0);
    let mut summary = crate::notify::Summary::from_ledger(
        run,
        (&remote, Some(&night.repo)),
        items,
        slept,
        report,
    );
    summary.foreign_refs = view.foreign_refs.iter().map(ForeignRef::line).collect();
    // Each watched PR's CI state, as the morning report words it.
    let ci: Vec<(i32, String)> = (view.ci.iter())
        .filter_map(|w| {
            let item = items.iter().find(|i| i.item_key == w.watch.item_key)?;
            let state = crate::report::ci::state_text(&w.watch, true);
            Some((item.item_index, state.to_string()))
        })
        .collect();
    summary.set_ci(&ci);
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
            "warning: the end-of-run message to {} ({}) was not sent after {} attempt(s): {why}",
            d.target, d.to, d.attempts
        );
        let data = serde_json::json!({"target": d.target, "to": d.to, "attempts": d.attempts, "error": why});
        if let Err(e) = crate::ledger::events::event(
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
async fn write_page(night: &Night, run: uuid::Uuid) -> Option<String> {
    let timeline = crate::timeline::Timeline::load(&night.pool, run)
        .await
        .ok()??;
    // Headed by the board's model, as `report --html` and the live board.
    let row = crate::ledger::runs::run_row(&night.pool, &night.repo_id, Some(run));
    let board = match row.await.ok().flatten() {
        Some(r) => crate::report::board::load(&night.pool, &r).await.ok(),
        None => None,
    };
    let page = match &board {
        Some(b) => timeline.to_html_with(b),
        None => timeline.to_html(),
    };
    let path = crate::report::page_path(&night.repo, run);
    std::fs::create_dir_all(path.parent()?).ok()?;
    std::fs::write(&path, crate::secret::redact_known(&page)).ok()?;
    Some(path.display().to_string())
}

/// Lists the remote's `nightshift/` branches and records each one whose
/// head nightshift did not push (docs/security.md#processes) as a
/// `foreign_ref` event of `run`, once per ref and head. `only`: just this
/// branch (a takeover looking at a lost attempt's branch, while other
/// workers may be between their own push and its ledger row). A remote
/// that cannot be read is a warning, not an error.
///
/// # Errors
/// Database errors.
pub(super) async fn look_for_foreign_refs(
    night: &Night,
    run: uuid::Uuid,
    only: Option<&str>,
) -> Result<(), Error> {
    let token = night.git_token();
    let url = &night.remote_urls.1;
    let listed = tokio::task::block_in_place(|| {
        foreign::remote_branches(&night.repo, token.as_deref(), url)
    });
    let mut remote = match listed {
        Ok(remote) => remote,
        Err(e) => {
            let why = crate::secret::redact_known(&e.to_string());
            tracing::warn!("cannot list the remote's nightshift branches: {why}");
            return Ok(());
        }
    };
    if let Some(branch) = only {
        remote.retain(|name, _| name.strip_prefix("refs/heads/") == Some(branch));
    }
    let pushed = prs::pushed_heads(&night.pool, &night.repo_id).await?;
    let seen = events::of_kind_in_run(&night.pool, run, Event::ForeignRef.as_str()).await?;
    let seen: Vec<ForeignRef> = seen.iter().filter_map(ForeignRef::from_json).collect();
    for found in foreign::foreign(&remote, &pushed) {
        if seen
            .iter()
            .any(|s| s.name == found.name && s.head == found.head)
        {
            continue;
        }
        eprintln!("warning: nightshift did not push {}", found.line());
        events::event(
            &night.pool,
            Some(run),
            Event::ForeignRef.as_str(),
            found.to_json(),
        )
        .await?;
    }
    Ok(())
}
