//! [`Follow`]: a [`Snapshot`] brought up to date from inotify events
//! instead of a second walk, where the events can tell (docs/loop.md#gate).
//!
//! [`Snapshot::take_following`] watches every directory before the walk
//! lists it, so whatever changes after the walk saw an entry is an event on
//! that entry's directory. [`Follow::refresh`] reads each path an event
//! names again (a new or replaced directory whole — a directory made at a
//! path is new even with the inode number of the one removed there, which
//! ext4 hands out again at once, since the watch went with the old one)
//! and keeps the rest of the walk.
//!
//! inotify does not see a write through a memory mapping, nor one through
//! a hard link from outside the watched directories. A refreshed snapshot
//! then keeps the file's old metadata, and a later full walk compared with
//! it shows the change (every write sets the change time, which no process
//! can set back). A full walk compared with a refreshed snapshot therefore
//! errs toward a change, never toward missing one (docs/security.md). A
//! refresh that re-reads a file with more than one link, a queue overflow,
//! or more than `MAX_PATHS` paths give no refresh: the caller walks.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::{Entry, Kind, Meta, Snapshot, path_of, racy_hashes, read_dir};

/// Relative paths (`/`-separated bytes), in order.
type Paths = BTreeSet<Vec<u8>>;

/// The most paths one refresh reads again; beyond that many, a walk costs
/// about the same and is simpler to trust.
pub const MAX_PATHS: usize = 10_000;

/// Every event that can mean a change: content, metadata (mode, times,
/// owner, links), entries made, removed or renamed, the directory itself
/// gone or moved (also the user's repository's watch, `user_repo::watch`).
pub(crate) fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// The watches a walk adds as it goes (shared by its threads).
pub(super) struct Watching {
    inotify: Inotify,
    dirs: Mutex<HashMap<WatchDescriptor, Box<[u8]>>>,
    /// A directory could not be watched: the walk goes on, unfollowed.
    failed: AtomicBool,
}

impl Watching {
    /// A new inotify instance; `None` when the kernel gives none (the
    /// per-user instance limit).
    pub(super) fn new() -> Option<Watching> {
        let flags = InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC;
        let inotify = Inotify::init(flags)
            .map_err(|e| tracing::debug!("no inotify instance for the checkout: {e}"))
            .ok()?;
        Some(Watching {
            inotify,
            dirs: Mutex::default(),
            failed: AtomicBool::new(false),
        })
    }

    /// Watches the directory `root/rel`, before the walk lists it.
    pub(super) fn add(&self, root: &Path, rel: &[u8]) {
        if self.failed.load(Ordering::Relaxed) {
            return;
        }
        // Below the root, a directory swapped for a link must not move the
        // watch outside the checkout.
        let flags = if rel.is_empty() {
            mask()
        } else {
            mask() | AddWatchFlags::IN_DONT_FOLLOW
        };
        match self.inotify.add_watch(&root.join(path_of(rel)), flags) {
            Ok(wd) => {
                let Ok(mut dirs) = self.dirs.lock() else {
                    self.failed.store(true, Ordering::Relaxed);
                    return;
                };
                // One directory reached by two paths (a bind mount): its
                // events could not say which.
                if dirs.insert(wd, rel.into()).is_some() {
                    self.failed.store(true, Ordering::Relaxed);
                }
            }
            // Gone since its parent was listed: the parent's watch saw it.
            Err(Errno::ENOENT | Errno::ENOTDIR) if !rel.is_empty() => {}
            Err(e) => {
                tracing::debug!(dir = %String::from_utf8_lossy(rel), "cannot watch: {e}");
                self.failed.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The follow, when every directory was watched.
    pub(super) fn into_follow(self) -> Option<Follow> {
        if self.failed.into_inner() {
            return None;
        }
        let dirs = self.dirs.into_inner().ok()?;
        Some(Follow {
            inotify: Some(self.inotify),
            dirs,
        })
    }
}

/// The watches of one [`Snapshot::take_following`], read once by
/// [`Follow::refresh`]. Dropping it closes the inotify instance.
pub struct Follow {
    /// Always `Some` until dropped (see the `Drop` impl).
    inotify: Option<Inotify>,
    /// Each watched directory's path (relative bytes, `""` the root).
    dirs: HashMap<WatchDescriptor, Box<[u8]>>,
}

impl Drop for Follow {
    /// Closes the inotify instance on a thread of its own: the kernel
    /// waits out a grace period before it lets go of the watches, up to
    /// 20 ms, which the item need not wait for.
    fn drop(&mut self) {
        if let Some(inotify) = self.inotify.take() {
            let closing = std::thread::Builder::new().name("inotify-close".into());
            if let Err(e) = closing.spawn(move || drop(inotify)) {
                tracing::debug!("closing inotify in line: {e}");
            }
        }
    }
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follow")
            .field("dirs", &self.dirs.len())
            .finish()
    }
}

impl Follow {
    /// `base` (the snapshot this follow was taken with) as the checkout is
    /// now: the paths the events name are read again, the rest is kept.
    /// `None` when the events cannot tell (a queue overflow, an unknown
    /// watch, more than `MAX_PATHS` paths, a re-read file with several
    /// links, the root replaced, removed or moved, a path that cannot be
    /// read): walk again.
    pub fn refresh(self, base: &Snapshot) -> Option<Snapshot> {
        let (started, keep, fresh) = self.read_again(base)?;
        let entries = base.entries.iter().cloned();
        let (root, hashed) = (base.root.clone(), base.hashed.clone());
        Some(assemble(root, entries, hashed, keep, fresh, started))
    }

    /// [`Follow::refresh`] of a snapshot not needed as it was: its entries
    /// are moved, not copied.
    pub fn refresh_owned(self, base: Snapshot) -> Option<Snapshot> {
        let (started, keep, fresh) = self.read_again(&base)?;
        let Snapshot {
            root,
            entries,
            hashed,
            ..
        } = base;
        Some(assemble(
            root,
            entries.into_iter(),
            hashed,
            keep,
            fresh,
            started,
        ))
    }

    /// When the reading began, which entries of `base` stay and the
    /// entries read again ([`Snapshot::patch_of`]).
    fn read_again(&self, base: &Snapshot) -> Option<(SystemTime, Vec<bool>, Vec<Entry>)> {
        let started = SystemTime::now();
        let (dirty, made) = self.dirty_paths()?;
        tracing::debug!(
            paths = dirty.len(),
            "checkout refreshed from inotify events"
        );
        let (keep, fresh) = base.patch_of(&dirty, &made)?;
        Some((started, keep, fresh))
    }

    /// Every path an event named, and each watched directory that had one;
    /// beside them, the paths an entry was made or moved to.
    fn dirty_paths(&self) -> Option<(Paths, Paths)> {
        let mut dirty = BTreeSet::new();
        let mut made = BTreeSet::new();
        let making = AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO;
        loop {
            let Some(inotify) = &self.inotify else {
                return None;
            };
            let events = match inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => return Some((dirty, made)),
                Err(e) => {
                    tracing::debug!("cannot read inotify events: {e}");
                    return None;
                }
            };
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    return None;
                }
                let dir = self.dirs.get(&event.wd)?;
                // The root itself removed or moved: a directory made in its
                // place (maybe with its inode number) is watched by nothing.
                let gone = AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF
                    | AddWatchFlags::IN_IGNORED;
                if dir.is_empty() && event.mask.intersects(gone) {
                    return None;
                }
                dirty.insert(dir.to_vec());
                if let Some(name) = &event.name {
                    let mut path = dir.to_vec();
                    if !path.is_empty() {
                        path.push(b'/');
                    }
                    path.extend_from_slice(name.as_bytes());
                    if event.mask.intersects(making) {
                        made.insert(path.clone());
                    }
                    dirty.insert(path);
                }
                if dirty.len() > MAX_PATHS {
                    return None;
                }
            }
        }
    }
}

/// What a refresh found at one path.
enum Found {
    Gone,
    /// Still the same directory: only its own metadata is new.
    SameDir(Meta),
    /// A file, link or other entry (replacing whatever was there).
    Entry(Meta),
    /// A directory that is new or replaced one: read whole.
    NewDir(Meta),
}

impl Snapshot {
    /// What reading each of `dirty` again changes in this snapshot: which
    /// of its entries stay (by index) and the entries read now, in path
    /// order; `None` when a path cannot tell (see [`Follow::refresh`]). A
    /// directory at a path in `made` is read whole even when it looks the
    /// same: one removed and made again can get its old inode number
    /// (ext4 and xfs reuse them at once), but not its watches.
    fn patch_of(&self, dirty: &Paths, made: &Paths) -> Option<(Vec<bool>, Vec<Entry>)> {
        let mut walked: Vec<&[u8]> = Vec::new();
        let mut found: Vec<(&[u8], Found)> = Vec::new();
        for p in dirty {
            let under = |d: &&[u8]| p.len() > d.len() && p.starts_with(d) && p[d.len()] == b'/';
            if walked.iter().any(under) {
                continue;
            }
            let f = match self.look(p)? {
                Found::SameDir(m) if made.contains(p) => Found::NewDir(m),
                f => f,
            };
            if matches!(f, Found::NewDir(_)) {
                walked.push(p);
            }
            found.push((p, f));
        }
        // Entries dropped: each path looked at, and everything below one
        // that is no longer the same directory.
        let mut keep = vec![true; self.entries.len()];
        for (p, f) in &found {
            if let Ok(i) = self.entries.binary_search_by(|(q, _)| (**q).cmp(p)) {
                keep[i] = false;
            }
            if !matches!(f, Found::SameDir(_)) {
                for i in self.below(p) {
                    keep[i] = false;
                }
            }
        }
        let mut fresh: Vec<Entry> = Vec::new();
        for (p, f) in found {
            match f {
                Found::Gone => {}
                Found::SameDir(m) | Found::Entry(m) => fresh.push((p.into(), m)),
                Found::NewDir(m) => {
                    fresh.push((p.into(), m));
                    fresh.extend(walk_below(&self.root, p));
                }
            }
        }
        fresh.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Some((keep, fresh))
    }

    /// What is at `p` now, against what the snapshot holds there; `None`
    /// when a refresh cannot tell (see [`Follow::refresh`]).
    fn look(&self, p: &[u8]) -> Option<Found> {
        let full = self.root.join(path_of(p));
        let m = match std::fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) if p.is_empty() => {
                tracing::debug!("cannot read the checkout's root again: {e}");
                return None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Found::Gone),
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => return Some(Found::Gone),
            Err(e) => {
                tracing::debug!(path = %full.display(), "cannot read again: {e}");
                return None;
            }
        };
        // A write through another link of the file is an event on that
        // link's directory only.
        if m.file_type().is_file() && m.nlink() > 1 {
            return None;
        }
        let meta = Meta::of(&full, &m);
        if meta.kind != Kind::Dir {
            return Some(Found::Entry(meta));
        }
        let same = self.meta(p).is_some_and(|b| b.same_dir(&meta));
        match (same, p.is_empty()) {
            (true, _) => Some(Found::SameDir(meta)),
            (false, true) => None,
            (false, false) => Some(Found::NewDir(meta)),
        }
    }

    /// The indexes of the entries below the directory `dir` (its
    /// descendants sort between `dir/` and `dir0`, `0` following `/`).
    fn below(&self, dir: &[u8]) -> std::ops::Range<usize> {
        let mut from = dir.to_vec();
        from.push(b'/');
        let mut to = dir.to_vec();
        to.push(b'/' + 1);
        let start = self.entries.partition_point(|(q, _)| **q < *from);
        let end = self.entries.partition_point(|(q, _)| **q < *to);
        start..end.max(start)
    }
}

/// The snapshot of `root` made of the `entries` whose `keep` flag is set
/// and the `fresh` ones (both in path order, no path in both), merged in
/// one pass; racy files among the fresh ones hashed as of `started`.
fn assemble(
    root: std::path::PathBuf,
    entries: impl Iterator<Item = Entry>,
    mut hashed: std::collections::BTreeMap<Vec<u8>, [u8; 32]>,
    keep: Vec<bool>,
    fresh: Vec<Entry>,
    started: SystemTime,
) -> Snapshot {
    let racy = racy_hashes(&root, &fresh, started);
    let mut merged: Vec<Entry> = Vec::with_capacity(keep.len() + fresh.len());
    let mut fresh = fresh.into_iter().peekable();
    for (entry, kept) in entries.zip(keep) {
        if !kept {
            hashed.remove(&*entry.0);
            continue;
        }
        while fresh.peek().is_some_and(|(p, _)| *p < entry.0) {
            merged.extend(fresh.next());
        }
        merged.push(entry);
    }
    merged.extend(fresh);
    hashed.extend(racy);
    let mut snap = Snapshot {
        root,
        entries: merged,
        hashed,
        index: None,
    };
    snap.read_index();
    snap
}

/// Every entry below the directory `root/dir`, read by one thread.
fn walk_below(root: &Path, dir: &[u8]) -> Vec<Entry> {
    let (mut out, mut dirs) = (Vec::new(), vec![dir.to_vec()]);
    while let Some(d) = dirs.pop() {
        let mut found = Vec::new();
        read_dir(root, &d, &mut out, &mut found);
        dirs.append(&mut found);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Change;
    use crate::snapshot::tests::git;
    use std::fs;
    use std::time::Duration;

    /// A small checkout: a git directory, files at two depths, a link, an
    /// ignored-looking build directory.
    fn checkout() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        git(p, &["init", "-q", "-b", "main"]);
        fs::create_dir_all(p.join("src/deep")).unwrap();
        fs::create_dir_all(p.join("build/out")).unwrap();
        fs::write(p.join("calc.txt"), "add\nsub\n").unwrap();
        fs::write(p.join("src/lib.rs"), "fn main() {}\n").unwrap();
        fs::write(p.join("src/deep/a.rs"), "a\n").unwrap();
        fs::write(p.join("build/out/x.o"), "x").unwrap();
        std::os::unix::fs::symlink("calc.txt", p.join("link")).unwrap();
        d
    }

    /// `act` on a followed checkout, then the refreshed snapshot beside a
    /// full walk; both must hold the same entries.
    fn refreshed_and_walked(p: &Path, act: impl FnOnce(&Path)) -> (Snapshot, Snapshot, Snapshot) {
        let (base, follow) = Snapshot::take_following(p).unwrap();
        act(p);
        let refreshed = follow.expect("followed").refresh(&base).expect("refreshed");
        (base, refreshed, Snapshot::take(p).unwrap())
    }

    #[test]
    fn a_refresh_holds_what_a_walk_finds_for_every_kind_of_change() {
        let d = checkout();
        let (base, refreshed, walked) = refreshed_and_walked(d.path(), |p| {
            fs::write(p.join("calc.txt"), "add\nsub\nmul\n").unwrap();
            // Same size, modification time put back.
            let f = fs::OpenOptions::new()
                .write(true)
                .open(p.join("src/lib.rs"))
                .unwrap();
            let mtime = f.metadata().unwrap().modified().unwrap();
            std::io::Write::write_all(&mut &f, b"fn mian() {}\n").unwrap();
            f.set_modified(mtime).unwrap();
            fs::write(p.join("new.txt"), "new\n").unwrap();
            fs::create_dir_all(p.join("fresh/dir")).unwrap();
            fs::write(p.join("fresh/dir/f.txt"), "f\n").unwrap();
            fs::remove_dir_all(p.join("build")).unwrap();
            fs::rename(p.join("src/deep"), p.join("src/moved")).unwrap();
            fs::write(p.join("src/moved/b.rs"), "b\n").unwrap();
            let exec = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            fs::set_permissions(p.join("src/moved/a.rs"), exec).unwrap();
            fs::remove_file(p.join("link")).unwrap();
            std::os::unix::fs::symlink("new.txt", p.join("link")).unwrap();
            fs::write(p.join(".git/HEAD"), "ref: refs/heads/other\n").unwrap();
        });
        assert_eq!(refreshed.entries, walked.entries);
        assert!(walked.diff(&refreshed).is_empty());
        let changed: Vec<String> = refreshed.diff(&base).iter().map(Change::shown).collect();
        for path in [
            "calc.txt",
            "src/lib.rs",
            "new.txt",
            "fresh/dir/f.txt",
            "build/out/x.o",
        ] {
            assert!(changed.contains(&path.to_string()), "{path} in {changed:?}");
        }
        for path in ["src/moved/b.rs", "src/deep/a.rs", "link", ".git/HEAD"] {
            assert!(changed.contains(&path.to_string()), "{path} in {changed:?}");
        }
    }

    #[test]
    fn a_file_that_replaces_a_directory_and_back_is_read_again() {
        let d = checkout();
        let (_, refreshed, walked) = refreshed_and_walked(d.path(), |p| {
            fs::remove_dir_all(p.join("src/deep")).unwrap();
            fs::write(p.join("src/deep"), "now a file\n").unwrap();
            fs::remove_file(p.join("calc.txt")).unwrap();
            fs::create_dir(p.join("calc.txt")).unwrap();
            fs::write(p.join("calc.txt/inner"), "i\n").unwrap();
        });
        assert_eq!(refreshed.entries, walked.entries);
    }

    /// A directory removed and made again gets the inode number it had
    /// (ext4, xfs reuse them at once) but none of its watches: what is
    /// written into it after must still be read.
    #[test]
    fn a_directory_made_again_with_its_old_inode_is_read_whole() {
        let d = checkout();
        let (_, refreshed, walked) = refreshed_and_walked(d.path(), |p| {
            for _ in 0..3 {
                fs::remove_dir_all(p.join("src/deep")).unwrap();
                fs::create_dir(p.join("src/deep")).unwrap();
                fs::write(p.join("src/deep/new.rs"), "new\n").unwrap();
                fs::create_dir_all(p.join("src/deep/sub")).unwrap();
                fs::write(p.join("src/deep/sub/b.rs"), "b\n").unwrap();
            }
            let moved = p.join("build/out");
            fs::rename(&moved, p.join("out")).unwrap();
            fs::remove_dir_all(p.join("out")).unwrap();
            fs::create_dir(&moved).unwrap();
            fs::write(moved.join("y.o"), "y").unwrap();
        });
        assert_eq!(refreshed.entries, walked.entries);
    }

    /// The checkout's root removed and made again (with its old inode
    /// number): nothing below it is watched any more.
    #[test]
    fn a_root_made_again_gives_no_refresh() {
        let d = checkout();
        let p = d.path();
        let (base, follow) = Snapshot::take_following(p).unwrap();
        let mode = fs::metadata(p).unwrap().permissions();
        fs::remove_dir_all(p).unwrap();
        fs::create_dir(p).unwrap();
        fs::set_permissions(p, mode).unwrap();
        fs::write(p.join("calc.txt"), "add\nsub\n").unwrap();
        fs::write(p.join("fresh.txt"), "unwatched\n").unwrap();
        assert!(follow.unwrap().refresh(&base).is_none());
    }

    #[test]
    fn a_refresh_that_takes_the_snapshot_holds_what_a_walk_finds() {
        let d = checkout();
        let p = d.path();
        let (base, follow) = Snapshot::take_following(p).unwrap();
        fs::write(p.join("src/lib.rs"), "fn main() { changed() }\n").unwrap();
        fs::remove_dir_all(p.join("build")).unwrap();
        fs::write(p.join("zz.txt"), "last in order\n").unwrap();
        fs::write(p.join("a.txt"), "first in order\n").unwrap();
        let refreshed = follow.unwrap().refresh_owned(base).expect("refreshed");
        assert_eq!(refreshed.entries, Snapshot::take(p).unwrap().entries);
    }

    #[test]
    fn an_unchanged_checkout_refreshes_to_itself() {
        let d = checkout();
        let (base, refreshed, walked) = refreshed_and_walked(d.path(), |_| {});
        assert_eq!(refreshed.entries, base.entries);
        assert_eq!(refreshed.entries, walked.entries);
    }

    #[test]
    fn a_file_with_another_link_gives_no_refresh() {
        let d = checkout();
        let p = d.path();
        fs::hard_link(p.join("calc.txt"), p.join("src/twin.txt")).unwrap();
        let (base, follow) = Snapshot::take_following(p).unwrap();
        fs::write(p.join("calc.txt"), "changed through one link\n").unwrap();
        assert!(follow.unwrap().refresh(&base).is_none());
    }

    #[test]
    fn more_paths_than_a_refresh_reads_give_none() {
        let d = checkout();
        let p = d.path();
        let (base, follow) = Snapshot::take_following(p).unwrap();
        for i in 0..=MAX_PATHS {
            fs::write(p.join(format!("src/f{i}")), "").unwrap();
        }
        assert!(follow.unwrap().refresh(&base).is_none());
    }

    /// inotify does not report a write through a memory mapping; the full
    /// walk after it must still tell the refreshed snapshot from the
    /// checkout (the reviewer's check then fails closed).
    #[test]
    fn a_write_through_a_memory_mapping_is_seen_by_the_next_walk() {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
        let d = checkout();
        let p = d.path();
        // Out of the clock tick of the walk: metadata alone must tell.
        std::thread::sleep(Duration::from_millis(100));
        let (base, follow) = Snapshot::take_following(p).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(p.join("calc.txt"))
            .unwrap();
        let len = std::num::NonZeroUsize::new(8).unwrap();
        let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        // SAFETY: a fresh shared mapping of a file of 8 bytes that nothing
        // else maps; it is written within its length and unmapped once.
        unsafe {
            let at = mmap(None, len, prot, MapFlags::MAP_SHARED, &f, 0).unwrap();
            std::ptr::copy_nonoverlapping(b"ADD\nSUB\n".as_ptr(), at.as_ptr().cast::<u8>(), 8);
            nix::sys::mman::msync(at, 8, nix::sys::mman::MsFlags::MS_SYNC).unwrap();
            munmap(at, 8).unwrap();
        }
        let refreshed = follow.unwrap().refresh(&base).expect("refreshed");
        let walked = Snapshot::take(p).unwrap();
        let seen = refreshed
            .diff(&base)
            .iter()
            .chain(walked.diff(&refreshed).iter())
            .any(|c| c.path == b"calc.txt");
        assert!(seen, "the mapped write went unseen");
        assert_eq!(fs::read(p.join("calc.txt")).unwrap(), b"ADD\nSUB\n");
    }
}
