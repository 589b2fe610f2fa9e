//! The only code that knows Redis: key names, Lua scripts, stream fields (STYLE.md §4).
//!
//! | key | type | content | written by | expiry |
//! | --- | --- | --- | --- | --- |
//! | `mcpt:task:{ID}:OWNER` | hash | status msg created updated ttl poll ver owner tool queue result error cancel fence worker pending `in:KEY` `ans:KEY` | scripts only | `PEXPIREAT created + ttl` |
//! | `mcpt:queue:{NAME}` | stream, group `workers` | `task` id, `job` JSON (tool, arguments, capabilities, MRTR answers, trace context) | create script; XACK + XDEL by start/finish scripts | entries deleted once done |
//! | `mcpt:events:{ID}` | channel | the whole task hash as a flat JSON array, after each change | scripts | — |
//! | `mcpt:tools` | hash | tool name → [`registry::ToolAdvert`] JSON | workers' heartbeats | stale after 15 s |
//!
//! In Redis Cluster (`MCPT_REDIS_URL` naming several nodes, see [`RedisTarget`])
//! a task's hash and channel and its queue's stream carry the tag of the task's shard
//! instead ([`keys::Layout`]), each queue has one stream per shard, events go out with
//! `SPUBLISH` on shard channels, and the owner's limits are counted by a script of their
//! own before the create script (they live in another slot).
//!
//! Every state change is one script (`scripts/*.lua`): it checks the current status (terminal
//! states never change), checks the fencing token where a worker writes, moves
//! `lastUpdatedAt`, bumps `ver` and publishes the new state, atomically.
//! Callers speak domain verbs and get domain types; no `redis::Value` escapes.

pub mod events;
pub mod keys;
pub mod observe;
mod reader;
pub mod record;
pub mod registry;
mod scripts;
mod target;

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use reader::JobReader;
pub use record::TaskRecord;
pub use target::RedisTarget;

/// How many shards tasks and each queue are split into in a Redis Cluster, unless told
/// otherwise (`MCPT_QUEUE_SHARDS`); one Redis always has exactly one.
pub const DEFAULT_QUEUE_SHARDS: u16 = 16;
use registry::ToolAdvert;

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

/// Result alias for store calls.
pub type StoreResult<T> = Result<T, StoreError>;

/// What the gateway stores for a new task and its job.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    /// Fresh id from [`new_task_id`].
    pub id: &'a str,
    /// Lifetime; `None` never expires.
    pub ttl_ms: Option<u64>,
    /// Suggested poll interval.
    pub poll_ms: u64,
    /// Principal digest.
    pub owner: &'a str,
    /// The owner's limits to enforce.
    pub limits: OwnerLimits,
    /// Queue to enqueue on.
    pub queue: &'a str,
    /// The job.
    pub job: &'a Job,
}

/// Per-owner limits checked when a task is created (0 turns one off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnerLimits {
    /// Tasks per minute.
    pub per_minute: u32,
    /// Unfinished tasks at once.
    pub active: u32,
}

/// Which limit refused a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`OwnerLimits::per_minute`].
    PerMinute,
    /// [`OwnerLimits::active`].
    Active,
}

/// Outcome of [`Store::create_task`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Created at this time (ms since the epoch, Redis clock).
    At(i64),
    /// Refused by the owner's limit; nothing was written.
    Limited(Limit),
}

/// The stream entry a worker runs: everything the handler needs besides the task hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Tool name.
    pub tool: String,
    /// Validated arguments.
    pub args: Value,
    /// Client capabilities of the originating `tools/call` (T-45).
    pub caps: Value,
    /// Answers to the tool's MRTR round, if it has one.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub pre: serde_json::Map<String, Value>,
    /// W3C `traceparent` of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Digest of the caller's principal (`anonymous` without authentication); never the
    /// credential.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
}

/// A job read from a queue.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Queue name.
    pub queue: String,
    /// The stream it was read from: the queue's stream, or in a cluster the queue's stream
    /// of the task's shard. Entry ids are unique only within one stream.
    pub stream: String,
    /// Stream entry id.
    pub entry: String,
    /// Task id.
    pub task_id: String,
    /// The task's owner digest (part of its key).
    pub owner: String,
    /// The job, or why it could not be decoded.
    pub job: Result<Job, String>,
    /// Delivered for the first time (read as new), not reclaimed from another worker.
    pub fresh: bool,
}

/// Outcome of [`Store::start`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Run the handler; writes must carry this fencing token.
    Run {
        /// Fencing token.
        fence: u64,
        /// `createdAt + ttlMs` in ms since the epoch (Redis clock), if the task expires.
        deadline_ms: Option<i64>,
    },
    /// Nothing to run (gone, terminal, or cancelled before start); the entry was acknowledged.
    Skip(String),
}

/// Outcome of a worker's write ([`Store::set_message`], [`Store::ask`], [`Store::finish`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Written.
    Ok,
    /// The task hash is gone (expired).
    Gone,
    /// The task is already terminal (e.g. cancelled while waiting for input).
    Terminal,
    /// Another worker holds the task now; this one must stop.
    Fenced,
}

/// Outcome of [`Store::ask`].
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// Every key has an answer (key → answer JSON), in request order.
    Answered(Vec<(String, String)>),
    /// At least one key is outstanding; wait for the task's events.
    Waiting,
    /// The write was refused.
    Refused(Write),
}

/// Outcome of [`Store::answer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Answers recorded (or ignored: keys not outstanding, terminal task).
    Ok,
    /// No such task for this owner.
    NotFound,
    /// The answer for an outstanding key has the wrong shape; nothing was recorded.
    Invalid {
        /// The key.
        key: String,
        /// The method of the request it answers.
        method: String,
    },
}

/// How a worker ends a task.
#[derive(Debug, Clone)]
pub enum Finish {
    /// `completed` with this `CallToolResult` JSON.
    Completed(String),
    /// `failed` with this JSON-RPC error JSON and status message.
    Failed {
        /// Error object JSON.
        error: String,
        /// Status message.
        message: String,
    },
    /// `cancelled`.
    Cancelled,
}

/// How long a task's hash outlives its TTL at most (never longer than the TTL itself), so a
/// task that expired unfinished reads as failed for a while before lookups say it is gone.
pub const EXPIRED_RETENTION_MS: u64 = 60_000;

/// A fresh task id: `tsk_` + 22 base64url chars of a v4 UUID (122 CSPRNG bits, T-42).
pub fn new_task_id() -> String {
    use base64::Engine as _;
    let raw = uuid::Uuid::new_v4();
    format!(
        "tsk_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw.as_bytes())
    )
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

/// The connection commands go through: one Redis, or every primary of a cluster (routed
/// by key slot, following MOVED and ASK). Both reconnect by themselves.
#[derive(Clone)]
enum Con {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Con {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Con::Single(c) => c.req_packed_command(cmd),
            Con::Cluster(c) => c.req_packed_command(cmd),
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
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Con::Single(c) => c.get_db(),
            Con::Cluster(c) => c.get_db(),
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
}

/// Handle to Redis: cheap to clone, reconnects by itself.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    con: Con,
    scripts: std::sync::Arc<scripts::Scripts>,
    layout: keys::Layout,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

fn flat_strings(v: Vec<redis::Value>) -> StoreResult<Vec<String>> {
    v.into_iter()
        .map(|x| {
            redis::from_redis_value::<String>(x).map_err(|e| StoreError::Corrupt(e.to_string()))
        })
        .collect()
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
        match RedisTarget::parse(url).ok_or_else(bad)? {
            RedisTarget::Single(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_secs(2));
                let con = ConnectionManager::new_with_config(client.clone(), config).await?;
                Ok(Store {
                    backend: Backend::Single(client),
                    con: Con::Single(con),
                    scripts: std::sync::Arc::new(scripts::Scripts::load(false)),
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
                Ok(Store {
                    backend: Backend::Cluster { seeds },
                    con: Con::Cluster(con),
                    scripts: std::sync::Arc::new(scripts::Scripts::load(true)),
                    layout: keys::Layout::cluster(shards),
                })
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

    /// Create the task hash (with expiry) and enqueue its job, atomically; returns `createdAt` ms.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "create", task.id = %t.id))]
    pub async fn create_task(&self, t: &NewTask<'_>) -> StoreResult<Created> {
        let job = serde_json::to_string(t.job).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let ttl = t.ttl_ms.map(|v| v.to_string()).unwrap_or_default();
        let minute = mcp_tasks_protocol::time::now_millis().max(0) as u64 / 60_000;
        let mut con = self.con.clone();
        if self.layout.is_cluster() {
            return self.create_in_cluster(t, &ttl, job, minute).await;
        }
        let reply: Vec<redis::Value> = self
            .scripts
            .create
            .key(keys::task_key(t.id, t.owner))
            .key(keys::queue_key(t.queue))
            .key(keys::rate_key(t.owner, minute))
            .key(keys::active_key(t.owner))
            .arg(t.id)
            .arg(ttl)
            .arg(t.poll_ms)
            .arg(t.owner)
            .arg(&t.job.tool)
            .arg(t.queue)
            .arg(job)
            .arg(t.ttl_ms.map_or(0, |ttl| ttl.min(EXPIRED_RETENTION_MS)))
            .arg(t.limits.per_minute)
            .arg(t.limits.active)
            .invoke_async(&mut con)
            .await?;
        created(flat_strings(reply)?)
    }

    /// [`Store::create_task`] in a cluster: the owner's limits (their own slot) are checked
    /// and counted first, then the task and its job are written in the shard's slot. A
    /// create that fails after its limits were counted takes them back (best effort).
    async fn create_in_cluster(
        &self,
        t: &NewTask<'_>,
        ttl: &str,
        job: String,
        minute: u64,
    ) -> StoreResult<Created> {
        let mut con = self.con.clone();
        let limited = t.limits.per_minute > 0 || t.limits.active > 0;
        if limited {
            let reply: Vec<redis::Value> = self
                .scripts
                .limits
                .key(keys::rate_key(t.owner, minute))
                .key(keys::active_key(t.owner))
                .arg(t.id)
                .arg(ttl)
                .arg(t.limits.per_minute)
                .arg(t.limits.active)
                .invoke_async(&mut con)
                .await?;
            let reply = flat_strings(reply)?;
            if reply.first().is_some_and(|s| s == "limit") {
                return created(reply);
            }
        }
        let reply: redis::RedisResult<Vec<redis::Value>> = self
            .scripts
            .create
            .key(self.layout.task_key(t.id, t.owner))
            .key(self.layout.task_stream(t.id, t.queue))
            .arg(t.id)
            .arg(ttl)
            .arg(t.poll_ms)
            .arg(t.owner)
            .arg(&t.job.tool)
            .arg(t.queue)
            .arg(job)
            .arg(t.ttl_ms.map_or(0, |ttl| ttl.min(EXPIRED_RETENTION_MS)))
            .arg(0)
            .arg(0)
            .invoke_async(&mut con)
            .await;
        match reply {
            Ok(reply) => created(flat_strings(reply)?),
            Err(e) => {
                if limited {
                    // Not created: give the counts back, so a failure is not a creation.
                    let mut undo = redis::pipe();
                    if t.limits.per_minute > 0 {
                        undo.decr(keys::rate_key(t.owner, minute), 1).ignore();
                    }
                    if t.limits.active > 0 {
                        undo.zrem(keys::active_key(t.owner), t.id).ignore();
                    }
                    let undone: redis::RedisResult<()> = undo.query_async(&mut con).await;
                    if let Err(undo_error) = undone {
                        tracing::debug!(error = %undo_error, "owner limits not given back");
                    }
                }
                Err(e.into())
            }
        }
    }

    /// Drop the finished (or vanished) tasks from `owner`'s unfinished set; returns how
    /// many left it. Run when the owner reaches the limit, so the count is exact then.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn prune_active(&self, owner: &str) -> StoreResult<usize> {
        let key = keys::active_key(owner);
        let mut con = self.con.clone();
        let ids: Vec<String> = con.zrange(&key, 0, -1).await?;
        if ids.is_empty() {
            return Ok(0);
        }
        let statuses: Vec<Option<String>> = if self.layout.is_cluster() {
            // A pipeline must stay in one slot in a cluster: one command per task, sent
            // together on the multiplexed connections.
            let reads = ids.iter().map(|id| {
                let mut con = self.con.clone();
                let key = self.layout.task_key(id, owner);
                async move { con.hget::<_, _, Option<String>>(key, "status").await }
            });
            futures_util::future::try_join_all(reads).await?
        } else {
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.hget(keys::task_key(id, owner), "status");
            }
            pipe.query_async(&mut con).await?
        };
        let done: Vec<&String> = ids
            .iter()
            .zip(&statuses)
            .filter(|(_, s)| {
                s.as_deref()
                    .is_none_or(|s| matches!(s, "completed" | "failed" | "cancelled"))
            })
            .map(|(id, _)| id)
            .collect();
        if !done.is_empty() {
            let _: () = con.zrem(&key, &done).await?;
        }
        Ok(done.len())
    }

    /// Hold (or renew) listener `id`'s slot among `owner`'s open streams for `hold`;
    /// `false` when the owner already has `most` open (0: no limit).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn hold_listener(
        &self,
        owner: &str,
        id: &str,
        most: u32,
        hold: Duration,
    ) -> StoreResult<bool> {
        let mut con = self.con.clone();
        let held: i64 = self
            .scripts
            .listener
            .key(keys::listeners_key(owner))
            .arg(id)
            .arg(most)
            .arg(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX))
            .invoke_async(&mut con)
            .await?;
        Ok(held == 1)
    }

    /// Give listener `id`'s slot back.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn release_listener(&self, owner: &str, id: &str) -> StoreResult<()> {
        let mut con = self.con.clone();
        let _: () = con.zrem(keys::listeners_key(owner), id).await?;
        Ok(())
    }

    /// Read one task (one `HGETALL`); `None` when unknown or expired.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "get", task.id = %id))]
    pub async fn get_task(&self, id: &str, owner: &str) -> StoreResult<Option<TaskRecord>> {
        let mut con = self.con.clone();
        let fields: Vec<(String, String)> = con.hgetall(self.layout.task_key(id, owner)).await?;
        Ok(TaskRecord::from_fields(id, fields))
    }

    /// Read several tasks in one pipeline.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn get_tasks(
        &self,
        ids: &[String],
        owner: &str,
    ) -> StoreResult<Vec<Option<TaskRecord>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let replies: Vec<Vec<(String, String)>> = if self.layout.is_cluster() {
            // One slot per pipeline in a cluster: one command per task, sent together.
            let reads = ids.iter().map(|id| {
                let mut con = self.con.clone();
                let key = self.layout.task_key(id, owner);
                async move { con.hgetall::<_, Vec<(String, String)>>(key).await }
            });
            futures_util::future::try_join_all(reads).await?
        } else {
            let mut pipe = redis::pipe();
            for id in ids {
                pipe.hgetall(keys::task_key(id, owner));
            }
            let mut con = self.con.clone();
            pipe.query_async(&mut con).await?
        };
        Ok(ids
            .iter()
            .zip(replies)
            .map(|(id, fields)| TaskRecord::from_fields(id, fields))
            .collect())
    }

    /// `tasks/update`: record `answers` (key, shape mask, answer JSON) for `owner`'s task.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "answer", task.id = %id))]
    pub async fn answer(
        &self,
        id: &str,
        owner: &str,
        answers: &[(String, u8, String)],
    ) -> StoreResult<Answer> {
        let mut inv = self.scripts.answer.key(self.layout.task_key(id, owner));
        inv.arg(self.layout.events_channel(id)).arg(owner);
        for (key, mask, json) in answers {
            inv.arg(key).arg(*mask).arg(json);
        }
        let mut con = self.con.clone();
        let reply = flat_strings(inv.invoke_async(&mut con).await?)?;
        match reply.as_slice() {
            [ok] if ok == "ok" => Ok(Answer::Ok),
            [nf] if nf == "notfound" => Ok(Answer::NotFound),
            [inv, key, method] if inv == "invalid" => Ok(Answer::Invalid {
                key: key.clone(),
                method: method.clone(),
            }),
            other => Err(StoreError::Corrupt(format!("answer: {other:?}"))),
        }
    }

    /// `tasks/cancel` for `owner`; `false` when there is no such task for that owner.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "cancel", task.id = %id))]
    pub async fn cancel(&self, id: &str, owner: &str) -> StoreResult<bool> {
        let mut con = self.con.clone();
        let key = self.layout.task_key(id, owner);
        let mut inv = self.scripts.cancel.key(&key);
        inv.arg(self.layout.events_channel(id))
            .arg(owner)
            .arg(keys::GROUP);
        if self.layout.is_cluster() {
            // A cluster runs a script only on the keys it declares: read which stream the
            // job is on first (it never changes; the script checks it).
            let stream: Option<String> = con.hget(&key, "stream").await?;
            if let Some(stream) = stream {
                inv.key(stream);
            }
            inv.arg("declared");
        }
        let reply = flat_strings(inv.invoke_async(&mut con).await?)?;
        let found = reply.first().is_some_and(|s| s == "ok");
        if let Some(tool) = reply.get(1) {
            // Ended here, not by a worker: counted here.
            observe::report(observe::Observed::CancelledUnrun { tool });
        }
        Ok(found)
    }

    /// Store a 2025-era session record for `ttl` (idle timeout).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn put_session(&self, id: &str, record: &str, ttl: Duration) -> StoreResult<()> {
        let mut con = self.con.clone();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let _: () = con.pset_ex(keys::session_key(id), record, ttl_ms).await?;
        Ok(())
    }

    /// Read a session record and restart its idle timeout, in one command (`GETEX`);
    /// `None` when it never existed, expired or was ended.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn touch_session(&self, id: &str, ttl: Duration) -> StoreResult<Option<String>> {
        let mut con = self.con.clone();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let record: Option<String> = redis::cmd("GETEX")
            .arg(keys::session_key(id))
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut con)
            .await?;
        Ok(record)
    }

    /// End a session; `false` when there was none.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn end_session(&self, id: &str) -> StoreResult<bool> {
        let mut con = self.con.clone();
        let (removed,): (u64,) = redis::pipe()
            .del(keys::session_key(id))
            .del(keys::session_tasks_key(id))
            .ignore()
            .query_async(&mut con)
            .await?;
        Ok(removed > 0)
    }

    /// Record a task a 2025 session created as a task: in the session's set (its `GET`
    /// stream, kept `session_ttl`) and in `scope`'s list (`tasks/list`, kept `listed_ttl`,
    /// at least as long as any task lives). One round trip.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn note_session_task(
        &self,
        session_id: &str,
        scope: &str,
        task_id: &str,
        created_ms: i64,
        session_ttl: Duration,
        listed_ttl: Duration,
    ) -> StoreResult<()> {
        let set = keys::session_tasks_key(session_id);
        let listed = keys::listed_key(scope);
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1);
        // Two keys of two slots: one pipeline each (a cluster refuses a cross-slot one), sent
        // together.
        let (mut a, mut b) = (self.con.clone(), self.con.clone());
        let mut session = redis::pipe();
        session
            .sadd(&set, task_id)
            .ignore()
            .pexpire(&set, ms(session_ttl))
            .ignore();
        let mut list = redis::pipe();
        list.zadd(&listed, task_id, created_ms)
            .ignore()
            .pexpire(&listed, ms(listed_ttl))
            .ignore();
        let (session, list) = tokio::join!(
            session.query_async::<()>(&mut a),
            list.query_async::<()>(&mut b)
        );
        session?;
        list?;
        Ok(())
    }

    /// The tasks of session `session_id`, restarting the set's expiry (`ttl`).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn session_tasks(&self, session_id: &str, ttl: Duration) -> StoreResult<Vec<String>> {
        let set = keys::session_tasks_key(session_id);
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1);
        let mut con = self.con.clone();
        let (ids,): (Vec<String>,) = redis::pipe()
            .smembers(&set)
            .pexpire(&set, ttl_ms)
            .ignore()
            .query_async(&mut con)
            .await?;
        Ok(ids)
    }

    /// Forget tasks of session `session_id` (ended or expired ones).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn forget_session_tasks(
        &self,
        session_id: &str,
        task_ids: &[String],
    ) -> StoreResult<()> {
        if task_ids.is_empty() {
            return Ok(());
        }
        let mut con = self.con.clone();
        let _: () = con
            .srem(keys::session_tasks_key(session_id), task_ids)
            .await?;
        Ok(())
    }

    /// Remember that request `request_id` of session `session_id` runs as task `task_id`.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn remember_call(
        &self,
        session_id: &str,
        request_id: &str,
        task_id: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let mut con = self.con.clone();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let _: () = con
            .pset_ex(keys::call_key(session_id, request_id), task_id, ttl_ms)
            .await?;
        Ok(())
    }

    /// Forget the task of request `request_id` of session `session_id` (the call ended).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn forget_call(&self, session_id: &str, request_id: &str) -> StoreResult<()> {
        let mut con = self.con.clone();
        let _: () = con.del(keys::call_key(session_id, request_id)).await?;
        Ok(())
    }

    /// The task request `request_id` of session `session_id` runs as, if remembered.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn called_task(
        &self,
        session_id: &str,
        request_id: &str,
    ) -> StoreResult<Option<String>> {
        let mut con = self.con.clone();
        Ok(con.get(keys::call_key(session_id, request_id)).await?)
    }

    /// Page `start..start+count` of the tasks listed for `scope`, newest first.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn listed_tasks(
        &self,
        scope: &str,
        start: usize,
        count: usize,
    ) -> StoreResult<Vec<String>> {
        let mut con = self.con.clone();
        let stop = isize::try_from(start + count).unwrap_or(isize::MAX) - 1;
        let start = isize::try_from(start).unwrap_or(isize::MAX);
        Ok(con.zrevrange(keys::listed_key(scope), start, stop).await?)
    }

    /// Forget listed tasks of `scope` (expired ones).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn forget_listed(&self, scope: &str, task_ids: &[String]) -> StoreResult<()> {
        if task_ids.is_empty() {
            return Ok(());
        }
        let mut con = self.con.clone();
        let _: () = con.zrem(keys::listed_key(scope), task_ids).await?;
        Ok(())
    }

    /// Create the consumer group of each queue (and the stream) if missing.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn ensure_groups(&self, queues: &[String]) -> StoreResult<()> {
        let mut con = self.con.clone();
        for stream in queues.iter().flat_map(|q| self.layout.queue_streams(q)) {
            let r: redis::RedisResult<()> =
                con.xgroup_create_mkstream(stream, keys::GROUP, "0").await;
            match r {
                Ok(()) => {}
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// A connection for blocking reads (no response timeout).
    ///
    /// # Errors
    /// Redis unreachable.
    pub async fn job_reader(&self) -> StoreResult<JobReader> {
        JobReader::connect(self).await
    }

    /// A worker took a job: fence it, or learn it needs no run (then it is acknowledged).
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "start", task.id = %d.task_id))]
    pub async fn start(
        &self,
        d: &Delivery,
        worker: &str,
        max_deliveries: u32,
    ) -> StoreResult<Start> {
        let mut con = self.con.clone();
        let reply = flat_strings(
            self.scripts
                .start
                .key(self.layout.task_key(&d.task_id, &d.owner))
                .key(&d.stream)
                .arg(self.layout.events_channel(&d.task_id))
                .arg(keys::GROUP)
                .arg(&d.entry)
                .arg(worker)
                .arg(max_deliveries)
                .arg(mcp_tasks_protocol::jsonrpc::INTERNAL_ERROR)
                .arg(mcp_tasks_protocol::time::now_millis())
                .invoke_async(&mut con)
                .await?,
        )?;
        match reply.as_slice() {
            [run, fence, deadline] if run == "run" => Ok(Start::Run {
                fence: fence
                    .parse()
                    .map_err(|_| StoreError::Corrupt(format!("fence {fence}")))?,
                deadline_ms: deadline.parse().ok(),
            }),
            [skip, why] if skip == "skip" => Ok(Start::Skip(why.clone())),
            other => Err(StoreError::Corrupt(format!("start: {other:?}"))),
        }
    }

    /// Set the status message of a running task.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "status", task.id = %id))]
    pub async fn set_message(
        &self,
        id: &str,
        owner: &str,
        fence: u64,
        message: &str,
    ) -> StoreResult<Write> {
        let mut con = self.con.clone();
        let reply = flat_strings(
            self.scripts
                .status
                .key(self.layout.task_key(id, owner))
                .arg(self.layout.events_channel(id))
                .arg(fence)
                .arg(message)
                .invoke_async(&mut con)
                .await?,
        )?;
        write_outcome(&reply)
    }

    /// Ask for input under `requests` (key, request JSON).
    ///
    /// # Errors
    /// Redis unavailable, or a key that already names another request.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "ask", task.id = %id))]
    pub async fn ask(
        &self,
        id: &str,
        owner: &str,
        fence: u64,
        requests: &[(String, String)],
    ) -> StoreResult<Ask> {
        let mut inv = self.scripts.ask.key(self.layout.task_key(id, owner));
        inv.arg(self.layout.events_channel(id)).arg(fence);
        for (key, req) in requests {
            inv.arg(key).arg(req);
        }
        let mut con = self.con.clone();
        let reply = flat_strings(inv.invoke_async(&mut con).await?)?;
        match reply.first().map(String::as_str) {
            Some("answered") => {
                let mut it = reply.into_iter().skip(1);
                Ok(Ask::Answered(
                    std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect(),
                ))
            }
            Some("waiting") => Ok(Ask::Waiting),
            _ => write_outcome(&reply).map(Ask::Refused),
        }
    }

    /// End a task and acknowledge its job.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "finish", task.id = %d.task_id))]
    pub async fn finish(&self, d: &Delivery, fence: u64, outcome: &Finish) -> StoreResult<Write> {
        let (status, field, payload, message) = match outcome {
            Finish::Completed(result) => ("completed", "result", result.as_str(), ""),
            Finish::Failed { error, message } => {
                ("failed", "error", error.as_str(), message.as_str())
            }
            Finish::Cancelled => ("cancelled", "", "", "Cancelled by request"),
        };
        let mut con = self.con.clone();
        let reply = flat_strings(
            self.scripts
                .finish
                .key(self.layout.task_key(&d.task_id, &d.owner))
                .key(&d.stream)
                .arg(self.layout.events_channel(&d.task_id))
                .arg(keys::GROUP)
                .arg(&d.entry)
                .arg(fence)
                .arg(status)
                .arg(field)
                .arg(payload)
                .arg(message)
                .arg(mcp_tasks_protocol::time::now_millis())
                .invoke_async(&mut con)
                .await?,
        )?;
        write_outcome(&reply)
    }

    /// Acknowledge and delete a job that needs no more work (its task is terminal or gone).
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "release", task.id = %d.task_id))]
    pub async fn release(&self, d: &Delivery) -> StoreResult<()> {
        let key = &d.stream;
        let mut con = self.con.clone();
        let _: () = redis::pipe()
            .xack(key, keys::GROUP, &[&d.entry])
            .ignore()
            .xdel(key, &[&d.entry])
            .ignore()
            .query_async(&mut con)
            .await?;
        Ok(())
    }

    /// Renew this consumer's claim on `entries` of `stream` (a [`Delivery::stream`]; resets
    /// their idle time; the delivery count does not change). Chunked so one call never
    /// carries too many ids.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn renew(&self, stream: &str, consumer: &str, entries: &[String]) -> StoreResult<()> {
        self.claim_ids(stream, consumer, entries, None).await
    }

    /// Give `entries` (of the tasks whose hashes are `task_keys`) up at once: mark them idle for `lease`, so the next sweep
    /// by any worker reclaims them without waiting out the lease (graceful shutdown), and
    /// count the hand-over on each task (`handovers`) so it is not an interrupted run.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn give_up(
        &self,
        stream: &str,
        consumer: &str,
        entries: &[String],
        task_keys: &[String],
        lease: Duration,
    ) -> StoreResult<()> {
        let mut con = self.con.clone();
        for key in task_keys {
            let _: i64 = self
                .scripts
                .handover
                .key(key)
                .invoke_async(&mut con)
                .await?;
        }
        self.claim_ids(stream, consumer, entries, Some(lease)).await
    }

    async fn claim_ids(
        &self,
        stream: &str,
        consumer: &str,
        entries: &[String],
        idle: Option<Duration>,
    ) -> StoreResult<()> {
        const CHUNK: usize = 100;
        let key = stream;
        let mut con = self.con.clone();
        for chunk in entries.chunks(CHUNK) {
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(key)
                .arg(keys::GROUP)
                .arg(consumer)
                .arg(0)
                .arg(chunk);
            if let Some(idle) = idle {
                cmd.arg("IDLE")
                    .arg(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX));
            }
            cmd.arg("JUSTID");
            let _: redis::Value = cmd.query_async(&mut con).await?;
        }
        Ok(())
    }

    /// Every stream of `queue`: one for one Redis, one per shard in a cluster.
    pub fn queue_streams(&self, queue: &str) -> Vec<String> {
        self.layout.queue_streams(queue)
    }

    /// Take (or, holding it, extend) the fleet-wide sweep lease of `stream` of `queue` for `hold`
    /// (`SET NX PX`): only one worker sweeps a queue at a time.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn take_sweep_lease(
        &self,
        queue: &str,
        stream: &str,
        consumer: &str,
        hold: Duration,
    ) -> StoreResult<bool> {
        let mut con = self.con.clone();
        let held: i64 = self
            .scripts
            .sweep_lease
            .key(self.layout.sweep_key(queue, stream))
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
        &self,
        queue: &str,
        stream: &str,
        consumer: &str,
        min_idle: Duration,
        cursor: &str,
        count: usize,
    ) -> StoreResult<(Vec<Delivery>, String)> {
        let mut con = self.con.clone();
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
            .map(|entry| delivery(queue, stream, entry, false))
            .collect();
        Ok((deliveries, reply.next_stream_id))
    }

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

    /// Advertise (or renew) tools.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn advertise(&self, adverts: &[ToolAdvert]) -> StoreResult<()> {
        let items: Vec<(String, String)> = adverts
            .iter()
            .filter_map(|a| Some((a.tool.name.clone(), serde_json::to_string(a).ok()?)))
            .collect();
        if items.is_empty() {
            return Ok(());
        }
        let mut con = self.con.clone();
        let _: () = con.hset_multiple(keys::TOOLS_KEY, &items).await?;
        Ok(())
    }

    /// All advertisements, live or stale (callers filter by heartbeat).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn adverts(&self) -> StoreResult<Vec<ToolAdvert>> {
        let mut con = self.con.clone();
        let all: HashMap<String, String> = con.hgetall(keys::TOOLS_KEY).await?;
        Ok(all
            .values()
            .filter_map(|v| serde_json::from_str(v).ok())
            .collect())
    }
}

/// The create script's reply (or the limits script's refusal).
fn created(reply: Vec<String>) -> StoreResult<Created> {
    match reply.as_slice() {
        [limit, which] if limit == "limit" => Ok(Created::Limited(match which.as_str() {
            "rate" => Limit::PerMinute,
            _ => Limit::Active,
        })),
        [at] => at
            .parse()
            .map(Created::At)
            .map_err(|_| StoreError::Corrupt(format!("create returned {at:?}"))),
        other => Err(StoreError::Corrupt(format!("create returned {other:?}"))),
    }
}

fn write_outcome(reply: &[String]) -> StoreResult<Write> {
    match reply.first().map(String::as_str) {
        Some("ok") => Ok(Write::Ok),
        Some("gone") => Ok(Write::Gone),
        Some("terminal") => Ok(Write::Terminal),
        Some("fenced") => Ok(Write::Fenced),
        _ => Err(StoreError::Corrupt(format!("write: {reply:?}"))),
    }
}

fn delivery(queue: &str, stream: &str, entry: redis::streams::StreamId, fresh: bool) -> Delivery {
    let task_id: String = entry.get("task").unwrap_or_default();
    let stream_owner: Option<String> = entry.get("owner");
    let job = entry
        .get::<String>("job")
        .ok_or_else(|| "job entry has no job field".to_owned())
        .and_then(|j| serde_json::from_str(&j).map_err(|e| format!("undecodable job: {e}")));
    // Entries written before the owner had its own field carry it in the job only.
    let owner = stream_owner
        .or_else(|| {
            job.as_ref()
                .ok()
                .map(|j: &Job| j.owner.clone())
                .filter(|o| !o.is_empty())
        })
        .unwrap_or_else(|| mcp_tasks_protocol::meta::ANONYMOUS_OWNER.to_owned());
    Delivery {
        queue: queue.to_owned(),
        stream: stream.to_owned(),
        entry: entry.id,
        task_id,
        owner,
        job,
        fresh,
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
