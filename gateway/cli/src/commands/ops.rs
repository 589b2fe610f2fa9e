//! `queues` and `workers`: what operators read straight from Redis (the key table is in
//! `shared/src/store/mod.rs`): the job streams `mcpt:queue:{NAME}` with their consumer group
//! `workers`, and the tool advertisements in the hash `mcpt:tools`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_tasks_store::keys::{GROUP, TOOLS_KEY};
use mcp_tasks_store::registry::ADVERT_STALE_MS;
use redis::Value;
use redis::aio::MultiplexedConnection;

use super::Fail;

const QUEUE_PREFIX: &str = "mcpt:queue:";
const TIMEOUT: Duration = Duration::from_secs(10);

fn redis_fail(url: &str) -> impl Fn(redis::RedisError) -> Fail + '_ {
    move |e| Fail::runtime(format!("redis at {url}: {e}"))
}

/// Why `queues`/`workers` cannot read `url`, when it names a Redis Cluster.
fn cluster_refusal(url: &str) -> Option<Fail> {
    matches!(
        mcp_tasks_shared::config::RedisTarget::parse(url),
        Some(mcp_tasks_shared::config::RedisTarget::Cluster(_))
    )
    .then(|| {
        Fail::usage(
            "queues and workers read a single Redis, not a Redis Cluster: read the workers' mcpt_queue_length, mcpt_queue_lag and mcpt_queue_pending gauges on their /metrics instead".to_owned(),
        )
    })
}

async fn connect(url: &str) -> Result<MultiplexedConnection, Fail> {
    if let Some(refusal) = cluster_refusal(url) {
        return Err(refusal);
    }
    let client =
        redis::Client::open(url).map_err(|e| Fail::usage(format!("bad Redis URL {url:?}: {e}")))?;
    tokio::time::timeout(TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| Fail::runtime(format!("redis at {url}: no answer within 10 s")))?
        .map_err(redis_fail(url))
}

async fn query(
    con: &mut MultiplexedConnection,
    url: &str,
    cmd: &redis::Cmd,
) -> Result<Value, Fail> {
    tokio::time::timeout(TIMEOUT, cmd.query_async::<Value>(con))
        .await
        .map_err(|_| Fail::runtime(format!("redis at {url}: no answer within 10 s")))?
        .map_err(redis_fail(url))
}

/// A reply as text, when it is one.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// A reply as an integer, when it is one (`Nil` is not).
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => text(v).and_then(|t| t.parse().ok()),
    }
}

/// A map-shaped reply (RESP3 map, or RESP2 flat array of pairs) as pairs.
fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(m) => m
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v.clone())))
            .collect(),
        Value::Array(a) => a
            .chunks(2)
            .filter_map(|c| match c {
                [k, v] => Some((text(k)?, v.clone())),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn field<'a>(pairs: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        _ => &[],
    }
}

/// The queue names (from `SCAN MATCH mcpt:queue:*`), sorted.
async fn queue_names(con: &mut MultiplexedConnection, url: &str) -> Result<Vec<String>, Fail> {
    let mut cursor = "0".to_owned();
    let mut names = Vec::new();
    loop {
        let reply = query(
            con,
            url,
            redis::cmd("SCAN")
                .arg(&cursor)
                .arg("MATCH")
                .arg(format!("{QUEUE_PREFIX}*"))
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg("stream"),
        )
        .await?;
        let parts = items(&reply);
        cursor = parts.first().and_then(text).unwrap_or_else(|| "0".into());
        for key in parts.get(1).map(items).unwrap_or(&[]) {
            if let Some(k) = text(key).and_then(|k| k.strip_prefix(QUEUE_PREFIX).map(str::to_owned))
            {
                // `mcpt:queue:{NAME}`: the braces are the cluster hash tag.
                let name = k
                    .strip_prefix('{')
                    .and_then(|n| n.strip_suffix('}'))
                    .map_or(k.clone(), str::to_owned);
                names.push(name);
            }
        }
        if cursor == "0" {
            break;
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

fn queue_key(name: &str) -> String {
    format!("{QUEUE_PREFIX}{{{name}}}")
}

/// Print rows as a left-aligned table (numbers right-aligned) with a header.
fn table(header: &[&str], rows: &[Vec<String>]) {
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

fn show(v: Option<&Value>) -> String {
    v.and_then(int)
        .map_or_else(|| "-".into(), |i| i.to_string())
}

/// `queues`: length, consumer-group lag, pending and consumers per queue.
pub(crate) async fn queues(url: &str) -> Result<(), Fail> {
    let mut con = connect(url).await?;
    let names = queue_names(&mut con, url).await?;
    if names.is_empty() {
        println!("no queues (no worker has started against this Redis)");
        return Ok(());
    }
    let mut rows = Vec::new();
    for name in &names {
        let key = queue_key(name);
        let len = query(&mut con, url, redis::cmd("XLEN").arg(&key)).await?;
        let groups = query(&mut con, url, redis::cmd("XINFO").arg("GROUPS").arg(&key)).await?;
        let group = items(&groups)
            .iter()
            .map(pairs)
            .find(|g| field(g, "name").and_then(text).as_deref() == Some(GROUP));
        let (lag, pending, consumers) = match &group {
            Some(g) => (
                show(field(g, "lag")),
                show(field(g, "pending")),
                show(field(g, "consumers")),
            ),
            None => ("-".into(), "-".into(), "0".into()),
        };
        rows.push(vec![
            name.clone(),
            show(Some(&len)),
            lag,
            pending,
            consumers,
        ]);
    }
    table(&["QUEUE", "LENGTH", "LAG", "PENDING", "CONSUMERS"], &rows);
    Ok(())
}

/// `workers`: live tool advertisements, then the consumers of each queue's group.
pub(crate) async fn workers(url: &str) -> Result<(), Fail> {
    let mut con = connect(url).await?;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let adverts = query(&mut con, url, redis::cmd("HGETALL").arg(TOOLS_KEY)).await?;
    let mut tools: Vec<Vec<String>> = pairs(&adverts)
        .into_iter()
        .map(|(name, v)| {
            let advert: serde_json::Value = text(&v)
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            let heartbeat = advert["heartbeat_ms"].as_i64();
            let state = match heartbeat {
                Some(h) if now_ms - h > ADVERT_STALE_MS => {
                    format!("{} ago (stale)", age(now_ms - h))
                }
                Some(h) => format!("{} ago", age(now_ms - h)),
                None => "unknown".into(),
            };
            vec![
                name,
                advert["queue"].as_str().unwrap_or("?").to_owned(),
                advert["policy"].as_str().unwrap_or("?").to_owned(),
                state,
            ]
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
    for name in queue_names(&mut con, url).await? {
        let reply = query(
            &mut con,
            url,
            redis::cmd("XINFO")
                .arg("CONSUMERS")
                .arg(queue_key(&name))
                .arg(GROUP),
        )
        .await;
        let Ok(reply) = reply else {
            continue; // no group yet
        };
        for c in items(&reply).iter().map(pairs) {
            consumers.push(vec![
                name.clone(),
                field(&c, "name").and_then(text).unwrap_or_default(),
                show(field(&c, "pending")),
                field(&c, "idle")
                    .and_then(int)
                    .map_or_else(|| "-".into(), age),
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

    /// A cluster URL is refused with a line saying where to look instead; one URL is not.
    #[test]
    fn cluster_urls_are_refused_with_a_pointer() {
        for url in [
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
            "redis://10.0.0.1:7000,redis://10.0.0.2:7000",
        ] {
            let Some(fail) = cluster_refusal(url) else {
                panic!("{url} accepted");
            };
            assert!(
                format!("{fail:?}").contains("mcpt_queue_length"),
                "{fail:?}"
            );
        }
        assert!(cluster_refusal("redis://127.0.0.1:6379").is_none());
    }

    #[test]
    fn ages_read_well() {
        assert_eq!(age(850), "850ms");
        assert_eq!(age(12_340), "12.3s");
        assert_eq!(age(245_000), "4m05s");
        assert_eq!(age(7_800_000), "2h10m");
    }

    #[test]
    fn map_replies_of_both_protocols() {
        let resp2 = Value::Array(vec![Value::BulkString(b"lag".to_vec()), Value::Int(3)]);
        let resp3 = Value::Map(vec![(Value::SimpleString("lag".into()), Value::Int(3))]);
        for v in [resp2, resp3] {
            assert_eq!(show(field(&pairs(&v), "lag")), "3");
        }
        assert_eq!(show(Some(&Value::Nil)), "-");
    }
}
