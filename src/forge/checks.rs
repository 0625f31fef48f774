//! The repository's own CI as GitHub reports it for one commit (docs/github.md#ci):
//! check runs (`GET .../commits/{sha}/check-runs`, paged) and legacy statuses
//! (`GET .../commits/{sha}/status`), which checks the base branch requires
//! (branch protection and rulesets; a 404 or 403 there is "none known"), a
//! re-run request for one GitHub Actions job, and marking a draft PR ready
//! for review (GraphQL `markPullRequestReadyForReview`). The job log itself
//! is [`super::job_log`]'s. Nothing here merges, approves or closes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::client::{Forge, encode};
use super::error::ForgeError;
use super::exchange::Verb;
use super::paging::PER_PAGE;
use super::{body::header, clamp_chars};

/// Characters of a check's output (title, summary and text together) kept
/// for the writer's prompt and the report.
pub const CHECK_SUMMARY_CHARS: usize = 4_000;

/// Characters of a check's name kept (GitHub allows far longer names).
pub const CHECK_NAME_CHARS: usize = 200;

/// The path of GitHub's GraphQL endpoint, relative to the GraphQL root the
/// client was built with (`https://api.github.com`, `https://HOST/api`).
pub(super) const GRAPHQL_PATH: &str = "/graphql";

/// Where one check stands, as nightshift judges GitHub's status and
/// conclusion (docs/github.md#ci).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckVerdict {
    /// Queued, in progress, waiting (a check run not `completed`; a status
    /// `pending`).
    Pending,
    /// `success`, `neutral` or `skipped`.
    Passed,
    /// `failure`, `timed_out`, `cancelled`, `action_required`,
    /// `startup_failure`, `stale` (a status `failure` or `error`).
    Failed,
}

/// Which of GitHub's two reporting APIs a check came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckSource {
    /// A check run (GitHub Actions, GitHub Apps).
    Run,
    /// A legacy commit status (its `context` is the name).
    Status,
}

/// One check of one commit, as nightshift needs it. Texts are GitHub's, cut
/// to [`CHECK_NAME_CHARS`] / [`CHECK_SUMMARY_CHARS`] and with every secret
/// this process holds masked; they are not escaped (their reader does that).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The check run's `name`, or the status's `context`.
    pub name: String,
    /// The commit GitHub reported it for.
    pub head_sha: String,
    pub source: CheckSource,
    pub verdict: CheckVerdict,
    /// GitHub's own word: the conclusion of a completed check run, else its
    /// status (`queued`, `in_progress`); a status's `state`.
    pub conclusion: String,
    /// The check's page (`html_url`, else `details_url`; a status's `target_url`).
    pub url: Option<String>,
    /// The output's title, summary and text (a status's `description`).
    pub summary: String,
    /// The GitHub Actions job behind a check run (its id; `None` for other
    /// apps and for statuses), for its log and a re-run.
    pub job_id: Option<u64>,
}

/// The checks the base branch requires, by name, and where they were learnt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequiredChecks {
    /// Check names (a check run's name or a status's context).
    pub names: BTreeSet<String>,
    /// Whether branch protection answered (not 404/403).
    pub protection_known: bool,
    /// Whether the rulesets answered (not 404/403).
    pub rulesets_known: bool,
}

impl Forge {
    /// Every check reported for commit `sha`: its check runs (all pages, the
    /// newest run of each name) and its legacy statuses. A check reported for
    /// another commit (GitHub's answer names its `head_sha`) is left out: a
    /// check counts only for the commit it ran on.
    ///
    /// # Errors
    /// [`ForgeError::Api`] when GitHub refuses; [`ForgeError::Decode`] for an
    /// answer without its list; transient failures past the retry policy.
    pub async fn commit_checks(&self, sha: &str) -> Result<Vec<Check>, ForgeError> {
        let out = async {
            let runs = self
                .list_in::<Value>(
                    &format!("/commits/{}/check-runs", encode(sha)),
                    "check_runs",
                )
                .await?;
            let mut by_name: BTreeMap<String, (u64, Check)> = BTreeMap::new();
            for run in &runs {
                let Some(check) = self.check_of_run(run) else {
                    continue;
                };
                let id = run["id"].as_u64().unwrap_or(0);
                if check.head_sha != sha || by_name.get(&check.name).is_some_and(|(i, _)| *i > id) {
                    continue;
                }
                by_name.insert(check.name.clone(), (id, check));
            }
            let mut checks: Vec<Check> = by_name.into_values().map(|(_, c)| c).collect();
            checks.extend(self.commit_statuses(sha).await?);
            Ok(checks)
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// The legacy statuses of `sha` (`GET .../commits/{sha}/status`, the
    /// newest of each context, as GitHub combines them), first page of 100.
    async fn commit_statuses(&self, sha: &str) -> Result<Vec<Check>, ForgeError> {
        let path = self.repo_path(&format!(
            "/commits/{}/status?per_page={PER_PAGE}",
            encode(sha)
        ));
        let reply = self.get_ok(&path).await?;
        let v: Value = self.decode(Verb::Get, &path, &reply)?;
        let reported = v["sha"].as_str().unwrap_or(sha);
        if reported != sha {
            return Ok(Vec::new());
        }
        let statuses = v["statuses"].as_array().cloned().unwrap_or_default();
        Ok(statuses
            .iter()
            .filter_map(|s| {
                let name = s["context"].as_str()?;
                let state = s["state"].as_str().unwrap_or("pending");
                let verdict = match state {
                    "success" => CheckVerdict::Passed,
                    "failure" | "error" => CheckVerdict::Failed,
                    _ => CheckVerdict::Pending,
                };
                Some(Check {
                    name: self.text(name, CHECK_NAME_CHARS),
                    head_sha: sha.to_string(),
                    source: CheckSource::Status,
                    verdict,
                    conclusion: self.text(state, 40),
                    url: s["target_url"].as_str().map(|u| self.text(u, 2_000)),
                    summary: self
                        .text(s["description"].as_str().unwrap_or(""), CHECK_SUMMARY_CHARS),
                    job_id: None,
                })
            })
            .collect())
    }

    /// A check run's JSON as a [`Check`]; `None` without a name.
    fn check_of_run(&self, run: &Value) -> Option<Check> {
        let name = run["name"].as_str()?;
        let status = run["status"].as_str().unwrap_or("queued");
        let conclusion = run["conclusion"].as_str();
        let verdict = match (status, conclusion) {
            ("completed", Some("success" | "neutral" | "skipped")) => CheckVerdict::Passed,
            ("completed", Some(_)) => CheckVerdict::Failed,
            _ => CheckVerdict::Pending,
        };
        let output = &run["output"];
        let summary = ["title", "summary", "text"]
            .iter()
            .filter_map(|k| output[*k].as_str())
            .filter(|t| !t.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        let actions = run["app"]["slug"].as_str() == Some("github-actions");
        Some(Check {
            name: self.text(name, CHECK_NAME_CHARS),
            head_sha: run["head_sha"].as_str().unwrap_or("").to_string(),
            source: CheckSource::Run,
            verdict,
            conclusion: self.text(conclusion.unwrap_or(status), 40),
            url: run["html_url"]
                .as_str()
                .or(run["details_url"].as_str())
                .map(|u| self.text(u, 2_000)),
            summary: self.text(&summary, CHECK_SUMMARY_CHARS),
            job_id: if actions { run["id"].as_u64() } else { None },
        })
    }

    /// The checks branch `base` requires: the contexts of its protection's
    /// required status checks (`GET .../branches/{base}/protection/required_status_checks`)
    /// and of the `required_status_checks` rules of the rulesets that apply
    /// to it (`GET .../rules/branches/{base}`, all pages). A 404 or 403 of
    /// either (no protection, or a token that may not read it) is "none
    /// known" from that source, not an error.
    ///
    /// # Errors
    /// Any other refusal, and transient failures past the retry policy.
    pub async fn required_checks(&self, base: &str) -> Result<RequiredChecks, ForgeError> {
        let out = async {
            let mut required = RequiredChecks::default();
            let path = self.repo_path(&format!(
                "/branches/{}/protection/required_status_checks",
                encode(base)
            ));
            if let Some(v) = self.get_unless_hidden(&path).await? {
                required.protection_known = true;
                let contexts = v["contexts"].as_array().into_iter().flatten();
                let checks = v["checks"].as_array().into_iter().flatten();
                let named = contexts.chain(checks.map(|c| &c["context"]));
                required.names.extend(
                    named
                        .filter_map(Value::as_str)
                        .map(|n| self.text(n, CHECK_NAME_CHARS)),
                );
            }
            let rules = format!("/rules/branches/{}", encode(base));
            if let Some(rules) = self.list_unless_hidden(&rules).await? {
                required.rulesets_known = true;
                for rule in rules
                    .iter()
                    .filter(|r| r["type"] == "required_status_checks")
                {
                    let listed = rule["parameters"]["required_status_checks"].as_array();
                    required.names.extend(
                        listed
                            .into_iter()
                            .flatten()
                            .filter_map(|c| c["context"].as_str())
                            .map(|n| self.text(n, CHECK_NAME_CHARS)),
                    );
                }
            }
            Ok(required)
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Asks GitHub Actions to run job `job_id` again (`POST
    /// .../actions/jobs/{job_id}/rerun`), for a failure with no log and no
    /// output (an infrastructure failure).
    ///
    /// # Errors
    /// [`ForgeError::Api`] when refused (403: the token may not write
    /// Actions); transient failures past the retry policy.
    pub async fn rerun_job(&self, job_id: u64) -> Result<(), ForgeError> {
        let out = async {
            let path = self.repo_path(&format!("/actions/jobs/{job_id}/rerun"));
            let reply = self.call(Verb::Post, &path, Some(&json!({}))).await?;
            if reply.status.is_success() {
                Ok(())
            } else {
                Err(self.refused(Verb::Post, &path, &reply, None))
            }
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// Marks draft PR `number` ready for review (GraphQL
    /// `markPullRequestReadyForReview` with the PR's `node_id`, read from
    /// `GET .../pulls/{number}`). Returns `false` when the PR was not a
    /// draft (nothing sent). Idempotent: GitHub accepts it for a PR already
    /// ready.
    ///
    /// # Errors
    /// [`ForgeError::Api`] when refused, or when GraphQL answers `errors`
    /// (status 200 with the message); transient failures past the retry policy.
    pub async fn mark_ready_for_review(&self, number: u64) -> Result<bool, ForgeError> {
        let out = async {
            let path = self.repo_path(&format!("/pulls/{number}"));
            let reply = self.get_ok(&path).await?;
            let pull: Value = self.decode(Verb::Get, &path, &reply)?;
            if pull["draft"] != json!(true) {
                return Ok(false);
            }
            let id = pull["node_id"].as_str().unwrap_or_default();
            let query = "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } } }";
            let payload = json!({"query": query, "variables": {"id": id}});
            let reply = self.call(Verb::Post, GRAPHQL_PATH, Some(&payload)).await?;
            if !reply.status.is_success() {
                return Err(self.refused(Verb::Post, GRAPHQL_PATH, &reply, None));
            }
            let v: Value = self.decode(Verb::Post, GRAPHQL_PATH, &reply)?;
            match v["errors"].as_array().filter(|e| !e.is_empty()) {
                Some(errors) => Err(ForgeError::Api {
                    method: "POST",
                    path: GRAPHQL_PATH.to_string(),
                    status: reply.status.as_u16(),
                    message: self.text(
                        errors[0]["message"].as_str().unwrap_or("GraphQL error"),
                        500,
                    ),
                    errors: Vec::new(),
                    request_id: header(&reply.headers, "x-github-request-id").map(str::to_string),
                    hint: Some("the token needs write access to pull requests".to_string()),
                    scope: super::Scope::Item,
                }),
                None => Ok(true),
            }
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// GitHub text as kept: secrets masked, cut to `limit` characters.
    fn text(&self, s: &str, limit: usize) -> String {
        clamp_chars(&self.redact(s), limit)
    }

    /// A GET whose 404 or 403 (not a rate limit: those are retried) means
    /// "not there, or not for this token": `None`.
    async fn get_unless_hidden(&self, path: &str) -> Result<Option<Value>, ForgeError> {
        let reply = self.call(Verb::Get, path, None).await?;
        match reply.status.as_u16() {
            404 | 403 => Ok(None),
            _ if reply.status.is_success() => Ok(Some(self.decode(Verb::Get, path, &reply)?)),
            _ => Err(self.refused(Verb::Get, path, &reply, None)),
        }
    }

    /// [`Forge::list_in`] of a top-level JSON array at `rest`, `None` when
    /// its first page answers 404 or 403.
    async fn list_unless_hidden(&self, rest: &str) -> Result<Option<Vec<Value>>, ForgeError> {
        let first = self.repo_path(&format!("{rest}?per_page={PER_PAGE}&page=1"));
        let reply = self.call(Verb::Get, &first, None).await?;
        if matches!(reply.status.as_u16(), 404 | 403) {
            return Ok(None);
        }
        self.list_in::<Value>(rest, "").await.map(Some)
    }
}
