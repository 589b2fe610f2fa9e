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
use std::sync::atomic::Ordering;
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

/// An event as the hub hands it over: the task and its state after a change.
type Delivery = (Arc<str>, Arc<TaskRecord>);

/// Buffered events per watcher before it is told to resync instead.
const WATCH_BUFFER: usize = 64;
/// Bound on connecting, subscribing and pinging; past it the connection is replaced.
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an idle subscriber connection is pinged (catches half-open connections).
const PING_EVERY: Duration = Duration::from_secs(10);

enum Cmd {
    Watch {
        tasks: Vec<Arc<str>>,
        sub: u64,
        tx: mpsc::Sender<Delivery>,
        lag: Arc<Lag>,
        done: oneshot::Sender<StoreResult<()>>,
    },
    Unwatch {
        tasks: Vec<Arc<str>>,
        sub: u64,
    },
}

/// The tasks whose events a watcher missed; wakes it even if no event follows.
#[derive(Debug, Default)]
struct Lag {
    lagged: std::sync::Mutex<Vec<Arc<str>>>,
    wake: Notify,
}

impl Lag {
    fn raise(&self, task: &Arc<str>) {
        self.lagged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(task.clone());
        self.wake.notify_one();
    }

    /// The tasks raised since the last call, each once.
    fn take(&self) -> Vec<Arc<str>> {
        let mut lagged = std::mem::take(
            &mut *self
                .lagged
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        lagged.sort_unstable();
        lagged.dedup();
        lagged
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
    tasks: Vec<Arc<str>>,
    sub: u64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.tasks.is_empty() {
            let _ = self.cmd.send(Cmd::Unwatch {
                tasks: std::mem::take(&mut self.tasks),
                sub: self.sub,
            });
        }
    }
}

/// What a watch holds to add tasks and take them back: one id, one channel, one lag for
/// all its tasks.
#[derive(Debug)]
struct Line {
    cmd: mpsc::UnboundedSender<Cmd>,
    sub: u64,
    tx: mpsc::Sender<Delivery>,
    lag: Arc<Lag>,
}

impl Line {
    /// Send `tasks` to the hub and wait for Redis to confirm them.
    async fn watch(&self, tasks: Vec<Arc<str>>) -> StoreResult<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let (done, confirmed) = oneshot::channel();
        let stopped = || StoreError::Corrupt("event hub stopped".into());
        self.cmd
            .send(Cmd::Watch {
                tasks: tasks.clone(),
                sub: self.sub,
                tx: self.tx.clone(),
                lag: self.lag.clone(),
                done,
            })
            .map_err(|_| stopped())?;
        // From here until confirmed, dropping this future unwatches.
        let mut pending = Pending {
            cmd: self.cmd.clone(),
            tasks,
            sub: self.sub,
        };
        let confirmed = confirmed.await.map_err(|_| stopped())?;
        // Confirmed, or refused and taken out by the hub: nothing to take back.
        pending.tasks.clear();
        confirmed
    }

    fn unwatch(&self, tasks: Vec<Arc<str>>) {
        if !tasks.is_empty() {
            let _ = self.cmd.send(Cmd::Unwatch {
                tasks,
                sub: self.sub,
            });
        }
    }
}

/// A subscription to one task's events; unsubscribes on drop.
#[derive(Debug)]
pub struct Watch {
    rx: mpsc::Receiver<Delivery>,
    line: Line,
    task: Arc<str>,
}

impl Watch {
    /// The next event; `None` once the hub stopped.
    pub async fn recv(&mut self) -> Option<TaskEvent> {
        loop {
            if !self.line.lag.take().is_empty() {
                return Some(TaskEvent::Resync);
            }
            tokio::select! {
                biased;
                () = self.line.lag.wake.notified() => {}
                ev = self.rx.recv() => return ev.map(|(_, rec)| TaskEvent::Changed(rec)),
            }
        }
    }

    /// The watched task id.
    pub fn task_id(&self) -> &str {
        &self.task
    }

    /// Make the next [`Watch::recv`] a [`TaskEvent::Resync`]: for a watcher of a task that
    /// existed before its watch (a keyed call's retry), so it reads where the task stands.
    pub fn resync(&self) {
        self.line.lag.raise(&self.task);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.line.unwatch(vec![self.task.clone()]);
    }
}

/// A subscription to the events of many tasks, delivered on one channel: what a stream
/// watching hundreds of tasks holds, at a few hundred bytes a task (no channel or forwarding
/// task per task). Tasks can be added and taken out; all are unsubscribed on drop.
#[derive(Debug)]
pub struct Watches {
    rx: mpsc::Receiver<Delivery>,
    line: Line,
    tasks: std::collections::HashSet<Arc<str>>,
    /// Tasks told to resync and not yet returned by `recv`.
    resync: Vec<Arc<str>>,
}

/// Buffered events for a [`Watches`] before its lagging tasks are told to resync instead.
const WATCHES_BUFFER: usize = 256;

impl Watches {
    /// Watch `tasks` too (those already watched are skipped); returns once Redis confirmed
    /// the subscriptions, so a snapshot read after it misses no change (T-50).
    ///
    /// # Errors
    /// Redis unavailable, or the hub stopped; the new tasks are then not watched.
    pub async fn add(&mut self, tasks: &[String]) -> StoreResult<()> {
        let mut new: Vec<Arc<str>> = Vec::new();
        for task in tasks {
            if !self.tasks.contains(task.as_str()) && !new.iter().any(|t| **t == **task) {
                new.push(Arc::from(task.as_str()));
            }
        }
        self.line.watch(new.clone()).await?;
        self.tasks.extend(new);
        Ok(())
    }

    /// Stop watching `task` (it ended, or is gone).
    pub fn remove(&mut self, task: &str) {
        if let Some(task) = self.tasks.take(task) {
            self.line.unwatch(vec![task]);
        }
    }

    /// Whether `task` is watched.
    pub fn contains(&self, task: &str) -> bool {
        self.tasks.contains(task)
    }

    /// How many tasks are watched.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no task is watched.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The next event of a watched task; `None` once the hub stopped. Events of a task
    /// taken out may still arrive (check with [`Watches::contains`]).
    pub async fn recv(&mut self) -> Option<(Arc<str>, TaskEvent)> {
        loop {
            if let Some(task) = self.resync.pop() {
                return Some((task, TaskEvent::Resync));
            }
            self.resync = self.line.lag.take();
            if !self.resync.is_empty() {
                continue;
            }
            tokio::select! {
                biased;
                () = self.line.lag.wake.notified() => {}
                ev = self.rx.recv() => return ev.map(|(task, rec)| (task, TaskEvent::Changed(rec))),
            }
        }
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        self.line.unwatch(self.tasks.drain().collect());
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

    fn line(&self, buffer: usize) -> (Line, mpsc::Receiver<Delivery>) {
        let (tx, rx) = mpsc::channel(buffer);
        let line = Line {
            cmd: self.cmd.clone(),
            sub: self.next_sub.fetch_add(1, Ordering::Relaxed) + 1,
            tx,
            lag: Arc::new(Lag::default()),
        };
        (line, rx)
    }

    /// Subscribe to `task_id`'s events; returns once Redis confirmed the subscription.
    ///
    /// # Errors
    /// Redis unavailable, or the hub stopped.
    pub async fn watch(&self, task_id: &str) -> StoreResult<Watch> {
        let (line, rx) = self.line(WATCH_BUFFER);
        let task: Arc<str> = Arc::from(task_id);
        line.watch(vec![task.clone()]).await?;
        Ok(Watch { rx, line, task })
    }

    /// Subscribe to the events of `tasks`, all in one subscription command; returns once
    /// Redis confirmed them. Add more with [`Watches::add`].
    ///
    /// # Errors
    /// Redis unavailable, or the hub stopped.
    pub async fn watch_all(&self, tasks: &[String]) -> StoreResult<Watches> {
        let (line, rx) = self.line(WATCHES_BUFFER);
        let mut watches = Watches {
            rx,
            line,
            tasks: std::collections::HashSet::new(),
            resync: Vec::new(),
        };
        watches.add(tasks).await?;
        Ok(watches)
    }
}
