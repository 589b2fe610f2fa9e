//! Per-process tallies for the console's charts: each gateway and worker keeps counters in
//! its own memory (tasks created, completed, failed, cancelled; run times in fixed buckets
//! per queue) and writes a snapshot of them into one hash every few seconds, whatever the
//! number of tasks. Consoles read the hash and turn the differences between snapshots into
//! rates and quantiles. The hot path writes nothing here.

use std::collections::{BTreeMap, HashMap};

use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};

use crate::handles::Fleet;
use crate::{StoreResult, keys};

/// Upper bounds (ms, inclusive) of the run-time buckets; one more bucket counts the rest.
/// Fixed, so every process' histogram merges with every other's by adding counts.
pub const RUN_TIME_BOUNDS_MS: &[u64] = &[
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 60_000, 120_000,
    300_000, 600_000, 1_800_000, 3_600_000, 14_400_000,
];

/// How long a process' snapshot is trusted without a newer one; older ones are removed.
pub const TALLY_STALE_MS: i64 = 5 * 60 * 1000;

/// One process' counters since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// When the snapshot was taken (ms since the epoch).
    pub at_ms: i64,
    /// Tasks this process created (gateways).
    pub created: u64,
    /// Tasks this process ended `completed` (workers).
    pub completed: u64,
    /// Tasks this process ended `failed` (workers).
    pub failed: u64,
    /// Tasks this process ended `cancelled` (workers; gateways for tasks no worker ran).
    pub cancelled: u64,
    /// Per queue, tasks ended by run time: counts indexed like [`RUN_TIME_BOUNDS_MS`], plus
    /// the overflow bucket last.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub run_time: BTreeMap<String, Vec<u64>>,
    /// The tasks this process created in the last [`RECENT_CREATED_MS`], at most
    /// [`MAX_RECENT_CREATED`], oldest first: how every console learns of every task,
    /// even one that ends before a refresh finds it in its queue stream.
    #[serde(default, skip_serializing_if = "std::collections::VecDeque::is_empty")]
    pub recent: std::collections::VecDeque<CreatedTask>,
}

/// A task as a tally names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedTask {
    /// The task id.
    pub task: String,
    /// Its owner digest.
    pub owner: String,
    /// The queue its job went to.
    pub queue: String,
    /// When it was created (ms since the epoch).
    pub at_ms: i64,
}

/// How long a created task stays in its creator's tally.
pub const RECENT_CREATED_MS: i64 = 60_000;
/// Most created tasks a tally carries (the newest).
pub const MAX_RECENT_CREATED: usize = 200;

/// The bucket of a run time of `ms`.
pub fn run_time_bucket(ms: u64) -> usize {
    RUN_TIME_BOUNDS_MS.partition_point(|&b| b < ms)
}

impl Fleet<'_> {
    /// Write `process`' snapshot, and drop those of processes that stopped writing
    /// [`TALLY_STALE_MS`] ago (one script, `tally.lua`). Returns how many were dropped.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn publish_tally(self, process: &str, tally: &Tally) -> StoreResult<usize> {
        let json = serde_json::to_string(tally).unwrap_or_default();
        let mut con = self.store.con.clone();
        let dropped: usize = self
            .store
            .scripts
            .tally
            .key(keys::TALLIES_KEY)
            .key(keys::TALLIES_AT_KEY)
            .arg(process)
            .arg(json)
            .arg(TALLY_STALE_MS)
            .invoke_async(&mut con)
            .await?;
        Ok(dropped)
    }

    /// Every process' snapshot (`HGETALL mcpt:{tallies}`), stale ones included; entries that
    /// do not parse are left out.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn tallies(self) -> StoreResult<Vec<(String, Tally)>> {
        let mut con = self.store.con.clone();
        let all: HashMap<String, String> = con.hgetall(keys::TALLIES_KEY).await?;
        Ok(all
            .into_iter()
            .filter_map(|(p, v)| Some((p, serde_json::from_str(&v).ok()?)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_times_fall_in_their_bucket() {
        assert_eq!(run_time_bucket(0), 0);
        assert_eq!(run_time_bucket(1), 0);
        assert_eq!(run_time_bucket(2), 1);
        assert_eq!(run_time_bucket(3), 2);
        assert_eq!(run_time_bucket(1_000), 9);
        assert_eq!(run_time_bucket(u64::MAX), RUN_TIME_BOUNDS_MS.len());
    }
}
