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

mod client;
mod ops;
mod strikes;
mod tasks;
mod terminal;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use serde_json::Value;

use crate::data::Runtime;

/// Default MCP endpoint.
const DEFAULT_URL: &str = "http://127.0.0.1:8080/mcp";
/// Default Redis.
const DEFAULT_REDIS: &str = "redis://127.0.0.1:6379";
/// Environment variable naming the MCP endpoint.
const ENV_URL: &str = "MCPT_URL";
/// Environment variable naming Redis (shared with the server binaries).
const ENV_REDIS: &str = "MCPT_REDIS_URL";

/// The command line (clap derive; `mcp-tasks help` and `--help` print what it declares).
#[derive(Debug, Parser)]
#[command(
    name = "mcp-tasks",
    version,
    about = "Durable MCP tool calls: run the service on one machine, call tools as tasks, \
             and look into the queues",
    after_help = "environment:\n  \
        MCPT_TOKEN     bearer token for a gateway with MCPT_AUTH=tokens or jwt\n  \
        MCPT_DATA_DIR  up's data directory [default $XDG_DATA_HOME/mcp-tasks or \
        ~/.local/share/mcp-tasks]\n\n\
        Next to a running `up`, the other commands need no --url or --redis: they read \
        DATA_DIR/up.json\n  \
        (an `up --data DIR` needs --data DIR or MCPT_DATA_DIR=DIR here too).\n\n\
        exit codes: 0 ok, 1 failed (unreachable, JSON-RPC error, failed/cancelled task, tool \
        error,\n            invalid arguments), 64 usage error, 130 interrupted"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// One subcommand and its options.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run redis (private, unless MCPT_REDIS_URL is set), a gateway and a worker pool
    ///
    /// The private Redis keeps its data (append-only file, fsync every second) in the data
    /// directory, so tasks, answers and queues survive a restart; a task that was running
    /// resumes. Ctrl-C stops within a few seconds; a second Ctrl-C at once.
    Up {
        /// Data directory [env MCPT_DATA_DIR; default $XDG_DATA_HOME/mcp-tasks or
        /// ~/.local/share/mcp-tasks]
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Keep nothing: Redis data in a temp directory deleted on exit
        #[arg(long, conflicts_with = "data")]
        ephemeral: bool,
    },
    /// Call a tool (with --task: as a task, followed to its end)
    ///
    /// With --task declare the Tasks extension and follow the task: status lines on stderr,
    /// input asked on the terminal, the result on stdout (Ctrl-C cancels the task, exit
    /// 130); --detach prints the task id instead of following it.
    Call {
        /// The tool's name
        tool: String,
        /// The tool's arguments, a JSON object
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
        /// Declare the Tasks extension and follow the task the call starts
        #[arg(long)]
        task: bool,
        /// With --task: print the task id instead of following it
        #[arg(long, requires = "task")]
        detach: bool,
        #[command(flatten)]
        endpoint: Endpoint,
        #[command(flatten)]
        up: UpData,
    },
    /// Print the task as tasks/get returns it
    Get {
        /// The task's id
        id: String,
        #[command(flatten)]
        endpoint: Endpoint,
        #[command(flatten)]
        up: UpData,
    },
    /// Ask the server to cancel the task
    Cancel {
        /// The task's id
        id: String,
        #[command(flatten)]
        endpoint: Endpoint,
        #[command(flatten)]
        up: UpData,
    },
    /// One line per change (ID status message) until every task has ended
    Watch {
        /// The tasks' ids
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        #[command(flatten)]
        endpoint: Endpoint,
        #[command(flatten)]
        up: UpData,
    },
    /// The tools: name, whether they run as tasks, arguments
    ///
    /// The list comes from the gateway (tools/list); whether a tool runs as a task from its
    /// console (shown as ? when the console is off, or MCPT_TOKEN is not a console
    /// principal's).
    Tools {
        #[command(flatten)]
        endpoint: Endpoint,
        #[command(flatten)]
        up: UpData,
    },
    /// Per queue: length, consumer-group lag, pending jobs, consumers
    ///
    /// From the gateway's console API (--url, MCPT_URL or the running `up`; MCPT_TOKEN of a
    /// console principal when it authenticates), or from Redis with --redis or
    /// MCPT_REDIS_URL.
    Queues {
        #[command(flatten)]
        endpoint: Endpoint,
        #[command(flatten)]
        redis: RedisUrl,
        #[command(flatten)]
        up: UpData,
    },
    /// Live tools (queue, policy, heartbeat) and each queue's consumers
    ///
    /// Read as `queues` reads: the gateway's console API, or Redis with --redis.
    Workers {
        #[command(flatten)]
        endpoint: Endpoint,
        #[command(flatten)]
        redis: RedisUrl,
        #[command(flatten)]
        up: UpData,
    },
    /// The recent tasks the gateway's console has seen, newest first (filterable)
    ///
    /// Needs a gateway with MCPT_CONSOLE=on (--url, MCPT_URL or the running `up`) and,
    /// when it authenticates, MCPT_TOKEN of a principal in MCPT_CONSOLE_PRINCIPALS.
    Tasks {
        /// Only tasks in this status (working, input_required, completed, failed,
        /// cancelled)
        #[arg(long)]
        status: Option<String>,
        /// Only tasks of this tool
        #[arg(long)]
        tool: Option<String>,
        /// Only tasks of this queue
        #[arg(long)]
        queue: Option<String>,
        /// Only tasks whose id contains this
        #[arg(long, value_name = "TEXT")]
        id: Option<String>,
        /// At most this many (1 to 1000) [default 100]
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        #[command(flatten)]
        endpoint: Endpoint,
        #[command(flatten)]
        up: UpData,
    },
    /// Stop a tool fleet-wide (the kill switch) until `restore`
    ///
    /// Within a second every gateway refuses new calls with a tool error naming the strike
    /// and every worker holds the tool's queued jobs (not run, not lost) until restored or
    /// their TTL ends; running calls finish unless --cancel-running. Writes to Redis
    /// (--redis, MCPT_REDIS_URL or the running `up`'s).
    Strike {
        /// The tool's name
        tool: String,
        /// Only calls whose argument ARG is VALUE (a string, or the argument's JSON)
        #[arg(long = "where", value_name = "ARG=VALUE", value_parser = strikes::parse_where)]
        when: Option<(String, String)>,
        /// Also cancel the calls of the tool running now
        #[arg(long)]
        cancel_running: bool,
        #[command(flatten)]
        redis: RedisUrl,
        #[command(flatten)]
        up: UpData,
    },
    /// Lift a strike: new calls are accepted again and the held jobs run
    Restore {
        /// The tool's name
        tool: String,
        /// The strike's --where, as it was struck
        #[arg(long = "where", value_name = "ARG=VALUE", value_parser = strikes::parse_where)]
        when: Option<(String, String)>,
        #[command(flatten)]
        redis: RedisUrl,
        #[command(flatten)]
        up: UpData,
    },
    /// The strikes in force
    Strikes {
        #[command(flatten)]
        redis: RedisUrl,
        #[command(flatten)]
        up: UpData,
    },
}

/// Where `queues` and `workers` read: a gateway's console or Redis.
#[derive(Debug, PartialEq)]
enum OpsSource {
    /// The console API of the gateway of this MCP endpoint.
    Gateway(String),
    /// Redis at this URL.
    Redis(String),
}

/// `--redis` or `--url` as given, then MCPT_REDIS_URL or MCPT_URL, then the running `up`
/// (its console when it serves one, else its Redis), else the default Redis.
fn ops_source(
    url: Option<String>,
    redis: Option<String>,
    up: UpData,
    env: impl Fn(&str) -> Option<String>,
) -> Result<OpsSource, Fail> {
    let given = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    if let Some(r) = given(redis) {
        return Ok(OpsSource::Redis(r));
    }
    if let Some(u) = given(url) {
        return Ok(OpsSource::Gateway(u));
    }
    if let Some(r) = given(env(ENV_REDIS)) {
        return Ok(OpsSource::Redis(r));
    }
    if let Some(u) = given(env(ENV_URL)) {
        return Ok(OpsSource::Gateway(u));
    }
    match (Runtime::find(up.data.as_deref()), up.data) {
        (Some(found), _) if found.console_url.is_some() => Ok(OpsSource::Gateway(found.mcp_url)),
        (Some(found), _) => Ok(OpsSource::Redis(found.redis_url)),
        (None, Some(dir)) => Err(Fail::runtime(format!(
            "no `mcp-tasks up` is running with the data directory {}",
            dir.display()
        ))),
        (None, None) => Ok(OpsSource::Redis(DEFAULT_REDIS.to_owned())),
    }
}

/// The MCP endpoint option of the subcommands that talk to a gateway.
#[derive(Debug, clap::Args)]
pub(crate) struct Endpoint {
    /// MCP endpoint [env MCPT_URL; default: the running `up`'s, else
    /// http://127.0.0.1:8080/mcp]
    #[arg(long, value_name = "URL")]
    url: Option<String>,
}

/// The Redis option of the subcommands that read Redis.
#[derive(Debug, clap::Args)]
pub(crate) struct RedisUrl {
    /// Redis [env MCPT_REDIS_URL; default: the running `up`'s, else
    /// redis://127.0.0.1:6379]
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

/// The data directory of the running `up` the subcommands use when nothing else says
/// where to connect.
#[derive(Debug, clap::Args)]
pub(crate) struct UpData {
    /// The data directory of the `up` to use, when no --url, --redis, MCPT_URL or
    /// MCPT_REDIS_URL is given [env MCPT_DATA_DIR; default as `up`'s]
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
}

/// Parse this process's arguments. `Err` is the exit code after what needed printing was
/// printed: 0 for `help`, `--help` and `--version` (on stdout), 64 for a usage error (one
/// line on stderr).
pub(crate) fn parse() -> Result<Command, ExitCode> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli.command),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => Err(Fail::usage(first_line(&e)).exit()),
    }
}

/// clap's message as one line: its first paragraph without the `error: ` prefix (the rest
/// is a tip and the usage, which `help` prints).
fn first_line(e: &clap::Error) -> String {
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return "no command given".to_owned();
    }
    let text = e.render().to_string();
    let paragraph: Vec<&str> = text
        .trim_start()
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = paragraph.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_owned()
}

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

/// Where a subcommand connects: its MCP endpoint and its Redis.
#[derive(Debug, PartialEq)]
struct Targets {
    url: String,
    redis: String,
}

/// The flags and variables as given, each missing one its default; only when none is
/// given, the running `up`'s pair, whole (never one from each: see the module doc).
///
/// # Errors
/// `--data DIR` names a directory with no running `up`.
fn targets(
    url: Option<String>,
    redis: Option<String>,
    up: UpData,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Targets, Fail> {
    let url = url
        .or_else(|| env(ENV_URL))
        .filter(|v| !v.trim().is_empty());
    let redis = redis
        .or_else(|| env(ENV_REDIS))
        .filter(|v| !v.trim().is_empty());
    if url.is_none() && redis.is_none() {
        match (Runtime::find(up.data.as_deref()), up.data) {
            (Some(found), _) => {
                return Ok(Targets {
                    url: found.mcp_url,
                    redis: found.redis_url,
                });
            }
            (None, Some(dir)) => {
                return Err(Fail::runtime(format!(
                    "no `mcp-tasks up` is running with the data directory {}",
                    dir.display()
                )));
            }
            (None, None) => {}
        }
    }
    Ok(Targets {
        url: url.unwrap_or_else(|| DEFAULT_URL.to_owned()),
        redis: redis.unwrap_or_else(|| DEFAULT_REDIS.to_owned()),
    })
}

/// An environment variable, as [`targets`] reads it.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
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
        Command::Get { id, endpoint, up } => tasks::get(&client(endpoint, up)?, &id).await,
        Command::Cancel { id, endpoint, up } => tasks::cancel(&client(endpoint, up)?, &id).await,
        Command::Watch { ids, endpoint, up } => tasks::watch(&client(endpoint, up)?, &ids).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    fn parse(words: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("mcp-tasks").chain(words.iter().copied()))
            .map(|c| c.command)
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn call_takes_a_tool_args_and_task() {
        let call = parse(&[
            "call",
            "sleep",
            "--args",
            "{}",
            "--task",
            "--url=http://h/mcp",
        ]);
        let Ok(Command::Call {
            tool,
            args,
            task,
            detach,
            endpoint,
            ..
        }) = call
        else {
            panic!("parses as call: {call:?}");
        };
        assert_eq!(
            (tool.as_str(), args.as_str(), task, detach),
            ("sleep", "{}", true, false)
        );
        assert_eq!(endpoint.url.as_deref(), Some("http://h/mcp"));
    }

    #[test]
    fn usage_errors_are_refused_with_one_line() {
        for words in [
            &["call"][..],
            &["call", "a", "b"],
            &["call", "a", "--detach"],
            &["call", "a", "--task=yes"],
            &["get"],
            &["watch"],
            &["queues", "x"],
            &["queues", "--bogus", "u"],
            &["tasks", "--limit", "many"],
            &["get", "x", "--args"],
            &["cancel", "x", "--bogus"],
            &[],
        ] {
            let err = parse(words).expect_err("usage error");
            assert!(err.use_stderr(), "{words:?}");
            let line = first_line(&err);
            assert!(
                !line.is_empty() && !line.contains('\n'),
                "{words:?}: {line}"
            );
        }
    }

    /// Issue 16 review: `tools --url REMOTE` must not read the local `up`'s Redis. No `up`
    /// runs with this test's (missing) data directory, so only the explicit ones count.
    #[test]
    fn explicit_targets_are_not_mixed_with_an_up() {
        let none = |_: &str| None;
        let nowhere = || UpData {
            data: Some(std::env::temp_dir().join("mcpt-cli-no-up-here")),
        };
        let t = targets(Some("http://remote/mcp".into()), None, nowhere(), none)
            .unwrap_or_else(|f| panic!("{f:?}"));
        assert_eq!(
            t,
            Targets {
                url: "http://remote/mcp".into(),
                redis: DEFAULT_REDIS.into()
            }
        );
        let from_env = |name: &str| (name == ENV_REDIS).then(|| "redis://r:1".to_owned());
        let t = targets(None, None, nowhere(), from_env).unwrap_or_else(|f| panic!("{f:?}"));
        assert_eq!(
            t,
            Targets {
                url: DEFAULT_URL.into(),
                redis: "redis://r:1".into()
            }
        );
        // Nothing given and no `up` in the directory named: said, not guessed.
        let fail = targets(None, None, nowhere(), none).expect_err("no up there");
        assert_eq!(fail.code, 1);
    }
}
