//! Shared by the mcp-tasks gateway and worker.
//!
//! - [`protocol`]: wire types of MCP 2026-07-28 and the Tasks extension (the only place a
//!   JSON field name or error code is spelled).
//! - [`store`]: everything that knows Redis — keys, Lua scripts, streams, pub/sub.
//! - [`schema`]: the JSON Schema subset used to validate tool arguments.
//! - [`config`]: `MCPT_*` variables and their defaults.
//! - [`telemetry`]: logs, OTLP trace and metric export, the Prometheus text.
//! - [`metrics`]: the OpenTelemetry instruments both binaries record.
//! - [`shutdown`]: OS signals to a cancellation token.

pub mod config;
pub mod metrics;
pub mod protocol;
pub mod schema;
pub mod shutdown;
pub mod store;
pub mod telemetry;

/// An error and its causes on one line: `cannot reach redis: Connection refused (os error 111)`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
