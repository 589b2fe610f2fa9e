//! Wire pieces of the 2025 revisions (2025-11-25, 2025-06-18) that the gateway serves beside
//! 2026-07-28: version names, the related-task `_meta` key and the 2025-11-25 `Task`.

use serde::Serialize;

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
