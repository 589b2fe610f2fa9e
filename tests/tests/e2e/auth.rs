//! Authentication, per-principal isolation and limits (tasks-extension.md §15; T-25, T-44,
//! T-56; base-protocol.md §6 401 handling). Two principals, with static tokens and with
//! JWTs from a key set the test generates: B never reads, answers, cancels or listens to A's
//! task, and gets exactly the unknown-id answer; limits trip and recover.

use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_tests::jwt::TestIssuer;
use mcp_tasks_tests::{
    Client, Gateway, Process, RedisServer, Worker, caps_tasks, meta, poll_until,
};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef0000";

/// A private directory for key and token files, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Result<Dir> {
        let d = std::env::temp_dir().join(format!(
            "mcpt-auth-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos()
        ));
        std::fs::create_dir_all(&d)?;
        Ok(Dir(d))
    }

    fn write(&self, name: &str, text: &str) -> Result<String> {
        let p = self.0.join(name);
        std::fs::write(&p, text)?;
        Ok(p.display().to_string())
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn token_env(dir: &Dir) -> Result<Vec<(&'static str, String)>> {
    let file = dir.write("tokens", &format!("alice {ALICE}\nbob {BOB}\n"))?;
    Ok(vec![
        ("MCPT_AUTH", "tokens".to_owned()),
        ("MCPT_AUTH_TOKENS_FILE", file),
    ])
}

/// The error object of a reply, without the id.
fn error_of(reply: &mcp_tasks_tests::Reply) -> Value {
    reply.body["error"].clone()
}

/// T-25, T-44: with static tokens, Bob's requests for Alice's task get exactly what an
/// unknown id gets and change nothing; Alice's own requests work; no token or principal
/// reaches the logs.
#[tokio::test]
async fn another_principals_task_answers_like_an_unknown_id() -> Result<()> {
    let dir = Dir::new("tokens")?;
    let redis = RedisServer::start()?;
    let env = token_env(&dir)?;
    let gateway = Gateway::start(&redis.url(), &env)?;
    let _worker = Worker::start(&redis.url(), &env)?;
    let alice = gateway.client().with_token(ALICE);
    let bob = gateway.client().with_token(BOB);
    alice.wait_for_tool("sleep").await?;

    let id = alice
        .start_task("ask", json!({"question": "colour?"}))
        .await?;
    let parked = alice
        .wait_status(&id, "input_required", Duration::from_secs(20))
        .await?;
    let unknown = "tsk_AAAAAAAAAAAAAAAAAAAAAA";

    let get_theirs = bob
        .request("tasks/get", json!({"taskId": id}), &caps_tasks())
        .await?;
    let get_unknown = bob
        .request("tasks/get", json!({"taskId": unknown}), &caps_tasks())
        .await?;
    assert_eq!(get_theirs.status, get_unknown.status);
    assert_eq!(error_of(&get_theirs), error_of(&get_unknown));
    assert_eq!(get_theirs.body["error"]["code"], -32602);

    let answer = json!({"answer-1": {"action": "accept", "content": {"answer": "red"}}});
    let update_theirs = bob
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": answer}),
            &caps_tasks(),
        )
        .await?;
    let update_unknown = bob
        .request(
            "tasks/update",
            json!({"taskId": unknown, "inputResponses": answer}),
            &caps_tasks(),
        )
        .await?;
    assert_eq!(error_of(&update_theirs), error_of(&update_unknown));
    let cancel_theirs = bob.cancel(&id).await?;
    let cancel_unknown = bob.cancel(unknown).await?;
    assert_eq!(error_of(&cancel_theirs), error_of(&cancel_unknown));
    assert_eq!(cancel_theirs.body["error"]["code"], -32602);

    // Listening to Alice's task: the ack honours nothing, and nothing arrives.
    let mut stream = bob.listen(7, &[id.as_str()]).await?;
    let ack = stream
        .next(Duration::from_secs(5))
        .await
        .context("no acknowledgement")?;
    let honoured = &ack["params"]["notifications"]["taskIds"];
    assert!(
        honoured.is_null() || *honoured == json!([]),
        "Alice's task was honoured for Bob: {ack}"
    );

    // Nothing changed: still parked, same version, and Alice's answer still completes it.
    let now = alice.get(&id).await?;
    assert_eq!(now["status"], "input_required");
    assert_eq!(now["lastUpdatedAt"], parked["lastUpdatedAt"]);
    let done = alice
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": answer}),
            &caps_tasks(),
        )
        .await?;
    assert!(done.body.get("result").is_some(), "{}", done.body);
    alice
        .wait_status(&id, "completed", Duration::from_secs(20))
        .await?;
    assert!(
        stream.next(Duration::from_millis(300)).await.is_none(),
        "Bob's stream saw Alice's task"
    );

    let logs = gateway.process.log_text();
    for secret in [ALICE, BOB, "alice", "bob"] {
        assert!(!logs.contains(secret), "the gateway log names {secret:?}");
    }
    Ok(())
}

/// Missing, malformed and unknown credentials get 401 with a challenge naming the
/// protected-resource metadata, which the gateway serves.
#[tokio::test]
async fn missing_or_bad_credentials_get_401_with_a_challenge() -> Result<()> {
    let dir = Dir::new("challenge")?;
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &token_env(&dir)?)?;
    let anonymous = gateway.client();
    for (client, error) in [
        (anonymous.clone(), None),
        (
            anonymous.with_token("not-a-token-at-all-0000"),
            Some("invalid_token"),
        ),
    ] {
        let res = client
            .send_raw(
                "POST",
                "/mcp",
                &Client::headers("tools/list", None),
                serde_json::to_vec(&json!({
                    "jsonrpc": "2.0", "id": 1, "method": "tools/list",
                    "params": {"_meta": meta(&caps_tasks())}
                }))?
                .into(),
            )
            .await?;
        assert_eq!(res.status(), 401);
        let challenge = res
            .headers()
            .get("www-authenticate")
            .context("no WWW-Authenticate")?
            .to_str()?
            .to_owned();
        assert!(
            challenge.starts_with(&format!(
                "Bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource\"",
                gateway.addr
            )),
            "{challenge}"
        );
        match error {
            Some(e) => assert!(challenge.contains(&format!("error=\"{e}\"")), "{challenge}"),
            None => assert!(!challenge.contains("error="), "{challenge}"),
        }
    }
    let res = anonymous
        .send_raw(
            "GET",
            "/.well-known/oauth-protected-resource",
            &[],
            Default::default(),
        )
        .await?;
    assert_eq!(res.status(), 200);
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await?
        .to_bytes();
    let meta: Value = serde_json::from_slice(&body)?;
    assert_eq!(meta["resource"], format!("http://{}/mcp", gateway.addr));
    assert_eq!(meta["bearer_methods_supported"], json!(["header"]));
    Ok(())
}

/// JWTs: a valid token works and its subject owns its tasks; expired, wrongly signed and
/// wrong-audience tokens get 401; two subjects are isolated like two token holders.
#[tokio::test]
async fn jwts_are_checked_and_subjects_are_isolated() -> Result<()> {
    let dir = Dir::new("jwt")?;
    let issuer = TestIssuer::new("https://idp.test");
    let jwks = dir.write("jwks.json", &issuer.jwks_json())?;
    let env = vec![
        ("MCPT_AUTH", "jwt".to_owned()),
        ("MCPT_AUTH_JWKS", jwks),
        ("MCPT_AUTH_ISSUER", "https://idp.test".to_owned()),
        ("MCPT_AUTH_AUDIENCE", "mcp-tasks-test".to_owned()),
    ];
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &env)?;
    let _worker = Worker::start(&redis.url(), &[])?;
    let base = gateway.client();
    let carol = base.with_token(&issuer.token("carol", "mcp-tasks-test", 600));
    let dave = base.with_token(&issuer.token("dave", "mcp-tasks-test", 600));
    carol.wait_for_tool("sleep").await?;
    let id = carol.start_task("sleep", json!({"ms": 0})).await?;
    carol
        .wait_status(&id, "completed", Duration::from_secs(20))
        .await?;
    let theirs = dave
        .request("tasks/get", json!({"taskId": id}), &caps_tasks())
        .await?;
    assert_eq!(theirs.body["error"]["code"], -32602, "{}", theirs.body);

    for (why, token) in [
        ("expired", issuer.token("carol", "mcp-tasks-test", -120)),
        (
            "wrongly signed",
            issuer.foreign_token("carol", "mcp-tasks-test", 600),
        ),
        (
            "for another audience",
            issuer.token("carol", "someone-else", 600),
        ),
    ] {
        let r = base
            .with_token(&token)
            .request("tasks/get", json!({"taskId": id}), &caps_tasks())
            .await?;
        assert_eq!(r.status, 401, "a token {why} was accepted: {}", r.body);
    }
    Ok(())
}

/// Limits trip with -31001 / HTTP 429 naming the limit, only for the principal over it,
/// and recover: tasks per minute, unfinished tasks (freed by a cancel), open listeners
/// (freed by closing one).
#[tokio::test]
async fn per_principal_limits_trip_and_recover() -> Result<()> {
    let dir = Dir::new("limits")?;
    let mut env = token_env(&dir)?;
    env.push(("MCPT_LIMIT_ACTIVE_TASKS", "2".to_owned()));
    env.push(("MCPT_LIMIT_LISTENERS", "1".to_owned()));
    env.push(("MCPT_LIMIT_TASKS_PER_MINUTE", "4".to_owned()));
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &env)?;
    let _worker = Worker::start(&redis.url(), &[])?;
    let alice = gateway.client().with_token(ALICE);
    let bob = gateway.client().with_token(BOB);
    alice.wait_for_tool("sleep").await?;

    // Two parked tasks hold Alice's two unfinished slots.
    let a1 = alice.start_task("ask", json!({"question": "1"})).await?;
    let _a2 = alice.start_task("ask", json!({"question": "2"})).await?;
    let third = alice
        .call("ask", json!({"question": "3"}), &caps_tasks())
        .await?;
    assert_eq!(third.status, 429, "{}", third.body);
    assert_eq!(third.body["error"]["code"], -31001);
    assert_eq!(third.body["error"]["data"]["limit"], "active_tasks");
    let message = third.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("at most 2") && message.contains("MCPT_LIMIT_ACTIVE_TASKS"),
        "{message}"
    );
    // Bob is not limited by Alice's tasks.
    bob.start_task("ask", json!({"question": "b"})).await?;
    // A cancel frees a slot (the finished task leaves the count when it is pruned).
    alice.cancel(&a1).await?;
    alice
        .wait_status(&a1, "cancelled", Duration::from_secs(10))
        .await?;
    for _ in 0..2 {
        let id = alice.start_task("sleep", json!({"ms": 0})).await?;
        alice
            .wait_status(&id, "completed", Duration::from_secs(10))
            .await?;
    }
    // Four created this minute (refused attempts do not count): the fifth is over the rate.
    let fifth = alice.call("sleep", json!({"ms": 0}), &caps_tasks()).await?;
    assert_eq!(fifth.status, 429, "{}", fifth.body);
    assert_eq!(fifth.body["error"]["data"]["limit"], "tasks_per_minute");

    // One open stream each.
    let first = alice.listen(1, &[]).await?;
    let refused = alice
        .send_raw(
            "POST",
            "/mcp",
            &Client::headers("subscriptions/listen", None),
            serde_json::to_vec(&json!({
                "jsonrpc": "2.0", "id": 2, "method": "subscriptions/listen",
                "params": {"notifications": {"taskIds": []}, "_meta": meta(&caps_tasks())}
            }))?
            .into(),
        )
        .await?;
    assert_eq!(refused.status(), 429);
    let _bobs = bob.listen(3, &[]).await?;
    drop(first);
    poll_until(Duration::from_secs(10), || async {
        alice.listen(4, &[]).await.ok().map(drop)
    })
    .await
    .context("the closed stream's slot never came back")?;
    Ok(())
}

/// A burst of creates at the unfinished-task limit, when the tasks that fill it have
/// finished, is not refused: finished tasks leave the count lazily, so each refused create
/// prunes the owner's set (one at a time per gateway) and tries once more, whichever
/// request's prune made the room.
#[tokio::test]
async fn a_burst_at_the_unfinished_limit_is_not_refused_once_tasks_finished() -> Result<()> {
    let dir = Dir::new("burst")?;
    let mut env = token_env(&dir)?;
    env.push(("MCPT_LIMIT_ACTIVE_TASKS", "24".to_owned()));
    env.push(("MCPT_LIMIT_TASKS_PER_MINUTE", "0".to_owned()));
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &env)?;
    let _worker = Worker::start(&redis.url(), &[])?;
    let alice = gateway.client().with_token(ALICE);
    alice.wait_for_tool("sleep").await?;
    // Each round fills the set; from the second on, every create meets a full set of
    // finished tasks.
    for round in 0..8 {
        let mut burst = tokio::task::JoinSet::new();
        for _ in 0..24 {
            let alice = alice.clone();
            burst.spawn(async move { alice.call("sleep", json!({"ms": 0}), &caps_tasks()).await });
        }
        let mut ids = Vec::new();
        for reply in burst.join_all().await {
            let reply = reply?;
            let id = reply.body["result"]["taskId"]
                .as_str()
                .with_context(|| format!("round {round}: a create was refused: {}", reply.body))?;
            ids.push(id.to_owned());
        }
        for id in &ids {
            alice
                .wait_status(id, "completed", Duration::from_secs(10))
                .await?;
        }
    }
    Ok(())
}

/// Size bounds: arguments over MCPT_MAX_ARGS_BYTES are refused before any task exists; a
/// result over MCPT_MAX_RESULT_BYTES fails its task instead of filling Redis; too many
/// `taskIds` in one listen are refused (T-56).
#[tokio::test]
async fn oversized_arguments_results_and_listens_are_refused() -> Result<()> {
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(
        &redis.url(),
        &[
            ("MCPT_MAX_ARGS_BYTES", "4096".to_owned()),
            ("MCPT_MAX_LISTEN_TASKS", "3".to_owned()),
        ],
    )?;
    let _worker = Worker::start(
        &redis.url(),
        &[("MCPT_MAX_RESULT_BYTES", "2048".to_owned())],
    )?;
    let ctx_client = gateway.client();
    ctx_client.wait_for_tool("sleep").await?;
    let big = "x".repeat(5000);
    let r = ctx_client
        .call("echo", json!({"text": big}), &caps_tasks())
        .await?;
    assert_eq!(r.body["error"]["code"], -32602, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("MCPT_MAX_ARGS_BYTES"),
        "{}",
        r.body
    );
    let keys = redis.cli(&["KEYS", "mcpt:task:*"])?;
    assert_eq!(keys.trim(), "", "a task was created");

    let medium = "y".repeat(3000);
    let r = ctx_client
        .call("echo", json!({"text": medium}), &caps_tasks())
        .await?;
    let error = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(error.contains("MCPT_MAX_RESULT_BYTES"), "{}", r.body);

    let ids = [
        "tsk_AAAAAAAAAAAAAAAAAAAAAA",
        "tsk_AAAAAAAAAAAAAAAAAAAAAB",
        "tsk_AAAAAAAAAAAAAAAAAAAAAC",
        "tsk_AAAAAAAAAAAAAAAAAAAAAD",
    ];
    let err = ctx_client
        .listen(1, &ids)
        .await
        .err()
        .context("four ids were accepted")?;
    assert!(err.to_string().contains("MCPT_MAX_LISTEN_TASKS"), "{err}");
    Ok(())
}

/// Without authentication a gateway refuses a non-loopback address (exit 64, one line)
/// unless MCPT_AUTH_ALLOW_ANONYMOUS=1.
#[tokio::test]
async fn open_address_without_auth_is_refused_unless_allowed() -> Result<()> {
    let redis = RedisServer::start()?;
    let (mut refused, _) = Process::spawn(
        "mcp-tasks-gateway",
        &[
            ("MCPT_REDIS_URL", redis.url()),
            ("MCPT_LISTEN_ADDR", "0.0.0.0:0".to_owned()),
        ],
    )?;
    let line = refused.usage_error()?;
    assert!(line.contains("MCPT_AUTH_ALLOW_ANONYMOUS=1"), "{line}");
    let allowed = Gateway::start(
        &redis.url(),
        &[
            ("MCPT_LISTEN_ADDR", "0.0.0.0:0".to_owned()),
            ("MCPT_AUTH_ALLOW_ANONYMOUS", "1".to_owned()),
        ],
    )?;
    assert_eq!(allowed.addr.ip().to_string(), "0.0.0.0");
    Ok(())
}

/// A token file that cannot be read stops the gateway with exit 64 before it says it
/// listens, so a supervisor never takes a misconfigured gateway for a running one.
#[tokio::test]
async fn unreadable_token_file_exits_64_before_listening() -> Result<()> {
    let redis = RedisServer::start()?;
    let (mut gateway, _) = Process::spawn(
        "mcp-tasks-gateway",
        &[
            ("MCPT_REDIS_URL", redis.url()),
            ("MCPT_LISTEN_ADDR", "127.0.0.1:0".to_owned()),
            ("MCPT_AUTH", "tokens".to_owned()),
            ("MCPT_AUTH_TOKENS_FILE", "/nonexistent/tokens".to_owned()),
        ],
    )?;
    let line = gateway.usage_error()?;
    assert!(line.contains("/nonexistent/tokens"), "{line}");
    Ok(())
}

/// A client that never finishes its headers is cut off (before authentication, so it
/// cannot hold connections for ever).
#[tokio::test]
async fn half_sent_headers_are_cut_off() -> Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = Dir::new("slow")?;
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &token_env(&dir)?)?;
    let mut slow = tokio::net::TcpStream::connect(gateway.addr).await?;
    slow.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await?;
    let mut buf = [0u8; 256];
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match slow.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "a half-sent request held its connection for 20 s"
    );
    Ok(())
}

/// Issue 20, item 3: the bytes a principal's tasks keep in Redis (arguments and results,
/// until they expire) are bounded by `MCPT_LIMIT_STORED_BYTES`. A result that would pass
/// it fails its task with an error naming the variable (nothing stored); creates are
/// refused with -31001 / 429 while over; another principal is unaffected; once the tasks
/// expire (TTL 4 s here) creates succeed again.
#[tokio::test]
async fn stored_bytes_per_principal_are_bounded_and_recover() -> Result<()> {
    let dir = Dir::new("stored")?;
    let mut env = token_env(&dir)?;
    env.push(("MCPT_LIMIT_STORED_BYTES", "200000".to_owned()));
    env.push(("MCPT_MAX_TTL", "4s".to_owned()));
    env.push(("MCPT_DEFAULT_TTL", "4s".to_owned()));
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &env)?;
    let _worker = Worker::start(&redis.url(), &env)?;
    let alice = gateway.client().with_token(ALICE);
    let bob = gateway.client().with_token(BOB);
    alice.wait_for_tool("echo").await?;
    let echo = |client: &Client, n: usize| {
        let client = client.clone();
        async move {
            client
                .call(
                    "echo",
                    json!({"text": "x".repeat(n)}),
                    &mcp_tasks_tests::caps_none(),
                )
                .await
        }
    };

    // 60 KB in, 60 KB out: kept.
    let r = echo(&alice, 60_000).await?;
    assert_eq!(
        r.body["result"]["content"][0]["text"]
            .as_str()
            .map(str::len),
        Some(60_000),
        "{}",
        r.status
    );
    // The next result would pass 200,000 bytes: its task fails, saying why.
    let r = echo(&alice, 60_000).await?;
    let text = r.body.to_string();
    assert!(
        text.contains("MCPT_LIMIT_STORED_BYTES") && !text.contains(&"x".repeat(1000)),
        "{}",
        &text[..text.len().min(400)]
    );
    // Its arguments were kept; one more create takes Alice over; then creates are refused.
    echo(&alice, 30_000).await?;
    let refused = echo(&alice, 1).await?;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], -31001);
    assert_eq!(refused.body["error"]["data"]["limit"], "stored_bytes");
    assert_eq!(refused.body["error"]["data"]["max"], 200_000);
    // Bob keeps his own bytes.
    let r = echo(&bob, 60_000).await?;
    assert!(
        r.body["result"]["content"][0]["text"].is_string(),
        "{}",
        r.status
    );
    // Alice's tasks expire (4 s, then as long again as expired tasks are kept, then at
    // most a 5 s bucket): her creates succeed again.
    poll_until(Duration::from_secs(30), || async {
        let r = echo(&alice, 1).await.ok()?;
        r.body["result"]["content"][0]["text"]
            .is_string()
            .then_some(())
    })
    .await
    .context("Alice's creates never came back after her tasks expired")?;
    Ok(())
}
