//! Who may call (`MCPT_AUTH*`) and how much each principal may hold (`MCPT_LIMIT_*`,
//! `MCPT_MAX_*` request bounds).

use super::*;

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

/// 2025 sessions one principal may hold open (0: no limit).
pub const ENV_LIMIT_SESSIONS: &str = "MCPT_LIMIT_SESSIONS";

/// Default open 2025 sessions per principal: each keeps up to 4 KiB of capabilities for
/// a day of idleness.
pub const DEFAULT_LIMIT_SESSIONS: u32 = 100;

/// Bytes one principal's tasks may keep in Redis (job arguments and results, until they
/// expire); 0: no limit. Read by gateways (creates refused while over) and workers (a
/// result that would pass it fails its task).
pub const ENV_LIMIT_STORED_BYTES: &str = "MCPT_LIMIT_STORED_BYTES";

/// Default stored bytes per principal: 64 MiB.
pub const DEFAULT_LIMIT_STORED_BYTES: u64 = 64 << 20;

/// Most `taskIds` in one `subscriptions/listen`.
pub const ENV_MAX_LISTEN_TASKS: &str = "MCPT_MAX_LISTEN_TASKS";

/// Default bound on `taskIds` per listen.
pub const DEFAULT_MAX_LISTEN_TASKS: usize = 1000;

/// Comma-separated principals (as `MCPT_AUTH` names them) who may ask for `high` priority
/// in a call's `_meta`; unset: every caller may.
pub const ENV_HIGH_PRIORITY_PRINCIPALS: &str = "MCPT_HIGH_PRIORITY_PRINCIPALS";

/// Largest `arguments` of a `tools/call`, in bytes of JSON.
pub const ENV_MAX_ARGS_BYTES: &str = "MCPT_MAX_ARGS_BYTES";

/// Default argument bound: 256 KiB.
pub const DEFAULT_MAX_ARGS_BYTES: usize = 256 << 10;

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
    /// `MCPT_HIGH_PRIORITY_PRINCIPALS`: who may ask for `high` priority; `None` (unset):
    /// every caller.
    pub high_priority: Option<Vec<String>>,
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
    /// `MCPT_LIMIT_SESSIONS`, default 100.
    pub sessions: u32,
    /// `MCPT_LIMIT_STORED_BYTES`, default 64 MiB.
    pub stored_bytes: u64,
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
            high_priority: parsed(
                src,
                ENV_HIGH_PRIORITY_PRINCIPALS,
                None,
                "a comma-separated list of principals",
                |s| list(s).map(Some),
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
            sessions: parsed(
                src,
                ENV_LIMIT_SESSIONS,
                default(DEFAULT_LIMIT_SESSIONS),
                COUNT,
                count,
            )?,
            stored_bytes: stored_bytes(src, anonymous)?,
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

/// `MCPT_LIMIT_STORED_BYTES`; without authentication off unless set, as the other
/// per-principal limits.
///
/// # Errors
/// Not a byte count.
pub fn stored_bytes(src: &dyn Source, anonymous: bool) -> Result<u64, ConfigError> {
    parsed(
        src,
        ENV_LIMIT_STORED_BYTES,
        if anonymous {
            0
        } else {
            DEFAULT_LIMIT_STORED_BYTES
        },
        "a byte count ≥ 0 (0: no limit)",
        |s| s.parse().ok(),
    )
}
