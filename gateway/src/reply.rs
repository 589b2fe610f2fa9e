//! What handlers answer with ([`Reply`]) and how it becomes an HTTP response: full bodies,
//! JSON-RPC errors and SSE streams (base-protocol.md §6). Both protocol eras build their
//! responses here; routing and the checks before JSON are `http.rs`'s.

use bytes::Bytes;
use hyper::{Response, StatusCode};
use mcp_tasks_protocol::jsonrpc::{self, ErrorObject, Id};
pub(crate) use mcp_tasks_shared::body::{
    ResBody, empty, full, json, sse, sse_channel, sse_response, sse_stream,
};

/// What a handler answers with.
pub(crate) enum Reply {
    /// One JSON-RPC response.
    Json(Vec<u8>),
    /// An SSE stream of already-framed events ([`sse_channel`], [`sse_stream`]).
    Sse(ResBody),
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

/// One SSE event carrying one JSON-RPC message (no `id:` field, B-12).
pub(crate) fn sse_event(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// A handler's answer as a 200 response.
pub(crate) fn ok(reply: Reply) -> Response<ResBody> {
    match reply {
        Reply::Json(bytes) => json(StatusCode::OK, bytes),
        Reply::Sse(body) => sse_response(body),
    }
}
