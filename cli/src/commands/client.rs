//! A small MCP-over-HTTP client: one JSON-RPC request per POST with the routing headers of
//! the 2026-07-28 transport (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), `_meta`
//! declaring the client's capabilities, and an SSE reader for `subscriptions/listen`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use mcp_tasks_shared::protocol::sse::SseDecoder;
use mcp_tasks_shared::web;
use serde_json::{Value, json};

/// The protocol revision spoken.
pub(crate) const PROTOCOL_VERSION: &str = "2026-07-28";
/// The Tasks extension id.
pub(crate) const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A JSON-RPC error object, or a transport failure rendered as one line.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// The server answered with a JSON-RPC error.
    Rpc {
        /// `error.code`.
        code: i64,
        /// `error.message`.
        message: String,
    },
    /// The server could not be reached or answered something that is not JSON-RPC.
    Transport(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Rpc { code, message } => write!(f, "error {code}: {message}"),
            CallError::Transport(why) => f.write_str(why),
        }
    }
}

/// What a request declares in `_meta.clientCapabilities`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    /// Declare the Tasks extension.
    pub(crate) tasks: bool,
    /// Declare form elicitation.
    pub(crate) elicitation: bool,
}

impl Caps {
    fn to_json(self) -> Value {
        let mut caps = serde_json::Map::new();
        if self.elicitation {
            caps.insert("elicitation".into(), json!({}));
        }
        if self.tasks {
            caps.insert("extensions".into(), json!({ TASKS: {} }));
        }
        Value::Object(caps)
    }
}

/// Capabilities for the `tasks/*` methods and listening.
pub(crate) const TASK_CAPS: Caps = Caps {
    tasks: true,
    elicitation: true,
};

/// A client of one MCP endpoint.
#[derive(Clone)]
pub(crate) struct Client {
    url: hyper::Uri,
    http: web::Client,
    /// `MCPT_TOKEN`: sent as `Authorization: Bearer` when set.
    token: Option<String>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// How long a request other than `tools/call` may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Client {
    /// A client of `url` (`http://HOST:PORT/PATH` or `https://…`); `Err` says what is wrong
    /// with it.
    pub(crate) fn new(url: &str) -> Result<Client, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(format!("bad URL {url:?}: expected http://HOST:PORT/mcp"));
        }
        if uri.host().is_none() {
            return Err(format!("bad URL {url:?}: no host"));
        }
        Ok(Client {
            url: uri,
            http: web::client().map_err(|e| e.to_string())?,
            token: std::env::var("MCPT_TOKEN")
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
        })
    }

    fn build(
        &self,
        method: &str,
        name: Option<&str>,
        mut params: Value,
        caps: Caps,
        id: Value,
    ) -> Result<hyper::Request<Full<Bytes>>, CallError> {
        let given = params.get_mut("_meta").map(Value::take);
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-tasks-cli", "version": env!("CARGO_PKG_VERSION")},
            "io.modelcontextprotocol/clientCapabilities": caps.to_json(),
        });
        // What the caller put in `_meta` (an idempotency key) goes along.
        if let Some(Value::Object(given)) = given {
            for (k, v) in given {
                params["_meta"][k] = v;
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut req = hyper::Request::post(self.url.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .header("mcp-method", header_value(method));
        if let Some(name) = name {
            req = req.header("mcp-name", header_value(name));
        }
        if let Some(token) = &self.token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let bytes = serde_json::to_vec(&body).map_err(|e| CallError::Transport(e.to_string()))?;
        req.body(Full::new(Bytes::from(bytes)))
            .map_err(|e| CallError::Transport(format!("cannot build the request: {e}")))
    }

    async fn send(
        &self,
        req: hyper::Request<Full<Bytes>>,
    ) -> Result<hyper::Response<Incoming>, CallError> {
        self.http.request(req).await.map_err(|e| {
            // The innermost cause says it best ("Connection refused (os error 111)").
            let mut cause: &dyn std::error::Error = &e;
            while let Some(s) = cause.source() {
                cause = s;
            }
            CallError::Transport(format!("cannot reach {}: {cause}", self.url))
        })
    }

    /// `GET` a console API path (`/console/api/…`) of this endpoint's gateway, with the
    /// bearer token; the JSON answer, or one line saying what went wrong.
    pub(crate) async fn console_get(&self, path_and_query: &str) -> Result<Value, String> {
        let base = format!(
            "{}://{}",
            self.url.scheme_str().unwrap_or("http"),
            self.url.authority().map_or("", |a| a.as_str())
        );
        let url = format!("{base}{path_and_query}");
        let mut req = hyper::Request::get(&url).header("accept", "application/json");
        if let Some(token) = &self.token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let exchange = async {
            let res = self.send(req).await.map_err(|e| e.to_string())?;
            let status = res.status();
            let body = res
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("{url}: the response broke off: {e}"))?;
            Ok::<_, String>((status, body.to_bytes()))
        };
        let (status, raw) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("{url}: no answer within {}s", REQUEST_TIMEOUT.as_secs()))??;
        if status == hyper::StatusCode::NOT_FOUND && !raw.starts_with(b"{") {
            return Err(format!(
                "{base} has no console for this caller: is MCPT_CONSOLE=on there, and is \
                 MCPT_TOKEN a token of a principal in MCPT_CONSOLE_PRINCIPALS?"
            ));
        }
        let body: Value = serde_json::from_slice(&raw).map_err(|_| {
            format!(
                "{url}: HTTP {status} without JSON: {}",
                String::from_utf8_lossy(&raw)
                    .trim()
                    .chars()
                    .take(200)
                    .collect::<String>()
            )
        })?;
        if !status.is_success() {
            return Err(format!(
                "{url}: HTTP {status}: {}",
                body["error"].as_str().unwrap_or("(no message)")
            ));
        }
        Ok(body)
    }

    /// Send one request and return its `result`. `Mcp-Name` is derived from the params for
    /// `tools/call` (`name`) and `tasks/*` (`taskId`). `timeout`: `None` waits as long as
    /// the server takes.
    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
        caps: Caps,
        timeout: Option<Duration>,
    ) -> Result<Value, CallError> {
        let name = match method {
            "tools/call" => params["name"].as_str().map(str::to_owned),
            m if m.starts_with("tasks/") => params["taskId"].as_str().map(str::to_owned),
            _ => None,
        };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let req = self.build(method, name.as_deref(), params, caps, json!(id))?;
        let exchange = async {
            let res = self.send(req).await?;
            let status = res.status();
            let body = res.into_body().collect().await.map_err(|e| {
                CallError::Transport(format!("{method}: the response broke off: {e}"))
            })?;
            Ok::<_, CallError>((status, body.to_bytes()))
        };
        let (status, raw) = match timeout {
            Some(t) => tokio::time::timeout(t, exchange).await.map_err(|_| {
                CallError::Transport(format!("{method}: no answer within {}s", t.as_secs()))
            })??,
            None => exchange.await?,
        };
        let body: Value = serde_json::from_slice(&raw).map_err(|_| {
            let text = String::from_utf8_lossy(&raw);
            CallError::Transport(format!(
                "{method}: HTTP {status} without a JSON-RPC answer: {}",
                text.trim().chars().take(200).collect::<String>()
            ))
        })?;
        if let Some(err) = body.get("error") {
            return Err(CallError::Rpc {
                code: err["code"].as_i64().unwrap_or(0),
                message: err["message"].as_str().unwrap_or("(no message)").to_owned(),
            });
        }
        match body.get("result") {
            Some(r) => Ok(r.clone()),
            None => Err(CallError::Transport(format!(
                "{method}: HTTP {status}, neither result nor error in {body}"
            ))),
        }
    }

    /// Open `subscriptions/listen` for `task_ids`; the stream's first message (the
    /// acknowledgement) is still unread.
    pub(crate) async fn listen(&self, task_ids: &[String]) -> Result<SseStream, CallError> {
        let id = format!("cli-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let req = self.build(
            "subscriptions/listen",
            None,
            json!({"notifications": {"taskIds": task_ids}}),
            TASK_CAPS,
            json!(id),
        )?;
        let res = tokio::time::timeout(REQUEST_TIMEOUT, self.send(req))
            .await
            .map_err(|_| CallError::Transport("subscriptions/listen: no answer".into()))??;
        let is_sse = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            let status = res.status();
            let raw = tokio::time::timeout(REQUEST_TIMEOUT, res.into_body().collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
            return Err(match body.get("error") {
                Some(err) => CallError::Rpc {
                    code: err["code"].as_i64().unwrap_or(0),
                    message: err["message"].as_str().unwrap_or("(no message)").to_owned(),
                },
                None => CallError::Transport(format!(
                    "subscriptions/listen: HTTP {status} without a stream"
                )),
            });
        }
        Ok(SseStream {
            body: res.into_body(),
            events: SseDecoder::new(),
        })
    }
}

/// A header value: plain when it is printable ASCII without surrounding blanks, else the
/// `=?base64?…?=` form of the transport.
fn header_value(text: &str) -> String {
    let plain = text.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && text.trim() == text
        && !text.starts_with("=?base64?");
    if plain {
        text.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text)
        )
    }
}

/// An open SSE response carrying JSON-RPC messages.
pub(crate) struct SseStream {
    body: Incoming,
    events: SseDecoder,
}

impl SseStream {
    /// The next JSON-RPC message, or `None` when the stream ended (or broke). Events whose
    /// data is not JSON are skipped.
    pub(crate) async fn next(&mut self) -> Option<Value> {
        loop {
            while let Some(data) = self.events.next_data() {
                if let Ok(v) = serde_json::from_str(&data) {
                    return Some(v);
                }
            }
            let frame = self.body.frame().await?.ok()?;
            if let Ok(data) = frame.into_data() {
                self.events.push(&data);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_encoded_only_when_needed() {
        assert_eq!(header_value("tools/call"), "tools/call");
        assert_eq!(header_value("tsk_abc-1"), "tsk_abc-1");
        assert_eq!(header_value("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(header_value(" x"), "=?base64?IHg=?=");
    }
}
