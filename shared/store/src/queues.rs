//! Queues as operators see them: their names, depth (length, consumer-group lag, pending
//! entries) and consumers, for the workers' gauges and `mcp-tasks queues` / `workers`. In a
//! cluster each figure is summed over the queue's shard streams.

use std::collections::{BTreeMap, BTreeSet};

use redis::AsyncCommands;

use crate::handles::Fleet;
use crate::{StoreResult, keys};

/// Length, consumer-group lag and pending entries of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// `XLEN`: entries in the stream (queued and running jobs).
    pub length: u64,
    /// Entries not yet delivered to the `workers` group.
    pub lag: u64,
    /// Entries delivered but not yet acknowledged.
    pub pending: u64,
}

/// One consumer (worker) of a queue's group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// Its name: the worker's consumer id.
    pub name: String,
    /// Entries delivered to it and not yet acknowledged.
    pub pending: u64,
    /// Milliseconds since it last read or claimed (the least over a cluster's streams).
    pub idle_ms: u64,
}

impl Fleet<'_> {
    /// Every queue a worker has served or a live tool advertises, sorted.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn queue_names(self) -> StoreResult<Vec<String>> {
        let mut con = self.store.con.clone();
        let served: Vec<String> = con.smembers(keys::QUEUES_KEY).await?;
        let mut names: BTreeSet<String> = served.into_iter().collect();
        names.extend(self.adverts().await?.into_iter().map(|a| a.queue));
        Ok(names.into_iter().collect())
    }

    /// The consumers of `queue`'s group, by name (none before a worker has read it).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn queue_consumers(self, queue: &str) -> StoreResult<Vec<Consumer>> {
        let mut con = self.store.con.clone();
        let mut by_name: BTreeMap<String, Consumer> = BTreeMap::new();
        for key in self.store.layout.queue_streams(queue) {
            let reply: redis::RedisResult<redis::streams::StreamInfoConsumersReply> =
                con.xinfo_consumers(&key, keys::GROUP).await;
            let consumers = match reply {
                Ok(reply) => reply.consumers,
                // No stream or no group yet: no consumers.
                Err(e)
                    if e.kind()
                        == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) =>
                {
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for c in consumers {
                let entry = by_name.entry(c.name.clone()).or_insert(Consumer {
                    name: c.name,
                    pending: 0,
                    idle_ms: u64::MAX,
                });
                entry.pending += c.pending as u64;
                entry.idle_ms = entry.idle_ms.min(c.idle as u64);
            }
        }
        Ok(by_name.into_values().collect())
    }

    /// Length, consumer-group lag and pending count of `queue` (all zero before the queue
    /// exists). Lag Redis cannot compute (after deletions inside the unread part) is taken
    /// as the entries neither pending nor acknowledged.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn queue_depth(self, queue: &str) -> StoreResult<QueueDepth> {
        let mut total = QueueDepth {
            length: 0,
            lag: 0,
            pending: 0,
        };
        // One stream standalone; in a cluster the sum over the queue's shard streams.
        for key in self.store.layout.queue_streams(queue) {
            let (depth, _) = self.stream_depth(&key).await?;
            total.length += depth.length;
            total.lag += depth.lag;
            total.pending += depth.pending;
        }
        Ok(total)
    }

    /// One stream's depth (`XLEN`, `XINFO GROUPS`), and the id of the last entry delivered
    /// to the group (`None` before the group exists).
    pub(crate) async fn stream_depth(self, key: &str) -> StoreResult<(QueueDepth, Option<String>)> {
        let mut con = self.store.con.clone();
        let length: u64 = con.xlen(key).await?;
        let groups: redis::RedisResult<redis::streams::StreamInfoGroupsReply> =
            con.xinfo_groups(key).await;
        let group = match groups {
            Ok(reply) => reply.groups.into_iter().find(|g| g.name == keys::GROUP),
            // No stream yet: nothing queued.
            Err(e)
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) =>
            {
                None
            }
            Err(e) => return Err(e.into()),
        };
        let pending = group.as_ref().map_or(0, |g| g.pending as u64);
        let lag = group
            .as_ref()
            .and_then(|g| g.lag)
            .map_or(length.saturating_sub(pending), |l| l as u64);
        Ok((
            QueueDepth {
                length,
                lag,
                pending,
            },
            group.map(|g| g.last_delivered_id),
        ))
    }
}
