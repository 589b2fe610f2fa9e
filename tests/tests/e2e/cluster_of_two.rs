//! Two gateways and two workers on one Redis: any gateway serves any task, jobs spread over
//! the workers, and losing a worker does not stop the service (ARCHITECTURE.md "Shape";
//! T-14, T-36, T-46…T-50 across replicas).
//!
//! Which worker ran a task is read from the `worker` field of the task hash (the consumer
//! name `start.lua` writes); each worker logs its consumer name as `worker started worker=…`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Client, TestContext, caps_tasks, poll_until};
use serde_json::{Value, json};

use crate::lifecycle::check::{self, Kind};

const WITHIN: Duration = Duration::from_secs(10);
const SUB_ID: &str = "io.modelcontextprotocol/subscriptionId";

fn hget(ctx: &TestContext, id: &str, field: &str) -> Result<String> {
    ctx.redis.task_field(id, field)
}

/// The consumer name a worker logged at start-up.
fn consumer_name(ctx: &TestContext, worker: usize) -> Option<String> {
    let log = ctx.workers[worker].process.log_text();
    let rest = log.split("worker started worker=").nth(1)?;
    Some(rest.split_whitespace().next()?.to_owned())
}

/// Redis client ids of the connections whose last command was XREADGROUP (the workers'
/// job readers).
fn job_readers(ctx: &TestContext) -> Result<BTreeSet<String>> {
    Ok(ctx
        .redis
        .cli(&["CLIENT", "LIST"])?
        .lines()
        .filter(|l| l.contains("cmd=xreadgroup"))
        .filter_map(|l| l.split_whitespace().next()?.strip_prefix("id="))
        .map(str::to_owned)
        .collect())
}

/// Poll `tasks/get` on `client` until the task is terminal.
async fn terminal(client: &Client, id: &str, within: Duration) -> Result<Value> {
    poll_until(within, || async {
        let t = client.get(id).await.ok()?;
        check::is_terminal(t["status"].as_str()?).then_some(t)
    })
    .await
    .with_context(|| format!("task {id} did not end within {within:?}"))
}

/// T-14, T-36, T-47: a task created on gateway A is read, answered, watched and cancelled
/// on gateway B, and both gateways show the same task.
#[tokio::test]
async fn any_gateway_serves_any_task() -> Result<()> {
    let ctx = TestContext::start(2, 2).await?;
    let a = ctx.gateways[0].client();
    let b = ctx.gateways[1].client();

    // ask: created on A, everything else on B.
    let ask = a.start_task("ask", json!({"question": "City?"})).await?;
    let first = b
        .get(&ask)
        .await
        .context("tasks/get on B right after create")?;
    check::task(&first, Kind::Polled);
    let mut sub = b.listen("cluster-ask", &[&ask]).await?;
    let ack = sub.next(WITHIN).await.context("no ack")?;
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([ask]),
        "{ack}"
    );
    let asking = b.wait_status(&ask, "input_required", WITHIN).await?;
    assert!(asking["inputRequests"]["answer-1"].is_object(), "{asking}");
    assert_eq!(a.get(&ask).await?, asking, "gateways disagree");
    let r = b
        .update(
            &ask,
            json!({"answer-1": {"action": "accept", "content": {"answer": "Oslo"}}}),
        )
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    let done_a = a.wait_status(&ask, "completed", WITHIN).await?;
    assert_eq!(check::text(&done_a["result"]), "answer: Oslo");
    assert_eq!(
        b.get(&ask).await?,
        done_a,
        "gateways disagree on the result"
    );
    // B's stream followed the task to its end, and its last word equals tasks/get.
    let mut last = None;
    while let Some(msg) = sub.next(WITHIN).await {
        assert_eq!(msg["method"], "notifications/tasks", "{msg}");
        assert_eq!(msg["params"]["_meta"][SUB_ID], "cluster-ask");
        check::task(&msg["params"], Kind::Notified);
        let end = check::is_terminal(msg["params"]["status"].as_str().unwrap_or_default());
        last = Some(msg);
        if end {
            break;
        }
    }
    let last = last.context("no notification on B")?;
    assert_eq!(
        check::without(&last["params"], &["_meta"]),
        check::without(&done_a, &["resultType", "_meta"]),
        "B's notification differs from A's tasks/get"
    );

    // sleep: created on A, cancelled on B, seen cancelled on A.
    let sleep = a
        .start_task("sleep", json!({"ms": 60_000, "steps": 1}))
        .await?;
    poll_until(WITHIN, || async {
        let t = b.get(&sleep).await.ok()?;
        (t["statusMessage"] == "step 1/1").then_some(())
    })
    .await
    .context("sleep never started")?;
    let r = b.cancel(&sleep).await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    let t = terminal(&a, &sleep, Duration::from_secs(5)).await?;
    assert_eq!(t["status"], "cancelled", "{t}");
    assert_eq!(b.get(&sleep).await?, t, "gateways disagree");
    ctx.cleanup().await;
    Ok(())
}

/// Jobs spread over both workers: of 20 overlapping sleeps each worker runs some.
#[tokio::test]
async fn jobs_spread_over_both_workers() -> Result<()> {
    let ctx = TestContext::start(2, 2).await?;
    let clients = [ctx.gateways[0].client(), ctx.gateways[1].client()];
    let mut ids = Vec::new();
    for i in 0..20 {
        let id = clients[i % 2]
            .start_task("sleep", json!({"ms": 200}))
            .await?;
        ids.push(id);
    }
    let mut ran_on: BTreeMap<String, usize> = BTreeMap::new();
    for id in &ids {
        let t = terminal(&clients[0], id, WITHIN).await?;
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(check::text(&t["result"]), "slept 200 ms");
        let worker = hget(&ctx, id, "worker")?;
        assert!(!worker.is_empty(), "task {id} has no worker field");
        *ran_on.entry(worker).or_default() += 1;
    }
    assert_eq!(ran_on.len(), 2, "not both workers ran jobs: {ran_on:?}");
    let names: BTreeSet<String> = (0..2).filter_map(|w| consumer_name(&ctx, w)).collect();
    if names.len() == 2 {
        assert_eq!(
            ran_on.keys().cloned().collect::<BTreeSet<_>>(),
            names,
            "worker fields are not the workers' consumer names"
        );
    }
    ctx.cleanup().await;
    Ok(())
}

/// Killing an idle worker leaves the other serving: new tasks, including one that asks for
/// input, run to completion on the survivor.
#[tokio::test]
async fn surviving_worker_keeps_serving() -> Result<()> {
    let mut ctx = TestContext::start(2, 2).await?;
    // Both workers are blocked reading jobs; after the kill, wait until Redis has dropped
    // the dead one's reader so no new job can be handed to it.
    let readers = poll_until(WITHIN, || async {
        let r = job_readers(&ctx).ok()?;
        (r.len() == 2).then_some(r)
    })
    .await
    .context("the two workers never both waited for jobs")?;
    let killed = consumer_name(&ctx, 0);
    ctx.workers[0].process.kill();
    poll_until(WITHIN, || async {
        let now = job_readers(&ctx).ok()?;
        (now.len() == 1 && now.is_subset(&readers)).then_some(())
    })
    .await
    .context("Redis kept the killed worker's reader")?;

    let a = ctx.gateways[0].client();
    let b = ctx.gateways[1].client();
    let mut ids = Vec::new();
    for i in 0..6 {
        let client = if i % 2 == 0 { &a } else { &b };
        ids.push(client.start_task("sleep", json!({"ms": 50})).await?);
    }
    let ask = a
        .start_task("ask", json!({"question": "Still there?"}))
        .await?;
    b.wait_status(&ask, "input_required", WITHIN).await?;
    b.update(
        &ask,
        json!({"answer-1": {"action": "accept", "content": {"answer": "yes"}}}),
    )
    .await?;
    ids.push(ask.clone());
    let mut ran_on = BTreeSet::new();
    for id in &ids {
        let t = terminal(&a, id, WITHIN).await?;
        assert_eq!(t["status"], "completed", "{t}");
        ran_on.insert(hget(&ctx, id, "worker")?);
    }
    assert_eq!(ran_on.len(), 1, "jobs ran on several workers: {ran_on:?}");
    if let Some(dead) = killed {
        assert!(!ran_on.contains(&dead), "a job ran on the killed worker");
    }
    // Synchronous calls go through the survivor too, on both gateways.
    for client in [&a, &b] {
        let r = client
            .call("echo", json!({"text": "alive"}), &caps_tasks())
            .await?;
        assert_eq!(check::text(&r.body["result"]), "alive", "{}", r.body);
    }
    ctx.cleanup().await;
    Ok(())
}

/// A job whose worker dies mid-run is taken over by the other worker (ARCHITECTURE.md
/// "Worker loop": entries whose owner stopped renewing are reclaimed by an `XAUTOCLAIM`
/// sweep) and completes.
#[tokio::test]
async fn job_of_a_killed_worker_is_finished_by_the_other() -> Result<()> {
    let mut ctx = TestContext::start(1, 2).await?;
    let client = ctx.client();
    let id = client
        .start_task("sleep", json!({"ms": 1500, "steps": 3}))
        .await?;
    let owner = poll_until(WITHIN, || async {
        let w = hget(&ctx, &id, "worker").ok()?;
        (!w.is_empty()).then_some(w)
    })
    .await
    .context("the job never started")?;
    let victim = (0..2)
        .find(|w| consumer_name(&ctx, *w).as_deref() == Some(owner.as_str()))
        .context("cannot tell which worker runs the job")?;
    ctx.workers[victim].process.kill();
    let t = match terminal(&client, &id, Duration::from_secs(30)).await {
        Ok(t) => t,
        Err(e) => {
            let pending = ctx.redis.cli(&[
                "XPENDING",
                "mcpt:queue:{default}",
                "workers",
                "-",
                "+",
                "10",
            ])?;
            anyhow::bail!(
                "{e}; last seen {}; XPENDING: {pending}",
                client.get(&id).await?
            );
        }
    };
    assert_eq!(t["status"], "completed", "{t}");
    assert_ne!(
        hget(&ctx, &id, "worker")?,
        owner,
        "the dead worker finished it?"
    );
    ctx.cleanup().await;
    Ok(())
}
