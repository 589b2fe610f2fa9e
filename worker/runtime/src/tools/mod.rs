//! Built-in tool packs, selected by `MCPT_TOOLS`:
//! - `demo` ([`demo`]): `echo`, `sleep`, `ask`, `fail` — the contract external tools test against.
//! - `conformance` ([`conformance`]): the fixtures the official MCP conformance suite calls.

pub mod conformance;
pub mod demo;

use std::sync::Arc;

use serde_json::Value;

use crate::tool::{Tool, ToolError};

/// The tools of the named packs, in the order given (the order of `tools/list`).
pub fn packs(names: &[String]) -> Vec<Arc<dyn Tool>> {
    let mut tools = Vec::new();
    for name in names {
        match name.as_str() {
            "demo" => tools.extend(demo::tools()),
            "conformance" => tools.extend(conformance::tools()),
            other => tracing::warn!(pack = %other, "unknown tool pack ignored"),
        }
    }
    tools
}

/// A string argument (already schema-checked where the schema requires it).
pub(crate) fn str_arg<'a>(args: &'a Value, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or_default()
}

/// Why an elicitation answer carries no accepted content (the text is the tool's error).
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotAccepted {
    /// `accept` without a `content` object.
    #[error("the answer was accepted but carried no content")]
    NoContent,
    /// `decline`, `cancel` or another action.
    #[error("the user chose {0}")]
    Chose(String),
    /// No `action` string at all.
    #[error("the answer has no action")]
    NoAction,
}

/// The `content` of an accepted elicitation answer, or why there is none.
pub(crate) fn accepted_content(
    answer: &Value,
) -> Result<&serde_json::Map<String, Value>, NotAccepted> {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => answer
            .get("content")
            .and_then(Value::as_object)
            .ok_or(NotAccepted::NoContent),
        Some(other) => Err(NotAccepted::Chose(other.to_owned())),
        None => Err(NotAccepted::NoAction),
    }
}

/// Sleep `ms`, or stop early when the task is cancelled.
pub(crate) async fn nap(ctx: &crate::TaskContext, ms: u64) -> Result<(), ToolError> {
    tokio::select! {
        () = tokio::time::sleep(std::time::Duration::from_millis(ms)) => Ok(()),
        () = ctx.cancelled() => Err(ToolError::Stopped),
    }
}
