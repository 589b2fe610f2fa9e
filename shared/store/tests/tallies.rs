//! The console's per-process tallies (`scripts/tally.lua`) against a real, private
//! redis-server: the hash holds the live fleet whether or not a console reads it.

mod common;

use common::Redis;
use mcp_tasks_store::Store;
use mcp_tasks_store::keys::{TALLIES_AT_KEY, TALLIES_KEY};
use mcp_tasks_store::tally::{TALLY_STALE_MS, Tally};

/// A process that stopped writing (a SIGKILLed worker, a gateway of an old deploy) leaves
/// its tally behind; the next write of any live process drops it once it is
/// `TALLY_STALE_MS` old by Redis' clock, and live tallies stay.
#[tokio::test]
async fn a_write_drops_the_tallies_of_processes_gone() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let tally = |created| Tally {
        created,
        ..Tally::default()
    };
    assert_eq!(
        store
            .fleet()
            .publish_tally("gone", &tally(1))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .fleet()
            .publish_tally("alive", &tally(2))
            .await
            .unwrap(),
        0
    );
    // "gone" last wrote just over TALLY_STALE_MS ago; "alive" just under.
    let now: i64 = redis
        .cli(&[
            "EVAL",
            "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)",
            "0",
        ])
        .parse()
        .unwrap();
    let old = (now - TALLY_STALE_MS - 1_000).to_string();
    let recent = (now - TALLY_STALE_MS + 60_000).to_string();
    redis.cli(&["ZADD", TALLIES_AT_KEY, &old, "gone", &recent, "alive"]);

    assert_eq!(
        store
            .fleet()
            .publish_tally("writer", &tally(3))
            .await
            .unwrap(),
        1
    );
    let mut left: Vec<String> = store
        .fleet()
        .tallies()
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    left.sort();
    assert_eq!(left, ["alive", "writer"]);
    assert_eq!(redis.cli(&["ZCARD", TALLIES_AT_KEY]), "2");
    assert_eq!(redis.cli(&["HLEN", TALLIES_KEY]), "2");
}
