//! A task as stored in its hash, and its rendering as a `DetailedTask`.
//!
//! The same parser reads `HGETALL` replies (polls) and the flat field list every script
//! publishes (notifications), so both paths show the same task (T-47).

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_protocol::tasks::{DetailedTask, TaskStatus};
use mcp_tasks_protocol::time::rfc3339_millis;

/// Status message and error message of a task whose TTL passed before it ended.
pub const EXPIRED: &str = "Task expired before completion";

/// One task hash, decoded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskRecord {
    /// Task id.
    pub id: String,
    /// Status (`None` only for a corrupt hash, which renders as failed).
    pub status: Option<TaskStatus>,
    /// `statusMessage`.
    pub message: Option<String>,
    /// Creation, ms since the epoch.
    pub created_ms: i64,
    /// Last observable change, ms since the epoch.
    pub updated_ms: i64,
    /// Lifetime in ms; `None` = never expires.
    pub ttl_ms: Option<u64>,
    /// Suggested poll interval in ms.
    pub poll_ms: u64,
    /// Bumped by every observable change.
    pub version: u64,
    /// Digest of the creating principal.
    pub owner: String,
    /// Tool name.
    pub tool: String,
    /// `CallToolResult` JSON, when completed.
    pub result: Option<String>,
    /// JSON-RPC error JSON, when failed.
    pub error: Option<String>,
    /// A running task was asked to stop.
    pub cancel_requested: bool,
    /// Fencing token of the worker running the task (0 = never started).
    pub fence: u64,
    /// Outstanding input requests (key → request JSON).
    pub inputs: BTreeMap<String, String>,
    /// Answers received (key → answer JSON).
    pub answers: BTreeMap<String, String>,
    /// Tasks linked to this one: a redriven dead letter and the task its redrive made.
    pub related: Vec<String>,
}

impl TaskRecord {
    /// Decode a hash given as (field, value) pairs. `None` when the hash is empty (gone).
    pub fn from_fields<I, F>(id: &str, fields: I) -> Option<TaskRecord>
    where
        I: IntoIterator<Item = (F, String)>,
        F: AsRef<str>,
    {
        let mut rec = TaskRecord {
            id: id.to_owned(),
            ..TaskRecord::default()
        };
        let mut any = false;
        for (field, value) in fields {
            any = true;
            let field = field.as_ref();
            match field {
                "status" => rec.status = TaskStatus::parse(&value),
                "msg" => rec.message = Some(value),
                "created" => rec.created_ms = value.parse().unwrap_or(0),
                "updated" => rec.updated_ms = value.parse().unwrap_or(0),
                "ttl" => rec.ttl_ms = value.parse().ok(),
                "poll" => rec.poll_ms = value.parse().unwrap_or(0),
                "ver" => rec.version = value.parse().unwrap_or(0),
                "owner" => rec.owner = value,
                "tool" => rec.tool = value,
                "result" => rec.result = Some(value),
                "error" => rec.error = Some(value),
                "cancel" => rec.cancel_requested = value == "1",
                "fence" => rec.fence = value.parse().unwrap_or(0),
                "related" => rec.related = value.split(' ').map(str::to_owned).collect(),
                _ => {
                    if let Some(key) = field.strip_prefix("in:") {
                        rec.inputs.insert(key.to_owned(), value);
                    } else if let Some(key) = field.strip_prefix("ans:") {
                        rec.answers.insert(key.to_owned(), value);
                    }
                }
            }
        }
        any.then_some(rec)
    }

    /// Decode the flat `[field, value, ...]` JSON array a script publishes.
    pub fn from_published(id: &str, payload: &[u8]) -> Option<TaskRecord> {
        let flat: Vec<String> = serde_json::from_slice(payload).ok()?;
        let mut it = flat.into_iter();
        let pairs = std::iter::from_fn(|| Some((it.next()?, it.next()?)));
        TaskRecord::from_fields(id, pairs)
    }

    /// Whether the task reached a terminal state.
    pub fn is_terminal(&self) -> bool {
        self.status.is_none_or(TaskStatus::is_terminal)
    }

    /// Render as the spec's `DetailedTask`, with only the fields of its status (T-20).
    pub fn to_detailed(&self) -> DetailedTask {
        self.to_detailed_at(mcp_tasks_protocol::time::now_millis())
    }

    /// `createdAt + ttlMs`, if the task expires.
    pub fn deadline_ms(&self) -> Option<i64> {
        self.ttl_ms.map(|ttl| {
            self.created_ms
                .saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX))
        })
    }

    /// Render as of `now_ms`: an unfinished task past its TTL reads as failed with
    /// -32603 "Task expired before completion", last updated at its deadline — exactly the
    /// state the scripts write when they notice the expiry (T-52).
    pub fn to_detailed_at(&self, now_ms: i64) -> DetailedTask {
        if let Some(deadline) = self.deadline_ms()
            && now_ms >= deadline
            && !self.is_terminal()
        {
            let expired = TaskRecord {
                status: Some(TaskStatus::Failed),
                message: Some(EXPIRED.to_owned()),
                error: Some(format!(
                    r#"{{"code":{INTERNAL_ERROR},"message":"{EXPIRED}"}}"#
                )),
                updated_ms: self.updated_ms.max(deadline),
                ..self.clone()
            };
            return expired.to_detailed_at(i64::MIN);
        }
        let raw = |s: &String| RawValue::from_string(s.clone()).ok();
        let (status, error) = match self.status {
            Some(status) => (status, None),
            None => (
                TaskStatus::Failed,
                Some(ErrorObject::new(INTERNAL_ERROR, "task state is unreadable")),
            ),
        };
        let input_requests = (status == TaskStatus::InputRequired).then(|| {
            self.inputs
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), raw(v)?)))
                .collect()
        });
        let result = match status {
            TaskStatus::Completed => self.result.as_ref().and_then(raw).or_else(|| {
                RawValue::from_string(r#"{"resultType":"complete","content":[]}"#.to_owned()).ok()
            }),
            _ => None,
        };
        let error = match status {
            TaskStatus::Failed => error.or_else(|| {
                Some(
                    self.error
                        .as_deref()
                        .and_then(|e| serde_json::from_str(e).ok())
                        .unwrap_or_else(|| ErrorObject::new(INTERNAL_ERROR, "task failed")),
                )
            }),
            _ => None,
        };
        let status_message = match (&self.message, &error) {
            (Some(m), _) => Some(m.clone()),
            (None, Some(e)) => Some(e.message.clone()),
            (None, None) => None,
        };
        DetailedTask {
            task_id: self.id.clone(),
            status,
            status_message,
            created_at: rfc3339_millis(self.created_ms),
            last_updated_at: rfc3339_millis(self.updated_ms.max(self.created_ms)),
            ttl_ms: self.ttl_ms,
            poll_interval_ms: Some(self.poll_ms.max(1)),
            input_requests,
            result,
            error,
            related_task_ids: self.related.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn empty_hash_is_gone() {
        assert_eq!(
            TaskRecord::from_fields("t", Vec::<(String, String)>::new()),
            None
        );
    }

    /// T-19, T-20: only the status's own fields are rendered.
    #[test]
    fn renders_only_status_fields() {
        let rec = TaskRecord::from_fields(
            "t",
            fields(&[
                ("status", "input_required"),
                ("created", "1000"),
                ("updated", "2000"),
                ("ttl", "60000"),
                ("poll", "500"),
                ("in:q", r#"{"method":"roots/list","params":{}}"#),
                ("ans:old", r#"{"roots":[]}"#),
                ("result", r#"{"resultType":"complete","content":[]}"#),
            ]),
        )
        .unwrap();
        let v = serde_json::to_value(rec.to_detailed_at(2000)).unwrap();
        assert_eq!(v["status"], "input_required");
        assert_eq!(v["inputRequests"]["q"]["method"], "roots/list");
        assert!(v.get("result").is_none());
        assert_eq!(v["ttlMs"], 60000);
        assert_eq!(v["createdAt"], "1970-01-01T00:00:01.000Z");
    }

    #[test]
    fn failed_task_has_error_and_a_message() {
        let rec = TaskRecord::from_fields(
            "t",
            fields(&[
                ("status", "failed"),
                ("ttl", ""),
                ("error", r#"{"code":-32603,"message":"boom"}"#),
            ]),
        )
        .unwrap();
        let v = serde_json::to_value(rec.to_detailed()).unwrap();
        assert_eq!(v["error"]["code"], -32603);
        assert_eq!(v["statusMessage"], "boom");
        assert!(v["ttlMs"].is_null());
    }

    /// T-52: unfinished past the TTL reads as failed, as the scripts would write it.
    #[test]
    fn unfinished_task_past_its_ttl_reads_as_failed() {
        let rec = TaskRecord::from_fields(
            "t",
            fields(&[
                ("status", "working"),
                ("created", "1000"),
                ("updated", "1500"),
                ("ttl", "2000"),
            ]),
        )
        .unwrap();
        let before = serde_json::to_value(rec.to_detailed_at(2999)).unwrap();
        assert_eq!(before["status"], "working");
        let after = serde_json::to_value(rec.to_detailed_at(3000)).unwrap();
        assert_eq!(after["status"], "failed");
        assert_eq!(after["error"]["code"], -32603);
        assert_eq!(after["error"]["message"], "Task expired before completion");
        assert_eq!(after["lastUpdatedAt"], "1970-01-01T00:00:03.000Z");
        let done = TaskRecord {
            status: Some(TaskStatus::Completed),
            ..rec
        };
        assert_eq!(
            serde_json::to_value(done.to_detailed_at(9999)).unwrap()["status"],
            "completed"
        );
    }

    #[test]
    fn published_payload_round_trips() {
        let rec =
            TaskRecord::from_published("t", br#"["status","working","ver","3","msg","step 1\/2"]"#)
                .unwrap();
        assert_eq!(rec.version, 3);
        assert_eq!(rec.message.as_deref(), Some("step 1/2"));
    }
}
