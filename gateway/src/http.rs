//! HTTP: routes, the checks that come before JSON (Origin, Host, method, Content-Type,
//! Accept, body size), and building JSON and SSE responses (base-protocol.md §6).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use mcp_tasks_protocol::PROTOCOL_VERSION;
use mcp_tasks_protocol::jsonrpc::{self, ErrorObject, INVALID_REQUEST, Id};
use mcp_tasks_protocol::meta::TRACEPARENT_KEY;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::State;
use crate::auth;
use crate::envelope::{self, Body};
use crate::error::DispatchError;
use crate::headers::{self, Routing};

/// Response body: a full buffer or an SSE stream.
pub(crate) type ResBody = UnsyncBoxBody<Bytes, Infallible>;

/// What a handler answers with.
pub(crate) enum Reply {
    /// One JSON-RPC response.
    Json(Vec<u8>),
    /// An SSE stream; each item is one already-framed event.
    Sse(mpsc::Receiver<Bytes>),
}

fn full(
    status: StatusCode,
    content_type: Option<&'static str>,
    body: impl Into<Bytes>,
) -> Response<ResBody> {
    let mut res = Response::new(Full::new(body.into()).boxed_unsync());
    *res.status_mut() = status;
    if let Some(ct) = content_type {
        res.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    res
}

fn json_error(status: StatusCode, id: Option<&Id>, error: &ErrorObject) -> Response<ResBody> {
    full(
        status,
        Some("application/json"),
        jsonrpc::error_bytes(id, error),
    )
}

pub(crate) fn sse(rx: mpsc::Receiver<Bytes>) -> Response<ResBody> {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut res = Response::new(StreamBody::new(stream).boxed_unsync());
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    res
}

/// One SSE event carrying one JSON-RPC message (no `id:` field, B-12).
pub(crate) fn sse_event(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Route one HTTP request.
pub(crate) async fn serve(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<ResBody>, Infallible> {
    let path = req.uri().path();
    Ok(match (req.method(), path) {
        (&Method::GET, "/healthz") => full(StatusCode::OK, Some("text/plain"), "ok\n"),
        (&Method::GET, "/readyz") => {
            if state.ready() && state.store.ping().await.is_ok() {
                full(StatusCode::OK, Some("text/plain"), "ready\n")
            } else {
                full(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some("text/plain"),
                    "not ready\n",
                )
            }
        }
        (&Method::GET, auth::METADATA_PATH | "/.well-known/oauth-protected-resource/mcp")
            if state.auth.enabled() =>
        {
            let meta = auth::resource_metadata(&state.config.auth, req.headers());
            full(
                StatusCode::OK,
                Some("application/json"),
                serde_json::to_vec(&meta).unwrap_or_default(),
            )
        }
        (&Method::GET, "/metrics") => full(
            StatusCode::OK,
            Some("text/plain; version=0.0.4"),
            mcp_tasks_shared::telemetry::prometheus_text(),
        ),
        (&Method::POST | &Method::DELETE, "/mcp") => mcp(state, req).await,
        (&Method::GET, "/mcp") if req.headers().contains_key(crate::legacy::SESSION_HEADER) => {
            mcp(state, req).await
        }
        (_, "/mcp") => {
            let mut res = full(StatusCode::METHOD_NOT_ALLOWED, None, Bytes::new());
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            res
        }
        _ => full(StatusCode::NOT_FOUND, Some("text/plain"), "not found\n"),
    })
}

/// The media types a header lists, over all its lines (RFC 9110 §5.3); `None` when a line
/// is not text.
fn media_types(headers: &hyper::HeaderMap, name: header::HeaderName) -> Option<Vec<String>> {
    let mut types = Vec::new();
    for line in headers.get_all(name) {
        let line = line.to_str().ok()?;
        types.extend(
            line.split(',')
                .map(|part| {
                    part.split(';')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_ascii_lowercase()
                })
                .filter(|t| !t.is_empty()),
        );
    }
    Some(types)
}

async fn mcp(state: Arc<State>, req: Request<Incoming>) -> Response<ResBody> {
    let headers = req.headers();
    let reject = |status, message: &str| {
        json_error(status, None, &ErrorObject::new(INVALID_REQUEST, message))
    };
    if !headers::origin_allowed(headers, &state.config.allowed_origins) {
        return reject(StatusCode::FORBIDDEN, "Origin not allowed");
    }
    if state.loopback_only && !headers::host_allowed(headers) {
        return reject(
            StatusCode::FORBIDDEN,
            "Host not allowed: this server only answers loopback names",
        );
    }
    let owner = match state.auth.owner(headers).await {
        Ok(owner) => owner,
        Err(challenge) => {
            // Refusals are counted and logged (the reason, never the credential), so
            // guessing shows.
            tracing::info!(reason = %challenge.description, "request refused: not authenticated");
            let outcome = if challenge.unavailable {
                "unavailable"
            } else {
                "unauthorized"
            };
            mcp_tasks_shared::metrics::get().requests.add(
                1,
                &[
                    opentelemetry::KeyValue::new("rpc.method", "other"),
                    opentelemetry::KeyValue::new("outcome", outcome),
                ],
            );
            if challenge.unavailable {
                let mut res = reject(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Authentication unavailable: the signing keys cannot be fetched; retry later",
                );
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
                return res;
            }
            let mut res = reject(
                StatusCode::UNAUTHORIZED,
                &format!("Unauthorized: {}", challenge.description),
            );
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                auth::www_authenticate(&state.config.auth, headers, &challenge),
            );
            return res;
        }
    };
    // A 2025 session id, unless the request says it is 2026-07-28 (whose clients send none).
    let session = headers
        .get(crate::legacy::SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .filter(|_| {
            headers
                .get("mcp-protocol-version")
                .is_none_or(|v| v.as_bytes() != PROTOCOL_VERSION.as_bytes())
        });
    if req.method() == Method::GET {
        let accepts_sse = media_types(headers, header::ACCEPT)
            .unwrap_or_default()
            .iter()
            .any(|t| t == "text/event-stream" || t == "text/*" || t == "*/*");
        return match session {
            Some(sid) => crate::legacy::get(&state, &owner, &sid, accepts_sse).await,
            None => {
                let mut res = full(StatusCode::METHOD_NOT_ALLOWED, None, Bytes::new());
                res.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
                res
            }
        };
    }
    if req.method() == Method::DELETE {
        return match session {
            Some(sid) => crate::legacy::end(&state, &owner, &sid).await,
            None => {
                let mut res = full(StatusCode::METHOD_NOT_ALLOWED, None, Bytes::new());
                res.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
                res
            }
        };
    }
    let content_type = media_types(headers, header::CONTENT_TYPE).unwrap_or_default();
    if content_type.as_slice() != ["application/json"] {
        return reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    // An Accept header that is not text names nothing acceptable.
    let absent = headers.get(header::ACCEPT).is_none();
    let accept = media_types(headers, header::ACCEPT).unwrap_or_default();
    let accepts = |t: &str| {
        absent
            || accept.iter().any(|a| {
                a == t || a == "*/*" || a == &format!("{}/*", t.split('/').next().unwrap_or(""))
            })
    };
    if !accepts("application/json") && !accepts("text/event-stream") {
        return reject(
            StatusCode::NOT_ACCEPTABLE,
            "Accept must allow application/json or text/event-stream",
        );
    }
    let accepts_sse = accepts("text/event-stream");
    // Routing headers are read before the body is parsed.
    let routing = Routing::from_headers(headers);
    let http_traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);

    let limit = state.config.max_body_bytes;
    let body = match Limited::new(req.into_body(), limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return reject(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("request body exceeds {limit} bytes (MCPT_MAX_BODY_BYTES)"),
                );
            }
            return reject(StatusCode::BAD_REQUEST, "request body could not be read");
        }
    };
    if let Some(sid) = session {
        let version = routing
            .protocol_version
            .as_ref()
            .and_then(|v| v.as_ref().ok())
            .map(String::as_str);
        return crate::legacy::post(&state, owner, &sid, version, &body, accepts_sse).await;
    }
    let request = match envelope::parse(&body, &routing) {
        Ok(Body::Notification) => return full(StatusCode::ACCEPTED, None, Bytes::new()),
        Ok(Body::Initialize { id, params }) => {
            return crate::legacy::initialize(&state, owner, id, params).await;
        }
        Ok(Body::Request(mut r)) => {
            r.owner = owner;
            r
        }
        Err((id, e)) => {
            // A 2025 client that lost (or never had) its session: say what it needs.
            let version = routing
                .protocol_version
                .as_ref()
                .and_then(|v| v.as_ref().ok());
            if let DispatchError::BadMeta(_) = e
                && let Some(v) = version.filter(|v| crate::legacy::VERSIONS.contains(&v.as_str()))
            {
                let e = DispatchError::InvalidRequest(format!(
                    "protocol {v} needs a session: send initialize first, then its Mcp-Session-Id on every request"
                ));
                return error_response(id.as_ref(), &e);
            }
            return error_response(id.as_ref(), &e);
        }
    };
    let span = tracing::info_span!(
        "request",
        otel.name = %request.method,
        rpc.method = %request.method,
        rpc.id = %request.id,
        task.id = tracing::field::Empty,
    );
    // The caller's trace: MCP's `_meta.traceparent`, else the HTTP header.
    let parent = request
        .meta()
        .get(TRACEPARENT_KEY)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .or(http_traceparent);
    if let Some(parent) = parent {
        mcp_tasks_shared::telemetry::set_parent(&span, &parent);
    }
    let started = std::time::Instant::now();
    let id = request.id.clone();
    let method = request.method.clone();
    async move {
        let outcome = crate::dispatch::dispatch(&state, request, accepts_sse).await;
        let (response, status) = match outcome {
            Ok(Reply::Json(bytes)) => (full(StatusCode::OK, Some("application/json"), bytes), "ok"),
            Ok(Reply::Sse(rx)) => (sse(rx), "stream"),
            Err(e) => (error_response(Some(&id), &e), "error"),
        };
        let elapsed = started.elapsed();
        tracing::info!(
            rpc.method = %method,
            outcome = status,
            http.status = response.status().as_u16(),
            latency_us = elapsed.as_micros() as u64,
            "request completed"
        );
        // Methods are client-chosen: unknown ones share one label.
        let label = envelope::METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other");
        let attrs = [
            opentelemetry::KeyValue::new("rpc.method", label),
            opentelemetry::KeyValue::new("outcome", status),
        ];
        let m = mcp_tasks_shared::metrics::get();
        m.requests.add(1, &attrs);
        m.request_duration.record(elapsed.as_secs_f64(), &attrs);
        response
    }
    .instrument(span)
    .await
}

fn error_response(id: Option<&Id>, e: &DispatchError) -> Response<ResBody> {
    match e {
        DispatchError::Store(inner) => {
            tracing::warn!(error = %mcp_tasks_shared::error_chain(&**inner), "store failure");
        }
        DispatchError::Internal(why) => tracing::error!(error = %why, "internal error"),
        _ => {}
    }
    json_error(e.status(), id, &ErrorObject::from(e))
}
