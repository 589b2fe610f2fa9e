//! Blocking job reads (`XREADGROUP … BLOCK`), on connections of their own: a blocked read
//! holds every later command of its connection behind it, so it never shares the store's.
//!
//! A queue has a stream per priority, read in order ([`read_order`]): without blocking, a
//! script (`scripts/read.lua`) reads each stream only for what those before it left, so a
//! `high` job is taken before every `normal` one; blocking, one `XREADGROUP` waits on all.
//!
//! One Redis: one connection, one read over every queue. Redis Cluster: a queue has
//! one stream per shard, each in its shard's slot, and one `XREADGROUP` may only name keys
//! of one slot. So the reader keeps one connection per shard, to the primary owning the
//! shard's slot (found by following `MOVED` from a seed node, and again when slots move),
//! reads all shards at once without blocking (each for its share of the jobs wanted), and
//! when there is nothing blocks on all of them at once; the first
//! shard to return jobs ends the others' waits (`CLIENT UNBLOCK`, from a control connection
//! per node). A blocked read may return more jobs than were asked for (a few shards, or a
//! few streams, may answer at once); the rest are kept here and
//! handed out first on the next read. They are delivered to this consumer meanwhile, so if
//! the worker stops before taking them, the sweep hands them to another worker after the
//! lease, as for any job of a worker that died.

use std::collections::VecDeque;
use std::time::Duration;

use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadOptions;

use super::{
    Backend, CONNECT_TIMEOUT, Delivery, READ_BLOCK, RESPONSE_TIMEOUT, Store, StoreResult, keys,
};
use crate::Priority;
use crate::entries::ReadReply;
use crate::jobs::delivery;
use cluster::ClusterReader;

mod cluster;

/// Reads jobs for a worker (see the module docs).
pub struct JobReader {
    inner: Inner,
    /// `scripts/read.lua`.
    script: redis::Script,
    /// Jobs a read returned beyond what was asked for.
    kept: VecDeque<Delivery>,
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
                Inner::Cluster(ClusterReader::new(seeds.clone(), tags))
            }
        };
        Ok(JobReader {
            inner,
            script: store.scripts.read.clone(),
            kept: VecDeque::new(),
        })
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
        if !self.kept.is_empty() {
            let n = count.min(self.kept.len());
            return Ok(self.kept.drain(..n).collect());
        }
        // Never 0: BLOCK 0 waits forever.
        let block_ms =
            block.map(|b| usize::try_from(b.min(READ_BLOCK).as_millis().max(1)).unwrap_or(1));
        let read = Read {
            consumer,
            count,
            block_ms,
            script: &self.script,
        };
        let mut out = match &mut self.inner {
            Inner::Single(con) => {
                let order = read_order(queues, keys::priority_queue_key);
                read.from(con, &order).await?
            }
            Inner::Cluster(reader) => reader.read(queues, &read).await?,
        };
        if out.len() > count {
            self.kept.extend(out.drain(count..));
        }
        Ok(out)
    }
}

/// The streams of `queues` in the order they are read, each with its queue: every queue's
/// `high` stream (named by `stream`), then every `normal` one, then every `low` one.
fn read_order(queues: &[String], stream: impl Fn(&str, Priority) -> String) -> Vec<(String, &str)> {
    Priority::ALL
        .into_iter()
        .flat_map(|p| queues.iter().map(move |q| (p, q)))
        .map(|(p, q)| (stream(q, p), q.as_str()))
        .collect()
}

/// One read's terms: whose, how many, whether to block, and the script for a read that
/// does not.
pub(super) struct Read<'a> {
    consumer: &'a str,
    count: usize,
    block_ms: Option<usize>,
    script: &'a redis::Script,
}

impl Read<'_> {
    /// Read `order`'s streams on `con`: without blocking, by the script, in order, at most
    /// `count` in all; blocking, one `XREADGROUP` on them all (up to `count` from each
    /// stream that answers).
    pub(super) async fn from(
        &self,
        con: &mut MultiplexedConnection,
        order: &[(String, &str)],
    ) -> redis::RedisResult<Vec<Delivery>> {
        let reply: ReadReply = match self.block_ms {
            None => {
                let mut invocation = self.script.prepare_invoke();
                for (stream, _) in order {
                    invocation.key(stream);
                }
                invocation
                    .arg(keys::GROUP)
                    .arg(self.consumer)
                    .arg(self.count)
                    .invoke_async(con)
                    .await?
            }
            Some(ms) => {
                let streams: Vec<&str> = order.iter().map(|(s, _)| s.as_str()).collect();
                let ids: Vec<&str> = order.iter().map(|_| ">").collect();
                con.xread_options(
                    &streams,
                    &ids,
                    &read_options(self.consumer, self.count, Some(ms)),
                )
                .await?
            }
        };
        Ok(deliveries(order, reply))
    }

    /// The same read for `count` jobs.
    pub(super) fn with_count(&self, count: usize) -> Read<'_> {
        Read {
            consumer: self.consumer,
            count,
            block_ms: self.block_ms,
            script: self.script,
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

/// The jobs of `reply`, each with its queue as `order` names it, in `order`'s order (a
/// blocking read may answer for several streams).
fn deliveries(order: &[(String, &str)], reply: ReadReply) -> Vec<Delivery> {
    let mut streams = reply.0;
    streams.sort_by_key(|(key, _)| order.iter().position(|(s, _)| s == key));
    let mut out = Vec::new();
    for (key, entries) in streams {
        let Some((_, queue)) = order.iter().find(|(s, _)| *s == key) else {
            continue;
        };
        out.extend(
            entries
                .into_iter()
                .map(|entry| delivery(queue, &key, entry, true)),
        );
    }
    out
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
                    redirected(e, &mut self.node)?;
                }
            }
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "key redirected too often",
        )))
    }
}

/// After a command failed on a cluster node's connection: `Ok` to try again on the node a
/// `MOVED` named (now in `node`), else the error, with `node` cleared so the next try starts
/// from a seed (the node is unreachable or failing).
pub(super) fn redirected(
    e: redis::RedisError,
    node: &mut Option<(String, u16)>,
) -> Result<(), redis::RedisError> {
    *node = e.redirect_node().and_then(|(addr, _)| parse_addr(addr));
    if node.is_some() { Ok(()) } else { Err(e) }
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
