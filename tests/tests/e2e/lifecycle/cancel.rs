//! `tasks/cancel` and terminal states (tasks-extension.md §6, §10): a terminal task never
//! changes; running, `input_required` and queued tasks end `cancelled`; and
//! `notifications/cancelled` does not cancel a task.
//!
//! Checklist ids cited: T-17, T-18, T-35, T-36, T-37, T-38.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Client, TestContext, caps_tasks, meta, poll_until};
use serde_json::json;

use super::check::{self, Kind};
use super::{
    WITHIN, accept, assert_empty_ack, create, get_reply, observe, statuses, until_terminal,
    wait_input_required, with_worker_env,
};

fn hget(ctx: &TestContext, id: &str, field: &str) -> Result<String> {
    ctx.redis.task_field(id, field)
}

/// T-17, T-18, T-37: a completed task never changes: cancel and update are acknowledged
/// and the next poll is identical.
#[tokio::test]
async fn terminal_task_never_changes() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    client
        .update(id, json!({"answer-1": accept(json!({"answer": "Lin"}))}))
        .await?;
    client.wait_status(id, "completed", WITHIN).await?;
    let before = get_reply(&client, id, &caps_tasks()).await?;
    assert_empty_ack(&client.cancel(id).await?, "cancel of completed");
    assert_empty_ack(
        &client
            .update(id, json!({"answer-1": accept(json!({"answer": "Other"}))}))
            .await?,
        "update of completed",
    );
    assert_empty_ack(&client.cancel(id).await?, "second cancel of completed");
    let after = get_reply(&client, id, &caps_tasks()).await?;
    assert_eq!(
        after.body["result"], before.body["result"],
        "terminal task changed"
    );

    // Same for a cancelled task: nothing moves it back.
    let created = create(&client, "sleep", json!({"ms": 20_000})).await?;
    let id = created["taskId"].as_str().context("id")?;
    client.cancel(id).await?;
    let cancelled = client.wait_status(id, "cancelled", WITHIN).await?;
    client.cancel(id).await?;
    client
        .update(id, json!({"x": {"action": "cancel"}}))
        .await?;
    assert_eq!(client.get(id).await?, cancelled, "cancelled task changed");
    ctx.cleanup().await;
    Ok(())
}

/// T-35, T-36, T-37: cancelling a running sleep is acknowledged at once and the task ends
/// `cancelled` within a few seconds, and stays so.
#[tokio::test]
async fn cancel_of_running_task_ends_cancelled() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 60_000, "steps": 1})).await?;
    let id = created["taskId"].as_str().context("id")?;
    observe(&client, id, WITHIN, |t| t["statusMessage"] == "step 1/1").await?;
    let asked = Instant::now();
    let r = client.cancel(id).await?;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "cancel ack waited {:?}",
        asked.elapsed()
    );
    assert_empty_ack(&r, "tasks/cancel");
    let seen = until_terminal(&client, id, Duration::from_secs(5)).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "cancelled", "{last}");
    for absent in ["result", "error", "inputRequests"] {
        assert!(last.get(absent).is_none(), "{absent} on cancelled: {last}");
    }
    let mut all = vec!["working"];
    all.extend(statuses(&seen));
    check::transitions(all);
    assert_eq!(client.get(id).await?, *last, "cancelled task changed");
    ctx.cleanup().await;
    Ok(())
}

/// T-36, T-37: cancelling an `input_required` task ends it `cancelled` without its requests.
#[tokio::test]
async fn cancel_of_input_required_task_ends_cancelled() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    assert_empty_ack(&client.cancel(id).await?, "tasks/cancel");
    let seen = until_terminal(&client, id, Duration::from_secs(5)).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "cancelled", "{last}");
    assert!(last.get("inputRequests").is_none(), "{last}");
    // A late answer is ignored.
    assert_empty_ack(
        &client
            .update(id, json!({"answer-1": accept(json!({"answer": "late"}))}))
            .await?,
        "late update",
    );
    assert_eq!(client.get(id).await?, *last);
    ctx.cleanup().await;
    Ok(())
}

/// T-37: a queued task (its only worker busy) that is cancelled ends `cancelled` without
/// ever running, and stays cancelled once the worker is free and reads the job.
#[tokio::test]
async fn cancel_of_queued_task_ends_cancelled_without_running() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_CONCURRENCY", "1".to_owned())]).await?;
    let client = ctx.client();
    let busy = create(&client, "sleep", json!({"ms": 60_000, "steps": 1})).await?;
    let busy = busy["taskId"].as_str().context("id")?.to_owned();
    observe(&client, &busy, WITHIN, |t| t["statusMessage"] == "step 1/1").await?;
    let queued = create(&client, "sleep", json!({"ms": 10})).await?;
    let queued = queued["taskId"].as_str().context("id")?.to_owned();
    assert_empty_ack(&client.cancel(&queued).await?, "cancel queued");
    let t = client
        .wait_status(&queued, "cancelled", Duration::from_secs(5))
        .await?;
    check::task(&t, Kind::Polled);
    // Free the worker; it reads the cancelled job and must skip it.
    assert_empty_ack(&client.cancel(&busy).await?, "cancel busy");
    client.wait_status(&busy, "cancelled", WITHIN).await?;
    poll_until(WITHIN, || async {
        let len = ctx
            .redis
            .cli(&["XLEN", &mcp_tasks_store::keys::queue_key("default")])
            .ok()?;
        (len.trim() == "0").then_some(())
    })
    .await
    .context("the queued job was never read")?;
    assert_eq!(client.get(&queued).await?, t, "the cancelled task changed");
    assert_eq!(
        hget(&ctx, &queued, "worker")?,
        "",
        "the cancelled task was run"
    );
    // A fresh job still runs on that worker.
    let after = create(&client, "sleep", json!({"ms": 10})).await?;
    let after = after["taskId"].as_str().context("id")?;
    client.wait_status(after, "completed", WITHIN).await?;
    ctx.cleanup().await;
    Ok(())
}

/// T-38: `notifications/cancelled` naming the `tools/call` request is accepted and ignored;
/// only `tasks/cancel` cancels a task.
#[tokio::test]
async fn notifications_cancelled_does_not_cancel_a_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let call = json!({
        "jsonrpc": "2.0", "id": "call-77", "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 600}, "_meta": meta(&caps_tasks())}
    });
    let r = client
        .post_raw(
            &Client::headers("tools/call", Some("sleep")),
            serde_json::to_vec(&call)?,
        )
        .await?;
    let id = r.body["result"]["taskId"]
        .as_str()
        .with_context(|| format!("no task: {}", r.body))?
        .to_owned();
    let note = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "call-77", "reason": "changed my mind", "_meta": meta(&caps_tasks())}
    });
    let r = client
        .post_raw(
            &Client::headers("notifications/cancelled", None),
            serde_json::to_vec(&note)?,
        )
        .await?;
    assert_eq!(r.status, 202, "{}", r.body);
    let seen = until_terminal(&client, &id, WITHIN).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(check::text(&last["result"]), "slept 600 ms");
    ctx.cleanup().await;
    Ok(())
}
