//! What the store reports as it works, for whoever counts it: the binaries turn these
//! into metrics (`mcp_tasks_shared::telemetry` registers the observer), the store itself
//! knows nothing of OpenTelemetry.

use std::sync::OnceLock;

/// Something worth counting that happened inside the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed<'a> {
    /// A Redis call failed: `timeout`, `connection` or `response`.
    RedisError {
        /// The kind of failure.
        kind: &'static str,
    },
    /// An acknowledged change (`create`, `answer`, `cancel`, `finish`) was not confirmed by
    /// `MCPT_REDIS_WAIT_REPLICAS` replicas within `MCPT_REDIS_WAIT_TIMEOUT`.
    Unreplicated {
        /// Which change.
        op: &'static str,
    },
    /// A task no worker was running ended `cancelled` by `tasks/cancel` (a worker counts
    /// the tasks it ends itself).
    CancelledUnrun {
        /// The task's tool.
        tool: &'a str,
    },
}

static OBSERVER: OnceLock<fn(Observed<'_>)> = OnceLock::new();

/// Send what the store observes to `observer`, for the life of the process (the first
/// call wins).
pub fn set_observer(observer: fn(Observed<'_>)) {
    let _ = OBSERVER.set(observer);
}

pub(crate) fn report(what: Observed<'_>) {
    if let Some(observer) = OBSERVER.get() {
        observer(what);
    }
}
