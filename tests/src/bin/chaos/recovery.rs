//! The recovery measurement: the task hashes read behind the services' back (`HMGET status
//! fence worker cancel`) over the command's own connection ([`Direct`]), and the watcher
//! timing how fast a killed worker's tasks start again.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::state::{Shared, is_terminal, lock};

pub(crate) type HashRow = (Option<String>, Option<u64>, Option<String>, Option<String>);

/// The chaos command's own connection to the Redis primary, for the reads behind the
/// services' back. It reconnects to the same address after a restart; after a failover the
/// primary has another address, so [`Direct::follow`] points it there.
pub(crate) struct Direct(Mutex<ConnectionManager>);

impl Direct {
    /// Connect to the primary at `url` (`redis://…`).
    pub(crate) async fn connect(url: &str) -> Result<Direct> {
        Ok(Direct(Mutex::new(Self::manager(url).await?)))
    }

    /// Read from the primary at `url` from now on.
    pub(crate) async fn follow(&self, url: &str) -> Result<()> {
        let con = Self::manager(url).await?;
        *lock(&self.0) = con;
        Ok(())
    }

    /// Short timeouts: a read while Redis is away fails fast and is simply retried later.
    async fn manager(url: &str) -> Result<ConnectionManager> {
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        let client = redis::Client::open(url).with_context(|| format!("bad Redis URL {url}"))?;
        ConnectionManager::new_with_config(client, config)
            .await
            .with_context(|| format!("cannot connect to Redis at {url}"))
    }

    fn current(&self) -> ConnectionManager {
        lock(&self.0).clone()
    }
}

/// `HMGET status fence worker cancel` of each task, pipelined; `None` when Redis is away.
pub(crate) async fn read_hashes(direct: &Direct, ids: &[String]) -> Option<Vec<HashRow>> {
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
    let mut con = direct.current();
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
