//! `chaos`: run a real fleet on loopback (durable Redis, 2 gateways, 3 workers), submit N
//! tasks of mixed kinds, and while they run SIGKILL workers at random (starting
//! replacements), restart a gateway and restart Redis (or, with `--failover`, kill the
//! primary of a replicated Redis under sentinels); then check that every task reached its
//! expected terminal state exactly once with the right result (issue 3, item 6).
//!
//! `cargo build --release --bins && cargo run --release -p mcp-tasks-tests --bin chaos -- --help`
//!
//! [`args`] reads the command line, [`plan`] draws the tasks, [`store`] runs Redis, [`fleet`]
//! runs the processes and the chaos, [`requests`] and [`streams`] are the client side,
//! [`state`] holds what was seen, [`recovery`] times the takeovers, [`mod@report`] judges
//! every task.

// A test tool reads and writes Redis directly to check (or break) what the store wrote.
#![allow(clippy::disallowed_methods)]

mod args;
mod fleet;
mod plan;
mod recovery;
mod report;
mod requests;
mod state;
mod store;
mod streams;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};
use mcp_tasks_tests::binary;

use crate::args::Args;
use crate::fleet::{Fleet, block, chaos, log_event, progress};
use crate::plan::{Plan, Rng};
use crate::recovery::{Direct, recovery_watcher};
use crate::report::{final_read, report};
use crate::requests::{scheduler, submitter};
use crate::state::Shared;
use crate::streams::stream_manager;

/// Tasks not heard of for this long are polled with tasks/get.
const STALE: Duration = Duration::from_secs(3);
const WORKERS: usize = 3;
const GATEWAYS: usize = 2;

async fn run(args: Args) -> Result<bool> {
    for name in ["mcp-tasks-gateway", "mcp-tasks-worker"] {
        let path = binary(name);
        if !path.exists() {
            bail!(
                "{} not found: build the binaries with the same profile first (cargo build --release --bins), or set MCPT_BIN_DIR",
                path.display()
            );
        }
    }
    println!(
        "chaos: tasks={} seed={} lease={} max_deliveries={} kill_every={:?} max_kills={} rate={}/s concurrency={} max_duration={:?} failover={} binaries in {}",
        args.tasks,
        args.seed,
        args.lease,
        args.max_deliveries,
        args.kill_every,
        args.max_kills,
        args.rate,
        args.concurrency,
        args.max_duration,
        args.failover,
        mcp_tasks_tests::bin_dir().display()
    );
    let plans: Arc<Vec<Plan>> =
        Arc::new((0..args.tasks).map(|i| Plan::make(i, args.seed)).collect());

    let mut fleet = Fleet::start(&args).await?;
    let direct = Direct::connect(&block(|| fleet.store.primary_url())?).await?;
    println!(
        "fleet: {}, gateways {}, workers {}",
        fleet.store.describe(),
        fleet
            .gateways
            .iter()
            .map(|g| g.addr.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        fleet
            .workers
            .iter()
            .map(|(l, _)| l.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );

    let shared = Arc::new(Shared::new(&args, &plans, &fleet.gateways, direct));

    let next = Arc::new(AtomicUsize::new(0));
    let submitters: Vec<_> = (0..args.concurrency)
        .map(|_| tokio::spawn(submitter(shared.clone(), next.clone(), plans.clone())))
        .collect();
    {
        let shared = shared.clone();
        tokio::spawn(async move {
            for s in submitters {
                let _ = s.await;
            }
            shared.submitting.store(false, Ordering::Relaxed);
            log_event(
                &shared,
                &format!(
                    "submission finished: {} tasks",
                    shared.submitted.load(Ordering::Relaxed)
                ),
            );
        });
    }
    let background = vec![
        tokio::spawn(stream_manager(shared.clone())),
        tokio::spawn(scheduler(shared.clone())),
        tokio::spawn(recovery_watcher(shared.clone())),
        tokio::spawn(progress(shared.clone())),
    ];

    let mut rng = Rng::new(args.seed ^ 0xC4A0_5C4A_05C4_A05C);
    let outcome = chaos(&shared, &mut fleet, &mut rng).await;
    if let Err(e) = &outcome {
        log_event(&shared, &format!("chaos action failed: {e:#}"));
    }
    // Late notifications (a second terminal version) would arrive within a lease or two.
    let settle = args.lease_dur() * 2 + Duration::from_secs(1);
    log_event(
        &shared,
        &format!("all seen terminal or deadline; listening {settle:?} more"),
    );
    tokio::time::sleep(settle).await;
    shared.done.store(true, Ordering::Relaxed);
    for h in background {
        let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
    }
    log_event(&shared, "final tasks/get of every task");
    final_read(shared.clone()).await;
    let bad = report(&shared, &fleet);
    outcome?;
    Ok(bad == 0)
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(code) => return code,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chaos: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}
