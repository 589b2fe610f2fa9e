//! Priorities against a real, private redis-server: a queue's `high` jobs are read before
//! every `normal` one already queued, `low` ones only once no other waits, whether the
//! read blocks or not; and a `high` job its worker left is taken over by the sweep.

mod common;

use std::time::Duration;

use common::{QUEUE, Redis, create_task_at, store};
use mcp_tasks_store::{OwnerLimits, Priority, Store};

/// A task at `priority` queued on [`QUEUE`]: its id.
async fn queued(store: &Store, priority: Priority) -> String {
    create_task_at(
        store,
        "own",
        Some(600_000),
        OwnerLimits::default(),
        priority,
    )
    .await
    .0
}

/// Read up to `count` jobs as consumer `w1` without blocking: their task ids.
async fn read(store: &Store, count: usize) -> Vec<String> {
    let mut reader = store.jobs().reader().await.unwrap();
    let got = reader
        .read(&[QUEUE.to_owned()], "w1", count, None)
        .await
        .unwrap();
    got.into_iter().map(|d| d.task_id).collect()
}

/// A `high` job queued behind 10,000 `normal` ones (and a `low` one) is the first read;
/// the `normal` ones follow in their order, and the `low` one comes last.
#[tokio::test(flavor = "multi_thread")]
async fn a_high_job_behind_ten_thousand_normal_ones_is_read_first() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let low = queued(&store, Priority::Low).await;
    let mut normal = Vec::with_capacity(10_000);
    for chunk in 0..100 {
        let batch = (0..100).map(|_| queued(&store, Priority::Normal));
        let ids = futures_util::future::join_all(batch).await;
        assert_eq!(ids.len(), 100, "chunk {chunk}");
        normal.extend(ids);
    }
    let high = queued(&store, Priority::High).await;

    assert_eq!(read(&store, 1).await, vec![high]);
    // The normal ones were created 100 at a time: compare as sets per read, and in all.
    let first = read(&store, 5_000).await;
    let second = read(&store, 5_000).await;
    assert_eq!(first.len() + second.len(), 10_000);
    let mut taken: Vec<String> = first.into_iter().chain(second).collect();
    taken.sort();
    normal.sort();
    assert_eq!(taken, normal, "every normal job, once, before the low one");
    assert_eq!(read(&store, 10).await, vec![low]);
    assert!(read(&store, 10).await.is_empty());
}

/// One read takes what it may from each priority in turn, never more than asked.
#[tokio::test]
async fn a_read_fills_from_high_down_and_never_takes_more_than_asked() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let low = queued(&store, Priority::Low).await;
    let normal = queued(&store, Priority::Normal).await;
    let high = queued(&store, Priority::High).await;
    assert_eq!(read(&store, 2).await, vec![high, normal]);
    assert_eq!(read(&store, 2).await, vec![low]);
}

/// A read blocked on an empty queue wakes for a `high` job (each priority has a stream of
/// its own, and the blocked read waits on all of them).
#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_read_wakes_for_a_high_job() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let mut reader = store.jobs().reader().await.unwrap();
    let waiting = tokio::spawn(async move {
        reader
            .read(&[QUEUE.to_owned()], "w1", 1, Some(Duration::from_secs(5)))
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let high = queued(&store, Priority::High).await;
    let got = tokio::time::timeout(Duration::from_secs(4), waiting)
        .await
        .expect("the blocked read woke")
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, high);
    assert!(got[0].stream.ends_with(":high"), "{}", got[0].stream);
}

/// A `high` job delivered to a worker that then stopped is claimed by the sweep of its
/// queue's streams, as a `normal` one is, and keeps its stream.
#[tokio::test]
async fn a_high_job_its_worker_left_is_swept() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let high = queued(&store, Priority::High).await;
    assert_eq!(read(&store, 1).await, vec![high.clone()]);
    let mut claimed = Vec::new();
    for stream in store.jobs().queue_streams(QUEUE) {
        let (found, _) = store
            .jobs()
            .reclaim(QUEUE, &stream, "w2", Duration::ZERO, "0-0", 10)
            .await
            .unwrap();
        claimed.extend(found);
    }
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0].task_id, high);
    assert_eq!(
        store.layout().priority_of_stream(&claimed[0].stream),
        Priority::High
    );
}
