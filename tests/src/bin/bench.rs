//! `bench`: throughput, latency and per-task costs of a real mcp-tasks stack on this
//! machine. It prints figures; it asserts nothing.
//!
//! `cargo build --release --workspace && cargo run --release -p mcp-tasks-tests --bin bench -- --help`

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcp_tasks_shared::store::{
    Created, Finish, Job, NewTask, OwnerLimits, Start, Store, Write, keys, new_task_id,
};
use mcp_tasks_tests::{Gateway, RedisCluster, RedisServer, VERSION, Worker, caps_tasks, meta};
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use tokio::task::JoinSet;

const HELP: &str = "\
bench: throughput, latency and per-task costs of mcp-tasks on this machine. It prints
figures and asserts nothing.

USAGE
  cargo build --release --workspace       # the gateway and worker binaries it starts
  cargo run --release -p mcp-tasks-tests --bin bench -- [OPTIONS]

  By default it starts its own stack from the binaries beside the bench executable (or
  MCPT_BIN_DIR): a private redis-server (REDIS_SERVER_BIN), one gateway and one worker
  (MCPT_TOOLS=demo, MCPT_CONCURRENCY=--worker-concurrency, limits off). RUST_LOG is passed
  on to them (the default, info, logs a line per created task). Everything shares this
  machine's cores with the bench process itself; the CPU table shows who used what.

WHAT IT MEASURES
  Per concurrency C in --clients: C client tasks sharing one keep-alive HTTP/1.1 pool.
  Each phase runs a warm-up (a fifth of --duration, at most 1 s) and then --duration;
  operations completing inside the measured window count. The job queue is drained
  between phases.
    create      tools/call sleep {\"ms\":0} declaring the tasks extension: calls/s, p50/p99
                of the HTTP request
    get         tasks/get of one completed task: gets/s, p50/p99
    e2e poll    create, then tasks/get back to back (no sleep) until completed: tasks/s,
                p50/p99 of create -> completed observed, gets per task
    e2e listen  create, then subscriptions/listen on that id, read until the terminal
                notifications/tasks: tasks/s, p50/p99 (the task is mostly complete before
                the stream opens: its terminal state then comes in the listen's snapshot;
                counted)
    push        the same with sleep {\"ms\":M}, M = 2 x the e2e listen p99 (at least 20),
                so the terminal state is pushed on the open stream: notify = receive time (this machine's clock) minus the
                notification's lastUpdatedAt (Redis' clock, whole ms, so up to 1 ms too
                high: 1 ms resolution), over pushed terminal notifications
  Once:
    per task    --tasks N lifecycles over 16 clients: create, wait 20 ms, one tasks/get
                (again every 10 ms while not completed; the extra gets are counted).
                Redis commands (INFO commandstats deltas; commands run inside Lua scripts
                count as well; INFO itself is left out), Redis command time (usec),
                Redis CPU (INFO cpu), gateway/worker/redis CPU (/proc/PID/stat), Redis
                used_memory growth (the tasks keep their TTL), each divided by N. Then N
                tasks/get alone: commands per get. An idle window of 2 s before gives the
                background command rate (heartbeats, blocked reads), included above.
    listeners   --listeners L idle subscriptions/listen streams ({\"notifications\":{}}),
                opened 200 at a time, each acknowledged before measuring: gateway VmRSS
                growth per stream (needs L + 256 open files for the bench and the gateway)
    limit       the same Redis command mix without HTTP, gateway or worker: --limit-loops
                K loops in this process on mcp_tasks_shared::store::Store (create_task,
                JobReader::read (XREADGROUP), finish(Completed), get_task; like the
                worker, no start for a run under 20 ms: finish with fence 0) on a queue no
                worker serves, for --duration: lifecycles/s, and the best e2e rates as a
                share of it. The per-command breakdowns of this run and of the
                per-task run show where the mixes differ. Then
                redis-benchmark SET/GET (-c 50 -P 16) for raw Redis ops/s (own stack only).

OUTPUT
  Progress on stderr; the tables on stdout; DIR/bench.json (every figure, nproc, git
  commit, command line) and DIR/bench.png (throughput and p99 latency against clients;
  font from BENCH_FONT, default /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf; a failed
  PNG is reported and does not fail the run). Exit 0; 1 when a phase failed (the processes
  it started are stopped); 64 for bad options.

OPTIONS
  --clients LIST            concurrencies, comma-separated (default 1,16,64)
  --duration DUR            measured time per phase and concurrency (default 5s)
  --tasks N                 lifecycles for the per-task costs (default 2000; 0 skips)
  --listeners L             idle listen streams (default 10000; 0 skips)
  --limit-loops K           concurrent loops of the Redis limit run (default 64; 0 skips)
  --limit-conns N           Store connections the loops share (default 4)
  --limit-start yes|no      call Store::start before finish in the limit run (default no)
  --worker-concurrency N    MCPT_CONCURRENCY of the worker it starts (default 64)
  --redis-benchmark N       requests per redis-benchmark test (default 200000; 0 skips)
  --out DIR                 where bench.json and bench.png go (default target/bench)
  --url URL --redis URL     drive an existing stack instead (http://HOST:PORT/mcp, and the
                            Redis it uses); server CPU is then read for Redis only (INFO
                            cpu), the listener RSS is not measured, the queue is 'default'
  --redis-cluster N         start a Redis Cluster of N masters (no replicas) instead of one
                            redis-server, and run the gateway and worker in cluster mode
                            (MCPT_REDIS_URL=redis+cluster://...). Redis-side figures (INFO:
                            commands, Redis CPU and memory) are then of the first master
                            only, and the per-task costs, the Redis limit and
                            redis-benchmark are skipped; the throughput phases are the same.
                            Compare runs with N=1 and N=3 for scaling.
  --queue-shards S          MCPT_QUEUE_SHARDS with --redis-cluster (default 16)
  -h, --help                this text
  DUR is like 500ms, 2s, 1m.

SMALL RUN (CI)
  bench --clients 1,4 --duration 1s --tasks 200 --listeners 200
";

/// Bound on one HTTP exchange or one awaited SSE event.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Listen streams opened at once in the idle-listener phase.
const LISTEN_PARALLEL: usize = 200;
/// Clients of the per-task cost run.
const COST_CLIENTS: usize = 16;
/// The queue the demo tools are served from.
const QUEUE: &str = "default";
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// Least sleep of the push-latency phase's tasks; more when opening a listen takes longer
/// (twice the e2e listen p99), so the stream is open before they end.
const PUSH_MS: u64 = 20;

// ---------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Args {
    clients: Vec<usize>,
    duration: Duration,
    tasks: usize,
    listeners: usize,
    limit_loops: usize,
    limit_conns: usize,
    limit_start: bool,
    worker_concurrency: usize,
    redis_benchmark: u64,
    out: Option<PathBuf>,
    url: Option<String>,
    redis: Option<String>,
    redis_cluster: Option<usize>,
    queue_shards: u16,
}

fn parse_duration(s: &str) -> Result<Duration> {
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| anyhow!("duration {s:?} has no unit (ms, s, m)"))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().with_context(|| format!("bad duration {s:?}"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => bail!("bad duration unit in {s:?} (ms, s, m)"),
    })
}

fn parse_args() -> Result<Option<Args>> {
    let mut a = Args {
        clients: vec![1, 16, 64],
        duration: Duration::from_secs(5),
        tasks: 2000,
        listeners: 10_000,
        limit_loops: 64,
        limit_conns: 4,
        limit_start: false,
        worker_concurrency: 64,
        redis_benchmark: 200_000,
        out: None,
        url: None,
        redis: None,
        redis_cluster: None,
        queue_shards: 16,
    };
    let Some(flags) = mcp_tasks_tests::flags()? else {
        return Ok(None);
    };
    for (name, v) in flags {
        match name.as_str() {
            "--clients" => {
                a.clients = v
                    .split(',')
                    .map(|c| match c.trim().parse::<usize>() {
                        Ok(n) if (1..=10_000).contains(&n) => Ok(n),
                        _ => Err(anyhow!(
                            "--clients takes numbers from 1 to 10000, comma-separated; got {c:?}"
                        )),
                    })
                    .collect::<Result<_>>()?;
            }
            "--duration" => {
                a.duration = parse_duration(&v)?;
                if a.duration < Duration::from_millis(100) {
                    bail!("--duration must be at least 100ms");
                }
            }
            "--tasks" => a.tasks = v.parse().context("--tasks takes a count")?,
            "--listeners" => a.listeners = v.parse().context("--listeners takes a count")?,
            "--limit-loops" => a.limit_loops = v.parse().context("--limit-loops takes a count")?,
            "--limit-conns" => {
                a.limit_conns = v.parse().context("--limit-conns takes a count")?;
                if a.limit_conns == 0 {
                    bail!("--limit-conns must be at least 1");
                }
            }
            "--limit-start" => {
                a.limit_start = match v.as_str() {
                    "yes" => true,
                    "no" => false,
                    _ => bail!("--limit-start takes yes or no"),
                }
            }
            "--worker-concurrency" => {
                a.worker_concurrency = v.parse().context("--worker-concurrency takes a count")?;
                if a.worker_concurrency == 0 {
                    bail!("--worker-concurrency must be at least 1");
                }
            }
            "--redis-benchmark" => {
                a.redis_benchmark = v.parse().context("--redis-benchmark takes a count")?
            }
            "--out" => a.out = Some(PathBuf::from(v)),
            "--url" => {
                parse_url(&v)?;
                a.url = Some(v);
            }
            "--redis" => {
                if !v.starts_with("redis://") {
                    bail!("--redis takes a redis:// URL");
                }
                a.redis = Some(v);
            }
            "--redis-cluster" => {
                let n: usize = v
                    .parse()
                    .context("--redis-cluster takes a count of masters")?;
                if !(1..=16).contains(&n) {
                    bail!("--redis-cluster takes 1 to 16 masters");
                }
                a.redis_cluster = Some(n);
            }
            "--queue-shards" => {
                a.queue_shards = v.parse().context("--queue-shards takes a count")?;
                if !(1..=1024).contains(&a.queue_shards) {
                    bail!("--queue-shards takes 1 to 1024");
                }
            }
            other => bail!("unknown option {other}"),
        }
    }
    if a.url.is_some() != a.redis.is_some() {
        bail!("--url and --redis go together (the Redis of that stack)");
    }
    if a.url.is_some() && a.redis_cluster.is_some() {
        bail!("--redis-cluster starts its own stack; it does not go with --url");
    }
    Ok(Some(a))
}

/// `http://HOST:PORT/PATH` → address and path.
fn parse_url(url: &str) -> Result<(SocketAddr, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("--url must start with http:// (got {url:?})"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, "/mcp".to_owned()),
    };
    let addr = hostport
        .to_socket_addrs()
        .with_context(|| format!("--url: cannot resolve {hostport:?} (HOST:PORT)"))?
        .next()
        .ok_or_else(|| anyhow!("--url: {hostport:?} resolves to nothing"))?;
    Ok((addr, path))
}

// ---------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------

type Pool = HyperClient<HttpConnector, Full<Bytes>>;

/// MCP over HTTP with one shared keep-alive pool and prebuilt request bodies.
#[derive(Clone)]
struct Http {
    pool: Pool,
    uri: hyper::Uri,
    /// `params._meta` declaring the tasks extension, as JSON text.
    meta: Arc<str>,
    /// `tools/call sleep {"ms":0}`.
    create: Bytes,
}

static NEXT_SUB: AtomicU64 = AtomicU64::new(1);

impl Http {
    fn new(addr: SocketAddr, path: &str) -> Result<Http> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let pool = HyperClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        let meta: Arc<str> = serde_json::to_string(&meta(&caps_tasks()))?.into();
        let create = call_body(&meta, 0);
        Ok(Http {
            pool,
            uri: format!("http://{addr}{path}").parse()?,
            meta,
            create,
        })
    }

    async fn send(
        &self,
        method: &str,
        name: Option<&str>,
        body: Bytes,
    ) -> Result<hyper::Response<Incoming>> {
        let mut req = hyper::Request::post(self.uri.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-method", method);
        if let Some(n) = name {
            req = req.header("mcp-name", n);
        }
        let req = req.body(Full::new(body))?;
        match tokio::time::timeout(REQUEST_TIMEOUT, self.pool.request(req)).await {
            Err(_) => bail!("{method}: no response within {REQUEST_TIMEOUT:?}"),
            Ok(r) => r.with_context(|| format!("{method}: HTTP request failed")),
        }
    }

    /// A JSON-RPC request; its `result` (fails on an HTTP or JSON-RPC error).
    async fn rpc(&self, method: &str, name: Option<&str>, body: Bytes) -> Result<Value> {
        let res = self.send(method, name, body).await?;
        let status = res.status();
        let raw = match tokio::time::timeout(REQUEST_TIMEOUT, res.into_body().collect()).await {
            Err(_) => bail!("{method}: body not complete within {REQUEST_TIMEOUT:?}"),
            Ok(b) => b?.to_bytes(),
        };
        let mut v: Value = serde_json::from_slice(&raw).map_err(|_| {
            anyhow!(
                "{method}: HTTP {status}, not JSON: {}",
                String::from_utf8_lossy(&raw[..raw.len().min(300)])
            )
        })?;
        if status != hyper::StatusCode::OK || v.get("error").is_some() {
            bail!("{method}: HTTP {status}: {}", short(&v));
        }
        Ok(v["result"].take())
    }

    /// `tools/call sleep {"ms":0}`: the new task id.
    async fn create(&self) -> Result<String> {
        self.create_with(self.create.clone()).await
    }

    /// `tools/call` with this prebuilt body: the new task id.
    async fn create_with(&self, body: Bytes) -> Result<String> {
        let r = self.rpc("tools/call", Some("sleep"), body).await?;
        match r["taskId"].as_str() {
            Some(id) if r["resultType"] == "task" => Ok(id.to_owned()),
            _ => bail!("tools/call answered without a task handle: {}", short(&r)),
        }
    }

    /// `tasks/get`: the task's status.
    async fn get(&self, id: &str) -> Result<String> {
        let meta = &self.meta;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"taskId":"{id}","_meta":{meta}}}}}"#
        );
        let r = self.rpc("tasks/get", Some(id), body.into()).await?;
        match r["status"].as_str() {
            Some(s) => Ok(s.to_owned()),
            None => bail!("tasks/get {id} has no status: {}", short(&r)),
        }
    }

    /// Open `subscriptions/listen` for `task` (or for no task ids at all).
    async fn listen(&self, task: Option<&str>) -> Result<Sse> {
        let sub = NEXT_SUB.fetch_add(1, Ordering::Relaxed);
        let meta = &self.meta;
        let filter = match task {
            Some(id) => format!(r#"{{"taskIds":["{id}"]}}"#),
            None => "{}".to_owned(),
        };
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"L{sub}","method":"subscriptions/listen","params":{{"notifications":{filter},"_meta":{meta}}}}}"#
        );
        let res = self.send("subscriptions/listen", None, body.into()).await?;
        let sse = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !sse {
            let status = res.status();
            let raw = tokio::time::timeout(REQUEST_TIMEOUT, res.into_body().collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            bail!(
                "subscriptions/listen opened no stream: HTTP {status} {}",
                String::from_utf8_lossy(&raw[..raw.len().min(300)])
            );
        }
        Ok(Sse {
            body: res.into_body(),
            buf: Vec::new(),
            last: SystemTime::now(),
        })
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 300 {
        format!("{}…", s.chars().take(300).collect::<String>())
    } else {
        s
    }
}

/// `tools/call sleep {"ms":ms}` with `_meta` `meta`.
fn call_body(meta: &str, ms: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":{ms}}},"_meta":{meta}}}}}"#
    ))
}

/// An open SSE response.
struct Sse {
    body: Incoming,
    buf: Vec<u8>,
    /// When the last frame arrived.
    last: SystemTime,
}

impl Sse {
    /// The next JSON-RPC message and when the frame completing it arrived.
    async fn next(&mut self) -> Result<(Value, SystemTime)> {
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..pos + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                let v = serde_json::from_str(&data.join("\n"))
                    .with_context(|| format!("undecodable SSE event {text:?}"))?;
                return Ok((v, self.last));
            }
            let frame = match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => bail!("no SSE event within {REQUEST_TIMEOUT:?}"),
                Ok(None) => bail!("the SSE stream ended"),
                Ok(Some(f)) => f.context("reading the SSE stream")?,
            };
            self.last = SystemTime::now();
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }

    /// Read the acknowledgement; the task ids it honoured.
    async fn ack(&mut self) -> Result<Vec<String>> {
        let (v, _) = self.next().await?;
        if v["method"] != "notifications/subscriptions/acknowledged" {
            bail!(
                "listen: first event is not the acknowledgement: {}",
                short(&v)
            );
        }
        Ok(v["params"]["notifications"]["taskIds"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// `2026-11-29T19:21:24.033Z` → ms since the epoch.
fn parse_rfc3339_ms(ts: &str) -> Option<i64> {
    let (date, time) = ts.split_once('T')?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let mut t = time.trim_end_matches('Z').split(':');
    let (h, min): (i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    let sec_part = t.next()?;
    let (secs, frac) = sec_part.split_once('.').unwrap_or((sec_part, "0"));
    let s: i64 = secs.parse().ok()?;
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    // days_from_civil (H. Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + min) * 60_000 + s * 1000 + ms)
}

fn now_micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

// ---------------------------------------------------------------------------------------
// Readings: /proc, Redis INFO
// ---------------------------------------------------------------------------------------

/// utime + stime of `pid`, in clock ticks.
fn proc_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// VmRSS of `pid` in bytes.
fn vm_rss(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Soft limit on open files of `pid` ("self" for this process).
fn fd_limit(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

async fn info(con: &mut MultiplexedConnection, section: &str) -> Result<String> {
    redis::cmd("INFO")
        .arg(section)
        .query_async(con)
        .await
        .with_context(|| format!("INFO {section}"))
}

fn info_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// One reading of Redis and of the processes.
#[derive(Clone)]
struct Snap {
    at: Instant,
    /// command → (calls, usec); INFO left out.
    cmds: BTreeMap<String, (u64, u64)>,
    /// used_cpu_user + used_cpu_sys, seconds.
    redis_cpu: f64,
    used_memory: i64,
    /// Ticks per watched process (same order as [`Env::pids`]).
    ticks: Vec<u64>,
    /// Busy ticks of the whole machine (/proc/stat).
    machine: u64,
}

/// Busy clock ticks of all CPUs since boot: user nice system irq softirq steal.
fn machine_busy() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is inside user).
    [0, 1, 2, 5, 6, 7].iter().filter_map(|i| f.get(*i)).sum()
}

impl Snap {
    fn calls(&self) -> u64 {
        self.cmds.values().map(|c| c.0).sum()
    }
    fn usec(&self) -> u64 {
        self.cmds.values().map(|c| c.1).sum()
    }
}

/// Per-command (calls, usec) deltas, largest first.
fn cmd_delta(a: &Snap, b: &Snap) -> Vec<(String, u64, u64)> {
    let mut out: Vec<(String, u64, u64)> = b
        .cmds
        .iter()
        .map(|(k, (calls, usec))| {
            let (c0, u0) = a.cmds.get(k).copied().unwrap_or_default();
            (k.clone(), calls.saturating_sub(c0), usec.saturating_sub(u0))
        })
        .filter(|(_, c, _)| *c > 0)
        .collect();
    out.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    out
}

// ---------------------------------------------------------------------------------------
// The stack and the shared environment
// ---------------------------------------------------------------------------------------

/// What the bench runs against. Field order is drop order: gateway and worker stop before
/// Redis.
struct Stack {
    gateway: Option<Gateway>,
    worker: Option<Worker>,
    _redis: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
    addr: SocketAddr,
    path: String,
    /// `MCPT_REDIS_URL` of the stack (cluster nodes with --redis-cluster).
    redis_url: String,
    /// The one Redis INFO is read from: the Redis, or the cluster's first master.
    info_url: String,
    /// The stack's `MCPT_QUEUE_SHARDS` (1 for one Redis).
    shards: u16,
}

impl Stack {
    async fn start(a: &Args) -> Result<Stack> {
        if let (Some(url), Some(redis_url)) = (&a.url, &a.redis) {
            let (addr, path) = parse_url(url)?;
            return Ok(Stack {
                gateway: None,
                worker: None,
                _redis: None,
                _cluster: None,
                addr,
                path,
                redis_url: redis_url.clone(),
                info_url: redis_url.clone(),
                shards: 1,
            });
        }
        let (redis, cluster, url, info_url, shards) = match a.redis_cluster {
            Some(n) => {
                let cluster = RedisCluster::start(n).context("starting the Redis Cluster")?;
                let (url, first) = (cluster.url(), cluster.node_urls()[0].clone());
                (None, Some(cluster), url, first, a.queue_shards)
            }
            None => {
                let redis = RedisServer::start().context("starting redis-server")?;
                let url = redis.url();
                (Some(redis), None, url.clone(), url, 1)
            }
        };
        let limits_off = [
            ("MCPT_LIMIT_TASKS_PER_MINUTE", "0".to_owned()),
            ("MCPT_LIMIT_ACTIVE_TASKS", "0".to_owned()),
            ("MCPT_LIMIT_LISTENERS", "0".to_owned()),
            ("MCPT_QUEUE_SHARDS", shards.to_string()),
        ];
        let mut wenv = vec![
            ("MCPT_TOOLS", "demo".to_owned()),
            ("MCPT_CONCURRENCY", a.worker_concurrency.to_string()),
        ];
        wenv.extend(limits_off.iter().cloned());
        let worker = Worker::start(&url, &wenv).context("starting mcp-tasks-worker")?;
        let gateway = Gateway::start(&url, &limits_off).context("starting mcp-tasks-gateway")?;
        Ok(Stack {
            addr: gateway.addr,
            path: "/mcp".into(),
            gateway: Some(gateway),
            worker: Some(worker),
            _redis: redis,
            _cluster: cluster,
            redis_url: url,
            info_url,
            shards,
        })
    }

    fn own(&self) -> bool {
        self.gateway.is_some()
    }
}

/// Everything the phases share.
struct Env {
    http: Http,
    store: Store,
    red: MultiplexedConnection,
    /// Watched processes: (name, pid). Always "bench"; gateway, worker, redis for an own stack.
    pids: Vec<(&'static str, u32)>,
    clk: f64,
    warm: Duration,
    dur: Duration,
    own: bool,
}

impl Env {
    async fn snap(&self) -> Result<Snap> {
        let mut con = self.red.clone();
        let stats = info(&mut con, "commandstats").await?;
        let cpu = info(&mut con, "cpu").await?;
        let mem = info(&mut con, "memory").await?;
        let ticks = self
            .pids
            .iter()
            .map(|(_, p)| proc_ticks(*p).unwrap_or(0))
            .collect();
        let mut cmds = BTreeMap::new();
        for line in stats.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            if name == "info" {
                continue;
            }
            let field = |k: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            cmds.insert(name.to_owned(), (field("calls"), field("usec")));
        }
        let num = |t: &str, k: &str| {
            info_field(t, k)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok(Snap {
            at: Instant::now(),
            cmds,
            redis_cpu: num(&cpu, "used_cpu_user") + num(&cpu, "used_cpu_sys"),
            used_memory: num(&mem, "used_memory") as i64,
            ticks,
            machine: machine_busy(),
        })
    }

    /// `MEMORY STATS` dataset.bytes (memory of the data without Redis' own overheads, e.g.
    /// the key tables that grow in power-of-two steps) and the number of keys of db 0.
    async fn dataset(&self) -> Result<(i64, i64)> {
        let mut con = self.red.clone();
        let v: redis::Value = redis::cmd("MEMORY")
            .arg("STATS")
            .query_async(&mut con)
            .await
            .context("MEMORY STATS")?;
        let pairs: Vec<(redis::Value, redis::Value)> = match v {
            redis::Value::Array(items) => {
                let mut it = items.into_iter();
                std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
            }
            redis::Value::Map(m) => m,
            other => bail!("MEMORY STATS answered {other:?}"),
        };
        let dataset = pairs
            .into_iter()
            .find_map(|(k, v)| {
                let k: String = redis::from_redis_value(k).ok()?;
                if k != "dataset.bytes" {
                    return None;
                }
                redis::from_redis_value::<i64>(v).ok()
            })
            .ok_or_else(|| anyhow!("MEMORY STATS has no dataset.bytes"))?;
        let keyspace = info(&mut con, "keyspace").await?;
        let keys = info_field(&keyspace, "db0")
            .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("keys=")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Ok((dataset, keys))
    }

    /// CPU use between two readings, % of one core: each watched process, and Redis by
    /// INFO cpu when its process is not watched.
    fn cpu_pct(&self, a: &Snap, b: &Snap) -> Vec<(&'static str, f64)> {
        let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        let mut out: Vec<(&'static str, f64)> = self
            .pids
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let d = b.ticks[i].saturating_sub(a.ticks[i]) as f64 / self.clk;
                (*name, d / secs * 100.0)
            })
            .collect();
        if !self.pids.iter().any(|(n, _)| *n == "redis") {
            out.push(("redis", (b.redis_cpu - a.redis_cpu) / secs * 100.0));
        }
        // Everything else the machine did meanwhile: other processes, interrupts.
        let ours: f64 = out.iter().map(|(_, v)| v).sum();
        let busy = b.machine.saturating_sub(a.machine) as f64 / self.clk / secs * 100.0;
        out.push(("rest", (busy - ours).max(0.0)));
        out
    }

    /// Wait until the job queue is empty (nothing queued, nothing pending).
    async fn drain(&self, label: &str) -> Result<()> {
        let t0 = Instant::now();
        let mut first = None;
        loop {
            let d = self
                .store
                .queue_depth(QUEUE)
                .await
                .context("reading the queue depth")?;
            first.get_or_insert(d.length);
            if d.length == 0 && d.pending == 0 {
                break;
            }
            if t0.elapsed() > Duration::from_secs(180) {
                bail!(
                    "{label}: the queue did not drain within 180 s (length {}, pending {})",
                    d.length,
                    d.pending
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The last jobs' finish scripts and unsubscriptions.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if t0.elapsed() > Duration::from_millis(500) {
            eprintln!(
                "[drain after {label}] {:.1} s for {} queued jobs",
                t0.elapsed().as_secs_f64(),
                first.unwrap_or(0)
            );
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Driving C clients
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    ms: f64,
    notify_ms: Option<f64>,
    terminal_age_ms: f64,
    gets: u32,
    snapshot: bool,
}

type OpFuture = Pin<Box<dyn Future<Output = Result<Sample>> + Send>>;
type Op = Arc<dyn Fn() -> OpFuture + Send + Sync>;

/// What one phase at one concurrency measured.
struct Window {
    secs: f64,
    samples: Vec<Sample>,
    cpu: Vec<(&'static str, f64)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    n: usize,
    per_s: f64,
    p50: f64,
    p99: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats(values: impl Iterator<Item = f64>, secs: f64) -> Stats {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    Stats {
        n: v.len(),
        per_s: v.len() as f64 / secs,
        p50: percentile(&v, 0.50),
        p99: percentile(&v, 0.99),
    }
}

impl Window {
    fn latency(&self) -> Stats {
        stats(self.samples.iter().map(|s| s.ms), self.secs)
    }
    fn notify(&self) -> Stats {
        stats(self.samples.iter().filter_map(|s| s.notify_ms), self.secs)
    }
    /// Receive time minus lastUpdatedAt over every terminal notification, the ones found in
    /// the listen's snapshot included.
    fn staleness(&self) -> Stats {
        stats(self.samples.iter().map(|s| s.terminal_age_ms), self.secs)
    }
}

/// Run `op` in a loop on `clients` tasks for the warm-up plus the measured window; keep
/// the samples completed inside the window. The first error stops every client.
async fn drive(env: &Env, clients: usize, op: Op) -> Result<Window> {
    let start = Instant::now();
    let from = start + env.warm;
    let end = from + env.dur;
    let stop = Arc::new(AtomicBool::new(false));
    let mut set = JoinSet::new();
    for _ in 0..clients {
        let (op, stop) = (op.clone(), stop.clone());
        set.spawn(async move {
            let mut out = Vec::new();
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                match op().await {
                    Ok(s) => {
                        let t = Instant::now();
                        if t >= from && t <= end {
                            out.push(s);
                        }
                    }
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            Ok(out)
        });
    }
    let readings = async {
        tokio::time::sleep_until(from.into()).await;
        let a = env.snap().await?;
        tokio::time::sleep_until(end.into()).await;
        let b = env.snap().await?;
        Ok::<_, anyhow::Error>((a, b))
    }
    .await;
    let mut samples = Vec::new();
    let mut first_err = None;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(s)) => samples.extend(s),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(anyhow!("a client task died: {e}"));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let (a, b) = readings?;
    Ok(Window {
        secs: env.dur.as_secs_f64(),
        samples,
        cpu: env.cpu_pct(&a, &b),
    })
}

fn op_create(http: &Http) -> Op {
    let http = http.clone();
    Arc::new(move || {
        let http = http.clone();
        Box::pin(async move {
            let t0 = Instant::now();
            http.create().await?;
            Ok(Sample {
                ms: ms(t0.elapsed()),
                ..Sample::default()
            })
        })
    })
}

fn op_get(http: &Http, id: &str) -> Op {
    let (http, id): (Http, Arc<str>) = (http.clone(), id.into());
    Arc::new(move || {
        let (http, id) = (http.clone(), id.clone());
        Box::pin(async move {
            let t0 = Instant::now();
            let status = http.get(&id).await?;
            if status != "completed" {
                bail!("tasks/get {id}: status {status}, expected completed");
            }
            Ok(Sample {
                ms: ms(t0.elapsed()),
                gets: 1,
                ..Sample::default()
            })
        })
    })
}

fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

fn op_poll(http: &Http) -> Op {
    let http = http.clone();
    Arc::new(move || {
        let http = http.clone();
        Box::pin(async move {
            let t0 = Instant::now();
            let id = http.create().await?;
            let mut gets = 0;
            loop {
                let status = http.get(&id).await?;
                gets += 1;
                if status == "completed" {
                    break;
                }
                if terminal(&status) {
                    bail!("task {id} ended {status}");
                }
                if t0.elapsed() > REQUEST_TIMEOUT {
                    bail!("task {id} not completed within {REQUEST_TIMEOUT:?} (status {status})");
                }
            }
            Ok(Sample {
                ms: ms(t0.elapsed()),
                gets,
                ..Sample::default()
            })
        })
    })
}

/// create `sleep {"ms":sleep_ms}`, listen, read until terminal: 0 for e2e, more for push
/// latency (the terminal state then arrives as a change on the open stream).
fn op_listen(http: &Http, sleep_ms: u64) -> Op {
    let http = http.clone();
    let body = call_body(&http.meta, sleep_ms);
    Arc::new(move || {
        let (http, body) = (http.clone(), body.clone());
        Box::pin(async move {
            let t0 = Instant::now();
            let id = http.create_with(body).await?;
            let mut sse = http.listen(Some(&id)).await?;
            if !sse.ack().await?.contains(&id) {
                bail!("listen did not acknowledge task {id}");
            }
            let mut first = true;
            loop {
                let (v, at) = sse.next().await?;
                if v["method"] != "notifications/tasks" {
                    continue;
                }
                let p = &v["params"];
                let status = p["status"].as_str().unwrap_or_default();
                if terminal(status) {
                    if status != "completed" {
                        bail!("task {id} ended {status}");
                    }
                    let updated = p["lastUpdatedAt"]
                        .as_str()
                        .and_then(parse_rfc3339_ms)
                        .ok_or_else(|| anyhow!("notification without lastUpdatedAt: {v}"))?;
                    let notify = (now_micros(at) - updated * 1000) as f64 / 1000.0;
                    return Ok(Sample {
                        ms: ms(t0.elapsed()),
                        notify_ms: (!first).then_some(notify),
                        terminal_age_ms: notify,
                        snapshot: first,
                        gets: 0,
                    });
                }
                first = false;
            }
        })
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn cpu_text(cpu: &[(&str, f64)]) -> String {
    cpu.iter()
        .map(|(n, p)| format!("{n} {p:.0}%"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn progress(label: &str, w: &Window, what: &str) {
    let l = w.latency();
    eprintln!(
        "[{label}] {:.1} s  {} {what}  {:.0}/s  p50 {:.2} ms  p99 {:.2} ms  cpu: {}",
        w.secs,
        l.n,
        l.per_s,
        l.p50,
        l.p99,
        cpu_text(&w.cpu)
    );
}

/// The figures of one concurrency.
struct Row {
    clients: usize,
    create: Stats,
    get: Stats,
    poll: Stats,
    poll_gets: f64,
    listen: Stats,
    notify: Stats,
    push_ms: u64,
    terminal_age: Stats,
    snapshots: usize,
    cpu: Vec<(&'static str, Vec<(&'static str, f64)>)>,
}

async fn per_clients(env: &Env, c: usize, done_id: &str) -> Result<Row> {
    let create = drive(env, c, op_create(&env.http))
        .await
        .with_context(|| format!("phase create c={c}"))?;
    progress(&format!("create c={c}"), &create, "calls");
    env.drain(&format!("create c={c}")).await?;

    let get = drive(env, c, op_get(&env.http, done_id))
        .await
        .with_context(|| format!("phase get c={c}"))?;
    progress(&format!("get c={c}"), &get, "gets");

    let poll = drive(env, c, op_poll(&env.http))
        .await
        .with_context(|| format!("phase e2e poll c={c}"))?;
    let gets: u64 = poll.samples.iter().map(|s| u64::from(s.gets)).sum();
    let poll_gets = gets as f64 / poll.samples.len().max(1) as f64;
    progress(&format!("e2e poll c={c}"), &poll, "tasks");
    eprintln!("[e2e poll c={c}] {poll_gets:.1} tasks/get per task");
    env.drain(&format!("e2e poll c={c}")).await?;

    let listen = drive(env, c, op_listen(&env.http, 0))
        .await
        .with_context(|| format!("phase e2e listen c={c}"))?;
    progress(&format!("e2e listen c={c}"), &listen, "tasks");
    let snapshots = listen.samples.iter().filter(|s| s.snapshot).count();
    let age = listen.staleness();
    eprintln!(
        "[e2e listen c={c}] {snapshots} of {} terminal states already in the listen's snapshot; receive - lastUpdatedAt: p50 {:.2} ms  p99 {:.2} ms",
        listen.samples.len(),
        age.p50,
        age.p99
    );
    env.drain(&format!("e2e listen c={c}")).await?;

    let push_ms = (((2.0 * listen.latency().p99).ceil() as u64).max(PUSH_MS)).div_ceil(10) * 10;
    let push = drive(env, c, op_listen(&env.http, push_ms))
        .await
        .with_context(|| format!("phase push c={c}"))?;
    let notify = push.notify();
    eprintln!(
        "[push c={c}] {:.1} s  {} pushed terminal notifications (sleep ms={push_ms})  notify p50 {:.2} ms  p99 {:.2} ms  cpu: {}",
        push.secs,
        notify.n,
        notify.p50,
        notify.p99,
        cpu_text(&push.cpu)
    );
    env.drain(&format!("push c={c}")).await?;

    Ok(Row {
        clients: c,
        create: create.latency(),
        get: get.latency(),
        poll: poll.latency(),
        poll_gets,
        listen: listen.latency(),
        notify,
        push_ms,
        terminal_age: age,
        snapshots,
        cpu: vec![
            ("create", create.cpu),
            ("get", get.cpu),
            ("e2e poll", poll.cpu),
            ("e2e listen", listen.cpu),
            ("push", push.cpu),
        ],
    })
}

// ---------------------------------------------------------------------------------------
// Per-task costs
// ---------------------------------------------------------------------------------------

/// Prints every second how many of `total` are done, until dropped.
struct Ticker(tokio::task::JoinHandle<()>);

impl Ticker {
    fn start(label: String, done: Arc<AtomicUsize>, total: usize) -> Ticker {
        let t0 = Instant::now();
        Ticker(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                eprintln!(
                    "[{label}] {:.1} s  {}/{total}",
                    t0.elapsed().as_secs_f64(),
                    done.load(Ordering::Relaxed)
                );
            }
        }))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `n` lifecycles (create, wait, one tasks/get; more only while not completed) on
/// [`COST_CLIENTS`] clients; returns the number of gets.
async fn lifecycles(http: &Http, n: usize) -> Result<u64> {
    let left = Arc::new(AtomicUsize::new(n));
    let done = Arc::new(AtomicUsize::new(0));
    let gets = Arc::new(AtomicU64::new(0));
    let _ticker = Ticker::start("per-task lifecycles".into(), done.clone(), n);
    let mut set = JoinSet::new();
    for _ in 0..COST_CLIENTS.min(n) {
        let (http, left, done, gets) = (http.clone(), left.clone(), done.clone(), gets.clone());
        set.spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                .is_ok()
            {
                let t0 = Instant::now();
                let id = http.create().await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                loop {
                    let status = http.get(&id).await?;
                    gets.fetch_add(1, Ordering::Relaxed);
                    if status == "completed" {
                        break;
                    }
                    if terminal(&status) || t0.elapsed() > REQUEST_TIMEOUT {
                        bail!("task {id}: status {status}");
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| anyhow!("a client task died: {e}"))??;
    }
    Ok(gets.load(Ordering::Relaxed))
}

/// `m` tasks/get of `id` on [`COST_CLIENTS`] clients.
async fn gets_only(http: &Http, id: &str, m: usize) -> Result<()> {
    let left = Arc::new(AtomicUsize::new(m));
    let mut set = JoinSet::new();
    for _ in 0..COST_CLIENTS.min(m) {
        let (http, left, id) = (http.clone(), left.clone(), id.to_owned());
        set.spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                .is_ok()
            {
                http.get(&id).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| anyhow!("a client task died: {e}"))??;
    }
    Ok(())
}

struct Costs {
    json: Value,
    text: Vec<String>,
}

async fn per_task_costs(env: &Env, n: usize, done_id: &str) -> Result<Costs> {
    env.drain("the per-concurrency phases").await?;
    let idle_secs = 2.0;
    let i0 = env.snap().await?;
    tokio::time::sleep(Duration::from_secs_f64(idle_secs)).await;
    let i1 = env.snap().await?;
    let idle_secs = i1.at.duration_since(i0.at).as_secs_f64();
    let idle_rate = (i1.calls() - i0.calls()) as f64 / idle_secs;
    eprintln!("[idle] {idle_secs:.1} s  {idle_rate:.1} Redis commands/s in the background");

    let (ds0, keys0) = env.dataset().await?;
    let a = env.snap().await?;
    let gets = lifecycles(&env.http, n)
        .await
        .context("per-task lifecycles")?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = env.snap().await?;
    let (ds1, keys1) = env.dataset().await?;
    let dataset = (ds1 - ds0) as f64 / n as f64;
    let keys_per_task = (keys1 - keys0) as f64 / n as f64;
    let secs = b.at.duration_since(a.at).as_secs_f64();
    eprintln!("[per-task lifecycles] {secs:.1} s  {n} tasks, {gets} tasks/get");

    let m = n;
    let c = env.snap().await?;
    gets_only(&env.http, done_id, m)
        .await
        .context("tasks/get run")?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let d = env.snap().await?;
    eprintln!(
        "[per-get] {:.1} s  {m} tasks/get",
        d.at.duration_since(c.at).as_secs_f64()
    );

    let nf = n as f64;
    let cmds = (b.calls() - a.calls()) as f64 / nf;
    let usec = (b.usec() - a.usec()) as f64 / nf;
    let get_cmds = (d.calls() - c.calls()) as f64 / m as f64;
    let get_usec = (d.usec() - c.usec()) as f64 / m as f64;
    let extra_gets = gets.saturating_sub(n as u64);
    let redis_cpu_us = (b.redis_cpu - a.redis_cpu) * 1e6 / nf;
    let get_redis_cpu_us = (d.redis_cpu - c.redis_cpu) * 1e6 / m as f64;
    let mem = (b.used_memory - a.used_memory) as f64 / nf;
    let breakdown = cmd_delta(&a, &b);
    let get_breakdown = cmd_delta(&c, &d);
    let per_proc: Vec<(&str, f64)> = env
        .pids
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let t = b.ticks[i].saturating_sub(a.ticks[i]) as f64;
            (*name, t / env.clk * 1e6 / nf)
        })
        .collect();
    let server: f64 = per_proc
        .iter()
        .filter(|(n, _)| *n != "bench")
        .map(|(_, v)| v)
        .sum();
    let bench_us = per_proc
        .iter()
        .find(|(n, _)| *n == "bench")
        .map_or(0.0, |p| p.1);
    let get_per_proc: Vec<(&str, f64)> = env
        .pids
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let t = d.ticks[i].saturating_sub(c.ticks[i]) as f64;
            (*name, t / env.clk * 1e6 / m as f64)
        })
        .collect();

    let mut text = vec![format!(
        "per-task costs: {n} lifecycles (tools/call sleep ms=0, run by the worker, 20 ms wait, one tasks/get), {COST_CLIENTS} clients, {secs:.1} s; {gets} tasks/get ({extra_gets} beyond one per task)"
    )];
    text.push(format!(
        "  Redis commands per task   {cmds:.2}   (INFO commandstats delta / N; commands inside Lua scripts included; INFO left out); {:.2} without the lifecycle's one tasks/get",
        cmds - get_cmds * (gets as f64 / nf)
    ));
    let line = |items: &[(String, u64, u64)], div: f64| {
        items
            .iter()
            .map(|(k, c, _)| format!("{k} {:.2}", *c as f64 / div))
            .collect::<Vec<_>>()
            .join("  ")
    };
    text.push(format!("    {}", line(&breakdown, nf)));
    text.push(format!(
        "  Redis command time / task {usec:.1} µs   (commandstats usec)"
    ));
    text.push(format!(
        "  commands per tasks/get    {get_cmds:.2}   ({m} gets alone: {}; {get_usec:.1} µs command time, Redis CPU {get_redis_cpu_us:.1} µs per get)",
        line(&get_breakdown, m as f64)
    ));
    text.push(format!(
        "  idle background           {idle_rate:.1} commands/s (heartbeats, blocked reads, sweeps; {:.3} per task over this run, included above)",
        idle_rate * secs / nf
    ));
    text.push(format!(
        "  Redis CPU per task        {redis_cpu_us:.1} µs   (INFO cpu used_cpu_user+used_cpu_sys)"
    ));
    if env.own {
        let parts = per_proc
            .iter()
            .filter(|(n, _)| *n != "bench")
            .map(|(n, v)| format!("{n} {v:.0}"))
            .collect::<Vec<_>>()
            .join(" + ");
        text.push(format!(
            "  server CPU per task       {server:.0} µs = {parts}   (/proc/PID/stat utime+stime, {} ticks/s)",
            env.clk
        ));
        let gparts = get_per_proc
            .iter()
            .filter(|(n, _)| *n != "bench")
            .map(|(n, v)| format!("{n} {v:.0}"))
            .collect::<Vec<_>>()
            .join(" + ");
        text.push(format!(
            "  server CPU per tasks/get  {:.0} µs = {gparts}",
            get_per_proc
                .iter()
                .filter(|(n, _)| *n != "bench")
                .map(|(_, v)| v)
                .sum::<f64>()
        ));
    } else {
        text.push(
            "  server CPU per task       not measured: an existing stack (--url); Redis only, above"
                .into(),
        );
    }
    text.push(format!(
        "  bench client CPU per task {bench_us:.0} µs   (this process, not part of the server)"
    ));
    text.push(format!(
        "  Redis memory per task     {mem:.0} bytes   (used_memory delta / N; the tasks keep their 1 h TTL)"
    ));
    text.push(format!(
        "                            {dataset:.0} bytes of data (MEMORY STATS dataset.bytes delta / N: without Redis' key tables, which grow in power-of-two steps and make used_memory jump); {keys_per_task:.2} keys per task"
    ));
    let to_json = |items: &[(String, u64, u64)], div: f64| {
        Value::Object(
            items
                .iter()
                .map(|(k, c, u)| {
                    (
                        k.clone(),
                        json!({"calls": *c as f64 / div, "usec": *u as f64 / div}),
                    )
                })
                .collect(),
        )
    };
    let json = json!({
        "tasks": n,
        "clients": COST_CLIENTS,
        "seconds": secs,
        "gets": gets,
        "extra_gets": extra_gets,
        "redis_commands_per_task": cmds,
        "redis_commands_per_task_without_get": cmds - get_cmds * (gets as f64 / nf),
        "redis_command_usec_per_task": usec,
        "redis_commands_per_task_by_command": to_json(&breakdown, nf),
        "redis_commands_per_get": get_cmds,
        "redis_command_usec_per_get": get_usec,
        "redis_commands_per_get_by_command": to_json(&get_breakdown, m as f64),
        "redis_cpu_us_per_get": get_redis_cpu_us,
        "gets_alone": m,
        "idle_background_commands_per_s": idle_rate,
        "redis_cpu_us_per_task": redis_cpu_us,
        "server_cpu_us_per_task": if env.own { json!(server) } else { Value::Null },
        "cpu_us_per_task_by_process": per_proc.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "cpu_us_per_get_by_process": get_per_proc.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "redis_memory_bytes_per_task": mem,
        "redis_dataset_bytes_per_task": dataset,
        "redis_keys_per_task": keys_per_task,
        "clk_tck": env.clk,
    });
    Ok(Costs { json, text })
}

// ---------------------------------------------------------------------------------------
// Idle listeners
// ---------------------------------------------------------------------------------------

async fn idle_listeners(env: &Env, l: usize, gw_pid: u32) -> Result<(Value, Vec<String>)> {
    let need = l as u64 + 256;
    let mine = fd_limit("self").unwrap_or(0);
    let theirs = fd_limit(&gw_pid.to_string()).unwrap_or(0);
    if mine < need || theirs < need {
        let msg = format!(
            "idle listeners: skipped, {l} streams need {need} open files; the soft limit is {mine} here and {theirs} for the gateway (raise ulimit -n)"
        );
        eprintln!("[listeners] {msg}");
        return Ok((json!({"skipped": msg}), vec![msg]));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = vm_rss(gw_pid).ok_or_else(|| anyhow!("cannot read the gateway's VmRSS"))?;
    let redis_before = env.snap().await?.used_memory;
    let t0 = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let ticker = Ticker::start("listeners".into(), done.clone(), l);
    let gate = Arc::new(tokio::sync::Semaphore::new(LISTEN_PARALLEL));
    let mut set = JoinSet::new();
    for _ in 0..l {
        let (http, gate, done) = (env.http.clone(), gate.clone(), done.clone());
        set.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let mut sse = http.listen(None).await?;
            sse.ack().await?;
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<_, anyhow::Error>(sse)
        });
    }
    let mut held = Vec::with_capacity(l);
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(s)) => held.push(s),
            Ok(Err(e)) => {
                set.abort_all();
                return Err(e.context(format!(
                    "opening idle listeners ({} acknowledged)",
                    held.len()
                )));
            }
            Err(e) => bail!("a listener task died: {e}"),
        }
    }
    drop(ticker);
    let open_secs = t0.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = vm_rss(gw_pid).ok_or_else(|| anyhow!("cannot read the gateway's VmRSS"))?;
    let redis_after = env.snap().await?.used_memory;
    let per = (after as f64 - before as f64) / l as f64;
    eprintln!(
        "[listeners] {l} acknowledged in {open_secs:.1} s; gateway VmRSS {:.1} -> {:.1} MiB",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    drop(held);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let closed = vm_rss(gw_pid).unwrap_or(0);
    let text = vec![format!(
        "idle listeners: {l} subscriptions/listen streams held (each acknowledged), opened {LISTEN_PARALLEL} at a time in {open_secs:.1} s: gateway VmRSS {:.1} -> {:.1} MiB = {per:.0} bytes per listener (after closing them: {:.1} MiB); Redis used_memory {:+.0} bytes per listener",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        closed as f64 / 1048576.0,
        (redis_after - redis_before) as f64 / l as f64
    )];
    Ok((
        json!({
            "listeners": l,
            "open_seconds": open_secs,
            "gateway_rss_before_bytes": before,
            "gateway_rss_after_bytes": after,
            "gateway_rss_after_close_bytes": closed,
            "gateway_rss_bytes_per_listener": per,
            "redis_used_memory_bytes_per_listener": (redis_after - redis_before) as f64 / l as f64,
        }),
        text,
    ))
}

// ---------------------------------------------------------------------------------------
// The Redis-bound limit
// ---------------------------------------------------------------------------------------

struct Limit {
    per_s: f64,
    json: Value,
    text: Vec<String>,
}

async fn redis_limit(
    env: &Env,
    url: &str,
    loops: usize,
    conns: usize,
    with_start: bool,
) -> Result<Limit> {
    let mut stores = Vec::new();
    for _ in 0..conns.max(1) {
        stores.push(Store::connect(url).await.context("connecting the store")?);
    }
    let store = stores[0].clone();
    let queue = format!("bench-limit-{}", std::process::id());
    let queues = Arc::new(vec![queue.clone()]);
    store.ensure_groups(&queues).await?;
    let job = Arc::new(Job {
        tool: "sleep".into(),
        args: json!({"ms": 0}),
        caps: caps_tasks(),
        pre: serde_json::Map::new(),
        traceparent: None,
        owner: "anonymous".into(),
    });
    let result: Arc<str> = json!({
        "content": [{"type": "text", "text": "slept 0 ms"}],
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks", "version": "0.1.0"}}
    })
    .to_string()
    .into();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut set = JoinSet::new();
    for k in 0..loops {
        let (store, job, result, done, stop, queues) = (
            stores[k % stores.len()].clone(),
            job.clone(),
            result.clone(),
            done.clone(),
            stop.clone(),
            queues.clone(),
        );
        set.spawn(async move {
            let mut reader = store.job_reader().await?;
            let consumer = format!("bench-{}-{k}", std::process::id());
            while !stop.load(Ordering::Relaxed) {
                let id = new_task_id();
                let created = store
                    .create_task(&NewTask {
                        id: &id,
                        ttl_ms: Some(120_000),
                        poll_ms: 500,
                        owner: "anonymous",
                        limits: OwnerLimits::default(),
                        queue: &queues[0],
                        job: &job,
                    })
                    .await?;
                if let Created::Limited(l) = created {
                    bail!("create_task refused: {l:?}");
                }
                let got = reader
                    .read(&queues, &consumer, 1, Some(Duration::from_millis(200)))
                    .await?;
                for d in got {
                    // The worker takes no fence for a run that ends within its first 20 ms
                    // (finish with fence 0); --limit-start yes takes one first anyway.
                    let fence = if with_start {
                        match store.start(&d, &consumer, 5).await? {
                            Start::Run { fence, .. } => fence,
                            Start::Skip(why) => bail!("start skipped {}: {why}", d.task_id),
                        }
                    } else {
                        0
                    };
                    let w = store
                        .finish(&d, fence, &Finish::Completed(result.to_string()))
                        .await?;
                    if w != Write::Ok {
                        bail!("finish: {w:?}");
                    }
                    if store.get_task(&d.task_id, &d.owner).await?.is_none() {
                        bail!("get_task {}: gone", d.task_id);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    let window = async {
        tokio::time::sleep(env.warm).await;
        let a = env.snap().await?;
        let da = done.load(Ordering::Relaxed);
        tokio::time::sleep(env.dur).await;
        let b = env.snap().await?;
        let db = done.load(Ordering::Relaxed);
        Ok::<_, anyhow::Error>((a, b, db - da))
    };
    let measured = tokio::select! {
        w = window => w,
        Some(r) = set.join_next() => Err(match r {
            Ok(Err(e)) => e,
            Ok(Ok(())) => anyhow!("a limit loop stopped early"),
            Err(e) => anyhow!("a limit loop died: {e}"),
        }),
    };
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = set.join_next().await {
        if let Ok(Err(e)) = r
            && measured.is_ok()
        {
            return Err(e.context("limit loop"));
        }
    }
    let mut con = env.red.clone();
    let _: redis::RedisResult<i64> = redis::cmd("DEL")
        .arg(keys::queue_key(&queue))
        .query_async(&mut con)
        .await;
    let (a, b, n) = measured?;
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let per_s = n as f64 / secs;
    let cpu = env.cpu_pct(&a, &b);
    let redis_pct = cpu.iter().find(|(k, _)| *k == "redis").map_or(0.0, |c| c.1);
    let cmds = (b.calls() - a.calls()) as f64 / n.max(1) as f64;
    let breakdown = cmd_delta(&a, &b);
    let by_cmd = breakdown
        .iter()
        .map(|(k, c, _)| format!("{k} {:.2}", *c as f64 / n.max(1) as f64))
        .collect::<Vec<_>>()
        .join("  ");
    eprintln!(
        "[limit] {secs:.1} s  {n} lifecycles  {per_s:.0}/s  cpu: {}",
        cpu_text(&cpu)
    );
    let mut text = vec![format!(
        "Redis-bound limit: {per_s:.0} lifecycles/s  ({loops} loops on {conns} Store connections in this process, no HTTP: create_task, XREADGROUP, {}, get_task; {secs:.1} s; cpu: {})",
        if with_start {
            "start, finish"
        } else {
            "finish with fence 0 as the worker does for a run under 20 ms (--limit-start yes adds start)"
        },
        cpu_text(&cpu)
    )];
    text.push(format!(
        "  Redis commands per lifecycle {cmds:.2}: {by_cmd}"
    ));
    if redis_pct < 85.0 {
        text.push(format!(
            "  note: Redis used {redis_pct:.0}% of one core: this run was bounded by this process's share of the same cores (and by the rest of the machine), not by Redis alone"
        ));
    }
    Ok(Limit {
        per_s,
        json: json!({
            "loops": loops,
            "store_connections": conns,
            "with_start": with_start,
            "seconds": secs,
            "lifecycles": n,
            "lifecycles_per_s": per_s,
            "redis_commands_per_lifecycle": cmds,
            "redis_commands_by_command": breakdown.iter().map(|(k, c, _)| (k.clone(), json!(*c as f64 / n.max(1) as f64))).collect::<serde_json::Map<_, _>>(),
            "cpu_percent": cpu.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
        }),
        text,
    })
}

/// `redis-benchmark -P 16` SET/GET against our own Redis: raw ops/s.
async fn redis_benchmark(url: &str, n: u64) -> Result<Vec<(String, f64)>> {
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
        .ok_or_else(|| anyhow!("no port in {url}"))?;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q"])
            .args([
                "-n",
                &n.to_string(),
                "-c",
                "50",
                "-P",
                "16",
                "-t",
                "set,get",
            ])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow!("redis-benchmark did not finish within 120 s"))?
    .context("cannot run redis-benchmark (apt-get install redis-tools)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let found: Vec<(String, f64)> = text
        .split(['\r', '\n'])
        .filter_map(|l| {
            let (name, rest) = l.split_once(": ")?;
            let rps = rest.split_once(" requests per second")?.0.trim();
            Some((name.trim().to_owned(), rps.parse().ok()?))
        })
        .collect();
    if found.is_empty() {
        bail!("redis-benchmark printed no result: {}", text.trim());
    }
    Ok(found)
}

// ---------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------

fn f0(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.0}")
    } else {
        "-".into()
    }
}

fn f2(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "-".into()
    }
}

fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{:>7}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>10}  {:>12}  {:>10}  {:>6}\n",
        "clients",
        "create/s",
        "p50 ms",
        "p99 ms",
        "get/s",
        "p50",
        "p99",
        "e2e poll/s",
        "e2e listen/s",
        "notify p50",
        "p99"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:>7}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>10}  {:>12}  {:>10}  {:>6}\n",
            r.clients,
            f0(r.create.per_s),
            f2(r.create.p50),
            f2(r.create.p99),
            f0(r.get.per_s),
            f2(r.get.p50),
            f2(r.get.p99),
            f0(r.poll.per_s),
            f0(r.listen.per_s),
            f2(r.notify.p50),
            f2(r.notify.p99),
        ));
    }
    s.push_str(&format!("latencies in ms; notify = receive time - lastUpdatedAt of terminal notifications pushed on open streams (push phase: sleep ms = 2 x e2e listen p99, at least {PUSH_MS}, so the stream is open before the task ends); lastUpdatedAt has whole ms: 1 ms resolution, up to 1 ms high\n\n"));
    s.push_str(&format!(
        "{:>7}  {:>12}  {:>6}  {:>9}  {:>14}  {:>6}  {:>14}  {:>8}  {:>7}\n",
        "clients",
        "poll p50 ms",
        "p99",
        "gets/task",
        "listen p50 ms",
        "p99",
        "in snapshot",
        "push ms",
        "pushed"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:>7}  {:>12}  {:>6}  {:>9}  {:>14}  {:>6}  {:>14}  {:>8}  {:>7}\n",
            r.clients,
            f2(r.poll.p50),
            f2(r.poll.p99),
            format!("{:.1}", r.poll_gets),
            f2(r.listen.p50),
            f2(r.listen.p99),
            format!("{}/{}", r.snapshots, r.listen.n),
            r.push_ms,
            r.notify.n,
        ));
    }
    s.push_str("e2e latency = tools/call sent -> completed observed (poll: tasks/get back to back; listen: terminal notifications/tasks); in snapshot = e2e listen tasks whose terminal state was already in the listen's initial snapshot / all; push ms = the push phase's sleep, pushed = terminal notifications it measured\n\n");
    let names: Vec<&str> = rows
        .first()
        .and_then(|r| r.cpu.first())
        .map(|(_, c)| c.iter().map(|(n, _)| *n).collect())
        .unwrap_or_default();
    s.push_str(&format!("CPU, % of one core ({} cores):\n", nproc()));
    s.push_str(&format!("{:>7}  {:<10}", "clients", "phase"));
    for n in &names {
        s.push_str(&format!("  {n:>7}"));
    }
    s.push('\n');
    for r in rows {
        for (phase, cpu) in &r.cpu {
            s.push_str(&format!("{:>7}  {phase:<10}", r.clients));
            for (_, v) in cpu {
                s.push_str(&format!("  {:>7}", f0(*v)));
            }
            s.push('\n');
        }
    }
    s
}

fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn stats_json(s: &Stats) -> Value {
    let num = |v: f64| if v.is_finite() { json!(v) } else { Value::Null };
    json!({"n": s.n, "per_s": num(s.per_s), "p50_ms": num(s.p50), "p99_ms": num(s.p99)})
}

fn row_json(r: &Row) -> Value {
    json!({
        "clients": r.clients,
        "create": stats_json(&r.create),
        "get": stats_json(&r.get),
        "e2e_poll": {"latency": stats_json(&r.poll), "gets_per_task": r.poll_gets},
        "push": {"sleep_ms": r.push_ms, "notify": stats_json(&r.notify)},
        "e2e_listen": {
            "latency": stats_json(&r.listen),
            "terminal_notification_age": stats_json(&r.terminal_age),
            "terminal_in_snapshot": r.snapshots,
        },
        "cpu_percent": r.cpu.iter().map(|(phase, c)| {
            ((*phase).to_owned(), Value::Object(c.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect()))
        }).collect::<serde_json::Map<_, _>>(),
    })
}

fn git_commit() -> Option<String> {
    let root = mcp_tasks_tests::repo_root();
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    let dirty = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    Some(if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    })
}

/// The PNG: throughput and p99 latency against clients. `Err` says why not (or what was
/// left out); it never fails the run.
fn draw_png(path: &Path, rows: &[Row]) -> Result<Option<String>, String> {
    use plotters::prelude::*;
    let font_path = std::env::var("BENCH_FONT").unwrap_or_else(|_| FONT.to_owned());
    let mut note = None;
    let font = match std::fs::read(&font_path) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            match plotters::style::register_font("sans-serif", FontStyle::Normal, bytes) {
                Ok(()) => true,
                Err(_) => {
                    note = Some(format!("{font_path} is not a usable font"));
                    false
                }
            }
        }
        Err(e) => {
            note = Some(format!("no font at {font_path} ({e})"));
            false
        }
    };
    if let Some(n) = &mut note {
        n.push_str(
            "; drawn without text: left throughput, right p99; red create, blue e2e poll, green e2e listen",
        );
    }
    let xs: Vec<f64> = rows.iter().map(|r| r.clients as f64).collect();
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min) * 0.8;
    let xmax = xs.iter().copied().fold(0.0, f64::max) * 1.25;
    let colors = [RED, BLUE, GREEN];
    let throughput: Vec<(&str, Vec<f64>)> = vec![
        ("create/s", rows.iter().map(|r| r.create.per_s).collect()),
        (
            "e2e poll tasks/s",
            rows.iter().map(|r| r.poll.per_s).collect(),
        ),
        (
            "e2e listen tasks/s",
            rows.iter().map(|r| r.listen.per_s).collect(),
        ),
    ];
    let p99: Vec<(&str, Vec<f64>)> = vec![
        ("create p99 ms", rows.iter().map(|r| r.create.p99).collect()),
        ("e2e poll p99 ms", rows.iter().map(|r| r.poll.p99).collect()),
        (
            "e2e listen p99 ms",
            rows.iter().map(|r| r.listen.p99).collect(),
        ),
    ];
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| format!("{e:?}"))?;
    let (left, right) = root.split_horizontally(700);
    for (area, title, ylabel, series) in [
        (&left, "Throughput", "per second", &throughput),
        (&right, "p99 latency", "ms", &p99),
    ] {
        let ymax = series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.15;
        let mut builder = ChartBuilder::on(area);
        builder.margin(20);
        if font {
            builder
                .caption(title, ("sans-serif", 24))
                .x_label_area_size(45)
                .y_label_area_size(70);
        }
        let mut chart = builder
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)
            .map_err(|e| format!("{e:?}"))?;
        if font {
            chart
                .configure_mesh()
                .x_desc("clients")
                .y_desc(ylabel)
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .label_style(("sans-serif", 15))
                .draw()
                .map_err(|e| format!("{e:?}"))?;
        }
        for ((name, values), color) in series.iter().zip(colors) {
            let pts: Vec<(f64, f64)> = xs
                .iter()
                .copied()
                .zip(values.iter().copied())
                .filter(|(_, y)| y.is_finite())
                .collect();
            let s = chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| format!("{e:?}"))?;
            if font {
                s.label(*name).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            }
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(|e| format!("{e:?}"))?;
        }
        if font {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| format!("{e:?}"))?;
        }
    }
    root.present().map_err(|e| format!("{e:?}"))?;
    Ok(note)
}

// ---------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------

async fn wait_for_sleep_tool(http: &Http) -> Result<()> {
    let meta = &http.meta;
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{meta}}}}}"#);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = http.rpc("tools/list", None, body.clone().into()).await
            && r["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["name"] == "sleep"))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the sleep tool never appeared in tools/list (is a worker with MCPT_TOOLS=demo running?)"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run(args: Args) -> Result<()> {
    let wall = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut stack = Stack::start(&args).await?;
    let http = Http::new(stack.addr, &stack.path)?;
    let client = redis::Client::open(stack.info_url.as_str())?;
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(10)))
        .set_connection_timeout(Some(Duration::from_secs(5)));
    let mut red = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connecting to {}", stack.info_url))?;
    let server_info = info(&mut red, "server").await?;
    let redis_pid: Option<u32> =
        info_field(&server_info, "process_id").and_then(|p| p.parse().ok());
    let redis_version = info_field(&server_info, "redis_version")
        .unwrap_or("?")
        .to_owned();
    let store = Store::connect_sharded(&stack.redis_url, stack.shards)
        .await
        .context("connecting the store")?;
    let mut pids: Vec<(&'static str, u32)> = Vec::new();
    let mut gw_pid = None;
    if stack.own() {
        if let Some(g) = stack.gateway.as_mut() {
            let p = g.process.child().id();
            gw_pid = Some(p);
            pids.push(("gateway", p));
        }
        if let Some(w) = stack.worker.as_mut() {
            pids.push(("worker", w.process.child().id()));
        }
        if let Some(p) = redis_pid {
            pids.push(("redis", p));
        }
    }
    pids.push(("bench", std::process::id()));
    let warm = (args.duration / 5).min(Duration::from_secs(1));
    let env = Env {
        http,
        store,
        red,
        pids,
        clk: clk_tck(),
        warm,
        dur: args.duration,
        own: stack.own(),
    };
    eprintln!(
        "[stack] {} gateway http://{}{}, Redis {} (v{redis_version}); pids {}",
        if env.own { "own" } else { "existing" },
        stack.addr,
        stack.path,
        stack.redis_url,
        env.pids
            .iter()
            .map(|(n, p)| format!("{n}={p}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    wait_for_sleep_tool(&env.http).await?;
    let mut notes: Vec<String> = Vec::new();
    if !env.own {
        notes.push("server CPU: only Redis (INFO cpu), since --url drives a stack whose gateway and worker processes are not ours".into());
    }
    let cluster = args.redis_cluster;
    if let Some(n) = cluster {
        notes.push(format!(
            "Redis Cluster of {n} master(s), MCPT_QUEUE_SHARDS={}: Redis commands, CPU and memory are those of the first master only",
            stack.shards
        ));
    }

    // A completed task for the get phases.
    let done_id = env.http.create().await.context("first task")?;
    let t0 = Instant::now();
    while env.http.get(&done_id).await? != "completed" {
        if t0.elapsed() > REQUEST_TIMEOUT {
            bail!("the first task did not complete within {REQUEST_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut rows = Vec::new();
    for &c in &args.clients {
        rows.push(per_clients(&env, c, &done_id).await?);
    }

    let costs = if cluster.is_some() {
        notes.push("per-task costs: skipped with --redis-cluster (INFO covers one master)".into());
        None
    } else if args.tasks > 0 {
        Some(per_task_costs(&env, args.tasks, &done_id).await?)
    } else {
        notes.push("per-task costs: skipped (--tasks 0)".into());
        None
    };

    let listeners = match (args.listeners, gw_pid) {
        (0, _) => {
            notes.push("idle listeners: skipped (--listeners 0)".into());
            None
        }
        (l, Some(pid)) => {
            let (j, t) = idle_listeners(&env, l, pid).await?;
            if j.get("skipped").is_some() {
                notes.extend(t.iter().cloned());
            }
            Some((j, t))
        }
        (_, None) => {
            notes.push(
                "idle listeners: not measured, the gateway's RSS cannot be read for an existing stack (--url)"
                    .into(),
            );
            None
        }
    };

    let limit = if cluster.is_some() {
        notes.push("Redis limit: skipped with --redis-cluster".into());
        None
    } else if args.limit_loops > 0 {
        Some(
            redis_limit(
                &env,
                &stack.redis_url,
                args.limit_loops,
                args.limit_conns,
                args.limit_start,
            )
            .await
            .context("Redis limit run")?,
        )
    } else {
        notes.push("Redis limit: skipped (--limit-loops 0)".into());
        None
    };

    let raw = if env.own && cluster.is_none() && args.redis_benchmark > 0 {
        match redis_benchmark(&stack.redis_url, args.redis_benchmark).await {
            Ok(r) => Some(r),
            Err(e) => {
                notes.push(format!("raw Redis ops/s: not measured ({e:#})"));
                None
            }
        }
    } else {
        if !env.own {
            notes.push("raw Redis ops/s: not measured against an existing Redis (redis-benchmark writes keys)".into());
        }
        None
    };

    // --- Output ---
    let mut out = String::new();
    out.push_str(&format!(
        "mcp-tasks bench: {} stack, {} cores, {} s per phase after {} s warm-up, worker concurrency {}\n\n",
        if env.own { "own" } else { "existing" },
        nproc(),
        args.duration.as_secs_f64(),
        warm.as_secs_f64(),
        if env.own {
            args.worker_concurrency.to_string()
        } else {
            "?".into()
        }
    ));
    out.push_str(&table(&rows));
    if let Some(c) = &costs {
        out.push('\n');
        for l in &c.text {
            out.push_str(l);
            out.push('\n');
        }
    }
    if let Some((_, t)) = &listeners {
        out.push('\n');
        for l in t {
            out.push_str(l);
            out.push('\n');
        }
    }
    let best_poll = rows.iter().map(|r| r.poll.per_s).fold(0.0, f64::max);
    let best_poll_c = rows
        .iter()
        .find(|r| r.poll.per_s == best_poll)
        .map_or(0, |r| r.clients);
    let best_listen = rows.iter().map(|r| r.listen.per_s).fold(0.0, f64::max);
    let best_listen_c = rows
        .iter()
        .find(|r| r.listen.per_s == best_listen)
        .map_or(0, |r| r.clients);
    let mut ratio = Value::Null;
    if let Some(l) = &limit {
        out.push('\n');
        for t in &l.text {
            out.push_str(t);
            out.push('\n');
        }
        let rp = best_poll / l.per_s * 100.0;
        let rl = best_listen / l.per_s * 100.0;
        out.push_str(&format!(
            "  e2e by polling, best (c={best_poll_c}): {best_poll:.0} tasks/s = {rp:.1}% of the limit; e2e by listen, best (c={best_listen_c}): {best_listen:.0} tasks/s = {rl:.1}%\n"
        ));
        ratio = json!({
            "best_e2e_poll_per_s": best_poll, "best_e2e_poll_clients": best_poll_c,
            "best_e2e_poll_percent_of_limit": rp,
            "best_e2e_listen_per_s": best_listen, "best_e2e_listen_clients": best_listen_c,
            "best_e2e_listen_percent_of_limit": rl,
        });
    }
    if let Some(r) = &raw {
        out.push_str(&format!(
            "  raw Redis ops/s (redis-benchmark -c 50 -P 16 -n {}, not our command mix): {}\n",
            args.redis_benchmark,
            r.iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let out_dir = args.out.clone().unwrap_or_else(|| {
        // target/<profile>/bench → target/bench
        std::env::current_exe()
            .ok()
            .and_then(|e| Some(e.parent()?.parent()?.join("bench")))
            .unwrap_or_else(|| PathBuf::from("target/bench"))
    });
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let png = out_dir.join("bench.png");
    let drawn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| draw_png(&png, &rows)));
    match drawn {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(note))) => notes.push(format!("bench.png: {note}")),
        Ok(Err(e)) => notes.push(format!("bench.png: not drawn ({e})")),
        Err(_) => notes.push("bench.png: not drawn (the plotting library panicked)".into()),
    }
    if !notes.is_empty() {
        out.push_str("\nnot measured / notes:\n");
        for n in &notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    let wall_secs = wall.elapsed().as_secs_f64();
    out.push_str(&format!(
        "\nwall time {wall_secs:.1} s; {} and {}\n",
        out_dir.join("bench.json").display(),
        png.display()
    ));
    let report = json!({
        "command_line": std::env::args().collect::<Vec<_>>().join(" "),
        "git_commit": git_commit(),
        "started_unix": started_unix,
        "wall_seconds": wall_secs,
        "machine": {"nproc": nproc(), "clk_tck": env.clk, "redis_version": redis_version},
        "stack": {
            "own": env.own,
            "url": format!("http://{}{}", stack.addr, stack.path),
            "redis": stack.redis_url,
            "redis_cluster_masters": args.redis_cluster,
            "queue_shards": stack.shards,
            "worker_concurrency": if env.own { json!(args.worker_concurrency) } else { Value::Null },
        },
        "settings": {
            "clients": args.clients,
            "duration_seconds": args.duration.as_secs_f64(),
            "warmup_seconds": warm.as_secs_f64(),
            "tasks": args.tasks,
            "listeners": args.listeners,
            "limit_loops": args.limit_loops,
        },
        "per_clients": rows.iter().map(row_json).collect::<Vec<_>>(),
        "per_task": costs.as_ref().map(|c| c.json.clone()),
        "idle_listeners": listeners.as_ref().map(|l| l.0.clone()),
        "redis_limit": limit.as_ref().map(|l| l.json.clone()),
        "e2e_vs_limit": ratio,
        "raw_redis_ops_per_s": raw.as_ref().map(|r| r.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>()),
        "notes": notes,
    });
    std::fs::write(
        out_dir.join("bench.json"),
        serde_json::to_string_pretty(&report)?,
    )
    .with_context(|| format!("writing {}", out_dir.join("bench.json").display()))?;
    print!("{out}");
    drop(env);
    drop(stack);
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench: {e:#} (see --help)");
            return ExitCode::from(64);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async {
        tokio::select! {
            r = run(args) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        }
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::from(1)
        }
    }
}
