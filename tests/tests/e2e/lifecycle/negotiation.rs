//! Negotiation (tasks-extension.md §2, §3): `server/discover` advertises the extension, a
//! task is created only when the request itself declares it, only `tools/call` task
//! handles say `resultType: "task"`, and -32021 for task-only tools, elicitation, `tasks/*`
//! and listen without the capabilities they need.
//!
//! Checklist ids cited: T-01, T-02, T-03, T-04, T-05, T-06, T-07, T-08, T-45, T-54.

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Client, Reply, TASKS, TestContext, caps_none, caps_tasks, meta};
use serde_json::{Value, json};

use super::check;
use super::{WITHIN, accept, assert_empty_ack, create, task_count, wait_input_required};

/// Capabilities with the extension but without elicitation.
fn caps_ext_only() -> Value {
    json!({"extensions": {TASKS: {}}})
}

/// Capabilities with elicitation but without the extension.
fn caps_elicitation_only() -> Value {
    json!({"elicitation": {}})
}

/// Assert a -32021 answer with HTTP 400 whose `requiredCapabilities` is exactly `required`.
fn assert_missing_capability(r: &Reply, required: &Value) {
    assert_eq!(r.status, 400, "HTTP status of -32021: {}", r.body);
    assert_eq!(r.error_code(), Some(-32021), "{}", r.body);
    assert_eq!(
        r.body["error"]["data"]["requiredCapabilities"], *required,
        "requiredCapabilities lists exactly what is missing: {}",
        r.body
    );
    let msg = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.to_lowercase().contains("capabilit"),
        "message should name the problem (T-53): {msg:?}"
    );
    assert!(r.body.get("result").is_none(), "{}", r.body);
}

fn ext_required() -> Value {
    json!({"extensions": {TASKS: {}}})
}

/// T-01, T-54: `server/discover` advertises the extension as exactly `{}` and no legacy
/// `tasks` capability.
#[tokio::test]
async fn discover_advertises_the_extension_as_an_empty_object() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let r = ctx
        .client()
        .request("server/discover", json!({}), &caps_none())
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let caps = &r.body["result"]["capabilities"];
    assert_eq!(caps["extensions"][TASKS], json!({}), "{}", r.body);
    assert!(
        caps.get("tasks").is_none(),
        "legacy tasks capability: {caps}"
    );
    assert_eq!(r.body["result"]["resultType"], "complete");
    ctx.cleanup().await;
    Ok(())
}

/// T-03, T-54: a task-capable tool runs synchronously when the request does not declare the
/// extension — whatever earlier requests declared, and however the declaration is malformed
/// (null, non-object, legacy `tasks` capability).
#[tokio::test]
async fn task_is_created_only_when_that_request_declares_the_extension() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    // An earlier request that declares the extension gets a task…
    create(&client, "sleep", json!({"ms": 10})).await?;
    // …and that changes nothing for the next ones.
    for caps in [
        caps_none(),
        caps_elicitation_only(),
        json!({"extensions": {TASKS: null}}),
        json!({"extensions": {TASKS: true}}),
        json!({"extensions": null}),
        json!({"tasks": {"requests": {"tools": {"call": {}}}}}),
    ] {
        let r = client.call("sleep", json!({"ms": 20}), &caps).await?;
        assert_eq!(r.status, 200, "caps {caps}: {}", r.body);
        let result = &r.body["result"];
        assert_eq!(result["resultType"], "complete", "caps {caps}: {}", r.body);
        assert!(result.get("taskId").is_none(), "caps {caps}: {}", r.body);
        assert_eq!(check::text(result), "slept 20 ms", "caps {caps}");
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-02, T-07, T-08: only the `CreateTaskResult` of `tools/call` carries
/// `resultType: "task"`; discover, tools/list, synchronous calls and every `tasks/*` result
/// carry `"complete"`.
#[tokio::test]
async fn only_tools_call_task_handles_carry_result_type_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for method in ["server/discover", "tools/list"] {
        let r = client.request(method, json!({}), &caps_tasks()).await?;
        assert_eq!(r.body["result"]["resultType"], "complete", "{method}");
    }
    let r = client
        .call("echo", json!({"text": "hi"}), &caps_tasks())
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    // Methods that are not tools/call never get a task, even with the extension declared.
    for method in ["prompts/get", "resources/read"] {
        let r = client
            .request(
                method,
                json!({"name": "sleep", "uri": "x:y"}),
                &caps_tasks(),
            )
            .await?;
        assert_ne!(
            r.body["result"]["resultType"], "task",
            "{method}: {}",
            r.body
        );
    }
    let created = create(&client, "ask", json!({"question": "?"})).await?;
    let id = created["taskId"].as_str().context("taskId")?;
    let got = wait_input_required(&client, id).await?;
    assert_eq!(got["resultType"], "complete");
    let r = client
        .update(id, json!({"answer-1": accept(json!({"answer": "x"}))}))
        .await?;
    assert_empty_ack(&r, "tasks/update");
    let done = client.wait_status(id, "completed", WITHIN).await?;
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["result"]["resultType"], "complete");
    let r = client.cancel(id).await?;
    assert_empty_ack(&r, "tasks/cancel");
    ctx.cleanup().await;
    Ok(())
}

/// T-04: task-only tools without the extension get -32021 (HTTP 400) naming exactly the
/// extension, and no task is created.
#[tokio::test]
async fn task_only_tool_without_extension_is_missing_capability() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("ask", json!({"question": "?"}), &caps_elicitation_only())
        .await?;
    assert_missing_capability(&r, &ext_required());
    let r = client.call("failing_job", json!({}), &caps_none()).await?;
    assert_missing_capability(&r, &ext_required());
    assert_eq!(task_count(&ctx)?, 0, "a rejected call created a task");
    ctx.cleanup().await;
    Ok(())
}

/// T-04, T-45: a tool that will ask through elicitation is refused up front when the call
/// does not declare elicitation; `requiredCapabilities` lists everything missing.
#[tokio::test]
async fn tool_needing_elicitation_without_it_is_missing_capability() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("ask", json!({"question": "?"}), &caps_ext_only())
        .await?;
    assert_missing_capability(&r, &json!({"elicitation": {}}));
    let r = client
        .call("confirm_delete", json!({"filename": "a"}), &caps_ext_only())
        .await?;
    assert_missing_capability(&r, &json!({"elicitation": {}}));
    let r = client
        .call("ask", json!({"question": "?"}), &caps_none())
        .await?;
    assert_missing_capability(&r, &json!({"elicitation": {}, "extensions": {TASKS: {}}}));
    // URL-mode elicitation alone does not cover a form request.
    let r = client
        .call(
            "ask",
            json!({"question": "?"}),
            &json!({"elicitation": {"url": {}}, "extensions": {TASKS: {}}}),
        )
        .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.error_code(), Some(-32021), "{}", r.body);
    assert!(
        r.body["error"]["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{}",
        r.body
    );
    assert_eq!(task_count(&ctx)?, 0, "a rejected call created a task");
    // Form mode declared explicitly is enough.
    let r = client
        .call(
            "ask",
            json!({"question": "?"}),
            &json!({"elicitation": {"form": {}}, "extensions": {TASKS: {}}}),
        )
        .await?;
    assert_eq!(r.body["result"]["resultType"], "task", "{}", r.body);
    ctx.cleanup().await;
    Ok(())
}

/// T-05: `tasks/get`, `tasks/update`, `tasks/cancel` without the extension get -32021
/// (HTTP 400) for a real and for an unknown id, and change nothing.
#[tokio::test]
async fn task_methods_without_extension_are_missing_capability() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "?"})).await?;
    let id = created["taskId"].as_str().context("taskId")?;
    let before = wait_input_required(&client, id).await?;
    for task_id in [id, "tsk_AAAAAAAAAAAAAAAAAAAAAA"] {
        for (method, params) in [
            ("tasks/get", json!({"taskId": task_id})),
            (
                "tasks/update",
                json!({"taskId": task_id, "inputResponses": {"answer-1": accept(json!({"answer": "x"}))}}),
            ),
            ("tasks/cancel", json!({"taskId": task_id})),
        ] {
            let r = client
                .request(method, params, &caps_elicitation_only())
                .await?;
            assert_missing_capability(&r, &ext_required());
        }
    }
    assert_eq!(
        client.get(id).await?,
        before,
        "a rejected request changed the task"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-06: `subscriptions/listen` with `taskIds` but without the extension gets a plain JSON
/// -32021 (HTTP 400), not a stream.
#[tokio::test]
async fn listen_for_tasks_without_extension_is_missing_capability() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let id = client.start_task("sleep", json!({"ms": 5000})).await?;
    let body = json!({
        "jsonrpc": "2.0", "id": "listen-x", "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": [id]}, "_meta": meta(&caps_elicitation_only())}
    });
    let r = client
        .post_raw(
            &Client::headers("subscriptions/listen", None),
            serde_json::to_vec(&body)?,
        )
        .await?;
    let ctype = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(
        ctype.starts_with("application/json"),
        "content-type {ctype:?}"
    );
    assert_missing_capability(&r, &ext_required());
    assert_eq!(r.body["id"], "listen-x");
    ctx.cleanup().await;
    Ok(())
}
