//! Configuration from `MCPT_*` environment variables, each paired with a default that works
//! on one machine (STYLE.md §6).
//!
//! Parsing reads through [`Source`] so tests pass a map; a bad value yields a [`ConfigError`]
//! naming the variable, the value and what was expected, and binaries exit 64 with it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

pub use mcp_tasks_store::{RedisTarget, Replication};

mod auth;
mod console;
mod gateway;
mod redis;
mod tasks;
mod worker;

pub use auth::*;
pub use console::*;
pub use gateway::*;
pub use redis::*;
pub use tasks::*;
pub use worker::*;

use redis::{redis_url, replication};

/// How long running work may take to finish after SIGTERM.
pub const ENV_SHUTDOWN_GRACE: &str = "MCPT_SHUTDOWN_GRACE";

/// Default grace: 30 s.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Log format: `text` or `json`.
pub const ENV_LOG_FORMAT: &str = "MCPT_LOG_FORMAT";

/// The access log (`on` or `off`, the default): one line per request, created task and
/// finished job, under the log target [`crate::telemetry::ACCESS`].
pub const ENV_ACCESS_LOG: &str = "MCPT_ACCESS_LOG";

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

const DURATION: &str = "a duration like 500ms, 30s, 5m or 1h";

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
    fn waiting_for_replicas_is_configured_and_bounded() {
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
        // In a cluster too: each change waits for the replicas of its shard's primary.
        let src = HashMap::from([
            (ENV_REDIS_URL, "redis+cluster://a:1,b:2"),
            (ENV_REDIS_WAIT_REPLICAS, "1"),
        ]);
        assert_eq!(
            GatewayConfig::from_source(&src)
                .unwrap()
                .replication
                .replicas,
            1
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
        assert_eq!(none.limits.sessions, 0);
        assert_eq!(none.limits.stored_bytes, 0);
        let src = HashMap::from([(ENV_AUTH, "tokens")]);
        let err = GatewayConfig::from_source(&src).unwrap_err();
        assert_eq!(err.var, ENV_AUTH_TOKENS_FILE);
        let src = HashMap::from([(ENV_AUTH, "tokens"), (ENV_AUTH_TOKENS_FILE, "/etc/t")]);
        let tokens = GatewayConfig::from_source(&src).unwrap();
        assert_eq!(tokens.limits.active_tasks, DEFAULT_LIMIT_ACTIVE_TASKS);
        assert_eq!(tokens.limits.sessions, DEFAULT_LIMIT_SESSIONS);
        assert_eq!(tokens.limits.stored_bytes, DEFAULT_LIMIT_STORED_BYTES);
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
        assert!(
            err.to_string()
                .starts_with("refusing to listen on 0.0.0.0:8080 without authentication")
        );
        let src = HashMap::from([(ENV_AUTH_ALLOW_ANONYMOUS, "1")]);
        assert!(
            GatewayConfig::from_source(&src)
                .unwrap()
                .check_exposure(any)
                .is_ok()
        );
    }
}
