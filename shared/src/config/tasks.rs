//! Task lifetime and polling defaults, shared by the gateway (bounds) and the workers (tool
//! defaults).

use super::*;

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
