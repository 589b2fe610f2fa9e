//! Time one `sleep ms=0` task from call to completed, N times, against a running gateway.
//!
//! ```sh
//! cargo run --release -p mcp-tasks-tests --example one_task -- http://127.0.0.1:8080/mcp 200
//! ```
//! Prints, over N sequential tasks, the client-observed time from sending `tools/call` to
//! the first `tasks/get` that reports `completed` (polling back to back), and the
//! server-side time between `createdAt` and the completed task's `lastUpdatedAt`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use mcp_tasks_tests::Client;
use serde_json::json;

fn parse_ms(ts: &str) -> Option<f64> {
    // "2026-11-29T19:10:18.823Z" → seconds within the day, enough for a difference.
    let t = ts.split('T').nth(1)?.trim_end_matches('Z');
    let mut parts = t.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(((h * 60.0 + m) * 60.0 + s) * 1000.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args.next().context("usage: one_task URL [N]")?;
    let n: usize = args
        .next()
        .map_or(Ok(100), |s| s.parse())
        .context("N must be a number")?;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .context("URL must look like http://127.0.0.1:8080/mcp")?;
    let client = Client::new(addr);
    let (mut observed, mut server) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let start = Instant::now();
        let id = client.start_task("sleep", json!({"ms": 0})).await?;
        let task = loop {
            let t = client.get(&id).await?;
            if t["status"] == "completed" {
                break t;
            }
            if start.elapsed() > Duration::from_secs(10) {
                bail!("task {i} ({id}) did not complete within 10 s: {t}");
            }
        };
        observed.push(start.elapsed().as_secs_f64() * 1000.0);
        if let (Some(a), Some(b)) = (
            task["createdAt"].as_str().and_then(parse_ms),
            task["lastUpdatedAt"].as_str().and_then(parse_ms),
        ) {
            server.push(b - a);
        }
    }
    observed.sort_by(f64::total_cmp);
    server.sort_by(f64::total_cmp);
    println!("tasks: {n} sequential sleep ms=0 tasks against {url}");
    println!(
        "call → completed observed by the client (ms): min {:.2}  p50 {:.2}  p99 {:.2}  max {:.2}",
        observed[0],
        percentile(&observed, 0.5),
        percentile(&observed, 0.99),
        observed[n - 1]
    );
    if !server.is_empty() {
        println!(
            "createdAt → completed on the server (ms, Redis clock): p50 {:.0}  p99 {:.0}",
            percentile(&server, 0.5),
            percentile(&server, 0.99)
        );
    }
    Ok(())
}
