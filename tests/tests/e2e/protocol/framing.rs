//! JSON-RPC framing (base-protocol.md §2): ids echoed with their JSON type, invalid ids,
//! batches, posted responses, unparseable bodies, the `jsonrpc` member, and the
//! `resultType`/`serverInfo` envelope of every result.
//!
//! Checklist ids cited: B-02, B-03, B-04, B-05, B-09.

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Reply, TestContext, caps_none, caps_tasks, meta};
use serde_json::json;

use super::{
    SERVER_INFO, bytes, headers, ok_result, request, rpc_error_for, rpc_error_without_id, task_keys,
};

/// B-02: string and integer ids come back with the same JSON type and value, on results
/// and on errors; every response says `"jsonrpc": "2.0"`.
#[tokio::test]
async fn ids_are_echoed_with_their_json_type() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let ids = [
        json!("discover-1"),
        json!("42"),
        json!(""),
        json!(42),
        json!(0),
        json!(-7),
        json!(9_007_199_254_740_993_i64),
    ];
    for id in &ids {
        let body = request(id.clone(), "server/discover", json!({}), &caps_none());
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        ok_result(&r);
        assert_eq!(r.body["jsonrpc"], "2.0");
        assert_eq!(&r.body["id"], id, "result id: {}", r.body);
        // Compare the bytes too: 42 must not come back as "42" or 42.0.
        let raw = String::from_utf8_lossy(&r.raw);
        assert!(
            raw.contains(&format!("\"id\":{id}")),
            "id {id} not echoed verbatim: {raw}"
        );
        // And on an error answer (unknown method).
        let body = request(id.clone(), "nope/nothing", json!({}), &caps_none());
        let r = client
            .post_raw(&headers("nope/nothing", None), bytes(&body))
            .await?;
        rpc_error_for(&r, id, 404, -32601);
        assert!(
            String::from_utf8_lossy(&r.raw).contains(&format!("\"id\":{id}")),
            "error id {id} not echoed verbatim: {}",
            String::from_utf8_lossy(&r.raw)
        );
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-02, B-03, B-05: `id: null` and ids that are neither strings nor integers are 400 /
/// -32600, answered without an id.
#[tokio::test]
async fn null_and_non_scalar_ids_are_invalid_requests() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for id in [
        json!(null),
        json!(1.5),
        json!(true),
        json!({"a": 1}),
        json!([1]),
    ] {
        let body = request(id.clone(), "server/discover", json!({}), &caps_none());
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        rpc_error_without_id(&r, 400, -32600);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-03: a batch (a JSON array) is 400 / -32600 without an id, and none of its requests runs.
#[tokio::test]
async fn batches_are_rejected_with_400_32600() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let call = request(
        json!(1),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    let discover = request(json!(2), "server/discover", json!({}), &caps_none());
    for batch in [json!([call.clone(), discover]), json!([call]), json!([])] {
        let r = client
            .post_raw(&headers("tools/call", Some("sleep")), bytes(&batch))
            .await?;
        rpc_error_without_id(&r, 400, -32600);
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new(), "a batch ran a call");
    ctx.cleanup().await;
    Ok(())
}

/// B-03: a POSTed JSON-RPC response (result or error) is 400 / -32600; its id is readable
/// and echoed (B-05).
#[tokio::test]
async fn posted_responses_are_rejected_with_400_32600() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let result = json!({"jsonrpc": "2.0", "id": 5, "result": {"resultType": "complete"}});
    let error = json!({"jsonrpc": "2.0", "id": "e", "error": {"code": -32603, "message": "x"}});
    for (body, id) in [(result, json!(5)), (error, json!("e"))] {
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        rpc_error_for(&r, &id, 400, -32600);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-03, B-05: a body that is not JSON is 400 / -32700 with no id.
#[tokio::test]
async fn unparseable_body_is_400_32700_without_id() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for body in [
        &b"{"[..],
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\"",
        b"not json",
        b"",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,}",
    ] {
        let r = client
            .post_raw(&headers("server/discover", None), body.to_vec())
            .await?;
        rpc_error_without_id(&r, 400, -32700);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-02, B-03, B-05: a request whose `jsonrpc` is missing or not `"2.0"` is 400 / -32600,
/// with its (readable) id echoed.
#[tokio::test]
async fn wrong_or_missing_jsonrpc_member_is_400_32600() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for jsonrpc in [Some(json!("1.0")), Some(json!(2.0)), Some(json!("2")), None] {
        let mut body = request(json!(3), "server/discover", json!({}), &caps_none());
        match jsonrpc {
            Some(v) => body["jsonrpc"] = v,
            None => {
                body.as_object_mut().map(|o| o.remove("jsonrpc"));
            }
        }
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        rpc_error_for(&r, &json!(3), 400, -32600);
    }
    // A method that is not a string is not a request either.
    let body =
        json!({"jsonrpc": "2.0", "id": 4, "method": 7, "params": {"_meta": meta(&caps_none())}});
    let r = client
        .post_raw(&headers("server/discover", None), bytes(&body))
        .await?;
    rpc_error_for(&r, &json!(4), 400, -32600);
    ctx.cleanup().await;
    Ok(())
}

/// B-04, B-09: every result this server sends has `resultType` and `serverInfo` — lists,
/// the task handle, `tasks/get` and the `tasks/cancel` ack.
#[tokio::test]
async fn results_carry_result_type_and_server_info() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let check = |r: &Reply, kind: &str, what: &str| {
        let result = ok_result(r);
        assert_eq!(result["resultType"], kind, "B-04 {what}: {result}");
        let info = &result["_meta"][SERVER_INFO];
        assert!(
            info["name"].is_string() && info["version"].is_string(),
            "B-09 {what}: {result}"
        );
    };
    let r = client
        .request("server/discover", json!({}), &caps_none())
        .await?;
    check(&r, "complete", "server/discover");
    let r = client
        .request("tools/list", json!({}), &caps_none())
        .await?;
    check(&r, "complete", "tools/list");
    let r = client
        .call("sleep", json!({"ms": 30_000}), &caps_tasks())
        .await?;
    check(&r, "task", "CreateTaskResult");
    let id = r.body["result"]["taskId"]
        .as_str()
        .context("taskId")?
        .to_owned();
    let r = client
        .request("tasks/get", json!({"taskId": id}), &caps_tasks())
        .await?;
    check(&r, "complete", "tasks/get");
    let r = client.cancel(&id).await?;
    check(&r, "complete", "tasks/cancel");
    ctx.cleanup().await;
    Ok(())
}

/// B-09 (SHOULD), B-04: a `tools/call` answered synchronously also carries `serverInfo` in
/// `result._meta` — for a tool's own result and for an argument error.
#[tokio::test]
async fn tool_call_results_carry_server_info() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for (tool, args) in [("greet", json!({})), ("echo", json!({}))] {
        let r = client.call(tool, args, &caps_none()).await?;
        let result = ok_result(&r);
        assert_eq!(result["resultType"], "complete", "{result}");
        let info = &result["_meta"][SERVER_INFO];
        assert!(
            info["name"].is_string() && info["version"].is_string(),
            "B-09 tools/call {tool}: {result}"
        );
    }
    ctx.cleanup().await;
    Ok(())
}
