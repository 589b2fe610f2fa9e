//! Task events over Redis pub/sub: one subscriber connection per process, shared by every
//! watcher (listen streams, synchronous waits, running jobs).
//!
//! A [`Watch`] resolves only after Redis confirmed the subscription, so a caller that reads
//! the task's snapshot *after* `watch()` returned misses no change (T-50). Pub/sub is only a
//! latency path: when the connection drops (or stops answering pings) the hub reconnects
//! with backoff, resubscribes and tells every watcher [`TaskEvent::Resync`] — re-read the
//! task. A watcher too slow to keep up is told the same, at once, even if no further event
//! ever comes for its task; events still buffered behind that are older than what the
//! re-read returns, and watchers drop them by `version`.
//!
//! In Redis Cluster the channels are shard channels (`SSUBSCRIBE`, published with
//! `SPUBLISH` by the scripts), each held by the primary owning its slot: the hub's
//! connection is a RESP3 cluster connection that subscribes each slot's channels on its
//! node and hands the messages of every node to this loop. When a node's connection drops
//! the hub starts over on a new cluster connection, as on a reconnect of one Redis; when a
//! slot moves (Redis drops its shard channels' subscriptions) it subscribes those channels
//! again. Either way the watchers concerned are told [`TaskEvent::Resync`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{Store, StoreError, StoreResult, TaskRecord};

mod connection;
mod subscriber;

use subscriber::run;

/// What a watcher receives.
#[derive(Debug, Clone)]
pub enum TaskEvent {
    /// The task's full state after a change (compare `version` to drop what you have seen).
    Changed(Arc<TaskRecord>),
    /// Events may have been missed (reconnect or a slow watcher): re-read the task.
    Resync,
}

/// Buffered events per watcher before it is told to resync instead.
const WATCH_BUFFER: usize = 64;
/// Bound on connecting, subscribing and pinging; past it the connection is replaced.
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an idle subscriber connection is pinged (catches half-open connections).
const PING_EVERY: Duration = Duration::from_secs(10);

enum Cmd {
    Watch {
        task: String,
        sub: u64,
        tx: mpsc::Sender<TaskEvent>,
        lag: Arc<Lag>,
        done: oneshot::Sender<StoreResult<()>>,
    },
    Unwatch {
        task: String,
        sub: u64,
    },
}

/// Set when a watcher must re-read; wakes it even if no event follows.
#[derive(Debug, Default)]
struct Lag {
    resync: AtomicBool,
    wake: Notify,
}

impl Lag {
    fn raise(&self) {
        self.resync.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }
}

/// Handle to the process's event hub. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EventHub {
    cmd: mpsc::UnboundedSender<Cmd>,
    /// Watch ids are chosen here, so a watch abandoned before its confirmation can still
    /// be taken back (see [`Pending`]).
    next_sub: Arc<std::sync::atomic::AtomicU64>,
}

/// A watch sent to the hub and not yet confirmed: if the caller goes away meanwhile (its
/// future dropped), this takes it back, so no subscription outlives its watcher.
struct Pending {
    cmd: mpsc::UnboundedSender<Cmd>,
    task: Option<String>,
    sub: u64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            let _ = self.cmd.send(Cmd::Unwatch {
                task,
                sub: self.sub,
            });
        }
    }
}

/// A subscription to one task's events; unsubscribes on drop.
#[derive(Debug)]
pub struct Watch {
    rx: mpsc::Receiver<TaskEvent>,
    lag: Arc<Lag>,
    task: String,
    sub: u64,
    cmd: mpsc::UnboundedSender<Cmd>,
}

impl Watch {
    /// The next event; `None` once the hub stopped.
    pub async fn recv(&mut self) -> Option<TaskEvent> {
        loop {
            if self.lag.resync.swap(false, Ordering::SeqCst) {
                return Some(TaskEvent::Resync);
            }
            tokio::select! {
                biased;
                () = self.lag.wake.notified() => {}
                ev = self.rx.recv() => return ev,
            }
        }
    }

    /// The watched task id.
    pub fn task_id(&self) -> &str {
        &self.task
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.cmd.send(Cmd::Unwatch {
            task: std::mem::take(&mut self.task),
            sub: self.sub,
        });
    }
}

impl EventHub {
    /// Start the hub's connection loop; it ends when `shutdown` is cancelled.
    pub fn start(store: &Store, shutdown: CancellationToken) -> EventHub {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(
            store.backend().clone(),
            store.layout().clone(),
            rx,
            shutdown,
        ));
        EventHub {
            cmd: tx,
            next_sub: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    /// Subscribe to `task_id`'s events; returns once Redis confirmed the subscription.
    ///
    /// # Errors
    /// Redis unavailable, or the hub stopped.
    pub async fn watch(&self, task_id: &str) -> StoreResult<Watch> {
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let lag = Arc::new(Lag::default());
        let (done, confirmed) = oneshot::channel();
        let stopped = || StoreError::Corrupt("event hub stopped".into());
        let sub = self.next_sub.fetch_add(1, Ordering::Relaxed) + 1;
        self.cmd
            .send(Cmd::Watch {
                task: task_id.to_owned(),
                sub,
                tx,
                lag: lag.clone(),
                done,
            })
            .map_err(|_| stopped())?;
        // From here until the Watch exists, dropping this future unwatches.
        let mut pending = Pending {
            cmd: self.cmd.clone(),
            task: Some(task_id.to_owned()),
            sub,
        };
        confirmed.await.map_err(|_| stopped())??;
        let task = pending.task.take().unwrap_or_default();
        Ok(Watch {
            rx,
            lag,
            task,
            sub,
            cmd: self.cmd.clone(),
        })
    }
}
