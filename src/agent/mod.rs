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

    /// The phase a run is in while this role's agent works (`status`).
    pub fn phase(self) -> crate::outcome::Phase {
        match self {
            Role::Writer => crate::outcome::Phase::Writer,
            Role::Reviewer => crate::outcome::Phase::Review,
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
    /// Bytes the call may print, stdout and stderr together (config
    /// `max_agent_output`); past it the agent is killed and the call fails.
    pub max_output: u64,
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
    /// Input tokens reported in Anthropic's three parts (uncached input,
    /// cache reads, cache writes): their sum; `None` when none is given.
    pub(crate) fn input_of(
        input: Option<u64>,
        cache_read: Option<u64>,
        cache_creation: Option<u64>,
    ) -> Option<u64> {
        match (input, cache_read, cache_creation) {
            (None, None, None) => None,
            (a, b, c) => Some(a.unwrap_or(0) + b.unwrap_or(0) + c.unwrap_or(0)),
        }
    }

    /// Input plus output tokens (0 where unknown).
    pub fn total_tokens(&self) -> u64 {
        self.tokens_in
            .unwrap_or(0)
            .saturating_add(self.tokens_out.unwrap_or(0))
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
    /// Files the agent says it changed (checked against git by the proof):
    /// its `FILES:` block and [`Report::edited_files`].
    pub claimed_files: Vec<String>,
    /// Files the agent's own tool events show it changed (claude's
    /// Edit/Write calls that did not fail, codex's completed file changes),
    /// relative to the checkout where they are inside it; empty for
    /// `command` agents. A reviewer with any is void (docs/agents.md#read-only-reviewer), also when
    /// the file lies outside the checkout, where git cannot see it.
    pub edited_files: Vec<String>,
    /// What the agent's own channels said that a person should know although
    /// the call did not fail: tools its permissions denied, tool calls that
    /// failed, an agent ended after its final event because it did not exit.
    /// One sentence each, in the order seen.
    pub notes: Vec<String>,
}

/// How an agent call ended, as the round acts on it (docs/loop.md#writer,
/// docs/limits.md): the one closed set [`Report::end`] reads a report into.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEnd {
    /// The agent answered (its verdict or work is read by the round).
    Succeeded,
    /// The account's usage limit: sleep until the reset in the reading
    /// (`resets_at`, UTC, when the agent said), then call again.
    UsageLimit(LimitReading),
    /// Short throttling: wait (`retry_after` when the agent said) and call
    /// again.
    Transient(LimitReading),
    /// The call failed (nonzero exit, an error result): why, in a sentence.
    Failed(String),
    /// The call was killed at its timeout.
    TimedOut,
}

impl Report {
    /// What the call came to. A limit wins over a timeout or a failure: the
    /// agent stopped because of it, and the call is made again.
    pub fn end(&self) -> CallEnd {
        match self.limit.as_ref().map(|l| (l.kind, l)) {
            Some((LimitKind::UsageLimit, l)) => return CallEnd::UsageLimit(l.clone()),
            Some((LimitKind::Transient, l)) => return CallEnd::Transient(l.clone()),
            _ => {}
        }
        if self.outcome.timed_out {
            return CallEnd::TimedOut;
        }
        match &self.failure {
            Some(why) => CallEnd::Failed(why.clone()),
            None => CallEnd::Succeeded,
        }
    }

    /// True when the call hit an account usage limit (sleep until reset).
    pub fn hit_usage_limit(&self) -> bool {
        matches!(
            self.limit.as_ref().map(|l| &l.kind),
            Some(LimitKind::UsageLimit)
        )
    }
    /// True when the call was throttled briefly (retry soon).
    pub fn throttled(&self) -> bool {
        matches!(
            self.limit.as_ref().map(|l| &l.kind),
            Some(LimitKind::Transient)
        )
    }
}

/// Agent calls that could not even run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The process could not be started (missing executable, bad cwd).
    #[error("{role} agent ({kind}) could not start: {source}")]
    Spawn {
        role: &'static str,
        kind: AgentKind,
        source: process::ProcessError,
    },
    /// The per-call files could not be written.
    #[error("cannot write the {role} call's files under {dir}: {source}")]
    Files {
        role: &'static str,
        dir: PathBuf,
        source: std::io::Error,
    },
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
    let executable = |p: &Path| {
        p.is_file()
            && p.metadata()
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
    };
    let found = if program.contains('/') {
        executable(Path::new(program))
    } else {
        path.unwrap_or("")
            .split(':')
            .filter(|d| !d.is_empty())
            .any(|d| executable(&Path::new(d).join(program)))
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

/// Why a call whose output passed its cap failed, for the round's reason.
pub(crate) fn over_output_cap(call: &Call) -> String {
    format!(
        "killed: it printed more than {} (max_agent_output); the end of its output is kept",
        bytesize::ByteSize(call.max_output).display().iec()
    )
}

/// Builds the process command shared by every backend: cwd, env with `TZ`,
/// timeout, streamed log files, redaction, run-as.
pub(crate) fn base_command(
    argv: &[String],
    call: &Call,
    extra_env: &[(&str, String)],
) -> process::Command {
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
        .max_output(call.max_output)
        .stdout_file(call.log_dir.join(format!("{role}.stdout")))
        .stderr_file(call.log_dir.join(format!("{role}.stderr")))
        .redactor(crate::secret::Redactor::with_known(&call.secrets));
    if let Some(u) = &call.run_as {
        cmd = cmd.run_as(u.clone());
    }
    cmd
}

/// Writes the command protocol's files for one call and returns their paths:
/// (prompt, contract, feedback).
pub(crate) fn write_call_files(call: &Call) -> Result<(PathBuf, PathBuf, PathBuf), AgentError> {
    let err = |source| AgentError::Files {
        role: call.role.as_str(),
        dir: call.log_dir.clone(),
        source,
    };
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
            let _ = nix::unistd::chown(
                p.as_path(),
                Some(nix::unistd::Uid::from_raw(u.uid)),
                Some(nix::unistd::Gid::from_raw(u.gid)),
            );
        }
    }
    Ok((prompt, contract, feedback))
}

/// One stdout line of an agent that prints JSON lines, as read.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct JsonLine {
    /// The JSON objects on the line, in order: usually one; none for a
    /// line that is not JSON (a Node warning, a debug print, a blank line);
    /// several when events were printed without a newline between them or
    /// as one JSON array (`--output-format json --verbose`).
    pub objects: Vec<serde_json::Value>,
    /// The line began as a JSON object but ended inside it: the agent was
    /// killed while writing, or the line was cut at the runner's line cap.
    pub cut: bool,
}

/// What a JSON-lines agent printed on stdout besides its events: counted
/// and remembered so a failure can say what the agent printed instead.
#[derive(Debug, Default, Clone)]
pub struct StdoutNoise {
    /// Non-empty stdout lines that held no event (warnings, debug prints).
    pub other_lines: u32,
    /// The last of them, cut to 300 characters.
    pub last_other_line: Option<String>,
    /// The last non-empty stdout line began an event and was cut off.
    pub cut_last_line: bool,
}

impl StdoutNoise {
    /// Reads `line` with [`json_line`] and returns its events (none for a
    /// blank or non-JSON line), keeping count of what was not an event.
    pub fn read(&mut self, line: &str) -> Vec<serde_json::Value> {
        let read = json_line(line);
        if line.trim().is_empty() {
            return read.objects;
        }
        self.cut_last_line = read.cut;
        if read.objects.is_empty() && !read.cut {
            self.other_lines += 1;
            self.last_other_line = Some(cut_chars(line.trim(), 300));
        }
        read.objects
    }
}

/// Reads one stdout line of a JSON-lines agent (claude stream-json, codex
/// `exec --json`) the way real output comes: around the JSON may be
/// whitespace, a `\r`, a byte-order mark, or a prefix printed by something
/// else without a newline (an ANSI escape, a progress text); a line that
/// holds no JSON object is no event and never an error. Only the first
/// [`JSON_PREFIX_SCAN`] bytes are searched for where the JSON starts.
pub fn json_line(line: &str) -> JsonLine {
    use serde_json::Value;
    let t = line.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if t.is_empty() {
        return JsonLine::default();
    }
    let objects_of = |v: Value| -> Vec<Value> {
        match v {
            Value::Object(_) => vec![v],
            Value::Array(a) => a.into_iter().filter(Value::is_object).collect(),
            _ => Vec::new(),
        }
    };
    if t.starts_with('{') || t.starts_with('[') {
        match serde_json::from_str::<Value>(t) {
            Ok(v) => {
                return JsonLine {
                    objects: objects_of(v),
                    cut: false,
                };
            }
            // A value that runs to the end of the line unfinished.
            Err(e) if e.is_eof() => {
                return JsonLine {
                    objects: Vec::new(),
                    cut: t.starts_with('{'),
                };
            }
            // Events glued together (`{…}{…}`) or followed by junk.
            Err(_) => {}
        }
    }
    let limit = t.len().min(JSON_PREFIX_SCAN);
    let mut cut_start = false;
    // Only a `{` that opens an object (`{"…` or `{}`) starts an event.
    let opens_object = |i: usize| matches!(t[i + 1..].trim_start().chars().next(), Some('"' | '}'));
    for (start, _) in t
        .char_indices()
        .take_while(|(i, _)| *i < limit)
        .filter(|(i, c)| *c == '{' && opens_object(*i))
    {
        let mut objects = Vec::new();
        let mut cut = false;
        let mut values = serde_json::Deserializer::from_str(&t[start..]).into_iter::<Value>();
        loop {
            match values.next() {
                Some(Ok(v)) if v.is_object() => objects.push(v),
                Some(Err(e)) if e.is_eof() => {
                    cut = true;
                    break;
                }
                _ => break,
            }
        }
        if !objects.is_empty() {
            return JsonLine { objects, cut };
        }
        // The first `{` opened a value the line never closed: an event cut
        // short behind a prefix (inner braces of it are no better).
        if cut {
            cut_start = true;
            break;
        }
    }
    JsonLine {
        objects: Vec::new(),
        cut: cut_start,
    }
}

/// How far into a line [`json_line`] looks for the start of the JSON, in
/// bytes: prefixes printed before an event are short; a long line of prose
/// with braces in it is no event.
pub const JSON_PREFIX_SCAN: usize = 256;

/// The stderr line that says what went wrong: a crash first — a Rust panic
/// of any thread (`thread 'tokio-runtime-worker' panicked at src/x.rs:1:2:`,
/// with the message the line after it, as Rust prints it since 1.73) or a
/// runtime's panic line (Bun, which the claude binary is built on:
/// `panic(main thread): Segmentation fault at address 0x113`) — since
/// error lines logged before it (codex logs benign ERROR lines) did not end
/// the agent; else the first line that starts with `error` (any case;
/// clap's usage errors, Node's `Error: …`), `fatal` or `panic`, names an
/// uncaught exception, or is a log line at level ERROR
/// (`2026-03-04T17:48:31Z ERROR codex_api: …`); else the last non-empty
/// line that is not one of Node's warnings; `None` when stderr is blank.
pub fn telling_stderr_line(stderr: &str) -> Option<String> {
    let all: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let rust_panic = |l: &str| l.starts_with("thread '") && l.contains("' panicked at");
    if let Some(i) = all.iter().position(|l| rust_panic(l)) {
        let message = all.get(i + 1).filter(|m| {
            all[i].ends_with(':') && !m.starts_with("note: ") && !m.starts_with("stack backtrace")
        });
        let line = match message {
            Some(m) => format!("{} {m}", all[i]),
            None => all[i].to_string(),
        };
        return Some(cut_chars(&line, 400));
    }
    if let Some(l) = all
        .iter()
        .find(|l| l.starts_with("panic(") || l.starts_with("panic:"))
    {
        return Some(cut_chars(l, 400));
    }
    let is_error = |l: &&&str| {
        let lower = l.to_ascii_lowercase();
        lower.starts_with("error")
            || lower.starts_with("fatal")
            || lower.starts_with("panic")
            || lower.contains("uncaught")
            || lower.split_whitespace().nth(1) == Some("error")
    };
    let node_warning = |l: &&&str| l.starts_with("(node:") || l.starts_with("(Use `node --trace-");
    all.iter()
        .find(is_error)
        .or_else(|| all.iter().rev().find(|l| !node_warning(l)))
        .or(all.last())
        .map(|l| cut_chars(l, 400))
}

pub(crate) use crate::review::cut_chars;

/// Ends a call whose agent printed its final event but does not exit.
///
/// Real CLIs sometimes stay alive after their last word (claude 2.1.38
/// printed its `result` and kept stdout open until killed,
/// anthropics/claude-code#25629): without this the call would run into its
/// timeout, an hour later, and its finished work would be thrown away as
/// timed out. The adapter calls [`EndSignal::ended`] when the final event
/// arrives and [`EndSignal::activity`] on any later output; once the agent
/// has been silent for the grace period after its final event, the watch
/// cancels its own child token, which the process runner treats like a
/// cancellation (SIGTERM to the group, then SIGKILL). A cancellation of the
/// parent token (a signal to nightshift) passes through unchanged.
pub(crate) struct EndWatch {
    token: CancellationToken,
    signal: EndSignal,
    task: tokio::task::JoinHandle<()>,
}

/// The handle the stdout callback uses to tell an [`EndWatch`] what it saw.
#[derive(Clone)]
pub(crate) struct EndSignal(std::sync::Arc<std::sync::Mutex<EndState>>);

#[derive(Default)]
struct EndState {
    /// When the final event was seen (and nothing since).
    ended_at: Option<std::time::Instant>,
    /// The watch ended the process.
    fired: bool,
}

impl EndSignal {
    /// The agent printed its final event now.
    pub(crate) fn ended(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.ended_at = Some(std::time::Instant::now());
        }
    }
    /// The agent printed something after its final event: it is still
    /// working (a queued turn), so the grace starts again at its next final
    /// event.
    pub(crate) fn activity(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.ended_at = None;
        }
    }
}

/// Variable that sets the exit grace of `claude` and `codex` (how long the
/// CLI may stay silent after its final event before nightshift ends it; 30 s
/// by default) to this many milliseconds. For the tests of that grace;
/// production leaves it unset. Read from the call's environment, which is
/// nightshift's own less its secrets, so a test may also set it per call.
pub const EXIT_GRACE_ENV: &str = "NIGHTSHIFT_EXIT_GRACE_MS";

/// `default`, or the milliseconds in [`EXIT_GRACE_ENV`] of `env` when that is a number.
pub fn exit_grace(env: &BTreeMap<String, String>, default: Duration) -> Duration {
    env.get(EXIT_GRACE_ENV)
        .and_then(|v| v.trim().parse().ok())
        .map_or(default, Duration::from_millis)
}

impl EndWatch {
    /// Starts watching; pass [`EndWatch::token`] to the process runner
    /// instead of `parent`.
    pub(crate) fn start(parent: &CancellationToken, grace: Duration) -> EndWatch {
        let token = parent.child_token();
        let signal = EndSignal(Default::default());
        let (t, s) = (token.clone(), signal.clone());
        let tick = (grace / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = t.cancelled() => return,
                    _ = tokio::time::sleep(tick) => {}
                }
                let Ok(mut st) = s.0.lock() else { return };
                if st.ended_at.is_some_and(|at| at.elapsed() >= grace) {
                    st.fired = true;
                    t.cancel();
                    return;
                }
            }
        });
        EndWatch {
            token,
            signal,
            task,
        }
    }
    /// The token the agent's process runs under.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }
    /// A handle for the stdout callback.
    pub(crate) fn signal(&self) -> EndSignal {
        self.signal.clone()
    }
    /// Stops watching; true when the watch ended the agent after its final
    /// event (not a cancellation from outside).
    pub(crate) fn finish(self, parent: &CancellationToken) -> bool {
        self.task.abort();
        !parent.is_cancelled() && self.signal.0.lock().map(|s| s.fired).unwrap_or(false)
    }
}

/// Reads a usage limit from free text that is the agent's error/result
/// channel (docs/limits.md), with the call's zone.
pub(crate) fn limit_in_text(text: &str, tz: Tz) -> Option<LimitReading> {
    let r = limit::read_text(text, Utc::now(), tz);
    (r.kind != LimitKind::None).then_some(r)
}

/// Blocks a writer's final message may carry (docs/loop.md#findings-and-questions).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Blocks {
    /// `FINDINGS:` entries (proposals, filed as issues).
    pub findings: Vec<String>,
    /// `QUESTION:` text (blocks the item).
    pub question: Option<String>,
    /// `FILES:` entries (the writer's claim of what it changed).
    pub files: Vec<String>,
}

/// The kinds of block a writer's answer may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Findings,
    Question,
    Files,
}

/// The block `line` opens, and the text after its head on the same line.
/// The head is `FINDINGS:`, `QUESTION:` or `FILES:` at the start of the
/// line, also as models decorate it in markdown: a heading (`## QUESTION:`)
/// or bold (`**QUESTION:**`, `**FILES**:`, `__FINDINGS:__`).
fn block_head(line: &str) -> Option<(BlockKind, &str)> {
    let t = line.trim();
    let t = t.trim_start_matches('#').trim_start();
    let bare = t.trim_start_matches(['*', '_']);
    let decorated = bare.len() != t.len();
    for (name, kind) in [
        ("FINDINGS", BlockKind::Findings),
        ("QUESTION", BlockKind::Question),
        ("FILES", BlockKind::Files),
    ] {
        let Some(rest) = bare.strip_prefix(name) else {
            continue;
        };
        let Some(rest) = rest.trim_start_matches(['*', '_']).strip_prefix(':') else {
            continue;
        };
        let mut rest = rest.trim_start_matches(['*', '_']).trim();
        if decorated {
            // `**QUESTION: Should X?**`: the closing marks are no text.
            rest = rest.trim_end_matches(['*', '_']).trim_end();
        }
        return Some((kind, rest));
    }
    None
}

/// The text of a list item line (`- x`, `* x`, `+ x`, `• x`, `1. x`,
/// `1) x`), or `None` for a line that is not one.
fn list_item(t: &str) -> Option<&str> {
    for marker in ["- ", "* ", "+ ", "• "] {
        if let Some(rest) = t.strip_prefix(marker) {
            return Some(rest.trim());
        }
    }
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 && digits <= 3 {
        let rest = &t[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return Some(rest.trim());
        }
    }
    None
}

/// A `FILES:` entry as models write it, reduced to the path: `` `src/a.rs` ``,
/// `**src/a.rs**`, `src/a.rs (new)`, `src/a.rs — added sub`, `src/a.rs: x`;
/// `none` is no entry.
fn file_entry(entry: &str) -> Option<String> {
    // Bold marks only: `_` begins real names (`__init__.py`).
    let e = entry.trim().trim_start_matches('*').trim();
    let path = if let Some(inner) = e.strip_prefix('`') {
        inner.split('`').next().unwrap_or("")
    } else {
        let mut p = e;
        for sep in [" (", " — ", " – ", " - ", ": ", "\t"] {
            if let Some(i) = p.find(sep) {
                p = &p[..i];
            }
        }
        p.trim_end_matches([':', ',', ';', '*'])
    };
    let path = path.trim().trim_matches(['"', '\'']);
    // `FILES: none`: a claim of nothing.
    let nothing = ["none", "(none)", "n/a", "nothing", "-"]
        .iter()
        .any(|n| path.eq_ignore_ascii_case(n));
    (!path.is_empty() && !nothing).then(|| path.to_string())
}

/// A code fence line (```` ``` ```` or `~~~`, with or without a language).
fn is_fence(t: &str) -> bool {
    t.starts_with("```") || t.starts_with("~~~")
}

/// Parses `FINDINGS:`, `QUESTION:` and `FILES:` blocks (docs/loop.md#findings-and-questions): a line
/// that is the block's head followed by list items (`- ` as docs/loop.md#findings-and-questions
/// shows them; `*`, `+` and numbered items are read too; an indented line
/// continues a wrapped finding), until a blank line, a fence or a line that
/// is no item. A head may carry its first entry
/// on the same line and may be decorated in markdown ([`block_head`]).
/// A `QUESTION:` takes every following line until a blank line or a JSON
/// line (the usage report a `command` agent prints after it). `FILES:`
/// entries are reduced to their paths ([`file_entry`]).
pub fn parse_blocks(text: &str) -> Blocks {
    let mut b = Blocks::default();
    let mut current: Option<BlockKind> = None;
    let mut question: Vec<String> = Vec::new();
    for raw in text.lines() {
        let t = raw.trim();
        if t.is_empty() || is_fence(t) {
            current = None;
            continue;
        }
        if let Some((kind, rest)) = block_head(t) {
            current = Some(kind);
            match kind {
                BlockKind::Findings if !rest.is_empty() => {
                    b.findings.push(list_item(rest).unwrap_or(rest).to_string())
                }
                BlockKind::Question => {
                    question.clear();
                    if !rest.is_empty() {
                        question.push(rest.to_string());
                    }
                }
                BlockKind::Files if !rest.is_empty() => b
                    .files
                    .extend(rest.split_whitespace().filter_map(file_entry)),
                _ => {}
            }
            continue;
        }
        match current {
            Some(BlockKind::Findings) => match list_item(t) {
                Some(f) if !f.is_empty() => b.findings.push(f.to_string()),
                // An indented line that is no item continues the entry
                // above it (a long finding wrapped).
                None if raw.starts_with([' ', '\t']) && !b.findings.is_empty() => {
                    let last = b.findings.last_mut().expect("a finding");
                    last.push(' ');
                    last.push_str(t);
                }
                _ => current = None,
            },
            Some(BlockKind::Files) => match list_item(t) {
                Some(f) => b.files.extend(file_entry(f)),
                None => current = None,
            },
            // A JSON line (a usage report, a verdict) is machine talk, not
            // the question's text: it ends the block.
            Some(BlockKind::Question)
                if t.starts_with('{') && serde_json::from_str::<serde_json::Value>(t).is_ok() =>
            {
                current = None
            }
            // A question's lines are its text (numbered options included).
            Some(BlockKind::Question) => question.push(t.trim_start_matches("- ").to_string()),
            None => {}
        }
    }
    if !question.is_empty() {
        b.question = Some(question.join("\n"));
    }
    for f in std::mem::take(&mut b.files) {
        if !b.files.contains(&f) {
            b.files.push(f);
        }
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
        if block_head(t).is_some() {
            in_block = true;
            continue;
        }
        if in_block {
            if t.is_empty() || is_fence(t) {
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

/// The runner's rules every writer prompt carries (docs/loop.md#writer, docs/loop.md#findings-and-questions).
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

/// The reviewer's instructions (docs/loop.md#review).
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
pub fn compose_prompt(
    role: Role,
    contract: &crate::contract::Contract,
    feedback: &str,
    base_commit: &str,
) -> String {
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
        p.push_str(&format!(
            "## Scope\nOnly these paths may change: {}\n\n",
            contract.scope.join(", ")
        ));
    }
    p.push_str(&change_limits_section(contract));
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

/// The prompt's section on the change's size and the protected paths
/// (docs/loop.md#proof): the runner checks them from git after the writer.
fn change_limits_section(contract: &crate::contract::Contract) -> String {
    let l = &contract.limits;
    let mut s = format!(
        "## Size of the change\nAt most {} changed files and {} lines added and removed in all, counted by git against the base; a larger change fails the item.\n",
        l.max_changed_files.value, l.max_diff_lines.value
    );
    if !contract.protected.is_empty() {
        s.push_str(&format!(
            "These paths must never change, whatever the scope: {}\n",
            contract.protected.join(", ")
        ));
    }
    s.push('\n');
    s
}

/// Path helper: the per-call log directory of a round.
pub fn call_dir(item_dir: &Path, round: u32, role: Role, attempt: u32) -> PathBuf {
    item_dir.join(format!("round-{round:02}-{}-{attempt}", role.as_str()))
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
mod tests {
    use super::*;

    #[test]
    fn the_account_without_blocks_and_json() {
        let t = "Added sub.\n\nFINDINGS:\n- stale docs\n\nAll tests pass.\n{\"usage\":{\"input_tokens\":1}}\n";
        assert_eq!(strip_blocks(t), "Added sub.\n\nAll tests pass.");
    }

    #[test]
    fn json_lines_are_read_as_real_output_comes() {
        let obj = |l: &str| {
            json_line(l)
                .objects
                .iter()
                .map(|o| o["type"].as_str().unwrap_or("?").to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(obj(r#"{"type":"a"}"#), ["a"]);
        assert_eq!(obj("\u{feff}{\"type\":\"a\"}\r"), ["a"]);
        assert_eq!(
            obj("\u{1b}[2K\u{1b}[1G{\"type\":\"a\"}"),
            ["a"],
            "an ANSI prefix"
        );
        assert_eq!(
            obj(r#"{"type":"a"}{"type":"b"} {"type":"c"}"#),
            ["a", "b", "c"],
            "glued events"
        );
        assert_eq!(
            obj(r#"[{"type":"a"},{"type":"b"},3]"#),
            ["a", "b"],
            "a JSON array of events"
        );
        assert_eq!(obj(r#"{"type":"a"} trailing words"#), ["a"]);
        for noise in [
            "",
            "   ",
            "(node:123) Warning: something",
            "[DEBUG] {matcher} loaded",
            "function f() {",
            "[1, 2]",
            "42",
            "\"s\"",
            "{not json}",
        ] {
            let r = json_line(noise);
            assert!(r.objects.is_empty() && !r.cut, "{noise:?}: {r:?}");
        }
        // A line cut inside an event, with or without a prefix.
        assert!(json_line(r#"{"type":"result","result":"all do"#).cut);
        assert!(json_line(r#"> {"type":"result","result":"all do"#).cut);
        let r = json_line(r#"{"type":"a"}{"type":"b","x":"#);
        assert_eq!((r.objects.len(), r.cut), (1, true));
        // Braces deep inside a long line of prose are not looked for.
        let long = format!("{}{}", "x".repeat(JSON_PREFIX_SCAN + 10), r#"{"type":"a"}"#);
        assert!(json_line(&long).objects.is_empty());
    }

    #[test]
    fn the_telling_line_of_stderr() {
        assert_eq!(
            telling_stderr_line("warning: x\nError: boom\n  at y\n").as_deref(),
            Some("Error: boom")
        );
        assert_eq!(
            telling_stderr_line("a\n\nlast words\n\n").as_deref(),
            Some("last words")
        );
        assert_eq!(telling_stderr_line("node:internal/process/promises:391\n    triggerUncaughtException(err, true /* fromPromise */);\n").as_deref(), Some("triggerUncaughtException(err, true /* fromPromise */);"));
        assert_eq!(telling_stderr_line("2026-03-04T17:48:31Z  WARN codex_core: slow\n2026-03-04T17:48:31Z ERROR codex_api::endpoint::responses: error=http 500\n2026-03-04T17:48:32Z  INFO done\n").as_deref(), Some("2026-03-04T17:48:31Z ERROR codex_api::endpoint::responses: error=http 500"));
        assert_eq!(telling_stderr_line("killed by the OOM killer\n(node:42) Warning: something\n(Use `node --trace-warnings ...` to show where the warning was created)\n").as_deref(), Some("killed by the OOM killer"));
        assert_eq!(telling_stderr_line(" \n"), None);
        // A crash wins over error lines logged before it (openai/codex#7990:
        // a tokio worker's panic, its message on the next line).
        let rust = "2026-04-25T10:00:00Z ERROR codex_core::session: failed to record rollout items: thread x not found\nthread 'tokio-runtime-worker' panicked at core/src/util.rs:21:9:\nFunction call output is missing for call id: call_M\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            telling_stderr_line(rust).as_deref(),
            Some(
                "thread 'tokio-runtime-worker' panicked at core/src/util.rs:21:9: Function call output is missing for call id: call_M"
            )
        );
        assert_eq!(telling_stderr_line("thread 'main' panicked at 'index out of bounds', src/a.rs:1:2\nnote: run with `RUST_BACKTRACE=1`\n").as_deref(), Some("thread 'main' panicked at 'index out of bounds', src/a.rs:1:2"));
        // Bun's crash report (the claude binary; oven-sh/bun#24828).
        let bun = "============================================================\nBun v1.3.2 (b131639c) Linux x64 (baseline)\nArgs: \"claude\" \"-p\" \"fix the uncaught error\"\nElapsed: 1207ms | User: 359ms\n\npanic(main thread): Segmentation fault at address 0x113\noh no: Bun has crashed. This indicates a bug in Bun, not your code.\n\n https://bun.report/1.3.2/xyz\n";
        assert_eq!(
            telling_stderr_line(bun).as_deref(),
            Some("panic(main thread): Segmentation fault at address 0x113")
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_end_watch_ends_only_a_silent_agent_after_its_final_event() {
        let grace = Duration::from_millis(300);
        // Ended, then silent: the watch fires.
        let parent = CancellationToken::new();
        let w = EndWatch::start(&parent, grace);
        w.signal().ended();
        tokio::time::timeout(Duration::from_secs(5), w.token().cancelled())
            .await
            .expect("the watch ends a silent agent");
        assert!(w.finish(&parent));
        // Output after the final event restarts the wait; no final event, no end.
        let w = EndWatch::start(&parent, grace);
        w.signal().ended();
        tokio::time::sleep(grace / 2).await;
        w.signal().activity();
        tokio::time::sleep(grace * 2).await;
        assert!(!w.token().is_cancelled());
        assert!(!w.finish(&parent));
        // A cancellation from outside passes through and is not the watch's.
        let w = EndWatch::start(&parent, grace);
        parent.cancel();
        assert!(w.token().is_cancelled());
        assert!(!w.finish(&parent));
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

    #[test]
    fn blocks_are_read_as_models_decorate_them() {
        // Markdown heads (bold, heading), `*` and numbered items, CRLF.
        let text = "Done.\r\n\r\n**FINDINGS:**\r\n* the README is stale\r\n2. a flaky test\r\n\r\n## QUESTION:\r\nShould X be Y?\r\n1. keep X\r\n2. use Y\r\n\r\n**FILES**:\r\n- `src/a.rs`\r\n- src/b.rs (new)\r\n- `src/c.rs` — added sub\r\n- **src/d.rs**: tests\r\n- src/a.rs\r\n- __init__.py\r\n";
        let b = parse_blocks(text);
        assert_eq!(b.findings, ["the README is stale", "a flaky test"]);
        assert_eq!(
            b.question.as_deref(),
            Some("Should X be Y?\n1. keep X\n2. use Y")
        );
        assert_eq!(
            b.files,
            [
                "src/a.rs",
                "src/b.rs",
                "src/c.rs",
                "src/d.rs",
                "__init__.py"
            ]
        );
        assert_eq!(
            parse_blocks("**QUESTION: Which base should sub use?**\n")
                .question
                .as_deref(),
            Some("Which base should sub use?")
        );
        // The usage line a command agent prints next is not part of the question.
        let b = parse_blocks(
            "QUESTION: which colour?\n{\"usage\":{\"input_tokens\":10,\"output_tokens\":5,\"cost_usd\":0.01}}\n",
        );
        assert_eq!(b.question.as_deref(), Some("which colour?"));
        assert_eq!(
            parse_blocks("QUESTION: keep {a} or\n{b}?\n")
                .question
                .as_deref(),
            Some("keep {a} or\n{b}?"),
            "braces that are no JSON stay"
        );
        assert_eq!(
            parse_blocks("FILES: `a.rs`, `b.rs`\n").files,
            ["a.rs", "b.rs"]
        );
        assert_eq!(parse_blocks("FILES: none\n").files, Vec::<String>::new());
        // A finding wrapped over an indented line is one finding; an
        // unindented line after the block is not part of it.
        let b = parse_blocks(
            "FINDINGS:\n- the README mentions mul but the\n  code has no mul\n- flaky test\nDone.\n",
        );
        assert_eq!(
            b.findings,
            [
                "the README mentions mul but the code has no mul",
                "flaky test"
            ]
        );
        // A fence ends a block; words that merely begin with a head are none.
        let b = parse_blocks(
            "```\nFINDINGS:\n- in a fence\n```\nnot a finding\nFILESYSTEM: ok\nQUESTIONS: none\n",
        );
        assert_eq!(
            (b.findings, b.question, b.files),
            (vec!["in a fence".to_string()], None, vec![])
        );
        assert_eq!(
            strip_blocks("Added sub.\n\n**FINDINGS:**\n- x\n\nAll green."),
            "Added sub.\n\nAll green."
        );
    }
}

#[cfg(test)]
mod usage_tests {
    /// An agent's report of absurd counts saturates instead of overflowing
    /// (a panic in debug builds, a wrap past the token cap in release).
    #[test]
    fn huge_usage_reports_saturate() {
        let u = super::Usage {
            tokens_in: Some(u64::MAX),
            tokens_out: Some(u64::MAX),
            cost_usd: Some(1e308),
        };
        assert_eq!(u.total_tokens(), u64::MAX);
    }
}
