//! Issues for a writer's findings, deduplicated by title.

use serde::Deserialize;
use serde_json::{Value, json};

use super::call::Created;
use super::client::{Forge, encode};
use super::error::ForgeError;
use super::exchange::Verb;
use super::{BODY_LIMIT, IssueInfo, LABEL_COLOR, LABEL_DESCRIPTION, clamp_chars};

impl Forge {
    /// Returns the open issue labelled `label` whose title is exactly
    /// `title`, or creates it (with `label`, created if missing). Used for a
    /// writer's `FINDINGS:` lines, deduplicated by title (docs/loop.md#findings-and-questions).
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

    pub(super) async fn find_or_create_issue_inner(
        &self,
        title: &str,
        body: &str,
        label: &str,
    ) -> Result<IssueInfo, ForgeError> {
        // A plain closure returning a future (not an async closure): the
        // run's futures must be `Send` to run on several workers.
        let this = self;
        let lookup = move || async move {
            let issues = this.list_issues(label, "open").await?;
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

    /// Issues (PRs included) labelled `label` in `state`, newest first.
    pub(super) async fn list_issues(
        &self,
        label: &str,
        state: &str,
    ) -> Result<Vec<IssueJson>, ForgeError> {
        self.list(&format!("/issues?labels={}&state={state}", encode(label)))
            .await
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct IssueJson {
    pub(super) number: u64,
    pub(super) html_url: String,
    pub(super) title: String,
    #[serde(default)]
    pub(super) body: Option<String>,
    /// Present (an object) when the issue is a pull request.
    #[serde(default)]
    pub(super) pull_request: Option<Value>,
}
