//! The gateway's settings: listen address, request bounds, connection limits and timeouts,
//! drain behaviour; authentication and limits are in `auth`.

use super::*;

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

/// How long a forwarded upstream request (`prompts/*`, `resources/*`) waits for the worker
/// holding the upstream session to answer.
pub const ENV_FORWARD_WAIT: &str = "MCPT_FORWARD_WAIT";

/// Default forwarded-request wait.
pub const DEFAULT_FORWARD_WAIT: Duration = Duration::from_secs(30);

/// Forwarded upstream requests one gateway waits on at once; past it a request is answered
/// -32603 "busy" at once.
pub const ENV_FORWARD_MAX_IN_FLIGHT: &str = "MCPT_FORWARD_MAX_IN_FLIGHT";

/// Default forwarded requests in flight per gateway.
pub const DEFAULT_FORWARD_MAX_IN_FLIGHT: usize = 256;

/// How long an `auto` tool may run before the client gets a task handle instead.
pub const ENV_AUTO_WAIT: &str = "MCPT_AUTO_WAIT";

/// Default `auto` budget.
pub const DEFAULT_AUTO_WAIT: Duration = Duration::from_millis(250);

/// After SIGTERM, how long the gateway keeps serving while reporting not-ready, so load
/// balancers take it out of rotation before it stops accepting.
pub const ENV_DRAIN_DELAY: &str = "MCPT_DRAIN_DELAY";

/// Default drain delay.
pub const DEFAULT_DRAIN_DELAY: Duration = Duration::from_secs(2);

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
    /// `MCPT_FORWARD_WAIT`, default 30s.
    pub forward_wait: Duration,
    /// `MCPT_FORWARD_MAX_IN_FLIGHT`, default 256.
    pub forward_max_in_flight: usize,
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
    /// The operator's console (`MCPT_CONSOLE*`).
    pub console: ConsoleConfig,
}

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
            replication: replication(src)?,
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
            forward_wait: parsed(
                src,
                ENV_FORWARD_WAIT,
                DEFAULT_FORWARD_WAIT,
                "a duration from 100ms, like 30s",
                |s| parse_duration(s).filter(|d| *d >= Duration::from_millis(100)),
            )?,
            forward_max_in_flight: parsed(
                src,
                ENV_FORWARD_MAX_IN_FLIGHT,
                DEFAULT_FORWARD_MAX_IN_FLIGHT,
                "a whole number ≥ 1",
                |s| s.parse().ok().filter(|n| *n >= 1),
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
            console: ConsoleConfig::from_source(src)?,
        })
    }

    /// Refuse to serve without authentication on a non-loopback address unless told to.
    ///
    /// # Errors
    /// Why not, in one line ([`Exposure`]).
    pub fn check_exposure(&self, addr: SocketAddr) -> Result<(), Exposure> {
        let anonymous = self.auth.mode == AuthMode::None;
        if anonymous && !addr.ip().is_loopback() && !self.auth.allow_anonymous {
            return Err(Exposure::Anonymous(addr));
        }
        // The console shows every principal's tasks and cancels them: never without
        // authentication off loopback, even when MCP itself is allowed to be anonymous.
        if self.console.enabled && anonymous && !addr.ip().is_loopback() {
            return Err(Exposure::AnonymousConsole(addr));
        }
        // With authentication only listed principals get in: an empty list is a console
        // nobody can open, most likely a forgotten setting.
        if self.console.enabled && !anonymous && self.console.principals.is_empty() {
            return Err(Exposure::ConsoleForNobody);
        }
        Ok(())
    }
}

/// Why [`GatewayConfig::check_exposure`] refuses an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exposure {
    /// No authentication on a reachable address, and anonymous callers not allowed.
    #[error(
        "refusing to listen on {0} without authentication: set MCPT_AUTH=tokens or \
         MCPT_AUTH=jwt, or MCPT_AUTH_ALLOW_ANONYMOUS=1 to serve anyone who can reach it"
    )]
    Anonymous(SocketAddr),
    /// The console without authentication on a reachable address.
    #[error(
        "refusing to serve the console (MCPT_CONSOLE=on) on {0} without \
         authentication: set MCPT_AUTH=tokens or MCPT_AUTH=jwt with \
         MCPT_CONSOLE_PRINCIPALS, or listen on a loopback address"
    )]
    AnonymousConsole(SocketAddr),
    /// The console with authentication and nobody allowed in.
    #[error(
        "refusing to serve the console (MCPT_CONSOLE=on) with authentication and an \
         empty MCPT_CONSOLE_PRINCIPALS: nobody could sign in; list the principals \
         allowed in (comma-separated), or set MCPT_CONSOLE=off"
    )]
    ConsoleForNobody,
}
