//! Jobs: the queue streams a worker reads, and every change a worker makes to a task it
//! runs (start, status message, input request, finish, release, lease renewal, reclaim).

use std::time::Duration;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::dead::{self, Keep};
use crate::entries::{BadJob, Entry};
use crate::handles::Jobs;
use crate::{JobReader, Store, StoreResult, keys, replies};

/// The stream entry a worker runs: everything the handler needs besides the task hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// Tool name.
    pub tool: String,
    /// Validated arguments.
    pub args: Value,
    /// Client capabilities of the originating `tools/call` (T-45), as the call wrote them:
    /// a worker reads them only when its tool asks for input, so they are not parsed into
    /// a `Value` (a map per object) for every job.
    pub caps: Box<RawValue>,
    /// Answers to the tool's MRTR round, if it has one.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub pre: serde_json::Map<String, Value>,
    /// W3C `traceparent` of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Digest of the caller's principal (`anonymous` without authentication); never the
    /// credential.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
}

/// A job read from a queue.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Queue name.
    pub queue: String,
    /// The stream it was read from: the queue's stream, or in a cluster the queue's stream
    /// of the task's shard. Entry ids are unique only within one stream.
    pub stream: String,
    /// Stream entry id.
    pub entry: String,
    /// Task id.
    pub task_id: String,
    /// The task's owner digest (part of its key).
    pub owner: String,
    /// The job, or why it could not be decoded. A worker's run takes its `args`, `caps`
    /// and `pre` out of it (they are `Null` and empty afterwards); the tool's name stays.
    pub job: Result<Job, BadJob>,
    /// Delivered for the first time (read as new), not reclaimed from another worker.
    pub fresh: bool,
    /// When the job was first queued (ms since the epoch), for a job moved to the end of
    /// its queue ([`Jobs::defer`](crate::Jobs::defer)); `None`: when this entry was added (its id).
    pub queued_ms: Option<i64>,
    /// Which attempt this run is: 1, or more for a job its tool asked to try again
    /// ([`Jobs::retry`](crate::Jobs::retry)).
    pub attempt: u32,
}

impl Delivery {
    /// The job's tool, or `unknown` for a job that could not be read.
    pub fn tool(&self) -> &str {
        self.job.as_ref().map_or("unknown", |j| j.tool.as_str())
    }

    /// When the job was first queued (ms since the epoch, Redis' clock).
    pub fn queued_at(&self) -> Option<i64> {
        self.queued_ms.or_else(|| {
            self.entry
                .split_once('-')
                .and_then(|(ms, _)| ms.parse().ok())
        })
    }
}

/// Outcome of [`Jobs::start`](crate::Jobs::start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Run the handler; writes must carry this fencing token.
    Run {
        /// Fencing token.
        fence: u64,
        /// `createdAt + ttlMs` in ms since the epoch (Redis clock), if the task expires.
        deadline_ms: Option<i64>,
    },
    /// Nothing to run (gone, terminal, or cancelled before start); the entry was acknowledged.
    Skip(String),
}

/// Outcome of a worker's write ([`Jobs::set_message`](crate::Jobs::set_message), [`Jobs::ask`](crate::Jobs::ask), [`Jobs::finish`](crate::Jobs::finish)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Written.
    Ok,
    /// The task hash is gone (expired).
    Gone,
    /// The task is already terminal (e.g. cancelled while waiting for input).
    Terminal,
    /// Another worker holds the task now; this one must stop.
    Fenced,
}

/// Outcome of [`Jobs::ask`](crate::Jobs::ask).
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// Every key has an answer (key → answer JSON), in request order.
    Answered(Vec<(String, String)>),
    /// At least one key is outstanding; wait for the task's events.
    Waiting,
    /// The write was refused.
    Refused(Write),
}

/// How a worker ends a task.
#[derive(Debug, Clone)]
pub enum Finish {
    /// `completed` with this `CallToolResult` JSON.
    Completed(String),
    /// `failed` with this JSON-RPC error JSON and status message.
    Failed {
        /// Error object JSON.
        error: String,
        /// Status message.
        message: String,
    },
    /// `cancelled`.
    Cancelled,
}

impl Store {
    /// `script` on delivered job `d`, as the job scripts take it: KEYS its task hash
    /// (`task_key`), its stream, then `side` (keys of the stream's hash tag); ARGV the
    /// task's channel, the consumer group and the entry id. The caller adds its own ARGV.
    pub(crate) fn on_delivery<'a>(
        &self,
        script: &'a redis::Script,
        task_key: &str,
        d: &Delivery,
        side: &[String],
    ) -> redis::ScriptInvocation<'a> {
        let mut invocation = script.key(task_key);
        invocation.key(&d.stream);
        for key in side {
            invocation.key(key);
        }
        invocation
            .arg(self.layout.events_channel(&d.task_id))
            .arg(keys::GROUP)
            .arg(&d.entry);
        invocation
    }
}

impl Jobs<'_> {
    /// Create the consumer group of each queue (and the stream) if missing.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn ensure_groups(self, queues: &[String]) -> StoreResult<()> {
        let mut con = self.store.con.clone();
        if !queues.is_empty() {
            let _: () = con.sadd(keys::QUEUES_KEY, queues).await?;
        }
        for stream in queues
            .iter()
            .flat_map(|q| self.store.layout.queue_streams(q))
        {
            let r: redis::RedisResult<()> =
                con.xgroup_create_mkstream(stream, keys::GROUP, "0").await;
            match r {
                Ok(()) => {}
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// A connection for blocking reads (no response timeout).
    ///
    /// # Errors
    /// Redis unreachable.
    pub async fn reader(self) -> StoreResult<JobReader> {
        JobReader::connect(self.store).await
    }

    /// A worker took a job: fence it, or learn it needs no run (then it is acknowledged).
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "start", task.id = %d.task_id))]
    pub async fn start(
        self,
        d: &Delivery,
        worker: &str,
        max_deliveries: u32,
    ) -> StoreResult<Start> {
        let mut con = self.store.con.clone();
        let key = self.store.layout.task_key(&d.task_id, &d.owner);
        replies::read(
            self.store
                .on_delivery(&self.store.scripts.start, &key, d, &[])
                .arg(worker)
                .arg(max_deliveries)
                .arg(mcp_tasks_protocol::jsonrpc::INTERNAL_ERROR)
                .arg(mcp_tasks_protocol::time::now_millis())
                .invoke_async(&mut con)
                .await?,
        )
    }

    /// Set the status message of a running task.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "status", task.id = %id))]
    pub async fn set_message(
        self,
        id: &str,
        owner: &str,
        fence: u64,
        message: &str,
    ) -> StoreResult<Write> {
        let mut con = self.store.con.clone();
        replies::read(
            self.store
                .scripts
                .status
                .key(self.store.layout.task_key(id, owner))
                .arg(self.store.layout.events_channel(id))
                .arg(fence)
                .arg(message)
                .invoke_async(&mut con)
                .await?,
        )
    }

    /// Ask for input under `requests` (key, request JSON).
    ///
    /// # Errors
    /// Redis unavailable, or a key that already names another request.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "ask", task.id = %id))]
    pub async fn ask(
        self,
        id: &str,
        owner: &str,
        fence: u64,
        requests: &[(String, String)],
    ) -> StoreResult<Ask> {
        let mut inv = self
            .store
            .scripts
            .ask
            .key(self.store.layout.task_key(id, owner));
        inv.arg(self.store.layout.events_channel(id)).arg(fence);
        for (key, req) in requests {
            inv.arg(key).arg(req);
        }
        let mut con = self.store.con.clone();
        replies::read(inv.invoke_async(&mut con).await?)
    }

    /// End a task and acknowledge its job.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn finish(self, d: &Delivery, fence: u64, outcome: &Finish) -> StoreResult<Write> {
        self.finish_keeping(d, fence, outcome, None).await
    }

    /// End a task and acknowledge its job; with `keep`, keep it as a dead letter
    /// ([`crate::dead`]) in the same step, unless a cancel ends it instead.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "finish", task.id = %d.task_id))]
    pub async fn finish_keeping(
        self,
        d: &Delivery,
        fence: u64,
        outcome: &Finish,
        keep: Option<&Keep>,
    ) -> StoreResult<Write> {
        let (status, field, payload, message) = match outcome {
            Finish::Completed(result) => ("completed", "result", result.as_str(), ""),
            Finish::Failed { error, message } => {
                ("failed", "error", error.as_str(), message.as_str())
            }
            Finish::Cancelled => ("cancelled", "", "", "Cancelled by request"),
        };
        let now = mcp_tasks_protocol::time::now_millis();
        let letter = match keep {
            Some(keep) if status != "cancelled" => Some(dead::letter_args(d, status, keep, now)?),
            _ => None,
        };
        let key = self.store.layout.task_key(&d.task_id, &d.owner);
        let side = letter.as_ref().map_or(&[][..], |(keys, ..)| &keys[..]);
        let mut script = self
            .store
            .on_delivery(&self.store.scripts.finish, &key, d, side);
        script
            .arg(fence)
            .arg(status)
            .arg(field)
            .arg(payload)
            .arg(message)
            .arg(now);
        if let (Some((_, json, lapses)), Some(keep)) = (&letter, keep) {
            script.arg(&d.task_id).arg(json).arg(lapses).arg(keep.max);
        }
        let (reply, _) = self.store.acknowledged(&script, &key, "finish").await?;
        replies::read(reply)
    }

    /// Acknowledge and delete a job that needs no more work (its task is terminal or gone).
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "release", task.id = %d.task_id))]
    pub async fn release(self, d: &Delivery) -> StoreResult<()> {
        let key = &d.stream;
        let mut con = self.store.con.clone();
        let _: () = redis::pipe()
            .xack(key, keys::GROUP, &[&d.entry])
            .ignore()
            .xdel(key, &[&d.entry])
            .ignore()
            .query_async(&mut con)
            .await?;
        Ok(())
    }

    /// Renew this consumer's claim on `entries` of `stream` (a [`Delivery::stream`]; resets
    /// their idle time; the delivery count does not change). Chunked so one call never
    /// carries too many ids.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn renew(self, stream: &str, consumer: &str, entries: &[String]) -> StoreResult<()> {
        self.claim_ids(stream, consumer, entries, None).await
    }

    /// Fair share: move `d`'s job, not started, to the end of its queue when the job of an
    /// owner not in `full` (the owners at their share of this worker's slots, `d`'s among
    /// them) waits within the next `window` entries; `true` when moved, and the caller
    /// runs nothing. The task itself does not change (status, version, creation time).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn defer(self, d: &Delivery, window: usize, full: &[String]) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let mut script = self
            .store
            .scripts
            .defer
            .key(self.store.layout.task_key(&d.task_id, &d.owner));
        script
            .key(&d.stream)
            .arg(&d.entry)
            .arg(keys::GROUP)
            .arg(window)
            .arg(&d.owner);
        for owner in full.iter().filter(|o| **o != d.owner) {
            script.arg(owner);
        }
        let moved: i64 = script.invoke_async(&mut con).await?;
        Ok(moved == 1)
    }

    /// Give `entries` (of the tasks whose hashes are `task_keys`) up at once: mark them idle for `lease`, so the next sweep
    /// by any worker reclaims them without waiting out the lease (graceful shutdown), and
    /// count the hand-over on each task (`handovers`) so it is not an interrupted run.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn give_up(
        self,
        stream: &str,
        consumer: &str,
        entries: &[String],
        task_keys: &[String],
        lease: Duration,
    ) -> StoreResult<()> {
        let mut con = self.store.con.clone();
        for key in task_keys {
            let _: i64 = self
                .store
                .scripts
                .handover
                .key(key)
                .invoke_async(&mut con)
                .await?;
        }
        self.claim_ids(stream, consumer, entries, Some(lease)).await
    }

    async fn claim_ids(
        self,
        stream: &str,
        consumer: &str,
        entries: &[String],
        idle: Option<Duration>,
    ) -> StoreResult<()> {
        const CHUNK: usize = 100;
        let key = stream;
        let mut con = self.store.con.clone();
        for chunk in entries.chunks(CHUNK) {
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(key)
                .arg(keys::GROUP)
                .arg(consumer)
                .arg(0)
                .arg(chunk);
            if let Some(idle) = idle {
                cmd.arg("IDLE")
                    .arg(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX));
            }
            cmd.arg("JUSTID");
            let _: redis::Value = cmd.query_async(&mut con).await?;
        }
        Ok(())
    }
}

/// The owner digest of a job entry (part of its task's key): the entry's `owner` field as
/// create.lua wrote it, else the job's owner (entries written before the owner had its own
/// field carry it in the job only), else the anonymous owner. Every reader of an entry
/// (deliveries, held jobs) builds the task key from this one function, so none can build
/// a key the others do not.
pub(crate) fn entry_owner(stream_owner: Option<String>, job: Option<&Job>) -> String {
    stream_owner
        .or_else(|| job.map(|j| j.owner.clone()).filter(|o| !o.is_empty()))
        .unwrap_or_else(|| mcp_tasks_protocol::meta::ANONYMOUS_OWNER.to_owned())
}

pub(crate) fn delivery(queue: &str, stream: &str, mut entry: Entry, fresh: bool) -> Delivery {
    let task_id = entry.take("task").unwrap_or_default();
    let stream_owner = entry.take("owner");
    let job = entry
        .take("job")
        .ok_or(BadJob::Missing)
        .and_then(|j| serde_json::from_str(&j).map_err(|e| BadJob::Undecodable(e.to_string())));
    let owner = entry_owner(stream_owner, job.as_ref().ok());
    let queued_ms = entry.take("queued").and_then(|ms| ms.parse().ok());
    let attempt = entry
        .take("attempt")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    Delivery {
        queue: queue.to_owned(),
        stream: stream.to_owned(),
        entry: entry.id,
        task_id,
        owner,
        job,
        fresh,
        queued_ms,
        attempt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_owner_is_the_field_create_wrote_else_the_jobs_else_anonymous() {
        let job = |owner: &str| -> Job {
            serde_json::from_value(serde_json::json!({
                "tool": "t", "args": {}, "caps": {}, "owner": owner
            }))
            .expect("a job")
        };
        let anonymous = mcp_tasks_protocol::meta::ANONYMOUS_OWNER;
        // The stream field is what create.lua built the task key with: taken as is.
        assert_eq!(entry_owner(Some("abc".into()), Some(&job("x"))), "abc");
        assert_eq!(entry_owner(Some(String::new()), Some(&job("x"))), "");
        assert_eq!(entry_owner(None, Some(&job("x"))), "x");
        assert_eq!(entry_owner(None, Some(&job(""))), anonymous);
        assert_eq!(entry_owner(None, None), anonymous);
    }
}
