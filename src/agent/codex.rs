//! The `codex` agent kind: `codex exec --json` (SPEC §6).
//!
//! Writer: `--sandbox workspace-write`; reviewer: `--sandbox read-only`. The
//! JSON event stream (`thread.started`, `turn.started`, `item.*`,
//! `turn.completed` with token usage, `turn.failed`, `error`) is parsed line
//! by line. Codex reports tokens but no cost. Limit messages arrive as `error`
//! / `turn.failed` events and as 429 bodies on stderr.

use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{AgentError, Call, Report, Role, Usage, base_command, limit_in_text, parse_blocks};
use crate::config::AgentConfig;
use crate::limit;
use crate::review;

/// The argv for one call (the prompt is the last argument).
pub fn argv(agent: &AgentConfig, role: Role, prompt: &str) -> Vec<String> {
    let mut v: Vec<String> = agent.command.clone();
    v.extend(["exec", "--json"].map(String::from));
    let sandbox = match role {
        Role::Writer => "workspace-write",
        Role::Reviewer => "read-only",
    };
    v.extend(["--sandbox".to_string(), sandbox.to_string()]);
    if let Some(m) = &agent.model {
        v.extend(["--model".to_string(), m.clone()]);
    }
    v.push(prompt.to_string());
    v
}

/// What the event stream said.
#[derive(Debug, Default, Clone)]
pub struct StreamState {
    /// Text of the last `agent_message` item.
    pub last_message: String,
    /// Summed `turn.completed.usage`.
    pub usage: Usage,
    /// Whether a turn completed.
    pub completed: bool,
    /// The last `turn.failed` / `error` message.
    pub error: Option<String>,
    /// "Reconnecting…" errors seen (offline).
    pub reconnects: u32,
    /// A usage limit read from an event.
    pub limit: Option<limit::LimitReading>,
    /// Files named by `file_change` items.
    pub changed_files: Vec<String>,
}

impl StreamState {
    /// Feeds one stdout line.
    pub fn feed(&mut self, line: &str, tz: chrono_tz::Tz) {
        let Ok(ev) = serde_json::from_str::<Value>(line.trim()) else { return };
        if let Some(r) = limit::read_codex_event(&ev, Utc::now(), tz) {
            self.limit = Some(r);
        }
        match ev.get("type").and_then(Value::as_str) {
            Some("item.completed") => {
                let item = ev.get("item");
                match item.and_then(|i| i.get("type")).and_then(Value::as_str) {
                    Some("agent_message") => {
                        self.last_message = item.and_then(|i| i.get("text")).and_then(Value::as_str).unwrap_or("").to_string();
                    }
                    Some("file_change") => {
                        for c in item.and_then(|i| i.get("changes")).and_then(Value::as_array).into_iter().flatten() {
                            if let Some(p) = c.get("path").and_then(Value::as_str) {
                                self.changed_files.push(p.to_string());
                            }
                        }
                    }
                    _ => {}
                }
            }
            Some("turn.completed") => {
                self.completed = true;
                let n = |p: &str| ev.pointer(p).and_then(Value::as_u64);
                let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                };
                self.usage.tokens_in = add(self.usage.tokens_in, n("/usage/input_tokens"));
                self.usage.tokens_out = add(self.usage.tokens_out, n("/usage/output_tokens"));
            }
            Some("turn.failed") => {
                self.error = ev.pointer("/error/message").and_then(Value::as_str).map(String::from);
            }
            Some("error") => {
                let m = ev.get("message").and_then(Value::as_str).unwrap_or("").to_string();
                if m.starts_with("Reconnecting") {
                    self.reconnects += 1;
                }
                self.error = Some(m);
            }
            _ => {}
        }
    }
}

/// Runs a `codex` agent call.
///
/// # Errors
/// [`AgentError`] when it cannot be started.
pub async fn run(agent: &AgentConfig, call: &Call, cancel: &CancellationToken) -> Result<Report, AgentError> {
    let argv = argv(agent, call.role, &call.prompt);
    let state = Arc::new(Mutex::new(StreamState::default()));
    let sink = state.clone();
    let tz = call.tz;
    let cmd = base_command(&argv, call, &[]).on_stdout_line(Box::new(move |line: &str| sink.lock().expect("stream state").feed(line, tz)));
    let outcome = crate::process::run(cmd, cancel).await.map_err(|source| AgentError::Spawn { role: call.role.as_str(), kind: agent.kind, source })?;
    let st = state.lock().expect("stream state").clone();
    let mut limit = st.limit.clone();
    if limit.is_none() && (st.error.is_some() || outcome.exit_code != Some(0)) {
        limit = st.error.as_deref().and_then(|e| limit_in_text(e, tz)).or_else(|| limit_in_text(&outcome.stderr_tail, tz));
    }
    let failure = if outcome.timed_out {
        Some(format!("timed out after {}s", call.timeout.as_secs()))
    } else if outcome.cancelled {
        Some("interrupted".into())
    } else if let Some(e) = &st.error {
        Some(format!("codex failed: {e}"))
    } else if outcome.exit_code != Some(0) || !st.completed {
        Some(format!("codex ended ({}) without completing the turn: {}", super::command::exit_text(&outcome), outcome.stderr_tail.lines().last().unwrap_or("")))
    } else {
        None
    };
    let text = st.last_message.clone();
    let verdict = match call.role {
        Role::Reviewer => review::last_json_verdict(&text),
        Role::Writer => None,
    };
    let mut claimed_files = parse_blocks(&text).files;
    claimed_files.extend(st.changed_files.iter().map(|f| f.strip_prefix(&format!("{}/", call.cwd.display())).unwrap_or(f).to_string()));
    claimed_files.dedup();
    Ok(Report {
        argv: argv[..argv.len() - 1].iter().cloned().chain(std::iter::once("<prompt>".to_string())).collect(),
        outcome,
        text,
        verdict,
        usage: st.usage.clone(),
        limit,
        failure,
        tools: None,
        mcp_servers: None,
        claimed_files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_transcript() {
        let mut st = StreamState::default();
        let tz: chrono_tz::Tz = "UTC".parse().unwrap();
        for l in [
            r#"{"type":"thread.started","thread_id":"x"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Yep."}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}"#,
        ] {
            st.feed(l, tz);
        }
        assert_eq!(st.last_message, "Yep.");
        assert!(st.completed);
        assert_eq!(st.usage.tokens_in, Some(24763));
        assert_eq!(st.usage.tokens_out, Some(122));
        assert!(st.error.is_none());
    }

    #[test]
    fn turn_failed_is_an_error() {
        let mut st = StreamState::default();
        st.feed(r#"{"type":"turn.failed","error":{"message":"boom"}}"#, "UTC".parse().unwrap());
        assert_eq!(st.error.as_deref(), Some("boom"));
    }
}
