//! Reading `codex exec --json` output: thread, turn and item events, errors
//! and reconnects folded into a [`StreamState`], with the files the agent
//! changed and the first error line.
//!
//! Not for starting the CLI or its flags: the module root does that.

use std::path::Path;

use serde_json::Value;

use crate::agent::blocks::parse_blocks;
use crate::agent::model::Usage;
use crate::limit::{self, LimitReading};

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
    pub noise: crate::agent::stream::StdoutNoise,
    /// Quota gauges printed on stdout (docs/limits.md#gauges); the pinned
    /// CLI prints none there: see `session::gauges`.
    pub gauges: Vec<limit::Gauge>,
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
        // A `rate_limits` snapshot on stdout (legacy `token_count`, or a
        // later CLI's own event): the call's quota gauges.
        let now = crate::schedule::server_now();
        limit::gauge::merge(&mut self.gauges, limit::gauge::codex_gauges(ev, now));
        if let Some(msg) = ev.get("msg").filter(|m| m.get("type").is_some()) {
            return self.legacy(msg, tz);
        }
        if let Some(r) = limit::read_codex_event(ev, crate::schedule::server_now(), tz) {
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
            crate::schedule::server_now(),
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
    /// `ended_after_turn` is the grace after which nightshift ended codex, if it did.
    pub fn notes(&self, ended_after_turn: Option<std::time::Duration>) -> Vec<String> {
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
        if let Some(grace) = ended_after_turn {
            notes.push(format!(
                "codex did not exit within {} of its last turn and was ended",
                crate::duration::format(grace)
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

/// The stronger of two readings ([`LimitReading::rank`]: no credit > usage
/// limit with a reset > without > transient > none); on a tie the earlier one.
pub(super) fn stronger(a: Option<LimitReading>, b: LimitReading) -> LimitReading {
    match a {
        Some(a) if a.rank() >= b.rank() => a,
        _ => b,
    }
}

/// The files the turn claimed (its answer's `FILES:` block, then every
/// file its edits touched) and the files its edits touched, relative to
/// `cwd`.
pub(super) fn files_of(
    st: &StreamState,
    text: &str,
    cwd: &std::path::Path,
) -> (Vec<String>, Vec<String>) {
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
        let exit = crate::agent::command::exit_text(outcome);
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
            return Some(crate::agent::base::CANCELLED.to_string());
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
                crate::agent::stream::telling_stderr_line(&outcome.stderr_tail),
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
pub(super) fn first_error_line(stderr: &str) -> String {
    crate::agent::stream::telling_stderr_line(stderr)
        .unwrap_or_else(|| "(nothing on stderr)".into())
}

/// codex names changed files by absolute path; the proof wants them relative
/// to the checkout (also when the checkout path holds a symlink).
pub(super) fn relative_to(path: &str, cwd: &Path) -> String {
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
