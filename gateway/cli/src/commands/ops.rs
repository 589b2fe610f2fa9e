//! `queues` and `workers`: what operators read from Redis, through the store (so one Redis
//! and a Redis Cluster alike): each queue's depth and consumers, and the tool
//! advertisements with their heartbeats.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_tasks_store::registry::ADVERT_STALE_MS;
use mcp_tasks_store::{RedisTarget, Store, StoreError};

use super::Fail;

/// How long one Redis read may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// Run one store call with the CLI's timeout; failures name the Redis.
async fn ask<T>(
    url: &str,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, Fail> {
    tokio::time::timeout(TIMEOUT, call)
        .await
        .map_err(|_| Fail::runtime(format!("redis at {url}: no answer within 10 s")))?
        .map_err(|e| {
            Fail::runtime(format!(
                "redis at {url}: {}",
                mcp_tasks_shared::error_chain(&e)
            ))
        })
}

/// Connect to the Redis at `url` (a cluster too) with the servers' shard count.
pub(crate) async fn connect(url: &str) -> Result<Store, Fail> {
    if RedisTarget::parse(url).is_none() {
        return Err(Fail::usage(format!(
            "bad Redis URL {url:?}: expected redis://, rediss://, unix:// or a cluster node list"
        )));
    }
    // The shard count must be the servers' for a cluster's queues to be read whole.
    let shards = mcp_tasks_shared::config::queue_shards(&mcp_tasks_shared::config::Env, url)
        .map_err(Fail::usage)?;
    ask(url, Store::connect_sharded(url, shards)).await
}

/// Print rows as a left-aligned table (numbers right-aligned) with a header.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..header.len())
        .map(|i| {
            !rows.is_empty()
                && rows.iter().all(|r| {
                    r.get(i).is_some_and(|c| {
                        c == "-" || c.trim_end_matches(['s', 'm']).parse::<f64>().is_ok()
                    })
                })
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let out: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if numeric[i] {
                    format!("{c:>w$}", w = widths[i])
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        println!("{}", out.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// Milliseconds as `850ms`, `12.3s`, `4m05s`, `2h10m`.
fn age(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// `queues`: length, consumer-group lag, pending and consumers per queue.
pub(crate) async fn queues(url: &str) -> Result<(), Fail> {
    let store = connect(url).await?;
    let names = ask(url, store.queue_names()).await?;
    if names.is_empty() {
        println!("no queues (no worker has started against this Redis)");
        return Ok(());
    }
    let mut rows = Vec::new();
    for name in &names {
        let depth = ask(url, store.queue_depth(name)).await?;
        let consumers = ask(url, store.queue_consumers(name)).await?;
        rows.push(vec![
            name.clone(),
            depth.length.to_string(),
            depth.lag.to_string(),
            depth.pending.to_string(),
            consumers.len().to_string(),
        ]);
    }
    table(&["QUEUE", "LENGTH", "LAG", "PENDING", "CONSUMERS"], &rows);
    Ok(())
}

/// `workers`: live tool advertisements, then the consumers of each queue's group.
pub(crate) async fn workers(url: &str) -> Result<(), Fail> {
    let store = connect(url).await?;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut tools: Vec<Vec<String>> = ask(url, store.adverts())
        .await?
        .into_iter()
        .map(|advert| {
            let since = now_ms - advert.heartbeat_ms;
            let state = if since > ADVERT_STALE_MS {
                format!("{} ago (stale)", age(since))
            } else {
                format!("{} ago", age(since))
            };
            let policy = serde_json::to_value(advert.policy)
                .ok()
                .and_then(|p| p.as_str().map(str::to_owned))
                .unwrap_or_else(|| "?".to_owned());
            vec![advert.tool.name, advert.queue, policy, state]
        })
        .collect();
    tools.sort();
    if tools.is_empty() {
        println!("no tools advertised (no live worker)");
    } else {
        table(&["TOOL", "QUEUE", "POLICY", "HEARTBEAT"], &tools);
    }
    println!();
    let mut consumers = Vec::new();
    for name in ask(url, store.queue_names()).await? {
        for c in ask(url, store.queue_consumers(&name)).await? {
            consumers.push(vec![
                name.clone(),
                c.name,
                c.pending.to_string(),
                age(i64::try_from(c.idle_ms).unwrap_or(i64::MAX)),
            ]);
        }
    }
    if consumers.is_empty() {
        println!("no consumers in any queue's group");
    } else {
        table(&["QUEUE", "CONSUMER", "PENDING", "IDLE"], &consumers);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_well() {
        assert_eq!(age(850), "850ms");
        assert_eq!(age(12_340), "12.3s");
        assert_eq!(age(245_000), "4m05s");
        assert_eq!(age(7_800_000), "2h10m");
    }
}
