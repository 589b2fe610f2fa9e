//! One call of an upstream tool, run inside our task.
//!
//! - `tools/call` goes out with a `progressToken`; `notifications/progress` for it becomes
//!   the task's status message (`progress 2/5`, with the upstream's message when it sends
//!   one), only when it changed and at most four times a second.
//! - A server→client request (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`) becomes one of our task's input requests under the key
//!   `KIND-N` (`elicitation-1`, `sampling-2`, `roots-1`: the Nth request of that kind in
//!   this call), and the client's answer
//!   goes back as the JSON-RPC response. The key is the same when a takeover replays the
//!   call, so an answered question is not asked twice ([`mcp_tasks_worker::Tool`] on replay).
//! - A tool whose listing says `execution.taskSupport: "required"` is called with a
//!   `task` (2025-11-25): the upstream answers with its task, whose status messages
//!   (`notifications/tasks/status` and `tasks/get`, polled at its `pollInterval`) are
//!   mirrored, while `tasks/result` waits for the result and carries the upstream's input
//!   requests. Tools that only allow a task are called plainly.
//! - When our task is cancelled, times out or the run is dropped, [`Call`]'s `Drop` sends
//!   `notifications/cancelled` for every request still unanswered and `tasks/cancel` for a
//!   running upstream task, then closes that session (late messages of the abandoned call
//!   must not reach the next one).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR, METHOD_NOT_FOUND};
use mcp_tasks_protocol::tasks::InputRequest;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::our_result;
use super::session::{Incoming, Lease, Pending, Pool, RpcError};
use crate::{AbortOnDrop, STATUS_CHARS, report, sleep_or_never};
use mcp_tasks_worker::{CallToolResult, TaskContext, ToolError};

/// Bounds on how often an upstream task is polled with `tasks/get`.
const POLL_MIN: Duration = Duration::from_millis(250);
const POLL_MAX: Duration = Duration::from_secs(5);
/// Time given to `tasks/cancel` on the way out.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How to call one upstream tool.
pub(super) struct Remote {
    /// The entry's name, for messages.
    pub(super) upstream: String,
    /// The tool's name upstream.
    pub(super) tool: String,
    /// The upstream runs it only as a task.
    pub(super) task_required: bool,
    pub(super) pool: Arc<Pool>,
    /// The limit and how the catalog wrote it.
    pub(super) timeout: Option<Arc<(Duration, String)>>,
}

impl Remote {
    pub(super) async fn run(
        &self,
        ctx: TaskContext,
        args: Value,
    ) -> Result<CallToolResult, ToolError> {
        // Transport failures are retryable under the entry's `retry`; without attempts left
        // they fail the task as before (-32603 with the same message).
        let lease = self.pool.lease().await.map_err(|e| {
            ToolError::retryable(format!("upstream {} cannot start: {e}", self.upstream))
        })?;
        let (status, latest) = watch::channel(String::new());
        let _reporter = AbortOnDrop(tokio::spawn(report(ctx.clone(), latest)));
        let mut call = Call {
            upstream: self.upstream.clone(),
            lease,
            outstanding: Vec::new(),
            task: None,
            status,
            ctx: ctx.clone(),
            asked: [0; 3],
        };
        let limit = self.timeout.as_ref().map(|t| t.0);
        tokio::select! {
            r = call.drive(&self.tool, args, self.task_required) => r,
            () = sleep_or_never(limit) => {
                let written = self.timeout.as_ref().map(|t| t.1.as_str()).unwrap_or_default();
                Err(ToolError::internal(format!(
                    "upstream {} timed out after {written}", self.upstream
                )))
            }
            () = ctx.cancelled() => Err(ToolError::Stopped),
        }
        // `call` drops here: anything still running upstream is cancelled.
    }
}

/// One call in progress; dropping it cancels what still runs upstream.
struct Call {
    upstream: String,
    lease: Lease,
    /// Our requests not yet answered (their ids).
    outstanding: Vec<i64>,
    /// The upstream's task for this call, while it runs.
    task: Option<String>,
    status: watch::Sender<String>,
    ctx: TaskContext,
    /// Server→client requests seen so far, per method (numbers the input keys).
    asked: [u32; 3],
}

impl Call {
    async fn drive(
        &mut self,
        tool: &str,
        args: Value,
        task_required: bool,
    ) -> Result<CallToolResult, ToolError> {
        let token = format!("mcpt-{}", self.ctx.task_id());
        let mut params = json!({
            "name": tool,
            "arguments": args,
            "_meta": {"progressToken": token},
        });
        if task_required {
            params["task"] = json!({});
        }
        let pending = self.lease.session().start("tools/call", params).await;
        let value = self.pump(pending, &token, None).await?;
        let Some(task_id) = value
            .get("task")
            .and_then(|t| t.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return our_result(&self.upstream, value);
        };
        // The upstream runs it as its own task: follow it to its result.
        self.task = Some(task_id.clone());
        if let Some(m) = value["task"].get("statusMessage").and_then(Value::as_str) {
            self.show(m);
        }
        let poll = value["task"]
            .get("pollInterval")
            .and_then(Value::as_u64)
            .map_or(Duration::from_secs(1), Duration::from_millis)
            .clamp(POLL_MIN, POLL_MAX);
        let pending = self
            .lease
            .session()
            .start("tasks/result", json!({"taskId": task_id}))
            .await;
        let value = self.pump(pending, &token, Some(poll)).await?;
        self.task = None;
        our_result(&self.upstream, value)
    }

    /// Wait for `pending`'s answer, meanwhile handling what the upstream sends (and, with
    /// `poll`, asking `tasks/get` for the upstream task's status message).
    async fn pump(
        &mut self,
        mut pending: Pending,
        token: &str,
        poll: Option<Duration>,
    ) -> Result<Value, ToolError> {
        self.outstanding.push(pending.id);
        let mut inputs: FuturesUnordered<Boxed<(Value, Result<Value, ErrorObject>)>> =
            FuturesUnordered::new();
        let mut gets: FuturesUnordered<Boxed<(i64, Result<Value, RpcError>)>> =
            FuturesUnordered::new();
        let mut tick = tokio::time::interval(poll.unwrap_or(POLL_MAX));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                answer = pending.wait() => {
                    self.outstanding.retain(|id| *id != pending.id);
                    return answer.map_err(|e| self.error(e));
                }
                Some(event) = self.lease.session().events.recv() => {
                    self.handle(event, token, &mut inputs).await;
                }
                Some((id, answer)) = inputs.next(), if !inputs.is_empty() => {
                    self.lease.session().respond(id, answer).await;
                }
                _ = tick.tick(), if poll.is_some() && gets.is_empty() => {
                    if let Some(task_id) = self.task.clone() {
                        let mut p = self
                            .lease
                            .session()
                            .start("tasks/get", json!({"taskId": task_id}))
                            .await;
                        self.outstanding.push(p.id);
                        gets.push(Box::pin(async move { (p.id, p.wait().await) }));
                    }
                }
                Some((id, got)) = gets.next(), if !gets.is_empty() => {
                    self.outstanding.retain(|o| *o != id);
                    if let Some(m) = got.ok().as_ref().and_then(|t| t.get("statusMessage")).and_then(Value::as_str) {
                        self.show(m);
                    }
                }
            }
        }
    }

    async fn handle(
        &mut self,
        event: Incoming,
        token: &str,
        inputs: &mut FuturesUnordered<Boxed<(Value, Result<Value, ErrorObject>)>>,
    ) {
        match event {
            Incoming::Notification { method, params } => match method.as_str() {
                "notifications/progress" if params.get("progressToken") == Some(&json!(token)) => {
                    if let Some(text) = progress_text(&params) {
                        self.show(&text);
                    }
                }
                "notifications/tasks/status"
                    if self.task.is_some()
                        && params.get("taskId").and_then(Value::as_str) == self.task.as_deref() =>
                {
                    if let Some(m) = params.get("statusMessage").and_then(Value::as_str) {
                        self.show(m);
                    }
                }
                _ => {}
            },
            Incoming::Request {
                id,
                method,
                mut params,
            } => {
                let (kind, n) = match method.as_str() {
                    "elicitation/create" => ("elicitation", 0),
                    "sampling/createMessage" => ("sampling", 1),
                    "roots/list" => ("roots", 2),
                    _ => {
                        let e = ErrorObject::new(
                            METHOD_NOT_FOUND,
                            format!("{method} is not supported"),
                        );
                        self.lease.session().respond(id, Err(e)).await;
                        return;
                    }
                };
                self.asked[n] += 1;
                let key = format!("{kind}-{}", self.asked[n]);
                if let Some(m) = params.as_object_mut() {
                    m.remove("_meta");
                }
                if params.is_null() {
                    params = json!({});
                }
                let request = InputRequest { method, params };
                let ctx = self.ctx.clone();
                inputs.push(Box::pin(async move {
                    let answer = ctx.input(&key, request).await.map_err(|e| match e {
                        ToolError::Protocol(e) => e,
                        ToolError::Stopped => ErrorObject::new(INTERNAL_ERROR, "the task stopped"),
                        // ctx.input never asks for a retry.
                        ToolError::Retryable(r) => ErrorObject::new(INTERNAL_ERROR, r.reason),
                    });
                    (id, answer)
                }));
            }
        }
    }

    /// Offer `message` as the status message (the reporter writes the latest).
    fn show(&self, message: &str) {
        let message: String = message.trim().chars().take(STATUS_CHARS).collect();
        if message.is_empty() {
            return;
        }
        self.status.send_if_modified(|shown| {
            if *shown == message {
                false
            } else {
                *shown = message;
                true
            }
        });
    }

    fn error(&self, e: RpcError) -> ToolError {
        match e {
            RpcError::Error(mut e) => {
                e.message = format!("upstream {}: {}", self.upstream, e.message);
                ToolError::Protocol(e)
            }
            // Never written: the server never saw it, so trying again cannot run it twice.
            RpcError::Unsent(why) => ToolError::retryable(format!(
                "upstream {} closed the connection: {why}",
                self.upstream
            )),
            // Gone mid-call: the server may have received and be running it. As http.rs
            // does for a request that may have been received, it is not sent twice.
            RpcError::Closed(why) => ToolError::internal(format!(
                "upstream {} closed the connection during the call: {why}",
                self.upstream
            )),
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.outstanding.is_empty() && self.task.is_none() {
            self.lease.finish();
            return;
        }
        let Some(session) = self.lease.take() else {
            return;
        };
        let ids = std::mem::take(&mut self.outstanding);
        let task = self.task.take();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            for id in ids {
                session
                    .notify(
                        "notifications/cancelled",
                        json!({"requestId": id, "reason": "the task was cancelled"}),
                    )
                    .await;
            }
            if let Some(task_id) = task {
                let _ = tokio::time::timeout(
                    CANCEL_WAIT,
                    session.request("tasks/cancel", json!({"taskId": task_id})),
                )
                .await;
            }
            session.close().await;
        });
    }
}

/// `progress 2/5`, or `MESSAGE (2/5)` when the upstream sent a message.
fn progress_text(params: &Value) -> Option<String> {
    let number = |v: &Value| -> Option<String> {
        let f = v.as_f64()?;
        Some(if f.fract() == 0.0 && f.abs() < 1e15 {
            format!("{}", f as i64)
        } else {
            format!("{f}")
        })
    };
    let progress = number(params.get("progress")?)?;
    let done = match params.get("total").and_then(number) {
        Some(total) => format!("{progress}/{total}"),
        None => progress,
    };
    Some(match params.get("message").and_then(Value::as_str) {
        Some(m) if !m.trim().is_empty() => format!("{} ({done})", m.trim()),
        _ => format!("progress {done}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reads_as_a_status_message() {
        let text = |v: Value| progress_text(&v);
        assert_eq!(
            text(json!({"progress": 2, "total": 5})).as_deref(),
            Some("progress 2/5")
        );
        assert_eq!(
            text(json!({"progress": 0.5})).as_deref(),
            Some("progress 0.5")
        );
        assert_eq!(
            text(json!({"progress": 3, "total": 10, "message": "indexing"})).as_deref(),
            Some("indexing (3/10)")
        );
        assert_eq!(text(json!({"total": 10})), None);
    }
}
