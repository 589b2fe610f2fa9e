//! Concurrency slots (`acquire.lua`, `renew_slots`) against a real, private redis-server:
//! a slot is a lease. One whose holder stops renewing it (a worker SIGKILLed) is free
//! again once the lease lapses, with nothing else giving it back; a renewed one is not.

mod common;

use std::time::Duration;

use common::Redis;
use mcp_tasks_store::Store;
use mcp_tasks_store::limits::Slot;

const LEASE: Duration = Duration::from_millis(600);

#[tokio::test]
async fn a_slot_not_renewed_lapses_with_its_lease_and_goes_to_the_next_in_line() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let limit = "gpu";
    let ask = |task: &'static str, arrival: i64| {
        let store = store.clone();
        async move {
            store
                .limits()
                .acquire_slot(limit, 1, task, arrival, LEASE)
                .await
                .unwrap()
        }
    };
    assert_eq!(ask("a", 1).await, Slot::Taken { running: 1 });
    assert_eq!(ask("b", 2).await, Slot::Wait { running: 1 });

    // Renewed, the holder keeps its slot past the first lease.
    tokio::time::sleep(LEASE / 2).await;
    store
        .limits()
        .renew_slots(&[(limit.to_owned(), "a".to_owned())], LEASE)
        .await
        .unwrap();
    tokio::time::sleep(LEASE / 2 + Duration::from_millis(100)).await;
    assert_eq!(ask("b", 2).await, Slot::Wait { running: 1 }, "renewed");

    // Not renewed (its worker died): free once the lease lapses, and b takes it.
    tokio::time::sleep(LEASE).await;
    assert_eq!(ask("b", 2).await, Slot::Taken { running: 1 });
    // The lapsed holder asking again queues behind: b holds the one slot.
    assert_eq!(ask("a", 1).await, Slot::Wait { running: 1 });
}
