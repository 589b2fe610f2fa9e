//! Retries: a job whose run failed in a way its tool may try again waits in its stream's
//! delayed set (`mcpt:delayed:{…}`, [`keys::delayed_key`], a sorted set scored by when it is
//! due), holding no worker slot, and is moved back to the end of its stream when due.
//!
//! `retry.lua` moves a job there (fenced, with the next attempt's number in the entry);
//! `due.lua` moves due ones back, atomically per job, run by every worker that serves a
//! tool with a retry policy every [`DUE_EVERY`]. A worker dying during the wait loses
//! nothing: the job is in Redis, and any other worker moves it.

use std::time::Duration;

use crate::handles::Jobs;
use crate::{Delivery, StoreResult, Write, keys, replies};

/// The shortest sleep between two moves of due jobs (the most a retry waits past its delay
/// when the next due time is known).
pub const DUE_EVERY: Duration = Duration::from_millis(250);

/// The longest sleep between two moves of due jobs: when nothing waits, or the next job is
/// due later. Another worker may add a job meanwhile; it is moved at most this late.
pub const DUE_IDLE: Duration = Duration::from_secs(1);

/// Most jobs one `due.lua` call moves.
const DUE_BATCH: usize = 100;

impl Jobs<'_> {
    /// Put `d`'s job in its stream's delayed set for `delay` (Redis' clock), as attempt
    /// `next_attempt`, with `message` as the task's status message. The task stays `working`.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "retry", task.id = %d.task_id))]
    pub async fn retry(
        self,
        d: &Delivery,
        fence: u64,
        delay: Duration,
        message: &str,
        next_attempt: u32,
    ) -> StoreResult<Write> {
        let mut con = self.store.con.clone();
        let key = self.store.layout.task_key(&d.task_id, &d.owner);
        replies::read(
            self.store
                .on_delivery(
                    &self.store.scripts.retry,
                    &key,
                    d,
                    &[keys::delayed_key(&d.stream)],
                )
                .arg(fence)
                .arg(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX))
                .arg(message)
                .arg(next_attempt)
                .invoke_async(&mut con)
                .await?,
        )
    }

    /// Move the due jobs of every stream of `queue` back to their streams: how many moved,
    /// and how long until the next job left is due (`None` when none waits).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn move_due(self, queue: &str) -> StoreResult<(usize, Option<Duration>)> {
        let mut con = self.store.con.clone();
        let (mut moved, mut next) = (0, None::<Duration>);
        for stream in self.store.layout.queue_streams(queue) {
            let (n, wait_ms): (i64, i64) = self
                .store
                .scripts
                .due
                .key(keys::delayed_key(&stream))
                .key(&stream)
                .arg(DUE_BATCH)
                .invoke_async(&mut con)
                .await?;
            moved += usize::try_from(n).unwrap_or(0);
            if let Ok(ms) = u64::try_from(wait_ms) {
                let wait = Duration::from_millis(ms);
                next = Some(next.map_or(wait, |n| n.min(wait)));
            }
        }
        Ok((moved, next))
    }
}
