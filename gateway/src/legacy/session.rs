//! A 2025 session: its Redis record (read by every gateway, its expiry the idle timeout),
//! and `initialize`, which negotiates a revision and stores one.

use std::sync::Arc;

use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use mcp_tasks_protocol::jsonrpc::{self, Id};
use mcp_tasks_protocol::legacy::{ClientCapabilities, InitializeParams};
use mcp_tasks_protocol::params::Member;
use mcp_tasks_protocol::{SERVER_NAME, SERVER_VERSION, legacy};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{LATEST, SESSION_HEADER, SESSION_IDLE, VERSIONS};
use crate::error::{self, DispatchError, Era};
use crate::reply::{self, ResBody, json_error};
use crate::state::State;

/// Largest client capabilities object a session keeps, as JSON.
const MAX_CAPS_BYTES: usize = 4096;

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

/// The session `id` names, if it exists and belongs to `owner` (someone else's session is
/// the same 404 as an unknown one).
pub(super) async fn load(
    state: &State,
    id: &str,
    owner: &str,
) -> Result<Option<Session>, DispatchError> {
    if !plausible_session_id(id) {
        return Ok(None);
    }
    let Some(raw) = state
        .store
        .sessions()
        .touch(id, owner, SESSION_IDLE)
        .await?
    else {
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
fn capabilities(legacy: Option<ClientCapabilities>) -> Value {
    let mut caps = Map::new();
    if let Some(l) = legacy {
        for (key, member) in [
            ("elicitation", l.elicitation),
            ("sampling", l.sampling),
            ("roots", l.roots),
        ] {
            if let Member::Valid(v) = member {
                caps.insert(key.to_owned(), Value::Object(v));
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
    params: InitializeParams,
) -> Response<ResBody> {
    let requested = params.protocol_version.valid().map_or("", String::as_str);
    // The client's version when served, else the newest; the client decides whether to stay.
    let version = VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST);
    let sid = new_session_id();
    let caps = capabilities(params.capabilities.into_valid());
    if caps.to_string().len() > MAX_CAPS_BYTES {
        return json_error(
            StatusCode::BAD_REQUEST,
            Some(&id),
            &error::invalid_params(format!(
                "params.capabilities is larger than {MAX_CAPS_BYTES} bytes of JSON"
            )),
        );
    }
    let session = Session {
        id: sid.clone(),
        version: version.to_owned(),
        caps,
        owner,
    };
    let record = serde_json::to_string(&session).unwrap_or_default();
    let most = state.config.limits.sessions;
    match state
        .store
        .sessions()
        .open(&session.owner, &sid, &record, SESSION_IDLE, most)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            return DispatchError::Limited {
                message: format!(
                    "Too many open sessions: at most {most} per caller (MCPT_LIMIT_SESSIONS); end one with DELETE or let one lapse"
                ),
                limit: "sessions",
                max: u64::from(most),
            }
            .response(Era::Legacy, Some(&id));
        }
        Err(e) => {
            let e = DispatchError::from(e);
            tracing::warn!(error = %e, "cannot store a session");
            return e.response(Era::Legacy, Some(&id));
        }
    }
    let mut caps = json!({ "tools": { "listChanged": false } });
    if session.has_tasks() {
        caps["tasks"] =
            json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } });
    }
    crate::handlers::forward::add_capabilities(state, &mut caps).await;
    let client = params
        .client_info
        .valid()
        .and_then(|c| c.name.valid())
        .map_or("unnamed", String::as_str);
    tracing::info!(protocol.version = version, client.name = ?client, "2025 session started");
    let result = json!({
        "protocolVersion": version,
        "capabilities": caps,
        "serverInfo": { "name": SERVER_NAME, "version": SERVER_VERSION },
        "instructions": "Long tool calls run as durable tasks; on 2025-11-25 call them as tasks (execution.taskSupport) to poll and resume them.",
    });
    let mut res = reply::json(StatusCode::OK, jsonrpc::result_bytes(&id, &result));
    if let Ok(v) = HeaderValue::from_str(&sid) {
        res.headers_mut().insert(SESSION_HEADER, v);
    }
    res
}
