//! The one clock every host shares: the database server's
//! (docs/workers.md#what-clocks-must-agree).
//!
//! Several hosts drain one run; the deadline, the sleeps until a usage
//! limit resets, approval expiry and the leases are decisions they share,
//! so none may rest on one host's clock. This process keeps the offset
//! between its own clock and the ledger server's, measured when it connects
//! and again with every heartbeat ([`ServerClock::observe`]); its
//! [`Clock::now`] is the host's clock corrected by that offset. The reading
//! itself (`clock_timestamp()`) is the ledger's; this module only does the
//! arithmetic and the wording, so it stays on the bottom floor.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::{Clock, SleepFuture};

/// How far a host's clock may be from the server's before it is told so
/// (at start, and by `doctor`): a few seconds of drift are normal between
/// NTP-synced hosts and decide nothing that matters at a minute's scale.
pub const MAX_SKEW: Duration = Duration::from_secs(5);

/// Offsets this small are measurement noise, not a wrong clock.
const NOISE: TimeDelta = TimeDelta::milliseconds(50);

/// The host's clock corrected to the database server's: `now()` is
/// `Utc::now()` plus the last measured offset (zero until one is measured).
/// Clones share the offset; [`server_clock`] is the process's one.
#[derive(Debug, Clone, Default)]
pub struct ServerClock {
    /// Server minus host, in milliseconds.
    offset_ms: Arc<AtomicI64>,
    /// Whether an offset was ever measured.
    measured: Arc<AtomicBool>,
}

impl ServerClock {
    /// The offset last measured (server minus host); zero before any.
    pub fn offset(&self) -> TimeDelta {
        TimeDelta::milliseconds(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Whether the offset was measured at least once (else `now()` is the
    /// host's own clock).
    pub fn measured(&self) -> bool {
        self.measured.load(Ordering::Relaxed)
    }

    /// Records a reading `server` of the server's clock taken between the
    /// host instants `before` and `after`: the offset is taken against
    /// their midpoint, so a slow round trip costs at most half of it; an
    /// offset no larger than that uncertainty (plus 50 ms) is zero.
    /// Returns the new offset.
    pub fn observe(
        &self,
        before: DateTime<Utc>,
        server: DateTime<Utc>,
        after: DateTime<Utc>,
    ) -> TimeDelta {
        let half = (after - before) / 2;
        let offset = server - (before + half);
        // Within the round trip's uncertainty (and a little more) the
        // clocks agree: hosts on one machine, or NTP-synced, keep their own
        // clock rather than a noisy correction of it.
        let offset = if offset.abs() <= half + NOISE {
            TimeDelta::zero()
        } else {
            offset
        };
        self.offset_ms
            .store(offset.num_milliseconds(), Ordering::Relaxed);
        self.measured.store(true, Ordering::Relaxed);
        offset
    }
}

impl Clock for ServerClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset()
    }
    fn sleep(&self, d: Duration) -> SleepFuture<'_> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// This process's server clock (one offset per process, shared by its
/// workers and every decision they make).
pub fn server_clock() -> &'static ServerClock {
    static CLOCK: std::sync::OnceLock<ServerClock> = std::sync::OnceLock::new();
    CLOCK.get_or_init(ServerClock::default)
}

/// Now by the database server's clock, as far as this process knows it
/// ([`server_clock`]); the host's clock before the first measurement.
pub fn server_now() -> DateTime<Utc> {
    server_clock().now()
}

/// The line that tells a person this host's clock is off: both times and
/// the offset, or `None` when they agree within [`MAX_SKEW`]. `host` and
/// `server` are the same instant read from both clocks.
pub fn skew_note(host: DateTime<Utc>, server: DateTime<Utc>) -> Option<String> {
    let offset = server - host;
    let limit = TimeDelta::from_std(MAX_SKEW).unwrap_or(TimeDelta::MAX);
    if offset.abs() <= limit {
        return None;
    }
    let way = if offset < TimeDelta::zero() {
        "ahead of"
    } else {
        "behind"
    };
    Some(format!(
        "this host's clock ({}) is {} {way} the ledger server's ({}); nightshift decides the deadline, sleeps and leases by the server's clock, but fix this host's time (NTP) so that logs and agents agree",
        host.format("%Y-%m-%d %H:%M:%S UTC"),
        span(offset.abs()),
        server.format("%Y-%m-%d %H:%M:%S UTC"),
    ))
}

/// `d` as people read an offset: `2h 0m`, `3m 12s`, `9s`.
fn span(d: TimeDelta) -> String {
    // To the nearest second: a reading is a few milliseconds off either way.
    let s = (d.num_milliseconds() + 500) / 1000;
    match s {
        3600.. => format!("{}h {}m", s / 3600, s % 3600 / 60),
        60.. => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_taken_against_the_round_trips_midpoint() {
        let c = ServerClock::default();
        assert!(!c.measured());
        let t = Utc::now();
        let off = c.observe(t, t + TimeDelta::hours(2), t + TimeDelta::seconds(2));
        assert_eq!(off, TimeDelta::hours(2) - TimeDelta::seconds(1));
        assert!(c.measured());
        let now = c.now();
        assert!((now - Utc::now() - off).abs() < TimeDelta::seconds(1));
        // The server's reading inside the round trip: the same clock.
        let same = c.observe(
            t,
            t + TimeDelta::milliseconds(30),
            t + TimeDelta::milliseconds(40),
        );
        assert_eq!(same, TimeDelta::zero());
        assert_eq!(c.offset(), TimeDelta::zero());
    }

    #[test]
    fn skew_is_named_only_past_a_few_seconds_and_says_which_way() {
        let t = Utc::now();
        assert_eq!(skew_note(t, t + TimeDelta::seconds(4)), None);
        let ahead = skew_note(t + TimeDelta::hours(2), t).unwrap();
        assert!(ahead.contains("2h 0m ahead of"), "{ahead}");
        assert!(ahead.contains(&t.format("%H:%M:%S").to_string()), "{ahead}");
        let near = skew_note(t + TimeDelta::hours(2) - TimeDelta::milliseconds(3), t).unwrap();
        assert!(near.contains("2h 0m ahead of"), "{near}");
        let behind = skew_note(t - TimeDelta::hours(2), t).unwrap();
        assert!(behind.contains("behind"), "{behind}");
    }
}
