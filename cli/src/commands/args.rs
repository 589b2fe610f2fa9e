//! The command line as clap declares it ([`Cli`], [`Command`]) and how a parse error
//! becomes one line on stderr; what each command does is its module's.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

use super::Fail;
use super::targets::{Endpoint, RedisUrl, UpData};

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
        #[arg(long = "where", value_name = "ARG=VALUE", value_parser = super::strikes::parse_where)]
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
        #[arg(long = "where", value_name = "ARG=VALUE", value_parser = super::strikes::parse_where)]
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
    /// Tasks that failed for good (dead letters), newest first
    ///
    /// A task that ended failed after its last attempt is kept for its tool's
    /// `dead_letters` time (a week unless the catalog says otherwise; tool errors too with
    /// `dead_letter_tool_errors = true`), at most MCPT_DEAD_LETTERS_MAX per queue. Reads
    /// Redis (--redis, MCPT_REDIS_URL or the running `up`'s).
    Dead {
        /// Only this tool's
        #[arg(long)]
        tool: Option<String>,
        /// Only those that failed within this long, like 30m, 1h or 7d
        #[arg(long, value_name = "DURATION", value_parser = super::dead::parse_since)]
        since: Option<std::time::Duration>,
        /// One JSON object per line, with the job's arguments
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        redis: RedisUrl,
        #[command(flatten)]
        up: UpData,
    },
    /// Run a dead letter again: a new task with the same tool, arguments and owner
    ///
    /// The new task and the old one are linked both ways (tasks/get shows
    /// `io.modelcontextprotocol/relatedTaskIds` in its `_meta`); a second redrive of the
    /// same letter makes no second task.
    Redrive {
        /// The failed task's id, as `dead` lists it
        id: String,
        #[command(flatten)]
        redis: RedisUrl,
        #[command(flatten)]
        up: UpData,
    },
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
}
