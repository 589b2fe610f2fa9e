//! The final check and the report: every task read once more, then judged, counted per
//! kind, and the problem tasks shown with their log lines.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mcp_tasks_tests::{caps_tasks, truncate};
use serde_json::json;

use crate::fleet::{Fleet, block};
use crate::plan::Kind;
use crate::recovery::read_hashes;
use crate::state::{Shared, lock};

pub(crate) async fn final_read(shared: Arc<Shared>) {
    let ids: Vec<(usize, String)> = {
        let tasks = lock(&shared.tasks);
        tasks
            .list
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((i, t.id.clone()?)))
            .collect()
    };
    let limit = Arc::new(tokio::sync::Semaphore::new(16));
    let mut handles = Vec::new();
    for (i, id) in ids.iter().cloned() {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        let shared = shared.clone();
        handles.push(tokio::spawn(async move {
            // Bounded even after the deadline: a few tries per task.
            let mut got = None;
            for attempt in 0..6 {
                let client = shared.client(i + attempt);
                match client
                    .request("tasks/get", json!({"taskId": id}), &caps_tasks())
                    .await
                {
                    Ok(r) if r.body.get("result").is_some() || r.error_code() == Some(-32602) => {
                        got = Some(r);
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(300)).await,
                }
            }
            match got {
                Some(r) if r.body.get("result").is_some() => {
                    shared.observe(&r.body["result"], "final tasks/get");
                    lock(&shared.tasks).list[i].final_task = Some(r.body["result"].clone());
                }
                Some(r) => lock(&shared.tasks).list[i]
                    .not_found
                    .push(format!("final tasks/get: {}", r.body)),
                None => shared.note(i, "final tasks/get never answered".into()),
            }
            drop(permit);
        }));
    }
    for h in handles {
        let _ = h.await;
    }
    let only_ids: Vec<String> = ids.iter().map(|(_, id)| id.clone()).collect();
    for (chunk_ids, chunk_idx) in only_ids.chunks(500).zip(ids.chunks(500)) {
        if let Some(rows) = read_hashes(&shared.redis, chunk_ids).await {
            let mut tasks = lock(&shared.tasks);
            for ((i, _), (_, fence, _, _)) in chunk_idx.iter().zip(rows) {
                tasks.list[*i].final_fence = fence;
            }
        }
    }
}

#[derive(Default, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) submitted: usize,
    pub(crate) completed: usize,
    pub(crate) failed: usize,
    pub(crate) cancelled: usize,
    pub(crate) lost: usize,
    pub(crate) duplicated: usize,
    pub(crate) wrong: usize,
}

pub(crate) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Print the report; returns lost + duplicated + wrong.
pub(crate) fn report(shared: &Shared, fleet: &Fleet) -> usize {
    let tasks = lock(&shared.tasks);
    let mut rows: BTreeMap<Kind, Row> = Kind::ALL.iter().map(|k| (*k, Row::default())).collect();
    let mut problems: Vec<(usize, Vec<String>)> = Vec::new();
    let mut cancel_ack_then_completed = 0;
    let mut cancel_after_completed = 0;
    let mut restarted_tasks = 0;
    let mut extra_starts = 0;
    let mut max_fence = 0;
    let mut unsubmitted = 0;
    for (i, t) in tasks.list.iter().enumerate() {
        if t.id.is_none() {
            unsubmitted += 1;
            continue;
        }
        let row = rows.get_mut(&t.plan.kind).expect("every kind has a row");
        row.submitted += 1;
        let mut why = Vec::new();
        let vanished = !t.not_found.is_empty();
        let lost = t.terminals.is_empty() || vanished;
        if lost {
            row.lost += 1;
            why.push(if t.terminals.is_empty() {
                format!("LOST: never terminal; last status {:?}", t.last_status)
            } else {
                "LOST: vanished (tasks/get -32602)".to_owned()
            });
        } else {
            let last = t
                .terminals
                .iter()
                .max_by(|a, b| a.updated.cmp(&b.updated))
                .expect("not empty");
            match last.status.as_str() {
                "completed" => row.completed += 1,
                "failed" => row.failed += 1,
                _ => row.cancelled += 1,
            }
        }
        if t.terminals.len() > 1 || !t.regressions.is_empty() {
            row.duplicated += 1;
            why.push(format!(
                "DUPLICATED: {} terminal versions, {} later non-terminal states",
                t.terminals.len(),
                t.regressions.len()
            ));
        }
        let wrong: Vec<String> = t.terminals.iter().filter_map(|s| t.plan.judge(s)).collect();
        if !wrong.is_empty() {
            row.wrong += 1;
            why.push(format!("WRONG: {}", wrong.join("; ")));
        }
        if t.plan.kind == Kind::CancelSleep
            && let (Some(first), Some(ack)) = (t.first_terminal_at, t.cancel_acked_at)
            && t.terminals.iter().all(|s| s.status == "completed")
        {
            if ack < first {
                cancel_ack_then_completed += 1;
            } else {
                cancel_after_completed += 1;
            }
        }
        if let Some(f) = t.final_fence {
            max_fence = max_fence.max(f);
            if f > 1 {
                restarted_tasks += 1;
                extra_starts += f - 1;
            }
        }
        if !why.is_empty() {
            problems.push((i, why));
        }
    }
    let total = rows.values().fold(Row::default(), |a, r| Row {
        submitted: a.submitted + r.submitted,
        completed: a.completed + r.completed,
        failed: a.failed + r.failed,
        cancelled: a.cancelled + r.cancelled,
        lost: a.lost + r.lost,
        duplicated: a.duplicated + r.duplicated,
        wrong: a.wrong + r.wrong,
    });

    println!();
    println!(
        "{:<14}{:>10}{:>11}{:>8}{:>11}{:>6}{:>12}{:>7}",
        "kind", "submitted", "completed", "failed", "cancelled", "lost", "duplicated", "wrong"
    );
    let line = |name: &str, r: &Row| {
        println!(
            "{:<14}{:>10}{:>11}{:>8}{:>11}{:>6}{:>12}{:>7}",
            name, r.submitted, r.completed, r.failed, r.cancelled, r.lost, r.duplicated, r.wrong
        )
    };
    for (k, r) in &rows {
        line(k.name(), r);
    }
    line("total", &total);
    println!();

    let rec = lock(&shared.recovery);
    let mut ms = rec.recovered_ms.clone();
    ms.sort_unstable();
    let p99 = percentile(&ms, 0.99);
    let (_, redis_chaos) = shared.args.redis_chaos();
    println!(
        "chaos: {} worker kills, {} gateway restart, {} {redis_chaos} in {:.1} s (seed {})",
        shared.kills.load(Ordering::Relaxed),
        shared.gateway_restarts.load(Ordering::Relaxed),
        shared.redis_disruptions.load(Ordering::Relaxed),
        shared.elapsed().as_secs_f64(),
        shared.args.seed
    );
    println!(
        "recovery (kill -> started again): {} interrupted runs measured, p50={} p90={} p99={} max={} ms; {} finished before the kill landed; {} never started again",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.9),
        p99,
        ms.last().copied().unwrap_or(0),
        rec.finished_first,
        rec.pending.len()
    );
    for k in &rec.kills {
        let mut v = k.recovered_ms.clone();
        v.sort_unstable();
        println!(
            "  kill at {:6.1}s of {:<10} held {:>3}, backlog {:>4}: {:>3} taken over, p50={} max={} ms",
            k.at,
            k.label,
            k.held,
            k.queued,
            v.len(),
            percentile(&v, 0.5),
            v.last().copied().unwrap_or(0)
        );
    }
    println!(
        "runs: {restarted_tasks} tasks started more than once ({extra_starts} extra starts, most starts of one task {max_fence}; MCPT_MAX_DELIVERIES={})",
        shared.args.max_deliveries
    );
    println!(
        "cancel-sleep completed anyway: {cancel_ack_then_completed} with the cancel acknowledged before completion (allowed: cancellation is cooperative), {cancel_after_completed} had completed before the cancel was acknowledged"
    );
    println!(
        "client side: {} submit retries{}, {} listen streams reopened",
        shared.submit_errors.load(Ordering::Relaxed),
        {
            let e = lock(&shared.last_submit_error);
            if e.is_empty() {
                String::new()
            } else {
                format!(" (last: {})", truncate(&e, 160))
            }
        },
        shared.stream_reopens.load(Ordering::Relaxed)
    );
    if let Some(topology) = block(|| fleet.store.topology()) {
        println!("redis at the end:\n{topology}");
    }
    let logs = fleet.logs();
    let mut suspicious = Vec::new();
    for (label, text) in &logs {
        let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
        let (errors, panics, dropped) =
            (count("ERROR"), count("panicked"), count("result dropped"));
        if errors + panics > 0 {
            suspicious.push(format!("{label}: {errors} ERROR lines, {panics} panics"));
        }
        if dropped > 0 {
            suspicious.push(format!(
                "{label}: {dropped} results dropped by fencing (a newer run owned the task)"
            ));
        }
    }
    for s in &suspicious {
        println!("log: {s}");
    }
    if unsubmitted > 0 {
        println!(
            "{unsubmitted} planned tasks were never submitted (no task handle before the deadline)"
        );
    }
    if !problems.is_empty() {
        println!();
        println!("{} problem tasks (details of up to 20):", problems.len());
        for (i, why) in problems.iter().take(20) {
            let t = &tasks.list[*i];
            let id = t.id.as_deref().unwrap_or("?");
            println!(
                "- task {id} (#{i}, {}): {}",
                t.plan.kind.name(),
                why.join(" | ")
            );
            println!(
                "    plan: ms={} steps={} expected {}; submitted at {:.2}s, input_required seen {}, answered {}, cancel acknowledged {}",
                t.plan.ms,
                t.plan.steps,
                t.plan.expected(),
                at(shared, t.submitted_at),
                opt_at(shared, t.input_seen_at),
                opt_at(shared, t.answered_at),
                opt_at(shared, t.cancel_acked_at),
            );
            for s in &t.terminals {
                println!(
                    "    terminal: {} via {} at {:.2}s",
                    s.describe(),
                    s.source,
                    s.at.as_secs_f64()
                );
            }
            for r in &t.regressions {
                println!("    regression: {r}");
            }
            for n in t.not_found.iter().chain(&t.notes) {
                println!("    note: {}", truncate(n, 300));
            }
            if let Some(f) = &t.final_task {
                println!("    final tasks/get: {}", truncate(&f.to_string(), 600));
            }
            println!("    starts (fence): {:?}", t.final_fence);
            let mut shown = 0;
            for (label, text) in &logs {
                for l in text.lines().filter(|l| l.contains(id)) {
                    if shown < 40 {
                        println!("    {label}: {}", truncate(l, 400));
                    }
                    shown += 1;
                }
            }
            if shown > 40 {
                println!("    … {} more log lines", shown - 40);
            }
        }
    }
    println!();
    println!(
        "tasks={} lost={} duplicated={} wrong={} recovered_p99_ms={p99}",
        total.submitted, total.lost, total.duplicated, total.wrong
    );
    let _ = std::io::stdout().flush();
    total.lost + total.duplicated + total.wrong + unsubmitted
}

pub(crate) fn at(shared: &Shared, t: Option<Instant>) -> f64 {
    t.map(|t| (t - shared.started).as_secs_f64())
        .unwrap_or(-1.0)
}

pub(crate) fn opt_at(shared: &Shared, t: Option<Instant>) -> String {
    t.map(|_| format!("at {:.2}s", at(shared, t)))
        .unwrap_or_else(|| "never".into())
}
