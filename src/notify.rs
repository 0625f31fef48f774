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
    /// The branch pushed for it, if one was (with or without a PR).
    pub branch: Option<String>,
    /// Why it failed (failures only).
    pub reason: Option<String>,
    /// Its PR's CI state (`ci_green`, `ci_failed`, `ci_pending`,
    /// `ci_none`; docs/github.md#ci), when its CI was watched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<String>,
}

/// What a run-end message says. The JSON shape of `webhook` and `command`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// `true` only for the sample `nightshift notify --test` sends: no run
    /// ended, and every fact in it is made up.
    pub test: bool,
    /// The run's id.
    pub run_id: String,
    /// The repository: its remote's URL as git gives it (credentials left
    /// out), so a path is one that exists and a URL one that opens.
    pub repo: String,
    /// The local checkout the run was started from.
    pub checkout: Option<String>,
    /// Run status word (`completed`, `stopped_deadline`, …).
    pub status: String,
    /// Items per outcome word.
    pub counts: BTreeMap<String, usize>,
    /// PRs opened or updated by the run.
    pub prs: Vec<ItemNote>,
    /// Branches the run pushed whose PR is not open (no GitHub access, or
    /// its creation failed): the work is on the remote, to be opened by hand
    /// or by the next run.
    pub branches_pushed: Vec<ItemNote>,
    /// Items that ended in a failure, with their reasons.
    pub failures: Vec<ItemNote>,
    /// Cost of the run's agent calls in US dollars; `null` when no agent
    /// reported one (never `-0.0`).
    pub cost_usd: Option<f64>,
    /// Tokens of the run's agent calls.
    pub tokens: i64,
    /// Seconds slept at usage limits.
    pub slept_seconds: i64,
    /// The HTML report of the run, when one was written.
    pub report: Option<String>,
    /// `nightshift/` branches on the remote whose head nightshift did not
    /// push, one line each, for a person to look at (docs/security.md#processes).
    pub foreign_refs: Vec<String>,
    /// The watched PRs per CI state (docs/github.md#ci); empty without
    /// watches.
    pub ci: BTreeMap<String, usize>,
}

impl Summary {
    /// One line: `nightshift run 1a2b3c4d completed: 3 PR(s), 1 failed`,
    /// with the branches pushed without a PR when there are some, and
    /// `[test] ` before it for the sample of `notify --test`.
    pub fn headline(&self) -> String {
        let pushed = match self.branches_pushed.len() {
            0 => String::new(),
            n => format!(", {n} branch(es) pushed without a PR"),
        };
        let ci = match self.ci.is_empty() {
            true => String::new(),
            false => {
                let states: Vec<String> = (self.ci.iter())
                    .map(|(state, n)| format!("{n} {state}"))
                    .collect();
                format!(" (CI: {})", states.join(", "))
            }
        };
        format!(
            "{}nightshift run {} {}: {} PR(s){ci}{pushed}, {} failed",
            if self.test { TEST_MARK } else { "" },
            &self.run_id[..self.run_id.len().min(8)],
            self.status,
            self.prs.len(),
            self.failures.len()
        )
    }

    /// Sets the PRs' CI states from `states` (item index, state word) and
    /// counts them (docs/github.md#ci).
    pub fn set_ci(&mut self, states: &[(i32, String)]) {
        for (index, state) in states {
            *self.ci.entry(state.clone()).or_insert(0) += 1;
            for p in self.prs.iter_mut().filter(|p| p.index == *index) {
                p.ci = Some(state.clone());
            }
        }
    }

    /// The payload of a Slack incoming webhook: `text` (the fallback a
    /// notification shows) and `blocks` with the same facts.
    pub fn slack(&self) -> Value {
        let mut lines = vec![format!("*{}*", slack_escape(&self.headline()))];
        for p in &self.prs {
            let url = p.pr_url.as_deref().unwrap_or("");
            let ci =
                p.ci.as_deref()
                    .map(|c| format!(" · {c}"))
                    .unwrap_or_default();
            lines.push(format!(
                "• <{}|#{} {}>{ci}",
                slack_escape(url),
                p.index,
                slack_escape(&p.title)
            ));
        }
        for b in &self.branches_pushed {
            lines.push(format!(
                "• #{} {}: branch `{}` pushed, no PR",
                b.index,
                slack_escape(&b.title),
                slack_escape(b.branch.as_deref().unwrap_or(""))
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
            "cost {} · {} tokens · slept {}s",
            self.cost_usd
                .map_or_else(|| "not reported".to_string(), |c| format!("${c:.2}")),
            self.tokens,
            self.slept_seconds
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

/// What starts the headline of the sample `notify --test` sends, so a
/// person who sees it in a channel knows no run ended.
pub const TEST_MARK: &str = "[test] ";

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
    /// Where it went: the URL's host (and port), or the command's program.
    pub to: String,
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
        out.push(with_retries("webhook", host_of(url), timeout, send).await);
    }
    if let Some(url) = &targets.slack_webhook {
        let slack = redact(&summary.slack().to_string());
        let send = || async { post(url, slack.clone()).await.map_err(Miss::Retry) };
        out.push(with_retries("slack_webhook", host_of(url), timeout, send).await);
    }
    if let Some(program) = targets.command.first() {
        // The command's own timeout stops it (and its process group)
        // first; the outer one only guards against a runner that hangs.
        let send = || run_command(&targets.command, body.clone(), env, timeout);
        let to = program.clone();
        out.push(with_retries("command", to, timeout + COMMAND_MARGIN, send).await);
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

/// A webhook URL's host and port, as a failure names it: the path of a
/// Slack or other webhook URL is its secret, so it is left out.
fn host_of(url: &str) -> String {
    url::Url::parse(url)
        .ok()
        .and_then(|u| {
            let host = u.host_str()?.to_string();
            Some(match u.port() {
                Some(p) => format!("{host}:{p}"),
                None => host,
            })
        })
        .unwrap_or_else(|| "an unreadable URL".into())
}

impl Delivery {
    /// The line a person reads about this delivery: `webhook: sent to
    /// hooks.example.com`, or why it was not sent and where it was to go.
    pub fn describe(&self) -> String {
        match &self.error {
            None => format!("{}: sent to {}", self.target, self.to),
            Some(e) => format!(
                "{}: not sent after {} attempt(s): {e} (to {})",
                self.target, self.attempts, self.to
            ),
        }
    }
}

/// An error with every cause under it (`client error (Connect): tcp
/// connect error: Connection refused (os error 111)`): hyper's own text
/// names only the stage that failed.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        next = cause.source();
    }
    text
}

/// Runs `send` up to [`ATTEMPTS`] times, each within `timeout`, backing
/// off between them, until it delivers or a [`Miss::Final`] comes; `to`
/// names where it goes ([`Delivery::to`]).
async fn with_retries<F, Fut>(
    target: &'static str,
    to: String,
    timeout: Duration,
    mut send: F,
) -> Delivery
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
                    to,
                    attempts: attempt,
                    error: None,
                };
            }
            Ok(Err(Miss::Retry(e))) => error = Some(e),
            Ok(Err(Miss::Final(e))) => {
                return Delivery {
                    target,
                    to,
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
        to,
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
    let resp = client.request(req).await.map_err(|e| with_causes(&e))?;
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

/// A sample summary for `nightshift notify --test`: marked `test` (and
/// its headline [`TEST_MARK`]), for the repository whose remote is `repo`.
pub fn sample(repo: &str, checkout: Option<&std::path::Path>) -> Summary {
    let note = |index, title: &str, outcome: Outcome| ItemNote {
        index,
        title: title.into(),
        outcome: outcome.as_str().into(),
        pr_url: None,
        branch: None,
        reason: None,
        ci: None,
    };
    Summary {
        test: true,
        run_id: "00000000-0000-4000-8000-000000000000".into(),
        repo: repo.into(),
        checkout: checkout.map(|p| p.display().to_string()),
        status: crate::outcome::RunStatus::Completed.as_str().into(),
        counts: BTreeMap::from([
            (Outcome::PrOpened.as_str().into(), 1),
            (Outcome::BranchPushed.as_str().into(), 1),
            (Outcome::TestsFailed.as_str().into(), 1),
        ]),
        prs: vec![ItemNote {
            pr_url: Some("https://github.com/OWNER/REPO/pull/1".into()),
            branch: Some("nightshift/a-sample-item-00000001".into()),
            ..note(
                1,
                "A sample item (nightshift notify --test)",
                Outcome::PrOpened,
            )
        }],
        branches_pushed: vec![ItemNote {
            branch: Some("nightshift/a-sample-pushed-branch-00000002".into()),
            ..note(2, "A sample pushed branch", Outcome::BranchPushed)
        }],
        failures: vec![ItemNote {
            reason: Some("the gate failed: cargo test exited with code 101".into()),
            ..note(3, "A sample failure", Outcome::TestsFailed)
        }],
        cost_usd: Some(1.23),
        tokens: 45678,
        slept_seconds: 0,
        report: None,
        foreign_refs: Vec::new(),
        ci: BTreeMap::new(),
    }
}

impl Summary {
    /// The summary of a run as the ledger holds it; an item still running
    /// (no outcome) counts as `running`. `repo` is the remote's URL (see
    /// [`Summary::repo`]), `checkout` the local repository.
    pub fn from_ledger(
        run: &crate::ledger::runs::RunRow,
        (repo, checkout): (&str, Option<&std::path::Path>),
        items: &[crate::ledger::items::ItemRow],
        slept_seconds: i64,
        report: Option<String>,
    ) -> Summary {
        let mut counts = BTreeMap::new();
        let (mut prs, mut pushed, mut failures) = (Vec::new(), Vec::new(), Vec::new());
        for i in items {
            let word = Outcome::or_running(i.outcome);
            *counts.entry(word.to_string()).or_insert(0) += 1;
            let note = ItemNote {
                index: i.item_index,
                title: i.title.clone(),
                outcome: word.to_string(),
                pr_url: i.facts.pr_url.clone(),
                branch: i.facts.branch.clone(),
                reason: None,
                ci: None,
            };
            if i.outcome.is_some_and(|o| o.fails_run()) {
                failures.push(ItemNote {
                    reason: i.facts.reason.clone(),
                    ..note
                });
            } else if i.facts.pr_url.is_some() && i.facts.rounds > 0 {
                prs.push(note);
            } else if i.outcome == Some(Outcome::BranchPushed) {
                pushed.push(note);
            }
        }
        Summary {
            test: false,
            run_id: run.id.to_string(),
            repo: repo.to_string(),
            checkout: checkout.map(|p| p.display().to_string()),
            status: run.status.as_str().to_string(),
            counts,
            prs,
            branches_pushed: pushed,
            failures,
            cost_usd: crate::history::cost_sum(items.iter().map(|i| i.facts.cost_usd)),
            tokens: items.iter().map(|i| i.facts.tokens as i64).sum(),
            slept_seconds,
            report,
            foreign_refs: Vec::new(),
            ci: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_its_target_without_the_urls_secret_path() {
        assert_eq!(
            host_of("https://hooks.slack.com/services/T0/B0/XYZ"),
            "hooks.slack.com"
        );
        assert_eq!(host_of("http://127.0.0.1:9/hook"), "127.0.0.1:9");
    }
}
