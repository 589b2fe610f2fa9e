//! From body bytes to a checked request: JSON, the JSON-RPC envelope (B-02, B-03), the
//! required `_meta` fields (B-06), the version header (B-18, B-19), the method and name
//! headers (B-20, B-21, T-40, T-41), in the order base-protocol.md §7.5 suggests, and the
//! method's typed params.

use mcp_tasks_protocol::PROTOCOL_VERSION;
use mcp_tasks_protocol::jsonrpc::Id;
use mcp_tasks_protocol::legacy::InitializeParams;
use mcp_tasks_protocol::meta::{CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY, TRACEPARENT_KEY};
use mcp_tasks_protocol::method::Method;
use mcp_tasks_protocol::params::{
    self, CallToolParams, CancelTaskParams, GetPromptParams, GetTaskParams, ListPageParams,
    ListToolsParams, ListenParams, META, Member, ReadResourceParams, UpdateTaskParams,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::DispatchError;
use crate::headers::{HeaderValueError, Routing, RoutingHeader};

/// A parsed body: a request or a notification.
#[derive(Debug)]
pub(crate) enum Body {
    /// A request that passed every envelope and header check, and its params.
    Request(Request, Params),
    /// A notification: accepted with 202 and ignored.
    Notification,
    /// A 2025-era `initialize` (no 2026 `_meta` version): the start of a session (`legacy`).
    Initialize {
        /// The request id.
        id: Id,
        /// Its params.
        params: InitializeParams,
    },
}

/// A checked request: who asks, under which id, with which `_meta` (its params travel
/// beside it, typed).
#[derive(Debug)]
pub(crate) struct Request {
    /// The id, echoed unchanged.
    pub(crate) id: Id,
    /// The method.
    pub(crate) method: Method,
    /// `params._meta` (an object; checked by [`parse`] on 2026-07-28 requests).
    pub(crate) meta: Map<String, Value>,
    /// The caller's owner digest; empty until `http.rs` authenticated the request.
    pub(crate) owner: String,
}

impl Request {
    /// The request's client capabilities (present: checked by [`parse`]).
    pub(crate) fn capabilities(&self) -> &Value {
        static EMPTY: Value = Value::Null;
        self.meta.get(CLIENT_CAPABILITIES_KEY).unwrap_or(&EMPTY)
    }

    /// The request's client capabilities, taken out of it: what a job carries (T-45).
    pub(crate) fn take_capabilities(&mut self) -> Value {
        self.meta
            .remove(CLIENT_CAPABILITIES_KEY)
            .unwrap_or(Value::Null)
    }

    /// The caller's W3C trace context (`_meta.traceparent`), if it sent one.
    pub(crate) fn traceparent(&self) -> Option<String> {
        self.meta
            .get(TRACEPARENT_KEY)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

/// The typed params of a 2026-07-28 request, one variant per method.
#[derive(Debug)]
pub(crate) enum Params {
    /// `server/discover` (no params of its own).
    Discover,
    /// `tools/list`.
    ListTools(ListToolsParams),
    /// `tools/call`.
    CallTool(CallToolParams),
    /// `tasks/get`.
    GetTask(GetTaskParams),
    /// `tasks/update`.
    UpdateTask(UpdateTaskParams),
    /// `tasks/cancel`.
    CancelTask(CancelTaskParams),
    /// `subscriptions/listen`.
    Listen(ListenParams),
    /// `prompts/list`, `resources/list` or `resources/templates/list` (which: the method).
    ListPage(ListPageParams),
    /// `prompts/get`.
    GetPrompt(GetPromptParams),
    /// `resources/read`.
    ReadResource(ReadResourceParams),
}

/// A method's typed params from the params object (without `_meta`), for either era.
///
/// # Errors
/// -32602 should a params struct refuse an object (none does: members are [`Member`]s).
pub(crate) fn typed<P: DeserializeOwned>(raw: Map<String, Value>) -> Result<P, DispatchError> {
    params::from_map(raw).map_err(|e| DispatchError::InvalidParams(e.to_string()))
}

impl Params {
    /// Parse the params (without `_meta`) of a 2026-07-28 method.
    fn parse(method: Method, raw: Map<String, Value>) -> Result<Params, DispatchError> {
        Ok(match method {
            Method::ServerDiscover => Params::Discover,
            Method::ToolsList => Params::ListTools(typed(raw)?),
            Method::ToolsCall => Params::CallTool(typed(raw)?),
            Method::TasksGet => Params::GetTask(typed(raw)?),
            Method::TasksUpdate => Params::UpdateTask(typed(raw)?),
            Method::TasksCancel => Params::CancelTask(typed(raw)?),
            Method::SubscriptionsListen => Params::Listen(typed(raw)?),
            Method::PromptsList | Method::ResourcesList | Method::ResourcesTemplatesList => {
                Params::ListPage(typed(raw)?)
            }
            Method::PromptsGet => Params::GetPrompt(typed(raw)?),
            Method::ResourcesRead => Params::ReadResource(typed(raw)?),
            other => return Err(DispatchError::MethodNotFound(other.as_str().to_owned())),
        })
    }

    /// The member `Mcp-Name` must equal, with its name for messages (T-40, B-21).
    fn routing_name(&self) -> Option<(&'static str, &Member<String>)> {
        match self {
            Params::CallTool(p) => Some(("name", &p.name)),
            Params::GetPrompt(p) => Some(("name", &p.name)),
            Params::ReadResource(p) => Some(("uri", &p.uri)),
            Params::GetTask(GetTaskParams { task_id })
            | Params::UpdateTask(UpdateTaskParams { task_id, .. })
            | Params::CancelTask(CancelTaskParams { task_id }) => Some(("taskId", task_id)),
            _ => None,
        }
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
    let method_name = match obj.remove("method") {
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
    let mut raw_params = match obj.remove("params") {
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
    let method = Method::from_name(&method_name);

    // A 2025-era client opens with `initialize` and no 2026 `_meta`: a session starts.
    let meta = raw_params.remove(META);
    let says_2026 = matches!(&routing.protocol_version, Some(Ok(v)) if v == PROTOCOL_VERSION);
    if method == Some(Method::Initialize)
        && !says_2026
        && meta
            .as_ref()
            .and_then(|m| m.get(PROTOCOL_VERSION_KEY))
            .is_none()
    {
        let params = typed(raw_params).map_err(reject)?;
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
    if header_method != method_name {
        return Err(reject(DispatchError::HeaderMismatch(format!(
            "Mcp-Method header value '{header_method}' does not match method '{method_name}'"
        ))));
    }
    // Unknown and removed methods first, whatever their other headers (T-41).
    let Some(method) = method.filter(|m| m.in_2026()) else {
        return Err(reject(DispatchError::MethodNotFound(method_name)));
    };
    let params = Params::parse(method, raw_params).map_err(reject)?;
    if let Some((field, body_name)) = params.routing_name() {
        let Some(body_name) = body_name.valid() else {
            return Err(reject(DispatchError::InvalidParams(format!(
                "params.{field} must be a string"
            ))));
        };
        let header_name = required_header(&routing.name, "Mcp-Name").map_err(reject)?;
        if header_name != *body_name {
            return Err(reject(DispatchError::HeaderMismatch(format!(
                "Mcp-Name header value '{header_name}' does not match params.{field} '{body_name}'"
            ))));
        }
    }
    Ok(Body::Request(
        Request {
            id,
            method,
            meta,
            owner: String::new(),
        },
        params,
    ))
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
            Ok(Body::Request(..))
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
                assert_eq!(params.protocol_version, Member::Valid("2025-06-18".into()));
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
