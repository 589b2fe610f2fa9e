//! The one HTTP client stack of the workspace's outbound calls: the catalog's `[[http]]`
//! services (`worker/catalog/src/http/client.rs`) and Streamable HTTP upstreams
//! (`worker/catalog/src/upstream/streamable.rs`), the gateway's JWKS fetch
//! (`gateway/src/auth/jwt/source.rs`) and the `mcp-tasks` command's MCP client
//! (`cli/src/commands/client.rs`) build their client here and read bodies here.
//!
//! hyper-util's client over rustls with `ring` and the webpki roots (as everywhere in
//! this project: no OpenSSL, no system certificate store), HTTP/1.1, plain `http://` too.
//! It follows no redirect: each caller decides what a `3xx` means (the catalog's `http.rs`
//! follows a job's status URL itself, sending the entry's headers to its own origin only).
//! Overall time limits are the callers' too; an SSE answer may last as long as its call.
//!
//! Why not reqwest: 0.13 offers rustls only with aws-lc-rs, or with no provider at all
//! and then needs a process-wide default installed before *any* reqwest client is built;
//! enabling it here turns on TLS in the reqwest that OpenTelemetry's OTLP/HTTP exporter
//! builds (one build per workspace), and that exporter then panics at start.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Longest wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An http-or-https client sending whole bodies.
pub type Client =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// TLS could not be set up for [`client`].
#[derive(Debug, thiserror::Error)]
#[error("cannot set up TLS: {0}")]
pub struct TlsSetup(#[source] rustls::Error);

/// A new client (each service, session or key source keeps its own, with its connection
/// pool). Requests go out with `TCP_NODELAY`: they are small and answered at once.
///
/// # Errors
/// TLS cannot be set up (the platform's crypto provider is unusable).
pub fn client() -> Result<Client, TlsSetup> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(TlsSetup)?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https))
}

/// Read `body` up to `max` bytes; whether there was more (then the rest is left unread).
///
/// # Errors
/// The body broke off.
pub async fn read_bounded(mut body: Incoming, max: usize) -> Result<(Vec<u8>, bool), hyper::Error> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            let room = max - out.len();
            if data.len() > room {
                out.extend_from_slice(&data[..room]);
                return Ok((out, true));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok((out, false))
}

/// Whether the host a request names is a loopback address (checked when the gateway
/// listens on loopback, so a DNS-rebound name cannot reach it): the `Host` header, and the
/// authority of the target (HTTP/2's `:authority`, which stands for `Host` there; an
/// HTTP/1 absolute-form target), each when present.
pub fn host_allowed(uri: &hyper::Uri, headers: &hyper::HeaderMap) -> bool {
    let header = match headers.get(hyper::header::HOST).map(|h| h.to_str()) {
        None => true,
        Some(Ok(host)) => is_loopback_host(host),
        Some(Err(_)) => false,
    };
    header && uri.authority().is_none_or(|a| is_loopback_host(a.as_str()))
}

/// `localhost`, `127.x.y.z` or `[::1]`, with an optional port. Hand-written: hyper's
/// `Authority` would also take userinfo (`a@127.0.0.1`), which no browser sends as a host.
pub fn is_loopback_host(host_port: &str) -> bool {
    let host = if let Some(rest) = host_port.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, tail)) if tail.is_empty() || tail.starts_with(':') => h,
            _ => return false,
        }
    } else {
        host_port.rsplit_once(':').map_or(host_port, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
