//! Keyed creates (issue 38): however many arrive at once, one task hash and one job; a
//! retry of another call under the same key is refused; another owner's key is its own.

mod common;

use common::{QUEUE, Redis, store};
use mcp_tasks_store::idempotency::call_digest;
use mcp_tasks_store::{Created, Differs, NewTask, OwnerLimits, Store, keys};
use serde_json::{Value, json};

/// A keyed create of `tool` with `args` by `owner` under `key`: its id and the answer.
async fn keyed(
    store: &Store,
    owner: &str,
    key: &str,
    tool: &str,
    args: Value,
    limits: OwnerLimits,
) -> (String, Created) {
    let id = store.layout().keyed_task_id(owner, key);
    let digest = call_digest(&args);
    let job = common::job(owner, tool, args);
    let created = store
        .tasks()
        .create(&NewTask {
            id: &id,
            ttl_ms: Some(60_000),
            poll_ms: 500,
            owner,
            limits,
            queue: QUEUE,
            priority: mcp_tasks_store::Priority::Normal,
            job: &job,
            keyed: Some(&digest),
        })
        .await
        .unwrap();
    (id, created)
}

#[tokio::test]
async fn twenty_concurrent_keyed_creates_make_one_task_and_one_job() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let limits = OwnerLimits {
        per_minute: 1000,
        active: 100,
    };
    let creates = (0..20).map(|i| {
        let store = store.clone();
        // Member order differs between retries; the call is the same.
        let args = if i % 2 == 0 {
            json!({"repo": "web", "tag": "v1"})
        } else {
            json!({"tag": "v1", "repo": "web"})
        };
        async move { keyed(&store, "alice", "push-1", "deploy", args, limits).await }
    });
    let answers = futures_util::future::join_all(creates).await;
    let ids: std::collections::BTreeSet<&str> = answers.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let made = answers
        .iter()
        .filter(|(_, c)| matches!(c, Created::At(_)))
        .count();
    let found = answers
        .iter()
        .filter(|(_, c)| *c == Created::Existing)
        .count();
    assert_eq!((made, found), (1, 19), "{answers:?}");
    assert_eq!(redis.cli(&["XLEN", &keys::queue_key(QUEUE)]), "1");
    // Only the one made counted against the owner's unfinished tasks.
    assert_eq!(redis.cli(&["ZCARD", &keys::active_key("alice")]), "1");
    let id = answers[0].0.as_str();
    let rec = store
        .tasks()
        .get(id, "alice")
        .await
        .unwrap()
        .expect("the task");
    assert_eq!(rec.tool, "deploy");
}

#[tokio::test]
async fn another_call_under_the_same_key_is_refused_and_another_owner_is_apart() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let none = OwnerLimits::default();
    let (id, first) = keyed(&store, "alice", "k", "deploy", json!({"repo": "web"}), none).await;
    assert!(matches!(first, Created::At(_)), "{first:?}");
    let (_, other_args) = keyed(&store, "alice", "k", "deploy", json!({"repo": "api"}), none).await;
    assert_eq!(other_args, Created::Conflict(Differs::Arguments));
    let (_, other_tool) = keyed(&store, "alice", "k", "build", json!({"repo": "web"}), none).await;
    assert_eq!(other_tool, Created::Conflict(Differs::Tool));
    assert_eq!(redis.cli(&["XLEN", &keys::queue_key(QUEUE)]), "1");
    let (bob_id, bob) = keyed(&store, "bob", "k", "deploy", json!({"repo": "web"}), none).await;
    assert!(matches!(bob, Created::At(_)), "{bob:?}");
    assert_ne!(bob_id, id);
    assert!(store.tasks().get(&id, "bob").await.unwrap().is_none());
    assert_eq!(redis.cli(&["XLEN", &keys::queue_key(QUEUE)]), "2");
}
