//! The `command` agent kind: any argv speaking nightshift's protocol (SPEC §6).
//!
//! The child gets `NIGHTSHIFT_ROLE`, `NIGHTSHIFT_PROMPT_FILE`,
//! `NIGHTSHIFT_CONTRACT_FILE`, `NIGHTSHIFT_FEEDBACK_FILE` and
//! `NIGHTSHIFT_ROUND`, and the prompt on stdin. A reviewer prints its verdict
//! as the last JSON object line of stdout. Limit messages are read from its
//! output like any other agent's. Used by tests and custom agents.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::{AgentError, Call, Report, Role, Usage, base_command, limit_in_text, parse_blocks, write_call_files};
use crate::config::AgentConfig;
use crate::review;

/// Bytes of stdout kept in memory for the final text (the rest is on disk).
const KEEP_TEXT_BYTES: usize = 256 * 1024;

/// Runs a `command` agent.
///
/// # Errors
/// [`AgentError`] when it cannot be started.
pub async fn run(agent: &AgentConfig, call: &Call, cancel: &CancellationToken) -> Result<Report, AgentError> {
    let (prompt, contract, feedback) = write_call_files(call)?;
    let env = [
        ("NIGHTSHIFT_ROLE", call.role.as_str().to_string()),
        ("NIGHTSHIFT_PROMPT_FILE", prompt.display().to_string()),
        ("NIGHTSHIFT_CONTRACT_FILE", contract.display().to_string()),
        ("NIGHTSHIFT_FEEDBACK_FILE", feedback.display().to_string()),
        ("NIGHTSHIFT_ROUND", call.round.to_string()),
    ];
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    let cmd = base_command(&agent.command, call, &env).stdin_bytes(call.prompt.clone().into_bytes()).on_stdout_line(Box::new(move |line: &str| {
        let mut t = sink.lock().expect("text buffer");
        t.push_str(line);
        t.push('\n');
        if t.len() > KEEP_TEXT_BYTES * 2 {
            // Keep the tail: blocks and verdicts come at the end.
            let cut = t.len() - KEEP_TEXT_BYTES;
            let cut = (cut..t.len()).find(|i| t.is_char_boundary(*i)).unwrap_or(t.len());
            t.drain(..cut);
        }
    }));
    let outcome = crate::process::run(cmd, cancel).await.map_err(|source| AgentError::Spawn { role: call.role.as_str(), kind: agent.kind, source })?;
    let text = text.lock().expect("text buffer").clone();
    let limit = limit_in_text(&format!("{}\n{}", outcome.stderr_tail, tail_lines(&text, 20)), call.tz);
    let verdict = match call.role {
        Role::Reviewer => review::last_json_verdict(&text),
        Role::Writer => None,
    };
    let failure = if outcome.timed_out {
        Some(format!("timed out after {}s", call.timeout.as_secs()))
    } else if outcome.cancelled {
        Some("interrupted".to_string())
    } else if outcome.exit_code != Some(0) {
        Some(format!("exited with {}: {}", exit_text(&outcome), last_line(&outcome.stderr_tail).unwrap_or_else(|| last_line(&text).unwrap_or_default())))
    } else {
        None
    };
    let claimed_files = parse_blocks(&text).files;
    Ok(Report {
        argv: agent.command.clone(),
        outcome,
        text,
        verdict,
        usage: Usage::default(),
        limit,
        failure,
        tools: None,
        mcp_servers: None,
        claimed_files,
    })
}

/// "code 3" or "signal 9".
pub(crate) fn exit_text(o: &crate::process::Outcome) -> String {
    match (o.exit_code, o.signal) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "no status".into(),
    }
}

fn last_line(s: &str) -> Option<String> {
    s.lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string())
}

fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
