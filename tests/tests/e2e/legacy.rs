//! 2025 clients (protocol 2025-11-25 and 2025-06-18) on the same endpoint and the same tasks
//! as 2026-07-28: sessions any gateway accepts, synchronous calls answered on a stream with
//! progress, input requests and keep-alives, and the 2025-11-25 tasks API.
//!
//! The official TypeScript SDK 1.x clients are driven by `tests/legacy/legacy.mjs`
//! (`official_2025_clients_work_against_two_gateways`); the rest are raw HTTP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use mcp_tasks_tests::{Client, Reply, SseStream, TestContext, caps_none, poll_until, repo_root};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

const WITHIN: Duration = Duration::from_secs(15);

/// A 2025 session on one or more gateways.
struct Session {
    id: String,
    version: &'static str,
}

fn base_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ]
}

impl Session {
    /// `initialize` on `client`, then `notifications/initialized`.
    async fn start(client: &Client, version: &'static str, caps: Value) -> Result<Session> {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": caps,
            "clientInfo": {"name": "raw-2025", "version": "1"}}});
        let r = client
            .post_raw(&base_headers(), serde_json::to_vec(&body)?)
            .await?;
        ensure!(r.status == 200, "initialize: {} {}", r.status, r.body);
        ensure!(
            r.body["result"]["protocolVersion"] == version,
            "negotiated {}",
            r.body
        );
        let id = r
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .context("no Mcp-Session-Id")?
            .to_owned();
        let s = Session { id, version };
        let r = s
            .post(
                client,
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await?;
        ensure!(r.status == 202, "initialized: {}", r.status);
        Ok(s)
    }

    fn headers(&self) -> Vec<(&'static str, &str)> {
        let mut h = base_headers();
        h.push(("mcp-session-id", &self.id));
        h.push(("mcp-protocol-version", self.version));
        h
    }

    async fn post(&self, client: &Client, body: &Value) -> Result<Reply> {
        client
            .post_raw(&self.headers(), serde_json::to_vec(body)?)
            .await
    }

    async fn request(
        &self,
        client: &Client,
        id: u64,
        method: &str,
        params: Value,
    ) -> Result<Reply> {
        self.post(
            client,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await
    }

    async fn stream(
        &self,
        client: &Client,
        id: Value,
        method: &str,
        params: Value,
    ) -> Result<SseStream> {
        client
            .post_stream(
                &self.headers(),
                &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            )
            .await
    }
}

/// Read messages until the response to `id`; returns (messages before it, the response).
async fn until_response(
    stream: &mut SseStream,
    id: &Value,
    within: Duration,
) -> Result<(Vec<Value>, Value)> {
    let mut before = Vec::new();
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(m) = stream.next(left).await else {
            bail!("the stream ended or went quiet before the response; got {before:?}");
        };
        if m.get("method").is_none() && m["id"] == *id {
            return Ok((before, m));
        }
        before.push(m);
    }
}

fn text(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A session started on gateway A serves on gateway B: tools/list with taskSupport (2025-11-25
/// only), a synchronous `sleep` answered on B's stream with `notifications/progress` carrying
/// the status messages, `ping`; `DELETE` on A ends it everywhere.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_started_on_one_gateway_continues_on_another() -> Result<()> {
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (a, b) = (ctx.gateways[0].client(), ctx.gateways[1].client());
    let s = Session::start(&a, "2025-11-25", json!({})).await?;
    let r = s.request(&b, 1, "tools/list", json!({})).await?;
    let tools = r.body["result"]["tools"]
        .as_array()
        .context("tools")?
        .clone();
    let support = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["execution"]["taskSupport"].clone())
    };
    assert_eq!(support("echo"), Some(json!("forbidden")));
    assert_eq!(support("sleep"), Some(json!("optional")));
    assert_eq!(support("ask"), Some(json!("required")));

    let mut stream = s
        .stream(
            &b,
            json!(2),
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 900, "steps": 3},
                   "_meta": {"progressToken": "tok"}}),
        )
        .await?;
    let (before, response) = until_response(&mut stream, &json!(2), WITHIN).await?;
    assert_eq!(text(&response), "slept 900 ms", "{response}");
    let progress: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "progress notifications: {before:?}");
    let mut last = 0.0;
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "tok");
        let n = p["params"]["progress"].as_f64().context("progress")?;
        assert!(n > last, "progress must increase: {progress:?}");
        last = n;
        assert!(
            p["params"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("step ")),
            "{p}"
        );
    }

    let r = s.request(&a, 3, "ping", json!({})).await?;
    assert_eq!(r.body["result"], json!({}), "{}", r.body);
    // 2026-only and unknown methods are -32601 in a session.
    let r = s.request(&b, 4, "subscriptions/listen", json!({})).await?;
    assert_eq!(r.error_code(), Some(-32601), "{}", r.body);

    let res = a
        .send_raw(
            "DELETE",
            "/mcp",
            &[("mcp-session-id", &s.id)],
            Default::default(),
        )
        .await?;
    assert_eq!(res.status(), 204);
    let r = s.request(&b, 5, "ping", json!({})).await?;
    assert_eq!(
        r.status, 404,
        "an ended session is 404 everywhere: {}",
        r.body
    );
    // An id nobody issued is 404 too; a session header on a 2026 request is ignored.
    let mut h = base_headers();
    h.push(("mcp-session-id", "ses_nonesuchnonesuchnonesu"));
    let r = b
        .post_raw(
            &h,
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}))?,
        )
        .await?;
    assert_eq!(r.status, 404);
    // A request that says 2026-07-28 is a 2026 request, session header or not.
    let mut h = Client::headers("tools/list", None);
    h.push(("mcp-session-id", &s.id));
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list",
                      "params": {"_meta": mcp_tasks_tests::meta(&caps_none())}});
    let r = b.post_raw(&h, serde_json::to_vec(&body)?).await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    // A 2025 request without a session is told to initialize.
    let mut h = base_headers();
    h.push(("mcp-protocol-version", "2025-11-25"));
    let r = b
        .post_raw(
            &h,
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}))?,
        )
        .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("send initialize first")),
        "{}",
        r.body
    );
    ctx.cleanup().await;
    Ok(())
}

/// A synchronous call of a tool that asks (2025-06-18, which has no tasks API): the question
/// arrives on the call's stream from gateway A as a real `elicitation/create` request, the
/// client's response is POSTed to gateway B, and the stream ends with the answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_synchronous_call_asks_on_its_stream_and_takes_the_answer_anywhere() -> Result<()> {
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (a, b) = (ctx.gateways[0].client(), ctx.gateways[1].client());
    // Without the elicitation capability the call is refused before any task exists.
    let plain = Session::start(&a, "2025-06-18", json!({})).await?;
    let r = plain
        .request(
            &a,
            1,
            "tools/call",
            json!({"name": "ask", "arguments": {"question": "?"}}),
        )
        .await?;
    assert_eq!(r.error_code(), Some(-32600), "{}", r.body);
    assert!(r.body["error"]["data"]["requiredCapabilities"]["elicitation"].is_object());

    let s = Session::start(&a, "2025-06-18", json!({"elicitation": {}})).await?;
    let r = s.request(&b, 1, "tools/list", json!({})).await?;
    assert!(
        r.body["result"]["tools"][0].get("execution").is_none(),
        "2025-06-18 has no taskSupport: {}",
        r.body
    );
    let mut stream = s
        .stream(
            &a,
            json!("call-1"),
            "tools/call",
            json!({"name": "ask", "arguments": {"question": "Which colour?"}}),
        )
        .await?;
    let ask = stream
        .next(WITHIN)
        .await
        .context("no elicitation request")?;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "Which colour?");
    let ask_id = ask["id"].clone();
    assert!(ask_id.is_string(), "{ask}");
    // An answer of the wrong shape is refused and changes nothing.
    let r = s
        .post(
            &b,
            &json!({"jsonrpc": "2.0", "id": ask_id, "result": {"roots": []}}),
        )
        .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = s
        .post(
            &b,
            &json!({"jsonrpc": "2.0", "id": ask_id,
            "result": {"action": "accept", "content": {"answer": "blue"}}}),
        )
        .await?;
    assert_eq!(r.status, 202, "{}", r.body);
    let (_, response) = until_response(&mut stream, &json!("call-1"), WITHIN).await?;
    assert_eq!(text(&response), "answer: blue", "{response}");
    ctx.cleanup().await;
    Ok(())
}

/// 2025-11-25 tasks API over the same tasks: a task-augmented call returns `{task}`;
/// `tasks/get`, `tasks/list`, `tasks/result` (blocking, related-task `_meta`), `tasks/cancel`;
/// a task created through 2026-07-28 is read through 2025-11-25 and back; taskSupport is
/// enforced with -32601 both ways; a failed task's `tasks/result` is its JSON-RPC error.
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
        let frames: Vec<Value> = String::from_utf8_lossy(&r.raw)
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        let last = frames.last().cloned().context("no frames")?;
        (frames, last)
    };
    assert_eq!(response["error"]["message"], "boom", "{response}");

    // taskSupport enforced.
    let r = s
        .request(
            &a,
            12,
            "tools/call",
            json!({"name": "ask", "arguments": {"question": "?"}}),
        )
        .await?;
    assert_eq!(
        r.error_code(),
        Some(-32601),
        "required without task: {}",
        r.body
    );
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
    let res = b
        .send_raw(
            "GET",
            "/mcp",
            &[("accept", "text/event-stream"), ("mcp-session-id", &s.id)],
            Default::default(),
        )
        .await?;
    assert_eq!(res.status(), 200);
    let mut stream = SseStream::from_response(res);
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

/// A client that leaves a synchronous call cancels its task; `notifications/cancelled` for
/// a call's request id, sent to another gateway, cancels it too.
#[tokio::test(flavor = "multi_thread")]
async fn leaving_or_cancelling_a_synchronous_call_cancels_its_task() -> Result<()> {
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (a, b) = (ctx.gateways[0].client(), ctx.gateways[1].client());
    let s = Session::start(&a, "2025-11-25", json!({})).await?;
    let call = json!({"name": "sleep", "arguments": {"ms": 60000, "steps": 60},
                      "_meta": {"progressToken": 1}});

    let mut stream = s.stream(&a, json!(1), "tools/call", call.clone()).await?;
    stream.next(WITHIN).await.context("no progress")?;
    // A synchronous call's task is not listed; Redis names it.
    let keys = ctx.redis.cli(&["--scan", "--pattern", "mcpt:task:*"])?;
    let task = keys
        .lines()
        .find_map(|k| {
            k.strip_prefix("mcpt:task:{")?
                .split_once('}')
                .map(|(id, _)| id.to_owned())
        })
        .context("no task key")?;
    let r = s
        .request(&b, 2, "tasks/get", json!({"taskId": task}))
        .await?;
    assert_eq!(r.body["result"]["status"], "working", "{}", r.body);
    drop(stream);
    poll_until(WITHIN, || async {
        let r = s
            .request(&b, 3, "tasks/get", json!({"taskId": task}))
            .await
            .ok()?;
        (r.body["result"]["status"] == "cancelled").then_some(())
    })
    .await
    .context("the abandoned call's task was not cancelled")?;

    let mut stream = s.stream(&a, json!("x-7"), "tools/call", call).await?;
    stream.next(WITHIN).await.context("no progress")?;
    let r = s
        .post(
            &b,
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "x-7", "reason": "user"}}),
        )
        .await?;
    assert_eq!(r.status, 202);
    let (_, response) = until_response(&mut stream, &json!("x-7"), WITHIN).await?;
    assert!(
        response["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cancelled")),
        "{response}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// A proxy that cuts connections idle for `idle`; returns its address.
async fn idle_cutting_proxy(upstream: SocketAddr, idle: Duration) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut down, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut dr, mut dw) = down.split();
                let (mut ur, mut uw) = up.split();
                let mut b1 = vec![0u8; 16 << 10];
                let mut b2 = vec![0u8; 16 << 10];
                use tokio::io::AsyncReadExt as _;
                loop {
                    let step = tokio::time::timeout(idle, async {
                        tokio::select! {
                            n = dr.read(&mut b1) => match n {
                                Ok(n) if n > 0 => uw.write_all(&b1[..n]).await.is_ok(),
                                _ => false,
                            },
                            n = ur.read(&mut b2) => match n {
                                Ok(n) if n > 0 => dw.write_all(&b2[..n]).await.is_ok(),
                                _ => false,
                            },
                        }
                    })
                    .await;
                    if !matches!(step, Ok(true)) {
                        return; // idle too long, or closed: both sides are dropped
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// A proxy that closes HTTP streams idle for 30 s does not cut a 60 s synchronous call: the
/// stream carries a keep-alive comment at least every 15 s.
#[tokio::test(flavor = "multi_thread")]
async fn keepalives_carry_a_60_s_call_through_a_30_s_idle_timeout_proxy() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    ctx.wait_for_tools().await?;
    let gateway = ctx.gateways[0].addr;
    let proxy = idle_cutting_proxy(gateway, Duration::from_secs(30)).await?;
    let client = Client::new(proxy);
    let s = Session::start(&client, "2025-06-18", json!({})).await?;
    let started = Instant::now();
    // No steps, no progress token: nothing but keep-alives for 60 s.
    let mut stream = s
        .stream(
            &client,
            json!(1),
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 60000}}),
        )
        .await?;
    let (_, response) = until_response(&mut stream, &json!(1), Duration::from_secs(90)).await?;
    assert_eq!(text(&response), "slept 60000 ms", "{response}");
    assert!(started.elapsed() >= Duration::from_secs(60));
    ctx.cleanup().await;
    Ok(())
}

/// The official TypeScript SDK 1.32.2 (2025-11-25) and 1.22.0 (2025-06-18) clients,
/// unmodified, over Streamable HTTP against two gateways alternately.
#[tokio::test(flavor = "multi_thread")]
async fn official_2025_clients_work_against_two_gateways() -> Result<()> {
    let sdk = repo_root().join("tests/legacy/node_modules/@modelcontextprotocol/sdk");
    assert!(
        sdk.exists(),
        "tests/legacy/node_modules is missing: run `npm ci --prefix tests/legacy` (tests/run-all.sh does)"
    );
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("node")
            .arg("tests/legacy/legacy.mjs")
            .arg(ctx.gateways[0].url())
            .arg(ctx.gateways[1].url())
            .current_dir(repo_root())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("legacy.mjs did not finish within 120 s")??;
    let text = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "legacy.mjs failed:\n{text}");
    assert!(text.contains(" 0 failed"), "no final tally:\n{text}");
    // A 2026 client still gets a 2026 answer on the same endpoint.
    let r = ctx
        .client()
        .request("tools/list", json!({}), &caps_none())
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    ctx.cleanup().await;
    Ok(())
}

/// A session belongs to the principal that started it: another principal using its id gets
/// the same 404 as an unknown session (tokens authentication).
#[tokio::test(flavor = "multi_thread")]
async fn a_session_is_its_principals_only() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("mcpt-legacy-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("tokens");
    std::fs::write(
        &file,
        "alice alice-token-0123456789abcdef\nbob bob-token-0123456789abcdef0000\n",
    )?;
    let env = [
        ("MCPT_AUTH", "tokens".to_owned()),
        ("MCPT_AUTH_TOKENS_FILE", file.display().to_string()),
    ];
    let redis = mcp_tasks_tests::RedisServer::start()?;
    let gateway = mcp_tasks_tests::Gateway::start(&redis.url(), &env)?;
    let _worker = mcp_tasks_tests::Worker::start(&redis.url(), &env)?;
    let base = gateway.client();
    let alice = base.with_token("alice-token-0123456789abcdef");
    let bob = base.with_token("bob-token-0123456789abcdef0000");
    alice.wait_for_tool("sleep").await?;
    let s = Session::start(&alice, "2025-11-25", json!({})).await?;
    let r = s.request(&alice, 1, "ping", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.request(&bob, 2, "ping", json!({})).await?;
    assert_eq!(r.status, 404, "{}", r.body);
    let res = bob
        .send_raw(
            "DELETE",
            "/mcp",
            &[("mcp-session-id", &s.id)],
            Default::default(),
        )
        .await?;
    assert_eq!(res.status(), 404);
    // Without credentials: 401, as for any request.
    let r = s.request(&base, 3, "ping", json!({})).await?;
    assert_eq!(r.status, 401, "{}", r.body);
    let r = s.request(&alice, 4, "ping", json!({})).await?;
    assert_eq!(
        r.status, 200,
        "Alice's session survived Bob's attempts: {}",
        r.body
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
