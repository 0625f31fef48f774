//! The review queue (config `max_open_prs`, docs/loop.md#before-the-checkout):
//! before an item starts work, and before a branch an earlier run pushed
//! gets its PR, the open nightshift PRs of the repository are counted; at
//! the limit the item ends `review_queue_full` without an agent call, and
//! the night opens no new PR. The count is GitHub's (the open PRs of this
//! repository whose body ends with an item marker); without GitHub, or when
//! it cannot be asked, the ledger's (its PRs recorded open, and the branches
//! pushed without their PR, which become PRs once GitHub can be reached).
//! Items claimed before this one and still working count too, since each
//! may open a PR: with `--jobs` the limit is not overshot
//! (docs/workers.md "What holds across all workers"). It decides nothing
//! else and records nothing.

use crate::contract::PlanEntry;
use crate::error::Error;
use crate::ledger::items::ItemEnd;
use crate::ledger::prs;

use super::Night;
use super::decide::{self, Fact};
use super::record::Record;

/// The item's end when the review queue is full, else `None` (also when
/// config `max_open_prs` is unset: then nothing is counted). `pending` is
/// the branch an earlier run pushed for the item without its PR, when the
/// PR is what would be opened now (it stays pushed, and a later run opens
/// it).
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn full(
    night: &Night,
    record: &Record<'_>,
    entry: &PlanEntry,
    pending: Option<&str>,
) -> Result<Option<ItemEnd>, Error> {
    let Some(max) = night.config.max_open_prs else {
        return Ok(None);
    };
    let (open, counted) = open_prs(night, &entry.item.key).await?;
    let working = record.earlier_live_items().await?;
    if open + working < u64::from(max) {
        return Ok(None);
    }
    let what = match pending {
        Some(b) => format!("branch {b} is pushed but its PR is not opened"),
        None => "not started".to_string(),
    };
    let working = match working {
        0 => String::new(),
        n => format!(", and {n} item(s) claimed before it are still working and may open theirs"),
    };
    let why = format!(
        "{what}: {open} nightshift PR(s) {counted}{working} (max_open_prs = {max}); merge or close some and a later run takes the item up"
    );
    let end = decide::end(Fact::ReviewQueueFull(night.redact(&why)));
    Ok(Some(end.with(|f| f.branch = pending.map(str::to_string))))
}

/// How many nightshift PRs count against `max_open_prs`, and where they
/// were counted (for the reason): GitHub's open item PRs, else the
/// ledger's, other than `key`'s own.
async fn open_prs(night: &Night, key: &str) -> Result<(u64, String), Error> {
    let why_not = match (&night.forge, night.github_down()) {
        (Some(forge), None) => match forge.count_open_item_prs().await {
            Ok(n) => return Ok((n as u64, "are open on GitHub".into())),
            Err(e) => {
                if e.scope() == crate::forge::Scope::Run {
                    night.mark_github_down(&e.to_string());
                }
                tracing::warn!("cannot count the open PRs on GitHub, counting the ledger's: {e}");
                e.to_string()
            }
        },
        (Some(_), Some(down)) => down,
        (None, _) => night
            .forge_missing
            .clone()
            .unwrap_or_else(|| "no GitHub access".into()),
    };
    let n = night
        .db(|| prs::review_queue(&night.pool, &night.repo_id, key))
        .await?;
    Ok((
        n.max(0) as u64,
        format!(
            "are open or pushed awaiting their PR, by the ledger (GitHub was not asked: {why_not})"
        ),
    ))
}
