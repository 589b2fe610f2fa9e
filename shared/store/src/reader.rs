//! Blocking job reads (`XREADGROUP … BLOCK`), on connections of their own: a blocked read
//! holds every later command of its connection behind it, so it never shares the store's.
//!
//! One Redis: one connection, one `XREADGROUP` over every queue. Redis Cluster: a queue has
//! one stream per shard, each in its shard's slot, and one `XREADGROUP` may only name keys
//! of one slot. So the reader keeps one connection per shard, to the primary owning the
//! shard's slot (found by following `MOVED` from a seed node, and again when slots move),
//! reads all shards at once without blocking (each for its share of the jobs wanted), and
//! when there is nothing blocks on all of them at once; the first
//! shard to return jobs ends the others' waits (`CLIENT UNBLOCK`, from a control connection
//! per node). A blocked read may return more jobs than were asked for (a few shards may
//! answer at once); the rest are kept here and
//! handed out first on the next read. They are delivered to this consumer meanwhile, so if
//! the worker stops before taking them, the sweep hands them to another worker after the
//! lease, as for any job of a worker that died.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadOptions;

use super::{
    Backend, CONNECT_TIMEOUT, Delivery, READ_BLOCK, RESPONSE_TIMEOUT, Store, StoreResult, keys,
};
use crate::entries::ReadReply;
use crate::jobs::delivery;

/// Reads jobs for a worker (see the module docs).
pub struct JobReader {
    inner: Inner,
}

enum Inner {
    Single(MultiplexedConnection),
    Cluster(ClusterReader),
}

/// Not `None`: a connection that dies silently would hang the reader forever.
fn blocking_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(READ_BLOCK + RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
}

impl JobReader {
    pub(super) async fn connect(store: &Store) -> StoreResult<JobReader> {
        let inner = match store.backend() {
            backend @ (Backend::Single(_) | Backend::Sentinel(_)) => {
                let client = backend.single().await.expect("one Redis")?;
                Inner::Single(
                    client
                        .get_multiplexed_async_connection_with_config(&blocking_config())
                        .await?,
                )
            }
            Backend::Cluster { seeds, .. } => {
                let keys::Layout::Cluster { tags } = store.layout() else {
                    unreachable!("a cluster backend has a cluster layout")
                };
                Inner::Cluster(ClusterReader {
                    seeds: seeds.clone(),
                    shards: tags
                        .iter()
                        .map(|tag| ShardReader {
                            tag: tag.clone(),
                            node: None,
                            con: None,
                        })
                        .collect(),
                    control: HashMap::new(),
                    kept: VecDeque::new(),
                })
            }
        };
        Ok(JobReader { inner })
    }

    /// Read up to `count` new jobs from `queues` for `consumer`, blocking up to `block`
    /// (at most [`READ_BLOCK`]) when there is none, or not at all for `None`.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn read(
        &mut self,
        queues: &[String],
        consumer: &str,
        count: usize,
        block: Option<Duration>,
    ) -> StoreResult<Vec<Delivery>> {
        // Never 0: BLOCK 0 waits forever.
        let block_ms =
            block.map(|b| usize::try_from(b.min(READ_BLOCK).as_millis().max(1)).unwrap_or(1));
        let opts = read_options(consumer, count, block_ms);
        match &mut self.inner {
            Inner::Single(con) => {
                let streams: Vec<String> = queues.iter().map(|q| keys::queue_key(q)).collect();
                let ids: Vec<&str> = queues.iter().map(|_| ">").collect();
                let reply: ReadReply = con.xread_options(&streams, &ids, &opts).await?;
                Ok(deliveries(queues, &streams, reply))
            }
            Inner::Cluster(reader) => reader.read(queues, consumer, count, block_ms).await,
        }
    }
}

fn read_options(consumer: &str, count: usize, block_ms: Option<usize>) -> StreamReadOptions {
    let opts = StreamReadOptions::default()
        .group(keys::GROUP, consumer)
        .count(count);
    match block_ms {
        Some(ms) => opts.block(ms),
        None => opts,
    }
}

fn deliveries(queues: &[String], streams: &[String], reply: ReadReply) -> Vec<Delivery> {
    let mut out = Vec::new();
    for (key, entries) in reply.0 {
        let Some(i) = streams.iter().position(|s| *s == key) else {
            continue;
        };
        let queue = &queues[i];
        out.extend(
            entries
                .into_iter()
                .map(|entry| delivery(queue, &key, entry, true)),
        );
    }
    out
}

struct ClusterReader {
    seeds: Vec<redis::ConnectionInfo>,
    shards: Vec<ShardReader>,
    /// A connection per node for `CLIENT UNBLOCK` (a blocked connection cannot send it).
    control: HashMap<(String, u16), MultiplexedConnection>,
    /// Jobs a read returned beyond what was asked for.
    kept: VecDeque<Delivery>,
}

impl ClusterReader {
    async fn read(
        &mut self,
        queues: &[String],
        consumer: &str,
        count: usize,
        block_ms: Option<usize>,
    ) -> StoreResult<Vec<Delivery>> {
        if !self.kept.is_empty() {
            let n = count.min(self.kept.len());
            return Ok(self.kept.drain(..n).collect());
        }
        let seeds = &self.seeds;
        if block_ms.is_none() {
            // Every shard at once, each for its share of what is wanted (so at most one per
            // shard beyond `count` comes back; that is kept for the next read).
            let n = self.shards.len().max(1);
            let share = count.div_ceil(n).max(1);
            let reads = self
                .shards
                .iter_mut()
                .map(|shard| shard.read(seeds, queues, read_options(consumer, share, None)));
            let mut out = Vec::new();
            let mut failed = None;
            for r in futures_util::future::join_all(reads).await {
                match r {
                    Ok(found) => out.extend(found),
                    Err(e) => failed = Some(e),
                }
            }
            if out.is_empty()
                && let Some(e) = failed
            {
                return Err(e.into());
            }
            if out.len() > count {
                self.kept.extend(out.drain(count..));
            }
            return Ok(out);
        }
        // Block on every shard at once. As soon as one returns jobs, the others are
        // unblocked (`CLIENT UNBLOCK`: they return as if timed out, having taken nothing),
        // and every read is awaited to its end, so none leaves jobs it took behind.
        let mut failed = None;
        for shard in &mut self.shards {
            if let Err(e) = shard.ensure(seeds).await {
                failed = Some(e);
            }
        }
        let blocked: Vec<Option<((String, u16), i64)>> = self
            .shards
            .iter()
            .map(|s| s.con.as_ref().map(|c| (c.addr.clone(), c.id)))
            .collect();
        let mut reads: FuturesUnordered<_> = self
            .shards
            .iter_mut()
            .enumerate()
            .filter(|(_, s)| s.con.is_some())
            .map(|(i, shard)| {
                let opts = read_options(consumer, 1, block_ms);
                async move { (i, shard.read(seeds, queues, opts).await) }
            })
            .collect();
        let mut done = vec![false; blocked.len()];
        let mut out = Vec::new();
        let mut unblocking = false;
        // An UNBLOCK that reaches a node before the read it means (still on its way) does
        // nothing: it is sent again until every read has ended.
        let mut again = tokio::time::interval(UNBLOCK_AGAIN);
        loop {
            let unblock_now = tokio::select! {
                next = reads.next() => {
                    let Some((i, r)) = next else { break };
                    done[i] = true;
                    match r {
                        Ok(found) => out.extend(found),
                        Err(e) => failed = Some(e),
                    }
                    let first = !out.is_empty() && !unblocking;
                    if first {
                        unblocking = true;
                        again.reset();
                    }
                    first
                }
                _ = again.tick(), if unblocking => true,
            };
            if unblock_now {
                let mut by_node: HashMap<&(String, u16), Vec<i64>> = HashMap::new();
                for (j, b) in blocked.iter().enumerate() {
                    if let (false, Some((addr, id))) = (done[j], b) {
                        by_node.entry(addr).or_default().push(*id);
                    }
                }
                for (addr, ids) in by_node {
                    unblock(&mut self.control, seeds, addr, &ids).await;
                }
            }
        }
        if out.is_empty()
            && let Some(e) = failed
        {
            return Err(e.into());
        }
        if out.len() > count {
            self.kept.extend(out.drain(count..));
        }
        Ok(out)
    }
}

/// How often unblocking is tried again while some blocked read has not ended.
const UNBLOCK_AGAIN: Duration = Duration::from_millis(20);

/// `CLIENT UNBLOCK` each of `ids` on `addr`, in one pipeline on that node's control
/// connection (best effort: a read that is not unblocked ends by its BLOCK timeout).
async fn unblock(
    control: &mut HashMap<(String, u16), MultiplexedConnection>,
    seeds: &[redis::ConnectionInfo],
    addr: &(String, u16),
    ids: &[i64],
) {
    if !control.contains_key(addr) {
        let Ok(info) = node_info(seeds, Some(addr)) else {
            return;
        };
        let Ok(client) = redis::Client::open(info) else {
            return;
        };
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT));
        match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(con) => {
                control.insert(addr.clone(), con);
            }
            Err(_) => return,
        }
    }
    let Some(con) = control.get_mut(addr) else {
        return;
    };
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.cmd("CLIENT").arg("UNBLOCK").arg(*id).ignore();
    }
    let r: redis::RedisResult<()> = pipe.query_async(con).await;
    if r.is_err() {
        control.remove(addr);
    }
}

/// One shard's connection: where it goes and its `CLIENT ID`.
struct ShardCon {
    con: MultiplexedConnection,
    addr: (String, u16),
    id: i64,
}

/// The connection reading one shard's streams.
struct ShardReader {
    tag: String,
    /// The primary owning the shard's slot, once a `MOVED` named it.
    node: Option<(String, u16)>,
    con: Option<ShardCon>,
}

impl ShardReader {
    /// Connect, to the known owner of the shard's slot or else to a seed.
    async fn ensure(&mut self, seeds: &[redis::ConnectionInfo]) -> redis::RedisResult<()> {
        if self.con.is_some() {
            return Ok(());
        }
        let info = node_info(seeds, self.node.as_ref())?;
        let addr = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port),
            _ => (String::new(), 0),
        };
        let mut con = redis::Client::open(info)?
            .get_multiplexed_async_connection_with_config(&blocking_config())
            .await?;
        let id: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut con).await?;
        self.con = Some(ShardCon { con, addr, id });
        Ok(())
    }

    async fn read(
        &mut self,
        seeds: &[redis::ConnectionInfo],
        queues: &[String],
        opts: StreamReadOptions,
    ) -> redis::RedisResult<Vec<Delivery>> {
        let streams: Vec<String> = queues
            .iter()
            .map(|q| keys::shard_queue_key(&self.tag, q))
            .collect();
        let ids: Vec<&str> = queues.iter().map(|_| ">").collect();
        // A redirect or two (first contact, a slot that moved), then give up for now.
        for _ in 0..3 {
            self.ensure(seeds).await?;
            let Some(con) = self.con.as_mut() else {
                continue;
            };
            let reply: redis::RedisResult<ReadReply> =
                con.con.xread_options(&streams, &ids, &opts).await;
            match reply {
                Ok(reply) => return Ok(deliveries(queues, &streams, reply)),
                Err(e) => {
                    self.con = None;
                    match e.redirect_node().and_then(|(addr, _)| parse_addr(addr)) {
                        Some(node) => self.node = Some(node),
                        None => {
                            // Unreachable or failing: start again from a seed next time.
                            self.node = None;
                            return Err(e);
                        }
                    }
                }
            }
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "job stream redirected too often",
        )))
    }
}

/// A connection of its own for blocking commands on one key (a forwarded request's list, a
/// gateway's reply list), made as the job reader makes its own: to the one Redis (for
/// Sentinel, the primary the sentinels name now, asked again after a promotion was
/// announced or the connection failed), or in a cluster to the primary owning the key's
/// slot, found by following `MOVED` from a seed node. It connects lazily and again after
/// any error, so a caller just retries after a pause.
pub(crate) struct KeyCon {
    backend: Backend,
    /// Cluster: the primary owning the key's slot, once a `MOVED` named it.
    node: Option<(String, u16)>,
    con: Option<(MultiplexedConnection, u64)>,
}

impl KeyCon {
    pub(crate) fn new(backend: Backend) -> KeyCon {
        KeyCon {
            backend,
            node: None,
            con: None,
        }
    }

    async fn connect(&mut self) -> redis::RedisResult<&mut MultiplexedConnection> {
        let switches = self.backend.switches();
        if self.con.as_ref().is_some_and(|(_, at)| *at != switches) {
            // A promotion since: this may be the former primary.
            self.con = None;
        }
        if self.con.is_none() {
            let client = match self.backend.single().await {
                Some(client) => client?,
                None => {
                    let Backend::Cluster { seeds } = &self.backend else {
                        unreachable!("only a cluster has no single Redis")
                    };
                    redis::Client::open(node_info(seeds, self.node.as_ref())?)?
                }
            };
            let con = client
                .get_multiplexed_async_connection_with_config(&blocking_config())
                .await?;
            self.con = Some((con, switches));
        }
        Ok(&mut self.con.as_mut().expect("just connected").0)
    }

    /// Run `cmd` (blocking at most [`READ_BLOCK`]); any error drops the connection.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        // A redirect or two (first contact, a slot that moved), then give up for now.
        for _ in 0..3 {
            let con = self.connect().await?;
            match cmd.query_async(con).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    self.con = None;
                    match e.redirect_node().and_then(|(addr, _)| parse_addr(addr)) {
                        Some(node) => self.node = Some(node),
                        None => {
                            self.node = None;
                            return Err(e);
                        }
                    }
                }
            }
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "key redirected too often",
        )))
    }
}

/// `host:port` of a `MOVED` reply.
fn parse_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// How to reach `node` (TLS and credentials as the seeds), or a seed when none is known.
fn node_info(
    seeds: &[redis::ConnectionInfo],
    node: Option<&(String, u16)>,
) -> redis::RedisResult<redis::ConnectionInfo> {
    let seed = seeds
        .get(usize::try_from(rand_index(seeds.len())).unwrap_or(0))
        .or_else(|| seeds.first())
        .ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no seed nodes"))
        })?
        .clone();
    let Some((host, port)) = node else {
        return Ok(seed);
    };
    let addr = match seed.addr() {
        redis::ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => redis::ConnectionAddr::TcpTls {
            host: host.clone(),
            port: *port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => redis::ConnectionAddr::Tcp(host.clone(), *port),
    };
    Ok(seed.set_addr(addr))
}

/// A seed index at random, so shard readers do not all start on the first seed.
fn rand_index(n: usize) -> u64 {
    let n = u64::try_from(n.max(1)).unwrap_or(1);
    u64::try_from(uuid::Uuid::new_v4().as_u128() % u128::from(n)).unwrap_or(0)
}
