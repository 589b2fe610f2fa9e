//! Task notifications on `subscriptions/listen` streams (tasks-extension.md §12;
//! T-46…T-50, T-56): the acknowledgement, the notification shape, ordering, and that a
//! stream only ever carries the tasks it acknowledged.
//!
//! Shape rules come from `lifecycle::check`, so a notification is held to exactly the same
//! standard as a `tasks/get` result.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Client, SseStream, TestContext, caps_tasks, meta};
use serde_json::{Value, json};

use crate::lifecycle::check::{self, Kind};

const WITHIN: Duration = Duration::from_secs(10);
/// How long a stream must stay silent to count as "nothing more was sent".
const QUIET: Duration = Duration::from_millis(500);
const ACK: &str = "notifications/subscriptions/acknowledged";
const TASK_NOTE: &str = "notifications/tasks";
const SUB_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// A listen stream.
struct Sub(SseStream);

impl Sub {
    /// The next JSON-RPC message, or `None` when nothing came within `within`.
    async fn next(&mut self, within: Duration) -> Option<Value> {
        self.0.next(within).await
    }

    async fn expect(&mut self, what: &str) -> Result<Value> {
        self.next(WITHIN)
            .await
            .with_context(|| format!("no {what} within {WITHIN:?}"))
    }
}

/// Open a listen stream with any JSON-RPC `id` (e.g. an integer).
async fn listen_with_id(client: &Client, id: Value, task_ids: &[&str]) -> Result<Sub> {
    Ok(Sub(client.listen(id, task_ids).await?))
}

async fn listen(client: &Client, id: &str, task_ids: &[&str]) -> Result<Sub> {
    listen_with_id(client, json!(id), task_ids).await
}

/// Read the acknowledgement, which must be the first message (T-46); returns the accepted
/// ids (`None` when the ack has no `taskIds`).
async fn read_ack(sub: &mut Sub, listen_id: &Value) -> Result<Option<Vec<String>>> {
    let ack = sub.expect("acknowledgement").await?;
    assert_eq!(ack["method"], ACK, "first message is not the ack: {ack}");
    assert_eq!(ack["jsonrpc"], "2.0");
    assert!(ack.get("id").is_none(), "ack is a notification: {ack}");
    assert_eq!(
        ack["params"]["_meta"][SUB_ID], *listen_id,
        "ack subscriptionId: {ack}"
    );
    let notifications = ack["params"]["notifications"]
        .as_object()
        .with_context(|| format!("ack without notifications object: {ack}"))?;
    Ok(match notifications.get("taskIds") {
        None => None,
        Some(ids) => Some(
            ids.as_array()
                .with_context(|| format!("taskIds not an array: {ack}"))?
                .iter()
                .map(|v| v.as_str().map(str::to_owned).context("non-string id"))
                .collect::<Result<_>>()?,
        ),
    })
}

/// Assert `msg` is a task notification for the stream `listen_id` (T-47, T-49); returns its
/// params.
fn task_params<'a>(msg: &'a Value, listen_id: &Value) -> &'a Value {
    assert_eq!(
        msg["method"], TASK_NOTE,
        "only task notifications may follow the ack (T-49): {msg}"
    );
    assert!(msg.get("id").is_none(), "a notification has no id: {msg}");
    let params = &msg["params"];
    assert_eq!(
        params["_meta"][SUB_ID], *listen_id,
        "subscriptionId must equal the listen id, same JSON type: {msg}"
    );
    check::task(params, Kind::Notified);
    params
}

/// Read task notifications until `done` holds for one of them; all of them, in order.
async fn read_until(
    sub: &mut Sub,
    listen_id: &Value,
    mut done: impl FnMut(&Value) -> bool,
) -> Result<Vec<Value>> {
    let deadline = Instant::now() + WITHIN;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = sub
            .next(left)
            .await
            .with_context(|| format!("condition not met; notifications so far: {out:?}"))?;
        let params = task_params(&msg, listen_id).clone();
        let finished = done(&params);
        out.push(params);
        if finished {
            return Ok(out);
        }
    }
}

/// Assert nothing more arrives on the stream for a while (T-48, T-50).
async fn assert_quiet(sub: &mut Sub, why: &str) {
    if let Some(extra) = sub.next(QUIET).await {
        panic!("{why}: unexpected message {extra}");
    }
}

/// A notification compared with `tasks/get` of the same task: the same `DetailedTask`
/// (notification minus `_meta`, result minus `resultType` and `_meta`; T-47).
async fn assert_matches_get(client: &Client, note: &Value) -> Result<()> {
    let id = note["taskId"].as_str().context("taskId")?;
    let got = client.get(id).await?;
    assert_eq!(
        check::without(note, &["_meta"]),
        check::without(&got, &["resultType", "_meta"]),
        "notification differs from tasks/get"
    );
    Ok(())
}

fn status(t: &Value) -> &str {
    t["status"].as_str().unwrap_or_default()
}

/// T-46, T-48: the ack is the first message and lists each existing id once; unknown and
/// malformed ids are left out silently; only acknowledged tasks are ever notified.
#[tokio::test]
async fn ack_comes_first_and_lists_only_existing_ids_once() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let t1 = client
        .start_task("sleep", json!({"ms": 30_000, "steps": 1}))
        .await?;
    let t2 = client.start_task("ask", json!({"question": "?"})).await?;
    client.wait_status(&t2, "input_required", WITHIN).await?;
    let unknown = "tsk_AAAAAAAAAAAAAAAAAAAAAA";
    let listen_id = json!("listen-ack");
    let mut sub = listen(
        &client,
        "listen-ack",
        &[&t1, unknown, &t2, &t1, "bad id!", &t2],
    )
    .await?;
    let accepted = read_ack(&mut sub, &listen_id)
        .await?
        .context("ack without taskIds")?;
    let mut sorted = accepted.clone();
    sorted.sort();
    let mut want = vec![t1.clone(), t2.clone()];
    want.sort();
    assert_eq!(
        sorted, want,
        "ack taskIds (no duplicates, no unknowns): {accepted:?}"
    );

    // The current state of each accepted task follows; then a task that is not watched
    // changes, and the watched ones end: only those two ids ever appear.
    let other = client.start_task("sleep", json!({"ms": 10})).await?;
    client.wait_status(&other, "completed", WITHIN).await?;
    client.cancel(&t1).await?;
    client.cancel(&t2).await?;
    let mut terminal = HashSet::new();
    let notes = read_until(&mut sub, &listen_id, |t| {
        if check::is_terminal(status(t)) {
            terminal.insert(t["taskId"].as_str().unwrap_or_default().to_owned());
        }
        terminal.len() == 2
    })
    .await?;
    for n in &notes {
        let id = n["taskId"].as_str().unwrap_or_default();
        assert!(id == t1 || id == t2, "notification for unacknowledged {id}");
    }
    for id in [&t1, &t2] {
        let first = notes
            .iter()
            .find(|n| n["taskId"] == id.as_str())
            .context("no notification for an accepted task")?;
        assert!(
            !check::is_terminal(status(first)),
            "first notification of {id} is not its current state: {first}"
        );
    }
    assert_quiet(&mut sub, "after both tasks ended").await;
    ctx.cleanup().await;
    Ok(())
}

/// T-46, T-48: when no id is accepted the ack has no `taskIds`, and no notification follows
/// even when other tasks change.
#[tokio::test]
async fn ack_without_accepted_ids_omits_task_ids() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let listen_id = json!("listen-none");
    let mut sub = listen(
        &client,
        "listen-none",
        &["tsk_AAAAAAAAAAAAAAAAAAAAAA", "not a task"],
    )
    .await?;
    let accepted = read_ack(&mut sub, &listen_id).await?;
    assert_eq!(
        accepted, None,
        "taskIds present though nothing was accepted"
    );
    let other = client.start_task("sleep", json!({"ms": 10})).await?;
    client.wait_status(&other, "completed", WITHIN).await?;
    assert_quiet(&mut sub, "nothing was acknowledged").await;
    ctx.cleanup().await;
    Ok(())
}

/// T-47: every notification is the full `DetailedTask` `tasks/get` shows, with
/// `_meta.subscriptionId` equal to the listen id in its JSON type (string and integer).
#[tokio::test]
async fn notifications_are_detailed_tasks_with_the_subscription_id() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let id = client
        .start_task("ask", json!({"question": "Colour?"}))
        .await?;
    client.wait_status(&id, "input_required", WITHIN).await?;
    let string_id = json!("sub-7");
    let number_id = json!(4242);
    let mut by_string = listen(&client, "sub-7", &[&id]).await?;
    let mut by_number = listen_with_id(&client, number_id.clone(), &[&id]).await?;
    for (sub, listen_id) in [(&mut by_string, &string_id), (&mut by_number, &number_id)] {
        let accepted = read_ack(sub, listen_id).await?;
        assert_eq!(accepted, Some(vec![id.clone()]));
        let first = read_until(sub, listen_id, |_| true).await?;
        assert_eq!(status(&first[0]), "input_required", "{first:?}");
        assert_matches_get(&client, &first[0]).await?;
    }
    client
        .update(
            &id,
            json!({"answer-1": {"action": "accept", "content": {"answer": "green"}}}),
        )
        .await?;
    for (sub, listen_id) in [(&mut by_string, &string_id), (&mut by_number, &number_id)] {
        let rest = read_until(sub, listen_id, |t| check::is_terminal(status(t))).await?;
        let last = rest.last().context("no notifications")?;
        assert_eq!(status(last), "completed", "{rest:?}");
        assert_eq!(check::text(&last["result"]), "answer: green");
        assert_matches_get(&client, last).await?;
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-49, T-50: a stepping sleep watched from another gateway: after the ack the current
/// state, then each `step i/5` in order with no gap or duplicate, then `completed` —
/// matching `tasks/get` — and nothing after it; no progress or log notifications.
#[tokio::test]
async fn steps_arrive_in_order_without_gaps_or_duplicates() -> Result<()> {
    let mut ctx = TestContext::start(1, 1).await?;
    ctx.gateways
        .push(mcp_tasks_tests::Gateway::start(&ctx.redis.url(), &[])?);
    let a = ctx.gateways[0].client();
    let b = ctx.gateways[1].client();
    let id = a
        .start_task("sleep", json!({"ms": 1000, "steps": 5}))
        .await?;
    let listen_id = json!("steps");
    let mut sub = listen(&b, "steps", &[&id]).await?;
    assert_eq!(
        read_ack(&mut sub, &listen_id).await?,
        Some(vec![id.clone()])
    );
    let notes = read_until(&mut sub, &listen_id, |t| check::is_terminal(status(t))).await?;
    assert_quiet(&mut sub, "after the terminal notification").await;

    let mut keys = HashSet::new();
    let mut last_updated = 0;
    for n in &notes {
        assert_eq!(n["taskId"], id.as_str());
        let key = (
            n["status"].to_string(),
            n["statusMessage"].to_string(),
            n["lastUpdatedAt"].to_string(),
        );
        assert!(keys.insert(key), "duplicate notification {n}: {notes:?}");
        let updated = check::ts_ms(n["lastUpdatedAt"].as_str().unwrap_or_default());
        assert!(
            updated >= last_updated,
            "lastUpdatedAt went back: {notes:?}"
        );
        last_updated = updated;
    }
    check::transitions(notes.iter().map(status));
    // Step numbers: consecutive, ending at 5; starting at 1 unless the first notification
    // (the state at subscription time) already showed a later step.
    let steps: Vec<u32> = notes
        .iter()
        .filter_map(|n| n["statusMessage"].as_str())
        .filter_map(|m| m.strip_prefix("step ")?.strip_suffix("/5")?.parse().ok())
        .collect();
    let mut distinct = steps.clone();
    distinct.dedup();
    let first_step_in_snapshot = notes[0]["statusMessage"]
        .as_str()
        .is_some_and(|m| m.starts_with("step "));
    let start = if first_step_in_snapshot {
        distinct[0]
    } else {
        1
    };
    let want: Vec<u32> = (start..=5).collect();
    assert_eq!(
        distinct, want,
        "step messages with a gap or out of order: {notes:?}"
    );
    let working_steps = notes
        .iter()
        .filter(|n| status(n) == "working" && n["statusMessage"].as_str().is_some())
        .count();
    assert_eq!(
        working_steps,
        want.len(),
        "a step was sent twice: {notes:?}"
    );
    let last = notes.last().context("no notifications")?;
    assert_eq!(status(last), "completed");
    assert_eq!(check::text(&last["result"]), "slept 1000 ms");
    assert_matches_get(&a, last).await?;
    ctx.cleanup().await;
    Ok(())
}

/// T-47, T-50, T-17: a whole ask flow seen through notifications on another gateway:
/// `input_required` with the request, then after the answer `working` and `completed`.
#[tokio::test]
async fn ask_flow_is_seen_entirely_through_notifications() -> Result<()> {
    let mut ctx = TestContext::start(1, 1).await?;
    ctx.gateways
        .push(mcp_tasks_tests::Gateway::start(&ctx.redis.url(), &[])?);
    let a = ctx.gateways[0].client();
    let b = ctx.gateways[1].client();
    let id = a.start_task("ask", json!({"question": "Pet?"})).await?;
    let listen_id = json!("ask-flow");
    let mut sub = listen(&b, "ask-flow", &[&id]).await?;
    assert_eq!(
        read_ack(&mut sub, &listen_id).await?,
        Some(vec![id.clone()])
    );
    let before = read_until(&mut sub, &listen_id, |t| status(t) == "input_required").await?;
    let asking = before.last().context("none")?;
    assert_eq!(
        asking["inputRequests"]["answer-1"]["params"]["message"], "Pet?",
        "{asking}"
    );
    assert_matches_get(&a, asking).await?;
    a.update(
        &id,
        json!({"answer-1": {"action": "accept", "content": {"answer": "cat"}}}),
    )
    .await?;
    let after = read_until(&mut sub, &listen_id, |t| check::is_terminal(status(t))).await?;
    let seen: Vec<&str> = after.iter().map(status).collect();
    assert_eq!(
        seen,
        ["working", "completed"],
        "after the answer: {after:?}"
    );
    assert!(after[0].get("inputRequests").is_none());
    assert_eq!(check::text(&after[1]["result"]), "answer: cat");
    assert_matches_get(&a, &after[1]).await?;
    check::transitions(before.iter().chain(&after).map(status));
    assert_quiet(&mut sub, "after completed").await;
    ctx.cleanup().await;
    Ok(())
}

/// T-46, T-50: subscribing to a task that already ended gives its final state once, then
/// nothing.
#[tokio::test]
async fn finished_task_is_notified_once() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let id = client.start_task("sleep", json!({"ms": 10})).await?;
    client.wait_status(&id, "completed", WITHIN).await?;
    let listen_id = json!("late");
    let mut sub = listen(&client, "late", &[&id]).await?;
    assert_eq!(
        read_ack(&mut sub, &listen_id).await?,
        Some(vec![id.clone()])
    );
    let notes = read_until(&mut sub, &listen_id, |_| true).await?;
    assert_eq!(status(&notes[0]), "completed");
    assert_matches_get(&client, &notes[0]).await?;
    assert_quiet(&mut sub, "after the terminal state").await;
    ctx.cleanup().await;
    Ok(())
}

/// T-48: two streams on one gateway each carry only their own task.
#[tokio::test]
async fn each_stream_carries_only_its_tasks() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let t1 = client
        .start_task("sleep", json!({"ms": 300, "steps": 3}))
        .await?;
    let t2 = client
        .start_task("sleep", json!({"ms": 300, "steps": 3}))
        .await?;
    let (id1, id2) = (json!("one"), json!("two"));
    let mut s1 = listen(&client, "one", &[&t1]).await?;
    let mut s2 = listen(&client, "two", &[&t2]).await?;
    read_ack(&mut s1, &id1).await?;
    read_ack(&mut s2, &id2).await?;
    for (sub, listen_id, mine) in [(&mut s1, &id1, &t1), (&mut s2, &id2, &t2)] {
        let notes = read_until(sub, listen_id, |t| check::is_terminal(status(t))).await?;
        assert!(
            notes.iter().all(|n| n["taskId"] == mine.as_str()),
            "stream {listen_id} carried another task: {notes:?}"
        );
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-56: a listen naming more task ids than the bound is -32602 and opens no stream.
#[tokio::test]
async fn oversize_task_id_list_is_rejected() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let ids: Vec<String> = (0..1001).map(|i| format!("tsk_{i:022}")).collect();
    let body = json!({
        "jsonrpc": "2.0", "id": "big", "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": ids}, "_meta": meta(&caps_tasks())}
    });
    let r = client
        .post_raw(
            &Client::headers("subscriptions/listen", None),
            serde_json::to_vec(&body)?,
        )
        .await?;
    assert_eq!(r.error_code(), Some(-32602), "{} {}", r.status, r.body);
    let msg = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("taskIds"), "message {msg:?}");
    ctx.cleanup().await;
    Ok(())
}

/// ARCHITECTURE.md "Notifications": when the pub/sub connections drop (the gateway's and the
/// worker's), both resubscribe and re-read, so a listener still follows its task to the end
/// and a worker waiting for input still sees the answer. T-50: no duplicates across the gap.
#[tokio::test]
async fn listener_and_worker_survive_dropped_pubsub_connections() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let id = client
        .start_task("ask", json!({"question": "Still there?"}))
        .await?;
    client.wait_status(&id, "input_required", WITHIN).await?;
    let listen_id = json!("reconnect");
    let mut sub = listen(&client, "reconnect", &[&id]).await?;
    assert_eq!(
        read_ack(&mut sub, &listen_id).await?,
        Some(vec![id.clone()])
    );
    let first = read_until(&mut sub, &listen_id, |_| true).await?;
    assert_eq!(status(&first[0]), "input_required");

    let killed = ctx.redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"])?;
    let killed: u32 = killed
        .trim()
        .parse()
        .with_context(|| format!("CLIENT KILL said {killed:?}"))?;
    assert!(
        killed >= 2,
        "expected the gateway's and the worker's subscribers, killed {killed}"
    );

    let ack = client
        .update(
            &id,
            json!({"answer-1": {"action": "accept", "content": {"answer": "yes"}}}),
        )
        .await?;
    assert_eq!(ack.body["result"]["resultType"], "complete", "{}", ack.body);
    let notes = read_until(&mut sub, &listen_id, |t| status(t) == "completed").await?;
    let last = notes.last().context("no notification")?;
    assert_eq!(last["result"]["content"][0]["text"], "answer: yes");
    let mut seen = HashSet::new();
    for n in &notes {
        assert!(seen.insert(n.to_string()), "duplicate notification {n}");
        assert_ne!(
            status(n),
            "input_required",
            "state from before the gap sent again: {n}"
        );
    }
    assert_matches_get(&client, last).await?;
    assert_quiet(&mut sub, "after the terminal state").await;
    ctx.cleanup().await;
    Ok(())
}

/// T-46, T-50: a listen naming more tasks than the stream's buffer holds gets its ack and
/// every snapshot (the stream is returned before it is filled).
#[tokio::test]
async fn listen_on_many_tasks_acknowledges_and_sends_every_snapshot() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let mut ids = Vec::new();
    for _ in 0..150 {
        ids.push(client.start_task("sleep", json!({"ms": 0})).await?);
    }
    for id in &ids {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let listen_id = json!("many");
    let mut sub = listen(&client, "many", &refs).await?;
    let acked = read_ack(&mut sub, &listen_id)
        .await?
        .context("no taskIds in ack")?;
    assert_eq!(acked.len(), ids.len());
    let mut seen = HashSet::new();
    while seen.len() < ids.len() {
        let msg = sub.expect("a snapshot").await?;
        let params = task_params(&msg, &listen_id);
        assert_eq!(status(params), "completed");
        assert!(
            seen.insert(params["taskId"].as_str().unwrap_or_default().to_owned()),
            "duplicate {msg}"
        );
    }
    assert_quiet(&mut sub, "after every task's terminal state").await;
    ctx.cleanup().await;
    Ok(())
}

/// T-50: a listener that does not read for a while may skip intermediate states, but still
/// receives the terminal state, and nothing after it.
#[tokio::test]
async fn slow_listener_still_gets_the_terminal_state() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let id = client
        .start_task("sleep", json!({"ms": 0, "steps": 3000}))
        .await?;
    let listen_id = json!("slow");
    let mut sub = listen(&client, "slow", &[&id]).await?;
    assert_eq!(
        read_ack(&mut sub, &listen_id).await?,
        Some(vec![id.clone()])
    );
    // Read nothing while thousands of status changes are published.
    client
        .wait_status(&id, "completed", Duration::from_secs(60))
        .await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last_version_time = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = sub
            .next(left)
            .await
            .context("the stream ended or stalled before the completed notification")?;
        let params = task_params(&msg, &listen_id);
        let updated = params["lastUpdatedAt"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            updated >= last_version_time,
            "notifications went back in time: {msg}"
        );
        last_version_time = updated;
        if status(params) == "completed" {
            assert_matches_get(&client, params).await?;
            break;
        }
    }
    assert_quiet(&mut sub, "after the terminal state").await;
    ctx.cleanup().await;
    Ok(())
}
