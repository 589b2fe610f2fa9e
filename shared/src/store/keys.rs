//! Every Redis key, channel and stream name, built in one function each.
//!
//! The hash-tag braces are written here and nowhere else: all keys of one task share the
//! tag `{ID}`, so in Redis Cluster they live in one slot with the task's event channel.

/// `mcpt:task:{ID}:OWNER` — the task hash. The owner digest is part of the name: a caller
/// can only ever address its own tasks, and someone else's task id names a key that does
/// not exist — the same answer, in the same one command, as an unknown id (T-25).
pub fn task_key(task_id: &str, owner: &str) -> String {
    format!("mcpt:task:{{{task_id}}}:{owner}")
}

/// `mcpt:events:{ID}` — the channel a task's state is published on after each change.
pub fn events_channel(task_id: &str) -> String {
    format!("mcpt:events:{{{task_id}}}")
}

/// The task id inside a channel name built by [`events_channel`].
pub fn task_of_channel(channel: &str) -> Option<&str> {
    channel.strip_prefix("mcpt:events:{")?.strip_suffix('}')
}

/// `mcpt:queue:{NAME}` — the job stream of one queue.
pub fn queue_key(queue: &str) -> String {
    format!("mcpt:queue:{{{queue}}}")
}

/// `mcpt:sweep:{NAME}` — the lease of the one worker sweeping a queue for abandoned jobs.
pub fn sweep_key(queue: &str) -> String {
    format!("mcpt:sweep:{{{queue}}}")
}

/// `mcpt:rate:{OWNER}:MINUTE` — tasks an owner created in one minute (minutes since the epoch).
pub fn rate_key(owner: &str, minute: u64) -> String {
    format!("mcpt:rate:{{{owner}}}:{minute}")
}

/// `mcpt:active:{OWNER}` — an owner's unfinished tasks, scored by when they expire.
pub fn active_key(owner: &str) -> String {
    format!("mcpt:active:{{{owner}}}")
}

/// `mcpt:listeners:{OWNER}` — an owner's open notification streams, scored by when their
/// hold lapses.
pub fn listeners_key(owner: &str) -> String {
    format!("mcpt:listeners:{{{owner}}}")
}

/// `mcpt:session:{SID}` — a 2025-era session (its negotiated version, capabilities and
/// owner), readable by every gateway; its expiry is the session's idle timeout.
pub fn session_key(session_id: &str) -> String {
    format!("mcpt:session:{{{session_id}}}")
}

/// `mcpt:session-tasks:{SID}` — the tasks a 2025 session created as tasks, whose status
/// changes its `GET` stream carries.
pub fn session_tasks_key(session_id: &str) -> String {
    format!("mcpt:session-tasks:{{{session_id}}}")
}

/// `mcpt:call:{SID}:REQUEST_ID` — the task a 2025 session's synchronous call runs as, so a
/// `notifications/cancelled` reaching any gateway can cancel it.
pub fn call_key(session_id: &str, request_id: &str) -> String {
    format!("mcpt:call:{{{session_id}}}:{request_id}")
}

/// `mcpt:listed:{SCOPE}` — the tasks 2025-11-25 `tasks/list` shows a scope (an owner
/// digest, or `s:SID` for an anonymous session), scored by creation time.
pub fn listed_key(scope: &str) -> String {
    format!("mcpt:listed:{{{scope}}}")
}

/// `mcpt:tools` — hash of tool advertisements (tool name → JSON), written by live workers.
pub const TOOLS_KEY: &str = "mcpt:tools";

/// The consumer group every queue stream has.
pub const GROUP: &str = "workers";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_keys_share_one_hash_tag() {
        assert_eq!(
            task_key("tsk_a", "anonymous"),
            "mcpt:task:{tsk_a}:anonymous"
        );
        assert_eq!(events_channel("tsk_a"), "mcpt:events:{tsk_a}");
        assert_eq!(task_of_channel(&events_channel("tsk_a")), Some("tsk_a"));
        assert_eq!(task_of_channel("other"), None);
        assert_eq!(queue_key("default"), "mcpt:queue:{default}");
    }
}
