//! Logging setup: `RUST_LOG` filters (default `info`), `MCPT_LOG_FORMAT=json` for JSON lines.
//! Logs go to stderr; stdout carries only the `listening on` contract line.

use tracing_subscriber::EnvFilter;

/// Install the global subscriber for a binary named `service`.
pub fn init(service: &'static str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var(crate::config::ENV_LOG_FORMAT).is_ok_and(|v| v == "json");
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let result = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    if result.is_ok() {
        tracing::debug!(service, "telemetry initialised");
    }
}
