//! The base protocol over HTTP (base-protocol.md §2–§8, §12, §14–§16): framing and ids,
//! `_meta`, versions, the routing headers, the transport checks before JSON, tools, removed
//! methods, listen streams and the error codes. One test per behaviour; each `///` names the
//! checklist ids it covers. Task lifecycles are in `lifecycle.rs`, listen details in
//! `listen.rs`, process behaviour in `processes.rs`.
//!
//! Every JSON-RPC error this file receives goes through [`rpc_error`], which also checks B-43
//! (no undefined code in the MCP-reserved range), so B-43 is asserted on every error here.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use mcp_tasks_tests::{
    Client, Gateway, Reply, TASKS, TestContext, VERSION, caps_none, caps_tasks, meta, poll_until,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";

// ---------------------------------------------------------------------------------------
// Private helpers
// ---------------------------------------------------------------------------------------

/// A JSON-RPC request body with `_meta` for `caps`.
fn request(id: Value, method: &str, mut params: Value, caps: &Value) -> Value {
    params["_meta"] = meta(caps);
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("serialisable")
}

/// The standard headers for `method`, as owned-free pairs that can be edited.
fn headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    Client::headers(method, name)
}

/// `h` with header `name` replaced by `value` (or removed when `None`).
fn set<'a>(
    mut h: Vec<(&'a str, &'a str)>,
    name: &'a str,
    value: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    h.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
    if let Some(v) = value {
        h.push((name, v));
    }
    h
}

/// B-43: no code from the MCP-reserved range other than the three defined ones, none of
/// the retired codes, and (SHOULD NOT, §16.3) nothing from the legacy -32000…-32019 range.
fn assert_code_allowed(code: i64, context: &str) {
    assert!(
        !(-32099..=-32020).contains(&code) || [-32020, -32021, -32022].contains(&code),
        "B-43: undefined code {code} from the reserved range ({context})"
    );
    assert!(
        ![-32002, -32003, -32042, -32001, -32004].contains(&code),
        "B-43: retired code {code} ({context})"
    );
    assert!(
        !(-32019..=-32000).contains(&code),
        "§16.3: code {code} from the legacy implementation range ({context})"
    );
}

/// Assert `r` is a JSON-RPC error with exactly `status` and `code`, well formed (B-05) and
/// allowed (B-43); return the error object.
fn rpc_error(r: &Reply, status: u16, code: i64) -> Value {
    let context = format!("{} {}", r.status, String::from_utf8_lossy(&r.raw));
    assert_eq!(r.body["jsonrpc"], "2.0", "B-02: {context}");
    let error = &r.body["error"];
    assert!(error.is_object(), "expected an error object: {context}");
    assert!(error["code"].is_i64(), "B-05 integer code: {context}");
    assert!(
        error["message"].is_string(),
        "B-05 string message: {context}"
    );
    assert!(
        r.body.get("result").is_none(),
        "error and result: {context}"
    );
    assert_code_allowed(error["code"].as_i64().unwrap_or_default(), &context);
    assert_eq!(
        (r.status, error["code"].as_i64()),
        (status, Some(code)),
        "status and code: {context}"
    );
    error.clone()
}

/// Assert `r` is a JSON-RPC error for request `id` (echoed unchanged, B-02, B-05).
fn rpc_error_for(r: &Reply, id: &Value, status: u16, code: i64) -> Value {
    let e = rpc_error(r, status, code);
    assert_eq!(&r.body["id"], id, "B-02/B-05: id echoed: {}", r.body);
    e
}

/// Assert `r` is a JSON-RPC error without an id (unreadable request, B-03, B-05).
fn rpc_error_without_id(r: &Reply, status: u16, code: i64) -> Value {
    let e = rpc_error(r, status, code);
    assert!(
        r.body.get("id").is_none_or(Value::is_null),
        "B-05: no id when it was unreadable: {}",
        r.body
    );
    e
}

/// Assert `r` is a successful result (HTTP 200, JSON); return the result.
fn ok_result(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.raw));
    if let Some(code) = r.error_code() {
        assert_code_allowed(code, &r.body.to_string());
        panic!("expected a result, got {}", r.body);
    }
    let result = &r.body["result"];
    assert!(result.is_object(), "expected a result object: {}", r.body);
    result.clone()
}

/// The task hash keys in Redis, sorted.
fn task_keys(ctx: &TestContext) -> Result<Vec<String>> {
    let out = ctx.redis.cli(&["--scan", "--pattern", "mcpt:task:*"])?;
    let mut keys: Vec<String> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    keys.sort();
    Ok(keys)
}

/// `mcpt:task:{ID}:OWNER` → `ID`.
fn task_id_of_key(key: &str) -> Option<&str> {
    key.strip_prefix("mcpt:task:{")?
        .split_once('}')
        .map(|(id, _)| id)
}

/// The first text block of a `CallToolResult`.
fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

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

/// A POST to `/mcp` with `headers` given as literal header lines (`Name: value`).
fn raw_post(addr: SocketAddr, header_lines: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for line in header_lines {
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// An SSE response body read event by event, keeping the raw event text.
struct Events {
    body: Incoming,
    buf: Vec<u8>,
}

impl Events {
    /// The next raw event (comments included), or `None` on end or timeout.
    async fn next_raw(&mut self, within: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..pos + 2).collect();
                return Some(String::from_utf8_lossy(&event).into_owned());
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }

    /// The next JSON-RPC message with its raw event text (comments skipped).
    async fn next_message(&mut self, within: Duration) -> Option<(Value, String)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let raw = self.next_raw(left).await?;
            let data: Vec<&str> = raw
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() {
                continue;
            }
            let value = serde_json::from_str(&data.join("\n")).ok()?;
            return Some((value, raw));
        }
    }
}

/// POST a `subscriptions/listen` with request id `id`, `filter` and `Accept: accept`.
async fn open_listen(
    client: &Client,
    id: Value,
    filter: Value,
    accept: &str,
) -> Result<hyper::Response<Incoming>> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {"notifications": filter, "_meta": meta(&caps_tasks())}
    });
    let h = set(
        headers("subscriptions/listen", None),
        "accept",
        Some(accept),
    );
    client
        .send_raw("POST", "/mcp", &h, Bytes::from(bytes(&body)))
        .await
}

fn content_type(h: &hyper::HeaderMap) -> &str {
    h.get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Start a task that runs long enough for the test (`sleep`), returning its id.
async fn long_task(client: &Client) -> Result<String> {
    client.start_task("sleep", json!({"ms": 30_000})).await
}

// ---------------------------------------------------------------------------------------
// Versions and server/discover
// ---------------------------------------------------------------------------------------

/// B-01, B-04, B-09, B-10, B-26: `server/discover` lists exactly `2026-07-28`, declares
/// tools and the Tasks extension, carries `ttlMs`, `cacheScope` and `serverInfo`.
#[tokio::test]
async fn discover_lists_exactly_the_served_version_and_required_fields() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let r = ctx
        .client()
        .request("server/discover", json!({}), &caps_none())
        .await?;
    let result = ok_result(&r);
    assert_eq!(content_type(&r.headers), "application/json");
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!([VERSION]));
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    assert_eq!(result["capabilities"]["extensions"][TASKS], json!({}));
    assert!(result["ttlMs"].as_u64().is_some(), "ttlMs ≥ 0: {result}");
    assert!(
        ["public", "private"].contains(&result["cacheScope"].as_str().unwrap_or("")),
        "{result}"
    );
    let info = &result["_meta"][SERVER_INFO];
    assert!(
        info["name"].is_string() && info["version"].is_string(),
        "{result}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// B-19, B-01: an unsupported version (unknown, or the 2025 one) in header and `_meta` is
/// 400 / -32022 with `data.supported` ⊆ discover's list and `data.requested`.
#[tokio::test]
async fn unsupported_version_is_400_32022_naming_supported_and_requested() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for version in ["v999.0.0", "2025-11-25", "2025-06-18"] {
        let mut body = request(json!("v-1"), "server/discover", json!({}), &caps_none());
        body["params"]["_meta"][PROTOCOL_VERSION_KEY] = json!(version);
        let h = set(
            headers("server/discover", None),
            "mcp-protocol-version",
            Some(version),
        );
        let r = client.post_raw(&h, bytes(&body)).await?;
        let e = rpc_error_for(&r, &json!("v-1"), 400, -32022);
        assert_eq!(e["data"]["supported"], json!([VERSION]), "{e}");
        assert_eq!(e["data"]["requested"], version, "{e}");
    }
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// JSON-RPC framing
// ---------------------------------------------------------------------------------------

/// B-02: string and integer ids come back with the same JSON type and value, on results
/// and on errors; every response says `"jsonrpc": "2.0"`.
#[tokio::test]
async fn ids_are_echoed_with_their_json_type() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let ids = [
        json!("discover-1"),
        json!("42"),
        json!(""),
        json!(42),
        json!(0),
        json!(-7),
        json!(9_007_199_254_740_993_i64),
    ];
    for id in &ids {
        let body = request(id.clone(), "server/discover", json!({}), &caps_none());
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        ok_result(&r);
        assert_eq!(r.body["jsonrpc"], "2.0");
        assert_eq!(&r.body["id"], id, "result id: {}", r.body);
        // Compare the bytes too: 42 must not come back as "42" or 42.0.
        let raw = String::from_utf8_lossy(&r.raw);
        assert!(
            raw.contains(&format!("\"id\":{id}")),
            "id {id} not echoed verbatim: {raw}"
        );
        // And on an error answer (unknown method).
        let body = request(id.clone(), "nope/nothing", json!({}), &caps_none());
        let r = client
            .post_raw(&headers("nope/nothing", None), bytes(&body))
            .await?;
        rpc_error_for(&r, id, 404, -32601);
        assert!(
            String::from_utf8_lossy(&r.raw).contains(&format!("\"id\":{id}")),
            "error id {id} not echoed verbatim: {}",
            String::from_utf8_lossy(&r.raw)
        );
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-02, B-03, B-05: `id: null` and ids that are neither strings nor integers are 400 /
/// -32600, answered without an id.
#[tokio::test]
async fn null_and_non_scalar_ids_are_invalid_requests() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for id in [
        json!(null),
        json!(1.5),
        json!(true),
        json!({"a": 1}),
        json!([1]),
    ] {
        let body = request(id.clone(), "server/discover", json!({}), &caps_none());
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        rpc_error_without_id(&r, 400, -32600);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-03: a batch (a JSON array) is 400 / -32600 without an id, and none of its requests runs.
#[tokio::test]
async fn batches_are_rejected_with_400_32600() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let call = request(
        json!(1),
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 10}}),
        &caps_tasks(),
    );
    let discover = request(json!(2), "server/discover", json!({}), &caps_none());
    for batch in [json!([call.clone(), discover]), json!([call]), json!([])] {
        let r = client
            .post_raw(&headers("tools/call", Some("sleep")), bytes(&batch))
            .await?;
        rpc_error_without_id(&r, 400, -32600);
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new(), "a batch ran a call");
    ctx.cleanup().await;
    Ok(())
}

/// B-03: a POSTed JSON-RPC response (result or error) is 400 / -32600; its id is readable
/// and echoed (B-05).
#[tokio::test]
async fn posted_responses_are_rejected_with_400_32600() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let result = json!({"jsonrpc": "2.0", "id": 5, "result": {"resultType": "complete"}});
    let error = json!({"jsonrpc": "2.0", "id": "e", "error": {"code": -32603, "message": "x"}});
    for (body, id) in [(result, json!(5)), (error, json!("e"))] {
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        rpc_error_for(&r, &id, 400, -32600);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-03, B-05: a body that is not JSON is 400 / -32700 with no id.
#[tokio::test]
async fn unparseable_body_is_400_32700_without_id() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for body in [
        &b"{"[..],
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\"",
        b"not json",
        b"",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,}",
    ] {
        let r = client
            .post_raw(&headers("server/discover", None), body.to_vec())
            .await?;
        rpc_error_without_id(&r, 400, -32700);
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-02, B-03, B-05: a request whose `jsonrpc` is missing or not `"2.0"` is 400 / -32600,
/// with its (readable) id echoed.
#[tokio::test]
async fn wrong_or_missing_jsonrpc_member_is_400_32600() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    for jsonrpc in [Some(json!("1.0")), Some(json!(2.0)), Some(json!("2")), None] {
        let mut body = request(json!(3), "server/discover", json!({}), &caps_none());
        match jsonrpc {
            Some(v) => body["jsonrpc"] = v,
            None => {
                body.as_object_mut().map(|o| o.remove("jsonrpc"));
            }
        }
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        rpc_error_for(&r, &json!(3), 400, -32600);
    }
    // A method that is not a string is not a request either.
    let body =
        json!({"jsonrpc": "2.0", "id": 4, "method": 7, "params": {"_meta": meta(&caps_none())}});
    let r = client
        .post_raw(&headers("server/discover", None), bytes(&body))
        .await?;
    rpc_error_for(&r, &json!(4), 400, -32600);
    ctx.cleanup().await;
    Ok(())
}

/// B-04, B-09: every result this server sends has `resultType` and `serverInfo` — lists,
/// the task handle, `tasks/get` and the `tasks/cancel` ack.
#[tokio::test]
async fn results_carry_result_type_and_server_info() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let check = |r: &Reply, kind: &str, what: &str| {
        let result = ok_result(r);
        assert_eq!(result["resultType"], kind, "B-04 {what}: {result}");
        let info = &result["_meta"][SERVER_INFO];
        assert!(
            info["name"].is_string() && info["version"].is_string(),
            "B-09 {what}: {result}"
        );
    };
    let r = client
        .request("server/discover", json!({}), &caps_none())
        .await?;
    check(&r, "complete", "server/discover");
    let r = client
        .request("tools/list", json!({}), &caps_none())
        .await?;
    check(&r, "complete", "tools/list");
    let r = client
        .call("sleep", json!({"ms": 30_000}), &caps_tasks())
        .await?;
    check(&r, "task", "CreateTaskResult");
    let id = r.body["result"]["taskId"]
        .as_str()
        .context("taskId")?
        .to_owned();
    let r = client
        .request("tasks/get", json!({"taskId": id}), &caps_tasks())
        .await?;
    check(&r, "complete", "tasks/get");
    let r = client.cancel(&id).await?;
    check(&r, "complete", "tasks/cancel");
    ctx.cleanup().await;
    Ok(())
}

/// B-09 (SHOULD), B-04: a `tools/call` answered synchronously also carries `serverInfo` in
/// `result._meta` — for a tool's own result and for an argument error.
#[tokio::test]
async fn tool_call_results_carry_server_info() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for (tool, args) in [("greet", json!({})), ("echo", json!({}))] {
        let r = client.call(tool, args, &caps_none()).await?;
        let result = ok_result(&r);
        assert_eq!(result["resultType"], "complete", "{result}");
        let info = &result["_meta"][SERVER_INFO];
        assert!(
            info["name"].is_string() && info["version"].is_string(),
            "B-09 tools/call {tool}: {result}"
        );
    }
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// _meta and capabilities
// ---------------------------------------------------------------------------------------

/// B-06: `_meta` missing, without `protocolVersion`, or without `clientCapabilities` is
/// 400 / -32602 with the request id (headers otherwise fine); without `clientInfo` is served.
#[tokio::test]
async fn missing_meta_fields_are_400_32602_with_the_request_id() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let full = meta(&caps_none());
    let mut no_version = full.clone();
    no_version
        .as_object_mut()
        .context("meta")?
        .remove(PROTOCOL_VERSION_KEY);
    let mut no_caps = full.clone();
    no_caps
        .as_object_mut()
        .context("meta")?
        .remove(CLIENT_CAPABILITIES_KEY);
    let mut caps_not_object = full.clone();
    caps_not_object[CLIENT_CAPABILITIES_KEY] = json!("all");
    let cases = [
        ("no _meta", json!({})),
        ("no protocolVersion", json!({"_meta": no_version})),
        ("no clientCapabilities", json!({"_meta": no_caps})),
        (
            "clientCapabilities not an object",
            json!({"_meta": caps_not_object}),
        ),
        ("_meta not an object", json!({"_meta": "x"})),
    ];
    for (i, (what, params)) in cases.into_iter().enumerate() {
        let id = json!(format!("meta-{i}"));
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": params});
        let r = client
            .post_raw(&headers("server/discover", None), bytes(&body))
            .await?;
        let e = rpc_error_for(&r, &id, 400, -32602);
        assert!(!e["message"].as_str().unwrap_or("").is_empty(), "{what}");
    }
    // No params at all is the same as no _meta.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "server/discover"});
    let r = client
        .post_raw(&headers("server/discover", None), bytes(&body))
        .await?;
    rpc_error_for(&r, &json!(9), 400, -32602);
    // clientInfo is only a SHOULD.
    let mut no_info = full;
    no_info
        .as_object_mut()
        .context("meta")?
        .remove(CLIENT_INFO_KEY);
    let body = json!({"jsonrpc": "2.0", "id": 10, "method": "server/discover", "params": {"_meta": no_info}});
    let r = client
        .post_raw(&headers("server/discover", None), bytes(&body))
        .await?;
    assert_eq!(ok_result(&r)["resultType"], "complete");
    ctx.cleanup().await;
    Ok(())
}

/// B-06: a `tools/call` with incomplete `_meta` is rejected before anything is stored.
#[tokio::test]
async fn tools_call_with_incomplete_meta_creates_no_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let mut no_version = meta(&caps_tasks());
    no_version
        .as_object_mut()
        .context("meta")?
        .remove(PROTOCOL_VERSION_KEY);
    for m in [json!(null), no_version] {
        let mut params = json!({"name": "sleep", "arguments": {"ms": 10}});
        if !m.is_null() {
            params["_meta"] = m;
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let r = client
            .post_raw(&headers("tools/call", Some("sleep")), bytes(&body))
            .await?;
        rpc_error_for(&r, &json!(1), 400, -32602);
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}

/// B-07: capabilities come from the current request only, on the same connection:
/// declaring the Tasks extension once does not make the next call a task, and a later
/// `tasks/get` without it is still refused.
#[tokio::test]
async fn capabilities_are_read_from_each_request_only() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("sleep", json!({"ms": 20}), &caps_tasks())
        .await?;
    let handle = ok_result(&r);
    assert_eq!(handle["resultType"], "task", "{handle}");
    let task = handle["taskId"].as_str().context("taskId")?.to_owned();
    let r = client
        .call("sleep", json!({"ms": 20}), &caps_none())
        .await?;
    let result = ok_result(&r);
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(first_text(&result), "slept 20 ms", "{result}");
    assert!(result.get("taskId").is_none(), "{result}");
    // The other way round: the task exists, but this request declares nothing.
    let r = client
        .request("tasks/get", json!({"taskId": task}), &caps_none())
        .await?;
    rpc_error(&r, 400, -32021);
    // And declaring again works again.
    client
        .wait_status(&task, "completed", Duration::from_secs(10))
        .await?;
    ctx.cleanup().await;
    Ok(())
}

/// B-08: a request that needs an undeclared capability is 400 / -32021 with
/// `data.requiredCapabilities` naming it, and nothing is created.
#[tokio::test]
async fn undeclared_capability_is_400_32021_with_required_capabilities() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    // tasks/* without the extension (checked before the id is looked up).
    for method in ["tasks/get", "tasks/cancel"] {
        let r = client
            .request(method, json!({"taskId": "gate-test"}), &caps_none())
            .await?;
        let e = rpc_error(&r, 400, -32021);
        assert_eq!(
            e["data"]["requiredCapabilities"],
            json!({"extensions": {TASKS: {}}}),
            "{method}: {e}"
        );
    }
    let r = client
        .request(
            "tasks/update",
            json!({"taskId": "gate-test", "inputResponses": {}}),
            &caps_none(),
        )
        .await?;
    rpc_error(&r, 400, -32021);
    // A tool that needs sampling.
    let r = client
        .call("test_missing_capability", json!({}), &caps_tasks())
        .await?;
    let e = rpc_error(&r, 400, -32021);
    assert_eq!(
        e["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{e}"
    );
    // A task-only tool that needs elicitation, called declaring neither.
    let r = client
        .call("ask", json!({"question": "why?"}), &caps_none())
        .await?;
    let e = rpc_error(&r, 400, -32021);
    let required = &e["data"]["requiredCapabilities"];
    assert!(required.is_object(), "{e}");
    assert!(required["extensions"][TASKS].is_object(), "{e}");
    assert!(required["elicitation"].is_object(), "{e}");
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Transport
// ---------------------------------------------------------------------------------------

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
/// with or without a foreign `Origin`, and serves its own loopback host names.
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
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Routing headers
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Methods
// ---------------------------------------------------------------------------------------

/// B-23: removed and unknown methods — `initialize` (with 2026 `_meta`), `ping`,
/// `logging/setLevel`, `resources/subscribe`, `resources/unsubscribe`, `tasks/list`,
/// `tasks/result` (with a taskId and no `Mcp-Name`), `unknown/method` — are 404 / -32601
/// with the id echoed, even when the Tasks extension is declared.
#[tokio::test]
async fn removed_and_unknown_methods_are_404_32601() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let cases = [
        (
            "initialize",
            json!({"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}),
        ),
        ("ping", json!({})),
        ("logging/setLevel", json!({"level": "debug"})),
        ("resources/subscribe", json!({"uri": "test://x"})),
        ("resources/unsubscribe", json!({"uri": "test://x"})),
        ("tasks/list", json!({})),
        ("tasks/result", json!({"taskId": "tsk_x"})),
        ("unknown/method", json!({})),
    ];
    for (i, (method, params)) in cases.into_iter().enumerate() {
        for caps in [caps_none(), caps_tasks()] {
            let id = json!(i);
            let body = request(id.clone(), method, params.clone(), &caps);
            let r = client
                .post_raw(&headers(method, None), bytes(&body))
                .await?;
            rpc_error_for(&r, &id, 404, -32601);
        }
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-24 as this server extends it: a 2025 `initialize` (no `_meta`, a 2025 version in
/// params) starts a 2025 session (`legacy.rs`) with the client's version when served, else
/// the newest 2025 revision; the 2026 path still names only 2026-07-28 in -32022.
#[tokio::test]
async fn legacy_initialize_starts_a_2025_session() -> Result<()> {
    let ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    let legacy = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    for (asked, got) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-11-25"),
        ("2024-11-05", "2025-11-25"),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": asked, "capabilities": {},
            "clientInfo": {"name": "old-client", "version": "1.32.2"}}});
        let r = client.post_raw(&legacy, bytes(&body)).await?;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["result"]["protocolVersion"], got, "{}", r.body);
        assert!(r.headers.get("mcp-session-id").is_some());
    }
    ctx.cleanup().await;
    Ok(())
}

/// B-25: errors raised while handling a valid request are in-band with HTTP 200: unknown
/// tool, unknown task, bad cursor, `arguments` not an object, a tool's protocol failure.
#[tokio::test]
async fn errors_of_valid_requests_are_in_band_with_200() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client.call("no_such_tool", json!({}), &caps_none()).await?;
    rpc_error(&r, 200, -32602);
    let r = client
        .request(
            "tasks/get",
            json!({"taskId": "tsk_neverissued"}),
            &caps_tasks(),
        )
        .await?;
    rpc_error(&r, 200, -32602);
    let r = client
        .request("tools/list", json!({"cursor": "bogus"}), &caps_none())
        .await?;
    rpc_error(&r, 200, -32602);
    let r = client
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": "text"}),
            &caps_none(),
        )
        .await?;
    rpc_error(&r, 200, -32602);
    let r = client
        .call(
            "fail",
            json!({"mode": "protocol", "message": "boom"}),
            &caps_none(),
        )
        .await?;
    let e = rpc_error(&r, 200, -32603);
    assert_eq!(e["message"], "boom", "{e}");
    assert_eq!(task_keys(&ctx)?.len(), 1, "only the fail call made a task");
    ctx.cleanup().await;
    Ok(())
}

/// B-26, B-28: `tools/list` returns `tools`, `ttlMs`, `cacheScope` and no `nextCursor`
/// (one page); every tool has a name and an object `inputSchema`.
#[tokio::test]
async fn tools_list_has_ttl_and_cache_scope_and_object_schemas() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let r = ctx
        .client()
        .request("tools/list", json!({}), &caps_none())
        .await?;
    let result = ok_result(&r);
    assert_eq!(result["resultType"], "complete");
    assert!(result["ttlMs"].as_u64().is_some(), "{result}");
    assert!(
        ["public", "private"].contains(&result["cacheScope"].as_str().unwrap_or("")),
        "{result}"
    );
    assert!(result.get("nextCursor").is_none(), "{result}");
    let tools = result["tools"].as_array().context("tools")?;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names.len(), tools.len(), "every tool has a name");
    for expected in ["greet", "echo", "sleep", "ask", "fail"] {
        assert!(names.contains(&expected), "{expected} missing: {names:?}");
    }
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "B-28: {tool}");
        let name = tool["name"].as_str().unwrap_or_default();
        assert!(
            (1..=128).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)),
            "tool name {name:?}"
        );
    }
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "duplicate names: {names:?}");
    ctx.cleanup().await;
    Ok(())
}

/// B-27: `tools/list` three times gives the same tools in the same order, `greet` first.
#[tokio::test]
async fn tools_list_order_is_stable() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let mut seen: Vec<Value> = Vec::new();
    for _ in 0..3 {
        // A fresh client each time: the order may not depend on the connection either.
        let client = Client::new(ctx.gateways[0].addr);
        let r = client
            .request("tools/list", json!({}), &caps_none())
            .await?;
        seen.push(ok_result(&r)["tools"].clone());
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1], seen[2]);
    assert_eq!(seen[0][0]["name"], "greet");
    ctx.cleanup().await;
    Ok(())
}

/// B-29: an unknown tool is -32602 (no task); a tool-level failure is a `CallToolResult`
/// with `isError: true` and explanatory text, not a JSON-RPC error.
#[tokio::test]
async fn unknown_tool_is_32602_and_tool_failure_is_an_is_error_result() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for caps in [caps_none(), caps_tasks()] {
        let r = client.call("foo", json!({}), &caps).await?;
        let e = rpc_error(&r, 200, -32602);
        assert!(
            e["message"].as_str().unwrap_or("").contains("foo"),
            "names the tool: {e}"
        );
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    let r = client
        .call(
            "fail",
            json!({"mode": "tool", "message": "disk full"}),
            &caps_none(),
        )
        .await?;
    let result = ok_result(&r);
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(first_text(&result), "disk full");
    ctx.cleanup().await;
    Ok(())
}

/// B-29 (§8.4 PRJ): arguments that violate the input schema are a synchronous `isError`
/// result naming the field and the constraint, and no task is created — even when the
/// request declares the Tasks extension.
#[tokio::test]
async fn arguments_violating_the_schema_are_a_tool_error_and_create_no_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let cases = [
        ("sleep", json!({"ms": -5}), vec!["ms", ">= 0", "-5"]),
        ("sleep", json!({"ms": "soon"}), vec!["ms", "integer"]),
        ("sleep", json!({}), vec!["ms", "required"]),
        ("sleep", json!({"ms": 1, "steps": 0}), vec!["steps", ">= 1"]),
        ("echo", json!({}), vec!["text", "required"]),
        ("echo", json!({"text": 5}), vec!["text", "string"]),
        (
            "fail",
            json!({"mode": "maybe", "message": "x"}),
            vec!["mode", "one of"],
        ),
    ];
    for caps in [caps_none(), caps_tasks()] {
        for (tool, args, words) in &cases {
            let r = client.call(tool, args.clone(), &caps).await?;
            let result = ok_result(&r);
            assert_eq!(result["resultType"], "complete", "{tool} {args}: {result}");
            assert_eq!(result["isError"], true, "{tool} {args}: {result}");
            let text = first_text(&result);
            for w in words {
                assert!(text.contains(w), "{tool} {args}: {text:?} lacks {w:?}");
            }
        }
    }
    assert_eq!(task_keys(&ctx)?, Vec::<String>::new());
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// subscriptions/listen
// ---------------------------------------------------------------------------------------

/// B-38, B-39, B-14: the listen stream's first message is the acknowledgement with the
/// honoured subset (unknown task ids and unadvertised types left out); every notification
/// carries the listen id as `subscriptionId`; no requests, progress or log messages.
#[tokio::test]
async fn listen_acknowledges_first_and_tags_every_notification() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let discover = ok_result(
        &client
            .request("server/discover", json!({}), &caps_none())
            .await?,
    );
    let list_changed = discover["capabilities"]["tools"]["listChanged"] == true;
    let task = client
        .start_task("sleep", json!({"ms": 600, "steps": 3}))
        .await?;
    let res = open_listen(
        &client,
        json!("listen-1"),
        json!({"taskIds": [task, "tsk_neverissued"], "toolsListChanged": true}),
        "application/json, text/event-stream",
    )
    .await?;
    assert_eq!(content_type(res.headers()), "text/event-stream");
    let mut events = Events {
        body: res.into_body(),
        buf: Vec::new(),
    };
    let (ack, _) = events
        .next_message(Duration::from_secs(5))
        .await
        .context("no acknowledgement")?;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "B-38 first message: {ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], "listen-1", "{ack}");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([task]),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]
            .get("toolsListChanged")
            .is_some(),
        list_changed,
        "honoured subset: {ack}"
    );
    let mut statuses = Vec::new();
    while let Some((m, _)) = events.next_message(Duration::from_secs(10)).await {
        assert!(
            m.get("id").is_none(),
            "B-14: request or response on the stream: {m}"
        );
        assert_eq!(
            m["method"], "notifications/tasks",
            "B-39 only requested types: {m}"
        );
        assert_eq!(
            m["params"]["_meta"][SUBSCRIPTION_ID], "listen-1",
            "B-39: {m}"
        );
        assert_eq!(m["params"]["taskId"], task.as_str(), "{m}");
        let status = m["params"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let done = status == "completed";
        statuses.push(status);
        if done {
            break;
        }
    }
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("completed"),
        "{statuses:?}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// B-39: an integer listen id is echoed as an integer `subscriptionId`.
#[tokio::test]
async fn listen_with_an_integer_id_tags_notifications_with_the_integer() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let task = long_task(&client).await?;
    let res = open_listen(
        &client,
        json!(77),
        json!({"taskIds": [task]}),
        "text/event-stream, application/json",
    )
    .await?;
    assert_eq!(content_type(res.headers()), "text/event-stream");
    let mut events = Events {
        body: res.into_body(),
        buf: Vec::new(),
    };
    let (ack, _) = events
        .next_message(Duration::from_secs(5))
        .await
        .context("no acknowledgement")?;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], json!(77), "{ack}");
    client.cancel(&task).await?;
    let mut last = Value::Null;
    while let Some((m, _)) = events.next_message(Duration::from_secs(5)).await {
        assert_eq!(m["params"]["_meta"][SUBSCRIPTION_ID], json!(77), "{m}");
        let done = m["params"]["status"] == "cancelled";
        last = m;
        if done {
            break;
        }
    }
    assert_eq!(last["params"]["status"], "cancelled", "{last}");
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Error codes
// ---------------------------------------------------------------------------------------

/// B-43: a sweep of every kind of rejection this server produces — each code is one of the
/// standard five or -32020/-32021/-32022, none from the rest of -32020…-32099.
#[tokio::test]
async fn no_undefined_codes_in_the_reserved_range() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let std_codes = [
        -32700, -32600, -32601, -32602, -32603, -32020, -32021, -32022,
    ];
    let mut replies: Vec<Reply> = Vec::new();
    let discover = request(json!(1), "server/discover", json!({}), &caps_none());
    replies.push(
        client
            .post_raw(&headers("server/discover", None), b"{".to_vec())
            .await?,
    );
    replies.push(
        client
            .post_raw(&headers("server/discover", None), b"[]".to_vec())
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(headers("server/discover", None), "mcp-method", None),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(
                    headers("server/discover", None),
                    "mcp-protocol-version",
                    Some("v9"),
                ),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(
                    headers("server/discover", None),
                    "content-type",
                    Some("text/plain"),
                ),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(
                    headers("server/discover", None),
                    "accept",
                    Some("text/html"),
                ),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(
                    headers("server/discover", None),
                    "origin",
                    Some("http://evil.example.com"),
                ),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(client.request("ping", json!({}), &caps_none()).await?);
    replies.push(client.call("nope", json!({}), &caps_none()).await?);
    replies.push(
        client
            .request("tasks/get", json!({"taskId": "tsk_x"}), &caps_none())
            .await?,
    );
    replies.push(
        client
            .request("tasks/get", json!({"taskId": "tsk_x"}), &caps_tasks())
            .await?,
    );
    replies.push(
        client
            .request("tasks/cancel", json!({"taskId": "tsk_x"}), &caps_tasks())
            .await?,
    );
    replies.push(
        client
            .request(
                "tasks/update",
                json!({"taskId": "tsk_x", "inputResponses": {}}),
                &caps_tasks(),
            )
            .await?,
    );
    replies.push(
        client
            .request("subscriptions/listen", json!({}), &caps_tasks())
            .await?,
    );
    replies.push(
        client
            .call(
                "fail",
                json!({"mode": "protocol", "message": "x"}),
                &caps_none(),
            )
            .await?,
    );
    replies.push(
        client
            .call("protocol_error_job", json!({}), &caps_none())
            .await?,
    );
    let failed_task = client.start_task("protocol_error_job", json!({})).await?;
    let t = client
        .wait_status(&failed_task, "failed", Duration::from_secs(10))
        .await?;
    let mut codes: Vec<i64> = vec![t["error"]["code"].as_i64().context("task error code")?];
    for r in &replies {
        if let Some(code) = r.error_code() {
            codes.push(code);
        }
    }
    assert!(codes.len() >= 14, "too few errors collected: {codes:?}");
    for code in &codes {
        assert_code_allowed(*code, "sweep");
        assert!(
            std_codes.contains(code),
            "unexpected code {code}: {codes:?}"
        );
    }
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Checks before JSON
// ---------------------------------------------------------------------------------------

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
