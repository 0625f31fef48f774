//! The gate: the project's own verify commands, run by nightshift itself
//! (SPEC §5.4).
//!
//! Each command runs with `sh -c` in the checkout, with the agents'
//! environment plus the config's `gate_env`, under a timeout, through the one
//! process runner. The gate keeps exit code, duration and the redacted tail
//! of the output. It never trusts an agent's claim that tests passed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::agent::RunAs;
use crate::process;

/// Bytes of output tail kept per command (for feedback and the PR body).
pub const TAIL_BYTES: usize = 16 * 1024;

/// One gate command's result.
#[derive(Debug, Clone, Serialize)]
pub struct GateRun {
    /// The command as written.
    pub command: String,
    /// Exit code (None when killed by a signal or the timeout).
    pub exit_code: Option<i32>,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Redacted tail of stdout and stderr.
    pub output_tail: String,
}

impl GateRun {
    /// Passed: exit code 0 within the timeout.
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
    /// The failure signature used for no-progress detection: command and
    /// exit code (SPEC §5.6).
    pub fn signature(&self) -> String {
        format!(
            "gate:{}:{}",
            self.command,
            self.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "timeout".into())
        )
    }
}

/// How to run gate commands.
#[derive(Debug, Clone)]
pub struct GateSpec {
    /// Working directory (the checkout).
    pub cwd: PathBuf,
    /// Complete environment.
    pub env: BTreeMap<String, String>,
    /// Per-command timeout.
    pub timeout: Duration,
    /// Where output logs go.
    pub log_dir: PathBuf,
    /// Secret values to redact.
    pub secrets: Vec<String>,
    /// Run as this user (config `agent_user`).
    pub run_as: Option<RunAs>,
}

/// Runs `commands` in order and stops at the first failure (later commands
/// would only repeat the news). `label` names the log files (`setup`, `gate`).
///
/// # Errors
/// [`process::ProcessError`] when `sh` itself cannot be started.
pub async fn run_all(
    label: &str,
    commands: &[String],
    spec: &GateSpec,
    cancel: &CancellationToken,
) -> Result<Vec<GateRun>, process::ProcessError> {
    let mut out = Vec::new();
    for (i, c) in commands.iter().enumerate() {
        let r = run_one(label, i, c, spec, cancel).await?;
        let stop = !r.passed();
        out.push(r);
        if stop || cancel.is_cancelled() {
            break;
        }
    }
    Ok(out)
}

async fn run_one(
    label: &str,
    i: usize,
    command: &str,
    spec: &GateSpec,
    cancel: &CancellationToken,
) -> Result<GateRun, process::ProcessError> {
    let _ = std::fs::create_dir_all(&spec.log_dir);
    let log = |ext: &str| spec.log_dir.join(format!("{label}-{i}.{ext}"));
    let mut cmd = process::Command::shell(command)
        .cwd(&spec.cwd)
        .env_map(spec.env.clone())
        .timeout(spec.timeout)
        .stdout_file(log("stdout"))
        .stderr_file(log("stderr"))
        .redactor(crate::secret::Redactor::with_known(&spec.secrets));
    if let Some(u) = &spec.run_as {
        cmd = cmd.run_as(u.clone());
    }
    let o = process::run(cmd, cancel).await?;
    let mut tail = String::new();
    if !o.stdout_tail.is_empty() {
        tail.push_str(&o.stdout_tail);
    }
    if !o.stderr_tail.is_empty() {
        if !tail.is_empty() && !tail.ends_with('\n') {
            tail.push('\n');
        }
        tail.push_str(&o.stderr_tail);
    }
    if o.timed_out {
        tail.push_str(&format!(
            "\n[nightshift: killed after the gate timeout of {}s]\n",
            spec.timeout.as_secs()
        ));
    }
    Ok(GateRun {
        command: command.to_string(),
        exit_code: o.exit_code,
        timed_out: o.timed_out,
        duration_ms: o.duration.as_millis() as u64,
        output_tail: tail_of(&tail, TAIL_BYTES),
    })
}

/// The last `max` bytes of `s`, cut at a char boundary.
pub fn tail_of(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = s.len() - max;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    s[cut..].to_string()
}

/// Builds the failure feedback for the writer's next round: per failed
/// command, how it failed and the last 4,000 characters of its output (or
/// that it printed nothing).
pub fn feedback(runs: &[GateRun]) -> String {
    let mut s = String::new();
    for r in runs.iter().filter(|r| !r.passed()) {
        let how = if r.timed_out {
            "timed out".to_string()
        } else {
            format!(
                "exit code {}",
                r.exit_code.map(|c| c.to_string()).unwrap_or("none".into())
            )
        };
        if r.output_tail.trim().is_empty() {
            // An empty code block reads as if the output were lost.
            s.push_str(&format!(
                "The gate command `{}` failed ({how}) and printed nothing.\n",
                r.command
            ));
            continue;
        }
        s.push_str(&format!(
            "The gate command `{}` failed ({how}). The last lines of its output:\n```\n{}\n```\n",
            r.command,
            tail_of(&r.output_tail, 4000).trim_end()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(command: &str, exit_code: Option<i32>, timed_out: bool, output: &str) -> GateRun {
        GateRun {
            command: command.into(),
            exit_code,
            timed_out,
            duration_ms: 10,
            output_tail: output.into(),
        }
    }

    #[test]
    fn feedback_names_each_failed_command_and_what_it_printed() {
        let fb = feedback(&[
            run("cargo fmt --check", Some(0), false, ""),
            run("sh test.sh", Some(1), false, "ok 1\nunknown word: bogus\n"),
        ]);
        assert!(
            !fb.contains("cargo fmt"),
            "a passing command is not feedback: {fb}"
        );
        assert!(
            fb.contains("`sh test.sh` failed (exit code 1)")
                && fb.contains("```\nok 1\nunknown word: bogus\n```"),
            "{fb}"
        );
        // Silence is said in words, not as an empty code block.
        let fb = feedback(&[run("./check", Some(2), false, " \n")]);
        assert_eq!(
            fb,
            "The gate command `./check` failed (exit code 2) and printed nothing.\n"
        );
        assert!(
            feedback(&[run("slow", None, true, "")]).contains("(timed out) and printed nothing")
        );
    }
}
