//! The Redis-bound limit: the store's own lifecycle (create, read, finish, get) looped in
//! this process with no HTTP, and `redis-benchmark` for raw Redis ops/s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use mcp_tasks_store::{
    Created, Finish, Job, NewTask, OwnerLimits, Start, Store, Write, new_task_id,
};
use mcp_tasks_tests::caps_tasks;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::load::cpu_text;
use crate::readings::cmd_delta;
use crate::stack::Env;

pub(crate) struct Limit {
    pub(crate) per_s: f64,
    pub(crate) json: Value,
    pub(crate) text: Vec<String>,
}

pub(crate) async fn redis_limit(
    env: &Env,
    url: &str,
    loops: usize,
    conns: usize,
    with_start: bool,
) -> Result<Limit> {
    let mut stores = Vec::new();
    for _ in 0..conns.max(1) {
        stores.push(Store::connect(url).await.context("connecting the store")?);
    }
    let store = stores[0].clone();
    let queue = format!("bench-limit-{}", std::process::id());
    let queues = Arc::new(vec![queue.clone()]);
    store.jobs().ensure_groups(&queues).await?;
    let job = Arc::new(Job {
        tool: "sleep".into(),
        args: json!({"ms": 0}),
        caps: serde_json::value::to_raw_value(&caps_tasks())?,
        pre: serde_json::Map::new(),
        traceparent: None,
        owner: "anonymous".into(),
    });
    let result: Arc<str> = json!({
        "content": [{"type": "text", "text": "slept 0 ms"}],
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks", "version": "0.1.0"}}
    })
    .to_string()
    .into();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut set = JoinSet::new();
    for k in 0..loops {
        let (store, job, result, done, stop, queues) = (
            stores[k % stores.len()].clone(),
            job.clone(),
            result.clone(),
            done.clone(),
            stop.clone(),
            queues.clone(),
        );
        set.spawn(async move {
            let mut reader = store.jobs().reader().await?;
            let consumer = format!("bench-{}-{k}", std::process::id());
            while !stop.load(Ordering::Relaxed) {
                let id = new_task_id();
                let created = store
                    .tasks()
                    .create(&NewTask {
                        id: &id,
                        ttl_ms: Some(120_000),
                        poll_ms: 500,
                        owner: "anonymous",
                        limits: OwnerLimits::default(),
                        queue: &queues[0],
                        priority: mcp_tasks_store::Priority::Normal,
                        job: &job,
                        keyed: None,
                    })
                    .await?;
                if let Created::Limited(l) = created {
                    bail!("create_task refused: {l:?}");
                }
                let got = reader
                    .read(&queues, &consumer, 1, Some(Duration::from_millis(200)))
                    .await?;
                for d in got {
                    // The worker takes no fence for a run that ends within its first 20 ms
                    // (finish with fence 0); --limit-start yes takes one first anyway.
                    let fence = if with_start {
                        match store.jobs().start(&d, &consumer, 5).await? {
                            Start::Run { fence, .. } => fence,
                            Start::Skip(why) => bail!("start skipped {}: {why}", d.task_id),
                        }
                    } else {
                        0
                    };
                    let w = store
                        .jobs()
                        .finish(&d, fence, &Finish::Completed(result.to_string()))
                        .await?;
                    if w != Write::Ok {
                        bail!("finish: {w:?}");
                    }
                    if store.tasks().view(&d.task_id, &d.owner).await?.is_none() {
                        bail!("view_task {}: gone", d.task_id);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    let window = async {
        tokio::time::sleep(env.warm).await;
        let a = env.snap().await?;
        let da = done.load(Ordering::Relaxed);
        tokio::time::sleep(env.dur).await;
        let b = env.snap().await?;
        let db = done.load(Ordering::Relaxed);
        Ok::<_, anyhow::Error>((a, b, db - da))
    };
    let measured = tokio::select! {
        w = window => w,
        Some(r) = set.join_next() => Err(match r {
            Ok(Err(e)) => e,
            Ok(Ok(())) => anyhow!("a limit loop stopped early"),
            Err(e) => anyhow!("a limit loop died: {e}"),
        }),
    };
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = set.join_next().await {
        if let Ok(Err(e)) = r
            && measured.is_ok()
        {
            return Err(e.context("limit loop"));
        }
    }
    let mut con = env.red.clone();
    let _: redis::RedisResult<i64> = redis::cmd("DEL")
        .arg(store.jobs().queue_streams(&queue))
        .query_async(&mut con)
        .await;
    let (a, b, n) = measured?;
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let per_s = n as f64 / secs;
    let cpu = env.cpu_pct(&a, &b);
    let redis_pct = cpu.iter().find(|(k, _)| *k == "redis").map_or(0.0, |c| c.1);
    let cmds = (b.calls() - a.calls()) as f64 / n.max(1) as f64;
    let breakdown = cmd_delta(&a, &b);
    let by_cmd = breakdown
        .iter()
        .map(|(k, c, _)| format!("{k} {:.2}", *c as f64 / n.max(1) as f64))
        .collect::<Vec<_>>()
        .join("  ");
    eprintln!(
        "[limit] {secs:.1} s  {n} lifecycles  {per_s:.0}/s  cpu: {}",
        cpu_text(&cpu)
    );
    let mut text = vec![format!(
        "Redis-bound limit: {per_s:.0} lifecycles/s  ({loops} loops on {conns} Store connections in this process, no HTTP: create_task, XREADGROUP, {}, view_task (what tasks/get reads); {secs:.1} s; cpu: {})",
        if with_start {
            "start, finish"
        } else {
            "finish with fence 0 as the worker does for a run under 20 ms (--limit-start yes adds start)"
        },
        cpu_text(&cpu)
    )];
    text.push(format!(
        "  Redis commands per lifecycle {cmds:.2}: {by_cmd}"
    ));
    if redis_pct < 85.0 {
        text.push(format!(
            "  note: Redis used {redis_pct:.0}% of one core: this run was bounded by this process's share of the same cores (and by the rest of the machine), not by Redis alone"
        ));
    }
    Ok(Limit {
        per_s,
        json: json!({
            "loops": loops,
            "store_connections": conns,
            "with_start": with_start,
            "seconds": secs,
            "lifecycles": n,
            "lifecycles_per_s": per_s,
            "redis_commands_per_lifecycle": cmds,
            "redis_commands_by_command": breakdown.iter().map(|(k, c, _)| (k.clone(), json!(*c as f64 / n.max(1) as f64))).collect::<serde_json::Map<_, _>>(),
            "cpu_percent": cpu.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
        }),
        text,
    })
}

/// `redis-benchmark -P 16` SET/GET against our own Redis: raw ops/s.
pub(crate) async fn redis_benchmark(url: &str, n: u64) -> Result<Vec<(String, f64)>> {
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
        .ok_or_else(|| anyhow!("no port in {url}"))?;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q"])
            .args([
                "-n",
                &n.to_string(),
                "-c",
                "50",
                "-P",
                "16",
                "-t",
                "set,get",
            ])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow!("redis-benchmark did not finish within 120 s"))?
    .context("cannot run redis-benchmark (apt-get install redis-tools)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let found: Vec<(String, f64)> = text
        .split(['\r', '\n'])
        .filter_map(|l| {
            let (name, rest) = l.split_once(": ")?;
            let rps = rest.split_once(" requests per second")?.0.trim();
            Some((name.trim().to_owned(), rps.parse().ok()?))
        })
        .collect();
    if found.is_empty() {
        bail!("redis-benchmark printed no result: {}", text.trim());
    }
    Ok(found)
}
