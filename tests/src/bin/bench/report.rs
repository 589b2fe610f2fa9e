//! The figures as text and JSON: the per-concurrency tables, `bench.json` and the notes
//! of what was not measured.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::args::Args;
use crate::costs::Costs;
use crate::limit::Limit;
use crate::load::{PUSH_MS, Row, Stats};
use crate::png::draw_png;
use crate::stack::{Env, Stack};

pub(crate) fn f0(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.0}")
    } else {
        "-".into()
    }
}

pub(crate) fn f2(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "-".into()
    }
}

pub(crate) fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{:>7}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>10}  {:>12}  {:>10}  {:>6}\n",
        "clients",
        "create/s",
        "p50 ms",
        "p99 ms",
        "get/s",
        "p50",
        "p99",
        "e2e poll/s",
        "e2e listen/s",
        "notify p50",
        "p99"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:>7}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>10}  {:>12}  {:>10}  {:>6}\n",
            r.clients,
            f0(r.create.per_s),
            f2(r.create.p50),
            f2(r.create.p99),
            f0(r.get.per_s),
            f2(r.get.p50),
            f2(r.get.p99),
            f0(r.poll.per_s),
            f0(r.listen.per_s),
            f2(r.notify.p50),
            f2(r.notify.p99),
        ));
    }
    s.push_str(&format!("latencies in ms; notify = receive time - lastUpdatedAt of terminal notifications pushed on open streams (push phase: sleep ms = 2 x e2e listen p99, at least {PUSH_MS}, so the stream is open before the task ends); lastUpdatedAt has whole ms: 1 ms resolution, up to 1 ms high\n\n"));
    s.push_str(&format!(
        "{:>7}  {:>12}  {:>6}  {:>9}  {:>14}  {:>6}  {:>14}  {:>8}  {:>7}\n",
        "clients",
        "poll p50 ms",
        "p99",
        "gets/task",
        "listen p50 ms",
        "p99",
        "in snapshot",
        "push ms",
        "pushed"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:>7}  {:>12}  {:>6}  {:>9}  {:>14}  {:>6}  {:>14}  {:>8}  {:>7}\n",
            r.clients,
            f2(r.poll.p50),
            f2(r.poll.p99),
            format!("{:.1}", r.poll_gets),
            f2(r.listen.p50),
            f2(r.listen.p99),
            format!("{}/{}", r.snapshots, r.listen.n),
            r.push_ms,
            r.notify.n,
        ));
    }
    s.push_str("e2e latency = tools/call sent -> completed observed (poll: tasks/get back to back; listen: terminal notifications/tasks); in snapshot = e2e listen tasks whose terminal state was already in the listen's initial snapshot / all; push ms = the push phase's sleep, pushed = terminal notifications it measured\n\n");
    let table = |s: &mut String, title: String, pick: fn(&Row) -> &Phases| {
        let names: Vec<&str> = rows
            .first()
            .and_then(|r| pick(r).first())
            .map(|(_, c)| c.iter().map(|(n, _)| *n).collect())
            .unwrap_or_default();
        s.push_str(&title);
        s.push_str(&format!("{:>7}  {:<10}", "clients", "phase"));
        for n in &names {
            s.push_str(&format!("  {n:>7}"));
        }
        s.push('\n');
        for r in rows {
            for (phase, cpu) in pick(r) {
                s.push_str(&format!("{:>7}  {phase:<10}", r.clients));
                for (_, v) in cpu {
                    s.push_str(&format!("  {:>7}", f0(*v)));
                }
                s.push('\n');
            }
        }
    };
    table(
        &mut s,
        format!("CPU, % of one core ({} cores):\n", nproc()),
        |r| &r.cpu,
    );
    table(
        &mut s,
        "\nCPU µs per operation of the phase (create: per call; get: per tasks/get; e2e and push: per task, its gets included; rest = the machine's other work):\n".to_owned(),
        |r| &r.cpu_us,
    );
    table(
        &mut s,
        "\nOf that, system time µs per operation (/proc/PID/stat stime: the kernel working for the process, its system calls, the loopback network, scheduling):\n".to_owned(),
        |r| &r.sys_us,
    );
    s
}

/// Per phase, a figure per process.
type Phases = Vec<(&'static str, Vec<(&'static str, f64)>)>;

pub(crate) fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(crate) fn stats_json(s: &Stats) -> Value {
    let num = |v: f64| if v.is_finite() { json!(v) } else { Value::Null };
    json!({"n": s.n, "per_s": num(s.per_s), "p50_ms": num(s.p50), "p99_ms": num(s.p99)})
}

pub(crate) fn row_json(r: &Row) -> Value {
    json!({
        "clients": r.clients,
        "create": stats_json(&r.create),
        "get": stats_json(&r.get),
        "e2e_poll": {"latency": stats_json(&r.poll), "gets_per_task": r.poll_gets},
        "push": {"sleep_ms": r.push_ms, "notify": stats_json(&r.notify)},
        "e2e_listen": {
            "latency": stats_json(&r.listen),
            "terminal_notification_age": stats_json(&r.terminal_age),
            "terminal_in_snapshot": r.snapshots,
        },
        "cpu_percent": r.cpu.iter().map(|(phase, c)| {
            ((*phase).to_owned(), Value::Object(c.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect()))
        }).collect::<serde_json::Map<_, _>>(),
        "cpu_us_per_op": per_op_json(&r.cpu_us),
        "system_us_per_op": per_op_json(&r.sys_us),
    })
}

/// Per phase, a figure per process; NaN (a phase without operations) as null.
fn per_op_json(phases: &Phases) -> Value {
    let num = |v: f64| if v.is_finite() { json!(v) } else { Value::Null };
    phases
        .iter()
        .map(|(phase, c)| {
            let per = c.iter().map(|(k, v)| ((*k).to_owned(), num(*v))).collect();
            ((*phase).to_owned(), Value::Object(per))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

pub(crate) fn git_commit() -> Option<String> {
    let root = mcp_tasks_tests::repo_root();
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    let dirty = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    Some(if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    })
}

/// What the phases measured, for the text report and `bench.json`.
pub(crate) struct Results {
    pub(crate) rows: Vec<Row>,
    pub(crate) costs: Option<Costs>,
    pub(crate) listeners: Option<(Value, Vec<String>)>,
    pub(crate) limit: Option<Limit>,
    pub(crate) raw: Option<Vec<(String, f64)>>,
    /// What was not measured, and why; more are added here.
    pub(crate) notes: Vec<String>,
}

/// Facts of the run itself.
pub(crate) struct Run {
    pub(crate) wall: Instant,
    pub(crate) started_unix: u64,
    pub(crate) redis_version: String,
}

/// Write `bench.json` and `bench.png` to `--out`, then print the report on stdout.
pub(crate) fn write(
    args: &Args,
    env: &Env,
    stack: &Stack,
    run: &Run,
    results: Results,
) -> Result<()> {
    let Results {
        rows,
        costs,
        listeners,
        limit,
        raw,
        mut notes,
    } = results;
    let mut out = String::new();
    out.push_str(&format!(
        "mcp-tasks bench: {} stack, {} cores, {} s per phase after {} s warm-up, {}\n\n",
        if env.own { "own" } else { "existing" },
        nproc(),
        args.duration.as_secs_f64(),
        env.warm.as_secs_f64(),
        if env.own {
            if args.floor {
                format!("the floor's gateway and {} floor worker(s)", args.workers)
            } else {
                format!(
                    "{} worker(s) of concurrency {}",
                    args.workers, args.worker_concurrency
                )
            }
        } else {
            "workers unknown".into()
        }
    ));
    out.push_str(&table(&rows));
    if let Some(c) = &costs {
        out.push('\n');
        for l in &c.text {
            out.push_str(l);
            out.push('\n');
        }
    }
    if let Some((_, t)) = &listeners {
        out.push('\n');
        for l in t {
            out.push_str(l);
            out.push('\n');
        }
    }
    let best_poll = rows.iter().map(|r| r.poll.per_s).fold(0.0, f64::max);
    let best_poll_c = rows
        .iter()
        .find(|r| r.poll.per_s == best_poll)
        .map_or(0, |r| r.clients);
    let best_listen = rows.iter().map(|r| r.listen.per_s).fold(0.0, f64::max);
    let best_listen_c = rows
        .iter()
        .find(|r| r.listen.per_s == best_listen)
        .map_or(0, |r| r.clients);
    let mut ratio = Value::Null;
    if let Some(l) = &limit {
        out.push('\n');
        for t in &l.text {
            out.push_str(t);
            out.push('\n');
        }
        let rp = best_poll / l.per_s * 100.0;
        let rl = best_listen / l.per_s * 100.0;
        out.push_str(&format!(
            "  e2e by polling, best (c={best_poll_c}): {best_poll:.0} tasks/s = {rp:.1}% of the limit; e2e by listen, best (c={best_listen_c}): {best_listen:.0} tasks/s = {rl:.1}%\n"
        ));
        ratio = json!({
            "best_e2e_poll_per_s": best_poll, "best_e2e_poll_clients": best_poll_c,
            "best_e2e_poll_percent_of_limit": rp,
            "best_e2e_listen_per_s": best_listen, "best_e2e_listen_clients": best_listen_c,
            "best_e2e_listen_percent_of_limit": rl,
        });
    }
    if let Some(r) = &raw {
        out.push_str(&format!(
            "  raw Redis ops/s (redis-benchmark -c 50 -P 16 -n {}, not our command mix): {}\n",
            args.redis_benchmark,
            r.iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let out_dir = args.out.clone().unwrap_or_else(|| {
        // target/<profile>/bench → target/bench
        std::env::current_exe()
            .ok()
            .and_then(|e| Some(e.parent()?.parent()?.join("bench")))
            .unwrap_or_else(|| PathBuf::from("target/bench"))
    });
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let png = out_dir.join("bench.png");
    let drawn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| draw_png(&png, &rows)));
    match drawn {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(note))) => notes.push(format!("bench.png: {note}")),
        Ok(Err(e)) => notes.push(format!("bench.png: not drawn ({e})")),
        Err(_) => notes.push("bench.png: not drawn (the plotting library panicked)".into()),
    }
    if !notes.is_empty() {
        out.push_str("\nnot measured / notes:\n");
        for n in &notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    let wall_secs = run.wall.elapsed().as_secs_f64();
    out.push_str(&format!(
        "\nwall time {wall_secs:.1} s; {} and {}\n",
        out_dir.join("bench.json").display(),
        png.display()
    ));
    let report = json!({
        "command_line": std::env::args().collect::<Vec<_>>().join(" "),
        "git_commit": git_commit(),
        "run.started_unix": run.started_unix,
        "wall_seconds": wall_secs,
        "machine": {"nproc": nproc(), "clk_tck": env.clk, "redis_version": run.redis_version},
        "stack": {
            "own": env.own,
            "url": format!("http://{}{}", stack.addr, stack.path),
            "redis": stack.redis_url,
            "redis_cluster_masters": args.redis_cluster,
            "wait_replicas": args.wait_replicas,
            "queue_shards": stack.shards,
            "worker_concurrency": if env.own { json!(args.worker_concurrency) } else { Value::Null },
            "workers": if env.own { json!(args.workers) } else { Value::Null },
            "fair_share": if env.own { json!(args.fair_share) } else { Value::Null },
            "guest_slots": if env.own { json!(args.guest_slots) } else { Value::Null },
        },
        "settings": {
            "clients": args.clients.0,
            "duration_seconds": args.duration.as_secs_f64(),
            "warmup_seconds": env.warm.as_secs_f64(),
            "tasks": args.tasks,
            "listeners": args.listeners,
            "limit_loops": args.limit_loops,
        },
        "per_clients": rows.iter().map(row_json).collect::<Vec<_>>(),
        "per_task": costs.as_ref().map(|c| c.json.clone()),
        "idle_listeners": listeners.as_ref().map(|l| l.0.clone()),
        "redis_limit": limit.as_ref().map(|l| l.json.clone()),
        "e2e_vs_limit": ratio,
        "raw_redis_ops_per_s": raw.as_ref().map(|r| r.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>()),
        "notes": notes,
    });
    std::fs::write(
        out_dir.join("bench.json"),
        serde_json::to_string_pretty(&report)?,
    )
    .with_context(|| format!("writing {}", out_dir.join("bench.json").display()))?;
    print!("{out}");
    Ok(())
}
