//! The per-task costs: N lifecycles and N lone `tasks/get` between two readings of Redis
//! and of the processes, divided by N.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use mcp_tasks_tests::REQUEST_TIMEOUT;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::http::Http;
use crate::load::terminal;
use crate::readings::cmd_delta;
use crate::stack::Env;

/// Clients of the per-task cost run.
pub(crate) const COST_CLIENTS: usize = 16;

/// Prints every second how many of `total` are done, until dropped.
pub(crate) struct Ticker(tokio::task::JoinHandle<()>);

impl Ticker {
    pub(crate) fn start(label: String, done: Arc<AtomicUsize>, total: usize) -> Ticker {
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
/// [`COST_CLIENTS`] clients, each create with a fresh idempotency key when `keyed`;
/// returns the number of gets.
pub(crate) async fn lifecycles(http: &Http, n: usize, keyed: bool) -> Result<u64> {
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
                let id = if keyed {
                    http.create_keyed().await?
                } else {
                    http.create().await?
                };
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
pub(crate) async fn gets_only(http: &Http, id: &str, m: usize) -> Result<()> {
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

pub(crate) struct Costs {
    pub(crate) json: Value,
    pub(crate) text: Vec<String>,
}

pub(crate) async fn per_task_costs(env: &Env, n: usize, done_id: &str) -> Result<Costs> {
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
    let gets = lifecycles(&env.http, n, false)
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
        "    µs per call: {}   (commandstats usec / calls; a script's time includes the commands it runs)",
        per_call(&breakdown)
    ));
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

/// `name usec/calls` for each command of a breakdown, in its order.
fn per_call(items: &[(String, u64, u64)]) -> String {
    items
        .iter()
        .map(|(k, calls, usec)| format!("{k} {:.1}", *usec as f64 / (*calls).max(1) as f64))
        .collect::<Vec<_>>()
        .join("  ")
}
