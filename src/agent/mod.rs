//! Agents: the writer and the read-only reviewer (docs/agents.md#read-only-reviewer).
//!
//! One entry point, [`call`], runs an agent of any kind through the single
//! process runner and turns its output into a typed [`Report`]: the final
//! text, the verdict (reviewers), token use and cost where the agent reports
//! them, a usage limit if one was hit, and the tools the agent said it had.
//! Each backend lives in its own file and only knows its CLI's flags and
//! output format. What to do with a report (rounds, sleeps, outcomes) is the
//! run loop's business, not this module's.

pub mod claude;
pub mod codex;
pub mod command;
pub mod live;

mod base;
mod blocks;
mod model;
mod prompt;
mod stream;

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::config::{AgentConfig, AgentKind};

pub use crate::process::RunAs;

pub use base::call_dir;
pub use blocks::{Blocks, parse_blocks, strip_blocks};
pub use model::{AgentError, Call, CallEnd, Report, Role, Usage};
pub use prompt::{REVIEWER_RULES, WRITER_RULES, compose_prompt};
pub use stream::{
    EXIT_GRACE_ENV, JSON_PREFIX_SCAN, JsonLine, StdoutNoise, exit_grace, json_line,
    telling_stderr_line,
};

/// Checks that an agent's executable can be started: an absolute or
/// relative path that is an executable file, or a name found on `path`
/// (the `PATH` the agent will get). Run before an approval is consumed, so a
/// missing CLI costs a message, not the night's approval.
///
/// # Errors
/// A sentence naming the executable and how to fix it.
pub fn preflight(role: Role, agent: &AgentConfig, path: Option<&str>) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let program = agent.command.first().map(String::as_str).unwrap_or("");
    let executable = |p: &Path| {
        p.is_file()
            && p.metadata()
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
    };
    let found = if program.contains('/') {
        executable(Path::new(program))
    } else {
        // An empty entry would be nightshift's own directory to `which`, not
        // the agent's: skipped, as before the lookup was `which`'s.
        let dirs: Vec<&str> = path
            .unwrap_or("")
            .split(':')
            .filter(|d| !d.is_empty())
            .collect();
        !dirs.is_empty()
            && which::which_in_global(program, Some(dirs.join(":")))
                .is_ok_and(|mut found| found.next().is_some())
    };
    if found {
        return Ok(());
    }
    let install = match agent.kind {
        AgentKind::Claude => " (install Claude Code: npm install -g @anthropic-ai/claude-code)",
        AgentKind::Codex => " (install Codex: npm install -g @openai/codex)",
        AgentKind::Command => "",
    };
    Err(format!(
        "the {} `{program}` ({} kind) is not an executable file or on PATH{install}; fix [{}] command in .nightshift/config.toml",
        role.as_str(),
        agent.kind,
        role.as_str()
    ))
}

/// Runs one agent call with the configured backend.
///
/// # Errors
/// [`AgentError`] when the agent cannot be started at all; a started agent
/// that fails, times out or hits a limit is an `Ok` [`Report`] saying so.
pub async fn call(
    agent: &AgentConfig,
    call: &Call,
    cancel: &CancellationToken,
) -> Result<Report, AgentError> {
    std::fs::create_dir_all(&call.log_dir).map_err(|source| AgentError::Files {
        role: call.role.as_str(),
        dir: call.log_dir.clone(),
        source,
    })?;
    match agent.kind {
        AgentKind::Command => command::run(agent, call, cancel).await,
        AgentKind::Claude => claude::run(agent, call, cancel).await,
        AgentKind::Codex => codex::run(agent, call, cancel).await,
    }
}

/// Why a review is void — the reviewer was not read-only (docs/security.md)
/// — or `None`. For every kind, the checkout's snapshots before and after
/// ([`crate::proof::worktree_fingerprint`]) must show no change, and the
/// reviewer's own tool events must show no file change
/// ([`Report::edited_files`]: an edit outside the checkout, which no
/// snapshot sees, or one undone before the end); for `claude`, its session
/// must also have listed its tools (the init event) and none beyond the
/// read-only set, and no MCP server. Comparing the snapshots may read the
/// files whose metadata changed, so `after` is taken just before.
pub fn review_void_reason(
    kind: crate::config::AgentKind,
    reviewer: &Report,
    before: &crate::snapshot::Snapshot,
    after: &crate::snapshot::Snapshot,
) -> Option<String> {
    let changed = after.changes_since(before);
    if !changed.is_empty() {
        // A handful of names say what happened; a rewrite of the tree is
        // not listed whole.
        const SHOWN: usize = 10;
        let more = changed.len().saturating_sub(SHOWN);
        let mut list = changed
            .into_iter()
            .take(SHOWN)
            .collect::<Vec<_>>()
            .join(", ");
        if more > 0 {
            list.push_str(&format!(" and {more} more"));
        }
        return Some(format!("the checkout changed during the review: {list}"));
    }
    if !reviewer.edited_files.is_empty() {
        return Some(format!(
            "the reviewer's own tool events show it changed files: {}",
            reviewer.edited_files.join(", ")
        ));
    }
    if kind != crate::config::AgentKind::Claude {
        return None;
    }
    match (&reviewer.tools, &reviewer.failure) {
        (None, None) => {
            Some("the reviewer session reported no tool list (no init event)".to_string())
        }
        _ => crate::review::tools_violation(
            reviewer.tools.as_deref(),
            reviewer.mcp_servers.as_deref(),
            claude::READ_ONLY_TOOLS,
        ),
    }
}

#[cfg(test)]
mod tests;
