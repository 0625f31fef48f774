//! Proof of work: what the writer actually changed, read from git, not from
//! the agent's word (docs/loop.md#proof), and the reviewer's read-only check (docs/agents.md#read-only-reviewer).
//!
//! A [`Proof`] compares the slot after a writer round with what was recorded
//! before it ([`RoundStart`]): the files changed since the base commit in the
//! working tree (untracked files and deletions included, ignored files not),
//! with line counts; files the writer claimed that git does not show; files
//! outside the item's scope; whether HEAD moved, the branch was switched or
//! the checkout's `.git` config/hooks were touched; and a hash of the whole
//! diff for no-progress detection. Everything is read in-process with git2,
//! which never runs hooks, filters or fsmonitor, so reading a tampered slot
//! is safe. This module decides nothing about outcomes beyond naming the
//! broken rule; the item loop (`run`) does.
//!
//! It also reads the change's diff for what a person should weigh before a
//! merge (changed public declarations, links out of the repository, edits to
//! what the gate runs); the PR card (`report`) shows them.

use std::collections::BTreeSet;
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::slot::{self, Slot};

/// A failed proof or fingerprint.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// A git2 read of the slot failed.
    #[error("{context} in {}: {source}", path.display())]
    Repo {
        context: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: git2::Error,
    },
    /// The checkout could not be walked.
    #[error("cannot read the checkout {}: {source}", path.display())]
    Walk {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `scope:` glob does not compile.
    #[error("bad scope glob `{glob}`: {source}")]
    Scope {
        glob: String,
        #[source]
        source: globset::Error,
    },
}

/// What was true of the slot before the writer ran (recorded by the runner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundStart {
    /// The base commit the item's branch started from (40 hex).
    pub base: String,
    /// HEAD's commit before the round (40 hex).
    pub head: String,
    /// The ref HEAD pointed at (e.g. `refs/heads/nightshift/x-1a2b3c4d`),
    /// `None` if it was detached.
    pub branch: Option<String>,
    /// [`slot::git_dir_fingerprint`] before the round.
    pub git_dir_fingerprint: String,
}

impl RoundStart {
    /// Records HEAD, its branch and the git-dir fingerprint of `slot` now.
    ///
    /// # Errors
    /// [`ProofError::Repo`] if the slot is not a repository or HEAD is unborn.
    pub fn record(slot: &Slot) -> Result<RoundStart, ProofError> {
        let repo = open(&slot.path)?;
        let (head, branch) = head_state(&repo);
        let head = head.ok_or_else(|| ProofError::Repo {
            context: "reading HEAD before the round",
            path: slot.path.clone(),
            source: git2::Error::from_str("HEAD does not resolve to a commit"),
        })?;
        Ok(RoundStart {
            base: slot.base_commit.clone(),
            head,
            branch,
            git_dir_fingerprint: slot::git_dir_fingerprint(&slot.path),
        })
    }
}

/// How a file changed since the base commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeStatus {
    /// New (tracked or untracked).
    Added,
    Modified,
    Deleted,
    /// Moved from `old_path` (content similar enough for git to pair them).
    Renamed,
    /// A file became a link or the other way round.
    TypeChanged,
}

impl ChangeStatus {
    /// The one-letter form git uses (`A`, `M`, `D`, `R`, `T`).
    pub fn letter(self) -> char {
        match self {
            ChangeStatus::Added => 'A',
            ChangeStatus::Modified => 'M',
            ChangeStatus::Deleted => 'D',
            ChangeStatus::Renamed => 'R',
            ChangeStatus::TypeChanged => 'T',
        }
    }
}

/// One changed file, paths relative to the checkout root with `/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub path: String,
    /// The path before a rename.
    pub old_path: Option<String>,
    pub status: ChangeStatus,
    /// Lines added (0 for binary files).
    pub added: usize,
    /// Lines removed (0 for binary files).
    pub removed: usize,
    pub binary: bool,
}

/// The proof of one writer round, from git (docs/loop.md#proof).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// Base commit (40 hex).
    pub base: String,
    /// HEAD before the round (40 hex).
    pub head_before: String,
    /// HEAD after the round (40 hex; empty if it no longer resolves).
    pub head_after: String,
    /// The ref HEAD pointed at before and after (`None`: detached).
    pub branch_before: Option<String>,
    pub branch_after: Option<String>,
    /// Files changed since the base, in path order.
    pub changed: Vec<FileChange>,
    /// Paths the writer named that git shows no change for.
    pub claimed_not_in_git: Vec<String>,
    /// Changed paths (old and new side of renames) outside the scope globs.
    pub out_of_scope: Vec<String>,
    /// HEAD is not the commit recorded before the round (commit, reset, rebase).
    pub head_moved: bool,
    /// HEAD points at another branch, or is detached.
    pub branch_switched: bool,
    /// `.git/config` or `.git/hooks` changed during the round.
    pub git_dir_tampered: bool,
    /// Which parts of `.git` changed (e.g. `.git/info/exclude`), see
    /// [`slot::git_dir_changes`]; empty when none did.
    #[serde(default)]
    pub git_dir_changed: Vec<String>,
    /// SHA-256 (hex) of the full diff against the base, binary content
    /// included; equal for equal changes (no-progress detection, docs/loop.md#no-progress).
    pub diff_hash: String,
}

impl Proof {
    /// Collects the proof for the checkout at `worktree` after a writer
    /// round. `claimed` are the paths the writer said it changed (relative,
    /// `./x` or absolute under `worktree`); `scope` the item's `scope:` globs
    /// (empty: everything allowed; see [`Scope`]).
    ///
    /// # Errors
    /// [`ProofError::Scope`] for a bad glob; [`ProofError::Repo`] if the
    /// checkout or the base commit cannot be read.
    pub fn collect(
        worktree: &Path,
        start: &RoundStart,
        claimed: &[String],
        scope: &[String],
    ) -> Result<Proof, ProofError> {
        Proof::collect_against(worktree, start, Against::Worktree, claimed, scope)
    }

    /// As [`Proof::collect`], with the writer's work already written as the
    /// git tree `tree` (40 hex, a [`Slot::snapshot_tree`] of the checkout):
    /// the change is read from the base tree to that tree, which visits only
    /// the directories that differ instead of every file of the checkout
    /// (docs/loop.md#proof). The same change gives the same proof either way.
    ///
    /// # Errors
    /// As [`Proof::collect`]; [`ProofError::Repo`] also when `tree` is not a
    /// tree of the checkout's repository.
    pub fn collect_tree(
        worktree: &Path,
        start: &RoundStart,
        tree: &str,
        claimed: &[String],
        scope: &[String],
    ) -> Result<Proof, ProofError> {
        Proof::collect_against(worktree, start, Against::Tree(tree), claimed, scope)
    }

    fn collect_against(
        worktree: &Path,
        start: &RoundStart,
        against: Against<'_>,
        claimed: &[String],
        scope: &[String],
    ) -> Result<Proof, ProofError> {
        let scope = Scope::new(scope)?;
        let git_dir_changed = slot::git_dir_changes(
            &start.git_dir_fingerprint,
            &slot::git_dir_fingerprint(worktree),
        );
        let git_dir_tampered = !git_dir_changed.is_empty();
        let repo = open(worktree)?;
        let (head_after, branch_after) = head_state(&repo);
        let head_after = head_after.unwrap_or_default();
        let (changed, diff_hash) = diff_against(&repo, worktree, &start.base, against)?;

        let in_git: BTreeSet<&str> = changed
            .iter()
            .flat_map(|c| std::iter::once(c.path.as_str()).chain(c.old_path.as_deref()))
            .collect();
        let claimed_not_in_git: Vec<String> = claimed
            .iter()
            .filter_map(|c| normalize_claim(worktree, c))
            .filter(|c| !in_git.contains(c.as_str()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let out_of_scope: Vec<String> = in_git
            .iter()
            .filter(|p| !scope.allows(p))
            .map(|p| p.to_string())
            .collect();

        Ok(Proof {
            base: start.base.clone(),
            head_moved: head_after != start.head,
            head_before: start.head.clone(),
            head_after,
            branch_switched: branch_after.is_none() || branch_after != start.branch,
            branch_before: start.branch.clone(),
            branch_after,
            changed,
            claimed_not_in_git,
            out_of_scope,
            git_dir_tampered,
            git_dir_changed,
            diff_hash,
        })
    }

    /// The broken rules of the round, joined with `; `, or `None` when the
    /// writer kept them all: it must not commit or rewrite history, switch
    /// branch, touch the checkout's `.git` config or hooks, or change files
    /// outside scope (docs/loop.md#writer, docs/loop.md#proof, outcome `rule_broken`).
    pub fn rule_broken(&self) -> Option<String> {
        let mut reasons = Vec::new();
        if self.head_moved {
            let after = if self.head_after.is_empty() {
                "nothing"
            } else {
                short(&self.head_after)
            };
            reasons.push(format!(
                "the writer moved HEAD (commit or history rewrite): {} -> {after}",
                short(&self.head_before)
            ));
        }
        if self.branch_switched {
            let name =
                |b: &Option<String>| b.clone().unwrap_or_else(|| "detached HEAD".to_string());
            reasons.push(format!(
                "the writer switched branch: {} -> {}",
                name(&self.branch_before),
                name(&self.branch_after)
            ));
        }
        if self.git_dir_tampered {
            // A proof recorded before parts were named has none to show.
            let parts = if self.git_dir_changed.is_empty() {
                ".git config or hooks".to_string()
            } else {
                self.git_dir_changed.join(", ")
            };
            reasons.push(format!("the writer changed the checkout's {parts}"));
        }
        if !self.out_of_scope.is_empty() {
            reasons.push(format!(
                "files changed outside scope: {}",
                self.out_of_scope.join(", ")
            ));
        }
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    /// True when git shows no change against the base (outcome `no_changes`).
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }

    /// The limits on the change's size and reach the round broke, joined
    /// with `; `, or `None` (docs/loop.md#proof, outcome `rule_broken`):
    /// more files than `max_changed_files` (a rename counts once), more
    /// added plus removed lines than `max_diff_lines` (binary files count
    /// none), or a changed path (either side of a rename) under a
    /// `protected` glob and under no `allow` glob. The reasons name the
    /// counts and the files, from git.
    ///
    /// # Errors
    /// [`ProofError::Scope`] for a `protected` or `allow` glob that does not
    /// compile (the config and the backlog refuse those before any run).
    pub fn beyond_limits(&self, limits: &ChangeLimits<'_>) -> Result<Option<String>, ProofError> {
        let mut reasons = Vec::new();
        let files = self.changed.len() as u64;
        if files > limits.max_changed_files {
            let paths: Vec<&str> = self.changed.iter().map(|c| c.path.as_str()).collect();
            reasons.push(format!(
                "the change touches {files} files, above max_changed_files = {}: {}",
                limits.max_changed_files,
                listed(&paths)
            ));
        }
        let (added, removed) = self.changed.iter().fold((0u64, 0u64), |(a, r), c| {
            (a + c.added as u64, r + c.removed as u64)
        });
        if added + removed > limits.max_diff_lines {
            let mut by_size: Vec<&FileChange> = self.changed.iter().collect();
            by_size.sort_by_key(|c| std::cmp::Reverse(c.added + c.removed));
            let largest: Vec<String> = by_size
                .iter()
                .take(3)
                .map(|c| format!("{} +{} −{}", c.path, c.added, c.removed))
                .collect();
            reasons.push(format!(
                "the change adds and removes {} lines (+{added} −{removed}), above max_diff_lines = {}; largest: {}",
                added + removed,
                limits.max_diff_lines,
                largest.join(", ")
            ));
        }
        if !limits.protected.is_empty() {
            let protected = Scope::new(&limits.protected)?;
            let allowed = Scope::new(limits.allow)?;
            let hit: BTreeSet<&str> = self
                .changed
                .iter()
                .flat_map(|c| std::iter::once(c.path.as_str()).chain(c.old_path.as_deref()))
                .filter(|p| protected.matches(p) && !allowed.matches(p))
                .collect();
            if !hit.is_empty() {
                let hit: Vec<&str> = hit.into_iter().collect();
                reasons.push(format!(
                    "files changed in protected paths (nightshift's defaults and config `protected`; only an item's `allow:` lifts them): {}",
                    listed(&hit)
                ));
            }
        }
        Ok((!reasons.is_empty()).then(|| reasons.join("; ")))
    }
}

/// The limits on one change's size and reach (docs/loop.md#proof): the
/// contract's `max_changed_files` and `max_diff_lines`, its `protected`
/// globs and its `allow` globs (all matched as `scope:` globs are, see
/// [`Scope`]).
#[derive(Debug, Clone)]
pub struct ChangeLimits<'a> {
    /// Files the change may touch.
    pub max_changed_files: u64,
    /// Lines the change may add and remove together.
    pub max_diff_lines: u64,
    /// Globs of paths no change may touch (empty: none), unless `allow`
    /// matches the path.
    pub protected: Vec<String>,
    /// Globs of protected paths the item may change anyway (its `allow:`
    /// lines); they lift protection only, never widen the scope.
    pub allow: &'a [String],
}

/// At most ten of `paths`, comma-separated, and how many more there are.
fn listed(paths: &[&str]) -> String {
    let shown = paths
        .iter()
        .take(10)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    match paths.len().saturating_sub(10) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// The item's `scope:` globs, compiled (docs/backlog.md#details).
///
/// Matching follows `.gitignore` habits: `*` does not cross `/`, `**` does;
/// a leading `/` or `./` anchors at the root (as every pattern with a `/`
/// already is); a pattern also covers everything under it when it names a
/// directory (`src` or `src/`); a pattern without `/` (`*.md`) matches at
/// any depth. No globs means everything is in scope.
#[derive(Debug, Clone)]
pub struct Scope {
    set: Option<GlobSet>,
}

impl Scope {
    /// Compiles `globs`.
    ///
    /// # Errors
    /// [`ProofError::Scope`] naming the first glob that does not compile.
    pub fn new(globs: &[String]) -> Result<Scope, ProofError> {
        if globs.is_empty() {
            return Ok(Scope { set: None });
        }
        let mut builder = GlobSetBuilder::new();
        for glob in globs {
            let trimmed = glob.trim();
            let anchored = trimmed.starts_with('/') || trimmed.starts_with("./");
            let pat = trimmed
                .trim_start_matches("./")
                .trim_start_matches('/')
                .trim_end_matches('/');
            let mut forms = vec![pat.to_string(), format!("{pat}/**")];
            if !anchored && !pat.contains('/') {
                forms.push(format!("**/{pat}"));
                forms.push(format!("**/{pat}/**"));
            }
            for form in forms {
                let compiled = GlobBuilder::new(&form)
                    .literal_separator(true)
                    .build()
                    .map_err(|source| ProofError::Scope {
                        glob: glob.clone(),
                        source,
                    })?;
                builder.add(compiled);
            }
        }
        let set = builder.build().map_err(|source| ProofError::Scope {
            glob: globs.join(" "),
            source,
        })?;
        Ok(Scope { set: Some(set) })
    }

    /// True if the writer may change `path` (relative, `/`-separated).
    pub fn allows(&self, path: &str) -> bool {
        self.set.as_ref().is_none_or(|s| s.is_match(path))
    }

    /// True if a glob matches `path` (relative, `/`-separated); no globs
    /// match nothing (config `protected`).
    pub fn matches(&self, path: &str) -> bool {
        self.set.as_ref().is_some_and(|s| s.is_match(path))
    }
}

/// The checkout's state before or after the reviewer ran, by metadata (see
/// [`crate::snapshot`]): every entry under `worktree` — tracked, untracked
/// and ignored files, `.git` whole — by kind, inode, size, mode, times and
/// link target, read without reading the files. Two of them compared
/// ([`crate::snapshot::Snapshot::changes_since`]) show whether the reviewer
/// changed anything (docs/security.md: read-only is verified independently
/// of the agent) — also in an ignored path, such as a planted
/// `node_modules/` module or build output the next round's gate would run,
/// and also a write that keeps the size and puts the modification time
/// back. Taking it reads no file but `.git/index` and writes nothing.
///
/// # Errors
/// [`ProofError::Walk`] if `worktree` itself cannot be read.
pub fn worktree_fingerprint(worktree: &Path) -> Result<crate::snapshot::Snapshot, ProofError> {
    crate::snapshot::Snapshot::take(worktree).map_err(|source| ProofError::Walk {
        path: worktree.to_path_buf(),
        source,
    })
}

/// Changed or new files (untracked included, ignored excluded) of `limit`
/// bytes or more in the checkout at `worktree`, as `(path, size in bytes)` in
/// path order. It reads sizes only, no content, so it is quick where
/// [`Proof::collect`] would spend a minute diffing a 200 MB file.
///
/// # Errors
/// [`ProofError::Repo`] if `worktree` is not a repository or its status
/// cannot be read.
pub fn files_of_at_least(worktree: &Path, limit: u64) -> Result<Vec<(String, u64)>, ProofError> {
    let repo = open(worktree)?;
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true)
        .update_index(false);
    let statuses = repo
        .statuses(Some(&mut opts))
        .map_err(|source| ProofError::Repo {
            context: "reading the status",
            path: worktree.to_path_buf(),
            source,
        })?;
    let mut big: Vec<(String, u64)> = statuses
        .iter()
        .filter_map(|e| {
            let path = String::from_utf8_lossy(e.path_bytes()).into_owned();
            let meta = std::fs::symlink_metadata(worktree.join(&path)).ok()?;
            (meta.is_file() && meta.len() >= limit).then_some((path, meta.len()))
        })
        .collect();
    big.sort();
    Ok(big)
}

fn open(path: &Path) -> Result<git2::Repository, ProofError> {
    git2::Repository::open(path).map_err(|source| ProofError::Repo {
        context: "opening the checkout",
        path: path.to_path_buf(),
        source,
    })
}

/// HEAD's commit (if it resolves) and the ref it points at (if not detached).
fn head_state(repo: &git2::Repository) -> (Option<String>, Option<String>) {
    let commit = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .ok()
        .map(|c| c.id().to_string());
    let branch = repo.find_reference("HEAD").ok().and_then(|r| {
        r.symbolic_target_bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    });
    (commit, branch)
}

/// The writer's claimed path as a checkout-relative `/` path, or `None` for
/// an empty claim.
fn normalize_claim(worktree: &Path, claim: &str) -> Option<String> {
    let claim = claim.trim();
    let relative = Path::new(claim)
        .strip_prefix(worktree)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| claim.to_string());
    let mut s = relative.as_str();
    while let Some(rest) = s.strip_prefix("./") {
        s = rest;
    }
    let s = s.trim_start_matches('/');
    (!s.is_empty()).then(|| s.to_string())
}

/// What the base is compared with for a proof.
#[derive(Clone, Copy)]
enum Against<'a> {
    /// The working tree, through the index.
    Worktree,
    /// A tree (40 hex) written from the working tree.
    Tree(&'a str),
}

/// The changed files between the base tree and the working tree (through the
/// index, so staged and unstaged changes both count; untracked files count
/// as added) or a tree written from it, and the hash of the full diff.
fn diff_against(
    repo: &git2::Repository,
    worktree: &Path,
    base: &str,
    against: Against<'_>,
) -> Result<(Vec<FileChange>, String), ProofError> {
    let err = |context| {
        move |source| ProofError::Repo {
            context,
            path: worktree.to_path_buf(),
            source,
        }
    };
    let base_tree = git2::Oid::from_str(base)
        .and_then(|oid| repo.find_commit(oid))
        .and_then(|c| c.tree())
        .map_err(err("reading the base commit"))?;
    let mut opts = git2::DiffOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .include_typechange(true)
        .ignore_submodules(true)
        .show_binary(true);
    let mut diff = match against {
        Against::Worktree => repo
            .diff_tree_to_workdir_with_index(Some(&base_tree), Some(&mut opts))
            .map_err(err("diffing the working tree against the base"))?,
        Against::Tree(tree) => {
            // Each file's diff looks up its attributes (the diff driver),
            // and libgit2 would load and checksum the whole `.git/index`
            // for them: 5 MB and 30 ms on 50,000 files. Two trees need no
            // index; attributes come from the working tree's files.
            let mut empty = git2::Index::new().map_err(err("making an empty index"))?;
            repo.set_index(&mut empty)
                .map_err(err("making an empty index"))?;
            let tree = git2::Oid::from_str(tree)
                .and_then(|oid| repo.find_tree(oid))
                .map_err(err("reading the writer's tree"))?;
            match tree_diff(repo, &base_tree, &tree, Some(&mut opts))
                .map_err(err("diffing the writer's tree against the base"))?
            {
                Some(diff) => diff,
                None => return Ok((Vec::new(), hex::encode(Sha256::digest(b"")))),
            }
        }
    };
    let mut find = git2::DiffFindOptions::new();
    find.renames(true).for_untracked(true);
    diff.find_similar(Some(&mut find))
        .map_err(err("finding renames"))?;

    let mut changed = Vec::new();
    let mut h = Sha256::new();
    for idx in 0..diff.deltas().len() {
        let Some(mut patch) =
            git2::Patch::from_diff(&diff, idx).map_err(err("reading a file's diff"))?
        else {
            continue;
        };
        if let Some(change) =
            file_change(&mut patch, &mut h).map_err(err("reading a file's diff"))?
        {
            changed.push(change);
        }
    }
    changed.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((changed, hex::encode(h.finalize())))
}

/// libgit2's diff of the trees `old` and `new`, limited to the paths that
/// differ ([`changed_paths`]): unlimited, libgit2 reads every subtree of
/// both, 26 ms on 50,000 files for a one-line change; limited, it skips
/// the rest (issue 12). `None` when the trees are equal.
///
/// # Errors
/// The trees or their subtrees cannot be read.
fn tree_diff<'r>(
    repo: &'r git2::Repository,
    old: &git2::Tree<'_>,
    new: &git2::Tree<'_>,
    opts: Option<&mut git2::DiffOptions>,
) -> Result<Option<git2::Diff<'r>>, git2::Error> {
    let mut paths = Vec::new();
    changed_paths(repo, Some(old), Some(new), b"", &mut paths)?;
    if paths.is_empty() {
        return Ok(None);
    }
    let mut own = git2::DiffOptions::new();
    let opts = opts.unwrap_or(&mut own);
    // Exact paths, not patterns: libgit2 then walks only toward them.
    opts.disable_pathspec_match(true);
    for p in paths {
        opts.pathspec(p);
    }
    repo.diff_tree_to_tree(Some(old), Some(new), Some(opts))
        .map(Some)
}

/// Appends to `out` the path (`prefix` + name, `/`-separated bytes) of
/// every file, link or submodule entry that differs between the trees `a`
/// and `b` (`None`: absent), descending only into subtrees whose ids
/// differ, and into a subtree on one side only.
///
/// # Errors
/// A subtree cannot be read.
fn changed_paths(
    repo: &git2::Repository,
    a: Option<&git2::Tree<'_>>,
    b: Option<&git2::Tree<'_>>,
    prefix: &[u8],
    out: &mut Vec<Vec<u8>>,
) -> Result<(), git2::Error> {
    type Side = (git2::Oid, i32, bool);
    let entries = |t: Option<&git2::Tree<'_>>| -> std::collections::BTreeMap<Vec<u8>, Side> {
        t.map(|t| {
            t.iter()
                .map(|e| {
                    let is_tree = e.kind() == Some(git2::ObjectType::Tree);
                    (e.name_bytes().to_vec(), (e.id(), e.filemode(), is_tree))
                })
                .collect()
        })
        .unwrap_or_default()
    };
    let (ea, eb) = (entries(a), entries(b));
    let names: std::collections::BTreeSet<&Vec<u8>> = ea.keys().chain(eb.keys()).collect();
    for name in names {
        let (sa, sb) = (ea.get(name), eb.get(name));
        if sa == sb {
            continue;
        }
        let mut path = prefix.to_vec();
        path.extend_from_slice(name);
        let subtree = |s: Option<&Side>| -> Result<Option<git2::Tree<'_>>, git2::Error> {
            match s {
                Some((id, _, true)) => repo.find_tree(*id).map(Some),
                _ => Ok(None),
            }
        };
        let (ta, tb) = (subtree(sa)?, subtree(sb)?);
        // A file on either side (or a file turned directory) is a path.
        if sa.is_some_and(|s| !s.2) || sb.is_some_and(|s| !s.2) {
            out.push(path.clone());
        }
        if ta.is_some() || tb.is_some() {
            path.push(b'/');
            changed_paths(repo, ta.as_ref(), tb.as_ref(), &path, out)?;
        }
    }
    Ok(())
}

/// One file's change in `patch`, its header and lines hashed into `h`;
/// `None` for a delta that is no change (unmodified, ignored).
fn file_change(
    patch: &mut git2::Patch<'_>,
    h: &mut Sha256,
) -> Result<Option<FileChange>, git2::Error> {
    let delta = patch.delta();
    let Some(status) = change_status(delta.status()) else {
        return Ok(None);
    };
    let path_of = |f: git2::DiffFile<'_>| {
        f.path_bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    let (new_path, old_path) = (path_of(delta.new_file()), path_of(delta.old_file()));
    let path = match status {
        ChangeStatus::Deleted => old_path.clone(),
        _ => new_path,
    }
    .unwrap_or_default();
    let old_path = old_path.filter(|_| status == ChangeStatus::Renamed);
    let binary = delta.flags().is_binary();
    let modes = (
        u32::from(delta.old_file().mode()),
        u32::from(delta.new_file().mode()),
    );
    let (_, added, removed) = patch.line_stats()?;
    // Our own header per file, instead of git's: its `index` line carries
    // abbreviated ids and depends on whether a new file was staged.
    h.update(format!(
        "\0{} {} {} {:o} {:o}\n",
        status.letter(),
        old_path.as_deref().unwrap_or(""),
        path,
        modes.0,
        modes.1,
    ));
    patch.print(&mut |_delta, _hunk, line| {
        if line.origin_value() != git2::DiffLineType::FileHeader {
            let origin = line.origin();
            if matches!(origin, '+' | '-' | ' ') {
                h.update([origin as u8]);
            }
            h.update(line.content());
        }
        true
    })?;
    Ok(Some(FileChange {
        path,
        old_path,
        status,
        added: if binary { 0 } else { added },
        removed: if binary { 0 } else { removed },
        binary,
    }))
}

/// What a git delta is as a change; `None` when it is none.
fn change_status(d: git2::Delta) -> Option<ChangeStatus> {
    Some(match d {
        git2::Delta::Added | git2::Delta::Untracked | git2::Delta::Copied => ChangeStatus::Added,
        git2::Delta::Deleted => ChangeStatus::Deleted,
        git2::Delta::Renamed => ChangeStatus::Renamed,
        git2::Delta::Typechange => ChangeStatus::TypeChanged,
        git2::Delta::Modified | git2::Delta::Unreadable | git2::Delta::Conflicted => {
            ChangeStatus::Modified
        }
        git2::Delta::Unmodified | git2::Delta::Ignored => return None,
    })
}

/// The first file of the change from `base` (a commit, 40 hex) to `tree`
/// (a tree id, e.g. a [`Slot::snapshot_tree`]) that would carry a secret to
/// the remote (docs/loop.md#ship-or-retry: a secret in the diff breaks a rule): its path when
/// the path names one, or when its new content holds one that its old
/// content did not — every byte of the blob, so a binary file, a value
/// base64- or hex-encoded, or one cut over two lines is found too (see
/// [`crate::secret::Redactor::finds_in`]). `None` when no file does.
///
/// # Errors
/// [`ProofError::Repo`] when the commit, the tree or a blob cannot be read.
pub fn secret_in_change(
    worktree: &Path,
    base: &str,
    tree: &str,
    secrets: &crate::secret::Redactor,
) -> Result<Option<String>, ProofError> {
    let err = |context| {
        move |source| ProofError::Repo {
            context,
            path: worktree.to_path_buf(),
            source,
        }
    };
    let repo = open(worktree)?;
    let base_tree = git2::Oid::from_str(base)
        .and_then(|oid| repo.find_commit(oid))
        .and_then(|c| c.tree())
        .map_err(err("reading the base commit"))?;
    let new_tree = git2::Oid::from_str(tree)
        .and_then(|oid| repo.find_tree(oid))
        .map_err(err("reading the change's tree"))?;
    let Some(diff) =
        tree_diff(&repo, &base_tree, &new_tree, None).map_err(err("diffing the change"))?
    else {
        return Ok(None);
    };
    let blob = |id: git2::Oid| -> Result<Option<Vec<u8>>, ProofError> {
        if id.is_zero() {
            return Ok(None);
        }
        match repo.find_blob(id) {
            Ok(b) => Ok(Some(b.content().to_vec())),
            // A submodule link names a commit, not a blob.
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(err("reading a changed file")(e)),
        }
    };
    for delta in diff.deltas() {
        if delta.status() == git2::Delta::Deleted {
            continue;
        }
        let path =
            String::from_utf8_lossy(delta.new_file().path_bytes().unwrap_or_default()).into_owned();
        if secrets.finds_in(path.as_bytes()) {
            return Ok(Some(path));
        }
        if u32::from(delta.new_file().mode()) == 0o160000 {
            continue;
        }
        let Some(new) = blob(delta.new_file().id())? else {
            continue;
        };
        if secrets.finds_in(&new)
            && !blob(delta.old_file().id())?.is_some_and(|old| secrets.finds_in(&old))
        {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

// What the change touches that a person should weigh (shown on the PR card).

/// Public declarations the unified `diff` removes or rewrites: removed lines
/// that declare a public item (Rust `pub fn|struct|enum|trait|type|const`,
/// JS/TS `export …`, Go exported `func`/`type`, top-level Python `def` or
/// `class` without a leading `_`) and do not come back unchanged among the
/// added lines. Order of the diff; each declaration once, trimmed.
pub fn public_signatures_changed(diff: &str) -> Vec<String> {
    let public = |l: &str| {
        let t = l.trim_start();
        let rust = [
            "pub fn ",
            "pub async fn ",
            "pub struct ",
            "pub enum ",
            "pub trait ",
            "pub type ",
            "pub const ",
            "pub unsafe fn ",
        ]
        .iter()
        .any(|p| t.starts_with(p));
        let js = t.starts_with("export ") && !t.starts_with("export {}");
        let go = (t.starts_with("func ") || t.starts_with("type ")) && {
            // `func (r *T) Name(` or `func Name(`: exported when capitalised.
            let rest = t.split_once(' ').map(|(_, r)| r).unwrap_or("");
            let rest = if rest.starts_with('(') {
                rest.split_once(") ").map(|(_, r)| r).unwrap_or("")
            } else {
                rest
            };
            rest.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        };
        let python =
            (l.starts_with("def ") || l.starts_with("async def ") || l.starts_with("class "))
                && !l
                    .split_whitespace()
                    .nth(if l.starts_with("async") { 2 } else { 1 })
                    .unwrap_or("_")
                    .starts_with('_');
        rust || js || go || python
    };
    let added: std::collections::HashSet<&str> = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .map(|l| l[1..].trim())
        .collect();
    let mut out: Vec<String> = Vec::new();
    for l in diff
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
    {
        let body = &l[1..];
        if public(body) && !added.contains(body.trim()) && !out.iter().any(|o| o == body.trim()) {
            out.push(body.trim().to_string());
        }
    }
    out
}

/// Symbolic links the unified `diff` adds or changes whose target is
/// absolute or climbs out of the repository: `(link path, target)`.
pub fn links_leaving_the_repository(diff: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut path: Option<String> = None;
    let mut is_link = false;
    for l in diff.lines() {
        if let Some(rest) = l.strip_prefix("diff --git a/") {
            path = rest.split(" b/").last().map(String::from);
            is_link = false;
        } else if l.starts_with("new file mode 120000") || l.starts_with("new mode 120000") {
            is_link = true;
        } else if is_link && l.starts_with('+') && !l.starts_with("+++") {
            let target = &l[1..];
            let Some(p) = &path else { continue };
            // Depth of the link's directory: that many `..` stay inside.
            let depth = p.matches('/').count() as i64;
            let mut level = depth;
            let mut leaves = target.starts_with('/');
            for part in target.split('/') {
                match part {
                    ".." => level -= 1,
                    "" | "." => {}
                    _ => level += 1,
                }
                if level < 0 {
                    leaves = true;
                }
            }
            if leaves {
                out.push((p.clone(), target.to_string()));
            }
        }
    }
    out
}

/// Files of `changed` that decide what the gate proves: a file named in a
/// gate or setup command (`sh test.sh`, `./scripts/check`), `.gitignore`
/// files (which hide files from the commit that the gate still saw), and CI
/// or test configuration by name. In `changed` order.
pub fn gate_files_changed(
    verify: &[String],
    setup: &[String],
    changed: &[FileChange],
) -> Vec<String> {
    let words: Vec<String> = verify
        .iter()
        .chain(setup)
        .flat_map(|c| {
            c.split(|ch: char| ch.is_whitespace() || ";&|()<>'\"`".contains(ch))
                .map(|w| w.trim_start_matches("./").to_string())
                .collect::<Vec<_>>()
        })
        .filter(|w| !w.is_empty())
        .collect();
    let by_name = |p: &str| {
        let name = p.rsplit('/').next().unwrap_or(p);
        name == ".gitignore"
            || matches!(
                name,
                "Makefile"
                    | "justfile"
                    | "pytest.ini"
                    | "tox.ini"
                    | "jest.config.js"
                    | "vitest.config.ts"
            )
            || p == ".cargo/config.toml"
            || p.starts_with(".github/workflows/")
    };
    changed
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| by_name(p) || words.iter().any(|w| w == p))
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(globs: &[&str]) -> Scope {
        Scope::new(&globs.iter().map(|g| g.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn empty_scope_allows_everything() {
        assert!(scope(&[]).allows("any/where.rs"));
    }

    #[test]
    fn scope_globs_follow_gitignore_habits() {
        let s = scope(&["src/*.rs", "docs/", "*.md", "/Cargo.toml"]);
        assert!(s.allows("src/lib.rs"));
        assert!(!s.allows("src/deep/lib.rs"), "* must not cross /");
        assert!(
            s.allows("docs/a/b.txt"),
            "a directory covers what is under it"
        );
        assert!(
            s.allows("README.md") && s.allows("x/y/NOTES.md"),
            "no slash: any depth"
        );
        assert!(s.allows("Cargo.toml"));
        assert!(!s.allows("sub/Cargo.toml"), "a leading / anchors");
        assert!(!s.allows("tests/a.rs"));
        assert!(scope(&["src"]).allows("src/x/y.rs"));
        assert!(scope(&["src/**"]).allows("src/x/y.rs"));
    }

    #[test]
    fn bad_glob_names_itself() {
        let err = Scope::new(&["src/[".to_string()]).unwrap_err();
        assert!(err.to_string().contains("src/["), "{err}");
    }

    #[test]
    fn claims_are_normalized() {
        let wt = Path::new("/slots/s0");
        assert_eq!(
            normalize_claim(wt, "./src/a.rs").as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(
            normalize_claim(wt, "/slots/s0/src/a.rs").as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(normalize_claim(wt, "  "), None);
    }
}

#[cfg(test)]
mod signature_tests {
    use super::public_signatures_changed;

    #[test]
    fn changed_public_declarations_are_found_in_several_languages() {
        let diff = "\
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,3 +1,3 @@
-pub fn divide(a: i64, b: i64) -> i64 {
+pub fn divide(a: i64, b: i64) -> Option<i64> {
-fn helper() {}
+fn helper2() {}
-    pub fn kept(&self) {}
+    pub fn kept(&self) {}
--- a/web/api.ts
+++ b/web/api.ts
-export function load(id: string): Item {
+export function load(id: number): Item {
--- a/calc.py
+++ b/calc.py
-def add(a, b):
-def _private(a):
-    def inner(self):
--- a/calc.go
+++ b/calc.go
-func (c *Calc) Add(a int) int {
-func add(a int) int {
";
        assert_eq!(
            public_signatures_changed(diff),
            [
                "pub fn divide(a: i64, b: i64) -> i64 {",
                "export function load(id: string): Item {",
                "def add(a, b):",
                "func (c *Calc) Add(a int) int {"
            ]
        );
        assert!(
            public_signatures_changed("+pub fn new() {}\n").is_empty(),
            "an addition breaks no caller"
        );
    }
}

#[cfg(test)]
mod gate_file_tests {
    use super::gate_files_changed;
    use super::{ChangeStatus, FileChange};

    fn changed(paths: &[&str]) -> Vec<FileChange> {
        paths
            .iter()
            .map(|p| FileChange {
                path: p.to_string(),
                old_path: None,
                status: ChangeStatus::Modified,
                added: 1,
                removed: 0,
                binary: false,
            })
            .collect()
    }

    #[test]
    fn files_the_gate_runs_or_hides_are_named() {
        let verify = vec![
            "sh test.sh".to_string(),
            "./scripts/check --all && cargo test".to_string(),
        ];
        let setup = vec!["make deps".to_string()];
        let got = gate_files_changed(
            &verify,
            &setup,
            &changed(&[
                "src/lib.rs",
                "test.sh",
                "scripts/check",
                ".gitignore",
                "docs/.gitignore",
                "Makefile",
                "README.md",
            ]),
        );
        assert_eq!(
            got,
            [
                "test.sh",
                "scripts/check",
                ".gitignore",
                "docs/.gitignore",
                "Makefile"
            ]
        );
        assert!(gate_files_changed(&verify, &setup, &changed(&["src/lib.rs"])).is_empty());
    }
}

#[cfg(test)]
mod link_tests {
    #[test]
    fn links_out_of_the_repository_are_found() {
        let diff = "diff --git a/secrets b/secrets\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/secrets\n@@ -0,0 +1 @@\n+/etc/shadow\n\\ No newline at end of file\ndiff --git a/docs/up b/docs/up\nnew file mode 120000\n--- /dev/null\n+++ b/docs/up\n@@ -0,0 +1 @@\n+../../outside\ndiff --git a/docs/ok b/docs/ok\nnew file mode 120000\n--- /dev/null\n+++ b/docs/ok\n@@ -0,0 +1 @@\n+../src/lib.rs\ndiff --git a/calc.txt b/calc.txt\n--- a/calc.txt\n+++ b/calc.txt\n@@ -1 +1,2 @@\n add\n+/etc/passwd\n";
        assert_eq!(
            super::links_leaving_the_repository(diff),
            [
                ("secrets".to_string(), "/etc/shadow".to_string()),
                ("docs/up".to_string(), "../../outside".to_string())
            ]
        );
    }
}

#[cfg(test)]
mod limit_tests {
    use super::{ChangeLimits, ChangeStatus, FileChange, Proof};

    fn proof(files: &[(&str, Option<&str>, usize, usize)]) -> Proof {
        Proof {
            base: "b".into(),
            head_before: "h".into(),
            head_after: "h".into(),
            branch_before: None,
            branch_after: None,
            changed: files
                .iter()
                .map(|(path, old, added, removed)| FileChange {
                    path: path.to_string(),
                    old_path: old.map(str::to_string),
                    status: if old.is_some() {
                        ChangeStatus::Renamed
                    } else {
                        ChangeStatus::Modified
                    },
                    added: *added,
                    removed: *removed,
                    binary: false,
                })
                .collect(),
            claimed_not_in_git: vec![],
            out_of_scope: vec![],
            head_moved: false,
            branch_switched: false,
            git_dir_tampered: false,
            git_dir_changed: vec![],
            diff_hash: String::new(),
        }
    }

    #[test]
    fn size_and_protected_paths_are_held_to_the_contract() {
        let protected = vec!["migrations".to_string(), ".github/**".to_string()];
        let limits = ChangeLimits {
            max_changed_files: 2,
            max_diff_lines: 10,
            protected: protected.clone(),
            allow: &[],
        };
        let ok = proof(&[("src/a.rs", None, 4, 1), ("src/b.rs", None, 5, 0)]);
        assert_eq!(ok.beyond_limits(&limits).unwrap(), None);
        let big = proof(&[
            ("src/a.rs", None, 8, 1),
            ("src/b.rs", None, 1, 1),
            ("src/c.rs", None, 0, 0),
        ]);
        let why = big.beyond_limits(&limits).unwrap().unwrap();
        assert_eq!(
            why,
            "the change touches 3 files, above max_changed_files = 2: src/a.rs, src/b.rs, src/c.rs; the change adds and removes 11 lines (+9 −2), above max_diff_lines = 10; largest: src/a.rs +8 −1, src/b.rs +1 −1, src/c.rs +0 −0"
        );
        // Either side of a rename counts; a directory glob covers what is under it.
        let moved = proof(&[("docs/0001.sql", Some("migrations/0001.sql"), 0, 0)]);
        assert_eq!(
            moved.beyond_limits(&limits).unwrap().unwrap(),
            "files changed in protected paths (nightshift's defaults and config `protected`; only an item's `allow:` lifts them): migrations/0001.sql"
        );
        let ci = proof(&[(".github/workflows/ci.yml", None, 1, 0)]);
        assert!(
            ci.beyond_limits(&limits)
                .unwrap()
                .unwrap()
                .contains(".github/workflows/ci.yml")
        );
        let none = ChangeLimits {
            protected: vec![],
            ..limits
        };
        assert_eq!(ci.beyond_limits(&none).unwrap(), None);
    }

    #[test]
    fn an_allow_glob_lifts_protection_for_the_paths_it_matches_only() {
        let protected = crate::config::protected_paths(&["migrations/**".to_string()]);
        let allow = vec![".github/workflows/ci.yml".to_string()];
        let limits = ChangeLimits {
            max_changed_files: 100,
            max_diff_lines: 1000,
            protected,
            allow: &allow,
        };
        let ci = proof(&[(".github/workflows/ci.yml", None, 1, 0)]);
        assert_eq!(ci.beyond_limits(&limits).unwrap(), None);
        // Another workflow, a migration, a CI file renamed away into an
        // allowed name: still protected.
        let other = proof(&[
            (".github/workflows/ci.yml", None, 1, 0),
            (".github/workflows/release.yaml", None, 1, 0),
            ("migrations/0002.sql", None, 1, 0),
        ]);
        let why = other.beyond_limits(&limits).unwrap().unwrap();
        assert!(
            why.ends_with(": .github/workflows/release.yaml, migrations/0002.sql"),
            "{why}"
        );
        let renamed = proof(&[(
            ".github/workflows/ci.yml",
            Some(".github/workflows/deploy.yml"),
            0,
            0,
        )]);
        assert!(
            renamed
                .beyond_limits(&limits)
                .unwrap()
                .unwrap()
                .ends_with(": .github/workflows/deploy.yml")
        );
        // Without the allow line the defaults hold.
        let strict = ChangeLimits {
            allow: &[],
            ..limits.clone()
        };
        assert!(ci.beyond_limits(&strict).unwrap().is_some());
    }

    #[test]
    fn long_file_lists_are_cut_to_ten() {
        let names: Vec<String> = (0..13).map(|i| format!("f{i:02}")).collect();
        let files: Vec<(&str, Option<&str>, usize, usize)> =
            names.iter().map(|n| (n.as_str(), None, 0, 0)).collect();
        let limits = ChangeLimits {
            max_changed_files: 1,
            max_diff_lines: 1,
            protected: vec![],
            allow: &[],
        };
        let why = proof(&files).beyond_limits(&limits).unwrap().unwrap();
        assert!(why.ends_with("f08, f09 and 3 more"), "{why}");
    }
}
