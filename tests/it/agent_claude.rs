//! The `claude` agent kind against the real Claude Code CLI (the pinned npm
//! package, run offline against the fake Messages API of
//! `tests/fakes/anthropic.rs`), and the run loop against replaying fake
//! `claude` executables (docs/agents.md#claude, issue 3).

use crate::common;
use crate::fakes;
use common::{Checkout, Table, doctor_line, json_with_repeat};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fakes::anthropic::{FakeAnthropic, Reply, Turn, tool};
use nightshift::agent::claude::StreamState;
use nightshift::agent::{self, Call, Role};
use nightshift::config::{AgentConfig, AgentKind};
use nightshift::limit::LimitKind;
use nightshift::review::Decision;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The pinned CLI version (tests/run.sh installs the same).
const CLAUDE_VERSION: &str = include_str!("../fakes/claude-code.version");

/// The real `claude` executable: installed by tests/run.sh under
/// `target/agent-clis/`, else installed here under a file lock.
pub(crate) fn real_claude() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/agent-clis");
    let bin = dir.join("node_modules/.bin/claude");
    let version = CLAUDE_VERSION.trim();
    let pkg = dir.join("node_modules/@anthropic-ai/claude-code/package.json");
    let installed = std::fs::read_to_string(&pkg)
        .map(|t| t.contains(&format!("\"version\": \"{version}\"")))
        .unwrap_or(false);
    if bin.exists() && installed {
        return bin;
    }
    let cmd = format!(
        "flock {d}.lock npm install --no-audit --no-fund --prefix {d} @anthropic-ai/claude-code@{version}",
        d = dir.display()
    );
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("sh").args(["-c", &cmd]).output();
    match out {
        Ok(o) if o.status.success() && bin.exists() => bin,
        Ok(o) => panic!(
            "the real claude CLI is missing and installing it failed; run tests/run.sh or:\n  {cmd}\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "the real claude CLI is missing and cannot be installed ({e}); run tests/run.sh or:\n  {cmd}"
        ),
    }
}

/// The environment the real CLI runs with: a private HOME, the fake API, a
/// fake key, and no update checks or telemetry.
pub(crate) fn cli_env(home: &Path, api: &str, oauth: bool) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("PATH".into(), std::env::var("PATH").unwrap_or_default());
    env.insert("HOME".into(), home.display().to_string());
    env.insert("ANTHROPIC_BASE_URL".into(), api.to_string());
    if oauth {
        env.insert(
            "CLAUDE_CODE_OAUTH_TOKEN".into(),
            "sk-ant-oat01-fake-test-token".into(),
        );
    } else {
        env.insert(
            "ANTHROPIC_API_KEY".into(),
            "sk-ant-api03-fake-test-key".into(),
        );
    }
    for (k, v) in [
        ("DISABLE_AUTOUPDATER", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
    ] {
        env.insert(k.into(), v.into());
    }
    env
}

fn call(w: &Checkout, role: Role, prompt: &str, env: BTreeMap<String, String>) -> Call {
    Call {
        role,
        round: 1,
        prompt: prompt.to_string(),
        contract_json: "{}".into(),
        feedback: String::new(),
        cwd: w.repo.clone(),
        timeout: Duration::from_secs(60),
        env,
        tz: "UTC".parse().unwrap(),
        log_dir: w.dir.path().join("logs"),
        secrets: vec![],
        run_as: None,
        max_output: nightshift::config::DEFAULT_MAX_AGENT_OUTPUT,
        sandbox: None,
    }
}

fn claude_agent(bin: &Path) -> AgentConfig {
    AgentConfig {
        kind: AgentKind::Claude,
        command: vec![bin.display().to_string()],
        permission_flags: None,
        model: None,
        account: None,
        fallback: None,
        allow_hosts: vec![],
    }
}

fn stdout_of(r: &agent::Report) -> String {
    r.outcome
        .stdout_path
        .as_ref()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .unwrap_or_default()
}

/// The stream the CLI printed, read back from the call's stdout file; with
/// `NIGHTSHIFT_RECORD_TRANSCRIPTS=DIR` it is also saved as `DIR/NAME.jsonl`
/// (how tests/data/transcripts/claude-real-*.jsonl were recorded).
fn stream_of(r: &agent::Report, name: &str, tz: chrono_tz::Tz) -> (String, StreamState) {
    let out = stdout_of(r);
    if let Ok(dir) = std::env::var("NIGHTSHIFT_RECORD_TRANSCRIPTS") {
        std::fs::write(Path::new(&dir).join(format!("{name}.jsonl")), &out).unwrap();
    }
    let mut st = StreamState::default();
    for l in out.lines() {
        st.feed(l, tz);
    }
    (out, st)
}

#[tokio::test(flavor = "multi_thread")]
async fn real_writer_edits_through_its_own_tools() {
    let bin = real_claude();
    let api = FakeAnthropic::start().await;
    let w = Checkout::new("repo");
    let calc = w.repo.join("calc.txt").display().to_string();
    api.writer([
        Reply::Tools(Some("Reading calc.txt first.".into()), vec![tool("Read", json!({"file_path": calc}))]),
        Reply::Tools(None, vec![tool("Edit", json!({"file_path": calc, "old_string": "add\n", "new_string": "add\nsub\n"}))]),
        Reply::Tools(None, vec![tool("Write", json!({"file_path": w.repo.join("notes.md").display().to_string(), "content": "sub added\n"}))]),
        // The project's own commands run too (the gate, a test): Bash.
        Reply::Tools(None, vec![tool("Bash", json!({"command": "wc -l < calc.txt && echo bash-ran-$((6*7))", "description": "count words"}))]),
        Reply::Text("Added sub to calc.txt.\n\nFINDINGS:\n- docs are stale\n".into()),
    ]);
    let c = call(
        &w,
        Role::Writer,
        "Add sub to calc.txt",
        cli_env(&w.home, &api.uri(), false),
    );
    let r = agent::call(&claude_agent(&bin), &c, &CancellationToken::new())
        .await
        .unwrap();
    let (out, st) = stream_of(&r, "claude-real-writer-edit", c.tz);
    assert!(
        r.failure.is_none(),
        "{:?}\n{out}\n{}",
        r.failure,
        r.outcome.stderr_tail
    );
    // The CLI's own Edit and Write tools changed the checkout.
    assert_eq!(
        std::fs::read_to_string(w.repo.join("calc.txt")).unwrap(),
        "add\nsub\n",
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(w.repo.join("notes.md")).unwrap(),
        "sub added\n",
        "{out}"
    );
    assert_eq!(api.left(), (0, 0), "every scripted turn was used");
    let first = &api.seen()[0];
    assert!(
        first
            .headers
            .iter()
            .any(|(k, v)| k == "x-api-key" && v == "sk-ant-api03-fake-test-key"),
        "{:?}",
        first.headers
    );
    assert!(
        api.seen()
            .iter()
            .all(|s| s.path.starts_with("/v1/messages")),
        "no other traffic: {:?}",
        api.seen().iter().map(|s| &s.path).collect::<Vec<_>>()
    );
    assert_eq!(
        r.text,
        "Added sub to calc.txt.\n\nFINDINGS:\n- docs are stale\n"
    );
    assert_eq!(agent::parse_blocks(&r.text).findings, ["docs are stale"]);
    assert_eq!(r.claimed_files, ["calc.txt", "notes.md"]);
    // Five model turns of TOKENS_IN/TOKENS_OUT, as the CLI summed them, and
    // the cost the CLI computed itself.
    let turns = api.turns(Turn::Writer).len() as u64;
    assert_eq!(turns, 5);
    let after_bash = api.turns(Turn::Writer)[4].body.to_string();
    assert!(
        after_bash.contains("bash-ran-42"),
        "the Bash tool ran: {after_bash}"
    );
    assert_eq!(
        r.usage.tokens_in,
        Some(turns * fakes::anthropic::TOKENS_IN),
        "{out}"
    );
    assert_eq!(
        r.usage.tokens_out,
        Some(turns * fakes::anthropic::TOKENS_OUT),
        "{out}"
    );
    let cost = r.usage.cost_usd.expect("the CLI reports total_cost_usd");
    assert!(cost > 0.0, "{cost}");
    let result = st.result.as_ref().unwrap();
    assert_eq!(result.usage.cost_usd, Some(cost));
    assert_eq!(
        (
            result.num_turns,
            result.terminal_reason.as_deref(),
            result.is_error
        ),
        (Some(5), Some("completed"), false)
    );
    // The real init event of the default writer flags, run as root.
    assert_eq!(st.permission_mode.as_deref(), Some("acceptEdits"));
    assert_eq!(st.version.as_deref(), Some(CLAUDE_VERSION.trim()));
    let tools = r.tools.clone().unwrap();
    assert!(
        ["Edit", "Write", "Bash", "Read"]
            .iter()
            .all(|t| tools.iter().any(|x| x == t)),
        "{tools:?}"
    );
    assert_eq!(r.mcp_servers.as_deref(), Some(&[][..]));
}

#[tokio::test(flavor = "multi_thread")]
async fn real_reviewer_is_read_only_and_its_verdict_is_read() {
    let bin = real_claude();
    let api = FakeAnthropic::start().await;
    let w = Checkout::new("repo");
    let calc = w.repo.join("calc.txt").display().to_string();
    api.reviewer([
        Reply::Tools(None, vec![tool("Read", json!({"file_path": calc})), tool("Grep", json!({"pattern": "add"}))]),
        // The CLI ends the session once StructuredOutput is called.
        Reply::Tools(None, vec![tool("StructuredOutput", json!({"verdict": "request_changes", "findings": ["calc.txt lacks sub"], "conditions": []}))]),
        // Second call: the model answers in prose with the JSON at the end and
        // ignores the schema; the CLI asks once more and the model says
        // something else. The verdict comes from the assistant text.
        Reply::Text("Fine.\n{\"verdict\":\"approve\",\"findings\":[]}".into()),
        Reply::Text("Done.".into()),
    ]);
    let before = common::tree_hash(&w.repo);
    let c = call(
        &w,
        Role::Reviewer,
        "Review the change",
        cli_env(&w.home, &api.uri(), false),
    );
    let r = agent::call(&claude_agent(&bin), &c, &CancellationToken::new())
        .await
        .unwrap();
    let (out, st) = stream_of(&r, "claude-real-reviewer-request-changes", c.tz);
    assert!(r.failure.is_none(), "{:?}\n{out}", r.failure);
    // The real init event of the reviewer flags: exactly the read tools (and
    // the CLI's StructuredOutput for --json-schema), no MCP servers, plan mode.
    let mut tools = r.tools.clone().unwrap();
    tools.sort();
    assert_eq!(tools, ["Glob", "Grep", "Read", "StructuredOutput"], "{out}");
    assert_eq!(r.mcp_servers.as_deref(), Some(&[][..]));
    assert_eq!(st.permission_mode.as_deref(), Some("plan"));
    assert_eq!(
        nightshift::review::tools_violation(
            r.tools.as_deref(),
            r.mcp_servers.as_deref(),
            agent::claude::READ_ONLY_TOOLS
        ),
        None
    );
    let v = r.verdict.clone().expect("a verdict");
    assert_eq!(
        (v.verdict, v.findings),
        (
            Decision::RequestChanges,
            vec!["calc.txt lacks sub".to_string()]
        )
    );
    assert!(
        st.result.as_ref().unwrap().structured_output.is_some(),
        "{out}"
    );
    // The read tools ran for real (their results went back to the model).
    let second = &api.turns(Turn::Reviewer)[1].body;
    assert!(
        second.to_string().contains("1\\tadd"),
        "the Read result reached the API: {second}"
    );
    assert_eq!(
        common::tree_hash(&w.repo),
        before,
        "a reviewer changed the checkout"
    );

    let r = agent::call(&claude_agent(&bin), &c, &CancellationToken::new())
        .await
        .unwrap();
    let (out, _) = stream_of(&r, "claude-real-reviewer-approve-in-text", c.tz);
    assert!(r.failure.is_none(), "{:?}\n{out}", r.failure);
    assert_eq!(
        r.verdict.map(|v| v.verdict),
        Some(Decision::Approve),
        "{out}"
    );
    assert_eq!(api.left(), (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn real_usage_limit_is_read_with_its_reset() {
    let bin = real_claude();
    let api = FakeAnthropic::start().await;
    let w = Checkout::new("repo");
    // A whole minute, so the CLI's text form (minutes) names the same instant.
    let reset = (chrono::Utc::now().timestamp() / 60 + 3 * 60 + 7) * 60;
    api.writer([Reply::UsageLimit { reset_epoch: reset }]);
    let mut c = call(
        &w,
        Role::Writer,
        "Add sub",
        cli_env(&w.home, &api.uri(), true),
    );
    c.tz = "Asia/Taipei".parse().unwrap();
    let r = agent::call(&claude_agent(&bin), &c, &CancellationToken::new())
        .await
        .unwrap();
    let (out, st) = stream_of(&r, "claude-real-usage-limit", c.tz);
    let auth = api.seen()[0].headers.clone();
    assert!(
        auth.iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer sk-ant-oat01-fake-test-token"),
        "a subscription login: {auth:?}"
    );
    let want = chrono::DateTime::from_timestamp(reset, 0).unwrap();
    let limit = r
        .limit
        .clone()
        .unwrap_or_else(|| panic!("no limit read from:\n{out}"));
    assert_eq!(limit.kind, LimitKind::UsageLimit);
    assert_eq!(limit.resets_at, Some(want), "{limit:?}");
    assert!(limit.source.contains("rate_limit_event"), "{limit:?}");
    assert!(r.hit_usage_limit());
    // The CLI's own message, in the call's TZ, parses to the same instant.
    assert!(
        r.text.starts_with("You've hit your 5-hour limit · resets ")
            && r.text.contains("(Asia/Taipei)"),
        "{}",
        r.text
    );
    let from_text = nightshift::limit::read_text(&r.text, chrono::Utc::now(), c.tz);
    assert_eq!(
        (from_text.kind, from_text.resets_at),
        (LimitKind::UsageLimit, Some(want)),
        "{from_text:?}"
    );
    let res = st.result.as_ref().unwrap();
    assert_eq!(
        (res.is_error, res.subtype.as_deref(), res.api_error_status),
        (true, Some("success"), Some(429))
    );
    assert_eq!(r.outcome.exit_code, Some(1));
    assert!(
        r.failure
            .as_deref()
            .unwrap()
            .contains("api_error_status 429"),
        "{:?}",
        r.failure
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_api_key_429_is_throttling_not_a_usage_limit() {
    let bin = real_claude();
    let api = FakeAnthropic::start().await;
    let w = Checkout::new("repo");
    // With an API key (no subscription login) the CLI retries the same 429
    // ten times with growing delays; a call cut short meanwhile was throttled.
    let reset = chrono::Utc::now().timestamp() + 3600;
    api.writer((0..11).map(|_| Reply::UsageLimit { reset_epoch: reset }));
    let mut c = call(
        &w,
        Role::Writer,
        "Add sub",
        cli_env(&w.home, &api.uri(), false),
    );
    c.timeout = Duration::from_secs(8);
    let r = agent::call(&claude_agent(&bin), &c, &CancellationToken::new())
        .await
        .unwrap();
    let (out, st) = stream_of(&r, "claude-real-api-key-429", c.tz);
    assert!(r.outcome.timed_out && st.api_retries >= 1, "{out}");
    assert_eq!(st.last_retry_status, Some(429), "{out}");
    assert!(!r.hit_usage_limit() && r.throttled(), "{:?}", r.limit);
    assert!(r.failure.unwrap().contains("error rate_limit, status 429"));
}

#[tokio::test(flavor = "multi_thread")]
async fn real_cli_without_a_server_retries_and_the_failure_says_so() {
    let bin = real_claude();
    let w = Checkout::new("repo");
    // Nothing listens on the discard port: the CLI retries with growing delays.
    let mut c = call(
        &w,
        Role::Writer,
        "Add sub",
        cli_env(&w.home, "http://127.0.0.1:9", false),
    );
    c.timeout = Duration::from_secs(10);
    let r = agent::call(&claude_agent(&bin), &c, &CancellationToken::new())
        .await
        .unwrap();
    let (out, st) = stream_of(&r, "claude-real-no-server", c.tz);
    assert!(r.outcome.timed_out, "{out}");
    assert!(st.api_retries >= 1, "{out}");
    assert!(
        r.limit.is_none(),
        "a network failure is no limit: {:?}",
        r.limit
    );
    let f = r.failure.unwrap();
    assert!(
        f.starts_with("timed out after 10s after ")
            && f.contains("API retr")
            && f.contains("status none"),
        "{f}"
    );
}

/// A writer whose permission flags add `extra` to the default ones.
/// The real CLI `bin` as the writer of "Add sub" in `w`, against `api`,
/// with `flags` as its permission flags: its report and stream (recorded
/// as `name`, see [`stream_of`]).
async fn real_writer(
    bin: &Path,
    w: &Checkout,
    api: &FakeAnthropic,
    flags: &[&str],
    name: &str,
) -> (agent::Report, String, StreamState) {
    let c = call(
        w,
        Role::Writer,
        "Add sub",
        cli_env(&w.home, &api.uri(), false),
    );
    let r = agent::call(&writer_with(bin, flags), &c, &CancellationToken::new())
        .await
        .unwrap();
    let (out, st) = stream_of(&r, name, c.tz);
    (r, out, st)
}

fn writer_with(bin: &Path, flags: &[&str]) -> AgentConfig {
    let mut a = claude_agent(bin);
    a.permission_flags = Some(flags.iter().map(|s| s.to_string()).collect());
    a
}

/// The fake API's answer that reads `calc` (the Read tool) with a word of text.
fn reads(calc: &str) -> Reply {
    Reply::Tools(
        Some("Reading.".into()),
        vec![tool("Read", json!({"file_path": calc}))],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn real_cli_turn_and_budget_limits_fail_in_the_clis_words_with_their_tokens() {
    let bin = real_claude();
    // --max-turns 1 with partial messages: stream_event lines between the
    // events, and an `error_max_turns` result whose `errors` say why.
    let api = FakeAnthropic::start().await;
    let w = Checkout::new("repo");
    let calc = w.repo.join("calc.txt").display().to_string();
    api.writer([
        reads(&calc),
        Reply::Tools(
            None,
            vec![tool(
                "Edit",
                json!({"file_path": calc, "old_string": "add\n", "new_string": "add\nsub\n"}),
            )],
        ),
    ]);
    let c = call(
        &w,
        Role::Writer,
        "Add sub",
        cli_env(&w.home, &api.uri(), false),
    );
    let a = writer_with(
        &bin,
        &[
            "--permission-mode",
            "acceptEdits",
            "--max-turns",
            "1",
            "--include-partial-messages",
        ],
    );
    let r = agent::call(&a, &c, &CancellationToken::new())
        .await
        .unwrap();
    let (out, st) = stream_of(&r, "claude-real-max-turns-partial", c.tz);
    assert!(out.contains(r#""type":"stream_event""#), "{out}");
    assert_eq!(
        r.failure.as_deref(),
        Some(
            "claude reported an error (terminal_reason max_turns, subtype error_max_turns, 2 turns): Reached maximum number of turns (1)"
        ),
        "{out}"
    );
    assert_eq!(
        (r.usage.tokens_in, r.usage.tokens_out),
        (
            Some(fakes::anthropic::TOKENS_IN),
            Some(fakes::anthropic::TOKENS_OUT)
        )
    );
    assert!(r.usage.cost_usd.is_some_and(|c| c > 0.0));
    assert!(r.limit.is_none() && st.noise.other_lines == 0);
    assert_eq!(
        std::fs::read_to_string(w.repo.join("calc.txt")).unwrap(),
        "add\n",
        "the second turn never ran"
    );

    // --max-budget-usd below one turn's cost: the real result's `usage` is all
    // zeros; the tokens spent are in `modelUsage`.
    let api = FakeAnthropic::start().await;
    let w = Checkout::new("repo");
    let calc = w.repo.join("calc.txt").display().to_string();
    api.writer([reads(&calc), Reply::Text("done".into())]);
    let (r, out, st) = real_writer(
        &bin,
        &w,
        &api,
        &[
            "--permission-mode",
            "acceptEdits",
            "--max-budget-usd",
            "0.001",
        ],
        "claude-real-budget",
    )
    .await;
    assert!(
        out.contains(r#""input_tokens":0"#) && out.contains(r#""inputTokens":1200"#),
        "{out}"
    );
    assert_eq!(
        (r.usage.tokens_in, r.usage.tokens_out),
        (
            Some(fakes::anthropic::TOKENS_IN),
            Some(fakes::anthropic::TOKENS_OUT)
        ),
        "{out}"
    );
    assert_eq!(r.usage.cost_usd, st.result.as_ref().unwrap().usage.cost_usd);
    let f = r.failure.unwrap();
    assert!(
        f.contains("subtype error_max_budget_usd")
            && f.ends_with(": Reached maximum budget ($0.001)"),
        "{f}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_cli_denied_and_failed_edits_are_told_not_claimed() {
    let bin = real_claude();
    let api = FakeAnthropic::start().await;
    let w = Checkout::new("repo");
    let calc = w.repo.join("calc.txt").display().to_string();
    api.writer([
        Reply::Tools(None, vec![tool("Read", json!({"file_path": calc}))]),
        // The tool refuses it: the string is not in the file.
        Reply::Tools(
            None,
            vec![tool(
                "Edit",
                json!({"file_path": calc, "old_string": "nope\n", "new_string": "x\n"}),
            )],
        ),
        // The permissions refuse these.
        Reply::Tools(
            None,
            vec![tool(
                "Bash",
                json!({"command": "rm -rf /tmp/nightshift-nothing-here", "description": "rm"}),
            )],
        ),
        Reply::Tools(
            None,
            vec![tool(
                "Write",
                json!({"file_path": w.repo.join("n.md").display().to_string(), "content": "x\n"}),
            )],
        ),
        Reply::Text("Done.".into()),
    ]);
    let (r, out, st) = real_writer(
        &bin,
        &w,
        &api,
        &[
            "--permission-mode",
            "default",
            "--allowedTools",
            "Read,Edit",
        ],
        "claude-real-denied",
    )
    .await;
    assert_eq!(r.failure, None, "{out}");
    assert!(out.contains(r#""subtype":"permission_denied""#), "{out}");
    assert_eq!(
        r.claimed_files,
        Vec::<String>::new(),
        "nothing was edited: {out}"
    );
    assert_eq!(
        std::fs::read_to_string(w.repo.join("calc.txt")).unwrap(),
        "add\n"
    );
    assert!(!w.repo.join("n.md").exists());
    assert_eq!(st.denied_tools, ["Bash", "Write"]);
    assert_eq!(
        r.notes,
        [
            "claude's permissions denied Bash, Write (see permission_flags)",
            "3 tool calls returned an error"
        ]
    );
}

/// Through a drain: a writer whose every edit its permissions denied ends
/// `no_changes` with the CLI's own report of the denial as the reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_drain_whose_writer_was_denied_says_why_nothing_changed() {
    let bin = real_claude().display().to_string();
    let api = FakeAnthropic::start().await;
    let mut f = common::Fixture::new();
    drain_env(&mut f, &api.uri());
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n[writer]\nkind = \"claude\"\ncommand = [\"{bin}\"]\npermission_flags = [\"--permission-mode\", \"default\", \"--allowedTools\", \"Read\"]\n\n[reviewer]\nkind = \"claude\"\ncommand = [\"{bin}\"]\n"
    ));
    f.write("NEXT.md", "- [ ] Add sub\n");
    api.writer([
        Reply::Tools(
            None,
            vec![tool(
                "Write",
                json!({"file_path": "calc.txt", "content": "add\nsub\n"}),
            )],
        ),
        Reply::Text("I could not write.".into()),
    ]);
    let out = f.approve_and_drain(&[]);
    common::assert_ok(&out, "drain");
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "no_changes", "{rep:#}");
    let reason = rep["items"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the writer changed nothing; its CLI reported:")
            && reason.contains("denied Write"),
        "{reason}"
    );
    assert!(
        f.db.sql("SELECT meta->>'notes' FROM agent_calls")
            .contains("denied Write")
    );
}

/// The environment nightshift passes on to the real CLI in a drain.
fn drain_env(f: &mut common::Fixture, api: &str) {
    for (k, v) in cli_env(&f.home, api, false) {
        if k != "PATH" && k != "HOME" {
            f.extra_env.push((k, v));
        }
    }
}

fn claude_config(f: &common::Fixture, writer: &str, reviewer: &str, extra: &str) {
    f.config(&format!("verify = [\"sh test.sh\"]\n{extra}\n[writer]\nkind = \"claude\"\ncommand = [\"{writer}\"]\n\n[reviewer]\nkind = \"claude\"\ncommand = [\"{reviewer}\"]\n"));
}

/// `doctor` asks the real CLI whether it is logged in (`claude auth status`,
/// no usage spent): logged out in an empty HOME, in with an API key.
#[test]
fn doctor_asks_the_real_cli_whether_it_is_logged_in() {
    let bin = real_claude().display().to_string();
    let mut f = common::Fixture::new();
    f.extra_env.extend([
        ("DISABLE_AUTOUPDATER".to_string(), "1".to_string()),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_string(),
            "1".to_string(),
        ),
    ]);
    claude_config(&f, &bin, &bin, "");
    let out = f.run(&["doctor"]);
    let line = doctor_line(&out, "writer");
    assert!(
        line.starts_with("FAIL")
            && line.contains("2.1.")
            && line.contains("not logged in")
            && line.contains("claude auth login"),
        "{}",
        common::text(&out)
    );
    assert!(
        doctor_line(&out, "reviewer").starts_with("FAIL"),
        "{}",
        common::text(&out)
    );
    assert_eq!(out.status.code(), Some(1));

    f.extra_env.push((
        "ANTHROPIC_API_KEY".into(),
        "sk-ant-api03-fake-doctor-key".into(),
    ));
    let out = f.run(&["doctor"]);
    let line = doctor_line(&out, "writer");
    assert!(
        line.starts_with("ok") && line.contains("logged in: api_key from ANTHROPIC_API_KEY"),
        "{}",
        common::text(&out)
    );
    assert!(
        !common::text(&out).contains("sk-ant-api03-fake-doctor-key"),
        "the key is never printed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_cli_drain_opens_a_pr_whose_ledger_carries_its_tokens_and_cost() {
    let bin = real_claude().display().to_string();
    let api = FakeAnthropic::start().await;
    let gh = common::github::FakeGitHub::start().await;
    let mut f = common::Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_claude_e2e_token_0123456789".into());
    drain_env(&mut f, &api.uri());
    claude_config(&f, &bin, &bin, "[limits]\nrounds = 2\n");
    f.write(
        "NEXT.md",
        "# calc\n\n- [ ] Add sub\n  - accept: calc.txt lists sub\n  - scope: calc.txt\n",
    );
    // Round 1: the writer edits, the reviewer asks for more; round 2: the
    // writer edits again, the reviewer approves.
    api.writer([
        Reply::Tools(None, vec![tool("Read", json!({"file_path": "calc.txt"}))]),
        Reply::Tools(
            None,
            vec![tool(
                "Edit",
                json!({"file_path": "calc.txt", "old_string": "add\n", "new_string": "add\nsub\n"}),
            )],
        ),
        Reply::Text("Added sub.".into()),
        Reply::Tools(None, vec![tool("Read", json!({"file_path": "calc.txt"}))]),
        Reply::Tools(
            None,
            vec![tool(
                "Edit",
                json!({"file_path": "calc.txt", "old_string": "sub\n", "new_string": "sub\nmul\n"}),
            )],
        ),
        Reply::Text("Added mul as asked.".into()),
    ]);
    api.reviewer([
        Reply::Tools(None, vec![tool("StructuredOutput", json!({"verdict": "request_changes", "findings": ["add mul too"], "conditions": [{"index": 1, "met": true, "evidence": "calc.txt line 2"}]}))]),
        Reply::Tools(None, vec![tool("StructuredOutput", json!({"verdict": "approve", "findings": [], "conditions": [{"index": 1, "met": true, "evidence": "calc.txt line 2 reads sub"}]}))]),
    ]);
    let out = f.approve_and_drain(&[]);
    common::assert_ok(&out, "drain");
    let report = f.report();
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "pr_opened", "{report:#}");
    assert_eq!(item["rounds"], 2, "{report:#}");
    assert_eq!(api.left(), (0, 0));
    let prs = gh.prs();
    assert_eq!(prs.len(), 1);
    let body = prs[0]["body"].as_str().unwrap();
    assert!(
        body.contains(
            "- [ ] calc.txt lists sub\n  — reviewer: met; evidence: calc.txt line 2 reads sub"
        ),
        "{body}"
    );
    let branch = &f.remote_branches()[0];
    assert_eq!(
        common::git(&f.remote, &["show", &format!("{branch}:calc.txt")]),
        "add\nsub\nmul"
    );
    // The ledger rows carry what the CLI reported: 3 writer turns and 1
    // reviewer turn per round, TOKENS_IN/TOKENS_OUT each, and its costs.
    let rows =
        f.db.sql("SELECT role, tokens_in, tokens_out, cost_usd FROM agent_calls ORDER BY id");
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let (ti, to) = (fakes::anthropic::TOKENS_IN, fakes::anthropic::TOKENS_OUT);
    let mut total = 0.0;
    for (row, turns) in rows.iter().zip([3u64, 1, 3, 1]) {
        assert_eq!(
            row[1..3],
            [(turns * ti).to_string(), (turns * to).to_string()],
            "{rows:?}"
        );
        let cost: f64 = row[3].parse().unwrap();
        assert!(cost > 0.0, "{rows:?}");
        total += cost;
    }
    assert_eq!(
        rows.iter().map(|r| r[0]).collect::<Vec<_>>(),
        ["writer", "reviewer", "writer", "reviewer"]
    );
    let item_cost: f64 = f.db.sql("SELECT cost_usd FROM run_items").parse().unwrap();
    assert!(
        (item_cost - total).abs() < 1e-9,
        "run_items.cost_usd {item_cost} vs the calls' sum {total}"
    );
    // `report --json` shows the same figures.
    assert!(
        (item["cost_usd"].as_f64().unwrap() - total).abs() < 1e-9,
        "{item:#}"
    );
    assert_eq!(item["tokens"], 8 * (ti + to), "{item:#}");
    gh.assert_never_merged_approved_or_closed().await;
}

// ---- Replays: the fake `claude` of tests/fakes/claude through the real binary.

/// A recorded transcript from tests/data/transcripts/.
fn transcript(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/transcripts")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Lines of a transcript whose `type` (and `subtype`) match.
fn events(t: &str, ty: &str, subtype: Option<&str>) -> Vec<String> {
    t.lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["type"] == ty && subtype.is_none_or(|s| v["subtype"] == s)
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A drain world whose writer and reviewer are the replaying fake `claude`;
/// `steps` are (file name under FAKE_CLAUDE_DIR, content).
async fn replay_world(
    steps: &[(&str, String)],
    extra: &str,
) -> (common::Fixture, common::github::FakeGitHub, PathBuf) {
    let gh = common::github::FakeGitHub::start().await;
    let mut f = common::Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_claude_replay_token_0123456789".into());
    // Beside the agents: the fixture lets sandboxed calls write there.
    let script_dir = f.agents.join("fake-claude");
    std::fs::create_dir_all(&script_dir).unwrap();
    for (name, body) in steps {
        std::fs::write(script_dir.join(name), body).unwrap();
    }
    f.extra_env
        .push(("FAKE_CLAUDE_DIR".into(), script_dir.display().to_string()));
    let fake = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fakes/claude")
        .display()
        .to_string();
    claude_config(&f, &fake, &fake, extra);
    f.write(
        "NEXT.md",
        "# calc\n\n- [ ] Add sub\n  - accept: calc.txt lists sub\n  - scope: calc.txt\n",
    );
    (f, gh, script_dir)
}

/// A replay world whose writer is the real CLI's edit of calc.txt and
/// whose reviewer replays `reviewer` (a transcript).
async fn with_reviewer(reviewer: String) -> (common::Fixture, common::github::FakeGitHub) {
    let (f, gh, _) = replay_world(
        &[
            ("writer-1.sh", "echo sub >> calc.txt\n".into()),
            (
                "writer-1.jsonl",
                transcript("claude-real-writer-edit.jsonl"),
            ),
            ("reviewer-1.jsonl", reviewer),
        ],
        "",
    )
    .await;
    (f, gh)
}

/// The lines of a transcript after its first (the init event).
fn after_init(transcript: &str) -> String {
    transcript
        .lines()
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Drains and asserts the one item ended `review_void` for a reason that
/// contains `because`.
fn assert_review_void(f: &common::Fixture, because: &str) {
    let item = drained_item(f);
    assert_eq!(item["outcome"], "review_void", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(reason.contains(because), "{item:#}");
}

fn drained_item(f: &common::Fixture) -> serde_json::Value {
    let out = f.approve_and_drain(&[]);
    let report = f.report();
    assert!(out.status.code().is_some(), "{}", common::text(&out));
    report["items"][0].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_writer_error_result_is_a_failed_round_not_a_limit() {
    // The real CLI's init and retries, then the captured connection-refused
    // result (`is_error: true` with `subtype: "success"`), exit 1.
    let no_server = transcript("claude-real-no-server.jsonl");
    let mut failed = events(&no_server, "system", Some("init")).concat();
    failed.push_str(&events(&no_server, "system", Some("api_retry")).concat());
    failed.push_str(&transcript("claude-json-result-connection-refused.json"));
    let (f, gh, dir) = replay_world(
        &[
            ("writer-1.jsonl", failed.clone()),
            ("writer-2.jsonl", failed),
        ],
        "[limits]\nrounds = 2\n",
    )
    .await;
    let item = drained_item(&f);
    assert_eq!(item["outcome"], "error", "{item:#}");
    assert_eq!(item["rounds"], 2, "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(
        reason.contains("Connection refused")
            && reason.contains("terminal_reason api_error")
            && reason.contains("4 API retries"),
        "{reason}"
    );
    assert_eq!(
        f.db.count(Table::LimitSleeps),
        0,
        "a network failure is not a usage limit"
    );
    assert_eq!(
        f.db.sql("SELECT string_agg(COALESCE(cost_usd::text, 'null'), ',') FROM agent_calls"),
        "0,0"
    );
    assert!(gh.prs().is_empty());
    // The adapter's argv passed the fake's strict parsing: prompt after `--`.
    let argv = std::fs::read_to_string(dir.join("writer-1.argv")).unwrap();
    assert!(argv.starts_with("-p\n--output-format\nstream-json\n--verbose\n--permission-mode\nacceptEdits\n--allowedTools\n"), "{argv}");
    assert!(argv.contains("\n--\n# Item: Add sub"), "{argv}");
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_empty_result_still_uses_the_assistant_text() {
    // The public transcript (result "" although the model answered, and a
    // rate_limit_event with status "allowed"), its answer turned into a question.
    let t = transcript("claude-stream-json-overage-rejected.jsonl")
        .replace("\\n\\nHello.", "QUESTION: Which base should sub use?");
    assert!(t.contains("\"result\":\"\""));
    let (f, gh, _) = replay_world(&[("writer-1.jsonl", t)], "").await;
    let item = drained_item(&f);
    assert_eq!(item["outcome"], "blocked", "{item:#}");
    assert_eq!(item["question"], "Which base should sub use?", "{item:#}");
    assert_eq!(
        f.db.count(Table::LimitSleeps),
        0,
        "status allowed is no limit"
    );
    assert_eq!(
        f.db.sql("SELECT tokens_in || '/' || tokens_out || '/' || cost_usd FROM agent_calls"),
        "3/6/0.024"
    );
    assert!(gh.prs().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_failed_call_whose_model_text_quotes_a_limit_is_not_a_limit() {
    // The model's last words quote a limit message (it was working on a limit parser), then
    // the call fails without a result text (max turns). Only the CLI's own channels may say
    // "limit": the model's prose is not read, so this is a failed round, not a sleep.
    let edit = transcript("claude-real-writer-edit.jsonl");
    let mut t = events(&edit, "system", Some("init")).concat();
    t.push_str(&format!("{}\n", json!({"type":"assistant","message":{"content":[{"type":"text","text":"Done: the parser now reads `You've hit your limit · resets 7pm` as a usage limit."}]}})));
    t.push_str(&format!("{}\n", json!({"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":4,"terminal_reason":"max_turns"})));
    let limits = "[limits]\nrounds = 1\nlimit_sleep_min = \"1s\"\nlimit_sleep_max = \"1s\"\nitem_timeout = \"30s\"\n";
    let (f, gh, _) = replay_world(
        &[("writer-1.jsonl", t.clone()), ("writer-2.jsonl", t)],
        limits,
    )
    .await;
    let item = drained_item(&f);
    assert_eq!(
        f.db.count(Table::LimitSleeps),
        0,
        "model prose is not a limit: {item:#}"
    );
    assert_eq!(item["outcome"], "error", "{item:#}");
    assert!(gh.prs().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_rejected_plan_carried_by_extra_usage_keeps_its_round() {
    // claude's rate_limit_event says the plan's limit is hit ("rejected") while extra usage
    // carries the call (`overageStatus: allowed`, `isUsingOverage: true`): the call goes on
    // and succeeds, so its round is kept, not thrown away for a sleep.
    let edit = transcript("claude-real-writer-edit.jsonl");
    let event = json!({"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1796055300,"rateLimitType":"five_hour","overageStatus":"allowed","isUsingOverage":true}});
    let mut lines: Vec<String> = edit.lines().map(|l| format!("{l}\n")).collect();
    lines.insert(1, format!("{event}\n"));
    let limits = "[limits]\nrounds = 1\nlimit_sleep_min = \"1s\"\nlimit_sleep_max = \"1s\"\nitem_timeout = \"30s\"\n";
    let (f, gh, _) = replay_world(
        &[
            ("writer-1.sh", "echo sub >> calc.txt\n".into()),
            ("writer-1.jsonl", lines.concat()),
            ("writer-2.sh", "echo sub >> calc.txt\n".into()),
            ("writer-2.jsonl", lines.concat()),
            (
                "reviewer-1.jsonl",
                transcript("claude-real-reviewer-approve-in-text.jsonl"),
            ),
        ],
        limits,
    )
    .await;
    let item = drained_item(&f);
    assert_eq!(
        f.db.count(Table::LimitSleeps),
        0,
        "extra usage carried the call: {item:#}"
    );
    assert_eq!(item["outcome"], "pr_opened", "{item:#}");
    assert_eq!(gh.prs().len(), 1);
}

/// A transcript as it can reach a pipe: CRLF endings, a byte-order mark,
/// Node's warnings and a debug print between the events, ANSI escapes
/// before one, partial-message and hook events, an event type and fields no
/// version printed yet, and a tool result of 5 MiB (a big file read), longer
/// than the runner hands whole to the adapter.
fn noisy(t: &str) -> String {
    let mut out = String::from("\u{feff}");
    for (i, l) in t.lines().enumerate() {
        if i == 1 {
            let big = "x".repeat(5 << 20);
            out.push_str(&format!("{}\r\n", json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_big","content":big}]},"parent_tool_use_id":null})));
            out.push_str("(node:4242) Warning: Setting the NODE_TLS_REJECT_UNAUTHORIZED environment variable to '0' makes TLS connections insecure.\r\n");
            out.push_str(
                "(Use `node --trace-warnings ...` to show where the warning was created)\r\n",
            );
            out.push_str(r#"{"type":"system","subtype":"hook_response","hook_name":"SessionStart:Callback","hook_event":"SessionStart","stdout":"","stderr":"","exit_code":0}"#);
            out.push_str("\r\n");
            out.push_str(r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}},"parent_tool_use_id":null}"#);
            out.push_str("\r\n");
            out.push_str(r#"{"type":"tool_progress","tool_use_id":"t","elapsed_time_seconds":1,"new_field":{"x":[1]}}"#);
            out.push_str("\r\n[DEBUG] MCP server \"none\": {} connected\r\n");
        }
        if l.contains(r#""type":"result""#) {
            out.push_str("\u{1b}[2K\u{1b}[1G");
        }
        out.push_str(l);
        out.push_str("\r\n");
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_streams_with_noise_between_events_are_read_whole() {
    let writer = noisy(&transcript("claude-real-writer-edit.jsonl"));
    let reviewer = noisy(&transcript("claude-real-reviewer-approve-in-text.jsonl"));
    assert!(writer.starts_with('\u{feff}') && reviewer.contains("\u{1b}[2K\u{1b}[1G{"));
    let (f, gh, _) = replay_world(
        &[
            ("writer-1.sh", "echo sub >> calc.txt\n".into()),
            ("writer-1.jsonl", writer),
            ("reviewer-1.jsonl", reviewer),
        ],
        "",
    )
    .await;
    let item = drained_item(&f);
    // The reviewer's init (behind the BOM) was read: its tools were checked.
    assert_eq!(item["outcome"], "pr_opened", "{item:#}");
    assert_eq!(gh.prs().len(), 1);
    // The results (behind ANSI escapes) were read: tokens and cost as the CLI reported.
    let tokens: Vec<String> = f.db.calls().iter().map(|c| c.role_and_tokens()).collect();
    assert_eq!(tokens, ["writer:4800/320", "reviewer:2400/160"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_writer_killed_mid_stream_is_a_failed_round_that_says_so() {
    // The real writer's stream, cut off inside its result line; the process
    // then dies (137: killed by the OOM killer). Its edit is on disk.
    let edit = transcript("claude-real-writer-edit.jsonl");
    let cut = &edit[..edit.rfind(r#""result":"#).unwrap() + 20];
    let steps = [
        ("writer-1.sh", "echo sub >> calc.txt\n".to_string()),
        ("writer-1.jsonl", cut.to_string()),
        ("writer-1.exit", "137".into()),
    ];
    let (f, gh, _) = replay_world(&steps, "[limits]\nrounds = 1\n").await;
    let item = drained_item(&f);
    assert_eq!(item["outcome"], "error", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(
        reason.contains("claude ended (code 137) without a result event")
            && reason.contains("its last line was cut off"),
        "{reason}"
    );
    assert!(gh.prs().is_empty(), "half-done work is never proposed");
    assert_eq!(f.db.count(Table::Reviews), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_cli_that_does_not_exit_after_its_result_is_ended_and_the_result_stands() {
    let w = Checkout::new("repo");
    let dir = w.dir.path().join("fake-claude");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("writer-1.jsonl"),
        transcript("claude-real-writer-edit.jsonl"),
    )
    .unwrap();
    std::fs::write(dir.join("writer-1.hang"), "").unwrap();
    let mut env = cli_env(&w.home, "http://127.0.0.1:9", false);
    env.insert("FAKE_CLAUDE_DIR".into(), dir.display().to_string());
    // The grace shortened from its 30 s (agent::EXIT_GRACE_ENV) to 1 s.
    env.insert(agent::EXIT_GRACE_ENV.into(), "1000".into());
    let mut c = call(&w, Role::Writer, "Add sub", env);
    c.timeout = Duration::from_secs(300);
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fakes/claude");
    let r = agent::call(&claude_agent(&fake), &c, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.failure, None, "{:?}", r.outcome);
    assert!(!r.outcome.timed_out);
    let grace = Duration::from_secs(1);
    assert!(
        r.outcome.duration >= grace && r.outcome.duration < grace + Duration::from_secs(20),
        "{:?}",
        r.outcome.duration
    );
    assert_eq!(
        r.notes,
        ["claude did not exit within 1s of its result and was ended"]
    );
    assert!(r.text.starts_with("Added sub to calc.txt."));
    assert_eq!(r.usage.tokens_in, Some(4800));
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_requests_changes_then_approves() {
    let writer = transcript("claude-real-writer-edit.jsonl");
    let (f, gh, dir) = replay_world(
        &[
            ("writer-1.sh", "echo sub >> calc.txt\n".into()),
            ("writer-1.jsonl", writer.clone()),
            (
                "reviewer-1.jsonl",
                transcript("claude-real-reviewer-request-changes.jsonl"),
            ),
            ("writer-2.sh", "echo mul >> calc.txt\n".into()),
            ("writer-2.jsonl", writer),
            (
                "reviewer-2.jsonl",
                transcript("claude-real-reviewer-approve-in-text.jsonl"),
            ),
        ],
        "[limits]\nrounds = 3\n",
    )
    .await;
    let item = drained_item(&f);
    assert_eq!(item["outcome"], "pr_opened", "{item:#}");
    assert_eq!(item["rounds"], 2, "{item:#}");
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(f.db.verdicts().join(","), "request_changes,approve");
    // Round 2's writer got the reviewer's finding as feedback.
    let argv = std::fs::read_to_string(dir.join("writer-2.argv")).unwrap();
    assert!(argv.contains("calc.txt lacks sub"), "{argv}");
    // The reviewer ran with the read-only flags and the verdict schema.
    let argv = std::fs::read_to_string(dir.join("reviewer-1.argv")).unwrap();
    assert!(
        argv.contains(
            "--permission-mode\nplan\n--tools\nRead,Grep,Glob\n--strict-mcp-config\n--json-schema\n"
        ),
        "{argv}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_with_write_tools_is_void() {
    // A reviewer session whose init is the real writer's (Write, Bash, ...).
    let approve = transcript("claude-real-reviewer-approve-in-text.jsonl");
    let mut t = events(
        &transcript("claude-real-writer-edit.jsonl"),
        "system",
        Some("init"),
    )
    .concat();
    t.push_str(&after_init(&approve));
    let (f, gh) = with_reviewer(t).await;
    let item = drained_item(&f);
    assert_eq!(item["outcome"], "review_void", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(
        reason.contains("Bash") && reason.contains("Write"),
        "{reason}"
    );
    assert!(gh.prs().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_that_edits_is_void() {
    // Its init and verdict look clean; it changed the checkout anyway.
    let (f, gh, _) = replay_world(
        &[
            ("writer-1.sh", "echo sub >> calc.txt\n".into()),
            (
                "writer-1.jsonl",
                transcript("claude-real-writer-edit.jsonl"),
            ),
            ("reviewer-1.sh", "echo div >> calc.txt\n".into()),
            (
                "reviewer-1.jsonl",
                transcript("claude-real-reviewer-approve-in-text.jsonl"),
            ),
        ],
        // The second line: inside the sandbox the reviewer's slot is
        // read-only and the edit is refused (tests/it/sandbox.rs).
        "[sandbox]\nmode = \"off\"\n",
    )
    .await;
    assert_review_void(&f, "checkout changed");
    assert!(gh.prs().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_unknown_flag_fails_like_the_real_cli() {
    let (f, gh, dir) = replay_world(
        &[(
            "writer-1.jsonl",
            transcript("claude-real-writer-edit.jsonl"),
        )],
        "",
    )
    .await;
    let fake = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fakes/claude")
        .display()
        .to_string();
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n[limits]\nrounds = 1\n[writer]\nkind = \"claude\"\ncommand = [\"{fake}\"]\npermission_flags = [\"--yolo\"]\n[reviewer]\nkind = \"claude\"\ncommand = [\"{fake}\"]\n"
    ));
    let item = drained_item(&f);
    assert_eq!(item["outcome"], "error", "{item:#}");
    assert!(
        item["reason"]
            .as_str()
            .unwrap()
            .contains("error: unknown option '--yolo'"),
        "{item:#}"
    );
    assert!(!dir.join("count-writer").exists(), "nothing was replayed");
    assert!(gh.prs().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn fake_claude_refuses_what_the_real_cli_refuses() {
    // The same argv to the real CLI and to the replaying fake: the same exit
    // code, and every line the fake prints is one the real CLI prints.
    let real = real_claude();
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fakes/claude");
    let w = Checkout::new("repo");
    let base = ["-p", "--output-format", "stream-json", "--verbose"];
    let cases: Vec<Vec<&str>> = vec![
        vec!["--yolo", "--", "x"],
        vec!["--no-such-option=3", "--", "x"],
        vec!["--permission-mode=sudo", "--", "x"],
        vec!["--permission-mode", "sudo", "--", "x"],
        vec!["--allowedTools", "Bash,Edit", "Add sub to calc.txt"],
        vec!["--tools", "Read,Grep,Glob", "review"],
        vec!["--dangerously-skip-permissions", "--", "x"],
        vec!["--model"],
        vec!["--allowedTools"],
        vec!["-n"],
    ];
    let mut env = cli_env(&w.home, "http://127.0.0.1:9", false);
    env.insert("FAKE_CLAUDE_DIR".into(), w.dir.path().display().to_string());
    let run = |bin: &Path, args: &[&str]| {
        // `timeout`: an argv the CLI accepted would otherwise retry the
        // closed port for minutes.
        let out = Command::new("timeout")
            .arg("30")
            .arg(bin)
            .args(args)
            .current_dir(&w.repo)
            .env_clear()
            .envs(&env)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let mut checked = 0;
    for case in cases
        .iter()
        .chain([vec!["--output-format", "yaml", "--", "x"]].iter())
    {
        let args: Vec<&str> = if case[0] == "--output-format" {
            ["-p", "--verbose"]
                .iter()
                .chain(case.iter())
                .copied()
                .collect()
        } else {
            base.iter().chain(case.iter()).copied().collect()
        };
        if args.contains(&"--dangerously-skip-permissions") && !nix::unistd::geteuid().is_root() {
            continue;
        }
        let (rc_real, err_real) = run(&real, &args);
        let (rc_fake, err_fake) = run(&fake, &args);
        assert_eq!(
            rc_fake, rc_real,
            "{args:?}\nreal: {err_real}\nfake: {err_fake}"
        );
        assert_eq!(rc_real, Some(1), "{args:?}: {err_real}");
        assert!(!err_fake.trim().is_empty());
        for line in err_fake.lines() {
            assert!(
                err_real.lines().any(|l| l == line),
                "{args:?}\nreal: {err_real}\nfake: {err_fake}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 10);
    // Without `--verbose`, stream-json is refused by both too.
    let (rc_real, err_real) = run(&real, &["-p", "--output-format", "stream-json", "--", "x"]);
    let (rc_fake, err_fake) = run(&fake, &["-p", "--output-format", "stream-json", "--", "x"]);
    assert_eq!((rc_fake, err_fake.trim()), (rc_real, err_real.trim()));
}

#[tokio::test(flavor = "multi_thread")]
async fn real_cli_api_errors_fail_in_the_clis_words_billing_is_no_credit_none_a_limit() {
    // Billing, a bad key, a prompt too long: the real CLI's result says
    // `is_error` with `subtype: "success"` and its own words; none is a usage
    // limit to sleep on. Billing is no credit (issue 21): the account cannot
    // run at all, and its work stops for the night.
    let bin = real_claude();
    for (status, kind, message, says, no_credit) in [
        (
            400u16,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            "api_error_status 400, subtype success, 1 turn): Credit balance is too low",
            true,
        ),
        (
            401,
            "authentication_error",
            "invalid x-api-key",
            "api_error_status 401, subtype success, 1 turn): Invalid API key",
            false,
        ),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 215000 tokens > 200000 maximum",
            "(terminal_reason prompt_too_long, api_error_status 400, subtype success, 1 turn): Prompt is too long",
            false,
        ),
    ] {
        let api = FakeAnthropic::start().await;
        let w = Checkout::new("repo");
        api.writer([Reply::ApiError {
            status,
            kind: kind.into(),
            message: message.into(),
        }]);
        let c = call(
            &w,
            Role::Writer,
            "Add sub",
            cli_env(&w.home, &api.uri(), false),
        );
        let r = agent::call(&claude_agent(&bin), &c, &CancellationToken::new())
            .await
            .unwrap();
        let f = r.failure.clone().unwrap_or_default();
        assert!(f.contains(says), "{f}\n{}", stdout_of(&r));
        if no_credit {
            assert_eq!(
                r.limit.as_ref().map(|l| l.kind),
                Some(nightshift::limit::LimitKind::NoCredit),
                "{:?}",
                r.limit
            );
            assert!(
                matches!(r.end(), agent::CallEnd::NoCredit(_)),
                "{:?}",
                r.end()
            );
        } else {
            assert!(r.limit.is_none(), "{:?}", r.limit);
        }
        assert_eq!(r.outcome.exit_code, Some(1));
    }
}

// ---- Odd transcripts through the adapter: the replaying fake `claude`, one call at a time.

/// A world for single calls of the replaying fake `claude`: files under
/// its FAKE_CLAUDE_DIR are replayed byte for byte (no newline added).
struct Replay {
    w: Checkout,
    dir: PathBuf,
}

impl Replay {
    fn new() -> Replay {
        let w = Checkout::new("repo");
        let dir = w.dir.path().join("fake-claude");
        std::fs::create_dir_all(&dir).unwrap();
        Replay { w, dir }
    }

    fn put(&self, name: &str, body: impl AsRef<[u8]>) {
        std::fs::write(self.dir.join(name), body).unwrap();
    }

    /// The real writer's stream, its paths moved into this world's checkout.
    fn real_writer(&self) -> String {
        transcript("claude-real-writer-edit.jsonl")
            .replace("/tmp/.tmp8nAh6O/repo", &self.w.repo.display().to_string())
    }

    async fn call(&self, role: Role) -> agent::Report {
        let mut env = cli_env(&self.w.home, "http://127.0.0.1:9", false);
        env.insert("FAKE_CLAUDE_DIR".into(), self.dir.display().to_string());
        let mut c = call(&self.w, role, "Add sub", env);
        c.log_dir = self.w.dir.path().join(format!(
            "logs-{}",
            std::fs::read_dir(&self.dir).unwrap().count()
        ));
        let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fakes/claude");
        agent::call(&claude_agent(&fake), &c, &CancellationToken::new())
            .await
            .unwrap()
    }
}

/// A reviewer session answering `text`: the real reviewer's init event, an
/// assistant message with the text, and the real result event carrying the
/// text as its `result` (no structured output: the model answered in prose).
fn reviewer_answering(text: &str) -> String {
    let real = transcript("claude-real-reviewer-approve-in-text.jsonl");
    let init = events(&real, "system", Some("init")).concat();
    let mut result: serde_json::Value = serde_json::from_str(real.lines().last().unwrap()).unwrap();
    result["result"] = json!(text);
    result["structured_output"] = serde_json::Value::Null;
    format!(
        "{init}{}\n{result}\n",
        json!({"type":"assistant","message":{"id":"msg_odd","content":[{"type":"text","text":text}]},"parent_tool_use_id":null})
    )
}

/// The real writer's stream `real` with its result event changed by `edit`.
fn writer_with_result(real: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut lines: Vec<String> = real.lines().map(String::from).collect();
    let mut result: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    edit(&mut result);
    *lines.last_mut().unwrap() = result.to_string();
    lines.join("\n") + "\n"
}

/// A verdict as read: decision and findings, or none.
type ReadVerdict = Option<(Decision, Vec<String>)>;

#[tokio::test(flavor = "multi_thread")]
async fn replay_odd_reviewer_answers_are_read_by_their_last_verdict() {
    let rc = |f: &str| Some((Decision::RequestChanges, vec![f.to_string()]));
    let approve = Some((Decision::Approve, vec![]));
    let cases: Vec<(&str, ReadVerdict)> = vec![
        // In a fence, with prose around it.
        (
            "The change adds sub and a test.\n\n```json\n{\"verdict\": \"approve\", \"findings\": [], \"conditions\": []}\n```\n",
            approve.clone(),
        ),
        // Followed by prose.
        (
            "{\"verdict\":\"request_changes\",\"findings\":[\"calc.txt lacks a test\"]}\n\nOnce that test exists I would approve.",
            rc("calc.txt lacks a test"),
        ),
        // Two verdicts: a line, then a pretty-printed one in a fence. The last is the answer.
        (
            "Draft: {\"verdict\":\"approve\",\"findings\":[]}\n{\"verdict\":\"approve\",\"findings\":[]}\nWait, the README is untouched.\n```json\n{\n  \"verdict\": \"request_changes\",\n  \"findings\": [\"the README does not mention sub\"]\n}\n```",
            rc("the README does not mention sub"),
        ),
        // Wrong case and fields no schema has.
        (
            "{\"verdict\":\"APPROVE\",\"findings\":[],\"summary\":\"fine\",\"confidence\":\"high\",\"conditions\":[{\"index\":1,\"met\":true,\"evidence\":\"calc.txt:2\"}]}",
            approve.clone(),
        ),
        // The last verdict object holds no decision: no verdict, whatever came before.
        (
            "{\"verdict\":\"approve\",\"findings\":[]}\nOn reflection:\n{\"verdict\":\"approve_with_comments\",\"findings\":[\"rename sub\"]}",
            None,
        ),
        // No verdict at all.
        ("Looks fine to me.", None),
    ];
    let r = Replay::new();
    for (i, (text, _)) in cases.iter().enumerate() {
        r.put(
            &format!("reviewer-{}.jsonl", i + 1),
            reviewer_answering(text),
        );
    }
    // One snapshot of an unchanged directory stands for the checkout.
    let still = tempfile::tempdir().unwrap();
    let same = nightshift::snapshot::Snapshot::take(still.path()).unwrap();
    for (text, want) in cases {
        let rep = r.call(Role::Reviewer).await;
        assert_eq!(rep.failure, None, "{text}");
        assert_eq!(
            rep.verdict.clone().map(|v| (v.verdict, v.findings)),
            want,
            "{text}"
        );
        assert_eq!(rep.text, text);
        assert_eq!(
            nightshift::agent::review_void_reason(AgentKind::Claude, &rep, &same, &same),
            None
        );
        assert_eq!(rep.usage.tokens_in, Some(2400));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_streams_cut_broken_or_empty_are_read_for_what_they_are() {
    let r = Replay::new();
    let real = r.real_writer();
    // 1. The result is the last line and has no newline.
    r.put("writer-1.jsonl", real.trim_end_matches('\n'));
    // 2. Bytes that are not UTF-8 in the answer, the result and a stray line.
    let mut bad: Vec<u8> = Vec::new();
    for l in real.lines() {
        let mut parts = l.split("Added sub to calc.txt.");
        bad.extend_from_slice(parts.next().unwrap().as_bytes());
        for p in parts {
            bad.extend_from_slice(b"Added sub to calc.txt (caf\xe9\xff).");
            bad.extend_from_slice(p.as_bytes());
        }
        bad.push(b'\n');
        if l.contains("msg_fake0001") {
            bad.extend_from_slice(b"\xff\xfe debug: \xc3\x28 not an event\n");
        }
    }
    r.put("writer-2.jsonl", &bad);
    // 3. Crashed mid-event: Bun's panic on stderr, killed by SIGABRT.
    let cut = &real[..real.find("Added sub to calc.txt.").unwrap()];
    r.put("writer-3.jsonl", cut);
    r.put("writer-3.stderr", "============================================================\nBun v1.3.14 (2a41ca97) Linux x64 (baseline)\nArgs: \"claude\" \"-p\"\n\npanic(main thread): Segmentation fault at address 0x113\noh no: Bun has crashed. This indicates a bug in Bun, not your code.\n");
    r.put("writer-3.signal", "ABRT");
    // 4. Nothing at all, exit 0.
    r.put("writer-4.jsonl", "");

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.failure, None, "{:?}", rep.outcome);
    assert_eq!(
        (
            rep.usage.tokens_in,
            rep.usage.tokens_out,
            rep.usage.cost_usd
        ),
        (Some(4800), Some(320), Some(0.0256))
    );
    assert_eq!(agent::parse_blocks(&rep.text).findings, ["docs are stale"]);

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.failure, None, "{:?}", rep.outcome);
    assert!(
        rep.text
            .starts_with("Added sub to calc.txt (caf\u{fffd}\u{fffd})."),
        "{:?}",
        rep.text
    );
    assert_eq!(agent::parse_blocks(&rep.text).findings, ["docs are stale"]);
    assert_eq!(rep.usage.tokens_in, Some(4800));
    assert_eq!(rep.claimed_files, ["calc.txt", "notes.md"]);

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.outcome.signal, Some(6), "{:?}", rep.outcome);
    let f = rep.failure.unwrap();
    assert!(f.starts_with("claude ended (signal 6) without a result event") && f.ends_with("its last line was cut off in the middle of an event; stderr: panic(main thread): Segmentation fault at address 0x113"), "{f}");
    assert!(rep.limit.is_none());
    assert_eq!(rep.usage, agent::Usage::default(), "no result, no usage");

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.outcome.exit_code, Some(0));
    assert_eq!(
        rep.failure.as_deref(),
        Some("claude ended (code 0) without a result event (no event at all): (nothing on stderr)")
    );
    assert_eq!(rep.text, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_results_without_usage_or_cost_are_unknown_not_zero() {
    let r = Replay::new();
    r.put(
        "writer-1.jsonl",
        writer_with_result(&r.real_writer(), |v| {
            let o = v.as_object_mut().unwrap();
            for k in [
                "usage",
                "modelUsage",
                "model_usage_since_last_result",
                "total_cost_usd",
            ] {
                o.remove(k);
            }
        }),
    );
    r.put("writer-2.jsonl", writer_with_result(&r.real_writer(), |v| {
        v["usage"] = json!({"input_tokens": null, "cache_read_input_tokens": null, "output_tokens": 320});
        v["modelUsage"] = serde_json::Value::Null;
        v["total_cost_usd"] = serde_json::Value::Null;
    }));
    r.put(
        "writer-3.jsonl",
        writer_with_result(&r.real_writer(), |v| {
            v.as_object_mut().unwrap().remove("total_cost_usd");
            v["modelUsage"] = json!({});
        }),
    );
    // The calls read writer-1.jsonl to writer-3.jsonl above, in order.
    let usages = [
        agent::Usage::default(),
        agent::Usage {
            tokens_in: None,
            tokens_out: Some(320),
            cost_usd: None,
        },
        agent::Usage {
            tokens_in: Some(4800),
            tokens_out: Some(320),
            cost_usd: None,
        },
    ];
    for usage in usages {
        let rep = r.call(Role::Writer).await;
        assert_eq!((rep.failure.clone(), rep.usage.clone()), (None, usage));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_50_mib_lines_are_read_around_and_within() {
    // A tool result of 50 MiB on one line (a big file read) between the
    // real writer's events: the rest of the stream is read as ever.
    let r = Replay::new();
    let real = r.real_writer();
    let big = json_with_repeat(
        &json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_big","content":"@BIG@"}]},"parent_tool_use_id":null}).to_string(),
        "x",
        50 << 20,
    );
    let mut lines: Vec<&str> = real.lines().collect();
    lines.insert(3, &big);
    r.put("writer-1.jsonl", lines.join("\n") + "\n");
    let started = std::time::Instant::now();
    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.failure, None, "{:?}", rep.outcome);
    assert!(rep.outcome.stdout_bytes > 50 << 20);
    assert_eq!(
        (rep.usage.tokens_in, rep.usage.tokens_out),
        (Some(4800), Some(320))
    );
    assert!(rep.text.starts_with("Added sub to calc.txt."));
    assert_eq!(rep.claimed_files, ["calc.txt", "notes.md"]);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );

    // The final event itself on a 50 MiB line: a reviewer's answer that
    // quotes a huge log, its verdict at the end. The result arrives with
    // the middle of its text shortened, its usage and last words whole.
    let real = transcript("claude-real-reviewer-approve-in-text.jsonl");
    let mut result: serde_json::Value = serde_json::from_str(real.lines().last().unwrap()).unwrap();
    result["result"] = json!(
        "The log:\n@BIG@\n{\"verdict\":\"request_changes\",\"findings\":[\"the log is 50 MiB\"]}"
    );
    let result = json_with_repeat(
        &result.to_string(),
        "log line \"quoted\" é\n",
        50 << 20 >> 4,
    );
    r.put(
        "reviewer-1.jsonl",
        format!(
            "{}{result}\n",
            events(&real, "system", Some("init")).concat()
        ),
    );
    let rep = r.call(Role::Reviewer).await;
    assert_eq!(rep.failure, None, "{:?}", rep.outcome);
    assert_eq!(
        rep.verdict.map(|v| v.findings),
        Some(vec!["the log is 50 MiB".to_string()])
    );
    assert!(
        rep.text.starts_with("The log:\nlog line \"quoted\" é\n")
            && rep.text.contains(" bytes cut]…")
            && rep.text.len() < 4 << 20,
        "{}",
        rep.text.len()
    );
    assert_eq!(
        (rep.usage.tokens_in, rep.usage.tokens_out),
        (Some(2400), Some(160))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_writer_blocks_as_models_decorate_them() {
    let r = Replay::new();
    let text = "Added sub.\n\n**FINDINGS:**\n* the README is stale\n\n**FILES**:\n- `calc.txt`\n- notes.md (new)\n";
    r.put(
        "writer-1.jsonl",
        writer_with_result(&r.real_writer(), |v| v["result"] = json!(text)),
    );
    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.failure, None);
    assert_eq!(
        agent::parse_blocks(&rep.text).findings,
        ["the README is stale"]
    );
    assert_eq!(
        rep.claimed_files,
        ["calc.txt", "notes.md"],
        "the claims are paths, not `calc.txt` or `notes.md (new)`"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_whose_last_verdict_asks_for_changes_after_an_approval_line() {
    // The answer's first verdict line approves; its last, pretty-printed in a
    // fence, asks for changes: that is the reviewer's word, never a PR.
    let writer = transcript("claude-real-writer-edit.jsonl");
    let answer = "{\"verdict\":\"approve\",\"findings\":[]}\nHmm, one more look.\n```json\n{\n  \"verdict\": \"request_changes\",\n  \"findings\": [\"calc.txt must list mul too\"],\n  \"conditions\": []\n}\n```";
    let (f, gh, dir) = replay_world(
        &[
            ("writer-1.sh", "echo sub >> calc.txt\n".into()),
            ("writer-1.jsonl", writer.clone()),
            ("reviewer-1.jsonl", reviewer_answering(answer)),
            ("writer-2.sh", "echo mul >> calc.txt\n".into()),
            ("writer-2.jsonl", writer),
            (
                "reviewer-2.jsonl",
                reviewer_answering("All good.\n{\"verdict\":\"approve\",\"findings\":[]}"),
            ),
        ],
        "[limits]\nrounds = 2\n",
    )
    .await;
    let item = drained_item(&f);
    assert_eq!(
        (item["outcome"].as_str(), item["rounds"].as_u64()),
        (Some("pr_opened"), Some(2)),
        "{item:#}"
    );
    assert_eq!(f.db.verdicts().join(","), "request_changes,approve");
    assert!(
        std::fs::read_to_string(dir.join("writer-2.argv"))
            .unwrap()
            .contains("calc.txt must list mul too")
    );
    assert_eq!(gh.prs().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_whose_last_verdict_is_no_decision_fails_the_round_saying_so() {
    let answer = "{\"verdict\":\"approve\",\"findings\":[]}\nOn reflection:\n{\"verdict\":\"approve_with_comments\",\"findings\":[\"rename sub\"]}";
    let (f, gh, _) = replay_world(
        &[
            ("writer-1.sh", "echo sub >> calc.txt\n".into()),
            (
                "writer-1.jsonl",
                transcript("claude-real-writer-edit.jsonl"),
            ),
            ("reviewer-1.jsonl", reviewer_answering(answer)),
        ],
        "[limits]\nrounds = 1\n",
    )
    .await;
    let item = drained_item(&f);
    assert_eq!(item["outcome"], "error", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "its verdict \"approve_with_comments\" is neither \"approve\" nor \"request_changes\""
        ),
        "{reason}"
    );
    assert!(gh.prs().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_writer_question_in_bold_blocks_the_item() {
    let t = writer_with_result(&transcript("claude-real-writer-edit.jsonl"), |v| {
        v["result"] = json!(
            "I stopped before changing anything.\n\n**QUESTION:** Should sub round towards zero?"
        )
    });
    let (f, gh, _) = replay_world(&[("writer-1.jsonl", t)], "").await;
    let item = drained_item(&f);
    assert_eq!(item["outcome"], "blocked", "{item:#}");
    assert_eq!(item["question"], "Should sub round towards zero?");
    assert!(gh.prs().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_whose_stream_shows_an_edit_outside_the_checkout_is_void() {
    // Its init lists only the read tools and the checkout is untouched, but
    // its own events show a Write that succeeded (outside the checkout,
    // where git cannot see it): not read-only, so no verdict is trusted.
    let approve = transcript("claude-real-reviewer-approve-in-text.jsonl");
    let mut t = events(&approve, "system", Some("init")).concat();
    t.push_str(&format!("{}\n", json!({"type":"assistant","message":{"id":"msg_w","content":[{"type":"tool_use","id":"toolu_w","name":"Write","input":{"file_path":"/tmp/nightshift-reviewer-notes.md","content":"x"}}]},"parent_tool_use_id":null})));
    t.push_str(&format!("{}\n", json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_w","content":"File created successfully at: /tmp/nightshift-reviewer-notes.md"}]},"parent_tool_use_id":null})));
    t.push_str(&after_init(&approve));
    let (f, gh) = with_reviewer(t).await;
    assert_review_void(&f, "changed files: /tmp/nightshift-reviewer-notes.md");
    assert!(gh.prs().is_empty());
}
