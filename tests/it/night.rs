//! Nights that run themselves, through the real binary (docs/contract.md, docs/limits.md, docs/ledger.md):
//! `limit parse` over the shared corpus, usage-limit sleeps, the deadline,
//! signals during each slow phase, the one-drain-per-repo lock, resume after a
//! SIGKILL at each phase, `max_attempts`, `schedule` and `status`.
//!
//! Slow phases are reached with real slow components — an agent, a gate, a
//! setup command or a git hook that writes a "ready" file and then sleeps —
//! never with a test-only switch in the binary.

use crate::common;
use crate::common::night::APPROVE;
use common::Table;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::bg::{
    Bg, approve, kill_stalled, outcomes, process_gone, stall_snippet, stalled_child, stalled_shell,
    status_text, wait_until,
};
use common::github::FakeGitHub;
use common::night::WORD_WRITER;
use common::{Fixture, assert_ok, git, text};
use serde_json::Value;

/// Local `nightshift/*` branches left in any checkout under the data dir.
fn slot_branches(data: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![(data.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        if d.join(".git").is_dir() {
            let b = git(
                &d,
                &[
                    "branch",
                    "--list",
                    "nightshift/*",
                    "--format=%(refname:short)",
                ],
            );
            found.extend(
                b.lines()
                    .filter(|l| !l.is_empty())
                    .map(|l| format!("{}: {l}", d.display())),
            );
            continue;
        }
        if depth >= 5 {
            continue;
        }
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// 1. limit parse over the shared corpus
// ---------------------------------------------------------------------------------------------

#[test]
fn limit_parse_answers_every_corpus_line_as_the_table_says() {
    let messages: std::collections::BTreeMap<usize, &str> =
        include_str!("../data/limit-messages.txt")
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
            .map(|(i, l)| (i + 1, l.split('\t').next().unwrap()))
            .collect();
    let bin = env!("CARGO_BIN_EXE_nightshift");
    let rows: Vec<&str> = include_str!("../data/limit-expected.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    // Every row is read by the library, as `limit parse` reads it; every
    // tenth row also through the binary, whose JSON must be the library's
    // (one process per row cost 7.5 s of CPU in the unoptimized build, most
    // of it building the patterns at each start).
    let read = |row: &str| -> Value {
        let c: Vec<&str> = row.split('\t').collect();
        let msg = messages[&c[0].parse::<usize>().unwrap()];
        let now = DateTime::parse_from_rfc3339(c[1])
            .unwrap()
            .with_timezone(&Utc);
        let (zone, _) = nightshift::schedule::resolve_zone(Some(c[2])).unwrap();
        let reading = nightshift::limit::read_text(msg, now, zone);
        let policy = nightshift::run::sleep_policy(&nightshift::config::Limits::default());
        nightshift::limit::explain(&reading, now, zone, &policy)
    };
    let parse = |row: &str| {
        let c: Vec<&str> = row.split('\t').collect();
        let msg = messages[&c[0].parse::<usize>().unwrap()];
        Command::new(bin)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .args([
                "limit", "parse", "--now", c[1], "--tz", c[2], "--json", "--", msg,
            ])
            .output()
            .unwrap()
    };
    let mut through_the_binary = 0;
    for row in rows.iter().step_by(10) {
        let out = parse(row);
        assert_ok(&out, &format!("limit parse of row {row}"));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("row {row}: not JSON ({e}): {}", text(&out)));
        assert_eq!(
            v,
            read(row),
            "row {row}: the binary's JSON is the library's"
        );
        through_the_binary += 1;
    }
    assert!(through_the_binary >= 10, "{through_the_binary}");
    let outputs: Vec<Value> = rows.iter().map(|r| read(r)).collect();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (row, v) in rows.iter().zip(outputs) {
        let c: Vec<&str> = row.split('\t').collect();
        let line: usize = c[0].parse().unwrap();
        let msg = messages[&line];
        let got_reset = v["resets_at"]
            .as_str()
            .map(|s| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc));
        let want_reset = (c[4] != "-").then(|| {
            DateTime::parse_from_rfc3339(c[4])
                .unwrap()
                .with_timezone(&Utc)
        });
        // Throttling lifts when the wait it states ends: `resets_at` gives that instant too.
        let want_reset = match (c[3], c[5]) {
            ("transient", ms) if ms != "-" => Some(
                DateTime::parse_from_rfc3339(c[1])
                    .unwrap()
                    .with_timezone(&Utc)
                    + chrono::TimeDelta::milliseconds(ms.parse().unwrap()),
            ),
            _ => want_reset,
        };
        if v["kind"] != c[3] || got_reset != want_reset {
            wrong.push(format!(
                "line {line} ({}, {}): want {} {:?}, got {} {:?}\n    {msg}",
                c[1], c[2], c[3], want_reset, v["kind"], got_reset
            ));
        }
        for k in ["kind", "resets_at", "sleep_seconds", "source"] {
            assert!(v.get(k).is_some(), "line {line}: no {k:?} in {v}");
        }
        if c[3] == "usage_limit" {
            assert!(
                v["sleep_seconds"].as_u64().is_some_and(|s| s >= 60),
                "line {line}: a usage limit sleeps at least limit_sleep_min: {v}"
            );
        }
        checked += 1;
    }
    assert!(
        wrong.is_empty(),
        "{} of {checked} rows read wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(
        checked >= messages.len(),
        "every corpus line has at least one row ({checked} rows, {} lines)",
        messages.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Usage-limit sleeps
// ---------------------------------------------------------------------------------------------

#[test]
fn a_usage_limit_sleeps_then_retries_the_same_round() {
    let f = Fixture::new();
    let count = f.agents.join("calls");
    // Calls 1 and 2: the real CLI's message on stderr, the error channel, and
    // a non-zero exit (a limit seen again after waking sleeps again). Call 3:
    // the work, with prose that merely mentions limits, which must not trigger.
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh
echo x >> {c}
if [ $(wc -l < {c}) -le 2 ]; then echo 'Looking at the task.'; echo \"You've hit your limit · resets 3am (Asia/Taipei)\" >&2; exit 1; fi\n{WORD_WRITER}echo 'Note: the retry now waits until the usage limit resets at 7pm, as the rate limit docs say.'\necho '- handled the case where the CLI says Claude AI usage limit reached|1762952400 (see limit.rs)'\n",
            c = count.display()
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    // The two sleeps (6 s) outlast the item timeout (5 s): sleeping is not the item's work time.
    f.config_with(&w, &r, "[limits]\nrounds = 1\nlimit_sleep_min = \"3s\"\nlimit_sleep_max = \"3s\"\nitem_timeout = \"5s\"\n");
    f.write("NEXT.md", "- [ ] Add sub\n");
    approve(&f);
    let mut bg = Bg::start(
        &f,
        &[
            "drain",
            "--deadline",
            &common::far_deadline(),
            "--tz",
            "Asia/Taipei",
        ],
    );
    let mut seen = String::new();
    wait_until(Duration::from_secs(20), "status to show the sleep", || {
        seen = status_text(&f);
        seen.starts_with("sleeping until")
    });
    let until = f.db.sleeps().iter().map(|s| s.slept_until).max().unwrap();
    let local = until
        .with_timezone(&chrono_tz::Asia::Taipei)
        .format("%H:%M");
    assert_eq!(
        seen,
        format!("sleeping until {local} (usage limit, command)"),
        "status shows the run's local time"
    );
    let json: Value = serde_json::from_slice(&f.run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(json["running"], true);
    assert_eq!(json["sleeping_agent"], "command");
    let status = bg.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", bg.output());
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["branch_pushed"], "{rep:#}");
    assert_eq!(
        rep["items"][0]["rounds"], 1,
        "the interrupted calls did not use up a round"
    );
    assert_eq!(f.db.count(Table::Rounds), 1);
    assert_eq!(f.db.calls_of("writer"), 3);
    // Two sleeps, recorded with message and agent, 3 s each; the prose afterwards slept nothing.
    assert_eq!(f.db.count(Table::LimitSleeps), 2);
    let sleeps = f.db.sleeps();
    let mut kinds: Vec<String> = sleeps
        .iter()
        .map(|s| format!("{} {}", s.agent, s.kind))
        .collect();
    kinds.dedup();
    assert_eq!(kinds, ["command usage_limit"]);
    let first = sleeps.iter().map(|s| s.message.as_str()).min().unwrap();
    assert!(first.contains("You've hit your limit"), "{first}");
    for secs in sleeps.iter().map(|s| s.secs()) {
        assert!(
            (2.9..=3.1).contains(&secs),
            "slept {secs} s, limit_sleep_min/max is 3 s"
        );
    }
    assert!(
        String::from_utf8_lossy(&f.run(&["report"]).stdout).contains("slept"),
        "the report shows the time slept"
    );
    assert!(status_text(&f).starts_with("idle"), "status after the run");
}

#[test]
fn per_minute_throttling_is_a_short_retry_not_a_sleep_until_reset() {
    let f = Fixture::new();
    let once = f.agents.join("throttled-once");
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\nif [ ! -e {o} ]; then touch {o}; echo 'Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 900. Please try again in 174ms.' >&2; exit 1; fi\n{WORD_WRITER}",
            o = once.display()
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "[limits]\nrounds = 1\n");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let started = Instant::now();
    f.drain_exits(0, &[]);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "no long sleep: {:?}",
        started.elapsed()
    );
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["branch_pushed"]);
    assert_eq!(
        rep["items"][0]["rounds"], 1,
        "the throttled call did not use up a round"
    );
    let sleeps = f.db.sleeps();
    let kinds: Vec<&str> = sleeps.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(kinds, ["transient"]);
    let secs = sleeps[0].secs();
    assert!(
        secs <= 1.1,
        "a short retry (the 1 s floor), not a sleep until reset: {secs} s"
    );
}

#[test]
fn a_limit_resetting_after_the_deadline_stops_the_run_at_once() {
    let f = Fixture::new();
    let w = f.agent(
        "writer.sh",
        "#!/bin/sh\necho 'Claude AI usage limit reached|4102444800' >&2\nexit 1\n",
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "[limits]\nlimit_sleep_min = \"1h\"\n");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    approve(&f);
    let deadline = (Utc::now() + chrono::Duration::minutes(30)).to_rfc3339();
    let started = Instant::now();
    let out = f.run(&["drain", "--deadline", &deadline]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the run waited: {:?}",
        started.elapsed()
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "a deadline stop is clean: {}",
        text(&out)
    );
    let rep = f.report();
    assert_eq!(rep["status"], "stopped_deadline", "{rep:#}");
    assert_eq!(outcomes(&rep), ["deadline", "deadline"]);
    // No sleep was taken, so none is recorded (the report would count it as
    // time slept); the limit itself is in the event log.
    assert_eq!(f.db.count(Table::LimitSleeps), 0);
    assert_eq!(f.db.events("usage_limit_after_deadline"), 1);
    assert_eq!(f.db.count(Table::AgentCalls), 1, "nothing ran after it");
    assert!(f.remote_branches().is_empty());
}

// ---------------------------------------------------------------------------------------------
// 3. The deadline
// ---------------------------------------------------------------------------------------------

#[test]
fn no_item_or_round_starts_after_the_deadline() {
    let f = Fixture::new();
    // The writer outlives the deadline (it waits until a second past it,
    // however long the start took on a loaded machine); its gate fails, so
    // round 2 would follow.
    let deadline = Utc::now() + chrono::Duration::seconds(15);
    let until = f.agents.join("deadline");
    std::fs::write(&until, (deadline.timestamp() + 1).to_string()).unwrap();
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\nwhile [ \"$(date +%s)\" -le \"$(cat {})\" ]; do sleep 0.2; done\necho bogus >> calc.txt\n",
            until.display()
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "[limits]\nrounds = 3\n");
    f.write("NEXT.md", "- [ ] Add bogus\n- [ ] Add sub\n");
    approve(&f);
    let out = f.run(&["drain", "--deadline", &deadline.to_rfc3339()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rep = f.report();
    assert_eq!(rep["status"], "stopped_deadline");
    assert_eq!(outcomes(&rep), ["deadline", "deadline"], "{rep:#}");
    assert_eq!(rep["items"][0]["rounds"], 1);
    assert_eq!(f.db.count(Table::Rounds), 1, "round 2 did not start");
    assert_eq!(f.db.count(Table::AgentCalls), 1, "item 2 did not start");
    assert!(slot_branches(&f.data).is_empty());

    // HH:MM is the next occurrence in the zone: a minute ago means tomorrow.
    let approve_sha = approve(&f);
    let now = Utc::now();
    let hhmm = (now - chrono::Duration::minutes(1))
        .format("%H:%M")
        .to_string();
    let out = f.run(&[
        "drain",
        "--approve",
        &approve_sha,
        "--deadline",
        &hhmm,
        "--tz",
        "UTC",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "item 1 fails its gate, item 2 opens a PR: {}",
        text(&out)
    );
    let d = f.db.runs().last().and_then(|r| r.deadline).unwrap();
    let hours = (d - now).num_minutes();
    assert!(
        (23 * 60..24 * 60).contains(&hours),
        "deadline {d} is the next {hhmm} after {now}"
    );
    assert_eq!(f.report()["status"], "completed");
    // A malformed deadline is a usage error.
    let out = f.run(&["drain", "--deadline", "7am"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

// ---------------------------------------------------------------------------------------------
// 4. Signals
// ---------------------------------------------------------------------------------------------

/// Runs a drain until `ready` exists (or `ready_sql` is true), sends `sig`,
/// and checks the clean stop of docs/limits.md.
fn stops_cleanly_on(
    f: &Fixture,
    ready: impl Fn() -> bool,
    sig: nix::sys::signal::Signal,
    stalled: &str,
) {
    approve(f);
    let mut bg = Bg::start(f, &["drain", "--deadline", &common::far_deadline()]);
    wait_until(Duration::from_secs(30), "the slow phase", &ready);
    let child_pid = stalled_child(&f.agents, stalled);
    let sent = Instant::now();
    bg.signal(sig);
    let status = bg.wait(Duration::from_secs(10));
    assert!(sent.elapsed() < Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{}", bg.output());
    if let Some(pid) = child_pid {
        wait_until(
            Duration::from_secs(3),
            "the stalled child to be killed",
            || process_gone(pid),
        );
    }
    let rep = f.report();
    assert_eq!(rep["status"], "stopped_signal", "{rep:#}\n{}", bg.output());
    assert_eq!(
        outcomes(&rep),
        ["interrupted"],
        "the second item never started: {rep:#}"
    );
    // The report still names what the stop left undone.
    assert_eq!(
        rep["not_started"].as_array().map(|a| a
            .iter()
            .map(|i| (
                i["index"].as_i64().unwrap(),
                i["title"].as_str().unwrap().to_string()
            ))
            .collect::<Vec<_>>()),
        Some(vec![(2, "Add pow".to_string())]),
        "{rep:#}"
    );
    let human = f.run(&["report"]);
    assert!(
        text(&human).contains("not started (the run stopped before them):")
            && text(&human).contains("Add pow"),
        "{}",
        text(&human)
    );
    assert!(
        slot_branches(&f.data).is_empty(),
        "a local branch was left: {:?}",
        slot_branches(&f.data)
    );
    assert!(
        f.remote_branches().is_empty(),
        "something was pushed: {:?}",
        f.remote_branches()
    );
    assert!(status_text(f).starts_with("idle"));
}

#[test]
fn sigterm_during_an_agent_call() {
    let f = Fixture::new();
    std::fs::write(f.agents.join("writer.stall"), "").unwrap();
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\necho sub >> calc.txt\n{}",
            stall_snippet(&f.agents, "writer")
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    let ready = f.agents.join("writer.ready");
    stops_cleanly_on(
        &f,
        || ready.exists(),
        nix::sys::signal::Signal::SIGTERM,
        "writer",
    );
    // The next drain takes the stopped run up under its own approval, as it
    // would a crashed one: its unfinished items run, no approval is used.
    let stopped = f.db.sql("SELECT id FROM runs");
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("resuming stopped run {stopped}")),
        "{}",
        text(&out)
    );
    assert_eq!(
        f.db.sql(&format!(
            "SELECT count(*) FROM runs WHERE resumes = '{stopped}'"
        )),
        "1"
    );
    assert_eq!(f.db.count(Table::ApprovalUses), 1);
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["branch_pushed", "branch_pushed"],
        "{rep:#}"
    );
}

#[test]
fn sigint_during_a_gate() {
    let f = Fixture::new();
    std::fs::write(f.agents.join("gate.stall"), "").unwrap();
    let gate = f.agent(
        "gate.sh",
        &format!(
            "#!/bin/sh\n{}sh test.sh\n",
            stall_snippet(&f.agents, "gate")
        ),
    );
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config(&format!("verify = [\"{gate}\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    let ready = f.agents.join("gate.ready");
    stops_cleanly_on(
        &f,
        || ready.exists(),
        nix::sys::signal::Signal::SIGINT,
        "gate",
    );
}

#[test]
fn sigterm_during_a_usage_limit_sleep() {
    let f = Fixture::new();
    let w = f.agent(
        "writer.sh",
        "#!/bin/sh\necho \"You've hit your 5-hour limit · resets 3am (UTC)\" >&2\nexit 1\n",
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "[limits]\nlimit_sleep_min = \"5m\"\n");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    stops_cleanly_on(
        &f,
        || {
            f.db.sql("SELECT count(*) FROM runs WHERE phase = 'sleeping'") == "1"
        },
        nix::sys::signal::Signal::SIGTERM,
        "none",
    );
    assert_eq!(f.db.count(Table::LimitSleeps), 1);
}

#[test]
fn sigterm_during_a_push() {
    let f = Fixture::new();
    std::fs::write(f.agents.join("hook.stall"), "").unwrap();
    let hook = f.remote.join("hooks").join("pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat > /dev/null\n{}",
            stall_snippet(&f.agents, "hook")
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    let ready = f.agents.join("hook.ready");
    stops_cleanly_on(
        &f,
        || ready.exists(),
        nix::sys::signal::Signal::SIGTERM,
        "hook",
    );
    assert_eq!(f.db.count(Table::PullRequests), 0);
}

/// A signal while the checkout is fetched (a slow network) kills the fetch
/// at once: the remote is reached over "ssh" through a GIT_SSH_COMMAND that
/// stalls when called from a slot (the drain's own `ls-remote` runs in the
/// user's checkout and goes through).
#[test]
fn sigterm_during_the_checkouts_fetch() {
    let mut f = Fixture::new();
    let ssh = f.agent(
        "ssh.sh",
        &format!(
            "#!/bin/sh\n# GIT_SSH_COMMAND: [options] host command; run the command locally.\ncase \"$PWD\" in */slots/*) {};; esac\nfor last; do :; done\nexec sh -c \"$last\"\n",
            stall_snippet(&f.agents, "fetch").trim_end()
        ),
    );
    std::fs::write(f.agents.join("fetch.stall"), "").unwrap();
    f.extra_env.push(("GIT_SSH_COMMAND".into(), ssh));
    git(
        &f.repo,
        &[
            "remote",
            "set-url",
            "origin",
            &format!("ssh://stall.invalid{}", f.remote.display()),
        ],
    );
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    let ready = f.agents.join("fetch.ready");
    stops_cleanly_on(
        &f,
        || ready.exists(),
        nix::sys::signal::Signal::SIGTERM,
        "fetch",
    );
    assert_eq!(f.db.count(Table::AgentCalls), 0, "no agent started");
    let reason =
        f.db.sql("SELECT reason FROM run_items WHERE outcome IS NOT NULL");
    assert!(
        reason.contains("while the checkout was prepared"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_while_github_is_slow_to_open_the_pr() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_slow_github_token_0123456".into());
    gh.state
        .lock()
        .unwrap()
        .create_pr_delays
        .push(Duration::from_secs(60));
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_until(Duration::from_secs(30), "the PR request", || {
        !gh.prs().is_empty()
    });
    bg.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(
        bg.wait(Duration::from_secs(10)).code(),
        Some(1),
        "{}",
        bg.output()
    );
    let rep = f.report();
    assert_eq!(rep["status"], "stopped_signal");
    assert_eq!(outcomes(&rep), ["interrupted"], "{rep:#}");
    assert!(slot_branches(&f.data).is_empty());
    // The next drain resumes the stopped run and finds the PR GitHub made
    // instead of opening a second one: that run's PR, so `pr_opened`.
    f.drain_exits(0, &[]);
    assert_eq!(outcomes(&f.report()), ["pr_opened", "pr_opened"]);
    assert_eq!(gh.prs().len(), 2);
    assert_eq!(f.remote_branches().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// 5. One drain per repository; 9. status while a drain runs
// ---------------------------------------------------------------------------------------------

/// While GitHub is slow to say whether an item already has a PR, `status`
/// names that phase instead of the one before it.
#[tokio::test(flavor = "multi_thread")]
async fn status_shows_the_github_phase_while_github_is_slow() {
    let gh = FakeGitHub::start().await;
    gh.state
        .lock()
        .unwrap()
        .scripted
        .push(common::github::Fault::new("GET", "/repos/owner/repo/pulls", 502).delay_ms(4000));
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_slow_status_token_123456".into());
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    let mut seen = String::new();
    wait_until(
        Duration::from_secs(20),
        "status to show the github phase",
        || {
            seen = status_text(&f);
            seen.ends_with("· github")
        },
    );
    assert!(seen.contains("item 1 \"Add sub\""), "{seen}");
    assert_eq!(
        bg.wait(Duration::from_secs(60)).code(),
        Some(0),
        "{}",
        bg.output()
    );
    assert_eq!(gh.prs().len(), 1);
}

#[test]
fn a_second_drain_is_refused_naming_the_holder_and_status_shows_the_phase() {
    let f = Fixture::new();
    std::fs::write(f.agents.join("writer.stall"), "").unwrap();
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\necho sub >> calc.txt\n{}",
            stall_snippet(&f.agents, "writer")
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    approve(&f);
    let mut first = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    let ready = f.agents.join("writer.ready");
    wait_until(Duration::from_secs(30), "the writer", || ready.exists());

    let run_id = f.db.sql("SELECT id FROM runs");
    let key = f.db.sql("SELECT item_key FROM run_items");
    assert_eq!(
        status_text(&f),
        format!(
            "run {run_id} · item 1 \"Add sub\" ({}) · round 1 · writer",
            &key[..8]
        )
    );
    let json: Value = serde_json::from_slice(&f.run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(
        (
            json["phase"].as_str(),
            json["round"].as_i64(),
            json["item_key"].as_str()
        ),
        (Some("writer"), Some(1), Some(key.as_str()))
    );

    approve(&f);
    let second = f.run(&["drain"]);
    assert_eq!(second.status.code(), Some(3), "{}", text(&second));
    let t = text(&second);
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    assert!(
        t.contains(&format!("pid {}", first.pid())) && t.contains(&host) && t.contains("since "),
        "names the holder (host, pid, start): {t}"
    );
    assert_eq!(f.db.count(Table::Runs), 1, "the refused drain made no run");

    // A drain of the same repository on another database (its own advisory
    // lock) is refused too: the checkouts are shared and locked by a file.
    let other = common::Db::create();
    let mut c = f.cmd();
    c.env("NIGHTSHIFT_DATABASE_URL", &other.url);
    let sha = {
        let out = c.args(["plan", "--json"]).output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["plan_sha"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut c = f.cmd();
    c.env("NIGHTSHIFT_DATABASE_URL", &other.url);
    assert_ok(
        &c.args(["approve", &sha]).output().unwrap(),
        "approve on the other database",
    );
    let mut c = f.cmd();
    c.env("NIGHTSHIFT_DATABASE_URL", &other.url);
    let third = c
        .args(["drain", "--deadline", &common::far_deadline()])
        .output()
        .unwrap();
    assert_eq!(third.status.code(), Some(3), "{}", text(&third));
    assert!(
        text(&third).contains(&format!("pid {}", first.pid()))
            && text(&third).contains("using the checkouts"),
        "{}",
        text(&third)
    );
    assert!(
        ready.exists() && !process_gone(stalled_shell(&f.agents, "writer")),
        "the first drain's writer was not killed"
    );

    first.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(first.wait(Duration::from_secs(10)).code(), Some(1));
}

// ---------------------------------------------------------------------------------------------
// 6. Resume after SIGKILL at each phase
// ---------------------------------------------------------------------------------------------

/// Where the first drain is killed.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// During the setup command, before the writer.
    BeforeAgent,
    /// During the writer.
    DuringAgent,
    /// During the reviewer: the gate has run.
    AfterGate,
    /// During the push (pre-receive hook): the commit exists, nothing pushed.
    AfterCommit,
    /// In the post-receive hook: the branch is on the remote, no PR yet.
    AfterPush,
    /// GitHub made item 1's PR but had not answered yet: the ledger does not
    /// know its number.
    DuringPrCreate,
    /// During item 2's writer: item 1's PR exists and is recorded.
    AfterPrCreate,
    /// Item 1's PR creation failed (`pr_failed`), killed during item 2.
    AfterPrFailed,
}

async fn crash_and_resume(phase: Phase) {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_resume_token_0123456789".into());
    let a = &f.agents;
    let hook = |name: &str, stall: &str| {
        let p = f.remote.join("hooks").join(name);
        std::fs::write(
            &p,
            format!("#!/bin/sh\ncat > /dev/null\n{}", stall_snippet(a, stall)),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    hook("pre-receive", "prehook");
    hook("post-receive", "posthook");
    let setup = f.agent(
        "setup.sh",
        &format!("#!/bin/sh\n{}", stall_snippet(a, "setup")),
    );
    // Item 2's writer stalls on `writer2.stall`; item 1's on `writer.stall`.
    let w = f.agent(
        "writer.sh",
        &format!("#!/bin/sh\nif grep -q 'Add pow' \"$NIGHTSHIFT_CONTRACT_FILE\"; then\n{}else\n{}fi\n{WORD_WRITER}", stall_snippet(a, "writer2"), stall_snippet(a, "writer")),
    );
    let r = f.agent(
        "reviewer.sh",
        &format!(
            "#!/bin/sh\n{}{}",
            stall_snippet(a, "reviewer"),
            APPROVE.trim_start_matches("#!/bin/sh\n")
        ),
    );
    f.config(&format!(
        "verify = [\"sh test.sh\"]\nsetup = [\"{setup}\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"
    ));
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    let stall = match phase {
        Phase::BeforeAgent => "setup",
        Phase::DuringAgent => "writer",
        Phase::AfterGate => "reviewer",
        Phase::AfterCommit => "prehook",
        Phase::AfterPush => "posthook",
        Phase::AfterPrCreate | Phase::AfterPrFailed => "writer2",
        Phase::DuringPrCreate => "github",
    };
    std::fs::write(a.join(format!("{stall}.stall")), "").unwrap();
    match phase {
        Phase::AfterPrFailed => gh.state.lock().unwrap().faults.push((
            "POST".into(),
            "/repos/owner/repo/pulls".into(),
            422,
        )),
        Phase::DuringPrCreate => gh
            .state
            .lock()
            .unwrap()
            .create_pr_delays
            .push(Duration::from_secs(60)),
        _ => {}
    }
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    let ready = a.join(format!("{stall}.ready"));
    wait_until(Duration::from_secs(40), &format!("phase {phase:?}"), || {
        ready.exists() || (stall == "github" && !gh.prs().is_empty())
    });
    bg.signal(nix::sys::signal::Signal::SIGKILL);
    bg.wait(Duration::from_secs(5));
    kill_stalled(a, stall);
    let crashed = f.db.sql("SELECT id FROM runs");
    assert!(
        status_text(&f).contains(&format!("run {crashed} ended without finishing")),
        "{}",
        status_text(&f)
    );
    match phase {
        Phase::AfterPush => assert_eq!(
            f.remote_branches().len(),
            1,
            "the branch reached the remote before the kill"
        ),
        Phase::AfterPrCreate => assert_eq!(gh.prs().len(), 1),
        Phase::DuringPrCreate => {
            assert_eq!(gh.prs().len(), 1);
            assert_eq!(
                f.db.sql("SELECT state || ' ' || coalesce(number::text, '-') FROM pull_requests"),
                "pr_failed -",
                "the ledger never heard of the PR"
            );
        }
        Phase::AfterPrFailed => {
            assert_eq!(f.db.pr_states(), ["pr_failed"])
        }
        _ => assert!(f.remote_branches().is_empty()),
    }

    // The next drain, without --approve, takes the crashed run up.
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(0), "{phase:?}: {}", text(&out));
    assert!(
        text(&out).contains("resuming crashed run"),
        "{}",
        text(&out)
    );
    assert_eq!(
        f.db.sql(&format!("SELECT status FROM runs WHERE id = '{crashed}'")),
        "crashed"
    );
    assert_eq!(
        f.db.sql(&format!(
            "SELECT count(*) FROM runs WHERE resumes = '{crashed}' AND status = 'completed'"
        )),
        "1"
    );
    let rep = f.report();
    for o in outcomes(&rep) {
        assert!(
            ["pr_opened", "already_open"].contains(&o.as_str()),
            "{phase:?}: {rep:#}"
        );
    }
    // Exactly one PR and one branch per item, none twice.
    let prs = gh.prs();
    let mut heads: Vec<String> = prs
        .iter()
        .map(|p| p["head"]["ref"].as_str().unwrap().to_string())
        .collect();
    heads.sort();
    assert_eq!(heads.len(), 2, "{phase:?}: {prs:#?}");
    heads.dedup();
    assert_eq!(heads.len(), 2, "{phase:?}: a duplicate PR");
    let mut branches = f.remote_branches();
    branches.sort();
    assert_eq!(branches, heads, "{phase:?}");
    for b in &branches {
        assert_eq!(
            git(&f.remote, &["rev-list", "--count", &format!("main..{b}")]),
            "1",
            "{phase:?}: {b} has one commit"
        );
    }
    assert!(
        slot_branches(&f.data).is_empty(),
        "{phase:?}: {:?}",
        slot_branches(&f.data)
    );
    // The resumed run did not redo an item whose PR existed.
    if matches!(
        phase,
        Phase::AfterPrCreate | Phase::AfterPrFailed | Phase::DuringPrCreate
    ) {
        assert_eq!(f.db.sql("SELECT count(*) FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id WHERE i.item_key = (SELECT item_key FROM run_items ORDER BY item_index LIMIT 1) AND a.role = 'writer'"), "1", "{phase:?}: item 1 was redone");
    }
    gh.assert_never_merged_approved_or_closed().await;
    // A third drain has nothing to resume and no approval: refused, nothing redone.
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(gh.prs().len(), 2);
}

/// One test per phase a drain is killed in (`crash_and_resume`).
macro_rules! killed_in {
    ($($name:ident => $phase:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            crash_and_resume(Phase::$phase).await;
        }
    )*};
}

killed_in! {
    resume_after_kill_before_the_agent => BeforeAgent,
    resume_after_kill_during_the_agent => DuringAgent,
    resume_after_kill_after_the_gate => AfterGate,
    resume_after_kill_after_the_commit => AfterCommit,
    resume_after_kill_after_the_push => AfterPush,
    resume_after_kill_while_github_creates_the_pr => DuringPrCreate,
    resume_after_kill_after_the_pr_was_created => AfterPrCreate,
    resume_opens_the_pr_of_a_pr_failed_item => AfterPrFailed,
}

#[test]
fn a_crashed_run_whose_approval_is_older_than_a_day_is_not_resumed() {
    let f = Fixture::new();
    std::fs::write(f.agents.join("writer.stall"), "").unwrap();
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\n{}{WORD_WRITER}",
            stall_snippet(&f.agents, "writer")
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let sha = approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_until(Duration::from_secs(30), "the writer", || {
        f.agents.join("writer.ready").exists()
    });
    bg.signal(nix::sys::signal::Signal::SIGKILL);
    bg.wait(Duration::from_secs(5));
    kill_stalled(&f.agents, "writer");
    // The crashed run's approval was given 25 hours ago (approvals are immutable: point the run at an old one).
    f.db.sql(&format!(
        "INSERT INTO approvals (id, plan_sha, repo, approved_by, created_at, expires_at) SELECT gen_random_uuid(), '{sha}', repo, 't', now() - interval '25 hours', now() - interval '1 hour' FROM plans WHERE sha = '{sha}'"
    ));
    f.db.sql(
        "UPDATE runs SET approval_id = (SELECT id FROM approvals ORDER BY created_at LIMIT 1)",
    );
    let out = f.run(&["drain"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "no standing approval: {}",
        text(&out)
    );
    assert!(text(&out).contains("nightshift approve"), "{}", text(&out));
    assert_eq!(f.db.statuses(), ["crashed"]);
    assert_eq!(f.db.outcomes(), ["interrupted"]);
    // A fresh approval runs it.
    f.drain_exits(0, &[]);
    assert_eq!(outcomes(&f.report()), ["branch_pushed"]);
}

// ---------------------------------------------------------------------------------------------
// 7. max_attempts
// ---------------------------------------------------------------------------------------------

#[test]
fn an_item_failing_on_max_attempts_runs_is_blocked_with_the_reason() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "[limits]\nrounds = 1\nmax_attempts = 2\n");
    f.write("NEXT.md", "- [ ] Add bogus\n- [ ] Add sub\n");
    for night in 1..=2 {
        let out = f.approve_and_drain(&[]);
        assert_eq!(out.status.code(), Some(1), "night {night}: {}", text(&out));
        assert_eq!(outcomes(&f.report())[0], "tests_failed", "night {night}");
    }
    let out = f.approve_and_drain(&[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a blocked item does not fail the run: {}",
        text(&out)
    );
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["blocked", "branch_pushed"], "{rep:#}");
    let reason = f.db.sql("SELECT reason FROM run_items i JOIN runs r ON r.id = i.run_id WHERE i.outcome = 'blocked' ORDER BY r.started_at DESC LIMIT 1");
    assert!(
        reason.contains("2 earlier run") && reason.contains("max_attempts = 2"),
        "{reason}"
    );
    assert_eq!(
        f.db.calls_of("writer"),
        3,
        "the blocked item ran no agent on night 3"
    );
    // Editing the item seals a new contract: a person's answer, so it runs again.
    f.write(
        "NEXT.md",
        "- [ ] Add bogus\n  - Try harder this time.\n- [ ] Add sub\n",
    );
    f.drain_exits(1, &[]);
    assert_eq!(
        outcomes(&f.report())[0],
        "tests_failed",
        "the edited item ran again"
    );
}

#[test]
fn a_failure_carried_over_by_a_resume_counts_as_one_attempt() {
    let f = Fixture::new();
    std::fs::write(f.agents.join("writer2.stall"), "").unwrap();
    let w = f.agent("writer.sh", &format!("#!/bin/sh\nif grep -q 'Add sub' \"$NIGHTSHIFT_CONTRACT_FILE\"; then\n{}fi\n{WORD_WRITER}", stall_snippet(&f.agents, "writer2")));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "[limits]\nrounds = 1\nmax_attempts = 2\n");
    f.write("NEXT.md", "- [ ] Add bogus\n- [ ] Add sub\n");
    // Night 1: item 1 fails its gate, the run is killed during item 2, a drain resumes it.
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_until(Duration::from_secs(30), "item 2's writer", || {
        f.agents.join("writer2.ready").exists()
    });
    bg.signal(nix::sys::signal::Signal::SIGKILL);
    bg.wait(Duration::from_secs(5));
    kill_stalled(&f.agents, "writer2");
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["tests_failed", "branch_pushed"], "{rep:#}");
    assert!(
        rep["items"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("finished by the crashed run"),
        "{rep:#}"
    );
    assert_eq!(rep["items"][0]["rounds"], 1, "carried over as it ended");
    // Night 2: one failed night so far, so item 1 runs again.
    f.drain_exits(1, &[]);
    assert_eq!(outcomes(&f.report()), ["tests_failed", "branch_pushed"]);
    // Night 3: two failed nights: blocked.
    f.drain_exits(0, &[]);
    assert_eq!(outcomes(&f.report()), ["blocked", "branch_pushed"]);
}

/// Two crashes in a row: the carried reason names the run that finished
/// the item at one level; the PR the second crashed run opened counts as
/// opened (with its round) in the run that resumed it; and no local branch
/// of it stays in the checkout.
#[tokio::test(flavor = "multi_thread")]
async fn resumes_after_resumes_keep_reasons_flat_and_count_the_pr_opened() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_twice_crashed_token_012345".into());
    std::fs::write(f.agents.join("writer2.stall"), "").unwrap();
    let w = f.agent("writer.sh", &format!("#!/bin/sh\nif grep -q 'Add sub' \"$NIGHTSHIFT_CONTRACT_FILE\"; then\n{}fi\n{WORD_WRITER}", stall_snippet(&f.agents, "writer2")));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "[limits]\nrounds = 1\n");
    f.write("NEXT.md", "- [ ] Add bogus\n- [ ] Add sub\n");
    approve(&f);
    // Run A: item 1 fails its gate; killed during item 2's writer.
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_until(Duration::from_secs(30), "item 2's writer", || {
        f.agents.join("writer2.ready").exists()
    });
    bg.signal(nix::sys::signal::Signal::SIGKILL);
    bg.wait(Duration::from_secs(5));
    kill_stalled(&f.agents, "writer2");
    let run_a = f.db.sql("SELECT id FROM runs");
    // Run B resumes A; killed while GitHub creates item 2's PR.
    gh.state
        .lock()
        .unwrap()
        .create_pr_delays
        .push(Duration::from_secs(60));
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_until(Duration::from_secs(30), "the PR request", || {
        !gh.prs().is_empty()
    });
    bg.signal(nix::sys::signal::Signal::SIGKILL);
    bg.wait(Duration::from_secs(5));
    let run_b =
        f.db.sql(&format!("SELECT id FROM runs WHERE resumes = '{run_a}'"));
    // Run C resumes B.
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["tests_failed", "pr_opened"], "{rep:#}");
    let reason = rep["items"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(&format!("finished by the crashed run {run_a}: "))
            && !reason.contains(&run_b)
            && reason.matches("finished by").count() == 1,
        "{reason}"
    );
    assert_eq!(rep["items"][1]["rounds"], 1, "{rep:#}");
    assert_eq!(rep["totals"]["prs_opened"], 1, "{rep:#}");
    assert_eq!(gh.prs().len(), 1);
    assert!(
        slot_branches(&f.data).is_empty(),
        "a stale local branch: {:?}",
        slot_branches(&f.data)
    );
}

// ---------------------------------------------------------------------------------------------
// 8. schedule
// ---------------------------------------------------------------------------------------------

#[test]
fn schedule_drains_at_each_fire_only_under_a_fresh_approval() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(
        &w,
        &r,
        &format!("deadline = \"{}\"\n", common::far_deadline()),
    );
    f.write("NEXT.md", "- [ ] Add sub\n");
    let plan = f.plan_sha();
    let mut bg = Bg::start(&f, &["schedule", "--cron", "* * * * * *", "--tz", "UTC"]);
    // Without an approval, each fire records not_approved for the plan and waits.
    wait_until(Duration::from_secs(20), "two unapproved fires", || {
        f.db.events("not_approved") >= 2
    });
    assert_eq!(
        f.db.sql("SELECT DISTINCT data->>'plan_sha' FROM events WHERE kind = 'not_approved'"),
        plan
    );
    assert_eq!(f.db.count(Table::Runs), 0);
    // Approved: the next fire drains, once; later fires find the approval used.
    assert_ok(&f.run(&["approve", &plan]), "approve");
    wait_until(Duration::from_secs(30), "a scheduled drain", || {
        f.db.sql("SELECT count(*) FROM runs WHERE status = 'completed'") == "1"
    });
    let before = f.db.events("not_approved");
    wait_until(
        Duration::from_secs(20),
        "an unapproved fire after the drain",
        || f.db.events("not_approved") > before,
    );
    assert_eq!(f.db.count(Table::Runs), 1, "one approval, one run");
    assert_eq!(f.remote_branches().len(), 1);
    bg.signal(nix::sys::signal::Signal::SIGTERM);
    let status = bg.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{}", bg.output());
    assert!(
        bg.output().contains("stopped by a signal"),
        "{}",
        bg.output()
    );
}

#[test]
fn sigterm_stops_the_schedule_and_the_drain_it_started() {
    let f = Fixture::new();
    std::fs::write(f.agents.join("writer.stall"), "").unwrap();
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\necho sub >> calc.txt\n{}",
            stall_snippet(&f.agents, "writer")
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(
        &w,
        &r,
        &format!("deadline = \"{}\"\n", common::far_deadline()),
    );
    f.write("NEXT.md", "- [ ] Add sub\n");
    approve(&f);
    let mut bg = Bg::start(&f, &["schedule", "--cron", "* * * * * *"]);
    let ready = f.agents.join("writer.ready");
    wait_until(
        Duration::from_secs(30),
        "the scheduled drain's writer",
        || ready.exists(),
    );
    let child = stalled_child(&f.agents, "writer").expect("the writer stalls");
    bg.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(
        bg.wait(Duration::from_secs(10)).code(),
        Some(1),
        "the stopped drain's code: {}",
        bg.output()
    );
    wait_until(Duration::from_secs(3), "the writer to be killed", || {
        process_gone(child)
    });
    let rep = f.report();
    assert_eq!(rep["status"], "stopped_signal");
    assert_eq!(outcomes(&rep), ["interrupted"]);
    assert_eq!(f.db.count(Table::Runs), 1, "no fire after the signal");
}

#[test]
fn schedule_prints_crontab_and_systemd_units() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", "#!/bin/sh\n");
    f.config_with(&w, &w, "");
    let out = f.run(&[
        "schedule",
        "--cron",
        "30 22 * * 1-5",
        "--tz",
        "Asia/Taipei",
        "--print-crontab",
    ]);
    assert_ok(&out, "--print-crontab");
    let t = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(t.contains("CRON_TZ=Asia/Taipei"), "{t}");
    let job = t
        .lines()
        .find(|l| l.starts_with("30 22 * * 1-5 "))
        .unwrap_or_else(|| panic!("no job line: {t}"));
    assert!(
        job.contains("drain") && job.contains(&f.repo.display().to_string()),
        "{job}"
    );
    let out = f.run(&[
        "schedule",
        "--cron",
        "30 22 * * 1-5",
        "--tz",
        "Asia/Taipei",
        "--print-systemd",
    ]);
    assert_ok(&out, "--print-systemd");
    let t = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        t.contains("# nightshift-drain.service")
            && t.contains("# nightshift-drain.timer")
            && t.contains("[Timer]")
            && t.contains("OnCalendar=Mon,Tue,Wed,Thu,Fri *-*-* 22:30:00 Asia/Taipei")
            && t.contains("ExecStart="),
        "{t}"
    );
    // Seconds other than 0 cannot be a crontab line; a bad expression is a usage error.
    assert_eq!(
        f.run(&["schedule", "--cron", "*/5 * * * * *", "--print-crontab"])
            .status
            .code(),
        Some(2)
    );
    let out = f.run(&["schedule", "--cron", "61 * * * *"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
