//! The `claude` agent kind: Claude Code in headless mode (docs/agents.md#claude).
//!
//! Writer: `claude -p --output-format stream-json --verbose` plus the
//! configured permission flags. Reviewer: `--permission-mode plan --tools
//! Read,Grep,Glob --strict-mcp-config --json-schema <verdict schema>`. The
//! prompt is the last argument, after `--`. The stream is parsed line by line
//! as it arrives (never held whole; a line over the runner's cap, a 50 MiB
//! tool output, arrives with its long strings shortened, see
//! `process::Command::json_lines`): the `init` events (tools, MCP servers,
//! permission mode, model, version), assistant messages (one event per
//! content block; subagents' ones marked by `parent_tool_use_id`), tool
//! results (`is_error`), `system/permission_denied`, `rate_limit_event`,
//! `system/api_retry`, and the final `result`. Everything else — partial
//! messages (`stream_event`), hook, status and compaction events, event
//! types and fields of later versions, Node warnings and debug prints on
//! stdout — is ignored and never fails a call ([`super::json_line`]).
//!
//! A failure is read from `is_error`, `api_error_status` and an `error_*`
//! subtype, never from `subtype` alone (a failed call can say `subtype:
//! "success"`), and told in the CLI's own words (`errors`, the `result`
//! text), never the model's. A stream without a `result` is a failed call
//! whatever the exit code, and says why (cut off mid-event, stderr's error
//! line, the last event). Tokens and cost are the CLI's own figures
//! ([`ResultEvent::from_value`]). A CLI that stays alive after its result is
//! ended after [`RESULT_EXIT_GRACE`] of silence and its result stands.
//! Everything here was checked against the real CLI, pinned in
//! `tests/fakes/claude-code.version`, in `tests/agent_claude.rs`.

use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{
    AgentError, Call, EndWatch, Report, Role, Usage, base_command, cut_chars, limit_in_text,
    parse_blocks, telling_stderr_line,
};
use crate::config::AgentConfig;
use crate::limit;
use crate::review;

/// Permission flags of an unattended writer when the config gives none
/// (docs/agents.md): edits are accepted without a prompt (`acceptEdits`) and the
/// listed tools are pre-approved, `Bash` included, which the writer needs to
/// run the project's commands. Checked with the real CLI (2.1.328) running
/// as root, where `--dangerously-skip-permissions` is refused ("cannot be
/// used with root/sudo privileges"): with these flags it edits and writes
/// files and runs Bash (`tests/agent_claude.rs`).
pub const DEFAULT_WRITER_FLAGS: &[&str] = &[
    "--permission-mode",
    "acceptEdits",
    "--allowedTools",
    "Bash,Edit,Write,MultiEdit,Read,Grep,Glob",
];

/// The reviewer's read-only flags: plan mode, exactly three read tools, no
/// MCP servers from the user's or project's config. [`argv`] adds
/// `--json-schema` [`VERDICT_SCHEMA`] after them.
pub const REVIEWER_FLAGS: &[&str] = &[
    "--permission-mode",
    "plan",
    "--tools",
    "Read,Grep,Glob",
    "--strict-mcp-config",
];

/// The JSON Schema of a verdict, passed with `--json-schema` so the real CLI
/// returns the verdict as the result's `structured_output` (docs/loop.md#review).
pub use crate::review::VERDICT_SCHEMA;

/// Tools a reviewer session may list in its init event (checked before a
/// verdict is trusted, docs/agents.md): the three read tools of `--tools`, and
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
/// (`testdata/README.md`), and an `error_during_execution` can say
/// `is_error: false` (anthropics/claude-agent-sdk-typescript#240).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultEvent {
    /// `is_error`.
    pub is_error: bool,
    /// `subtype` (`success`, `error_max_turns`, `error_during_execution`,
    /// `error_max_budget_usd`, `error_max_structured_output_retries`, …).
    pub subtype: Option<String>,
    /// `api_error_status`: the HTTP status of a failed API call (429, 529, …).
    pub api_error_status: Option<u64>,
    /// `terminal_reason` (`completed`, `api_error`, `max_turns`,
    /// `budget_exhausted`, …).
    pub terminal_reason: Option<String>,
    /// `num_turns`.
    pub num_turns: Option<u64>,
    /// `result`: the final text (may be empty although the model answered).
    pub text: String,
    /// `errors`: the CLI's own words for a failed call (`Reached maximum
    /// number of turns (1)`, `Reached maximum budget ($0.02)`); may be empty.
    pub errors: Vec<String>,
    /// `permission_denials[].tool_name`: tool calls the permission settings
    /// refused, in order.
    pub permission_denials: Vec<String>,
    /// `queued_turn_count`: turns the CLI will still run after this result.
    pub queued_turns: u64,
    /// `structured_output`: the `--json-schema` answer, when there is one.
    pub structured_output: Option<Value>,
    /// Tokens and cost, see [`ResultEvent::from_value`].
    pub usage: Usage,
}

impl ResultEvent {
    /// Reads a `{"type":"result",…}` event.
    ///
    /// Tokens: the per-model `modelUsage` summed over models (input counts
    /// `inputTokens`, `cacheReadInputTokens` and `cacheCreationInputTokens`),
    /// when it holds any count: it covers every model the session used and
    /// the real CLI 2.1.328 fills it even where `usage` is all zeros (an
    /// `error_max_budget_usd` result). Else `usage` (`input_tokens` plus
    /// `cache_read_input_tokens` and `cache_creation_input_tokens`). Cost:
    /// `total_cost_usd`, else `cost_usd` (older CLIs), else the models'
    /// `costUSD` summed; unknown when none is given.
    pub fn from_value(r: &Value) -> ResultEvent {
        let n = |p: &str| r.pointer(p).and_then(Value::as_u64);
        let s = |k: &str| r.get(k).and_then(Value::as_str).map(String::from);
        let strings = |k: &str| -> Vec<String> {
            r.get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|e| {
                    e.as_str()
                        .map(String::from)
                        .or_else(|| e.get("message").and_then(Value::as_str).map(String::from))
                })
                .collect()
        };
        ResultEvent {
            is_error: r.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            subtype: s("subtype"),
            api_error_status: n("/api_error_status"),
            terminal_reason: s("terminal_reason"),
            num_turns: n("/num_turns"),
            text: s("result").unwrap_or_default(),
            errors: strings("errors")
                .into_iter()
                .filter(|e| !e.trim().is_empty())
                .collect(),
            permission_denials: r
                .get("permission_denials")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|d| {
                    d.get("tool_name")
                        .and_then(Value::as_str)
                        .unwrap_or("a tool")
                        .to_string()
                })
                .collect(),
            queued_turns: n("/queued_turn_count").unwrap_or(0),
            structured_output: r.get("structured_output").filter(|v| !v.is_null()).cloned(),
            usage: result_usage(r),
        }
    }

    /// The call failed: `is_error`, an API error status, or an `error_*`
    /// subtype (any one of them; `subtype: "success"` proves nothing).
    pub fn failed(&self) -> bool {
        self.is_error
            || self.api_error_status.is_some()
            || self
                .subtype
                .as_deref()
                .is_some_and(|s| s.starts_with("error"))
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

    /// Why the call failed, in the CLI's own words where it gave some: its
    /// `errors`, else the `result` text, else what the subtype means. Never
    /// the model's prose.
    pub fn reason(&self) -> String {
        if !self.errors.is_empty() {
            return cut_chars(&self.errors.join("; "), 400);
        }
        if let Some(line) = self.text.lines().map(str::trim).find(|l| !l.is_empty()) {
            return cut_chars(line, 400);
        }
        match self.subtype.as_deref() {
            Some("error_max_turns") => "it reached its turn limit (--max-turns)".into(),
            Some("error_max_budget_usd") => "it reached its budget (--max-budget-usd)".into(),
            Some("error_max_structured_output_retries") => {
                "it could not give its answer in the required JSON schema".into()
            }
            Some("error_during_execution") => {
                "an error during execution (the CLI gave no detail)".into()
            }
            _ => "the CLI gave no detail".into(),
        }
    }
}

/// Tokens and cost of a result event (see [`ResultEvent::from_value`]).
fn result_usage(r: &Value) -> Usage {
    let models: Vec<&Value> = r
        .get("modelUsage")
        .and_then(Value::as_object)
        .map(|m| m.values().collect())
        .unwrap_or_default();
    let model_sum = |keys: &[&str]| -> Option<u64> {
        let mut total = None;
        for m in &models {
            for k in keys {
                if let Some(v) = m.get(*k).and_then(Value::as_u64) {
                    total = Some(total.unwrap_or(0) + v);
                }
            }
        }
        total
    };
    let from_models = (
        model_sum(&[
            "inputTokens",
            "cacheReadInputTokens",
            "cacheCreationInputTokens",
        ]),
        model_sum(&["outputTokens"]),
    );
    let n = |p: &str| r.pointer(p).and_then(Value::as_u64);
    let (tokens_in, tokens_out) = if from_models.0.unwrap_or(0) + from_models.1.unwrap_or(0) > 0 {
        from_models
    } else {
        let tokens_in = Usage::input_of(
            n("/usage/input_tokens"),
            n("/usage/cache_read_input_tokens"),
            n("/usage/cache_creation_input_tokens"),
        );
        (
            tokens_in.or(from_models.0),
            n("/usage/output_tokens").or(from_models.1),
        )
    };
    let cost = |v: Option<&Value>| {
        v.and_then(Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0)
    };
    let model_cost = models
        .iter()
        .filter_map(|m| cost(m.get("costUSD")))
        .fold(None, |acc: Option<f64>, c| Some(acc.unwrap_or(0.0) + c));
    Usage {
        tokens_in,
        tokens_out,
        cost_usd: cost(r.get("total_cost_usd"))
            .or_else(|| cost(r.get("cost_usd")))
            .or(model_cost),
    }
}

/// What the stream said, accumulated event by event (each stdout line is fed
/// as it arrives; nothing but these fields is kept).
#[derive(Debug, Default, Clone)]
pub struct StreamState {
    /// `init.tools`; with several `init` events, every tool any of them
    /// listed (the read-only check must see them all).
    pub tools: Option<Vec<String>>,
    /// `init.mcp_servers[].name`, likewise from every `init`.
    pub mcp_servers: Option<Vec<String>>,
    /// `init.permissionMode` (the first `init`).
    pub permission_mode: Option<String>,
    /// `init.model` (the first `init`).
    pub model: Option<String>,
    /// `init.claude_code_version` (the first `init`).
    pub version: Option<String>,
    /// Assistant events seen (the CLI prints one per content block).
    pub assistant_messages: u32,
    /// Text of the session's last assistant message that had text: its text
    /// blocks joined (the CLI prints each block as its own event with the
    /// same `message.id`). Subagents' messages (`parent_tool_use_id` set)
    /// are not the session's answer and are not kept.
    pub last_assistant_text: String,
    /// `message.id` of [`StreamState::last_assistant_text`].
    last_text_message: Option<String>,
    /// The last verdict the session's model gave on the way: a JSON verdict
    /// in its text, or the input of its `StructuredOutput` call (`Err` when
    /// that verdict object held no decision, see
    /// [`review::read_verdict_value`]). With `--json-schema` the CLI asks
    /// again when the model answered in prose, so the final `result` may no
    /// longer hold the JSON the model first wrote.
    pub text_verdict: Option<Result<review::Verdict, String>>,
    /// Files named by Edit/Write/MultiEdit/NotebookEdit tool calls (of the
    /// session and its subagents) whose result was not an error: an edit the
    /// tool refused (`<tool_use_error>String to replace not found`) or the
    /// permissions denied changed nothing.
    pub edited_files: Vec<String>,
    /// tool_use id → file of the edits in [`StreamState::edited_files`].
    edit_calls: Vec<(String, String)>,
    /// Tool results marked `is_error` (refused or failed tool calls).
    pub tool_errors: u32,
    /// `system/permission_denied` events and `permission_denials` of the
    /// result: the tools the permission settings refused, without repeats.
    pub denied_tools: Vec<String>,
    /// The `result` event that decides the call, when it came: the last one,
    /// if several, except a spurious error (see
    /// [`StreamState::spurious_errors`]).
    pub result: Option<ResultEvent>,
    /// `result` events seen.
    pub results: u32,
    /// Error results that came after a good result without any work in
    /// between (`num_turns` 0, no assistant message), as CLIs before 2.1.7
    /// printed one when a background task ended ("only prompt commands are
    /// supported in streaming mode", anthropics/claude-code#16768): the CLI's
    /// own bug, not the call's. Their reasons, in order; the good result
    /// stands, and the exit code 1 they cause is no failure.
    pub spurious_errors: Vec<String>,
    /// Assistant events seen when the last result came.
    assistant_at_result: u32,
    /// The largest tokens and cost any result reported, field by field: a
    /// result's figures are the session's running totals
    /// (`model_usage_since_last_result` is the part since the one before),
    /// and a spurious error result reports zeros.
    usage_seen: Usage,
    /// A usage limit read from a `rate_limit_event` (status `rejected`, extra
    /// usage not carrying the call) or the CLI's own limit message (an
    /// assistant message marked `"error":"rate_limit"`).
    pub limit: Option<limit::LimitReading>,
    /// A limit or throttling read from a failed `result` event: its `result`
    /// or `error` text, or its `api_error_status` 429.
    pub result_limit: Option<limit::LimitReading>,
    /// The CLI's last synthetic error message (an assistant event with an
    /// `error` field, e.g. `authentication_failed`): `kind: text`.
    pub cli_error: Option<String>,
    /// `system/api_retry` events seen.
    pub api_retries: u32,
    /// The last `system/api_retry`: `attempt 4/10, error unknown, status none`.
    pub last_retry: Option<String>,
    /// The HTTP status of the last `system/api_retry` (`error_status`).
    pub last_retry_status: Option<u64>,
    /// JSON events read.
    pub events: u32,
    /// `type` (and `subtype`) of the last event, e.g. `user` or
    /// `system/api_retry`.
    pub last_event: Option<String>,
    /// Stdout lines that were not events, and a cut-off last line.
    pub noise: super::StdoutNoise,
}

impl StreamState {
    /// Feeds one stdout line. Lines without a JSON event are counted, never
    /// an error; unknown event types and fields are ignored.
    pub fn feed(&mut self, line: &str, tz: chrono_tz::Tz) {
        for ev in &self.noise.read(line) {
            self.event(ev, tz);
        }
    }

    /// Takes in one stream event: counts it and hands it to the reader of
    /// its `type`.
    fn event(&mut self, ev: &Value, tz: chrono_tz::Tz) {
        let ty = ev.get("type").and_then(Value::as_str);
        let subtype = ev.get("subtype").and_then(Value::as_str);
        self.events += 1;
        self.last_event = Some(match (ty, subtype) {
            (Some(t), Some(st)) => format!("{t}/{st}"),
            (Some(t), None) => t.to_string(),
            (None, _) => "untyped".to_string(),
        });
        match ty {
            Some("system") => match subtype {
                Some("init") => self.system_init(ev),
                Some("api_retry") => self.api_retry(ev),
                Some("permission_denied") => self.deny(
                    ev.get("tool_name")
                        .and_then(Value::as_str)
                        .unwrap_or("a tool"),
                ),
                _ => {}
            },
            Some("assistant") => self.assistant(ev, tz),
            Some("user") => self.tool_results(ev),
            Some("rate_limit_event") => {
                if let Some(r) = limit::read_claude_event(ev, Utc::now(), tz) {
                    self.limit = Some(r);
                }
            }
            Some("result") => self.result_event(ev, tz),
            _ => {}
        }
    }

    /// `system/init`: the tools, MCP servers, permission mode, model and
    /// version the session started with (the first seen of each stands).
    fn system_init(&mut self, ev: &Value) {
        let names = |v: Option<&Value>, key: Option<&str>| -> Option<Vec<String>> {
            v.and_then(Value::as_array).map(|a| {
                a.iter()
                    .filter_map(|t| {
                        key.and_then(|k| t.get(k))
                            .and_then(Value::as_str)
                            .or_else(|| t.as_str())
                            .map(String::from)
                    })
                    .collect()
            })
        };
        merge_names(&mut self.tools, names(ev.get("tools"), None));
        merge_names(
            &mut self.mcp_servers,
            names(ev.get("mcp_servers"), Some("name")),
        );
        self.permission_mode = self
            .permission_mode
            .take()
            .or_else(|| str_of(ev, "permissionMode"));
        self.model = self.model.take().or_else(|| str_of(ev, "model"));
        self.version = self
            .version
            .take()
            .or_else(|| str_of(ev, "claude_code_version"));
    }

    /// `system/api_retry`: counted, and the last one kept as
    /// `attempt 4/10, error unknown, status none` with its HTTP status.
    fn api_retry(&mut self, ev: &Value) {
        self.api_retries += 1;
        let num = |k: &str| {
            ev.get(k)
                .and_then(Value::as_u64)
                .map_or("?".to_string(), |n| n.to_string())
        };
        self.last_retry_status = ev.get("error_status").and_then(Value::as_u64);
        let status = self
            .last_retry_status
            .map_or("none".to_string(), |n| n.to_string());
        self.last_retry = Some(format!(
            "attempt {}/{}, error {}, status {status}",
            num("attempt"),
            num("max_retries"),
            str_of(ev, "error").unwrap_or_else(|| "?".into())
        ));
    }

    /// A `user` event's tool results: a failed or refused edit changed
    /// nothing, so it is forgotten and counted as a tool error.
    fn tool_results(&mut self, ev: &Value) {
        let content = ev.pointer("/message/content").and_then(Value::as_array);
        for block in content
            .into_iter()
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        {
            if block.get("is_error").and_then(Value::as_bool) == Some(true) {
                self.tool_errors += 1;
                if let Some(id) = block.get("tool_use_id").and_then(Value::as_str) {
                    self.forget_edit(id);
                }
            }
        }
    }

    /// A `result` event: the largest usage seen so far is kept; a failed
    /// result without turns right after a good one is a spurious error of
    /// the CLI (the good one stands); else it becomes the result, with its
    /// limit reading and permission denials.
    fn result_event(&mut self, ev: &Value, tz: chrono_tz::Tz) {
        let r = ResultEvent::from_value(ev);
        self.results += 1;
        let max = |a: Option<u64>, b: Option<u64>| a.max(b);
        let u = &mut self.usage_seen;
        (u.tokens_in, u.tokens_out) = (
            max(u.tokens_in, r.usage.tokens_in),
            max(u.tokens_out, r.usage.tokens_out),
        );
        u.cost_usd = match (u.cost_usd, r.usage.cost_usd) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let idle = self.assistant_messages == self.assistant_at_result;
        if r.failed()
            && r.num_turns == Some(0)
            && idle
            && self.result.as_ref().is_some_and(|p| !p.failed())
        {
            self.spurious_errors.push(r.reason());
            return;
        }
        self.assistant_at_result = self.assistant_messages;
        self.result_limit = limit::read_claude_event(ev, Utc::now(), tz);
        for t in &r.permission_denials {
            self.deny(t);
        }
        self.result = Some(r);
    }

    fn assistant(&mut self, ev: &Value, tz: chrono_tz::Tz) {
        self.assistant_messages += 1;
        // A subagent's message (Task tool): its edits count, its words are
        // not the session's answer.
        let own = ev.get("parent_tool_use_id").is_none_or(Value::is_null);
        let content = ev.pointer("/message/content").and_then(Value::as_array);
        let mut text = String::new();
        for block in content.into_iter().flatten() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    text.push_str(block.get("text").and_then(Value::as_str).unwrap_or(""))
                }
                Some("tool_use") => {
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                    let id = block
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    let path = block
                        .pointer("/input/file_path")
                        .or_else(|| block.pointer("/input/notebook_path"))
                        .and_then(Value::as_str);
                    if let (true, Some(p)) = (
                        matches!(name, "Edit" | "Write" | "MultiEdit" | "NotebookEdit"),
                        path,
                    ) {
                        self.edit_calls.push((id, p.to_string()));
                        if !self.edited_files.iter().any(|f| f == p) {
                            self.edited_files.push(p.to_string());
                        }
                    }
                    if own
                        && name == "StructuredOutput"
                        && let Some(v) = block.get("input").and_then(review::read_verdict_value)
                    {
                        self.text_verdict = Some(v);
                    }
                }
                _ => {}
            }
        }
        // The CLI's synthetic messages (`"error": "rate_limit"`,
        // `"authentication_failed"`, …) carry its own words, not the model's.
        let error_kind = ev
            .get("error")
            .or_else(|| ev.pointer("/message/error"))
            .and_then(Value::as_str);
        if let Some(kind) = error_kind
            && !text.trim().is_empty()
        {
            self.cli_error = Some(format!("{kind}: {}", cut_chars(text.trim(), 300)));
        }
        if !own || text.trim().is_empty() {
            return;
        }
        // A synthetic assistant message marked `"error":"rate_limit"`
        // carries the CLI's own limit text.
        if self.limit.is_none() {
            self.limit = limit::read_claude_event(ev, Utc::now(), tz);
        }
        let id = ev
            .pointer("/message/id")
            .and_then(Value::as_str)
            .map(String::from);
        if id.is_some() && id == self.last_text_message {
            // Another text block of the same message.
            self.last_assistant_text.push_str("\n\n");
            self.last_assistant_text.push_str(&text);
        } else {
            self.last_assistant_text = text;
            self.last_text_message = id;
        }
        if let Some(v) = review::read_verdict(&self.last_assistant_text) {
            self.text_verdict = Some(v);
        }
    }

    fn deny(&mut self, tool: &str) {
        if !self.denied_tools.iter().any(|t| t == tool) {
            self.denied_tools.push(tool.to_string());
        }
    }

    /// Drops the edit of tool call `id` from the claimed files, unless
    /// another edit of the same file stands.
    fn forget_edit(&mut self, id: &str) {
        let Some(i) = self.edit_calls.iter().position(|(call, _)| call == id) else {
            return;
        };
        let (_, path) = self.edit_calls.remove(i);
        if !self.edit_calls.iter().any(|(_, p)| *p == path) {
            self.edited_files.retain(|f| *f != path);
        }
    }

    /// The final text: the result's `result`, or the last assistant text
    /// when the result is empty (seen with real transcripts).
    pub fn final_text(&self) -> String {
        let r = self.result.as_ref().map(|r| r.text.as_str()).unwrap_or("");
        if r.trim().is_empty() {
            self.last_assistant_text.clone()
        } else {
            r.to_string()
        }
    }

    /// Whether the call failed (a failed result, or no result at all).
    pub fn is_error(&self) -> bool {
        self.result.as_ref().is_none_or(ResultEvent::failed)
    }

    /// Token use and cost from the result events (see
    /// [`ResultEvent::from_value`]; the largest figures any of them gave,
    /// since each gives the session's running totals); unknown without one.
    pub fn usage(&self) -> Usage {
        self.usage_seen.clone()
    }

    /// The reviewer's verdict: `structured_output`, else the last verdict
    /// object of the result text, else the last one the model gave on the
    /// way (its text or its `StructuredOutput` call). A source that holds a
    /// verdict object decides, readable or not: an unreadable last word is
    /// no verdict, and an earlier one does not stand in for it.
    pub fn verdict(&self) -> Option<review::Verdict> {
        self.verdict_read().and_then(Result::ok)
    }

    /// [`StreamState::verdict`], with why the deciding verdict object held
    /// no decision.
    pub fn verdict_read(&self) -> Option<Result<review::Verdict, String>> {
        self.result
            .as_ref()
            .and_then(|r| r.structured_output.as_ref())
            .and_then(review::read_verdict_value)
            .or_else(|| review::read_verdict(&self.final_text()))
            .or_else(|| self.text_verdict.clone())
    }

    /// Why the call failed, or `None` when it did not: timed out,
    /// interrupted, no result event (the CLI crashed, was killed, or its
    /// last line was cut off), a failed result, or a nonzero exit after a
    /// good result. `ended_after_result` says nightshift ended a CLI that
    /// did not exit after its result (`EndWatch` in `agent`): that is no
    /// failure. docs/loop.md#ship-or-retry: a crashed agent is a failed round, never a
    /// success.
    pub fn failure(
        &self,
        outcome: &crate::process::Outcome,
        timeout: std::time::Duration,
        ended_after_result: bool,
    ) -> Option<String> {
        let retries = match &self.last_retry {
            Some(last) => format!(
                " after {} API retr{} (last: {last})",
                self.api_retries,
                if self.api_retries == 1 { "y" } else { "ies" }
            ),
            None => String::new(),
        };
        if outcome.timed_out {
            return Some(format!("timed out after {}s{retries}", timeout.as_secs()));
        }
        if outcome.cancelled && !ended_after_result {
            return Some(crate::outcome::Outcome::Interrupted.to_string());
        }
        let denied = match self.denied_tools.as_slice() {
            [] => String::new(),
            tools => format!("; its permissions denied {}", tools.join(", ")),
        };
        let exit = super::command::exit_text(outcome);
        match &self.result {
            None => {
                let why = if self.noise.cut_last_line {
                    // Killed while writing, or crashed: stderr says which.
                    match telling_stderr_line(&outcome.stderr_tail) {
                        Some(l) => format!(
                            "its last line was cut off in the middle of an event; stderr: {l}"
                        ),
                        None => "its last line was cut off in the middle of an event".to_string(),
                    }
                } else if let Some(e) = &self.cli_error {
                    e.clone()
                } else if let Some(l) = telling_stderr_line(&outcome.stderr_tail) {
                    l
                } else if let Some(l) = &self.noise.last_other_line {
                    format!("stdout: {l}")
                } else {
                    "(nothing on stderr)".to_string()
                };
                let last = match (&self.last_event, self.events) {
                    (_, 0) => " (no event at all)".to_string(),
                    (Some(e), n) => format!(
                        " ({n} event{}, the last {e})",
                        if n == 1 { "" } else { "s" }
                    ),
                    (None, _) => String::new(),
                };
                Some(format!(
                    "claude ended ({exit}) without a result event{last}{retries}: {why}"
                ))
            }
            Some(r) if r.failed() => Some(format!(
                "claude reported an error ({}){retries}: {}{denied}",
                r.describe(),
                r.reason()
            )),
            // The exit code of a spurious error result after a good one.
            Some(_) if !self.spurious_errors.is_empty() && outcome.exit_code == Some(1) => None,
            Some(_) if !ended_after_result && outcome.exit_code != Some(0) => Some(format!(
                "claude exited ({exit}) after a good result: {}",
                telling_stderr_line(&outcome.stderr_tail)
                    .unwrap_or_else(|| "(nothing on stderr)".into())
            )),
            Some(_) => None,
        }
    }

    /// What a person should know about a call that did not fail: denied
    /// tools, refused tool calls, a CLI that had to be ended after its result.
    pub fn notes(&self, ended_after_result: Option<std::time::Duration>) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.denied_tools.is_empty() {
            notes.push(format!(
                "claude's permissions denied {} (see permission_flags)",
                self.denied_tools.join(", ")
            ));
        }
        if self.tool_errors > 0 {
            notes.push(format!(
                "{} tool call{} returned an error",
                self.tool_errors,
                if self.tool_errors == 1 { "" } else { "s" }
            ));
        }
        if let Some(grace) = ended_after_result {
            notes.push(format!(
                "claude did not exit within {} of its result and was ended",
                crate::duration::format(grace)
            ));
        }
        for e in &self.spurious_errors {
            notes.push(format!("claude reported an error after its result without doing more work (a CLI bug, ignored): {e}"));
        }
        notes
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
        self.result_limit
            .clone()
            .or_else(|| limit_in_text(result_text, tz))
            .or_else(|| limit_in_text(stderr_tail, tz))
            .or_else(|| {
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

/// The string field `k` of the event `v`, if it is one.
fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(String::from)
}

/// Adds the names of one more `init` event to those already seen.
fn merge_names(into: &mut Option<Vec<String>>, more: Option<Vec<String>>) {
    let Some(more) = more else { return };
    let list = into.get_or_insert_with(Vec::new);
    for m in more {
        if !list.contains(&m) {
            list.push(m);
        }
    }
}

/// How long the CLI may stay silent after its `result` before nightshift
/// ends it (it normally exits within a second; anthropics/claude-code#25629
/// saw it hang until killed). Output after the result restarts the wait; a
/// result announcing queued turns does not start it.
pub const RESULT_EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs a `claude` agent call.
///
/// # Errors
/// [`AgentError`] when it cannot be started.
pub async fn run(
    agent: &AgentConfig,
    call: &Call,
    cancel: &CancellationToken,
) -> Result<Report, AgentError> {
    let argv = argv(agent, call.role, &call.prompt);
    let state = Arc::new(Mutex::new(StreamState::default()));
    let sink = state.clone();
    let tz = call.tz;
    let grace = super::exit_grace(&call.env, RESULT_EXIT_GRACE);
    let watch = EndWatch::start(cancel, grace);
    let end = watch.signal();
    let cmd = base_command(&argv, call, &[])
        .json_lines(true)
        .on_stdout_line(Box::new(move |line: &str| {
            let mut st = sink.lock().expect("stream state");
            let results_before = st.results;
            st.feed(line, tz);
            match &st.result {
                Some(r) if st.results > results_before && r.queued_turns == 0 => end.ended(),
                _ if !line.trim().is_empty() => end.activity(),
                _ => {}
            }
        }));
    let outcome = crate::process::run(cmd, watch.token()).await;
    let ended_after_result = watch.finish(cancel);
    let outcome = outcome.map_err(|source| AgentError::Spawn {
        role: call.role.as_str(),
        kind: agent.kind,
        source,
    })?;
    let st = state.lock().expect("stream state").clone();
    let text = st.final_text();
    let limit = st.limit(&outcome.stderr_tail, tz);
    let failure = if outcome.output_capped {
        Some(super::over_output_cap(call))
    } else {
        st.failure(&outcome, call.timeout, ended_after_result)
    };
    let verdict = match call.role {
        Role::Reviewer => st.verdict(),
        Role::Writer => None,
    };
    let edited_files: Vec<String> = st
        .edited_files
        .iter()
        .map(|f| {
            f.strip_prefix(&format!("{}/", call.cwd.display()))
                .unwrap_or(f)
                .to_string()
        })
        .collect();
    let mut claimed_files = parse_blocks(&text).files;
    for rel in &edited_files {
        if !claimed_files.contains(rel) {
            claimed_files.push(rel.clone());
        }
    }
    Ok(Report {
        argv: argv[..argv.len() - 1]
            .iter()
            .cloned()
            .chain(std::iter::once("<prompt>".to_string()))
            .collect(),
        outcome,
        text,
        verdict,
        usage: st.usage(),
        limit,
        failure,
        tools: st.tools.clone(),
        mcp_servers: st.mcp_servers.clone(),
        claimed_files,
        edited_files,
        notes: st.notes(ended_after_result.then_some(grace)),
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
        assert_eq!(
            st.tools.as_deref(),
            Some(&["Read".to_string(), "Grep".into(), "Glob".into()][..])
        );
        assert_eq!(
            st.usage(),
            Usage {
                tokens_in: Some(3),
                tokens_out: Some(6),
                cost_usd: Some(0.024)
            }
        );
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
        let st = replay(
            include_str!("../../tests/data/transcripts/claude-real-writer-edit.jsonl"),
            "UTC",
        );
        let tools = st.tools.clone().unwrap();
        assert!(
            tools.iter().any(|t| t == "Write") && tools.iter().any(|t| t == "Bash"),
            "{tools:?}"
        );
        assert_eq!(st.mcp_servers.as_deref(), Some(&[][..]));
        assert_eq!(st.permission_mode.as_deref(), Some("acceptEdits"));
        assert_eq!(st.model.as_deref(), Some("claude-opus-5-5"));
        assert_eq!(st.version.as_deref(), Some("2.1.328"));
        assert_eq!(st.assistant_messages, 5);
        assert_eq!(st.edited_files.len(), 2);
        let r = st.result.clone().unwrap();
        assert!(!r.failed());
        assert_eq!(
            (
                r.num_turns,
                r.terminal_reason.as_deref(),
                r.subtype.as_deref()
            ),
            (Some(4), Some("completed"), Some("success"))
        );
        assert_eq!(
            st.usage(),
            Usage {
                tokens_in: Some(4800),
                tokens_out: Some(320),
                cost_usd: Some(0.0256)
            }
        );
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
        let local = chrono::DateTime::from_timestamp(reset_epoch, 0)
            .unwrap()
            .with_timezone(&taipei)
            .format("%-I:%M%P")
            .to_string();
        let recorded = include_str!("../../tests/data/transcripts/claude-real-usage-limit.jsonl");
        assert!(
            recorded.contains("\"resetsAt\":1796055300")
                && recorded.contains("resets 12:15am (Asia/Taipei)")
        );
        let shifted = recorded
            .replace("1796055300", &reset_epoch.to_string())
            .replace("resets 12:15am", &format!("resets {local}"));
        let st = replay(&shifted, "Asia/Taipei");
        let l = st.limit("", "Asia/Taipei".parse().unwrap()).unwrap();
        assert_eq!(l.kind, limit::LimitKind::UsageLimit);
        let reset = l.resets_at.unwrap();
        assert!(l.source.contains("rate_limit_event"), "{l:?}");
        let r = st.result.clone().unwrap();
        assert!(r.failed());
        assert_eq!(
            r.describe(),
            "terminal_reason api_error, api_error_status 429, subtype success, 1 turn"
        );
        // The same instant from the CLI's text alone (minutes precision).
        assert_eq!(reset.timestamp(), reset_epoch, "{l:?}");
        let text = limit_in_text(&st.final_text(), taipei).unwrap();
        assert_eq!(
            text.resets_at.map(|t| t.timestamp() / 60),
            Some(reset.timestamp() / 60)
        );
    }

    #[test]
    fn connection_refused_is_a_failure_and_no_limit() {
        let st = replay(
            include_str!("../../tests/data/transcripts/claude-json-result-connection-refused.json"),
            "UTC",
        );
        assert!(st.is_error());
        assert_eq!(
            st.result.as_ref().unwrap().describe(),
            "terminal_reason api_error, subtype success, 1 turn"
        );
        assert!(st.limit("", chrono_tz::UTC).is_none());
        assert!(st.final_text().starts_with("API Error: Connection refused"));
    }

    #[test]
    fn api_retries_are_counted_and_the_last_kept() {
        let st = replay(
            include_str!("../../tests/data/transcripts/claude-real-no-server.jsonl"),
            "UTC",
        );
        assert_eq!(st.api_retries, 4);
        assert_eq!(
            st.last_retry.as_deref(),
            Some("attempt 4/10, error unknown, status none")
        );
        assert!(st.is_error(), "no result event is a failure");
    }

    #[test]
    fn a_call_cut_short_while_retrying_a_429_is_throttling() {
        let tz = chrono_tz::UTC;
        let mut st = StreamState::default();
        st.feed(r#"{"type":"system","subtype":"api_retry","attempt":6,"max_retries":10,"retry_delay_ms":17222,"error_status":429,"error":"rate_limit"}"#, tz);
        assert_eq!(
            st.limit("", tz).map(|l| l.kind),
            Some(limit::LimitKind::Transient)
        );
        st.feed(r#"{"type":"system","subtype":"api_retry","attempt":7,"max_retries":10,"retry_delay_ms":17222,"error_status":529,"error":"overloaded"}"#, tz);
        assert_eq!(
            st.limit("", tz).map(|l| l.kind),
            Some(limit::LimitKind::Transient)
        );
        // Retries that ended in a good result are nobody's limit.
        st.feed(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#,
            tz,
        );
        assert!(st.limit("", tz).is_none());
    }

    #[test]
    fn allowed_rate_limit_event_is_no_limit() {
        let st = replay(
            include_str!("../../tests/data/transcripts/claude-stream-json-overage-rejected.jsonl"),
            "UTC",
        );
        assert!(st.limit.is_none());
        assert!(st.limit("", chrono_tz::UTC).is_none());
        assert_eq!(st.final_text(), "\n\nHello.");
    }

    #[test]
    fn failure_is_never_read_from_subtype_alone() {
        let tz = chrono_tz::UTC;
        for (line, failed) in [
            (
                r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#,
                false,
            ),
            (
                r#"{"type":"result","subtype":"success","is_error":true,"result":"x"}"#,
                true,
            ),
            (
                r#"{"type":"result","subtype":"success","is_error":false,"api_error_status":529,"result":"x"}"#,
                true,
            ),
            (
                r#"{"type":"result","subtype":"error_max_turns","is_error":false,"num_turns":30}"#,
                true,
            ),
            (
                r#"{"type":"result","subtype":"error_during_execution","is_error":true}"#,
                true,
            ),
        ] {
            let mut st = StreamState::default();
            st.feed(line, tz);
            assert_eq!(st.is_error(), failed, "{line}");
        }
    }

    #[test]
    fn verdict_prefers_structured_output_then_result_then_assistant_text() {
        let tz = chrono_tz::UTC;
        let st = replay(
            include_str!("../../tests/data/transcripts/claude-real-reviewer-request-changes.jsonl"),
            "UTC",
        );
        assert_eq!(
            st.verdict().unwrap().verdict,
            review::Decision::RequestChanges
        );
        let mut st = StreamState::default();
        st.feed(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"ok\n{\"verdict\":\"approve\",\"findings\":[]}"}]}}"#, tz);
        st.feed(
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]}}"#,
            tz,
        );
        st.feed(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#,
            tz,
        );
        assert_eq!(st.verdict().unwrap().verdict, review::Decision::Approve);
        st.feed(r#"{"type":"result","subtype":"success","is_error":false,"result":"{\"verdict\":\"request_changes\",\"findings\":[\"a\"]}","structured_output":null}"#, tz);
        assert_eq!(
            st.verdict().unwrap().verdict,
            review::Decision::RequestChanges
        );
    }

    #[test]
    fn an_unreadable_last_verdict_is_none_and_an_earlier_one_does_not_stand_in() {
        let tz = chrono_tz::UTC;
        let mut st = StreamState::default();
        st.feed(r#"{"type":"assistant","message":{"id":"a","content":[{"type":"text","text":"{\"verdict\":\"approve\",\"findings\":[]}"}]}}"#, tz);
        st.feed(r#"{"type":"assistant","message":{"id":"b","content":[{"type":"text","text":"On second look:\n{\"verdict\":\"needs discussion\",\"findings\":[\"x\"]}"}]}}"#, tz);
        st.feed(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#,
            tz,
        );
        assert_eq!(st.verdict(), None);
        assert!(
            st.verdict_read()
                .unwrap()
                .unwrap_err()
                .contains("\"needs discussion\"")
        );
        // The result's own verdict object decides over the way there.
        st.feed(r#"{"type":"result","subtype":"success","is_error":false,"result":"```json\n{\n \"verdict\": \"request_changes\",\n \"findings\": [\"y\"]\n}\n```"}"#, tz);
        assert_eq!(
            st.verdict().map(|v| v.findings),
            Some(vec!["y".to_string()])
        );
    }

    #[test]
    fn a_crash_mid_event_names_the_panic_on_stderr() {
        let mut st = StreamState::default();
        st.feed(
            r#"{"type":"system","subtype":"init","tools":["Read"],"mcp_servers":[]}"#,
            chrono_tz::UTC,
        );
        st.feed(
            r#"{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"Work"#,
            chrono_tz::UTC,
        );
        let stderr = "Bun v1.3.2 (b131639c) Linux x64\n\npanic(main thread): Segmentation fault at address 0x113\noh no: Bun has crashed. This indicates a bug in Bun, not your code.\n";
        assert_eq!(
            st.failure(&outcome(None, Some(6), stderr), MINUTE, false)
                .unwrap(),
            "claude ended (signal 6) without a result event (1 event, the last system/init): its last line was cut off in the middle of an event; stderr: panic(main thread): Segmentation fault at address 0x113"
        );
    }

    fn outcome(
        exit_code: Option<i32>,
        signal: Option<i32>,
        stderr: &str,
    ) -> crate::process::Outcome {
        crate::process::Outcome::fake(exit_code, signal, stderr)
    }

    const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);

    #[test]
    fn model_usage_counts_where_usage_is_zero_and_the_reason_is_the_clis_own() {
        // The real CLI's result at --max-budget-usd (2.1.328 here, and the same
        // shape in a public fixture): `usage` all zeros, the tokens only in
        // `modelUsage`. The model's last words ("Reading.") are no reason.
        let st = replay(
            concat!(
                r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Reading."}]},"parent_tool_use_id":null}"#,
                "\n",
                r#"{"type":"result","subtype":"error_max_budget_usd","is_error":true,"terminal_reason":"budget_exhausted","total_cost_usd":0.0779,"errors":["Reached maximum budget ($0.02)"],"usage":{"input_tokens":0,"output_tokens":0,"iterations":[]},"modelUsage":{"claude-opus-5[1m]":{"inputTokens":2,"outputTokens":964,"cacheReadInputTokens":18774,"cacheCreationInputTokens":4380}},"num_turns":1}"#,
            ),
            "UTC",
        );
        assert_eq!(
            st.usage(),
            Usage {
                tokens_in: Some(2 + 18774 + 4380),
                tokens_out: Some(964),
                cost_usd: Some(0.0779)
            }
        );
        let f = st
            .failure(&outcome(Some(1), None, ""), MINUTE, false)
            .unwrap();
        assert_eq!(
            f,
            "claude reported an error (terminal_reason budget_exhausted, subtype error_max_budget_usd, 1 turn): Reached maximum budget ($0.02)"
        );
    }

    #[test]
    fn cache_tokens_are_input_and_cost_falls_back_to_older_fields() {
        // anthropics/claude-code-action#366: a real result of an older CLI,
        // `error_during_execution` with `is_error: false`, cache-heavy usage.
        let st = replay(
            r#"{"type":"result","subtype":"error_during_execution","duration_ms":185041,"duration_api_ms":184154,"is_error":false,"num_turns":0,"session_id":"x","total_cost_usd":0.6571631500000001,"usage":{"input_tokens":112,"cache_creation_input_tokens":58211,"cache_read_input_tokens":1120129,"output_tokens":6814,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"}}"#,
            "UTC",
        );
        assert!(st.is_error());
        assert_eq!(
            st.usage(),
            Usage {
                tokens_in: Some(112 + 58211 + 1120129),
                tokens_out: Some(6814),
                cost_usd: Some(0.6571631500000001)
            }
        );
        assert!(st.failure(&outcome(Some(0), None, ""), MINUTE, false).unwrap().ends_with("(subtype error_during_execution, 0 turns): an error during execution (the CLI gave no detail)"));
        // Older CLIs named the cost `cost_usd`; without either, the models' costs add up.
        let r = |line: &str| replay(line, "UTC").usage();
        assert_eq!(r(r#"{"type":"result","subtype":"success","is_error":false,"cost_usd":0.25,"usage":{"input_tokens":5,"output_tokens":1}}"#).cost_usd, Some(0.25));
        let two = r(
            r#"{"type":"result","subtype":"success","is_error":false,"modelUsage":{"claude-sonnet":{"inputTokens":48000,"outputTokens":1800,"cacheReadInputTokens":2800,"cacheCreationInputTokens":400,"costUSD":0.11},"claude-haiku":{"inputTokens":2000,"outputTokens":200,"costUSD":0.0134}}}"#,
        );
        assert_eq!(
            (two.tokens_in, two.tokens_out),
            (Some(48000 + 2800 + 400 + 2000), Some(2000))
        );
        assert!((two.cost_usd.unwrap() - 0.1234).abs() < 1e-12);
        // A result that reports nothing has unknown usage, not zero cost.
        assert_eq!(
            r(r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#),
            Usage::default()
        );
        // anthropics/claude-agent-sdk-typescript#240 (wifi gone): all zeros, empty errors.
        let st = replay(
            r#"{"type":"result","subtype":"error_during_execution","duration_ms":103509,"is_error":false,"num_turns":1,"stop_reason":null,"total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0},"modelUsage":{},"permission_denials":[],"errors":[]}"#,
            "UTC",
        );
        assert_eq!(
            st.usage(),
            Usage {
                tokens_in: Some(0),
                tokens_out: Some(0),
                cost_usd: Some(0.0)
            }
        );
        assert!(
            st.failure(&outcome(Some(1), None, ""), MINUTE, false)
                .unwrap()
                .contains("an error during execution")
        );
    }

    #[test]
    fn noise_around_and_between_events_is_not_an_event_and_breaks_nothing() {
        let tz = chrono_tz::UTC;
        let mut st = StreamState::default();
        for l in [
            "(node:4242) Warning: Setting the NODE_TLS_REJECT_UNAUTHORIZED environment variable to '0' makes TLS connections insecure.",
            "(Use `node --trace-warnings ...` to show where the warning was created)",
            "",
            "\u{feff}{\"type\":\"system\",\"subtype\":\"init\",\"tools\":[\"Read\",\"Grep\",\"Glob\"],\"mcp_servers\":[],\"permissionMode\":\"plan\",\"model\":\"m\",\"claude_code_version\":\"2.1.328\",\"brand_new_field\":{\"x\":[1,2]}}\r",
            "[DEBUG] hooks: {matcher} loaded",
            "\u{1b}[2K\u{1b}[1G{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"}]},\"parent_tool_use_id\":null}",
            "{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"content\":[{\"type\":\"text\",\"text\":\"Part one.\"}]}}{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"content\":[{\"type\":\"text\",\"text\":\"Part two.\"}]}}",
            "{\"type\":\"stream_event\",\"event\":{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Pa\"}},\"parent_tool_use_id\":null}",
            "{\"type\":\"system\",\"subtype\":\"compact_boundary\",\"compact_metadata\":{\"trigger\":\"auto\",\"pre_tokens\":155000}}",
            "{\"type\":\"system\",\"subtype\":\"hook_response\",\"hook_name\":\"SessionStart:Callback\",\"hook_event\":\"SessionStart\",\"stdout\":\"\",\"stderr\":\"\",\"exit_code\":1}",
            "{\"type\":\"system\",\"subtype\":\"status\",\"status\":\"compacting\"}",
            "{\"type\":\"tool_progress\",\"tool_use_id\":\"t\",\"elapsed_time_seconds\":3}",
            "{\"type\":42}",
            "[1, 2, 3]",
            "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":1,\"result\":\"\",\"total_cost_usd\":0.5,\"usage\":{\"input_tokens\":10,\"output_tokens\":5},\"something_new\":true}\r",
            "Debugger listening on ws://127.0.0.1:9229/x",
        ] {
            st.feed(l, tz);
        }
        assert_eq!(
            st.tools.as_deref(),
            Some(&["Read".to_string(), "Grep".into(), "Glob".into()][..])
        );
        assert_eq!(st.version.as_deref(), Some("2.1.328"));
        assert!(!st.is_error());
        assert_eq!(
            st.final_text(),
            "Part one.\n\nPart two.",
            "text blocks of one message are one answer; thinking is not text"
        );
        assert_eq!(st.usage().cost_usd, Some(0.5));
        assert_eq!(st.noise.other_lines, 5);
        assert!(!st.noise.cut_last_line);
        assert_eq!(st.failure(&outcome(Some(0), None, ""), MINUTE, false), None);
    }

    #[test]
    fn a_stream_without_its_result_is_a_failure_that_says_why() {
        let tz = chrono_tz::UTC;
        let init =
            r#"{"type":"system","subtype":"init","tools":["Bash"],"mcp_servers":[],"model":"m"}"#;
        let tool = r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cargo test"}}]},"parent_tool_use_id":null}"#;
        // Killed while writing its result: the last line is cut off.
        let mut st = StreamState::default();
        for l in [
            init,
            tool,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"All done, the tests pa"#,
        ] {
            st.feed(l, tz);
        }
        assert!(st.noise.cut_last_line && st.result.is_none() && st.is_error());
        let f = st
            .failure(&outcome(None, Some(9), ""), MINUTE, false)
            .unwrap();
        assert_eq!(
            f,
            "claude ended (signal 9) without a result event (2 events, the last assistant): its last line was cut off in the middle of an event"
        );
        // Exit 0 and no result: never a success. stderr's error line is the reason.
        let mut st = StreamState::default();
        for l in [init, tool] {
            st.feed(l, tz);
        }
        let stderr = "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)\nError: ENOSPC: no space left on device, write\n    at writeSync (node:fs:927:3)\n";
        assert_eq!(
            st.failure(&outcome(Some(0), None, stderr), MINUTE, false)
                .unwrap(),
            "claude ended (code 0) without a result event (2 events, the last assistant): Error: ENOSPC: no space left on device, write"
        );
        // Nothing but prose on stdout (a wrapper, a wrong binary).
        let mut st = StreamState::default();
        st.feed("Usage: claude [options] [command] [prompt]", tz);
        assert_eq!(
            st.failure(&outcome(Some(1), None, ""), MINUTE, false)
                .unwrap(),
            "claude ended (code 1) without a result event (no event at all): stdout: Usage: claude [options] [command] [prompt]"
        );
        // The CLI's own error message (a synthetic assistant message) names it.
        let mut st = StreamState::default();
        st.feed(r#"{"type":"assistant","message":{"id":"x","model":"<synthetic>","content":[{"type":"text","text":"Invalid API key · Please run /login"}]},"parent_tool_use_id":null,"error":"authentication_failed"}"#, tz);
        assert!(
            st.failure(&outcome(Some(1), None, ""), MINUTE, false)
                .unwrap()
                .ends_with(": authentication_failed: Invalid API key · Please run /login")
        );
    }

    #[test]
    fn a_good_result_then_a_bad_exit_is_a_failure_unless_nightshift_ended_it() {
        let st = replay(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#,
            "UTC",
        );
        assert_eq!(st.failure(&outcome(Some(0), None, ""), MINUTE, false), None);
        assert_eq!(
            st.failure(
                &outcome(Some(1), None, "Error: MCP server \"x\" failed to close\n"),
                MINUTE,
                false
            )
            .unwrap(),
            "claude exited (code 1) after a good result: Error: MCP server \"x\" failed to close"
        );
        // Ended by the watch after a result it did not exit after: the result stands.
        let mut o = outcome(None, Some(15), "");
        o.cancelled = true;
        assert_eq!(st.failure(&o, MINUTE, true), None);
        assert_eq!(
            st.notes(Some(RESULT_EXIT_GRACE)),
            vec![format!(
                "claude did not exit within {}s of its result and was ended",
                RESULT_EXIT_GRACE.as_secs()
            )]
        );
        // A cancellation from outside is an interruption, result or not.
        assert_eq!(
            st.failure(&o, MINUTE, false).as_deref(),
            Some(crate::outcome::Outcome::Interrupted.as_str())
        );
    }

    #[test]
    fn refused_and_failed_edits_are_not_claimed_and_denials_are_told() {
        // Recorded from the real CLI 2.1.328 (`--permission-mode default
        // --allowedTools Read,Edit`): a failed Edit (`<tool_use_error>`), a
        // Bash and a Write the permissions denied, and a good result.
        let st = replay(
            include_str!("../../tests/fakes/transcripts/claude-real-denied.jsonl"),
            "UTC",
        );
        assert!(!st.is_error());
        assert!(st.edited_files.is_empty(), "{:?}", st.edited_files);
        assert_eq!(st.denied_tools, ["Bash", "Write"]);
        assert_eq!(st.tool_errors, 3);
        assert_eq!(st.failure(&outcome(Some(0), None, ""), MINUTE, false), None);
        assert_eq!(
            st.notes(None),
            [
                "claude's permissions denied Bash, Write (see permission_flags)",
                "3 tool calls returned an error"
            ]
        );
        assert_eq!(
            st.usage(),
            Usage {
                tokens_in: Some(6000),
                tokens_out: Some(400),
                cost_usd: Some(0.032)
            }
        );
        // An edit that stands keeps its file even when another edit of it failed.
        let st = replay(
            concat!(
                r#"{"type":"assistant","message":{"id":"a","content":[{"type":"tool_use","id":"t1","name":"Edit","input":{"file_path":"/w/a.rs","old_string":"x","new_string":"y"}}]}}"#,
                "\n",
                r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"<tool_use_error>String to replace not found in file.</tool_use_error>"}]}}"#,
                "\n",
                r#"{"type":"assistant","message":{"id":"b","content":[{"type":"tool_use","id":"t2","name":"Write","input":{"file_path":"/w/a.rs","content":"y"}},{"type":"tool_use","id":"t3","name":"MultiEdit","input":{"file_path":"/w/b.rs","edits":[]}}]}}"#,
                "\n",
                r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"File created successfully at: /w/a.rs"}]}}"#,
            ),
            "UTC",
        );
        assert_eq!(st.edited_files, ["/w/a.rs", "/w/b.rs"]);
    }

    #[test]
    fn the_clis_real_max_turns_stream_with_partial_messages_is_read() {
        // Recorded from the real CLI 2.1.328 with `--max-turns 1
        // --include-partial-messages`: stream_event lines, a system/status
        // event, and an `error_max_turns` result whose `errors` say why.
        let st = replay(
            include_str!("../../tests/fakes/transcripts/claude-real-max-turns-partial.jsonl"),
            "UTC",
        );
        let r = st.result.clone().unwrap();
        assert!(r.failed());
        assert_eq!(r.errors, ["Reached maximum number of turns (1)"]);
        assert_eq!(
            st.usage(),
            Usage {
                tokens_in: Some(1200),
                tokens_out: Some(80),
                cost_usd: Some(0.0063999999999999994)
            }
        );
        assert_eq!(st.edited_files, Vec::<String>::new());
        assert_eq!(st.noise.other_lines, 0);
        assert_eq!(
            st.failure(&outcome(Some(1), None, ""), MINUTE, false)
                .unwrap(),
            "claude reported an error (terminal_reason max_turns, subtype error_max_turns, 2 turns): Reached maximum number of turns (1)"
        );
    }

    #[test]
    fn subagents_edit_but_do_not_answer_and_every_init_is_checked() {
        let st = replay(
            concat!(
                r#"{"type":"system","subtype":"init","tools":["Read","Grep","Glob"],"mcp_servers":[]}"#,
                "\n",
                r#"{"type":"assistant","message":{"id":"a","content":[{"type":"text","text":"Looks fine.\n{\"verdict\":\"approve\",\"findings\":[]}"}]},"parent_tool_use_id":null}"#,
                "\n",
                r#"{"type":"assistant","message":{"id":"s1","content":[{"type":"text","text":"{\"verdict\":\"request_changes\",\"findings\":[\"sub\"]}"},{"type":"tool_use","id":"t9","name":"Write","input":{"file_path":"/w/x.md","content":"x"}}]},"parent_tool_use_id":"toolu_task1"}"#,
                "\n",
                r#"{"type":"system","subtype":"init","tools":["Read","Write"],"mcp_servers":[{"name":"github","status":"connected"}]}"#,
                "\n",
                r#"{"type":"result","subtype":"success","is_error":false,"result":""}"#,
            ),
            "UTC",
        );
        assert_eq!(
            st.final_text(),
            "Looks fine.\n{\"verdict\":\"approve\",\"findings\":[]}"
        );
        assert_eq!(st.verdict().unwrap().verdict, review::Decision::Approve);
        assert_eq!(st.edited_files, ["/w/x.md"]);
        assert_eq!(
            st.tools.as_deref(),
            Some(
                &[
                    "Read".to_string(),
                    "Grep".into(),
                    "Glob".into(),
                    "Write".into()
                ][..]
            )
        );
        assert_eq!(st.mcp_servers.as_deref(), Some(&["github".to_string()][..]));
    }

    #[test]
    fn a_structured_output_call_is_a_verdict_when_the_result_lost_it() {
        let st = replay(
            concat!(
                r#"{"type":"assistant","message":{"id":"a","content":[{"type":"tool_use","id":"t1","name":"StructuredOutput","input":{"verdict":"request_changes","findings":["add mul"],"conditions":[]}}]},"parent_tool_use_id":null}"#,
                "\n",
                r#"{"type":"result","subtype":"success","is_error":false,"result":"Done.","structured_output":null}"#,
            ),
            "UTC",
        );
        let v = st.verdict().unwrap();
        assert_eq!(
            (v.verdict, v.findings),
            (
                review::Decision::RequestChanges,
                vec!["add mul".to_string()]
            )
        );
    }

    #[test]
    fn a_result_with_queued_turns_is_not_the_end() {
        let st = replay(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"first","queued_turn_count":1}"#,
            "UTC",
        );
        assert_eq!(st.result.as_ref().map(|r| r.queued_turns), Some(1));
        let st = replay(
            concat!(
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":""}"#,
                "\n",
                r#"{"type":"result","subtype":"success","is_error":false,"result":"second","total_cost_usd":0.2}"#
            ),
            "UTC",
        );
        assert_eq!(
            (st.results, st.final_text().as_str(), st.is_error()),
            (2, "second", false)
        );
    }

    #[test]
    fn a_spurious_error_result_after_a_good_one_does_not_undo_it() {
        // anthropics/claude-code#16768 (before 2.1.7): after its result, a
        // background task's notification made the CLI print a second result,
        // an error with no turns and zero cost, and exit 1.
        let st = replay(
            concat!(
                r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Added sub."}]},"parent_tool_use_id":null}"#,
                "\n",
                r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":8127,"num_turns":72,"result":"Added sub.","total_cost_usd":2.1,"usage":{"input_tokens":900,"output_tokens":40}}"#,
                "\n",
                r#"{"type":"result","subtype":"error_during_execution","duration_ms":0,"duration_api_ms":0,"is_error":true,"num_turns":0,"total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},"errors":["only prompt commands are supported in streaming mode"]}"#,
            ),
            "UTC",
        );
        assert!(!st.is_error());
        assert_eq!(st.final_text(), "Added sub.");
        assert_eq!(
            st.usage(),
            Usage {
                tokens_in: Some(900),
                tokens_out: Some(40),
                cost_usd: Some(2.1)
            }
        );
        assert_eq!(st.failure(&outcome(Some(1), None, ""), MINUTE, false), None);
        assert_eq!(
            st.notes(None),
            [
                "claude reported an error after its result without doing more work (a CLI bug, ignored): only prompt commands are supported in streaming mode"
            ]
        );
        // An error after more work, or after a failed result, decides.
        let st = replay(
            concat!(
                r#"{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"first"}"#,
                "\n",
                r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"More."}]},"parent_tool_use_id":null}"#,
                "\n",
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"errors":["boom"]}"#,
            ),
            "UTC",
        );
        assert!(st.is_error());
        assert!(
            st.failure(&outcome(Some(1), None, ""), MINUTE, false)
                .unwrap()
                .ends_with(": boom")
        );
    }

    #[test]
    fn the_prompt_follows_a_double_dash() {
        let agent = AgentConfig::default();
        let w = argv(&agent, Role::Writer, "-rf looks like a flag");
        assert_eq!(
            w[w.len() - 2..],
            ["--".to_string(), "-rf looks like a flag".to_string()]
        );
        let r = argv(&agent, Role::Reviewer, "p");
        let i = r.iter().position(|a| a == "--json-schema").unwrap();
        assert_eq!(r[i + 1], VERDICT_SCHEMA);
        assert!(serde_json::from_str::<Value>(VERDICT_SCHEMA).is_ok());
        assert_eq!(r[r.len() - 2..], ["--".to_string(), "p".to_string()]);
    }
}
