//! Where the key set comes from and how its document is read: a file (re-read when its
//! mtime or size changes) or an http(s) URL, each bounded in size and, for a URL, in time.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use http_body_util::{BodyExt as _, Full, Limited};
use mcp_tasks_shared::web;

use super::errors::{JwtConfigError, KeySetError};
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
    pub(super) fn new(source: JwksSource) -> Result<Source, JwtConfigError> {
        match source {
            JwksSource::File(path) => Ok(Source::File(path)),
            JwksSource::Url(url) => {
                let uri: hyper::Uri = match url.parse() {
                    Ok(uri) => uri,
                    Err(why) => return Err(JwtConfigError::InvalidUrl { url, why }),
                };
                if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                    return Err(JwtConfigError::NotHttpUrl { url });
                }
                if uri.scheme_str() == Some("http") && !is_loopback(uri.host().unwrap_or("")) {
                    tracing::warn!(url = %url, "JWKS fetched over plain http");
                }
                let client = match web::client() {
                    Ok(client) => Box::new(client),
                    Err(why) => return Err(JwtConfigError::Client { url, why }),
                };
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
pub(super) async fn file_stamp(path: &Path) -> Result<FileStamp, KeySetError> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| KeySetError::Stat(e.into()))?;
    Ok(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// Read a JWKS file of at most [`MAX_JWKS_BYTES`].
pub(super) async fn read_file(path: &Path) -> Result<Vec<u8>, KeySetError> {
    use tokio::io::AsyncReadExt as _;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| KeySetError::Open(e.into()))?;
    let mut document = Vec::new();
    file.take(MAX_JWKS_BYTES as u64 + 1)
        .read_to_end(&mut document)
        .await
        .map_err(|e| KeySetError::Read(e.into()))?;
    if document.len() > MAX_JWKS_BYTES {
        return Err(KeySetError::TooLarge);
    }
    Ok(document)
}

/// GET a JWKS URL: 200 only, body at most [`MAX_JWKS_BYTES`], all within [`FETCH_TIMEOUT`].
pub(super) async fn fetch(uri: &hyper::Uri, client: &web::Client) -> Result<Vec<u8>, KeySetError> {
    let request = hyper::Request::get(uri.clone())
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::default())
        .map_err(|e| KeySetError::BuildRequest(e.into()))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| KeySetError::RequestFailed(error_chain(&e)))?;
        if response.status() != hyper::StatusCode::OK {
            return Err(KeySetError::Status(response.status()));
        }
        let body = Limited::new(response.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map_err(|e| KeySetError::Body(error_chain(&*e)))?;
        Ok(body.to_bytes().to_vec())
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .map_err(|_| KeySetError::Timeout)?
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
