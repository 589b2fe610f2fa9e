//! Redis behind Sentinel: the primary is whichever node the sentinels name now, and the
//! store's connection follows it through a failover.
//!
//! [`Primary`] asks the sentinels (all of them; the latest failover's answer wins) and
//! checks the node's `ROLE`. [`FollowingCon`] keeps one auto-reconnecting connection to that primary and
//! drops it when a reply says the node is gone or demoted (connection lost or refused,
//! timeout, `-READONLY`): that command fails (the caller's request gets a retryable error)
//! and the next one asks the sentinels again, so commands reach the promoted replica as
//! soon as the sentinels have promoted it. Pub/sub and blocking reads ask [`Primary`] each
//! time they connect.
//!
//! The sentinels also announce each promotion (`+switch-master` on their pub/sub):
//! [`Primary::watch_switches`] listens on every sentinel, and a connection made before the
//! latest announcement is dropped before its next command. That matters when the old
//! primary is still up (a manual `SENTINEL FAILOVER`, or a partition that heals): until the
//! sentinels turn it into a replica it accepts writes, which its resync then throws away.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{
    ConnectionAddr, ErrorKind, IntoConnectionInfo as _, RedisError, RedisResult, ServerErrorKind,
};

use crate::CONNECT_TIMEOUT;
use crate::target::SentinelTarget;

/// How long one sentinel may take to answer: every sentinel is asked at once and all
/// answers are awaited, so one that is down must not hold up every reconnect for long.
const SENTINEL_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// The primary the sentinels name.
#[derive(Clone)]
pub(crate) struct Primary {
    /// Each sentinel (with the sentinels' credentials).
    sentinels: Arc<Vec<redis::ConnectionInfo>>,
    master: Arc<str>,
    /// How to reach a node: the primary's credentials, database and TLS.
    node: Arc<NodeSettings>,
    /// How many promotions of our primary the sentinels announced.
    switches: Arc<AtomicU64>,
}

/// What a connection to the primary needs besides its address.
struct NodeSettings {
    redis: redis::RedisConnectionInfo,
    tls: bool,
}

impl NodeSettings {
    fn connection_info(&self, host: String, port: u16) -> RedisResult<redis::ConnectionInfo> {
        Ok(address(host, port, self.tls)
            .into_connection_info()?
            .set_redis_settings(self.redis.clone()))
    }
}

fn address(host: String, port: u16, tls: bool) -> ConnectionAddr {
    if tls {
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host, port)
    }
}

/// One sentinel's view of the primary.
struct Named {
    host: String,
    port: u16,
    /// The failover that made it primary: a sentinel that missed the latest failover
    /// names the old primary under a lower epoch.
    epoch: u64,
}

impl Primary {
    pub(crate) fn new(target: &SentinelTarget) -> RedisResult<Primary> {
        let mut auth = redis::RedisConnectionInfo::default();
        if let Some(user) = &target.sentinel_username {
            auth = auth.set_username(user);
        }
        if let Some(password) = &target.sentinel_password {
            auth = auth.set_password(password);
        }
        let sentinels = target
            .sentinels
            .iter()
            .map(|(host, port)| {
                address(host.clone(), *port, target.tls)
                    .into_connection_info()
                    .map(|info| info.set_redis_settings(auth.clone()))
            })
            .collect::<RedisResult<Vec<_>>>()?;
        let mut redis = redis::RedisConnectionInfo::default().set_db(target.db);
        if let Some(user) = &target.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &target.password {
            redis = redis.set_password(password);
        }
        Ok(Primary {
            sentinels: Arc::new(sentinels),
            master: target.master.as_str().into(),
            node: Arc::new(NodeSettings {
                redis,
                tls: target.tls,
            }),
            switches: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A client for the node the sentinels name primary now: every sentinel is asked at
    /// once, the answer of the latest failover (highest `config-epoch`) wins, and that
    /// node must say it is primary (`ROLE`).
    ///
    /// Not redis-rs' `SentinelClient`, which takes the first sentinel's answer: right
    /// after a failover a sentinel that has not heard of it yet names the old primary,
    /// which (when it is still up) says it is primary until it is reconfigured, so the
    /// store would write there and lose those writes at its resync.
    pub(crate) async fn client(&self) -> RedisResult<redis::Client> {
        let asks = self.sentinels.iter().map(|sentinel| async move {
            tokio::time::timeout(SENTINEL_TIMEOUT, self.named_by(sentinel))
                .await
                .unwrap_or_else(|_| Err(RedisError::from((ErrorKind::Io, "sentinel timed out"))))
        });
        let mut latest: Option<Named> = None;
        let mut failed = None;
        for answer in futures_util::future::join_all(asks).await {
            match answer {
                Ok(named) => {
                    if latest.as_ref().is_none_or(|l| named.epoch > l.epoch) {
                        latest = Some(named);
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        let Some(named) = latest else {
            return Err(failed
                .unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no sentinel configured"))));
        };
        let client = redis::Client::open(self.node.connection_info(named.host, named.port)?)?;
        let mut con =
            tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
                .await
                .map_err(|_| {
                    RedisError::from((ErrorKind::Io, "the primary did not answer in time"))
                })??;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut con).await?;
        match role.first() {
            Some(redis::Value::BulkString(r)) if r == b"master" => Ok(client),
            _ => Err(RedisError::from((
                ErrorKind::Io,
                "the node the sentinels name is not primary (yet)",
            ))),
        }
    }

    /// What one sentinel says about our primary (`SENTINEL MASTER NAME`).
    async fn named_by(&self, sentinel: &redis::ConnectionInfo) -> RedisResult<Named> {
        let client = redis::Client::open(sentinel.clone())?;
        let mut con = client.get_multiplexed_async_connection().await?;
        let fields: HashMap<String, String> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(&*self.master)
            .query_async(&mut con)
            .await?;
        let field = |name: &str| fields.get(name).map(String::as_str);
        // Down: no primary to name. Failing over: the leading sentinel keeps naming the old
        // primary, under the new epoch, until the failover ends.
        let busy = ["s_down", "o_down", "failover_in_progress"];
        if field("flags").is_some_and(|f| f.split(',').any(|f| busy.contains(&f))) {
            return Err(RedisError::from((
                ErrorKind::Io,
                "the sentinel sees the primary down or failing over",
            )));
        }
        match (field("ip"), field("port").and_then(|p| p.parse().ok())) {
            (Some(ip), Some(port)) => Ok(Named {
                host: ip.to_owned(),
                port,
                epoch: field("config-epoch")
                    .and_then(|e| e.parse().ok())
                    .unwrap_or(0),
            }),
            _ => Err(RedisError::from((
                ErrorKind::Io,
                "the sentinel names no primary",
            ))),
        }
    }

    /// How many promotions the sentinels have announced so far: a connection made when it
    /// was lower leads to a former primary.
    pub(crate) fn switches(&self) -> u64 {
        self.switches.load(Ordering::Acquire)
    }

    /// Listen for `+switch-master` on every sentinel, for as long as this primary (or a
    /// clone) is kept; a sentinel that cannot be reached is tried again every second.
    pub(crate) fn watch_switches(&self) {
        for info in self.sentinels.iter() {
            let (info, master) = (info.clone(), self.master.clone());
            let switches = Arc::downgrade(&self.switches);
            tokio::spawn(async move {
                while switches.strong_count() > 0 {
                    if let Err(e) = listen(&info, &master, &switches).await {
                        tracing::debug!(error = %e, sentinel = %info.addr(), "redis: sentinel announcements unavailable");
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
        }
    }
}

/// How long a listener waits for an announcement before checking it is still wanted.
const LISTEN_TICK: Duration = Duration::from_secs(5);

/// Hear one sentinel's `+switch-master` announcements ("NAME OLD_IP OLD_PORT NEW_IP
/// NEW_PORT") and count those about `master`, until the connection fails or nobody keeps
/// the count any more.
async fn listen(
    info: &redis::ConnectionInfo,
    master: &str,
    switches: &Weak<AtomicU64>,
) -> RedisResult<()> {
    let client = redis::Client::open(info.clone())?;
    let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub())
        .await
        .map_err(|_| RedisError::from((ErrorKind::Io, "sentinel connect timed out")))??;
    pubsub.subscribe("+switch-master").await?;
    let mut messages = pubsub.on_message();
    loop {
        let message = match tokio::time::timeout(LISTEN_TICK, messages.next()).await {
            Ok(Some(message)) => message,
            Ok(None) => {
                return Err(RedisError::from((
                    ErrorKind::Io,
                    "sentinel connection closed",
                )));
            }
            Err(_) => {
                if switches.strong_count() == 0 {
                    return Ok(());
                }
                continue;
            }
        };
        let payload: String = message.get_payload().unwrap_or_default();
        let mut words = payload.split(' ');
        if words.next() != Some(master) {
            continue;
        }
        let Some(switches) = switches.upgrade() else {
            return Ok(());
        };
        // Several sentinels announce the same promotion: each bump only makes connections
        // check again, so counting it more than once costs a reconnect at most.
        switches.fetch_add(1, Ordering::AcqRel);
        let new: Vec<&str> = words.skip(2).collect();
        tracing::info!(new_primary = %new.join(":"), sentinel = %info.addr(), "redis: the sentinels announced a new primary");
    }
}

/// Whether a failed command says the primary is gone or no longer primary.
pub(crate) fn primary_lost(e: &RedisError) -> bool {
    e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_io_error()
        || e.is_timeout()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// A connection with its generation and the announcements made before it.
#[derive(Clone)]
struct Current {
    generation: u64,
    switches: u64,
    con: ConnectionManager,
}

/// A connection to the current primary, replaced after the primary is lost.
#[derive(Clone)]
pub(crate) struct FollowingCon {
    primary: Primary,
    config: ConnectionManagerConfig,
    /// The connection, its generation and [`Primary::switches`] when it was made; `None`
    /// after a loss, until the next command.
    current: Arc<Mutex<Option<Current>>>,
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

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        // Holds no invariant a panic elsewhere could break.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current connection, unless a promotion was announced since it was made.
    fn fresh(&self) -> Option<Current> {
        let switches = self.primary.switches();
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|c| c.switches != switches) {
            *slot = None;
        }
        slot.clone()
    }

    async fn connection(&self) -> RedisResult<(u64, ConnectionManager)> {
        if let Some(c) = self.fresh() {
            return Ok((c.generation, c.con));
        }
        let mut generation = self.switching.lock().await;
        if let Some(c) = self.fresh() {
            return Ok((c.generation, c.con));
        }
        // Read before asking: an announcement during the round makes the next command
        // ask again.
        let switches = self.primary.switches();
        let client = self.primary.client().await?;
        let addr = client.get_connection_info().addr().to_string();
        let con = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        *generation += 1;
        *self.slot() = Some(Current {
            generation: *generation,
            switches,
            con: con.clone(),
        });
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
        if slot.as_ref().is_some_and(|c| c.generation == generation) {
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
        self.slot().as_ref().map_or(0, |c| c.con.get_db())
    }
}
