//! The one place that turns gateway errors into JSON-RPC error objects and HTTP statuses,
//! for both protocol eras (STYLE.md §5; status mapping from base-protocol.md §7.5): 2026-07-28
//! answers most errors with an HTTP status of their own, a 2025 session in-band with the
//! codes that revision knows.

use hyper::{Response, StatusCode};
use mcp_tasks_protocol::jsonrpc::{
    ErrorObject, HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Id,
    LIMIT_EXCEEDED, METHOD_NOT_FOUND, PARSE_ERROR, RESOURCE_NOT_FOUND_2025,
};
use mcp_tasks_store::StoreError;
use serde_json::{Value, json};

use crate::reply::{ResBody, json_error};

/// The protocol era an error is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28.
    Current,
    /// A 2025 session.
    Legacy,
}

/// Why a request was not answered with a result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DispatchError {
    /// The body is not JSON (-32700, HTTP 400).
    #[error("parse error: {0}")]
    Parse(String),
    /// Not a valid JSON-RPC request (-32600, HTTP 400).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A required `_meta` field is missing or ill-typed (-32602, HTTP 400, B-06).
    #[error("{0}")]
    BadMeta(String),
    /// A standard header is missing, malformed or disagrees with the body (-32020, HTTP 400).
    #[error("{0}")]
    HeaderMismatch(String),
    /// The protocol version is not served (-32022, HTTP 400).
    #[error("unsupported protocol version {requested:?}")]
    UnsupportedVersion {
        /// What the client asked for.
        requested: String,
    },
    /// The `Accept` header excludes the only media type this answer can have (HTTP 406, B-44).
    #[error("{0}")]
    NotAcceptable(String),
    /// Unknown or removed method (-32601, HTTP 404).
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    /// The request needs client capabilities it did not declare (-32021, HTTP 400).
    #[error("Missing required client capability")]
    MissingCapability(Value),
    /// Invalid params of a valid request (-32602, in-band).
    #[error("{0}")]
    InvalidParams(String),
    /// A keyed `tools/call` whose key already names a task of another call (-32602 with
    /// `data.differs`, in-band): nothing was created.
    #[error("idempotency key reused for another call")]
    KeyReused {
        /// `tool` or `arguments`.
        differs: &'static str,
    },
    /// Unknown, expired or foreign task (-32602, in-band; T-24, T-25).
    #[error("Task not found")]
    TaskNotFound,
    /// `resources/read` of a URI no upstream has (in-band: -32602 with `data.uri`; in a
    /// 2025 session -32002 with `data.uri`, as 2025-11-25 says).
    #[error("{message}")]
    ResourceNotFound {
        /// The URI asked for.
        uri: String,
        /// What was not found, and why.
        message: String,
    },
    /// A failed task's error or another JSON-RPC error to pass through (in-band).
    #[error("{}", .0.message)]
    Rpc(Box<ErrorObject>),
    /// A call or forwarded request that ended without its result, for a reason the client is
    /// told (-32603 with this message, in-band): cancelled, timed out, needing input it cannot
    /// get, an upstream that failed or did not answer. Unlike [`DispatchError::Internal`],
    /// not a failure of ours: sent, not logged.
    #[error("{0}")]
    Failed(String),
    /// A task-augmented `tools/call` of a tool that never runs as a task (-32601, in-band; a
    /// 2025-11-25 session's `execution.taskSupport` is `"forbidden"`).
    #[error("tool {0} does not run as a task")]
    TaskForbidden(String),
    /// A per-caller limit is reached (-31001 with `data.limit` and `data.max`, HTTP 429).
    #[error("{message}")]
    Limited {
        /// What was refused and why, naming the variable that sets the limit.
        message: String,
        /// Which limit (`tasks_per_minute`, `active_tasks`, `listeners`).
        limit: &'static str,
        /// Its value.
        max: u64,
    },
    /// Redis unreachable or failing (-32603, in-band).
    #[error("store failed")]
    Store(#[source] Box<StoreError>),
    /// Anything else (-32603, in-band; the cause is logged, not sent).
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for DispatchError {
    fn from(e: StoreError) -> Self {
        DispatchError::Store(Box::new(e))
    }
}

impl From<ErrorObject> for DispatchError {
    fn from(e: ErrorObject) -> Self {
        DispatchError::Rpc(Box::new(e))
    }
}

impl DispatchError {
    /// A failed task's answer: its stored error, passed through, or -32603 "the tool failed"
    /// when it stored none.
    pub(crate) fn task_failed(stored: Option<ErrorObject>) -> Self {
        match stored {
            Some(e) => e.into(),
            None => DispatchError::Failed("the tool failed".into()),
        }
    }

    /// The response to a request that failed with this error, in `era`.
    pub(crate) fn response(&self, era: Era, id: Option<&Id>) -> Response<ResBody> {
        match era {
            Era::Current => json_error(self.status(), id, &ErrorObject::from(self)),
            Era::Legacy => json_error(self.legacy_status(), id, &self.legacy_object()),
        }
    }

    /// The refusal of a 2025 session's `GET` stream: no JSON-RPC exchange, so the HTTP status
    /// is the 2026 one (429 at the listener limit), the error object in 2025 terms.
    pub(crate) fn stream_refusal(&self) -> Response<ResBody> {
        json_error(self.status(), None, &self.legacy_object())
    }

    /// Log a failure of ours (Redis, a bug) once, where the request is answered; client
    /// mistakes are the client's and are not logged.
    pub(crate) fn log(&self) {
        match self {
            DispatchError::Store(inner) => {
                tracing::warn!(error = %mcp_tasks_shared::error_chain(&**inner), "store failure");
            }
            DispatchError::Internal(why) => tracing::error!(error = %why, "internal error"),
            _ => {}
        }
    }

    /// The HTTP status in a 2025 session: every error is in-band except a malformed request
    /// and a per-caller limit, which answers 429 in both eras so that proxies and rate-limit
    /// dashboards count the refusal as one.
    fn legacy_status(&self) -> StatusCode {
        match self {
            DispatchError::Parse(_) | DispatchError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            DispatchError::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::OK,
        }
    }

    /// The error object in 2025 terms: the 2026-only codes become the standard ones.
    pub(crate) fn legacy_object(&self) -> ErrorObject {
        match self {
            DispatchError::MissingCapability(missing) => ErrorObject::with_data(
                INVALID_REQUEST,
                "this tool needs client capabilities the session did not declare in initialize",
                json!({ "requiredCapabilities": missing }),
            ),
            DispatchError::TaskNotFound => ErrorObject::new(INVALID_PARAMS, "Task not found"),
            DispatchError::ResourceNotFound { uri, message } => ErrorObject::with_data(
                RESOURCE_NOT_FOUND_2025,
                message.clone(),
                json!({ "uri": uri }),
            ),
            DispatchError::MethodNotFound(m) => {
                ErrorObject::new(METHOD_NOT_FOUND, format!("Method not found: {m}"))
            }
            other => ErrorObject::from(other),
        }
    }

    /// The HTTP status this error is sent with on 2026-07-28.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            DispatchError::Parse(_)
            | DispatchError::InvalidRequest(_)
            | DispatchError::BadMeta(_)
            | DispatchError::HeaderMismatch(_)
            | DispatchError::UnsupportedVersion { .. }
            | DispatchError::MissingCapability(_) => StatusCode::BAD_REQUEST,
            DispatchError::MethodNotFound(_) => StatusCode::NOT_FOUND,
            DispatchError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            DispatchError::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            DispatchError::InvalidParams(_)
            | DispatchError::KeyReused { .. }
            | DispatchError::TaskNotFound
            | DispatchError::ResourceNotFound { .. }
            | DispatchError::Rpc(_)
            | DispatchError::Failed(_)
            | DispatchError::TaskForbidden(_)
            | DispatchError::Store(_)
            | DispatchError::Internal(_) => StatusCode::OK,
        }
    }
}

impl From<&DispatchError> for ErrorObject {
    fn from(e: &DispatchError) -> Self {
        match e {
            DispatchError::Parse(why) => {
                ErrorObject::new(PARSE_ERROR, format!("Parse error: {why}"))
            }
            DispatchError::NotAcceptable(why) => invalid_request(why.clone()),
            DispatchError::InvalidRequest(why) => {
                ErrorObject::new(INVALID_REQUEST, format!("Invalid request: {why}"))
            }
            DispatchError::BadMeta(why) | DispatchError::InvalidParams(why) => {
                invalid_params(why.clone())
            }
            DispatchError::HeaderMismatch(why) => {
                ErrorObject::new(HEADER_MISMATCH, format!("Header mismatch: {why}"))
            }
            DispatchError::UnsupportedVersion { requested } => {
                ErrorObject::unsupported_version(requested)
            }
            DispatchError::Limited {
                message,
                limit,
                max,
            } => ErrorObject {
                code: LIMIT_EXCEEDED,
                message: message.clone(),
                data: Some(serde_json::json!({"limit": limit, "max": max})),
            },
            DispatchError::MethodNotFound(m) => {
                ErrorObject::new(METHOD_NOT_FOUND, format!("Method not found: {m}"))
            }
            DispatchError::MissingCapability(required) => ErrorObject::missing_capability(
                format!("Missing required client capability: {}", describe(required)),
                required.clone(),
            ),
            DispatchError::KeyReused { differs } => ErrorObject::with_data(
                INVALID_PARAMS,
                format!(
                    "Idempotency key already used for a call with other {}: send a new key for a new call",
                    if *differs == "tool" {
                        "tool"
                    } else {
                        "arguments"
                    }
                ),
                json!({ "differs": differs }),
            ),
            // An unknown task and someone else's task answer alike (T-25).
            DispatchError::TaskNotFound => {
                ErrorObject::new(INVALID_PARAMS, "Failed to retrieve task: Task not found")
            }
            DispatchError::ResourceNotFound { uri, message } => {
                ErrorObject::with_data(INVALID_PARAMS, message.clone(), json!({ "uri": uri }))
            }
            DispatchError::Rpc(e) => (**e).clone(),
            DispatchError::Failed(why) => ErrorObject::new(INTERNAL_ERROR, why.clone()),
            DispatchError::TaskForbidden(tool) => ErrorObject::new(
                METHOD_NOT_FOUND,
                format!(
                    "tool {tool} does not run as a task (execution.taskSupport is \"forbidden\"); call it without params.task"
                ),
            ),
            DispatchError::Store(store) => match &**store {
                StoreError::Redis(_) => ErrorObject::new(
                    INTERNAL_ERROR,
                    "Redis is unavailable; the request changed nothing, try again",
                ),
                StoreError::Rejected(why) => ErrorObject::new(INVALID_PARAMS, why.clone()),
                StoreError::Corrupt(_) => ErrorObject::new(INTERNAL_ERROR, "internal error"),
                StoreError::Unreplicated { op: "create" } => ErrorObject::new(
                    INTERNAL_ERROR,
                    "Redis replicas did not confirm the task in time (MCPT_REDIS_WAIT_REPLICAS); it was cancelled, try again",
                ),
                StoreError::Unreplicated { op } => ErrorObject::new(
                    INTERNAL_ERROR,
                    format!(
                        "Redis replicas did not confirm the {op} in time (MCPT_REDIS_WAIT_REPLICAS), so a failover could lose it; send the same request again"
                    ),
                ),
            },
            DispatchError::Internal(_) => ErrorObject::new(INTERNAL_ERROR, "internal error"),
        }
    }
}

/// -32600 with `why` as the whole message, for a refusal sent with an HTTP status of its own
/// outside dispatch: before any JSON-RPC request was read (`http.rs`), or a 2025 session
/// request with no session or an ill-formed envelope (`legacy`).
pub(crate) fn invalid_request(why: impl Into<String>) -> ErrorObject {
    ErrorObject::new(INVALID_REQUEST, why)
}

/// -32602 with `why` as the message, for a refusal sent with an HTTP status of its own
/// (`initialize` with too large capabilities, HTTP 400); in-band ones are
/// [`DispatchError::InvalidParams`].
pub(crate) fn invalid_params(why: impl Into<String>) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, why)
}

/// `{"extensions":{"io.modelcontextprotocol/tasks":{}},"elicitation":{}}` → `extensions.io.modelcontextprotocol/tasks, elicitation`.
fn describe(required: &Value) -> String {
    let mut names = Vec::new();
    if let Value::Object(map) = required {
        for (k, v) in map {
            match v {
                Value::Object(inner) if k == "extensions" => {
                    names.extend(inner.keys().map(|e| format!("extension {e}")))
                }
                Value::Object(inner) if !inner.is_empty() => {
                    names.extend(inner.keys().map(|i| format!("{k}.{i}")))
                }
                _ => names.push(k.clone()),
            }
        }
    }
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// T-04, B-08: -32021 carries requiredCapabilities and is sent with HTTP 400.
    #[test]
    fn missing_capability_shape() {
        let e = DispatchError::MissingCapability(
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
        );
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let o = ErrorObject::from(&e);
        assert_eq!(o.code, -32021);
        assert_eq!(
            o.data.unwrap()["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
            json!({})
        );
        assert!(
            o.message
                .contains("extension io.modelcontextprotocol/tasks")
        );
    }

    /// B-19: -32022 names supported and requested versions.
    #[test]
    fn unsupported_version_shape() {
        let o = ErrorObject::from(&DispatchError::UnsupportedVersion {
            requested: "v999".into(),
        });
        assert_eq!(
            o.data.unwrap(),
            json!({"supported": ["2026-07-28"], "requested": "v999"})
        );
    }

    /// A 2025 session answers in-band, with 2025 codes.
    #[test]
    fn legacy_mapping() {
        let e = DispatchError::MissingCapability(json!({"sampling": {}}));
        assert_eq!(e.legacy_status(), StatusCode::OK);
        assert_eq!(e.legacy_object().code, INVALID_REQUEST);
        assert_eq!(
            DispatchError::TaskNotFound.legacy_object().message,
            "Task not found"
        );
    }

    /// An unknown resource is -32602 with `data.uri` on 2026-07-28, -32002 in a 2025
    /// session (2025-11-25), in-band either way.
    #[test]
    fn resource_not_found_by_era() {
        let e = DispatchError::ResourceNotFound {
            uri: "x://1".into(),
            message: "Resource not found: x://1".into(),
        };
        assert_eq!(e.status(), StatusCode::OK);
        let o = ErrorObject::from(&e);
        assert_eq!((o.code, o.data), (-32602, Some(json!({"uri": "x://1"}))));
        assert_eq!(e.legacy_status(), StatusCode::OK);
        let o = e.legacy_object();
        assert_eq!((o.code, o.data), (-32002, Some(json!({"uri": "x://1"}))));
    }

    /// B-23, T-39: unknown methods are 404 / -32601.
    #[test]
    fn method_not_found_is_404() {
        let e = DispatchError::MethodNotFound("tasks/list".into());
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(ErrorObject::from(&e).code, -32601);
    }
}
