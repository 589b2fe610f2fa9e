//! The binaries as processes: configuration errors (exit 64, one stderr line naming the
//! variable, STYLE.md §6), SIGTERM (drain, exit 0, STYLE.md §7), gateway readiness against
//! Redis, and `mcp-tasks up` (private Redis, gateway and worker in one command).
//!
//! The protocol itself is tested in `protocol/`; task lifecycles in `lifecycle/`.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use mcp_tasks_tests::{Client, Process, TestContext, binary, caps_none, poll_until, temp_dir};
use serde_json::json;

// ---------------------------------------------------------------------------------------
// Private helpers
// ---------------------------------------------------------------------------------------

/// Wait for `child` to exit, failing after `within`.
async fn wait_exit(child: &mut Child, within: Duration) -> Result<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            bail!("process did not exit within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The non-empty lines of a process's stderr.
fn lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// Spawn project binary `name` with a bad `var=value` (and a reachable Redis), and assert
/// it exits 64 with exactly one stderr line naming the variable.
pub(crate) async fn assert_rejects_config(
    name: &str,
    redis_url: &str,
    var: &str,
    value: &str,
) -> Result<()> {
    let (mut p, _) = Process::spawn(
        name,
        &[
            ("MCPT_REDIS_URL", redis_url.to_owned()),
            ("MCPT_LISTEN_ADDR", "127.0.0.1:0".to_owned()),
            (var, value.to_owned()),
        ],
    )?;
    let status = wait_exit(p.child(), Duration::from_secs(10))
        .await
        .with_context(|| format!("{name} with {var}={value:?} kept running"))?;
    let log = p.log_text();
    assert_eq!(status.code(), Some(64), "{name} {var}={value:?}: {log}");
    let l = lines(&log);
    assert_eq!(
        l.len(),
        1,
        "{name} {var}={value:?}: one stderr line, got {log:?}"
    );
    assert!(l[0].contains(var), "{name}: {:?} does not name {var}", l[0]);
    assert!(
        l[0].contains(value),
        "{name}: {:?} does not show {value:?}",
        l[0]
    );
    Ok(())
}

/// `mcp-tasks ARGS` with a clean environment plus `env`; stdout lines arrive on a channel,
/// stderr goes to a file. SIGTERM then SIGKILL on drop, so its private Redis is stopped too.
struct Cli {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: PathBuf,
}

impl Cli {
    fn spawn(args: &[&str], env: &[(&str, String)]) -> Result<Cli> {
        let dir = temp_dir("mcpt-cli")?;
        let stderr = dir.join("stderr.log");
        let mut cmd = Command::new(binary("mcp-tasks"));
        cmd.args(args).env_clear();
        for keep in ["PATH", "HOME", "RUST_LOG", "TMPDIR"] {
            if let Ok(v) = std::env::var(keep) {
                cmd.env(keep, v);
            }
        }
        // `up` keeps its data (and its runtime file) in this private folder, not the user's.
        cmd.env("XDG_DATA_HOME", &dir);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("cannot start mcp-tasks (run `cargo build --workspace` first)")?;
        let out = child.stdout.take().context("stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(Cli {
            child,
            stdout: rx,
            stderr,
        })
    }

    /// The rest of the first stdout line starting with `prefix` (waiting up to 20 s).
    fn line(&self, prefix: &str) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.stdout.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.to_owned());
                    }
                }
                Err(_) => break,
            }
        }
        bail!(
            "mcp-tasks printed no line starting with {prefix:?}; stderr:\n{}",
            self.stderr_text()
        )
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn sigterm(&self) -> Result<()> {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?
            .success();
        if ok {
            Ok(())
        } else {
            Err(anyhow!("kill -TERM failed"))
        }
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.sigterm();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- mcp-tasks stderr ---\n{}", self.stderr_text());
        }
        if let Some(dir) = self.stderr.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn get_status(client: &Client, path: &str) -> Result<u16> {
    Ok(client
        .send_raw("GET", path, &[], Bytes::new())
        .await?
        .status()
        .as_u16())
}

// ---------------------------------------------------------------------------------------
// Configuration errors
// ---------------------------------------------------------------------------------------

/// STYLE.md §6: each bad gateway variable → exit 64, one stderr line naming it.
#[tokio::test]
async fn gateway_rejects_bad_config_with_exit_64_and_one_line() -> Result<()> {
    let ctx = TestContext::start(0, 0).await?;
    let url = ctx.redis.url();
    for (var, value) in [
        ("MCPT_LISTEN_ADDR", "nope"),
        ("MCPT_SYNC_TIMEOUT", "ten"),
        ("MCPT_AUTO_WAIT", "5x"),
        ("MCPT_SHUTDOWN_GRACE", "-1s"),
        ("MCPT_MAX_BODY_BYTES", "lots"),
        ("MCPT_MAX_BODY_BYTES", "10"),
        ("MCPT_POLL_INTERVAL", "0ms"),
        ("MCPT_DEFAULT_TTL", "forever"),
        ("MCPT_MAX_TTL", "1 day"),
        ("MCPT_REDIS_URL", "http://127.0.0.1:6379"),
    ] {
        assert_rejects_config("mcp-tasks-gateway", &url, var, value).await?;
    }
    ctx.cleanup().await;
    Ok(())
}

/// STYLE.md §6: each bad worker variable → exit 64, one stderr line naming it.
#[tokio::test]
async fn worker_rejects_bad_config_with_exit_64_and_one_line() -> Result<()> {
    let ctx = TestContext::start(0, 0).await?;
    let url = ctx.redis.url();
    for (var, value) in [
        ("MCPT_CONCURRENCY", "lots"),
        ("MCPT_CONCURRENCY", "0"),
        ("MCPT_TOOLS", "bogus"),
        ("MCPT_TOOLS", "demo,nope"),
        ("MCPT_QUEUES", "a queue"),
        ("MCPT_SHUTDOWN_GRACE", "ten"),
        ("MCPT_DEFAULT_TTL", "1x"),
        ("MCPT_REDIS_URL", "127.0.0.1:6379"),
    ] {
        assert_rejects_config("mcp-tasks-worker", &url, var, value).await?;
    }
    ctx.cleanup().await;
    Ok(())
}

/// STYLE.md §6: `mcp-tasks up` checks gateway and worker variables before starting
/// anything: exit 64, one stderr line naming the variable.
#[tokio::test]
async fn mcp_tasks_up_rejects_bad_config_with_exit_64_and_one_line() -> Result<()> {
    let ctx = TestContext::start(0, 0).await?;
    for (var, value) in [
        ("MCPT_LISTEN_ADDR", "nope"),
        ("MCPT_CONCURRENCY", "lots"),
        ("MCPT_TOOLS", "bogus"),
        ("MCPT_SYNC_TIMEOUT", "ten"),
    ] {
        let mut cli = Cli::spawn(
            &["up"],
            &[("MCPT_REDIS_URL", ctx.redis.url()), (var, value.to_owned())],
        )?;
        let status = wait_exit(&mut cli.child, Duration::from_secs(10))
            .await
            .with_context(|| format!("mcp-tasks up with {var}={value:?} kept running"))?;
        let err = cli.stderr_text();
        assert_eq!(status.code(), Some(64), "{var}={value:?}: {err}");
        let l = lines(&err);
        assert_eq!(l.len(), 1, "{var}: one stderr line, got {err:?}");
        assert!(l[0].contains(var), "{:?} does not name {var}", l[0]);
    }
    ctx.cleanup().await;
    Ok(())
}

/// `mcp-tasks` with an unknown subcommand, extra arguments or none is a usage error: 64.
#[tokio::test]
async fn mcp_tasks_unknown_subcommand_exits_64() -> Result<()> {
    let ctx = TestContext::start(0, 0).await?;
    for args in [&["frobnicate"][..], &["up", "now"], &[], &["--bogus"]] {
        let mut cli = Cli::spawn(args, &[("MCPT_REDIS_URL", ctx.redis.url())])?;
        let status = wait_exit(&mut cli.child, Duration::from_secs(10))
            .await
            .with_context(|| format!("mcp-tasks {args:?} kept running"))?;
        let err = cli.stderr_text();
        assert_eq!(status.code(), Some(64), "{args:?}: {err}");
        assert!(!lines(&err).is_empty(), "{args:?}: says nothing on stderr");
        assert!(err.contains("usage"), "{args:?}: no usage: {err:?}");
    }
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Shutdown and readiness
// ---------------------------------------------------------------------------------------

/// STYLE.md §7: SIGTERM makes an idle gateway and an idle worker exit 0.
#[tokio::test]
async fn gateway_and_worker_exit_0_on_sigterm() -> Result<()> {
    let mut ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("echo", json!({"text": "hi"}), &caps_none())
        .await?;
    assert_eq!(r.body["result"]["content"][0]["text"], "hi", "{}", r.body);
    let gateway = ctx.gateways[0].process.terminate(Duration::from_secs(10))?;
    assert_eq!(gateway.code(), Some(0), "gateway: {gateway:?}");
    let worker = ctx.workers[0].process.terminate(Duration::from_secs(10))?;
    assert_eq!(worker.code(), Some(0), "worker: {worker:?}");
    ctx.cleanup().await;
    Ok(())
}

/// STYLE.md §7: a gateway told to stop lets an in-flight synchronous call finish (its
/// caller gets the result), then exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_drains_an_in_flight_call_on_sigterm() -> Result<()> {
    let mut ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let call = {
        let client = client.clone();
        tokio::spawn(async move { client.call("sleep", json!({"ms": 800}), &caps_none()).await })
    };
    // The call is in flight once its task exists.
    poll_until(Duration::from_secs(5), || async {
        let keys = ctx
            .redis
            .cli(&["--scan", "--pattern", "mcpt:task:*"])
            .ok()?;
        (!keys.trim().is_empty()).then_some(())
    })
    .await
    .context("the call never created its task")?;
    let mut gateway = ctx.gateways.remove(0);
    let status =
        tokio::task::spawn_blocking(move || gateway.process.terminate(Duration::from_secs(10)))
            .await??;
    assert_eq!(status.code(), Some(0), "gateway: {status:?}");
    let r = call.await??;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["result"]["content"][0]["text"], "slept 800 ms",
        "{}",
        r.body
    );
    ctx.cleanup().await;
    Ok(())
}

/// STYLE.md §7: a worker told to stop finishes the job it is running, then exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_finishes_its_running_job_on_sigterm() -> Result<()> {
    let mut ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let task = client.start_task("sleep", json!({"ms": 800})).await?;
    // Running: the tool has set its first status message.
    poll_until(Duration::from_secs(5), || async {
        let t = client.get(&task).await.ok()?;
        (t["statusMessage"] == "step 1/1").then_some(())
    })
    .await
    .context("the worker never started the job")?;
    let mut worker = ctx.workers.remove(0);
    let status =
        tokio::task::spawn_blocking(move || worker.process.terminate(Duration::from_secs(10)))
            .await??;
    assert_eq!(status.code(), Some(0), "worker: {status:?}");
    let t = client.get(&task).await?;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["content"][0]["text"], "slept 800 ms", "{t}");
    ctx.cleanup().await;
    Ok(())
}

/// Readiness follows Redis: /readyz 200, Redis gone → 503 while /healthz stays 200, Redis
/// back → 200 again within a few seconds.
#[tokio::test]
async fn readyz_follows_redis_and_healthz_does_not() -> Result<()> {
    let mut ctx = TestContext::start(1, 0).await?;
    let client = ctx.client();
    assert_eq!(get_status(&client, "/readyz").await?, 200);
    assert_eq!(get_status(&client, "/healthz").await?, 200);
    ctx.redis.kill();
    poll_until(Duration::from_secs(5), || async {
        (get_status(&client, "/readyz").await.ok()? == 503).then_some(())
    })
    .await
    .context("/readyz stayed ready without Redis")?;
    assert_eq!(get_status(&client, "/healthz").await?, 200);
    ctx.redis.restart()?;
    poll_until(Duration::from_secs(10), || async {
        (get_status(&client, "/readyz").await.ok()? == 200).then_some(())
    })
    .await
    .context("/readyz did not recover after Redis came back")?;
    assert_eq!(get_status(&client, "/healthz").await?, 200);
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// mcp-tasks up
// ---------------------------------------------------------------------------------------

/// `mcp-tasks up` without `redis-server` on PATH (and no MCPT_REDIS_URL) exits non-zero
/// with one clear stderr line about redis-server.
#[tokio::test]
async fn mcp_tasks_up_without_redis_server_says_so_and_fails() -> Result<()> {
    let ctx = TestContext::start(0, 0).await?;
    let empty = mcp_tasks_tests::TempDir::new("mcpt-empty-path")?;
    let mut cli = Cli::spawn(
        &["up"],
        &[
            ("PATH", empty.path().display().to_string()),
            ("MCPT_LISTEN_ADDR", "127.0.0.1:0".to_owned()),
        ],
    )?;
    let status = wait_exit(&mut cli.child, Duration::from_secs(10)).await?;
    let err = cli.stderr_text();
    assert!(!status.success(), "exit {status:?}");
    assert_ne!(status.code(), None, "killed by a signal: {status:?}");
    let l = lines(&err);
    assert_eq!(l.len(), 1, "one stderr line, got {err:?}");
    assert!(l[0].contains("redis-server"), "{:?}", l[0]);
    ctx.cleanup().await;
    Ok(())
}

/// `mcp-tasks up` on `127.0.0.1:0` starts a private Redis, prints the listening line and
/// the MCP endpoint, serves `server/discover` and a `sleep` task to completion, and on
/// SIGTERM exits 0 and stops its Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tasks_up_serves_a_task_and_exits_0_on_sigterm() -> Result<()> {
    let ctx = TestContext::start(0, 0).await?;
    let mut cli = Cli::spawn(&["up"], &[("MCPT_LISTEN_ADDR", "127.0.0.1:0".to_owned())])?;
    let redis = cli.line("redis: redis://")?;
    let redis_addr = redis
        .split_whitespace()
        .next()
        .context("redis address")?
        .to_owned();
    let addr: std::net::SocketAddr = cli.line("listening on http://")?.parse()?;
    let endpoint = cli.line("MCP endpoint: ")?;
    assert!(
        endpoint.starts_with(&format!("http://{addr}/mcp")),
        "{endpoint:?}"
    );
    let client = Client::new(addr);
    let r = client
        .request("server/discover", json!({}), &caps_none())
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    poll_until(Duration::from_secs(10), || async {
        let r = client
            .request("tools/list", json!({}), &caps_none())
            .await
            .ok()?;
        r.body["result"]["tools"]
            .as_array()?
            .iter()
            .any(|t| t["name"] == "sleep")
            .then_some(())
    })
    .await
    .context("sleep never listed")?;
    let task = client
        .start_task("sleep", json!({"ms": 200, "steps": 2}))
        .await?;
    let t = client
        .wait_status(&task, "completed", Duration::from_secs(10))
        .await?;
    assert_eq!(t["result"]["content"][0]["text"], "slept 200 ms", "{t}");
    cli.sigterm()?;
    let status = wait_exit(&mut cli.child, Duration::from_secs(15)).await?;
    assert_eq!(status.code(), Some(0), "{}", cli.stderr_text());
    // Its private Redis went with it.
    poll_until(Duration::from_secs(5), || async {
        std::net::TcpStream::connect(&redis_addr)
            .is_err()
            .then_some(())
    })
    .await
    .with_context(|| format!("private redis at {redis_addr} still answers"))?;
    ctx.cleanup().await;
    Ok(())
}
