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
use mcp_tasks_store::events::{TaskEvent, Watches};
use serde_json::json;
use tokio::sync::mpsc;

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
    /// The session's tasks not yet seen ended.
    watches: Watches,
    /// Task → the last version sent.
    sent: HashMap<String, u64>,
    /// Tasks this stream saw end (or gone), taken out of the session's set.
    done: HashSet<String>,
}

impl Streamer {
    /// Watch the session's tasks not watched yet, send their state, and take those that
    /// ended or no longer exist out of the session's set: a stream opened later reads only
    /// the tasks still running, each set of new tasks in one subscription and one pipeline.
    async fn refresh(&mut self) -> Result<(), ()> {
        let ids = match self
            .state
            .store
            .sessions()
            .tasks(&self.session.id, SESSION_IDLE)
            .await
        {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the session's tasks; retrying");
                return Ok(());
            }
        };
        let new: Vec<String> = ids
            .into_iter()
            .filter(|id| !self.watches.contains(id) && !self.done.contains(id))
            .collect();
        if !new.is_empty() {
            if let Err(e) = self.watches.add(&new).await {
                tracing::warn!(error = %e, "cannot watch the session's tasks; retrying");
                return Ok(());
            }
            match self
                .state
                .store
                .tasks()
                .get_many(&new, &self.session.owner)
                .await
            {
                Ok(records) => {
                    for (id, rec) in new.iter().zip(records) {
                        match rec {
                            Some(rec) => self.send(&rec).await?,
                            None => self.stop(id),
                        }
                    }
                }
                Err(e) => {
                    // Watched from now on; their state comes with their next change.
                    tracing::warn!(error = %e, "cannot read the session's new tasks");
                }
            }
        }
        let ended: Vec<String> = self.done.iter().cloned().collect();
        if !ended.is_empty() {
            match self
                .state
                .store
                .sessions()
                .forget_tasks(&self.session.id, &ended)
                .await
            {
                // Out of the set: never listed again, so no longer remembered here.
                Ok(()) => self.done.clear(),
                Err(e) => tracing::debug!(error = %e, "cannot forget ended session tasks"),
            }
        }
        Ok(())
    }

    fn stop(&mut self, id: &str) {
        self.watches.remove(id);
        self.sent.remove(id);
        self.done.insert(id.to_owned());
    }

    /// Send the task's state if it is newer than what was sent; `Err` when the client left.
    async fn send(&mut self, rec: &TaskRecord) -> Result<(), ()> {
        if !self.watches.contains(&rec.id) {
            return Ok(());
        }
        let last = self.sent.entry(rec.id.clone()).or_default();
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

    async fn on_event(&mut self, id: &str, event: TaskEvent) -> Result<(), ()> {
        if !self.watches.contains(id) {
            // Ended meanwhile: an event still in flight.
            return Ok(());
        }
        let rec = match event {
            TaskEvent::Changed(rec) => Arc::unwrap_or_clone(rec),
            TaskEvent::Resync => {
                match self.state.store.tasks().get(id, &self.session.owner).await {
                    Ok(Some(rec)) => rec,
                    Ok(None) => {
                        self.stop(id);
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(task.id = %id, error = %e, "cannot re-read a session task");
                        return Ok(());
                    }
                }
            }
        };
        self.send(&rec).await
    }
}

async fn run(state: Arc<State>, session: Session, tx: mpsc::Sender<Bytes>) {
    let watches = match state.hub.watch_all(&[]).await {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "session stream cannot watch tasks");
            return;
        }
    };
    let mut me = Streamer {
        state: state.clone(),
        session,
        tx,
        watches,
        sent: HashMap::new(),
        done: HashSet::new(),
    };
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.tick().await;
    let mut poll = tokio::time::interval(SESSION_POLL);
    // `false` once the hub stopped (the process is ending).
    let mut hub = true;
    loop {
        let step = tokio::select! {
            () = me.tx.closed() => break,
            () = state.streams_end.cancelled() => break,
            _ = keepalive.tick() => me.tx.send(Bytes::from_static(b": keepalive\n\n")).await.map_err(drop),
            _ = poll.tick() => match state.store.sessions().touch(&me.session.id, &me.session.owner, SESSION_IDLE).await {
                Ok(None) => break,
                _ => me.refresh().await,
            },
            event = me.watches.recv(), if hub && !me.watches.is_empty() => match event {
                None => {
                    hub = false;
                    Ok(())
                }
                Some((id, event)) => me.on_event(&id, event).await,
            },
        };
        if step.is_err() {
            break;
        }
    }
    tracing::debug!("session stream closed");
}
