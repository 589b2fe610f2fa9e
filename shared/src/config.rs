//! Configuration from `MCPT_*` environment variables, each paired with a default that works
//! on one machine (STYLE.md §6).
//!
//! Parsing reads through [`Source`] so tests pass a map; a bad value yields a [`ConfigError`]
//! naming the variable, the value and what was expected, and binaries exit 64 with it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

pub use mcp_tasks_store::{RedisTarget, Replication};

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
/// Address the gateway listens on. `127.0.0.1:0` picks a free port.
pub const ENV_LISTEN_ADDR: &str = "MCPT_LISTEN_ADDR";
/// Default listen address (loopback only).
pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8080";
/// Largest accepted request body, in bytes.
pub const ENV_MAX_BODY_BYTES: &str = "MCPT_MAX_BODY_BYTES";
/// Default body limit: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Comma-separated extra `Origin` values allowed besides loopback origins.
pub const ENV_ALLOWED_ORIGINS: &str = "MCPT_ALLOWED_ORIGINS";
/// How long a synchronous `tools/call` waits for its result.
pub const ENV_SYNC_TIMEOUT: &str = "MCPT_SYNC_TIMEOUT";
/// Default synchronous wait: 5 minutes.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(300);
/// How long an `auto` tool may run before the client gets a task handle instead.
pub const ENV_AUTO_WAIT: &str = "MCPT_AUTO_WAIT";
/// Default `auto` budget.
pub const DEFAULT_AUTO_WAIT: Duration = Duration::from_millis(250);
/// Task lifetime when a tool sets none.
pub const ENV_DEFAULT_TTL: &str = "MCPT_DEFAULT_TTL";
/// Default task lifetime: 1 hour.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// Upper bound on any task lifetime.
pub const ENV_MAX_TTL: &str = "MCPT_MAX_TTL";
/// Default bound: 7 days.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Suggested poll interval when a tool sets none.
pub const ENV_POLL_INTERVAL: &str = "MCPT_POLL_INTERVAL";
/// Default poll interval.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Jobs a worker runs at once (tasks waiting for input do not count).
pub const ENV_CONCURRENCY: &str = "MCPT_CONCURRENCY";
/// Default concurrency.
pub const DEFAULT_CONCURRENCY: usize = 32;
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
/// How long running work may take to finish after SIGTERM.
pub const ENV_SHUTDOWN_GRACE: &str = "MCPT_SHUTDOWN_GRACE";
/// Default grace: 30 s.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
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
/// After SIGTERM, how long the gateway keeps serving while reporting not-ready, so load
/// balancers take it out of rotation before it stops accepting.
pub const ENV_DRAIN_DELAY: &str = "MCPT_DRAIN_DELAY";
/// Default drain delay.
pub const DEFAULT_DRAIN_DELAY: Duration = Duration::from_secs(2);
/// How the gateway authenticates callers: `none`, `tokens` or `jwt`.
pub const ENV_AUTH: &str = "MCPT_AUTH";
/// `1` lets a gateway without authentication listen on a non-loopback address.
pub const ENV_AUTH_ALLOW_ANONYMOUS: &str = "MCPT_AUTH_ALLOW_ANONYMOUS";
/// `MCPT_AUTH=tokens`: a file of `PRINCIPAL TOKEN` lines, re-read when it changes.
pub const ENV_AUTH_TOKENS_FILE: &str = "MCPT_AUTH_TOKENS_FILE";
/// `MCPT_AUTH=jwt`: the JWKS, a file path or an `http(s)://` URL.
pub const ENV_AUTH_JWKS: &str = "MCPT_AUTH_JWKS";
/// `MCPT_AUTH=jwt`: the required `iss`.
pub const ENV_AUTH_ISSUER: &str = "MCPT_AUTH_ISSUER";
/// `MCPT_AUTH=jwt`: the required `aud` (this server's identifier at the IdP).
pub const ENV_AUTH_AUDIENCE: &str = "MCPT_AUTH_AUDIENCE";
/// The canonical URL of this server's MCP endpoint, for the protected-resource metadata
/// (default: derived from each request's `Host`).
pub const ENV_AUTH_RESOURCE: &str = "MCPT_AUTH_RESOURCE";
/// Comma-separated authorization server URLs for the metadata (default: the issuer).
pub const ENV_AUTH_SERVERS: &str = "MCPT_AUTH_SERVERS";
/// Tasks one principal may create per minute (0: no limit).
pub const ENV_LIMIT_TASKS_PER_MINUTE: &str = "MCPT_LIMIT_TASKS_PER_MINUTE";
/// Default creation rate per principal.
pub const DEFAULT_LIMIT_TASKS_PER_MINUTE: u32 = 6000;
/// Unfinished tasks one principal may have at once (0: no limit).
pub const ENV_LIMIT_ACTIVE_TASKS: &str = "MCPT_LIMIT_ACTIVE_TASKS";
/// Default unfinished tasks per principal.
pub const DEFAULT_LIMIT_ACTIVE_TASKS: u32 = 1000;
/// Notification streams one principal may hold open (0: no limit).
pub const ENV_LIMIT_LISTENERS: &str = "MCPT_LIMIT_LISTENERS";
/// Default open streams per principal.
pub const DEFAULT_LIMIT_LISTENERS: u32 = 100;
/// Most `taskIds` in one `subscriptions/listen`.
pub const ENV_MAX_LISTEN_TASKS: &str = "MCPT_MAX_LISTEN_TASKS";
/// Default bound on `taskIds` per listen.
pub const DEFAULT_MAX_LISTEN_TASKS: usize = 1000;
/// Largest `arguments` of a `tools/call`, in bytes of JSON.
pub const ENV_MAX_ARGS_BYTES: &str = "MCPT_MAX_ARGS_BYTES";
/// Default argument bound: 256 KiB.
pub const DEFAULT_MAX_ARGS_BYTES: usize = 256 << 10;
/// Largest tool result a worker stores, in bytes of JSON; a larger one fails the task.
pub const ENV_MAX_RESULT_BYTES: &str = "MCPT_MAX_RESULT_BYTES";
/// Default result bound: 1 MiB.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;
/// Most input requests one task may make over its life.
pub const ENV_MAX_INPUT_REQUESTS: &str = "MCPT_MAX_INPUT_REQUESTS";
/// Default bound on input requests per task.
pub const DEFAULT_MAX_INPUT_REQUESTS: u32 = 100;
/// Replicas that must confirm each change a client is told about (a create, an answer, a
/// cancel, a worker's finish) before it is acknowledged; 0: none (Redis replicates
/// asynchronously, so a failover can lose the last changes).
pub const ENV_REDIS_WAIT_REPLICAS: &str = "MCPT_REDIS_WAIT_REPLICAS";
/// How long to wait for those replicas.
pub const ENV_REDIS_WAIT_TIMEOUT: &str = "MCPT_REDIS_WAIT_TIMEOUT";
/// Default wait for replicas.
pub const DEFAULT_REDIS_WAIT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a new connection may take to send its first request head (HTTP/1 request line
/// and headers, or an HTTP/2 stream's HEADERS), and an HTTP/1 request its headers.
pub const ENV_HEADER_TIMEOUT: &str = "MCPT_HEADER_TIMEOUT";
/// Default header timeout.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection with no request in flight (HTTP/1 keep-alive, HTTP/2 without
/// streams) stays open. Keep it above the idle timeout of a load balancer in front.
pub const ENV_IDLE_TIMEOUT: &str = "MCPT_IDLE_TIMEOUT";
/// Default idle timeout: above the 60 s most load balancers use.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Open connections one gateway keeps at once; past it the oldest connection that has not
/// yet sent a request is closed to make room, or else the new one is refused.
pub const ENV_MAX_CONNECTIONS: &str = "MCPT_MAX_CONNECTIONS";
/// Log format: `text` or `json`.
pub const ENV_LOG_FORMAT: &str = "MCPT_LOG_FORMAT";

/// A bad configuration value.
#[derive(Debug, thiserror::Error)]
#[error("{var}={value:?}: expected {expected}")]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// The value found.
    pub value: String,
    /// What was expected.
    pub expected: &'static str,
}

/// Where variables come from: the process environment or, in tests, a map.
pub trait Source {
    /// The value of `name`, if set and non-empty.
    fn get(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Env;

impl Source for Env {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }
}

impl Source for HashMap<&str, &str> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).map(|v| (*v).to_owned())
    }
}

fn parsed<T>(
    src: &dyn Source,
    var: &'static str,
    default: T,
    expected: &'static str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, ConfigError> {
    match src.get(var) {
        None => Ok(default),
        Some(value) => parse(value.trim()).ok_or(ConfigError {
            var,
            value,
            expected,
        }),
    }
}

/// The process' soft limit on open files, from `/proc/self/limits` (Linux); `None` where it
/// cannot be read or is unlimited.
pub fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The default `MCPT_MAX_CONNECTIONS` for a soft open-files limit: the limit less headroom
/// for Redis connections, the listener, logs and a tool's files (an eighth, at least 64),
/// so the process never reaches the limit and fails `accept`; 4096 where the limit is
/// unknown.
pub fn default_max_connections(open_files: Option<u64>) -> usize {
    let Some(limit) = open_files else {
        return 4096;
    };
    let headroom = (limit / 8).max(64);
    usize::try_from(limit.saturating_sub(headroom).max(16)).unwrap_or(usize::MAX)
}

/// Parse a duration: `250ms`, `30s`, `5m`, `1h`, `2d`, or combined (`1h30m`); a bare number
/// has no unit and is refused, and so is a space inside (`1 day`: in an environment
/// variable that is more often a quoting slip than meant). The one duration parser of the
/// project.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.contains(char::is_whitespace) {
        return None;
    }
    humantime::parse_duration(s).ok()
}

fn list(s: &str) -> Option<Vec<String>> {
    let items: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect();
    (!items.is_empty()).then_some(items)
}

fn redis_url(src: &dyn Source) -> Result<String, ConfigError> {
    parsed(
        src,
        ENV_REDIS_URL,
        DEFAULT_REDIS_URL.to_owned(),
        "a redis:// or rediss:// URL, cluster nodes as redis+cluster://host:port,host:port, or sentinels as redis+sentinel://host[:port],host[:port]/MASTER_NAME",
        |s| RedisTarget::parse(s).map(|_| s.to_owned()),
    )
}

/// `MCPT_REDIS_WAIT_REPLICAS` and `MCPT_REDIS_WAIT_TIMEOUT` for the Redis at `url`.
fn replication(src: &dyn Source, url: &str) -> Result<Replication, ConfigError> {
    let replicas = parsed(
        src,
        ENV_REDIS_WAIT_REPLICAS,
        0,
        "a number of replicas from 0 to 16",
        |s| s.parse().ok().filter(|n| *n <= 16),
    )?;
    if replicas > 0 && matches!(RedisTarget::parse(url), Some(RedisTarget::Cluster(_))) {
        return Err(ConfigError {
            var: ENV_REDIS_WAIT_REPLICAS,
            value: replicas.to_string(),
            expected: "0 with a Redis Cluster (waiting for replicas is supported with one Redis or Sentinel only, for now)",
        });
    }
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

/// Task lifetime and polling defaults, shared by the gateway (bounds) and workers (tool defaults).
#[derive(Debug, Clone)]
pub struct TaskDefaults {
    /// `MCPT_DEFAULT_TTL`, default 1h.
    pub ttl: Duration,
    /// `MCPT_MAX_TTL`, default 7d.
    pub max_ttl: Duration,
    /// `MCPT_POLL_INTERVAL`, default 500ms.
    pub poll_interval: Duration,
}

impl TaskDefaults {
    /// Read from `src`.
    ///
    /// # Errors
    /// A variable that is not a duration, or a default TTL above the maximum.
    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        const DUR: &str = "a duration like 500ms, 30s, 5m or 1h";
        let ttl = parsed(src, ENV_DEFAULT_TTL, DEFAULT_TTL, DUR, parse_duration)?;
        // Bounded so createdAt + ttlMs stays an exact integer in Redis' Lua (doubles).
        let max_ttl = parsed(
            src,
            ENV_MAX_TTL,
            DEFAULT_MAX_TTL,
            "a duration of at most 365d",
            |s| parse_duration(s).filter(|d| *d <= Duration::from_secs(365 * 24 * 3600)),
        )?;
        let poll_interval = parsed(src, ENV_POLL_INTERVAL, DEFAULT_POLL_INTERVAL, DUR, |s| {
            parse_duration(s).filter(|d| !d.is_zero())
        })?;
        if ttl > max_ttl || ttl.is_zero() {
            return Err(ConfigError {
                var: ENV_DEFAULT_TTL,
                value: format!("{}ms", ttl.as_millis()),
                expected: "a non-zero duration no larger than MCPT_MAX_TTL",
            });
        }
        Ok(TaskDefaults {
            ttl,
            max_ttl,
            poll_interval,
        })
    }
}

/// Gateway configuration.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// `MCPT_REDIS_URL`, default `redis://127.0.0.1:6379`.
    pub redis_url: String,
    /// `MCPT_QUEUE_SHARDS`, default 16 in a cluster, 1 standalone.
    pub queue_shards: u16,
    /// `MCPT_REDIS_WAIT_REPLICAS` and `MCPT_REDIS_WAIT_TIMEOUT`: replicas that confirm each
    /// acknowledged change.
    pub replication: Replication,
    /// `MCPT_LISTEN_ADDR`, default `127.0.0.1:8080`.
    pub listen_addr: SocketAddr,
    /// `MCPT_MAX_BODY_BYTES`, default 1 MiB.
    pub max_body_bytes: usize,
    /// `MCPT_ALLOWED_ORIGINS`, extra allowed `Origin`s (loopback origins are always allowed).
    pub allowed_origins: Vec<String>,
    /// `MCPT_SYNC_TIMEOUT`, default 5m.
    pub sync_timeout: Duration,
    /// `MCPT_AUTO_WAIT`, default 250ms.
    pub auto_wait: Duration,
    /// `MCPT_SHUTDOWN_GRACE`, default 30s: in-flight requests get this long.
    pub shutdown_grace: Duration,
    /// `MCPT_DRAIN_DELAY`, default 2s: serving while not-ready after SIGTERM.
    pub drain_delay: Duration,
    /// `MCPT_HEADER_TIMEOUT`, default 10s.
    pub header_timeout: Duration,
    /// `MCPT_IDLE_TIMEOUT`, default 90s.
    pub idle_timeout: Duration,
    /// `MCPT_MAX_CONNECTIONS`, default [`default_max_connections`].
    pub max_connections: usize,
    /// TTL bounds.
    pub tasks: TaskDefaults,
    /// Who may call.
    pub auth: AuthConfig,
    /// Per-principal limits and request bounds.
    pub limits: Limits,
}

/// How callers are authenticated (`MCPT_AUTH*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMode {
    /// Every caller is the anonymous principal; only allowed on loopback unless
    /// `MCPT_AUTH_ALLOW_ANONYMOUS=1`.
    None,
    /// Static bearer tokens from `MCPT_AUTH_TOKENS_FILE`.
    Tokens {
        /// The file of `PRINCIPAL TOKEN` lines.
        file: std::path::PathBuf,
    },
    /// Bearer JWTs checked against a JWKS.
    Jwt {
        /// `MCPT_AUTH_JWKS`: a path or an `http(s)://` URL.
        jwks: String,
        /// `MCPT_AUTH_ISSUER`.
        issuer: String,
        /// `MCPT_AUTH_AUDIENCE`.
        audience: String,
    },
}

/// Authentication settings.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// `MCPT_AUTH`, default `none`.
    pub mode: AuthMode,
    /// `MCPT_AUTH_ALLOW_ANONYMOUS`, default off.
    pub allow_anonymous: bool,
    /// `MCPT_AUTH_RESOURCE`, default derived from `Host`.
    pub resource: Option<String>,
    /// `MCPT_AUTH_SERVERS`, default the JWT issuer.
    pub authorization_servers: Vec<String>,
}

/// Per-principal limits (0 turns one off) and size bounds, enforced by every gateway
/// against counters in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `MCPT_LIMIT_TASKS_PER_MINUTE`, default 6000.
    pub tasks_per_minute: u32,
    /// `MCPT_LIMIT_ACTIVE_TASKS`, default 1000.
    pub active_tasks: u32,
    /// `MCPT_LIMIT_LISTENERS`, default 100.
    pub listeners: u32,
    /// `MCPT_MAX_LISTEN_TASKS`, default 1000.
    pub listen_tasks: usize,
    /// `MCPT_MAX_ARGS_BYTES`, default 256 KiB.
    pub args_bytes: usize,
}

impl AuthConfig {
    /// Read `MCPT_AUTH*` from `src`.
    ///
    /// # Errors
    /// An unknown mode, or a mode missing one of its variables.
    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let required = |var: &'static str, expected: &'static str| {
            src.get(var)
                .map(|v| v.trim().to_owned())
                .ok_or(ConfigError {
                    var,
                    value: String::new(),
                    expected,
                })
        };
        let mode = match src.get(ENV_AUTH).as_deref().map(str::trim) {
            None | Some("none") => AuthMode::None,
            Some("tokens") => AuthMode::Tokens {
                file: required(
                    ENV_AUTH_TOKENS_FILE,
                    "a file of PRINCIPAL TOKEN lines (MCPT_AUTH=tokens needs it)",
                )?
                .into(),
            },
            Some("jwt") => AuthMode::Jwt {
                jwks: required(
                    ENV_AUTH_JWKS,
                    "a JWKS file path or http(s) URL (MCPT_AUTH=jwt needs it)",
                )?,
                issuer: required(ENV_AUTH_ISSUER, "the tokens' iss (MCPT_AUTH=jwt needs it)")?,
                audience: required(
                    ENV_AUTH_AUDIENCE,
                    "the tokens' aud (MCPT_AUTH=jwt needs it)",
                )?,
            },
            Some(other) => {
                return Err(ConfigError {
                    var: ENV_AUTH,
                    value: other.to_owned(),
                    expected: "none, tokens or jwt",
                });
            }
        };
        let default_servers = match &mode {
            AuthMode::Jwt { issuer, .. } => vec![issuer.clone()],
            _ => Vec::new(),
        };
        Ok(AuthConfig {
            mode,
            allow_anonymous: parsed(
                src,
                ENV_AUTH_ALLOW_ANONYMOUS,
                false,
                "0 or 1",
                |s| match s {
                    "1" | "true" => Some(true),
                    "0" | "false" => Some(false),
                    _ => None,
                },
            )?,
            resource: parsed(
                src,
                ENV_AUTH_RESOURCE,
                None,
                "an http(s) URL like https://mcp.example.com/mcp",
                |s| {
                    (s.starts_with("https://") || s.starts_with("http://"))
                        .then(|| Some(s.to_owned()))
                },
            )?,
            authorization_servers: parsed(
                src,
                ENV_AUTH_SERVERS,
                default_servers,
                "a comma-separated list of URLs",
                list,
            )?,
        })
    }
}

impl Limits {
    /// Read the `MCPT_LIMIT_*` and gateway `MCPT_MAX_*` bounds from `src`. Without
    /// authentication (`anonymous`) every caller is one principal, so the per-principal
    /// limits would be global ones: they are off unless set.
    ///
    /// # Errors
    /// The first bad variable.
    pub fn from_source(src: &dyn Source, anonymous: bool) -> Result<Self, ConfigError> {
        const COUNT: &str = "an integer ≥ 0 (0: no limit)";
        let count = |s: &str| s.parse::<u32>().ok();
        let default = |d: u32| if anonymous { 0 } else { d };
        Ok(Limits {
            tasks_per_minute: parsed(
                src,
                ENV_LIMIT_TASKS_PER_MINUTE,
                default(DEFAULT_LIMIT_TASKS_PER_MINUTE),
                COUNT,
                count,
            )?,
            active_tasks: parsed(
                src,
                ENV_LIMIT_ACTIVE_TASKS,
                default(DEFAULT_LIMIT_ACTIVE_TASKS),
                COUNT,
                count,
            )?,
            listeners: parsed(
                src,
                ENV_LIMIT_LISTENERS,
                default(DEFAULT_LIMIT_LISTENERS),
                COUNT,
                count,
            )?,
            listen_tasks: parsed(
                src,
                ENV_MAX_LISTEN_TASKS,
                DEFAULT_MAX_LISTEN_TASKS,
                "an integer from 1 to 100000",
                |s| s.parse().ok().filter(|n| (1..=100_000).contains(n)),
            )?,
            args_bytes: parsed(
                src,
                ENV_MAX_ARGS_BYTES,
                DEFAULT_MAX_ARGS_BYTES,
                "a byte count ≥ 2",
                |s| s.parse().ok().filter(|n| *n >= 2),
            )?,
        })
    }
}

const DURATION: &str = "a duration like 500ms, 30s, 5m or 1h";

impl GatewayConfig {
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
        Ok(GatewayConfig {
            queue_shards: queue_shards(src, &redis_url)?,
            replication: replication(src, &redis_url)?,
            redis_url,
            listen_addr: parsed(
                src,
                ENV_LISTEN_ADDR,
                DEFAULT_LISTEN_ADDR
                    .parse()
                    .expect("default listen address parses"),
                "an address like 127.0.0.1:8080",
                |s| s.parse().ok(),
            )?,
            max_body_bytes: parsed(
                src,
                ENV_MAX_BODY_BYTES,
                DEFAULT_MAX_BODY_BYTES,
                "a byte count ≥ 1024",
                |s| s.parse().ok().filter(|n| *n >= 1024),
            )?,
            allowed_origins: parsed(
                src,
                ENV_ALLOWED_ORIGINS,
                Vec::new(),
                "a comma-separated list of origins",
                list,
            )?,
            sync_timeout: parsed(
                src,
                ENV_SYNC_TIMEOUT,
                DEFAULT_SYNC_TIMEOUT,
                DURATION,
                parse_duration,
            )?,
            auto_wait: parsed(
                src,
                ENV_AUTO_WAIT,
                DEFAULT_AUTO_WAIT,
                DURATION,
                parse_duration,
            )?,
            shutdown_grace: parsed(
                src,
                ENV_SHUTDOWN_GRACE,
                DEFAULT_SHUTDOWN_GRACE,
                DURATION,
                parse_duration,
            )?,
            drain_delay: parsed(
                src,
                ENV_DRAIN_DELAY,
                DEFAULT_DRAIN_DELAY,
                DURATION,
                parse_duration,
            )?,
            header_timeout: parsed(
                src,
                ENV_HEADER_TIMEOUT,
                DEFAULT_HEADER_TIMEOUT,
                "a duration from 100ms, like 10s",
                |s| parse_duration(s).filter(|d| *d >= Duration::from_millis(100)),
            )?,
            idle_timeout: parsed(
                src,
                ENV_IDLE_TIMEOUT,
                DEFAULT_IDLE_TIMEOUT,
                "a duration from 100ms, like 90s",
                |s| parse_duration(s).filter(|d| *d >= Duration::from_millis(100)),
            )?,
            max_connections: parsed(
                src,
                ENV_MAX_CONNECTIONS,
                default_max_connections(open_files_limit()),
                "a whole number ≥ 1",
                |s| s.parse().ok().filter(|n| *n >= 1),
            )?,
            tasks: TaskDefaults::from_source(src)?,
            limits: Limits::from_source(src, AuthConfig::from_source(src)?.mode == AuthMode::None)?,
            auth: AuthConfig::from_source(src)?,
        })
    }

    /// Refuse to serve without authentication on a non-loopback address unless told to.
    ///
    /// # Errors
    /// The one-line reason.
    pub fn check_exposure(&self, addr: SocketAddr) -> Result<(), String> {
        if self.auth.mode == AuthMode::None
            && !addr.ip().is_loopback()
            && !self.auth.allow_anonymous
        {
            return Err(format!(
                "refusing to listen on {addr} without authentication: set MCPT_AUTH=tokens or \
                 MCPT_AUTH=jwt, or MCPT_AUTH_ALLOW_ANONYMOUS=1 to serve anyone who can reach it"
            ));
        }
        Ok(())
    }
}

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
        let name_list = |s: &str| {
            list(s).filter(|items| {
                items.iter().all(|q| {
                    q.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                })
            })
        };
        let redis_url = redis_url(src)?;
        Ok(WorkerConfig {
            queue_shards: queue_shards(src, &redis_url)?,
            replication: replication(src, &redis_url)?,
            redis_url,
            concurrency: parsed(
                src,
                ENV_CONCURRENCY,
                DEFAULT_CONCURRENCY,
                "an integer from 1 to 10000",
                |s| s.parse().ok().filter(|n| (1..=10_000).contains(n)),
            )?,
            queues: parsed(
                src,
                ENV_QUEUES,
                vec![DEFAULT_QUEUE.to_owned()],
                "a comma-separated list of queue names ([A-Za-z0-9._-])",
                name_list,
            )?,
            tools: parsed(
                src,
                ENV_TOOLS,
                vec![DEFAULT_TOOLS.to_owned()],
                "a comma-separated list of tool packs (demo, conformance)",
                |s| {
                    name_list(s)
                        .filter(|packs| packs.iter().all(|p| p == "demo" || p == "conformance"))
                },
            )?,
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
            admin_addr: parsed(
                src,
                ENV_ADMIN_ADDR,
                DEFAULT_ADMIN_ADDR.parse().ok(),
                "an address like 0.0.0.0:9464, or off",
                |s| match s {
                    "off" => Some(None),
                    addr => addr.parse().ok().map(Some),
                },
            )?,
            max_result_bytes: parsed(
                src,
                ENV_MAX_RESULT_BYTES,
                DEFAULT_MAX_RESULT_BYTES,
                "a byte count ≥ 1024",
                |s| s.parse().ok().filter(|n| *n >= 1024),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_shards_are_for_clusters_only() {
        let g = |vars: &[(&str, &str)]| {
            let map: HashMap<&str, &str> = vars.iter().copied().collect();
            GatewayConfig::from_source(&map).map(|c| c.queue_shards)
        };
        assert_eq!(g(&[]).unwrap(), 1);
        assert_eq!(g(&[(ENV_QUEUE_SHARDS, "1")]).unwrap(), 1);
        let e = g(&[(ENV_QUEUE_SHARDS, "8")]).unwrap_err();
        assert_eq!(e.var, ENV_QUEUE_SHARDS);
        let url = (
            ENV_REDIS_URL,
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        );
        assert_eq!(g(&[url]).unwrap(), DEFAULT_QUEUE_SHARDS);
        assert_eq!(g(&[url, (ENV_QUEUE_SHARDS, "8")]).unwrap(), 8);
        for bad in ["0", "1025", "x", "-1"] {
            let e = g(&[url, (ENV_QUEUE_SHARDS, bad)]).unwrap_err();
            assert_eq!(e.var, ENV_QUEUE_SHARDS, "{bad}");
        }
        let e = g(&[(ENV_REDIS_URL, "redis+cluster://a:1,b")]).unwrap_err();
        assert_eq!(e.var, ENV_REDIS_URL);
        let w = WorkerConfig::from_source(&HashMap::from([url, (ENV_QUEUE_SHARDS, "4")])).unwrap();
        assert_eq!(w.queue_shards, 4);
    }

    #[test]
    fn defaults_work_on_one_machine() {
        let empty: HashMap<&str, &str> = HashMap::new();
        let g = GatewayConfig::from_source(&empty).unwrap();
        assert_eq!(g.redis_url, "redis://127.0.0.1:6379");
        assert_eq!(g.listen_addr.to_string(), "127.0.0.1:8080");
        let w = WorkerConfig::from_source(&empty).unwrap();
        assert_eq!(w.queues, vec!["default"]);
        assert_eq!(w.tools, vec!["demo"]);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let src = HashMap::from([(ENV_CONCURRENCY, "lots")]);
        let e = WorkerConfig::from_source(&src).unwrap_err();
        assert_eq!(
            e.to_string(),
            "MCPT_CONCURRENCY=\"lots\": expected an integer from 1 to 10000"
        );
        let src = HashMap::from([(ENV_LISTEN_ADDR, "localhost")]);
        assert_eq!(
            GatewayConfig::from_source(&src).unwrap_err().var,
            ENV_LISTEN_ADDR
        );
        let src = HashMap::from([(ENV_TOOLS, "demo,nope")]);
        assert_eq!(WorkerConfig::from_source(&src).unwrap_err().var, ENV_TOOLS);
        let src = HashMap::from([(ENV_DEFAULT_TTL, "2d"), (ENV_MAX_TTL, "1d")]);
        assert_eq!(
            TaskDefaults::from_source(&src).unwrap_err().var,
            ENV_DEFAULT_TTL
        );
    }

    #[test]
    fn connection_cap_leaves_headroom_below_the_open_files_limit() {
        assert_eq!(default_max_connections(Some(512)), 448);
        assert_eq!(default_max_connections(Some(1024)), 896);
        assert_eq!(
            default_max_connections(Some(1 << 20)),
            (1 << 20) - (1 << 17)
        );
        assert_eq!(default_max_connections(Some(20)), 16);
        assert_eq!(default_max_connections(None), 4096);
        assert!(open_files_limit().is_some_and(|n| n > 0));
    }

    #[test]
    fn waiting_for_replicas_is_for_one_redis_or_sentinel() {
        let off = GatewayConfig::from_source(&HashMap::new()).unwrap();
        assert_eq!(off.replication.replicas, 0);
        assert_eq!(off.replication.timeout, DEFAULT_REDIS_WAIT_TIMEOUT);
        let src = HashMap::from([
            (ENV_REDIS_URL, "redis+sentinel://s1,s2,s3/primary"),
            (ENV_REDIS_WAIT_REPLICAS, "1"),
            (ENV_REDIS_WAIT_TIMEOUT, "250ms"),
        ]);
        let on = WorkerConfig::from_source(&src).unwrap();
        assert_eq!(
            on.replication,
            Replication {
                replicas: 1,
                timeout: Duration::from_millis(250)
            }
        );
        for (var, bad) in [
            (ENV_REDIS_WAIT_REPLICAS, "-1"),
            (ENV_REDIS_WAIT_REPLICAS, "17"),
            (ENV_REDIS_WAIT_TIMEOUT, "5ms"),
            (ENV_REDIS_WAIT_TIMEOUT, "2m"),
        ] {
            let src = HashMap::from([(var, bad)]);
            assert_eq!(
                GatewayConfig::from_source(&src).unwrap_err().var,
                var,
                "{bad}"
            );
        }
        let src = HashMap::from([
            (ENV_REDIS_URL, "redis+cluster://a:1,b:2"),
            (ENV_REDIS_WAIT_REPLICAS, "1"),
        ]);
        assert_eq!(
            GatewayConfig::from_source(&src).unwrap_err().var,
            ENV_REDIS_WAIT_REPLICAS
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("ten"), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("2d"), Some(Duration::from_secs(2 * 86_400)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("1 day"), None);
    }

    #[test]
    fn auth_modes_need_their_variables() {
        let none = GatewayConfig::from_source(&HashMap::new()).unwrap();
        assert_eq!(none.auth.mode, AuthMode::None);
        // Without authentication the per-caller limits would be global: off unless set.
        assert_eq!(none.limits.active_tasks, 0);
        let src = HashMap::from([(ENV_AUTH, "tokens")]);
        let err = GatewayConfig::from_source(&src).unwrap_err();
        assert_eq!(err.var, ENV_AUTH_TOKENS_FILE);
        let src = HashMap::from([(ENV_AUTH, "tokens"), (ENV_AUTH_TOKENS_FILE, "/etc/t")]);
        let tokens = GatewayConfig::from_source(&src).unwrap();
        assert_eq!(tokens.limits.active_tasks, DEFAULT_LIMIT_ACTIVE_TASKS);
        let src = HashMap::from([
            (ENV_AUTH, "jwt"),
            (ENV_AUTH_JWKS, "https://idp/jwks"),
            (ENV_AUTH_ISSUER, "https://idp"),
        ]);
        assert_eq!(
            GatewayConfig::from_source(&src).unwrap_err().var,
            ENV_AUTH_AUDIENCE
        );
        let src = HashMap::from([(ENV_AUTH, "basic")]);
        let err = GatewayConfig::from_source(&src).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MCPT_AUTH=\"basic\": expected none, tokens or jwt"
        );
    }

    #[test]
    fn open_addresses_need_authentication_or_consent() {
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let none = GatewayConfig::from_source(&HashMap::new()).unwrap();
        assert!(
            none.check_exposure("127.0.0.1:8080".parse().unwrap())
                .is_ok()
        );
        let err = none.check_exposure(any).unwrap_err();
        assert!(err.starts_with("refusing to listen on 0.0.0.0:8080 without authentication"));
        let src = HashMap::from([(ENV_AUTH_ALLOW_ANONYMOUS, "1")]);
        assert!(
            GatewayConfig::from_source(&src)
                .unwrap()
                .check_exposure(any)
                .is_ok()
        );
    }
}
