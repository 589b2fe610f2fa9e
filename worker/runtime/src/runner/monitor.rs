//! Watching a running job: its task's latest state fed to the context, the run stopped on
//! a cancellation, a terminal state or a takeover, and its deadline. The run that spawns
//! the watch is [`job`](super::job)'s.

use std::time::Duration;

use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::events::{EventHub, TaskEvent, Watch};
use mcp_tasks_store::{Store, TaskRecord};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::RECHECK_EVERY;

/// Resolves a little after `deadline_ms` (Redis clock, read here by the local one), or never.
/// The finish script then sees the TTL passed and writes the expiry itself (T-52).
pub(super) async fn until(deadline_ms: Option<i64>) {
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
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Feed the task's latest state to its context; fire `stop` on cancellation, a terminal
/// state, or another worker taking the task over (a newer fence).
///
/// It subscribes only once the run has lasted [`WATCH_AFTER`](super::WATCH_AFTER): most
/// runs are shorter, and their subscribe/unsubscribe would be a sixth of their Redis
/// commands. A cancel in that first moment is seen at the subscription's first read.
pub(super) async fn monitor(
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
            match store.tasks().get(watch.task_id(), &owner).await {
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
