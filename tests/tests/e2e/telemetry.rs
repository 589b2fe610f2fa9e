//! Observability: one task is one trace across the gateway and the worker, exported by
//! OTLP; both binaries push their metrics by OTLP and serve them on `GET /metrics`, and the
//! counters move with the work.

use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_tests::otlp::{self, Span};
use mcp_tasks_tests::{
    Client, TestContext, caps_tasks, meta, metric_value, metrics_text, poll_until,
};
use serde_json::json;

/// The caller's own trace context, as an MCP client sends it in `_meta`.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn find<'a>(spans: &'a [Span], service: &str, name: &str) -> Option<&'a Span> {
    spans
        .iter()
        .find(|s| s.trace_id == CALLER_TRACE && s.service == service && s.name == name)
}

/// A `sleep` task called with `_meta.traceparent` yields one trace under the caller's trace
/// id: the gateway's `tools/call` span (child of the caller's span), the worker's `job` span
/// (child of `tools/call`), and the store spans of each status change and of the result.
#[tokio::test]
async fn one_task_is_one_trace_across_gateway_and_worker() -> Result<()> {
    let receiver = otlp::Receiver::start().await?;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "300".to_owned()),
    ];
    let ctx = TestContext::start_with(1, 1, &env).await?;
    let client = ctx.client();

    let mut m = meta(&caps_tasks());
    m["traceparent"] = json!(format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"));
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 100, "steps": 2}, "_meta": m}
    });
    let reply = client
        .post_raw(
            &Client::headers("tools/call", Some("sleep")),
            serde_json::to_vec(&body)?,
        )
        .await?;
    let task_id = reply.body["result"]["taskId"]
        .as_str()
        .with_context(|| format!("not a task: {}", reply.body))?
        .to_owned();
    client
        .wait_status(&task_id, "completed", Duration::from_secs(20))
        .await?;

    let spans = poll_until(Duration::from_secs(20), || async {
        let spans = receiver.spans();
        let finished = spans.iter().any(|s| {
            s.service == "mcp-tasks-worker"
                && s.attributes.get("store.op").map(String::as_str) == Some("finish")
        });
        let job = find(&spans, "mcp-tasks-worker", "job").is_some();
        (finished && job).then_some(spans)
    })
    .await
    .with_context(|| format!("spans never arrived; got {:#?}", receiver.spans()))?;
    println!("{}", otlp::span_tree(&spans, CALLER_TRACE));

    let call = find(&spans, "mcp-tasks-gateway", "tools/call").context("no tools/call span")?;
    assert_eq!(
        call.parent_id, CALLER_SPAN,
        "tools/call is the caller's child"
    );
    assert_eq!(call.attributes.get("task.id"), Some(&task_id));
    let job = find(&spans, "mcp-tasks-worker", "job").context("no job span")?;
    assert_eq!(job.parent_id, call.span_id, "the run is the call's child");
    assert_eq!(
        job.attributes.get("tool.name").map(String::as_str),
        Some("sleep")
    );
    let ops_under_job: Vec<&str> = spans
        .iter()
        .filter(|s| s.parent_id == job.span_id && s.name == "store")
        .filter_map(|s| s.attributes.get("store.op").map(String::as_str))
        .collect();
    for op in ["start", "status", "finish"] {
        assert!(
            ops_under_job.contains(&op),
            "no store {op} under job: {ops_under_job:?}"
        );
    }
    let created = spans.iter().any(|s| {
        s.parent_id == call.span_id
            && s.attributes.get("store.op").map(String::as_str) == Some("create")
    });
    assert!(created, "no store create under tools/call");

    // Metrics go out by OTLP too, from both processes.
    poll_until(Duration::from_secs(10), || async {
        let g = receiver.metric_names("mcp-tasks-gateway");
        let w = receiver.metric_names("mcp-tasks-worker");
        (g.iter().any(|n| n == "mcpt.tasks.created")
            && w.iter().any(|n| n == "mcpt.tasks.finished"))
        .then_some(())
    })
    .await
    .context("metrics never pushed by OTLP")?;
    ctx.cleanup().await;
    Ok(())
}

/// `/metrics` on both binaries: created, finished, durations, requests, tasks waiting for
/// input, cancels of parked tasks, and the queue gauges all move with the work.
#[tokio::test]
async fn metrics_endpoints_count_the_work() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let gateway = ctx.gateways[0].addr;
    let worker = ctx.workers[0].admin;
    let sleep = [("tool_name", "sleep")];
    let done = [("tool_name", "sleep"), ("task_status", "completed")];
    let calls = [("rpc_method", "tools/call"), ("outcome", "ok")];

    let g0 = metrics_text(gateway).await?;
    let w0 = metrics_text(worker).await?;
    for _ in 0..3 {
        let id = client.start_task("sleep", json!({"ms": 0})).await?;
        client
            .wait_status(&id, "completed", Duration::from_secs(20))
            .await?;
    }
    let g1 = metrics_text(gateway).await?;
    let moved = |a: &str, b: &str, name: &str, labels: &[(&str, &str)]| {
        metric_value(b, name, labels) - metric_value(a, name, labels)
    };
    // The worker counts a job after its finish script has made the task terminal, so a
    // client can see `completed` a moment before the worker's counters move: read them once
    // the worker is idle again.
    let idle = [("queue_name", "default")];
    let w1 = poll_until(Duration::from_secs(10), || async {
        let w = metrics_text(worker).await.ok()?;
        (metric_value(&w, "mcpt_tasks_running", &idle) == 0.0).then_some(w)
    })
    .await
    .context("the worker still counts a job running after all three completed")?;
    assert_eq!(
        moved(&g0, &g1, "mcpt_tasks_created_total", &sleep),
        3.0,
        "{g1}"
    );
    assert_eq!(moved(&g0, &g1, "mcpt_requests_total", &calls), 3.0, "{g1}");
    assert_eq!(
        moved(&g0, &g1, "mcpt_request_duration_seconds_count", &calls),
        3.0
    );
    assert_eq!(
        moved(&w0, &w1, "mcpt_tasks_finished_total", &done),
        3.0,
        "{w1}"
    );
    assert_eq!(
        moved(&w0, &w1, "mcpt_task_duration_seconds_count", &done),
        3.0
    );
    assert_eq!(
        moved(
            &w0,
            &w1,
            "mcpt_task_queue_wait_seconds_count",
            &[("queue_name", "default")]
        ),
        3.0
    );

    // A parked task counts as waiting for input until its cancel, which the gateway's
    // cancel script ends (no worker runs it) and counts.
    let id = client
        .start_task("ask", json!({"question": "name?"}))
        .await?;
    client
        .wait_status(&id, "input_required", Duration::from_secs(20))
        .await?;
    let waiting = [("queue_name", "default")];
    // Counted once the worker has parked it, which may follow the status by a moment.
    poll_until(Duration::from_secs(10), || async {
        let w = metrics_text(worker).await.ok()?;
        (metric_value(&w, "mcpt_tasks_input_required", &waiting) == 1.0).then_some(())
    })
    .await
    .context("the parked task never counted as waiting for input")?;
    // And as running (a parked job is still the worker's), which the three before no longer are.
    let w2 = metrics_text(worker).await?;
    assert_eq!(
        metric_value(&w2, "mcpt_tasks_running", &waiting),
        1.0,
        "{w2}"
    );
    client.cancel(&id).await?;
    let cancelled = [("tool_name", "ask"), ("task_status", "cancelled")];
    let g3 = metrics_text(gateway).await?;
    assert_eq!(
        moved(&g1, &g3, "mcpt_tasks_finished_total", &cancelled),
        1.0,
        "{g3}"
    );
    poll_until(Duration::from_secs(10), || async {
        let w = metrics_text(worker).await.ok()?;
        (metric_value(&w, "mcpt_tasks_input_required", &waiting) == 0.0
            && metric_value(&w, "mcpt_tasks_running", &waiting) == 0.0)
            .then_some(())
    })
    .await
    .context("the parked task still counts after its cancel")?;

    // The queue gauges are sampled from Redis every few seconds.
    let line = poll_until(Duration::from_secs(15), || async {
        let w = metrics_text(worker).await.ok()?;
        w.lines()
            .find(|l| l.starts_with("mcpt_queue_length{queue_name=\"default\"}"))
            .map(str::to_owned)
    })
    .await
    .context("no queue length gauge")?;
    assert!(line.ends_with(" 0"), "a drained queue has length 0: {line}");
    ctx.cleanup().await;
    Ok(())
}
