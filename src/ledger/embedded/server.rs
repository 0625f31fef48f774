//! The embedded cluster's server processes as nightshift sees them: the PostgreSQL
//! tools run through the process runner with their output captured, and the
//! postmaster's pid file read to tell a live server of this cluster from a stale
//! file. Not what to run when (see [`super::cluster`]).

use std::fs;
use std::io::{self};
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use crate::process;

use super::*;

/// A PostgreSQL tool through the process runner: its environment only `PATH`,
/// `LC_ALL` and `LANG`, cwd `/`, [`CHILD_TIMEOUT`], stdout kept whole.
pub(super) fn tool_command(program: &Path) -> process::Command {
    process::Command::new(program.display().to_string())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .cwd("/")
        .timeout(CHILD_TIMEOUT)
        .capture_stdout(true)
}

/// Runs a child with stdin null and output captured, under [`CHILD_TIMEOUT`]; returns
/// its stdout. On failure the error carries the output's tail and, when given, the
/// tail of the server log.
pub(super) async fn run_captured(
    cmd: process::Command,
    label: &str,
    log: Option<&Path>,
) -> Result<String, EmbeddedError> {
    let out = process::run(cmd, &CancellationToken::new())
        .await
        .map_err(|e| EmbeddedError::Spawn {
            command: label.to_string(),
            source: match e {
                process::ProcessError::Spawn { source, .. }
                | process::ProcessError::Wait { source, .. }
                | process::ProcessError::OutputFile { source, .. } => source,
            },
        })?;
    if out.timed_out {
        return Err(EmbeddedError::Timeout {
            command: label.to_string(),
            seconds: CHILD_TIMEOUT.as_secs(),
        });
    }
    if out.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&out.stderr_tail);
    let log = log
        .and_then(|p| fs::read(p).ok())
        .map(|bytes| {
            format!(
                "\nserver log ({}):\n{}",
                log.map(Path::display)
                    .map(|d| d.to_string())
                    .unwrap_or_default(),
                tail(&String::from_utf8_lossy(&bytes), 2000)
            )
        })
        .unwrap_or_default();
    let status = match (out.exit_code, out.signal) {
        (Some(code), _) => format!("exit status: {code}"),
        (None, Some(signal)) => format!("signal: {signal}"),
        (None, None) => "unknown status".to_string(),
    };
    Err(EmbeddedError::Command {
        command: label.to_string(),
        status,
        stderr: tail(text.trim(), 2000).to_string(),
        log,
    })
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub(super) fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The pid on the first line of a PostgreSQL lock file.
pub(super) fn read_pid(path: &Path) -> Option<u32> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .next()?
        .trim()
        .parse()
        .ok()
        .filter(|pid| *pid > 0)
}

/// What the pid in a PostgreSQL lock file is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PidState {
    /// No such process: PostgreSQL removes such a stale file itself.
    Gone,
    /// A dead process nobody reaped (a container whose pid 1 does not reap). It holds
    /// nothing, but PostgreSQL and `pg_ctl` see it as alive and refuse to start.
    Zombie,
    /// A live process whose working directory is this data directory: this cluster's
    /// server (the postmaster and its children chdir to their data directory).
    Ours,
    /// A live process elsewhere: the pid was reused (after a reboot, in a container).
    Other,
    /// Alive, but /proc cannot tell whose (no /proc, or not readable): trusted as ours,
    /// as `pg_ctl` does, so a live server's files are never removed.
    Unknown,
}

pub(super) fn pid_state(pid: u32, data_dir: &Path) -> PidState {
    let Ok(raw) = i32::try_from(pid) else {
        return PidState::Gone;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => {}
        Err(_) => return PidState::Gone,
    }
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    if let Ok(stat) = fs::read_to_string(proc_dir.join("stat")) {
        // The state letter follows the parenthesised command name, which may hold spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if state == Some("Z") {
            return PidState::Zombie;
        }
    }
    match fs::read_link(proc_dir.join("cwd")) {
        Ok(cwd) => {
            let want = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
            if cwd == want {
                PidState::Ours
            } else {
                PidState::Other
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && !proc_dir.exists() => PidState::Gone,
        Err(_) => PidState::Unknown,
    }
}

/// The postmaster pid of `data_dir` when a server for it is running.
pub(super) fn live_postmaster(data_dir: &Path) -> Option<u32> {
    let pid = read_pid(&data_dir.join("postmaster.pid"))?;
    matches!(pid_state(pid, data_dir), PidState::Ours | PidState::Unknown).then_some(pid)
}
