//! The operator's console (`MCPT_CONSOLE*`): whether the gateway serves `/console/`, who may
//! open it, how its sessions are signed, and where a task's trace id links to.

use super::*;

/// `on` serves the operator's console under `/console/` (default `off`).
pub const ENV_CONSOLE: &str = "MCPT_CONSOLE";

/// Comma-separated principals (as `MCPT_AUTH` names them) allowed into the console when
/// authentication is on; everyone else gets 404.
pub const ENV_CONSOLE_PRINCIPALS: &str = "MCPT_CONSOLE_PRINCIPALS";

/// Key (at least 32 characters) signing console session cookies. Unset: a random key per
/// process, so sessions do not survive a restart and are not accepted by other replicas.
pub const ENV_CONSOLE_SECRET: &str = "MCPT_CONSOLE_SECRET";

/// A URL template for a task's trace: `{trace_id}` is replaced by the trace id
/// (e.g. `https://jaeger.example/trace/{trace_id}`).
pub const ENV_CONSOLE_TRACE_URL: &str = "MCPT_CONSOLE_TRACE_URL";

/// Most console event streams (open console pages) one gateway serves at once; past it a
/// page gets 503 and a message.
pub const ENV_CONSOLE_MAX_STREAMS: &str = "MCPT_CONSOLE_MAX_STREAMS";
/// Default of [`ENV_CONSOLE_MAX_STREAMS`].
pub const DEFAULT_CONSOLE_MAX_STREAMS: usize = 256;

/// Shortest accepted `MCPT_CONSOLE_SECRET`.
pub const MIN_CONSOLE_SECRET_LEN: usize = 32;

/// Console settings. `Debug` leaves the secret out.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// `MCPT_CONSOLE`, default off.
    pub enabled: bool,
    /// `MCPT_CONSOLE_PRINCIPALS`, default none (with authentication on, nobody gets in).
    pub principals: Vec<String>,
    /// `MCPT_CONSOLE_SECRET`, default a random key per process.
    pub secret: Option<String>,
    /// `MCPT_CONSOLE_TRACE_URL`, default no link.
    pub trace_url: Option<String>,
    /// `MCPT_CONSOLE_MAX_STREAMS`, default [`DEFAULT_CONSOLE_MAX_STREAMS`].
    pub max_streams: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: false,
            principals: Vec::new(),
            secret: None,
            trace_url: None,
            max_streams: DEFAULT_CONSOLE_MAX_STREAMS,
        }
    }
}

impl std::fmt::Debug for ConsoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleConfig")
            .field("enabled", &self.enabled)
            .field("principals", &self.principals)
            .field("secret", &self.secret.as_ref().map(|_| "(set)"))
            .field("trace_url", &self.trace_url)
            .field("max_streams", &self.max_streams)
            .finish()
    }
}

impl ConsoleConfig {
    /// Read from `src`.
    ///
    /// # Errors
    /// The first bad variable.
    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(ConsoleConfig {
            enabled: parsed(src, ENV_CONSOLE, false, "on or off", |s| {
                match s.to_ascii_lowercase().as_str() {
                    "on" | "1" | "true" => Some(true),
                    "off" | "0" | "false" => Some(false),
                    _ => None,
                }
            })?,
            principals: parsed(
                src,
                ENV_CONSOLE_PRINCIPALS,
                Vec::new(),
                "a comma-separated list of principals",
                list,
            )?,
            secret: parsed(
                src,
                ENV_CONSOLE_SECRET,
                None,
                "a key of at least 32 characters",
                |s| (s.len() >= MIN_CONSOLE_SECRET_LEN).then(|| Some(s.to_owned())),
            )?,
            trace_url: parsed(
                src,
                ENV_CONSOLE_TRACE_URL,
                None,
                "an http(s) URL containing {trace_id}",
                |s| {
                    ((s.starts_with("http://") || s.starts_with("https://"))
                        && s.contains("{trace_id}"))
                    .then(|| Some(s.to_owned()))
                },
            )?,
            max_streams: parsed(
                src,
                ENV_CONSOLE_MAX_STREAMS,
                DEFAULT_CONSOLE_MAX_STREAMS,
                "a whole number from 1 to 100000",
                |s| s.parse().ok().filter(|n| (1..=100_000).contains(n)),
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<ConsoleConfig, ConfigError> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        ConsoleConfig::from_source(&map)
    }

    #[test]
    fn debug_leaves_the_secret_out() {
        let secret = "s".repeat(MIN_CONSOLE_SECRET_LEN);
        let c = read(&[(ENV_CONSOLE, "on"), (ENV_CONSOLE_SECRET, &secret)]).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains(&secret), "{shown}");
        assert!(shown.contains("(set)"), "{shown}");
    }

    #[test]
    fn console_is_off_by_default_and_values_are_checked() {
        assert_eq!(read(&[]).unwrap(), ConsoleConfig::default());
        let on = read(&[
            (ENV_CONSOLE, "on"),
            (ENV_CONSOLE_PRINCIPALS, "alice, bob"),
            (ENV_CONSOLE_TRACE_URL, "https://t.example/{trace_id}"),
        ])
        .unwrap();
        assert!(on.enabled);
        assert_eq!(on.principals, ["alice", "bob"]);
        for bad in [
            (ENV_CONSOLE, "maybe"),
            (ENV_CONSOLE_SECRET, "short"),
            (ENV_CONSOLE_TRACE_URL, "https://t.example/no-placeholder"),
            (ENV_CONSOLE_TRACE_URL, "javascript:{trace_id}"),
            (ENV_CONSOLE_MAX_STREAMS, "0"),
            (ENV_CONSOLE_MAX_STREAMS, "many"),
        ] {
            let e = read(&[bad]).expect_err("refused");
            assert_eq!(e.var, bad.0);
        }
    }
}
