//! Claims on stream entries (ARCHITECTURE.md "Worker loop"): which jobs this worker holds,
//! renewing them while they run, sweeping a queue for jobs whose worker died, and giving
//! jobs up at shutdown so another worker takes them at once.
//!
//! A claim lapses when its entry has been idle for the lease: a worker renews its entries
//! every third of the lease (`XCLAIM … JUSTID`, chunked), and one worker per queue at a time
//! (a `SET NX PX` lease) sweeps with a bounded `XAUTOCLAIM`. Whoever runs a task again takes
//! a new fencing token, so a worker that lost its claim can no longer write the task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_shared::store::Store;
use tokio::task::AbortHandle;

/// One job this worker holds.
struct Held {
    /// The handler is waiting for input (holds no slot; nothing to lose by giving it up).
    parked: Arc<AtomicBool>,
    /// Stops the job's task.
    abort: Option<AbortHandle>,
}

/// (queue, entry id) → the job.
#[derive(Default)]
pub(crate) struct Claims {
    held: Mutex<HashMap<(String, String), Held>>,
}

impl Claims {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Record a job as held; `parked` is set by its context while it waits for input.
    pub(crate) fn hold(&self, queue: &str, entry: &str, parked: Arc<AtomicBool>) {
        self.lock().insert(
            (queue.to_owned(), entry.to_owned()),
            Held {
                parked,
                abort: None,
            },
        );
    }

    /// Attach the job's task (if it is still held).
    pub(crate) fn set_abort(&self, queue: &str, entry: &str, abort: AbortHandle) {
        if let Some(h) = self.lock().get_mut(&(queue.to_owned(), entry.to_owned())) {
            h.abort = Some(abort);
        }
    }

    /// The job ended (finished, skipped, or its task was aborted).
    pub(crate) fn release(&self, queue: &str, entry: &str) {
        self.lock().remove(&(queue.to_owned(), entry.to_owned()));
    }

    /// Held entries by queue, for those matching `which`.
    fn by_queue(&self, which: impl Fn(&Held) -> bool) -> HashMap<String, Vec<String>> {
        let mut out: HashMap<String, Vec<String>> = HashMap::new();
        for ((queue, entry), held) in self.lock().iter() {
            if which(held) {
                out.entry(queue.clone()).or_default().push(entry.clone());
            }
        }
        out
    }

    /// Renew every held entry's claim.
    pub(crate) async fn renew(&self, store: &Store, consumer: &str) {
        for (queue, entries) in self.by_queue(|_| true) {
            if let Err(e) = store.renew(&queue, consumer, &entries).await {
                tracing::warn!(queue.name = %queue, error = %e, "cannot renew job claims");
            }
        }
    }

    /// Stop and give up the jobs that match `which`, so any worker's next sweep takes them.
    pub(crate) async fn give_up(
        &self,
        store: &Store,
        consumer: &str,
        lease: Duration,
        parked_only: bool,
    ) {
        let which = |h: &Held| !parked_only || h.parked.load(Ordering::SeqCst);
        let chosen = self.by_queue(which);
        for (queue, entries) in &chosen {
            {
                let mut held = self.lock();
                for entry in entries {
                    if let Some(h) = held.remove(&(queue.clone(), entry.clone()))
                        && let Some(abort) = h.abort
                    {
                        abort.abort();
                    }
                }
            }
            match store.give_up(queue, consumer, entries, lease).await {
                Ok(()) => {
                    tracing::info!(queue.name = %queue, jobs = entries.len(), "jobs given up for other workers")
                }
                Err(e) => {
                    tracing::warn!(queue.name = %queue, error = %e, "cannot give jobs up; they are reclaimed after the lease")
                }
            }
        }
    }
}
