//! Polling (tasks-extension.md §8): `tasks/get` of an unknown id, an `input_required`
//! task's outstanding requests and their shape, and polls that change nothing.
//!
//! Checklist ids cited: T-19, T-24, T-26, T-53, T-57.

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{TestContext, caps_tasks};
use serde_json::json;

use super::{
    assert_unknown_task, base64_encode, create, get_reply, task_request_with_name,
    wait_input_required,
};

/// T-24, T-53: `tasks/get` of an unknown or odd id is -32602 saying the task is unknown.
#[tokio::test]
async fn get_of_unknown_id_is_invalid_params() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let long = "x".repeat(300);
    for id in [
        "tsk_AAAAAAAAAAAAAAAAAAAAAA",
        "not/a:task*id",
        "../../etc/passwd",
        long.as_str(),
    ] {
        let r = get_reply(&client, id, &caps_tasks()).await?;
        assert_unknown_task(&r, &format!("tasks/get {id}"));
    }
    // A non-ASCII id travels Base64-wrapped in Mcp-Name; it is simply unknown.
    let odd = "tsk_\u{e9}\u{2713}";
    let sentinel = format!("=?base64?{}?=", base64_encode(odd.as_bytes()));
    let r = task_request_with_name(
        &client,
        "tasks/get",
        json!({"taskId": odd}),
        Some(&sentinel),
    )
    .await?;
    assert_unknown_task(&r, "tasks/get of a non-ASCII id");
    // taskId of the wrong type.
    let r = client
        .request("tasks/get", json!({"taskId": 12}), &caps_tasks())
        .await?;
    assert!(
        r.error_code().is_some(),
        "numeric taskId accepted: {}",
        r.body
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-19, T-26, T-57: an `input_required` task lists its outstanding request, well formed,
/// and two polls of the unchanged task are identical.
#[tokio::test]
async fn input_required_task_lists_its_request_and_polls_are_pure() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Favourite colour?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let t = wait_input_required(&client, id).await?;
    let reqs = t["inputRequests"].as_object().context("inputRequests")?;
    assert_eq!(reqs.keys().collect::<Vec<_>>(), ["answer-1"], "{t}");
    let req = &t["inputRequests"]["answer-1"];
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(req["params"]["message"], "Favourite colour?");
    assert_eq!(
        req["params"]["requestedSchema"],
        json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
    );
    let a = get_reply(&client, id, &caps_tasks()).await?;
    let b = get_reply(&client, id, &caps_tasks()).await?;
    assert_eq!(a.body["result"], b.body["result"], "two polls differ");
    assert_eq!(a.body["result"], t, "polls differ");
    ctx.cleanup().await;
    Ok(())
}

/// T-57: the input requests of every asking tool are well-formed request objects.
#[tokio::test]
async fn input_requests_are_well_formed() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for (tool, args, keys) in [
        ("ask", json!({"question": "q"}), vec!["answer-1"]),
        (
            "confirm_delete",
            json!({"filename": "f.txt"}),
            vec!["confirm"],
        ),
        ("multi_input", json!({}), vec!["color", "name"]),
    ] {
        let created = create(&client, tool, args).await?;
        let id = created["taskId"].as_str().context("id")?;
        let t = wait_input_required(&client, id).await?;
        let mut got: Vec<&str> = t["inputRequests"]
            .as_object()
            .context("inputRequests")?
            .keys()
            .map(String::as_str)
            .collect();
        got.sort_unstable();
        assert_eq!(got, keys, "{tool}: {t}");
        client.cancel(id).await?;
    }
    ctx.cleanup().await;
    Ok(())
}
