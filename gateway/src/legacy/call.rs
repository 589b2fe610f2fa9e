//! `tools/call` in a 2025 session: a task-augmented call answered with its task at once,
//! or a synchronous call whose task `follow.rs` follows to its response.
//!
//! A synchronous call is a durable task like any other; what its SSE response carries is
//! described in `follow.rs`. A client that goes away cancels the task unless its tool
//! outlives its caller.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::jsonrpc::{self, Id};
use mcp_tasks_protocol::legacy::{CallToolParams, PROGRESS_TOKEN_KEY, TaskMetadata};
use mcp_tasks_protocol::params::Member;
use mcp_tasks_store::registry::Policy;
use serde_json::{Map, Value, json};

use super::follow::{Follow, follow};
use super::session::Session;
use crate::envelope::Request;
use crate::error::DispatchError;
use crate::launch::{self, Launched, Prepared};
use crate::reply::Reply;
use crate::state::State;

/// Longest request id (as JSON) mapped to its call's task for `notifications/cancelled`.
const MAX_REMEMBERED_ID: usize = 200;

/// A synchronous call's task outlives its wait by this much, then expires.
const SYNC_TASK_SLACK: Duration = Duration::from_secs(60);

/// The shortest lifetime a task-augmented call can ask for.
const MIN_TASK_TTL_MS: u64 = 1_000;

pub(super) async fn call(
    state: &Arc<State>,
    session: &Session,
    req: Request,
    params: CallToolParams,
    accepts_sse: bool,
) -> Result<Reply, DispatchError> {
    let (call, args) = match launch::prepare(state, &params.name, params.arguments).await? {
        Ok(prepared) => prepared,
        Err(invalid) => return Ok(Reply::Json(jsonrpc::result_bytes(&req.id, &invalid))),
    };
    let tool = &call.tool;
    let name = call.name.as_str();
    if !tool.pre_input.is_empty() {
        return Err(DispatchError::InvalidParams(format!(
            "tool {name} asks for input before it starts, which protocol {} cannot carry; call it with protocol 2026-07-28",
            session.version
        )));
    }
    let task = requested_task(params.task, session)?;
    // (`task` is only ever set on a session with the tasks API.)
    if task.is_some() && tool.policy == Policy::Sync {
        return Err(DispatchError::TaskForbidden(name.to_owned()));
    }
    call.check_needs(&req, None)?;
    match task {
        Some(task) => start_task(state, session, req, &call, args, task).await,
        None => wait_for_result(state, session, req, &call, args, accepts_sse).await,
    }
}

/// `params.task`: a task-augmented call, on a session with the tasks API (elsewhere the
/// member is ignored, and the call is synchronous).
fn requested_task(
    task: Member<TaskMetadata>,
    session: &Session,
) -> Result<Option<TaskMetadata>, DispatchError> {
    match task {
        Member::Absent | Member::Invalid(Value::Null) => Ok(None),
        Member::Valid(t) if session.has_tasks() => Ok(Some(t)),
        Member::Valid(_) => Ok(None),
        Member::Invalid(_) => Err(DispatchError::InvalidParams(
            "params.task must be an object like {\"ttl\": 60000}".into(),
        )),
    }
}

/// A task-augmented call: start the task and answer with it at once (2025-11-25).
async fn start_task(
    state: &Arc<State>,
    session: &Session,
    mut req: Request,
    call: &Prepared,
    args: Value,
    task: TaskMetadata,
) -> Result<Reply, DispatchError> {
    let ttl = match task.ttl {
        // A task must live long enough to be read at least once.
        Member::Absent | Member::Invalid(Value::Null) => None,
        Member::Valid(ms) => Some(Duration::from_millis(ms.max(MIN_TASK_TTL_MS))),
        Member::Invalid(_) => {
            return Err(DispatchError::InvalidParams(
                "params.task.ttl must be a non-negative integer of milliseconds".into(),
            ));
        }
    };
    let launched = launch::start(state, &mut req, call, args, Map::new(), ttl, false).await?;
    let (status, updated_ms) = (launched.status(), launched.updated_ms());
    let Launched {
        id,
        created_ms,
        ttl_ms,
        mut guard,
        ..
    } = launched;
    guard.disarm();
    // Its status changes then reach the session's GET stream, on any gateway, and
    // tasks/list shows it.
    if let Err(e) = state
        .store
        .sessions()
        .note_task(
            &session.id,
            &session.list_scope(),
            &id,
            created_ms.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX)),
            super::SESSION_IDLE,
            state.config.tasks.max_ttl,
        )
        .await
    {
        tracing::warn!(task.id = %id, error = %e, "cannot add the task to its session's stream");
    }
    let result = json!({
        "task": {
            "taskId": id,
            "status": status,
            "createdAt": mcp_tasks_protocol::time::rfc3339_millis(created_ms),
            "lastUpdatedAt": mcp_tasks_protocol::time::rfc3339_millis(updated_ms),
            "ttl": ttl_ms,
            "pollInterval": call.tool.poll_interval_ms,
        },
    });
    Ok(Reply::Json(jsonrpc::result_bytes(&req.id, &result)))
}

/// A synchronous call: start its task and follow it to its response, on an SSE stream or
/// (without one) in a JSON reply that waits as long as MCPT_SYNC_TIMEOUT.
async fn wait_for_result(
    state: &Arc<State>,
    session: &Session,
    mut req: Request,
    call: &Prepared,
    args: Value,
    accepts_sse: bool,
) -> Result<Reply, DispatchError> {
    let progress = req.meta.get(PROGRESS_TOKEN_KEY).cloned();
    let deadline = (!accepts_sse).then(|| Instant::now() + state.config.sync_timeout);
    let ttl_cap = (!accepts_sse).then(|| state.config.sync_timeout + SYNC_TASK_SLACK);
    let Launched {
        id,
        watch,
        guard,
        ttl_ms,
        ..
    } = launch::start(state, &mut req, call, args, Map::new(), ttl_cap, true).await?;
    let Some(watch) = watch else {
        return Err(DispatchError::Internal(
            "no watch for a waiting call".into(),
        ));
    };
    let remembered = remember_call(state, session, &req.id, &id, ttl_ms).await;
    let mut rx = follow(
        state.clone(),
        watch,
        Follow {
            task_id: id,
            owner: session.owner.clone(),
            request_id: req.id.clone(),
            progress,
            guard: Some(guard),
            outlives: call.tool.outlives_caller,
            related: false,
            json_only: !accepts_sse,
            deadline,
            name: call.name.clone(),
            remembered: remembered.map(|rid| (session.id.clone(), rid)),
            _slot: None,
        },
    );
    if accepts_sse {
        return Ok(Reply::Sse(crate::reply::sse_channel(rx)));
    }
    match rx.recv().await {
        Some(bytes) => Ok(Reply::Json(bytes.to_vec())),
        None => Err(DispatchError::Internal(
            "the call ended without a response".into(),
        )),
    }
}

/// Map the request id (as JSON) to the call's task, so `notifications/cancelled` finds
/// it; the id remembered, if it was.
async fn remember_call(
    state: &Arc<State>,
    session: &Session,
    request_id: &Id,
    task_id: &str,
    ttl_ms: u64,
) -> Option<String> {
    // Request ids are the client's: a long one is not worth remembering.
    let remembered = serde_json::to_string(request_id)
        .ok()
        .filter(|rid| rid.len() <= MAX_REMEMBERED_ID);
    if let Some(rid) = &remembered
        && let Err(e) = state
            .store
            .sessions()
            .remember_call(&session.id, rid, task_id, Duration::from_millis(ttl_ms))
            .await
    {
        tracing::warn!(task.id = %task_id, error = %e, "cannot remember the call's task; notifications/cancelled will not reach it");
    }
    remembered
}

/// The task a session's synchronous request runs as.
pub(super) async fn task_of_request(
    state: &Arc<State>,
    session: &Session,
    request_id: &Id,
) -> Option<String> {
    let rid = serde_json::to_string(request_id).ok()?;
    match state.store.sessions().called_task(&session.id, &rid).await {
        Ok(task) => task,
        Err(e) => {
            tracing::warn!(error = %e, "cannot look up a cancelled call");
            None
        }
    }
}
