//! The only code that knows Redis: key names, Lua scripts, stream fields (STYLE.md §4).
//!
//! | key | type | content | written by | expiry |
//! | --- | --- | --- | --- | --- |
//! | `mcpt:task:{ID}:OWNER` | hash | status msg created updated ttl poll ver owner tool queue result error cancel fence worker pending `in:KEY` `ans:KEY`, argdigest (keyed calls: the id is derived from owner and key) | scripts only | `PEXPIREAT created + ttl` |
//! | `mcpt:queue:{NAME}`, `mcpt:queue:{NAME}:high`, `mcpt:queue:{NAME}:low` | streams, group `workers` | `task` id, `job` JSON (tool, arguments, capabilities, MRTR answers, trace context); one stream per [`Priority`], read high first | create script; XACK + XDEL by start/finish scripts | entries deleted once done |
//! | `mcpt:events:{ID}` | channel | the whole task hash as a flat JSON array, after each change (on one Redis without `WAIT` replicas, only while someone is subscribed) | scripts | — |
//! | `mcpt:tools` | hash | tool name → [`registry::ToolAdvert`] JSON | workers' heartbeats | stale after 15 s |
//! | `mcpt:{tallies}` | hash | process id → [`tally::Tally`] JSON (counts and run-time buckets since the process started) | every gateway and worker, at most every 5 s | dropped by the next writer 5 min after the process' last write |
//! | `mcpt:{tallies}:at` | sorted set | process id → its last write (ms, Redis' clock) | the same script | with its tally |
//! | `mcpt:queues` | set | every queue name a worker has served | worker start | — |
//! | `mcpt:upstreams` | hash | `[[upstream]]` name → [`forward::UpstreamAdvert`] JSON (prompts, resources) | workers' heartbeats | stale after 15 s |
//! | `mcpt:strikes` | hash | strike id (`TOOL` or `TOOL ARG=VALUE`) → [`strikes::Strike`] JSON | `mcp-tasks strike` / `restore` | — |
//! | `mcpt:held:{NAME}` | hash | a struck tool's jobs taken off stream `mcpt:queue:{NAME}`: entry id → the entry's fields | `hold.lua` (worker), `unhold.lua` (restore) | entries leave when released, or when their task's TTL ends (`prune_held.lua`) |
//! | `mcpt:held:{NAME}:ends` | zset | held entry id → when its task's TTL ends (ms) | `hold.lua`, `unhold.lua` | entries leave on release, or with the held job once past (`prune_held.lua`, workers every 30 s) |
//! | `mcpt:delayed:{NAME}` | sorted set | jobs of stream `mcpt:queue:{NAME}` waiting to be tried again (their fields as JSON), scored by when due | `retry.lua` (worker); `due.lua` moves them back | members leave when due |
//! | `mcpt:dead:{NAME}`, `mcpt:dead:{NAME}:at`, `mcpt:dead:{NAME}:rows` | sorted sets, hash | the dead letters of stream `mcpt:queue:{NAME}` (task id → when the letter lapses; task id → when it failed) and each letter's JSON ([`dead::DeadLetter`]: tool, owner, job, reason, attempts) | `finish.lua` (a task failing for good); `mcp-tasks redrive` and the console's Redrive button mark one redriven | a per-tool time (`dead_letters`), at most `MCPT_DEAD_LETTERS_MAX` per stream |
//! | `mcpt:running:{LIMIT}`, `mcpt:line:{LIMIT}`, `mcpt:asked:{LIMIT}` | sorted sets, hash | a concurrency limit's slots (task → lease end), its line (task → arrival), when each waiting task last asked ([`limits`]) | `acquire.lua`, workers' renewals and frees | slots lapse with their lease |
//! | `mcpt:starts:{LIMIT}` | sorted set | a rate limit's starts in the window (task → ms) | `rate.lua` | a window after the last start |
//! | `mcpt:rate:{OWNER}:MINUTE`, `mcpt:active:{OWNER}` | string, sorted set | tasks an owner created that minute; its unfinished tasks (id → when its TTL ends), finished ones pruned when the set reaches `MCPT_LIMIT_ACTIVE_TASKS` | `create.lua` (`limits.lua` in a cluster); the gateway's prune | 61 s after the minute's first; the set with its longest-lived task (never while one has no TTL) |
//! | `mcpt:forward:{NAME}` | list | [`forward::Forwarded`] requests for an upstream's workers | gateways (`LPUSH`) | a minute past the last push |
//! | `mcpt:forwarded:{GATEWAY}` | list | answers to one gateway process' forwarded requests (id + [`forward::ForwardReply`]) | workers (`LPUSH`) | a minute past the last answer |
//!
//! In Redis Cluster (`MCPT_REDIS_URL` naming several nodes, see [`RedisTarget`])
//! a task's hash and channel and its queue's stream carry the tag of the task's shard
//! instead ([`keys::Layout`]), each queue has one stream per shard, events go out with
//! `SPUBLISH` on shard channels, and the owner's limits are counted by a script of their
//! own before the create script (they live in another slot).
//!
//! Every state change is one script (`scripts/*.lua`): it checks the current status (terminal
//! states never change), checks the fencing token where a worker writes, moves
//! `lastUpdatedAt`, bumps `ver` and publishes the new state, atomically (on one Redis
//! without `WAIT` replicas only when the task's channel has subscribers: see
//! `scripts::Scripts::load`).
//! Callers speak domain verbs and get domain types; no `redis::Value` escapes.
//!
//! One small handle per concern ([`handles`]), borrowed from the one [`Store`] and its key
//! table: [`Store::tasks`] (create, read, answer, cancel), [`Store::jobs`] (what workers do
//! to the jobs they run), [`Store::limits`] (slots, rate windows, listener slots, stored
//! bytes), [`Store::sessions`] (2025 sessions), [`Store::controls`] (strikes and held jobs),
//! [`Store::fleet`] (adverts, tallies, queues), [`Store::console`] (the console's reads), [`Store::dead`]
//! (dead letters and redrive);
//! [`forward`] (upstream prompts and resources, asked through a worker), [`events`]
//! (pub/sub fan-out) and `reader` (blocking job reads) have types of their own; [`keys`]
//! spells every key, `scripts` loads every Lua script and `replies` reads their answers
//! into types,
//! `target` reads `MCPT_REDIS_URL`.

#![warn(missing_docs)]
// The one crate allowed to build Redis commands and scripts (clippy.toml steers every
// other crate here).
#![allow(clippy::disallowed_methods)]

pub mod console;
pub mod dead;
pub mod delayed;
mod entries;
pub mod events;
pub mod forward;
pub mod handles;
pub mod idempotency;
mod jobs;
pub mod keys;
pub mod limits;
mod listeners;
pub mod observe;
pub mod priority;
mod queues;
mod reader;
pub mod record;
pub mod registry;
mod replication;
mod replies;
mod scripts;
mod sentinel;
mod sessions;
pub mod stored;
pub mod strikes;
mod sweep;
pub mod tally;
mod target;
mod tasks;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

pub use entries::BadJob;
pub use handles::{ConsoleReads, Controls, DeadLetters, Fleet, Jobs, Limits, Sessions, Tasks};
pub use jobs::{Ask, Delivery, Finish, Job, Start, Write};
pub use priority::Priority;
pub use queues::{Consumer, QueueDepth};
pub use reader::JobReader;
pub use record::TaskRecord;
pub use replication::Replication;
pub use target::{DEFAULT_SENTINEL_PORT, RedisTarget, SentinelTarget};
pub use tasks::{Answer, Created, Differs, Limit, NewTask, OwnerLimits};

/// How many shards tasks and each queue are split into in a Redis Cluster, unless told
/// otherwise (`MCPT_QUEUE_SHARDS`); one Redis always has exactly one.
pub const DEFAULT_QUEUE_SHARDS: u16 = 16;

/// A failure talking to Redis or reading what it holds.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis could not be reached or answered with an error.
    #[error("redis unavailable")]
    Redis(#[source] redis::RedisError),
    /// A script refused a request that breaks an invariant (a reused input key).
    #[error("{0}")]
    Rejected(String),
    /// Redis answered something this version does not understand.
    #[error("unexpected reply from redis: {0}")]
    Corrupt(String),
    /// A change was not confirmed by `MCPT_REDIS_WAIT_REPLICAS` replicas in time, so it may
    /// not survive a failover: retry. A create was cancelled and no id handed out; an answer
    /// or a cancel stands on the primary, and sending it again is harmless (both ignore what
    /// is already done).
    #[error("the {op} was not confirmed by enough replicas in time")]
    Unreplicated {
        /// `create`, `answer` or `cancel`.
        op: &'static str,
    },
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        if e.code() == Some("KEYREUSE") {
            StoreError::Rejected(e.detail().unwrap_or("input key reused").to_owned())
        } else {
            // Every failed Redis call of the store passes through here.
            let kind = if e.is_timeout() {
                "timeout"
            } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
                "connection"
            } else {
                "response"
            };
            observe::report(observe::Observed::RedisError { kind });
            StoreError::Redis(e)
        }
    }
}

/// Result alias for store calls.
pub type StoreResult<T> = Result<T, StoreError>;

/// How long a task's hash outlives its TTL at most (never longer than the TTL itself), so a
/// task that expired unfinished reads as failed for a while before lookups say it is gone.
pub const EXPIRED_RETENTION_MS: u64 = 60_000;

/// How long a task's hash lives from its creation: its TTL, then [`EXPIRED_RETENTION_MS`]
/// at most (never longer than the TTL itself).
pub fn hash_lifetime_ms(ttl_ms: u64) -> u64 {
    ttl_ms.saturating_add(ttl_ms.min(EXPIRED_RETENTION_MS))
}

/// A fresh task id: `tsk_` + 22 base64url chars of a v4 UUID (122 CSPRNG bits, T-42).
pub fn new_task_id() -> String {
    use base64::Engine as _;
    let raw = uuid::Uuid::new_v4();
    let mut id = String::with_capacity(26);
    id.push_str("tsk_");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(raw.as_bytes(), &mut id);
    id
}

/// Whether `id` could be a task id of this server: header-safe characters, bounded length.
pub fn is_plausible_task_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Timeouts for ordinary commands (blocking reads use their own connection).
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest `BLOCK` a [`JobReader`] may ask for.
pub const READ_BLOCK: Duration = Duration::from_secs(2);

/// The connection commands go through: one Redis, every primary of a cluster (routed
/// by key slot, following MOVED and ASK), or the primary the sentinels name (followed
/// through failovers). All reconnect by themselves.
#[derive(Clone)]
enum Con {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(sentinel::FollowingCon),
}

impl redis::aio::ConnectionLike for Con {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Con::Single(c) => c.req_packed_command(cmd),
            Con::Cluster(c) => c.req_packed_command(cmd),
            Con::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Con::Single(c) => c.req_packed_commands(cmd, offset, count),
            Con::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Con::Sentinel(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Con::Single(c) => c.get_db(),
            Con::Cluster(c) => c.get_db(),
            Con::Sentinel(c) => c.get_db(),
        }
    }
}

/// Where connections of their own (pub/sub, blocking reads) come from.
#[derive(Clone)]
pub(crate) enum Backend {
    /// One Redis.
    Single(redis::Client),
    /// Redis Cluster: its seed nodes.
    Cluster { seeds: Vec<redis::ConnectionInfo> },
    /// The primary the sentinels name when the connection is made.
    Sentinel(sentinel::Primary),
}

/// The scripts for `backend`. A change is published only when its channel has
/// subscribers on one Redis with no `WAIT` replicas (`waits_for_replicas` false): where
/// Redis can fail over (Sentinel, a cluster, one URL with replicas to wait for), a
/// subscriber can be on a replica, which the primary's count leaves out
/// (`scripts::Scripts::load`).
fn scripts_for(backend: &Backend, waits_for_replicas: bool) -> std::sync::Arc<scripts::Scripts> {
    let cluster = matches!(backend, Backend::Cluster { .. });
    let gated = matches!(backend, Backend::Single(_)) && !waits_for_replicas;
    std::sync::Arc::new(scripts::Scripts::load(cluster, gated))
}

impl Backend {
    /// Promotions announced so far (Sentinel; always 0 otherwise): a connection made
    /// when this was lower may lead to a former primary.
    pub(crate) fn switches(&self) -> u64 {
        match self {
            Backend::Sentinel(primary) => primary.switches(),
            Backend::Single(_) | Backend::Cluster { .. } => 0,
        }
    }

    /// A client of the one Redis to connect to now; `None` for a cluster.
    pub(crate) async fn single(&self) -> Option<redis::RedisResult<redis::Client>> {
        match self {
            Backend::Single(client) => Some(Ok(client.clone())),
            Backend::Cluster { .. } => None,
            Backend::Sentinel(primary) => Some(primary.client().await),
        }
    }
}

/// Handle to Redis: cheap to clone, reconnects by itself.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    con: Con,
    /// Acknowledged changes wait for replicas (`None`: they do not).
    acked: Option<std::sync::Arc<replication::Acked>>,
    scripts: std::sync::Arc<scripts::Scripts>,
    layout: keys::Layout,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Connect to `url` (one Redis, or a cluster with [`DEFAULT_QUEUE_SHARDS`]).
    ///
    /// # Errors
    /// A malformed URL, or Redis unreachable at start.
    pub async fn connect(url: &str) -> StoreResult<Store> {
        Self::connect_sharded(url, DEFAULT_QUEUE_SHARDS).await
    }

    /// Connect to `url`; in a cluster, tasks and queues are split into `shards` shards
    /// (`MCPT_QUEUE_SHARDS`; ignored for one Redis, which has one).
    ///
    /// # Errors
    /// A malformed URL, or Redis unreachable at start.
    pub async fn connect_sharded(url: &str, shards: u16) -> StoreResult<Store> {
        let bad = || {
            StoreError::Redis(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "not a redis URL or cluster node list",
            )))
        };
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(2));
        match RedisTarget::parse(url).ok_or_else(bad)? {
            RedisTarget::Sentinel(target) => {
                let primary = sentinel::Primary::new(&target)?;
                primary.watch_switches();
                let con = sentinel::FollowingCon::connect(primary.clone(), config).await?;
                let backend = Backend::Sentinel(primary);
                Ok(Store {
                    scripts: scripts_for(&backend, false),
                    backend,
                    con: Con::Sentinel(con),
                    acked: None,
                    layout: keys::Layout::Standalone,
                })
            }
            RedisTarget::Single(url) => {
                let client = redis::Client::open(url.as_str())?;
                let con = ConnectionManager::new_with_config(client.clone(), config).await?;
                let backend = Backend::Single(client);
                Ok(Store {
                    scripts: scripts_for(&backend, false),
                    backend,
                    con: Con::Single(con),
                    acked: None,
                    layout: keys::Layout::Standalone,
                })
            }
            RedisTarget::Cluster(nodes) => {
                let seeds = nodes
                    .iter()
                    .map(|n| redis::IntoConnectionInfo::into_connection_info(n.as_str()))
                    .collect::<redis::RedisResult<Vec<_>>>()?;
                let client = redis::cluster::ClusterClientBuilder::new(seeds.clone())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .build()?;
                let con = client.get_async_connection().await?;
                let backend = Backend::Cluster { seeds };
                Ok(Store {
                    scripts: scripts_for(&backend, false),
                    backend,
                    con: Con::Cluster(con),
                    acked: None,
                    layout: keys::Layout::cluster(shards),
                })
            }
        }
    }

    /// Make every change a client is told about wait for `replication.replicas` replicas
    /// (see `replication.rs` for what a timeout means); in a cluster, replicas of the
    /// primary that holds the change.
    ///
    /// # Errors
    /// The cluster's seed nodes do not make a client.
    pub fn with_replication(mut self, replication: Replication) -> StoreResult<Store> {
        self.scripts = scripts_for(&self.backend, replication.replicas > 0);
        self.acked = if replication.replicas == 0 {
            None
        } else {
            Some(replication::Acked::new(self.backend.clone(), replication)?)
        };
        Ok(self)
    }

    /// Run `script` (whose keys share `key`'s slot) as a change a client is told about: on
    /// the shared connection, or (when waiting for replicas) on a connection of its own
    /// followed by `WAIT`. Returns the reply and whether enough replicas confirmed it
    /// (always `true` without waiting).
    pub(crate) async fn acknowledged(
        &self,
        script: &redis::ScriptInvocation<'_>,
        key: &str,
        op: &'static str,
    ) -> StoreResult<(Vec<redis::Value>, bool)> {
        match &self.acked {
            None => {
                let mut con = self.con.clone();
                Ok((script.invoke_async(&mut con).await?, true))
            }
            Some(acked) => {
                let mut con = acked.take().await?;
                let reply = script.invoke_async(&mut con).await?;
                let confirmed = con.replicated(key, op).await;
                Ok((reply, confirmed))
            }
        }
    }

    /// Where connections of their own (pub/sub, blocking reads) come from.
    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// How keys are laid out (one Redis, or a cluster's shards).
    pub fn layout(&self) -> &keys::Layout {
        &self.layout
    }

    /// A fresh task id for this layout (in a cluster it names the task's shard).
    pub fn new_task_id(&self) -> String {
        self.layout.new_task_id()
    }

    /// The task hash of `id` for `owner` (the worker keeps it to hand a task over).
    pub fn task_key(&self, id: &str, owner: &str) -> String {
        self.layout.task_key(id, owner)
    }

    /// Round trip to Redis (readiness).
    ///
    /// # Errors
    /// Redis unreachable.
    pub async fn ping(&self) -> StoreResult<()> {
        let mut con = self.con.clone();
        let _: String = redis::cmd("PING").query_async(&mut con).await?;
        Ok(())
    }

    /// Warn loudly when Redis may evict keys: task state must never be evicted.
    pub async fn warn_if_evicting(&self) {
        let mut con = self.con.clone();
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut con)
            .await;
        if let Ok(policy) = reply
            && let Some(policy) = policy.get(1)
            && policy != "noeviction"
        {
            tracing::warn!(
                maxmemory_policy = %policy,
                "redis may evict task state under memory pressure: set maxmemory-policy noeviction"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T-42: 10,000 ids are distinct and header-safe, and each carries a v4 UUID's 122
    /// random bits (every random bit position takes both values across the sample).
    #[test]
    fn task_ids_are_header_safe_distinct_and_random() {
        use base64::Engine as _;
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| new_task_id()).collect();
        assert_eq!(ids.len(), 10_000);
        let (mut ones, mut zeros) = (0u128, 0u128);
        for id in &ids {
            assert!(is_plausible_task_id(id), "{id}");
            assert_eq!(id.len(), 4 + 22);
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{id}"
            );
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(&id[4..])
                .expect("base64url");
            let bits = u128::from_be_bytes(raw.try_into().expect("16 bytes"));
            ones |= bits;
            zeros |= !bits;
        }
        // UUID v4 fixes 6 bits (version and variant); the other 122 vary.
        let varying = (ones & zeros).count_ones();
        assert!(varying >= 122, "only {varying} bits vary");
    }
}
