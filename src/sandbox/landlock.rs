//! Landlock through its three raw system calls (`landlock(7)`): the ABI
//! version, the access bits per ABI, and the restriction of the calling
//! thread. Raw, not the `landlock` crate: the ruleset is built in the child
//! after the new root is mounted (a rule names an inode of the new root),
//! where nothing may be allocated.
//!
//! Not for choosing the paths (`prepare.rs`).

use std::io;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
/// Every file-system right of ABI 1 (execute … make symlink).
const ABI1_ALL: u64 = (1 << 13) - 1;
const REFER: u64 = 1 << 13;
const TRUNCATE: u64 = 1 << 14;
const IOCTL_DEV: u64 = 1 << 15;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;
const CREATE_RULESET_VERSION: libc::c_uint = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;
const RULE_NET_PORT: libc::c_int = 2;

/// The kernel's Landlock ABI version, `None` when Landlock is missing
/// (not built in, or not in the `lsm=` list at boot).
pub(super) fn abi() -> Option<u32> {
    // SAFETY: the version query takes no attribute pointer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).ok().filter(|v| *v >= 1)
}

/// The rights a ruleset handles on this ABI and the masks rules grant.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(super) struct Access {
    /// File-system rights handled: everything not granted is refused.
    pub fs: u64,
    /// Network rights handled (ABI 4): TCP bind and connect, none granted.
    pub net: u64,
    /// Scopes (ABI 6): no signal to, and no abstract socket of, a process
    /// outside the sandbox.
    pub scoped: u64,
    /// Size of the ruleset attribute this ABI reads.
    pub attr_size: usize,
    /// A read-only file: read and execute.
    pub read_file: u64,
    /// A read-only directory: read, list, execute beneath.
    pub read_dir: u64,
    /// A writable file.
    pub write_file: u64,
    /// A writable directory: everything handled.
    pub write_dir: u64,
    /// `ioctl` on devices (ABI 5), for `/dev`.
    pub dev: u64,
    /// Listing a directory only (for `/`: every directory in the new root
    /// was put there on purpose).
    pub list: u64,
}

impl Access {
    /// The rights for `abi`; TCP is handled (refused but for the ports a
    /// rule allows: [`allow_connect`]) where the ABI knows it (4 and on).
    pub(super) fn handled(abi: u32) -> Access {
        let mut fs = ABI1_ALL;
        if abi >= 2 {
            fs |= REFER;
        }
        if abi >= 3 {
            fs |= TRUNCATE;
        }
        let dev = if abi >= 5 { IOCTL_DEV } else { 0 };
        fs |= dev;
        let net = if abi >= 4 {
            NET_BIND_TCP | NET_CONNECT_TCP
        } else {
            0
        };
        let scoped = if abi >= 6 {
            SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL
        } else {
            0
        };
        let attr_size = match abi {
            1..=3 => 8,
            4 | 5 => 16,
            _ => 24,
        };
        let read_file = EXECUTE | READ_FILE;
        Access {
            fs,
            net,
            scoped,
            attr_size,
            read_file,
            read_dir: read_file | READ_DIR,
            write_file: read_file | WRITE_FILE | (fs & TRUNCATE),
            write_dir: fs & !dev,
            dev,
            list: READ_DIR,
        }
    }
}

/// `struct landlock_ruleset_attr`.
#[repr(C)]
struct RulesetAttr {
    fs: u64,
    net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed).
#[repr(C, packed)]
struct PathBeneath {
    allowed: u64,
    parent_fd: i32,
}

/// A new ruleset's descriptor. Async-signal-safe.
pub(super) fn create(h: &Access) -> io::Result<libc::c_int> {
    let attr = RulesetAttr {
        fs: h.fs,
        net: h.net,
        scoped: h.scoped,
    };
    // SAFETY: a local attribute of at least `attr_size` bytes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            h.attr_size,
            0u32,
        )
    };
    libc::c_int::try_from(fd)
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(io::Error::last_os_error)
}

/// Allows `access` beneath the open `path` (an `O_PATH` descriptor).
/// Async-signal-safe.
pub(super) fn allow(ruleset: libc::c_int, path: &std::ffi::CStr, access: u64) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let attr = PathBeneath {
        allowed: access,
        parent_fd: fd,
    };
    // SAFETY: a local attribute; our own descriptors.
    let r = unsafe {
        let r = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &attr as *const PathBeneath,
            0u32,
        );
        libc::close(fd);
        r
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `struct landlock_net_port_attr`.
#[repr(C)]
struct NetPort {
    allowed: u64,
    port: u64,
}

/// Allows a TCP `connect` to `port` (any address: the sandbox's network
/// namespace has only its loopback). A no-op where TCP is not handled.
/// Async-signal-safe.
pub(super) fn allow_connect(ruleset: libc::c_int, h: &Access, port: u16) -> io::Result<()> {
    if h.net & NET_CONNECT_TCP == 0 {
        return Ok(());
    }
    let attr = NetPort {
        allowed: NET_CONNECT_TCP,
        port: u64::from(port),
    };
    // SAFETY: a local attribute of the rule's type.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_NET_PORT,
            &attr as *const NetPort,
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restricts this thread (and what it execs) to the ruleset; needs
/// `no_new_privs` first. Async-signal-safe.
pub(super) fn restrict(ruleset: libc::c_int) -> io::Result<()> {
    // SAFETY: our own descriptor.
    let r = unsafe {
        let r = libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32);
        libc::close(ruleset);
        r
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
