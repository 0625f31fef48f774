//! The morning review through the real binary (issue 5; SPEC §2, §3, §8):
//! GitHub faults end in one PR or a recorded failure, never a duplicate or a
//! merge; the PR body and the report are the evidence a person reads;
//! `sync` ticks merged items byte-exactly; `doctor` names each broken check;
//! `init` writes a backlog that plans cleanly.

mod common;

use common::github::{Fault, FakeGitHub};
use common::{Fixture, assert_ok, git, text};

/// A writer that adds the word named in the item title to calc.txt.
const WRITER: &str = r#"#!/bin/sh
set -eu
title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *sub*) echo sub >> calc.txt ;;
  *mul*) echo mul >> calc.txt ;;
  *div*) echo div >> calc.txt ;;
  *) echo "nothing to do for $title" ;;
esac
echo "wrote it"
"#;

const APPROVE: &str = "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n";

/// One open item, GitHub at `gh`, short GitHub backoffs.
fn world(gh: &FakeGitHub, backlog: &str) -> Fixture {
    let mut f = Fixture::new();
    f.github = Some(gh.uri());
    f.token = Some("ghp_morning_token_0123456789".into());
    f.extra_env.push(("NIGHTSHIFT_GITHUB_BACKOFF_MS".into(), "10".into()));
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", backlog);
    f
}

fn post_pulls(reqs: &[(String, String, String)]) -> usize {
    reqs.iter().filter(|(m, p, _)| m == "POST" && p == "/repos/owner/repo/pulls").count()
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
        ("429 with x-ratelimit-reset", vec![Fault::new("POST", pulls, 429).message("API rate limit exceeded").header("x-ratelimit-remaining", "0").header("x-ratelimit-reset", &in_secs(1))], 2),
        (
            "422 a pull request already exists (created between look-up and create)",
            vec![Fault::new("POST", pulls, 422).message("Validation Failed: A pull request already exists for owner:branch.").after_effect()],
            1,
        ),
        ("a create performed whose 502 answer was lost", vec![Fault::new("POST", pulls, 502).after_effect()], 1),
        ("a rate-limited look-up before the create", vec![Fault::new("GET", pulls, 503).header("retry-after", "1")], 1),
    ];
    for (what, faults, posts) in cases {
        let gh = FakeGitHub::start().await;
        let f = world(&gh, "- [ ] Add sub\n");
        gh.state.lock().unwrap().scripted = faults;
        let out = f.approve_and_drain(&[]);
        assert_ok(&out, what);
        let rep = f.report();
        assert_eq!(rep["items"][0]["outcome"], "pr_opened", "{what}: {rep:#}");
        let prs = gh.prs();
        assert_eq!(prs.len(), 1, "{what}: exactly one PR, got {prs:#?}");
        assert_eq!(rep["items"][0]["pr_number"], prs[0]["number"], "{what}");
        assert!(gh.state.lock().unwrap().scripted.is_empty(), "{what}: every fault was met");
        let reqs = gh.requests().await;
        assert_eq!(post_pulls(&reqs), posts, "{what}: creates sent");
        assert!(prs[0]["labels"].as_array().unwrap().iter().any(|l| l["name"] == "autopilot"), "{what}: labelled");
        gh.assert_never_merged_approved_or_closed().await;
    }
}

/// GitHub down through every attempt: `pr_failed` with the branch pushed,
/// then the next run opens that PR without redoing the item.
#[tokio::test(flavor = "multi_thread")]
async fn a_pr_that_keeps_failing_is_recorded_and_opened_on_the_next_run() {
    let gh = FakeGitHub::start().await;
    let f = world(&gh, "- [ ] Add sub\n");
    gh.state.lock().unwrap().scripted = (0..6).map(|_| Fault::new("POST", "/repos/owner/repo/pulls", 503)).collect();
    let out = f.approve_and_drain(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "pr_failed", "{rep:#}");
    assert!(rep["items"][0]["reason"].as_str().unwrap().contains("retried on the next run"), "{rep:#}");
    assert!(gh.prs().is_empty());
    assert_eq!(f.remote_branches().len(), 1, "the branch is pushed");
    assert_eq!(f.db.sql("SELECT state FROM pull_requests"), "pr_failed");

    let writer_calls = f.db.sql("SELECT count(*) FROM agent_calls WHERE role = 'writer'");
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "second run");
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "pr_opened", "{rep:#}");
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(f.db.sql("SELECT count(*) FROM agent_calls WHERE role = 'writer'"), writer_calls, "the item was not redone");
    assert_eq!(f.db.sql("SELECT state FROM pull_requests"), "open");
    gh.assert_never_merged_approved_or_closed().await;
}
