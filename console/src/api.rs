//! The console's JSON API (`/console/api/…`), used by the pages and by `mcp-tasks queues`,
//! `workers` and `tasks`: its router ([`route`]), filters parsed once into [`Filter`], rows
//! built from the console's memory ([`super::view`]), errors as `{"error": "…"}` with a
//! status. The event stream is `events.rs`'s; a task's lookup and cancel `tasks.rs`'s;
//! strikes `strike.rs`'s and dead letters `dead.rs`'s.

use std::sync::Arc;

use hyper::{Method, Response, StatusCode};
use mcp_tasks_protocol::tasks::TaskStatus;
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::console::TaskDetail;
use serde_json::{Value, json};

use super::view::{Known, MAX_TASKS, View};
use crate::tasks::{UNKNOWN_TASK, cancel, find, whole};
use crate::{Console, State, dead, events, strike};
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

/// What is wrong with a task list's query ([`Filter::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FilterError {
    /// `status` names no status.
    #[error(
        "unknown status {0:?}: expected working, input_required, completed, failed or cancelled"
    )]
    Status(String),
    /// `limit` is not a whole number in range.
    #[error("bad limit {0:?}: expected a whole number from 1 to {MAX_TASKS}")]
    Limit(String),
    /// A parameter the list does not take.
    #[error("unknown parameter {0:?}: expected status, tool, queue, q or limit")]
    Parameter(String),
}

impl Filter {
    /// Parse a query string; `Err` says what is wrong.
    pub(crate) fn parse(query: Option<&str>) -> Result<Filter, FilterError> {
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
                    f.status =
                        Some(TaskStatus::parse(&v).ok_or_else(|| FilterError::Status(v.clone()))?);
                }
                "tool" => f.tool = Some(v),
                "queue" => f.queue = Some(v),
                "q" | "id" => f.id = Some(v),
                "limit" => {
                    f.limit = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_TASKS).contains(n))
                        .ok_or_else(|| FilterError::Limit(v.clone()))?;
                }
                "fragment" | "owner" => {}
                other => {
                    return Err(FilterError::Parameter(other.to_owned()));
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

/// `/console/api/…`: `rest` is the path after `api/`.
pub(crate) async fn route(
    state: &Arc<State>,
    console: &Console,
    method: &Method,
    rest: &[&str],
    query: Option<&str>,
    body: (&[u8], bool),
    principal: &str,
) -> Response<ResBody> {
    match (method, rest) {
        (&Method::GET, ["queues"]) => ok(&queues(console)),
        (&Method::GET, ["workers"]) => ok(&workers(console)),
        (&Method::GET, ["tasks"]) => match Filter::parse(query) {
            Ok(f) => ok(&tasks(&console.view, &f)),
            Err(why) => error(StatusCode::BAD_REQUEST, &why.to_string()),
        },
        (&Method::GET, ["tasks", id]) => task_of(state, console, id, query).await,
        (&Method::POST, ["tasks", id, "cancel"]) => {
            match cancel(state, console, id, query, principal).await {
                Ok(_) => ok(&json!({ "cancelled": id })),
                Err(res) => res,
            }
        }
        (&Method::GET, ["strikes"]) => ok(&json!({ "strikes": console.view.fleet().strikes })),
        (&Method::POST, ["strikes"]) => strike(state, console, body, principal).await,
        (&Method::POST, ["strikes", "restore"]) => restore(state, console, body, principal).await,
        (&Method::GET, ["dead"]) => dead_letters(state, query).await,
        (&Method::POST, ["dead", "redrive"]) => redrive(state, body, principal).await,
        (&Method::GET, ["events"]) => events::events(state, console),
        (
            _,
            ["queues" | "workers" | "tasks" | "events" | "strikes" | "dead"]
            | ["tasks", _]
            | ["strikes", "restore"]
            | ["dead", "redrive"],
        ) => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here"),
        _ => error(StatusCode::NOT_FOUND, "no such console API"),
    }
}

/// `GET /console/api/queues`: each queue with its run times, and the last 15 minutes'
/// counts, run times and rates.
fn queues(console: &Console) -> Value {
    let fleet = console.view.fleet();
    let queues: Vec<Value> = fleet
        .queues
        .iter()
        .map(|q| {
            let mut row = serde_json::to_value(q).unwrap_or_default();
            row["run_time"] = json!(console.view.run_time(Some(&q.name)));
            row
        })
        .collect();
    json!({
        "queues": queues,
        "last_15m": {
            "counts": console.view.rate_totals(),
            "run_time": console.view.run_time(None),
            "per_second": console.view.rate_points(now_millis()),
        },
        "refreshed_ms": fleet.refreshed_ms,
        "error": fleet.error,
    })
}

/// `GET /console/api/workers`: the workers and the tools advertised.
fn workers(console: &Console) -> Value {
    let fleet = console.view.fleet();
    json!({
        "workers": fleet.workers,
        "tools": fleet.tools,
        "refreshed_ms": fleet.refreshed_ms,
        "error": fleet.error,
    })
}

/// `GET /console/api/tasks/{id}`: the task read whole, with its worker, deliveries and
/// trace.
async fn task_of(
    state: &State,
    console: &Console,
    id: &str,
    query: Option<&str>,
) -> Response<ResBody> {
    let Some(known) = find(state, console, id, query).await else {
        return error(StatusCode::NOT_FOUND, UNKNOWN_TASK);
    };
    let detail = state
        .store
        .console()
        .task(id, &known.record.owner)
        .await
        .ok()
        .flatten();
    let known = whole(known, detail.as_ref());
    ok(&task(
        &known,
        detail.as_ref(),
        console.config.trace_url.as_deref(),
    ))
}

/// `GET /console/api/dead`: the dead letters, newest first, filtered by `tool` and
/// `since`.
async fn dead_letters(state: &State, query: Option<&str>) -> Response<ResBody> {
    let filter = match dead::DeadFilter::parse(query) {
        Ok(f) => f,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    match dead::list(state, &filter).await {
        Ok(letters) => {
            let now = now_millis();
            let rows: Vec<Value> = letters.iter().map(|l| dead::row(l, now)).collect();
            ok(&json!({ "dead": rows }))
        }
        Err((status, why)) => error(status, &why),
    }
}

/// `POST /console/api/dead/redrive`: `new` false when the letter was redriven before
/// (nothing was made; `task_id` is that task).
async fn redrive(state: &State, body: (&[u8], bool), principal: &str) -> Response<ResBody> {
    match dead::redrive(state, body, principal).await {
        Ok(done) => ok(&json!({
            "redriven": done.letter.task_id,
            "task_id": done.task_id,
            "owner": done.letter.owner,
            "new": done.new,
            "message": done.message,
        })),
        Err((status, why)) => error(status, &why),
    }
}

/// `POST /console/api/strikes`.
async fn strike(
    state: &State,
    console: &Console,
    body: (&[u8], bool),
    principal: &str,
) -> Response<ResBody> {
    match strike::strike(state, body, principal).await {
        Ok(struck) => {
            strike::shown_now(state, console).await;
            ok(&json!({
                "struck": struck.strike.describe(),
                "new": struck.new,
                "known": struck.known,
                "cancel_running": struck.strike.cancel_running,
                "message": struck.message(),
            }))
        }
        Err((status, why)) => error(status, &why),
    }
}

/// `POST /console/api/strikes/restore`.
async fn restore(
    state: &State,
    console: &Console,
    body: (&[u8], bool),
    principal: &str,
) -> Response<ResBody> {
    let done = strike::restore(state, body, principal).await;
    if done.is_ok() {
        strike::shown_now(state, console).await;
    }
    match done {
        Ok(r) => ok(&match r.released {
            Ok(n) => json!({ "restored": r.describe, "released": n }),
            Err(why) => json!({
                "restored": r.describe,
                "released": null,
                "note": format!("held jobs not all queued again here ({why}): the workers queue the rest within a few seconds"),
            }),
        }),
        Err((status, why)) => error(status, &why),
    }
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
                .to_string()
                .contains("unknown status")
        );
        assert!(
            Filter::parse(Some("limit=0"))
                .unwrap_err()
                .to_string()
                .contains("bad limit")
        );
        assert!(
            Filter::parse(Some("colour=red"))
                .unwrap_err()
                .to_string()
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
