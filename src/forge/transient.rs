//! Which GitHub answers are worth another attempt, and the wait each calls for: 5xx, 429, primary
//! and secondary rate limits (by GitHub's clock), never a refusal that names itself. The single
//! place where the retry rules of docs/github.md#retries live. Not the waiting (see
//! [`super::call`]) nor the policy's numbers (see [`super::retry`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use http::StatusCode;

use super::body::{error_message, header};
use super::exchange::Reply;

/// How long to wait before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// GitHub named it (`retry-after`, `x-ratelimit-reset`).
    Given(Duration),
    /// A rate limit that names no time: [`super::RetryPolicy::secondary_wait`],
    /// doubling with each such limit in the same call.
    Limit,
    /// Exponential backoff (5xx, timeouts, connection failures).
    Backoff,
}

/// A failure worth another attempt, with the wait it calls for.
#[derive(Debug)]
pub(super) struct Transient {
    pub(super) wait: Wait,
    pub(super) why: String,
}

/// Decides whether an answer is worth another attempt, and how long to wait
/// first. The single place where the retry rules of docs/github.md#retries live.
///
/// Times GitHub names are read against GitHub's clock (its `Date` header,
/// else `now`), so a local clock running ahead does not retry early.
pub(super) fn classify(reply: &Reply, now: DateTime<Utc>) -> Option<Transient> {
    let status = reply.status;
    let server_now = header(&reply.headers, "date")
        .and_then(parse_http_date)
        .unwrap_or(now);
    let retry_after =
        header(&reply.headers, "retry-after").and_then(|v| parse_retry_after(v, server_now));
    let exhausted =
        header(&reply.headers, "x-ratelimit-remaining").is_some_and(|v| v.trim() == "0");
    let reset_wait = || {
        let reset = header(&reply.headers, "x-ratelimit-reset")?
            .trim()
            .parse::<i64>()
            .ok()?;
        let reset = DateTime::<Utc>::from_timestamp(reset, 0)?;
        // At least a second: a reset already past yet still refused must
        // not turn into a burst of retries.
        Some(
            (reset - server_now)
                .to_std()
                .unwrap_or(Duration::ZERO)
                .max(Duration::from_secs(1)),
        )
    };
    let message = error_message(&reply.body, status);
    let why = format!("{} {}", status.as_u16(), message);
    if status.is_server_error() {
        return Some(Transient {
            wait: retry_after.map_or(Wait::Backoff, Wait::Given),
            why,
        });
    }
    if status != StatusCode::FORBIDDEN && status != StatusCode::TOO_MANY_REQUESTS {
        // 401 comes with `x-ratelimit-remaining: 0` too: not a limit.
        return None;
    }
    let text = message.to_ascii_lowercase();
    let limit_text = is_rate_limit_message(&text);
    // A refusal that names itself is not a rate limit, whatever its
    // rate-limit headers say.
    let refusal = !limit_text
        && (header(&reply.headers, "x-github-sso").is_some()
            || [
                "saml",
                "not accessible",
                "login attempts",
                "bad credentials",
                "not permitted",
                "must have",
                "archived",
                "access blocked",
            ]
            .iter()
            .any(|r| text.contains(r)));
    let limited = status == StatusCode::TOO_MANY_REQUESTS
        || limit_text
        || retry_after.is_some()
        || (exhausted && !refusal);
    if !limited {
        return None;
    }
    let wait = match retry_after {
        Some(d) => Wait::Given(d),
        None => match exhausted.then(reset_wait).flatten() {
            Some(d) => Wait::Given(d),
            None => Wait::Limit,
        },
    };
    Some(Transient { wait, why })
}

/// GitHub's rate-limit wordings: "API rate limit exceeded…", "You have
/// exceeded a secondary rate limit…", "You have triggered an abuse detection
/// mechanism…" (lower-case text).
pub(super) fn is_rate_limit_message(lower: &str) -> bool {
    lower.contains("rate limit") || lower.contains("abuse detection")
}

/// [`is_rate_limit_message`] of an answer body.
pub(super) fn is_rate_limit_text(body: &str) -> bool {
    is_rate_limit_message(&error_message(body, StatusCode::FORBIDDEN).to_ascii_lowercase())
}

/// `retry-after`: delay seconds or an HTTP date (RFC 9110 §10.2.3), as a
/// wait from `server_now`.
pub(super) fn parse_retry_after(value: &str, server_now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = parse_http_date(value)?;
    Some((at - server_now).to_std().unwrap_or(Duration::ZERO))
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub(super) fn parse_http_date(value: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(value.trim())
        .ok()
        .map(|d| d.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn reply(status: u16, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            headers: map,
            body: body.to_string(),
        }
    }

    #[test]
    fn classify_table() {
        let now = DateTime::<Utc>::from_timestamp(1_000_000, 0).unwrap();
        let given = |s: u64| Some(Wait::Given(Duration::from_secs(s)));
        let exhausted = |reset: &'static str| {
            vec![("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", reset)]
        };
        let cases: Vec<(Reply, Option<Wait>)> = vec![
            (reply(200, &[], "{}"), None),
            (reply(404, &[], r#"{"message":"Not Found"}"#), None),
            (reply(422, &[], r#"{"message":"Validation Failed"}"#), None),
            (
                reply(
                    403,
                    &[],
                    r#"{"message":"Resource not accessible by integration"}"#,
                ),
                None,
            ),
            (reply(500, &[], ""), Some(Wait::Backoff)),
            (reply(502, &[("retry-after", "7")], ""), given(7)),
            // A bare 429 is a secondary limit: at least the minute.
            (reply(429, &[], ""), Some(Wait::Limit)),
            (reply(429, &exhausted("1000030"), ""), given(30)),
            // A reset in the past (or now) still waits a second.
            (reply(429, &exhausted("999990"), ""), given(1)),
            // The reset only counts when the remaining budget is 0.
            (
                reply(
                    429,
                    &[
                        ("x-ratelimit-remaining", "5"),
                        ("x-ratelimit-reset", "1000030"),
                    ],
                    "",
                ),
                Some(Wait::Limit),
            ),
            (
                reply(403, &[("retry-after", "3")], r#"{"message":"x"}"#),
                given(3),
            ),
            (
                reply(
                    403,
                    &[],
                    r#"{"message":"You have exceeded a secondary rate limit. Please wait."}"#,
                ),
                Some(Wait::Limit),
            ),
            (
                reply(
                    403,
                    &[],
                    r#"{"message":"You have triggered an abuse detection mechanism."}"#,
                ),
                Some(Wait::Limit),
            ),
            (reply(403, &exhausted("1000002"), ""), given(2)),
            // The reset is GitHub's second, measured against its Date: its
            // clock is 60 s behind ours, so 62 s, not 2.
            (
                reply(
                    403,
                    &[
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset", "1000002"),
                        ("date", "Mon, 12 Jan 1970 13:45:40 GMT"),
                    ],
                    r#"{"message":"API rate limit exceeded for user ID 1."}"#,
                ),
                given(62),
            ),
            // retry-after as an HTTP date, from GitHub's Date.
            (
                reply(
                    503,
                    &[
                        ("retry-after", "Mon, 12 Jan 1970 13:46:45 GMT"),
                        ("date", "Mon, 12 Jan 1970 13:46:40 GMT"),
                    ],
                    "",
                ),
                given(5),
            ),
            // Refusals with rate-limit headers are not limits.
            (
                reply(
                    401,
                    &exhausted("1003600"),
                    r#"{"message":"Bad credentials"}"#,
                ),
                None,
            ),
            (
                reply(
                    403,
                    &exhausted("1003600"),
                    r#"{"message":"Maximum number of login attempts exceeded. Please try again later."}"#,
                ),
                None,
            ),
            (
                reply(
                    403,
                    &[
                        (
                            "x-github-sso",
                            "required; url=https://github.com/orgs/a/sso?authorization_request=x",
                        ),
                        ("x-ratelimit-remaining", "0"),
                    ],
                    r#"{"message":"Resource protected by organization SAML enforcement."}"#,
                ),
                None,
            ),
            // An archived or blocked repository is no limit either.
            (
                reply(
                    403,
                    &exhausted("1003600"),
                    r#"{"message":"Repository was archived so is read-only."}"#,
                ),
                None,
            ),
            (
                reply(
                    403,
                    &exhausted("1003600"),
                    r#"{"message":"Repository access blocked","block":{"reason":"tos"}}"#,
                ),
                None,
            ),
            (
                reply(451, &[], r#"{"message":"Repository access blocked"}"#),
                None,
            ),
        ];
        for (r, want) in cases {
            let got = classify(&r, now).map(|t| t.wait);
            assert_eq!(
                got, want,
                "status {} headers {:?} body {}",
                r.status, r.headers, r.body
            );
        }
        assert_eq!(
            parse_http_date("Mon, 12 Jan 1970 13:46:40 GMT").map(|d| d.timestamp()),
            Some(1_000_000)
        );
    }
}
