//! The event hub against a real, private redis-server.

use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_tasks_store::Store;
use mcp_tasks_store::events::{EventHub, TaskEvent};
use tokio_util::sync::CancellationToken;

mod common;

use common::Redis;

/// A watcher that reads nothing while more events arrive than it can buffer is told to
/// re-read, even though no event follows the last one (T-50: the terminal state is never
/// lost to a slow reader).
#[tokio::test]
async fn a_watcher_that_falls_behind_is_told_to_resync() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let stop = CancellationToken::new();
    let hub = EventHub::start(&store, stop.clone());
    let mut watch = hub.watch("tsk_lag").await.unwrap();
    // Messages arrive on one connection in order: once this one's event is here, every
    // earlier one was dispatched, so reading starts only after the buffer overflowed.
    let mut sentinel = hub.watch("tsk_sentinel").await.unwrap();
    let channel = "mcpt:events:{tsk_lag}";
    redis.flood(channel, 200);
    redis.publish(channel, r#"["status","completed","ver","201"]"#);
    redis.barrier(&mut sentinel).await;
    // Everything was dispatched before we read anything.
    let mut saw_resync = false;
    let mut last_version = 0;
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(2), watch.recv()).await {
        match ev {
            TaskEvent::Resync => saw_resync = true,
            TaskEvent::Changed(rec) => last_version = last_version.max(rec.version),
        }
    }
    assert!(
        saw_resync,
        "a watcher that overflowed was never told to resync"
    );
    assert!(
        last_version < 201,
        "the buffer held everything; the test did not overflow it"
    );
    stop.cancel();
}

/// Events published after `watch()` returned are delivered, in order.
#[tokio::test]
async fn events_after_watch_arrive_in_order() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let stop = CancellationToken::new();
    let hub = EventHub::start(&store, stop.clone());
    let mut watch = hub.watch("tsk_a").await.unwrap();
    for v in 1..=5 {
        redis.publish(
            "mcpt:events:{tsk_a}",
            &format!(r#"["status","working","ver","{v}"]"#),
        );
    }
    for v in 1..=5 {
        match tokio::time::timeout(Duration::from_secs(5), watch.recv()).await {
            Ok(Some(TaskEvent::Changed(rec))) => assert_eq!(rec.version, v),
            other => panic!("expected version {v}, got {other:?}"),
        }
    }
    stop.cancel();
}

impl Redis {
    fn channels(&self) -> usize {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "PUBSUB", "CHANNELS", "*"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
    }
}

/// A watch whose caller goes away before it is confirmed (a run that ends first, a client
/// that leaves) leaves no subscription behind; neither does a dropped watch, while a kept
/// one stays subscribed.
#[tokio::test]
async fn abandoned_and_dropped_watches_leave_no_subscription() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let stop = CancellationToken::new();
    let hub = EventHub::start(&store, stop.clone());
    let kept = hub.watch("tsk_kept").await.unwrap();
    for i in 0..200 {
        let id = format!("tsk_abandoned_{i}");
        // Polled once (the command is sent), then dropped before the confirmation.
        let mut watch = std::pin::pin!(hub.watch(&id));
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(watch.as_mut(), cx).is_ready())
        })
        .await;
        assert!(!first, "confirmed without waiting for redis");
    }
    for i in 0..50 {
        drop(hub.watch(&format!("tsk_dropped_{i}")).await.unwrap());
    }
    redis.wait_channels(1).await;
    drop(kept);
    stop.cancel();
}

impl Redis {
    /// PUBLISH `count` working events (versions 1..=count) on `channel`, in one pipe.
    fn flood(&self, channel: &str, count: u64) {
        let mut pipe = String::new();
        for v in 1..=count {
            pipe.push_str(&format!(
                "PUBLISH {channel} '[\"status\",\"working\",\"ver\",\"{v}\"]'\n"
            ));
        }
        let mut cli = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::io::Write::write_all(cli.stdin.as_mut().unwrap(), pipe.as_bytes()).unwrap();
        drop(cli.stdin.take());
        assert!(cli.wait().unwrap().success());
    }

    /// Publish on `tsk_sentinel` and wait for it on `sentinel`: messages arrive on one
    /// connection in order, so everything published before was dispatched by then.
    async fn barrier(&self, sentinel: &mut mcp_tasks_store::events::Watch) {
        self.publish(
            "mcpt:events:{tsk_sentinel}",
            r#"["status","working","ver","1"]"#,
        );
        tokio::time::timeout(Duration::from_secs(5), sentinel.recv())
            .await
            .expect("the sentinel event arrives");
    }

    async fn wait_channels(&self, want: usize) {
        let mut left = usize::MAX;
        for _ in 0..200 {
            left = self.channels();
            if left == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(left, want, "subscribed channels");
    }
}

/// One watch over many tasks (a listen stream naming hundreds): each event names its
/// task; when the shared buffer overflows, the task that lost events is the one told to
/// resync, not its neighbours; a task taken out, then the whole watch dropped, leave no
/// subscription.
#[tokio::test]
async fn one_watch_carries_many_tasks() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let stop = CancellationToken::new();
    let hub = EventHub::start(&store, stop.clone());
    let ids: Vec<String> = ["tsk_m1", "tsk_m2", "tsk_m3"].map(String::from).into();
    let mut watches = hub.watch_all(&ids).await.unwrap();
    assert_eq!(redis.channels(), 3);
    redis.publish("mcpt:events:{tsk_m2}", r#"["status","working","ver","1"]"#);
    redis.publish("mcpt:events:{tsk_m1}", r#"["status","working","ver","1"]"#);
    for want in ["tsk_m2", "tsk_m1"] {
        match tokio::time::timeout(Duration::from_secs(5), watches.recv()).await {
            Ok(Some((task, TaskEvent::Changed(rec)))) => {
                assert_eq!(&*task, want);
                assert_eq!(rec.id, want);
            }
            other => panic!("expected an event of {want}, got {other:?}"),
        }
    }
    watches.remove("tsk_m3");
    redis.wait_channels(2).await;

    // Overflow the shared buffer with m1's events only; the sentinel's event comes after
    // every one of them was dispatched.
    let mut sentinel = hub.watch("tsk_sentinel").await.unwrap();
    redis.flood("mcpt:events:{tsk_m1}", 400);
    redis.barrier(&mut sentinel).await;
    let mut resynced = Vec::new();
    let mut changed = 0;
    while let Ok(Some((task, ev))) =
        tokio::time::timeout(Duration::from_millis(500), watches.recv()).await
    {
        match ev {
            TaskEvent::Resync => resynced.push(task.to_string()),
            TaskEvent::Changed(_) => changed += 1,
        }
    }
    assert_eq!(resynced, ["tsk_m1"], "only the flooded task re-reads");
    assert!(
        changed < 400,
        "the buffer held everything; nothing overflowed"
    );
    drop(watches);
    redis.wait_channels(1).await;
    drop(sentinel);
    stop.cancel();
}

/// Finish the next queued job (it must be task `id`) with a result.
async fn finish_next(store: &Store, id: &str) {
    use mcp_tasks_store::{Finish, Start};
    let d = common::next_delivery(store).await;
    assert_eq!(d.task_id, id);
    let Start::Run { fence, .. } = store.jobs().start(&d, "w1", 5).await.unwrap() else {
        panic!("the job did not start");
    };
    // With replicas to wait for and none here, the write is made and reported unreplicated.
    let _ = store
        .jobs()
        .finish(&d, fence, &Finish::Completed(r#"{"content":[]}"#.into()))
        .await;
}

impl Redis {
    /// `PUBLISH` calls so far, scripts' included.
    fn publishes(&self) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_publish:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }
}

/// On one Redis a change is published only on a channel someone subscribed to: an
/// unwatched task's finish publishes nothing (no encoding of the task for no one), a
/// watched one's reaches its watcher with the terminal state. With replicas to wait for
/// (Redis can then fail over, and a subscription outlive the switch on a replica) every
/// change is published.
#[tokio::test]
async fn changes_are_published_only_to_watched_tasks() {
    use mcp_tasks_protocol::tasks::TaskStatus;
    let redis = Redis::start();
    let store = common::store(&redis).await;
    let stop = CancellationToken::new();
    let hub = EventHub::start(&store, stop.clone());
    let unwatched = common::queued_task(&store, "o1", 60_000).await;
    let watched = common::queued_task(&store, "o1", 60_000).await;
    let mut watch = hub.watch(&watched).await.unwrap();
    finish_next(&store, &unwatched).await;
    finish_next(&store, &watched).await;
    // Starting is not observable: the watched task's finish is the one publish.
    assert_eq!(redis.publishes(), 1);
    match tokio::time::timeout(Duration::from_secs(5), watch.recv()).await {
        Ok(Some(TaskEvent::Changed(rec))) => {
            assert_eq!(rec.id, watched);
            assert_eq!(rec.status, Some(TaskStatus::Completed));
        }
        other => panic!("expected the watched task's completion, got {other:?}"),
    }

    // The task is created without waiting (the create would be refused as unreplicated).
    let alone = common::queued_task(&store, "o1", 60_000).await;
    let waiting = store
        .with_replication(mcp_tasks_store::Replication {
            replicas: 1,
            timeout: Duration::from_millis(10),
        })
        .unwrap();
    finish_next(&waiting, &alone).await;
    assert_eq!(
        redis.publishes(),
        2,
        "an unwatched change with WAIT replicas"
    );
    stop.cancel();
}
