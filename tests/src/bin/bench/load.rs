//! The request loops: C clients running one operation (create, get, e2e poll, e2e listen,
//! push) for a warm-up and a measured window, the samples they keep, and [`per_clients`],
//! every phase at one concurrency.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use mcp_tasks_tests::REQUEST_TIMEOUT;
use tokio::task::JoinSet;

use crate::http::{Http, ack, call_body, next_event, now_micros, parse_rfc3339_ms};
use crate::stack::Env;

/// Least sleep of the push-latency phase's tasks; more when opening a listen takes longer
/// (twice the e2e listen p99), so the stream is open before they end.
pub(crate) const PUSH_MS: u64 = 20;

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    pub(crate) ms: f64,
    pub(crate) notify_ms: Option<f64>,
    pub(crate) terminal_age_ms: f64,
    pub(crate) gets: u32,
    pub(crate) snapshot: bool,
}

pub(crate) type OpFuture = Pin<Box<dyn Future<Output = Result<Sample>> + Send>>;
pub(crate) type Op = Arc<dyn Fn() -> OpFuture + Send + Sync>;

/// What one phase at one concurrency measured.
pub(crate) struct Window {
    pub(crate) secs: f64,
    pub(crate) samples: Vec<Sample>,
    pub(crate) cpu: Vec<(&'static str, f64)>,
    /// Of `cpu`, system time, for the watched processes.
    pub(crate) sys: Vec<(&'static str, f64)>,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) n: usize,
    pub(crate) per_s: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
}

impl Stats {
    /// A phase that did not run: its figures print as "-", null in the JSON, and are not drawn.
    pub(crate) const NOT_RUN: Stats = Stats {
        n: 0,
        per_s: f64::NAN,
        p50: f64::NAN,
        p99: f64::NAN,
    };
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn stats(values: impl Iterator<Item = f64>, secs: f64) -> Stats {
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
    pub(crate) fn latency(&self) -> Stats {
        stats(self.samples.iter().map(|s| s.ms), self.secs)
    }
    pub(crate) fn notify(&self) -> Stats {
        stats(self.samples.iter().filter_map(|s| s.notify_ms), self.secs)
    }
    /// Receive time minus lastUpdatedAt over every terminal notification, the ones found in
    /// the listen's snapshot included.
    pub(crate) fn staleness(&self) -> Stats {
        stats(self.samples.iter().map(|s| s.terminal_age_ms), self.secs)
    }
    /// CPU per operation of the window, per process, in µs (NaN without operations).
    pub(crate) fn cpu_us_per_op(&self) -> Vec<(&'static str, f64)> {
        self.us_per_op(&self.cpu)
    }
    /// System time per operation of the window, per watched process, in µs.
    pub(crate) fn sys_us_per_op(&self) -> Vec<(&'static str, f64)> {
        self.us_per_op(&self.sys)
    }
    fn us_per_op(&self, pcts: &[(&'static str, f64)]) -> Vec<(&'static str, f64)> {
        let ops = self.samples.len() as f64;
        pcts.iter()
            .map(|(name, pct)| {
                let us = pct / 100.0 * self.secs * 1e6 / ops;
                (*name, if ops > 0.0 { us } else { f64::NAN })
            })
            .collect()
    }
}

/// Run `op` in a loop on `clients` tasks for the warm-up plus the measured window; keep
/// the samples completed inside the window. The first error stops every client.
pub(crate) async fn drive(env: &Env, clients: usize, op: Op) -> Result<Window> {
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
        sys: env.sys_pct(&a, &b),
    })
}

pub(crate) fn op_create(http: &Http) -> Op {
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

pub(crate) fn op_get(http: &Http, id: &str) -> Op {
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

pub(crate) fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

pub(crate) fn op_poll(http: &Http) -> Op {
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
pub(crate) fn op_listen(http: &Http, sleep_ms: u64) -> Op {
    let http = http.clone();
    let body = call_body(&http.meta, sleep_ms);
    Arc::new(move || {
        let (http, body) = (http.clone(), body.clone());
        Box::pin(async move {
            let t0 = Instant::now();
            let id = http.create_with(body).await?;
            let mut sse = http.listen(Some(&id)).await?;
            if !ack(&mut sse).await?.contains(&id) {
                bail!("listen did not acknowledge task {id}");
            }
            let mut first = true;
            loop {
                let (v, at) = next_event(&mut sse).await?;
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

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(crate) fn cpu_text(cpu: &[(&str, f64)]) -> String {
    cpu.iter()
        .map(|(n, p)| format!("{n} {p:.0}%"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn progress(label: &str, w: &Window, what: &str) {
    let l = w.latency();
    let per_op = w
        .cpu_us_per_op()
        .iter()
        .map(|(n, us)| format!("{n} {us:.0}"))
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!(
        "[{label}] {:.1} s  {} {what}  {:.0}/s  p50 {:.2} ms  p99 {:.2} ms  cpu: {}  µs each: {per_op}",
        w.secs,
        l.n,
        l.per_s,
        l.p50,
        l.p99,
        cpu_text(&w.cpu)
    );
}

/// The figures of one concurrency.
pub(crate) struct Row {
    pub(crate) clients: usize,
    pub(crate) create: Stats,
    pub(crate) get: Stats,
    pub(crate) poll: Stats,
    pub(crate) poll_gets: f64,
    pub(crate) listen: Stats,
    pub(crate) notify: Stats,
    pub(crate) push_ms: u64,
    pub(crate) terminal_age: Stats,
    pub(crate) snapshots: usize,
    pub(crate) cpu: Vec<(&'static str, Vec<(&'static str, f64)>)>,
    /// Per phase, CPU µs per operation (call, get, task) of each process.
    pub(crate) cpu_us: Vec<(&'static str, Vec<(&'static str, f64)>)>,
    /// Per phase, of `cpu_us`, system time per operation of each watched process.
    pub(crate) sys_us: Vec<(&'static str, Vec<(&'static str, f64)>)>,
}

pub(crate) async fn per_clients(env: &Env, c: usize, done_id: &str) -> Result<Row> {
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
    let mut row = Row {
        clients: c,
        create: create.latency(),
        get: get.latency(),
        poll: poll.latency(),
        poll_gets,
        listen: Stats::NOT_RUN,
        notify: Stats::NOT_RUN,
        push_ms: 0,
        terminal_age: Stats::NOT_RUN,
        snapshots: 0,
        cpu_us: vec![
            ("create", create.cpu_us_per_op()),
            ("get", get.cpu_us_per_op()),
            ("e2e poll", poll.cpu_us_per_op()),
        ],
        sys_us: vec![
            ("create", create.sys_us_per_op()),
            ("get", get.sys_us_per_op()),
            ("e2e poll", poll.sys_us_per_op()),
        ],
        // Last: it moves the windows' readings out.
        cpu: vec![
            ("create", create.cpu),
            ("get", get.cpu),
            ("e2e poll", poll.cpu),
        ],
    };
    // The floor serves none of the listen phases.
    if env.floor {
        return Ok(row);
    }

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

    row.listen = listen.latency();
    row.notify = notify;
    row.push_ms = push_ms;
    row.terminal_age = age;
    row.snapshots = snapshots;
    for (phase, w) in [("e2e listen", listen), ("push", push)] {
        row.cpu_us.push((phase, w.cpu_us_per_op()));
        row.sys_us.push((phase, w.sys_us_per_op()));
        row.cpu.push((phase, w.cpu));
    }
    Ok(row)
}
