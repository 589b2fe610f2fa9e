//! Holding under abuse (issue 20), the smaller items: inputs that bent a tool's meaning.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use mcp_tasks_tests::{Client, TestContext, caps_none, meta};
use serde_json::json;

/// `sleep` with `ms: 1e3` (an integer to the schema, a float to JSON parsers) sleeps
/// 1,000 ms; it used to read 0 and answer "slept 0 ms".
#[tokio::test]
async fn sleep_takes_an_exponent_integer_at_its_value() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    client.wait_for_tool("sleep").await?;
    let mut params = json!({"name": "sleep", "arguments": {}});
    params["_meta"] = meta(&caps_none());
    let body = serde_json::to_string(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
    )?
    .replace(r#""arguments":{}"#, r#""arguments":{"ms":1e3}"#);
    ensure!(body.contains(r#"{"ms":1e3}"#), "{body}");
    let started = Instant::now();
    let reply = client
        .post_raw(&Client::headers("tools/call", Some("sleep")), body)
        .await?;
    let took = started.elapsed();
    let text = reply.body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    ensure!(text == "slept 1000 ms", "{}", reply.body);
    ensure!(
        took >= Duration::from_millis(1000),
        "answered after {took:?}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// Scripts run so far (`EVALSHA` and `EVAL` in `INFO commandstats`): every task state
/// change is one.
fn scripts(redis: &mcp_tasks_tests::RedisServer) -> Result<u64> {
    let stats = redis.cli(&["INFO", "commandstats"])?;
    Ok(stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// A tool that reports a status 2,000 times (as fast as the timer lets it) costs Redis
/// about one status script per 100 ms (the latest message wins), not 2,000; its messages
/// still show while it runs.
#[tokio::test]
async fn a_chatty_task_costs_redis_ten_status_writes_a_second() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    client.wait_for_tool("sleep").await?;
    let before = scripts(&ctx.redis)?;
    let started = Instant::now();
    let id = client
        .start_task("sleep", json!({"ms": 200, "steps": 2000}))
        .await?;
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let task = client.get(&id).await?;
        if let Some(message) = task["statusMessage"].as_str() {
            seen.insert(message.to_owned());
        }
        if task["status"] == "completed" {
            break;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(20),
            "never completed: {task}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    let spent = scripts(&ctx.redis)?.saturating_sub(before);
    ensure!(
        seen.iter().any(|m| m.starts_with("step ")),
        "no step message showed while it ran: {seen:?}"
    );
    // Ten status writes a second, plus create, start, finish and a little slack.
    let allowed = took.as_millis() as u64 / 100 + 10;
    ensure!(
        spent <= allowed,
        "{spent} scripts for one task that ran {took:?} (at most {allowed} expected)"
    );
    ctx.cleanup().await;
    Ok(())
}

/// Strings a client controls, each carrying a newline and ANSI escapes (a forged log
/// line), stay inside one escaped log line of the gateway and the worker, at `debug` where
/// most is logged: a client name, a request id, a method, a tool name, a task id, an
/// answer's key and an argument. Nothing the client sent starts a line, and no escape byte
/// reaches a log (issue 20, item 6).
#[tokio::test]
async fn forged_client_strings_stay_one_escaped_log_line() -> Result<()> {
    // The access log and the per-call spans it puts on log lines carry client strings too.
    let debug = [
        ("RUST_LOG", "debug".to_owned()),
        ("MCPT_ACCESS_LOG", "on".to_owned()),
    ];
    let ctx = TestContext::start_with(1, 1, &debug).await?;
    let client = ctx.client();
    client.wait_for_tool("ask").await?;
    let forged = "x\n\u{1b}[33m2026-01-01T00:00:00Z  WARN mcp_tasks_gateway: forged\u{1b}[0m";
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": forged, "version": "1"}}});
    let reply = client
        .post_raw(&headers, serde_json::to_vec(&initialize)?)
        .await?;
    ensure!(
        reply.status == 200,
        "initialize: {} {}",
        reply.status,
        reply.body
    );
    let session = reply
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .context("no session id")?
        .to_owned();
    // Requests of that session (2025 carries no method header that would refuse them
    // first) whose id, method, tool, task id and arguments are forged.
    let in_session = [
        headers[0],
        headers[1],
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    for (method, params) in [
        (
            "tools/call",
            json!({"name": forged, "arguments": {"q": forged}}),
        ),
        (
            "tools/call",
            json!({"name": "echo", "arguments": {"text": forged, "x": forged}}),
        ),
        (forged, json!({})),
        ("tasks/get", json!({"taskId": forged})),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": forged, "method": method, "params": params});
        client
            .post_raw(&in_session, serde_json::to_vec(&body)?)
            .await?;
    }
    // An answer whose key is forged, to a task that asks.
    let id = client
        .start_task("ask", json!({"question": forged}))
        .await?;
    client
        .wait_status(&id, "input_required", Duration::from_secs(10))
        .await?;
    client
        .update(&id, json!({ forged: {"action": "accept", "content": {}}}))
        .await?;
    client.cancel(&id).await?;

    let logs = || {
        [&ctx.gateways[0].process, &ctx.workers[0].process]
            .map(|p| p.log_text())
            .join("\n")
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !logs().contains("2025 session started") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = logs();
    ensure!(
        log.contains("2025 session started"),
        "no session line in:\n{log}"
    );
    ensure!(
        !log.contains('\u{1b}'),
        "an escape byte reached the log:\n{log}"
    );
    let starts = log
        .lines()
        .filter(|l| l.contains("forged") && !l.starts_with(char::is_numeric))
        .collect::<Vec<_>>();
    ensure!(
        starts.is_empty(),
        "forged text started lines of their own: {starts:?}"
    );
    // Two sites that log what the client sent: a client name (a field) and a request id
    // (a span field).
    for key in ["client.name=", "rpc.id="] {
        ensure!(
            log.lines().any(|l| l.contains(key) && l.contains("forged")),
            "no {key} line with the forged text, so this test proves nothing:\n{log}"
        );
    }
    ctx.cleanup().await;
    Ok(())
}

/// Two principals (static tokens) on one gateway and one worker with 8 slots and the given
/// `MCPT_FAIR_SHARE` and `MCPT_GUEST_SLOTS`; the Redis, the processes and the tokens file
/// go on drop.
struct TwoPrincipals {
    redis: mcp_tasks_tests::RedisServer,
    _gateway: mcp_tasks_tests::Gateway,
    _worker: mcp_tasks_tests::Worker,
    _tokens: mcp_tasks_tests::TwoTokens,
    alice: Client,
    bob: Client,
}

impl TwoPrincipals {
    async fn start(fair_share: &str, guest_slots: &str) -> Result<TwoPrincipals> {
        let tokens = mcp_tasks_tests::TwoTokens::new()?;
        let redis = mcp_tasks_tests::RedisServer::start()?;
        let gateway = mcp_tasks_tests::Gateway::start(&redis.url(), &tokens.env())?;
        let worker = mcp_tasks_tests::Worker::start(
            &redis.url(),
            &[
                ("MCPT_CONCURRENCY", "8".to_owned()),
                ("MCPT_FAIR_SHARE", fair_share.to_owned()),
                ("MCPT_GUEST_SLOTS", guest_slots.to_owned()),
            ],
        )?;
        let base = gateway.client();
        let alice = base.with_token(mcp_tasks_tests::ALICE_TOKEN);
        let bob = base.with_token(mcp_tasks_tests::BOB_TOKEN);
        alice.wait_for_tool("sleep").await?;
        Ok(TwoPrincipals {
            redis,
            _gateway: gateway,
            _worker: worker,
            _tokens: tokens,
            alice,
            bob,
        })
    }

    /// Wait until `n` jobs are running (delivered to the worker, not yet acknowledged).
    async fn wait_running(&self, n: u64) -> Result<()> {
        let stream = mcp_tasks_store::keys::queue_key("default");
        mcp_tasks_tests::poll_until(Duration::from_secs(10), || async {
            let out = self
                .redis
                .cli(&["XPENDING", &stream, mcp_tasks_store::keys::GROUP])
                .ok()?;
            (out.lines().next()?.trim().parse::<u64>().ok()? >= n).then_some(())
        })
        .await
        .with_context(|| format!("{n} jobs never ran at once"))
    }

    /// Alice queues `n` sleeps of `ms` each.
    async fn alice_queues(&self, n: usize, ms: u64) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        for _ in 0..n {
            ids.push(self.alice.start_task("sleep", json!({"ms": ms})).await?);
        }
        Ok(ids)
    }
}

/// Whether Bob's 0 ms sleep, submitted once Alice's 64 sleeps of `alice_ms` each hold all 8
/// slots, completes within 3 s; how long it took when it did.
async fn bob_behind_alice(stack: &TwoPrincipals, alice_ms: u64) -> Result<Option<Duration>> {
    stack.alice_queues(64, alice_ms).await?;
    stack.wait_running(8).await?;
    let started = Instant::now();
    let id = stack.bob.start_task("sleep", json!({"ms": 0})).await?;
    let done = stack
        .bob
        .wait_status(&id, "completed", Duration::from_secs(3))
        .await;
    Ok(done.is_ok().then(|| started.elapsed()))
}

/// Issue 20, item 4: with Alice's 64 tasks of 2 s queued on a worker with 8 slots (alone,
/// she holds all 8) and no guest slot, Bob's short task completes within 3 s:
/// `MCPT_FAIR_SHARE` 0.5 gives the first slot Alice frees to Bob, his job moved in front
/// of her backlog. With the fair share off it waits behind the backlog (16 s).
#[tokio::test]
async fn another_principals_short_task_is_not_stuck_behind_a_backlog() -> Result<()> {
    let fair = TwoPrincipals::start("0.5", "0").await?;
    let took = bob_behind_alice(&fair, 2000)
        .await?
        .context("with the fair share Bob's task should take the first slot Alice frees")?;
    eprintln!("fair share: Bob's task completed {took:?} after its call");
    drop(fair);
    let unfair = TwoPrincipals::start("1", "0").await?;
    ensure!(
        bob_behind_alice(&unfair, 2000).await?.is_none(),
        "without the fair share Bob's task should wait behind Alice's backlog"
    );
    Ok(())
}

/// Issue 36, item 1: Alice's 64 one-minute tasks hold all 8 slots, so no slot frees for a
/// minute; Bob runs nothing on the worker, so his 0 ms task starts on the guest slot
/// (`MCPT_GUEST_SLOTS=1`) and completes within 3 s. Without a guest slot it waits
/// for the first of Alice's runs to end.
#[tokio::test]
async fn a_principal_with_nothing_running_starts_while_every_slot_is_taken() -> Result<()> {
    let guest = TwoPrincipals::start("0.5", "1").await?;
    let took = bob_behind_alice(&guest, 60_000)
        .await?
        .context("Bob's task should start on the guest slot")?;
    eprintln!("guest slot: Bob's task completed {took:?} after its call");
    // Alice's own backlog never takes the guest slot once it is free again: 8 of her
    // tasks have started (taken a fence), not 9.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut started = 0;
    for key in guest
        .redis
        .cli(&["--scan", "--pattern", "mcpt:task:*"])?
        .lines()
    {
        let fields = guest.redis.cli(&["HMGET", key, "status", "fence"])?;
        let mut fields = fields.lines();
        let (status, fence) = (fields.next(), fields.next().unwrap_or("0"));
        if status == Some("working") && !matches!(fence, "" | "0") {
            started += 1;
        }
    }
    ensure!(
        started == 8,
        "{started} of Alice's tasks started on 8 slots"
    );
    drop(guest);
    let none = TwoPrincipals::start("0.5", "0").await?;
    ensure!(
        bob_behind_alice(&none, 60_000).await?.is_none(),
        "without a guest slot Bob's task should wait for one of Alice's to end"
    );
    Ok(())
}

/// A principal alone keeps every slot: 24 sleeps of 2 s on 8 slots end in about 6 s (12 s
/// if the fair share held them to 4 slots with nobody else waiting).
#[tokio::test]
async fn a_principal_alone_keeps_every_slot() -> Result<()> {
    let stack = TwoPrincipals::start("0.5", "1").await?;
    let started = Instant::now();
    let ids = stack.alice_queues(24, 2000).await?;
    for id in &ids {
        stack
            .alice
            .wait_status(id, "completed", Duration::from_secs(10))
            .await?;
    }
    let took = started.elapsed();
    ensure!(
        took < Duration::from_secs(9),
        "24 two-second sleeps on 8 slots took {took:?}"
    );
    Ok(())
}
