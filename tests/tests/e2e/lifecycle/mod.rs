//! A task's life over HTTP: capability negotiation, creation, the shapes `tasks/get` returns
//! for each status, `tasks/update`, `tasks/cancel`, headers and errors
//! (tasks-extension.md §2–§15; checklist T-01…T-57).
//!
//! Each test starts its own Redis, gateway and worker. The [`check`] module holds the shape
//! rules (T-09…T-13, T-57) that `listen.rs` and `cluster_of_two.rs` reuse; this file holds
//! the helpers the topic files share. The tests are in:
//! - [`negotiation`]: the extension and the capabilities a task needs (T-01…T-08, T-45,
//!   T-54);
//! - [`shapes`]: the `CreateTaskResult` and the fields of each status (T-09…T-17, T-19,
//!   T-20, T-23, T-42, T-52), and the shape rules' own test;
//! - [`results`]: how the work's result or error ends a task (T-20…T-23, T-54);
//! - [`polling`]: `tasks/get` (T-19, T-24, T-26, T-53, T-57);
//! - [`update`]: `tasks/update` (T-17, T-19, T-21, T-27…T-34, T-53, T-56);
//! - [`cancel`]: `tasks/cancel` and terminal states (T-17, T-18, T-35…T-38);
//! - [`methods_and_headers`]: absent methods and `Mcp-Name` (T-39…T-41, T-53);
//! - [`expiry`]: the TTL, for running and parked tasks (T-24, T-51…T-53);
//! - [`parked`]: what a worker does with a task waiting for input (T-18).

pub(crate) mod check;

mod cancel;
mod expiry;
mod methods_and_headers;
mod negotiation;
mod parked;
mod polling;
mod results;
mod shapes;
mod update;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Client, Reply, TestContext, Worker, caps_tasks, meta};
use serde_json::{Value, json};

use self::check::Kind;

const WITHIN: Duration = Duration::from_secs(10);

/// A `tasks/*` request with the `Mcp-Name` header given explicitly (`None` = no header).
async fn task_request_with_name(
    client: &Client,
    method: &str,
    params: Value,
    mcp_name: Option<&str>,
) -> Result<Reply> {
    let mut params = params;
    params["_meta"] = meta(&caps_tasks());
    let body = json!({"jsonrpc": "2.0", "id": "hdr-1", "method": method, "params": params});
    client
        .post_raw(
            &Client::headers(method, mcp_name),
            serde_json::to_vec(&body)?,
        )
        .await
}

/// The whole `tasks/get` reply.
async fn get_reply(client: &Client, id: &str, caps: &Value) -> Result<Reply> {
    client
        .request("tasks/get", json!({"taskId": id}), caps)
        .await
}

/// A `tools/call` that must create a task; returns the `CreateTaskResult`.
async fn create(client: &Client, tool: &str, args: Value) -> Result<Value> {
    let r = client.call(tool, args, &caps_tasks()).await?;
    let result = r.body["result"].clone();
    anyhow::ensure!(
        r.status == 200 && result["resultType"] == "task",
        "{tool} did not create a task: {} {}",
        r.status,
        r.body
    );
    check::task(&result, Kind::Created);
    Ok(result)
}

/// Poll `tasks/get` until `done` holds, returning every distinct snapshot seen (in order).
async fn observe(
    client: &Client,
    id: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Result<Vec<Value>> {
    let deadline = Instant::now() + within;
    let mut seen: Vec<Value> = Vec::new();
    loop {
        let t = client.get(id).await?;
        check::task(&t, Kind::Polled);
        let finished = done(&t);
        if seen.last() != Some(&t) {
            seen.push(t);
        }
        if finished {
            return Ok(seen);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "task {id}: condition not met within {within:?}; seen {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Poll until the task is terminal; the snapshots seen.
async fn until_terminal(client: &Client, id: &str, within: Duration) -> Result<Vec<Value>> {
    observe(client, id, within, |t| {
        check::is_terminal(t["status"].as_str().unwrap_or_default())
    })
    .await
}

fn statuses(seen: &[Value]) -> Vec<&str> {
    seen.iter()
        .map(|t| t["status"].as_str().unwrap_or_default())
        .collect()
}

/// Assert an in-band -32602 "unknown task" answer (T-24, T-32, T-53).
fn assert_unknown_task(r: &Reply, what: &str) {
    assert_eq!(r.error_code(), Some(-32602), "{what}: {}", r.body);
    assert_eq!(r.status, 200, "{what}: -32602 is in-band: {}", r.body);
    let msg = r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        msg.contains("task") && (msg.contains("not found") || msg.contains("unknown")),
        "{what}: message should say the task is unknown (T-53): {msg:?}"
    );
}

/// Assert an empty acknowledgement: `resultType: "complete"` and at most `_meta` (T-27, T-35).
fn assert_empty_ack(r: &Reply, what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", r.body);
    let result = r.body["result"]
        .as_object()
        .unwrap_or_else(|| panic!("{what}: no result: {}", r.body));
    assert_eq!(result.get("resultType"), Some(&json!("complete")), "{what}");
    for k in result.keys() {
        assert!(
            k == "resultType" || k == "_meta",
            "{what}: ack carries {k:?}: {}",
            r.body
        );
    }
}

async fn wait_input_required(client: &Client, id: &str) -> Result<Value> {
    let t = client.wait_status(id, "input_required", WITHIN).await?;
    check::task(&t, Kind::Polled);
    Ok(t)
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// The number of task hashes in Redis.
fn task_count(ctx: &TestContext) -> Result<usize> {
    Ok(ctx
        .redis
        .cli(&["--scan", "--pattern", "mcpt:task:*"])?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count())
}

/// Standard Base64 with padding (enough for the sentinel test).
fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A context whose single worker runs with extra `env`; waits until its tools are listed.
async fn with_worker_env(env: &[(&str, String)]) -> Result<TestContext> {
    let mut ctx = TestContext::start(1, 0).await?;
    ctx.workers.push(Worker::start(&ctx.redis.url(), env)?);
    ctx.wait_for_tools().await?;
    Ok(ctx)
}

fn pending_jobs(ctx: &TestContext) -> Result<u64> {
    let out = ctx.redis.cli(&[
        "XPENDING",
        &mcp_tasks_store::keys::queue_key("default"),
        mcp_tasks_store::keys::GROUP,
    ])?;
    out.lines()
        .next()
        .unwrap_or("0")
        .trim()
        .parse()
        .context("XPENDING count")
}
