//! Response bodies the gateway and the console answer with: full buffers and SSE
//! streams, one boxed type for both.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;

/// Response body: a full buffer or an SSE stream.
pub type ResBody = UnsyncBoxBody<Bytes, Infallible>;

/// A full (non-streaming) body with `status` and, when given, `Content-Type`.
pub fn full(
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

/// An SSE response streaming `rx`, one already-framed event per item.
pub fn sse(rx: mpsc::Receiver<Bytes>) -> Response<ResBody> {
    sse_response(sse_channel(rx))
}

/// An SSE body sending what a channel receives, one already-framed event per item.
pub fn sse_channel(rx: mpsc::Receiver<Bytes>) -> ResBody {
    sse_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (b, rx))
    }))
}

/// An SSE body sending `events`, one already-framed event per item; it ends with them.
pub fn sse_stream(events: impl Stream<Item = Bytes> + Send + 'static) -> ResBody {
    StreamBody::new(events.map(|b| Ok::<_, Infallible>(Frame::data(b)))).boxed_unsync()
}

/// A 200 response with an SSE body.
pub fn sse_response(body: ResBody) -> Response<ResBody> {
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

/// A JSON body with `status`.
pub fn json(status: StatusCode, body: Vec<u8>) -> Response<ResBody> {
    full(status, Some("application/json"), body)
}

/// An empty body with `status`.
pub fn empty(status: StatusCode) -> Response<ResBody> {
    full(status, None, Bytes::new())
}
