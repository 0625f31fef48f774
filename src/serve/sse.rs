//! One client's `/events` stream (docs/serve.md#events): the events after
//! the number it names (`Last-Event-ID`, else `?after=N`, else none: from
//! now), read from the ledger, then the live ones from the hub, the
//! board's state after them, and a heartbeat comment every [`HEARTBEAT`].
//! A client that does not read is disconnected, never silently skipped:
//! its buffer holds [`CLIENT_BUFFER`] frames, and when it is full (or the
//! hub's backlog passed it by) its stream ends; the page reconnects and
//! asks again from its last number.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame as BodyFrame, SizeHint};
use tokio::sync::{broadcast, mpsc};

use super::hub::{Frame, Hub, PAGE};
use crate::ledger::events;

/// The interval of the heartbeat comment (`: heartbeat`).
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// Frames a client's own buffer holds before it counts as too slow.
pub const CLIENT_BUFFER: usize = 256;
/// How long a replay may wait for a client to take a frame.
const REPLAY_WAIT: Duration = Duration::from_secs(10);

/// Where a client's stream starts, from its request.
///
/// # Errors
/// A `Last-Event-ID` or `after` that is not a sequence number, or one past
/// the ledger's last event, as the text of a 400 answer.
pub fn start_after(
    last_event_id: Option<&str>,
    after: Option<&str>,
    last: i64,
) -> Result<Option<i64>, String> {
    let (given, name) = match (last_event_id, after) {
        (Some(v), _) => (v, "Last-Event-ID"),
        (None, Some(v)) => (v, "after"),
        (None, None) => return Ok(None),
    };
    let n: i64 = given.trim().parse().map_err(|_| {
        format!("{name} must be an event's sequence number (0 or more), not {given:?}")
    })?;
    if n < 0 {
        return Err(format!("{name} must be 0 or more, not {n}"));
    }
    if n > last {
        return Err(format!(
            "{name} {n} is past the ledger's last event ({last}): this ledger never sent it; load the board again"
        ));
    }
    Ok(Some(n))
}

/// The body of a client's stream: what its task puts in its buffer.
pub struct SseBody {
    rx: mpsc::Receiver<Bytes>,
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, Self::Error>>> {
        self.rx
            .poll_recv(cx)
            .map(|b| b.map(|b| Ok(BodyFrame::data(b))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Starts a client's stream after `after` (`None`: from the hub's last
/// event); its task ends when the client goes or falls behind.
pub fn stream(hub: Arc<Hub>, after: Option<i64>) -> SseBody {
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    // Subscribed before the replay reads the ledger: nothing falls between.
    let live = hub.subscribe();
    let after = after.unwrap_or_else(|| hub.last());
    tokio::spawn(async move {
        if let Some(sent) = replay(&hub, after, &tx).await {
            forward(live, sent, &tx).await;
        }
    });
    SseBody { rx }
}

/// Sends the events after `after` from the ledger, then the ledger's state
/// and the state; returns the last number sent, `None` when the client
/// went or the ledger failed (the stream ends; the page retries).
async fn replay(hub: &Hub, mut after: i64, tx: &mpsc::Sender<Bytes>) -> Option<i64> {
    let put = |b: Bytes| async move { tx.send_timeout(b, REPLAY_WAIT).await.is_ok() };
    if !put(Bytes::from_static(b"retry: 2000\n\n")).await {
        return None;
    }
    loop {
        let rows = events::after(&hub.pool, after, PAGE).await.ok()?;
        for e in &rows {
            if !put(Hub::event_frame(e)).await {
                return None;
            }
            after = e.seq;
        }
        if (rows.len() as i64) < PAGE {
            break;
        }
    }
    if let Some(since) = hub.down_since() {
        let data = serde_json::json!({"up": false, "since": since});
        put(Bytes::from(format!("event: ledger\ndata: {data}\n\n"))).await;
    }
    let state = hub.state().await.ok()?;
    put(Hub::state_frame(&state)).await.then_some(after)
}

/// Forwards the hub's frames (events numbered after `sent` only) and the
/// heartbeat, until the client goes or falls behind.
async fn forward(mut live: broadcast::Receiver<Frame>, mut sent: i64, tx: &mpsc::Sender<Bytes>) {
    let mut beat = tokio::time::interval(HEARTBEAT);
    beat.tick().await;
    loop {
        let bytes = tokio::select! {
            f = live.recv() => match f {
                Ok(Frame::Event { seq, .. }) if seq <= sent => continue,
                Ok(Frame::Event { seq, bytes }) => { sent = seq; bytes }
                Ok(Frame::Other(bytes)) => bytes,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::info!("serve: a client fell {n} frames behind: disconnected");
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = beat.tick() => Bytes::from_static(b": heartbeat\n\n"),
            () = tx.closed() => return,
        };
        match tx.try_send(bytes) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::info!("serve: a client stopped reading: disconnected (last sent {sent})");
                return;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::start_after;

    #[test]
    fn a_start_is_a_number_up_to_the_last_event() {
        assert_eq!(start_after(None, None, 5), Ok(None));
        assert_eq!(start_after(Some("3"), Some("1"), 5), Ok(Some(3)));
        assert_eq!(start_after(None, Some("5"), 5), Ok(Some(5)));
        assert!(
            start_after(Some("abc"), None, 5)
                .unwrap_err()
                .contains("Last-Event-ID must be")
        );
        assert!(
            start_after(None, Some("-1"), 5)
                .unwrap_err()
                .contains("0 or more")
        );
        assert!(
            start_after(None, Some("6"), 5)
                .unwrap_err()
                .contains("past the ledger's last event (5)")
        );
    }
}
