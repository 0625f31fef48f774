//! [`Prepared`]: a [`Policy`] turned, by the runner, into the exact
//! system calls the child makes — NUL-terminated paths, the mount steps in
//! order, the Landlock rules with their access bits, the id maps and the
//! seccomp programs — so that the child allocates nothing.
//!
//! Not for making those calls (`enter.rs`).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::landlock::{Access, abi};
use super::{Network, Policy, filter};

/// The system directories every sandbox shows read-only (a symbolic link
/// among them, such as `/bin` → `usr/bin`, is made as the same link).
pub const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"];

/// The system directories walked for what others may not read, hidden
/// inside ([`unreadable_by_others`]): `/etc`, where a system keeps its
/// secrets (`shadow`, host keys, `ssl/private`, `sudoers`). `/usr` is not
/// walked: packages keep no secrets there, and its 100 000-odd entries take
/// seconds to walk.
const WALKED: &[&str] = &["/etc"];

/// How long one walk of [`WALKED`] serves the calls prepared after it: a
/// file made unreadable during the night is hidden from the calls that
/// start this long after, while calls in quick succession (a gate's
/// commands, the benchmark) walk once.
const WALK_FOR: Duration = Duration::from_secs(60);

/// The host's `/dev/null`, bound (with `nodev`, so that it cannot be
/// opened) over each hidden file.
const DEV_NULL: &str = "/dev/null";

/// Where the host's root is seen while the new root is built.
const OLD: &str = "/oldroot";
/// Where the new root is built.
const NEW: &str = "/newroot";

/// One step of building the new root, in order.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Op {
    /// `mkdir`; an existing directory is fine.
    Mkdir(CString),
    /// Creates an empty file to bind a file onto.
    Touch(CString),
    /// A recursive bind mount of `src` (under the old root) onto `dst`,
    /// `nosuid` and `nodev`, read-only when the flag says so.
    Bind(CString, CString, bool),
    /// A bind mount of one device node (`/dev/null`, …), flags untouched.
    BindDev(CString, CString),
    /// A private tmpfs, capped at the policy's `tmp_size`.
    Tmpfs(CString),
    /// An empty read-only tmpfs over a directory others may not read.
    Hide(CString),
    /// A fresh `/proc` of the call's PID namespace.
    Proc(CString),
    /// A symbolic link `dst` → `target`.
    Symlink(CString, CString),
}

/// One Landlock rule: a path inside the new root and what it allows.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Rule {
    pub path: CString,
    pub access: u64,
}

/// Everything [`super::enter`] needs, built by the runner and handed to
/// the call's supervisor with its plan (serialized: the supervisor is a
/// program of its own, docs/security.md#processes).
#[derive(Debug, Serialize, Deserialize)]
pub struct Prepared {
    pub(super) ops: Vec<Op>,
    pub(super) rules: Vec<Rule>,
    pub(super) handled: Access,
    pub(super) uid_map: CString,
    pub(super) gid_map: CString,
    pub(super) cwd: CString,
    /// The mount options of every private tmpfs (`mode=0755,size=N`).
    pub(super) tmpfs_options: CString,
    /// Whether the proxy's port is made inside (`Network::Proxy`).
    pub(super) proxy: bool,
    /// The socket the proxy's listener is sent over ([`Prepared::proxy_socket`]):
    /// a descriptor of the supervisor's, so it is not sent with the rest.
    #[serde(skip, default = "no_socket")]
    pub(super) proxy_socket: libc::c_int,
    #[serde(with = "bpf")]
    pub(super) filters: Vec<seccompiler::BpfProgram>,
}

impl Prepared {
    /// Prepares `policy` for a call that runs as `ids` (uid, gid: after
    /// `agent_user`'s switch) in `cwd` (shown inside at the same path).
    ///
    /// # Errors
    /// A path of the policy that does not exist or cannot be resolved (the
    /// error names it), Landlock missing, or a seccomp filter that does
    /// not compile for this architecture.
    pub fn new(policy: &Policy, ids: (u32, u32), cwd: &Path) -> io::Result<Prepared> {
        let abi = abi().ok_or_else(|| io::Error::other("Landlock is not available"))?;
        let handled = Access::handled(abi);
        let mut mounts = Vec::new();
        for p in &policy.write {
            mounts.push((real(p)?, Kind::Write));
        }
        for p in &policy.read {
            mounts.push((real(p)?, Kind::Read));
        }
        for (host, inside) in &policy.home_files {
            mounts.push((inside.clone(), Kind::HomeFile(real(host)?)));
        }
        for d in &policy.home_dirs {
            mounts.push((d.clone(), Kind::HomeDir));
        }
        mounts.push((policy.home.clone(), Kind::Home));
        // Parents first: a path inside another is mounted on top of it.
        mounts.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.rank().cmp(&b.1.rank())));
        let mut ops = fixed_ops()?;
        let mut rules = fixed_rules(&handled)?;
        for d in SYSTEM_DIRS {
            system_dir(Path::new(d), &mut ops, &mut rules, &handled)?;
        }
        hide(&hidden(), &mut ops)?;
        for (path, kind) in &mounts {
            mount_one(path, kind, &mut ops, &mut rules, &handled)?;
        }
        Ok(Prepared {
            ops,
            rules,
            handled,
            uid_map: c(format!("{0} {0} 1\n", ids.0))?,
            gid_map: c(format!("{0} {0} 1\n", ids.1))?,
            cwd: c(cwd.as_os_str().as_bytes())?,
            tmpfs_options: c(format!(
                "mode=0755,size={}",
                policy.tmp_size.unwrap_or_else(super::default_tmp_size)
            ))?,
            proxy: matches!(policy.network, Network::Proxy(_)),
            proxy_socket: -1,
            filters: filter::programs()?,
        })
    }

    /// Whether the sandbox makes the proxy's port inside and needs
    /// [`Prepared::proxy_socket`] to send its listener over.
    pub fn proxy(&self) -> bool {
        self.proxy
    }

    /// The end of a Unix socket pair over which the sandbox, once its
    /// network namespace exists, sends the listening socket of the proxy's
    /// port (`SCM_RIGHTS`), for [`super::Proxy::serve`] to accept on. `fd`
    /// must stay open until the call is started (close-on-exec keeps it
    /// from the program).
    pub fn proxy_socket(&mut self, fd: std::os::fd::BorrowedFd<'_>) {
        use std::os::fd::AsRawFd;
        self.proxy_socket = fd.as_raw_fd();
    }
}

/// What a policy path becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Write,
    Read,
    Home,
    HomeFile(PathBuf),
    HomeDir,
}

impl Kind {
    /// Order among equal paths: the home's tmpfs before the files in it,
    /// a write before a read of the same path (the read is then skipped).
    fn rank(&self) -> u8 {
        match self {
            Kind::Home => 0,
            Kind::Write => 1,
            Kind::Read => 2,
            Kind::HomeFile(_) | Kind::HomeDir => 3,
        }
    }
}

/// The canonical path of `p`, or an error naming it.
fn real(p: &Path) -> io::Result<PathBuf> {
    std::fs::canonicalize(p)
        .map_err(|e| io::Error::new(e.kind(), format!("sandbox path {}: {e}", p.display())))
}

/// The staging steps and the always-present `/tmp`, `/proc`, `/dev`.
fn fixed_ops() -> io::Result<Vec<Op>> {
    let mut ops = vec![
        Op::Mkdir(new("/tmp")?),
        Op::Tmpfs(new("/tmp")?),
        Op::Mkdir(new("/proc")?),
        Op::Proc(new("/proc")?),
        Op::Mkdir(new("/dev")?),
        Op::Tmpfs(new("/dev")?),
        Op::Mkdir(new("/dev/shm")?),
        Op::Tmpfs(new("/dev/shm")?),
    ];
    for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
        let path = format!("/dev/{dev}");
        ops.push(Op::Touch(new(&path)?));
        ops.push(Op::BindDev(old(Path::new(&path))?, new(&path)?));
    }
    for (link, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        ops.push(Op::Symlink(c(target)?, new(link)?));
    }
    Ok(ops)
}

/// Landlock rules for the always-present paths.
fn fixed_rules(handled: &Access) -> io::Result<Vec<Rule>> {
    Ok(vec![
        rule("/", handled.list)?,
        rule("/tmp", handled.write_dir)?,
        rule("/dev", handled.write_dir | handled.dev)?,
        rule("/proc", handled.read_dir)?,
    ])
}

/// A system directory: a read-only bind, or the same symbolic link.
fn system_dir(d: &Path, ops: &mut Vec<Op>, rules: &mut Vec<Rule>, h: &Access) -> io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(d) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(d)?;
        ops.push(Op::Symlink(c(target.as_os_str().as_bytes())?, new_path(d)?));
    } else if meta.is_dir() {
        ops.push(Op::Mkdir(new_path(d)?));
        ops.push(Op::Bind(old(d)?, new_path(d)?, true));
        rules.push(rule_path(d, h.read_dir)?);
    }
    Ok(())
}

/// Under `root`, every regular file and directory that others may not
/// read (`mode & 0o004 == 0`: `/etc/shadow`, `/etc/ssl/private`), as
/// `(path, is_dir)`, sorted. A directory found is hidden whole, so what
/// lies in it is not listed; links are not followed (a link's target is
/// judged where it lies); an entry that cannot be read is skipped.
/// A call may run as uid 0, the owner of these files, so their mode alone
/// does not keep them from it (docs/security.md#the-sandbox).
pub(super) fn unreadable_by_others(root: &Path) -> Vec<(PathBuf, bool)> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            let is_dir = meta.is_dir();
            if !is_dir && !meta.is_file() {
                continue;
            }
            if meta.permissions().mode() & 0o004 == 0 {
                found.push((e.path(), is_dir));
            } else if is_dir {
                stack.push(e.path());
            }
        }
    }
    found.sort();
    found
}

/// Paths hidden inside, as `(path, is_dir)` ([`unreadable_by_others`]).
type Hidden = Vec<(PathBuf, bool)>;

/// What [`WALKED`] holds that others may not read
/// ([`unreadable_by_others`]), walked at most once per [`WALK_FOR`] in
/// this process (the walk of `/etc` takes milliseconds; docs/security.md).
fn hidden() -> Arc<Hidden> {
    static LAST: Mutex<Option<(Instant, Arc<Hidden>)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    match &*last {
        Some((at, found)) if at.elapsed() < WALK_FOR => Arc::clone(found),
        _ => {
            let found: Vec<_> = (WALKED.iter())
                .flat_map(|d| unreadable_by_others(Path::new(d)))
                .collect();
            let found = Arc::new(found);
            *last = Some((Instant::now(), Arc::clone(&found)));
            found
        }
    }
}

/// The steps that hide `paths` (from [`unreadable_by_others`]) in the
/// read-only binds of the system directories: a directory under an empty
/// read-only tmpfs, a file under the host's `/dev/null` bound `nodev`
/// (opening it is refused, `EACCES`, as a reader without the right gets).
fn hide(paths: &[(PathBuf, bool)], ops: &mut Vec<Op>) -> io::Result<()> {
    for (path, is_dir) in paths {
        ops.push(match is_dir {
            true => Op::Hide(new_path(path)?),
            false => Op::Bind(old(Path::new(DEV_NULL))?, new_path(path)?, true),
        });
    }
    Ok(())
}

/// One policy path: its parents made, then its mount and its rule.
fn mount_one(
    path: &Path,
    kind: &Kind,
    ops: &mut Vec<Op>,
    rules: &mut Vec<Rule>,
    h: &Access,
) -> io::Result<()> {
    if rules
        .iter()
        .any(|r| r.path.as_bytes() == path.as_os_str().as_bytes())
    {
        return Ok(());
    }
    for parent in path
        .ancestors()
        .skip(1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        if parent != Path::new("/") {
            ops.push(Op::Mkdir(new_path(parent)?));
        }
    }
    if *kind == Kind::HomeDir {
        // Inside the home's tmpfs, under its rule: made, not mounted.
        ops.push(Op::Mkdir(new_path(path)?));
        return Ok(());
    }
    let (src, is_dir) = match kind {
        Kind::HomeFile(host) => (host.clone(), false),
        Kind::Home => (path.to_path_buf(), true),
        _ => (path.to_path_buf(), std::fs::metadata(path)?.is_dir()),
    };
    if is_dir {
        ops.push(Op::Mkdir(new_path(path)?));
    } else {
        ops.push(Op::Touch(new_path(path)?));
    }
    let access = match (kind, is_dir) {
        (Kind::Home, _) => {
            ops.push(Op::Tmpfs(new_path(path)?));
            h.write_dir
        }
        (Kind::Write, true) => h.write_dir,
        (Kind::Write, false) => h.write_file,
        (_, true) => h.read_dir,
        (_, false) => h.read_file,
    };
    if *kind != Kind::Home {
        ops.push(Op::Bind(old(&src)?, new_path(path)?, *kind != Kind::Write));
    }
    rules.push(rule_path(path, access)?);
    Ok(())
}

/// A Landlock rule for a path given as text.
fn rule(path: &str, access: u64) -> io::Result<Rule> {
    Ok(Rule {
        path: c(path)?,
        access,
    })
}

/// A Landlock rule for a path.
fn rule_path(path: &Path, access: u64) -> io::Result<Rule> {
    Ok(Rule {
        path: c(path.as_os_str().as_bytes())?,
        access,
    })
}

/// `path` under the new root.
fn new(path: &str) -> io::Result<CString> {
    c(format!("{NEW}{path}"))
}

/// `path` under the new root.
fn new_path(path: &Path) -> io::Result<CString> {
    let mut bytes = NEW.as_bytes().to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    c(bytes)
}

/// `path` under the old root.
fn old(path: &Path) -> io::Result<CString> {
    let mut bytes = OLD.as_bytes().to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    c(bytes)
}

/// A C string, or an error for a path with a NUL byte.
fn c(bytes: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::other("a sandbox path holds a NUL byte"))
}

/// No proxy socket yet: the supervisor sets the one it was handed.
fn no_socket() -> libc::c_int {
    -1
}

/// The seccomp programs as `(code, jt, jf, k)` tuples: seccompiler's
/// instruction type has no serde of its own.
mod bpf {
    use seccompiler::{BpfProgram, sock_filter};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    type Raw = Vec<Vec<(u16, u8, u8, u32)>>;

    pub(super) fn serialize<S: Serializer>(
        programs: &[BpfProgram],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let raw: Raw = (programs.iter())
            .map(|p| p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect())
            .collect();
        raw.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<BpfProgram>, D::Error> {
        let raw = Raw::deserialize(d)?;
        Ok(raw
            .into_iter()
            .map(|p| {
                p.into_iter()
                    .map(|(code, jt, jf, k)| sock_filter { code, jt, jf, k })
                    .collect()
            })
            .collect())
    }
}
