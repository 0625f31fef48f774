//! The view model of a night (docs/serve.md#the-board): what the live board
//! (`nightshift serve`) draws and what `report --html` heads its page with,
//! read from the ledger only, so the morning page says what the board said
//! at the end. One lane per worker (host, pid); the queue of items not yet
//! started; the deadline; the usage-limit sleep; finished items with their
//! outcome, branch and PR; what needs a person; the night's counts. Text in
//! it is masked (the ledger keeps it masked, and it is masked again here);
//! a page escapes it where it shows it.
//!
//! A finished item's CI state ([`Finished::ci`], docs/github.md#ci) is its
//! PR's watch's; the quota windows over the night are the ledger's
//! readings ([`Board::quota`], docs/limits.md#gauges).

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::ledger::items::ItemRow;
use crate::ledger::runs::RunRow;
use crate::outcome::{Outcome, RunStatus};

/// One worker's lane: what it does now.
#[derive(Debug, Clone, Serialize)]
pub struct Lane {
    /// The worker (`host:pid:n`), or `host:pid` for a run without workers.
    pub worker: String,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// The item it works on (plan index), if any.
    pub item_index: Option<i32>,
    /// That item's key.
    pub item_key: Option<String>,
    /// That item's title (masked).
    pub title: Option<String>,
    /// Its round (from 1).
    pub round: Option<i32>,
    /// Its phase word (`writer`, `gate`, …), `starting` before the first.
    pub phase: String,
    /// When it started the item (server clock).
    pub since: Option<DateTime<Utc>>,
}

/// An item of the queue no worker has started.
#[derive(Debug, Clone, Serialize)]
pub struct Queued {
    /// Its place in the queue (from 0).
    pub position: i32,
    /// Its key.
    pub key: String,
    /// Its title (masked).
    pub title: String,
}

/// An item that ended.
#[derive(Debug, Clone, Serialize)]
pub struct Finished {
    /// Plan index.
    pub index: i32,
    /// Key.
    pub key: String,
    /// Title (masked).
    pub title: String,
    /// Outcome word.
    pub outcome: Outcome,
    /// Whether that outcome fails the run.
    pub failed: bool,
    /// Why, in a sentence (masked).
    pub reason: Option<String>,
    /// Its branch, if one was pushed.
    pub branch: Option<String>,
    /// Its PR's number and URL (an https URL only).
    pub pr_number: Option<u64>,
    /// The PR's web address.
    pub pr_url: Option<String>,
    /// The worker that ran it.
    pub worker: Option<String>,
    /// Started and ended (server clock).
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// Its CI state, once the ledger records one (issue 23).
    pub ci: Option<String>,
}

/// Something a person should look at.
#[derive(Debug, Clone, Serialize)]
pub struct NeedsYou {
    /// `question`, `finding`, `failure` or `pr`.
    pub kind: &'static str,
    /// The item's key.
    pub key: String,
    /// The item's title (masked).
    pub title: String,
    /// What to look at (masked).
    pub text: String,
    /// A web address for it (PR, issue), if any.
    pub url: Option<String>,
}

/// The night's counts, for the header line ("3 PRs · 1 failed · 1
/// blocked · slept 12m").
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    /// Items ended with a PR opened.
    pub prs: usize,
    /// Items ended with an outcome that fails the run.
    pub failed: usize,
    /// Items blocked on a question.
    pub blocked: usize,
    /// Items ended.
    pub ended: usize,
    /// Items running.
    pub running: usize,
    /// Items not started.
    pub queued: usize,
    /// Seconds slept at usage limits.
    pub slept_secs: i64,
}

impl Counts {
    /// The header line: `3 PRs · 1 failed · 1 blocked · slept 12m`.
    pub fn line(&self) -> String {
        let mut parts = vec![match self.prs {
            1 => "1 PR".to_string(),
            n => format!("{n} PRs"),
        }];
        parts.push(format!("{} failed", self.failed));
        parts.push(format!("{} blocked", self.blocked));
        if self.running > 0 {
            parts.push(format!("{} running", self.running));
        }
        if self.queued > 0 {
            parts.push(format!("{} queued", self.queued));
        }
        if self.slept_secs > 0 {
            parts.push(format!("slept {}", span_words(self.slept_secs)));
        }
        parts.join(" · ")
    }
}

/// A span of seconds as the header says it: `45s`, `12m`, `2h05m`.
pub fn span_words(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// The model of one run's board.
#[derive(Debug, Clone, Serialize)]
pub struct Board {
    /// The run.
    pub run_id: Uuid,
    /// Its status word.
    pub status: RunStatus,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended, if it did.
    pub ended_at: Option<DateTime<Utc>>,
    /// Its deadline, if any.
    pub deadline: Option<DateTime<Utc>>,
    /// Its time zone (IANA name), for the clock the page shows.
    pub timezone: String,
    /// Until when it sleeps at a usage limit, and whose.
    pub sleeping_until: Option<DateTime<Utc>>,
    /// The agent whose limit it sleeps at.
    pub sleeping_agent: Option<String>,
    /// What it sleeps for: `usage_limit` or `quota_reserve` (`None`: a
    /// usage limit).
    pub sleeping_kind: Option<String>,
    /// One lane per live worker.
    pub lanes: Vec<Lane>,
    /// Items not started yet.
    pub queue: Vec<Queued>,
    /// Items ended, in plan order.
    pub finished: Vec<Finished>,
    /// What needs a person.
    pub needs_you: Vec<NeedsYou>,
    /// The counts of the header line.
    pub counts: Counts,
    /// The header line itself.
    pub headline: String,
    /// Each account's quota windows over the night, one series per
    /// account and window (docs/limits.md#gauges): empty while no agent
    /// reported a gauge.
    pub quota: Vec<super::quota::Series>,
}

/// The facts a board is drawn from, as the ledger gives them.
pub struct Facts<'a> {
    /// The run.
    pub run: &'a RunRow,
    /// Its items.
    pub items: &'a [ItemRow],
    /// Its live workers.
    pub workers: &'a [crate::ledger::workers::WorkerRow],
    /// Its queue not yet started.
    pub waiting: &'a [crate::ledger::board::Waiting],
    /// Its writer findings.
    pub findings: &'a [crate::ledger::board::Finding],
    /// Seconds slept at usage limits.
    pub slept_secs: i64,
    /// The CI watches of its PRs (docs/github.md#ci).
    pub ci: &'a [crate::ledger::ci::WatchRow],
}

/// Reads the facts of run `run` and draws its board.
///
/// # Errors
/// Database errors.
pub async fn load(pool: &sqlx::PgPool, run: &RunRow) -> Result<Board, sqlx::Error> {
    let items = crate::ledger::items::run_items(pool, run.id).await?;
    let workers = match run.status {
        RunStatus::Running => crate::ledger::workers::live_workers(pool, run.id).await?,
        _ => Vec::new(),
    };
    let waiting = crate::ledger::board::waiting(pool, run.id).await?;
    let findings = crate::ledger::board::findings(pool, run.id).await?;
    let slept_secs = crate::ledger::limits::slept_seconds(pool, run.id).await?;
    let ci = crate::ledger::ci::watches_of_run(pool, run.id).await?;
    let quota = super::quota::load_series(pool, run.id).await?;
    let mut board = draw(&Facts {
        run,
        items: &items,
        workers: &workers,
        waiting: &waiting,
        findings: &findings,
        slept_secs,
        ci: &ci,
    });
    board.quota = quota;
    Ok(board)
}

/// The CI state of item `key`'s PR (its latest watch): `ci_green`,
/// `ci_failed`, … or `ci_watching` while the watch is open; `None` without
/// a watch.
fn ci_state(watches: &[crate::ledger::ci::WatchRow], key: &str) -> Option<String> {
    let w = watches.iter().rev().find(|w| w.item_key == key)?;
    Some(
        w.ci_state
            .map_or_else(|| "ci_watching".to_string(), |s| s.as_str().to_string()),
    )
}

/// The board of `f`.
pub fn draw(f: &Facts<'_>) -> Board {
    let m = |s: &str| crate::secret::redact_known(s);
    let run = f.run;
    let lanes = lanes(f);
    let finished: Vec<Finished> = (f.items.iter())
        .filter_map(|i| i.outcome.map(|o| (i, o)))
        .filter(|(i, _)| i.ended_at.is_some())
        .map(|(i, o)| Finished {
            index: i.item_index,
            key: i.item_key.clone(),
            title: m(&i.title),
            outcome: o,
            failed: o.fails_run(),
            reason: i.facts.reason.as_deref().map(m),
            branch: i.facts.branch.clone().map(|b| m(&b)),
            pr_number: i.facts.pr_number,
            pr_url: (i.facts.pr_url.as_deref())
                .and_then(crate::report::web_link)
                .map(m),
            worker: i.worker.clone(),
            started_at: i.started_at,
            ended_at: i.ended_at,
            ci: ci_state(f.ci, &i.item_key),
        })
        .collect();
    let counts = Counts {
        prs: finished.iter().filter(|i| i.pr_number.is_some()).count(),
        failed: finished.iter().filter(|i| i.failed).count(),
        blocked: (finished.iter())
            .filter(|i| i.outcome == Outcome::Blocked)
            .count(),
        ended: finished.len(),
        running: f.items.iter().filter(|i| i.ended_at.is_none()).count(),
        queued: f.waiting.len(),
        slept_secs: f.slept_secs,
    };
    Board {
        run_id: run.id,
        status: run.status,
        started_at: run.started_at,
        ended_at: run.ended_at,
        deadline: run.deadline,
        timezone: run.zone().name().to_string(),
        sleeping_until: run.sleeping_until,
        sleeping_agent: run.sleeping_agent.clone(),
        sleeping_kind: run.sleeping_kind.clone(),
        needs_you: needs_you(f, &finished),
        queue: (f.waiting.iter())
            .map(|w| Queued {
                position: w.position,
                key: w.item_key.clone(),
                title: m(&w.title),
            })
            .collect(),
        headline: counts.line(),
        counts,
        lanes,
        finished,
        quota: Vec::new(),
    }
}

/// One lane per live worker; a run without worker rows (a single drain of
/// an older version) has one lane of its own.
fn lanes(f: &Facts<'_>) -> Vec<Lane> {
    let item = |key: Option<&str>| key.and_then(|k| f.items.iter().find(|i| i.item_key == k));
    let mut lanes: Vec<Lane> = (f.workers.iter())
        .map(|w| {
            let it = item(w.item_key.as_deref());
            Lane {
                worker: w.id.clone(),
                host: w.host.clone(),
                pid: w.pid,
                item_index: it.map(|i| i.item_index),
                item_key: w.item_key.clone(),
                title: it.map(|i| crate::secret::redact_known(&i.title)),
                round: w.round,
                phase: w.phase.clone().unwrap_or_else(|| "starting".into()),
                since: it.map(|i| i.started_at),
            }
        })
        .collect();
    lanes.sort_by(|a, b| (&a.host, a.pid, &a.worker).cmp(&(&b.host, b.pid, &b.worker)));
    let run = f.run;
    if lanes.is_empty() && run.status == RunStatus::Running {
        let it = item(run.current_item_key.as_deref());
        lanes.push(Lane {
            worker: format!(
                "{}:{}",
                run.host.as_deref().unwrap_or("?"),
                run.pid.unwrap_or(0)
            ),
            host: run.host.clone().unwrap_or_default(),
            pid: run.pid.unwrap_or(0),
            item_index: it.map(|i| i.item_index),
            item_key: run.current_item_key.clone(),
            title: it.map(|i| crate::secret::redact_known(&i.title)),
            round: run.current_round,
            phase: run.phase.map_or("starting", |p| p.as_str()).to_string(),
            since: it.map(|i| i.started_at),
        });
    }
    lanes
}

/// Questions, writer findings, failures and opened PRs, in that order.
fn needs_you(f: &Facts<'_>, finished: &[Finished]) -> Vec<NeedsYou> {
    let m = |s: &str| crate::secret::redact_known(s);
    let title = |key: &str| {
        (f.items.iter())
            .find(|i| i.item_key == key)
            .map(|i| m(&i.title))
            .unwrap_or_default()
    };
    let mut out: Vec<NeedsYou> = (f.items.iter())
        .filter_map(|i| i.facts.question.as_deref().map(|q| (i, q)))
        .map(|(i, q)| NeedsYou {
            kind: "question",
            key: i.item_key.clone(),
            title: m(&i.title),
            text: m(q),
            url: None,
        })
        .collect();
    out.extend(f.findings.iter().map(|x| NeedsYou {
        kind: "finding",
        key: x.item_key.clone(),
        title: title(&x.item_key),
        text: m(&x.title),
        url: x.url.as_deref().and_then(crate::report::web_link).map(m),
    }));
    out.extend(finished.iter().filter(|i| i.failed).map(|i| NeedsYou {
        kind: "failure",
        key: i.key.clone(),
        title: i.title.clone(),
        text: format!(
            "{}: {}",
            i.outcome.as_str(),
            i.reason.as_deref().unwrap_or("")
        ),
        url: None,
    }));
    out.extend(
        finished
            .iter()
            .filter(|i| i.pr_url.is_some())
            .map(|i| NeedsYou {
                kind: "pr",
                key: i.key.clone(),
                title: i.title.clone(),
                text: format!("PR #{} waits for review", i.pr_number.unwrap_or(0)),
                url: i.pr_url.clone(),
            }),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[test]
    fn the_header_line_counts_prs_failures_blocks_and_sleep() {
        let c = Counts {
            prs: 3,
            failed: 1,
            blocked: 1,
            slept_secs: 720,
            ..Counts::default()
        };
        assert_eq!(c.line(), "3 PRs · 1 failed · 1 blocked · slept 12m");
        let one = Counts {
            prs: 1,
            running: 2,
            ..Counts::default()
        };
        assert_eq!(one.line(), "1 PR · 0 failed · 0 blocked · 2 running");
    }
}
