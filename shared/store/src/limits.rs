//! Fleet-wide concurrency limits (`max_running`, optionally per `concurrency_key` value).
//!
//! Per limit (a tool, or a tool and one argument value), three keys sharing one hash tag
//! ([`keys::limit_keys`]): the slots (sorted set, task id → lease end), the line of
//! waiting tasks (sorted set, task id → arrival) and when each last asked (hash). A worker
//! takes a slot before a limited job runs (`acquire.lua`), renews it with its job claims
//! ([`Limits::renew_slots`]) and gives it back when the run ends ([`Limits::free_slot`]); a
//! dead worker's slot lapses with its lease. A job that finds no slot waits in its stream's
//! delayed set (`park.lua`) and asks again when due, so it holds no worker slot; slots go
//! to the earliest arrivals.

use std::time::Duration;

use redis::AsyncCommands;

use crate::handles::Limits;
use crate::{Delivery, StoreResult, keys};

/// How long a waiting job waits before it asks for a slot again.
pub const ASK_EVERY: Duration = Duration::from_millis(500);

/// A waiting task that has not asked for this long has left the line (cancelled, expired).
const STALE: Duration = Duration::from_secs(5);

/// Whether a slot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Taken (or already held by this task); `running` slots are in use now, this one
    /// included.
    Taken {
        /// Slots in use.
        running: u32,
    },
    /// None free for this task yet.
    Wait {
        /// Slots in use.
        running: u32,
    },
}

impl Limits<'_> {
    /// Take a slot of the limit `limit` (a [`keys::limit_keys`] name) of `slots` for task
    /// `task_id`, which arrived at `arrival_ms`, leased for `lease`.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn acquire_slot(
        self,
        limit: &str,
        slots: u32,
        task_id: &str,
        arrival_ms: i64,
        lease: Duration,
    ) -> StoreResult<Slot> {
        let (running, line, asked) = keys::limit_keys(limit);
        let mut con = self.store.con.clone();
        let (taken, n): (i64, i64) = self
            .store
            .scripts
            .acquire
            .key(running)
            .key(line)
            .key(asked)
            .arg(task_id)
            .arg(slots)
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .arg(arrival_ms)
            .arg(u64::try_from(STALE.as_millis()).unwrap_or(u64::MAX))
            .invoke_async(&mut con)
            .await?;
        let running = u32::try_from(n).unwrap_or(u32::MAX);
        Ok(if taken == 1 {
            Slot::Taken { running }
        } else {
            Slot::Wait { running }
        })
    }

    /// Give task `task_id`'s slot of `limit` back.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn free_slot(self, limit: &str, task_id: &str) -> StoreResult<()> {
        let (running, _, _) = keys::limit_keys(limit);
        let mut con = self.store.con.clone();
        let _: i64 = con.zrem(running, task_id).await?;
        Ok(())
    }

    /// Renew the slots `held` (limit, task id) for `lease` from now (Redis' clock is not
    /// read: the worker's is close enough for a lease several seconds long).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn renew_slots(self, held: &[(String, String)], lease: Duration) -> StoreResult<()> {
        if held.is_empty() {
            return Ok(());
        }
        let until = mcp_tasks_protocol::time::now_millis()
            + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        let mut con = self.store.con.clone();
        for (limit, task_id) in held {
            let (running, _, _) = keys::limit_keys(limit);
            // XX: a slot that lapsed meanwhile is not taken back behind the line's back.
            let _: i64 = redis::cmd("ZADD")
                .arg(running)
                .arg("XX")
                .arg(until)
                .arg(task_id)
                .query_async(&mut con)
                .await?;
        }
        Ok(())
    }

    /// Count a start of task `task_id` against rate limit `limit` (`per` starts per
    /// `window`): `None` to start now, or how long until a start is allowed.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn rate_start(
        self,
        limit: &str,
        per: u32,
        window: Duration,
        task_id: &str,
    ) -> StoreResult<Option<Duration>> {
        let mut con = self.store.con.clone();
        let (go, wait_ms): (i64, i64) = self
            .store
            .scripts
            .rate
            .key(keys::starts_key(limit))
            .arg(task_id)
            .arg(per)
            .arg(u64::try_from(window.as_millis()).unwrap_or(u64::MAX))
            .invoke_async(&mut con)
            .await?;
        Ok((go != 1).then(|| Duration::from_millis(u64::try_from(wait_ms).unwrap_or(1))))
    }

    /// Put `d`'s job (not started) in its stream's delayed set for `again` (at least
    /// [`ASK_EVERY`] when `None`), its task `working` with status message `message`.
    /// `false` when nothing needs to wait.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn park(
        self,
        d: &Delivery,
        message: &str,
        again: Option<Duration>,
    ) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let key = self.store.layout.task_key(&d.task_id, &d.owner);
        let parked: i64 = self
            .store
            .on_delivery(
                &self.store.scripts.park,
                &key,
                d,
                &[keys::delayed_key(&d.stream)],
            )
            .arg(u64::try_from(again.unwrap_or(ASK_EVERY).as_millis()).unwrap_or(u64::MAX))
            .arg(message)
            .invoke_async(&mut con)
            .await?;
        Ok(parked == 1)
    }
}
