//! `mcp-tasks`: the command for users and operators.
//!
//! `mcp-tasks up` runs everything on one machine: a private `redis-server` on a free port
//! keeping its data in a data directory (unless `MCPT_REDIS_URL` is set), a gateway and a
//! worker pool, and prints the MCP URL (see `up/`). `call`, `get`, `cancel`, `watch` and
//! `tools` talk MCP to a gateway; `queues` and `workers` read Redis (see `commands/`, which
//! also holds the command line); next to a running `up` they find it through its runtime
//! file (`data.rs`). `mcp-tasks help` lists them all.
//!
//! The one crate that depends on both the gateway and the worker: `up` runs them in one
//! process.

mod commands;
mod data;
mod up;

use std::process::ExitCode;

fn main() -> ExitCode {
    end_quietly_on_a_closed_stdout();
    match commands::parse() {
        Ok(commands::Command::Up { data, ephemeral }) => {
            let dir = data.or_else(data::default_dir);
            match (dir, ephemeral) {
                (Some(dir), false) => up::run(up::Keep::Dir(dir)),
                (dir, true) => up::run(up::Keep::Ephemeral(dir)),
                (None, false) => commands::usage(
                    "no data directory: HOME and XDG_DATA_HOME are unset; give --data DIR, or --ephemeral",
                ),
            }
        }
        Ok(command) => commands::run(command),
        Err(code) => code,
    }
}

/// `mcp-tasks workers | head -3`: the reader goes away, and the next print to stdout fails
/// with a broken pipe, which `println!` turns into a panic (Rust ignores SIGPIPE). End as a
/// shell expects of a program whose reader left: silently, with 141 (128 + SIGPIPE).
fn end_quietly_on_a_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let what = info.to_string();
        if what.contains("failed printing to stdout") && what.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
