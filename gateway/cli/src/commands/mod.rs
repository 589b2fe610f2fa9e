//! The user and operator subcommands of `mcp-tasks` (everything but `up`): argument
//! parsing, exit codes and the runtime they run on.
//!
//! Exit codes: 0 success; 1 failure (the server or Redis could not be reached, a JSON-RPC
//! error, a failed or cancelled task, a tool result with `isError`); 64 usage error; 130
//! interrupted by Ctrl-C.

mod client;
mod ops;
mod tasks;
mod terminal;

use std::process::ExitCode;

use serde_json::Value;

/// Subcommands handled here.
pub(crate) const COMMANDS: &[&str] = &["call", "get", "cancel", "watch", "queues", "workers"];

/// Default MCP endpoint.
const DEFAULT_URL: &str = "http://127.0.0.1:8080/mcp";
/// Default Redis.
const DEFAULT_REDIS: &str = "redis://127.0.0.1:6379";
/// Environment variable naming the MCP endpoint.
const ENV_URL: &str = "MCPT_URL";
/// Environment variable naming Redis (shared with the server binaries).
const ENV_REDIS: &str = "MCPT_REDIS_URL";

/// The full help text.
pub(crate) const HELP: &str = "\
usage: mcp-tasks COMMAND [OPTIONS]

  up                         run redis (private, unless MCPT_REDIS_URL is set), a gateway and a worker pool
  call TOOL [--args JSON] [--task [--detach]]
                             call a tool; with --task declare the Tasks extension and follow the
                             task: status lines on stderr, input asked on the terminal, the result
                             on stdout (Ctrl-C cancels the task, exit 130); --detach prints the
                             task id instead of following
  get ID                     print the task as tasks/get returns it
  cancel ID                  ask the server to cancel the task
  watch ID...                one line per change (ID status message) until every task has ended
  queues                     per queue: length, consumer-group lag, pending jobs, consumers (Redis)
  workers                    live tools (queue, policy, heartbeat) and each queue's consumers (Redis)
  help                       this text

options:
  --url URL                  MCP endpoint (env MCPT_URL, default http://127.0.0.1:8080/mcp)
  --redis URL                Redis for queues/workers (env MCPT_REDIS_URL, default redis://127.0.0.1:6379)
  (env MCPT_TOKEN)           bearer token for a gateway with MCPT_AUTH=tokens or jwt

exit codes: 0 ok, 1 failed (unreachable, JSON-RPC error, failed/cancelled task, tool error),
            64 usage error, 130 interrupted";

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

/// Parsed command line of one subcommand.
#[derive(Debug, Default, PartialEq)]
struct Args {
    positional: Vec<String>,
    url: Option<String>,
    redis: Option<String>,
    args: Option<String>,
    task: bool,
    detach: bool,
}

/// Parse `rest` (the words after the subcommand) for `command`.
fn parse(command: &str, rest: &[String]) -> Result<Args, Fail> {
    let mut out = Args::default();
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (word.as_str(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| words.next().cloned())
                .ok_or_else(|| Fail::usage(format!("{name} needs a value")))
        };
        match flag {
            "--url" if command != "queues" && command != "workers" => {
                out.url = Some(value("--url")?);
            }
            "--redis" if command == "queues" || command == "workers" => {
                out.redis = Some(value("--redis")?);
            }
            "--args" if command == "call" => out.args = Some(value("--args")?),
            "--task" if command == "call" && inline.is_none() => out.task = true,
            "--detach" if command == "call" && inline.is_none() => out.detach = true,
            "--" => out.positional.extend(words.by_ref().cloned()),
            f if f.starts_with('-') && f.len() > 1 => {
                return Err(Fail::usage(format!("{command}: unknown option {word}")));
            }
            _ => out.positional.push(word.clone()),
        }
    }
    if out.detach && !out.task {
        return Err(Fail::usage("call: --detach needs --task"));
    }
    let n = out.positional.len();
    let ok = match command {
        "call" | "get" | "cancel" => n == 1,
        "watch" => n >= 1,
        _ => n == 0,
    };
    if !ok {
        let want = match command {
            "call" => "call TOOL [--args JSON] [--task [--detach]]",
            "get" => "get ID",
            "cancel" => "cancel ID",
            "watch" => "watch ID...",
            other => other,
        };
        return Err(Fail::usage(format!("expected `mcp-tasks {want}`")));
    }
    Ok(out)
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// Run subcommand `command` (one of [`COMMANDS`]) with the words after it.
pub(crate) fn run(command: &str, rest: &[String]) -> ExitCode {
    let outcome = parse(command, rest).and_then(|args| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Fail::runtime(format!("cannot start the runtime: {e}")))?;
        runtime.block_on(execute(command, args))
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(fail) => {
            if let Some(line) = fail.line {
                eprintln!("{line}");
            }
            ExitCode::from(fail.code)
        }
    }
}

async fn execute(command: &str, args: Args) -> Result<(), Fail> {
    if command == "queues" || command == "workers" {
        let redis = args
            .redis
            .unwrap_or_else(|| env_or(ENV_REDIS, DEFAULT_REDIS));
        return if command == "queues" {
            ops::queues(&redis).await
        } else {
            ops::workers(&redis).await
        };
    }
    let url = args.url.unwrap_or_else(|| env_or(ENV_URL, DEFAULT_URL));
    let client = client::Client::new(&url).map_err(Fail::usage)?;
    let first = args.positional[0].as_str();
    match command {
        "call" => {
            let raw = args.args.as_deref().unwrap_or("{}");
            let arguments: Value = serde_json::from_str(raw)
                .map_err(|e| Fail::usage(format!("--args is not JSON: {e}")))?;
            if !arguments.is_object() {
                return Err(Fail::usage("--args must be a JSON object"));
            }
            tasks::call(&client, first, arguments, args.task, args.detach).await
        }
        "get" => tasks::get(&client, first).await,
        "cancel" => tasks::cancel(&client, first).await,
        _ => tasks::watch(&client, &args.positional).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn call_takes_a_tool_args_and_task() {
        let a = parse(
            "call",
            &words(&["sleep", "--args", "{}", "--task", "--url=http://h/mcp"]),
        )
        .expect("parses");
        assert_eq!(a.positional, ["sleep"]);
        assert_eq!(a.args.as_deref(), Some("{}"));
        assert!(a.task);
        assert_eq!(a.url.as_deref(), Some("http://h/mcp"));
    }

    #[test]
    fn usage_errors_exit_64() {
        for (cmd, w) in [
            ("call", &[][..]),
            ("call", &["a", "b"]),
            ("get", &[]),
            ("watch", &[]),
            ("queues", &["x"]),
            ("queues", &["--url", "u"]),
            ("get", &["x", "--args"]),
            ("cancel", &["x", "--bogus"]),
        ] {
            let err = parse(cmd, &words(w)).expect_err("usage error");
            assert_eq!(err.code, 64, "{cmd} {w:?}");
        }
    }
}
