//! The one retry policy of every GitHub call: which answers are transient,
//! how long to wait before the next attempt, and when to give up.

use std::time::Duration;

use chrono::{DateTime, Utc};
use http::StatusCode;
use serde_json::Value;

use super::body::{error_message, header};
use super::client::{Forge, Reply, Verb};
use super::error::ForgeError;

/// The one retry policy for every GitHub call (docs/github.md#retries).
///
/// Retried: 5xx, 429, 403 rate limits (primary: `x-ratelimit-remaining: 0`;
/// secondary: the message says "secondary rate limit" or "abuse detection",
/// or `retry-after` is present), timeouts, connection failures and look-ups
/// whose 2xx body was cut short. The wait
/// is `retry-after` (seconds or an HTTP date) if given, else until
/// `x-ratelimit-reset` (epoch seconds, measured against GitHub's `Date`)
/// when `x-ratelimit-remaining` is 0, else for a rate limit
/// `secondary_wait` doubling while it goes on (GitHub: at least a minute,
/// then exponentially longer), else exponential backoff from
/// `backoff_base`. A refusal that is not a rate limit (bad credentials,
/// SAML SSO, missing permission) is never retried, whatever its
/// rate-limit headers say; nor is an archived or blocked repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First backoff; doubles per attempt.
    pub backoff_base: Duration,
    /// Cap on one backoff step (not on a wait GitHub asked for).
    pub backoff_max: Duration,
    /// First wait for a rate limit that names no time (GitHub: at least one
    /// minute); doubles with each further one in the same call.
    pub secondary_wait: Duration,
    /// Cap on the sum of all waits of one call.
    pub max_total_wait: Duration,
    /// Cap on attempts of one call (the first included).
    pub max_attempts: u32,
    /// Timeout of one HTTP request, body included.
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            backoff_base: Duration::from_secs(2),
            backoff_max: Duration::from_secs(60),
            secondary_wait: Duration::from_secs(60),
            max_total_wait: Duration::from_secs(15 * 60),
            max_attempts: 6,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Environment variable that shortens every GitHub retry wait nightshift
/// chooses itself (backoff steps, the unnamed secondary-limit wait) to this
/// many milliseconds. For tests of the fault handling; waits GitHub names
/// (`retry-after`, `x-ratelimit-reset`) are still honoured.
pub const BACKOFF_ENV: &str = "NIGHTSHIFT_GITHUB_BACKOFF_MS";

impl RetryPolicy {
    /// The default policy, with the waits it chooses itself shortened to the
    /// milliseconds in `backoff_ms` ([`BACKOFF_ENV`]) when that is a number.
    pub fn from_backoff_ms(backoff_ms: Option<&str>) -> RetryPolicy {
        let default = RetryPolicy::default();
        match backoff_ms.and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(ms) => RetryPolicy {
                backoff_base: Duration::from_millis(ms),
                backoff_max: Duration::from_millis(ms.saturating_mul(8)),
                secondary_wait: Duration::from_millis(ms),
                ..default
            },
            None => default,
        }
    }

    /// [`RetryPolicy::from_backoff_ms`] of the process environment.
    pub fn from_env() -> RetryPolicy {
        RetryPolicy::from_backoff_ms(std::env::var(BACKOFF_ENV).ok().as_deref())
    }
}

/// How long to wait before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// GitHub named it (`retry-after`, `x-ratelimit-reset`).
    Given(Duration),
    /// A rate limit that names no time: [`RetryPolicy::secondary_wait`],
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

/// Waits spent so far on one call.
#[derive(Debug, Default)]
pub(super) struct Budget {
    pub(super) attempts: u32,
    /// Rate limits without a named time met so far (for the doubling).
    pub(super) limits: u32,
    pub(super) waited: Duration,
}

/// What a create came to.
pub(super) enum Created<T> {
    /// GitHub answered (2xx or a final 4xx).
    Answered(Reply),
    /// The create failed transiently, but a look-up found the object.
    Found(T),
}

impl Forge {
    /// An idempotent call, retried on transient failures; returns the first
    /// final answer (2xx or non-retried 4xx) for the caller to judge.
    pub(super) async fn call(
        &self,
        verb: Verb,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, ForgeError> {
        self.check_stopped()?;
        let mut budget = Budget::default();
        loop {
            match self.attempt(verb, path, body).await {
                Ok(reply) => return Ok(reply),
                Err(transient) => self.pause(&mut budget, verb, path, transient).await?,
            }
        }
    }

    /// A create sent at most once per proven absence: after a transient
    /// failure it waits, asks `lookup` whether the server performed it after
    /// all, and re-sends only if not.
    pub(super) async fn create_once<T, Fut>(
        &self,
        path: &str,
        payload: &Value,
        lookup: impl Fn() -> Fut,
    ) -> Result<Created<T>, ForgeError>
    where
        Fut: std::future::Future<Output = Result<Option<T>, ForgeError>>,
    {
        self.check_stopped()?;
        let mut budget = Budget::default();
        loop {
            match self.attempt(Verb::Post, path, Some(payload)).await {
                Ok(reply) => return Ok(Created::Answered(reply)),
                Err(transient) => {
                    self.pause(&mut budget, Verb::Post, path, transient).await?;
                    if let Some(found) = lookup().await? {
                        tracing::info!(
                            path,
                            "create answered with a failure had been performed; using it"
                        );
                        return Ok(Created::Found(found));
                    }
                }
            }
        }
    }

    /// Waits before the next attempt, or gives up when the attempt cap, the
    /// total wait budget or the deadline would be exceeded.
    pub(super) async fn pause(
        &self,
        budget: &mut Budget,
        verb: Verb,
        path: &str,
        transient: Transient,
    ) -> Result<(), ForgeError> {
        budget.attempts += 1;
        if budget.attempts >= self.policy.max_attempts {
            return Err(ForgeError::Exhausted {
                method: verb.as_str(),
                path: path.to_string(),
                attempts: budget.attempts,
                waited_secs: budget.waited.as_secs(),
                last: transient.why,
            });
        }
        let wait = match transient.wait {
            Wait::Given(d) => d,
            Wait::Limit => {
                budget.limits += 1;
                let factor = 2u32.saturating_pow((budget.limits - 1).min(20));
                self.policy.secondary_wait.saturating_mul(factor)
            }
            Wait::Backoff => backoff(&self.policy, budget.attempts),
        };
        let too_long = |limit: String| ForgeError::WaitTooLong {
            method: verb.as_str(),
            path: path.to_string(),
            wait_secs: wait.as_secs(),
            last: transient.why.clone(),
            limit,
        };
        if let Some(deadline) = self.deadline {
            let wake = chrono::Duration::from_std(wait)
                .map(|w| Utc::now() + w)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            if wake > deadline {
                return Err(too_long(format!("the deadline {}", deadline.to_rfc3339())));
            }
        }
        if budget.waited + wait > self.policy.max_total_wait {
            return Err(too_long(format!(
                "the retry budget of {} s",
                self.policy.max_total_wait.as_secs()
            )));
        }
        tracing::warn!(method = verb.as_str(), path, wait_ms = wait.as_millis() as u64, why = %transient.why, "GitHub call failed transiently; waiting");
        tokio::time::sleep(wait).await;
        budget.waited += wait;
        Ok(())
    }

    /// Whether a wait of `wait` ends before the deadline (if any) and within
    /// the total wait budget of one call.
    pub(super) fn wait_fits(&self, wait: Duration) -> bool {
        let before_deadline = self.deadline.is_none_or(|deadline| {
            chrono::Duration::from_std(wait).is_ok_and(|w| Utc::now() + w <= deadline)
        });
        before_deadline && wait <= self.policy.max_total_wait
    }
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

/// Exponential backoff for attempt `n` (1-based), capped.
pub(super) fn backoff(policy: &RetryPolicy, n: u32) -> Duration {
    let factor = 2u32.saturating_pow(n.saturating_sub(1).min(20));
    policy
        .backoff_base
        .saturating_mul(factor)
        .min(policy.backoff_max)
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

    #[test]
    fn secondary_limits_double() {
        // Checked through `pause` in tests/forge.rs; here the factor alone.
        let p = RetryPolicy {
            secondary_wait: Duration::from_secs(60),
            ..RetryPolicy::default()
        };
        let waits: Vec<u64> = (1u32..=3)
            .map(|n| p.secondary_wait.saturating_mul(2u32.pow(n - 1)).as_secs())
            .collect();
        assert_eq!(waits, [60, 120, 240]);
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(500),
            ..RetryPolicy::default()
        };
        let got: Vec<u128> = (1..=5).map(|n| backoff(&p, n).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 500, 500]);
        assert_eq!(backoff(&p, u32::MAX), Duration::from_millis(500));
    }
}
