//! Slots: the reusable checkouts the writer works in (docs/loop.md#checkout).
//!
//! A slot is a separate clone under nightshift's data directory that borrows
//! objects from the user's repository (`git clone --shared --no-checkout`),
//! not a `git worktree` of it: nothing an agent does in the slot's `.git`
//! reaches the user's `.git`, and the user's working tree, index and branches
//! are never read for writing — a dirty or detached user checkout does not
//! matter. Fetch and push go straight to the URL of the user's remote. A slot
//! is reused from item to item: preparing it costs a fetch, a forced checkout
//! and a clean, not a new clone; a broken or tampered slot is removed and
//! cloned again.
//!
//! This module does not judge the writer's work (that is `proof`) and does not
//! talk to GitHub (that is `forge`).

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::git::{self, Git, GitError};
use crate::snapshot::{ResetPlan, Snapshot};

/// Timeout of a fetch or a push from a slot: 10 minutes (a first fetch of a
/// large repository may need far more than the 120 s of local commands).
pub const NETWORK_TIMEOUT: Duration = Duration::from_secs(600);

/// Files of a `.git` directory whose change means the slot was tampered with:
/// each can make git run a program (filters, fsmonitor, ssh command, hooks) or
/// redirect it to another config (`include.path`, `commondir`).
/// `info/exclude` can hide new files from the proof and the commit.
const WATCHED_GIT_FILES: &[&str] = &[
    "config",
    "config.worktree",
    "commondir",
    "info/attributes",
    "info/exclude",
];

/// What `git checkout` removes from `.git` when it switches branches (an
/// operation in progress: `remove_branch_state` in git's `branch.c`).
const OPERATION_STATE: &[&str] = &[
    "MERGE_HEAD",
    "MERGE_RR",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_AUTOSTASH",
    "AUTO_MERGE",
    "SQUASH_MSG",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
];

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
    /// (see [`git_dir_fingerprint`]).
    pub git_dir_fingerprint: String,
    /// True when an existing slot was reset rather than cloned.
    pub reused: bool,
    /// True when that reset undid only what changed since the last item's
    /// walk ([`KeptWalk`]) instead of running `git checkout --force` and
    /// `git clean -ffdx`.
    pub undone: bool,
    /// Where the slot's branch sits between rounds when that is not
    /// `base_commit`: a tended PR's branch brought onto the base keeps its
    /// commits ([`Slot::set_tip`], docs/github.md "The second night").
    /// `None`: at `base_commit`, as for every new item.
    tip: Option<String>,
    /// Why an existing slot was removed and cloned again, if it was.
    pub recloned_because: Option<String>,
    /// While preparing only: kills the running git command when it turns
    /// true (a signal, docs/limits.md#signals). Cleared once the slot is ready, so that
    /// cleaning up after a signal still works.
    stop: Option<Arc<AtomicBool>>,
    /// While preparing only: the run's pinned base ([`PrepareAt::pinned`]).
    pinned: Option<String>,

    /// The submodule paths of the index git wrote at the last reset, read
    /// once then ([`Slot::filled_submodule_dirs`]); `None` before.
    gitlinks: Option<Vec<Vec<u8>>>,
    /// The seed index ([`seed_index_file`]) holds `base_commit`'s tree, as
    /// a checkout of it wrote it: not after [`Slot::squash_onto_base`],
    /// whose index holds a tended PR's change. A [`KeptWalk`] needs it.
    seed_at_base: bool,
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

/// An exclusive hold on a repository's slots: a `flock` on `slots.lock`
/// beside them, released when dropped (or when the process dies). The
/// ledger's advisory lock already keeps two drains of one repository apart,
/// but only within one database; two drains with different databases (a
/// shell with a URL, a cron job on the embedded cluster) would share these
/// checkouts and kill each other's agents.
#[derive(Debug)]
pub struct SlotsLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
    /// The lock file, and the device and inode it had when locked.
    path: PathBuf,
    id: (u64, u64),
    /// The data directory it lives under (for messages).
    data_dir: PathBuf,
}

/// Least free space, in bytes, the data directory must have for a run to
/// start another item: a checkout, git's work in it and the agents' logs
/// need room, and a disk that fills up mid-item fails it in git's words.
pub const MIN_FREE_BYTES: u64 = 16 * 1024 * 1024;

impl SlotsLock {
    /// Whether the run can still work under the data directory: the lock
    /// file is still the one locked (the directory was not removed or
    /// replaced — a cleaner of `/tmp`, a person's `rm -rf`), its file system
    /// is not read-only, has [`MIN_FREE_BYTES`] free, and takes a small
    /// written and synced file.
    ///
    /// # Errors
    /// A sentence naming the directory, what is wrong and what to do.
    pub fn check(&self) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        let data = self.data_dir.display();
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.id => {}
            _ => {
                return Err(format!(
                    "the data directory {data} was removed or replaced during the run ({} is gone); keep it where nothing cleans it up (not under /tmp), or set NIGHTSHIFT_DATA_DIR",
                    self.path.display()
                ));
            }
        }
        let dir = self.path.parent().unwrap_or(&self.data_dir);
        if let Ok(st) = nix::sys::statvfs::statvfs(dir) {
            if st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
                return Err(format!(
                    "the data directory {data} is on a read-only file system; remount it read-write or set NIGHTSHIFT_DATA_DIR to a writable directory"
                ));
            }
            // The field types differ between platforms (u32 on some).
            #[allow(clippy::unnecessary_cast)]
            let free = (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64);
            if free < MIN_FREE_BYTES {
                return Err(format!(
                    "the disk holding the data directory {data} is full ({} KiB free; a run needs at least {} MiB for a checkout and its logs); free some space",
                    free / 1024,
                    MIN_FREE_BYTES >> 20
                ));
            }
        }
        let probe = dir.join(format!(".write-probe-{}", std::process::id()));
        let written = std::fs::File::create(&probe).and_then(|mut f| {
            f.write_all(&[0u8; 64 * 1024])?;
            f.sync_all()
        });
        let _ = std::fs::remove_file(&probe);
        written.map_err(|e| format!("cannot write in the data directory {data} ({}): {e}; free some space or fix its permissions", dir.display()))
    }
}

/// Takes [`SlotsLock`] for `user_repo`'s slots under `data_dir`, writing
/// this process id into the file. `Ok(Err(pid))` when another process holds
/// it (its pid as that process wrote it, or 0 when unreadable).
///
/// # Errors
/// The lock file cannot be created or opened.
pub fn lock_slots(data_dir: &Path, user_repo: &Path) -> std::io::Result<Result<SlotsLock, u32>> {
    use std::io::Write;
    let dir = slot_path(data_dir, user_repo, 0)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| data_dir.join("slots"));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("slots.lock");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            use std::os::unix::fs::MetadataExt;
            lock.set_len(0)?;
            write!(lock, "{}", std::process::id())?;
            let m = lock.metadata()?;
            Ok(Ok(SlotsLock {
                id: (m.dev(), m.ino()),
                _lock: lock,
                path,
                data_dir: data_dir.to_path_buf(),
            }))
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let pid = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            Ok(Err(pid))
        }
        Err((_, e)) => Err(std::io::Error::from(e)),
    }
}

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

/// A manifest of the parts of `<worktree>/.git` that can make git run a
/// program or read another config: one line `PART SHA256-HEX` for what kind
/// of thing `.git` itself is, each of [`WATCHED_GIT_FILES`], and every entry
/// under `hooks/` (names, modes, contents, link targets), in name order. A
/// missing or unreadable part hashes as such, so the function never fails:
/// any change, including `.git` being replaced by a file or a link, changes
/// the text, and [`git_dir_changes`] names the parts that changed.
pub fn git_dir_fingerprint(worktree: &Path) -> String {
    let git_dir = worktree.join(".git");
    let kind = match std::fs::symlink_metadata(&git_dir) {
        Ok(m) if m.is_dir() => "dir",
        Ok(m) if m.file_type().is_symlink() => "symlink",
        Ok(_) => "file",
        Err(_) => "missing",
    };
    let mut lines = vec![format!(
        ".git {}",
        hex::encode(Sha256::digest(kind.as_bytes()))
    )];
    for name in WATCHED_GIT_FILES {
        let mut h = Sha256::new();
        hash_entry(&mut h, &git_dir.join(name));
        lines.push(format!(".git/{name} {}", hex::encode(h.finalize())));
    }
    hook_lines(&mut lines, &git_dir.join("hooks"), ".git/hooks");
    lines.join("\n")
}

/// The parts (e.g. `.git/info/exclude`, `.git/hooks/pre-commit`) whose lines
/// differ between two [`git_dir_fingerprint`] manifests: changed, added or
/// removed, in name order. Empty when they are equal.
pub fn git_dir_changes(before: &str, after: &str) -> Vec<String> {
    let parse = |text: &str| -> std::collections::BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(part, digest)| (part.to_string(), digest.to_string()))
            .collect()
    };
    let (before, after) = (parse(before), parse(after));
    let mut parts: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .cloned()
        .collect();
    parts.sort();
    parts.dedup();
    parts
}

/// One manifest line per entry of the tree at `dir` (itself included), in name order.
fn hook_lines(lines: &mut Vec<String>, dir: &Path, label: &str) {
    let mut h = Sha256::new();
    hash_entry(&mut h, dir);
    lines.push(format!("{label} {}", hex::encode(h.finalize())));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let child = format!("{label}/{}", name.to_string_lossy().replace(' ', "_"));
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            hook_lines(lines, &path, &child);
        } else {
            let mut h = Sha256::new();
            hash_entry(&mut h, &path);
            lines.push(format!("{child} {}", hex::encode(h.finalize())));
        }
    }
}

/// Hashes one filesystem entry without following links: kind, mode, content.
fn hash_entry(h: &mut Sha256, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        h.update(b"missing\0");
        return;
    };
    if meta.file_type().is_symlink() {
        h.update(b"symlink\0");
        if let Ok(target) = std::fs::read_link(path) {
            h.update(target.as_os_str().as_encoded_bytes());
        }
    } else if meta.is_dir() {
        h.update(b"dir\0");
    } else {
        h.update(format!("file {:o}\0", meta.permissions().mode()).as_bytes());
        // A FIFO or device planted here would block or never end the read.
        match crate::file::open_regular(path) {
            Ok((mut f, _)) => {
                let mut buf = [0u8; 64 * 1024];
                loop {
                    match f.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => h.update(&buf[..n]),
                        Err(_) => {
                            h.update(b"\0unreadable");
                            break;
                        }
                    }
                }
            }
            Err(_) => h.update(b"unreadable\0"),
        }
    }
    h.update(b"\0");
}

/// The refs an agent moved on the remote, from two `ls-remote` listings
/// (ref name → commit id): a ref that now points at an object `ours` says
/// the checkout has (the agent's own commit: a person's push at night
/// brings objects the checkout has never seen), and a `nightshift/` branch
/// deleted. Each named with its old and new commit, in name order.
pub fn remote_moves(
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
    ours: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut moves: Vec<String> = after
        .iter()
        .filter(|(name, oid)| before.get(*name) != Some(*oid) && ours(oid))
        .map(|(name, oid)| match before.get(name) {
            Some(old) => format!("{name} moved from {old} to {oid}"),
            None => format!("{name} created at {oid}"),
        })
        .collect();
    moves.extend(
        before
            .iter()
            .filter(|(name, _)| {
                name.starts_with("refs/heads/nightshift/") && !after.contains_key(*name)
            })
            .map(|(n, old)| format!("{n} deleted (was {old})")),
    );
    moves
}

/// The file next to a slot that remembers its fingerprint between runs. It is
/// outside the slot, so removing the slot's `.git` cannot also forge it.
fn fingerprint_file(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".fingerprint");
    path.with_file_name(name)
}

/// Paths each followed by a NUL: what `git … --stdin -z` reads.
fn nul_joined<P: AsRef<[u8]>>(paths: impl IntoIterator<Item = P>) -> Vec<u8> {
    let mut input = Vec::new();
    for p in paths {
        input.extend_from_slice(p.as_ref());
        input.push(0);
    }
    input
}

/// The copy of the slot's index as git wrote it when the slot was last
/// reset (next to the slot, like [`fingerprint_file`]): agents can rewrite
/// the slot's own `.git/index`, and a stat cache they forged would make git
/// trust a file's old object id for new content — a tree that differs from
/// the working tree the reviewer read. Trees and restores start from this
/// copy instead, so only git's own stat records stand for "unchanged".
fn seed_index_file(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".index");
    path.with_file_name(name)
}

/// Copies the file `from` to `to` with its modification time: git's
/// racy-entry rule compares the files of an index against the index
/// file's own time.
fn copy_keeping_mtime(from: &Path, to: &Path) -> std::io::Result<Vec<u8>> {
    let (mut f, _) = crate::file::open_regular(from).map_err(std::io::Error::other)?;
    let modified = f.metadata()?.modified()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    // Written beside `to` and renamed over it: a link, a hard link or a
    // FIFO an agent put at `to` (`.git/index`) is replaced, never written
    // through or waited on.
    let mut tmp = to.as_os_str().to_owned();
    tmp.push(".nightshift-new");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut out| {
            out.write_all(&bytes)?;
            out.set_modified(modified)
        })
        .and_then(|()| std::fs::rename(&tmp, to));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| bytes)
}

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

    fn git(&self) -> Git {
        let git = Git::new(&self.path);
        match &self.stop {
            Some(stop) => git.stop_on(stop.clone()),
            None => git,
        }
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

    /// The slot's branch created or moved to `commit` (40 hex) and checked
    /// out by force, and everything git does not track removed, ignored
    /// files too.
    ///
    /// # Errors
    /// [`SlotError::Git`] when git fails.
    fn check_out_clean(&self, commit: &str) -> Result<(), SlotError> {
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
        let branch = format!("refs/heads/{}", self.branch);
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

    fn record_fingerprint(&mut self) -> Result<(), SlotError> {
        self.git_dir_fingerprint = git_dir_fingerprint(&self.path);
        let file = fingerprint_file(&self.path);
        std::fs::write(&file, &self.git_dir_fingerprint).map_err(|source| SlotError::Io {
            context: "recording the slot's fingerprint",
            path: file,
            source,
        })
    }

    /// Copies the index git just wrote to [`seed_index_file`], with its
    /// modification time (git's racy-entry rule compares files against it),
    /// and keeps its submodule paths. Best effort: without a copy, trees
    /// are read from scratch and submodules from the index again.
    fn record_index(&mut self) {
        let from = self.path.join(".git").join("index");
        let to = seed_index_file(&self.path);
        self.gitlinks = None;
        match copy_keeping_mtime(&from, &to) {
            Ok(bytes) => self.gitlinks = crate::snapshot::gitlinks_of(&bytes),
            Err(e) => {
                tracing::warn!(slot = %self.path.display(), "cannot keep a copy of the slot's index: {e}");
                let _ = std::fs::remove_file(&to);
            }
        }
    }

    /// A private index (removed by the caller) holding what git last wrote
    /// for this slot ([`seed_index_file`]), or, without that copy, `tip`'s
    /// tree with no stat cache (every file is then read again).
    ///
    /// # Errors
    /// [`SlotError::Git`] when `read-tree` fails.
    fn seeded_index(&self, what: &str) -> Result<PathBuf, SlotError> {
        let index = self.private_index(what);
        if std::fs::copy(seed_index_file(&self.path), &index).is_err() {
            let _ = std::fs::remove_file(&index);
            let git = self.on_index(&index);
            git.run(&["read-tree", self.tip()])?;
        }
        Ok(index)
    }

    /// True when `.git/config` or `.git/hooks` differ from what was recorded
    /// when the slot was prepared.
    pub fn is_tampered(&self) -> bool {
        git_dir_fingerprint(&self.path) != self.git_dir_fingerprint
    }

    fn ensure_untampered(&self) -> Result<(), SlotError> {
        let parts = git_dir_changes(&self.git_dir_fingerprint, &git_dir_fingerprint(&self.path));
        if !parts.is_empty() {
            return Err(SlotError::Tampered {
                path: self.path.clone(),
                parts,
            });
        }
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

    /// The commit HEAD points at (40 hex).
    ///
    /// # Errors
    /// [`SlotError::Git`] when HEAD does not resolve.
    pub fn head(&self) -> Result<String, SlotError> {
        Ok(git::resolve(&self.path, "HEAD^{commit}")?)
    }

    /// Git in the slot with `who` as committer (rebases rewrite commits).
    fn committing(&self, who: &Identity) -> Git {
        self.git()
            .env("GIT_COMMITTER_NAME", &who.name)
            .env("GIT_COMMITTER_EMAIL", &who.email)
    }

    /// Git in the slot that commits as `author` and `committer`.
    fn authored_by(&self, author: &Identity, committer: &Identity) -> Git {
        self.committing(committer)
            .env("GIT_AUTHOR_NAME", &author.name)
            .env("GIT_AUTHOR_EMAIL", &author.email)
    }

    /// Pushes the slot's branch to the user's remote (its push URL), replacing
    /// a branch of that name there. `token`, when given, answers https
    /// prompts through the askpass helper (docs/agents.md); otherwise the user's
    /// credential helpers and ssh setup apply.
    ///
    /// # Errors
    /// [`SlotError::Tampered`] if the slot's git dir changed (nothing is
    /// pushed then: a planted config could send the token elsewhere);
    /// [`SlotError::Git`] if the push fails or times out.
    pub fn push(&self, token: Option<&str>) -> Result<(), SlotError> {
        self.push_stoppable(token, None)
    }

    /// The remote's branches and tags as `ref → object id`, read with
    /// `git ls-remote` (token through askpass). Taken before and after each
    /// writer round to see whether the writer pushed (docs/loop.md#writer: the runner
    /// checks the rules from git, not from the agent's word).
    ///
    /// # Errors
    /// [`SlotError::Git`] when the remote cannot be read.
    pub fn remote_refs(
        &self,
        token: Option<&str>,
    ) -> Result<std::collections::BTreeMap<String, String>, SlotError> {
        let out = self.git().token(token).timeout(NETWORK_TIMEOUT).text(&[
            "ls-remote",
            "--heads",
            "--tags",
            "--",
            &self.push_url,
        ])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(sha, name)| (name.trim().to_string(), sha.trim().to_string()))
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

    /// Whether the slot's object store (its own or borrowed) has `oid`.
    pub fn has_object(&self, oid: &str) -> bool {
        // libgit2's rev-parse looks the object up (no `^{object}` there).
        git::resolve(&self.path, oid).is_ok()
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
        let mut git = self.git().token(token).timeout(NETWORK_TIMEOUT);
        if let Some(stop) = stop {
            git = git.stop_on(stop);
        }
        git.push(&self.push_url, &self.branch)?;
        Ok(())
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
    /// cache ([`Snapshot::work_changes`]) is given to `git update-index`,
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

    /// git on the private `index` ([`Slot::private_index`]). Such an index
    /// is written once and read by the next command only, so git skips its
    /// trailing SHA-1 (`index.skipHash`): on 50,000 files each hash of the
    /// 5 MB file costs about 8 ms, and a tree takes four.
    fn on_index(&self, index: &Path) -> Git {
        self.git()
            .env("GIT_INDEX_FILE", index)
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "index.skipHash")
            .env("GIT_CONFIG_VALUE_0", "true")
    }

    fn private_index(&self, what: &str) -> PathBuf {
        self.path
            .join(".git")
            .join(format!("nightshift-{what}-{}.index", std::process::id()))
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

impl SlotError {
    /// The remote could not be fetched (refused, timed out, gone): every
    /// other item of the run would wait for it the same way.
    pub fn is_remote_unreachable(&self) -> bool {
        matches!(self, SlotError::Git(e) if is_fetch(e))
    }
}

fn is_fetch(e: &GitError) -> bool {
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

/// Kills every process whose working directory is inside `dir`: agents or
/// gates left running by a nightshift that was killed (SIGKILL, a crash)
/// must not keep editing a checkout the next run reuses. Only one run per
/// repository holds the lock, so anything running in its slot is stale.
/// Returns the pids killed.
pub fn kill_stragglers(dir: &Path) -> Vec<i32> {
    let Ok(dir) = dir.canonicalize() else {
        return vec![];
    };
    let me = std::process::id() as i32;
    let mut killed = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return killed;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(&dir) {
            let pid = nix::unistd::Pid::from_raw(pid);
            // Its whole group first (an agent and its children), then itself.
            if let Ok(pgid) = nix::unistd::getpgid(Some(pid))
                && pgid.as_raw() > 1
                && pgid.as_raw() != nix::unistd::getpgrp().as_raw()
            {
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            }
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            killed.push(pid.as_raw());
        }
    }
    if !killed.is_empty() {
        tracing::warn!(slot = %dir.display(), pids = ?killed, "killed processes left running in the checkout by an earlier run");
        // Give the kernel a moment to tear them down before git touches files.
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    killed
}

/// The file work of `run`'s `grant_checkout`. The walk goes through directory
/// descriptors opened with `O_NOFOLLOW` and changes owners with
/// `fchownat(AT_SYMLINK_NOFOLLOW)`, so a symlink an agent planted (or swapped
/// in for a directory mid-walk) can never make root chown a file outside the
/// checkout.
pub fn hand_over(top: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let md = std::fs::symlink_metadata(top)?;
    if md.gid() != gid {
        std::os::unix::fs::lchown(top, None, Some(gid))?;
    }
    // Group-writable so the agent can create files at the top; sticky so it
    // cannot rename or replace what it does not own there (`.git`).
    if md.mode() & 0o1070 != 0o1070 {
        std::fs::set_permissions(
            top,
            std::fs::Permissions::from_mode((md.mode() & 0o7777) | 0o1070),
        )?;
    }
    let flags = nix::fcntl::OFlag::O_RDONLY
        | nix::fcntl::OFlag::O_DIRECTORY
        | nix::fcntl::OFlag::O_NOFOLLOW
        | nix::fcntl::OFlag::O_CLOEXEC;
    let dir = nix::fcntl::open(top, flags, nix::sys::stat::Mode::empty())?;
    hand_over_dir(&dir, uid, gid, true)
}

/// Recursion of [`hand_over`] below one open directory; holds one
/// descriptor per level of depth.
fn hand_over_dir(dir: &std::os::fd::OwnedFd, uid: u32, gid: u32, top: bool) -> std::io::Result<()> {
    use nix::fcntl::{AtFlags, OFlag};
    use std::os::fd::AsRawFd;
    // Listing through /proc reads exactly the directory the descriptor holds.
    let mut names = Vec::new();
    for e in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        names.push(e?.file_name());
    }
    for name in names {
        if top && name == ".git" {
            continue;
        }
        let st = match nix::sys::stat::fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
        {
            Ok(st) => st,
            Err(nix::errno::Errno::ENOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        if st.st_uid != uid || st.st_gid != gid {
            nix::unistd::fchownat(
                dir,
                name.as_os_str(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )?;
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            let sub = nix::fcntl::openat(
                dir,
                name.as_os_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )?;
            hand_over_dir(&sub, uid, gid, false)?;
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_file_sits_next_to_the_slot() {
        assert_eq!(
            fingerprint_file(Path::new("/d/slots/ab/slot-0")),
            Path::new("/d/slots/ab/slot-0.fingerprint")
        );
    }

    #[test]
    fn slot_path_is_stable_per_repo() {
        let a = slot_path(Path::new("/data"), Path::new("/nonexistent/repo"), 0);
        let b = slot_path(Path::new("/data"), Path::new("/nonexistent/repo"), 0);
        let c = slot_path(Path::new("/data"), Path::new("/nonexistent/other"), 0);
        assert_eq!(a, b);
        assert_ne!(a.parent(), c.parent());
        assert!(a.ends_with("slot-0"));
    }
}
