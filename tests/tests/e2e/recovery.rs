//! Crash recovery and graceful shutdown of workers (issue 3; ARCHITECTURE.md "Worker loop"):
//! a job whose worker dies is taken over after the lease, a job that keeps losing its
//! worker ends failed after a bounded number of starts, and a worker stopped with SIGTERM
//! gives its jobs to the others at once.

use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{TestContext, Worker, poll_until};
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(10);

fn hget(ctx: &TestContext, id: &str, field: &str) -> Result<String> {
    ctx.redis.task_field(id, field)
}

fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

/// Start one more worker with `pairs` and return its index.
fn add_worker(ctx: &mut TestContext, pairs: &[(&'static str, &str)]) -> Result<usize> {
    ctx.workers
        .push(Worker::start(&ctx.redis.url(), &env(pairs))?);
    Ok(ctx.workers.len() - 1)
}

/// Wait until the task has been started `n` times (its fencing token counts starts).
async fn started_times(ctx: &TestContext, id: &str, n: u64) -> Result<()> {
    poll_until(Duration::from_secs(20), || async {
        let fence: u64 = hget(ctx, id, "fence").ok()?.parse().ok()?;
        (fence >= n).then_some(())
    })
    .await
    .with_context(|| format!("task {id} was not started {n} times"))
}

/// A job whose runs keep being interrupted (every worker running it dies) ends `failed`
/// with -32603 saying how often, instead of being retried forever.
#[tokio::test]
async fn job_that_keeps_losing_its_worker_ends_failed() -> Result<()> {
    let mut ctx = TestContext::start(1, 0).await?;
    let fast = [("MCPT_LEASE", "1s"), ("MCPT_MAX_DELIVERIES", "2")];
    let first = add_worker(&mut ctx, &fast)?;
    ctx.wait_for_tools().await?;
    let client = ctx.client();
    let id = client.start_task("sleep", json!({"ms": 60000})).await?;
    started_times(&ctx, &id, 1).await?;
    ctx.workers[first].process.kill();
    let second = add_worker(&mut ctx, &fast)?;
    started_times(&ctx, &id, 2).await?;
    ctx.workers[second].process.kill();
    add_worker(&mut ctx, &fast)?;
    let t = client
        .wait_status(&id, "failed", Duration::from_secs(20))
        .await?;
    assert_eq!(t["error"]["code"], -32603, "{t}");
    let message = t["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("interrupted 2 times"), "{t}");
    ctx.cleanup().await;
    Ok(())
}

/// SIGTERM: a running job that outlives the grace period is given to another worker at
/// once — it completes long before its claim would have lapsed (lease 60 s).
#[tokio::test]
async fn sigterm_hands_a_running_job_to_another_worker_at_once() -> Result<()> {
    let mut ctx = TestContext::start(1, 0).await?;
    let slow_lease = [("MCPT_LEASE", "60s"), ("MCPT_SHUTDOWN_GRACE", "500ms")];
    let first = add_worker(&mut ctx, &slow_lease)?;
    ctx.wait_for_tools().await?;
    let client = ctx.client();
    let id = client.start_task("sleep", json!({"ms": 3000})).await?;
    started_times(&ctx, &id, 1).await?;
    add_worker(&mut ctx, &slow_lease)?;
    let status = ctx.workers[first].process.terminate(WITHIN)?;
    assert!(status.success(), "exit status {status}");
    let t = client
        .wait_status(&id, "completed", Duration::from_secs(20))
        .await?;
    assert_eq!(t["result"]["content"][0]["text"], "slept 3000 ms", "{t}");
    assert_eq!(
        hget(&ctx, &id, "fence")?,
        "2",
        "the second worker ran it again"
    );
    ctx.cleanup().await;
    Ok(())
}

/// SIGTERM: a task waiting for input is given up at once (no grace spent on it); another
/// worker takes it, the handler's question replays under the same key without asking twice,
/// and the answer completes it.
#[tokio::test]
async fn sigterm_hands_a_parked_task_to_another_worker() -> Result<()> {
    let mut ctx = TestContext::start(1, 0).await?;
    let slow_lease = [("MCPT_LEASE", "60s"), ("MCPT_SHUTDOWN_GRACE", "30s")];
    let first = add_worker(&mut ctx, &slow_lease)?;
    ctx.wait_for_tools().await?;
    let client = ctx.client();
    let id = client
        .start_task("ask", json!({"question": "Colour?"}))
        .await?;
    let before = client.wait_status(&id, "input_required", WITHIN).await?;
    add_worker(&mut ctx, &slow_lease)?;
    let started = std::time::Instant::now();
    let status = ctx.workers[first].process.terminate(WITHIN)?;
    assert!(status.success(), "exit status {status}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the parked task held the shutdown"
    );
    started_times(&ctx, &id, 2).await?;
    let again = client.get(&id).await?;
    assert_eq!(
        again["inputRequests"], before["inputRequests"],
        "the question changed"
    );
    let ack = client
        .update(
            &id,
            json!({"answer-1": {"action": "accept", "content": {"answer": "teal"}}}),
        )
        .await?;
    assert_eq!(ack.body["result"]["resultType"], "complete", "{}", ack.body);
    let t = client.wait_status(&id, "completed", WITHIN).await?;
    assert_eq!(t["result"]["content"][0]["text"], "answer: teal", "{t}");
    ctx.cleanup().await;
    Ok(())
}

/// SIGTERM on a gateway: it reports not-ready while it still serves (MCPT_DRAIN_DELAY), ends
/// each listen stream with the listen response (B-40), and exits 0.
#[tokio::test]
async fn gateway_sigterm_reports_not_ready_and_closes_streams_cleanly() -> Result<()> {
    let mut ctx = TestContext::start(0, 1).await?;
    ctx.gateways.push(mcp_tasks_tests::Gateway::start(
        &ctx.redis.url(),
        &env(&[("MCPT_DRAIN_DELAY", "1s")]),
    )?);
    ctx.wait_for_tools().await?;
    let client = ctx.client();
    let id = client.start_task("sleep", json!({"ms": 30000})).await?;
    let mut sub = client.listen("bye", &[&id]).await?;
    let ack = sub.next(WITHIN).await.context("no ack")?;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let pid = ctx.gateways[0].process.child().id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()?;
    poll_until(WITHIN, || async {
        let r = client
            .send_raw("GET", "/readyz", &[], Default::default())
            .await
            .ok()?;
        (r.status() == 503).then_some(())
    })
    .await
    .context("not-ready was never reported")?;
    // The stream: the task's snapshot, then the listen response, then its end.
    let mut response = None;
    while let Some(msg) = sub.next(WITHIN).await {
        if msg.get("id").is_some() {
            response = Some(msg);
        }
    }
    let response = response.context("the stream ended without the listen response")?;
    assert_eq!(response["id"], "bye", "{response}");
    assert_eq!(response["result"]["resultType"], "complete", "{response}");
    assert_eq!(
        response["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "bye"
    );
    let status = ctx.gateways[0].process.terminate(WITHIN)?;
    assert!(status.success(), "exit status {status}");
    ctx.cleanup().await;
    Ok(())
}

/// Hand-overs at graceful shutdowns are not interruptions: a task waiting for input through
/// more rolling restarts than MCPT_MAX_DELIVERIES still completes when answered.
#[tokio::test]
async fn rolling_restarts_do_not_use_up_deliveries() -> Result<()> {
    let mut ctx = TestContext::start(1, 0).await?;
    let settings = [("MCPT_MAX_DELIVERIES", "2"), ("MCPT_SHUTDOWN_GRACE", "1s")];
    let mut current = add_worker(&mut ctx, &settings)?;
    ctx.wait_for_tools().await?;
    let client = ctx.client();
    let id = client
        .start_task("ask", json!({"question": "Still here?"}))
        .await?;
    client.wait_status(&id, "input_required", WITHIN).await?;
    for round in 2..=4u64 {
        let next = add_worker(&mut ctx, &settings)?;
        let status = ctx.workers[current].process.terminate(WITHIN)?;
        assert!(status.success(), "exit status {status}");
        started_times(&ctx, &id, round).await?;
        current = next;
    }
    let t = client.get(&id).await?;
    assert_eq!(t["status"], "input_required", "{t}");
    client
        .update(
            &id,
            json!({"answer-1": {"action": "accept", "content": {"answer": "yes"}}}),
        )
        .await?;
    let t = client.wait_status(&id, "completed", WITHIN).await?;
    assert_eq!(t["result"]["content"][0]["text"], "answer: yes", "{t}");
    ctx.cleanup().await;
    Ok(())
}
