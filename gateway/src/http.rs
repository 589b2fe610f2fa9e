//! HTTP: routes, and the `/mcp` pipeline — the checks that come before authentication
//! (Origin, Host), authentication, 2025 sessions' `GET` and `DELETE`, the checks before the
//! body (Content-Type, Accept), reading the body within its limit, then one request of the
//! right era (base-protocol.md §6). Responses are built in `reply.rs`, errors mapped in
//! `error.rs`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use mcp_tasks_protocol::PROTOCOL_VERSION;
use mcp_tasks_protocol::jsonrpc::Id;
use mcp_tasks_protocol::meta::{IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_HEADER};
use mcp_tasks_shared::metrics::{self, Outcome};
use serde_json::{Map, Value};
use tracing::Instrument as _;

use crate::envelope::{self, Body, Params};
use crate::error::{self, DispatchError, Era};
use crate::headers::{self, Routing};
use crate::reply::{self, ResBody, full, json_error};
use crate::state::State;
use crate::{auth, legacy};

/// A step of the pipeline either passes on what it learned or ends the request with its
/// answer (boxed: responses are large).
type Step<T> = Result<T, Box<Response<ResBody>>>;

/// What a request is answered with, boxed once: the pipeline's future is kilobytes, and
/// built here rather than awaited in an `async fn` router it is neither laid out twice nor
/// copied into hyper's connection (which keeps one slot the size of its future for the whole
/// life of an HTTP/1 connection).
pub(crate) type Served = Pin<Box<dyn Future<Output = Response<ResBody>> + Send>>;

/// Route one HTTP request.
pub(crate) fn serve(state: Arc<State>, req: Request<Incoming>) -> Served {
    let answer = |res: Response<ResBody>| -> Served { Box::pin(std::future::ready(res)) };
    let path = req.uri().path();
    match (req.method(), path) {
        (&Method::GET, "/healthz") => answer(full(StatusCode::OK, Some("text/plain"), "ok\n")),
        (&Method::GET, "/readyz") => Box::pin(async move {
            if state.ready() && state.store.ping().await.is_ok() {
                full(StatusCode::OK, Some("text/plain"), "ready\n")
            } else {
                full(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some("text/plain"),
                    "not ready\n",
                )
            }
        }),
        (&Method::GET, auth::METADATA_PATH | "/.well-known/oauth-protected-resource/mcp")
            if state.auth.enabled() =>
        {
            let meta = auth::resource_metadata(&state.config.auth, req.headers());
            answer(full(
                StatusCode::OK,
                Some("application/json"),
                serde_json::to_vec(&meta).unwrap_or_default(),
            ))
        }
        (&Method::GET, "/metrics") => answer(full(
            StatusCode::OK,
            Some("text/plain; version=0.0.4"),
            mcp_tasks_shared::telemetry::prometheus_text(),
        )),
        (&Method::POST | &Method::DELETE, "/mcp") => Box::pin(mcp(state, req)),
        (&Method::GET, "/mcp") if req.headers().contains_key(legacy::SESSION_HEADER) => {
            Box::pin(mcp(state, req))
        }
        (_, "/mcp") => answer(method_not_allowed("POST, DELETE")),
        #[cfg(feature = "console")]
        (_, p) if p == "/console" || p.starts_with("/console/") => Box::pin(async move {
            let Some(console) = state.console.as_ref() else {
                return not_found();
            };
            let peer = req
                .extensions()
                .get::<crate::conn::Peer>()
                .map(|p| p.0.ip());
            console.serve(req, peer).await
        }),
        _ => answer(not_found()),
    }
}

/// 404, for every path the gateway does not serve.
fn not_found() -> Response<ResBody> {
    full(StatusCode::NOT_FOUND, Some("text/plain"), "not found\n")
}

/// 405 naming the methods `/mcp` takes here.
fn method_not_allowed(allow: &'static str) -> Response<ResBody> {
    let mut res = reply::empty(StatusCode::METHOD_NOT_ALLOWED);
    res.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    res
}

/// A refusal before any JSON-RPC request was read: -32600 without an id.
fn refuse(status: StatusCode, message: &str) -> Box<Response<ResBody>> {
    Box::new(json_error(status, None, &error::invalid_request(message)))
}

/// The media types a header lists, over all its lines (RFC 9110 §5.3), as written: compare
/// them with [`media_type_allows`]. `None` when a line is not text.
fn media_types<'h>(
    headers: &'h hyper::HeaderMap,
    name: &header::HeaderName,
) -> Option<MediaTypes<'h>> {
    let lines = headers.get_all(name);
    if lines.iter().any(|line| line.to_str().is_err()) {
        return None;
    }
    Some(MediaTypes {
        lines: lines.iter(),
        rest: "",
    })
}

/// The media types of a header's lines, in order: each comma-separated item without its
/// parameters (`;…`), trimmed, empty items left out. Scanned byte by byte, with nothing
/// collected: `,` and `;` are ASCII, so every slice ends on a character boundary.
struct MediaTypes<'h> {
    lines: header::ValueIter<'h, hyper::header::HeaderValue>,
    /// What is left of the current line.
    rest: &'h str,
}

impl<'h> Iterator for MediaTypes<'h> {
    type Item = &'h str;

    fn next(&mut self) -> Option<&'h str> {
        loop {
            if self.rest.is_empty() {
                // Every line is text: `media_types` checked them.
                self.rest = self.lines.next()?.to_str().ok()?;
                continue;
            }
            let (item, rest) = match self.rest.bytes().position(|b| b == b',') {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, ""),
            };
            self.rest = rest;
            let media_type = match item.bytes().position(|b| b == b';') {
                Some(i) => &item[..i],
                None => item,
            }
            .trim_ascii();
            if !media_type.is_empty() {
                return Some(media_type);
            }
        }
    }
}

/// Whether the listed media `range` (`type/subtype`, `type/*` or `*/*`, any case) takes
/// `wanted` (lowercase `type/subtype`).
fn media_type_allows(range: &str, wanted: &str) -> bool {
    if range == "*/*" || range.eq_ignore_ascii_case(wanted) {
        return true;
    }
    match (range.strip_suffix("/*"), wanted.split_once('/')) {
        (Some(major), Some((wanted_major, _))) => major.eq_ignore_ascii_case(wanted_major),
        _ => false,
    }
}

/// `/mcp`, one step after another.
async fn mcp(state: Arc<State>, req: Request<Incoming>) -> Response<ResBody> {
    match mcp_steps(&state, req).await {
        Ok(res) => res,
        Err(refused) => *refused,
    }
}

async fn mcp_steps(state: &Arc<State>, req: Request<Incoming>) -> Step<Response<ResBody>> {
    check_origin_and_host(state, req.uri(), req.headers())?;
    let owner = authenticate(state, req.headers()).await?;
    let session = session_id(req.headers());
    // The 2025 era's futures are boxed apart (here and below): they are the largest, and
    // inline they would set the size of every 2026 request's box.
    if req.method() == Method::GET || req.method() == Method::DELETE {
        return Ok(Box::pin(session_stream_or_end(state, &owner, session, &req)).await);
    }
    let post = check_post_headers(req.headers())?;
    let body = read_body(req.into_body(), state.config.max_body_bytes).await?;
    Ok(match session {
        Some(sid) => {
            let version = post
                .routing
                .protocol_version
                .as_ref()
                .and_then(|v| v.as_ref().ok())
                .map(String::as_str);
            Box::pin(legacy::post(
                state,
                owner,
                &sid,
                version,
                &body,
                post.accepts_sse,
                post.idempotency_key.as_ref(),
            ))
            .await
        }
        None => request_2026(state, owner, &post, &body).await,
    })
}

/// DNS rebinding and cross-site requests are refused before anything else (B-17).
fn check_origin_and_host(state: &State, uri: &hyper::Uri, headers: &HeaderMap) -> Step<()> {
    if !headers::origin_allowed(headers, &state.config.allowed_origins) {
        return Err(refuse(StatusCode::FORBIDDEN, "Origin not allowed"));
    }
    if state.loopback_only && !headers::host_allowed(uri, headers) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "Host not allowed: this server only answers loopback names",
        ));
    }
    Ok(())
}

/// The caller's owner digest, or 401 with a challenge (503 when the keys are unavailable).
async fn authenticate(state: &State, headers: &HeaderMap) -> Step<String> {
    let challenge = match state.auth.owner(headers).await {
        Ok(owner) => return Ok(owner),
        Err(challenge) => challenge,
    };
    // Refusals are counted and logged (the reason, never the credential), so guessing shows.
    tracing::info!(reason = %challenge.description, "request refused: not authenticated");
    let outcome = if challenge.unavailable {
        Outcome::Unavailable
    } else {
        Outcome::Unauthorized
    };
    metrics::count_request(None, outcome);
    if challenge.unavailable {
        let mut res = refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "Authentication unavailable: the signing keys cannot be fetched; retry later",
        );
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return Err(res);
    }
    let mut res = refuse(
        StatusCode::UNAUTHORIZED,
        &format!("Unauthorized: {}", challenge.description),
    );
    res.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        auth::www_authenticate(&state.config.auth, headers, &challenge),
    );
    Err(res)
}

/// A 2025 session id, unless the request says it is 2026-07-28 (whose clients send none).
fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get(legacy::SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .filter(|_| {
            headers
                .get("mcp-protocol-version")
                .is_none_or(|v| v.as_bytes() != PROTOCOL_VERSION.as_bytes())
        })
}

/// `GET` (the session's stream) and `DELETE` (end it) exist only for 2025 sessions.
async fn session_stream_or_end(
    state: &Arc<State>,
    owner: &str,
    session: Option<String>,
    req: &Request<Incoming>,
) -> Response<ResBody> {
    let Some(sid) = session else {
        return method_not_allowed("POST");
    };
    if req.method() == Method::DELETE {
        return legacy::end(state, owner, &sid).await;
    }
    let accepts_sse = media_types(req.headers(), &header::ACCEPT)
        .is_some_and(|mut types| types.any(|t| media_type_allows(t, "text/event-stream")));
    legacy::get(state, owner, &sid, accepts_sse).await
}

/// What a POST's headers say before its body is read.
struct Post {
    /// The answer may be an SSE stream.
    accepts_sse: bool,
    /// The routing headers, read before the body is parsed.
    routing: Routing,
    /// The HTTP `traceparent`, used when `_meta` carries none.
    traceparent: Option<String>,
    /// The `Idempotency-Key` header: its text, `Null` when it is not text.
    idempotency_key: Option<Value>,
}

/// Content-Type must be JSON and Accept must allow JSON or SSE.
fn check_post_headers(headers: &HeaderMap) -> Step<Post> {
    let json = |t: &str| t.eq_ignore_ascii_case("application/json");
    let sole = media_types(headers, &header::CONTENT_TYPE).and_then(|mut types| {
        let first = types.next();
        first.filter(|_| types.next().is_none())
    });
    if !sole.is_some_and(json) {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        ));
    }
    // An Accept header that is not text names nothing acceptable.
    let (accepts_json, accepts_sse) = if headers.get(header::ACCEPT).is_none() {
        (true, true)
    } else {
        media_types(headers, &header::ACCEPT).map_or((false, false), |types| {
            types.fold((false, false), |(json, sse), a| {
                (
                    json || media_type_allows(a, "application/json"),
                    sse || media_type_allows(a, "text/event-stream"),
                )
            })
        })
    };
    if !accepts_json && !accepts_sse {
        return Err(refuse(
            StatusCode::NOT_ACCEPTABLE,
            "Accept must allow application/json or text/event-stream",
        ));
    }
    Ok(Post {
        accepts_sse,
        routing: Routing::from_headers(headers),
        traceparent: headers
            .get(&TRACEPARENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        idempotency_key: headers.get(IDEMPOTENCY_KEY_HEADER).map(|v| {
            v.to_str()
                .map_or(Value::Null, |key| Value::String(key.to_owned()))
        }),
    })
}

/// Put the `Idempotency-Key` header into the request's `_meta`, where the call reads its
/// key (`launch.rs` checks it); -32602 when `_meta` carries another key.
pub(crate) fn with_key_header(
    meta: &mut Map<String, Value>,
    header: Option<&Value>,
) -> Result<(), DispatchError> {
    let Some(header) = header else {
        return Ok(());
    };
    match meta.get(IDEMPOTENCY_KEY) {
        Some(given) if given != header => Err(DispatchError::InvalidParams(format!(
            "The Idempotency-Key header and _meta[\"{IDEMPOTENCY_KEY}\"] differ: send one key"
        ))),
        Some(_) => Ok(()),
        None => {
            meta.insert(IDEMPOTENCY_KEY.to_owned(), header.clone());
            Ok(())
        }
    }
}

/// The W3C trace header, as a constant (a lookup by `&str` parses the name each time).
static TRACEPARENT: header::HeaderName = header::HeaderName::from_static("traceparent");

/// The whole body, at most `limit` bytes (MCPT_MAX_BODY_BYTES).
async fn read_body(body: Incoming, limit: usize) -> Step<Bytes> {
    match Limited::new(body, limit).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body exceeds {limit} bytes (MCPT_MAX_BODY_BYTES)"),
            ))
        }
        Err(_) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "request body could not be read",
        )),
    }
}

/// A POST without a session: a 2026-07-28 request, a notification, or a 2025 `initialize`.
async fn request_2026(
    state: &Arc<State>,
    owner: String,
    post: &Post,
    body: &[u8],
) -> Response<ResBody> {
    let (mut request, params) = match envelope::parse(body, &post.routing) {
        Ok(Body::Request(request, params)) => (request, params),
        Ok(Body::Notification) => return reply::empty(StatusCode::ACCEPTED),
        Ok(Body::Initialize { id, params }) => {
            return legacy::initialize(state, owner, id, params).await;
        }
        Err((id, e)) => return refuse_2026(&post.routing, id.as_ref(), e),
    };
    request.owner = owner;
    if let Err(e) = with_key_header(&mut request.meta, post.idempotency_key.as_ref()) {
        return e.response(Era::Current, Some(&request.id));
    }
    dispatch_traced(state, request, params, post).await
}

/// The answer to a request the envelope refused. A 2025 client that lost (or never had) its
/// session is told what it needs.
fn refuse_2026(routing: &Routing, id: Option<&Id>, e: DispatchError) -> Response<ResBody> {
    let version = routing
        .protocol_version
        .as_ref()
        .and_then(|v| v.as_ref().ok());
    let e = match (e, version) {
        (DispatchError::BadMeta(_), Some(v)) if legacy::VERSIONS.contains(&v.as_str()) => {
            DispatchError::InvalidRequest(format!(
                "protocol {v} needs a session: send initialize first, then its Mcp-Session-Id on every request"
            ))
        }
        (e, _) => e,
    };
    e.log();
    e.response(Era::Current, id)
}

/// Dispatch in the request's span, under the caller's trace, then log and count the outcome.
async fn dispatch_traced(
    state: &Arc<State>,
    request: envelope::Request,
    params: Params,
    post: &Post,
) -> Response<ResBody> {
    let method = request.method;
    let span = tracing::info_span!(
        "request",
        otel.name = %method,
        rpc.method = %method,
        rpc.id = %request.id,
        task.id = tracing::field::Empty,
    );
    // The caller's trace: MCP's `_meta.traceparent`, else the HTTP header.
    if let Some(parent) = request.traceparent().or_else(|| post.traceparent.clone()) {
        mcp_tasks_shared::telemetry::set_parent(&span, &parent);
    }
    let started = std::time::Instant::now();
    let id = request.id.clone();
    async move {
        let outcome = crate::dispatch::dispatch(state, request, params, post.accepts_sse).await;
        let (response, status) = match outcome {
            Ok(reply @ reply::Reply::Json(_)) => (reply::ok(reply), Outcome::Ok),
            Ok(reply @ reply::Reply::Sse(_)) => (reply::ok(reply), Outcome::Stream),
            Err(e) => {
                e.log();
                (e.response(Era::Current, Some(&id)), Outcome::Error)
            }
        };
        let elapsed = started.elapsed();
        tracing::event!(
            target: "access",
            tracing::Level::INFO,
            rpc.method = %method,
            outcome = status.as_str(),
            http.status = response.status().as_u16(),
            latency_us = elapsed.as_micros() as u64,
            "request completed"
        );
        metrics::count_request(Some(method), status);
        metrics::get().request_duration.record(
            elapsed.as_secs_f64(),
            &[
                opentelemetry::KeyValue::new("rpc.method", method.as_str()),
                opentelemetry::KeyValue::new("outcome", status.as_str()),
            ],
        );
        response
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_ranges_match_ignoring_case_with_wildcards() {
        for (range, wanted, allowed) in [
            ("application/json", "application/json", true),
            ("Application/JSON", "application/json", true),
            ("*/*", "text/event-stream", true),
            ("text/*", "text/event-stream", true),
            ("TEXT/*", "text/event-stream", true),
            ("text/*", "application/json", false),
            ("application/jsonx", "application/json", false),
            ("application", "application/json", false),
            ("*/json", "application/json", false),
            ("text/html", "text/event-stream", false),
        ] {
            assert_eq!(
                media_type_allows(range, wanted),
                allowed,
                "{range} for {wanted}"
            );
        }
    }

    #[test]
    fn media_types_span_lines_and_drop_parameters() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::ACCEPT,
            HeaderValue::from_static("application/json; q=0.9, , text/event-stream"),
        );
        headers.append(header::ACCEPT, HeaderValue::from_static(" */* "));
        fn listed(headers: &HeaderMap) -> Option<Vec<&str>> {
            media_types(headers, &header::ACCEPT).map(Iterator::collect)
        }
        assert_eq!(
            listed(&headers),
            Some(vec!["application/json", "text/event-stream", "*/*"])
        );
        // Empty lines and items, and a line of parameters only, list nothing.
        let mut sparse = HeaderMap::new();
        for line in ["", ",", " ; q=1", "a/b;x=1,c/d ,", "", "e/f"] {
            sparse.append(header::ACCEPT, HeaderValue::from_static(line));
        }
        assert_eq!(listed(&sparse), Some(vec!["a/b", "c/d", "e/f"]));
        assert_eq!(listed(&HeaderMap::new()), Some(vec![]));
        headers.append(header::ACCEPT, HeaderValue::from_bytes(b"caf\xe9").unwrap());
        assert_eq!(listed(&headers), None);
    }
}
