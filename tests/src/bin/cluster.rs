//! `cluster`: the Kubernetes topology as plain processes on loopback (issue 4, item 5): a
//! durable redis-server, gateways on free ports, N workers, and a small load balancer that
//! sends requests carrying `Mcp-Name` to a gateway chosen by a stable hash of it (others
//! round-robin) and streams responses back unbuffered (SSE included). Workers are added and
//! removed from stdin while load runs.
//!
//! `cargo build --bins && cargo run -p mcp-tasks-tests --bin cluster -- --workers 3`

use std::io::{BufRead as _, Write as _};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use clap::Parser;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use mcp_tasks_tests::{Client, Gateway, RedisServer, Worker, cli};

const ABOUT: &str = "cluster: run mcp-tasks as processes on loopback, without Docker.";

const AFTER_HELP: &str = "\
HOW TO RUN
  cargo build --bins
  cargo run -p mcp-tasks-tests --bin cluster -- [OPTIONS]

  Starts redis-server with AOF (REDIS_SERVER_BIN overrides the binary), the gateways on free
  ports, the workers (MCPT_TOOLS=conformance,demo, HOSTNAME=cluster-wN), and a load balancer
  on --listen: a request with an Mcp-Name header goes to the gateway picked by a stable hash
  of it, any other round-robin; responses (SSE too) are streamed back as they come. Binaries
  come from the directory of this executable, or MCPT_BIN_DIR. MCPT_* variables of this
  process (other than MCPT_REDIS_URL and MCPT_LISTEN_ADDR) are passed to every gateway and
  worker. Prints `cluster: MCP endpoint http://ADDR/mcp` on stdout once tools are listed.

COMMANDS (stdin, one per line)
  add      start one more worker
  remove   SIGTERM the newest worker (its jobs move to the other workers at once)
  status   list the processes with pids and ports (stdout)
  quit     SIGTERM everything and exit 0
  At end of stdin it keeps running until Ctrl-C or SIGTERM, then stops everything.
  One line on stderr per event.
";

/// The options. Defaults, names and meanings are those of docs/operations.md, "A local cluster without Docker".
#[derive(Debug, Parser)]
#[command(
    name = "cluster",
    about = ABOUT,
    after_help = AFTER_HELP,
    args_override_self = true
)]
struct Args {
    /// gateways
    #[arg(long, value_name = "N", default_value = "2", value_parser = cli::at_least(1usize))]
    gateways: usize,
    /// workers at start
    #[arg(long, value_name = "N", default_value_t = 3)]
    workers: usize,
    /// load balancer address (port 0 picks a free one)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
}

fn event(msg: impl std::fmt::Display) {
    eprintln!("cluster: {msg}");
}

// ---------------------------------------------------------------------------------------
// Load balancer
// ---------------------------------------------------------------------------------------

type Body = BoxBody<Bytes, hyper::Error>;

struct Balancer {
    gateways: Vec<SocketAddr>,
    next: AtomicUsize,
    http: HyperClient<HttpConnector, Incoming>,
}

/// FNV-1a: the same name goes to the same gateway in every run and every balancer.
fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Balancer {
    fn pick(&self, req: &hyper::Request<Incoming>) -> SocketAddr {
        let n = self.gateways.len();
        let i = match req.headers().get("mcp-name") {
            Some(name) => (stable_hash(name.as_bytes()) % n as u64) as usize,
            None => self.next.fetch_add(1, Ordering::Relaxed) % n,
        };
        self.gateways[i]
    }

    async fn forward(&self, mut req: hyper::Request<Incoming>) -> hyper::Response<Body> {
        let gateway = self.pick(&req);
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        match format!("http://{gateway}{path}").parse() {
            Ok(uri) => *req.uri_mut() = uri,
            Err(e) => return plain(hyper::StatusCode::BAD_REQUEST, format!("bad path: {e}\n")),
        }
        for hop in [
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "upgrade",
        ] {
            req.headers_mut().remove(hop);
        }
        match self.http.request(req).await {
            Ok(res) => res.map(|b| b.boxed()),
            Err(e) => plain(
                hyper::StatusCode::BAD_GATEWAY,
                format!("gateway {gateway}: {e}\n"),
            ),
        }
    }
}

fn plain(status: hyper::StatusCode, text: String) -> hyper::Response<Body> {
    let mut res =
        hyper::Response::new(Full::new(Bytes::from(text)).map_err(|n| match n {}).boxed());
    *res.status_mut() = status;
    res.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    res
}

async fn serve(listener: tokio::net::TcpListener, lb: Arc<Balancer>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                event(format_args!("load balancer accept failed: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let lb = lb.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let lb = lb.clone();
                async move { Ok::<_, std::convert::Infallible>(lb.forward(req).await) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

// ---------------------------------------------------------------------------------------
// The fleet
// ---------------------------------------------------------------------------------------

struct Fleet {
    redis: RedisServer,
    gateways: Vec<Gateway>,
    workers: Vec<(String, Worker)>,
    started: usize,
    env: Vec<(String, String)>,
}

impl Fleet {
    fn env(&self) -> Vec<(&str, String)> {
        self.env
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect()
    }

    fn add_worker(&mut self) -> Result<()> {
        self.started += 1;
        let label = format!("cluster-w{}", self.started);
        let mut env = self.env();
        env.push(("HOSTNAME", label.clone()));
        let mut w = Worker::start(&self.redis.url(), &env)?;
        event(format_args!(
            "worker {label} started (pid {})",
            w.process.child().id()
        ));
        self.workers.push((label, w));
        Ok(())
    }

    fn remove_worker(&mut self) {
        let Some((label, mut w)) = self.workers.pop() else {
            event("no worker to remove");
            return;
        };
        let pid = w.process.child().id();
        event(format_args!(
            "worker {label} (pid {pid}) SIGTERM: its jobs move to the other workers"
        ));
        match w.process.terminate(Duration::from_secs(20)) {
            Ok(status) => event(format_args!("worker {label} (pid {pid}) exited: {status}")),
            Err(e) => event(format_args!("worker {label} (pid {pid}): {e}; killed")),
        }
    }

    fn status(&mut self, lb: SocketAddr) {
        let redis_pid = self
            .redis
            .cli(&["info", "server"])
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("process_id:").map(|p| p.trim().to_owned()))
            })
            .unwrap_or_else(|| "?".into());
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "cluster: load balancer http://{lb}/mcp (pid {})",
            std::process::id()
        );
        let _ = writeln!(out, "cluster: redis {} (pid {redis_pid})", self.redis.url());
        for (i, g) in self.gateways.iter_mut().enumerate() {
            let pid = g.process.child().id();
            let _ = writeln!(
                out,
                "cluster: gateway {} http://{} (pid {pid})",
                i + 1,
                g.addr
            );
        }
        for (label, w) in &mut self.workers {
            let _ = writeln!(
                out,
                "cluster: worker {label} (pid {})",
                w.process.child().id()
            );
        }
        let _ = writeln!(
            out,
            "cluster: {} gateways, {} workers",
            self.gateways.len(),
            self.workers.len()
        );
        let _ = out.flush();
    }

    /// SIGTERM the workers (newest first), then the gateways, then stop Redis.
    fn stop(mut self) {
        while !self.workers.is_empty() {
            self.remove_worker();
        }
        // In parallel: each gateway waits a moment before draining.
        std::thread::scope(|scope| {
            for g in &mut self.gateways {
                scope.spawn(move || {
                    let pid = g.process.child().id();
                    match g.process.terminate(Duration::from_secs(20)) {
                        Ok(status) => event(format_args!(
                            "gateway {} (pid {pid}) exited: {status}",
                            g.addr
                        )),
                        Err(e) => {
                            event(format_args!("gateway {} (pid {pid}): {e}; killed", g.addr))
                        }
                    }
                });
            }
        });
        self.gateways.clear();
        drop(self.redis);
        event("redis stopped; bye");
    }
}

async fn start(args: &Args) -> Result<(Fleet, tokio::net::TcpListener)> {
    let env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("MCPT_")
                && !matches!(
                    k.as_str(),
                    "MCPT_REDIS_URL" | "MCPT_LISTEN_ADDR" | "MCPT_BIN_DIR"
                )
        })
        .collect();
    let redis = RedisServer::start_durable()?;
    event(format_args!(
        "redis {} started (AOF, fsync always)",
        redis.url()
    ));
    let mut fleet = Fleet {
        redis,
        gateways: Vec::new(),
        workers: Vec::new(),
        started: 0,
        env,
    };
    for _ in 0..args.gateways {
        let mut g = Gateway::start(&fleet.redis.url(), &fleet.env())?;
        event(format_args!(
            "gateway http://{} started (pid {})",
            g.addr,
            g.process.child().id()
        ));
        fleet.gateways.push(g);
    }
    for _ in 0..args.workers {
        fleet.add_worker()?;
    }
    if args.workers > 0 {
        Client::new(fleet.gateways[0].addr)
            .wait_for_tools(&[], Duration::from_secs(20))
            .await
            .context("the workers' tools never appeared in tools/list")?;
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    Ok((fleet, listener))
}

async fn run(args: Args) -> Result<()> {
    let (mut fleet, listener) = start(&args).await?;
    let addr = listener.local_addr()?;
    let lb = Arc::new(Balancer {
        gateways: fleet.gateways.iter().map(|g| g.addr).collect(),
        next: AtomicUsize::new(0),
        http: HyperClient::builder(TokioExecutor::new()).build_http(),
    });
    tokio::spawn(serve(listener, lb));
    event(format_args!("load balancer listening on {addr}"));
    println!("cluster: MCP endpoint http://{addr}/mcp");
    std::io::stdout().flush()?;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut stdin_open = true;
    loop {
        tokio::select! {
            line = rx.recv(), if stdin_open => {
                let Some(line) = line else {
                    stdin_open = false;
                    event("stdin closed; running until Ctrl-C or SIGTERM");
                    continue;
                };
                match line.trim() {
                    "" => {}
                    "add" => {
                        if let Err(e) = tokio::task::block_in_place(|| fleet.add_worker()) {
                            event(format_args!("add failed: {e:#}"));
                        }
                    }
                    "remove" => tokio::task::block_in_place(|| fleet.remove_worker()),
                    "status" => tokio::task::block_in_place(|| fleet.status(addr)),
                    "quit" => {
                        event("quit");
                        break;
                    }
                    other => event(format_args!(
                        "unknown command {other:?} (add, remove, status, quit)"
                    )),
                }
            }
            _ = tokio::signal::ctrl_c() => {
                event("interrupted");
                break;
            }
            _ = sigterm.recv() => {
                event("SIGTERM");
                break;
            }
        }
    }
    tokio::task::block_in_place(|| fleet.stop());
    Ok(())
}

fn main() -> ExitCode {
    let args = match cli::parse::<Args>("cluster", |_| Ok(())) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cluster: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cluster: {e:#}");
            ExitCode::from(2)
        }
    }
}
