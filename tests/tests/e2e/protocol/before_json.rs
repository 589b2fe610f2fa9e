//! Checks before JSON (base-protocol.md §6.2): a non-JSON `Content-Type` (415), an
//! unacceptable `Accept` (406, also on listen), an oversized body (413), deeply nested JSON
//! and bodies that are not UTF-8 (-32700).
//!
//! Checklist ids cited: B-44.

use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use http_body_util::BodyExt as _;
use mcp_tasks_tests::{Gateway, Reply, TestContext, caps_none, caps_tasks, poll_until};
use serde_json::{Value, json};

use super::{
    assert_code_allowed, bytes, content_type, first_text, headers, long_task, ok_result,
    open_listen, request, rpc_error_without_id, set, task_keys,
};

/// B-44: a POST whose `Content-Type` is not JSON is 415 (JSON-RPC error body without id),
/// whatever the body; `application/json; charset=utf-8` is fine.
#[tokio::test]
async fn non_json_content_type_is_415() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let body = request(
        json!(1),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("text/event-stream"),
        None,
    ] {
        let h = set(headers("tools/call", Some("sleep")), "content-type", ct);
        let r = client.post_raw(&h, bytes(&body)).await?;
        assert_eq!(r.status, 415, "{ct:?}");
        rpc_error_without_id(&r, 415, -32600);
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    let discover = request(json!(2), "server/discover", json!({}), &caps_none());
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let h = set(headers("server/discover", None), "content-type", Some(ct));
        ok_result(&client.post_raw(&h, bytes(&discover)).await?);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-44: an `Accept` naming neither JSON nor SSE is 406; `*/*`, either type alone, or no
/// `Accept` at all are served.
#[tokio::test]
async fn unacceptable_accept_is_406() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let body = request(
        json!(1),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    for accept in ["text/html", "image/png, text/plain"] {
        let h = set(headers("tools/call", Some("sleep")), "accept", Some(accept));
        let r = client.post_raw(&h, bytes(&body)).await?;
        assert_eq!(
            r.status,
            406,
            "{accept}: {}",
            String::from_utf8_lossy(&r.raw)
        );
        if !r.body.is_null() {
            rpc_error_without_id(&r, 406, r.error_code().unwrap_or_default());
        }
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    let discover = request(json!(2), "server/discover", json!({}), &caps_none());
    for accept in [
        Some("*/*"),
        Some("application/json"),
        Some("text/event-stream"),
        Some("application/*"),
        None,
    ] {
        let h = set(headers("server/discover", None), "accept", accept);
        let r = client.post_raw(&h, bytes(&discover)).await?;
        ok_result(&r);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-44: `subscriptions/listen` whose `Accept` excludes SSE gets 406 and no stream.
#[tokio::test]
async fn listen_without_sse_in_accept_is_406_and_opens_no_stream() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let task = long_task(&client).await?;
    let res = tokio::time::timeout(
        Duration::from_secs(5),
        open_listen(
            &client,
            json!("l-json"),
            json!({"taskIds": [task]}),
            "application/json",
        ),
    )
    .await
    .context("listen without SSE in Accept did not answer at once")??;
    let status = res.status().as_u16();
    let ct = content_type(res.headers()).to_owned();
    let raw = tokio::time::timeout(Duration::from_secs(5), res.into_body().collect())
        .await
        .context("listen without SSE in Accept kept a stream open")??
        .to_bytes();
    assert_ne!(ct, "text/event-stream", "a stream was opened");
    assert_eq!(status, 406, "{}", String::from_utf8_lossy(&raw));
    client.cancel(&task).await?;
    ctx.cleanup().await;
    Ok(())
}

/// Listen without SSE in `Accept` at least never opens a stream and answers with an error
/// at once (the part of B-44 the server meets; the status is checked by the test above).
#[tokio::test]
async fn listen_without_sse_in_accept_opens_no_stream() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let res = tokio::time::timeout(
        Duration::from_secs(5),
        open_listen(&client, json!("l-json"), json!({}), "application/json"),
    )
    .await
    .context("listen without SSE in Accept did not answer at once")??;
    assert_ne!(content_type(res.headers()), "text/event-stream");
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let raw = tokio::time::timeout(Duration::from_secs(5), res.into_body().collect())
        .await
        .context("listen without SSE in Accept kept a stream open")??
        .to_bytes();
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let r = Reply {
        status,
        headers,
        raw,
        body,
    };
    assert!(r.error_code().is_some(), "no error: {}", r.body);
    assert_code_allowed(r.error_code().unwrap_or_default(), "listen accept");
    ctx.cleanup().await;
    Ok(())
}

/// A body over `MCPT_MAX_BODY_BYTES` is 413 with a JSON-RPC error body, creates nothing,
/// and a body under the limit is still served.
#[tokio::test]
async fn oversized_body_is_413_with_a_json_rpc_error() -> Result<()> {
    let mut ctx = TestContext::start(0, 1).await?;
    ctx.gateways.push(Gateway::start(
        &ctx.redis.url(),
        &[("MCPT_MAX_BODY_BYTES", "4096".to_owned())],
    )?);
    let client = ctx.client();
    let big = "x".repeat(8_000);
    let body = request(
        json!(1),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": big}}),
        &caps_tasks(),
    );
    let r = client
        .post_raw(&headers("tools/call", Some("echo")), bytes(&body))
        .await?;
    assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.raw));
    assert_eq!(content_type(&r.headers), "application/json");
    let e = rpc_error_without_id(&r, 413, r.error_code().unwrap_or_default());
    assert!(e["message"].as_str().unwrap_or("").contains("4096"), "{e}");
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    poll_until(Duration::from_secs(10), || async {
        let r = client
            .call("echo", json!({"text": "small"}), &caps_none())
            .await
            .ok()?;
        (first_text(&r.body["result"]) == "small").then_some(())
    })
    .await?;
    ctx.cleanup().await;
    Ok(())
}

/// Deeply nested JSON (10 000 `[`) is 400 / -32700, and the gateway answers afterwards.
#[tokio::test]
async fn deeply_nested_json_is_400_32700_and_the_gateway_survives() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let open = "[".repeat(10_000);
    let inside = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{{\"x\":{}{}}}}}",
        open,
        "]".repeat(10_000)
    );
    for body in [open.clone().into_bytes(), inside.into_bytes()] {
        let r = client
            .post_raw(&headers("server/discover", None), body)
            .await?;
        rpc_error_without_id(&r, 400, -32700);
    }
    let r = client
        .request("server/discover", json!({}), &caps_none())
        .await?;
    ok_result(&r);
    let res = client
        .send_raw("GET", "/healthz", &[], Bytes::new())
        .await?;
    assert_eq!(res.status().as_u16(), 200);
    ctx.cleanup().await;
    Ok(())
}

/// A body that is not UTF-8 is 400 / -32700 without id.
#[tokio::test]
async fn invalid_utf8_body_is_400_32700() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let mut body = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/".to_vec();
    body.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    body.extend_from_slice(b"\",\"params\":{}}");
    let r = client
        .post_raw(&headers("server/discover", None), body)
        .await?;
    rpc_error_without_id(&r, 400, -32700);
    let r = client
        .post_raw(
            &headers("server/discover", None),
            vec![0xef, 0xbb, 0xbf, b'{', 0x80],
        )
        .await?;
    rpc_error_without_id(&r, 400, -32700);
    ctx.cleanup().await;
    Ok(())
}
