//! Methods (base-protocol.md §8, §12): removed and unknown methods (-32601), a 2025
//! `initialize`, in-band errors of valid requests, `tools/list` (TTL, cache scope, schemas,
//! stable order), unknown tools and tool errors, and arguments that break the schema.
//!
//! Checklist ids cited: B-23, B-24, B-25, B-26, B-27, B-28, B-29.

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Client, TestContext, VERSION, caps_none, caps_tasks};
use serde_json::{Value, json};

use super::{bytes, first_text, headers, ok_result, request, rpc_error, rpc_error_for, task_keys};

/// B-23: removed and unknown methods — `initialize` (with 2026 `_meta`), `ping`,
/// `logging/setLevel`, `resources/subscribe`, `resources/unsubscribe`, `tasks/list`,
/// `tasks/result` (with a taskId and no `Mcp-Name`), `unknown/method` — are 404 / -32601
/// with the id echoed, even when the Tasks extension is declared.
#[tokio::test]
async fn removed_and_unknown_methods_are_404_32601() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let cases = [
        (
            "initialize",
            json!({"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}),
        ),
        ("ping", json!({})),
        ("logging/setLevel", json!({"level": "debug"})),
        ("resources/subscribe", json!({"uri": "test://x"})),
        ("resources/unsubscribe", json!({"uri": "test://x"})),
        ("tasks/list", json!({})),
        ("tasks/result", json!({"taskId": "tsk_x"})),
        ("unknown/method", json!({})),
    ];
    for (i, (method, params)) in cases.into_iter().enumerate() {
        for caps in [caps_none(), caps_tasks()] {
            let id = json!(i);
            let body = request(id.clone(), method, params.clone(), &caps);
            let r = client
                .post_raw(&headers(method, None), bytes(&body))
                .await?;
            rpc_error_for(&r, &id, 404, -32601);
        }
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-24 as this server extends it: a 2025 `initialize` (no `_meta`, a 2025 version in
/// params) starts a 2025 session (`legacy.rs`) with the client's version when served, else
/// the newest 2025 revision; the 2026 path still names only 2026-07-28 in -32022.
#[tokio::test]
async fn legacy_initialize_starts_a_2025_session() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let legacy = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    for (asked, got) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-11-25"),
        ("2024-11-05", "2025-11-25"),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": asked, "capabilities": {},
            "clientInfo": {"name": "old-client", "version": "1.32.2"}}});
        let r = client.post_raw(&legacy, bytes(&body)).await?;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["result"]["protocolVersion"], got, "{}", r.body);
        assert!(r.headers.get("mcp-session-id").is_some());
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-25: errors raised while handling a valid request are in-band with HTTP 200: unknown
/// tool, unknown task, bad cursor, `arguments` not an object, a tool's protocol failure.
#[tokio::test]
async fn errors_of_valid_requests_are_in_band_with_200() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client.call("no_such_tool", json!({}), &caps_none()).await?;
    rpc_error(&r, 200, -32602);
    let r = client
        .request(
            "tasks/get",
            json!({"taskId": "tsk_neverissued"}),
            &caps_tasks(),
        )
        .await?;
    rpc_error(&r, 200, -32602);
    let r = client
        .request("tools/list", json!({"cursor": "bogus"}), &caps_none())
        .await?;
    rpc_error(&r, 200, -32602);
    let r = client
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": "text"}),
            &caps_none(),
        )
        .await?;
    rpc_error(&r, 200, -32602);
    let r = client
        .call(
            "fail",
            json!({"mode": "protocol", "message": "boom"}),
            &caps_none(),
        )
        .await?;
    let e = rpc_error(&r, 200, -32603);
    assert_eq!(e["message"], "boom", "{e}");
    assert_eq!(task_keys(&ctx)?.len(), 1, "only the fail call made a task");
    ctx.cleanup().await;
    Ok(())
}

/// B-26, B-28: `tools/list` returns `tools`, `ttlMs`, `cacheScope` and no `nextCursor`
/// (one page); every tool has a name and an object `inputSchema`.
#[tokio::test]
async fn tools_list_has_ttl_and_cache_scope_and_object_schemas() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let r = ctx
        .client()
        .request("tools/list", json!({}), &caps_none())
        .await?;
    let result = ok_result(&r);
    assert_eq!(result["resultType"], "complete");
    assert!(result["ttlMs"].as_u64().is_some(), "{result}");
    assert!(
        ["public", "private"].contains(&result["cacheScope"].as_str().unwrap_or("")),
        "{result}"
    );
    assert!(result.get("nextCursor").is_none(), "{result}");
    let tools = result["tools"].as_array().context("tools")?;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names.len(), tools.len(), "every tool has a name");
    for expected in ["greet", "echo", "sleep", "ask", "fail"] {
        assert!(names.contains(&expected), "{expected} missing: {names:?}");
    }
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "B-28: {tool}");
        let name = tool["name"].as_str().unwrap_or_default();
        assert!(
            (1..=128).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)),
            "tool name {name:?}"
        );
    }
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "duplicate names: {names:?}");
    ctx.cleanup().await;
    Ok(())
}

/// B-27: `tools/list` three times gives the same tools in the same order, `greet` first.
#[tokio::test]
async fn tools_list_order_is_stable() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let mut seen: Vec<Value> = Vec::new();
    for _ in 0..3 {
        // A fresh client each time: the order may not depend on the connection either.
        let client = Client::new(ctx.gateways[0].addr);
        let r = client
            .request("tools/list", json!({}), &caps_none())
            .await?;
        seen.push(ok_result(&r)["tools"].clone());
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1], seen[2]);
    assert_eq!(seen[0][0]["name"], "greet");
    ctx.cleanup().await;
    Ok(())
}

/// B-29: an unknown tool is -32602 (no task); a tool-level failure is a `CallToolResult`
/// with `isError: true` and explanatory text, not a JSON-RPC error.
#[tokio::test]
async fn unknown_tool_is_32602_and_tool_failure_is_an_is_error_result() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for caps in [caps_none(), caps_tasks()] {
        let r = client.call("foo", json!({}), &caps).await?;
        let e = rpc_error(&r, 200, -32602);
        assert!(
            e["message"].as_str().unwrap_or("").contains("foo"),
            "names the tool: {e}"
        );
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    let r = client
        .call(
            "fail",
            json!({"mode": "tool", "message": "disk full"}),
            &caps_none(),
        )
        .await?;
    let result = ok_result(&r);
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(first_text(&result), "disk full");
    ctx.cleanup().await;
    Ok(())
}

/// B-29 (§8.4 PRJ): arguments that violate the input schema are a synchronous `isError`
/// result naming the field and the constraint, and no task is created — even when the
/// request declares the Tasks extension.
#[tokio::test]
async fn arguments_violating_the_schema_are_a_tool_error_and_create_no_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let cases = [
        ("sleep", json!({"ms": -5}), vec!["ms", ">= 0", "-5"]),
        ("sleep", json!({"ms": "soon"}), vec!["ms", "integer"]),
        ("sleep", json!({}), vec!["ms", "required"]),
        ("sleep", json!({"ms": 1, "steps": 0}), vec!["steps", ">= 1"]),
        ("echo", json!({}), vec!["text", "required"]),
        ("echo", json!({"text": 5}), vec!["text", "string"]),
        (
            "fail",
            json!({"mode": "maybe", "message": "x"}),
            vec!["mode", "one of"],
        ),
    ];
    for caps in [caps_none(), caps_tasks()] {
        for (tool, args, words) in &cases {
            let r = client.call(tool, args.clone(), &caps).await?;
            let result = ok_result(&r);
            assert_eq!(result["resultType"], "complete", "{tool} {args}: {result}");
            assert_eq!(result["isError"], true, "{tool} {args}: {result}");
            let text = first_text(&result);
            for w in words {
                assert!(text.contains(w), "{tool} {args}: {text:?} lacks {w:?}");
            }
        }
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}
