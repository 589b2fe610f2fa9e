//! JSON-RPC 2.0 framing (base-protocol.md §2) and the error codes of §16.
//!
//! Error codes are named here and nowhere else (STYLE.md §3).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Body is not valid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Not a valid JSON-RPC request: batch, posted response, `id: null`, wrong member types.
pub const INVALID_REQUEST: i64 = -32600;
/// Unknown or removed method (HTTP 404 on Streamable HTTP).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid params: missing `_meta` fields, unknown tool, unknown task, malformed answers.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error; also the code of a failed task whose work broke or expired.
pub const INTERNAL_ERROR: i64 = -32603;
/// A standard header is missing or disagrees with the body (B-18, B-20, B-21).
pub const HEADER_MISMATCH: i64 = -32020;
/// The request needs a client capability it did not declare (B-08, T-04).
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// The requested protocol version is not served (B-19).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// 2025 revisions (2025-11-25 server/resources): the resource a `resources/read` named does
/// not exist; 2026-07-28 answers -32602 with `data.uri` instead (SEP-2164).
pub const RESOURCE_NOT_FOUND_2025: i64 = -32002;
/// (Project-defined.) A per-caller limit is reached. The specification defines no code for
/// this, and application codes belong outside `-32768…-32000` (base-protocol §16.3).
pub const LIMIT_EXCEEDED: i64 = -31001;

/// A JSON-RPC request id: a string or an integer, never `null` (B-02). Echoed unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    /// An integer id (any JSON integer, signed or unsigned 64-bit; see [`Id::is_valid`]).
    Number(serde_json::Number),
    /// A string id.
    String(String),
}

impl Id {
    /// Whether the id is a string or an integer (JSON-RPC allows no fractions here, B-02).
    pub fn is_valid(&self) -> bool {
        match self {
            Id::Number(n) => n.is_i64() || n.is_u64(),
            Id::String(_) => true,
        }
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Number(n) => write!(f, "{n}"),
            Id::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// The error member of a JSON-RPC error response (B-05).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// Integer error code.
    pub code: i64,
    /// One short sentence saying what was wrong.
    pub message: String,
    /// Free-form detail; required for -32021 and -32022.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// -32022 naming the served versions and the requested one (B-19).
    pub fn unsupported_version(requested: &str) -> Self {
        ErrorObject::with_data(
            UNSUPPORTED_PROTOCOL_VERSION,
            format!(
                "Unsupported protocol version {requested:?}; this server speaks {}",
                super::PROTOCOL_VERSION
            ),
            serde_json::json!({ "supported": [super::PROTOCOL_VERSION], "requested": requested }),
        )
    }

    /// -32021 listing what is missing in `requiredCapabilities` (B-08, T-04).
    pub fn missing_capability(message: impl Into<String>, required: Value) -> Self {
        ErrorObject::with_data(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            message,
            serde_json::json!({ "requiredCapabilities": required }),
        )
    }

    /// An error with data.
    pub fn with_data(code: i64, message: impl Into<String>, data: Value) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: Some(data),
        }
    }
}

/// A response on the wire: `result` or `error`, with the request id (absent only when unreadable).
#[derive(Debug, Serialize)]
pub struct Response<'a, R: Serialize> {
    /// Always `"2.0"`.
    pub jsonrpc: &'static str,
    /// The request id, omitted when it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a Id>,
    /// Success payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<R>,
    /// Failure payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a ErrorObject>,
}

/// Serialize a success response.
pub fn result_bytes<R: Serialize>(id: &Id, result: &R) -> Vec<u8> {
    let response = Response {
        jsonrpc: "2.0",
        id: Some(id),
        result: Some(result),
        error: None,
    };
    to_bytes(&response).unwrap_or_else(|_| internal_error_bytes(Some(id)))
}

/// A response serialized into a buffer sized for a typical task result, which
/// `serde_json::to_vec`'s 128 bytes would grow two or three times.
fn to_bytes<R: Serialize>(response: &Response<'_, R>) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(512);
    serde_json::to_writer(&mut out, response)?;
    Ok(out)
}

/// Serialize an error response.
pub fn error_bytes(id: Option<&Id>, error: &ErrorObject) -> Vec<u8> {
    let response: Response<'_, ()> = Response {
        jsonrpc: "2.0",
        id,
        result: None,
        error: Some(error),
    };
    serde_json::to_vec(&response).unwrap_or_else(|_| internal_error_bytes(id))
}

fn internal_error_bytes(id: Option<&Id>) -> Vec<u8> {
    let id = id.map_or_else(
        || "null".to_owned(),
        |id| serde_json::to_string(id).unwrap_or_default(),
    );
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{INTERNAL_ERROR},"message":"internal error"}}}}"#
    )
    .into_bytes()
}

/// A server-to-client notification (used on SSE streams).
#[derive(Debug, Serialize)]
pub struct Notification<'a, P: Serialize> {
    /// Always `"2.0"`.
    pub jsonrpc: &'static str,
    /// Notification method.
    pub method: &'a str,
    /// Parameters.
    pub params: P,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_with_their_json_type() {
        let n: Id = serde_json::from_str("7").unwrap();
        let s: Id = serde_json::from_str("\"7\"").unwrap();
        assert_eq!(n, Id::Number(7.into()));
        let big: Id = serde_json::from_str("18446744073709551615").unwrap();
        assert!(big.is_valid());
        assert_eq!(serde_json::to_string(&big).unwrap(), "18446744073709551615");
        let frac: Id = serde_json::from_str("1.5").unwrap();
        assert!(!frac.is_valid());
        assert_eq!(s, Id::String("7".into()));
        assert_eq!(serde_json::to_string(&n).unwrap(), "7");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"7\"");
        assert!(serde_json::from_str::<Id>("null").is_err());
    }

    #[test]
    fn error_without_id_omits_the_member() {
        let bytes = error_bytes(None, &ErrorObject::new(PARSE_ERROR, "bad"));
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(v.get("id").is_none());
        assert_eq!(v["error"]["code"], PARSE_ERROR);
    }
}
