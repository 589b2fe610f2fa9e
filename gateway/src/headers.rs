//! Standard request headers (base-protocol.md §7): reading `MCP-Protocol-Version`,
//! `Mcp-Method` and `Mcp-Name` before the body is parsed, decoding the `=?base64?…?=`
//! sentinel (B-22), and the Origin / Host checks against DNS rebinding (B-17).

use base64::Engine as _;
use hyper::HeaderMap;
use hyper::header::HeaderName;
pub(crate) use mcp_tasks_shared::web::host_allowed;
use mcp_tasks_shared::web::is_loopback_host;

/// A header that was present but could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderValueError {
    /// Characters outside visible ASCII, space and tab.
    InvalidCharacters,
    /// A malformed `=?base64?…?=` value.
    BadSentinel,
    /// The header was sent more than once.
    Repeated,
}

/// One routing header: absent, usable, or malformed.
pub(crate) type RoutingHeader = Option<Result<String, HeaderValueError>>;

/// The routing headers of one request, read before the body.
#[derive(Debug, Clone, Default)]
pub(crate) struct Routing {
    /// `MCP-Protocol-Version`.
    pub(crate) protocol_version: RoutingHeader,
    /// `Mcp-Method`.
    pub(crate) method: RoutingHeader,
    /// `Mcp-Name` (decoded).
    pub(crate) name: RoutingHeader,
}

impl Routing {
    /// Read the headers (names are case-insensitive, values case-sensitive).
    pub(crate) fn from_headers(headers: &HeaderMap) -> Routing {
        Routing {
            protocol_version: read(headers, &PROTOCOL_VERSION),
            method: read(headers, &METHOD),
            name: read(headers, &NAME),
        }
    }
}

// The names as constants: a lookup by `&str` parses and lower-cases the name on every
// request.
static PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
static METHOD: HeaderName = HeaderName::from_static("mcp-method");
static NAME: HeaderName = HeaderName::from_static("mcp-name");

fn read(headers: &HeaderMap, name: &HeaderName) -> RoutingHeader {
    let mut values = headers.get_all(name).iter();
    let raw = values.next()?;
    // Several lines of one header are one comma-joined value (RFC 9110 §5.3), which never
    // equals a single method, name or version: refuse it rather than pick a line.
    if values.next().is_some() {
        return Some(Err(HeaderValueError::Repeated));
    }
    Some(decode_value(raw.as_bytes()))
}

/// Decode a header value: trim surrounding whitespace, check the character set, unwrap the
/// Base64 sentinel if present.
pub(crate) fn decode_value(raw: &[u8]) -> Result<String, HeaderValueError> {
    if !raw
        .iter()
        .all(|&b| b == b'\t' || (0x20..=0x7e).contains(&b))
    {
        return Err(HeaderValueError::InvalidCharacters);
    }
    let text = std::str::from_utf8(raw)
        .map_err(|_| HeaderValueError::InvalidCharacters)?
        .trim();
    match text
        .strip_prefix("=?base64?")
        .and_then(|s| s.strip_suffix("?="))
    {
        None => Ok(text.to_owned()),
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| HeaderValueError::BadSentinel)?;
            String::from_utf8(bytes).map_err(|_| HeaderValueError::BadSentinel)
        }
    }
}

/// Whether a request's `Origin` (if any) may talk to this server: loopback origins always,
/// others only when listed in `MCPT_ALLOWED_ORIGINS`.
pub(crate) fn origin_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(origin) = headers.get(hyper::header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    if allowed.iter().any(|a| a == origin || a == "*") {
        return true;
    }
    let Ok(origin) = url::Url::parse(origin) else {
        return false;
    };
    matches!(origin.scheme(), "http" | "https") && origin.host_str().is_some_and(is_loopback_host)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// B-22: sentinel decoding.
    #[test]
    fn sentinel_values_decode() {
        assert_eq!(decode_value(b"=?base64?SGVsbG8=?="), Ok("Hello".into()));
        assert_eq!(decode_value(b"  greet  "), Ok("greet".into()));
        assert_eq!(decode_value(b"SGVsbG8="), Ok("SGVsbG8=".into()));
        assert_eq!(
            decode_value(b"=?base64?SGVsbG8=").as_deref(),
            Ok("=?base64?SGVsbG8=")
        );
        assert_eq!(
            decode_value(b"=?base64?SGVsbG8?="),
            Err(HeaderValueError::BadSentinel)
        );
        assert_eq!(
            decode_value(b"=?base64?SGVs!!!bG8=?="),
            Err(HeaderValueError::BadSentinel)
        );
        assert_eq!(
            decode_value(b"a\x01b"),
            Err(HeaderValueError::InvalidCharacters)
        );
    }

    /// B-17: only loopback or listed origins.
    #[test]
    fn origins() {
        let mut h = HeaderMap::new();
        assert!(origin_allowed(&h, &[]));
        h.insert(
            hyper::header::ORIGIN,
            "http://evil.example.com".parse().unwrap(),
        );
        assert!(!origin_allowed(&h, &[]));
        assert!(origin_allowed(&h, &["http://evil.example.com".to_owned()]));
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
        ] {
            h.insert(hyper::header::ORIGIN, ok.parse().unwrap());
            assert!(origin_allowed(&h, &[]), "{ok}");
        }
        h.insert(
            hyper::header::ORIGIN,
            "http://localhost.evil.com".parse().unwrap(),
        );
        assert!(!origin_allowed(&h, &[]));
    }

    #[test]
    fn hosts() {
        let path: hyper::Uri = "/mcp".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert(hyper::header::HOST, "127.0.0.1:8080".parse().unwrap());
        assert!(host_allowed(&path, &h));
        h.insert(hyper::header::HOST, "evil.example.com".parse().unwrap());
        assert!(!host_allowed(&path, &h));
        h.insert(hyper::header::HOST, "[::1]:80".parse().unwrap());
        assert!(host_allowed(&path, &h));
        // HTTP/2 (`:authority`, often without `Host`) and absolute-form targets.
        let none = HeaderMap::new();
        let evil: hyper::Uri = "http://evil.example.com/mcp".parse().unwrap();
        let local: hyper::Uri = "http://localhost:8080/mcp".parse().unwrap();
        assert!(!host_allowed(&evil, &none));
        assert!(!host_allowed(&evil, &h));
        assert!(host_allowed(&local, &none));
        assert!(host_allowed(&local, &h));
        assert!(host_allowed(&path, &none));
    }
}
