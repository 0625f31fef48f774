//! The hub of a board server (docs/serve.md#events): one task follows the
//! ledger's event log — LISTEN on `nightshift_events`, then reading every
//! event numbered after the last one it saw, after a notification, after a
//! reconnect (notifications sent while disconnected are lost) and every
//! [`POLL`] anyway — and hands each event once to every connected client
//! through one bounded broadcast channel. A second task keeps the board's
//! state (the `/api/state` model) and sends it again after events, at most
//! every [`STATE_EVERY`]. Memory does not grow with the number of clients:
//! a frame is encoded once and shared; a client that falls more than
//! [`BACKLOG`] frames behind is disconnected (see `sse`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use crate::ledger::events::{self, EventRow};

/// Frames the broadcast channel keeps for its slowest client.
pub const BACKLOG: usize = 1024;
/// How often the log is read even without a notification.
pub const POLL: Duration = Duration::from_secs(2);
/// The shortest time between two state frames.
pub const STATE_EVERY: Duration = Duration::from_millis(250);
/// Events read from the ledger in one query.
pub const PAGE: i64 = 500;
/// How often old events are pruned.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// How long the state may be served from the cache to `/api/state`.
const STATE_FRESH: Duration = Duration::from_secs(1);

/// One message of the stream, encoded once as its SSE frame.
#[derive(Debug, Clone)]
pub enum Frame {
    /// A ledger event (`id:` its sequence number).
    Event {
        /// Its commit sequence number.
        seq: i64,
        /// The SSE frame.
        bytes: Bytes,
    },
    /// The board's state, or the ledger's reachability: no id.
    Other(Bytes),
}

/// The shared side of a board server: the broadcast of frames, the last
/// event number read, the cached state and whether the ledger answers.
pub struct Hub {
    /// The ledger.
    pub pool: PgPool,
    tx: broadcast::Sender<Frame>,
    last: Mutex<i64>,
    state: Mutex<Option<(Instant, Arc<Value>)>>,
    building: tokio::sync::Mutex<()>,
    source: super::state::Source,
    changed: Notify,
    down_since: Mutex<Option<DateTime<Utc>>>,
}

impl Hub {
    /// A hub on `pool` whose state is that of `source`, starting after the
    /// ledger's last event (an error when the ledger does not answer).
    ///
    /// # Errors
    /// Database errors.
    pub async fn new(pool: PgPool, source: super::state::Source) -> crate::error::Result<Arc<Hub>> {
        let last = events::last(&pool).await?;
        let (tx, _) = broadcast::channel(BACKLOG);
        Ok(Arc::new(Hub {
            pool,
            tx,
            last: Mutex::new(last),
            state: Mutex::new(None),
            building: tokio::sync::Mutex::new(()),
            source,
            changed: Notify::new(),
            down_since: Mutex::new(None),
        }))
    }

    /// A new client's receiver of every frame sent from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Frame> {
        self.tx.subscribe()
    }

    /// The number of the last event the hub has sent.
    pub fn last(&self) -> i64 {
        *self.last.lock().expect("hub lock")
    }

    /// Since when the ledger does not answer, if it does not.
    pub fn down_since(&self) -> Option<DateTime<Utc>> {
        *self.down_since.lock().expect("hub lock")
    }

    /// The board's state: the cached one if younger than a second, else
    /// built again.
    ///
    /// # Errors
    /// Database errors.
    pub async fn state(&self) -> crate::error::Result<Arc<Value>> {
        if let Some(v) = self.fresh_state() {
            return Ok(v);
        }
        // One build at a time: a crowd of clients connecting at once waits
        // for one build instead of queueing theirs before the hub's reads.
        let _building = self.building.lock().await;
        if let Some(v) = self.fresh_state() {
            return Ok(v);
        }
        let v = Arc::new(self.source.state(&self.pool, self.last()).await?);
        *self.state.lock().expect("hub lock") = Some((Instant::now(), v.clone()));
        Ok(v)
    }

    /// The cached state, if younger than [`STATE_FRESH`].
    fn fresh_state(&self) -> Option<Arc<Value>> {
        let cached = self.state.lock().expect("hub lock");
        (cached.as_ref())
            .filter(|(at, _)| at.elapsed() < STATE_FRESH)
            .map(|(_, v)| v.clone())
    }

    /// The SSE frame of `state`.
    pub fn state_frame(state: &Value) -> Bytes {
        Bytes::from(format!("event: state\ndata: {state}\n\n"))
    }

    /// The SSE frame of one event.
    pub fn event_frame(e: &EventRow) -> Bytes {
        let data = super::access::masked(serde_json::to_value(e).expect("an event is JSON"));
        Bytes::from(format!("id: {}\ndata: {data}\n\n", e.seq))
    }

    /// Deletes events older than the source's retention (`[serve]
    /// retention`; never those of a running run) now and every
    /// [`PRUNE_EVERY`], until `stop`.
    async fn prune(self: Arc<Self>, stop: CancellationToken) {
        let keep = self.source.retention;
        loop {
            match events::prune(&self.pool, keep).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    "serve: pruned {n} events older than {}",
                    crate::duration::format(keep)
                ),
                Err(e) => tracing::warn!("serve: pruning old events failed: {e}"),
            }
            tokio::select! {
                () = tokio::time::sleep(PRUNE_EVERY) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Follows the ledger until `stop`: see the module's documentation.
    pub async fn follow(self: Arc<Self>, stop: CancellationToken) {
        let states = tokio::spawn(self.clone().keep_state(stop.clone()));
        let pruning = tokio::spawn(self.clone().prune(stop.clone()));
        while !stop.is_cancelled() {
            let mut listener = match events::listen(&self.pool).await {
                Ok(l) => l,
                Err(e) => {
                    self.ledger_down(&e.to_string());
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = stop.cancelled() => break,
                    }
                }
            };
            // Whatever was written while no one listened.
            self.catch_up().await;
            loop {
                tokio::select! {
                    n = listener.try_recv() => match n {
                        Ok(Some(_)) => self.catch_up().await,
                        // Reconnected: notifications were lost meanwhile.
                        Ok(None) => self.catch_up().await,
                        Err(e) => { self.ledger_down(&e.to_string()); break }
                    },
                    () = tokio::time::sleep(POLL) => self.catch_up().await,
                    () = stop.cancelled() => break,
                }
            }
        }
        states.abort();
        pruning.abort();
    }

    /// Reads and sends every event after the last one sent.
    async fn catch_up(&self) {
        loop {
            let after = self.last();
            let rows = match events::after(&self.pool, after, PAGE).await {
                Ok(rows) => rows,
                Err(e) => return self.ledger_down(&e.to_string()),
            };
            self.ledger_up();
            let n = rows.len() as i64;
            for e in &rows {
                let _ = self.tx.send(Frame::Event {
                    seq: e.seq,
                    bytes: Hub::event_frame(e),
                });
                *self.last.lock().expect("hub lock") = e.seq;
            }
            if n > 0 {
                self.changed.notify_one();
            }
            if n < PAGE {
                return;
            }
        }
    }

    /// Sends the state again after events, at most every [`STATE_EVERY`].
    async fn keep_state(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = self.changed.notified() => {}
                () = stop.cancelled() => return,
            }
            *self.state.lock().expect("hub lock") = None;
            match self.state().await {
                Ok(v) => {
                    let _ = self.tx.send(Frame::Other(Hub::state_frame(&v)));
                }
                Err(e) => self.ledger_down(&e.to_string()),
            }
            tokio::time::sleep(STATE_EVERY).await;
        }
    }

    /// The ledger stopped answering: said once to every client.
    fn ledger_down(&self, why: &str) {
        let mut down = self.down_since.lock().expect("hub lock");
        if down.is_none() {
            let now = Utc::now();
            *down = Some(now);
            tracing::warn!("serve: the ledger does not answer: {why}");
            let data = serde_json::json!({"up": false, "since": now});
            let _ = (self.tx).send(Frame::Other(Bytes::from(format!(
                "event: ledger\ndata: {data}\n\n"
            ))));
        }
    }

    /// The ledger answers again.
    fn ledger_up(&self) {
        let mut down = self.down_since.lock().expect("hub lock");
        if down.take().is_some() {
            tracing::info!("serve: the ledger answers again");
            let data = serde_json::json!({"up": true});
            let _ = (self.tx).send(Frame::Other(Bytes::from(format!(
                "event: ledger\ndata: {data}\n\n"
            ))));
            self.changed.notify_one();
        }
    }
}
