//! The `[serve]` table (docs/config.md#serve, docs/serve.md#pruning): how
//! long the ledger keeps the events the board replays.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[serve]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Serve {
    /// How long events are kept after they were written (`"30d"`, `"12h"`);
    /// older ones are deleted at the end of every run and hourly by a
    /// running `serve`, never those of a run still running. The HTML page
    /// of a run whose events are gone has no timeline. Default 30 days.
    #[serde(with = "super::forms::human_duration")]
    pub retention: Duration,
}

/// The default `[serve] retention`: 30 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

impl Default for Serve {
    fn default() -> Self {
        Serve {
            retention: DEFAULT_RETENTION,
        }
    }
}
