//! The `command` agent kind: any argv speaking nightshift's protocol (SPEC §6).
//!
//! The child gets `NIGHTSHIFT_ROLE`, `NIGHTSHIFT_PROMPT_FILE`,
//! `NIGHTSHIFT_CONTRACT_FILE`, `NIGHTSHIFT_FEEDBACK_FILE` and
//! `NIGHTSHIFT_ROUND`, and the prompt on stdin. A reviewer prints its verdict
//! as the last JSON object line of stdout. A usage limit is read from its
//! stderr, or from a stdout line that is the limit message itself (its prose
//! may mention limits freely). Used by tests and custom agents.
//!
//! Usage (optional; SPEC §4, §6 "token use and cost are taken from the
//! agent's own report"): a command agent may report what a call used, either
//! by writing the file named by `NIGHTSHIFT_USAGE_FILE` or by printing a line
//! on stdout, in both cases a JSON object of this shape (every field
//! optional; tokens are counts, cost is US dollars):
//!
//! ```text
//! {"usage":{"input_tokens":1200,"output_tokens":300,"cost_usd":0.042}}
//! ```
//!
//! The file wins over stdout; of several stdout lines the last one counts.
//! A bare object without the `usage` wrapper is accepted in the file. An agent
//! that reports nothing has unknown usage: the token cap counts it as 0 and
//! the cost caps are not enforced for it (the card says so).

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
    let usage_file = call.log_dir.join(format!("{}.usage.json", call.role.as_str()));
    // A stale file from an earlier attempt must not be counted twice. The
    // call directory is the agent's own (chowned by `write_call_files` under
    // `agent_user`), so it can create the file.
    let _ = std::fs::remove_file(&usage_file);
    let env = [
        ("NIGHTSHIFT_ROLE", call.role.as_str().to_string()),
        ("NIGHTSHIFT_PROMPT_FILE", prompt.display().to_string()),
        ("NIGHTSHIFT_CONTRACT_FILE", contract.display().to_string()),
        ("NIGHTSHIFT_FEEDBACK_FILE", feedback.display().to_string()),
        ("NIGHTSHIFT_ROUND", call.round.to_string()),
        ("NIGHTSHIFT_USAGE_FILE", usage_file.display().to_string()),
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
    let usage = std::fs::read_to_string(&usage_file).ok().and_then(|t| parse_usage(&t, true)).or_else(|| text.lines().rev().find_map(|l| parse_usage(l, false))).unwrap_or_default();
    Ok(Report {
        argv: agent.command.clone(),
        outcome,
        text,
        verdict,
        usage,
        limit,
        failure,
        tools: None,
        mcp_servers: None,
        claimed_files,
    })
}

/// Reads a usage report: `{"usage":{"input_tokens":N,"output_tokens":N,
/// "cost_usd":X}}`, or (when `bare` is allowed, for the usage file) the inner
/// object alone. Negative or non-numeric values are ignored, and an object
/// with none of the three fields is no report.
pub fn parse_usage(text: &str, bare: bool) -> Option<Usage> {
    let t = text.trim();
    if !t.starts_with('{') {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(t).ok()?;
    let u = match v.get("usage") {
        Some(u) if u.is_object() => u,
        _ if bare => &v,
        _ => return None,
    };
    let usage = Usage {
        tokens_in: u.get("input_tokens").and_then(serde_json::Value::as_u64),
        tokens_out: u.get("output_tokens").and_then(serde_json::Value::as_u64),
        cost_usd: u.get("cost_usd").and_then(serde_json::Value::as_f64).filter(|c| c.is_finite() && *c >= 0.0),
    };
    (usage != Usage::default()).then_some(usage)
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

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn usage_reports_are_read_in_both_shapes() {
        let u = parse_usage(r#"{"usage":{"input_tokens":10,"output_tokens":5,"cost_usd":0.25}}"#, false).unwrap();
        assert_eq!(u, Usage { tokens_in: Some(10), tokens_out: Some(5), cost_usd: Some(0.25) });
        assert_eq!(parse_usage(r#"{"input_tokens":7}"#, true).unwrap().tokens_in, Some(7));
        assert_eq!(parse_usage(r#"{"input_tokens":7}"#, false), None, "stdout needs the wrapper");
        assert_eq!(parse_usage(r#"{"verdict":"approve","findings":[]}"#, false), None);
        assert_eq!(parse_usage(r#"{"usage":{"cost_usd":-1}}"#, false), None);
        assert_eq!(parse_usage("not json {", true), None);
    }
}
