//! Methods and headers (tasks-extension.md §11, §14): `tasks/list` and `tasks/result` do not
//! exist, and `tasks/*` need an `Mcp-Name` equal to `params.taskId`.
//!
//! Checklist ids cited: T-39, T-40, T-41, T-53.

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{TestContext, caps_tasks};
use serde_json::json;

use super::{accept, base64_encode, create, task_request_with_name, wait_input_required};

/// T-39, T-41, T-53: `tasks/list` and `tasks/result` do not exist: 404 / -32601, even
/// without `Mcp-Name`.
#[tokio::test]
async fn tasks_list_and_result_are_method_not_found() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let id = client.start_task("sleep", json!({"ms": 10})).await?;
    for (method, params) in [
        ("tasks/list", json!({})),
        ("tasks/result", json!({"taskId": id})),
    ] {
        let r = client.request(method, params, &caps_tasks()).await?;
        assert_eq!(r.status, 404, "{method}: {}", r.body);
        assert_eq!(r.error_code(), Some(-32601), "{method}: {}", r.body);
        let msg = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(method), "{method}: message {msg:?}");
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-40, T-41, T-53: `tasks/*` need `Mcp-Name` equal to `params.taskId` (after Base64
/// sentinel decoding); a missing or different one is 400 / -32020 and changes nothing.
#[tokio::test]
async fn mcp_name_must_match_task_id() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = wait_input_required(&client, id).await?;
    let other = client.start_task("sleep", json!({"ms": 10})).await?;
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        ("tasks/cancel", json!({"taskId": id})),
        (
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"answer-1": accept(json!({"answer": "h"}))}}),
        ),
    ] {
        for name in [Some(other.as_str()), None] {
            let r = task_request_with_name(&client, method, params.clone(), name).await?;
            assert_eq!(r.status, 400, "{method} Mcp-Name {name:?}: {}", r.body);
            assert_eq!(
                r.error_code(),
                Some(-32020),
                "{method} {name:?}: {}",
                r.body
            );
            let msg = r.body["error"]["message"].as_str().unwrap_or_default();
            assert!(
                msg.to_lowercase().contains("mcp-name"),
                "message should name the header: {msg:?}"
            );
        }
    }
    assert_eq!(
        client.get(id).await?,
        before,
        "a rejected request changed the task"
    );
    // The sentinel form of the right id is the same id.
    let sentinel = format!("=?base64?{}?=", base64_encode(id.as_bytes()));
    let r = task_request_with_name(&client, "tasks/get", json!({"taskId": id}), Some(&sentinel))
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["result"]["taskId"], id);
    ctx.cleanup().await;
    Ok(())
}
