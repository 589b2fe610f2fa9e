//! Blocking job reads (`XREADGROUP … BLOCK`), on connections of their own: a blocked read
//! holds every later command of its connection behind it, so it never shares the store's.
//!
//! One Redis: one connection, one `XREADGROUP` over every queue. Redis Cluster: a queue has
//! one stream per shard, each in its shard's slot, and one `XREADGROUP` may only name keys
//! of one slot. So the reader keeps one connection per shard, to the primary owning the
//! shard's slot (found by following `MOVED` from a seed node, and again when slots move),
//! reads the shards in turn without blocking, and blocks on all of them at once. A blocked
//! read may return more jobs than were asked for (one per shard); the rest are kept here and
//! handed out first on the next read. They are delivered to this consumer meanwhile, so if
//! the worker stops before taking them, the sweep hands them to another worker after the
//! lease, as for any job of a worker that died.

use std::collections::VecDeque;
use std::time::Duration;

use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamReadOptions, StreamReadReply};

use super::{
    Backend, CONNECT_TIMEOUT, Delivery, READ_BLOCK, RESPONSE_TIMEOUT, Store, StoreResult, delivery,
    keys,
};

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
            Backend::Single(client) => Inner::Single(
                client
                    .get_multiplexed_async_connection_with_config(&blocking_config())
                    .await?,
            ),
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
                    kept: VecDeque::new(),
                    next: 0,
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
                let reply: Option<StreamReadReply> =
                    con.xread_options(&streams, &ids, &opts).await?;
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

fn deliveries(
    queues: &[String],
    streams: &[String],
    reply: Option<StreamReadReply>,
) -> Vec<Delivery> {
    let mut out = Vec::new();
    for stream in reply.map(|r| r.keys).unwrap_or_default() {
        let Some(i) = streams.iter().position(|s| *s == stream.key) else {
            continue;
        };
        let queue = &queues[i];
        out.extend(
            stream
                .ids
                .into_iter()
                .map(|entry| delivery(queue, &stream.key, entry, true)),
        );
    }
    out
}

struct ClusterReader {
    seeds: Vec<redis::ConnectionInfo>,
    shards: Vec<ShardReader>,
    /// Jobs a blocked read returned beyond what was asked for.
    kept: VecDeque<Delivery>,
    /// The shard the next non-blocking round starts at (so no shard starves).
    next: usize,
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
            // In turn, each shard for what is still wanted.
            let mut out = Vec::new();
            let mut failed = None;
            let n = self.shards.len();
            for k in 0..n {
                let want = count - out.len();
                if want == 0 {
                    break;
                }
                let shard = &mut self.shards[(self.next + k) % n];
                match shard
                    .read(seeds, queues, read_options(consumer, want, None))
                    .await
                {
                    Ok(found) => out.extend(found),
                    Err(e) => failed = Some(e),
                }
            }
            self.next = (self.next + 1) % n.max(1);
            return match failed {
                Some(e) if out.is_empty() => Err(e.into()),
                _ => Ok(out),
            };
        }
        // Block on every shard at once; each read returns by its BLOCK timeout, so waiting
        // for all of them loses no job (a dropped read would leave its jobs pending here).
        let reads = self
            .shards
            .iter_mut()
            .map(|shard| shard.read(seeds, queues, read_options(consumer, 1, block_ms)));
        let results = futures_util::future::join_all(reads).await;
        let mut out = Vec::new();
        let mut failed = None;
        for r in results {
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
        Ok(out)
    }
}

/// The connection reading one shard's streams.
struct ShardReader {
    tag: String,
    /// The primary owning the shard's slot, once a `MOVED` named it.
    node: Option<(String, u16)>,
    con: Option<MultiplexedConnection>,
}

impl ShardReader {
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
            let con = match &mut self.con {
                Some(con) => con,
                None => {
                    let info = node_info(seeds, self.node.as_ref())?;
                    let client = redis::Client::open(info)?;
                    self.con.insert(
                        client
                            .get_multiplexed_async_connection_with_config(&blocking_config())
                            .await?,
                    )
                }
            };
            let reply: redis::RedisResult<Option<StreamReadReply>> =
                con.xread_options(&streams, &ids, &opts).await;
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
