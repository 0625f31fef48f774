//! [`kill_stragglers`]: kills the processes left running in a slot by a
//! nightshift that was killed, found through `/proc`.
//!
//! Not for the processes of a live call: the process runner stops its own.

use std::path::Path;

/// Kills every process whose working directory is inside `dir`: agents or
/// gates left running by a nightshift that was killed (SIGKILL, a crash)
/// must not keep editing a checkout the next run reuses. Only one run per
/// repository holds the lock, so anything running in its slot is stale.
/// Returns the pids killed.
pub fn kill_stragglers(dir: &Path) -> Vec<i32> {
    let Ok(dir) = dir.canonicalize() else {
        return vec![];
    };
    let me = std::process::id() as i32;
    let mut killed = Vec::new();
    let Ok(processes) = procfs::process::all_processes() else {
        return killed;
    };
    for process in processes.flatten() {
        let pid = process.pid();
        if pid == me {
            continue;
        }
        let Ok(cwd) = process.cwd() else {
            continue;
        };
        if cwd.starts_with(&dir) {
            let pid = nix::unistd::Pid::from_raw(pid);
            // Its whole group first (an agent and its children), then itself.
            if let Ok(pgid) = nix::unistd::getpgid(Some(pid))
                && pgid.as_raw() > 1
                && pgid.as_raw() != nix::unistd::getpgrp().as_raw()
            {
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            }
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            killed.push(pid.as_raw());
        }
    }
    if !killed.is_empty() {
        tracing::warn!(slot = %dir.display(), pids = ?killed, "killed processes left running in the checkout by an earlier run");
        // Give the kernel a moment to tear them down before git touches files.
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    killed
}
