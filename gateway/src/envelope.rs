//! From body bytes to a checked request: JSON, the JSON-RPC envelope (B-02, B-03), the
//! required `_meta` fields (B-06), the version header (B-18, B-19), the method and name
//! headers (B-20, B-21, T-40, T-41), in the order base-protocol.md §7.5 suggests, and the
//! method's typed params. Here: the request types and those checks; `envelope/scan.rs`
//! reads the body's members in one serde pass.

mod scan;

use mcp_tasks_protocol::PROTOCOL_VERSION;
use mcp_tasks_protocol::jsonrpc::Id;
use mcp_tasks_protocol::legacy::InitializeParams;
use mcp_tasks_protocol::meta::{
    CLIENT_CAPABILITIES_KEY, IDEMPOTENCY_KEY, PRIORITY_KEY, PROTOCOL_VERSION_KEY, TRACEPARENT_KEY,
};
use mcp_tasks_protocol::method::Method;
use mcp_tasks_protocol::params::{
    self, CallToolParams, CancelTaskParams, GetPromptParams, GetTaskParams, ListPageParams,
    ListToolsParams, ListenParams, META, Member, ReadResourceParams, UpdateTaskParams,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use self::scan::{Members, Slot};
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
    /// `params._meta`: on 2026-07-28 requests only the members read later
    /// (`clientCapabilities`, checked to be an object by [`parse`], and `traceparent`).
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
    let unparsed = |e: DispatchError| (None, e);
    let mut obj = scan::request_members(body).map_err(unparsed)?;
    let id = take_id(&mut obj).map_err(unparsed)?;
    let Envelope {
        method_name,
        params: mut raw_params,
    } = Envelope::read(obj).map_err(|e| (id.clone(), e))?;
    let Some(id) = id else {
        return Ok(Body::Notification);
    };
    let reject = |e: DispatchError| (Some(id.clone()), e);
    let method = Method::from_name(&method_name);
    let meta = raw_params.take_slot(META);
    if starts_a_session(method, routing, meta.as_ref()) {
        let params = typed(raw_params.into_map()).map_err(reject)?;
        return Ok(Body::Initialize { id, params });
    }
    // `_meta` before the version header, so a missing field is -32602 (B-06).
    let meta = RequiredMeta::read(meta).map_err(reject)?;
    check_version(routing, meta.protocol_version).map_err(reject)?;
    let method = check_method(routing, method_name, method).map_err(reject)?;
    let params = Params::parse(method, raw_params.into_map()).map_err(reject)?;
    check_name(routing, &params).map_err(reject)?;
    Ok(Body::Request(
        Request {
            id,
            method,
            meta: meta.read_later,
            owner: String::new(),
        },
        params,
    ))
}

/// The request id: `None` for a notification; never `null` (B-03).
fn take_id(obj: &mut Members<'_>) -> Result<Option<Id>, DispatchError> {
    match obj.take("id") {
        None => Ok(None),
        Some(Value::Null) => Err(DispatchError::InvalidRequest("id must not be null".into())),
        Some(v) => serde_json::from_value::<Id>(v)
            .ok()
            .filter(Id::is_valid)
            .map(Some)
            .ok_or_else(|| {
                DispatchError::InvalidRequest("id must be a string or an integer".into())
            }),
    }
}

/// The JSON-RPC envelope of a request or notification, once `jsonrpc` was checked (B-03).
struct Envelope<'a> {
    /// `method`, as sent.
    method_name: String,
    /// The members of `params` (none when it was not sent), `_meta` among them.
    params: Members<'a>,
}

impl<'a> Envelope<'a> {
    fn read(mut obj: Members<'a>) -> Result<Envelope<'a>, DispatchError> {
        if obj.value("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(DispatchError::InvalidRequest(
                "jsonrpc must be \"2.0\"".into(),
            ));
        }
        let method_name = match obj.take("method") {
            Some(Value::String(m)) => m,
            Some(_) => {
                return Err(DispatchError::InvalidRequest(
                    "method must be a string".into(),
                ));
            }
            None if obj.slot("result").is_some() || obj.slot("error").is_some() => {
                return Err(DispatchError::InvalidRequest(
                    "clients do not send responses to this server".into(),
                ));
            }
            None => return Err(DispatchError::InvalidRequest("method is missing".into())),
        };
        let params = match obj.take_slot("params") {
            None => Members::default(),
            Some(Slot::Object(params)) => params,
            Some(_) => {
                return Err(DispatchError::InvalidRequest(
                    "params must be an object".into(),
                ));
            }
        };
        Ok(Envelope {
            method_name,
            params,
        })
    }
}

/// A 2025-era client opens with `initialize` and no 2026 `_meta` version: a session starts.
fn starts_a_session(method: Option<Method>, routing: &Routing, meta: Option<&Slot<'_>>) -> bool {
    let says_2026 = matches!(&routing.protocol_version, Some(Ok(v)) if v == PROTOCOL_VERSION);
    method == Some(Method::Initialize)
        && !says_2026
        && !matches!(meta, Some(Slot::Object(m)) if m.slot(PROTOCOL_VERSION_KEY).is_some())
}

/// The `_meta` fields every 2026-07-28 request carries (B-06).
struct RequiredMeta {
    /// `io.modelcontextprotocol/protocolVersion`.
    protocol_version: String,
    /// The `_meta` members the gateway reads later (`clientCapabilities`, `traceparent`);
    /// the rest (clientInfo, unknown keys) were not built.
    read_later: Map<String, Value>,
}

impl RequiredMeta {
    fn read(meta: Option<Slot<'_>>) -> Result<RequiredMeta, DispatchError> {
        let mut meta = match meta {
            Some(Slot::Object(m)) => m,
            Some(_) => return Err(DispatchError::BadMeta("params._meta must be an object".into())),
            None => return Err(DispatchError::BadMeta("params._meta is missing; every request carries io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities".into())),
        };
        let Some(Value::String(protocol_version)) = meta.take(PROTOCOL_VERSION_KEY) else {
            return Err(DispatchError::BadMeta(format!(
                "params._meta[\"{PROTOCOL_VERSION_KEY}\"] must be a string"
            )));
        };
        let Some(capabilities @ Value::Object(_)) = meta.take(CLIENT_CAPABILITIES_KEY) else {
            return Err(DispatchError::BadMeta(format!(
                "params._meta[\"{CLIENT_CAPABILITIES_KEY}\"] must be an object"
            )));
        };
        let mut read_later = Map::with_capacity(2);
        read_later.insert(CLIENT_CAPABILITIES_KEY.to_owned(), capabilities);
        for later in [TRACEPARENT_KEY, IDEMPOTENCY_KEY, PRIORITY_KEY] {
            if let Some(v) = meta.take(later) {
                read_later.insert(later.to_owned(), v);
            }
        }
        Ok(RequiredMeta {
            protocol_version,
            read_later,
        })
    }
}

/// B-18, B-19: `MCP-Protocol-Version` equals the body's version, and this server speaks it.
fn check_version(routing: &Routing, body_version: String) -> Result<(), DispatchError> {
    let header_version = required_header(&routing.protocol_version, "MCP-Protocol-Version")?;
    if header_version != body_version {
        return Err(DispatchError::HeaderMismatch(format!(
            "MCP-Protocol-Version header value '{header_version}' does not match the body's protocol version '{body_version}'"
        )));
    }
    if body_version != PROTOCOL_VERSION {
        return Err(DispatchError::UnsupportedVersion {
            requested: body_version,
        });
    }
    Ok(())
}

/// B-20: `Mcp-Method` equals the body's method; then the method must be one of 2026-07-28.
fn check_method(
    routing: &Routing,
    method_name: String,
    method: Option<Method>,
) -> Result<Method, DispatchError> {
    let header_method = required_header(&routing.method, "Mcp-Method")?;
    if header_method != method_name {
        return Err(DispatchError::HeaderMismatch(format!(
            "Mcp-Method header value '{header_method}' does not match method '{method_name}'"
        )));
    }
    // Unknown and removed methods first, whatever their other headers (T-41).
    method
        .filter(|m| m.in_2026())
        .ok_or(DispatchError::MethodNotFound(method_name))
}

/// T-40, B-21: `Mcp-Name` equals the params member it names, for the methods that have one.
fn check_name(routing: &Routing, params: &Params) -> Result<(), DispatchError> {
    let Some((field, body_name)) = params.routing_name() else {
        return Ok(());
    };
    let Some(body_name) = body_name.valid() else {
        return Err(DispatchError::InvalidParams(format!(
            "params.{field} must be a string"
        )));
    };
    let header_name = required_header(&routing.name, "Mcp-Name")?;
    if header_name != *body_name {
        return Err(DispatchError::HeaderMismatch(format!(
            "Mcp-Name header value '{header_name}' does not match params.{field} '{body_name}'"
        )));
    }
    Ok(())
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

    /// The body is read member by member: a repeated name keeps its last value, escapes in
    /// names and strings are honoured, members the gateway never reads are not built, and a
    /// value that is JSON but not a float is still a parse error (B-02, B-03).
    #[test]
    fn members_read_as_value_parsing_would() {
        let r = routing(PROTOCOL_VERSION, "tasks/get", Some("tsk_b"));
        let b = format!(
            r#"{{"jsonrpc":"1.0","id":"x","method":"tools/list","\u006a\u0073onrpc":"2\u002e0",
               "params":{{"taskId":"tsk_a","_meta":{{}}}},"method":"tasks\/get",
               "params":{{"taskId":"tsk_a","taskId":"tsk_b","_meta":{{
                 "{PROTOCOL_VERSION_KEY}":"{PROTOCOL_VERSION}","{CLIENT_CAPABILITIES_KEY}":{{"a":[1]}},
                 "io.modelcontextprotocol/clientInfo":{{"deep":[[[[{{"n":1.5}}]]]]}},
                 "traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}},
               "id":7}}"#
        );
        let Ok(Body::Request(req, Params::GetTask(p))) = parse(b.as_bytes(), &r) else {
            panic!("refused: {b}");
        };
        assert_eq!(req.id, Id::Number(7.into()));
        assert_eq!(req.method, Method::TasksGet);
        assert_eq!(p.task_id.valid().map(String::as_str), Some("tsk_b"));
        assert_eq!(req.capabilities(), &json!({"a": [1]}));
        assert!(req.traceparent().is_some_and(|t| t.starts_with("00-0af7")));

        // A number JSON allows but a float cannot hold, in a member that is read and in one
        // that is not.
        let unread = b.replace("1.5", "1e400");
        assert!(matches!(
            err(parse(unread.as_bytes(), &r)),
            DispatchError::Parse(_)
        ));
        // Lone surrogates, in a value and in a name of a member that is not read.
        for lone in [r#""n":"\ud800""#, r#""\udc00":1"#] {
            let unread = b.replace(r#""n":1.5"#, lone);
            assert!(
                matches!(err(parse(unread.as_bytes(), &r)), DispatchError::Parse(_)),
                "{unread}"
            );
        }
        let p = json!({"name": "sleep", "_meta": meta()});
        let mut b = String::from_utf8(body("tools/call", p)).unwrap();
        b = b.replacen(
            r#""name":"sleep""#,
            r#""name":"sleep","arguments":{"ms":1e400}"#,
            1,
        );
        let r = routing(PROTOCOL_VERSION, "tools/call", Some("sleep"));
        assert!(matches!(
            err(parse(b.as_bytes(), &r)),
            DispatchError::Parse(_)
        ));
        // Trailing text, and a params that is not an object.
        assert!(matches!(
            err(parse(br#"{"jsonrpc":"2.0","id":1,"method":"x"} {}"#, &r)),
            DispatchError::Parse(_)
        ));
        assert!(matches!(
            err(parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[{}]}"#, &r)),
            DispatchError::InvalidRequest(m) if m.contains("params")
        ));
        assert!(matches!(
            err(parse(br#"{"jsonrpc":"2.0","id":1,"method":7}"#, &r)),
            DispatchError::InvalidRequest(m) if m.contains("method")
        ));
        assert!(matches!(
            err(parse(b"7", &r)),
            DispatchError::InvalidRequest(_)
        ));
    }

    /// A body nested deeper than `Value` parsing takes is a parse error, even where it sits
    /// in a member the gateway scans but does not build; brackets inside strings (escaped
    /// quotes included) do not count.
    #[test]
    fn nesting_is_limited_wherever_it_is() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let r = routing(PROTOCOL_VERSION, "tasks/get", Some("tsk_a"));
        let request = |info: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"taskId":"tsk_a",
                   "_meta":{{"{PROTOCOL_VERSION_KEY}":"{PROTOCOL_VERSION}",
                   "{CLIENT_CAPABILITIES_KEY}":{{}},"info":{info}}}}}}}"#
            )
        };
        assert!(matches!(
            parse(request(&deep(124)).as_bytes(), &r),
            Ok(Body::Request(..))
        ));
        let brackets = format!(r#"["{}\"{}"]"#, "[{".repeat(200), "]}".repeat(200));
        assert!(matches!(
            parse(request(&brackets).as_bytes(), &r),
            Ok(Body::Request(..))
        ));
        assert!(matches!(
            err(parse(request(&deep(125)).as_bytes(), &r)),
            DispatchError::Parse(_)
        ));
        assert!(matches!(
            err(parse(deep(100_000).as_bytes(), &r)),
            DispatchError::Parse(_)
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
