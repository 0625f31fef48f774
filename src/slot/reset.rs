//! Preparing a slot for the next item: clone or reuse, pin the base, reset
//! the checkout and undo what the last writer did (files, submodules,
//! stragglers), or remove a broken slot to clone it again.
//!
//! Not for the writer's branch (`branch`) or trees (`tree`).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::error::{SlotError, is_fetch};
use super::fingerprint::{
    OPERATION_STATE, fingerprint_file, git_dir_changes, git_dir_fingerprint, nul_joined,
};
use super::index::{copy_keeping_mtime, seed_index_file};
use super::model::{NETWORK_TIMEOUT, Slot};
use super::stragglers::kill_stragglers;
use crate::git::{self, Git, GitError};
use crate::snapshot::{ResetPlan, Snapshot};

/// Where and how [`Slot::prepare_at`] makes a checkout.
pub struct PrepareAt<'a> {
    /// The checkout's directory (under the data directory).
    pub dir: &'a Path,
    /// The user's repository (objects are borrowed from it, never written).
    pub repo: &'a Path,
    /// The remote's name in the user's repository.
    pub remote: &'a str,
    /// The remote's (fetch URL, push URL), read once when the run started.
    pub urls: (String, String),
    /// The base branch.
    pub base: &'a str,
    /// The item's branch to create.
    pub branch: &'a str,
    /// The GitHub token for git's askpass helper, if any.
    pub token: Option<&'a str>,
    /// Set when a signal came: git is killed at once.
    pub stop: Option<Arc<AtomicBool>>,
    /// The run's base commit (40 hex) once an earlier item pinned it
    /// (docs/loop.md#checkout): a slot that has it checks it out without
    /// fetching the base again.
    pub pinned: Option<&'a str>,
    /// The slot as the last item left it, watched since
    /// ([`KeptWalk`]): the reset undoes just what changed.
    pub kept: Option<KeptWalk>,
}

/// A walk of a slot kept after the item that took it, with inotify's
/// watch of the slot since then, so that the next item's reset undoes only
/// what changed instead of `git checkout --force` and `git clean -ffdx`
/// reading all of it (issue 12; docs/loop.md#checkout).
pub struct KeptWalk {
    snapshot: Snapshot,
    follow: crate::snapshot::Follow,
    /// The commit whose tree the slot's seed index holds (40 hex).
    base: String,
}

impl KeptWalk {
    /// `snapshot` of `slot`, taken with `follow`; `None` for a slot whose
    /// branch does not sit at its base (a tended PR's).
    pub fn new(
        slot: &Slot,
        snapshot: Snapshot,
        follow: crate::snapshot::Follow,
    ) -> Option<KeptWalk> {
        (slot.tip.is_none() && slot.seed_at_base).then(|| KeptWalk {
            snapshot,
            follow,
            base: slot.base_commit.clone(),
        })
    }
}

impl std::fmt::Debug for KeptWalk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptWalk")
            .field("base", &self.base)
            .finish()
    }
}

impl Slot {
    /// Prepares the slot at `path` for one item: clones it from `user_repo` if
    /// needed, fetches `<base>` from the user's remote `remote` (its URL read
    /// from the user's config), resets and cleans it to that commit and
    /// checks out `branch` there (created or moved, by force). Other local
    /// branches left by earlier items are deleted. `token`, when given, is
    /// answered to https prompts (see [`Git::token`]).
    ///
    /// An existing slot is reused when its `.git/config` and hooks match the
    /// fingerprint recorded when it was last prepared; otherwise, or when the
    /// reset fails, it is removed and cloned again (`recloned_because` says
    /// why). The user's repository is only read (docs/loop.md#checkout, docs/files.md).
    ///
    /// `stop`, when given, kills the running git command (the clone, the
    /// fetch, the checkout) as soon as it turns true (a signal, docs/limits.md#signals). A
    /// slot stopped while being cloned is removed; one stopped while being
    /// reset is kept for the next run to reset again.
    ///
    /// # Errors
    /// [`SlotError::Git`] when the user's repository or remote cannot be read,
    /// the fetch fails, or a fresh clone cannot be reset (a stopped command
    /// is [`GitError::Stopped`]); [`SlotError::Io`] when the slot directory
    /// cannot be created or removed.
    pub fn prepare(
        path: &Path,
        user_repo: &Path,
        remote: &str,
        base: &str,
        branch: &str,
        token: Option<&str>,
        stop: Option<Arc<AtomicBool>>,
    ) -> Result<Slot, SlotError> {
        let urls = git::remote_urls(user_repo, remote)?;
        Slot::prepare_at(PrepareAt {
            dir: path,
            repo: user_repo,
            remote,
            urls,
            base,
            branch,
            token,
            stop,
            pinned: None,
            kept: None,
        })
    }

    /// As [`Slot::prepare`], with the remote's (fetch URL, push URL) given
    /// instead of read from the user's repository now: a run reads them once
    /// at its start, so a `git remote set-url` in the user's checkout during
    /// the night (by a person, or by an agent that reached it) does not send
    /// later items — and the token — somewhere else.
    ///
    /// # Errors
    /// As [`Slot::prepare`].
    pub fn prepare_at(at: PrepareAt<'_>) -> Result<Slot, SlotError> {
        let PrepareAt {
            dir: path,
            repo: user_repo,
            remote,
            urls,
            base,
            branch,
            token,
            stop,
            pinned,
            kept,
        } = at;
        let (fetch_url, push_url) = urls;
        let mut slot = Slot {
            path: path.to_path_buf(),
            remote: remote.to_string(),
            fetch_url,
            push_url,
            base: base.to_string(),
            base_commit: String::new(),
            branch: branch.to_string(),
            git_dir_fingerprint: String::new(),
            reused: false,
            undone: false,
            tip: None,
            recloned_because: None,
            stop,
            pinned: pinned.map(str::to_string),
            gitlinks: None,
            seed_at_base: false,
            lease: None,
        };
        let exists = std::fs::symlink_metadata(path).is_ok();
        if exists {
            kill_stragglers(path);
            match slot.reuse_check() {
                Ok(()) => match slot.reset(token, kept) {
                    Ok(()) => {
                        slot.reused = true;
                        slot.stop = None;
                        return Ok(slot);
                    }
                    // A failed fetch is the network's fault, not the slot's;
                    // a stopped command is nobody's.
                    Err(SlotError::Git(e))
                        if matches!(e, GitError::Stopped { .. })
                            || (slot.base_commit.is_empty() && is_fetch(&e)) =>
                    {
                        return Err(SlotError::Git(e));
                    }
                    Err(e) => slot.recloned_because = Some(format!("reset failed: {e}")),
                },
                Err(reason) => slot.recloned_because = Some(reason),
            }
            tracing::warn!(slot = %path.display(), reason = ?slot.recloned_because, "removing broken slot");
            slot.remove()?;
        }
        if let Err(e) = slot
            .clone_from(user_repo)
            .and_then(|()| slot.reset(token, None))
        {
            // Leave nothing half-made behind; the next run starts clean.
            let _ = slot.remove();
            return Err(e);
        }
        slot.stop = None;
        Ok(slot)
    }

    /// Why an existing slot cannot be reused, if it cannot.
    fn reuse_check(&self) -> Result<(), String> {
        let recorded = std::fs::read_to_string(fingerprint_file(&self.path))
            .map_err(|_| "no recorded fingerprint".to_string())?;
        let now = git_dir_fingerprint(&self.path);
        if recorded.trim() != now {
            return Err(format!(
                "{} changed since the slot was prepared",
                git_dir_changes(recorded.trim(), &now).join(", ")
            ));
        }
        git::open(&self.path).map_err(|e| format!("not a git repository: {e}"))?;
        Ok(())
    }

    fn clone_from(&self, user_repo: &Path) -> Result<(), SlotError> {
        let parent = self.path.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent).map_err(|source| SlotError::Io {
            context: "creating the slots directory",
            path: parent.to_path_buf(),
            source,
        })?;
        let target = self.path.to_string_lossy().into_owned();
        let source = user_repo.to_string_lossy().into_owned();
        let mut git = Git::new(parent);
        if let Some(stop) = &self.stop {
            git = git.stop_on(stop.clone());
        }
        git.run(&[
            "clone",
            "--shared",
            "--no-checkout",
            "--quiet",
            "--origin",
            &self.remote,
            "--",
            &source,
            &target,
        ])?;
        self.set_remote_urls()?;
        let git = self.git();
        // The clone copied the user's local branches as remote-tracking refs
        // (and HEAD's branch as a local one); they are not the remote's and
        // only mislead an agent running `git log origin/main`.
        let refs = git.text(&["for-each-ref", "--format=%(refname)", "refs/remotes/"])?;
        let deletes: String = refs.lines().map(|r| format!("delete {r}\n")).collect();
        if !deletes.is_empty() {
            git.run_with_input(
                &["update-ref", "--no-deref", "--stdin"],
                Some(deletes.as_bytes()),
            )?;
        }
        // Sample hooks are inert, but an empty hooks dir is easier to audit.
        let hooks = self.path.join(".git/hooks");
        if let Ok(entries) = std::fs::read_dir(&hooks) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    fn set_remote_urls(&self) -> Result<(), SlotError> {
        let git = self.git();
        let name = self.remote.as_str();
        // Drop any earlier push URL first; the fetch URL must exist to set one.
        if git
            .run(&["config", "--get", &format!("remote.{name}.url")])
            .is_err()
        {
            git.run(&["remote", "add", "--", name, &self.fetch_url])?;
        }
        let _ = git.run(&["config", "--unset-all", &format!("remote.{name}.pushurl")]);
        git.run(&["remote", "set-url", "--", name, &self.fetch_url])?;
        if self.push_url != self.fetch_url {
            git.run(&["remote", "set-url", "--push", "--", name, &self.push_url])?;
        }
        Ok(())
    }

    /// Fetch, forced checkout of the branch at the fetched base, clean, prune
    /// other local branches, record the fingerprint.
    fn reset(&mut self, token: Option<&str>, kept: Option<KeptWalk>) -> Result<(), SlotError> {
        self.base_commit.clear();
        // We fetch and push by URL, but agents read the slot's remote (`git
        // log origin/main`, `git remote -v`): keep it the user's current one.
        // (Without a password: git is never given one in a URL, see
        // `git::split_url_password`, so the slot's config holds none.)
        if git::remote_urls(&self.path, &self.remote).ok()
            != Some((
                git::without_password(&self.fetch_url),
                git::without_password(&self.push_url),
            ))
        {
            self.set_remote_urls()?;
        }
        let git = self.git();
        // The run's pinned base is all an item needs: no round trip to the
        // remote when the slot has it already.
        match self.pinned.clone() {
            Some(c) if self.has_object(&format!("{c}^{{commit}}")) => self.base_commit = c,
            _ => self.base_commit = self.fetch_base(token)?,
        }
        let kept = kept.filter(|k| k.base == self.base_commit);
        self.undone = kept.is_some_and(|k| self.undo_since(k));
        if !self.undone {
            self.check_out_clean(&self.base_commit)?;
        }
        self.record_index();
        self.seed_at_base = true;
        self.empty_submodule_dirs()?;
        let current = format!("refs/heads/{}", self.branch);
        let refs = git::local_branches(&self.path)?;
        let deletes: String = refs
            .iter()
            .filter(|r| **r != current)
            .map(|r| format!("delete {r}\n"))
            .collect();
        if !deletes.is_empty() {
            git.run_with_input(
                &["update-ref", "--no-deref", "--stdin"],
                Some(deletes.as_bytes()),
            )?;
        }
        self.record_fingerprint()
    }

    /// What `git checkout --force -B <branch> <base>` and `git clean
    /// -ffdx` do, for only what changed since `kept` was walked: its walk
    /// brought up to date from inotify's events, held against the seed
    /// index (git's own record of the base tree at the last reset). True
    /// when done; false when the events or the walk cannot tell, or a step
    /// failed — the caller then resets with git, which also repairs a
    /// partial undo.
    fn undo_since(&self, kept: KeptWalk) -> bool {
        // A merge, cherry-pick or revert in progress: `git checkout` ends
        // it (and maybe the sequencer's state with it), as the next item's
        // commit needs.
        let git_dir = self.path.join(".git");
        if OPERATION_STATE
            .iter()
            .any(|name| std::fs::symlink_metadata(git_dir.join(name)).is_ok())
        {
            return false;
        }
        let seed = seed_index_file(&self.path);
        let Some(plan) = kept
            .follow
            .refresh_owned(kept.snapshot)
            .and_then(|now| now.reset_plan(&seed))
        else {
            return false;
        };
        match self.undo(&plan, &seed) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(slot = %self.path.display(), "undoing the last item failed, resetting with git: {e}");
                false
            }
        }
    }

    /// Removes `plan.remove`, puts the seed index back as the slot's index,
    /// checks `plan.restore` out from it, and points HEAD at the item's
    /// branch, created or moved to the base.
    fn undo(&self, plan: &ResetPlan, seed: &Path) -> Result<(), SlotError> {
        // A HEAD or branch ref the writer swapped for a link is removed
        // first: git refuses a HEAD that is one, and libgit2 writes a ref
        // through it (its lock file follows the link) — outside the slot.
        let branch = format!("refs/heads/{}", self.branch);
        let git_dir = self.path.join(".git");
        unlink_links_along(&git_dir, Path::new(&branch))?;
        if unlink_links_along(&git_dir, Path::new("HEAD"))? {
            let head = git_dir.join("HEAD");
            std::fs::write(&head, format!("ref: {branch}\n")).map_err(|source| SlotError::Io {
                context: "writing HEAD again",
                path: head,
                source,
            })?;
        }
        for p in &plan.remove {
            let path = self.path.join(std::ffi::OsStr::from_bytes(p));
            // Neither follows a link: a directory swapped for one is
            // removed as the link.
            let gone = match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
                Ok(_) => std::fs::remove_file(&path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            gone.map_err(|source| SlotError::Io {
                context: "removing what the last item added",
                path,
                source,
            })?;
        }
        let index = self.path.join(".git").join("index");
        copy_keeping_mtime(seed, &index).map_err(|source| SlotError::Io {
            context: "putting the index of the base back",
            path: index,
            source,
        })?;
        let git = self.git();
        if !plan.restore.is_empty() {
            let input = nul_joined(&plan.restore);
            let args = ["checkout-index", "--force", "-u", "-z", "--stdin"];
            git.run_with_input(&args, Some(&input))?;
        }
        // HEAD on the item's branch at the base, in-process (two git
        // processes less per item).
        let err = |context| {
            let path = self.path.clone();
            move |source| {
                SlotError::Git(GitError::Repo {
                    context,
                    path,
                    source,
                })
            }
        };
        let repo = git::open(&self.path)?;
        let base = git2::Oid::from_str(&self.base_commit).map_err(err("reading the base"))?;
        repo.reference(&branch, base, true, "nightshift: reset")
            .map_err(err("moving the item's branch"))?;
        repo.set_head(&branch)
            .map_err(err("pointing HEAD at the item's branch"))?;
        Ok(())
    }

    /// Fetches `<remote>/<base>` into its remote-tracking ref; returns
    /// its commit (40 hex).
    fn fetch_base(&self, token: Option<&str>) -> Result<String, SlotError> {
        let tracking = format!("refs/remotes/{}/{}", self.remote, self.base);
        let refspec = format!("+refs/heads/{}:{tracking}", self.base);
        self.git()
            .token(token)
            .timeout(NETWORK_TIMEOUT)
            .fetch(&self.fetch_url, &refspec)?;
        Ok(self.git().rev_parse(&tracking)?)
    }

    /// Moves the prepared slot to `commit`, the base the run took once at
    /// its start (docs/loop.md): every item of a run is built from that
    /// commit only, whatever `<remote>/<base>` became since (a push during
    /// the night, by a person or by an agent). Fetches the commit by id when
    /// the slot lacks it (a fresh clone after the base moved). No-op when
    /// the slot is already there.
    ///
    /// # Errors
    /// [`SlotError::Git`] when the commit cannot be fetched or checked out;
    /// [`SlotError::Io`] when the fingerprint cannot be recorded.
    pub fn pin_base(&mut self, commit: &str, token: Option<&str>) -> Result<(), SlotError> {
        if self.base_commit == commit {
            return Ok(());
        }
        if !self.has_object(&format!("{commit}^{{commit}}")) {
            self.git().token(token).timeout(NETWORK_TIMEOUT).run(&[
                "fetch",
                "--quiet",
                "--no-tags",
                "--",
                &self.fetch_url,
                commit,
            ])?;
        }
        self.check_out_clean(commit)?;
        self.record_index();
        self.seed_at_base = true;
        self.base_commit = commit.to_string();
        self.tip = None;
        self.record_fingerprint()
    }

    /// Empties the directories of submodules (gitlinks). Slots never
    /// initialise submodules, and `git clean` does not look inside their
    /// paths, so whatever an agent wrote there would survive into the next
    /// item and the next night.
    fn empty_submodule_dirs(&self) -> Result<(), SlotError> {
        for path in self.filled_submodule_dirs()? {
            let dir = self.path.join(&path);
            std::fs::remove_dir_all(&dir)
                .and_then(|()| std::fs::create_dir(&dir))
                .map_err(|source| SlotError::Io {
                    context: "emptying a submodule directory",
                    path: dir.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    /// The submodule paths (relative, `/`-separated) whose directory holds
    /// anything. Submodules are not checked out in a slot, so after
    /// [`Slot::prepare`] this is what an agent put there: work that git
    /// does not see and no commit of this checkout can carry.
    ///
    /// # Errors
    /// [`SlotError::Git`] when the index cannot be listed.
    pub fn filled_submodule_dirs(&self) -> Result<Vec<String>, SlotError> {
        // Read in-process: `git ls-files --stage` prints every file of a
        // big repository to find the few gitlinks, and libgit2 checks the
        // whole index's SHA-1 first.
        let read = || crate::snapshot::index_gitlinks(&self.path.join(".git").join("index"));
        let links = match self.gitlinks.clone().or_else(read) {
            Some(links) => links,
            None => {
                let repo = git::open(&self.path)?;
                let index = repo.index().map_err(|source| GitError::Repo {
                    context: "reading the index",
                    path: self.path.clone(),
                    source,
                })?;
                index
                    .iter()
                    .filter(|e| e.mode == 0o160000)
                    .map(|e| e.path)
                    .collect()
            }
        };
        Ok(links
            .into_iter()
            .map(|p| String::from_utf8_lossy(&p).into_owned())
            .filter(|p| {
                let dir = self.path.join(p);
                dir.is_dir()
                    && std::fs::read_dir(&dir)
                        .map(|mut d| d.next().is_some())
                        .unwrap_or(false)
            })
            .collect())
    }

    /// Leaves nothing of a failed item behind (docs/loop.md#ship-or-retry): the working tree is
    /// reset and cleaned to the base commit (detached) and the local branch
    /// deleted. A tampered slot, or one where that fails, is removed entirely
    /// (it will be cloned again when next prepared).
    ///
    /// # Errors
    /// [`SlotError::Io`] only when removing the slot directory fails.
    pub fn discard(&self) -> Result<(), SlotError> {
        if self.is_tampered() || self.reset_to_base().is_err() {
            return self.remove();
        }
        Ok(())
    }

    fn reset_to_base(&self) -> Result<(), SlotError> {
        let git = self.git();
        git.run(&[
            "checkout",
            "--quiet",
            "--force",
            "--detach",
            &self.base_commit,
        ])?;
        git.run(&["clean", "-ffdxq"])?;
        self.empty_submodule_dirs()?;
        let refname = format!("refs/heads/{}", self.branch);
        if git
            .run(&["show-ref", "--verify", "--quiet", &refname])
            .is_ok()
        {
            git.run(&["update-ref", "-d", &refname])?;
        }
        Ok(())
    }

    /// Removes the slot directory and its recorded fingerprint.
    fn remove(&self) -> Result<(), SlotError> {
        let _ = std::fs::remove_file(fingerprint_file(&self.path));
        let _ = std::fs::remove_file(seed_index_file(&self.path));
        match std::fs::symlink_metadata(&self.path) {
            Err(_) => Ok(()),
            Ok(m) => {
                let removed = if m.is_dir() {
                    std::fs::remove_dir_all(&self.path)
                } else {
                    std::fs::remove_file(&self.path)
                };
                removed.map_err(|source| SlotError::Io {
                    context: "removing the slot",
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }
}

/// Removes every symbolic link (and, at the end, anything not a regular
/// file) along `rel` below `git_dir`, e.g. `refs/heads/nightshift/x`: the
/// link itself, never what it points at. Missing parts are fine. True when
/// something was removed.
///
/// # Errors
/// [`SlotError::Io`] when an entry cannot be read or removed.
fn unlink_links_along(git_dir: &Path, rel: &Path) -> Result<bool, SlotError> {
    let mut at = git_dir.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let m = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(source) => {
                return Err(SlotError::Io {
                    context: "reading a ref of the slot",
                    path: at,
                    source,
                });
            }
        };
        let last = i + 1 == parts.len();
        if !m.file_type().is_symlink() && (m.is_file() || !last) {
            continue;
        }
        // A link's own metadata is never a directory's: the link goes, not
        // what it points at.
        let gone = if m.is_dir() {
            std::fs::remove_dir_all(&at)
        } else {
            std::fs::remove_file(&at)
        };
        gone.map_err(|source| SlotError::Io {
            context: "removing a ref the writer swapped for a link",
            path: at.clone(),
            source,
        })?;
        return Ok(true);
    }
    Ok(false)
}
