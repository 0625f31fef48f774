//! The per-call supervisor (docs/security.md#processes): every child
//! [`run`](super::run()) starts is started by a small process of its own that
//! dies with nightshift and takes the call's processes with it.
//!
//! The supervisor is this program exec'd anew (`entry.rs`), not a fork of
//! the runner; once it has its [`Plan`], [`start`] forks the call (its own
//! process group, `run_as`, the sandbox, then the program exec'd there) and
//! stays behind. The supervisor
//!
//! - is a child subreaper, so a descendant orphaned inside the call (a
//!   `setsid … &` daemon, a double fork) is reparented to it, not to init;
//! - notices its runner's death: `PR_SET_PDEATHSIG` wakes it (it fires
//!   also when only the *thread* that spawned it ends, so the parent's pid
//!   is what decides), and `getppid()` is looked at every [`TICK`], which
//!   also closes the race between the spawn and the prctl;
//! - enforces the call's timeout on its own, as a backstop behind the
//!   runner's ([`BACKSTOP_SLACK`] later);
//! - on the runner's death or [`KILL_NOW`]: SIGKILL at once to the call's
//!   group and every child of its own, again each tick until it has no
//!   child left (each death reparents the next generation to it); on
//!   [`STOP`], the timeout, or the call's end with processes left: the same
//!   with SIGTERM first and SIGKILL after the grace;
//! - then exits as the call did (its code, or raising its signal), so the
//!   runner reads the call's own status.
//!
//! The call itself gets `PR_SET_PDEATHSIG` = SIGKILL tied to the supervisor
//! (single-threaded, so that cannot fire early): a supervisor killed by
//! SIGKILL does not leave the call running.
//!
//! The supervisor is single-threaded, so the call's side of the fork may
//! do anything; it keeps to raw system calls all the same (no allocation,
//! no panic), as the sandbox's steps after it do. Not for reading output
//! or deciding anything about the call.

use std::ffi::{CString, c_char, c_int};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The runner asks the supervisor to stop the call: SIGTERM to the call's
/// processes, the grace, then SIGKILL.
pub(super) const STOP: libc::c_int = libc::SIGTERM;

/// The runner asks the supervisor to kill the call now (the `run` future
/// was dropped mid-call).
pub(super) const KILL_NOW: libc::c_int = libc::SIGUSR1;

/// The supervisor's parent-death signal: only a hint, `getppid()` decides.
const PARENT_GONE: libc::c_int = libc::SIGHUP;

/// How often the supervisor looks at its parent, its children and the clock.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// How long after the runner's own timeout and grace the supervisor ends a
/// call by itself: the runner, when alive, always acts first and records
/// the timeout; the supervisor's clock is for a runner that is gone or stuck.
pub(super) const BACKSTOP_SLACK: Duration = Duration::from_secs(5);

/// How long the supervisor keeps sending SIGKILL before it gives up and
/// exits (a process in uninterruptible sleep cannot die yet).
const KILL_FOR: Duration = Duration::from_secs(5);

/// What the supervisor of one call needs, built by the runner and sent to
/// the supervisor (`entry.rs`).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Plan {
    /// nightshift's pid: the supervisor's parent while the runner lives.
    pub runner: libc::pid_t,
    /// The call's timeout ([`Command::timeout`](super::Command::timeout)).
    pub timeout: Duration,
    /// SIGTERM to SIGKILL ([`Command::grace`](super::Command::grace)).
    pub grace: Duration,
    /// Whether children that left the call's group are the call's to kill
    /// when it ends ([`Command::sweep_escaped`](super::Command::sweep_escaped));
    /// on the runner's death or a stop they are killed regardless.
    pub sweep_escaped: bool,
    /// uid and gid the call runs as (`agent_user`); the supervisor stays
    /// root, so the agent can neither signal nor trace it.
    pub run_as: Option<(u32, u32)>,
    /// The working directory, entered by the call after `run_as`'s
    /// switch, so that a directory the account cannot reach fails the start.
    pub cwd: Option<CString>,
    /// What the call execs: a path, or a name looked up on the call's
    /// `PATH` (`execvp`, in the environment the supervisor was given).
    pub program: CString,
    /// The call's arguments, `argv[0]` first.
    pub argv: Vec<CString>,
    /// Whether the call's stdin comes with the plan (else `/dev/null`).
    pub stdin: bool,
    /// The call's sandbox, entered after `run_as` (`sandbox::enter`).
    pub sandbox: Option<crate::sandbox::Prepared>,
}

/// The supervisor's life once it has its plan (`entry.rs`): forks the
/// call, tells the runner through `ctl` whether its program was exec'd or
/// which step failed, then supervises it and exits as it did. `stdin`
/// becomes the call's stdin; `proxy` is the sandbox's end of its proxy's
/// socket pair. Never returns.
pub(super) fn start(
    mut plan: Plan,
    ctl: OwnedFd,
    stdin: Option<OwnedFd>,
    proxy: Option<OwnedFd>,
) -> ! {
    if let (Some(prepared), Some(fd)) = (plan.sandbox.as_mut(), &proxy) {
        prepared.proxy_socket(fd.as_fd());
    }
    let argv: Vec<*const c_char> = (plan.argv.iter())
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: raw system calls on this (single-threaded) process; the
    // name is a NUL-terminated static string of at most 16 bytes.
    unsafe {
        let me = libc::getpid();
        // Before the fork, so no orphan of the call can slip past it.
        libc::prctl(
            libc::PR_SET_CHILD_SUBREAPER,
            ulong(1),
            ulong(0),
            ulong(0),
            ulong(0),
        );
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            ulong(PARENT_GONE),
            ulong(0),
            ulong(0),
            ulong(0),
        );
        if libc::getppid() != plan.runner {
            // The runner died before the prctl: start nothing.
            libc::_exit(127);
        }
        let input = match &stdin {
            Some(fd) => fd.as_raw_fd(),
            None => libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
        };
        if input < 0 || libc::dup2(input, 0) != 0 {
            // The control socket must not be left as the call's stdin.
            report(&ctl, errno());
            libc::_exit(127);
        }
        // For `ps`, and before the fork: the call may look at its parent at once.
        libc::prctl(libc::PR_SET_NAME, c"nightshift-call".as_ptr());
        let mut failed = [0; 2];
        if libc::pipe2(failed.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            report(&ctl, errno());
            libc::_exit(127);
        }
        match libc::fork() {
            -1 => {
                report(&ctl, errno());
                libc::_exit(127)
            }
            0 => {
                libc::close(failed[0]);
                exec_call(&plan, me, &argv, failed[1])
            }
            call => {
                libc::close(failed[1]);
                let error = exec_error(failed[0]);
                report(&ctl, error);
                if error != 0 {
                    let mut raw = 0;
                    libc::waitpid(call, &mut raw, 0);
                    libc::_exit(127);
                }
                supervise(call, &plan)
            }
        }
    }
}

/// The supervisor's answer once the call's program was exec'd, or the
/// error of the step that failed before (`become_call`, the sandbox, the
/// exec), for `entry::started`. Written with `MSG_NOSIGNAL`: a runner gone is not a reason to die
/// of `SIGPIPE`.
fn report(ctl: &OwnedFd, errno: c_int) {
    let bytes = errno.to_le_bytes();
    // SAFETY: a send of a local buffer on our own socket.
    unsafe {
        libc::send(
            ctl.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
        );
    }
}

/// The call's side of the fork: [`become_call`], then the program exec'd;
/// the error of the step that failed is written to `failed` (the error
/// pipe, closed by a successful exec) and the process exits 127.
fn exec_call(plan: &Plan, supervisor: libc::pid_t, argv: &[*const c_char], failed: c_int) -> ! {
    let error = match become_call(plan, supervisor) {
        Ok(()) => {
            // SAFETY: a NUL-terminated path and a NULL-terminated array of
            // NUL-terminated arguments, all alive until the exec.
            unsafe { libc::execvp(plan.program.as_ptr(), argv.as_ptr()) };
            errno()
        }
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
    };
    // SAFETY: a write of a local integer to our own pipe, then exit.
    unsafe {
        libc::write(failed, (&raw const error).cast(), 4);
        libc::_exit(127)
    }
}

/// What the call wrote to its error pipe before its exec (an `errno`), or
/// 0 when the pipe closed empty: the exec succeeded.
fn exec_error(pipe: libc::c_int) -> libc::c_int {
    let mut error: libc::c_int = 0;
    // SAFETY: a read into a local integer on our own descriptor. Signals
    // are blocked, so no EINTR.
    let n = unsafe { libc::read(pipe, (&raw mut error).cast(), 4) };
    // SAFETY: our own descriptor.
    unsafe { libc::close(pipe) };
    if n == 4 { error } else { 0 }
}

/// The call's side of the fork: its own process group, the signal mask the
/// program expects, `run_as`, its directory, death with the supervisor,
/// the sandbox; the program is exec'd after it.
///
/// # Errors
/// A refused `setgid`/`setuid` or `chdir`, or the sandbox's failed step.
fn become_call(plan: &Plan, supervisor: libc::pid_t) -> io::Result<()> {
    // SAFETY: raw system calls on this process only.
    unsafe {
        // No descriptor but stdio reaches the program: not one nightshift
        // inherited without close-on-exec (a harness's, a service
        // manager's). Close-on-exec rather than closed: the error pipe and
        // the proxy's socket serve until the exec.
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        libc::setpgid(0, 0);
        block_signals(libc::SIG_UNBLOCK);
        if let Some((uid, gid)) = plan.run_as {
            if libc::getuid() == 0 {
                libc::setgroups(0, std::ptr::null());
            }
            if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(dir) = &plan.cwd
            && libc::chdir(dir.as_ptr()) != 0
        {
            return Err(io::Error::last_os_error());
        }
        // After the switch: a change of credentials clears it.
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            ulong(libc::SIGKILL),
            ulong(0),
            ulong(0),
            ulong(0),
        );
        if libc::getppid() != supervisor {
            libc::_exit(127);
        }
    }
    match &plan.sandbox {
        Some(prepared) => crate::sandbox::enter(prepared),
        None => Ok(()),
    }
}

/// `prctl`'s arguments are `unsigned long`: a bare `int` through its
/// variadic signature would leave the upper bits to chance.
fn ulong(v: libc::c_int) -> libc::c_ulong {
    libc::c_ulong::try_from(v).unwrap_or(0)
}

/// Blocks (`SIG_BLOCK`) or unblocks the signals the supervisor waits for.
pub(super) unsafe fn block_signals(how: libc::c_int) {
    // SAFETY: a local signal set, filled and handed to sigprocmask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGCHLD, STOP, KILL_NOW, PARENT_GONE] {
            libc::sigaddset(&mut set, sig);
        }
        libc::sigprocmask(how, &set, std::ptr::null_mut());
    }
}

/// Where the supervisor is in ending the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// The call runs.
    Running,
    /// SIGTERM was sent; SIGKILL at this monotonic instant (ns).
    Terminating(u64),
    /// SIGKILL is sent every tick; give up at this instant (ns).
    Killing(u64),
}

/// The supervisor's loop; exits as the call did.
fn supervise(call: libc::pid_t, plan: &Plan) -> ! {
    // SAFETY: raw system calls on this process only.
    unsafe {
        quiet_fds();
        // Both sides set the group, so no signal can miss it.
        libc::setpgid(call, call);
    }
    // Saturating: a panic here, after the fork, would abort the supervisor.
    let backstop = (plan.timeout)
        .saturating_add(plan.grace)
        .saturating_add(BACKSTOP_SLACK);
    let deadline = now_ns().saturating_add(nanos(backstop));
    let mut status: Option<libc::c_int> = None;
    let mut phase = Phase::Running;
    loop {
        let signal = wait_signal(TICK);
        reap(call, &mut status);
        let now = now_ns();
        // SAFETY: getppid cannot fail.
        let orphaned = unsafe { libc::getppid() } != plan.runner;
        let cues = Cues {
            signal,
            orphaned,
            late: now >= deadline,
            ended: status.is_some(),
            left: anything_left(call, plan.sweep_escaped),
        };
        let was = phase;
        phase = next_phase(phase, now, plan, cues);
        match phase {
            Phase::Running => {}
            // Once: a second SIGTERM may cut short the cleanup of the first.
            Phase::Terminating(_) if was != phase => {
                signal_call(call, libc::SIGTERM, plan.sweep_escaped);
            }
            Phase::Terminating(_) => {}
            Phase::Killing(until) => {
                signal_call(call, libc::SIGKILL, plan.sweep_escaped || orphaned);
                if now >= until {
                    exit_as(status);
                }
            }
        }
        reap(call, &mut status);
        if status.is_some() && !anything_left(call, plan.sweep_escaped) {
            exit_as(status);
        }
    }
}

/// What the supervisor saw in one tick.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cues {
    /// The signal that woke it (0: the tick).
    pub signal: libc::c_int,
    /// Its parent is no longer the runner.
    pub orphaned: bool,
    /// The backstop timeout passed.
    pub late: bool,
    /// The call (the first process) has exited.
    pub ended: bool,
    /// Processes of the call are left.
    pub left: bool,
}

/// The next phase from the current one and what this tick saw; pure, so
/// that it is tested without processes.
pub(super) fn next_phase(phase: Phase, now: u64, plan: &Plan, cues: Cues) -> Phase {
    let killing = Phase::Killing(now.saturating_add(nanos(KILL_FOR)));
    if cues.orphaned || cues.signal == KILL_NOW {
        return match phase {
            Phase::Killing(_) => phase,
            _ => killing,
        };
    }
    match phase {
        Phase::Running if cues.signal == STOP || cues.late || (cues.ended && cues.left) => {
            Phase::Terminating(now.saturating_add(nanos(plan.grace)))
        }
        Phase::Terminating(at) if now >= at => killing,
        _ => phase,
    }
}

/// Whether anything of the call is left: a child of the supervisor (when
/// escaped processes are the call's) or a member of the call's group.
fn anything_left(call: libc::pid_t, sweep_escaped: bool) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let group = unsafe { libc::kill(-call, 0) } == 0;
    if group || !sweep_escaped {
        return group;
    }
    let mut any = false;
    for_each_child(|_| any = true);
    any
}

/// Sends `sig` to the call's group and, with `escaped`, to every child of
/// the supervisor and the group it leads (a `setsid` daemon, reparented).
fn signal_call(call: libc::pid_t, sig: libc::c_int, escaped: bool) {
    // SAFETY: kill(2) on the call's group and on our own children: a live
    // child's pid cannot name another process's group.
    unsafe {
        libc::kill(-call, sig);
        if escaped {
            for_each_child(|pid| {
                libc::kill(pid, sig);
                libc::kill(-pid, sig);
            });
        }
    }
}

/// Reaps every child that ended (the call and reparented orphans); keeps
/// the call's wait status.
fn reap(call: libc::pid_t, status: &mut Option<libc::c_int>) {
    loop {
        let mut raw = 0;
        // SAFETY: waitpid on our own children, `raw` a valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if pid == call {
            *status = Some(raw);
        }
    }
}

/// Calls `f` with each child of this (single-threaded) process, read from
/// `/proc/thread-self/children` without allocating.
fn for_each_child(mut f: impl FnMut(libc::pid_t)) {
    const PATH: &[u8] = b"/proc/thread-self/children\0";
    // SAFETY: a NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(PATH.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return;
    }
    let mut buf = [0u8; 512];
    let mut pid: libc::pid_t = 0;
    let mut digits = false;
    loop {
        // SAFETY: reads into a local buffer of its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            if b.is_ascii_digit() {
                pid = pid
                    .saturating_mul(10)
                    .saturating_add(libc::pid_t::from(b - b'0'));
                digits = true;
            } else if digits {
                f(pid);
                (pid, digits) = (0, false);
            }
        }
    }
    if digits {
        f(pid);
    }
    // SAFETY: our own fd.
    unsafe { libc::close(fd) };
}

/// Waits at most `tick` for one of the blocked signals; 0 on the tick.
fn wait_signal(tick: Duration) -> libc::c_int {
    // SAFETY: local signal set and timespec; sigtimedwait fills nothing else.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGCHLD, STOP, KILL_NOW, PARENT_GONE] {
            libc::sigaddset(&mut set, sig);
        }
        let wait = libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::c_long::try_from(tick.as_nanos()).unwrap_or(100_000_000),
        };
        libc::sigtimedwait(&set, std::ptr::null_mut(), &wait).max(0)
    }
}

/// stdin, stdout and stderr on `/dev/null`, every other descriptor closed:
/// a descriptor of nightshift's held here (another call's pipe, the spawn's
/// error pipe) would keep its reader waiting for as long as the call runs.
unsafe fn quiet_fds() {
    // SAFETY: raw system calls on our own descriptors.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            let mut limit: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            let top = libc::c_int::try_from(limit.rlim_cur).unwrap_or(65_536);
            for fd in 3..top {
                libc::close(fd);
            }
        }
    }
}

/// Exits as the call did: its exit code, or killed by its signal (SIGKILL
/// when it was never reaped).
fn exit_as(status: Option<libc::c_int>) -> ! {
    // SAFETY: exit and self-signal system calls.
    unsafe {
        match status {
            Some(raw) if libc::WIFEXITED(raw) => libc::_exit(libc::WEXITSTATUS(raw)),
            Some(raw) if libc::WIFSIGNALED(raw) => {
                let sig = libc::WTERMSIG(raw);
                libc::signal(sig, libc::SIG_DFL);
                let mut one: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut one);
                libc::sigaddset(&mut one, sig);
                libc::sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
                libc::kill(libc::getpid(), sig);
                libc::_exit(128 + sig)
            }
            _ => {
                libc::kill(libc::getpid(), libc::SIGKILL);
                libc::_exit(128 + libc::SIGKILL)
            }
        }
    }
}

/// The monotonic clock in nanoseconds.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a local timespec filled by clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let sub = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(sub)
}

/// `d` in nanoseconds, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// This thread's `errno`.
fn errno() -> libc::c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
