//! The Streamable HTTP transport (2025 revisions): every message is a POST to the
//! endpoint; a request's answer comes back as one JSON body or as an SSE stream carrying
//! the server's notifications and requests for that call before the response. The
//! `Mcp-Session-Id` from `initialize` rides on every later POST, `MCP-Protocol-Version`
//! after the handshake; closing the session is a DELETE.
//!
//! The requests go out on the catalog's client (`catalog/web.rs`), `http://` or
//! `https://`. No standalone GET stream and no resumption of a broken SSE stream: a call
//! whose stream breaks fails.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_protocol::sse::SseDecoder;
use serde_json::Value;

use super::session::Core;
use mcp_tasks_shared::web;

/// Largest JSON body read from the upstream.
const MAX_BODY: usize = 16 << 20;

/// Why a message to a Streamable HTTP upstream failed, or its transport could not be made.
#[derive(Debug, thiserror::Error)]
pub(super) enum HttpError {
    /// The entry's `url` is not a URI.
    #[error("bad url {url}: {source}")]
    BadUrl {
        url: String,
        source: hyper::http::uri::InvalidUri,
    },
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] web::TlsSetup),
    /// The request could not be built.
    #[error(transparent)]
    Request(#[from] hyper::http::Error),
    /// The POST got no answer (the client's error, boxed: its type is hyper-util's).
    #[error("POST {url}: {source}")]
    Post {
        url: hyper::Uri,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// HTTP 404 on a session we had: the server forgot it.
    #[error("the upstream ended the session (HTTP 404)")]
    SessionEnded,
    /// Another unsuccessful status, with the start of its body.
    #[error("HTTP {status}: {body}")]
    Status {
        status: hyper::StatusCode,
        body: String,
    },
    /// A JSON answer that does not parse.
    #[error("the upstream answered with JSON that does not parse: {0}")]
    Json(#[source] serde_json::Error),
    /// The SSE body broke off.
    #[error("the event stream broke: {0}")]
    StreamBroke(#[source] hyper::Error),
    /// One SSE event over [`MAX_BODY`].
    #[error("an event from the upstream is too large")]
    EventTooLarge,
    /// A JSON body over [`MAX_BODY`].
    #[error("cannot read the upstream's answer: length limit exceeded")]
    BodyTooLong,
    /// A JSON body that broke off.
    #[error("cannot read the upstream's answer: {0}")]
    Body(#[source] hyper::Error),
    /// The answer to a request ended without its response.
    #[error("the upstream's answer ended without a response")]
    NoResponse,
}

/// A Streamable HTTP upstream. Cheap to clone.
#[derive(Clone)]
pub(super) struct Http {
    inner: Arc<Inner>,
}

struct Inner {
    url: hyper::Uri,
    client: web::Client,
    session_id: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    core: Arc<Core>,
}

impl Http {
    /// A transport for `url` feeding `core`; nothing is sent yet.
    pub(super) fn new(url: &str, core: Arc<Core>) -> Result<Http, HttpError> {
        let url: hyper::Uri = url.parse().map_err(|source| HttpError::BadUrl {
            url: url.to_owned(),
            source,
        })?;
        Ok(Http {
            inner: Arc::new(Inner {
                url,
                client: web::client()?,
                session_id: Mutex::default(),
                version: Mutex::default(),
                core,
            }),
        })
    }

    /// The negotiated version, sent as `MCP-Protocol-Version` from now on.
    pub(super) fn set_version(&self, version: &str) {
        if let Ok(mut v) = self.inner.version.lock() {
            *v = Some(version.to_owned());
        }
    }

    fn request(&self, method: &str, body: Bytes) -> Result<hyper::Request<Full<Bytes>>, HttpError> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(self.inner.url.clone())
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json");
        if let Some(id) = self.inner.session_id.lock().ok().and_then(|s| s.clone()) {
            req = req.header("mcp-session-id", id);
        }
        if let Some(v) = self.inner.version.lock().ok().and_then(|s| s.clone()) {
            req = req.header("mcp-protocol-version", v);
        }
        Ok(req.body(Full::new(body))?)
    }

    /// Send one message. A request's answer is read in the background (so a long call
    /// does not hold the sender); a notification or response is sent before returning,
    /// which keeps `notifications/initialized` ahead of the next request.
    pub(super) async fn send(&self, message: Value) {
        let request_id = match (message.get("method"), message.get("id")) {
            (Some(_), Some(id)) => id.as_i64(),
            _ => None,
        };
        let body = Bytes::from(message.to_string());
        let this = self.clone();
        let exchange = async move {
            let outcome = this.exchange(body).await;
            if let Some(id) = request_id {
                // A no-op when the answer came; otherwise the caller would wait forever.
                let why = outcome.err().unwrap_or(HttpError::NoResponse);
                this.inner
                    .core
                    .fail(id, ErrorObject::new(INTERNAL_ERROR, why.to_string()));
            }
        };
        if request_id.is_some() {
            tokio::spawn(exchange);
        } else {
            exchange.await;
        }
    }

    /// POST `body` and route what comes back.
    async fn exchange(&self, body: Bytes) -> Result<(), HttpError> {
        let req = self.request("POST", body)?;
        let res = self
            .inner
            .client
            .request(req)
            .await
            .map_err(|e| HttpError::Post {
                url: self.inner.url.clone(),
                source: Box::new(e),
            })?;
        let status = res.status();
        if let Some(id) = res
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            && let Ok(mut s) = self.inner.session_id.lock()
            && s.is_none()
        {
            *s = Some(id.to_owned());
        }
        if status == hyper::StatusCode::NOT_FOUND
            && self.inner.session_id.lock().is_ok_and(|s| s.is_some())
        {
            self.inner.core.close(HttpError::SessionEnded.to_string());
            return Err(HttpError::SessionEnded);
        }
        if !status.is_success() {
            let text = read_all(res.into_body()).await.unwrap_or_default();
            let text: String = String::from_utf8_lossy(&text).chars().take(200).collect();
            return Err(HttpError::Status {
                status,
                body: text.trim().to_owned(),
            });
        }
        let sse = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if sse {
            self.read_events(res.into_body()).await
        } else if status == hyper::StatusCode::ACCEPTED || status == hyper::StatusCode::NO_CONTENT {
            Ok(())
        } else {
            let bytes = read_all(res.into_body()).await?;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            let value: Value = serde_json::from_slice(&bytes).map_err(HttpError::Json)?;
            match value {
                Value::Array(list) => list.into_iter().for_each(|m| self.route(m)),
                one => self.route(one),
            }
            Ok(())
        }
    }

    /// Read an SSE body, routing each event's JSON as it arrives.
    async fn read_events(&self, mut body: Incoming) -> Result<(), HttpError> {
        let mut events = SseDecoder::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(HttpError::StreamBroke)?;
            let Ok(chunk) = frame.into_data() else {
                continue;
            };
            events.push(&chunk);
            while let Some(data) = events.next_data() {
                if let Ok(v) = serde_json::from_str::<Value>(&data) {
                    self.route(v);
                }
            }
            if events.buffered() > MAX_BODY {
                return Err(HttpError::EventTooLarge);
            }
        }
        Ok(())
    }

    /// Give one message to the session; send its immediate reply (`ping`) if any.
    fn route(&self, message: Value) {
        if let Some(reply) = self.inner.core.dispatch(message) {
            let this = self.clone();
            tokio::spawn(async move {
                let _ = this.exchange(Bytes::from(reply.to_string())).await;
            });
        }
    }

    /// End the HTTP session (DELETE), best effort.
    pub(super) async fn delete(self) {
        if self.inner.session_id.lock().is_ok_and(|s| s.is_none()) {
            return;
        }
        if let Ok(req) = self.request("DELETE", Bytes::new()) {
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                self.inner.client.request(req),
            )
            .await;
        }
    }
}

/// The whole body, at most [`MAX_BODY`] bytes.
async fn read_all(body: Incoming) -> Result<Vec<u8>, HttpError> {
    match web::read_bounded(body, MAX_BODY).await {
        Ok((bytes, false)) => Ok(bytes),
        Ok((_, true)) => Err(HttpError::BodyTooLong),
        Err(e) => Err(HttpError::Body(e)),
    }
}
