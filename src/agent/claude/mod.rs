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
//! stdout — is ignored and never fails a call ([`super::stream::json_line`]).
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

mod stream;

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::base::base_command;
use super::blocks::parse_blocks;
use super::model::{AgentError, Call, Report, Role};
use super::stream::EndWatch;
use crate::config::AgentConfig;

/// The JSON Schema of a verdict, passed with `--json-schema` so the real CLI
/// returns the verdict as the result's `structured_output` (docs/loop.md#review).
pub use crate::review::VERDICT_SCHEMA;
pub use stream::{RESULT_EXIT_GRACE, ResultEvent, StreamState};

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
    let grace = super::stream::exit_grace(&call.env, RESULT_EXIT_GRACE);
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
        Some(super::base::over_output_cap(call))
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
        gauges: crate::limit::gauge::latest_per_window(&st.gauges),
    })
}

#[cfg(test)]
mod tests;
