//! Where a subcommand connects: flags, then environment variables, then the running `up`'s
//! runtime file, then the defaults (the rules are in the parent module's doc).

use std::path::PathBuf;

use super::Fail;
use crate::data::Runtime;

/// Default MCP endpoint.
const DEFAULT_URL: &str = "http://127.0.0.1:8080/mcp";
/// Default Redis.
const DEFAULT_REDIS: &str = "redis://127.0.0.1:6379";
/// Environment variable naming the MCP endpoint.
const ENV_URL: &str = "MCPT_URL";
/// Environment variable naming Redis (shared with the server binaries).
const ENV_REDIS: &str = "MCPT_REDIS_URL";

/// Where `queues` and `workers` read: a gateway's console or Redis.
#[derive(Debug, PartialEq)]
pub(super) enum OpsSource {
    /// The console API of the gateway of this MCP endpoint.
    Gateway(String),
    /// Redis at this URL.
    Redis(String),
}

/// `--redis` or `--url` as given, then MCPT_REDIS_URL or MCPT_URL, then the running `up`
/// (its console when it serves one, else its Redis), else the default Redis.
pub(super) fn ops_source(
    url: Option<String>,
    redis: Option<String>,
    up: UpData,
    env: impl Fn(&str) -> Option<String>,
) -> Result<OpsSource, Fail> {
    let given = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    if let Some(r) = given(redis) {
        return Ok(OpsSource::Redis(r));
    }
    if let Some(u) = given(url) {
        return Ok(OpsSource::Gateway(u));
    }
    if let Some(r) = given(env(ENV_REDIS)) {
        return Ok(OpsSource::Redis(r));
    }
    if let Some(u) = given(env(ENV_URL)) {
        return Ok(OpsSource::Gateway(u));
    }
    match (Runtime::find(up.data.as_deref()), up.data) {
        (Some(found), _) if found.console_url.is_some() => Ok(OpsSource::Gateway(found.mcp_url)),
        (Some(found), _) => Ok(OpsSource::Redis(found.redis_url)),
        (None, Some(dir)) => Err(Fail::runtime(format!(
            "no `mcp-tasks up` is running with the data directory {}",
            dir.display()
        ))),
        (None, None) => Ok(OpsSource::Redis(DEFAULT_REDIS.to_owned())),
    }
}

/// The MCP endpoint option of the subcommands that talk to a gateway.
#[derive(Debug, clap::Args)]
pub(crate) struct Endpoint {
    /// MCP endpoint [env MCPT_URL; default: the running `up`'s, else
    /// http://127.0.0.1:8080/mcp]
    #[arg(long, value_name = "URL")]
    pub(super) url: Option<String>,
}

/// The Redis option of the subcommands that read Redis.
#[derive(Debug, clap::Args)]
pub(crate) struct RedisUrl {
    /// Redis [env MCPT_REDIS_URL; default: the running `up`'s, else
    /// redis://127.0.0.1:6379]
    #[arg(long, value_name = "URL")]
    pub(super) redis: Option<String>,
}

/// The data directory of the running `up` the subcommands use when nothing else says
/// where to connect.
#[derive(Debug, clap::Args)]
pub(crate) struct UpData {
    /// The data directory of the `up` to use, when no --url, --redis, MCPT_URL or
    /// MCPT_REDIS_URL is given [env MCPT_DATA_DIR; default as `up`'s]
    #[arg(long, value_name = "DIR")]
    pub(super) data: Option<PathBuf>,
}

/// Where a subcommand connects: its MCP endpoint and its Redis.
#[derive(Debug, PartialEq)]
pub(super) struct Targets {
    pub(super) url: String,
    pub(super) redis: String,
}

/// The flags and variables as given, each missing one its default; only when none is
/// given, the running `up`'s pair, whole (never one from each: see the module doc).
///
/// # Errors
/// `--data DIR` names a directory with no running `up`.
pub(super) fn targets(
    url: Option<String>,
    redis: Option<String>,
    up: UpData,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Targets, Fail> {
    let url = url
        .or_else(|| env(ENV_URL))
        .filter(|v| !v.trim().is_empty());
    let redis = redis
        .or_else(|| env(ENV_REDIS))
        .filter(|v| !v.trim().is_empty());
    if url.is_none() && redis.is_none() {
        match (Runtime::find(up.data.as_deref()), up.data) {
            (Some(found), _) => {
                return Ok(Targets {
                    url: found.mcp_url,
                    redis: found.redis_url,
                });
            }
            (None, Some(dir)) => {
                return Err(Fail::runtime(format!(
                    "no `mcp-tasks up` is running with the data directory {}",
                    dir.display()
                )));
            }
            (None, None) => {}
        }
    }
    Ok(Targets {
        url: url.unwrap_or_else(|| DEFAULT_URL.to_owned()),
        redis: redis.unwrap_or_else(|| DEFAULT_REDIS.to_owned()),
    })
}

/// An environment variable, as [`targets`] reads it.
pub(super) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16 review: `tools --url REMOTE` must not read the local `up`'s Redis. No `up`
    /// runs with this test's (missing) data directory, so only the explicit ones count.
    #[test]
    fn explicit_targets_are_not_mixed_with_an_up() {
        let none = |_: &str| None;
        let nowhere = || UpData {
            data: Some(std::env::temp_dir().join("mcpt-cli-no-up-here")),
        };
        let t = targets(Some("http://remote/mcp".into()), None, nowhere(), none)
            .unwrap_or_else(|f| panic!("{f:?}"));
        assert_eq!(
            t,
            Targets {
                url: "http://remote/mcp".into(),
                redis: DEFAULT_REDIS.into()
            }
        );
        let from_env = |name: &str| (name == ENV_REDIS).then(|| "redis://r:1".to_owned());
        let t = targets(None, None, nowhere(), from_env).unwrap_or_else(|f| panic!("{f:?}"));
        assert_eq!(
            t,
            Targets {
                url: DEFAULT_URL.into(),
                redis: "redis://r:1".into()
            }
        );
        // Nothing given and no `up` in the directory named: said, not guessed.
        let fail = targets(None, None, nowhere(), none).expect_err("no up there");
        assert_eq!(fail.code, 1);
    }
}
