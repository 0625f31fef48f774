//! [`KillGuard`]: the runner's handle on one call's supervisor
//! (`supervisor.rs`): asks it to stop the call or to kill it now, and on
//! drop (a cancelled task, a panic) asks it to kill it now.
//!
//! Not for finding or signalling the call's processes: the supervisor does
//! that, and the guard never signals anything but the supervisor.

use super::supervisor::KILL_NOW;

/// Signals one call's supervisor; on drop (the `run` future dropped
/// mid-call) tells it to kill the call now.
pub(super) struct KillGuard {
    /// The supervisor's pid (the child `run` spawned).
    pub(super) supervisor: i32,
    /// The supervisor was reaped: its pid may name another process now.
    pub(super) reaped: bool,
}

impl KillGuard {
    /// Sends `signal` to the supervisor; false when it is already gone.
    pub(super) fn tell(&self, signal: i32) -> bool {
        if self.reaped {
            return false;
        }
        // SAFETY: kill(2) on our own child, not yet reaped (a zombie keeps
        // its pid), so the number names no other process.
        unsafe { libc::kill(self.supervisor, signal) == 0 }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        // When `run` was dropped mid-call this is the only cleanup there is.
        self.tell(KILL_NOW);
    }
}
