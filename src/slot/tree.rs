//! Trees of the slot's working tree: snapshots (what the writer left, ignored
//! files apart), commits of a tree, restoring one, diffs and changed files.
//!
//! Not for the branch these land on (`branch`).

use super::error::SlotError;
use super::fingerprint::nul_joined;
use super::index::seed_index_file;
use super::model::{Identity, Slot};
use crate::git::{self, GitError};
use crate::snapshot::Snapshot;

impl Slot {
    /// The files (relative paths) that differ between two commits or trees.
    ///
    /// # Errors
    /// [`SlotError::Git`] when git cannot diff them.
    pub fn changed_files(&self, from: &str, to: &str) -> Result<Vec<String>, SlotError> {
        Ok(self
            .git()
            .text(&["diff", "--name-only", "--no-renames", "-z", from, to, "--"])?
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_string)
            .collect())
    }

    /// The unified diff from `base` to `tree` (a commit or a
    /// [`Slot::snapshot_tree`]), for the PR body's evidence.
    ///
    /// # Errors
    /// [`SlotError::Git`] when git cannot diff them.
    pub fn diff_text(&self, base: &str, tree: &str) -> Result<String, SlotError> {
        Ok(self.git().text(&[
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--find-renames",
            base,
            tree,
            "--",
        ])?)
    }

    /// The working tree's content right now — tracked and untracked files,
    /// ignored ones left out — as a git tree id, written through a private
    /// index so the slot's own index is untouched.
    ///
    /// Taken after the writer and before the gate, so that what the gate
    /// leaves behind (a generated `Cargo.lock`, coverage files, snapshots) is
    /// not mistaken for the writer's work by the proof, the reviewer or the
    /// commit ([`Slot::restore_tree`]).
    ///
    /// # Errors
    /// [`SlotError::Git`] when git cannot read the tree.
    pub fn snapshot_tree(&self) -> Result<String, SlotError> {
        // Seeded from git's own index so unchanged files are not re-hashed.
        let index = self.seeded_index("snapshot")?;
        let git = self.on_index(&index);
        let result = git
            .run(&["add", "-A", "--", "."])
            .and_then(|_| git.text(&["write-tree"]));
        let _ = std::fs::remove_file(&index);
        Ok(result?.trim().to_string())
    }

    /// Which of `paths` (relative, `/`-separated bytes) git ignores, by the
    /// same rules `git add -A` applies (`.gitignore` files, `info/exclude`,
    /// `core.excludesFile`); a tracked file is never ignored. One `git
    /// check-ignore` for all of them.
    ///
    /// # Errors
    /// [`SlotError::Git`] when git fails.
    pub fn ignored(
        &self,
        paths: &[Vec<u8>],
    ) -> Result<std::collections::BTreeSet<Vec<u8>>, SlotError> {
        let input = nul_joined(paths);
        let out = self
            .git()
            .run_with_input(&["check-ignore", "--stdin", "-z"], Some(&input));
        match out {
            Ok(o) => Ok(o
                .stdout
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(<[u8]>::to_vec)
                .collect()),
            // Exit 1: none of them is ignored.
            Err(GitError::Failed { ref status, .. }) if status == "exit status 1" => {
                Ok(Default::default())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Commits `tree` (40 hex, a [`Slot::snapshot_tree`] the reviewer
    /// approved) on the slot's branch, on top of its current commit, with
    /// `author` and `committer` — the commit [`Slot::commit_all`] would make
    /// of the same working tree, without reading the tree again. The
    /// slot's index is left as it was. Hooks never run. Returns the new
    /// commit id (40 hex).
    ///
    /// # Errors
    /// [`SlotError::Tampered`] if the slot's git dir changed (no git command
    /// runs then), [`SlotError::NothingToCommit`] if `tree` is the branch's
    /// own tree, [`SlotError::Git`] if git fails.
    pub fn commit_tree(
        &self,
        tree: &str,
        message: &str,
        author: &Identity,
        committer: &Identity,
    ) -> Result<String, SlotError> {
        self.ensure_untampered()?;
        let git = self.authored_by(author, committer);
        let branch = format!("refs/heads/{}", self.branch);
        let parent = git::resolve(&self.path, &format!("{branch}^{{commit}}"))?;
        let own = git::resolve(&self.path, &format!("{parent}^{{tree}}"))?;
        if own == tree {
            return Err(SlotError::NothingToCommit {
                path: self.path.clone(),
            });
        }
        let commit = git
            .run_with_input(
                &["commit-tree", tree, "-p", &parent],
                Some(message.as_bytes()),
            )?
            .text();
        git.run(&["update-ref", &branch, &commit, &parent])?;
        Ok(commit)
    }

    /// [`Slot::snapshot_tree`] from a walk of the checkout taken now
    /// (`walked`): instead of `git add -A` reading every file's metadata
    /// again, only what the walk shows changed against the index's stat
    /// cache ([`crate::snapshot::Snapshot::work_changes_against`]) is given to `git update-index`,
    /// new files that git ignores left out (issue 12: the cost follows the
    /// change, not the tree). Falls back to [`Slot::snapshot_tree`] when the
    /// index cannot stand for that look, a `.gitignore` changed (files
    /// ignored before may not be now), or git refuses the update.
    ///
    /// # Errors
    /// As [`Slot::snapshot_tree`].
    pub fn snapshot_tree_from(&self, walked: &Snapshot) -> Result<String, SlotError> {
        let seed = seed_index_file(&self.path);
        let Some(changes) = walked.work_changes_against(&seed) else {
            return self.snapshot_tree();
        };
        let is_ignore_file = |p: &Vec<u8>| p.rsplit(|b| *b == b'/').next() == Some(b".gitignore");
        if changes
            .tracked
            .iter()
            .chain(&changes.untracked)
            .any(is_ignore_file)
        {
            return self.snapshot_tree();
        }
        let ignored = match changes.untracked.is_empty() {
            true => Default::default(),
            false => self.ignored(&changes.untracked)?,
        };
        let mut paths: Vec<&Vec<u8>> = changes
            .tracked
            .iter()
            .chain(changes.untracked.iter().filter(|p| !ignored.contains(*p)))
            .collect();
        paths.sort();
        let input = nul_joined(paths);
        let index = self.seeded_index("snapshot")?;
        let git = self.on_index(&index);
        let update = [
            "update-index",
            "--add",
            "--remove",
            "--replace",
            "-z",
            "--stdin",
        ];
        let result = match input.is_empty() {
            true => Ok(()),
            false => git.run_with_input(&update, Some(&input)).map(drop),
        }
        .and_then(|()| git.text(&["write-tree"]));
        let _ = std::fs::remove_file(&index);
        match result {
            Ok(tree) => Ok(tree.trim().to_string()),
            Err(e) => {
                tracing::warn!(slot = %self.path.display(), "updating the tree from the walk failed, reading the whole tree: {e}");
                self.snapshot_tree()
            }
        }
    }

    /// Puts the working tree back to a [`Slot::snapshot_tree`]: files changed
    /// or deleted since come back, files added since are removed; ignored
    /// files (build caches) stay, and the slot's own index is untouched.
    /// HEAD is put back too — on the item's branch at [`Slot::tip`], where
    /// it is between the writer's rounds — for a gate that commits, switches
    /// branches or detaches HEAD (`git commit`, `git checkout`): otherwise
    /// the reviewer would see an empty diff and the runner commit on another
    /// branch than the one it pushes.
    ///
    /// # Errors
    /// [`SlotError::Git`] when git cannot write the tree or move HEAD.
    pub fn restore_tree(&self, tree: &str) -> Result<(), SlotError> {
        let git = self.git();
        let branch = format!("refs/heads/{}", self.branch);
        let on_branch = git
            .text(&["symbolic-ref", "-q", "HEAD"])
            .is_ok_and(|r| r.trim() == branch);
        let tip = self.tip();
        let at_tip = git.rev_parse(&branch).is_ok_and(|c| c == tip);
        if !(on_branch && at_tip) {
            tracing::warn!(slot = %self.path.display(), "a gate command moved HEAD or switched branches; putting the item's branch back");
            git.run(&["update-ref", "--no-deref", &branch, tip])?;
            git.run(&["symbolic-ref", "HEAD", &branch])?;
        }
        // Only what differs from the snapshot is written back: a private
        // index seeded from the real one (its stat cache spares re-reading
        // unchanged files) takes in the working tree as it is now, then
        // `read-tree --reset -u` moves it to the snapshot, writing the files
        // whose content differs and removing those the snapshot lacks. A
        // checkout of every file instead would cost a rewrite of the whole
        // tree per round and leave the stat cache stale for every later read.
        let index = self.seeded_index("restore")?;
        let git = self.on_index(&index);
        let result = git
            .run(&["add", "-A", "--", "."])
            .and_then(|_| git.run(&["read-tree", "--reset", "-u", tree]))
            .and_then(|_| git.run(&["clean", "-fdq"]));
        let _ = std::fs::remove_file(&index);
        result?;
        Ok(())
    }
}
