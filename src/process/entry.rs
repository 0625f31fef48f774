//! How a call's supervisor is started (docs/security.md#processes): not a
//! fork of the runner but this very program exec'd anew
//! (`/proc/self/exe`, so a binary replaced during the night is not mixed
//! in), with [`ENTRY`] as its only argument and a control socket as its
//! stdin. The runner sends the call's [`Plan`] over the socket, with the
//! descriptors that go with it; the supervisor answers once the program
//! was exec'd or a step before failed.
//!
//! Why: a fork copies the page tables of a worker holding tens of MB and
//! twenty runtime threads, then pays copy-on-write faults and a tear-down
//! of the copy; with 200 workers that was a third of the machine's CPU
//! (README, Performance). An exec'd supervisor is started with
//! `posix_spawn` (no copy) and is a small single-threaded process.
//!
//! The supervisor's side starts in [`hook`], a constructor the C runtime
//! runs before `main` in every program that links this crate — nightshift,
//! but also a test or benchmark binary that calls [`super::run()`] — so each
//! of them can be its own supervisor.
//!
//! Not for what the supervisor does with the plan (`supervisor.rs`).

use std::ffi::{CStr, c_char, c_int};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use tokio::io::AsyncReadExt;

use super::supervisor::{self, Plan};

/// The supervisor's only argument: a program started with it (and nothing
/// else) reads a plan from its stdin and never reaches `main`.
pub(super) const ENTRY: &str = "--nightshift-call-supervisor";

/// The supervisor's `argv[0]`, for `ps`.
const NAME: &str = "nightshift-call";

/// The largest plan read (bytes): a sandbox's plan is tens of KB.
const PLAN_MAX: u64 = 64 << 20;

/// Runs [`hook`] before `main`. It takes no arguments: glibc hands
/// `.init_array` functions `argc`, `argv` and `envp`, musl hands nothing.
#[used]
#[unsafe(link_section = ".init_array")]
static HOOK: extern "C" fn() = hook;

/// The path the runner execs the supervisor by.
const SELF: &CStr = c"/proc/self/exe";

/// Becomes a call's supervisor when this program was started as one:
/// exec'd by [`SELF`] with exactly `argv` = [`NAME`], [`ENTRY`]; otherwise
/// returns at once and `main` runs.
extern "C" fn hook() {
    // SAFETY: getauxval reads the auxiliary vector; AT_EXECFN, when
    // present, points at the NUL-terminated path given to execve.
    let exec_fn = unsafe { libc::getauxval(libc::AT_EXECFN) } as *const c_char;
    // SAFETY: a non-null AT_EXECFN is a NUL-terminated string.
    if exec_fn.is_null() || unsafe { CStr::from_ptr(exec_fn) } != SELF {
        return;
    }
    if started_as_supervisor() {
        become_supervisor()
    }
}

/// Whether this process's arguments (`/proc/self/cmdline`) are exactly
/// [`NAME`] and [`ENTRY`]. Reads into a stack buffer: nothing of the
/// runtime is set up yet.
fn started_as_supervisor() -> bool {
    let mut buf = [0u8; 128];
    // SAFETY: a NUL-terminated path; a read into a local buffer of its
    // length; the descriptor is closed.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/self/cmdline".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let Ok(n) = usize::try_from(n) else {
        return false;
    };
    let mut parts = buf[..n].split(|b| *b == 0);
    parts.next() == Some(NAME.as_bytes())
        && parts.next() == Some(ENTRY.as_bytes())
        && parts.next() == Some(&[][..])
        && parts.next().is_none()
}

/// The supervisor's start: signals blocked at once (the runner may ask it
/// to stop before it has read its plan), not dumpable (as nightshift),
/// the plan and its descriptors read from stdin, then `supervisor::start`.
/// A plan that cannot be read ends it with 126 (the runner then reports
/// that the call could not be started).
fn become_supervisor() -> ! {
    // SAFETY: raw system calls on this process only; single-threaded.
    unsafe {
        supervisor::block_signals(libc::SIG_BLOCK);
        libc::prctl(
            libc::PR_SET_DUMPABLE,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
    match receive() {
        Ok(Handed {
            plan,
            ctl,
            stdin,
            proxy,
        }) => supervisor::start(plan, ctl, stdin, proxy),
        // SAFETY: exit without running anything of the runtime.
        Err(_) => unsafe { libc::_exit(126) },
    }
}

/// What the supervisor gets from the runner.
struct Handed {
    plan: Plan,
    /// The control socket, moved off stdin.
    ctl: OwnedFd,
    /// The call's stdin ([`Plan::stdin`]).
    stdin: Option<OwnedFd>,
    /// The sandbox's end of its proxy's socket pair.
    proxy: Option<OwnedFd>,
}

/// Reads the plan from stdin: an 8-byte little-endian length and the plan
/// as JSON, the descriptors riding on the first bytes (`SCM_RIGHTS`: the
/// call's stdin when [`Plan::stdin`], then the proxy's socket when the
/// sandbox has one).
fn receive() -> io::Result<Handed> {
    // SAFETY: fd 0 is the control socket the runner gave as stdin; it is
    // duplicated off 0 (close-on-exec), and 0 stays open until the call's
    // stdin replaces it, so no descriptor received lands on it.
    let ctl = unsafe {
        let fd = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    let mut head = [0u8; 8];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let (got, fds) = {
        let mut iov = [IoSliceMut::new(&mut head)];
        let msg = recvmsg::<()>(
            ctl.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(more) = c {
                // SAFETY: descriptors the kernel just installed in this process.
                fds.extend(
                    more.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        (msg.bytes, fds)
    };
    let mut socket = UnixStream::from(ctl);
    socket.read_exact(&mut head[got..])?;
    let len = u64::from_le_bytes(head);
    if len > PLAN_MAX {
        return Err(io::Error::other("a plan over its size cap"));
    }
    let mut body = Vec::new();
    (&mut socket).take(len).read_to_end(&mut body)?;
    let plan: Plan = serde_json::from_slice(&body).map_err(io::Error::other)?;
    let mut fds = fds.into_iter();
    let stdin = if plan.stdin { fds.next() } else { None };
    let proxy = match &plan.sandbox {
        Some(p) if p.proxy() => fds.next(),
        _ => None,
    };
    Ok(Handed {
        plan,
        ctl: socket.into(),
        stdin,
        proxy,
    })
}

/// The command that starts one call's supervisor with `ctl` (the
/// supervisor's end of the control socket) as its stdin; the caller adds
/// the call's environment and output pipes.
pub(super) fn command(ctl: OwnedFd) -> tokio::process::Command {
    // The constructor must be linked in wherever a supervisor is started.
    std::hint::black_box(&HOOK);
    let mut command = tokio::process::Command::new(std::ffi::OsStr::from_bytes(SELF.to_bytes()));
    command
        .arg0(NAME)
        .arg(ENTRY)
        .stdin(std::process::Stdio::from(ctl));
    command
}

/// Sends `plan` over the runner's end of the control socket, with `fds`
/// (see [`receive`] for their order).
///
/// # Errors
/// The socket's error (`EPIPE`: the supervisor is gone).
pub(super) fn send(ctl: &UnixStream, plan: &Plan, fds: &[RawFd]) -> io::Result<()> {
    let body = serde_json::to_vec(plan).map_err(io::Error::other)?;
    let head = u64::try_from(body.len()).unwrap_or(u64::MAX).to_le_bytes();
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs = if fds.is_empty() { &[][..] } else { &rights[..] };
    // The length alone carries the descriptors (a socket's buffer always
    // takes 8 bytes); the body follows.
    let sent = sendmsg::<()>(
        ctl.as_raw_fd(),
        &[IoSlice::new(&head)],
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    if sent != head.len() {
        return Err(io::Error::other("the plan's length was cut short"));
    }
    (&*ctl).write_all(&body)
}

/// Waits at most `within` for the supervisor's answer (`supervisor::report`:
/// an `errno` as 4 little-endian bytes, 0 when the program was exec'd).
///
/// # Errors
/// The step's error as the system gave it (`ENOENT` for a program not
/// found, `EPERM` for a refused `agent_user` switch, …); or a supervisor
/// that ended or stayed silent, as an error that says so.
pub(super) async fn started(ctl: UnixStream, within: Duration) -> io::Result<()> {
    ctl.set_nonblocking(true)?;
    let mut ctl = tokio::net::UnixStream::from_std(ctl)?;
    let mut answer = [0u8; 4];
    match tokio::time::timeout(within, ctl.read_exact(&mut answer)).await {
        Ok(Ok(_)) => match c_int::from_le_bytes(answer) {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        },
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Err(io::Error::other(
            "the call's supervisor ended before the call started",
        )),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the call did not start within {} s", within.as_secs()),
        )),
    }
}
