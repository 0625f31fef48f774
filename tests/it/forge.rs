//! The real octocrab client of `nightshift::forge` against the stateful fake
//! GitHub of `common::github` (docs/github.md): the happy paths against its normal
//! behaviour, every failure programmed into it as a [`Fault`]. Every test also
//! checks, from the requests the fake recorded, that nothing merged, approved
//! or closed a PR, and counts the POSTs that reached the server.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use common::github::{FakeGitHub, Fault};
use common::has_label;
use nightshift::forge::{
    BODY_LIMIT, Forge, ForgeError, PrRequest, PrState, RepoId, RetryPolicy, Scope, Secret,
    item_marker, repo_from_remote_url, resolve_repo, resolve_token_using,
};
use serde_json::{Value, json};

const BRANCH: &str = "nightshift/fix-login-1a2b3c4d";
const KEY: &str = "1a2b3c4d00000000000000000000000000000000000000000000000000000000";

fn fast_policy() -> RetryPolicy {
    RetryPolicy {
        backoff_base: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
        secondary_wait: Duration::from_millis(10),
        max_total_wait: Duration::from_secs(10),
        max_attempts: 6,
        request_timeout: Duration::from_secs(5),
    }
}

/// A PR as GitHub serves it, for the raw-socket server below (the fake
/// GitHub builds its own).
fn pull(number: u64, branch: &str, state: &str, merged: bool, body: &str) -> Value {
    json!({
        "number": number,
        "html_url": format!("https://github.com/o/r/pull/{number}"),
        "state": state,
        "merged_at": if merged { json!("2026-11-30T01:02:03Z") } else { Value::Null },
        "head": { "ref": branch, "label": format!("o:{branch}") },
        "base": { "ref": "main" },
        "title": "nightshift: fix login",
        "body": body,
    })
}

fn request() -> PrRequest {
    PrRequest {
        title: "nightshift: fix login".to_string(),
        head: BRANCH.to_string(),
        base: "main".to_string(),
        body: "## Contract\nsha: abc\n".to_string(),
        labels: vec!["autopilot".to_string()],
        item_key: KEY.to_string(),
        draft: false,
    }
}

/// The fake's next PR or issue gets number `n + 1`, as in a repository with
/// `n` earlier ones.
fn numbered_after(gh: &FakeGitHub, n: u64) {
    gh.state.lock().unwrap().next_number = n;
}

/// The label exists already (created by an earlier run or a person).
fn label_there(gh: &FakeGitHub, name: &str) {
    gh.state.lock().unwrap().labels.push(name.to_string());
}

/// The guarantee of docs/github.md, checked on the wire: no merge, no review
/// approval, no close, and no other write verb at all.
async fn assert_never_merged_approved_or_closed(gh: &FakeGitHub) {
    gh.assert_never_merged_approved_or_closed().await;
    for (m, p, _) in gh.requests().await {
        assert!(m == "GET" || m == "POST", "unexpected verb {m} {p}");
    }
}

/// Requests with `verb` at exactly `path` (query aside).
async fn count(gh: &FakeGitHub, verb: &str, path: &str) -> usize {
    gh.requests()
        .await
        .iter()
        .filter(|(m, p, _)| m == verb && p.split('?').next() == Some(path))
        .count()
}

async fn posts(gh: &FakeGitHub) -> usize {
    gh.requests()
        .await
        .iter()
        .filter(|(m, _, _)| m == "POST")
        .count()
}

/// The JSON bodies POSTed to exactly `path`, in order.
async fn post_bodies(gh: &FakeGitHub, path: &str) -> Vec<Value> {
    gh.requests()
        .await
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == path)
        .map(|(_, _, b)| serde_json::from_str(b).expect("json body"))
        .collect()
}

#[tokio::test]
async fn create_pr_creates_the_missing_label_then_the_pr_then_labels_it() {
    let (gh, forge) = fake().await;
    numbered_after(&gh, 6);

    let pr = forge.create_pr(&request()).await.expect("created");

    assert_eq!((pr.number, pr.state, pr.created), (7, PrState::Open, true));
    assert_eq!(pr.head, BRANCH);
    assert_eq!(pr.url, format!("{}/owner/repo/pull/7", gh.uri()));
    let label = &post_bodies(&gh, "/repos/owner/repo/labels").await[0];
    assert_eq!(label["name"], "autopilot");
    let created = &post_bodies(&gh, "/repos/owner/repo/pulls").await[0];
    assert_eq!(
        (created["head"].as_str(), created["base"].as_str()),
        (Some(BRANCH), Some("main"))
    );
    let body = created["body"].as_str().unwrap();
    assert!(
        body.starts_with("## Contract") && body.contains(&item_marker(KEY)),
        "{body}"
    );
    assert_eq!(
        post_bodies(&gh, "/repos/owner/repo/issues/7/labels").await[0],
        json!({ "labels": ["autopilot"] })
    );
    // The label is created before the PR, the labels added after it.
    let order: Vec<String> = gh
        .requests()
        .await
        .into_iter()
        .filter(|(m, _, _)| m == "POST")
        .map(|(_, p, _)| p)
        .collect();
    assert_eq!(
        order,
        [
            "/repos/owner/repo/labels",
            "/repos/owner/repo/pulls",
            "/repos/owner/repo/issues/7/labels"
        ]
    );
    assert_eq!(posts(&gh).await, 3);
    for r in gh.server.received_requests().await.unwrap() {
        let auth = r.headers.get("authorization").and_then(|v| v.to_str().ok());
        let expected = format!("Bearer {TOKEN}");
        assert_eq!(auth, Some(expected.as_str()), "{} {}", r.method, r.url);
    }
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn the_client_does_not_print_its_token() {
    let (gh, forge) = fake().await;
    let shown = format!("{forge:?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn enterprise_api_base_path_is_kept() {
    let gh = FakeGitHub::start().await;
    let forge = fake_forge(&format!("{}/api/v3/", gh.uri()), "repo", fast_policy());
    gh.add_pr(BRANCH, "", &[]);

    let pr = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();

    assert_eq!(pr.map(|p| p.number), Some(1));
    assert_eq!(count(&gh, "GET", "/api/v3/repos/owner/repo/pulls").await, 1);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn create_pr_treats_label_already_exists_as_fine() {
    let (gh, forge) = fake().await;
    label_there(&gh, "autopilot");
    numbered_after(&gh, 7);

    let pr = forge.create_pr(&request()).await.expect("created");

    assert_eq!((pr.number, pr.created), (8, true));
    assert_eq!(count(&gh, "POST", "/repos/owner/repo/labels").await, 1);
    assert_eq!(count(&gh, "POST", "/repos/owner/repo/pulls").await, 1);
    assert_eq!(posts(&gh).await, 3);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn ensure_label_fails_on_other_validation_errors() {
    let (gh, forge) = fake().await;

    // GitHub validates the colour: six hex digits.
    let err = forge
        .ensure_label("autopilot", "zzzzzz", "bad colour")
        .await
        .unwrap_err();

    match &err {
        ForgeError::Api {
            status,
            method,
            errors,
            ..
        } => {
            assert_eq!((*status, *method), (422, "POST"));
            assert_eq!(errors, &["Label color invalid"]);
        }
        other => panic!("expected Api error, got {other:?}"),
    }
    assert!(
        err.to_string().contains("422") && err.to_string().contains("Label color invalid"),
        "{err}"
    );
    assert_eq!(posts(&gh).await, 1, "a 4xx is not retried");
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn find_pr_by_head_sends_owner_colon_branch() {
    let (gh, forge) = fake().await;
    numbered_after(&gh, 2);
    let closed = gh.add_pr(BRANCH, "", &[]);
    gh.close(closed);
    let merged = gh.add_pr(BRANCH, "", &[]);
    gh.merge(merged);

    let pr = forge
        .find_pr(BRANCH, KEY, "autopilot")
        .await
        .unwrap()
        .expect("found");

    assert_eq!(
        (pr.number, pr.state, pr.created),
        (4, PrState::Merged, false),
        "merged beats closed"
    );
    let requests = gh.server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1, "found by head: no marker search");
    let head: Vec<String> = requests[0]
        .url
        .query_pairs()
        .filter(|(k, _)| k == "head")
        .map(|(_, v)| v.into_owned())
        .collect();
    assert_eq!(head, [format!("owner:{BRANCH}")]);
    assert_eq!(posts(&gh).await, 0);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn find_pr_by_marker_when_the_branch_was_renamed() {
    let (gh, forge) = fake().await;
    let marker = item_marker(KEY);
    let quoting = gh.add_issue("an issue quoting the marker", "autopilot", "open");
    gh.edit(quoting, |v| v["body"] = json!(marker));
    let other = gh.add_pr(
        "nightshift/another-item",
        &item_marker(&"f".repeat(64)),
        &["autopilot"],
    );
    let ours = gh.add_pr(
        "renamed-by-hand",
        &format!("card\n\n{marker}\n"),
        &["autopilot"],
    );

    let pr = forge
        .find_pr(BRANCH, KEY, "autopilot")
        .await
        .unwrap()
        .expect("found by marker");

    assert_eq!(
        (pr.number, pr.state, pr.head.as_str()),
        (ours, PrState::Open, "renamed-by-hand")
    );
    assert_eq!(
        count(&gh, "GET", &format!("/repos/owner/repo/pulls/{quoting}")).await,
        0,
        "plain issues are not PRs"
    );
    assert_eq!(
        count(&gh, "GET", &format!("/repos/owner/repo/pulls/{other}")).await,
        0,
        "another item's marker"
    );
    assert_eq!(posts(&gh).await, 0);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn find_pr_returns_none_when_nothing_matches() {
    let (gh, forge) = fake().await;

    assert_eq!(forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap(), None);
    assert_eq!(posts(&gh).await, 0);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn get_is_retried_through_500_502_503() {
    let (gh, forge) = fake().await;
    numbered_after(&gh, 1);
    gh.add_pr(BRANCH, "", &[]);
    script(
        &gh,
        [500, 502, 503]
            .into_iter()
            .map(|status| {
                Fault::new("GET", "/repos/owner/repo/pulls", status)
                    .raw("text/plain", "upstream trouble")
            })
            .collect(),
    );

    let pr = forge
        .find_pr(BRANCH, KEY, "autopilot")
        .await
        .unwrap()
        .expect("found after retries");

    assert_eq!((pr.number, pr.state), (2, PrState::Open));
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/pulls").await, 4);
    assert_eq!(posts(&gh).await, 0);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn persistent_5xx_gives_up_after_max_attempts() {
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 503)
                .message("Service Unavailable")
                .always(),
        ],
    );

    let err = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();

    assert!(
        matches!(err, ForgeError::Exhausted { attempts: 6, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("503 Service Unavailable"), "{err}");
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/pulls").await, 6);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn secondary_rate_limit_waits_retry_after_seconds() {
    let (gh, forge) = fake().await;
    numbered_after(&gh, 1);
    gh.add_pr(BRANCH, "", &[]);
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 403)
                .header("retry-after", "1")
                .message("You have exceeded a secondary rate limit. Please wait a few minutes before you try again."),
        ],
    );

    let started = Instant::now();
    let pr = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();

    assert_eq!(pr.map(|p| p.number), Some(2));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retry-after honoured: {:?}",
        started.elapsed()
    );
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/pulls").await, 2);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn plain_403_is_not_retried() {
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 403)
                .header("x-github-request-id", "ABCD:1234")
                .message("Resource not accessible by personal access token"),
        ],
    );

    let err = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();

    assert!(
        matches!(err, ForgeError::Api { status: 403, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("Resource not accessible") && text.contains("ABCD:1234"),
        "{text}"
    );
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/pulls").await, 1);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn primary_rate_limit_429_waits_until_x_ratelimit_reset() {
    let (gh, forge) = fake().await;
    let reset = Utc::now().timestamp() + 1;
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 429)
                .header("x-ratelimit-remaining", "0")
                .header("x-ratelimit-reset", &reset.to_string())
                .message("API rate limit exceeded"),
        ],
    );

    let found = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();

    assert_eq!(found, None);
    assert!(
        Utc::now().timestamp() >= reset,
        "retried before the reset instant"
    );
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/pulls").await, 2);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn rate_limit_resetting_after_the_deadline_stops_at_once() {
    let gh = FakeGitHub::start().await;
    let deadline = Utc::now() + chrono::Duration::seconds(60);
    let forge = Forge::new(
        &gh.uri(),
        Secret::new(TOKEN),
        RepoId::new("owner", "repo"),
        Some(deadline),
    )
    .unwrap()
    .with_retry_policy(fast_policy());
    let reset = Utc::now().timestamp() + 3600;
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 403)
                .header("x-ratelimit-remaining", "0")
                .header("x-ratelimit-reset", &reset.to_string())
                .message("API rate limit exceeded for user ID 1.")
                .always(),
        ],
    );

    let started = Instant::now();
    let err = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();

    assert!(
        started.elapsed() < Duration::from_secs(2),
        "did not sleep towards the reset"
    );
    match &err {
        ForgeError::WaitTooLong {
            wait_secs, limit, ..
        } => {
            assert!(*wait_secs > 3500, "{wait_secs}");
            assert!(limit.contains("deadline"), "{limit}");
        }
        other => panic!("expected WaitTooLong, got {other:?}"),
    }
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/pulls").await, 1);

    // Without a deadline, the total wait budget bounds the wait the same way.
    let no_deadline = fake_forge(&gh.uri(), "repo", fast_policy());
    let err = no_deadline
        .find_pr(BRANCH, KEY, "autopilot")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForgeError::WaitTooLong { limit, .. } if limit.contains("retry budget of 10 s")),
        "{err:?}"
    );
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/pulls").await, 2);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn duplicate_pr_refusal_returns_the_existing_pr() {
    let (gh, forge) = fake().await;
    label_there(&gh, "autopilot");
    // A concurrent run opened the PR (not yet labelled) right after this
    // run's first look-up, which still saw nothing.
    numbered_after(&gh, 11);
    gh.add_pr(BRANCH, "", &[]);
    script(
        &gh,
        vec![Fault::new("GET", "/repos/owner/repo/pulls", 200).raw("application/json", "[]")],
    );

    let pr = forge
        .create_pr(&request())
        .await
        .expect("existing PR returned");

    assert_eq!(
        (pr.number, pr.state, pr.created),
        (12, PrState::Open, false)
    );
    assert_eq!(
        count(&gh, "POST", "/repos/owner/repo/pulls").await,
        1,
        "the refused create is not re-sent"
    );
    assert_eq!(gh.prs().len(), 1, "GitHub refused the duplicate");
    assert_eq!(
        count(&gh, "POST", "/repos/owner/repo/issues/12/labels").await,
        1
    );
    assert_eq!(posts(&gh).await, 3);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn existing_open_pr_is_reused_without_a_create() {
    let (gh, forge) = fake().await;
    numbered_after(&gh, 20);
    gh.add_pr(BRANCH, "", &[]);

    let pr = forge.create_pr(&request()).await.unwrap();

    assert_eq!((pr.number, pr.created), (21, false));
    assert_eq!(count(&gh, "POST", "/repos/owner/repo/pulls").await, 0);
    assert_eq!(posts(&gh).await, 1, "only the idempotent label add");
    assert_never_merged_approved_or_closed(&gh).await;
}

/// GitHub performs the create but the answer is lost (`lose` programs how:
/// a 502 from a proxy in front of GitHub, or an answer later than the
/// client's timeout); the look-up sees the PR once it was created.
async fn create_that_loses_its_answer(
    lose: impl FnOnce(&FakeGitHub),
    policy: RetryPolicy,
) -> FakeGitHub {
    let (gh, _) = fake().await;
    let forge = fake_forge(&gh.uri(), "repo", policy);
    label_there(&gh, "autopilot");
    numbered_after(&gh, 30);
    lose(&gh);

    let pr = forge
        .create_pr(&request())
        .await
        .expect("the performed create is found");

    assert_eq!((pr.number, pr.state, pr.created), (31, PrState::Open, true));
    assert_eq!(
        count(&gh, "POST", "/repos/owner/repo/pulls").await,
        1,
        "exactly one create reached the server"
    );
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(
        count(&gh, "POST", "/repos/owner/repo/issues/31/labels").await,
        1
    );
    assert_never_merged_approved_or_closed(&gh).await;
    gh
}

#[tokio::test]
async fn create_answered_502_after_being_performed_is_found_not_resent() {
    let gh = create_that_loses_its_answer(
        |gh| {
            script(
                gh,
                vec![
                    Fault::new("POST", "/repos/owner/repo/pulls", 502)
                        .raw("text/plain", "")
                        .after_effect(),
                ],
            )
        },
        fast_policy(),
    )
    .await;
    assert_eq!(posts(&gh).await, 3);
}

#[tokio::test]
async fn create_that_timed_out_after_being_performed_is_found_not_resent() {
    let policy = RetryPolicy {
        request_timeout: Duration::from_millis(300),
        ..fast_policy()
    };
    let late = |gh: &FakeGitHub| {
        gh.state.lock().unwrap().create_pr_delays = vec![Duration::from_secs(3)];
    };
    let gh = create_that_loses_its_answer(late, policy).await;
    assert_eq!(posts(&gh).await, 3);
}

#[tokio::test]
async fn create_that_failed_without_being_performed_is_resent_once() {
    let (gh, forge) = fake().await;
    label_there(&gh, "autopilot");
    numbered_after(&gh, 39);
    script(
        &gh,
        vec![Fault::new("POST", "/repos/owner/repo/pulls", 502).raw("text/plain", "")],
    );

    let pr = forge.create_pr(&request()).await.unwrap();

    assert_eq!((pr.number, pr.created), (40, true));
    assert_eq!(
        count(&gh, "POST", "/repos/owner/repo/pulls").await,
        2,
        "re-sent only after the look-up found nothing"
    );
    // Initial look-up by head, then one after the 502.
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/pulls").await, 2);
    assert_eq!(posts(&gh).await, 4);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn create_pr_refused_with_other_4xx_fails_at_once() {
    let (gh, forge) = fake().await;
    label_there(&gh, "autopilot");
    // What GitHub answers when the base branch does not exist.
    script(
        &gh,
        vec![
            Fault::new("POST", "/repos/owner/repo/pulls", 422).json(json!({
                "message": "Validation Failed",
                "errors": [{ "resource": "PullRequest", "field": "base", "code": "invalid" }],
            })),
        ],
    );

    let err = forge.create_pr(&request()).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::Api { status: 422, path, .. } if path == "/repos/owner/repo/pulls"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("PullRequest base invalid"),
        "{err}"
    );
    assert_eq!(count(&gh, "POST", "/repos/owner/repo/pulls").await, 1);
    assert_eq!(posts(&gh).await, 2);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn pr_body_over_the_limit_is_cut_not_rejected() {
    let (gh, forge) = fake().await;
    label_there(&gh, "autopilot");
    let req = PrRequest {
        body: "x".repeat(BODY_LIMIT * 2),
        ..request()
    };

    // The fake refuses bodies over GitHub's limit, as GitHub does.
    forge.create_pr(&req).await.unwrap();

    let sent = post_bodies(&gh, "/repos/owner/repo/pulls").await[0]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sent.chars().count(), BODY_LIMIT);
    assert!(sent.ends_with(&format!("{}\n", item_marker(KEY))));
    assert_eq!(gh.prs().len(), 1);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn issues_are_deduplicated_by_exact_title() {
    let (gh, forge) = fake().await;
    let pr = gh.add_pr("a-branch", "a PR with the same title", &["autopilot-found"]);
    gh.edit(pr, |v| v["title"] = json!("Flaky test in auth"));
    let seen = gh.add_issue("Flaky test in auth", "autopilot-found", "open");
    gh.edit(seen, |v| v["body"] = json!("seen before"));
    gh.add_issue("Flaky test in auth module", "autopilot-found", "open");

    let known = forge
        .find_or_create_issue("Flaky test in auth", "again", "autopilot-found")
        .await
        .unwrap();
    assert_eq!((known.number, known.created), (seen, false));
    assert_eq!(posts(&gh).await, 0, "a known title creates nothing");

    let new = forge
        .find_or_create_issue("Slow query in report", "details", "autopilot-found")
        .await
        .unwrap();
    let filed = gh.issues().last().unwrap()["number"].as_u64().unwrap();
    assert_eq!(
        (new.number, new.created, new.title.as_str()),
        (filed, true, "Slow query in report")
    );
    let sent = &post_bodies(&gh, "/repos/owner/repo/issues").await[0];
    assert_eq!(sent["labels"], json!(["autopilot-found"]));
    assert_eq!(sent["title"], "Slow query in report");
    assert_eq!(count(&gh, "POST", "/repos/owner/repo/issues").await, 1);
    assert_eq!(posts(&gh).await, 2, "label + issue");
    assert_never_merged_approved_or_closed(&gh).await;
}

#[tokio::test]
async fn issue_dedup_reads_every_page() {
    let (gh, forge) = fake().await;
    // Newest first: the oldest finding is on the second page of 100.
    let old = gh.add_issue("Old finding", "autopilot-found", "open");
    for n in 1..=100 {
        gh.add_issue(&format!("finding {n}"), "autopilot-found", "open");
    }

    let found = forge
        .find_or_create_issue("Old finding", "", "autopilot-found")
        .await
        .unwrap();

    assert_eq!((found.number, found.created), (old, false));
    // Page 2 through GitHub's `Link: rel="next"` URL, by repository id.
    assert_eq!(count(&gh, "GET", "/repos/owner/repo/issues").await, 1);
    assert_eq!(count(&gh, "GET", "/repositories/1/issues").await, 1);
    assert_eq!(posts(&gh).await, 0);
    assert_never_merged_approved_or_closed(&gh).await;
}

#[test]
fn remote_urls_are_parsed_into_owner_and_repo() {
    let r = |o: &str, n: &str| Some(RepoId::new(o, n));
    let table: &[(&str, Option<RepoId>)] = &[
        ("https://github.com/o/r.git", r("o", "r")),
        ("https://github.com/o/r", r("o", "r")),
        ("https://github.com/o/r/", r("o", "r")),
        ("https://github.com/o/r.git/", r("o", "r")),
        ("https://user@github.com/o/r.git", r("o", "r")),
        (
            "https://x-access-token:ghp_abc@github.com/o/r.git",
            r("o", "r"),
        ),
        ("http://github.com/o/r", r("o", "r")),
        ("git@github.com:o/r.git", r("o", "r")),
        ("git@github.com:o/r", r("o", "r")),
        ("github.com:o/r.git", r("o", "r")),
        ("git@github.com:/o/r.git", r("o", "r")),
        ("ssh://git@github.com/o/r.git", r("o", "r")),
        ("ssh://git@github.com:22/o/r.git", r("o", "r")),
        (
            "ssh://git@ghe.example.com:2222/team/service.git",
            r("team", "service"),
        ),
        ("git://github.com/o/r.git", r("o", "r")),
        (
            "https://ghe.corp.example/Platform-Team/my.repo.git",
            r("Platform-Team", "my.repo"),
        ),
        (
            "git@ghe.corp.example:Platform-Team/my_repo.git",
            r("Platform-Team", "my_repo"),
        ),
        ("  https://github.com/o/r.git\n", r("o", "r")),
        ("/home/me/src/r", None),
        ("/home/me/src/o/r.git", None),
        ("../r", None),
        ("./o/r", None),
        ("file:///home/me/src/o/r.git", None),
        ("C:\\src\\r", None),
        ("C:/src/o/r", None),
        ("https://github.com/o", None),
        ("https://gitlab.com/group/sub/r.git", None),
        ("", None),
    ];
    for (url, want) in table {
        assert_eq!(&repo_from_remote_url(url), want, "{url:?}");
    }
}

/// GH_REPO, config github_repo, remote URL, and the repo or an error fragment.
type PrecedenceCase<'a> = (
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    Result<RepoId, &'a str>,
);

#[test]
fn repo_precedence_is_gh_repo_then_config_then_remote() {
    let o_r = RepoId::new("o", "r");
    let table: &[PrecedenceCase] = &[
        (
            Some("env/one"),
            Some("cfg/two"),
            Some("git@github.com:rem/three.git"),
            Ok(RepoId::new("env", "one")),
        ),
        (
            None,
            Some("cfg/two"),
            Some("git@github.com:rem/three.git"),
            Ok(RepoId::new("cfg", "two")),
        ),
        (None, None, Some("git@github.com:o/r.git"), Ok(o_r.clone())),
        (
            Some(""),
            Some("  "),
            Some("https://github.com/o/r"),
            Ok(o_r.clone()),
        ),
        (Some("ghe.example.com/o/r"), None, None, Ok(o_r.clone())),
        (
            Some("https://github.com/o/r.git"),
            None,
            None,
            Ok(o_r.clone()),
        ),
        (Some("not-a-repo"), Some("cfg/two"), None, Err("GH_REPO")),
        (
            None,
            Some("a/b/c/d"),
            Some("https://github.com/o/r"),
            Err("config github_repo"),
        ),
        (
            None,
            None,
            Some("/home/me/src/r"),
            Err("not a GitHub repository URL"),
        ),
        (None, None, None, Err("no GH_REPO")),
    ];
    for (env, config, remote, want) in table {
        let got = resolve_repo(*env, *config, *remote);
        match (want, &got) {
            (Ok(repo), Ok(g)) => assert_eq!(g, repo, "{env:?} {config:?} {remote:?}"),
            (Err(fragment), Err(e)) => assert!(
                e.to_string().contains(fragment),
                "{e} should mention {fragment}"
            ),
            _ => panic!("{env:?} {config:?} {remote:?}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn remote_url_credentials_never_reach_error_messages() {
    let err = resolve_repo(None, None, Some("https://me:ghp_secret@gitlab.com/a/b/c")).unwrap_err();
    assert!(!err.to_string().contains("ghp_secret"), "{err}");
}

#[test]
fn token_comes_from_github_token_then_gh_token_then_gh() {
    let dir = tempfile::tempdir().unwrap();
    let gh = dir.path().join("gh");
    let script = "#!/bin/sh\n[ \"$1 $2\" = \"auth token\" ] || exit 9\necho gho_from_gh\n";
    std::fs::write(&gh, script).unwrap();
    make_executable(&gh);
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, Secret)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Secret::new(*v)))
            .collect()
    };
    let t = Duration::from_secs(5);
    let pick = |vars: &[(String, Secret)], gh: &std::path::Path| {
        resolve_token_using(vars, gh, t).map(|(s, src)| (s.expose().to_string(), src))
    };

    let both = env(&[("GH_TOKEN", "gh_tok"), ("GITHUB_TOKEN", "github_tok")]);
    assert_eq!(
        pick(&both, &gh),
        Some(("github_tok".into(), "GITHUB_TOKEN"))
    );
    let gh_only = env(&[("GITHUB_TOKEN", " "), ("GH_TOKEN", "gh_tok\n")]);
    assert_eq!(pick(&gh_only, &gh), Some(("gh_tok".into(), "GH_TOKEN")));
    assert_eq!(
        pick(&[], &gh),
        Some(("gho_from_gh".into(), "gh auth token"))
    );
    assert_eq!(pick(&[], &dir.path().join("no-such-gh")), None, "absent gh");

    let failing = dir.path().join("gh-logged-out");
    std::fs::write(&failing, "#!/bin/sh\necho 'not logged in' >&2\nexit 1\n").unwrap();
    make_executable(&failing);
    assert_eq!(pick(&[], &failing), None);
}

#[test]
fn a_hanging_gh_is_killed_after_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let gh = dir.path().join("gh");
    std::fs::write(&gh, "#!/bin/sh\nsleep 30\necho too_late\n").unwrap();
    make_executable(&gh);

    let started = Instant::now();
    let got = resolve_token_using(&[], &gh, Duration::from_millis(300));

    assert!(got.is_none());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn secret_prints_stars() {
    let (token, _) = resolve_token_using(
        &[("GITHUB_TOKEN".to_string(), Secret::new("ghp_real"))],
        std::path::Path::new("/nonexistent"),
        Duration::from_secs(1),
    )
    .unwrap();
    assert_eq!(format!("{token:?}"), "****");
}

/// docs/github.md: "there is no call that merges, approves or closes a pull request, by construction."
/// The wire checks above cover what the tests exercise; this covers the
/// source itself (comments excluded).
#[test]
fn forge_source_has_no_merge_approve_or_close_call() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/forge");
    let mut source = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        source.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    assert!(source.contains("async fn create_pr"), "read src/forge/");
    let code: String = source
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for forbidden in [
        "/merge",
        // The review event that approves; reading a review's state
        // `"APPROVED"` is fine.
        "\"APPROVE\"",
        "event",
        "_put(",
        "_delete(",
        ".pulls(",
        "Method::",
        "\"closed\"",
    ] {
        assert!(
            !code.contains(forbidden),
            "src/forge/ contains {forbidden:?}"
        );
    }
    // Reviews are only ever listed (a GET), never submitted.
    for line in code.lines().filter(|l| l.contains("/reviews")) {
        assert!(
            line.contains("self.list("),
            "a reviews call that is no list: {line}"
        );
    }
    // One PATCH, sent only by `update_pr_body` with a body-only payload.
    assert_eq!(code.matches("_patch(").count(), 1, "one PATCH call site");
    let patches: Vec<&str> = code
        .lines()
        .filter(|l| l.contains("self.call(Verb::Patch"))
        .collect();
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert!(
        code.contains("let payload = json!({ \"body\": fit_body(&self.redact(body), item_key) });\n            let reply = self.call(Verb::Patch"),
        "the PATCH payload is the body alone"
    );
}

fn make_executable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// ---------------------------------------------------------------------------
// The whole kind of GitHub failure, in the shapes the real server (and what
// stands in front of it) sends: bodies and headers as seen in octokit, gh,
// PyGithub and create-pull-request issue threads and GitHub's REST docs.
// These run against the stateful fake GitHub of `tests/common/github.rs`
// (repository `owner/repo`).
// ---------------------------------------------------------------------------

/// A token that must never show up in an error.
const TOKEN: &str = "ghp_fakeTOKEN0123456789abcdefABCDEF";

async fn fake() -> (FakeGitHub, Forge) {
    let gh = FakeGitHub::start().await;
    let forge = fake_forge(&gh.uri(), "repo", fast_policy());
    (gh, forge)
}

fn fake_forge(base: &str, repo: &str, policy: RetryPolicy) -> Forge {
    Forge::new(base, Secret::new(TOKEN), RepoId::new("owner", repo), None)
        .expect("client builds")
        .with_retry_policy(policy)
}

async fn gh_count(gh: &FakeGitHub, verb: &str, path_prefix: &str) -> usize {
    gh.requests()
        .await
        .iter()
        .filter(|(m, p, _)| m == verb && p.starts_with(path_prefix))
        .count()
}

fn script(gh: &FakeGitHub, faults: Vec<Fault>) {
    gh.state.lock().unwrap().scripted = faults;
}

fn no_token(text: &str) {
    assert!(!text.contains(TOKEN), "the token leaked: {text}");
}

/// 401 Bad credentials (which GitHub sends with `x-ratelimit-remaining: 0`)
/// and 403 "Maximum number of login attempts exceeded" are not rate limits:
/// no wait, no retry, and GitHub is not asked again this run (GitHub locks
/// an account out after repeated bad credentials, valid ones included).
#[tokio::test]
async fn bad_credentials_stop_github_for_the_rest_of_the_run() {
    let reset = (Utc::now().timestamp() + 3600).to_string();
    let cases = [
        (
            401,
            json!({ "message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401" }),
        ),
        (
            403,
            json!({ "message": "Maximum number of login attempts exceeded. Please try again later.", "documentation_url": "https://docs.github.com/rest" }),
        ),
    ];
    for (status, body) in cases {
        let (gh, forge) = fake().await;
        script(
            &gh,
            vec![
                Fault::new("GET", "/repos/owner/repo/pulls", status)
                    .json(body.clone())
                    .header("x-ratelimit-limit", "0")
                    .header("x-ratelimit-remaining", "0")
                    .header("x-ratelimit-reset", &reset),
            ],
        );
        let started = Instant::now();
        let err = forge.create_pr(&request()).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{status}: no wait for a reset"
        );
        assert!(
            matches!(err, ForgeError::Api { status: s, .. } if s == status),
            "{err:?}"
        );
        assert_eq!(err.scope(), Scope::Run, "{status}: {err}");
        let text = err.to_string();
        assert!(text.contains(body["message"].as_str().unwrap()), "{text}");
        assert!(
            text.contains("GITHUB_TOKEN") && text.contains("gh auth login"),
            "names the fix: {text}"
        );
        no_token(&text);
        let asked = gh.requests().await.len();
        assert_eq!(asked, 1, "{status}: not retried");

        let again = forge.create_pr(&request()).await.unwrap_err();
        assert!(matches!(again, ForgeError::Stopped { .. }), "{again:?}");
        assert!(
            again
                .to_string()
                .contains(body["message"].as_str().unwrap()),
            "{again}"
        );
        assert_eq!(again.scope(), Scope::Run);
        let issue = forge
            .find_or_create_issue("a finding", "", "autopilot-found")
            .await
            .unwrap_err();
        assert!(matches!(issue, ForgeError::Stopped { .. }), "{issue:?}");
        assert_eq!(
            gh.requests().await.len(),
            asked,
            "{status}: GitHub not asked again"
        );
        assert!(gh.prs().is_empty());
    }
}

/// 403 with `x-github-sso: required; url=…`: the token is not authorised for
/// the organisation's SAML single sign-on. The message carries GitHub's
/// authorisation link; nothing is retried; GitHub is left alone for the run.
#[tokio::test]
async fn saml_sso_enforcement_names_the_authorisation_link() {
    let (gh, forge) = fake().await;
    let url = "https://github.com/orgs/acme/sso?authorization_request=A5Z3bcdEFG";
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 403)
                .json(json!({
                    "message": "Resource protected by organization SAML enforcement. You must grant your Personal Access token access to this organization.",
                    "documentation_url": "https://docs.github.com/articles/authenticating-to-a-github-organization-with-saml-single-sign-on/",
                }))
                .header("x-github-sso", &format!("required; url={url}")),
        ],
    );

    let err = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();

    let text = err.to_string();
    assert!(
        matches!(err, ForgeError::Api { status: 403, .. }),
        "{err:?}"
    );
    assert!(text.contains(url) && text.contains("SSO"), "{text}");
    assert_eq!(err.scope(), Scope::Run);
    assert_eq!(gh.requests().await.len(), 1);
    let again = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();
    assert!(matches!(again, ForgeError::Stopped { .. }), "{again:?}");
    assert_eq!(gh.requests().await.len(), 1);

    // Met first when creating the label: the SSO fix, not a label one.
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![
            Fault::new("POST", "/repos/owner/repo/labels", 403)
                .json(json!({ "message": "Resource protected by organization SAML enforcement. You must grant your Personal Access token access to this organization." }))
                .header("x-github-sso", &format!("required; url={url}")),
        ],
    );
    let err = forge.create_pr(&request()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(url) && !text.contains("may not create labels"),
        "{text}"
    );
    assert_eq!(err.scope(), Scope::Run);
    assert!(gh.prs().is_empty());
}

/// A token that may read but not write: 403 "Resource not accessible by
/// personal access token" / "… by integration" (with the permission GitHub
/// wants in `x-accepted-github-permissions`), and Actions' own refusal.
/// One create, no retry, and the message says which permission or setting.
#[tokio::test]
async fn a_create_refused_for_lack_of_permission_names_the_permission() {
    let cases = [
        (
            "Resource not accessible by personal access token",
            Some("pull_requests=write"),
            "pull_requests=write",
        ),
        (
            "Resource not accessible by integration",
            Some("pull_requests=write"),
            "pull_requests=write",
        ),
        (
            "Resource not accessible by integration",
            None,
            "Pull requests: write",
        ),
        (
            "GitHub Actions is not permitted to create or approve pull requests.",
            None,
            "Allow GitHub Actions to create and approve pull requests",
        ),
    ];
    for (message, accepted, fix) in cases {
        let (gh, forge) = fake().await;
        let mut fault = Fault::new("POST", "/repos/owner/repo/pulls", 403).json(json!({
            "message": message,
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
            "status": "403",
        }));
        if let Some(a) = accepted {
            fault = fault.header("x-accepted-github-permissions", a);
        }
        script(&gh, vec![fault]);

        let err = forge.create_pr(&request()).await.unwrap_err();

        let text = err.to_string();
        assert!(
            matches!(err, ForgeError::Api { status: 403, .. }),
            "{message}: {err:?}"
        );
        assert!(
            text.contains(message) && text.contains(fix),
            "{message}: {text}"
        );
        assert_eq!(
            gh_count(&gh, "POST", "/repos/owner/repo/pulls").await,
            1,
            "{message}"
        );
        assert!(gh.prs().is_empty());
        no_token(&text);
    }
}

/// 404 for the repository itself: it does not exist, or the token cannot
/// see it (GitHub answers 404, not 403, to hide private repositories).
#[tokio::test]
async fn a_repository_github_does_not_show_stops_github_with_the_fix() {
    let gh = FakeGitHub::start().await;
    let forge = fake_forge(&gh.uri(), "gone", fast_policy());

    let err = forge.create_pr(&request()).await.unwrap_err();

    let text = err.to_string();
    assert!(
        matches!(err, ForgeError::Api { status: 404, .. }),
        "{err:?}"
    );
    assert!(
        text.contains("owner/gone") && text.contains("GH_REPO") && text.contains("access"),
        "{text}"
    );
    assert_eq!(err.scope(), Scope::Run);
    let asked = gh.requests().await.len();
    assert_eq!(asked, 1);
    assert!(matches!(
        forge.create_pr(&request()).await.unwrap_err(),
        ForgeError::Stopped { .. }
    ));
    assert_eq!(gh.requests().await.len(), asked);
}

/// A primary rate limit: 403 with `x-ratelimit-remaining: 0` and no
/// `retry-after`. The reset is GitHub's epoch second: the wait is measured
/// against GitHub's clock (its `Date` header), not a local clock that runs
/// ahead — else the retry comes at once and is refused again.
#[tokio::test]
async fn primary_rate_limit_waits_for_the_reset_by_githubs_clock() {
    let (gh, forge) = fake().await;
    // GitHub's clock is 100 s behind ours; the reset is 2 s after its now.
    let github_now = Utc::now() - chrono::Duration::seconds(100);
    let reset = (github_now.timestamp() + 2).to_string();
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 403)
                .json(json!({
                    "message": "API rate limit exceeded for user ID 1. If you reach out to GitHub Support for help, please include the request ID 8E1A:2B3C:4D5E:6F70.",
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                }))
                .header("date", &github_now.to_rfc2822().replace("+0000", "GMT"))
                .header("x-ratelimit-limit", "5000")
                .header("x-ratelimit-remaining", "0")
                .header("x-ratelimit-used", "5000")
                .header("x-ratelimit-resource", "core")
                .header("x-ratelimit-reset", &reset),
        ],
    );

    let started = Instant::now();
    let found = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();

    assert_eq!(found, None);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited for the reset: {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(gh_count(&gh, "GET", "/repos/owner/repo/pulls").await, 2);
}

/// `retry-after` may be an HTTP date (RFC 9110), as proxies send it.
#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured() {
    let (gh, forge) = fake().await;
    let now = Utc::now();
    let at = (now + chrono::Duration::seconds(2))
        .to_rfc2822()
        .replace("+0000", "GMT");
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 503)
                .raw("text/html", "<html><body>maintenance</body></html>")
                .header("date", &now.to_rfc2822().replace("+0000", "GMT"))
                .header("retry-after", &at),
        ],
    );

    let started = Instant::now();
    forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();

    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(gh_count(&gh, "GET", "/repos/owner/repo/pulls").await, 2);
}

/// Secondary limits that name no time (403 or 429, "secondary rate limit" or
/// the older "abuse detection mechanism", no `retry-after`): GitHub says wait
/// at least a minute, then exponentially longer while it goes on.
#[tokio::test]
async fn secondary_limits_without_retry_after_wait_the_minute_then_longer() {
    let gh = FakeGitHub::start().await;
    let policy = RetryPolicy {
        secondary_wait: Duration::from_millis(200),
        ..fast_policy()
    };
    let forge = fake_forge(&gh.uri(), "repo", policy);
    let secondary = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID 1234:5678.";
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 429).raw("application/json", ""),
            Fault::new("GET", "/repos/owner/repo/pulls", 403).json(json!({ "message": secondary, "documentation_url": "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits" })),
            Fault::new("GET", "/repos/owner/repo/pulls", 403).json(json!({ "message": "You have triggered an abuse detection mechanism. Please wait a few minutes before you try again." })),
        ],
    );

    let started = Instant::now();
    assert_eq!(forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap(), None);

    // 200 ms, then 400, then 800.
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(gh_count(&gh, "GET", "/repos/owner/repo/pulls").await, 4);
}

/// The 422s a PR create meets besides "already exists": nothing to merge,
/// a head GitHub does not see, a base that does not exist. Each fails the
/// item with the fix, and GitHub stays usable for the next item. Only a head
/// GitHub does not see is asked again (4 creates in all: right after a push
/// GitHub may lag); the others fail at once (one create).
#[tokio::test]
async fn validation_refusals_of_a_create_fail_the_item_with_the_fix() {
    let doc = "https://docs.github.com/rest/pulls/pulls#create-a-pull-request";
    let cases = [
        (
            json!({ "message": "Validation Failed", "errors": [{ "resource": "PullRequest", "code": "custom", "message": format!("No commits between main and {BRANCH}") }], "documentation_url": doc, "status": "422" }),
            "has no commits that main lacks",
        ),
        (
            json!({ "message": "Validation Failed", "errors": [{ "resource": "PullRequest", "field": "head", "code": "invalid" }], "documentation_url": doc }),
            "GitHub does not see branch",
        ),
        (
            json!({ "message": "Validation Failed", "errors": [
                { "resource": "PullRequest", "code": "custom", "message": "head sha can't be blank" },
                { "resource": "PullRequest", "code": "custom", "message": "base sha can't be blank" },
                { "resource": "PullRequest", "code": "custom", "message": "Head ref must be a branch" }], "documentation_url": doc }),
            "GitHub does not see branch",
        ),
        (
            json!({ "message": "Validation Failed", "errors": [{ "resource": "PullRequest", "field": "base", "code": "invalid" }], "documentation_url": doc }),
            "base branch \"main\"",
        ),
    ];
    for (body, fix) in cases {
        let (gh, forge) = fake().await;
        let sends = if fix.contains("does not see") { 4 } else { 1 };
        script(
            &gh,
            (0..sends)
                .map(|_| Fault::new("POST", "/repos/owner/repo/pulls", 422).json(body.clone()))
                .collect(),
        );

        let err = forge.create_pr(&request()).await.unwrap_err();

        let text = err.to_string();
        assert!(
            matches!(err, ForgeError::Api { status: 422, .. }),
            "{body}: {err:?}"
        );
        assert!(text.contains(fix), "{body}: {text}");
        assert_eq!(err.scope(), Scope::Item, "{text}");
        assert_eq!(
            gh_count(&gh, "POST", "/repos/owner/repo/pulls").await,
            sends,
            "{body}"
        );
        assert!(gh.prs().is_empty());
        // The next item's create goes ahead.
        let next = forge
            .create_pr(&request())
            .await
            .expect("GitHub still usable");
        assert!(next.created);
    }
}

/// Label refusals: a 422 other than `already_exists` names the config key;
/// a token that may not create labels is fine when the label exists; a PR
/// that was created but could not be labelled is returned, with the reason.
#[tokio::test]
async fn label_refusals_fail_only_what_they_must() {
    // A name GitHub rejects.
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![
            Fault::new("POST", "/repos/owner/repo/labels", 422).json(json!({
                "message": "Validation Failed",
                "errors": [{ "resource": "Label", "code": "invalid", "field": "name" }],
                "documentation_url": "https://docs.github.com/rest/issues/labels#create-a-label",
            })),
        ],
    );
    let err = forge.create_pr(&request()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, ForgeError::Api { status: 422, .. }),
        "{err:?}"
    );
    assert!(
        text.contains("Label name invalid") && text.contains("`label`"),
        "{text}"
    );
    assert_eq!(
        gh_count(&gh, "POST", "/repos/owner/repo/pulls").await,
        0,
        "no unlabelled PR"
    );

    // No right to create labels, but the label is there.
    let (gh, forge) = fake().await;
    gh.state.lock().unwrap().labels.push("autopilot".into());
    script(
        &gh,
        vec![
            Fault::new("POST", "/repos/owner/repo/labels", 403).json(json!({
                "message": "Resource not accessible by personal access token",
                "documentation_url": "https://docs.github.com/rest/issues/labels#create-a-label",
            })),
        ],
    );
    let pr = forge
        .create_pr(&request())
        .await
        .expect("the existing label is used");
    assert!(pr.created && pr.label_error.is_none(), "{pr:?}");
    assert_eq!(gh.prs().len(), 1);

    // No right to label the PR once created: the PR is the result.
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![Fault::new("POST", "/repos/owner/repo/issues/1/labels", 403).json(json!({
            "message": "Resource not accessible by integration",
            "documentation_url": "https://docs.github.com/rest/issues/labels#add-labels-to-an-issue",
        }))],
    );
    let pr = forge.create_pr(&request()).await.expect("the PR exists");
    assert_eq!((pr.number, pr.created), (1, true));
    let why = pr.label_error.expect("the label failure is reported");
    assert!(
        why.contains("Resource not accessible by integration"),
        "{why}"
    );
    assert_eq!(gh_count(&gh, "POST", "/repos/owner/repo/pulls").await, 1);
    // A refusal about one PR leaves GitHub usable: the next call labels it.
    let again = forge.create_pr(&request()).await.expect("not stopped");
    assert_eq!(
        (again.number, again.created, again.label_error),
        (1, false, None)
    );
}

/// 5xx from what stands in front of GitHub: HTML pages and empty bodies.
/// Retried; when they persist the message is short and says what came back,
/// not a page of markup.
#[tokio::test]
async fn html_and_empty_5xx_are_retried_and_reported_briefly() {
    let unicorn = format!(
        "<!DOCTYPE html>\n<html>\n  <head>\n    <meta http-equiv=\"Content-type\" content=\"text/html; charset=utf-8\">\n    <title>Unicorn! &middot; GitHub</title>\n    <style type=\"text/css\" media=\"screen\">{}</style>\n  </head>\n  <body><p>No server is currently available to service your request.</p></body>\n</html>\n",
        "body { background-color: #f1f1f1; } ".repeat(40)
    );
    let nginx = "<html>\r\n<head><title>504 Gateway Time-out</title></head>\r\n<body>\r\n<center><h1>504 Gateway Time-out</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 502)
                .raw("text/html; charset=utf-8", &unicorn),
            Fault::new("GET", "/repos/owner/repo/pulls", 503).raw("text/plain", ""),
            Fault::new("GET", "/repos/owner/repo/pulls", 504).raw("text/html", nginx),
        ],
    );
    assert_eq!(forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap(), None);
    assert_eq!(gh_count(&gh, "GET", "/repos/owner/repo/pulls").await, 4);

    for (status, body, says) in [
        (502, unicorn.as_str(), "Unicorn! · GitHub"),
        (504, nginx, "504 Gateway Time-out"),
        (503, "", "Service Unavailable"),
    ] {
        let (gh, forge) = fake().await;
        script(
            &gh,
            (0..6)
                .map(|_| {
                    Fault::new("GET", "/repos/owner/repo/pulls", status).raw("text/html", body)
                })
                .collect(),
        );
        let err = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ForgeError::Exhausted { attempts: 6, .. }),
            "{err:?}"
        );
        assert!(
            text.contains(&status.to_string()) && text.contains(says),
            "{text}"
        );
        assert!(
            !text.contains('<') && text.len() < 400,
            "short, no markup: {text}"
        );
        assert_eq!(err.scope(), Scope::Run);
    }
}

/// A 2xx that is not JSON: the API base is not an API (GitHub Enterprise
/// without `/api/v3`, a sign-in page, a captive portal). Not "nothing
/// found" (that would open a duplicate), and the message names the setting.
#[tokio::test]
async fn a_non_json_answer_names_the_api_url_and_creates_nothing() {
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![Fault::new("GET", "/repos/owner/repo/pulls", 200).raw(
            "text/html; charset=utf-8",
            "<!DOCTYPE html><html lang=\"en\"><head><title>Sign in to GitHub · GitHub</title></head><body>…</body></html>",
        )],
    );

    let err = forge.create_pr(&request()).await.unwrap_err();

    let text = err.to_string();
    assert!(matches!(err, ForgeError::NotGitHub { .. }), "{err:?}");
    assert!(
        text.contains("GITHUB_API_URL")
            && text.contains("/api/v3")
            && text.contains("Sign in to GitHub"),
        "{text}"
    );
    assert!(!text.contains('<'), "{text}");
    assert_eq!(err.scope(), Scope::Run);
    assert_eq!(gh_count(&gh, "POST", "/").await, 0, "nothing created");
}

/// JSON without the fields nightshift reads is an error naming the field,
/// never taken for "no PR" (which would open a duplicate).
#[tokio::test]
async fn json_with_missing_fields_is_an_error_not_an_absence() {
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 200)
                .json(json!([{ "number": 5, "state": "open" }])),
        ],
    );

    let err = forge.create_pr(&request()).await.unwrap_err();

    assert!(matches!(err, ForgeError::Decode { .. }), "{err:?}");
    assert!(err.to_string().contains("html_url"), "{err}");
    assert_eq!(gh_count(&gh, "POST", "/").await, 0, "nothing created");
}

/// A create GitHub performed but answered with an unreadable 201 (empty,
/// cut, or a proxy's page): looked up, found, not re-sent.
#[tokio::test]
async fn a_create_answered_with_an_unreadable_201_is_looked_up_not_resent() {
    for body in [
        "",
        "{\"number\": 1, \"html_u",
        "<html><body>OK</body></html>",
    ] {
        let (gh, forge) = fake().await;
        script(
            &gh,
            vec![
                Fault::new("POST", "/repos/owner/repo/pulls", 201)
                    .raw("application/json", body)
                    .after_effect(),
            ],
        );

        let pr = forge
            .create_pr(&request())
            .await
            .unwrap_or_else(|e| panic!("{body:?}: {e}"));

        assert_eq!(
            (pr.number, pr.created, pr.state),
            (1, true, PrState::Open),
            "{body:?}"
        );
        assert_eq!(
            gh_count(&gh, "POST", "/repos/owner/repo/pulls").await,
            1,
            "{body:?}"
        );
        assert_eq!(gh.prs().len(), 1);
        assert!(has_label(&gh.prs()[0], "autopilot"));
    }
}

/// Nothing listens: retried with backoff, then given up for the run.
#[tokio::test]
async fn connection_refused_is_retried_then_given_up() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let forge = fake_forge(&format!("http://127.0.0.1:{port}"), "repo", fast_policy());

    let err = forge.create_pr(&request()).await.unwrap_err();

    assert!(
        matches!(err, ForgeError::Exhausted { attempts: 6, .. }),
        "{err:?}"
    );
    assert!(err.to_string().to_lowercase().contains("refused"), "{err}");
    assert_eq!(err.scope(), Scope::Run);
}

/// A tiny HTTP server: connection n gets answer n (raw bytes) and is then
/// reset (SO_LINGER 0), whatever was sent.
async fn raw_server(answers: Vec<Vec<u8>>) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    tokio::spawn(async move {
        for answer in answers {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut head = Vec::new();
            let mut chunk = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = sock.write_all(&answer).await;
            let _ = sock.flush().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = sock.set_zero_linger();
            drop(sock);
        }
    });
    (format!("http://{addr}"), served)
}

/// The connection is reset in the middle of a body: retried, and the full
/// answer is read on the next attempt.
#[tokio::test]
async fn a_connection_reset_mid_body_is_retried() {
    let full = serde_json::to_string(&json!([pull(8, BRANCH, "open", false, "")])).unwrap();
    let cut = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        full.len(),
        &full[..full.len() / 2]
    );
    let whole = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{full}",
        full.len()
    );
    let (base, served) = raw_server(vec![cut.into_bytes(), whole.into_bytes()]).await;
    let forge = Forge::new(&base, Secret::new(TOKEN), RepoId::new("o", "r"), None)
        .unwrap()
        .with_retry_policy(fast_policy());

    let pr = forge
        .find_pr(BRANCH, KEY, "autopilot")
        .await
        .unwrap()
        .expect("found");

    assert_eq!(pr.number, 8);
    assert_eq!(served.load(Ordering::SeqCst), 2);
}

/// A look-up that hangs is cut at the request timeout and retried.
#[tokio::test]
async fn a_hanging_lookup_times_out_and_is_retried() {
    let (gh, _) = fake().await;
    let forge = fake_forge(
        &gh.uri(),
        "repo",
        RetryPolicy {
            request_timeout: Duration::from_millis(300),
            ..fast_policy()
        },
    );
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 200)
                .raw("application/json", "[]")
                .delay_ms(5_000),
        ],
    );

    let started = Instant::now();
    assert_eq!(forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap(), None);

    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(gh_count(&gh, "GET", "/repos/owner/repo/pulls").await, 2);
}

/// The item's PR (found by its marker; its branch was renamed) sits on
/// page 2 of the labelled list, and the server serves 30 per page whatever
/// `per_page` asks: pages are followed through `Link: rel="next"` (GitHub's
/// `/repositories/{id}/…` URLs), also under a GitHub Enterprise base with
/// `/api/v3/` and a trailing slash. No duplicate is created.
#[tokio::test]
async fn the_marker_pr_on_a_later_page_is_found_through_link_next() {
    for suffix in ["", "/api/v3/"] {
        let gh = FakeGitHub::start().await;
        gh.state.lock().unwrap().page_cap = Some(30);
        let ours = gh.add_pr(
            "renamed-by-hand",
            &format!("card\n\n{}\n", item_marker(KEY)),
            &["autopilot"],
        );
        for n in 0..44 {
            gh.add_pr(
                &format!("nightshift/other-{n}"),
                &format!("card\n\n{}\n", item_marker(&format!("{n:064x}"))),
                &["autopilot"],
            );
        }
        let forge = fake_forge(&format!("{}{suffix}", gh.uri()), "repo", fast_policy());

        let found = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();
        assert_eq!(found.as_ref().map(|p| p.number), Some(ours), "{suffix:?}");
        let pr = forge.create_pr(&request()).await.unwrap();
        assert_eq!((pr.number, pr.created), (ours, false), "{suffix:?}");
        assert_eq!(
            gh_count(&gh, "POST", "/repos/owner/repo/pulls").await,
            0,
            "{suffix:?}"
        );
        assert_eq!(
            gh_count(&gh, "POST", "/api/v3/repos/owner/repo/pulls").await,
            0,
            "{suffix:?}"
        );
        assert!(
            gh.requests()
                .await
                .iter()
                .any(|(_, p, _)| p.contains("/repositories/1/issues")),
            "{suffix:?}: the Link URL was followed"
        );
    }
}

/// A PR from a fork whose branch has nightshift's name (listed by a server
/// that ignores `head`), or whose body carries the item's marker, is not the
/// item's PR: `head.repo` is not this repository.
#[tokio::test]
async fn a_fork_pr_with_our_branch_name_or_marker_is_not_ours() {
    let (gh, forge) = fake().await;
    gh.state.lock().unwrap().ignore_head_filter = true;
    let by_branch = gh.add_fork_pr("someone", BRANCH, "", &[]);
    let by_marker = gh.add_fork_pr(
        "someone",
        "copied",
        &format!("copied\n\n{}\n", item_marker(KEY)),
        &["autopilot"],
    );

    assert_eq!(forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap(), None);
    let pr = forge.create_pr(&request()).await.unwrap();

    assert!(
        pr.created && pr.number != by_branch && pr.number != by_marker,
        "{pr:?}"
    );
    assert_eq!(gh_count(&gh, "POST", "/repos/owner/repo/pulls").await, 1);
    // Its own PR, listed among the fork's, is found again.
    let again = forge.create_pr(&request()).await.unwrap();
    assert_eq!((again.number, again.created), (pr.number, false));
}

/// A repository with issues switched off answers 410 to the issues list:
/// the marker look-up reads the PR list instead, so no duplicate.
#[tokio::test]
async fn with_issues_disabled_the_marker_lookup_reads_the_pr_list() {
    let (gh, forge) = fake().await;
    gh.state.lock().unwrap().issues_disabled = true;
    let ours = gh.add_pr(
        "renamed-by-hand",
        &format!("card\n\n{}\n", item_marker(KEY)),
        &["autopilot"],
    );

    let pr = forge.create_pr(&request()).await.unwrap();

    assert_eq!((pr.number, pr.created), (ours, false));
    assert_eq!(gh_count(&gh, "POST", "/repos/owner/repo/pulls").await, 0);
}

/// The token never reaches a message, whatever GitHub or a proxy echoes.
#[tokio::test]
async fn the_token_never_reaches_a_message() {
    let echo = format!(
        "<html><body><pre>GET /repos/owner/repo/pulls\nAuthorization: token {TOKEN}</pre></body></html>"
    );
    // A proxy's 502 page that echoes the request (every retry), then a 200
    // that is no JSON but the request's headers.
    let plain = format!("Authorization: token {TOKEN}");
    let echoes = [
        (0..6)
            .map(|_| Fault::new("GET", "/repos/owner/repo/pulls", 502).raw("text/html", &echo))
            .collect(),
        vec![Fault::new("GET", "/repos/owner/repo/pulls", 200).raw("text/plain", &plain)],
    ];
    for faults in echoes {
        let (gh, forge) = fake().await;
        script(&gh, faults);
        let err = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();
        no_token(&err.to_string());
    }

    let (gh, forge) = fake().await;
    script(&gh, vec![Fault::new("POST", "/repos/owner/repo/pulls", 422).json(json!({ "message": format!("Validation Failed for token {TOKEN}"), "errors": [format!("bad {TOKEN}")] }))]);
    let err = forge.create_pr(&request()).await.unwrap_err();
    no_token(&err.to_string());
    no_token(&format!("{err:?}"));
}

/// `GITHUB_API_URL` without a scheme, or set to the website instead of the
/// API, is refused up front with the fix.
#[tokio::test]
async fn an_api_base_that_is_not_an_api_is_refused_up_front() {
    for (base, says) in [
        ("ghe.example.com/api/v3", "https://HOST/api/v3"),
        ("https://github.com", "https://api.github.com"),
        ("ftp://ghe.example.com/api/v3", "https://HOST/api/v3"),
    ] {
        let err = Forge::new(base, Secret::new(TOKEN), RepoId::new("o", "r"), None).unwrap_err();
        assert!(matches!(err, ForgeError::Client { .. }), "{base}: {err:?}");
        let text = err.to_string();
        assert!(
            text.contains("GITHUB_API_URL") && text.contains(says),
            "{base}: {text}"
        );
    }
    for ok in [
        "https://api.github.com",
        "https://ghe.example.com/api/v3/",
        "http://127.0.0.1:8080",
    ] {
        assert!(
            Forge::new(ok, Secret::new(TOKEN), RepoId::new("o", "r"), None).is_ok(),
            "{ok}"
        );
    }
}

// ---------------------------------------------------------------------------
// Real GitHub failures not covered above: moved repositories, archived and
// blocked repositories, answers cut short, conflicts, limits on creates.

/// A renamed or transferred repository: GitHub answers every request under
/// the old name with 301 (GET) or 307 (POST: "repeat the request verbatim")
/// to `/repositories/{id}/…`. The redirect is followed on the same host
/// with the token and the same body, also under a GitHub Enterprise base;
/// the PR is opened once, labelled, and found again by the next run.
#[tokio::test]
async fn a_renamed_repository_is_followed_and_its_pr_opened_once() {
    for suffix in ["", "/api/v3"] {
        let gh = FakeGitHub::start().await;
        gh.state.lock().unwrap().renamed_from = Some("old-name".into());
        let forge = fake_forge(&format!("{}{suffix}", gh.uri()), "old-name", fast_policy());

        let pr = forge
            .create_pr(&request())
            .await
            .unwrap_or_else(|e| panic!("{suffix:?}: {e}"));

        assert_eq!(
            (pr.number, pr.created, pr.label_error),
            (1, true, None),
            "{suffix:?}"
        );
        let prs = gh.prs();
        assert_eq!(prs.len(), 1, "{suffix:?}");
        assert_eq!(prs[0]["head"]["ref"], BRANCH, "the body went along");
        assert!(has_label(&prs[0], "autopilot"), "{suffix:?}: labelled");
        assert_eq!(
            gh_count(&gh, "POST", &format!("{suffix}/repositories/1/pulls")).await,
            1,
            "{suffix:?}"
        );
        let again = forge.create_pr(&request()).await.unwrap();
        assert_eq!((again.number, again.created), (1, false), "{suffix:?}");
        assert_eq!(gh.prs().len(), 1, "{suffix:?}");
        for r in gh.server.received_requests().await.unwrap() {
            let auth = r
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            assert!(
                auth.contains(TOKEN),
                "{suffix:?}: {} {} sent without the token",
                r.method,
                r.url
            );
        }
    }
}

/// A redirect to another host (a proxy, a moved API, a hostile answer) is
/// not followed: the token stays with `GITHUB_API_URL`, nothing is created,
/// and the message names where it pointed and what to set. A redirect loop
/// ends too, with its own message.
#[tokio::test]
async fn a_redirect_to_another_host_or_in_a_loop_is_not_followed() {
    let elsewhere = FakeGitHub::start().await;
    let (gh, forge) = fake().await;
    let to = format!(
        "http://someone:hunter2@{}/repositories/1/pulls?access_token={TOKEN}",
        elsewhere.uri().trim_start_matches("http://")
    );
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 301)
                .header("location", &to)
                .json(json!({ "message": "Moved Permanently", "url": to })),
        ],
    );

    let err = forge.create_pr(&request()).await.unwrap_err();

    let text = err.to_string();
    assert!(
        elsewhere.requests().await.is_empty(),
        "nothing sent to the other host"
    );
    let host = elsewhere.uri().trim_start_matches("http://").to_string();
    assert!(
        text.contains(&host) && text.contains("GITHUB_API_URL"),
        "{text}"
    );
    no_token(&text);
    no_token(&format!("{err:?}"));
    assert!(
        !text.contains("hunter2"),
        "credentials in the Location stay out: {text}"
    );
    assert_eq!(err.scope(), Scope::Run, "{text}");
    assert_eq!(gh_count(&gh, "POST", "/").await, 0);

    // Every answer redirects to itself.
    let (gh, forge) = fake().await;
    let looped = format!("{}/repos/owner/repo/pulls", gh.uri());
    script(
        &gh,
        (0..30)
            .map(|_| Fault::new("GET", "/repos/owner/repo/pulls", 301).header("location", &looped))
            .collect(),
    );
    let err = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("redirect"), "{text}");
    assert_eq!(err.scope(), Scope::Run, "{text}");
    assert!(gh_count(&gh, "GET", "/repos/owner/repo/pulls").await <= 10);
}

/// An archived repository is read-only for everyone: 403 "Repository was
/// archived so is read-only." on every write. Not a label permission, not
/// retried; the fix is to unarchive it or point nightshift elsewhere, and
/// GitHub is left alone for the run (no PR can be opened there).
#[tokio::test]
async fn an_archived_repository_stops_github_with_the_fix() {
    for label_there in [false, true] {
        let (gh, forge) = fake().await;
        if label_there {
            gh.state.lock().unwrap().labels.push("autopilot".into());
        }
        let archived = |doc: &str| json!({ "message": "Repository was archived so is read-only.", "documentation_url": doc, "status": "403" });
        script(
            &gh,
            vec![
                Fault::new("POST", "/repos/owner/repo/labels", 403).json(archived(
                    "https://docs.github.com/rest/issues/labels#create-a-label",
                )),
                Fault::new("POST", "/repos/owner/repo/pulls", 403).json(archived(
                    "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                )),
            ],
        );

        let err = forge.create_pr(&request()).await.unwrap_err();

        let text = err.to_string();
        assert!(
            matches!(err, ForgeError::Api { status: 403, .. }),
            "{err:?}"
        );
        assert!(
            text.contains("archived") && text.contains("unarchive") && text.contains("GH_REPO"),
            "{label_there}: {text}"
        );
        assert!(!text.contains("may not create labels"), "{text}");
        assert_eq!(err.scope(), Scope::Run, "{text}");
        assert!(gh.prs().is_empty());
        assert_eq!(
            gh_count(&gh, "POST", "/repos/owner/repo/pulls").await,
            0,
            "{label_there}"
        );
        let asked = gh.requests().await.len();
        let again = forge.create_pr(&request()).await.unwrap_err();
        assert!(matches!(again, ForgeError::Stopped { .. }), "{again:?}");
        assert_eq!(gh.requests().await.len(), asked);
    }
}

/// A repository GitHub blocked (DMCA takedown, terms of service): 451
/// "Repository access blocked" (or 403 with the same body), with the reason
/// and the notice in `block`. Not retried; the message carries the reason
/// and the notice's address; GitHub is left alone for the run.
#[tokio::test]
async fn a_blocked_repository_names_the_reason_and_stops_github() {
    for (status, reason, notice) in [
        (
            451,
            "dmca",
            "https://github.com/github/dmca/blob/master/2026/11/2026-11-30-example.md",
        ),
        (403, "tos", "https://github.com/tos"),
    ] {
        let (gh, forge) = fake().await;
        script(
            &gh,
            vec![Fault::new("GET", "/repos/owner/repo/pulls", status).json(json!({
                "message": "Repository access blocked",
                "block": { "reason": reason, "created_at": "2026-11-30T01:02:03Z", "html_url": notice },
            }))],
        );

        let err = forge.create_pr(&request()).await.unwrap_err();

        let text = err.to_string();
        assert!(
            text.contains("Repository access blocked")
                && text.contains(reason)
                && text.contains(notice),
            "{status}: {text}"
        );
        assert_eq!(err.scope(), Scope::Run, "{status}: {text}");
        assert_eq!(gh.requests().await.len(), 1, "{status}: not retried");
        assert!(matches!(
            forge.create_pr(&request()).await.unwrap_err(),
            ForgeError::Stopped { .. }
        ));
        assert_eq!(gh.requests().await.len(), 1);
    }
}

/// A look-up answered 200 with JSON cut short or an empty body (a proxy or
/// load balancer dropped the rest): retried like any transient failure,
/// never taken for "nothing found" and never for "not GitHub's API". When
/// it persists, the message says the answers were cut short.
#[tokio::test]
async fn a_lookup_answered_with_json_cut_short_is_retried() {
    let (gh, forge) = fake().await;
    let number = gh.add_pr(BRANCH, "", &["autopilot"]);
    script(
        &gh,
        vec![
            Fault::new("GET", "/repos/owner/repo/pulls", 200).raw(
                "application/json; charset=utf-8",
                "[{\"number\": 1, \"html_u",
            ),
            Fault::new("GET", "/repos/owner/repo/pulls", 200).raw("application/json", ""),
        ],
    );
    let found = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();
    assert_eq!(found.map(|p| p.number), Some(number));
    assert_eq!(gh_count(&gh, "GET", "/repos/owner/repo/pulls").await, 3);

    let (gh, forge) = fake().await;
    script(
        &gh,
        (0..6)
            .map(|_| {
                Fault::new("GET", "/repos/owner/repo/pulls", 200)
                    .raw("application/json", "{\"message\": \"cut")
            })
            .collect(),
    );
    let err = forge.create_pr(&request()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, ForgeError::Exhausted { attempts: 6, .. }),
        "{err:?}"
    );
    assert!(text.contains("cut short"), "{text}");
    assert!(
        !text.contains("GITHUB_API_URL"),
        "not a wrong API base: {text}"
    );
    assert_eq!(gh_count(&gh, "POST", "/").await, 0, "nothing created");
    // GitHub may be back for the next item.
    assert!(forge.find_pr(BRANCH, KEY, "autopilot").await.is_ok());
}

/// 409 Conflict on a create: GitHub refused it for the repository's state;
/// not retried (one create), the item fails with GitHub's words, and the
/// next item goes ahead.
#[tokio::test]
async fn a_conflict_fails_the_item_only() {
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![Fault::new("POST", "/repos/owner/repo/pulls", 409).json(json!({
            "message": "Git Repository is empty.",
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
            "status": "409",
        }))],
    );

    let err = forge.create_pr(&request()).await.unwrap_err();

    let text = err.to_string();
    assert!(
        matches!(err, ForgeError::Api { status: 409, .. }),
        "{err:?}"
    );
    assert!(
        text.contains("Git Repository is empty") && text.contains("push"),
        "{text}"
    );
    assert_eq!(err.scope(), Scope::Item);
    assert_eq!(gh_count(&gh, "POST", "/repos/owner/repo/pulls").await, 1);
    let next = forge
        .create_pr(&request())
        .await
        .expect("GitHub still usable");
    assert!(next.created);
    assert_eq!(gh.prs().len(), 1);
}

/// GitHub's secondary limit on content creation, met by the create itself
/// (403 "…temporarily blocked from content creation…" without
/// `retry-after`, then 429 with `retry-after`): waited out, looked up, sent
/// again; one PR.
#[tokio::test]
async fn a_create_met_by_the_content_creation_limit_is_waited_out_once() {
    let (gh, forge) = fake().await;
    script(
        &gh,
        vec![
            Fault::new("POST", "/repos/owner/repo/pulls", 403).json(json!({
                "message": "You have exceeded a secondary rate limit and have been temporarily blocked from content creation. Please retry your request again later. If you reach out to GitHub Support for help, please include the request ID 1111:2222:3333.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
            })),
            Fault::new("POST", "/repos/owner/repo/pulls", 429)
                .header("retry-after", "1")
                .json(json!({ "message": "You have exceeded a secondary rate limit." })),
        ],
    );

    let started = Instant::now();
    let pr = forge.create_pr(&request()).await.unwrap();

    assert!(pr.created && pr.label_error.is_none(), "{pr:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(gh_count(&gh, "POST", "/repos/owner/repo/pulls").await, 3);
    assert_eq!(gh.prs().len(), 1);
}

/// A server that never answers in time: every attempt is cut at the request
/// timeout, the call ends within attempts × timeout (plus backoff), and the
/// message says it got no answer.
#[tokio::test]
async fn a_server_slower_than_the_timeout_is_given_up_in_bounded_time() {
    let (gh, _) = fake().await;
    let forge = fake_forge(
        &gh.uri(),
        "repo",
        RetryPolicy {
            request_timeout: Duration::from_millis(200),
            max_attempts: 3,
            ..fast_policy()
        },
    );
    script(
        &gh,
        (0..3)
            .map(|_| {
                Fault::new("GET", "/repos/owner/repo/pulls", 200)
                    .raw("application/json", "[]")
                    .delay_ms(10_000)
            })
            .collect(),
    );

    let started = Instant::now();
    let err = forge.create_pr(&request()).await.unwrap_err();

    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, ForgeError::Exhausted { attempts: 3, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("no answer within 0.2 s"), "{err}");
    assert_eq!(err.scope(), Scope::Run);
    assert_eq!(gh_count(&gh, "POST", "/").await, 0);
}

/// Right after a push GitHub may not see the branch yet: the create is
/// refused with 422 `head` invalid (hub and others retry it). Asked again
/// after a backoff; one PR. The wait never passes the deadline: with the
/// deadline too near, the refusal is returned at once with its fix.
#[tokio::test]
async fn a_branch_github_does_not_see_yet_is_waited_for() {
    let unseen = || {
        Fault::new("POST", "/repos/owner/repo/pulls", 422).json(json!({
            "message": "Validation Failed",
            "errors": [{ "resource": "PullRequest", "field": "head", "code": "invalid" }],
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
            "status": "422",
        }))
    };
    let (gh, forge) = fake().await;
    script(&gh, vec![unseen(), unseen()]);

    let pr = forge
        .create_pr(&request())
        .await
        .expect("created once GitHub sees the branch");

    assert!(pr.created && pr.label_error.is_none(), "{pr:?}");
    assert_eq!(gh_count(&gh, "POST", "/repos/owner/repo/pulls").await, 3);
    assert_eq!(gh.prs().len(), 1);

    let gh = FakeGitHub::start().await;
    let forge = Forge::new(
        &gh.uri(),
        Secret::new(TOKEN),
        RepoId::new("owner", "repo"),
        Some(Utc::now() + chrono::Duration::seconds(1)),
    )
    .unwrap()
    .with_retry_policy(RetryPolicy {
        backoff_base: Duration::from_secs(5),
        backoff_max: Duration::from_secs(5),
        ..fast_policy()
    });
    script(&gh, vec![unseen()]);
    let started = Instant::now();
    let err = forge.create_pr(&request()).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("does not see branch"), "{err}");
    assert_eq!(gh_count(&gh, "POST", "/repos/owner/repo/pulls").await, 1);
}

/// The PR is created, then labelling it fails past every retry (GitHub
/// answers 502 each time) or GitHub stops being usable: the PR is still the
/// result, with the reason, never "not created" (which would record the
/// item as `pr_failed` without the PR that exists).
#[tokio::test]
async fn a_pr_whose_labelling_keeps_failing_is_still_returned() {
    let (gh, forge) = fake().await;
    script(
        &gh,
        (0..6)
            .map(|_| {
                Fault::new("POST", "/repos/owner/repo/issues/1/labels", 502).raw(
                    "text/html",
                    "<html><title>Unicorn! &middot; GitHub</title></html>",
                )
            })
            .collect(),
    );

    let pr = forge.create_pr(&request()).await.expect("the PR exists");

    assert_eq!((pr.number, pr.created, pr.state), (1, true, PrState::Open));
    let why = pr.label_error.expect("the label failure is reported");
    assert!(why.contains("502") && why.contains("Unicorn!"), "{why}");
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(gh_count(&gh, "POST", "/repos/owner/repo/pulls").await, 1);
    // The next run finds it and labels it.
    let again = forge.create_pr(&request()).await.unwrap();
    assert_eq!(
        (again.number, again.created, again.label_error),
        (1, false, None)
    );
    assert!(has_label(&gh.prs()[0], "autopilot"));
}

/// Tending's calls against the fake: a PR read while `mergeable` is null is
/// asked again and then told; reviews and comments are read; a comment is
/// posted once and found again instead of re-posted after a lost answer;
/// the body update sends the body alone (marker kept); `GET /user` names
/// the token's account.
#[tokio::test(flavor = "multi_thread")]
async fn tending_calls_read_post_once_and_patch_only_the_body() {
    use nightshift::forge::{MERGEABLE_TRIES, Mergeable, ReviewState};
    let (gh, forge) = fake().await;
    let n = gh.add_pr(BRANCH, "old body", &["autopilot"]);
    assert_eq!(
        forge.own_login().await.unwrap(),
        common::github::DEFAULT_LOGIN
    );

    gh.computing(n, 2);
    gh.set_mergeable(n, Some(false), "dirty");
    let pr = forge.pr_detail(n).await.unwrap();
    assert_eq!(pr.mergeable, Mergeable::Conflict);
    assert_eq!(pr.head_ref, BRANCH);
    assert_eq!(
        gh_count(&gh, "GET", &format!("/repos/owner/repo/pulls/{n}")).await,
        3
    );
    gh.computing(n, 99);
    assert_eq!(
        forge.pr_detail(n).await.unwrap().mergeable,
        Mergeable::Unknown
    );
    assert_eq!(
        gh_count(&gh, "GET", &format!("/repos/owner/repo/pulls/{n}")).await,
        3 + MERGEABLE_TRIES as usize,
        "bounded"
    );

    gh.add_review(n, "ana", "CHANGES_REQUESTED", "fix", &[("a.rs", 3, "here")]);
    let reviews = forge.pr_reviews(n).await.unwrap();
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0].state, Some(ReviewState::ChangesRequested));
    assert!(reviews[0].submitted_at.is_some());
    let lines = forge.pr_review_comments(n).await.unwrap();
    assert_eq!(
        (
            lines[0].path.as_deref(),
            lines[0].line,
            lines[0].body.as_str()
        ),
        (Some("a.rs"), Some(3), "here")
    );

    // The answer to the create is lost: the comment is found, not re-sent.
    script(
        &gh,
        vec![
            Fault::new(
                "POST",
                &format!("/repos/owner/repo/issues/{n}/comments"),
                502,
            )
            .after_effect(),
        ],
    );
    forge
        .post_comment(n, common::github::DEFAULT_LOGIN, "Done: rebased.")
        .await
        .unwrap();
    assert_eq!(gh.comments(n).len(), 1, "posted once");
    assert_eq!(
        forge.issue_comments(n).await.unwrap()[0].body,
        "Done: rebased."
    );

    forge.update_pr_body(n, "new body", KEY).await.unwrap();
    let body = gh.prs()[0]["body"].as_str().unwrap().to_string();
    assert!(
        body.starts_with("new body")
            && body
                .trim_end()
                .ends_with(&format!("<!-- nightshift-item: {KEY} -->")),
        "{body}"
    );
    let patches: Vec<String> = gh
        .requests()
        .await
        .into_iter()
        .filter(|(m, _, _)| m == "PATCH")
        .map(|(_, _, b)| b)
        .collect();
    assert_eq!(patches.len(), 1);
    let sent: Value = serde_json::from_str(&patches[0]).unwrap();
    assert_eq!(
        sent.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["body"]
    );
    assert_eq!(gh.prs()[0]["state"], "open");
    gh.assert_never_merged_approved_or_closed().await;
}
