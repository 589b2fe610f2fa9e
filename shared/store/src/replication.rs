//! Acknowledged means replicated (`MCPT_REDIS_WAIT_REPLICAS`): a change a client is told
//! about (a create, an answer, a cancel, a worker's finish) is followed by `WAIT N timeout`
//! before the store returns.
//!
//! `WAIT` confirms the writes of the connection it is sent on, and blocks that connection
//! meanwhile, so these writes do not go through the shared multiplexed connection (a
//! replica that lags would stall every request behind it): each takes a connection of its
//! own from a small pool ([`Acked`]), writes, waits, and gives it back.
//!
//! In a Redis Cluster the pooled connection is a cluster connection of its own (one socket
//! per primary): the script goes to the primary of its keys' slot, and `WAIT` is routed to
//! the primary of that same slot, so it runs on the socket the write went through and waits
//! for that shard's replicas (Redis counts replicas per primary).
//!
//! What a timeout (fewer replicas confirmed in time) means, per change:
//! - create: the task is cancelled at once and the caller gets
//!   [`crate::StoreError::Unreplicated`], a retryable error: no task id was handed out. The
//!   job was queued with the task (one script), so a worker may have started it within the
//!   wait; its run is then cancelled as `tasks/cancel` would, and a job shorter than the
//!   wait may have finished: the same at-least-once contract as a job whose worker died;
//! - answer, cancel: the change stands on the primary (it cannot be taken back) and the
//!   caller gets [`crate::StoreError::Unreplicated`], a retryable error, since a failover
//!   now would lose a change it was told about; sending it again is harmless (an answered
//!   key and a cancelled task are left as they are);
//! - finish (a worker's): the change stands and the worker goes on; a failover that loses
//!   it loses the job's acknowledgement with it, so the job is delivered again.
//!
//! Every timeout logs a warning and reports [`crate::observe::Observed::Unreplicated`] (a
//! metric).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use crate::{Backend, CONNECT_TIMEOUT, RESPONSE_TIMEOUT, StoreResult, observe};

/// How many replicas must confirm an acknowledged change, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    /// `MCPT_REDIS_WAIT_REPLICAS`; 0 turns waiting off.
    pub replicas: u32,
    /// `MCPT_REDIS_WAIT_TIMEOUT`.
    pub timeout: Duration,
}

/// Connections kept for acknowledged writes; more are opened under load and closed beyond.
const POOLED: usize = 16;

/// The pool of connections that acknowledged writes and their `WAIT` go through.
pub(crate) struct Acked {
    pub(crate) replication: Replication,
    backend: Backend,
    /// Redis Cluster: the client pooled cluster connections are opened with.
    cluster: Option<redis::cluster::ClusterClient>,
    /// Idle connections, each with [`Backend::switches`] when it was opened.
    idle: Mutex<Vec<(u64, Pooled)>>,
}

/// A pooled connection: to the one primary, or to every primary of a cluster.
enum Pooled {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Acked {
    pub(crate) fn new(backend: Backend, replication: Replication) -> StoreResult<Arc<Acked>> {
        // A write and its WAIT share one socket for up to the wait plus a normal reply.
        let response = replication.timeout + RESPONSE_TIMEOUT;
        let cluster = match &backend {
            Backend::Cluster { seeds } => Some(
                redis::cluster::ClusterClientBuilder::new(seeds.clone())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(response)
                    // A WAIT sent again on a new socket would confirm at once what the
                    // lost socket wrote: a failure is reported, never retried.
                    .retries(0)
                    .build()?,
            ),
            Backend::Single(_) | Backend::Sentinel(_) => None,
        };
        Ok(Arc::new(Acked {
            replication,
            backend,
            cluster,
            idle: Mutex::new(Vec::new()),
        }))
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Pooled)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection of its own to the (current) primary, or primaries.
    pub(crate) async fn take(self: &Arc<Self>) -> StoreResult<AckedCon> {
        let switches = self.backend.switches();
        let kept = {
            let mut idle = self.idle();
            // Opened before the sentinels announced a promotion: to a former primary.
            idle.retain(|(opened, _)| *opened == switches);
            idle.pop().map(|(_, con)| con)
        };
        let con = match (kept, &self.cluster) {
            (Some(con), _) => con,
            (None, Some(cluster)) => Pooled::Cluster(cluster.get_async_connection().await?),
            (None, None) => {
                let client = self
                    .backend
                    .single()
                    .await
                    .expect("not a cluster, so one Redis")?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(self.replication.timeout + RESPONSE_TIMEOUT));
                Pooled::Single(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                )
            }
        };
        Ok(AckedCon {
            con: Some(con),
            switches,
            pool: self.clone(),
            healthy: true,
        })
    }
}

/// A pooled connection, given back on drop unless a command on it failed.
pub(crate) struct AckedCon {
    con: Option<Pooled>,
    /// [`Backend::switches`] when the connection was opened.
    switches: u64,
    pool: Arc<Acked>,
    healthy: bool,
}

impl AckedCon {
    /// `WAIT` for the configured replicas of the primary that holds `key` (the key the
    /// write just went to); `false` (reported, logged) when fewer confirmed in time, or
    /// when the `WAIT` itself failed: the write may stand unreplicated, and only a `WAIT`
    /// on the socket that wrote it could say otherwise.
    pub(crate) async fn replicated(&mut self, key: &str, op: &'static str) -> bool {
        let Replication { replicas, timeout } = self.pool.replication;
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let confirmed: redis::RedisResult<i64> =
            match self.con.as_mut().expect("present until dropped") {
                Pooled::Single(_) => wait.query_async(self).await,
                Pooled::Cluster(con) => {
                    // Not by the command's own routing, which asks every primary and
                    // answers the least count (one shard's lagging replica would refuse
                    // every change), each on a socket that may have written nothing.
                    let route = Route::with_key(key, SlotAddr::Master);
                    let reply = con
                        .route_command(
                            wait,
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                        )
                        .await
                        .and_then(|v| redis::from_redis_value(v).map_err(Into::into));
                    self.note(&reply);
                    reply
                }
            };
        let confirmed = match confirmed {
            Ok(n) => n,
            Err(e) => {
                // Never back in the pool: it may still be blocked in the WAIT.
                self.healthy = false;
                tracing::warn!(op, error = %e, "redis: WAIT failed after a change");
                0
            }
        };
        let ok = confirmed >= i64::from(replicas);
        if !ok {
            observe::report(observe::Observed::Unreplicated { op });
            tracing::warn!(
                op,
                confirmed,
                wanted = replicas,
                "redis: a change was not confirmed by enough replicas in time"
            );
        }
        ok
    }
}

impl AckedCon {
    /// Keep the connection out of the pool once a command on it failed for the socket's
    /// sake (it may be half-broken, or blocked in a `WAIT`) or because its node is no
    /// longer primary (`-READONLY`: the next connection asks the sentinels again).
    fn note<T>(&mut self, reply: &redis::RedisResult<T>) {
        if let Err(e) = reply
            && crate::sentinel::primary_lost(e)
        {
            self.healthy = false;
        }
    }
}

impl Drop for AckedCon {
    fn drop(&mut self) {
        if let Some(con) = self.con.take()
            && self.healthy
        {
            let mut idle = self.pool.idle();
            if idle.len() < POOLED {
                idle.push((self.switches, con));
            }
        }
    }
}

impl ConnectionLike for AckedCon {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let reply = match self.con.as_mut().expect("present until dropped") {
                Pooled::Single(con) => con.req_packed_command(cmd).await,
                Pooled::Cluster(con) => con.req_packed_command(cmd).await,
            };
            self.note(&reply);
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let reply = match self.con.as_mut().expect("present until dropped") {
                Pooled::Single(con) => con.req_packed_commands(cmd, offset, count).await,
                Pooled::Cluster(con) => con.req_packed_commands(cmd, offset, count).await,
            };
            if reply.is_err() {
                self.healthy = false;
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        match &self.con {
            Some(Pooled::Single(con)) => con.get_db(),
            Some(Pooled::Cluster(con)) => con.get_db(),
            None => 0,
        }
    }
}
