//! The client side of each task: submission at the planned rate, and the answers, cancels
//! and polls the scheduler sends, each retried across the gateways.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcp_tasks_tests::{Reply, caps_tasks};
use serde_json::{Value, json};

use crate::STALE;
use crate::plan::{Kind, Plan};
use crate::state::{Shared, lock};

/// Send a request, trying the gateways in turn while the answer is a transport failure or
/// an internal error (Redis away, gateway restarting); other answers are returned.
pub(crate) async fn rpc(
    shared: &Shared,
    pref: usize,
    method: &str,
    params: Value,
) -> Option<Reply> {
    let mut backoff = Duration::from_millis(50);
    let mut attempt = 0;
    while !shared.past_deadline() {
        let client = shared.client(pref + attempt);
        attempt += 1;
        match client.request(method, params.clone(), &caps_tasks()).await {
            Ok(r) if r.body.get("result").is_some() => return Some(r),
            Ok(r) if r.error_code().is_some_and(|c| c != -32603) => return Some(r),
            _ => {}
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(800));
    }
    None
}

pub(crate) async fn submit(shared: &Shared, i: usize, plan: &Plan) -> Option<String> {
    let (tool, args) = plan.call(i);
    let params = json!({"name": tool, "arguments": args});
    let mut backoff = Duration::from_millis(50);
    let mut attempt = 0;
    while !shared.past_deadline() {
        let client = shared.client(i + attempt);
        attempt += 1;
        let why = match client
            .request("tools/call", params.clone(), &caps_tasks())
            .await
        {
            Ok(r) => match r.body["result"]["taskId"].as_str() {
                Some(id) => return Some(id.to_owned()),
                None => format!("HTTP {}: {}", r.status, r.body),
            },
            Err(e) => format!("{e:#}"),
        };
        shared.submit_errors.fetch_add(1, Ordering::Relaxed);
        *lock(&shared.last_submit_error) = why;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(800));
    }
    None
}

pub(crate) async fn submitter(shared: Arc<Shared>, next: Arc<AtomicUsize>, plans: Arc<Vec<Plan>>) {
    let t0 = Instant::now();
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= plans.len() || shared.past_deadline() {
            return;
        }
        let due = t0 + Duration::from_secs_f64(i as f64 / shared.args.rate);
        tokio::time::sleep_until(due.into()).await;
        let Some(id) = submit(&shared, i, &plans[i]).await else {
            return;
        };
        let mut tasks = lock(&shared.tasks);
        if tasks.by_id.insert(id.clone(), i).is_some() {
            tasks.list[i]
                .notes
                .push("the server handed out this task id twice".into());
        }
        let t = &mut tasks.list[i];
        t.id = Some(id.clone());
        t.submitted_at = Some(Instant::now());
        t.last_heard = Some(Instant::now());
        tasks.unlistened.push(id);
        drop(tasks);
        shared.submitted.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) enum Action {
    Answer(usize, String, String),
    Cancel(usize, String),
    Poll(usize, String),
}

pub(crate) async fn scheduler(shared: Arc<Shared>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(32));
    while !shared.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = Instant::now();
        let mut actions = Vec::new();
        {
            let mut tasks = lock(&shared.tasks);
            for (i, t) in tasks.list.iter_mut().enumerate() {
                let (Some(id), Some(submitted)) = (t.id.clone(), t.submitted_at) else {
                    continue;
                };
                let open = t.terminals.is_empty();
                match t.plan.kind {
                    Kind::Ask => {
                        if open
                            && !t.answer_started
                            && t.input_seen_at.is_some_and(|s| now >= s + t.plan.delay)
                        {
                            t.answer_started = true;
                            actions.push(Action::Answer(i, id.clone(), t.plan.answer.clone()));
                        }
                    }
                    Kind::CancelAsk => {
                        if open
                            && !t.cancel_started
                            && t.input_seen_at.is_some_and(|s| now >= s + t.plan.delay)
                        {
                            t.cancel_started = true;
                            actions.push(Action::Cancel(i, id.clone()));
                        }
                    }
                    // Cancelled even when already seen terminal: that must change nothing.
                    Kind::CancelSleep => {
                        if !t.cancel_started && now >= submitted + t.plan.delay {
                            t.cancel_started = true;
                            actions.push(Action::Cancel(i, id.clone()));
                        }
                    }
                    Kind::Sleep => {}
                }
                let quiet = t.last_heard.is_none_or(|h| now >= h + STALE)
                    && t.last_poll.is_none_or(|p| now >= p + STALE);
                if open && !t.polling && quiet {
                    t.polling = true;
                    t.last_poll = Some(now);
                    actions.push(Action::Poll(i, id));
                }
            }
        }
        for action in actions {
            let Ok(permit) = limit.clone().acquire_owned().await else {
                return;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                act(&shared, action).await;
                drop(permit);
            });
        }
    }
}

pub(crate) async fn act(shared: &Shared, action: Action) {
    match action {
        Action::Answer(i, id, answer) => {
            let responses =
                json!({"answer-1": {"action": "accept", "content": {"answer": answer}}});
            let r = rpc(
                shared,
                i,
                "tasks/update",
                json!({"taskId": id, "inputResponses": responses}),
            )
            .await;
            match r {
                Some(r) if r.body["result"]["resultType"] == "complete" => {
                    lock(&shared.tasks).list[i].answered_at = Some(Instant::now());
                }
                Some(r) => shared.note(i, format!("tasks/update answered {}", r.body)),
                None => shared.note(i, "tasks/update never succeeded".into()),
            }
        }
        Action::Cancel(i, id) => {
            match rpc(shared, i, "tasks/cancel", json!({"taskId": id})).await {
                Some(r) if r.body["result"]["resultType"] == "complete" => {
                    lock(&shared.tasks).list[i].cancel_acked_at = Some(Instant::now());
                }
                Some(r) => shared.note(i, format!("tasks/cancel answered {}", r.body)),
                None => shared.note(i, "tasks/cancel never succeeded".into()),
            }
        }
        Action::Poll(i, id) => {
            let r = rpc(shared, i, "tasks/get", json!({"taskId": id})).await;
            match r {
                Some(r) if r.body.get("result").is_some() => {
                    shared.observe(&r.body["result"], "poll")
                }
                Some(r) => {
                    let at = shared.elapsed().as_secs_f64();
                    lock(&shared.tasks).list[i]
                        .not_found
                        .push(format!("poll at {at:.1}s: {}", r.body));
                }
                None => {}
            }
            lock(&shared.tasks).list[i].polling = false;
        }
    }
}
