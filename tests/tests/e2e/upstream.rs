//! Tools of an existing MCP server (`[[upstream]]` catalog entries), run as our tasks:
//! the official `@modelcontextprotocol/server-everything` over stdio, installed by
//! `npm ci --prefix tests/upstream`. Results come back as task results, upstream progress
//! as status messages, an upstream task's elicitation as our `inputRequests`, and our
//! cancel reaches the upstream as `notifications/cancelled`; a catalog with a mistake
//! is refused at start.
//!
//! Each test writes its catalog to a temp file and starts its own Redis, gateway and worker.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use mcp_tasks_tests::{
    CatalogStack, Client, TempFile, assert_catalog_refused, poll_until, repo_root,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(30);

/// `dist/index.js` of server-everything; fails (never skips) when it is not installed.
fn everything() -> Result<PathBuf> {
    let path = repo_root()
        .join("tests/upstream/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !path.is_file() {
        bail!(
            "{} is missing: run `npm ci --prefix tests/upstream` (tests/run-all.sh does)",
            path.display()
        );
    }
    Ok(path)
}

/// `command = [...]` starting server-everything over stdio.
fn everything_command() -> Result<String> {
    Ok(format!(
        "command = [\"node\", {:?}, \"stdio\"]",
        everything()?.display().to_string()
    ))
}

/// A Redis, a gateway and a worker offering the catalog `text`, once `wanted` is listed.
async fn start(text: &str, wanted: &str) -> Result<CatalogStack> {
    CatalogStack::start(text, wanted, &[], &[]).await
}

/// Stopping a stack whose worker runs upstream processes.
trait StopUpstreams {
    /// Stop the worker with SIGTERM, as an orchestrator does, and check that the upstream
    /// processes it started (its children) ended with it.
    fn stop(self) -> Result<()>;
    /// [`StopUpstreams::stop`], returning how many upstream processes ended with the worker.
    fn stop_counting(self) -> Result<usize>;
}

impl StopUpstreams for CatalogStack {
    fn stop(self) -> Result<()> {
        self.stop_counting().map(|_| ())
    }

    fn stop_counting(mut self) -> Result<usize> {
        let pid = self.worker.process.child().id();
        let children = children_of(pid);
        self.worker.process.terminate(Duration::from_secs(20))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left: Vec<u32> = children.iter().copied().filter(|c| alive(*c)).collect();
            if left.is_empty() {
                return Ok(children.len());
            }
            if Instant::now() > deadline {
                bail!("upstream processes {left:?} outlived the worker by 10 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `/proc/PID/stat` fields after the command name: state, ppid, pgrp, ...
fn stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Running (not zombie) processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|c| stat(*c).is_some_and(|f| f.len() > 1 && f[0] != "Z" && f[1] == pid.to_string()))
        .collect()
}

fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|f| f.first().is_some_and(|s| s != "Z"))
}

/// Poll `tasks/get` until the task leaves `working`/`input_required` or `stop` says so,
/// recording each change of (status, statusMessage).
async fn watch(
    client: &Client,
    id: &str,
    mut stop: impl FnMut(&Value) -> bool,
) -> Result<(Value, Vec<(String, String)>)> {
    let mut seen: Vec<(String, String)> = Vec::new();
    let deadline = Instant::now() + WITHIN;
    loop {
        let t = client.get(id).await?;
        let now = (
            t["status"].as_str().unwrap_or_default().to_owned(),
            t["statusMessage"].as_str().unwrap_or_default().to_owned(),
        );
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        let status = t["status"].as_str().unwrap_or_default();
        if stop(&t) || !matches!(status, "working" | "input_required") {
            return Ok((t, seen));
        }
        if Instant::now() > deadline {
            bail!("task {id} still {status} after {WITHIN:?}; saw {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An upstream tool is listed with its upstream description and schema (under the
/// entry's prefix), and its `tools/call` result is our task's result.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_tool_result_is_the_task_result() -> Result<()> {
    let s = start(
        &format!(
            "[[upstream]]\nname = \"everything\"\n{}\ntools = [\"*\"]\nprefix = \"ev_\"\n",
            everything_command()?
        ),
        "ev_get-sum",
    )
    .await?;
    let list = s
        .client
        .request("tools/list", json!({}), &mcp_tasks_tests::caps_none())
        .await?;
    let tools = list.body["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let sum = tools
        .iter()
        .find(|t| t["name"] == "ev_get-sum")
        .context("ev_get-sum not listed")?;
    assert_eq!(
        sum["description"], "Returns the sum of two numbers",
        "{sum}"
    );
    assert_eq!(
        sum["inputSchema"]["properties"]["a"]["type"], "number",
        "{sum}"
    );
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "ev_simulate-research-query"),
        "the tools registered after initialize are listed too"
    );

    let id = s
        .client
        .start_task("ev_get-sum", json!({"a": 2, "b": 3}))
        .await?;
    let t = s.client.wait_status(&id, "completed", WITHIN).await?;
    assert_eq!(
        t["result"]["content"][0]["text"], "The sum of 2 and 3 is 5.",
        "{t}"
    );
    assert!(t["result"].get("isError").is_none_or(|e| e == false), "{t}");
    // The worker's SIGTERM ends the upstream server it started (a server-everything
    // with pending work would otherwise outlive it).
    let ended = s.stop_counting()?;
    assert!(ended >= 1, "the worker had no upstream process to stop");
    Ok(())
}

/// `notifications/progress` of the upstream become the task's changing status messages;
/// the task then completes with the upstream's result. Prints what a client polling
/// `tasks/get` saw.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_progress_becomes_status_messages() -> Result<()> {
    let s = start(
        &format!(
            "[[upstream]]\nname = \"everything\"\n{}\ntools = [\"trigger-long-running-operation\"]\n",
            everything_command()?
        ),
        "trigger-long-running-operation",
    )
    .await?;
    let id = s
        .client
        .start_task(
            "trigger-long-running-operation",
            json!({"duration": 3, "steps": 6}),
        )
        .await?;
    let (last, seen) = watch(&s.client, &id, |_| false).await?;
    eprintln!("tasks/get states of trigger-long-running-operation: {seen:#?}");
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(
        last["result"]["content"][0]["text"],
        "Long running operation completed. Duration: 3 seconds, Steps: 6.",
        "{last}"
    );
    let progress: Vec<&String> = seen
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m.starts_with("progress ") && m.ends_with("/6"))
        .collect();
    assert!(
        progress.len() >= 2,
        "expected changing 'progress N/6' messages, saw {seen:?}"
    );
    s.stop()
}

/// Cancelling our task sends `notifications/cancelled` with the `tools/call` request id to
/// the upstream (seen in a copy of what the worker wrote to the server's stdin), and
/// `tasks/cancel` when the upstream runs the call as its own task; our task ends
/// `cancelled` and the next call is served.
#[tokio::test(flavor = "multi_thread")]
async fn cancel_reaches_the_upstream() -> Result<()> {
    let wire_file = TempFile::new("wire.jsonl")?;
    let wire = wire_file.path();
    let s = start(
        &format!(
            "[[upstream]]\nname = \"everything\"\ncommand = [\"sh\", \"-c\", \"tee -a \\\"$0\\\" | exec node \\\"$1\\\" stdio\", {:?}, {:?}]\ntools = [\"trigger-long-running-operation\", \"simulate-research-query\", \"get-sum\"]\n",
            wire.display().to_string(),
            everything()?.display().to_string()
        ),
        "get-sum",
    )
    .await?;
    let id = s
        .client
        .start_task(
            "trigger-long-running-operation",
            json!({"duration": 60, "steps": 60}),
        )
        .await?;
    poll_until(WITHIN, || async {
        let t = s.client.get(&id).await.ok()?;
        t["statusMessage"]
            .as_str()?
            .starts_with("progress ")
            .then_some(())
    })
    .await
    .context("the long-running operation never reported progress")?;
    let r = s.client.cancel(&id).await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    s.client.wait_status(&id, "cancelled", WITHIN).await?;

    let sent = |method: &str| -> Vec<Value> {
        std::fs::read_to_string(wire)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["method"] == method)
            .collect()
    };
    let call_id = sent("tools/call")
        .iter()
        .find(|m| m["params"]["name"] == "trigger-long-running-operation")
        .map(|m| m["id"].clone())
        .context("the worker never sent tools/call")?;
    poll_until(Duration::from_secs(10), || async {
        sent("notifications/cancelled")
            .iter()
            .any(|m| m["params"]["requestId"] == call_id)
            .then_some(())
    })
    .await
    .with_context(|| {
        format!("no notifications/cancelled for request {call_id} reached the upstream")
    })?;

    // An upstream task (taskSupport "required") is cancelled with tasks/cancel.
    let id = s
        .client
        .start_task("simulate-research-query", json!({"topic": "tea"}))
        .await?;
    poll_until(WITHIN, || async {
        let t = s.client.get(&id).await.ok()?;
        (t["statusMessage"] == "Gathering sources...").then_some(())
    })
    .await
    .context("the research task never reported its first stage")?;
    let r = s.client.cancel(&id).await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    s.client.wait_status(&id, "cancelled", WITHIN).await?;
    poll_until(Duration::from_secs(10), || async {
        (!sent("tasks/cancel").is_empty()).then_some(())
    })
    .await
    .context("no tasks/cancel reached the upstream")?;

    let id = s
        .client
        .start_task("get-sum", json!({"a": 1, "b": 1}))
        .await?;
    let t = s.client.wait_status(&id, "completed", WITHIN).await?;
    assert_eq!(
        t["result"]["content"][0]["text"], "The sum of 1 and 1 is 2.",
        "{t}"
    );
    s.stop()
}

/// A tool the upstream runs only as a task (2025-11-25 `taskSupport: "required"`) that
/// asks for clarification: its `elicitation/create`, delivered through `tasks/result`,
/// becomes our `inputRequests`; after `tasks/update` the answer reaches the upstream and
/// the task completes with the report that used it. Prints what a client polling
/// `tasks/get` saw.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_task_asks_through_our_input_requests() -> Result<()> {
    let s = start(
        &format!(
            "[[upstream]]\nname = \"everything\"\n{}\ntools = [\"simulate-research-query\"]\n",
            everything_command()?
        ),
        "simulate-research-query",
    )
    .await?;
    let id = s
        .client
        .start_task(
            "simulate-research-query",
            json!({"topic": "python", "ambiguous": true}),
        )
        .await?;
    let (asking, mut seen) = watch(&s.client, &id, |t| t["status"] == "input_required").await?;
    assert_eq!(asking["status"], "input_required", "{asking}");
    let request = &asking["inputRequests"]["elicitation-1"];
    assert_eq!(request["method"], "elicitation/create", "{asking}");
    assert!(
        request["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("python")),
        "{asking}"
    );
    assert!(request["params"].get("_meta").is_none(), "{asking}");

    let r = s
        .client
        .update(
            &id,
            json!({"elicitation-1": {"action": "accept", "content": {"interpretation": "snake"}}}),
        )
        .await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    let (last, rest) = watch(&s.client, &id, |_| false).await?;
    let last_seen = seen.last().cloned();
    seen.extend(
        rest.into_iter()
            .skip_while(|s| Some(s) == last_seen.as_ref()),
    );
    eprintln!("tasks/get states of simulate-research-query: {seen:#?}");
    assert_eq!(last["status"], "completed", "{last}");
    let text = last["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("# Research Report: python (snake)"), "{last}");
    assert!(
        seen.iter()
            .any(|(_, m)| m.starts_with("Continuing with interpretation: \"snake\"")),
        "the upstream's status messages are mirrored: {seen:?}"
    );
    s.stop()
}

/// server-everything in Streamable HTTP mode on a free port; killed on drop.
struct HttpEverything {
    child: std::process::Child,
    url: String,
}

impl HttpEverything {
    async fn start() -> Result<HttpEverything> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = std::process::Command::new("node")
            .arg(everything()?)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("cannot start node")?;
        let server = HttpEverything {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        poll_until(WITHIN, || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        })
        .await
        .context("server-everything never listened")?;
        Ok(server)
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The same over Streamable HTTP: a plain call's result, progress from the call's SSE
/// stream, and an upstream task's elicitation delivered on the `tasks/result` stream.
#[tokio::test(flavor = "multi_thread")]
async fn streamable_http_upstream_runs_calls_and_tasks() -> Result<()> {
    let server = HttpEverything::start().await?;
    let s = start(
        &format!(
            "[[upstream]]\nname = \"everything-http\"\nurl = {:?}\ntools = [\"get-sum\", \"trigger-long-running-operation\", \"simulate-research-query\"]\n",
            server.url
        ),
        "simulate-research-query",
    )
    .await?;
    let id = s
        .client
        .start_task("get-sum", json!({"a": 40, "b": 2}))
        .await?;
    let t = s.client.wait_status(&id, "completed", WITHIN).await?;
    assert_eq!(
        t["result"]["content"][0]["text"], "The sum of 40 and 2 is 42.",
        "{t}"
    );

    let id = s
        .client
        .start_task(
            "trigger-long-running-operation",
            json!({"duration": 2, "steps": 4}),
        )
        .await?;
    let (last, seen) = watch(&s.client, &id, |_| false).await?;
    assert_eq!(last["status"], "completed", "{last}");
    assert!(
        seen.iter()
            .filter(|(_, m)| m.starts_with("progress "))
            .count()
            >= 2,
        "{seen:?}"
    );

    let id = s
        .client
        .start_task(
            "simulate-research-query",
            json!({"topic": "tea", "ambiguous": true}),
        )
        .await?;
    let (asking, _) = watch(&s.client, &id, |t| t["status"] == "input_required").await?;
    assert_eq!(
        asking["inputRequests"]["elicitation-1"]["method"], "elicitation/create",
        "{asking}"
    );
    let r = s
        .client
        .update(
            &id,
            json!({"elicitation-1": {"action": "accept", "content": {"interpretation": "historical"}}}),
        )
        .await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    let (last, _) = watch(&s.client, &id, |_| false).await?;
    assert_eq!(last["status"], "completed", "{last}");
    let text = last["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("# Research Report: tea (historical)"),
        "{last}"
    );
    s.stop()
}

/// A catalog whose `[[upstream]]` has a mistake, or whose upstream lacks a listed tool,
/// stops the worker at start: exit 64 and one line naming the file, the entry and the field.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_mistakes_are_refused_at_start() -> Result<()> {
    let command = everything_command()?;
    let cases = [
        (
            format!("[[upstream]]\nname = \"everything\"\n{command}\ntools = [\"*\"]\nshell = true\n"),
            "[[upstream]] #1 (\"everything\"): field shell: unknown field",
        ),
        (
            "[[upstream]]\nname = \"everything\"\ntools = [\"*\"]\n".to_owned(),
            "[[upstream]] #1 (\"everything\"): field command: missing",
        ),
        (
            format!("[[upstream]]\nname = \"everything\"\n{command}\ntools = [\"get-sum\", \"nope\"]\n"),
            "[[upstream]] #1 (\"everything\"): field tools: the upstream has no tool \"nope\" (it has: ",
        ),
        (
            "[[upstream]]\nname = \"gone\"\ncommand = [\"sh\", \"-c\", \"echo broken >&2; exit 1\"]\ntools = [\"*\"]\n".to_owned(),
            "[[upstream]] #1 (\"gone\"): field command: cannot start the upstream: initialize failed: connection closed: the process exited (exit status: 1): broken",
        ),
    ];
    for (text, want) in cases {
        assert_catalog_refused(&text, want)?;
    }
    Ok(())
}
