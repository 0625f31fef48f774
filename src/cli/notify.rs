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
    // The remote as git names it, as a run's own message does.
    let remote = crate::git::remote_urls(&repo, &loaded.config.remote)
        .map(|(fetch, _)| crate::remote::without_userinfo(&fetch))
        .unwrap_or_else(|_| repo_identity(cli, &repo));
    let summary = crate::notify::sample(&remote, Some(&repo));
    let env = crate::cli::agents_environment(&loaded.config);
    let sent = crate::notify::deliver(targets, &summary, &crate::secret::redact_known, &env).await;
    let mut failed = 0;
    println!(
        "sending a test message (marked \"test\": true, headline {:?}):",
        summary.headline()
    );
    for d in &sent {
        failed += usize::from(d.error.is_some());
        println!("{}", crate::secret::redact_known(&d.describe()));
    }
    match failed {
        0 => Ok(()),
        n => Err(Error::failed(format!(
            "{n} of {} notification target(s) did not take the sample",
            sent.len()
        ))),
    }
}
