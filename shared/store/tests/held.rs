//! The kill switch's held jobs (`hold.lua`, `unhold.lua`, `prune_held.lua`) against a
//! real, private redis-server: a job past its task's TTL is not held but ends the task
//! expired; a held job whose task is gone is queued again on restore (the start script
//! skips it) rather than dropped; held jobs of expired tasks are dropped by the prune.

mod common;

use std::time::Duration;

use common::{QUEUE, Redis, next_delivery, queued_task, store};
use mcp_tasks_store::strikes::Strikes;
use mcp_tasks_store::{Delivery, Store, keys};

/// A task with `ttl_ms` on the queue, delivered to a consumer: its delivery.
async fn delivered(store: &Store, ttl_ms: u64) -> Delivery {
    let id = queued_task(store, "own", ttl_ms).await;
    let d = next_delivery(store).await;
    assert_eq!(d.task_id, id);
    d
}

fn held_key() -> String {
    keys::held_key(&keys::queue_key(QUEUE))
}

fn ends_key() -> String {
    keys::held_ends_key(&keys::queue_key(QUEUE))
}

/// A job read after its task's TTL ended is not held: the task ends expired (as the start
/// script would end it) and the entry leaves the stream.
#[tokio::test]
async fn a_job_past_its_ttl_is_not_held_but_expires() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let d = delivered(&store, 200).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!store.controls().hold(&d, "held: test").await.unwrap());
    let task = store
        .tasks()
        .get(&d.task_id, &d.owner)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        task.status,
        Some(mcp_tasks_protocol::tasks::TaskStatus::Failed),
        "{task:?}"
    );
    assert_eq!(redis.cli(&["HLEN", &held_key()]), "0");
    assert_eq!(redis.cli(&["ZCARD", &ends_key()]), "0");
    assert_eq!(redis.cli(&["XLEN", &keys::queue_key(QUEUE)]), "0");
}

/// Restore of a held job whose task hash is gone queues it again (a key built wrongly
/// must never drop a job that still has a task); its end leaves the zset with it.
#[tokio::test]
async fn restore_queues_a_held_job_whose_task_is_gone() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let d = delivered(&store, 600_000).await;
    assert!(store.controls().hold(&d, "held: test").await.unwrap());
    assert_eq!(redis.cli(&["HLEN", &held_key()]), "1");
    assert_eq!(redis.cli(&["ZCARD", &ends_key()]), "1");
    assert_eq!(redis.cli(&["XLEN", &keys::queue_key(QUEUE)]), "0");
    redis.cli(&["DEL", &store.task_key(&d.task_id, &d.owner)]);

    let released = store
        .controls()
        .release_held(&[QUEUE.to_owned()], &Strikes::default())
        .await
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!(redis.cli(&["HLEN", &held_key()]), "0");
    assert_eq!(redis.cli(&["ZCARD", &ends_key()]), "0");
    let entry = redis.cli(&["XRANGE", &keys::queue_key(QUEUE), "-", "+"]);
    assert!(entry.contains(&d.task_id), "queued again: {entry}");
}

/// Held jobs stay held until their task's TTL ends; then the prune drops them (one script
/// call per stream), and the ones still alive stay.
#[tokio::test]
async fn held_jobs_of_expired_tasks_are_pruned() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let short = delivered(&store, 700).await;
    let long = delivered(&store, 600_000).await;
    assert!(store.controls().hold(&short, "held: test").await.unwrap());
    assert!(store.controls().hold(&long, "held: test").await.unwrap());
    assert_eq!(store.controls().held_count(QUEUE).await.unwrap(), 2);
    assert_eq!(
        store.controls().prune_held(QUEUE).await.unwrap(),
        0,
        "nothing past yet"
    );
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(store.controls().prune_held(QUEUE).await.unwrap(), 1);
    assert_eq!(store.controls().held_count(QUEUE).await.unwrap(), 1);
    let left = store.controls().held(QUEUE).await.unwrap();
    assert_eq!(left[0].task_id, long.task_id);
    assert_eq!(redis.cli(&["ZCARD", &ends_key()]), "1");
}
