//! From body bytes to a checked request: JSON, the JSON-RPC envelope (B-02, B-03), the
//! required `_meta` fields (B-06), the version header (B-18, B-19) and the method and name
//! headers (B-20, B-21, T-40, T-41), in the order base-protocol.md §7.5 suggests.

use mcp_tasks_protocol::PROTOCOL_VERSION;
use mcp_tasks_protocol::jsonrpc::Id;
use mcp_tasks_protocol::meta::{CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY};
use serde_json::{Map, Value};

use crate::error::DispatchError;
use crate::headers::{HeaderValueError, Routing, RoutingHeader};

/// Methods this server implements; anything else is -32601 (B-23, T-39).
pub(crate) const METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
];

/// A parsed body: a request or a notification.
#[derive(Debug)]
pub(crate) enum Body {
    /// A request that passed every envelope and header check.
    Request(Request),
    /// A notification: accepted with 202 and ignored.
    Notification,
    /// A 2025-era `initialize` (no 2026 `_meta` version): the start of a session (`legacy`).
    Initialize {
        /// The request id.
        id: Id,
        /// Its params.
        params: Map<String, Value>,
    },
}

/// A checked request.
#[derive(Debug)]
pub(crate) struct Request {
    /// The id, echoed unchanged.
    pub(crate) id: Id,
    /// The method (one of [`METHODS`]).
    pub(crate) method: String,
    /// `params` (an object; `{}` when absent).
    pub(crate) params: Map<String, Value>,
    /// The caller's owner digest; empty until `http.rs` authenticated the request.
    pub(crate) owner: String,
}

impl Request {
    /// `params._meta`.
    pub(crate) fn meta(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        self.params
            .get("_meta")
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    /// The request's client capabilities (present: checked by [`parse`]).
    pub(crate) fn capabilities(&self) -> &Value {
        static EMPTY: Value = Value::Null;
        self.meta().get(CLIENT_CAPABILITIES_KEY).unwrap_or(&EMPTY)
    }
}

/// An error together with the request id, when it could be read.
pub(crate) type Rejection = (Option<Id>, DispatchError);

/// Parse and check a POST body against its routing headers.
///
/// # Errors
/// The first check that fails, with the id when it was readable.
pub(crate) fn parse(body: &[u8], routing: &Routing) -> Result<Body, Rejection> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| (None, DispatchError::Parse(e.to_string())))?;
    let mut obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err((
                None,
                DispatchError::InvalidRequest("batches are not supported".into()),
            ));
        }
        _ => {
            return Err((
                None,
                DispatchError::InvalidRequest("the body must be a JSON-RPC request object".into()),
            ));
        }
    };
    let id = match obj.get("id") {
        None => None,
        Some(Value::Null) => {
            return Err((
                None,
                DispatchError::InvalidRequest("id must not be null".into()),
            ));
        }
        Some(v) => Some(
            serde_json::from_value::<Id>(v.clone())
                .ok()
                .filter(Id::is_valid)
                .ok_or_else(|| {
                    (
                        None,
                        DispatchError::InvalidRequest("id must be a string or an integer".into()),
                    )
                })?,
        ),
    };
    let reject = |e: DispatchError| (id.clone(), e);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(reject(DispatchError::InvalidRequest(
            "jsonrpc must be \"2.0\"".into(),
        )));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return Err(reject(DispatchError::InvalidRequest(
                "method must be a string".into(),
            )));
        }
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Err(reject(DispatchError::InvalidRequest(
                "clients do not send responses to this server".into(),
            )));
        }
        None => {
            return Err(reject(DispatchError::InvalidRequest(
                "method is missing".into(),
            )));
        }
    };
    let params = match obj.remove("params") {
        None => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(reject(DispatchError::InvalidRequest(
                "params must be an object".into(),
            )));
        }
    };
    let Some(id) = id else {
        return Ok(Body::Notification);
    };
    let reject = |e: DispatchError| (Some(id.clone()), e);

    // A 2025-era client opens with `initialize` and no 2026 `_meta`: a session starts.
    let meta = params.get("_meta");
    let says_2026 = matches!(&routing.protocol_version, Some(Ok(v)) if v == PROTOCOL_VERSION);
    if method == "initialize"
        && !says_2026
        && meta.and_then(|m| m.get(PROTOCOL_VERSION_KEY)).is_none()
    {
        return Ok(Body::Initialize { id, params });
    }
    // `_meta` before the version header, so a missing field is -32602 (B-06).
    let meta = match meta {
        Some(Value::Object(m)) => m,
        Some(_) => return Err(reject(DispatchError::BadMeta("params._meta must be an object".into()))),
        None => return Err(reject(DispatchError::BadMeta("params._meta is missing; every request carries io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities".into()))),
    };
    let Some(body_version) = meta.get(PROTOCOL_VERSION_KEY).and_then(Value::as_str) else {
        return Err(reject(DispatchError::BadMeta(format!(
            "params._meta[\"{PROTOCOL_VERSION_KEY}\"] must be a string"
        ))));
    };
    if !meta
        .get(CLIENT_CAPABILITIES_KEY)
        .is_some_and(Value::is_object)
    {
        return Err(reject(DispatchError::BadMeta(format!(
            "params._meta[\"{CLIENT_CAPABILITIES_KEY}\"] must be an object"
        ))));
    }
    let header_version =
        required_header(&routing.protocol_version, "MCP-Protocol-Version").map_err(reject)?;
    if header_version != body_version {
        return Err(reject(DispatchError::HeaderMismatch(format!(
            "MCP-Protocol-Version header value '{header_version}' does not match the body's protocol version '{body_version}'"
        ))));
    }
    if body_version != PROTOCOL_VERSION {
        return Err(reject(DispatchError::UnsupportedVersion {
            requested: body_version.to_owned(),
        }));
    }
    let header_method = required_header(&routing.method, "Mcp-Method").map_err(reject)?;
    if header_method != method {
        return Err(reject(DispatchError::HeaderMismatch(format!(
            "Mcp-Method header value '{header_method}' does not match method '{method}'"
        ))));
    }
    // Unknown and removed methods first, whatever their other headers (T-41).
    if !METHODS.contains(&method.as_str()) {
        return Err(reject(DispatchError::MethodNotFound(method)));
    }
    let name_source = match method.as_str() {
        "tools/call" => Some("name"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(field) = name_source {
        let Some(body_name) = params.get(field).and_then(Value::as_str) else {
            return Err(reject(DispatchError::InvalidParams(format!(
                "params.{field} must be a string"
            ))));
        };
        let header_name = required_header(&routing.name, "Mcp-Name").map_err(reject)?;
        if header_name != body_name {
            return Err(reject(DispatchError::HeaderMismatch(format!(
                "Mcp-Name header value '{header_name}' does not match params.{field} '{body_name}'"
            ))));
        }
    }
    Ok(Body::Request(Request {
        id,
        method,
        params,
        owner: String::new(),
    }))
}

fn required_header(h: &RoutingHeader, name: &str) -> Result<String, DispatchError> {
    match h {
        None => Err(DispatchError::HeaderMismatch(format!(
            "the {name} header is required"
        ))),
        Some(Err(HeaderValueError::InvalidCharacters)) => Err(DispatchError::HeaderMismatch(
            format!("the {name} header has invalid characters"),
        )),
        Some(Err(HeaderValueError::Repeated)) => Err(DispatchError::HeaderMismatch(format!(
            "the {name} header was sent more than once"
        ))),
        Some(Err(HeaderValueError::BadSentinel)) => Err(DispatchError::HeaderMismatch(format!(
            "the {name} header has a malformed =?base64?…?= value"
        ))),
        Some(Ok(v)) => Ok(v.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn routing(version: &str, method: &str, name: Option<&str>) -> Routing {
        Routing {
            protocol_version: Some(Ok(version.into())),
            method: Some(Ok(method.into())),
            name: name.map(|n| Ok(n.into())),
        }
    }

    fn body(method: &str, params: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .unwrap()
    }

    fn meta() -> Value {
        json!({PROTOCOL_VERSION_KEY: PROTOCOL_VERSION, CLIENT_CAPABILITIES_KEY: {}})
    }

    fn err(r: Result<Body, Rejection>) -> DispatchError {
        match r {
            Err((_, e)) => e,
            Ok(b) => panic!("accepted: {b:?}"),
        }
    }

    /// B-03: batches, responses, null ids, bad JSON.
    #[test]
    fn envelope_rejections() {
        let r = routing(PROTOCOL_VERSION, "tools/list", None);
        assert!(matches!(
            err(parse(b"[]", &r)),
            DispatchError::InvalidRequest(_)
        ));
        assert!(matches!(err(parse(b"{", &r)), DispatchError::Parse(_)));
        assert!(matches!(
            err(parse(br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#, &r)),
            DispatchError::InvalidRequest(_)
        ));
        assert!(matches!(
            err(parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &r)),
            DispatchError::InvalidRequest(_)
        ));
        assert!(matches!(
            err(parse(br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#, &r)),
            DispatchError::InvalidRequest(_)
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/x"}"#, &r),
            Ok(Body::Notification)
        ));
    }

    /// B-06 before B-18: a missing _meta field is -32602 even when the header is fine.
    #[test]
    fn meta_is_checked_before_the_version_header() {
        let r = routing(PROTOCOL_VERSION, "server/discover", None);
        assert!(matches!(
            err(parse(&body("server/discover", json!({})), &r)),
            DispatchError::BadMeta(_)
        ));
        let no_caps = json!({"_meta": {PROTOCOL_VERSION_KEY: PROTOCOL_VERSION}});
        assert!(matches!(
            err(parse(&body("server/discover", no_caps), &r)),
            DispatchError::BadMeta(_)
        ));
    }

    /// B-18, B-19: header/body version mismatch is -32020; an unknown version is -32022.
    #[test]
    fn versions() {
        let other =
            json!({"_meta": {PROTOCOL_VERSION_KEY: "v999.0.0", CLIENT_CAPABILITIES_KEY: {}}});
        let r = routing(PROTOCOL_VERSION, "server/discover", None);
        assert!(matches!(
            err(parse(&body("server/discover", other.clone()), &r)),
            DispatchError::HeaderMismatch(_)
        ));
        let r = routing("v999.0.0", "server/discover", None);
        assert!(matches!(
            err(parse(&body("server/discover", other), &r)),
            DispatchError::UnsupportedVersion { .. }
        ));
    }

    /// B-20, B-21, T-40, T-41.
    #[test]
    fn method_and_name_headers() {
        let p = json!({"taskId": "tsk_a", "_meta": meta()});
        let r = routing(PROTOCOL_VERSION, "tasks/get", Some("tsk_b"));
        assert!(matches!(
            err(parse(&body("tasks/get", p.clone()), &r)),
            DispatchError::HeaderMismatch(_)
        ));
        let r = routing(PROTOCOL_VERSION, "tasks/get", None);
        assert!(matches!(
            err(parse(&body("tasks/get", p.clone()), &r)),
            DispatchError::HeaderMismatch(_)
        ));
        let r = routing(PROTOCOL_VERSION, "TASKS/GET", Some("tsk_a"));
        assert!(matches!(
            err(parse(&body("tasks/get", p.clone()), &r)),
            DispatchError::HeaderMismatch(_)
        ));
        let r = routing(PROTOCOL_VERSION, "tasks/get", Some("tsk_a"));
        assert!(matches!(
            parse(&body("tasks/get", p.clone()), &r),
            Ok(Body::Request(_))
        ));
        // tasks/result: -32601 although it has a taskId and no Mcp-Name.
        let r = routing(PROTOCOL_VERSION, "tasks/result", None);
        assert!(matches!(
            err(parse(&body("tasks/result", p), &r)),
            DispatchError::MethodNotFound(_)
        ));
    }

    #[test]
    fn legacy_initialize_starts_a_session() {
        let r = Routing::default();
        let b = body(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
        );
        match parse(&b, &r) {
            Ok(Body::Initialize { params, .. }) => {
                assert_eq!(params["protocolVersion"], "2025-06-18");
            }
            other => panic!("{other:?}"),
        }
        // With the 2026 `_meta` version it is a removed method (-32601).
        let b = body("initialize", json!({"_meta": meta()}));
        let r = routing(PROTOCOL_VERSION, "initialize", None);
        assert!(matches!(
            err(parse(&b, &r)),
            DispatchError::MethodNotFound(_)
        ));
    }
}
