//! Results and errors of the work (tasks-extension.md §6): a completed task carries the full
//! `CallToolResult`, a protocol error ends it `failed`, a tool error ends it `completed`
//! with `isError`; synchronous answers follow the tool policy; the legacy `task` parameter
//! is ignored.
//!
//! Checklist ids cited: T-20, T-21, T-22, T-23, T-54.

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{TestContext, caps_none, caps_tasks};
use serde_json::json;

use super::check::{self, Kind};
use super::{WITHIN, create, statuses, until_terminal};

/// T-20, T-21, T-23: a finished sleep is `completed` with a full `CallToolResult`.
#[tokio::test]
async fn completed_task_carries_the_full_call_tool_result() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 30})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let t = client.wait_status(id, "completed", WITHIN).await?;
    check::task(&t, Kind::Polled);
    assert_eq!(t["result"]["resultType"], "complete");
    assert_eq!(t["result"]["content"][0]["type"], "text");
    assert_eq!(check::text(&t["result"]), "slept 30 ms");
    assert_ne!(t["result"]["isError"], true);
    ctx.cleanup().await;
    Ok(())
}

/// T-20, T-21, T-22: a JSON-RPC error ends the task `failed` with that error and a
/// diagnostic `statusMessage`.
#[tokio::test]
async fn protocol_error_ends_failed_with_error_and_message() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for (tool, args, message) in [
        (
            "fail",
            json!({"mode": "protocol", "message": "disk on fire 42"}),
            "disk on fire 42",
        ),
        (
            "protocol_error_job",
            json!({}),
            "the job broke with a protocol error",
        ),
    ] {
        let created = create(&client, tool, args).await?;
        let id = created["taskId"].as_str().context("id")?;
        let seen = until_terminal(&client, id, WITHIN).await?;
        let t = seen.last().context("seen")?;
        assert_eq!(t["status"], "failed", "{tool}: {t}");
        assert_eq!(t["error"]["code"], -32603, "{tool}: {t}");
        assert_eq!(t["error"]["message"], message, "{tool}: {t}");
        let sm = t["statusMessage"].as_str().unwrap_or_default();
        assert!(
            !sm.trim().is_empty(),
            "{tool}: failed without statusMessage: {t}"
        );
        assert!(t.get("result").is_none());
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-21, T-23: tool-level errors are `completed` with `isError: true`, never `failed`.
#[tokio::test]
async fn tool_error_ends_completed_with_is_error() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for (tool, args, text) in [
        (
            "fail",
            json!({"mode": "tool", "message": "bad input 7"}),
            "bad input 7",
        ),
        ("failing_job", json!({}), "the job failed at the tool level"),
    ] {
        let created = create(&client, tool, args).await?;
        let id = created["taskId"].as_str().context("id")?;
        let seen = until_terminal(&client, id, WITHIN).await?;
        assert!(
            !statuses(&seen).contains(&"failed"),
            "{tool}: a tool error was reported failed: {seen:?}"
        );
        let t = seen.last().context("seen")?;
        assert_eq!(t["status"], "completed", "{tool}: {t}");
        assert_eq!(t["result"]["isError"], true, "{tool}: {t}");
        assert_eq!(check::text(&t["result"]), text, "{tool}");
        assert!(t.get("error").is_none());
    }
    ctx.cleanup().await;
    Ok(())
}

/// Policy: without the extension, `sleep` answers a plain `CallToolResult` and `fail`
/// protocol answers that JSON-RPC error; a synchronous tool stays synchronous with it.
#[tokio::test]
async fn synchronous_answers_follow_the_tool_policy() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("sleep", json!({"ms": 50}), &caps_none())
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    assert_eq!(check::text(&r.body["result"]), "slept 50 ms");
    check::call_tool_result(&r.body["result"]);

    let r = client
        .call(
            "fail",
            json!({"mode": "protocol", "message": "kaput 9"}),
            &caps_none(),
        )
        .await?;
    assert_eq!(r.error_code(), Some(-32603), "{}", r.body);
    assert_eq!(r.body["error"]["message"], "kaput 9", "{}", r.body);
    assert!(r.body.get("result").is_none());

    let r = client
        .call(
            "fail",
            json!({"mode": "tool", "message": "meh"}),
            &caps_none(),
        )
        .await?;
    assert_eq!(r.body["result"]["isError"], true, "{}", r.body);

    let r = client
        .call("echo", json!({"text": "sync please"}), &caps_tasks())
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    assert!(r.body["result"].get("taskId").is_none(), "{}", r.body);
    assert_eq!(check::text(&r.body["result"]), "sync please");
    ctx.cleanup().await;
    Ok(())
}

/// T-54: a legacy 2025-11-25 `task` parameter on `tools/call` is ignored.
#[tokio::test]
async fn legacy_task_parameter_is_ignored() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for caps in [caps_none(), caps_tasks()] {
        let r = client
            .request(
                "tools/call",
                json!({"name": "greet", "arguments": {"name": "Bo"}, "task": {"ttl": 60000}}),
                &caps,
            )
            .await?;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
        assert_eq!(check::text(&r.body["result"]), "Hello, Bo!");
    }
    // Without the extension the legacy parameter does not turn a call into a task either.
    let r = client
        .request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 10}, "task": {"ttl": 60000}}),
            &caps_none(),
        )
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    assert_eq!(check::text(&r.body["result"]), "slept 10 ms");
    ctx.cleanup().await;
    Ok(())
}
