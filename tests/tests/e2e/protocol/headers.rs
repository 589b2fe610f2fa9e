//! The routing headers (base-protocol.md §7): `MCP-Protocol-Version`, `Mcp-Method` and
//! `Mcp-Name` missing or differing from the body (-32020), case-insensitive header names,
//! and the `=?base64?…?=` sentinel.
//!
//! Checklist ids cited: B-18, B-20, B-21, B-22.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use mcp_tasks_tests::{TestContext, VERSION, caps_none, caps_tasks};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{
    PROTOCOL_VERSION_KEY, bytes, headers, long_task, ok_result, raw_post, request, rpc_error_for,
    set, task_keys,
};

/// An HTTP response read from a raw socket.
struct RawReply {
    status: u16,
    head: String,
    body: Value,
}

/// Send `request` byte for byte on a fresh connection and read the reply to EOF (the
/// request must say `Connection: close`). Used where the exact bytes on the wire matter,
/// e.g. the case of header names, which hyper would lowercase.
async fn raw_http(addr: SocketAddr, request: &[u8]) -> Result<RawReply> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(request).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buf))
        .await
        .context("raw reply did not end within 10 s")??;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no header end in {:?}", String::from_utf8_lossy(&buf)))?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status in {head:?}"))?;
    let body = serde_json::from_slice(&buf[split + 4..]).unwrap_or(Value::Null);
    Ok(RawReply { status, head, body })
}

/// B-18: `MCP-Protocol-Version` missing, or different from the body's version, is 400 /
/// -32020 with the request id, and changes nothing.
#[tokio::test]
async fn protocol_version_header_missing_or_different_is_400_32020() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let call = request(
        json!("pv"),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    for value in [None, Some("2025-11-25"), Some("v999.0.0"), Some("")] {
        let h = set(
            headers("tools/call", Some("sleep")),
            "mcp-protocol-version",
            value,
        );
        let r = client.post_raw(&h, bytes(&call)).await?;
        rpc_error_for(&r, &json!("pv"), 400, -32020);
    }
    // Header 2026-07-28 but body v999.0.0: a mismatch, not an unsupported version.
    let mut body = request(json!("pv2"), "server/discover", json!({}), &caps_none());
    body["params"]["_meta"][PROTOCOL_VERSION_KEY] = json!("v999.0.0");
    let r = client
        .post_raw(&headers("server/discover", None), bytes(&body))
        .await?;
    rpc_error_for(&r, &json!("pv2"), 400, -32020);
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}

/// B-20: `Mcp-Method` missing, different, or differing only in case is 400 / -32020 with the
/// request id, and changes nothing.
#[tokio::test]
async fn mcp_method_header_missing_different_or_case_different_is_400_32020() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let list = request(json!("m"), "tools/list", json!({}), &caps_none());
    for value in [
        None,
        Some("tools/call"),
        Some("TOOLS/LIST"),
        Some("tools/list/"),
    ] {
        let h = set(headers("tools/list", None), "mcp-method", value);
        let r = client.post_raw(&h, bytes(&list)).await?;
        rpc_error_for(&r, &json!("m"), 400, -32020);
    }
    let call = request(
        json!("c"),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    for value in [None, Some("tools/list"), Some("Tools/Call")] {
        let h = set(headers("tools/call", Some("sleep")), "mcp-method", value);
        let r = client.post_raw(&h, bytes(&call)).await?;
        rpc_error_for(&r, &json!("c"), 400, -32020);
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}

/// B-20, B-22: header names are compared case-insensitively — `mcp-method`, `MCP-METHOD`
/// and `Mcp-Name` in any case are accepted (sent byte for byte, as hyper would lowercase).
#[tokio::test]
async fn header_names_are_case_insensitive() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let addr = ctx.gateways[0].addr;
    let list = bytes(&request(json!(1), "tools/list", json!({}), &caps_none()));
    for (version, method) in [
        ("mcp-protocol-version", "mcp-method"),
        ("MCP-PROTOCOL-VERSION", "MCP-METHOD"),
        ("Mcp-Protocol-Version", "mCp-MeThOd"),
    ] {
        let r = raw_http(
            addr,
            &raw_post(
                addr,
                &[
                    "Content-Type: application/json",
                    "Accept: application/json, text/event-stream",
                    &format!("{version}: {VERSION}"),
                    &format!("{method}: tools/list"),
                ],
                &list,
            ),
        )
        .await?;
        assert_eq!(r.status, 200, "{method}: {}\n{}", r.head, r.body);
        assert!(r.body["result"]["tools"].is_array(), "{method}: {}", r.body);
    }
    let call = bytes(&request(
        json!(2),
        "tools/call",
        json!({"name": "greet", "arguments": {}}),
        &caps_none(),
    ));
    for name in ["mcp-name", "MCP-NAME", "Mcp-Name"] {
        let r = raw_http(
            addr,
            &raw_post(
                addr,
                &[
                    "Content-Type: application/json",
                    "Accept: application/json, text/event-stream",
                    &format!("MCP-Protocol-Version: {VERSION}"),
                    "MCP-Method: tools/call",
                    &format!("{name}: greet"),
                ],
                &call,
            ),
        )
        .await?;
        assert_eq!(r.status, 200, "{name}: {}\n{}", r.head, r.body);
        assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-21, B-22: `Mcp-Name` missing, different or differing in case is 400 / -32020 for
/// `tools/call` and `tasks/get`, and changes nothing.
#[tokio::test]
async fn mcp_name_missing_or_mismatched_is_400_32020() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let call = request(
        json!("n"),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    for value in [None, Some("greet"), Some("SLEEP"), Some("sleep2"), Some("")] {
        let h = set(headers("tools/call", Some("sleep")), "mcp-name", value);
        let r = client.post_raw(&h, bytes(&call)).await?;
        rpc_error_for(&r, &json!("n"), 400, -32020);
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    // The first listed tool, called like the conformance suite does.
    let greet = request(
        json!("g"),
        "tools/call",
        json!({"name": "greet", "arguments": {}}),
        &caps_none(),
    );
    for value in [None, Some("wrong-name")] {
        let h = set(headers("tools/call", Some("greet")), "mcp-name", value);
        let r = client.post_raw(&h, bytes(&greet)).await?;
        rpc_error_for(&r, &json!("g"), 400, -32020);
    }
    // tasks/* compare Mcp-Name with params.taskId.
    let task = long_task(&client).await?;
    for method in ["tasks/get", "tasks/cancel"] {
        let body = request(json!("t"), method, json!({"taskId": task}), &caps_tasks());
        for value in [None, Some("tsk_other"), Some(&task[..task.len() - 1])] {
            let h = set(headers(method, Some(&task)), "mcp-name", value);
            let r = client.post_raw(&h, bytes(&body)).await?;
            rpc_error_for(&r, &json!("t"), 400, -32020);
        }
    }
    // None of these cancelled the task.
    assert_eq!(client.get(&task).await?["status"], "working");
    client.cancel(&task).await?;
    ctx.cleanup().await;
    Ok(())
}

/// B-21: an `Mcp-Name` with surrounding spaces is accepted (the suite's
/// `http-header-validation` calls the first listed tool this way).
#[tokio::test]
async fn mcp_name_with_surrounding_spaces_is_accepted() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .request("tools/list", json!({}), &caps_none())
        .await?;
    let first = ok_result(&r)["tools"][0]["name"]
        .as_str()
        .context("a first tool")?
        .to_owned();
    assert_eq!(first, "greet");
    let padded = format!("  {first}  ");
    let body = request(
        json!(1),
        "tools/call",
        json!({"name": first, "arguments": {}}),
        &caps_none(),
    );
    let h = set(headers("tools/call", None), "mcp-name", Some(&padded));
    let r = client.post_raw(&h, bytes(&body)).await?;
    assert!(r.status < 400, "{}", String::from_utf8_lossy(&r.raw));
    assert_eq!(ok_result(&r)["resultType"], "complete");
    ctx.cleanup().await;
    Ok(())
}

/// B-22: a `=?base64?…?=` value is decoded before the comparison: it is accepted when it
/// decodes to the name, refused when it decodes to something else.
#[tokio::test]
async fn base64_sentinel_names_are_decoded() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let body = request(
        json!(1),
        "tools/call",
        json!({"name": "greet", "arguments": {}}),
        &caps_none(),
    );
    // base64("greet") = Z3JlZXQ=
    let h = set(
        headers("tools/call", None),
        "mcp-name",
        Some("=?base64?Z3JlZXQ=?="),
    );
    let r = client.post_raw(&h, bytes(&body)).await?;
    assert_eq!(ok_result(&r)["resultType"], "complete", "{}", r.body);
    // base64("sleep") = c2xlZXA=
    let h = set(
        headers("tools/call", None),
        "mcp-name",
        Some("=?base64?c2xlZXA=?="),
    );
    let r = client.post_raw(&h, bytes(&body)).await?;
    rpc_error_for(&r, &json!(1), 400, -32020);
    // The method header too: base64("tools/call") = dG9vbHMvY2FsbA==
    let h = set(
        headers("tools/call", Some("greet")),
        "mcp-method",
        Some("=?base64?dG9vbHMvY2FsbA==?="),
    );
    let r = client.post_raw(&h, bytes(&body)).await?;
    assert_eq!(ok_result(&r)["resultType"], "complete", "{}", r.body);
    ctx.cleanup().await;
    Ok(())
}

/// B-22: a malformed sentinel (bad padding, bad characters, not UTF-8 inside) is 400 /
/// -32020, and changes nothing.
#[tokio::test]
async fn malformed_base64_sentinel_is_400_32020() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let body = request(
        json!("b"),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    for value in [
        "=?base64?c2xlZXA?=",
        "=?base64?c2xl!!ZXA=?=",
        "=?base64?/w==?=",
        "=?base64??=x",
    ] {
        let h = set(headers("tools/call", None), "mcp-name", Some(value));
        let r = client.post_raw(&h, bytes(&body)).await?;
        rpc_error_for(&r, &json!("b"), 400, -32020);
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}
