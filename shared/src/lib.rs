//! Shared by the mcp-tasks gateway and worker, one floor above the protocol and the store
//! (crates `mcp-tasks-protocol` in `shared/protocol/` and `mcp-tasks-store` in
//! `shared/store/`, re-exported here as [`protocol`] and [`store`]):
//!
//! - [`schema`]: the JSON Schema subset used to validate tool arguments.
//! - [`config`]: `MCPT_*` variables and their defaults.
//! - [`telemetry`]: logs, OTLP trace and metric export, the Prometheus text.
//! - [`metrics`]: the OpenTelemetry instruments both binaries record.
//! - [`shutdown`]: OS signals to a cancellation token.
//! - [`tally`]: this process' counters for the console's charts, written every few seconds.
//! - [`web`]: the one HTTP client stack for outbound calls (http and https).

#![warn(missing_docs)]

pub mod body;
pub mod config;
pub mod metrics;
pub mod owner;
pub mod schema;
pub mod shutdown;
pub mod sync;
pub mod tally;
pub mod telemetry;
pub mod web;

pub use mcp_tasks_protocol as protocol;
pub use mcp_tasks_store as store;

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
