//! Wire pieces of the 2025 revisions (2025-11-25, 2025-06-18) that the gateway serves beside
//! 2026-07-28: version names, the related-task `_meta` key, the 2025-11-25 `Task` and the
//! params of the requests a session sends (members as [`Member`]s, as in [`crate::params`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::jsonrpc::Id;
use super::params::{Member, object_member};
use super::tasks::{DetailedTask, TaskStatus};

/// The 2025 revision with the (experimental) tasks API.
pub const VERSION_2025_11_25: &str = "2025-11-25";

/// The 2025 revision before tasks.
pub const VERSION_2025_06_18: &str = "2025-06-18";

/// The 2025 revisions served, newest first.
pub const VERSIONS: &[&str] = &[VERSION_2025_11_25, VERSION_2025_06_18];

/// `_meta` key tying a message to a task (2025-11-25).
pub const RELATED_TASK_KEY: &str = "io.modelcontextprotocol/related-task";

/// The 2025-11-25 `Task`: what `tasks/get`, `tasks/list`, `tasks/cancel` and
/// `notifications/tasks/status` carry.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task<'a> {
    /// The task id.
    pub task_id: &'a str,
    /// Its status (the same five as 2026-07-28).
    pub status: TaskStatus,
    /// Human-readable note about the current state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<&'a str>,
    /// RFC 3339 creation time.
    pub created_at: &'a str,
    /// RFC 3339 time of the last change.
    pub last_updated_at: &'a str,
    /// Lifetime in ms; `null` = unlimited (the key is always present).
    pub ttl: Option<u64>,
    /// Suggested polling interval in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<u64>,
}

impl<'a> From<&'a DetailedTask> for Task<'a> {
    fn from(t: &'a DetailedTask) -> Self {
        Task {
            task_id: &t.task_id,
            status: t.status,
            status_message: t.status_message.as_deref(),
            created_at: &t.created_at,
            last_updated_at: &t.last_updated_at,
            ttl: t.ttl_ms,
            poll_interval: t.poll_interval_ms,
        }
    }
}

/// `{"io.modelcontextprotocol/related-task": {"taskId": ID}}`, the value of that `_meta` key
/// and its key in one object.
pub fn related_task_meta(task_id: &str) -> serde_json::Value {
    serde_json::json!({ RELATED_TASK_KEY: { "taskId": task_id } })
}

/// `_meta` key of a request: the token its `notifications/progress` carry.
pub const PROGRESS_TOKEN_KEY: &str = "progressToken";

/// `initialize` params (2025).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The revision the client asks for.
    #[serde(default)]
    pub protocol_version: Member<String>,
    /// What the client can do.
    #[serde(default, deserialize_with = "object_member")]
    pub capabilities: Member<ClientCapabilities>,
    /// Who the client says it is.
    #[serde(default, deserialize_with = "object_member")]
    pub client_info: Member<Implementation>,
}

/// The 2025 `ClientCapabilities` members that mean the same in 2026-07-28 (`tasks` is
/// 2025-only and not kept).
#[derive(Debug, Default, Deserialize)]
pub struct ClientCapabilities {
    /// `elicitation`.
    #[serde(default)]
    pub elicitation: Member<Map<String, Value>>,
    /// `sampling`.
    #[serde(default)]
    pub sampling: Member<Map<String, Value>>,
    /// `roots`.
    #[serde(default)]
    pub roots: Member<Map<String, Value>>,
}

/// `Implementation`: a client's or server's name (and version, not read here).
#[derive(Debug, Default, Deserialize)]
pub struct Implementation {
    /// The name.
    #[serde(default)]
    pub name: Member<String>,
}

/// `tools/call` params (2025; `task` on 2025-11-25).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolParams {
    /// The tool's name.
    #[serde(default)]
    pub name: Member<String>,
    /// The tool's arguments: an object, any JSON inside; `{}` when absent.
    #[serde(default)]
    pub arguments: Member<Map<String, Value>>,
    /// Run the call as a task (2025-11-25 task augmentation).
    #[serde(default, deserialize_with = "object_member")]
    pub task: Member<TaskMetadata>,
}

/// `TaskMetadata` of a task-augmented request (2025-11-25).
#[derive(Debug, Default, Deserialize)]
pub struct TaskMetadata {
    /// Requested lifetime in ms.
    #[serde(default)]
    pub ttl: Member<u64>,
}

/// Params of `tasks/get`, `tasks/result` and `tasks/cancel` (2025-11-25): the task id.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskParams {
    /// The task.
    #[serde(default)]
    pub task_id: Member<String>,
}

/// `tasks/list` params (2025-11-25).
#[derive(Debug, Default, Deserialize)]
pub struct ListTasksParams {
    /// An earlier page's `nextCursor`.
    #[serde(default)]
    pub cursor: Member<String>,
}

/// `notifications/cancelled` params (2025).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledParams {
    /// The request the client gave up on.
    #[serde(default)]
    pub request_id: Member<Id>,
}
