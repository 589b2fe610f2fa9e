//! Redis behind Sentinel: the primary is whichever node the sentinels name now, and the
//! store's connection follows it through a failover.
//!
//! [`Primary`] asks the sentinels (redis-rs' `SentinelClient`, which also checks the node's
//! `ROLE`). [`FollowingCon`] keeps one auto-reconnecting connection to that primary and
//! drops it when a reply says the node is gone or demoted (connection lost or refused,
//! timeout, `-READONLY`): that command fails (the caller's request gets a retryable error)
//! and the next one asks the sentinels again, so commands reach the promoted replica as
//! soon as the sentinels have promoted it. Pub/sub and blocking reads ask [`Primary`] each
//! time they connect.

use std::sync::{Arc, Mutex};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, ErrorKind, RedisError, RedisResult, ServerErrorKind, TlsMode};

use crate::CONNECT_TIMEOUT;
use crate::target::SentinelTarget;

/// The primary the sentinels name.
#[derive(Clone)]
pub(crate) struct Primary {
    sentinels: Arc<tokio::sync::Mutex<SentinelClient>>,
}

impl Primary {
    pub(crate) fn new(target: &SentinelTarget) -> RedisResult<Primary> {
        let addrs = target.sentinels.iter().map(|(host, port)| {
            if target.tls {
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        });
        let mut builder =
            SentinelClientBuilder::new(addrs, &target.master, SentinelServerType::Master)?
                .set_client_to_redis_db(target.db);
        if let Some(user) = &target.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &target.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(user) = &target.sentinel_username {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &target.sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if target.tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
        }
        Ok(Primary {
            sentinels: Arc::new(tokio::sync::Mutex::new(builder.build()?)),
        })
    }

    /// A client for the node the sentinels name primary now.
    pub(crate) async fn client(&self) -> RedisResult<redis::Client> {
        let mut sentinels = self.sentinels.lock().await;
        tokio::time::timeout(CONNECT_TIMEOUT * 2, sentinels.async_get_client())
            .await
            .map_err(|_| RedisError::from((ErrorKind::Io, "no sentinel named a primary in time")))?
    }
}

/// Whether a failed command says the primary is gone or no longer primary.
fn primary_lost(e: &RedisError) -> bool {
    e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_io_error()
        || e.is_timeout()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// A connection to the current primary, replaced after the primary is lost.
#[derive(Clone)]
pub(crate) struct FollowingCon {
    primary: Primary,
    config: ConnectionManagerConfig,
    /// The connection and its generation; `None` after a loss, until the next command.
    current: Arc<Mutex<Option<(u64, ConnectionManager)>>>,
    /// One sentinel round at a time.
    switching: Arc<tokio::sync::Mutex<u64>>,
}

impl FollowingCon {
    /// Connect to the primary the sentinels name now.
    pub(crate) async fn connect(
        primary: Primary,
        config: ConnectionManagerConfig,
    ) -> RedisResult<FollowingCon> {
        let con = FollowingCon {
            primary,
            config,
            current: Arc::new(Mutex::new(None)),
            switching: Arc::new(tokio::sync::Mutex::new(0)),
        };
        con.connection().await?;
        Ok(con)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(u64, ConnectionManager)>> {
        // Holds no invariant a panic elsewhere could break.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn connection(&self) -> RedisResult<(u64, ConnectionManager)> {
        if let Some(current) = self.slot().clone() {
            return Ok(current);
        }
        let mut generation = self.switching.lock().await;
        if let Some(current) = self.slot().clone() {
            return Ok(current);
        }
        let client = self.primary.client().await?;
        let addr = client.get_connection_info().addr().to_string();
        let con = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        *generation += 1;
        *self.slot() = Some((*generation, con.clone()));
        tracing::info!(primary = %addr, generation = *generation, "redis: connected to the primary the sentinels name");
        Ok((*generation, con))
    }

    /// Forget connection `generation` after it failed with `e`, when `e` says the primary
    /// is gone.
    fn check(&self, generation: u64, e: &RedisError) {
        if !primary_lost(e) {
            return;
        }
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
            *slot = None;
            tracing::warn!(error = %e, "redis: primary lost; asking the sentinels again");
        }
    }
}

impl ConnectionLike for FollowingCon {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let (generation, mut con) = self.connection().await?;
            let reply = con.req_packed_command(cmd).await;
            if let Err(e) = &reply {
                self.check(generation, e);
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
            let (generation, mut con) = self.connection().await?;
            let reply = con.req_packed_commands(cmd, offset, count).await;
            if let Err(e) = &reply {
                self.check(generation, e);
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.slot().as_ref().map_or(0, |(_, c)| c.get_db())
    }
}
