//! The HTTP transport (base-protocol.md §6): GET/DELETE on the endpoint, no sessions,
//! notifications answered 202, JSON or SSE answers, listen streams without proxy buffering,
//! a dropped synchronous call cancelling its task, and the `Origin`/`Host` checks.
//!
//! Checklist ids cited: B-11, B-12, B-13, B-14, B-15, B-16, B-17.

use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use http_body_util::BodyExt as _;
use mcp_tasks_tests::{Gateway, TestContext, VERSION, caps_none, caps_tasks, meta, poll_until};
use serde_json::json;
use tokio::io::AsyncWriteExt as _;

use super::{
    Events, bytes, content_type, headers, long_task, ok_result, open_listen, raw_post, request,
    rpc_error_without_id, set, task_keys,
};

/// `mcpt:task:{ID}:OWNER` → `ID`.
fn task_id_of_key(key: &str) -> Option<&str> {
    key.strip_prefix("mcpt:task:{")?
        .split_once('}')
        .map(|(id, _)| id)
}

/// B-11: GET and DELETE on the MCP endpoint are 405 (with `Allow: POST`); other paths 404;
/// `/healthz` answers.
#[tokio::test]
async fn get_and_delete_on_the_endpoint_are_405() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for method in ["GET", "DELETE", "PUT", "PATCH"] {
        let res = client
            .send_raw(
                method,
                "/mcp",
                &[("accept", "application/json, text/event-stream")],
                Bytes::new(),
            )
            .await?;
        assert_eq!(res.status().as_u16(), 405, "{method} /mcp");
        let allow = res
            .headers()
            .get("allow")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(allow.contains("POST"), "{method}: Allow {allow:?}");
        let _ = res.into_body().collect().await;
    }
    let res = client
        .send_raw(
            "POST",
            "/other",
            &headers("server/discover", None),
            Bytes::new(),
        )
        .await?;
    assert_eq!(res.status().as_u16(), 404);
    let res = client
        .send_raw("GET", "/healthz", &[], Bytes::new())
        .await?;
    assert_eq!(res.status().as_u16(), 200);
    ctx.cleanup().await;
    Ok(())
}

/// B-12: no `Mcp-Session-Id` is issued; requests carrying `Mcp-Session-Id` or
/// `Last-Event-ID` are served as usual; SSE events carry no `id:` field.
#[tokio::test]
async fn session_ids_are_neither_issued_nor_required() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let body = request(json!(1), "server/discover", json!({}), &caps_none());
    let r = client
        .post_raw(&headers("server/discover", None), bytes(&body))
        .await?;
    ok_result(&r);
    assert!(r.headers.get("mcp-session-id").is_none(), "{:?}", r.headers);
    let h = set(
        set(
            headers("tools/call", Some("greet")),
            "mcp-session-id",
            Some("sess-123"),
        ),
        "last-event-id",
        Some("evt-9"),
    );
    let body = request(
        json!(2),
        "tools/call",
        json!({"name": "greet", "arguments": {}}),
        &caps_none(),
    );
    let r = client.post_raw(&h, bytes(&body)).await?;
    let result = ok_result(&r);
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(r.headers.get("mcp-session-id").is_none(), "{:?}", r.headers);
    // SSE: the listen stream's events have no `id:` line, and no session header.
    let task = long_task(&client).await?;
    let res = open_listen(
        &client,
        json!("s-1"),
        json!({"taskIds": [task]}),
        "application/json, text/event-stream",
    )
    .await?;
    assert_eq!(content_type(res.headers()), "text/event-stream");
    assert!(res.headers().get("mcp-session-id").is_none());
    let mut events = Events {
        body: res.into_body(),
        buf: Vec::new(),
    };
    for _ in 0..2 {
        let (_, raw) = events
            .next_message(Duration::from_secs(5))
            .await
            .context("listen stream sent nothing")?;
        assert!(
            !raw.lines().any(|l| l.starts_with("id:") || l == "id"),
            "B-12: SSE event with an id: {raw:?}"
        );
    }
    client.cancel(&task).await?;
    ctx.cleanup().await;
    Ok(())
}

/// B-13: a notification POST is answered 202 with an empty body, needs no routing headers,
/// and has no effect.
#[tokio::test]
async fn notifications_are_accepted_with_202_and_empty_body() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let plain = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    for (method, params) in [
        ("notifications/initialized", json!({})),
        (
            "notifications/cancelled",
            json!({"requestId": 1, "_meta": meta(&caps_none())}),
        ),
        ("notifications/whatever", json!({"x": 1})),
    ] {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let r = client.post_raw(&plain, bytes(&body)).await?;
        assert_eq!(
            r.status,
            202,
            "{method}: {}",
            String::from_utf8_lossy(&r.raw)
        );
        assert!(r.raw.is_empty(), "{method}: body {:?}", r.raw);
        // With the standard headers too.
        let r = client
            .post_raw(&headers(method, None), bytes(&body))
            .await?;
        assert_eq!(r.status, 202, "{method}");
        assert!(r.raw.is_empty());
    }
    // A notification shaped like a tools/call does not run anything.
    let body = json!({"jsonrpc": "2.0", "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 10}, "_meta": meta(&caps_tasks())}});
    let r = client
        .post_raw(&headers("tools/call", Some("sleep")), bytes(&body))
        .await?;
    assert_eq!(r.status, 202);
    assert!(r.raw.is_empty());
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}

/// B-14: request POSTs are answered `application/json` or `text/event-stream`, errors
/// included.
#[tokio::test]
async fn request_posts_are_answered_with_json_or_sse() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let replies = [
        client
            .request("server/discover", json!({}), &caps_none())
            .await?,
        client
            .request("tools/list", json!({}), &caps_none())
            .await?,
        client.call("greet", json!({}), &caps_none()).await?,
        client
            .call("sleep", json!({"ms": 1}), &caps_tasks())
            .await?,
        client.call("nope", json!({}), &caps_none()).await?,
        client
            .request("tasks/get", json!({"taskId": "tsk_x"}), &caps_tasks())
            .await?,
        client.request("ping", json!({}), &caps_none()).await?,
    ];
    for r in &replies {
        let ct = content_type(&r.headers);
        assert!(
            ct.starts_with("application/json") || ct.starts_with("text/event-stream"),
            "B-14: content-type {ct:?} for {}",
            r.body
        );
        assert!(
            r.body["method"].is_null(),
            "B-14: the server sent a request: {}",
            r.body
        );
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-15: the listen SSE response says `X-Accel-Buffering: no` (and PRJ `Cache-Control:
/// no-cache, no-transform`). The 15 s keep-alive is not waited for here.
#[tokio::test]
async fn listen_response_disables_proxy_buffering() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let res = open_listen(
        &client,
        json!("buf-1"),
        json!({}),
        "application/json, text/event-stream",
    )
    .await?;
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(content_type(res.headers()), "text/event-stream");
    let h = |n: &str| {
        res.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(h("x-accel-buffering").as_deref(), Some("no"));
    let cache = h("cache-control").unwrap_or_default();
    assert!(
        cache.contains("no-cache") && cache.contains("no-transform"),
        "{cache:?}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// B-16: a client that drops a synchronous `tools/call` mid-wait cancels that request: the
/// task behind the call (found in Redis, it is the only one) ends `cancelled`, well before
/// the tool would have finished, and the gateway keeps serving.
#[tokio::test]
async fn dropping_a_synchronous_call_cancels_its_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let addr = ctx.gateways[0].addr;
    let body = bytes(&request(
        json!(1),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 60_000}}),
        &caps_none(),
    ));
    let wire = raw_post(
        addr,
        &[
            "Content-Type: application/json",
            "Accept: application/json, text/event-stream",
            &format!("MCP-Protocol-Version: {VERSION}"),
            "Mcp-Method: tools/call",
            "Mcp-Name: sleep",
        ],
        &body,
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(&wire).await?;
    let key = poll_until(Duration::from_secs(5), || async {
        task_keys(&ctx).ok()?.into_iter().next()
    })
    .await
    .context("the synchronous call created no task")?;
    let task = task_id_of_key(&key).context("task key")?.to_owned();
    let client = ctx.client();
    assert_eq!(client.get(&task).await?["status"], "working");
    drop(stream);
    let t = client
        .wait_status(&task, "cancelled", Duration::from_secs(5))
        .await?;
    assert_eq!(t["status"], "cancelled");
    let res = client
        .send_raw("GET", "/healthz", &[], Bytes::new())
        .await?;
    assert_eq!(res.status().as_u16(), 200);
    let r = client.call("greet", json!({}), &caps_none()).await?;
    assert_eq!(ok_result(&r)["resultType"], "complete");
    ctx.cleanup().await;
    Ok(())
}

/// B-17: a foreign `Origin` is 403 (error body without id) and changes nothing; loopback
/// origins are served.
#[tokio::test]
async fn foreign_origin_is_403_and_loopback_origin_is_served() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let port = ctx.gateways[0].addr.port();
    let body = request(
        json!(1),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    for origin in [
        "http://evil.example.com",
        "https://evil.example.com",
        "http://localhost.evil.com",
        "null",
    ] {
        let h = set(headers("tools/call", Some("sleep")), "origin", Some(origin));
        let r = client.post_raw(&h, bytes(&body)).await?;
        assert_eq!(
            r.status,
            403,
            "{origin}: {}",
            String::from_utf8_lossy(&r.raw)
        );
        if !r.body.is_null() {
            rpc_error_without_id(&r, 403, r.error_code().unwrap_or_default());
        }
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    let discover = request(json!(2), "server/discover", json!({}), &caps_none());
    for origin in [
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
        "http://localhost".to_owned(),
    ] {
        let h = set(headers("server/discover", None), "origin", Some(&origin));
        let r = client.post_raw(&h, bytes(&discover)).await?;
        ok_result(&r);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-17: an origin listed in `MCPT_ALLOWED_ORIGINS` is served; others still are not.
#[tokio::test]
async fn listed_origin_is_served() -> Result<()> {
    let mut ctx = TestContext::start(0, 0).await?;
    ctx.gateways.push(Gateway::start(
        &ctx.redis.url(),
        &[("MCPT_ALLOWED_ORIGINS", "https://app.example.com".to_owned())],
    )?);
    let client = ctx.client();
    let body = request(json!(1), "server/discover", json!({}), &caps_none());
    let h = set(
        headers("server/discover", None),
        "origin",
        Some("https://app.example.com"),
    );
    ok_result(&client.post_raw(&h, bytes(&body)).await?);
    let h = set(
        headers("server/discover", None),
        "origin",
        Some("https://other.example.com"),
    );
    assert_eq!(client.post_raw(&h, bytes(&body)).await?.status, 403);
    ctx.cleanup().await;
    Ok(())
}

/// B-17 (DNS rebinding): a gateway bound to loopback refuses a foreign `Host` with a 4xx,
/// with or without a foreign `Origin`, and serves its own loopback host names; over
/// HTTP/2 the same holds for `:authority` (issue 20, item 7).
#[tokio::test]
async fn foreign_host_on_a_loopback_gateway_is_rejected() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let port = ctx.gateways[0].addr.port();
    let body = request(json!(1), "server/discover", json!({}), &caps_none());
    for (host, origin) in [
        ("evil.example.com", Some("http://evil.example.com")),
        ("evil.example.com", None),
        ("evil.example.com:80", None),
    ] {
        let mut h = set(headers("server/discover", None), "host", Some(host));
        if let Some(o) = origin {
            h.push(("origin", o));
        }
        let r = client.post_raw(&h, bytes(&body)).await?;
        assert!(
            (400..500).contains(&r.status),
            "Host {host}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.raw)
        );
    }
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let h = set(headers("server/discover", None), "host", Some(&host));
        ok_result(&client.post_raw(&h, bytes(&body)).await?);
    }
    // HTTP/2 names the host in `:authority` (no `Host` header): checked the same way.
    let stream = tokio::net::TcpStream::connect(ctx.gateways[0].addr).await?;
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await?;
    tokio::spawn(conn);
    for (authority, allowed) in [
        ("evil.example.com".to_owned(), false),
        (format!("evil.example.com:{port}"), false),
        (format!("127.0.0.1:{port}"), true),
    ] {
        let mut req = hyper::Request::post(format!("http://{authority}/mcp"));
        for (k, v) in headers("server/discover", None) {
            if !k.eq_ignore_ascii_case("host") {
                req = req.header(k, v);
            }
        }
        let req = req.body(http_body_util::Full::new(Bytes::from(bytes(&body))))?;
        h2.ready().await?;
        let res = h2.send_request(req).await?;
        let status = res.status().as_u16();
        let raw = res.into_body().collect().await?.to_bytes();
        if allowed {
            assert_eq!(status, 200, ":authority {authority}: {raw:?}");
        } else {
            assert_eq!(status, 403, ":authority {authority}: {raw:?}");
        }
    }
    ctx.cleanup().await;
    Ok(())
}
