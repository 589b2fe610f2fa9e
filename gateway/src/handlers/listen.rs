//! `subscriptions/listen` with task notifications (base-protocol.md §12,
//! tasks-extension.md §12; T-46…T-50).
//!
//! Order on the stream: subscribe every requested task (confirmed by Redis), read their
//! snapshots, acknowledge the ids that exist and belong to the caller, send each snapshot,
//! then every newer version as it is published — never an older or equal one, nothing after
//! a terminal state. A Redis reconnect makes the stream re-read and send what changed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mcp_tasks_protocol::jsonrpc::{Id, Notification, result_bytes};
use mcp_tasks_protocol::notifications::{
    self, AcknowledgedParams, Honoured, TaskNotificationParams, subscription_meta,
};
use mcp_tasks_protocol::params::{ListenParams, Member};
use mcp_tasks_protocol::results::ListenResult;
use mcp_tasks_store::events::{TaskEvent, Watches};
use mcp_tasks_store::{TaskRecord, is_plausible_task_id};
use serde::Serialize;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{owner, require_tasks};
use crate::envelope::Request;
use crate::error::DispatchError;
use crate::reply::{Reply, sse_event, sse_stream};
use crate::state::State;

/// How long a listener's slot among its owner's open streams is held without renewal
/// (renewed every third of it; a gateway that dies frees its slots after this).
const LISTENER_HOLD: Duration = Duration::from_secs(60);

/// SSE comment sent on idle streams (B-15).
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Retry interval for re-reads that failed (Redis away).
const REREAD_RETRY: Duration = Duration::from_secs(1);

pub(crate) async fn listen(
    state: &Arc<State>,
    req: Request,
    params: ListenParams,
    accepts_sse: bool,
) -> Result<Reply, DispatchError> {
    let task_ids = requested_tasks(state, &req, params)?;
    if !accepts_sse {
        return Err(DispatchError::NotAcceptable(
            "subscriptions/listen answers with an SSE stream; the Accept header must allow text/event-stream".into(),
        ));
    }
    let slot = ListenerSlot::take(state, owner(&req)).await?;
    // Subscribe first, then read: no change between the two is lost (T-50). All the tasks
    // in one subscription: one command to Redis, one channel here.
    let mut watches = state.hub.watch_all(&task_ids).await?;
    let me = owner(&req);
    let snapshots = state.store.tasks().get_many(&task_ids, me).await?;
    let mut last_seen: HashMap<String, u64> = HashMap::new();
    let mut initial = Vec::new();
    for (id, snap) in task_ids.iter().zip(snapshots) {
        match snap.filter(|r| r.owner == me) {
            Some(rec) => {
                last_seen.insert(id.clone(), rec.version);
                initial.push(rec);
            }
            // Unknown, expired or foreign: left out of the ack silently (T-46).
            None => watches.remove(id),
        }
    }
    let ack = acknowledgement(&req.id, &initial)?;
    let mut stream = Stream::open(state, me, &req.id, last_seen, watches, &ack, slot);
    for rec in initial {
        stream.emit(&rec);
    }
    // The body is the stream itself: no task and no channel per listener, and nothing is
    // produced faster than the client reads (events wait in the hub's bounded buffer, and
    // a watcher that falls behind is told to re-read).
    let frames = futures_util::stream::unfold(stream, |mut stream| async move {
        let span = stream.span.clone();
        let frame = stream.next_frame().instrument(span).await?;
        Some((frame, stream))
    });
    Ok(Reply::Sse(sse_stream(frames)))
}

/// The task ids `params.notifications.taskIds` names, each once, leaving out those that
/// cannot be task ids (T-56; MCPT_MAX_LISTEN_TASKS).
fn requested_tasks(
    state: &State,
    req: &Request,
    params: ListenParams,
) -> Result<Vec<String>, DispatchError> {
    let filter = match params.notifications {
        Member::Valid(f) => f,
        _ => {
            return Err(DispatchError::InvalidParams(
                "params.notifications must be an object".into(),
            ));
        }
    };
    let mut task_ids: Vec<String> = Vec::new();
    if !filter.task_ids.is_present() {
        return Ok(task_ids);
    }
    require_tasks(req)?;
    let Member::Valid(ids) = &filter.task_ids else {
        return Err(DispatchError::InvalidParams(
            "notifications.taskIds must be an array of strings".into(),
        ));
    };
    // T-56; MCPT_MAX_LISTEN_TASKS.
    let most = state.config.limits.listen_tasks;
    if ids.len() > most {
        return Err(DispatchError::InvalidParams(format!(
            "notifications.taskIds names {} tasks; at most {most} are accepted (MCPT_MAX_LISTEN_TASKS)",
            ids.len()
        )));
    }
    for id in ids {
        let Some(id) = id.valid() else {
            return Err(DispatchError::InvalidParams(
                "notifications.taskIds must be an array of strings".into(),
            ));
        };
        if is_plausible_task_id(id) && !task_ids.iter().any(|t| t == id) {
            task_ids.push(id.to_owned());
        }
    }
    Ok(task_ids)
}

/// The acknowledgement naming the tasks that exist and are the caller's (T-46).
fn acknowledgement(subscription: &Id, honoured: &[TaskRecord]) -> Result<Vec<u8>, DispatchError> {
    let ack = Notification {
        jsonrpc: "2.0",
        method: notifications::ACKNOWLEDGED,
        params: AcknowledgedParams {
            meta: subscription_meta(subscription),
            notifications: Honoured {
                task_ids: honoured.iter().map(|r| r.id.as_str()).collect(),
            },
        },
    };
    serde_json::to_vec(&ack).map_err(|e| DispatchError::Internal(e.to_string()))
}

/// Counts a notification stream as open while alive.
struct OpenListener;

impl OpenListener {
    fn new() -> Self {
        mcp_tasks_shared::metrics::get().listeners_open.add(1, &[]);
        OpenListener
    }
}

impl Drop for OpenListener {
    fn drop(&mut self) {
        mcp_tasks_shared::metrics::get().listeners_open.add(-1, &[]);
    }
}

/// One of the owner's open-stream slots (`MCPT_LIMIT_LISTENERS`), renewed while the
/// stream lives and given back when it ends.
pub(crate) struct ListenerSlot {
    renew: Option<tokio::task::JoinHandle<()>>,
    release: Option<(mcp_tasks_store::Store, String, String)>,
}

impl ListenerSlot {
    pub(crate) async fn take(state: &State, owner: &str) -> Result<ListenerSlot, DispatchError> {
        let most = state.config.limits.listeners;
        if most == 0 {
            return Ok(ListenerSlot {
                renew: None,
                release: None,
            });
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        if !state
            .store
            .limits()
            .hold_listener(owner, &id, most, LISTENER_HOLD)
            .await?
        {
            return Err(DispatchError::Limited {
                message: format!(
                    "Too many open notification streams: at most {most} per caller (MCPT_LIMIT_LISTENERS); close one first"
                ),
                limit: "listeners",
                max: u64::from(most),
            });
        }
        let (store, owner) = (state.store.clone(), owner.to_owned());
        let renew = {
            let (store, owner, id) = (store.clone(), owner.clone(), id.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(LISTENER_HOLD / 3);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    // Renewal never refuses a slot already held.
                    if let Err(e) = store
                        .limits()
                        .hold_listener(&owner, &id, 0, LISTENER_HOLD)
                        .await
                    {
                        tracing::debug!(error = %e, "cannot renew the listener slot");
                    }
                }
            })
        };
        Ok(ListenerSlot {
            renew: Some(renew),
            release: Some((store, owner, id)),
        })
    }
}

impl Drop for ListenerSlot {
    fn drop(&mut self) {
        if let Some(renew) = self.renew.take() {
            renew.abort();
        }
        if let Some((store, owner, id)) = self.release.take() {
            tokio::spawn(async move {
                if let Err(e) = store.limits().release_listener(&owner, &id).await {
                    tracing::debug!(error = %e, "cannot release the listener slot; it lapses");
                }
            });
        }
    }
}

/// An open listen stream: what it has sent, what it watches, and the frames ready to go.
/// It is the response body; dropping it (the client left) frees its slot and watches.
struct Stream {
    state: Arc<State>,
    /// The caller's owner digest (its tasks' keys).
    owner: String,
    subscription: Id,
    /// Task id → last version sent; removed once terminal.
    last_seen: HashMap<String, u64>,
    /// The tasks still watched: those not yet terminal.
    watches: Watches,
    /// Tasks whose re-read failed, retried every [`REREAD_RETRY`].
    unread: HashSet<String>,
    /// Frames ready to send, oldest first: the ack and snapshots, then what an event gave.
    out: VecDeque<Bytes>,
    keepalive: tokio::time::Interval,
    retry: tokio::time::Interval,
    /// `false` once the hub stopped (the process is ending).
    hub: bool,
    /// The gateway ended the stream: what is in `out` is the last of it.
    ended: bool,
    span: tracing::Span,
    _slot: ListenerSlot,
    _open: OpenListener,
}

impl Stream {
    /// A stream that starts with the acknowledgement `ack`, having sent nothing else yet.
    fn open(
        state: &Arc<State>,
        owner: &str,
        subscription: &Id,
        last_seen: HashMap<String, u64>,
        watches: Watches,
        ack: &[u8],
        slot: ListenerSlot,
    ) -> Stream {
        let span =
            tracing::info_span!("listen", listen.tasks = last_seen.len(), rpc.id = %subscription);
        Stream {
            state: state.clone(),
            owner: owner.to_owned(),
            subscription: subscription.clone(),
            last_seen,
            watches,
            unread: HashSet::new(),
            out: VecDeque::from([sse_event(ack)]),
            keepalive: tokio::time::interval_at(Instant::now() + KEEPALIVE, KEEPALIVE),
            retry: {
                // A re-read that first fails hours in waits a second between tries, rather
                // than catching up every tick missed since the stream opened.
                let mut retry = tokio::time::interval(REREAD_RETRY);
                retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                retry
            },
            hub: true,
            ended: false,
            span,
            _slot: slot,
            _open: OpenListener::new(),
        }
    }

    fn push_json<T: Serialize>(&mut self, message: &T) {
        if let Ok(bytes) = serde_json::to_vec(message) {
            self.out.push_back(sse_event(&bytes));
        }
    }

    /// Send `rec` if it is newer than what this stream sent.
    fn send_task(&mut self, rec: &TaskRecord) {
        match self.last_seen.get(&rec.id) {
            Some(last) if rec.version > *last => self.emit(rec),
            _ => {}
        }
    }

    /// Send `rec`; stop watching its task once it is terminal.
    fn emit(&mut self, rec: &TaskRecord) {
        let task = rec.to_detailed();
        let note = Notification {
            jsonrpc: "2.0",
            method: notifications::TASKS,
            params: TaskNotificationParams {
                task: &task,
                meta: subscription_meta(&self.subscription),
            },
        };
        self.push_json(&note);
        // Terminal as rendered: an unfinished task past its TTL reads as failed, and its
        // stored expiry (written later) must not be sent a second time.
        if task.status.is_terminal() {
            self.last_seen.remove(&rec.id);
            self.watches.remove(&rec.id);
        } else {
            self.last_seen.insert(rec.id.clone(), rec.version);
        }
    }

    /// The next frame: the acknowledgement and the snapshots first, then every change and
    /// keep-alive until the gateway ends the stream (`None` after its last frame).
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.out.pop_front() {
                // A listen on many tasks queues a snapshot each; an idle stream keeps none
                // of that room.
                if self.out.is_empty() && self.out.capacity() > 4 {
                    self.out = VecDeque::new();
                }
                return Some(frame);
            }
            if self.ended {
                return None;
            }
            tokio::select! {
                () = self.state.streams_end.cancelled() => {
                    // Server-initiated end: the listen response first (B-40).
                    let done = ListenResult { result_type: "complete", meta: subscription_meta(&self.subscription) };
                    self.out.push_back(sse_event(&result_bytes(&self.subscription, &done)));
                    self.ended = true;
                }
                _ = self.keepalive.tick() => return Some(Bytes::from_static(b": keep-alive\n\n")),
                // Once every watched task ended the stream only keeps alive.
                event = self.watches.recv(), if self.hub && !self.watches.is_empty() => match event {
                    None => self.hub = false,
                    // Boxed here and below: a stream idles in this function for hours, and
                    // what a re-read holds would otherwise be part of its state all along.
                    Some((id, event)) => Box::pin(self.on_event(id, event)).await,
                },
                _ = self.retry.tick(), if !self.unread.is_empty() => {
                    for id in std::mem::take(&mut self.unread) {
                        Box::pin(self.reread(&id)).await;
                    }
                }
            }
        }
    }

    /// A watched task changed (send it if newer) or may have (re-read it).
    async fn on_event(&mut self, id: Arc<str>, event: TaskEvent) {
        if !self.watches.contains(&id) {
            return;
        }
        match event {
            TaskEvent::Changed(rec) => self.send_task(&rec),
            TaskEvent::Resync => self.reread(&id).await,
        }
    }

    /// Re-read a task after events may have been missed; retried until Redis answers.
    async fn reread(&mut self, id: &str) {
        match self.state.store.tasks().get(id, &self.owner).await {
            Ok(Some(rec)) => self.send_task(&rec),
            Ok(None) => {
                self.last_seen.remove(id);
                self.watches.remove(id);
            }
            Err(e) => {
                tracing::warn!(task.id = %id, error = %e, "re-read failed; retrying");
                self.unread.insert(id.to_owned());
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _in = self.span.enter();
        tracing::debug!("listen stream closed");
    }
}
