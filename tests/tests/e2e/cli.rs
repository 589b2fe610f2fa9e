//! The `mcp-tasks` CLI as a user runs it: the real binary against a real gateway, worker
//! and Redis — `call` (synchronous, followed task with progress, input on stdin, failures),
//! `get`, `cancel`, `watch`, Ctrl-C, and the operator views `queues` and `workers`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use mcp_tasks_tests::{TestContext, binary, poll_until, temp_dir};
use serde_json::Value;

/// What one run of the CLI produced.
#[derive(Debug)]
struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// A running `mcp-tasks` with a clean environment (PATH plus `env`); output goes to files.
struct Run {
    child: std::process::Child,
    dir: PathBuf,
}

impl Run {
    fn start(args: &[&str], env: &[(&str, String)], stdin: Option<&str>) -> Result<Run> {
        let dir = temp_dir("mcpt-cli-e2e")?;
        let mut cmd = Command::new(binary("mcp-tasks"));
        cmd.args(args).env_clear();
        for keep in ["PATH", "TMPDIR"] {
            if let Ok(v) = std::env::var(keep) {
                cmd.env(keep, v);
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(std::fs::File::create(dir.join("stdout"))?)
            .stderr(std::fs::File::create(dir.join("stderr"))?)
            .spawn()
            .context("cannot start mcp-tasks (run `cargo build --workspace --bins` first)")?;
        if let Some(text) = stdin {
            let mut pipe = child.stdin.take().context("stdin")?;
            pipe.write_all(text.as_bytes())?;
            // Dropping the pipe closes it: end of input after `text`.
        }
        Ok(Run { child, dir })
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// Wait for the exit (up to `within`, then kill and fail).
    fn wait(mut self, within: Duration) -> Result<Output> {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "mcp-tasks did not exit within {within:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = Output {
            code: status.code(),
            stdout: std::fs::read_to_string(self.dir.join("stdout"))?,
            stderr: self.stderr(),
        };
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(out)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run `mcp-tasks ARGS` to completion (20 s at most).
fn cli(args: &[&str], env: &[(&str, String)], stdin: Option<&str>) -> Result<Output> {
    Run::start(args, env, stdin)?.wait(Duration::from_secs(20))
}

fn url_env(ctx: &TestContext) -> [(&'static str, String); 1] {
    [("MCPT_URL", ctx.gateways[0].url())]
}

/// `call` of a synchronous tool, a followed task with progress, a task asking for input on
/// stdin (answered, and cancelled at end of input), and both kinds of failure.
#[tokio::test]
async fn call_prints_results_progress_and_errors() -> Result<()> {
    // The console on: `tools` reads each tool's task support there.
    let ctx = TestContext::start_with(1, 1, &[("MCPT_CONSOLE", "on".to_owned())]).await?;
    let env = url_env(&ctx);

    let out = cli(&["call", "echo", "--args", r#"{"text":"hi"}"#], &env, None)?;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "hi\n", "{out:?}");

    // --url instead of MCPT_URL.
    let url = ctx.gateways[0].url();
    let out = cli(
        &[
            "call",
            "sleep",
            "--args",
            r#"{"ms":300,"steps":3}"#,
            "--task",
            "--url",
            &url,
        ],
        &[],
        None,
    )?;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "slept 300 ms\n", "{out:?}");
    assert!(out.stderr.contains("task tsk_"), "{out:?}");
    let steps: Vec<usize> = ["step 1/3", "step 2/3", "step 3/3"]
        .iter()
        .map(|s| {
            out.stderr
                .find(&format!("working: {s}"))
                .unwrap_or_else(|| panic!("no {s:?} in stderr: {}", out.stderr))
        })
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{out:?}");
    assert!(out.stderr.contains("s] completed"), "{out:?}");

    let out = cli(
        &[
            "call",
            "ask",
            "--args",
            r#"{"question":"Colour?"}"#,
            "--task",
        ],
        &env,
        Some("blue\n"),
    )?;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "answer: blue\n", "{out:?}");
    assert!(out.stderr.contains("? Colour?"), "{out:?}");
    assert!(out.stderr.contains("answer (string): "), "{out:?}");
    assert!(out.stderr.contains("input_required"), "{out:?}");

    // End of input answers `cancel`: the tool reports an error result.
    let out = cli(
        &[
            "call",
            "ask",
            "--args",
            r#"{"question":"Colour?"}"#,
            "--task",
        ],
        &env,
        Some(""),
    )?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stdout, "", "{out:?}");

    let out = cli(
        &[
            "call",
            "fail",
            "--args",
            r#"{"mode":"protocol","message":"boom"}"#,
            "--task",
        ],
        &env,
        None,
    )?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("error -32603: boom"), "{out:?}");

    let out = cli(
        &[
            "call",
            "fail",
            "--args",
            r#"{"mode":"tool","message":"boom"}"#,
            "--task",
        ],
        &env,
        None,
    )?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("tool error: boom"), "{out:?}");

    // Without --task the same sleep is a plain result.
    let out = cli(&["call", "sleep", "--args", r#"{"ms":10}"#], &env, None)?;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "slept 10 ms\n", "{out:?}");
    assert!(!out.stderr.contains("task tsk_"), "{out:?}");

    // A JSON-RPC error of the call itself: unknown tool, naming the nearest.
    let out = cli(&["call", "no_such_tool", "--args", "{}"], &env, None)?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.starts_with("error -"), "{out:?}");
    let out = cli(&["call", "slep", "--args", "{}"], &env, None)?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("did you mean sleep?"), "{out:?}");

    // A task-only tool without --task says to add it.
    let out = cli(
        &["call", "ask", "--args", r#"{"question":"?"}"#],
        &env,
        None,
    )?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("add --task"), "{out:?}");

    // Arguments that break the schema are the caller's mistake, not a tool error.
    for task in [false, true] {
        let mut args = vec!["call", "sleep", "--args", r#"{"ms":"long"}"#];
        if task {
            args.push("--task");
        }
        let out = cli(&args, &env, None)?;
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.starts_with("mcp-tasks: invalid arguments: "),
            "{out:?}"
        );
        assert!(!out.stderr.contains("tool error"), "{out:?}");
    }

    // `tools` lists each tool with its task support (from the console) and arguments.
    let out = poll_until(Duration::from_secs(20), || async {
        let out = cli(&["tools"], &env, None)?;
        if out.stdout.contains(" ? ") {
            bail!("the console has not refreshed yet: {out:?}");
        }
        Ok(out)
    })
    .await?;
    assert_eq!(out.code, Some(0), "{out:?}");
    let row = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} row: {out:?}"))
            .to_owned()
    };
    assert!(row("ask").contains("only with --task"), "{out:?}");
    assert!(row("ask").contains("question: string"), "{out:?}");
    assert!(row("echo").contains("never"), "{out:?}");
    assert!(row("sleep").contains("ms: integer"), "{out:?}");

    ctx.cleanup().await;
    Ok(())
}

/// `get` prints the task, `watch` follows it, `cancel` ends it; unknown ids fail.
#[tokio::test]
async fn get_cancel_and_watch_a_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let env = url_env(&ctx);

    let out = cli(
        &[
            "call",
            "sleep",
            "--args",
            r#"{"ms":20000,"steps":2}"#,
            "--task",
            "--detach",
        ],
        &env,
        None,
    )?;
    assert_eq!(out.code, Some(0), "{out:?}");
    let id = out.stdout.trim().to_owned();
    assert!(id.starts_with("tsk_"), "{out:?}");

    let out = cli(&["get", &id], &env, None)?;
    assert_eq!(out.code, Some(0), "{out:?}");
    let task: Value = serde_json::from_str(&out.stdout).context("get prints JSON")?;
    assert_eq!(task["taskId"], id.as_str());
    assert_eq!(task["status"], "working");

    let watch = Run::start(&["watch", &id], &env, None)?;
    std::thread::sleep(Duration::from_millis(300));

    let out = cli(&["cancel", &id], &env, None)?;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(&id), "{out:?}");

    // `help`: exit 1 after a failed or cancelled task.
    let out = watch.wait(Duration::from_secs(10))?;
    assert_eq!(out.code, Some(1), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with(&format!("{id} working"))),
        "{out:?}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with(&format!("{id} cancelled"))),
        "{out:?}"
    );

    let out = cli(&["get", &id], &env, None)?;
    let task: Value = serde_json::from_str(&out.stdout).context("get prints JSON")?;
    assert_eq!(task["status"], "cancelled", "{out:?}");

    // One wording for an unknown id in every command.
    for command in ["get", "cancel", "watch"] {
        let out = cli(&[command, "tsk_unknown"], &env, None)?;
        assert_eq!(out.code, Some(1), "{command}: {out:?}");
        assert_eq!(
            out.stderr,
            "mcp-tasks: task tsk_unknown not found (unknown, expired, or not readable with these credentials)\n",
            "{command}: {out:?}"
        );
    }

    // A completed task watched: exit 0.
    let out = cli(
        &[
            "call",
            "sleep",
            "--args",
            r#"{"ms":10}"#,
            "--task",
            "--detach",
        ],
        &env,
        None,
    )?;
    let done = out.stdout.trim().to_owned();
    let out = cli(&["watch", &done], &env, None)?;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(&format!("{done} completed")), "{out:?}");

    ctx.cleanup().await;
    Ok(())
}

/// Ctrl-C while following a task cancels the task and exits 130.
#[tokio::test]
async fn ctrl_c_cancels_the_followed_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let env = url_env(&ctx);
    let run = Run::start(
        &[
            "call",
            "sleep",
            "--args",
            r#"{"ms":20000,"steps":2}"#,
            "--task",
        ],
        &env,
        None,
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let id = loop {
        let err = run.stderr();
        if let Some(rest) = err.split("task tsk_").nth(1)
            && err.contains("step 1/2")
        {
            break format!("tsk_{}", rest.lines().next().unwrap_or("").trim());
        }
        if Instant::now() > deadline {
            bail!("no task line on stderr: {err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = run.child.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status()?;
    let out = run.wait(Duration::from_secs(10))?;
    assert_eq!(out.code, Some(130), "{out:?}");
    assert!(out.stderr.contains("cancel requested"), "{out:?}");
    let task = ctx
        .client()
        .wait_status(&id, "cancelled", Duration::from_secs(10))
        .await?;
    assert_eq!(task["taskId"], id.as_str());
    ctx.cleanup().await;
    Ok(())
}

/// `queues` and `workers` read Redis: the default queue and the demo tools.
#[tokio::test]
async fn queues_and_workers_show_redis_state() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let redis = [("MCPT_REDIS_URL", ctx.redis.url())];
    // One job through the queue, so the worker has joined the group as a consumer.
    let out = cli(
        &["call", "echo", "--args", r#"{"text":"x"}"#],
        &url_env(&ctx),
        None,
    )?;
    assert_eq!(out.code, Some(0), "{out:?}");

    let out = cli(&["queues"], &redis, None)?;
    assert_eq!(out.code, Some(0), "{out:?}");
    let header = out.stdout.lines().next().unwrap_or("");
    for col in ["QUEUE", "LENGTH", "LAG", "PENDING", "CONSUMERS"] {
        assert!(header.contains(col), "{out:?}");
    }
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("default "))
        .with_context(|| format!("no default queue: {out:?}"))?;
    assert_eq!(
        row.split_whitespace().last(),
        Some("1"),
        "one consumer: {out:?}"
    );

    let url = ctx.redis.url();
    let out = cli(&["workers", "--redis", &url], &[], None)?;
    assert_eq!(out.code, Some(0), "{out:?}");
    let echo = out
        .stdout
        .lines()
        .find(|l| l.starts_with("echo "))
        .with_context(|| format!("no echo tool: {out:?}"))?;
    assert!(echo.contains("default") && echo.contains("sync"), "{out:?}");
    assert!(out.stdout.contains("CONSUMER"), "{out:?}");

    let out = cli(&["queues", "--redis", "redis://127.0.0.1:1"], &[], None)?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");

    ctx.cleanup().await;
    Ok(())
}

/// Usage errors exit 64 with one line; an unreachable server exits 1 with one line.
#[tokio::test]
async fn usage_and_connection_errors() -> Result<()> {
    for args in [
        &["call"][..],
        &["call", "echo", "--args", "not json"],
        &["get"],
        &["cancel", "a", "b"],
        &["watch", "--bogus", "x"],
        &["get", "x", "--url", "ftp://x/mcp"],
    ] {
        let out = cli(args, &[], None)?;
        assert_eq!(out.code, Some(64), "{args:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out:?}");
        assert!(out.stderr.contains("usage"), "{args:?}: {out:?}");
    }
    let out = cli(&["help"], &[], None)?;
    assert_eq!(out.code, Some(0), "{out:?}");
    for cmd in [
        "up", "call", "get", "cancel", "watch", "tools", "queues", "workers",
    ] {
        assert!(
            out.stdout.contains(&format!("\n  {cmd} ")),
            "{cmd}: {out:?}"
        );
    }
    let out = cli(
        &["get", "tsk_x"],
        &[("MCPT_URL", "http://127.0.0.1:1/mcp".to_owned())],
        None,
    )?;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("cannot reach"), "{out:?}");
    Ok(())
}

/// `mcp-tasks queues | head -1`: a reader that goes away ends the command quietly with 141
/// (128 + SIGPIPE), as a shell expects, not with a panic and its backtrace.
#[test]
fn a_closed_stdout_ends_the_command_quietly() -> Result<()> {
    let redis = mcp_tasks_tests::RedisServer::start()?;
    let (reader, writer) = std::io::pipe()?;
    drop(reader);
    let out = std::process::Command::new(mcp_tasks_tests::binary("mcp-tasks"))
        .args(["queues", "--redis", &redis.url()])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(err.is_empty(), "said on stderr: {err}");
    Ok(())
}
