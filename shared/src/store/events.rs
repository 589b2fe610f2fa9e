//! Task events over Redis pub/sub: one subscriber connection per process, shared by every
//! watcher (listen streams, synchronous waits, running jobs).
//!
//! A [`Watch`] resolves only after Redis confirmed the subscription, so a caller that reads
//! the task's snapshot *after* `watch()` returned misses no change (T-50). Pub/sub is only a
//! latency path: when the connection drops the hub reconnects with backoff, resubscribes and
//! sends every watcher [`TaskEvent::Resync`], telling it to re-read the task.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Store, StoreError, StoreResult, TaskRecord, keys};

/// What a watcher receives.
#[derive(Debug, Clone)]
pub enum TaskEvent {
    /// The task's full state after a change (compare `version` to drop what you have seen).
    Changed(std::sync::Arc<TaskRecord>),
    /// Events may have been missed (reconnect or a slow watcher): re-read the task.
    Resync,
}

/// Buffered events per watcher before it is told to resync instead.
const WATCH_BUFFER: usize = 64;

enum Cmd {
    Watch {
        task: String,
        tx: mpsc::Sender<TaskEvent>,
        done: oneshot::Sender<StoreResult<u64>>,
    },
    Unwatch {
        task: String,
        sub: u64,
    },
}

/// Handle to the process's event hub. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EventHub {
    cmd: mpsc::UnboundedSender<Cmd>,
}

/// A subscription to one task's events; unsubscribes on drop.
#[derive(Debug)]
pub struct Watch {
    rx: mpsc::Receiver<TaskEvent>,
    task: String,
    sub: u64,
    cmd: mpsc::UnboundedSender<Cmd>,
}

impl Watch {
    /// The next event; `None` once the hub stopped.
    pub async fn recv(&mut self) -> Option<TaskEvent> {
        self.rx.recv().await
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
        let client = store.client().clone();
        tokio::spawn(run(client, rx, shutdown));
        EventHub { cmd: tx }
    }

    /// Subscribe to `task_id`'s events; returns once Redis confirmed the subscription.
    ///
    /// # Errors
    /// Redis unavailable, or the hub stopped.
    pub async fn watch(&self, task_id: &str) -> StoreResult<Watch> {
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let (done, confirmed) = oneshot::channel();
        let stopped = || StoreError::Corrupt("event hub stopped".into());
        self.cmd
            .send(Cmd::Watch {
                task: task_id.to_owned(),
                tx,
                done,
            })
            .map_err(|_| stopped())?;
        let sub = confirmed.await.map_err(|_| stopped())??;
        Ok(Watch {
            rx,
            task: task_id.to_owned(),
            sub,
            cmd: self.cmd.clone(),
        })
    }
}

struct Subscriber {
    sub: u64,
    tx: mpsc::Sender<TaskEvent>,
    lagged: bool,
}

impl Subscriber {
    fn deliver(&mut self, event: TaskEvent) {
        if self.lagged {
            if self.tx.try_send(TaskEvent::Resync).is_ok() {
                self.lagged = false;
            }
            return;
        }
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(event) {
            self.lagged = true;
        }
    }
}

/// channel name → watchers
type Table = HashMap<String, Vec<Subscriber>>;

async fn run(
    client: redis::Client,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    shutdown: CancellationToken,
) {
    let mut table: Table = HashMap::new();
    let mut next_sub = 0u64;
    let mut backoff = Duration::from_millis(50);
    loop {
        // Connect (answering watch requests with an error while Redis is away).
        let pubsub = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub()) => match r {
                Ok(r) => r,
                Err(_) => Err(redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))),
            },
        };
        let (mut sink, mut stream) = match pubsub {
            Ok(p) => p.split(),
            Err(e) => {
                tracing::warn!(error = %e, "event subscriber cannot reach redis; retrying");
                let deadline = tokio::time::sleep(backoff);
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = &mut deadline => break,
                        cmd = cmds.recv() => match cmd {
                            None => return,
                            Some(Cmd::Watch { done, .. }) => { let _ = done.send(Err(StoreError::Redis(e.clone()))); }
                            Some(Cmd::Unwatch { task, sub }) => remove(&mut table, &keys::events_channel(&task), sub),
                        },
                    }
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        // Resubscribe what is watched, then tell every watcher to re-read.
        let channels: Vec<String> = table.keys().cloned().collect();
        if !channels.is_empty() {
            if let Err(e) = sink.subscribe(&channels).await {
                tracing::warn!(error = %e, "resubscribe failed; reconnecting");
                continue;
            }
            tracing::info!(
                channels = channels.len(),
                "event subscriber reconnected; watchers re-read"
            );
            for subs in table.values_mut() {
                for s in subs.iter_mut() {
                    s.lagged = true;
                    s.deliver(TaskEvent::Resync);
                }
            }
        }
        backoff = Duration::from_millis(50);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                cmd = cmds.recv() => match cmd {
                    None => return,
                    Some(Cmd::Watch { task, tx, done }) => {
                        let channel = keys::events_channel(&task);
                        if !table.contains_key(&channel)
                            && let Err(e) = sink.subscribe(&channel).await
                        {
                            let _ = done.send(Err(e.into()));
                            break;
                        }
                        next_sub += 1;
                        table.entry(channel).or_default().push(Subscriber { sub: next_sub, tx, lagged: false });
                        let _ = done.send(Ok(next_sub));
                    }
                    Some(Cmd::Unwatch { task, sub }) => {
                        let channel = keys::events_channel(&task);
                        remove(&mut table, &channel, sub);
                        if !table.contains_key(&channel) {
                            let _ = sink.unsubscribe(&channel).await;
                        }
                    }
                },
                msg = stream.next() => match msg {
                    None => {
                        tracing::warn!("event subscriber lost its redis connection; reconnecting");
                        break;
                    }
                    Some(msg) => dispatch(&mut table, &msg),
                },
            }
        }
    }
}

fn remove(table: &mut Table, channel: &str, sub: u64) {
    if let Some(subs) = table.get_mut(channel) {
        subs.retain(|s| s.sub != sub);
        if subs.is_empty() {
            table.remove(channel);
        }
    }
}

fn dispatch(table: &mut Table, msg: &redis::Msg) {
    let channel = msg.get_channel_name();
    let Some(subs) = table.get_mut(channel) else {
        return;
    };
    let Some(task) = keys::task_of_channel(channel) else {
        return;
    };
    let Some(record) = TaskRecord::from_published(task, msg.get_payload_bytes()) else {
        tracing::warn!(task.id = %task, "undecodable task event; watchers re-read");
        for s in subs.iter_mut() {
            s.deliver(TaskEvent::Resync);
        }
        return;
    };
    let record = std::sync::Arc::new(record);
    for s in subs.iter_mut() {
        s.deliver(TaskEvent::Changed(record.clone()));
    }
}
