//! Stored bytes per owner (`MCPT_LIMIT_STORED_BYTES`): what an owner's tasks keep in Redis
//! (the job's arguments from the create, the result from the finish), counted until the
//! task expires.
//!
//! The count lives in the owner's slot (`scripts/stored.lua`), apart from the tasks: bytes
//! are added per expiry bucket ([`BUCKET`] wide) and a bucket leaves the total once it has
//! lapsed, so the total falls as tasks expire without anything watching them (at most a
//! bucket late). It is an upper bound: a job's arguments leave Redis when the job ends
//! (its queue entry is deleted) but stay counted until the task expires, and a result
//! counted just before its finish found the task taken over or gone stays counted too.

use std::time::Duration;

use crate::handles::{Limits, Tasks};
use crate::{StoreResult, keys};

/// Width of an expiry bucket.
pub const BUCKET: Duration = Duration::from_secs(5);

/// How long an owner's counts are kept after their last change: past the longest TTL
/// (`MCPT_MAX_TTL` is at most 365 days) plus the retention after it.
const KEPT: Duration = Duration::from_secs(366 * 24 * 3600);

/// What is being stored, which decides when the limit refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// A create's job: refused while the owner is at or over the limit.
    Create,
    /// A result: refused when it would take the owner past the limit.
    Result,
}

/// The answer of [`Limits::count_stored`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Counted; the owner's total now.
    Yes(u64),
    /// Refused by the limit; nothing counted; the owner's total.
    Refused(u64),
}

impl Limits<'_> {
    /// Count `bytes` of `owner`'s that Redis keeps until `lapses_ms` (ms since the epoch;
    /// `None`: never) against `limit` (0: none).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn count_stored(
        self,
        owner: &str,
        bytes: usize,
        lapses_ms: Option<i64>,
        limit: u64,
        what: Stored,
    ) -> StoreResult<Counted> {
        let mut con = self.store.con.clone();
        let reply: (u8, i64) = self
            .store
            .scripts
            .stored
            .key(keys::stored_key(owner))
            .key(keys::stored_buckets_key(owner))
            .arg(bytes)
            .arg(lapses_ms.unwrap_or(0).max(0))
            .arg(limit)
            .arg(match what {
                Stored::Create => "create",
                Stored::Result => "result",
            })
            .arg(ms(BUCKET))
            .arg(ms(KEPT))
            .invoke_async(&mut con)
            .await?;
        let total = u64::try_from(reply.1).unwrap_or(0);
        Ok(if reply.0 == 1 {
            Counted::Yes(total)
        } else {
            Counted::Refused(total)
        })
    }

    /// Take back `bytes` counted by [`Limits::count_stored`] for a create that then failed
    /// or was refused (the same `lapses_ms`).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn uncount_stored(
        self,
        owner: &str,
        bytes: usize,
        lapses_ms: Option<i64>,
    ) -> StoreResult<()> {
        let mut con = self.store.con.clone();
        let _: (u8, i64) = self
            .store
            .scripts
            .stored
            .key(keys::stored_key(owner))
            .key(keys::stored_buckets_key(owner))
            .arg(-i64::try_from(bytes).unwrap_or(i64::MAX))
            .arg(lapses_ms.unwrap_or(0).max(0))
            .arg(0)
            .arg("undo")
            .arg(ms(BUCKET))
            .arg(ms(KEPT))
            .invoke_async(&mut con)
            .await?;
        Ok(())
    }
}

impl Tasks<'_> {
    /// When task `id` of `owner` expires (ms since the epoch): `Some(None)` when it never
    /// does, `None` when it is gone.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn expiry(self, id: &str, owner: &str) -> StoreResult<Option<Option<i64>>> {
        let mut con = self.store.con.clone();
        let at: i64 = redis::cmd("PEXPIRETIME")
            .arg(self.store.layout.task_key(id, owner))
            .query_async(&mut con)
            .await?;
        Ok(match at {
            -2 => None,
            -1 => Some(None),
            at => Some(Some(at)),
        })
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
