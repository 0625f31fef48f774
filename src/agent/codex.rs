//! The `codex` agent kind: `codex exec --json` (docs/agents.md#codex).
//!
//! Writer: `--sandbox workspace-write`; reviewer: `--sandbox read-only` plus
//! `--output-schema` so its final `agent_message` is the verdict object. The
//! prompt goes on stdin (`-`), not in argv: Linux caps one argument at
//! 128 KiB and reviewer findings fed back into a prompt are unbounded. The
//! configured `command` may carry extra arguments before the subcommand
//! (`["codex", "-c", "model_provider=…"]`: codex reads `-c` both before and
//! after `exec`), and may name `exec` itself; it may not carry the flags
//! nightshift sets or a sandbox override ([`conflicting_argument`], checked
//! with the config). codex's workspace-write sandbox has no network: a
//! project whose gate commands need it can add
//! `"-c", "sandbox_workspace_write.network_access=true"` to `command`.
//!
//! The JSON event stream (`thread.started`, `turn.started`, `item.started` /
//! `item.updated` / `item.completed`, `turn.completed` with token usage,
//! `turn.failed`, `error`) is parsed line by line as it arrives
//! ([`StreamState`]; a line over the runner's cap, a command's 50 MiB
//! output, arrives with its long strings shortened, see
//! `process::Command::json_lines`), as are the older shapes codex printed
//! before 0.44;
//! unknown events, items and fields and non-JSON lines are ignored. The
//! final message is the last agent message, else the last plan. Codex
//! reports tokens (its running total for the thread) but no cost. A codex
//! that stays alive after its turn ended is ended after [`TURN_EXIT_GRACE`]
//! of silence and its turn stands. Limit messages arrive as `error` /
//! `turn.failed` events (its own "You’ve hit your usage limit … try again at
//! 10:18 PM" text, local time of its `TZ`) and as raw 429 bodies with
//! `resets_at` on stderr; both are read, the strongest reading wins. While
//! offline codex prints `error` events "Reconnecting… n/5" or "Reconnecting...
//! waiting for network" and keeps waiting: those are a failed call, never a
//! limit, and the per-call timeout ends the wait.
//! Behaviour checked against the real `@openai/codex` 0.169.0.

use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{AgentError, Call, Report, Role, Usage, base_command, parse_blocks};
use crate::config::AgentConfig;
use crate::limit::{self, LimitKind, LimitReading};
use crate::review;

/// The JSON schema the reviewer's final message must follow (passed with
/// `--output-schema`; OpenAI's strict mode wants every property required and
/// no additional ones). Same shape as the `command` protocol's verdict line.
pub use crate::review::VERDICT_SCHEMA;

/// The argv for one call. The prompt is not in it: it is read from stdin
/// (the final `-`).
///
/// `command` is the configured argv; arguments in it stay before `exec`
/// (global options such as `-c key=value`) unless it already names the
/// `exec` subcommand, in which case nightshift's flags follow it.
/// `schema` is the verdict schema file for a reviewer.
pub fn argv(agent: &AgentConfig, role: Role, schema: Option<&Path>) -> Vec<String> {
    let mut v: Vec<String> = agent.command.clone();
    if !names_exec(&agent.command) {
        v.push("exec".into());
    }
    v.push("--json".into());
    let sandbox = match role {
        Role::Writer => "workspace-write",
        Role::Reviewer => "read-only",
    };
    v.extend(["--sandbox".to_string(), sandbox.to_string()]);
    // nightshift made the checkout; codex's "trusted directory" check would
    // only refuse a slot owned by another user (`agent_user`).
    v.push("--skip-git-repo-check".into());
    if let Some(m) = &agent.model {
        v.extend(["--model".to_string(), m.clone()]);
    }
    if let Some(s) = schema {
        v.extend(["--output-schema".to_string(), s.display().to_string()]);
    }
    v.push("-".into());
    v
}

/// The first argument of a configured codex `command` that would fight the
/// flags nightshift sets itself (`--json`, the sandbox, the reviewer's output
/// schema) or lift the sandbox (`--dangerously-bypass-approvals-and-sandbox`,
/// a `-c sandbox_mode=…` override), if any. Loading the config for a command
/// (`crate::settings::checked_load`) rejects such a command (docs/agents.md#read-only-reviewer: the reviewer is read-only by construction).
pub fn conflicting_argument(command: &[String]) -> Option<String> {
    const OWNED: &[&str] = &[
        "--json",
        "--sandbox",
        "-s",
        "--output-schema",
        "--dangerously-bypass-approvals-and-sandbox",
        "--yolo",
        "--full-auto",
    ];
    let mut config_value = false;
    for a in command.iter().skip(1) {
        if config_value {
            config_value = false;
            if a.trim_start().starts_with("sandbox_mode") {
                return Some(a.clone());
            }
            continue;
        }
        if a == "-c" || a == "--config" {
            config_value = true;
            continue;
        }
        let name = a.split('=').next().unwrap_or(a);
        if OWNED.contains(&name) || (a.starts_with("-s") && !a.starts_with("--") && a.len() > 2) {
            return Some(a.clone());
        }
    }
    None
}

/// Whether the configured argv already holds the `exec` subcommand: an
/// `exec` argument that is not the value of a preceding option.
fn names_exec(command: &[String]) -> bool {
    // Root options of codex that take a separate value.
    const TAKES_VALUE: &[&str] = &[
        "-c",
        "--config",
        "-p",
        "--profile",
        "-m",
        "--model",
        "-s",
        "--sandbox",
        "-C",
        "--cd",
        "-a",
        "--ask-for-approval",
        "--enable",
        "--disable",
        "-i",
        "--image",
        "--local-provider",
        "--add-dir",
    ];
    let mut skip = false;
    for a in command.iter().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        if a == "exec" || a == "e" {
            return true;
        }
        skip = TAKES_VALUE.contains(&a.as_str());
    }
    false
}

/// What the event stream said, fed one stdout line at a time.
///
/// Three generations of `codex exec --json` are read: the current events
/// (`thread.started`, `turn.*`, `item.*` with the item's kind in `type`);
/// the short-lived experimental shape of late September 2025
/// (`session.created`, the kind in `item_type`, `assistant_message`;
/// openai/codex#4250, #4525); and the legacy shape before it, one
/// `{"id":…,"msg":{"type":…}}` per core event (`agent_message`,
/// `task_complete`, `token_count`, `exec_command_end`, `patch_apply_*`,
/// `error`), preceded by a config summary object.
#[derive(Debug, Default, Clone)]
pub struct StreamState {
    /// `thread.started.thread_id` (the session `codex resume` knows).
    pub thread_id: Option<String>,
    /// `turn.started` events seen.
    pub turns_started: u32,
    /// `turn.completed` events seen.
    pub turns_completed: u32,
    /// Text of the last completed `agent_message` item.
    pub last_message: String,
    /// Text of the last completed `plan` item: codex's own final message
    /// when a turn ends with a plan and no agent message.
    pub last_plan: String,
    /// Token use of the thread so far: `turn.completed.usage` is codex's
    /// running total for the thread, so the last one counts (replaced, never
    /// summed). `input_tokens` already include the cached ones, as OpenAI
    /// counts them.
    pub usage: Usage,
    /// `turn.completed.usage.cached_input_tokens` (part of the input).
    pub cached_input_tokens: Option<u64>,
    /// `turn.completed.usage.reasoning_output_tokens` (part of the output).
    pub reasoning_output_tokens: Option<u64>,
    /// The `turn.failed` message, if the last turn failed.
    pub turn_failed: Option<String>,
    /// The last top-level `error` event's message (a retry notice or the
    /// final error).
    pub last_error: Option<String>,
    /// "Reconnecting…" `error` events seen (codex retrying, e.g. offline).
    pub reconnects: u32,
    /// Messages of `error` items (codex's non-fatal warnings, such as a
    /// model without metadata).
    pub warnings: Vec<String>,
    /// Completed `command_execution` items: (command, exit code).
    pub commands: Vec<(String, Option<i64>)>,
    /// Commands that failed to run or were declined (`status` `failed` or
    /// `declined`, or a nonzero exit code).
    pub failed_commands: u32,
    /// Paths named by completed `file_change` items (absolute, as codex
    /// prints them), in order, without repeats.
    pub changed_files: Vec<String>,
    /// The strongest usage-limit reading taken from an event.
    pub limit: Option<LimitReading>,
    /// JSON events read.
    pub events: u32,
    /// Stdout lines that were not events, and a cut-off last line.
    pub noise: super::StdoutNoise,
    /// Legacy `patch_apply_begin` events waiting for their end: call id →
    /// paths.
    pending_patches: Vec<(String, Vec<String>)>,
    /// Legacy `exec_command_begin` events waiting for their end: call id →
    /// command.
    pending_commands: Vec<(String, String)>,
}

impl StreamState {
    /// Feeds one stdout line; `tz` is the agent's `TZ` (codex prints reset
    /// times in it without a zone). Lines without a JSON event are counted,
    /// never an error; unknown events, items and fields are ignored.
    pub fn feed(&mut self, line: &str, tz: chrono_tz::Tz) {
        for ev in &self.noise.read(line) {
            self.event(ev, tz);
        }
    }

    fn event(&mut self, ev: &Value, tz: chrono_tz::Tz) {
        self.events += 1;
        if let Some(msg) = ev.get("msg").filter(|m| m.get("type").is_some()) {
            return self.legacy(msg, tz);
        }
        if let Some(r) = limit::read_codex_event(ev, Utc::now(), tz) {
            self.limit = Some(stronger(self.limit.take(), r));
        }
        let s = |p: &str| ev.pointer(p).and_then(Value::as_str).map(str::to_string);
        match ev.get("type").and_then(Value::as_str) {
            Some("thread.started") => self.thread_id = s("/thread_id"),
            Some("session.created") => self.thread_id = s("/session_id"),
            Some("turn.started") => self.turns_started += 1,
            Some("item.completed") => self.item_completed(ev.get("item").unwrap_or(&Value::Null)),
            Some("turn.completed") => {
                self.turns_completed += 1;
                self.turn_failed = None;
                if let Some(u) = ev.get("usage") {
                    self.usage_totals(u);
                }
            }
            Some("turn.failed") => {
                // Older builds put a bare string in `error`.
                let m = s("/error/message")
                    .or_else(|| s("/error"))
                    .unwrap_or_else(|| "turn failed (no message)".into());
                self.turn_failed = Some(m);
            }
            Some("error") => self.top_level_error(s("/message").unwrap_or_default()),
            _ => {}
        }
    }

    fn top_level_error(&mut self, m: String) {
        if is_reconnect(&m) {
            self.reconnects += 1;
        }
        self.last_error = Some(m);
    }

    fn item_completed(&mut self, item: &Value) {
        let s = |k: &str| {
            item.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        // `item_type` and `assistant_message`: the experimental shape.
        let kind = item
            .get("type")
            .or_else(|| item.get("item_type"))
            .and_then(Value::as_str);
        match kind {
            // An empty message does not erase the answer given before it.
            Some("agent_message" | "assistant_message") if !s("text").trim().is_empty() => {
                self.last_message = s("text")
            }
            Some("plan") => self.last_plan = s("text"),
            Some("command_execution") => {
                let exit = item.get("exit_code").and_then(Value::as_i64);
                if matches!(
                    item.get("status").and_then(Value::as_str),
                    Some("failed" | "declined")
                ) || exit.is_some_and(|c| c != 0)
                {
                    self.failed_commands += 1;
                }
                self.commands.push((s("command"), exit));
            }
            Some("file_change") if item.get("status").and_then(Value::as_str) != Some("failed") => {
                let paths: Vec<String> = item
                    .get("changes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get("path").and_then(Value::as_str).map(String::from))
                    .collect();
                self.changed(paths);
            }
            Some("error") => self.warnings.push(s("message")),
            _ => {}
        }
    }

    fn changed(&mut self, paths: Vec<String>) {
        for p in paths {
            if !self.changed_files.contains(&p) {
                self.changed_files.push(p);
            }
        }
    }

    /// Token counts that are the session's running totals (`usage` of
    /// `turn.completed`, a legacy `info.total_token_usage`): each given
    /// figure replaces the one kept.
    fn usage_totals(&mut self, u: &Value) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64);
        self.usage.tokens_in = n("input_tokens").or(self.usage.tokens_in);
        self.usage.tokens_out = n("output_tokens").or(self.usage.tokens_out);
        self.cached_input_tokens = n("cached_input_tokens").or(self.cached_input_tokens);
        self.reasoning_output_tokens =
            n("reasoning_output_tokens").or(self.reasoning_output_tokens);
    }

    /// One legacy `msg` event (codex before the thread/turn/item events).
    fn legacy(&mut self, msg: &Value, tz: chrono_tz::Tz) {
        let s = |k: &str| msg.get(k).and_then(Value::as_str).map(String::from);
        let ty = msg.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "session_configured" => self.thread_id = s("session_id").or(self.thread_id.take()),
            "task_started" => self.turns_started += 1,
            "agent_message" => {
                if let Some(m) = s("message").filter(|m| !m.trim().is_empty()) {
                    self.last_message = m;
                }
            }
            "task_complete" => {
                self.turns_completed += 1;
                self.turn_failed = None;
                if let Some(m) = s("last_agent_message").filter(|m| !m.trim().is_empty()) {
                    self.last_message = m;
                }
            }
            "turn_aborted" => {
                self.turn_failed = Some(format!(
                    "the turn was aborted ({})",
                    s("reason").unwrap_or_else(|| "no reason given".into())
                ))
            }
            "token_count" => self.legacy_token_count(msg),
            "exec_command_begin" => {
                let command = command_text(msg.get("command"));
                self.pending_commands
                    .push((s("call_id").unwrap_or_default(), command));
            }
            "exec_command_end" => self.legacy_command_end(msg),
            "patch_apply_begin" => {
                let paths = msg
                    .get("changes")
                    .and_then(Value::as_object)
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                self.pending_patches
                    .push((s("call_id").unwrap_or_default(), paths));
            }
            "patch_apply_end" => {
                let id = s("call_id").unwrap_or_default();
                if let Some(i) = self.pending_patches.iter().position(|(c, _)| *c == id) {
                    let (_, paths) = self.pending_patches.remove(i);
                    if msg.get("success").and_then(Value::as_bool) != Some(false) {
                        self.changed(paths);
                    }
                }
            }
            "error" | "stream_error" => {
                self.legacy_error(ty == "stream_error", s("message").unwrap_or_default(), tz)
            }
            _ => {}
        }
    }

    /// A legacy `token_count`. Later legacy builds: `info.total_token_usage`,
    /// a running total; earlier ones: per-request counts at the top, added up.
    fn legacy_token_count(&mut self, msg: &Value) {
        if let Some(total) = msg.pointer("/info/total_token_usage") {
            self.usage_totals(total);
        } else if msg.get("input_tokens").is_some() || msg.get("output_tokens").is_some() {
            let n = |k: &str| msg.get(k).and_then(Value::as_u64);
            self.usage.tokens_in = add(self.usage.tokens_in, n("input_tokens"));
            self.usage.tokens_out = add(self.usage.tokens_out, n("output_tokens"));
            self.cached_input_tokens = add(self.cached_input_tokens, n("cached_input_tokens"));
            self.reasoning_output_tokens =
                add(self.reasoning_output_tokens, n("reasoning_output_tokens"));
        }
    }

    /// A legacy `exec_command_end`: the command (as its begin named it)
    /// with its exit code; a non-zero exit counts as a failed command.
    fn legacy_command_end(&mut self, msg: &Value) {
        let exit = msg.get("exit_code").and_then(Value::as_i64);
        if exit.is_some_and(|c| c != 0) {
            self.failed_commands += 1;
        }
        let id = msg
            .get("call_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let begun = self
            .pending_commands
            .iter()
            .position(|(c, _)| *c == id)
            .map(|i| self.pending_commands.remove(i).1);
        let command = begun.unwrap_or_else(|| command_text(msg.get("command")));
        self.commands.push((command, exit));
    }

    /// A legacy `error` (or, `stream`, `stream_error`) with its message `m`,
    /// read as the current CLI's `error` event would be (its retry notices,
    /// "…; retrying 1/5 in 209ms…", are no limit).
    fn legacy_error(&mut self, stream: bool, m: String, tz: chrono_tz::Tz) {
        if let Some(r) = limit::read_codex_event(
            &serde_json::json!({"type": "error", "message": m}),
            Utc::now(),
            tz,
        ) {
            self.limit = Some(stronger(self.limit.take(), r));
        }
        if stream {
            // A retry notice of a stream that broke.
            self.reconnects += 1;
            self.last_error = Some(m);
        } else {
            self.top_level_error(m);
        }
    }

    /// The final message: the last agent message, else the last plan
    /// (codex's own rule for the turn's final message).
    pub fn final_text(&self) -> String {
        if self.last_message.trim().is_empty() {
            self.last_plan.clone()
        } else {
            self.last_message.clone()
        }
    }

    /// Why the call failed, from the stream alone: the failed turn, or a
    /// stream that ended without a completed turn. `None` when a turn
    /// completed and none failed after it.
    pub fn failure(&self) -> Option<String> {
        if let Some(m) = &self.turn_failed {
            return Some(format!("codex turn failed: {m}"));
        }
        if self.turns_completed > 0 {
            return None;
        }
        let cut = if self.noise.cut_last_line {
            "; its last line was cut off in the middle of an event"
        } else {
            ""
        };
        Some(match (&self.last_error, self.reconnects) {
            (Some(m), 0) => format!("codex stopped without completing the turn: {m}{cut}"),
            (Some(m), n) => format!(
                "codex could not reach its model provider ({n} reconnect notice(s)); last: {m}{cut}"
            ),
            (None, _) if self.turns_started == 0 && self.events > 0 => format!(
                "codex printed no turn ({} event(s), none of them a turn start codex is known to print){cut}",
                self.events
            ),
            (None, _) if self.turns_started == 0 => {
                format!("codex printed no turn (no `turn.started` event){cut}")
            }
            (None, _) => format!("codex stopped without completing the turn{cut}"),
        })
    }

    /// What a person should know about a call that did not fail.
    pub fn notes(&self, ended_after_turn: bool) -> Vec<String> {
        let mut notes: Vec<String> = self
            .warnings
            .iter()
            .filter(|w| !w.trim().is_empty())
            .map(|w| format!("codex warned: {w}"))
            .collect();
        if self.failed_commands > 0 {
            notes.push(format!(
                "{} command{} failed or {} declined",
                self.failed_commands,
                if self.failed_commands == 1 { "" } else { "s" },
                if self.failed_commands == 1 {
                    "was"
                } else {
                    "were"
                }
            ));
        }
        if ended_after_turn {
            notes.push(format!(
                "codex did not exit within {}s of its last turn and was ended",
                TURN_EXIT_GRACE.as_secs()
            ));
        }
        notes
    }
}

/// How long codex may stay silent after its turn ended (`turn.completed` /
/// `turn.failed`) before nightshift ends it; see `EndWatch` in `agent`.
pub const TURN_EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// A legacy event's command: an argv array or a string.
fn command_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        Some(Value::String(c)) => c.clone(),
        _ => String::new(),
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// codex's retry notices: "Reconnecting... 2/5 (…)", "Reconnecting… waiting
/// for network (…)".
fn is_reconnect(m: &str) -> bool {
    m.trim_start().starts_with("Reconnecting")
}

/// The stronger of two readings: usage limit with a reset > without >
/// transient > none; on a tie the earlier one.
fn stronger(a: Option<LimitReading>, b: LimitReading) -> LimitReading {
    let rank = |r: &LimitReading| match (r.kind, r.resets_at) {
        (LimitKind::UsageLimit, Some(_)) => 3,
        (LimitKind::UsageLimit, None) => 2,
        (LimitKind::Transient, _) => 1,
        (LimitKind::None, _) => 0,
    };
    match a {
        Some(a) if rank(&a) >= rank(&b) => a,
        _ => b,
    }
}

/// Runs a `codex` agent call.
///
/// # Errors
/// [`AgentError`] when it cannot be started (missing executable, bad cwd) or
/// the reviewer's schema file cannot be written; a started call that fails,
/// times out or hits a limit is an `Ok` [`Report`] saying so.
pub async fn run(
    agent: &AgentConfig,
    call: &Call,
    cancel: &CancellationToken,
) -> Result<Report, AgentError> {
    let schema = match call.role {
        Role::Reviewer => Some(write_schema(call)?),
        Role::Writer => None,
    };
    let argv = argv(agent, call.role, schema.as_deref());
    let state = Arc::new(Mutex::new(StreamState::default()));
    let sink = state.clone();
    let tz = call.tz;
    let watch = super::EndWatch::start(cancel, TURN_EXIT_GRACE);
    let end = watch.signal();
    let cmd = base_command(&argv, call, &[])
        .stdin_bytes(call.prompt.clone().into_bytes())
        .json_lines(true)
        .on_stdout_line(Box::new(move |line: &str| {
            let mut st = sink.lock().expect("codex stream state");
            let before = (st.turns_completed, st.turn_failed.clone());
            st.feed(line, tz);
            if (st.turns_completed, st.turn_failed.clone()) != before {
                end.ended();
            } else if !line.trim().is_empty() {
                end.activity();
            }
        }));
    let outcome = crate::process::run(cmd, watch.token()).await;
    let ended_after_turn = watch.finish(cancel);
    let outcome = outcome.map_err(|source| AgentError::Spawn {
        role: call.role.as_str(),
        kind: agent.kind,
        source,
    })?;
    let st = state.lock().expect("codex stream state").clone();

    let failure = if outcome.output_capped {
        Some(super::over_output_cap(call))
    } else {
        st.call_failure(&outcome, call.timeout, ended_after_turn)
    };
    // A limit counts only for a call that failed: a completed turn's stderr
    // may carry retried 429s that did not stop it. stderr holds codex's raw
    // 429 body (`resets_at`) when its log level prints it.
    let limit = if failure.is_some() {
        let from_stderr = limit::read_text(&outcome.stderr_tail, Utc::now(), tz);
        let best = stronger(st.limit.clone(), from_stderr);
        best.is_limit().then_some(best)
    } else {
        None
    };
    let text = st.final_text();
    let verdict = match call.role {
        Role::Reviewer => review::last_json_verdict(&text),
        Role::Writer => None,
    };
    let (claimed_files, edited_files) = files_of(&st, &text, &call.cwd);
    let notes = st.notes(ended_after_turn);
    Ok(Report {
        argv,
        outcome,
        text,
        verdict,
        usage: st.usage.clone(),
        limit,
        failure,
        tools: None,
        mcp_servers: None,
        claimed_files,
        edited_files,
        notes,
    })
}

/// The files the turn claimed (its answer's `FILES:` block, then every
/// file its edits touched) and the files its edits touched, relative to
/// `cwd`.
fn files_of(st: &StreamState, text: &str, cwd: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let edited: Vec<String> = st
        .changed_files
        .iter()
        .map(|f| relative_to(f, cwd))
        .collect();
    let mut claimed = parse_blocks(text).files;
    for rel in &edited {
        if !claimed.contains(rel) {
            claimed.push(rel.clone());
        }
    }
    (claimed, edited)
}

impl StreamState {
    /// Why the call failed, from the stream and how the process ended, or
    /// `None`: timed out (with the reconnect notices that explain it),
    /// interrupted, exited before starting a session (a usage error or a
    /// crash, told on stderr), the stream's own failure
    /// ([`StreamState::failure`]), or a nonzero exit after a completed turn.
    /// `ended_after_turn`: nightshift ended a codex that did not exit after
    /// its turn (`EndWatch` in `agent`), which is no failure.
    pub fn call_failure(
        &self,
        outcome: &crate::process::Outcome,
        timeout: std::time::Duration,
        ended_after_turn: bool,
    ) -> Option<String> {
        let exit = super::command::exit_text(outcome);
        if outcome.timed_out {
            let why = match (self.reconnects, &self.last_error) {
                (n, Some(m)) if n > 0 => {
                    format!("; codex was reconnecting ({n} notice(s)), last: {m}")
                }
                _ => String::new(),
            };
            return Some(format!("timed out after {}s{why}", timeout.as_secs()));
        }
        if outcome.cancelled && !ended_after_turn {
            return Some(crate::outcome::Outcome::Interrupted.to_string());
        }
        if self.thread_id.is_none() && self.turns_started == 0 && outcome.exit_code != Some(0) {
            // It never started a session: a usage error (unknown flag, bad
            // config) or a crash, told on stderr.
            let stdout = match (
                &self.noise.last_other_line,
                outcome.stderr_tail.trim().is_empty(),
            ) {
                (Some(l), true) => format!("stdout: {l}"),
                _ => first_error_line(&outcome.stderr_tail),
            };
            return Some(format!(
                "codex exited ({exit}) before starting a session: {stdout}"
            ));
        }
        if let Some(f) = self.failure() {
            let how = match (
                outcome.exit_code == Some(0) || ended_after_turn,
                super::telling_stderr_line(&outcome.stderr_tail),
            ) {
                (true, _) => String::new(),
                (false, Some(l)) => format!(" [exited ({exit}): {l}]"),
                (false, None) => format!(" [exited ({exit})]"),
            };
            return Some(format!("{f}{how}"));
        }
        if !ended_after_turn && outcome.exit_code != Some(0) {
            return Some(format!(
                "codex exited ({exit}) after completing the turn: {}",
                first_error_line(&outcome.stderr_tail)
            ));
        }
        None
    }
}

/// The line of codex's stderr that says what went wrong: the first
/// `error:` / `Error:` line (clap's usage errors put it first, before the
/// usage text), else the last non-empty line.
fn first_error_line(stderr: &str) -> String {
    super::telling_stderr_line(stderr).unwrap_or_else(|| "(nothing on stderr)".into())
}

/// Writes the reviewer's verdict schema next to the call's logs.
fn write_schema(call: &Call) -> Result<std::path::PathBuf, AgentError> {
    let path = call.log_dir.join("verdict.schema.json");
    std::fs::write(&path, VERDICT_SCHEMA).map_err(|source| AgentError::Files {
        role: call.role.as_str(),
        dir: call.log_dir.clone(),
        source,
    })?;
    if let Some(u) = &call.run_as {
        // codex runs as another user and reads the file itself.
        for p in [&call.log_dir, &path] {
            let _ = nix::unistd::chown(
                p.as_path(),
                Some(nix::unistd::Uid::from_raw(u.uid)),
                Some(nix::unistd::Gid::from_raw(u.gid)),
            );
        }
    }
    Ok(path)
}

/// codex names changed files by absolute path; the proof wants them relative
/// to the checkout (also when the checkout path holds a symlink).
fn relative_to(path: &str, cwd: &Path) -> String {
    let p = Path::new(path);
    if let Ok(r) = p.strip_prefix(cwd) {
        return r.display().to_string();
    }
    if let Ok(c) = cwd.canonicalize()
        && let Ok(r) = p.strip_prefix(&c)
    {
        return r.display().to_string();
    }
    path.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AgentKind;

    fn utc() -> chrono_tz::Tz {
        "UTC".parse().unwrap()
    }

    fn feed_all(lines: &str) -> StreamState {
        let mut st = StreamState::default();
        for l in lines.lines() {
            st.feed(l, utc());
        }
        st
    }

    fn agent(command: &[&str], model: Option<&str>) -> AgentConfig {
        AgentConfig {
            kind: AgentKind::Codex,
            command: command.iter().map(|s| s.to_string()).collect(),
            permission_flags: None,
            model: model.map(String::from),
            account: None,
        }
    }

    #[test]
    fn argv_keeps_global_options_before_exec() {
        let a = agent(&["codex", "-c", "model_provider=fake"], Some("o4"));
        assert_eq!(
            argv(&a, Role::Writer, None),
            [
                "codex",
                "-c",
                "model_provider=fake",
                "exec",
                "--json",
                "--sandbox",
                "workspace-write",
                "--skip-git-repo-check",
                "--model",
                "o4",
                "-"
            ]
        );
        let r = argv(&a, Role::Reviewer, Some(Path::new("/l/v.json")));
        assert_eq!(
            &r[3..],
            [
                "exec",
                "--json",
                "--sandbox",
                "read-only",
                "--skip-git-repo-check",
                "--model",
                "o4",
                "--output-schema",
                "/l/v.json",
                "-"
            ]
        );
    }

    #[test]
    fn argv_does_not_repeat_a_configured_exec() {
        let a = agent(&["npx", "codex", "exec", "-c", "x=1"], None);
        assert_eq!(
            argv(&a, Role::Writer, None),
            [
                "npx",
                "codex",
                "exec",
                "-c",
                "x=1",
                "--json",
                "--sandbox",
                "workspace-write",
                "--skip-git-repo-check",
                "-"
            ]
        );
        // `exec` as an option's value is not the subcommand.
        let a = agent(&["codex", "-p", "exec"], None);
        assert_eq!(argv(&a, Role::Writer, None)[3], "exec");
    }

    #[test]
    fn commands_that_fight_the_sandbox_are_config_errors() {
        let c =
            |v: &[&str]| conflicting_argument(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            c(&["codex", "-c", "model_provider=fake", "--model", "o4"]),
            None
        );
        assert_eq!(
            c(&["codex", "--sandbox", "danger-full-access"]).as_deref(),
            Some("--sandbox")
        );
        assert_eq!(
            c(&["codex", "--sandbox=read-only"]).as_deref(),
            Some("--sandbox=read-only")
        );
        assert_eq!(
            c(&["codex", "-sdanger-full-access"]).as_deref(),
            Some("-sdanger-full-access")
        );
        assert_eq!(
            c(&[
                "codex",
                "exec",
                "--dangerously-bypass-approvals-and-sandbox"
            ])
            .as_deref(),
            Some("--dangerously-bypass-approvals-and-sandbox")
        );
        assert_eq!(
            c(&["codex", "-c", "sandbox_mode=\"danger-full-access\""]).as_deref(),
            Some("sandbox_mode=\"danger-full-access\"")
        );
        assert_eq!(c(&["codex", "--json"]).as_deref(), Some("--json"));
        // Applied when the config is loaded: `crate::settings`'s test.
    }

    #[test]
    fn sample_transcript() {
        let st = feed_all(include_str!(
            "../../tests/data/transcripts/codex-exec-json-sample.jsonl"
        ));
        assert_eq!(
            st.thread_id.as_deref(),
            Some("0199a213-81c0-7800-8aa1-bbab2a035a53")
        );
        assert_eq!(
            st.last_message,
            "Yep — there’s a `README.md` in the repository root."
        );
        assert_eq!((st.turns_started, st.turns_completed), (1, 1));
        assert_eq!(st.usage.tokens_in, Some(24763));
        assert_eq!(st.cached_input_tokens, Some(24448));
        assert_eq!(st.usage.tokens_out, Some(122));
        assert_eq!(st.commands, vec![("bash -lc ls".to_string(), Some(0))]);
        assert_eq!(st.failure(), None);
        assert!(st.limit.is_none());
    }

    #[test]
    fn recorded_failures_of_the_real_cli() {
        // A 500 from the provider: five retry notices, then the failed turn.
        let st = feed_all(include_str!(
            "../../tests/data/codex/real-turn-failed-500.jsonl"
        ));
        assert_eq!(st.reconnects, 5);
        assert_eq!(
            st.failure().as_deref(),
            Some(
                "codex turn failed: We’re currently experiencing high demand, which may cause temporary errors."
            )
        );
        // Offline: retry notices and nothing else (codex waits; the timeout ends it).
        let st = feed_all(include_str!(
            "../../tests/data/codex/real-offline-reconnecting.jsonl"
        ));
        assert_eq!(
            (st.reconnects, st.turns_started, st.turn_failed.clone()),
            (3, 1, None)
        );
        assert!(st.limit.is_none());
        // The usage limit: error + turn.failed with the CLI's own text.
        let st = feed_all(include_str!(
            "../../tests/data/codex/real-usage-limit.jsonl"
        ));
        assert!(
            st.turn_failed
                .as_deref()
                .unwrap()
                .starts_with("You’ve hit your usage limit.")
        );
        assert_eq!(st.limit.map(|l| l.kind), Some(LimitKind::UsageLimit));
        // A writer's real apply_patch edit.
        let st = feed_all(include_str!(
            "../../tests/data/codex/real-writer-patch.jsonl"
        ));
        assert_eq!(st.changed_files, vec!["@CWD@/calc.txt"]);
        assert_eq!(
            (
                st.usage.tokens_in,
                st.usage.tokens_out,
                st.cached_input_tokens
            ),
            (Some(200), Some(14), Some(80))
        );
    }

    #[test]
    fn turn_failed_is_a_failure_with_its_message() {
        let st = feed_all(
            "{\"type\":\"turn.started\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"boom\"}}\n",
        );
        assert_eq!(st.failure().as_deref(), Some("codex turn failed: boom"));
        let st = feed_all("{\"type\":\"turn.failed\",\"error\":\"old shape\"}");
        assert_eq!(st.turn_failed.as_deref(), Some("old shape"));
    }

    #[test]
    fn reconnect_notices_are_a_failed_call_not_a_limit() {
        for m in [
            "Reconnecting... waiting for network (Connection failed: error sending request)",
            "Reconnecting... 2/5 (stream disconnected before completion: error sending request)",
        ] {
            let st = feed_all(&format!(
                "{{\"type\":\"turn.started\"}}\n{{\"type\":\"error\",\"message\":\"{m}\"}}\n{{\"type\":\"error\",\"message\":\"{m}\"}}"
            ));
            assert_eq!(st.reconnects, 2);
            assert!(st.limit.is_none());
            assert!(
                st.failure()
                    .unwrap()
                    .contains("could not reach its model provider (2 reconnect"),
                "{:?}",
                st.failure()
            );
        }
    }

    #[test]
    fn error_items_are_warnings_and_usage_is_the_threads_running_total() {
        // `turn.completed.usage` is codex's total for the thread so far
        // (codex-rs/exec/src/event_processor_with_jsonl_output.rs:
        // `usage_from_last_total`; fullsend-ai/fullsend#6924 saw the same on
        // 0.152.1): the last one counts, summing would count turn 1 twice.
        let st = feed_all(concat!(
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"error\",\"message\":\"Model metadata for `m` not found.\"}}\n",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":100,\"cached_input_tokens\":40,\"output_tokens\":7,\"reasoning_output_tokens\":2}}\n",
            "{\"type\":\"turn.started\"}\n",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":105,\"cached_input_tokens\":60,\"output_tokens\":8,\"reasoning_output_tokens\":2}}\n",
        ));
        assert_eq!(st.warnings, vec!["Model metadata for `m` not found."]);
        assert_eq!(st.failure(), None);
        assert_eq!(
            (
                st.usage.tokens_in,
                st.usage.tokens_out,
                st.cached_input_tokens,
                st.reasoning_output_tokens
            ),
            (Some(105), Some(8), Some(60), Some(2))
        );
        assert_eq!(
            st.notes(false),
            vec!["codex warned: Model metadata for `m` not found."]
        );
    }

    #[test]
    fn file_changes_are_collected_once_and_failed_patches_ignored() {
        let st = feed_all(concat!(
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"a\",\"type\":\"file_change\",\"changes\":[{\"path\":\"/w/a.txt\",\"kind\":\"update\"}],\"status\":\"completed\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"b\",\"type\":\"file_change\",\"changes\":[{\"path\":\"/w/a.txt\",\"kind\":\"update\"},{\"path\":\"/w/b.txt\",\"kind\":\"add\"}],\"status\":\"completed\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"c\",\"type\":\"file_change\",\"changes\":[{\"path\":\"/w/c.txt\",\"kind\":\"add\"}],\"status\":\"failed\"}}\n",
        ));
        assert_eq!(st.changed_files, vec!["/w/a.txt", "/w/b.txt"]);
        assert_eq!(relative_to("/w/a.txt", Path::new("/w")), "a.txt");
        assert_eq!(relative_to("/elsewhere/x", Path::new("/w")), "/elsewhere/x");
    }

    #[test]
    fn usage_limit_event_is_read_in_the_agent_zone() {
        let st = feed_all(
            "{\"type\":\"error\",\"message\":\"You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 11:59 PM.\"}",
        );
        let l = st.limit.clone().expect("a usage limit");
        assert_eq!(l.kind, LimitKind::UsageLimit);
        assert!(l.resets_at.is_some());
        assert!(st.failure().is_some());
    }

    #[test]
    fn the_error_line_of_a_usage_error_is_kept() {
        let clap = "WARNING: proceeding, even though we could not create PATH aliases\nerror: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: codex exec [OPTIONS] [PROMPT]\n";
        assert_eq!(
            first_error_line(clap),
            "error: unexpected argument '--bogus' found"
        );
        assert_eq!(
            first_error_line("a\nNo prompt provided via stdin.\n"),
            "No prompt provided via stdin."
        );
        assert_eq!(first_error_line(""), "(nothing on stderr)");
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
    fn the_legacy_msg_stream_is_read_like_the_current_one() {
        // codex before 0.44 (openai/codex#4525 removed it): a config summary
        // object, the prompt, then one `{"id":…,"msg":{…}}` per core event.
        let st = feed_all(concat!(
            "{\"model\":\"gpt-5-codex\",\"workdir\":\"/w\",\"provider\":\"openai\",\"approval\":\"never\",\"sandbox\":\"workspace-write\",\"reasoning effort\":\"medium\"}\n",
            "{\"prompt\":\"Add sub\"}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"session_configured\",\"session_id\":\"0199-legacy\",\"model\":\"gpt-5-codex\",\"history_log_id\":1,\"history_entry_count\":0}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"task_started\",\"model_context_window\":272000}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"agent_reasoning\",\"text\":\"**Adding sub**\"}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"exec_command_begin\",\"call_id\":\"c1\",\"command\":[\"bash\",\"-lc\",\"cat calc.txt\"],\"cwd\":\"/w\"}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"exec_command_end\",\"call_id\":\"c1\",\"stdout\":\"add\\n\",\"stderr\":\"\",\"exit_code\":0,\"duration\":{\"secs\":0,\"nanos\":1}}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"patch_apply_begin\",\"call_id\":\"c2\",\"auto_approved\":true,\"changes\":{\"/w/calc.txt\":{\"update\":{\"unified_diff\":\"@@\\n add\\n+sub\\n\",\"move_path\":null}}}}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"patch_apply_end\",\"call_id\":\"c2\",\"stdout\":\"Success.\",\"stderr\":\"\",\"success\":true}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"patch_apply_begin\",\"call_id\":\"c3\",\"auto_approved\":true,\"changes\":{\"/w/other.txt\":{\"add\":{\"content\":\"x\"}}}}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"patch_apply_end\",\"call_id\":\"c3\",\"stdout\":\"\",\"stderr\":\"rejected\",\"success\":false}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"token_count\",\"info\":{\"total_token_usage\":{\"input_tokens\":3000,\"cached_input_tokens\":1000,\"output_tokens\":200,\"reasoning_output_tokens\":64,\"total_tokens\":3200},\"last_token_usage\":{\"input_tokens\":1600,\"cached_input_tokens\":1000,\"output_tokens\":90,\"reasoning_output_tokens\":0,\"total_tokens\":1690},\"model_context_window\":272000}}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"agent_message\",\"message\":\"Added sub.\\n\\nFILES:\\n- calc.txt\"}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"task_complete\",\"last_agent_message\":\"Added sub.\\n\\nFILES:\\n- calc.txt\"}}\n",
        ));
        assert_eq!(st.thread_id.as_deref(), Some("0199-legacy"));
        assert_eq!(st.final_text(), "Added sub.\n\nFILES:\n- calc.txt");
        assert_eq!(st.failure(), None);
        assert_eq!(st.changed_files, ["/w/calc.txt"]);
        assert_eq!(
            st.commands,
            [("bash -lc cat calc.txt".to_string(), Some(0))]
        );
        assert_eq!(
            (
                st.usage.tokens_in,
                st.usage.tokens_out,
                st.cached_input_tokens,
                st.reasoning_output_tokens
            ),
            (Some(3000), Some(200), Some(1000), Some(64))
        );
        // Earlier legacy builds counted each request at the top of the event.
        let st = feed_all(concat!(
            "{\"id\":\"0\",\"msg\":{\"type\":\"token_count\",\"input_tokens\":100,\"cached_input_tokens\":0,\"output_tokens\":10,\"total_tokens\":110}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"token_count\",\"input_tokens\":150,\"cached_input_tokens\":100,\"output_tokens\":20,\"total_tokens\":170}}\n",
        ));
        assert_eq!(
            (st.usage.tokens_in, st.usage.tokens_out),
            (Some(250), Some(30))
        );
        // A legacy error ends the call, and a limit in it is read.
        let st = feed_all(concat!(
            "{\"id\":\"0\",\"msg\":{\"type\":\"task_started\"}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"stream_error\",\"message\":\"stream error: unexpected status 503; retrying 1/5 in 209ms…\"}}\n",
            "{\"id\":\"0\",\"msg\":{\"type\":\"error\",\"message\":\"You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in 2 days 17 hours 14 minutes.\"}}\n",
        ));
        assert_eq!(
            st.limit.as_ref().map(|l| (l.kind, l.resets_at.is_some())),
            Some((LimitKind::UsageLimit, true))
        );
        assert!(
            st.failure()
                .unwrap()
                .contains("You've hit your usage limit."),
            "{:?}",
            st.failure()
        );
        // An aborted legacy turn is a failure.
        let st = feed_all(
            "{\"id\":\"0\",\"msg\":{\"type\":\"task_started\"}}\n{\"id\":\"0\",\"msg\":{\"type\":\"turn_aborted\",\"reason\":\"interrupted\"}}\n",
        );
        assert_eq!(
            st.failure().as_deref(),
            Some("codex turn failed: the turn was aborted (interrupted)")
        );
    }

    #[test]
    fn the_experimental_item_type_shape_is_read() {
        // openai/codex#4250 and #4525 (late September 2025): `session.created`,
        // the item's kind in `item_type`, `assistant_message`.
        let st = feed_all(concat!(
            "{\"type\":\"session.created\",\"session_id\":\"019982d1-75f0-7920-b051-e0d3731a5ed8\"}\n",
            "{\"type\":\"turn.started\"}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"item_type\":\"reasoning\",\"text\":\"**Planning**\"}}\n",
            "{\"type\":\"item.started\",\"item\":{\"id\":\"item_1\",\"item_type\":\"mcp_tool_call\",\"server\":\"github\",\"tool\":\"search_issues\",\"status\":\"in_progress\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"item_type\":\"mcp_tool_call\",\"server\":\"github\",\"tool\":\"search_issues\",\"status\":\"completed\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_2\",\"item_type\":\"command_execution\",\"command\":\"bash -lc 'echo hello'\",\"aggregated_output\":\"hello\\n\",\"exit_code\":0,\"status\":\"completed\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_3\",\"item_type\":\"file_change\",\"changes\":[{\"path\":\"/w/a.txt\",\"kind\":\"add\"}],\"status\":\"completed\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_4\",\"item_type\":\"assistant_message\",\"text\":\"**Assigned Issues**\\n- #1\"}}\n",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":34038,\"cached_input_tokens\":29696,\"output_tokens\":1013}}\n",
        ));
        assert_eq!(
            st.thread_id.as_deref(),
            Some("019982d1-75f0-7920-b051-e0d3731a5ed8")
        );
        assert_eq!(st.final_text(), "**Assigned Issues**\n- #1");
        assert_eq!(st.changed_files, ["/w/a.txt"]);
        assert_eq!(st.commands.len(), 1);
        assert_eq!((st.usage.tokens_in, st.failure()), (Some(34038), None));
    }

    #[test]
    fn every_item_kind_of_the_current_stream_is_taken_or_ignored() {
        let st = feed_all(concat!(
            "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n",
            "{\"type\":\"turn.started\"}\n",
            "{\"type\":\"item.started\",\"item\":{\"id\":\"item_0\",\"type\":\"todo_list\",\"items\":[{\"text\":\"read\",\"completed\":false}]}}\n",
            "{\"type\":\"item.updated\",\"item\":{\"id\":\"item_0\",\"type\":\"todo_list\",\"items\":[{\"text\":\"read\",\"completed\":true}]}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"type\":\"web_search\",\"id\":\"ws\",\"query\":\"rust\",\"action\":{\"type\":\"search\"}}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_2\",\"type\":\"mcp_tool_call\",\"server\":\"s\",\"tool\":\"t\",\"arguments\":{},\"result\":null,\"error\":{\"message\":\"boom\"},\"status\":\"failed\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_3\",\"type\":\"command_execution\",\"command\":\"/bin/bash -lc 'touch /etc/x'\",\"aggregated_output\":\"touch: cannot touch '/etc/x': Read-only file system\\n\",\"exit_code\":1,\"status\":\"failed\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_4\",\"type\":\"command_execution\",\"command\":\"rm -rf /\",\"aggregated_output\":\"\",\"exit_code\":null,\"status\":\"declined\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_5\",\"type\":\"collab_tool_call\",\"tool\":\"spawn_agent\",\"sender_thread_id\":\"t\",\"receiver_thread_ids\":[],\"prompt\":null,\"agents_states\":{},\"status\":\"completed\"}}\n",
            "{\"type\":\"item.plan.delta\",\"item_id\":\"item_6\",\"delta\":\"1. add\"}\n",
            "{\"type\":\"request_user_input\",\"id\":\"turn\",\"call_id\":\"c\",\"questions\":[]}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_6\",\"type\":\"plan\",\"text\":\"1. add sub\\n2. test it\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_7\",\"type\":\"brand_new_kind\",\"whatever\":[1]}}\n",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":10,\"cached_input_tokens\":0,\"cache_write_input_tokens\":0,\"output_tokens\":2,\"reasoning_output_tokens\":0}}\n",
        ));
        // No agent message: the plan is the final message, as codex itself takes it.
        assert_eq!(st.final_text(), "1. add sub\n2. test it");
        assert_eq!(st.failure(), None);
        assert_eq!(st.failed_commands, 2);
        assert_eq!(st.notes(false), ["2 commands failed or were declined"]);
    }

    #[test]
    fn noise_and_a_cut_last_line_are_read_as_real_output_comes() {
        let st = feed_all(concat!(
            "\u{feff}{\"type\":\"thread.started\",\"thread_id\":\"t\"}\r\n",
            "Reading prompt from stdin...\n",
            "\u{1b}[0m{\"type\":\"turn.started\"}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"agent_message\",\"text\":\"half\"}}{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}\n",
        ));
        assert_eq!(
            (
                st.thread_id.as_deref(),
                st.turns_started,
                st.turns_completed,
                st.final_text().as_str()
            ),
            (Some("t"), 1, 1, "half")
        );
        assert_eq!(st.noise.other_lines, 1);
        let st = feed_all(
            "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"turn.started\"}\n{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"agent_message\",\"te",
        );
        assert!(st.noise.cut_last_line);
        assert_eq!(
            st.failure().as_deref(),
            Some(
                "codex stopped without completing the turn; its last line was cut off in the middle of an event"
            )
        );
    }

    #[test]
    fn how_the_process_ended_decides_with_the_stream() {
        let done = feed_all(include_str!(
            "../../tests/data/codex/real-writer-patch.jsonl"
        ));
        assert_eq!(
            done.call_failure(&outcome(Some(0), None, ""), MINUTE, false),
            None
        );
        // A good turn, then a bad exit: something broke; the round is not trusted.
        assert_eq!(
            done.call_failure(
                &outcome(Some(1), None, "Error: failed to write last message file\n"),
                MINUTE,
                false
            )
            .as_deref(),
            Some(
                "codex exited (code 1) after completing the turn: Error: failed to write last message file"
            )
        );
        // Ended by nightshift after a turn it did not exit after: the turn stands.
        let mut ended = outcome(None, Some(15), "");
        ended.cancelled = true;
        assert_eq!(done.call_failure(&ended, MINUTE, true), None);
        assert_eq!(
            done.call_failure(&ended, MINUTE, false).as_deref(),
            Some(crate::outcome::Outcome::Interrupted.as_str())
        );
        // Killed mid-turn: the stream says the turn never ended, the exit says how.
        let mid = feed_all(
            "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"turn.started\"}\n",
        );
        assert_eq!(
            mid.call_failure(&outcome(None, Some(9), ""), MINUTE, false)
                .as_deref(),
            Some("codex stopped without completing the turn [exited (signal 9)]")
        );
        // Never started: stderr tells, else stdout's last words.
        let none = feed_all(
            "Not inside a trusted directory and --skip-git-repo-check was not specified.\n",
        );
        assert_eq!(
            none.call_failure(&outcome(Some(1), None, ""), MINUTE, false)
                .as_deref(),
            Some(
                "codex exited (code 1) before starting a session: stdout: Not inside a trusted directory and --skip-git-repo-check was not specified."
            )
        );
    }

    #[test]
    fn an_empty_last_message_does_not_erase_the_answer() {
        let st = feed_all(concat!(
            "{\"type\":\"turn.started\"}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"a\",\"type\":\"agent_message\",\"text\":\"{\\\"verdict\\\":\\\"approve\\\",\\\"findings\\\":[]}\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"b\",\"type\":\"agent_message\",\"text\":\"\"}}\n",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":null}}\n",
        ));
        assert_eq!(st.final_text(), r#"{"verdict":"approve","findings":[]}"#);
        assert_eq!(
            (st.usage.tokens_in, st.usage.tokens_out),
            (Some(5), None),
            "a null count is unknown"
        );
        let st = feed_all(
            "{\"id\":\"0\",\"msg\":{\"type\":\"agent_message\",\"message\":\"Added sub.\"}}\n{\"id\":\"0\",\"msg\":{\"type\":\"agent_message\",\"message\":\"\"}}\n{\"id\":\"0\",\"msg\":{\"type\":\"task_complete\",\"last_agent_message\":null}}\n",
        );
        assert_eq!(st.final_text(), "Added sub.");
    }

    #[test]
    fn non_json_lines_are_counted_not_parsed() {
        let st = feed_all("hello\n\n{not json\n");
        assert_eq!(st.noise.other_lines, 2);
        assert_eq!(
            st.failure().as_deref(),
            Some("codex printed no turn (no `turn.started` event)")
        );
    }
}
