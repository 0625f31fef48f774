//! [`Outcome`]: what one finished call leaves (exit status, how it ended,
//! the redacted tails of its output, its time).
//!
//! Not for judging it: callers decide what an exit status means.

use std::path::PathBuf;
use std::time::Duration;

/// How one call ended. A non-zero exit is an outcome, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exit code when the child exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when the child was killed by a signal (ours on timeout
    /// or cancellation: 15 or 9).
    pub signal: Option<i32>,
    /// The timeout elapsed and the child was killed.
    pub timed_out: bool,
    /// The cancellation token fired and the child was killed.
    pub cancelled: bool,
    /// Its output passed [`super::Command::max_output`] and the child was killed.
    pub output_capped: bool,
    /// Wall-clock time from spawn to the child's exit.
    pub duration: Duration,
    /// The last bytes (at most the tail size) of stdout, redacted, lossy UTF-8.
    pub stdout_tail: String,
    /// The last bytes (at most the tail size) of stderr, redacted, lossy UTF-8.
    pub stderr_tail: String,
    /// The file holding all of stdout (redacted), if one was asked for.
    pub stdout_path: Option<PathBuf>,
    /// The file holding all of stderr (redacted), if one was asked for.
    pub stderr_path: Option<PathBuf>,
    /// Bytes the child wrote to stdout (before redaction).
    pub stdout_bytes: u64,
    /// Bytes the child wrote to stderr (before redaction).
    pub stderr_bytes: u64,
    /// All of stdout, raw, when [`super::Command::capture_stdout`] asked for it;
    /// empty otherwise.
    pub stdout: Vec<u8>,
    /// Each connection the sandbox's proxy refused (`host:port`, in order;
    /// docs/security.md#the-sandbox); empty without a sandbox.
    pub refused: Vec<String>,
}

impl Outcome {
    /// An outcome as a call that ran for a second would have it, for the
    /// adapters' unit tests.
    #[cfg(test)]
    pub(crate) fn fake(exit_code: Option<i32>, signal: Option<i32>, stderr: &str) -> Outcome {
        Outcome {
            exit_code,
            signal,
            timed_out: false,
            cancelled: false,
            output_capped: false,
            duration: Duration::from_secs(1),
            stdout_tail: String::new(),
            stderr_tail: stderr.to_string(),
            stdout_path: None,
            stderr_path: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// Exited by itself with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled && !self.output_capped
    }
}
