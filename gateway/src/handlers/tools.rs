//! `tools/list` and `tools/call` — where the server decides, per request, whether a call
//! becomes a task (ARCHITECTURE.md "tools/call", tasks-extension.md §2.2, §7).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::TASKS_EXTENSION;
use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR, result_bytes};
use mcp_tasks_protocol::meta::{Capability, TRACEPARENT_KEY, missing_capabilities, server_meta};
use mcp_tasks_protocol::results::{CacheScope, InputRequiredResult, ListToolsResult};
use mcp_tasks_protocol::tasks::{CreateTaskResult, ResponseKind, TaskStatus};
use mcp_tasks_protocol::time::rfc3339_millis;
use mcp_tasks_protocol::tools::CallToolResult;
use mcp_tasks_shared::schema;
use mcp_tasks_store::events::{TaskEvent, Watch};
use mcp_tasks_store::registry::{Policy, ToolAdvert};
use mcp_tasks_store::{Created, Job, Limit, NewTask, OwnerLimits, Store, TaskRecord};
use serde_json::{Map, Value};

use super::owner;
use crate::State;
use crate::envelope::Request;
use crate::error::DispatchError;
use crate::http::Reply;

/// How long a client may cache `tools/list`.
const LIST_TTL_MS: u64 = 5_000;

/// A synchronous call's task outlives its wait by this much, then expires.
const SYNC_TASK_SLACK: Duration = Duration::from_secs(60);

pub(crate) async fn list(state: &Arc<State>, req: &Request) -> Result<Reply, DispatchError> {
    if req.params.contains_key("cursor") {
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

/// A call whose tool exists and whose arguments fit: what [`start`] needs.
pub(crate) struct Prepared {
    /// The tool's name.
    pub(crate) name: String,
    /// The tool's advertisement.
    pub(crate) tool: ToolAdvert,
}

/// Read a `tools/call`'s name and arguments (returned beside the [`Prepared`] call, so
/// [`start`] can move them into the job): `Err` for a request error, `Ok(Err(result))`
/// for arguments that break the tool's schema (a tool error the model can correct; no task,
/// B-29).
pub(crate) async fn prepare(
    state: &Arc<State>,
    req: &Request,
) -> Result<Result<(Prepared, Value), CallToolResult>, DispatchError> {
    let name = req
        .params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let args = match req.params.get("arguments") {
        None => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => {
            return Err(DispatchError::InvalidParams(
                "params.arguments must be an object".into(),
            ));
        }
    };
    let limit = state.config.limits.args_bytes;
    if let Some(v) = req.params.get("arguments") {
        let size = json_len(v);
        if size > limit {
            return Err(DispatchError::InvalidParams(format!(
                "params.arguments is {size} bytes of JSON; at most {limit} are accepted (MCPT_MAX_ARGS_BYTES)"
            )));
        }
    }
    let Some(tool) = state.registry.find(name).await? else {
        return Err(DispatchError::InvalidParams(format!(
            "Unknown tool: {name}"
        )));
    };
    if let Err(violation) = schema::validate(&tool.tool.input_schema, &args) {
        return Ok(Err(CallToolResult::error_text(format!(
            "invalid arguments for tool {name}: {violation}"
        ))
        .with_server_info()));
    }
    Ok(Ok((
        Prepared {
            name: name.to_owned(),
            tool,
        },
        args,
    )))
}

/// A task created for a call.
pub(crate) struct Launched {
    /// The task id.
    pub(crate) id: String,
    /// `createdAt`, ms since the epoch.
    pub(crate) created_ms: i64,
    /// The task's lifetime.
    pub(crate) ttl_ms: u64,
    /// The watch asked for, made before the task existed so no change slips past it.
    pub(crate) watch: Option<Watch>,
    /// Cancels the task when dropped armed: the caller left before it learned the task.
    pub(crate) guard: CancelOnDrop,
}

/// Create the task of a prepared call within its owner's limits, its lifetime capped at
/// `ttl_cap` when given, watched when `watch`.
pub(crate) async fn start(
    state: &Arc<State>,
    req: &Request,
    call: &Prepared,
    args: Value,
    pre: Map<String, Value>,
    ttl_cap: Option<Duration>,
    watch: bool,
) -> Result<Launched, DispatchError> {
    let tool = &call.tool;
    let job = Job {
        tool: call.name.clone(),
        args,
        caps: req.capabilities().clone(),
        pre,
        owner: owner(req).to_owned(),
        // This request's span when spans are exported (the worker's run is its child),
        // else the caller's own context unchanged.
        traceparent: mcp_tasks_shared::telemetry::current_traceparent(
            req.meta()
                .get(TRACEPARENT_KEY)
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
    };
    let id = state.store.new_task_id();
    tracing::Span::current().record("task.id", id.as_str());
    let owner = owner(req);
    // Bounded by this gateway's maximum too, whatever a worker advertises.
    let mut ttl_ms = tool.ttl_ms.min(millis(state.config.tasks.max_ttl));
    if let Some(cap) = ttl_cap {
        ttl_ms = ttl_ms.min(millis(cap));
    }
    let new = NewTask {
        id: &id,
        ttl_ms: Some(ttl_ms),
        poll_ms: tool.poll_interval_ms,
        owner,
        limits: OwnerLimits {
            per_minute: state.config.limits.tasks_per_minute,
            active: state.config.limits.active_tasks,
        },
        queue: &tool.queue,
        job: &job,
    };
    // Watch before creating, so the result cannot slip past a wait.
    let watch = if watch {
        Some(state.hub.watch(&id).await?)
    } else {
        None
    };
    // A client that goes away before it learns the task id cancels the task (T-58, B-16).
    let mut guard = CancelOnDrop::new(&state.store, &id, owner);
    let created_ms = match create(state, &new).await {
        Ok(at) => at,
        Err(e) => {
            guard.disarm();
            return Err(e);
        }
    };
    tracing::info!(task.id = %id, tool.name = %call.name, "task {id} created");
    mcp_tasks_shared::metrics::get().tasks_created.add(
        1,
        &[
            opentelemetry::KeyValue::new("tool.name", call.name.clone()),
            opentelemetry::KeyValue::new("queue.name", tool.queue.clone()),
        ],
    );
    Ok(Launched {
        id,
        created_ms,
        ttl_ms,
        watch,
        guard,
    })
}

pub(crate) async fn call(state: &Arc<State>, req: Request) -> Result<Reply, DispatchError> {
    let (call, args) = match prepare(state, &req).await? {
        Ok(prepared) => prepared,
        Err(invalid) => return Ok(Reply::Json(result_bytes(&req.id, &invalid))),
    };
    let tool = &call.tool;
    let name = call.name.as_str();
    let caps = req.capabilities();
    let declared = Capability::Tasks.declared_in(caps);
    let mut needs: Vec<Capability> = tool.needs.iter().map(|n| (*n).into()).collect();
    if tool.policy == Policy::TaskOnly {
        needs.push(Capability::Tasks);
    }
    if let Some(missing) = missing_capabilities(&needs, caps) {
        return Err(DispatchError::MissingCapability(missing));
    }
    // MRTR before any task exists (T-15).
    let pre = match pre_input(tool, &req)? {
        Ok(answers) => answers,
        Err(ask) => return Ok(Reply::Json(result_bytes(&req.id, &ask))),
    };
    let mode = match (tool.policy, declared) {
        (Policy::Sync, _) | (Policy::Task, false) => Mode::Sync,
        (Policy::Task | Policy::TaskOnly, true) => Mode::Task,
        (Policy::Auto, declared) => Mode::Auto { declared },
        (Policy::TaskOnly, false) => unreachable!("the capability check rejects this"),
    };
    let sync_timeout = state.config.sync_timeout;
    let ttl_cap = (mode == Mode::Sync).then_some(sync_timeout + SYNC_TASK_SLACK);
    let Launched {
        id,
        created_ms,
        ttl_ms,
        mut watch,
        mut guard,
    } = start(state, &req, &call, args, pre, ttl_cap, mode != Mode::Task).await?;
    tracing::debug!(task.id = %id, mode = ?mode, "call mode");
    let owner = owner(&req);
    let handle = || {
        let created = rfc3339_millis(created_ms);
        CreateTaskResult {
            result_type: "task",
            task_id: id.clone(),
            status: TaskStatus::Working,
            created_at: created.clone(),
            last_updated_at: created,
            ttl_ms: Some(ttl_ms),
            poll_interval_ms: tool.poll_interval_ms,
            meta: server_meta(),
        }
    };
    // On every error return below the guard stays armed, and dropping it cancels the task.
    let reply = match (mode, watch.as_mut()) {
        (Mode::Task, _) => Reply::Json(result_bytes(&req.id, &handle())),
        (Mode::Auto { declared: true }, Some(w)) => {
            match wait_terminal(
                &state.store,
                owner,
                w,
                Instant::now() + state.config.auto_wait,
            )
            .await?
            {
                Wait::Done(rec) => sync_reply(&req, &rec)?,
                // The client declared the extension: it can follow and answer the task.
                Wait::NeedsInput | Wait::TimedOut => Reply::Json(result_bytes(&req.id, &handle())),
            }
        }
        (Mode::Sync | Mode::Auto { declared: false }, Some(w)) => {
            match wait_terminal(&state.store, owner, w, Instant::now() + sync_timeout).await? {
                Wait::Done(rec) => sync_reply(&req, &rec)?,
                Wait::NeedsInput => {
                    return Err(ErrorObject::new(
                        INTERNAL_ERROR,
                        format!(
                            "tool {name} needs input while it runs, which a synchronous call cannot deliver; call it declaring the {TASKS_EXTENSION} extension. The call was cancelled"
                        ),
                    )
                    .into());
                }
                Wait::TimedOut => {
                    return Err(ErrorObject::new(
                        INTERNAL_ERROR,
                        format!("tool {name} did not finish within {} s (MCPT_SYNC_TIMEOUT); the call was cancelled", sync_timeout.as_secs()),
                    )
                    .into());
                }
            }
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

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
        TaskStatus::Failed => Err(task
            .error
            .unwrap_or_else(|| ErrorObject::new(INTERNAL_ERROR, "the tool failed"))
            .into()),
        _ => Err(ErrorObject::new(INTERNAL_ERROR, "the tool call was cancelled").into()),
    }
}

/// How a synchronous wait ended.
pub(crate) enum Wait {
    /// The task is terminal.
    Done(Box<TaskRecord>),
    /// The task asked for input.
    NeedsInput,
    /// `until` passed first.
    TimedOut,
}

/// Wait until the watched task is terminal or asks for input, or until `until`.
pub(crate) async fn wait_terminal(
    store: &Store,
    owner: &str,
    watch: &mut Watch,
    until: Instant,
) -> Result<Wait, DispatchError> {
    loop {
        let rec = match tokio::time::timeout_at(until.into(), watch.recv()).await {
            Err(_) => return Ok(Wait::TimedOut),
            Ok(None) => return Err(DispatchError::Internal("event hub stopped".into())),
            Ok(Some(TaskEvent::Changed(rec))) => std::sync::Arc::unwrap_or_clone(rec),
            Ok(Some(TaskEvent::Resync)) => match store.get_task(watch.task_id(), owner).await? {
                Some(rec) => rec,
                None => {
                    return Err(DispatchError::Internal(
                        "task vanished while waiting".into(),
                    ));
                }
            },
        };
        if rec.is_terminal() {
            return Ok(Wait::Done(Box::new(rec)));
        }
        if rec.status == Some(TaskStatus::InputRequired) {
            return Ok(Wait::NeedsInput);
        }
    }
}

/// The MRTR round of a tool with `pre_input`: the answers when every key has a well-formed
/// one, else the `InputRequiredResult` asking for the rest.
fn pre_input(
    tool: &ToolAdvert,
    req: &Request,
) -> Result<Result<Map<String, Value>, InputRequiredResult>, DispatchError> {
    if tool.pre_input.is_empty() {
        return Ok(Ok(Map::new()));
    }
    let responses = match req.params.get("inputResponses") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(DispatchError::InvalidParams(
                "params.inputResponses must be an object".into(),
            ));
        }
    };
    let mut answers = Map::new();
    let mut missing = Map::new();
    for (key, request) in &tool.pre_input {
        let kind = request.kind().map_err(DispatchError::Internal)?;
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

/// Bytes of `v` as compact JSON, counted without building the text.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

/// Create the task within its owner's limits. At the unfinished-task limit the owner's
/// finished tasks are pruned from the count first (they leave it lazily), then it is tried
/// once more.
async fn create(state: &State, new: &NewTask<'_>) -> Result<i64, DispatchError> {
    let limits = &state.config.limits;
    let mut pruned = false;
    loop {
        match state.store.create_task(new).await? {
            Created::At(at) => return Ok(at),
            Created::Limited(Limit::Active) if !pruned => {
                pruned = true;
                if state.store.prune_active(new.owner).await? == 0 {
                    continue_limited(limits.active_tasks)?;
                }
            }
            Created::Limited(Limit::Active) => continue_limited(limits.active_tasks)?,
            Created::Limited(Limit::PerMinute) => {
                return Err(DispatchError::Limited {
                    message: format!(
                        "Too many tasks: at most {} tasks per minute per caller (MCPT_LIMIT_TASKS_PER_MINUTE); retry in a minute",
                        limits.tasks_per_minute
                    ),
                    limit: "tasks_per_minute",
                    max: limits.tasks_per_minute,
                });
            }
        }
    }
}

fn continue_limited(max: u32) -> Result<(), DispatchError> {
    Err(DispatchError::Limited {
        message: format!(
            "Too many unfinished tasks: at most {max} per caller (MCPT_LIMIT_ACTIVE_TASKS); wait for one to finish or cancel one"
        ),
        limit: "active_tasks",
        max,
    })
}

/// Cancels the task if dropped while armed (the request future was dropped: the client left).
pub(crate) struct CancelOnDrop {
    store: Store,
    id: String,
    owner: String,
    armed: bool,
}

impl CancelOnDrop {
    fn new(store: &Store, id: &str, owner: &str) -> Self {
        CancelOnDrop {
            store: store.clone(),
            id: id.to_owned(),
            owner: owner.to_owned(),
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let store = self.store.clone();
        let id = std::mem::take(&mut self.id);
        let owner = std::mem::take(&mut self.owner);
        tracing::info!(task.id = %id, "caller left before learning the task; cancelling it");
        tokio::spawn(async move {
            if let Err(e) = store.cancel(&id, &owner).await {
                tracing::warn!(task.id = %id, error = %e, "cannot cancel abandoned task");
            }
        });
    }
}
