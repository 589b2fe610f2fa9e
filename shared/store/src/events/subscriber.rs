//! The hub's loop: (re)connect with backoff, subscribe and unsubscribe in batches, and
//! hand each message to the watchers of its task.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::connection::{Incoming, Sink, Source, connect, timed_out};
use super::{Cmd, Delivery, Lag, PING_EVERY, REDIS_TIMEOUT};
use crate::{Backend, StoreError, TaskRecord, keys};

struct Subscriber {
    sub: u64,
    task: Arc<str>,
    tx: mpsc::Sender<Delivery>,
    lag: Arc<Lag>,
}

impl Subscriber {
    fn deliver(&self, record: Arc<TaskRecord>) {
        if let Err(mpsc::error::TrySendError::Full(_)) =
            self.tx.try_send((self.task.clone(), record))
        {
            self.lag.raise(&self.task);
        }
    }

    fn resync(&self) {
        self.lag.raise(&self.task);
    }
}

/// channel name → watchers
type Table = HashMap<String, Vec<Subscriber>>;

/// Longest wait between two attempts to reconnect the subscriber.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The subscriber loop: connect, resubscribe what is watched, serve until the connection
/// is lost, wait out the backoff, again; until shutdown or the hub is dropped.
pub(super) async fn run(
    backend: Backend,
    layout: keys::Layout,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    shutdown: CancellationToken,
) {
    let mut hub = Hub {
        layout,
        cmds,
        shutdown,
        table: HashMap::new(),
        held: Vec::new(),
    };
    let mut backoff = INITIAL_BACKOFF;
    let mut first = true;
    loop {
        if !first {
            if hub.wait_out(backoff).await.is_break() {
                return;
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        first = false;
        let (mut sink, mut stream) = match hub.reconnect(&backend).await {
            ControlFlow::Break(()) => return,
            ControlFlow::Continue(None) => continue,
            ControlFlow::Continue(Some(connection)) => connection,
        };
        backoff = INITIAL_BACKOFF;
        if hub.serve(&mut sink, &mut stream).await.is_break() {
            return;
        }
    }
}

/// First wait before reconnecting the subscriber.
const INITIAL_BACKOFF: Duration = Duration::from_millis(50);

/// What the subscriber loop holds across connections.
struct Hub {
    layout: keys::Layout,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    shutdown: CancellationToken,
    table: Table,
    /// Watches that came in while disconnected: held (not refused at once) and served by
    /// the next connection, or refused when it cannot be made; so a listen that arrives
    /// just as Redis comes back (a failover) waits a moment instead of failing.
    held: Vec<Cmd>,
}

impl Hub {
    /// Wait out the backoff, holding watch requests meanwhile; `Break` to stop.
    async fn wait_out(&mut self, backoff: Duration) -> ControlFlow<()> {
        let deadline = tokio::time::sleep(backoff);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return ControlFlow::Break(()),
                () = &mut deadline => return ControlFlow::Continue(()),
                cmd = self.cmds.recv() => match cmd {
                    None => return ControlFlow::Break(()),
                    Some(watch @ Cmd::Watch { .. }) => self.held.push(watch),
                    Some(Cmd::Unwatch { tasks, sub }) => for task in &tasks {
                        remove(&mut self.table, &self.layout.events_channel(task), sub);
                    },
                },
            }
        }
    }

    /// A new connection with everything watched subscribed again (every watcher told to
    /// re-read) and the held watches applied. `Continue(None)` when it failed and the loop
    /// should back off; `Break` at shutdown.
    async fn reconnect(&mut self, backend: &Backend) -> ControlFlow<(), Option<(Sink, Source)>> {
        let pubsub = tokio::select! {
            () = self.shutdown.cancelled() => return ControlFlow::Break(()),
            r = tokio::time::timeout(REDIS_TIMEOUT, connect(backend)) => r.unwrap_or_else(|_| Err(timed_out())),
        };
        let (mut sink, stream) = match pubsub {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "event subscriber cannot reach redis; retrying");
                self.refuse_held();
                return ControlFlow::Continue(None);
            }
        };
        let channels: Vec<&str> = self.table.keys().map(String::as_str).collect();
        if !channels.is_empty() {
            match tokio::time::timeout(REDIS_TIMEOUT, sink.subscribe(&channels)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "resubscribe failed; reconnecting");
                    self.refuse_held();
                    return ControlFlow::Continue(None);
                }
                Err(_) => {
                    tracing::warn!("resubscribe timed out; reconnecting");
                    self.refuse_held();
                    return ControlFlow::Continue(None);
                }
            }
            tracing::info!(
                channels = channels.len(),
                "event subscriber reconnected; watchers re-read"
            );
            for s in self.table.values().flatten() {
                s.resync();
            }
        }
        if !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            if !apply(&self.layout, &mut self.table, &mut sink, held).await {
                return ControlFlow::Continue(None);
            }
        }
        ControlFlow::Continue(Some((sink, stream)))
    }

    /// Refuse the held watches: no connection could be made for them.
    fn refuse_held(&mut self) {
        for cmd in self.held.drain(..) {
            if let Cmd::Watch { done, .. } = cmd {
                let _ = done.send(Err(StoreError::Redis(redis::RedisError::from(
                    std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        "event subscriber reconnecting",
                    ),
                ))));
            }
        }
    }

    /// Serve one connection: watch commands in batches, messages to their watchers, a ping
    /// now and then. `Continue` when the connection must be replaced, `Break` to stop.
    async fn serve(&mut self, sink: &mut Sink, stream: &mut Source) -> ControlFlow<()> {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return ControlFlow::Break(()),
                _ = ping.tick() => {
                    let pong = tokio::time::timeout(REDIS_TIMEOUT, sink.ping()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        tracing::warn!("event subscriber stopped answering pings; reconnecting");
                        return ControlFlow::Continue(());
                    }
                }
                cmd = self.cmds.recv() => {
                    let Some(first) = cmd else { return ControlFlow::Break(()) };
                    // Everything queued meanwhile goes in the same SUBSCRIBE/UNSUBSCRIBE:
                    // one round trip for a burst of listens or jobs, not one each.
                    let mut batch = vec![first];
                    while batch.len() < MAX_BATCH {
                        match self.cmds.try_recv() {
                            Ok(c) => batch.push(c),
                            Err(_) => break,
                        }
                    }
                    if !apply(&self.layout, &mut self.table, sink, batch).await {
                        return ControlFlow::Continue(());
                    }
                }
                msg = stream.next() => match msg {
                    None => {
                        tracing::warn!("event subscriber lost its redis connection; reconnecting");
                        return ControlFlow::Continue(());
                    }
                    Some(Incoming::Message(msg)) => dispatch(&self.layout, &self.table, &msg),
                    Some(Incoming::NodeLost) => {
                        // Start over on a fresh cluster connection, as after a lost
                        // connection to one Redis: subscribe everything, then every watcher
                        // re-reads. (Repairing the one node in place left subscriptions
                        // that no longer delivered in tests.)
                        tracing::warn!("event subscriber lost a cluster node; reconnecting");
                        return ControlFlow::Continue(());
                    }
                    Some(Incoming::Dropped(channel)) => {
                        if self.table.contains_key(&channel)
                            && !resubscribe(&self.table, sink, &channel).await
                        {
                            return ControlFlow::Continue(());
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
        s.resync();
    }
    true
}

/// Most watch/unwatch commands sent to Redis together.
const MAX_BATCH: usize = 512;

/// Apply a batch of watch/unwatch commands: change the table, subscribe the channels that
/// gained their first watcher and unsubscribe those that lost their last, each set in one
/// command, then confirm the watches. `false` when the connection must be replaced.
async fn apply(layout: &keys::Layout, table: &mut Table, sink: &mut Sink, batch: Vec<Cmd>) -> bool {
    // Each command's channels, and which of them were subscribed before the batch.
    let batch: Vec<(Cmd, Vec<String>)> = batch
        .into_iter()
        .map(|cmd| {
            let channels = match &cmd {
                Cmd::Watch { tasks, .. } | Cmd::Unwatch { tasks, .. } => {
                    tasks.iter().map(|t| layout.events_channel(t)).collect()
                }
            };
            (cmd, channels)
        })
        .collect();
    let before: std::collections::HashSet<String> = batch
        .iter()
        .flat_map(|(_, channels)| channels)
        .filter(|ch| table.contains_key(*ch))
        .cloned()
        .collect();
    let mut touched: Vec<String> = Vec::new();
    let mut confirms = Vec::new();
    for (cmd, channels) in batch {
        match cmd {
            Cmd::Watch {
                tasks,
                sub,
                tx,
                lag,
                done,
            } => {
                for (task, channel) in tasks.into_iter().zip(&channels) {
                    table.entry(channel.clone()).or_default().push(Subscriber {
                        sub,
                        task,
                        tx: tx.clone(),
                        lag: lag.clone(),
                    });
                }
                touched.extend(channels.iter().cloned());
                confirms.push((done, sub, channels));
            }
            Cmd::Unwatch { sub, .. } => {
                for channel in &channels {
                    remove(table, channel, sub);
                }
                touched.extend(channels);
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
            for (done, sub, channels) in confirms {
                for channel in &channels {
                    remove(table, channel, sub);
                }
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
            s.resync();
        }
        return;
    };
    let record = Arc::new(record);
    for s in subs {
        s.deliver(record.clone());
    }
}
