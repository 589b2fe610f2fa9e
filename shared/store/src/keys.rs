//! Every Redis key, channel and stream name, built in one function each.
//!
//! The hash-tag braces are written here and nowhere else. Standalone (the free functions
//! below): all keys of one task share the tag `{ID}`. Redis Cluster ([`Layout::Cluster`]):
//! a task belongs to one of `MCPT_QUEUE_SHARDS` shards, whose tag is written in its id
//! (`tsk3-5_…`: tag `3-5`), and its hash, its event channel and the queue streams of that
//! shard share the tag, so
//! every script still runs in one slot: `mcpt:task:{TAG}:ID:OWNER`, `mcpt:events:{TAG}:ID`,
//! `mcpt:queue:{TAG}:NAME` (and `…:high`, `…:low`: one stream per priority),
//! `mcpt:sweep:{TAG}:NAME`. Owner, session and tool keys keep
//! their own tags (other slots) in both layouts.

use crate::Priority;

// The keys built for every task and request are joined from their parts (`concat` sizes
// the string once) rather than by `format!`, which cost about 700 instructions a key.

/// `mcpt:task:{ID}:OWNER` — the task hash. The owner digest is part of the name: a caller
/// can only ever address its own tasks, and someone else's task id names a key that does
/// not exist — the same answer, in the same one command, as an unknown id (T-25).
pub fn task_key(task_id: &str, owner: &str) -> String {
    ["mcpt:task:{", task_id, "}:", owner].concat()
}

/// `mcpt:events:{ID}` — the channel a task's state is published on after each change.
pub fn events_channel(task_id: &str) -> String {
    ["mcpt:events:{", task_id, "}"].concat()
}

/// The task id inside a channel name built by [`events_channel`].
pub fn task_of_channel(channel: &str) -> Option<&str> {
    channel.strip_prefix("mcpt:events:{")?.strip_suffix('}')
}

/// `mcpt:queue:{NAME}` — the job stream of one queue.
pub fn queue_key(queue: &str) -> String {
    ["mcpt:queue:{", queue, "}"].concat()
}

/// The stream of `queue`'s jobs of `priority` on one Redis: [`queue_key`] for `normal`,
/// `mcpt:queue:{NAME}:high` and `…:low` for the others (a queue name has no `:`).
pub fn priority_queue_key(queue: &str, priority: Priority) -> String {
    with_priority(queue_key(queue), priority)
}

/// `stream` (a `normal` one) with the suffix of `priority`.
fn with_priority(stream: String, priority: Priority) -> String {
    match priority {
        Priority::Normal => stream,
        other => [stream.as_str(), ":", other.as_str()].concat(),
    }
}

/// `mcpt:sweep:{NAME}` — the lease of the one worker sweeping a queue for abandoned jobs.
pub fn sweep_key(queue: &str) -> String {
    format!("mcpt:sweep:{{{queue}}}")
}

/// `mcpt:rate:{OWNER}:MINUTE` — tasks an owner created in one minute (minutes since the epoch).
pub fn rate_key(owner: &str, minute: u64) -> String {
    ["mcpt:rate:{", owner, "}:", &minute.to_string()].concat()
}

/// `mcpt:active:{OWNER}` — an owner's unfinished tasks, scored by when they expire; the set
/// expires with the longest-lived of them.
pub fn active_key(owner: &str) -> String {
    ["mcpt:active:{", owner, "}"].concat()
}

/// `mcpt:stored:{OWNER}` — the bytes an owner's tasks keep, per expiry bucket and in all
/// (`MCPT_LIMIT_STORED_BYTES`).
pub fn stored_key(owner: &str) -> String {
    format!("mcpt:stored:{{{owner}}}")
}

/// `mcpt:stored-buckets:{OWNER}` — when each of an owner's stored-bytes buckets lapses.
pub fn stored_buckets_key(owner: &str) -> String {
    format!("mcpt:stored-buckets:{{{owner}}}")
}

/// `mcpt:sessions:{OWNER}` — an owner's open 2025 sessions (`MCPT_LIMIT_SESSIONS`), scored
/// by when they were opened.
pub fn sessions_key(owner: &str) -> String {
    format!("mcpt:sessions:{{{owner}}}")
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
/// digest, or `s:SID` for an anonymous session), scored by each task's expiry time.
pub fn listed_key(scope: &str) -> String {
    format!("mcpt:listed:{{{scope}}}")
}

/// `mcpt:forward:{NAME}` — list of requests (`prompts/*`, `resources/*`) for the workers
/// holding sessions with the upstream `NAME`; gateways push, one of those workers pops.
pub fn forward_key(upstream: &str) -> String {
    format!("mcpt:forward:{{{upstream}}}")
}

/// `mcpt:forwarded:{GATEWAY}` — the list answers to one gateway process' forwarded
/// requests are pushed to (`GATEWAY`: an id the process draws at start).
pub fn forwarded_key(gateway: &str) -> String {
    format!("mcpt:forwarded:{{{gateway}}}")
}

/// `mcpt:upstreams` — hash of upstream advertisements (entry name → JSON): which
/// upstreams serve prompts and resources, written by live workers.
pub const UPSTREAMS_KEY: &str = "mcpt:upstreams";
/// `mcpt:tools` — hash of tool advertisements (tool name → JSON), written by live workers.
pub const TOOLS_KEY: &str = "mcpt:tools";
/// `mcpt:{tallies}` — hash of per-process counters (process id → [`crate::tally::Tally`]
/// JSON) for the console's charts, written by every gateway and worker every few seconds.
pub const TALLIES_KEY: &str = "mcpt:{tallies}";
/// `mcpt:{tallies}:at` — sorted set of the same processes by their last write (Redis' clock,
/// ms), by which the writers drop the tallies of processes gone. One hash tag with
/// [`TALLIES_KEY`], so one script touches both in a cluster.
pub const TALLIES_AT_KEY: &str = "mcpt:{tallies}:at";
/// `mcpt:queues` — set of every queue a worker has served (added by its start), so
/// operators can list queues without scanning the key space.
pub const QUEUES_KEY: &str = "mcpt:queues";

/// `mcpt:strikes` — hash of the kill switch's strikes (strike id → JSON), written by
/// `mcp-tasks strike` and `restore`, read whole once a second by gateways and workers.
pub const STRIKES_KEY: &str = "mcpt:strikes";

/// `mcpt:held:{…}` — the jobs of one stream held by a strike (entry id → its fields as a
/// JSON array): the stream's name with `held` for `queue`, so it keeps the stream's hash
/// tag (`mcpt:queue:{NAME}` → `mcpt:held:{NAME}`, in a cluster `mcpt:held:{TAG}:NAME`).
pub fn held_key(stream: &str) -> String {
    beside_stream("held", stream)
}

/// `mcpt:KIND:{…}`: a key of one stream's, its name with `KIND` for `queue`, so that it
/// keeps the stream's hash tag (and slot, in a cluster).
fn beside_stream(kind: &str, stream: &str) -> String {
    let rest = stream.strip_prefix("mcpt:queue:").unwrap_or(stream);
    format!("mcpt:{kind}:{rest}")
}

/// `mcpt:held:{…}:ends` — when the task of each held job of one stream ends (zset: entry
/// id → its task's creation + TTL in ms), so that held jobs of expired tasks are dropped
/// (`prune_held.lua`) rather than kept until a restore. Same hash tag as the stream.
pub fn held_ends_key(stream: &str) -> String {
    format!("{}:ends", held_key(stream))
}

/// `mcpt:delayed:{…}` — the jobs of one stream waiting to be tried again, scored by when
/// they are due (the stream's name with `delayed` for `queue`, keeping its hash tag).
pub fn delayed_key(stream: &str) -> String {
    beside_stream("delayed", stream)
}

/// `mcpt:dead:{…}` — the dead letters of one stream (zset: task id → when the letter
/// lapses, ms), the stream's name with `dead` for `queue` so it keeps the stream's hash tag;
/// `…:rows` holds each letter's JSON ([`crate::dead::DeadLetter`]).
pub fn dead_key(stream: &str) -> String {
    beside_stream("dead", stream)
}

/// `mcpt:dead:{…}:at` — when each dead letter of one stream failed (zset: task id → ms):
/// beyond `MCPT_DEAD_LETTERS_MAX` the oldest leave first, whatever their tools keep.
pub fn dead_ages_key(stream: &str) -> String {
    format!("{}:at", dead_key(stream))
}

/// `mcpt:dead:{…}:rows` — each dead letter of one stream: task id → its JSON.
pub fn dead_rows_key(stream: &str) -> String {
    format!("{}:rows", dead_key(stream))
}

/// The name of a concurrency limit: `TOOL`, or `TOOL=VALUE` for a `concurrency_key` value
/// (braces and `%` in either are percent-encoded, so the name can be a hash tag).
pub fn limit_name(tool: &str, value: Option<&str>) -> String {
    let enc = |s: &str| {
        s.replace('%', "%25")
            .replace('{', "%7B")
            .replace('}', "%7D")
    };
    match value {
        None => enc(tool),
        Some(v) => format!("{}={}", enc(tool), enc(v)),
    }
}

/// The keys of limit `name` ([`limit_name`]), one hash tag: `mcpt:running:{NAME}` (task id
/// → lease end), `mcpt:line:{NAME}` (task id → arrival), `mcpt:asked:{NAME}` (task id →
/// when it last asked).
pub fn limit_keys(name: &str) -> (String, String, String) {
    (
        format!("mcpt:running:{{{name}}}"),
        format!("mcpt:line:{{{name}}}"),
        format!("mcpt:asked:{{{name}}}"),
    )
}

/// `mcpt:starts:{NAME}` — a rate limit's recent starts (task id → ms), for limit `NAME`
/// ([`limit_name`]); it expires a window after the last start.
pub fn starts_key(name: &str) -> String {
    format!("mcpt:starts:{{{name}}}")
}

/// The consumer group every queue stream has.
pub const GROUP: &str = "workers";

/// Hash slots of Redis Cluster.
const SLOTS: u16 = 16384;
/// Most shards a cluster layout may have (`MCPT_QUEUE_SHARDS`).
pub const MAX_SHARDS: u16 = 1024;

/// CRC16/XMODEM, as Redis Cluster hashes keys.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster hash slot of `key` (its `{tag}` if it has a non-empty one).
pub fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = key
        .find('{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16(hashed) % SLOTS
}

/// The hash tag of shard `i` of `shards`: `I-K` with the smallest `K` whose slot lies in
/// the middle of the `i`-th of `shards` equal slices of the slot space, so the shards spread evenly over
/// the masters (which own contiguous slot ranges; `redis-cli --cluster create` makes them
/// equal) and no two shards share a slot.
pub fn shard_tag(i: u16, shards: u16) -> String {
    let shards = u32::from(shards.clamp(1, MAX_SHARDS));
    let i = u32::from(i) % shards;
    let (start, end) = (
        i * u32::from(SLOTS) / shards,
        (i + 1) * u32::from(SLOTS) / shards,
    );
    // The middle half of the slice: a slice that straddles two masters' ranges goes to
    // the one holding its centre.
    let quarter = (end - start) / 4;
    let (lo, hi) = (start + quarter, (end - quarter).max(start + quarter + 1));
    (0u32..)
        .map(|k| format!("{i}-{k}"))
        .find(|tag| (lo..hi).contains(&u32::from(slot(tag))))
        .unwrap_or_default()
}

/// The shard tag a cluster task id carries (`tsk3-5_…` → `3-5`); `None` for any other id.
pub fn tag_of_task(task_id: &str) -> Option<&str> {
    let rest = task_id.strip_prefix("tsk")?;
    let (tag, random) = rest.split_once('_')?;
    let (i, k) = tag.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit());
    (digits(i) && digits(k) && !random.is_empty()).then_some(tag)
}

/// `mcpt:queue:{TAG}:NAME` — in a cluster, the stream of one queue in the shard of tag `TAG`.
pub fn shard_queue_key(tag: &str, queue: &str) -> String {
    ["mcpt:queue:{", tag, "}:", queue].concat()
}

/// In a cluster, the stream of `queue`'s jobs of `priority` in the shard of tag `TAG`
/// ([`shard_queue_key`] for `normal`, with `:high` or `:low` after it for the others).
pub fn priority_shard_queue_key(tag: &str, queue: &str, priority: Priority) -> String {
    with_priority(shard_queue_key(tag, queue), priority)
}

/// How keys are laid out: one Redis, or a cluster with tasks spread over shards.
#[derive(Debug, Clone)]
pub enum Layout {
    /// One Redis: the free functions of this module.
    Standalone,
    /// Redis Cluster with `tags.len()` shards.
    Cluster {
        /// The tag of each shard, [`shard_tag`] of its index.
        tags: std::sync::Arc<Vec<String>>,
    },
}

impl Layout {
    /// A cluster layout of `shards` shards (1 to [`MAX_SHARDS`]).
    pub fn cluster(shards: u16) -> Layout {
        Layout::Cluster {
            tags: std::sync::Arc::new(
                (0..shards.clamp(1, MAX_SHARDS))
                    .map(|i| shard_tag(i, shards))
                    .collect(),
            ),
        }
    }

    /// Whether this is a cluster layout.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Layout::Cluster { .. })
    }

    /// The hash tag of `task_id`'s keys in a cluster: the one in the id, or for an id
    /// that names none (never created here) the id itself, a key that does not exist.
    fn tag_of(task_id: &str) -> &str {
        tag_of_task(task_id).unwrap_or(task_id)
    }

    /// The task hash ([`task_key`] standalone).
    pub fn task_key(&self, task_id: &str, owner: &str) -> String {
        match self {
            Layout::Standalone => task_key(task_id, owner),
            Layout::Cluster { .. } => [
                "mcpt:task:{",
                Self::tag_of(task_id),
                "}:",
                task_id,
                ":",
                owner,
            ]
            .concat(),
        }
    }

    /// The task's event channel ([`events_channel`] standalone; a shard channel in a cluster).
    pub fn events_channel(&self, task_id: &str) -> String {
        match self {
            Layout::Standalone => events_channel(task_id),
            Layout::Cluster { .. } => {
                ["mcpt:events:{", Self::tag_of(task_id), "}:", task_id].concat()
            }
        }
    }

    /// The task id inside a channel name built by [`Layout::events_channel`].
    pub fn task_of_channel<'a>(&self, channel: &'a str) -> Option<&'a str> {
        match self {
            Layout::Standalone => task_of_channel(channel),
            Layout::Cluster { .. } => channel
                .strip_prefix("mcpt:events:{")?
                .split_once("}:")
                .map(|(_, id)| id),
        }
    }

    /// The stream a new job of `task_id` on `queue` goes to, at `priority`.
    pub fn task_stream(&self, task_id: &str, queue: &str, priority: Priority) -> String {
        let normal = match self {
            Layout::Standalone => queue_key(queue),
            Layout::Cluster { .. } => shard_queue_key(Self::tag_of(task_id), queue),
        };
        with_priority(normal, priority)
    }

    /// Every stream of `queue`: one per priority standalone, one per priority of each
    /// shard in a cluster.
    pub fn queue_streams(&self, queue: &str) -> Vec<String> {
        self.normal_streams(queue)
            .into_iter()
            .flat_map(|normal| Priority::ALL.map(|p| with_priority(normal.clone(), p)))
            .collect()
    }

    /// The priority of the jobs of `stream` (named by [`Layout::task_stream`]). After the
    /// tag come the queue's name in a cluster, then the priority's suffix but for `normal`;
    /// names have no `:`, so the count of parts tells them apart.
    pub fn priority_of_stream(&self, stream: &str) -> Priority {
        let rest = stream.split_once('}').map_or("", |(_, rest)| rest);
        let mut parts = rest.split(':').skip(1);
        if self.is_cluster() {
            parts.next();
        }
        parts
            .next()
            .and_then(Priority::parse)
            .unwrap_or(Priority::Normal)
    }

    /// The `normal` stream of `queue`: one standalone, one per shard in a cluster.
    fn normal_streams(&self, queue: &str) -> Vec<String> {
        match self {
            Layout::Standalone => vec![queue_key(queue)],
            Layout::Cluster { tags } => {
                tags.iter().map(|tag| shard_queue_key(tag, queue)).collect()
            }
        }
    }

    /// The sweep lease of one stream of `queue` ([`sweep_key`] standalone).
    pub fn sweep_key(&self, queue: &str, stream: &str) -> String {
        match self {
            Layout::Standalone => sweep_key(queue),
            Layout::Cluster { .. } => {
                let tag = stream
                    .strip_prefix("mcpt:queue:{")
                    .and_then(|s| s.split_once('}'))
                    .map_or("", |(tag, _)| tag);
                format!("mcpt:sweep:{{{tag}}}:{queue}")
            }
        }
    }

    /// The id of a new task: [`crate::new_task_id`] standalone; in a cluster the
    /// same 122 random bits after `tsk` and the tag of a shard picked at random
    /// (`tsk3-5_…`). The id names the tag itself, so a task stays readable whatever
    /// `MCPT_QUEUE_SHARDS` says later.
    pub fn new_task_id(&self) -> String {
        let id = crate::new_task_id();
        match self {
            Layout::Standalone => id,
            Layout::Cluster { tags } => {
                let n = u32::try_from(tags.len()).unwrap_or(1).max(1);
                let tag = usize::try_from(rand_below(n))
                    .ok()
                    .and_then(|i| tags.get(i))
                    .map_or("0-0", String::as_str);
                format!("tsk{tag}{}", &id[3..])
            }
        }
    }

    /// The task id of `owner`'s call under idempotency key `key`
    /// ([`crate::idempotency::keyed_task_id`]); in a cluster with the tag of a shard the
    /// same pair always picks, so every gateway names the same hash.
    pub fn keyed_task_id(&self, owner: &str, key: &str) -> String {
        let id = crate::idempotency::keyed_task_id(owner, key);
        match self {
            Layout::Standalone => id,
            Layout::Cluster { tags } => {
                let pick = id.bytes().fold(0usize, |h, b| {
                    h.wrapping_mul(31).wrapping_add(usize::from(b))
                });
                let tag = tags
                    .get(pick % tags.len().max(1))
                    .map_or("0-0", String::as_str);
                format!("tsk{tag}{}", &id[3..])
            }
        }
    }
}

/// A random number below `n` (from a fresh v4 UUID's random bits).
fn rand_below(n: u32) -> u32 {
    let raw = uuid::Uuid::new_v4().as_u128();
    u32::try_from((raw >> 64) % u128::from(n)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from the Redis Cluster specification and redis-rs' routing tests.
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{bar}pattern"), 5061);
        assert_eq!(slot("a{}b"), slot("a{}b"));
        assert_eq!(slot("{}bar"), crc16(b"{}bar") % 16384);
    }

    #[test]
    fn shard_tags_spread_evenly_over_three_masters() {
        // `redis-cli --cluster create` with 3 masters: 0-5460, 5461-10922, 10923-16383.
        let master = |s: u16| usize::from(s > 5460) + usize::from(s > 10922);
        for shards in [3u16, 6, 8, 16, 64] {
            let mut per = [0u32; 3];
            for i in 0..shards {
                per[master(slot(&shard_tag(i, shards)))] += 1;
            }
            let (lo, hi) = (per.iter().min().copied(), per.iter().max().copied());
            assert!(
                hi.unwrap_or(0) - lo.unwrap_or(0) <= 1,
                "{shards} shards: {per:?}"
            );
        }
        let tags: std::collections::HashSet<u16> = (0..MAX_SHARDS)
            .map(|i| slot(&shard_tag(i, MAX_SHARDS)))
            .collect();
        assert_eq!(
            tags.len(),
            usize::from(MAX_SHARDS),
            "two shards share a slot"
        );
    }

    #[test]
    fn cluster_keys_of_a_task_share_its_shard_slot() {
        let layout = Layout::cluster(8);
        for _ in 0..100 {
            let id = layout.new_task_id();
            assert!(crate::is_plausible_task_id(&id), "{id}");
            let tag = tag_of_task(&id).expect("a shard tag in the id");
            assert!((0..8).any(|i| shard_tag(i, 8) == tag), "{id}");
            let key = layout.task_key(&id, "p:ab");
            let channel = layout.events_channel(&id);
            for p in Priority::ALL {
                let stream = layout.task_stream(&id, "default", p);
                assert_eq!(slot(&key), slot(&channel));
                assert_eq!(slot(&key), slot(&stream));
                assert_eq!(slot(&key), slot(&layout.sweep_key("default", &stream)));
                assert!(layout.queue_streams("default").contains(&stream));
                assert_eq!(layout.priority_of_stream(&stream), p);
            }
            assert_eq!(layout.task_of_channel(&channel), Some(id.as_str()));
        }
        assert_eq!(
            layout.task_key("tsk3-5_abc", "anonymous"),
            "mcpt:task:{3-5}:tsk3-5_abc:anonymous"
        );
        // An id naming no shard reads a key of its own, which never exists.
        assert_eq!(
            layout.task_key("tsk_abc", "o"),
            "mcpt:task:{tsk_abc}:tsk_abc:o"
        );
        assert_eq!(tag_of_task("tsk_abc"), None);
        assert_eq!(tag_of_task("tsk3_abc"), None);
        assert_eq!(tag_of_task("tsk3-x_abc"), None);
        assert_eq!(tag_of_task("tsk3-5_"), None);
        assert_eq!(layout.queue_streams("q").len(), 8 * 3);
        // A queue may be named like a priority: its normal stream is still normal.
        let high_queue = layout.task_stream("tsk3-5_abc", "high", Priority::Normal);
        assert_eq!(high_queue, "mcpt:queue:{3-5}:high");
        assert_eq!(layout.priority_of_stream(&high_queue), Priority::Normal);
    }

    #[test]
    fn standalone_layout_is_the_free_functions() {
        let layout = Layout::Standalone;
        assert_eq!(layout.task_key("tsk_a", "o"), task_key("tsk_a", "o"));
        assert_eq!(layout.events_channel("tsk_a"), events_channel("tsk_a"));
        assert_eq!(
            layout.task_stream("tsk_a", "q", Priority::Normal),
            queue_key("q")
        );
        assert_eq!(
            layout.queue_streams("q"),
            vec![
                "mcpt:queue:{q}:high".to_owned(),
                queue_key("q"),
                "mcpt:queue:{q}:low".to_owned()
            ]
        );
        for stream in layout.queue_streams("high") {
            let p = layout.priority_of_stream(&stream);
            assert_eq!(layout.task_stream("tsk_a", "high", p), stream);
        }
        assert_eq!(layout.sweep_key("q", &queue_key("q")), sweep_key("q"));
        assert!(layout.new_task_id().starts_with("tsk_"));
    }

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
