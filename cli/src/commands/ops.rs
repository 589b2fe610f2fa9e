//! `queues`, `workers` and `tasks`: what operators read, either from a gateway's console
//! API (`/console/api/…`, with `MCPT_TOKEN`: no Redis address needed, Redis Cluster alike)
//! or, with `--redis`, from Redis through the store: each queue's depth and consumers, the
//! tool advertisements with their heartbeats, and (console only) the recent tasks.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_tasks_store::registry::ADVERT_STALE_MS;
use mcp_tasks_store::{RedisTarget, Store, StoreError};

use serde_json::Value;

use super::Fail;
use super::client::Client;

/// How long one Redis read may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// Run one store call with the CLI's timeout; failures name the Redis.
pub(crate) async fn ask<T>(
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
pub(crate) fn age(ms: i64) -> String {
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
    let names = ask(url, store.fleet().queue_names()).await?;
    if names.is_empty() {
        println!("no queues (no worker has started against this Redis)");
        return Ok(());
    }
    let mut rows = Vec::new();
    for name in &names {
        let depth = ask(url, store.fleet().queue_depth(name)).await?;
        let consumers = ask(url, store.fleet().queue_consumers(name)).await?;
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
    let mut tools: Vec<Vec<String>> = ask(url, store.fleet().adverts())
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
    for name in ask(url, store.fleet().queue_names()).await? {
        for c in ask(url, store.fleet().queue_consumers(&name)).await? {
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

/// A console API answer, or the failure line.
async fn console(client: &Client, path: &str) -> Result<Value, Fail> {
    client.console_get(path).await.map_err(Fail::runtime)
}

fn num(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".to_owned(), |n| n.to_string())
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("-").to_owned()
}

fn ms(v: &Value) -> String {
    v.as_i64().map_or_else(|| "-".to_owned(), age)
}

/// `queues` through a gateway's console.
pub(crate) async fn queues_via(client: &Client) -> Result<(), Fail> {
    let body = console(client, "/console/api/queues").await?;
    let queues = body["queues"].as_array().cloned().unwrap_or_default();
    if queues.is_empty() {
        println!("no queues (no worker has started, or the console has not refreshed yet)");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            vec![
                text(&q["name"]),
                num(&q["length"]),
                num(&q["lag"]),
                num(&q["pending"]),
                num(&q["consumers"]),
                ms(&q["oldest_waiting_ms"]),
            ]
        })
        .collect();
    table(
        &["QUEUE", "LENGTH", "LAG", "PENDING", "CONSUMERS", "OLDEST"],
        &rows,
    );
    Ok(())
}

/// `workers` through a gateway's console.
pub(crate) async fn workers_via(client: &Client) -> Result<(), Fail> {
    let body = console(client, "/console/api/workers").await?;
    let tools: Vec<Vec<String>> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let stale = if t["stale"].as_bool() == Some(true) {
                " (stale)"
            } else {
                ""
            };
            vec![
                text(&t["name"]),
                text(&t["queue"]),
                text(&t["policy"]),
                format!("{} ago{stale}", ms(&t["heartbeat_age_ms"])),
            ]
        })
        .collect();
    if tools.is_empty() {
        println!("no tools advertised (no live worker)");
    } else {
        table(&["TOOL", "QUEUE", "POLICY", "HEARTBEAT"], &tools);
    }
    println!();
    let workers: Vec<Vec<String>> = body["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            let list = |v: &Value| {
                v.as_array()
                    .map(|a| a.iter().map(text).collect::<Vec<_>>().join(","))
                    .unwrap_or_default()
            };
            vec![
                list(&w["queues"]),
                text(&w["name"]),
                num(&w["slots_in_use"]),
                ms(&w["idle_ms"]),
            ]
        })
        .collect();
    if workers.is_empty() {
        println!("no consumers in any queue's group");
    } else {
        table(&["QUEUE", "CONSUMER", "PENDING", "IDLE"], &workers);
    }
    Ok(())
}

/// Filters of `tasks`, passed to the console API as they are (it checks them).
#[derive(Debug, Default)]
pub(crate) struct TaskFilter {
    pub(crate) status: Option<String>,
    pub(crate) tool: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) id: Option<String>,
    pub(crate) limit: Option<u32>,
}

/// The console API's query for `f` (form-encoded, as the console decodes it).
fn task_query(f: &TaskFilter) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in [
        ("status", &f.status),
        ("tool", &f.tool),
        ("queue", &f.queue),
        ("q", &f.id),
    ] {
        if let Some(v) = v {
            query.append_pair(k, v);
        }
    }
    if let Some(n) = f.limit {
        query.append_pair("limit", &n.to_string());
    }
    query.finish()
}

/// `tasks`: the recent tasks a gateway's console has seen, newest first.
pub(crate) async fn tasks_via(client: &Client, f: &TaskFilter) -> Result<(), Fail> {
    let path = format!("/console/api/tasks?{}", task_query(f));
    let body = console(client, &path).await?;
    let rows: Vec<Vec<String>> = body["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            vec![
                text(&t["id"]),
                text(&t["status"]),
                text(&t["tool"]),
                text(&t["queue"]),
                ms(&t["age_ms"]),
                text(&t["owner"]),
                t["status_message"].as_str().unwrap_or("").to_owned(),
            ]
        })
        .collect();
    if rows.is_empty() {
        // The console learns of a task from its creator's tally (written every few
        // seconds), so one created a moment ago is not listed yet.
        println!("no tasks seen that match (a task created just now is listed within about 10 s)");
    } else {
        table(
            &["TASK", "STATUS", "TOOL", "QUEUE", "AGE", "OWNER", "MESSAGE"],
            &rows,
        );
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

    #[test]
    fn query_values_are_encoded() {
        let f = TaskFilter {
            tool: Some("a b&c=d".into()),
            id: Some("tsk_x-Y.~".into()),
            limit: Some(5),
            ..TaskFilter::default()
        };
        assert_eq!(task_query(&f), "tool=a+b%26c%3Dd&q=tsk_x-Y.%7E&limit=5");
        let back: Vec<(String, String)> = form_urlencoded::parse(task_query(&f).as_bytes())
            .into_owned()
            .collect();
        assert_eq!(back[0], ("tool".into(), "a b&c=d".into()));
    }
}
