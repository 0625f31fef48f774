//! Reading `/proc` (Linux) for the sweep: a process's state, parent, group
//! and session, its initial environment, our own children, and the orphans
//! reparented to us as subreaper, read through the `procfs` crate.
//!
//! Not for stopping anything: the runner and the kill guard decide and signal.

use std::ffi::OsStr;
use std::path::Path;

use procfs::ProcError;
use procfs::process::{Process, all_processes};

/// Fields of `/proc/PID/stat` the sweep needs.
pub(super) struct Stat {
    pub state: u8,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
}

/// `/proc/PID/stat`'s state, parent, group and session.
pub(super) fn stat(pid: i32) -> Option<Stat> {
    let s = Process::new(pid).ok()?.stat().ok()?;
    Some(Stat {
        state: u8::try_from(s.state).ok()?,
        ppid: s.ppid,
        pgrp: s.pgrp,
        session: s.session,
    })
}

fn pids() -> impl Iterator<Item = i32> {
    all_processes()
        .into_iter()
        .flatten()
        .flatten()
        .map(|p| p.pid())
}

/// The value of `key` in process `pid`'s initial environment, if it is
/// readable and set.
pub(super) fn env_var(pid: i32, key: &str) -> Option<String> {
    let env = Process::new(pid).ok()?.environ().ok()?;
    env.get(OsStr::new(key))
        .map(|v| v.to_string_lossy().into_owned())
}

/// Processes whose initial environment holds `key=value` (other users'
/// processes are unreadable without root and skipped).
pub(super) fn with_env_var(key: &str, value: &str) -> Vec<i32> {
    let own = std::process::id() as i32;
    all_processes()
        .into_iter()
        .flatten()
        .flatten()
        .filter(|p| p.pid() != own)
        .filter(|p| {
            p.environ()
                .is_ok_and(|env| env.get(OsStr::new(key)).is_some_and(|v| v == value))
        })
        .filter(|p| p.stat().is_ok_and(|s| s.state != 'Z'))
        .map(|p| p.pid())
        .collect()
}

/// Whether a process group has a member that is not a zombie.
pub(super) fn group_has_live_member(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    if unsafe { libc::kill(-pgid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return false;
    }
    pids().any(|pid| stat(pid).is_some_and(|s| s.pgrp == pgid && s.state != b'Z'))
}

/// Reaps zombie children of ours that no part of nightshift waits for:
/// orphans reparented to us as subreaper. Children nightshift spawned
/// itself are recognisable and left to their owner's `wait`: either they
/// lead their own group in our session (`process_group(0)`, as [`run`]
/// does) or they stay in our group (a plain spawn). A reparented orphan
/// is neither when it left our session (`setsid`) or sits in another
/// process's group.
///
/// [`run`]: super::run
pub(super) fn reap_orphans() {
    let own = std::process::id() as i32;
    let Some(me) = stat(own) else { return };
    for pid in own_children(own) {
        let Some(s) = stat(pid) else { continue };
        if s.ppid != own || s.state != b'Z' {
            continue;
        }
        let spawned_by_us = (s.pgrp == pid && s.session == me.session) || s.pgrp == me.pgrp;
        if spawned_by_us {
            continue;
        }
        let mut status = 0;
        // SAFETY: waitpid on one specific zombie child of ours, without
        // blocking; `status` is a valid out pointer.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// Live children of ours, not in `before`, that we did not spawn: they
/// left our session (`setsid`) and were reparented to us as subreaper.
/// Children nightshift spawns stay in its session (see [`reap_orphans`]).
pub(super) fn escaped_orphans(before: &[i32]) -> Vec<i32> {
    let own = std::process::id() as i32;
    let Some(me) = stat(own) else {
        return Vec::new();
    };
    own_children(own)
        .into_iter()
        .filter(|pid| !before.contains(pid))
        .filter(|&pid| {
            stat(pid).is_some_and(|s| s.ppid == own && s.state != b'Z' && s.session != me.session)
        })
        .collect()
}

/// Our children: the `children` files of our threads (cheap), or, on a
/// kernel without them, every process (callers check the parent).
pub(super) fn own_children(own: i32) -> Vec<i32> {
    let mut children = Vec::new();
    let Ok(tasks) = Process::new(own).and_then(|p| p.tasks()) else {
        return pids().collect();
    };
    for task in tasks.flatten() {
        match task.children() {
            Ok(list) => children.extend(list.into_iter().filter_map(|pid| i32::try_from(pid).ok())),
            // A thread that just ended has no file; a kernel without
            // CONFIG_PROC_CHILDREN has none at all.
            Err(ProcError::NotFound(_))
                if Path::new(&format!("/proc/{own}/task/{}", task.tid)).exists() =>
            {
                return pids().collect();
            }
            Err(_) => {}
        }
    }
    children
}
