//! Tasks extension types (tasks-extension.md §5): `Task`, `DetailedTask`, `CreateTaskResult`,
//! input requests and the shape checks for `inputResponses` (§9.3).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::jsonrpc::ErrorObject;

/// Status of a task (T-10). Terminal states never change (T-17, T-18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Work is queued or running.
    Working,
    /// The task waits for answers to its `inputRequests`.
    InputRequired,
    /// The request produced a result, including tool errors (`isError: true`, T-21).
    Completed,
    /// The request ended in a JSON-RPC error.
    Failed,
    /// The work was cancelled before completion.
    Cancelled,
}

impl TaskStatus {
    /// Whether the status is final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Parse the wire spelling.
    pub fn parse(s: &str) -> Option<TaskStatus> {
        Some(match s {
            "working" => TaskStatus::Working,
            "input_required" => TaskStatus::InputRequired,
            "completed" => TaskStatus::Completed,
            "failed" => TaskStatus::Failed,
            "cancelled" => TaskStatus::Cancelled,
            _ => return None,
        })
    }
}

/// `DetailedTask` (§5.2): what `tasks/get` returns (with `resultType`) and what
/// `notifications/tasks` carries (with `_meta`). Fields in spec order; status-foreign fields
/// are never present (T-20, T-13).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DetailedTask {
    /// Server-generated unguessable id (T-42).
    pub task_id: String,
    /// Current status.
    pub status: TaskStatus,
    /// Human-readable note about the current state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time of the last observable change (≥ `created_at`, never decreasing).
    pub last_updated_at: String,
    /// Lifetime from `createdAt` in ms; `null` = unlimited. The key is always present (T-09).
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval; always present on what this server emits (T-12).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// All outstanding input requests, only on `input_required` (T-19).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<BTreeMap<String, Box<RawValue>>>,
    /// The `CallToolResult`, only on `completed` (T-20, T-23).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
    /// The JSON-RPC error, only on `failed` (T-20).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
    /// Tasks linked to this one (a redriven dead letter and its new task): `tasks/get`
    /// sends them in its result's `_meta` ([`TaskMeta`]), not as a field of the task.
    #[serde(skip)]
    pub related_task_ids: Vec<String>,
}

/// `tasks/get` result: `resultType: "complete"` plus the `DetailedTask` (T-08).
#[derive(Debug, Serialize)]
pub struct GetTaskResult<'a> {
    /// Always `"complete"`.
    #[serde(rename = "resultType")]
    pub result_type: &'static str,
    /// The task.
    #[serde(flatten)]
    pub task: &'a DetailedTask,
    /// `serverInfo`, and the task's related tasks when it has any.
    #[serde(rename = "_meta")]
    pub meta: TaskMeta<'a>,
}

/// The `_meta` of a `tasks/get` result: [`super::meta::ServerMeta`], plus
/// `io.modelcontextprotocol/relatedTaskIds` for a task linked to others.
#[derive(Debug, Clone, Copy)]
pub struct TaskMeta<'a> {
    /// The linked tasks' ids (most tasks have none).
    pub related: &'a [String],
}

impl Serialize for TaskMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        if self.related.is_empty() {
            return super::meta::ServerMeta.serialize(s);
        }
        let mut map = s.serialize_map(Some(2))?;
        if let serde_json::Value::Object(server) = super::meta::server_meta() {
            for (k, v) in &server {
                map.serialize_entry(k, v)?;
            }
        }
        map.serialize_entry(super::meta::RELATED_TASK_IDS_KEY, self.related)?;
        map.end()
    }
}

/// `CreateTaskResult` (§5.4): the `Task` fields with `resultType: "task"` (T-07, T-16).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateTaskResult {
    /// Always `"task"`.
    pub result_type: &'static str,
    /// The new task's id.
    pub task_id: String,
    /// Always `working` (T-16).
    pub status: TaskStatus,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// Equal to `created_at` at creation.
    pub last_updated_at: String,
    /// Lifetime in ms (key always present).
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
    /// `serverInfo`.
    #[serde(rename = "_meta")]
    pub meta: super::meta::ServerMeta,
}

/// The empty acknowledgement of `tasks/update` and `tasks/cancel` (T-27, T-35).
#[derive(Debug, Serialize)]
pub struct EmptyResult {
    /// Always `"complete"`.
    #[serde(rename = "resultType")]
    pub result_type: &'static str,
    /// `serverInfo`.
    #[serde(rename = "_meta")]
    pub meta: super::meta::ServerMeta,
}

/// One entry of `inputRequests` (§5.3): a request object without `jsonrpc`/`id` (T-57).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: String,
    /// The request params.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

impl InputRequest {
    /// A form-mode elicitation (base-protocol.md §10). Never ask for secrets this way (T-55).
    pub fn elicit_form(message: impl Into<String>, requested_schema: Value) -> Self {
        InputRequest {
            method: "elicitation/create".to_owned(),
            params: serde_json::json!({
                "mode": "form",
                "message": message.into(),
                "requestedSchema": requested_schema,
            }),
        }
    }

    /// A `sampling/createMessage` request with one user text message.
    pub fn sample_text(prompt: impl Into<String>, max_tokens: u32) -> Self {
        InputRequest {
            method: "sampling/createMessage".to_owned(),
            params: serde_json::json!({
                "messages": [{ "role": "user", "content": { "type": "text", "text": prompt.into() } }],
                "maxTokens": max_tokens,
            }),
        }
    }

    /// A `roots/list` request.
    pub fn list_roots() -> Self {
        InputRequest {
            method: "roots/list".to_owned(),
            params: serde_json::json!({}),
        }
    }

    /// Check the request is one of the three well-formed kinds (T-57), returning its kind.
    pub fn kind(&self) -> Result<ResponseKind, BadInputRequest> {
        let p = &self.params;
        match self.method.as_str() {
            "elicitation/create" => {
                let message_ok = p.get("message").is_some_and(Value::is_string);
                let url_mode = p.get("mode").and_then(Value::as_str) == Some("url");
                let body_ok = if url_mode {
                    p.get("url").is_some_and(Value::is_string)
                } else {
                    p.get("requestedSchema")
                        .is_some_and(|s| s.get("type").and_then(Value::as_str) == Some("object"))
                };
                if message_ok && body_ok {
                    Ok(ResponseKind::Elicit)
                } else {
                    Err(BadInputRequest::Elicitation)
                }
            }
            "sampling/createMessage" => {
                if p.get("messages").is_some_and(Value::is_array)
                    && p.get("maxTokens").is_some_and(Value::is_u64)
                {
                    Ok(ResponseKind::Sampling)
                } else {
                    Err(BadInputRequest::Sampling)
                }
            }
            "roots/list" => Ok(ResponseKind::Roots),
            other => Err(BadInputRequest::Method(other.to_owned())),
        }
    }
}

/// Why an input request is not one of the three well-formed kinds (T-57).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadInputRequest {
    /// `elicitation/create` without its message or schema (or url).
    Elicitation,
    /// `sampling/createMessage` without its messages or `maxTokens`.
    Sampling,
    /// A method that is no input request.
    Method(String),
}

impl std::fmt::Display for BadInputRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadInputRequest::Elicitation => f.write_str(
                "elicitation/create needs a string message and a requestedSchema of type object (or mode url with a url)",
            ),
            BadInputRequest::Sampling => {
                f.write_str("sampling/createMessage needs messages and an integer maxTokens")
            }
            BadInputRequest::Method(m) => write!(f, "{m} is not an input request method"),
        }
    }
}

impl std::error::Error for BadInputRequest {}

/// The result type an input request is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// `ElicitResult`.
    Elicit,
    /// `CreateMessageResult`.
    Sampling,
    /// `ListRootsResult`.
    Roots,
}

impl ResponseKind {
    /// Bit used in the mask the store's answer script checks.
    pub fn bit(self) -> u8 {
        match self {
            ResponseKind::Elicit => 1,
            ResponseKind::Sampling => 2,
            ResponseKind::Roots => 4,
        }
    }

    /// The kinds `answer` is well-formed as (§9.3, the project's validation rule), as a bit mask.
    pub fn mask_of(answer: &Value) -> u8 {
        let mut mask = 0;
        if is_elicit_result(answer) {
            mask |= ResponseKind::Elicit.bit();
        }
        if answer.get("role").is_some_and(Value::is_string)
            && answer
                .get("content")
                .is_some_and(|c| c.is_object() || c.is_array())
            && answer.get("model").is_some_and(Value::is_string)
        {
            mask |= ResponseKind::Sampling.bit();
        }
        if answer
            .get("roots")
            .and_then(Value::as_array)
            .is_some_and(|roots| {
                roots
                    .iter()
                    .all(|r| r.get("uri").is_some_and(Value::is_string))
            })
        {
            mask |= ResponseKind::Roots.bit();
        }
        mask
    }
}

fn is_elicit_result(answer: &Value) -> bool {
    let action_ok = matches!(
        answer.get("action").and_then(Value::as_str),
        Some("accept" | "decline" | "cancel")
    );
    let content_ok = match answer.get("content") {
        None | Some(Value::Null) => true,
        Some(Value::Object(fields)) => fields.values().all(|v| match v {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => true,
            Value::Array(items) => items.iter().all(Value::is_string),
            _ => false,
        }),
        Some(_) => false,
    };
    action_ok && content_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn completed_task() -> DetailedTask {
        DetailedTask {
            task_id: "tsk_A".into(),
            status: TaskStatus::Completed,
            status_message: None,
            created_at: "2026-08-01T09:30:00.125Z".into(),
            last_updated_at: "2026-08-01T09:35:02.777Z".into(),
            ttl_ms: None,
            poll_interval_ms: Some(2000),
            input_requests: None,
            result: Some(
                RawValue::from_string(r#"{"resultType":"complete","content":[]}"#.into()).unwrap(),
            ),
            error: None,
            related_task_ids: Vec::new(),
        }
    }

    /// T-08, T-09, T-13, T-20: tasks/get shape for a completed task.
    #[test]
    fn get_result_has_result_type_ttl_key_and_no_foreign_fields() {
        let task = completed_task();
        let v = serde_json::to_value(GetTaskResult {
            result_type: "complete",
            task: &task,
            meta: TaskMeta {
                related: &task.related_task_ids,
            },
        })
        .unwrap();
        assert_eq!(v["_meta"], crate::meta::server_meta());
        assert_eq!(v["resultType"], "complete");
        assert!(v.as_object().unwrap().contains_key("ttlMs"));
        assert!(v["ttlMs"].is_null());
        assert_eq!(v["result"]["resultType"], "complete");
        for absent in ["error", "inputRequests", "statusMessage", "requestState"] {
            assert!(v.get(absent).is_none(), "{absent}");
        }
    }

    /// A redriven task's links ride in the result's `_meta`, beside `serverInfo`.
    #[test]
    fn related_tasks_join_the_server_info_in_meta() {
        let mut task = completed_task();
        task.related_task_ids = vec!["tsk_B".into()];
        let v = serde_json::to_value(GetTaskResult {
            result_type: "complete",
            task: &task,
            meta: TaskMeta {
                related: &task.related_task_ids,
            },
        })
        .unwrap();
        let meta = v["_meta"].as_object().unwrap();
        assert_eq!(meta[crate::meta::RELATED_TASK_IDS_KEY], json!(["tsk_B"]));
        assert!(meta.contains_key(crate::meta::SERVER_INFO_KEY));
        assert!(v.get("relatedTaskIds").is_none());
    }

    #[test]
    fn status_round_trips() {
        for s in [
            "working",
            "input_required",
            "completed",
            "failed",
            "cancelled",
        ] {
            let st = TaskStatus::parse(s).unwrap();
            assert_eq!(st.as_str(), s);
            assert_eq!(serde_json::to_value(st).unwrap(), json!(s));
        }
        assert_eq!(TaskStatus::parse("done"), None);
    }

    /// T-33: answer shapes.
    #[test]
    fn answer_masks() {
        assert_eq!(
            ResponseKind::mask_of(
                &json!({"action": "accept", "content": {"a": "x", "b": ["y"], "c": 1}})
            ),
            1
        );
        assert_eq!(
            ResponseKind::mask_of(&json!({"action": "accept", "content": {"a": {"nested": 1}}})),
            0
        );
        assert_eq!(ResponseKind::mask_of(&json!({"action": "maybe"})), 0);
        assert_eq!(
            ResponseKind::mask_of(
                &json!({"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"})
            ),
            2
        );
        assert_eq!(
            ResponseKind::mask_of(&json!({"roots": [{"uri": "file:///x"}]})),
            4
        );
        assert_eq!(ResponseKind::mask_of(&json!({"ignored": true})), 0);
    }

    /// T-57: input requests are well formed.
    #[test]
    fn input_request_kinds() {
        let e = InputRequest::elicit_form("Q?", json!({"type": "object", "properties": {}}));
        assert_eq!(e.kind(), Ok(ResponseKind::Elicit));
        assert_eq!(
            InputRequest::sample_text("hi", 100).kind(),
            Ok(ResponseKind::Sampling)
        );
        assert_eq!(InputRequest::list_roots().kind(), Ok(ResponseKind::Roots));
        let bad = InputRequest {
            method: "elicitation/create".into(),
            params: json!({"message": "x"}),
        };
        assert!(bad.kind().is_err());
    }
}
