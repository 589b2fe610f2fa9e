//! The paged lists an upstream is asked for at start (`tools/list`, and through
//! `upstream/provide.rs` its prompts and resources), each followed to its last page.

use std::time::Duration;

use mcp_tasks_protocol::jsonrpc::METHOD_NOT_FOUND;
use mcp_tasks_protocol::tools::Tool as WireTool;
use serde_json::{Value, json};

use super::session::{RpcError, Session};

/// Time for one `tools/list` page at start.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Every tool the upstream lists.
pub(super) async fn list_tools(session: &Session) -> Result<Vec<WireTool>, ListError> {
    list_pages(session, "tools/list", "tools")
        .await?
        .into_iter()
        .map(|t| serde_json::from_value(t).map_err(ListError::Listing))
        .collect()
}

/// Why an upstream list could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum ListError {
    /// A page got no answer within the limit (in seconds).
    #[error("no answer within {0}s")]
    Timeout(u64),
    /// The request failed (the upstream's error, or the connection closed).
    #[error(transparent)]
    Rpc(RpcError),
    /// The answer lacks its list (the member named).
    #[error("the answer has no {0} list")]
    NoList(String),
    /// The upstream kept returning a cursor.
    #[error("more than 1000 pages")]
    TooManyPages,
    /// An item of `tools/list` is not a tool listing.
    #[error("a tool listing does not parse: {0}")]
    Listing(#[source] serde_json::Error),
}

impl ListError {
    /// The upstream answered -32601: it has no such list.
    pub(super) fn not_found(&self) -> bool {
        matches!(self, ListError::Rpc(RpcError::Error(o)) if o.code == METHOD_NOT_FOUND)
    }
}

/// Every item of a paged upstream list (`tools/list` → its `tools`), following
/// `nextCursor`.
pub(super) async fn list_pages(
    session: &Session,
    method: &str,
    items: &str,
) -> Result<Vec<Value>, ListError> {
    let mut found = Vec::new();
    let mut cursor: Option<String> = None;
    // Bounded, so a server that always returns a cursor cannot hold the start forever.
    for _ in 0..1000 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = tokio::time::timeout(LIST_TIMEOUT, session.request(method, params))
            .await
            .map_err(|_| ListError::Timeout(LIST_TIMEOUT.as_secs()))?
            .map_err(ListError::Rpc)?;
        let Some(Value::Array(list)) = page.get(items) else {
            return Err(ListError::NoList(items.to_owned()));
        };
        found.extend(list.iter().cloned());
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Ok(found),
        }
    }
    Err(ListError::TooManyPages)
}
