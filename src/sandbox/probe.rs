//! [`probe`]: whether this kernel can build the sandbox, found by building
//! one (in a forked child that exits instead of exec'ing), and [`Missing`],
//! which names the missing kernel feature and its fix.

use std::fmt;
use std::path::PathBuf;

use super::prepare::Prepared;
use super::{Network, Policy, enter, landlock};

/// A kernel feature the sandbox needs and this machine lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// Landlock (Linux 5.13+, enabled at boot).
    Landlock,
    /// seccomp filters (`CONFIG_SECCOMP_FILTER`).
    Seccomp,
    /// Unprivileged user namespaces are refused; the error number.
    UserNamespaces(i32),
    /// The namespaces were made but the new root could not be built
    /// (`mount_setattr` needs Linux 5.12+); the error number.
    Mounts(i32),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Landlock => f.write_str(
                "Landlock is not enabled in this kernel (needs Linux 5.13 or later with `landlock` in the boot parameter `lsm=`; check /sys/kernel/security/lsm)",
            ),
            Missing::Seccomp => f.write_str(
                "seccomp filters are not available (a kernel built with CONFIG_SECCOMP_FILTER)",
            ),
            Missing::UserNamespaces(errno) => write!(
                f,
                "user namespaces are refused ({}): allow them with `sysctl -w user.max_user_namespaces=15000` (and on Debian/Ubuntu `kernel.unprivileged_userns_clone=1`, `kernel.apparmor_restrict_unprivileged_userns=0`)",
                std::io::Error::from_raw_os_error(*errno)
            ),
            Missing::Mounts(errno) => write!(
                f,
                "the sandbox's file system could not be built ({}): it needs mount, PID and network namespaces and `mount_setattr` (Linux 5.12 or later)",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

/// Whether the sandbox can be built here, as the current user: Landlock,
/// seccomp, then a whole sandbox built in a forked child.
///
/// # Errors
/// The first missing feature.
pub fn probe() -> Result<(), Missing> {
    if landlock::abi().is_none() {
        return Err(Missing::Landlock);
    }
    // SAFETY: a query of this thread's seccomp mode.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } < 0 {
        return Err(Missing::Seccomp);
    }
    // SAFETY: the child only makes the system call and exits.
    let userns = in_child(|| unsafe { libc::unshare(libc::CLONE_NEWUSER) == 0 });
    if let Err(errno) = userns {
        return Err(Missing::UserNamespaces(errno));
    }
    let policy = Policy {
        write: vec![],
        read: vec![],
        home: PathBuf::from("/home/sandbox"),
        home_files: vec![],
        home_dirs: vec![],
        network: Network::None,
        tmp_size: None,
    };
    // SAFETY: geteuid and getegid cannot fail.
    let ids = unsafe { (libc::geteuid(), libc::getegid()) };
    let prepared = Prepared::new(&policy, ids, std::path::Path::new("/"))
        .map_err(|e| Missing::Mounts(e.raw_os_error().unwrap_or(libc::EINVAL)))?;
    in_child(|| enter(&prepared).is_ok()).map_err(Missing::Mounts)
}

/// Runs `step` in a forked child that exits 0 when it returns true and
/// with its `errno` otherwise; the error number.
fn in_child(step: impl Fn() -> bool) -> Result<(), i32> {
    // SAFETY: the child makes only raw system calls (the step's and
    // `_exit`), never returns and allocates nothing.
    unsafe {
        match libc::fork() {
            -1 => Err(*libc::__errno_location()),
            0 => {
                let code = if step() {
                    0
                } else {
                    (*libc::__errno_location()).clamp(1, 255)
                };
                libc::_exit(code)
            }
            child => {
                let mut raw = 0;
                while libc::waitpid(child, &mut raw, 0) < 0 {
                    if *libc::__errno_location() != libc::EINTR {
                        return Err(libc::ECHILD);
                    }
                }
                match libc::WIFEXITED(raw).then(|| libc::WEXITSTATUS(raw)) {
                    Some(0) => Ok(()),
                    Some(errno) => Err(errno),
                    None => Err(libc::EINTR),
                }
            }
        }
    }
}
