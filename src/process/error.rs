//! [`ProcessError`]: why a child could not be started or its output not kept.
//!
//! A child that ran and failed is not an error: see [`Outcome`](super::Outcome).

use std::io;
use std::path::PathBuf;

/// Failure to run a child at all. A child that ran and failed is not an
/// error: it is an [`super::Outcome`] with a non-zero exit code.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started: not found, not executable, bad
    /// working directory, or the switch to `agent_user` was refused.
    #[error("cannot start `{program}` in {}: {source}\n  hint: {hint}", cwd.display())]
    Spawn {
        /// `argv[0]` as given.
        program: String,
        /// The working directory the child was to start in.
        cwd: PathBuf,
        /// What to do about it.
        hint: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A stdout or stderr file could not be created.
    #[error("cannot create the output file {} for `{program}`: {source}", path.display())]
    OutputFile {
        /// `argv[0]` of the command whose output it was for.
        program: String,
        /// The file that could not be created.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Waiting for the child failed (the operating system lost track of it).
    #[error("waiting for `{program}` (pid {pid}) failed: {source}")]
    Wait {
        /// `argv[0]`.
        program: String,
        /// The child's process id.
        pid: u32,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}
