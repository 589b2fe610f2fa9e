//! `bench`: throughput, latency and per-task costs of a real mcp-tasks stack on this
//! machine. It prints figures; it asserts nothing.
//!
//! `cargo build --release --workspace && cargo run --release -p mcp-tasks-tests --bin bench -- --help`
//!
//! [`args`] reads the command line, [`stack`] starts the services, [`load`] drives the
//! clients, [`costs`], [`listeners`] and [`limit`] are the one-off phases, [`report`] and
//! [`png`] write the figures.

// A test tool reads and writes Redis directly to check (or break) what the store wrote.
#![allow(clippy::disallowed_methods)]

mod args;
mod costs;
mod http;
mod keyed;
mod limit;
mod listeners;
mod load;
mod png;
mod readings;
mod report;
mod stack;

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow};

use crate::args::Args;
use crate::costs::per_task_costs;
use crate::http::completed_task;
use crate::limit::{redis_benchmark, redis_limit};
use crate::listeners::idle_listeners;
use crate::load::per_clients;
use crate::report::{Results, Run};
use crate::stack::{Env, Stack};

async fn run(args: Args) -> Result<()> {
    let wall = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut stack = Stack::start(&args).await?;
    let (env, gw_pid, redis_version) = Env::connect(&mut stack, &args).await?;
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
    env.http.wait_for_sleep_tool().await?;
    let mut notes: Vec<String> = Vec::new();
    if !env.own {
        notes.push("server CPU: only Redis (INFO cpu), since --url drives a stack whose gateway and worker processes are not ours".into());
    }
    if args.wait_replicas > 0 {
        notes.push(format!(
            "MCPT_REDIS_WAIT_REPLICAS={0} with {0} replica(s): every create, answer, cancel and finish waits for them (WAIT counts among the Redis commands)",
            args.wait_replicas
        ));
    }
    if args.floor {
        notes.push("--floor: the floor's gateway and workers (the `floor` binary), not mcp-tasks; only the create, get and e2e poll phases ran, nothing after them".into());
    }
    let cluster = args.redis_cluster;
    if let Some(n) = cluster {
        notes.push(format!(
            "Redis Cluster of {n} master(s), MCPT_QUEUE_SHARDS={}: Redis commands, CPU and memory are those of the first master only",
            stack.shards
        ));
    }

    // A completed task for the get phases.
    let done_id = completed_task(&env.http).await?;

    let mut rows = Vec::new();
    for &c in &args.clients.0 {
        rows.push(per_clients(&env, c, &done_id).await?);
    }

    let costs = if args.floor {
        None
    } else if cluster.is_some() {
        notes.push("per-task costs: skipped with --redis-cluster (INFO covers one master)".into());
        None
    } else if args.tasks > 0 {
        let mut costs = per_task_costs(&env, args.tasks, &done_id).await?;
        let key = keyed::key_cost(&env, args.tasks).await?;
        costs.text.extend(key.text);
        costs.json["idempotency_key"] = key.json;
        Some(costs)
    } else {
        notes.push("per-task costs: skipped (--tasks 0)".into());
        None
    };

    let listeners = match (args.listeners, gw_pid) {
        _ if args.floor => None,
        (0, _) => {
            notes.push("idle listeners: skipped (--listeners 0)".into());
            None
        }
        (l, Some(pid)) => {
            let (j, t) = idle_listeners(&env, l, args.listen_tasks, pid).await?;
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

    let limit = if args.floor {
        None
    } else if cluster.is_some() {
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

    let raw = if env.own && !args.floor && cluster.is_none() && args.redis_benchmark > 0 {
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

    let run = Run {
        wall,
        started_unix,
        redis_version,
    };
    let results = Results {
        rows,
        costs,
        listeners,
        limit,
        raw,
        notes,
    };
    report::write(&args, &env, &stack, &run, results)?;
    drop(env);
    drop(stack);
    Ok(())
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(code) => return code,
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
