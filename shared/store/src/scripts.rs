//! The Lua scripts, each prefixed with `scripts/prelude.lua` and wrapped once in a
//! `redis::Script` (EVALSHA, loaded again on NOSCRIPT; in Redis Cluster `SCRIPT LOAD` goes
//! to every primary, and EVALSHA to the one owning the script's first key).
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
}

const PRELUDE: &str = include_str!("scripts/prelude.lua");

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
        let script = |body: &str| {
            Script::new(&format!(
                "local PUBLISH, NUMSUB = '{publish}', {numsub}\n{PRELUDE}\n{body}"
            ))
        };
        Scripts {
            create: script(include_str!("scripts/create.lua")),
            start: script(include_str!("scripts/start.lua")),
            status: script(include_str!("scripts/status.lua")),
            ask: script(include_str!("scripts/ask.lua")),
            answer: script(include_str!("scripts/answer.lua")),
            cancel: script(include_str!("scripts/cancel.lua")),
            finish: script(include_str!("scripts/finish.lua")),
            sweep_lease: Script::new(include_str!("scripts/sweep_lease.lua")),
            handover: Script::new(include_str!("scripts/handover.lua")),
            listener: script(include_str!("scripts/listener.lua")),
            touch_session: Script::new(include_str!("scripts/touch_session.lua")),
            session_slot: script(include_str!("scripts/session_slot.lua")),
            defer: script(include_str!("scripts/defer.lua")),
            stored: script(include_str!("scripts/stored.lua")),
            hold: script(include_str!("scripts/hold.lua")),
            unhold: script(include_str!("scripts/unhold.lua")),
            prune_held: script(include_str!("scripts/prune_held.lua")),
            retry: script(include_str!("scripts/retry.lua")),
            due: script(include_str!("scripts/due.lua")),
            acquire: script(include_str!("scripts/acquire.lua")),
            tally: script(include_str!("scripts/tally.lua")),
            park: script(include_str!("scripts/park.lua")),
            rate: script(include_str!("scripts/rate.lua")),
            limits: script(include_str!("scripts/limits.lua")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PRELUDE;

    /// The scripts loaded without the prelude (`Script::new` of the file alone).
    const BARE: [(&str, &str); 3] = [
        ("sweep_lease", include_str!("scripts/sweep_lease.lua")),
        ("handover", include_str!("scripts/handover.lua")),
        ("touch_session", include_str!("scripts/touch_session.lua")),
    ];

    /// A script loaded bare that calls a prelude function fails in Redis at run time
    /// ("nonexistent global variable"); this finds it at build time instead.
    #[test]
    fn scripts_loaded_without_the_prelude_call_none_of_its_functions() {
        let functions: Vec<&str> = PRELUDE
            .lines()
            .filter_map(|l| l.strip_prefix("local function ")?.split('(').next())
            .collect();
        assert!(functions.len() > 5, "prelude functions: {functions:?}");
        for (name, body) in BARE {
            for f in &functions {
                // A call of `f`, not of a longer name ending in it (`unpack(` is not `ack(`).
                let called = body.match_indices(&format!("{f}(")).any(|(at, _)| {
                    !body[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | ':'))
                });
                assert!(
                    !called,
                    "{name}.lua calls the prelude's {f} but is loaded without it"
                );
            }
        }
    }
}
