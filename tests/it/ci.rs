//! The repository's own CI (issue 23, docs/github.md#ci): the forge's CI
//! calls against the fake GitHub's check runs, statuses, required checks,
//! job logs on another host, re-runs and the GraphQL mutation.

use crate::common;

use std::time::Duration;

use common::Night;
use common::github::FakeGitHub;
use common::github_ci::{AutoCheck, LogServer};
use nightshift::forge::{CheckSource, CheckVerdict, Forge, RepoId, RetryPolicy, Secret};

const TOKEN: &str = "ghp_ciTOKEN0123456789abcdefABCDEFxyz";
const HEAD: &str = "1111111111111111111111111111111111111111";
const OLD: &str = "2222222222222222222222222222222222222222";

fn forge(gh: &FakeGitHub) -> Forge {
    forge_at(&gh.uri())
}

fn forge_at(base: &str) -> Forge {
    Forge::new(base, Secret::new(TOKEN), RepoId::new("owner", "repo"), None)
        .expect("client builds")
        .with_retry_policy(RetryPolicy {
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_millis(20),
            secondary_wait: Duration::from_millis(10),
            max_total_wait: Duration::from_secs(10),
            max_attempts: 6,
            request_timeout: Duration::from_secs(5),
        })
}

#[tokio::test]
async fn check_runs_are_read_page_after_page_for_the_head_only() {
    let gh = FakeGitHub::start().await;
    gh.state.lock().unwrap().page_cap = Some(7);
    for i in 0..23 {
        gh.add_check_run(
            HEAD,
            &format!("job {i:02}"),
            "completed",
            Some("success"),
            "",
        );
    }
    // A check reported for the previous head does not count for this one.
    gh.add_check_run(OLD, "lint", "completed", Some("failure"), "old failure");
    // A re-run of a name: only the newest run counts.
    gh.add_check_run(HEAD, "job 03", "completed", Some("failure"), "now red");
    gh.add_check_run(HEAD, "queued one", "queued", None, "");
    gh.add_status(HEAD, "ci/legacy", "pending");
    gh.add_status(HEAD, "ci/legacy", "error");

    let checks = forge(&gh).commit_checks(HEAD).await.expect("read");

    let runs: Vec<_> = checks
        .iter()
        .filter(|c| c.source == CheckSource::Run)
        .collect();
    assert_eq!(runs.len(), 24, "23 names + the queued one");
    assert!(checks.iter().all(|c| c.head_sha == HEAD));
    assert!(
        !checks.iter().any(|c| c.name == "lint"),
        "the old head's check"
    );
    let job3 = checks.iter().find(|c| c.name == "job 03").unwrap();
    assert_eq!(
        (job3.verdict, job3.conclusion.as_str()),
        (CheckVerdict::Failed, "failure")
    );
    assert!(job3.summary.contains("now red") && job3.job_id.is_some());
    let queued = checks.iter().find(|c| c.name == "queued one").unwrap();
    assert_eq!(
        (queued.verdict, queued.conclusion.as_str()),
        (CheckVerdict::Pending, "queued")
    );
    let legacy = checks.iter().find(|c| c.name == "ci/legacy").unwrap();
    assert_eq!(
        (legacy.source, legacy.verdict),
        (CheckSource::Status, CheckVerdict::Failed)
    );
    assert_eq!(legacy.job_id, None);
    let pages = gh
        .requests()
        .await
        .iter()
        .filter(|(m, p, _)| m == "GET" && p.contains("/check-runs"))
        .count();
    assert_eq!(pages, 4, "24 runs at 7 a page");
}

#[tokio::test]
async fn an_unchanged_read_is_answered_304_and_a_change_is_still_read() {
    let gh = FakeGitHub::start().await;
    gh.add_check_run(HEAD, "test", "queued", None, "");
    gh.add_status(HEAD, "ci/legacy", "pending");
    let f = forge(&gh);

    let first = f.commit_checks(HEAD).await.expect("read");
    let again = f.commit_checks(HEAD).await.expect("read again");

    assert_eq!(first, again, "a 304 stands for the answer kept");
    assert_eq!(
        (gh.ci(|ci| ci.not_modified), f.not_modified()),
        (2, 2),
        "check runs and status, each answered 304 the second time"
    );
    let sent = gh.server.received_requests().await.unwrap();
    let conditional = sent
        .iter()
        .filter(|r| r.headers.contains_key("if-none-match"))
        .count();
    assert_eq!(conditional, 2, "only the second reads send an ETag");
    // The run ends: GitHub's ETag changes with it, and the change is read.
    gh.ci(|ci| {
        ci.check_runs[0]["status"] = serde_json::json!("completed");
        ci.check_runs[0]["conclusion"] = serde_json::json!("success");
    });
    let after = f.commit_checks(HEAD).await.expect("read after the change");
    let test = after.iter().find(|c| c.name == "test").unwrap();
    assert_eq!(test.verdict, CheckVerdict::Passed);
    assert_eq!(gh.ci(|ci| ci.not_modified), 3, "the status did not change");
}

#[tokio::test]
async fn check_texts_are_bounded_and_masked() {
    let gh = FakeGitHub::start().await;
    let huge = format!("{TOKEN} {}", "y".repeat(100_000));
    gh.add_check_run(
        HEAD,
        &format!("<b>x</b>{}", "n".repeat(1000)),
        "completed",
        Some("failure"),
        &huge,
    );

    let checks = forge(&gh).commit_checks(HEAD).await.expect("read");

    let c = &checks[0];
    assert_eq!(c.name.chars().count(), nightshift::forge::CHECK_NAME_CHARS);
    assert!(c.summary.chars().count() <= nightshift::forge::CHECK_SUMMARY_CHARS);
    assert!(!c.summary.contains(TOKEN), "{}", &c.summary[..80]);
}

#[tokio::test]
async fn required_checks_come_from_protection_and_rulesets() {
    let gh = FakeGitHub::start().await;
    let f = forge(&gh);

    let none = f.required_checks("main").await.expect("404 is none");
    assert!(none.names.is_empty() && !none.protection_known && none.rulesets_known);

    gh.protect("main", &["test", "lint"]);
    gh.ruleset("main", &["build (ubuntu)", "test"]);
    let both = f.required_checks("main").await.expect("read");
    let names: Vec<&str> = both.names.iter().map(String::as_str).collect();
    assert_eq!(names, ["build (ubuntu)", "lint", "test"]);
    assert!(both.protection_known && both.rulesets_known);

    gh.ci(|ci| ci.protection_forbidden = true);
    let hidden = f.required_checks("main").await.expect("403 is none known");
    assert!(!hidden.protection_known);
    assert_eq!(hidden.names.len(), 2, "the rulesets still count");
    assert_eq!(
        f.probe_repo().await.map(|_| ()).ok(),
        Some(()),
        "a 403 there does not stop the client"
    );
}

#[tokio::test]
async fn the_job_log_is_fetched_from_the_other_host_without_the_token() {
    let gh = FakeGitHub::start().await;
    let logs = gh.log_server().await;
    let id = gh.add_check_run(HEAD, "test", "completed", Some("failure"), "");
    let mut log = String::new();
    for i in 0..500 {
        log.push_str(&format!(
            "2026-12-05T01:00:00.0000000Z \u{1b}[32mline {i}\u{1b}[0m\n"
        ));
    }
    log.push_str(&format!(
        "error: assertion failed in add_overflow, token {TOKEN}\n"
    ));
    gh.job_log(id, &log);

    let tail = forge(&gh)
        .job_log_tail(id, 80)
        .await
        .expect("read")
        .expect("a log");

    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 80);
    assert!(
        lines[79].contains("assertion failed in add_overflow"),
        "{}",
        lines[79]
    );
    assert!(!tail.contains('\u{1b}') && !tail.contains(TOKEN), "{tail}");
    assert!(lines[0].contains("line 421"), "{}", lines[0]);
    assert_eq!(
        *logs.seen_auth.lock().unwrap(),
        vec![None],
        "no token to the log host"
    );
}

#[tokio::test]
async fn a_huge_log_keeps_its_tail() {
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    let id = gh.add_check_run(HEAD, "test", "completed", Some("failure"), "");
    let mut log = "z".repeat(50 * 1024 * 1024);
    log.push_str("\nthe last words\n");
    gh.job_log(id, &log);

    let tail = forge(&gh)
        .job_log_tail(id, 2)
        .await
        .expect("read")
        .expect("a log");

    assert!(
        tail.ends_with("the last words"),
        "{}",
        &tail[tail.len() - 40..]
    );
    assert!(tail.len() < 1000);
}

#[tokio::test]
async fn a_log_redirect_that_loops_is_an_error_and_no_log_is_none() {
    let gh = FakeGitHub::start().await;
    let looping = LogServer::start(gh.state.clone(), true).await;
    let id = gh.add_check_run(HEAD, "test", "completed", Some("failure"), "");
    gh.job_log(id, "never served");

    let err = forge(&gh).job_log_tail(id, 80).await.expect_err("a loop");
    assert!(err.to_string().contains("redirects again"), "{err}");
    assert!(
        !err.to_string().contains("s3cr3t-signature"),
        "the signed URL is not named: {err}"
    );
    assert_eq!(
        looping.seen_auth.lock().unwrap().len(),
        1,
        "one redirect followed"
    );

    let other = gh.add_check_run(HEAD, "lint", "completed", Some("failure"), "");
    assert_eq!(forge(&gh).job_log_tail(other, 80).await.expect("404"), None);
}

#[tokio::test]
async fn a_job_is_rerun_and_a_draft_is_marked_ready() {
    let gh = FakeGitHub::start().await;
    let f = forge(&gh);
    let id = gh.add_check_run(HEAD, "test", "completed", Some("failure"), "");
    f.rerun_job(id).await.expect("rerun");
    assert_eq!(gh.ci(|ci| ci.reruns.clone()), vec![id]);

    let n = gh.add_pr("nightshift/x", "", &[]);
    assert!(
        !f.mark_ready_for_review(n).await.expect("not a draft"),
        "nothing to do"
    );
    gh.edit(n, |p| p["draft"] = serde_json::json!(true));
    assert!(f.mark_ready_for_review(n).await.expect("marked"));
    assert_eq!(gh.ci(|ci| ci.marked_ready.clone()), vec![n]);
    assert_eq!(gh.prs()[0]["draft"], false);
    let graphql = gh
        .requests()
        .await
        .into_iter()
        .filter(|(m, p, _)| m == "POST" && p == "/graphql")
        .count();
    assert_eq!(graphql, 1, "one mutation");
    gh.assert_never_merged_approved_or_closed().await;
}

#[tokio::test]
async fn an_enterprise_graphql_root_is_api_graphql() {
    let gh = FakeGitHub::start().await;
    let f = forge_at(&format!("{}/api/v3", gh.uri()));
    let n = gh.add_pr("nightshift/x", "", &[]);
    gh.edit(n, |p| p["draft"] = serde_json::json!(true));

    // The fake serves GraphQL at `/graphql` only, as github.com does: an
    // Enterprise client asks `/api/graphql`, which it does not know.
    let err = f
        .mark_ready_for_review(n)
        .await
        .expect_err("not served there");
    assert!(err.to_string().contains("/graphql"), "{err}");
    let asked: Vec<String> = gh
        .requests()
        .await
        .into_iter()
        .filter(|(m, _, _)| m == "POST")
        .map(|(_, p, _)| p)
        .collect();
    assert_eq!(asked, ["/api/graphql"]);
}

// ---- Whole nights: the real binary, the watch after the push ----------

/// A writer that adds `sub` to calc.txt (the project's test accepts it).
const ADD_SUB: &str = "#!/bin/sh\necho sub >> calc.txt\necho 'added sub'\n";

/// A CI world: the fake GitHub `gh` serving the remote, `required` the
/// checks branch protection requires on `main` (none: not protected), the
/// repository's workflows `auto` (the check runs every pushed commit gets),
/// and a night of one item with the writer above and `config`. A test
/// changes what it needs after it (items, agents, more of the fake's CI).
fn ci_world<'a>(
    gh: &'a FakeGitHub,
    required: &[&str],
    auto: Vec<AutoCheck>,
    config: &str,
) -> Night<'a> {
    if !required.is_empty() {
        gh.protect("main", required);
    }
    gh.ci(|ci| ci.auto = auto);
    Night::new()
        .items(["Add sub"])
        .writer(ADD_SUB)
        .config(config)
        .github_on(gh)
}

/// The `ci` of the report's only item.
fn ci_of(report: &serde_json::Value) -> serde_json::Value {
    report["items"][0]["ci"].clone()
}

/// Whether the report's `ci` lists check `name` with `required` and `conclusion`.
fn lists(ci: &serde_json::Value, name: &str, required: bool, conclusion: &str) -> bool {
    ci["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == name && c["required"] == required && c["conclusion"] == conclusion)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_optional_red_check_leaves_the_pr_green() {
    let gh = FakeGitHub::start().await;
    let auto = vec![
        AutoCheck::new("test", Some("success")),
        AutoCheck::new("lint", Some("failure")),
    ];
    let night = ci_world(&gh, &["test"], auto, "")
        .exit(0)
        .outcomes(&["pr_opened"])
        .run()
        .await;

    let ci = ci_of(&night.report());
    assert_eq!(ci["state"], "ci_green", "{ci:#}");
    assert!(
        lists(&ci, "test", true, "success") && lists(&ci, "lint", false, "failure"),
        "{ci:#}"
    );
    assert_eq!(ci["fix_rounds"], 0);
    assert_eq!(gh.prs().len(), 1);
    let text = common::text(&night.run(&["report"]));
    assert!(
        text.contains("ci_green") && text.contains("lint (optional): failure"),
        "{text}"
    );
    // Merged in the morning: the history's merge rate by CI state.
    gh.merge(gh.prs()[0]["number"].as_u64().unwrap());
    let history = common::text(&night.run(&["report", "--history"]));
    assert!(
        history.contains("CI ci_green: 1 opened, 1 merged, merge rate 100%"),
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_green_draft_is_marked_ready_for_review() {
    let gh = FakeGitHub::start().await;
    gh.ruleset("main", &["test"]);
    let auto = vec![AutoCheck::new("test", Some("success"))];
    let night = ci_world(&gh, &[], auto, "draft = true\n")
        .exit(0)
        .run()
        .await;

    assert_eq!(ci_of(&night.report())["state"], "ci_green");
    let n = gh.prs()[0]["number"].as_u64().unwrap();
    assert_eq!(gh.ci(|ci| ci.marked_ready.clone()), vec![n]);
    assert_eq!(gh.prs()[0]["draft"], false);
    gh.assert_never_merged_approved_or_closed().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_red_required_check_without_fix_rounds_is_ci_failed_and_the_draft_stays() {
    let gh = FakeGitHub::start().await;
    let auto = vec![AutoCheck::new("test", Some("failure")).on_base("success")];
    let night = ci_world(
        &gh,
        &["test"],
        auto,
        "draft = true\n[limits]\nci_rounds = 0\n",
    )
    .exit(0)
    .outcomes(&["pr_opened"])
    .run()
    .await;

    let ci = ci_of(&night.report());
    assert_eq!(ci["state"], "ci_failed", "{ci:#}");
    assert!(
        ci["reason"].as_str().unwrap().contains("`test` (failure)"),
        "{ci:#}"
    );
    assert_eq!(gh.prs()[0]["draft"], true, "a red PR stays a draft");
    assert!(gh.ci(|ci| ci.marked_ready.is_empty()));
    let text = common::text(&night.run(&["report"]));
    assert!(
        text.contains("ci_failed") && text.contains("test (required): failure"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_conclusive_result_before_ci_wait_is_pending_and_the_run_ends() {
    let gh = FakeGitHub::start().await;
    let auto = vec![AutoCheck::new("test", None)];
    let night = ci_world(
        &gh,
        &["test", "build"],
        auto,
        "[limits]\nci_wait = \"2s\"\n",
    )
    .exit(0)
    .run()
    .await;

    let ci = ci_of(&night.report());
    assert_eq!(ci["state"], "ci_pending", "{ci:#}");
    let why = ci["reason"].as_str().unwrap();
    assert!(
        why.contains("`build` never reported") && why.contains("`test` still queued"),
        "{why}"
    );
    assert_eq!(night.db.runs()[0].status, "completed", "the run ended");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_that_sees_no_change_is_answered_304_and_still_ends_right() {
    let gh = FakeGitHub::start().await;
    let auto = vec![AutoCheck::new("test", None)];
    // The `test` run stays queued until GitHub has answered the watch "not
    // modified" five times; then it succeeds.
    let state = gh.state.clone();
    let finisher = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            {
                let mut st = state.lock().unwrap();
                if st.ci.not_modified >= 5 {
                    for r in st.ci.check_runs.iter_mut() {
                        r["status"] = serde_json::json!("completed");
                        r["conclusion"] = serde_json::json!("success");
                    }
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    let night = ci_world(&gh, &["test"], auto, "[limits]\nci_wait = \"40s\"\n")
        .exit(0)
        .run()
        .await;

    assert!(
        finisher.join().unwrap(),
        "the watch's unchanged reads were answered 304"
    );
    let ci = ci_of(&night.report());
    assert_eq!(ci["state"], "ci_green", "{ci:#}");
    assert!(lists(&ci, "test", true, "success"), "{ci:#}");
    let reads = gh
        .requests()
        .await
        .iter()
        .filter(|(m, p, _)| m == "GET" && (p.contains("/check-runs") || p.contains("/status")))
        .count();
    let not_modified = gh.ci(|ci| ci.not_modified) as usize;
    assert!(
        not_modified >= 5 && not_modified < reads,
        "{not_modified} of {reads} reads answered 304"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_check_for_the_previous_head_does_not_count() {
    let gh = FakeGitHub::start().await;
    // `test` passed on an older head; on the pushed head it never ends.
    gh.add_check_run(OLD, "test", "completed", Some("success"), "");
    gh.ci(|ci| ci.leak_other_commits = true);
    let auto = vec![AutoCheck::new("test", None)];
    let night = ci_world(&gh, &["test"], auto, "[limits]\nci_wait = \"2s\"\n")
        .exit(0)
        .run()
        .await;

    let ci = ci_of(&night.report());
    assert_eq!(
        ci["state"], "ci_pending",
        "the old head's success is not this head's: {ci:#}"
    );
    assert!(lists(&ci, "test", true, "queued"), "{ci:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repository_without_checks_is_ci_none_not_green() {
    let gh = FakeGitHub::start().await;
    let night = ci_world(&gh, &[], vec![], "").exit(0).run().await;

    let ci = ci_of(&night.report());
    assert_eq!(ci["state"], "ci_none", "{ci:#}");
    assert!(ci["checks"].as_array().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_required_checks_every_reported_check_counts_and_the_report_says_so() {
    let gh = FakeGitHub::start().await;
    let auto = vec![AutoCheck::new("lint", Some("failure"))];
    let night = ci_world(&gh, &[], auto, "[limits]\nci_rounds = 0\n")
        .exit(0)
        .run()
        .await;

    let ci = ci_of(&night.report());
    assert_eq!(
        (ci["state"].as_str(), ci["all_reported"].as_bool()),
        (Some("ci_failed"), Some(true)),
        "{ci:#}"
    );
    let text = common::text(&night.run(&["report"]));
    assert!(
        text.contains("every reported check counted as required"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_required_check_that_fails_on_the_base_too_is_not_the_items() {
    let gh = FakeGitHub::start().await;
    let auto = vec![AutoCheck::new("test", Some("failure"))];
    let night = ci_world(&gh, &["test"], auto, "")
        .exit(0)
        .outcomes(&["pr_opened"])
        .run()
        .await;

    let ci = ci_of(&night.report());
    assert_eq!(ci["state"], "ci_failed", "{ci:#}");
    let why = ci["reason"].as_str().unwrap();
    assert!(
        why.contains("fails on the base") && why.contains("no fix round"),
        "{why}"
    );
    assert_eq!(ci["fix_rounds"], 0);
    let n = gh.prs()[0]["number"].as_u64().unwrap();
    let comments = gh.comments(n);
    assert_eq!(comments.len(), 1, "one comment: {comments:#?}");
    let body = comments[0]["body"].as_str().unwrap();
    assert!(
        body.contains("fail on the base commit") && body.matches("/actions/runs/").count() == 2,
        "both links: {body}"
    );
    assert_eq!(gh.prs().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_each_items_pr_is_watched_once() {
    let gh = FakeGitHub::start().await;
    let writer = "#!/bin/sh\ncase \"$(cat \"$NIGHTSHIFT_CONTRACT_FILE\")\" in *'Add sub'*) echo sub >> calc.txt;; *) echo mul > mul.txt;; esac\n";
    let auto = vec![AutoCheck::new("test", Some("success"))];
    let night = ci_world(&gh, &["test"], auto, "")
        .items(["Add sub", "Add mul file"])
        .writer(writer)
        .drain(&["--jobs", "2"])
        .exit(0)
        .outcomes(&["pr_opened", "pr_opened"])
        .run()
        .await;

    let report = night.report();
    for item in report["items"].as_array().unwrap() {
        assert_eq!(item["ci"]["state"], "ci_green", "{item:#}");
        assert_eq!(item["ci"]["pr_number"], item["pr_number"]);
    }
    assert_eq!(gh.prs().len(), 2, "one PR per item");
    // Each head was read once per look, by the one watcher of the drain.
    let heads: std::collections::BTreeSet<String> = gh.ci(|ci| {
        ci.check_runs
            .iter()
            .map(|r| r["head_sha"].as_str().unwrap_or("").to_string())
            .collect()
    });
    assert_eq!(heads.len(), 2, "{heads:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_failing_with_no_output_and_no_log_is_run_again_once() {
    let gh = FakeGitHub::start().await;
    gh.ci(|ci| ci.rerun_conclusion = Some("success".into()));
    let auto = vec![AutoCheck::new("test", Some("failure"))];
    let night = ci_world(&gh, &["test"], auto, "").exit(0).run().await;

    assert_eq!(ci_of(&night.report())["state"], "ci_green");
    assert_eq!(gh.ci(|ci| ci.reruns.len()), 1, "one re-run");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_failing_with_a_log_is_not_run_again() {
    let gh = FakeGitHub::start().await;
    let _logs = gh.log_server().await;
    gh.ci(|ci| ci.rerun_conclusion = Some("success".into()));
    let auto = vec![
        AutoCheck::new("test", Some("failure"))
            .log("error: 2 + 2 != 5\n")
            .on_base("success"),
    ];
    let night = ci_world(&gh, &["test"], auto, "[limits]\nci_rounds = 0\n")
        .exit(0)
        .run()
        .await;

    assert_eq!(ci_of(&night.report())["state"], "ci_failed");
    assert!(
        gh.ci(|ci| ci.reruns.is_empty()),
        "a failure with a log counts at once"
    );
}

// ---- Fix rounds (docs/github.md#fix-rounds) ---------------------------

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

/// The `ci` line of `doctor`'s output in world `w`.
fn doctor_ci_line(w: &common::night::World) -> String {
    let out = w.run(&["doctor"]);
    let t = String::from_utf8_lossy(&out.stdout).to_string();
    t.lines()
        .find(|l| {
            l.get(4..)
                .is_some_and(|r| r.trim_start().starts_with("ci "))
        })
        .unwrap_or_else(|| panic!("no ci line:\n{}", common::text(&out)))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_warns_when_the_prs_ci_cannot_run_or_decide() {
    let gh = FakeGitHub::start().await;
    let mut w = ci_world(&gh, &[], vec![], "").start().await;
    w.extra_env.push(("GITHUB_ACTIONS".into(), "false".into()));
    let line = doctor_ci_line(&w);
    assert!(
        line.starts_with("warn ci ") && line.contains("main requires no check"),
        "{line}"
    );
    gh.protect("main", &["test"]);
    let line = doctor_ci_line(&w);
    assert!(
        line.starts_with("ok   ci ") && line.contains("requires 1 check(s): test"),
        "{line}"
    );
    // Inside GitHub Actions with its token (GITHUB_TOKEN): no push of it
    // starts a workflow.
    w.extra_env.pop();
    w.extra_env.push(("GITHUB_ACTIONS".into(), "true".into()));
    let line = doctor_ci_line(&w);
    assert!(
        line.starts_with("warn ci ") && line.contains("start no workflow"),
        "{line}"
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
