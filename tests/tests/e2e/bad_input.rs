//! Bad input (issue 3 item 5): every malformed request gets the JSON-RPC error the
//! specification names, with a message, the id when readable, and changes nothing in Redis
//! (base-protocol.md §2, §6, §7, §7.5 mapping, §16; tasks-extension.md §14; B-02, B-03,
//! B-05, B-06, B-08, B-13, B-17…B-25, B-29, B-43, B-44, T-05, T-24, T-32, T-33, T-40,
//! T-41, T-53, T-56).
//!
//! - [`malformed_requests_get_the_specified_error_and_change_nothing`]: a table of malformed
//!   requests against a real gateway and worker; every mismatch with the expected status,
//!   code and id is collected and reported together.
//! - [`random_bodies_never_produce_a_5xx_or_a_hang`]: a property test over random bodies
//!   (random bytes, byte- and structure-level mutations of valid requests, random header
//!   values), seeded by hand (`BAD_INPUT_SEED`, `BAD_INPUT_CASES` override the defaults).
//!
//! Headers are sent as raw bytes (not `&str`) so that invalid UTF-8 can be sent in them, and
//! a header may be sent on several field lines (RFC 9110 §5.3: for a list-based field such
//! as `Accept` that is one list; for the single-valued routing headers, conflicting lines
//! are a value that differs from the body).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcp_tasks_tests::{TASKS, TestContext, VERSION, caps_none, caps_tasks, meta};
use serde_json::{Map, Value, json};

const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPS_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// How long one request may take before it counts as a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A task id that is well formed but names no task.
const UNKNOWN_TASK: &str = "tsk_00000000000000000000000000000000";

// ---------------------------------------------------------------------------------------
// Sending raw requests
// ---------------------------------------------------------------------------------------

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
            let mut buf = Vec::new();
            while !buf.windows(2).any(|w| w == b"\n\n") {
                match body.frame().await {
                    Some(frame) => {
                        if let Ok(data) = frame?.into_data() {
                            buf.extend_from_slice(&data);
                        }
                    }
                    None => break,
                }
            }
            let text = String::from_utf8_lossy(&buf).into_owned();
            let data: String = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
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

// ---------------------------------------------------------------------------------------
// Redis state
// ---------------------------------------------------------------------------------------

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
        .cli(&["XLEN", &mcp_tasks_shared::store::keys::queue_key("default")])?
        .trim()
        .parse()
        .context("XLEN did not answer an integer")?;
    Ok(RedisState { tasks, queued })
}

// ---------------------------------------------------------------------------------------
// Building requests
// ---------------------------------------------------------------------------------------

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
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Checks shared by both tests
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------

/// What a case must get.
#[derive(Debug, Clone)]
enum Expect {
    /// A JSON-RPC error with exactly this HTTP status and code; `id`: `Some` = echoed
    /// unchanged, `None` = omitted (unreadable). `data`: fields that must be in
    /// `error.data`. `mentions`: a word the message must contain (case-insensitive, T-53).
    Error {
        status: u16,
        code: i64,
        id: Option<Value>,
        data: Option<Value>,
        mentions: Option<&'static str>,
    },
    /// Tolerated input: HTTP 200 with a result for this id.
    Result { id: Value },
    /// HTTP 200 with a `CallToolResult` whose `isError` is true (B-29: bad arguments).
    ToolError { id: Value },
    /// HTTP 202 with an empty body (B-13).
    Accepted,
}

fn err(status: u16, code: i64, id: Option<Value>) -> Expect {
    Expect::Error {
        status,
        code,
        id,
        data: None,
        mentions: None,
    }
}

fn err_mentioning(status: u16, code: i64, id: Option<Value>, word: &'static str) -> Expect {
    Expect::Error {
        status,
        code,
        id,
        data: None,
        mentions: Some(word),
    }
}

struct Case {
    name: String,
    headers: Headers,
    body: Vec<u8>,
    expect: Expect,
}

/// Builds the table.
#[derive(Default)]
struct Table(Vec<Case>);

impl Table {
    fn add(&mut self, name: impl Into<String>, headers: Headers, body: Vec<u8>, expect: Expect) {
        self.0.push(Case {
            name: name.into(),
            headers,
            body,
            expect,
        });
    }
}

/// Compare an answer with what the case expects; the problems found.
fn judge(case: &Case, a: &Answer) -> Vec<String> {
    let mut p = Vec::new();
    match &case.expect {
        Expect::Error {
            status,
            code,
            id,
            data,
            mentions,
        } => {
            if a.status != *status {
                p.push(format!("HTTP {} (expected {status})", a.status));
            }
            if !a.content_type.starts_with("application/json") {
                p.push(format!(
                    "content-type {:?} (expected application/json)",
                    a.content_type
                ));
            }
            p.extend(error_shape_problems(&a.body));
            let got = a.body["error"]["code"].as_i64();
            if got != Some(*code) {
                p.push(format!("code {got:?} (expected {code})"));
            }
            match id {
                Some(id) if &a.body["id"] != id => {
                    p.push(format!("id {} (expected {id} echoed)", a.body["id"]));
                }
                None if a.body.get("id").is_some_and(|i| !i.is_null()) => {
                    p.push(format!("id {} (expected none: unreadable)", a.body["id"]));
                }
                _ => {}
            }
            if let Some(Value::Object(want)) = data {
                for (k, v) in want {
                    if &a.body["error"]["data"][k] != v {
                        p.push(format!(
                            "error.data.{k} = {} (expected {v})",
                            a.body["error"]["data"][k]
                        ));
                    }
                }
            }
            if let Some(word) = mentions {
                let msg = a.body["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .to_lowercase();
                if !msg.contains(&word.to_lowercase()) {
                    p.push(format!("T-53: message does not mention {word:?}"));
                }
            }
        }
        Expect::Result { id } | Expect::ToolError { id } => {
            if a.status != 200 {
                p.push(format!("HTTP {} (expected 200)", a.status));
            }
            if !a.body["result"].is_object() {
                p.push("no result object".to_owned());
            }
            if &a.body["id"] != id {
                p.push(format!("id {} (expected {id} echoed)", a.body["id"]));
            }
            if matches!(case.expect, Expect::ToolError { .. })
                && a.body["result"]["isError"] != true
            {
                p.push("result.isError is not true".to_owned());
            }
        }
        Expect::Accepted => {
            if a.status != 202 {
                p.push(format!("HTTP {} (expected 202)", a.status));
            }
            if !a.raw.is_empty() {
                p.push("202 with a body".to_owned());
            }
        }
    }
    p
}

/// Every malformed request of the table, grouped as issue 3 item 5 lists them.
fn table() -> Vec<Case> {
    let mut t = Table::default();
    let none = caps_none();
    let tasks = caps_tasks();
    let discover = |id: Value| enc(&rq(id, "server/discover", json!({}), &none));
    let list_h = || std_headers("tools/list", None);
    let disc_h = || std_headers("server/discover", None);
    let valid_list = enc(&rq(json!(1), "tools/list", json!({}), &none));

    // --- Invalid JSON (400 / -32700, no id: B-03) --------------------------------------
    let parse = || err(400, -32700, None);
    let truncated = valid_list[..valid_list.len() / 2].to_vec();
    let mut trailing = valid_list.clone();
    trailing.extend_from_slice(b" xyz");
    let mut two = valid_list.clone();
    two.extend_from_slice(&valid_list);
    let mut utf16 = vec![0xff, 0xfe];
    for c in String::from_utf8_lossy(&valid_list).encode_utf16() {
        utf16.extend_from_slice(&c.to_le_bytes());
    }
    for (name, body) in [
        ("not JSON at all", b"hello".to_vec()),
        ("empty body", Vec::new()),
        ("whitespace only", b" \r\n\t ".to_vec()),
        ("truncated JSON (half a request)", truncated),
        (
            "unterminated object",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list""#.to_vec(),
        ),
        ("trailing garbage after the request", trailing),
        ("two requests concatenated", two),
        (
            "single quotes",
            br#"{'jsonrpc':'2.0','id':1,'method':'tools/list'}"#.to_vec(),
        ),
        (
            "trailing comma",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list",}"#.to_vec(),
        ),
        (
            "NaN literal",
            br#"{"jsonrpc":"2.0","id":NaN,"method":"tools/list"}"#.to_vec(),
        ),
        (
            "comment in JSON",
            br#"{"jsonrpc":"2.0", /* c */ "id":1,"method":"tools/list"}"#.to_vec(),
        ),
        (
            "invalid UTF-8 inside a string",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\xff\xfe\"}".to_vec(),
        ),
        (
            "invalid UTF-8 (overlong encoding) in a string",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xc0\xaf\"}".to_vec(),
        ),
        (
            "bare invalid UTF-8 bytes",
            vec![0xff, 0xfe, 0xfd, 0x80, 0x00],
        ),
        ("UTF-16 encoded request", utf16),
        (
            "control character in a string",
            b"{\"method\":\"a\x01b\"}".to_vec(),
        ),
        ("100k unclosed [", vec![b'['; 100_000]),
        ("100k nested balanced arrays", {
            let mut b = vec![b'['; 100_000];
            b.extend(std::iter::repeat_n(b']', 100_000));
            b
        }),
        ("100k nested objects", {
            let mut b = b"{\"a\":".repeat(100_000);
            b.push(b'1');
            b.extend(std::iter::repeat_n(b'}', 100_000));
            b
        }),
        ("deep nesting inside a valid request", {
            let mut b = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"#.to_vec();
            b.extend(std::iter::repeat_n(b'[', 5_000));
            b.extend(std::iter::repeat_n(b']', 5_000));
            b.extend_from_slice(b"}}");
            b
        }),
    ] {
        t.add(format!("parse: {name}"), list_h(), body, parse());
    }

    // --- Not a JSON-RPC request (400 / -32600: B-02, B-03) -----------------------------
    for (name, body) in [
        ("body null", "null"),
        ("body number", "42"),
        ("body string", "\"tools/list\""),
        ("body true", "true"),
        ("body empty array", "[]"),
        ("body empty object", "{}"),
        (
            "id null",
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/list","params":{}}"#,
        ),
        (
            "id float",
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list","params":{}}"#,
        ),
        (
            "id object",
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
        ),
        (
            "id bool",
            r#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#,
        ),
        (
            "id array",
            r#"{"jsonrpc":"2.0","id":[1],"method":"tools/list"}"#,
        ),
        ("jsonrpc only", r#"{"jsonrpc":"2.0"}"#),
        (
            "notification with params array",
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":[1]}"#,
        ),
        (
            "notification with jsonrpc 1.0",
            r#"{"jsonrpc":"1.0","method":"notifications/x"}"#,
        ),
        (
            "notification with method number",
            r#"{"jsonrpc":"2.0","method":7}"#,
        ),
    ] {
        t.add(
            format!("envelope: {name}"),
            list_h(),
            body.as_bytes().to_vec(),
            err(400, -32600, None),
        );
    }
    let req = rq(json!(1), "tools/list", json!({}), &none);
    t.add(
        "envelope: batch of one valid request",
        list_h(),
        enc(&json!([req.clone()])),
        err(400, -32600, None),
    );
    t.add(
        "envelope: batch of two",
        list_h(),
        enc(&json!([req.clone(), req.clone()])),
        err(400, -32600, None),
    );
    let mut envelope_with_id = Vec::new();
    let edit = |f: &dyn Fn(&mut Map<String, Value>)| {
        let mut v = rq(json!("e-1"), "tools/list", json!({}), &none);
        f(v.as_object_mut().expect("object"));
        enc(&v)
    };
    envelope_with_id.push((
        "jsonrpc missing",
        edit(&|o| {
            o.remove("jsonrpc");
        }),
    ));
    envelope_with_id.push((
        "jsonrpc 1.0",
        edit(&|o| {
            o.insert("jsonrpc".into(), json!("1.0"));
        }),
    ));
    envelope_with_id.push((
        "jsonrpc as number 2.0",
        edit(&|o| {
            o.insert("jsonrpc".into(), json!(2.0));
        }),
    ));
    envelope_with_id.push((
        "jsonrpc \"2.0 \"",
        edit(&|o| {
            o.insert("jsonrpc".into(), json!("2.0 "));
        }),
    ));
    envelope_with_id.push((
        "method missing",
        edit(&|o| {
            o.remove("method");
        }),
    ));
    envelope_with_id.push((
        "method number",
        edit(&|o| {
            o.insert("method".into(), json!(42));
        }),
    ));
    envelope_with_id.push((
        "method null",
        edit(&|o| {
            o.insert("method".into(), Value::Null);
        }),
    ));
    envelope_with_id.push((
        "method object",
        edit(&|o| {
            o.insert("method".into(), json!({"name": "tools/list"}));
        }),
    ));
    envelope_with_id.push((
        "params array",
        edit(&|o| {
            o.insert("params".into(), json!([{"_meta": meta(&caps_none())}]));
        }),
    ));
    envelope_with_id.push((
        "params string",
        edit(&|o| {
            o.insert("params".into(), json!("params"));
        }),
    ));
    envelope_with_id.push((
        "params null",
        edit(&|o| {
            o.insert("params".into(), Value::Null);
        }),
    ));
    envelope_with_id.push((
        "params number",
        edit(&|o| {
            o.insert("params".into(), json!(3));
        }),
    ));
    envelope_with_id.push((
        "posted result response",
        enc(&json!({"jsonrpc": "2.0", "id": "e-1", "result": {"resultType": "complete"}})),
    ));
    envelope_with_id.push((
        "posted error response",
        enc(&json!({"jsonrpc": "2.0", "id": "e-1", "error": {"code": -32603, "message": "x"}})),
    ));
    for (name, body) in envelope_with_id {
        t.add(
            format!("envelope: {name}"),
            list_h(),
            body,
            err(400, -32600, Some(json!("e-1"))),
        );
    }

    // --- Required _meta fields (400 / -32602: B-06) ------------------------------------
    let meta_cases: Vec<(&str, Value)> = vec![
        (
            "params missing",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list"}),
        ),
        (
            "_meta missing",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list", "params": {}}),
        ),
        (
            "_meta array",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list", "params": {"_meta": []}}),
        ),
        (
            "protocolVersion missing",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {CAPS_KEY: {}}}}),
        ),
        (
            "protocolVersion a number",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {VERSION_KEY: 20260728, CAPS_KEY: {}}}}),
        ),
        (
            "clientCapabilities missing",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {VERSION_KEY: VERSION}}}),
        ),
        (
            "clientCapabilities a string",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {VERSION_KEY: VERSION, CAPS_KEY: "all"}}}),
        ),
        (
            "clientCapabilities null",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {VERSION_KEY: VERSION, CAPS_KEY: null}}}),
        ),
    ];
    for (name, body) in meta_cases {
        t.add(
            format!("_meta: {name}"),
            list_h(),
            enc(&body),
            err(400, -32602, Some(json!(11))),
        );
    }

    // --- Protocol version (B-18, B-19, B-24) -------------------------------------------
    let id = || Some(json!("v"));
    t.add(
        "version: MCP-Protocol-Version missing",
        set(disc_h(), "mcp-protocol-version", None),
        discover(json!("v")),
        err_mentioning(400, -32020, id(), "MCP-Protocol-Version"),
    );
    t.add(
        "version: header differs from _meta",
        set(disc_h(), "mcp-protocol-version", Some(b"2025-11-25")),
        discover(json!("v")),
        err_mentioning(400, -32020, id(), "MCP-Protocol-Version"),
    );
    t.add(
        "version: header with invalid UTF-8",
        set(disc_h(), "mcp-protocol-version", Some(b"2026-07-28\xff")),
        discover(json!("v")),
        err(400, -32020, id()),
    );
    t.add(
        "version: header is a malformed sentinel",
        set(disc_h(), "mcp-protocol-version", Some(b"=?base64?%%%?=")),
        discover(json!("v")),
        err(400, -32020, id()),
    );
    let mut spaced = rq(json!("v"), "server/discover", json!({}), &none);
    spaced["params"]["_meta"][VERSION_KEY] = json!(format!("{VERSION} "));
    t.add(
        "version: _meta version with a trailing space",
        disc_h(),
        enc(&spaced),
        err_mentioning(400, -32020, id(), "MCP-Protocol-Version"),
    );
    for version in ["2025-11-25", "1900-01-01", ""] {
        let mut body = rq(json!("v"), "server/discover", json!({}), &none);
        body["params"]["_meta"][VERSION_KEY] = json!(version);
        t.add(
            format!("version: unsupported {version:?} in header and _meta"),
            set(disc_h(), "mcp-protocol-version", Some(version.as_bytes())),
            enc(&body),
            Expect::Error {
                status: 400,
                code: -32022,
                id: id(),
                data: Some(json!({"supported": [VERSION], "requested": version})),
                mentions: None,
            },
        );
    }
    // A 2025 `initialize` starts a session (tests/tests/e2e/legacy.rs).
    t.add(
        "version: legacy initialize",
        vec![
            ("content-type".into(), b"application/json".to_vec()),
            (
                "accept".into(),
                b"application/json, text/event-stream".to_vec(),
            ),
        ],
        enc(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "old", "version": "1"}}})),
        Expect::Result { id: json!(0) },
    );

    // --- Mcp-Method (B-20, B-22) --------------------------------------------------------
    let id = || Some(json!(21));
    let list21 = enc(&rq(json!(21), "tools/list", json!({}), &none));
    for (name, value) in [
        ("missing", None),
        ("different method", Some(b"tools/call".to_vec())),
        ("different case", Some(b"TOOLS/LIST".to_vec())),
        ("invalid UTF-8", Some(b"tools/list\xff".to_vec())),
        (
            "raw non-ASCII",
            Some("tools/list\u{e9}".as_bytes().to_vec()),
        ),
        ("sentinel of another method", Some(sentinel(b"tools/call"))),
        (
            "sentinel with a bad payload",
            Some(b"=?base64?***?=".to_vec()),
        ),
        (
            "sentinel decoding to invalid UTF-8",
            Some(sentinel(&[0xff, 0xfe])),
        ),
        (
            "sentinel with uppercase markers",
            Some(format!("=?BASE64?{}?=", base64(b"tools/list")).into_bytes()),
        ),
        (
            "sentinel without the closing marker",
            Some(format!("=?base64?{}", base64(b"tools/list")).into_bytes()),
        ),
        (
            "sentinel of the value with a trailing space",
            Some(sentinel(b"tools/list ")),
        ),
    ] {
        t.add(
            format!("Mcp-Method: {name}"),
            set(list_h(), "mcp-method", value.as_deref()),
            list21.clone(),
            err_mentioning(400, -32020, id(), "Mcp-Method"),
        );
    }

    // --- Mcp-Name (B-21, B-22, T-40, T-41) ---------------------------------------------
    let id = || Some(json!(31));
    let call31 = |name: &str| {
        enc(&rq(
            json!(31),
            "tools/call",
            json!({"name": name, "arguments": {}}),
            &none,
        ))
    };
    let get31 = |task: &str| enc(&rq(json!(31), "tasks/get", json!({"taskId": task}), &tasks));
    let call_h = |name: Option<&[u8]>| set(std_headers("tools/call", None), "mcp-name", name);
    let get_h = |name: Option<&[u8]>| set(std_headers("tasks/get", None), "mcp-name", name);
    for (name, value) in [
        ("missing on tools/call", None),
        ("different tool", Some(b"echo".to_vec())),
        ("different case", Some(b"GREET".to_vec())),
        ("invalid UTF-8", Some(b"greet\xff".to_vec())),
        ("malformed sentinel", Some(b"=?base64?Z3J$lZXQ=?=".to_vec())),
        ("sentinel of another name", Some(sentinel(b"echo"))),
        ("sentinel with surrounding space", Some(sentinel(b" greet"))),
    ] {
        t.add(
            format!("Mcp-Name: {name}"),
            call_h(value.as_deref()),
            call31("greet"),
            err_mentioning(400, -32020, id(), "Mcp-Name"),
        );
    }
    for (name, value) in [
        ("missing on tasks/get", None),
        ("different task id", Some(b"tsk_other".to_vec())),
        ("sentinel of another task id", Some(sentinel(b"tsk_other"))),
    ] {
        t.add(
            format!("Mcp-Name: {name}"),
            get_h(value.as_deref()),
            get31(UNKNOWN_TASK),
            err_mentioning(400, -32020, id(), "Mcp-Name"),
        );
    }
    for method in ["tasks/update", "tasks/cancel"] {
        t.add(
            format!("Mcp-Name: missing on {method}"),
            std_headers(method, None),
            enc(&rq(
                json!(31),
                method,
                json!({"taskId": UNKNOWN_TASK, "inputResponses": {}}),
                &tasks,
            )),
            err_mentioning(400, -32020, id(), "Mcp-Name"),
        );
    }
    let unicode = "t\u{e2}che-\u{5de5}\u{5177}";
    t.add(
        "Mcp-Name: raw UTF-8 where a sentinel is required",
        call_h(Some(unicode.as_bytes())),
        call31(unicode),
        err(400, -32020, id()),
    );
    t.add(
        "Mcp-Name: correct sentinel for a unicode tool (unknown tool, in-band)",
        call_h(Some(&sentinel(unicode.as_bytes()))),
        call31(unicode),
        err_mentioning(200, -32602, id(), "tool"),
    );

    // --- Unknown and removed methods (404 / -32601: B-23, T-39, T-41) ------------------
    let long_method = "x/".repeat(5_000);
    for method in [
        "ping",
        "tasks/list",
        "tasks/result",
        "resources/subscribe",
        "logging/setLevel",
        "notifications/initialized",
        "no/such/method",
        "TOOLS/LIST",
        "",
        long_method.as_str(),
    ] {
        let label: String = method.chars().take(30).collect();
        t.add(
            format!("method: unknown {label:?}"),
            std_headers(method, None),
            enc(&rq(
                json!("m"),
                method,
                json!({"taskId": UNKNOWN_TASK}),
                &tasks,
            )),
            err(404, -32601, Some(json!("m"))),
        );
    }

    // --- Wrong types and missing fields in params (in-band -32602 unless noted) --------
    let id41 = || Some(json!(41));
    let call = |params: Value, caps: &Value| enc(&rq(json!(41), "tools/call", params, caps));
    t.add(
        "tools/call: name is a number",
        call_h(Some(b"42")),
        call(json!({"name": 42}), &none),
        err_mentioning(200, -32602, id41(), "name"),
    );
    t.add(
        "tools/call: name missing",
        call_h(Some(b"greet")),
        call(json!({"arguments": {}}), &none),
        err_mentioning(200, -32602, id41(), "name"),
    );
    t.add(
        "tools/call: unknown tool",
        call_h(Some(b"no_such_tool")),
        call(json!({"name": "no_such_tool"}), &none),
        err_mentioning(200, -32602, id41(), "no_such_tool"),
    );
    for (name, args) in [
        ("array", json!([1, 2])),
        ("string", json!("text")),
        ("null", Value::Null),
        ("number", json!(5)),
    ] {
        t.add(
            format!("tools/call: arguments {name}"),
            call_h(Some(b"greet")),
            call(json!({"name": "greet", "arguments": args}), &none),
            err_mentioning(200, -32602, id41(), "arguments"),
        );
    }
    t.add(
        "tools/call: arguments break the schema (tool error, no task)",
        call_h(Some(b"echo")),
        call(json!({"name": "echo", "arguments": {"text": 5}}), &none),
        Expect::ToolError { id: json!(41) },
    );
    t.add(
        "tools/call: required argument missing (tool error, no task)",
        call_h(Some(b"echo")),
        call(json!({"name": "echo", "arguments": {}}), &none),
        Expect::ToolError { id: json!(41) },
    );
    t.add(
        "tools/call: task-only tool without the extension (B-08)",
        call_h(Some(b"failing_job")),
        call(json!({"name": "failing_job"}), &none),
        Expect::Error {
            status: 400,
            code: -32021,
            id: id41(),
            data: Some(json!({"requiredCapabilities": {"extensions": {TASKS: {}}}})),
            mentions: None,
        },
    );
    t.add(
        "tools/list: a cursor this server never issued",
        list_h(),
        enc(&rq(
            json!(41),
            "tools/list",
            json!({"cursor": "bogus"}),
            &none,
        )),
        err_mentioning(200, -32602, id41(), "cursor"),
    );

    let task_req =
        |method: &str, params: Value, caps: &Value| enc(&rq(json!(41), method, params, caps));
    let huge = "a".repeat(100 * 1024);
    for (name, params, header) in [
        ("taskId a number", json!({"taskId": 7}), Some(b"7".to_vec())),
        (
            "taskId missing",
            json!({}),
            Some(UNKNOWN_TASK.as_bytes().to_vec()),
        ),
        (
            "taskId null",
            json!({"taskId": null}),
            Some(b"null".to_vec()),
        ),
        (
            "taskId an object",
            json!({"taskId": {"id": UNKNOWN_TASK}}),
            Some(UNKNOWN_TASK.as_bytes().to_vec()),
        ),
    ] {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let mut params = params.clone();
            if method == "tasks/update" {
                params["inputResponses"] = json!({});
            }
            t.add(
                format!("{method}: {name}"),
                set(std_headers(method, None), "mcp-name", header.as_deref()),
                task_req(method, params, &tasks),
                err_mentioning(200, -32602, id41(), "taskId"),
            );
        }
    }
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let mut params = json!({"taskId": UNKNOWN_TASK});
        if method == "tasks/update" {
            params["inputResponses"] = json!({"k": {"action": "accept", "content": {}}});
        }
        t.add(
            format!("{method}: unknown task id (T-24, T-32)"),
            std_headers(method, Some(UNKNOWN_TASK)),
            task_req(method, params.clone(), &tasks),
            err_mentioning(200, -32602, id41(), "not found"),
        );
        t.add(
            format!("{method}: without the Tasks extension (T-05)"),
            std_headers(method, Some(UNKNOWN_TASK)),
            task_req(method, params.clone(), &none),
            err(400, -32021, id41()),
        );
        let mut params = params;
        params["taskId"] = json!(huge);
        t.add(
            format!("{method}: 100 KB task id"),
            std_headers(method, Some(&huge)),
            task_req(method, params.clone(), &tasks),
            err(200, -32602, id41()),
        );
        t.add(
            format!("{method}: 100 KB task id, short Mcp-Name"),
            std_headers(method, Some("aaaa")),
            task_req(method, params, &tasks),
            err(400, -32020, id41()),
        );
        for odd in ["", "mcpt:task:*", "../../etc/passwd", "tsk_*", "tsk_\u{e9}"] {
            let mut params = json!({"taskId": odd});
            if method == "tasks/update" {
                params["inputResponses"] = json!({});
            }
            t.add(
                format!("{method}: odd task id {odd:?}"),
                set(
                    std_headers(method, None),
                    "mcp-name",
                    Some(&sentinel(odd.as_bytes())),
                ),
                task_req(method, params, &tasks),
                err(200, -32602, id41()),
            );
        }
    }
    let update = |responses: Option<Value>| {
        let mut params = json!({"taskId": UNKNOWN_TASK});
        if let Some(r) = responses {
            params["inputResponses"] = r;
        }
        task_req("tasks/update", params, &tasks)
    };
    let update_h = || std_headers("tasks/update", Some(UNKNOWN_TASK));
    for (name, responses) in [
        ("an array", Some(json!([{"action": "accept"}]))),
        ("a string", Some(json!("accept"))),
        ("null", Some(Value::Null)),
        ("a number", Some(json!(1))),
        ("missing", None),
    ] {
        t.add(
            format!("tasks/update: inputResponses {name} (T-33)"),
            update_h(),
            update(responses),
            err_mentioning(200, -32602, id41(), "inputResponses"),
        );
    }
    let many: Map<String, Value> = (0..65)
        .map(|i| (format!("k{i}"), json!({"action": "decline"})))
        .collect();
    t.add(
        "tasks/update: 65 inputResponses (T-56)",
        update_h(),
        update(Some(Value::Object(many))),
        err_mentioning(200, -32602, id41(), "inputResponses"),
    );

    let listen =
        |params: Value, caps: &Value| enc(&rq(json!(41), "subscriptions/listen", params, caps));
    let listen_h = || std_headers("subscriptions/listen", None);
    let ids_1001: Vec<String> = (0..1001).map(|i| format!("tsk_{i:032}")).collect();
    for (name, params) in [
        ("notifications missing", json!({})),
        (
            "notifications an array",
            json!({"notifications": [{"taskIds": []}]}),
        ),
        ("notifications a string", json!({"notifications": "all"})),
        ("notifications null", json!({"notifications": null})),
        (
            "taskIds not an array",
            json!({"notifications": {"taskIds": UNKNOWN_TASK}}),
        ),
        (
            "taskIds with numbers",
            json!({"notifications": {"taskIds": [1, 2]}}),
        ),
        (
            "1001 taskIds (T-56)",
            json!({"notifications": {"taskIds": ids_1001}}),
        ),
    ] {
        t.add(
            format!("subscriptions/listen: {name}"),
            listen_h(),
            listen(params, &tasks),
            err(200, -32602, id41()),
        );
    }
    t.add(
        "subscriptions/listen: taskIds without the Tasks extension",
        listen_h(),
        listen(json!({"notifications": {"taskIds": []}}), &none),
        err(400, -32021, id41()),
    );

    // --- Extra fields are tolerated -----------------------------------------------------
    let mut extra = rq(
        json!("x"),
        "tools/list",
        json!({"unknownParam": {"nested": [1, 2]}, "another": null}),
        &none,
    );
    extra["extraTopLevel"] = json!(true);
    extra["params"]["_meta"]["com.example/trace"] = json!("abc");
    extra["params"]["_meta"]["progressToken"] = json!(7);
    extra["params"]["_meta"][CAPS_KEY]["experimentalThing"] = json!({"on": true});
    t.add(
        "tolerated: unknown params, top-level and _meta fields",
        list_h(),
        enc(&extra),
        Expect::Result { id: json!("x") },
    );
    t.add(
        "tolerated: Mcp-Name on a method that needs none",
        set(list_h(), "mcp-name", Some(b"whatever\xff")),
        enc(&rq(json!("x"), "tools/list", json!({}), &none)),
        Expect::Result { id: json!("x") },
    );
    t.add(
        "tolerated: sentinel-encoded version and method headers",
        set(
            set(
                disc_h(),
                "mcp-protocol-version",
                Some(&sentinel(VERSION.as_bytes())),
            ),
            "mcp-method",
            Some(&sentinel(b"server/discover")),
        ),
        discover(json!("x")),
        Expect::Result { id: json!("x") },
    );
    t.add(
        "tolerated: Mcp-Session-Id and Last-Event-ID are ignored (B-12)",
        set(
            set(disc_h(), "mcp-session-id", Some(b"abc")),
            "last-event-id",
            Some(b"42"),
        ),
        discover(json!("x")),
        Expect::Result { id: json!("x") },
    );
    for id in [json!(""), json!(-1), json!(i64::MAX), json!("\u{1f600}")] {
        t.add(
            format!("tolerated: id {id} echoed"),
            disc_h(),
            discover(id.clone()),
            Expect::Result { id },
        );
    }
    t.add(
        "tolerated: legacy task parameter on tools/list ignored",
        list_h(),
        enc(&rq(
            json!("x"),
            "tools/list",
            json!({"task": {"ttl": 1}}),
            &none,
        )),
        Expect::Result { id: json!("x") },
    );

    // --- Notifications are accepted and ignored (B-13) ----------------------------------
    t.add(
        "notification: unknown method",
        list_h(),
        br#"{"jsonrpc":"2.0","method":"notifications/whatever"}"#.to_vec(),
        Expect::Accepted,
    );
    t.add(
        "notification: a tools/call without id runs nothing",
        std_headers("tools/call", Some("echo")),
        enc(&json!({"jsonrpc": "2.0", "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "x"},
                               "_meta": meta(&caps_tasks())}})),
        Expect::Accepted,
    );
    t.add(
        "notification: garbage params, no routing headers",
        vec![("content-type".into(), b"application/json".to_vec())],
        br#"{"jsonrpc":"2.0","method":"x","params":{"a":[1,{"b":null}]}}"#.to_vec(),
        Expect::Accepted,
    );

    // --- Transport checks before JSON (B-17, B-44; §6.2) --------------------------------
    for (name, value) in [
        ("text/plain", Some(b"text/plain".to_vec())),
        ("missing", None),
        ("invalid UTF-8", Some(b"application/json\xff".to_vec())),
        ("form", Some(b"application/x-www-form-urlencoded".to_vec())),
    ] {
        t.add(
            format!("Content-Type {name}"),
            set(disc_h(), "content-type", value.as_deref()),
            discover(json!(1)),
            err(415, -32600, None),
        );
    }
    t.add(
        "Content-Type with charset is fine",
        set(
            disc_h(),
            "content-type",
            Some(b"application/json; charset=utf-8"),
        ),
        discover(json!("x")),
        Expect::Result { id: json!("x") },
    );
    t.add(
        "Accept text/html",
        set(disc_h(), "accept", Some(b"text/html")),
        discover(json!(1)),
        err(406, -32600, None),
    );
    t.add(
        "Accept without SSE on subscriptions/listen",
        set(listen_h(), "accept", Some(b"application/json")),
        listen(json!({"notifications": {"taskIds": []}}), &tasks),
        err(406, -32600, Some(json!(41))),
    );
    t.add(
        "Origin not allowed",
        set(disc_h(), "origin", Some(b"http://evil.example.com")),
        discover(json!(1)),
        err(403, -32600, None),
    );

    t.add(
        "Accept with only invalid UTF-8 (names neither type)",
        set(disc_h(), "accept", Some(b"\xff\xfe")),
        discover(json!(1)),
        err(406, -32600, None),
    );
    let mut split_accept = set(disc_h(), "accept", Some(b"text/html"));
    split_accept.push(("accept".into(), b"application/json".to_vec()));
    t.add(
        "Accept split over two field lines (RFC 9110 §5.3: one list)",
        split_accept,
        discover(json!("x")),
        Expect::Result { id: json!("x") },
    );

    // --- Conflicting duplicate routing headers (RFC 9110 §5.3 + B-18, B-20, B-21) ------
    let mut dup = disc_h();
    dup.push(("mcp-method".into(), b"tools/call".to_vec()));
    t.add(
        "Mcp-Method twice, the second value different",
        dup,
        discover(json!(61)),
        err(400, -32020, Some(json!(61))),
    );
    let mut dup = disc_h();
    dup.push(("mcp-protocol-version".into(), b"2025-11-25".to_vec()));
    t.add(
        "MCP-Protocol-Version twice, the second value different",
        dup,
        discover(json!(61)),
        err(400, -32020, Some(json!(61))),
    );
    let mut dup = std_headers("tasks/get", Some(UNKNOWN_TASK));
    dup.push(("mcp-name".into(), b"tsk_other".to_vec()));
    t.add(
        "Mcp-Name twice, the second value different",
        dup,
        enc(&rq(
            json!(61),
            "tasks/get",
            json!({"taskId": UNKNOWN_TASK}),
            &tasks,
        )),
        err(400, -32020, Some(json!(61))),
    );

    // --- Huge bodies (MCPT_MAX_BODY_BYTES, default 1 MiB) ------------------------------
    let mut big = enc(&rq(json!(51), "tools/list", json!({}), &none));
    big.truncate(big.len() - 2);
    big.extend_from_slice(b",\"pad\":\"");
    big.extend(std::iter::repeat_n(b'a', 2 * 1024 * 1024));
    big.extend_from_slice(b"\"}}");
    t.add(
        "body of 2 MiB",
        list_h(),
        big,
        err_mentioning(413, -32600, None, "MCPT_MAX_BODY_BYTES"),
    );
    t.0
}

/// Issue 3 item 5, B-02, B-03, B-05, B-06, B-18…B-25, B-43, B-44, T-24, T-32, T-33, T-40,
/// T-41, T-53, T-56: each malformed request gets exactly the status, code and id the
/// mapping names, with a message, and no task hash or queue entry appears; a valid request
/// right after still works.
#[tokio::test]
async fn malformed_requests_get_the_specified_error_and_change_nothing() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let probe = Probe::new(ctx.gateways[0].addr);
    let before = redis_state(&ctx)?;
    let started = Instant::now();
    let cases = table();
    let mut failures = Vec::new();
    for case in &cases {
        // A transport error is retried twice: a server that answers 413 before reading a
        // huge body may reset the connection while the client is still sending it.
        let mut answer = probe.post(&case.headers, case.body.clone()).await;
        for _ in 0..2 {
            if answer.is_ok() {
                break;
            }
            answer = probe.post(&case.headers, case.body.clone()).await;
        }
        match answer {
            Err(e) => failures.push(format!("{}: request failed: {e:#}", case.name)),
            Ok(answer) => {
                let problems = judge(case, &answer);
                if !problems.is_empty() {
                    failures.push(format!(
                        "{}: {}\n    got: {}",
                        case.name,
                        problems.join("; "),
                        answer.describe()
                    ));
                }
            }
        }
    }
    println!(
        "bad-input cases tried: {} ({:.1} s)",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    let after = redis_state(&ctx)?;
    assert_eq!(
        after, before,
        "bad input changed Redis (task hashes, queue length)"
    );
    assert_eq!(probe.get("/healthz").await?, 200, "gateway still healthy");
    // A valid request still works, extra unknown fields included.
    let mut body = rq(
        json!("after"),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "still here"}, "extra": [1]}),
        &caps_none(),
    );
    body["extraTopLevel"] = json!({});
    let ok = probe
        .post(&std_headers("tools/call", Some("echo")), enc(&body))
        .await?;
    assert_eq!(ok.status, 200, "{}", ok.describe());
    assert_eq!(ok.body["id"], "after", "{}", ok.describe());
    assert!(
        ok.body["result"].to_string().contains("still here"),
        "{}",
        ok.describe()
    );
    assert!(
        failures.is_empty(),
        "{} of {} bad-input cases got the wrong answer:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The property test
// ---------------------------------------------------------------------------------------

/// xorshift64*: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn byte(&mut self) -> u8 {
        (self.next() >> 24) as u8
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A short string: ASCII, JSON-special characters, controls, non-ASCII.
    fn string(&mut self) -> String {
        const POOL: &[&str] = &[
            "a",
            "Z",
            "0",
            "-",
            "_",
            "/",
            " ",
            "\"",
            "\\",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "\u{0}",
            "\u{1}",
            "\n",
            "\t",
            "\u{e9}",
            "\u{5de5}",
            "\u{1f600}",
            "=?base64?",
            "?=",
            "tsk_",
            "tools/call",
            "tasks/get",
            "2026-07-28",
        ];
        let n = self.below(8);
        (0..n).map(|_| *self.pick(POOL)).collect()
    }

    /// A random JSON value of bounded depth.
    fn value(&mut self, depth: u32) -> Value {
        match self.below(if depth == 0 { 6 } else { 8 }) {
            0 => Value::Null,
            1 => Value::Bool(self.one_in(2)),
            2 => json!(self.next() as i64),
            3 => json!(self.below(1000) as f64 / 7.0),
            4 => json!(self.below(100)),
            5 => Value::String(self.string()),
            6 => Value::Array((0..self.below(4)).map(|_| self.value(depth - 1)).collect()),
            _ => {
                let mut m = Map::new();
                for _ in 0..self.below(4) {
                    let k = self.string();
                    let v = self.value(depth - 1);
                    m.insert(k, v);
                }
                Value::Object(m)
            }
        }
    }
}

/// Valid requests the mutations start from (none of them can run long: `greet` is
/// synchronous and instant, `failing_job` is task-only and ends after 0.5 s).
fn base_requests() -> Vec<Value> {
    let none = caps_none();
    let tasks = caps_tasks();
    vec![
        rq(json!(1), "server/discover", json!({}), &none),
        rq(json!("l"), "tools/list", json!({}), &none),
        rq(
            json!(2),
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "fuzz"}}),
            &none,
        ),
        rq(
            json!(3),
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
            &tasks,
        ),
        rq(
            json!(4),
            "tasks/get",
            json!({"taskId": UNKNOWN_TASK}),
            &tasks,
        ),
        rq(
            json!(5),
            "tasks/update",
            json!({"taskId": UNKNOWN_TASK,
                   "inputResponses": {"k": {"action": "accept", "content": {"a": 1}}}}),
            &tasks,
        ),
        rq(
            json!(6),
            "tasks/cancel",
            json!({"taskId": UNKNOWN_TASK}),
            &tasks,
        ),
        rq(
            json!(7),
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [UNKNOWN_TASK]}}),
            &tasks,
        ),
        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}),
    ]
}

/// A path to a node of a JSON value.
type Path = Vec<PathStep>;

#[derive(Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn paths(v: &Value, here: &mut Path, out: &mut Vec<Path>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                here.push(PathStep::Key(k.clone()));
                paths(child, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                here.push(PathStep::Index(i));
                paths(child, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = v;
    for step in path {
        cur = match step {
            PathStep::Key(k) => cur.get_mut(k.as_str())?,
            PathStep::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

/// The same value in another JSON type.
fn swap_type(rng: &mut Rng, v: &Value) -> Value {
    match v {
        Value::String(s) => match rng.below(4) {
            0 => json!(s.len()),
            1 => json!([s]),
            2 => json!({"value": s}),
            _ => Value::Null,
        },
        Value::Number(n) => match rng.below(3) {
            0 => json!(n.to_string()),
            1 => json!(n.as_f64().unwrap_or(0.0) + 0.5),
            _ => json!([n]),
        },
        Value::Object(m) => match rng.below(3) {
            0 => Value::Array(m.values().cloned().collect()),
            1 => json!(v.to_string()),
            _ => Value::Null,
        },
        Value::Array(a) => match rng.below(3) {
            0 => a.first().cloned().unwrap_or(Value::Null),
            1 => json!({"0": a}),
            _ => json!(a.len()),
        },
        Value::Bool(b) => json!(b.to_string()),
        Value::Null => json!({}),
    }
}

/// One structural mutation: replace, swap the type of, drop, or add a field.
fn mutate_value(rng: &mut Rng, v: &mut Value) {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let path = rng.pick(&all).clone();
    match rng.below(4) {
        0 => {
            if let Some(node) = node_mut(v, &path) {
                *node = rng.value(2);
            }
        }
        1 => {
            if let Some(node) = node_mut(v, &path) {
                *node = swap_type(rng, node);
            }
        }
        2 => {
            // Drop the node from its parent.
            if let Some((last, parent_path)) = path.split_last()
                && let Some(parent) = node_mut(v, parent_path)
            {
                match (parent, last) {
                    (Value::Object(m), PathStep::Key(k)) => {
                        m.remove(k);
                    }
                    (Value::Array(a), PathStep::Index(i)) if *i < a.len() => {
                        a.remove(*i);
                    }
                    _ => {}
                }
            }
        }
        _ => {
            if let Some(Value::Object(m)) = node_mut(v, &path) {
                let k = rng.string();
                let val = rng.value(1);
                m.insert(k, val);
            }
        }
    }
}

/// One byte-level mutation.
fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>) {
    const TOKENS: &[&[u8]] = &[
        b"\"",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\\",
        b"\\u0000",
        b"\\ud800",
        b"\xff",
        b"\xc0\xaf",
        b"null",
        b"1e400",
        b"-0",
        b"\x00",
        b"\n",
    ];
    let at = rng.below(b.len() + 1);
    match rng.below(6) {
        0 if !b.is_empty() => {
            let i = rng.below(b.len());
            b[i] ^= 1 << rng.below(8);
        }
        1 => b.insert(at, rng.byte()),
        2 if at < b.len() => {
            b.remove(at);
        }
        3 => {
            let tok = rng.pick(TOKENS);
            b.splice(at..at, tok.iter().copied());
        }
        4 => b.truncate(at),
        _ => {
            let end = (at + rng.below(16)).min(b.len());
            let chunk = b[at..end].to_vec();
            b.splice(at..at, chunk);
        }
    }
}

/// A header value: `good` as is or sentinel-wrapped, or something random.
fn header_value(rng: &mut Rng, good: &str) -> Option<Vec<u8>> {
    match rng.below(12) {
        0 => None,
        1 => Some(sentinel(good.as_bytes())),
        2 => Some(sentinel(rng.string().as_bytes())),
        3 => {
            Some(format!("=?base64?{}!?=", rng.string().replace(['\u{0}', '\n'], "")).into_bytes())
        }
        4 => {
            // Random visible bytes, including obs-text (invalid UTF-8).
            let n = rng.below(20);
            Some(
                (0..n)
                    .map(|_| match rng.byte() {
                        b if b < 0x20 || b == 0x7f => b'x',
                        b => b,
                    })
                    .collect(),
            )
        }
        5 => Some(good.to_uppercase().into_bytes()),
        _ => Some(good.as_bytes().to_vec()),
    }
}

/// What one random case was and what came back, for the report.
struct Outcome {
    created_task: bool,
    maybe_created: bool,
}

/// Check one answer for the invariants; `Err` describes the violation.
fn check_random_answer(sent: &[u8], a: &Answer) -> Result<Outcome, String> {
    let sent_json: Option<Value> = serde_json::from_slice(sent).ok();
    let method = sent_json
        .as_ref()
        .and_then(|v| v.get("method"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut outcome = Outcome {
        created_task: false,
        maybe_created: false,
    };
    if a.status >= 500 {
        return Err("5xx".into());
    }
    match a.status {
        202 => {
            if !a.raw.is_empty() {
                return Err("202 with a body".into());
            }
        }
        200 if a.content_type.starts_with("text/event-stream") => {
            if a.body["method"] != "notifications/subscriptions/acknowledged" {
                return Err("a stream whose first message is not the acknowledgement".into());
            }
        }
        200 => {
            if a.body["jsonrpc"] != "2.0" {
                return Err("200 without a JSON-RPC body".into());
            }
            if a.body.get("error").is_some() {
                let problems = error_shape_problems(&a.body);
                if !problems.is_empty() {
                    return Err(problems.join("; "));
                }
                let code = a.body["error"]["code"].as_i64().unwrap_or_default();
                if code == -32603 && method != "tools/call" {
                    return Err("internal error (-32603) answering bad input".into());
                }
                if ![-32602, -32603].contains(&code) {
                    return Err(format!("in-band error code {code}"));
                }
                // A synchronous call can fail after creating its task.
                outcome.maybe_created = method == "tools/call" && code == -32603;
            } else {
                let result = &a.body["result"];
                if !result.is_object() {
                    return Err("200 with neither result nor error".into());
                }
                if method == "tools/call" {
                    let bad_args = result["isError"] == true
                        && result["content"][0]["text"]
                            .as_str()
                            .unwrap_or("")
                            .starts_with("invalid arguments");
                    outcome.created_task = result["resultType"] == "task";
                    outcome.maybe_created = !bad_args && result["resultType"] != "input_required";
                }
            }
        }
        _ => {
            let problems = error_shape_problems(&a.body);
            if !problems.is_empty() {
                return Err(format!(
                    "non-2xx without a JSON-RPC error: {}",
                    problems.join("; ")
                ));
            }
            let code = a.body["error"]["code"].as_i64().unwrap_or_default();
            let fits = match a.status {
                400 => [-32700, -32600, -32602, -32020, -32021, -32022].contains(&code),
                404 => code == -32601,
                403 | 406 | 413 | 415 => code == -32600,
                _ => false,
            };
            if !fits {
                return Err(format!("HTTP {} with code {code}", a.status));
            }
        }
    }
    Ok(outcome)
}

/// Issue 3 item 5 (property): random bodies — random bytes, byte and structure mutations of
/// valid requests, random routing header values — never get a 5xx, never hang (5 s per
/// request), every non-2xx carries a JSON-RPC error body with a code that fits its status,
/// the gateway stays healthy, and Redis only gains the tasks of calls it accepted.
#[tokio::test]
async fn random_bodies_never_produce_a_5xx_or_a_hang() -> Result<()> {
    let seed: u64 = std::env::var("BAD_INPUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6d63_7074_6261_6431);
    let cases: usize = std::env::var("BAD_INPUT_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let ctx = TestContext::start(1, 1).await?;
    let probe = Probe::new(ctx.gateways[0].addr);
    let before = redis_state(&ctx)?;
    let bases = base_requests();
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    let (mut tasks_made, mut maybe_made) = (0usize, 0usize);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let started = Instant::now();
    for case in 0..cases {
        let base = rng.pick(&bases).clone();
        let strategy = rng.below(5);
        let mut value = base.clone();
        let body = match strategy {
            0 => (0..rng.below(300)).map(|_| rng.byte()).collect(),
            1 | 2 => {
                for _ in 0..1 + rng.below(3) {
                    mutate_value(&mut rng, &mut value);
                }
                let mut b = enc(&value);
                if strategy == 2 {
                    for _ in 0..1 + rng.below(4) {
                        mutate_bytes(&mut rng, &mut b);
                    }
                }
                b
            }
            3 => {
                let mut b = enc(&value);
                for _ in 0..1 + rng.below(6) {
                    mutate_bytes(&mut rng, &mut b);
                }
                b
            }
            // Valid body, random headers only.
            _ => enc(&value),
        };
        // Routing headers follow the (mutated) body, so mutations reach the deep checks;
        // each is then randomly damaged.
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
        let method = text(value.get("method"));
        let name = value
            .get("params")
            .map(|p| {
                let n = text(p.get("name"));
                if n.is_empty() {
                    text(p.get("taskId"))
                } else {
                    n
                }
            })
            .unwrap_or_default();
        let damage = strategy == 4 || rng.one_in(3);
        let mut headers = std_headers(&method, None);
        if !name.is_empty() {
            headers.push(("mcp-name".into(), name.as_bytes().to_vec()));
        }
        if damage {
            for (header, good) in [
                ("mcp-protocol-version", VERSION.to_owned()),
                ("mcp-method", method.clone()),
                ("mcp-name", name.clone()),
            ] {
                if rng.one_in(2) {
                    headers = set(headers, header, header_value(&mut rng, &good).as_deref());
                }
            }
            if rng.one_in(8) {
                let options: [&[u8]; 5] = [
                    b"text/plain",
                    b"application/json; charset=utf-8",
                    b"application/JSON",
                    b"",
                    b"application/json\xff",
                ];
                let ct = *rng.pick(&options);
                headers = set(headers, "content-type", Some(ct));
            }
            if rng.one_in(8) {
                let options: [&[u8]; 5] = [
                    b"application/json",
                    b"text/event-stream",
                    b"*/*",
                    b"text/html",
                    b"",
                ];
                let accept = *rng.pick(&options);
                headers = set(headers, "accept", Some(accept));
            }
        }
        // Values hyper cannot send (control bytes) are dropped, as no HTTP client sends them.
        headers.retain(|(_, v)| HeaderValue::from_bytes(v).is_ok());
        match probe.post(&headers, body.clone()).await {
            Err(e) => failures.push(format!(
                "case {case}: {e:#}\n    body: {}",
                String::from_utf8_lossy(&body)
            )),
            Ok(answer) => {
                *statuses.entry(answer.status).or_default() += 1;
                match check_random_answer(&body, &answer) {
                    Ok(o) => {
                        tasks_made += usize::from(o.created_task);
                        maybe_made += usize::from(o.maybe_created || o.created_task);
                    }
                    Err(why) => failures.push(format!(
                        "case {case}: {why}\n    headers: {:?}\n    body: {}\n    got: {}",
                        headers
                            .iter()
                            .map(|(k, v)| format!("{k}: {}", String::from_utf8_lossy(v)))
                            .collect::<Vec<_>>(),
                        String::from_utf8_lossy(&body),
                        answer.describe()
                    )),
                }
            }
        }
    }
    println!(
        "bad-input property cases: {cases}, seed: {seed} (BAD_INPUT_SEED), {:.1} s, statuses {statuses:?}, tasks created {tasks_made}..={maybe_made}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(probe.get("/healthz").await?, 200, "gateway still healthy");
    let after = redis_state(&ctx)?;
    let grown = after.tasks.saturating_sub(before.tasks);
    assert!(
        after.tasks >= before.tasks && (tasks_made..=maybe_made).contains(&grown),
        "task hashes went from {} to {} but accepted calls account for {tasks_made}..={maybe_made} (seed {seed})",
        before.tasks,
        after.tasks
    );
    assert!(
        after.queued <= before.queued + maybe_made as u64,
        "queue grew from {} to {} (seed {seed})",
        before.queued,
        after.queued
    );
    // And a valid request still works.
    let ok = probe
        .post(
            &std_headers("tools/list", None),
            enc(&rq(json!("after"), "tools/list", json!({}), &caps_none())),
        )
        .await?;
    assert_eq!(ok.status, 200, "{}", ok.describe());
    assert!(
        failures.is_empty(),
        "{} of {cases} random cases broke an invariant (seed {seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    ctx.cleanup().await;
    Ok(())
}
