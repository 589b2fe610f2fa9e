//! `server/discover` (base-protocol.md §5, T-01, B-10).

use mcp_tasks_protocol::jsonrpc::result_bytes;
use mcp_tasks_protocol::meta::server_meta;
use mcp_tasks_protocol::results::{CacheScope, DiscoverResult};
use mcp_tasks_protocol::{PROTOCOL_VERSION, TASKS_EXTENSION};
use serde_json::json;

use crate::envelope::Request;
use crate::error::DispatchError;
use crate::handlers::forward;
use crate::reply::Reply;
use crate::state::State;

/// Seconds a client may cache the discover result.
const DISCOVER_TTL_MS: u64 = 60_000;

pub(crate) async fn discover(state: &State, req: &Request) -> Result<Reply, DispatchError> {
    let mut capabilities = json!({ "tools": {}, "extensions": { TASKS_EXTENSION: {} } });
    forward::add_capabilities(state, &mut capabilities).await;
    let result = DiscoverResult {
        result_type: "complete",
        supported_versions: vec![PROTOCOL_VERSION],
        // Exactly `{}` for the extension: the reference client only speaks tasks to an
        // empty object (T-01).
        capabilities,
        instructions: Some(
            "Long-running tools answer with a task handle when you declare the io.modelcontextprotocol/tasks extension; follow it with tasks/get or subscriptions/listen.",
        ),
        ttl_ms: DISCOVER_TTL_MS,
        cache_scope: CacheScope::Public,
        meta: server_meta(),
    };
    Ok(Reply::Json(result_bytes(&req.id, &result)))
}
