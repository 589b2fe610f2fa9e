//! The hub's loop: (re)connect with backoff, subscribe and unsubscribe in batches, and
//! hand each message to the watchers of its task.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::connection::{Incoming, Sink, connect, timed_out};
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

pub(super) async fn run(
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
                        Some(Cmd::Unwatch { tasks, sub }) => for task in &tasks {
                            remove(&mut table, &layout.events_channel(task), sub);
                        },
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
                s.resync();
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
