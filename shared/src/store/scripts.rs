//! The Lua scripts, each prefixed with `scripts/prelude.lua` and wrapped once in a
//! `redis::Script` (EVALSHA, loaded again on NOSCRIPT).

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
}

const PRELUDE: &str = include_str!("scripts/prelude.lua");

fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

impl Scripts {
    pub(crate) fn load() -> Scripts {
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
        }
    }
}
