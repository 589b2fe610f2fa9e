//! A worker embedded in another program (`mcp_tasks_worker::run_serving`, as `mcp-tasks up`
//! runs it): dropping its future stops it taking jobs, although its read loop runs as a
//! task of its own.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use mcp_tasks_shared::config::WorkerConfig;
use mcp_tasks_store::{Created, Job, NewTask, OwnerLimits, Store, new_task_id};
use mcp_tasks_tests::{RedisServer, poll_until};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const OWNER: &str = "anonymous";
const WITHIN: Duration = Duration::from_secs(15);

/// Queue a `sleep ms=0` task on the default queue, as a gateway would: its id.
async fn queue_sleep(store: &Store) -> Result<String> {
    let id = new_task_id();
    let job = Job {
        tool: "sleep".into(),
        args: json!({"ms": 0}),
        caps: serde_json::value::RawValue::from_string("{}".to_owned())?,
        pre: serde_json::Map::new(),
        traceparent: None,
        owner: OWNER.into(),
    };
    let created = store
        .tasks()
        .create(&NewTask {
            id: &id,
            ttl_ms: Some(60_000),
            poll_ms: 500,
            owner: OWNER,
            limits: OwnerLimits::default(),
            queue: "default",
            priority: mcp_tasks_store::Priority::Normal,
            job: &job,
            keyed: None,
        })
        .await?;
    ensure!(matches!(created, Created::At(_)), "{created:?}");
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_worker_future_takes_no_more_jobs() -> Result<()> {
    let redis = RedisServer::start()?;
    let url = redis.url();
    let config = WorkerConfig::from_source(&HashMap::from([
        ("MCPT_REDIS_URL", url.as_str()),
        ("MCPT_ADMIN_ADDR", "off"),
    ]))?;
    let tools = mcp_tasks_worker::tools::packs(&config.tools);
    let store = Store::connect(&url).await?;
    let shutdown = CancellationToken::new();
    let worker = mcp_tasks_worker::run_serving(config, tools, Vec::new(), None, shutdown.clone());
    // The worker runs a first task to its end; then its future is dropped (the select ends).
    let first = tokio::select! {
        ended = worker => anyhow::bail!("the worker ended by itself: {ended:?}"),
        first = async {
            store.jobs().ensure_groups(&["default".to_owned()]).await?;
            let id = queue_sleep(&store).await?;
            poll_until(WITHIN, || async {
                (redis.task_field(&id, "status").ok()? == "completed").then_some(())
            })
            .await?;
            anyhow::Ok(id)
        } => first?,
    };
    let second = queue_sleep(&store).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Not run. A stream read already blocked in Redis when the future was dropped may still
    // claim the job for this consumer before Redis sees its connection close; the job then
    // waits, pending, for its lease to lapse and another worker's sweep, as after a crash.
    let status = redis.task_field(&second, "status")?;
    ensure!(
        status == "working",
        "a job queued after the worker's future was dropped was run (first {first}, \
         second {second}: status {status})"
    );
    shutdown.cancel();
    Ok(())
}
