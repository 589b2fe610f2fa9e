//! 2025-era sessions: the session record, the tasks a session created, synchronous calls
//! in flight, and what `tasks/list` has listed.

use std::time::Duration;

use redis::AsyncCommands;

use crate::handles::Sessions;
use crate::{StoreResult, keys};

/// How long an owner's count of open sessions is kept after its latest session opened:
/// past the longest a session is commonly kept alive, so a count is not lost while its
/// sessions live.
const SESSIONS_KEPT: Duration = Duration::from_secs(7 * 24 * 3600);

/// `d` in whole milliseconds, at least 1 (Redis refuses a zero expiry).
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl Sessions<'_> {
    /// Store 2025-era session `id`'s record for `ttl` (idle timeout), counted among
    /// `owner`'s open sessions; `false`, with nothing stored, when the owner already has
    /// `most` open (0: no limit).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn open(
        self,
        owner: &str,
        id: &str,
        record: &str,
        ttl: Duration,
        most: u32,
    ) -> StoreResult<bool> {
        // Stored first, so a prune racing this open (by another request of the owner)
        // sees it alive. Sessions end without telling (they lapse): the count is made
        // exact only when it refuses, by dropping the ones that are gone, as the
        // unfinished-task count is.
        let mut con = self.store.con.clone();
        let key = keys::session_key(id);
        let _: () = con.pset_ex(&key, record, ms(ttl).unsigned_abs()).await?;
        if most > 0
            && !self.count_session(owner, id, most).await?
            && (self.prune_sessions(owner).await? == 0
                || !self.count_session(owner, id, most).await?)
        {
            let _: () = con.del(&key).await?;
            return Ok(false);
        }
        Ok(true)
    }

    async fn count_session(self, owner: &str, id: &str, most: u32) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let counted: i64 = self
            .store
            .scripts
            .session_slot
            .key(keys::sessions_key(owner))
            .arg(id)
            .arg(most)
            .arg(ms(SESSIONS_KEPT))
            .invoke_async(&mut con)
            .await?;
        Ok(counted == 1)
    }

    /// Drop the sessions that ended or lapsed from `owner`'s count; returns how many left.
    async fn prune_sessions(self, owner: &str) -> StoreResult<usize> {
        let key = keys::sessions_key(owner);
        let mut con = self.store.con.clone();
        let ids: Vec<String> = con.zrange(&key, 0, -1).await?;
        // One command per session, sent together (each is in its own slot in a cluster).
        let checks = ids.iter().map(|id| {
            let mut con = self.store.con.clone();
            async move { con.exists::<_, bool>(keys::session_key(id)).await }
        });
        let alive = futures_util::future::try_join_all(checks).await?;
        let gone: Vec<&String> = ids
            .iter()
            .zip(&alive)
            .filter(|(_, alive)| !**alive)
            .map(|(id, _)| id)
            .collect();
        if !gone.is_empty() {
            let _: () = con.zrem(&key, &gone).await?;
        }
        Ok(gone.len())
    }

    /// Read a session record and, when `owner` owns it, restart its idle timeout (one
    /// script); `None` when it never existed, expired or was ended. Someone else's session
    /// is read (the caller refuses it) but keeps its timer.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn touch(self, id: &str, owner: &str, ttl: Duration) -> StoreResult<Option<String>> {
        let mut con = self.store.con.clone();
        let ttl_ms = ms(ttl);
        let record: Option<String> = self
            .store
            .scripts
            .touch_session
            .key(keys::session_key(id))
            .arg(ttl_ms)
            .arg(owner)
            .invoke_async(&mut con)
            .await?;
        Ok(record)
    }

    /// End `owner`'s session `id`; `false` when there was none.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn end(self, owner: &str, id: &str) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let (removed,): (u64,) = redis::pipe()
            .del(keys::session_key(id))
            .del(keys::session_tasks_key(id))
            .ignore()
            .query_async(&mut con)
            .await?;
        // Another slot in a cluster: a command of its own.
        let _: () = con.zrem(keys::sessions_key(owner), id).await?;
        Ok(removed > 0)
    }

    /// Record a task a 2025 session created as a task: in the session's set (its `GET`
    /// stream, kept `session_ttl`) and in `scope`'s list (`tasks/list`, kept `listed_ttl`,
    /// at least as long as any task lives). The list is scored by each task's expiry, so
    /// the same command that adds one drops every expired one: it holds live tasks only.
    /// One round trip.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn note_task(
        self,
        session_id: &str,
        scope: &str,
        task_id: &str,
        expires_ms: i64,
        session_ttl: Duration,
        listed_ttl: Duration,
    ) -> StoreResult<()> {
        let set = keys::session_tasks_key(session_id);
        let listed = keys::listed_key(scope);
        // Two keys of two slots: one pipeline each (a cluster refuses a cross-slot one), sent
        // together.
        let (mut a, mut b) = (self.store.con.clone(), self.store.con.clone());
        let mut session = redis::pipe();
        session
            .sadd(&set, task_id)
            .ignore()
            .pexpire(&set, ms(session_ttl))
            .ignore();
        let mut list = redis::pipe();
        let now_ms = mcp_tasks_protocol::time::now_millis();
        list.zadd(&listed, task_id, expires_ms)
            .ignore()
            .zrembyscore(&listed, "-inf", format!("({now_ms}"))
            .ignore()
            .pexpire(&listed, ms(listed_ttl))
            .ignore();
        let (session, list) = tokio::join!(
            session.query_async::<()>(&mut a),
            list.query_async::<()>(&mut b)
        );
        session?;
        list?;
        Ok(())
    }

    /// The tasks of session `session_id`, restarting the set's expiry (`ttl`).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn tasks(self, session_id: &str, ttl: Duration) -> StoreResult<Vec<String>> {
        let set = keys::session_tasks_key(session_id);
        let ttl_ms = ms(ttl);
        let mut con = self.store.con.clone();
        let (ids,): (Vec<String>,) = redis::pipe()
            .smembers(&set)
            .pexpire(&set, ttl_ms)
            .ignore()
            .query_async(&mut con)
            .await?;
        Ok(ids)
    }

    /// Forget tasks of session `session_id` (ended or expired ones).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn forget_tasks(self, session_id: &str, task_ids: &[String]) -> StoreResult<()> {
        if task_ids.is_empty() {
            return Ok(());
        }
        let mut con = self.store.con.clone();
        let _: () = con
            .srem(keys::session_tasks_key(session_id), task_ids)
            .await?;
        Ok(())
    }

    /// Remember that request `request_id` of session `session_id` runs as task `task_id`.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn remember_call(
        self,
        session_id: &str,
        request_id: &str,
        task_id: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let mut con = self.store.con.clone();
        let ttl_ms = ms(ttl);
        let _: () = con
            .pset_ex(
                keys::call_key(session_id, request_id),
                task_id,
                ttl_ms.unsigned_abs(),
            )
            .await?;
        Ok(())
    }

    /// Forget the task of request `request_id` of session `session_id` (the call ended).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn forget_call(self, session_id: &str, request_id: &str) -> StoreResult<()> {
        let mut con = self.store.con.clone();
        let _: () = con.del(keys::call_key(session_id, request_id)).await?;
        Ok(())
    }

    /// The task request `request_id` of session `session_id` runs as, if remembered.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn called_task(
        self,
        session_id: &str,
        request_id: &str,
    ) -> StoreResult<Option<String>> {
        let mut con = self.store.con.clone();
        Ok(con.get(keys::call_key(session_id, request_id)).await?)
    }

    /// Page `start..start+count` of the tasks listed for `scope`, the latest to expire first
    /// (newest first among tasks of one TTL).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn listed_tasks(
        self,
        scope: &str,
        start: usize,
        count: usize,
    ) -> StoreResult<Vec<String>> {
        let mut con = self.store.con.clone();
        let stop = isize::try_from(start + count).unwrap_or(isize::MAX) - 1;
        let start = isize::try_from(start).unwrap_or(isize::MAX);
        Ok(con.zrevrange(keys::listed_key(scope), start, stop).await?)
    }

    /// Forget listed tasks of `scope` (expired ones).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn forget_listed(self, scope: &str, task_ids: &[String]) -> StoreResult<()> {
        if task_ids.is_empty() {
            return Ok(());
        }
        let mut con = self.store.con.clone();
        let _: () = con.zrem(keys::listed_key(scope), task_ids).await?;
        Ok(())
    }
}
