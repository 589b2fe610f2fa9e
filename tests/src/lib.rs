//! Harness for the end-to-end tests and the test tools: a private `redis-server` per test,
//! the real `mcp-tasks-gateway` and `mcp-tasks-worker` binaries on free ports, and an MCP
//! client that speaks raw HTTP so tests can send anything, including garbage.
//!
//! - [`RedisServer`]: owns a redis-server process and its directory; `restart()` keeps the port.
//! - [`RedisCluster`]: a private Redis Cluster of N masters, for cluster mode.
//! - [`Sentinels`]: private Redis Sentinels watching a primary, for failover tests.
//! - [`Gateway`], [`Worker`]: the binaries (found in `MCPT_BIN_DIR`, else next to the test
//!   executable); the gateway's address comes from its `listening on` line.
//! - [`Client`]: JSON-RPC over HTTP with the standard headers; [`SseStream`] reads the SSE
//!   streams it opens ([`sse`] reads them with the workspace's one SSE decoder).
//! - [`TestContext`]: one Redis, gateways and workers; call `cleanup()` at the end.
//! - [`otlp`]: an OTLP/HTTP receiver; [`metrics_text`] and [`metric_value`] read `/metrics`.
//! - [`cli`]: the command lines of the tools `bench`, `chaos` and `cluster`.

pub mod cli;
pub mod jwt;
pub mod otlp;
pub mod sentinel;
pub mod sse;

mod client;
mod process;
mod redis_server;

pub use client::{Client, REQUEST_TIMEOUT, Reply, caps_none, caps_tasks, meta};
pub use process::{Gateway, Process, Worker, bin_dir, binary};
pub use redis_server::{RedisCluster, RedisServer};
pub use sentinel::Sentinels;
pub use sse::{SseDecoder, SseStream};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use bytes::Bytes;
use http_body_util::BodyExt as _;

/// The protocol revision under test.
pub const VERSION: &str = "2026-07-28";
/// The Tasks extension id.
pub const TASKS: &str = "io.modelcontextprotocol/tasks";

pub(crate) fn free_port() -> Result<u16> {
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

/// A fresh directory under the system temp dir, removed by the owner (on drop: every
/// caller keeps it in a type whose `Drop` removes it, as [`TempDir`]). The one way the
/// harness and the tests name a temp directory.
///
/// # Errors
/// It cannot be created.
pub fn temp_dir(prefix: &str) -> Result<PathBuf> {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Alice's static token in [`TwoTokens`].
pub const ALICE_TOKEN: &str = "alice-token-0123456789abcdef";
/// Bob's static token in [`TwoTokens`].
pub const BOB_TOKEN: &str = "bob-token-0123456789abcdef0000";

/// A tokens file naming two principals, alice ([`ALICE_TOKEN`]) and bob ([`BOB_TOKEN`]),
/// in a private folder removed on drop: for tests of one principal against another.
pub struct TwoTokens {
    dir: PathBuf,
}

impl TwoTokens {
    /// Write the file.
    ///
    /// # Errors
    /// The folder cannot be written.
    pub fn new() -> Result<TwoTokens> {
        let dir = temp_dir("mcpt-tokens")?;
        std::fs::write(
            dir.join("tokens"),
            format!("alice {ALICE_TOKEN}\nbob {BOB_TOKEN}\n"),
        )?;
        Ok(TwoTokens { dir })
    }

    /// The tokens file (rewrite it to revoke or add tokens; the gateway rereads it).
    pub fn file(&self) -> PathBuf {
        self.dir.join("tokens")
    }

    /// `MCPT_AUTH=tokens` and `MCPT_AUTH_TOKENS_FILE` for the binaries.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MCPT_AUTH", "tokens".to_owned()),
            (
                "MCPT_AUTH_TOKENS_FILE",
                self.dir.join("tokens").display().to_string(),
            ),
        ]
    }
}

impl Drop for TwoTokens {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A file in a private temp folder of its own; the folder goes on drop, also when the
/// test fails.
pub struct TempFile {
    dir: PathBuf,
    path: PathBuf,
}

impl TempFile {
    /// A path named `name` in a fresh private folder (the file itself is not created).
    ///
    /// # Errors
    /// The folder cannot be created.
    pub fn new(name: &str) -> Result<TempFile> {
        let dir = temp_dir("mcpt-file")?;
        Ok(TempFile {
            path: dir.join(name),
            dir,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A private directory under the system temp dir, removed with everything in it on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory named after `prefix`.
    ///
    /// # Errors
    /// It cannot be created.
    pub fn new(prefix: &str) -> Result<TempDir> {
        temp_dir(prefix).map(TempDir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run the `mcp-tasks` command with `args` against the Redis at `redis` (nothing else of
/// this process's environment but `PATH`): its exit code, stdout and stderr.
///
/// # Errors
/// The binary cannot be run.
pub fn mcp_tasks(redis: &str, args: &[&str]) -> Result<(i32, String, String)> {
    let out = std::process::Command::new(binary("mcp-tasks"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("MCPT_REDIS_URL", redis)
        .output()
        .context("cannot run mcp-tasks (run `cargo build --workspace --bins` first)")?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// [`mcp_tasks`] that must exit 0: its stdout.
///
/// # Errors
/// It could not run, or exited otherwise (with its stderr).
pub fn mcp_tasks_ok(redis: &str, args: &[&str]) -> Result<String> {
    let (code, stdout, stderr) = mcp_tasks(redis, args)?;
    ensure!(code == 0, "mcp-tasks {args:?} exited {code}: {stderr}");
    Ok(stdout)
}

/// Write a tool catalog (`MCPT_TOOLS_FILE`) to a fresh `tools.toml` in a private folder,
/// removed when the returned file is dropped.
pub fn write_catalog(text: &str) -> Result<TempFile> {
    let file = TempFile::new("tools.toml")?;
    std::fs::write(file.path(), text)?;
    Ok(file)
}

/// A worker given the catalog `text` refuses to start with exit 64 and one line on stderr
/// naming the file and containing `want`: that line.
pub fn assert_catalog_refused(text: &str, want: &str) -> Result<String> {
    let catalog = write_catalog(text)?;
    let path = catalog.path();
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
    Ok(line)
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
    /// The catalog file, kept while the worker runs.
    _catalog: TempFile,
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
        CatalogStack::start_as(text, wanted, worker_env, gateway_env, None).await
    }

    /// [`CatalogStack::start`] whose client authenticates with bearer `token` (for a
    /// gateway with `MCPT_AUTH` in `gateway_env`).
    ///
    /// # Errors
    /// As [`CatalogStack::start`].
    pub async fn start_as(
        text: &str,
        wanted: &str,
        worker_env: &[(&str, String)],
        gateway_env: &[(&str, String)],
        token: Option<&str>,
    ) -> Result<CatalogStack> {
        let catalog = write_catalog(text)?;
        let redis = RedisServer::start()?;
        let mut env = vec![("MCPT_TOOLS_FILE", catalog.path().display().to_string())];
        env.extend(worker_env.iter().cloned());
        let worker = Worker::start(&redis.url(), &env)?;
        let gateway = Gateway::start(&redis.url(), gateway_env)?;
        let client = match token {
            Some(token) => gateway.client().with_token(token),
            None => gateway.client(),
        };
        client.wait_for_tool(wanted).await?;
        Ok(CatalogStack {
            redis,
            gateway,
            worker,
            client,
            _catalog: catalog,
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

/// What one try of [`poll_until`] gave: done with a value, or not yet (an `Err` says why,
/// and the last one is reported when time runs out).
pub trait Polled<T> {
    /// The value, or why not yet.
    fn done(self) -> Result<T, Option<anyhow::Error>>;
}

impl<T> Polled<T> for Option<T> {
    fn done(self) -> Result<T, Option<anyhow::Error>> {
        self.ok_or(None)
    }
}

impl<T> Polled<T> for Result<T> {
    fn done(self) -> Result<T, Option<anyhow::Error>> {
        self.map_err(Some)
    }
}

/// Poll `f` until it returns `Some` (or `Ok`), or fail after `within` (with the last
/// error, when `f` gives reasons).
pub async fn poll_until<T, P, F, Fut>(within: Duration, mut f: F) -> Result<T>
where
    P: Polled<T>,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = P>,
{
    let deadline = Instant::now() + within;
    loop {
        let why = match f().await.done() {
            Ok(v) => return Ok(v),
            Err(why) => why,
        };
        if Instant::now() > deadline {
            return Err(match why {
                Some(e) => e.context(format!("not true within {within:?}")),
                None => anyhow::anyhow!("condition not met within {within:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The repository root (for running the Node scripts under `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The product code's directories, relative to the repository root.
pub const PRODUCT_DIRS: [&str; 5] = ["gateway", "console", "worker", "shared", "cli"];

/// Every `.rs` file under [`PRODUCT_DIRS`], sorted, skipping `target` and `fuzz` directories
/// (the fuzz targets are a test harness).
///
/// # Errors
/// A directory cannot be read.
pub fn product_rust_files() -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if name != "target" && name != "fuzz" {
                    walk(&path, out)?;
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
        Ok(())
    }
    let root = repo_root();
    let mut files = Vec::new();
    for dir in PRODUCT_DIRS {
        let dir = root.join(dir);
        if dir.is_dir() {
            walk(&dir, &mut files)?;
        }
    }
    files.sort();
    Ok(files)
}

/// `s` cut to at most `max` bytes (at a character boundary), with `…` when cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod poll_tests {
    use super::*;

    /// A try that gives reasons is reported with its last one; one that does not, plainly.
    #[tokio::test]
    async fn polling_reports_the_last_reason() {
        let mut n = 0;
        let e = poll_until(Duration::from_millis(50), || {
            n += 1;
            let n = n;
            async move { Err::<(), _>(anyhow::anyhow!("still {n}")) }
        })
        .await
        .unwrap_err();
        assert!(format!("{e:#}").contains("still "), "{e:#}");
        let e = poll_until(Duration::from_millis(50), || async { None::<()> })
            .await
            .unwrap_err();
        assert!(e.to_string().contains("condition not met"), "{e}");
        assert_eq!(
            poll_until(Duration::ZERO, || async { Some(7) })
                .await
                .unwrap(),
            7
        );
    }
}
