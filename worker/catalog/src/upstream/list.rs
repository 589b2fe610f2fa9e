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
pub(super) async fn list_tools(session: &Session) -> Result<Vec<WireTool>, String> {
    list_pages(session, "tools/list", "tools")
        .await
        .map_err(|e| e.why)?
        .into_iter()
        .map(|t| {
            serde_json::from_value(t).map_err(|e| format!("a tool listing does not parse: {e}"))
        })
        .collect()
}

/// Why an upstream list could not be read.
#[derive(Debug)]
pub(super) struct ListError {
    /// The upstream answered -32601: it has no such list.
    pub(super) not_found: bool,
    pub(super) why: String,
}

/// Every item of a paged upstream list (`tools/list` → its `tools`), following
/// `nextCursor`.
pub(super) async fn list_pages(
    session: &Session,
    method: &str,
    items: &str,
) -> Result<Vec<Value>, ListError> {
    let fail = |why: String| ListError {
        not_found: false,
        why,
    };
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
            .map_err(|_| fail(format!("no answer within {}s", LIST_TIMEOUT.as_secs())))?
            .map_err(|e| ListError {
                not_found: matches!(&e, RpcError::Error(o) if o.code == METHOD_NOT_FOUND),
                why: e.to_string(),
            })?;
        let Some(Value::Array(list)) = page.get(items) else {
            return Err(fail(format!("the answer has no {items} list")));
        };
        found.extend(list.iter().cloned());
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Ok(found),
        }
    }
    Err(fail("more than 1000 pages".to_owned()))
}
