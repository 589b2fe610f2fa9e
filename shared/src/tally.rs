//! This process' tally for the console's charts (`mcp_tasks_store::tally`): counters kept in
//! memory where tasks are created and ended, and a loop that writes their snapshot to Redis
//! every [`PUBLISH_EVERY`] when they changed (and every [`REFRESH_EVERY`] regardless, so
//! consoles know the process lives). A task costs no Redis command here.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::Store;
use mcp_tasks_store::tally::{
    CreatedTask, MAX_RECENT_CREATED, RECENT_CREATED_MS, RUN_TIME_BOUNDS_MS, Tally, run_time_bucket,
};
use tokio_util::sync::CancellationToken;

/// How often a changed tally is written.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);
/// How often an unchanged tally is written anyway.
pub const REFRESH_EVERY: Duration = Duration::from_secs(60);

/// The counters of this process (`at_ms` unused until a snapshot).
static TALLY: Mutex<Tally> = Mutex::new(Tally {
    at_ms: 0,
    created: 0,
    completed: 0,
    failed: 0,
    cancelled: 0,
    run_time: BTreeMap::new(),
    recent: std::collections::VecDeque::new(),
});

fn with(f: impl FnOnce(&mut Tally)) {
    let mut t = TALLY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&mut t);
}

/// Count a task created by this process, and name it in the next snapshots.
pub fn created(task: &str, owner: &str, queue: &str) {
    let at_ms = now_millis();
    with(|t| {
        t.created += 1;
        if t.recent.len() >= MAX_RECENT_CREATED {
            t.recent.pop_front();
        }
        t.recent.push_back(CreatedTask {
            task: task.to_owned(),
            owner: owner.to_owned(),
            queue: queue.to_owned(),
            at_ms,
        });
    });
}

/// Count a task this process ended with `status` (`completed`, `failed`, `cancelled`;
/// others are ignored), and, when known, how long it ran in `queue`.
pub fn finished(status: &str, queue: &str, run_ms: Option<u64>) {
    with(|t| {
        match status {
            "completed" => t.completed += 1,
            "failed" => t.failed += 1,
            "cancelled" => t.cancelled += 1,
            _ => return,
        }
        if let Some(ms) = run_ms {
            let buckets = t
                .run_time
                .entry(queue.to_owned())
                .or_insert_with(|| vec![0; RUN_TIME_BOUNDS_MS.len() + 1]);
            buckets[run_time_bucket(ms)] += 1;
        }
    });
}

/// The counters now (tasks created over [`RECENT_CREATED_MS`] ago are dropped).
pub fn snapshot() -> Tally {
    let now = now_millis();
    let mut guard = TALLY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    guard.recent.retain(|c| now - c.at_ms < RECENT_CREATED_MS);
    let mut t = guard.clone();
    t.at_ms = now;
    t
}

/// Write this process' snapshot under `process` (e.g. `worker:NAME`) until `stop`: every
/// [`PUBLISH_EVERY`] when it changed, every [`REFRESH_EVERY`] otherwise, once more at the end.
pub async fn publish(store: Store, process: String, stop: CancellationToken) {
    let mut tick = tokio::time::interval(PUBLISH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<Tally> = None;
    loop {
        let stopping = tokio::select! {
            () = stop.cancelled() => true,
            _ = tick.tick() => false,
        };
        let now = snapshot();
        let due = last.as_ref().is_none_or(|l| {
            Tally {
                at_ms: 0,
                ..l.clone()
            } != Tally {
                at_ms: 0,
                ..now.clone()
            } || now.at_ms - l.at_ms >= REFRESH_EVERY.as_millis() as i64
        });
        if due {
            match store.fleet().publish_tally(&process, &now).await {
                Ok(dropped) => {
                    if dropped > 0 {
                        tracing::debug!(dropped, "tallies of processes gone dropped");
                    }
                    last = Some(now);
                }
                Err(e) => tracing::debug!(error = %e, "tally not written"),
            }
        }
        if stopping {
            return;
        }
    }
}
