//! Harness for the end-to-end tests: a private `redis-server` per test, the real
//! `mcp-tasks-gateway` and `mcp-tasks-worker` binaries on free ports, and an MCP client
//! that speaks raw HTTP so tests can send anything, including garbage.
//!
//! - [`RedisServer`]: owns a redis-server process and its directory; `restart()` keeps the port.
//! - [`RedisCluster`]: a private Redis Cluster of N masters, for cluster mode.
//! - [`Gateway`], [`Worker`]: the binaries (found in `MCPT_BIN_DIR`, else next to the test
//!   executable); the gateway's address comes from its `listening on` line.
//! - [`Client`]: JSON-RPC over HTTP with the standard headers, plus an SSE reader.
//! - [`TestContext`]: one Redis, gateways and workers; call `cleanup()` at the end.
//! - [`otlp`]: an OTLP/HTTP receiver; [`metrics_text`] and [`metric_value`] read `/metrics`.

pub mod jwt;
pub mod otlp;

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// The protocol revision under test.
pub const VERSION: &str = "2026-07-28";
/// The Tasks extension id.
pub const TASKS: &str = "io.modelcontextprotocol/tasks";

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `GET /metrics` of a gateway or worker at `addr`.
pub async fn metrics_text(addr: SocketAddr) -> Result<String> {
    let res = Client::new(addr)
        .send_raw("GET", "/metrics", &[], Bytes::new())
        .await?;
    if res.status() != hyper::StatusCode::OK {
        bail!("GET /metrics on {addr}: {}", res.status());
    }
    let body = res.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(body.to_vec())?)
}

/// The value of the Prometheus sample `name` whose labels include all of `labels`, summed
/// over the matching series; 0 when none matches (OpenTelemetry reports an instrument only
/// once it was recorded).
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = match series.split_once('{') {
                Some((m, r)) => (m, r.trim_end_matches('}')),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let all = labels
                .iter()
                .all(|(k, v)| rest.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
            if !all {
                return None;
            }
            value.parse::<f64>().ok()
        })
        .sum()
}

/// A fresh directory under the system temp dir, removed by the owner.
fn temp_dir(prefix: &str) -> Result<PathBuf> {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A private redis-server on a free port. Killed on drop.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    durable: bool,
}

impl RedisServer {
    /// Start one (binary from `REDIS_SERVER_BIN`, default `redis-server`) that keeps
    /// nothing on disk.
    pub fn start() -> Result<RedisServer> {
        Self::start_with(false)
    }

    /// Start one with an append-only file fsynced on every write, so data survives
    /// [`RedisServer::restart`] (as production Redis with AOF would).
    pub fn start_durable() -> Result<RedisServer> {
        Self::start_with(true)
    }

    fn start_with(durable: bool) -> Result<RedisServer> {
        let mut server = RedisServer {
            port: free_port()?,
            dir: temp_dir("mcpt-redis")?,
            child: None,
            durable,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<()> {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(if self.durable {
                ["--appendonly", "yes", "--appendfsync", "always"].as_slice()
            } else {
                ["--appendonly", "no"].as_slice()
            })
            .args(["--maxmemory-policy", "noeviction", "--loglevel", "warning"])
            // As README "Redis in production" recommends: finished tasks stay compact.
            .args(["--hash-max-listpack-value", "1024"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {bin} (is redis-server installed?)"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("redis-server did not listen on {} within 10 s", self.port)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Run `redis-cli` against this server and return its stdout.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One field of a task's hash (`""` when absent), read behind the server's back.
    pub fn task_field(&self, task_id: &str, field: &str) -> Result<String> {
        Ok(self
            .cli(&["HGET", &self.task_key(task_id)?, field])?
            .trim()
            .to_owned())
    }

    /// The key of a task's hash, whoever owns it (`mcpt:task:{ID}:OWNER`; the anonymous
    /// owner's name when there is no such hash).
    pub fn task_key(&self, task_id: &str) -> Result<String> {
        let pattern = format!("mcpt:task:{{{task_id}}}:*");
        let found = self.cli(&["--scan", "--pattern", &pattern])?;
        Ok(found.lines().next().map(str::to_owned).unwrap_or_else(|| {
            mcp_tasks_shared::store::keys::task_key(
                task_id,
                mcp_tasks_shared::protocol::meta::ANONYMOUS_OWNER,
            )
        }))
    }

    /// Kill the server (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kill and start again on the same port (data is kept only when durable).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A private Redis Cluster of `N` masters (no replicas) on free ports, each node keeping
/// nothing on disk. Killed on drop.
///
/// Built by hand rather than with `redis-cli --cluster create` (which wants at least three
/// masters), so the benchmark can compare one master with three: each node takes an equal
/// contiguous range of slots (`CLUSTER ADDSLOTSRANGE`), the first meets the others, and
/// the cluster is ready once every node reports `cluster_state:ok`.
pub struct RedisCluster {
    ports: Vec<u16>,
    dir: PathBuf,
    children: Vec<Child>,
}

impl RedisCluster {
    /// Start `masters` nodes and join them into one cluster.
    pub fn start(masters: usize) -> Result<RedisCluster> {
        if masters == 0 {
            bail!("a cluster needs at least one master");
        }
        let mut cluster = RedisCluster {
            ports: Vec::new(),
            dir: temp_dir("mcpt-redis-cluster")?,
            children: Vec::new(),
        };
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        for _ in 0..masters {
            let port = free_port()?;
            let child = Command::new(&bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(cluster.dir.join(format!("nodes-{port}.conf")))
                .args(["--cluster-node-timeout", "5000"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--maxmemory-policy", "noeviction", "--loglevel", "warning"])
                .args(["--hash-max-listpack-value", "1024"])
                .arg("--dir")
                .arg(&cluster.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot start {bin} (is redis-server installed?)"))?;
            cluster.children.push(child);
            cluster.ports.push(port);
        }
        for &port in &cluster.ports {
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                if Instant::now() > deadline {
                    bail!("cluster node did not listen on {port} within 10 s");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        const SLOTS: usize = 16384;
        for (i, _) in cluster.ports.iter().enumerate() {
            let (from, to) = (i * SLOTS / masters, (i + 1) * SLOTS / masters - 1);
            let epoch = (i + 1).to_string();
            cluster.cli_checked(i, &["CLUSTER", "SET-CONFIG-EPOCH", &epoch])?;
            cluster.cli_checked(
                i,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &from.to_string(),
                    &to.to_string(),
                ],
            )?;
        }
        for &port in &cluster.ports[1..] {
            cluster.cli_checked(0, &["CLUSTER", "MEET", "127.0.0.1", &port.to_string()])?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = (0..masters).all(|i| {
                cluster.cli(i, &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok")
                        && info.contains(&format!("cluster_known_nodes:{masters}\r"))
                })
            });
            if ready {
                return Ok(cluster);
            }
            if Instant::now() > deadline {
                bail!("the cluster did not reach cluster_state:ok within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` for `MCPT_REDIS_URL`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// `redis://127.0.0.1:PORT` of each node.
    pub fn node_urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// Run `redis-cli` against node `i` and return its stdout.
    pub fn cli(&self, i: usize, args: &[&str]) -> Result<String> {
        let port = self.ports.get(i).context("no such node")?;
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn cli_checked(&self, i: usize, args: &[&str]) -> Result<()> {
        let out = self.cli(i, args)?;
        if !out.trim().eq_ignore_ascii_case("ok") {
            bail!("redis-cli {args:?} on node {i}: {}", out.trim());
        }
        Ok(())
    }

    /// Keys held by each node (`DBSIZE`), in node order.
    pub fn keys_per_node(&self) -> Result<Vec<u64>> {
        (0..self.ports.len())
            .map(|i| {
                let out = self.cli(i, &["DBSIZE"])?;
                out.trim()
                    .parse()
                    .with_context(|| format!("DBSIZE on node {i}: {out:?}"))
            })
            .collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Directory holding the project's binaries.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("MCPT_BIN_DIR") {
        return PathBuf::from(dir);
    }
    // target/debug/deps/e2e-HASH → target/debug
    let exe = std::env::current_exe().expect("test executable path");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// A project binary by name.
pub fn binary(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// A spawned project process; killed on drop, its stderr kept in a log file.
pub struct Process {
    child: Child,
    log: PathBuf,
    name: String,
}

impl Process {
    /// Spawn `name` with `env` (added to a cleaned environment plus PATH/HOME).
    pub fn spawn(name: &str, env: &[(&str, String)]) -> Result<(Process, Option<String>)> {
        Process::spawn_command(name, Command::new(binary(name)), env)
    }

    /// Spawn `name` as [`Process::spawn`] does, with its soft and hard limit on open files
    /// set to `open_files` (through `sh`'s `ulimit`, which then `exec`s the binary).
    pub fn spawn_with_open_files(
        name: &str,
        env: &[(&str, String)],
        open_files: u64,
    ) -> Result<Process> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\""))
            .arg(binary(name));
        Ok(Process::spawn_command(name, cmd, env)?.0)
    }

    fn spawn_command(
        name: &str,
        mut cmd: Command,
        env: &[(&str, String)],
    ) -> Result<(Process, Option<String>)> {
        let log = temp_dir("mcpt-log")?.join(format!("{name}.log"));
        cmd.env_clear();
        for keep in ["PATH", "HOME", "RUST_LOG", "RUST_BACKTRACE"] {
            if let Ok(v) = std::env::var(keep) {
                cmd.env(keep, v);
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| {
                format!(
                    "cannot start {} (run `cargo build --workspace` first)",
                    binary(name).display()
                )
            })?;
        Ok((
            Process {
                child,
                log,
                name: name.to_owned(),
            },
            None,
        ))
    }

    /// Wait for a stdout line starting with `prefix` (up to 20 s) and return its rest.
    pub fn wait_line(&mut self, prefix: &str) -> Result<String> {
        let stdout = self
            .child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("stdout already taken"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.to_owned());
                    }
                }
                Err(_) => break,
            }
        }
        bail!(
            "{} printed no line starting with {prefix:?}; log:\n{}",
            self.name,
            self.log_text()
        )
    }

    /// For a process that must refuse to start: wait (up to 20 s) for it to exit, check it
    /// exited 64 with exactly one non-empty line on stderr and nothing starting with
    /// `listening on` on stdout, and return that line.
    pub fn usage_error(&mut self) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if Instant::now() > deadline {
                bail!("{} kept running; log:\n{}", self.name, self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            std::io::Read::read_to_string(&mut stdout, &mut out)?;
        }
        let log = self.log_text();
        let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
        if status.code() != Some(64) || lines.len() != 1 || out.contains("listening on") {
            bail!(
                "{} should exit 64 with one stderr line and no listening line; got {status}, stderr {log:?}, stdout {out:?}",
                self.name
            );
        }
        Ok(lines[0].to_owned())
    }

    /// What the process wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Send SIGTERM and wait for the exit status (up to `within`).
    pub fn terminate(&mut self, within: Duration) -> Result<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("{} did not exit within {within:?} of SIGTERM", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The child, for tests that need it.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- {} log ({}) ---\n{}",
                self.name,
                self.log.display(),
                self.log_text()
            );
        }
    }
}

/// A running gateway.
pub struct Gateway {
    /// Its process.
    pub process: Process,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Gateway {
    /// Start one on a free port against `redis_url`, with extra `env`.
    pub fn start(redis_url: &str, env: &[(&str, String)]) -> Result<Gateway> {
        let all = Gateway::env(redis_url, env);
        let (process, _) = Process::spawn("mcp-tasks-gateway", &all)?;
        Gateway::listening(process)
    }

    /// [`Gateway::start`] with the process limited to `open_files` file descriptors.
    pub fn start_with_open_files(
        redis_url: &str,
        env: &[(&str, String)],
        open_files: u64,
    ) -> Result<Gateway> {
        let all = Gateway::env(redis_url, env);
        let process = Process::spawn_with_open_files("mcp-tasks-gateway", &all, open_files)?;
        Gateway::listening(process)
    }

    fn env<'a>(redis_url: &str, env: &[(&'a str, String)]) -> Vec<(&'a str, String)> {
        let mut all = vec![
            ("MCPT_REDIS_URL", redis_url.to_owned()),
            ("MCPT_LISTEN_ADDR", "127.0.0.1:0".to_owned()),
        ];
        all.extend(env.iter().cloned());
        all
    }

    fn listening(mut process: Process) -> Result<Gateway> {
        let addr = process.wait_line("listening on http://")?.parse()?;
        Ok(Gateway { process, addr })
    }

    /// How many file descriptors the gateway process has open (Linux `/proc`).
    pub fn open_fds(&mut self) -> Result<usize> {
        let pid = self.process.child().id();
        Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
    }

    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// A client for this gateway.
    pub fn client(&self) -> Client {
        Client::new(self.addr)
    }
}

/// A running worker.
pub struct Worker {
    /// Its process.
    pub process: Process,
    /// Its `/healthz`, `/readyz`, `/metrics` listener.
    pub admin: SocketAddr,
}

impl Worker {
    /// Start one against `redis_url` with `MCPT_TOOLS=conformance,demo` and extra `env`.
    pub fn start(redis_url: &str, env: &[(&str, String)]) -> Result<Worker> {
        let mut all = vec![
            ("MCPT_REDIS_URL", redis_url.to_owned()),
            ("MCPT_TOOLS", "conformance,demo".to_owned()),
        ];
        all.extend(env.iter().cloned());
        let (mut process, _) = Process::spawn("mcp-tasks-worker", &all)?;
        let admin = process.wait_line("listening on http://")?.parse()?;
        Ok(Worker { process, admin })
    }
}

/// Write a tool catalog (`MCPT_TOOLS_FILE`) to a fresh `tools.toml` in a private folder.
pub fn write_catalog(text: &str) -> Result<PathBuf> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mcpt-catalog-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("tools.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A worker given the catalog `text` refuses to start with exit 64 and one line on stderr
/// naming the file and containing `want`.
pub fn assert_catalog_refused(text: &str, want: &str) -> Result<()> {
    let path = write_catalog(text)?;
    let (mut p, _) = Process::spawn(
        "mcp-tasks-worker",
        &[
            // Never reached: the catalog is checked before anything connects.
            ("MCPT_REDIS_URL", "redis://127.0.0.1:1".to_owned()),
            ("MCPT_TOOLS", "demo".to_owned()),
            ("MCPT_TOOLS_FILE", path.display().to_string()),
        ],
    )?;
    let line = p
        .usage_error()
        .with_context(|| format!("catalog {text:?}"))?;
    let want_file = format!("MCPT_TOOLS_FILE={}: ", path.display());
    ensure!(line.contains(&want_file), "{line}");
    ensure!(line.contains(want), "got {line}\nwant {want}");
    Ok(())
}

/// A Redis, a gateway and a worker offering a tool catalog.
pub struct CatalogStack {
    /// The Redis.
    pub redis: RedisServer,
    /// The gateway.
    pub gateway: Gateway,
    /// The worker reading the catalog.
    pub worker: Worker,
    /// A client of the gateway.
    pub client: Client,
}

impl CatalogStack {
    /// Start the three with the catalog `text` (plus `worker_env`, and `gateway_env` for the
    /// gateway), once `wanted` is listed.
    pub async fn start(
        text: &str,
        wanted: &str,
        worker_env: &[(&str, String)],
        gateway_env: &[(&str, String)],
    ) -> Result<CatalogStack> {
        let path = write_catalog(text)?;
        let redis = RedisServer::start()?;
        let mut env = vec![("MCPT_TOOLS_FILE", path.display().to_string())];
        env.extend(worker_env.iter().cloned());
        let worker = Worker::start(&redis.url(), &env)?;
        let gateway = Gateway::start(&redis.url(), gateway_env)?;
        let client = gateway.client();
        client.wait_for_tool(wanted).await?;
        Ok(CatalogStack {
            redis,
            gateway,
            worker,
            client,
        })
    }
}

/// One Redis, some gateways, some workers.
pub struct TestContext {
    /// The Redis.
    pub redis: RedisServer,
    /// Gateways, in start order.
    pub gateways: Vec<Gateway>,
    /// Workers, in start order.
    pub workers: Vec<Worker>,
    cleaned: bool,
}

impl TestContext {
    /// Redis plus `gateways` gateways and `workers` workers; waits until tools are listed.
    pub async fn start(gateways: usize, workers: usize) -> Result<TestContext> {
        TestContext::start_with(gateways, workers, &[]).await
    }

    /// [`TestContext::start`] with extra `env` for every gateway and worker.
    pub async fn start_with(
        gateways: usize,
        workers: usize,
        env: &[(&str, String)],
    ) -> Result<TestContext> {
        let redis = RedisServer::start()?;
        let mut ctx = TestContext {
            gateways: Vec::new(),
            workers: Vec::new(),
            redis,
            cleaned: false,
        };
        for _ in 0..workers {
            ctx.workers.push(Worker::start(&ctx.redis.url(), env)?);
        }
        for _ in 0..gateways {
            ctx.gateways.push(Gateway::start(&ctx.redis.url(), env)?);
        }
        if workers > 0 && gateways > 0 {
            ctx.wait_for_tools().await?;
        }
        Ok(ctx)
    }

    /// Wait until the first gateway lists the workers' tools (they advertise all at once).
    pub async fn wait_for_tools(&self) -> Result<()> {
        self.client().wait_for_tool("sleep").await
    }

    /// A client of the first gateway.
    pub fn client(&self) -> Client {
        self.gateways[0].client()
    }

    /// Stop everything; call at the end of each test.
    pub async fn cleanup(mut self) {
        self.cleaned = true;
        self.gateways.clear();
        self.workers.clear();
    }
}

impl Drop for TestContext {
    fn drop(&mut self) {
        if !self.cleaned && !std::thread::panicking() {
            eprintln!("TestContext dropped without cleanup(); process logs follow");
            for g in &self.gateways {
                eprintln!("--- gateway ---\n{}", g.process.log_text());
            }
        }
    }
}

/// Poll `f` until it returns `Some`, or fail after `within`.
pub async fn poll_until<T, F, Fut>(within: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("condition not met within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Client capabilities declaring nothing.
pub fn caps_none() -> Value {
    json!({})
}

/// Client capabilities declaring the Tasks extension and form elicitation.
pub fn caps_tasks() -> Value {
    json!({"elicitation": {}, "extensions": {TASKS: {}}})
}

/// `params._meta` for a request with `caps`.
pub fn meta(caps: &Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-tasks-e2e", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// An HTTP response, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: hyper::HeaderMap,
    /// Body bytes.
    pub raw: Bytes,
    /// Body as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

impl Reply {
    /// `error.code`, if the body is an error response.
    pub fn error_code(&self) -> Option<i64> {
        self.body["error"]["code"].as_i64()
    }
}

/// A raw MCP-over-HTTP client.
#[derive(Clone)]
pub struct Client {
    addr: SocketAddr,
    http: HyperClient<HttpConnector, Full<Bytes>>,
    /// Sent as `Authorization: Bearer` unless a request sets its own.
    token: Option<String>,
}

static NEXT_ID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);

impl Client {
    /// A client of the gateway at `addr`.
    pub fn new(addr: SocketAddr) -> Client {
        Client {
            addr,
            http: HyperClient::builder(TokioExecutor::new()).build_http(),
            token: None,
        }
    }

    /// Wait (up to 20 s) until `tools/list` names `tool`: a worker offering it advertised.
    pub async fn wait_for_tool(&self, tool: &str) -> Result<()> {
        poll_until(Duration::from_secs(20), || async {
            let r = self
                .request("tools/list", json!({}), &caps_none())
                .await
                .ok()?;
            r.body["result"]["tools"]
                .as_array()?
                .iter()
                .any(|t| t["name"] == tool)
                .then_some(())
        })
        .await
        .with_context(|| format!("{tool} never appeared in tools/list"))
    }

    /// The same client, authenticating with bearer `token`.
    pub fn with_token(&self, token: &str) -> Client {
        Client {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    /// POST `body` to `/mcp` with exactly `headers` (plus Host).
    pub async fn post_raw(
        &self,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<Reply> {
        let res = self.send_raw("POST", "/mcp", headers, body.into()).await?;
        read_reply(res).await
    }

    /// Send any method to any path.
    pub async fn send_raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<hyper::Response<Incoming>> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(token) = &self.token
            && !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req.body(Full::new(body))?;
        Ok(tokio::time::timeout(Duration::from_secs(30), self.http.request(req)).await??)
    }

    /// The standard headers for `method` (and `Mcp-Name` when given).
    pub fn headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'static str, &'a str)> {
        let mut h = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", VERSION),
            ("mcp-method", method),
        ];
        if let Some(n) = name {
            h.push(("mcp-name", n));
        }
        h
    }

    /// A well-formed request: standard headers, `_meta` with `caps`, `Mcp-Name` derived
    /// from `params.name` / `params.taskId` where the method needs one.
    pub async fn request(&self, method: &str, mut params: Value, caps: &Value) -> Result<Reply> {
        params["_meta"] = meta(caps);
        let name = match method {
            "tools/call" => params["name"].as_str().map(str::to_owned),
            "tasks/get" | "tasks/update" | "tasks/cancel" => {
                params["taskId"].as_str().map(str::to_owned)
            }
            _ => None,
        };
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let headers = Client::headers(method, name.as_deref());
        self.post_raw(&headers, serde_json::to_vec(&body)?).await
    }

    /// `tools/call`.
    pub async fn call(&self, tool: &str, args: Value, caps: &Value) -> Result<Reply> {
        self.request("tools/call", json!({"name": tool, "arguments": args}), caps)
            .await
    }

    /// `tools/call` declaring the extension; returns the new task id (fails if not a task).
    pub async fn start_task(&self, tool: &str, args: Value) -> Result<String> {
        let r = self.call(tool, args, &caps_tasks()).await?;
        let id = r.body["result"]["taskId"]
            .as_str()
            .ok_or_else(|| anyhow!("not a task: {}", r.body))?;
        Ok(id.to_owned())
    }

    /// `tasks/get` result (fails on an error response).
    pub async fn get(&self, task_id: &str) -> Result<Value> {
        let r = self
            .request("tasks/get", json!({"taskId": task_id}), &caps_tasks())
            .await?;
        if r.body.get("error").is_some() {
            bail!("tasks/get {task_id}: {}", r.body);
        }
        Ok(r.body["result"].clone())
    }

    /// Poll `tasks/get` until `status` (up to `within`).
    pub async fn wait_status(
        &self,
        task_id: &str,
        status: &str,
        within: Duration,
    ) -> Result<Value> {
        let deadline = Instant::now() + within;
        loop {
            let t = self.get(task_id).await?;
            if t["status"] == status {
                return Ok(t);
            }
            if Instant::now() > deadline {
                bail!("task {task_id} never reached {status} within {within:?}; last seen {t}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `tasks/update`.
    pub async fn update(&self, task_id: &str, responses: Value) -> Result<Reply> {
        self.request(
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": responses}),
            &caps_tasks(),
        )
        .await
    }

    /// `tasks/cancel`.
    pub async fn cancel(&self, task_id: &str) -> Result<Reply> {
        self.request("tasks/cancel", json!({"taskId": task_id}), &caps_tasks())
            .await
    }

    /// Open a `subscriptions/listen` stream for `task_ids` with request id `id` (a string or
    /// an integer).
    /// POST `body` with exactly `headers` and open the SSE stream it answers with.
    pub async fn post_stream(&self, headers: &[(&str, &str)], body: &Value) -> Result<SseStream> {
        let res = self
            .send_raw("POST", "/mcp", headers, serde_json::to_vec(body)?.into())
            .await?;
        if res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            != Some("text/event-stream")
        {
            let r = read_reply(res).await?;
            bail!("the POST did not open a stream: {} {}", r.status, r.body);
        }
        Ok(SseStream {
            body: res.into_body(),
            buf: Vec::new(),
        })
    }

    pub async fn listen(&self, id: impl Into<Value>, task_ids: &[&str]) -> Result<SseStream> {
        let id: Value = id.into();
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": task_ids}, "_meta": meta(&caps_tasks())}
        });
        self.post_stream(&Client::headers("subscriptions/listen", None), &body)
            .await
            .map_err(|e| anyhow!("listen: {e}"))
    }
}

async fn read_reply(res: hyper::Response<Incoming>) -> Result<Reply> {
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let raw = tokio::time::timeout(Duration::from_secs(30), res.into_body().collect())
        .await??
        .to_bytes();
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Ok(Reply {
        status,
        headers,
        raw,
        body,
    })
}

/// An open SSE response.
pub struct SseStream {
    body: Incoming,
    buf: Vec<u8>,
}

impl SseStream {
    /// The stream of a response already known to be SSE.
    pub fn from_response(res: hyper::Response<Incoming>) -> SseStream {
        SseStream {
            body: res.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next JSON-RPC message (comments skipped), or `None` when the stream ended or
    /// nothing came within `within`.
    pub async fn next(&mut self, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..pos + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let data: String = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect::<Vec<_>>()
                    .join("\n");
                if data.is_empty() {
                    continue;
                }
                return serde_json::from_str(&data).ok();
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }
}

/// The repository root (for running the Node scripts under `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Command-line flags of the test tools (`chaos`, `cluster`): `--name value` or
/// `--name=value`, in order; `None` when `-h`/`--help` was asked for.
///
/// # Errors
/// A flag without its value.
pub fn flags() -> Result<Option<Vec<(String, String)>>> {
    let mut out = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n.to_owned(), v.to_owned()),
            None => {
                let value = it.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
                (flag, value)
            }
        };
        out.push((name, value));
    }
    Ok(Some(out))
}
