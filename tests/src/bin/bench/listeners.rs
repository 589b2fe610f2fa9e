//! The idle-listener phase: L acknowledged `subscriptions/listen` streams held open, and
//! the gateway's memory per stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::costs::Ticker;
use crate::http::{ack, call_body, next_event};
use crate::readings::{fd_limit, vm_rss};
use crate::stack::Env;

/// Listen streams opened at once in the idle-listener phase, and watched tasks: streams
/// naming many tasks open fewer at a time, so the gateway's memory shows what idle
/// streams hold rather than the snapshots of many opening at once.
pub(crate) const LISTEN_PARALLEL: usize = 200;

pub(crate) async fn idle_listeners(
    env: &Env,
    l: usize,
    k: usize,
    gw_pid: u32,
) -> Result<(Value, Vec<String>)> {
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
    // --listen-tasks: K live tasks (an hour's sleep) every stream names.
    let mut tasks = Vec::with_capacity(k);
    let hour = call_body(&env.http.meta, 3_600_000);
    for _ in 0..k {
        tasks.push(env.http.create_with(hour.clone()).await?);
    }
    let tasks = Arc::new(tasks);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = vm_rss(gw_pid).ok_or_else(|| anyhow!("cannot read the gateway's VmRSS"))?;
    let redis_before = env.snap().await?.used_memory;
    let t0 = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let ticker = Ticker::start("listeners".into(), done.clone(), l);
    let parallel = LISTEN_PARALLEL
        .checked_div(k)
        .map_or(LISTEN_PARALLEL, |p| p.max(1));
    let gate = Arc::new(tokio::sync::Semaphore::new(parallel));
    let mut set = JoinSet::new();
    for _ in 0..l {
        let (http, gate, done) = (env.http.clone(), gate.clone(), done.clone());
        let tasks = tasks.clone();
        set.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let mut sse = http.listen_all(&tasks).await?;
            let acked = ack(&mut sse).await?;
            if acked.len() != tasks.len() {
                bail!(
                    "a listen acknowledged {} of its {} tasks",
                    acked.len(),
                    tasks.len()
                );
            }
            // Read each task's snapshot, as a client does: the stream is then idle, not
            // holding snapshots it could not send.
            for _ in 0..tasks.len() {
                next_event(&mut sse).await?;
            }
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
    for id in tasks.iter() {
        env.http.cancel(id).await?;
    }
    let naming = if k == 0 {
        String::new()
    } else {
        format!(
            ", each naming the same {k} live tasks ({:.0} bytes per watched task)",
            per / k as f64
        )
    };
    let text = vec![format!(
        "idle listeners: {l} subscriptions/listen streams held (each acknowledged){naming}, opened {parallel} at a time in {open_secs:.1} s: gateway VmRSS {:.1} -> {:.1} MiB = {per:.0} bytes per listener (after closing them: {:.1} MiB); Redis used_memory {:+.0} bytes per listener",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        closed as f64 / 1048576.0,
        (redis_after - redis_before) as f64 / l as f64
    )];
    Ok((
        json!({
            "listeners": l,
            "tasks_per_listener": k,
            "opened_at_once": parallel,
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
