//! The item's branch: its name, commits by the writer and nightshift,
//! rebase and squash onto the base, push (with lease, stoppable) and the
//! remote's refs; and dropping a branch a killed run left behind.
//!
//! Not for preparing the checkout (`reset`) or the trees of a snapshot (`tree`).

use std::path::Path;

use super::error::SlotError;
use super::model::{Identity, Lease, NETWORK_TIMEOUT, Slot};
use crate::git::{self, Git, GitError};

/// The item's branch: `nightshift/<slug>-<key8>` (docs/loop.md#checkout).
///
/// The slug keeps the lowercased ASCII letters and digits of `title`; every
/// run of other characters becomes one `-`; it is trimmed of `-`, cut to at
/// most 40 characters, and `item` when nothing is left (e.g. a Chinese
/// title). `key8` is the first 8 characters of the item's key.
pub fn branch_name(title: &str, key: &str) -> String {
    let mut slug = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    // ASCII only from here on, so byte truncation is a char truncation.
    slug.truncate(40);
    let slug = slug.trim_matches('-');
    let slug = if slug.is_empty() { "item" } else { slug };
    let key8: String = key.chars().take(8).collect();
    format!("nightshift/{slug}-{key8}")
}

impl Slot {
    /// The slot's branch created or moved to `commit` (40 hex) and checked
    /// out by force, and everything git does not track removed, ignored
    /// files too.
    ///
    /// # Errors
    /// [`SlotError::Git`] when git fails.
    pub(super) fn check_out_clean(&self, commit: &str) -> Result<(), SlotError> {
        let git = self.git();
        let branch = self.branch.as_str();
        git.run(&[
            "checkout",
            "--quiet",
            "--force",
            "--no-track",
            "-B",
            branch,
            commit,
        ])?;
        git.run(&["clean", "-ffdxq"])?;
        Ok(())
    }

    /// Stages every change of the working tree (new, modified, deleted; what
    /// `.gitignore` ignores stays out) and commits it on the slot's branch
    /// with `author` and `committer` (nightshift commits, not the agent).
    /// Hooks never run. Returns the new commit id (40 hex).
    ///
    /// # Errors
    /// [`SlotError::Tampered`] if the slot's git dir changed (no git command
    /// runs then), [`SlotError::NothingToCommit`] if there is no change,
    /// [`SlotError::Git`] if git fails.
    pub fn commit_all(
        &self,
        message: &str,
        author: &Identity,
        committer: &Identity,
    ) -> Result<String, SlotError> {
        self.ensure_untampered()?;
        let git = self.authored_by(author, committer);
        git.run(&["add", "--all"])?;
        match git.run(&["diff", "--cached", "--quiet"]) {
            Ok(_) => {
                return Err(SlotError::NothingToCommit {
                    path: self.path.clone(),
                });
            }
            Err(GitError::Failed { ref status, .. }) if status == "exit status 1" => {}
            Err(e) => return Err(e.into()),
        }
        git.run(&[
            "commit",
            "--quiet",
            "--no-verify",
            "--no-edit",
            "--cleanup=verbatim",
            "-m",
            message,
        ])?;
        Ok(git.rev_parse("HEAD")?)
    }

    /// Takes up a PR's branch for a tend: fetches `refs/heads/{branch}` from
    /// the remote and checks the slot's branch out at it, which must be
    /// `expected` (the head nightshift last pushed). The base fetched by
    /// [`Slot::prepare`] stays in [`Slot::base_commit`] for the rebase.
    ///
    /// # Errors
    /// [`SlotError::Moved`] when the remote branch is elsewhere (nothing is
    /// checked out); [`SlotError::Tampered`]; [`SlotError::Git`] when the
    /// fetch or checkout fails.
    pub fn take_pushed_branch(&self, token: Option<&str>, expected: &str) -> Result<(), SlotError> {
        self.ensure_untampered()?;
        let tracking = format!("refs/remotes/{}/{}", self.remote, self.branch);
        let refspec = format!("+refs/heads/{}:{tracking}", self.branch);
        self.git()
            .token(token)
            .timeout(NETWORK_TIMEOUT)
            .fetch(&self.fetch_url, &refspec)?;
        let git = self.git();
        let found = git.rev_parse(&tracking)?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(SlotError::Moved {
                branch: self.branch.clone(),
                expected: expected.to_string(),
                found,
            });
        }
        self.check_out_clean(&found)?;
        Ok(())
    }

    /// Rebases the slot's branch onto [`Slot::base_commit`] with nightshift
    /// as committer ([`Git::rebase_onto`]).
    ///
    /// # Errors
    /// [`SlotError::Tampered`]; [`SlotError::Git`] for failures other than
    /// a conflict, which is `Ok(`[`git::Rebase::Conflict`]`)`.
    pub fn rebase_onto_base(&self, committer: &Identity) -> Result<git::Rebase, SlotError> {
        self.ensure_untampered()?;
        Ok(self.committing(committer).rebase_onto(&self.base_commit)?)
    }

    /// Stages every change (the writer's resolution) and goes on with the
    /// rebase ([`Git::rebase_continue`]).
    ///
    /// # Errors
    /// As [`Slot::rebase_onto_base`].
    pub fn rebase_continue(&self, committer: &Identity) -> Result<git::Rebase, SlotError> {
        self.ensure_untampered()?;
        let git = self.committing(committer);
        git.run(&["add", "-A", "--", "."])?;
        Ok(git.rebase_continue()?)
    }

    /// Abandons a rebase in progress ([`Git::rebase_abort`]).
    ///
    /// # Errors
    /// [`SlotError::Git`] if git fails.
    pub fn rebase_abort(&self) -> Result<(), SlotError> {
        Ok(self.git().rebase_abort()?)
    }

    /// Pushes the slot's branch only while the remote branch is at
    /// `expected` (the head nightshift last pushed; [`Git::push_with_lease`]),
    /// so a person's push is never overwritten.
    ///
    /// # Errors
    /// [`SlotError::Tampered`] (nothing is pushed); [`SlotError::Git`] when
    /// the push is refused (stale lease) or fails.
    pub fn push_with_lease(
        &self,
        token: Option<&str>,
        expected: &str,
        stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    ) -> Result<(), SlotError> {
        self.ensure_untampered()?;
        let mut git = self.git().token(token).timeout(NETWORK_TIMEOUT);
        if let Some(stop) = stop {
            git = git.stop_on(stop);
        }
        git.push_with_lease(&self.push_url, &self.branch, expected)?;
        Ok(())
    }

    /// Brings a tended PR's change onto the base as one change when its
    /// commits do not rebase cleanly: the branch is put at
    /// [`Slot::base_commit`] and `head`'s change (since its merge base with
    /// the base) is merged into the working tree without a commit (`git
    /// merge --squash`), conflicts left as `<<<<<<<`/`=======`/`>>>>>>>`
    /// markers for the writer, and everything staged so the index holds no
    /// unmerged entry. Returns the conflicted files (relative paths; empty
    /// when the squashed change applies cleanly) and the tree staged (the
    /// markers included), which the night's work is measured from.
    ///
    /// # Errors
    /// [`SlotError::Tampered`]; [`SlotError::Git`] when git fails otherwise
    /// than with a conflict.
    pub fn squash_onto_base(&mut self, head: &str) -> Result<(Vec<String>, String), SlotError> {
        self.ensure_untampered()?;
        let git = self.git();
        let base = self.base_commit.clone();
        self.check_out_clean(&base)?;
        self.tip = None;
        let merged = git.run(&[
            "-c",
            "merge.conflictStyle=merge",
            "-c",
            "rerere.enabled=false",
            "merge",
            "--squash",
            "--no-commit",
            "--quiet",
            head,
        ]);
        let files: Vec<String> = git
            .text(&["diff", "--name-only", "--diff-filter=U", "-z"])?
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_string)
            .collect();
        if let Err(e) = merged
            && files.is_empty()
        {
            return Err(e.into());
        }
        git.run(&["add", "-A", "--", "."])?;
        let tree = git.text(&["write-tree"])?.trim().to_string();
        self.record_index();
        self.seed_at_base = false;
        Ok((files, tree))
    }

    /// Reads the remote's head of the slot's branch ([`Git::remote_refs`], token
    /// through askpass) and keeps it as the lease of the item's push
    /// ([`Lease`]); called right after the item's claim, before any agent.
    ///
    /// # Errors
    /// [`SlotError::Git`] when the remote cannot be read; the lease is then
    /// read again right before the push.
    pub fn read_lease(&mut self, token: Option<&str>) -> Result<&Lease, SlotError> {
        let lease = self.remote_head(token)?;
        Ok(self.lease.insert(lease))
    }

    /// The remote's head of the slot's branch now.
    fn remote_head(&self, token: Option<&str>) -> Result<Lease, SlotError> {
        let refname = format!("refs/heads/{}", self.branch);
        let refs = (self.git().token(token).timeout(NETWORK_TIMEOUT))
            .remote_refs(&self.push_url, git::RefsWanted::Branch(&refname))?;
        Ok(refs.get(&refname).cloned().map_or(Lease::Absent, Lease::At))
    }

    /// Pushes the slot's branch to the user's remote (its push URL),
    /// replacing only what the branch held when the item was claimed
    /// ([`Slot::read_lease`]; read now if it could not be then): the
    /// `nightshift/` branch namespace belongs to nightshift, and a leftover
    /// from an earlier night whose PR was closed must not block the item
    /// (docs/loop.md#ship-or-retry), but a worker that lost its claim must
    /// not push over the takeover's branch (docs/workers.md#fencing).
    /// `token`, when given, answers https prompts through the askpass helper
    /// (docs/agents.md); otherwise the user's credential helpers and ssh
    /// setup apply.
    ///
    /// # Errors
    /// [`SlotError::Tampered`] if the slot's git dir changed (nothing is
    /// pushed then: a planted config could send the token elsewhere);
    /// [`SlotError::Git`] if the push fails, is refused (stale lease) or
    /// times out.
    pub fn push(&self, token: Option<&str>) -> Result<(), SlotError> {
        self.push_stoppable(token, None)
    }

    /// The remote's branches and tags as `ref → object id`
    /// ([`Git::remote_refs`]: `git ls-remote`, token through askpass, or
    /// in-process for a local remote).
    /// Taken before and after each agent call to see whether the agent
    /// pushed (docs/loop.md#writer: the runner checks the rules from git,
    /// not from the agent's word).
    ///
    /// # Errors
    /// [`SlotError::Git`] when the remote cannot be read.
    pub fn remote_refs(
        &self,
        token: Option<&str>,
    ) -> Result<std::collections::BTreeMap<String, String>, SlotError> {
        Ok((self.git().token(token).timeout(NETWORK_TIMEOUT))
            .remote_refs(&self.push_url, git::RefsWanted::HeadsAndTags)?)
    }

    /// [`Slot::push`], killed as soon as `stop` becomes true (a signal during
    /// the push, docs/limits.md): git's process group, hooks and helpers included.
    ///
    /// # Errors
    /// As [`Slot::push`]; a stopped push is [`SlotError::Git`] holding
    /// [`GitError::Stopped`].
    pub fn push_stoppable(
        &self,
        token: Option<&str>,
        stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    ) -> Result<(), SlotError> {
        self.ensure_untampered()?;
        let lease = match &self.lease {
            Some(lease) => lease.clone(),
            None => self.remote_head(token)?,
        };
        let mut git = self.git().token(token).timeout(NETWORK_TIMEOUT);
        if let Some(stop) = stop {
            git = git.stop_on(stop);
        }
        git.push_with_lease(&self.push_url, &self.branch, lease.expected())?;
        Ok(())
    }
}

/// Deletes the local branch `branch` from the checkout at `slot_dir`, if
/// the checkout exists and has it (detaching HEAD first when it is on it):
/// a run killed mid-item leaves its branch there, and a resumed run that
/// finds the item's PR done never prepares the checkout to drop it. Best
/// effort: a failure leaves the branch to the next prepare, which resets it.
pub fn drop_local_branch(slot_dir: &Path, branch: &str) {
    if !slot_dir.join(".git").exists() {
        return;
    }
    let git = Git::new(slot_dir).timeout(std::time::Duration::from_secs(60));
    let refname = format!("refs/heads/{branch}");
    if git
        .run(&["show-ref", "--verify", "--quiet", &refname])
        .is_err()
    {
        return;
    }
    let on_it = git
        .text(&["symbolic-ref", "--quiet", "HEAD"])
        .is_ok_and(|h| h.trim() == refname);
    if on_it
        && git
            .run(&["checkout", "--quiet", "--force", "--detach"])
            .is_err()
    {
        return;
    }
    let _ = git.run(&["update-ref", "-d", &refname]);
}
