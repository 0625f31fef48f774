//! `nightshift sync` (docs/backlog.md#ticks-and-sync): one PR that ticks the backlog boxes of the
//! items whose PRs were merged.
//!
//! Item PRs leave the backlog alone (ticks on adjacent lines would make the
//! morning's PRs conflict as they are merged one by one). `sync` asks GitHub
//! which of the PRs nightshift opened were merged, edits the backlog as it is
//! on `<remote>/<base>` byte-exactly (`[ ]` → `[x]` plus ` (done: #N)`,
//! nothing else), commits once on its own branch in a slot, pushes, and opens
//! (or updates) one labelled PR. It never merges, and never touches the
//! user's checkout. It returns what happened in a few lines for the CLI to
//! print; it does not parse arguments.

use std::path::Path;

use crate::backlog;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::forge::{self, Forge, PrRequest, PrState};
use crate::ledger::prs::{self, PrRow};
use crate::outcome::PrRecord;
use crate::secret::Secret;
use crate::settings::{Startup, ledger, repo_id};
use crate::slot::{self, Identity, Slot};

/// The prefix of sync branches: `nightshift/sync-backlog-<8 hex>`, the hex
/// naming the set of ticks. While a sync PR is open, later syncs update it
/// (one open sync PR at a time); once it is merged or closed, the next sync
/// opens a new one on a new branch.
pub const SYNC_BRANCH: &str = "nightshift/sync-backlog";

/// The marker key every sync PR carries (it is no backlog item), so the open
/// one is found by its marker whatever its branch.
const SYNC_KEY: &str = "sync-backlog";

/// An item to tick: its key and the number of its merged PR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// Item key (docs/backlog.md#keys).
    pub key: String,
    /// The merged PR's number.
    pub number: u64,
}

/// A tick made: (1-based line, title, PR number).
pub type Ticked = (usize, String, u64);

/// Ticks every open item of `text` whose key is in `ticks`, byte-exactly:
/// `[ ]` → `[x]` and ` (done: #N)` after the title; every other byte is
/// unchanged (docs/backlog.md). Returns the new text and the (line, title, number) of
/// each tick made, in file order. Keys not found (the item was edited or is
/// already ticked) are skipped.
///
/// # Errors
/// Exit 1 when a tick cannot be applied (the file changed under the parse:
/// a marker or title mismatch, which [`backlog::tick`] reports).
pub fn tick_all(path: &Path, text: &str, ticks: &[Tick]) -> Result<(String, Vec<Ticked>)> {
    let bl = backlog::parse(path, text);
    let mut hits: Vec<(&backlog::Item, u64)> = bl
        .items
        .iter()
        .filter(|i| !i.done)
        .filter_map(|i| ticks.iter().find(|t| t.key == i.key).map(|t| (i, t.number)))
        .collect();
    // From the end of the file backwards, so earlier offsets stay valid.
    hits.sort_by_key(|(i, _)| std::cmp::Reverse(i.marker_offset));
    let mut out = text.to_string();
    for (item, n) in &hits {
        out = backlog::tick(&out, item, &format!(" (done: #{n})"))
            .map_err(|e| Error::failed(format!("{}: {e}", path.display())))?;
    }
    let mut done: Vec<Ticked> = hits
        .iter()
        .map(|(i, n)| (i.line, i.title.clone(), *n))
        .collect();
    done.reverse();
    Ok((out, done))
}

/// GitHub for a command that needs it: the client and the token.
///
/// # Errors
/// Exit 2 without a token or a GitHub repository, naming how to give one.
fn github(repo: &Path, config: &Config, startup: &Startup) -> Result<(Forge, Secret)> {
    let Some((token, _)) = forge::resolve_token(&startup.removed) else {
        return Err(Error::config(
            crate::settings::no_token_in(repo, config).to_string(),
        ));
    };
    let f = crate::settings::github_client(repo, config, &token, None).map_err(Error::config)?;
    Ok((f, token))
}

/// `nightshift sync` for the repository at `repo` under `config`: what
/// it did, in lines to print.
///
/// # Errors
/// Exit 2 without GitHub access; exit 1 when GitHub, the checkout, the
/// commit or the push fail; database errors.
pub async fn sync(repo: &Path, config: &Config, startup: &Startup) -> Result<String> {
    let (forge, token) = github(repo, config, startup)?;
    let lg = ledger().await?;
    let id = repo_id(repo, &config.remote);
    let rows = prs::opened_prs(&lg.pool, &id).await?;
    if rows.is_empty() {
        return Ok(format!(
            "nothing to sync: nightshift has opened no PR in {} yet",
            repo.display()
        ));
    }
    // An open sync PR is updated rather than joined by a second one.
    let open_sync = forge
        .find_pr(SYNC_BRANCH, SYNC_KEY, &config.label)
        .await
        .map_err(|e| Error::failed(format!("GitHub: {e}")))?
        .filter(|p| p.state == PrState::Open);
    let ctx = SyncCtx {
        repo,
        config,
        forge: &forge,
        token: token.expose(),
        slot_dir: slot::slot_path(&crate::settings::data_dir(), repo, 0).with_file_name("sync"),
        pool: &lg.pool,
        repo_id: &id,
    };
    // The backlog as it is on <remote>/<base>: only its open items can be ticked.
    let slot = ctx.checkout("nightshift/sync-work")?;
    let result = sync_from(&ctx, &slot, &rows, open_sync.as_ref()).await;
    let _ = tokio::task::block_in_place(|| slot.discard());
    result
}

/// What one `sync` works with.
struct SyncCtx<'a> {
    /// The user's repository root (never written to).
    repo: &'a Path,
    /// The config.
    config: &'a Config,
    /// GitHub.
    forge: &'a Forge,
    /// The GitHub token, for git's askpass helper.
    token: &'a str,
    /// The checkout `sync` works in, beside the run's slots.
    slot_dir: std::path::PathBuf,
    /// The ledger's pool.
    pool: &'a sqlx::PgPool,
    /// The repository's identity in the ledger.
    repo_id: &'a str,
}

impl SyncCtx<'_> {
    /// A fresh checkout of `<remote>/<base>` in the sync slot, on `branch`.
    ///
    /// # Errors
    /// Exit 1 when the checkout fails.
    fn checkout(&self, branch: &str) -> Result<Slot> {
        let c = self.config;
        tokio::task::block_in_place(|| {
            Slot::prepare(
                &self.slot_dir,
                self.repo,
                &c.remote,
                &c.base,
                branch,
                Some(self.token),
                None,
            )
        })
        .map_err(|e| {
            Error::failed(format!(
                "checkout of {}/{} for sync failed: {e}",
                c.remote, c.base
            ))
        })
    }

    /// The backlog in `slot` ([`backlog_in`]) and its text.
    ///
    /// # Errors
    /// Exit 1 when it is missing, unreadable or a link out of the checkout.
    fn read_backlog(&self, slot: &Slot) -> Result<(std::path::PathBuf, String)> {
        let c = self.config;
        let file = backlog_in(slot, c)?;
        let text = crate::file::read_regular_text(&file, crate::file::MAX_TEXT_BYTES)
            .map_err(|e| Error::failed(format!("{} on {}/{}: {e}", c.backlog, c.remote, c.base)))?;
        Ok((file, text))
    }

    /// The ticks to make: each of `rows` whose item is in `open` and whose
    /// PR GitHub says was merged (not the ledger's memory), once per item;
    /// the ledger learns of each merge it had not recorded.
    ///
    /// # Errors
    /// Exit 1 when GitHub cannot be asked; database errors.
    async fn merged_ticks(&self, rows: &[PrRow], open: &[String]) -> Result<Vec<Tick>> {
        let mut ticks: Vec<Tick> = Vec::new();
        for r in rows.iter().filter(|r| open.contains(&r.item_key)) {
            let found = self
                .forge
                .find_pr(&r.branch, &r.item_key, &self.config.label)
                .await
                .map_err(|e| Error::failed(format!("GitHub: {e}")))?;
            let Some(pr) = found.filter(|p| p.state == PrState::Merged) else {
                continue;
            };
            if r.state != PrRecord::Merged {
                prs::set_pr_state(
                    self.pool,
                    self.repo_id,
                    &r.item_key,
                    &r.branch,
                    PrRecord::Merged,
                )
                .await?;
            }
            if !ticks.iter().any(|t| t.key == r.item_key) {
                ticks.push(Tick {
                    key: r.item_key.clone(),
                    number: pr.number,
                });
            }
        }
        Ok(ticks)
    }
}

/// Finds the merged items still open in the backlog of `slot` and, when
/// there are any, ticks them on the sync branch (the open sync PR's, else
/// a new one named after the ticks) and opens or updates its PR.
///
/// # Errors
/// As [`SyncCtx::read_backlog`], [`SyncCtx::merged_ticks`] and
/// [`commit_and_open`].
async fn sync_from(
    ctx: &SyncCtx<'_>,
    slot: &Slot,
    rows: &[PrRow],
    open_sync: Option<&forge::PrInfo>,
) -> Result<String> {
    let config = ctx.config;
    let (_, text) = ctx.read_backlog(slot)?;
    let open: Vec<String> = backlog::parse(Path::new(&config.backlog), &text)
        .items
        .into_iter()
        .filter(|i| !i.done)
        .map(|i| i.key)
        .collect();
    let ticks = ctx.merged_ticks(rows, &open).await?;
    if ticks.is_empty() {
        return Ok(format!(
            "nothing to sync: no open item of {} on {}/{} has a merged nightshift PR",
            config.backlog, config.remote, config.base
        ));
    }
    let branch = match open_sync {
        Some(pr) => pr.head.clone(),
        None => sync_branch(&ticks),
    };
    // Checked out again on its branch (a reset of the same slot).
    let slot = ctx.checkout(&branch)?;
    let done = commit_and_open(ctx, &slot, &ticks).await;
    let _ = tokio::task::block_in_place(|| slot.discard());
    done
}

/// A new sync branch: [`SYNC_BRANCH`]`-<8 hex>`, the hex of the SHA-256 of
/// the set of ticks (`key:number`, sorted, one a line).
fn sync_branch(ticks: &[Tick]) -> String {
    let mut set: Vec<String> = ticks
        .iter()
        .map(|t| format!("{}:{}", t.key, t.number))
        .collect();
    set.sort();
    format!(
        "{SYNC_BRANCH}-{}",
        &crate::contract::sha256_hex(set.join("\n").as_bytes())[..8]
    )
}

/// The backlog file in the checkout, with every symbolic link on its way
/// resolved: a link inside the repository (`NEXT.md -> docs/NEXT.md`) is
/// followed, one that leads out of the checkout or into its `.git` is
/// refused — the base branch's content decides where the link points, and
/// nightshift must not read or tick a file outside the checkout with the
/// user's rights.
///
/// # Errors
/// Exit 1 naming the link when it leads out, or when the file is missing.
fn backlog_in(slot: &Slot, config: &Config) -> Result<std::path::PathBuf> {
    let top = slot
        .path
        .canonicalize()
        .map_err(|e| Error::failed(format!("{}: {e}", slot.path.display())))?;
    let file = slot.path.join(&config.backlog);
    let real = file.canonicalize().map_err(|e| {
        Error::failed(format!(
            "{} on {}/{}: {e}",
            config.backlog, config.remote, config.base
        ))
    })?;
    if !real.starts_with(&top) || real.starts_with(top.join(".git")) || !real.is_file() {
        return Err(Error::failed(format!(
            "{} on {}/{} is a symbolic link to {}, outside the repository's files; nightshift does not tick through it (make it a regular file, or point `backlog` at the file itself)",
            config.backlog,
            config.remote,
            config.base,
            real.display()
        )));
    }
    Ok(real)
}

/// Edits, commits, pushes and opens the sync PR from a prepared slot.
///
/// # Errors
/// Exit 1 when the backlog cannot be read or written, or the commit, push
/// or PR fails.
async fn commit_and_open(ctx: &SyncCtx<'_>, slot: &Slot, ticks: &[Tick]) -> Result<String> {
    let config = ctx.config;
    let (file, text) = ctx.read_backlog(slot)?;
    let (new, done) = tick_all(Path::new(&config.backlog), &text, ticks)?;
    if done.is_empty() {
        return Ok(format!(
            "nothing to sync: every merged item is already ticked in {} on {}/{}",
            config.backlog, config.remote, config.base
        ));
    }
    std::fs::write(&file, &new).map_err(|e| Error::failed(format!("{}: {e}", file.display())))?;
    let list: Vec<String> = done
        .iter()
        .map(|(line, title, n)| format!("- {}:{line} {title} (#{n})", config.backlog))
        .collect();
    let message = format!(
        "nightshift: tick {} merged item(s) in {}\n\n{}\n",
        done.len(),
        config.backlog,
        list.join("\n")
    );
    let me = Identity {
        name: "nightshift".into(),
        email: "nightshift@localhost".into(),
    };
    let branch = &slot.branch;
    tokio::task::block_in_place(|| slot.commit_all(&message, &me, &me))
        .map_err(|e| Error::failed(format!("sync commit failed: {e}")))?;
    tokio::task::block_in_place(|| slot.push(Some(ctx.token)))
        .map_err(|e| Error::failed(format!("push of {branch} failed: {e}")))?;
    open_pr(ctx, branch, &list).await
}

/// Opens (or updates) the labelled sync PR of the pushed `branch` whose
/// ticks are `list` (a line each) and says so.
///
/// # Errors
/// Exit 1 when GitHub does not open or label it (the branch is pushed).
async fn open_pr(ctx: &SyncCtx<'_>, branch: &str, list: &[String]) -> Result<String> {
    let (config, forge) = (ctx.config, ctx.forge);
    let body = format!(
        "Ticks the backlog boxes of items whose nightshift PRs were merged. Only these lines change: `[ ]` → `[x]` and ` (done: #N)` after the title.\n\n{}\n\nOpened by `nightshift sync`; nothing was merged by it.\n",
        list.join("\n")
    );
    // No labels in the request: its look-up by marker would find an earlier,
    // merged sync PR; this branch is looked up by its name only.
    let req = PrRequest {
        title: format!(
            "nightshift: tick {} merged item(s) in {}",
            list.len(),
            config.backlog
        ),
        head: branch.to_string(),
        base: config.base.clone(),
        body,
        labels: vec![],
        item_key: SYNC_KEY.to_string(),
        // Only item PRs are drafts (config `draft`, docs/github.md): this
        // one only ticks boxes and is merged as it is.
        draft: false,
    };
    let failed = |e: forge::ForgeError| {
        Error::failed(format!(
            "branch {branch} pushed, PR not created or labelled: {e}; run `nightshift sync` again"
        ))
    };
    let pr = forge.create_pr(&req).await.map_err(failed)?;
    forge
        .ensure_label(&config.label, forge::LABEL_COLOR, forge::LABEL_DESCRIPTION)
        .await
        .map_err(failed)?;
    forge
        .add_labels(pr.number, std::slice::from_ref(&config.label))
        .await
        .map_err(failed)?;
    let verb = if pr.created { "opened" } else { "updated" };
    let mut said = format!(
        "{verb} PR #{} ticking {} item(s): {}",
        pr.number,
        list.len(),
        pr.url
    );
    for l in list {
        said.push_str(&format!("\n  {l}"));
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_adjacent_items_byte_exactly() {
        let text = "# B\r\n\n- [ ] One  \r\n  - accept: x\n- [ ] Two\n* [ ] Three\n- [x] Done\n";
        let bl = backlog::parse(Path::new("N.md"), text);
        let key = |t: &str| bl.items.iter().find(|i| i.title == t).unwrap().key.clone();
        let ticks = vec![
            Tick {
                key: key("Two"),
                number: 8,
            },
            Tick {
                key: key("One"),
                number: 7,
            },
            Tick {
                key: key("Done"),
                number: 1,
            },
        ];
        let (out, done) = tick_all(Path::new("N.md"), text, &ticks).unwrap();
        assert_eq!(
            out,
            "# B\r\n\n- [x] One (done: #7)  \r\n  - accept: x\n- [x] Two (done: #8)\n* [ ] Three\n- [x] Done\n"
        );
        assert_eq!(
            done,
            vec![(3, "One".to_string(), 7), (5, "Two".to_string(), 8)]
        );
    }
}
