//! [`SlotError`]: why a slot could not be prepared, reset, committed or pushed,
//! and how a failed fetch is told apart (missing objects, a network step).
//!
//! Not for deciding what a run does about it: the run's item driver does.

use std::path::PathBuf;

use crate::git::GitError;

/// A failed slot operation.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// A git command or read failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A filesystem operation on the slot failed.
    #[error("{context} ({}): {source}", path.display())]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The slot's `.git/config` or `.git/hooks` changed since it was prepared:
    /// nightshift runs no more git commands in it.
    #[error("the slot {} was tampered with ({} changed since it was prepared)", path.display(), parts.join(", "))]
    Tampered { path: PathBuf, parts: Vec<String> },
    /// `commit_all` found no change to commit.
    #[error("nothing to commit in {}", path.display())]
    NothingToCommit { path: PathBuf },
    /// The remote branch a tend was to take up is not at the head
    /// nightshift last pushed: someone else pushed (docs/github.md "The
    /// second night"); nothing is changed.
    #[error(
        "branch {branch} is at {found} on the remote, not at {expected} that nightshift pushed: someone else pushed; it is left alone"
    )]
    Moved {
        branch: String,
        expected: String,
        found: String,
    },
}

impl SlotError {
    /// The remote could not be fetched (refused, timed out, gone): every
    /// other item of the run would wait for it the same way.
    pub fn is_remote_unreachable(&self) -> bool {
        matches!(self, SlotError::Git(e) if is_fetch(e))
    }
}

pub(super) fn is_fetch(e: &GitError) -> bool {
    match e {
        GitError::Failed {
            argv, stderr_tail, ..
        } => argv.starts_with("git fetch") && !objects_missing(stderr_tail),
        GitError::TimedOut { argv, .. } => argv.starts_with("git fetch"),
        _ => false,
    }
}

/// Whether git's stderr says the slot's own object store is broken — the
/// slot borrows objects from the user's repository, and a `git gc` there
/// after a history rewrite can prune objects the slot still points at. Such
/// a slot is cloned again instead of failing every night.
fn objects_missing(stderr: &str) -> bool {
    [
        "bad object",
        "missing object",
        "unable to read",
        "corrupt",
        "failed to read object",
        "did not send all necessary objects",
        "not a valid object",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}
