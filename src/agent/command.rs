//! The `command` agent kind: any argv speaking nightshift's protocol (SPEC §6).
//!
//! The child gets `NIGHTSHIFT_ROLE`, `NIGHTSHIFT_PROMPT_FILE`,
//! `NIGHTSHIFT_CONTRACT_FILE`, `NIGHTSHIFT_FEEDBACK_FILE` and
//! `NIGHTSHIFT_ROUND`, and the prompt on stdin. A reviewer prints its verdict
//! as the last JSON object line of stdout. A usage limit is read from its
//! stderr, or from a stdout line that is the limit message itself (its prose
//! may mention limits freely). Used by tests and custom agents.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::{AgentError, Call, Report, Role, Usage, base_command, limit_in_text, parse_blocks, write_call_files};
use crate::config::AgentConfig;
use crate::limit::{self, LimitKind, LimitReading};
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
    let limit = read_limit(&outcome.stderr_tail, &text, call.tz);
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

/// Lines of stdout read for a limit message: the message is the agent's last word.
const STDOUT_LIMIT_LINES: usize = 20;

/// A limit in a command agent's output (SPEC §7): stderr is its error channel
/// and is read whole; stdout is its prose, so only a line that *is* a limit
/// message counts (one merely mentioning a limit does not), among the last
/// [`STDOUT_LIMIT_LINES`]. Stderr wins over stdout when both say something.
fn read_limit(stderr_tail: &str, stdout: &str, tz: chrono_tz::Tz) -> Option<LimitReading> {
    if let Some(r) = limit_in_text(stderr_tail, tz) {
        return Some(r);
    }
    let now = chrono::Utc::now();
    let lines: Vec<&str> = stdout.lines().collect();
    let mut best: Option<LimitReading> = None;
    for line in &lines[lines.len().saturating_sub(STDOUT_LIMIT_LINES)..] {
        let r = limit::read_stream_line(line, now, tz);
        let better = match (&best, r.kind) {
            (_, LimitKind::None) => false,
            (None, _) => true,
            (Some(b), k) => (k == LimitKind::UsageLimit && b.kind != LimitKind::UsageLimit) || (k == b.kind && b.resets_at.is_none() && r.resets_at.is_some()),
        };
        if better {
            best = Some(r);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const TZ: chrono_tz::Tz = chrono_tz::UTC;

    #[test]
    fn prose_mentioning_a_limit_is_not_a_limit() {
        let out = "Done. The retry now waits until the usage limit resets at 7pm.\nI checked: you've hit your limit is what the CLI prints when over quota.\n- handled Claude AI usage limit reached|1762952400 in limit.rs\n";
        assert_eq!(read_limit("", out, TZ), None);
    }

    #[test]
    fn a_line_that_is_the_message_is_a_limit() {
        let out = "Looking at the task.\nYou've hit your limit · resets 3am (UTC)\n";
        let r = read_limit("", out, TZ).expect("a usage limit");
        assert_eq!(r.kind, LimitKind::UsageLimit);
        assert!(r.resets_at.is_some());
    }

    #[test]
    fn stderr_is_read_whole_and_wins() {
        let r = read_limit("warning: something\nError: 429 Too Many Requests, rate limit reached; Claude AI usage limit reached|1762952400", "Rate limit reached for gpt-4 in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.", TZ).expect("a limit");
        assert_eq!(r.kind, LimitKind::UsageLimit);
    }

    #[test]
    fn only_the_last_lines_of_stdout_are_read() {
        let mut out = String::from("You've hit your limit · resets 3am (UTC)\n");
        for i in 0..STDOUT_LIMIT_LINES {
            out.push_str(&format!("line {i}\n"));
        }
        assert_eq!(read_limit("", &out, TZ), None, "a limit the agent got past long before its end is not read");
    }
}
