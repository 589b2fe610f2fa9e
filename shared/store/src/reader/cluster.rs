//! The job reader in a Redis Cluster: one connection per shard, read all at once, and a
//! blocked read on every shard ended by `CLIENT UNBLOCK` once one answers (the parent's
//! module doc tells why).

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;

use super::{Read, blocking_config, node_info, read_order, redirected};
use crate::{CONNECT_TIMEOUT, Delivery, RESPONSE_TIMEOUT, StoreResult, keys};

pub(super) struct ClusterReader {
    seeds: Vec<redis::ConnectionInfo>,
    shards: Vec<ShardReader>,
    /// A connection per node for `CLIENT UNBLOCK` (a blocked connection cannot send it).
    control: HashMap<(String, u16), MultiplexedConnection>,
}

impl ClusterReader {
    /// A reader of the shards `tags`, connecting lazily through `seeds`.
    pub(super) fn new(seeds: Vec<redis::ConnectionInfo>, tags: &[String]) -> ClusterReader {
        ClusterReader {
            seeds,
            shards: tags
                .iter()
                .map(|tag| ShardReader {
                    tag: tag.clone(),
                    node: None,
                    con: None,
                })
                .collect(),
            control: HashMap::new(),
        }
    }

    /// Read `read.count` jobs of `queues` (more when a blocked read's shards answer at
    /// once: the caller keeps the rest).
    pub(super) async fn read(
        &mut self,
        queues: &[String],
        read: &Read<'_>,
    ) -> StoreResult<Vec<Delivery>> {
        let (out, failed) = match read.block_ms {
            None => self.read_now(queues, read).await,
            Some(_) => self.read_blocking(queues, read).await,
        };
        if out.is_empty()
            && let Some(e) = failed
        {
            return Err(e.into());
        }
        Ok(out)
    }

    /// Every shard at once, each for its share of what is wanted (so at most one per shard
    /// beyond `count` comes back, which the caller keeps for the next read).
    async fn read_now(
        &mut self,
        queues: &[String],
        read: &Read<'_>,
    ) -> (Vec<Delivery>, Option<redis::RedisError>) {
        let seeds = &self.seeds;
        let n = self.shards.len().max(1);
        let share = read.with_count(read.count.div_ceil(n).max(1));
        let reads = self
            .shards
            .iter_mut()
            .map(|shard| shard.read(seeds, queues, &share));
        let mut out = Vec::new();
        let mut failed = None;
        for r in futures_util::future::join_all(reads).await {
            match r {
                Ok(found) => out.extend(found),
                Err(e) => failed = Some(e),
            }
        }
        (out, failed)
    }

    /// Block on every shard at once. As soon as one returns jobs, the others are unblocked
    /// (`CLIENT UNBLOCK`: they return as if timed out, having taken nothing), and every read
    /// is awaited to its end, so none leaves jobs it took behind.
    async fn read_blocking(
        &mut self,
        queues: &[String],
        read: &Read<'_>,
    ) -> (Vec<Delivery>, Option<redis::RedisError>) {
        let one = read.with_count(1);
        let seeds = &self.seeds;
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
                let one = &one;
                async move { (i, shard.read(seeds, queues, one).await) }
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
                unblock_unfinished(&mut self.control, seeds, &blocked, &done).await;
            }
        }
        (out, failed)
    }
}

/// Unblock every blocked read that has not ended, one pipeline per node.
async fn unblock_unfinished(
    control: &mut HashMap<(String, u16), MultiplexedConnection>,
    seeds: &[redis::ConnectionInfo],
    blocked: &[Option<((String, u16), i64)>],
    done: &[bool],
) {
    let mut by_node: HashMap<&(String, u16), Vec<i64>> = HashMap::new();
    for (j, b) in blocked.iter().enumerate() {
        if let (false, Some((addr, id))) = (done[j], b) {
            by_node.entry(addr).or_default().push(*id);
        }
    }
    for (addr, ids) in by_node {
        unblock(control, seeds, addr, &ids).await;
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

    /// Read this shard's streams of `queues`, `high` first.
    async fn read(
        &mut self,
        seeds: &[redis::ConnectionInfo],
        queues: &[String],
        read: &Read<'_>,
    ) -> redis::RedisResult<Vec<Delivery>> {
        let order = read_order(queues, |q, p| {
            keys::priority_shard_queue_key(&self.tag, q, p)
        });
        // A redirect or two (first contact, a slot that moved), then give up for now.
        for _ in 0..3 {
            self.ensure(seeds).await?;
            let Some(con) = self.con.as_mut() else {
                continue;
            };
            match read.from(&mut con.con, &order).await {
                Ok(found) => return Ok(found),
                Err(e) => {
                    self.con = None;
                    redirected(e, &mut self.node)?;
                }
            }
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "job stream redirected too often",
        )))
    }
}
