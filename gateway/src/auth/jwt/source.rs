//! Where the key set comes from and how its document is read: a file (re-read when its
//! mtime or size changes) or an http(s) URL, each bounded in size and, for a URL, in time.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use http_body_util::{BodyExt as _, Full, Limited};
use mcp_tasks_shared::web;

use super::{FETCH_TIMEOUT, JwksSource, MAX_JWKS_BYTES};

/// How the key set is read.
pub(super) enum Source {
    /// A JWKS file.
    File(PathBuf),
    /// A JWKS URL and the client that fetches it.
    Url {
        uri: hyper::Uri,
        client: Box<web::Client>,
    },
}

impl Source {
    /// Check a URL source and build its client.
    pub(super) fn new(source: JwksSource) -> Result<Source, String> {
        match source {
            JwksSource::File(path) => Ok(Source::File(path)),
            JwksSource::Url(url) => {
                let uri: hyper::Uri = url
                    .parse()
                    .map_err(|e| format!("invalid JWKS URL {url}: {e}"))?;
                if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                    return Err(format!(
                        "invalid JWKS URL {url}: expected http://HOST/… or https://HOST/…"
                    ));
                }
                if uri.scheme_str() == Some("http") && !is_loopback(uri.host().unwrap_or("")) {
                    tracing::warn!(url = %url, "JWKS fetched over plain http");
                }
                let client = web::client().map_err(|e| format!("JWKS URL {url}: {e}"))?;
                let client = Box::new(client);
                Ok(Source::Url { uri, client })
            }
        }
    }
}

/// What tells that a JWKS file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileStamp {
    /// Modification time, where the platform has one.
    modified: Option<SystemTime>,
    /// Size in bytes.
    len: u64,
}

/// Mtime and size of a JWKS file.
pub(super) async fn file_stamp(path: &Path) -> Result<FileStamp, String> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| format!("cannot stat: {e}"))?;
    Ok(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// Read a JWKS file of at most [`MAX_JWKS_BYTES`].
pub(super) async fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt as _;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("cannot open: {e}"))?;
    let mut document = Vec::new();
    file.take(MAX_JWKS_BYTES as u64 + 1)
        .read_to_end(&mut document)
        .await
        .map_err(|e| format!("cannot read: {e}"))?;
    if document.len() > MAX_JWKS_BYTES {
        return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
    }
    Ok(document)
}

/// GET a JWKS URL: 200 only, body at most [`MAX_JWKS_BYTES`], all within [`FETCH_TIMEOUT`].
pub(super) async fn fetch(uri: &hyper::Uri, client: &web::Client) -> Result<Vec<u8>, String> {
    let request = hyper::Request::get(uri.clone())
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::default())
        .map_err(|e| format!("cannot build the request: {e}"))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("request failed: {}", error_chain(&e)))?;
        if response.status() != hyper::StatusCode::OK {
            return Err(format!("answered HTTP {}", response.status()));
        }
        let body = Limited::new(response.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the body: {}", error_chain(&*e)))?;
        Ok(body.to_bytes().to_vec())
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no complete answer within {} s", FETCH_TIMEOUT.as_secs()))?
}

/// An error and its sources, `: `-separated (hyper's own text alone says little).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `localhost` or a loopback address (plain http to it draws no warning).
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
