//! Reading `/proc` (Linux) for the sweep: a process's state, parent, group
//! and session, its initial environment, our own children, and the orphans
//! reparented to us as subreaper.
//!
//! Not for stopping anything: the runner and the kill guard decide and signal.

use std::fs;

/// Fields of `/proc/PID/stat` the sweep needs.
pub(super) struct Stat {
    pub state: u8,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
}

/// Parses `/proc/PID/stat`; the command name may contain spaces and
/// parentheses, so fields are counted after its last `)`.
pub(super) fn stat(pid: i32) -> Option<Stat> {
    let text = fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = text.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.as_bytes().first().copied()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        session,
    })
}

fn pids() -> impl Iterator<Item = i32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
}

/// The value of `key` in process `pid`'s initial environment, if it is
/// readable and set.
pub(super) fn env_var(pid: i32, key: &str) -> Option<String> {
    let env = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{key}=");
    env.split(|b| *b == 0)
        .find_map(|e| e.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Processes whose initial environment holds `key=value` (other users'
/// processes are unreadable without root and skipped).
pub(super) fn with_env_var(key: &str, value: &str) -> Vec<i32> {
    let needle = format!("{key}={value}");
    let own = std::process::id() as i32;
    pids()
        .filter(|pid| *pid != own)
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|entry| entry == needle.as_bytes())
            })
        })
        .filter(|pid| stat(*pid).is_some_and(|s| s.state != b'Z'))
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
    let Ok(tasks) = fs::read_dir(format!("/proc/{own}/task")) else {
        return pids().collect();
    };
    for task in tasks.flatten() {
        match fs::read_to_string(task.path().join("children")) {
            Ok(list) => children.extend(
                list.split_ascii_whitespace()
                    .filter_map(|pid| pid.parse::<i32>().ok()),
            ),
            // A thread that just ended has no file; a kernel without
            // CONFIG_PROC_CHILDREN has none at all.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && task.path().exists() => {
                return pids().collect();
            }
            Err(_) => {}
        }
    }
    children
}
