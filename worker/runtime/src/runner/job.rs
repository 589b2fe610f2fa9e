//! One job's run: resolve its tool, take its fence, run the handler under a monitor of the
//! task, and settle the outcome with one finish script.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_shared::metrics;
use mcp_tasks_store::events::{EventHub, TaskEvent, Watch};
use mcp_tasks_store::record::EXPIRED;
use mcp_tasks_store::stored::{self, Stored};
use mcp_tasks_store::{Delivery, Finish, Job, Start, Store, TaskRecord, Write};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::CallToolResult;
use crate::context::{ContextParts, Fence, TaskContext};
use crate::tool::{Retry, Tool, ToolError, ToolFuture};

use super::*;

impl Runner {
    /// Run one delivered job to its end: [`Runner::resolve`] its tool, [`Runner::run`] it,
    /// turn the outcome into a [`Finish`] ([`Runner::finish_of`]) and write that
    /// ([`Runner::settle`]).
    pub(super) async fn run_job(
        self: Arc<Self>,
        mut d: Delivery,
        slot: share::Slot,
        parked: Arc<AtomicBool>,
    ) {
        let _held = HeldGuard(self.clone(), d.stream.clone(), d.entry.clone());
        let started = Instant::now();
        let _running = metrics::RunningJob::start(&d.queue);
        record_queue_wait(&d);
        let Some((tool, inputs)) = self.resolve(&mut d).await else {
            return;
        };
        tracing::Span::current().record("tool.name", d.tool());
        let _struck_by = self
            .strikes
            .running(&d.task_id, &d.owner, d.tool(), &inputs.args);
        // A concurrency limit: a slot first, or wait (parked, this worker's slot freed).
        let Some(_limit_slot) = self.limit_slot(&d, &inputs.args).await else {
            return;
        };
        // `_live` lasts until the outcome is written, as the job's slot does.
        let Some((fence, outcome, _live)) = self.run(&d, inputs, tool.as_ref(), slot, parked).await
        else {
            return;
        };
        let outcome = match outcome {
            Err(ToolError::Retryable(retry)) => {
                match self.try_again(&d, fence, d.tool(), *retry).await {
                    Some(last) => last,
                    None => return,
                }
            }
            other => other,
        };
        let Some(finish) = self.finish_of(&d, fence, outcome).await else {
            return;
        };
        self.settle(&d, fence, &finish).await;
        tracing::info!(
            target: "access",
            duration_ms = started.elapsed().as_millis() as u64,
            "job finished"
        );
    }

    /// The tool that runs the job and what the run consumes of it (moved out of the
    /// delivery, not copied: the rest of the job's life reads only its tool's name);
    /// `None` when the job or its tool is missing, after failing the task. It is started
    /// first, so the usual checks (cancelled, expired, too many runs) apply before it
    /// fails.
    async fn resolve(&self, d: &mut Delivery) -> Option<(Arc<dyn Tool>, Inputs)> {
        let why = match &mut d.job {
            Ok(job) => match self.tools.get(&job.tool) {
                Some(tool) => return Some((tool.clone(), Inputs::take(job))),
                None => format!("no worker here runs tool {}", job.tool),
            },
            Err(why) => format!("job could not be read: {why}"),
        };
        if let Some((fence, _)) = self.start(d).await {
            let finish = failed(ErrorObject::new(INTERNAL_ERROR, why));
            self.settle(d, fence, &finish).await;
        }
        None
    }

    /// Call the tool and wait for its outcome, with the fence it ran under (`0`: it ended
    /// before taking one). `None` when the start finds nothing to run.
    ///
    /// A fresh job runs before it takes its fence: most runs end within [`START_AFTER`],
    /// and their finish script makes the start's checks itself (saving a script and a
    /// round trip per task). A longer run, or any write it makes, starts it. Only a young
    /// entry: one that waited in the queue may have been cancelled or have expired
    /// meanwhile, and must not run before the start script has looked.
    async fn run(
        &self,
        d: &Delivery,
        inputs: Inputs,
        tool: &dyn Tool,
        slot: share::Slot,
        parked: Arc<AtomicBool>,
    ) -> Option<(u64, Outcome, Live)> {
        let wanted = Arc::new(tokio::sync::Notify::new());
        let (fence_tx, fence) = Fence::new(wanted.clone());
        let (latest_tx, latest_rx) = watch::channel(None);
        let stop = CancellationToken::new();
        let ctx = TaskContext::new(ContextParts {
            store: self.store.clone(),
            task_id: d.task_id.clone(),
            fence,
            caps: inputs.caps,
            pre: inputs.pre,
            latest: latest_rx.clone(),
            stop: stop.clone(),
            slot,
            slots: self.slots.clone(),
            parked,
            queue: d.queue.clone(),
            owner: d.owner.clone(),
            max_inputs: self.max_input_requests,
        });
        let mut call = tool.call(ctx, inputs.args);
        // Moved to the end of its queue (fair share): as old as when it was first queued.
        // A job back from a retry's wait has a fence already: it starts first.
        let young = d.attempt == 1 && d.queued_at().is_some_and(|c| now_millis() - c <= YOUNG_MS);
        let mut early = None;
        if d.fresh && young {
            tokio::select! {
                r = &mut call => early = Some(r),
                () = tokio::time::sleep(START_AFTER) => {}
                () = wanted.notified() => {}
            }
        }
        let (fence, outcome) = match early {
            Some(outcome) => (0, outcome),
            None => {
                let (fence, deadline_ms) = self.start(d).await?;
                fence_tx.send_replace(Some(fence));
                let _monitor = AbortOnDrop(tokio::spawn(monitor(
                    self.store.clone(),
                    self.hub.clone(),
                    (d.task_id.clone(), d.owner.clone()),
                    fence,
                    // An optimistic run already waited START_AFTER unwatched.
                    if d.fresh && young {
                        Duration::ZERO
                    } else {
                        WATCH_AFTER
                    },
                    latest_tx,
                    stop.clone(),
                )));
                let outcome = tokio::select! {
                    r = &mut call => r,
                    () = stop.cancelled() => Err(ToolError::Stopped),
                    () = until(deadline_ms) => Err(ToolError::Protocol(ErrorObject::new(INTERNAL_ERROR, EXPIRED))),
                };
                (fence, outcome)
            }
        };
        let live = Live {
            _call: call,
            _fence: fence_tx,
            _stop: stop,
        };
        Some((fence, outcome, live))
    }

    /// What to write for `outcome`; `None` when nothing is (the entry released, or left
    /// pending for another worker).
    async fn finish_of(&self, d: &Delivery, fence: u64, outcome: Outcome) -> Option<Finish> {
        match outcome {
            Ok(result) => Some(self.completed(d, result).await),
            Err(ToolError::Protocol(error)) => Some(failed(error)),
            // run_job turned these into a wait or their last outcome already.
            Err(ToolError::Retryable(retry)) => {
                Some(failed(ErrorObject::new(INTERNAL_ERROR, retry.reason)))
            }
            // Why the run stopped is read from the task itself.
            Err(ToolError::Stopped) => match self.store.get_task(&d.task_id, &d.owner).await {
                // Gone (expired) or terminal (cancelled while parked): release the entry.
                Ok(None) => {
                    self.release(d).await;
                    None
                }
                Ok(Some(rec)) if rec.is_terminal() => {
                    self.release(d).await;
                    None
                }
                Ok(Some(rec)) if rec.cancel_requested && rec.fence == fence => {
                    Some(Finish::Cancelled)
                }
                // Taken over by another worker, or stopped by this worker's shutdown: write
                // nothing; the job stays pending in the stream.
                Ok(Some(_)) | Err(_) => {
                    tracing::info!(task.id = %d.task_id, "run stopped without a result; job left pending");
                    None
                }
            },
        }
    }

    /// A tool's result as stored, or the failure when it is too large, would take its
    /// owner past `MCPT_LIMIT_STORED_BYTES`, or cannot be encoded.
    async fn completed(&self, d: &Delivery, result: CallToolResult) -> Finish {
        let finish = self.encoded(result);
        let Finish::Completed(json) = &finish else {
            return finish;
        };
        let limit = if d.owner == mcp_tasks_protocol::meta::ANONYMOUS_OWNER {
            self.stored_bytes_anonymous
        } else {
            self.stored_bytes
        };
        if limit == 0 {
            return finish;
        }
        // Kept as long as the task: counted until it expires.
        let lapses = match self.store.task_expiry(&d.task_id, &d.owner).await {
            Ok(Some(at)) => at,
            // Gone: the finish finds that out and stores nothing.
            Ok(None) => return finish,
            Err(e) => {
                tracing::warn!(error = %e, "cannot count the result's bytes; storing it");
                return finish;
            }
        };
        match self
            .store
            .count_stored(&d.owner, json.len(), lapses, limit, Stored::Result)
            .await
        {
            Ok(stored::Counted::Refused(total)) => failed(ErrorObject::new(
                INTERNAL_ERROR,
                format!(
                    "the tool's result is {} bytes, and this caller's tasks already keep {total} of at most {limit} (MCPT_LIMIT_STORED_BYTES); it was not stored",
                    json.len()
                ),
            )),
            Ok(stored::Counted::Yes(_)) => finish,
            Err(e) => {
                tracing::warn!(error = %e, "cannot count the result's bytes; storing it");
                finish
            }
        }
    }

    /// A tool's result as stored, or the failure when it is too large or cannot be encoded.
    fn encoded(&self, result: CallToolResult) -> Finish {
        match result.to_json_with_server_info() {
            // Not stored: a result this large would fill Redis and every reader.
            Ok(json) if json.len() > self.max_result_bytes => failed(ErrorObject::new(
                INTERNAL_ERROR,
                format!(
                    "the tool's result is {} bytes; at most {} are stored (MCPT_MAX_RESULT_BYTES)",
                    json.len(),
                    self.max_result_bytes
                ),
            )),
            Ok(json) => Finish::Completed(json),
            Err(e) => failed(ErrorObject::new(
                INTERNAL_ERROR,
                format!("result could not be encoded: {e}"),
            )),
        }
    }

    /// The fleet-wide slot a limited tool's run needs: `Some` to run (holding the slot, if
    /// any, until dropped), `None` when the job waits (parked in its delayed set) or Redis is
    /// away (left pending: the sweep brings it back).
    async fn limit_slot(&self, d: &Delivery, args: &Value) -> Option<Option<LimitSlot>> {
        let Some(limits) = self.limits.get(d.tool()) else {
            return Some(None);
        };
        let value = limits.key.as_ref().map(|arg| match args.get(arg) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        });
        let limit = mcp_tasks_store::keys::limit_name(d.tool(), value.as_deref());
        // The rate first: a start it counts is kept (a delivery again counts once).
        if let Some(rate) = limits.rate {
            match self
                .store
                .rate_start(&limit, rate.starts, rate.per, &d.task_id)
                .await
            {
                Ok(None) => {}
                Ok(Some(wait)) => {
                    let message = format!(
                        "waiting for the rate limit ({} per {})",
                        rate.starts,
                        short_duration(rate.per)
                    );
                    if let Err(e) = self.store.park(d, &message, Some(wait)).await {
                        tracing::warn!(error = %e, "cannot park a rate-limited job; it stays pending");
                    }
                    self.due_wake.notify_one();
                    return None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot count a rate-limited start; the job stays pending");
                    return None;
                }
            }
        }
        let Some(slots) = limits.max_running else {
            return Some(None);
        };
        let arrival = d.queued_at().unwrap_or_else(now_millis);
        match self
            .store
            .acquire_slot(&limit, slots, &d.task_id, arrival, self.lease)
            .await
        {
            Ok(mcp_tasks_store::limits::Slot::Taken { .. }) => {
                let id = (limit, d.task_id.clone());
                lock(&self.slots_held).insert(id.clone());
                Some(Some(LimitSlot {
                    store: self.store.clone(),
                    held: self.slots_held.clone(),
                    id,
                }))
            }
            Ok(mcp_tasks_store::limits::Slot::Wait { running }) => {
                let message = format!("waiting for a slot ({running} of {slots} running)");
                if let Err(e) = self.store.park(d, &message, None).await {
                    tracing::warn!(error = %e, "cannot park a job waiting for a slot; it stays pending");
                }
                self.due_wake.notify_one();
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot take a concurrency slot; the job stays pending");
                None
            }
        }
    }

    /// A retryable failure: with attempts left under the tool's policy, put the job in its
    /// delayed set (`None`: nothing more to write here); else the outcome the task ends with.
    async fn try_again(
        &self,
        d: &Delivery,
        fence: u64,
        tool: &str,
        retry: Retry,
    ) -> Option<Outcome> {
        let Some(policy) = self.retries.get(tool).filter(|p| d.attempt < p.attempts) else {
            return Some(match retry.last {
                Some(result) => Ok(result),
                None => Err(ToolError::internal(retry.reason)),
            });
        };
        // A run that ended before taking its fence takes it now: the wait is fenced.
        let fence = if fence == 0 {
            self.start(d).await?.0
        } else {
            fence
        };
        let wait = policy.wait_after(d.attempt, retry.after);
        let next = d.attempt + 1;
        let message = format!(
            "retrying in {} (attempt {next} of {}): {}",
            short_duration(wait),
            policy.attempts,
            retry.reason
        );
        match self.store.retry(d, fence, wait, &message, next).await {
            Ok(Write::Ok) => {
                self.due_wake.notify_one();
                tracing::info!(
                    attempt = d.attempt,
                    wait_ms = wait.as_millis() as u64,
                    "run failed; tried again after a wait"
                );
            }
            Ok(_) => {}
            // Left pending: the sweep runs it again after the lease, a retry all the same.
            Err(e) => {
                tracing::warn!(error = %e, "cannot schedule the retry; the job stays pending")
            }
        }
        None
    }

    /// Take the task's fencing token: `(fence, deadline)`, or `None` when there is nothing
    /// to run (skipped, or Redis away: the job stays pending).
    async fn start(&self, d: &Delivery) -> Option<(u64, Option<i64>)> {
        match self
            .store
            .start(d, &self.consumer, self.max_deliveries)
            .await
        {
            Ok(Start::Run { fence, deadline_ms }) => Some((fence, deadline_ms)),
            Ok(Start::Skip(why)) => {
                tracing::info!(task.id = %d.task_id, reason = %why, "job skipped");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start job; leaving it pending");
                None
            }
        }
    }

    /// Write the terminal state, retrying while Redis is away.
    async fn settle(&self, d: &Delivery, fence: u64, finish: &Finish) {
        let mut backoff = Duration::from_millis(100);
        // Until it is written (or refused): the result must not be lost to an outage. A
        // shutdown ends this with the process after the grace period.
        loop {
            match self.store.finish(d, fence, finish).await {
                Ok(Write::Ok) => {
                    record_finish(d, finish);
                    return;
                }
                Ok(Write::Fenced) => {
                    tracing::warn!(task.id = %d.task_id, "another worker owns this task now; result dropped");
                    return;
                }
                Ok(Write::Gone | Write::Terminal) => return,
                Err(e) => {
                    tracing::warn!(task.id = %d.task_id, error = %e, "cannot finish task; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    async fn release(&self, d: &Delivery) {
        if let Err(e) = self.store.release(d).await {
            tracing::warn!(task.id = %d.task_id, error = %e, "cannot release job entry");
        }
    }
}

/// A concurrency slot held by a run; given back (in the background) when dropped.
struct LimitSlot {
    store: Store,
    held: Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
    id: (String, String),
}

impl Drop for LimitSlot {
    fn drop(&mut self) {
        lock(&self.held).remove(&self.id);
        let (store, (limit, task)) = (self.store.clone(), self.id.clone());
        tokio::spawn(async move {
            // Lost: the slot lapses with its lease.
            if let Err(e) = store.free_slot(&limit, &task).await {
                tracing::warn!(error = %e, "cannot give a concurrency slot back; it lapses with its lease");
            }
        });
    }
}

/// `250ms`, `4s`, `1m30s`: a wait as the status message says it.
fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}s", (ms + 500) / 1000),
        _ => {
            let s = (ms + 500) / 1000;
            if s.is_multiple_of(60) {
                format!("{}m", s / 60)
            } else {
                format!("{}m{}s", s / 60, s % 60)
            }
        }
    }
}

/// The stream entry id's time part: when the create script queued the job (Redis clock).
fn entry_millis(entry: &str) -> Option<i64> {
    entry.split_once('-')?.0.parse().ok()
}

/// What a tool's call came to.
type Outcome = Result<CallToolResult, ToolError>;

/// What stays alive until a run's outcome is written: the tool's call (its context holds
/// the job's slot) and the fence and stop handles its context watches.
struct Live {
    _call: ToolFuture,
    _fence: watch::Sender<Option<u64>>,
    _stop: CancellationToken,
}

/// Record how long a fresh job waited in its queue.
fn record_queue_wait(d: &Delivery) {
    if d.fresh
        && let Some(created) = d.queued_at()
    {
        let wait_ms = (now_millis() - created).max(0);
        tracing::Span::current().record("queue.wait_ms", wait_ms);
        metrics::get()
            .queue_wait
            .record(wait_ms as f64 / 1000.0, &metrics::queue_attrs(&d.queue));
    }
}

/// Count a task this worker ended, and how long it took from its call.
fn record_finish(d: &Delivery, finish: &Finish) {
    let status = match finish {
        Finish::Completed(_) => "completed",
        Finish::Failed { .. } => "failed",
        Finish::Cancelled => "cancelled",
    };
    let attrs = metrics::finish_attrs(d.tool(), status);
    let m = metrics::get();
    m.tasks_finished.add(1, &attrs);
    let run_ms = entry_millis(&d.entry).map(|created| (now_millis() - created).max(0) as u64);
    if let Some(ms) = run_ms {
        m.task_duration.record(ms as f64 / 1000.0, &attrs);
    }
    mcp_tasks_shared::tally::finished(status, &d.queue, run_ms);
}

/// What a run consumes of its job: its arguments, the call's client capabilities and its
/// MRTR answers, moved out of the delivery rather than deep-copied per run.
struct Inputs {
    args: Value,
    caps: Box<serde_json::value::RawValue>,
    pre: serde_json::Map<String, Value>,
}

impl Inputs {
    /// Take them out of `job`, which keeps its tool's name (all a run reads of it later:
    /// a retry or a release requeues the stream entry, not this copy).
    fn take(job: &mut Job) -> Inputs {
        Inputs {
            args: std::mem::take(&mut job.args),
            caps: std::mem::replace(&mut job.caps, serde_json::value::RawValue::NULL.to_owned()),
            pre: std::mem::take(&mut job.pre),
        }
    }
}

fn failed(error: ErrorObject) -> Finish {
    let message = error.message.clone();
    let error = serde_json::to_string(&error)
        .unwrap_or_else(|_| format!(r#"{{"code":{INTERNAL_ERROR},"message":"internal error"}}"#));
    Finish::Failed { error, message }
}

/// Resolves a little after `deadline_ms` (Redis clock, read here by the local one), or never.
/// The finish script then sees the TTL passed and writes the expiry itself (T-52).
async fn until(deadline_ms: Option<i64>) {
    // Clocks of workers and Redis differ a little; the finish script decides by Redis'.
    const SLACK_MS: i64 = 500;
    match deadline_ms {
        Some(deadline) => {
            let wait = (deadline + SLACK_MS - now_millis()).max(0);
            tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
        }
        None => std::future::pending().await,
    }
}

/// Aborts a spawned task when dropped (the run's monitor ends with the run, also when the
/// run itself is aborted at a hand-over).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Releases the job's claim record when its task ends, however it ends.
struct HeldGuard(Arc<Runner>, String, String);

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.0.claims.release(&self.1, &self.2);
    }
}

/// Feed the task's latest state to its context; fire `stop` on cancellation, a terminal
/// state, or another worker taking the task over (a newer fence).
///
/// It subscribes only once the run has lasted [`WATCH_AFTER`]: most runs are shorter, and
/// their subscribe/unsubscribe would be a sixth of their Redis commands. A cancel in that
/// first moment is seen at the subscription's first read.
async fn monitor(
    store: Store,
    hub: EventHub,
    (task_id, owner): (String, String),
    fence: u64,
    unwatched: Duration,
    latest: watch::Sender<Option<TaskRecord>>,
    stop: CancellationToken,
) {
    tokio::time::sleep(unwatched).await;
    let mut retry = Duration::from_millis(100);
    let mut watch: Watch = loop {
        match hub.watch(&task_id).await {
            Ok(w) => break w,
            Err(e) => {
                tracing::debug!(error = %e, "cannot watch task events yet; retrying");
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(Duration::from_secs(2));
            }
        }
    };
    // Read once the subscription is confirmed: later changes all arrive as events, and
    // the store is read again only after a reconnect.
    let mut resync = true;
    loop {
        if resync {
            resync = false;
            match store.get_task(watch.task_id(), &owner).await {
                Ok(Some(rec)) => observe(rec, fence, &latest, &stop, true),
                Ok(None) => {
                    latest.send_replace(None);
                    stop.cancel();
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "re-read failed; retried at the next recheck")
                }
            }
        }
        match tokio::time::timeout(RECHECK_EVERY, watch.recv()).await {
            Ok(Some(TaskEvent::Changed(rec))) => observe(
                std::sync::Arc::unwrap_or_clone(rec),
                fence,
                &latest,
                &stop,
                false,
            ),
            // After a reconnect, or every RECHECK_EVERY: expiry publishes nothing.
            Ok(Some(TaskEvent::Resync)) | Err(_) => resync = true,
            Ok(None) => return,
        }
    }
}

/// Take `rec` as the task's latest state if it is not older than the one held. A re-read
/// (`reread`) is the store's word and is taken even when older: the versions went back
/// because Redis lost writes (a failover to a replica that had not received them), and
/// events from the new primary count up from its version, not ours.
fn observe(
    rec: TaskRecord,
    fence: u64,
    latest: &watch::Sender<Option<TaskRecord>>,
    stop: &CancellationToken,
    reread: bool,
) {
    let held = latest.borrow().as_ref().map(|cur| cur.version);
    if let Some(held) = held.filter(|held| rec.version < *held) {
        if !reread {
            return;
        }
        tracing::warn!(
            task.id = %rec.id,
            held,
            stored = rec.version,
            "the task's stored state is older than one already seen (writes lost in a Redis failover?); going on from the stored one"
        );
    }
    let halt = rec.is_terminal() || rec.cancel_requested || rec.fence > fence;
    latest.send_replace(Some(rec));
    if halt {
        stop.cancel();
    }
}
