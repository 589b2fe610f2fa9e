//! The Lua scripts, each prefixed with the sections of `scripts/prelude/` it calls and
//! wrapped once in a `redis::Script` (EVALSHA, loaded again on NOSCRIPT; in Redis Cluster
//! `SCRIPT LOAD` goes to every primary, and EVALSHA to the one owning the script's first
//! key).
//!
//! The prelude publishes with `PUBLISH`, or with `SPUBLISH` in a cluster (a task's channel
//! is then a shard channel in the slot of its hash); on one Redis it publishes only to
//! channels with subscribers ([`Scripts::load`]). Those are the differences between the
//! sets of scripts.

use redis::Script;

pub(crate) struct Scripts {
    pub(crate) create: Script,
    pub(crate) start: Script,
    pub(crate) status: Script,
    pub(crate) ask: Script,
    pub(crate) answer: Script,
    pub(crate) cancel: Script,
    pub(crate) finish: Script,
    pub(crate) sweep_lease: Script,
    pub(crate) handover: Script,
    pub(crate) listener: Script,
    pub(crate) touch_session: Script,
    pub(crate) session_slot: Script,
    pub(crate) defer: Script,
    pub(crate) stored: Script,
    pub(crate) hold: Script,
    pub(crate) unhold: Script,
    pub(crate) prune_held: Script,
    pub(crate) retry: Script,
    pub(crate) due: Script,
    pub(crate) acquire: Script,
    pub(crate) tally: Script,
    pub(crate) park: Script,
    pub(crate) rate: Script,
    /// Redis Cluster only: the owner's limits, before `create` (another slot).
    pub(crate) limits: Script,
    /// A redriven dead letter's link to its new task (and back).
    pub(crate) link: Script,
    /// A worker's non-blocking read of its streams, `high` first.
    pub(crate) read: Script,
}

/// The prelude's sections. Every script with a prelude takes [`CLOCK`], then the sections
/// it names in [`PRELUDED`], in this order. Redis runs a script's whole text on every
/// call, defining each function again: the whole prelude before `create.lua`, which calls
/// three of its functions, was a tenth of that script's CPU (8.5–9.5 µs against 7.7–8.7
/// µs a call: 200,000 pipelined calls on a private Redis, eight interleaved rounds).
const CLOCK: &str = include_str!("scripts/prelude/clock.lua");
/// A task hash and its channel: loading, committing, publishing, expiring, acknowledging.
const TASK: &str = include_str!("scripts/prelude/task.lua");
/// A stream entry's fields, to queue it again.
const REQUEUE: &str = include_str!("scripts/prelude/requeue.lua");
/// An owner's limits.
const LIMITS: &str = include_str!("scripts/prelude/limits.lua");
/// The sections in the order they are prepended.
const SECTIONS: [&str; 3] = [TASK, REQUEUE, LIMITS];

/// Every script with a prelude: its name, the sections it takes beside [`CLOCK`], its text.
const PRELUDED: [(&str, &[&str], &str); 21] = [
    ("create", &[LIMITS], include_str!("scripts/create.lua")),
    ("start", &[TASK], include_str!("scripts/start.lua")),
    ("status", &[TASK], include_str!("scripts/status.lua")),
    ("ask", &[TASK], include_str!("scripts/ask.lua")),
    ("answer", &[TASK], include_str!("scripts/answer.lua")),
    ("cancel", &[TASK], include_str!("scripts/cancel.lua")),
    ("finish", &[TASK], include_str!("scripts/finish.lua")),
    ("listener", &[], include_str!("scripts/listener.lua")),
    (
        "session_slot",
        &[],
        include_str!("scripts/session_slot.lua"),
    ),
    ("defer", &[REQUEUE], include_str!("scripts/defer.lua")),
    ("stored", &[], include_str!("scripts/stored.lua")),
    ("hold", &[TASK, REQUEUE], include_str!("scripts/hold.lua")),
    ("unhold", &[TASK], include_str!("scripts/unhold.lua")),
    ("prune_held", &[], include_str!("scripts/prune_held.lua")),
    ("retry", &[TASK, REQUEUE], include_str!("scripts/retry.lua")),
    ("due", &[], include_str!("scripts/due.lua")),
    ("acquire", &[], include_str!("scripts/acquire.lua")),
    ("tally", &[], include_str!("scripts/tally.lua")),
    ("park", &[TASK, REQUEUE], include_str!("scripts/park.lua")),
    ("rate", &[], include_str!("scripts/rate.lua")),
    ("limits", &[LIMITS], include_str!("scripts/limits.lua")),
];

/// A script's text: the backend's `PUBLISH` and `NUMSUB`, [`CLOCK`], the sections it
/// takes (in [`SECTIONS`] order), then its own.
fn text(header: &str, sections: &[&str], body: &str) -> String {
    let mut text = format!("{header}{CLOCK}");
    for section in SECTIONS.iter().filter(|s| sections.contains(s)) {
        text.push_str(section);
    }
    text.push_str(body);
    text
}

impl Scripts {
    /// The scripts for one Redis (`cluster` false) or for Redis Cluster. With `gated`,
    /// a change is published only when its channel has subscribers on the Redis the
    /// script runs on (`PUBSUB NUMSUB`): right for one Redis, where every subscriber is.
    /// Where Redis can fail over (Sentinel, a cluster, one Redis with `WAIT` replicas) a
    /// subscriber can be on a replica, which the primary's publishes reach by replication
    /// but its count leaves out: a subscription that outlived a switch on the demoted
    /// primary, a shard channel subscribed on a replica (Redis Cluster allows it; the
    /// cluster failover test lost answers when publishing was gated there). Those always
    /// publish. The one case left: one Redis URL with no `WAIT` replicas behind which
    /// Redis fails over while a subscriber's connection stays on the former primary.
    pub(crate) fn load(cluster: bool, gated: bool) -> Scripts {
        let publish = if cluster { "SPUBLISH" } else { "PUBLISH" };
        let numsub = if gated { "'NUMSUB'" } else { "nil" };
        let header = format!("local PUBLISH, NUMSUB = '{publish}', {numsub}\n");
        let script = |name: &str| match PRELUDED.iter().find(|(n, ..)| *n == name) {
            Some((_, sections, body)) => Script::new(&text(&header, sections, body)),
            None => unreachable!("no script {name} in PRELUDED"),
        };
        Scripts {
            create: script("create"),
            start: script("start"),
            status: script("status"),
            ask: script("ask"),
            answer: script("answer"),
            cancel: script("cancel"),
            finish: script("finish"),
            sweep_lease: Script::new(include_str!("scripts/sweep_lease.lua")),
            handover: Script::new(include_str!("scripts/handover.lua")),
            listener: script("listener"),
            touch_session: Script::new(include_str!("scripts/touch_session.lua")),
            session_slot: script("session_slot"),
            defer: script("defer"),
            stored: script("stored"),
            hold: script("hold"),
            unhold: script("unhold"),
            prune_held: script("prune_held"),
            retry: script("retry"),
            due: script("due"),
            acquire: script("acquire"),
            tally: script("tally"),
            park: script("park"),
            rate: script("rate"),
            limits: script("limits"),
            link: Script::new(include_str!("scripts/link.lua")),
            read: Script::new(include_str!("scripts/read.lua")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CLOCK, PRELUDED, SECTIONS};

    /// The scripts loaded without the prelude (`Script::new` of the file alone).
    const BARE: [(&str, &str); 4] = [
        ("sweep_lease", include_str!("scripts/sweep_lease.lua")),
        ("read", include_str!("scripts/read.lua")),
        ("handover", include_str!("scripts/handover.lua")),
        ("touch_session", include_str!("scripts/touch_session.lua")),
    ];

    /// The functions a prelude section defines.
    fn functions(section: &str) -> Vec<&str> {
        section
            .lines()
            .filter_map(|l| l.strip_prefix("local function ")?.split('(').next())
            .collect()
    }

    /// Whether `text` calls `f`, not a longer name ending in it (`unpack(` is not `ack(`).
    fn calls(text: &str, f: &str) -> bool {
        text.match_indices(&format!("{f}(")).any(|(at, _)| {
            !text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | ':'))
        })
    }

    /// A script that calls a function of a section it was not given fails in Redis at run
    /// time ("nonexistent global variable"), and only on the path that calls it; this
    /// finds it at build time instead, for the sections' own calls too.
    #[test]
    fn every_script_has_the_prelude_sections_it_calls() {
        let all: Vec<&str> = std::iter::once(CLOCK).chain(SECTIONS).collect();
        assert!(all.iter().all(|s| !functions(s).is_empty()));
        let preluded = PRELUDED.iter().map(|(name, sections, body)| {
            let given: Vec<&str> = std::iter::once(CLOCK)
                .chain(sections.iter().copied())
                .collect();
            (*name, given, *body)
        });
        let bare = BARE.iter().map(|(name, body)| (*name, Vec::new(), *body));
        for (name, given, body) in preluded.chain(bare) {
            let texts: Vec<&str> = std::iter::once(body).chain(given.iter().copied()).collect();
            for section in all.iter().filter(|s| !given.contains(s)) {
                for f in functions(section) {
                    for text in &texts {
                        assert!(
                            !calls(text, f),
                            "{name}.lua (or a section it takes) calls the prelude's {f}, \
                             whose section it is not given"
                        );
                    }
                }
            }
        }
    }

    /// The table lists each script once, and `Scripts::load` finds every one it names.
    #[test]
    fn every_preluded_script_is_listed_once_and_loads() {
        for (i, (name, ..)) in PRELUDED.iter().enumerate() {
            assert!(
                PRELUDED[i + 1..].iter().all(|(other, ..)| other != name),
                "{name} is listed twice"
            );
        }
        for cluster in [false, true] {
            for gated in [false, true] {
                drop(super::Scripts::load(cluster, gated));
            }
        }
    }
}
