//! The fake GitHub's CI (see [`super::github`]), as GitHub documents it:
//! check runs per commit (`GET .../commits/{sha}/check-runs`, paged, an
//! object `{total_count, check_runs}`), the combined status (`GET
//! .../commits/{sha}/status`), branch protection's required status checks
//! (404 when the branch is not protected, 403 when the token may not read
//! it), the rulesets that apply to a branch (`GET .../rules/branches/{b}`),
//! a job's log (`GET .../actions/jobs/{id}/logs` answering `302` to a
//! short-lived URL on ANOTHER server, [`LogServer`], that records whether a
//! token was sent there), a job's re-run, and GraphQL's
//! `markPullRequestReadyForReview`. Check runs and statuses answer with an
//! `ETag`, and `304 Not Modified` (no body) to a request whose
//! `If-None-Match` names the current one, as GitHub does for conditional
//! requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate, matchers::any};

/// The CI side of the fake repository.
#[derive(Default, Debug)]
pub struct Ci {
    /// Check runs in GitHub's shape (each with its `head_sha`), oldest first.
    pub check_runs: Vec<Value>,
    /// Legacy statuses per commit, oldest first (`context`, `state`, …).
    pub statuses: HashMap<String, Vec<Value>>,
    /// Branch protection's required contexts per branch; a branch not here
    /// is not protected (404).
    pub protection: HashMap<String, Vec<String>>,
    /// Reading protection is forbidden to the token (403), as for a token
    /// without admin rights on some plans.
    pub protection_forbidden: bool,
    /// Required contexts from rulesets, per branch (no entry: no rules, `[]`).
    pub rulesets: HashMap<String, Vec<String>>,
    /// Job logs by job id (the check run's id), served by the log server.
    pub logs: HashMap<u64, String>,
    /// The log server's base URL; `None`: logs answer 404.
    pub log_server: Option<String>,
    /// Job ids asked to run again, in order.
    pub reruns: Vec<u64>,
    /// PR numbers marked ready for review through GraphQL, in order.
    pub marked_ready: Vec<u64>,
    /// Ids handed to check runs.
    pub next_id: u64,
    /// The repository's workflows: the check runs every commit asked about
    /// gets, the first time it is asked about (as if a push had started them).
    pub auto: Vec<AutoCheck>,
    /// The conclusion of a job run again (`None`: the one it had).
    pub rerun_conclusion: Option<String>,
    /// The check-runs answer of a commit also lists the runs of every other
    /// commit (a stale check reported for an older head, as a proxy's cache
    /// or a misbehaving app may serve).
    pub leak_other_commits: bool,
    /// Requests for check runs or statuses answered `304 Not Modified`.
    pub not_modified: u32,
}

/// A check run the fake's "workflows" report for a commit (see [`Ci::auto`]).
#[derive(Debug, Clone)]
pub struct AutoCheck {
    pub name: String,
    /// `None`: the run stays `queued` (never conclusive).
    pub conclusion: Option<String>,
    pub summary: String,
    /// The job's log, served by the [`LogServer`].
    pub log: Option<String>,
    /// Its conclusion on the base branch's commit, when not `conclusion`
    /// (the fake must serve the bare repository to know that commit).
    pub on_base: Option<String>,
    /// (path, text): it succeeds on a commit whose file at `path` holds
    /// `text` (the fake must serve the bare repository), as a test suite
    /// does once the fault is fixed.
    pub fixed_by: Option<(String, String)>,
    /// (path, text): it fails only on a commit whose file at `path` holds
    /// `text` and succeeds on every other (the fake must serve the bare
    /// repository), as a lint job does that one change trips.
    pub failed_by: Option<(String, String)>,
}

impl AutoCheck {
    /// A run of `name` ending in `conclusion` (`None`: stays queued).
    pub fn new(name: &str, conclusion: Option<&str>) -> AutoCheck {
        AutoCheck {
            name: name.into(),
            conclusion: conclusion.map(str::to_string),
            summary: String::new(),
            log: None,
            on_base: None,
            fixed_by: None,
            failed_by: None,
        }
    }
    /// Succeeding on a commit whose `path` holds `text` (see [`AutoCheck::fixed_by`]).
    pub fn fixed_by(mut self, path: &str, text: &str) -> AutoCheck {
        self.fixed_by = Some((path.into(), text.into()));
        self
    }
    /// Failing only on a commit whose `path` holds `text`, else succeeding
    /// (see [`AutoCheck::failed_by`]).
    pub fn failed_by(mut self, path: &str, text: &str) -> AutoCheck {
        self.failed_by = Some((path.into(), text.into()));
        self
    }
    /// Ending in `conclusion` on the base branch's commit instead.
    pub fn on_base(mut self, conclusion: &str) -> AutoCheck {
        self.on_base = Some(conclusion.into());
        self
    }
    /// With `summary` as its output's summary.
    pub fn summary(mut self, summary: &str) -> AutoCheck {
        self.summary = summary.into();
        self
    }
    /// With `log` as its job's log.
    pub fn log(mut self, log: &str) -> AutoCheck {
        self.log = Some(log.into());
        self
    }
}

impl Ci {
    /// Adds a check run for commit `sha`: `status` (`queued`,
    /// `in_progress`, `completed`) and `conclusion` (`success`, `failure`…,
    /// `None` while not completed), by GitHub Actions, with `summary` as its
    /// output. Returns its id (also its job's id).
    pub fn add_run(
        &mut self,
        base: &str,
        sha: &str,
        name: &str,
        status: &str,
        conclusion: Option<&str>,
        summary: &str,
    ) -> u64 {
        self.next_id += 1;
        let id = 1000 + self.next_id;
        self.check_runs.push(json!({
            "id": id, "name": name, "head_sha": sha, "status": status, "conclusion": conclusion,
            "html_url": format!("{base}/owner/repo/actions/runs/1/job/{id}"),
            "details_url": format!("{base}/owner/repo/actions/runs/1/job/{id}"),
            "app": {"slug": "github-actions"},
            "output": {"title": if summary.is_empty() { Value::Null } else { json!(name) }, "summary": summary, "text": null},
        }));
        id
    }

    /// The combined status of `sha` as GitHub answers it.
    fn combined(&self, sha: &str) -> Value {
        let mut latest: Vec<Value> = Vec::new();
        for s in self.statuses.get(sha).into_iter().flatten().rev() {
            if !latest.iter().any(|l| l["context"] == s["context"]) {
                latest.push(s.clone());
            }
        }
        let state = if latest
            .iter()
            .any(|s| s["state"] == "failure" || s["state"] == "error")
        {
            "failure"
        } else if latest.is_empty() || latest.iter().any(|s| s["state"] == "pending") {
            "pending"
        } else {
            "success"
        };
        json!({"state": state, "sha": sha, "total_count": latest.len(), "statuses": latest})
    }
}

/// The fake's answer to a CI request under the repository (`rest` is the
/// path after `/repos/owner/repo`), or `None` when it is not one.
pub fn respond(
    ci: &mut Ci,
    (base_sha, git_dir): (Option<&str>, Option<&std::path::Path>),
    req: &Request,
    method: &str,
    rest: &str,
    paged: impl Fn(Vec<Value>) -> (Vec<Value>, Option<String>),
) -> Option<ResponseTemplate> {
    let not_found = || {
        ResponseTemplate::new(404).set_body_json(
            json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
        )
    };
    if method == "GET" && rest.starts_with("/commits/") && rest.ends_with("/check-runs") {
        let sha = rest
            .trim_start_matches("/commits/")
            .trim_end_matches("/check-runs");
        let base = req.url.origin().ascii_serialization();
        if !ci.check_runs.iter().any(|r| r["head_sha"] == sha) {
            for mut a in ci.auto.clone() {
                if base_sha == Some(sha) && a.on_base.is_some() {
                    a.conclusion = a.on_base.clone();
                }
                if let Some((path, text)) = &a.fixed_by
                    && git_dir.is_some_and(|d| file_at(d, sha, path).contains(text.as_str()))
                {
                    a.conclusion = Some("success".into());
                    a.log = None;
                }
                if let Some((path, text)) = &a.failed_by
                    && !git_dir.is_some_and(|d| file_at(d, sha, path).contains(text.as_str()))
                {
                    a.conclusion = Some("success".into());
                    a.log = None;
                    a.summary.clear();
                }
                let status = if a.conclusion.is_some() {
                    "completed"
                } else {
                    "queued"
                };
                let id = ci.add_run(
                    &base,
                    sha,
                    &a.name,
                    status,
                    a.conclusion.as_deref(),
                    &a.summary,
                );
                if let Some(log) = a.log {
                    ci.logs.insert(id, log);
                }
            }
        }
        let leak = ci.leak_other_commits;
        // GitHub lists the latest run of each name for the commit (`filter=latest`).
        let mut latest: Vec<Value> = Vec::new();
        for r in ci
            .check_runs
            .iter()
            .rev()
            .filter(|r| leak || r["head_sha"] == sha)
        {
            if !latest.iter().any(|l| l["name"] == r["name"]) {
                latest.push(r.clone());
            }
        }
        let total = latest.len();
        let (items, link) = paged(latest);
        let body = json!({"total_count": total, "check_runs": items});
        return Some(conditional(ci, req, &body, link.as_deref()));
    }
    if method == "GET" && rest.starts_with("/commits/") && rest.ends_with("/status") {
        let sha = rest
            .trim_start_matches("/commits/")
            .trim_end_matches("/status");
        let body = ci.combined(sha);
        return Some(conditional(ci, req, &body, None));
    }
    if method == "GET"
        && rest.starts_with("/branches/")
        && rest.ends_with("/protection/required_status_checks")
    {
        let branch = rest
            .trim_start_matches("/branches/")
            .trim_end_matches("/protection/required_status_checks");
        if ci.protection_forbidden {
            return Some(ResponseTemplate::new(403).set_body_json(json!({"message": "Resource not accessible by personal access token", "documentation_url": "https://docs.github.com/rest/branches/branch-protection", "status": "403"})));
        }
        return Some(match ci.protection.get(branch) {
            Some(contexts) => {
                let checks: Vec<Value> = contexts.iter().map(|c| json!({"context": c, "app_id": null})).collect();
                ResponseTemplate::new(200).set_body_json(json!({"strict": false, "contexts": contexts, "checks": checks}))
            }
            None => ResponseTemplate::new(404).set_body_json(json!({"message": "Branch not protected", "documentation_url": "https://docs.github.com/rest/branches/branch-protection"})),
        });
    }
    if method == "GET" && rest.starts_with("/rules/branches/") {
        let branch = rest.trim_start_matches("/rules/branches/");
        let rules: Vec<Value> = match ci.rulesets.get(branch) {
            Some(names) => {
                let checks: Vec<Value> = names.iter().map(|c| json!({"context": c})).collect();
                vec![
                    json!({"type": "deletion", "ruleset_source_type": "Repository", "ruleset_source": "owner/repo", "ruleset_id": 7}),
                    json!({"type": "required_status_checks", "ruleset_source_type": "Repository", "ruleset_source": "owner/repo", "ruleset_id": 7, "parameters": {"strict_required_status_checks_policy": false, "required_status_checks": checks}}),
                ]
            }
            None => vec![],
        };
        let (items, link) = paged(rules);
        let mut t = ResponseTemplate::new(200).set_body_json(Value::Array(items));
        if let Some(link) = link {
            t = t.insert_header("link", link.as_str());
        }
        return Some(t);
    }
    if rest.starts_with("/actions/jobs/") {
        let id: u64 = rest
            .trim_start_matches("/actions/jobs/")
            .split('/')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let known = ci.check_runs.iter().any(|r| r["id"] == id);
        if method == "POST" && rest.ends_with("/rerun") {
            if !known {
                return Some(not_found());
            }
            ci.reruns.push(id);
            // GitHub runs the job again as a new check run of the same name.
            if let Some(old) = ci.check_runs.iter().find(|r| r["id"] == id).cloned() {
                ci.next_id += 1;
                let mut again = old.clone();
                again["id"] = json!(1000 + ci.next_id);
                if let Some(c) = &ci.rerun_conclusion {
                    again["conclusion"] = json!(c);
                }
                ci.check_runs.push(again);
            }
            return Some(ResponseTemplate::new(201).set_body_json(json!({})));
        }
        if method == "GET" && rest.ends_with("/logs") {
            return Some(match (&ci.log_server, ci.logs.contains_key(&id)) {
                (Some(server), true) => {
                    // A short-lived URL with its own signature, as GitHub hands out.
                    let to = format!("{server}/logs/{id}?sig=s3cr3t-signature&expires=300");
                    ResponseTemplate::new(302).insert_header("location", to.as_str())
                }
                _ => not_found(),
            });
        }
        let _ = req;
    }
    None
}

/// A 200 answer of `body` (and its `link`) with its `ETag`, or `304 Not
/// Modified` with the `ETag` alone when the request's `If-None-Match` names
/// it (GitHub: "conditional requests"; a weak validator, `W/"…"`).
fn conditional(ci: &mut Ci, req: &Request, body: &Value, link: Option<&str>) -> ResponseTemplate {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (body.to_string(), link).hash(&mut h);
    let etag = format!("W/\"{:016x}\"", h.finish());
    let asked = req
        .headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim() == etag));
    if asked {
        ci.not_modified += 1;
        return ResponseTemplate::new(304).insert_header("etag", etag.as_str());
    }
    let mut t = ResponseTemplate::new(200)
        .set_body_json(body)
        .insert_header("etag", etag.as_str());
    if let Some(link) = link {
        t = t.insert_header("link", link);
    }
    t
}

/// The text of `path` at commit `sha` in the bare repository `dir` ("" when
/// there is none).
fn file_at(dir: &std::path::Path, sha: &str, path: &str) -> String {
    std::process::Command::new("git")
        .args(["show", &format!("{sha}:{path}")])
        .current_dir(dir)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// GitHub's GraphQL endpoint: `markPullRequestReadyForReview` of a PR by its
/// `node_id`; anything else answers GraphQL's `errors`.
pub fn graphql(prs: &mut [Value], ci: &mut Ci, req: &Request) -> ResponseTemplate {
    if !req.headers.contains_key("authorization") {
        return ResponseTemplate::new(401).set_body_json(json!({"message": "This endpoint requires you to be authenticated.", "documentation_url": "https://docs.github.com/graphql/guides/forming-calls-with-graphql#authenticating-with-graphql"}));
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let query = body["query"].as_str().unwrap_or("");
    let id = body["variables"]["id"].as_str().unwrap_or("");
    if !query.contains("markPullRequestReadyForReview") {
        return ResponseTemplate::new(200).set_body_json(
            json!({"errors": [{"message": "this fake knows only markPullRequestReadyForReview"}]}),
        );
    }
    match prs.iter_mut().find(|p| p["node_id"] == id) {
        Some(p) => {
            p["draft"] = json!(false);
            ci.marked_ready.push(p["number"].as_u64().unwrap_or(0));
            ResponseTemplate::new(200).set_body_json(json!({"data": {"markPullRequestReadyForReview": {"pullRequest": {"isDraft": false}}}}))
        }
        None => ResponseTemplate::new(200).set_body_json(json!({"data": {"markPullRequestReadyForReview": null}, "errors": [{"type": "NOT_FOUND", "path": ["markPullRequestReadyForReview"], "message": format!("Could not resolve to a node with the global id of '{id}'")}]})),
    }
}

/// The other host GitHub's job-log URLs point at: it serves each job's log
/// at `/logs/{id}` and records every request's `Authorization` header.
pub struct LogServer {
    pub server: MockServer,
    /// The `Authorization` header of each request (`None`: none was sent).
    pub seen_auth: Arc<Mutex<Vec<Option<String>>>>,
}

struct LogResponder {
    state: Arc<Mutex<super::github::State>>,
    seen_auth: Arc<Mutex<Vec<Option<String>>>>,
    /// Answer every request with a redirect to itself (a loop).
    looping: bool,
}

impl Respond for LogResponder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let auth = req
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.seen_auth.lock().unwrap().push(auth);
        if self.looping {
            return ResponseTemplate::new(302).insert_header("location", req.url.as_str());
        }
        let id: u64 = req
            .url
            .path()
            .trim_start_matches("/logs/")
            .parse()
            .unwrap_or(0);
        match self.state.lock().unwrap().ci.logs.get(&id) {
            Some(text) => {
                ResponseTemplate::new(200).set_body_raw(text.clone().into_bytes(), "text/plain")
            }
            None => ResponseTemplate::new(404),
        }
    }
}

impl LogServer {
    /// Starts the log host for the fake behind `state`; with `looping`
    /// every answer redirects again.
    pub async fn start(state: Arc<Mutex<super::github::State>>, looping: bool) -> LogServer {
        let server = MockServer::start().await;
        let seen_auth = Arc::new(Mutex::new(Vec::new()));
        Mock::given(any())
            .respond_with(LogResponder {
                state: state.clone(),
                seen_auth: seen_auth.clone(),
                looping,
            })
            .mount(&server)
            .await;
        state.lock().unwrap().ci.log_server = Some(server.uri());
        LogServer { server, seen_auth }
    }
}

impl super::github::FakeGitHub {
    /// Reads or changes the fake's CI state.
    pub fn ci<R>(&self, f: impl FnOnce(&mut Ci) -> R) -> R {
        f(&mut self.state.lock().unwrap().ci)
    }

    /// Adds a GitHub Actions check run for `sha` (see [`Ci::add_run`]);
    /// returns its id, also its job's.
    pub fn add_check_run(
        &self,
        sha: &str,
        name: &str,
        status: &str,
        conclusion: Option<&str>,
        summary: &str,
    ) -> u64 {
        let base = self.uri();
        self.ci(|ci| ci.add_run(&base, sha, name, status, conclusion, summary))
    }

    /// Adds a legacy commit status of `context` in `state` (`pending`,
    /// `success`, `failure`, `error`) for `sha`.
    pub fn add_status(&self, sha: &str, context: &str, state: &str) {
        let base = self.uri();
        self.ci(|ci| {
            ci.statuses.entry(sha.to_string()).or_default().push(json!({
                "context": context, "state": state, "description": format!("{context} says {state}"),
                "target_url": format!("{base}/ci/{context}"),
            }));
        });
    }

    /// Protects `branch`, requiring `contexts` (branch protection).
    pub fn protect(&self, branch: &str, contexts: &[&str]) {
        let names = contexts.iter().map(|c| c.to_string()).collect();
        self.ci(|ci| ci.protection.insert(branch.to_string(), names));
    }

    /// A ruleset on `branch` requiring `contexts`.
    pub fn ruleset(&self, branch: &str, contexts: &[&str]) {
        let names = contexts.iter().map(|c| c.to_string()).collect();
        self.ci(|ci| ci.rulesets.insert(branch.to_string(), names));
    }

    /// Job `id`'s log text (served by the [`LogServer`]).
    pub fn job_log(&self, id: u64, text: &str) {
        self.ci(|ci| ci.logs.insert(id, text.to_string()));
    }

    /// Starts the other host job logs are redirected to.
    pub async fn log_server(&self) -> LogServer {
        LogServer::start(self.state.clone(), false).await
    }
}
