//! `tools/list` and `tools/call` — where the server decides, per request, whether a call
//! becomes a task (ARCHITECTURE.md "tools/call", tasks-extension.md §2.2, §7).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::TASKS_EXTENSION;
use mcp_tasks_protocol::jsonrpc::result_bytes;
use mcp_tasks_protocol::meta::{Capability, ServerMeta, server_meta};
use mcp_tasks_protocol::params::{CallToolParams, InputResponses, ListToolsParams, Member};
use mcp_tasks_protocol::results::{CacheScope, InputRequiredResult, ListToolsResult};
use mcp_tasks_protocol::tasks::{CreateTaskResult, ResponseKind, TaskStatus};
use mcp_tasks_protocol::time::rfc3339_millis;
use mcp_tasks_store::TaskRecord;
use mcp_tasks_store::events::Watch;
use mcp_tasks_store::registry::{Policy, ToolAdvert};
use serde_json::{Map, Value};

use super::owner;
use crate::envelope::Request;
use crate::error::DispatchError;
use crate::launch::{self, Launched, Wait, wait_terminal};
use crate::reply::Reply;
use crate::state::State;

/// How long a client may cache `tools/list`.
const LIST_TTL_MS: u64 = 5_000;

/// A synchronous call's task outlives its wait by this much, then expires.
const SYNC_TASK_SLACK: Duration = Duration::from_secs(60);

pub(crate) async fn list(
    state: &Arc<State>,
    req: &Request,
    params: &ListToolsParams,
) -> Result<Reply, DispatchError> {
    if params.cursor.is_present() {
        return Err(DispatchError::InvalidParams(
            "invalid cursor: this server lists every tool on one page".into(),
        ));
    }
    let tools = state.registry.tools().await?;
    let listed: Vec<_> = tools.iter().map(|a| &a.tool).collect();
    let result = ListToolsResult {
        result_type: "complete",
        tools: listed,
        ttl_ms: LIST_TTL_MS,
        cache_scope: CacheScope::Public,
        meta: server_meta(),
    };
    Ok(Reply::Json(result_bytes(&req.id, &result)))
}

/// How this call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Wait for the result.
    Sync,
    /// Answer with the task handle at once.
    Task,
    /// Wait a short budget; then the handle if the extension is declared, else keep waiting.
    Auto { declared: bool },
}

impl Mode {
    /// The mode of a tool with `policy`, for a caller that `declared` the tasks extension
    /// or not (a task-only tool's caller has: the capability check refused the others).
    fn of(policy: Policy, declared: bool) -> Mode {
        match (policy, declared) {
            (Policy::Sync, _) | (Policy::Task, false) => Mode::Sync,
            (Policy::Task | Policy::TaskOnly, true) => Mode::Task,
            (Policy::Auto, declared) => Mode::Auto { declared },
            (Policy::TaskOnly, false) => unreachable!("the capability check rejects this"),
        }
    }
}

pub(crate) async fn call(
    state: &Arc<State>,
    mut req: Request,
    params: CallToolParams,
) -> Result<Reply, DispatchError> {
    let (call, args) = match launch::prepare(state, &params.name, params.arguments).await? {
        Ok(prepared) => prepared,
        Err(invalid) => return Ok(Reply::Json(result_bytes(&req.id, &invalid))),
    };
    let tool = &call.tool;
    let declared = Capability::Tasks.declared_in(req.capabilities());
    call.check_needs(
        &req,
        (tool.policy == Policy::TaskOnly).then_some(Capability::Tasks),
    )?;
    // MRTR before any task exists (T-15).
    let pre = match pre_input(tool, &params.input_responses)? {
        Ok(answers) => answers,
        Err(ask) => return Ok(Reply::Json(result_bytes(&req.id, &ask))),
    };
    let mode = Mode::of(tool.policy, declared);
    let ttl_cap = (mode == Mode::Sync).then_some(state.config.sync_timeout + SYNC_TASK_SLACK);
    let launched = launch::start(
        state,
        &mut req,
        &call,
        args,
        pre,
        ttl_cap,
        mode != Mode::Task,
    )
    .await?;
    let (status, updated_ms) = (launched.status(), launched.updated_ms());
    let Launched {
        id,
        created_ms,
        ttl_ms,
        mut watch,
        mut guard,
        ..
    } = launched;
    tracing::debug!(task.id = %id, mode = ?mode, "call mode");
    // A keyed call's retry answers where its task stands.
    let handle = || CreateTaskResult {
        result_type: "task",
        task_id: id.clone(),
        status,
        created_at: rfc3339_millis(created_ms),
        last_updated_at: rfc3339_millis(updated_ms),
        ttl_ms: Some(ttl_ms),
        poll_interval_ms: tool.poll_interval_ms,
        meta: ServerMeta,
    };
    // On every error return below the guard stays armed, and dropping it cancels the task.
    let reply = match (mode, watch.as_mut()) {
        (Mode::Task, _) => Reply::Json(result_bytes(&req.id, &handle())),
        (Mode::Auto { declared: true }, Some(w)) => {
            let until = Instant::now() + state.config.auto_wait;
            match wait_terminal(&state.store, owner(&req), w, until).await? {
                Wait::Done(rec) => sync_reply(&req, &rec)?,
                // The client declared the extension: it can follow and answer the task.
                Wait::NeedsInput | Wait::TimedOut => Reply::Json(result_bytes(&req.id, &handle())),
            }
        }
        (Mode::Sync | Mode::Auto { declared: false }, Some(w)) => {
            wait_synchronously(state, &req, &call.name, w).await?
        }
        (_, None) => {
            return Err(DispatchError::Internal(
                "no watch for a waiting call".into(),
            ));
        }
    };
    guard.disarm();
    Ok(reply)
}

/// Wait for the call's result as long as MCPT_SYNC_TIMEOUT; a task that asks for input
/// meanwhile cannot be answered by this caller.
async fn wait_synchronously(
    state: &State,
    req: &Request,
    name: &str,
    watch: &mut Watch,
) -> Result<Reply, DispatchError> {
    let sync_timeout = state.config.sync_timeout;
    match wait_terminal(
        &state.store,
        owner(req),
        watch,
        Instant::now() + sync_timeout,
    )
    .await?
    {
        Wait::Done(rec) => sync_reply(req, &rec),
        Wait::NeedsInput => Err(DispatchError::Failed(format!(
            "tool {name} needs input while it runs, which a synchronous call cannot deliver; call it declaring the {TASKS_EXTENSION} extension. The call was cancelled"
        ))),
        Wait::TimedOut => Err(DispatchError::Failed(format!(
            "tool {name} did not finish within {} s (MCPT_SYNC_TIMEOUT); the call was cancelled",
            sync_timeout.as_secs()
        ))),
    }
}

/// The stored result as the call's answer, or the task's error as a JSON-RPC error.
fn sync_reply(req: &Request, rec: &TaskRecord) -> Result<Reply, DispatchError> {
    let task = rec.to_detailed();
    match task.status {
        TaskStatus::Completed => match task.result {
            Some(raw) => Ok(Reply::Json(result_bytes(&req.id, &raw))),
            None => Err(DispatchError::Internal(
                "completed task without a result".into(),
            )),
        },
        TaskStatus::Failed => Err(DispatchError::task_failed(task.error)),
        _ => Err(DispatchError::Failed("the tool call was cancelled".into())),
    }
}

/// The MRTR round of a tool with `pre_input`: the answers when every key has a well-formed
/// one, else the `InputRequiredResult` asking for the rest.
fn pre_input(
    tool: &ToolAdvert,
    responses: &Member<InputResponses>,
) -> Result<Result<Map<String, Value>, InputRequiredResult>, DispatchError> {
    if tool.pre_input.is_empty() {
        return Ok(Ok(Map::new()));
    }
    let empty = Map::new();
    let responses = match responses {
        Member::Absent | Member::Invalid(Value::Null) => &empty,
        Member::Valid(m) => m,
        Member::Invalid(_) => {
            return Err(DispatchError::InvalidParams(
                "params.inputResponses must be an object".into(),
            ));
        }
    };
    let mut answers = Map::new();
    let mut missing = Map::new();
    for (key, request) in &tool.pre_input {
        let kind = request
            .kind()
            .map_err(|e| DispatchError::Internal(e.to_string()))?;
        match responses.get(key) {
            Some(answer) if ResponseKind::mask_of(answer) & kind.bit() != 0 => {
                answers.insert(key.clone(), answer.clone());
            }
            _ => {
                missing.insert(
                    key.clone(),
                    serde_json::to_value(request).unwrap_or(Value::Null),
                );
            }
        }
    }
    if missing.is_empty() {
        Ok(Ok(answers))
    } else {
        Ok(Err(InputRequiredResult {
            result_type: "input_required",
            input_requests: missing,
            meta: server_meta(),
        }))
    }
}
