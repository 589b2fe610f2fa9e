//! A task's life over HTTP: capability negotiation, creation, the shapes `tasks/get` returns
//! for each status, `tasks/update`, `tasks/cancel`, headers and errors
//! (tasks-extension.md §2–§15; checklist T-01…T-57).
//!
//! Each test starts its own Redis, gateway and worker. The [`check`] module holds the shape
//! rules (T-09…T-13, T-57) that `listen.rs` and `cluster_of_two.rs` reuse.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{
    Client, Gateway, Reply, TASKS, TestContext, Worker, caps_none, caps_tasks, meta, poll_until,
};
use serde_json::{Value, json};

use self::check::Kind;

/// Shape rules for task objects, shared by the e2e modules that observe tasks.
pub(crate) mod check {
    use serde_json::Value;

    /// Every status a task may have (T-10).
    pub(crate) const STATUSES: [&str; 5] = [
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ];

    /// The `Task` fields (§5.1).
    const TASK_FIELDS: [&str; 7] = [
        "taskId",
        "status",
        "statusMessage",
        "createdAt",
        "lastUpdatedAt",
        "ttlMs",
        "pollIntervalMs",
    ];

    /// Where a task object came from; each place allows a different envelope.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Kind {
        /// `CreateTaskResult` (`resultType: "task"`, no status payload, T-16).
        Created,
        /// `tasks/get` result (`resultType: "complete"`, T-08).
        Polled,
        /// `notifications/tasks` params (no `resultType`, T-47).
        Notified,
    }

    /// Whether `status` is terminal.
    pub(crate) fn is_terminal(status: &str) -> bool {
        matches!(status, "completed" | "failed" | "cancelled")
    }

    /// Assert `t` is a well-formed task object of `kind` (T-07…T-13, T-16, T-19, T-20).
    pub(crate) fn task(t: &Value, kind: Kind) {
        let obj = t
            .as_object()
            .unwrap_or_else(|| panic!("task is not an object: {t}"));
        let status = t["status"]
            .as_str()
            .unwrap_or_else(|| panic!("status missing or not a string: {t}"));
        assert!(STATUSES.contains(&status), "unknown status {status}: {t}");
        // T-09: required fields.
        assert!(
            t["taskId"].as_str().is_some_and(|s| !s.is_empty()),
            "taskId: {t}"
        );
        let created = ts_ms(
            t["createdAt"]
                .as_str()
                .unwrap_or_else(|| panic!("createdAt: {t}")),
        );
        let updated = ts_ms(
            t["lastUpdatedAt"]
                .as_str()
                .unwrap_or_else(|| panic!("lastUpdatedAt: {t}")),
        );
        assert!(updated >= created, "lastUpdatedAt before createdAt: {t}");
        // T-09, T-11: ttlMs key present, a non-negative integer or null.
        match obj.get("ttlMs") {
            Some(Value::Null) => {}
            Some(v) => assert!(v.is_u64(), "ttlMs not a non-negative integer: {t}"),
            None => panic!("ttlMs key missing: {t}"),
        }
        // T-11, T-12: pollIntervalMs present, a non-negative integer.
        assert!(
            obj.get("pollIntervalMs").is_some_and(Value::is_u64),
            "pollIntervalMs missing or not a non-negative integer: {t}"
        );
        if let Some(m) = obj.get("statusMessage") {
            assert!(m.is_string(), "statusMessage not a string: {t}");
        }
        // The envelope of each kind (T-07, T-08).
        let mut allowed: Vec<&str> = TASK_FIELDS.to_vec();
        match kind {
            Kind::Created => {
                assert_eq!(t["resultType"], "task", "CreateTaskResult: {t}");
                assert_eq!(status, "working", "tasks are seeded working (T-16): {t}");
                allowed.extend(["resultType", "_meta"]);
            }
            Kind::Polled => {
                assert_eq!(t["resultType"], "complete", "tasks/get result: {t}");
                allowed.extend(["resultType", "_meta"]);
            }
            Kind::Notified => {
                assert!(obj.get("resultType").is_none(), "notification: {t}");
                allowed.push("_meta");
            }
        }
        // T-13, T-16, T-19, T-20: exactly the payload of the status, nothing foreign.
        let payload = match (kind, status) {
            (Kind::Created, _) => None,
            (_, "input_required") => Some("inputRequests"),
            (_, "completed") => Some("result"),
            (_, "failed") => Some("error"),
            _ => None,
        };
        if let Some(p) = payload {
            allowed.push(p);
            assert!(obj.contains_key(p), "{status} task without {p}: {t}");
        }
        for key in obj.keys() {
            assert!(
                allowed.contains(&key.as_str()),
                "unexpected top-level field {key:?} on a {status} task ({kind:?}): {t}"
            );
        }
        if let Some(m) = obj.get("_meta") {
            assert!(m.is_object(), "_meta not an object: {t}");
        }
        match payload {
            Some("inputRequests") => {
                let reqs = t["inputRequests"]
                    .as_object()
                    .unwrap_or_else(|| panic!("inputRequests not an object: {t}"));
                assert!(!reqs.is_empty(), "input_required with no requests: {t}");
                for (key, req) in reqs {
                    input_request(key, req);
                }
            }
            Some("result") => call_tool_result(&t["result"]),
            Some("error") => {
                let e = &t["error"];
                assert!(e["code"].is_i64(), "error.code: {t}");
                assert!(e["message"].is_string(), "error.message: {t}");
            }
            _ => {}
        }
    }

    /// A completed `tools/call` task's `result` is a full `CallToolResult` (T-23).
    pub(crate) fn call_tool_result(r: &Value) {
        assert_eq!(
            r["resultType"], "complete",
            "result without resultType: {r}"
        );
        let content = r["content"]
            .as_array()
            .unwrap_or_else(|| panic!("result.content not an array: {r}"));
        for c in content {
            assert!(c["type"].is_string(), "content item without type: {r}");
        }
        if let Some(e) = r.get("isError") {
            assert!(e.is_boolean(), "isError not a boolean: {r}");
        }
    }

    /// One `inputRequests` value is a well-formed request object (T-57).
    pub(crate) fn input_request(key: &str, req: &Value) {
        assert!(
            !key.is_empty() && key.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "key {key:?} is not short printable ASCII"
        );
        let obj = req
            .as_object()
            .unwrap_or_else(|| panic!("inputRequests[{key}] not an object: {req}"));
        for k in obj.keys() {
            assert!(
                k == "method" || k == "params",
                "inputRequests[{key}] has field {k:?} (no jsonrpc/id allowed): {req}"
            );
        }
        let params = &req["params"];
        match req["method"].as_str() {
            Some("elicitation/create") => {
                assert!(params["message"].is_string(), "elicitation message: {req}");
                match params.get("mode").and_then(Value::as_str) {
                    None | Some("form") => {
                        let schema = &params["requestedSchema"];
                        assert_eq!(schema["type"], "object", "requestedSchema: {req}");
                        assert!(schema["properties"].is_object(), "requestedSchema: {req}");
                    }
                    Some("url") => assert!(params["url"].is_string(), "url: {req}"),
                    Some(other) => panic!("unknown elicitation mode {other}: {req}"),
                }
            }
            Some("sampling/createMessage") => {
                assert!(params["messages"].is_array(), "sampling messages: {req}");
                assert!(params["maxTokens"].is_i64(), "sampling maxTokens: {req}");
            }
            Some("roots/list") => {
                assert!(
                    params.is_null() || params.is_object(),
                    "roots/list params: {req}"
                );
            }
            _ => panic!("inputRequests[{key}] has no known method: {req}"),
        }
    }

    /// Whether the state machine allows `from` → `to` (T-17); staying is allowed.
    pub(crate) fn allowed(from: &str, to: &str) -> bool {
        from == to && !is_terminal(from)
            || matches!(
                (from, to),
                (
                    "working",
                    "input_required" | "completed" | "failed" | "cancelled"
                ) | (
                    "input_required",
                    "working" | "completed" | "failed" | "cancelled"
                )
            )
    }

    /// Assert a sequence of observed statuses only takes allowed steps (T-17).
    pub(crate) fn transitions<'a>(statuses: impl IntoIterator<Item = &'a str>) {
        let seen: Vec<&str> = statuses.into_iter().collect();
        for pair in seen.windows(2) {
            assert!(
                allowed(pair[0], pair[1]),
                "illegal transition {} -> {} in {seen:?}",
                pair[0],
                pair[1]
            );
        }
    }

    /// Milliseconds since the epoch of an RFC 3339 UTC timestamp with exactly millisecond
    /// precision and a `Z` suffix, e.g. `2026-08-01T09:30:00.125Z` (T-11). Panics otherwise.
    pub(crate) fn ts_ms(s: &str) -> i64 {
        let b = s.as_bytes();
        let shape_ok = b.len() == 24
            && b.iter().enumerate().all(|(i, c)| match i {
                4 | 7 => *c == b'-',
                10 => *c == b'T',
                13 | 16 => *c == b':',
                19 => *c == b'.',
                23 => *c == b'Z',
                _ => c.is_ascii_digit(),
            });
        assert!(shape_ok, "timestamp {s:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ");
        let n = |r: std::ops::Range<usize>| -> i64 { s[r].parse().expect("digits") };
        let (y, mo, d) = (n(0..4), n(5..7), n(8..10));
        let (h, mi, se, ms) = (n(11..13), n(14..16), n(17..19), n(20..23));
        assert!(
            (1..=12).contains(&mo) && (1..=31).contains(&d) && h < 24 && mi < 60 && se < 61,
            "timestamp {s:?} out of range"
        );
        // Days from civil (H. Hinnant).
        let yy = if mo <= 2 { y - 1 } else { y };
        let era = yy.div_euclid(400);
        let yoe = yy - era * 400;
        let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        ((days * 24 + h) * 60 + mi) * 60_000 + se * 1000 + ms
    }

    /// `v` without the top-level `keys`.
    pub(crate) fn without(v: &Value, keys: &[&str]) -> Value {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            for k in keys {
                o.remove(*k);
            }
        }
        v
    }

    /// The text of the first content item of a `CallToolResult`.
    pub(crate) fn text(result: &Value) -> &str {
        result["content"][0]["text"].as_str().unwrap_or_default()
    }
}

const WITHIN: Duration = Duration::from_secs(10);

/// Capabilities with the extension but without elicitation.
fn caps_ext_only() -> Value {
    json!({"extensions": {TASKS: {}}})
}

/// Capabilities with elicitation but without the extension.
fn caps_elicitation_only() -> Value {
    json!({"elicitation": {}})
}

/// A `tasks/*` request with the `Mcp-Name` header given explicitly (`None` = no header).
async fn task_request_with_name(
    client: &Client,
    method: &str,
    params: Value,
    mcp_name: Option<&str>,
) -> Result<Reply> {
    let mut params = params;
    params["_meta"] = meta(&caps_tasks());
    let body = json!({"jsonrpc": "2.0", "id": "hdr-1", "method": method, "params": params});
    client
        .post_raw(
            &Client::headers(method, mcp_name),
            serde_json::to_vec(&body)?,
        )
        .await
}

/// The whole `tasks/get` reply.
async fn get_reply(client: &Client, id: &str, caps: &Value) -> Result<Reply> {
    client
        .request("tasks/get", json!({"taskId": id}), caps)
        .await
}

/// A `tools/call` that must create a task; returns the `CreateTaskResult`.
async fn create(client: &Client, tool: &str, args: Value) -> Result<Value> {
    let r = client.call(tool, args, &caps_tasks()).await?;
    let result = r.body["result"].clone();
    anyhow::ensure!(
        r.status == 200 && result["resultType"] == "task",
        "{tool} did not create a task: {} {}",
        r.status,
        r.body
    );
    check::task(&result, Kind::Created);
    Ok(result)
}

/// Poll `tasks/get` until `done` holds, returning every distinct snapshot seen (in order).
async fn observe(
    client: &Client,
    id: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Result<Vec<Value>> {
    let deadline = Instant::now() + within;
    let mut seen: Vec<Value> = Vec::new();
    loop {
        let t = client.get(id).await?;
        check::task(&t, Kind::Polled);
        let finished = done(&t);
        if seen.last() != Some(&t) {
            seen.push(t);
        }
        if finished {
            return Ok(seen);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "task {id}: condition not met within {within:?}; seen {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Poll until the task is terminal; the snapshots seen.
async fn until_terminal(client: &Client, id: &str, within: Duration) -> Result<Vec<Value>> {
    observe(client, id, within, |t| {
        check::is_terminal(t["status"].as_str().unwrap_or_default())
    })
    .await
}

fn statuses(seen: &[Value]) -> Vec<&str> {
    seen.iter()
        .map(|t| t["status"].as_str().unwrap_or_default())
        .collect()
}

/// Assert a -32021 answer with HTTP 400 whose `requiredCapabilities` is exactly `required`.
fn assert_missing_capability(r: &Reply, required: &Value) {
    assert_eq!(r.status, 400, "HTTP status of -32021: {}", r.body);
    assert_eq!(r.error_code(), Some(-32021), "{}", r.body);
    assert_eq!(
        r.body["error"]["data"]["requiredCapabilities"], *required,
        "requiredCapabilities lists exactly what is missing: {}",
        r.body
    );
    let msg = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.to_lowercase().contains("capabilit"),
        "message should name the problem (T-53): {msg:?}"
    );
    assert!(r.body.get("result").is_none(), "{}", r.body);
}

fn ext_required() -> Value {
    json!({"extensions": {TASKS: {}}})
}

/// Assert an in-band -32602 "unknown task" answer (T-24, T-32, T-53).
fn assert_unknown_task(r: &Reply, what: &str) {
    assert_eq!(r.error_code(), Some(-32602), "{what}: {}", r.body);
    assert_eq!(r.status, 200, "{what}: -32602 is in-band: {}", r.body);
    let msg = r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        msg.contains("task") && (msg.contains("not found") || msg.contains("unknown")),
        "{what}: message should say the task is unknown (T-53): {msg:?}"
    );
}

/// Assert an empty acknowledgement: `resultType: "complete"` and at most `_meta` (T-27, T-35).
fn assert_empty_ack(r: &Reply, what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", r.body);
    let result = r.body["result"]
        .as_object()
        .unwrap_or_else(|| panic!("{what}: no result: {}", r.body));
    assert_eq!(result.get("resultType"), Some(&json!("complete")), "{what}");
    for k in result.keys() {
        assert!(
            k == "resultType" || k == "_meta",
            "{what}: ack carries {k:?}: {}",
            r.body
        );
    }
}

async fn wait_input_required(client: &Client, id: &str) -> Result<Value> {
    let t = client.wait_status(id, "input_required", WITHIN).await?;
    check::task(&t, Kind::Polled);
    Ok(t)
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// The number of task hashes in Redis.
fn task_count(ctx: &TestContext) -> Result<usize> {
    Ok(ctx
        .redis
        .cli(&["--scan", "--pattern", "mcpt:task:*"])?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count())
}

fn hget(ctx: &TestContext, id: &str, field: &str) -> Result<String> {
    ctx.redis.task_field(id, field)
}

// ---------------------------------------------------------------------------------------
// Negotiation (§2, §3)
// ---------------------------------------------------------------------------------------

/// T-01, T-54: `server/discover` advertises the extension as exactly `{}` and no legacy
/// `tasks` capability.
#[tokio::test]
async fn discover_advertises_the_extension_as_an_empty_object() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let r = ctx
        .client()
        .request("server/discover", json!({}), &caps_none())
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let caps = &r.body["result"]["capabilities"];
    assert_eq!(caps["extensions"][TASKS], json!({}), "{}", r.body);
    assert!(
        caps.get("tasks").is_none(),
        "legacy tasks capability: {caps}"
    );
    assert_eq!(r.body["result"]["resultType"], "complete");
    ctx.cleanup().await;
    Ok(())
}

/// T-03, T-54: a task-capable tool runs synchronously when the request does not declare the
/// extension — whatever earlier requests declared, and however the declaration is malformed
/// (null, non-object, legacy `tasks` capability).
#[tokio::test]
async fn task_is_created_only_when_that_request_declares_the_extension() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    // An earlier request that declares the extension gets a task…
    create(&client, "sleep", json!({"ms": 10})).await?;
    // …and that changes nothing for the next ones.
    for caps in [
        caps_none(),
        caps_elicitation_only(),
        json!({"extensions": {TASKS: null}}),
        json!({"extensions": {TASKS: true}}),
        json!({"extensions": null}),
        json!({"tasks": {"requests": {"tools": {"call": {}}}}}),
    ] {
        let r = client.call("sleep", json!({"ms": 20}), &caps).await?;
        assert_eq!(r.status, 200, "caps {caps}: {}", r.body);
        let result = &r.body["result"];
        assert_eq!(result["resultType"], "complete", "caps {caps}: {}", r.body);
        assert!(result.get("taskId").is_none(), "caps {caps}: {}", r.body);
        assert_eq!(check::text(result), "slept 20 ms", "caps {caps}");
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-02, T-07, T-08: only the `CreateTaskResult` of `tools/call` carries
/// `resultType: "task"`; discover, tools/list, synchronous calls and every `tasks/*` result
/// carry `"complete"`.
#[tokio::test]
async fn only_tools_call_task_handles_carry_result_type_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for method in ["server/discover", "tools/list"] {
        let r = client.request(method, json!({}), &caps_tasks()).await?;
        assert_eq!(r.body["result"]["resultType"], "complete", "{method}");
    }
    let r = client
        .call("echo", json!({"text": "hi"}), &caps_tasks())
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    // Methods that are not tools/call never get a task, even with the extension declared.
    for method in ["prompts/get", "resources/read"] {
        let r = client
            .request(
                method,
                json!({"name": "sleep", "uri": "x:y"}),
                &caps_tasks(),
            )
            .await?;
        assert_ne!(
            r.body["result"]["resultType"], "task",
            "{method}: {}",
            r.body
        );
    }
    let created = create(&client, "ask", json!({"question": "?"})).await?;
    let id = created["taskId"].as_str().context("taskId")?;
    let got = wait_input_required(&client, id).await?;
    assert_eq!(got["resultType"], "complete");
    let r = client
        .update(id, json!({"answer-1": accept(json!({"answer": "x"}))}))
        .await?;
    assert_empty_ack(&r, "tasks/update");
    let done = client.wait_status(id, "completed", WITHIN).await?;
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["result"]["resultType"], "complete");
    let r = client.cancel(id).await?;
    assert_empty_ack(&r, "tasks/cancel");
    ctx.cleanup().await;
    Ok(())
}

/// T-04: task-only tools without the extension get -32021 (HTTP 400) naming exactly the
/// extension, and no task is created.
#[tokio::test]
async fn task_only_tool_without_extension_is_missing_capability() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("ask", json!({"question": "?"}), &caps_elicitation_only())
        .await?;
    assert_missing_capability(&r, &ext_required());
    let r = client.call("failing_job", json!({}), &caps_none()).await?;
    assert_missing_capability(&r, &ext_required());
    assert_eq!(task_count(&ctx)?, 0, "a rejected call created a task");
    ctx.cleanup().await;
    Ok(())
}

/// T-04, T-45: a tool that will ask through elicitation is refused up front when the call
/// does not declare elicitation; `requiredCapabilities` lists everything missing.
#[tokio::test]
async fn tool_needing_elicitation_without_it_is_missing_capability() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("ask", json!({"question": "?"}), &caps_ext_only())
        .await?;
    assert_missing_capability(&r, &json!({"elicitation": {}}));
    let r = client
        .call("confirm_delete", json!({"filename": "a"}), &caps_ext_only())
        .await?;
    assert_missing_capability(&r, &json!({"elicitation": {}}));
    let r = client
        .call("ask", json!({"question": "?"}), &caps_none())
        .await?;
    assert_missing_capability(&r, &json!({"elicitation": {}, "extensions": {TASKS: {}}}));
    // URL-mode elicitation alone does not cover a form request.
    let r = client
        .call(
            "ask",
            json!({"question": "?"}),
            &json!({"elicitation": {"url": {}}, "extensions": {TASKS: {}}}),
        )
        .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.error_code(), Some(-32021), "{}", r.body);
    assert!(
        r.body["error"]["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{}",
        r.body
    );
    assert_eq!(task_count(&ctx)?, 0, "a rejected call created a task");
    // Form mode declared explicitly is enough.
    let r = client
        .call(
            "ask",
            json!({"question": "?"}),
            &json!({"elicitation": {"form": {}}, "extensions": {TASKS: {}}}),
        )
        .await?;
    assert_eq!(r.body["result"]["resultType"], "task", "{}", r.body);
    ctx.cleanup().await;
    Ok(())
}

/// T-05: `tasks/get`, `tasks/update`, `tasks/cancel` without the extension get -32021
/// (HTTP 400) for a real and for an unknown id, and change nothing.
#[tokio::test]
async fn task_methods_without_extension_are_missing_capability() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "?"})).await?;
    let id = created["taskId"].as_str().context("taskId")?;
    let before = wait_input_required(&client, id).await?;
    for task_id in [id, "tsk_AAAAAAAAAAAAAAAAAAAAAA"] {
        for (method, params) in [
            ("tasks/get", json!({"taskId": task_id})),
            (
                "tasks/update",
                json!({"taskId": task_id, "inputResponses": {"answer-1": accept(json!({"answer": "x"}))}}),
            ),
            ("tasks/cancel", json!({"taskId": task_id})),
        ] {
            let r = client
                .request(method, params, &caps_elicitation_only())
                .await?;
            assert_missing_capability(&r, &ext_required());
        }
    }
    assert_eq!(
        client.get(id).await?,
        before,
        "a rejected request changed the task"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-06: `subscriptions/listen` with `taskIds` but without the extension gets a plain JSON
/// -32021 (HTTP 400), not a stream.
#[tokio::test]
async fn listen_for_tasks_without_extension_is_missing_capability() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let id = client.start_task("sleep", json!({"ms": 5000})).await?;
    let body = json!({
        "jsonrpc": "2.0", "id": "listen-x", "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": [id]}, "_meta": meta(&caps_elicitation_only())}
    });
    let r = client
        .post_raw(
            &Client::headers("subscriptions/listen", None),
            serde_json::to_vec(&body)?,
        )
        .await?;
    let ctype = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(
        ctype.starts_with("application/json"),
        "content-type {ctype:?}"
    );
    assert_missing_capability(&r, &ext_required());
    assert_eq!(r.body["id"], "listen-x");
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Creation and shapes (§5, §7)
// ---------------------------------------------------------------------------------------

/// T-09, T-12, T-13, T-14, T-16, T-42, T-52: the `CreateTaskResult` is a working task with
/// exactly the task fields, ids are header-safe with ≥ 22 random characters, the task is
/// readable at once on another gateway, and its Redis key lives no longer than `ttlMs`.
#[tokio::test]
async fn create_task_result_is_durable_and_well_formed() -> Result<()> {
    let mut ctx = TestContext::start(1, 1).await?;
    ctx.gateways.push(Gateway::start(&ctx.redis.url(), &[])?);
    let a = ctx.gateways[0].client();
    let b = ctx.gateways[1].client();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = create(&a, "sleep", json!({"ms": 3000})).await?;
        let id = created["taskId"].as_str().context("taskId")?.to_owned();
        // T-14: readable at once, on any replica.
        let got = get_reply(&b, &id, &caps_tasks()).await?;
        assert_eq!(got.status, 200, "{}", got.body);
        let got = &got.body["result"];
        check::task(got, Kind::Polled);
        assert_eq!(got["taskId"], id.as_str());
        assert_eq!(got["createdAt"], created["createdAt"]);
        assert_eq!(got["ttlMs"], created["ttlMs"]);
        assert_eq!(got["pollIntervalMs"], created["pollIntervalMs"]);
        // T-52: a finite TTL backs the Redis key's expiry.
        let ttl = created["ttlMs"].as_i64().context("ttlMs is an integer")?;
        assert!(ttl > 0, "ttlMs {ttl}");
        let pttl: i64 = ctx
            .redis
            .cli(&["PTTL", &ctx.redis.task_key(&id)?])?
            .trim()
            .parse()?;
        // Kept at least until the TTL, plus up to a minute so an expiry stays readable.
        assert!(
            pttl > ttl - 60_000 && pttl <= ttl + 60_000,
            "PTTL {pttl} vs ttlMs {ttl}"
        );
        ids.push(id);
    }
    // T-42: charset, length, no shared random part.
    for id in &ids {
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "id {id:?} not [A-Za-z0-9_-]+"
        );
        let random = id
            .split_once('_')
            .filter(|(p, _)| p.bytes().all(|b| b.is_ascii_lowercase()))
            .map_or(id.as_str(), |(_, r)| r);
        assert!(
            random.len() >= 22,
            "id {id:?} has too few random characters"
        );
    }
    for (i, x) in ids.iter().enumerate() {
        for y in &ids[i + 1..] {
            let differing = x.bytes().zip(y.bytes()).filter(|(p, q)| p != q).count();
            assert!(differing >= 10, "ids look related: {x} {y}");
        }
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-09…T-13, T-19, T-20, T-23: each status is reported with exactly its own fields, well
/// typed, in RFC 3339 millisecond UTC, whatever the status.
#[tokio::test]
async fn every_status_has_exactly_its_fields() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let working = create(&client, "sleep", json!({"ms": 20_000, "steps": 2})).await?;
    let working = working["taskId"].as_str().context("id")?.to_owned();
    let asking = create(&client, "ask", json!({"question": "Colour?"})).await?;
    let asking = asking["taskId"].as_str().context("id")?.to_owned();
    let done = create(&client, "sleep", json!({"ms": 10})).await?;
    let done = done["taskId"].as_str().context("id")?.to_owned();
    let failed = create(&client, "fail", json!({"mode": "protocol", "message": "x"})).await?;
    let failed = failed["taskId"].as_str().context("id")?.to_owned();

    let t = client.wait_status(&working, "working", WITHIN).await?;
    check::task(&t, Kind::Polled);
    wait_input_required(&client, &asking).await?;
    let t = client.wait_status(&done, "completed", WITHIN).await?;
    check::task(&t, Kind::Polled);
    let t = client.wait_status(&failed, "failed", WITHIN).await?;
    check::task(&t, Kind::Polled);
    client.cancel(&working).await?;
    let t = client.wait_status(&working, "cancelled", WITHIN).await?;
    check::task(&t, Kind::Polled);
    // createdAt is the real time of creation.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let created = check::ts_ms(t["createdAt"].as_str().context("createdAt")?);
    assert!(
        (now - created).abs() < 120_000,
        "createdAt {created} vs now {now}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-11, T-17: across the polls of a stepping sleep, `lastUpdatedAt` never goes backwards,
/// `createdAt` never changes, and every status change is an allowed one.
#[tokio::test]
async fn last_updated_at_never_decreases() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 600, "steps": 6})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let seen = until_terminal(&client, id, WITHIN).await?;
    let mut last = check::ts_ms(created["lastUpdatedAt"].as_str().context("lastUpdatedAt")?);
    for t in &seen {
        assert_eq!(t["createdAt"], created["createdAt"], "createdAt changed");
        let updated = check::ts_ms(t["lastUpdatedAt"].as_str().context("lastUpdatedAt")?);
        assert!(updated >= last, "lastUpdatedAt went back: {seen:?}");
        last = updated;
    }
    // The step messages were observable changes, each with its own lastUpdatedAt.
    assert!(
        seen.iter().any(|t| t["statusMessage"] == "step 6/6"),
        "no step 6/6 seen: {seen:?}"
    );
    let mut all = vec!["working"];
    all.extend(statuses(&seen));
    check::transitions(all);
    assert_eq!(seen.last().context("seen")?["status"], "completed");
    ctx.cleanup().await;
    Ok(())
}

/// T-15, T-16: `test_tool_with_task` asks its MRTR question on `tools/call` before any task
/// exists; the retry with the answer gets a plain `CreateTaskResult`, and the task uses it.
#[tokio::test]
async fn mrtr_round_comes_before_the_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("test_tool_with_task", json!({}), &caps_tasks())
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let round1 = &r.body["result"];
    assert_eq!(round1["resultType"], "input_required", "{}", r.body);
    assert!(
        round1.get("taskId").is_none(),
        "round 1 created a task: {round1}"
    );
    let reqs = round1["inputRequests"]
        .as_object()
        .context("inputRequests")?;
    assert!(reqs.contains_key("user_name"), "{round1}");
    for (k, v) in reqs {
        check::input_request(k, v);
    }
    assert_eq!(
        task_count(&ctx)?,
        0,
        "a task exists before the MRTR round finished"
    );

    let mut params = json!({
        "name": "test_tool_with_task",
        "arguments": {},
        "inputResponses": {"user_name": accept(json!({"name": "Ada"}))},
    });
    if let Some(state) = round1.get("requestState") {
        params["requestState"] = state.clone();
    }
    let r = client.request("tools/call", params, &caps_tasks()).await?;
    let created = &r.body["result"];
    assert_eq!(created["resultType"], "task", "{}", r.body);
    check::task(created, Kind::Created);
    for absent in ["inputRequests", "requestState", "result", "error"] {
        assert!(
            created.get(absent).is_none(),
            "{absent} on CreateTaskResult"
        );
    }
    let id = created["taskId"].as_str().context("id")?;
    let seen = until_terminal(&client, id, WITHIN).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    let text = check::text(&last["result"]);
    assert!(
        text.contains("Ada"),
        "result does not use the MRTR answer: {text:?}"
    );
    // The MRTR key is not a task key: the task never asked for it.
    assert!(
        seen.iter().all(|t| t.get("inputRequests").is_none()),
        "{seen:?}"
    );
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Results and errors of the work (§6)
// ---------------------------------------------------------------------------------------

/// T-20, T-21, T-23: a finished sleep is `completed` with a full `CallToolResult`.
#[tokio::test]
async fn completed_task_carries_the_full_call_tool_result() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 30})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let t = client.wait_status(id, "completed", WITHIN).await?;
    check::task(&t, Kind::Polled);
    assert_eq!(t["result"]["resultType"], "complete");
    assert_eq!(t["result"]["content"][0]["type"], "text");
    assert_eq!(check::text(&t["result"]), "slept 30 ms");
    assert_ne!(t["result"]["isError"], true);
    ctx.cleanup().await;
    Ok(())
}

/// T-20, T-21, T-22: a JSON-RPC error ends the task `failed` with that error and a
/// diagnostic `statusMessage`.
#[tokio::test]
async fn protocol_error_ends_failed_with_error_and_message() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for (tool, args, message) in [
        (
            "fail",
            json!({"mode": "protocol", "message": "disk on fire 42"}),
            "disk on fire 42",
        ),
        (
            "protocol_error_job",
            json!({}),
            "the job broke with a protocol error",
        ),
    ] {
        let created = create(&client, tool, args).await?;
        let id = created["taskId"].as_str().context("id")?;
        let seen = until_terminal(&client, id, WITHIN).await?;
        let t = seen.last().context("seen")?;
        assert_eq!(t["status"], "failed", "{tool}: {t}");
        assert_eq!(t["error"]["code"], -32603, "{tool}: {t}");
        assert_eq!(t["error"]["message"], message, "{tool}: {t}");
        let sm = t["statusMessage"].as_str().unwrap_or_default();
        assert!(
            !sm.trim().is_empty(),
            "{tool}: failed without statusMessage: {t}"
        );
        assert!(t.get("result").is_none());
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-21, T-23: tool-level errors are `completed` with `isError: true`, never `failed`.
#[tokio::test]
async fn tool_error_ends_completed_with_is_error() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for (tool, args, text) in [
        (
            "fail",
            json!({"mode": "tool", "message": "bad input 7"}),
            "bad input 7",
        ),
        ("failing_job", json!({}), "the job failed at the tool level"),
    ] {
        let created = create(&client, tool, args).await?;
        let id = created["taskId"].as_str().context("id")?;
        let seen = until_terminal(&client, id, WITHIN).await?;
        assert!(
            !statuses(&seen).contains(&"failed"),
            "{tool}: a tool error was reported failed: {seen:?}"
        );
        let t = seen.last().context("seen")?;
        assert_eq!(t["status"], "completed", "{tool}: {t}");
        assert_eq!(t["result"]["isError"], true, "{tool}: {t}");
        assert_eq!(check::text(&t["result"]), text, "{tool}");
        assert!(t.get("error").is_none());
    }
    ctx.cleanup().await;
    Ok(())
}

/// Policy: without the extension, `sleep` answers a plain `CallToolResult` and `fail`
/// protocol answers that JSON-RPC error; a synchronous tool stays synchronous with it.
#[tokio::test]
async fn synchronous_answers_follow_the_tool_policy() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("sleep", json!({"ms": 50}), &caps_none())
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    assert_eq!(check::text(&r.body["result"]), "slept 50 ms");
    check::call_tool_result(&r.body["result"]);

    let r = client
        .call(
            "fail",
            json!({"mode": "protocol", "message": "kaput 9"}),
            &caps_none(),
        )
        .await?;
    assert_eq!(r.error_code(), Some(-32603), "{}", r.body);
    assert_eq!(r.body["error"]["message"], "kaput 9", "{}", r.body);
    assert!(r.body.get("result").is_none());

    let r = client
        .call(
            "fail",
            json!({"mode": "tool", "message": "meh"}),
            &caps_none(),
        )
        .await?;
    assert_eq!(r.body["result"]["isError"], true, "{}", r.body);

    let r = client
        .call("echo", json!({"text": "sync please"}), &caps_tasks())
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    assert!(r.body["result"].get("taskId").is_none(), "{}", r.body);
    assert_eq!(check::text(&r.body["result"]), "sync please");
    ctx.cleanup().await;
    Ok(())
}

/// T-54: a legacy 2025-11-25 `task` parameter on `tools/call` is ignored.
#[tokio::test]
async fn legacy_task_parameter_is_ignored() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for caps in [caps_none(), caps_tasks()] {
        let r = client
            .request(
                "tools/call",
                json!({"name": "greet", "arguments": {"name": "Bo"}, "task": {"ttl": 60000}}),
                &caps,
            )
            .await?;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
        assert_eq!(check::text(&r.body["result"]), "Hello, Bo!");
    }
    // Without the extension the legacy parameter does not turn a call into a task either.
    let r = client
        .request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 10}, "task": {"ttl": 60000}}),
            &caps_none(),
        )
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    assert_eq!(check::text(&r.body["result"]), "slept 10 ms");
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Polling (§8)
// ---------------------------------------------------------------------------------------

/// T-24, T-53: `tasks/get` of an unknown or odd id is -32602 saying the task is unknown.
#[tokio::test]
async fn get_of_unknown_id_is_invalid_params() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let long = "x".repeat(300);
    for id in [
        "tsk_AAAAAAAAAAAAAAAAAAAAAA",
        "not/a:task*id",
        "../../etc/passwd",
        long.as_str(),
    ] {
        let r = get_reply(&client, id, &caps_tasks()).await?;
        assert_unknown_task(&r, &format!("tasks/get {id}"));
    }
    // A non-ASCII id travels Base64-wrapped in Mcp-Name; it is simply unknown.
    let odd = "tsk_\u{e9}\u{2713}";
    let sentinel = format!("=?base64?{}?=", base64_encode(odd.as_bytes()));
    let r = task_request_with_name(
        &client,
        "tasks/get",
        json!({"taskId": odd}),
        Some(&sentinel),
    )
    .await?;
    assert_unknown_task(&r, "tasks/get of a non-ASCII id");
    // taskId of the wrong type.
    let r = client
        .request("tasks/get", json!({"taskId": 12}), &caps_tasks())
        .await?;
    assert!(
        r.error_code().is_some(),
        "numeric taskId accepted: {}",
        r.body
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-19, T-26, T-57: an `input_required` task lists its outstanding request, well formed,
/// and two polls of the unchanged task are identical.
#[tokio::test]
async fn input_required_task_lists_its_request_and_polls_are_pure() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Favourite colour?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let t = wait_input_required(&client, id).await?;
    let reqs = t["inputRequests"].as_object().context("inputRequests")?;
    assert_eq!(reqs.keys().collect::<Vec<_>>(), ["answer-1"], "{t}");
    let req = &t["inputRequests"]["answer-1"];
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(req["params"]["message"], "Favourite colour?");
    assert_eq!(
        req["params"]["requestedSchema"],
        json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
    );
    let a = get_reply(&client, id, &caps_tasks()).await?;
    let b = get_reply(&client, id, &caps_tasks()).await?;
    assert_eq!(a.body["result"], b.body["result"], "two polls differ");
    assert_eq!(a.body["result"], t, "polls differ");
    ctx.cleanup().await;
    Ok(())
}

/// T-57: the input requests of every asking tool are well-formed request objects.
#[tokio::test]
async fn input_requests_are_well_formed() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for (tool, args, keys) in [
        ("ask", json!({"question": "q"}), vec!["answer-1"]),
        (
            "confirm_delete",
            json!({"filename": "f.txt"}),
            vec!["confirm"],
        ),
        ("multi_input", json!({}), vec!["color", "name"]),
    ] {
        let created = create(&client, tool, args).await?;
        let id = created["taskId"].as_str().context("id")?;
        let t = wait_input_required(&client, id).await?;
        let mut got: Vec<&str> = t["inputRequests"]
            .as_object()
            .context("inputRequests")?
            .keys()
            .map(String::as_str)
            .collect();
        got.sort_unstable();
        assert_eq!(got, keys, "{tool}: {t}");
        client.cancel(id).await?;
    }
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// tasks/update (§9)
// ---------------------------------------------------------------------------------------

/// T-17, T-27, T-28, T-31: answering the ask returns an empty ack, the task goes back to
/// working and completes with the answer; the answered key never appears again.
#[tokio::test]
async fn answering_the_ask_completes_the_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = observe(&client, id, WITHIN, |t| t["status"] == "input_required").await?;
    let r = client
        .update(id, json!({"answer-1": accept(json!({"answer": "Grace"}))}))
        .await?;
    assert_empty_ack(&r, "tasks/update");
    let after = until_terminal(&client, id, WITHIN).await?;
    let last = after.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(check::text(&last["result"]), "answer: Grace");
    assert_ne!(last["result"]["isError"], true);
    // T-28: the answered key is never outstanding again.
    for t in &after {
        if t["status"] == "input_required" {
            assert!(
                t["inputRequests"].get("answer-1").is_none(),
                "answered key reappeared: {after:?}"
            );
        }
    }
    let mut all = vec!["working"];
    all.extend(statuses(&before));
    all.extend(statuses(&after));
    check::transitions(all);
    ctx.cleanup().await;
    Ok(())
}

/// Decline is tool logic: `ask` completes with `isError` (T-21), not `failed`.
#[tokio::test]
async fn declined_ask_completes_with_is_error() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    let r = client
        .update(id, json!({"answer-1": {"action": "decline"}}))
        .await?;
    assert_empty_ack(&r, "tasks/update decline");
    let seen = until_terminal(&client, id, WITHIN).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["result"]["isError"], true, "{last}");
    ctx.cleanup().await;
    Ok(())
}

/// T-29: an answer for a key that was never issued is ignored and acknowledged; the task
/// stays `input_required` with its request, unchanged.
#[tokio::test]
async fn answer_for_unknown_key_is_ignored_and_acknowledged() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = wait_input_required(&client, id).await?;
    let r = client
        .update(id, json!({"answer-9": accept(json!({"answer": "x"}))}))
        .await?;
    assert_empty_ack(&r, "tasks/update unknown key");
    let after = client.get(id).await?;
    assert_eq!(after, before, "an ignored answer changed the task");
    // Garbage under an unknown key is ignored too: only outstanding keys are validated.
    let r = client.update(id, json!({"zzz": "not an answer"})).await?;
    assert_empty_ack(&r, "tasks/update unknown key, junk answer");
    assert_eq!(client.get(id).await?, before);
    // A valid answer beside junk for an unknown key is applied.
    let r = client
        .update(
            id,
            json!({"answer-1": accept(json!({"answer": "kept"})), "zzz": "junk"}),
        )
        .await?;
    assert_empty_ack(&r, "tasks/update valid answer plus junk");
    let seen = until_terminal(&client, id, WITHIN).await?;
    assert_eq!(
        check::text(&seen.last().context("seen")?["result"]),
        "answer: kept"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-19, T-30, T-31: answering one of two outstanding keys keeps the task
/// `input_required` with only the other; answering that one completes it.
#[tokio::test]
async fn partial_answers_keep_the_task_waiting() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "multi_input", json!({})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    let r = client
        .update(id, json!({"name": accept(json!({"name": "Ada"}))}))
        .await?;
    assert_empty_ack(&r, "partial update");
    let t = client.get(id).await?;
    check::task(&t, Kind::Polled);
    assert_eq!(t["status"], "input_required", "{t}");
    let keys: Vec<&String> = t["inputRequests"]
        .as_object()
        .context("reqs")?
        .keys()
        .collect();
    assert_eq!(
        keys,
        ["color"],
        "only the unanswered key stays outstanding: {t}"
    );
    let r = client
        .update(id, json!({"color": accept(json!({"name": "teal"}))}))
        .await?;
    assert_empty_ack(&r, "final update");
    let seen = until_terminal(&client, id, WITHIN).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    let text = check::text(&last["result"]);
    assert!(
        text.contains("name=Ada") && text.contains("color=teal"),
        "{text:?}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-32, T-53: `tasks/update` and `tasks/cancel` of an unknown id are -32602.
#[tokio::test]
async fn update_and_cancel_of_unknown_id_are_invalid_params() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for id in ["tsk_AAAAAAAAAAAAAAAAAAAAAA", "not/a:task*id"] {
        let r = client
            .update(id, json!({"answer-1": accept(json!({"answer": "x"}))}))
            .await?;
        assert_unknown_task(&r, &format!("tasks/update {id}"));
        let r = client.cancel(id).await?;
        assert_unknown_task(&r, &format!("tasks/cancel {id}"));
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-33, T-53: `inputResponses` that is not an object, or a malformed answer for an
/// outstanding key, is -32602 and records nothing.
#[tokio::test]
async fn malformed_input_responses_are_rejected_and_change_nothing() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = wait_input_required(&client, id).await?;
    for bad in [json!("oops"), json!([]), json!(null), json!(7)] {
        let r = client.update(id, bad.clone()).await?;
        assert_eq!(
            r.error_code(),
            Some(-32602),
            "inputResponses {bad}: {}",
            r.body
        );
        let msg = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("inputResponses"), "message {msg:?}");
    }
    let r = client
        .request("tasks/update", json!({"taskId": id}), &caps_tasks())
        .await?;
    assert_eq!(
        r.error_code(),
        Some(-32602),
        "missing inputResponses: {}",
        r.body
    );
    for bad in [
        json!({"answer-1": {"action": "maybe"}}),
        json!({"answer-1": "yes"}),
        json!({"answer-1": {"action": "accept", "content": {"answer": {"deep": 1}}}}),
        // A valid answer elsewhere does not rescue a malformed one: nothing is recorded.
        json!({"answer-1": {"action": "maybe"}, "answer-9": accept(json!({"answer": "x"}))}),
    ] {
        let r = client.update(id, bad.clone()).await?;
        assert_eq!(r.error_code(), Some(-32602), "answer {bad}: {}", r.body);
        let msg = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("answer-1"),
            "message should name the key: {msg:?}"
        );
        let now = client.get(id).await?;
        assert_eq!(now, before, "a rejected update changed the task");
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-34: the same `tasks/update` twice: the second is a no-op ack; the first answer stands.
#[tokio::test]
async fn repeated_update_is_a_noop() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "multi_input", json!({})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    let first = json!({"name": accept(json!({"name": "Ada"}))});
    assert_empty_ack(&client.update(id, first.clone()).await?, "first update");
    let once = client.get(id).await?;
    assert_empty_ack(&client.update(id, first).await?, "same update again");
    assert_eq!(
        client.get(id).await?,
        once,
        "a repeated update changed the task"
    );
    let other = json!({"name": accept(json!({"name": "Bob"}))});
    assert_empty_ack(&client.update(id, other).await?, "answered key again");
    assert_eq!(
        client.get(id).await?,
        once,
        "an answered key was applied twice"
    );
    client
        .update(id, json!({"color": accept(json!({"name": "red"}))}))
        .await?;
    let seen = until_terminal(&client, id, WITHIN).await?;
    let text = check::text(&seen.last().context("seen")?["result"]).to_owned();
    assert!(text.contains("name=Ada"), "first answer lost: {text:?}");
    assert!(!text.contains("Bob"), "second answer applied: {text:?}");
    ctx.cleanup().await;
    Ok(())
}

/// T-56: more than 64 answers in one `tasks/update` is -32602 and changes nothing.
#[tokio::test]
async fn oversize_input_responses_are_rejected() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = wait_input_required(&client, id).await?;
    let mut many = serde_json::Map::new();
    many.insert("answer-1".into(), accept(json!({"answer": "x"})));
    for i in 0..64 {
        many.insert(format!("extra-{i}"), accept(json!({"answer": "y"})));
    }
    let r = client.update(id, Value::Object(many)).await?;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.body);
    let msg = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("inputResponses"), "message {msg:?}");
    assert_eq!(
        client.get(id).await?,
        before,
        "an oversize update changed the task"
    );
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// tasks/cancel and terminal states (§6, §10)
// ---------------------------------------------------------------------------------------

/// T-17, T-18, T-37: a completed task never changes: cancel and update are acknowledged
/// and the next poll is identical.
#[tokio::test]
async fn terminal_task_never_changes() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    client
        .update(id, json!({"answer-1": accept(json!({"answer": "Lin"}))}))
        .await?;
    client.wait_status(id, "completed", WITHIN).await?;
    let before = get_reply(&client, id, &caps_tasks()).await?;
    assert_empty_ack(&client.cancel(id).await?, "cancel of completed");
    assert_empty_ack(
        &client
            .update(id, json!({"answer-1": accept(json!({"answer": "Other"}))}))
            .await?,
        "update of completed",
    );
    assert_empty_ack(&client.cancel(id).await?, "second cancel of completed");
    let after = get_reply(&client, id, &caps_tasks()).await?;
    assert_eq!(
        after.body["result"], before.body["result"],
        "terminal task changed"
    );

    // Same for a cancelled task: nothing moves it back.
    let created = create(&client, "sleep", json!({"ms": 20_000})).await?;
    let id = created["taskId"].as_str().context("id")?;
    client.cancel(id).await?;
    let cancelled = client.wait_status(id, "cancelled", WITHIN).await?;
    client.cancel(id).await?;
    client
        .update(id, json!({"x": {"action": "cancel"}}))
        .await?;
    assert_eq!(client.get(id).await?, cancelled, "cancelled task changed");
    ctx.cleanup().await;
    Ok(())
}

/// T-35, T-36, T-37: cancelling a running sleep is acknowledged at once and the task ends
/// `cancelled` within a few seconds, and stays so.
#[tokio::test]
async fn cancel_of_running_task_ends_cancelled() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 60_000, "steps": 1})).await?;
    let id = created["taskId"].as_str().context("id")?;
    observe(&client, id, WITHIN, |t| t["statusMessage"] == "step 1/1").await?;
    let asked = Instant::now();
    let r = client.cancel(id).await?;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "cancel ack waited {:?}",
        asked.elapsed()
    );
    assert_empty_ack(&r, "tasks/cancel");
    let seen = until_terminal(&client, id, Duration::from_secs(5)).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "cancelled", "{last}");
    for absent in ["result", "error", "inputRequests"] {
        assert!(last.get(absent).is_none(), "{absent} on cancelled: {last}");
    }
    let mut all = vec!["working"];
    all.extend(statuses(&seen));
    check::transitions(all);
    assert_eq!(client.get(id).await?, *last, "cancelled task changed");
    ctx.cleanup().await;
    Ok(())
}

/// T-36, T-37: cancelling an `input_required` task ends it `cancelled` without its requests.
#[tokio::test]
async fn cancel_of_input_required_task_ends_cancelled() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    assert_empty_ack(&client.cancel(id).await?, "tasks/cancel");
    let seen = until_terminal(&client, id, Duration::from_secs(5)).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "cancelled", "{last}");
    assert!(last.get("inputRequests").is_none(), "{last}");
    // A late answer is ignored.
    assert_empty_ack(
        &client
            .update(id, json!({"answer-1": accept(json!({"answer": "late"}))}))
            .await?,
        "late update",
    );
    assert_eq!(client.get(id).await?, *last);
    ctx.cleanup().await;
    Ok(())
}

/// T-37: a queued task (its only worker busy) that is cancelled ends `cancelled` without
/// ever running, and stays cancelled once the worker is free and reads the job.
#[tokio::test]
async fn cancel_of_queued_task_ends_cancelled_without_running() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_CONCURRENCY", "1".to_owned())]).await?;
    let client = ctx.client();
    let busy = create(&client, "sleep", json!({"ms": 60_000, "steps": 1})).await?;
    let busy = busy["taskId"].as_str().context("id")?.to_owned();
    observe(&client, &busy, WITHIN, |t| t["statusMessage"] == "step 1/1").await?;
    let queued = create(&client, "sleep", json!({"ms": 10})).await?;
    let queued = queued["taskId"].as_str().context("id")?.to_owned();
    assert_empty_ack(&client.cancel(&queued).await?, "cancel queued");
    let t = client
        .wait_status(&queued, "cancelled", Duration::from_secs(5))
        .await?;
    check::task(&t, Kind::Polled);
    // Free the worker; it reads the cancelled job and must skip it.
    assert_empty_ack(&client.cancel(&busy).await?, "cancel busy");
    client.wait_status(&busy, "cancelled", WITHIN).await?;
    poll_until(WITHIN, || async {
        let len = ctx
            .redis
            .cli(&["XLEN", &mcp_tasks_shared::store::keys::queue_key("default")])
            .ok()?;
        (len.trim() == "0").then_some(())
    })
    .await
    .context("the queued job was never read")?;
    assert_eq!(client.get(&queued).await?, t, "the cancelled task changed");
    assert_eq!(
        hget(&ctx, &queued, "worker")?,
        "",
        "the cancelled task was run"
    );
    // A fresh job still runs on that worker.
    let after = create(&client, "sleep", json!({"ms": 10})).await?;
    let after = after["taskId"].as_str().context("id")?;
    client.wait_status(after, "completed", WITHIN).await?;
    ctx.cleanup().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Methods and headers (§11, §14)
// ---------------------------------------------------------------------------------------

/// T-39, T-41, T-53: `tasks/list` and `tasks/result` do not exist: 404 / -32601, even
/// without `Mcp-Name`.
#[tokio::test]
async fn tasks_list_and_result_are_method_not_found() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let id = client.start_task("sleep", json!({"ms": 10})).await?;
    for (method, params) in [
        ("tasks/list", json!({})),
        ("tasks/result", json!({"taskId": id})),
    ] {
        let r = client.request(method, params, &caps_tasks()).await?;
        assert_eq!(r.status, 404, "{method}: {}", r.body);
        assert_eq!(r.error_code(), Some(-32601), "{method}: {}", r.body);
        let msg = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(method), "{method}: message {msg:?}");
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-40, T-41, T-53: `tasks/*` need `Mcp-Name` equal to `params.taskId` (after Base64
/// sentinel decoding); a missing or different one is 400 / -32020 and changes nothing.
#[tokio::test]
async fn mcp_name_must_match_task_id() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = wait_input_required(&client, id).await?;
    let other = client.start_task("sleep", json!({"ms": 10})).await?;
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        ("tasks/cancel", json!({"taskId": id})),
        (
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"answer-1": accept(json!({"answer": "h"}))}}),
        ),
    ] {
        for name in [Some(other.as_str()), None] {
            let r = task_request_with_name(&client, method, params.clone(), name).await?;
            assert_eq!(r.status, 400, "{method} Mcp-Name {name:?}: {}", r.body);
            assert_eq!(
                r.error_code(),
                Some(-32020),
                "{method} {name:?}: {}",
                r.body
            );
            let msg = r.body["error"]["message"].as_str().unwrap_or_default();
            assert!(
                msg.to_lowercase().contains("mcp-name"),
                "message should name the header: {msg:?}"
            );
        }
    }
    assert_eq!(
        client.get(id).await?,
        before,
        "a rejected request changed the task"
    );
    // The sentinel form of the right id is the same id.
    let sentinel = format!("=?base64?{}?=", base64_encode(id.as_bytes()));
    let r = task_request_with_name(&client, "tasks/get", json!({"taskId": id}), Some(&sentinel))
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["result"]["taskId"], id);
    ctx.cleanup().await;
    Ok(())
}

/// Standard Base64 with padding (enough for the sentinel test).
fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// T-24, T-51, T-52, T-53: a task is kept at least until `createdAt + ttlMs` — running, or
/// failed with "Task expired before completion" — and afterwards a lookup is -32602.
#[tokio::test]
async fn task_is_kept_until_its_ttl_then_gone() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_DEFAULT_TTL", "1500ms".to_owned())]).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 60_000})).await?;
    let id = created["taskId"].as_str().context("id")?;
    assert_eq!(created["ttlMs"], 1500, "{created}");
    let pttl: i64 = ctx
        .redis
        .cli(&["PTTL", &ctx.redis.task_key(id)?])?
        .trim()
        .parse()?;
    // Kept at least until the TTL, then for at most as long again so the expiry is readable.
    assert!(pttl > 1500 && pttl <= 3000, "PTTL {pttl}");
    let born = check::ts_ms(created["createdAt"].as_str().context("createdAt")?);
    let deadline = Instant::now() + WITHIN;
    loop {
        let r = get_reply(&client, id, &caps_tasks()).await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64;
        if r.body.get("error").is_some() {
            assert!(
                now >= born + 1500 - 20,
                "task gone {} ms before its TTL",
                born + 1500 - now
            );
            assert_eq!(r.error_code(), Some(-32602), "{}", r.body);
            let msg = r.body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase();
            assert!(
                msg.contains("task") && (msg.contains("not found") || msg.contains("expired")),
                "message {msg:?}"
            );
            break;
        }
        let t = &r.body["result"];
        check::task(t, Kind::Polled);
        match t["status"].as_str() {
            Some("working") => {}
            Some("failed") => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_millis() as i64;
                assert!(now >= born + 1500 - 20, "failed before its TTL: {t}");
                assert_eq!(
                    t["error"],
                    json!({"code": -32603, "message": "Task expired before completion"}),
                    "{t}"
                );
                assert_eq!(
                    check::ts_ms(t["lastUpdatedAt"].as_str().unwrap_or_default()),
                    born + 1500,
                    "{t}"
                );
            }
            _ => panic!("unexpected state before expiry: {t}"),
        }
        anyhow::ensure!(Instant::now() < deadline, "task never expired: {t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-38: `notifications/cancelled` naming the `tools/call` request is accepted and ignored;
/// only `tasks/cancel` cancels a task.
#[tokio::test]
async fn notifications_cancelled_does_not_cancel_a_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let call = json!({
        "jsonrpc": "2.0", "id": "call-77", "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 600}, "_meta": meta(&caps_tasks())}
    });
    let r = client
        .post_raw(
            &Client::headers("tools/call", Some("sleep")),
            serde_json::to_vec(&call)?,
        )
        .await?;
    let id = r.body["result"]["taskId"]
        .as_str()
        .with_context(|| format!("no task: {}", r.body))?
        .to_owned();
    let note = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "call-77", "reason": "changed my mind", "_meta": meta(&caps_tasks())}
    });
    let r = client
        .post_raw(
            &Client::headers("notifications/cancelled", None),
            serde_json::to_vec(&note)?,
        )
        .await?;
    assert_eq!(r.status, 202, "{}", r.body);
    let seen = until_terminal(&client, &id, WITHIN).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(check::text(&last["result"]), "slept 600 ms");
    ctx.cleanup().await;
    Ok(())
}

/// The shape rules themselves reject what they must (so the tests above can fail).
#[test]
fn shape_rules_reject_malformed_tasks() {
    let good = json!({
        "resultType": "complete", "taskId": "tsk_a", "status": "completed",
        "createdAt": "2026-08-01T09:30:00.125Z", "lastUpdatedAt": "2026-08-01T09:30:01.000Z",
        "ttlMs": 60000, "pollIntervalMs": 500,
        "result": {"resultType": "complete", "content": [{"type": "text", "text": "x"}]}
    });
    check::task(&good, Kind::Polled);
    let with = |key: &str, value: Option<Value>| {
        let mut t = good.clone();
        match value {
            Some(v) => t[key] = v,
            None => drop(t.as_object_mut().and_then(|o| o.remove(key))),
        }
        t
    };
    let mut created_with_result = with("resultType", Some(json!("task")));
    created_with_result["status"] = json!("working");
    let cases = [
        ("no ttlMs key", with("ttlMs", None), Kind::Polled),
        (
            "no pollIntervalMs",
            with("pollIntervalMs", None),
            Kind::Polled,
        ),
        ("negative ttl", with("ttlMs", Some(json!(-1))), Kind::Polled),
        (
            "fractional poll",
            with("pollIntervalMs", Some(json!(1.5))),
            Kind::Polled,
        ),
        (
            "no Z",
            with("createdAt", Some(json!("2026-08-01T09:30:00.125+00:00"))),
            Kind::Polled,
        ),
        (
            "no millis",
            with("createdAt", Some(json!("2026-08-01T09:30:00Z"))),
            Kind::Polled,
        ),
        (
            "updated < created",
            with("lastUpdatedAt", Some(json!("2026-08-01T09:29:00.000Z"))),
            Kind::Polled,
        ),
        (
            "foreign field",
            with("error", Some(json!({"code": 1, "message": "m"}))),
            Kind::Polled,
        ),
        (
            "extra field",
            with("worker", Some(json!("w"))),
            Kind::Polled,
        ),
        ("no result", with("result", None), Kind::Polled),
        (
            "result without resultType",
            with("result", Some(json!({"content": []}))),
            Kind::Polled,
        ),
        (
            "unknown status",
            with("status", Some(json!("done"))),
            Kind::Polled,
        ),
        (
            "resultType task on get",
            with("resultType", Some(json!("task"))),
            Kind::Polled,
        ),
        ("resultType on notification", good.clone(), Kind::Notified),
        ("created with a result", created_with_result, Kind::Created),
    ];
    for (what, t, kind) in cases {
        let rejected = std::panic::catch_unwind(|| check::task(&t, kind)).is_err();
        assert!(rejected, "shape rule accepted: {what}");
    }
    assert!(check::allowed("working", "input_required"));
    assert!(!check::allowed("completed", "working"));
    assert!(!check::allowed("cancelled", "cancelled"));
    assert_eq!(check::ts_ms("1970-01-01T00:00:01.000Z"), 1000);
    assert_eq!(check::ts_ms("2000-03-01T00:00:00.000Z"), 951_868_800_000);
}

/// A context whose single worker runs with extra `env`; waits until its tools are listed.
async fn with_worker_env(env: &[(&str, String)]) -> Result<TestContext> {
    let mut ctx = TestContext::start(1, 0).await?;
    ctx.workers.push(Worker::start(&ctx.redis.url(), env)?);
    ctx.wait_for_tools().await?;
    Ok(ctx)
}

fn pending_jobs(ctx: &TestContext) -> Result<u64> {
    let out = ctx.redis.cli(&[
        "XPENDING",
        &mcp_tasks_shared::store::keys::queue_key("default"),
        mcp_tasks_shared::store::keys::GROUP,
    ])?;
    out.lines()
        .next()
        .unwrap_or("0")
        .trim()
        .parse()
        .context("XPENDING count")
}

/// T-52: a task that expires while its handler waits for input is let go by the worker:
/// the handler stops and the job is acknowledged (no subscription or entry left behind).
#[tokio::test]
async fn worker_lets_go_of_a_parked_task_that_expired() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_DEFAULT_TTL", "2s".to_owned())]).await?;
    let client = ctx.client();
    let id = client
        .start_task("ask", json!({"question": "Anyone?"}))
        .await?;
    client.wait_status(&id, "input_required", WITHIN).await?;
    assert_eq!(
        pending_jobs(&ctx)?,
        1,
        "the parked job is pending while it waits"
    );
    poll_until(Duration::from_secs(10), || async {
        (pending_jobs(&ctx).ok()? == 0).then_some(())
    })
    .await
    .context("the worker never released the expired task's job")?;
    let t = client.get(&id).await?;
    assert_eq!(t["status"], "failed", "{t}");
    assert_eq!(
        t["error"]["message"], "Task expired before completion",
        "{t}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-52: a task still running when its TTL passes ends failed (-32603 "Task expired before
/// completion") at its deadline — listeners are told — and is gone a while later; its job
/// is released.
#[tokio::test]
async fn running_task_past_its_ttl_ends_failed_then_vanishes() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_DEFAULT_TTL", "2s".to_owned())]).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 60_000, "steps": 2})).await?;
    let id = created["taskId"].as_str().context("id")?.to_owned();
    let born = check::ts_ms(created["createdAt"].as_str().context("createdAt")?);
    let mut sub = client.listen("ttl", &[&id]).await?;
    let t = client.wait_status(&id, "failed", WITHIN).await?;
    assert_eq!(
        t["error"],
        json!({"code": -32603, "message": "Task expired before completion"}),
        "{t}"
    );
    assert_eq!(t["statusMessage"], "Task expired before completion", "{t}");
    assert_eq!(
        check::ts_ms(t["lastUpdatedAt"].as_str().unwrap_or_default()),
        born + 2000,
        "{t}"
    );
    // The stream carries the expiry as the task's last notification.
    let mut last = Value::Null;
    while let Some(msg) = sub.next(Duration::from_secs(5)).await {
        if msg["method"] == "notifications/tasks" {
            last = msg["params"].clone();
            if last["status"] == "failed" {
                break;
            }
        }
    }
    assert_eq!(
        last["status"], "failed",
        "listener never saw the expiry: {last}"
    );
    poll_until(Duration::from_secs(5), || async {
        (pending_jobs(&ctx).ok()? == 0).then_some(())
    })
    .await
    .context("the expired task's job was not released")?;
    poll_until(Duration::from_secs(10), || async {
        let r = client
            .request("tasks/get", json!({"taskId": &id}), &caps_tasks())
            .await
            .ok()?;
        (r.error_code() == Some(-32602)).then_some(())
    })
    .await
    .context("the expired task never went away")?;
    ctx.cleanup().await;
    Ok(())
}

/// T-18: a worker that shuts down while a task waits for input does not invent a terminal
/// state: the task stays `input_required` (its job stays pending for another worker).
#[tokio::test]
async fn worker_shutdown_leaves_a_parked_task_waiting() -> Result<()> {
    let mut ctx = with_worker_env(&[("MCPT_SHUTDOWN_GRACE", "1s".to_owned())]).await?;
    let client = ctx.client();
    let id = client
        .start_task("ask", json!({"question": "Still?"}))
        .await?;
    client.wait_status(&id, "input_required", WITHIN).await?;
    let status = ctx.workers[0].process.terminate(Duration::from_secs(10))?;
    assert!(status.success(), "worker exit status {status}");
    let t = client.get(&id).await?;
    assert_eq!(t["status"], "input_required", "{t}");
    assert_eq!(pending_jobs(&ctx)?, 1);
    ctx.cleanup().await;
    Ok(())
}

/// A task waiting for input holds no concurrency slot: with MCPT_CONCURRENCY=1 and an `ask`
/// parked, other tasks still run; the answer then resumes the ask.
#[tokio::test]
async fn task_waiting_for_input_holds_no_slot() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_CONCURRENCY", "1".to_owned())]).await?;
    let client = ctx.client();
    let ask = client
        .start_task("ask", json!({"question": "Later?"}))
        .await?;
    client.wait_status(&ask, "input_required", WITHIN).await?;
    for _ in 0..3 {
        let id = client.start_task("sleep", json!({"ms": 10})).await?;
        client.wait_status(&id, "completed", WITHIN).await?;
    }
    client
        .update(
            &ask,
            json!({"answer-1": {"action": "accept", "content": {"answer": "now"}}}),
        )
        .await?;
    let t = client.wait_status(&ask, "completed", WITHIN).await?;
    assert_eq!(t["result"]["content"][0]["text"], "answer: now", "{t}");
    ctx.cleanup().await;
    Ok(())
}
