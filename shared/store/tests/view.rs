//! `tasks/get`'s read (`Tasks::view`, one `HMGET` of the fields a `DetailedTask`
//! shows) against a real, private redis-server: at every step of a task's life it renders
//! exactly what the whole hash renders (T-20), reads a task waiting for input whole (its
//! input requests, T-27), and finds nothing where there is nothing or the owner differs.

mod common;

use common::{Redis, next_delivery, queued_task, store};
use mcp_tasks_protocol::tasks::TaskStatus;
use mcp_tasks_store::{Ask, Finish, Start, Store, Write, new_task_id};
use serde_json::json;

const OWNER: &str = "own";

/// The task as `tasks/get` renders it from the view and from the whole hash, at one instant.
async fn both(store: &Store, id: &str) -> (String, String) {
    let now = mcp_tasks_protocol::time::now_millis();
    let render = |rec: Option<mcp_tasks_store::TaskRecord>| {
        let rec = rec.expect("the task exists");
        serde_json::to_string(&rec.to_detailed_at(now)).unwrap()
    };
    let view = store.tasks().view(id, OWNER).await.unwrap();
    let whole = store.tasks().get(id, OWNER).await.unwrap();
    (render(view), render(whole))
}

/// A new task of [`OWNER`] with `ttl_ms`, queued: its id.
async fn create(store: &Store, ttl_ms: u64) -> String {
    queued_task(store, OWNER, ttl_ms).await
}

#[tokio::test]
async fn the_view_renders_what_the_whole_hash_renders() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let id = create(&store, 60_000).await;

    // Working: the view leaves out what no DetailedTask shows (tool, queue entry, fence).
    let (view, whole) = both(&store, &id).await;
    assert_eq!(view, whole);
    let rec = store.tasks().view(&id, OWNER).await.unwrap().unwrap();
    assert_eq!(rec.status, Some(TaskStatus::Working));
    assert_eq!(rec.owner, OWNER);
    assert!(rec.tool.is_empty(), "the view read the tool: {rec:?}");

    // Waiting for input: read whole, so the input requests are there.
    let d = next_delivery(&store).await;
    let Start::Run { fence, .. } = store.jobs().start(&d, "w1", 5).await.unwrap() else {
        panic!("the job did not start");
    };
    let request = json!({"method": "elicitation/create", "params": {"message": "Ship it?"}});
    let asked = store
        .jobs()
        .ask(&id, OWNER, fence, &[("ship".into(), request.to_string())])
        .await
        .unwrap();
    assert!(matches!(asked, Ask::Waiting), "{asked:?}");
    let (view, whole) = both(&store, &id).await;
    assert_eq!(view, whole);
    assert!(view.contains("Ship it?"), "no input request in {view}");

    // Completed, with a result and the fields a finish leaves behind.
    let result =
        json!({"resultType": "complete", "content": [{"type": "text", "text": "shipped"}]});
    let wrote = store
        .jobs()
        .finish(&d, fence, &Finish::Completed(result.to_string()))
        .await
        .unwrap();
    assert!(matches!(wrote, Write::Ok), "{wrote:?}");
    let (view, whole) = both(&store, &id).await;
    assert_eq!(view, whole);
    assert!(view.contains("shipped"), "no result in {view}");

    // Another owner's key, and an id never issued: nothing.
    assert!(
        store
            .tasks()
            .view(&id, "someone-else")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .tasks()
            .view(&new_task_id(), OWNER)
            .await
            .unwrap()
            .is_none()
    );
}

/// Failed with an error object and a status message; and past its TTL unfinished, which
/// readers render as failed from `created`, `ttl` and `updated` alone (T-52).
#[tokio::test]
async fn the_view_renders_failures_and_expiry_as_the_whole_hash_does() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let failed = create(&store, 60_000).await;
    let expiring = create(&store, 300).await;
    let d = next_delivery(&store).await;
    assert_eq!(d.task_id, failed);
    let error = json!({"code": -32603, "message": "the build broke"});
    let wrote = store
        .jobs()
        .finish(
            &d,
            0,
            &Finish::Failed {
                error: error.to_string(),
                message: "step 3 of 5 failed".into(),
            },
        )
        .await
        .unwrap();
    assert!(matches!(wrote, Write::Ok), "{wrote:?}");
    let (view, whole) = both(&store, &failed).await;
    assert_eq!(view, whole);
    assert!(
        view.contains("the build broke") && view.contains("step 3 of 5 failed"),
        "{view}"
    );

    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let (view, whole) = both(&store, &expiring).await;
    assert_eq!(view, whole);
    assert!(view.contains("Task expired before completion"), "{view}");
}
