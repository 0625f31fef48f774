//! Judging a final answer that is not a success: GitHub's message, the
//! fix a person needs, and how far the refusal reaches.

use http::StatusCode;
use serde_json::Value;

use super::body::{error_details, error_json, error_message, header, is_json};
use super::client::Forge;
use super::error::{ForgeError, Scope};
use super::exchange::{Reply, Verb};
use super::html::{describe_body, quote};
use super::{PrRequest, RepoId};

impl Forge {
    /// Decodes a 2xx body: [`ForgeError::NotGitHub`] (and the client stops)
    /// when it is not JSON at all, [`ForgeError::Decode`] when JSON lacks
    /// what nightshift reads.
    pub(super) fn decode<T: serde::de::DeserializeOwned>(
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
    pub(super) fn parse<T: serde::de::DeserializeOwned>(
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

    pub(super) fn not_github(&self, verb: Verb, path: &str, reply: &Reply) -> ForgeError {
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
    pub(super) fn refused(
        &self,
        verb: Verb,
        path: &str,
        reply: &Reply,
        fix: Option<String>,
    ) -> ForgeError {
        if reply.status.is_redirection() {
            return self.stop_if_run_wide(self.unfollowed_redirect(verb, path, reply));
        }
        if !reply.body.trim().is_empty() && !is_json(&reply.body) {
            return self.stop_if_run_wide(self.not_github(verb, path, reply));
        }
        let status = reply.status;
        let message = error_message(&reply.body, status);
        let lower = message.to_ascii_lowercase();
        // Refusals of the token itself reach every call, whatever the path;
        // the client stops at once (repeated bad credentials make GitHub
        // lock the account out, valid credentials included). So do refusals
        // of the repository as a whole (archived, blocked): their fix beats
        // the caller's (it is not a label permission).
        let (hint, scope) = match self.run_wide_fix(reply, &lower) {
            Some(own) => (Some(own), Scope::Run),
            None => {
                let (own, scope) = self.request_fix(reply, &lower, self.reach(verb, path));
                // The caller's fix fits its request.
                (fix.or(own), scope)
            }
        };
        let err = ForgeError::Api {
            method: verb.as_str(),
            path: path.to_string(),
            status: status.as_u16(),
            message,
            errors: error_details(&reply.body),
            request_id: header(&reply.headers, "x-github-request-id").map(str::to_string),
            hint,
            scope,
        };
        self.stop_if_run_wide(err)
    }

    /// How far a permission refusal of `verb path` reaches: the repository
    /// itself or one of its collections, as opposed to one object in it
    /// (`/pulls/7`, `/issues/7/labels`).
    fn reach(&self, verb: Verb, path: &str) -> Reach {
        let bare = path.split('?').next().unwrap_or(path);
        let rest = bare.strip_prefix(&self.repo_path("")).unwrap_or(bare);
        let repo_level = matches!(rest, "" | "/pulls" | "/issues" | "/labels");
        // A permission refusal there meets every later PR too. Issue creation
        // serves findings only: its refusals do not keep PRs from being
        // opened; nor does a refusal about one object.
        let scope = if repo_level && !(verb == Verb::Post && rest == "/issues") {
            Scope::Run
        } else {
            Scope::Item
        };
        Reach { repo_level, scope }
    }

    /// The fix for a refusal that every call would meet, whatever it asked:
    /// of the token (401, SAML SSO, locked out) or of the repository as a
    /// whole (archived, blocked). `None` for any other refusal.
    fn run_wide_fix(&self, reply: &Reply, lower: &str) -> Option<String> {
        let token_fix = "set a valid GITHUB_TOKEN or GH_TOKEN, or run `gh auth login`";
        let sso = header(&reply.headers, "x-github-sso");
        Some(match reply.status.as_u16() {
            401 => format!(
                "GitHub refused the token (expired, revoked or mistyped): {token_fix}"
            ),
            403 if sso.is_some() || lower.contains("saml") => match sso.and_then(sso_url) {
                Some(url) => format!(
                    "the token is not authorised for the organisation's SAML single sign-on (SSO): open {url} to authorise it (the link expires within an hour), or authorise it under Settings → Developer settings → tokens → Configure SSO; a `gh auth token` needs `gh auth login` again"
                ),
                None => "the token is not authorised for the organisation's SAML single sign-on (SSO): authorise it under Settings → Developer settings → tokens → Configure SSO; a `gh auth token` needs `gh auth login` again".to_string(),
            },
            403 if lower.contains("login attempts") => format!(
                "GitHub locked the account out after repeated bad credentials: wait, then {token_fix}"
            ),
            403 if is_archived_message(lower) => format!(
                "{} is archived, so GitHub refuses every change to it (PRs, labels, issues): unarchive it (Settings → General → Danger Zone), or point GH_REPO / `github_repo` in .nightshift/config.toml and the remote at the active repository",
                self.repo
            ),
            403 if is_blocked_message(lower) => self.blocked_fix(reply),
            451 => self.blocked_fix(reply),
            _ => return None,
        })
    }

    /// The fix for a repository GitHub blocks (451, or 403 "Repository
    /// access blocked"), with the block's reason and notice when given.
    fn blocked_fix(&self, reply: &Reply) -> String {
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
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(" ({why})")
        };
        format!(
            "GitHub blocks access to {}{why}: nothing can be opened there until GitHub lifts the block; point GH_REPO / `github_repo` at another repository",
            self.repo
        )
    }

    /// The fix and reach of a refusal of this one request (a missing
    /// permission, an empty repository, issues switched off), or none.
    fn request_fix(&self, reply: &Reply, lower: &str, reach: Reach) -> (Option<String>, Scope) {
        let (fix, scope) = match reply.status.as_u16() {
            409 if lower.contains("repository is empty") => (
                format!(
                    "{} has no commits on GitHub: push the base branch there first",
                    self.repo
                ),
                Scope::Item,
            ),
            403 if lower.contains("github actions is not permitted") => (
                "turn on \"Allow GitHub Actions to create and approve pull requests\" (repository or organisation Settings → Actions → General), or use a token other than the Actions GITHUB_TOKEN".to_string(),
                reach.scope,
            ),
            403 if lower.contains("not accessible") => {
                let wanted = header(&reply.headers, "x-accepted-github-permissions")
                    .map(|p| format!("GitHub wants {p}; "))
                    .unwrap_or_default();
                (
                    format!(
                        "the token may not do this in {}: {wanted}a fine-grained token needs Pull requests: write and Issues: write (Contents: write to push), a classic token the `repo` scope, the Actions GITHUB_TOKEN `permissions: pull-requests: write, issues: write`",
                        self.repo
                    ),
                    reach.scope,
                )
            }
            403 => return (None, reach.scope),
            404 if reach.repo_level => (
                format!(
                    "GitHub shows no repository {} to this token: it does not exist, or the token may not see it (or write to it) — GitHub answers 404, not 403, to hide private repositories; check GH_REPO, `github_repo` in .nightshift/config.toml and the remote URL, and the token's repository access",
                    self.repo
                ),
                Scope::Run,
            ),
            410 if lower.contains("issues are disabled") => (
                format!(
                    "issues are switched off in {}'s settings: findings stay in the ledger",
                    self.repo
                ),
                Scope::Item,
            ),
            _ => return (None, Scope::Item),
        };
        (Some(fix), scope)
    }

    /// Records a refusal every later call would meet, so that none is sent;
    /// returns the error unchanged.
    pub(super) fn stop_if_run_wide(&self, err: ForgeError) -> ForgeError {
        if err.stops_client()
            && let Ok(mut stopped) = self.stopped.lock()
        {
            stopped.get_or_insert_with(|| self.redact(&err.to_string()));
        }
        err
    }

    /// [`ForgeError::Stopped`] once a run-wide refusal was met.
    pub(super) fn check_stopped(&self) -> Result<(), ForgeError> {
        match self.stopped.lock().map(|s| s.clone()).unwrap_or(None) {
            Some(reason) => Err(ForgeError::Stopped { reason }),
            None => Ok(()),
        }
    }
}

/// GitHub's refusal of any change to an archived repository: "Repository
/// was archived so is read-only." (lower-case text).
pub(super) fn is_archived_message(lower: &str) -> bool {
    lower.contains("archived") && lower.contains("read-only")
}

/// GitHub's "Repository access blocked" (DMCA takedown, terms of service),
/// sent with 451 or 403 (lower-case text).
pub(super) fn is_blocked_message(lower: &str) -> bool {
    lower.contains("access blocked")
}

/// How far a permission refusal reaches (see `Forge::reach`).
#[derive(Debug, Clone, Copy)]
struct Reach {
    /// The repository itself or one of its collections.
    repo_level: bool,
    /// [`Scope::Run`] when such a refusal would meet every later PR.
    scope: Scope,
}

/// Whether a refusal concerns the repository as a whole (archived, blocked),
/// so that every call would meet it, whatever it asked.
pub(super) fn refuses_whole_repo(status: StatusCode, message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    status.as_u16() == 451
        || (status == StatusCode::FORBIDDEN
            && (is_archived_message(&lower) || is_blocked_message(&lower)))
}

/// The authorisation URL of an `x-github-sso: required; url=…` header.
pub(super) fn sso_url(value: &str) -> Option<String> {
    value
        .split(';')
        .map(str::trim)
        .find_map(|part| part.strip_prefix("url="))
        .filter(|url| url.starts_with("https://"))
        .map(str::to_string)
}

/// GitHub's duplicate-PR refusal: 422 whose message (or an entry of
/// `errors`) says "A pull request already exists for owner:branch".
pub(super) fn says_pr_exists(body: &str) -> bool {
    pub(super) const NEEDLE: &str = "a pull request already exists";
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
pub(super) enum PrRefusal {
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

pub(super) fn pr_refusal(body: &str) -> Option<PrRefusal> {
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
pub(super) fn pr_validation_fix(body: &str, req: &PrRequest, repo: &RepoId) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
