//! Fix rounds for a red required check (issue 23,
//! docs/github.md#fix-rounds): whole nights with the real binary against
//! the fake GitHub's CI — one round that makes a PR green, a spent budget,
//! two workers, a tended PR, the next night, and rounds that a signal or a
//! killed worker interrupts.

use crate::common;

use std::time::Duration;

use common::Night;
use common::github::FakeGitHub;
use common::github_ci::AutoCheck;

use crate::ci::{ci_of, ci_world};

/// What the fake CI's failing `test` job logs: the fault named at its end,
/// after terminal colours, and the night's token (which no prompt may show).
fn failing_log() -> String {
    let mut log = String::new();
    for i in 0..200 {
        log.push_str(&format!("\u{1b}[32mok {i}\u{1b}[0m\n"));
    }
    log.push_str(&format!("using token {}\n", common::night::TOKEN));
    log.push_str("error: div is missing from calc.txt\n");
    log
}

/// A required `test` check that fails (with [`failing_log`]) until
/// calc.txt holds `fixed_by`, and passes on the base.
fn red_until(fixed_by: &str) -> AutoCheck {
    AutoCheck::new("test", Some("failure"))
        .log(&failing_log())
        .on_base("success")
        .fixed_by("calc.txt", fixed_by)
}

/// A writer whose items add `sub` (an item titled with `mul`: a mul.txt
/// file); told in a fix round that `div is missing`, it adds `fix_word`
/// (or the word in the file `fix-word` of the agents' directory `dir`) to
/// calc.txt and keeps its prompt as `fix-prompt-<round>-<pid>.md` there.
fn fixing_writer(dir: &std::path::Path, fix_word: &str) -> String {
    format!(
        r#"#!/bin/sh
if [ -f "$NIGHTSHIFT_FEEDBACK_FILE" ] && grep -q 'div is missing' "$NIGHTSHIFT_FEEDBACK_FILE"; then
  cp "$NIGHTSHIFT_PROMPT_FILE" "{dir}/fix-prompt-$NIGHTSHIFT_ROUND-$$.md"
  w=$(cat "{dir}/fix-word" 2>/dev/null)
  [ -n "$w" ] || w={fix_word}
  echo "$w" >> calc.txt
  echo "added $w, which the CI log says is missing"
  exit 0
fi
case "$(cat "$NIGHTSHIFT_CONTRACT_FILE")" in
  *mul*) echo mul > mul.txt ;;
  *) echo sub >> calc.txt ;;
esac
echo done
"#,
        dir = dir.display()
    )
}

/// A reviewer that approves and appends its prompt to `reviewer.prompts`
/// in the agents' directory `dir`.
fn logging_reviewer(dir: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\ncat \"$NIGHTSHIFT_PROMPT_FILE\" >> \"{}/reviewer.prompts\"\necho '{{\"verdict\":\"approve\",\"findings\":[]}}'\n",
        dir.display()
    )
}

/// The fix-round prompts the writer kept.
fn fix_prompts(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("fix-prompt-") {
            out.push(std::fs::read_to_string(&p).unwrap());
        }
    }
    out
}

/// A night of `items` in the CI world `auto` on `gh` (`test` required),
/// with the [`fixing_writer`] adding `fix_word` and the
/// [`logging_reviewer`].
fn ci_night<'a>(
    gh: &'a FakeGitHub,
    items: &[&str],
    auto: Vec<AutoCheck>,
    fix_word: &'a str,
    config: &str,
) -> Night<'a> {
    ci_world(gh, &["test"], auto, config)
        .items(items.iter().copied())
        .writer_with(move |f| fixing_writer(&f.agents, fix_word))
        .reviewer_with(|f| logging_reviewer(&f.agents))
}

#[tokio::test(flavor = "multi_thread")]
async fn one_fix_round_makes_a_red_required_check_green_on_the_same_pr() {
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    let night = ci_night(
        &gh,
        &["Add sub"],
        vec![red_until("div")],
        "div",
        "draft = true\n",
    )
    .exit(0)
    .outcomes(&["pr_opened"])
    .run()
    .await;

    let report = night.report();
    let ci = ci_of(&report);
    assert_eq!(ci["state"], "ci_green", "{ci:#}");
    assert_eq!(ci["fix_rounds"], 1, "{ci:#}");
    let fix = &ci["fixes"][0];
    assert!(
        fix["checks"].as_str().unwrap().contains("`test`") && fix["to"].is_string(),
        "{fix:#}"
    );
    // The same PR, one new commit on its branch, marked ready once green.
    assert_eq!(gh.prs().len(), 1, "exactly one PR");
    let n = gh.prs()[0]["number"].as_u64().unwrap();
    assert_eq!(gh.ci(|ci| ci.marked_ready.clone()), vec![n]);
    assert_eq!(gh.prs()[0]["draft"], false);
    let branch = report["items"][0]["branch"].as_str().unwrap().to_string();
    let count = common::git(
        &night.remote,
        &["rev-list", "--count", &format!("main..{branch}")],
    );
    assert_eq!(count.trim(), "2", "the item's commit and the fix round's");
    let head = common::git(&night.remote, &["rev-parse", &branch]);
    assert_eq!(
        ci["head_sha"],
        head.trim(),
        "the watch followed the new head"
    );
    assert_eq!(fix["from"].as_str().map(|s| s != head.trim()), Some(true));
    let calc = common::git(&night.remote, &["show", &format!("{branch}:calc.txt")]);
    assert_eq!(calc.trim(), "add\nsub\ndiv");
    // One comment: which check failed, what changed, the new head.
    let comments = gh.comments(n);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    let body = comments[0]["body"].as_str().unwrap();
    assert!(
        body.contains("fix round 1 of 2")
            && body.contains("`test`")
            && body.contains("calc.txt")
            && body.contains(&head.trim()[..12]),
        "{body}"
    );
    // The writer read the log's tail, masked, framed as data.
    let prompts = fix_prompts(&night.agents);
    assert_eq!(prompts.len(), 1, "one fix round's writer");
    let p = &prompts[0];
    assert!(
        p.contains("error: div is missing from calc.txt")
            && p.contains("never instructions")
            && p.contains("ok 199"),
        "{p}"
    );
    assert!(
        !p.contains(common::night::TOKEN) && !p.contains('\u{1b}'),
        "{p}"
    );
    let reviewed = std::fs::read_to_string(night.agents.join("reviewer.prompts")).unwrap();
    assert!(
        reviewed.contains("deletes, skips or weakens a test"),
        "the reviewer is told: {reviewed}"
    );
    // The HTML page has a CI column, and draws the fix round apart from
    // the item's own round: labelled, with the check it repaired.
    let page = common::text(&night.run(&["report", "--html", "-"]));
    assert!(
        page.contains("<th>CI</th>") && page.contains("<td data-label=\"CI\">ci_green</td>"),
        "{page}"
    );
    assert!(
        page.contains("<rect class=\"round\" data-item=\"1\" data-round=\"1\" x="),
        "the item's own round is a plain one: {page}"
    );
    assert!(
        page.contains(
            "<rect class=\"round fix\" data-item=\"1\" data-round=\"2\" data-fix=\"1\" data-checks=\"test\""
        ) && page.contains("item 1 round 2 · CI fix 1 (test)")
            && page.contains("<div class=\"fix\">CI fix 1 (test) · round 2</div>"),
        "{page}"
    );
    gh.assert_never_merged_approved_or_closed().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spent_fix_budget_is_ci_failed_and_the_draft_stays() {
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    // The fix round adds `pow`: the check stays red. The run's end is
    // told to a command.
    let told = tempfile::tempdir().unwrap();
    let told = told.path().join("notified.json");
    let config = format!(
        "draft = true\n[limits]\nci_rounds = 1\n[notify]\ncommand = [\"/bin/sh\", \"-c\", \"cat > {}\"]\n",
        told.display()
    );
    let night = ci_night(&gh, &["Add sub"], vec![red_until("div")], "pow", &config)
        .exit(0)
        .outcomes(&["pr_opened"])
        .run()
        .await;

    let ci = ci_of(&night.report());
    assert_eq!(ci["state"], "ci_failed", "{ci:#}");
    assert_eq!(ci["fix_rounds"], 1, "{ci:#}");
    let why = ci["reason"].as_str().unwrap();
    assert!(
        why.contains("`test` (failure)") && why.contains("fix budget is spent"),
        "{why}"
    );
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(gh.prs()[0]["draft"], true, "a red PR stays a draft");
    assert!(gh.ci(|ci| ci.marked_ready.is_empty()));
    let text = common::text(&night.run(&["report"]));
    assert!(
        text.contains("ci_failed")
            && text.contains("test (required): failure")
            && text.contains("fix round 1 for `test`"),
        "{text}"
    );
    let said: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&told).unwrap()).unwrap();
    assert_eq!(
        (&said["ci"]["ci_failed"], &said["prs"][0]["ci"]),
        (&serde_json::json!(1), &serde_json::json!("ci_failed")),
        "{said:#}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_run_the_fix_rounds_of_two_items_each_on_its_one_pr() {
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    let night = ci_night(
        &gh,
        &["Add sub", "Add mul file"],
        vec![red_until("div")],
        "div",
        "",
    )
    .drain(&["--jobs", "2"])
    .exit(0)
    .outcomes(&["pr_opened", "pr_opened"])
    .run()
    .await;

    let report = night.report();
    let mut workers = std::collections::BTreeSet::new();
    for item in report["items"].as_array().unwrap() {
        let ci = &item["ci"];
        assert_eq!(ci["state"], "ci_green", "{item:#}");
        assert_eq!(ci["fix_rounds"], 1, "{item:#}");
        assert_eq!(ci["pr_number"], item["pr_number"]);
        workers.insert(ci["fixes"][0]["worker"].as_str().unwrap().to_string());
    }
    assert_eq!(gh.prs().len(), 2, "one PR per item");
    for pr in gh.prs() {
        assert_eq!(gh.comments(pr["number"].as_u64().unwrap()).len(), 1);
    }
    // Each fix round was claimed from the queue like an item: a second
    // claim of its item, by one of the drain's two workers.
    let claims = night
        .db
        .sql("SELECT string_agg(attempt::text || ':' || end_reason, ',' ORDER BY item_key, attempt) FROM claims");
    assert_eq!(claims.matches("2:finished").count(), 2, "{claims}");
    assert!(
        workers
            .iter()
            .all(|w| w.ends_with(":1") || w.ends_with(":2")),
        "{workers:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tended_prs_push_is_watched_and_its_red_check_gets_a_fix_round() {
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    let green = vec![AutoCheck::new("test", Some("success"))];
    let w = ci_night(&gh, &["Add sub"], green, "div", "")
        .commit_backlog()
        .exit(0)
        .outcomes(&["pr_opened"])
        .run()
        .await;
    assert_eq!(ci_of(&w.report())["state"], "ci_green");
    let n = gh.prs()[0]["number"].as_u64().unwrap();
    // In the morning a member asks for a change, and from now on the
    // repository's CI wants `div` in calc.txt.
    w.db.sql("UPDATE pull_requests SET head_pushed_at = now() - interval '1 hour'");
    gh.add_comment(n, "ana", "Please add one more word.");
    let ago = (chrono::Utc::now() - chrono::Duration::minutes(30))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    gh.date_feedback(n, &ago);
    gh.ci(|ci| ci.auto = vec![red_until("div")]);

    let out = w.approve_and_drain(&[]);
    common::assert_ok(&out, "night 2");

    let report = w.report();
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "pr_updated", "{report:#}");
    let ci = &item["ci"];
    assert_eq!(
        (ci["state"].as_str(), ci["fix_rounds"].as_u64()),
        (Some("ci_green"), Some(1)),
        "{ci:#}"
    );
    assert_eq!(gh.prs().len(), 1, "still one PR");
    let branch = gh.prs()[0]["head"]["ref"].as_str().unwrap().to_string();
    let calc = common::git(&w.remote, &["show", &format!("{branch}:calc.txt")]);
    assert!(calc.trim().ends_with("div"), "{calc}");
    let mine = gh
        .comments(n)
        .into_iter()
        .filter(|c| c["user"]["login"] != "ana")
        .count();
    assert_eq!(mine, 2, "the tend's answer and the fix round's comment");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_next_night_tends_a_pr_whose_ci_ended_red() {
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    // Night 1: the one fix round adds the wrong word; the PR ends red.
    let config = "[limits]\nci_rounds = 1\n";
    let w = ci_night(&gh, &["Add sub"], vec![red_until("div")], "pow", config)
        .commit_backlog()
        .exit(0)
        .outcomes(&["pr_opened"])
        .run()
        .await;
    assert_eq!(ci_of(&w.report())["state"], "ci_failed");
    std::fs::write(w.agents.join("fix-word"), "div\n").unwrap();
    for p in fix_prompts(&w.agents) {
        assert!(p.contains("fix round 1 of 1"), "{p}");
    }

    // Night 2: the plan's card for the red PR, approved and worked.
    let plan: serde_json::Value =
        serde_json::from_slice(&w.run(&["plan", "--json"]).stdout).unwrap();
    let card = &plan["tend"][0];
    assert_eq!(card["action"], "ci_failed", "{plan:#}");
    let plan_text = common::text(&w.run(&["plan"]));
    assert!(
        plan_text.contains("CI failed") && plan_text.contains("required check(s) test"),
        "{plan_text}"
    );
    let out = w.approve_and_drain(&[]);
    common::assert_ok(&out, "night 2");

    let report = w.report();
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "pr_updated", "{report:#}");
    assert_eq!(
        (
            item["ci"]["state"].as_str(),
            item["ci"]["fix_rounds"].as_u64()
        ),
        (Some("ci_green"), Some(0)),
        "{report:#}"
    );
    let told = fix_prompts(&w.agents);
    assert!(
        told.iter().any(|p| p.contains("the last night's result")
            && p.contains("error: div is missing from calc.txt")),
        "{told:#?}"
    );
    assert_eq!(gh.prs().len(), 1, "still one PR");
}

/// A writer whose fix round (told `div is missing`) stalls at
/// [`common::bg::stall_snippet`] `fix` in the agents' directory `dir`, then
/// adds `div`; its items add `sub`.
fn stalling_fixer(dir: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\nif grep -q 'div is missing' \"$NIGHTSHIFT_FEEDBACK_FILE\"; then\n{}echo div >> calc.txt\necho 'added div'\nexit 0\nfi\necho sub >> calc.txt\necho done\n",
        common::bg::stall_snippet(dir, "fix")
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fix_round_a_signal_stops_before_its_push_is_not_spent() {
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    let world = ci_world(&gh, &["test"], vec![red_until("div")], "")
        .writer_with(|f| stalling_fixer(&f.agents))
        .start()
        .await;
    let f = &world.f;
    std::fs::write(f.agents.join("fix.stall"), "").unwrap();
    common::bg::approve(f);
    let deadline = common::far_deadline();
    let mut drain = common::bg::Bg::start(f, &["drain", "--deadline", &deadline]);
    // The fix round's writer is at work: stop the run (SIGTERM).
    common::bg::wait_until(Duration::from_secs(60), "the fix round's writer", || {
        f.agents.join("fix.ready").exists()
    });
    drain.signal(nix::sys::signal::Signal::SIGTERM);
    let status = drain.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{}", drain.output());
    common::bg::kill_stalled(&f.agents, "fix");

    let ci = ci_of(&f.report());
    assert_eq!(
        ci["fix_rounds"], 0,
        "the interrupted round does not count against ci_rounds: {ci:#}"
    );
    assert_eq!(ci["fixes"], serde_json::json!([]), "{ci:#}");
    assert_eq!(ci["state"], "ci_pending", "{ci:#}");
    let said = f.db.sql(
        "SELECT string_agg((data->>'counted') || ':' || (data->>'n'), ',') FROM events WHERE kind = 'ci_fix_round'",
    );
    assert_eq!(said, "false:1", "one fix round, not counted");
    let wanted =
        f.db.sql("SELECT count(*) FROM ci_watches WHERE fix_failure IS NOT NULL");
    assert_eq!(wanted, "0", "the wish is withdrawn, not left for no one");
    assert_eq!(gh.prs().len(), 1);
    assert!(
        gh.comments(gh.prs()[0]["number"].as_u64().unwrap())
            .is_empty()
    );
}

/// A writer whose `mul` item takes 12 s, whose fix rounds (told `div is
/// missing`) add `div`, and whose other items add `sub`.
const SLOW_MUL_FIXER: &str = r#"#!/bin/sh
if grep -q 'div is missing' "$NIGHTSHIFT_FEEDBACK_FILE"; then
  echo div >> calc.txt
  echo 'added div'
  exit 0
fi
case "$(cat "$NIGHTSHIFT_CONTRACT_FILE")" in
  *mul*) sleep 12; echo mul > mul.txt ;;
  *) echo sub >> calc.txt ;;
esac
echo done
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_fix_round_whose_worker_died_after_its_push_is_counted_once_not_redone() {
    use crate::workers::{finish, second_host, spawn_drain, spawn_worker, wait_for_a_claim};
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    let world = ci_world(&gh, &["test"], vec![red_until("div")], "lease = \"5s\"\n")
        .items(["Add mul file", "Add sub"])
        .writer(SLOW_MUL_FIXER)
        .start()
        .await;
    let f = &world.f;
    // The drain's one worker takes the slow `mul` item; the second host's
    // worker then takes `sub`, and its fix round (the drain's is busy).
    let drain = spawn_drain(f, &[]);
    wait_for_a_claim(f);
    let (clone, data) = second_host(f);
    let mut worker = spawn_worker(f, &clone, &data);
    common::bg::wait_until(Duration::from_secs(60), "the sub PR", || {
        !gh.prs().is_empty()
    });
    let n = gh.prs()[0]["number"].as_u64().unwrap();
    // The fix round's PR comment hangs: its worker is killed (-9) after
    // the push, before the round's end is recorded.
    gh.state.lock().unwrap().scripted.push(
        common::github::Fault::new(
            "POST",
            &format!("/repos/owner/repo/issues/{n}/comments"),
            500,
        )
        .delay_ms(60_000),
    );
    common::bg::wait_until(Duration::from_secs(60), "the fix round's push", || {
        f.db.sql("SELECT count(*) FROM events WHERE kind = 'pushed' AND data ? 'from'") == "1"
    });
    std::thread::sleep(Duration::from_millis(300));
    worker.kill().unwrap();
    let _ = worker.wait();
    assert_eq!(
        f.db.sql("SELECT count(*) FROM ci_fix_rounds"),
        "0",
        "the dead worker recorded no end"
    );

    let out = finish(drain, "drain");
    common::assert_ok(&out, "drain");
    let report = f.report();
    let sub = (report["items"].as_array().unwrap().iter())
        .find(|i| i["pr_number"] == n)
        .unwrap_or_else(|| panic!("{report:#}"));
    let ci = &sub["ci"];
    assert_eq!(
        (ci["state"].as_str(), ci["fix_rounds"].as_u64()),
        (Some("ci_green"), Some(1)),
        "the dead attempt's push counted once, not redone: {ci:#}"
    );
    let branch = sub["branch"].as_str().unwrap();
    let head = common::git(&f.remote, &["rev-parse", branch]);
    assert_eq!(ci["fixes"][0]["to"], head.trim(), "{ci:#}");
    let count = common::git(
        &f.remote,
        &["rev-list", "--count", &format!("main..{branch}")],
    );
    assert_eq!(count.trim(), "2", "the item's commit and one fix commit");
    let key = f.db.sql(&format!(
        "SELECT item_key FROM run_items WHERE pr_number = {n} LIMIT 1"
    ));
    let claims: Vec<String> = (f.db.claims().into_iter())
        .filter(|c| c.item_key == key)
        .map(|c| format!("{}:{}", c.attempt, c.end_reason.unwrap_or_default()))
        .collect();
    assert_eq!(claims, ["1:finished", "2:lost", "3:finished"]);
    assert_eq!(gh.prs().len(), 2, "one PR per item");
}
