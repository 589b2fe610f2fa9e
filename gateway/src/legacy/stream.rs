//! The `GET` stream of a 2025 session: `notifications/tasks/status` for the tasks the session
//! created as tasks (2025-11-25), keep-alive comments, nothing else (every other server
//! message travels on the stream of the request it belongs to).
//!
//! The session's tasks are a Redis set any gateway adds to; the stream re-reads it every
//! [`SESSION_POLL`], so a task created through another gateway joins within that time, and
//! the same read restarts the session's idle timeout and notices a session that ended.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mcp_tasks_store::TaskRecord;
use mcp_tasks_store::events::TaskEvent;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::SESSION_IDLE;
use super::session::Session;
use crate::handlers::listen::ListenerSlot;
use crate::reply::sse_event;
use crate::state::State;

/// How often the stream re-reads the session's task set.
const SESSION_POLL: Duration = Duration::from_secs(2);

/// An SSE comment at least this often.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Open the stream; it ends when the client leaves, the session ends, or the gateway drains.
pub(super) fn open(
    state: Arc<State>,
    session: Session,
    slot: ListenerSlot,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(32);
    tokio::spawn(async move {
        run(state, session, tx).await;
        drop(slot);
    });
    rx
}

struct Streamer {
    state: Arc<State>,
    session: Session,
    tx: mpsc::Sender<Bytes>,
    events: mpsc::Sender<(String, TaskEvent)>,
    /// Task → (its forwarder, the last version sent).
    watching: HashMap<String, (JoinHandle<()>, u64)>,
    /// Tasks this stream saw end.
    done: HashSet<String>,
}

impl Streamer {
    /// Watch the session's tasks not watched yet; forget those that no longer exist.
    async fn refresh(&mut self) -> Result<(), ()> {
        let ids = match self
            .state
            .store
            .session_tasks(&self.session.id, SESSION_IDLE)
            .await
        {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the session's tasks; retrying");
                return Ok(());
            }
        };
        let mut gone = Vec::new();
        for id in ids {
            if self.watching.contains_key(&id) || self.done.contains(&id) {
                continue;
            }
            let Ok(mut watch) = self.state.hub.watch(&id).await else {
                continue;
            };
            let events = self.events.clone();
            let task = id.clone();
            let forwarder = tokio::spawn(async move {
                while let Some(ev) = watch.recv().await {
                    if events.send((task.clone(), ev)).await.is_err() {
                        break;
                    }
                }
            });
            self.watching.insert(id.clone(), (forwarder, 0));
            match self.state.store.get_task(&id, &self.session.owner).await {
                Ok(Some(rec)) => self.send(&rec).await?,
                Ok(None) => {
                    self.stop(&id);
                    gone.push(id);
                }
                Err(e) => tracing::warn!(task.id = %id, error = %e, "cannot read a session task"),
            }
        }
        if let Err(e) = self
            .state
            .store
            .forget_session_tasks(&self.session.id, &gone)
            .await
        {
            tracing::debug!(error = %e, "cannot forget expired session tasks");
        }
        Ok(())
    }

    fn stop(&mut self, id: &str) {
        if let Some((forwarder, _)) = self.watching.remove(id) {
            forwarder.abort();
        }
        self.done.insert(id.to_owned());
    }

    /// Send the task's state if it is newer than what was sent; `Err` when the client left.
    async fn send(&mut self, rec: &TaskRecord) -> Result<(), ()> {
        let Some((_, last)) = self.watching.get_mut(&rec.id) else {
            return Ok(());
        };
        if rec.version <= *last {
            return Ok(());
        }
        *last = rec.version;
        let task = rec.to_detailed();
        let params = super::tasks::task_json(&task);
        let note =
            json!({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": params});
        self.tx
            .send(sse_event(note.to_string().as_bytes()))
            .await
            .map_err(drop)?;
        if task.status.is_terminal() {
            self.stop(&rec.id);
        }
        Ok(())
    }

    async fn on_event(&mut self, id: String, event: TaskEvent) -> Result<(), ()> {
        let rec = match event {
            TaskEvent::Changed(rec) => Arc::unwrap_or_clone(rec),
            TaskEvent::Resync => match self.state.store.get_task(&id, &self.session.owner).await {
                Ok(Some(rec)) => rec,
                Ok(None) => {
                    self.stop(&id);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(task.id = %id, error = %e, "cannot re-read a session task");
                    return Ok(());
                }
            },
        };
        self.send(&rec).await
    }
}

async fn run(state: Arc<State>, session: Session, tx: mpsc::Sender<Bytes>) {
    let (events, mut incoming) = mpsc::channel(256);
    let mut me = Streamer {
        state: state.clone(),
        session,
        tx,
        events,
        watching: HashMap::new(),
        done: HashSet::new(),
    };
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.tick().await;
    let mut poll = tokio::time::interval(SESSION_POLL);
    loop {
        let step = tokio::select! {
            () = me.tx.closed() => break,
            () = state.streams_end.cancelled() => break,
            _ = keepalive.tick() => me.tx.send(Bytes::from_static(b": keepalive\n\n")).await.map_err(drop),
            _ = poll.tick() => match state.store.touch_session(&me.session.id, &me.session.owner, SESSION_IDLE).await {
                Ok(None) => break,
                _ => me.refresh().await,
            },
            Some((id, event)) = incoming.recv() => me.on_event(id, event).await,
        };
        if step.is_err() {
            break;
        }
    }
    for (_, (forwarder, _)) in me.watching.drain() {
        forwarder.abort();
    }
    tracing::debug!("session stream closed");
}
