//! Connections cost nothing to a client that sends nothing (issue 20, item 1): silent,
//! HTTP/2-preface-only and idle keep-alive connections are closed by the gateway's
//! timeouts, and a flood of them under a small open-files limit leaves authenticated
//! clients and `/healthz` served.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use mcp_tasks_tests::{
    Gateway, RedisServer, TempDir, caps_none, metric_value, metrics_text, poll_until,
};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const TOKEN: &str = "alice-token-0123456789abcdef";

/// The HTTP/2 connection preface followed by an empty SETTINGS frame.
const H2_PREFACE_AND_SETTINGS: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

fn token_env(dir: &std::path::Path) -> Result<Vec<(&'static str, String)>> {
    let file = dir.join("tokens");
    std::fs::write(&file, format!("alice {TOKEN}\n"))?;
    Ok(vec![
        ("MCPT_AUTH", "tokens".to_owned()),
        ("MCPT_AUTH_TOKENS_FILE", file.display().to_string()),
    ])
}

/// Wait (up to `within`) until the gateway closes `stream`: a read returns end of file or
/// a reset. Whatever the server wrote before closing is skipped.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

async fn authenticated_tools_list(addr: SocketAddr) -> Result<Duration> {
    let client = mcp_tasks_tests::Client::new(addr).with_token(TOKEN);
    let started = Instant::now();
    let reply = client
        .request("tools/list", json!({}), &caps_none())
        .await?;
    ensure!(
        reply.status == 200 && reply.body["result"]["tools"].is_array(),
        "tools/list failed: {} {}",
        reply.status,
        reply.body
    );
    Ok(started.elapsed())
}

/// 600 connections that send nothing, or only the HTTP/2 preface and an empty SETTINGS
/// frame, against a gateway limited to 512 open files: an authenticated request on a new
/// connection is still answered within 2 s, `/healthz` answers, and every silent
/// connection is closed once the header timeout has passed; the gateway is back to a
/// handful of descriptors and counted what it closed.
#[tokio::test]
async fn silent_connections_neither_exhaust_nor_outlive_the_header_timeout() -> Result<()> {
    let dir = TempDir::new("mcpt-conn-silent")?;
    let redis = RedisServer::start()?;
    let mut env = token_env(dir.path())?;
    env.push(("MCPT_HEADER_TIMEOUT", "3s".to_owned()));
    let mut gateway = Gateway::start_with_open_files(&redis.url(), &env, 512)?;
    let addr = gateway.addr;
    authenticated_tools_list(addr).await?;
    let fds_before = gateway.open_fds()?;

    let mut silent = Vec::new();
    for i in 0..600 {
        let mut s = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connection {i}"))?;
        if i % 2 == 1 {
            s.write_all(H2_PREFACE_AND_SETTINGS).await?;
        }
        silent.push(s);
    }
    let flood_ended = Instant::now();
    let took = authenticated_tools_list(addr).await?;
    ensure!(
        took < Duration::from_secs(2),
        "tools/list took {took:?} under the flood"
    );
    let health = mcp_tasks_tests::Client::new(addr)
        .send_raw("GET", "/healthz", &[], bytes::Bytes::new())
        .await?;
    ensure!(health.status() == 200, "/healthz: {}", health.status());
    let fds_flooded = gateway.open_fds()?;
    ensure!(
        fds_flooded < 512,
        "the gateway holds {fds_flooded} descriptors at a limit of 512"
    );

    // Every silent connection is closed once the header timeout has passed, counted from
    // its connect (the flood took well under a second; allow 5 s more for scheduling).
    let deadline = flood_ended + Duration::from_secs(3 + 5);
    let mut open = 0;
    for s in &mut silent {
        let left = deadline.saturating_duration_since(Instant::now());
        if !closed_within(s, left.max(Duration::from_millis(10))).await {
            open += 1;
        }
    }
    ensure!(open == 0, "{open} of 600 silent connections are still open");
    drop(silent);
    let fds_after = gateway.open_fds()?;
    ensure!(
        fds_after <= fds_before + 4,
        "descriptors: {fds_before} before the flood, {fds_after} after it"
    );

    let metrics = metrics_text(addr).await?;
    let timed_out = metric_value(
        &metrics,
        "mcpt_connections_closed_total",
        &[("reason", "header_timeout")],
    );
    let evicted = metric_value(
        &metrics,
        "mcpt_connections_closed_total",
        &[("reason", "evicted")],
    );
    // 448 slots (512 less headroom) for 600 silent connections plus the requests: some
    // made room, the rest timed out.
    ensure!(
        evicted >= 150.0 && timed_out + evicted >= 600.0,
        "closed: {timed_out} by the header timeout, {evicted} to make room"
    );
    Ok(())
}

/// A keep-alive HTTP/1.1 connection closes once it has had no request for
/// `MCPT_IDLE_TIMEOUT`, and not while a request is served; an HTTP/2 connection that
/// never opens a stream closes at the header timeout.
#[tokio::test]
async fn idle_connections_close_after_the_idle_timeout() -> Result<()> {
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(
        &redis.url(),
        &[
            ("MCPT_HEADER_TIMEOUT", "1s".to_owned()),
            ("MCPT_IDLE_TIMEOUT", "2s".to_owned()),
        ],
    )?;
    let mut keep_alive = TcpStream::connect(gateway.addr).await?;
    let mut h2 = TcpStream::connect(gateway.addr).await?;
    h2.write_all(H2_PREFACE_AND_SETTINGS).await?;
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", gateway.addr);
    // Three requests, each after a pause shorter than the idle timeout but longer than
    // the header timeout: the connection stays open while it is used.
    for _ in 0..3 {
        keep_alive.write_all(request.as_bytes()).await?;
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), keep_alive.read(&mut buf))
            .await
            .context("no response")??;
        let head = String::from_utf8_lossy(&buf[..n]);
        ensure!(head.starts_with("HTTP/1.1 200"), "response: {head}");
        tokio::time::sleep(Duration::from_millis(1300)).await;
    }
    ensure!(
        closed_within(&mut h2, Duration::from_millis(500)).await,
        "an HTTP/2 connection without a stream outlived the header timeout"
    );
    let idle_from = Instant::now() - Duration::from_millis(1300);
    ensure!(
        closed_within(&mut keep_alive, Duration::from_secs(4)).await,
        "an idle keep-alive connection stayed open"
    );
    let idle = idle_from.elapsed();
    ensure!(
        idle >= Duration::from_millis(1900),
        "closed after {idle:?} idle, before the 2 s idle timeout"
    );
    let metrics = metrics_text(gateway.addr).await?;
    ensure!(
        metric_value(
            &metrics,
            "mcpt_connections_closed_total",
            &[("reason", "idle")]
        ) >= 1.0,
        "the idle close was not counted"
    );
    Ok(())
}

/// HTTP/2 without TLS (prior knowledge) is served like HTTP/1.1: the gateway tells the two
/// apart by the preface and answers a task's whole round trip over HTTP/2.
#[tokio::test]
async fn an_http2_client_runs_a_task_end_to_end() -> Result<()> {
    let ctx = mcp_tasks_tests::TestContext::start(1, 1).await?;
    let addr = ctx.gateways[0].addr;
    let h2 = mcp_tasks_tests::Client::over_http2(addr);
    let health = h2
        .send_raw("GET", "/healthz", &[], bytes::Bytes::new())
        .await?;
    ensure!(
        health.status() == 200 && health.version() == hyper::Version::HTTP_2,
        "/healthz over HTTP/2: {} {:?}",
        health.status(),
        health.version()
    );
    h2.wait_for_tool("sleep").await?;
    let id = h2.start_task("sleep", json!({"ms": 10})).await?;
    h2.wait_status(&id, "completed", Duration::from_secs(20))
        .await?;
    ctx.cleanup().await;
    Ok(())
}

/// A gateway told to stop does not wait for connections that have not started a request:
/// silent ones, and one that sent only the first byte of a method, close when it stops
/// accepting, long before their header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_does_not_wait_for_connections_that_sent_no_request() -> Result<()> {
    let redis = RedisServer::start()?;
    let env = [
        ("MCPT_HEADER_TIMEOUT", "60s".to_owned()),
        ("MCPT_DRAIN_DELAY", "0s".to_owned()),
    ];
    let mut gateway = Gateway::start(&redis.url(), &env)?;
    let addr = gateway.addr;
    let silent = TcpStream::connect(addr).await?;
    let mut one_byte = TcpStream::connect(addr).await?;
    one_byte.write_all(b"P").await?;
    // Both accepted (the request reading the gauge is a third connection).
    poll_until(Duration::from_secs(5), || async {
        let m = metrics_text(addr).await.ok()?;
        (metric_value(&m, "mcpt_connections_open", &[]) >= 3.0).then_some(())
    })
    .await
    .context("the gateway never accepted both connections")?;
    // Within 10 s: a gateway waiting for them would wait out its 30 s shutdown grace.
    let status =
        tokio::task::spawn_blocking(move || gateway.process.terminate(Duration::from_secs(10)))
            .await??;
    ensure!(status.code() == Some(0), "gateway: {status:?}");
    drop((silent, one_byte));
    Ok(())
}
