//! The recovery measurement: the task hashes read behind the services' back (`HMGET status
//! fence worker cancel`), and the watcher timing how fast a killed worker's tasks start
//! again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;

use crate::state::{Shared, is_terminal, lock};

pub(crate) type HashRow = (Option<String>, Option<u64>, Option<String>, Option<String>);

/// `HMGET status fence worker cancel` of each task, pipelined; `None` when Redis is away.
pub(crate) async fn read_hashes(con: &ConnectionManager, ids: &[String]) -> Option<Vec<HashRow>> {
    if ids.is_empty() {
        return Some(Vec::new());
    }
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.cmd("HMGET")
            .arg(mcp_tasks_store::keys::task_key(
                id,
                mcp_tasks_protocol::meta::ANONYMOUS_OWNER,
            ))
            .arg("status")
            .arg("fence")
            .arg("worker")
            .arg("cancel");
    }
    let mut con = con.clone();
    tokio::time::timeout(Duration::from_secs(2), pipe.query_async(&mut con))
        .await
        .ok()?
        .ok()
}

pub(crate) async fn recovery_watcher(shared: Arc<Shared>) {
    while !shared.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let pending = lock(&shared.recovery).pending.clone();
        if pending.is_empty() {
            continue;
        }
        let ids: Vec<String> = pending.iter().map(|p| p.id.clone()).collect();
        let Some(rows) = read_hashes(&shared.redis, &ids).await else {
            continue;
        };
        let now = Instant::now();
        let mut rec = lock(&shared.recovery);
        // Kills only append; what they added while this read ran stays pending.
        let newer = rec.pending.split_off(ids.len());
        let mut still = Vec::new();
        let mut notes = Vec::new();
        for (p, (status, fence, _, cancel)) in pending.into_iter().zip(rows) {
            let status = status.unwrap_or_default();
            let fence = fence.unwrap_or(0);
            let killed = (p.killed_at - shared.started).as_secs_f64();
            if fence > p.fence || (status == "cancelled" && cancel.as_deref() == Some("1")) {
                let ms = (now - p.killed_at).as_millis() as u64;
                rec.recovered_ms.push(ms);
                if let Some(k) = rec.kills.get_mut(p.kill) {
                    k.recovered_ms.push(ms);
                }
                notes.push((p.index, format!("run {} interrupted by the kill at {killed:.2}s; taken over after {ms} ms (fence {fence}, status {status})", p.fence)));
            } else if is_terminal(&status) || status.is_empty() {
                rec.finished_first += 1;
                notes.push((p.index, format!("held by the worker killed at {killed:.2}s but ended {status:?} without a new start")));
            } else {
                still.push(p);
            }
        }
        still.extend(newer);
        rec.pending = still;
        drop(rec);
        for (i, n) in notes {
            shared.note(i, n);
        }
    }
}
