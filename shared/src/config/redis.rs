//! Where Redis is: `MCPT_REDIS_URL` (one Redis, a cluster, or sentinels), the cluster shard
//! count, and the replicas acknowledged changes wait for.

use super::*;

/// Redis to use: a `redis://` URL, the nodes of a Redis Cluster (`redis+cluster://host:port,host:port`
/// or a comma-separated list of `redis://` URLs), or the sentinels of a primary
/// (`redis+sentinel://host[:port],…/MASTER_NAME[/DB]`), see [`RedisTarget`].
pub const ENV_REDIS_URL: &str = "MCPT_REDIS_URL";

/// Default Redis: the local one.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Redis Cluster only: how many shards tasks and each queue's stream are split into, each
/// on its own hash slot (so one hot queue is not one hot node).
pub const ENV_QUEUE_SHARDS: &str = "MCPT_QUEUE_SHARDS";

/// Default shards in a cluster (standalone has exactly one).
pub const DEFAULT_QUEUE_SHARDS: u16 = mcp_tasks_store::DEFAULT_QUEUE_SHARDS;

/// Replicas that must confirm each change a client is told about (a create, an answer, a
/// cancel, a worker's finish) before it is acknowledged; 0: none (Redis replicates
/// asynchronously, so a failover can lose the last changes).
pub const ENV_REDIS_WAIT_REPLICAS: &str = "MCPT_REDIS_WAIT_REPLICAS";

/// How long to wait for those replicas.
pub const ENV_REDIS_WAIT_TIMEOUT: &str = "MCPT_REDIS_WAIT_TIMEOUT";

/// Default wait for replicas.
pub const DEFAULT_REDIS_WAIT_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) fn redis_url(src: &dyn Source) -> Result<String, ConfigError> {
    parsed(
        src,
        ENV_REDIS_URL,
        DEFAULT_REDIS_URL.to_owned(),
        "a redis:// or rediss:// URL, cluster nodes as redis+cluster://host:port,host:port, or sentinels as redis+sentinel://host[:port],host[:port]/MASTER_NAME",
        |s| RedisTarget::parse(s).map(|_| s.to_owned()),
    )
}

/// `MCPT_REDIS_WAIT_REPLICAS` and `MCPT_REDIS_WAIT_TIMEOUT` (in a Redis Cluster, replicas
/// of the primary that holds the change).
pub(crate) fn replication(src: &dyn Source) -> Result<Replication, ConfigError> {
    let replicas = parsed(
        src,
        ENV_REDIS_WAIT_REPLICAS,
        0,
        "a number of replicas from 0 to 16",
        |s| s.parse().ok().filter(|n| *n <= 16),
    )?;
    let timeout = parsed(
        src,
        ENV_REDIS_WAIT_TIMEOUT,
        DEFAULT_REDIS_WAIT_TIMEOUT,
        "a duration from 10ms to 1m, like 1s",
        |s| {
            parse_duration(s)
                .filter(|d| *d >= Duration::from_millis(10) && *d <= Duration::from_secs(60))
        },
    )?;
    Ok(Replication { replicas, timeout })
}

/// `MCPT_QUEUE_SHARDS` for the Redis at `url`: 1 to [`mcp_tasks_store::keys::MAX_SHARDS`] in a
/// cluster (default [`DEFAULT_QUEUE_SHARDS`]), exactly 1 standalone.
///
/// # Errors
/// A value that is not a shard count, or one set for a single Redis.
pub fn queue_shards(src: &dyn Source, url: &str) -> Result<u16, ConfigError> {
    let cluster = matches!(RedisTarget::parse(url), Some(RedisTarget::Cluster(_)));
    if cluster {
        parsed(
            src,
            ENV_QUEUE_SHARDS,
            DEFAULT_QUEUE_SHARDS,
            "a number of shards from 1 to 1024",
            |s| {
                s.parse()
                    .ok()
                    .filter(|n| (1..=mcp_tasks_store::keys::MAX_SHARDS).contains(n))
            },
        )
    } else {
        parsed(
            src,
            ENV_QUEUE_SHARDS,
            1,
            "1: shards need a Redis Cluster MCPT_REDIS_URL (redis+cluster://host:port,...)",
            |s| (s == "1").then_some(1),
        )
    }
}
