//! What `nightshift status` says (docs/commands.md#status): the newest
//! run of the repository — running (its item, round and phase, or its
//! sleep on a usage limit, and its live workers), dead here, stopped and
//! waiting to be resumed (or to be approved again when the approval key was
//! lost) — read from the ledger, with its line and its JSON. Not for
//! changing anything: the next `drain` marks and resumes runs.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::ledger::runs::{self, RunRow};
use crate::outcome::{Phase, RunStatus};

/// What `status` found in the ledger about the newest run.
pub struct Status {
    /// The newest run, when it is marked running and not known dead.
    running: Option<RunRow>,
    /// The newest run, when it is marked running but its process died here.
    dead: Option<RunRow>,
    /// The stopped run the next drain resumes (or would, but for `key_lost`).
    to_resume: Option<RunRow>,
    /// That run's approval can no longer be verified: the key was lost.
    key_lost: bool,
    /// The running item as `plan` and `report` name it, `-` for none.
    current_item: String,
    /// The running run's zone (UTC otherwise).
    tz: chrono_tz::Tz,
    /// The run's live workers, on every host (docs/workers.md).
    workers: Vec<crate::queue::WorkerRow>,
    /// Where the approval key is (named when it was lost).
    key_path: PathBuf,
    /// The running run's items as `plan` and `report` name them (index,
    /// title, short key), by key.
    titles: std::collections::HashMap<String, String>,
    /// Items of the running run that ended.
    ended: usize,
    /// Items of the running run's queue not done yet (held or waiting).
    pending: i64,
    /// Server connections nightshift processes hold on the ledger, per
    /// host (docs/workers.md#connections), while a run is running.
    connections: Vec<(String, i64)>,
    /// When `status` looked, by the ledger server's clock (UTC).
    now: DateTime<Utc>,
    /// The latest quota reading of each window of the accounts shown
    /// (docs/limits.md#gauges), and the accounts with none (gauge unknown).
    quota: (Vec<crate::ledger::quota::Reading>, Vec<String>),
}

impl Status {
    /// Reads what `status` says of repository `repo`'s newest run. Run
    /// approvals are checked with the installed key
    /// ([`crate::approval::install_key`]); `key_path` is where it lives.
    ///
    /// # Errors
    /// Database errors.
    pub async fn load(pool: &sqlx::PgPool, repo: &str, key_path: PathBuf) -> Result<Status> {
        // Every time `status` judges (a resume's 24 h, an approval's
        // expiry) is the ledger server's, as the drain judges it
        // (docs/workers.md#what-clocks-must-agree).
        let (_, now) = crate::queue::sync_clock(pool).await?;
        let row = runs::run_row(pool, repo, None).await?;
        let running_here = |r: &RunRow| r.status == RunStatus::Running;
        let dead = row.clone().filter(|r| running_here(r) && died_here(r));
        let running = row.clone().filter(|r| running_here(r) && dead.is_none());
        let tz = running.as_ref().map_or(chrono_tz::UTC, RunRow::zone);
        let current_item = current_item(pool, running.as_ref()).await?;
        let (to_resume, key_lost) = match (&running, &dead) {
            (None, None) => run_to_resume(pool, repo, row.as_ref(), now).await?,
            _ => (None, false),
        };
        let workers = match &running {
            Some(r) => crate::queue::live_workers(pool, r.id).await?,
            None => Vec::new(),
        };
        let connections = match &running {
            Some(_) => {
                let me = crate::ledger::HolderInfo::current();
                let me = format!("{}:{}", me.host, me.pid);
                crate::ledger::workers::connections_by_host(pool, &me).await?
            }
            None => Vec::new(),
        };
        let (mut titles, mut ended, mut pending) = (Default::default(), 0, 0);
        if let Some(r) = running.as_ref().filter(|_| workers.len() > 1) {
            (titles, ended) = item_names(pool, r.id).await?;
            pending = crate::ledger::claims::pending(pool, r.id).await?;
        }
        Ok(Status {
            running,
            dead,
            to_resume,
            key_lost,
            current_item,
            tz,
            workers,
            key_path,
            titles,
            ended,
            pending,
            connections,
            now,
            quota: (Vec::new(), Vec::new()),
        })
    }

    /// Adds the quota gauges of `accounts` (the configured claude and codex
    /// agents' accounts; docs/limits.md#gauges): the latest reading of each
    /// of their windows, and which of them has none (the gauge is unknown).
    ///
    /// # Errors
    /// Database errors.
    pub async fn with_quota(mut self, pool: &sqlx::PgPool, accounts: &[String]) -> Result<Status> {
        let mut readings = Vec::new();
        let mut unknown = Vec::new();
        for a in accounts {
            let mine = crate::ledger::quota::latest_of(pool, a).await?;
            if mine.is_empty() {
                unknown.push(a.clone());
            }
            readings.extend(mine);
        }
        self.quota = (readings, unknown);
        Ok(self)
    }

    /// The quota lines of `status`: one per account and window, then one
    /// per account whose gauge is unknown.
    fn quota_lines(&self) -> Vec<String> {
        let now = self.now;
        let (readings, unknown) = &self.quota;
        let mut out: Vec<String> = readings
            .iter()
            .map(|r| {
                let what = crate::report::quota::describe_reading(r, now, self.tz);
                format!("quota {}: {what}", r.account)
            })
            .collect();
        out.extend(unknown.iter().map(|a| {
            format!("quota {a}: gauge unknown (its agent has reported no quota reading)")
        }));
        out
    }

    /// What `status` prints: the run's line, or, when more than one worker
    /// runs it (`--jobs`, `worker` on other hosts), a headline for the
    /// run — its workers, the items ended and to go, a usage-limit sleep —
    /// then one line per live worker (its item, round, phase, host, pid,
    /// lease expiry).
    pub fn text(&self) -> String {
        let mut out = self.run_text();
        for line in self.quota_lines() {
            out.push('\n');
            out.push_str(&line);
        }
        out
    }

    /// [`Status::text`] without the quota lines.
    fn run_text(&self) -> String {
        let Some(r) = &self.running else {
            return self.idle_text();
        };
        if self.workers.len() < 2 {
            return self.run_line(r);
        }
        let mut out = format!(
            "run {} · {} workers · {} item(s) ended, {} to go",
            r.id,
            self.workers.len(),
            self.ended,
            self.pending
        );
        if !self.connections.is_empty() {
            let per_host: Vec<String> = self
                .connections
                .iter()
                .map(|(host, n)| format!("{host} {n}"))
                .collect();
            out.push_str(&format!(" · connections: {}", per_host.join(", ")));
        }
        if let Some(until) = r.sleeping_until {
            out.push_str(&format!(
                " · sleeping until {} ({}, {})",
                until.with_timezone(&self.tz).format("%H:%M"),
                sleep_words(r),
                r.sleeping_agent.as_deref().unwrap_or("agent")
            ));
        }
        for w in &self.workers {
            let doing = match w.item_key.as_deref() {
                Some(k) => format!(
                    "item {} · round {} · {}",
                    self.titles
                        .get(k)
                        .cloned()
                        .unwrap_or_else(|| k[..k.len().min(8)].to_string()),
                    w.round.map_or("-".to_string(), |n| n.to_string()),
                    w.phase.as_deref().unwrap_or("starting"),
                ),
                None => "idle".to_string(),
            };
            out.push_str(&format!(
                "\n  worker {} · {doing} · host {} · pid {} · lease until {}",
                w.id,
                w.host,
                w.pid,
                w.lease_until.with_timezone(&self.tz).format("%H:%M:%S"),
            ));
        }
        out
    }

    /// The running run's own line.
    fn run_line(&self, r: &RunRow) -> String {
        match (r.sleeping_until, &r.phase) {
            (Some(until), _) => format!(
                "sleeping until {} ({}, {})",
                until.with_timezone(&self.tz).format("%H:%M"),
                sleep_words(r),
                r.sleeping_agent.as_deref().unwrap_or("agent")
            ),
            (None, phase) => format!(
                "run {} · item {} · round {} · {}",
                r.id,
                self.current_item,
                r.current_round.map(|n| n.to_string()).unwrap_or("-".into()),
                phase.map_or("starting", Phase::as_str)
            ),
        }
    }

    /// The line when no run is in progress: a dead one, one to resume (or
    /// to approve again), or none.
    fn idle_text(&self) -> String {
        match (&self.dead, &self.to_resume) {
            (Some(r), _) => format!(
                "idle: run {} ended without finishing (pid {} is gone); the next `nightshift drain` marks it crashed and resumes it",
                r.id,
                r.pid.unwrap_or(0)
            ),
            (None, Some(r)) if self.key_lost => format!(
                "idle: run {} stopped before its end; its approval can no longer be verified (the approval key in {} is gone or changed): run `nightshift plan` and approve again, then `nightshift drain` runs what is left",
                r.id,
                self.key_path.display()
            ),
            (None, Some(r)) => format!(
                "idle: run {} stopped before its end ({}; `nightshift report` says why); the next `nightshift drain` resumes it",
                r.id,
                if r.status == RunStatus::StoppedSignal {
                    "stopped by a signal"
                } else {
                    RunStatus::Crashed.as_str()
                }
            ),
            (None, None) => "idle: no run is in progress".to_string(),
        }
    }

    /// `status --json` (docs/commands.md#json-output), with `text`.
    pub fn json(&self, text: String) -> serde_json::Value {
        let running = self.running.as_ref();
        serde_json::json!({
            "running": running.is_some(),
            "dead_run_id": self.dead.as_ref().map(|r| r.id.to_string()),
            "resumable_run_id": self.to_resume.as_ref().filter(|_| !self.key_lost).map(|r| r.id.to_string()),
            "run_id": running.map(|r| r.id.to_string()),
            "phase": running.and_then(|r| r.phase),
            "item_key": running.and_then(|r| r.current_item_key.clone()),
            "round": running.and_then(|r| r.current_round),
            "sleeping_until": running.and_then(|r| r.sleeping_until),
            "sleeping_agent": running.and_then(|r| r.sleeping_agent.clone()),
            "pid": running.and_then(|r| r.pid),
            "workers": self.workers,
            "connections": self.connections.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "now": self.now,
            "quota": self.quota_json(),
            "text": text,
        })
    }
}

impl Status {
    /// `status --json`'s `quota`: per account, its windows' latest readings
    /// (`window`, `percent`, `raw_utilization`, `status`, `resets_at`,
    /// `overage_in_use`, `read_at`, `age_seconds`, `stale`), `gauge:
    /// "unknown"` for an account without any.
    fn quota_json(&self) -> serde_json::Value {
        let now = self.now;
        let (readings, unknown) = &self.quota;
        let mut by: std::collections::BTreeMap<String, serde_json::Value> = Default::default();
        for r in readings {
            let e = by
                .entry(r.account.clone())
                .or_insert_with(|| serde_json::json!({"gauge": "known", "windows": []}));
            if let Some(w) = e["windows"].as_array_mut() {
                w.push(serde_json::json!({
                    "window": r.quota_window,
                    "source": r.source,
                    "window_minutes": r.window_minutes,
                    "percent": r.percent,
                    "raw_utilization": r.raw_utilization,
                    "status": r.status,
                    "resets_at": r.resets_at,
                    "overage_in_use": r.overage_in_use,
                    "read_at": r.read_at,
                    "age_seconds": (now - r.read_at).num_seconds(),
                    "stale": crate::limit::gauge::is_stale(r.resets_at, now),
                }));
            }
        }
        for a in unknown {
            by.insert(
                a.clone(),
                serde_json::json!({"gauge": "unknown", "windows": []}),
            );
        }
        serde_json::json!(by)
    }
}

/// The accounts whose quota gauges `status` and `plan` show: the
/// configured claude and codex agents' and their fallbacks' (a `command`
/// agent has none), each once (docs/limits.md#gauges).
pub fn gauge_accounts(config: &crate::config::Config) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for (_, _, a) in config.agents_in_play() {
        if a.kind != crate::config::AgentKind::Command && !v.contains(&a.account()) {
            v.push(a.account());
        }
    }
    v
}

/// The item `running` works on as `plan` and `report` name it: index,
/// title, short key (the short key alone before its row exists); `-`
/// when nothing runs.
///
/// # Errors
/// Database errors.
async fn current_item(pool: &sqlx::PgPool, running: Option<&RunRow>) -> Result<String> {
    let Some((run, key)) = running.and_then(|r| r.current_item_key.as_deref().map(|k| (r.id, k)))
    else {
        return Ok("-".to_string());
    };
    let short = &key[..8.min(key.len())];
    let item = crate::ledger::items::run_items(pool, run)
        .await?
        .into_iter()
        .rev()
        .find(|i| i.item_key == key);
    Ok(match item {
        Some(i) => format!("{} {:?} ({short})", i.item_index, i.title),
        None => short.to_string(),
    })
}

/// The items of run `run` as `plan` and `report` name them (`2 "Add a
/// --json flag" (1a2b3c4d)`), by key, and how many of them ended.
///
/// # Errors
/// Database errors.
async fn item_names(
    pool: &sqlx::PgPool,
    run: uuid::Uuid,
) -> Result<(std::collections::HashMap<String, String>, usize)> {
    let items = crate::ledger::items::run_items(pool, run).await?;
    let ended = items.iter().filter(|i| i.ended_at.is_some()).count();
    let names = items
        .into_iter()
        .map(|i| {
            let short = i.item_key[..8.min(i.item_key.len())].to_string();
            let name = format!("{} {:?} ({short})", i.item_index, i.title);
            (i.item_key, name)
        })
        .collect();
    Ok((names, ended))
}

/// A run that stopped on a failure outside its items waits to be resumed
/// (while its approval allows, docs/contract.md#approval) when it is the
/// `newest`. Also says whether its approval, younger than 24 h, can no
/// longer be verified: the approval key was lost (docs/security.md), so it
/// needs a new approval rather than a resume.
///
/// # Errors
/// Database errors.
async fn run_to_resume(
    pool: &sqlx::PgPool,
    id: &str,
    newest: Option<&RunRow>,
    now: DateTime<Utc>,
) -> Result<(Option<RunRow>, bool)> {
    let to_resume = runs::resumable_run(pool, id)
        .await?
        .filter(|r| newest.is_some_and(|n| n.id == r.id));
    let Some(aid) = to_resume.as_ref().and_then(|r| r.approval_id) else {
        return Ok((to_resume, false));
    };
    let approval = crate::approval::by_id(pool, aid).await?;
    // As `drain` checks a run before it resumes it: a run whose binding to
    // its approval does not verify (its plan or approval changed in the
    // ledger, docs/contract.md#binding) is not offered for a resume.
    let bound = match &to_resume {
        Some(r) => crate::approval::binding::verify(pool, r).await?.is_ok(),
        None => false,
    };
    let resumable = bound
        && approval
            .as_ref()
            .is_some_and(|a| a.plan_sha.is_some() && crate::approval::may_resume(a, now));
    let key_lost = !resumable
        && approval.as_ref().is_some_and(|a| {
            a.plan_sha.is_some() && now < a.expires_at && crate::approval::check_signed(a).is_err()
        });
    if !resumable && !key_lost {
        return Ok((None, false));
    }
    Ok((to_resume, key_lost))
}

/// True when a run marked `running` belonged to a process of this host that
/// no longer exists (killed, machine rebooted). Runs of other hosts sharing
/// the ledger cannot be checked from here and count as running.
fn died_here(r: &RunRow) -> bool {
    let this_host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok());
    match (r.pid, r.host.as_deref(), this_host.as_deref()) {
        (Some(pid), Some(host), Some(here)) if host == here && pid > 0 => {
            matches!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                Err(nix::errno::Errno::ESRCH)
            )
        }
        _ => false,
    }
}

/// What a sleeping run waits for, in words: `quota reserve` for a reserve
/// stop that ends tonight (docs/limits.md#reserve), else `usage limit`.
fn sleep_words(r: &RunRow) -> &'static str {
    match r.sleeping_kind.as_deref() {
        Some("quota_reserve") => "quota reserve",
        _ => "usage limit",
    }
}
