//! The morning review through the real binary (issue 5; docs/commands.md, docs/backlog.md, docs/github.md):
//! GitHub faults end in one PR or a recorded failure, never a duplicate or a
//! merge; the PR body and the report are the evidence a person reads;
//! `sync` ticks merged items byte-exactly; `doctor` names each broken check;
//! `init` writes a backlog that plans cleanly.

use crate::common;

use common::github::{FakeGitHub, Fault};
use common::{
    Fixture, Night, Table, assert_ok, clone_remote, git, has_label, outcomes, prepend_path, reason,
    text,
};
use nightshift::{backlog, config, gate::GateRun, report};

/// A writer that adds the word named in the item title to calc.txt.
const WRITER: &str = r#"#!/bin/sh
set -eu
title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *sub*) echo sub >> calc.txt ;;
  *mul*) echo mul >> calc.txt ;;
  *div*) echo div >> calc.txt ;;
  *docs*) echo "calc adds and subtracts" > README.calc ;;
  *) echo "nothing to do for $title" ;;
esac
echo "wrote it"
"#;

/// A night of `backlog`, GitHub at `gh`, short GitHub backoffs.
fn morning<'a>(gh: &'a FakeGitHub, backlog: &str) -> Night<'a> {
    Night::new()
        .github_on(gh)
        .token("ghp_morning_token_0123456789")
        .env("NIGHTSHIFT_GITHUB_BACKOFF_MS", "10")
        .writer(WRITER)
        .backlog(backlog)
}

fn post_pulls(reqs: &[(String, String, String)]) -> usize {
    reqs.iter()
        .filter(|(m, p, _)| m == "POST" && p == "/repos/owner/repo/pulls")
        .count()
}

fn in_secs(n: i64) -> String {
    (chrono::Utc::now().timestamp() + n).to_string()
}

/// Each fault ends with exactly one PR, opened by this run, and no merge call.
#[tokio::test(flavor = "multi_thread")]
async fn github_faults_end_in_exactly_one_pr() {
    let pulls = "/repos/owner/repo/pulls";
    let cases: Vec<(&str, Vec<Fault>, usize)> = vec![
        ("500, 502, 503 then success", vec![Fault::new("POST", pulls, 500), Fault::new("POST", pulls, 502), Fault::new("POST", pulls, 503)], 4),
        (
            "403 secondary rate limit with retry-after",
            vec![Fault::new("POST", pulls, 403).message("You have exceeded a secondary rate limit. Please wait a few minutes before you try again.").header("retry-after", "1")],
            2,
        ),
        // The reset instant is set when the case runs (below).
        ("429 with x-ratelimit-reset", vec![Fault::new("POST", pulls, 429).message("API rate limit exceeded").header("x-ratelimit-remaining", "0")], 2),
        (
            "422 a pull request already exists (created between look-up and create)",
            vec![Fault::new("POST", pulls, 422).message("Validation Failed: A pull request already exists for owner:branch.").after_effect()],
            1,
        ),
        ("a create performed whose 502 answer was lost", vec![Fault::new("POST", pulls, 502).after_effect()], 1),
        ("a rate-limited look-up before the create", vec![Fault::new("GET", pulls, 503).header("retry-after", "1")], 1),
    ];
    // Each case is a night of its own (its own GitHub, repository and
    // database): the nights run side by side, then each is checked in turn.
    let mut nights = Vec::new();
    for (what, faults, posts) in cases {
        let gh = FakeGitHub::start().await;
        let f = morning(&gh, "- [ ] Add sub\n").start().await;
        nights.push((what, faults, posts, gh, f));
    }
    let drains: Vec<(std::process::Output, std::time::Duration)> =
        tokio::task::block_in_place(|| {
            std::thread::scope(|s| {
                let running: Vec<_> = nights
                    .iter_mut()
                    .map(|(_, faults, _, gh, f)| {
                        let faults = std::mem::take(faults)
                            .into_iter()
                            .map(|x| {
                                if x.status == 429 {
                                    x.header("x-ratelimit-reset", &in_secs(2))
                                } else {
                                    x
                                }
                            })
                            .collect();
                        gh.state.lock().unwrap().scripted = faults;
                        let f = &*f;
                        s.spawn(move || {
                            let started = std::time::Instant::now();
                            let out = f.approve_and_drain(&[]);
                            (out, started.elapsed())
                        })
                    })
                    .collect();
                running.into_iter().map(|t| t.join().unwrap()).collect()
            })
        });
    for ((what, _, posts, gh, f), (out, elapsed)) in nights.into_iter().zip(drains) {
        assert_ok(&out, what);
        if what.starts_with("429") {
            assert!(
                elapsed >= std::time::Duration::from_secs(1),
                "{what}: waited for the reset"
            );
        }
        let rep = f.report();
        assert_eq!(rep["items"][0]["outcome"], "pr_opened", "{what}: {rep:#}");
        let prs = gh.prs();
        assert_eq!(prs.len(), 1, "{what}: exactly one PR, got {prs:#?}");
        assert_eq!(rep["items"][0]["pr_number"], prs[0]["number"], "{what}");
        assert!(
            gh.state.lock().unwrap().scripted.is_empty(),
            "{what}: every fault was met"
        );
        let reqs = gh.requests().await;
        assert_eq!(post_pulls(&reqs), posts, "{what}: creates sent");
        assert!(has_label(&prs[0], "autopilot"), "{what}: labelled");
        gh.assert_never_merged_approved_or_closed().await;
    }
}

/// GitHub down through every attempt: `pr_failed` with the branch pushed,
/// then the next run opens that PR without redoing the item.
#[tokio::test(flavor = "multi_thread")]
async fn a_pr_that_keeps_failing_is_recorded_and_opened_on_the_next_run() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "- [ ] Add sub\n").start().await;
    gh.state.lock().unwrap().scripted = (0..6)
        .map(|_| Fault::new("POST", "/repos/owner/repo/pulls", 503))
        .collect();
    f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "pr_failed", "{rep:#}");
    assert!(
        reason(&rep, 0).contains("retried on the next run"),
        "{rep:#}"
    );
    assert!(gh.prs().is_empty());
    assert_eq!(f.remote_branches().len(), 1, "the branch is pushed");
    assert_eq!(f.db.pr_states(), ["pr_failed"]);

    let writer_calls = f.db.calls_of("writer");
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "second run");
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "pr_opened", "{rep:#}");
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(
        f.db.calls_of("writer"),
        writer_calls,
        "the item was not redone"
    );
    assert_eq!(f.db.pr_states(), ["open"]);
    gh.assert_never_merged_approved_or_closed().await;
}

/// Replaces what changes from one run to the next (ids, hashes, times,
/// durations, temp paths, the fake server's port) so a snapshot pins the
/// layout and the facts, not the clock.
fn mask(s: &str, f: &Fixture) -> String {
    let mut s = s.replace(&f.dir.path().display().to_string(), "[TMP]");
    for (re, to) in [
        (r"http://127\.0\.0\.1:\d+", "[GITHUB]"),
        (
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[UUID]",
        ),
        (r"\b[0-9a-f]{64}\b", "[SHA256]"),
        (r"\b[0-9a-f]{40}\b", "[COMMIT]"),
        (r"\b[0-9a-f]{12}\b", "[SHORT]"),
        (r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} [A-Z]+", "[TIME]"),
        (r"\b\d+(\.\d+)?(ms|[hms])(\d+[ms])*\b", "[DUR]"),
    ] {
        s = regex::Regex::new(re)
            .unwrap()
            .replace_all(&s, to)
            .into_owned();
    }
    s
}

/// A fixed night: one PR after a setup command, one item whose gate keeps
/// failing, one blocked by a question. The PR body and the report are
/// snapshots; the report carries the question and the totals.
#[tokio::test(flavor = "multi_thread")]
async fn pr_body_and_report_snapshots() {
    let gh = FakeGitHub::start().await;
    let f = morning(
        &gh,
        "# calc\n\n## Words\n\n- [ ] Add sub\n  - accept: calc.txt lists sub\n  - accept: the test still passes\n  - scope: calc.txt\n- [ ] Add bogus\n  - rounds: 2\n- [ ] Add mul\n  - question: is mul worth it?\n",
    ).start().await;
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "setup = [\"echo setting up\"]\n");
    std::fs::write(
        f.agents.join("writer.sh"),
        WRITER.replace("*div*)", "*bogus*) echo bogus >> calc.txt ;;\n  *div*)"),
    )
    .unwrap();
    f.drain_exits(1, &[]);
    let prs = gh.prs();
    assert_eq!(prs.len(), 1);
    let body = prs[0]["body"].as_str().unwrap();
    insta::assert_snapshot!("pr_body", mask(body, &f));

    let rep = f.run(&["report"]);
    assert_ok(&rep, "report");
    // As root (CI) the report warns that agents ran as root; the snapshots
    // are the same for every account (attack.rs checks the warning).
    let unrooted = |t: &str| {
        let mut out = String::new();
        let mut after = false;
        for l in t.lines() {
            if l.contains("agents run as root") {
                after = true;
                continue;
            }
            // Markdown's warning paragraph: its blank line goes with it.
            if std::mem::take(&mut after) && l.is_empty() && out.ends_with("\n\n") {
                continue;
            }
            out.push_str(l);
            out.push('\n');
        }
        out
    };
    // Column widths follow the masked values: align on two spaces.
    let table = regex::Regex::new(r" {2,}")
        .unwrap()
        .replace_all(
            &mask(&unrooted(&String::from_utf8_lossy(&rep.stdout)), &f),
            "  ",
        )
        .into_owned();
    insta::assert_snapshot!("report_text", table);
    let md = f.run(&["report", "--markdown"]);
    assert_ok(&md, "report --markdown");
    insta::assert_snapshot!(
        "report_markdown",
        mask(&unrooted(&String::from_utf8_lossy(&md.stdout)), &f)
    );

    let json = f.report();
    assert_eq!(json["totals"]["prs_opened"], 1, "{json:#}");
    assert_eq!(json["totals"]["failed"], 1);
    assert_eq!(json["totals"]["blocked"], 1);
    assert_eq!(json["items"][2]["question"], "is mul worth it?");
    for k in ["run_id", "status"] {
        assert!(json[k].is_string(), "{k}");
    }
    for k in [
        "index",
        "title",
        "contract_sha",
        "outcome",
        "branch",
        "pr_number",
        "pr_url",
        "rounds",
    ] {
        assert!(json["items"][0].get(k).is_some(), "report --json field {k}");
    }
    let shown = f.run(&["report", "--show-body"]);
    assert!(
        text(&shown).contains("──── item 1 · PR body"),
        "{}",
        text(&shown)
    );
}

/// A gate that prints 1 MB: the PR body stays under GitHub's limit and says
/// its output was cut to the tail (through the binary, and for a body whose
/// every command printed 1 MB).
#[tokio::test(flavor = "multi_thread")]
async fn a_megabyte_of_gate_output_fits_the_body_limit() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "- [ ] Add sub\n").start().await;
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config(&format!("verify = [\"head -c 1048576 /dev/zero | tr '\\\\0' x; echo; sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.drain_exits(0, &[]);
    let body = gh.prs()[0]["body"].as_str().unwrap().to_string();
    assert!(
        body.chars().count() <= 65_536,
        "{} chars",
        body.chars().count()
    );
    assert!(body.contains("cut to its tail"), "{body}");
    assert!(
        body.contains("ok\n```"),
        "the tail keeps the end of the output: {body}"
    );

    // Library level: every setup and gate command printed 1 MB.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "verify = [\"a\", \"b\", \"c\"]\n").unwrap();
    let loaded = config::load(&cfg).unwrap();
    let bl = backlog::parse(
        std::path::Path::new("NEXT.md"),
        "- [ ] Big\n  - accept: fits\n",
    );
    let plan = nightshift::plan::build_plan(dir.path(), &bl, &loaded).unwrap();
    let entry = &plan.entries[0];
    let big = |c: &str| GateRun {
        command: c.into(),
        exit_code: Some(0),
        timed_out: false,
        duration_ms: 1200,
        output_tail: "y".repeat(1 << 20),
        refused: vec![],
    };
    let e = report::Evidence {
        contract: entry.contract.clone(),
        contract_sha: entry.contract_sha.clone(),
        run_id: uuid::Uuid::nil(),
        branch: "nightshift/big-00000000".into(),
        base_commit: "0".repeat(40),
        setup: vec![big("npm ci")],
        changed: vec![],
        rounds: vec![report::RoundSummary {
            n: 1,
            seconds: 3,
            result: nightshift::outcome::RoundResult::Approved,
            note: String::new(),
            gate: vec![big("a"), big("b"), big("c")],
            verdict: None,
            agents: String::new(),
        }],
        verdict: nightshift::review::Verdict {
            verdict: nightshift::review::Decision::Approve,
            findings: vec![],
            conditions: vec![],
        },
        duration: std::time::Duration::from_secs(3),
        tokens: 0,
        cost_usd: None,
        findings: vec![],
        // A huge diff and long accounts must fit too.
        diff: "+added line\n".repeat(200_000),
        writer_note: "w".repeat(1 << 20),
        reviewer_note: "r".repeat(1 << 20),
        overlaps: vec![],
        agent_notes: vec![],
    };
    let body = report::pr_body(&e);
    assert!(
        body.chars().count() <= report::BODY_LIMIT,
        "{}",
        body.chars().count()
    );
    assert!(
        body.contains("cut to its tail") && body.contains("of 1048576 characters"),
        "{body}"
    );
    assert!(
        body.trim_end()
            .ends_with(&nightshift::forge::item_marker(&entry.contract.key))
    );
}

/// Two PRs of one night that change the same file: the later one's body
/// names the earlier PR and the shared file (merge order); a PR changing
/// other files names none.
#[tokio::test(flavor = "multi_thread")]
async fn a_pr_sharing_files_with_an_earlier_one_says_so() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "- [ ] Add sub\n- [ ] Write docs\n- [ ] Add mul\n")
        .start()
        .await;
    f.drain_exits(0, &[]);
    let prs = gh.prs();
    assert_eq!(prs.len(), 3);
    let body = |i: usize| prs[i]["body"].as_str().unwrap().to_string();
    assert!(!body(0).contains("Merge order"), "{}", body(0));
    assert!(
        !body(1).contains("Merge order"),
        "docs share nothing: {}",
        body(1)
    );
    let third = body(2);
    let line = third
        .lines()
        .find(|l| l.contains("Merge order"))
        .unwrap_or_else(|| panic!("{third}"));
    assert!(
        line.contains(&format!("#{}", prs[0]["number"]))
            && line.contains("Add sub")
            && line.contains("`calc.txt`"),
        "{line}"
    );
    assert!(!line.contains("docs"), "{line}");
    gh.assert_never_merged_approved_or_closed().await;
}

/// Through a whole drain: a PR GitHub would not label is still `pr_opened`,
/// with the reason in the report; bad credentials at the first create stop
/// GitHub for the rest of the run (one create, not one per item), the
/// pushed branches are `pr_failed` with the fix in the reason, and the next
/// run with a good token opens their PRs.
#[tokio::test(flavor = "multi_thread")]
async fn github_refusals_reach_the_report_and_bad_credentials_stop_github_for_the_run() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "- [ ] Add sub\n").start().await;
    gh.state.lock().unwrap().scripted = vec![
        Fault::new("POST", "/repos/owner/repo/issues/1/labels", 403)
            .message("Resource not accessible by integration"),
    ];
    f.drain_exits(0, &[]);
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "pr_opened", "{rep:#}");
    let reason = rep["items"][0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains("without the label")
            && reason.contains("Resource not accessible by integration"),
        "{rep:#}"
    );

    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "- [ ] Add sub\n- [ ] Add mul\n- [ ] Add div\n")
        .start()
        .await;
    gh.state.lock().unwrap().scripted = vec![Fault::new("POST", "/repos/owner/repo/pulls", 401)
        .header("x-ratelimit-remaining", "0")
        .json(serde_json::json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"}))];
    let out = f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["pr_failed", "pr_failed", "pr_failed"],
        "{rep:#}"
    );
    let reasons: Vec<String> = (0..3).map(|i| common::reason(&rep, i)).collect();
    assert!(
        reasons[0].contains("Bad credentials") && reasons[0].contains("GITHUB_TOKEN"),
        "{reasons:?}"
    );
    assert!(reasons[1].contains("earlier in this run"), "{reasons:?}");
    assert_eq!(
        post_pulls(&gh.requests().await),
        1,
        "GitHub was not asked again after bad credentials"
    );
    assert_eq!(f.remote_branches().len(), 3, "the work was pushed");
    assert!(!text(&out).contains("ghp_morning_token_0123456789"));
    // The next run (the token fixed) opens the three PRs, nothing redone.
    let out = f.run(&["drain"]);
    let out = if out.status.code() == Some(3) {
        f.approve_and_drain(&[])
    } else {
        out
    };
    assert_ok(&out, "the next drain");
    assert_eq!(gh.prs().len(), 3);
    assert_eq!(f.db.calls_of("writer"), 3, "no item was redone");
    gh.assert_never_merged_approved_or_closed().await;
}

/// `report` picks a run by id or prefix (positional or `--run`), counts a
/// writer that changed nothing, and points to the rounds' own logs.
#[tokio::test(flavor = "multi_thread")]
async fn report_picks_runs_by_prefix_and_counts_items_with_nothing_to_change() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "- [ ] Add sub\n- [ ] Leave it\n")
        .start()
        .await;
    f.drain_exits(0, &[]);
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["pr_opened", "no_changes"], "{rep:#}");
    assert_eq!(rep["totals"]["no_changes"], 1, "{rep:#}");
    let run = rep["run_id"].as_str().unwrap().to_string();
    let by_arg = f.run(&["report", &run[..8]]);
    assert_ok(&by_arg, "report PREFIX");
    let by_flag = f.run(&["report", "--run", &run[..8]]);
    assert_ok(&by_flag, "report --run PREFIX");
    assert_eq!(by_arg.stdout, by_flag.stdout);
    let t = text(&by_arg);
    assert!(
        t.contains(&run) && t.contains("1 with nothing to change"),
        "{t}"
    );
    let logs = t
        .lines()
        .find_map(|l| l.strip_prefix("each round's prompt, agent output and gate log: "))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(
        std::path::Path::new(logs).is_dir() && logs.contains(&run),
        "{logs}"
    );
    let out = f.run(&["report", "ffff0000"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&run[..8]),
        "the error lists the recent runs: {}",
        text(&out)
    );
    let out = f.run(&["report", &run[..3]]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("is too short: give at least 4 hex digits"),
        "{}",
        text(&out)
    );
}

const ADJACENT: &str = "# calc\n\n## Words\n\n- [ ] Add sub\n  - accept: calc.txt lists sub\n- [ ] Add mul\n- [ ] Add div   \n- [x] Add add (done: #1)\n";

/// Commits and pushes the backlog so it is on origin/main.
fn publish_backlog(f: &Fixture) {
    git(&f.repo, &["add", "NEXT.md"]);
    git(&f.repo, &["commit", "-qm", "backlog"]);
    git(&f.repo, &["push", "-q", "origin", "main"]);
}

/// Adjacent items whose PRs were merged: `sync` opens one PR with one commit
/// that ticks exactly those lines; the next snapshot lists them as merged.
#[tokio::test(flavor = "multi_thread")]
async fn sync_ticks_merged_items_in_one_pr() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, ADJACENT).start().await;
    publish_backlog(&f);
    f.drain_exits(0, &[]);
    assert_eq!(gh.prs().len(), 3);
    let out = f.run(&["sync"]);
    assert_ok(&out, "sync with nothing merged");
    assert!(text(&out).contains("nothing to sync"), "{}", text(&out));
    assert_eq!(gh.prs().len(), 3);

    // A person merges the first two (adjacent lines).
    gh.merge(1);
    gh.merge(2);
    let out = f.run(&["sync"]);
    assert_ok(&out, "sync");
    let prs = gh.prs();
    assert_eq!(prs.len(), 4, "one sync PR: {prs:#?}");
    let pr = &prs[3];
    let b = pr["head"]["ref"].as_str().unwrap().to_string();
    let b = b.as_str();
    assert!(b.starts_with("nightshift/sync-backlog-"), "{b}");
    assert!(has_label(pr, "autopilot"));
    assert_eq!(
        git(&f.remote, &["rev-list", "--count", &format!("main..{b}")]),
        "1",
        "one commit"
    );
    assert_eq!(
        git(&f.remote, &["rev-parse", &format!("{b}^")]),
        git(&f.remote, &["rev-parse", "main"]),
        "from origin/main"
    );
    assert_eq!(
        git(&f.remote, &["diff", "--name-only", "main", b]),
        "NEXT.md",
        "nothing else changed"
    );
    let ticked = git(&f.remote, &["show", &format!("{b}:NEXT.md")]);
    let expected = ADJACENT
        .replace("- [ ] Add sub\n", "- [x] Add sub (done: #1)\n")
        .replace("- [ ] Add mul\n", "- [x] Add mul (done: #2)\n");
    assert_eq!(format!("{ticked}\n"), expected, "byte-exact ticks");
    assert!(text(&out).contains("opened PR #4"), "{}", text(&out));

    // Again: the open sync PR is updated, not duplicated.
    let out = f.run(&["sync"]);
    assert_ok(&out, "second sync");
    assert!(text(&out).contains("updated PR #4"), "{}", text(&out));
    assert_eq!(gh.prs().len(), 4, "no duplicate sync PR");
    assert_eq!(
        git(&f.remote, &["rev-list", "--count", &format!("main..{b}")]),
        "1",
        "still one commit"
    );
    gh.assert_never_merged_approved_or_closed().await;

    // The next snapshot: plan shows them blocked, drain reports them.
    let plan = f.run(&["plan", "--json"]);
    assert_ok(&plan, "plan");
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let blocked: Vec<&str> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["blocked"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        blocked,
        [
            "already merged: PR #1",
            "already merged: PR #2",
            "already open: PR #3"
        ],
        "{plan:#}"
    );
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "drain after merges");
    let outcomes: Vec<String> = f.report()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        outcomes,
        ["already_merged", "already_merged", "already_open"]
    );
    assert_eq!(gh.prs().len(), 4);

    // A person merges the sync PR, then item 3's: a new sync PR on a new
    // branch, one commit on the new main, ticking only item 3.
    git(
        &f.remote,
        &["update-ref", "refs/heads/main", &format!("refs/heads/{b}")],
    );
    gh.merge(4);
    gh.merge(3);
    let out = f.run(&["sync"]);
    assert_ok(&out, "sync after the sync PR merged");
    assert!(text(&out).contains("opened PR #5"), "{}", text(&out));
    let prs = gh.prs();
    assert_eq!(prs.len(), 5);
    let b2 = prs[4]["head"]["ref"].as_str().unwrap().to_string();
    assert!(
        b2.starts_with("nightshift/sync-backlog-") && b2 != b,
        "{b2}"
    );
    assert_eq!(
        git(&f.remote, &["rev-list", "--count", &format!("main..{b2}")]),
        "1"
    );
    let all = expected.replace("- [ ] Add div   \n", "- [x] Add div (done: #3)   \n");
    assert_eq!(
        format!("{}\n", git(&f.remote, &["show", &format!("{b2}:NEXT.md")])),
        all
    );

    // Once that is merged too, there is nothing left to sync.
    git(
        &f.remote,
        &["update-ref", "refs/heads/main", &format!("refs/heads/{b2}")],
    );
    gh.merge(5);
    let out = f.run(&["sync"]);
    assert_ok(&out, "sync with everything ticked");
    assert!(text(&out).contains("nothing to sync"), "{}", text(&out));
    assert_eq!(gh.prs().len(), 5);
    gh.assert_never_merged_approved_or_closed().await;
}

/// `tick_in_pr = true`: the item PR itself ticks its box, and nothing else
/// in the backlog.
#[tokio::test(flavor = "multi_thread")]
async fn tick_in_pr_ticks_the_box_in_the_item_pr() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, ADJACENT).start().await;
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "tick_in_pr = true\n");
    publish_backlog(&f);
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    let out = f.run(&["run", "2", "--approve", &sha]);
    assert_ok(&out, "run 2");
    let prs = gh.prs();
    assert_eq!(prs.len(), 1);
    let b = prs[0]["head"]["ref"].as_str().unwrap().to_string();
    assert_eq!(
        git(&f.remote, &["diff", "--name-only", "main", &b]),
        "NEXT.md\ncalc.txt"
    );
    assert_eq!(
        format!("{}\n", git(&f.remote, &["show", &format!("{b}:NEXT.md")])),
        ADJACENT.replace("- [ ] Add mul\n", "- [x] Add mul\n")
    );
}

/// A writer that swaps the backlog for a symbolic link to a file outside
/// the checkout (here: the user's own NEXT.md) does not get nightshift to
/// tick through it: the item is `rule_broken`, nothing pushed, the target
/// untouched.
#[tokio::test(flavor = "multi_thread")]
async fn tick_in_pr_never_writes_through_a_planted_symlink() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, ADJACENT).start().await;
    publish_backlog(&f);
    let target = f.repo.join("NEXT.md");
    let w = f.agent(
        "swap.sh",
        &format!(
            "#!/bin/sh\necho mul >> calc.txt\nrm NEXT.md\nln -s {} NEXT.md\n",
            target.display()
        ),
    );
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "tick_in_pr = true\n");
    let before = std::fs::read(&target).unwrap();
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    let out = f.run(&["run", "2", "--approve", &sha]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["rule_broken"], "{rep:#}");
    assert!(reason(&rep, 0).contains("symbolic link"), "{rep:#}");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        before,
        "the user's NEXT.md was written through the link"
    );
    assert!(f.remote_branches().is_empty());
    assert!(gh.prs().is_empty());
}

/// A backlog that is, on the base branch, a symbolic link leading out of the
/// checkout (to a file of the same text) is neither read nor ticked by
/// `sync`: the target stays as it was, and no PR is opened.
#[tokio::test(flavor = "multi_thread")]
async fn sync_never_ticks_through_a_backlog_link_leading_out() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, ADJACENT).start().await;
    publish_backlog(&f);
    assert_ok(&f.approve_and_drain(&[]), "drain");
    gh.merge(1);
    let outside = f.dir.path().join("outside-NEXT.md");
    std::fs::write(&outside, ADJACENT).unwrap();
    std::fs::remove_file(f.repo.join("NEXT.md")).unwrap();
    std::os::unix::fs::symlink(&outside, f.repo.join("NEXT.md")).unwrap();
    publish_backlog(&f);
    let out = f.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("symbolic link") && text(&out).contains("outside the repository"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        ADJACENT,
        "ticked through the link"
    );
    assert_eq!(gh.prs().len(), 3, "no sync PR");
    // A link that stays inside the repository is followed.
    std::fs::create_dir_all(f.repo.join("docs")).unwrap();
    std::fs::write(f.repo.join("docs/NEXT.md"), ADJACENT).unwrap();
    std::fs::remove_file(f.repo.join("NEXT.md")).unwrap();
    std::os::unix::fs::symlink("docs/NEXT.md", f.repo.join("NEXT.md")).unwrap();
    git(&f.repo, &["add", "docs/NEXT.md"]);
    publish_backlog(&f);
    let out = f.run(&["sync"]);
    assert_ok(&out, "sync through an inside link");
    assert_eq!(gh.prs().len(), 4, "the sync PR");
}

/// Warnings logged while stderr is a pipe (cron mail, a log file) carry no
/// colour escapes.
#[tokio::test(flavor = "multi_thread")]
async fn logged_warnings_have_no_colour_codes_in_a_pipe() {
    let gh = FakeGitHub::start().await;
    // tick_in_pr with the backlog not on the base branch: a logged warning.
    let f = morning(&gh, "- [ ] Add sub\n").start().await;
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "tick_in_pr = true\n");
    let out = f.drain_exits(0, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tick_in_pr"), "the warning was logged: {err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

/// The names of the checks `doctor` printed as failed.
fn failed_checks(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL "))
        .map(|l| l.chars().take(9).collect::<String>().trim().to_string())
        .collect()
}

/// `doctor` passes on a healthy set-up (asking claude only `--version`) and
/// names each broken check in turn, with a fix hint and exit 1.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_names_each_failing_check() {
    let gh = FakeGitHub::start().await;
    gh.state.lock().unwrap().scopes = Some("repo, read:org".into());
    let mut f = morning(&gh, "- [ ] Add sub\n").start().await;
    let args_log = f.agents.join("claude-args.txt");
    // Answers `--version` and `auth status --json` as Claude Code 2.x does;
    // logged out while `logged-out` exists beside it.
    let logged_out = f.agents.join("logged-out");
    let claude = f.agent(
        "claude",
        &format!(
            "#!/bin/sh\necho \"$@\" >> {}\nif [ \"$1\" = --version ]; then echo '2.1.328 (Claude Code)'; exit 0; fi\nif [ \"$1 $2\" = 'auth status' ]; then\n  if [ -e {} ]; then echo '{{\"loggedIn\": false, \"authMethod\": \"none\"}}'; exit 1; fi\n  echo '{{\"loggedIn\": true, \"authMethod\": \"claude.ai\"}}'; exit 0\nfi\necho 'spent usage'\n",
            args_log.display(),
            logged_out.display()
        ),
    );
    let reviewer = f.agents.join("reviewer.sh").display().to_string();
    let cfg = |f: &Fixture, extra: &str, writer: &str| {
        f.config(&format!("verify = [\"sh test.sh\"]\n{extra}\n[writer]\nkind = \"claude\"\ncommand = [\"{writer}\"]\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{reviewer}\"]\n"))
    };
    cfg(&f, "", &claude);
    let out = f.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    for name in [
        "git", "repo", "base", "token", "api", "label", "writer", "reviewer", "user", "database",
        "data dir",
    ] {
        assert!(
            t.lines().any(|l| l.starts_with(&format!("ok   {name} "))
                || l.starts_with(&format!("warn {name} "))),
            "no passing line for {name}:\n{t}"
        );
    }
    // Agents as root are a warning, not a failure (the drain runs, and says so).
    if nix::unistd::geteuid().is_root() {
        assert!(
            t.lines()
                .any(|l| l.starts_with("warn user ") && l.contains("agent_user")),
            "{t}"
        );
    }
    assert!(
        t.contains("2.1.328 (Claude Code)")
            && t.contains("logged in: claude.ai")
            && t.contains("scopes: repo, read:org"),
        "{t}"
    );
    assert_eq!(
        std::fs::read_to_string(&args_log).unwrap(),
        "--version\nauth status --json\n",
        "doctor spent no usage"
    );

    let check = |f: &Fixture, expected: &[&str], what: &str| {
        let out = f.run(&["doctor"]);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out));
        assert_eq!(failed_checks(&out), expected, "{what}:\n{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.starts_with("FAIL"))
                .all(|l| l.contains(" — fix: ")),
            "{what}: every failure has a hint:\n{}",
            text(&out)
        );
    };
    // git missing from PATH: git and the repository cannot be read.
    let empty = f.dir.path().join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    f.extra_env
        .push(("PATH".into(), empty.display().to_string()));
    check(&f, &["git", "repo"], "git missing");
    f.extra_env.pop();
    // No such remote.
    cfg(&f, "remote = \"upstream\"", &claude);
    check(&f, &["repo", "base"], "remote missing");
    // No base branch there.
    cfg(&f, "base = \"trunk\"", &claude);
    check(&f, &["base"], "base missing");
    cfg(&f, "", &claude);
    // No token.
    let token = f.token.take();
    check(&f, &["token"], "no token");
    // No token and a remote that is not on GitHub: the night runs without
    // PRs (docs/github.md), so that is a warning, and the GitHub lines say why they are missing.
    let github = f.github.take();
    let out = f.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        t.lines().any(|l| l.starts_with("warn token ")
            && l.contains("not a GitHub repository")
            && l.contains("report --show-body")),
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.starts_with("warn api ") && l.contains("no GitHub token"))
            && t.lines().any(|l| l.starts_with("warn label ")),
        "{t}"
    );
    f.github = github;
    f.token = token;
    // A token without the repo scope.
    gh.state.lock().unwrap().scopes = Some("read:org, gist".into());
    check(&f, &["token"], "scopes");
    gh.state.lock().unwrap().scopes = Some("repo".into());
    // The API unreachable.
    let api = f.github.replace("http://127.0.0.1:9".into());
    check(&f, &["api"], "API unreachable");
    f.github = api;
    // The repository archived: read-only for everyone.
    gh.state.lock().unwrap().archived = true;
    check(&f, &["api"], "archived");
    assert!(text(&f.run(&["doctor"])).contains("is archived"));
    gh.state.lock().unwrap().archived = false;
    // The repository renamed: GitHub redirects, doctor warns with the name.
    gh.state.lock().unwrap().renamed_from = Some("old-name".into());
    f.extra_env
        .push(("GH_REPO".into(), "owner/old-name".into()));
    let out = f.run(&["doctor"]);
    assert_ok(&out, "renamed repository");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with("warn api ") && l.contains("owner/old-name is now owner/repo")),
        "{}",
        text(&out)
    );
    f.extra_env.pop();
    gh.state.lock().unwrap().renamed_from = None;
    // The label missing and not creatable.
    gh.state.lock().unwrap().read_only = true;
    check(&f, &["label"], "label");
    gh.state.lock().unwrap().labels.push("autopilot".into());
    let out = f.run(&["doctor"]);
    assert_ok(&out, "label present though read-only");
    gh.state.lock().unwrap().read_only = false;
    // The writer not on PATH.
    cfg(&f, "", "no-such-claude-cli");
    check(&f, &["writer"], "writer missing");
    // The writer is a file that cannot be run.
    let plain = f.agents.join("not-executable.sh");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    cfg(&f, "", &plain.display().to_string());
    check(&f, &["writer"], "writer not executable");
    assert!(text(&f.run(&["doctor"])).contains("exists but is not executable — fix: chmod +x"));
    // The writer's CLI is logged out.
    cfg(&f, "", &claude);
    std::fs::write(&logged_out, "").unwrap();
    check(&f, &["writer"], "writer logged out");
    std::fs::remove_file(&logged_out).unwrap();
    // Root with an agent_user that does not exist.
    if nix::unistd::geteuid().is_root() {
        cfg(&f, "agent_user = \"nightshift-no-such-user\"", &claude);
        check(&f, &["user"], "agent_user missing");
        cfg(&f, "", &claude);
    }
    cfg(&f, "", &claude);
    // The database unreachable.
    f.extra_env.push((
        "NIGHTSHIFT_DATABASE_URL".into(),
        "postgres://postgres@127.0.0.1:9/none".into(),
    ));
    check(&f, &["database"], "database");
    f.extra_env.pop();
    // The data dir not writable (a file where the directory should be).
    let file = f.dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    f.extra_env
        .push(("NIGHTSHIFT_DATA_DIR".into(), file.display().to_string()));
    check(&f, &["data dir"], "data dir");
    f.extra_env.pop();
    gh.assert_never_merged_approved_or_closed().await;
    assert!(
        !gh.requests().await.iter().any(|(m, _, _)| m == "POST"),
        "doctor changed nothing on GitHub"
    );
}

/// `init` writes a commented config and NEXT.md from the example; the
/// example shows every kind of detail line and plans without a problem; a
/// second `init` keeps what is there.
#[test]
fn init_writes_a_backlog_that_plans_cleanly() {
    let mut f = Fixture::new();
    let out = f.run(&["init"]);
    assert_ok(&out, "init");
    let example = include_str!("../../NEXT.example.md");
    assert_eq!(
        std::fs::read_to_string(f.repo.join("NEXT.md")).unwrap(),
        example
    );
    let cfg = std::fs::read_to_string(f.repo.join(".nightshift/config.toml")).unwrap();
    assert!(
        cfg.lines().filter(|l| l.contains('#')).count() >= 15,
        "commented config:\n{cfg}"
    );
    assert_eq!(
        std::fs::read_to_string(f.repo.join(".nightshift/.gitignore")).unwrap(),
        "*\n"
    );

    let bl = backlog::parse(std::path::Path::new("NEXT.md"), example);
    assert!(bl.problems.is_empty(), "{:?}", bl.problems);
    use backlog::DetailKind as K;
    let kinds: Vec<K> = bl
        .items
        .iter()
        .flat_map(|i| i.details.lines.iter().map(|l| l.kind))
        .collect();
    for k in [
        K::Accept,
        K::Verify,
        K::Scope,
        K::Question,
        K::Rounds,
        K::Timeout,
        K::MaxChangedFiles,
        K::MaxDiffLines,
        K::Note,
    ] {
        assert!(kinds.contains(&k), "NEXT.example.md shows no {k:?} line");
    }
    assert!(
        bl.items.iter().any(|i| !i.context.is_empty()),
        "context block quotes"
    );
    assert!(bl.items.iter().any(|i| i.done), "a done item");

    // As the README's walkthrough goes: the gate init could not guess in
    // this shell project is set, and the agents (claude) are on PATH;
    // `plan` offers no SHA before that.
    let set: Vec<String> = cfg
        .lines()
        .map(|l| {
            if l.starts_with("verify = ") {
                "verify = [\"sh test.sh\"]".to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    // The suite runs as root: agents run as root only when the config says so.
    let set = [vec!["agents_as_root = true".to_string()], set].concat();
    std::fs::write(f.repo.join(".nightshift/config.toml"), set.join("\n")).unwrap();
    f.agent("claude", "#!/bin/sh\nexit 0\n");
    let agents = f.agents.clone();
    prepend_path(&mut f, &agents);
    let plan = f.run(&["plan", "--json"]);
    assert_ok(&plan, "plan over the example");
    let v: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), bl.items.iter().filter(|i| !i.done).count());
    assert!(
        items.iter().any(|i| i["blocked"].is_string()),
        "the question blocks its item: {v:#}"
    );
    assert!(items.iter().any(|i| i["blocked"].is_null()));

    f.write("NEXT.md", "- [ ] mine\n");
    assert_ok(&f.run(&["init"]), "second init");
    assert_eq!(
        std::fs::read_to_string(f.repo.join("NEXT.md")).unwrap(),
        "- [ ] mine\n"
    );
}

/// Without a terminal, progress is one plain line per change on stderr; the
/// run's tracing events are JSON lines in one file per run; `-q` is quiet.
#[tokio::test(flavor = "multi_thread")]
async fn progress_lines_and_a_json_log_per_run() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "- [ ] Add sub\n- [ ] Add mul\n").start().await;
    let w = f.agent(
        "slow-writer.sh",
        &format!(
            "#!/bin/sh\nsleep 1\nexec {}\n",
            f.agents.join("writer.sh").display()
        ),
    );
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "");
    let out = f.drain_exits(0, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("[1/2] Add sub · round 1 · writer · ")),
        "{err}"
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with("[2/2] Add mul · round 1 · writer · ")),
        "{err}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "no terminal escapes without a terminal: {err:?}"
    );

    let logs: Vec<_> = std::fs::read_dir(f.data.join("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(logs.len(), 1, "one log file per run: {logs:?}");
    let run_id = f.report()["run_id"].as_str().unwrap().to_string();
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|v| v["fields"]["message"] == "progress" && v["fields"]["run"] == run_id.as_str()),
        "{log}"
    );
    assert!(
        lines
            .iter()
            .any(|v| v["fields"]["message"] == "run finished"),
        "{log}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("log: {}", logs[0].display())));

    // -q: no progress, no report, another log file.
    f.write("NEXT.md", "- [ ] Add div\n");
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    let out = f.run(&["-q", "drain"]);
    assert_ok(&out, "drain -q");
    assert!(
        out.stdout.is_empty() && !String::from_utf8_lossy(&out.stderr).contains("[1/1]"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_dir(f.data.join("logs"))
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "jsonl"))
            .count(),
        2
    );
}

/// Chromium from Debian's package, as the README's test command installs it.
fn chromium() -> std::path::PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
        .expect("Chromium is missing: `bash tests/run.sh` installs it (apt-get install chromium)")
}

/// Loads `page` in headless Chromium at `width` px; returns the DOM as the
/// browser built it and what the browser logged (console messages included).
pub(crate) fn render(
    page: &std::path::Path,
    width: u32,
    profile: &std::path::Path,
) -> (String, String) {
    let out = std::process::Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            &format!("--window-size={width},900"),
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            &format!("file://{}", page.display()),
        ])
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines of a browser log (see [`render`]) that say a page went wrong:
/// console messages, uncaught errors, a file it could not load.
pub(crate) fn console_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("ERR_FILE_NOT_FOUND")
        })
        .collect()
}

/// `report --html` draws the night: one bar per round the ledger holds, one
/// band per usage-limit sleep, the items with their outcomes; it loads in a
/// real headless browser at phone and desktop widths with no console error
/// and no request outside the page; agent text cannot inject markup.
#[tokio::test(flavor = "multi_thread")]
async fn html_report_draws_one_bar_per_round_in_a_real_browser() {
    let gh = FakeGitHub::start().await;
    let f = morning(
        &gh,
        "# calc\n\n- [ ] Add sub\n- [ ] Add bogus <img src=x onerror=alert(1)>\n  - rounds: 2\n- [ ] Add mul\n  - question: is mul worth it?\n",
    ).start().await;
    std::fs::write(
        f.agents.join("writer.sh"),
        WRITER.replace(
            "*div*)",
            "*bogus*) echo '<script>alert(2)</script>' >> calc.txt ;;\n  *div*)",
        ),
    )
    .unwrap();
    f.drain_exits(1, &[]);
    // A usage-limit sleep of the night, as the run records one.
    f.db.sql(
        "INSERT INTO limit_sleeps (run_id, agent, kind, message, slept_from, slept_until) \
         SELECT id, 'claude', 'usage_limit', 'limit', started_at, started_at + interval '1 second' FROM runs",
    );
    let rounds = f.db.count(Table::Rounds);
    assert_eq!(rounds, 3, "one round of sub, two of bogus");

    let page = f.dir.path().join("night.html");
    let out = f.run(&["report", "--html", page.to_str().unwrap()]);
    assert_ok(&out, "report --html");
    assert_eq!(text(&out).trim(), page.display().to_string());
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("<script"),
        "no script, and agent text is escaped"
    );
    assert!(!html.contains("<img"), "backlog text is escaped");
    assert!(
        html.contains("&lt;script&gt;alert(2)"),
        "the gate's words are shown, escaped"
    );
    // Links to PRs are fine; nothing is loaded from outside the page.
    for load in [" src=\"", "<link", "@import", "url(", "<iframe", "<object"] {
        assert!(!html.contains(load), "the page loads nothing: {load}");
    }

    let profile = tempfile::tempdir().unwrap();
    for width in [1280, 390] {
        let (dom, log) = render(&page, width, profile.path());
        let bars = dom.matches("class=\"round\"").count();
        assert_eq!(bars, rounds, "one bar per round at {width} px");
        assert_eq!(
            dom.matches("class=\"sleep\"").count(),
            1,
            "one band per sleep"
        );
        assert!(
            dom.contains("tests_failed") && dom.contains("pr_opened") && dom.contains("blocked")
        );
        let console = console_errors(&log);
        assert!(console.is_empty(), "console at {width} px: {console:?}");
    }
}

/// A local webhook receiver: keeps every request body, answers each with the
/// next of `answers` (the last repeats); `None` never answers (a timeout).
struct Hook {
    url: String,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

async fn hook(answers: Vec<Option<u16>>) -> Hook {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = bodies.clone();
    tokio::spawn(async move {
        let mut n = 0usize;
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let answer = answers[n.min(answers.len() - 1)];
            n += 1;
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Headers, then Content-Length bytes of body.
                let body = loop {
                    let k = sock.read(&mut chunk).await.unwrap_or(0);
                    if k == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..k]);
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        if body.len() >= len {
                            break body.to_string();
                        }
                    }
                };
                kept.lock().unwrap().push(body);
                match answer {
                    Some(code) => {
                        let resp = format!(
                            "HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        );
                        let _ = sock.write_all(resp.as_bytes()).await;
                    }
                    None => tokio::time::sleep(std::time::Duration::from_secs(60)).await,
                }
            });
        }
    });
    Hook { url, bodies }
}

/// The waits of a notification shortened: 10 ms between attempts (1 s and
/// 4 s in production) and 3 s for an answer (10 s).
fn notify_waits_short(f: &mut Fixture) {
    f.extra_env
        .push(("NIGHTSHIFT_NOTIFY_BACKOFF_MS".into(), "10".into()));
    f.extra_env
        .push(("NIGHTSHIFT_NOTIFY_TIMEOUT_MS".into(), "3000".into()));
}

/// `notify --test` sends one sample to the webhook (JSON summary), to Slack
/// (its incoming-webhook shape) and to a command (JSON on stdin); a target
/// that keeps failing is retried a bounded number of times and named.
#[tokio::test(flavor = "multi_thread")]
async fn notify_test_sends_a_sample_to_every_target() {
    let ok = hook(vec![Some(200)]).await;
    let slack = hook(vec![Some(200)]).await;
    let mut f = Fixture::new();
    notify_waits_short(&mut f);
    let got = f.dir.path().join("from-command.json");
    let cmd = f.agent(
        "notify.sh",
        &format!("#!/bin/sh\ncat > {}\n", got.display()),
    );
    f.config(&format!(
        "[notify]\nwebhook = \"{}\"\nslack_webhook = \"{}\"\ncommand = [\"{cmd}\"]\n",
        ok.url, slack.url
    ));
    let out = f.run(&["notify", "--test"]);
    assert_ok(&out, "notify --test");
    let said = text(&out);
    for t in ["webhook: sent", "slack_webhook: sent", "command: sent"] {
        assert!(said.contains(t), "{said}");
    }
    let hooked = ok.bodies.lock().unwrap().clone();
    assert_eq!(hooked.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&hooked[0]).unwrap();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["counts"]["pr_opened"], 1);
    assert!(v["failures"][0]["reason"].is_string());
    let s: serde_json::Value = serde_json::from_str(&slack.bodies.lock().unwrap()[0]).unwrap();
    assert!(
        s["text"]
            .as_str()
            .unwrap()
            .starts_with("[test] nightshift run")
    );
    assert!(
        s["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("tests_failed")
    );
    let stdin: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&got).unwrap()).unwrap();
    assert_eq!(stdin, v, "the command gets the same JSON");

    let failing = hook(vec![Some(500)]).await;
    f.config(&format!("[notify]\nwebhook = \"{}\"\n", failing.url));
    let out = f.run(&["notify", "--test"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("webhook: not sent after 3 attempt(s): answered HTTP 500"),
        "{}",
        text(&out)
    );
    assert_eq!(failing.bodies.lock().unwrap().len(), 3);

    f.config("[notify]\nwebhook = \"ftp://example.com/x\"\n");
    let out = f.run(&["notify", "--test"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("notify.webhook"), "{}", text(&out));
}

// ---- The second night: tend cards in the plan (issue 10) ----

/// `plan --json`, asserting success.
fn plan_json(f: &Fixture) -> serde_json::Value {
    let out = f.run(&["plan", "--json"]);
    assert_ok(&out, "plan --json");
    serde_json::from_slice(&out.stdout).expect("plan --json is JSON")
}

/// The `"tend"` entries as (pr, action).
fn tend_actions(plan: &serde_json::Value) -> Vec<(u64, String)> {
    plan["tend"]
        .as_array()
        .expect("a tend array")
        .iter()
        .map(|c| {
            (
                c["pr"].as_u64().unwrap(),
                c["action"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Night 1 opens two PRs appending to the same file and records the heads
/// it pushed; a person merges the first. The next plan lists the second as
/// a conflict card before the items (asking again while GitHub still
/// computes `mergeable`), the first as merged meanwhile, seals the card
/// into the plan SHA, and says it cannot look at the PRs when there is no
/// token.
#[tokio::test(flavor = "multi_thread")]
async fn plan_lists_a_pr_whose_base_moved_as_a_conflict() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n")
        .start()
        .await;
    publish_backlog(&f);
    assert_ok(&f.approve_and_drain(&[]), "night 1");
    assert_eq!(gh.prs().len(), 2);
    // The loop recorded the heads it pushed: a person's push would show.
    for b in f.remote_branches() {
        let sha = git(&f.remote, &["rev-parse", &format!("refs/heads/{b}")]);
        assert_eq!(
            f.db.sql(&format!(
                "SELECT head_sha FROM pull_requests WHERE branch = '{b}' AND head_pushed_at IS NOT NULL"
            )),
            sha
        );
    }
    let clean = plan_json(&f);
    assert_eq!(
        tend_actions(&clean),
        [(1, "nothing".to_string()), (2, "nothing".to_string())]
    );

    // The morning: PR #1 is merged (main moves to its branch).
    let b1 = gh.prs()[0]["head"]["ref"].as_str().unwrap().to_string();
    git(
        &f.remote,
        &["update-ref", "refs/heads/main", &format!("refs/heads/{b1}")],
    );
    gh.merge(1);
    gh.computing(2, 2);
    let plan = plan_json(&f);
    assert_eq!(
        tend_actions(&plan),
        [(1, "left_alone".to_string()), (2, "conflict".to_string())],
        "{plan:#}"
    );
    assert_eq!(plan["tend"][0]["reason"], "merged meanwhile");
    let card = &plan["tend"][1];
    let b2 = gh.prs()[1]["head"]["ref"].as_str().unwrap().to_string();
    assert_eq!(card["branch"], b2.as_str());
    assert_eq!(
        card["head"].as_str().unwrap(),
        git(&f.remote, &["rev-parse", &format!("refs/heads/{b2}")])
    );
    let sha = card["contract_sha"].as_str().unwrap();
    assert_ne!(plan["plan_sha"], clean["plan_sha"], "the card is sealed in");
    assert_eq!(
        f.db.sql(&format!(
            "SELECT pr_number FROM plan_contracts WHERE plan_sha = '{}' AND kind = 'tend' AND contract_sha = '{sha}'",
            plan["plan_sha"].as_str().unwrap()
        )),
        "2",
        "approving the plan approves the card"
    );
    let polls = gh
        .requests()
        .await
        .iter()
        .filter(|(m, p, _)| m == "GET" && p == "/repos/owner/repo/pulls/2")
        .count();
    // One read per plan (two so far), and two more while GitHub computed.
    assert_eq!(polls, 4, "asked again while mergeable was null");
    // Once merged in GitHub's eyes, the ledger knows it: PR #1 is no
    // longer looked at, and its item is `already merged`.
    let again = plan_json(&f);
    assert_eq!(tend_actions(&again), [(2, "conflict".to_string())]);
    assert_eq!(again["plan_sha"], plan["plan_sha"]);
    assert_eq!(again["items"][0]["blocked"], "already merged: PR #1");

    let out = f.run(&["plan"]);
    assert_ok(&out, "plan");
    let shown = text(&out);
    let at_card = shown
        .find("── PR #2 · conflict · Add sub")
        .or(shown.find("── PR #2 · conflict · Add mul"));
    let at_items = shown.find("── item 1").expect("item cards");
    assert!(
        at_card.is_some_and(|c| c < at_items),
        "tend cards first:\n{shown}"
    );
    assert!(shown.contains("1 PR(s) to tend first"), "{shown}");

    // Without a token: said, and the plan goes on with its items.
    let out = f
        .cmd()
        .env_remove("GITHUB_TOKEN")
        .args(["plan", "--json"])
        .output()
        .unwrap();
    assert_ok(&out, "plan without a token");
    assert!(
        text(&out).contains("could not look at nightshift's 1 open PR(s): no GitHub token"),
        "{}",
        text(&out)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tend"], serde_json::json!([]));
    assert_eq!(v["plan_sha"], clean["plan_sha"]);
    gh.assert_never_merged_approved_or_closed().await;
}

/// Three PRs of night 1. A CHANGES_REQUESTED review with two line comments
/// is listed with the comments verbatim; a person's commit on a branch, a
/// `/nightshift stop` comment and the hands-off label leave PRs alone with
/// the reason; a new comment after the plan was approved changes the card
/// and the plan SHA (the old approval does not cover it), while
/// nightshift's own comment changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn plan_lists_requested_changes_verbatim_and_leaves_prs_alone() {
    use common::github::DEFAULT_LOGIN;
    let gh = FakeGitHub::start().await;
    let f = morning(
        &gh,
        "# calc\n\n- [ ] Add sub\n- [ ] Add mul\n- [ ] Add div\n",
    )
    .start()
    .await;
    publish_backlog(&f);
    assert_ok(&f.approve_and_drain(&[]), "night 1");
    assert_eq!(gh.prs().len(), 3);

    gh.add_review(
        1,
        "ana",
        "CHANGES_REQUESTED",
        "Two things before this goes in.",
        &[
            ("calc.txt", 2, "Spell it `subtract`, please."),
            (
                "test.sh",
                3,
                "Keep the word list sorted:\nadd|div|mul|pow|sub",
            ),
        ],
    );
    // A person pushes a commit to PR #2's branch.
    let b2 = gh.prs()[1]["head"]["ref"].as_str().unwrap().to_string();
    let clone = clone_remote(&f, "person", Some(&b2));
    std::fs::write(clone.join("calc.txt"), "add\nmul\npow\n").unwrap();
    git(&clone, &["commit", "-qam", "a person's fix"]);
    git(&clone, &["push", "-q", "origin", &b2]);
    let person_head = git(&clone, &["rev-parse", "HEAD"]);
    gh.add_comment(3, "bo", "Not now.\n/nightshift stop\n");

    let plan = plan_json(&f);
    assert_eq!(
        tend_actions(&plan),
        [
            (1, "changes_requested".to_string()),
            (2, "left_alone".to_string()),
            (3, "left_alone".to_string())
        ],
        "{plan:#}"
    );
    type Asked = (String, String, Option<String>, Option<u64>, String);
    let asked: Vec<Asked> = plan["tend"][0]["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["author"].as_str().unwrap().to_string(),
                c["path"].as_str().map(str::to_string),
                c["line"].as_u64(),
                c["body"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let s = |x: &str| x.to_string();
    assert_eq!(
        asked,
        vec![
            (
                s("changes_requested"),
                s("ana"),
                None,
                None,
                s("Two things before this goes in.")
            ),
            (
                s("line_comment"),
                s("ana"),
                Some(s("calc.txt")),
                Some(2),
                s("Spell it `subtract`, please.")
            ),
            (
                s("line_comment"),
                s("ana"),
                Some(s("test.sh")),
                Some(3),
                s("Keep the word list sorted:\nadd|div|mul|pow|sub")
            ),
        ]
    );
    let reason2 = plan["tend"][1]["reason"].as_str().unwrap();
    assert!(
        reason2.contains("someone else pushed") && reason2.contains(&person_head[..12]),
        "{reason2}"
    );
    assert_eq!(
        plan["tend"][2]["reason"],
        "bo wrote `/nightshift stop` on the PR"
    );
    assert!(plan["tend"][1]["contract_sha"].is_null() && plan["tend"][2]["contract_sha"].is_null());

    let out = f.run(&["plan"]);
    assert_ok(&out, "plan");
    let shown = text(&out);
    for line in [
        "── PR #1 · changes requested · Add sub",
        "   asked     ana (line comment) on calc.txt:2:",
        "             │ Spell it `subtract`, please.",
        "             │ add|div|mul|pow|sub",
        "── PR #2 · left alone · Add mul",
        "── PR #3 · left alone · Add div",
        "   not run   bo wrote `/nightshift stop` on the PR",
    ] {
        assert!(shown.contains(line), "{line:?} missing:\n{shown}");
    }

    // Approved; then a new comment arrives: a new card, a new plan SHA,
    // and the approved plan does not hold the new card.
    let approved = plan["plan_sha"].as_str().unwrap().to_string();
    assert_ok(&f.run(&["approve", &approved]), "approve");
    let old_card = plan["tend"][0]["contract_sha"]
        .as_str()
        .unwrap()
        .to_string();
    gh.add_comment(1, "ana", "And mind the trailing newline.");
    let later = plan_json(&f);
    let new_card = later["tend"][0]["contract_sha"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(later["plan_sha"].as_str().unwrap(), approved);
    assert_ne!(new_card, old_card);
    assert_eq!(later["tend"][0]["comments"].as_array().unwrap().len(), 4);
    let held = |plan: &str, card: &str| {
        f.db.sql(&format!(
            "SELECT count(*) FROM plan_contracts WHERE plan_sha = '{plan}' AND contract_sha = '{card}'"
        ))
    };
    assert_eq!(held(&approved, &old_card), "1");
    assert_eq!(
        held(&approved, &new_card),
        "0",
        "the old approval does not cover it"
    );
    // nightshift's own comment and a CI app's are no requests.
    gh.add_comment(1, DEFAULT_LOGIN, "Answered each request.");
    gh.add_comment(1, "ci-app[bot]", "Coverage went down.");
    assert_eq!(plan_json(&f)["plan_sha"], later["plan_sha"]);

    // The hands-off label leaves PR #1 alone from then on.
    gh.label(1, "nightshift:hands-off");
    let off = plan_json(&f);
    assert_eq!(tend_actions(&off)[0], (1, "left_alone".to_string()));
    assert_eq!(
        off["tend"][0]["reason"],
        "the PR carries the label nightshift:hands-off"
    );
    assert!(
        off["tend"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["contract_sha"].is_null())
    );
    gh.assert_never_merged_approved_or_closed().await;
}

/// `report --history --json` over three nights: PRs opened per night, what
/// became of them on GitHub (asked now, remembered in the ledger), the merge
/// rate and the cost per merged PR (all the nights' cost over the merged).
#[tokio::test(flavor = "multi_thread")]
async fn history_counts_merged_prs_and_their_cost() {
    let gh = FakeGitHub::start().await;
    let f = morning(&gh, "- [ ] Add sub\n- [ ] Add docs\n")
        .start()
        .await;
    assert_ok(&f.approve_and_drain(&[]), "night 1");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add docs\n- [ ] Add mul\n");
    assert_ok(&f.approve_and_drain(&[]), "night 2");
    f.write(
        "NEXT.md",
        "- [ ] Add sub\n- [ ] Add docs\n- [ ] Add mul\n- [ ] Add div\n",
    );
    assert_ok(&f.approve_and_drain(&[]), "night 3");
    assert_eq!(gh.prs().len(), 4);
    // What the agents reported the items cost, and a person's morning.
    for (title, usd) in [
        ("Add sub", 1.0),
        ("Add docs", 2.0),
        ("Add mul", 3.0),
        ("Add div", 4.0),
    ] {
        f.db.sql(&format!(
            "UPDATE run_items SET cost_usd = {usd} WHERE title = '{title}' AND outcome = 'pr_opened'"
        ));
    }
    let number = |title: &str| -> u64 {
        gh.prs()
            .iter()
            .find(|p| p["title"].as_str().unwrap().ends_with(title))
            .unwrap()["number"]
            .as_u64()
            .unwrap()
    };
    gh.merge(number("Add sub"));
    gh.merge(number("Add mul"));
    gh.close(number("Add docs"));

    let out = f.run(&["report", "--history", "--since", "1d", "--json"]);
    assert_ok(&out, "report --history --json");
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &h["totals"];
    assert_eq!(t["nights"], 3, "{h:#}");
    assert_eq!(t["prs_opened"], 4);
    assert_eq!(
        (
            t["merged"].as_u64(),
            t["closed"].as_u64(),
            t["open"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(t["merge_rate"], 0.5);
    assert_eq!(t["cost_usd"], 10.0);
    assert_eq!(t["cost_per_merged_pr"], 5.0);
    let per_night: Vec<u64> = h["nights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["prs_opened"].as_u64().unwrap())
        .collect();
    assert_eq!(per_night, [2, 1, 1]);
    assert!(h["unknown"].is_null());
    // Remembered: without GitHub the fates are still known.
    let mut prs = f.db.prs();
    // As PostgreSQL orders them: by number, none last.
    prs.sort_by_key(|p| (p.number.is_none(), p.number));
    let states: Vec<String> = prs.into_iter().map(|p| p.state).collect();
    assert_eq!(states, ["merged", "closed", "merged", "open"]);
    let out = f.run(&["report", "--history", "--since", "1d"]);
    let said = text(&out);
    assert!(
        said.contains("2 merged, 1 closed unmerged, 1 open; merge rate 50%"),
        "{said}"
    );
    assert!(said.contains("$5.00 per merged PR"), "{said}");
    let out = f.run(&["report", "--history", "--since", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    gh.assert_never_merged_approved_or_closed().await;
}

/// A run's end sends exactly one summary to the webhook, secrets masked; a
/// webhook that answers 500 and then never answers is retried a bounded
/// number of times, recorded, and changes neither the outcome nor the exit
/// code.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_end_sends_one_summary_and_a_dead_webhook_changes_nothing() {
    let gh = FakeGitHub::start().await;
    let ok = hook(vec![Some(204)]).await;
    let secret = "sekrit-value-5f3a9c";
    let mut f = morning(&gh, &format!("- [ ] Add sub {secret}\n"))
        .start()
        .await;
    notify_waits_short(&mut f);
    f.extra_env.push(("MY_SECRET".into(), secret.into()));
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    let config = |url: &str| format!("secrets = [\"MY_SECRET\"]\n[notify]\nwebhook = \"{url}\"\n");
    f.config_with(&w, &r, &config(&ok.url));
    f.drain_exits(0, &[]);
    let bodies = ok.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "one summary per run");
    assert!(!bodies[0].contains(secret), "{}", bodies[0]);
    let v: serde_json::Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["counts"]["pr_opened"], 1);
    assert_eq!(v["prs"][0]["pr_url"], gh.prs()[0]["html_url"]);
    let page = v["report"].as_str().unwrap();
    assert!(
        std::fs::read_to_string(page)
            .unwrap()
            .contains("class=\"round\"")
    );

    let dead = hook(vec![Some(500), None]).await;
    f.write("NEXT.md", "- [ ] Add mul\n");
    f.config_with(&w, &r, &config(&dead.url));
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "drain with a dead webhook");
    assert_eq!(f.report()["items"][0]["outcome"], "pr_opened");
    assert_eq!(dead.bodies.lock().unwrap().len(), 3, "bounded retries");
    assert!(
        text(&out).contains("was not sent after 3 attempt(s)"),
        "{}",
        text(&out)
    );
    assert_eq!(f.db.events("notify_failed"), 1);
}
