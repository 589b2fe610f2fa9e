//! The console's JSON API (`/console/api/…`), used by the pages and by `mcp-tasks queues`,
//! `workers` and `tasks`: filters parsed once into [`Filter`], rows built from the
//! console's memory ([`super::view`]), errors as `{"error": "…"}` with a status.

use hyper::{Response, StatusCode};
use mcp_tasks_protocol::tasks::TaskStatus;
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::console::TaskDetail;
use serde_json::{Value, json};

use super::view::{Known, MAX_TASKS, View};
use mcp_tasks_shared::body::{self as reply, ResBody};

/// Tasks listed when no `limit` is given.
pub(crate) const DEFAULT_LIMIT: usize = 100;

/// A JSON error answer.
pub(crate) fn error(status: StatusCode, message: &str) -> Response<ResBody> {
    reply::json(
        status,
        serde_json::to_vec(&json!({ "error": message })).unwrap_or_default(),
    )
}

/// A JSON answer.
pub(crate) fn ok(body: &Value) -> Response<ResBody> {
    reply::json(StatusCode::OK, serde_json::to_vec(body).unwrap_or_default())
}

/// Which tasks to list: `status`, `tool`, `queue` (exact), `q` (part of the id), `limit`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Filter {
    pub(crate) status: Option<TaskStatus>,
    pub(crate) tool: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) id: Option<String>,
    pub(crate) limit: usize,
}

/// The `name=value` pairs of a query string or form body, decoded.
pub(crate) fn pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

/// A task page's path, naming the owner so that any replica finds the task by reading it
/// (one that never listed it included).
pub(crate) fn task_path(id: &str, owner: &str, action: &str) -> String {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("owner", owner)
        .finish();
    format!("/console/tasks/{id}{action}?{query}")
}

impl Filter {
    /// Parse a query string; `Err` says what is wrong.
    pub(crate) fn parse(query: Option<&str>) -> Result<Filter, String> {
        let mut f = Filter {
            limit: DEFAULT_LIMIT,
            ..Filter::default()
        };
        for (k, v) in pairs(query.unwrap_or("")) {
            let v = v.trim().to_owned();
            if v.is_empty() {
                continue;
            }
            match k.as_str() {
                "status" => {
                    f.status = Some(TaskStatus::parse(&v).ok_or_else(|| {
                        format!(
                            "unknown status {v:?}: expected working, input_required, \
                             completed, failed or cancelled"
                        )
                    })?);
                }
                "tool" => f.tool = Some(v),
                "queue" => f.queue = Some(v),
                "q" | "id" => f.id = Some(v),
                "limit" => {
                    f.limit = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_TASKS).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "bad limit {v:?}: expected a whole number from 1 to {MAX_TASKS}"
                            )
                        })?;
                }
                "fragment" | "owner" => {}
                other => {
                    return Err(format!(
                        "unknown parameter {other:?}: expected status, tool, queue, q or limit"
                    ));
                }
            }
        }
        Ok(f)
    }

    /// Whether `k` passes.
    pub(crate) fn keeps(&self, k: &Known) -> bool {
        let r = &k.record;
        self.status.is_none_or(|s| r.status == Some(s))
            && self.tool.as_ref().is_none_or(|t| &r.tool == t)
            && self.queue.as_ref().is_none_or(|q| &k.queue == q)
            && self.id.as_ref().is_none_or(|id| r.id.contains(id.as_str()))
    }
}

/// The status a task shows (expired unfinished tasks read as failed, as `tasks/get` says).
pub(crate) fn status_of(k: &Known) -> (String, Option<String>) {
    let d = k.record.to_detailed();
    (d.status.as_str().to_owned(), d.status_message)
}

/// One row of the task list.
pub(crate) fn task_row(k: &Known, now: i64) -> Value {
    let r = &k.record;
    let (status, message) = status_of(k);
    json!({
        "id": r.id,
        "status": status,
        "status_message": message,
        "tool": r.tool,
        "queue": k.queue,
        "owner": r.owner,
        "created_ms": r.created_ms,
        "updated_ms": r.updated_ms,
        "age_ms": (now - r.created_ms).max(0),
    })
}

/// `GET /console/api/tasks`.
pub(crate) fn tasks(view: &View, filter: &Filter) -> Value {
    let now = now_millis();
    let rows: Vec<Value> = view
        .tasks(filter.limit, |k| filter.keeps(k))
        .iter()
        .map(|k| task_row(k, now))
        .collect();
    json!({ "tasks": rows, "remembered_max": MAX_TASKS })
}

/// The trace id of a W3C `traceparent` (`00-TRACEID-SPANID-FLAGS`).
pub(crate) fn trace_id(traceparent: &str) -> Option<&str> {
    let id = traceparent.split('-').nth(1)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// `GET /console/api/tasks/{id}`.
pub(crate) fn task(k: &Known, detail: Option<&TaskDetail>, trace_url: Option<&str>) -> Value {
    let mut row = task_row(k, now_millis());
    let detailed = serde_json::to_value(k.record.to_detailed()).unwrap_or(Value::Null);
    row["ttl_ms"] = json!(k.record.ttl_ms);
    row["poll_interval_ms"] = json!(k.record.poll_ms);
    row["version"] = json!(k.record.version);
    row["cancel_requested"] = json!(k.record.cancel_requested);
    for (from, to) in [
        ("inputRequests", "input_requests"),
        ("result", "result"),
        ("error", "error"),
    ] {
        row[to] = detailed.get(from).cloned().unwrap_or(Value::Null);
    }
    let trace = detail
        .and_then(|d| d.traceparent.as_deref())
        .and_then(trace_id);
    row["worker"] = json!(detail.and_then(|d| d.worker.clone()));
    row["deliveries"] = json!(detail.and_then(|d| d.deliveries));
    row["trace_id"] = json!(trace);
    row["trace_url"] = json!(
        trace
            .zip(trace_url)
            .map(|(t, u)| u.replace("{trace_id}", t))
    );
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_parsed_and_bad_ones_explained() {
        let f = Filter::parse(Some("status=working&tool=sleep&q=tsk_a%2Bb&limit=5")).unwrap();
        assert_eq!(f.status, Some(TaskStatus::Working));
        assert_eq!(f.tool.as_deref(), Some("sleep"));
        assert_eq!(f.id.as_deref(), Some("tsk_a+b"));
        assert_eq!(f.limit, 5);
        assert!(
            Filter::parse(Some("status=done"))
                .unwrap_err()
                .contains("unknown status")
        );
        assert!(
            Filter::parse(Some("limit=0"))
                .unwrap_err()
                .contains("bad limit")
        );
        assert!(
            Filter::parse(Some("colour=red"))
                .unwrap_err()
                .contains("unknown parameter")
        );
        assert_eq!(Filter::parse(Some("status=&tool=")).unwrap().status, None);
        assert_eq!(
            pairs("q=a%zz%4&x")[0].1,
            "a%zz%4",
            "bad escapes stay as written"
        );
        assert_eq!(
            task_path("tsk_1", "a b&c", "/cancel"),
            "/console/tasks/tsk_1/cancel?owner=a+b%26c"
        );
    }

    #[test]
    fn trace_ids_come_from_traceparents() {
        assert_eq!(
            trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(trace_id("garbage"), None);
    }
}
