//! The ledger and the holds a run takes before it starts (docs/ledger.md):
//! the connection, the one-drain-per-repository lock, the lock on the
//! checkouts, and the approval key the approvals are verified with. Not
//! for what is read or written in the ledger afterwards (the run's and the
//! domain's own modules do that).

use std::path::Path;

use crate::error::{Error, Result};
use crate::ledger as ledger_mod;
use crate::slot::SlotsLock;

use super::Request;

/// The ledger and the holds that make this drain the repository's only
/// one (docs/ledger.md): the lock in the ledger and the lock on the
/// checkouts under the data directory.
pub struct Held {
    /// The connected ledger.
    pub ledger: ledger_mod::Ledger,
    /// The repository's identity in the ledger (see [`super::repo_id`]).
    pub repo_id: String,
    /// The one-drain-per-repository lock in the ledger (`None` for a
    /// `worker`, which joins the drain that holds it).
    pub lock: Option<ledger_mod::RepoLock>,
    /// The hold on the repository's checkouts.
    pub slots_lock: SlotsLock,
}

impl Held {
    /// Connects to the ledger, records the plan, takes both locks, checks
    /// the data directory can be written, and marks the runs that died
    /// `crashed` (saying so on stderr).
    ///
    /// # Errors
    /// Exit 1 when the ledger is unreachable or the data directory cannot
    /// be locked or written; refused when another run holds a lock.
    pub async fn take(req: &Request) -> Result<Held> {
        let ledger = ledger().await?;
        let repo_id = super::repo_id(&req.repo, &req.config.remote);
        crate::run::save_plan(&ledger.pool, &repo_id, &req.plan).await?;
        check_clock(&ledger.pool).await?;
        let lock = lock_repo(&ledger, &repo_id, &req.repo).await?;
        refuse_live_run(&ledger.pool, &repo_id, &req.repo, req.config.lease).await?;
        let slots_lock = lock_checkouts(&req.repo)?;
        let crashed = crate::run::mark_dead_runs_crashed(&ledger.pool, &repo_id).await?;
        for r in &crashed {
            eprintln!(
                "note: run {} (pid {}) ended without finishing; marked crashed",
                r.id,
                r.pid.unwrap_or(0)
            );
        }
        Ok(Held {
            ledger,
            repo_id,
            lock: Some(lock),
            slots_lock,
        })
    }

    /// The ledger's pool.
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.ledger.pool
    }
}

/// Measures this host's clock against the ledger server's (every shared
/// decision is judged by the server's, docs/workers.md#what-clocks-must-agree)
/// and says so on stderr when they differ by more than a few seconds.
///
/// # Errors
/// Exit 1 when the ledger does not answer.
pub(super) async fn check_clock(pool: &sqlx::PgPool) -> Result<()> {
    let (host, server) = crate::queue::sync_clock(pool).await?;
    if let Some(note) = crate::schedule::skew_note(host, server) {
        eprintln!("warning: {note}");
    }
    Ok(())
}

/// A run of `repo_id` still marked `running` is dead only when nobody
/// vouches for it: its drain or a worker on this host still lives, or one
/// on another host beat within `lease` (server clock). A server restart
/// drops the repository lock with its session, so holding the lock alone
/// does not make the run dead (docs/ledger.md#locking).
///
/// # Errors
/// Refused (exit 3) naming the run and who vouches for it; database errors.
async fn refuse_live_run(
    pool: &sqlx::PgPool,
    repo_id: &str,
    repo: &Path,
    lease: std::time::Duration,
) -> Result<()> {
    let Some(run) = crate::ledger::runs::running_run(pool, repo_id).await? else {
        return Ok(());
    };
    match crate::queue::vouched(pool, run.id, lease).await? {
        None => Ok(()),
        Some(who) => Err(Error::refused(format!(
            "another nightshift run holds the lock of {}: run {} is live — {who} — though the repository lock was free (a restart of the database drops it until that run takes it again); wait for it to finish or stop it",
            repo.display(),
            run.id
        ))),
    }
}

/// One drain per repository (docs/ledger.md): the ledger's lock of `repo_id`.
///
/// # Errors
/// A ledger error; refused, naming the holder, when another run holds it.
async fn lock_repo(
    ledger: &ledger_mod::Ledger,
    repo_id: &str,
    repo: &Path,
) -> Result<ledger_mod::RepoLock> {
    let holder = ledger_mod::HolderInfo::current();
    let attempt = ledger
        .try_lock_repo(repo_id, &holder)
        .await
        .map_err(|e| Error::Ledger {
            detail: e.to_string(),
            outage: false,
            source: None,
        })?;
    match attempt {
        ledger_mod::RepoLockAttempt::Acquired(guard) => Ok(guard),
        ledger_mod::RepoLockAttempt::Held { holder } => {
            let who = holder
                .map(|h| h.to_string())
                .unwrap_or_else(|| "another process".into());
            Err(Error::refused(format!(
                "another nightshift run holds the lock of {} ({who}); wait for it to finish or stop it",
                repo.display()
            )))
        }
    }
}

/// The checkouts too, whatever database another drain uses; a data
/// directory that is already full or read-only would stop the run at its
/// first item, so that is said before an approval is used.
///
/// # Errors
/// Refused when another process holds the checkouts; exit 1 when they
/// cannot be locked or the directory cannot be written.
pub(super) fn lock_checkouts(repo: &Path) -> Result<SlotsLock> {
    let data_dir = super::data_dir();
    let slots_lock = match crate::slot::lock_slots(&data_dir, repo) {
        Ok(Ok(l)) => l,
        Ok(Err(pid)) => {
            return Err(Error::refused(format!(
                "another nightshift run (pid {pid}) is using the checkouts of {} under {}, perhaps with another database; wait for it to finish or stop it",
                repo.display(),
                data_dir.display()
            )));
        }
        Err(e) => {
            return Err(Error::failed(format!(
                "cannot lock the checkouts under {}: {e}",
                data_dir.display()
            )));
        }
    };
    if let Err(why) = slots_lock.check() {
        return Err(Error::failed(format!(
            "{why}; nothing was run and the approval is still unused"
        )));
    }
    Ok(slots_lock)
}

/// Reads the approval key of the data directory and installs it for the
/// approval checks ([`crate::approval::install_key`]); no key means no approval
/// verifies (approve again).
///
/// # Errors
/// Exit 2 when the key file is unreadable, malformed or open to others.
pub fn install_approval_key() -> Result<()> {
    let data_dir = super::data_dir();
    let key = crate::approval::load_key(&data_dir).map_err(|e| Error::config(e.to_string()))?;
    crate::approval::install_key(key, crate::approval::key_path(&data_dir));
    Ok(())
}

/// Connects to the ledger chosen by the environment (docs/ledger.md).
///
/// # Errors
/// Exit 1 with the source named when the database is unreachable.
pub async fn ledger() -> Result<crate::ledger::Ledger> {
    ledger_error(crate::ledger::Ledger::connect(&crate::ledger::db_source_from_env()).await)
}

/// [`ledger`] with one connection, for a command whose statements run one
/// after another ([`crate::ledger::Ledger::connect_serial`]).
///
/// # Errors
/// As [`ledger`].
pub async fn ledger_serial() -> Result<crate::ledger::Ledger> {
    ledger_error(crate::ledger::Ledger::connect_serial(&crate::ledger::db_source_from_env()).await)
}

/// A ledger connection's error as the CLI reports it.
fn ledger_error(
    r: std::result::Result<crate::ledger::Ledger, crate::ledger::LedgerError>,
) -> Result<crate::ledger::Ledger> {
    r.map_err(|e| match e {
        // A URL that cannot be a PostgreSQL URL is a configuration error.
        crate::ledger::LedgerError::BadUrl { .. } => Error::config(format!("ledger: {e}")),
        e => Error::Ledger {
            detail: e.to_string(),
            outage: false,
            source: None,
        },
    })
}
