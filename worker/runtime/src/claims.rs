//! Claims on stream entries (ARCHITECTURE.md "Worker loop"): which jobs this worker holds,
//! renewing them while they run, and giving jobs up at shutdown so another worker takes them
//! at once. (Sweeping for jobs whose worker died is in the read loop, `runner.rs`.)
//!
//! A claim lapses when its entry has been idle for the lease: a worker renews its entries
//! every third of the lease (`XCLAIM … JUSTID`, chunked). Whoever runs a task again takes
//! a new fencing token, so a worker that lost its claim can no longer write the task.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_store::Store;
use tokio::task::AbortHandle;

/// One job this worker holds.
struct Held {
    /// Its task.
    task_key: String,
    /// The handler is waiting for input (holds no slot; nothing to lose by giving it up).
    parked: Arc<AtomicBool>,
    /// Stops the job's task.
    abort: Option<AbortHandle>,
}

/// Held entries of one stream: (entry id, task id).
type Entries = Vec<(String, String)>;

/// (stream, entry id) → the job (entry ids are unique within one stream only).
#[derive(Default)]
pub(crate) struct Claims {
    held: Mutex<HashMap<(String, String), Held>>,
    /// Serialises renewals and hand-overs, so a renewal in flight cannot undo a hand-over.
    writes: tokio::sync::Mutex<()>,
}

impl Claims {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Record a job as held; `parked` is set by its context while it waits for input.
    /// `false` when this worker already runs that entry (its own sweep took it back after
    /// renewals failed): the running one keeps it and no second run starts.
    pub(crate) fn hold(
        &self,
        stream: &str,
        entry: &str,
        task_key: &str,
        parked: Arc<AtomicBool>,
    ) -> bool {
        match self.lock().entry((stream.to_owned(), entry.to_owned())) {
            Entry::Occupied(_) => false,
            Entry::Vacant(slot) => {
                slot.insert(Held {
                    task_key: task_key.to_owned(),
                    parked,
                    abort: None,
                });
                true
            }
        }
    }

    /// Attach the job's task (if it is still held).
    pub(crate) fn set_abort(&self, stream: &str, entry: &str, abort: AbortHandle) {
        if let Some(h) = self.lock().get_mut(&(stream.to_owned(), entry.to_owned())) {
            h.abort = Some(abort);
        }
    }

    /// The job ended (finished, skipped, or its task was aborted).
    pub(crate) fn release(&self, stream: &str, entry: &str) {
        self.lock().remove(&(stream.to_owned(), entry.to_owned()));
    }

    /// Held entries by stream, for those matching `which`.
    fn by_stream(&self, which: impl Fn(&Held) -> bool) -> HashMap<String, Entries> {
        let mut out: HashMap<String, Entries> = HashMap::new();
        for ((stream, entry), held) in self.lock().iter() {
            if which(held) {
                out.entry(stream.clone())
                    .or_default()
                    .push((entry.clone(), held.task_key.clone()));
            }
        }
        out
    }

    /// Renew every held entry's claim.
    pub(crate) async fn renew(&self, store: &Store, consumer: &str) {
        let _writing = self.writes.lock().await;
        for (stream, held) in self.by_stream(|_| true) {
            let entries: Vec<String> = held.into_iter().map(|(e, _)| e).collect();
            if let Err(e) = store.jobs().renew(&stream, consumer, &entries).await {
                tracing::warn!(queue.stream = %stream, error = %e, "cannot renew job claims");
            }
        }
    }

    /// Stop and give up the jobs that match (`parked_only`: those waiting for input), so any
    /// worker's next sweep takes them; the hand-over is counted on each task, so it does not
    /// count as an interrupted run.
    pub(crate) async fn give_up(
        &self,
        store: &Store,
        consumer: &str,
        lease: Duration,
        parked_only: bool,
    ) {
        let _writing = self.writes.lock().await;
        let which = |h: &Held| !parked_only || h.parked.load(Ordering::SeqCst);
        for (stream, held) in self.by_stream(which) {
            let (entries, tasks): (Vec<String>, Vec<String>) = held.into_iter().unzip();
            {
                let mut map = self.lock();
                for entry in &entries {
                    if let Some(h) = map.remove(&(stream.clone(), entry.clone()))
                        && let Some(abort) = h.abort
                    {
                        abort.abort();
                    }
                }
            }
            match store
                .jobs()
                .give_up(&stream, consumer, &entries, &tasks, lease)
                .await
            {
                Ok(()) => {
                    tracing::info!(queue.stream = %stream, jobs = entries.len(), "jobs handed back to their queue")
                }
                Err(e) => {
                    tracing::warn!(queue.stream = %stream, error = %e, "cannot give jobs up; they are reclaimed after the lease")
                }
            }
        }
    }
}
