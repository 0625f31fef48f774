//! The one child-process runner: every agent, setup and gate command goes
//! through [`run()`] (docs/loop.md#gate, docs/agents.md).
//!
//! A [`Command`] is spawned under a supervisor of its own (`supervisor.rs`)
//! that dies with nightshift and takes the call's processes with it, with a
//! cleared environment plus an explicit map, in its own process group,
//! stdin null (or the prompt bytes, then closed), stdout and stderr drained
//! from the start into files through a [`crate::secret::StreamRedactor`] (never held whole
//! in memory; a redacted tail of each is kept). On timeout or cancellation
//! the call's processes get SIGTERM, a grace period, then SIGKILL; the same
//! when its output passes [`Command::max_output`]. After the program exits
//! its leftovers are ended too (see [`run()`]), and the reader tasks get a
//! bounded time to finish, so a grandchild holding a pipe cannot hang a night.
//!
//! It is not an agent adapter (no output parsing beyond splitting stdout into
//! lines for a callback) and it does not decide which variables are secret:
//! callers pass the environment map and the [`crate::secret::Redactor`].

mod command;
mod entry;
mod error;
mod guard;
mod outcome;
mod run;
mod shorten;
mod stream;
mod supervisor;

pub use command::{
    CALL_MARKER_VAR, Command, DEFAULT_GRACE, DEFAULT_LINE_MAX, DEFAULT_TAIL_BYTES, DEFAULT_TIMEOUT,
    LineCallback, RunAs, child_env, is_clock_or_loader_var, is_ledger_var,
};
pub use error::ProcessError;
pub use outcome::Outcome;
pub use run::{STOP_POLL, become_undumpable, run, run_blocking};
pub use stream::READER_LINGER;

#[cfg(test)]
mod tests;
