//! Retries: a job whose run failed in a way its tool may try again waits in its stream's
//! delayed set (`mcpt:delayed:{…}`, [`keys::delayed_key`], a sorted set scored by when it is
//! due), holding no worker slot, and is moved back to the end of its stream when due.
//!
//! `retry.lua` moves a job there (fenced, with the next attempt's number in the entry);
//! `due.lua` moves due ones back, atomically per job, run by every worker that serves a
//! tool with a retry policy every [`DUE_EVERY`]. A worker dying during the wait loses
//! nothing: the job is in Redis, and any other worker moves it.

use std::time::Duration;

use crate::{Delivery, Store, StoreResult, Write, keys, replies};

/// How often workers move due jobs back to their streams (the most a retry waits past its
/// delay).
pub const DUE_EVERY: Duration = Duration::from_millis(250);

/// Most jobs one `due.lua` call moves.
const DUE_BATCH: usize = 100;

impl Store {
    /// Put `d`'s job in its stream's delayed set for `delay` (Redis' clock), as attempt
    /// `next_attempt`, with `message` as the task's status message. The task stays `working`.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "retry", task.id = %d.task_id))]
    pub async fn retry(
        &self,
        d: &Delivery,
        fence: u64,
        delay: Duration,
        message: &str,
        next_attempt: u32,
    ) -> StoreResult<Write> {
        let mut con = self.con.clone();
        replies::read(
            self.scripts
                .retry
                .key(self.layout.task_key(&d.task_id, &d.owner))
                .key(&d.stream)
                .key(keys::delayed_key(&d.stream))
                .arg(self.layout.events_channel(&d.task_id))
                .arg(keys::GROUP)
                .arg(&d.entry)
                .arg(fence)
                .arg(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX))
                .arg(message)
                .arg(next_attempt)
                .invoke_async(&mut con)
                .await?,
        )
    }

    /// Move the due jobs of every stream of `queue` back to their streams; how many moved.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn move_due(&self, queue: &str) -> StoreResult<usize> {
        let mut con = self.con.clone();
        let mut moved = 0;
        for stream in self.layout.queue_streams(queue) {
            let n: i64 = self
                .scripts
                .due
                .key(keys::delayed_key(&stream))
                .key(&stream)
                .arg(DUE_BATCH)
                .invoke_async(&mut con)
                .await?;
            moved += usize::try_from(n).unwrap_or(0);
        }
        Ok(moved)
    }
}
