//! GitHub, the forge where an item's work ends up as a pull request (docs/github.md).
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
//! The repository's own CI of a pushed commit is read here too (check runs,
//! statuses, required checks, a job's log, a job's re-run, marking a draft
//! ready: docs/github.md#ci). Reads are conditional: the last `ETag` of
//! each path is sent back and a `304 Not Modified` (free of the rate limit)
//! stands for the answer kept (`etag`).
//!
//! It is not a GitHub client library: it speaks only the handful of endpoints
//! nightshift needs, through octocrab's raw `GET`/`POST` calls so that status
//! codes and headers stay visible. It can only send `GET` and `POST` (see
//! `Verb`), and it has no call that merges, approves or closes a pull
//! request — by construction, not by convention (docs/github.md). It does not compose
//! PR bodies (that is the report's job); it only guards the body limit.

// Errors are rare and carry the text a person reads in the morning (message,
// errors, request id, fix); their size costs nothing measurable, and boxing
// them would only make callers' matching clumsier.
#![allow(clippy::result_large_err)]

mod body;
mod call;
mod checks;
mod client;
mod error;
mod etag;
mod exchange;
mod html;
mod issues;
mod job_log;
mod labels;
mod paging;
mod pulls;
mod redirect;
mod refusal;
mod repo;
mod retry;
mod tend;
mod token;
mod transient;

pub use checks::{
    CHECK_NAME_CHARS, CHECK_SUMMARY_CHARS, Check, CheckSource, CheckVerdict, RequiredChecks,
};
pub use client::Forge;
pub use error::{ForgeError, Scope};
pub use job_log::{LOG_LINE_CHARS, LOG_READ_CAP, TAIL_BYTES, log_tail, strip_escapes};
pub use repo::{RepoId, repo_from_remote_url, resolve_repo};
pub use retry::{BACKOFF_ENV, RetryPolicy};
pub use tend::{Comment, MERGEABLE_TRIES, Mergeable, PrDetail, PrFateFacts, Review, ReviewState};
pub use token::{GH_TOKEN_TIMEOUT, api_base, resolve_token, resolve_token_using};

/// GitHub's cap on a pull request or issue body, in characters (docs/github.md#pr-body).
pub const BODY_LIMIT: usize = 65_536;

/// Start of the hidden marker that carries an item's key in a PR body, so the
/// PR is found again even if its branch was renamed (docs/github.md).
pub const ITEM_MARKER_PREFIX: &str = "<!-- nightshift-item: ";

/// The public GitHub API, used when `GITHUB_API_URL` is unset (docs/github.md).
pub const DEFAULT_API_BASE: &str = "https://api.github.com";

/// Colour given to a label nightshift creates (hex RGB without `#`).
pub const LABEL_COLOR: &str = "5319e7";

/// Description given to a label nightshift creates.
pub const LABEL_DESCRIPTION: &str = "opened by nightshift";

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

/// Whether a PR body is nightshift's for some item: its last line is the
/// item marker of a key (64 hex digits; the `sync` PR's marker is not one).
pub fn carries_item_marker(body: &str) -> bool {
    body.trim_end().lines().last().is_some_and(|l| {
        l.trim()
            .strip_prefix(ITEM_MARKER_PREFIX)
            .and_then(|rest| rest.strip_suffix(" -->"))
            .is_some_and(|key| key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()))
    })
}

/// The hidden marker for one item key: `<!-- nightshift-item: KEY -->`.
pub fn item_marker(key: &str) -> String {
    format!("{ITEM_MARKER_PREFIX}{key} -->")
}

pub use crate::secret::Secret;

/// Where a pull request stands (docs/backlog.md: `already_open` / `already_merged`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrState {
    Open,
    /// Closed with `merged_at` set.
    Merged,
    /// Closed without being merged.
    Closed,
}

impl PrState {
    /// The state of a pull request as GitHub's JSON gives it: `merged_at`
    /// set (`merged`) wins over its `state` (`open` or `closed`).
    pub(crate) fn from_github(merged: bool, state: &str) -> PrState {
        if merged {
            PrState::Merged
        } else if state == "open" {
            PrState::Open
        } else {
            PrState::Closed
        }
    }
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

/// What to open for one item (docs/github.md).
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
    /// Open the PR as a draft (config `draft`; GitHub's `draft: true`).
    pub draft: bool,
}

/// An issue as nightshift needs it (findings, docs/loop.md#findings-and-questions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueInfo {
    pub number: u64,
    pub url: String,
    pub title: String,
    /// True when this call created the issue; false when it already existed.
    pub created: bool,
}

/// What `doctor` learns from one look at the repository (docs/commands.md#doctor).
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

/// The PR body as sent: the item marker appended when missing, and the whole
/// cut to [`BODY_LIMIT`] characters with a note if longer, keeping the marker.
///
/// This is a last guard; the body's author should already have cut long gate
/// output to its tail (docs/github.md).
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
pub(crate) fn clamp_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((byte, _)) => text[..byte].to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn secret_hides_its_value() {
        let s = Secret::new("ghp_abc");
        assert_eq!(format!("{s:?} {s}"), "**** ****");
        assert_eq!(s.expose(), "ghp_abc");
    }
}
