//! The fleet and the chaos: the processes of the run ([`Fleet`]), the worker kills, the
//! gateway restart and the Redis restart or failover, the loop that schedules them, and the
//! progress line.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Gateway, Process, Worker};

use crate::args::Args;
use crate::plan::Rng;
use crate::recovery::read_hashes;
use crate::state::{Interrupted, Kill, Shared, is_terminal, lock};
use crate::store::Store;
use crate::{GATEWAYS, WORKERS};

pub(crate) struct Fleet {
    /// The Redis: one durable server, or a primary, replicas and sentinels.
    pub(crate) store: Store,
    pub(crate) gateways: Vec<Gateway>,
    /// Running workers with their labels (`chaos-wN`, also their HOSTNAME).
    pub(crate) workers: Vec<(String, Worker)>,
    /// Killed or replaced processes, kept for their logs.
    pub(crate) retired: Vec<(String, Process)>,
    pub(crate) next_worker: usize,
    pub(crate) worker_env: Vec<(&'static str, String)>,
    pub(crate) gateway_env: Vec<(&'static str, String)>,
}

impl Fleet {
    /// Start the Redis ([`Store`]; replicated with `--failover`), [`WORKERS`] workers and
    /// [`GATEWAYS`] gateways, and wait until every gateway lists the tools the plan calls.
    pub(crate) async fn start(args: &Args) -> Result<Fleet> {
        let store = block(|| Store::start(args.failover))?;
        let mut gateway_env = vec![("MCPT_SHUTDOWN_GRACE", "5s".into())];
        gateway_env.extend(store.service_env());
        let mut worker_env = vec![
            ("MCPT_LEASE", args.lease.clone()),
            ("MCPT_MAX_DELIVERIES", args.max_deliveries.to_string()),
        ];
        worker_env.extend(gateway_env.iter().cloned());
        let mut fleet = Fleet {
            store,
            gateways: Vec::new(),
            workers: Vec::new(),
            retired: Vec::new(),
            next_worker: 0,
            worker_env,
            gateway_env,
        };
        for _ in 0..WORKERS {
            block(|| fleet.start_worker())?;
        }
        for _ in 0..GATEWAYS {
            let g = block(|| Gateway::start(&fleet.store.service_url(), &fleet.gateway_env))?;
            fleet.gateways.push(g);
        }
        for g in &fleet.gateways {
            g.client()
                .wait_for_tools(&["sleep", "ask"], Duration::from_secs(30))
                .await
                .context("the workers' tools never appeared in tools/list")?;
        }
        Ok(fleet)
    }

    pub(crate) fn start_worker(&mut self) -> Result<()> {
        self.next_worker += 1;
        let label = format!("chaos-w{}", self.next_worker);
        let mut env = self.worker_env.clone();
        env.push(("HOSTNAME", label.clone()));
        let w = Worker::start(&self.store.service_url(), &env)?;
        self.workers.push((label, w));
        Ok(())
    }

    pub(crate) fn logs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, g) in self.gateways.iter().enumerate() {
            out.push((format!("gateway{i}"), g.process.log_text()));
        }
        for (label, w) in &self.workers {
            out.push((label.clone(), w.process.log_text()));
        }
        for (label, p) in &self.retired {
            out.push((label.clone(), p.log_text()));
        }
        out
    }
}

pub(crate) fn block<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// SIGKILL a random worker (recording the tasks it held) and start a replacement.
pub(crate) async fn kill_worker(
    shared: &Shared,
    fleet: &mut Fleet,
    rng: &mut Rng,
) -> Result<String> {
    let victim = rng.range(0, fleet.workers.len() as u64 - 1) as usize;
    let label = fleet.workers[victim].0.clone();
    let (indices, ids): (Vec<usize>, Vec<String>) = {
        let tasks = lock(&shared.tasks);
        tasks
            .list
            .iter()
            .enumerate()
            .filter(|(_, t)| t.terminals.is_empty())
            .filter_map(|(i, t)| Some((i, t.id.clone()?)))
            .unzip()
    };
    let rows = read_hashes(&shared.redis, &ids).await.unwrap_or_default();
    let queued = rows
        .iter()
        .filter(|(status, fence, _, _)| {
            status.as_deref().is_some_and(|s| !is_terminal(s)) && fence.unwrap_or(0) == 0
        })
        .count();
    let prefix = format!("{label}-");
    let held: Vec<(usize, String, u64)> = indices
        .into_iter()
        .zip(ids)
        .zip(rows)
        .filter_map(|((i, id), (status, fence, worker, _))| {
            let status = status?;
            (!is_terminal(&status) && worker?.starts_with(&prefix))
                .then(|| (i, id, fence.unwrap_or(0)))
        })
        .collect();
    let (_, mut worker) = fleet.workers.remove(victim);
    block(|| worker.process.kill());
    let killed_at = Instant::now();
    shared.kills.fetch_add(1, Ordering::Relaxed);
    let n = held.len();
    {
        let mut rec = lock(&shared.recovery);
        let kill = rec.kills.len();
        rec.kills.push(Kill {
            at: (killed_at - shared.started).as_secs_f64(),
            label: label.clone(),
            held: n,
            queued,
            recovered_ms: Vec::new(),
        });
        for (index, id, fence) in held {
            rec.pending.push(Interrupted {
                index,
                id,
                fence,
                killed_at,
                kill,
            });
        }
    }
    fleet
        .retired
        .push((format!("{label}(killed)"), worker.process));
    block(|| fleet.start_worker())?;
    Ok(format!(
        "SIGKILL {label} holding {n} unfinished tasks ({queued} queued, not yet started); started chaos-w{}",
        fleet.next_worker
    ))
}

pub(crate) async fn restart_gateway(
    shared: &Shared,
    fleet: &mut Fleet,
    rng: &mut Rng,
) -> Result<String> {
    let k = rng.range(0, GATEWAYS as u64 - 1) as usize;
    let url = fleet.store.service_url();
    let env = fleet.gateway_env.clone();
    let old = &mut fleet.gateways[k];
    let status = block(|| old.process.terminate(Duration::from_secs(20)));
    let status = match status {
        Ok(s) => format!("{s}"),
        Err(e) => {
            old.process.kill();
            format!("killed: {e:#}")
        }
    };
    let fresh = block(|| Gateway::start(&url, &env))?;
    let client = fresh.client();
    let old = std::mem::replace(&mut fleet.gateways[k], fresh);
    fleet
        .retired
        .push((format!("gateway{k}(before restart)"), old.process));
    *lock(&shared.gateways[k]) = client;
    shared.gateway_restarts.fetch_add(1, Ordering::Relaxed);
    Ok(format!(
        "restarted gateway{k} (SIGTERM: {status}); now on {}",
        fleet.gateways[k].addr
    ))
}

/// Restart Redis, or with `--failover` kill its primary; then point the command's own
/// reads at the primary of now (the same address after a restart, another after a
/// failover).
pub(crate) async fn disrupt_redis(shared: &Shared, fleet: &mut Fleet) -> Result<String> {
    let what = block(|| fleet.store.disrupt())?;
    shared.redis_disruptions.fetch_add(1, Ordering::Relaxed);
    let url = block(|| fleet.store.primary_url())?;
    shared
        .redis
        .follow(&url)
        .await
        .context("following the primary for the recovery reads")?;
    Ok(what)
}

pub(crate) fn log_event(shared: &Shared, what: &str) {
    println!("[{:6.1}s] {what}", shared.elapsed().as_secs_f64());
}

/// Kills, restarts; returns when every task is terminal (and each chaos action happened
/// once) or at the deadline.
pub(crate) async fn chaos(shared: &Shared, fleet: &mut Fleet, rng: &mut Rng) -> Result<()> {
    let n = shared.args.tasks;
    let every = shared.args.kill_every.as_millis() as u64;
    let mut next_kill = Instant::now() + Duration::from_secs(1);
    let mut gateway_restarted_at: Option<Instant> = None;
    let mut redis_disrupted = false;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if shared.past_deadline() {
            log_event(shared, "deadline reached");
            return Ok(());
        }
        let submitting = shared.submitting.load(Ordering::Relaxed);
        let submitted = shared.submitted.load(Ordering::Relaxed);
        let terminal = lock(&shared.tasks).terminal;
        let all_done = !submitting && terminal >= submitted;
        let kills = shared.kills.load(Ordering::Relaxed);
        let may_kill = kills < shared.args.max_kills;
        if all_done && gateway_restarted_at.is_some() && redis_disrupted && (kills > 0 || !may_kill)
        {
            return Ok(());
        }
        if may_kill && Instant::now() >= next_kill && (!all_done || kills == 0) {
            let what = kill_worker(shared, fleet, rng).await?;
            log_event(shared, &what);
            next_kill = Instant::now() + Duration::from_millis(rng.range(every / 2, every * 3 / 2));
        }
        if gateway_restarted_at.is_none() && (terminal * 5 >= n || all_done) {
            let what = restart_gateway(shared, fleet, rng).await?;
            log_event(shared, &what);
            gateway_restarted_at = Some(Instant::now());
        }
        if !redis_disrupted
            && gateway_restarted_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(1))
            && (terminal * 2 >= n || all_done)
        {
            let what = disrupt_redis(shared, fleet).await?;
            log_event(shared, &what);
            redis_disrupted = true;
        }
    }
}

pub(crate) async fn progress(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    while !shared.done.load(Ordering::Relaxed) {
        tick.tick().await;
        let (terminal, waiting) = {
            let tasks = lock(&shared.tasks);
            let waiting = tasks
                .list
                .iter()
                .filter(|t| t.last_status == "input_required")
                .count();
            (tasks.terminal, waiting)
        };
        let recovering = lock(&shared.recovery).pending.len();
        let (redis_chaos, _) = shared.args.redis_chaos();
        println!(
            "[{:6.1}s] submitted={}/{} terminal={terminal} input_required={waiting} kills={} gateway_restarts={} {redis_chaos}={} recovering={recovering} streams={} submit_retries={}",
            shared.elapsed().as_secs_f64(),
            shared.submitted.load(Ordering::Relaxed),
            shared.args.tasks,
            shared.kills.load(Ordering::Relaxed),
            shared.gateway_restarts.load(Ordering::Relaxed),
            shared.redis_disruptions.load(Ordering::Relaxed),
            shared.streams_open.load(Ordering::Relaxed),
            shared.submit_errors.load(Ordering::Relaxed),
        );
        let _ = std::io::stdout().flush();
    }
}
