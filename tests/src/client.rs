//! The one MCP-over-HTTP client of the tests and tools: [`Client`] (raw requests with the
//! standard headers, JSON-RPC helpers, listen streams), its [`Reply`], and the `_meta` and
//! capabilities a request declares.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::sse::SseStream;
use crate::{TASKS, VERSION, poll_until, truncate};

/// Bound on one HTTP exchange: the response head, then the whole body.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Client capabilities declaring nothing.
pub fn caps_none() -> Value {
    json!({})
}

/// Client capabilities declaring the Tasks extension and form elicitation.
pub fn caps_tasks() -> Value {
    json!({"elicitation": {}, "extensions": {TASKS: {}}})
}

/// `params._meta` for a request with `caps`.
pub fn meta(caps: &Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-tasks-e2e", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// An HTTP response, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: hyper::HeaderMap,
    /// Body bytes.
    pub raw: Bytes,
    /// Body as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

impl Reply {
    /// Read a whole response (its body within [`REQUEST_TIMEOUT`]).
    ///
    /// # Errors
    /// The body fails or does not end in time.
    pub async fn read(res: hyper::Response<Incoming>) -> Result<Reply> {
        read_reply(res).await
    }

    /// `error.code`, if the body is an error response.
    pub fn error_code(&self) -> Option<i64> {
        self.body["error"]["code"].as_i64()
    }
}

/// A raw MCP-over-HTTP client.
#[derive(Clone)]
pub struct Client {
    addr: SocketAddr,
    /// Where [`Client::post_raw`] and the requests built on it go.
    path: Arc<str>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
    /// Sent as `Authorization: Bearer` unless a request sets its own.
    token: Option<String>,
}

static NEXT_ID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);

impl Client {
    /// A client of the gateway at `addr`.
    pub fn new(addr: SocketAddr) -> Client {
        Client {
            addr,
            path: "/mcp".into(),
            http: HyperClient::builder(TokioExecutor::new()).build_http(),
            token: None,
        }
    }

    /// A client for many concurrent requests (the benchmark's): one keep-alive pool with
    /// `TCP_NODELAY`, idle connections kept 60 s.
    pub fn for_load(addr: SocketAddr) -> Client {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Client {
            http: HyperClient::builder(TokioExecutor::new())
                .pool_max_idle_per_host(usize::MAX)
                .pool_idle_timeout(Duration::from_secs(60))
                .build(connector),
            ..Client::new(addr)
        }
    }

    /// A client speaking HTTP/2 only, without TLS (prior knowledge, as `h2c` clients do).
    pub fn over_http2(addr: SocketAddr) -> Client {
        Client {
            http: HyperClient::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
            ..Client::new(addr)
        }
    }

    /// The same client, posting MCP requests to `path` instead of `/mcp`.
    pub fn with_path(&self, path: &str) -> Client {
        Client {
            path: path.into(),
            ..self.clone()
        }
    }

    /// Wait (up to 20 s) until `tools/list` names `tool`: a worker offering it advertised.
    pub async fn wait_for_tool(&self, tool: &str) -> Result<()> {
        self.wait_for_tools(&[tool], Duration::from_secs(20)).await
    }

    /// Wait (up to `within`) until `tools/list` names every one of `tools` (any tool at all
    /// when `tools` is empty).
    pub async fn wait_for_tools(&self, tools: &[&str], within: Duration) -> Result<()> {
        poll_until(within, || async {
            let r = self
                .request("tools/list", json!({}), &caps_none())
                .await
                .ok()?;
            let listed = r.body["result"]["tools"].as_array()?;
            let ok = if tools.is_empty() {
                !listed.is_empty()
            } else {
                tools
                    .iter()
                    .all(|tool| listed.iter().any(|t| t["name"] == *tool))
            };
            ok.then_some(())
        })
        .await
        .with_context(|| match tools {
            [] => "no tool ever appeared in tools/list".to_owned(),
            [tool] => format!("{tool} never appeared in tools/list"),
            _ => format!("{} never all appeared in tools/list", tools.join(", ")),
        })
    }

    /// The same client, authenticating with bearer `token`.
    pub fn with_token(&self, token: &str) -> Client {
        Client {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    /// POST `body` to `/mcp` (or the client's path) with exactly `headers` (plus Host).
    pub async fn post_raw(
        &self,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<Reply> {
        let res = self
            .send_raw("POST", &self.path, headers, body.into())
            .await?;
        read_reply(res).await
    }

    /// Send any method to any path.
    pub async fn send_raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<hyper::Response<Incoming>> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(token) = &self.token
            && !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req.body(Full::new(body))?;
        match tokio::time::timeout(REQUEST_TIMEOUT, self.http.request(req)).await {
            Err(_) => bail!("no response within {REQUEST_TIMEOUT:?}"),
            Ok(res) => Ok(res?),
        }
    }

    /// The standard headers for `method` (and `Mcp-Name` when given).
    pub fn headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'static str, &'a str)> {
        let mut h = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", VERSION),
            ("mcp-method", method),
        ];
        if let Some(n) = name {
            h.push(("mcp-name", n));
        }
        h
    }

    /// A well-formed request: standard headers, `_meta` with `caps`, `Mcp-Name` derived
    /// from `params.name` / `params.uri` / `params.taskId` where the method needs one.
    pub async fn request(&self, method: &str, mut params: Value, caps: &Value) -> Result<Reply> {
        params["_meta"] = meta(caps);
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str().map(str::to_owned),
            "resources/read" => params["uri"].as_str().map(str::to_owned),
            "tasks/get" | "tasks/update" | "tasks/cancel" => {
                params["taskId"].as_str().map(str::to_owned)
            }
            _ => None,
        };
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let headers = Client::headers(method, name.as_deref());
        self.post_raw(&headers, serde_json::to_vec(&body)?).await
    }

    /// `tools/call`.
    pub async fn call(&self, tool: &str, args: Value, caps: &Value) -> Result<Reply> {
        self.request("tools/call", json!({"name": tool, "arguments": args}), caps)
            .await
    }

    /// `tools/call` with the idempotency key `key` in `_meta`.
    pub async fn call_keyed(
        &self,
        tool: &str,
        args: Value,
        caps: &Value,
        key: &str,
    ) -> Result<Reply> {
        self.call_with_meta(
            tool,
            args,
            caps,
            "io.github.mcp-tasks/idempotencyKey",
            json!(key),
        )
        .await
    }

    /// `tools/call` with `_meta[name] = value` besides the usual members.
    pub async fn call_with_meta(
        &self,
        tool: &str,
        args: Value,
        caps: &Value,
        name: &str,
        value: Value,
    ) -> Result<Reply> {
        let mut m = meta(caps);
        m[name] = value;
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args, "_meta": m},
        });
        let headers = Client::headers("tools/call", Some(tool));
        self.post_raw(&headers, serde_json::to_vec(&body)?).await
    }

    /// `tools/call` declaring the extension; returns the new task id (fails if not a task).
    pub async fn start_task(&self, tool: &str, args: Value) -> Result<String> {
        let r = self.call(tool, args, &caps_tasks()).await?;
        let id = r.body["result"]["taskId"]
            .as_str()
            .ok_or_else(|| anyhow!("not a task: {}", r.body))?;
        Ok(id.to_owned())
    }

    /// `tasks/get` result (fails on an error response).
    pub async fn get(&self, task_id: &str) -> Result<Value> {
        let r = self
            .request("tasks/get", json!({"taskId": task_id}), &caps_tasks())
            .await?;
        if r.body.get("error").is_some() {
            bail!("tasks/get {task_id}: {}", r.body);
        }
        Ok(r.body["result"].clone())
    }

    /// Poll `tasks/get` until `status` (up to `within`).
    pub async fn wait_status(
        &self,
        task_id: &str,
        status: &str,
        within: Duration,
    ) -> Result<Value> {
        let deadline = Instant::now() + within;
        loop {
            let t = self.get(task_id).await?;
            if t["status"] == status {
                return Ok(t);
            }
            if Instant::now() > deadline {
                bail!("task {task_id} never reached {status} within {within:?}; last seen {t}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `tasks/update`.
    pub async fn update(&self, task_id: &str, responses: Value) -> Result<Reply> {
        self.request(
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": responses}),
            &caps_tasks(),
        )
        .await
    }

    /// `tasks/cancel`.
    pub async fn cancel(&self, task_id: &str) -> Result<Reply> {
        self.request("tasks/cancel", json!({"taskId": task_id}), &caps_tasks())
            .await
    }

    /// POST `body` with exactly `headers` and open the SSE stream it answers with.
    pub async fn post_stream(&self, headers: &[(&str, &str)], body: &Value) -> Result<SseStream> {
        self.post_stream_raw(headers, serde_json::to_vec(body)?.into())
            .await
    }

    /// [`Client::post_stream`] with a body already serialized.
    pub async fn post_stream_raw(
        &self,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<SseStream> {
        let res = self.send_raw("POST", &self.path, headers, body).await?;
        let sse = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !sse {
            let r = read_reply(res).await?;
            bail!(
                "the POST opened no SSE stream: HTTP {} {}",
                r.status,
                truncate(&String::from_utf8_lossy(&r.raw), 300)
            );
        }
        Ok(SseStream::from_response(res))
    }

    /// Open a `subscriptions/listen` stream for `task_ids` with request id `id` (a string or
    /// an integer).
    pub async fn listen(&self, id: impl Into<Value>, task_ids: &[&str]) -> Result<SseStream> {
        let id: Value = id.into();
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": task_ids}, "_meta": meta(&caps_tasks())}
        });
        self.post_stream(&Client::headers("subscriptions/listen", None), &body)
            .await
            .map_err(|e| anyhow!("listen: {e}"))
    }
}

async fn read_reply(res: hyper::Response<Incoming>) -> Result<Reply> {
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let raw = match tokio::time::timeout(REQUEST_TIMEOUT, res.into_body().collect()).await {
        Err(_) => bail!("HTTP {status}: body not complete within {REQUEST_TIMEOUT:?}"),
        Ok(body) => body?.to_bytes(),
    };
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Ok(Reply {
        status,
        headers,
        raw,
        body,
    })
}
