//! The kill switch on a worker: the strikes in force, read once a second (one `HGETALL`,
//! never one per job), the jobs this worker runs (for `--cancel-running`), and the release
//! of held jobs once their strike is lifted. Holding a delivered job is in
//! `runner/mod.rs` (`dispatch`); the data model is in `mcp_tasks_store::strikes`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use mcp_tasks_shared::sync::lock;
use mcp_tasks_store::Store;
use mcp_tasks_store::strikes::{Strike, Strikes};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// How often the strikes are read: the "within a second" of the kill switch.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// How many reads after a change also look for held jobs to release: a worker that held a
/// job on a stale copy of the strikes (up to [`REFRESH`] old) releases it itself.
const RELEASE_READS: u32 = 3;

/// The strikes as last read, and the jobs running here.
#[derive(Default)]
pub(crate) struct StrikeWatch {
    current: RwLock<Arc<Strikes>>,
    running: Mutex<HashMap<String, Running>>,
}

/// A job running on this worker, as a strike matches it.
struct Running {
    owner: String,
    tool: String,
    args: Value,
}

impl StrikeWatch {
    /// The strike a job of `tool` with `args` falls under, if any (no Redis).
    pub(crate) fn matching(&self, tool: &str, args: &Value) -> Option<Strike> {
        let current = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        current.matching(tool, args).cloned()
    }

    /// Note task `task_id` running until the guard drops.
    pub(crate) fn running(
        self: &Arc<Self>,
        task_id: &str,
        owner: &str,
        tool: &str,
        args: &Value,
    ) -> RunningGuard {
        lock(&self.running).insert(
            task_id.to_owned(),
            Running {
                owner: owner.to_owned(),
                tool: tool.to_owned(),
                args: args.clone(),
            },
        );
        RunningGuard(self.clone(), task_id.to_owned())
    }

    /// Read the strikes now; `Some(previous)` when they changed.
    async fn read(&self, store: &Store) -> Option<Arc<Strikes>> {
        match store.controls().strikes().await {
            Ok(fresh) => {
                let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
                if **current == fresh {
                    return None;
                }
                let n = fresh.0.len();
                tracing::info!(strikes = n, "strikes changed: {n} in force");
                Some(std::mem::replace(&mut *current, Arc::new(fresh)))
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the strikes; keeping the last ones");
                None
            }
        }
    }

    /// Read the strikes once before any job is read, so a fresh worker runs nothing struck.
    pub(crate) async fn prime(&self, store: &Store) {
        self.read(store).await;
    }

    /// Re-read the strikes every [`REFRESH`] until `stop`; on a change, cancel running
    /// jobs of new `--cancel-running` strikes and release held jobs no strike covers.
    pub(crate) async fn watch(
        self: Arc<Self>,
        store: Store,
        queues: Vec<String>,
        stop: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(REFRESH);
        // Held jobs whose strike was lifted while no worker was up are released at start.
        let mut release = 1;
        while mcp_tasks_shared::shutdown::every(&mut tick, &stop).await {
            if let Some(previous) = self.read(&store).await {
                release = RELEASE_READS;
                self.cancel_running(&store, &previous).await;
            }
            if release > 0 {
                release -= 1;
                let current = self
                    .current
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                match store.controls().release_held(&queues, &current).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(jobs = n, "held jobs queued again (strike lifted)"),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot release held jobs; trying again");
                        release = release.max(1);
                    }
                }
            }
        }
    }

    /// Cancel the running jobs that a strike with `cancel_running` covers when it is new
    /// since `previous`, or was there without `cancel_running` or with another `at_ms`.
    async fn cancel_running(&self, store: &Store, previous: &Strikes) {
        let current = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let new: Vec<&Strike> = current
            .0
            .iter()
            .filter(|s| {
                // New, or struck again (now with --cancel-running, or at a later time): an
                // operator re-striking with --cancel-running means it for what runs now.
                s.cancel_running
                    && !previous
                        .0
                        .iter()
                        .any(|p| p.id() == s.id() && p.cancel_running && p.at_ms == s.at_ms)
            })
            .collect();
        if new.is_empty() {
            return;
        }
        let doomed: Vec<(String, String)> = lock(&self.running)
            .iter()
            .filter(|(_, r)| new.iter().any(|s| s.matches(&r.tool, &r.args)))
            .map(|(id, r)| (id.clone(), r.owner.clone()))
            .collect();
        for (id, owner) in doomed {
            match store.tasks().cancel(&id, &owner).await {
                Ok(_) => {
                    tracing::info!(task.id = %id, "cancelled: its tool was struck with --cancel-running")
                }
                Err(e) => tracing::warn!(task.id = %id, error = %e, "cannot cancel a struck task"),
            }
        }
    }
}

/// Every [`PRUNE_EVERY`](mcp_tasks_store::strikes::PRUNE_EVERY) until `stop`, drop the
/// held jobs of `queues` whose task's TTL has ended. A loop of its own, so that many
/// streams never delay the strikes' once-a-second read.
pub(crate) async fn prune_held(store: Store, queues: Vec<String>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(mcp_tasks_store::strikes::PRUNE_EVERY);
    while mcp_tasks_shared::shutdown::every(&mut tick, &stop).await {
        for queue in &queues {
            match store.controls().prune_held(queue).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    jobs = n,
                    queue = %queue,
                    "held jobs dropped: their tasks' TTL ended"
                ),
                Err(e) => tracing::warn!(
                    error = %e,
                    "cannot drop held jobs of expired tasks; trying again in 30 s"
                ),
            }
        }
    }
}

/// Removes a running job from [`StrikeWatch`] when its run ends.
pub(crate) struct RunningGuard(Arc<StrikeWatch>, String);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        lock(&self.0.running).remove(&self.1);
    }
}
