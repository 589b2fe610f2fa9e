//! One job's run, start to end: admit it ([`admit`](super::admit)), run the handler under a
//! watch of its task ([`monitor`](super::monitor)), and write what it came to with one
//! finish script ([`outcome`](super::outcome)).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_shared::metrics;
use mcp_tasks_store::Delivery;
use mcp_tasks_store::record::EXPIRED;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::context::{ContextParts, Fence, TaskContext};
use crate::tool::{Tool, ToolError, ToolFuture};

use super::admit::Inputs;
use super::monitor::{AbortOnDrop, monitor, until};
use super::outcome::Outcome;
use super::{Runner, START_AFTER, WATCH_AFTER, YOUNG_MS, share};

impl Runner {
    /// Run one delivered job to its end: [`Runner::resolve`] its tool, [`Runner::run`] it,
    /// turn the outcome into a [`Finish`](mcp_tasks_store::Finish) ([`Runner::finish_of`])
    /// and write that ([`Runner::settle`]).
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
}

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

/// Releases the job's claim record when its task ends, however it ends.
struct HeldGuard(Arc<Runner>, String, String);

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.0.claims.release(&self.1, &self.2);
    }
}
