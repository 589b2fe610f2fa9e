//! The 2025 protocol revisions (2025-11-25, 2025-06-18) on the same endpoint as
//! 2026-07-28, over the same Redis tasks.
//!
//! A 2025 client opens with `initialize` and then carries an `Mcp-Session-Id`. The session is
//! a Redis record (`mcpt:session:{SID}`: negotiated version, client capabilities, owner) that
//! every gateway reads, so no request needs the gateway that started the session; its
//! expiry is the idle timeout, restarted by each request in the same command that reads it.
//!
//! What a session can do:
//! - `ping`, `tools/list` (with `execution.taskSupport` on 2025-11-25), `DELETE` to end it;
//! - a synchronous `tools/call` (`call.rs`): a durable task inside, answered on an SSE stream
//!   carrying `notifications/progress` from status messages, keep-alive comments, and the
//!   task's input requests as real `elicitation/create` / `sampling/createMessage` /
//!   `roots/list` requests whose responses, POSTed to any gateway, answer the task;
//! - on 2025-11-25, the tasks API (`tasks.rs`): task-augmented `tools/call`, `tasks/get`,
//!   `tasks/result`, `tasks/list`, `tasks/cancel`.
//!
//! A request carrying `MCP-Protocol-Version: 2026-07-28` is never a session request, whatever
//! other headers it has.

mod call;
mod stream;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use mcp_tasks_protocol::jsonrpc::{
    self, ErrorObject, INVALID_PARAMS, INVALID_REQUEST, Id, METHOD_NOT_FOUND,
};
use mcp_tasks_protocol::legacy;
use mcp_tasks_protocol::meta::{CLIENT_CAPABILITIES_KEY, server_meta};
use mcp_tasks_protocol::tasks::ResponseKind;
use mcp_tasks_protocol::{SERVER_NAME, SERVER_VERSION};
use mcp_tasks_store::{Answer, is_plausible_task_id};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::State;
use crate::envelope::Request;
use crate::error::DispatchError;
use crate::http::{Reply, ResBody};

/// The session header (matched case-insensitively by `http`).
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// The newest 2025 revision, offered to a client asking for one this server does not know.
pub(crate) const LATEST: &str = legacy::VERSION_2025_11_25;

/// The 2025 revisions served, newest first.
/// (2025-03-26 is not offered: it requires JSON-RPC batches, which this server does not take;
/// a client asking for it is offered 2025-11-25.)
pub(crate) const VERSIONS: &[&str] = legacy::VERSIONS;

/// Largest client capabilities object a session keeps, as JSON.
const MAX_CAPS_BYTES: usize = 4096;

/// A session ends after this long without a request.
const SESSION_IDLE: Duration = Duration::from_secs(24 * 3600);

/// Prefix of the ids of requests this server sends to a client for a task's input:
/// `mcpt:TASK_ID:KEY`, so the response names its task and key and any gateway can file it.
const INPUT_ID_PREFIX: &str = "mcpt:";

/// A session as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Session {
    /// The session id (not stored: it is the record's name).
    #[serde(skip)]
    pub(crate) id: String,
    /// The negotiated revision.
    pub(crate) version: String,
    /// The client's capabilities, in the shape tools and input requests are checked against.
    pub(crate) caps: Value,
    /// The owner digest of the principal that started it; no one else can use it.
    pub(crate) owner: String,
}

impl Session {
    /// Whether the session speaks the revision with the tasks API.
    pub(crate) fn has_tasks(&self) -> bool {
        self.version == legacy::VERSION_2025_11_25
    }

    /// Whose tasks `tasks/list` shows: the principal's, or this session's when anonymous.
    pub(crate) fn list_scope(&self) -> String {
        if self.owner == mcp_tasks_protocol::meta::ANONYMOUS_OWNER {
            format!("s:{}", self.id)
        } else {
            self.owner.clone()
        }
    }
}

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<ResBody> {
    use http_body_util::{BodyExt as _, Full};
    let mut res = Response::new(Full::new(body.into()).boxed_unsync());
    *res.status_mut() = status;
    res
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<ResBody> {
    let mut res = full(status, body);
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

fn error_response(status: StatusCode, id: Option<&Id>, error: &ErrorObject) -> Response<ResBody> {
    json_response(status, jsonrpc::error_bytes(id, error))
}

fn session_missing(status: StatusCode, why: &str) -> Response<ResBody> {
    error_response(status, None, &ErrorObject::new(INVALID_REQUEST, why))
}

/// The session `id` names, if it exists and belongs to `owner` (someone else's session is
/// the same 404 as an unknown one).
async fn load(state: &State, id: &str, owner: &str) -> Result<Option<Session>, DispatchError> {
    if !plausible_session_id(id) {
        return Ok(None);
    }
    let Some(raw) = state.store.touch_session(id, SESSION_IDLE).await? else {
        return Ok(None);
    };
    let mut session: Session = serde_json::from_str(&raw)
        .map_err(|e| DispatchError::Internal(format!("unreadable session record: {e}")))?;
    id.clone_into(&mut session.id);
    Ok((session.owner == owner).then_some(session))
}

fn plausible_session_id(id: &str) -> bool {
    id.len() == 26
        && id.starts_with("ses_")
        && id[4..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn new_session_id() -> String {
    use base64::Engine as _;
    let raw = uuid::Uuid::new_v4();
    format!(
        "ses_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw.as_bytes())
    )
}

/// The client capabilities of a 2025 `initialize`, as the shape requests are checked with:
/// `elicitation`, `sampling` and `roots` mean the same in both eras; `tasks` is 2025-only.
fn capabilities(legacy: Option<&Value>) -> Value {
    let mut caps = Map::new();
    if let Some(Value::Object(l)) = legacy {
        for key in ["elicitation", "sampling", "roots"] {
            if let Some(v @ Value::Object(_)) = l.get(key) {
                caps.insert(key.to_owned(), v.clone());
            }
        }
    }
    Value::Object(caps)
}

/// `initialize` (no session yet): negotiate a revision and store the session.
pub(crate) async fn initialize(
    state: &Arc<State>,
    owner: String,
    id: Id,
    params: Map<String, Value>,
) -> Response<ResBody> {
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // The client's version when served, else the newest; the client decides whether to stay.
    let version = VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST);
    let sid = new_session_id();
    let caps = capabilities(params.get("capabilities"));
    if caps.to_string().len() > MAX_CAPS_BYTES {
        return error_response(
            StatusCode::BAD_REQUEST,
            Some(&id),
            &ErrorObject::new(
                INVALID_PARAMS,
                format!("params.capabilities is larger than {MAX_CAPS_BYTES} bytes of JSON"),
            ),
        );
    }
    let session = Session {
        id: sid.clone(),
        version: version.to_owned(),
        caps,
        owner,
    };
    let record = serde_json::to_string(&session).unwrap_or_default();
    if let Err(e) = state.store.put_session(&sid, &record, SESSION_IDLE).await {
        let e = DispatchError::from(e);
        tracing::warn!(error = %e, "cannot store a session");
        return error_response(StatusCode::OK, Some(&id), &ErrorObject::from(&e));
    }
    let mut caps = json!({ "tools": { "listChanged": false } });
    if session.has_tasks() {
        caps["tasks"] =
            json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } });
    }
    let client = params
        .get("clientInfo")
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("unnamed");
    tracing::info!(protocol.version = version, client.name = %client, "2025 session started");
    let result = json!({
        "protocolVersion": version,
        "capabilities": caps,
        "serverInfo": { "name": SERVER_NAME, "version": SERVER_VERSION },
        "instructions": "Long tool calls run as durable tasks; on 2025-11-25 call them as tasks (execution.taskSupport) to poll and resume them.",
    });
    let mut res = json_response(StatusCode::OK, jsonrpc::result_bytes(&id, &result));
    if let Ok(v) = HeaderValue::from_str(&sid) {
        res.headers_mut().insert(SESSION_HEADER, v);
    }
    res
}

/// `GET` with a session id: the session's stream of task status notifications.
pub(crate) async fn get(
    state: &Arc<State>,
    owner: &str,
    sid: &str,
    accepts_sse: bool,
) -> Response<ResBody> {
    if !accepts_sse {
        return session_missing(
            StatusCode::NOT_ACCEPTABLE,
            "the session stream is text/event-stream: Accept must allow it",
        );
    }
    match load(state, sid, owner).await {
        // 2025-06-18 sessions have nothing to send on it (the SDK takes 405 quietly).
        Ok(Some(session)) if !session.has_tasks() => {
            let mut res = full(StatusCode::METHOD_NOT_ALLOWED, Bytes::new());
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            res
        }
        Ok(Some(session)) => {
            // An open stream holds one of the owner's MCPT_LIMIT_LISTENERS slots.
            match crate::handlers::listen::ListenerSlot::take(state, owner).await {
                Ok(slot) => crate::http::sse(stream::open(state.clone(), session, slot)),
                Err(e) => error_response(e.status(), None, &legacy_error(&e)),
            }
        }
        Ok(None) => session_missing(StatusCode::NOT_FOUND, "Session not found"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a session");
            session_missing(
                StatusCode::SERVICE_UNAVAILABLE,
                "the session store is unavailable",
            )
        }
    }
}

/// `DELETE` with a session id: end the session.
pub(crate) async fn end(state: &Arc<State>, owner: &str, sid: &str) -> Response<ResBody> {
    match load(state, sid, owner).await {
        Ok(Some(_)) => match state.store.end_session(sid).await {
            Ok(_) => full(StatusCode::NO_CONTENT, Bytes::new()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot end a session");
                session_missing(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the session store is unavailable",
                )
            }
        },
        Ok(None) => session_missing(StatusCode::NOT_FOUND, "Session not found"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a session");
            session_missing(
                StatusCode::SERVICE_UNAVAILABLE,
                "the session store is unavailable",
            )
        }
    }
}

/// A POST carrying a session id (and no 2026 version header).
pub(crate) async fn post(
    state: &Arc<State>,
    owner: String,
    sid: &str,
    version_header: Option<&str>,
    body: &[u8],
    accepts_sse: bool,
) -> Response<ResBody> {
    let session = match load(state, sid, &owner).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return session_missing(
                StatusCode::NOT_FOUND,
                "Session not found: it ended or expired; send initialize again",
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a session");
            return session_missing(
                StatusCode::SERVICE_UNAVAILABLE,
                "the session store is unavailable; retry",
            );
        }
    };
    if let Some(v) = version_header
        && v != session.version
    {
        return session_missing(
            StatusCode::BAD_REQUEST,
            &format!(
                "MCP-Protocol-Version {v:?} is not this session's negotiated version {:?}",
                session.version
            ),
        );
    }
    let message: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                None,
                &ErrorObject::from(&DispatchError::Parse(e.to_string())),
            );
        }
    };
    let Value::Object(mut obj) = message else {
        return session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: the body must be one JSON-RPC message object (batches are not supported)",
        );
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: jsonrpc must be \"2.0\"",
        );
    }
    let id = match obj.get("id") {
        None => None,
        Some(v) => match serde_json::from_value::<Id>(v.clone())
            .ok()
            .filter(Id::is_valid)
        {
            Some(id) => Some(id),
            None => {
                return session_missing(
                    StatusCode::BAD_REQUEST,
                    "Invalid request: id must be a string or an integer",
                );
            }
        },
    };
    let method = match obj.remove("method") {
        Some(Value::String(m)) => Some(m),
        None => None,
        Some(_) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                id.as_ref(),
                &ErrorObject::new(INVALID_REQUEST, "Invalid request: method must be a string"),
            );
        }
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                id.as_ref(),
                &ErrorObject::new(INVALID_REQUEST, "Invalid request: params must be an object"),
            );
        }
    };
    match (method, id) {
        // A response to one of our input requests.
        (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
            respond(state, &session, &id, obj).await
        }
        (None, _) => session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: method is missing",
        ),
        (Some(method), None) => {
            notification(state, &session, &method, &params).await;
            full(StatusCode::ACCEPTED, Bytes::new())
        }
        // A client starting over on the same connection: a new session.
        (Some(method), Some(id)) if method == "initialize" => {
            initialize(state, session.owner, id, params).await
        }
        (Some(method), Some(id)) => request(state, session, id, method, params, accepts_sse).await,
    }
}

/// A client notification: `notifications/cancelled` for a synchronous call cancels its task
/// (the id a call runs under is remembered for that); the rest need nothing.
async fn notification(
    state: &Arc<State>,
    session: &Session,
    method: &str,
    params: &Map<String, Value>,
) {
    if method != "notifications/cancelled" {
        return;
    }
    let Some(request_id) = params.get("requestId") else {
        return;
    };
    if let Some(task) = call::task_of_request(state, session, request_id).await
        && let Err(e) = state.store.cancel(&task, &session.owner).await
    {
        tracing::warn!(task.id = %task, error = %e, "cannot cancel a call the client cancelled");
    }
}

/// A client's response to an input request we sent: the answer of that task's key.
async fn respond(
    state: &Arc<State>,
    session: &Session,
    id: &Id,
    obj: Map<String, Value>,
) -> Response<ResBody> {
    let Id::String(raw) = id else {
        return session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: no request of this server has this id",
        );
    };
    let Some((task, key)) = raw
        .strip_prefix(INPUT_ID_PREFIX)
        .and_then(|rest| rest.split_once(':'))
        .filter(|(task, _)| is_plausible_task_id(task))
    else {
        return session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: no request of this server has this id",
        );
    };
    let answer = match obj.get("result") {
        Some(result) => result.clone(),
        None => {
            tracing::info!(task.id = %task, key = %key, error = %obj.get("error").cloned().unwrap_or_default(), "client answered an input request with an error");
            match failed_answer(state, session, task, key).await {
                Ok(Some(answer)) => answer,
                Ok(None) => return full(StatusCode::ACCEPTED, Bytes::new()),
                Err(res) => return res,
            }
        }
    };
    let answers = [(
        key.to_owned(),
        ResponseKind::mask_of(&answer),
        answer.to_string(),
    )];
    match state.store.answer(task, &session.owner, &answers).await {
        Ok(Answer::Ok) => full(StatusCode::ACCEPTED, Bytes::new()),
        Ok(Answer::NotFound) => session_missing(
            StatusCode::NOT_FOUND,
            "the task this answer is for no longer exists",
        ),
        Ok(Answer::Invalid { key, method }) => session_missing(
            StatusCode::BAD_REQUEST,
            &format!(
                "the response to {key:?} is not a valid result for {method}; nothing was recorded"
            ),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot record an answer");
            session_missing(
                StatusCode::SERVICE_UNAVAILABLE,
                "the task store is unavailable; retry",
            )
        }
    }
}

/// What a client's error response to the input request `key` of `task` means: an
/// elicitation it could not show is a dismissed one (`{"action": "cancel"}`); a sampling or
/// roots request it cannot serve has no answer the tool could use, so the task is cancelled
/// (`None`) rather than left waiting for its TTL.
async fn failed_answer(
    state: &Arc<State>,
    session: &Session,
    task: &str,
    key: &str,
) -> Result<Option<Value>, Response<ResBody>> {
    let unavailable = |e: mcp_tasks_store::StoreError| {
        tracing::warn!(error = %e, "cannot read the task an answer is for");
        session_missing(
            StatusCode::SERVICE_UNAVAILABLE,
            "the task store is unavailable; retry",
        )
    };
    let rec = state
        .store
        .get_task(task, &session.owner)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| {
            session_missing(
                StatusCode::NOT_FOUND,
                "the task this answer is for no longer exists",
            )
        })?;
    let method = rec
        .inputs
        .get(key)
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
        .and_then(|r| r.get("method").and_then(Value::as_str).map(str::to_owned));
    match method.as_deref() {
        Some("elicitation/create") => Ok(Some(json!({ "action": "cancel" }))),
        Some(_) => {
            state
                .store
                .cancel(task, &session.owner)
                .await
                .map_err(unavailable)?;
            Ok(None)
        }
        None => Err(session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: the task has no outstanding request with this id",
        )),
    }
}

/// The id of the request that asks a client for `key` of `task`.
pub(crate) fn input_request_id(task: &str, key: &str) -> String {
    format!("{INPUT_ID_PREFIX}{task}:{key}")
}

/// A client request within a session.
async fn request(
    state: &Arc<State>,
    session: Session,
    id: Id,
    method: String,
    mut params: Map<String, Value>,
    accepts_sse: bool,
) -> Response<ResBody> {
    // The request as the 2026 handlers see it: the session's capabilities in `_meta`.
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(m) = meta {
        m.insert(CLIENT_CAPABILITIES_KEY.to_owned(), session.caps.clone());
    }
    let req = Request {
        id: id.clone(),
        method,
        params,
        owner: session.owner.clone(),
    };
    let span = tracing::info_span!(
        "request",
        otel.name = %req.method,
        rpc.method = %req.method,
        rpc.id = %req.id,
        protocol.version = %session.version,
        task.id = tracing::field::Empty,
    );
    let outcome = {
        use tracing::Instrument as _;
        dispatch(state, &session, req, accepts_sse)
            .instrument(span)
            .await
    };
    match outcome {
        Ok(Reply::Json(bytes)) => json_response(StatusCode::OK, bytes),
        Ok(Reply::Sse(rx)) => crate::http::sse(rx),
        Err(e) => {
            if let DispatchError::Store(inner) = &e {
                tracing::warn!(error = %mcp_tasks_shared::error_chain(&**inner), "store failure");
            }
            // 2025 errors are all in-band except a malformed request.
            let status = match e {
                DispatchError::Parse(_) | DispatchError::InvalidRequest(_) => {
                    StatusCode::BAD_REQUEST
                }
                _ => StatusCode::OK,
            };
            error_response(status, Some(&id), &legacy_error(&e))
        }
    }
}

/// A gateway error in 2025 terms: the 2026-only codes become the standard ones.
fn legacy_error(e: &DispatchError) -> ErrorObject {
    match e {
        DispatchError::MissingCapability(missing) => ErrorObject::with_data(
            INVALID_REQUEST,
            "this tool needs client capabilities the session did not declare in initialize",
            json!({ "requiredCapabilities": missing }),
        ),
        DispatchError::TaskNotFound => ErrorObject::new(INVALID_PARAMS, "Task not found"),
        DispatchError::MethodNotFound(m) => {
            ErrorObject::new(METHOD_NOT_FOUND, format!("Method not found: {m}"))
        }
        other => ErrorObject::from(other),
    }
}

async fn dispatch(
    state: &Arc<State>,
    session: &Session,
    req: Request,
    accepts_sse: bool,
) -> Result<Reply, DispatchError> {
    let tasks_api = session.has_tasks();
    match req.method.as_str() {
        "ping" => Ok(Reply::Json(jsonrpc::result_bytes(&req.id, &json!({})))),
        "tools/list" => list_tools(state, session, &req).await,
        "tools/call" => call::call(state, session, req, accepts_sse).await,
        "tasks/get" if tasks_api => tasks::get(state, &req).await,
        "tasks/result" if tasks_api => tasks::result(state, req, accepts_sse).await,
        "tasks/list" if tasks_api => tasks::list(state, session, &req).await,
        "tasks/cancel" if tasks_api => tasks::cancel(state, &req).await,
        other => Err(DispatchError::MethodNotFound(other.to_owned())),
    }
}

/// `tools/list` in 2025 shape; on 2025-11-25 each tool says whether it runs as a task.
async fn list_tools(
    state: &Arc<State>,
    session: &Session,
    req: &Request,
) -> Result<Reply, DispatchError> {
    use mcp_tasks_store::registry::Policy;
    if req.params.get("cursor").is_some_and(|c| !c.is_null()) {
        return Err(DispatchError::InvalidParams(
            "invalid cursor: this server lists every tool on one page".into(),
        ));
    }
    let tools = state.registry.tools().await?;
    let listed: Vec<Value> = tools
        .iter()
        .map(|advert| {
            let mut tool = serde_json::to_value(&advert.tool).unwrap_or(Value::Null);
            if session.has_tasks()
                && let Value::Object(t) = &mut tool
            {
                let support = match advert.policy {
                    Policy::Sync => "forbidden",
                    Policy::Auto | Policy::Task => "optional",
                    Policy::TaskOnly => "required",
                };
                t.insert("execution".into(), json!({ "taskSupport": support }));
            }
            tool
        })
        .collect();
    Ok(Reply::Json(jsonrpc::result_bytes(
        &req.id,
        &json!({ "tools": listed, "_meta": server_meta() }),
    )))
}
