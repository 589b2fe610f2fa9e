//! URLs of `[[http]]` tools: the entry's fixed URL checked, the status URLs a service
//! gives resolved against it (by the `url` crate), and which of them share its origin (and
//! so get the entry's headers). Nothing here does I/O.

use hyper::Uri;
use hyper::http::uri::InvalidUri;

/// Why a URL is not one an `[[http]]` tool calls.
#[derive(Debug, thiserror::Error)]
pub(super) enum UrlError {
    /// `{` or `}` in the entry's URL.
    #[error("placeholders are not supported: the arguments travel as the JSON body")]
    Placeholder,
    /// Not a URL at all.
    #[error("not a URL: {0}")]
    Parse(#[source] InvalidUri),
    /// Not `http://` or `https://`.
    #[error("expected an http:// or https:// URL")]
    Scheme,
    /// No host.
    #[error("expected a host, as in https://HOST/PATH")]
    NoHost,
    /// `user:password@` in the authority.
    #[error("credentials in the URL are not sent; use headers")]
    Credentials,
    /// The URL a reference is resolved against does not parse as a `url::Url`.
    #[error("{base}: {source}")]
    Base { base: Uri, source: url::ParseError },
    /// The reference cannot be joined to the base.
    #[error("{reference:?}: not a URL: {source}")]
    Join {
        reference: String,
        source: url::ParseError,
    },
    /// The resolved reference is not a URL we call.
    #[error("{reference:?}: {source}")]
    Unusable {
        reference: String,
        source: Box<UrlError>,
    },
}

/// A fixed `http://` or `https://` URL with a host and no credentials.
pub(super) fn check_url(text: &str) -> Result<Uri, UrlError> {
    if text.contains(['{', '}']) {
        return Err(UrlError::Placeholder);
    }
    let url: Uri = text.parse().map_err(UrlError::Parse)?;
    if !matches!(url.scheme_str(), Some("http" | "https")) {
        return Err(UrlError::Scheme);
    }
    match url.authority() {
        None => Err(UrlError::NoHost),
        Some(a) if a.as_str().contains('@') => Err(UrlError::Credentials),
        Some(_) => Ok(url),
    }
}

/// `scheme://host[:port]` (never the path, query or credentials: safe to show).
pub(super) fn origin(url: &Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("http");
    let host = url.host().unwrap_or_default();
    match url.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}

pub(super) fn same_origin(a: &Uri, b: &Uri) -> bool {
    let port = |u: &Uri| {
        u.port_u16().unwrap_or(if u.scheme_str() == Some("https") {
            443
        } else {
            80
        })
    };
    a.scheme_str() == b.scheme_str()
        && a.host().map(str::to_ascii_lowercase) == b.host().map(str::to_ascii_lowercase)
        && port(a) == port(b)
}

/// `reference` (a `Location` or a status URL from the service) resolved against `base`
/// (RFC 3986 §5.2, by the `url` crate): absolute, `//host/path`, `/path`, `path`,
/// `?query`; the fragment is dropped. The result must be an http(s) URL with a host.
pub(super) fn resolve(base: &Uri, reference: &str) -> Result<Uri, UrlError> {
    let reference = reference.trim();
    let base = url::Url::parse(&base.to_string()).map_err(|source| UrlError::Base {
        base: base.clone(),
        source,
    })?;
    let mut joined = base.join(reference).map_err(|source| UrlError::Join {
        reference: reference.to_owned(),
        source,
    })?;
    joined.set_fragment(None);
    check_url(joined.as_str()).map_err(|why| UrlError::Unusable {
        reference: reference.to_owned(),
        source: Box::new(why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Uri {
        "http://svc.test:8080/v1/jobs?x=1".parse().expect("uri")
    }

    #[test]
    fn status_urls_resolve_against_the_request_url() {
        let cases = [
            ("https://other.test/s/1", "https://other.test/s/1"),
            ("//other.test/s/1", "http://other.test/s/1"),
            ("/status/7", "http://svc.test:8080/status/7"),
            ("jobs/7", "http://svc.test:8080/v1/jobs/7"),
            ("7?wait=1", "http://svc.test:8080/v1/7?wait=1"),
            ("../status/7", "http://svc.test:8080/status/7"),
            ("./a/./b/../c", "http://svc.test:8080/v1/a/c"),
            ("?page=2", "http://svc.test:8080/v1/jobs?page=2"),
            ("jobs/7#frag", "http://svc.test:8080/v1/jobs/7"),
            (
                "x?next=http://a.test/",
                "http://svc.test:8080/v1/x?next=http://a.test/",
            ),
        ];
        for (reference, want) in cases {
            let got = resolve(&base(), reference)
                .map(|u| u.to_string())
                .map_err(|e| e.to_string());
            assert_eq!(got.as_deref(), Ok(want), "{reference}");
        }
        assert_eq!(
            resolve(&base(), "ftp://other.test/x").map_err(|e| e.to_string()),
            Err("\"ftp://other.test/x\": expected an http:// or https:// URL".to_owned())
        );
        assert!(resolve(&base(), "mailto:a@b.test").is_err());
    }

    #[test]
    fn headers_go_only_to_the_same_origin() {
        let url = |s: &str| s.parse::<Uri>().expect("uri");
        assert!(same_origin(
            &url("http://A.test/x"),
            &url("http://a.test:80/y")
        ));
        assert!(same_origin(
            &url("https://a.test/x"),
            &url("https://a.test:443/")
        ));
        assert!(!same_origin(
            &url("http://a.test/x"),
            &url("https://a.test/x")
        ));
        assert!(!same_origin(
            &url("http://a.test/x"),
            &url("http://a.test:81/x")
        ));
        assert!(!same_origin(
            &url("http://a.test/x"),
            &url("http://b.test/x")
        ));
    }
}
