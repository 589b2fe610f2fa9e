//! 2025 sessions: a session started on gateway A serves on gateway B (tools, a synchronous
//! call with progress, `ping`, `DELETE` ending it everywhere), and a session belongs to the
//! principal that started it.
//!
//! Checklist ids cited: none (2025 compatibility is outside the 2026 checklists).

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Client, TestContext, caps_none};
use serde_json::{Value, json};

use super::{Session, WITHIN, base_headers, text, until_response};

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
    // Task-only in 2026-07-28; a 2025 call's stream carries its questions (issue 18).
    assert_eq!(support("ask"), Some(json!("optional")));

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

/// A session belongs to the principal that started it: another principal using its id gets
/// the same 404 as an unknown session (tokens authentication) and does not keep it alive.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_is_its_principals_only() -> Result<()> {
    let tokens = mcp_tasks_tests::TwoTokens::new()?;
    let env = tokens.env();
    let redis = mcp_tasks_tests::RedisServer::start()?;
    let gateway = mcp_tasks_tests::Gateway::start(&redis.url(), &env)?;
    let _worker = mcp_tasks_tests::Worker::start(&redis.url(), &env)?;
    let base = gateway.client();
    let alice = base.with_token(mcp_tasks_tests::ALICE_TOKEN);
    let bob = base.with_token(mcp_tasks_tests::BOB_TOKEN);
    alice.wait_for_tool("sleep").await?;
    let s = Session::start(&alice, "2025-11-25", json!({})).await?;
    let r = s.request(&alice, 1, "ping", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.body);
    // Bob's request does not restart the session's idle timer (issue 20, item 7): its
    // time to live only goes down; Alice's own request restarts it.
    let key = mcp_tasks_store::keys::session_key(&s.id);
    let ttl = || -> Result<i64> { Ok(redis.cli(&["PTTL", &key])?.trim().parse()?) };
    let before = ttl()?;
    assert!(before > 0, "PTTL {key}: {before}");
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let r = s.request(&bob, 2, "ping", json!({})).await?;
    assert_eq!(r.status, 404, "{}", r.body);
    let after_bob = ttl()?;
    assert!(
        after_bob < before,
        "Bob's request restarted Alice's idle timer: {before} -> {after_bob} ms"
    );
    let r = s.request(&alice, 5, "ping", json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let after_alice = ttl()?;
    assert!(after_alice > after_bob, "{after_bob} -> {after_alice} ms");
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
    Ok(())
}

/// Issue 20, item 2: 2025 sessions are counted per principal (`MCPT_LIMIT_SESSIONS`).
/// Over the limit, `initialize` is answered HTTP 429 and -31001 naming the limit, and nothing
/// is stored (issue 36, item 2: a refusal counts as one for proxies, in both eras);
/// another principal is not limited; a session ended with `DELETE`, or one that lapsed,
/// gives its place back.
#[tokio::test(flavor = "multi_thread")]
async fn sessions_per_principal_are_limited_and_recover() -> Result<()> {
    let tokens = mcp_tasks_tests::TwoTokens::new()?;
    let mut env = tokens.env();
    env.push(("MCPT_LIMIT_SESSIONS", "3".to_owned()));
    let redis = mcp_tasks_tests::RedisServer::start()?;
    let gateway = mcp_tasks_tests::Gateway::start(&redis.url(), &env)?;
    let base = gateway.client();
    let alice = base.with_token(mcp_tasks_tests::ALICE_TOKEN);
    let bob = base.with_token(mcp_tasks_tests::BOB_TOKEN);
    let sessions_in_redis = || -> Result<usize> {
        Ok(redis
            .cli(&["--scan", "--pattern", "mcpt:session:*"])?
            .lines()
            .count())
    };

    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(Session::start(&alice, "2025-11-25", json!({})).await?);
    }
    let refused = initialize(&alice).await?;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], -31001, "{}", refused.body);
    assert_eq!(refused.body["error"]["data"]["limit"], "sessions");
    let message = refused.body["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("at most 3") && message.contains("MCPT_LIMIT_SESSIONS"),
        "{message}"
    );
    assert!(refused.headers.get("mcp-session-id").is_none());
    assert_eq!(
        sessions_in_redis()?,
        3,
        "a refused initialize stored nothing"
    );

    // Bob is not limited by Alice's sessions.
    Session::start(&bob, "2025-11-25", json!({})).await?;

    // An ended session gives its place back.
    let ended = open.pop().context("three")?;
    let res = alice
        .send_raw(
            "DELETE",
            "/mcp",
            &[("mcp-session-id", &ended.id)],
            Default::default(),
        )
        .await?;
    assert_eq!(res.status(), 204);
    open.push(Session::start(&alice, "2025-11-25", json!({})).await?);
    let refused = initialize(&alice).await?;
    assert_eq!(
        (refused.status, &refused.body["error"]["code"]),
        (429, &json!(-31001))
    );

    // So does one that lapsed (its record expired: here, deleted behind the server's back).
    let lapsed = open.pop().context("three")?;
    redis.cli(&["DEL", &mcp_tasks_store::keys::session_key(&lapsed.id)])?;
    Session::start(&alice, "2025-11-25", json!({})).await?;
    Ok(())
}

/// A raw 2025 `initialize` by `client`.
async fn initialize(client: &Client) -> Result<mcp_tasks_tests::Reply> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-2025", "version": "1"}}});
    client
        .post_raw(&base_headers(), serde_json::to_vec(&body)?)
        .await
}
