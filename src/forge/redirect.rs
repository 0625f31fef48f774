//! Redirects, followed here rather than by the HTTP stack: only on the
//! API's own host, with the same verb and body.

use serde_json::Value;

use super::body::{error_details, error_message, header, is_json};
use super::client::Forge;
use super::error::{ForgeError, Scope};
use super::exchange::{Reply, Verb};
use super::html::describe_body;

/// How many redirects one request follows (GitHub needs one for a moved
/// repository); more is a loop.
pub(super) const MAX_REDIRECTS: u32 = 5;

/// Where a redirect points (see `Forge::redirect_target`).
pub(super) enum Redirect {
    /// The path and query to ask next, on the API's own host.
    Same(String),
    /// Another origin (`scheme://host[:port]`): not followed.
    Elsewhere(String),
}

impl Forge {
    /// Sends one request and follows its redirects. They are followed here,
    /// not by the HTTP stack: only on the API's own host (the token goes
    /// nowhere else), with the same verb and body (GitHub answers a moved
    /// repository with 301 to GET and 307 to other verbs: "repeat the
    /// request verbatim"), at most [`MAX_REDIRECTS`] times. Any other 3xx is
    /// returned and judged in `refused`.
    ///
    /// # Errors
    /// octocrab's error when a request fails to complete (connection refused
    /// or reset, a body cut short): the caller treats it as transient.
    pub(super) async fn send_following(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, octocrab::Error> {
        let mut at = path.to_string();
        let mut hops = 0;
        // GraphQL has a root of its own (see `Forge::graphql`).
        let client = if path == super::checks::GRAPHQL_PATH {
            &self.graphql
        } else {
            &self.client
        };
        loop {
            // A read sends back the ETag of its kept answer (docs/github.md#ci).
            let sent = (verb == Verb::Get)
                .then(|| self.etags().for_path(&at))
                .flatten();
            let response = match verb {
                Verb::Get => {
                    let mut headers = http::HeaderMap::new();
                    if let Some(s) = &sent {
                        headers.insert(http::header::IF_NONE_MATCH, s.etag());
                    }
                    client._get_with_headers(at.as_str(), Some(headers)).await
                }
                Verb::Post => client._post(at.as_str(), body).await,
                Verb::Patch => client._patch(at.as_str(), body).await,
            }?;
            let status = response.status();
            let headers = response.headers().clone();
            let text = self.client.body_to_string(response).await?;
            let mut reply = Reply {
                status,
                headers,
                body: text,
            };
            if verb == Verb::Get {
                reply = self.etags().answer(&at, sent, reply);
            }
            match self.redirect_target(&reply) {
                Some(Redirect::Same(next)) if hops < MAX_REDIRECTS => {
                    if hops == 0 {
                        self.note_move(path, &next);
                    }
                    at = next;
                    hops += 1;
                }
                _ => return Ok(reply),
            }
        }
    }

    /// The client's ETag cache (a poisoned lock is still a cache).
    fn etags(&self) -> std::sync::MutexGuard<'_, super::etag::EtagCache> {
        self.etags.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a 301/302/307/308 answer points: [`Redirect::Same`] with the
    /// path and query to ask next when the `Location` is on the API's own
    /// scheme, host and port (or a bare path), else [`Redirect::Elsewhere`]
    /// with the other origin (never its path or query, which may carry
    /// anything). `None` for any other answer or one without `Location`.
    pub(super) fn redirect_target(&self, reply: &Reply) -> Option<Redirect> {
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
    pub(super) fn note_move(&self, from: &str, to: &str) {
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

    /// The error for a redirect `attempt` did not follow: to another host
    /// (the token is never sent there), one too many (a loop), or one
    /// without a usable `Location`. Every call would meet it: [`Scope::Run`].
    pub(super) fn unfollowed_redirect(&self, verb: Verb, path: &str, reply: &Reply) -> ForgeError {
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
}
