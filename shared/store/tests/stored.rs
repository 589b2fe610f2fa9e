//! Stored-bytes counts (`MCPT_LIMIT_STORED_BYTES`, `scripts/stored.lua`) against a real,
//! private redis-server.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Redis;
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::Store;
use mcp_tasks_store::stored::{Counted, Stored};

/// Commands Redis ran so far (INFO commandstats, the INFO itself left out).
fn commands(redis: &Redis) -> u64 {
    let out = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "INFO", "commandstats"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn total(c: Counted) -> u64 {
    match c {
        Counted::Yes(t) | Counted::Refused(t) => t,
    }
}

/// Bytes leave the total when their bucket lapses, the earliest first even when it was
/// added after a later one; a count into an existing bucket costs the script, its clock
/// (`TIME`) and three commands; the limit refuses a create at it and a result past it.
#[tokio::test]
async fn stored_bytes_lapse_by_bucket_and_cost_three_commands() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let now = now_millis();
    let count = |bytes: usize, lapses: Option<i64>, limit: u64, what: Stored| {
        let store = store.clone();
        async move {
            store
                .limits()
                .count_stored("own", bytes, lapses, limit, what)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        count(100, Some(now + 600_000), 0, Stored::Create).await,
        Counted::Yes(100)
    );
    // An earlier bucket after a later one: it becomes the next to lapse.
    assert_eq!(
        count(30, Some(now + 500), 0, Stored::Create).await,
        Counted::Yes(130)
    );
    // Into the same bucket again: three commands besides the script and its TIME.
    let before = commands(&redis);
    assert_eq!(
        count(20, Some(now + 600_000), 0, Stored::Result).await,
        Counted::Yes(150)
    );
    let spent = commands(&redis) - before;
    assert!(
        spent <= 5,
        "{spent} commands for a count into an existing bucket"
    );
    // The limit: a result past it is refused, a create at it too.
    assert_eq!(
        count(60, Some(now + 600_000), 200, Stored::Result).await,
        Counted::Refused(150)
    );
    assert_eq!(
        count(50, Some(now + 600_000), 200, Stored::Result).await,
        Counted::Yes(200)
    );
    assert_eq!(
        count(1, Some(now + 600_000), 200, Stored::Create).await,
        Counted::Refused(200)
    );
    // The short bucket lapses (at most a bucket width late); the long one stays.
    let deadline = Instant::now() + mcp_tasks_store::stored::BUCKET + Duration::from_secs(3);
    loop {
        let t = total(count(0, None, 0, Stored::Create).await);
        if t == 170 {
            break;
        }
        assert_eq!(t, 200, "the total moved by something else than the lapse");
        assert!(Instant::now() < deadline, "the 30 bytes never lapsed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Below the limit again: a create is counted.
    assert_eq!(
        count(10, Some(now + 600_000), 200, Stored::Create).await,
        Counted::Yes(180)
    );
}
