//! GitHub, the forge where an item's work ends up as a pull request (SPEC §8).
//!
//! This module finds which repository and token to use, looks pull requests
//! and issues up, and creates them at most once: a create that failed or timed
//! out is never re-sent before a look-up has shown that the server did not
//! perform it anyway. Every transient failure (5xx, 429, secondary rate limit)
//! goes through one retry policy ([`RetryPolicy`]) that honours `retry-after`
//! and `x-ratelimit-reset` and never waits past the run's deadline.
//!
//! It is not a GitHub client library: it speaks only the handful of endpoints
//! nightshift needs, through octocrab's raw `GET`/`POST` calls so that status
//! codes and headers stay visible. It can only send `GET` and `POST` (see
//! `Verb`), and it has no call that merges, approves or closes a pull
//! request — by construction, not by convention (SPEC §8). It does not compose
//! PR bodies (that is the report's job); it only guards the body limit.

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use http::{HeaderMap, StatusCode};
use octocrab::Octocrab;
use serde::Deserialize;
use serde_json::{Value, json};

/// GitHub's cap on a pull request or issue body, in characters (SPEC §8).
pub const BODY_LIMIT: usize = 65_536;

/// Start of the hidden marker that carries an item's key in a PR body, so the
/// PR is found again even if its branch was renamed (SPEC §8).
pub const ITEM_MARKER_PREFIX: &str = "<!-- nightshift-item: ";

/// The public GitHub API, used when `GITHUB_API_URL` is unset (SPEC §8).
pub const DEFAULT_API_BASE: &str = "https://api.github.com";

/// How long `gh auth token` may take before it is killed and ignored.
pub const GH_TOKEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Colour given to a label nightshift creates (hex RGB without `#`).
pub const LABEL_COLOR: &str = "5319e7";

/// Description given to a label nightshift creates.
pub const LABEL_DESCRIPTION: &str = "opened by nightshift";

/// Page size for list calls (GitHub's maximum).
const PER_PAGE: usize = 100;

/// Upper bound on pages read by one list look-up (100 items each), so a huge
/// repository cannot turn a look-up into an unbounded crawl.
const MAX_PAGES: u32 = 10;

/// The hidden marker for one item key: `<!-- nightshift-item: KEY -->`.
/// Whether a PR body is nightshift's for the item: the marker is the body's
/// last line, where nightshift writes it. A marker quoted elsewhere (in gate
/// output, a finding or the contract — all of which an agent can influence)
/// does not count, so one item's PR can never stand in for another's.
pub fn carries_marker(body: &str, marker: &str) -> bool {
    body.trim_end().lines().last().is_some_and(|l| l.trim() == marker)
}

pub fn item_marker(key: &str) -> String {
    format!("{ITEM_MARKER_PREFIX}{key} -->")
}

pub use crate::secret::Secret;

/// Everything that can go wrong talking to GitHub or deciding which
/// repository to talk to. Each variant carries what a person needs in the
/// morning: the request, the status, GitHub's own message and request id.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The octocrab client could not be built (bad API base URL, TLS roots).
    #[error("cannot set up the GitHub client for {api_base}: {message}")]
    Client { api_base: String, message: String },

    /// GitHub answered with a status that is not retried (most 4xx).
    #[error("GitHub {method} {path} answered {status}: {message}{}{}",
        if errors.is_empty() { String::new() } else { format!(" ({})", errors.join("; ")) },
        request_id.as_ref().map(|id| format!(" [request id {id}]")).unwrap_or_default())]
    Api {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
        errors: Vec<String>,
        request_id: Option<String>,
    },

    /// A transient failure persisted through every allowed attempt.
    #[error(
        "GitHub {method} {path} still failing after {attempts} attempts and {waited_secs} s of waiting: {last}"
    )]
    Exhausted {
        method: &'static str,
        path: String,
        attempts: u32,
        waited_secs: u64,
        last: String,
    },

    /// The wait GitHub asked for (or the backoff) would exceed the total wait
    /// budget or pass the deadline, so nightshift stops instead of waiting.
    #[error("GitHub {method} {path}: would have to wait {wait_secs} s ({last}), beyond {limit}")]
    WaitTooLong {
        method: &'static str,
        path: String,
        wait_secs: u64,
        last: String,
        limit: String,
    },

    /// GitHub answered 2xx with a body nightshift could not read.
    #[error("GitHub {method} {path}: unexpected response body ({message}): {excerpt}")]
    Decode {
        method: &'static str,
        path: String,
        message: String,
        excerpt: String,
    },

    /// GitHub said the created object exists but a look-up cannot find it.
    #[error("GitHub {method} {path} said {what} already exists, but looking it up found nothing")]
    Vanished {
        method: &'static str,
        path: String,
        what: String,
    },

    /// `GH_REPO` or config `github_repo` is not `OWNER/REPO`.
    #[error("{source_name} is {value:?}; expected OWNER/REPO (or HOST/OWNER/REPO)")]
    BadRepo {
        source_name: &'static str,
        value: String,
    },

    /// No repository could be determined.
    #[error(
        "no GitHub repository: {reason}; set GH_REPO=OWNER/REPO or `github_repo` in .nightshift/config.toml"
    )]
    NoRepo { reason: String },
}

/// A GitHub repository, `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepoId {
    pub owner: String,
    pub name: String,
}

impl RepoId {
    /// Builds a repository id from its two parts.
    pub fn new(owner: impl Into<String>, name: impl Into<String>) -> RepoId {
        RepoId {
            owner: owner.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// Where a pull request stands (SPEC §3: `already_open` / `already_merged`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrState {
    Open,
    /// Closed with `merged_at` set.
    Merged,
    /// Closed without being merged.
    Closed,
}

/// A pull request as nightshift needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrInfo {
    pub number: u64,
    /// The PR's page on GitHub (`html_url`).
    pub url: String,
    pub state: PrState,
    /// The head branch name (without owner).
    pub head: String,
    /// True only when this call created the PR; false when an existing one
    /// was found and reused.
    pub created: bool,
}

/// What to open for one item (SPEC §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrRequest {
    /// `nightshift: <item title>`.
    pub title: String,
    /// The pushed branch, e.g. `nightshift/fix-login-1a2b3c4d`.
    pub head: String,
    /// The base branch (config `base`).
    pub base: String,
    /// The morning-review card; the item marker is appended if missing.
    pub body: String,
    /// Labels to put on the PR (config `label`); the first one is also used
    /// to find the PR by its marker.
    pub labels: Vec<String>,
    /// The item's key (hex SHA-256), written into the body as the marker.
    pub item_key: String,
}

/// An issue as nightshift needs it (findings, SPEC §5.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueInfo {
    pub number: u64,
    pub url: String,
    pub title: String,
    /// True when this call created the issue; false when it already existed.
    pub created: bool,
}

/// The one retry policy for every GitHub call (SPEC §8).
///
/// Retried: 5xx, 429, 403 secondary rate limits (message says "secondary rate
/// limit", or `retry-after` is present, or `x-ratelimit-remaining: 0`),
/// timeouts and connection failures. The wait is `retry-after` (seconds) if
/// given, else `x-ratelimit-reset` (epoch seconds) when
/// `x-ratelimit-remaining` is 0, else exponential backoff from `backoff_base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First backoff; doubles per attempt.
    pub backoff_base: Duration,
    /// Cap on one backoff step (not on a wait GitHub asked for).
    pub backoff_max: Duration,
    /// Wait for a secondary rate limit that names no time (GitHub: at least
    /// one minute).
    pub secondary_wait: Duration,
    /// Cap on the sum of all waits of one call.
    pub max_total_wait: Duration,
    /// Cap on attempts of one call (the first included).
    pub max_attempts: u32,
    /// Timeout of one HTTP request, body included.
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            backoff_base: Duration::from_secs(2),
            backoff_max: Duration::from_secs(60),
            secondary_wait: Duration::from_secs(60),
            max_total_wait: Duration::from_secs(15 * 60),
            max_attempts: 6,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Environment variable that shortens every GitHub retry wait nightshift
/// chooses itself (backoff steps, the unnamed secondary-limit wait) to this
/// many milliseconds. For tests of the fault handling; waits GitHub names
/// (`retry-after`, `x-ratelimit-reset`) are still honoured.
pub const BACKOFF_ENV: &str = "NIGHTSHIFT_GITHUB_BACKOFF_MS";

impl RetryPolicy {
    /// The default policy, with the waits it chooses itself shortened to the
    /// milliseconds in `backoff_ms` ([`BACKOFF_ENV`]) when that is a number.
    pub fn from_backoff_ms(backoff_ms: Option<&str>) -> RetryPolicy {
        let default = RetryPolicy::default();
        match backoff_ms.and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(ms) => RetryPolicy {
                backoff_base: Duration::from_millis(ms),
                backoff_max: Duration::from_millis(ms.saturating_mul(8)),
                secondary_wait: Duration::from_millis(ms),
                ..default
            },
            None => default,
        }
    }

    /// [`RetryPolicy::from_backoff_ms`] of the process environment.
    pub fn from_env() -> RetryPolicy {
        RetryPolicy::from_backoff_ms(std::env::var(BACKOFF_ENV).ok().as_deref())
    }
}

/// What `doctor` learns from one look at the repository (SPEC §2 `doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoProbe {
    /// The classic token's scopes as GitHub lists them in `x-oauth-scopes`
    /// (comma-separated); `None` for fine-grained tokens and apps, which
    /// send no such header.
    pub scopes: Option<String>,
    /// Whether the token may push (`permissions.push`), when GitHub says.
    pub can_push: Option<bool>,
    /// The repository's default branch.
    pub default_branch: Option<String>,
}

/// The only HTTP methods this module can send. Merging (`PUT .../merge`) and
/// closing (`PATCH` with `state: closed`) are unrepresentable here; approving
/// (`POST .../reviews`) is never built (SPEC §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    Post,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
        }
    }
}

/// A response GitHub gave that is final (2xx or a non-retried 4xx).
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

/// A failure worth another attempt, with the wait GitHub asked for if any.
#[derive(Debug)]
struct Transient {
    wait: Option<Duration>,
    why: String,
}

/// Waits spent so far on one call.
#[derive(Debug, Default)]
struct Budget {
    attempts: u32,
    waited: Duration,
}

/// The GitHub client for one repository, with no automatic retry of creates.
#[derive(Debug)]
pub struct Forge {
    client: Octocrab,
    repo: RepoId,
    deadline: Option<DateTime<Utc>>,
    policy: RetryPolicy,
}

impl Forge {
    /// A client for `repo` at `api_base` (e.g. `https://api.github.com`,
    /// `https://HOST/api/v3`, or a local fake) authenticated with `token`.
    /// Waits for retries never go past `deadline` (UTC).
    ///
    /// # Errors
    /// [`ForgeError::Client`] when the base URL is invalid or the client
    /// cannot be built.
    pub fn new(
        api_base: &str,
        token: Secret,
        repo: RepoId,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Forge, ForgeError> {
        let client_error = |message: String| ForgeError::Client {
            api_base: api_base.to_string(),
            message,
        };
        let policy = RetryPolicy::default();
        let client = Octocrab::builder()
            .base_uri(api_base.trim_end_matches('/'))
            .map_err(|e| client_error(describe_octocrab(&e)))?
            .personal_token(token.expose().to_string())
            .add_header(
                http::header::ACCEPT,
                "application/vnd.github+json".to_string(),
            )
            // Socket-level timeouts; the whole request is also bounded by
            // `policy.request_timeout` around each call.
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(policy.request_timeout))
            .set_write_timeout(Some(policy.request_timeout))
            .build()
            .map_err(|e| client_error(describe_octocrab(&e)))?;
        Ok(Forge {
            client,
            repo,
            deadline,
            policy,
        })
    }

    /// Replaces the retry policy (tests use millisecond backoffs).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Forge {
        self.policy = policy;
        self
    }

    /// The repository this client talks to.
    pub fn repo(&self) -> &RepoId {
        &self.repo
    }

    /// Makes sure label `name` exists: creates it with `color` (hex RGB, no
    /// `#`) and `description`; a 422 `already_exists` counts as success, so
    /// names with spaces or `/` need no URL-encoded look-up.
    ///
    /// # Errors
    /// [`ForgeError::Api`] for any other refusal (e.g. 403 without label
    /// rights); [`ForgeError::Exhausted`] / [`ForgeError::WaitTooLong`] when
    /// transient failures persist.
    pub async fn ensure_label(
        &self,
        name: &str,
        color: &str,
        description: &str,
    ) -> Result<(), ForgeError> {
        let path = self.repo_path("/labels");
        let payload = json!({ "name": name, "color": color, "description": description });
        // Safe to retry: a label created by a lost attempt makes the next one
        // answer 422 already_exists, which is success.
        let reply = self.call(Verb::Post, &path, Some(&payload)).await?;
        if reply.status.is_success() {
            return Ok(());
        }
        let api = api_error(Verb::Post, &path, &reply);
        if reply.status == StatusCode::UNPROCESSABLE_ENTITY
            && mentions_code(&reply.body, "already_exists")
        {
            return Ok(());
        }
        Err(api)
    }

    /// Reads `/repos/{owner}/{name}` once (with the usual retries): the
    /// token's scopes, push permission and the default branch.
    ///
    /// # Errors
    /// [`ForgeError::Api`] when GitHub refuses (401 bad token, 404 no such
    /// repository or no access); [`ForgeError::Exhausted`] when unreachable.
    pub async fn probe_repo(&self) -> Result<RepoProbe, ForgeError> {
        let path = self.repo_path("");
        let reply = self.get_ok(&path).await?;
        let v: Value = decode(Verb::Get, &path, &reply)?;
        Ok(RepoProbe {
            scopes: header(&reply.headers, "x-oauth-scopes").map(|s| s.trim().to_string()),
            can_push: v["permissions"]["push"].as_bool(),
            default_branch: v["default_branch"].as_str().map(str::to_string),
        })
    }

    /// Whether label `name` exists (`GET .../labels/{name}`: 200 yes, 404 no).
    ///
    /// # Errors
    /// Any other refusal as [`ForgeError::Api`]; persistent transient
    /// failures as [`ForgeError::Exhausted`].
    pub async fn label_exists(&self, name: &str) -> Result<bool, ForgeError> {
        let path = self.repo_path(&format!("/labels/{}", encode_path_segment(name)));
        let reply = self.call(Verb::Get, &path, None).await?;
        match reply.status {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(api_error(Verb::Get, &path, &reply)),
        }
    }

    /// Finds the PR of an item: first by head branch (`owner:branch`, all
    /// states), then by the item marker in the bodies of PRs carrying
    /// `label`. Prefers an open PR, then a merged one, then the newest closed.
    ///
    /// # Errors
    /// Any [`ForgeError`] from the look-up calls.
    pub async fn find_pr(
        &self,
        branch: &str,
        item_key: &str,
        label: &str,
    ) -> Result<Option<PrInfo>, ForgeError> {
        if let Some(pr) = self.find_pr_by_head(branch).await? {
            return Ok(Some(pr));
        }
        self.find_pr_by_marker(item_key, label).await
    }

    /// Opens the item's PR, or returns the one that already exists.
    ///
    /// Looks up first (an open or merged PR for the branch or item is reused,
    /// labels re-applied to an open one); creates the labels if missing;
    /// creates the PR once; then adds the labels through the issues API. A
    /// create that fails transiently is followed by a look-up, and re-sent
    /// only if the look-up finds nothing. A 422 "A pull request already
    /// exists" returns the existing PR. The body is clamped to
    /// [`BODY_LIMIT`] and carries the item marker (SPEC §8).
    ///
    /// # Errors
    /// [`ForgeError::Api`] for a refused create or label call;
    /// [`ForgeError::Exhausted`] / [`ForgeError::WaitTooLong`] when GitHub
    /// stays unavailable; [`ForgeError::Vanished`] when GitHub says the PR
    /// exists but it cannot be found.
    pub async fn create_pr(&self, req: &PrRequest) -> Result<PrInfo, ForgeError> {
        let marker_label = req.labels.first().map(String::as_str);
        let lookup = async || -> Result<Option<PrInfo>, ForgeError> {
            if let Some(pr) = self.find_pr_by_head(&req.head).await? {
                return Ok(Some(pr));
            }
            match marker_label {
                Some(label) => self.find_pr_by_marker(&req.item_key, label).await,
                None => Ok(None),
            }
        };
        match lookup().await? {
            Some(pr) if pr.state == PrState::Open => {
                self.add_labels(pr.number, &req.labels).await?;
                return Ok(pr);
            }
            Some(pr) if pr.state == PrState::Merged => return Ok(pr),
            // A closed, unmerged PR was rejected by a person: a new run of the
            // item gets a new PR.
            _ => {}
        }
        for label in &req.labels {
            self.ensure_label(label, LABEL_COLOR, LABEL_DESCRIPTION)
                .await?;
        }
        let path = self.repo_path("/pulls");
        let payload = json!({
            "title": req.title,
            "head": req.head,
            "base": req.base,
            "body": fit_body(&req.body, &req.item_key),
        });
        let open_found = async || -> Result<Option<PrInfo>, ForgeError> {
            Ok(lookup().await?.filter(|pr| pr.state != PrState::Closed))
        };
        let pr = match self.create_once(&path, &payload, open_found).await? {
            Created::Answered(reply) if reply.status.is_success() => {
                let pull: PullJson = decode(Verb::Post, &path, &reply)?;
                PrInfo {
                    created: true,
                    ..pull.into_info()
                }
            }
            Created::Answered(reply) => {
                let api = api_error(Verb::Post, &path, &reply);
                if reply.status != StatusCode::UNPROCESSABLE_ENTITY || !says_pr_exists(&reply.body)
                {
                    return Err(api);
                }
                match lookup().await? {
                    Some(pr) => pr,
                    None => {
                        return Err(ForgeError::Vanished {
                            method: "POST",
                            path,
                            what: format!("a pull request for {}:{}", self.repo.owner, req.head),
                        });
                    }
                }
            }
            // The server performed a create whose answer was lost.
            Created::Found(pr) => PrInfo {
                created: true,
                ..pr
            },
        };
        if pr.state == PrState::Open {
            self.add_labels(pr.number, &req.labels).await?;
        }
        Ok(pr)
    }

    /// Adds `labels` to issue or PR `number` (issues API). Adding a label a PR
    /// already has is a no-op on GitHub, so this is retried freely.
    ///
    /// # Errors
    /// [`ForgeError::Api`] when refused; [`ForgeError::Exhausted`] /
    /// [`ForgeError::WaitTooLong`] when GitHub stays unavailable.
    pub async fn add_labels(&self, number: u64, labels: &[String]) -> Result<(), ForgeError> {
        if labels.is_empty() {
            return Ok(());
        }
        let path = self.repo_path(&format!("/issues/{number}/labels"));
        let payload = json!({ "labels": labels });
        let reply = self.call(Verb::Post, &path, Some(&payload)).await?;
        if reply.status.is_success() {
            Ok(())
        } else {
            Err(api_error(Verb::Post, &path, &reply))
        }
    }

    /// Returns the open issue labelled `label` whose title is exactly
    /// `title`, or creates it (with `label`, created if missing). Used for a
    /// writer's `FINDINGS:` lines, deduplicated by title (SPEC §5.8).
    ///
    /// # Errors
    /// [`ForgeError::Api`] when refused; [`ForgeError::Exhausted`] /
    /// [`ForgeError::WaitTooLong`] when GitHub stays unavailable.
    pub async fn find_or_create_issue(
        &self,
        title: &str,
        body: &str,
        label: &str,
    ) -> Result<IssueInfo, ForgeError> {
        let lookup = async || -> Result<Option<IssueInfo>, ForgeError> {
            let issues = self.list_issues(label, "open").await?;
            Ok(issues
                .into_iter()
                .find(|issue| issue.pull_request.is_none() && issue.title == title)
                .map(|issue| IssueInfo {
                    number: issue.number,
                    url: issue.html_url,
                    title: issue.title,
                    created: false,
                }))
        };
        if let Some(found) = lookup().await? {
            return Ok(found);
        }
        self.ensure_label(label, LABEL_COLOR, LABEL_DESCRIPTION)
            .await?;
        let path = self.repo_path("/issues");
        let payload =
            json!({ "title": title, "body": clamp_chars(body, BODY_LIMIT), "labels": [label] });
        match self.create_once(&path, &payload, lookup).await? {
            Created::Answered(reply) if reply.status.is_success() => {
                let issue: IssueJson = decode(Verb::Post, &path, &reply)?;
                Ok(IssueInfo {
                    number: issue.number,
                    url: issue.html_url,
                    title: issue.title,
                    created: true,
                })
            }
            Created::Answered(reply) => Err(api_error(Verb::Post, &path, &reply)),
            Created::Found(issue) => Ok(IssueInfo {
                created: true,
                ..issue
            }),
        }
    }

    /// `GET /repos/{o}/{r}/pulls?head=OWNER:BRANCH&state=all`. The owner
    /// prefix matters: GitHub ignores a bare branch and lists every PR.
    async fn find_pr_by_head(&self, branch: &str) -> Result<Option<PrInfo>, ForgeError> {
        let head = format!("{}:{}", self.repo.owner, branch);
        let path = self.repo_path(&format!(
            "/pulls?head={}&state=all&per_page={PER_PAGE}",
            encode_query_value(&head)
        ));
        let reply = self.get_ok(&path).await?;
        let pulls: Vec<PullJson> = decode(Verb::Get, &path, &reply)?;
        // Guard against a server that ignored the filter.
        let infos = pulls
            .into_iter()
            .filter(|p| p.head.ref_name == branch)
            .map(PullJson::into_info);
        Ok(best_pr(infos))
    }

    /// PRs labelled `label` (listed through the issues API) whose body holds
    /// the item marker; the PR itself is then read for its head and merge
    /// state.
    async fn find_pr_by_marker(
        &self,
        item_key: &str,
        label: &str,
    ) -> Result<Option<PrInfo>, ForgeError> {
        let marker = item_marker(item_key);
        let numbers: Vec<u64> = self
            .list_issues(label, "all")
            .await?
            .into_iter()
            .filter(|issue| issue.pull_request.is_some())
            .filter(|issue| issue.body.as_deref().is_some_and(|b| carries_marker(b, &marker)))
            .map(|issue| issue.number)
            .collect();
        let mut infos = Vec::with_capacity(numbers.len());
        for number in numbers {
            let path = self.repo_path(&format!("/pulls/{number}"));
            let reply = self.get_ok(&path).await?;
            let pull: PullJson = decode(Verb::Get, &path, &reply)?;
            infos.push(pull.into_info());
        }
        Ok(best_pr(infos.into_iter()))
    }

    /// Issues (PRs included) labelled `label` in `state`, newest first, up to
    /// [`MAX_PAGES`] pages.
    async fn list_issues(&self, label: &str, state: &str) -> Result<Vec<IssueJson>, ForgeError> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = self.repo_path(&format!(
                "/issues?labels={}&state={state}&per_page={PER_PAGE}&page={page}",
                encode_query_value(label)
            ));
            let reply = self.get_ok(&path).await?;
            let issues: Vec<IssueJson> = decode(Verb::Get, &path, &reply)?;
            let last = issues.len() < PER_PAGE;
            all.extend(issues);
            if last {
                break;
            }
        }
        Ok(all)
    }

    /// `/repos/{owner}/{name}` + `rest`.
    fn repo_path(&self, rest: &str) -> String {
        format!(
            "/repos/{}/{}{rest}",
            encode_path_segment(&self.repo.owner),
            encode_path_segment(&self.repo.name)
        )
    }

    /// A GET with retries whose final answer must be 2xx.
    async fn get_ok(&self, path: &str) -> Result<Reply, ForgeError> {
        let reply = self.call(Verb::Get, path, None).await?;
        if reply.status.is_success() {
            Ok(reply)
        } else {
            Err(api_error(Verb::Get, path, &reply))
        }
    }

    /// An idempotent call, retried on transient failures; returns the first
    /// final answer (2xx or non-retried 4xx) for the caller to judge.
    async fn call(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, ForgeError> {
        let mut budget = Budget::default();
        loop {
            match self.attempt(verb, path, body).await {
                Ok(reply) => return Ok(reply),
                Err(transient) => self.pause(&mut budget, verb, path, transient).await?,
            }
        }
    }

    /// A create sent at most once per proven absence: after a transient
    /// failure it waits, asks `lookup` whether the server performed it after
    /// all, and re-sends only if not.
    async fn create_once<T>(
        &self,
        path: &str,
        payload: &Value,
        lookup: impl AsyncFn() -> Result<Option<T>, ForgeError>,
    ) -> Result<Created<T>, ForgeError> {
        let mut budget = Budget::default();
        loop {
            match self.attempt(Verb::Post, path, Some(payload)).await {
                Ok(reply) => return Ok(Created::Answered(reply)),
                Err(transient) => {
                    self.pause(&mut budget, Verb::Post, path, transient).await?;
                    if let Some(found) = lookup().await? {
                        tracing::info!(
                            path,
                            "create answered with a failure had been performed; using it"
                        );
                        return Ok(Created::Found(found));
                    }
                }
            }
        }
    }

    /// One request with the per-request timeout; transient failures are
    /// returned as `Err` with the wait GitHub asked for.
    async fn attempt(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, Transient> {
        let send = async {
            let response = match verb {
                Verb::Get => self.client._get(path).await,
                Verb::Post => self.client._post(path, body).await,
            }?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = self.client.body_to_string(response).await?;
            Ok::<Reply, octocrab::Error>(Reply {
                status,
                headers,
                body,
            })
        };
        let reply = match tokio::time::timeout(self.policy.request_timeout, send).await {
            Err(_) => {
                return Err(Transient {
                    wait: None,
                    why: format!(
                        "no answer within {} s",
                        self.policy.request_timeout.as_secs_f64()
                    ),
                });
            }
            Ok(Err(e)) => {
                // Connection refused/reset and the like: nothing was decided.
                return Err(Transient {
                    wait: None,
                    why: describe_octocrab(&e),
                });
            }
            Ok(Ok(reply)) => reply,
        };
        match classify(&reply, Utc::now(), &self.policy) {
            Some(transient) => Err(transient),
            None => Ok(reply),
        }
    }

    /// Waits before the next attempt, or gives up when the attempt cap, the
    /// total wait budget or the deadline would be exceeded.
    async fn pause(
        &self,
        budget: &mut Budget,
        verb: Verb,
        path: &str,
        transient: Transient,
    ) -> Result<(), ForgeError> {
        budget.attempts += 1;
        if budget.attempts >= self.policy.max_attempts {
            return Err(ForgeError::Exhausted {
                method: verb.as_str(),
                path: path.to_string(),
                attempts: budget.attempts,
                waited_secs: budget.waited.as_secs(),
                last: transient.why,
            });
        }
        let wait = transient
            .wait
            .unwrap_or_else(|| backoff(&self.policy, budget.attempts));
        let too_long = |limit: String| ForgeError::WaitTooLong {
            method: verb.as_str(),
            path: path.to_string(),
            wait_secs: wait.as_secs(),
            last: transient.why.clone(),
            limit,
        };
        if let Some(deadline) = self.deadline {
            let wake = chrono::Duration::from_std(wait)
                .map(|w| Utc::now() + w)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            if wake > deadline {
                return Err(too_long(format!("the deadline {}", deadline.to_rfc3339())));
            }
        }
        if budget.waited + wait > self.policy.max_total_wait {
            return Err(too_long(format!(
                "the retry budget of {} s",
                self.policy.max_total_wait.as_secs()
            )));
        }
        tracing::warn!(method = verb.as_str(), path, wait_ms = wait.as_millis() as u64, why = %transient.why, "GitHub call failed transiently; waiting");
        tokio::time::sleep(wait).await;
        budget.waited += wait;
        Ok(())
    }
}

/// What a create came to.
enum Created<T> {
    /// GitHub answered (2xx or a final 4xx).
    Answered(Reply),
    /// The create failed transiently, but a look-up found the object.
    Found(T),
}

/// Decides whether an answer is worth another attempt, and how long to wait
/// first. The single place where the retry rules of SPEC §8 live.
fn classify(reply: &Reply, now: DateTime<Utc>, policy: &RetryPolicy) -> Option<Transient> {
    let status = reply.status;
    let retry_after =
        header(&reply.headers, "retry-after").and_then(|v| v.trim().parse::<u64>().ok());
    let exhausted =
        header(&reply.headers, "x-ratelimit-remaining").is_some_and(|v| v.trim() == "0");
    let reset_wait = || {
        let reset = header(&reply.headers, "x-ratelimit-reset")?
            .trim()
            .parse::<i64>()
            .ok()?;
        let reset = DateTime::<Utc>::from_timestamp(reset, 0)?;
        Some((reset - now).to_std().unwrap_or(Duration::ZERO))
    };
    let asked = retry_after
        .map(Duration::from_secs)
        .or_else(|| if exhausted { reset_wait() } else { None });
    let message = error_message(&reply.body);
    let why = format!("{} {}", status.as_u16(), message);
    if status.is_server_error() {
        return Some(Transient { wait: asked, why });
    }
    let secondary = message
        .to_ascii_lowercase()
        .contains("secondary rate limit");
    let limited = status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN && (secondary || retry_after.is_some() || exhausted));
    if !limited {
        return None;
    }
    let wait = asked.or(if secondary {
        Some(policy.secondary_wait)
    } else {
        None
    });
    Some(Transient { wait, why })
}

/// Exponential backoff for attempt `n` (1-based), capped.
fn backoff(policy: &RetryPolicy, n: u32) -> Duration {
    let factor = 2u32.saturating_pow(n.saturating_sub(1).min(20));
    policy
        .backoff_base
        .saturating_mul(factor)
        .min(policy.backoff_max)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// GitHub's error body: `{"message": ..., "errors": [...]}`.
#[derive(Debug, Deserialize, Default)]
struct ErrorJson {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    errors: Vec<Value>,
}

fn error_json(body: &str) -> ErrorJson {
    serde_json::from_str(body).unwrap_or_default()
}

fn error_message(body: &str) -> String {
    error_json(body).message.unwrap_or_else(|| excerpt(body))
}

/// The `errors` list rendered one string per entry, e.g.
/// `PullRequest custom: A pull request already exists for o:b.`.
fn error_details(body: &str) -> Vec<String> {
    error_json(body)
        .errors
        .iter()
        .map(|e| match e {
            Value::String(s) => s.clone(),
            Value::Object(o) => {
                let field = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("");
                let head = [field("resource"), field("field"), field("code")]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                match (head.is_empty(), field("message")) {
                    (_, "") => head,
                    (true, m) => m.to_string(),
                    (false, m) => format!("{head}: {m}"),
                }
            }
            other => other.to_string(),
        })
        .collect()
}

fn mentions_code(body: &str, code: &str) -> bool {
    error_json(body)
        .errors
        .iter()
        .any(|e| e.get("code").and_then(Value::as_str) == Some(code))
}

/// GitHub's duplicate-PR refusal: 422 whose message (or an entry of
/// `errors`) says "A pull request already exists for owner:branch".
fn says_pr_exists(body: &str) -> bool {
    const NEEDLE: &str = "a pull request already exists";
    let parsed = error_json(body);
    parsed
        .message
        .as_deref()
        .is_some_and(|m| m.to_ascii_lowercase().contains(NEEDLE))
        || error_details(body)
            .iter()
            .any(|d| d.to_ascii_lowercase().contains(NEEDLE))
}

fn api_error(verb: Verb, path: &str, reply: &Reply) -> ForgeError {
    ForgeError::Api {
        method: verb.as_str(),
        path: path.to_string(),
        status: reply.status.as_u16(),
        message: error_message(&reply.body),
        errors: error_details(&reply.body),
        request_id: header(&reply.headers, "x-github-request-id").map(str::to_string),
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    verb: Verb,
    path: &str,
    reply: &Reply,
) -> Result<T, ForgeError> {
    serde_json::from_str(&reply.body).map_err(|e| ForgeError::Decode {
        method: verb.as_str(),
        path: path.to_string(),
        message: e.to_string(),
        excerpt: excerpt(&reply.body),
    })
}

fn excerpt(body: &str) -> String {
    let trimmed = body.trim();
    if trimmed.chars().count() > 300 {
        format!("{}…", trimmed.chars().take(300).collect::<String>())
    } else {
        trimmed.to_string()
    }
}

/// octocrab errors display as just "GitHub"; spell out what is known.
fn describe_octocrab(e: &octocrab::Error) -> String {
    match e {
        octocrab::Error::GitHub { source, .. } => {
            format!("{} {}", source.status_code, source.message)
        }
        other => {
            let mut text = other.to_string();
            let mut cause = std::error::Error::source(other);
            while let Some(c) = cause {
                text.push_str(": ");
                text.push_str(&c.to_string());
                cause = c.source();
            }
            text
        }
    }
}

#[derive(Debug, Deserialize)]
struct PullJson {
    number: u64,
    html_url: String,
    state: String,
    #[serde(default)]
    merged_at: Option<String>,
    head: HeadJson,
}

#[derive(Debug, Deserialize)]
struct HeadJson {
    #[serde(rename = "ref")]
    ref_name: String,
}

impl PullJson {
    fn into_info(self) -> PrInfo {
        let state = if self.merged_at.is_some() {
            PrState::Merged
        } else if self.state == "open" {
            PrState::Open
        } else {
            PrState::Closed
        };
        PrInfo {
            number: self.number,
            url: self.html_url,
            state,
            head: self.head.ref_name,
            created: false,
        }
    }
}

#[derive(Debug, Deserialize)]
struct IssueJson {
    number: u64,
    html_url: String,
    title: String,
    #[serde(default)]
    body: Option<String>,
    /// Present (an object) when the issue is a pull request.
    #[serde(default)]
    pull_request: Option<Value>,
}

/// Open beats merged beats closed; among equals the highest number (newest).
fn best_pr(prs: impl Iterator<Item = PrInfo>) -> Option<PrInfo> {
    let rank = |s: PrState| match s {
        PrState::Open => 2,
        PrState::Merged => 1,
        PrState::Closed => 0,
    };
    prs.max_by_key(|pr| (rank(pr.state), pr.number))
}

/// The PR body as sent: the item marker appended when missing, and the whole
/// cut to [`BODY_LIMIT`] characters with a note if longer, keeping the marker.
///
/// This is a last guard; the body's author should already have cut long gate
/// output to its tail (SPEC §8).
pub fn fit_body(body: &str, item_key: &str) -> String {
    let marker = item_marker(item_key);
    let with_marker = if carries_marker(body, &marker) {
        body.to_string()
    } else {
        format!("{}\n\n{marker}\n", body.trim_end())
    };
    if with_marker.chars().count() <= BODY_LIMIT {
        return with_marker;
    }
    let note = format!("\n\n… (cut to GitHub's {BODY_LIMIT}-character body limit)\n\n{marker}\n");
    let keep = BODY_LIMIT - note.chars().count();
    let head: String = body.chars().take(keep).collect();
    format!("{head}{note}")
}

/// `text` cut to at most `limit` characters.
fn clamp_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((byte, _)) => text[..byte].to_string(),
        None => text.to_string(),
    }
}

/// Percent-encodes a query value (everything but RFC 3986 unreserved bytes).
fn encode_query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Owner and repository names are `[A-Za-z0-9._-]`; encode anything else.
fn encode_path_segment(value: &str) -> String {
    encode_query_value(value)
}

/// The API base: `GITHUB_API_URL` if set and non-empty, else
/// `https://api.github.com`; without a trailing slash (SPEC §8).
pub fn api_base() -> String {
    match std::env::var("GITHUB_API_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
        _ => DEFAULT_API_BASE.to_string(),
    }
}

/// The GitHub token and where it came from: `GITHUB_TOKEN`, else `GH_TOKEN`
/// (values the caller took out of the environment at start-up, SPEC §6),
/// else the output of `gh auth token` (killed after 10 s; a missing `gh`
/// means no token). Empty values count as unset. Source is one of
/// `"GITHUB_TOKEN"`, `"GH_TOKEN"`, `"gh auth token"` (SPEC §8).
pub fn resolve_token(env_removed: &[(String, Secret)]) -> Option<(Secret, &'static str)> {
    resolve_token_using(env_removed, Path::new("gh"), GH_TOKEN_TIMEOUT)
}

/// [`resolve_token`] with the `gh` executable and its timeout given, for
/// tests and for `doctor`.
pub fn resolve_token_using(
    env_removed: &[(String, Secret)],
    gh: &Path,
    timeout: Duration,
) -> Option<(Secret, &'static str)> {
    for var in ["GITHUB_TOKEN", "GH_TOKEN"] {
        let found = env_removed
            .iter()
            .find(|(name, value)| name == var && !value.expose().trim().is_empty());
        if let Some((_, value)) = found {
            return Some((Secret::new(value.expose().trim()), var));
        }
    }
    token_from_gh(gh, timeout).map(|token| (token, "gh auth token"))
}

/// Runs `gh auth token` in its own process group, killed (group and all)
/// after `timeout`. Any failure means "no token from gh".
fn token_from_gh(gh: &Path, timeout: Duration) -> Option<Secret> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(gh)
        .args(["auth", "token"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    // Read in a thread so a chatty child cannot block on a full pipe while
    // this thread polls for its exit.
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).ok().map(|_| out)
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.kill();
                let _ = child.wait();
                tracing::warn!(gh = %gh.display(), timeout_s = timeout.as_secs_f64(), "`gh auth token` timed out; no token from gh");
                return None;
            }
        }
    };
    if !status.success() {
        return None;
    }
    let out = reader.join().ok()??;
    let token = out.trim();
    (!token.is_empty()).then(|| Secret::new(token))
}

/// The repository to use: `GH_REPO` (gh's `[HOST/]OWNER/REPO`) if set, else
/// config `github_repo`, else parsed from the remote's URL (SPEC §8). Empty
/// strings count as unset. An invalid `GH_REPO` or `github_repo` is an error,
/// not a silent fall-through.
///
/// # Errors
/// [`ForgeError::BadRepo`] for a malformed `GH_REPO` / `github_repo`;
/// [`ForgeError::NoRepo`] when nothing names a GitHub repository.
pub fn resolve_repo(
    gh_repo_env: Option<&str>,
    config: Option<&str>,
    remote_url: Option<&str>,
) -> Result<RepoId, ForgeError> {
    if let Some(value) = given(gh_repo_env) {
        return parse_repo_spec(value).ok_or(ForgeError::BadRepo {
            source_name: "GH_REPO",
            value: value.to_string(),
        });
    }
    if let Some(value) = given(config) {
        return parse_repo_spec(value).ok_or(ForgeError::BadRepo {
            source_name: "config github_repo",
            value: value.to_string(),
        });
    }
    match given(remote_url) {
        Some(url) => repo_from_remote_url(url).ok_or_else(|| ForgeError::NoRepo {
            reason: format!(
                "the remote URL {:?} is not a GitHub repository URL",
                redact_userinfo(url)
            ),
        }),
        None => Err(ForgeError::NoRepo {
            reason: "no GH_REPO, no github_repo and no remote URL".to_string(),
        }),
    }
}

/// A trimmed value, `None` when absent or empty.
fn given(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

/// `OWNER/REPO`, `HOST/OWNER/REPO`, or a URL.
fn parse_repo_spec(value: &str) -> Option<RepoId> {
    if value.contains("://") || value.contains('@') {
        return repo_from_remote_url(value);
    }
    let parts: Vec<&str> = value.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        [owner, name] | [_, owner, name] => {
            repo_id(owner, name.strip_suffix(".git").unwrap_or(name))
        }
        _ => None,
    }
}

fn repo_id(owner: &str, name: &str) -> Option<RepoId> {
    let valid = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (valid(owner) && valid(name)).then(|| RepoId::new(owner, name))
}

/// Parses a git remote URL into `owner/name`: `https://[user[:pw]@]HOST/o/r[.git][/]`,
/// `http://…`, scp-like `[user@]HOST:o/r[.git]`, `ssh://[user@]HOST[:port]/o/r[.git]`,
/// `git://…`, on github.com or any GitHub Enterprise host. Returns `None`
/// for local paths, `file://` URLs and paths that are not exactly
/// `owner/repo`.
pub fn repo_from_remote_url(url: &str) -> Option<RepoId> {
    let url = url.trim();
    let path = if let Some((scheme, rest)) = url.split_once("://") {
        let known = ["https", "http", "ssh", "git", "git+ssh", "ssh+git"];
        if !known.contains(&scheme.to_ascii_lowercase().as_str()) {
            return None;
        }
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit('@').next()?;
        if host.is_empty() {
            return None;
        }
        path
    } else {
        // git's rule: scp-like when a ':' comes before any '/'.
        let colon = url.find(':')?;
        let (authority, path) = (&url[..colon], &url[colon + 1..]);
        if authority.contains('/') {
            return None;
        }
        let host = authority.rsplit('@').next()?;
        // A one-letter "host" is a DOS drive (C:\repo), a local path.
        if host.len() < 2 {
            return None;
        }
        path
    };
    let path = path.split(['?', '#']).next()?.trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        [owner, name] => repo_id(owner, name),
        _ => None,
    }
}

/// The URL with any `user:password@` removed, for error messages.
fn redact_userinfo(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((authority, path)) = rest.split_once('/')
        && let Some((_, host)) = authority.rsplit_once('@')
    {
        return format!("{scheme}://****@{host}/{path}");
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            headers: map,
            body: body.to_string(),
        }
    }

    #[test]
    fn classify_table() {
        let now = DateTime::<Utc>::from_timestamp(1_000_000, 0).unwrap();
        let policy = RetryPolicy {
            secondary_wait: Duration::from_secs(61),
            ..RetryPolicy::default()
        };
        let cases: &[(Reply, Option<Option<u64>>)] = &[
            (reply(200, &[], "{}"), None),
            (reply(404, &[], r#"{"message":"Not Found"}"#), None),
            (reply(422, &[], r#"{"message":"Validation Failed"}"#), None),
            (
                reply(
                    403,
                    &[],
                    r#"{"message":"Resource not accessible by integration"}"#,
                ),
                None,
            ),
            (reply(500, &[], ""), Some(None)),
            (reply(502, &[("retry-after", "7")], ""), Some(Some(7))),
            (reply(429, &[], ""), Some(None)),
            (
                reply(
                    429,
                    &[
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset", "1000030"),
                    ],
                    "",
                ),
                Some(Some(30)),
            ),
            // A reset in the past means "now".
            (
                reply(
                    429,
                    &[
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset", "999990"),
                    ],
                    "",
                ),
                Some(Some(0)),
            ),
            // The reset only counts when the remaining budget is 0.
            (
                reply(
                    429,
                    &[
                        ("x-ratelimit-remaining", "5"),
                        ("x-ratelimit-reset", "1000030"),
                    ],
                    "",
                ),
                Some(None),
            ),
            (
                reply(403, &[("retry-after", "3")], r#"{"message":"x"}"#),
                Some(Some(3)),
            ),
            (
                reply(
                    403,
                    &[],
                    r#"{"message":"You have exceeded a secondary rate limit. Please wait."}"#,
                ),
                Some(Some(61)),
            ),
            (
                reply(
                    403,
                    &[
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset", "1000002"),
                    ],
                    "",
                ),
                Some(Some(2)),
            ),
        ];
        for (r, want) in cases {
            let got = classify(r, now, &policy).map(|t| t.wait.map(|w| w.as_secs()));
            assert_eq!(
                &got, want,
                "status {} headers {:?} body {}",
                r.status, r.headers, r.body
            );
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(500),
            ..RetryPolicy::default()
        };
        let got: Vec<u128> = (1..=5).map(|n| backoff(&p, n).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 500, 500]);
        assert_eq!(backoff(&p, u32::MAX), Duration::from_millis(500));
    }

    #[test]
    fn duplicate_pr_refusal_is_recognised() {
        let body = r#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for o:nightshift/x."}]}"#;
        assert!(says_pr_exists(body));
        assert!(!says_pr_exists(
            r#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":"head","code":"invalid"}]}"#
        ));
        assert_eq!(
            error_details(body),
            ["PullRequest custom: A pull request already exists for o:nightshift/x."]
        );
    }

    #[test]
    fn fit_body_keeps_marker_and_limit() {
        let key = "ab".repeat(32);
        let short = fit_body("hello", &key);
        assert!(short.starts_with("hello") && short.contains(&item_marker(&key)));
        assert_eq!(fit_body(&short, &key), short, "marker not added twice");
        let long = "é".repeat(BODY_LIMIT + 10);
        let fitted = fit_body(&long, &key);
        assert_eq!(fitted.chars().count(), BODY_LIMIT);
        assert!(fitted.contains(&item_marker(&key)) && fitted.contains("body limit"));
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(
            encode_query_value("o:nightshift/a b"),
            "o%3Anightshift%2Fa%20b"
        );
        assert_eq!(encode_query_value("autopilot-found"), "autopilot-found");
    }

    #[test]
    fn secret_hides_its_value() {
        let s = Secret::new("ghp_abc");
        assert_eq!(format!("{s:?} {s}"), "**** ****");
        assert_eq!(s.expose(), "ghp_abc");
    }
}
