//! Dead letters: tasks that ended `failed` after their last attempt (and, where the tool
//! says so, `completed` with `isError`), kept per queue stream for operators to list and
//! to run again. The finish script writes a letter with the terminal state, reading the
//! job's arguments from the stream entry before it goes; a redrive makes a **new** task of
//! the same tool, arguments and owner, linked both ways (`related`), on the queue a live
//! worker serves the tool on now ([`DeadLetters::redrive_served`], what `mcp-tasks
//! redrive` and the console's Redrive button both call).

use std::collections::HashSet;

use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};

use crate::handles::DeadLetters;
use crate::idempotency::call_digest;
use crate::registry::{ADVERT_STALE_MS, ToolAdvert};
use crate::{Created, Delivery, Job, NewTask, OwnerLimits, StoreError, StoreResult, keys};

/// How a finish keeps its task as a dead letter.
#[derive(Debug, Clone)]
pub struct Keep {
    /// How long the letter stays listed (ms).
    pub for_ms: u64,
    /// At most this many letters per stream; the oldest leave first.
    pub max: u32,
    /// What went wrong, in a line (the error's message, or the tool error's text).
    pub reason: String,
}

/// One dead letter, as `mcp-tasks dead` and the console list it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The task that failed.
    pub task_id: String,
    /// Its owner's digest.
    pub owner: String,
    /// Its tool.
    pub tool: String,
    /// Its queue.
    pub queue: String,
    /// The stream its job was read from (where the letter is kept).
    pub stream: String,
    /// `failed`, or `completed` for a tool error the tool keeps.
    pub outcome: String,
    /// What went wrong, in a line.
    pub reason: String,
    /// The attempts it had.
    pub attempts: u32,
    /// When it ended (ms since the epoch, the worker's clock).
    pub at_ms: i64,
    /// The job (tool, arguments, capabilities); `None` when its stream entry was gone or
    /// its job could not be read (a poison entry: the letter is listed all the same).
    #[serde(default, deserialize_with = "lenient_job")]
    pub job: Option<Job>,
    /// The task a redrive made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redriven: Option<String>,
}

/// A letter's job, or `None` for one that is not a [`Job`]: the rest of the letter still
/// reads.
fn lenient_job<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Job>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// The worker's part of a letter: a [`DeadLetter`] without its job (the finish script
/// appends the job as the stream entry holds it).
#[derive(Serialize)]
struct Header<'a> {
    task_id: &'a str,
    owner: &'a str,
    tool: &'a str,
    queue: &'a str,
    stream: &'a str,
    outcome: &'a str,
    reason: &'a str,
    attempts: u32,
    at_ms: i64,
}

/// The finish script's arguments for a letter: its keys, and the task id, the letter's
/// JSON without the closing brace, when it lapses and the most kept.
pub(crate) fn letter_args(
    d: &Delivery,
    outcome: &str,
    keep: &Keep,
    now_ms: i64,
) -> StoreResult<([String; 3], String, i64)> {
    let header = Header {
        task_id: &d.task_id,
        owner: &d.owner,
        tool: d.tool(),
        queue: &d.queue,
        stream: &d.stream,
        outcome,
        reason: &keep.reason,
        attempts: d.attempt,
        at_ms: now_ms,
    };
    let mut json =
        serde_json::to_string(&header).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    // An object: its text ends with the brace the script closes after the job.
    json.pop();
    let lapses = now_ms.saturating_add(i64::try_from(keep.for_ms).unwrap_or(i64::MAX));
    Ok((
        [
            keys::dead_key(&d.stream),
            keys::dead_rows_key(&d.stream),
            keys::dead_ages_key(&d.stream),
        ],
        json,
        lapses,
    ))
}

/// What a redrive made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redriven {
    /// The new task.
    pub task_id: String,
    /// The letter had been redriven before: this is that task, not another.
    pub again: bool,
}

/// Where a tool is served now, as a redrive runs it: the queue, TTL and poll interval of
/// a live worker's advert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The queue its jobs go to.
    pub queue: String,
    /// The task's lifetime (ms); `None`: never expires.
    pub ttl_ms: Option<u64>,
    /// The suggested poll interval (ms).
    pub poll_ms: u64,
}

/// Where `tool` is served as of `now_ms`, by the first of `adverts` heard from within
/// [`ADVERT_STALE_MS`]; `None` when no live worker advertises it.
#[must_use]
pub fn served(tool: &str, adverts: &[ToolAdvert], now_ms: i64) -> Option<Served> {
    let advert = adverts
        .iter()
        .filter(|a| now_ms - a.heartbeat_ms <= ADVERT_STALE_MS)
        .find(|a| a.tool.name == tool)?;
    Some(Served {
        queue: advert.queue.clone(),
        ttl_ms: (advert.ttl_ms > 0).then_some(advert.ttl_ms),
        poll_ms: advert.poll_interval_ms,
    })
}

/// What a redrive where the tool is served now came to ([`DeadLetters::redrive_served`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redrive {
    /// This task was made now.
    Made(String),
    /// The letter had been redriven before, as this task: nothing was made.
    Before(String),
    /// No live worker advertises the letter's tool: nothing was made.
    Unserved,
}

impl Redrive {
    /// What the operator is told of this redrive of `letter` (`mcp-tasks redrive` prints
    /// it, the console shows it).
    #[must_use]
    pub fn message(&self, letter: &DeadLetter) -> String {
        let id = &letter.task_id;
        match self {
            Redrive::Made(made) => format!(
                "redriven task {id} as {made} ({} for its owner, linked both ways)",
                letter.tool
            ),
            Redrive::Before(made) => {
                format!("task {id} was redriven before, as {made}: no new task")
            }
            Redrive::Unserved => format!(
                "no worker serves tool {} now; nothing was created (start one, then redrive again)",
                letter.tool
            ),
        }
    }
}

/// The first line of `text` (a letter's error, its owner), at most `most` characters,
/// with `…` where it was cut: how `mcp-tasks dead` and the console show a row.
#[must_use]
pub fn one_line(text: &str, most: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= most && line.len() == text.len() {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(most.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The id of the task a redrive of `task_id` makes: the same for every redrive of one
/// letter (an idempotency key of its own), so a retried redrive makes no second task. It
/// starts with a control character, which no client's key may hold (they are printable
/// ASCII): no call of the owner can name the same task.
fn redrive_key(task_id: &str) -> String {
    format!("\u{1}redrive:{task_id}")
}

impl DeadLetters<'_> {
    /// The live letters of `queues`, newest first.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn list(self, queues: &[String]) -> StoreResult<Vec<DeadLetter>> {
        let now = mcp_tasks_protocol::time::now_millis();
        let mut con = self.store.con.clone();
        let mut letters = Vec::new();
        for queue in queues {
            for stream in self.store.layout.queue_streams(queue) {
                let ids: Vec<String> = con
                    .zrangebyscore(keys::dead_key(&stream), now, "+inf")
                    .await?;
                if ids.is_empty() {
                    continue;
                }
                let rows: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(keys::dead_rows_key(&stream))
                    .arg(&ids)
                    .query_async(&mut con)
                    .await?;
                letters.extend(
                    rows.iter()
                        .flatten()
                        .filter_map(|row| serde_json::from_str::<DeadLetter>(row).ok()),
                );
            }
        }
        letters.sort_by(|a, b| b.at_ms.cmp(&a.at_ms).then(a.task_id.cmp(&b.task_id)));
        Ok(letters)
    }

    /// The live letter of task `task_id` among `queues`' streams.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn find(self, queues: &[String], task_id: &str) -> StoreResult<Option<DeadLetter>> {
        let now = mcp_tasks_protocol::time::now_millis();
        let mut con = self.store.con.clone();
        let mut seen = HashSet::new();
        for queue in queues {
            for stream in self.store.layout.queue_streams(queue) {
                if !seen.insert(stream.clone()) {
                    continue;
                }
                let lapses: Option<i64> = con.zscore(keys::dead_key(&stream), task_id).await?;
                if lapses.is_none_or(|at| at < now) {
                    continue;
                }
                let row: Option<String> = con.hget(keys::dead_rows_key(&stream), task_id).await?;
                if let Some(letter) = row.and_then(|r| serde_json::from_str(&r).ok()) {
                    return Ok(Some(letter));
                }
            }
        }
        Ok(None)
    }

    /// Run `letter` again as a new task of the same tool, arguments and owner on `queue`
    /// (where the tool is served now), living `ttl_ms` (`None`: never expires), polled
    /// every `poll_ms`: linked both ways, and the letter marked. A second redrive of one
    /// letter answers the first's task while it exists (callers check
    /// [`DeadLetter::redriven`] first).
    ///
    /// # Errors
    /// Redis unavailable or not confirmed by replicas; [`StoreError::Rejected`] for a
    /// letter whose job was not kept.
    pub async fn redrive(
        self,
        letter: &DeadLetter,
        queue: &str,
        ttl_ms: Option<u64>,
        poll_ms: u64,
    ) -> StoreResult<Redriven> {
        let Some(job) = &letter.job else {
            return Err(StoreError::Rejected(format!(
                "task {} has no arguments kept (its job had left the queue): it cannot run again",
                letter.task_id
            )));
        };
        let job = Job {
            traceparent: None,
            ..job.clone()
        };
        let task_id = self
            .store
            .layout
            .keyed_task_id(&letter.owner, &redrive_key(&letter.task_id));
        let digest = call_digest(&job.args);
        let created = self
            .store
            .tasks()
            .create(&NewTask {
                id: &task_id,
                ttl_ms,
                poll_ms,
                owner: &letter.owner,
                limits: OwnerLimits::default(),
                queue,
                // At the priority it failed at.
                priority: self.store.layout.priority_of_stream(&letter.stream),
                job: &job,
                keyed: Some(&digest),
            })
            .await?;
        let again = match created {
            Created::At(_) => false,
            Created::Existing => true,
            Created::Limited(_) | Created::Conflict(_) => {
                return Err(StoreError::Rejected(format!(
                    "the redrive of {} was refused: {created:?}",
                    letter.task_id
                )));
            }
        };
        self.link(&task_id, &letter.owner, &letter.task_id).await?;
        self.link(&letter.task_id, &letter.owner, &task_id).await?;
        self.mark(letter, &task_id).await?;
        Ok(Redriven { task_id, again })
    }

    /// Run `letter` again where its tool is served now (the queue, TTL and poll interval a
    /// live worker advertises, see [`served`]), unless it was redriven before: then that
    /// task is answered and nothing is made, whether or not the tool is served.
    ///
    /// # Errors
    /// As [`DeadLetters::redrive`].
    pub async fn redrive_served(self, letter: &DeadLetter) -> StoreResult<Redrive> {
        if let Some(made) = &letter.redriven {
            return Ok(Redrive::Before(made.clone()));
        }
        let adverts = self.store.fleet().adverts().await?;
        let now = mcp_tasks_protocol::time::now_millis();
        let Some(at) = served(&letter.tool, &adverts, now) else {
            return Ok(Redrive::Unserved);
        };
        let made = self
            .redrive(letter, &at.queue, at.ttl_ms, at.poll_ms)
            .await?;
        Ok(if made.again {
            Redrive::Before(made.task_id)
        } else {
            Redrive::Made(made.task_id)
        })
    }

    /// Add `other` to the `related` ids of task `id` (if its hash is still there).
    async fn link(self, id: &str, owner: &str, other: &str) -> StoreResult<()> {
        let mut con = self.store.con.clone();
        let _: i64 = self
            .store
            .scripts
            .link
            .key(self.store.layout.task_key(id, owner))
            .arg(other)
            .invoke_async(&mut con)
            .await?;
        Ok(())
    }

    /// Note on `letter`'s row which task its redrive made (if the row is still there).
    async fn mark(self, letter: &DeadLetter, task_id: &str) -> StoreResult<()> {
        let marked = DeadLetter {
            redriven: Some(task_id.to_owned()),
            ..letter.clone()
        };
        let row = serde_json::to_string(&marked).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let rows = keys::dead_rows_key(&letter.stream);
        let mut con = self.store.con.clone();
        let there: bool = con.hexists(&rows, &letter.task_id).await?;
        if there {
            let _: () = con.hset(&rows, &letter.task_id, row).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_or_multi_line_text_is_clipped_to_its_first_line() {
        assert_eq!(one_line("short", 10), "short");
        assert_eq!(one_line("0123456789abc", 10), "012345678…");
        assert_eq!(one_line("first\nsecond", 10), "first…");
    }
    use mcp_tasks_protocol::tools::Tool;

    fn advert(name: &str, queue: &str, ttl_ms: u64, heartbeat_ms: i64) -> ToolAdvert {
        ToolAdvert {
            tool: Tool {
                name: name.to_owned(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object"}),
                extra: serde_json::Map::new(),
            },
            queue: queue.to_owned(),
            policy: crate::registry::Policy::Auto,
            needs: Vec::new(),
            pre_input: Default::default(),
            outlives_caller: false,
            priority: crate::Priority::Normal,
            ttl_ms,
            poll_interval_ms: 750,
            rank: 0,
            heartbeat_ms,
        }
    }

    /// A redrive goes where a live advert serves the tool now; a stale advert serves
    /// nothing, and a TTL of 0 is one that never expires.
    #[test]
    fn a_tool_is_served_by_its_live_adverts_only() {
        let now = 1_000_000;
        let adverts = [
            advert("flaky", "old", 60_000, now - ADVERT_STALE_MS - 1),
            advert("flaky", "fast", 0, now - 1_000),
            advert("other", "default", 60_000, now),
        ];
        assert_eq!(
            served("flaky", &adverts, now),
            Some(Served {
                queue: "fast".to_owned(),
                ttl_ms: None,
                poll_ms: 750,
            })
        );
        assert_eq!(
            served("other", &adverts, now).map(|s| s.ttl_ms),
            Some(Some(60_000))
        );
        assert_eq!(served("gone", &adverts, now), None);
        assert_eq!(served("flaky", &adverts[..1], now), None, "stale only");
    }
}
