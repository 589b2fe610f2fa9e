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
//!
//! Layout: `session.rs` (the record, `initialize`), `dispatch.rs` (a request: method, params,
//! handler), `call.rs` (`tools/call`), `follow.rs` (following a task to its response on a
//! stream), `tasks.rs` (the tasks API),
//! `answers.rs` (responses to our input requests, notifications), `stream.rs` (the `GET`
//! stream). This file takes the HTTP requests that carry a session id.

mod answers;
mod call;
mod dispatch;
mod follow;
mod session;
mod stream;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use mcp_tasks_protocol::jsonrpc::Id;
use mcp_tasks_protocol::legacy;
use mcp_tasks_protocol::method::Method;
use serde_json::{Map, Value};

pub(crate) use session::initialize;

use crate::envelope::typed;
use crate::error::{self, DispatchError, Era};
use crate::handlers::listen::ListenerSlot;
use crate::reply::{self, ResBody, json_error};
use crate::state::State;

/// The session header (matched case-insensitively by `http`).
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// The newest 2025 revision, offered to a client asking for one this server does not know.
pub(crate) const LATEST: &str = legacy::VERSION_2025_11_25;

/// The 2025 revisions served, newest first.
/// (2025-03-26 is not offered: it requires JSON-RPC batches, which this server does not take;
/// a client asking for it is offered 2025-11-25.)
pub(crate) const VERSIONS: &[&str] = legacy::VERSIONS;

/// A session ends after this long without a request.
pub(super) const SESSION_IDLE: Duration = Duration::from_secs(24 * 3600);

/// Prefix of the ids of requests this server sends to a client for a task's input:
/// `mcpt:TASK_ID:KEY`, so the response names its task and key and any gateway can file it.
pub(super) const INPUT_ID_PREFIX: &str = "mcpt:";

fn session_missing(status: StatusCode, why: &str) -> Response<ResBody> {
    json_error(status, None, &error::invalid_request(why))
}

/// The id of the request that asks a client for `key` of `task`.
pub(crate) fn input_request_id(task: &str, key: &str) -> String {
    format!("{INPUT_ID_PREFIX}{task}:{key}")
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
    match session::load(state, sid, owner).await {
        // 2025-06-18 sessions have nothing to send on it (the SDK takes 405 quietly).
        Ok(Some(session)) if !session.has_tasks() => {
            let mut res = reply::empty(StatusCode::METHOD_NOT_ALLOWED);
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            res
        }
        Ok(Some(session)) => {
            // An open stream holds one of the owner's MCPT_LIMIT_LISTENERS slots.
            match ListenerSlot::take(state, owner).await {
                Ok(slot) => reply::sse(stream::open(state.clone(), session, slot)),
                Err(e) => e.stream_refusal(),
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
    match session::load(state, sid, owner).await {
        Ok(Some(_)) => match state.store.sessions().end(owner, sid).await {
            Ok(_) => reply::empty(StatusCode::NO_CONTENT),
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
    key_header: Option<&Value>,
) -> Response<ResBody> {
    let session = match open_session(state, &owner, sid, version_header).await {
        Ok(session) => session,
        Err(refused) => return *refused,
    };
    let Message {
        id,
        method,
        params,
        rest,
    } = match Message::read(body) {
        Ok(message) => message,
        Err(refused) => return *refused,
    };
    match (method, id) {
        // A response to one of our input requests.
        (None, Some(id)) if rest.contains_key("result") || rest.contains_key("error") => {
            answers::respond(state, &session, &id, rest).await
        }
        (None, _) => session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: method is missing",
        ),
        (Some(method), None) => {
            answers::notification(state, &session, &method, params).await;
            reply::empty(StatusCode::ACCEPTED)
        }
        // A client starting over on the same connection: a new session.
        (Some(method), Some(id)) if Method::from_name(&method) == Some(Method::Initialize) => {
            match typed(params) {
                Ok(params) => session::initialize(state, session.owner, id, params).await,
                Err(e) => e.response(Era::Legacy, Some(&id)),
            }
        }
        (Some(method), Some(id)) => {
            dispatch::request(state, session, id, method, params, accepts_sse, key_header).await
        }
    }
}

/// The caller's session named by `sid`, if the version header (when sent) is its
/// negotiated version; else the response refusing the request (boxed: responses are large).
async fn open_session(
    state: &Arc<State>,
    owner: &str,
    sid: &str,
    version_header: Option<&str>,
) -> Result<session::Session, Box<Response<ResBody>>> {
    let session = match session::load(state, sid, owner).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(Box::new(session_missing(
                StatusCode::NOT_FOUND,
                "Session not found: it ended or expired; send initialize again",
            )));
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a session");
            return Err(Box::new(session_missing(
                StatusCode::SERVICE_UNAVAILABLE,
                "the session store is unavailable; retry",
            )));
        }
    };
    if let Some(v) = version_header
        && v != session.version
    {
        return Err(Box::new(session_missing(
            StatusCode::BAD_REQUEST,
            &format!(
                "MCP-Protocol-Version {v:?} is not this session's negotiated version {:?}",
                session.version
            ),
        )));
    }
    Ok(session)
}

/// One JSON-RPC message of a session: a request, a notification, or a response to one of
/// our input requests.
struct Message {
    /// The id (`None`: a notification).
    id: Option<Id>,
    /// The method (`None`: a response, or a mistake).
    method: Option<String>,
    /// `params` (empty when absent or `null`).
    params: Map<String, Value>,
    /// The other members (`result`, `error`, …).
    rest: Map<String, Value>,
}

impl Message {
    /// Read the body, or answer why it is no JSON-RPC message.
    fn read(body: &[u8]) -> Result<Message, Box<Response<ResBody>>> {
        let message: Value = serde_json::from_slice(body).map_err(|e| {
            Box::new(DispatchError::Parse(e.to_string()).response(Era::Legacy, None))
        })?;
        let Value::Object(mut obj) = message else {
            return Err(Box::new(session_missing(
                StatusCode::BAD_REQUEST,
                "Invalid request: the body must be one JSON-RPC message object (batches are not supported)",
            )));
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(Box::new(session_missing(
                StatusCode::BAD_REQUEST,
                "Invalid request: jsonrpc must be \"2.0\"",
            )));
        }
        let id = match obj.get("id") {
            None => None,
            Some(v) => match serde_json::from_value::<Id>(v.clone())
                .ok()
                .filter(Id::is_valid)
            {
                Some(id) => Some(id),
                None => {
                    return Err(Box::new(session_missing(
                        StatusCode::BAD_REQUEST,
                        "Invalid request: id must be a string or an integer",
                    )));
                }
            },
        };
        let invalid = |why: &str| {
            Box::new(json_error(
                StatusCode::BAD_REQUEST,
                id.as_ref(),
                &error::invalid_request(why),
            ))
        };
        let method = match obj.remove("method") {
            Some(Value::String(m)) => Some(m),
            None => None,
            Some(_) => return Err(invalid("Invalid request: method must be a string")),
        };
        let params = match obj.remove("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p,
            Some(_) => return Err(invalid("Invalid request: params must be an object")),
        };
        Ok(Message {
            id,
            method,
            params,
            rest: obj,
        })
    }
}
