//! The 2025-11-25 tasks API over the same Redis tasks as 2026-07-28: `tasks/get`,
//! `tasks/result`, `tasks/list`, `tasks/cancel`. A task is its owner's whichever revision
//! created it; ids, states and results are the same in both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::jsonrpc::result_bytes;
use mcp_tasks_protocol::legacy::{self, ListTasksParams, TaskParams};
use mcp_tasks_protocol::params::Member;
use mcp_tasks_protocol::tasks::{DetailedTask, TaskStatus};
use mcp_tasks_protocol::time::{now_millis, rfc3339_millis};
use mcp_tasks_store::{TaskRecord, is_plausible_task_id};
use serde_json::{Value, json};

use super::follow::{Follow, follow};
use super::session::Session;
use crate::envelope::Request;
use crate::error::DispatchError;
use crate::handlers::listen::ListenerSlot;
use crate::handlers::{owner, task_id};
use crate::reply::Reply;
use crate::state::State;

/// Tasks per `tasks/list` page.
const PAGE: usize = 50;

/// How long `tasks/cancel` waits for a running task's worker to confirm.
const CANCEL_CONFIRM: Duration = Duration::from_secs(2);

/// The 2025-11-25 `Task` of a task's current state, as JSON.
pub(super) fn task_json(task: &DetailedTask) -> Value {
    serde_json::to_value(legacy::Task::from(task)).unwrap_or(Value::Null)
}

/// The caller's task named by `params.taskId`, or -32602 for an unknown, expired or foreign one.
async fn find(
    state: &Arc<State>,
    req: &Request,
    params: &TaskParams,
) -> Result<TaskRecord, DispatchError> {
    let id = task_id(&params.task_id)?;
    if !is_plausible_task_id(id) {
        return Err(DispatchError::TaskNotFound);
    }
    tracing::Span::current().record("task.id", id);
    state
        .store
        .tasks()
        .get(id, owner(req))
        .await?
        .filter(|r| r.owner == owner(req))
        .ok_or(DispatchError::TaskNotFound)
}

/// `tasks/get`: the task, without related-task metadata (the spec forbids it here).
pub(super) async fn get(
    state: &Arc<State>,
    req: &Request,
    params: &TaskParams,
) -> Result<Reply, DispatchError> {
    let rec = find(state, req, params).await?;
    Ok(Reply::Json(result_bytes(
        &req.id,
        &task_json(&rec.to_detailed()),
    )))
}

/// `tasks/result`: the call's own response once the task ends. While it waits, the task's
/// input requests reach the client on this stream (its answers come back as responses),
/// with its status changes as `notifications/tasks/status`. A stream holds one of the
/// caller's `MCPT_LIMIT_LISTENERS` slots while open.
pub(super) async fn result(
    state: &Arc<State>,
    req: Request,
    params: &TaskParams,
    accepts_sse: bool,
) -> Result<Reply, DispatchError> {
    let rec = find(state, &req, params).await?;
    // A stream is held open as long as the task runs: counted like any other (one for a
    // task already ended is answered at once).
    let slot = if accepts_sse && !rec.is_terminal() {
        Some(ListenerSlot::take(state, owner(&req)).await?)
    } else {
        None
    };
    // Watch first, then read again inside `follow`: no change slips between.
    let watch = state.hub.watch(&rec.id).await?;
    let mut rx = follow(
        state.clone(),
        watch,
        Follow {
            task_id: rec.id.clone(),
            owner: owner(&req).to_owned(),
            request_id: req.id.clone(),
            progress: None,
            guard: None,
            outlives: true,
            related: true,
            json_only: !accepts_sse,
            // Without a stream the answer waits in one response, as long as a synchronous call.
            deadline: (!accepts_sse).then(|| Instant::now() + state.config.sync_timeout),
            name: rec.tool.clone(),
            remembered: None,
            _slot: slot,
        },
    );
    if accepts_sse {
        return Ok(Reply::Sse(crate::reply::sse_channel(rx)));
    }
    match rx.recv().await {
        Some(bytes) => Ok(Reply::Json(bytes.to_vec())),
        None => Err(DispatchError::Internal(
            "the task ended without a response".into(),
        )),
    }
}

/// `tasks/list`: the tasks the caller created as tasks through 2025-11-25 sessions, the
/// latest to expire first (newest first among tasks of one TTL) — all of its principal's when authenticated, the session's own when anonymous
/// (anonymous callers are one principal; a list would hand each the others' ids). Tasks
/// created through 2026-07-28, which has no list, are not indexed, so creating one costs
/// nothing extra. The cursor is an offset.
pub(super) async fn list(
    state: &Arc<State>,
    session: &Session,
    req: &Request,
    params: &ListTasksParams,
) -> Result<Reply, DispatchError> {
    let start: usize = match &params.cursor {
        Member::Absent | Member::Invalid(Value::Null) => 0,
        Member::Valid(c) => c
            .strip_prefix("o:")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                DispatchError::InvalidParams(
                    "invalid cursor: pass back the nextCursor of an earlier tasks/list".into(),
                )
            })?,
        Member::Invalid(_) => {
            return Err(DispatchError::InvalidParams(
                "invalid cursor: it must be a string".into(),
            ));
        }
    };
    let scope = session.list_scope();
    let ids = state
        .store
        .sessions()
        .listed_tasks(&scope, start, PAGE)
        .await?;
    let full_page = ids.len() == PAGE;
    let records = state.store.tasks().get_many(&ids, owner(req)).await?;
    let now = now_millis();
    let mut listed = Vec::with_capacity(ids.len());
    let mut gone = Vec::new();
    for (id, rec) in ids.iter().zip(records) {
        match rec.filter(|r| r.owner == owner(req)) {
            Some(r) => listed.push(task_json(&r.to_detailed_at(now))),
            None => gone.push(id.clone()),
        }
    }
    // Expired tasks leave the list as they are met.
    if let Err(e) = state.store.sessions().forget_listed(&scope, &gone).await {
        tracing::debug!(error = %e, "cannot forget expired listed tasks");
    }
    let mut result = json!({ "tasks": listed });
    if full_page {
        result["nextCursor"] = json!(format!("o:{}", start + PAGE - gone.len()));
    }
    Ok(Reply::Json(result_bytes(&req.id, &result)))
}

/// `tasks/cancel`: the task as it ends. A terminal task cannot be cancelled (-32602).
pub(super) async fn cancel(
    state: &Arc<State>,
    req: &Request,
    params: &TaskParams,
) -> Result<Reply, DispatchError> {
    let rec = find(state, req, params).await?;
    let before = rec.to_detailed();
    if before.status.is_terminal() {
        return Err(DispatchError::InvalidParams(format!(
            "Cannot cancel task {}: it is already {}",
            rec.id,
            before.status.as_str()
        )));
    }
    let mut watch = state.hub.watch(&rec.id).await?;
    if !state.store.tasks().cancel(&rec.id, owner(req)).await? {
        return Err(DispatchError::TaskNotFound);
    }
    // A queued or waiting task is cancelled by now; a running one when its worker stops it,
    // which it must (a finishing worker honours the cancel flag): wait a moment for that.
    let until = Instant::now() + CANCEL_CONFIRM;
    let mut now = state.store.tasks().get(&rec.id, owner(req)).await?;
    while !now.as_ref().is_none_or(TaskRecord::is_terminal) {
        match tokio::time::timeout_at(until.into(), watch.recv()).await {
            Ok(Some(_)) => now = state.store.tasks().get(&rec.id, owner(req)).await?,
            Ok(None) | Err(_) => break,
        }
    }
    let mut task = match now {
        Some(r) => r.to_detailed(),
        None => return Err(DispatchError::TaskNotFound),
    };
    // It ended on its own between the read above and the cancel.
    if task.status.is_terminal() && task.status != TaskStatus::Cancelled {
        return Err(DispatchError::InvalidParams(format!(
            "Cannot cancel task {}: it is already {}",
            task.task_id,
            task.status.as_str()
        )));
    }
    if !task.status.is_terminal() {
        task.status = TaskStatus::Cancelled;
        task.status_message = Some("Cancelled by request".into());
        task.last_updated_at = rfc3339_millis(now_millis());
    }
    Ok(Reply::Json(result_bytes(&req.id, &task_json(&task))))
}
