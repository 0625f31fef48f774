//! Labels: created when missing, added to PRs.

use http::StatusCode;
use serde_json::json;

use super::body::{error_message, header, is_json, mentions_code};
use super::client::{Forge, encode};
use super::error::ForgeError;
use super::exchange::Verb;
use super::refusal::refuses_whole_repo;
use super::transient::is_rate_limit_text;

impl Forge {
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

    /// Whether label `name` exists (`GET .../labels/{name}`: 200 yes, 404 no).
    ///
    /// # Errors
    /// Any other refusal as [`ForgeError::Api`]; persistent transient
    /// failures as [`ForgeError::Exhausted`].
    pub async fn label_exists(&self, name: &str) -> Result<bool, ForgeError> {
        let out = async {
            let path = self.repo_path(&format!("/labels/{}", encode(name)));
            let reply = self.call(Verb::Get, &path, None).await?;
            match reply.status {
                s if s.is_success() => Ok(true),
                StatusCode::NOT_FOUND if is_json(&reply.body) => Ok(false),
                _ => Err(self.refused(Verb::Get, &path, &reply, None)),
            }
        };
        out.await.map_err(|e| self.scrub(e))
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
}
