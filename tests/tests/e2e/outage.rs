//! Redis outages (issue 3): while Redis is away the gateway stays up, answers every request
//! at once with a JSON-RPC error that says Redis is unavailable, and reports not-ready; when
//! Redis is back everything resumes by itself — the running task finishes and its listener
//! hears about it.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Gateway, RedisServer, TestContext, Worker, caps_tasks, poll_until};
use serde_json::json;

#[tokio::test]
async fn everything_resumes_after_redis_comes_back() -> Result<()> {
    // A context over a durable Redis: data survives the restart, as with AOF in production.
    let redis = RedisServer::start_durable()?;
    let worker = Worker::start(&redis.url(), &[])?;
    let gateway = Gateway::start(&redis.url(), &[])?;
    let mut ctx = TestContext::start(0, 0).await?;
    ctx.redis = redis;
    ctx.workers.push(worker);
    ctx.gateways.push(gateway);
    ctx.wait_for_tools().await?;
    let client = ctx.client();

    let id = client
        .start_task("sleep", json!({"ms": 3000, "steps": 6}))
        .await?;
    let mut sub = client.listen("outage", &[&id]).await?;
    let ack = sub.next(Duration::from_secs(5)).await.context("no ack")?;
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "{ack}"
    );
    client
        .wait_status(&id, "working", Duration::from_secs(5))
        .await?;

    ctx.redis.kill();
    let asked = Instant::now();
    let r = client
        .request("tasks/get", json!({"taskId": &id}), &caps_tasks())
        .await?;
    assert!(
        asked.elapsed() < Duration::from_secs(6),
        "answer took {:?}",
        asked.elapsed()
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.error_code(), Some(-32603), "{}", r.body);
    let message = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Redis is unavailable"), "{message}");
    let call = client
        .call("echo", json!({"text": "x"}), &caps_tasks())
        .await?;
    assert_eq!(call.error_code(), Some(-32603), "{}", call.body);
    let ready = client
        .send_raw("GET", "/readyz", &[], Default::default())
        .await?;
    assert_eq!(ready.status(), 503);
    let health = client
        .send_raw("GET", "/healthz", &[], Default::default())
        .await?;
    assert_eq!(health.status(), 200);

    ctx.redis.restart()?;
    poll_until(Duration::from_secs(15), || async {
        let r = client
            .send_raw("GET", "/readyz", &[], Default::default())
            .await
            .ok()?;
        (r.status() == 200).then_some(())
    })
    .await
    .context("the gateway never became ready again")?;
    let t = client
        .wait_status(&id, "completed", Duration::from_secs(40))
        .await?;
    assert_eq!(t["result"]["content"][0]["text"], "slept 3000 ms", "{t}");
    // The listener hears the end, whether by event or by its re-read after reconnecting.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = sub
            .next(left)
            .await
            .context("the listener never heard the task complete")?;
        if msg["params"]["status"] == "completed" {
            break;
        }
    }
    let echo = client
        .call("echo", json!({"text": "back"}), &caps_tasks())
        .await?;
    assert_eq!(
        echo.body["result"]["content"][0]["text"], "back",
        "{}",
        echo.body
    );
    ctx.cleanup().await;
    Ok(())
}

/// Task state must never be evicted: a Redis with an evicting policy is warned about loudly.
#[tokio::test]
async fn evicting_redis_policy_is_warned_about() -> Result<()> {
    let redis = RedisServer::start()?;
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])?;
    let gateway = Gateway::start(&redis.url(), &[])?;
    let mut worker = Worker::start(&redis.url(), &[])?;
    poll_until(Duration::from_secs(10), || async {
        let both = gateway
            .process
            .log_text()
            .contains("maxmemory-policy noeviction")
            && worker
                .process
                .log_text()
                .contains("maxmemory-policy noeviction");
        both.then_some(())
    })
    .await
    .context("no eviction warning in the logs")?;
    assert!(gateway.process.log_text().contains("allkeys-lru"));
    worker.process.kill();
    Ok(())
}
