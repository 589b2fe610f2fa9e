//! Acknowledged means replicated (`MCPT_REDIS_WAIT_REPLICAS`): a change a client is told
//! about (a create, an answer, a cancel, a worker's finish) is followed by `WAIT N timeout`
//! before the store returns.
//!
//! `WAIT` confirms the writes of the connection it is sent on, and blocks that connection
//! meanwhile, so these writes do not go through the shared multiplexed connection (a
//! replica that lags would stall every request behind it): each takes a connection of its
//! own from a small pool ([`Acked`]), writes, waits, and gives it back.
//!
//! What a timeout (fewer replicas confirmed in time) means, per change:
//! - create: the task is cancelled at once and the caller gets
//!   [`crate::StoreError::Unreplicated`], a retryable error: no task id was handed out. The
//!   job was queued with the task (one script), so a worker may have started it within the
//!   wait; its run is then cancelled as `tasks/cancel` would, and a job shorter than the
//!   wait may have finished: the same at-least-once contract as a job whose worker died;
//! - answer, cancel, finish: the change stands (it cannot be taken back), the store logs a
//!   warning and reports [`crate::observe::Observed::Unreplicated`] (a metric), and the
//!   caller is answered as usual.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};

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
    idle: Mutex<Vec<MultiplexedConnection>>,
}

impl Acked {
    pub(crate) fn new(backend: Backend, replication: Replication) -> Arc<Acked> {
        Arc::new(Acked {
            replication,
            backend,
            idle: Mutex::new(Vec::new()),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<MultiplexedConnection>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection of its own to the (current) primary.
    pub(crate) async fn take(self: &Arc<Self>) -> StoreResult<AckedCon> {
        let kept = self.idle().pop();
        let con = match kept {
            Some(con) => con,
            None => {
                let client = self
                    .backend
                    .single()
                    .await
                    .expect("acknowledged writes need one Redis")?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(self.replication.timeout + RESPONSE_TIMEOUT));
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?
            }
        };
        Ok(AckedCon {
            con: Some(con),
            pool: self.clone(),
            healthy: true,
        })
    }
}

/// A pooled connection, given back on drop unless a command on it failed.
pub(crate) struct AckedCon {
    con: Option<MultiplexedConnection>,
    pool: Arc<Acked>,
    healthy: bool,
}

impl AckedCon {
    /// `WAIT` for the configured replicas; `false` (reported, logged) when fewer confirmed
    /// in time.
    pub(crate) async fn replicated(&mut self, op: &'static str) -> StoreResult<bool> {
        let Replication { replicas, timeout } = self.pool.replication;
        let confirmed: i64 = redis::cmd("WAIT")
            .arg(replicas)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
            .query_async(self)
            .await?;
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
        Ok(ok)
    }
}

impl Drop for AckedCon {
    fn drop(&mut self) {
        if let Some(con) = self.con.take()
            && self.healthy
        {
            let mut idle = self.pool.idle();
            if idle.len() < POOLED {
                idle.push(con);
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
            let con = self.con.as_mut().expect("present until dropped");
            let reply = con.req_packed_command(cmd).await;
            if let Err(e) = &reply
                && (e.is_io_error() || e.is_connection_dropped() || e.is_timeout())
            {
                self.healthy = false;
            }
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
            let con = self.con.as_mut().expect("present until dropped");
            let reply = con.req_packed_commands(cmd, offset, count).await;
            if reply.is_err() {
                self.healthy = false;
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.con.as_ref().map_or(0, ConnectionLike::get_db)
    }
}
