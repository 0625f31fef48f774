//! The sleep that follows a reading: the policy (`[limits]` in the config) and the clamped
//! duration. Not the sleeper itself (`schedule::sleep_until`).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{LimitKind, LimitReading};

/// How long to sleep for a reading (docs/limits.md, docs/config.md `limit_buffer`, `limit_sleep_min`,
/// `limit_sleep_max`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SleepPolicy {
    /// Added to a known reset (default 120 s).
    pub buffer: Duration,
    /// Shortest usage-limit sleep (default 60 s).
    pub min: Duration,
    /// Longest usage-limit sleep (default 6 h).
    pub max: Duration,
    /// Usage-limit sleep when no reset could be read (default 1 h).
    pub unknown: Duration,
    /// Shortest transient retry wait (default 1 s).
    pub transient_min: Duration,
    /// Longest transient retry wait (default 5 min).
    pub transient_max: Duration,
    /// Transient wait when the message names none (default 30 s).
    pub transient_default: Duration,
}

impl Default for SleepPolicy {
    fn default() -> Self {
        SleepPolicy {
            buffer: Duration::from_secs(120),
            min: Duration::from_secs(60),
            max: Duration::from_secs(6 * 3600),
            unknown: Duration::from_secs(3600),
            transient_min: Duration::from_secs(1),
            transient_max: Duration::from_secs(300),
            transient_default: Duration::from_secs(30),
        }
    }
}

/// The sleep that follows a reading, measured from `now`.
///
/// Usage limit: `resets_at − now + buffer`, clamped to [`min`, `max`]; `unknown` (clamped the
/// same way) when the reset is unknown. Transient: `retry_after` (or `transient_default`)
/// clamped to [`transient_min`, `transient_max`]. None: zero. docs/limits.md#sleep-policy.
///
/// [`min`]: SleepPolicy::min
/// [`max`]: SleepPolicy::max
/// [`unknown`]: SleepPolicy::unknown
/// [`transient_min`]: SleepPolicy::transient_min
/// [`transient_max`]: SleepPolicy::transient_max
/// [`transient_default`]: SleepPolicy::transient_default
pub fn sleep_for(reading: &LimitReading, now: DateTime<Utc>, policy: &SleepPolicy) -> Duration {
    match reading.kind {
        // No sleep helps an account without credit: its work stops for the night.
        LimitKind::None | LimitKind::NoCredit => Duration::ZERO,
        LimitKind::Transient => {
            let wait = reading.retry_after.unwrap_or(policy.transient_default);
            clamp(wait, policy.transient_min, policy.transient_max)
        }
        LimitKind::UsageLimit => match reading.resets_at {
            None => clamp(policy.unknown, policy.min, policy.max),
            Some(reset) => {
                let until_reset_ms = (reset - now).num_milliseconds();
                let buffer_ms = i64::try_from(policy.buffer.as_millis()).unwrap_or(i64::MAX);
                let total_ms = until_reset_ms.saturating_add(buffer_ms).max(0);
                clamp(
                    Duration::from_millis(total_ms as u64),
                    policy.min,
                    policy.max,
                )
            }
        },
    }
}

/// Clamps to [lo, hi]; a policy with lo > hi yields hi (the cap wins).
fn clamp(d: Duration, lo: Duration, hi: Duration) -> Duration {
    d.max(lo).min(hi)
}
