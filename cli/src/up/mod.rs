//! `mcp-tasks up`: a private Redis (unless `MCPT_REDIS_URL` is set), a gateway and a worker
//! pool in one process, keeping tasks in a data directory across restarts (`data.rs`).
//!
//! Starting, in this order, so a mistake leaves nothing behind: the configuration is read
//! and checked; the data directory is claimed (`claim.rs`: one `up` per directory); signal
//! handlers are installed; the listen port is bound (a busy port is the likeliest mistake,
//! found before anything runs); a Redis left by a killed `up` is stopped and the private
//! Redis started (`redis.rs`); then the gateway and worker run and the runtime file is
//! written. Each step's leftovers are guards (`Claim`, `PrivateRedis`), so any error or
//! signal on the way cleans up what was made.
//!
//! Stopping (SIGINT, SIGTERM or SIGHUP): the gateway stops accepting and the worker stops
//! reading; jobs waiting for input are handed back to their queue at once, running ones
//! after [`UP_SHUTDOWN_GRACE`]; Redis stops last, so a handed-back job stays queued and
//! the next `up` resumes it as after a crash. A second signal exits at once: Redis is told
//! to shut down (it writes its data out) and the jobs stay in their streams, claimed by
//! this gone worker, to be reclaimed once their lease lapses.

mod claim;
mod redis;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_tasks_shared::config::{
    ENV_DRAIN_DELAY, ENV_REDIS_URL, ENV_SHUTDOWN_GRACE, GatewayConfig, WorkerConfig,
};
use mcp_tasks_shared::{error_chain, telemetry};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::data::{self, Runtime};
use claim::Claim;
use redis::PrivateRedis;

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

/// Why `up` stopped before serving: its exit code and the one line to print.
struct Failed(u8, String);

impl Failed {
    /// A mistake in the configuration (exit 64).
    fn usage(why: impl std::fmt::Display) -> Failed {
        Failed(64, why.to_string())
    }

    /// A failure at run time (exit 1).
    fn runtime(why: impl std::fmt::Display) -> Failed {
        Failed(1, why.to_string())
    }
}

/// Run `up`; the exit code after what needed saying was said.
pub(crate) fn run(keep: Keep) -> ExitCode {
    match configure().and_then(|setup| start_and_serve(setup, keep)) {
        Ok(code) => code,
        Err(Failed(code, line)) => {
            eprintln!("mcp-tasks: {line}");
            ExitCode::from(code)
        }
    }
}

/// What `up` runs, read from the environment and checked before anything starts.
struct Setup {
    gateway: GatewayConfig,
    worker: WorkerConfig,
    /// No `MCPT_REDIS_URL`: start a Redis of our own.
    private_redis: bool,
    catalog: mcp_tasks_catalog::Catalog,
    builtin: Vec<Arc<dyn mcp_tasks_worker::Tool>>,
}

/// Whether the variable `name` is unset or blank, as the config parser treats it.
fn unset(name: &str) -> bool {
    std::env::var(name).map_or(true, |v| v.trim().is_empty())
}

/// Step 1: the gateway's and worker's configuration with `up`'s defaults, the tools file.
fn configure() -> Result<Setup, Failed> {
    let mut gateway = GatewayConfig::from_env().map_err(Failed::usage)?;
    let mut worker = WorkerConfig::from_env().map_err(Failed::usage)?;
    // The console is on unless MCPT_CONSOLE says otherwise, where it is allowed: loopback
    // without authentication, or behind authentication with MCPT_CONSOLE_PRINCIPALS (the
    // gateway refuses it anywhere else).
    let authenticated = gateway.auth.mode != mcp_tasks_shared::config::AuthMode::None;
    if unset(mcp_tasks_shared::config::ENV_CONSOLE)
        && if authenticated {
            !gateway.console.principals.is_empty()
        } else {
            gateway.listen_addr.ip().is_loopback()
        }
    {
        gateway.console.enabled = true;
    }
    if unset(ENV_SHUTDOWN_GRACE) {
        gateway.shutdown_grace = UP_SHUTDOWN_GRACE;
        worker.shutdown_grace = UP_SHUTDOWN_GRACE;
    }
    // One process for everything: nothing routes around it, so no drain delay.
    if unset(ENV_DRAIN_DELAY) {
        gateway.drain_delay = Duration::ZERO;
    }
    gateway
        .check_exposure(gateway.listen_addr)
        .map_err(Failed::usage)?;
    // The worker's tools: built-in packs plus MCPT_TOOLS_FILE.
    let builtin = mcp_tasks_worker::tools::packs(&worker.tools);
    let catalog = mcp_tasks_catalog::from_env(&worker, &builtin).map_err(Failed::usage)?;
    Ok(Setup {
        gateway,
        worker,
        private_redis: unset(ENV_REDIS_URL),
        catalog,
        builtin,
    })
}

/// Steps 2 to the end: claim the directory, start, serve until stopped.
fn start_and_serve(setup: Setup, keep: Keep) -> Result<ExitCode, Failed> {
    let (dir, ephemeral) = match keep {
        Keep::Dir(dir) => (Some(dir), false),
        Keep::Ephemeral(dir) => (dir, true),
    };
    // Dropped last (after the runtime and Redis): the lock and the runtime file go.
    let claim = dir
        .as_deref()
        .map(claim::claim)
        .transpose()
        .map_err(Failed::runtime)?;
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| Failed::runtime(format!("cannot start the runtime: {e}")))?;
    let signals = runtime.block_on(async { Signals::install(ephemeral) })?;
    let telemetry = runtime
        .block_on(async { telemetry::init("up") })
        .map_err(Failed::usage)?;
    let result = runtime.block_on(serve(setup, claim.as_ref(), ephemeral, &signals));
    telemetry.shutdown();
    // After a second signal the gateway and worker are still at it: drop them.
    runtime.shutdown_background();
    drop(claim);
    result
}

/// What `up` started: the listener, the tools, its Redis.
struct Started {
    listener: tokio::net::TcpListener,
    tools: Vec<Arc<dyn mcp_tasks_worker::Tool>>,
    /// The upstreams serving prompts or resources.
    providers: Vec<Arc<dyn mcp_tasks_worker::Provider>>,
    redis: Option<PrivateRedis>,
}

/// Bind the port, connect the declared upstream servers, check auth, start Redis.
async fn start(
    setup: &mut Setup,
    claim: Option<&Claim>,
    ephemeral: bool,
) -> Result<Started, Failed> {
    let addr = setup.gateway.listen_addr;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        Failed::runtime(format!(
            "cannot listen on {addr}: {e}; set MCPT_LISTEN_ADDR to a free address (127.0.0.1:0 picks one)"
        ))
    })?;
    // [[upstream]] servers are started and listed inside the runtime.
    let declared = std::mem::take(&mut setup.catalog)
        .connect()
        .await
        .map_err(Failed::usage)?;
    let providers = declared.providers;
    let tools = std::mem::take(&mut setup.builtin)
        .into_iter()
        .chain(declared.tools)
        .collect();
    mcp_tasks_gateway::check_auth(&setup.gateway)
        .await
        .map_err(Failed::usage)?;
    let redis = if setup.private_redis {
        let keep_in = claim.map(Claim::dir).filter(|_| !ephemeral);
        if let Some(dir) = keep_in {
            redis::stop_stale(dir, Runtime::read(dir).as_ref())
                .await
                .map_err(Failed::runtime)?;
        }
        let r = redis::start(keep_in).await.map_err(Failed::runtime)?;
        if r.ephemeral {
            println!(
                "redis: {} (private, ephemeral: {} is deleted on exit)",
                r.url(),
                r.dir.display()
            );
        } else {
            println!(
                "redis: {} (private, data kept in {}; --ephemeral for a throwaway one)",
                r.url(),
                r.dir.display()
            );
        }
        setup.gateway.redis_url = r.url();
        setup.worker.redis_url = r.url();
        Some(r)
    } else {
        None
    };
    Ok(Started {
        listener,
        tools,
        providers,
        redis,
    })
}

/// Start everything, serve until a signal, stop Redis last.
async fn serve(
    mut setup: Setup,
    claim: Option<&Claim>,
    ephemeral: bool,
    signals: &Signals,
) -> Result<ExitCode, Failed> {
    // A signal while starting drops what was started (the guards clean up).
    let started = tokio::select! {
        started = start(&mut setup, claim, ephemeral) => started?,
        () = signals.stop.cancelled() => {
            eprintln!("mcp-tasks: interrupted while starting; nothing is left running");
            return Ok(ExitCode::from(130));
        }
    };
    let Started {
        listener,
        tools,
        providers,
        redis,
    } = started;
    let addr = listener
        .local_addr()
        .map_err(|e| Failed::runtime(format!("cannot read the listen address: {e}")))?;
    let stop = signals.stop.clone();
    let redis_url = setup.worker.redis_url.clone();
    let console_on = setup.gateway.console.enabled;
    let worker = tokio::spawn(mcp_tasks_worker::run_serving(
        setup.worker,
        tools,
        providers,
        None,
        stop.clone(),
    ));
    let gateway = tokio::spawn(mcp_tasks_gateway::run(
        setup.gateway,
        listener,
        stop.clone(),
    ));
    signals.serving.store(true, Ordering::SeqCst);
    let mcp_url = format!("http://{addr}/mcp");
    let console_url = console_on.then(|| format!("http://{addr}/console/"));
    println!("listening on http://{addr}");
    println!("MCP endpoint: {mcp_url}  (Ctrl-C stops everything)");
    if let Some(url) = &console_url {
        println!("console: {url}");
    }
    if let Some(claim) = claim {
        announce(
            claim,
            &Runtime {
                pid: std::process::id(),
                mcp_url,
                redis_url,
                redis_pid: redis.as_ref().and_then(PrivateRedis::pid),
                console_url,
            },
        );
    }
    let (g, w) = tokio::select! {
        joined = async { tokio::join!(gateway, worker) } => joined,
        () = signals.now.cancelled() => {
            // Redis is told to write its data out and stop as `redis` drops.
            drop(redis);
            if ephemeral {
                eprintln!("mcp-tasks: stopped at once");
            } else {
                eprintln!(
                    "mcp-tasks: stopped at once; unfinished tasks stay queued and resume on the next `up`"
                );
            }
            return Ok(ExitCode::from(130));
        }
    };
    stop.cancel();
    // Redis last: the worker handed its jobs back through it.
    if let Some(r) = redis {
        r.stop().await;
    }
    g.map_err(Failed::runtime)?
        .map_err(|e| Failed::runtime(format!("gateway: {}", error_chain(&e))))?;
    w.map_err(Failed::runtime)?
        .map_err(|e| Failed::runtime(format!("worker: {}", error_chain(&e))))?;
    Ok(ExitCode::SUCCESS)
}

/// Write the runtime file and say how other commands find this `up`.
fn announce(claim: &Claim, runtime: &Runtime) {
    let dir = claim.dir();
    let file = dir.join(data::RUNTIME_FILE);
    if let Err(e) = runtime.write(dir) {
        eprintln!(
            "mcp-tasks: cannot write {}: {e}; give other commands --url and --redis",
            file.display()
        );
        return;
    }
    let is_default = data::default_dir()
        .and_then(|d| d.canonicalize().ok())
        .is_some_and(|d| d == dir);
    if is_default {
        println!(
            "mcp-tasks commands (call, get, queues, tools, …) find this up through {}",
            file.display()
        );
    } else {
        println!(
            "mcp-tasks commands (call, get, queues, tools, …) find this up through {} when given --data {} or MCPT_DATA_DIR={}",
            file.display(),
            dir.display(),
            dir.display()
        );
    }
}

/// SIGINT, SIGTERM and SIGHUP (a closed terminal) alike: the first cancels `stop`, the
/// second `now`. Installed before anything starts, so no signal finds the default action
/// (exit, leaving Redis behind).
struct Signals {
    stop: CancellationToken,
    now: CancellationToken,
    /// Set once the gateway and worker run; before, a signal needs no "stopping" line.
    serving: Arc<AtomicBool>,
}

impl Signals {
    /// Install the handlers; must run inside the runtime.
    fn install(ephemeral: bool) -> Result<Signals, Failed> {
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| Failed::runtime(format!("cannot listen for {name}: {e}")))
        };
        let mut streams = [
            listen(SignalKind::interrupt(), "SIGINT")?,
            listen(SignalKind::terminate(), "SIGTERM")?,
            listen(SignalKind::hangup(), "SIGHUP")?,
        ];
        let signals = Signals {
            stop: CancellationToken::new(),
            now: CancellationToken::new(),
            serving: Arc::new(AtomicBool::new(false)),
        };
        let (stop, now, serving) = (
            signals.stop.clone(),
            signals.now.clone(),
            signals.serving.clone(),
        );
        tokio::spawn(async move {
            if !next_signal(&mut streams).await {
                return;
            }
            if !serving.load(Ordering::SeqCst) {
                // `serve` says what happened.
            } else if ephemeral {
                eprintln!("mcp-tasks: stopping (again to exit at once)");
            } else {
                eprintln!(
                    "mcp-tasks: stopping; running tasks go back to their queue and resume on the next `up` (again to exit at once)"
                );
            }
            stop.cancel();
            if next_signal(&mut streams).await {
                now.cancel();
            }
        });
        Ok(signals)
    }
}

/// Wait for any of the signals; `false` when none can be received any more.
async fn next_signal([int, term, hup]: &mut [Signal; 3]) -> bool {
    tokio::select! {
        s = int.recv() => s.is_some(),
        s = term.recv() => s.is_some(),
        s = hup.recv() => s.is_some(),
    }
}
