//! `mcp-tasks`: the command for users and operators.
//!
//! `mcp-tasks up` runs everything on one machine: a private `redis-server` on a free port
//! (unless `MCPT_REDIS_URL` is set), a gateway and a worker pool, and prints the MCP URL.
//! `call`, `get`, `cancel`, `watch` talk MCP to a gateway; `queues` and `workers` read Redis
//! (see `commands/`, which also holds the command line). `mcp-tasks help` lists them
//! all.
//!
//! The one crate that depends on both the gateway and the worker: `up` runs them in one
//! process.

mod commands;

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use mcp_tasks_shared::config::{ENV_REDIS_URL, GatewayConfig, WorkerConfig};
use mcp_tasks_shared::{error_chain, shutdown, telemetry};
use tokio::process::{Child, Command};

fn main() -> ExitCode {
    match commands::parse() {
        Ok(commands::Command::Up) => up(),
        Ok(command) => commands::run(command),
        Err(code) => code,
    }
}

fn up() -> ExitCode {
    let private_redis = std::env::var(ENV_REDIS_URL).map_or(true, |v| v.trim().is_empty());
    let gateway_config = GatewayConfig::from_env();
    let worker_config = WorkerConfig::from_env();
    let (mut gateway_config, mut worker_config) = match (gateway_config, worker_config) {
        (Ok(g), Ok(w)) => (g, w),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("mcp-tasks: {e}");
            return ExitCode::from(64);
        }
    };
    // The worker's tools: built-in packs plus MCPT_TOOLS_FILE, checked before anything starts.
    let builtin = mcp_tasks_worker::tools::packs(&worker_config.tools);
    let catalog = match mcp_tasks_catalog::from_env(&worker_config, &builtin) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-tasks: {e}");
            return ExitCode::from(64);
        }
    };
    if let Err(e) = gateway_config.check_exposure(gateway_config.listen_addr) {
        eprintln!("mcp-tasks: {e}");
        return ExitCode::from(64);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcp-tasks: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // [[upstream]] servers are started and listed inside the runtime.
    let tools = match runtime.block_on(catalog.connect()) {
        Ok(declared) => builtin.into_iter().chain(declared).collect::<Vec<_>>(),
        Err(e) => {
            eprintln!("mcp-tasks: {e}");
            return ExitCode::from(64);
        }
    };
    if let Err(e) = runtime.block_on(mcp_tasks_gateway::check_auth(&gateway_config)) {
        eprintln!("mcp-tasks: {e}");
        return ExitCode::from(64);
    }
    let telemetry = match runtime.block_on(async { telemetry::init("up") }) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mcp-tasks: {e}");
            return ExitCode::from(64);
        }
    };
    let result: Result<(), String> = runtime.block_on(async {
        let mut redis = None;
        if private_redis {
            let (child, url, dir) = start_redis().await?;
            println!("redis: {url} (private, data in {})", dir.display());
            gateway_config.redis_url.clone_from(&url);
            worker_config.redis_url = url;
            redis = Some((child, dir));
        }
        // One process for everything: nothing routes around it, so no drain delay.
        if std::env::var(mcp_tasks_shared::config::ENV_DRAIN_DELAY).is_err() {
            gateway_config.drain_delay = Duration::ZERO;
        }
        let listener = tokio::net::TcpListener::bind(gateway_config.listen_addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", gateway_config.listen_addr))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let stop = shutdown::on_signal();
        let worker = tokio::spawn(mcp_tasks_worker::run(worker_config, tools, stop.clone()));
        let gateway = tokio::spawn(mcp_tasks_gateway::run(
            gateway_config,
            listener,
            stop.clone(),
        ));
        println!("listening on http://{addr}");
        println!("MCP endpoint: http://{addr}/mcp  (Ctrl-C stops everything)");
        let (g, w) = tokio::join!(gateway, worker);
        stop.cancel();
        if let Some((mut child, dir)) = redis {
            let _ = child.kill().await;
            let _ = std::fs::remove_dir_all(dir);
        }
        g.map_err(|e| e.to_string())?
            .map_err(|e| format!("gateway: {}", error_chain(&e)))?;
        w.map_err(|e| e.to_string())?
            .map_err(|e| format!("worker: {}", error_chain(&e)))?;
        Ok(())
    });
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-tasks: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Start `redis-server` on a free loopback port in a fresh directory; wait until it answers.
async fn start_redis() -> Result<(Child, String, std::path::PathBuf), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))?
        .port();
    let dir = std::env::temp_dir().join(format!("mcp-tasks-redis-{port}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--maxmemory-policy", "noeviction", "--loglevel", "warning"])
        // A finished task's hash (its result included) stays a compact listpack.
        .args(["--hash-max-listpack-value", "1024"])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "redis-server is not installed; install it (apt-get install redis-server) or set MCPT_REDIS_URL".to_owned()
            }
            _ => format!("cannot start redis-server: {e}"),
        })?;
    let url = format!("redis://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok((child, url, dir));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "redis-server did not start listening on port {port} within 10 s"
    ))
}
