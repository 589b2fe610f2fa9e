//! Wire types of MCP revision 2026-07-28 and the Tasks extension, 1:1 with the spec digest
//! (`spec/base-protocol.md`, `spec/tasks-extension.md`).
//!
//! This module is the only place that spells a JSON field name or an error code of the
//! protocol. It holds no logic beyond small predicates; the gateway decides, the store
//! persists, and both speak through these types.

#![warn(missing_docs)]

pub mod jsonrpc;
pub mod legacy;
pub mod meta;
pub mod method;
pub mod notifications;
pub mod params;
pub mod results;
pub mod sse;
pub mod tasks;
pub mod time;
pub mod tools;

/// The one protocol revision this server speaks (B-01).
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// Identifier of the Tasks extension, as it appears in capability maps.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Name and version this server reports in `serverInfo` (B-09).
pub const SERVER_NAME: &str = "mcp-tasks";

/// Version reported in `serverInfo`.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");
