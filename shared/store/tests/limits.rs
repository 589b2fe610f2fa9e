//! An owner's limits as the create script keeps them: what a refusal counts, and how long
//! the owner's set of unfinished tasks lives.

mod common;

use common::{Redis, store};
use mcp_tasks_store::{Created, Limit, OwnerLimits, Store, keys};

const OWNER: &str = "alice";

async fn create(store: &Store, ttl_ms: Option<u64>, limits: OwnerLimits) -> Created {
    common::create_task(store, OWNER, ttl_ms, limits).await.1
}

/// Wait out this minute when less than 2 s of it are left: the rate counts per minute (of
/// the store's clock, this machine's), and a test's creates must all fall in one.
async fn well_inside_a_minute() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let into = (now % 60_000) as u64;
    if into > 58_000 {
        tokio::time::sleep(std::time::Duration::from_millis(60_050 - into)).await;
    }
}

/// The owner's creations counted this minute (its one rate key).
fn rate_count(redis: &Redis) -> String {
    let keys = redis.cli(&["KEYS", "mcpt:rate:*"]);
    let mut total = 0;
    for key in keys.lines().filter(|k| !k.is_empty()) {
        total += redis.cli(&["GET", key]).parse::<u64>().unwrap();
    }
    total.to_string()
}

fn active_pttl(redis: &Redis) -> i64 {
    redis
        .cli(&["PTTL", &keys::active_key(OWNER)])
        .parse()
        .unwrap()
}

/// Refused attempts are not counted: not against the rate (whichever limit refuses), not
/// among the unfinished.
#[tokio::test]
async fn refusals_count_nothing() {
    let redis = Redis::start();
    let store = store(&redis).await;
    well_inside_a_minute().await;
    let limits = OwnerLimits {
        per_minute: 3,
        active: 2,
    };
    for _ in 0..2 {
        assert!(matches!(
            create(&store, Some(60_000), limits).await,
            Created::At(_)
        ));
    }
    // At the unfinished limit: refused, and the rate still reads 2.
    assert_eq!(
        create(&store, Some(60_000), limits).await,
        Created::Limited(Limit::Active)
    );
    assert_eq!(rate_count(&redis), "2");
    assert_eq!(
        redis.cli(&["ZCARD", &keys::active_key(OWNER)]),
        "2",
        "a refused task is not held"
    );
    // Room again (a held task whose TTL ended leaves the set at the limit): the third
    // counts...
    let held = redis.cli(&["ZRANGE", &keys::active_key(OWNER), "0", "0"]);
    redis.cli(&["ZADD", &keys::active_key(OWNER), "XX", "1", &held]);
    assert!(matches!(
        create(&store, Some(60_000), limits).await,
        Created::At(_)
    ));
    assert_eq!(rate_count(&redis), "3");
    // ...and the fourth is over both limits: the rate is the one reported, and nothing
    // counts.
    assert_eq!(redis.cli(&["ZCARD", &keys::active_key(OWNER)]), "2");
    assert_eq!(
        create(&store, Some(60_000), limits).await,
        Created::Limited(Limit::PerMinute)
    );
    assert_eq!(rate_count(&redis), "3");
    // Over the rate alone: the same.
    redis.cli(&["ZREMRANGEBYRANK", &keys::active_key(OWNER), "0", "-1"]);
    assert_eq!(
        create(&store, Some(60_000), limits).await,
        Created::Limited(Limit::PerMinute)
    );
    assert_eq!(rate_count(&redis), "3");
    assert_eq!(redis.cli(&["ZCARD", &keys::active_key(OWNER)]), "0");
}

/// The owner's set of unfinished tasks expires with its longest-lived task, and never while
/// it holds one without a TTL; a set that kept no expiry (one made before sets expired, or
/// one whose task without a TTL left) takes its longest-lived member's at the next create.
#[tokio::test]
async fn the_unfinished_set_lives_as_long_as_its_longest_task() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let limits = OwnerLimits {
        per_minute: 100,
        active: 100,
    };
    let within = |pttl: i64, ms: i64| pttl > ms - 10_000 && pttl <= ms;

    assert!(matches!(
        create(&store, Some(60_000), limits).await,
        Created::At(_)
    ));
    let first = active_pttl(&redis);
    assert!(within(first, 60_000), "a new set: PTTL {first}");
    create(&store, Some(120_000), limits).await;
    let longer = active_pttl(&redis);
    assert!(within(longer, 120_000), "a longer task: PTTL {longer}");
    create(&store, Some(30_000), limits).await;
    let kept = active_pttl(&redis);
    assert!(
        within(kept, 120_000),
        "a shorter task keeps it: PTTL {kept}"
    );

    // No expiry kept: the next create gives it the longest-lived member's.
    redis.cli(&["PERSIST", &keys::active_key(OWNER)]);
    create(&store, Some(10_000), limits).await;
    let mended = active_pttl(&redis);
    assert!(
        within(mended, 120_000),
        "a set without expiry: PTTL {mended}"
    );

    // A task without a TTL: the set never expires while it is held.
    create(&store, None, limits).await;
    assert_eq!(active_pttl(&redis), -1);
    create(&store, Some(10_000), limits).await;
    assert_eq!(active_pttl(&redis), -1, "still held: no expiry");
    // Once it has left (pruned), the next create gives the set an expiry again.
    redis.cli(&["ZREMRANGEBYSCORE", &keys::active_key(OWNER), "+inf", "+inf"]);
    create(&store, Some(10_000), limits).await;
    let after = active_pttl(&redis);
    assert!(within(after, 120_000), "its task left: PTTL {after}");
}
