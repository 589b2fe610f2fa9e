//! Idempotent creation (issue 38): a `tools/call` with an idempotency key (the
//! `Idempotency-Key` header or `_meta["io.github.mcp-tasks/idempotencyKey"]`) is one task
//! however often and through whichever gateway it is sent; the tool's own side effect (a
//! line appended to a file by a command tool) shows it ran once.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use mcp_tasks_tests::{
    Client, Gateway, RedisServer, TempFile, TwoTokens, Worker, caps_tasks, meta, poll_until,
    write_catalog,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(20);

/// The `_meta` member carrying the key.
const KEY_META: &str = "io.github.mcp-tasks/idempotencyKey";

/// A Redis, a worker whose catalog has `append` (a line into `ran`, then `sleep` seconds)
/// and two gateways with static tokens for alice and bob.
struct Stack {
    _redis: RedisServer,
    _worker: Worker,
    gateways: Vec<Gateway>,
    _tokens: TwoTokens,
    ran: TempFile,
    _catalog: TempFile,
}

impl Stack {
    async fn start(sleep: &str) -> Result<Stack> {
        let ran = TempFile::new("ran.log")?;
        let catalog = write_catalog(&format!(
            r#"
            [[command]]
            name = "append"
            argv = ["sh", "-c", "echo \"$0\" >> {ran}; sleep {sleep}", "{{tag}}"]
            input_schema = {{ type = "object", properties = {{ tag = {{ type = "string" }} }}, required = ["tag"] }}
            "#,
            ran = ran.path().display(),
        ))?;
        let tokens = TwoTokens::new()?;
        let redis = RedisServer::start()?;
        let worker = Worker::start(
            &redis.url(),
            &[("MCPT_TOOLS_FILE", catalog.path().display().to_string())],
        )?;
        let gateways = vec![
            Gateway::start(&redis.url(), &tokens.env())?,
            Gateway::start(&redis.url(), &tokens.env())?,
        ];
        let stack = Stack {
            _redis: redis,
            _worker: worker,
            gateways,
            _tokens: tokens,
            ran,
            _catalog: catalog,
        };
        stack.alice(0).wait_for_tool("append").await?;
        Ok(stack)
    }

    fn alice(&self, gateway: usize) -> Client {
        self.gateways[gateway]
            .client()
            .with_token(mcp_tasks_tests::ALICE_TOKEN)
    }

    fn bob(&self) -> Client {
        self.gateways[1]
            .client()
            .with_token(mcp_tasks_tests::BOB_TOKEN)
    }

    /// The lines the tool appended: one per run.
    fn runs(&self) -> Vec<String> {
        std::fs::read_to_string(self.ran.path())
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// A keyed `tools/call` of `append` with `tag`: the key in the header when `in_header`,
/// else in `_meta`; `caps` as declared.
async fn keyed_call(
    client: &Client,
    key: &str,
    tag: &str,
    in_header: bool,
    caps: &Value,
) -> Result<Value> {
    let mut m = meta(caps);
    if !in_header {
        m[KEY_META] = json!(key);
    }
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "append", "arguments": {"tag": tag}, "_meta": m},
    });
    let mut headers = Client::headers("tools/call", Some("append"));
    if in_header {
        headers.push(("idempotency-key", key));
    }
    let reply = client
        .post_raw(&headers, serde_json::to_vec(&body)?)
        .await?;
    ensure!(reply.status == 200, "HTTP {}: {}", reply.status, reply.body);
    Ok(reply.body)
}

fn task_id(body: &Value) -> Result<String> {
    body["result"]["taskId"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("not a task: {body}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_keyed_calls_through_two_gateways_are_one_task_run_once() -> Result<()> {
    let s = Stack::start("1").await?;
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let client = s.alice(i % 2);
            tokio::spawn(async move {
                keyed_call(&client, "deploy-42", "a", i % 4 < 2, &caps_tasks()).await
            })
        })
        .collect();
    let mut ids = BTreeSet::new();
    for call in calls {
        ids.insert(task_id(&call.await??)?);
    }
    ensure!(ids.len() == 1, "one task for one key, got {ids:?}");
    let id = ids.pop_first().context("an id")?;
    s.alice(1).wait_status(&id, "completed", WITHIN).await?;
    // A retry after the end answers the same task, finished; the tool did not run again.
    let again = keyed_call(&s.alice(0), "deploy-42", "a", true, &caps_tasks()).await?;
    assert_eq!(task_id(&again)?, id);
    assert_eq!(again["result"]["status"], "completed", "{again}");
    assert_eq!(s.runs(), ["a"], "the tool ran once");

    // The same key for other arguments: refused, nothing created.
    let other = keyed_call(&s.alice(1), "deploy-42", "b", false, &caps_tasks()).await?;
    assert_eq!(other["error"]["code"], -32602, "{other}");
    assert_eq!(other["error"]["data"]["differs"], "arguments", "{other}");
    // Another principal's same key is its own task.
    let bobs = task_id(&keyed_call(&s.bob(), "deploy-42", "a", true, &caps_tasks()).await?)?;
    assert_ne!(bobs, id);
    s.bob().wait_status(&bobs, "completed", WITHIN).await?;
    assert_eq!(
        s.runs(),
        ["a", "a"],
        "bob's call ran once, alice's did not run again"
    );
    // Bob cannot read alice's task by its (derived) id.
    let peek = s
        .bob()
        .request("tasks/get", json!({"taskId": id}), &caps_tasks())
        .await?;
    assert_eq!(peek.body["error"]["code"], -32602, "{}", peek.body);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_the_gateway_died_mid_call_finds_the_same_task() -> Result<()> {
    let mut s = Stack::start("2").await?;
    // A synchronous call (no tasks extension declared) waits for the result on gateway 0.
    let first = {
        let client = s.alice(0);
        tokio::spawn(async move { keyed_call(&client, "build-7", "x", true, &json!({})).await })
    };
    poll_until(WITHIN, || async { (!s.runs().is_empty()).then_some(()) }).await?;
    s.gateways[0].process.kill();
    ensure!(first.await?.is_err(), "the killed gateway answered");
    // The retry through the other gateway waits for the same run's result.
    let retry = keyed_call(&s.alice(1), "build-7", "x", true, &json!({})).await?;
    assert_eq!(
        retry["result"]["structuredContent"]["exitCode"], 0,
        "{retry}"
    );
    assert_eq!(s.runs(), ["x"], "the tool ran once");
    // A malformed key is refused with a message, nothing created.
    let bad = keyed_call(&s.alice(1), "tab\there", "x", false, &caps_tasks()).await?;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let message = bad["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("printable ASCII"), "{bad}");
    Ok(())
}

/// A 2025 session on `client` (protocol 2025-06-18): its `Mcp-Session-Id`.
async fn session_2025(client: &Client) -> Result<String> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "keyed-2025", "version": "1"}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let r = client
        .post_raw(&headers, serde_json::to_vec(&body)?)
        .await?;
    ensure!(r.status == 200, "initialize: {} {}", r.status, r.body);
    let sid = r
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .context("no Mcp-Session-Id")?
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let mut h = headers.to_vec();
    h.push(("mcp-session-id", &sid));
    h.push(("mcp-protocol-version", "2025-06-18"));
    client
        .post_raw(&h, serde_json::to_vec(&initialized)?)
        .await?;
    Ok(sid)
}

/// A synchronous 2025 `tools/call` of `append` in session `sid`, keyed by the header.
async fn keyed_call_2025(client: &Client, sid: &str, key: &str, tag: &str) -> Result<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "append", "arguments": {"tag": tag}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-06-18"),
        ("idempotency-key", key),
    ];
    let r = client
        .post_raw(&headers, serde_json::to_vec(&body)?)
        .await?;
    ensure!(r.status == 200, "HTTP {}: {}", r.status, r.body);
    Ok(r.body)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2025_synchronous_call_retried_in_a_new_session_answers_the_first_run() -> Result<()> {
    let s = Stack::start("1").await?;
    let (first_client, retry_client) = (s.alice(0), s.alice(1));
    let first_sid = session_2025(&first_client).await?;
    let retry_sid = session_2025(&retry_client).await?;
    let first =
        tokio::spawn(
            async move { keyed_call_2025(&first_client, &first_sid, "sync-1", "s").await },
        );
    poll_until(WITHIN, || async { (!s.runs().is_empty()).then_some(()) }).await?;
    // The first call is still waiting for its run; the retry (another session, another
    // gateway) waits for the same run.
    let retry = keyed_call_2025(&retry_client, &retry_sid, "sync-1", "s").await?;
    let first = first.await??;
    for answer in [&first, &retry] {
        assert_eq!(
            answer["result"]["structuredContent"]["exitCode"], 0,
            "{answer}"
        );
    }
    assert_eq!(s.runs(), ["s"], "the tool ran once");
    Ok(())
}

/// In Redis Cluster the owner's limits are counted before the create, in another slot: a
/// keyed retry names a task already counted, so it is neither refused at the limit it
/// holds a place under nor given back (which would free that place for another task).
#[tokio::test(flavor = "multi_thread")]
async fn keyed_retries_in_a_cluster_keep_the_owners_active_count() -> Result<()> {
    let cluster = mcp_tasks_tests::RedisCluster::start(3)?;
    let env = [
        ("MCPT_QUEUE_SHARDS", "8".to_owned()),
        ("MCPT_LIMIT_ACTIVE_TASKS", "2".to_owned()),
    ];
    let _worker = Worker::start(&cluster.url(), &env)?;
    let gateway = Gateway::start(&cluster.url(), &env)?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;
    let (long, caps) = (json!({"ms": 60_000}), caps_tasks());
    let keyed = || client.call_keyed("sleep", long.clone(), &caps, "nightly-1");

    let first = task_id(&keyed().await?.body)?;
    assert_eq!(
        task_id(&keyed().await?.body)?,
        first,
        "the retry names the task"
    );
    client.start_task("sleep", long.clone()).await?;
    // Two unfinished now, the limit: a retry still answers its task, a new call is refused.
    assert_eq!(task_id(&keyed().await?.body)?, first, "retry at the limit");
    let refused = client.call("sleep", long.clone(), &caps_tasks()).await?;
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("MCPT_LIMIT_ACTIVE_TASKS"),
        "a third unfinished task was let in: {}",
        refused.body
    );
    Ok(())
}
