//! The rows the console shows of the fleet as of the last refresh: queues, workers, tools,
//! strikes, and the chart's samples. The refresher (`refresh.rs`) builds them; the memory
//! holding them is `view.rs`'s.

use serde::Serialize;

use super::refresh::REFRESH;

/// One queue as of the last refresh.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct QueueRow {
    pub(crate) name: String,
    pub(crate) length: u64,
    pub(crate) lag: u64,
    pub(crate) pending: u64,
    /// Age of the oldest job no worker has received yet.
    pub(crate) oldest_waiting_ms: Option<i64>,
    pub(crate) consumers: usize,
    /// Jobs put aside by a strike (`mcpt:held:*`), run again on restore.
    pub(crate) held: u64,
}

/// One worker (a consumer of one or more queues' groups).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct WorkerRow {
    pub(crate) name: String,
    pub(crate) queues: Vec<String>,
    /// The live tools of its queues.
    pub(crate) tools: Vec<String>,
    /// Jobs delivered to it and not yet acknowledged.
    pub(crate) slots_in_use: u64,
    /// Since it last read or claimed a job.
    pub(crate) idle_ms: u64,
}

/// One advertised tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolRow {
    pub(crate) name: String,
    pub(crate) queue: String,
    pub(crate) policy: String,
    /// Since its worker last confirmed it.
    pub(crate) heartbeat_age_ms: i64,
    pub(crate) stale: bool,
}

/// One strike in force (`mcp-tasks strike`, or the console's form).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StrikeRow {
    pub(crate) tool: String,
    /// `ARG=VALUE`, when only such calls are struck.
    #[serde(rename = "where")]
    pub(crate) when: Option<String>,
    /// How messages name it: `tool T` or `tool T where ARG=VALUE`.
    pub(crate) describe: String,
    pub(crate) since_ms: i64,
    pub(crate) cancel_running: bool,
}

/// The rows of the strikes in force.
pub(crate) fn strike_rows(strikes: mcp_tasks_store::strikes::Strikes) -> Vec<StrikeRow> {
    strikes
        .0
        .into_iter()
        .map(|s| StrikeRow {
            describe: s.describe(),
            when: s.when.map(|(arg, value)| format!("{arg}={value}")),
            tool: s.tool,
            since_ms: s.at_ms,
            cancel_running: s.cancel_running,
        })
        .collect()
}

/// The queues, workers and tools of the last refresh.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Fleet {
    pub(crate) queues: Vec<QueueRow>,
    pub(crate) workers: Vec<WorkerRow>,
    pub(crate) tools: Vec<ToolRow>,
    pub(crate) strikes: Vec<StrikeRow>,
    /// When the refresh ended (ms since the epoch); 0 before the first.
    pub(crate) refreshed_ms: i64,
    /// Why the last refresh failed, if it did.
    pub(crate) error: Option<String>,
}

/// Samples kept for the chart: 15 minutes of refreshes.
pub(crate) const HISTORY: usize = (15 * 60 / REFRESH.as_secs()) as usize;

/// One refresh's totals over all queues, for the chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// When (ms since the epoch).
    pub(crate) at_ms: i64,
    /// Jobs no worker has received yet (lag).
    pub(crate) waiting: u64,
    /// Jobs delivered and not yet acknowledged (running).
    pub(crate) running: u64,
}
