//! The heartbeat of one process (docs/workers.md#heartbeats): a single task
//! renews, in one statement every third of the lease, the leases of all
//! this process's workers and of every claim they hold, and measures the
//! server's clock on the way ([`crate::queue::beat_process`]). However many
//! workers `--jobs` starts, a process makes one heartbeat statement per
//! beat, not one per worker (issue 27: 200 workers on one ledger). A claim
//! the beat did not renew was lost: its attempt stops ([`Fence::lose`]).

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sqlx::PgPool;

use crate::queue;

use super::record::Fence;

/// What this process's heartbeat keeps alive: its workers' rows and their
/// live claims.
#[derive(Default)]
pub(super) struct Heart {
    beating: Mutex<Beating>,
}

#[derive(Default)]
struct Beating {
    /// Worker names (`host:pid:n`) that joined and have not left.
    workers: BTreeSet<String>,
    /// Live claims by id, with the fence that stops their attempt.
    claims: HashMap<i64, Arc<Fence>>,
    /// Live claims by id: whose output the board may show
    /// ([`super::live_output`]).
    shown: HashMap<i64, Shown>,
}

/// A live claim's output as [`super::live_output`] follows it.
#[derive(Clone)]
pub(super) struct Shown {
    /// The worker (`host:pid:n`) and the item's key.
    pub worker: String,
    pub key: String,
    /// The item's log directory (its calls' `*.stdout` files).
    pub dir: PathBuf,
    /// The modification time of the output last shown.
    pub seen: Option<SystemTime>,
}

impl Heart {
    fn beating(&self) -> std::sync::MutexGuard<'_, Beating> {
        self.beating.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Worker `name` joined: its row is beaten from now on.
    pub fn join(&self, name: &str) {
        self.beating().workers.insert(name.to_string());
    }

    /// Worker `name` left: its row is not beaten any more.
    pub fn leave(&self, name: &str) {
        self.beating().workers.remove(name);
    }

    /// The claim behind `fence` is held: its lease is renewed with the
    /// workers' until [`Heart::release`], and the output of its item's
    /// calls (under `dir`) is shown live.
    pub fn hold(&self, fence: &Arc<Fence>, dir: PathBuf) {
        let mut b = self.beating();
        b.claims.insert(fence.claim.id, fence.clone());
        let shown = Shown {
            worker: fence.claim.worker.clone(),
            key: fence.claim.item_key.clone(),
            dir,
            seen: None,
        };
        b.shown.insert(fence.claim.id, shown);
    }

    /// Claim `id` ended (or its attempt stopped): no longer renewed.
    pub fn release(&self, id: i64) {
        let mut b = self.beating();
        b.claims.remove(&id);
        b.shown.remove(&id);
    }

    /// The live claims' outputs, by claim id.
    pub fn shown(&self) -> Vec<(i64, Shown)> {
        let b = self.beating();
        b.shown.iter().map(|(id, s)| (*id, s.clone())).collect()
    }

    /// The output of claim `id` was shown as of `at`.
    pub fn seen(&self, id: i64, at: SystemTime) {
        if let Some(s) = self.beating().shown.get_mut(&id) {
            s.seen = Some(at);
        }
    }

    /// One beat: one statement for every worker and claim of the process.
    /// The claims it did not renew are lost and their attempts stopped.
    /// A ledger that is away is not a loss: the lease decides whether the
    /// claims survive the outage, and the next beat tries again.
    async fn beat(&self, pool: &PgPool, lease: Duration) {
        let (workers, claims): (Vec<String>, Vec<i64>) = {
            let b = self.beating();
            (
                b.workers.iter().cloned().collect(),
                b.claims.keys().copied().collect(),
            )
        };
        if workers.is_empty() && claims.is_empty() {
            return;
        }
        let Ok(renewed) = queue::beat_process(pool, &workers, &claims, lease).await else {
            return;
        };
        let mut b = self.beating();
        for id in claims.iter().filter(|id| !renewed.contains(id)) {
            if let Some(fence) = b.claims.remove(id) {
                fence.lose();
            }
        }
    }
}

/// Starts the process's heartbeat: a beat at once, then every third of
/// `lease`, until the returned task is aborted.
pub(super) fn start(
    heart: Arc<Heart>,
    pool: PgPool,
    lease: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            heart.beat(&pool, lease).await;
            tokio::time::sleep(lease / 3).await;
        }
    })
}
