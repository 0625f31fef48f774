//! The `claude` agent kind: Claude Code in headless mode (SPEC §6).
//!
//! Writer: `claude -p --output-format stream-json --verbose` plus the
//! configured permission flags. Reviewer: `--permission-mode plan --tools
//! Read,Grep,Glob --strict-mcp-config`. The stream is parsed line by line as
//! it arrives (never held whole): the `init` event (tools, MCP servers,
//! permission mode, model, version), assistant messages, `rate_limit_event`,
//! and the final `result`. A failure is read from `is_error`,
//! `api_error_status` and `terminal_reason`, never from `subtype` alone (a
//! failed call can say `subtype: "success"`).

use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{AgentError, Call, Report, Role, Usage, base_command, limit_in_text, parse_blocks};
use crate::config::AgentConfig;
use crate::limit;
use crate::review;

/// Permission flags of an unattended writer when the config gives none: edits
/// are accepted without a prompt and the project's own commands may run
/// (`Bash`), which the writer needs to run the tests. `--dangerously-skip-
/// permissions` is not the default because claude refuses it as root.
pub const DEFAULT_WRITER_FLAGS: &[&str] = &["--permission-mode", "acceptEdits", "--allowedTools", "Bash,Edit,Write,MultiEdit,Read,Grep,Glob"];

/// The reviewer's read-only flags: plan mode, exactly three read tools, no
/// MCP servers from the user's or project's config.
pub const REVIEWER_FLAGS: &[&str] = &["--permission-mode", "plan", "--tools", "Read,Grep,Glob", "--strict-mcp-config"];

/// Tools a reviewer may have (its init event is checked against this).
pub const READ_ONLY_TOOLS: &[&str] = &["Read", "Grep", "Glob"];

/// The argv for one call: the prompt is the last argument, after `--`,
/// because `--allowedTools` and `--tools` take a variadic list and the real
/// CLI otherwise reads the prompt as one more tool name ("was read as a value
/// of --allowedTools, not as a prompt"); stdin is closed.
pub fn argv(agent: &AgentConfig, role: Role, prompt: &str) -> Vec<String> {
    let mut v: Vec<String> = agent.command.clone();
    v.extend(["-p", "--output-format", "stream-json", "--verbose"].map(String::from));
    match role {
        Role::Writer => match &agent.permission_flags {
            Some(flags) => v.extend(flags.iter().cloned()),
            None => v.extend(DEFAULT_WRITER_FLAGS.iter().map(|s| s.to_string())),
        },
        Role::Reviewer => v.extend(REVIEWER_FLAGS.iter().map(|s| s.to_string())),
    }
    if let Some(m) = &agent.model {
        v.extend(["--model".to_string(), m.clone()]);
    }
    v.push("--".to_string());
    v.push(prompt.to_string());
    v
}

/// What the stream said, accumulated event by event.
#[derive(Debug, Default, Clone)]
pub struct StreamState {
    /// `init.tools`.
    pub tools: Option<Vec<String>>,
    /// `init.mcp_servers[].name`.
    pub mcp_servers: Option<Vec<String>>,
    /// `init.permissionMode`.
    pub permission_mode: Option<String>,
    /// `init.model`.
    pub model: Option<String>,
    /// `init.claude_code_version`.
    pub version: Option<String>,
    /// Text of the last assistant message that had text.
    pub last_assistant_text: String,
    /// Files named by Edit/Write/MultiEdit/NotebookEdit tool calls.
    pub edited_files: Vec<String>,
    /// The `result` event, when it came.
    pub result: Option<Value>,
    /// A usage limit read from a `rate_limit_event` or a limit message.
    pub limit: Option<limit::LimitReading>,
    /// `system/api_retry` events seen.
    pub api_retries: u32,
}

impl StreamState {
    /// Feeds one stdout line (one JSON event; other lines are ignored).
    pub fn feed(&mut self, line: &str, tz: chrono_tz::Tz) {
        let Ok(ev) = serde_json::from_str::<Value>(line.trim()) else { return };
        match ev.get("type").and_then(Value::as_str) {
            Some("system") => match ev.get("subtype").and_then(Value::as_str) {
                Some("init") => {
                    self.tools = ev.get("tools").and_then(Value::as_array).map(|a| a.iter().filter_map(|t| t.as_str().map(String::from)).collect());
                    self.mcp_servers = ev.get("mcp_servers").and_then(Value::as_array).map(|a| {
                        a.iter().filter_map(|s| s.get("name").and_then(Value::as_str).or_else(|| s.as_str()).map(String::from)).collect()
                    });
                    self.permission_mode = ev.get("permissionMode").and_then(Value::as_str).map(String::from);
                    self.model = ev.get("model").and_then(Value::as_str).map(String::from);
                    self.version = ev.get("claude_code_version").and_then(Value::as_str).map(String::from);
                }
                Some("api_retry") => self.api_retries += 1,
                _ => {}
            },
            Some("assistant") => {
                let content = ev.pointer("/message/content").and_then(Value::as_array);
                let mut text = String::new();
                for block in content.into_iter().flatten() {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
                        Some("tool_use") => {
                            let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                            if matches!(name, "Edit" | "Write" | "MultiEdit" | "NotebookEdit") {
                                if let Some(p) = block.pointer("/input/file_path").or_else(|| block.pointer("/input/notebook_path")).and_then(Value::as_str) {
                                    if !self.edited_files.iter().any(|f| f == p) {
                                        self.edited_files.push(p.to_string());
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
                if !text.trim().is_empty() {
                    // A synthetic assistant message marked `"error":"rate_limit"`
                    // carries the CLI's own limit text.
                    if ev.get("error").and_then(Value::as_str) == Some("rate_limit") && self.limit.is_none() {
                        self.limit = limit_in_text(&text, tz);
                    }
                    self.last_assistant_text = text;
                }
            }
            Some("rate_limit_event") => {
                if let Some(r) = limit::read_claude_event(&ev, Utc::now(), tz) {
                    self.limit = Some(r);
                }
            }
            Some("result") => self.result = Some(ev),
            _ => {}
        }
    }

    /// The final text: the result's `result`, or the last assistant text
    /// when the result is empty (seen with real transcripts).
    pub fn final_text(&self) -> String {
        let r = self.result.as_ref().and_then(|r| r.get("result")).and_then(Value::as_str).unwrap_or("");
        if r.trim().is_empty() { self.last_assistant_text.clone() } else { r.to_string() }
    }

    /// Whether the result reports an error (`is_error`, or a missing result).
    pub fn is_error(&self) -> bool {
        match &self.result {
            Some(r) => r.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            None => true,
        }
    }

    /// Token use and cost from the result event.
    pub fn usage(&self) -> Usage {
        let Some(r) = &self.result else { return Usage::default() };
        let n = |p: &str| r.pointer(p).and_then(Value::as_u64);
        let tokens_in = match (n("/usage/input_tokens"), n("/usage/cache_read_input_tokens"), n("/usage/cache_creation_input_tokens")) {
            (None, None, None) => None,
            (a, b, c) => Some(a.unwrap_or(0) + b.unwrap_or(0) + c.unwrap_or(0)),
        };
        Usage { tokens_in, tokens_out: n("/usage/output_tokens"), cost_usd: r.get("total_cost_usd").and_then(Value::as_f64) }
    }
}

/// Runs a `claude` agent call.
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
    let text = st.final_text();
    let mut limit = st.limit.clone();
    if limit.is_none() && st.is_error() {
        // The result channel: its text, else stderr (a crashed CLI).
        limit = limit_in_text(&text, tz).or_else(|| limit_in_text(&outcome.stderr_tail, tz));
        if limit.is_none() {
            let status = st.result.as_ref().and_then(|r| r.get("api_error_status")).and_then(Value::as_u64);
            if status == Some(429) {
                limit = Some(limit::read_text("429 Too Many Requests", Utc::now(), tz));
            }
        }
    }
    let failure = if outcome.timed_out {
        Some(format!("timed out after {}s", call.timeout.as_secs()))
    } else if outcome.cancelled {
        Some("interrupted".into())
    } else if st.result.is_none() {
        Some(format!("claude ended ({}) without a result event: {}", super::command::exit_text(&outcome), outcome.stderr_tail.lines().last().unwrap_or("")))
    } else if st.is_error() {
        let r = st.result.as_ref().expect("checked");
        let reason = r.get("terminal_reason").and_then(Value::as_str).unwrap_or("error");
        Some(format!("claude reported an error ({reason}): {}", text.lines().next().unwrap_or("")))
    } else {
        None
    };
    let verdict = match call.role {
        Role::Reviewer => st.result.as_ref().and_then(|r| r.get("structured_output")).and_then(review::verdict_from_value).or_else(|| review::last_json_verdict(&text)),
        Role::Writer => None,
    };
    let mut claimed_files = parse_blocks(&text).files;
    for f in &st.edited_files {
        let rel = f.strip_prefix(&format!("{}/", call.cwd.display())).unwrap_or(f).to_string();
        if !claimed_files.contains(&rel) {
            claimed_files.push(rel);
        }
    }
    Ok(Report {
        argv: argv[..argv.len() - 1].iter().cloned().chain(std::iter::once("<prompt>".to_string())).collect(),
        outcome,
        text,
        verdict,
        usage: st.usage(),
        limit,
        failure,
        tools: st.tools.clone(),
        mcp_servers: st.mcp_servers.clone(),
        claimed_files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_result_falls_back_to_assistant_text() {
        let mut st = StreamState::default();
        let tz: chrono_tz::Tz = "UTC".parse().unwrap();
        for l in [
            r#"{"type":"system","subtype":"init","tools":["Read","Grep","Glob"],"mcp_servers":[],"permissionMode":"plan","model":"m","claude_code_version":"2.1.328"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Hello."}]}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"","total_cost_usd":0.024,"usage":{"input_tokens":3,"output_tokens":6}}"#,
        ] {
            st.feed(l, tz);
        }
        assert_eq!(st.final_text(), "Hello.");
        assert!(!st.is_error());
        assert_eq!(st.tools.as_deref(), Some(&["Read".to_string(), "Grep".into(), "Glob".into()][..]));
        assert_eq!(st.usage(), Usage { tokens_in: Some(3), tokens_out: Some(6), cost_usd: Some(0.024) });
    }

    #[test]
    fn error_with_success_subtype_is_an_error() {
        let mut st = StreamState::default();
        let tz: chrono_tz::Tz = "UTC".parse().unwrap();
        st.feed(r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"result":"API Error: Connection refused"}"#, tz);
        assert!(st.is_error());
        assert!(st.limit.is_none());
    }
}
