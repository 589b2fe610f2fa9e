//! Dead letters (issue 38): a task that fails for good is kept, with its job, by the finish
//! script; the letters are bounded in time and count; a redrive makes one new task of the
//! same call, linked both ways.

mod common;

use std::time::Duration;

use common::{QUEUE, Redis, next_delivery, queued_task, store};
use mcp_tasks_store::dead::Keep;
use mcp_tasks_store::{Delivery, Finish, Start, Store, Write};

const OWNER: &str = "alice";

/// A week, at most `max`, failing with `reason`.
fn keep(max: u32, reason: &str) -> Keep {
    Keep {
        for_ms: 7 * 24 * 3600 * 1000,
        max,
        reason: reason.to_owned(),
    }
}

fn failure(message: &str) -> Finish {
    Finish::Failed {
        error: format!(r#"{{"code":-32603,"message":"{message}"}}"#),
        message: message.to_owned(),
    }
}

/// A queued task of [`OWNER`], delivered and started: the delivery and its fence.
async fn running(store: &Store) -> (Delivery, u64) {
    queued_task(store, OWNER, 600_000).await;
    let d = next_delivery(store).await;
    let Start::Run { fence, .. } = store.jobs().start(&d, "w1", 5).await.unwrap() else {
        panic!("the task should start");
    };
    (d, fence)
}

async fn letters(store: &Store) -> Vec<mcp_tasks_store::dead::DeadLetter> {
    store.dead().list(&[QUEUE.to_owned()]).await.unwrap()
}

#[tokio::test]
async fn a_failure_kept_as_a_letter_holds_its_job_and_why() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let (d, fence) = running(&store).await;
    let written = store
        .jobs()
        .finish_keeping(
            &d,
            fence,
            &failure("disk full"),
            Some(&keep(10, "disk full")),
        )
        .await
        .unwrap();
    assert!(matches!(written, Write::Ok), "{written:?}");
    let listed = letters(&store).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let letter = &listed[0];
    assert_eq!(letter.task_id, d.task_id);
    assert_eq!(
        (letter.tool.as_str(), letter.owner.as_str()),
        ("deploy", OWNER)
    );
    assert_eq!(
        (letter.outcome.as_str(), letter.reason.as_str()),
        ("failed", "disk full")
    );
    assert_eq!(letter.attempts, 1);
    let job = letter.job.as_ref().expect("the job is kept");
    assert_eq!(job.args, serde_json::json!({"repo": "web"}));
    assert!(letter.redriven.is_none());
}

#[tokio::test]
async fn a_finish_without_keep_or_a_cancel_that_wins_leaves_no_letter() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let (plain, fence) = running(&store).await;
    store
        .jobs()
        .finish(&plain, fence, &failure("no"))
        .await
        .unwrap();
    let (cancelled, fence) = running(&store).await;
    assert!(
        store
            .tasks()
            .cancel(&cancelled.task_id, OWNER)
            .await
            .unwrap()
    );
    // The cancel was acknowledged first: it wins over the failure, and nothing is kept.
    store
        .jobs()
        .finish_keeping(&cancelled, fence, &failure("late"), Some(&keep(10, "late")))
        .await
        .unwrap();
    assert!(letters(&store).await.is_empty());
}

#[tokio::test]
async fn letters_are_bounded_in_count_and_time() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (d, fence) = running(&store).await;
        let why = format!("failure {i}");
        store
            .jobs()
            .finish_keeping(&d, fence, &failure(&why), Some(&keep(2, &why)))
            .await
            .unwrap();
        ids.push(d.task_id);
    }
    let kept: Vec<String> = letters(&store)
        .await
        .into_iter()
        .map(|l| l.task_id)
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(!kept.contains(&ids[0]), "the oldest leaves first: {kept:?}");

    let (d, fence) = running(&store).await;
    let brief = Keep {
        for_ms: 1,
        ..keep(10, "brief")
    };
    store
        .jobs()
        .finish_keeping(&d, fence, &failure("brief"), Some(&brief))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let kept: Vec<String> = letters(&store)
        .await
        .into_iter()
        .map(|l| l.task_id)
        .collect();
    assert!(
        !kept.contains(&d.task_id),
        "a lapsed letter is not listed: {kept:?}"
    );
}

#[tokio::test]
async fn a_redrive_makes_one_new_task_of_the_same_call_linked_both_ways() {
    let redis = Redis::start();
    let store = store(&redis).await;
    let (d, fence) = running(&store).await;
    store
        .jobs()
        .finish_keeping(&d, fence, &failure("flaky"), Some(&keep(10, "flaky")))
        .await
        .unwrap();
    let queues = [QUEUE.to_owned()];
    let letter = store
        .dead()
        .find(&queues, &d.task_id)
        .await
        .unwrap()
        .expect("the letter is found by its task id");

    let made = store
        .dead()
        .redrive(&letter, QUEUE, Some(600_000), 250)
        .await
        .unwrap();
    assert!(!made.again);
    assert_ne!(made.task_id, d.task_id, "a new task");
    let again = store
        .dead()
        .redrive(&letter, QUEUE, Some(600_000), 250)
        .await
        .unwrap();
    assert!(again.again, "a second redrive answers the first's task");
    assert_eq!(again.task_id, made.task_id);

    let new = store
        .tasks()
        .get(&made.task_id, OWNER)
        .await
        .unwrap()
        .expect("the new task belongs to the old one's owner");
    assert_eq!(new.tool, "deploy");
    assert_eq!(new.related, vec![d.task_id.clone()]);
    assert_eq!(new.to_detailed().related_task_ids, vec![d.task_id.clone()]);
    let old = store.tasks().get(&d.task_id, OWNER).await.unwrap().unwrap();
    assert_eq!(old.related, vec![made.task_id.clone()]);

    let rerun = next_delivery(&store).await;
    assert_eq!(rerun.task_id, made.task_id, "one job queued, the redrive's");
    assert_eq!(
        rerun.job.as_ref().unwrap().args,
        serde_json::json!({"repo": "web"})
    );
    let marked = store
        .dead()
        .find(&queues, &d.task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(marked.redriven.as_deref(), Some(made.task_id.as_str()));
}
