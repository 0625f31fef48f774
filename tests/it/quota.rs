//! Quota gauges, the reserve and paid overage (issue 24,
//! docs/limits.md#gauges): the real Claude Code CLI, logged in as a
//! subscription (`CLAUDE_CODE_OAUTH_TOKEN`: only then does it print
//! `rate_limit_event`s with each window's utilization), against the fake
//! Messages API whose `anthropic-ratelimit-unified-*` response headers set
//! the gauges; the real binary and PostgreSQL.

use crate::agent_claude::{cli_env, real_claude};
use crate::common;
use crate::fakes::anthropic::{FakeAnthropic, Reply, tool, unified};

use serde_json::json;

/// A fixture draining with the real CLI as writer and reviewer (one
/// account, `claude`), logged in as a subscription against `api`, with
/// `quota` as its `[quota]` table and a fake GitHub.
fn world(api: &FakeAnthropic, gh: &common::github::FakeGitHub, quota: &str) -> common::Fixture {
    let bin = real_claude().display().to_string();
    let mut f = common::Fixture::new();
    f.use_github(gh);
    f.token = Some("ghp_quota_e2e_token_0123456789".into());
    for (k, v) in cli_env(&f.home, &api.uri(), true) {
        if k != "PATH" && k != "HOME" {
            f.extra_env.push((k, v));
        }
    }
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n[quota]\n{quota}\n[writer]\nkind = \"claude\"\ncommand = [\"{bin}\"]\n\n[reviewer]\nkind = \"claude\"\ncommand = [\"{bin}\"]\n"
    ));
    f
}

/// One item's model turns: the writer writes `file` and answers, the
/// reviewer approves through its verdict tool.
fn script_item(api: &FakeAnthropic, file: &str) {
    api.writer([
        Reply::Tools(
            None,
            vec![tool(
                "Write",
                json!({"file_path": file, "content": "one more word\n"}),
            )],
        ),
        Reply::Text(format!("Wrote {file}.\n\nFILES:\n- {file}")),
    ]);
    api.reviewer([Reply::Tools(
        None,
        vec![tool(
            "StructuredOutput",
            json!({"verdict": "approve", "findings": [], "conditions": []}),
        )],
    )]);
}

/// The items' outcomes in `report --json` `rep`, in plan order.
fn outcomes(rep: &serde_json::Value) -> Vec<&str> {
    rep["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["outcome"].as_str().unwrap())
        .collect()
}

/// A writer turn that runs `sleep WAIT; echo WORD >> calc.txt` with Bash.
fn bash(word: &str, wait: u32) -> Reply {
    Reply::Tools(
        None,
        vec![tool(
            "Bash",
            json!({"command": format!("sleep {wait}; echo {word} >> calc.txt"), "description": "append a word"}),
        )],
    )
}

/// A reviewer turn giving `v` with `findings` through its verdict tool.
fn verdict(v: &str, findings: &[&str]) -> Reply {
    Reply::Tools(
        None,
        vec![tool(
            "StructuredOutput",
            json!({"verdict": v, "findings": findings, "conditions": []}),
        )],
    )
}

/// Drains "Add sub", "Add mul" and "Add div" with two workers and
/// `reserve = "30%"` (each item's answers set with `by_item`); returns the
/// fixture, `report --json` and both as text for a failure.
fn three_items_two_workers(
    api: &FakeAnthropic,
    gh: &common::github::FakeGitHub,
) -> (common::Fixture, serde_json::Value, String) {
    let f = world(api, gh, "reserve = \"30%\"");
    f.write(
        "NEXT.md",
        "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n- [ ] Add div\n",
    );
    let out = f.drain_exits(0, &["--jobs", "2"]);
    let rep = f.report();
    let said = format!("{rep:#}\n{}", common::text(&out));
    (f, rep, said)
}

/// Gives `f`'s agents a CODEX_HOME of their own and the fake's key, and
/// returns the real Codex CLI's argv pointed at `codex`, as a TOML list of
/// literal strings (the provider table is full of double quotes).
fn with_codex(
    f: &mut common::Fixture,
    codex: &crate::fakes_codex::responses::FakeResponses,
) -> String {
    crate::fakes_codex::cli::use_codex_home(f);
    let mut argv = vec![crate::fakes_codex::cli::real_codex().display().to_string()];
    argv.extend(codex.provider_args());
    argv.iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The 7-day window rises 20 % per model turn; `reserve = "30%"`: the
/// item whose writer read ≥ 70 % finishes its round, the items after it
/// are not started and end `quota_reserved` with the window, its use and
/// its reset; nothing failed (exit 0) and no attempt was used.
#[tokio::test(flavor = "multi_thread")]
async fn the_reserve_stops_new_items_at_the_first_reading_over_it() {
    let api = FakeAnthropic::start().await;
    let gh = common::github::FakeGitHub::start().await;
    let week_reset = (now() / 60 + 3 * 24 * 60) * 60;
    let session_reset = (now() / 60 + 120) * 60;
    // Turns: item 1 writer 20 %, 40 %, reviewer 60 %; item 2 writer 80 %,
    // 100 % (over the reserve), reviewer 120 % (as read).
    api.quota(
        [0.2, 0.4, 0.6, 0.8, 1.0, 1.2].map(|w| unified(0.1, w, (session_reset, week_reset), false)),
    );
    let f = world(&api, &gh, "reserve = \"30%\"");
    f.write(
        "NEXT.md",
        "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n- [ ] Add div\n- [ ] Add pow\n",
    );
    for file in ["sub.txt", "mul.txt", "div.txt", "pow.txt"] {
        script_item(&api, file);
    }
    let out = f.drain_exits(0, &[]);
    let rep = f.report();
    let outcomes = outcomes(&rep);
    assert_eq!(
        outcomes,
        ["pr_opened", "pr_opened", "quota_reserved", "quota_reserved"],
        "{rep:#}\n{}",
        common::text(&out)
    );
    let reason = rep["items"][2]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("not started: the writer agent's account \"claude\" has used 100% of its seven_day window (resets at ")
            && reason.contains("[quota] reserve keeps 30% for the day"),
        "{reason}"
    );
    // The two later items made no agent call: the CLI was not asked again.
    assert_eq!(api.left(), (4, 2), "items 3 and 4 were not started");
    // Every call's readings are in the ledger, as read (120 % too).
    let seven: String = f.db.sql(
        "SELECT string_agg(round(percent)::text, ',' ORDER BY id) FROM quota_readings WHERE quota_window = 'seven_day'",
    );
    assert_eq!(seven, "40,60,100,120", "writer, reviewer, writer, reviewer");
    assert_eq!(
        f.db.sql("SELECT count(*) FROM quota_stops WHERE account = 'claude' AND quota_window = 'seven_day'"),
        "1"
    );
    // `status` shows the account's latest reading of each window.
    let st = common::text(&f.run(&["status"]));
    assert!(
        st.contains("quota claude: five_hour 10% · read ")
            && st.contains("quota claude: seven_day 120% · read "),
        "{st}"
    );
    let js: serde_json::Value =
        serde_json::from_slice(&f.run(&["status", "--json"]).stdout).unwrap();
    let windows = js["quota"]["claude"]["windows"].as_array().unwrap();
    let week = windows.iter().find(|w| w["window"] == "seven_day").unwrap();
    assert_eq!(
        (
            week["percent"].as_f64(),
            week["stale"].as_bool(),
            week["raw_utilization"].as_str()
        ),
        (Some(120.0), Some(false), Some("1.2"))
    );
    // `plan` prints each account's room under the reserve.
    let plan = common::text(&f.run(&["plan"]));
    assert!(
        plan.contains("quota claude: seven_day 120% · read ")
            && plan.contains("· the reserve (30%) leaves the night 0%")
            && plan.contains("quota claude: five_hour 10% · read "),
        "{plan}"
    );
    let js: serde_json::Value = serde_json::from_slice(&f.run(&["plan", "--json"]).stdout).unwrap();
    let week = js["quota"]["claude"]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["window"] == "seven_day")
        .cloned()
        .unwrap();
    assert_eq!(
        (week["reserve"].as_f64(), week["room"].as_f64()),
        (Some(30.0), Some(0.0))
    );
}

/// Paid overage in use (`anthropic-ratelimit-unified-overage-in-use:
/// true`, the 7-day window full): with `overage = "never"` (the default)
/// the round that saw it finishes, then the account pauses as at a usage
/// limit until the window resets — after the deadline here, so the next
/// item ends `deadline`; with `overage = "allow"` the night goes on and the
/// report shows the overage used.
#[tokio::test(flavor = "multi_thread")]
async fn overage_in_use_pauses_the_account_unless_allowed() {
    for allow in [false, true] {
        let api = FakeAnthropic::start().await;
        let gh = common::github::FakeGitHub::start().await;
        let week_reset = (now() / 60 + 2 * 24 * 60) * 60;
        api.quota([unified(0.3, 1.0, (now() + 7200, week_reset), true)]);
        let quota = if allow {
            "reserve = \"0%\"\noverage = \"allow\""
        } else {
            "reserve = \"0%\""
        };
        let f = world(&api, &gh, quota);
        f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n");
        for file in ["sub.txt", "mul.txt"] {
            script_item(&api, file);
        }
        // A deadline in 40 minutes: a usage-limit sleep is at most 6 hours
        // (`limit_sleep_max`), so the pause until the 7-day reset outlasts it.
        let sha = f.plan_sha();
        common::assert_ok(&f.run(&["approve", &sha]), "approve");
        let deadline = (chrono::Utc::now() + chrono::Duration::minutes(40))
            .format("%H:%M")
            .to_string();
        let out = f.run(&["drain", "--deadline", &deadline, "--tz", "UTC"]);
        let rep = f.report();
        let outcomes = outcomes(&rep);
        let said = format!("{rep:#}\n{}", common::text(&out));
        if allow {
            assert_eq!(out.status.code(), Some(0), "{said}");
            assert_eq!(outcomes, ["pr_opened", "pr_opened"], "{said}");
            let q = rep["quota"].as_array().unwrap();
            let week = q.iter().find(|w| w["window"] == "seven_day").unwrap();
            assert_eq!(week["overage_in_use"], true, "{said}");
            let text = common::text(&f.run(&["report"]));
            assert!(
                text.contains("claude seven_day 100% → 100% (resets ")
                    && text.contains("· overage used"),
                "{text}"
            );
            assert_eq!(api.left(), (0, 0));
        } else {
            assert_eq!(outcomes, ["pr_opened", "deadline"], "{said}");
            let reason = rep["items"][1]["reason"].as_str().unwrap();
            assert!(
                reason.contains("usage limit resets at") && reason.contains("after the deadline"),
                "{reason}"
            );
            // Item 1's round finished (its reviewer ran); item 2 made no call.
            assert_eq!(api.left(), (2, 1), "{said}");
            let pause =
                f.db.sql("SELECT message FROM account_pauses WHERE account = 'claude'");
            assert!(
                pause.is_empty(),
                "a pause past the deadline is not taken: {pause}"
            );
        }
    }
}

/// A CLI that reports no gauge (an API-key login: the real CLI prints no
/// `rate_limit_event`): the night runs as before, nothing is recorded, and
/// `status` says the gauge is unknown.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_gauge_the_night_runs_as_before_and_status_says_unknown() {
    let api = FakeAnthropic::start().await;
    let gh = common::github::FakeGitHub::start().await;
    api.quota([unified(0.99, 0.99, (now() + 3600, now() + 86400), false)]);
    let mut f = world(&api, &gh, "reserve = \"30%\"");
    f.extra_env.retain(|(k, _)| k != "CLAUDE_CODE_OAUTH_TOKEN");
    f.extra_env.push((
        "ANTHROPIC_API_KEY".into(),
        "sk-ant-api03-fake-test-key".into(),
    ));
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n");
    for file in ["sub.txt", "mul.txt"] {
        script_item(&api, file);
    }
    f.drain_exits(0, &[]);
    let rep = f.report();
    assert_eq!(rep["items"][1]["outcome"], "pr_opened", "{rep:#}");
    assert_eq!(f.db.sql("SELECT count(*) FROM quota_readings"), "0");
    assert_eq!(rep["quota"], json!([]));
    let st = common::text(&f.run(&["status"]));
    assert!(
        st.contains("quota claude: gauge unknown (its agent has reported no quota reading)"),
        "{st}"
    );
    let js: serde_json::Value =
        serde_json::from_slice(&f.run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(js["quota"]["claude"]["gauge"], "unknown");
}

/// The real Codex CLI prints no rate-limit event on `exec --json`'s
/// stdout, but writes the `x-codex-*` headers' snapshot to its session
/// file: the call's report carries both windows from there, as percent.
#[tokio::test(flavor = "multi_thread")]
async fn the_real_codex_cli_s_gauges_are_read_from_its_session_file() {
    use crate::fakes_codex::{cli, responses};
    use nightshift::agent::{self, Call, Role};
    use nightshift::config::{AgentConfig, AgentKind};
    let w = common::Checkout::new("checkout");
    let fake =
        responses::FakeResponses::start(vec![responses::Reply::Message("Done.".into())]).await;
    let (r5, r7) = (now() + 3000, now() + 2 * 86400);
    fake.rate_limits((42.5, 300, r5), (71.0, 10080, r7));
    let mut env = std::collections::BTreeMap::new();
    env.insert(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    );
    env.insert("HOME".to_string(), w.home.display().to_string());
    let codex_home = w.dir.path().join("codex-home");
    env.insert("CODEX_HOME".to_string(), codex_home.display().to_string());
    env.insert(
        "FAKE_KEY".to_string(),
        "fake-key-for-the-local-server".to_string(),
    );
    let call = Call {
        role: Role::Writer,
        round: 1,
        prompt: "# Item: Add sub\n".into(),
        contract_json: "{}".into(),
        feedback: String::new(),
        cwd: w.repo.clone(),
        timeout: std::time::Duration::from_secs(120),
        env,
        tz: "UTC".parse().unwrap(),
        log_dir: w.dir.path().join("logs"),
        secrets: vec![],
        run_as: None,
        max_output: nightshift::config::DEFAULT_MAX_AGENT_OUTPUT,
        sandbox: None,
    };
    let mut command = vec![cli::real_codex().display().to_string()];
    command.extend(fake.provider_args());
    let agent = AgentConfig {
        kind: AgentKind::Codex,
        command,
        permission_flags: None,
        model: None,
        account: None,
        fallback: None,
        allow_hosts: vec![],
    };
    let r = agent::call(&agent, &call, &tokio_util::sync::CancellationToken::new())
        .await
        .expect("codex starts");
    let stdout = std::fs::read_to_string(r.outcome.stdout_path.as_ref().unwrap()).unwrap();
    assert_eq!(r.failure, None, "{stdout}");
    assert!(!stdout.contains("rate_limits"), "not on stdout: {stdout}");
    let got: Vec<String> = r
        .gauges
        .iter()
        .map(|g| {
            format!(
                "{} {:?} {:?} {:?}",
                g.window,
                g.percent,
                g.window_minutes,
                g.resets_at.map(|t| t.timestamp())
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            format!("primary Some(42.5) Some(300) Some({r5})"),
            format!("secondary Some(71.0) Some(10080) Some({r7})"),
        ],
        "{stdout}"
    );
    assert!(r.gauges[1].is_long() && r.gauges[0].is_session());
}

/// Two workers on one ledger: "Add mul"'s calls read the 7-day window at
/// 90 % (over `reserve = "30%"`), "Add sub"'s at 20 % while its writer
/// works on. The worker of "Add sub" never read anything over the reserve,
/// yet it starts no second round (its reviewer asked for one): the stop the
/// other worker recorded holds for it too. "Add mul" finished its round;
/// "Add div" is not started.
#[tokio::test(flavor = "multi_thread")]
async fn one_worker_s_reading_over_the_reserve_stops_the_other_before_its_next_call() {
    let api = FakeAnthropic::start().await;
    let gh = common::github::FakeGitHub::start().await;
    let resets = (now() + 3600, (now() / 60 + 3 * 24 * 60) * 60);
    let done = || Reply::Text("Done.".into());
    api.by_item(
        "Add sub",
        (bash("sub", 12), done()),
        verdict("request_changes", &["sub needs a test"]),
        unified(0.1, 0.2, resets, false),
    );
    api.by_item(
        "Add mul",
        (bash("mul", 0), done()),
        verdict("approve", &[]),
        unified(0.1, 0.9, resets, false),
    );
    api.by_item(
        "Add div",
        (bash("div", 0), done()),
        verdict("approve", &[]),
        unified(0.1, 0.2, resets, false),
    );
    let (f, rep, said) = three_items_two_workers(&api, &gh);
    let outcome = |i: usize| rep["items"][i]["outcome"].as_str().unwrap().to_string();
    assert_eq!(
        [outcome(0), outcome(1), outcome(2)],
        ["quota_reserved", "pr_opened", "quota_reserved"],
        "{said}"
    );
    let reason = rep["items"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("stopped before round 2: the writer agent's account \"claude\" has used 90% of its seven_day window"),
        "{reason}"
    );
    // Two workers ran the two items; the one of "Add sub" read only 20 %.
    let workers = f
        .db
        .sql("SELECT count(DISTINCT worker) FROM run_items WHERE title IN ('Add sub', 'Add mul')");
    assert_eq!(workers, "2", "{said}");
    let sub_max = f.db.sql(
        "SELECT max(q.percent) FROM quota_readings q JOIN run_items i ON i.id = q.run_item_id WHERE i.title = 'Add sub' AND q.quota_window = 'seven_day'",
    );
    assert_eq!(sub_max, "20", "{said}");
    assert_eq!(
        f.db.sql("SELECT count(*) FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id WHERE i.title = 'Add sub'"),
        "2",
        "one writer and one reviewer call, no round 2"
    );
}

/// The writer `claude` (the real CLI, a subscription login) with
/// `fallback = "codex"` (the real Codex CLI, `[agents.codex]`) and a claude
/// reviewer. Item 1's first writer call is refused at the 5-hour limit
/// (reset in ~25 s): instead of sleeping, the fallback writes the round;
/// its reviewer stays claude (the other vendor), which waits for the reset.
/// Item 2 finds claude's window reset and is written by claude again. The
/// card names both writers; the PR bodies, the calls and the report say
/// which agent played each round.
#[tokio::test(flavor = "multi_thread")]
async fn at_a_usage_limit_the_fallback_writer_takes_over_and_the_reviewer_stays_the_other_vendor() {
    use crate::fakes_codex::{cli, responses};
    let api = FakeAnthropic::start().await;
    let gh = common::github::FakeGitHub::start().await;
    let codex = responses::FakeResponses::start(vec![
        responses::Reply::Patch(
            "*** Begin Patch\n*** Update File: calc.txt\n@@\n add\n+sub\n*** End Patch".into(),
        ),
        responses::Reply::Message("Added sub.\n\nFILES:\n- calc.txt".into()),
    ])
    .await;
    let reset = now() + 25;
    api.writer([Reply::UsageLimit { reset_epoch: reset }]);
    api.reviewer([Reply::Tools(
        None,
        vec![tool(
            "StructuredOutput",
            json!({"verdict": "approve", "findings": [], "conditions": []}),
        )],
    )]);
    script_item(&api, "mul.txt");
    let mut f = world(&api, &gh, "");
    let list = with_codex(&mut f, &codex);
    let argv = [cli::real_codex().display().to_string()];
    let claude = real_claude().display().to_string();
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n[limits]\nlimit_buffer = \"1s\"\nlimit_sleep_min = \"1s\"\n\n[writer]\nkind = \"claude\"\ncommand = [\"{claude}\"]\nfallback = \"codex\"\n\n[reviewer]\nkind = \"claude\"\ncommand = [\"{claude}\"]\n\n[agents.codex]\nkind = \"codex\"\ncommand = [{list}]\n"
    ));
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n");
    // The card names the fallback: the approval covers both writers.
    let plan = common::text(&f.run(&["plan"]));
    assert!(
        plan.contains(&format!(
            "writer    claude {claude} · fallback codex (codex {}",
            argv[0]
        )) && plan.contains("while its account is paused"),
        "{plan}"
    );
    let out = f.drain_exits(0, &[]);
    let rep = f.report();
    let said = format!("{rep:#}\n{}", common::text(&out));
    let outcomes = outcomes(&rep);
    assert_eq!(outcomes, ["pr_opened", "pr_opened"], "{said}");
    // The calls: claude refused, codex wrote, claude reviewed after the
    // reset; item 2 all claude.
    let calls: Vec<String> =
        f.db.calls()
            .iter()
            .map(|c| {
                format!(
                    "{} {} {} {}",
                    c.item_index,
                    c.role_and_limit(),
                    c.kind,
                    c.meta["fallback"].as_str().unwrap_or("-")
                )
            })
            .collect();
    assert_eq!(
        calls,
        [
            "1 writer:usage_limit claude -",
            "1 writer:- codex codex",
            "1 reviewer:- claude -",
            "2 writer:- claude -",
            "2 reviewer:- claude -",
        ],
        "{said}"
    );
    let reviewed_at = f.db.sql(
        "SELECT extract(epoch FROM a.started_at)::bigint FROM agent_calls a WHERE a.role = 'reviewer' ORDER BY a.id LIMIT 1",
    );
    assert!(
        reviewed_at.parse::<i64>().unwrap() >= reset,
        "the claude reviewer waited for the reset ({reset}): {reviewed_at}"
    );
    assert_eq!((api.left(), codex.left()), ((0, 0), 0), "{said}");
    // The round lines of the PR bodies name the agents.
    let prs = gh.prs();
    let body = |title: &str| {
        prs.iter()
            .find(|p| p["title"].as_str().unwrap().ends_with(title))
            .map(|p| p["body"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert!(
        body("Add sub").contains("1. approved in ")
            && body("Add sub").contains(" · writer codex (fallback) · reviewer claude"),
        "{}",
        body("Add sub")
    );
    assert!(
        body("Add mul").contains(" · writer claude · reviewer claude"),
        "{}",
        body("Add mul")
    );
    assert_eq!(
        rep["items"][0]["fallback"],
        json!([{"round": 1, "role": "writer", "agent": "codex", "kind": "codex"}]),
        "{said}"
    );
    assert_eq!(rep["items"][1]["fallback"], json!([]));
    let text = common::text(&f.run(&["report"]));
    assert!(
        text.contains("rounds played by a fallback agent")
            && text.contains("  item 1 round 1: writer codex (codex)"),
        "{text}"
    );
}

/// A reserve stop driven to its end (docs/limits.md#reserve, issue 24
/// point 5). Two workers; "Add mul"'s calls read the 7-day window at 90 %
/// (over `reserve = "30%"`) with its reset R1 four minutes ahead, before the
/// deadline: the worker done with "Add mul" does not end "Add div"
/// `quota_reserved` but waits for the reset, recorded as a `quota_reserve`
/// sleep. "Add sub"'s writer, still working, then reads the window at 20 %
/// with a reset days later (the window reset): the first worker to see it
/// ends the stop, and the waiting worker resumes at once, long before R1.
/// Nothing failed and no attempt was used.
#[tokio::test(flavor = "multi_thread")]
async fn a_reserve_stop_ends_when_a_worker_reads_the_reset_window_and_the_waiting_worker_resumes() {
    let api = FakeAnthropic::start().await;
    let gh = common::github::FakeGitHub::start().await;
    let (r1, r2) = (now() + 240, (now() / 60 + 3 * 24 * 60) * 60);
    let done = || Reply::Text("Done.".into());
    api.by_item(
        "Add sub",
        (bash("sub", 14), done()),
        verdict("approve", &[]),
        unified(0.1, 0.2, (now() + 3600, r2), false),
    );
    api.by_item(
        "Add mul",
        (bash("mul", 2), done()),
        verdict("approve", &[]),
        unified(0.1, 0.9, (now() + 3600, r1), false),
    );
    api.by_item(
        "Add div",
        (bash("div", 0), done()),
        verdict("approve", &[]),
        unified(0.1, 0.2, (now() + 3600, r2), false),
    );
    let (f, rep, said) = three_items_two_workers(&api, &gh);
    assert_eq!(
        outcomes(&rep),
        ["pr_opened", "pr_opened", "pr_opened"],
        "{said}"
    );
    // "Add div" waited for the stop "Add mul"'s reading made, as a sleep.
    let sleeps = f.db.sql(
        "SELECT string_agg(i.title || ' ' || s.kind || ' ' || (extract(epoch FROM s.resets_at)::bigint = $R1)::text, ',') FROM limit_sleeps s JOIN run_items i ON i.id = s.run_item_id"
            .replace("$R1", &r1.to_string())
            .as_str(),
    );
    assert_eq!(sleeps, "Add div quota_reserve true", "{said}");
    // The run's sleep says what it waits for (status and the board read
    // it): the reserve, not a usage limit.
    let slept =
        f.db.sql("SELECT string_agg(data->>'kind', ',') FROM events WHERE kind = 'sleeping'");
    assert_eq!(slept, "quota_reserve", "{said}");
    // The stop ended when "Add sub"'s reading came in, long before R1, and
    // "Add div" started its work then.
    let ended = f.db.sql(
        "SELECT extract(epoch FROM until)::bigint FROM quota_stops WHERE account = 'claude' AND quota_window = 'seven_day'",
    );
    let div_at = f.db.sql(
        "SELECT min(extract(epoch FROM a.started_at))::bigint FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id WHERE i.title = 'Add div'",
    );
    let (ended, div_at): (i64, i64) = (ended.parse().unwrap(), div_at.parse().unwrap());
    assert!(
        ended < r1 - 120 && div_at >= ended && div_at < r1 - 60,
        "stop ended at {ended}, div began at {div_at}, R1 {r1}\n{said}"
    );
    assert_eq!(rep["totals"]["failed"], 0, "the wait is no failure: {said}");
}

/// The run's page (`report --html`) draws each quota window's use over the
/// night under the timeline: one line per account and window, one point
/// per reading, in a real headless browser at desktop and phone widths,
/// with no console error and nothing loaded from outside; a window name as
/// an agent could send it is escaped.
#[tokio::test(flavor = "multi_thread")]
async fn the_html_page_draws_each_window_s_use_over_the_night() {
    let api = FakeAnthropic::start().await;
    let gh = common::github::FakeGitHub::start().await;
    let resets = (now() + 3600, (now() / 60 + 3 * 24 * 60) * 60);
    api.quota([0.2, 0.4, 0.6].map(|w| unified(0.1, w, resets, false)));
    let f = world(&api, &gh, "reserve = \"0%\"");
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n");
    script_item(&api, "sub.txt");
    f.drain_exits(0, &[]);
    // Two calls (writer, reviewer), two windows each; one more reading with
    // a hostile window name.
    f.db.sql(
        "INSERT INTO quota_readings (account, source, run_id, quota_window, percent, raw) \
         SELECT 'claude', 'claude', id, '<img src=x onerror=alert(1)>', 33, '{}'::jsonb FROM runs",
    );
    let page = f.dir.path().join("night.html");
    common::assert_ok(
        &f.run(&["report", "--html", page.to_str().unwrap()]),
        "report --html",
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<img"), "the window's name is escaped");
    assert!(html.contains("claude &lt;img src=x"), "and shown");
    for load in [" src=\"", "<link", "@import", "url(", "<script"] {
        assert!(!html.contains(load), "the page loads nothing: {load}");
    }
    let profile = tempfile::tempdir().unwrap();
    for width in [1280, 390] {
        let (dom, log) = crate::morning::render(&page, width, profile.path());
        assert!(dom.contains("Quota over the night"), "{dom}");
        assert_eq!(
            dom.matches("class=\"quota-line\"").count(),
            3,
            "five_hour, seven_day and the odd one at {width} px"
        );
        assert_eq!(
            dom.matches("class=\"quota-point\"").count(),
            5,
            "one point per reading at {width} px"
        );
        assert!(
            dom.contains("claude seven_day 40% → 60%, resets "),
            "the legend at {width} px: {dom}"
        );
        let console = crate::morning::console_errors(&log);
        assert!(console.is_empty(), "console at {width} px: {console:?}");
    }
}

/// A reserve stop of the writer's account with `fallback = "codex"`: "Add
/// sub"'s claude writer reads the 7-day window at 90 % (over `reserve =
/// "30%"`, its reset days away); "Add mul" is not ended `quota_reserved`
/// but written by the fallback, the real Codex CLI, whose account is free;
/// the codex reviewer reviews both. Nothing is counted failed.
#[tokio::test(flavor = "multi_thread")]
async fn a_reserve_stop_of_the_writer_s_account_hands_new_items_to_the_fallback() {
    use crate::fakes_codex::responses;
    let api = FakeAnthropic::start().await;
    let gh = common::github::FakeGitHub::start().await;
    let approve = || responses::Reply::Message(r#"{"verdict":"approve","findings":[]}"#.into());
    let codex = responses::FakeResponses::start(vec![
        approve(),
        responses::Reply::Patch(
            "*** Begin Patch\n*** Update File: calc.txt\n@@\n add\n+mul\n*** End Patch".into(),
        ),
        responses::Reply::Message("Added mul.\n\nFILES:\n- calc.txt".into()),
        approve(),
    ])
    .await;
    let resets = (now() + 3600, (now() / 60 + 3 * 24 * 60) * 60);
    api.quota([0.5, 0.9].map(|w| unified(0.1, w, resets, false)));
    api.writer([
        Reply::Tools(
            None,
            vec![tool(
                "Write",
                json!({"file_path": "sub.txt", "content": "one more word\n"}),
            )],
        ),
        Reply::Text("Wrote sub.txt.\n\nFILES:\n- sub.txt".into()),
    ]);
    let mut f = world(&api, &gh, "");
    let list = with_codex(&mut f, &codex);
    let claude = real_claude().display().to_string();
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n[quota]\nreserve = \"30%\"\n\n[writer]\nkind = \"claude\"\ncommand = [\"{claude}\"]\nfallback = \"codex\"\n\n[reviewer]\nkind = \"codex\"\ncommand = [{list}]\n\n[agents.codex]\nkind = \"codex\"\ncommand = [{list}]\n"
    ));
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n");
    let out = f.drain_exits(0, &[]);
    let rep = f.report();
    let said = format!("{rep:#}\n{}", common::text(&out));
    assert_eq!(outcomes(&rep), ["pr_opened", "pr_opened"], "{said}");
    let calls: Vec<String> =
        f.db.calls()
            .iter()
            .map(|c| {
                let fallback = c.meta["fallback"].as_str().unwrap_or("-");
                format!("{} {} {} {fallback}", c.item_index, c.role, c.kind)
            })
            .collect();
    assert_eq!(
        calls,
        [
            "1 writer claude -",
            "1 reviewer codex -",
            "2 writer codex codex",
            "2 reviewer codex -",
        ],
        "{said}"
    );
    assert_eq!(
        f.db.sql("SELECT count(*) FROM quota_stops WHERE account = 'claude'"),
        "1"
    );
    assert_eq!((api.left(), codex.left()), ((0, 0), 0), "{said}");
}

/// `doctor` checks the fallback agents too, since a night may call them
/// (docs/limits.md#fallback): a fallback whose program is missing is a
/// failed `writer fallback` line whose fix names its own table.
#[test]
fn doctor_checks_the_fallback_agents_too() {
    let f = common::Fixture::new();
    let w = f.agent("writer.sh", "#!/bin/sh\necho hi\n");
    let r = f.agent("reviewer.sh", common::night::APPROVE);
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\nfallback = \"spare\"\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n\n[agents.spare]\nkind = \"command\"\ncommand = [\"/nonexistent/spare\"]\naccount = \"spare\"\n"
    ));
    let out = f.run(&["doctor"]);
    let said = common::text(&out);
    let line = common::doctor_line(&out, "writer fallback");
    assert!(
        line.starts_with("FAIL") && line.contains("/nonexistent/spare"),
        "{said}"
    );
    assert!(said.contains("fix [agents.spare] command"), "{said}");
    assert!(
        common::doctor_line(&out, "writer").starts_with("ok"),
        "{said}"
    );
    assert_eq!(common::doctor_line(&out, "reviewer fallback"), "", "{said}");
}

/// A writer whose account meets "Credit balance is too low" mid-round
/// (issue 24): the account stops for the night as without a fallback, but
/// the round is not lost — its fallback (`[agents.spare]`, another
/// account, with credit) takes the call over at once and the item ships;
/// the next item starts on the fallback (docs/limits.md#fallback). Command
/// agents: the rule is the run's, not a CLI's.
#[test]
fn a_writer_without_credit_mid_round_hands_the_call_to_its_fallback() {
    let f = common::Fixture::new();
    let broke = f.agent(
        "broke.sh",
        "#!/bin/sh\necho 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.' >&2\nexit 1\n",
    );
    let spare = f.agent("spare.sh", common::night::WORD_WRITER);
    let r = f.agent("reviewer.sh", common::night::APPROVE);
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n\n[writer]\nkind = \"command\"\ncommand = [\"{broke}\"]\nfallback = \"spare\"\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\naccount = \"review\"\n\n[agents.spare]\nkind = \"command\"\ncommand = [\"{spare}\"]\naccount = \"spare\"\n"
    ));
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n");
    let out = f.approve_and_drain(&[]);
    let rep = f.report();
    let said = format!("{rep:#}\n{}", common::text(&out));
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_eq!(outcomes(&rep), ["branch_pushed", "branch_pushed"], "{said}");
    let calls: Vec<String> =
        f.db.calls()
            .iter()
            .map(|c| {
                format!(
                    "{} {} {}",
                    c.item_index,
                    c.role_and_limit(),
                    c.meta["fallback"].as_str().unwrap_or("-")
                )
            })
            .collect();
    assert_eq!(
        calls,
        [
            "1 writer:no_credit -",
            "1 writer:- spare",
            "1 reviewer:- -",
            "2 writer:- spare",
            "2 reviewer:- -",
        ],
        "{said}"
    );
    // The account without credit stays stopped for the night.
    assert_eq!(
        f.db.sql("SELECT account || ' ' || no_credit::text FROM account_pauses"),
        "command true",
        "{said}"
    );
}
