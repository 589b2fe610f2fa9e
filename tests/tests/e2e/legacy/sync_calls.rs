//! 2025 synchronous calls: a call that asks gets the question on its stream and takes the
//! answer on any gateway; leaving or cancelling a call cancels its task; keep-alives carry
//! a 60 s call through a proxy that cuts streams idle for 30 s.
//!
//! Checklist ids cited: none (2025 compatibility is outside the 2026 checklists).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Client, TestContext, poll_until};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

use super::{Session, WITHIN, text, until_response};

/// A proxy that cuts connections idle for `idle`; returns its address.
async fn idle_cutting_proxy(upstream: SocketAddr, idle: Duration) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut down, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut dr, mut dw) = down.split();
                let (mut ur, mut uw) = up.split();
                let mut b1 = vec![0u8; 16 << 10];
                let mut b2 = vec![0u8; 16 << 10];
                use tokio::io::AsyncReadExt as _;
                loop {
                    let step = tokio::time::timeout(idle, async {
                        tokio::select! {
                            n = dr.read(&mut b1) => match n {
                                Ok(n) if n > 0 => uw.write_all(&b1[..n]).await.is_ok(),
                                _ => false,
                            },
                            n = ur.read(&mut b2) => match n {
                                Ok(n) if n > 0 => dw.write_all(&b2[..n]).await.is_ok(),
                                _ => false,
                            },
                        }
                    })
                    .await;
                    if !matches!(step, Ok(true)) {
                        return; // idle too long, or closed: both sides are dropped
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// A synchronous call of a tool that asks, on 2025-06-18 (no tasks API) and on 2025-11-25
/// (issue 18: a task-only tool is `optional` there and runs synchronously too): the
/// question arrives on the call's stream from gateway A as a real `elicitation/create`
/// request, the client's response is POSTed to gateway B, and the stream ends with the
/// answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_synchronous_call_asks_on_its_stream_and_takes_the_answer_anywhere() -> Result<()> {
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (a, b) = (ctx.gateways[0].client(), ctx.gateways[1].client());
    for version in ["2025-06-18", "2025-11-25"] {
        // Without the elicitation capability the call is refused before any task exists.
        let plain = Session::start(&a, version, json!({})).await?;
        let r = plain
            .request(
                &a,
                1,
                "tools/call",
                json!({"name": "ask", "arguments": {"question": "?"}}),
            )
            .await?;
        assert_eq!(r.error_code(), Some(-32600), "{version}: {}", r.body);
        assert!(r.body["error"]["data"]["requiredCapabilities"]["elicitation"].is_object());

        let s = Session::start(&a, version, json!({"elicitation": {}})).await?;
        let r = s.request(&b, 1, "tools/list", json!({})).await?;
        let ask = r.body["result"]["tools"]
            .as_array()
            .and_then(|tools| tools.iter().find(|t| t["name"] == "ask"))
            .with_context(|| format!("no ask in {}", r.body))?;
        let want = if version == "2025-06-18" {
            Value::Null
        } else {
            json!("optional")
        };
        assert_eq!(ask["execution"]["taskSupport"], want, "{version}: {ask}");
        let mut stream = s
            .stream(
                &a,
                json!("call-1"),
                "tools/call",
                json!({"name": "ask", "arguments": {"question": "Which colour?"}}),
            )
            .await?;
        let ask = stream
            .next(WITHIN)
            .await
            .context("no elicitation request")?;
        assert_eq!(ask["method"], "elicitation/create", "{ask}");
        assert_eq!(ask["params"]["message"], "Which colour?");
        let ask_id = ask["id"].clone();
        assert!(ask_id.is_string(), "{ask}");
        // An answer of the wrong shape is refused and changes nothing.
        let r = s
            .post(
                &b,
                &json!({"jsonrpc": "2.0", "id": ask_id, "result": {"roots": []}}),
            )
            .await?;
        assert_eq!(r.status, 400, "{}", r.body);
        let r = s
            .post(
                &b,
                &json!({"jsonrpc": "2.0", "id": ask_id,
                "result": {"action": "accept", "content": {"answer": "blue"}}}),
            )
            .await?;
        assert_eq!(r.status, 202, "{}", r.body);
        let (_, response) = until_response(&mut stream, &json!("call-1"), WITHIN).await?;
        assert_eq!(text(&response), "answer: blue", "{version}: {response}");
    }
    ctx.cleanup().await;
    Ok(())
}

/// A client that leaves a synchronous call cancels its task; `notifications/cancelled` for
/// a call's request id, sent to another gateway, cancels it too.
#[tokio::test(flavor = "multi_thread")]
async fn leaving_or_cancelling_a_synchronous_call_cancels_its_task() -> Result<()> {
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (a, b) = (ctx.gateways[0].client(), ctx.gateways[1].client());
    let s = Session::start(&a, "2025-11-25", json!({})).await?;
    let call = json!({"name": "sleep", "arguments": {"ms": 60000, "steps": 60},
                      "_meta": {"progressToken": 1}});

    let mut stream = s.stream(&a, json!(1), "tools/call", call.clone()).await?;
    stream.next(WITHIN).await.context("no progress")?;
    // A synchronous call's task is not listed; Redis names it.
    let keys = ctx.redis.cli(&["--scan", "--pattern", "mcpt:task:*"])?;
    let task = keys
        .lines()
        .find_map(|k| {
            k.strip_prefix("mcpt:task:{")?
                .split_once('}')
                .map(|(id, _)| id.to_owned())
        })
        .context("no task key")?;
    let r = s
        .request(&b, 2, "tasks/get", json!({"taskId": task}))
        .await?;
    assert_eq!(r.body["result"]["status"], "working", "{}", r.body);
    drop(stream);
    poll_until(WITHIN, || async {
        let r = s
            .request(&b, 3, "tasks/get", json!({"taskId": task}))
            .await
            .ok()?;
        (r.body["result"]["status"] == "cancelled").then_some(())
    })
    .await
    .context("the abandoned call's task was not cancelled")?;

    let mut stream = s.stream(&a, json!("x-7"), "tools/call", call).await?;
    stream.next(WITHIN).await.context("no progress")?;
    let r = s
        .post(
            &b,
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "x-7", "reason": "user"}}),
        )
        .await?;
    assert_eq!(r.status, 202);
    let (_, response) = until_response(&mut stream, &json!("x-7"), WITHIN).await?;
    assert!(
        response["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cancelled")),
        "{response}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// A proxy that closes HTTP streams idle for 30 s does not cut a 60 s synchronous call: the
/// stream carries a keep-alive comment at least every 15 s.
#[tokio::test(flavor = "multi_thread")]
async fn keepalives_carry_a_60_s_call_through_a_30_s_idle_timeout_proxy() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    ctx.wait_for_tools().await?;
    let gateway = ctx.gateways[0].addr;
    let proxy = idle_cutting_proxy(gateway, Duration::from_secs(30)).await?;
    let client = Client::new(proxy);
    let s = Session::start(&client, "2025-06-18", json!({})).await?;
    let started = Instant::now();
    // No steps, no progress token: nothing but keep-alives for 60 s.
    let mut stream = s
        .stream(
            &client,
            json!(1),
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 60000}}),
        )
        .await?;
    let (_, response) = until_response(&mut stream, &json!(1), Duration::from_secs(90)).await?;
    assert_eq!(text(&response), "slept 60000 ms", "{response}");
    assert!(started.elapsed() >= Duration::from_secs(60));
    ctx.cleanup().await;
    Ok(())
}
