//! Jobs whose worker stopped: the fleet-wide sweep lease of a queue's stream, and the
//! claim of entries idle past their lease (`XAUTOCLAIM`).

use std::time::Duration;

use redis::AsyncCommands;

use crate::handles::Jobs;
use crate::jobs::delivery;
use crate::{Delivery, StoreResult, keys};

impl Jobs<'_> {
    /// Every stream of `queue`: one for one Redis, one per shard in a cluster.
    pub fn queue_streams(self, queue: &str) -> Vec<String> {
        self.store.layout.queue_streams(queue)
    }

    /// Take (or, holding it, extend) the fleet-wide sweep lease of `stream` of `queue` for `hold`
    /// (`SET NX PX`): only one worker sweeps a queue at a time.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn take_sweep_lease(
        self,
        queue: &str,
        stream: &str,
        consumer: &str,
        hold: Duration,
    ) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let held: i64 = self
            .store
            .scripts
            .sweep_lease
            .key(self.store.layout.sweep_key(queue, stream))
            .arg(consumer)
            .arg(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX))
            .invoke_async(&mut con)
            .await?;
        Ok(held == 1)
    }

    /// Claim up to `count` entries of `queue` idle for at least `min_idle` (their worker
    /// stopped renewing), starting at `cursor`; returns them and the cursor to go on from.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn reclaim(
        self,
        queue: &str,
        stream: &str,
        consumer: &str,
        min_idle: Duration,
        cursor: &str,
        count: usize,
    ) -> StoreResult<(Vec<Delivery>, String)> {
        let mut con = self.store.con.clone();
        let reply: redis::streams::StreamAutoClaimReply = con
            .xautoclaim_options(
                stream,
                keys::GROUP,
                consumer,
                u64::try_from(min_idle.as_millis()).unwrap_or(u64::MAX),
                cursor,
                redis::streams::StreamAutoClaimOptions::default().count(count),
            )
            .await?;
        let deliveries = reply
            .claimed
            .into_iter()
            .map(|entry| delivery(queue, stream, entry.into(), false))
            .collect();
        Ok((deliveries, reply.next_stream_id))
    }
}
