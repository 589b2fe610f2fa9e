//! Parked tasks on the worker: a task waiting for input survives its worker's shutdown
//! without a terminal state, and holds no concurrency slot while it waits.
//!
//! Checklist ids cited: T-18.

use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use super::{WITHIN, pending_jobs, with_worker_env};

/// T-18: a worker that shuts down while a task waits for input does not invent a terminal
/// state: the task stays `input_required` (its job stays pending for another worker).
#[tokio::test]
async fn worker_shutdown_leaves_a_parked_task_waiting() -> Result<()> {
    let mut ctx = with_worker_env(&[("MCPT_SHUTDOWN_GRACE", "1s".to_owned())]).await?;
    let client = ctx.client();
    let id = client
        .start_task("ask", json!({"question": "Still?"}))
        .await?;
    client.wait_status(&id, "input_required", WITHIN).await?;
    let status = ctx.workers[0].process.terminate(Duration::from_secs(10))?;
    assert!(status.success(), "worker exit status {status}");
    let t = client.get(&id).await?;
    assert_eq!(t["status"], "input_required", "{t}");
    assert_eq!(pending_jobs(&ctx)?, 1);
    ctx.cleanup().await;
    Ok(())
}

/// A task waiting for input holds no concurrency slot: with MCPT_CONCURRENCY=1 and an `ask`
/// parked, other tasks still run; the answer then resumes the ask.
#[tokio::test]
async fn task_waiting_for_input_holds_no_slot() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_CONCURRENCY", "1".to_owned())]).await?;
    let client = ctx.client();
    let ask = client
        .start_task("ask", json!({"question": "Later?"}))
        .await?;
    client.wait_status(&ask, "input_required", WITHIN).await?;
    for _ in 0..3 {
        let id = client.start_task("sleep", json!({"ms": 10})).await?;
        client.wait_status(&id, "completed", WITHIN).await?;
    }
    client
        .update(
            &ask,
            json!({"answer-1": {"action": "accept", "content": {"answer": "now"}}}),
        )
        .await?;
    let t = client.wait_status(&ask, "completed", WITHIN).await?;
    assert_eq!(t["result"]["content"][0]["text"], "answer: now", "{t}");
    ctx.cleanup().await;
    Ok(())
}
