//! `tools`: what a gateway offers, as a table — each tool's name, whether a call runs as a
//! task, and its arguments.
//!
//! The list is the gateway's `tools/list` (what this caller may call). The 2026-07-28
//! listing carries no task support (base-protocol §8.3), so that column comes from the
//! gateway's console (`/console/api/workers`: the policy the gateway applies, from the
//! workers' advertisements); `?` when the console is off or the caller is not one of its
//! principals. No Redis address is needed.

use std::collections::HashMap;

use mcp_tasks_store::registry::Policy;
use serde_json::{Value, json};

use super::Fail;
use super::client::{Caps, Client};
use super::ops;

/// `tools`.
pub(crate) async fn tools(client: &Client) -> Result<(), Fail> {
    let caps = Caps {
        tasks: true,
        elicitation: true,
    };
    let mut listed = Vec::new();
    let mut params = json!({});
    loop {
        let page = client
            .request("tools/list", params, caps, Some(ops::TIMEOUT))
            .await
            .map_err(super::tasks::rpc_fail)?;
        listed.extend(page["tools"].as_array().cloned().unwrap_or_default());
        match page["nextCursor"].as_str() {
            Some(cursor) => params = json!({ "cursor": cursor }),
            None => break,
        }
    }
    if listed.is_empty() {
        println!("no tools (no live worker serves this gateway)");
        return Ok(());
    }
    let policies = policies(client).await;
    let rows: Vec<Vec<String>> = listed
        .iter()
        .map(|tool| {
            let name = tool["name"].as_str().unwrap_or("?").to_owned();
            let task = policies
                .as_ref()
                .and_then(|p| p.get(&name))
                .map_or("?", |p| task_support(*p))
                .to_owned();
            vec![name, task, arguments(&tool["inputSchema"])]
        })
        .collect();
    ops::table(&["TOOL", "TASK", "ARGUMENTS"], &rows);
    Ok(())
}

/// Each advertised tool's policy, from the gateway's console; `None` when it cannot be
/// read.
async fn policies(client: &Client) -> Option<HashMap<String, Policy>> {
    let body = tokio::time::timeout(ops::TIMEOUT, client.console_get("/console/api/workers"))
        .await
        .ok()?
        .ok()?;
    Some(
        body["tools"]
            .as_array()?
            .iter()
            .filter_map(|t| {
                let name = t["name"].as_str()?.to_owned();
                let policy = serde_json::from_value(t["policy"].clone()).ok()?;
                Some((name, policy))
            })
            .collect(),
    )
}

/// How a call of a tool with `policy` runs, in the words of `call --task`.
fn task_support(policy: Policy) -> &'static str {
    match policy {
        Policy::Sync => "never",
        Policy::Auto | Policy::Task => "with --task",
        Policy::TaskOnly => "only with --task",
    }
}

/// An input schema's properties as `name: type`, optional ones marked `?`:
/// `ms: integer, steps?: integer`.
fn arguments(schema: &Value) -> String {
    let Some(props) = schema["properties"].as_object() else {
        return "-".to_owned();
    };
    if props.is_empty() {
        return "-".to_owned();
    }
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    props
        .iter()
        .map(|(name, p)| {
            let mark = if required.contains(&name.as_str()) {
                ""
            } else {
                "?"
            };
            let ty = match &p["type"] {
                Value::String(t) => t.clone(),
                Value::Array(ts) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("|"),
                _ if p.get("enum").is_some() => "enum".to_owned(),
                _ => "any".to_owned(),
            };
            format!("{name}{mark}: {ty}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_read_as_name_and_type() {
        let schema = json!({"type": "object", "properties": {
            "ms": {"type": "integer"}, "steps": {"type": "integer"}, "v": {"type": ["string", "null"]}
        }, "required": ["ms"]});
        assert_eq!(
            arguments(&schema),
            "ms: integer, steps?: integer, v?: string|null"
        );
        assert_eq!(arguments(&json!({"type": "object"})), "-");
    }
}
