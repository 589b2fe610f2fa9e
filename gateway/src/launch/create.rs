//! Creating a call's task within its owner's limits: stored bytes, then the rate and the
//! unfinished tasks, then the create script (which also finds a keyed call's task). What
//! a created task answers is the parent's.

use mcp_tasks_store::stored::{self, Stored};
use mcp_tasks_store::{Created, Differs, Limit, NewTask};

use crate::error::DispatchError;
use crate::state::State;

/// Bytes of `v` as compact JSON, counted without building the text.
pub(super) fn json_len(v: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

/// What a create made.
pub(super) enum Made {
    /// A new task, created at this time (ms since the epoch).
    At(i64),
    /// Nothing: a keyed call's task was already there.
    Existing,
}

/// Create the task within its owner's limits: its stored bytes are counted first (refused
/// while the owner is over; taken back when the create fails, is refused or finds its
/// keyed task there), then the task counts ([`create_within_counts`]).
pub(super) async fn create(state: &State, new: &NewTask<'_>) -> Result<Made, DispatchError> {
    let limits = &state.config.limits;
    if limits.stored_bytes == 0 {
        return create_within_counts(state, new).await;
    }
    let lapses = new.ttl_ms.map(|ttl| {
        let lifetime = i64::try_from(mcp_tasks_store::hash_lifetime_ms(ttl)).unwrap_or(i64::MAX);
        mcp_tasks_protocol::time::now_millis().saturating_add(lifetime)
    });
    let bytes = json_len(new.job);
    if let stored::Counted::Refused(total) = state
        .store
        .limits()
        .count_stored(
            new.owner,
            bytes,
            lapses,
            limits.stored_bytes,
            Stored::Create,
        )
        .await?
    {
        return Err(DispatchError::Limited {
            message: format!(
                "Too much stored: this caller's tasks keep {total} bytes in Redis, at most {} (MCPT_LIMIT_STORED_BYTES); wait for tasks to expire",
                limits.stored_bytes
            ),
            limit: "stored_bytes",
            max: limits.stored_bytes,
        });
    }
    let created = create_within_counts(state, new).await;
    if !matches!(created, Ok(Made::At(_))) {
        // Nothing kept: the bytes are not the owner's to carry.
        if let Err(e) = state
            .store
            .limits()
            .uncount_stored(new.owner, bytes, lapses)
            .await
        {
            tracing::debug!(error = %e, "stored bytes of a failed create not taken back");
        }
    }
    created
}

/// [`create`] within the owner's task counts (rate, unfinished). At the unfinished-task
/// limit the owner's finished tasks are pruned from the count first (they leave it
/// lazily), then it is tried once more.
async fn create_within_counts(state: &State, new: &NewTask<'_>) -> Result<Made, DispatchError> {
    if let Some(at) = create_counted(state, new).await? {
        return Ok(at);
    }
    state
        .prunes
        .run(new.owner, state.store.tasks().prune_active(new.owner))
        .await?;
    // Tried again whatever the prune found: another request's may have made room.
    create_counted(state, new)
        .await?
        .ok_or_else(|| active_limited(state.config.limits.active_tasks))
}

/// One create: `None` when refused at the unfinished-task limit.
async fn create_counted(state: &State, new: &NewTask<'_>) -> Result<Option<Made>, DispatchError> {
    match state.store.tasks().create(new).await? {
        Created::At(at) => Ok(Some(Made::At(at))),
        Created::Existing => Ok(Some(Made::Existing)),
        Created::Conflict(differs) => Err(DispatchError::KeyReused {
            differs: match differs {
                Differs::Tool => "tool",
                Differs::Arguments => "arguments",
            },
        }),
        Created::Limited(Limit::Active) => Ok(None),
        Created::Limited(Limit::PerMinute) => {
            let limits = &state.config.limits;
            Err(DispatchError::Limited {
                message: format!(
                    "Too many tasks: at most {} tasks per minute per caller (MCPT_LIMIT_TASKS_PER_MINUTE); retry in a minute",
                    limits.tasks_per_minute
                ),
                limit: "tasks_per_minute",
                max: u64::from(limits.tasks_per_minute),
            })
        }
    }
}

fn active_limited(max: u32) -> DispatchError {
    DispatchError::Limited {
        message: format!(
            "Too many unfinished tasks: at most {max} per caller (MCPT_LIMIT_ACTIVE_TASKS); wait for one to finish or cancel one"
        ),
        limit: "active_tasks",
        max: u64::from(max),
    }
}
