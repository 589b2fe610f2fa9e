//! What a session's client sends that is not a request: its responses to the input
//! requests this server sent for a task (any gateway files them as the task's answers), and
//! notifications (`notifications/cancelled` cancels a synchronous call's task).

use std::sync::Arc;

use hyper::{Response, StatusCode};
use mcp_tasks_protocol::jsonrpc::Id;
use mcp_tasks_protocol::legacy::CancelledParams;
use mcp_tasks_protocol::method::Method;
use mcp_tasks_protocol::params::Member;
use mcp_tasks_protocol::tasks::ResponseKind;
use mcp_tasks_store::{Answer, is_plausible_task_id};
use serde_json::{Map, Value, json};

use super::session::Session;
use super::{INPUT_ID_PREFIX, call, session_missing};
use crate::envelope;
use crate::reply::{self, ResBody};
use crate::state::State;

/// A client notification: `notifications/cancelled` for a synchronous call cancels its task
/// (the id a call runs under is remembered for that); the rest need nothing.
pub(super) async fn notification(
    state: &Arc<State>,
    session: &Session,
    method: &str,
    params: Map<String, Value>,
) {
    if Method::from_name(method) != Some(Method::NotificationsCancelled) {
        return;
    }
    let Ok(CancelledParams {
        request_id: Member::Valid(request_id),
    }) = envelope::typed(params)
    else {
        return;
    };
    if let Some(task) = call::task_of_request(state, session, &request_id).await
        && let Err(e) = state.store.tasks().cancel(&task, &session.owner).await
    {
        tracing::warn!(task.id = %task, error = %e, "cannot cancel a call the client cancelled");
    }
}

/// A client's response to an input request we sent: the answer of that task's key.
pub(super) async fn respond(
    state: &Arc<State>,
    session: &Session,
    id: &Id,
    obj: Map<String, Value>,
) -> Response<ResBody> {
    let Id::String(raw) = id else {
        return session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: no request of this server has this id",
        );
    };
    let Some((task, key)) = raw
        .strip_prefix(INPUT_ID_PREFIX)
        .and_then(|rest| rest.split_once(':'))
        .filter(|(task, _)| is_plausible_task_id(task))
    else {
        return session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: no request of this server has this id",
        );
    };
    let answer = match obj.get("result") {
        Some(result) => result.clone(),
        None => {
            tracing::info!(task.id = ?task, key = ?key, error = %obj.get("error").cloned().unwrap_or_default(), "client answered an input request with an error");
            match failed_answer(state, session, task, key).await {
                Ok(Some(answer)) => answer,
                Ok(None) => return reply::empty(StatusCode::ACCEPTED),
                Err(res) => return res,
            }
        }
    };
    let answers = [(
        key.to_owned(),
        ResponseKind::mask_of(&answer),
        answer.to_string(),
    )];
    match state
        .store
        .tasks()
        .answer(task, &session.owner, &answers)
        .await
    {
        Ok(Answer::Ok) => reply::empty(StatusCode::ACCEPTED),
        Ok(Answer::NotFound) => session_missing(
            StatusCode::NOT_FOUND,
            "the task this answer is for no longer exists",
        ),
        Ok(Answer::Invalid { key, method }) => session_missing(
            StatusCode::BAD_REQUEST,
            &format!(
                "the response to {key:?} is not a valid result for {method}; nothing was recorded"
            ),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot record an answer");
            session_missing(
                StatusCode::SERVICE_UNAVAILABLE,
                "the task store is unavailable; retry",
            )
        }
    }
}

/// What a client's error response to the input request `key` of `task` means: an
/// elicitation it could not show is a dismissed one (`{"action": "cancel"}`); a sampling or
/// roots request it cannot serve has no answer the tool could use, so the task is cancelled
/// (`None`) rather than left waiting for its TTL.
async fn failed_answer(
    state: &Arc<State>,
    session: &Session,
    task: &str,
    key: &str,
) -> Result<Option<Value>, Response<ResBody>> {
    let unavailable = |e: mcp_tasks_store::StoreError| {
        tracing::warn!(error = %e, "cannot read the task an answer is for");
        session_missing(
            StatusCode::SERVICE_UNAVAILABLE,
            "the task store is unavailable; retry",
        )
    };
    let rec = state
        .store
        .tasks()
        .get(task, &session.owner)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| {
            session_missing(
                StatusCode::NOT_FOUND,
                "the task this answer is for no longer exists",
            )
        })?;
    let method = rec
        .inputs
        .get(key)
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
        .and_then(|r| r.get("method").and_then(Value::as_str).map(str::to_owned));
    match method.as_deref() {
        Some("elicitation/create") => Ok(Some(json!({ "action": "cancel" }))),
        Some(_) => {
            state
                .store
                .tasks()
                .cancel(task, &session.owner)
                .await
                .map_err(unavailable)?;
            Ok(None)
        }
        None => Err(session_missing(
            StatusCode::BAD_REQUEST,
            "Invalid request: the task has no outstanding request with this id",
        )),
    }
}
