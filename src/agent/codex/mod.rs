//! The `codex` agent kind: `codex exec --json` (docs/agents.md#codex).
//!
//! Writer: `--sandbox workspace-write`; reviewer: `--sandbox read-only` plus
//! `--output-schema` so its final `agent_message` is the verdict object.
//! Inside nightshift's own sandbox (docs/security.md#the-sandbox) codex's
//! is turned off (`--sandbox danger-full-access`, both roles): it cannot
//! be built there (no new namespaces), and ours already holds the line
//! (the slot read-only for the reviewer, no network but the API host). The
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

mod session;
mod stream;

use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::base::base_command;
use super::model::{AgentError, Call, Report, Role};
use crate::config::AgentConfig;
use crate::limit;
use crate::review;

/// The JSON schema the reviewer's final message must follow (passed with
/// `--output-schema`; OpenAI's strict mode wants every property required and
/// no additional ones). Same shape as the `command` protocol's verdict line.
pub use crate::review::VERDICT_SCHEMA;

pub use stream::{StreamState, TURN_EXIT_GRACE};
use stream::{files_of, stronger};

/// The argv for one call. The prompt is not in it: it is read from stdin
/// (the final `-`).
///
/// `command` is the configured argv; arguments in it stay before `exec`
/// (global options such as `-c key=value`) unless it already names the
/// `exec` subcommand, in which case nightshift's flags follow it.
/// `schema` is the verdict schema file for a reviewer.
///
/// `ours`: the call runs in nightshift's sandbox, so codex's own is off.
pub fn argv(agent: &AgentConfig, role: Role, schema: Option<&Path>, ours: bool) -> Vec<String> {
    let mut v: Vec<String> = agent.command.clone();
    if !names_exec(&agent.command) {
        v.push("exec".into());
    }
    v.push("--json".into());
    let sandbox = match role {
        _ if ours => "danger-full-access",
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
    let argv = argv(agent, call.role, schema.as_deref(), call.sandbox.is_some());
    let state = Arc::new(Mutex::new(StreamState::default()));
    let sink = state.clone();
    let tz = call.tz;
    let grace = super::stream::exit_grace(&call.env, TURN_EXIT_GRACE);
    let watch = super::stream::EndWatch::start(cancel, grace);
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
        Some(super::base::over_output_cap(call))
    } else {
        st.call_failure(&outcome, call.timeout, ended_after_turn)
    };
    // A limit counts only for a call that failed: a completed turn's stderr
    // may carry retried 429s that did not stop it. stderr holds codex's raw
    // 429 body (`resets_at`) when its log level prints it.
    let limit = if failure.is_some() {
        let from_stderr = limit::read_text(&outcome.stderr_tail, crate::schedule::server_now(), tz);
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
    let notes = st.notes(ended_after_turn.then_some(grace));
    let gauges = gauges_of(&st, call);
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
        gauges,
    })
}

/// The call's quota gauges (docs/limits.md#gauges): those printed on
/// stdout, else the latest `rate_limits` snapshot in the session file the
/// CLI wrote for its thread; the latest of each window.
fn gauges_of(st: &StreamState, call: &Call) -> Vec<limit::Gauge> {
    if !st.gauges.is_empty() {
        return limit::gauge::latest_per_window(&st.gauges);
    }
    st.thread_id
        .as_deref()
        .map(|id| session::gauges(&call.env, id, crate::schedule::server_now()))
        .unwrap_or_default()
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

#[cfg(test)]
mod tests;
