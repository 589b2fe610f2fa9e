//! `tasks/get`, `tasks/update`, `tasks/cancel` (tasks-extension.md §8–§10).

use std::sync::Arc;

use mcp_tasks_protocol::jsonrpc::result_bytes;
use mcp_tasks_protocol::meta::ServerMeta;
use mcp_tasks_protocol::params::{CancelTaskParams, GetTaskParams, Member, UpdateTaskParams};
use mcp_tasks_protocol::tasks::{EmptyResult, GetTaskResult, ResponseKind, TaskMeta};
use mcp_tasks_store::{Answer, is_plausible_task_id};

use super::{owner, require_tasks, task_id};
use crate::envelope::Request;
use crate::error::DispatchError;
use crate::reply::Reply;
use crate::state::State;

/// Most answers one `tasks/update` may carry (T-56).
const MAX_ANSWERS: usize = 64;

fn empty(req: &Request) -> Reply {
    Reply::Json(result_bytes(
        &req.id,
        &EmptyResult {
            result_type: "complete",
            meta: ServerMeta,
        },
    ))
}

/// The task id, gated on the extension first (T-05; the conformance probe uses an unknown id).
fn checked_id<'a>(req: &Request, id: &'a Member<String>) -> Result<&'a str, DispatchError> {
    require_tasks(req)?;
    let id = task_id(id)?;
    // Only ids we could have issued reach logs and spans: anything else is caller input.
    if mcp_tasks_store::is_plausible_task_id(id) {
        tracing::Span::current().record("task.id", id);
    }
    Ok(id)
}

/// One `HMGET` (and an `HGETALL` for a task waiting for input); the same answer for
/// unknown, expired and foreign ids (T-24, T-25, T-26).
pub(crate) async fn get(
    state: &Arc<State>,
    req: &Request,
    params: &GetTaskParams,
) -> Result<Reply, DispatchError> {
    let id = checked_id(req, &params.task_id)?;
    if !is_plausible_task_id(id) {
        return Err(DispatchError::TaskNotFound);
    }
    let rec = state.store.tasks().view(id, owner(req)).await?;
    let Some(rec) = rec.filter(|r| r.owner == owner(req)) else {
        return Err(DispatchError::TaskNotFound);
    };
    let task = rec.to_detailed();
    let result = GetTaskResult {
        result_type: "complete",
        task: &task,
        meta: TaskMeta {
            related: &task.related_task_ids,
        },
    };
    Ok(Reply::Json(result_bytes(&req.id, &result)))
}

/// Answers for outstanding keys are recorded before the ack (T-27…T-34).
pub(crate) async fn update(
    state: &Arc<State>,
    req: &Request,
    params: &UpdateTaskParams,
) -> Result<Reply, DispatchError> {
    let id = checked_id(req, &params.task_id)?;
    let responses = match &params.input_responses {
        Member::Valid(m) => m,
        Member::Invalid(_) => {
            return Err(DispatchError::InvalidParams(
                "params.inputResponses must be an object".into(),
            ));
        }
        Member::Absent => {
            return Err(DispatchError::InvalidParams(
                "params.inputResponses is required".into(),
            ));
        }
    };
    if responses.len() > MAX_ANSWERS {
        return Err(DispatchError::InvalidParams(format!(
            "params.inputResponses has {} answers; at most {MAX_ANSWERS} are accepted",
            responses.len()
        )));
    }
    if !is_plausible_task_id(id) {
        return Err(DispatchError::TaskNotFound);
    }
    let answers: Vec<(String, u8, String)> = responses
        .iter()
        .map(|(k, v)| (k.clone(), ResponseKind::mask_of(v), v.to_string()))
        .collect();
    match state.store.tasks().answer(id, owner(req), &answers).await? {
        Answer::Ok => Ok(empty(req)),
        Answer::NotFound => Err(DispatchError::TaskNotFound),
        Answer::Invalid { key, method } => Err(DispatchError::InvalidParams(format!(
            "inputResponses[\"{key}\"] is not a valid result for {method}; nothing was recorded"
        ))),
    }
}

/// Acknowledged at once; terminal tasks do not change (T-35…T-37).
pub(crate) async fn cancel(
    state: &Arc<State>,
    req: &Request,
    params: &CancelTaskParams,
) -> Result<Reply, DispatchError> {
    let id = checked_id(req, &params.task_id)?;
    if !is_plausible_task_id(id) || !state.store.tasks().cancel(id, owner(req)).await? {
        return Err(DispatchError::TaskNotFound);
    }
    Ok(empty(req))
}
