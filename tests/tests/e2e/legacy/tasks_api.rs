//! The 2025-11-25 tasks API: it maps onto the same tasks as 2026-07-28, and the session's
//! `GET` stream carries `notifications/tasks/status` from any gateway.
//!
//! Checklist ids cited: none (2025 compatibility is outside the 2026 checklists).

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{SseDecoder, SseStream, TestContext, poll_until};
use serde_json::{Value, json};

use super::{Session, WITHIN, text};

/// 2025-11-25 tasks API over the same tasks: a task-augmented call returns `{task}`;
/// `tasks/get`, `tasks/list`, `tasks/result` (blocking, related-task `_meta`), `tasks/cancel`;
/// a task created through 2026-07-28 is read through 2025-11-25 and back; `forbidden` is
/// enforced with -32601; a failed task's `tasks/result` is its JSON-RPC error.
#[tokio::test(flavor = "multi_thread")]
async fn the_2025_tasks_api_maps_onto_the_same_tasks() -> Result<()> {
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (a, b) = (ctx.gateways[0].client(), ctx.gateways[1].client());
    let s = Session::start(&a, "2025-11-25", json!({})).await?;

    let r = s
        .request(
            &a,
            1,
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 300}, "task": {"ttl": 120000}}),
        )
        .await?;
    let task = r.body["result"]["task"].clone();
    let id = task["taskId"].as_str().context("taskId")?.to_owned();
    assert_eq!(task["status"], "working", "{task}");
    assert_eq!(task["ttl"], 120000, "{task}");
    assert!(task["pollInterval"].is_u64(), "{task}");

    // tasks/result blocks until the end (JSON without a stream).
    let mut h = s.headers();
    h[1] = ("accept", "application/json");
    let r = b
        .post_raw(
            &h,
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 2,
            "method": "tasks/result", "params": {"taskId": id}}))?,
        )
        .await?;
    assert_eq!(text(&r.body), "slept 300 ms", "{}", r.body);
    assert_eq!(
        r.body["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    let r = s.request(&b, 3, "tasks/get", json!({"taskId": id})).await?;
    assert_eq!(r.body["result"]["status"], "completed", "{}", r.body);
    assert!(
        r.body["result"].get("_meta").is_none(),
        "tasks/get carries no related-task"
    );
    // The same task through 2026-07-28.
    let t = a.get(&id).await?;
    assert_eq!(t["status"], "completed", "{t}");

    // A 2026 task read through 2025-11-25.
    let modern = a.start_task("sleep", json!({"ms": 100})).await?;
    let r = s
        .request(&a, 4, "tasks/get", json!({"taskId": modern}))
        .await?;
    assert_eq!(r.body["result"]["taskId"], modern.as_str(), "{}", r.body);

    let r = s.request(&b, 5, "tasks/list", json!({})).await?;
    let listed: Vec<&str> = r.body["result"]["tasks"]
        .as_array()
        .context("tasks")?
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    // Tasks created through 2025-11-25 are listed; 2026-07-28 has no list and is not indexed.
    assert!(
        listed.contains(&id.as_str()) && !listed.contains(&modern.as_str()),
        "{}",
        r.body
    );
    let r = s
        .request(&b, 6, "tasks/list", json!({"cursor": "bogus"}))
        .await?;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.body);

    // Cancel a long one while it runs: it is cancelled when the answer comes, and stays so;
    // a second cancel is -32602.
    let r = s
        .request(
            &a,
            7,
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 60000, "steps": 60}, "task": {}}),
        )
        .await?;
    let long = r.body["result"]["task"]["taskId"]
        .as_str()
        .context("taskId")?
        .to_owned();
    poll_until(WITHIN, || async {
        let r = s
            .request(&b, 70, "tasks/get", json!({"taskId": long}))
            .await
            .ok()?;
        r.body["result"]["statusMessage"].is_string().then_some(())
    })
    .await
    .context("the long task never started")?;
    let r = s
        .request(&b, 8, "tasks/cancel", json!({"taskId": long}))
        .await?;
    assert_eq!(r.body["result"]["status"], "cancelled", "{}", r.body);
    let r = s
        .request(&a, 80, "tasks/get", json!({"taskId": long}))
        .await?;
    assert_eq!(r.body["result"]["status"], "cancelled", "{}", r.body);
    // Anonymous callers are one principal: each session lists only its own tasks.
    let other = Session::start(&b, "2025-11-25", json!({})).await?;
    let r = other.request(&b, 81, "tasks/list", json!({})).await?;
    assert_eq!(r.body["result"]["tasks"], json!([]), "{}", r.body);
    let r = s
        .request(&a, 9, "tasks/cancel", json!({"taskId": long}))
        .await?;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.body);

    // A failed task's result is its error.
    let r = s
        .request(
            &a,
            10,
            "tools/call",
            json!({"name": "fail",
            "arguments": {"mode": "protocol", "message": "boom"}, "task": {}}),
        )
        .await?;
    let failed = r.body["result"]["task"]["taskId"]
        .as_str()
        .context("taskId")?
        .to_owned();
    let r = s
        .request(&b, 11, "tasks/result", json!({"taskId": failed}))
        .await?;
    let (_, response) = {
        // The request accepted SSE: read the stream's response from the body text.
        let mut events = SseDecoder::new();
        events.push(&r.raw);
        let frames: Vec<Value> = std::iter::from_fn(|| events.next_data())
            .filter_map(|d| serde_json::from_str(&d).ok())
            .collect();
        let last = frames.last().cloned().context("no frames")?;
        (frames, last)
    };
    assert_eq!(response["error"]["message"], "boom", "{response}");

    // taskSupport enforced (a task-only tool runs synchronously on 2025: see sync_calls).
    let r = s
        .request(
            &a,
            13,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}, "task": {}}),
        )
        .await?;
    assert_eq!(
        r.error_code(),
        Some(-32601),
        "forbidden with task: {}",
        r.body
    );
    let r = s
        .request(
            &a,
            14,
            "tasks/get",
            json!({"taskId": "tsk_unknownunknownunknow"}),
        )
        .await?;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.body);

    // A JSON-only tasks/result on a task waiting for input says how to get the question, and
    // the task keeps waiting.
    let asker = Session::start(&a, "2025-11-25", json!({"elicitation": {}})).await?;
    let r = asker
        .request(
            &a,
            20,
            "tools/call",
            json!({"name": "ask", "arguments": {"question": "?"}, "task": {}}),
        )
        .await?;
    let asking = r.body["result"]["task"]["taskId"]
        .as_str()
        .context("taskId")?
        .to_owned();
    poll_until(WITHIN, || async {
        let r = asker
            .request(&b, 21, "tasks/get", json!({"taskId": asking}))
            .await
            .ok()?;
        (r.body["result"]["status"] == "input_required").then_some(())
    })
    .await?;

    let mut hj = asker.headers();
    hj[1] = ("accept", "application/json");
    let r = b
        .post_raw(
            &hj,
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 23,
            "method": "tasks/result", "params": {"taskId": asking}}))?,
        )
        .await?;
    assert!(
        r.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("text/event-stream")),
        "{}",
        r.body
    );
    let r = asker
        .request(&a, 24, "tasks/get", json!({"taskId": asking}))
        .await?;
    assert_eq!(r.body["result"]["status"], "input_required", "{}", r.body);

    // 2025-06-18 has no tasks API.
    let old = Session::start(&a, "2025-06-18", json!({})).await?;
    let r = old
        .request(&a, 1, "tasks/get", json!({"taskId": id}))
        .await?;
    assert_eq!(r.error_code(), Some(-32601), "{}", r.body);
    ctx.cleanup().await;
    Ok(())
}

/// The session's `GET` stream (opened on gateway B) carries `notifications/tasks/status` for
/// a task the session created as a task through gateway A, up to its end; without a session
/// `GET` is 405, and an unknown session is 404.
#[tokio::test(flavor = "multi_thread")]
async fn the_session_stream_carries_status_notifications_from_any_gateway() -> Result<()> {
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (a, b) = (ctx.gateways[0].client(), ctx.gateways[1].client());
    let s = Session::start(&a, "2025-11-25", json!({})).await?;
    let mut stream = open_session_stream(&b, &s).await?;
    let r = s
        .request(
            &a,
            1,
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 600, "steps": 2}, "task": {}}),
        )
        .await?;
    let id = r.body["result"]["task"]["taskId"]
        .as_str()
        .context("taskId")?
        .to_owned();
    let mut statuses = Vec::new();
    while statuses.last().map(String::as_str) != Some("completed") {
        let n = stream
            .next(WITHIN)
            .await
            .context("the stream went quiet before the end")?;
        assert_eq!(n["method"], "notifications/tasks/status", "{n}");
        assert_eq!(n["params"]["taskId"], id.as_str(), "{n}");
        statuses.push(
            n["params"]["status"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert!(
        statuses
            .iter()
            .all(|st| st == "working" || st == "completed"),
        "{statuses:?}"
    );

    let res = b
        .send_raw(
            "GET",
            "/mcp",
            &[("accept", "text/event-stream")],
            Default::default(),
        )
        .await?;
    assert_eq!(res.status(), 405);
    // A 2025-06-18 session has nothing to receive on it.
    let old = Session::start(&a, "2025-06-18", json!({})).await?;
    let res = b
        .send_raw(
            "GET",
            "/mcp",
            &[("accept", "text/event-stream"), ("mcp-session-id", &old.id)],
            Default::default(),
        )
        .await?;
    assert_eq!(res.status(), 405);
    let res = b
        .send_raw(
            "GET",
            "/mcp",
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", "ses_nonesuchnonesuchnonesu"),
            ],
            Default::default(),
        )
        .await?;
    assert_eq!(res.status(), 404);
    ctx.cleanup().await;
    Ok(())
}

/// Issue 20, item 5: a 2025 `tasks/result` stream is held open as long as its task runs,
/// so each holds one of its principal's `MCPT_LIMIT_LISTENERS` slots. With a limit of 100,
/// 150 streams on a parked task: 100 open, 50 answered -31001 naming the limit; another
/// principal still opens one; a closed stream's slot comes back.
#[tokio::test(flavor = "multi_thread")]
async fn result_streams_count_against_the_listener_limit() -> Result<()> {
    let tokens = mcp_tasks_tests::TwoTokens::new()?;
    let mut env = tokens.env();
    env.push(("MCPT_LIMIT_LISTENERS", "100".to_owned()));
    let redis = mcp_tasks_tests::RedisServer::start()?;
    let gateway = mcp_tasks_tests::Gateway::start(&redis.url(), &env)?;
    let _worker = mcp_tasks_tests::Worker::start(&redis.url(), &env)?;
    let base = gateway.client();
    let alice = base.with_token(mcp_tasks_tests::ALICE_TOKEN);
    let bob = base.with_token(mcp_tasks_tests::BOB_TOKEN);
    alice.wait_for_tool("ask").await?;

    // A task that waits for an answer nobody gives: its result streams stay open.
    let parked = |client| async move {
        let s = Session::start(client, "2025-11-25", json!({"elicitation": {}})).await?;
        let r = s
            .request(
                client,
                1,
                "tools/call",
                json!({"name": "ask", "arguments": {"question": "?"}, "task": {"ttl": 600000}}),
            )
            .await?;
        let id = r.body["result"]["task"]["taskId"]
            .as_str()
            .with_context(|| format!("no task: {}", r.body))?
            .to_owned();
        anyhow::Ok((s, id))
    };
    let (s, id) = parked(&alice).await?;
    let mut streams = Vec::new();
    let mut refused = Vec::new();
    for n in 0..150 {
        let res = open_result(&alice, &s, &id, 10 + n).await?;
        if is_stream(&res) {
            streams.push(res);
        } else {
            refused.push(mcp_tasks_tests::Reply::read(res).await?);
        }
    }
    assert_eq!(streams.len(), 100, "streams open at a limit of 100");
    assert_eq!(refused.len(), 50);
    // HTTP 429 with the error in the body: a per-caller limit counts as a refusal in both
    // eras (issue 36, item 2).
    let r = &refused[0];
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.body["error"]["code"], -31001, "{}", r.body);
    assert_eq!(r.body["error"]["data"]["limit"], "listeners", "{}", r.body);

    // Bob holds his own slots.
    let (bs, bid) = parked(&bob).await?;
    let res = open_result(&bob, &bs, &bid, 1).await?;
    assert!(is_stream(&res), "Bob's stream");

    // A closed stream gives its slot back.
    drop(streams.pop());
    poll_until(WITHIN, || async {
        let res = open_result(&alice, &s, &id, 500).await.ok()?;
        is_stream(&res).then_some(res)
    })
    .await
    .context("the closed stream's slot never came back")?;
    Ok(())
}

/// The session's `GET` stream on `client`'s gateway (200, SSE).
async fn open_session_stream(client: &mcp_tasks_tests::Client, s: &Session) -> Result<SseStream> {
    let res = client
        .send_raw(
            "GET",
            "/mcp",
            &[("accept", "text/event-stream"), ("mcp-session-id", &s.id)],
            Default::default(),
        )
        .await?;
    anyhow::ensure!(res.status() == 200, "GET stream: HTTP {}", res.status());
    Ok(SseStream::from_response(res))
}

/// Whether a response opened an SSE stream (rather than answering with JSON).
fn is_stream(res: &hyper::Response<hyper::body::Incoming>) -> bool {
    res.headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// `tasks/result` for `id` on session `s`, as a stream left open (the response as it
/// arrives).
async fn open_result(
    client: &mcp_tasks_tests::Client,
    s: &Session,
    id: &str,
    n: u64,
) -> Result<hyper::Response<hyper::body::Incoming>> {
    let body =
        json!({"jsonrpc": "2.0", "id": n, "method": "tasks/result", "params": {"taskId": id}});
    client
        .send_raw(
            "POST",
            "/mcp",
            &s.headers(),
            serde_json::to_vec(&body)?.into(),
        )
        .await
}

/// Issue 20, item 7: a 2025 session's sets hold live tasks only. The session's `GET`
/// stream takes the tasks it saw end out of the session's set (so a stream opened later
/// reads none of them again), and each create drops the expired tasks from the caller's
/// `tasks/list` index, with no `tasks/list` needed to meet them.
#[tokio::test(flavor = "multi_thread")]
async fn a_sessions_sets_hold_live_tasks_only() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    ctx.wait_for_tools().await?;
    let a = ctx.gateways[0].client();
    let s = Session::start(&a, "2025-11-25", json!({})).await?;
    let session_set = format!("mcpt:session-tasks:{{{}}}", s.id);
    let listed = format!("mcpt:listed:{{s:{}}}", s.id);
    let count = |args: &[&str]| -> Result<u64> {
        let out = ctx.redis.cli(args)?;
        out.trim()
            .parse()
            .with_context(|| format!("{args:?} answered {out:?}"))
    };
    let create = |n: u64, ttl: u64| {
        let s = &s;
        let a = &a;
        async move {
            let r = s
                .request(
                    a,
                    n,
                    "tools/call",
                    json!({"name": "sleep", "arguments": {"ms": 0}, "task": {"ttl": ttl}}),
                )
                .await?;
            r.body["result"]["task"]["taskId"]
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("no task: {}", r.body))
        }
    };
    let short = create(1, 1_000).await?;
    let long = create(2, 120_000).await?;
    for id in [&short, &long] {
        poll_until(WITHIN, || async {
            let t = s
                .request(&a, 9, "tasks/get", json!({"taskId": id}))
                .await
                .ok()?;
            (t.body["result"]["status"] == "completed").then_some(())
        })
        .await
        .context("the tasks never completed")?;
    }
    assert_eq!(count(&["SCARD", &session_set])?, 2);
    assert_eq!(count(&["ZCARD", &listed])?, 2);

    // The stream sends each ended task once, then forgets it.
    let mut stream = open_session_stream(&a, &s).await?;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let n = stream
            .next(WITHIN)
            .await
            .context("no status notification")?;
        assert_eq!(n["params"]["status"], "completed", "{n}");
        seen.push(
            n["params"]["taskId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    seen.sort();
    let mut want = vec![short.clone(), long.clone()];
    want.sort();
    assert_eq!(seen, want);
    poll_until(WITHIN, || async {
        (count(&["SCARD", &session_set]).ok()? == 0).then_some(())
    })
    .await
    .context("the session's set still holds ended tasks")?;
    drop(stream);

    // Once the short task expired, the next create drops it from the list.
    poll_until(WITHIN, || async {
        let t = s
            .request(&a, 9, "tasks/get", json!({"taskId": short}))
            .await
            .ok()?;
        t.body.get("error").is_some().then_some(())
    })
    .await
    .context("the short task never expired")?;
    let newer = create(3, 120_000).await?;
    let members = ctx.redis.cli(&["ZRANGE", &listed, "0", "-1"])?;
    let mut members: Vec<&str> = members.lines().filter(|l| !l.is_empty()).collect();
    members.sort();
    let mut want = vec![long.as_str(), newer.as_str()];
    want.sort();
    assert_eq!(members, want, "the expired task is still listed");
    ctx.cleanup().await;
    Ok(())
}
