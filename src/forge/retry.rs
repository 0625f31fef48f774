//! The one retry policy of every GitHub call: how long nightshift waits before the next attempt
//! (backoff, the wait for a rate limit that names no time) and when it gives up. Which answers
//! are transient is [`super::transient`]'s; the loop that waits is [`super::call`]'s.

use std::time::Duration;

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
