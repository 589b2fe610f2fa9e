//! Queue depth: length, consumer-group lag and pending entries of each queue, for the
//! workers' gauges and the operators' `mcp-tasks queues`.

use redis::AsyncCommands;

use crate::{Store, StoreResult, keys};

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

impl Store {
    /// Length, consumer-group lag and pending count of `queue` (all zero before the queue
    /// exists). Lag Redis cannot compute (after deletions inside the unread part) is taken
    /// as the entries neither pending nor acknowledged.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn queue_depth(&self, queue: &str) -> StoreResult<QueueDepth> {
        let mut total = QueueDepth {
            length: 0,
            lag: 0,
            pending: 0,
        };
        // One stream standalone; in a cluster the sum over the queue's shard streams.
        for key in self.layout.queue_streams(queue) {
            let depth = self.stream_depth(&key).await?;
            total.length += depth.length;
            total.lag += depth.lag;
            total.pending += depth.pending;
        }
        Ok(total)
    }

    async fn stream_depth(&self, key: &str) -> StoreResult<QueueDepth> {
        let mut con = self.con.clone();
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
        Ok(QueueDepth {
            length,
            lag,
            pending,
        })
    }
}
