//! A checkout's state by metadata, for the reviewer's read-only check
//! (docs/security.md, docs/loop.md).
//!
//! A [`Snapshot`] is a walk of every entry under a checkout — tracked,
//! untracked and ignored files, `.git` whole (HEAD, refs, index, config,
//! hooks, objects) — recording each one's kind, device, inode, size, mode,
//! modification and change time and link target, without reading any file.
//! Two snapshots, before and after the review, name what changed
//! ([`Snapshot::changes_since`]). The change time (ctime) is what makes that
//! sound: every write, `chmod`, rename or `touch -d` sets it to the kernel's
//! clock, and no process can set it back, so a write that keeps the size and
//! puts the modification time back is still seen. Content is read only
//! where metadata cannot decide:
//!
//! - a file changed in the clock tick of the first walk (the kernel's
//!   timestamps are coarse; the same "racy" case git's index has) is hashed
//!   then and compared by content afterwards;
//! - a tracked file that looks changed but was clean before (its metadata
//!   matched the stat cache of `.git/index`) is hashed as a git blob and
//!   compared to the index's object id, so rewriting a file with the same
//!   bytes is no change, as it never was;
//! - `.git/index` itself is compared by its entries and extensions without
//!   their stat fields: `git diff` or `git status` run by a reviewer rewrite
//!   it to refresh that cache, which changes nothing git would commit.
//!
//! Directories are compared by kind, mode and inode only: their times move
//! when a file inside is created and removed again (git's own `index.lock`),
//! while every entry they hold is compared on its own.
//!
//! This module decides nothing: `review::void_reason` turns a change into a
//! void verdict.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

mod follow;
mod index;
pub use follow::Follow;
pub(crate) use follow::mask as inotify_mask;
use index::{IndexView, RawIndex};
pub use index::{gitlinks_of, index_gitlinks};

/// How far back from the first walk's start a change time counts as racy:
/// the kernel stamps files with a clock that advances in ticks of 1 to 10 ms
/// (`CONFIG_HZ`), so a later write in the same tick would carry the same
/// ctime. 50 ms covers every tick length with margin.
const RACY_WINDOW: Duration = Duration::from_millis(50);

/// The largest `.git/index` read (bytes): 1 GiB, far above a million files.
const MAX_INDEX_BYTES: u64 = 1 << 30;

/// What kind of entry a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Link,
    /// A FIFO, socket or device.
    Other,
}

/// One entry's metadata, as `lstat` gives it (links not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    kind: Kind,
    dev: u64,
    ino: u64,
    /// Bytes.
    size: u64,
    /// Permission and type bits.
    mode: u32,
    /// Modification time, seconds and nanoseconds since the epoch (UTC).
    mtime: (i64, i64),
    /// Status change time, seconds and nanoseconds since the epoch (UTC).
    ctime: (i64, i64),
    /// A link's target, raw bytes.
    target: Option<Vec<u8>>,
}

impl Meta {
    fn of(path: &Path, m: &std::fs::Metadata) -> Meta {
        let ft = m.file_type();
        let kind = if ft.is_symlink() {
            Kind::Link
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        let target = (kind == Kind::Link).then(|| {
            std::fs::read_link(path)
                .map(|t| t.as_os_str().as_bytes().to_vec())
                .unwrap_or_default()
        });
        Meta {
            kind,
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mode: m.mode(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            target,
        }
    }

    /// Equal as far as a directory goes: same kind, mode and inode.
    fn same_dir(&self, other: &Meta) -> bool {
        self.kind == other.kind
            && self.mode == other.mode
            && self.ino == other.ino
            && self.dev == other.dev
    }
}

/// One walked entry: its path relative to the root (`/`-separated bytes;
/// the root itself is the empty path) and its metadata.
type Entry = (Box<[u8]>, Meta);

/// The state of a checkout by metadata (see the module docs).
#[derive(Debug, Clone)]
pub struct Snapshot {
    root: PathBuf,
    /// Every entry, sorted by path.
    entries: Vec<Entry>,
    /// SHA-256 of the content of regular files changed in the clock tick
    /// of the walk (racy), by path.
    hashed: BTreeMap<Vec<u8>, [u8; 32]>,
    /// `.git/index` as read after the walk, parsed only when a comparison
    /// needs it (its metadata changed, or a tracked file's did); `None`
    /// when there is none or it is unreadable (then it is compared by
    /// metadata like any file).
    index: Option<RawIndex>,
}

/// What `git add -A` would look at again ([`Snapshot::work_changes_against`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkChanges {
    /// Tracked paths whose file no longer matches the index's stat cache,
    /// or is gone.
    pub tracked: Vec<Vec<u8>>,
    /// Files and links the index does not hold.
    pub untracked: Vec<Vec<u8>>,
}

/// What [`Snapshot::reset_plan`] found to undo (relative, `/`-separated
/// paths in path order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetPlan {
    /// Tracked files changed, gone or replaced by something else: checked
    /// out again from the index.
    pub restore: Vec<Vec<u8>>,
    /// Entries git does not track (new files, links and directories,
    /// ignored ones too), outermost only.
    pub remove: Vec<Vec<u8>>,
}

/// One difference between two snapshots: the path (relative bytes) and
/// what changed — `added`, `removed`, `kind`, `mode`, `replaced` (a
/// directory), `link target`, `content`, `written`, `entries` (the index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub what: &'static str,
    /// The entry is a directory, before or after.
    pub dir: bool,
}

impl Change {
    /// The path as text (`.` for the root), lossy for non-UTF-8 names.
    pub fn shown(&self) -> String {
        if self.path.is_empty() {
            ".".to_string()
        } else {
            String::from_utf8_lossy(&self.path).into_owned()
        }
    }
}

impl Snapshot {
    /// Walks the checkout at `root`, reading no file but `.git/index` and
    /// those changed in the last clock tick. Directories are read by up to
    /// [`MAX_WALKERS`] threads at once: the walk is `lstat` calls, which
    /// wait on the kernel rather than on the CPU.
    ///
    /// # Errors
    /// The I/O error of `lstat` on `root` itself; entries below that cannot
    /// be read are recorded as missing, which any change of theirs shows.
    pub fn take(root: &Path) -> std::io::Result<Snapshot> {
        Snapshot::walked(root, None)
    }

    /// [`Snapshot::take`], and a [`Follow`] that can bring the snapshot up
    /// to date later from inotify events instead of another walk: each
    /// directory is watched before it is listed, so nothing that changes
    /// after the walk saw it goes unseen by the watch (the module
    /// `follow` says what inotify cannot see). The follow is `None` when a
    /// directory could not be watched (the kernel's watch limit, no
    /// inotify instance left).
    ///
    /// # Errors
    /// As [`Snapshot::take`].
    pub fn take_following(root: &Path) -> std::io::Result<(Snapshot, Option<Follow>)> {
        let watching = follow::Watching::new();
        let snap = Snapshot::walked(root, watching.as_ref())?;
        Ok((snap, watching.and_then(follow::Watching::into_follow)))
    }

    fn walked(root: &Path, watch: Option<&follow::Watching>) -> std::io::Result<Snapshot> {
        let started = SystemTime::now();
        let top = std::fs::symlink_metadata(root)?;
        let mut entries = vec![(Box::<[u8]>::default(), Meta::of(root, &top))];
        if top.is_dir() {
            entries.extend(walk(root, watch));
        }
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let hashed = racy_hashes(root, &entries, started);
        let mut snap = Snapshot {
            root: root.to_path_buf(),
            entries,
            hashed,
            index: None,
        };
        snap.read_index();
        Ok(snap)
    }

    /// Reads `.git/index` as the walk found it (see [`RawIndex`]).
    fn read_index(&mut self) {
        let root = &self.root;
        self.index = self
            .meta(b".git/index")
            .filter(|m| m.kind == Kind::File && m.size <= MAX_INDEX_BYTES)
            .and_then(|m| {
                let bytes =
                    crate::file::read_regular(&root.join(".git/index"), MAX_INDEX_BYTES).ok()?;
                Some(RawIndex {
                    bytes: std::sync::Arc::new(bytes),
                    mtime: m.mtime,
                    parsed: std::sync::OnceLock::new(),
                })
            });
    }

    /// Whether a regular file of `limit` bytes or more is in the checkout,
    /// outside `.git` (changed or not, ignored or not: the caller asks git
    /// which, only when one is).
    pub fn has_file_of_at_least(&self, limit: u64) -> bool {
        self.entries
            .iter()
            .any(|(p, m)| m.kind == Kind::File && m.size >= limit && !p.starts_with(b".git/"))
    }

    /// What `git add -A` would look at again in this checkout, read from
    /// the walk and the stat cache of the index file at `index` (a copy of
    /// the checkout's index as git wrote it; its modification time is
    /// git's racy-entry line): tracked files whose metadata no longer
    /// matches their entry (or that are gone), and files and links the
    /// index does not hold (new, maybe ignored — the caller asks git).
    /// Paths are relative bytes in path order; `.git` and submodule
    /// directories are left out. `None` when that index cannot stand for
    /// that look (missing, not a regular file, unreadable, not plain), or a
    /// new path is inside a nested repository.
    pub fn work_changes_against(&self, index: &Path) -> Option<WorkChanges> {
        self.work_changes_with(&IndexView::read(index)?)
    }

    /// What putting this checkout back to the tree of the index file at
    /// `index` (a copy git wrote at the last reset, see
    /// [`Snapshot::work_changes_against`]) takes, as `git checkout --force`
    /// then `git clean -ffdx` would do it: the tracked files to check out
    /// again, and the untracked or ignored entries to remove (outermost
    /// only: a directory git does not track goes whole). Submodule
    /// directories are left alone. `None` when the walk cannot tell that
    /// safely: what [`Snapshot::work_changes_against`] cannot tell, a
    /// directory where a tracked file was, a tracked file below
    /// something that is no longer a directory, a submodule's path that is
    /// no longer a directory, or a tracked `.gitattributes` changed.
    pub fn reset_plan(&self, index: &Path) -> Option<ResetPlan> {
        let view = IndexView::read(index)?;
        let changes = self.work_changes_with(&view)?;
        // Every directory holding a tracked path, and each submodule.
        let mut tracked_dirs: std::collections::HashSet<&[u8]> = Default::default();
        let mut gitlinks: std::collections::HashSet<&[u8]> = Default::default();
        for (p, e) in &view.entries {
            if e.mode == 0o160000 {
                gitlinks.insert(p);
            }
            let mut at = &p[..];
            while let Some(cut) = at.iter().rposition(|b| *b == b'/') {
                at = &at[..cut];
                if !tracked_dirs.insert(at) {
                    break;
                }
            }
        }
        let parent = |p: &[u8]| -> Vec<u8> {
            p.iter()
                .rposition(|b| *b == b'/')
                .map_or(Vec::new(), |c| p[..c].to_vec())
        };
        let kept_dir = |d: &[u8]| d.is_empty() || tracked_dirs.contains(d);
        let mut restore = Vec::new();
        for p in changes.tracked {
            // A submodule's path that is no longer a directory: git's
            // checkout makes it an empty one again.
            if gitlinks.contains(&p[..]) {
                if self.meta(&p).is_some_and(|m| m.kind == Kind::Dir) {
                    continue;
                }
                return None;
            }
            if self.meta(&p).is_some_and(|m| m.kind == Kind::Dir) {
                return None;
            }
            // `git checkout-index` reads attributes from the working tree
            // (git's checkout reads the index's): a changed tracked
            // `.gitattributes` would change how the files it covers come
            // back (line ends, encodings) until it is itself restored.
            if p.rsplit(|b| *b == b'/').next() == Some(b".gitattributes") {
                return None;
            }
            let mut up = parent(&p);
            while !up.is_empty() {
                if self.meta(&up).is_some_and(|m| m.kind != Kind::Dir) {
                    return None;
                }
                up = parent(&up);
            }
            restore.push(p);
        }
        let untracked_dirs = self.entries.iter().filter(|(p, m)| {
            m.kind == Kind::Dir
                && !p.is_empty()
                && **p != *b".git"
                && !p.starts_with(b".git/")
                && !tracked_dirs.contains(&**p)
                && !gitlinks.contains(&**p)
                && kept_dir(&parent(p))
        });
        let mut remove: Vec<Vec<u8>> = untracked_dirs.map(|(p, _)| p.to_vec()).collect();
        remove.extend(
            changes
                .untracked
                .into_iter()
                .filter(|p| kept_dir(&parent(p))),
        );
        remove.sort();
        Some(ResetPlan { restore, remove })
    }

    /// [`Snapshot::work_changes_against`] an index already read.
    fn work_changes_with(&self, index: &IndexView) -> Option<WorkChanges> {
        if !index.plain {
            return None;
        }
        let gitlinks: Vec<&[u8]> = index
            .entries
            .iter()
            .filter(|(_, e)| e.mode == 0o160000)
            .map(|(p, _)| &**p)
            .collect();
        let under = |p: &[u8], dir: &[u8]| {
            p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/'
        };
        let mut changes = WorkChanges::default();
        // Both lists are in path order: one pass over the two.
        let work = self.entries.iter().filter(|(p, m)| {
            m.kind != Kind::Dir && !p.is_empty() && **p != *b".git" && !p.starts_with(b".git/")
        });
        let (mut w, mut i) = (work.peekable(), index.entries.iter().peekable());
        loop {
            let order = match (w.peek(), i.peek()) {
                (None, None) => break,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((pw, _)), Some((pi, _))) => pw.cmp(pi),
            };
            match order {
                // On disk, not in the index: new, unless inside a submodule.
                std::cmp::Ordering::Less => {
                    let (p, _) = w.next().expect("peeked");
                    if gitlinks.iter().any(|g| under(p, g)) {
                        continue;
                    }
                    if p.split(|b| *b == b'/').any(|c| c == b".git") {
                        return None;
                    }
                    changes.untracked.push(p.to_vec());
                }
                // In the index, not a file on disk: gone (or a directory now).
                std::cmp::Ordering::Greater => {
                    let (p, e) = i.next().expect("peeked");
                    let is_dir = self.meta(p).is_some_and(|m| m.kind == Kind::Dir);
                    if !(e.mode == 0o160000 && is_dir) {
                        changes.tracked.push(p.to_vec());
                    }
                }
                std::cmp::Ordering::Equal => {
                    let ((p, m), (_, e)) = (w.next().expect("peeked"), i.next().expect("peeked"));
                    if e.mode == 0o160000 || index.clean_blob(e, m).is_none() {
                        changes.tracked.push(p.to_vec());
                    }
                }
            }
        }
        Some(changes)
    }

    /// The metadata recorded for `path`, if it was there.
    fn meta(&self, path: &[u8]) -> Option<&Meta> {
        self.entries
            .binary_search_by(|(p, _)| (**p).cmp(path))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// What changed from `before` to `self` (two snapshots of the same
    /// checkout, `self` the later one), as `path (what)` in path order (see
    /// [`Snapshot::diff`]). Empty when nothing did.
    pub fn changes_since(&self, before: &Snapshot) -> Vec<String> {
        self.diff(before)
            .iter()
            .map(|c| format!("{} ({})", c.shown(), c.what))
            .collect()
    }

    /// What changed from `before` to `self`, in path order: added, removed,
    /// changed kind, mode, link target, content, or the entries of
    /// `.git/index`. Reads the content of files whose metadata changed
    /// where that decides (see the module docs), so call it right after
    /// taking `self`.
    pub fn diff(&self, before: &Snapshot) -> Vec<Change> {
        use std::cmp::Ordering;
        let (mut b, mut a) = (
            before.entries.iter().peekable(),
            self.entries.iter().peekable(),
        );
        let mut changes = Vec::new();
        loop {
            let order = match (b.peek(), a.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((pb, _)), Some((pa, _))) => pb.cmp(pa),
            };
            let (path, what, dir) = match order {
                Ordering::Less => {
                    let (p, m) = b.next().expect("peeked");
                    (p, Some("removed"), m.kind == Kind::Dir)
                }
                Ordering::Greater => {
                    let (p, m) = a.next().expect("peeked");
                    (p, Some("added"), m.kind == Kind::Dir)
                }
                Ordering::Equal => {
                    let ((p, mb), (_, ma)) = (b.next().expect("peeked"), a.next().expect("peeked"));
                    let dir = mb.kind == Kind::Dir || ma.kind == Kind::Dir;
                    (p, self.entry_change(before, p, mb, ma), dir)
                }
            };
            if let Some(what) = what {
                changes.push(Change {
                    path: path.to_vec(),
                    what,
                    dir,
                });
            }
        }
        changes
    }

    /// Why the entry at `p` differs between `before` (metadata `b`) and
    /// `self` (metadata `a`), or `None` when it does not.
    fn entry_change(
        &self,
        before: &Snapshot,
        p: &[u8],
        b: &Meta,
        a: &Meta,
    ) -> Option<&'static str> {
        if b.kind != a.kind {
            return Some("kind");
        }
        if b.mode != a.mode {
            return Some("mode");
        }
        match a.kind {
            Kind::Dir => return (!b.same_dir(a)).then_some("replaced"),
            Kind::Link if b.target != a.target => return Some("link target"),
            _ => {}
        }
        if p == b".git/index"
            && b != a
            && let (Some(ib), Some(ia)) = (
                before.index.as_ref().and_then(RawIndex::view),
                self.index.as_ref().and_then(RawIndex::view),
            )
        {
            return (ib.digest != ia.digest).then_some("entries");
        }
        if b == a {
            // Unchanged metadata, unless the first walk fell in the tick of
            // a write: then only the content can tell.
            return match before.hashed.get(p) {
                Some(h) if sha256_file(&self.root.join(path_of(p))).as_ref() != Some(h) => {
                    Some("content")
                }
                _ => None,
            };
        }
        // A clean tracked file's content was its index blob: the same bytes
        // written again are no change.
        if a.kind == Kind::File
            && let Some(oid) = before.clean_blob(p, b)
            && git2::Oid::hash_file(git2::ObjectType::Blob, self.root.join(path_of(p)))
                .is_ok_and(|id| id.as_bytes() == oid)
        {
            return None;
        }
        Some("written")
    }

    /// The blob id (raw bytes) of the tracked file at `p` when its metadata
    /// `m` matched its entry in `.git/index`, as git decides from the stat
    /// cache that a file is clean; `None` when it did not or has no entry.
    fn clean_blob(&self, p: &[u8], m: &Meta) -> Option<&[u8]> {
        let index = self.index.as_ref()?.view()?;
        index.clean_blob(index.get(p)?, m)
    }
}

/// The most threads one walk uses.
pub const MAX_WALKERS: usize = 4;

/// Directories waiting to be read and how many walkers are reading one.
struct Queue {
    dirs: Vec<Vec<u8>>,
    busy: usize,
}

/// Every entry below `root` (not `root` itself), in no order: directories
/// are handed out to walker threads from one queue until it is empty and
/// no walker is reading one.
fn walk(root: &Path, watch: Option<&follow::Watching>) -> Vec<Entry> {
    let walkers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_WALKERS);
    let queue = std::sync::Mutex::new(Queue {
        dirs: vec![Vec::new()],
        busy: 0,
    });
    let ready = std::sync::Condvar::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..walkers)
            .map(|_| s.spawn(|| walker(root, &queue, &ready, watch)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// One walker: takes directories from `queue` until the walk is done,
/// returning the entries it read.
fn walker(
    root: &Path,
    queue: &std::sync::Mutex<Queue>,
    ready: &std::sync::Condvar,
    watch: Option<&follow::Watching>,
) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut found = Vec::new();
    let Ok(mut q) = queue.lock() else {
        return out;
    };
    loop {
        if let Some(dir) = q.dirs.pop() {
            q.busy += 1;
            drop(q);
            if let Some(w) = watch {
                w.add(root, &dir);
            }
            read_dir(root, &dir, &mut out, &mut found);
            let Ok(mut again) = queue.lock() else {
                return out;
            };
            again.busy -= 1;
            again.dirs.append(&mut found);
            ready.notify_all();
            q = again;
        } else if q.busy == 0 {
            return out;
        } else {
            let Ok(woken) = ready.wait(q) else {
                return out;
            };
            q = woken;
        }
    }
}

/// Records each entry of the directory `root/rel` in `out` and each
/// subdirectory's path in `dirs`.
fn read_dir(root: &Path, rel: &[u8], out: &mut Vec<Entry>, dirs: &mut Vec<Vec<u8>>) {
    let dir = root.join(path_of(rel));
    let Ok(read) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in read.flatten() {
        let mut path = Vec::with_capacity(rel.len() + 1 + entry.file_name().len());
        path.extend_from_slice(rel);
        if !rel.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(entry.file_name().as_bytes());
        // `fstatat` on the open directory, links not followed.
        let Ok(m) = entry.metadata() else {
            continue;
        };
        let meta = if m.file_type().is_symlink() {
            Meta::of(&entry.path(), &m)
        } else {
            Meta::of(Path::new(""), &m)
        };
        if meta.kind == Kind::Dir {
            dirs.push(path.clone());
        }
        out.push((path.into_boxed_slice(), meta));
    }
}

fn path_of(rel: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(rel))
}

/// SHA-256 of each regular file among `entries` whose change time falls
/// in the [`RACY_WINDOW`] before `started` (when their walk began) or
/// later, by path.
fn racy_hashes<'e>(
    root: &Path,
    entries: impl IntoIterator<Item = &'e Entry>,
    started: SystemTime,
) -> BTreeMap<Vec<u8>, [u8; 32]> {
    let racy_from = started
        .checked_sub(RACY_WINDOW)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| (d.as_secs() as i64, i64::from(d.subsec_nanos())))
        .unwrap_or((0, 0));
    entries
        .into_iter()
        .filter(|(_, m)| m.kind == Kind::File && m.ctime >= racy_from)
        .filter_map(|(p, _)| Some((p.to_vec(), sha256_file(&root.join(path_of(p)))?)))
        .collect()
}

/// SHA-256 of a regular file's content; `None` when it cannot be read.
fn sha256_file(path: &Path) -> Option<[u8; 32]> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(_) => return None,
        }
    }
    Some(h.finalize().into())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::index::{IndexEntry, parse_index};
    use super::*;
    use std::process::Command;

    /// Runs a setup git command in `dir` with a fixed identity.
    pub(crate) fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// A repository with a tracked file, an ignored directory and a commit,
    /// whose clock tick has passed.
    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        git(p, &["init", "-q", "-b", "main"]);
        std::fs::write(p.join("calc.txt"), "add\nsub\n").unwrap();
        std::fs::write(p.join(".gitignore"), "build/\n").unwrap();
        std::fs::create_dir(p.join("src")).unwrap();
        std::fs::write(p.join("src/lib.rs"), "fn main() {}\n").unwrap();
        std::os::unix::fs::symlink("calc.txt", p.join("link")).unwrap();
        git(p, &["add", "-A"]);
        git(p, &["commit", "-q", "-m", "one"]);
        std::fs::create_dir(p.join("build")).unwrap();
        std::fs::write(p.join("build/cache.txt"), "cache\n").unwrap();
        std::fs::write(p.join("notes.txt"), "untracked\n").unwrap();
        // Out of the racy window, and the index's stat cache fresh.
        std::thread::sleep(Duration::from_millis(1100));
        git(p, &["update-index", "--refresh", "-q"]);
        std::thread::sleep(Duration::from_millis(60));
        d
    }

    fn changes(p: &Path, act: impl FnOnce(&Path)) -> Vec<String> {
        let before = Snapshot::take(p).unwrap();
        act(p);
        Snapshot::take(p).unwrap().changes_since(&before)
    }

    /// Runs `act` on `file`, then puts its modification time back and
    /// checks that its size and modification time are what they were.
    fn touch_back(p: &Path, file: &str, act: impl FnOnce(&Path)) {
        let path = p.join(file);
        let m = std::fs::metadata(&path).unwrap();
        act(&path);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(m.modified().unwrap())
            .unwrap();
        let now = std::fs::metadata(&path).unwrap();
        assert_eq!(
            (now.len(), now.modified().unwrap()),
            (m.len(), m.modified().unwrap())
        );
    }

    #[test]
    fn nothing_done_is_no_change_and_reading_is_none() {
        let d = repo();
        let got = changes(d.path(), |p| {
            std::fs::read(p.join("calc.txt")).unwrap();
            std::fs::read_dir(p.join("build")).unwrap().for_each(drop);
        });
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_same_size_write_with_mtime_put_back_is_seen() {
        let d = repo();
        let p = d.path();
        for file in ["calc.txt", "notes.txt", "build/cache.txt"] {
            let got = changes(p, |p| {
                touch_back(p, file, |path| {
                    let old = std::fs::read(path).unwrap();
                    let mut new = old.clone();
                    new[0] ^= 0x20;
                    std::fs::write(path, new).unwrap();
                });
            });
            assert_eq!(got, [format!("{file} (written)")], "{file}");
        }
    }

    /// What a reset must undo, from a walk against the index git wrote:
    /// tracked files changed or gone, untracked and ignored entries
    /// outermost first (a `.github` directory is no `.git`); a directory
    /// where a tracked file was is left to git.
    #[test]
    fn a_reset_plan_names_what_checkout_and_clean_would_undo() {
        let d = repo();
        let p = d.path();
        let index = p.join(".git/index");
        std::fs::write(p.join("calc.txt"), "changed\n").unwrap();
        std::fs::remove_file(p.join("src/lib.rs")).unwrap();
        std::fs::create_dir_all(p.join(".github/workflows")).unwrap();
        std::fs::write(p.join(".github/workflows/ci.yml"), "on: push\n").unwrap();
        std::fs::write(p.join("src/new.rs"), "new\n").unwrap();
        std::fs::create_dir(p.join("src/empty")).unwrap();
        let plan = Snapshot::take(p).unwrap().reset_plan(&index).unwrap();
        let shown = |v: &[Vec<u8>]| -> Vec<String> {
            v.iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect()
        };
        assert_eq!(shown(&plan.restore), ["calc.txt", "src/lib.rs"]);
        assert_eq!(
            shown(&plan.remove),
            [".github", "build", "notes.txt", "src/empty", "src/new.rs"]
        );
        std::fs::remove_file(p.join("calc.txt")).unwrap();
        std::fs::create_dir(p.join("calc.txt")).unwrap();
        assert_eq!(Snapshot::take(p).unwrap().reset_plan(&index), None);
    }

    #[test]
    fn every_kind_of_write_is_named() {
        let d = repo();
        let p = d.path();
        type Write = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Write)> = vec![
            (
                "calc.txt (mode)",
                Box::new(|p: &Path| {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(
                        p.join("calc.txt"),
                        std::fs::Permissions::from_mode(0o755),
                    )
                    .unwrap()
                }),
            ),
            (
                "link (link target)",
                Box::new(|p: &Path| {
                    std::fs::remove_file(p.join("link")).unwrap();
                    std::os::unix::fs::symlink("notes.txt", p.join("link")).unwrap();
                }),
            ),
            (
                "src/lib.rs (removed)",
                Box::new(|p: &Path| std::fs::remove_file(p.join("src/lib.rs")).unwrap()),
            ),
            (
                "build/shim.sh (added)",
                Box::new(|p: &Path| std::fs::write(p.join("build/shim.sh"), "x").unwrap()),
            ),
            (
                "notes.txt (kind)",
                Box::new(|p: &Path| {
                    std::fs::remove_file(p.join("notes.txt")).unwrap();
                    std::os::unix::fs::symlink("/etc/passwd", p.join("notes.txt")).unwrap();
                }),
            ),
            (
                ".git/hooks/pre-commit (added)",
                Box::new(|p: &Path| {
                    std::fs::write(p.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap()
                }),
            ),
            (
                ".git/index (entries)",
                Box::new(|p: &Path| git(p, &["add", "notes.txt"])),
            ),
        ];
        for (want, act) in cases {
            let got = changes(p, act);
            assert!(got.iter().any(|c| c == want), "{want}: {got:?}");
        }
        // Moving HEAD writes a ref and the log.
        let got = changes(p, |p| git(p, &["commit", "-q", "-m", "two"]));
        assert!(
            got.iter().any(|c| c.starts_with(".git/refs/heads/main")),
            "{got:?}"
        );
    }

    #[test]
    fn git_refreshing_its_index_or_a_same_bytes_rewrite_is_no_change() {
        let d = repo();
        let p = d.path();
        // A stat-only change (same bytes written again) makes `git diff`
        // and `git status` refresh the index; the checkout is the same.
        let before = Snapshot::take(p).unwrap();
        std::fs::write(p.join("calc.txt"), "add\nsub\n").unwrap();
        git(p, &["diff", "HEAD", "--quiet"]);
        git(p, &["status", "--porcelain"]);
        let after = Snapshot::take(p).unwrap();
        let index = |s: &Snapshot| s.meta(b".git/index").cloned();
        assert_ne!(index(&before), index(&after), "git rewrote its index");
        let got = after.changes_since(&before);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_write_in_the_walks_own_clock_tick_is_seen_by_content() {
        let d = repo();
        let p = d.path();
        std::fs::write(p.join("notes.txt"), "abcdefghi\n").unwrap();
        let before = Snapshot::take(p).unwrap();
        assert!(
            before.hashed.contains_key(b"notes.txt".as_slice()),
            "a fresh file is hashed"
        );
        assert!(!before.hashed.contains_key(b"calc.txt".as_slice()));
        // Same size, same metadata but for the content (as when ctime and
        // mtime fall in the same tick): simulated by editing the record.
        let mut forged = before.clone();
        forged
            .hashed
            .insert(b"notes.txt".to_vec(), Sha256::digest(b"other").into());
        let after = Snapshot::take(p).unwrap();
        assert_eq!(after.changes_since(&forged), ["notes.txt (content)"]);
        assert!(after.changes_since(&before).is_empty());
    }

    #[test]
    fn index_versions_parse_to_the_same_entries() {
        let d = repo();
        let p = d.path();
        let read = |p: &Path| parse_index(&std::fs::read(p.join(".git/index")).unwrap()).unwrap();
        let (_, v2, _) = read(p);
        assert!(v2.iter().any(|(p, _)| &**p == b"src/lib.rs"));
        assert_eq!(v2.len(), 4);
        for v in ["3", "4"] {
            git(p, &["update-index", "--index-version", v]);
            let (_, got, _) = read(p);
            let ids = |m: &Vec<(Box<[u8]>, IndexEntry)>| {
                m.iter()
                    .map(|(k, e)| (k.clone(), e.oid().to_vec(), e.mode))
                    .collect::<Vec<_>>()
            };
            assert_eq!(ids(&got), ids(&v2), "version {v}");
        }
    }
}
