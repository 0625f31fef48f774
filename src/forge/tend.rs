//! The calls of the second night (docs/github.md "The second night"): a PR
//! with whether it merges cleanly, its reviews, line and conversation
//! comments, the token's own login, one answering comment and the body's
//! update. None of them merges, approves or closes: the one `PATCH` sends a
//! body and nothing else.

use serde::Deserialize;
use serde_json::json;

use super::PrState;
use super::call::Created;
use super::client::Forge;
use super::error::ForgeError;
use super::exchange::Verb;
use super::retry::backoff;
use super::{BODY_LIMIT, clamp_chars, fit_body};
use chrono::{DateTime, Utc};

impl Forge {
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
            let (this, body) = (self, &body);
            let lookup = move || async move {
                let list: Vec<CommentJson> =
                    this.list(&format!("/issues/{number}/comments")).await?;
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
    /// The reviewer's relation to the repository, as GitHub says it
    /// (`author_association`: `OWNER`, `MEMBER`, `COLLABORATOR`,
    /// `CONTRIBUTOR`, `FIRST_TIME_CONTRIBUTOR`, `FIRST_TIMER`, `MANNEQUIN`,
    /// `NONE`); `None` when GitHub sent none. Judged by
    /// [`crate::tend::trusted`].
    pub association: Option<String>,
    /// The review's page (`html_url`), when GitHub sent it.
    pub url: Option<String>,
    /// GitHub's id of the review; its line comments carry it as
    /// [`Comment::review_id`].
    pub id: Option<u64>,
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
    /// The commenter's relation to the repository (`author_association`, as
    /// [`Review::association`]); `None` when GitHub sent none.
    pub association: Option<String>,
    /// The comment's page (`html_url`), when GitHub sent it.
    pub url: Option<String>,
    /// The review a line comment belongs to (`pull_request_review_id`);
    /// `None` for conversation comments.
    pub review_id: Option<u64>,
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
    closed_at: Option<String>,
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

/// What became of a PR: where it stands, and when it was merged or closed
/// (UTC, when GitHub says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrFateFacts {
    /// Open, merged or closed.
    pub state: PrState,
    /// When it was merged.
    pub merged_at: Option<DateTime<Utc>>,
    /// When it was closed (merged or not).
    pub closed_at: Option<DateTime<Utc>>,
}

impl Forge {
    /// Where PR `number` stands, in one `GET` (no waiting for `mergeable`):
    /// `report --history` asks it of each PR it last knew open.
    ///
    /// # Errors
    /// As [`Forge::pr_detail`].
    pub async fn pr_fate(&self, number: u64) -> Result<PrFateFacts, ForgeError> {
        let out = async {
            let path = self.repo_path(&format!("/pulls/{number}"));
            let reply = self.get_ok(&path).await?;
            let pull: PullDetailJson = self.decode(Verb::Get, &path, &reply)?;
            let at = |s: &Option<String>| {
                s.as_deref()
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&Utc))
            };
            let (merged_at, closed_at) = (at(&pull.merged_at), at(&pull.closed_at));
            Ok(PrFateFacts {
                state: pull.into_detail().state,
                merged_at,
                closed_at,
            })
        };
        out.await.map_err(|e| self.scrub(e))
    }
}

impl PullDetailJson {
    fn into_detail(self) -> PrDetail {
        let state = PrState::from_github(self.merged_at.is_some(), &self.state);
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
    id: Option<u64>,
    #[serde(default)]
    user: Option<UserJson>,
    state: String,
    #[serde(default)]
    submitted_at: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    author_association: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
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
            association: self.author_association,
            url: self.html_url,
            id: self.id,
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
    #[serde(default)]
    author_association: Option<String>,
    #[serde(default)]
    pull_request_review_id: Option<u64>,
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
            association: self.author_association,
            url: self.html_url,
            review_id: self.pull_request_review_id,
        }
    }
}

/// An RFC 3339 time as GitHub writes them (`2026-12-01T08:00:00Z`), in UTC.
fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}
