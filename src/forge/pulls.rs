//! Pull requests: found by head branch or by the item marker, created at
//! most once, labelled.

use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::call::Created;
use super::client::{Forge, encode};
use super::error::ForgeError;
use super::exchange::Verb;
use super::refusal::{PrRefusal, pr_refusal, pr_validation_fix, says_pr_exists};
use super::retry::backoff;
use super::{
    LABEL_COLOR, LABEL_DESCRIPTION, PrInfo, PrRequest, PrState, carries_marker, fit_body,
    item_marker,
};

/// How many times a PR create refused because GitHub does not see the
/// pushed branch yet is sent (the first included); the waits between are
/// the policy's backoff steps (2 + 4 + 8 s by default).
pub(super) const HEAD_ATTEMPTS: u32 = 4;

impl Forge {
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
    /// body is clamped to [`crate::forge::BODY_LIMIT`] and carries the item marker (docs/github.md#pr-body).
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

    /// [`Forge::create_pr`] before its errors are scrubbed.
    async fn create_pr_inner(&self, req: &PrRequest) -> Result<PrInfo, ForgeError> {
        match self.find_item_pr(req).await? {
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
        // Whatever the caller built, no secret leaves in a PR (docs/agents.md, docs/github.md).
        let mut payload = json!({
            "title": self.redact(&req.title),
            "head": req.head,
            "base": req.base,
            "body": fit_body(&self.redact(&req.body), &req.item_key),
        });
        // Sent only when asked for, so a server that predates drafts is
        // asked nothing new (docs/github.md#pull-requests).
        if req.draft {
            payload["draft"] = json!(true);
        }
        let created = self.create_once_head_seen(&path, &payload, req).await?;
        let pr = self.created_pr(created, path, req).await?;
        if pr.state == PrState::Open {
            return self.labelled(pr, &req.labels).await;
        }
        Ok(pr)
    }

    /// The item's PR, by its head branch, else by the item marker among the
    /// PRs carrying the first label (when there is one).
    async fn find_item_pr(&self, req: &PrRequest) -> Result<Option<PrInfo>, ForgeError> {
        if let Some(pr) = self.find_pr_by_head(&req.head).await? {
            return Ok(Some(pr));
        }
        match req.labels.first() {
            Some(label) => self.find_pr_by_marker(&req.item_key, label).await,
            None => Ok(None),
        }
    }

    /// The item's open PR, if there is one (for a create that may have been
    /// performed after all).
    async fn find_open_item_pr(&self, req: &PrRequest) -> Result<Option<PrInfo>, ForgeError> {
        Ok(self
            .find_item_pr(req)
            .await?
            .filter(|pr| pr.state == PrState::Open))
    }

    /// [`Forge::create_once`] for the PR. Right after a push GitHub may not
    /// see the branch yet and refuses the create (422, head invalid):
    /// nothing was created, so it is sent again after a backoff, up to
    /// [`HEAD_ATTEMPTS`] times, within the deadline.
    async fn create_once_head_seen(
        &self,
        path: &str,
        payload: &Value,
        req: &PrRequest,
    ) -> Result<Created<PrInfo>, ForgeError> {
        // A plain closure returning a future (not an async closure): the
        // run's futures must be `Send` to run on several workers.
        let this = self;
        let open_found = move || this.find_open_item_pr(req);
        let mut head_waits = 0;
        loop {
            let created = self.create_once(path, payload, &open_found).await?;
            let unseen = matches!(&created, Created::Answered(r)
                if r.status == StatusCode::UNPROCESSABLE_ENTITY
                    && !says_pr_exists(&r.body)
                    && pr_refusal(&r.body) == Some(PrRefusal::HeadUnseen));
            head_waits += 1;
            let wait = backoff(&self.policy, head_waits);
            if !unseen || head_waits >= HEAD_ATTEMPTS || !self.wait_fits(wait) {
                return Ok(created);
            }
            tracing::info!(head = %req.head, wait_ms = wait.as_millis() as u64, "GitHub does not see the pushed branch yet; asking again");
            tokio::time::sleep(wait).await;
        }
    }

    /// The PR a create came to: the one answered, the one found after an
    /// unreadable answer or a lost one, or the existing open PR GitHub's
    /// "already exists" points at.
    ///
    /// # Errors
    /// [`ForgeError::Vanished`] when GitHub says the PR exists but it cannot
    /// be found; the refusal, with the fix, for any other 4xx.
    async fn created_pr(
        &self,
        created: Created<PrInfo>,
        path: String,
        req: &PrRequest,
    ) -> Result<PrInfo, ForgeError> {
        let reply = match created {
            // The server performed a create whose answer was lost.
            Created::Found(pr) => {
                return Ok(PrInfo {
                    created: true,
                    ..pr
                });
            }
            Created::Answered(reply) => reply,
        };
        if reply.status.is_success() {
            return match self.parse::<PullJson>(Verb::Post, &path, &reply) {
                Ok(pull) => Ok(PrInfo {
                    created: true,
                    ..pull.into_info()
                }),
                // Created, but the answer is unreadable (cut, empty, a
                // proxy's page): find it rather than create it again.
                Err(unreadable) => match self.find_open_item_pr(req).await? {
                    Some(pr) => Ok(PrInfo {
                        created: true,
                        ..pr
                    }),
                    None => Err(unreadable),
                },
            };
        }
        if reply.status == StatusCode::UNPROCESSABLE_ENTITY && says_pr_exists(&reply.body) {
            return self
                .find_open_item_pr(req)
                .await?
                .ok_or_else(|| ForgeError::Vanished {
                    method: "POST",
                    path,
                    what: format!("an open pull request for {}:{}", self.repo.owner, req.head),
                });
        }
        let fix = (reply.status == StatusCode::UNPROCESSABLE_ENTITY)
            .then(|| pr_validation_fix(&reply.body, req, &self.repo))
            .flatten();
        Err(self.refused(Verb::Post, &path, &reply, fix))
    }

    /// `pr` with `labels` added. No failure to label undoes the PR or hides
    /// it: a refusal (the token may open PRs but not label them), GitHub
    /// failing past every retry, or a stopped client — the PR is returned
    /// with the reason in [`PrInfo::label_error`], so that the ledger and the
    /// report name the PR that exists rather than "PR not created".
    pub(super) async fn labelled(
        &self,
        pr: PrInfo,
        labels: &[String],
    ) -> Result<PrInfo, ForgeError> {
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

    /// How many open PRs of this repository nightshift opened for items
    /// (config `max_open_prs`, docs/loop.md "Before the checkout"): `GET
    /// /pulls?state=open`, counting the PRs whose head is in this repository
    /// and whose body ends with an item marker. A PR a person opened, a
    /// fork's and the `sync` PR do not count.
    ///
    /// # Errors
    /// Any [`ForgeError`] of the list call.
    pub async fn count_open_item_prs(&self) -> Result<usize, ForgeError> {
        let out = async {
            let pulls: Vec<PullJson> = self.list("/pulls?state=open").await?;
            Ok(pulls
                .iter()
                .filter(|p| p.state == "open" && self.is_ours(p))
                .filter(|p| p.body.as_deref().is_some_and(super::carries_item_marker))
                .count())
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// `GET /repos/{o}/{r}/pulls?head=OWNER:BRANCH&state=all`. The owner
    /// prefix matters: GitHub ignores a bare branch and lists every PR. A
    /// server that ignores the filter anyway is guarded against: only PRs
    /// from `branch` of this very repository count, never a fork's.
    pub(super) async fn find_pr_by_head(&self, branch: &str) -> Result<Option<PrInfo>, ForgeError> {
        let head = format!("{}:{}", self.repo.owner, branch);
        let pulls: Vec<PullJson> = self
            .list(&format!("/pulls?head={}&state=all", encode(&head)))
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
    pub(super) async fn find_pr_by_marker(
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

    /// Whether a PR's head branch lives in this repository (not a fork), by
    /// the best evidence the answer holds: `head.repo.id` against
    /// `base.repo.id` (survives renames and case), else `head.repo.full_name`,
    /// else the owner in `head.label`. A `head.repo` of `null` is a deleted
    /// fork; an answer with none of these (a minimal server) is trusted.
    pub(super) fn is_ours(&self, pull: &PullJson) -> bool {
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

    pub(super) fn label_is_ours(&self, pull: &PullJson) -> bool {
        pull.head.label.as_deref().is_none_or(|label| {
            label
                .split_once(':')
                .is_none_or(|(owner, _)| owner.eq_ignore_ascii_case(&self.repo.owner))
        })
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct PullJson {
    pub(super) number: u64,
    pub(super) html_url: String,
    pub(super) state: String,
    #[serde(default)]
    pub(super) merged_at: Option<String>,
    #[serde(default)]
    pub(super) body: Option<String>,
    pub(super) head: RefJson,
    #[serde(default)]
    pub(super) base: Option<RefJson>,
}

/// A PR's `head` or `base`.
#[derive(Debug, Deserialize)]
pub(super) struct RefJson {
    #[serde(rename = "ref")]
    pub(super) ref_name: String,
    /// `owner:branch`.
    #[serde(default)]
    pub(super) label: Option<String>,
    /// The repository object; `Some(Null)` when it was deleted (a fork that
    /// is gone), `None` when the server sent no such field.
    #[serde(default)]
    pub(super) repo: Option<Value>,
}

impl PullJson {
    pub(super) fn into_info(self) -> PrInfo {
        let state = PrState::from_github(self.merged_at.is_some(), &self.state);
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

/// Open beats merged beats closed; among equals the highest number (newest).
pub(super) fn best_pr(prs: impl Iterator<Item = PrInfo>) -> Option<PrInfo> {
    let rank = |s: PrState| match s {
        PrState::Open => 2,
        PrState::Merged => 1,
        PrState::Closed => 0,
    };
    prs.max_by_key(|pr| (rank(pr.state), pr.number))
}
