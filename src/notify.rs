//! End-of-run notifications: one message per run, to the targets of the
//! config's `[notify]` table (docs/config.md#notify).
//!
//! When a run ends — completed, stopped by the deadline or a signal, crashed
//! — nightshift sends one [`Summary`]: as JSON to a `webhook`, in Slack's
//! incoming-webhook shape to a `slack_webhook`, and as JSON on the standard
//! input of a `command`. Each delivery has a timeout and a few retries with
//! backoff; a failed one is recorded and reported, never fails the run.
//! Every payload passes through the secret redactor first, so a secret an
//! agent printed into a failure reason does not leave the machine.
//!
//! This module does not decide when a run ended nor what its outcome was; it
//! only words and delivers what the ledger says.

use std::collections::BTreeMap;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::Targets;
use crate::outcome::Outcome;

/// How long one delivery may take (connect, send, answer).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Attempts per target: the first and two retries, 1 s then 4 s apart.
pub const ATTEMPTS: u32 = 3;

/// Variable that sets [`TIMEOUT`] to this many milliseconds (tests).
pub const TIMEOUT_ENV: &str = "NIGHTSHIFT_NOTIFY_TIMEOUT_MS";

/// Variable that sets the first pause between attempts (1 s; the next is
/// four times it) to this many milliseconds (tests).
pub const BACKOFF_ENV: &str = "NIGHTSHIFT_NOTIFY_BACKOFF_MS";

/// `default`, or the milliseconds in the environment variable `var` when that is a number.
fn ms_from_env(var: &str, default: Duration) -> Duration {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(default, Duration::from_millis)
}

/// One item as the summary names it.
#[derive(Debug, Clone, Serialize)]
pub struct ItemNote {
    /// Index in the plan (1-based).
    pub index: i32,
    /// Title from the backlog.
    pub title: String,
    /// Outcome word.
    pub outcome: String,
    /// The PR's URL, if one was opened.
    pub pr_url: Option<String>,
    /// Why it failed (failures only).
    pub reason: Option<String>,
}

/// What a run-end message says. The JSON shape of `webhook` and `command`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The run's id.
    pub run_id: String,
    /// The repository (its remote URL or path, as the ledger names it).
    pub repo: String,
    /// Run status word (`completed`, `stopped_deadline`, …).
    pub status: String,
    /// Items per outcome word.
    pub counts: BTreeMap<String, usize>,
    /// PRs opened or updated by the run.
    pub prs: Vec<ItemNote>,
    /// Items that ended in a failure, with their reasons.
    pub failures: Vec<ItemNote>,
    /// Cost of the run's agent calls in US dollars, where reported.
    pub cost_usd: f64,
    /// Tokens of the run's agent calls.
    pub tokens: i64,
    /// Seconds slept at usage limits.
    pub slept_seconds: i64,
    /// The HTML report of the run, when one was written.
    pub report: Option<String>,
    /// `nightshift/` branches on the remote whose head nightshift did not
    /// push, one line each, for a person to look at (docs/security.md#processes).
    pub foreign_refs: Vec<String>,
}

impl Summary {
    /// One line: `nightshift run 1a2b3c4d completed: 3 PR(s), 1 failed`.
    pub fn headline(&self) -> String {
        format!(
            "nightshift run {} {}: {} PR(s), {} failed",
            &self.run_id[..self.run_id.len().min(8)],
            self.status,
            self.prs.len(),
            self.failures.len()
        )
    }

    /// The payload of a Slack incoming webhook: `text` (the fallback a
    /// notification shows) and `blocks` with the same facts.
    pub fn slack(&self) -> Value {
        let mut lines = vec![format!("*{}*", slack_escape(&self.headline()))];
        for p in &self.prs {
            let url = p.pr_url.as_deref().unwrap_or("");
            lines.push(format!(
                "• <{}|#{} {}>",
                slack_escape(url),
                p.index,
                slack_escape(&p.title)
            ));
        }
        for f in &self.failures {
            lines.push(format!(
                "• {} `{}`: {}",
                slack_escape(&f.title),
                f.outcome,
                slack_escape(f.reason.as_deref().unwrap_or(""))
            ));
        }
        lines.push(format!(
            "cost ${:.2} · {} tokens · slept {}s",
            self.cost_usd, self.tokens, self.slept_seconds
        ));
        for f in &self.foreign_refs {
            lines.push(format!(
                "• :warning: a ref nightshift did not push: {}",
                slack_escape(f)
            ));
        }
        if let Some(r) = &self.report {
            lines.push(format!("report: {}", slack_escape(r)));
        }
        json!({
            "text": self.headline(),
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": lines.join("\n")}}],
        })
    }
}

/// Slack's three control characters in message text (its documented
/// escaping: `&`, `<`, `>`), so agent text cannot forge a link or mention.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Where a message went and how it fared.
#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    /// `webhook`, `slack_webhook` or `command`.
    pub target: &'static str,
    /// Attempts made (1..=[`ATTEMPTS`]).
    pub attempts: u32,
    /// `None`: delivered; else the last failure.
    pub error: Option<String>,
}

/// Sends `summary` to every target, with `redact` applied to each payload's
/// text. Never fails: each target's result is in the returned list.
pub async fn deliver(
    targets: &Targets,
    summary: &Summary,
    redact: &(dyn Fn(&str) -> String + Sync),
    env: &BTreeMap<String, String>,
) -> Vec<Delivery> {
    let body = redact(&serde_json::to_string(summary).expect("summary is JSON"));
    let timeout = ms_from_env(TIMEOUT_ENV, TIMEOUT);
    let mut out = Vec::new();
    if let Some(url) = &targets.webhook {
        let send = || async { post(url, body.clone()).await.map_err(Miss::Retry) };
        out.push(with_retries("webhook", timeout, send).await);
    }
    if let Some(url) = &targets.slack_webhook {
        let slack = redact(&summary.slack().to_string());
        let send = || async { post(url, slack.clone()).await.map_err(Miss::Retry) };
        out.push(with_retries("slack_webhook", timeout, send).await);
    }
    if !targets.command.is_empty() {
        // The command's own timeout stops it (and its process group)
        // first; the outer one only guards against a runner that hangs.
        let send = || run_command(&targets.command, body.clone(), env, timeout);
        out.push(with_retries("command", timeout + COMMAND_MARGIN, send).await);
    }
    out
}

/// How much longer than the command's own timeout its delivery may take
/// (the runner's grace between SIGTERM and SIGKILL, and the sweep).
const COMMAND_MARGIN: Duration = Duration::from_secs(10);

/// Why one attempt did not deliver.
enum Miss {
    /// Nothing arrived: the next attempt may go.
    Retry(String),
    /// It may have arrived (a `command` that timed out after reading its
    /// input): sending again could deliver it twice, so no retry.
    Final(String),
}

/// Runs `send` up to [`ATTEMPTS`] times, each within `timeout`, backing
/// off between them, until it delivers or a [`Miss::Final`] comes.
async fn with_retries<F, Fut>(target: &'static str, timeout: Duration, mut send: F) -> Delivery
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Miss>>,
{
    let backoff = ms_from_env(BACKOFF_ENV, Duration::from_secs(1));
    let mut error = None;
    for attempt in 1..=ATTEMPTS {
        match tokio::time::timeout(timeout, send()).await {
            Ok(Ok(())) => {
                return Delivery {
                    target,
                    attempts: attempt,
                    error: None,
                };
            }
            Ok(Err(Miss::Retry(e))) => error = Some(e),
            Ok(Err(Miss::Final(e))) => {
                return Delivery {
                    target,
                    attempts: attempt,
                    error: Some(e),
                };
            }
            Err(_) => {
                error = Some(format!(
                    "no answer within {}",
                    crate::duration::format(timeout)
                ))
            }
        }
        if attempt < ATTEMPTS {
            tokio::time::sleep(backoff * 4u32.pow(attempt - 1)).await;
        }
    }
    Delivery {
        target,
        attempts: ATTEMPTS,
        error,
    }
}

/// One JSON `POST`; a 2xx answer is success.
async fn post(url: &str, body: String) -> Result<(), String> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| format!("TLS roots: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Full<Bytes>>(https);
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!("nightshift/", env!("CARGO_PKG_VERSION")),
        )
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("bad URL: {e}"))?;
    let resp = client.request(req).await.map_err(|e| format!("{e}"))?;
    let status = resp.status();
    // Read (a bounded part of) the answer so the connection ends cleanly.
    let _ = tokio::time::timeout(Duration::from_secs(2), resp.into_body().collect()).await;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("answered HTTP {}", status.as_u16()))
    }
}

/// Runs the `command` target with the JSON on stdin (through the one process
/// runner, with the agents' scrubbed environment), for at most `timeout`.
/// The runner ends its process group and sweeps what it left behind when
/// it ends, so a daemon it started does not outlive the drain. A command
/// that timed out may have delivered the message: [`Miss::Final`].
async fn run_command(
    argv: &[String],
    body: String,
    env: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<(), Miss> {
    let cmd = crate::process::Command::new(argv[0].clone())
        .args(argv[1..].iter().cloned())
        .env_map(env.clone())
        .stdin_bytes(body.into_bytes())
        .timeout(timeout);
    let cancel = tokio_util::sync::CancellationToken::new();
    let out = crate::process::run(cmd, &cancel)
        .await
        .map_err(|e| Miss::Retry(e.to_string()))?;
    if out.timed_out {
        return Err(Miss::Final(format!(
            "`{}` timed out after {}: it may have delivered the message, so it was not run again",
            argv[0],
            crate::duration::format(timeout)
        )));
    }
    if out.success() {
        Ok(())
    } else {
        Err(Miss::Retry(format!(
            "`{}` failed: {}",
            argv[0],
            out.stderr_tail.lines().last().unwrap_or("")
        )))
    }
}

/// A sample summary for `nightshift notify --test`.
pub fn sample(repo: &str) -> Summary {
    Summary {
        run_id: "00000000-0000-4000-8000-000000000000".into(),
        repo: repo.into(),
        status: crate::outcome::RunStatus::Completed.as_str().into(),
        counts: BTreeMap::from([
            (Outcome::PrOpened.as_str().into(), 1),
            (Outcome::TestsFailed.as_str().into(), 1),
        ]),
        prs: vec![ItemNote {
            index: 1,
            title: "A sample item (nightshift notify --test)".into(),
            outcome: Outcome::PrOpened.as_str().into(),
            pr_url: Some("https://github.com/OWNER/REPO/pull/1".into()),
            reason: None,
        }],
        failures: vec![ItemNote {
            index: 2,
            title: "A sample failure".into(),
            outcome: Outcome::TestsFailed.as_str().into(),
            pr_url: None,
            reason: Some("the gate failed: cargo test exited with code 101".into()),
        }],
        cost_usd: 1.23,
        tokens: 45678,
        slept_seconds: 0,
        report: None,
        foreign_refs: Vec::new(),
    }
}

impl Summary {
    /// The summary of a run as the ledger holds it; an item still running
    /// (no outcome) counts as `running`.
    pub fn from_ledger(
        run: &crate::ledger::runs::RunRow,
        repo: &str,
        items: &[crate::ledger::items::ItemRow],
        slept_seconds: i64,
        report: Option<String>,
    ) -> Summary {
        let mut counts = BTreeMap::new();
        let (mut prs, mut failures) = (Vec::new(), Vec::new());
        for i in items {
            let word = Outcome::or_running(i.outcome);
            *counts.entry(word.to_string()).or_insert(0) += 1;
            let note = ItemNote {
                index: i.item_index,
                title: i.title.clone(),
                outcome: word.to_string(),
                pr_url: i.facts.pr_url.clone(),
                reason: None,
            };
            if i.outcome.is_some_and(|o| o.fails_run()) {
                failures.push(ItemNote {
                    reason: i.facts.reason.clone(),
                    ..note
                });
            } else if i.facts.pr_url.is_some() && i.facts.rounds > 0 {
                prs.push(note);
            }
        }
        Summary {
            run_id: run.id.to_string(),
            repo: repo.to_string(),
            status: run.status.as_str().to_string(),
            counts,
            prs,
            failures,
            cost_usd: items.iter().filter_map(|i| i.facts.cost_usd).sum(),
            tokens: items.iter().map(|i| i.facts.tokens as i64).sum(),
            slept_seconds,
            report,
            foreign_refs: Vec::new(),
        }
    }
}
