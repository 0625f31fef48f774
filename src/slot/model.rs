//! The [`Slot`] itself (its paths, branch, base and tip), the [`Identity`]
//! git commits as, where a slot lives ([`slot_path`]) and the small `git`
//! commands every other part builds on.
//!
//! Not for preparing, judging or delivering a slot's work: the files beside this one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::error::SlotError;
use crate::git::{self, Git};

/// Timeout of a fetch or a push from a slot: 10 minutes (a first fetch of a
/// large repository may need far more than the 120 s of local commands).
pub const NETWORK_TIMEOUT: Duration = Duration::from_secs(600);

/// A name and an email for a commit's author or committer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub email: String,
}

/// A prepared checkout on the item's branch, at `<remote>/<base>`.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The slot's working tree (its git dir is `path/.git`).
    pub path: PathBuf,
    /// The remote's name as configured in the user's repository (e.g. `origin`).
    pub remote: String,
    /// URL fetched from (the user's `remote.<name>.url`, made absolute if a
    /// local path). It may carry a password, kept in memory only: git is
    /// given it without one (see [`git::split_url_password`]), and so is the
    /// slot's own remote.
    pub fetch_url: String,
    /// URL pushed to (the user's `remote.<name>.pushurl`, else the URL); as
    /// `fetch_url`, it may carry a password.
    pub push_url: String,
    /// The base branch name (e.g. `main`).
    pub base: String,
    /// The commit (40 hex) `<remote>/<base>` pointed at after the fetch.
    pub base_commit: String,
    /// The local branch checked out (e.g. `nightshift/fix-login-1a2b3c4d`).
    pub branch: String,
    /// Fingerprint of `.git/config` and `.git/hooks` when preparing ended
    /// (see [`super::git_dir_fingerprint`]).
    pub git_dir_fingerprint: String,
    /// True when an existing slot was reset rather than cloned.
    pub reused: bool,
    /// True when that reset undid only what changed since the last item's
    /// walk ([`super::KeptWalk`]) instead of running `git checkout --force` and
    /// `git clean -ffdx`.
    pub undone: bool,
    /// Where the slot's branch sits between rounds when that is not
    /// `base_commit`: a tended PR's branch brought onto the base keeps its
    /// commits ([`Slot::set_tip`], docs/github.md "The second night").
    /// `None`: at `base_commit`, as for every new item.
    pub(super) tip: Option<String>,
    /// Why an existing slot was removed and cloned again, if it was.
    pub recloned_because: Option<String>,
    /// While preparing only: kills the running git command when it turns
    /// true (a signal, docs/limits.md#signals). Cleared once the slot is ready, so that
    /// cleaning up after a signal still works.
    pub(super) stop: Option<Arc<AtomicBool>>,
    /// While preparing only: the run's pinned base ([`super::PrepareAt::pinned`]).
    pub(super) pinned: Option<String>,

    /// The submodule paths of the index git wrote at the last reset, read
    /// once then ([`Slot::filled_submodule_dirs`]); `None` before.
    pub(super) gitlinks: Option<Vec<Vec<u8>>>,
    /// The seed index (`seed_index_file`) holds `base_commit`'s tree, as
    /// a checkout of it wrote it: not after [`Slot::squash_onto_base`],
    /// whose index holds a tended PR's change. A [`super::KeptWalk`] needs it.
    pub(super) seed_at_base: bool,
    /// The remote's head of [`Slot::branch`] when the item was claimed
    /// ([`Slot::read_lease`]): the only head the item's push may replace
    /// (docs/workers.md#fencing). `None` until read.
    pub(super) lease: Option<Lease>,
}

/// What the remote's branch held when the item was claimed: the lease of
/// the item's push (`git push --force-with-lease=refs/heads/B:EXPECTED`).
/// A worker that lost its claim while paused cannot push over the branch
/// the takeover pushed since (docs/workers.md#fencing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lease {
    /// The branch did not exist: the push may only create it.
    Absent,
    /// The branch was at this commit (40 hex), e.g. a leftover of an
    /// earlier night whose PR was closed: the push may replace only it.
    At(String),
}

impl Lease {
    /// The `EXPECTED` of `--force-with-lease=REF:EXPECTED` (empty: the ref
    /// must not exist, as git documents).
    pub fn expected(&self) -> &str {
        match self {
            Lease::Absent => "",
            Lease::At(head) => head,
        }
    }
}

/// Where slot number `index` of the user's repository lives:
/// `<data_dir>/slots/<16 hex of sha256(canonical repo path)>/slot-<index>`.
pub fn slot_path(data_dir: &Path, user_repo: &Path, index: usize) -> PathBuf {
    let canonical = user_repo
        .canonicalize()
        .unwrap_or_else(|_| user_repo.to_path_buf());
    let digest = hex::encode(Sha256::digest(canonical.to_string_lossy().as_bytes()));
    data_dir
        .join("slots")
        .join(&digest[..16])
        .join(format!("slot-{index}"))
}

impl Slot {
    pub(super) fn git(&self) -> Git {
        let git = Git::new(&self.path);
        match &self.stop {
            Some(stop) => git.stop_on(stop.clone()),
            None => git,
        }
    }

    /// The commit the slot's branch sits at between rounds: the one given
    /// to [`Slot::set_tip`], else [`Slot::base_commit`].
    pub fn tip(&self) -> &str {
        self.tip.as_deref().unwrap_or(&self.base_commit)
    }

    /// Records that the slot's branch now sits at `commit` between rounds
    /// (a tended PR's branch rebased onto the base keeps its commits), so
    /// that [`Slot::restore_tree`] puts it back there rather than at the
    /// base (docs/github.md "The second night").
    pub fn set_tip(&mut self, commit: &str) {
        self.tip = (commit != self.base_commit).then(|| commit.to_string());
    }

    /// The commit HEAD points at (40 hex).
    ///
    /// # Errors
    /// [`SlotError::Git`] when HEAD does not resolve.
    pub fn head(&self) -> Result<String, SlotError> {
        Ok(git::resolve(&self.path, "HEAD^{commit}")?)
    }

    /// Git in the slot with `who` as committer (rebases rewrite commits).
    pub(super) fn committing(&self, who: &Identity) -> Git {
        self.git()
            .env("GIT_COMMITTER_NAME", &who.name)
            .env("GIT_COMMITTER_EMAIL", &who.email)
    }

    /// Git in the slot that commits as `author` and `committer`.
    pub(super) fn authored_by(&self, author: &Identity, committer: &Identity) -> Git {
        self.committing(committer)
            .env("GIT_AUTHOR_NAME", &author.name)
            .env("GIT_AUTHOR_EMAIL", &author.email)
    }

    /// Whether the slot's object store (its own or borrowed) has `oid`.
    pub fn has_object(&self, oid: &str) -> bool {
        // libgit2's rev-parse looks the object up (no `^{object}` there).
        git::resolve(&self.path, oid).is_ok()
    }
}
