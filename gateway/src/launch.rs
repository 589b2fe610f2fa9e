//! The one path from a `tools/call` to a task, for both protocol eras: check the tool and
//! its arguments ([`prepare`]), then create the task within the caller's limits, watched
//! if the caller waits, cancelled if the caller leaves before it learns the id ([`start`]);
//! and wait for a watched task ([`wait_terminal`]). What a call answers is its era's
//! handler's (`handlers/tools.rs`, `legacy/call.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::meta::{Capability, missing_capabilities};
use mcp_tasks_protocol::meta::{IDEMPOTENCY_KEY, PRIORITY_KEY};
use mcp_tasks_protocol::params::Member;
use mcp_tasks_protocol::tasks::TaskStatus;
use mcp_tasks_protocol::tools::CallToolResult;
use mcp_tasks_shared::schema;
use mcp_tasks_store::events::{TaskEvent, Watch};
use mcp_tasks_store::idempotency::call_digest;
use mcp_tasks_store::{Job, NewTask, OwnerLimits, Priority, Store, TaskRecord};
use serde_json::{Map, Value};

use crate::envelope::Request;
use crate::error::DispatchError;
use crate::registry::FoundTool;
use crate::state::State;
use create::{Made, create, json_len};

mod create;

/// A call whose tool exists and whose arguments fit: what [`start`] needs.
pub(crate) struct Prepared {
    /// The tool's name.
    pub(crate) name: String,
    /// The tool's advertisement.
    pub(crate) tool: FoundTool,
}

impl Prepared {
    /// -32021 unless the caller declared what the tool needs, and `also` when given.
    pub(crate) fn check_needs(
        &self,
        req: &Request,
        also: Option<Capability>,
    ) -> Result<(), DispatchError> {
        let mut needs: Vec<Capability> = self.tool.needs.iter().map(|n| (*n).into()).collect();
        needs.extend(also);
        match missing_capabilities(&needs, req.capabilities()) {
            None => Ok(()),
            Some(missing) => Err(DispatchError::MissingCapability(missing)),
        }
    }
}

/// Check a `tools/call`'s name and arguments (both eras); the arguments are returned beside
/// the [`Prepared`] call, so [`start`] can move them into the job. `Err` for a request
/// error, `Ok(Err(result))` for arguments that break the tool's schema (a tool error the
/// model can correct; no task, B-29).
pub(crate) async fn prepare(
    state: &Arc<State>,
    name: &Member<String>,
    arguments: Member<Map<String, Value>>,
) -> Result<Result<(Prepared, Value), CallToolResult>, DispatchError> {
    // A name of another type is a tool no one has (the envelope already refused it on
    // 2026-07-28).
    let name = name.valid().map_or("", String::as_str);
    let args = match arguments {
        Member::Absent => Map::new(),
        Member::Valid(m) => m,
        Member::Invalid(_) => {
            return Err(DispatchError::InvalidParams(
                "params.arguments must be an object".into(),
            ));
        }
    };
    let limit = state.config.limits.args_bytes;
    let size = json_len(&args);
    if size > limit {
        return Err(DispatchError::InvalidParams(format!(
            "params.arguments is {size} bytes of JSON; at most {limit} are accepted (MCPT_MAX_ARGS_BYTES)"
        )));
    }
    let args = Value::Object(args);
    let Some(tool) = state.registry.find(name).await? else {
        let tools = state.registry.tools().await?;
        let names: Vec<&str> = tools.iter().map(|t| t.tool.name.as_str()).collect();
        return Err(DispatchError::InvalidParams(format!(
            "Unknown tool: {name}{}",
            suggest(name, &names)
        )));
    };
    if let Err(violation) = schema::validate(&tool.tool.input_schema, &args) {
        return Ok(Err(CallToolResult::error_text(format!(
            "invalid arguments for tool {name}: {violation}"
        ))
        .with_server_info()));
    }
    // The kill switch (`mcp-tasks strike`): a tool error, so the caller's model reads it.
    if let Some(strike) = state.registry.struck(name, &args).await? {
        return Ok(Err(CallToolResult::error_text(format!(
            "{} is struck: an operator stopped it (mcp-tasks strike) at {}; new calls are refused until it is restored",
            strike.describe(),
            mcp_tasks_protocol::time::rfc3339_millis(strike.at_ms)
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
    /// A keyed call's retry: the task its key already named, as it stood (its watch, if
    /// any, resyncs first, so a waiter reads it too).
    pub(crate) existing: Option<Box<TaskRecord>>,
}

impl Launched {
    /// The task's status for its `CreateTaskResult`: `working` for a new one.
    pub(crate) fn status(&self) -> TaskStatus {
        self.existing
            .as_ref()
            .and_then(|rec| rec.status)
            .unwrap_or(TaskStatus::Working)
    }

    /// Its last observable change (ms since the epoch): the creation for a new one.
    pub(crate) fn updated_ms(&self) -> i64 {
        self.existing
            .as_ref()
            .map_or(self.created_ms, |rec| rec.updated_ms)
    }
}

/// The call's idempotency key, from `_meta` (where `http.rs` also puts the
/// `Idempotency-Key` header): -32602 unless a string of 1 to 255 printable ASCII characters.
fn idempotency_key(req: &Request) -> Result<Option<String>, DispatchError> {
    let Some(v) = req.meta.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    match v.as_str() {
        Some(k) if (1..=255).contains(&k.len()) && k.bytes().all(|b| (0x20..0x7f).contains(&b)) => {
            Ok(Some(k.to_owned()))
        }
        _ => Err(DispatchError::InvalidParams(format!(
            "Invalid idempotency key (_meta[\"{IDEMPOTENCY_KEY}\"] or the Idempotency-Key header): it must be a string of 1 to 255 printable ASCII characters"
        ))),
    }
}

/// The priority of a call's job: `_meta["io.github.mcp-tasks/priority"]` when given, else
/// the tool's. -32602 for another value, or for `high` on a tool that is not `high` itself
/// from a caller `MCPT_HIGH_PRIORITY_PRINCIPALS` does not list.
fn priority(state: &State, req: &Request, tool: &FoundTool) -> Result<Priority, DispatchError> {
    let Some(v) = req.meta.get(PRIORITY_KEY) else {
        return Ok(tool.priority);
    };
    let Some(asked) = v.as_str().and_then(Priority::parse) else {
        return Err(DispatchError::InvalidParams(format!(
            "Invalid priority {v} (_meta[\"{PRIORITY_KEY}\"]): expected \"high\", \"normal\" or \"low\""
        )));
    };
    let allowed = match &state.config.auth.high_priority {
        None => true,
        Some(principals) => principals
            .iter()
            .any(|p| mcp_tasks_shared::owner::owner_digest(p) == req.owner),
    };
    if asked == Priority::High && tool.priority != Priority::High && !allowed {
        return Err(DispatchError::InvalidParams(format!(
            "Priority high is reserved for the principals MCPT_HIGH_PRIORITY_PRINCIPALS lists; ask \"normal\" or \"low\" (_meta[\"{PRIORITY_KEY}\"])"
        )));
    }
    Ok(asked)
}

/// Create the task of a prepared call within its owner's limits, with the answers `pre`
/// collected before it started, its lifetime capped at `ttl_cap` when given, watched when
/// `watch`. The request's client capabilities move into the job (T-45) rather than being
/// copied (6.6k instructions of a `tools/call`): no caller reads them afterwards.
pub(crate) async fn start(
    state: &Arc<State>,
    req: &mut Request,
    call: &Prepared,
    args: Value,
    pre: Map<String, Value>,
    ttl_cap: Option<Duration>,
    watch: bool,
) -> Result<Launched, DispatchError> {
    let Prepared { name, tool } = call;
    let key = idempotency_key(req)?;
    let priority = priority(state, req, tool)?;
    let job = job(req, name, args, pre)?;
    let owner = req.owner.as_str();
    // A keyed call's id comes from its owner and key: every retry names the same task, and
    // the create script decides, in one step, whether it exists.
    let (id, keyed) = match &key {
        Some(key) => (
            state.store.layout().keyed_task_id(owner, key),
            Some(call_digest(&job.args)),
        ),
        None => (state.store.new_task_id(), None),
    };
    tracing::Span::current().record("task.id", id.as_str());
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
        priority,
        job: &job,
        keyed: keyed.as_deref(),
    };
    // Watch before creating, so the result cannot slip past a wait.
    let watch = if watch {
        Some(state.hub.watch(&id).await?)
    } else {
        None
    };
    // A client that goes away before it learns the task id cancels the task (T-58, B-16).
    let mut guard = CancelOnDrop::new(&state.store, &id, owner);
    if key.is_some() {
        // Not for a keyed call: its caller finds the task again by sending the key again.
        guard.disarm();
    }
    let created_ms = match create(state, &new).await {
        Ok(Made::At(at)) => at,
        Ok(Made::Existing) => {
            guard.disarm();
            return found(&state.store, id, owner, ttl_ms, watch, guard).await;
        }
        Err(e) => {
            guard.disarm();
            return Err(e);
        }
    };
    tracing::event!(
        target: "access",
        tracing::Level::INFO,
        task.id = %id,
        tool.name = %name,
        "task {id} created"
    );
    mcp_tasks_shared::tally::created(&id, owner, &tool.queue);
    mcp_tasks_shared::metrics::get().tasks_created.add(
        1,
        &[
            opentelemetry::KeyValue::new("tool.name", name.clone()),
            opentelemetry::KeyValue::new("queue.name", tool.queue.clone()),
        ],
    );
    Ok(Launched {
        id,
        created_ms,
        ttl_ms,
        watch,
        guard,
        existing: None,
    })
}

/// The job of a call: its tool, arguments and the answers collected before it started;
/// the request's client capabilities move into it (T-45).
fn job(
    req: &mut Request,
    name: &str,
    args: Value,
    pre: Map<String, Value>,
) -> Result<Job, DispatchError> {
    Ok(Job {
        tool: name.to_owned(),
        args,
        // Raw in the job: a worker parses them only when its tool asks for input.
        caps: serde_json::value::to_raw_value(&req.take_capabilities())
            .map_err(|e| DispatchError::Internal(format!("client capabilities: {e}")))?,
        pre,
        owner: req.owner.clone(),
        // This request's span when spans are exported (the worker's run is its child),
        // else the caller's own context unchanged.
        traceparent: mcp_tasks_shared::telemetry::current_traceparent(req.traceparent()),
    })
}

/// A keyed call's retry: the task its key names, read as it stands; its watch, if any,
/// resyncs first, so a waiter reads it too (a finished task sends no more changes).
async fn found(
    store: &Store,
    id: String,
    owner: &str,
    ttl_ms: u64,
    watch: Option<Watch>,
    guard: CancelOnDrop,
) -> Result<Launched, DispatchError> {
    let Some(rec) = store.tasks().get(&id, owner).await? else {
        return Err(DispatchError::Internal(
            "a keyed task vanished as it was found".into(),
        ));
    };
    if let Some(w) = &watch {
        w.resync();
    }
    tracing::debug!(task.id = %id, "keyed call: the task its key names");
    Ok(Launched {
        id,
        created_ms: rec.created_ms,
        ttl_ms: rec.ttl_ms.unwrap_or(ttl_ms),
        watch,
        guard,
        existing: Some(Box::new(rec)),
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
            Ok(Some(TaskEvent::Resync)) => match store.tasks().get(watch.task_id(), owner).await? {
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
            if let Err(e) = store.tasks().cancel(&id, &owner).await {
                tracing::warn!(task.id = %id, error = %e, "cannot cancel abandoned task");
            }
        });
    }
}

/// What to say after `Unknown tool: NAME`: the nearest live tools (`; did you mean a, b?`),
/// else up to a few of them (`; tools: …`), else that none is live.
fn suggest(name: &str, tools: &[&str]) -> String {
    const SHOWN: usize = 5;
    if tools.is_empty() {
        return "; no tool is live (no worker advertises one)".to_owned();
    }
    let wanted = name.to_lowercase();
    let mut near: Vec<(usize, &str)> = tools
        .iter()
        .map(|t| (edit_distance(&wanted, &t.to_lowercase()), *t))
        .filter(|(d, t)| {
            *d <= (t.chars().count().max(wanted.chars().count()) / 3).max(1)
                || (!wanted.is_empty() && t.to_lowercase().contains(&wanted))
        })
        .collect();
    near.sort();
    if !near.is_empty() {
        let names: Vec<&str> = near.iter().take(3).map(|(_, t)| *t).collect();
        return format!("; did you mean {}?", names.join(", "));
    }
    let more = if tools.len() > SHOWN { ", …" } else { "" };
    format!(
        "; tools: {}{more} (tools/list names them all)",
        tools[..tools.len().min(SHOWN)].join(", ")
    )
}

/// Levenshtein distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_tool_names_the_nearest() {
        let tools = ["echo", "sleep", "ask", "fail", "slow_compute"];
        assert_eq!(suggest("slep", &tools), "; did you mean sleep?");
        assert_eq!(suggest("Echo", &tools), "; did you mean echo?");
        assert_eq!(suggest("slow", &tools), "; did you mean slow_compute?");
        assert_eq!(
            suggest("nosuchtool", &tools),
            "; tools: echo, sleep, ask, fail, slow_compute (tools/list names them all)"
        );
        assert!(suggest("x", &[]).contains("no tool is live"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
