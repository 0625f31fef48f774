//! [`Watch`]: the user's repository read again only after something there
//! changed, so that a run pays for a full [`super::snapshot`] only then
//! (docs/security.md "What is protected").
//!
//! inotify watches every directory `git status` looks at — the working
//! tree minus what git does not descend into — and the git directory but
//! its object stores.
//! Any event makes the kept state stale. Events are read by the caller, not
//! by a thread: the kernel queues an event inside the system call that
//! caused it, so once an agent has exited and been waited for, a
//! non-blocking read sees everything it did; a reading thread would race.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

use super::RepoState;
use crate::git::Git;
use crate::snapshot::inotify_mask as mask;

/// Directories `git status` does not descend into, relative to the working
/// tree: those an ignore rule matches, and untracked nested repositories
/// (listed as one entry, whose stamp only their own entries change).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Pruned {
    ignored: BTreeSet<PathBuf>,
    nested: BTreeSet<PathBuf>,
}

impl Pruned {
    /// Records one `git status --ignored=matching` entry; true when it is
    /// an ignored path, which the state leaves out.
    pub(super) fn note(&mut self, code: &str, path: &str) -> bool {
        let dir = path.strip_suffix('/');
        match (code, dir) {
            ("!!", Some(d)) => {
                self.ignored.insert(PathBuf::from(d));
            }
            ("??", Some(d)) => {
                self.nested.insert(PathBuf::from(d));
            }
            _ => {}
        }
        code == "!!"
    }

    /// Whether every directory pruned here is still pruned in `now`: if
    /// not, a directory git now looks into may be unwatched.
    fn within(&self, now: &Pruned) -> bool {
        self.ignored.is_subset(&now.ignored) && self.nested.is_subset(&now.nested)
    }
}

/// The state of the user's repository, kept between agent calls and read
/// again only when inotify saw something change there (or a file outside
/// it that decides what git lists: see [`rule_files`]). Shared by the
/// run's workers; every method blocks (git runs when the state is read
/// again), so async callers wrap it in `block_in_place`.
///
/// When inotify cannot be used (the watch limit
/// `/proc/sys/fs/inotify/max_user_watches` reached, no inotify instance
/// left, a directory that cannot be watched or listed, a repository on a
/// network or FUSE file system), every [`Watch::state`] is a full
/// [`super::snapshot`], as without a watch.
pub struct Watch {
    repo: PathBuf,
    skip: Vec<PathBuf>,
    max_watches: usize,
    inner: Mutex<Inner>,
    reads: AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// The watch and the state it guards; `None` before the first call and
    /// after a change.
    live: Option<Live>,
    /// Set once inotify could not be used; never unset.
    fallback: bool,
    /// What the last full read said git does not descend into.
    pruned: Option<Pruned>,
}

struct Live {
    inotify: Inotify,
    /// Each watched directory, to name where a change happened.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// [`rule_files`] with their [`stamp`] from before the state was read.
    rules: Vec<(PathBuf, String)>,
    state: RepoState,
}

impl Watch {
    /// A watch of the repository whose working tree is `repo`. Nothing is
    /// read or watched until the first [`Watch::state`]. Directories in
    /// `skip` (nightshift's data and log directories, when they are inside
    /// the repository) are not watched: nightshift's own writes there would
    /// make every state stale.
    pub fn new(repo: &Path, skip: Vec<PathBuf>) -> Watch {
        Watch::with_max_watches(repo, skip, usize::MAX)
    }

    /// [`Watch::new`] that watches at most `max` directories (and falls
    /// back to full snapshots beyond), as if the kernel's limit were `max`.
    pub fn with_max_watches(repo: &Path, skip: Vec<PathBuf>, max: usize) -> Watch {
        Watch {
            repo: repo.to_path_buf(),
            skip,
            max_watches: max,
            inner: Mutex::new(Inner::default()),
            reads: AtomicU64::new(0),
        }
    }

    /// The repository's state now: the kept one when nothing changed since
    /// it was read, else a full read (see [`super::snapshot`]; blocking,
    /// git's timeout 120 s per command). Never fails; a part that cannot
    /// be read is recorded as such, and such a state is not kept.
    pub fn state(&self) -> RepoState {
        // A panic while the state was being replaced leaves nothing to trust.
        let mut inner = self.inner.lock().unwrap_or_else(|poisoned| {
            let mut inner = poisoned.into_inner();
            inner.live = None;
            inner
        });
        if let Some(live) = &inner.live {
            match live.change() {
                None => return live.state.clone(),
                Some(why) => tracing::debug!(
                    "the user's repository {} changed ({why}); reading it again",
                    self.repo.display()
                ),
            }
        }
        // Dropped before the new watches are added: the kernel counts both
        // sets against the user's limit while they exist.
        inner.live = None;
        self.reads.fetch_add(1, Ordering::Relaxed);
        if inner.fallback {
            return super::snapshot(&self.repo);
        }
        let before = inner.pruned.take();
        match self.arm(before) {
            Ok((armed, before)) => {
                let mut now = Pruned::default();
                // Read after every watch is in place: a change during the
                // read is an event, and the next call reads again.
                let state = super::read(&self.repo, Some(&mut now));
                let keep = state.settled() && before.within(&now);
                inner.pruned = Some(now);
                if keep {
                    inner.live = Some(Live {
                        state: state.clone(),
                        ..armed
                    });
                }
                state
            }
            Err(ArmError::Git(why)) => {
                tracing::debug!("cannot watch {} now ({why})", self.repo.display());
                super::snapshot(&self.repo)
            }
            Err(ArmError::Inotify(why)) => {
                tracing::warn!(
                    "cannot watch the user's repository {} ({why}): it is read in full around every agent call",
                    self.repo.display()
                );
                inner.fallback = true;
                super::snapshot(&self.repo)
            }
        }
    }

    /// How many times [`Watch::state`] read the repository in full.
    pub fn full_reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Whether the watch gave up on inotify (every state is a full read).
    pub fn is_fallback(&self) -> bool {
        self.inner.lock().map_or(true, |inner| inner.fallback)
    }

    /// A new inotify instance watching the repository, with the pruned
    /// directories it used (`pruned`, else read now).
    ///
    /// # Errors
    /// [`ArmError::Git`] when git cannot read the repository now;
    /// [`ArmError::Inotify`] when inotify cannot watch it.
    fn arm(&self, pruned: Option<Pruned>) -> Result<(Live, Pruned), ArmError> {
        // Stamped first: a change from here on shows at the next call.
        let rules = rule_files(&self.repo)
            .into_iter()
            .map(|p| {
                let s = stamp(&p);
                (p, s)
            })
            .collect();
        let pruned = match pruned {
            Some(p) => p,
            None => read_pruned(&self.repo).map_err(ArmError::Git)?,
        };
        let top = std::fs::canonicalize(&self.repo)
            .map_err(|e| ArmError::Git(format!("{}: {e}", self.repo.display())))?;
        let repo = crate::git::open(&top).map_err(|e| ArmError::Git(e.to_string()))?;
        let roots = [
            top.clone(),
            repo.path().to_path_buf(),
            repo.commondir().to_path_buf(),
        ];
        if let Some((root, fs)) = roots.iter().find_map(|r| remote_fs(r).map(|fs| (r, fs))) {
            let why = format!(
                "{} is on {fs}, where other machines' writes raise no event",
                root.display()
            );
            return Err(ArmError::Inotify(why));
        }
        let mut skip: Vec<PathBuf> = self
            .skip
            .iter()
            .map(|s| std::fs::canonicalize(s).unwrap_or_else(|_| s.clone()))
            .collect();
        // Object stores, which the state leaves out: git's own (a checkout
        // that writes an object its alternates already hold only refreshes
        // that file's time there, an event on every commit), git-lfs's and
        // git-annex's (large; git status never reads them).
        let stores = ["objects", "lfs", "annex"];
        skip.extend(roots[1..].iter().flat_map(|g| stores.map(|s| g.join(s))));
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| ArmError::Inotify(format!("no inotify instance: {e}")))?;
        let mut walk = Walk {
            inotify: &inotify,
            top: &top,
            pruned: &pruned,
            skip: &skip,
            max: self.max_watches,
            dirs: HashMap::new(),
        };
        for root in &roots {
            walk.add_tree(root).map_err(ArmError::Inotify)?;
        }
        tracing::debug!(
            "watching {} directories of {}",
            walk.dirs.len(),
            top.display()
        );
        let live = Live {
            dirs: walk.dirs,
            inotify,
            rules,
            state: RepoState::default(),
        };
        Ok((live, pruned))
    }
}

/// Why [`Watch::arm`] failed.
enum ArmError {
    /// git could not read the repository this time: read it in full, and
    /// try to watch it again at the next call.
    Git(String),
    /// inotify cannot watch it: every later state is a full read.
    Inotify(String),
}

/// File systems whose files can change without this kernel seeing it
/// (another machine, a user-space server), by `statfs` magic number.
const REMOTE_FS: &[(u32, &str)] = &[
    (0x6969, "nfs"),
    (0x517B, "smb"),
    (0xFE53_4D42, "smb2"),
    (0xFF53_4D42, "cifs"),
    (0x6573_5546, "fuse"),
    (0x00C3_6400, "ceph"),
    (0x5346_414F, "afs"),
    (0x0102_1997, "9p"),
    (0x7375_7245, "coda"),
    (0x0BD0_0BD0, "lustre"),
    (0x0116_1970, "gfs2"),
    (0x7461_636F, "ocfs2"),
];

/// The name of the remote or user-space file system `path` is on, if it is.
fn remote_fs(path: &Path) -> Option<&'static str> {
    let magic = nix::sys::statfs::statfs(path).ok()?.filesystem_type().0 as u32;
    REMOTE_FS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

impl Live {
    /// What changed since the state was read, if anything: the first
    /// event queued, or a rule file whose stamp differs.
    fn change(&self) -> Option<String> {
        match self.inotify.read_events() {
            Ok(events) => Some(
                events
                    .first()
                    .map_or_else(|| "an empty read".into(), |e| self.describe(e)),
            ),
            Err(Errno::EAGAIN) => self
                .rules
                .iter()
                .find(|(path, was)| stamp(path) != *was)
                .map(|(path, _)| format!("{} changed", path.display())),
            Err(e) => Some(format!("reading its inotify events: {e}")),
        }
    }

    /// An event in words, for the log: where it happened.
    fn describe(&self, event: &InotifyEvent) -> String {
        if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            return "inotify's event queue overflowed".into();
        }
        let dir = self.dirs.get(&event.wd).cloned().unwrap_or_default();
        match &event.name {
            Some(name) => dir.join(name).display().to_string(),
            None => dir.display().to_string(),
        }
    }
}

/// One pass adding watches under the repository's roots.
struct Walk<'a> {
    inotify: &'a Inotify,
    /// The working tree (canonical): pruned paths are relative to it.
    top: &'a Path,
    pruned: &'a Pruned,
    skip: &'a [PathBuf],
    max: usize,
    dirs: HashMap<WatchDescriptor, PathBuf>,
}

impl Walk<'_> {
    /// Watches `root` and every directory under it that git looks at. A
    /// directory is watched before it is listed, so one made after its
    /// listing is an event; one already watched (the git directory inside
    /// the working tree, a bind mount) is not walked twice.
    ///
    /// # Errors
    /// The watch limit, or a directory that cannot be watched or listed.
    fn add_tree(&mut self, root: &Path) -> Result<(), String> {
        let mut stack = vec![(root.to_path_buf(), true)];
        while let Some((dir, descend)) = stack.pop() {
            let is_root = dir == root;
            let Some(wd) = self.add(&dir, is_root)? else {
                continue;
            };
            if self.dirs.insert(wd, dir.clone()).is_some() || !descend {
                continue;
            }
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                // Gone since its parent was listed: the parent's watch saw it go.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !is_root => continue,
                Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
            };
            for entry in entries {
                let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
                match entry.file_type() {
                    Ok(t) if t.is_dir() => {}
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(format!("cannot read {}: {e}", entry.path().display())),
                }
                let child = entry.path();
                if self.skip.contains(&child) {
                    continue;
                }
                let rel = child.strip_prefix(self.top).ok();
                if rel.is_some_and(|r| self.pruned.ignored.contains(r)) {
                    continue;
                }
                let deep = !rel.is_some_and(|r| self.pruned.nested.contains(r));
                stack.push((child, deep));
            }
        }
        Ok(())
    }

    /// Adds one watch; `None` when the directory is gone (or no longer a
    /// directory) since its parent was listed.
    fn add(&self, dir: &Path, is_root: bool) -> Result<Option<WatchDescriptor>, String> {
        if self.dirs.len() >= self.max {
            return Err(format!("more than {} directories to watch", self.max));
        }
        // Below a root, a directory swapped for a link must not move the
        // watch outside the repository.
        let flags = if is_root {
            mask()
        } else {
            mask() | AddWatchFlags::IN_DONT_FOLLOW
        };
        match self.inotify.add_watch(dir, flags) {
            Ok(wd) => Ok(Some(wd)),
            Err(Errno::ENOENT | Errno::ENOTDIR) if !is_root => Ok(None),
            Err(Errno::ENOSPC) => Err(
                "the inotify watch limit (/proc/sys/fs/inotify/max_user_watches) is reached".into(),
            ),
            Err(e) => Err(format!("cannot watch {}: {e}", dir.display())),
        }
    }
}

/// What `git status` does not descend into, read on its own (the first
/// time only; later reads get it with the state).
///
/// # Errors
/// When git cannot list it.
fn read_pruned(repo: &Path) -> Result<Pruned, String> {
    let mut pruned = Pruned::default();
    let mut parts = std::collections::BTreeMap::new();
    super::status_parts(&Git::new(repo), repo, &mut parts, Some(&mut pruned));
    match parts.get(&(super::Part::Worktree, "(status)".to_string())) {
        Some(why) => Err(format!("git status: {why}")),
        None => Ok(pruned),
    }
}

/// Files outside the repository that decide what `git status` lists, so a
/// change to one makes the state stale although no watched directory saw
/// it: git's system and global config, every file the config was read from
/// or names as an include, and the global excludes and attributes files.
/// Missing ones too: their creation is a change.
fn rule_files(repo: &Path) -> Vec<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = env("HOME");
    let xdg = env("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
    let mut files = vec![PathBuf::from("/etc/gitconfig")];
    files.extend(home.as_ref().map(|h| h.join(".gitconfig")));
    if let Some(x) = &xdg {
        files.extend(["config", "ignore", "attributes"].map(|n| x.join("git").join(n)));
    }
    files.extend(
        ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"]
            .into_iter()
            .filter_map(env),
    );
    files.extend(config_files(repo, home.as_deref()));
    files.sort();
    files.dedup();
    files
}

/// The files `git config --list --show-origin` names in the repository at
/// `repo`: each config file read, each include (`include.path`,
/// `includeIf.*.path`, relative to the file naming it), and the excludes
/// and attributes files (relative to the working tree). Empty when git
/// fails: the defaults in [`rule_files`] remain.
fn config_files(repo: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let listed = Git::new(repo).run(&["config", "--list", "--show-origin", "-z"]);
    let text = listed.map(|o| o.stdout).unwrap_or_default();
    let resolve = |value: &str, base: &Path| match (value.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => h.join(rest),
        _ => base.join(value),
    };
    let mut files = Vec::new();
    let mut fields = text.split(|b| *b == 0);
    while let (Some(origin), Some(entry)) = (fields.next(), fields.next()) {
        let origin = String::from_utf8_lossy(origin);
        let entry = String::from_utf8_lossy(entry);
        let Some(file) = origin.strip_prefix("file:").map(|f| repo.join(f)) else {
            continue;
        };
        let (key, value) = entry.split_once('\n').unwrap_or((&entry, ""));
        let include =
            key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"));
        if include && !value.is_empty() {
            let dir = file.parent().unwrap_or(repo).to_path_buf();
            files.push(resolve(value, &dir));
        } else if matches!(key, "core.excludesfile" | "core.attributesfile") && !value.is_empty() {
            files.push(resolve(value, repo));
        }
        files.push(file);
    }
    files
}

/// A file's identity and change times (following links), or why there is
/// none. The change time cannot be set back by a process, so any write
/// changes the stamp.
fn stamp(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => format!(
            "{} {} {} {}.{} {}.{}",
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        ),
        Err(e) => format!("{:?}", e.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::tests::git;
    use crate::user_repo::{changes, snapshot};
    use std::time::Duration;

    fn write(repo: &Path, path: &str, text: &str) {
        let path = repo.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Two commits (tag `v1` on the first), a tracked file under the
    /// ignored `build/`, an untracked directory `notes/`, ignored files in
    /// `node_modules/` and `build/`; out of git's racy window.
    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        git(p, &["init", "-q", "-b", "main"]);
        write(p, ".gitignore", "build/\nnode_modules/\n");
        write(p, "calc.txt", "add\nsub\n");
        write(p, "src/lib.rs", "fn main() {}\n");
        git(p, &["add", "-A"]);
        git(p, &["commit", "-q", "-m", "one"]);
        git(p, &["tag", "v1"]);
        write(p, "build/keep.txt", "kept\n");
        git(p, &["add", "-f", "build/keep.txt"]);
        git(p, &["commit", "-q", "-m", "two"]);
        write(p, "build/cache.txt", "cache\n");
        write(p, "node_modules/pkg/index.js", "x\n");
        write(p, "notes/a.txt", "note\n");
        std::thread::sleep(Duration::from_millis(1100));
        git(p, &["update-index", "--refresh", "-q"]);
        d
    }

    /// Reads `repo` through a new watch, runs `change`, reads it again:
    /// each read equals a full snapshot taken beside it, and the second one
    /// was a full read. Returns the changes found.
    fn through_watch(repo: &Path, change: impl FnOnce(&Path)) -> Vec<String> {
        let w = Watch::new(repo, Vec::new());
        let before = w.state();
        assert_eq!(before, snapshot(repo));
        assert!(!w.is_fallback());
        change(repo);
        let after = w.state();
        assert_eq!(after, snapshot(repo), "the watch's state is the full one");
        assert_eq!(w.full_reads(), 2, "the change was seen");
        changes(&before, &after)
    }

    #[test]
    fn an_unchanged_repository_is_read_once() {
        let d = repo();
        let w = Watch::new(d.path(), Vec::new());
        let first = w.state();
        // Reading the repository, as the full snapshot and git do, is no change.
        assert_eq!(snapshot(d.path()), first);
        let _ = std::fs::read_to_string(d.path().join("calc.txt")).unwrap();
        for _ in 0..3 {
            assert_eq!(w.state(), first);
        }
        assert_eq!(w.full_reads(), 1);
        assert!(!w.is_fallback());
    }

    #[test]
    fn a_write_to_a_tracked_file_is_seen() {
        let d = repo();
        let found = through_watch(d.path(), |p| write(p, "src/lib.rs", "fn main() { x }\n"));
        assert_eq!(found, ["working tree: src/lib.rs (modified)"]);
    }

    #[test]
    fn a_new_file_in_an_untracked_directory_is_seen() {
        let d = repo();
        let found = through_watch(d.path(), |p| write(p, "notes/b.txt", "b\n"));
        assert_eq!(found, ["working tree: notes/b.txt (new, untracked)"]);
    }

    #[test]
    fn a_new_directory_with_a_file_is_seen_and_then_watched() {
        let d = repo();
        let found = through_watch(d.path(), |p| write(p, "fresh/deep/x.txt", "x\n"));
        assert_eq!(found, ["working tree: fresh/deep/x.txt (new, untracked)"]);
        // The new directory is watched from the read that found it.
        let found = through_watch(d.path(), |p| write(p, "fresh/deep/y.txt", "y\n"));
        assert_eq!(found, ["working tree: fresh/deep/y.txt (new, untracked)"]);
    }

    #[test]
    fn a_moved_ref_is_seen() {
        let d = repo();
        let found = through_watch(d.path(), |p| {
            git(p, &["update-ref", "refs/tags/v1", "HEAD"])
        });
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("ref refs/tags/v1 moved from"),
            "{found:?}"
        );
        // A ref rewritten inside packed-refs.
        git(d.path(), &["pack-refs", "--all"]);
        let found = through_watch(d.path(), |p| {
            git(p, &["update-ref", "refs/tags/v1", "HEAD~1"])
        });
        assert!(
            found[0].starts_with("ref refs/tags/v1 moved from"),
            "{found:?}"
        );
    }

    #[test]
    fn a_hook_added_is_seen() {
        let d = repo();
        let found = through_watch(d.path(), |p| {
            write(p, ".git/hooks/pre-commit", "#!/bin/sh\n")
        });
        assert_eq!(found, [".git/hooks/pre-commit"]);
    }

    #[test]
    fn the_index_rewritten_is_seen() {
        let d = repo();
        let found = through_watch(d.path(), |p| {
            git(p, &["update-index", "--index-version", "4"])
        });
        assert_eq!(found, ["the index (.git/index)"]);
    }

    #[test]
    fn a_same_size_write_with_its_mtime_set_back_is_seen() {
        use std::io::Write;
        let d = repo();
        let found = through_watch(d.path(), |p| {
            let path = p.join("calc.txt");
            let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all(b"ADD\n").unwrap();
            f.set_modified(mtime).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
        });
        assert_eq!(found, ["working tree: calc.txt (modified)"]);
    }

    #[test]
    fn a_tracked_file_under_an_ignored_directory_is_seen() {
        let d = repo();
        let found = through_watch(d.path(), |p| write(p, "build/keep.txt", "changed\n"));
        assert_eq!(found, ["working tree: build/keep.txt (modified)"]);
    }

    #[test]
    fn a_write_git_ignores_is_no_change_and_no_read() {
        let d = repo();
        let w = Watch::new(d.path(), Vec::new());
        let before = w.state();
        write(d.path(), "node_modules/pkg/more.js", "y\n");
        write(d.path(), "build/more.txt", "y\n");
        assert_eq!(w.state(), before);
        assert_eq!(before, snapshot(d.path()));
        // build/ holds a tracked file: watched, read again, nothing to report.
        assert_eq!(w.full_reads(), 2);
        write(d.path(), "node_modules/pkg/again.js", "y\n");
        assert_eq!(w.state(), before);
        assert_eq!(w.full_reads(), 2, "node_modules/ is not watched");
    }

    #[test]
    fn a_directory_no_longer_ignored_is_watched() {
        let d = repo();
        let w = Watch::new(d.path(), Vec::new());
        let before = w.state();
        write(d.path(), ".gitignore", "build/\n");
        // This read walked with the old rules (node_modules/ unwatched), so
        // it is not kept: the next one reads again and watches it.
        let mid = w.state();
        assert_eq!(mid, snapshot(d.path()));
        let found = changes(&before, &mid);
        assert!(
            found.contains(&"working tree: node_modules/pkg/index.js (new, untracked)".into()),
            "{found:?}"
        );
        write(d.path(), "node_modules/pkg/b.js", "b\n");
        let after = w.state();
        assert_eq!(after, snapshot(d.path()));
        assert_eq!(
            changes(&mid, &after),
            ["working tree: node_modules/pkg/b.js (new, untracked)"]
        );
        // Now watched: another write there is seen as an event.
        let reads = w.full_reads();
        assert_eq!(w.state(), after);
        write(d.path(), "node_modules/pkg/c.js", "c\n");
        assert_ne!(w.state(), after);
        assert_eq!(w.full_reads(), reads + 1);
    }

    #[test]
    fn an_excludes_file_named_by_an_include_outside_the_repository_is_watched() {
        let d = repo();
        let outside = tempfile::tempdir().unwrap();
        let extra = outside.path().join("extra.gitconfig");
        git(
            d.path(),
            &["config", "include.path", extra.to_str().unwrap()],
        );
        let found = through_watch(d.path(), |_| {
            let excludes = outside.path().join("excludes");
            std::fs::write(&excludes, "notes/\n").unwrap();
            let text = format!("[core]\n\texcludesFile = {}\n", excludes.display());
            std::fs::write(&extra, text).unwrap();
        });
        assert_eq!(
            found,
            ["working tree: notes/a.txt (no longer changed: restored or committed)"]
        );
    }

    #[test]
    fn an_untracked_nested_repository_is_watched_at_its_top_only() {
        let d = repo();
        git(d.path(), &["init", "-q", "nested"]);
        write(d.path(), "nested/sub/x.txt", "x\n");
        let w = Watch::new(d.path(), Vec::new());
        let before = w.state();
        write(d.path(), "nested/sub/y.txt", "y\n");
        assert_eq!(w.state(), before, "git lists nested/ as one entry");
        assert_eq!(before, snapshot(d.path()));
        assert_eq!(w.full_reads(), 1);
        let found = through_watch(d.path(), |p| write(p, "nested/top.txt", "t\n"));
        assert_eq!(
            found,
            ["working tree: nested/ (changed again; new, untracked)"]
        );
    }

    /// A checkout borrowing the repository's objects (as the slots do)
    /// that writes an object they already hold makes git refresh that
    /// object's time in the repository: no change, and no read.
    #[test]
    fn a_checkout_sharing_the_objects_is_no_change() {
        let d = repo();
        let outside = tempfile::tempdir().unwrap();
        let slot = outside.path().join("slot");
        git(
            outside.path(),
            &[
                "clone",
                "-q",
                "--shared",
                d.path().to_str().unwrap(),
                "slot",
            ],
        );
        let w = Watch::new(d.path(), Vec::new());
        let before = w.state();
        git(&slot, &["commit", "-q", "--allow-empty", "-m", "same tree"]);
        git(&slot, &["hash-object", "-w", "calc.txt"]);
        assert_eq!(w.state(), before);
        assert_eq!(before, snapshot(d.path()));
        assert_eq!(w.full_reads(), 1);
    }

    #[test]
    fn skipped_directories_are_not_watched() {
        let d = repo();
        let own = d.path().join("own");
        std::fs::create_dir(&own).unwrap();
        let w = Watch::new(d.path(), vec![own.clone()]);
        let before = w.state();
        std::fs::write(own.join("log.txt"), "nightshift's own\n").unwrap();
        assert_eq!(w.state(), before);
        assert_eq!(w.full_reads(), 1);
    }

    /// The watch limit is simulated with a maximum of two directories; the
    /// repository has more, so every state is a full read, and changes are
    /// still found.
    #[test]
    fn without_enough_watches_every_state_is_a_full_read() {
        let d = repo();
        let w = Watch::with_max_watches(d.path(), Vec::new(), 2);
        let before = w.state();
        assert!(w.is_fallback());
        assert_eq!(w.state(), before);
        assert_eq!(w.full_reads(), 2);
        write(d.path(), "calc.txt", "add\nsub\nmul\n");
        let after = w.state();
        assert_eq!(w.full_reads(), 3);
        assert_eq!(after, snapshot(d.path()));
        assert_eq!(
            changes(&before, &after),
            ["working tree: calc.txt (modified)"]
        );
    }

    #[test]
    fn two_threads_share_one_watch() {
        let d = repo();
        let w = Watch::new(d.path(), Vec::new());
        let both = |w: &Watch| {
            std::thread::scope(|s| {
                let a = s.spawn(|| w.state());
                let b = s.spawn(|| w.state());
                (a.join().unwrap(), b.join().unwrap())
            })
        };
        let (a, b) = both(&w);
        assert_eq!(a, b);
        assert_eq!(w.full_reads(), 1, "one read, the other thread got it kept");
        write(d.path(), "src/lib.rs", "changed\n");
        let (a2, b2) = both(&w);
        assert_eq!(a2, b2);
        assert_eq!(a2, snapshot(d.path()));
        assert_eq!(w.full_reads(), 2);
        assert_eq!(changes(&a, &a2), ["working tree: src/lib.rs (modified)"]);
    }
}
