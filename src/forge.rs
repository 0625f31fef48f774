//! GitHub, the forge where an item's work ends up as a pull request (SPEC §8).
//!
//! This module finds which repository and token to use, looks pull requests
//! and issues up, and creates them at most once: a create that failed, timed
//! out or came back unreadable is never re-sent before a look-up has shown
//! that the server did not perform it anyway. Every transient failure (5xx,
//! 429, primary and secondary rate limits, timeouts, refused or reset
//! connections) goes through one retry policy ([`RetryPolicy`]) that honours
//! `retry-after` and `x-ratelimit-reset` (by GitHub's clock) and never waits
//! past the run's deadline.
//!
//! A look-up answered 2xx with its body cut short (empty, or JSON that stops
//! midway) is transient too. A create refused because GitHub does not see
//! the just-pushed branch yet (422 `head` invalid) is sent again a few times
//! after a backoff: a 422 created nothing.
//!
//! Redirects are followed here, not by the HTTP stack: only on the API's own
//! host (the token is sent nowhere else), with the same verb and body, as
//! GitHub asks for a renamed or transferred repository (301 to GET, 307 to
//! POST); a redirect elsewhere or in a loop is an error naming it.
//!
//! Every other failure is judged once, in one place, with the fix a person
//! needs in the morning and how far it reaches ([`Scope`]): a refusal that
//! every call would meet (bad credentials, SAML SSO, a repository the token
//! cannot see, an archived or blocked repository, an API base that does not
//! speak GitHub's JSON) stops this client for the rest of the run
//! ([`ForgeError::Stopped`]) — GitHub locks an account out after repeated
//! bad credentials; a refusal of one request (a 422 for one branch, a 409)
//! fails only that item. The token never appears in an error, whatever a
//! server echoes.
//!
//! It is not a GitHub client library: it speaks only the handful of endpoints
//! nightshift needs, through octocrab's raw `GET`/`POST` calls so that status
//! codes and headers stay visible. It can only send `GET`, `POST` and one
//! body-only `PATCH` (see `Verb`), and it has no call that merges, approves
//! or closes a pull request — by construction, not by convention (SPEC §8). It does not compose
//! PR bodies (that is the report's job); it only guards the body limit.

// Errors are rare and carry the text a person reads in the morning (message,
// errors, request id, fix); their size costs nothing measurable, and boxing
// them would only make callers' matching clumsier.
#![allow(clippy::result_large_err)]

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use http::{HeaderMap, StatusCode};
use octocrab::Octocrab;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::secret::Redactor;

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

/// Page size asked of list calls (GitHub's maximum; a server may serve fewer).
const PER_PAGE: usize = 100;

/// Upper bound on pages read by one list look-up, so a huge repository
/// cannot turn a look-up into an unbounded crawl (2,000 items at 100 a page).
const MAX_PAGES: u32 = 20;

/// Longest server text (a message, a page title, a body excerpt) quoted in
/// an error, in characters.
const QUOTE_LIMIT: usize = 200;

/// Whether a PR body is nightshift's for the item: the marker is the body's
/// last line, where nightshift writes it. A marker quoted elsewhere (in gate
/// output, a finding or the contract — all of which an agent can influence)
/// does not count, so one item's PR can never stand in for another's.
pub fn carries_marker(body: &str, marker: &str) -> bool {
    body.trim_end()
        .lines()
        .last()
        .is_some_and(|l| l.trim() == marker)
}

/// The hidden marker for one item key: `<!-- nightshift-item: KEY -->`.
pub fn item_marker(key: &str) -> String {
    format!("{ITEM_MARKER_PREFIX}{key} -->")
}

pub use crate::secret::Secret;

/// How far a failure reaches, for the caller to decide what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only this request, for this item (a 422 for its branch, one PR that
    /// cannot be read): the item is `pr_failed`, the next item may go ahead.
    Item,
    /// Every GitHub call of this run would fail the same way (bad token,
    /// SAML SSO, no such repository, GitHub unreachable or rate limited past
    /// the deadline, an API base that is not GitHub's API): stop using
    /// GitHub for the rest of the run; pushed branches are `pr_failed` and
    /// their PRs are opened on resume.
    Run,
}

/// Everything that can go wrong talking to GitHub or deciding which
/// repository to talk to. Each variant carries what a person needs in the
/// morning: the request, the status, GitHub's own message and request id,
/// and the fix where one is known. No variant ever holds the token.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The octocrab client could not be built (bad API base URL, TLS roots).
    #[error("cannot set up the GitHub client for {api_base}: {message}")]
    Client { api_base: String, message: String },

    /// GitHub answered with a status that is not retried (most 4xx).
    /// `hint` says what to fix; `scope` how far the refusal reaches.
    #[error("GitHub {method} {path} answered {status}: {message}{}{}{}",
        if errors.is_empty() { String::new() } else { format!(" ({})", errors.join("; ")) },
        request_id.as_ref().map(|id| format!(" [request id {id}]")).unwrap_or_default(),
        hint.as_ref().map(|h| format!(" — {h}")).unwrap_or_default())]
    Api {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
        errors: Vec<String>,
        request_id: Option<String>,
        hint: Option<String>,
        scope: Scope,
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

    /// GitHub answered JSON without what nightshift reads (a missing field):
    /// never taken for "nothing found".
    #[error("GitHub {method} {path}: unexpected response body ({message}): {excerpt}")]
    Decode {
        method: &'static str,
        path: String,
        message: String,
        excerpt: String,
    },

    /// The answer was not GitHub's JSON at all (an HTML page, plain text): the
    /// API base is not GitHub's API, or something in between answered.
    #[error(
        "GitHub {method} {path} answered {status} with {what}, not GitHub's JSON — is {api_base} GitHub's API? GITHUB_API_URL must be the API root: https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise (a proxy may also be answering)"
    )]
    NotGitHub {
        method: &'static str,
        path: String,
        status: u16,
        what: String,
        api_base: String,
    },

    /// GitHub said the created object exists but a look-up cannot find it.
    #[error("GitHub {method} {path} said {what} already exists, but looking it up found nothing")]
    Vanished {
        method: &'static str,
        path: String,
        what: String,
    },

    /// Not sent: an earlier call of this run met a refusal every call would
    /// meet (`reason` is that error), so this client leaves GitHub alone.
    #[error("GitHub not asked again this run; earlier: {reason}")]
    Stopped { reason: String },

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

impl ForgeError {
    /// How far this failure reaches (see [`Scope`]). `Exhausted`,
    /// `WaitTooLong`, `Client`, `NotGitHub`, `Stopped`, `BadRepo` and
    /// `NoRepo` reach the run; `Api` carries its own; `Decode` and
    /// `Vanished` concern one object.
    pub fn scope(&self) -> Scope {
        match self {
            ForgeError::Api { scope, .. } => *scope,
            ForgeError::Decode { .. } | ForgeError::Vanished { .. } => Scope::Item,
            ForgeError::Client { .. }
            | ForgeError::Exhausted { .. }
            | ForgeError::WaitTooLong { .. }
            | ForgeError::NotGitHub { .. }
            | ForgeError::Stopped { .. }
            | ForgeError::BadRepo { .. }
            | ForgeError::NoRepo { .. } => Scope::Run,
        }
    }

    /// True for a refusal that every later call would meet, after which the
    /// client stops calling GitHub (transient exhaustion is left to the
    /// caller: GitHub may be back for the next run).
    fn stops_client(&self) -> bool {
        matches!(
            self,
            ForgeError::Api {
                scope: Scope::Run,
                ..
            } | ForgeError::NotGitHub { .. }
        )
    }

    /// The same error with `f` applied to every text it carries (redaction).
    fn map_text(self, f: impl Fn(&str) -> String) -> ForgeError {
        match self {
            ForgeError::Client { api_base, message } => ForgeError::Client {
                api_base: f(&api_base),
                message: f(&message),
            },
            ForgeError::Api {
                method,
                path,
                status,
                message,
                errors,
                request_id,
                hint,
                scope,
            } => ForgeError::Api {
                method,
                path: f(&path),
                status,
                message: f(&message),
                errors: errors.iter().map(|e| f(e)).collect(),
                request_id: request_id.as_deref().map(&f),
                hint: hint.as_deref().map(&f),
                scope,
            },
            ForgeError::Exhausted {
                method,
                path,
                attempts,
                waited_secs,
                last,
            } => ForgeError::Exhausted {
                method,
                path: f(&path),
                attempts,
                waited_secs,
                last: f(&last),
            },
            ForgeError::WaitTooLong {
                method,
                path,
                wait_secs,
                last,
                limit,
            } => ForgeError::WaitTooLong {
                method,
                path: f(&path),
                wait_secs,
                last: f(&last),
                limit: f(&limit),
            },
            ForgeError::Decode {
                method,
                path,
                message,
                excerpt,
            } => ForgeError::Decode {
                method,
                path: f(&path),
                message: f(&message),
                excerpt: f(&excerpt),
            },
            ForgeError::NotGitHub {
                method,
                path,
                status,
                what,
                api_base,
            } => ForgeError::NotGitHub {
                method,
                path: f(&path),
                status,
                what: f(&what),
                api_base: f(&api_base),
            },
            ForgeError::Vanished { method, path, what } => ForgeError::Vanished {
                method,
                path: f(&path),
                what: f(&what),
            },
            ForgeError::Stopped { reason } => ForgeError::Stopped { reason: f(&reason) },
            ForgeError::BadRepo { source_name, value } => ForgeError::BadRepo {
                source_name,
                value: f(&value),
            },
            ForgeError::NoRepo { reason } => ForgeError::NoRepo { reason: f(&reason) },
        }
    }

    /// Adds (or replaces) the fix of an `Api` refusal; other errors as is.
    fn with_hint(self, fix: Option<String>) -> ForgeError {
        match (self, fix) {
            (
                ForgeError::Api {
                    method,
                    path,
                    status,
                    message,
                    errors,
                    request_id,
                    scope,
                    ..
                },
                Some(h),
            ) => ForgeError::Api {
                method,
                path,
                status,
                message,
                errors,
                request_id,
                hint: Some(h),
                scope,
            },
            (other, _) => other,
        }
    }
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
    /// Why the PR carries no label when GitHub refused to label it (the token
    /// may open PRs but not label them); `None` when labelled. The PR exists
    /// either way, so this is a warning for the report, not a failure.
    pub label_error: Option<String>,
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
/// Retried: 5xx, 429, 403 rate limits (primary: `x-ratelimit-remaining: 0`;
/// secondary: the message says "secondary rate limit" or "abuse detection",
/// or `retry-after` is present), timeouts, connection failures and look-ups
/// whose 2xx body was cut short. The wait
/// is `retry-after` (seconds or an HTTP date) if given, else until
/// `x-ratelimit-reset` (epoch seconds, measured against GitHub's `Date`)
/// when `x-ratelimit-remaining` is 0, else for a rate limit
/// `secondary_wait` doubling while it goes on (GitHub: at least a minute,
/// then exponentially longer), else exponential backoff from
/// `backoff_base`. A refusal that is not a rate limit (bad credentials,
/// SAML SSO, missing permission) is never retried, whatever its
/// rate-limit headers say; nor is an archived or blocked repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First backoff; doubles per attempt.
    pub backoff_base: Duration,
    /// Cap on one backoff step (not on a wait GitHub asked for).
    pub backoff_max: Duration,
    /// First wait for a rate limit that names no time (GitHub: at least one
    /// minute); doubles with each further one in the same call.
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
    /// Whether the repository is archived: read-only for everyone, so no PR
    /// can be opened there.
    pub archived: bool,
    /// `OWNER/NAME` as GitHub names the repository now; differs from the
    /// one asked for when it was renamed or transferred (GitHub redirects).
    pub full_name: Option<String>,
}

/// The only HTTP methods this module can send. Merging (`PUT .../merge`) is
/// unrepresentable here; approving (`POST .../reviews`) is never built; the
/// one `PATCH` ([`Forge::update_pr_body`]) sends a body and nothing else, so
/// it cannot close a PR (docs/github.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    Post,
    Patch,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Patch => "PATCH",
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

/// How long to wait before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// GitHub named it (`retry-after`, `x-ratelimit-reset`).
    Given(Duration),
    /// A rate limit that names no time: [`RetryPolicy::secondary_wait`],
    /// doubling with each such limit in the same call.
    Limit,
    /// Exponential backoff (5xx, timeouts, connection failures).
    Backoff,
}

/// A failure worth another attempt, with the wait it calls for.
#[derive(Debug)]
struct Transient {
    wait: Wait,
    why: String,
}

/// Waits spent so far on one call.
#[derive(Debug, Default)]
struct Budget {
    attempts: u32,
    /// Rate limits without a named time met so far (for the doubling).
    limits: u32,
    waited: Duration,
}

/// One page of a list: its items, where the next page is (if anywhere), and
/// whether the answer had a `Link` header at all.
struct Page<T> {
    items: Vec<T>,
    next: Option<String>,
    linked: bool,
}

/// The GitHub client for one repository, with no automatic retry of creates.
///
/// One client serves one run: after a refusal every call would meet (see
/// [`Scope::Run`]) it sends nothing more and answers [`ForgeError::Stopped`].
#[derive(Debug)]
pub struct Forge {
    client: Octocrab,
    repo: RepoId,
    /// The API base as given, without trailing slashes (for messages).
    api_base: String,
    deadline: Option<DateTime<Utc>>,
    policy: RetryPolicy,
    /// Masks the token in every text this client hands out.
    redactor: Redactor,
    /// Why GitHub is left alone for the rest of the run, once it is.
    stopped: Mutex<Option<String>>,
    /// Whether the repository's move (a followed redirect) was reported.
    moved: std::sync::atomic::AtomicBool,
}

impl Forge {
    /// A client for `repo` at `api_base` (e.g. `https://api.github.com`,
    /// `https://HOST/api/v3`, or a local fake; trailing slashes are dropped)
    /// authenticated with `token`. Waits for retries never go past
    /// `deadline` (UTC).
    ///
    /// # Errors
    /// [`ForgeError::Client`] when the base URL is not an `http(s)` URL with a
    /// host, is GitHub's website (`https://github.com`) rather than its API,
    /// or the client cannot be built.
    pub fn new(
        api_base: &str,
        token: Secret,
        repo: RepoId,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Forge, ForgeError> {
        let base = api_base.trim().trim_end_matches('/');
        let client_error = |message: String| ForgeError::Client {
            api_base: base.to_string(),
            message,
        };
        check_api_base(base).map_err(client_error)?;
        let policy = RetryPolicy::default();
        let client = Octocrab::builder()
            .base_uri(base)
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
        // From here on the token is masked in everything nightshift keeps or sends.
        crate::secret::remember([token.expose()]);
        Ok(Forge {
            client,
            repo,
            api_base: base.to_string(),
            deadline,
            policy,
            redactor: Redactor::new([token.expose()]),
            stopped: Mutex::new(None),
            moved: std::sync::atomic::AtomicBool::new(false),
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
    /// names with spaces or `/` need no URL-encoded look-up. A token that may
    /// not create labels (403/404) is fine when the label is already there.
    ///
    /// # Errors
    /// [`ForgeError::Api`] for any other refusal (a name GitHub rejects, no
    /// right to create a missing label), with the fix;
    /// [`ForgeError::Exhausted`] / [`ForgeError::WaitTooLong`] when
    /// transient failures persist; [`ForgeError::Stopped`] after a run-wide
    /// refusal.
    pub async fn ensure_label(
        &self,
        name: &str,
        color: &str,
        description: &str,
    ) -> Result<(), ForgeError> {
        let out = async {
            let path = self.repo_path("/labels");
            let payload = json!({ "name": name, "color": color, "description": description });
            // Safe to retry: a label created by a lost attempt makes the next
            // one answer 422 already_exists, which is success.
            let reply = self.call(Verb::Post, &path, Some(&payload)).await?;
            if reply.status.is_success() {
                return Ok(());
            }
            if reply.status == StatusCode::UNPROCESSABLE_ENTITY
                && mentions_code(&reply.body, "already_exists")
            {
                return Ok(());
            }
            // A refusal of the token or of the whole repository (SSO,
            // archived, blocked) is no label permission: no fallback.
            let refused_write =
                matches!(reply.status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND)
                    && is_json(&reply.body)
                    && header(&reply.headers, "x-github-sso").is_none()
                    && !refuses_whole_repo(reply.status, &error_message(&reply.body, reply.status));
            if refused_write && self.label_exists(name).await? {
                tracing::info!(label = name, "may not create labels, but the label exists");
                return Ok(());
            }
            let fix = match reply.status {
                StatusCode::UNPROCESSABLE_ENTITY => Some(format!(
                    "GitHub refused the label {name:?}: change `label` / `findings_label` in .nightshift/config.toml (a name of at most 50 characters)"
                )),
                StatusCode::FORBIDDEN if !is_rate_limit_text(&reply.body) => Some(format!(
                    "the token may not create labels in {}: create the label {name:?} there by hand, or give the token Issues: write (classic: the `repo` scope)",
                    self.repo
                )),
                _ => None,
            };
            Err(self.refused(Verb::Post, &path, &reply, fix))
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Reads `/repos/{owner}/{name}` once (with the usual retries): the
    /// token's scopes, push permission, the default branch, whether it is
    /// archived, and its current name (a moved repository is followed).
    ///
    /// # Errors
    /// [`ForgeError::Api`] when GitHub refuses (401 bad token, 404 no such
    /// repository or no access), with the fix; [`ForgeError::NotGitHub`]
    /// when the API base is not GitHub's API; [`ForgeError::Exhausted`] when
    /// unreachable.
    pub async fn probe_repo(&self) -> Result<RepoProbe, ForgeError> {
        let out = async {
            let path = self.repo_path("");
            let reply = self.get_ok(&path).await?;
            let v: Value = self.decode(Verb::Get, &path, &reply)?;
            Ok(RepoProbe {
                scopes: header(&reply.headers, "x-oauth-scopes").map(|s| s.trim().to_string()),
                can_push: v["permissions"]["push"].as_bool(),
                default_branch: v["default_branch"].as_str().map(str::to_string),
                archived: v["archived"].as_bool().unwrap_or(false),
                full_name: v["full_name"].as_str().map(str::to_string),
            })
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Whether label `name` exists (`GET .../labels/{name}`: 200 yes, 404 no).
    ///
    /// # Errors
    /// Any other refusal as [`ForgeError::Api`]; persistent transient
    /// failures as [`ForgeError::Exhausted`].
    pub async fn label_exists(&self, name: &str) -> Result<bool, ForgeError> {
        let out = async {
            let path = self.repo_path(&format!("/labels/{}", encode_path_segment(name)));
            let reply = self.call(Verb::Get, &path, None).await?;
            match reply.status {
                s if s.is_success() => Ok(true),
                StatusCode::NOT_FOUND if is_json(&reply.body) => Ok(false),
                _ => Err(self.refused(Verb::Get, &path, &reply, None)),
            }
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Finds the PR of an item: first by head branch (`owner:branch`, all
    /// states), then by the item marker in the bodies of PRs carrying
    /// `label`. Only PRs whose head is in this repository count (never a
    /// fork's, whatever its branch is called or its body says). Prefers an
    /// open PR, then a merged one, then the newest closed.
    ///
    /// # Errors
    /// Any [`ForgeError`] from the look-up calls; an answer that cannot be
    /// read is an error, never "nothing found".
    pub async fn find_pr(
        &self,
        branch: &str,
        item_key: &str,
        label: &str,
    ) -> Result<Option<PrInfo>, ForgeError> {
        let out = async {
            if let Some(pr) = self.find_pr_by_head(branch).await? {
                return Ok(Some(pr));
            }
            self.find_pr_by_marker(item_key, label).await
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Opens the item's PR, or returns the one that already exists.
    ///
    /// Looks up first (an open or merged PR for the branch or item is reused,
    /// labels re-applied to an open one); creates the labels if missing;
    /// creates the PR once; then adds the labels through the issues API. A
    /// create that fails transiently, or whose 2xx answer cannot be read, is
    /// followed by a look-up and re-sent only if the look-up finds nothing. A
    /// 422 "A pull request already exists" returns the existing open PR. A PR
    /// GitHub refuses to label is returned with [`PrInfo::label_error`]. The
    /// body is clamped to [`BODY_LIMIT`] and carries the item marker (SPEC §8).
    ///
    /// # Errors
    /// [`ForgeError::Api`] for a refused create or label creation, with the
    /// fix (no commits between base and head, a head GitHub does not see, a
    /// base that does not exist, a missing permission);
    /// [`ForgeError::Exhausted`] / [`ForgeError::WaitTooLong`] when GitHub
    /// stays unavailable; [`ForgeError::Vanished`] when GitHub says the PR
    /// exists but it cannot be found; [`ForgeError::Stopped`] after a
    /// run-wide refusal.
    pub async fn create_pr(&self, req: &PrRequest) -> Result<PrInfo, ForgeError> {
        self.create_pr_inner(req).await.map_err(|e| self.scrub(e))
    }

    async fn create_pr_inner(&self, req: &PrRequest) -> Result<PrInfo, ForgeError> {
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
            Some(pr) if pr.state == PrState::Open => return self.labelled(pr, &req.labels).await,
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
        // Whatever the caller built, no secret leaves in a PR (SPEC §6, §8).
        let payload = json!({
            "title": self.redact(&req.title),
            "head": req.head,
            "base": req.base,
            "body": fit_body(&self.redact(&req.body), &req.item_key),
        });
        let open_found = async || -> Result<Option<PrInfo>, ForgeError> {
            Ok(lookup().await?.filter(|pr| pr.state == PrState::Open))
        };
        // Right after a push GitHub may not see the branch yet and refuses
        // the create (422, head invalid): nothing was created, so it is
        // sent again after a backoff, a few times, within the deadline.
        let mut head_waits = 0;
        let created = loop {
            let created = self.create_once(&path, &payload, &open_found).await?;
            let unseen = matches!(&created, Created::Answered(r)
                if r.status == StatusCode::UNPROCESSABLE_ENTITY
                    && !says_pr_exists(&r.body)
                    && pr_refusal(&r.body) == Some(PrRefusal::HeadUnseen));
            head_waits += 1;
            let wait = backoff(&self.policy, head_waits);
            if !unseen || head_waits >= HEAD_ATTEMPTS || !self.wait_fits(wait) {
                break created;
            }
            tracing::info!(head = %req.head, wait_ms = wait.as_millis() as u64, "GitHub does not see the pushed branch yet; asking again");
            tokio::time::sleep(wait).await;
        };
        let pr = match created {
            Created::Answered(reply) if reply.status.is_success() => {
                match self.parse::<PullJson>(Verb::Post, &path, &reply) {
                    Ok(pull) => PrInfo {
                        created: true,
                        ..pull.into_info()
                    },
                    // Created, but the answer is unreadable (cut, empty, a
                    // proxy's page): find it rather than create it again.
                    Err(unreadable) => match open_found().await? {
                        Some(pr) => PrInfo {
                            created: true,
                            ..pr
                        },
                        None => return Err(unreadable),
                    },
                }
            }
            Created::Answered(reply) => {
                if reply.status == StatusCode::UNPROCESSABLE_ENTITY && says_pr_exists(&reply.body) {
                    match open_found().await? {
                        Some(pr) => pr,
                        None => {
                            return Err(ForgeError::Vanished {
                                method: "POST",
                                path,
                                what: format!(
                                    "an open pull request for {}:{}",
                                    self.repo.owner, req.head
                                ),
                            });
                        }
                    }
                } else {
                    let fix = (reply.status == StatusCode::UNPROCESSABLE_ENTITY)
                        .then(|| pr_validation_fix(&reply.body, req, &self.repo))
                        .flatten();
                    return Err(self.refused(Verb::Post, &path, &reply, fix));
                }
            }
            // The server performed a create whose answer was lost.
            Created::Found(pr) => PrInfo {
                created: true,
                ..pr
            },
        };
        if pr.state == PrState::Open {
            return self.labelled(pr, &req.labels).await;
        }
        Ok(pr)
    }

    /// `pr` with `labels` added. No failure to label undoes the PR or hides
    /// it: a refusal (the token may open PRs but not label them), GitHub
    /// failing past every retry, or a stopped client — the PR is returned
    /// with the reason in [`PrInfo::label_error`], so that the ledger and the
    /// report name the PR that exists rather than "PR not created".
    async fn labelled(&self, pr: PrInfo, labels: &[String]) -> Result<PrInfo, ForgeError> {
        match self.add_labels(pr.number, labels).await {
            Ok(()) => Ok(pr),
            Err(e) => {
                let why = self.scrub(e).to_string();
                tracing::warn!(number = pr.number, error = %why, "PR opened but not labelled");
                Ok(PrInfo {
                    label_error: Some(why),
                    ..pr
                })
            }
        }
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
        let out = async {
            let path = self.repo_path(&format!("/issues/{number}/labels"));
            let payload = json!({ "labels": labels });
            let reply = self.call(Verb::Post, &path, Some(&payload)).await?;
            if reply.status.is_success() {
                Ok(())
            } else {
                let fix = (reply.status == StatusCode::FORBIDDEN && !is_rate_limit_text(&reply.body))
                    .then(|| format!(
                        "the token may not label PRs in {}: give it Pull requests: write or Issues: write (classic: the `repo` scope), or add the label by hand",
                        self.repo
                    ));
                Err(self.refused(Verb::Post, &path, &reply, fix))
            }
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Returns the open issue labelled `label` whose title is exactly
    /// `title`, or creates it (with `label`, created if missing). Used for a
    /// writer's `FINDINGS:` lines, deduplicated by title (SPEC §5.8).
    ///
    /// # Errors
    /// [`ForgeError::Api`] when refused (410: issues are switched off in the
    /// repository); [`ForgeError::Exhausted`] / [`ForgeError::WaitTooLong`]
    /// when GitHub stays unavailable.
    pub async fn find_or_create_issue(
        &self,
        title: &str,
        body: &str,
        label: &str,
    ) -> Result<IssueInfo, ForgeError> {
        // Whatever the caller built, no secret leaves in an issue.
        self.find_or_create_issue_inner(&self.redact(title), &self.redact(body), label)
            .await
            .map_err(|e| self.scrub(e))
    }

    async fn find_or_create_issue_inner(
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
        match self.create_once(&path, &payload, &lookup).await? {
            Created::Answered(reply) if reply.status.is_success() => {
                match self.parse::<IssueJson>(Verb::Post, &path, &reply) {
                    Ok(issue) => Ok(IssueInfo {
                        number: issue.number,
                        url: issue.html_url,
                        title: issue.title,
                        created: true,
                    }),
                    Err(unreadable) => match lookup().await? {
                        Some(issue) => Ok(IssueInfo {
                            created: true,
                            ..issue
                        }),
                        None => Err(unreadable),
                    },
                }
            }
            Created::Answered(reply) => Err(self.refused(Verb::Post, &path, &reply, None)),
            Created::Found(issue) => Ok(IssueInfo {
                created: true,
                ..issue
            }),
        }
    }

    /// `GET /repos/{o}/{r}/pulls?head=OWNER:BRANCH&state=all`. The owner
    /// prefix matters: GitHub ignores a bare branch and lists every PR. A
    /// server that ignores the filter anyway is guarded against: only PRs
    /// from `branch` of this very repository count, never a fork's.
    async fn find_pr_by_head(&self, branch: &str) -> Result<Option<PrInfo>, ForgeError> {
        let head = format!("{}:{}", self.repo.owner, branch);
        let pulls: Vec<PullJson> = self
            .list(&format!(
                "/pulls?head={}&state=all",
                encode_query_value(&head)
            ))
            .await?;
        let infos = pulls
            .into_iter()
            .filter(|p| p.head.ref_name == branch && self.is_ours(p))
            .map(PullJson::into_info);
        Ok(best_pr(infos))
    }

    /// PRs labelled `label` (listed through the issues API) whose body holds
    /// the item marker; the PR itself is then read for its head and merge
    /// state, and must come from this repository. When the repository has
    /// issues switched off (410), the PR list is read instead.
    async fn find_pr_by_marker(
        &self,
        item_key: &str,
        label: &str,
    ) -> Result<Option<PrInfo>, ForgeError> {
        let marker = item_marker(item_key);
        let numbers: Vec<u64> = match self.list_issues(label, "all").await {
            Ok(issues) => issues
                .into_iter()
                .filter(|issue| issue.pull_request.is_some())
                .filter(|issue| {
                    issue
                        .body
                        .as_deref()
                        .is_some_and(|b| carries_marker(b, &marker))
                })
                .map(|issue| issue.number)
                .collect(),
            Err(ForgeError::Api { status: 410, .. }) => {
                let pulls: Vec<PullJson> = self.list("/pulls?state=all").await?;
                let infos = pulls
                    .into_iter()
                    .filter(|p| {
                        p.body
                            .as_deref()
                            .is_some_and(|b| carries_marker(b, &marker))
                    })
                    .filter(|p| self.is_ours(p))
                    .map(PullJson::into_info);
                return Ok(best_pr(infos));
            }
            Err(e) => return Err(e),
        };
        let mut infos = Vec::with_capacity(numbers.len());
        for number in numbers {
            let path = self.repo_path(&format!("/pulls/{number}"));
            let reply = self.get_ok(&path).await?;
            let pull: PullJson = self.decode(Verb::Get, &path, &reply)?;
            if self.is_ours(&pull) {
                infos.push(pull.into_info());
            }
        }
        Ok(best_pr(infos.into_iter()))
    }

    /// Issues (PRs included) labelled `label` in `state`, newest first.
    async fn list_issues(&self, label: &str, state: &str) -> Result<Vec<IssueJson>, ForgeError> {
        self.list(&format!(
            "/issues?labels={}&state={state}",
            encode_query_value(label)
        ))
        .await
    }

    /// Every item of the repository list at `rest` (a path under the
    /// repository with its query), page after page: GitHub's `Link:
    /// rel="next"` URL when the answer has a `Link` header (a server may
    /// serve fewer than the 100 asked for), else the next page number while
    /// pages come back full. At most [`MAX_PAGES`] pages; a longer list is
    /// cut with a warning.
    async fn list<T: serde::de::DeserializeOwned>(&self, rest: &str) -> Result<Vec<T>, ForgeError> {
        let numbered = |page: u32| {
            let sep = if rest.contains('?') { '&' } else { '?' };
            self.repo_path(&format!("{rest}{sep}per_page={PER_PAGE}&page={page}"))
        };
        let mut all = Vec::new();
        let mut path = numbered(1);
        for page in 1..=MAX_PAGES {
            let got: Page<T> = self.page(&path).await?;
            let full = got.items.len() >= PER_PAGE;
            all.extend(got.items);
            path = match (got.next, got.linked) {
                (Some(next), _) => next,
                // No `Link` at all (a minimal server): a full page may have
                // a successor.
                (None, false) if full => numbered(page + 1),
                _ => return Ok(all),
            };
        }
        tracing::warn!(
            list = rest,
            pages = MAX_PAGES,
            "GitHub list cut after the page cap"
        );
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

    /// Whether a PR's head branch lives in this repository (not a fork), by
    /// the best evidence the answer holds: `head.repo.id` against
    /// `base.repo.id` (survives renames and case), else `head.repo.full_name`,
    /// else the owner in `head.label`. A `head.repo` of `null` is a deleted
    /// fork; an answer with none of these (a minimal server) is trusted.
    fn is_ours(&self, pull: &PullJson) -> bool {
        let base_repo = pull.base.as_ref().and_then(|b| b.repo.as_ref());
        match &pull.head.repo {
            Some(Value::Null) => false,
            Some(head_repo) => {
                if let (Some(h), Some(b)) = (
                    head_repo["id"].as_u64(),
                    base_repo.and_then(|b| b["id"].as_u64()),
                ) {
                    return h == b;
                }
                if let Some(name) = head_repo["full_name"].as_str() {
                    let ours = base_repo
                        .and_then(|b| b["full_name"].as_str())
                        .map(str::to_string)
                        .unwrap_or_else(|| self.repo.to_string());
                    return name.eq_ignore_ascii_case(&ours);
                }
                self.label_is_ours(pull)
            }
            None => self.label_is_ours(pull),
        }
    }

    fn label_is_ours(&self, pull: &PullJson) -> bool {
        pull.head.label.as_deref().is_none_or(|label| {
            label
                .split_once(':')
                .is_none_or(|(owner, _)| owner.eq_ignore_ascii_case(&self.repo.owner))
        })
    }

    /// A GET with retries whose final answer must be 2xx.
    async fn get_ok(&self, path: &str) -> Result<Reply, ForgeError> {
        let reply = self.call(Verb::Get, path, None).await?;
        if reply.status.is_success() {
            Ok(reply)
        } else {
            Err(self.refused(Verb::Get, path, &reply, None))
        }
    }

    /// One page of a list at `path`, and the path of the next page from the
    /// `Link` header (its host is ignored: the next page is asked of the
    /// same API base, so the token never goes elsewhere).
    async fn page<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Page<T>, ForgeError> {
        let reply = self.get_ok(path).await?;
        let items: Vec<T> = self.decode(Verb::Get, path, &reply)?;
        let link = header(&reply.headers, "link");
        let next = link.and_then(link_next).and_then(|url| {
            let uri: http::Uri = url.parse().ok()?;
            uri.path_and_query().map(|pq| pq.as_str().to_string())
        });
        Ok(Page {
            items,
            next,
            linked: link.is_some(),
        })
    }

    /// An idempotent call, retried on transient failures; returns the first
    /// final answer (2xx or non-retried 4xx) for the caller to judge.
    async fn call(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, ForgeError> {
        self.check_stopped()?;
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
        self.check_stopped()?;
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
    /// returned as `Err` with the wait they call for (texts redacted).
    async fn attempt(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, Transient> {
        let send = async {
            // Redirects are followed here, not by the HTTP stack: only on the
            // API's own host (the token goes nowhere else), with the same
            // verb and body (GitHub answers a moved repository with 301 to
            // GET and 307 to other verbs: "repeat the request verbatim"), at
            // most MAX_REDIRECTS times. Any other 3xx is returned and judged
            // in `refused`.
            let mut at = path.to_string();
            let mut hops = 0;
            loop {
                let response = match verb {
                    Verb::Get => self.client._get(at.as_str()).await,
                    Verb::Post => self.client._post(at.as_str(), body).await,
                    Verb::Patch => self.client._patch(at.as_str(), body).await,
                }?;
                let status = response.status();
                let headers = response.headers().clone();
                let text = self.client.body_to_string(response).await?;
                let reply = Reply {
                    status,
                    headers,
                    body: text,
                };
                match self.redirect_target(&reply) {
                    Some(Redirect::Same(next)) if hops < MAX_REDIRECTS => {
                        if hops == 0 {
                            self.note_move(path, &next);
                        }
                        at = next;
                        hops += 1;
                    }
                    _ => return Ok::<Reply, octocrab::Error>(reply),
                }
            }
        };
        let reply = match tokio::time::timeout(self.policy.request_timeout, send).await {
            Err(_) => {
                return Err(Transient {
                    wait: Wait::Backoff,
                    why: format!(
                        "no answer within {} s",
                        self.policy.request_timeout.as_secs_f64()
                    ),
                });
            }
            Ok(Err(e)) => {
                // Connection refused/reset, a body cut short and the like:
                // nothing was decided (a create is looked up before any
                // re-send).
                return Err(Transient {
                    wait: Wait::Backoff,
                    why: self.redact(&describe_octocrab(&e)),
                });
            }
            Ok(Ok(reply)) => reply,
        };
        match classify(&reply, Utc::now()) {
            Some(transient) => Err(Transient {
                why: self.redact(&transient.why),
                ..transient
            }),
            // A look-up answered 2xx with a body cut short (empty, or JSON
            // that stops midway): a proxy or load balancer dropped the rest.
            // Asked again like any transient failure; never "nothing found"
            // and never "not GitHub's API". (A create's 2xx is not re-sent:
            // its caller looks the object up instead.)
            None if verb == Verb::Get && reply.status.is_success() && is_cut_short(&reply.body) => {
                Err(Transient {
                    wait: Wait::Backoff,
                    why: self.redact(&format!(
                        "{} answered with its body cut short ({})",
                        reply.status.as_u16(),
                        describe_body(&reply.body)
                    )),
                })
            }
            None => Ok(reply),
        }
    }

    /// Where a 301/302/307/308 answer points: [`Redirect::Same`] with the
    /// path and query to ask next when the `Location` is on the API's own
    /// scheme, host and port (or a bare path), else [`Redirect::Elsewhere`]
    /// with the other origin (never its path or query, which may carry
    /// anything). `None` for any other answer or one without `Location`.
    fn redirect_target(&self, reply: &Reply) -> Option<Redirect> {
        if !matches!(reply.status.as_u16(), 301 | 302 | 307 | 308) {
            return None;
        }
        let location: http::Uri = header(&reply.headers, "location")?.trim().parse().ok()?;
        let base: http::Uri = self.api_base.parse().ok()?;
        let origin = |u: &http::Uri| {
            let scheme = u.scheme_str().unwrap_or("").to_ascii_lowercase();
            let port = u.port_u16().or(match scheme.as_str() {
                "https" => Some(443),
                "http" => Some(80),
                _ => None,
            });
            (scheme, u.host().unwrap_or("").to_ascii_lowercase(), port)
        };
        match location.authority() {
            // Named by scheme, host and port only: a user:password@ part or
            // the path and query may carry anything.
            Some(_) if origin(&location) != origin(&base) => Some(Redirect::Elsewhere(format!(
                "{}://{}{}",
                location.scheme_str().unwrap_or("?"),
                location.host().unwrap_or("?"),
                location
                    .port_u16()
                    .map(|p| format!(":{p}"))
                    .unwrap_or_default()
            ))),
            _ => {
                let pq = location.path_and_query()?.as_str();
                pq.starts_with('/').then(|| Redirect::Same(pq.to_string()))
            }
        }
    }

    /// Says once per client that GitHub redirects this repository's requests
    /// (it was renamed or transferred): they are followed, but the
    /// repository setting should name it as it is now.
    fn note_move(&self, from: &str, to: &str) {
        let of_repo = from.starts_with(&self.repo_path("/")) || from == self.repo_path("");
        if of_repo && !self.moved.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let to = to.split('?').next().unwrap_or(to);
            tracing::warn!(
                repo = %self.repo,
                to,
                "GitHub redirects requests for {} elsewhere: the repository was renamed or transferred; following, but set GH_REPO or `github_repo` (and the remote URL) to its new name",
                self.repo
            );
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
        let wait = match transient.wait {
            Wait::Given(d) => d,
            Wait::Limit => {
                budget.limits += 1;
                let factor = 2u32.saturating_pow((budget.limits - 1).min(20));
                self.policy.secondary_wait.saturating_mul(factor)
            }
            Wait::Backoff => backoff(&self.policy, budget.attempts),
        };
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

    /// Whether a wait of `wait` ends before the deadline (if any) and within
    /// the total wait budget of one call.
    fn wait_fits(&self, wait: Duration) -> bool {
        let before_deadline = self.deadline.is_none_or(|deadline| {
            chrono::Duration::from_std(wait).is_ok_and(|w| Utc::now() + w <= deadline)
        });
        before_deadline && wait <= self.policy.max_total_wait
    }

    /// Decodes a 2xx body: [`ForgeError::NotGitHub`] (and the client stops)
    /// when it is not JSON at all, [`ForgeError::Decode`] when JSON lacks
    /// what nightshift reads.
    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        verb: Verb,
        path: &str,
        reply: &Reply,
    ) -> Result<T, ForgeError> {
        self.parse(verb, path, reply)
            .map_err(|e| self.stop_if_run_wide(e))
    }

    /// [`Forge::decode`] without stopping the client: for a create's answer,
    /// which is looked up before anything is concluded.
    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        verb: Verb,
        path: &str,
        reply: &Reply,
    ) -> Result<T, ForgeError> {
        serde_json::from_str(&reply.body).map_err(|e| {
            if is_json(&reply.body) {
                ForgeError::Decode {
                    method: verb.as_str(),
                    path: path.to_string(),
                    message: e.to_string(),
                    excerpt: quote(&reply.body),
                }
            } else {
                self.not_github(verb, path, reply)
            }
        })
    }

    fn not_github(&self, verb: Verb, path: &str, reply: &Reply) -> ForgeError {
        ForgeError::NotGitHub {
            method: verb.as_str(),
            path: path.to_string(),
            status: reply.status.as_u16(),
            what: describe_body(&reply.body),
            api_base: self.api_base.clone(),
        }
    }

    /// The error for a final answer that is not a success: GitHub's message,
    /// its `errors` list and request id, the fix (`fix` from the caller, else
    /// the one the refusal itself calls for) and its [`Scope`]. A run-wide
    /// refusal stops this client. A body that is not JSON is
    /// [`ForgeError::NotGitHub`].
    fn refused(&self, verb: Verb, path: &str, reply: &Reply, fix: Option<String>) -> ForgeError {
        if reply.status.is_redirection() {
            return self.stop_if_run_wide(self.unfollowed_redirect(verb, path, reply));
        }
        if !reply.body.trim().is_empty() && !is_json(&reply.body) {
            return self.stop_if_run_wide(self.not_github(verb, path, reply));
        }
        let status = reply.status;
        let message = error_message(&reply.body, status);
        let lower = message.to_ascii_lowercase();
        let bare = path.split('?').next().unwrap_or(path);
        let rest = bare.strip_prefix(&self.repo_path("")).unwrap_or(bare);
        // The repository itself or one of its collections, as opposed to
        // one object in it (`/pulls/7`, `/issues/7/labels`).
        let repo_level = matches!(rest, "" | "/pulls" | "/issues" | "/labels");
        // A permission refusal there meets every later PR too. Issue creation
        // serves findings only: its refusals do not keep PRs from being
        // opened; nor does a refusal about one object.
        let run_wide = if repo_level && !(verb == Verb::Post && rest == "/issues") {
            Scope::Run
        } else {
            Scope::Item
        };
        let token_fix = "set a valid GITHUB_TOKEN or GH_TOKEN, or run `gh auth login`";
        // Refusals of the token itself reach every call, whatever the path;
        // the client stops at once (repeated bad credentials make GitHub
        // lock the account out, valid credentials included).
        let about_token = status == StatusCode::UNAUTHORIZED
            || (status == StatusCode::FORBIDDEN
                && (header(&reply.headers, "x-github-sso").is_some()
                    || lower.contains("saml")
                    || lower.contains("login attempts")));
        // So do refusals of the repository as a whole (archived, blocked):
        // their fix beats the caller's (it is not a label permission).
        let about_whole = about_token || refuses_whole_repo(status, &message);
        let (own_fix, scope) = match status.as_u16() {
            401 => (
                Some(format!(
                    "GitHub refused the token (expired, revoked or mistyped): {token_fix}"
                )),
                Scope::Run,
            ),
            403 if header(&reply.headers, "x-github-sso").is_some() || lower.contains("saml") => {
                let link = header(&reply.headers, "x-github-sso").and_then(sso_url);
                let fix = match link {
                    Some(url) => format!(
                        "the token is not authorised for the organisation's SAML single sign-on (SSO): open {url} to authorise it (the link expires within an hour), or authorise it under Settings → Developer settings → tokens → Configure SSO; a `gh auth token` needs `gh auth login` again"
                    ),
                    None => "the token is not authorised for the organisation's SAML single sign-on (SSO): authorise it under Settings → Developer settings → tokens → Configure SSO; a `gh auth token` needs `gh auth login` again".to_string(),
                };
                (Some(fix), Scope::Run)
            }
            403 if lower.contains("login attempts") => (
                Some(format!(
                    "GitHub locked the account out after repeated bad credentials: wait, then {token_fix}"
                )),
                Scope::Run,
            ),
            403 if is_archived_message(&lower) => (
                Some(format!(
                    "{} is archived, so GitHub refuses every change to it (PRs, labels, issues): unarchive it (Settings → General → Danger Zone), or point GH_REPO / `github_repo` in .nightshift/config.toml and the remote at the active repository",
                    self.repo
                )),
                Scope::Run,
            ),
            403 | 451 if is_blocked_message(&lower) || status.as_u16() == 451 => {
                let block = error_json(&reply.body).block;
                let field = |k: &str| block.get(k).and_then(Value::as_str).map(quote);
                let why = [
                    field("reason").map(|r| format!("reason: {r}")),
                    field("html_url").map(|u| format!("notice: {u}")),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; ");
                let why = if why.is_empty() { String::new() } else { format!(" ({why})") };
                (
                    Some(format!(
                        "GitHub blocks access to {}{why}: nothing can be opened there until GitHub lifts the block; point GH_REPO / `github_repo` at another repository",
                        self.repo
                    )),
                    Scope::Run,
                )
            }
            409 if lower.contains("repository is empty") => (
                Some(format!(
                    "{} has no commits on GitHub: push the base branch there first",
                    self.repo
                )),
                Scope::Item,
            ),
            403 if lower.contains("github actions is not permitted") => (
                Some("turn on \"Allow GitHub Actions to create and approve pull requests\" (repository or organisation Settings → Actions → General), or use a token other than the Actions GITHUB_TOKEN".to_string()),
                run_wide,
            ),
            403 if lower.contains("not accessible") => {
                let wanted = header(&reply.headers, "x-accepted-github-permissions")
                    .map(|p| format!("GitHub wants {p}; "))
                    .unwrap_or_default();
                (
                    Some(format!(
                        "the token may not do this in {}: {wanted}a fine-grained token needs Pull requests: write and Issues: write (Contents: write to push), a classic token the `repo` scope, the Actions GITHUB_TOKEN `permissions: pull-requests: write, issues: write`",
                        self.repo
                    )),
                    run_wide,
                )
            }
            403 => (None, run_wide),
            404 if repo_level => (
                Some(format!(
                    "GitHub shows no repository {} to this token: it does not exist, or the token may not see it (or write to it) — GitHub answers 404, not 403, to hide private repositories; check GH_REPO, `github_repo` in .nightshift/config.toml and the remote URL, and the token's repository access",
                    self.repo
                )),
                Scope::Run,
            ),
            410 if lower.contains("issues are disabled") => (
                Some(format!(
                    "issues are switched off in {}'s settings: findings stay in the ledger",
                    self.repo
                )),
                Scope::Item,
            ),
            _ => (None, Scope::Item),
        };
        let err = ForgeError::Api {
            method: verb.as_str(),
            path: path.to_string(),
            status: status.as_u16(),
            message,
            errors: error_details(&reply.body),
            request_id: header(&reply.headers, "x-github-request-id").map(str::to_string),
            hint: None,
            scope,
        }
        // The caller's fix fits its request; a refusal of the token or of the
        // whole repository overrides it.
        .with_hint(if about_whole {
            own_fix
        } else {
            fix.or(own_fix)
        });
        self.stop_if_run_wide(err)
    }

    /// The error for a redirect `attempt` did not follow: to another host
    /// (the token is never sent there), one too many (a loop), or one
    /// without a usable `Location`. Every call would meet it: [`Scope::Run`].
    fn unfollowed_redirect(&self, verb: Verb, path: &str, reply: &Reply) -> ForgeError {
        let status = reply.status.as_u16();
        let hint = match self.redirect_target(reply) {
            Some(Redirect::Elsewhere(origin)) => format!(
                "the answer redirects to another host, {origin}, which nightshift does not follow so that the token is sent only to {}: if GitHub's API moved, set GITHUB_API_URL to its new root (or a proxy is answering in GitHub's place)",
                self.api_base
            ),
            Some(Redirect::Same(_)) => format!(
                "more than {MAX_REDIRECTS} redirects in a row (a redirect loop): check GITHUB_API_URL and whether a proxy answers in GitHub's place"
            ),
            None => format!(
                "a {status} redirect without a usable Location, which nightshift does not follow: check GITHUB_API_URL (the API root: https://api.github.com, or https://HOST/api/v3)"
            ),
        };
        let json = is_json(&reply.body);
        ForgeError::Api {
            method: verb.as_str(),
            path: path.to_string(),
            status,
            message: if json {
                error_message(&reply.body, reply.status)
            } else {
                format!(
                    "{} ({})",
                    reply.status.canonical_reason().unwrap_or("redirect"),
                    describe_body(&reply.body)
                )
            },
            errors: if json {
                error_details(&reply.body)
            } else {
                Vec::new()
            },
            request_id: header(&reply.headers, "x-github-request-id").map(str::to_string),
            hint: Some(hint),
            scope: Scope::Run,
        }
    }

    /// Records a refusal every later call would meet, so that none is sent;
    /// returns the error unchanged.
    fn stop_if_run_wide(&self, err: ForgeError) -> ForgeError {
        if err.stops_client()
            && let Ok(mut stopped) = self.stopped.lock()
        {
            stopped.get_or_insert_with(|| self.redact(&err.to_string()));
        }
        err
    }

    /// [`ForgeError::Stopped`] once a run-wide refusal was met.
    fn check_stopped(&self) -> Result<(), ForgeError> {
        match self.stopped.lock().map(|s| s.clone()).unwrap_or(None) {
            Some(reason) => Err(ForgeError::Stopped { reason }),
            None => Ok(()),
        }
    }

    /// `s` with the token and every other secret nightshift holds masked
    /// (see [`crate::secret::remember`]), also encoded or cut by line breaks.
    fn redact(&self, s: &str) -> String {
        crate::secret::redact_known(&self.redactor.redact(s))
    }

    /// `err` with the token masked wherever a server may have echoed it.
    fn scrub(&self, err: ForgeError) -> ForgeError {
        err.map_text(|s| self.redact(s))
    }

    /// One PR as tending needs it (`GET .../pulls/{number}`): state, head
    /// branch and SHA, base, labels and whether it merges cleanly. GitHub
    /// computes `mergeable` in the background and answers `null` until it
    /// has: the PR is asked again up to [`MERGEABLE_TRIES`] times with the
    /// policy's backoff (2, 4, 8, 16 s by default; never past the deadline),
    /// then [`Mergeable::Unknown`] (docs/github.md "The second night").
    ///
    /// # Errors
    /// [`ForgeError::Api`] when GitHub refuses (404: no such PR);
    /// [`ForgeError::Decode`] when the answer lacks a field read here;
    /// [`ForgeError::Exhausted`] / [`ForgeError::WaitTooLong`] when GitHub
    /// stays unavailable; [`ForgeError::Stopped`] after a run-wide refusal.
    pub async fn pr_detail(&self, number: u64) -> Result<PrDetail, ForgeError> {
        let out = async {
            let path = self.repo_path(&format!("/pulls/{number}"));
            let mut tries = 0;
            loop {
                let reply = self.get_ok(&path).await?;
                let pull: PullDetailJson = self.decode(Verb::Get, &path, &reply)?;
                tries += 1;
                let wait = backoff(&self.policy, tries);
                let computed = pull.mergeable.is_some() || pull.merged_at.is_some();
                if computed || tries >= MERGEABLE_TRIES || !self.wait_fits(wait) {
                    return Ok(pull.into_detail());
                }
                tracing::info!(
                    number,
                    wait_ms = wait.as_millis() as u64,
                    "GitHub has not computed whether the PR merges cleanly yet; asking again"
                );
                tokio::time::sleep(wait).await;
            }
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Every review of PR `number` (`GET .../pulls/{number}/reviews`, all
    /// pages), oldest first as GitHub lists them.
    ///
    /// # Errors
    /// As [`Forge::pr_detail`].
    pub async fn pr_reviews(&self, number: u64) -> Result<Vec<Review>, ForgeError> {
        let out = async {
            let list: Vec<ReviewJson> = self.list(&format!("/pulls/{number}/reviews")).await?;
            Ok(list.into_iter().map(ReviewJson::into_review).collect())
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Every review comment on lines of PR `number` (`GET
    /// .../pulls/{number}/comments`, all pages): author, file, line, body.
    ///
    /// # Errors
    /// As [`Forge::pr_detail`].
    pub async fn pr_review_comments(&self, number: u64) -> Result<Vec<Comment>, ForgeError> {
        let out = async {
            let list: Vec<CommentJson> = self.list(&format!("/pulls/{number}/comments")).await?;
            Ok(list.into_iter().map(CommentJson::into_comment).collect())
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Every conversation comment of PR or issue `number` (`GET
    /// .../issues/{number}/comments`, all pages); `path` and `line` are
    /// `None`.
    ///
    /// # Errors
    /// As [`Forge::pr_detail`].
    pub async fn issue_comments(&self, number: u64) -> Result<Vec<Comment>, ForgeError> {
        let out = async {
            let list: Vec<CommentJson> = self.list(&format!("/issues/{number}/comments")).await?;
            Ok(list.into_iter().map(CommentJson::into_comment).collect())
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Posts one conversation comment on PR or issue `number` (`POST
    /// .../issues/{number}/comments`), secrets masked and the text cut to
    /// [`BODY_LIMIT`] characters. Sent at most once per proven absence: after
    /// a failed attempt the comments are read, and a comment by `me` with
    /// this very body counts as posted. Returns the comment's URL.
    ///
    /// # Errors
    /// [`ForgeError::Api`] when refused (403: the token may not comment);
    /// [`ForgeError::Exhausted`] / [`ForgeError::WaitTooLong`] when GitHub
    /// stays unavailable; [`ForgeError::Stopped`] after a run-wide refusal.
    pub async fn post_comment(
        &self,
        number: u64,
        me: &str,
        body: &str,
    ) -> Result<String, ForgeError> {
        let out = async {
            let body = clamp_chars(&self.redact(body), BODY_LIMIT);
            let path = self.repo_path(&format!("/issues/{number}/comments"));
            let payload = json!({ "body": body });
            let lookup = async || -> Result<Option<String>, ForgeError> {
                let list: Vec<CommentJson> =
                    self.list(&format!("/issues/{number}/comments")).await?;
                Ok(list
                    .into_iter()
                    .find(|c| c.author() == me && c.body.as_deref() == Some(body.as_str()))
                    .map(|c| c.html_url.unwrap_or_default()))
            };
            match self.create_once(&path, &payload, &lookup).await? {
                Created::Answered(reply) if reply.status.is_success() => {
                    let c: CommentJson = self.parse(Verb::Post, &path, &reply)?;
                    Ok(c.html_url.unwrap_or_default())
                }
                Created::Answered(reply) => Err(self.refused(Verb::Post, &path, &reply, None)),
                Created::Found(url) => Ok(url),
            }
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Replaces the body of PR `number` (`PATCH .../pulls/{number}` with
    /// `{"body": …}` and nothing else: no state, so it can never close the
    /// PR). The body is masked, carries the item marker and fits
    /// [`BODY_LIMIT`] as in [`Forge::create_pr`]. Idempotent, so retried
    /// freely.
    ///
    /// # Errors
    /// [`ForgeError::Api`] when refused; [`ForgeError::Exhausted`] /
    /// [`ForgeError::WaitTooLong`] when GitHub stays unavailable.
    pub async fn update_pr_body(
        &self,
        number: u64,
        body: &str,
        item_key: &str,
    ) -> Result<(), ForgeError> {
        let out = async {
            let path = self.repo_path(&format!("/pulls/{number}"));
            let payload = json!({ "body": fit_body(&self.redact(body), item_key) });
            let reply = self.call(Verb::Patch, &path, Some(&payload)).await?;
            if reply.status.is_success() {
                Ok(())
            } else {
                Err(self.refused(Verb::Patch, &path, &reply, None))
            }
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// The login of the token's own account (`GET /user`), to tell
    /// nightshift's own comments from a person's.
    ///
    /// # Errors
    /// [`ForgeError::Api`] when refused (an app installation token has no
    /// user: 403); [`ForgeError::Decode`] without a `login`; transient
    /// failures as for every call.
    pub async fn own_login(&self) -> Result<String, ForgeError> {
        let out = async {
            let path = "/user".to_string();
            let reply = self.get_ok(&path).await?;
            let user: UserJson = self.decode(Verb::Get, &path, &reply)?;
            Ok(user.login)
        };
        out.await.map_err(|e| self.scrub(e))
    }
}

/// How many times a PR create refused because GitHub does not see the
/// pushed branch yet is sent (the first included); the waits between are
/// the policy's backoff steps (2 + 4 + 8 s by default).
const HEAD_ATTEMPTS: u32 = 4;

/// How many redirects one request follows (GitHub needs one for a moved
/// repository); more is a loop.
const MAX_REDIRECTS: u32 = 5;

/// Where a redirect points (see `Forge::redirect_target`).
enum Redirect {
    /// The path and query to ask next, on the API's own host.
    Same(String),
    /// Another origin (`scheme://host[:port]`): not followed.
    Elsewhere(String),
}

/// What a create came to.
enum Created<T> {
    /// GitHub answered (2xx or a final 4xx).
    Answered(Reply),
    /// The create failed transiently, but a look-up found the object.
    Found(T),
}

/// Checks an API base: an `http(s)` URL with a host, and not GitHub's
/// website. Returns the sentence to show otherwise.
fn check_api_base(base: &str) -> Result<(), String> {
    let shape = "GITHUB_API_URL must be GitHub's API root: https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise";
    let uri: http::Uri = base.parse().map_err(|_| format!("not a URL; {shape}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() => {
            if host.eq_ignore_ascii_case("github.com")
                || host.eq_ignore_ascii_case("www.github.com")
            {
                Err("that is GitHub's website; GITHUB_API_URL for github.com is https://api.github.com (or leave it unset)".to_string())
            } else {
                Ok(())
            }
        }
        _ => Err(format!("no http(s) scheme and host; {shape}")),
    }
}

/// Decides whether an answer is worth another attempt, and how long to wait
/// first. The single place where the retry rules of SPEC §8 live.
///
/// Times GitHub names are read against GitHub's clock (its `Date` header,
/// else `now`), so a local clock running ahead does not retry early.
fn classify(reply: &Reply, now: DateTime<Utc>) -> Option<Transient> {
    let status = reply.status;
    let server_now = header(&reply.headers, "date")
        .and_then(parse_http_date)
        .unwrap_or(now);
    let retry_after =
        header(&reply.headers, "retry-after").and_then(|v| parse_retry_after(v, server_now));
    let exhausted =
        header(&reply.headers, "x-ratelimit-remaining").is_some_and(|v| v.trim() == "0");
    let reset_wait = || {
        let reset = header(&reply.headers, "x-ratelimit-reset")?
            .trim()
            .parse::<i64>()
            .ok()?;
        let reset = DateTime::<Utc>::from_timestamp(reset, 0)?;
        // At least a second: a reset already past yet still refused must
        // not turn into a burst of retries.
        Some(
            (reset - server_now)
                .to_std()
                .unwrap_or(Duration::ZERO)
                .max(Duration::from_secs(1)),
        )
    };
    let message = error_message(&reply.body, status);
    let why = format!("{} {}", status.as_u16(), message);
    if status.is_server_error() {
        return Some(Transient {
            wait: retry_after.map_or(Wait::Backoff, Wait::Given),
            why,
        });
    }
    if status != StatusCode::FORBIDDEN && status != StatusCode::TOO_MANY_REQUESTS {
        // 401 comes with `x-ratelimit-remaining: 0` too: not a limit.
        return None;
    }
    let text = message.to_ascii_lowercase();
    let limit_text = is_rate_limit_message(&text);
    // A refusal that names itself is not a rate limit, whatever its
    // rate-limit headers say.
    let refusal = !limit_text
        && (header(&reply.headers, "x-github-sso").is_some()
            || [
                "saml",
                "not accessible",
                "login attempts",
                "bad credentials",
                "not permitted",
                "must have",
                "archived",
                "access blocked",
            ]
            .iter()
            .any(|r| text.contains(r)));
    let limited = status == StatusCode::TOO_MANY_REQUESTS
        || limit_text
        || retry_after.is_some()
        || (exhausted && !refusal);
    if !limited {
        return None;
    }
    let wait = match retry_after {
        Some(d) => Wait::Given(d),
        None => match exhausted.then(reset_wait).flatten() {
            Some(d) => Wait::Given(d),
            None => Wait::Limit,
        },
    };
    Some(Transient { wait, why })
}

/// GitHub's rate-limit wordings: "API rate limit exceeded…", "You have
/// exceeded a secondary rate limit…", "You have triggered an abuse detection
/// mechanism…" (lower-case text).
fn is_rate_limit_message(lower: &str) -> bool {
    lower.contains("rate limit") || lower.contains("abuse detection")
}

/// [`is_rate_limit_message`] of an answer body.
fn is_rate_limit_text(body: &str) -> bool {
    is_rate_limit_message(&error_message(body, StatusCode::FORBIDDEN).to_ascii_lowercase())
}

/// GitHub's refusal of any change to an archived repository: "Repository
/// was archived so is read-only." (lower-case text).
fn is_archived_message(lower: &str) -> bool {
    lower.contains("archived") && lower.contains("read-only")
}

/// GitHub's "Repository access blocked" (DMCA takedown, terms of service),
/// sent with 451 or 403 (lower-case text).
fn is_blocked_message(lower: &str) -> bool {
    lower.contains("access blocked")
}

/// Whether a refusal concerns the repository as a whole (archived, blocked),
/// so that every call would meet it, whatever it asked.
fn refuses_whole_repo(status: StatusCode, message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    status.as_u16() == 451
        || (status == StatusCode::FORBIDDEN
            && (is_archived_message(&lower) || is_blocked_message(&lower)))
}

/// `retry-after`: delay seconds or an HTTP date (RFC 9110 §10.2.3), as a
/// wait from `server_now`.
fn parse_retry_after(value: &str, server_now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = parse_http_date(value)?;
    Some((at - server_now).to_std().unwrap_or(Duration::ZERO))
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn parse_http_date(value: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(value.trim())
        .ok()
        .map(|d| d.with_timezone(&Utc))
}

/// The `rel="next"` URL of a `Link` header (`<URL>; rel="next", <URL>;
/// rel="last"`). URLs are read between `<` and `>`, so commas inside them
/// (label lists) do not split them.
fn link_next(link: &str) -> Option<String> {
    let mut rest = link;
    while let Some(open) = rest.find('<') {
        let close = open + rest[open..].find('>')?;
        let url = &rest[open + 1..close];
        let params_end = rest[close..].find('<').map_or(rest.len(), |i| close + i);
        let params = &rest[close + 1..params_end];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            p.strip_prefix("rel=")
                .map(|v| v.trim_matches('"').split_whitespace().any(|r| r == "next"))
                .unwrap_or(false)
        });
        if is_next {
            return Some(url.to_string());
        }
        rest = &rest[params_end..];
    }
    None
}

/// The authorisation URL of an `x-github-sso: required; url=…` header.
fn sso_url(value: &str) -> Option<String> {
    value
        .split(';')
        .map(str::trim)
        .find_map(|part| part.strip_prefix("url="))
        .filter(|url| url.starts_with("https://"))
        .map(str::to_string)
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
    /// A blocked repository's `{"reason", "created_at", "html_url"}` (451).
    #[serde(default)]
    block: Value,
}

fn error_json(body: &str) -> ErrorJson {
    serde_json::from_str(body).unwrap_or_default()
}

fn is_json(body: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok()
}

/// A body that was meant to be JSON but stops short: empty, or starting
/// like JSON (`{`, `[`) without being valid JSON.
fn is_cut_short(body: &str) -> bool {
    let t = body.trim_start_matches('\u{feff}').trim();
    t.is_empty() || ((t.starts_with('{') || t.starts_with('[')) && !is_json(t))
}

/// GitHub's message, or a one-line account of a body that is not GitHub's
/// JSON: the status's reason with the page title of an HTML page, an
/// excerpt of plain text, or "empty body".
fn error_message(body: &str, status: StatusCode) -> String {
    if let Some(m) = error_json(body).message.filter(|m| !m.trim().is_empty()) {
        return quote(&m);
    }
    let reason = status.canonical_reason().unwrap_or("(no reason)");
    format!("{reason} ({})", describe_body(body))
}

/// What a body that is not GitHub's JSON is, in one short line without
/// markup: `empty body`, `an HTML page titled "…"`, `text "…"`.
fn describe_body(body: &str) -> String {
    let t = body.trim_start_matches('\u{feff}').trim();
    if t.is_empty() {
        return "empty body".to_string();
    }
    if t.starts_with('<') {
        let lower = t.to_ascii_lowercase();
        let title = lower.find("<title").and_then(|start| {
            let open = start + lower[start..].find('>')? + 1;
            let close = open + lower[open..].find("</title")?;
            Some(t[open..close].to_string())
        });
        return match title.map(|s| html_text(&s)).filter(|s| !s.is_empty()) {
            Some(title) => format!("an HTML page titled \"{}\"", quote(&title)),
            None => "an HTML page".to_string(),
        };
    }
    format!("text \"{}\"", quote(&t.replace(['<', '>'], "")))
}

/// Text of an HTML fragment: entities decoded, tags and markup characters
/// dropped, whitespace collapsed.
fn html_text(s: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let decoded = decode_entities(&out);
    decoded
        .replace(['<', '>'], "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Decodes the HTML entities a title carries (`&middot;`, `&amp;`, `&#39;`…).
fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let decoded = after.find(';').filter(|&end| end <= 8).and_then(|end| {
            let name = &after[..end];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                "middot" => Some('·'),
                "mdash" => Some('—'),
                "ndash" => Some('–'),
                _ => name
                    .strip_prefix("#x")
                    .or_else(|| name.strip_prefix("#X"))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| name.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            }?;
            Some((c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &after[end + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Server text for a message: one line, at most [`QUOTE_LIMIT`] characters.
fn quote(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > QUOTE_LIMIT {
        format!("{}…", line.chars().take(QUOTE_LIMIT).collect::<String>())
    } else {
        line
    }
}

/// The `errors` list rendered one string per entry, e.g.
/// `PullRequest custom: A pull request already exists for o:b.`.
fn error_details(body: &str) -> Vec<String> {
    error_json(body)
        .errors
        .iter()
        .map(|e| match e {
            Value::String(s) => quote(s),
            Value::Object(o) => {
                let field = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("");
                let head = [field("resource"), field("field"), field("code")]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                match (head.is_empty(), field("message")) {
                    (_, "") => head,
                    (true, m) => quote(m),
                    (false, m) => format!("{head}: {}", quote(m)),
                }
            }
            other => quote(&other.to_string()),
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

/// What a 422 refusing a PR create (other than "already exists") is about,
/// from GitHub's wordings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrRefusal {
    /// GitHub does not see the head branch: `head` invalid, "head sha can't
    /// be blank", "Head ref must be a branch". Right after a push this is
    /// GitHub catching up (hub and others retry it); otherwise the push went
    /// elsewhere or the branch is gone.
    HeadUnseen,
    /// "No commits between BASE and HEAD".
    NoCommits,
    /// The base does not exist: `base` invalid, "base sha can't be blank".
    BadBase,
}

fn pr_refusal(body: &str) -> Option<PrRefusal> {
    let parsed = error_json(body);
    let mut texts: Vec<String> = error_details(body)
        .into_iter()
        .map(|d| d.to_ascii_lowercase())
        .collect();
    texts.extend(parsed.message.map(|m| m.to_ascii_lowercase()));
    let fields: Vec<String> = parsed
        .errors
        .iter()
        .filter_map(|e| e.get("field").and_then(Value::as_str))
        .map(str::to_ascii_lowercase)
        .collect();
    let any = |needles: &[&str]| texts.iter().any(|t| needles.iter().any(|n| t.contains(n)));
    if fields.iter().any(|f| f == "head" || f == "head_sha")
        || any(&["head sha", "head ref", "head repository", "head user"])
    {
        return Some(PrRefusal::HeadUnseen);
    }
    if any(&["no commits between"]) {
        return Some(PrRefusal::NoCommits);
    }
    if fields.iter().any(|f| f == "base" || f == "base_sha") || any(&["base ref", "base sha"]) {
        return Some(PrRefusal::BadBase);
    }
    None
}

/// The fix for a 422 refusing a PR create (see [`PrRefusal`]).
fn pr_validation_fix(body: &str, req: &PrRequest, repo: &RepoId) -> Option<String> {
    let (head, base) = (&req.head, &req.base);
    Some(match pr_refusal(body)? {
        PrRefusal::HeadUnseen => format!(
            "GitHub does not see branch {head} in {repo}, also after waiting for it: the push went to another repository (check the remote, GH_REPO and `github_repo`) or the branch was deleted since"
        ),
        PrRefusal::NoCommits => format!(
            "branch {head} has no commits that {base} lacks on GitHub: its work is already in {base}, or the push did not reach {repo}"
        ),
        PrRefusal::BadBase => format!(
            "the base branch {base:?} does not exist in {repo}: set `base` in .nightshift/config.toml to an existing branch"
        ),
    })
}

/// octocrab errors display as just "GitHub"; spell out what is known.
fn describe_octocrab(e: &octocrab::Error) -> String {
    match e {
        octocrab::Error::GitHub { source, .. } => {
            format!("{} {}", source.status_code, quote(&source.message))
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
    #[serde(default)]
    body: Option<String>,
    head: RefJson,
    #[serde(default)]
    base: Option<RefJson>,
}

/// A PR's `head` or `base`.
#[derive(Debug, Deserialize)]
struct RefJson {
    #[serde(rename = "ref")]
    ref_name: String,
    /// `owner:branch`.
    #[serde(default)]
    label: Option<String>,
    /// The repository object; `Some(Null)` when it was deleted (a fork that
    /// is gone), `None` when the server sent no such field.
    #[serde(default)]
    repo: Option<Value>,
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
            label_error: None,
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

/// How often [`Forge::pr_detail`] asks a PR whose `mergeable` GitHub has
/// not computed yet (the first ask included).
pub const MERGEABLE_TRIES: u32 = 5;

/// Whether a PR merges cleanly into its base, as GitHub says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mergeable {
    /// `mergeable: true` (whatever else `mergeable_state` says: `blocked`,
    /// `behind`, `unstable` are no conflict).
    Clean,
    /// `mergeable: false`, or `mergeable_state: dirty`.
    Conflict,
    /// GitHub still answered `null` after [`MERGEABLE_TRIES`] asks.
    Unknown,
}

/// A PR as tending reads it ([`Forge::pr_detail`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrDetail {
    pub number: u64,
    /// Open, merged or closed.
    pub state: PrState,
    /// The head branch name (without owner).
    pub head_ref: String,
    /// The head commit (40 hex) as GitHub sees the branch now.
    pub head_sha: String,
    /// The base branch name.
    pub base_ref: String,
    pub mergeable: Mergeable,
    /// GitHub's `mergeable_state` (`clean`, `dirty`, `blocked`, `behind`,
    /// `unstable`, `unknown`…), for messages.
    pub mergeable_state: Option<String>,
    /// Label names.
    pub labels: Vec<String>,
    /// The current body.
    pub body: Option<String>,
}

/// A review's state as GitHub documents it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewState {
    Approved,
    ChangesRequested,
    Commented,
    Dismissed,
    /// A review not submitted yet (only its author sees it).
    Pending,
}

/// One PR review ([`Forge::pr_reviews`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// The reviewer's login (`""` for a deleted account).
    pub author: String,
    /// `None` for a state GitHub added after this was written.
    pub state: Option<ReviewState>,
    /// When it was submitted (UTC); `None` while pending.
    pub submitted_at: Option<DateTime<Utc>>,
    /// The review's summary text (may be empty).
    pub body: String,
}

/// A comment on a PR: a review comment on a line (with `path` and `line`)
/// or a conversation comment (without).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// The commenter's login (`""` for a deleted account).
    pub author: String,
    /// The file commented on, relative to the repository root.
    pub path: Option<String>,
    /// The line in the file (GitHub's `line`, else `original_line` for a
    /// comment on a line that has since changed).
    pub line: Option<u64>,
    pub body: String,
    /// When it was written (UTC); `None` when GitHub sent no readable time.
    pub created_at: Option<DateTime<Utc>>,
}

/// A user object as GitHub embeds it (`user`, and `GET /user`).
#[derive(Debug, Deserialize)]
struct UserJson {
    login: String,
}

/// A label object.
#[derive(Debug, Deserialize)]
struct LabelJson {
    name: String,
}

/// `GET .../pulls/{n}` with the fields tending reads.
#[derive(Debug, Deserialize)]
struct PullDetailJson {
    number: u64,
    state: String,
    #[serde(default)]
    merged_at: Option<String>,
    #[serde(default)]
    body: Option<String>,
    head: DetailRefJson,
    base: DetailRefJson,
    #[serde(default)]
    mergeable: Option<bool>,
    #[serde(default)]
    mergeable_state: Option<String>,
    #[serde(default)]
    labels: Vec<LabelJson>,
}

/// A PR's `head` or `base` with its commit.
#[derive(Debug, Deserialize)]
struct DetailRefJson {
    #[serde(rename = "ref")]
    ref_name: String,
    #[serde(default)]
    sha: String,
}

impl PullDetailJson {
    fn into_detail(self) -> PrDetail {
        let state = if self.merged_at.is_some() {
            PrState::Merged
        } else if self.state == "open" {
            PrState::Open
        } else {
            PrState::Closed
        };
        let mergeable = match (self.mergeable, self.mergeable_state.as_deref()) {
            (Some(false), _) | (_, Some("dirty")) => Mergeable::Conflict,
            (Some(true), _) => Mergeable::Clean,
            (None, _) => Mergeable::Unknown,
        };
        PrDetail {
            number: self.number,
            state,
            head_ref: self.head.ref_name,
            head_sha: self.head.sha,
            base_ref: self.base.ref_name,
            mergeable,
            mergeable_state: self.mergeable_state,
            labels: self.labels.into_iter().map(|l| l.name).collect(),
            body: self.body,
        }
    }
}

/// One review as GitHub lists it.
#[derive(Debug, Deserialize)]
struct ReviewJson {
    #[serde(default)]
    user: Option<UserJson>,
    state: String,
    #[serde(default)]
    submitted_at: Option<String>,
    #[serde(default)]
    body: Option<String>,
}

impl ReviewJson {
    fn into_review(self) -> Review {
        let state = match self.state.as_str() {
            "APPROVED" => Some(ReviewState::Approved),
            "CHANGES_REQUESTED" => Some(ReviewState::ChangesRequested),
            "COMMENTED" => Some(ReviewState::Commented),
            "DISMISSED" => Some(ReviewState::Dismissed),
            "PENDING" => Some(ReviewState::Pending),
            _ => None,
        };
        Review {
            author: self.user.map(|u| u.login).unwrap_or_default(),
            state,
            submitted_at: self.submitted_at.as_deref().and_then(parse_time),
            body: self.body.unwrap_or_default(),
        }
    }
}

/// One comment (review or conversation) as GitHub lists it.
#[derive(Debug, Deserialize)]
struct CommentJson {
    #[serde(default)]
    user: Option<UserJson>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    line: Option<u64>,
    #[serde(default)]
    original_line: Option<u64>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
}

impl CommentJson {
    fn author(&self) -> &str {
        self.user.as_ref().map(|u| u.login.as_str()).unwrap_or("")
    }

    fn into_comment(self) -> Comment {
        Comment {
            author: self.author().to_string(),
            path: self.path,
            line: self.line.or(self.original_line),
            body: self.body.unwrap_or_default(),
            created_at: self.created_at.as_deref().and_then(parse_time),
        }
    }
}

/// An RFC 3339 time as GitHub writes them (`2026-12-01T08:00:00Z`), in UTC.
fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
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
        let given = |s: u64| Some(Wait::Given(Duration::from_secs(s)));
        let exhausted = |reset: &'static str| {
            vec![("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", reset)]
        };
        let cases: Vec<(Reply, Option<Wait>)> = vec![
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
            (reply(500, &[], ""), Some(Wait::Backoff)),
            (reply(502, &[("retry-after", "7")], ""), given(7)),
            // A bare 429 is a secondary limit: at least the minute.
            (reply(429, &[], ""), Some(Wait::Limit)),
            (reply(429, &exhausted("1000030"), ""), given(30)),
            // A reset in the past (or now) still waits a second.
            (reply(429, &exhausted("999990"), ""), given(1)),
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
                Some(Wait::Limit),
            ),
            (
                reply(403, &[("retry-after", "3")], r#"{"message":"x"}"#),
                given(3),
            ),
            (
                reply(
                    403,
                    &[],
                    r#"{"message":"You have exceeded a secondary rate limit. Please wait."}"#,
                ),
                Some(Wait::Limit),
            ),
            (
                reply(
                    403,
                    &[],
                    r#"{"message":"You have triggered an abuse detection mechanism."}"#,
                ),
                Some(Wait::Limit),
            ),
            (reply(403, &exhausted("1000002"), ""), given(2)),
            // The reset is GitHub's second, measured against its Date: its
            // clock is 60 s behind ours, so 62 s, not 2.
            (
                reply(
                    403,
                    &[
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset", "1000002"),
                        ("date", "Mon, 12 Jan 1970 13:45:40 GMT"),
                    ],
                    r#"{"message":"API rate limit exceeded for user ID 1."}"#,
                ),
                given(62),
            ),
            // retry-after as an HTTP date, from GitHub's Date.
            (
                reply(
                    503,
                    &[
                        ("retry-after", "Mon, 12 Jan 1970 13:46:45 GMT"),
                        ("date", "Mon, 12 Jan 1970 13:46:40 GMT"),
                    ],
                    "",
                ),
                given(5),
            ),
            // Refusals with rate-limit headers are not limits.
            (
                reply(
                    401,
                    &exhausted("1003600"),
                    r#"{"message":"Bad credentials"}"#,
                ),
                None,
            ),
            (
                reply(
                    403,
                    &exhausted("1003600"),
                    r#"{"message":"Maximum number of login attempts exceeded. Please try again later."}"#,
                ),
                None,
            ),
            (
                reply(
                    403,
                    &[
                        (
                            "x-github-sso",
                            "required; url=https://github.com/orgs/a/sso?authorization_request=x",
                        ),
                        ("x-ratelimit-remaining", "0"),
                    ],
                    r#"{"message":"Resource protected by organization SAML enforcement."}"#,
                ),
                None,
            ),
            // An archived or blocked repository is no limit either.
            (
                reply(
                    403,
                    &exhausted("1003600"),
                    r#"{"message":"Repository was archived so is read-only."}"#,
                ),
                None,
            ),
            (
                reply(
                    403,
                    &exhausted("1003600"),
                    r#"{"message":"Repository access blocked","block":{"reason":"tos"}}"#,
                ),
                None,
            ),
            (
                reply(451, &[], r#"{"message":"Repository access blocked"}"#),
                None,
            ),
        ];
        for (r, want) in cases {
            let got = classify(&r, now).map(|t| t.wait);
            assert_eq!(
                got, want,
                "status {} headers {:?} body {}",
                r.status, r.headers, r.body
            );
        }
        assert_eq!(
            parse_http_date("Mon, 12 Jan 1970 13:46:40 GMT").map(|d| d.timestamp()),
            Some(1_000_000)
        );
    }

    #[test]
    fn secondary_limits_double() {
        // Checked through `pause` in tests/forge.rs; here the factor alone.
        let p = RetryPolicy {
            secondary_wait: Duration::from_secs(60),
            ..RetryPolicy::default()
        };
        let waits: Vec<u64> = (1u32..=3)
            .map(|n| p.secondary_wait.saturating_mul(2u32.pow(n - 1)).as_secs())
            .collect();
        assert_eq!(waits, [60, 120, 240]);
    }

    #[test]
    fn link_header_next_is_found() {
        let link = r#"<https://api.github.com/repositories/1/issues?labels=a,b&page=2>; rel="next", <https://api.github.com/repositories/1/issues?labels=a,b&page=5>; rel="last""#;
        assert_eq!(
            link_next(link).as_deref(),
            Some("https://api.github.com/repositories/1/issues?labels=a,b&page=2")
        );
        let last_page = r#"<https://api.github.com/repositories/1/issues?page=4>; rel="prev", <https://api.github.com/repositories/1/issues?page=1>; rel="first""#;
        assert_eq!(link_next(last_page), None);
        assert_eq!(
            link_next(r#"<https://h/x?page=3>;rel=next"#).as_deref(),
            Some("https://h/x?page=3")
        );
        assert_eq!(link_next(""), None);
    }

    #[test]
    fn bodies_that_are_not_githubs_json_are_described_briefly() {
        assert_eq!(describe_body(""), "empty body");
        assert_eq!(
            describe_body("<html><head><title>Unicorn! &middot; GitHub</title></head></html>"),
            "an HTML page titled \"Unicorn! · GitHub\""
        );
        assert_eq!(describe_body("<html><body>x</body></html>"), "an HTML page");
        assert_eq!(
            describe_body("upstream <b>reset</b>\n"),
            "text \"upstream breset/b\""
        );
        assert_eq!(
            error_message("", StatusCode::SERVICE_UNAVAILABLE),
            "Service Unavailable (empty body)"
        );
        assert_eq!(
            error_message(r#"{"message":"Bad credentials"}"#, StatusCode::UNAUTHORIZED),
            "Bad credentials"
        );
        assert_eq!(
            decode_entities("a &amp; b &#39;c&#x27; &bogus; &"),
            "a & b 'c' &bogus; &"
        );
        assert!(quote(&"x".repeat(500)).chars().count() <= QUOTE_LIMIT + 1);
    }

    #[test]
    fn bodies_cut_short_are_told_from_other_text() {
        for cut in [
            "",
            "  \n",
            "[{\"number\": 1, \"html_u",
            "{\"message\": \"x",
            "\u{feff}[",
        ] {
            assert!(is_cut_short(cut), "{cut:?}");
        }
        for whole in ["[]", "{}", " [1] ", "<html></html>", "Sign in", "null"] {
            assert!(!is_cut_short(whole), "{whole:?}");
        }
    }

    #[test]
    fn sso_header_url_is_read() {
        assert_eq!(
            sso_url("required; url=https://github.com/orgs/acme/sso?authorization_request=AbC")
                .as_deref(),
            Some("https://github.com/orgs/acme/sso?authorization_request=AbC")
        );
        assert_eq!(
            sso_url("partial-results; organizations=21955855,20582480"),
            None
        );
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
