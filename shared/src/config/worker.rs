//! The worker's settings: concurrency, queues, tool packs, admin listener, leases and
//! per-task bounds.

use super::*;

/// Jobs a worker runs at once (tasks waiting for input do not count).
pub const ENV_CONCURRENCY: &str = "MCPT_CONCURRENCY";

/// Default concurrency.
pub const DEFAULT_CONCURRENCY: usize = 32;

/// The most of a worker's slots one principal's tasks hold while another principal's
/// tasks wait in the queue, as a share (0.01 to 1; 1 turns it off).
pub const ENV_FAIR_SHARE: &str = "MCPT_FAIR_SHARE";

/// Default fair share: half of a worker's slots.
pub const DEFAULT_FAIR_SHARE: f64 = 0.5;

/// Slots beyond `MCPT_CONCURRENCY` that only a job whose principal runs nothing on the
/// worker may take, and only while every other slot runs a job (0 turns them off).
pub const ENV_GUEST_SLOTS: &str = "MCPT_GUEST_SLOTS";

/// Default guest slots: none (a full worker's guest loop may take a job another, idle
/// worker would have run, and keep it until a slot frees).
pub const DEFAULT_GUEST_SLOTS: usize = 0;

/// Comma-separated queues a worker serves.
pub const ENV_QUEUES: &str = "MCPT_QUEUES";

/// Default queue.
pub const DEFAULT_QUEUE: &str = "default";

/// Comma-separated built-in tool packs a worker offers (`demo`, `conformance`).
pub const ENV_TOOLS: &str = "MCPT_TOOLS";

/// Default tool packs.
pub const DEFAULT_TOOLS: &str = "demo";

/// Address of the worker's `/healthz`, `/readyz` and `/metrics` listener; `off` for none.
pub const ENV_ADMIN_ADDR: &str = "MCPT_ADMIN_ADDR";

/// Default: a free loopback port (printed as `listening on`), so several workers share a
/// machine; deployments set a fixed port.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:0";

/// How long a worker's claim on a job lasts without renewal; a job whose worker died is
/// taken over by another worker after this long (renewed every third of it).
pub const ENV_LEASE: &str = "MCPT_LEASE";

/// Default lease: a dead worker's job is picked up again within about 20 s.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// How many times a job may be started before its task ends failed (its runs keep being
/// interrupted).
pub const ENV_MAX_DELIVERIES: &str = "MCPT_MAX_DELIVERIES";

/// Default bound on starts.
pub const DEFAULT_MAX_DELIVERIES: u32 = 5;

/// Largest tool result a worker stores, in bytes of JSON; a larger one fails the task.
pub const ENV_MAX_RESULT_BYTES: &str = "MCPT_MAX_RESULT_BYTES";

/// Default result bound: 1 MiB.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;

/// Most dead letters kept per queue stream (tasks that failed for good); the oldest leave
/// first.
pub const ENV_DEAD_LETTERS_MAX: &str = "MCPT_DEAD_LETTERS_MAX";

/// Default bound on dead letters per queue stream.
pub const DEFAULT_DEAD_LETTERS_MAX: u32 = 1000;

/// Most input requests one task may make over its life.
pub const ENV_MAX_INPUT_REQUESTS: &str = "MCPT_MAX_INPUT_REQUESTS";

/// Default bound on input requests per task.
pub const DEFAULT_MAX_INPUT_REQUESTS: u32 = 100;

/// Worker configuration.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// `MCPT_REDIS_URL`, default `redis://127.0.0.1:6379`.
    pub redis_url: String,
    /// `MCPT_QUEUE_SHARDS`, default 16 in a cluster, 1 standalone.
    pub queue_shards: u16,
    /// `MCPT_REDIS_WAIT_REPLICAS` and `MCPT_REDIS_WAIT_TIMEOUT`: replicas that confirm each
    /// acknowledged change.
    pub replication: Replication,
    /// `MCPT_CONCURRENCY`, default 32: jobs running at once.
    pub concurrency: usize,
    /// `MCPT_FAIR_SHARE`, default 0.5: the share of `concurrency` one principal holds
    /// while others wait (1: no bound).
    pub fair_share: f64,
    /// `MCPT_GUEST_SLOTS`, default 0: slots for a principal that runs nothing here while
    /// every other slot runs a job.
    pub guest_slots: usize,
    /// `MCPT_LIMIT_STORED_BYTES` for an authenticated owner's results (default 64 MiB).
    pub stored_bytes: u64,
    /// The same for the anonymous owner: only when set, as gateways without
    /// authentication do.
    pub stored_bytes_anonymous: u64,
    /// `MCPT_QUEUES`, default `default`.
    pub queues: Vec<String>,
    /// `MCPT_TOOLS`, default `demo`: built-in packs to offer.
    pub tools: Vec<String>,
    /// `MCPT_SHUTDOWN_GRACE`, default 30s.
    pub shutdown_grace: Duration,
    /// `MCPT_LEASE`, default 15s.
    pub lease: Duration,
    /// `MCPT_MAX_DELIVERIES`, default 5.
    pub max_deliveries: u32,
    /// `MCPT_ADMIN_ADDR`, default `127.0.0.1:0`; `None` for `off`.
    pub admin_addr: Option<SocketAddr>,
    /// `MCPT_MAX_RESULT_BYTES`, default 1 MiB.
    pub max_result_bytes: usize,
    /// `MCPT_MAX_INPUT_REQUESTS`, default 100.
    pub max_input_requests: u32,
    /// `MCPT_DEAD_LETTERS_MAX`, default 1000.
    pub dead_letters_max: u32,
    /// Tool TTL and poll defaults.
    pub tasks: TaskDefaults,
}

impl WorkerConfig {
    /// Read from the process environment.
    ///
    /// # Errors
    /// The first bad variable.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_source(&Env)
    }

    /// Read from `src`.
    ///
    /// # Errors
    /// The first bad variable.
    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let redis_url = redis_url(src)?;
        Ok(WorkerConfig {
            queue_shards: queue_shards(src, &redis_url)?,
            replication: replication(src)?,
            redis_url,
            concurrency: parsed(
                src,
                ENV_CONCURRENCY,
                DEFAULT_CONCURRENCY,
                "an integer from 1 to 10000",
                |s| s.parse().ok().filter(|n| (1..=10_000).contains(n)),
            )?,
            fair_share: parsed(
                src,
                ENV_FAIR_SHARE,
                DEFAULT_FAIR_SHARE,
                "a share of the slots from 0.01 to 1, like 0.5 (1: off)",
                |s| s.parse().ok().filter(|f| (0.01..=1.0).contains(f)),
            )?,
            guest_slots: parsed(
                src,
                ENV_GUEST_SLOTS,
                DEFAULT_GUEST_SLOTS,
                "an integer from 0 to 1000 (0: off)",
                |s| s.parse().ok().filter(|n| *n <= 1000),
            )?,
            stored_bytes: stored_bytes(src, false)?,
            stored_bytes_anonymous: stored_bytes(src, true)?,
            queues: queues(src)?,
            tools: tool_packs(src)?,
            shutdown_grace: parsed(
                src,
                ENV_SHUTDOWN_GRACE,
                DEFAULT_SHUTDOWN_GRACE,
                DURATION,
                parse_duration,
            )?,
            lease: parsed(
                src,
                ENV_LEASE,
                DEFAULT_LEASE,
                "a duration of at least 1s, like 15s",
                |s| parse_duration(s).filter(|d| *d >= Duration::from_secs(1)),
            )?,
            max_deliveries: parsed(
                src,
                ENV_MAX_DELIVERIES,
                DEFAULT_MAX_DELIVERIES,
                "an integer from 1 to 100",
                |s| s.parse().ok().filter(|n| (1..=100).contains(n)),
            )?,
            admin_addr: admin_addr(src)?,
            max_result_bytes: parsed(
                src,
                ENV_MAX_RESULT_BYTES,
                DEFAULT_MAX_RESULT_BYTES,
                "a byte count ≥ 1024",
                |s| s.parse().ok().filter(|n| *n >= 1024),
            )?,
            dead_letters_max: parsed(
                src,
                ENV_DEAD_LETTERS_MAX,
                DEFAULT_DEAD_LETTERS_MAX,
                "an integer from 1 to 1000000",
                |s| s.parse().ok().filter(|n| (1..=1_000_000).contains(n)),
            )?,
            max_input_requests: parsed(
                src,
                ENV_MAX_INPUT_REQUESTS,
                DEFAULT_MAX_INPUT_REQUESTS,
                "an integer from 1 to 100000",
                |s| s.parse().ok().filter(|n| (1..=100_000).contains(n)),
            )?,
            tasks: TaskDefaults::from_source(src)?,
        })
    }
}

/// A comma-separated list of names of `[A-Za-z0-9._-]`.
fn name_list(s: &str) -> Option<Vec<String>> {
    list(s).filter(|items| {
        items.iter().all(|q| {
            q.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
    })
}

/// `MCPT_QUEUES`: the queues this worker reads.
fn queues(src: &dyn Source) -> Result<Vec<String>, ConfigError> {
    parsed(
        src,
        ENV_QUEUES,
        vec![DEFAULT_QUEUE.to_owned()],
        "a comma-separated list of queue names ([A-Za-z0-9._-])",
        name_list,
    )
}

/// `MCPT_TOOLS`: the built-in tool packs this worker serves.
fn tool_packs(src: &dyn Source) -> Result<Vec<String>, ConfigError> {
    parsed(
        src,
        ENV_TOOLS,
        vec![DEFAULT_TOOLS.to_owned()],
        "a comma-separated list of tool packs (demo, conformance)",
        |s| name_list(s).filter(|packs| packs.iter().all(|p| p == "demo" || p == "conformance")),
    )
}

/// `MCPT_ADMIN_ADDR`: where the admin endpoint listens, or `None` for off.
fn admin_addr(src: &dyn Source) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    parsed(
        src,
        ENV_ADMIN_ADDR,
        DEFAULT_ADMIN_ADDR.parse().ok(),
        "an address like 0.0.0.0:9464, or off",
        |s| match s {
            "off" => Some(None),
            addr => addr.parse().ok().map(Some),
        },
    )
}
