//! The user and operator subcommands of `mcp-tasks` (everything but `up`, which is in
//! `up/`): argument parsing, where they connect, exit codes and the runtime they run on.
//!
//! Where: `--url`/`--redis` and `MCPT_URL`/`MCPT_REDIS_URL` when any of them is given (a
//! missing one takes its default below, never the local `up`'s: a remote gateway's tools
//! are not described by a local Redis); else the runtime file of the `up` running with the
//! data directory `--data`, `MCPT_DATA_DIR` or the default (`data.rs`); else the defaults.
//!
//! Exit codes: 0 success; 1 failure (the server or Redis could not be reached, a JSON-RPC
//! error, a failed or cancelled task, a tool result with `isError`, invalid arguments); 64
//! usage error; 130 interrupted by Ctrl-C.

mod args;
mod client;
mod dead;
mod ops;
mod result;
mod strikes;
mod targets;
mod tasks;
mod terminal;
mod tools;

use std::process::ExitCode;

use serde_json::Value;

pub(crate) use args::{Command, parse};
pub(crate) use targets::Endpoint;
use targets::{OpsSource, env, ops_source, targets};

/// Why a subcommand stopped: an exit code and the line to print on stderr, if any.
#[derive(Debug)]
pub(crate) struct Fail {
    code: u8,
    line: Option<String>,
}

impl Fail {
    /// A usage error (exit 64).
    fn usage(why: impl std::fmt::Display) -> Fail {
        Fail {
            code: 64,
            line: Some(format!(
                "mcp-tasks: {why} (usage: mcp-tasks COMMAND ...; `mcp-tasks help` lists them)"
            )),
        }
    }

    /// A failure at run time (exit 1), prefixed with the program name.
    fn runtime(why: impl std::fmt::Display) -> Fail {
        Fail::line(1, format!("mcp-tasks: {why}"))
    }

    /// Exit `code` printing `line` exactly.
    fn line(code: u8, line: String) -> Fail {
        Fail {
            code,
            line: Some(line),
        }
    }

    /// Exit `code`; whatever needed saying was said.
    fn quiet(code: u8) -> Fail {
        Fail { code, line: None }
    }
}

/// Print a usage error (one line); exit 64.
pub(crate) fn usage(why: impl std::fmt::Display) -> ExitCode {
    Fail::usage(why).exit()
}

impl Fail {
    /// Print the line, if any; the exit code.
    fn exit(self) -> ExitCode {
        if let Some(line) = self.line {
            eprintln!("{line}");
        }
        ExitCode::from(self.code)
    }
}

/// Run `command` (any but `up`) on a runtime of its own.
pub(crate) fn run(command: Command) -> ExitCode {
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail::runtime(format!("cannot start the runtime: {e}")))
        .and_then(|runtime| runtime.block_on(execute(command)));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(fail) => fail.exit(),
    }
}

async fn execute(command: Command) -> Result<(), Fail> {
    let client = |o: Endpoint, up| {
        let url = targets(o.url, None, up, env)?.url;
        client::Client::new(&url).map_err(Fail::usage)
    };
    match command {
        Command::Up { .. } => Err(Fail::usage("`up` runs on its own")),
        Command::Tools { endpoint, up } => tools::tools(&client(endpoint, up)?).await,
        Command::Queues {
            endpoint,
            redis: o,
            up,
        } => match ops_source(endpoint.url, o.redis, up, env)? {
            OpsSource::Redis(r) => ops::queues(&r).await,
            OpsSource::Gateway(u) => {
                ops::queues_via(&client::Client::new(&u).map_err(Fail::usage)?).await
            }
        },
        Command::Workers {
            endpoint,
            redis: o,
            up,
        } => match ops_source(endpoint.url, o.redis, up, env)? {
            OpsSource::Redis(r) => ops::workers(&r).await,
            OpsSource::Gateway(u) => {
                ops::workers_via(&client::Client::new(&u).map_err(Fail::usage)?).await
            }
        },
        Command::Tasks {
            status,
            tool,
            queue,
            id,
            limit,
            endpoint,
            up,
        } => {
            let filter = ops::TaskFilter {
                status,
                tool,
                queue,
                id,
                limit,
            };
            ops::tasks_via(&client(endpoint, up)?, &filter).await
        }
        Command::Call {
            tool,
            args,
            task,
            detach,
            endpoint,
            up,
        } => {
            let client = client(endpoint, up)?;
            let arguments: Value = serde_json::from_str(&args)
                .map_err(|e| Fail::usage(format!("--args is not JSON: {e}")))?;
            if !arguments.is_object() {
                return Err(Fail::usage("--args must be a JSON object"));
            }
            tasks::call(&client, &tool, arguments, task, detach).await
        }
        Command::Strike {
            tool,
            when,
            cancel_running,
            redis,
            up,
        } => {
            let redis = targets(None, redis.redis, up, env)?.redis;
            strikes::strike(&redis, &tool, when, cancel_running).await
        }
        Command::Restore {
            tool,
            when,
            redis,
            up,
        } => strikes::restore(&targets(None, redis.redis, up, env)?.redis, &tool, when).await,
        Command::Strikes { redis, up } => {
            strikes::list(&targets(None, redis.redis, up, env)?.redis).await
        }
        Command::Dead {
            tool,
            since,
            json,
            redis,
            up,
        } => {
            let redis = targets(None, redis.redis, up, env)?.redis;
            dead::list(&redis, tool.as_deref(), since, json).await
        }
        Command::Redrive { id, redis, up } => {
            dead::redrive(&targets(None, redis.redis, up, env)?.redis, &id).await
        }
        Command::Get { id, endpoint, up } => tasks::get(&client(endpoint, up)?, &id).await,
        Command::Cancel { id, endpoint, up } => tasks::cancel(&client(endpoint, up)?, &id).await,
        Command::Watch { ids, endpoint, up } => tasks::watch(&client(endpoint, up)?, &ids).await,
    }
}
