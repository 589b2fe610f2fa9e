//! The hub's Redis connection: one pub/sub connection to one Redis, or a RESP3 cluster
//! connection subscribing each slot's shard channels on its node.

use futures_util::StreamExt as _;
use tokio::sync::mpsc;

use super::REDIS_TIMEOUT;
use crate::{Backend, keys};

pub(super) fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

/// The subscribing half of the hub's connection.
pub(super) enum Sink {
    Single(redis::aio::PubSubSink),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// What the hub's connection hands the loop.
pub(super) enum Incoming {
    Message(redis::Msg),
    /// A cluster node's connection dropped: its subscriptions may have missed messages.
    NodeLost,
    /// Redis dropped this channel's subscription (its slot moved).
    Dropped(String),
}

/// The receiving half of the hub's connection.
pub(super) enum Source {
    Single(redis::aio::PubSubStream),
    Cluster(mpsc::UnboundedReceiver<redis::PushInfo>),
}

impl Source {
    /// The next message; `None` when the connection is gone.
    pub(super) async fn next(&mut self) -> Option<Incoming> {
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
pub(super) fn by_slot<'a>(channels: &[&'a str]) -> Vec<Vec<&'a str>> {
    let mut groups: std::collections::BTreeMap<u16, Vec<&'a str>> = Default::default();
    for ch in channels {
        groups.entry(keys::slot(ch)).or_default().push(ch);
    }
    groups.into_values().collect()
}

impl Sink {
    pub(super) async fn subscribe(&mut self, channels: &[&str]) -> redis::RedisResult<()> {
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

    pub(super) async fn unsubscribe(&mut self, channels: &[&str]) -> redis::RedisResult<()> {
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

    pub(super) async fn ping(&mut self) -> redis::RedisResult<()> {
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
pub(super) async fn connect(backend: &Backend) -> redis::RedisResult<(Sink, Source)> {
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
