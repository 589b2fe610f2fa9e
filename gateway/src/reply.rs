//! What handlers answer with ([`Reply`]) and how it becomes an HTTP response: full bodies,
//! JSON-RPC errors and SSE streams (base-protocol.md §6). Both protocol eras build their
//! responses here; routing and the checks before JSON are `http.rs`'s.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use mcp_tasks_protocol::jsonrpc::{self, ErrorObject, Id};
use tokio::sync::mpsc;

/// Response body: a full buffer or an SSE stream.
pub(crate) type ResBody = UnsyncBoxBody<Bytes, Infallible>;

/// What a handler answers with.
pub(crate) enum Reply {
    /// One JSON-RPC response.
    Json(Vec<u8>),
    /// An SSE stream of already-framed events ([`sse_channel`], [`sse_stream`]).
    Sse(ResBody),
}

/// A full (non-streaming) body with `status` and, when given, `Content-Type`.
pub(crate) fn full(
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

/// A JSON-RPC error response with `status`.
pub(crate) fn json_error(
    status: StatusCode,
    id: Option<&Id>,
    error: &ErrorObject,
) -> Response<ResBody> {
    full(
        status,
        Some("application/json"),
        jsonrpc::error_bytes(id, error),
    )
}

/// An SSE response streaming `rx`, one already-framed event per item.
pub(crate) fn sse(rx: mpsc::Receiver<Bytes>) -> Response<ResBody> {
    sse_response(sse_channel(rx))
}

/// An SSE body sending what a channel receives, one already-framed event per item.
pub(crate) fn sse_channel(rx: mpsc::Receiver<Bytes>) -> ResBody {
    sse_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (b, rx))
    }))
}

/// An SSE body sending `events`, one already-framed event per item; it ends with them.
pub(crate) fn sse_stream(events: impl Stream<Item = Bytes> + Send + 'static) -> ResBody {
    StreamBody::new(events.map(|b| Ok::<_, Infallible>(Frame::data(b)))).boxed_unsync()
}

/// A 200 response with an SSE body.
fn sse_response(body: ResBody) -> Response<ResBody> {
    let mut res = Response::new(body);
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

/// A JSON body with `status`.
pub(crate) fn json(status: StatusCode, body: Vec<u8>) -> Response<ResBody> {
    full(status, Some("application/json"), body)
}

/// An empty body with `status`.
pub(crate) fn empty(status: StatusCode) -> Response<ResBody> {
    full(status, None, Bytes::new())
}

/// A handler's answer as a 200 response.
pub(crate) fn ok(reply: Reply) -> Response<ResBody> {
    match reply {
        Reply::Json(bytes) => json(StatusCode::OK, bytes),
        Reply::Sse(body) => sse_response(body),
    }
}
