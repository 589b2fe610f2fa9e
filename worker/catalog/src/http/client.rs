//! One exchange with an `[[http]]` tool's service: a request on the catalog's client
//! (`catalog/web.rs`) carrying the entry's headers to its own origin only, and the answer
//! read up to `max_output` bytes within [`REQUEST_TIMEOUT`].
//! What an answer means is `catalog/http.rs`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use serde_json::Value;

use super::url::{origin, same_origin};
use mcp_tasks_shared::web;

/// Longest wait for one answer (connect, headers and body).
pub(super) const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Longest body excerpt in an error, in characters.
const EXCERPT_CHARS: usize = 500;

/// The service of one entry: its URL, the headers read from the environment at start,
/// and how much of a body is read.
pub(super) struct Service {
    pub(super) url: Uri,
    /// Marked sensitive; sent only to `url`'s origin.
    headers: HeaderMap,
    pub(super) max_output: usize,
    client: web::Client,
}

impl Service {
    /// A service at `url` (already checked).
    ///
    /// # Errors
    /// TLS cannot be set up (the platform's crypto provider is unusable).
    pub(super) fn new(
        url: Uri,
        headers: HeaderMap,
        max_output: usize,
    ) -> Result<Self, web::TlsSetup> {
        Ok(Service {
            url,
            headers,
            max_output,
            client: web::client()?,
        })
    }

    /// `method url` with `body` as JSON, and `idempotency_key` as `Idempotency-Key`.
    ///
    /// # Errors
    /// No connection, no complete answer within [`REQUEST_TIMEOUT`], or the exchange broke.
    pub(super) async fn send(
        &self,
        method: Method,
        url: &Uri,
        body: Option<Bytes>,
        idempotency_key: Option<&str>,
    ) -> Result<Reply, NoAnswer> {
        let mut request = Request::new(Full::new(body.clone().unwrap_or_default()));
        *request.method_mut() = method;
        *request.uri_mut() = url.clone();
        let headers = request.headers_mut();
        if same_origin(url, &self.url) {
            headers.extend(self.headers.clone());
        }
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, */*;q=0.5"),
        );
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!("mcp-tasks-worker/", env!("CARGO_PKG_VERSION"))),
        );
        if body.is_some() {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        if let Some(key) = idempotency_key.and_then(|k| HeaderValue::from_str(k).ok()) {
            headers.insert("idempotency-key", key);
        }
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                let chain = mcp_tasks_shared::error_chain(&e);
                if e.is_connect() {
                    NoAnswer::Connect(chain)
                } else {
                    NoAnswer::Broken(chain)
                }
            })?;
            let (parts, body) = response.into_parts();
            let (body, over) = web::read_bounded(body, self.max_output)
                .await
                .map_err(|e| NoAnswer::Broken(mcp_tasks_shared::error_chain(&e)))?;
            Ok(Reply {
                status: parts.status,
                headers: parts.headers,
                body,
                over,
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| NoAnswer::Timeout)?
    }
}

/// One answer, its body read up to `max_output` bytes.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    headers: HeaderMap,
    pub(super) body: Vec<u8>,
    /// The body was longer than `max_output` (and was cut there).
    pub(super) over: bool,
}

impl Reply {
    /// The body as JSON, when the content type says JSON and it parses.
    pub(super) fn json(&self) -> Option<Value> {
        let kind = self.headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        let kind = kind.split(';').next()?.trim().to_ascii_lowercase();
        if kind != "application/json" && !kind.ends_with("+json") {
            return None;
        }
        serde_json::from_slice(&self.body).ok()
    }

    /// `Retry-After` in seconds (the HTTP-date form is not read: services that send it get
    /// the retry policy's own backoff).
    pub(super) fn retry_after(&self) -> Option<std::time::Duration> {
        let v = self.headers.get(header::RETRY_AFTER)?.to_str().ok()?;
        v.trim()
            .parse::<u64>()
            .ok()
            .map(std::time::Duration::from_secs)
    }

    pub(super) fn location(&self) -> Option<&str> {
        self.headers.get(header::LOCATION)?.to_str().ok()
    }

    /// `: EXCERPT` of the body for an error message, or nothing when it is empty.
    pub(super) fn excerpt(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let text = text.trim();
        if text.is_empty() {
            return String::new();
        }
        let mut cut: String = text.chars().take(EXCERPT_CHARS).collect();
        if cut.len() < text.len() || self.over {
            cut.push('…');
        }
        format!(": {cut}")
    }
}

/// Why a request got no answer.
pub(super) enum NoAnswer {
    /// No connection could be made.
    Connect(String),
    /// No complete answer within [`REQUEST_TIMEOUT`].
    Timeout,
    /// The exchange broke off (reset, malformed answer, body cut short).
    Broken(String),
}

impl NoAnswer {
    /// What happened with `url`, naming only its origin (its path or query may hold a
    /// secret, and the text reaches the client).
    pub(super) fn describe(&self, url: &Uri) -> String {
        let origin = origin(url);
        match self {
            NoAnswer::Connect(e) => format!("cannot reach {origin}: {e}"),
            NoAnswer::Timeout => format!(
                "{origin} gave no complete answer within {} s",
                REQUEST_TIMEOUT.as_secs()
            ),
            NoAnswer::Broken(e) => format!("the request to {origin} failed: {e}"),
        }
    }
}
