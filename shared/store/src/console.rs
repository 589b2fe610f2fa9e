//! What the operator's console reads: one queue's depth, its oldest waiting job and the
//! entries added to its stream since the last read (each names its task and owner), in a
//! bounded number of commands per stream, whatever the queue's length.
//!
//! The console keeps no index of its own in Redis: the queue streams already hold every
//! queued and running job with its task id and owner (an entry is deleted when its task
//! ends), so "recent tasks" costs the hot path nothing. The gateway's console remembers
//! what it saw (`gateway/src/console`).

use std::collections::HashMap;

use redis::AsyncCommands as _;
use redis::streams::StreamRangeReply;

use crate::handles::ConsoleReads;
use crate::{QueueDepth, StoreResult, TaskRecord, keys};

/// Most entries read from the end of one stream per call.
pub const MAX_RECENT_PER_STREAM: usize = 200;

/// A job entry as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    /// The task.
    pub task_id: String,
    /// Its owner digest (part of the task hash's name).
    pub owner: String,
    /// When it was enqueued (the entry id's time), ms since the epoch.
    pub enqueued_ms: i64,
}

/// One queue as the console shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueView {
    /// Length, lag and pending, summed over the queue's streams.
    pub depth: QueueDepth,
    /// When the oldest job not yet delivered to a worker was enqueued (ms since the epoch).
    pub oldest_waiting_ms: Option<i64>,
    /// The entries added since the last read, newest first.
    pub recent: Vec<QueuedJob>,
}

/// One task as the console's detail view shows it: the hash, and from the job's stream
/// entry (while it exists) its trace context and how often it was delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskDetail {
    /// The hash, decoded.
    pub record: TaskRecord,
    /// The consumer (worker) that started it last, if any.
    pub worker: Option<String>,
    /// The queue it was sent to.
    pub queue: Option<String>,
    /// Times its job was delivered to a worker (`None` once the entry is gone).
    pub deliveries: Option<u64>,
    /// The W3C `traceparent` of the call, while the job's entry exists.
    pub traceparent: Option<String>,
}

/// The time part of a stream entry id (`1700000000000-0` → 1700000000000).
fn entry_ms(id: &str) -> i64 {
    id.split('-')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

fn jobs(reply: StreamRangeReply) -> Vec<QueuedJob> {
    reply
        .ids
        .into_iter()
        .filter_map(|e| {
            Some(QueuedJob {
                enqueued_ms: entry_ms(&e.id),
                task_id: e.get("task")?,
                owner: e.get("owner")?,
            })
        })
        .collect()
}

impl ConsoleReads<'_> {
    /// `queue`'s depth, its oldest waiting job, and the entries added to its streams since
    /// the last call: per stream `XLEN` and `XINFO GROUPS` (as [`Fleet::queue_depth`](crate::Fleet::queue_depth)),
    /// `XRANGE … COUNT 1` while jobs wait, and `XRANGE (CURSOR + COUNT count` from the last
    /// entry seen (`cursors`, per stream, updated here; a stream read for the first time
    /// gives its newest `count` entries with `XREVRANGE`). `count` is capped at
    /// [`MAX_RECENT_PER_STREAM`]; more new entries than that are read by the next calls.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn queue(
        self,
        queue: &str,
        cursors: &mut HashMap<String, String>,
        count: usize,
    ) -> StoreResult<QueueView> {
        let count = count.clamp(1, MAX_RECENT_PER_STREAM);
        let mut view = QueueView::default();
        for key in self.store.layout.queue_streams(queue) {
            let mut con = self.store.con.clone();
            let (depth, last_delivered) = self.store.fleet().stream_depth(&key).await?;
            view.depth.length += depth.length;
            view.depth.pending += depth.pending;
            view.depth.lag += depth.lag;
            if depth.length == 0 {
                continue;
            }
            if depth.lag > 0 {
                // The first entry after the group's last delivered one waits longest.
                let start = last_delivered.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
                let first: StreamRangeReply = con.xrange_count(&key, start, "+", 1).await?;
                if let Some(e) = first.ids.first() {
                    let ms = entry_ms(&e.id);
                    view.oldest_waiting_ms =
                        Some(view.oldest_waiting_ms.map_or(ms, |o: i64| o.min(ms)));
                }
            }
            let read: StreamRangeReply = match cursors.get(&key) {
                Some(last) => {
                    con.xrange_count(&key, format!("({last}"), "+", count)
                        .await?
                }
                None => {
                    let mut newest: StreamRangeReply =
                        con.xrevrange_count(&key, "+", "-", count).await?;
                    newest.ids.reverse();
                    newest
                }
            };
            if let Some(last) = read.ids.last() {
                cursors.insert(key.clone(), last.id.clone());
            }
            view.recent.extend(jobs(read));
        }
        view.recent
            .sort_by_key(|j| std::cmp::Reverse(j.enqueued_ms));
        Ok(view)
    }
}

impl ConsoleReads<'_> {
    /// One task with its worker, deliveries and trace context: `HGETALL`, then while the
    /// job's entry exists `XRANGE entry entry` and `XPENDING … entry entry 1` (same slot).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn task(self, id: &str, owner: &str) -> StoreResult<Option<TaskDetail>> {
        let mut con = self.store.con.clone();
        let fields: Vec<(String, String)> =
            con.hgetall(self.store.layout.task_key(id, owner)).await?;
        let field = |name: &str| {
            fields
                .iter()
                .find(|(f, _)| f == name)
                .map(|(_, v)| v.clone())
        };
        let (worker, queue) = (field("worker"), field("queue"));
        let (stream, entry) = (field("stream"), field("entry"));
        let Some(record) = TaskRecord::from_fields(id, fields) else {
            return Ok(None);
        };
        let mut detail = TaskDetail {
            record,
            worker,
            queue,
            deliveries: None,
            traceparent: None,
        };
        if let (Some(stream), Some(entry)) = (stream, entry) {
            let found: StreamRangeReply = con.xrange_count(&stream, &entry, &entry, 1).await?;
            if let Some(e) = found.ids.first() {
                let job: Option<String> = e.get("job");
                detail.traceparent = job
                    .and_then(|j| serde_json::from_str::<crate::Job>(&j).ok())
                    .and_then(|j| j.traceparent);
                let pending: redis::streams::StreamPendingCountReply = con
                    .xpending_count(&stream, keys::GROUP, &entry, &entry, 1)
                    .await?;
                detail.deliveries =
                    Some(pending.ids.first().map_or(0, |p| p.times_delivered as u64));
            }
        }
        Ok(Some(detail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_give_their_time() {
        assert_eq!(entry_ms("1700000000123-4"), 1_700_000_000_123);
        assert_eq!(entry_ms("bogus"), 0);
    }
}
