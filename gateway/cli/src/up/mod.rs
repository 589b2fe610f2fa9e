//! `mcp-tasks up`: a private Redis (unless `MCPT_REDIS_URL` is set), a gateway and a worker
//! pool in one process, keeping tasks in a data directory across restarts (`data.rs`).
//!
//! Stopping (SIGINT or SIGTERM): the gateway stops accepting and the worker stops reading;
//! jobs waiting for input are handed back to their queue at once, running ones after
//! [`UP_SHUTDOWN_GRACE`]; Redis stops last, so a handed-back job stays queued and the next
//! `up` resumes it as after a crash. A second signal exits at once: Redis is sent SIGTERM
//! (it writes its data out) and the jobs stay in their streams, claimed by this gone
//! worker, to be reclaimed once their lease lapses.

mod redis;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use mcp_tasks_shared::config::{ENV_REDIS_URL, ENV_SHUTDOWN_GRACE, GatewayConfig, WorkerConfig};
use mcp_tasks_shared::{error_chain, telemetry};
use tokio_util::sync::CancellationToken;

use crate::data::{self, Runtime, is_alive, remove_runtime, runs};

/// The grace period of a stop, unless `MCPT_SHUTDOWN_GRACE` says otherwise: one machine,
/// no other worker to wait for, and an interrupted job resumes on the next `up`.
const UP_SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Where `up` keeps its data.
pub(crate) enum Keep {
    /// In this directory (created if missing), across restarts.
    Dir(PathBuf),
    /// Nowhere: a temp directory deleted on exit; the runtime file goes to this
    /// directory if there is one.
    Ephemeral(Option<PathBuf>),
}

/// Run `up`; the exit code after what needed saying was said.
pub(crate) fn run(keep: Keep) -> ExitCode {
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
    if std::env::var_os(ENV_SHUTDOWN_GRACE).is_none() {
        gateway_config.shutdown_grace = UP_SHUTDOWN_GRACE;
        worker_config.shutdown_grace = UP_SHUTDOWN_GRACE;
    }
    // One process for everything: nothing routes around it, so no drain delay.
    if std::env::var(mcp_tasks_shared::config::ENV_DRAIN_DELAY).is_err() {
        gateway_config.drain_delay = Duration::ZERO;
    }
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
    let dir = match &keep {
        Keep::Dir(dir) | Keep::Ephemeral(Some(dir)) => match prepare_dir(dir) {
            Ok(dir) => Some(dir),
            Err(e) => {
                eprintln!("mcp-tasks: {e}");
                return ExitCode::FAILURE;
            }
        },
        Keep::Ephemeral(None) => None,
    };
    let ephemeral = matches!(keep, Keep::Ephemeral(_));
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
            let keep_in = match (&dir, ephemeral) {
                (Some(dir), false) => {
                    redis::stop_stale(dir).await?;
                    Some(dir.as_path())
                }
                _ => None,
            };
            let r = redis::start(keep_in).await?;
            if r.ephemeral {
                println!(
                    "redis: {} (private, ephemeral: {} is deleted on exit)",
                    r.url,
                    r.dir.display()
                );
            } else {
                println!(
                    "redis: {} (private, data kept in {}; --ephemeral for a throwaway one)",
                    r.url,
                    r.dir.display()
                );
            }
            gateway_config.redis_url.clone_from(&r.url);
            worker_config.redis_url.clone_from(&r.url);
            redis = Some(r);
        }
        let listener = tokio::net::TcpListener::bind(gateway_config.listen_addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", gateway_config.listen_addr))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let me = std::process::id();
        let redis_pid = redis.as_ref().and_then(redis::PrivateRedis::pid);
        let stop = on_signals(Stopping {
            dir: dir.clone(),
            redis_pid,
            ephemeral_dir: redis
                .as_ref()
                .filter(|r| r.ephemeral)
                .map(|r| r.dir.clone()),
            ephemeral,
        });
        let redis_url = worker_config.redis_url.clone();
        let worker = tokio::spawn(mcp_tasks_worker::run(worker_config, tools, stop.clone()));
        let gateway = tokio::spawn(mcp_tasks_gateway::run(
            gateway_config,
            listener,
            stop.clone(),
        ));
        let mcp_url = format!("http://{addr}/mcp");
        println!("listening on http://{addr}");
        println!("MCP endpoint: {mcp_url}  (Ctrl-C stops everything)");
        if let Some(dir) = &dir {
            let runtime = Runtime {
                pid: me,
                mcp_url,
                redis_url,
                redis_pid,
            };
            match runtime.write(dir) {
                Ok(()) => println!(
                    "mcp-tasks commands (call, get, queues, tools, …) find this up through {}",
                    dir.join(data::RUNTIME_FILE).display()
                ),
                Err(e) => eprintln!(
                    "mcp-tasks: cannot write {}: {e}; give other commands --url and --redis",
                    dir.join(data::RUNTIME_FILE).display()
                ),
            }
        }
        let (g, w) = tokio::join!(gateway, worker);
        stop.cancel();
        // Redis last: the worker handed its jobs back through it.
        if let Some(r) = redis {
            r.stop().await;
        }
        if let Some(dir) = &dir {
            remove_runtime(dir, me);
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

/// Create the data directory and check no other `up` uses it; its absolute path.
fn prepare_dir(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir)
        .and_then(|()| dir.canonicalize())
        .map_err(|e| format!("cannot use the data directory {}: {e}", dir.display()))
        .and_then(|dir| {
            match Runtime::read(&dir) {
                Some(other)
                    if other.pid != std::process::id()
                        && is_alive(other.pid)
                        && runs(other.pid, "mcp-tasks") =>
                {
                    Err(format!(
                        "another `mcp-tasks up` (pid {}) uses {} and serves {}; stop it, or give this one --data with another directory",
                        other.pid,
                        dir.display(),
                        other.mcp_url
                    ))
                }
                _ => Ok(dir),
            }
        })
}

/// What a second signal must clean up before exiting at once.
struct Stopping {
    dir: Option<PathBuf>,
    redis_pid: Option<u32>,
    ephemeral_dir: Option<PathBuf>,
    ephemeral: bool,
}

/// A token cancelled on the first SIGINT or SIGTERM; the second exits at once.
fn on_signals(stopping: Stopping) -> CancellationToken {
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("mcp-tasks: cannot listen for SIGTERM: {e}");
                    return;
                }
            };
        if !next_signal(&mut term).await {
            return;
        }
        if stopping.ephemeral {
            eprintln!("mcp-tasks: stopping (again to exit at once)");
        } else {
            eprintln!(
                "mcp-tasks: stopping; running tasks go back to their queue and resume on the next `up` (again to exit at once)"
            );
        }
        fire.cancel();
        if !next_signal(&mut term).await {
            return;
        }
        if let Some(pid) = stopping.redis_pid {
            redis::terminate(pid);
        }
        if let Some(dir) = &stopping.dir {
            remove_runtime(dir, std::process::id());
        }
        if let Some(dir) = &stopping.ephemeral_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if stopping.ephemeral {
            eprintln!("mcp-tasks: stopped at once");
        } else {
            eprintln!(
                "mcp-tasks: stopped at once; unfinished tasks stay queued and resume on the next `up`"
            );
        }
        std::process::exit(130);
    });
    token
}

/// Wait for SIGINT or SIGTERM; `false` when neither can be received any more.
async fn next_signal(term: &mut tokio::signal::unix::Signal) -> bool {
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.is_ok(),
        s = term.recv() => s.is_some(),
    }
}
