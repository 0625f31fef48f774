//! The real octocrab client of `nightshift::forge` against wiremock as a
//! local GitHub (SPEC §8). Every test also checks, from the requests the fake
//! server recorded, that nothing merged, approved or closed a PR, and counts
//! the POSTs that reached the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use nightshift::forge::{
    BODY_LIMIT, Forge, ForgeError, PrRequest, PrState, RepoId, RetryPolicy, Secret, item_marker,
    repo_from_remote_url, resolve_repo, resolve_token_using,
};
use serde_json::{Value, json};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

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

async fn github() -> (MockServer, Forge) {
    let server = MockServer::start().await;
    let forge = Forge::new(
        &server.uri(),
        Secret::new("test-token"),
        RepoId::new("o", "r"),
        None,
    )
    .expect("client builds")
    .with_retry_policy(fast_policy());
    (server, forge)
}

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

fn issue(number: u64, title: &str, body: &str, is_pr: bool) -> Value {
    let mut v = json!({
        "number": number,
        "html_url": format!("https://github.com/o/r/issues/{number}"),
        "title": title,
        "state": "open",
        "body": body,
    });
    if is_pr {
        v["pull_request"] = json!({ "url": format!("https://api.github.com/repos/o/r/pulls/{number}"), "merged_at": null });
    }
    v
}

fn request() -> PrRequest {
    PrRequest {
        title: "nightshift: fix login".to_string(),
        head: BRANCH.to_string(),
        base: "main".to_string(),
        body: "## Contract\nsha: abc\n".to_string(),
        labels: vec!["autopilot".to_string()],
        item_key: KEY.to_string(),
    }
}

/// The guarantee of SPEC §8, checked on the wire: no merge, no review
/// approval, no close, and no other write verb at all.
async fn assert_never_merged_approved_or_closed(server: &MockServer) {
    for r in server.received_requests().await.expect("recording on") {
        let p = r.url.path();
        let m = r.method.as_str();
        assert!(
            !(m == "PUT" && p.ends_with("/merge")),
            "merge request made: {m} {p}"
        );
        assert!(
            !(m == "POST" && p.ends_with("/reviews")),
            "review request made: {m} {p}"
        );
        let closes = m == "PATCH" && String::from_utf8_lossy(&r.body).contains("closed");
        assert!(!closes, "close request made: {m} {p}");
        assert!(m == "GET" || m == "POST", "unexpected verb {m} {p}");
    }
}

async fn count(server: &MockServer, verb: &str, p: &str) -> usize {
    server
        .received_requests()
        .await
        .expect("recording on")
        .iter()
        .filter(|r| r.method.as_str() == verb && r.url.path() == p)
        .count()
}

async fn posts(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .expect("recording on")
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .count()
}

fn post_bodies(requests: &[Request], p: &str) -> Vec<Value> {
    requests
        .iter()
        .filter(|r| r.method.as_str() == "POST" && r.url.path() == p)
        .map(|r| r.body_json().expect("json body"))
        .collect()
}

/// Mocks the two look-ups of an item with nothing found.
async fn nothing_found(server: &MockServer) {
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .and(query_param("head", format!("o:{BRANCH}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .and(query_param("labels", "autopilot"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(server)
        .await;
}

async fn labels_added(server: &MockServer, number: u64) {
    Mock::given(method("POST"))
        .and(path(format!("/repos/o/r/issues/{number}/labels")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([{ "name": "autopilot" }])))
        .mount(server)
        .await;
}

fn label_exists() -> ResponseTemplate {
    ResponseTemplate::new(422).set_body_json(json!({
        "message": "Validation Failed",
        "errors": [{ "resource": "Label", "code": "already_exists", "field": "name" }],
    }))
}

#[tokio::test]
async fn create_pr_creates_the_missing_label_then_the_pr_then_labels_it() {
    let (server, forge) = github().await;
    nothing_found(&server).await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({ "name": "autopilot" })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pull(7, BRANCH, "open", false, "")))
        .mount(&server)
        .await;
    labels_added(&server, 7).await;

    let pr = forge.create_pr(&request()).await.expect("created");

    assert_eq!((pr.number, pr.state, pr.created), (7, PrState::Open, true));
    assert_eq!(pr.head, BRANCH);
    assert_eq!(pr.url, "https://github.com/o/r/pull/7");
    let requests = server.received_requests().await.unwrap();
    let label = &post_bodies(&requests, "/repos/o/r/labels")[0];
    assert_eq!(label["name"], "autopilot");
    let created = &post_bodies(&requests, "/repos/o/r/pulls")[0];
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
        post_bodies(&requests, "/repos/o/r/issues/7/labels")[0],
        json!({ "labels": ["autopilot"] })
    );
    // The label is created before the PR, the labels added after it.
    let order: Vec<&str> = requests
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .map(|r| r.url.path())
        .collect();
    assert_eq!(
        order,
        [
            "/repos/o/r/labels",
            "/repos/o/r/pulls",
            "/repos/o/r/issues/7/labels"
        ]
    );
    assert_eq!(posts(&server).await, 3);
    for r in &requests {
        let auth = r.headers.get("authorization").and_then(|v| v.to_str().ok());
        assert_eq!(auth, Some("Bearer test-token"), "{} {}", r.method, r.url);
    }
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn the_client_does_not_print_its_token() {
    let (server, forge) = github().await;
    let shown = format!("{forge:?}");
    assert!(!shown.contains("test-token"), "{shown}");
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn enterprise_api_base_path_is_kept() {
    let server = MockServer::start().await;
    let base = format!("{}/api/v3/", server.uri());
    let forge = Forge::new(&base, Secret::new("t"), RepoId::new("o", "r"), None)
        .unwrap()
        .with_retry_policy(fast_policy());
    Mock::given(method("GET"))
        .and(path("/api/v3/repos/o/r/pulls"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!([pull(1, BRANCH, "open", false, "")])),
        )
        .mount(&server)
        .await;

    let pr = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();

    assert_eq!(pr.map(|p| p.number), Some(1));
    assert_eq!(count(&server, "GET", "/api/v3/repos/o/r/pulls").await, 1);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn create_pr_treats_label_already_exists_as_fine() {
    let (server, forge) = github().await;
    nothing_found(&server).await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(label_exists())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pull(8, BRANCH, "open", false, "")))
        .mount(&server)
        .await;
    labels_added(&server, 8).await;

    let pr = forge.create_pr(&request()).await.expect("created");

    assert_eq!((pr.number, pr.created), (8, true));
    assert_eq!(count(&server, "POST", "/repos/o/r/labels").await, 1);
    assert_eq!(count(&server, "POST", "/repos/o/r/pulls").await, 1);
    assert_eq!(posts(&server).await, 3);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn ensure_label_fails_on_other_validation_errors() {
    let (server, forge) = github().await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(ResponseTemplate::new(422).set_body_json(json!({
            "message": "Validation Failed",
            "errors": [{ "resource": "Label", "code": "invalid", "field": "color" }],
        })))
        .mount(&server)
        .await;

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
    assert_eq!(posts(&server).await, 1, "a 4xx is not retried");
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn find_pr_by_head_sends_owner_colon_branch() {
    let (server, forge) = github().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .and(query_param("head", format!("o:{BRANCH}")))
        .and(query_param("state", "all"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            pull(3, BRANCH, "closed", false, ""),
            pull(4, BRANCH, "closed", true, ""),
        ])))
        .mount(&server)
        .await;

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
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1, "found by head: no marker search");
    let head: Vec<String> = requests[0]
        .url
        .query_pairs()
        .filter(|(k, _)| k == "head")
        .map(|(_, v)| v.into_owned())
        .collect();
    assert_eq!(head, [format!("o:{BRANCH}")]);
    assert_eq!(posts(&server).await, 0);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn find_pr_by_marker_when_the_branch_was_renamed() {
    let (server, forge) = github().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .and(query_param("head", format!("o:{BRANCH}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&server)
        .await;
    let marker = item_marker(KEY);
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .and(query_param("labels", "autopilot"))
        .and(query_param("state", "all"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            issue(3, "an issue quoting the marker", &marker, false),
            issue(5, "another item's PR", &item_marker(&"f".repeat(64)), true),
            issue(
                9,
                "nightshift: fix login",
                &format!("card\n\n{marker}\n"),
                true
            ),
        ])))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls/9"))
        .respond_with(ResponseTemplate::new(200).set_body_json(pull(
            9,
            "renamed-by-hand",
            "open",
            false,
            &marker,
        )))
        .mount(&server)
        .await;

    let pr = forge
        .find_pr(BRANCH, KEY, "autopilot")
        .await
        .unwrap()
        .expect("found by marker");

    assert_eq!(
        (pr.number, pr.state, pr.head.as_str()),
        (9, PrState::Open, "renamed-by-hand")
    );
    assert_eq!(
        count(&server, "GET", "/repos/o/r/pulls/3").await,
        0,
        "plain issues are not PRs"
    );
    assert_eq!(
        count(&server, "GET", "/repos/o/r/pulls/5").await,
        0,
        "another item's marker"
    );
    assert_eq!(posts(&server).await, 0);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn find_pr_returns_none_when_nothing_matches() {
    let (server, forge) = github().await;
    nothing_found(&server).await;

    assert_eq!(forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap(), None);
    assert_eq!(posts(&server).await, 0);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn get_is_retried_through_500_502_503() {
    let (server, forge) = github().await;
    for status in [500, 502, 503] {
        Mock::given(method("GET"))
            .and(path("/repos/o/r/pulls"))
            .respond_with(ResponseTemplate::new(status).set_body_string("upstream trouble"))
            .up_to_n_times(1)
            .mount(&server)
            .await;
    }
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!([pull(2, BRANCH, "open", false, "")])),
        )
        .mount(&server)
        .await;

    let pr = forge
        .find_pr(BRANCH, KEY, "autopilot")
        .await
        .unwrap()
        .expect("found after retries");

    assert_eq!((pr.number, pr.state), (2, PrState::Open));
    assert_eq!(count(&server, "GET", "/repos/o/r/pulls").await, 4);
    assert_eq!(posts(&server).await, 0);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn persistent_5xx_gives_up_after_max_attempts() {
    let (server, forge) = github().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(
            ResponseTemplate::new(503).set_body_json(json!({ "message": "Service Unavailable" })),
        )
        .mount(&server)
        .await;

    let err = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap_err();

    assert!(
        matches!(err, ForgeError::Exhausted { attempts: 6, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("503 Service Unavailable"), "{err}");
    assert_eq!(count(&server, "GET", "/repos/o/r/pulls").await, 6);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn secondary_rate_limit_waits_retry_after_seconds() {
    let (server, forge) = github().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(403).insert_header("retry-after", "1").set_body_json(json!({
            "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!([pull(2, BRANCH, "open", false, "")])),
        )
        .mount(&server)
        .await;

    let started = Instant::now();
    let pr = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();

    assert_eq!(pr.map(|p| p.number), Some(2));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retry-after honoured: {:?}",
        started.elapsed()
    );
    assert_eq!(count(&server, "GET", "/repos/o/r/pulls").await, 2);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn plain_403_is_not_retried() {
    let (server, forge) = github().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(
            ResponseTemplate::new(403)
                .insert_header("x-github-request-id", "ABCD:1234")
                .set_body_json(
                    json!({ "message": "Resource not accessible by personal access token" }),
                ),
        )
        .mount(&server)
        .await;

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
    assert_eq!(count(&server, "GET", "/repos/o/r/pulls").await, 1);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn primary_rate_limit_429_waits_until_x_ratelimit_reset() {
    let (server, forge) = github().await;
    let reset = Utc::now().timestamp() + 1;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("x-ratelimit-remaining", "0")
                .insert_header("x-ratelimit-reset", reset.to_string().as_str())
                .set_body_json(json!({ "message": "API rate limit exceeded" })),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&server)
        .await;
    nothing_found(&server).await;

    let found = forge.find_pr(BRANCH, KEY, "autopilot").await.unwrap();

    assert_eq!(found, None);
    assert!(
        Utc::now().timestamp() >= reset,
        "retried before the reset instant"
    );
    assert_eq!(count(&server, "GET", "/repos/o/r/pulls").await, 2);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn rate_limit_resetting_after_the_deadline_stops_at_once() {
    let server = MockServer::start().await;
    let deadline = Utc::now() + chrono::Duration::seconds(60);
    let forge = Forge::new(
        &server.uri(),
        Secret::new("t"),
        RepoId::new("o", "r"),
        Some(deadline),
    )
    .unwrap()
    .with_retry_policy(fast_policy());
    let reset = Utc::now().timestamp() + 3600;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(
            ResponseTemplate::new(403)
                .insert_header("x-ratelimit-remaining", "0")
                .insert_header("x-ratelimit-reset", reset.to_string().as_str())
                .set_body_json(json!({ "message": "API rate limit exceeded for user ID 1." })),
        )
        .mount(&server)
        .await;

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
    assert_eq!(count(&server, "GET", "/repos/o/r/pulls").await, 1);

    // Without a deadline, the total wait budget bounds the wait the same way.
    let no_deadline = Forge::new(&server.uri(), Secret::new("t"), RepoId::new("o", "r"), None)
        .unwrap()
        .with_retry_policy(fast_policy());
    let err = no_deadline
        .find_pr(BRANCH, KEY, "autopilot")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForgeError::WaitTooLong { limit, .. } if limit.contains("retry budget of 10 s")),
        "{err:?}"
    );
    assert_eq!(count(&server, "GET", "/repos/o/r/pulls").await, 2);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn duplicate_pr_refusal_returns_the_existing_pr() {
    let (server, forge) = github().await;
    // Not there at the first look-up (a concurrent run opened it meanwhile).
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .and(query_param("head", format!("o:{BRANCH}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .and(query_param("head", format!("o:{BRANCH}")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!([pull(12, BRANCH, "open", false, "")])),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(label_exists())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(422).set_body_json(json!({
            "message": "Validation Failed",
            "errors": [{ "resource": "PullRequest", "code": "custom",
                         "message": format!("A pull request already exists for o:{BRANCH}.") }],
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
        })))
        .mount(&server)
        .await;
    labels_added(&server, 12).await;

    let pr = forge
        .create_pr(&request())
        .await
        .expect("existing PR returned");

    assert_eq!(
        (pr.number, pr.state, pr.created),
        (12, PrState::Open, false)
    );
    assert_eq!(
        count(&server, "POST", "/repos/o/r/pulls").await,
        1,
        "the refused create is not re-sent"
    );
    assert_eq!(
        count(&server, "POST", "/repos/o/r/issues/12/labels").await,
        1
    );
    assert_eq!(posts(&server).await, 3);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn existing_open_pr_is_reused_without_a_create() {
    let (server, forge) = github().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!([pull(21, BRANCH, "open", false, "")])),
        )
        .mount(&server)
        .await;
    labels_added(&server, 21).await;

    let pr = forge.create_pr(&request()).await.unwrap();

    assert_eq!((pr.number, pr.created), (21, false));
    assert_eq!(count(&server, "POST", "/repos/o/r/pulls").await, 0);
    assert_eq!(posts(&server).await, 1, "only the idempotent label add");
    assert_never_merged_approved_or_closed(&server).await;
}

/// A fake GitHub that performs the create but loses the answer (502 or a
/// late answer), as a proxy in front of GitHub can; the look-up sees the PR
/// once it was created.
#[derive(Clone)]
struct LosesTheAnswer {
    created: Arc<AtomicBool>,
    answer: ResponseTemplate,
}

impl Respond for LosesTheAnswer {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        self.created.store(true, Ordering::SeqCst);
        self.answer.clone()
    }
}

struct ListsOnceCreated(Arc<AtomicBool>);

impl Respond for ListsOnceCreated {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let listed = if self.0.load(Ordering::SeqCst) {
            json!([pull(31, BRANCH, "open", false, "")])
        } else {
            json!([])
        };
        ResponseTemplate::new(200).set_body_json(listed)
    }
}

async fn create_that_loses_its_answer(answer: ResponseTemplate, policy: RetryPolicy) -> MockServer {
    let (server, forge) = github().await;
    let forge = forge.with_retry_policy(policy);
    let created = Arc::new(AtomicBool::new(false));
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .and(query_param("head", format!("o:{BRANCH}")))
        .respond_with(ListsOnceCreated(created.clone()))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(label_exists())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(LosesTheAnswer { created, answer })
        .mount(&server)
        .await;
    labels_added(&server, 31).await;

    let pr = forge
        .create_pr(&request())
        .await
        .expect("the performed create is found");

    assert_eq!((pr.number, pr.state, pr.created), (31, PrState::Open, true));
    assert_eq!(
        count(&server, "POST", "/repos/o/r/pulls").await,
        1,
        "exactly one create reached the server"
    );
    assert_eq!(
        count(&server, "POST", "/repos/o/r/issues/31/labels").await,
        1
    );
    assert_never_merged_approved_or_closed(&server).await;
    server
}

#[tokio::test]
async fn create_answered_502_after_being_performed_is_found_not_resent() {
    let server = create_that_loses_its_answer(ResponseTemplate::new(502), fast_policy()).await;
    assert_eq!(posts(&server).await, 3);
}

#[tokio::test]
async fn create_that_timed_out_after_being_performed_is_found_not_resent() {
    let policy = RetryPolicy {
        request_timeout: Duration::from_millis(300),
        ..fast_policy()
    };
    let late = ResponseTemplate::new(201)
        .set_body_json(pull(31, BRANCH, "open", false, ""))
        .set_delay(Duration::from_secs(3));
    let server = create_that_loses_its_answer(late, policy).await;
    assert_eq!(posts(&server).await, 3);
}

#[tokio::test]
async fn create_that_failed_without_being_performed_is_resent_once() {
    let (server, forge) = github().await;
    nothing_found(&server).await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(label_exists())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(502))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pull(40, BRANCH, "open", false, "")))
        .mount(&server)
        .await;
    labels_added(&server, 40).await;

    let pr = forge.create_pr(&request()).await.unwrap();

    assert_eq!((pr.number, pr.created), (40, true));
    assert_eq!(
        count(&server, "POST", "/repos/o/r/pulls").await,
        2,
        "re-sent only after the look-up found nothing"
    );
    // Initial look-up by head, then one after the 502.
    assert_eq!(count(&server, "GET", "/repos/o/r/pulls").await, 2);
    assert_eq!(posts(&server).await, 4);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn create_pr_refused_with_other_4xx_fails_at_once() {
    let (server, forge) = github().await;
    nothing_found(&server).await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(label_exists())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(422).set_body_json(json!({
            "message": "Validation Failed",
            "errors": [{ "resource": "PullRequest", "field": "base", "code": "invalid" }],
        })))
        .mount(&server)
        .await;

    let err = forge.create_pr(&request()).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::Api { status: 422, path, .. } if path == "/repos/o/r/pulls"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("PullRequest base invalid"),
        "{err}"
    );
    assert_eq!(count(&server, "POST", "/repos/o/r/pulls").await, 1);
    assert_eq!(posts(&server).await, 2);
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn pr_body_over_the_limit_is_cut_not_rejected() {
    let (server, forge) = github().await;
    nothing_found(&server).await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(label_exists())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .respond_with(ResponseTemplate::new(201).set_body_json(pull(50, BRANCH, "open", false, "")))
        .mount(&server)
        .await;
    labels_added(&server, 50).await;
    let req = PrRequest {
        body: "x".repeat(BODY_LIMIT * 2),
        ..request()
    };

    forge.create_pr(&req).await.unwrap();

    let requests = server.received_requests().await.unwrap();
    let sent = post_bodies(&requests, "/repos/o/r/pulls")[0]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sent.chars().count(), BODY_LIMIT);
    assert!(sent.ends_with(&format!("{}\n", item_marker(KEY))));
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn issues_are_deduplicated_by_exact_title() {
    let (server, forge) = github().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .and(query_param("labels", "autopilot-found"))
        .and(query_param("state", "open"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            issue(2, "Flaky test in auth", "a PR with the same title", true),
            issue(4, "Flaky test in auth", "seen before", false),
            issue(6, "Flaky test in auth module", "", false),
        ])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/labels"))
        .respond_with(label_exists())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/issues"))
        .respond_with(ResponseTemplate::new(201).set_body_json(issue(
            11,
            "Slow query in report",
            "",
            false,
        )))
        .mount(&server)
        .await;

    let known = forge
        .find_or_create_issue("Flaky test in auth", "again", "autopilot-found")
        .await
        .unwrap();
    assert_eq!((known.number, known.created), (4, false));
    assert_eq!(posts(&server).await, 0, "a known title creates nothing");

    let new = forge
        .find_or_create_issue("Slow query in report", "details", "autopilot-found")
        .await
        .unwrap();
    assert_eq!(
        (new.number, new.created, new.title.as_str()),
        (11, true, "Slow query in report")
    );
    let requests = server.received_requests().await.unwrap();
    let sent = &post_bodies(&requests, "/repos/o/r/issues")[0];
    assert_eq!(sent["labels"], json!(["autopilot-found"]));
    assert_eq!(sent["title"], "Slow query in report");
    assert_eq!(count(&server, "POST", "/repos/o/r/issues").await, 1);
    assert_eq!(posts(&server).await, 2, "label + issue");
    assert_never_merged_approved_or_closed(&server).await;
}

#[tokio::test]
async fn issue_dedup_reads_every_page() {
    let (server, forge) = github().await;
    let first: Vec<Value> = (1..=100)
        .map(|n| issue(1000 - n, &format!("finding {n}"), "", false))
        .collect();
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .and(query_param("page", "1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(Value::Array(first)))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .and(query_param("page", "2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([issue(
            42,
            "Old finding",
            "",
            false
        )])))
        .mount(&server)
        .await;

    let found = forge
        .find_or_create_issue("Old finding", "", "autopilot-found")
        .await
        .unwrap();

    assert_eq!((found.number, found.created), (42, false));
    assert_eq!(count(&server, "GET", "/repos/o/r/issues").await, 2);
    assert_eq!(posts(&server).await, 0);
    assert_never_merged_approved_or_closed(&server).await;
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

/// SPEC §8: "The code has no call that merges, approves or closes a PR."
/// The wire checks above cover what the tests exercise; this covers the
/// source itself (comments excluded).
#[test]
fn forge_source_has_no_merge_approve_or_close_call() {
    let source =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/forge.rs")).unwrap();
    let code: String = source
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for forbidden in [
        "/merge",
        "/reviews",
        "APPROVE",
        "_put(",
        "_patch(",
        "_delete(",
        ".pulls(",
        "Method::",
        "\"closed\"",
    ] {
        assert!(
            !code.contains(forbidden),
            "src/forge.rs contains {forbidden:?}"
        );
    }
}

fn make_executable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
