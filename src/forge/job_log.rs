//! The tail of one GitHub Actions job's log (docs/github.md#ci): `GET
//! .../actions/jobs/{job_id}/logs` answers `302` to a short-lived URL on
//! another host, as GitHub does. That one redirect is followed here, without
//! the token (the URL carries its own signature), only to an `https` address
//! that is not a local or private one (unless the API itself is served on
//! this machine: the tests' setup), within a timeout, reading at most
//! [`LOG_READ_CAP`] bytes and keeping the last [`TAIL_BYTES`]. The text is
//! cleaned of terminal escapes and control characters, cut to its last
//! lines, and every secret this process holds is masked.

use std::net::IpAddr;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;

use super::body::header;
use super::clamp_chars;
use super::client::Forge;
use super::error::{ForgeError, Scope};
use super::exchange::Verb;

/// Bytes of a log read before the rest is left unread (a job's log may be
/// hundreds of megabytes; its end is what names the fault).
pub const LOG_READ_CAP: usize = 64 * 1024 * 1024;

/// Bytes of the log's end kept while reading (far more than 80 lines).
pub const TAIL_BYTES: usize = 256 * 1024;

/// Characters kept of one log line.
pub const LOG_LINE_CHARS: usize = 500;

impl Forge {
    /// The last `lines` lines of job `job_id`'s log, cleaned and masked;
    /// `None` when GitHub has no log for it (404 or 410: not kept, expired,
    /// or the job never started).
    ///
    /// # Errors
    /// [`ForgeError::Api`] (scope: the item) when the redirect points at an
    /// address nightshift does not follow (not `https`, a local or private
    /// address, no `Location`), when the log's host redirects again, or
    /// answers a failure; [`ForgeError::Exhausted`] when it does not answer
    /// within the request timeout. The signed URL itself is never named in
    /// an error (its query is a credential); only its origin is.
    pub async fn job_log_tail(
        &self,
        job_id: u64,
        lines: usize,
    ) -> Result<Option<String>, ForgeError> {
        let out = async {
            let path = self.repo_path(&format!("/actions/jobs/{job_id}/logs"));
            let reply = self.call(Verb::Get, &path, None).await?;
            let status = reply.status.as_u16();
            let raw = match status {
                404 | 410 => return Ok(None),
                200..=299 => reply.body.into_bytes(),
                301 | 302 | 303 | 307 | 308 => {
                    let location = header(&reply.headers, "location")
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    let target = self.log_target(&path, &location)?;
                    self.download(&path, &target).await?
                }
                _ => return Err(self.refused(Verb::Get, &path, &reply, None)),
            };
            Ok(Some(self.redact(&log_tail(&raw, lines))))
        };
        out.await.map_err(|e| self.scrub(e))
    }

    /// The log's address when nightshift may follow it there: `https` to a
    /// host that is not local or private; `http` and local addresses only
    /// when the API base itself is on this machine (a test's fake).
    fn log_target(&self, path: &str, location: &str) -> Result<url::Url, ForgeError> {
        let refuse = |why: String| self.log_refusal(path, 302, why);
        let url = url::Url::parse(location)
            .map_err(|_| refuse("the job log's redirect has no usable Location".to_string()))?;
        let origin = origin_of(&url);
        let api_local = url::Url::parse(&self.api_base).is_ok_and(|u| is_local(&u));
        if !api_local && url.scheme() != "https" {
            return Err(refuse(format!(
                "the job log's redirect points at {origin}, which is not https; not followed"
            )));
        }
        if !api_local && is_local(&url) {
            return Err(refuse(format!(
                "the job log's redirect points at a local or private address, {origin}; not followed"
            )));
        }
        if !matches!(url.scheme(), "https" | "http") {
            return Err(refuse(format!(
                "the job log's redirect points at {origin}; not followed"
            )));
        }
        Ok(url)
    }

    /// GETs the log at `url` without the token, at most [`LOG_READ_CAP`]
    /// bytes within twice the request timeout, and keeps its last
    /// [`TAIL_BYTES`].
    async fn download(&self, path: &str, url: &url::Url) -> Result<Vec<u8>, ForgeError> {
        let origin = origin_of(url);
        let limit = self.policy.request_timeout.saturating_mul(2);
        let fetch = async {
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_native_roots()
                .map_err(|e| format!("TLS roots: {e}"))?
                .https_or_http()
                .enable_http1()
                .build();
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build::<_, Empty<Bytes>>(https);
            let req = hyper::Request::get(url.as_str())
                .header(
                    "user-agent",
                    concat!("nightshift/", env!("CARGO_PKG_VERSION")),
                )
                .body(Empty::new())
                .map_err(|_| "not a usable URL".to_string())?;
            let resp = client.request(req).await.map_err(|e| format!("{e}"))?;
            let status = resp.status().as_u16();
            if resp.status().is_redirection() {
                return Err(format!(
                    "{status}: the log's host redirects again (one redirect is followed)"
                ));
            }
            if !resp.status().is_success() {
                return Err(format!("answered {status}"));
            }
            let mut body = resp.into_body();
            let (mut tail, mut read) = (Vec::new(), 0usize);
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| format!("the log stopped midway: {e}"))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                read += data.len();
                tail.extend_from_slice(&data);
                if tail.len() > 2 * TAIL_BYTES {
                    tail.drain(..tail.len() - TAIL_BYTES);
                }
                if read >= LOG_READ_CAP {
                    tracing::warn!(%origin, read, "job log cut at the read cap");
                    break;
                }
            }
            let keep = tail.len().saturating_sub(TAIL_BYTES);
            tail.drain(..keep);
            Ok(tail)
        };
        match tokio::time::timeout(limit, fetch).await {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(why)) => Err(self.log_refusal(
                path,
                502,
                format!("the job log at {origin}: {}", self.redact(&why)),
            )),
            Err(_) => Err(ForgeError::Exhausted {
                method: "GET",
                path: format!("{origin} (the job log)"),
                attempts: 1,
                waited_secs: limit.as_secs(),
                last: format!("no whole answer within {}", crate::duration::format(limit)),
            }),
        }
    }

    /// An item-scoped error about the job log of `path`.
    fn log_refusal(&self, path: &str, status: u16, why: String) -> ForgeError {
        ForgeError::Api {
            method: "GET",
            path: path.to_string(),
            status,
            message: why,
            errors: Vec::new(),
            request_id: None,
            hint: None,
            scope: Scope::Item,
        }
    }
}

/// `scheme://host[:port]` of `url` (never its path or query).
fn origin_of(url: &url::Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}://{}{port}", url.scheme(), url.host_str().unwrap_or("?"))
}

/// Whether `url`'s host is this machine or a private network: `localhost`,
/// a loopback, private, link-local, unspecified or unique-local address.
fn is_local(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => local_ip(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => local_ip(IpAddr::V6(ip)),
        None => true,
    }
}

fn local_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback() || v4.is_private() || v4.is_link_local() || v4.is_unspecified()
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| local_ip(IpAddr::V4(v4)))
        }
    }
}

/// The last `lines` lines of a log: decoded as UTF-8 (bad bytes replaced),
/// terminal escape sequences and other control characters removed, each
/// line cut to [`LOG_LINE_CHARS`] characters.
pub fn log_tail(raw: &[u8], lines: usize) -> String {
    let text = strip_escapes(&String::from_utf8_lossy(raw));
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    all[from..]
        .iter()
        .map(|l| clamp_chars(l.trim_end(), LOG_LINE_CHARS))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `s` without ANSI/VT escape sequences (CSI `ESC [ … final`, OSC `ESC ] …
/// BEL|ESC \`, two-character `ESC x`) and without control characters other
/// than newline and tab (a carriage return ends a line).
pub fn strip_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => {
                    for n in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&n) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    while let Some(n) = chars.next() {
                        if n == '\u{7}' || (n == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push('\n');
                }
            }
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_controls_are_removed() {
        let raw = "\u{1b}[31merror\u{1b}[0m: \u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{7} a\u{0}b\r\nnext\rover";
        assert_eq!(strip_escapes(raw), "error: link ab\nnext\nover");
    }

    #[test]
    fn the_tail_keeps_the_last_lines_cut() {
        let raw: String = (1..=200).map(|i| format!("line {i}\n")).collect();
        let tail = log_tail(raw.as_bytes(), 3);
        assert_eq!(tail, "line 198\nline 199\nline 200");
        let long = "x".repeat(LOG_LINE_CHARS * 3);
        assert_eq!(log_tail(long.as_bytes(), 5).chars().count(), LOG_LINE_CHARS);
        assert_eq!(log_tail(b"\xff\xfeok", 1), "\u{fffd}\u{fffd}ok");
    }

    #[tokio::test]
    async fn only_https_to_a_public_host_is_followed_from_github() {
        let forge = Forge::new(
            "https://api.github.com",
            crate::secret::Secret::new("t"),
            crate::forge::RepoId::new("o", "r"),
            None,
        )
        .unwrap();
        let path = "/repos/o/r/actions/jobs/1/logs";
        let ok = "https://pipelines.actions.githubusercontent.com/x/logs?sig=abc";
        assert!(forge.log_target(path, ok).is_ok());
        for refused in [
            "http://pipelines.actions.githubusercontent.com/x?sig=abc",
            "https://127.0.0.1/x?sig=abc",
            "https://169.254.169.254/latest?sig=abc",
            "ftp://example.com/x?sig=abc",
            "not a url",
        ] {
            let err = forge.log_target(path, refused).unwrap_err().to_string();
            assert!(!err.contains("sig=abc"), "{err}");
            assert!(
                err.contains("not followed") || err.contains("no usable"),
                "{err}"
            );
        }
    }

    #[test]
    fn local_addresses_are_known() {
        for local in [
            "http://127.0.0.1:9/x",
            "https://localhost/x",
            "https://10.1.2.3/",
            "https://192.168.0.1/",
            "https://169.254.169.254/latest",
            "https://[::1]/",
            "https://[fd00::1]/",
            "https://[::ffff:127.0.0.1]/",
        ] {
            assert!(is_local(&url::Url::parse(local).unwrap()), "{local}");
        }
        for public in [
            "https://pipelines.actions.githubusercontent.com/x",
            "https://8.8.8.8/",
        ] {
            assert!(!is_local(&url::Url::parse(public).unwrap()), "{public}");
        }
    }
}
