//! Agents: the writer and the read-only reviewer (SPEC §6).
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;
use chrono_tz::Tz;
use tokio_util::sync::CancellationToken;

use crate::config::{AgentConfig, AgentKind};
use crate::limit::{self, LimitKind, LimitReading};
use crate::process::{self, Outcome};
use crate::review::Verdict;

/// The role an agent call plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Changes the code.
    Writer,
    /// Reads the change and gives a verdict; must not write.
    Reviewer,
}

impl Role {
    /// `writer` or `reviewer` (the `NIGHTSHIFT_ROLE` value).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Reviewer => "reviewer",
        }
    }
}

pub use crate::process::RunAs;

/// One agent call.
#[derive(Debug, Clone)]
pub struct Call {
    /// Writer or reviewer.
    pub role: Role,
    /// 1-based round number.
    pub round: u32,
    /// The full prompt (also on stdin for `command` agents).
    pub prompt: String,
    /// The contract's canonical JSON.
    pub contract_json: String,
    /// The previous round's feedback (may be empty).
    pub feedback: String,
    /// Working directory: the checkout.
    pub cwd: PathBuf,
    /// Per-call wall-clock timeout.
    pub timeout: Duration,
    /// The complete environment of the child (already without token
    /// variables, the ledger URL variable and configured secrets).
    pub env: BTreeMap<String, String>,
    /// Resolved time zone; the child gets `TZ` set to it so local times in
    /// limit messages are read in a known zone.
    pub tz: Tz,
    /// Directory for this call's prompt/contract/feedback files and logs
    /// (outside the checkout).
    pub log_dir: PathBuf,
    /// Secret values to redact from everything captured.
    pub secrets: Vec<String>,
    /// Run as this user (config `agent_user`).
    pub run_as: Option<RunAs>,
}

/// Tokens and cost an agent reported for one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Input tokens (including cache reads/creation where reported).
    pub tokens_in: Option<u64>,
    /// Output tokens.
    pub tokens_out: Option<u64>,
    /// Cost in USD, where the agent reports one (claude does; codex does
    /// not; a command agent does when it writes a usage report, see
    /// [`command`]).
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Input plus output tokens (0 where unknown).
    pub fn total_tokens(&self) -> u64 {
        self.tokens_in.unwrap_or(0) + self.tokens_out.unwrap_or(0)
    }
}

/// What an agent call produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// The argv that ran (no secrets: tokens never go in argv).
    pub argv: Vec<String>,
    /// Exit, duration, tails, log files.
    pub outcome: Outcome,
    /// The agent's final message.
    pub text: String,
    /// The verdict (reviewers), if one could be read.
    pub verdict: Option<Verdict>,
    /// Token use and cost, as reported by the agent.
    pub usage: Usage,
    /// A usage limit or throttling, if the agent hit one.
    pub limit: Option<LimitReading>,
    /// Why the call failed, when it did (nonzero exit, error result).
    pub failure: Option<String>,
    /// Tools the agent session said it had (claude's init event).
    pub tools: Option<Vec<String>>,
    /// MCP servers the agent session said it had.
    pub mcp_servers: Option<Vec<String>>,
    /// Files the agent says it changed (checked against git by the proof).
    pub claimed_files: Vec<String>,
}

impl Report {
    /// True when the call hit an account usage limit (sleep until reset).
    pub fn hit_usage_limit(&self) -> bool {
        matches!(self.limit.as_ref().map(|l| &l.kind), Some(LimitKind::UsageLimit))
    }
    /// True when the call was throttled briefly (retry soon).
    pub fn throttled(&self) -> bool {
        matches!(self.limit.as_ref().map(|l| &l.kind), Some(LimitKind::Transient))
    }
}

/// Agent calls that could not even run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The process could not be started (missing executable, bad cwd).
    #[error("{role} agent ({kind}) could not start: {source}")]
    Spawn { role: &'static str, kind: AgentKind, source: process::ProcessError },
    /// The per-call files could not be written.
    #[error("cannot write the {role} call's files under {dir}: {source}")]
    Files { role: &'static str, dir: PathBuf, source: std::io::Error },
}

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
    let executable = |p: &Path| p.is_file() && p.metadata().map(|m| m.permissions().mode() & 0o111 != 0).unwrap_or(false);
    let found = if program.contains('/') {
        executable(Path::new(program))
    } else {
        path.unwrap_or("").split(':').filter(|d| !d.is_empty()).any(|d| executable(&Path::new(d).join(program)))
    };
    if found {
        return Ok(());
    }
    let install = match agent.kind {
        AgentKind::Claude => " (install Claude Code: npm install -g @anthropic-ai/claude-code)",
        AgentKind::Codex => " (install Codex: npm install -g @openai/codex)",
        AgentKind::Command => "",
    };
    Err(format!("the {} `{program}` ({} kind) is not an executable file or on PATH{install}; fix [{}] command in .nightshift/config.toml", role.as_str(), agent.kind, role.as_str()))
}

/// Runs one agent call with the configured backend.
///
/// # Errors
/// [`AgentError`] when the agent cannot be started at all; a started agent
/// that fails, times out or hits a limit is an `Ok` [`Report`] saying so.
pub async fn call(agent: &AgentConfig, call: &Call, cancel: &CancellationToken) -> Result<Report, AgentError> {
    std::fs::create_dir_all(&call.log_dir).map_err(|source| AgentError::Files { role: call.role.as_str(), dir: call.log_dir.clone(), source })?;
    match agent.kind {
        AgentKind::Command => command::run(agent, call, cancel).await,
        AgentKind::Claude => claude::run(agent, call, cancel).await,
        AgentKind::Codex => codex::run(agent, call, cancel).await,
    }
}

/// Builds the process command shared by every backend: cwd, env with `TZ`,
/// timeout, streamed log files, redaction, run-as.
pub(crate) fn base_command(argv: &[String], call: &Call, extra_env: &[(&str, String)]) -> process::Command {
    let mut env = call.env.clone();
    env.insert("TZ".into(), call.tz.name().to_string());
    for (k, v) in extra_env {
        env.insert((*k).to_string(), v.clone());
    }
    let role = call.role.as_str();
    let mut cmd = process::Command::new(&argv[0])
        .args(&argv[1..])
        .cwd(&call.cwd)
        .env_map(env)
        .timeout(call.timeout)
        .stdout_file(call.log_dir.join(format!("{role}.stdout")))
        .stderr_file(call.log_dir.join(format!("{role}.stderr")))
        .redactor(crate::secret::Redactor::new(&call.secrets));
    if let Some(u) = &call.run_as {
        cmd = cmd.run_as(u.clone());
    }
    cmd
}

/// Writes the command protocol's files for one call and returns their paths:
/// (prompt, contract, feedback).
pub(crate) fn write_call_files(call: &Call) -> Result<(PathBuf, PathBuf, PathBuf), AgentError> {
    let err = |source| AgentError::Files { role: call.role.as_str(), dir: call.log_dir.clone(), source };
    let role = call.role.as_str();
    let prompt = call.log_dir.join(format!("{role}.prompt.md"));
    let contract = call.log_dir.join("contract.json");
    let feedback = call.log_dir.join(format!("{role}.feedback.txt"));
    std::fs::write(&prompt, &call.prompt).map_err(err)?;
    std::fs::write(&contract, &call.contract_json).map_err(err)?;
    std::fs::write(&feedback, &call.feedback).map_err(err)?;
    if let Some(u) = &call.run_as {
        // The agent runs as another user: let it read its own call files.
        for p in [&call.log_dir, &prompt, &contract, &feedback] {
            let _ = nix::unistd::chown(p.as_path(), Some(nix::unistd::Uid::from_raw(u.uid)), Some(nix::unistd::Gid::from_raw(u.gid)));
        }
    }
    Ok((prompt, contract, feedback))
}

/// Reads a usage limit from free text that is the agent's error/result
/// channel (SPEC §7), with the call's zone.
pub(crate) fn limit_in_text(text: &str, tz: Tz) -> Option<LimitReading> {
    let r = limit::read_text(text, Utc::now(), tz);
    (r.kind != LimitKind::None).then_some(r)
}

/// Blocks a writer's final message may carry (SPEC §5.8).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Blocks {
    /// `FINDINGS:` entries (proposals, filed as issues).
    pub findings: Vec<String>,
    /// `QUESTION:` text (blocks the item).
    pub question: Option<String>,
    /// `FILES:` entries (the writer's claim of what it changed).
    pub files: Vec<String>,
}

/// Parses `FINDINGS:`, `QUESTION:` and `FILES:` blocks: a line that is the
/// block's name followed by lines starting `- `, until a blank line. A
/// `QUESTION:` may also carry its text on the same line.
pub fn parse_blocks(text: &str) -> Blocks {
    let mut b = Blocks::default();
    let mut current: Option<&str> = None;
    let mut question: Vec<String> = Vec::new();
    for raw in text.lines() {
        let line = raw.trim_end();
        let t = line.trim_start();
        if t.is_empty() {
            current = None;
            continue;
        }
        let head = |name: &str| t.strip_prefix(name).map(str::trim);
        if let Some(rest) = head("FINDINGS:") {
            current = Some("findings");
            if !rest.is_empty() {
                b.findings.push(rest.trim_start_matches("- ").to_string());
            }
            continue;
        }
        if let Some(rest) = head("QUESTION:") {
            current = Some("question");
            question.clear();
            if !rest.is_empty() {
                question.push(rest.to_string());
            }
            continue;
        }
        if let Some(rest) = head("FILES:") {
            current = Some("files");
            if !rest.is_empty() {
                b.files.extend(rest.split_whitespace().map(str::to_string));
            }
            continue;
        }
        match current {
            Some("findings") => match t.strip_prefix("- ") {
                Some(f) if !f.trim().is_empty() => b.findings.push(f.trim().to_string()),
                _ => current = None,
            },
            Some("files") => match t.strip_prefix("- ") {
                Some(f) if !f.trim().is_empty() => b.files.push(f.trim().to_string()),
                _ => current = None,
            },
            Some("question") => question.push(t.trim_start_matches("- ").to_string()),
            _ => {}
        }
    }
    if !question.is_empty() {
        b.question = Some(question.join("\n"));
    }
    b
}

/// An agent's final message without the machine-read parts: the
/// `FINDINGS:`/`QUESTION:`/`FILES:` blocks and JSON lines (usage reports,
/// verdicts). What remains is its own account, shown to a person as such.
pub fn strip_blocks(text: &str) -> String {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        let t = line.trim();
        if ["FINDINGS:", "QUESTION:", "FILES:"].iter().any(|h| t.starts_with(h)) {
            in_block = true;
            continue;
        }
        if in_block {
            if t.is_empty() {
                in_block = false;
            }
            continue;
        }
        if t.starts_with('{') && serde_json::from_str::<serde_json::Value>(t).is_ok() {
            continue;
        }
        out.push(line);
    }
    out.join("\n").trim().to_string()
}

/// The runner's rules every writer prompt carries (SPEC §5.2, §5.8).
pub const WRITER_RULES: &str = "\
## Rules of this run (enforced from git; breaking one fails the round)
- Change files only in the current directory, and only within the item's scope if it has one.
- Do not commit, push, switch branches, rewrite history, open or merge pull requests: the runner does that.
- The runner runs the gate commands itself after you finish; run them too if you can.
- If something needs a person's decision, stop and end your answer with a block:
  QUESTION: <the question>
- Problems you noticed outside this item go in a block (one per line, then a blank line); they become issues, not work:
  FINDINGS:
  - <one finding per line>
";

/// The reviewer's instructions (SPEC §5.5).
pub const REVIEWER_RULES: &str = "\
## You are the reviewer (read-only)
Read the change in the current directory (`git diff` against the base, untracked files included) against the contract.
Do not modify anything. Judge each numbered acceptance condition and say where the evidence is
(a test that checks it, a file and line, a command's output). Approve only if every condition is met.
End your answer with one JSON object on its own line:
{\"verdict\":\"approve\",\"findings\":[],\"conditions\":[{\"index\":1,\"met\":true,\"evidence\":\"<where it shows>\"}]}
or
{\"verdict\":\"request_changes\",\"findings\":[\"<what must change>\", ...],\"conditions\":[...]}
(`conditions` is `[]` when the item has none.)
";

/// Composes a prompt: recipe template (if any), rules, the contract and the
/// previous round's feedback.
pub fn compose_prompt(role: Role, contract: &crate::contract::Contract, feedback: &str, base_commit: &str) -> String {
    let mut p = String::new();
    if let (Role::Writer, Some(r)) = (role, &contract.recipe) {
        p.push_str(&r.template);
        p.push_str("\n\n");
    }
    p.push_str(&format!("# Item: {}\n\n", contract.title));
    if !contract.context.is_empty() {
        p.push_str("## Context (the backlog's rules)\n");
        for c in &contract.context {
            p.push_str(&format!("> {c}\n"));
        }
        p.push('\n');
    }
    if !contract.details.is_empty() {
        p.push_str("## Details\n");
        for d in &contract.details {
            p.push_str(&format!("{d}\n"));
        }
        p.push('\n');
    }
    if !contract.accept.is_empty() {
        p.push_str("## Acceptance conditions\n");
        // Numbered: the reviewer's verdict refers to them by number.
        for (i, a) in contract.accept.iter().enumerate() {
            p.push_str(&format!("{}. {a}\n", i + 1));
        }
        p.push('\n');
    }
    if !contract.verify.is_empty() {
        p.push_str("## Gate (the runner runs these; all must pass)\n");
        for v in &contract.verify {
            p.push_str(&format!("- `{v}`\n"));
        }
        p.push('\n');
    }
    if !contract.scope.is_empty() {
        p.push_str(&format!("## Scope\nOnly these paths may change: {}\n\n", contract.scope.join(", ")));
    }
    match role {
        Role::Writer => p.push_str(WRITER_RULES),
        Role::Reviewer => {
            p.push_str(&format!("The base commit is {base_commit}.\n"));
            p.push_str(REVIEWER_RULES);
        }
    }
    if !feedback.trim().is_empty() {
        p.push_str("\n## Feedback from the previous round\n");
        p.push_str(feedback);
        p.push('\n');
    }
    p
}

/// Path helper: the per-call log directory of a round.
pub fn call_dir(item_dir: &Path, round: u32, role: Role, attempt: u32) -> PathBuf {
    item_dir.join(format!("round-{round:02}-{}-{attempt}", role.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_without_blocks_and_json() {
        let t = "Added sub.\n\nFINDINGS:\n- stale docs\n\nAll tests pass.\n{\"usage\":{\"input_tokens\":1}}\n";
        assert_eq!(strip_blocks(t), "Added sub.\n\nAll tests pass.");
    }

    #[test]
    fn blocks_are_parsed() {
        let text = "did it\n\nFINDINGS:\n- the README is stale\n- a flaky test\n\nQUESTION: should X be Y?\n\nFILES:\n- src/a.rs\n";
        let b = parse_blocks(text);
        assert_eq!(b.findings, vec!["the README is stale", "a flaky test"]);
        assert_eq!(b.question.as_deref(), Some("should X be Y?"));
        assert_eq!(b.files, vec!["src/a.rs"]);
        assert_eq!(parse_blocks("no blocks here"), Blocks::default());
    }
}
