//! Reading Claude Code's `stream-json` output: the events of a call (init,
//! assistant, tool results, rate-limit and retry events, the final `result`)
//! folded into a [`StreamState`], and a [`ResultEvent`]'s tokens and cost.
//!
//! Not for starting the CLI or its flags: the module root does that.

use serde_json::Value;

use crate::agent::model::Usage;
use crate::agent::stream::{limit_in_text, telling_stderr_line};
use crate::review::cut_chars;
use crate::{limit, review};

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
    /// A usage limit read from the latest `rate_limit_event` (status
    /// `rejected`, extra usage not carrying the call; a later `allowed` one
    /// clears it) or the CLI's own limit message (an assistant message marked
    /// `"error":"rate_limit"`).
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
    pub noise: crate::agent::stream::StdoutNoise,
    /// The latest quota gauge of each window read from `rate_limit_event`s
    /// (docs/limits.md#gauges).
    pub gauges: Vec<limit::Gauge>,
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
            // The latest event is the account's state: a `rejected` one
            // followed by `allowed` (the window reset, or extra usage took
            // over) is no limit any more.
            Some("rate_limit_event") => {
                self.limit = limit::read_claude_event(ev, crate::schedule::server_now(), tz);
                limit::gauge::merge(&mut self.gauges, limit::gauge::claude_gauges(ev));
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
        self.result_limit = limit::read_claude_event(ev, crate::schedule::server_now(), tz);
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
            self.limit = limit::read_claude_event(ev, crate::schedule::server_now(), tz);
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
            return Some(crate::agent::base::CANCELLED.to_string());
        }
        let denied = match self.denied_tools.as_slice() {
            [] => String::new(),
            tools => format!("; its permissions denied {}", tools.join(", ")),
        };
        let exit = crate::agent::command::exit_text(outcome);
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
                    Some(429) => Some(limit::read_text(
                        "429 Too Many Requests",
                        crate::schedule::server_now(),
                        tz,
                    )),
                    Some(529) => Some(limit::read_text(
                        "529 Overloaded",
                        crate::schedule::server_now(),
                        tz,
                    )),
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
