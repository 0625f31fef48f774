//! [`KillGuard`]: kills a child's process group when its owner is dropped
//! (a cancelled task, a panic), and the sweep of processes that carry the call's
//! marker variable after the group is gone.
//!
//! Not for the normal stop on timeout: `run` does that, the guard is the fallback.

use super::command::CALL_MARKER_VAR;
use super::procs;
use std::time::{Duration, Instant};

/// Signals one call's process group and its marked descendants; on drop
/// (the `run` future dropped mid-call) sends them SIGKILL.
pub(super) struct KillGuard {
    pub(super) pgid: i32,
    /// This call's marker value, or `None` when escaped descendants are
    /// left alone ([`Command::sweep_escaped`]).
    pub(super) marker: Option<String>,
    /// Our children when the call started (`None`: escaped descendants are
    /// left alone).
    pub(super) children_before: Option<Vec<i32>>,
    /// The sweep saw nothing left: signalling the group id again could hit
    /// an unrelated group that reused the number.
    pub(super) swept: bool,
}

impl KillGuard {
    /// Sends `signal` to the group and to every marked process; returns how
    /// many targets (the group counts as one) still existed.
    pub(super) fn signal_all(&self, signal: i32) -> usize {
        let mut targets = 0;
        // SAFETY: kill(2) with a negative pid signals a process group; it
        // touches no memory.
        if unsafe { libc::kill(-self.pgid, signal) } == 0 {
            targets += 1;
        }
        for pid in self.marked() {
            // SAFETY: as above, for one process.
            if unsafe { libc::kill(pid, signal) } == 0 {
                targets += 1;
            }
        }
        targets
    }

    /// Live processes of this call outside its group: those carrying its
    /// marker, and those reparented to us (we are a subreaper) since it
    /// started after leaving our session — a daemon that ran `setsid` and
    /// cleared its environment carries no marker, and may wait for the
    /// token in the environment of the next `git` (docs/agents.md#environment).
    fn marked(&self) -> Vec<i32> {
        let mut pids = match &self.marker {
            Some(marker) => procs::with_env_var(CALL_MARKER_VAR, marker),
            None => Vec::new(),
        };
        if let Some(before) = &self.children_before {
            // An orphan carrying another call's marker is that call's (with
            // several workers, calls run side by side: a daemon one started,
            // such as the embedded database, is not another's to sweep).
            let theirs = |p: &i32| {
                procs::env_var(*p, CALL_MARKER_VAR)
                    .is_some_and(|m| self.marker.as_deref() != Some(m.as_str()))
            };
            pids.extend(
                procs::escaped_orphans(before)
                    .into_iter()
                    .filter(|p| !pids.contains(p) && !theirs(p))
                    .collect::<Vec<_>>(),
            );
        }
        pids
    }

    /// Whether anything of this call is left to wait for: a live member of
    /// the group or a marked process. Zombies do not count.
    fn anything_alive(&self) -> bool {
        procs::group_has_live_member(self.pgid) || !self.marked().is_empty()
    }

    /// After the child is gone: TERM, grace, KILL for whatever is left, and
    /// reap reparented zombies.
    pub(super) async fn sweep(&mut self, grace: Duration) {
        self.swept = self.terminate_leftovers(grace).await;
        // A leftover that turned zombie after the last look is reaped here.
        procs::reap_orphans();
    }

    /// TERM, grace, KILL; true when nothing of the call is left alive.
    async fn terminate_leftovers(&self, grace: Duration) -> bool {
        if self.signal_all(libc::SIGTERM) == 0 || !self.anything_alive() {
            return true;
        }
        tracing::info!(pgid = self.pgid, "terminating leftover descendants");
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(25)).await;
            procs::reap_orphans();
            if !self.anything_alive() {
                return true;
            }
        }
        tracing::warn!(
            pgid = self.pgid,
            "leftover descendants survived SIGTERM; sending SIGKILL"
        );
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            self.signal_all(libc::SIGKILL);
            tokio::time::sleep(Duration::from_millis(20)).await;
            procs::reap_orphans();
            if !self.anything_alive() {
                return true;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    pgid = self.pgid,
                    "leftover descendants survived SIGKILL for 2 s"
                );
                return false;
            }
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        // When `run` was dropped mid-call this is the only cleanup there is.
        if !self.swept {
            self.signal_all(libc::SIGKILL);
        }
    }
}
