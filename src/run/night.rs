//! What every item of a run shares through [`Night`]: the wait for a ledger
//! that stopped answering and the retaking of the repository lock after it
//! (docs/ledger.md#outage-wait, docs/ledger.md#locking), the systemic stop
//! (a cause outside the items that ends the run as `crashed`), GitHub marked
//! down for the rest of the run, and redaction. It does not decide what an
//! item does; the walk over the plan is in [`super::drain`].

use std::time::{Duration, Instant};

use crate::config;
use crate::error::Error;

use super::{LEDGER_PATIENCE, Night};

impl Night {
    /// The GitHub token's text for git's askpass helper (a push, a fetch of
    /// the remote), never an agent's; `None` without a token.
    pub fn git_token(&self) -> Option<String> {
        self.token.as_ref().map(|t| t.expose().to_string())
    }

    /// Runs the ledger call `f`. When the ledger stopped answering
    /// ([`crate::ledger::is_outage`]) the run waits for it — restarting the
    /// embedded cluster if that is the ledger, taking the repository lock
    /// again — and runs `f` again: a restart of PostgreSQL during a night
    /// costs a pause, not the item's work (docs/ledger.md#outage-wait).
    ///
    /// # Errors
    /// A query error as [`Error`]; an outage that outlasts
    /// [`LEDGER_PATIENCE`], the deadline or a signal as an [`Error`] saying
    /// the next drain resumes the run.
    pub async fn db<T, Fut>(&self, f: impl Fn() -> Fut) -> Result<T, Error>
    where
        Fut: std::future::Future<Output = sqlx::Result<T>>,
    {
        let mut waiting: Option<Instant> = None;
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) if crate::ledger::is_outage(&e) => {
                    self.wait_for_ledger(e, &mut waiting).await?
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits until the ledger answers again after `e`; `since` is when this
    /// outage began (set on the first call). Returns when it is back and,
    /// for the drain that holds it, the lock is ours again.
    pub(super) async fn wait_for_ledger(
        &self,
        e: sqlx::Error,
        since: &mut Option<Instant>,
    ) -> Result<(), Error> {
        let began = *since.get_or_insert_with(|| {
            let msg = format!(
                "the ledger ({}) stopped answering: {}; the run waits for it (at most {}, or until the deadline or a signal)",
                self.db_source.describe(),
                outage_text(&e),
                config::format_duration(LEDGER_PATIENCE)
            );
            tracing::info!("{msg}");
            let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("warning: {msg}\n"));
            Instant::now()
        });
        let mut pause = Duration::from_millis(500);
        let mut last = e;
        loop {
            let give_up = if self.cancel.is_cancelled() {
                Some("a signal came")
            } else if self.clock.now() >= self.deadline {
                Some("the deadline passed")
            } else if began.elapsed() >= LEDGER_PATIENCE {
                Some("it stayed away too long")
            } else {
                None
            };
            if let Some(why) = give_up {
                return Err(Error::failed(format!(
                    "ledger: the database stopped answering ({}) and {why} while the run waited for it; {}. Nothing recorded is lost: once it is back, `nightshift drain` resumes this run",
                    outage_text(&last),
                    self.db_source.describe()
                )));
            }
            self.restart_embedded().await;
            // The pool itself may wait a while for a connection: a signal
            // does not wait with it.
            let probe = tokio::select! {
                r = crate::ledger::ping(&self.pool) => Some(r),
                () = self.cancel.cancelled() => None,
            };
            match probe {
                Some(Ok(_)) if self.back_again(began).await? => return Ok(()),
                Some(Ok(_)) => {}
                Some(Err(err)) => last = err,
                None => continue,
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.cancel.cancelled() => {}
            }
            pause = (pause * 2).min(Duration::from_secs(10));
        }
    }

    /// The ledger answered the probe after an outage that began at
    /// `began`: for the drain, the repository lock is taken again (only the
    /// drain holds it; a worker goes on, docs/workers.md), then the run is
    /// told it goes on (`true`). `false`: keep waiting — a pooled connection
    /// may answer while a new one, the lock's session, is still refused.
    ///
    /// # Errors
    /// Another run took the lock meanwhile, or the lock cannot be taken for
    /// a reason other than the outage.
    async fn back_again(&self, began: Instant) -> Result<bool, Error> {
        if self.state.holds_lock
            && let Err(e) = self.retake_lock().await
        {
            if !matches!(e, Error::Ledger { outage: true, .. }) {
                return Err(e);
            }
            tracing::info!("{e}; waiting for the ledger");
            return Ok(false);
        }
        let msg = format!(
            "the ledger answers again after {}; the run goes on",
            config::format_duration(Duration::from_secs(began.elapsed().as_secs().max(1)))
        );
        tracing::info!("{msg}");
        let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("note: {msg}\n"));
        Ok(true)
    }

    /// Starts the ledger's cluster again when it is our own private one
    /// (docs/ledger.md#embedded-default) and it died (a crash, an OOM kill).
    async fn restart_embedded(&self) {
        let crate::ledger::DbSource::Embedded { data_dir } = &self.db_source else {
            return;
        };
        match crate::ledger::embedded::Cluster::resolve(
            data_dir,
            &crate::ledger::embedded::process_env,
        )
        .await
        {
            Ok(c) => {
                if let Err(err) = c.start().await {
                    tracing::warn!("restarting the embedded database failed: {err}");
                }
            }
            Err(err) => tracing::warn!("the embedded database: {err}"),
        }
    }

    /// Checks that the repository lock is still this run's (a server restart
    /// drops it with its connection) and takes it again if it is not.
    ///
    /// # Errors
    /// Another run took the lock meanwhile (this run must stop: both would
    /// do the same items), or the ledger stays away (see [`Night::db`]).
    pub async fn hold_lock(&self) -> Result<(), Error> {
        let held = match self.state.lock.lock().await.as_mut() {
            Some(l) => l.still_held().await,
            None => Ok(false),
        };
        match held {
            Ok(true) => Ok(()),
            Ok(false) => self.retake_lock().await,
            // Its connection is gone: the server restarted or is away.
            Err(_) => {
                self.db(|| crate::ledger::ping(&self.pool)).await?;
                self.retake_lock().await
            }
        }
    }

    /// The drain's side of a run that must outlive a database restart
    /// (docs/ledger.md#locking): every few seconds it measures the server's
    /// clock again, renews the run's own heartbeat (while that is fresh no
    /// other drain declares the run crashed) and, as soon as the ledger is
    /// back after an outage, takes the repository lock again — not only at
    /// the next claim. Stops when the returned [`Keeper`] is dropped.
    pub(super) fn keep_alive(night: std::sync::Arc<Night>, run: uuid::Uuid) -> Keeper {
        let every = (night.config.lease / 3).min(Duration::from_secs(2));
        Keeper(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // The ledger is away: the run's own calls wait for it.
                if crate::queue::sync_clock(&night.pool).await.is_err() {
                    continue;
                }
                let _ = crate::queue::beat_run(&night.pool, run).await;
                if night.state.holds_lock {
                    night.keep_lock().await;
                }
            }
        }))
    }

    /// Takes the lock again if it was lost (best effort: a lock another run
    /// took meanwhile stops this run at its workers' next
    /// [`Night::hold_lock`]).
    async fn keep_lock(&self) {
        let held = {
            let mut guard = self.state.lock.lock().await;
            match guard.as_mut() {
                Some(l) => matches!(
                    tokio::time::timeout(LOCK_CHECK, l.still_held()).await,
                    Ok(Ok(true))
                ),
                None => false,
            }
        };
        if held {
            return;
        }
        match tokio::time::timeout(LOCK_CHECK, self.retake_lock()).await {
            Ok(Ok(())) => tracing::info!("the repository lock is this run's again"),
            Ok(Err(e)) => tracing::warn!("{e}"),
            Err(_) => tracing::warn!("taking the repository lock again timed out; trying again"),
        }
    }

    /// Takes the repository lock again if this run no longer holds it.
    async fn retake_lock(&self) -> Result<(), Error> {
        let mut guard = self.state.lock.lock().await;
        if let Some(l) = guard.as_mut()
            && matches!(l.still_held().await, Ok(true))
        {
            return Ok(());
        }
        *guard = None;
        match self
            .state
            .ledger
            .try_lock_repo(&self.repo_id, &crate::ledger::HolderInfo::current())
            .await
        {
            Ok(crate::ledger::RepoLockAttempt::Acquired(l)) => {
                *guard = Some(l);
                Ok(())
            }
            Ok(crate::ledger::RepoLockAttempt::Held { holder }) => Err(Error::refused(format!(
                "this run lost the lock of {} while the ledger was away, and another nightshift run took it ({}); this run stops so that the two do not do the same items",
                self.repo.display(),
                holder
                    .map(|h| h.to_string())
                    .unwrap_or_else(|| "another process".into())
            ))),
            Err(e) => Err(Error::Ledger {
                outage: matches!(e, crate::ledger::LedgerError::Connect { .. }),
                detail: format!("taking the lock of {} again: {e}", self.repo.display()),
                source: None,
            }),
        }
    }

    /// Records that the run must stop for `why` (see [`super::RunState`]).
    pub(super) fn stop_systemic(&self, why: &str) {
        if let Ok(mut g) = self.state.systemic.lock() {
            g.get_or_insert_with(|| why.to_string());
        }
    }

    /// Why the run cannot go on, if it cannot: a cause already recorded, or
    /// a data directory that is gone, read-only or full.
    pub(super) fn systemic_problem(&self) -> Option<String> {
        if let Some(why) = self.state.systemic.lock().ok().and_then(|g| g.clone()) {
            return Some(why);
        }
        let why = self
            .state
            .slots_lock
            .as_ref()
            .and_then(|l| l.check().err())?;
        self.stop_systemic(&why);
        Some(why)
    }

    /// Why GitHub is considered down for the rest of this run, if it is.
    pub fn github_down(&self) -> Option<String> {
        self.state
            .forge_down
            .lock()
            .map(|g| g.clone())
            .unwrap_or(None)
    }

    pub(super) fn mark_github_down(&self, why: &str) {
        if let Ok(mut g) = self.state.forge_down.lock() {
            g.get_or_insert_with(|| why.to_string());
        }
    }

    /// Why the remote is considered down for the rest of this run, if it
    /// is: it could not be fetched earlier.
    pub(super) fn remote_down(&self) -> Option<String> {
        self.state
            .remote_down
            .lock()
            .map(|g| g.clone())
            .unwrap_or(None)
    }

    /// Records that the remote could not be fetched, for `why` (the first
    /// cause stays).
    pub(super) fn mark_remote_down(&self, why: &str) {
        if let Ok(mut g) = self.state.remote_down.lock() {
            g.get_or_insert_with(|| why.to_string());
        }
    }

    /// Takes the walk kept for the checkout at `dir`, if there is one.
    pub(super) fn take_kept_walk(&self, dir: &std::path::Path) -> Option<crate::slot::KeptWalk> {
        self.state
            .kept_walks
            .lock()
            .ok()
            .and_then(|mut k| k.remove(dir))
    }

    /// Keeps `walk` for the next reset of the checkout at `dir`.
    pub(super) fn keep_walk(&self, dir: std::path::PathBuf, walk: crate::slot::KeptWalk) {
        if let Ok(mut all) = self.state.kept_walks.lock() {
            all.insert(dir, walk);
        }
    }

    /// Runs blocking git work `f`, handing it a flag that turns true when
    /// `cancel` fires (the night's signal, or the attempt's claim lost) (so git is killed at once rather than
    /// awaited, docs/limits.md#signals).
    pub(super) async fn until_signal<T>(
        &self,
        cancel: &tokio_util::sync::CancellationToken,
        f: impl FnOnce(std::sync::Arc<std::sync::atomic::AtomicBool>) -> T,
    ) -> T {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(cancel.is_cancelled()));
        let (flag, cancel) = (stop.clone(), cancel.clone());
        let watcher = tokio::spawn(async move {
            cancel.cancelled().await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let out = tokio::task::block_in_place(|| f(stop));
        watcher.abort();
        out
    }

    /// Holds the run to its cost cap in USD (`max_cost_usd_per_run`,
    /// docs/workers.md "What holds across all workers") as the run recorded
    /// it; `None` (a run recorded before caps were) keeps this host's
    /// config.
    pub(super) fn hold_cost_cap(&self, cap: Option<f64>) {
        let cap = cap.unwrap_or(self.config.limits.max_cost_usd_per_run);
        let _ = self.state.cost_cap.set(cap);
    }

    /// The run's cost cap in USD ([`Night::hold_cost_cap`]; this host's
    /// config before it was held).
    pub fn run_cost_cap(&self) -> f64 {
        (self.state.cost_cap.get().copied()).unwrap_or(self.config.limits.max_cost_usd_per_run)
    }

    /// Redacts every secret (token, ledger URL, configured secrets, and
    /// every value [`crate::secret::remember`]ed, such as a password of the
    /// remote's URL) from `s`, in every form [`crate::secret::Redactor`] knows.
    pub fn redact(&self, s: &str) -> String {
        crate::secret::Redactor::with_known(self.secrets.iter()).redact(s)
    }
}

/// How long one look at the repository lock may take before the keeper
/// tries again (a connection cut by a partition would otherwise hang it).
const LOCK_CHECK: Duration = Duration::from_secs(10);

/// The drain's keeper task ([`Night::keep_alive`]); dropping it stops it.
pub(super) struct Keeper(tokio::task::JoinHandle<()>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The server's own words for an outage, without the driver's decoration.
fn outage_text(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => db.message().to_string(),
        e => e.to_string(),
    }
}
