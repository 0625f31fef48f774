//! The `codex` agent kind: `codex exec --json` (SPEC §6).
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
//! `turn.failed`, `error`) is parsed line by line as it arrives ([`StreamState`]).
//! Codex reports tokens but no cost. Limit messages arrive as `error` /
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
/// a `-c sandbox_mode=…` override), if any. The config rejects such a
/// command (SPEC §6: the reviewer is read-only by construction).
pub fn conflicting_argument(command: &[String]) -> Option<String> {
    const OWNED: &[&str] = &["--json", "--sandbox", "-s", "--output-schema", "--dangerously-bypass-approvals-and-sandbox", "--yolo", "--full-auto"];
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
    const TAKES_VALUE: &[&str] = &["-c", "--config", "-p", "--profile", "-m", "--model", "-s", "--sandbox", "-C", "--cd", "-a", "--ask-for-approval", "--enable", "--disable", "-i", "--image", "--local-provider", "--add-dir"];
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
    /// Summed `turn.completed.usage`: `input_tokens` (which already include
    /// the cached ones, as OpenAI counts them) and `output_tokens`.
    pub usage: Usage,
    /// Summed `turn.completed.usage.cached_input_tokens`.
    pub cached_input_tokens: Option<u64>,
    /// Summed `turn.completed.usage.reasoning_output_tokens` (part of the
    /// output tokens).
    pub reasoning_output_tokens: Option<u64>,
    /// The `turn.failed` message, if the turn failed.
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
    /// Paths named by completed `file_change` items (absolute, as codex
    /// prints them), in order, without repeats.
    pub changed_files: Vec<String>,
    /// The strongest usage-limit reading taken from an event.
    pub limit: Option<LimitReading>,
    /// Lines that were not JSON events (kept count only; they are on disk).
    pub other_lines: u32,
}

impl StreamState {
    /// Feeds one stdout line; `tz` is the agent's `TZ` (codex prints reset
    /// times in it without a zone).
    pub fn feed(&mut self, line: &str, tz: chrono_tz::Tz) {
        let t = line.trim();
        if t.is_empty() {
            return;
        }
        let Ok(ev) = serde_json::from_str::<Value>(t) else {
            self.other_lines += 1;
            return;
        };
        if let Some(r) = limit::read_codex_event(&ev, Utc::now(), tz) {
            self.limit = Some(stronger(self.limit.take(), r));
        }
        let s = |p: &str| ev.pointer(p).and_then(Value::as_str).map(str::to_string);
        match ev.get("type").and_then(Value::as_str) {
            Some("thread.started") => self.thread_id = s("/thread_id"),
            Some("turn.started") => self.turns_started += 1,
            Some("item.completed") => self.item_completed(ev.get("item").unwrap_or(&Value::Null)),
            Some("turn.completed") => {
                self.turns_completed += 1;
                let n = |p: &str| ev.pointer(p).and_then(Value::as_u64);
                self.usage.tokens_in = add(self.usage.tokens_in, n("/usage/input_tokens"));
                self.usage.tokens_out = add(self.usage.tokens_out, n("/usage/output_tokens"));
                self.cached_input_tokens = add(self.cached_input_tokens, n("/usage/cached_input_tokens"));
                self.reasoning_output_tokens = add(self.reasoning_output_tokens, n("/usage/reasoning_output_tokens"));
            }
            Some("turn.failed") => {
                // Older builds put a bare string in `error`.
                let m = s("/error/message").or_else(|| s("/error")).unwrap_or_else(|| "turn failed (no message)".into());
                self.turn_failed = Some(m);
            }
            Some("error") => {
                let m = s("/message").unwrap_or_default();
                if is_reconnect(&m) {
                    self.reconnects += 1;
                }
                self.last_error = Some(m);
            }
            _ => {}
        }
    }

    fn item_completed(&mut self, item: &Value) {
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match item.get("type").and_then(Value::as_str) {
            Some("agent_message") => self.last_message = s("text"),
            Some("command_execution") => self.commands.push((s("command"), item.get("exit_code").and_then(Value::as_i64))),
            Some("file_change") if item.get("status").and_then(Value::as_str) != Some("failed") => {
                for c in item.get("changes").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(p) = c.get("path").and_then(Value::as_str)
                        && !self.changed_files.iter().any(|f| f == p)
                    {
                        self.changed_files.push(p.to_string());
                    }
                }
            }
            Some("error") => self.warnings.push(s("message")),
            _ => {}
        }
    }

    /// Why the call failed, from the stream alone: the failed turn, or a
    /// stream that ended without a completed turn. `None` when a turn
    /// completed and none failed.
    pub fn failure(&self) -> Option<String> {
        if let Some(m) = &self.turn_failed {
            return Some(format!("codex turn failed: {m}"));
        }
        if self.turns_completed > 0 {
            return None;
        }
        Some(match (&self.last_error, self.reconnects) {
            (Some(m), 0) => format!("codex stopped without completing the turn: {m}"),
            (Some(m), n) => format!("codex could not reach its model provider ({n} reconnect notice(s)); last: {m}"),
            (None, _) if self.turns_started == 0 => "codex printed no turn (no `turn.started` event)".to_string(),
            (None, _) => "codex stopped without completing the turn".to_string(),
        })
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
pub async fn run(agent: &AgentConfig, call: &Call, cancel: &CancellationToken) -> Result<Report, AgentError> {
    let schema = match call.role {
        Role::Reviewer => Some(write_schema(call)?),
        Role::Writer => None,
    };
    let argv = argv(agent, call.role, schema.as_deref());
    let state = Arc::new(Mutex::new(StreamState::default()));
    let sink = state.clone();
    let tz = call.tz;
    let cmd = base_command(&argv, call, &[])
        .stdin_bytes(call.prompt.clone().into_bytes())
        .on_stdout_line(Box::new(move |line: &str| sink.lock().expect("codex stream state").feed(line, tz)));
    let outcome = crate::process::run(cmd, cancel).await.map_err(|source| AgentError::Spawn { role: call.role.as_str(), kind: agent.kind, source })?;
    let st = state.lock().expect("codex stream state").clone();

    let stream_failure = st.failure();
    let failed = stream_failure.is_some() || !outcome.success();
    // A limit counts only for a call that failed: a completed turn's stderr
    // may carry retried 429s that did not stop it. stderr holds codex's raw
    // 429 body (`resets_at`) when its log level prints it.
    let limit = if failed {
        let from_stderr = limit::read_text(&outcome.stderr_tail, Utc::now(), tz);
        let best = stronger(st.limit.clone(), from_stderr);
        best.is_limit().then_some(best)
    } else {
        None
    };
    let failure = if outcome.timed_out {
        let why = match (st.reconnects, &st.last_error) {
            (n, Some(m)) if n > 0 => format!("; codex was reconnecting ({n} notice(s)), last: {m}"),
            _ => String::new(),
        };
        Some(format!("timed out after {}s{why}", call.timeout.as_secs()))
    } else if outcome.cancelled {
        Some("interrupted".into())
    } else if st.thread_id.is_none() && st.turns_started == 0 && outcome.exit_code != Some(0) {
        // It never started a session: a usage error (unknown flag, bad
        // config) or a crash, told on stderr.
        Some(format!("codex exited ({}) before starting a session: {}", super::command::exit_text(&outcome), first_error_line(&outcome.stderr_tail)))
    } else if let Some(f) = stream_failure {
        Some(f)
    } else if outcome.exit_code != Some(0) {
        Some(format!("codex exited ({}) after completing the turn: {}", super::command::exit_text(&outcome), first_error_line(&outcome.stderr_tail)))
    } else {
        None
    };
    let text = st.last_message.clone();
    let verdict = match call.role {
        Role::Reviewer => review::last_json_verdict(&text),
        Role::Writer => None,
    };
    let mut claimed_files = parse_blocks(&text).files;
    for f in &st.changed_files {
        let rel = relative_to(f, &call.cwd);
        if !claimed_files.contains(&rel) {
            claimed_files.push(rel);
        }
    }
    Ok(Report { argv, outcome, text, verdict, usage: st.usage.clone(), limit, failure, tools: None, mcp_servers: None, claimed_files })
}

/// The line of codex's stderr that says what went wrong: the first
/// `error:` / `Error:` line (clap's usage errors put it first, before the
/// usage text), else the last non-empty line.
fn first_error_line(stderr: &str) -> String {
    let all: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    all.iter().find(|l| l.to_ascii_lowercase().starts_with("error")).or(all.last()).map(|l| l.to_string()).unwrap_or_else(|| "(nothing on stderr)".into())
}

/// Writes the reviewer's verdict schema next to the call's logs.
fn write_schema(call: &Call) -> Result<std::path::PathBuf, AgentError> {
    let path = call.log_dir.join("verdict.schema.json");
    std::fs::write(&path, VERDICT_SCHEMA).map_err(|source| AgentError::Files { role: call.role.as_str(), dir: call.log_dir.clone(), source })?;
    if let Some(u) = &call.run_as {
        // codex runs as another user and reads the file itself.
        for p in [&call.log_dir, &path] {
            let _ = nix::unistd::chown(p.as_path(), Some(nix::unistd::Uid::from_raw(u.uid)), Some(nix::unistd::Gid::from_raw(u.gid)));
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
        AgentConfig { kind: AgentKind::Codex, command: command.iter().map(|s| s.to_string()).collect(), permission_flags: None, model: model.map(String::from) }
    }

    #[test]
    fn argv_keeps_global_options_before_exec() {
        let a = agent(&["codex", "-c", "model_provider=fake"], Some("o4"));
        assert_eq!(
            argv(&a, Role::Writer, None),
            ["codex", "-c", "model_provider=fake", "exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "--model", "o4", "-"]
        );
        let r = argv(&a, Role::Reviewer, Some(Path::new("/l/v.json")));
        assert_eq!(&r[3..], ["exec", "--json", "--sandbox", "read-only", "--skip-git-repo-check", "--model", "o4", "--output-schema", "/l/v.json", "-"]);
    }

    #[test]
    fn argv_does_not_repeat_a_configured_exec() {
        let a = agent(&["npx", "codex", "exec", "-c", "x=1"], None);
        assert_eq!(argv(&a, Role::Writer, None), ["npx", "codex", "exec", "-c", "x=1", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "-"]);
        // `exec` as an option's value is not the subcommand.
        let a = agent(&["codex", "-p", "exec"], None);
        assert_eq!(argv(&a, Role::Writer, None)[3], "exec");
    }

    #[test]
    fn commands_that_fight_the_sandbox_are_config_errors() {
        let c = |v: &[&str]| conflicting_argument(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(c(&["codex", "-c", "model_provider=fake", "--model", "o4"]), None);
        assert_eq!(c(&["codex", "--sandbox", "danger-full-access"]).as_deref(), Some("--sandbox"));
        assert_eq!(c(&["codex", "--sandbox=read-only"]).as_deref(), Some("--sandbox=read-only"));
        assert_eq!(c(&["codex", "-sdanger-full-access"]).as_deref(), Some("-sdanger-full-access"));
        assert_eq!(c(&["codex", "exec", "--dangerously-bypass-approvals-and-sandbox"]).as_deref(), Some("--dangerously-bypass-approvals-and-sandbox"));
        assert_eq!(c(&["codex", "-c", "sandbox_mode=\"danger-full-access\""]).as_deref(), Some("sandbox_mode=\"danger-full-access\""));
        assert_eq!(c(&["codex", "--json"]).as_deref(), Some("--json"));
        let toml = "[writer]\nkind = \"codex\"\ncommand = [\"codex\", \"--sandbox\", \"danger-full-access\"]\n";
        let e = crate::config::parse(Path::new("config.toml"), toml).unwrap_err().to_string();
        assert!(e.contains("--sandbox") && e.contains("[writer]"), "{e}");
    }

    #[test]
    fn sample_transcript() {
        let st = feed_all(include_str!("../../tests/data/transcripts/codex-exec-json-sample.jsonl"));
        assert_eq!(st.thread_id.as_deref(), Some("0199a213-81c0-7800-8aa1-bbab2a035a53"));
        assert_eq!(st.last_message, "Yep — there’s a `README.md` in the repository root.");
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
        let st = feed_all(include_str!("../../tests/data/codex/real-turn-failed-500.jsonl"));
        assert_eq!(st.reconnects, 5);
        assert_eq!(st.failure().as_deref(), Some("codex turn failed: We’re currently experiencing high demand, which may cause temporary errors."));
        // Offline: retry notices and nothing else (codex waits; the timeout ends it).
        let st = feed_all(include_str!("../../tests/data/codex/real-offline-reconnecting.jsonl"));
        assert_eq!((st.reconnects, st.turns_started, st.turn_failed.clone()), (3, 1, None));
        assert!(st.limit.is_none());
        // The usage limit: error + turn.failed with the CLI's own text.
        let st = feed_all(include_str!("../../tests/data/codex/real-usage-limit.jsonl"));
        assert!(st.turn_failed.as_deref().unwrap().starts_with("You’ve hit your usage limit."));
        assert_eq!(st.limit.map(|l| l.kind), Some(LimitKind::UsageLimit));
        // A writer's real apply_patch edit.
        let st = feed_all(include_str!("../../tests/data/codex/real-writer-patch.jsonl"));
        assert_eq!(st.changed_files, vec!["@CWD@/calc.txt"]);
        assert_eq!((st.usage.tokens_in, st.usage.tokens_out, st.cached_input_tokens), (Some(200), Some(14), Some(80)));
    }

    #[test]
    fn turn_failed_is_a_failure_with_its_message() {
        let st = feed_all("{\"type\":\"turn.started\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"boom\"}}\n");
        assert_eq!(st.failure().as_deref(), Some("codex turn failed: boom"));
        let st = feed_all("{\"type\":\"turn.failed\",\"error\":\"old shape\"}");
        assert_eq!(st.turn_failed.as_deref(), Some("old shape"));
    }

    #[test]
    fn reconnect_notices_are_a_failed_call_not_a_limit() {
        for m in ["Reconnecting... waiting for network (Connection failed: error sending request)", "Reconnecting... 2/5 (stream disconnected before completion: error sending request)"] {
            let st = feed_all(&format!("{{\"type\":\"turn.started\"}}\n{{\"type\":\"error\",\"message\":\"{m}\"}}\n{{\"type\":\"error\",\"message\":\"{m}\"}}"));
            assert_eq!(st.reconnects, 2);
            assert!(st.limit.is_none());
            assert!(st.failure().unwrap().contains("could not reach its model provider (2 reconnect"), "{:?}", st.failure());
        }
    }

    #[test]
    fn error_items_are_warnings_and_usage_sums_over_turns() {
        let st = feed_all(concat!(
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"error\",\"message\":\"Model metadata for `m` not found.\"}}\n",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":100,\"cached_input_tokens\":40,\"output_tokens\":7,\"reasoning_output_tokens\":2}}\n",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}\n",
        ));
        assert_eq!(st.warnings, vec!["Model metadata for `m` not found."]);
        assert_eq!(st.failure(), None);
        assert_eq!((st.usage.tokens_in, st.usage.tokens_out, st.cached_input_tokens, st.reasoning_output_tokens), (Some(105), Some(8), Some(40), Some(2)));
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
        let st = feed_all("{\"type\":\"error\",\"message\":\"You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 11:59 PM.\"}");
        let l = st.limit.clone().expect("a usage limit");
        assert_eq!(l.kind, LimitKind::UsageLimit);
        assert!(l.resets_at.is_some());
        assert!(st.failure().is_some());
    }

    #[test]
    fn the_error_line_of_a_usage_error_is_kept() {
        let clap = "WARNING: proceeding, even though we could not create PATH aliases\nerror: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: codex exec [OPTIONS] [PROMPT]\n";
        assert_eq!(first_error_line(clap), "error: unexpected argument '--bogus' found");
        assert_eq!(first_error_line("a\nNo prompt provided via stdin.\n"), "No prompt provided via stdin.");
        assert_eq!(first_error_line(""), "(nothing on stderr)");
    }

    #[test]
    fn non_json_lines_are_counted_not_parsed() {
        let st = feed_all("hello\n\n{not json\n");
        assert_eq!(st.other_lines, 2);
        assert_eq!(st.failure().as_deref(), Some("codex printed no turn (no `turn.started` event)"));
    }
}
