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
pub(crate) fn ci_world<'a>(
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
pub(crate) fn ci_of(report: &serde_json::Value) -> serde_json::Value {
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
