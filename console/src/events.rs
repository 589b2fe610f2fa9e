//! The live event stream (`GET /console/api/events`): `event: changed` to open pages
//! whenever the console's memory (`view.rs`) changed, at most
//! `MCPT_CONSOLE_MAX_STREAMS` at once. `api.rs` routes to it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::{Response, StatusCode};
use mcp_tasks_shared::body::{self as reply, ResBody};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::{Console, State, api};

/// How often an idle event stream sends a comment (keeps proxies from closing it).
const KEEPALIVE: Duration = Duration::from_secs(15);

/// One open event stream, counted while it lives.
struct StreamSlot(Arc<AtomicUsize>);

impl StreamSlot {
    /// A slot, unless `max` streams are open.
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<StreamSlot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()?;
        Some(StreamSlot(open.clone()))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `GET /console/api/events`: `event: changed` whenever the console's memory changed
/// (at most every refresh, plus each followed task's changes), until the gateway drains.
pub(crate) fn events(state: &Arc<State>, console: &Console) -> Response<ResBody> {
    let max = console.config.max_streams;
    let Some(slot) = StreamSlot::take(&console.streams, max) else {
        return api::error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "this gateway serves at most {max} open console pages \
                 (MCPT_CONSOLE_MAX_STREAMS); close some, then reload"
            ),
        );
    };
    let changes = console.view.changes();
    let end = state.streams_end.clone();
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(stream(slot, changes, end, tx));
    reply::sse(rx)
}

/// Feed one stream's frames into `tx` until the page goes away or the gateway drains;
/// `_slot` is given back when it ends.
async fn stream(
    _slot: StreamSlot,
    mut changes: watch::Receiver<u64>,
    end: CancellationToken,
    tx: mpsc::Sender<Bytes>,
) {
    if tx
        .send(Bytes::from_static(b"retry: 3000\n\n"))
        .await
        .is_err()
    {
        return;
    }
    loop {
        let frame = tokio::select! {
            () = end.cancelled() => return,
            () = tx.closed() => return,
            changed = changes.changed() => match changed {
                Ok(()) => {
                    let generation = *changes.borrow_and_update();
                    Bytes::from(format!("event: changed\ndata: {generation}\n\n"))
                }
                Err(_) => return,
            },
            () = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keep-alive\n\n"),
        };
        if tx.send(frame).await.is_err() {
            return;
        }
    }
}
