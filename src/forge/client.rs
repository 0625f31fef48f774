//! The client itself: one request with its timeout, the decoding of an
//! answer, and the bookkeeping of a client that has stopped.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use octocrab::Octocrab;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use super::RepoProbe;
use super::body::{header, is_cut_short};
use super::error::ForgeError;
use super::exchange::{Reply, Verb};
use super::html::{describe_body, quote};
use super::repo::RepoId;
use super::retry::RetryPolicy;
use super::transient::{Transient, Wait, classify};
use crate::secret::{Redactor, Secret};

/// The GitHub client for one repository, with no automatic retry of creates.
///
/// One client serves one run: after a refusal every call would meet (see
/// [`crate::forge::Scope::Run`]) it sends nothing more and answers [`ForgeError::Stopped`].
#[derive(Debug)]
pub struct Forge {
    pub(super) client: Octocrab,
    /// The same token at GitHub's GraphQL root (`https://api.github.com`,
    /// `https://HOST/api` for an Enterprise server whose REST root is
    /// `…/api/v3`), for [`super::checks::GRAPHQL_PATH`].
    pub(super) graphql: Octocrab,
    pub(super) repo: RepoId,
    /// The API base as given, without trailing slashes (for messages).
    pub(super) api_base: String,
    pub(super) deadline: Option<DateTime<Utc>>,
    pub(super) policy: RetryPolicy,
    /// Masks the token in every text this client hands out.
    pub(super) redactor: Redactor,
    /// Why GitHub is left alone for the rest of the run, once it is.
    pub(super) stopped: Mutex<Option<String>>,
    /// Whether the repository's move (a followed redirect) was reported.
    pub(super) moved: std::sync::atomic::AtomicBool,
    /// The last answer with an `ETag` per GET path, for conditional reads
    /// (bounded, this client's alone).
    pub(super) etags: Mutex<super::etag::EtagCache>,
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
        let graphql = Octocrab::builder()
            .base_uri(graphql_root(base))
            .map_err(|e| client_error(describe_octocrab(&e)))?
            .personal_token(token.expose().to_string())
            .add_header(http::header::ACCEPT, "application/json".to_string())
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(policy.request_timeout))
            .set_write_timeout(Some(policy.request_timeout))
            .build()
            .map_err(|e| client_error(describe_octocrab(&e)))?;
        // From here on the token is masked in everything nightshift keeps or sends.
        crate::secret::remember([token.expose()]);
        Ok(Forge {
            client,
            graphql,
            repo,
            api_base: base.to_string(),
            deadline,
            policy,
            redactor: Redactor::new([token.expose()]),
            stopped: Mutex::new(None),
            moved: std::sync::atomic::AtomicBool::new(false),
            etags: Mutex::new(super::etag::EtagCache::default()),
        })
    }

    /// How many reads GitHub answered `304 Not Modified` (the kept answer
    /// stood for them), for the log.
    pub fn not_modified(&self) -> u64 {
        self.etags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .not_modified
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
}

impl Forge {
    /// `/repos/{owner}/{name}` + `rest`.
    pub(super) fn repo_path(&self, rest: &str) -> String {
        format!(
            "/repos/{}/{}{rest}",
            encode(&self.repo.owner),
            encode(&self.repo.name)
        )
    }

    /// A GET with retries whose final answer must be 2xx.
    pub(super) async fn get_ok(&self, path: &str) -> Result<Reply, ForgeError> {
        let reply = self.call(Verb::Get, path, None).await?;
        if reply.status.is_success() {
            Ok(reply)
        } else {
            Err(self.refused(Verb::Get, path, &reply, None))
        }
    }

    /// One request with the per-request timeout; transient failures are
    /// returned as `Err` with the wait they call for (texts redacted).
    pub(super) async fn attempt(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, Transient> {
        let send = self.send_following(verb, path, body);
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

    /// `s` with the token and every other secret nightshift holds masked
    /// (see [`crate::secret::remember`]), also encoded or cut by line breaks.
    pub(super) fn redact(&self, s: &str) -> String {
        crate::secret::redact_known(&self.redactor.redact(s))
    }

    /// `err` with the token masked wherever a server may have echoed it.
    pub(super) fn scrub(&self, err: ForgeError) -> ForgeError {
        err.map_text(|s| self.redact(s))
    }
}

/// Checks an API base: an `http(s)` URL with a host, and not GitHub's
/// website. Returns the sentence to show otherwise.
pub(super) fn check_api_base(base: &str) -> Result<(), String> {
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

/// GitHub's GraphQL root for REST root `base`: `https://HOST/api` for an
/// Enterprise server's `https://HOST/api/v3`, else `base` itself
/// (`https://api.github.com/graphql`).
pub(super) fn graphql_root(base: &str) -> String {
    base.strip_suffix("/api/v3")
        .map(|host| format!("{host}/api"))
        .unwrap_or_else(|| base.to_string())
}

/// octocrab errors display as just "GitHub"; spell out what is known.
pub(super) fn describe_octocrab(e: &octocrab::Error) -> String {
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

/// What [`encode`] escapes: everything but RFC 3986's unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`), so a value is safe as a path segment and as a
/// query value alike.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a path segment or query value (a label name, an
/// `owner:branch`, an owner or repository name) as UTF-8.
pub(super) fn encode(value: &str) -> String {
    utf8_percent_encode(value, COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode("o:nightshift/a b"), "o%3Anightshift%2Fa%20b");
        assert_eq!(encode("autopilot-found"), "autopilot-found");
        assert_eq!(encode("a.b_c~d-é"), "a.b_c~d-%C3%A9");
    }
}
