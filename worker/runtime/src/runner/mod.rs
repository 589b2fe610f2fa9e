//! The job loop: read jobs with `XREADGROUP` as concurrency slots allow, run each handler
//! with a [`TaskContext`], and finish the task with one script that also acknowledges and
//! deletes the stream entry.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mcp_tasks_shared::metrics;
use mcp_tasks_shared::sync::lock;
use mcp_tasks_store::events::EventHub;
use mcp_tasks_store::{Delivery, READ_BLOCK, Store};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::claims::Claims;
use crate::strikes::StrikeWatch;
use crate::tool::Tool;

mod admit;
mod guest;
mod job;
mod monitor;
mod outcome;
pub(crate) mod share;

use share::Slots;

/// Most jobs taken in one read.
const MAX_BATCH: usize = 64;

/// How long one sweep holds the fleet-wide sweep lease. Short: a holder that keeps finding
/// abandoned jobs extends it only while it has free slots; when it has none, the lease lapses
/// and a worker with room (a fresh replacement, say) sweeps instead.
const SWEEP_LEASE: Duration = Duration::from_millis(250);

/// How long a run goes unwatched (see [`monitor`]).
const WATCH_AFTER: Duration = Duration::from_millis(20);

/// How long a fresh job runs before it takes its fence (see `run_job`).
const START_AFTER: Duration = Duration::from_millis(20);

/// The oldest entry (ms since its task was created) that may run before its start script.
const YOUNG_MS: i64 = 100;

/// How often a running job's task is re-read without events (expiry publishes nothing).
const RECHECK_EVERY: Duration = Duration::from_secs(10);

/// A tool's fleet-wide limits.
pub(crate) struct Limits {
    /// `max_running`.
    pub(crate) max_running: Option<u32>,
    /// The argument counted by (`concurrency_key`).
    pub(crate) key: Option<String>,
    /// `rate`.
    pub(crate) rate: Option<crate::tool::Rate>,
}

pub(crate) struct Runner {
    pub(crate) store: Store,
    pub(crate) hub: EventHub,
    pub(crate) tools: HashMap<String, Arc<dyn Tool>>,
    pub(crate) queues: Vec<String>,
    pub(crate) consumer: String,
    /// The concurrency slots, counted per owner for the fair share.
    pub(crate) slots: Slots,
    pub(crate) tracker: TaskTracker,
    pub(crate) claims: Claims,
    /// Claim lifetime without renewal (`MCPT_LEASE`).
    pub(crate) lease: Duration,
    /// Starts allowed per job (`MCPT_MAX_DELIVERIES`).
    pub(crate) max_deliveries: u32,
    /// Largest result stored (`MCPT_MAX_RESULT_BYTES`), unless the tool sets its own.
    pub(crate) max_result_bytes: usize,
    /// Each tool's own `max_result_bytes`.
    pub(crate) result_limits: HashMap<String, usize>,
    /// `MCPT_LIMIT_STORED_BYTES` for authenticated owners, and for the anonymous one.
    pub(crate) stored_bytes: u64,
    pub(crate) stored_bytes_anonymous: u64,
    /// Input requests allowed per task (`MCPT_MAX_INPUT_REQUESTS`).
    pub(crate) max_input_requests: u32,
    /// The kill switch's strikes, and the jobs running here.
    pub(crate) strikes: Arc<StrikeWatch>,
    /// The retry policy of each tool that has one.
    pub(crate) retries: HashMap<String, crate::tool::RetryPolicy>,
    /// Each tool's dead-letter policy (a tool not here: the default).
    pub(crate) dead_letters: HashMap<String, crate::tool::DeadLetterPolicy>,
    /// At most this many dead letters per stream (`MCPT_DEAD_LETTERS_MAX`).
    pub(crate) dead_letters_max: u32,
    /// The concurrency and rate limits of each tool that has one.
    pub(crate) limits: HashMap<String, Limits>,
    /// The limit slots this worker's runs hold (limit, task id), renewed with the claims.
    pub(crate) slots_held: Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
    /// Woken when this worker puts a job in a delayed set, so the loop moving due jobs
    /// (`lib.rs`) looks again at once rather than after its longest sleep.
    pub(crate) due_wake: Arc<tokio::sync::Notify>,
}

impl Runner {
    /// Read and dispatch jobs until `shutdown` fires. Every job is given a slot before it
    /// is read or reclaimed, so nothing sits delivered but unrenewed waiting for one; and
    /// jobs abandoned by a dead worker are taken before new ones.
    pub(crate) async fn read_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let mut reader = None;
        let mut backoff = Duration::from_millis(100);
        let sweep_every = (self.lease / 3).clamp(Duration::from_secs(1), Duration::from_secs(5));
        let mut next_sweep = Instant::now();
        let mut cursors: HashMap<String, String> = HashMap::new();
        while !shutdown.is_cancelled() {
            let first = tokio::select! {
                () = shutdown.cancelled() => break,
                p = self.slots.semaphore.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            };
            let mut permits = vec![first];
            while permits.len() < MAX_BATCH {
                match self.slots.semaphore.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            if Instant::now() >= next_sweep {
                // While a sweep finds abandoned jobs, sweep again with the next free slots
                // before taking new jobs: interrupted work has waited longest.
                let more = self.sweep(&mut permits, &mut cursors, SWEEP_LEASE).await;
                next_sweep = if more {
                    Instant::now()
                } else {
                    Instant::now() + sweep_every
                };
                if permits.is_empty() {
                    continue;
                }
            }
            if reader.is_none() {
                match self.store.jobs().reader().await {
                    Ok(r) => reader = Some(r),
                    Err(e) => {
                        tracing::warn!(error = %e, "worker cannot reach redis; pausing");
                        pause(&shutdown, &mut backoff).await;
                        continue;
                    }
                }
            }
            let Some(r) = reader.as_mut() else { continue };
            // With every free slot in hand, take what is there without waiting; wait only
            // holding one slot, so a parked task can resume while the read blocks.
            let mut read = r
                .read(&self.queues, &self.consumer, permits.len(), None)
                .await;
            if matches!(&read, Ok(found) if found.is_empty()) {
                permits.truncate(1);
                read = tokio::select! {
                    () = shutdown.cancelled() => break,
                    r = r.read(&self.queues, &self.consumer, 1, Some(READ_BLOCK)) => r,
                };
            }
            let deliveries = match read {
                Ok(d) => {
                    backoff = Duration::from_millis(100);
                    d
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading jobs failed; pausing");
                    reader = None;
                    if let Err(e) = self.store.jobs().ensure_groups(&self.queues).await {
                        tracing::debug!(error = %e, "groups not ensured yet");
                    }
                    pause(&shutdown, &mut backoff).await;
                    continue;
                }
            };
            for d in deliveries {
                let Some(permit) = permits.pop() else {
                    tracing::error!("more jobs delivered than slots in hand");
                    break;
                };
                if self.defer(&d).await {
                    // Moved behind another owner's job: the slot reads on.
                    drop(permit);
                    continue;
                }
                self.dispatch(d, permit);
            }
        }
    }

    /// Take over jobs whose worker stopped renewing them, one slot in `permits` each; one
    /// worker per queue sweeps at a time (the sweep lease), with a bounded count. Returns
    /// whether more abandoned jobs may be waiting.
    async fn sweep(
        self: &Arc<Self>,
        permits: &mut Vec<OwnedSemaphorePermit>,
        cursors: &mut HashMap<String, String>,
        hold: Duration,
    ) -> bool {
        let mut more = false;
        // One stream per queue on one Redis; one per shard of each queue in a cluster.
        let streams: Vec<(&String, String)> = self
            .queues
            .iter()
            .flat_map(|q| {
                self.store
                    .jobs()
                    .queue_streams(q)
                    .into_iter()
                    .map(move |s| (q, s))
            })
            .collect();
        for (queue, stream) in &streams {
            if permits.is_empty() {
                return true;
            }
            match self
                .store
                .jobs()
                .take_sweep_lease(queue, stream, &self.consumer, hold)
                .await
            {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot take the sweep lease");
                    continue;
                }
            }
            let cursor = cursors.get(stream).map_or("0-0", String::as_str).to_owned();
            let (found, next) = match self
                .store
                .jobs()
                .reclaim(
                    queue,
                    stream,
                    &self.consumer,
                    self.lease,
                    &cursor,
                    permits.len(),
                )
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(queue.name = %queue, error = %e, "sweep failed");
                    continue;
                }
            };
            if !found.is_empty() {
                metrics::get()
                    .deliveries_reclaimed
                    .add(found.len() as u64, &metrics::queue_attrs(queue));
            }
            let asked = permits.len();
            more |= !found.is_empty() && (found.len() >= asked || next != "0-0");
            cursors.insert(stream.clone(), next);
            for d in found {
                let Some(permit) = permits.pop() else {
                    return true;
                };
                tracing::info!(task.id = %d.task_id, queue.name = %queue, "reclaimed a job its worker abandoned");
                self.dispatch(d, permit);
            }
        }
        more
    }

    /// Fair share (see [`share`]): whether fresh job `d` was moved to the end of its queue
    /// because its owner holds its share of the slots and another owner's job waits.
    async fn defer(&self, d: &Delivery) -> bool {
        let shares = &self.slots.shares;
        if !shares.bounded() || !d.fresh || !shares.full(&d.owner) || shares.quiet(&d.stream) {
            return false;
        }
        match self
            .store
            .jobs()
            .defer(d, share::WINDOW, &shares.full_owners())
            .await
        {
            Ok(true) => {
                tracing::debug!(task.id = %d.task_id, "moved behind another principal's job (fair share)");
                true
            }
            Ok(false) => {
                shares.note_quiet(&d.stream);
                false
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot defer a job; running it");
                false
            }
        }
    }

    /// Run a delivered (or reclaimed) job in its own task, holding its claim meanwhile; or,
    /// when its tool is struck, hold it (off the stream until restored) and free the slot.
    /// A job this worker still runs is left to that run first: holding it would take its
    /// entry off the stream under the running call.
    fn dispatch(self: &Arc<Self>, d: Delivery, permit: OwnedSemaphorePermit) {
        let parked = Arc::new(AtomicBool::new(false));
        let (stream, entry) = (d.stream.clone(), d.entry.clone());
        if !self.claims.hold(
            &stream,
            &entry,
            &self.store.task_key(&d.task_id, &d.owner),
            parked.clone(),
        ) {
            tracing::debug!(task.id = %d.task_id, "reclaimed a job this worker still runs; keeping the run");
            return;
        }
        let Some(d) = self.hold_if_struck(d) else {
            drop(permit);
            return;
        };
        let slot = self.slots.slot(permit, &d.owner);
        let span = tracing::info_span!(
            "job",
            task.id = %d.task_id,
            queue.name = %d.queue,
            tool.name = tracing::field::Empty,
            queue.wait_ms = tracing::field::Empty,
        );
        // One trace from tools/call through the queue to this run.
        if let Ok(job) = &d.job
            && let Some(parent) = &job.traceparent
        {
            mcp_tasks_shared::telemetry::set_parent(&span, parent);
        }
        let this = self.clone();
        let handle = self
            .tracker
            // Boxed: a run's future is large, and a task moves its future (and its output
            // over it) by value when spawned and when it ends.
            .spawn(Box::pin(this.run_job(d, slot, parked)).instrument(span));
        self.claims
            .set_abort(&stream, &entry, handle.abort_handle());
    }

    /// When `d`'s tool is struck, hold its job (off the stream until restored) and release
    /// its claim, which the caller took (`None`); else give `d` back.
    fn hold_if_struck(self: &Arc<Self>, d: Delivery) -> Option<Delivery> {
        let Some(strike) = d
            .job
            .as_ref()
            .ok()
            .and_then(|job| self.strikes.matching(&job.tool, &job.args))
        else {
            return Some(d);
        };
        let message = format!(
            "held: {} is struck; it runs when restored (`{}`)",
            strike.describe(),
            restore_command(&strike)
        );
        let this = self.clone();
        self.tracker.spawn(async move {
            match this.store.controls().hold(&d, &message).await {
                Ok(true) => {
                    tracing::info!(task.id = %d.task_id, "job held: its tool is struck")
                }
                Ok(false) => {}
                // Still pending for this worker: the sweep hands it out again.
                Err(e) => {
                    tracing::warn!(task.id = %d.task_id, error = %e, "cannot hold a struck job")
                }
            }
            this.claims.release(&d.stream, &d.entry);
        });
        None
    }

    /// Renew this worker's claims every third of the lease, until `stop`.
    pub(crate) async fn renew_loop(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.lease / 3);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {
                    self.claims.renew(&self.store, &self.consumer).await;
                    let held: Vec<(String, String)> =
                        lock(&self.slots_held).iter().cloned().collect();
                    if let Err(e) = self.store.limits().renew_slots(&held, self.lease).await {
                        tracing::warn!(error = %e, "cannot renew concurrency slots");
                    }
                }
            }
        }
    }
}

async fn pause(shutdown: &CancellationToken, backoff: &mut Duration) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = tokio::time::sleep(*backoff) => {}
    }
    *backoff = (*backoff * 2).min(Duration::from_secs(5));
}

/// The command that lifts `strike`, quoted for a shell where an argument needs it.
fn restore_command(strike: &mcp_tasks_store::strikes::Strike) -> String {
    let mut cmd = format!("mcp-tasks restore {}", shell_word(&strike.tool));
    if let Some((arg, value)) = &strike.when {
        cmd.push_str(" --where ");
        cmd.push_str(&shell_word(&format!("{arg}={value}")));
    }
    cmd
}

/// `word` as one shell word: as is when it is plain, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
