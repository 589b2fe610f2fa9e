//! Versions and `server/discover` (base-protocol.md §3, §4), then `_meta` and capabilities
//! (§5): the served version and required discover fields, -32022 for unsupported versions,
//! -32602 for incomplete `_meta`, capabilities read per request, and -32021 for undeclared
//! ones.
//!
//! Checklist ids cited: B-01, B-04, B-06, B-07, B-08, B-09, B-10, B-19, B-26.

use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{TASKS, TestContext, VERSION, caps_none, caps_tasks, meta};
use serde_json::json;

use super::{
    PROTOCOL_VERSION_KEY, SERVER_INFO, bytes, content_type, first_text, headers, ok_result,
    request, rpc_error, rpc_error_for, set, task_keys,
};

const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";

// ---------------------------------------------------------------------------------------
// Versions and server/discover
// ---------------------------------------------------------------------------------------

/// B-01, B-04, B-09, B-10, B-26: `server/discover` lists exactly `2026-07-28`, declares
/// tools and the Tasks extension, carries `ttlMs`, `cacheScope` and `serverInfo`.
#[tokio::test]
async fn discover_lists_exactly_the_served_version_and_required_fields() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let r = ctx
        .client()
        .request("server/discover", json!({}), &caps_none())
        .await?;
    let result = ok_result(&r);
    assert_eq!(content_type(&r.headers), "application/json");
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!([VERSION]));
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    assert_eq!(result["capabilities"]["extensions"][TASKS], json!({}));
    assert!(result["ttlMs"].as_u64().is_some(), "ttlMs ≥ 0: {result}");
    assert!(
        ["public", "private"].contains(&result["cacheScope"].as_str().unwrap_or("")),
        "{result}"
    );
    let info = &result["_meta"][SERVER_INFO];
    assert!(
        info["name"].is_string() && info["version"].is_string(),
        "{result}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// B-19, B-01: an unsupported version (unknown, or the 2025 one) in header and `_meta` is
/// 400 / -32022 with `data.supported` ⊆ discover's list and `data.requested`.
#[tokio::test]
async fn unsupported_version_is_400_32022_naming_supported_and_requested() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for version in ["v999.0.0", "2025-11-25", "2025-06-18"] {
        let mut body = request(json!("v-1"), "server/discover", json!({}), &caps_none());
        body["params"]["_meta"][PROTOCOL_VERSION_KEY] = json!(version);
        let h = set(
            headers("server/discover", None),
            "mcp-protocol-version",
            Some(version),
        );
        let r = client.post_raw(&h, bytes(&body)).await?;
        let e = rpc_error_for(&r, &json!("v-1"), 400, -32022);
        assert_eq!(e["data"]["supported"], json!([VERSION]), "{e}");
        assert_eq!(e["data"]["requested"], version, "{e}");
    }
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// _meta and capabilities
// ---------------------------------------------------------------------------------------

/// B-06: `_meta` missing, without `protocolVersion`, or without `clientCapabilities` is
/// 400 / -32602 with the request id (headers otherwise fine); without `clientInfo` is served.
#[tokio::test]
async fn missing_meta_fields_are_400_32602_with_the_request_id() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let full = meta(&caps_none());
    let mut no_version = full.clone();
    no_version
        .as_object_mut()
        .context("meta")?
        .remove(PROTOCOL_VERSION_KEY);
    let mut no_caps = full.clone();
    no_caps
        .as_object_mut()
        .context("meta")?
        .remove(CLIENT_CAPABILITIES_KEY);
    let mut caps_not_object = full.clone();
    caps_not_object[CLIENT_CAPABILITIES_KEY] = json!("all");
    let cases = [
        ("no _meta", json!({})),
        ("no protocolVersion", json!({"_meta": no_version})),
        ("no clientCapabilities", json!({"_meta": no_caps})),
        (
            "clientCapabilities not an object",
            json!({"_meta": caps_not_object}),
        ),
        ("_meta not an object", json!({"_meta": "x"})),
    ];
    for (i, (what, params)) in cases.into_iter().enumerate() {
        let id = json!(format!("meta-{i}"));
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": params});
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        let e = rpc_error_for(&r, &id, 400, -32602);
        assert!(!e["message"].as_str().unwrap_or("").is_empty(), "{what}");
    }
    // No params at all is the same as no _meta.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "server/discover"});
    let r = client
        .post_raw(&headers("server/discover", None), bytes(&body))
        .await?;
    rpc_error_for(&r, &json!(9), 400, -32602);
    // clientInfo is only a SHOULD.
    let mut no_info = full;
    no_info
        .as_object_mut()
        .context("meta")?
        .remove(CLIENT_INFO_KEY);
    let body = json!({"jsonrpc": "2.0", "id": 10, "method": "server/discover", "params": {"_meta": no_info}});
    let r = client
        .post_raw(&headers("server/discover", None), bytes(&body))
        .await?;
    assert_eq!(ok_result(&r)["resultType"], "complete");
    ctx.cleanup().await;
    Ok(())
}

/// B-06: a `tools/call` with incomplete `_meta` is rejected before anything is stored.
#[tokio::test]
async fn tools_call_with_incomplete_meta_creates_no_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let mut no_version = meta(&caps_tasks());
    no_version
        .as_object_mut()
        .context("meta")?
        .remove(PROTOCOL_VERSION_KEY);
    for m in [json!(null), no_version] {
        let mut params = json!({"name": "sleep", "arguments": {"ms": 10}});
        if !m.is_null() {
            params["_meta"] = m;
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let r = client
            .post_raw(&headers("tools/call", Some("sleep")), bytes(&body))
            .await?;
        rpc_error_for(&r, &json!(1), 400, -32602);
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}

/// B-07: capabilities come from the current request only, on the same connection:
/// declaring the Tasks extension once does not make the next call a task, and a later
/// `tasks/get` without it is still refused.
#[tokio::test]
async fn capabilities_are_read_from_each_request_only() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("sleep", json!({"ms": 20}), &caps_tasks())
        .await?;
    let handle = ok_result(&r);
    assert_eq!(handle["resultType"], "task", "{handle}");
    let task = handle["taskId"].as_str().context("taskId")?.to_owned();
    let r = client
        .call("sleep", json!({"ms": 20}), &caps_none())
        .await?;
    let result = ok_result(&r);
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(first_text(&result), "slept 20 ms", "{result}");
    assert!(result.get("taskId").is_none(), "{result}");
    // The other way round: the task exists, but this request declares nothing.
    let r = client
        .request("tasks/get", json!({"taskId": task}), &caps_none())
        .await?;
    rpc_error(&r, 400, -32021);
    // And declaring again works again.
    client
        .wait_status(&task, "completed", Duration::from_secs(10))
        .await?;
    ctx.cleanup().await;
    Ok(())
}

/// B-08: a request that needs an undeclared capability is 400 / -32021 with
/// `data.requiredCapabilities` naming it, and nothing is created.
#[tokio::test]
async fn undeclared_capability_is_400_32021_with_required_capabilities() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    // tasks/* without the extension (checked before the id is looked up).
    for method in ["tasks/get", "tasks/cancel"] {
        let r = client
            .request(method, json!({"taskId": "gate-test"}), &caps_none())
            .await?;
        let e = rpc_error(&r, 400, -32021);
        assert_eq!(
            e["data"]["requiredCapabilities"],
            json!({"extensions": {TASKS: {}}}),
            "{method}: {e}"
        );
    }
    let r = client
        .request(
            "tasks/update",
            json!({"taskId": "gate-test", "inputResponses": {}}),
            &caps_none(),
        )
        .await?;
    rpc_error(&r, 400, -32021);
    // A tool that needs sampling.
    let r = client
        .call("test_missing_capability", json!({}), &caps_tasks())
        .await?;
    let e = rpc_error(&r, 400, -32021);
    assert_eq!(
        e["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{e}"
    );
    // A task-only tool that needs elicitation, called declaring neither.
    let r = client
        .call("ask", json!({"question": "why?"}), &caps_none())
        .await?;
    let e = rpc_error(&r, 400, -32021);
    let required = &e["data"]["requiredCapabilities"];
    assert!(required.is_object(), "{e}");
    assert!(required["extensions"][TASKS].is_object(), "{e}");
    assert!(required["elicitation"].is_object(), "{e}");
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}
