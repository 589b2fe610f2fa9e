//! Forwarded requests (`forward/`): a gateway's request reaches a worker's reader and its
//! answer comes back through the gateway's one reply list; the refusals and timeouts tell
//! apart what happened. Against a real, private redis-server.

mod common;

use std::process::Command;
use std::time::Duration;

use common::Redis;
use mcp_tasks_store::Store;
use mcp_tasks_store::forward::{ForwardLimits, ForwardReply, Forwarded, Outcome};
use serde_json::json;

fn limits(wait_ms: u64, max_in_flight: usize) -> ForwardLimits {
    ForwardLimits {
        wait: Duration::from_millis(wait_ms),
        max_in_flight,
    }
}

/// Many requests at once share the one reply list and each gets its own answer; an answer
/// left on a reply list expires within a minute.
#[tokio::test(flavor = "multi_thread")]
async fn answers_come_back_to_their_request_through_one_reply_list() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let forwarder = store.forwarder(limits(10_000, 64));
    let worker = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut reader = store.forward_reader("up");
            let mut answered = 0;
            while answered < 20 {
                let Some(request) = reader.next(Duration::from_secs(2)).await.unwrap() else {
                    continue;
                };
                let echo = request.params.clone();
                store
                    .answer_forwarded(&request, ForwardReply::Result(echo))
                    .await
                    .unwrap();
                answered += 1;
            }
        })
    };
    let asks = (0..20).map(|i| {
        let forwarder = &forwarder;
        async move {
            let outcome = forwarder
                .forward("up", "prompts/get", json!({ "n": i }))
                .await
                .unwrap();
            match outcome {
                Outcome::Answered(ForwardReply::Result(v)) => assert_eq!(v, json!({ "n": i })),
                other => panic!("request {i}: {other:?}"),
            }
        }
    });
    futures_util::future::join_all(asks).await;
    worker.await.unwrap();

    // An answer nobody pops (its gateway is gone) does not stay.
    let gone = Forwarded {
        id: "x".into(),
        reply_to: mcp_tasks_store::keys::forwarded_key("gone"),
        method: "prompts/list".into(),
        params: json!({}),
        deadline_ms: i64::MAX,
    };
    store
        .answer_forwarded(&gone, ForwardReply::Result(json!({})))
        .await
        .unwrap();
    let ttl: i64 = redis.cli(&["PTTL", &gone.reply_to]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "PTTL {ttl}");
}

/// With no worker, a request times out as not taken and is taken back from the list; one
/// a worker popped but never answered times out as unanswered; past the in-flight bound a
/// request is refused at once.
#[tokio::test(flavor = "multi_thread")]
async fn timeouts_say_whether_a_worker_took_the_request_and_the_bound_refuses() {
    let redis = Redis::start();
    let store = Store::connect(&redis.url()).await.unwrap();
    let key = mcp_tasks_store::keys::forward_key("up");

    let forwarder = store.forwarder(limits(300, 1));
    let outcome = forwarder.forward("up", "prompts/list", json!({})).await;
    assert!(matches!(outcome, Ok(Outcome::NotTaken)), "{outcome:?}");
    assert_eq!(redis.cli(&["LLEN", &key]), "0", "taken back");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let popper = {
        let (store, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reader = store.forward_reader("up");
            // Popped (then skipped: less than a second left) and never answered.
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = reader.next(Duration::from_millis(100)).await;
            }
        })
    };
    let outcome = forwarder.forward("up", "prompts/list", json!({})).await;
    assert!(matches!(outcome, Ok(Outcome::Unanswered)), "{outcome:?}");
    // Stopped, not aborted: an aborted task's BLPOP would stay blocked on the server and
    // pop the next request.
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    popper.await.unwrap();

    let slow = store.forwarder(limits(5_000, 1));
    let first = tokio::spawn({
        let key = key.clone();
        let port = redis.port;
        async move {
            let f = slow;
            let waiting = f.forward("up", "prompts/list", json!({}));
            tokio::pin!(waiting);
            // Once its request is queued it holds the one permit: ask again meanwhile.
            loop {
                tokio::select! {
                    o = &mut waiting => panic!("answered before the second request: {o:?}"),
                    // Polling Redis for the queued request, not sequencing by time.
                    () = tokio::time::sleep(Duration::from_millis(10)) => {}
                }
                let len = Command::new("redis-cli")
                    .args(["-p", &port.to_string(), "LLEN", &key])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&len.stdout).trim() == "1" {
                    break;
                }
            }
            let second = f.forward("up", "prompts/list", json!({})).await;
            assert!(matches!(second, Ok(Outcome::Busy)), "{second:?}");
        }
    });
    first.await.unwrap();
}
