//! The sandbox nightshift builds itself around a call (docs/security.md#the-sandbox):
//! new user, mount, PID and network namespaces, a root made only of the
//! paths the call may see, a private `/tmp` and `HOME`, `no_new_privs`, no
//! capabilities, Landlock and a seccomp filter.
//!
//! A [`Policy`] says what one call may see and write; [`Prepared`] is that
//! policy turned, by the runner, into everything the child needs, so that
//! [`enter`] (which runs between the supervisor's fork and the exec)
//! only makes system calls: no allocation, no lock. [`probe`] tells whether
//! this kernel can build it, naming the missing feature when not.
//!
//! Not for starting or supervising a process (`process`), nor for deciding
//! which paths a call needs (its caller: the agent and gate code), nor for
//! the config's wording.

mod enter;
mod filter;
mod landlock;
mod prepare;
mod probe;
mod proxy;

#[cfg(test)]
mod tests;

pub use enter::enter;
pub use prepare::{Prepared, SYSTEM_DIRS};
pub use probe::{Missing, probe};
pub use proxy::{Allow, PROXY_PORT, Proxy, proxy_env};

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[sandbox] mode` (docs/config.md#sandbox).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The run refuses to start (exit 2) when the sandbox cannot be built.
    Required,
    /// The default: the sandbox is built when the kernel allows it;
    /// otherwise the run says so once (start of the run, `doctor`, the
    /// report) and runs without it.
    #[default]
    Auto,
    /// No sandbox: the containment before it only (with a warning).
    Off,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Required => "required",
            Mode::Auto => "auto",
            Mode::Off => "off",
        })
    }
}

/// What a sandboxed call may reach over the network. Either way it has a
/// network namespace of its own with only its own loopback; Landlock (ABI
/// 4 and on) refuses every TCP `connect` and `bind` but to the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// Nothing outside the sandbox can be reached.
    None,
    /// Only the hosts of the list, through the filtering proxy nightshift
    /// runs outside the sandbox ([`Proxy`]), which listens inside on
    /// `127.0.0.1:`[`PROXY_PORT`] (the caller sets the proxy variables of
    /// [`proxy_env`]).
    Proxy(Allow),
}

/// What one call may see: every path absent from it is not in the
/// sandbox's file system at all.
///
/// Paths are absolute; each is shown inside at the same path. The system
/// directories ([`SYSTEM_DIRS`]), a fresh `/proc` of the call's own PID
/// namespace, a minimal `/dev` (`null`, `zero`, `full`, `random`,
/// `urandom`, `tty`, a private `shm`) and a private empty `/tmp` are always
/// there; `home` is an empty private directory (the variable `HOME` is the
/// caller's to set to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Shown read-write (the slot for the writer, gate and setup; `[sandbox] write`).
    pub write: Vec<PathBuf>,
    /// Shown read-only (the slot for the reviewer, the call's own files,
    /// the program, `[sandbox] read`).
    pub read: Vec<PathBuf>,
    /// The private home directory's path inside (an empty tmpfs).
    pub home: PathBuf,
    /// Files shown read-only at a path of their own, as (path on the host,
    /// path inside): an agent's own login inside `home`, or the program by
    /// the path it is exec'd by when that path goes through links.
    pub home_files: Vec<(PathBuf, PathBuf)>,
    /// Directories made (empty, writable) inside the private home, such as
    /// an agent's own home within it (`~/.codex`).
    pub home_dirs: Vec<PathBuf>,
    /// The network the call gets.
    pub network: Network,
    /// The size cap, in bytes, of each private tmpfs the call writes to:
    /// `/tmp`, the home, `/dev` and `/dev/shm` (`[sandbox] tmp_size`); a
    /// write past it fails with `ENOSPC`. `None`: [`default_tmp_size`].
    pub tmp_size: Option<u64>,
}

/// The cap of each private tmpfs when `[sandbox] tmp_size` names none:
/// 4 GiB, or a quarter of this host's memory when that is less (the
/// kernel's own default, half of it per tmpfs, lets two of them fill
/// the memory). A tmpfs takes memory only for what is written to it.
pub fn default_tmp_size() -> u64 {
    const CAP: u64 = 4 << 30;
    // SAFETY: an all-zero `sysinfo` is a valid value of it.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: sysinfo fills the local structure it is given.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return CAP;
    }
    #[allow(clippy::useless_conversion)] // `c_ulong` is 32 bits on some targets
    let memory = u64::from(info.totalram).saturating_mul(u64::from(info.mem_unit.max(1)));
    match memory / 4 {
        0 => CAP,
        quarter => quarter.min(CAP),
    }
}
