//! The retry loop around one GitHub call: an idempotent call sent again after each transient
//! failure, a create sent at most once per proven absence, and the pause between attempts within
//! the policy's caps and the run's deadline. Not the rules of what is transient (see
//! [`super::transient`]) nor the sending of one request (see [`super::client`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::client::Forge;
use super::error::ForgeError;
use super::exchange::{Reply, Verb};
use super::retry::backoff;
use super::transient::{Transient, Wait};

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
