//! One task by id for the pages (`routes.rs`) and the API (`api.rs`): found in the
//! console's memory (`view.rs`) or read by its owner, completed with what was just read,
//! and cancelled by an operator.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use mcp_tasks_shared::body::ResBody;
use mcp_tasks_store::console::TaskDetail;

use crate::access::logged;
use crate::view::Known;
use crate::{Console, State, api};

/// What a task id this gateway cannot find gets.
pub(crate) const UNKNOWN_TASK: &str = "unknown task id (a gateway that has not listed the task finds \
     it when the request names its owner digest: ?owner=DIGEST, as the console's links do)";

/// A remembered summary completed with the task as just read, when it was.
pub(crate) fn whole(known: Known, detail: Option<&TaskDetail>) -> Known {
    match detail {
        Some(d) => Known {
            record: Arc::new(d.record.clone()),
            ..known
        },
        None => known,
    }
}

/// A task by id: remembered by this gateway, else read from Redis when the request names
/// its owner (`?owner=DIGEST`). A task's key holds its owner digest, so a task this
/// gateway never listed cannot be read without it.
pub(crate) async fn find(
    state: &State,
    console: &Console,
    id: &str,
    query: Option<&str>,
) -> Option<Known> {
    if let Some(known) = console.view.task(id) {
        return Some(known);
    }
    let owner = api::pairs(query?)
        .into_iter()
        .find_map(|(k, v)| (k == "owner").then_some(v))?;
    let detail = state.store.console().task(id, &owner).await;
    let detail = detail
        .inspect_err(|e| tracing::warn!(error = %e, task.id = %id, "console: task not read"))
        .ok()??;
    Some(Known {
        record: Arc::new(detail.record),
        queue: detail.queue.unwrap_or_default(),
    })
}

/// Ask for a task's cancellation as an operator; logged with the acting principal.
/// Returns the task's owner digest.
pub(crate) async fn cancel(
    state: &State,
    console: &Console,
    id: &str,
    query: Option<&str>,
    principal: &str,
) -> Result<String, Response<ResBody>> {
    let Some(known) = find(state, console, id, query).await else {
        return Err(api::error(StatusCode::NOT_FOUND, UNKNOWN_TASK));
    };
    let owner = known.record.owner.clone();
    match state.store.tasks().cancel(id, &owner).await {
        Ok(true) => {
            let by = logged(principal);
            tracing::info!(task.id = %id, console.owner = %by, "console: task {id} cancelled by {by}");
            Ok(owner)
        }
        Ok(false) => Err(api::error(StatusCode::NOT_FOUND, UNKNOWN_TASK)),
        Err(e) => {
            tracing::warn!(error = %e, task.id = %id, "console: cancel failed");
            Err(api::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "redis unavailable; retry",
            ))
        }
    }
}
