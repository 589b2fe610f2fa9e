//! The one path from a `tools/call` to a task, for both protocol eras: check the tool and
//! its arguments ([`prepare`]), then create the task within the caller's limits, watched
//! if the caller waits, cancelled if the caller leaves before it learns the id ([`start`]);
//! and wait for a watched task ([`wait_terminal`]). What a call answers is its era's
//! handler's (`handlers/tools.rs`, `legacy/call.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::meta::{Capability, missing_capabilities};
use mcp_tasks_protocol::params::Member;
use mcp_tasks_protocol::tasks::TaskStatus;
use mcp_tasks_protocol::tools::CallToolResult;
use mcp_tasks_shared::schema;
use mcp_tasks_store::events::{TaskEvent, Watch};
use mcp_tasks_store::stored::{self, Stored};
use mcp_tasks_store::{Created, Job, Limit, NewTask, OwnerLimits, Store, TaskRecord};
use serde_json::{Map, Value};

use crate::envelope::Request;
use crate::error::DispatchError;
use crate::registry::FoundTool;
use crate::state::State;

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
    let job = Job {
        tool: name.clone(),
        args,
        // Raw in the job: a worker parses them only when its tool asks for input.
        caps: serde_json::value::to_raw_value(&req.take_capabilities())
            .map_err(|e| DispatchError::Internal(format!("client capabilities: {e}")))?,
        pre,
        owner: req.owner.clone(),
        // This request's span when spans are exported (the worker's run is its child),
        // else the caller's own context unchanged.
        traceparent: mcp_tasks_shared::telemetry::current_traceparent(req.traceparent()),
    };
    let id = state.store.new_task_id();
    tracing::Span::current().record("task.id", id.as_str());
    let owner = req.owner.as_str();
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

/// Bytes of `v` as compact JSON, counted without building the text.
fn json_len(v: &impl serde::Serialize) -> usize {
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

/// Create the task within its owner's limits: its stored bytes are counted first (refused
/// while the owner is over; taken back when the create fails or is refused), then the
/// task counts ([`create_within_counts`]).
async fn create(state: &State, new: &NewTask<'_>) -> Result<i64, DispatchError> {
    let limits = &state.config.limits;
    if limits.stored_bytes == 0 {
        return create_within_counts(state, new).await;
    }
    let lapses = new.ttl_ms.map(|ttl| {
        let lifetime = i64::try_from(mcp_tasks_store::hash_lifetime_ms(ttl)).unwrap_or(i64::MAX);
        mcp_tasks_protocol::time::now_millis().saturating_add(lifetime)
    });
    let bytes = json_len(new.job);
    if let stored::Counted::Refused(total) = state
        .store
        .count_stored(
            new.owner,
            bytes,
            lapses,
            limits.stored_bytes,
            Stored::Create,
        )
        .await?
    {
        return Err(DispatchError::Limited {
            message: format!(
                "Too much stored: this caller's tasks keep {total} bytes in Redis, at most {} (MCPT_LIMIT_STORED_BYTES); wait for tasks to expire",
                limits.stored_bytes
            ),
            limit: "stored_bytes",
            max: limits.stored_bytes,
        });
    }
    let created = create_within_counts(state, new).await;
    if created.is_err() {
        // Nothing kept: the bytes are not the owner's to carry.
        if let Err(e) = state.store.uncount_stored(new.owner, bytes, lapses).await {
            tracing::debug!(error = %e, "stored bytes of a failed create not taken back");
        }
    }
    created
}

/// [`create`] within the owner's task counts (rate, unfinished). At the unfinished-task
/// limit the owner's finished tasks are pruned from the count first (they leave it
/// lazily), then it is tried once more.
async fn create_within_counts(state: &State, new: &NewTask<'_>) -> Result<i64, DispatchError> {
    if let Some(at) = create_counted(state, new).await? {
        return Ok(at);
    }
    state
        .prunes
        .run(new.owner, state.store.prune_active(new.owner))
        .await?;
    // Tried again whatever the prune found: another request's may have made room.
    create_counted(state, new)
        .await?
        .ok_or_else(|| active_limited(state.config.limits.active_tasks))
}

/// One create: `None` when refused at the unfinished-task limit.
async fn create_counted(state: &State, new: &NewTask<'_>) -> Result<Option<i64>, DispatchError> {
    match state.store.create_task(new).await? {
        Created::At(at) => Ok(Some(at)),
        Created::Limited(Limit::Active) => Ok(None),
        Created::Limited(Limit::PerMinute) => {
            let limits = &state.config.limits;
            Err(DispatchError::Limited {
                message: format!(
                    "Too many tasks: at most {} tasks per minute per caller (MCPT_LIMIT_TASKS_PER_MINUTE); retry in a minute",
                    limits.tasks_per_minute
                ),
                limit: "tasks_per_minute",
                max: u64::from(limits.tasks_per_minute),
            })
        }
    }
}

fn active_limited(max: u32) -> DispatchError {
    DispatchError::Limited {
        message: format!(
            "Too many unfinished tasks: at most {max} per caller (MCPT_LIMIT_ACTIVE_TASKS); wait for one to finish or cancel one"
        ),
        limit: "active_tasks",
        max: u64::from(max),
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
            if let Err(e) = store.cancel(&id, &owner).await {
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
