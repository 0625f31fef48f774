//! The one GitHub of the tests: wiremock with a stateful responder that
//! keeps PRs, issues and labels, so a second run sees what the first one
//! created, and that validates what GitHub's REST API validates (duplicate
//! PRs per `owner:branch`, title and body lengths, label colours). What the
//! real server (or a proxy in front of it) does on a bad day is programmed
//! per test with [`Fault`]s: 5xx, rate limits, redirects, lost or late
//! answers. Every request is recorded by wiremock.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate, matchers::any};

/// State of the fake repository `owner/repo`.
#[derive(Default, Debug)]
pub struct State {
    /// PRs and issues share GitHub's number space.
    pub next_number: u64,
    /// PR objects as GitHub returns them.
    pub prs: Vec<Value>,
    /// Issue objects.
    pub issues: Vec<Value>,
    /// Label names.
    pub labels: Vec<String>,
    /// Scripted failures: (method, path prefix, status) consumed in order.
    pub faults: Vec<(String, String, u16)>,
    /// Richer scripted failures, consumed in order after `faults`.
    pub scripted: Vec<Fault>,
    /// The `x-oauth-scopes` header of `GET /repos/owner/repo` (None: not sent,
    /// as for fine-grained tokens).
    pub scopes: Option<String>,
    /// The token may read but not push (`permissions.push: false`).
    pub read_only: bool,
    /// Delays of the answers to PR creations, consumed in order: the PR
    /// exists on the server while its creator still waits (crash tests).
    pub create_pr_delays: Vec<std::time::Duration>,
    /// The largest page served, whatever `per_page` asks (GitHub allows 100;
    /// a proxy or an Enterprise server may serve fewer). `None`: 100.
    pub page_cap: Option<usize>,
    /// `GET /pulls` ignores `head` and lists every PR, as GitHub does when
    /// `head` lacks its `owner:` prefix (and some proxies do always).
    pub ignore_head_filter: bool,
    /// Issues are switched off in the repository's settings: the issues
    /// endpoints answer 410 "Issues are disabled for this repo".
    pub issues_disabled: bool,
    /// The repository's former name: requests under `/repos/owner/{old}`
    /// are redirected as GitHub does after a rename or transfer (301 for
    /// GET, 307 for other verbs) to `/repositories/1/…`, query kept.
    pub renamed_from: Option<String>,
    /// The repository is archived: `archived: true` in its JSON, and every
    /// write answers 403 "Repository was archived so is read-only."
    pub archived: bool,
    /// The bare repository behind the fake (see [`FakeGitHub::serve_git`]):
    /// when set, a PR's `head.sha`/`base.sha` are its branches' commits and
    /// `mergeable` is computed by `git merge-tree`, as GitHub does.
    pub git_dir: Option<std::path::PathBuf>,
    /// `mergeable` / `mergeable_state` set by a test, per PR number; wins
    /// over the computed answer.
    pub mergeable: std::collections::HashMap<u64, (Option<bool>, String)>,
    /// How many more `GET /pulls/N` answers say `mergeable: null` (GitHub
    /// still computing), per PR number.
    pub mergeable_nulls: std::collections::HashMap<u64, u32>,
    /// Reviews per PR number, in GitHub's shape.
    pub reviews: std::collections::HashMap<u64, Vec<Value>>,
    /// Review (line) comments per PR number.
    pub review_comments: std::collections::HashMap<u64, Vec<Value>>,
    /// Conversation comments per PR or issue number.
    pub issue_comments: std::collections::HashMap<u64, Vec<Value>>,
    /// The login `GET /user` answers for the token (default `nightshift-bot`);
    /// comments the client posts carry it.
    pub login: Option<String>,
    /// Instants handed out to reviews and comments, strictly increasing.
    pub clock: u32,
    /// The repository's CI: check runs, statuses, required checks, job
    /// logs (see [`super::github_ci`]).
    pub ci: super::github_ci::Ci,
}

/// The body of a scripted failure when GitHub's `{"message": …}` is not
/// what the real server sent.
#[derive(Debug, Clone)]
pub enum FaultBody {
    /// A whole JSON body (with `errors`, `documentation_url`, …).
    Json(Value),
    /// Raw bytes with a content type: a load balancer's HTML page, an empty
    /// body, a proxy's plain text.
    Raw { content_type: String, text: String },
}

/// A scripted failure: the first request matching `method` and `path`
/// prefix gets `status` with `headers` and `message`. With `after_effect`
/// the request is performed first and only its answer is replaced (a create
/// whose answer was lost); with `delay_ms` the answer comes that late; with
/// `times` it answers that many matching requests (a persistent outage).
#[derive(Debug, Clone, Default)]
pub struct Fault {
    /// How many matching requests get this answer; `None`: one.
    pub times: Option<u32>,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub message: String,
    pub after_effect: bool,
    pub delay_ms: u64,
    /// Replaces the `{"message": …}` body.
    pub body: Option<FaultBody>,
}

impl Fault {
    /// A fault answering `status` to the next `method path…` request.
    pub fn new(method: &str, path: &str, status: u16) -> Fault {
        Fault {
            method: method.into(),
            path: path.into(),
            status,
            message: "Server Error".into(),
            ..Fault::default()
        }
    }
    /// Adds a response header.
    pub fn header(mut self, k: &str, v: &str) -> Fault {
        self.headers.push((k.into(), v.into()));
        self
    }
    /// Sets GitHub's message.
    pub fn message(mut self, m: &str) -> Fault {
        self.message = m.into();
        self
    }
    /// Performs the request, then answers with the fault.
    pub fn after_effect(mut self) -> Fault {
        self.after_effect = true;
        self
    }
    /// Answers the next `n` matching requests, not only the first.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = Some(n);
        self
    }
    /// Answers every matching request from now on (a persistent failure).
    pub fn always(self) -> Fault {
        self.times(u32::MAX)
    }
    /// Delays the answer.
    pub fn delay_ms(mut self, ms: u64) -> Fault {
        self.delay_ms = ms;
        self
    }
    /// Answers this whole JSON body instead of `{"message": …}`.
    pub fn json(mut self, body: Value) -> Fault {
        self.body = Some(FaultBody::Json(body));
        self
    }
    /// Answers raw text of `content_type` (HTML pages, empty bodies).
    pub fn raw(mut self, content_type: &str, text: &str) -> Fault {
        self.body = Some(FaultBody::Raw {
            content_type: content_type.into(),
            text: text.into(),
        });
        self
    }
}

/// The fake repository's object as GitHub embeds it in `head.repo` and
/// `base.repo` (id 1 is `owner/repo`; forks get other ids).
fn repo_json(id: u64, owner: &str) -> Value {
    json!({"id": id, "name": "repo", "full_name": format!("{owner}/repo"), "owner": {"login": owner}, "fork": id != 1})
}

#[allow(clippy::too_many_arguments)]
/// A PR object in GitHub's shape: `head.repo` is where the branch lives
/// (the fake repository, or a fork), `base.repo` the fake repository.
fn pr_json(
    base_url: &str,
    n: u64,
    head_owner: &str,
    head_repo_id: u64,
    head: &str,
    base: &Value,
    title: &Value,
    body: &Value,
    labels: Vec<Value>,
) -> Value {
    json!({
        "number": n, "id": n, "node_id": format!("PR_kwfake{n}"), "state": "open", "title": title, "body": body,
        "html_url": format!("{base_url}/owner/repo/pull/{n}"), "url": format!("{base_url}/repos/owner/repo/pulls/{n}"),
        "user": {"login": head_owner},
        "head": {"ref": head, "label": format!("{head_owner}:{head}"), "sha": "0", "repo": repo_json(head_repo_id, head_owner)},
        "base": {"ref": base, "label": format!("owner:{}", base.as_str().unwrap_or("main")), "repo": repo_json(1, "owner")},
        "merged_at": null, "labels": labels, "pull_request": {"url": ""}, "draft": false
    })
}

/// One page of `list` as GitHub serves it: `per_page` (default 30, at most
/// the cap) items of page `page`, and a `Link` header whose `next` and `last`
/// URLs use GitHub's `/repositories/{id}/…` form.
fn paged(req: &Request, base_url: &str, list: Vec<Value>, cap: Option<usize>) -> ResponseTemplate {
    let (items, link) = page_of(req, base_url, list, cap);
    let mut t = ResponseTemplate::new(200).set_body_json(Value::Array(items));
    if let Some(link) = link {
        t = t.insert_header("link", link.as_str());
    }
    t
}

/// The items of the page `req` asks for, and its `Link` header (none when
/// the list fits one page); see [`paged`].
fn page_of(
    req: &Request,
    base_url: &str,
    list: Vec<Value>,
    cap: Option<usize>,
) -> (Vec<Value>, Option<String>) {
    let per_page = query(req, "per_page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(30)
        .clamp(1, cap.unwrap_or(100).min(100));
    let page: usize = query(req, "page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
        .max(1);
    let pages = list.len().div_ceil(per_page).max(1);
    let items: Vec<Value> = list
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    if pages <= 1 {
        return (items, None);
    }
    let prefix = if req.url.path().starts_with("/api/v3/") {
        "/api/v3"
    } else {
        ""
    };
    let path = api_path(req);
    let rest = path
        .trim_start_matches("/repos/owner/repo")
        .trim_start_matches("/repositories/1");
    let link = |p: usize| {
        let mut q: Vec<(String, String)> = req
            .url
            .query_pairs()
            .filter(|(k, _)| k != "page" && k != "per_page")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        q.push(("per_page".into(), per_page.to_string()));
        q.push(("page".into(), p.to_string()));
        let qs: Vec<String> = q
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    v.replace('%', "%25")
                        .replace(':', "%3A")
                        .replace('/', "%2F")
                        .replace(' ', "%20")
                )
            })
            .collect();
        format!("{base_url}{prefix}/repositories/1{rest}?{}", qs.join("&"))
    };
    let mut parts = Vec::new();
    if page < pages {
        parts.push(format!("<{}>; rel=\"next\"", link(page + 1)));
        parts.push(format!("<{}>; rel=\"last\"", link(pages)));
    }
    if page > 1 {
        parts.push(format!("<{}>; rel=\"prev\"", link(page - 1)));
        parts.push(format!("<{}>; rel=\"first\"", link(1)));
    }
    (items, (!parts.is_empty()).then(|| parts.join(", ")))
}

/// The login `GET /user` answers unless a test sets [`State::login`].
pub const DEFAULT_LOGIN: &str = "nightshift-bot";

/// N in `{prefix}N{suffix}`.
fn number_in(r: &str, prefix: &str, suffix: &str) -> u64 {
    r.trim_start_matches(prefix)
        .trim_end_matches(suffix)
        .parse()
        .unwrap_or(0)
}

/// The commit of branch `name` in the bare repository `dir`.
fn rev(dir: &std::path::Path, name: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--verify", "-q", &format!("refs/heads/{name}")])
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The next instant for a review or comment: now, plus one second per
/// earlier one, so their order is their time order (GitHub's times are whole
/// seconds).
fn tick(st: &mut State) -> String {
    st.clock += 1;
    (chrono::Utc::now() + chrono::Duration::seconds(i64::from(st.clock)))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The fake server.
pub struct FakeGitHub {
    pub server: MockServer,
    pub state: Arc<Mutex<State>>,
}

struct Responder {
    state: Arc<Mutex<State>>,
    base: String,
}

/// The request's path without a GitHub Enterprise `/api/v3` prefix (the
/// fake serves both `http://HOST/repos/…` and `http://HOST/api/v3/repos/…`).
fn api_path(req: &Request) -> String {
    let path = req.url.path();
    path.strip_prefix("/api/v3")
        .filter(|p| p.starts_with('/'))
        .unwrap_or(path)
        .to_string()
}

/// GitHub refuses PR and issue bodies over 65,536 characters.
fn body_too_long(body: &Value) -> bool {
    body["body"]
        .as_str()
        .is_some_and(|b| b.chars().count() > 65_536)
}

fn query(req: &Request, key: &str) -> Option<String> {
    req.url
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut st = self.state.lock().unwrap();
        let method = req.method.to_string();
        let path = api_path(req);
        if let Some(i) = st
            .faults
            .iter()
            .position(|(m, p, _)| *m == method && path.starts_with(p.as_str()))
        {
            let (_, _, status) = st.faults.remove(i);
            return ResponseTemplate::new(status).set_body_json(json!({"message": "Server Error"}));
        }
        if let Some(i) = st
            .scripted
            .iter()
            .position(|f| f.method == method && path.starts_with(f.path.as_str()))
        {
            let f = match st.scripted[i].times {
                Some(n) if n > 1 => {
                    st.scripted[i].times = Some(n - 1);
                    st.scripted[i].clone()
                }
                _ => st.scripted.remove(i),
            };
            if f.after_effect {
                drop(st);
                let _ = self.respond_ok(req);
            }
            let mut t = match &f.body {
                None => {
                    ResponseTemplate::new(f.status).set_body_json(json!({"message": f.message}))
                }
                Some(FaultBody::Json(v)) => {
                    ResponseTemplate::new(f.status).set_body_json(v.clone())
                }
                Some(FaultBody::Raw { content_type, text }) => ResponseTemplate::new(f.status)
                    .set_body_raw(text.clone().into_bytes(), content_type),
            };
            for (k, v) in &f.headers {
                t = t.insert_header(k.as_str(), v.as_str());
            }
            if f.delay_ms > 0 {
                t = t.set_delay(std::time::Duration::from_millis(f.delay_ms));
            }
            return t;
        }
        if let Some(old) = st.renamed_from.clone() {
            let prefix = format!("/repos/owner/{old}");
            if let Some(rest) = path
                .strip_prefix(&prefix)
                .filter(|r| r.is_empty() || r.starts_with('/'))
            {
                let api = if req.url.path().starts_with("/api/v3/") {
                    "/api/v3"
                } else {
                    ""
                };
                let query = req.url.query().map(|q| format!("?{q}")).unwrap_or_default();
                let to = format!("{}{api}/repositories/1{rest}{query}", self.base);
                let (status, message) = if method == "GET" {
                    (301, "Moved Permanently")
                } else {
                    (307, "Temporary Redirect")
                };
                return ResponseTemplate::new(status)
                    .insert_header("location", to.as_str())
                    .set_body_json(json!({"message": message, "url": to, "documentation_url": "https://docs.github.com/v3/#http-redirects"}));
            }
        }
        drop(st);
        self.respond_ok(req)
    }
}

impl Responder {
    /// PR `p` as `GET /pulls/N` answers it: with the branches' commits and
    /// `mergeable` from the bare repository when one is served, a test's
    /// `mergeable` if set, and `null` while GitHub is still computing.
    fn detail(&self, st: &mut State, mut p: Value) -> Value {
        let n = p["number"].as_u64().unwrap_or(0);
        let open = p["state"] == "open";
        if let Some(dir) = st.git_dir.clone() {
            let head = p["head"]["ref"].as_str().unwrap_or("").to_string();
            let base = p["base"]["ref"].as_str().unwrap_or("main").to_string();
            if let Some(sha) = rev(&dir, &head) {
                p["head"]["sha"] = json!(sha);
            }
            if let Some(sha) = rev(&dir, &base) {
                p["base"]["sha"] = json!(sha);
            }
            if open {
                let clean = std::process::Command::new("git")
                    .args([
                        "merge-tree",
                        "--write-tree",
                        &format!("refs/heads/{base}"),
                        &format!("refs/heads/{head}"),
                    ])
                    .current_dir(&dir)
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(true);
                p["mergeable"] = json!(clean);
                p["mergeable_state"] = json!(if clean { "clean" } else { "dirty" });
            }
        } else if open {
            p["mergeable"] = json!(true);
            p["mergeable_state"] = json!("clean");
        }
        if let Some((m, state)) = st.mergeable.get(&n) {
            p["mergeable"] = json!(m);
            p["mergeable_state"] = json!(state);
        }
        if let Some(left) = st.mergeable_nulls.get_mut(&n).filter(|l| **l > 0) {
            *left -= 1;
            p["mergeable"] = Value::Null;
            p["mergeable_state"] = json!("unknown");
        }
        p
    }

    /// The fake repository's normal behaviour.
    fn respond_ok(&self, req: &Request) -> ResponseTemplate {
        let mut st = self.state.lock().unwrap();
        let method = req.method.to_string();
        let path = api_path(req);
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        if method == "GET" && path == "/user" {
            let login = st.login.clone().unwrap_or_else(|| DEFAULT_LOGIN.into());
            return ResponseTemplate::new(200)
                .set_body_json(json!({"login": login, "id": 99, "type": "User"}));
        }
        if method == "POST" && path == "/graphql" {
            let st = &mut *st;
            return super::github_ci::graphql(&mut st.prs, &mut st.ci, req);
        }
        // GitHub's pagination links name the repository by id.
        let Some(rest) = path
            .strip_prefix("/repos/owner/repo")
            .or_else(|| path.strip_prefix("/repositories/1"))
        else {
            return ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}));
        };
        if st.archived && method != "GET" {
            return ResponseTemplate::new(403).set_body_json(json!({"message": "Repository was archived so is read-only.", "documentation_url": "https://docs.github.com/rest", "status": "403"}));
        }
        if st.issues_disabled && (rest == "/issues" || rest.starts_with("/issues?")) {
            return ResponseTemplate::new(410).set_body_json(json!({"message": "Issues are disabled for this repo", "documentation_url": "https://docs.github.com/v3/issues/"}));
        }
        let cap = st.page_cap;
        let page = |list| page_of(req, &self.base, list, cap);
        // The base branch's commit, for a workflow that ends otherwise there.
        let main = (rest.ends_with("/check-runs"))
            .then(|| st.git_dir.as_ref().and_then(|d| rev(d, "main")))
            .flatten();
        let git = st.git_dir.clone();
        if let Some(t) = super::github_ci::respond(
            &mut st.ci,
            (main.as_deref(), git.as_deref()),
            req,
            &method,
            rest,
            page,
        ) {
            return t;
        }
        match (method.as_str(), rest) {
            ("GET", "") => {
                let mut t = ResponseTemplate::new(200).set_body_json(json!({"full_name": "owner/repo", "default_branch": "main", "archived": st.archived, "permissions": {"push": !st.read_only, "admin": false}}));
                if let Some(s) = &st.scopes {
                    t = t.insert_header("x-oauth-scopes", s.as_str());
                }
                t
            }
            ("GET", r) if r.starts_with("/labels/") => {
                let name = r.trim_start_matches("/labels/");
                if st.labels.iter().any(|l| l == name) {
                    ResponseTemplate::new(200).set_body_json(json!({"name": name}))
                } else {
                    ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"}))
                }
            }
            ("GET", r) if r.starts_with("/pulls/") && r.ends_with("/reviews") => {
                let n = number_in(r, "/pulls/", "/reviews");
                let list = st.reviews.get(&n).cloned().unwrap_or_default();
                paged(req, &self.base, list, st.page_cap)
            }
            ("GET", r) if r.starts_with("/pulls/") && r.ends_with("/comments") => {
                let n = number_in(r, "/pulls/", "/comments");
                let list = st.review_comments.get(&n).cloned().unwrap_or_default();
                paged(req, &self.base, list, st.page_cap)
            }
            ("GET", r) if r.starts_with("/issues/") && r.ends_with("/comments") => {
                let n = number_in(r, "/issues/", "/comments");
                let list = st.issue_comments.get(&n).cloned().unwrap_or_default();
                paged(req, &self.base, list, st.page_cap)
            }
            ("POST", r) if r.starts_with("/issues/") && r.ends_with("/comments") => {
                let n = number_in(r, "/issues/", "/comments");
                let exists = st
                    .prs
                    .iter()
                    .chain(st.issues.iter())
                    .any(|v| v["number"] == n);
                if !exists {
                    return ResponseTemplate::new(404)
                        .set_body_json(json!({"message": "Not Found"}));
                }
                let login = st.login.clone().unwrap_or_else(|| DEFAULT_LOGIN.into());
                let at = tick(&mut st);
                let id = st.issue_comments.values().map(Vec::len).sum::<usize>() + 1;
                let c = json!({"id": id, "body": body["body"], "user": {"login": login}, "author_association": "COLLABORATOR", "created_at": at, "html_url": format!("{}/owner/repo/pull/{n}#issuecomment-{id}", self.base)});
                st.issue_comments.entry(n).or_default().push(c.clone());
                ResponseTemplate::new(201).set_body_json(c)
            }
            ("PATCH", r) if r.starts_with("/pulls/") => {
                let n: u64 = r.trim_start_matches("/pulls/").parse().unwrap_or(0);
                let Some(p) = st.prs.iter_mut().find(|p| p["number"] == n) else {
                    return ResponseTemplate::new(404)
                        .set_body_json(json!({"message": "Not Found"}));
                };
                for key in ["body", "title", "state", "base"] {
                    if let Some(v) = body.get(key) {
                        p[key] = v.clone();
                    }
                }
                let p = p.clone();
                ResponseTemplate::new(200).set_body_json(self.detail(&mut st, p))
            }
            ("GET", r) if r.starts_with("/pulls/") => {
                let n: u64 = r.trim_start_matches("/pulls/").parse().unwrap_or(0);
                if let Some(p) = st.prs.iter().find(|p| p["number"] == n).cloned() {
                    return ResponseTemplate::new(200).set_body_json(self.detail(&mut st, p));
                }
                match st.prs.iter().find(|p| p["number"] == n) {
                    Some(p) => ResponseTemplate::new(200).set_body_json(p.clone()),
                    None => {
                        ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"}))
                    }
                }
            }
            ("POST", "/labels") => {
                let name = body["name"].as_str().unwrap_or("").to_string();
                // GitHub wants six hex digits, without the leading `#`.
                let color_ok = body["color"]
                    .as_str()
                    .is_none_or(|c| c.len() == 6 && c.chars().all(|ch| ch.is_ascii_hexdigit()));
                if !color_ok {
                    return ResponseTemplate::new(422).set_body_json(json!({"message": "Validation Failed", "errors": [{"resource": "Label", "code": "invalid", "field": "color"}], "documentation_url": "https://docs.github.com/rest/issues/labels#create-a-label"}));
                }
                if st.labels.contains(&name) {
                    return ResponseTemplate::new(422).set_body_json(json!({"message": "Validation Failed", "errors": [{"resource": "Label", "code": "already_exists", "field": "name"}]}));
                }
                st.labels.push(name.clone());
                ResponseTemplate::new(201)
                    .set_body_json(json!({"name": name, "color": body["color"]}))
            }
            ("GET", "/pulls") => {
                // GitHub matches `head` against `owner:branch` (the head
                // label); the owner is the head repository's, so a fork's PR
                // from a branch of the same name is not listed.
                let head = query(req, "head").filter(|_| !st.ignore_head_filter);
                let state = query(req, "state").unwrap_or("open".into());
                let mut list: Vec<Value> = st
                    .prs
                    .iter()
                    .filter(|p| {
                        head.as_ref()
                            .is_none_or(|h| p["head"]["label"].as_str() == Some(h.as_str()))
                    })
                    .filter(|p| state == "all" || p["state"] == state)
                    .cloned()
                    .collect();
                list.sort_by_key(|v| std::cmp::Reverse(v["number"].as_u64()));
                paged(req, &self.base, list, st.page_cap)
            }
            ("POST", "/pulls") => {
                let head = body["head"].as_str().unwrap_or("").to_string();
                // GitHub's own limit on titles (PRs and issues alike).
                if body["title"]
                    .as_str()
                    .is_some_and(|t| t.chars().count() > 256)
                {
                    return ResponseTemplate::new(422).set_body_json(json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "field": "title", "message": "title is too long (maximum is 256 characters)"}]}));
                }
                if body_too_long(&body) {
                    return ResponseTemplate::new(422).set_body_json(json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "field": "body", "message": "body is too long (maximum is 65536 characters)"}]}));
                }
                // GitHub's duplicate check is per `owner:branch`: a fork's
                // branch of the same name does not count.
                if st.prs.iter().any(|p| {
                    p["head"]["label"] == format!("owner:{head}").as_str() && p["state"] == "open"
                }) {
                    return ResponseTemplate::new(422).set_body_json(json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "message": format!("A pull request already exists for owner:{head}.")}]}));
                }
                st.next_number += 1;
                let n = st.next_number;
                let mut pr = pr_json(
                    &self.base,
                    n,
                    "owner",
                    1,
                    &head,
                    &body["base"],
                    &body["title"],
                    &body["body"],
                    vec![],
                );
                // GitHub's `draft` flag, as the create asked for it.
                pr["draft"] = json!(body["draft"].as_bool().unwrap_or(false));
                st.prs.push(pr.clone());
                let answer = ResponseTemplate::new(201).set_body_json(pr);
                if st.create_pr_delays.is_empty() {
                    answer
                } else {
                    answer.set_delay(st.create_pr_delays.remove(0))
                }
            }
            ("GET", "/issues") => {
                let label = query(req, "labels");
                let state = query(req, "state").unwrap_or("open".into());
                let has_label = |v: &Value| {
                    label.as_ref().is_none_or(|l| {
                        v["labels"]
                            .as_array()
                            .is_some_and(|a| a.iter().any(|x| x["name"] == l.as_str()))
                    })
                };
                let mut list: Vec<Value> = st
                    .prs
                    .iter()
                    .chain(st.issues.iter())
                    .filter(|v| has_label(v))
                    .filter(|v| state == "all" || v["state"] == state)
                    .cloned()
                    .collect();
                list.sort_by_key(|v| std::cmp::Reverse(v["number"].as_u64()));
                paged(req, &self.base, list, st.page_cap)
            }
            ("POST", "/issues") => {
                if body["title"]
                    .as_str()
                    .is_some_and(|t| t.chars().count() > 256)
                {
                    return ResponseTemplate::new(422).set_body_json(json!({"message": "Validation Failed", "errors": [{"resource": "Issue", "code": "custom", "field": "title", "message": "title is too long (maximum is 256 characters)"}]}));
                }
                if body_too_long(&body) {
                    return ResponseTemplate::new(422).set_body_json(json!({"message": "Validation Failed", "errors": [{"resource": "Issue", "code": "custom", "field": "body", "message": "body is too long (maximum is 65536 characters)"}]}));
                }
                st.next_number += 1;
                let n = st.next_number;
                let labels: Vec<Value> = body["labels"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|l| json!({"name": l}))
                    .collect();
                let issue = json!({"number": n, "id": n, "state": "open", "title": body["title"], "body": body["body"], "labels": labels, "html_url": format!("{}/owner/repo/issues/{n}", self.base)});
                st.issues.push(issue.clone());
                ResponseTemplate::new(201).set_body_json(issue)
            }
            ("POST", r) if r.starts_with("/issues/") && r.ends_with("/labels") => {
                let n: u64 = r
                    .trim_start_matches("/issues/")
                    .trim_end_matches("/labels")
                    .parse()
                    .unwrap_or(0);
                let names: Vec<Value> = body["labels"].as_array().cloned().unwrap_or_default();
                let st = &mut *st;
                let target = st
                    .prs
                    .iter_mut()
                    .chain(st.issues.iter_mut())
                    .find(|v| v["number"] == n);
                match target {
                    Some(v) => {
                        let mut ls = v["labels"].as_array().cloned().unwrap_or_default();
                        for name in names {
                            if !ls.iter().any(|l| l["name"] == name) {
                                ls.push(json!({"name": name}));
                            }
                        }
                        v["labels"] = Value::Array(ls.clone());
                        ResponseTemplate::new(200).set_body_json(Value::Array(ls))
                    }
                    None => {
                        ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"}))
                    }
                }
            }
            _ => ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"})),
        }
    }
}

impl FakeGitHub {
    /// Starts the server for `owner/repo`.
    pub async fn start() -> FakeGitHub {
        let server = MockServer::start().await;
        let state = Arc::new(Mutex::new(State::default()));
        Mock::given(any())
            .respond_with(Responder {
                state: state.clone(),
                base: server.uri(),
            })
            .mount(&server)
            .await;
        FakeGitHub { server, state }
    }

    /// The API base URL for `GITHUB_API_URL`.
    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// Every request received: (method, path?query, body).
    pub async fn requests(&self) -> Vec<(String, String, String)> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                (
                    r.method.to_string(),
                    format!(
                        "{}{}",
                        r.url.path(),
                        r.url.query().map(|q| format!("?{q}")).unwrap_or_default()
                    ),
                    String::from_utf8_lossy(&r.body).into_owned(),
                )
            })
            .collect()
    }

    /// Panics if any request merged, approved or closed a PR (docs/github.md).
    pub async fn assert_never_merged_approved_or_closed(&self) {
        for (m, p, b) in self.requests().await {
            assert!(
                !(m == "PUT" && p.ends_with("/merge")),
                "merge call: {m} {p}"
            );
            assert!(
                !(m == "POST" && p.contains("/reviews")),
                "review call: {m} {p}"
            );
            assert!(
                !(m == "PATCH" && b.contains("closed")),
                "close call: {m} {p} {b}"
            );
        }
    }

    /// Marks PR `n` merged (as a person would in the morning).
    pub fn merge(&self, n: u64) {
        let mut st = self.state.lock().unwrap();
        if let Some(p) = st.prs.iter_mut().find(|p| p["number"] == n) {
            p["state"] = json!("closed");
            p["merged_at"] = json!("2026-12-01T08:00:00Z");
        }
    }

    /// Closes PR `n` unmerged (as a person rejecting it would).
    pub fn close(&self, n: u64) {
        self.edit(n, |p| p["state"] = json!("closed"));
    }

    /// Changes PR or issue `n` in place (its title, body, state…), as a
    /// person editing it on GitHub would.
    pub fn edit(&self, n: u64, change: impl FnOnce(&mut Value)) {
        let mut st = self.state.lock().unwrap();
        let st = &mut *st;
        let found = st
            .prs
            .iter_mut()
            .chain(st.issues.iter_mut())
            .find(|v| v["number"] == n);
        change(found.unwrap_or_else(|| panic!("no PR or issue #{n} in the fake")));
    }

    /// PRs created so far.
    pub fn prs(&self) -> Vec<Value> {
        self.state.lock().unwrap().prs.clone()
    }

    /// Issues (not PRs) created so far, including those added by [`FakeGitHub::add_issue`].
    pub fn issues(&self) -> Vec<Value> {
        self.state.lock().unwrap().issues.clone()
    }

    /// Adds an open PR from `head_owner`'s fork (`head_owner/repo`, a branch
    /// named `head`) with `body` and `labels`; returns its number. A fork's
    /// branch may carry any name, nightshift's included.
    pub fn add_fork_pr(&self, head_owner: &str, head: &str, body: &str, labels: &[&str]) -> u64 {
        let mut st = self.state.lock().unwrap();
        st.next_number += 1;
        let n = st.next_number;
        let labels = labels.iter().map(|l| json!({"name": l})).collect();
        let pr = pr_json(
            &self.server.uri(),
            n,
            head_owner,
            1000 + n,
            head,
            &json!("main"),
            &json!("a contributor's PR"),
            &json!(body),
            labels,
        );
        st.prs.push(pr);
        n
    }

    /// Adds an open PR of the fake repository itself from branch `head` with
    /// `body` and `labels`, as an earlier run (or a person) opened it;
    /// returns its number.
    pub fn add_pr(&self, head: &str, body: &str, labels: &[&str]) -> u64 {
        let mut st = self.state.lock().unwrap();
        st.next_number += 1;
        let n = st.next_number;
        let labels = labels.iter().map(|l| json!({"name": l})).collect();
        let pr = pr_json(
            &self.server.uri(),
            n,
            "owner",
            1,
            head,
            &json!("main"),
            &json!(format!("PR {n}")),
            &json!(body),
            labels,
        );
        st.prs.push(pr);
        n
    }

    /// Adds an issue as a person would have filed it; returns its number.
    pub fn add_issue(&self, title: &str, label: &str, state: &str) -> u64 {
        let mut st = self.state.lock().unwrap();
        st.next_number += 1;
        let n = st.next_number;
        if !st.labels.iter().any(|l| l == label) {
            st.labels.push(label.to_string());
        }
        st.issues.push(json!({"number": n, "id": n, "state": state, "title": title, "body": "", "labels": [{"name": label}], "html_url": format!("https://github.invalid/owner/repo/issues/{n}")}));
        n
    }

    /// Serves the bare repository `dir` behind the fake: PRs' `head.sha`
    /// and `base.sha` are its branches' commits, and `mergeable` is whether
    /// `git merge-tree` merges head into base without conflict.
    pub fn serve_git(&self, dir: &std::path::Path) {
        self.state.lock().unwrap().git_dir = Some(dir.to_path_buf());
    }

    /// Sets PR `n`'s `mergeable` (`None`: null) and `mergeable_state`
    /// (`clean`, `dirty`, `blocked`, `unknown`…), over any computed answer.
    pub fn set_mergeable(&self, n: u64, mergeable: Option<bool>, state: &str) {
        self.state
            .lock()
            .unwrap()
            .mergeable
            .insert(n, (mergeable, state.to_string()));
    }

    /// The next `count` reads of PR `n` answer `mergeable: null`, as GitHub
    /// does while it computes the merge after a change.
    pub fn computing(&self, n: u64, count: u32) {
        self.state.lock().unwrap().mergeable_nulls.insert(n, count);
    }

    /// `login` submits a review of PR `n` in `state` (`CHANGES_REQUESTED`,
    /// `APPROVED`, `COMMENTED`) with `body` and line comments
    /// `(path, line, body)`, as GitHub records a review with comments; the
    /// reviewer is a `MEMBER` of the repository (see
    /// [`FakeGitHub::add_review_as`]).
    pub fn add_review(
        &self,
        n: u64,
        login: &str,
        state: &str,
        body: &str,
        comments: &[(&str, u64, &str)],
    ) {
        self.add_review_as(n, login, Some("MEMBER"), state, body, comments);
    }

    /// As [`FakeGitHub::add_review`], by a reviewer whose
    /// `author_association` is `association` (`OWNER`, `MEMBER`,
    /// `COLLABORATOR`, `CONTRIBUTOR`, `FIRST_TIME_CONTRIBUTOR`,
    /// `FIRST_TIMER`, `MANNEQUIN`, `NONE`; `None`: the field is left out),
    /// on the review and its line comments, each with its `html_url`.
    pub fn add_review_as(
        &self,
        n: u64,
        login: &str,
        association: Option<&str>,
        state: &str,
        body: &str,
        comments: &[(&str, u64, &str)],
    ) {
        let base = self.server.uri();
        let mut st = self.state.lock().unwrap();
        let at = tick(&mut st);
        let id = st.reviews.values().map(Vec::len).sum::<usize>() + 1;
        let mut review = json!({"id": id, "user": {"login": login}, "state": state, "body": body, "submitted_at": at, "commit_id": "0", "html_url": format!("{base}/owner/repo/pull/{n}#pullrequestreview-{id}")});
        if let Some(a) = association {
            review["author_association"] = json!(a);
        }
        st.reviews.entry(n).or_default().push(review);
        for (path, line, text) in comments {
            let cid = st.review_comments.values().map(Vec::len).sum::<usize>() + 1;
            let mut c = json!({"id": cid, "pull_request_review_id": id, "user": {"login": login}, "path": path, "line": line, "original_line": line, "body": text, "created_at": at, "html_url": format!("{base}/owner/repo/pull/{n}#discussion_r{cid}")});
            if let Some(a) = association {
                c["author_association"] = json!(a);
            }
            st.review_comments.entry(n).or_default().push(c);
        }
    }

    /// `login` writes a conversation comment on PR or issue `n`, as a
    /// `MEMBER` of the repository (see [`FakeGitHub::add_comment_as`]).
    pub fn add_comment(&self, n: u64, login: &str, body: &str) {
        self.add_comment_as(n, login, Some("MEMBER"), body);
    }

    /// As [`FakeGitHub::add_comment`], by an author whose
    /// `author_association` is `association` (`None`: the field is left
    /// out), with the comment's `html_url`.
    pub fn add_comment_as(&self, n: u64, login: &str, association: Option<&str>, body: &str) {
        let base = self.server.uri();
        let mut st = self.state.lock().unwrap();
        let at = tick(&mut st);
        let id = st.issue_comments.values().map(Vec::len).sum::<usize>() + 1;
        let mut c = json!({"id": id, "user": {"login": login}, "body": body, "created_at": at, "html_url": format!("{base}/owner/repo/pull/{n}#issuecomment-{id}")});
        if let Some(a) = association {
            c["author_association"] = json!(a);
        }
        st.issue_comments.entry(n).or_default().push(c);
    }

    /// Dates every review, line comment and conversation comment of PR `n`
    /// not written by nightshift's own account at `at` (RFC 3339), as if a
    /// person wrote them then (a test's "this morning").
    pub fn date_feedback(&self, n: u64, at: &str) {
        let mut guard = self.state.lock().unwrap();
        let st = &mut *guard;
        let me = st.login.clone().unwrap_or_else(|| DEFAULT_LOGIN.into());
        let theirs = |v: &Value| v["user"]["login"] != me.as_str();
        for r in st
            .reviews
            .entry(n)
            .or_default()
            .iter_mut()
            .filter(|v| theirs(v))
        {
            r["submitted_at"] = json!(at);
        }
        for map in [&mut st.review_comments, &mut st.issue_comments] {
            for c in map.entry(n).or_default().iter_mut().filter(|v| theirs(v)) {
                c["created_at"] = json!(at);
            }
        }
    }

    /// Conversation comments of PR or issue `n` so far.
    pub fn comments(&self, n: u64) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .issue_comments
            .get(&n)
            .cloned()
            .unwrap_or_default()
    }

    /// Puts label `name` on PR or issue `n`, as a person would.
    pub fn label(&self, n: u64, name: &str) {
        let mut st = self.state.lock().unwrap();
        let st = &mut *st;
        if let Some(v) = st
            .prs
            .iter_mut()
            .chain(st.issues.iter_mut())
            .find(|v| v["number"] == n)
        {
            let mut ls = v["labels"].as_array().cloned().unwrap_or_default();
            ls.push(json!({"name": name}));
            v["labels"] = Value::Array(ls);
        }
    }
}
