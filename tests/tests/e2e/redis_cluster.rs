//! Redis Cluster mode (issue 5): the whole flow against a private 3-master cluster, with
//! `MCPT_REDIS_URL=redis+cluster://…` and `MCPT_QUEUE_SHARDS=8`, two gateways (a task is
//! read, answered and cancelled through the one that did not create it) and two workers.
//!
//! Checks that tasks really spread: their keys land on every master.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use mcp_tasks_tests::{
    Client, Gateway, RedisCluster, SseStream, Worker, caps_none, caps_tasks, poll_until,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(20);
const SHARDS: &str = "8";

/// The cluster, two gateways and two workers; stopped on drop.
struct Stack {
    cluster: RedisCluster,
    gateways: Vec<Gateway>,
    workers: Vec<Worker>,
}

impl Stack {
    async fn start() -> Result<Stack> {
        let cluster = RedisCluster::start(3)?;
        let env = [("MCPT_QUEUE_SHARDS", SHARDS.to_owned())];
        let workers = vec![
            Worker::start(&cluster.url(), &env)?,
            Worker::start(&cluster.url(), &env)?,
        ];
        let gateways = vec![
            Gateway::start(&cluster.url(), &env)?,
            Gateway::start(&cluster.url(), &env)?,
        ];
        let stack = Stack {
            cluster,
            gateways,
            workers,
        };
        stack.client(0).wait_for_tool("sleep").await?;
        stack.client(1).wait_for_tool("ask").await?;
        Ok(stack)
    }

    fn client(&self, i: usize) -> Client {
        self.gateways[i].client()
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for g in &self.gateways {
            out += &format!("--- gateway ---\n{}\n", g.process.log_text());
        }
        for w in &self.workers {
            out += &format!("--- worker ---\n{}\n", w.process.log_text());
        }
        out
    }
}

/// Every `notifications/tasks` of `stream` until one for `id` says `status`; their params.
async fn notes_until(stream: &mut SseStream, id: &str, status: &str) -> Result<Vec<Value>> {
    let deadline = Instant::now() + WITHIN;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(msg) = stream.next(left).await else {
            bail!("no {status} notification for {id}; saw {seen:?}");
        };
        if msg["method"] != "notifications/tasks" {
            continue;
        }
        let params = msg["params"].clone();
        let done = params["taskId"] == id && params["status"] == status;
        seen.push(params);
        if done {
            return Ok(seen);
        }
    }
}

/// Start a 2025-11-25 session, create `count` tasks through it (task-augmented `sleep`),
/// and page through its `tasks/list`: (created, listed).
async fn list_2025(client: &Client, count: u64) -> Result<(Vec<String>, Vec<String>)> {
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "cluster-2025", "version": "1"}}});
    let r = client
        .post_raw(&headers, serde_json::to_vec(&init)?)
        .await?;
    let sid = r
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .with_context(|| format!("no session: {}", r.body))?
        .to_owned();
    let mut session = headers.to_vec();
    session.push(("mcp-session-id", &sid));
    session.push(("mcp-protocol-version", "2025-11-25"));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    client
        .post_raw(&session, serde_json::to_vec(&note)?)
        .await?;
    let mut created = Vec::new();
    for i in 0..count {
        let body = json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": {
            "name": "sleep", "arguments": {"ms": 0}, "task": {}}});
        let r = client
            .post_raw(&session, serde_json::to_vec(&body)?)
            .await?;
        created.push(
            r.body["result"]["task"]["taskId"]
                .as_str()
                .with_context(|| format!("task-augmented call: {}", r.body))?
                .to_owned(),
        );
    }
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 1..=100 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let body = json!({"jsonrpc": "2.0", "id": page, "method": "tasks/list", "params": params});
        let r = client
            .post_raw(&session, serde_json::to_vec(&body)?)
            .await?;
        let tasks = r.body["result"]["tasks"]
            .as_array()
            .with_context(|| format!("tasks/list: {}", r.body))?;
        ids.extend(
            tasks
                .iter()
                .filter_map(|t| t["taskId"].as_str().map(str::to_owned)),
        );
        cursor = r.body["result"]["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            return Ok((created, ids));
        }
    }
    bail!("tasks/list never ended")
}

/// Tasks in cluster mode: created, run, asked, answered, cancelled and notified as on one
/// Redis, each task's keys in the slot of its shard, spread over all three masters.
#[tokio::test]
async fn whole_flow_runs_on_a_three_master_cluster() -> Result<()> {
    let stack = Stack::start().await?;
    let mut result = flow(&stack).await;
    if result.is_ok() {
        result = operator_views(&stack);
    }
    if result.is_err() {
        eprintln!("{}", stack.logs());
    }
    result
}

/// `mcp-tasks queues` and `workers` read a cluster as they read one Redis: the default
/// queue summed over its shard streams, both workers as its consumers, the live tools.
fn operator_views(stack: &Stack) -> Result<()> {
    let run = |command: &str| -> Result<String> {
        let out = std::process::Command::new(mcp_tasks_tests::binary("mcp-tasks"))
            .args([command, "--redis", &stack.cluster.url()])
            .env("MCPT_QUEUE_SHARDS", SHARDS)
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "mcp-tasks {command}: {}; stdout {stdout:?}, stderr {:?}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(stdout)
    };
    let queues = run("queues")?;
    let row = queues
        .lines()
        .find(|l| l.starts_with("default "))
        .with_context(|| format!("no default queue: {queues}"))?;
    if row.split_whitespace().last() != Some("2") {
        bail!("two workers should consume the default queue: {queues}");
    }
    let workers = run("workers")?;
    if !workers.lines().any(|l| l.starts_with("sleep ")) || !workers.contains("CONSUMER") {
        bail!("workers should list the sleep tool and the consumers: {workers}");
    }
    Ok(())
}

async fn flow(stack: &Stack) -> Result<()> {
    let (a, b) = (stack.client(0), stack.client(1));

    // tools/list through either gateway.
    let r = b.request("tools/list", json!({}), &caps_none()).await?;
    let tools: Vec<&str> = r.body["result"]["tools"]
        .as_array()
        .context("tools/list")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["sleep", "ask", "echo"] {
        assert!(tools.contains(&tool), "{tool} missing from {tools:?}");
    }

    // A sleep task, watched on a listen stream of the other gateway, ends completed with
    // its status messages on the way.
    let id = a
        .start_task("sleep", json!({"ms": 600, "steps": 3}))
        .await?;
    assert!(id.starts_with("tsk"), "{id}");
    let mut listen = b.listen("L1", &[&id]).await?;
    let ack = listen.next(WITHIN).await.context("no acknowledgement")?;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let notes = notes_until(&mut listen, &id, "completed").await?;
    let messages: Vec<&str> = notes
        .iter()
        .filter_map(|n| n["statusMessage"].as_str())
        .collect();
    assert!(
        messages.iter().any(|m| m.starts_with("step ")),
        "no status message among {notes:?}"
    );
    let done = b.wait_status(&id, "completed", WITHIN).await?;
    assert_eq!(done["statusMessage"], "step 3/3", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "slept 600 ms",
        "{done}"
    );

    // ask → input_required → tasks/update (other gateway) → completed.
    let id = a.start_task("ask", json!({"question": "Colour?"})).await?;
    let t = b.wait_status(&id, "input_required", WITHIN).await?;
    assert!(t["inputRequests"]["answer-1"].is_object(), "{t}");
    let r = b
        .update(
            &id,
            json!({"answer-1": {"action": "accept", "content": {"answer": "blue"}}}),
        )
        .await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    let t = a.wait_status(&id, "completed", WITHIN).await?;
    assert_eq!(t["result"]["content"][0]["text"], "answer: blue", "{t}");

    // Cancel of a long sleep, through the gateway that did not create it; its listener
    // hears the cancellation.
    let id = a.start_task("sleep", json!({"ms": 60_000})).await?;
    a.wait_status(&id, "working", WITHIN).await?;
    let mut listen = a.listen("L2", &[&id]).await?;
    listen.next(WITHIN).await.context("no acknowledgement")?;
    let r = b.cancel(&id).await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    notes_until(&mut listen, &id, "cancelled").await?;
    let t = a.wait_status(&id, "cancelled", WITHIN).await?;
    assert!(t.get("result").is_none(), "{t}");

    // An id of the standalone form names no shard: unknown, like any other.
    let r = b.cancel("tsk_not-a-cluster-id").await?;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.body);

    // A synchronous call (no extension): the gateway waits on the task's shard channel.
    let r = b.call("sleep", json!({"ms": 100}), &caps_none()).await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    assert_eq!(
        r.body["result"]["content"][0]["text"], "slept 100 ms",
        "{}",
        r.body
    );
    let r = a.call("echo", json!({"text": "hi"}), &caps_tasks()).await?;
    assert_eq!(r.body["result"]["content"][0]["text"], "hi", "{}", r.body);

    // A job reaching idle workers (blocked on every shard's stream) starts at once: the
    // shard that got it ends the others' waits instead of waiting out their BLOCK (2 s).
    for _ in 0..5 {
        let started = Instant::now();
        let id = a.start_task("sleep", json!({"ms": 0})).await?;
        a.wait_status(&id, "completed", WITHIN).await?;
        let took = started.elapsed();
        assert!(took < Duration::from_millis(700), "{id} took {took:?}");
    }

    // Many tasks at once, half through each gateway, all complete; their keys spread over
    // every master.
    let mut ids = Vec::new();
    for i in 0..48 {
        let client = if i % 2 == 0 { &a } else { &b };
        ids.push(client.start_task("sleep", json!({"ms": 0})).await?);
    }
    for id in &ids {
        b.wait_status(id, "completed", WITHIN).await?;
    }
    let tags: std::collections::HashSet<&str> = ids
        .iter()
        .filter_map(|id| id.strip_prefix("tsk")?.split_once('_').map(|(t, _)| t))
        .collect();
    assert!(tags.len() > 3, "48 tasks on only {tags:?}");
    let per_node = poll_until(WITHIN, || async {
        let keys = stack.cluster.keys_per_node().ok()?;
        keys.iter().all(|k| *k > 0).then_some(keys)
    })
    .await
    .context("some master holds no key")?;
    eprintln!("keys per master: {per_node:?}");

    // A 2025-11-25 session lists the tasks it created, spread over the masters, over two
    // pages.
    let (created, listed) = list_2025(&b, 60).await?;
    for id in &created {
        assert!(
            listed.contains(id),
            "{id} not listed; listed {}",
            listed.len()
        );
    }
    for (i, node) in stack.cluster.node_urls().iter().enumerate() {
        let tasks = stack
            .cluster
            .cli(i, &["--scan", "--pattern", "mcpt:task:*"])?;
        assert!(
            tasks.lines().count() > 0,
            "no task hash on master {i} ({node}); keys per master {per_node:?}"
        );
    }
    Ok(())
}

/// A malformed cluster node list, or shards without a cluster, stop each binary at start
/// with exit code 64 and one line naming the variable (STYLE.md §6).
#[tokio::test]
async fn bad_cluster_settings_stop_the_binaries_with_one_line() -> Result<()> {
    use crate::processes::assert_rejects_config;
    let cluster = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001";
    for name in ["mcp-tasks-gateway", "mcp-tasks-worker"] {
        for bad in [
            "redis+cluster://127.0.0.1:7000,nohost",
            "redis://127.0.0.1:7000,http://127.0.0.1:7001",
        ] {
            assert_rejects_config(name, cluster, "MCPT_REDIS_URL", bad).await?;
        }
        assert_rejects_config(name, "redis://127.0.0.1:7000", "MCPT_QUEUE_SHARDS", "8").await?;
        assert_rejects_config(name, cluster, "MCPT_QUEUE_SHARDS", "0").await?;
        assert_rejects_config(name, cluster, "MCPT_QUEUE_SHARDS", "2000").await?;
    }
    Ok(())
}

/// The gateway's shard subscriptions survive their connections being cut: after
/// `CLIENT KILL TYPE pubsub` on every master, a listener still hears its task complete
/// (the hub subscribes again and its watchers re-read, so a change made meanwhile is not
/// lost either).
#[tokio::test]
async fn listeners_hear_changes_after_pubsub_connections_are_cut() -> Result<()> {
    let stack = Stack::start().await?;
    let result = async {
        let (a, b) = (stack.client(0), stack.client(1));
        let mut ids = Vec::new();
        for _ in 0..6 {
            let id = a.start_task("ask", json!({"question": "?"})).await?;
            a.wait_status(&id, "input_required", WITHIN).await?;
            ids.push(id);
        }
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut listen = b.listen("L", &refs).await?;
        listen.next(WITHIN).await.context("no acknowledgement")?;
        for i in 0..3 {
            let killed = stack
                .cluster
                .cli(i, &["CLIENT", "KILL", "TYPE", "pubsub"])?;
            eprintln!("master {i}: killed {} pubsub connection(s)", killed.trim());
        }
        for id in &ids {
            let r = a
                .update(
                    id,
                    json!({"answer-1": {"action": "accept", "content": {"answer": "x"}}}),
                )
                .await?;
            assert!(r.body.get("error").is_none(), "{}", r.body);
        }
        let mut waiting: std::collections::HashSet<&str> = refs.iter().copied().collect();
        let deadline = Instant::now() + WITHIN;
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(msg) = listen.next(left).await else {
                bail!("no completed notification for {waiting:?}");
            };
            let params = &msg["params"];
            if msg["method"] == "notifications/tasks" && params["status"] == "completed" {
                waiting.remove(params["taskId"].as_str().unwrap_or_default());
            }
        }
        Ok(())
    }
    .await;
    if result.is_err() {
        eprintln!("{}", stack.logs());
    }
    result
}

/// Acknowledged means replicated in a cluster too (issue 14): `WAIT` goes to the primary
/// that took the write, on the socket that wrote it, and only there. Two masters with a
/// replica each, one task shard on each; with master 1's replica stopped, creates on
/// master 1's shard are refused with the retryable error after the wait, and creates on
/// master 0's shard succeed (a `WAIT` sent to every master would refuse them all; one sent
/// on a socket that wrote nothing would confirm at once). All succeed once it runs again.
#[tokio::test]
async fn creates_wait_for_their_own_shards_replica() -> Result<()> {
    let (cluster, _gateway, _worker, client) = waiting_stack(2, "500ms").await?;

    let tasks_on = |master: usize| -> Result<std::collections::HashSet<String>> {
        let keys = cluster.cli(master, &["--scan", "--pattern", "mcpt:task:*"])?;
        Ok(keys.lines().map(str::to_owned).collect())
    };
    let before = [tasks_on(0)?, tasks_on(1)?];
    let lagging = cluster.replicas_of(1).start;
    cluster.set_stopped(lagging, true)?;
    let (mut confirmed, mut refused) = (Vec::new(), 0);
    // Shards are picked at random: 20 creates see both (all on one: 2 in a million).
    for _ in 0..20 {
        let started = Instant::now();
        let reply = client
            .call("sleep", json!({"ms": 10}), &caps_tasks())
            .await?;
        if let Some(id) = reply.body["result"]["taskId"].as_str() {
            confirmed.push(id.to_owned());
            continue;
        }
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        anyhow::ensure!(
            message.contains("MCPT_REDIS_WAIT_REPLICAS") && message.contains("try again"),
            "a create refused otherwise: {}",
            reply.body
        );
        anyhow::ensure!(
            started.elapsed() >= Duration::from_millis(500),
            "refused after {:?}, before the wait ran out",
            started.elapsed()
        );
        refused += 1;
    }
    cluster.set_stopped(lagging, false)?;
    anyhow::ensure!(
        !confirmed.is_empty() && refused > 0,
        "{} confirmed, {refused} refused: both shards should have been tried",
        confirmed.len()
    );
    // Exactly the creates on master 0 were confirmed, and every one of them (a WAIT on
    // master 1 too would have refused those after the first refusal there).
    let new_on = |master: usize| -> Result<Vec<String>> {
        Ok(tasks_on(master)?
            .difference(&before[master])
            .cloned()
            .collect())
    };
    let (on_0, on_1) = (new_on(0)?, new_on(1)?);
    anyhow::ensure!(
        on_0.len() == confirmed.len() && on_1.len() == refused,
        "master 0 took {} tasks, master 1 {}; {} were confirmed, {refused} refused",
        on_0.len(),
        on_1.len(),
        confirmed.len()
    );
    for id in &confirmed {
        anyhow::ensure!(
            on_0.iter().any(|key| key.contains(id.as_str())),
            "{id} was confirmed but is not on master 0, whose replica ran"
        );
    }
    let id = client.start_task("sleep", json!({"ms": 10})).await?;
    client.wait_status(&id, "completed", WITHIN).await?;
    Ok(())
}

/// A `WAIT` whose socket is cut is an unconfirmed change: with the replica stopped, a
/// create's connections are killed while it waits, and the create is cancelled and
/// refused with the retryable error naming `MCPT_REDIS_WAIT_REPLICAS` (it used to fail as
/// "Redis unavailable" while its task, written before the `WAIT`, went on to run).
#[tokio::test]
async fn a_wait_cut_short_is_not_confirmed() -> Result<()> {
    let (cluster, _gateway, _worker, client) = waiting_stack(1, "5s").await?;

    let replica = cluster.replicas_of(0).start;
    cluster.set_stopped(replica, true)?;
    let create = {
        let client = client.clone();
        tokio::spawn(async move { client.call("sleep", json!({"ms": 10}), &caps_tasks()).await })
    };
    // Once the create is waiting for the stopped replica (a client blocked in WAIT; an idle
    // pooled connection shows its last WAIT too, unblocked), cut every ordinary connection.
    poll_until(WITHIN, || async {
        let clients = cluster.cli(0, &["CLIENT", "LIST"]).ok()?;
        clients
            .lines()
            .any(|c| c.contains("cmd=wait") && c.contains("flags=b "))
            .then_some(())
    })
    .await
    .context("the create never waited for its replica")?;
    cluster.cli(0, &["CLIENT", "KILL", "TYPE", "normal"])?;
    let reply = create.await??;
    cluster.set_stopped(replica, false)?;
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    anyhow::ensure!(
        message.contains("MCPT_REDIS_WAIT_REPLICAS") && message.contains("try again"),
        "a create whose WAIT was cut short: {}",
        reply.body
    );
    Ok(())
}

/// `masters` masters with a replica each (one task shard per master), a gateway and a
/// worker with `MCPT_REDIS_WAIT_REPLICAS=1` and `MCPT_REDIS_WAIT_TIMEOUT=timeout`; one task
/// has run through it.
async fn waiting_stack(
    masters: usize,
    timeout: &str,
) -> Result<(RedisCluster, Gateway, Worker, Client)> {
    let cluster = RedisCluster::start_with_replicas(masters, 1)?;
    let env = [
        ("MCPT_QUEUE_SHARDS", masters.to_string()),
        ("MCPT_REDIS_WAIT_REPLICAS", "1".to_owned()),
        ("MCPT_REDIS_WAIT_TIMEOUT", timeout.to_owned()),
    ];
    let gateway = Gateway::start(&cluster.url(), &env)?;
    let worker = Worker::start(&cluster.url(), &env)?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;
    let id = client.start_task("sleep", json!({"ms": 10})).await?;
    client.wait_status(&id, "completed", WITHIN).await?;
    Ok((cluster, gateway, worker, client))
}
