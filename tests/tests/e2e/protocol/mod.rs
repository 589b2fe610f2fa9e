//! The base protocol over HTTP (base-protocol.md §2–§8, §12, §14–§16): framing and ids,
//! `_meta`, versions, the routing headers, the transport checks before JSON, tools, removed
//! methods, listen streams and the error codes. One test per behaviour; each `///` names the
//! checklist ids it covers. Task lifecycles are in `lifecycle/`, listen details in
//! `listen.rs`, process behaviour in `processes.rs`.
//!
//! Every JSON-RPC error these tests receive goes through [`rpc_error`], which also checks B-43
//! (no undefined code in the MCP-reserved range), so B-43 is asserted on every error here.
//!
//! This file holds the helpers the topic files share; the tests are in:
//! - [`meta_and_versions`]: versions, `server/discover`, `_meta` and capabilities (B-01,
//!   B-04, B-06…B-10, B-19, B-26);
//! - [`framing`]: JSON-RPC framing, ids and the result envelope (B-02…B-05, B-09);
//! - [`transport`]: the HTTP transport — methods, sessions, notifications, content types,
//!   cancellation by disconnect, `Origin` and `Host` (B-11…B-17);
//! - [`headers`]: the routing headers and their Base64 sentinel (B-18, B-20…B-22);
//! - [`methods`]: removed and unknown methods, in-band errors and tools (B-23…B-29);
//! - [`listen`]: `subscriptions/listen` acknowledgement and tagging (B-14, B-38, B-39);
//! - [`errors`]: the sweep over every error code the server emits (B-43);
//! - [`before_json`]: the checks made before the body is parsed (B-44, body limits).

mod before_json;
mod errors;
mod framing;
mod headers;
mod listen;
mod meta_and_versions;
mod methods;
mod transport;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use mcp_tasks_tests::{Client, Reply, SseDecoder, TestContext, caps_tasks, meta};
use serde_json::{Value, json};

const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

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

/// The first text block of a `CallToolResult`.
fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
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
            let mut event = SseDecoder::new();
            event.push(raw.as_bytes());
            let Some(data) = event.next_data() else {
                continue;
            };
            let value = serde_json::from_str(&data).ok()?;
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
