//! Bad input (issue 3 item 5): every malformed request gets the JSON-RPC error the
//! specification names, with a message, the id when readable, and changes nothing in Redis
//! (base-protocol.md §2, §6, §7, §7.5 mapping, §16; tasks-extension.md §14; B-02, B-03,
//! B-05, B-06, B-08, B-13, B-17…B-25, B-29, B-43, B-44, T-05, T-24, T-32, T-33, T-40,
//! T-41, T-53, T-56).
//!
//! - [`table::malformed_requests_get_the_specified_error_and_change_nothing`]: a table of
//!   malformed requests against a real gateway and worker; every mismatch with the expected
//!   status, code and id is collected and reported together.
//! - [`random::random_bodies_never_produce_a_5xx_or_a_hang`]: a property test over random
//!   bodies (random bytes, byte- and structure-level mutations of valid requests, random
//!   header values), seeded by hand (`BAD_INPUT_SEED`, `BAD_INPUT_CASES` override the
//!   defaults).
//!
//! This file holds what both tests share: sending raw requests, reading Redis, building
//! requests and checking error bodies.
//!
//! Headers are sent as raw bytes (not `&str`) so that invalid UTF-8 can be sent in them, and
//! a header may be sent on several field lines (RFC 9110 §5.3: for a list-based field such
//! as `Accept` that is one list; for the single-valued routing headers, conflicting lines
//! are a value that differs from the body).

mod random;
mod table;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcp_tasks_tests::{SseDecoder, TestContext, VERSION, meta};
use serde_json::{Value, json};

/// How long one request may take before it counts as a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A task id that is well formed but names no task.
const UNKNOWN_TASK: &str = "tsk_00000000000000000000000000000000";

/// Header lines as (name, raw value bytes).
type Headers = Vec<(String, Vec<u8>)>;

/// One HTTP answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    /// The body (for SSE: the first event only).
    raw: Bytes,
    /// The body as JSON (`Null` when empty or not JSON; for SSE the first event's data).
    body: Value,
}

impl Answer {
    fn describe(&self) -> String {
        let text = String::from_utf8_lossy(&self.raw);
        let text: String = text.chars().take(400).collect();
        format!("HTTP {} {} {text}", self.status, self.content_type)
    }
}

/// A client that sends exactly the given header bytes and body, with a per-request timeout.
struct Probe {
    addr: SocketAddr,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Probe {
    fn new(addr: SocketAddr) -> Probe {
        Probe {
            addr,
            http: HyperClient::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// POST to `/mcp`. A header value `HeaderValue` refuses (control bytes) is an error.
    async fn post(&self, headers: &Headers, body: Vec<u8>) -> Result<Answer> {
        tokio::time::timeout(REQUEST_TIMEOUT, self.post_inner(headers, body))
            .await
            .map_err(|_| anyhow!("no complete answer within {REQUEST_TIMEOUT:?} (hang)"))?
    }

    async fn post_inner(&self, headers: &Headers, body: Vec<u8>) -> Result<Answer> {
        let mut req = hyper::Request::builder()
            .method("POST")
            .uri(format!("http://{}/mcp", self.addr));
        for (name, value) in headers {
            req = req.header(
                HeaderName::from_bytes(name.as_bytes())?,
                HeaderValue::from_bytes(value)?,
            );
        }
        let res = self
            .http
            .request(req.body(Full::new(Bytes::from(body)))?)
            .await?;
        let status = res.status().as_u16();
        let content_type = res
            .headers()
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let mut body = res.into_body();
        if content_type.starts_with("text/event-stream") {
            // A stream stays open: read its first event, then drop the connection.
            let (mut buf, mut events) = (Vec::new(), SseDecoder::new());
            let data = loop {
                if let Some(data) = events.next_data() {
                    break data;
                }
                match body.frame().await {
                    Some(frame) => {
                        if let Ok(data) = frame?.into_data() {
                            buf.extend_from_slice(&data);
                            events.push(&data);
                        }
                    }
                    None => break String::new(),
                }
            };
            let json = serde_json::from_str(&data).unwrap_or(Value::Null);
            return Ok(Answer {
                status,
                content_type,
                raw: Bytes::from(buf),
                body: json,
            });
        }
        let raw = body.collect().await?.to_bytes();
        let json = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            content_type,
            raw,
            body: json,
        })
    }

    /// GET any path (for `/healthz`), on a fresh connection: the gateway rightly closes
    /// connections after some bad requests (an oversized body), and a pooled one could be
    /// reused just as it closes.
    async fn get(&self, path: &str) -> Result<u16> {
        let req = hyper::Request::builder()
            .method("GET")
            .uri(format!("http://{}{path}", self.addr))
            .body(Full::new(Bytes::new()))?;
        let fresh: HyperClient<HttpConnector, Full<Bytes>> =
            HyperClient::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http();
        let res = tokio::time::timeout(REQUEST_TIMEOUT, fresh.request(req)).await??;
        Ok(res.status().as_u16())
    }
}

/// What bad input must not change: how many task hashes exist, how long the queue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RedisState {
    tasks: usize,
    queued: u64,
}

fn redis_state(ctx: &TestContext) -> Result<RedisState> {
    let keys = ctx.redis.cli(&["--scan", "--pattern", "mcpt:task:*"])?;
    let tasks = keys.lines().filter(|l| !l.trim().is_empty()).count();
    let queued = ctx
        .redis
        .cli(&["XLEN", &mcp_tasks_store::keys::queue_key("default")])?
        .trim()
        .parse()
        .context("XLEN did not answer an integer")?;
    Ok(RedisState { tasks, queued })
}

/// The standard headers for `method` (and `Mcp-Name` when given).
fn std_headers(method: &str, name: Option<&str>) -> Headers {
    let mut h: Headers = vec![
        ("content-type".into(), b"application/json".to_vec()),
        (
            "accept".into(),
            b"application/json, text/event-stream".to_vec(),
        ),
        ("mcp-protocol-version".into(), VERSION.as_bytes().to_vec()),
        ("mcp-method".into(), method.as_bytes().to_vec()),
    ];
    if let Some(n) = name {
        h.push(("mcp-name".into(), n.as_bytes().to_vec()));
    }
    h
}

/// `h` with header `name` replaced by `value` (removed when `None`).
fn set(mut h: Headers, name: &str, value: Option<&[u8]>) -> Headers {
    h.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
    if let Some(v) = value {
        h.push((name.to_owned(), v.to_vec()));
    }
    h
}

/// A JSON-RPC request with `_meta` for `caps`.
fn rq(id: Value, method: &str, mut params: Value, caps: &Value) -> Value {
    params["_meta"] = meta(caps);
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn enc(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("serialisable")
}

/// `=?base64?…?=` around `bytes` (base-protocol.md §7.2).
fn sentinel(bytes: &[u8]) -> Vec<u8> {
    format!("=?base64?{}?=", base64(bytes)).into_bytes()
}

/// Standard Base64 with padding (no dependency needed for this little).
fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// B-43 and §16.3: no undefined code from the MCP range, no retired or legacy-range code.
fn code_allowed(code: i64) -> bool {
    let reserved = (-32099..=-32020).contains(&code);
    (!reserved || [-32020, -32021, -32022].contains(&code))
        && !(-32019..=-32000).contains(&code)
        && ![-32002, -32003, -32042, -32001, -32004].contains(&code)
}

/// Problems with a JSON-RPC error body (B-02, B-05, T-53): jsonrpc 2.0, integer code, a
/// non-empty string message, no result.
fn error_shape_problems(body: &Value) -> Vec<String> {
    let mut p = Vec::new();
    if body["jsonrpc"] != "2.0" {
        p.push("jsonrpc is not \"2.0\"".to_owned());
    }
    let e = &body["error"];
    if !e.is_object() {
        p.push("no error object".to_owned());
        return p;
    }
    match e["code"].as_i64() {
        None => p.push("error.code is not an integer".to_owned()),
        Some(c) if !code_allowed(c) => p.push(format!("B-43: code {c} must not be emitted")),
        Some(_) => {}
    }
    if e["message"].as_str().is_none_or(|m| m.trim().is_empty()) {
        p.push("error.message is missing or empty".to_owned());
    }
    if body.get("result").is_some() {
        p.push("both error and result".to_owned());
    }
    p
}
