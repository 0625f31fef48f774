//! The `codex` agent kind, proven against the real Codex CLI (npm
//! `@openai/codex`, pinned in `fakes_codex/cli.rs`) talking to a local fake
//! Responses API through a custom model provider, and against a fake `codex`
//! that replays transcripts recorded from that real CLI (docs/agents.md, docs/limits.md).
//!
//! The real-CLI tests are the acceptance tests of the adapter: a writer whose
//! real `apply_patch` tool edits the checkout, a reviewer whose real
//! read-only sandbox refuses a write, the CLI's own usage-limit message, and a
//! whole drain of the real `nightshift` binary opening a PR. The replays
//! cover what the real service cannot be made to do on demand here: a failed
//! turn, a CLI that keeps reconnecting while offline, a limit body on stderr.

use crate::common;
use crate::fakes_codex::{cli, responses};
use common::{Checkout, Table, doctor_line, json_with_repeat};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Timelike, Utc};
use nightshift::agent::{self, Call, Report, Role};
use nightshift::config::{AgentConfig, AgentKind};
use nightshift::limit::LimitKind;
use nightshift::review::Decision;
use tokio_util::sync::CancellationToken;

use common::github::FakeGitHub;
use common::{Fixture, assert_ok, git, text};
use responses::{FakeResponses, Reply, USAGE_PER_RESPONSE, tool_outputs, user_text};

const ADD_SUB: &str = "*** Begin Patch\n*** Update File: calc.txt\n@@\n add\n+sub\n*** End Patch";

/// A checkout with `calc.txt` = "add\n" committed, a HOME and a CODEX_HOME of
/// its own (nothing of the user's codex config leaks in).
struct World {
    dir: tempfile::TempDir,
    checkout: PathBuf,
}

impl World {
    fn new() -> World {
        let c = Checkout::new("checkout");
        World {
            dir: c.dir,
            checkout: c.repo,
        }
    }

    fn call(&self, role: Role, tz: &str) -> Call {
        let mut env = BTreeMap::new();
        env.insert(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        );
        env.insert(
            "HOME".to_string(),
            self.dir.path().join("home").display().to_string(),
        );
        env.insert(
            "CODEX_HOME".to_string(),
            self.dir.path().join("codex-home").display().to_string(),
        );
        env.insert(
            "FAKE_KEY".to_string(),
            "fake-key-for-the-local-server".to_string(),
        );
        Call {
            role,
            round: 1,
            prompt: format!(
                "# Item: Add sub\n\nmarker-{} for the {} call\n",
                std::process::id(),
                role.as_str()
            ),
            contract_json: "{}".into(),
            feedback: String::new(),
            cwd: self.checkout.clone(),
            timeout: Duration::from_secs(60),
            env,
            tz: tz.parse().unwrap(),
            log_dir: self.dir.path().join("logs").join(role.as_str()),
            secrets: vec![],
            run_as: None,
            max_output: nightshift::config::DEFAULT_MAX_AGENT_OUTPUT,
            sandbox: None,
        }
    }
}

/// One call of the real codex CLI against `fake`, as [`real_agent`] sets it up.
async fn call_real(fake: &FakeResponses, call: &Call) -> Report {
    let agent = real_agent(fake);
    agent::call(&agent, call, &CancellationToken::new())
        .await
        .expect("codex starts")
}

/// The fake codex CLI (replays `$FAKE_CODEX_DIR`) as the agent, no flags.
fn fake_codex_agent() -> AgentConfig {
    AgentConfig {
        kind: AgentKind::Codex,
        command: vec![cli::fake_codex().display().to_string()],
        permission_flags: None,
        model: None,
        account: None,
        fallback: None,
        allow_hosts: vec![],
    }
}

fn real_agent(fake: &FakeResponses) -> AgentConfig {
    let mut command = vec![cli::real_codex().display().to_string()];
    command.extend(fake.provider_args());
    AgentConfig {
        kind: AgentKind::Codex,
        command,
        permission_flags: None,
        model: None,
        account: None,
        fallback: None,
        allow_hosts: vec![],
    }
}

fn explain(r: &Report) -> String {
    format!(
        "failure {:?}\ntext {:?}\nstdout:\n{}\nstderr:\n{}",
        r.failure, r.text, r.outcome.stdout_tail, r.outcome.stderr_tail
    )
}

fn turn_metadata(body: &serde_json::Value) -> String {
    body["client_metadata"]["x-codex-turn-metadata"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_codex_writer_edits_the_checkout_and_reports_tokens() {
    let w = World::new();
    let fake = FakeResponses::start(vec![
        Reply::Patch(ADD_SUB.into()),
        Reply::Message("Added sub.\n\nFILES:\n- calc.txt".into()),
    ])
    .await;
    let call = w.call(Role::Writer, "UTC");
    let r = call_real(&fake, &call).await;

    assert_eq!(r.failure, None, "{}", explain(&r));
    assert_eq!(
        std::fs::read_to_string(w.checkout.join("calc.txt")).unwrap(),
        "add\nsub\n",
        "the real apply_patch tool edited the file"
    );
    assert_eq!(r.text, "Added sub.\n\nFILES:\n- calc.txt");
    assert_eq!(r.claimed_files, ["calc.txt"]);
    assert!(r.limit.is_none());
    // Two responses (the tool call, the final message), usage summed by the CLI.
    let (input, _cached, output, _) = USAGE_PER_RESPONSE;
    assert_eq!(
        (r.usage.tokens_in, r.usage.tokens_out, r.usage.cost_usd),
        (Some(2 * input), Some(2 * output), None)
    );
    let bodies = fake.bodies();
    assert_eq!(bodies.len(), 2);
    assert!(
        user_text(&bodies[0]).contains(&call.prompt.trim_end().to_string()),
        "the prompt arrived through stdin: {}",
        user_text(&bodies[0])
    );
    assert!(
        turn_metadata(&bodies[0]).contains(r#""sandbox_mode":"workspace-write""#),
        "{}",
        turn_metadata(&bodies[0])
    );
    assert_eq!(r.argv[r.argv.len() - 1], "-");
    // stdout and stderr are on disk in full.
    let stdout = std::fs::read_to_string(r.outcome.stdout_path.as_ref().unwrap()).unwrap();
    assert!(
        stdout.contains(r#""type":"file_change""#) && stdout.contains(r#""type":"turn.completed""#),
        "{stdout}"
    );
    // The cached share is in the stream (input tokens already include it).
    assert!(
        stdout.contains(&format!(
            r#""cached_input_tokens":{}"#,
            2 * USAGE_PER_RESPONSE.1
        )),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_codex_with_a_configured_model_and_plain_tools() {
    // A model codex has no metadata for: it warns with an `error` item,
    // offers plain function tools, and still completes the turn.
    let w = World::new();
    let fake = FakeResponses::start(vec![
        Reply::Patch(ADD_SUB.into()),
        Reply::Message("Added sub.".into()),
    ])
    .await;
    let mut agent = real_agent(&fake);
    agent.model = Some("gpt-5.1-codex".into());
    let r = agent::call(
        &agent,
        &w.call(Role::Writer, "UTC"),
        &CancellationToken::new(),
    )
    .await
    .expect("codex starts");

    assert_eq!(r.failure, None, "{}", explain(&r));
    let bodies = fake.bodies();
    assert_eq!(bodies[0]["model"], "gpt-5.1-codex");
    assert!(responses::offered_tools(&bodies[0]).contains(&"exec_command".to_string()));
    assert_eq!(
        std::fs::read_to_string(w.checkout.join("calc.txt")).unwrap(),
        "add\nsub\n",
        "{}",
        tool_outputs(&bodies[1])
    );
    let stdout = std::fs::read_to_string(r.outcome.stdout_path.as_ref().unwrap()).unwrap();
    assert!(
        stdout
            .contains(r#""type":"error","message":"Model metadata for `gpt-5.1-codex` not found"#),
        "{stdout}"
    );
    assert_eq!(r.text, "Added sub.");
    assert_eq!(
        r.claimed_files,
        ["calc.txt"],
        "codex turned the shell's apply_patch into a file_change"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_codex_failed_and_refused_commands_are_told_and_the_turn_stands() {
    // A command that fails, one the workspace-write sandbox refuses (outside
    // the checkout), then the answer: the turn completed, so the call did;
    // the failed command is told, and the tokens are the turn's running total
    // over its three responses.
    let w = World::new();
    let fake = FakeResponses::start(vec![
        Reply::Shell("echo boom >&2; exit 3".into()),
        Reply::Shell("touch /usr/nightshift-denied".into()),
        Reply::Message("Could not run everything.".into()),
    ])
    .await;
    let r = call_real(&fake, &w.call(Role::Writer, "UTC")).await;
    assert_eq!(r.failure, None, "{}", explain(&r));
    let stdout = std::fs::read_to_string(r.outcome.stdout_path.as_ref().unwrap()).unwrap();
    assert!(
        stdout.contains(r#""exit_code":3,"status":"failed""#),
        "{stdout}"
    );
    // The sandbox's refusal reached the model. Whether codex prints an item
    // for the refused command depends on how its sandbox refused it on this
    // kernel (before the command ran: no item; the command ran on a
    // read-only file system: a failed item): each failed item is told.
    assert!(
        tool_outputs(&fake.bodies()[2]).contains("Read-only file system"),
        "{}",
        tool_outputs(&fake.bodies()[2])
    );
    let told = if stdout.contains(r#"nightshift-denied'","aggregated_output":"touch"#)
        || stdout.matches(r#""status":"failed""#).count() > 1
    {
        "2 commands failed or were declined"
    } else {
        "1 command failed or was declined"
    };
    assert_eq!(r.notes, [told], "{stdout}");
    assert_eq!(r.text, "Could not run everything.");
    let (input, _, output, _) = USAGE_PER_RESPONSE;
    assert_eq!(
        (r.usage.tokens_in, r.usage.tokens_out),
        (Some(3 * input), Some(3 * output)),
        "{stdout}"
    );
    assert!(!std::path::Path::new("/usr/nightshift-denied").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn real_codex_reviewer_is_read_only_and_its_verdict_is_its_last_message() {
    let w = World::new();
    std::fs::write(w.checkout.join("calc.txt"), "add\nsub\n").unwrap();
    let fake = FakeResponses::start(vec![
        Reply::Shell("echo mul >> calc.txt; git diff --stat".into()),
        Reply::Message(
            r#"{"verdict":"request_changes","findings":["calc.txt must also list mul"]}"#.into(),
        ),
    ])
    .await;
    let r = call_real(&fake, &w.call(Role::Reviewer, "UTC")).await;

    assert_eq!(r.failure, None, "{}", explain(&r));
    assert_eq!(
        std::fs::read_to_string(w.checkout.join("calc.txt")).unwrap(),
        "add\nsub\n",
        "the sandbox refused the write"
    );
    let bodies = fake.bodies();
    assert!(
        tool_outputs(&bodies[1]).contains("Read-only file system"),
        "{}",
        tool_outputs(&bodies[1])
    );
    assert!(
        turn_metadata(&bodies[0]).contains(r#""sandbox_mode":"read-only""#),
        "{}",
        turn_metadata(&bodies[0])
    );
    // The verdict schema reached the model as a strict output format.
    assert_eq!(
        bodies[0]["text"]["format"]["name"], "codex_output_schema",
        "{}",
        bodies[0]["text"]
    );
    assert_eq!(
        bodies[0]["text"]["format"]["schema"]["required"],
        serde_json::json!(["verdict", "findings", "conditions"])
    );
    assert_eq!(
        bodies[0]["text"]["format"]["strict"], true,
        "{}",
        bodies[0]["text"]
    );
    let v = r.verdict.expect("a verdict");
    assert_eq!(v.verdict, Decision::RequestChanges);
    assert_eq!(v.findings, ["calc.txt must also list mul"]);
    assert!(
        r.argv.windows(2).any(|p| p == ["--sandbox", "read-only"]),
        "{:?}",
        r.argv
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn real_codex_usage_limit_is_read_with_its_reset_in_the_agent_zone() {
    let w = World::new();
    // codex prints the reset to the minute, in the local time of its TZ.
    let now = Utc::now();
    let reset = Utc
        .timestamp_opt(now.timestamp() + 3 * 3600, 0)
        .unwrap()
        .with_second(0)
        .unwrap();
    let fake = FakeResponses::start(vec![Reply::UsageLimit {
        resets_at: reset.timestamp(),
    }])
    .await;
    let tz = "Asia/Kolkata";
    let r = call_real(&fake, &w.call(Role::Writer, tz)).await;

    let limit = r
        .limit
        .clone()
        .unwrap_or_else(|| panic!("no limit read: {}", explain(&r)));
    assert_eq!(limit.kind, LimitKind::UsageLimit, "{limit:?}");
    assert_eq!(limit.resets_at, Some(reset), "{limit:?}");
    assert!(r.hit_usage_limit());
    // The CLI's own words: curly apostrophe, 12-hour local time of its TZ.
    let local = reset
        .with_timezone(&tz.parse::<chrono_tz::Tz>().unwrap())
        .format("%-I:%M %p")
        .to_string();
    assert!(
        limit.message.contains("hit your usage limit."),
        "{}",
        limit.message
    );
    // "try again at 9:52 PM." the same local day, "… at Dec 1st, 2026 12:30 AM." another.
    assert!(
        limit.message.contains("try again at ") && limit.message.contains(&format!(" {local}.")),
        "{} lacks {local}",
        limit.message
    );
    let stdout = std::fs::read_to_string(r.outcome.stdout_path.as_ref().unwrap()).unwrap();
    assert!(
        stdout.contains(
            "{\"type\":\"turn.failed\",\"error\":{\"message\":\"You’ve hit your usage limit."
        ),
        "{stdout}"
    );
    assert!(
        r.failure
            .as_deref()
            .unwrap_or("")
            .contains("You’ve hit your usage limit"),
        "{:?}",
        r.failure
    );
    assert_eq!(r.outcome.exit_code, Some(1));
    assert_eq!(
        fake.bodies().len(),
        1,
        "a usage limit is not retried by the CLI"
    );
}

#[test]
fn the_fake_rejects_bad_arguments_exactly_as_the_real_cli() {
    let dir = tempfile::tempdir().unwrap();
    let real = cli::real_codex();
    for args in [
        &["exec", "--json", "--bogus", "-"][..],
        &["exec", "--json", "--sandbox", "nope", "-"][..],
        &[
            "exec",
            "--json",
            "--sandbox",
            "read-only",
            "--sandbox",
            "read-only",
            "-",
        ][..],
    ] {
        let run = |bin: &Path| {
            let out = std::process::Command::new(bin)
                .args(args)
                .current_dir(dir.path())
                .env("CODEX_HOME", dir.path())
                .env("FAKE_CODEX_DIR", dir.path())
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr)
                .lines()
                .find(|l| l.starts_with("error:"))
                .unwrap_or("")
                .to_string();
            (out.status.code(), err)
        };
        let (real_code, real_err) = run(&real);
        assert_eq!(real_code, Some(2), "{args:?}: {real_err}");
        assert!(!real_err.is_empty(), "{args:?}");
        assert_eq!(run(&cli::fake_codex()), (real_code, real_err), "{args:?}");
    }
}

/// The config of a drain whose writer and reviewer are both `codex` `bin`
/// with `args` before the subcommand.
fn codex_config(bin: &Path, args: &[String], extra: &str) -> String {
    let mut argv = vec![bin.display().to_string()];
    argv.extend(args.iter().cloned());
    // Literal TOML strings: the provider table is full of double quotes.
    let list = argv
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "verify = [\"sh test.sh\"]\n{extra}\n[writer]\nkind = \"codex\"\ncommand = [{list}]\n\n[reviewer]\nkind = \"codex\"\ncommand = [{list}]\n"
    )
}

async fn drain_world(codex_home: bool) -> (Fixture, FakeGitHub) {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_codex_token_0123456789abcdef".into());
    if codex_home {
        crate::fakes_codex::cli::use_codex_home(&mut f);
    }
    f.write(
        "NEXT.md",
        "# calc\n\n- [ ] Add sub\n  - accept: calc.txt lists sub\n",
    );
    (f, gh)
}

/// `doctor` asks the real CLI whether it is logged in (`codex login
/// status`, no usage spent); a custom model provider in the command or in
/// `$CODEX_HOME/config.toml` needs no OpenAI login.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_asks_the_real_codex_whether_it_is_logged_in() {
    let (mut f, _gh) = drain_world(true).await;
    let bin = cli::real_codex();
    // Plain `codex`, an empty CODEX_HOME: logged out.
    f.config(&codex_config(&bin, &[], ""));
    let out = f.run(&["doctor"]);
    let line = doctor_line(&out, "writer");
    assert!(
        line.starts_with("FAIL")
            && line.contains("0.169.0")
            && line.contains("not logged in")
            && line.contains("codex login"),
        "{}",
        text(&out)
    );
    assert_eq!(out.status.code(), Some(1));
    // The provider on the command line.
    let fake = FakeResponses::start(vec![]).await;
    f.config(&codex_config(&bin, &fake.provider_args(), ""));
    let out = f.run(&["doctor"]);
    assert!(
        doctor_line(&out, "writer").starts_with("ok")
            && doctor_line(&out, "writer").contains("model provider \"fake\""),
        "{}",
        text(&out)
    );
    // The provider in CODEX_HOME's config.
    let home = f
        .extra_env
        .iter()
        .find(|(k, _)| k == "CODEX_HOME")
        .unwrap()
        .1
        .clone();
    std::fs::write(
        Path::new(&home).join("config.toml"),
        "model_provider = \"local\"\n",
    )
    .unwrap();
    f.config(&codex_config(&bin, &[], ""));
    let out = f.run(&["doctor"]);
    assert!(
        doctor_line(&out, "reviewer").starts_with("ok")
            && doctor_line(&out, "reviewer").contains("model provider \"local\""),
        "{}",
        text(&out)
    );
    assert_eq!(fake.left(), 0);
    f.extra_env.retain(|(k, _)| k != "CODEX_HOME");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_with_the_real_codex_as_writer_and_reviewer_opens_a_pr() {
    let (f, gh) = drain_world(true).await;
    let fake = FakeResponses::start(vec![
        Reply::Patch(ADD_SUB.into()),
        Reply::Message("Added sub.\n\nFILES:\n- calc.txt".into()),
        Reply::Shell("git diff".into()),
        Reply::Message(r#"{"verdict":"approve","findings":[]}"#.into()),
    ])
    .await;
    f.config(&codex_config(
        &cli::real_codex(),
        &fake.provider_args(),
        "[limits]\nrounds = 2\nagent_timeout = \"60s\"\n",
    ));
    let plan = f.run(&["plan"]);
    assert_ok(&plan, "plan");
    assert!(
        text(&plan).contains("not enforced for codex"),
        "{}",
        text(&plan)
    );

    let out = f.drain_exits(0, &[]);
    let report = f.report();
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "pr_opened", "{report:#}\n{}", text(&out));
    let (input, _, output, _) = USAGE_PER_RESPONSE;
    assert_eq!(item["tokens"], 4 * (input + output), "{item:#}");
    assert_eq!(item["cost_usd"], serde_json::Value::Null);
    let calls: Vec<String> =
        f.db.calls()
            .iter()
            .map(|c| {
                let cost = c.cost_usd.map_or("-".to_string(), |c| c.to_string());
                format!("{} {} {cost}", c.kind, c.role_and_tokens())
            })
            .collect();
    let want = |role: &str| format!("codex {role}:{}/{} -", 2 * input, 2 * output);
    assert_eq!(calls, [want("writer"), want("reviewer")]);
    let prs = gh.prs();
    assert_eq!(prs.len(), 1);
    let b = &f.remote_branches()[0];
    assert_eq!(
        git(&f.remote, &["show", &format!("{b}:calc.txt")]),
        "add\nsub"
    );
    assert!(
        prs[0]["body"]
            .as_str()
            .unwrap()
            .contains("the cost cap was not enforced"),
        "{}",
        prs[0]["body"]
    );
    assert_eq!(fake.left(), 0);
    gh.assert_never_merged_approved_or_closed().await;
}

// ---------------------------------------------------------------------------------------------
// Replays through the real binary
// ---------------------------------------------------------------------------------------------

/// A replay directory for the fake `codex` (see tests/fakes_codex/codex).
fn replay_dir(f: &Fixture) -> PathBuf {
    // Beside the agents: the fixture lets sandboxed calls write there.
    let d = f.agents.join("replay");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn put(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// After a first writer call that exits 1 (limited or throttled), the
/// second patches calc.txt and the reviewer approves, as the real codex
/// did.
fn retry_patches_and_is_approved(d: &Path) {
    put(d, "writer-1.exit", "1");
    put(d, "writer-2.sh", WRITE_SUB);
    put(
        d,
        "writer-2.jsonl",
        &cli::transcript("real-writer-patch.jsonl"),
    );
    put(
        d,
        "reviewer.jsonl",
        &cli::transcript("real-reviewer-approve.jsonl"),
    );
}

/// Drains; the one item opened its PR in one round (`why`: what did not
/// use the round up).
fn drained_in_one_round(f: &Fixture, why: &str) {
    f.drain_exits(0, &[]);
    let item = &f.report()["items"][0];
    assert_eq!(
        (item["outcome"].as_str(), item["rounds"].as_u64()),
        (Some("pr_opened"), Some(1)),
        "{why}: {item:#}"
    );
}

fn replay_fixture(
    extra: &str,
) -> impl std::future::Future<Output = (Fixture, FakeGitHub, PathBuf)> {
    let extra = extra.to_string();
    async move {
        let (mut f, gh) = drain_world(false).await;
        let d = replay_dir(&f);
        f.extra_env
            .push(("FAKE_CODEX_DIR".into(), d.display().to_string()));
        f.config(&codex_config(
            &cli::fake_codex(),
            &["-c".into(), "model_provider=fake".into()],
            &extra,
        ));
        (f, gh, d)
    }
}

const WRITE_SUB: &str = "grep -qx sub calc.txt || echo sub >> calc.txt\n";

/// The replayed writer that adds sub: its script and the real writer's
/// recorded patch session.
fn put_sub_writer(d: &Path) {
    put(d, "writer.sh", WRITE_SUB);
    put(
        d,
        "writer.jsonl",
        &cli::transcript("real-writer-patch.jsonl"),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_requests_changes_then_approves() {
    let (f, gh, d) = replay_fixture("[limits]\nrounds = 3\n").await;
    put_sub_writer(&d);
    put(
        &d,
        "reviewer-1.jsonl",
        &cli::transcript("real-reviewer-request-changes.jsonl"),
    );
    put(
        &d,
        "reviewer-2.jsonl",
        &cli::transcript("real-reviewer-approve.jsonl"),
    );
    f.drain_exits(0, &[]);
    let item = &f.report()["items"][0];
    assert_eq!(
        (item["outcome"].as_str(), item["rounds"].as_u64()),
        (Some("pr_opened"), Some(2)),
        "{item:#}"
    );
    // The reviewer's finding is the second round's feedback.
    let prompt2 = std::fs::read_to_string(d.join("writer-2.prompt")).unwrap();
    assert!(prompt2.contains("calc.txt must also list mul"), "{prompt2}");
    // The transcripts' turn.completed: 200 + 14 for two responses, 100 + 7
    // for the approval's one.
    assert_eq!(item["tokens"], 3 * 214 + 107);
    let argv = std::fs::read_to_string(d.join("reviewer-1.argv")).unwrap();
    assert!(
        // Inside nightshift's sandbox (the default) codex's own is off.
        argv.starts_with("-c\nmodel_provider=fake\nexec\n--json\n--sandbox\ndanger-full-access\n"),
        "{argv}"
    );
    assert!(argv.contains("--output-schema\n"), "{argv}");
    assert_eq!(gh.prs().len(), 1);
}

/// A transcript written in an older `codex exec --json` shape, under
/// tests/fakes_codex/transcripts/.
fn older_shape(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fakes_codex/transcripts")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_legacy_codex_streams_drain_to_a_pr() {
    // codex before 0.44 printed one `{"id":…,"msg":{…}}` per core event after
    // a config summary (openai/codex#4525 removed the shape): a pinned-old
    // CLI must still give its message, its files, its tokens and its verdict.
    let (f, gh, d) = replay_fixture("[limits]\nrounds = 1\n").await;
    put(&d, "writer.sh", WRITE_SUB);
    put(
        &d,
        "writer.jsonl",
        &older_shape("legacy-writer-patch.jsonl"),
    );
    put(
        &d,
        "reviewer.jsonl",
        &older_shape("legacy-reviewer-approve.jsonl"),
    );
    f.drain_exits(0, &[]);
    let item = &f.report()["items"][0];
    assert_eq!(item["outcome"], "pr_opened", "{item:#}");
    let calls = f.db.calls();
    let tokens: Vec<String> = calls.iter().map(|c| c.role_and_tokens()).collect();
    assert_eq!(tokens, ["writer:9000/300", "reviewer:3000/40"]);
    let writer = calls.iter().find(|c| c.role == "writer").unwrap();
    assert_eq!(
        writer.meta["claimed_files"],
        serde_json::json!(["calc.txt"])
    );
    let body = gh.prs()[0]["body"].as_str().unwrap().to_string();
    assert!(body.contains("Added sub to calc.txt."), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_codex_that_does_not_exit_after_its_turn_is_ended_and_the_turn_stands() {
    let w = World::new();
    let d = w.dir.path().join("replay");
    std::fs::create_dir_all(&d).unwrap();
    put(
        &d,
        "writer.jsonl",
        &cli::transcript("real-writer-patch.jsonl"),
    );
    put(&d, "writer.hang", "");
    let mut call = w.call(Role::Writer, "UTC");
    call.env
        .insert("FAKE_CODEX_DIR".into(), d.display().to_string());
    // The grace shortened from its 30 s (agent::EXIT_GRACE_ENV) to 1 s.
    call.env.insert(agent::EXIT_GRACE_ENV.into(), "1000".into());
    call.timeout = Duration::from_secs(300);
    let agent = fake_codex_agent();
    let r = agent::call(&agent, &call, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.failure, None, "{}", explain(&r));
    let grace = Duration::from_secs(1);
    assert!(
        !r.outcome.timed_out
            && r.outcome.duration >= grace
            && r.outcome.duration < grace + Duration::from_secs(20),
        "{:?}",
        r.outcome
    );
    assert_eq!(
        r.notes,
        ["codex did not exit within 1s of its last turn and was ended"]
    );
    assert_eq!(
        (r.text.as_str(), r.usage.tokens_in),
        ("Hello from fake", Some(200))
    );
    assert!(r.limit.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_turn_failed_is_a_failed_round() {
    let (f, gh, d) = replay_fixture("[limits]\nrounds = 1\n").await;
    put(
        &d,
        "writer.jsonl",
        &cli::transcript("real-turn-failed-400.jsonl"),
    );
    put(&d, "writer.exit", "1");
    f.drain_exits(1, &[]);
    let item = &f.report()["items"][0];
    assert_eq!(item["outcome"], "error", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(reason.contains(r#"codex turn failed: {"error": {"type": "invalid_request_error", "message": "fake failure 400"}}"#), "{reason}");
    assert_eq!(
        f.db.count(Table::LimitSleeps),
        0,
        "a failed turn is not a limit"
    );
    let exits: Vec<Option<i32>> = f.db.calls().iter().map(|c| c.exit_code).collect();
    assert_eq!(exits, [Some(1)]);
    assert!(f.remote_branches().is_empty());
    assert!(gh.prs().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_offline_codex_is_killed_at_the_agent_timeout() {
    let (f, _gh, d) = replay_fixture("[limits]\nrounds = 2\nagent_timeout = \"2s\"\n").await;
    put(
        &d,
        "writer.jsonl",
        &cli::transcript("real-offline-reconnecting.jsonl"),
    );
    put(&d, "writer.hang", "");
    let started = Instant::now();
    let out = f.approve_and_drain(&[]);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let item = &f.report()["items"][0];
    assert_eq!(item["outcome"], "timed_out", "{item:#}");
    assert_eq!(
        f.db.count(Table::LimitSleeps),
        0,
        "reconnecting is not a limit"
    );
    let calls = f.db.calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert!(
        calls[0].timed_out && calls[0].limit_kind.is_none(),
        "{calls:#?}"
    );
    let meta = calls[0].meta["failure"].as_str().unwrap_or_default();
    assert!(
        meta.contains("timed out after 2s; codex was reconnecting (3 notice(s))"),
        "{meta}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_usage_limit_body_on_stderr_sleeps_until_reset_then_retries() {
    let (mut f, gh, d) =
        replay_fixture("[limits]\nrounds = 1\nlimit_buffer = \"1s\"\nlimit_sleep_min = \"1s\"\n")
            .await;
    f.extra_env
        .push(("FAKE_CODEX_RESETS_IN".into(), "2".into()));
    // The free plan's message names no reset; the raw 429 body on stderr does.
    let msg = "You’ve hit your usage limit. Upgrade to Plus to continue using Codex (https://openai.com/chatgpt/pricing).";
    put(
        &d,
        "writer-1.jsonl",
        &format!(
            "{{\"type\":\"thread.started\",\"thread_id\":\"01a22c90-4917-70a0-abc8-7d5168ee556f\"}}\n{{\"type\":\"turn.started\"}}\n{{\"type\":\"error\",\"message\":\"{msg}\"}}\n{{\"type\":\"turn.failed\",\"error\":{{\"message\":\"{msg}\"}}}}\n"
        ),
    );
    put(
        &d,
        "writer-1.stderr",
        "2026-03-04T17:48:31.564826Z ERROR codex_api::endpoint::responses: error=http 429 Too Many Requests: Some(\"{\\\"error\\\":{\\\"type\\\":\\\"usage_limit_reached\\\",\\\"message\\\":\\\"The usage limit has been reached\\\",\\\"plan_type\\\":\\\"free\\\",\\\"resets_at\\\":@RESETS_AT@,\\\"eligible_promo\\\":null,\\\"resets_in_seconds\\\":@RESETS_IN@}}\")\n",
    );
    retry_patches_and_is_approved(&d);
    drained_in_one_round(&f, "the limited call did not use up the round");
    let sleeps: Vec<_> =
        f.db.sleeps()
            .iter()
            .map(|s| (s.kind.clone(), s.resets_at.is_some()))
            .collect();
    assert_eq!(sleeps, [("usage_limit".to_string(), true)]);
    let calls = f.db.calls();
    let of_calls: Vec<String> = calls.iter().map(|c| c.role_and_limit()).collect();
    assert_eq!(of_calls, ["writer:usage_limit", "writer:-", "reviewer:-"]);
    let limited = calls.iter().find(|c| c.limit_kind.is_some()).unwrap();
    let source = limited.meta["limit"]["source"].as_str().unwrap_or_default();
    assert!(!source.is_empty(), "the reading names its source");
    // stderr is kept in full: the body is in the call's stderr file.
    let stderr_path = limited.meta["stderr_path"].as_str().unwrap_or_default();
    assert!(
        std::fs::read_to_string(stderr_path)
            .unwrap()
            .contains("usage_limit_reached"),
        "{stderr_path}"
    );
    assert_eq!(gh.prs().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_rate_limit_is_exceeded_is_throttling_then_the_round_goes_on() {
    // codex against a provider that throttles (openai/codex issue #3764, Azure): its own
    // retry notices ("…; retrying 1/5 in 209ms…") are not final; the turn.failed saying
    // "Rate limit is exceeded. Try again in N seconds." is a short retry, not a failed round.
    let (f, gh, d) = replay_fixture("[limits]\nrounds = 1\n").await;
    let notice = "stream error: stream disconnected before completion: Rate limit is exceeded. Try again in 1 seconds.; retrying 1/5 in 209ms…";
    let failed =
        "stream disconnected before completion: Rate limit is exceeded. Try again in 1 seconds.";
    put(
        &d,
        "writer-1.jsonl",
        &format!(
            "{}\n{}\n{}\n{}\n",
            r#"{"type":"thread.started","thread_id":"01a22c90-4917-70a0-abc8-7d5168ee556f"}"#,
            r#"{"type":"turn.started"}"#,
            serde_json::json!({"type":"error","message":notice}),
            serde_json::json!({"type":"turn.failed","error":{"message":failed}}),
        ),
    );
    retry_patches_and_is_approved(&d);
    drained_in_one_round(&f, "throttling did not use up the round");
    let sleeps: Vec<String> = f.db.sleeps().into_iter().map(|s| s.kind).collect();
    assert_eq!(sleeps, ["transient"]);
    let calls: Vec<String> = f.db.calls().iter().map(|c| c.role_and_limit()).collect();
    assert_eq!(calls, ["writer:transient", "writer:-", "reviewer:-"]);
    assert_eq!(gh.prs().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_that_edits_is_void_and_unknown_flags_fail_the_call() {
    // The second line: inside the sandbox the reviewer's slot is read-only
    // and the edit is refused (tests/it/sandbox.rs).
    let (f, gh, d) = replay_fixture("[limits]\nrounds = 1\n[sandbox]\nmode = \"off\"\n").await;
    put_sub_writer(&d);
    put(&d, "reviewer.sh", "echo mul >> calc.txt\n");
    put(
        &d,
        "reviewer.jsonl",
        &cli::transcript("real-reviewer-approve.jsonl"),
    );
    f.drain_exits(1, &[]);
    let item = &f.report()["items"][0];
    assert_eq!(item["outcome"], "review_void", "{item:#}");
    assert!(gh.prs().is_empty());

    // A flag the CLI does not know: the call fails with the CLI's own words.
    let (f, _gh, d) = replay_fixture("[limits]\nrounds = 1\n").await;
    f.config(&codex_config(
        &cli::fake_codex(),
        &["exec".into(), "--no-such-flag".into()],
        "[limits]\nrounds = 1\n",
    ));
    f.drain_exits(1, &[]);
    let item = &f.report()["items"][0];
    assert_eq!(item["outcome"], "error", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "before starting a session: error: unexpected argument '--no-such-flag' found"
        ),
        "{reason}"
    );
    assert!(!d.join("writer.n").exists(), "the fake stopped at the flag");
}

// ---------------------------------------------------------------------------------------------
// Odd transcripts through the adapter: the replaying fake `codex`, one call at a time
// ---------------------------------------------------------------------------------------------

/// Single calls of the replaying fake `codex` in one world: files under its
/// FAKE_CODEX_DIR are replayed byte for byte (sed keeps a missing newline).
struct Replay {
    w: World,
    dir: PathBuf,
}

impl Replay {
    fn new() -> Replay {
        let w = World::new();
        let dir = w.dir.path().join("replay");
        std::fs::create_dir_all(&dir).unwrap();
        Replay { w, dir }
    }

    fn put(&self, name: &str, body: impl AsRef<[u8]>) {
        std::fs::write(self.dir.join(name), body).unwrap();
    }

    async fn call(&self, role: Role) -> Report {
        let mut call = self.w.call(role, "UTC");
        call.env
            .insert("FAKE_CODEX_DIR".into(), self.dir.display().to_string());
        call.log_dir = self.w.dir.path().join(format!(
            "logs-{}",
            std::fs::read_dir(&self.dir).unwrap().count()
        ));
        let agent = fake_codex_agent();
        agent::call(&agent, &call, &CancellationToken::new())
            .await
            .unwrap()
    }
}

/// A codex session whose one message is `text`, then `turn.completed` with
/// the recorded reviewer's usage.
fn codex_answering(text: &str) -> String {
    let real = cli::transcript("real-reviewer-approve.jsonl");
    let lines: Vec<&str> = real.lines().collect();
    format!(
        "{}\n{}\n{}\n{}\n",
        lines[0],
        lines[1],
        serde_json::json!({"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":text}}),
        lines[3]
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_codex_streams_cut_broken_or_empty_are_read_for_what_they_are() {
    let r = Replay::new();
    let real = cli::transcript("real-writer-patch.jsonl");
    // 1. turn.completed is the last line and has no newline.
    r.put("writer-1.jsonl", real.trim_end_matches('\n'));
    // 2. Bytes that are not UTF-8 in the message, and a stray line of them.
    let bad = real.replace(
        "Hello from fake",
        "Added sub (caf@E9@@FF@).\\n\\nFILES:\\n- calc.txt",
    );
    let mut bytes = Vec::new();
    for (i, l) in bad.lines().enumerate() {
        if i == 2 {
            bytes.extend_from_slice(b"\xff\xfe warning: \xc3\x28 stray\n");
        }
        let mut parts = l.split("@E9@@FF@");
        bytes.extend_from_slice(parts.next().unwrap().as_bytes());
        for p in parts {
            bytes.extend_from_slice(b"\xe9\xff");
            bytes.extend_from_slice(p.as_bytes());
        }
        bytes.push(b'\n');
    }
    r.put("writer-2.jsonl", &bytes);
    // 3. A panic mid-stream (openai/codex#7990): a benign ERROR log line, then
    // a tokio worker's panic with its message on the next line; exit 101.
    let cut = &real[..real.find(r#""type":"agent_message""#).unwrap()];
    r.put("writer-3.jsonl", cut);
    r.put("writer-3.stderr", "2026-04-25T10:00:00.000000Z ERROR codex_core::session: failed to record rollout items: thread 01a2 not found\nthread 'tokio-runtime-worker' panicked at core/src/util.rs:21:9:\nFunction call output is missing for call id: call_Mx1hEL51XPh0uQKthJIcbenN\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n");
    r.put("writer-3.exit", "101");
    // 4. Killed by SIGSEGV after its session started.
    r.put(
        "writer-4.jsonl",
        real.lines()
            .take(2)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    );
    r.put("writer-4.signal", "SEGV");
    // 5. Nothing at all, exit 0.
    r.put("writer-5.jsonl", "");
    // 6. A turn that reports no usage, 7. one with null counts.
    r.put("writer-6.jsonl", real.replace(r#","usage":{"input_tokens":200,"cached_input_tokens":80,"cache_write_input_tokens":0,"output_tokens":14,"reasoning_output_tokens":0}"#, ""));
    r.put(
        "writer-7.jsonl",
        real.replace(
            r#""input_tokens":200,"cached_input_tokens":80"#,
            r#""input_tokens":null,"cached_input_tokens":null"#,
        ),
    );

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.failure, None, "{}", explain(&rep));
    assert_eq!(
        (rep.text.as_str(), rep.usage.tokens_in, rep.usage.tokens_out),
        ("Hello from fake", Some(200), Some(14))
    );
    assert_eq!(rep.claimed_files, ["calc.txt"]);

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.failure, None, "{}", explain(&rep));
    assert_eq!(
        rep.text,
        "Added sub (caf\u{fffd}\u{fffd}).\n\nFILES:\n- calc.txt"
    );
    assert_eq!(rep.claimed_files, ["calc.txt"]);
    assert_eq!(rep.usage.tokens_in, Some(200));

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.outcome.exit_code, Some(101));
    assert_eq!(
        rep.failure.as_deref(),
        Some(
            "codex stopped without completing the turn; its last line was cut off in the middle of an event [exited (code 101): thread 'tokio-runtime-worker' panicked at core/src/util.rs:21:9: Function call output is missing for call id: call_Mx1hEL51XPh0uQKthJIcbenN]"
        ),
        "{}",
        explain(&rep)
    );
    assert!(rep.limit.is_none());

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.outcome.signal, Some(11), "{}", explain(&rep));
    assert_eq!(
        rep.failure.as_deref(),
        Some("codex stopped without completing the turn [exited (signal 11)]")
    );

    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.outcome.exit_code, Some(0));
    assert_eq!(
        rep.failure.as_deref(),
        Some("codex printed no turn (no `turn.started` event)")
    );
    assert_eq!(rep.text, "");

    let usages = [
        agent::Usage::default(),
        agent::Usage {
            tokens_in: None,
            tokens_out: Some(14),
            cost_usd: None,
        },
    ];
    for usage in usages {
        let rep = r.call(Role::Writer).await;
        let got = (rep.failure.clone(), rep.usage.clone());
        assert_eq!(got, (None, usage), "{}", explain(&rep));
    }
}

/// A verdict as read: decision and findings, or none.
type ReadVerdict = Option<(Decision, Vec<String>)>;

#[tokio::test(flavor = "multi_thread")]
async fn replay_codex_odd_reviewer_answers_are_read_by_their_last_verdict() {
    let rc = |f: &str| Some((Decision::RequestChanges, vec![f.to_string()]));
    let approve = Some((Decision::Approve, vec![]));
    let cases: Vec<(&str, ReadVerdict)> = vec![
        (
            "Reviewed the diff.\n```json\n{\"verdict\": \"approve\", \"findings\": [], \"conditions\": []}\n```",
            approve.clone(),
        ),
        (
            "{\"verdict\":\"request_changes\",\"findings\":[\"calc.txt lacks mul\"]}\nHappy to look again.",
            rc("calc.txt lacks mul"),
        ),
        (
            "{\"verdict\":\"approve\",\"findings\":[]}\nHold on:\n```json\n{\n  \"verdict\": \"request_changes\",\n  \"findings\": [\"no test for sub\"]\n}\n```",
            rc("no test for sub"),
        ),
        (
            "{\"verdict\":\"Approve\",\"findings\":[],\"notes\":\"fine\",\"risk\":1}",
            approve.clone(),
        ),
        (
            "{\"verdict\":\"approve\",\"findings\":[]}\n{\"verdict\":\"lgtm\",\"findings\":[]}",
            None,
        ),
    ];
    let r = Replay::new();
    for (i, (text, _)) in cases.iter().enumerate() {
        r.put(&format!("reviewer-{}.jsonl", i + 1), codex_answering(text));
    }
    for (text, want) in cases {
        let rep = r.call(Role::Reviewer).await;
        assert_eq!(rep.failure, None, "{}", explain(&rep));
        assert_eq!(rep.verdict.map(|v| (v.verdict, v.findings)), want, "{text}");
        assert_eq!(
            (rep.usage.tokens_in, rep.usage.tokens_out),
            (Some(100), Some(7))
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_codex_50_mib_lines_are_read_around_and_within() {
    // A command whose output is 50 MiB on one line, failed; then the answer.
    // And a reviewer whose one message is 50 MiB, its verdict at the end.
    let r = Replay::new();
    let real = cli::transcript("real-writer-patch.jsonl");
    let big = json_with_repeat(
        &serde_json::json!({"type":"item.completed","item":{"id":"item_9","type":"command_execution","command":"bash -lc 'cat huge.log; false'","aggregated_output":"@BIG@","exit_code":1,"status":"failed"}}).to_string(),
        "log \"line\" é\n",
        50 << 20 >> 4,
    );
    let mut lines: Vec<&str> = real.lines().collect();
    lines.insert(4, &big);
    r.put("writer-1.jsonl", lines.join("\n") + "\n");
    let text = "@BIG@\n{\"verdict\":\"request_changes\",\"findings\":[\"the log is 50 MiB\"]}";
    r.put(
        "reviewer-1.jsonl",
        json_with_repeat(
            &codex_answering(text),
            "quoted \"log\" line\n",
            50 << 20 >> 4,
        ),
    );
    let started = Instant::now();
    let rep = r.call(Role::Writer).await;
    assert_eq!(rep.failure, None, "{}", rep.outcome.stderr_tail);
    assert!(rep.outcome.stdout_bytes > 50 << 20);
    assert_eq!(
        rep.notes,
        ["1 command failed or was declined"],
        "the exit code after 50 MiB of output was read"
    );
    assert_eq!(
        (rep.text.as_str(), rep.usage.tokens_in),
        ("Hello from fake", Some(200))
    );
    let rep = r.call(Role::Reviewer).await;
    assert_eq!(rep.failure, None, "{}", rep.outcome.stderr_tail);
    assert_eq!(
        rep.verdict.map(|v| v.findings),
        Some(vec!["the log is 50 MiB".to_string()])
    );
    assert!(
        rep.text.starts_with("quoted \"log\" line\n")
            && rep.text.contains(" bytes cut]…")
            && rep.text.len() < 4 << 20
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reviewer_whose_stream_shows_a_file_change_is_void() {
    // The checkout is untouched, but the reviewer's own events show a
    // completed file change outside it: its sandbox was not read-only.
    let (f, gh, d) = replay_fixture("[limits]\nrounds = 1\n").await;
    put_sub_writer(&d);
    let approve = cli::transcript("real-reviewer-approve.jsonl");
    let mut lines: Vec<String> = approve.lines().map(String::from).collect();
    lines.insert(2, serde_json::json!({"type":"item.completed","item":{"id":"item_9","type":"file_change","changes":[{"path":"/tmp/nightshift-codex-reviewer.txt","kind":"add"}],"status":"completed"}}).to_string());
    put(&d, "reviewer.jsonl", &(lines.join("\n") + "\n"));
    f.drain_exits(1, &[]);
    let item = &f.report()["items"][0];
    assert_eq!(item["outcome"], "review_void", "{item:#}");
    assert!(
        item["reason"]
            .as_str()
            .unwrap()
            .contains("changed files: /tmp/nightshift-codex-reviewer.txt"),
        "{item:#}"
    );
    assert!(gh.prs().is_empty());
}
