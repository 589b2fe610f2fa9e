//! The mcp-tasks worker: pulls jobs from Redis Streams and runs tools.
//!
//! - [`Tool`], [`ToolSpec`], [`TaskContext`]: the API for writing tools
//!   (see `examples/custom_tool.rs` for a worker with its own tool in ~20 lines).
//! - [`tools`]: the built-in packs (`demo`, `conformance`).
//! - [`run`]: advertise the tools, then read and run jobs until shutdown;
//!   [`run_with_admin`] also serves `/healthz`, `/readyz` and `/metrics` (`admin.rs`);
//!   [`run_serving`] also answers [`Provider`]s' forwarded requests (`forward.rs`).
//!
//! A worker's life step by step is in `lifecycle.rs`, its tools' checks and adverts in
//! `advertise.rs`, the job loop itself in `runner/`; everything Redis is in
//! `mcp_tasks_store`. The `MCPT_TOOLS_FILE` catalog is `mcp-tasks-catalog`
//! (`worker/catalog/`), built on this crate's public API only; the `mcp-tasks-worker`
//! binary (`worker/`) joins the two.

#![warn(missing_docs)]

mod admin;
mod advertise;
mod claims;
mod context;
mod forward;
mod lifecycle;
mod runner;
mod strikes;
mod tool;
pub mod tools;

use std::sync::Arc;

use mcp_tasks_shared::config::WorkerConfig;
use mcp_tasks_store::StoreError;
use tokio_util::sync::CancellationToken;

pub use context::TaskContext;
pub use forward::{Provider, ProviderFuture};
pub use mcp_tasks_protocol::tasks::InputRequest;
pub use mcp_tasks_protocol::tools::CallToolResult;
pub use mcp_tasks_store::Priority;
pub use mcp_tasks_store::forward::UpstreamAdvert;
pub use mcp_tasks_store::registry::{Needs, Policy};
pub use tool::{
    DEFAULT_DEAD_LETTER_KEEP, DeadLetterPolicy, Rate, RateError, Retry, RetryPolicy, Tool,
    ToolError, ToolFuture, ToolSpec,
};

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Redis was unreachable at start.
    #[error("cannot reach redis")]
    Redis(#[from] StoreError),
    /// Two tools share a name, or a tool's queue is not served.
    #[error("{0}")]
    Tools(String),
}

/// Advertise `tools`, then run jobs from `config.queues` until `shutdown` fires; running
/// jobs then get `config.shutdown_grace` to finish.
///
/// # Errors
/// Redis unreachable at start, or an invalid tool set.
pub async fn run(
    config: WorkerConfig,
    tools: Vec<Arc<dyn Tool>>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    run_with_admin(config, tools, None, shutdown).await
}

/// [`run`], serving `GET /healthz`, `/readyz` and `/metrics` on `admin` meanwhile (ready
/// while Redis answers and until `shutdown` fires; the listener stays up through the grace
/// period).
///
/// # Errors
/// Redis unreachable at start, or an invalid tool set.
pub async fn run_with_admin(
    config: WorkerConfig,
    tools: Vec<Arc<dyn Tool>>,
    admin: Option<tokio::net::TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    run_serving(config, tools, Vec::new(), admin, shutdown).await
}

/// [`run_with_admin`], also advertising `providers` (upstream prompts and resources) and
/// answering the requests gateways forward to them.
///
/// # Errors
/// Redis unreachable at start, or an invalid tool set.
pub async fn run_serving(
    config: WorkerConfig,
    tools: Vec<Arc<dyn Tool>>,
    providers: Vec<Arc<dyn Provider>>,
    admin: Option<tokio::net::TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    lifecycle::serve(config, tools, providers, admin, shutdown).await
}
