//! Tasks: create (with the owner's limits), read, answer and cancel; what a client's
//! requests do to a task's hash.

use redis::AsyncCommands;

use crate::handles::Tasks;
use crate::replies::{self, Cancelled, Counted};
use crate::{Job, StoreError, StoreResult, TaskRecord, keys, observe};

/// What the gateway stores for a new task and its job.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    /// Fresh id from [`crate::new_task_id`].
    pub id: &'a str,
    /// Lifetime; `None` never expires.
    pub ttl_ms: Option<u64>,
    /// Suggested poll interval.
    pub poll_ms: u64,
    /// Principal digest.
    pub owner: &'a str,
    /// The owner's limits to enforce.
    pub limits: OwnerLimits,
    /// Queue to enqueue on.
    pub queue: &'a str,
    /// Which of the queue's streams: workers take `high` jobs first.
    pub priority: crate::Priority,
    /// The job.
    pub job: &'a Job,
    /// For a call with an idempotency key (its id from [`crate::keys::Layout::keyed_task_id`]):
    /// the digest of its arguments ([`crate::idempotency::call_digest`]). A task already
    /// under this id is then the answer, not a second one.
    pub keyed: Option<&'a str>,
}

/// Per-owner limits checked when a task is created (0 turns one off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnerLimits {
    /// Tasks per minute.
    pub per_minute: u32,
    /// Unfinished tasks at once.
    pub active: u32,
}

/// Which limit refused a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`OwnerLimits::per_minute`].
    PerMinute,
    /// [`OwnerLimits::active`].
    Active,
}

/// Outcome of [`Tasks::create`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Created at this time (ms since the epoch, Redis clock).
    At(i64),
    /// Refused by the owner's limit; nothing was written.
    Limited(Limit),
    /// A keyed create whose task already exists with the same tool and arguments: that task
    /// is the answer; nothing was written.
    Existing,
    /// A keyed create whose task already exists for another call; nothing was written.
    Conflict(Differs),
}

/// What differs between a keyed call and the task its key already names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Differs {
    /// Another tool.
    Tool,
    /// The same tool, other arguments.
    Arguments,
}

/// Outcome of [`Tasks::answer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Answers recorded (or ignored: keys not outstanding, terminal task).
    Ok,
    /// No such task for this owner.
    NotFound,
    /// The answer for an outstanding key has the wrong shape; nothing was recorded.
    Invalid {
        /// The key.
        key: String,
        /// The method of the request it answers.
        method: String,
    },
}

impl Tasks<'_> {
    /// Create the task hash (with expiry) and enqueue its job, atomically; returns `createdAt` ms.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "create", task.id = %t.id))]
    pub async fn create(self, t: &NewTask<'_>) -> StoreResult<Created> {
        let job = serde_json::to_string(t.job).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let ttl = t.ttl_ms.map(|v| v.to_string()).unwrap_or_default();
        let minute = mcp_tasks_protocol::time::now_millis().max(0) as u64 / 60_000;
        let key = self.store.layout.task_key(t.id, t.owner);
        let mut script = self.store.scripts.create.key(&key);
        let cluster = self.store.layout.is_cluster();
        // In a cluster: whether the owner's limits counted this task now (and take it back
        // if it is not made).
        let mut counted = false;
        if cluster {
            match self.count_limits_in_cluster(t, &ttl, minute).await? {
                Counted::Refused(refused) => return Ok(refused),
                Counted::Known => {}
                Counted::Yes => counted = true,
            }
            script.key(self.store.layout.task_stream(t.id, t.queue, t.priority));
        } else {
            script
                .key(keys::priority_queue_key(t.queue, t.priority))
                .key(keys::rate_key(t.owner, minute))
                .key(keys::active_key(t.owner));
        }
        script
            .arg(t.id)
            .arg(ttl)
            .arg(t.poll_ms)
            .arg(t.owner)
            .arg(&t.job.tool)
            .arg(t.queue)
            .arg(job)
            .arg(t.ttl_ms.map_or(0, crate::hash_lifetime_ms));
        if cluster {
            // Counted above, in the owner's slot.
            script.arg(0).arg(0);
        } else {
            script.arg(t.limits.per_minute).arg(t.limits.active);
        }
        script.arg(t.keyed.unwrap_or(""));
        let (reply, confirmed) = match self.store.acknowledged(&script, &key, "create").await {
            Ok(done) => done,
            Err(e) => {
                if counted {
                    self.give_limits_back(t, minute, true).await;
                }
                return Err(e);
            }
        };
        let created: Created = replies::read(reply)?;
        if counted && matches!(created, Created::Existing | Created::Conflict(_)) {
            // Counted above for a task that was not made; its id names the task that
            // exists, which keeps its place among the unfinished.
            self.give_limits_back(t, minute, false).await;
        }
        if t.keyed.is_some() && !confirmed {
            // Not cancelled, unlike an unkeyed create: the caller retries with its key and
            // finds this task (waited for again), or, if a failover lost it, makes it anew.
            return Err(StoreError::Unreplicated { op: "keyed create" });
        }
        if matches!(created, Created::At(_)) && !confirmed {
            // Not durable, so not handed out: cancel it (on the shared connection, no second
            // wait) so it does not run unasked, and let the caller retry.
            if let Err(e) = self.cancel_as(t.id, t.owner, false).await {
                tracing::warn!(error = %e, task.id = t.id, "cannot cancel an unconfirmed create");
            }
            return Err(StoreError::Unreplicated { op: "create" });
        }
        Ok(created)
    }

    /// In a cluster the owner's limits live in their own slot: check and count them before
    /// the create (a create that then fails gives them back, [`Tasks::give_limits_back`]).
    /// [`Counted::Known`] when the task's id is counted already (a keyed retry): then the
    /// create script answers the task that exists.
    async fn count_limits_in_cluster(
        self,
        t: &NewTask<'_>,
        ttl: &str,
        minute: u64,
    ) -> StoreResult<Counted> {
        if t.limits.per_minute == 0 && t.limits.active == 0 {
            return Ok(Counted::Known);
        }
        let mut con = self.store.con.clone();
        let reply: Vec<redis::Value> = self
            .store
            .scripts
            .limits
            .key(keys::rate_key(t.owner, minute))
            .key(keys::active_key(t.owner))
            .arg(t.id)
            .arg(ttl)
            .arg(t.limits.per_minute)
            .arg(t.limits.active)
            .invoke_async(&mut con)
            .await?;
        replies::read(reply)
    }

    /// Take back what [`Tasks::count_limits_in_cluster`] counted for a create that made
    /// nothing, so a failure is not a creation (best effort): the minute's count, and with
    /// `unfinished` the id's place in the unfinished set.
    async fn give_limits_back(self, t: &NewTask<'_>, minute: u64, unfinished: bool) {
        let mut undo = redis::pipe();
        if t.limits.per_minute > 0 {
            undo.decr(keys::rate_key(t.owner, minute), 1).ignore();
        }
        if unfinished && t.limits.active > 0 {
            undo.zrem(keys::active_key(t.owner), t.id).ignore();
        }
        let mut con = self.store.con.clone();
        let undone: redis::RedisResult<()> = undo.query_async(&mut con).await;
        if let Err(e) = undone {
            tracing::debug!(error = %e, "owner limits not given back");
        }
    }

    /// Drop the finished (or vanished) tasks from `owner`'s unfinished set. Run when the owner
    /// reaches the limit, so the count is exact then.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn prune_active(self, owner: &str) -> StoreResult<()> {
        let key = keys::active_key(owner);
        let mut con = self.store.con.clone();
        let ids: Vec<String> = con.zrange(&key, 0, -1).await?;
        if ids.is_empty() {
            return Ok(());
        }
        let statuses: Vec<Option<String>> = if self.store.layout.is_cluster() {
            // A pipeline must stay in one slot in a cluster: one command per task, sent
            // together on the multiplexed connections.
            let reads = ids.iter().map(|id| {
                let mut con = self.store.con.clone();
                let key = self.store.layout.task_key(id, owner);
                async move { con.hget::<_, _, Option<String>>(key, "status").await }
            });
            futures_util::future::try_join_all(reads).await?
        } else {
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.hget(keys::task_key(id, owner), "status");
            }
            pipe.query_async(&mut con).await?
        };
        let done: Vec<&String> = ids
            .iter()
            .zip(&statuses)
            .filter(|(_, s)| {
                s.as_deref()
                    .is_none_or(|s| matches!(s, "completed" | "failed" | "cancelled"))
            })
            .map(|(id, _)| id)
            .collect();
        if !done.is_empty() {
            let _: () = con.zrem(&key, &done).await?;
        }
        Ok(())
    }

    /// Read one task (one `HGETALL`); `None` when unknown or expired.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "get", task.id = %id))]
    pub async fn get(self, id: &str, owner: &str) -> StoreResult<Option<TaskRecord>> {
        let mut con = self.store.con.clone();
        let fields: Vec<(String, String)> =
            con.hgetall(self.store.layout.task_key(id, owner)).await?;
        Ok(TaskRecord::from_fields(id, fields))
    }

    /// `owner`'s task as `tasks/get` renders it ([`TaskRecord::to_detailed`]): one `HMGET`
    /// of the fields a `DetailedTask` shows. A finished task's hash holds half again as many
    /// (its queue entry, fence, tool, version), which an `HGETALL` reply would carry and the
    /// gateway parse for nothing. A task waiting for input is read whole, for its requests.
    /// `None` when unknown or expired.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "view", task.id = %id))]
    pub async fn view(self, id: &str, owner: &str) -> StoreResult<Option<TaskRecord>> {
        const SHOWN: [&str; 10] = [
            "status", "msg", "created", "updated", "ttl", "poll", "owner", "result", "error",
            "related",
        ];
        let mut con = self.store.con.clone();
        let values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.store.layout.task_key(id, owner))
            .arg(&SHOWN)
            .query_async(&mut con)
            .await?;
        let fields = SHOWN
            .into_iter()
            .zip(values)
            .filter_map(|(field, value)| Some((field, value?)));
        match TaskRecord::from_fields(id, fields) {
            Some(rec)
                if rec.status == Some(mcp_tasks_protocol::tasks::TaskStatus::InputRequired) =>
            {
                self.get(id, owner).await
            }
            found => Ok(found),
        }
    }

    /// Read several tasks in one pipeline.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn get_many(
        self,
        ids: &[String],
        owner: &str,
    ) -> StoreResult<Vec<Option<TaskRecord>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let replies: Vec<Vec<(String, String)>> = if self.store.layout.is_cluster() {
            // One slot per pipeline in a cluster: one command per task, sent together.
            let reads = ids.iter().map(|id| {
                let mut con = self.store.con.clone();
                let key = self.store.layout.task_key(id, owner);
                async move { con.hgetall::<_, Vec<(String, String)>>(key).await }
            });
            futures_util::future::try_join_all(reads).await?
        } else {
            let mut pipe = redis::pipe();
            for id in ids {
                pipe.hgetall(keys::task_key(id, owner));
            }
            let mut con = self.store.con.clone();
            pipe.query_async(&mut con).await?
        };
        Ok(ids
            .iter()
            .zip(replies)
            .map(|(id, fields)| TaskRecord::from_fields(id, fields))
            .collect())
    }

    /// `tasks/update`: record `answers` (key, shape mask, answer JSON) for `owner`'s task.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "answer", task.id = %id))]
    pub async fn answer(
        self,
        id: &str,
        owner: &str,
        answers: &[(String, u8, String)],
    ) -> StoreResult<Answer> {
        let task = self.store.layout.task_key(id, owner);
        let mut inv = self.store.scripts.answer.key(&task);
        inv.arg(self.store.layout.events_channel(id)).arg(owner);
        for (key, mask, json) in answers {
            inv.arg(key).arg(*mask).arg(json);
        }
        let (reply, confirmed) = self.store.acknowledged(&inv, &task, "answer").await?;
        let answer: Answer = replies::read(reply)?;
        if matches!(answer, Answer::Ok) && !confirmed {
            // Recorded on the primary only: a failover now would lose it, so the client is
            // not told it landed. A retry is harmless: answered keys are ignored.
            return Err(StoreError::Unreplicated { op: "answer" });
        }
        Ok(answer)
    }

    /// `tasks/cancel` for `owner`; `false` when there is no such task for that owner.
    ///
    /// # Errors
    /// Redis unavailable.
    #[tracing::instrument(name = "store", level = "debug", skip_all, fields(store.op = "cancel", task.id = %id))]
    pub async fn cancel(self, id: &str, owner: &str) -> StoreResult<bool> {
        self.cancel_as(id, owner, true).await
    }

    /// [`Tasks::cancel`], as an acknowledged change (waiting for replicas) or not.
    async fn cancel_as(self, id: &str, owner: &str, acknowledged: bool) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let key = self.store.layout.task_key(id, owner);
        let mut inv = self.store.scripts.cancel.key(&key);
        inv.arg(self.store.layout.events_channel(id))
            .arg(owner)
            .arg(keys::GROUP);
        if self.store.layout.is_cluster() {
            // A cluster runs a script only on the keys it declares: read which stream the
            // job is on first (it never changes; the script checks it).
            let stream: Option<String> = con.hget(&key, "stream").await?;
            if let Some(stream) = stream {
                inv.key(stream);
            }
            inv.arg("declared");
        }
        let (reply, confirmed) = if acknowledged {
            self.store.acknowledged(&inv, &key, "cancel").await?
        } else {
            (inv.invoke_async(&mut con).await?, true)
        };
        let cancelled: Cancelled = replies::read(reply)?;
        if let Some(tool) = &cancelled.unrun_tool {
            // Ended here, not by a worker: counted here.
            observe::report(observe::Observed::CancelledUnrun { tool });
        }
        if cancelled.found && !confirmed {
            // As for an answer: not told it landed; a retry finds it done, or does it.
            return Err(StoreError::Unreplicated { op: "cancel" });
        }
        Ok(cancelled.found)
    }
}
