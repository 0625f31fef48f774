//! The `claude` agent kind: Claude Code in headless mode (SPEC §6).
//!
//! Writer: `claude -p --output-format stream-json --verbose` plus the
//! configured permission flags. Reviewer: `--permission-mode plan --tools
//! Read,Grep,Glob --strict-mcp-config --json-schema <verdict schema>`. The
//! prompt is the last argument, after `--`. The stream is parsed line by line
//! as it arrives (never held whole): the `init` event (tools, MCP servers,
//! permission mode, model, version), assistant messages, `rate_limit_event`,
//! `system/api_retry`, and the final `result`. A failure is read from
//! `is_error`, `api_error_status` and an `error_*` subtype, never from
//! `subtype` alone (a failed call can say `subtype: "success"`);
//! `terminal_reason` and `num_turns` go into the failure text. Everything
//! here was checked against the real CLI, pinned in
//! `tests/fakes/claude-code.version`, in `tests/agent_claude.rs`.

use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{AgentError, Call, Report, Role, Usage, base_command, limit_in_text, parse_blocks};
use crate::config::AgentConfig;
use crate::limit;
use crate::review;

/// Permission flags of an unattended writer when the config gives none
/// (SPEC §6): edits are accepted without a prompt (`acceptEdits`) and the
/// listed tools are pre-approved, `Bash` included, which the writer needs to
/// run the project's commands. Checked with the real CLI (2.1.328) running
/// as root, where `--dangerously-skip-permissions` is refused ("cannot be
/// used with root/sudo privileges"): with these flags it edits and writes
/// files and runs Bash (`tests/agent_claude.rs`).
pub const DEFAULT_WRITER_FLAGS: &[&str] = &["--permission-mode", "acceptEdits", "--allowedTools", "Bash,Edit,Write,MultiEdit,Read,Grep,Glob"];

/// The reviewer's read-only flags: plan mode, exactly three read tools, no
/// MCP servers from the user's or project's config. [`argv`] adds
/// `--json-schema` [`VERDICT_SCHEMA`] after them.
pub const REVIEWER_FLAGS: &[&str] = &["--permission-mode", "plan", "--tools", "Read,Grep,Glob", "--strict-mcp-config"];

/// The JSON Schema of a verdict, passed with `--json-schema` so the real CLI
/// returns the verdict as the result's `structured_output` (SPEC §5.5).
pub use crate::review::VERDICT_SCHEMA;

/// Tools a reviewer session may list in its init event (checked before a
/// verdict is trusted, SPEC §6): the three read tools of `--tools`, and
/// `StructuredOutput`, the tool the real CLI adds for `--json-schema`, which
/// only records the answer (seen with 2.1.328: `init.tools` is then
/// `["Glob","Grep","Read","StructuredOutput"]`).
pub const READ_ONLY_TOOLS: &[&str] = &["Read", "Grep", "Glob", "StructuredOutput"];

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
        Role::Reviewer => {
            v.extend(REVIEWER_FLAGS.iter().map(|s| s.to_string()));
            v.extend(["--json-schema".to_string(), VERDICT_SCHEMA.to_string()]);
        }
    }
    if let Some(m) = &agent.model {
        v.extend(["--model".to_string(), m.clone()]);
    }
    v.push("--".to_string());
    v.push(prompt.to_string());
    v
}

/// The final `result` event, typed. Whether it is a failure is read from
/// `is_error`, `api_error_status` and an `error_*` subtype together, never
/// from `subtype` alone: a failed call can say `subtype: "success"`
/// (`testdata/README.md`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultEvent {
    /// `is_error`.
    pub is_error: bool,
    /// `subtype` (`success`, `error_max_turns`, `error_during_execution`, …).
    pub subtype: Option<String>,
    /// `api_error_status`: the HTTP status of a failed API call (429, 529, …).
    pub api_error_status: Option<u64>,
    /// `terminal_reason` (`completed`, `api_error`, `max_turns`, …).
    pub terminal_reason: Option<String>,
    /// `num_turns`.
    pub num_turns: Option<u64>,
    /// `result`: the final text (may be empty although the model answered).
    pub text: String,
    /// `structured_output`: the `--json-schema` answer, when there is one.
    pub structured_output: Option<Value>,
    /// `usage` and `total_cost_usd`.
    pub usage: Usage,
}

impl ResultEvent {
    /// Reads a `{"type":"result",…}` event.
    pub fn from_value(r: &Value) -> ResultEvent {
        let n = |p: &str| r.pointer(p).and_then(Value::as_u64);
        let s = |k: &str| r.get(k).and_then(Value::as_str).map(String::from);
        let tokens_in = match (n("/usage/input_tokens"), n("/usage/cache_read_input_tokens"), n("/usage/cache_creation_input_tokens")) {
            (None, None, None) => None,
            (a, b, c) => Some(a.unwrap_or(0) + b.unwrap_or(0) + c.unwrap_or(0)),
        };
        ResultEvent {
            is_error: r.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            subtype: s("subtype"),
            api_error_status: n("/api_error_status"),
            terminal_reason: s("terminal_reason"),
            num_turns: n("/num_turns"),
            text: s("result").unwrap_or_default(),
            structured_output: r.get("structured_output").filter(|v| !v.is_null()).cloned(),
            usage: Usage { tokens_in, tokens_out: n("/usage/output_tokens"), cost_usd: r.get("total_cost_usd").and_then(Value::as_f64) },
        }
    }

    /// The call failed: `is_error`, an API error status, or an `error_*`
    /// subtype (any one of them; `subtype: "success"` proves nothing).
    pub fn failed(&self) -> bool {
        self.is_error || self.api_error_status.is_some() || self.subtype.as_deref().is_some_and(|s| s.starts_with("error"))
    }

    /// What the result says about a failure, for the ledger and the card:
    /// `terminal_reason api_error, api_error_status 429, subtype success, 1 turn`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = &self.terminal_reason {
            parts.push(format!("terminal_reason {t}"));
        }
        if let Some(st) = self.api_error_status {
            parts.push(format!("api_error_status {st}"));
        }
        if let Some(s) = &self.subtype {
            parts.push(format!("subtype {s}"));
        }
        if let Some(n) = self.num_turns {
            parts.push(format!("{n} turn{}", if n == 1 { "" } else { "s" }));
        }
        parts.join(", ")
    }
}

/// What the stream said, accumulated event by event (each stdout line is fed
/// as it arrives; nothing but these fields is kept).
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
    /// Assistant messages seen.
    pub assistant_messages: u32,
    /// Text of the last assistant message that had text.
    pub last_assistant_text: String,
    /// The last verdict found in any assistant text: with `--json-schema`
    /// the CLI asks again when the model answered in prose, so the final
    /// `result` may no longer hold the JSON the model first wrote.
    pub text_verdict: Option<review::Verdict>,
    /// Files named by Edit/Write/MultiEdit/NotebookEdit tool calls.
    pub edited_files: Vec<String>,
    /// The `result` event, when it came.
    pub result: Option<ResultEvent>,
    /// A usage limit read from a `rate_limit_event` (status `rejected`, extra
    /// usage not carrying the call) or the CLI's own limit message (an
    /// assistant message marked `"error":"rate_limit"`).
    pub limit: Option<limit::LimitReading>,
    /// A limit or throttling read from a failed `result` event: its `result`
    /// or `error` text, or its `api_error_status` 429.
    pub result_limit: Option<limit::LimitReading>,
    /// `system/api_retry` events seen.
    pub api_retries: u32,
    /// The last `system/api_retry`: `attempt 4/10, error unknown, status none`.
    pub last_retry: Option<String>,
    /// The HTTP status of the last `system/api_retry` (`error_status`).
    pub last_retry_status: Option<u64>,
}

impl StreamState {
    /// Feeds one stdout line (one JSON event; other lines are ignored).
    pub fn feed(&mut self, line: &str, tz: chrono_tz::Tz) {
        let Ok(ev) = serde_json::from_str::<Value>(line.trim()) else { return };
        let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        match ev.get("type").and_then(Value::as_str) {
            Some("system") => match ev.get("subtype").and_then(Value::as_str) {
                Some("init") => {
                    self.tools = ev.get("tools").and_then(Value::as_array).map(|a| a.iter().filter_map(|t| t.as_str().map(String::from)).collect());
                    self.mcp_servers = ev.get("mcp_servers").and_then(Value::as_array).map(|a| {
                        a.iter().filter_map(|s| s.get("name").and_then(Value::as_str).or_else(|| s.as_str()).map(String::from)).collect()
                    });
                    self.permission_mode = str_of(&ev, "permissionMode");
                    self.model = str_of(&ev, "model");
                    self.version = str_of(&ev, "claude_code_version");
                }
                Some("api_retry") => {
                    self.api_retries += 1;
                    let num = |k: &str| ev.get(k).and_then(Value::as_u64).map_or("?".to_string(), |n| n.to_string());
                    self.last_retry_status = ev.get("error_status").and_then(Value::as_u64);
                    let status = self.last_retry_status.map_or("none".to_string(), |n| n.to_string());
                    self.last_retry = Some(format!("attempt {}/{}, error {}, status {status}", num("attempt"), num("max_retries"), str_of(&ev, "error").unwrap_or_else(|| "?".into())));
                }
                _ => {}
            },
            Some("assistant") => {
                self.assistant_messages += 1;
                let content = ev.pointer("/message/content").and_then(Value::as_array);
                let mut text = String::new();
                for block in content.into_iter().flatten() {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
                        Some("tool_use") => {
                            let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                            let path = block.pointer("/input/file_path").or_else(|| block.pointer("/input/notebook_path")).and_then(Value::as_str);
                            if let (true, Some(p)) = (matches!(name, "Edit" | "Write" | "MultiEdit" | "NotebookEdit"), path)
                                && !self.edited_files.iter().any(|f| f == p)
                            {
                                self.edited_files.push(p.to_string());
                            }
                        }
                        _ => {}
                    }
                }
                if !text.trim().is_empty() {
                    // A synthetic assistant message marked `"error":"rate_limit"`
                    // carries the CLI's own limit text.
                    if self.limit.is_none() {
                        self.limit = limit::read_claude_event(&ev, Utc::now(), tz);
                    }
                    if let Some(v) = review::last_json_verdict(&text) {
                        self.text_verdict = Some(v);
                    }
                    self.last_assistant_text = text;
                }
            }
            Some("rate_limit_event") => {
                if let Some(r) = limit::read_claude_event(&ev, Utc::now(), tz) {
                    self.limit = Some(r);
                }
            }
            Some("result") => {
                self.result_limit = limit::read_claude_event(&ev, Utc::now(), tz);
                self.result = Some(ResultEvent::from_value(&ev));
            }
            _ => {}
        }
    }

    /// The final text: the result's `result`, or the last assistant text
    /// when the result is empty (seen with real transcripts).
    pub fn final_text(&self) -> String {
        let r = self.result.as_ref().map(|r| r.text.as_str()).unwrap_or("");
        if r.trim().is_empty() { self.last_assistant_text.clone() } else { r.to_string() }
    }

    /// Whether the call failed (a failed result, or no result at all).
    pub fn is_error(&self) -> bool {
        self.result.as_ref().is_none_or(ResultEvent::failed)
    }

    /// Token use and cost from the result event (input tokens include cache
    /// reads and cache creation).
    pub fn usage(&self) -> Usage {
        self.result.as_ref().map(|r| r.usage.clone()).unwrap_or_default()
    }

    /// The reviewer's verdict: `structured_output`, else the last JSON
    /// object of the result text, else the last one in an assistant message.
    pub fn verdict(&self) -> Option<review::Verdict> {
        self.result
            .as_ref()
            .and_then(|r| r.structured_output.as_ref())
            .and_then(review::verdict_from_value)
            .or_else(|| review::last_json_verdict(&self.final_text()))
            .or_else(|| self.text_verdict.clone())
    }

    /// The usage limit of a failed call: a `rate_limit_event` or limit message
    /// seen in the stream, else one read from the result event (its `result`
    /// or `error` text) or stderr, else a bare 429/529 status as throttling:
    /// the result's `api_error_status`, or the last `api_retry` of a call that
    /// never finished (with an API key the real CLI retries a 429 ten times,
    /// with growing delays, before it gives up).
    ///
    /// A call that succeeded has no limit, whatever the stream said on the
    /// way (a rejected plan the CLI got past): its round stands. The model's
    /// own prose is never read, not even as the fallback text of a failed
    /// call with an empty result, since it may quote a limit message.
    pub fn limit(&self, stderr_tail: &str, tz: chrono_tz::Tz) -> Option<limit::LimitReading> {
        if !self.is_error() {
            return None;
        }
        if self.limit.is_some() {
            return self.limit.clone();
        }
        let result_text = self.result.as_ref().map_or("", |r| r.text.as_str());
        self.result_limit.clone().or_else(|| limit_in_text(result_text, tz)).or_else(|| limit_in_text(stderr_tail, tz)).or_else(|| {
            let status = match &self.result {
                Some(r) => r.api_error_status,
                None => self.last_retry_status,
            };
            match status {
                Some(429) => Some(limit::read_text("429 Too Many Requests", Utc::now(), tz)),
                Some(529) => Some(limit::read_text("529 Overloaded", Utc::now(), tz)),
                _ => None,
            }
            .filter(|r| r.kind != limit::LimitKind::None)
        })
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
    let limit = st.limit(&outcome.stderr_tail, tz);
    let retries = match &st.last_retry {
        Some(last) => format!(" after {} API retr{} (last: {last})", st.api_retries, if st.api_retries == 1 { "y" } else { "ies" }),
        None => String::new(),
    };
    let failure = if outcome.timed_out {
        Some(format!("timed out after {}s{retries}", call.timeout.as_secs()))
    } else if outcome.cancelled {
        Some("interrupted".into())
    } else {
        match &st.result {
            None => Some(format!("claude ended ({}) without a result event{retries}: {}", super::command::exit_text(&outcome), outcome.stderr_tail.lines().last().unwrap_or(""))),
            Some(r) if r.failed() => Some(format!("claude reported an error ({}){retries}: {}", r.describe(), text.lines().find(|l| !l.trim().is_empty()).unwrap_or(""))),
            Some(_) => None,
        }
    };
    let verdict = match call.role {
        Role::Reviewer => st.verdict(),
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

    fn replay(t: &str, tz: &str) -> StreamState {
        let mut st = StreamState::default();
        for l in t.lines() {
            st.feed(l, tz.parse().unwrap());
        }
        st
    }

    #[test]
    fn real_writer_stream_is_read_whole() {
        let st = replay(include_str!("../../tests/data/transcripts/claude-real-writer-edit.jsonl"), "UTC");
        let tools = st.tools.clone().unwrap();
        assert!(tools.iter().any(|t| t == "Write") && tools.iter().any(|t| t == "Bash"), "{tools:?}");
        assert_eq!(st.mcp_servers.as_deref(), Some(&[][..]));
        assert_eq!(st.permission_mode.as_deref(), Some("acceptEdits"));
        assert_eq!(st.model.as_deref(), Some("claude-opus-5-5"));
        assert_eq!(st.version.as_deref(), Some("2.1.328"));
        assert_eq!(st.assistant_messages, 5);
        assert_eq!(st.edited_files.len(), 2);
        let r = st.result.clone().unwrap();
        assert!(!r.failed());
        assert_eq!((r.num_turns, r.terminal_reason.as_deref(), r.subtype.as_deref()), (Some(4), Some("completed"), Some("success")));
        assert_eq!(st.usage(), Usage { tokens_in: Some(4800), tokens_out: Some(320), cost_usd: Some(0.0256) });
        assert!(st.final_text().starts_with("Added sub to calc.txt."));
        assert!(st.limit.is_none() && st.verdict().is_none());
    }

    #[test]
    fn real_usage_limit_stream_gives_the_event_reset() {
        // The recorded reset (1796055300, "12:15am" in Taipei) moved to two hours from now:
        // the stream is read with the real clock, and once the recorded instant is past a
        // reading of it is stale and rightly not believed (this test broke on the day the
        // recording's reset went by).
        let taipei: chrono_tz::Tz = "Asia/Taipei".parse().unwrap();
        let reset_epoch = (Utc::now().timestamp() / 60 + 127) * 60;
        let local = chrono::DateTime::from_timestamp(reset_epoch, 0).unwrap().with_timezone(&taipei).format("%-I:%M%P").to_string();
        let recorded = include_str!("../../tests/data/transcripts/claude-real-usage-limit.jsonl");
        assert!(recorded.contains("\"resetsAt\":1796055300") && recorded.contains("resets 12:15am (Asia/Taipei)"));
        let shifted = recorded.replace("1796055300", &reset_epoch.to_string()).replace("resets 12:15am", &format!("resets {local}"));
        let st = replay(&shifted, "Asia/Taipei");
        let l = st.limit("", "Asia/Taipei".parse().unwrap()).unwrap();
        assert_eq!(l.kind, limit::LimitKind::UsageLimit);
        let reset = l.resets_at.unwrap();
        assert!(l.source.contains("rate_limit_event"), "{l:?}");
        let r = st.result.clone().unwrap();
        assert!(r.failed());
        assert_eq!(r.describe(), "terminal_reason api_error, api_error_status 429, subtype success, 1 turn");
        // The same instant from the CLI's text alone (minutes precision).
        assert_eq!(reset.timestamp(), reset_epoch, "{l:?}");
        let text = limit_in_text(&st.final_text(), taipei).unwrap();
        assert_eq!(text.resets_at.map(|t| t.timestamp() / 60), Some(reset.timestamp() / 60));
    }

    #[test]
    fn connection_refused_is_a_failure_and_no_limit() {
        let st = replay(include_str!("../../tests/data/transcripts/claude-json-result-connection-refused.json"), "UTC");
        assert!(st.is_error());
        assert_eq!(st.result.as_ref().unwrap().describe(), "terminal_reason api_error, subtype success, 1 turn");
        assert!(st.limit("", chrono_tz::UTC).is_none());
        assert!(st.final_text().starts_with("API Error: Connection refused"));
    }

    #[test]
    fn api_retries_are_counted_and_the_last_kept() {
        let st = replay(include_str!("../../tests/data/transcripts/claude-real-no-server.jsonl"), "UTC");
        assert_eq!(st.api_retries, 4);
        assert_eq!(st.last_retry.as_deref(), Some("attempt 4/10, error unknown, status none"));
        assert!(st.is_error(), "no result event is a failure");
    }

    #[test]
    fn a_call_cut_short_while_retrying_a_429_is_throttling() {
        let tz = chrono_tz::UTC;
        let mut st = StreamState::default();
        st.feed(r#"{"type":"system","subtype":"api_retry","attempt":6,"max_retries":10,"retry_delay_ms":17222,"error_status":429,"error":"rate_limit"}"#, tz);
        assert_eq!(st.limit("", tz).map(|l| l.kind), Some(limit::LimitKind::Transient));
        st.feed(r#"{"type":"system","subtype":"api_retry","attempt":7,"max_retries":10,"retry_delay_ms":17222,"error_status":529,"error":"overloaded"}"#, tz);
        assert_eq!(st.limit("", tz).map(|l| l.kind), Some(limit::LimitKind::Transient));
        // Retries that ended in a good result are nobody's limit.
        st.feed(r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#, tz);
        assert!(st.limit("", tz).is_none());
    }

    #[test]
    fn allowed_rate_limit_event_is_no_limit() {
        let st = replay(include_str!("../../tests/data/transcripts/claude-stream-json-overage-rejected.jsonl"), "UTC");
        assert!(st.limit.is_none());
        assert!(st.limit("", chrono_tz::UTC).is_none());
        assert_eq!(st.final_text(), "\n\nHello.");
    }

    #[test]
    fn failure_is_never_read_from_subtype_alone() {
        let tz = chrono_tz::UTC;
        for (line, failed) in [
            (r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#, false),
            (r#"{"type":"result","subtype":"success","is_error":true,"result":"x"}"#, true),
            (r#"{"type":"result","subtype":"success","is_error":false,"api_error_status":529,"result":"x"}"#, true),
            (r#"{"type":"result","subtype":"error_max_turns","is_error":false,"num_turns":30}"#, true),
            (r#"{"type":"result","subtype":"error_during_execution","is_error":true}"#, true),
        ] {
            let mut st = StreamState::default();
            st.feed(line, tz);
            assert_eq!(st.is_error(), failed, "{line}");
        }
    }

    #[test]
    fn verdict_prefers_structured_output_then_result_then_assistant_text() {
        let tz = chrono_tz::UTC;
        let st = replay(include_str!("../../tests/data/transcripts/claude-real-reviewer-request-changes.jsonl"), "UTC");
        assert_eq!(st.verdict().unwrap().verdict, review::Decision::RequestChanges);
        let mut st = StreamState::default();
        st.feed(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"ok\n{\"verdict\":\"approve\",\"findings\":[]}"}]}}"#, tz);
        st.feed(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]}}"#, tz);
        st.feed(r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#, tz);
        assert_eq!(st.verdict().unwrap().verdict, review::Decision::Approve);
        st.feed(r#"{"type":"result","subtype":"success","is_error":false,"result":"{\"verdict\":\"request_changes\",\"findings\":[\"a\"]}","structured_output":null}"#, tz);
        assert_eq!(st.verdict().unwrap().verdict, review::Decision::RequestChanges);
    }

    #[test]
    fn the_prompt_follows_a_double_dash() {
        let agent = AgentConfig::default();
        let w = argv(&agent, Role::Writer, "-rf looks like a flag");
        assert_eq!(w[w.len() - 2..], ["--".to_string(), "-rf looks like a flag".to_string()]);
        let r = argv(&agent, Role::Reviewer, "p");
        let i = r.iter().position(|a| a == "--json-schema").unwrap();
        assert_eq!(r[i + 1], VERDICT_SCHEMA);
        assert!(serde_json::from_str::<Value>(VERDICT_SCHEMA).is_ok());
        assert_eq!(r[r.len() - 2..], ["--".to_string(), "p".to_string()]);
    }
}
