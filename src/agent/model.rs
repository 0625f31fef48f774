//! The values of an agent call: its [`Role`], the [`Call`] going in, the
//! [`Report`] coming out (text, verdict, [`Usage`], limit, how it ended as
//! [`CallEnd`]) and [`AgentError`].
//!
//! Not for running a call (`call` in this module's root) or any backend's format.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono_tz::Tz;

use crate::config::AgentKind;
use crate::limit::{LimitKind, LimitReading};
use crate::process::{self, Outcome, RunAs};
use crate::review::Verdict;

/// The role an agent call plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Changes the code.
    Writer,
    /// Reads the change and gives a verdict; must not write.
    Reviewer,
}

impl Role {
    /// `writer` or `reviewer` (the `NIGHTSHIFT_ROLE` value).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Reviewer => "reviewer",
        }
    }

    /// The phase a run is in while this role's agent works (`status`).
    pub fn phase(self) -> crate::outcome::Phase {
        match self {
            Role::Writer => crate::outcome::Phase::Writer,
            Role::Reviewer => crate::outcome::Phase::Review,
        }
    }
}

/// One agent call.
#[derive(Debug, Clone)]
pub struct Call {
    /// Writer or reviewer.
    pub role: Role,
    /// 1-based round number.
    pub round: u32,
    /// The full prompt (also on stdin for `command` agents).
    pub prompt: String,
    /// The contract's canonical JSON.
    pub contract_json: String,
    /// The previous round's feedback (may be empty).
    pub feedback: String,
    /// Working directory: the checkout.
    pub cwd: PathBuf,
    /// Per-call wall-clock timeout.
    pub timeout: Duration,
    /// The complete environment of the child (already without token
    /// variables, the ledger URL variable and configured secrets).
    pub env: BTreeMap<String, String>,
    /// Resolved time zone; the child gets `TZ` set to it so local times in
    /// limit messages are read in a known zone.
    pub tz: Tz,
    /// Directory for this call's prompt/contract/feedback files and logs
    /// (outside the checkout).
    pub log_dir: PathBuf,
    /// Secret values to redact from everything captured.
    pub secrets: Vec<String>,
    /// Run as this user (config `agent_user`).
    pub run_as: Option<RunAs>,
    /// Bytes the call may print, stdout and stderr together (config
    /// `max_agent_output`); past it the agent is killed and the call fails.
    pub max_output: u64,
    /// The sandbox the call runs in (docs/security.md#the-sandbox); `None`:
    /// as today.
    pub sandbox: Option<crate::sandbox::Policy>,
}

/// Tokens and cost an agent reported for one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Input tokens (including cache reads/creation where reported).
    pub tokens_in: Option<u64>,
    /// Output tokens.
    pub tokens_out: Option<u64>,
    /// Cost in USD, where the agent reports one (claude does; codex does
    /// not; a command agent does when it writes a usage report, see
    /// [`super::command`]).
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Input tokens reported in Anthropic's three parts (uncached input,
    /// cache reads, cache writes): their sum; `None` when none is given.
    pub(crate) fn input_of(
        input: Option<u64>,
        cache_read: Option<u64>,
        cache_creation: Option<u64>,
    ) -> Option<u64> {
        match (input, cache_read, cache_creation) {
            (None, None, None) => None,
            (a, b, c) => Some(a.unwrap_or(0) + b.unwrap_or(0) + c.unwrap_or(0)),
        }
    }

    /// Input plus output tokens (0 where unknown).
    pub fn total_tokens(&self) -> u64 {
        self.tokens_in
            .unwrap_or(0)
            .saturating_add(self.tokens_out.unwrap_or(0))
    }
}

/// What an agent call produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// The argv that ran (no secrets: tokens never go in argv).
    pub argv: Vec<String>,
    /// Exit, duration, tails, log files.
    pub outcome: Outcome,
    /// The agent's final message.
    pub text: String,
    /// The verdict (reviewers), if one could be read.
    pub verdict: Option<Verdict>,
    /// Token use and cost, as reported by the agent.
    pub usage: Usage,
    /// A usage limit or throttling, if the agent hit one.
    pub limit: Option<LimitReading>,
    /// Why the call failed, when it did (nonzero exit, error result).
    pub failure: Option<String>,
    /// Tools the agent session said it had (claude's init event).
    pub tools: Option<Vec<String>>,
    /// MCP servers the agent session said it had.
    pub mcp_servers: Option<Vec<String>>,
    /// Files the agent says it changed (checked against git by the proof):
    /// its `FILES:` block and [`Report::edited_files`].
    pub claimed_files: Vec<String>,
    /// Files the agent's own tool events show it changed (claude's
    /// Edit/Write calls that did not fail, codex's completed file changes),
    /// relative to the checkout where they are inside it; empty for
    /// `command` agents. A reviewer with any is void (docs/agents.md#read-only-reviewer), also when
    /// the file lies outside the checkout, where git cannot see it.
    pub edited_files: Vec<String>,
    /// What the agent's own channels said that a person should know although
    /// the call did not fail: tools its permissions denied, tool calls that
    /// failed, an agent ended after its final event because it did not exit.
    /// One sentence each, in the order seen.
    pub notes: Vec<String>,
    /// The quota gauges the call reported, the latest of each window
    /// (docs/limits.md#gauges): claude's `rate_limit_event`s, codex's
    /// `rate_limits` snapshots; empty when the CLI reported none (the gauge
    /// is unknown).
    pub gauges: Vec<crate::limit::Gauge>,
}

/// How an agent call ended, as the round acts on it (docs/loop.md#writer,
/// docs/limits.md): the one closed set [`Report::end`] reads a report into.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEnd {
    /// The agent answered (its verdict or work is read by the round).
    Succeeded,
    /// The account's usage limit: sleep until the reset in the reading
    /// (`resets_at`, UTC, when the agent said), then call again.
    UsageLimit(LimitReading),
    /// Short throttling: wait (`retry_after` when the agent said) and call
    /// again.
    Transient(LimitReading),
    /// The account cannot run at all (credit or billing exhausted): no
    /// retry or sleep helps; its work stops for the night
    /// (docs/limits.md#no-credit).
    NoCredit(LimitReading),
    /// The call failed (nonzero exit, an error result): why, in a sentence.
    Failed(String),
    /// The call was killed at its timeout.
    TimedOut,
}

impl Report {
    /// What the call came to. A limit wins over a timeout or a failure: the
    /// agent stopped because of it, and the call is made again.
    pub fn end(&self) -> CallEnd {
        match self.limit.as_ref().map(|l| (l.kind, l)) {
            Some((LimitKind::UsageLimit, l)) => return CallEnd::UsageLimit(l.clone()),
            Some((LimitKind::Transient, l)) => return CallEnd::Transient(l.clone()),
            Some((LimitKind::NoCredit, l)) => return CallEnd::NoCredit(l.clone()),
            _ => {}
        }
        if self.outcome.timed_out {
            return CallEnd::TimedOut;
        }
        match &self.failure {
            Some(why) => CallEnd::Failed(why.clone()),
            None => CallEnd::Succeeded,
        }
    }

    /// True when the call hit an account usage limit (sleep until reset).
    pub fn hit_usage_limit(&self) -> bool {
        matches!(
            self.limit.as_ref().map(|l| &l.kind),
            Some(LimitKind::UsageLimit)
        )
    }
    /// True when the call was throttled briefly (retry soon).
    pub fn throttled(&self) -> bool {
        matches!(
            self.limit.as_ref().map(|l| &l.kind),
            Some(LimitKind::Transient)
        )
    }
}

/// Agent calls that could not even run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The process could not be started (missing executable, bad cwd).
    #[error("{role} agent ({kind}) could not start: {source}")]
    Spawn {
        role: &'static str,
        kind: AgentKind,
        source: process::ProcessError,
    },
    /// The per-call files could not be written.
    #[error("cannot write the {role} call's files under {dir}: {source}")]
    Files {
        role: &'static str,
        dir: PathBuf,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    /// An agent's report of absurd counts saturates instead of overflowing
    /// (a panic in debug builds, a wrap past the token cap in release).
    #[test]
    fn huge_usage_reports_saturate() {
        let u = super::Usage {
            tokens_in: Some(u64::MAX),
            tokens_out: Some(u64::MAX),
            cost_usd: Some(1e308),
        };
        assert_eq!(u.total_tokens(), u64::MAX);
    }
}
