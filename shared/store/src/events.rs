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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Backend, Store, StoreError, StoreResult, TaskRecord, keys};

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

struct Subscriber {
    sub: u64,
    tx: mpsc::Sender<TaskEvent>,
    lag: Arc<Lag>,
}

impl Subscriber {
    fn deliver(&self, event: TaskEvent) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(event) {
            self.lag.raise();
        }
    }
}

/// channel name → watchers
type Table = HashMap<String, Vec<Subscriber>>;

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

/// The subscribing half of the hub's connection.
enum Sink {
    Single(redis::aio::PubSubSink),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// What the hub's connection hands the loop.
enum Incoming {
    Message(redis::Msg),
    /// A cluster node's connection dropped: its subscriptions may have missed messages.
    NodeLost,
    /// Redis dropped this channel's subscription (its slot moved).
    Dropped(String),
}

/// The receiving half of the hub's connection.
enum Source {
    Single(redis::aio::PubSubStream),
    Cluster(mpsc::UnboundedReceiver<redis::PushInfo>),
}

impl Source {
    /// The next message; `None` when the connection is gone.
    async fn next(&mut self) -> Option<Incoming> {
        match self {
            Source::Single(stream) => stream.next().await.map(Incoming::Message),
            Source::Cluster(pushes) => loop {
                let push = pushes.recv().await?;
                match push.kind {
                    redis::PushKind::SMessage => {
                        if let Some(msg) = redis::Msg::from_push_info(push) {
                            return Some(Incoming::Message(msg));
                        }
                    }
                    redis::PushKind::Disconnection => return Some(Incoming::NodeLost),
                    redis::PushKind::SUnsubscribe => {
                        if let Some(Ok(channel)) = push
                            .data
                            .into_iter()
                            .next()
                            .map(redis::from_redis_value::<String>)
                        {
                            return Some(Incoming::Dropped(channel));
                        }
                    }
                    _ => {}
                }
            },
        }
    }
}

/// `channels` grouped by hash slot: one `SSUBSCRIBE` may only name channels of one slot.
fn by_slot<'a>(channels: &[&'a str]) -> Vec<Vec<&'a str>> {
    let mut groups: std::collections::BTreeMap<u16, Vec<&'a str>> = Default::default();
    for ch in channels {
        groups.entry(keys::slot(ch)).or_default().push(ch);
    }
    groups.into_values().collect()
}

impl Sink {
    async fn subscribe(&mut self, channels: &[&str]) -> redis::RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.subscribe(channels).await,
            // One command per slot, sent together (each goes to its slot's node).
            Sink::Cluster(con) => {
                futures_util::future::try_join_all(by_slot(channels).into_iter().map(|group| {
                    let mut con = con.clone();
                    async move { con.ssubscribe(group).await }
                }))
                .await?;
                Ok(())
            }
        }
    }

    async fn unsubscribe(&mut self, channels: &[&str]) -> redis::RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.unsubscribe(channels).await,
            Sink::Cluster(con) => {
                futures_util::future::try_join_all(by_slot(channels).into_iter().map(|group| {
                    let mut con = con.clone();
                    async move { con.sunsubscribe(group).await }
                }))
                .await?;
                Ok(())
            }
        }
    }

    async fn ping(&mut self) -> redis::RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.ping::<redis::Value>().await.map(drop),
            Sink::Cluster(con) => redis::cmd("PING")
                .query_async::<redis::Value>(con)
                .await
                .map(drop),
        }
    }
}

/// A fresh subscriber connection.
async fn connect(backend: &Backend) -> redis::RedisResult<(Sink, Source)> {
    match backend {
        Backend::Single(_) | Backend::Sentinel(_) => {
            let client = backend.single().await.expect("one Redis")?;
            let (sink, stream) = client.get_async_pubsub().await?.split();
            Ok((Sink::Single(sink), Source::Single(stream)))
        }
        Backend::Cluster { seeds, .. } => {
            let (tx, rx) = mpsc::unbounded_channel();
            let client = redis::cluster::ClusterClientBuilder::new(seeds.clone())
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(tx)
                .connection_timeout(REDIS_TIMEOUT)
                .response_timeout(REDIS_TIMEOUT)
                .build()?;
            let con = client.get_async_connection().await?;
            Ok((Sink::Cluster(con), Source::Cluster(rx)))
        }
    }
}

/// Longest wait between two attempts to reconnect the subscriber.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

async fn run(
    backend: Backend,
    layout: keys::Layout,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    shutdown: CancellationToken,
) {
    let mut table: Table = HashMap::new();
    let mut backoff = Duration::from_millis(50);
    let mut first = true;
    // Watches that came in while disconnected: held (not refused at once) and served by
    // the next connection, or refused when it cannot be made; so a listen that arrives
    // just as Redis comes back (a failover) waits a moment instead of failing.
    let mut held: Vec<Cmd> = Vec::new();
    let refuse = |held: &mut Vec<Cmd>| {
        for cmd in held.drain(..) {
            if let Cmd::Watch { done, .. } = cmd {
                let _ = done.send(Err(StoreError::Redis(redis::RedisError::from(
                    std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        "event subscriber reconnecting",
                    ),
                ))));
            }
        }
    };
    loop {
        if !first {
            // Wait out the backoff, holding watch requests meanwhile.
            let deadline = tokio::time::sleep(backoff);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = &mut deadline => break,
                    cmd = cmds.recv() => match cmd {
                        None => return,
                        Some(watch @ Cmd::Watch { .. }) => held.push(watch),
                        Some(Cmd::Unwatch { task, sub }) => remove(&mut table, &layout.events_channel(&task), sub),
                    },
                }
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        first = false;
        let pubsub = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(REDIS_TIMEOUT, connect(&backend)) => r.unwrap_or_else(|_| Err(timed_out())),
        };
        let (mut sink, mut stream) = match pubsub {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "event subscriber cannot reach redis; retrying");
                refuse(&mut held);
                continue;
            }
        };
        // Resubscribe what is watched, then tell every watcher to re-read.
        let channels: Vec<&str> = table.keys().map(String::as_str).collect();
        if !channels.is_empty() {
            match tokio::time::timeout(REDIS_TIMEOUT, sink.subscribe(&channels)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "resubscribe failed; reconnecting");
                    refuse(&mut held);
                    continue;
                }
                Err(_) => {
                    tracing::warn!("resubscribe timed out; reconnecting");
                    refuse(&mut held);
                    continue;
                }
            }
            tracing::info!(
                channels = channels.len(),
                "event subscriber reconnected; watchers re-read"
            );
            for s in table.values().flatten() {
                s.lag.raise();
            }
        }
        if !held.is_empty()
            && !apply(&layout, &mut table, &mut sink, std::mem::take(&mut held)).await
        {
            continue;
        }
        backoff = Duration::from_millis(50);
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ping.tick() => {
                    let pong = tokio::time::timeout(REDIS_TIMEOUT, sink.ping()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        tracing::warn!("event subscriber stopped answering pings; reconnecting");
                        break;
                    }
                }
                cmd = cmds.recv() => {
                    let Some(first) = cmd else { return };
                    // Everything queued meanwhile goes in the same SUBSCRIBE/UNSUBSCRIBE:
                    // one round trip for a burst of listens or jobs, not one each.
                    let mut batch = vec![first];
                    while batch.len() < MAX_BATCH {
                        match cmds.try_recv() {
                            Ok(c) => batch.push(c),
                            Err(_) => break,
                        }
                    }
                    if !apply(&layout, &mut table, &mut sink, batch).await {
                        break;
                    }
                }
                msg = stream.next() => match msg {
                    None => {
                        tracing::warn!("event subscriber lost its redis connection; reconnecting");
                        break;
                    }
                    Some(Incoming::Message(msg)) => dispatch(&layout, &table, &msg),
                    Some(Incoming::NodeLost) => {
                        // Start over on a fresh cluster connection, as after a lost
                        // connection to one Redis: subscribe everything, then every watcher
                        // re-reads. (Repairing the one node in place left subscriptions
                        // that no longer delivered in tests.)
                        tracing::warn!("event subscriber lost a cluster node; reconnecting");
                        break;
                    }
                    Some(Incoming::Dropped(channel)) => {
                        if table.contains_key(&channel) && !resubscribe(&table, &mut sink, &channel).await {
                            break;
                        }
                    }
                },
            }
        }
    }
}

/// Subscribe `channel` again (Redis dropped it: its slot moved), then tell its watchers to
/// re-read; `false` when the connection must be replaced.
async fn resubscribe(table: &Table, sink: &mut Sink, channel: &str) -> bool {
    if !matches!(
        tokio::time::timeout(REDIS_TIMEOUT, sink.subscribe(&[channel])).await,
        Ok(Ok(()))
    ) {
        tracing::warn!("resubscribe after a moved slot failed; reconnecting");
        return false;
    }
    tracing::info!(channel, "event subscription renewed; watchers re-read");
    for s in table.get(channel).into_iter().flatten() {
        s.lag.raise();
    }
    true
}

/// Most watch/unwatch commands sent to Redis together.
const MAX_BATCH: usize = 512;

/// Apply a batch of watch/unwatch commands: change the table, subscribe the channels that
/// gained their first watcher and unsubscribe those that lost their last, each set in one
/// command, then confirm the watches. `false` when the connection must be replaced.
async fn apply(layout: &keys::Layout, table: &mut Table, sink: &mut Sink, batch: Vec<Cmd>) -> bool {
    let before: std::collections::HashSet<String> = batch
        .iter()
        .map(|c| match c {
            Cmd::Watch { task, .. } | Cmd::Unwatch { task, .. } => layout.events_channel(task),
        })
        .filter(|ch| table.contains_key(ch))
        .collect();
    let mut confirms = Vec::new();
    let mut touched = Vec::new();
    for cmd in batch {
        match cmd {
            Cmd::Watch {
                task,
                sub,
                tx,
                lag,
                done,
            } => {
                let channel = layout.events_channel(&task);
                table
                    .entry(channel.clone())
                    .or_default()
                    .push(Subscriber { sub, tx, lag });
                confirms.push((done, sub, channel.clone()));
                touched.push(channel);
            }
            Cmd::Unwatch { task, sub } => {
                let channel = layout.events_channel(&task);
                remove(table, &channel, sub);
                touched.push(channel);
            }
        }
    }
    touched.sort();
    touched.dedup();
    let subscribe: Vec<&str> = touched
        .iter()
        .filter(|ch| !before.contains(*ch) && table.contains_key(*ch))
        .map(String::as_str)
        .collect();
    let unsubscribe: Vec<&str> = touched
        .iter()
        .filter(|ch| before.contains(*ch) && !table.contains_key(*ch))
        .map(String::as_str)
        .collect();
    if !subscribe.is_empty() {
        let r = tokio::time::timeout(REDIS_TIMEOUT, sink.subscribe(&subscribe)).await;
        if let Err(e) = r.unwrap_or_else(|_| Err(timed_out())) {
            // Those watches never started: take them out again, and say why.
            let why = e.to_string();
            for (done, sub, channel) in confirms {
                remove(table, &channel, sub);
                let _ = done.send(Err(StoreError::Redis(redis::RedisError::from(
                    std::io::Error::new(std::io::ErrorKind::NotConnected, why.clone()),
                ))));
            }
            return false;
        }
    }
    if !unsubscribe.is_empty()
        && !matches!(
            tokio::time::timeout(REDIS_TIMEOUT, sink.unsubscribe(&unsubscribe)).await,
            Ok(Ok(()))
        )
    {
        tracing::warn!("unsubscribe failed; reconnecting");
        for (done, _, _) in confirms {
            let _ = done.send(Ok(()));
        }
        return false;
    }
    for (done, _, _) in confirms {
        let _ = done.send(Ok(()));
    }
    true
}

fn remove(table: &mut Table, channel: &str, sub: u64) {
    if let Some(subs) = table.get_mut(channel) {
        subs.retain(|s| s.sub != sub);
        if subs.is_empty() {
            table.remove(channel);
        }
    }
}

fn dispatch(layout: &keys::Layout, table: &Table, msg: &redis::Msg) {
    let channel = msg.get_channel_name();
    let Some(subs) = table.get(channel) else {
        return;
    };
    let Some(task) = layout.task_of_channel(channel) else {
        return;
    };
    let Some(record) = TaskRecord::from_published(task, msg.get_payload_bytes()) else {
        tracing::warn!(task.id = %task, "undecodable task event; watchers re-read");
        for s in subs {
            s.lag.raise();
        }
        return;
    };
    let record = Arc::new(record);
    for s in subs {
        s.deliver(TaskEvent::Changed(record.clone()));
    }
}
