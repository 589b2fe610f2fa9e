//! Redis behind Sentinel (issue 14, part 1): with `MCPT_REDIS_URL=redis+sentinel://…` the
//! gateway and the worker find the primary through three sentinels and follow a failover
//! (the primary killed, its replica promoted) without a restart of ours: requests during
//! the switch get JSON-RPC answers, never a hang, and afterwards tasks are created, run,
//! read and notified again, on the promoted node.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use mcp_tasks_tests::{Gateway, RedisServer, Sentinels, Worker, caps_none, caps_tasks};
use serde_json::json;

const FAILOVER_WITHIN: Duration = Duration::from_secs(40);

#[tokio::test]
async fn gateway_and_worker_follow_a_sentinel_failover() -> Result<()> {
    let mut primary = RedisServer::start()?;
    let replica = RedisServer::start_replica_of(&primary)?;
    let sentinels = Sentinels::start(&primary, 3)?;
    sentinels.wait_ready(1, Duration::from_secs(30))?;
    let gateway = Gateway::start(&sentinels.url(), &[])?;
    let worker = Worker::start(&sentinels.url(), &[])?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;

    let before = client.start_task("sleep", json!({"ms": 10})).await?;
    client
        .wait_status(&before, "completed", Duration::from_secs(20))
        .await?;
    // Replicated before the primary dies (WAIT is the point of part 2; here it is the
    // failover being followed that is under test).
    ensure!(
        primary.cli(&["WAIT", "1", "5000"])?.trim() == "1",
        "the replica did not acknowledge"
    );
    primary.kill();

    // Requests during the switch are answered (an error with a JSON-RPC body, or a result),
    // never left hanging; once the sentinels have promoted the replica, calls succeed.
    let started = Instant::now();
    let mut refused = 0;
    let after = loop {
        let attempt = tokio::time::timeout(
            Duration::from_secs(15),
            client.call("sleep", json!({"ms": 10}), &caps_tasks()),
        )
        .await
        .context("a tools/call during the failover hung")??;
        if let Some(id) = attempt.body["result"]["taskId"].as_str() {
            break id.to_owned();
        }
        ensure!(
            attempt.body["error"]["message"].is_string(),
            "HTTP {} without a JSON-RPC error: {}",
            attempt.status,
            attempt.body
        );
        refused += 1;
        if started.elapsed() > FAILOVER_WITHIN {
            bail!(
                "no task could be created within {FAILOVER_WITHIN:?} of the failover ({refused} refused); last answer {}; gateway log:\n{}",
                attempt.body,
                gateway.process.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(
        sentinels.primary_port()? == replica.port(),
        "the sentinels should name the replica primary now"
    );
    eprintln!(
        "failover: first task created {:.1} s after the kill, {refused} requests refused meanwhile",
        started.elapsed().as_secs_f64()
    );

    // The new task runs on the promoted node; the one finished before is still there.
    client
        .wait_status(&after, "completed", Duration::from_secs(30))
        .await
        .with_context(|| format!("worker log:\n{}", worker.process.log_text()))?;
    let old = client.get(&before).await?;
    ensure!(old["status"] == "completed", "{old}");

    // Notifications flow again: the gateway's event hub follows the primary too.
    let watched = client.start_task("sleep", json!({"ms": 300})).await?;
    let mut stream = client.listen(1, &[&watched]).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(msg) = stream.next(left).await else {
            bail!("no completed notification for {watched} after the failover");
        };
        if msg["method"] == "notifications/tasks"
            && msg["params"]["taskId"] == watched.as_str()
            && msg["params"]["status"] == "completed"
        {
            break;
        }
    }
    let listed = client
        .request("tools/list", json!({}), &caps_none())
        .await?;
    ensure!(listed.body["result"]["tools"].is_array(), "{}", listed.body);
    Ok(())
}

/// A malformed sentinel URL stops each binary at start with exit 64 and one line naming
/// the variable.
#[tokio::test]
async fn bad_sentinel_urls_stop_the_binaries_with_one_line() -> Result<()> {
    for url in [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:0/primary",
        "redis+sentinel://127.0.0.1/primary?password=x",
    ] {
        for binary in ["mcp-tasks-gateway", "mcp-tasks-worker"] {
            let (mut process, _) =
                mcp_tasks_tests::Process::spawn(binary, &[("MCPT_REDIS_URL", url.to_owned())])?;
            let line = process.usage_error()?;
            ensure!(
                line.contains("MCPT_REDIS_URL") && line.contains("redis+sentinel://"),
                "{binary} with {url}: {line}"
            );
        }
    }
    Ok(())
}

/// Acknowledged means replicated (issue 14, part 2): with `MCPT_REDIS_WAIT_REPLICAS=1` a
/// create is answered only once the replica has it; with the replica gone, a create is
/// refused with a retryable error naming the variable (and counted), and the task it
/// wrote is cancelled, whether or not a worker had started it. An answer and a cancel stand
/// on the primary but are refused the same way (a failover could lose them), and counted;
/// sending them again changes nothing more.
#[tokio::test]
async fn creates_wait_for_a_replica_and_are_refused_without_one() -> Result<()> {
    let primary = RedisServer::start()?;
    let mut replica = RedisServer::start_replica_of(&primary)?;
    let env = [
        ("MCPT_REDIS_WAIT_REPLICAS", "1".to_owned()),
        ("MCPT_REDIS_WAIT_TIMEOUT", "2s".to_owned()),
    ];
    let gateway = Gateway::start(&primary.url(), &env)?;
    let _worker = Worker::start(&primary.url(), &env)?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;
    // The replica must have synced before it can confirm anything.
    primary.wait_replicas_online(1, Duration::from_secs(20))?;

    let id = client.start_task("sleep", json!({"ms": 10})).await?;
    client
        .wait_status(&id, "completed", Duration::from_secs(20))
        .await?;
    ensure!(
        replica.task_field(&id, "status")? == "completed",
        "the replica should hold the finished task"
    );
    let asking = client
        .start_task("ask", json!({"question": "colour?"}))
        .await?;
    client
        .wait_status(&asking, "input_required", Duration::from_secs(20))
        .await?;

    replica.kill();
    let started = Instant::now();
    let refused = client
        .call("sleep", json!({"ms": 5000}), &caps_tasks())
        .await?;
    let message = refused.body["error"]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        message.contains("MCPT_REDIS_WAIT_REPLICAS") && message.contains("try again"),
        "a create without a replica: {}",
        refused.body
    );
    ensure!(
        started.elapsed() < Duration::from_secs(5),
        "the refusal took {:?}",
        started.elapsed()
    );
    // The refused create's task (the one task in Redis besides the two above) is
    // cancelled, not left to run for 5 s.
    let keys = primary.cli(&["--scan", "--pattern", "mcpt:task:*"])?;
    let others: Vec<&str> = keys
        .lines()
        .filter(|k| !k.contains(&id) && !k.contains(&asking))
        .collect();
    ensure!(others.len() == 1, "tasks besides the two: {others:?}");
    let status = primary.cli(&["HGET", others[0], "status"])?;
    ensure!(status.trim() == "cancelled", "{}: {status}", others[0]);
    // An answer stands on the primary (it cannot be taken back), but the client is not told
    // it landed: it may not survive a failover (issue 14). Sent again, it is ignored.
    let task = client.get(&asking).await?;
    let key = task["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .context("no input request")?;
    let answer = json!({key.clone(): {"action": "accept", "content": {"answer": "blue"}}});
    let task_key = keys
        .lines()
        .find(|k| k.contains(&asking))
        .context("the asking task's hash")?;
    for attempt in 1..=2 {
        let answered = client.update(&asking, answer.clone()).await?;
        let message = answered.body["error"]["message"]
            .as_str()
            .unwrap_or_default();
        ensure!(
            message.contains("did not confirm the answer")
                && message.contains("MCPT_REDIS_WAIT_REPLICAS")
                && message.contains("send the same request again"),
            "answer {attempt} without a replica: {}",
            answered.body
        );
        let recorded = primary.cli(&["HGET", task_key, &format!("ans:{key}")])?;
        ensure!(
            recorded.contains("blue"),
            "answer {attempt}: the primary holds {recorded:?}"
        );
    }
    // A cancel likewise.
    let cancelled = client
        .request("tasks/cancel", json!({"taskId": asking}), &caps_tasks())
        .await?;
    let message = cancelled.body["error"]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        message.contains("did not confirm the cancel"),
        "a cancel without a replica: {}",
        cancelled.body
    );
    let metrics = mcp_tasks_tests::metrics_text(gateway.addr).await?;
    for op in ["create", "answer", "cancel"] {
        let n =
            mcp_tasks_tests::metric_value(&metrics, "mcpt_redis_unreplicated_total", &[("op", op)]);
        ensure!(n >= 1.0, "mcpt_redis_unreplicated_total{{op={op}}} = {n}");
    }
    Ok(())
}

/// A promotion while the old primary is still up (`SENTINEL FAILOVER`): until the sentinels
/// turn it into a replica it takes writes that its resync then throws away, so the store
/// must not wait for a failing write to move. It hears the sentinels' `+switch-master`
/// and moves its connections (the shared one and the pooled `WAIT` ones) at once: every
/// create after the announcement succeeds, on the promoted node, and completes.
#[tokio::test]
async fn an_announced_promotion_moves_connections_before_any_write_fails() -> Result<()> {
    let (primary, replicas, sentinels) = mcp_tasks_tests::sentinel::start_replicated(2, 3)?;
    let env = [
        ("MCPT_REDIS_WAIT_REPLICAS", "1".to_owned()),
        ("MCPT_REDIS_WAIT_TIMEOUT", "1s".to_owned()),
    ];
    let gateway = Gateway::start(&sentinels.url(), &env)?;
    let _worker = Worker::start(&sentinels.url(), &env)?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;
    let before = client.start_task("sleep", json!({"ms": 10})).await?;
    client
        .wait_status(&before, "completed", Duration::from_secs(20))
        .await?;

    let reply = sentinels.cli(
        0,
        &[
            "SENTINEL",
            "FAILOVER",
            mcp_tasks_tests::sentinel::MASTER_NAME,
        ],
    )?;
    ensure!(reply.trim() == "OK", "SENTINEL FAILOVER: {reply}");
    let started = Instant::now();
    let promoted = loop {
        let port = sentinels.primary_port()?;
        if port != primary.port() {
            break port;
        }
        ensure!(
            started.elapsed() < FAILOVER_WITHIN,
            "the sentinels did not promote a replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let node = replicas
        .iter()
        .find(|r| r.port() == promoted)
        .context("a node we did not start was promoted")?;
    // WAIT 1 needs a replica of the promoted node: the sentinels move the other one (and
    // the old primary) over after the promotion.
    while !node.cli(&["INFO", "replication"])?.contains("state=online") {
        ensure!(
            started.elapsed() < FAILOVER_WITHIN,
            "the promoted node never got a replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in 0..5 {
        let reply = client
            .call("sleep", json!({"ms": 10}), &caps_tasks())
            .await?;
        let id = reply.body["result"]["taskId"]
            .as_str()
            .with_context(|| {
                format!(
                    "create {n} after the promotion: {}; gateway log:\n{}",
                    reply.body,
                    gateway.process.log_text()
                )
            })?
            .to_owned();
        client
            .wait_status(&id, "completed", Duration::from_secs(20))
            .await?;
        ensure!(
            node.task_field(&id, "status")? == "completed",
            "{id} is not on the promoted node"
        );
    }
    ensure!(
        gateway
            .process
            .log_text()
            .contains("the sentinels announced a new primary"),
        "the gateway did not log the announcement"
    );
    Ok(())
}
