//! Guest slots (`MCPT_GUEST_SLOTS`): while every one of a worker's slots runs a job, a job
//! whose principal runs nothing on this worker still starts.
//!
//! The fair share ([`share`](super::share)) orders what waits, but it never stops a
//! running tool: a principal alone may fill every slot with hour-long runs, and another
//! principal's job queued after them would wait for the first to end. So a second loop
//! reads the queues, one job at a time and only while every slot is taken:
//! - a job whose owner runs nothing here starts at once on a guest slot;
//! - any other job (its owner already runs here) is moved to the end of its queue when
//!   the job of an owner that runs nothing here waits behind it within
//!   [`WINDOW`](super::share::WINDOW) entries (the fair share's script), so the loop reads
//!   on and reaches that job after at most the jobs in front of it;
//! - else the loop holds it (its claim renewed, as a parked task's) until a slot frees,
//!   looking again every [`LOOK_AGAIN`] for such a job behind it, and for a strike of its
//!   tool (then it is held off the stream at once, as a queued job would be).
//!
//! A principal alone therefore loses nothing (its next job runs in the first slot that
//! frees, as it would have), and the guest slots add at most their number to what runs.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use mcp_tasks_store::Delivery;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{Runner, pause, share};

/// How often the loop looks whether every slot is taken, without Redis.
const FULL_EVERY: Duration = Duration::from_millis(50);

/// How long one read waits for a job (a short block: the slots may free meanwhile).
const READ_WAIT: Duration = Duration::from_millis(200);

/// How often a held job looks again for another owner's job behind it.
const LOOK_AGAIN: Duration = Duration::from_millis(250);

impl Runner {
    /// Read jobs for the guest slots of `guests` until `shutdown` (see the module docs).
    pub(crate) async fn guest_loop(
        self: Arc<Self>,
        guests: Arc<Semaphore>,
        shutdown: CancellationToken,
    ) {
        let mut reader = None;
        let mut backoff = Duration::from_millis(100);
        while !shutdown.is_cancelled() {
            let guest = tokio::select! {
                () = shutdown.cancelled() => break,
                p = guests.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            };
            // While a slot is free (or held by the read loop waiting for a job) the read
            // loop takes the jobs.
            if !self.slots.all_running() {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(FULL_EVERY) => continue,
                }
            }
            if reader.is_none() {
                match self.store.jobs().reader().await {
                    Ok(r) => reader = Some(r),
                    Err(e) => {
                        tracing::debug!(error = %e, "guest slots cannot reach redis; pausing");
                        pause(&shutdown, &mut backoff).await;
                        continue;
                    }
                }
            }
            let Some(r) = reader.as_mut() else { continue };
            let read = tokio::select! {
                () = shutdown.cancelled() => break,
                r = r.read(&self.queues, &self.consumer, 1, Some(READ_WAIT)) => r,
            };
            let Some(d) = (match read {
                Ok(mut found) => {
                    backoff = Duration::from_millis(100);
                    found.pop()
                }
                Err(e) => {
                    tracing::debug!(error = %e, "guest read failed; pausing");
                    reader = None;
                    pause(&shutdown, &mut backoff).await;
                    continue;
                }
            }) else {
                continue;
            };
            if self.slots.shares.runs_nothing(&d.owner) {
                tracing::debug!(task.id = %d.task_id, "started on a guest slot");
                self.dispatch(d, guest);
                continue;
            }
            drop(guest);
            self.pass_on(d, &shutdown).await;
        }
    }

    /// A job read for a guest slot whose owner already runs here: moved behind another
    /// owner's job, or run in the first slot that frees. At shutdown it is left held as a
    /// parked task is, so the hand-over gives it to another worker at once.
    async fn pass_on(self: &Arc<Self>, d: Delivery, shutdown: &CancellationToken) {
        // Held meanwhile: renewed with the running jobs, so its lease never lapses under it.
        let parked = Arc::new(AtomicBool::new(true));
        let task_key = self.store.task_key(&d.task_id, &d.owner);
        if !self.claims.hold(&d.stream, &d.entry, &task_key, parked) {
            return;
        }
        let mut look = tokio::time::interval(LOOK_AGAIN);
        // One wait for the whole time, so it keeps its place in the semaphore's queue.
        let slot = self.slots.semaphore.clone().acquire_owned();
        tokio::pin!(slot);
        let mut d = d;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                p = &mut slot => {
                    let Ok(permit) = p else { return };
                    self.claims.release(&d.stream, &d.entry);
                    if !self.defer(&d).await {
                        self.dispatch(d, permit);
                    }
                    return;
                }
                _ = look.tick() => {
                    // A strike holds a waiting job at once, as it would a queued one.
                    let Some(waiting) = self.hold_if_struck(d) else {
                        return;
                    };
                    d = waiting;
                    if self.behind_guest(&d).await {
                        self.claims.release(&d.stream, &d.entry);
                        return;
                    }
                }
            }
        }
    }

    /// Move `d` to the end of its queue when the job of an owner that runs nothing here
    /// waits behind it; `true` when moved.
    async fn behind_guest(&self, d: &Delivery) -> bool {
        let running = self.slots.shares.running_owners();
        match self.store.jobs().defer(d, share::WINDOW, &running).await {
            Ok(moved) => {
                if moved {
                    tracing::debug!(task.id = %d.task_id, "moved behind a guest's job");
                }
                moved
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot move a job behind a guest's");
                false
            }
        }
    }
}
