//! Following a task to its end on a 2025 response stream: a synchronous `tools/call`
//! (`call.rs`) and `tasks/result` (`tasks.rs`) answer this way.
//!
//! The stream carries, in order: `notifications/progress` for each new status message (when
//! the request had a `progressToken`), the task's input requests as server-to-client
//! requests, a keep-alive comment every 15 s so idle-timeout proxies leave it open, and the
//! request's response.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_tasks_protocol::jsonrpc::{self, Id};
use mcp_tasks_protocol::legacy::{RELATED_TASK_KEY, related_task_meta};
use mcp_tasks_protocol::tasks::{DetailedTask, TaskStatus};
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::TaskRecord;
use mcp_tasks_store::events::{TaskEvent, Watch};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::input_request_id;
use crate::error::DispatchError;
use crate::handlers::listen::ListenerSlot;
use crate::launch::CancelOnDrop;
use crate::reply::sse_event;
use crate::state::State;

/// An SSE comment at least this often on a quiet stream, so proxies do not cut it.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Add the related-task `_meta` entry to a message's params or result, keeping its `_meta`.
fn tag_related(obj: &mut Map<String, Value>, task_id: &str) {
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(m) = meta {
        m.insert(RELATED_TASK_KEY.into(), json!({ "taskId": task_id }));
    }
}

/// What to follow and how to answer.
pub(super) struct Follow {
    pub(super) task_id: String,
    pub(super) owner: String,
    /// The request the stream answers.
    pub(super) request_id: Id,
    /// The request's `progressToken`: status messages become `notifications/progress`.
    pub(super) progress: Option<Value>,
    /// Armed: the task is cancelled if the client leaves first.
    pub(super) guard: Option<CancelOnDrop>,
    /// The tool keeps running when its caller leaves.
    pub(super) outlives: bool,
    /// `tasks/result`: messages carry the related-task `_meta`, and status changes are
    /// sent as `notifications/tasks/status`.
    pub(super) related: bool,
    /// Send only the final response, unframed (a JSON reply); input requests are an error.
    pub(super) json_only: bool,
    /// Give up at this instant (JSON replies).
    pub(super) deadline: Option<Instant>,
    /// The tool, for messages.
    pub(super) name: String,
    /// (session, request id) whose mapping to this task is forgotten at the end.
    pub(super) remembered: Option<(String, String)>,
    /// The caller's `MCPT_LIMIT_LISTENERS` slot a `tasks/result` stream holds while open
    /// (never read: dropped with the follower, it is given back).
    pub(super) _slot: Option<ListenerSlot>,
}

/// Follow a task until it ends, on a spawned task feeding the returned stream.
pub(super) fn follow(state: Arc<State>, watch: Watch, f: Follow) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(run(state, watch, f, tx));
    rx
}

/// Why following stopped.
enum Stop {
    /// The client went away.
    Left,
    /// The final response was sent.
    Done,
    /// The gateway is draining: the stream was ended with an error saying so.
    Drain,
}

struct Follower {
    f: Follow,
    tx: mpsc::Sender<Bytes>,
    seen_version: u64,
    last_message: Option<String>,
    last_status: Option<TaskStatus>,
    asked: HashSet<String>,
    progress_n: u64,
}

impl Follower {
    async fn send(&self, json: &[u8]) -> Result<(), Stop> {
        let frame = if self.f.json_only {
            Bytes::copy_from_slice(json)
        } else {
            sse_event(json)
        };
        self.tx.send(frame).await.map_err(|_| Stop::Left)
    }

    /// End the stream with `error` as the request's response, in 2025 terms.
    async fn finish_with_error(&mut self, error: DispatchError) -> Stop {
        let bytes = jsonrpc::error_bytes(Some(&self.f.request_id), &error.legacy_object());
        match self.send(&bytes).await {
            Ok(()) => Stop::Done,
            Err(stop) => stop,
        }
    }

    /// Act on one state of the task; `Err` ends the stream.
    async fn on_record(&mut self, rec: &TaskRecord) -> Result<(), Stop> {
        if self.seen_version != 0 && rec.version <= self.seen_version {
            return Ok(());
        }
        self.seen_version = rec.version;
        let task = rec.to_detailed();
        if self.f.json_only {
            if task.status == TaskStatus::InputRequired {
                let why = self.input_refusal();
                return Err(self.finish_with_error(DispatchError::Failed(why)).await);
            }
        } else {
            if self.f.related && self.last_status != Some(task.status) {
                self.send_status(&task).await?;
            }
            self.send_progress(&task).await?;
            self.send_input_requests(&task).await?;
        }
        self.last_status = Some(task.status);
        self.last_message.clone_from(&task.status_message);
        if !task.status.is_terminal() {
            return Ok(());
        }
        let bytes = self.final_response(&task);
        if let Some(guard) = self.f.guard.as_mut() {
            guard.disarm();
        }
        self.send(&bytes).await?;
        Err(Stop::Done)
    }

    /// Why a JSON reply cannot go on once the task waits for input. A synchronous call is
    /// then cancelled (its guard stays armed, as in a 2026 synchronous call); a task
    /// followed by tasks/result keeps waiting.
    fn input_refusal(&self) -> String {
        if self.f.guard.is_some() {
            format!(
                "tool {} needs input while it runs, which a JSON response cannot carry; send Accept: text/event-stream. The call was cancelled",
                self.f.name
            )
        } else {
            format!(
                "task {} is waiting for input, which a JSON response cannot carry: call tasks/result with Accept: text/event-stream",
                self.f.task_id
            )
        }
    }

    /// `tasks/result`: the new status as `notifications/tasks/status`.
    async fn send_status(&self, task: &DetailedTask) -> Result<(), Stop> {
        // The notification names its task already: the spec asks for no related-task
        // metadata on it.
        let params = super::tasks::task_json(task);
        let n = json!({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": params});
        self.send(n.to_string().as_bytes()).await
    }

    /// A new status message of a working task as `notifications/progress`, when the
    /// request had a `progressToken`.
    async fn send_progress(&mut self, task: &DetailedTask) -> Result<(), Stop> {
        let Some(token) = &self.f.progress else {
            return Ok(());
        };
        if task.status != TaskStatus::Working
            || task.status_message.is_none()
            || task.status_message == self.last_message
        {
            return Ok(());
        }
        self.progress_n += 1;
        let mut params = json!({
            "progressToken": token,
            "progress": self.progress_n,
            "message": task.status_message,
        });
        if self.f.related {
            params["_meta"] = related_task_meta(&self.f.task_id);
        }
        let n = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params});
        self.send(n.to_string().as_bytes()).await
    }

    /// The task's input requests not sent yet, as requests to the client.
    async fn send_input_requests(&mut self, task: &DetailedTask) -> Result<(), Stop> {
        let Some(requests) = &task.input_requests else {
            return Ok(());
        };
        for (key, request) in requests {
            if !self.asked.insert(key.clone()) {
                continue;
            }
            let Ok(mut request) = serde_json::from_str::<Map<String, Value>>(request.get()) else {
                continue;
            };
            if self.f.related {
                let params = request
                    .entry("params")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(p) = params {
                    tag_related(p, &self.f.task_id);
                }
            }
            request.insert("jsonrpc".into(), json!("2.0"));
            request.insert("id".into(), json!(input_request_id(&self.f.task_id, key)));
            self.send(Value::Object(request).to_string().as_bytes())
                .await?;
        }
        Ok(())
    }

    /// The response to the request, from the task's terminal state.
    fn final_response(&self, task: &DetailedTask) -> Vec<u8> {
        match task.status {
            TaskStatus::Completed => {
                let mut result: Map<String, Value> = task
                    .result
                    .as_ref()
                    .and_then(|r| serde_json::from_str(r.get()).ok())
                    .unwrap_or_default();
                if self.f.related {
                    tag_related(&mut result, &self.f.task_id);
                }
                jsonrpc::result_bytes(&self.f.request_id, &result)
            }
            TaskStatus::Failed => jsonrpc::error_bytes(
                Some(&self.f.request_id),
                &DispatchError::task_failed(task.error.clone()).legacy_object(),
            ),
            _ => jsonrpc::error_bytes(
                Some(&self.f.request_id),
                &DispatchError::Failed(format!("task {} was cancelled", self.f.task_id))
                    .legacy_object(),
            ),
        }
    }
}

async fn run(state: Arc<State>, mut watch: Watch, f: Follow, tx: mpsc::Sender<Bytes>) {
    let mut me = Follower {
        f,
        tx,
        seen_version: 0,
        last_message: None,
        last_status: None,
        asked: HashSet::new(),
        progress_n: 0,
    };
    let stop = follow_until_done(&state, &mut watch, &mut me).await;
    if let Some(mut guard) = me.f.guard.take() {
        guard.disarm();
        let leave = match stop {
            Stop::Done => false,
            Stop::Left => {
                tracing::info!(task.id = %me.f.task_id, outlives = me.f.outlives, "caller left a synchronous call");
                true
            }
            Stop::Drain => true,
        };
        // Cancelled here, awaited (a drop guard's spawned cancel may not run at shutdown).
        if leave
            && !me.f.outlives
            && let Err(e) = state.store.tasks().cancel(&me.f.task_id, &me.f.owner).await
        {
            tracing::warn!(task.id = %me.f.task_id, error = %e, "cannot cancel the call's task");
        }
    }
    if let Some((session, rid)) = &me.f.remembered
        && let Err(e) = state.store.sessions().forget_call(session, rid).await
    {
        tracing::debug!(error = %e, "cannot forget a finished call");
    }
}

async fn follow_until_done(state: &Arc<State>, watch: &mut Watch, me: &mut Follower) -> Stop {
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.tick().await;
    let mut pending = match state.store.tasks().get(&me.f.task_id, &me.f.owner).await {
        Ok(Some(rec)) => Some(rec),
        Ok(None) => {
            return me.finish_with_error(DispatchError::TaskNotFound).await;
        }
        Err(e) => {
            tracing::warn!(task.id = %me.f.task_id, error = %e, "cannot read the task; waiting for its events");
            None
        }
    };
    let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    let deadline = me.f.deadline.unwrap_or(far);
    let mut expires = far;
    loop {
        let rec = match pending.take() {
            Some(rec) => rec,
            None => {
                let event = tokio::select! {
                    () = me.tx.closed() => return Stop::Left,
                    () = state.streams_end.cancelled() => {
                        let why = if me.f.guard.is_some() && !me.f.outlives {
                            format!("the gateway is shutting down; task {} was cancelled: call again", me.f.task_id)
                        } else {
                            format!("the gateway is shutting down; task {} continues: ask again for its result", me.f.task_id)
                        };
                        let _ = me.finish_with_error(DispatchError::Failed(why)).await;
                        return Stop::Drain;
                    }
                    ev = watch.recv() => ev,
                    _ = keepalive.tick(), if !me.f.json_only => {
                        if me.tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                            return Stop::Left;
                        }
                        continue;
                    }
                    () = tokio::time::sleep_until(deadline.into()) => {
                        let why = format!(
                            "tool {} did not finish within {} s (MCPT_SYNC_TIMEOUT); the call was cancelled",
                            me.f.name,
                            state.config.sync_timeout.as_secs()
                        );
                        return me.finish_with_error(DispatchError::Failed(why)).await;
                    }
                    // Past its TTL a task changes without an event: read what it became.
                    () = tokio::time::sleep_until(expires.into()) => Some(TaskEvent::Resync),
                };
                match event {
                    None => {
                        return me
                            .finish_with_error(DispatchError::Failed(
                                "the gateway is shutting down".into(),
                            ))
                            .await;
                    }
                    Some(TaskEvent::Changed(rec)) => Arc::unwrap_or_clone(rec),
                    Some(TaskEvent::Resync) => {
                        match state.store.tasks().get(&me.f.task_id, &me.f.owner).await {
                            Ok(Some(rec)) => rec,
                            Ok(None) => {
                                return me
                                    .finish_with_error(DispatchError::Failed(
                                        "Task expired before completion".into(),
                                    ))
                                    .await;
                            }
                            Err(e) => {
                                tracing::warn!(task.id = %me.f.task_id, error = %e, "cannot re-read the task");
                                expires = Instant::now() + Duration::from_secs(1);
                                continue;
                            }
                        }
                    }
                }
            }
        };
        if let Some(deadline_ms) = rec.deadline_ms() {
            let left = u64::try_from(deadline_ms.saturating_sub(now_millis())).unwrap_or(0);
            expires = Instant::now() + Duration::from_millis(left + 10);
        }
        if let Err(stop) = me.on_record(&rec).await {
            return stop;
        }
    }
}
