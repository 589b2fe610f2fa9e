//! `mcp-tasks up` as a newcomer runs it (issue 16): the real binary with a data directory,
//! tasks that survive a restart (completed, running, waiting for input), the other
//! commands finding it with no flags, a quick Ctrl-C, a second one that exits at once, a
//! Redis left by a killed `up`, and `--ephemeral` leaving nothing behind.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use mcp_tasks_tests::{Client, TempDir, binary, poll_until};
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(20);

/// A running `mcp-tasks up` whose data (and `XDG_DATA_HOME`, `HOME`) is `home`; stdout
/// lines on a channel, stderr in a file beside (not in) the data. On drop: SIGTERM, then
/// SIGKILL, and its own private Redis (in a process group of its own, so it outlives a
/// killed `up`) is killed too, with its ephemeral folder.
struct Up {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: PathBuf,
    /// Where it serves.
    addr: SocketAddr,
    /// The banner's `redis: …` line.
    redis_line: String,
    /// Its private Redis, as its runtime file names it: this `up`'s, not whichever
    /// Redis the pid file names by the time this drops.
    redis_pid: Option<u32>,
}

impl Up {
    fn start(home: &Path, logs: &Path, args: &[&str], env: &[(&str, String)]) -> Result<Up> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr = logs.join(format!("up-{n}.stderr"));
        let mut cmd = Command::new(binary("mcp-tasks"));
        cmd.arg("up").args(args).env_clear();
        cmd.envs(cli_env(home));
        cmd.env("MCPT_LISTEN_ADDR", "127.0.0.1:0");
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("cannot start mcp-tasks (run `cargo build --workspace --bins` first)")?;
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
        let mut up = Up {
            child,
            stdout: rx,
            stderr,
            addr: "127.0.0.1:1".parse()?,
            redis_line: String::new(),
            redis_pid: None,
        };
        up.redis_line = up.line("redis: ")?;
        up.addr = up.line("listening on http://")?.parse()?;
        up.line("mcp-tasks commands")?;
        let data = match args.iter().position(|a| *a == "--data") {
            Some(i) => PathBuf::from(args[i + 1]),
            None => home.join("mcp-tasks"),
        };
        let runtime: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(data.join("up.json"))?)?;
        up.redis_pid = runtime["redis_pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok());
        Ok(up)
    }

    /// The rest of the next stdout line starting with `prefix`.
    fn line(&self, prefix: &str) -> Result<String> {
        let deadline = Instant::now() + WITHIN;
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
            "up printed no line starting with {prefix:?}; stderr:\n{}",
            self.stderr_text()
        )
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn signal(&self, name: &str) -> Result<()> {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()?
            .success();
        ensure!(ok, "kill -{name} failed");
        Ok(())
    }

    /// Wait for the exit; how long it took.
    async fn exit_within(&mut self, within: Duration) -> Result<(ExitStatus, Duration)> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok((status, started.elapsed()));
            }
            if started.elapsed() > within {
                bail!(
                    "up did not exit within {within:?}; stderr:\n{}",
                    self.stderr_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn client(&self) -> Client {
        Client::new(self.addr)
    }

    /// The ephemeral Redis folder the banner names, if any.
    fn ephemeral_dir(&self) -> Option<PathBuf> {
        self.redis_line
            .split("ephemeral: ")
            .nth(1)?
            .split(" is deleted on exit")
            .next()
            .map(PathBuf::from)
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        stop(&mut self.child);
        // A Redis outlives an `up` that was killed (it is not in up's process group).
        if let Some(pid) = self.redis_pid.filter(|pid| is_redis(*pid)) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        if let Some(dir) = self.ephemeral_dir() {
            let _ = std::fs::remove_dir_all(dir);
        }
        if std::thread::panicking() {
            eprintln!("--- mcp-tasks up stderr ---\n{}", self.stderr_text());
        }
    }
}

/// The environment of every command of the test: PATH, and a home of its own so the
/// default data directory is `home/mcp-tasks`.
fn cli_env(home: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("HOME".to_owned(), home.display().to_string()),
        ("XDG_DATA_HOME".to_owned(), home.display().to_string()),
    ];
    // TMPDIR too: an ephemeral Redis folder goes where the suite's temp files go.
    for keep in ["PATH", "TMPDIR"] {
        if let Ok(v) = std::env::var(keep) {
            env.push((keep.to_owned(), v));
        }
    }
    env
}

/// SIGTERM, then SIGKILL after 10 s; nothing for a child already waited for (a test that
/// saw it exit): its pid may be another process's by now.
fn stop(child: &mut Child) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether `pid` is a live (not zombie) `redis-server`.
fn is_redis(pid: u32) -> bool {
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    });
    running
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("redis-server"))
}

/// Run `mcp-tasks up ARGS` expected to fail at start: its exit code and stderr.
fn up_refused(home: &Path, args: &[&str], env: &[(&str, String)]) -> Result<(Option<i32>, String)> {
    let logs = TempDir::new("mcpt-up-refused")?;
    let stderr = logs.path().join("stderr");
    let mut child = Command::new(binary("mcp-tasks"))
        .arg("up")
        .args(args)
        .env_clear()
        .envs(cli_env(home))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr)?)
        .spawn()?;
    let deadline = Instant::now() + WITHIN;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            // It started after all: stopped as a user would, so it stops its Redis too.
            stop(&mut child);
            bail!(
                "up {args:?} did not exit: {}",
                std::fs::read_to_string(&stderr)?
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((status.code(), std::fs::read_to_string(&stderr)?))
}

/// The pid of the private Redis in `home`'s data directory, if its pid file is there.
fn redis_pid(home: &Path) -> Option<u32> {
    std::fs::read_to_string(home.join("mcp-tasks/redis.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `mcp-tasks ARGS` with no flags but `home`; its exit code, stdout and stderr.
fn cli(home: &Path, args: &[&str]) -> Result<(Option<i32>, String, String)> {
    let out = Command::new(binary("mcp-tasks"))
        .args(args)
        .env_clear()
        .envs(cli_env(home))
        .stdin(Stdio::null())
        .output()?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Wait until the task's status message is `message` (a sleep reports its steps once it
/// really runs on the worker).
async fn wait_message(client: &Client, id: &str, message: &str) -> Result<()> {
    poll_until(WITHIN, || async {
        let t = client.get(id).await.ok()?;
        (t["statusMessage"] == message).then_some(())
    })
    .await
    .with_context(|| format!("task {id} never said {message:?}"))
}

/// Issue 16, done-when: tasks survive a restart of `up` (completed, running, waiting for
/// input), the running one resumes and completes; `queues` and `tools` with no flags find
/// `up`; SIGINT with a task running exits within 5 s, without misleading messages; a
/// second SIGINT exits at once and loses nothing; a Redis left by a killed `up` is said
/// and stopped, its data kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_keeps_tasks_across_restarts_and_stops_quickly() -> Result<()> {
    let home = TempDir::new("mcpt-up-home")?;
    let logs = TempDir::new("mcpt-up-logs")?;
    let home = home.path();
    // A short lease: a job left claimed by an `up` that exited at once is reclaimed soon.
    let env = [("MCPT_LEASE", "2s".to_owned())];

    let mut up = Up::start(home, logs.path(), &[], &env)?;
    let data = home.join("mcp-tasks");
    ensure!(
        up.redis_line
            .contains(&format!("data kept in {}", data.canonicalize()?.display())),
        "banner: {}",
        up.redis_line
    );
    let client = up.client();
    client.wait_for_tool("sleep").await?;
    let done = client.start_task("sleep", json!({"ms": 10})).await?;
    client.wait_status(&done, "completed", WITHIN).await?;
    let running = client
        .start_task("sleep", json!({"ms": 3000, "steps": 3}))
        .await?;
    wait_message(&client, &running, "step 1/3").await?;
    let asking = client
        .start_task("ask", json!({"question": "Colour?"}))
        .await?;
    client
        .wait_status(&asking, "input_required", WITHIN)
        .await?;

    // Next to `up`, the commands need no flags. (`queues` reads the console, which
    // refreshes every 2 s: poll.)
    poll_until(WITHIN, || async {
        let (code, out, _) = cli(home, &["queues"]).ok()?;
        (code == Some(0) && out.lines().any(|l| l.starts_with("default "))).then_some(())
    })
    .await
    .context("queues never showed the default queue")?;
    // `tools` takes each tool's policy from the console too: its snapshot can predate the
    // worker's advert by up to one refresh (the TASK column reads `?` meanwhile).
    let rows = [("sleep", "with --task"), ("ask", "only with --task")];
    let shows_policies = |out: &str| {
        rows.iter().all(|(tool, task)| {
            out.lines()
                .any(|l| l.starts_with(&format!("{tool} ")) && l.contains(task))
        })
    };
    let listed = poll_until(WITHIN, || async {
        let (code, out, _) = cli(home, &["tools"]).ok()?;
        (code == Some(0) && shows_policies(&out)).then_some(())
    })
    .await;
    if listed.is_err() {
        let (code, out, err) = cli(home, &["tools"])?;
        bail!("tools never showed {rows:?}: {code:?} {out} {err}");
    }
    let (code, out, err) = cli(home, &["get", &done])?;
    ensure!(
        code == Some(0) && out.contains("completed"),
        "get: {out} {err}"
    );

    // Ctrl-C with a task running: out within 5 s, Redis last, nothing misleading.
    up.signal("INT")?;
    let (status, took) = up.exit_within(Duration::from_secs(5)).await?;
    let err = up.stderr_text();
    ensure!(status.code() == Some(0), "exit {status:?}: {err}");
    ensure!(took < Duration::from_secs(5), "took {took:?}");
    for misleading in ["cannot reach redis", "other workers", "reading jobs failed"] {
        ensure!(
            !err.contains(misleading),
            "stderr says {misleading:?}:\n{err}"
        );
    }
    ensure!(
        !data.join("up.json").exists(),
        "runtime file left after a clean exit"
    );
    drop(up);

    // Started again on the same data: every task is there; the running one resumes.
    let up = Up::start(home, logs.path(), &[], &env)?;
    let client = up.client();
    let t = client.get(&done).await?;
    ensure!(
        t["status"] == "completed" && t["result"]["content"][0]["text"] == "slept 10 ms",
        "{t}"
    );
    let t = client.get(&asking).await?;
    ensure!(t["status"] == "input_required", "{t}");
    let r = client
        .update(
            &asking,
            json!({"answer-1": {"action": "accept", "content": {"answer": "blue"}}}),
        )
        .await?;
    ensure!(r.body.get("error").is_none(), "{}", r.body);
    let t = client.wait_status(&asking, "completed", WITHIN).await?;
    ensure!(t["result"]["content"][0]["text"] == "answer: blue", "{t}");
    let t = client.wait_status(&running, "completed", WITHIN).await?;
    ensure!(t["result"]["content"][0]["text"] == "slept 3000 ms", "{t}");

    drop(up);

    // A second Ctrl-C exits at once, even with a long grace period; the running task is
    // not lost.
    let mut env_long_grace = env.to_vec();
    env_long_grace.push(("MCPT_SHUTDOWN_GRACE", "30s".to_owned()));
    let mut up = Up::start(home, logs.path(), &[], &env_long_grace)?;
    let client = up.client();
    let long = client
        .start_task("sleep", json!({"ms": 1500, "steps": 3}))
        .await?;
    wait_message(&client, &long, "step 1/3").await?;
    up.signal("INT")?;
    poll_until(WITHIN, || async {
        up.stderr_text()
            .contains("mcp-tasks: stopping")
            .then_some(())
    })
    .await?;
    up.signal("INT")?;
    let (status, took) = up.exit_within(Duration::from_secs(5)).await?;
    ensure!(status.code() == Some(130), "exit {status:?}");
    // Well under the 30 s grace: the second signal did not wait for it.
    ensure!(took < Duration::from_secs(5), "took {took:?}");
    drop(up);

    // Killed outright, `up` leaves its Redis running: the next one says so and stops it.
    let mut up = Up::start(home, logs.path(), &[], &env)?;
    let client = up.client();
    let t = client.wait_status(&long, "completed", WITHIN).await?;
    ensure!(t["result"]["content"][0]["text"] == "slept 1500 ms", "{t}");
    up.signal("KILL")?;
    up.exit_within(WITHIN).await?;
    // Kept (not dropped) until the end: its drop would kill the stale Redis itself.
    let killed = up;
    let stale = redis_pid(home).context("no redis pid file after a kill")?;
    ensure!(
        killed.redis_pid == Some(stale),
        "pid file {stale} vs {:?}",
        killed.redis_pid
    );
    ensure!(is_redis(stale), "the killed up's Redis died with it");
    let up = Up::start(home, logs.path(), &[], &env)?;
    ensure!(
        up.stderr_text()
            .contains(&format!("redis-server (pid {stale}) left by an `up`")),
        "{}",
        up.stderr_text()
    );
    ensure!(!is_redis(stale), "the stale Redis {stale} still runs");
    ensure!(
        up.client().get(&long).await?["status"] == "completed",
        "the task did not survive"
    );
    drop(up);
    drop(killed);
    Ok(())
}

/// `up --ephemeral` says so, keeps nothing in the data directory and deletes its Redis
/// folder on exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_ephemeral_leaves_nothing() -> Result<()> {
    let home = TempDir::new("mcpt-up-home")?;
    let logs = TempDir::new("mcpt-up-logs")?;
    let mut up = Up::start(home.path(), logs.path(), &["--ephemeral"], &[])?;
    let dir = up
        .redis_line
        .split("ephemeral: ")
        .nth(1)
        .and_then(|rest| rest.split(" is deleted on exit").next())
        .with_context(|| format!("banner: {}", up.redis_line))?
        .to_owned();
    ensure!(Path::new(&dir).is_dir(), "{dir}");
    let data = home.path().join("mcp-tasks");
    ensure!(data.join("up.json").exists(), "no runtime file");
    up.signal("INT")?;
    let (status, _) = up.exit_within(Duration::from_secs(5)).await?;
    ensure!(status.code() == Some(0), "exit {status:?}");
    ensure!(!Path::new(&dir).exists(), "{dir} left behind");
    let left: Vec<_> = std::fs::read_dir(&data)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    ensure!(left.is_empty(), "left in the data directory: {left:?}");
    Ok(())
}

/// Issue 16 review: a data directory serves one `up` at a time (the second is refused with
/// one line before it starts a Redis); an `up --data DIR` says, and the other commands
/// find it, with `--data DIR`; a busy port is refused with one line and nothing left
/// behind (no Redis started, no lock, no ephemeral folder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_up_per_data_dir_and_a_busy_port_leaves_nothing() -> Result<()> {
    let home = TempDir::new("mcpt-up-home")?;
    let logs = TempDir::new("mcpt-up-logs")?;
    let data = home.path().join("elsewhere");
    let data_arg = data.display().to_string();
    let up = Up::start(home.path(), logs.path(), &["--data", &data_arg], &[])?;
    let data = data.canonicalize()?;

    let (code, err) = up_refused(home.path(), &["--data", &data_arg], &[])?;
    ensure!(code == Some(1), "second up: {code:?} {err}");
    ensure!(err.lines().count() == 1, "{err}");
    ensure!(
        err.contains(&format!("another `mcp-tasks up` (pid {})", up.child.id())),
        "{err}"
    );
    ensure!(
        data.join("up.lock").exists(),
        "the refused up took the lock away"
    );

    // The worker registers its queue, and the console (which `queues` reads) refreshes
    // every 2 s: poll.
    poll_until(WITHIN, || async {
        let (code, out, _) = cli(home.path(), &["queues", "--data", &data_arg]).ok()?;
        (code == Some(0) && out.lines().any(|l| l.starts_with("default "))).then_some(())
    })
    .await
    .context("queues --data never showed the default queue")?;
    let other = home.path().join("nothing-here").display().to_string();
    let (code, _, err) = cli(home.path(), &["queues", "--data", &other])?;
    ensure!(
        code == Some(1) && err.lines().count() == 1,
        "{code:?} {err}"
    );

    // The port `up` serves on is busy for a newcomer (whose temp dir is its own, to see
    // that no ephemeral Redis folder was made).
    let home2 = TempDir::new("mcpt-up-home")?;
    let tmp = home2.path().join("tmp");
    std::fs::create_dir(&tmp)?;
    let busy = [
        ("MCPT_LISTEN_ADDR", up.addr.to_string()),
        ("TMPDIR", tmp.display().to_string()),
    ];
    for args in [&[][..], &["--ephemeral"]] {
        let (code, err) = up_refused(home2.path(), args, &busy)?;
        ensure!(code == Some(1), "{args:?}: {code:?} {err}");
        ensure!(
            err.lines().count() == 1 && err.contains("cannot listen on"),
            "{err}"
        );
        for dir in [home2.path().join("mcp-tasks"), tmp.clone()] {
            let left: Vec<_> = std::fs::read_dir(&dir)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()?;
            ensure!(
                left.is_empty(),
                "{args:?}: left in {}: {left:?}",
                dir.display()
            );
        }
    }
    Ok(())
}

/// Issue 15 §7: `up` serves the console and records its URL in `up.json`; next to it,
/// `queues`, `workers` and `tasks` read the console (no Redis address), and a task created
/// over MCP is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_serves_the_console_and_the_commands_read_it() -> Result<()> {
    let home = TempDir::new("mcpt-up-home")?;
    let logs = TempDir::new("mcpt-up-logs")?;
    let up = Up::start(home.path(), logs.path(), &["--ephemeral"], &[])?;
    let runtime: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        home.path().join("mcp-tasks/up.json"),
    )?)?;
    let console = format!("http://{}/console/", up.addr);
    ensure!(runtime["console_url"] == console.as_str(), "{runtime}");
    let client = Client::new(up.addr);
    client.wait_for_tool("sleep").await?;
    let id = client
        .start_task("sleep", json!({"ms": 60_000, "steps": 1}))
        .await?;
    let listed = poll_until(WITHIN, || async {
        let out = cli(home.path(), &["tasks", "--tool", "sleep"]).ok()?;
        out.1.contains(&id).then_some(out)
    })
    .await?;
    ensure!(listed.0 == Some(0), "{listed:?}");
    let queues = cli(home.path(), &["queues"])?;
    // OLDEST is a column only the console's answer has.
    ensure!(
        queues.0 == Some(0) && queues.1.contains("OLDEST") && queues.1.contains("default"),
        "{queues:?}"
    );
    client.cancel(&id).await?;
    Ok(())
}
