//! Tools of an existing MCP server (`[[upstream]]` catalog entries), run as our tasks:
//! the official `@modelcontextprotocol/server-everything` over stdio, installed by
//! `npm ci --prefix tests/upstream`. Results come back as task results, upstream progress
//! as status messages, an upstream task's elicitation as our `inputRequests`, and our
//! cancel reaches the upstream as `notifications/cancelled`; a catalog with a mistake
//! is refused at start. With `prompts = true` and `resources = true` its prompts and
//! resources are served by every gateway, in both protocol eras.
//!
//! Each test writes its catalog to a temp file and starts its own Redis, gateway and worker.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
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
pub(crate) fn stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Running (not zombie) processes whose parent is `pid`.
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
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
            format!(
                "[[upstream]]\nname = \"everything\"\n{command}\ntools = [\"*\"]\nshell = true\n"
            ),
            "[[upstream]] #1 (\"everything\"): field shell: unknown field",
        ),
        (
            "[[upstream]]\nname = \"everything\"\ntools = [\"*\"]\n".to_owned(),
            "[[upstream]] #1 (\"everything\"): field command: missing",
        ),
        (
            format!(
                "[[upstream]]\nname = \"everything\"\n{command}\ntools = [\"get-sum\", \"nope\"]\n"
            ),
            "[[upstream]] #1 (\"everything\"): field tools: the upstream has no tool \"nope\" (it has: ",
        ),
        (
            format!(
                "[[upstream]]\nname = \"one\"\n{command}\nresources = true\n\n[[upstream]]\nname = \"two\"\n{command}\nresources = true\nprefix = \"two_\"\n"
            ),
            "[[upstream]] #2 (\"two\"): field resources: the upstream's resource \"demo://resource/static/document/",
        ),
    ];
    for (text, want) in cases {
        assert_catalog_refused(&text, want)?;
    }
    // A server that exits at once: whether the initialize was written before it went
    // ("connection closed") or after ("connection closed before sending") is a race, and
    // both say so; its exit and last words follow.
    let line = assert_catalog_refused(
        "[[upstream]]\nname = \"gone\"\ncommand = [\"sh\", \"-c\", \"echo broken >&2; exit 1\"]\ntools = [\"*\"]\n",
        "[[upstream]] #1 (\"gone\"): field command: cannot start the upstream: initialize failed: connection closed",
    )?;
    ensure!(
        line.ends_with(": the process exited (exit status: 1): broken"),
        "{line}"
    );
    Ok(())
}

/// The error object of a reply, failing when it has a result.
fn error_of(r: &mcp_tasks_tests::Reply) -> Result<Value> {
    r.body
        .get("error")
        .cloned()
        .with_context(|| format!("expected an error, got {}", r.body))
}

/// The result of a reply, failing on an error.
fn result_of(r: &mcp_tasks_tests::Reply) -> Result<Value> {
    r.body
        .get("result")
        .cloned()
        .with_context(|| format!("expected a result, got {}", r.body))
}

/// A 2026-07-28 list or read result carries the caching hints (SEP-2549).
fn assert_cacheable(method: &str, result: &Value) {
    assert_eq!(result["resultType"], "complete", "{method}: {result}");
    assert!(result["ttlMs"].is_u64(), "{method}: ttlMs {result}");
    assert!(
        matches!(result["cacheScope"].as_str(), Some("public" | "private")),
        "{method}: cacheScope {result}"
    );
}

/// `prompts = true` and `resources = true`: discover advertises both; prompts are listed
/// under the entry's prefix and got with their arguments; resources and templates are
/// listed, a text and a binary (blob) resource read; an unknown prompt, an unknown URI, a
/// bad argument and a bad cursor are -32602 saying what was wrong. A second gateway, which
/// never saw the worker, answers the same; and a 2025-11-25 session is offered both too.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_prompts_and_resources_are_served_by_any_gateway() -> Result<()> {
    let s = start(
        &format!(
            "[[upstream]]\nname = \"everything\"\n{}\ntools = [\"get-sum\"]\nprefix = \"ev_\"\nprompts = true\nresources = true\n",
            everything_command()?
        ),
        "ev_get-sum",
    )
    .await?;
    let other = mcp_tasks_tests::Gateway::start(&s.redis.url(), &[])?;
    let none = mcp_tasks_tests::caps_none();
    for client in [&s.client, &other.client()] {
        let d = result_of(&client.request("server/discover", json!({}), &none).await?)?;
        assert!(d["capabilities"]["prompts"].is_object(), "{d}");
        assert!(d["capabilities"]["resources"].is_object(), "{d}");

        let prompts = result_of(&client.request("prompts/list", json!({}), &none).await?)?;
        assert_cacheable("prompts/list", &prompts);
        let names: Vec<&str> = prompts["prompts"]
            .as_array()
            .context("prompts")?
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"ev_simple-prompt"), "{names:?}");
        assert!(names.contains(&"ev_args-prompt"), "{names:?}");
        let got = result_of(
            &client
                .request(
                    "prompts/get",
                    json!({"name": "ev_args-prompt", "arguments": {"city": "Paris", "state": "TX"}}),
                    &none,
                )
                .await?,
        )?;
        assert_eq!(
            got["messages"][0]["content"]["text"], "What's weather in Paris, TX?",
            "{got}"
        );
        assert_eq!(got["resultType"], "complete", "{got}");

        let resources = result_of(&client.request("resources/list", json!({}), &none).await?)?;
        assert_cacheable("resources/list", &resources);
        let first = resources["resources"][0]["uri"]
            .as_str()
            .with_context(|| format!("no resource listed: {resources}"))?;
        let read = result_of(
            &client
                .request("resources/read", json!({"uri": first}), &none)
                .await?,
        )?;
        assert_cacheable("resources/read", &read);
        assert_eq!(read["contents"][0]["uri"], first, "{read}");
        let templates = result_of(
            &client
                .request("resources/templates/list", json!({}), &none)
                .await?,
        )?;
        assert_cacheable("resources/templates/list", &templates);
        assert!(
            templates["resourceTemplates"]
                .as_array()
                .context("resourceTemplates")?
                .iter()
                .any(|t| t["uriTemplate"] == "demo://resource/dynamic/blob/{resourceId}"),
            "{templates}"
        );
        let blob = result_of(
            &client
                .request(
                    "resources/read",
                    json!({"uri": "demo://resource/dynamic/blob/3"}),
                    &none,
                )
                .await?,
        )?;
        let bytes = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            blob["contents"][0]["blob"]
                .as_str()
                .with_context(|| format!("no blob: {blob}"))?,
        )?;
        assert!(
            String::from_utf8(bytes)?.starts_with("Resource 3: This is a base64 blob"),
            "{blob}"
        );
    }

    let c = &s.client;
    let e = error_of(
        &c.request("prompts/get", json!({"name": "simple-prompt"}), &none)
            .await?,
    )?;
    assert_eq!(e["code"], -32602, "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Unknown prompt: simple-prompt")),
        "without the prefix it is no prompt of ours: {e}"
    );
    let e = error_of(
        &c.request(
            "prompts/get",
            json!({"name": "ev_args-prompt", "arguments": {"city": 3}}),
            &none,
        )
        .await?,
    )?;
    assert_eq!(e["code"], -32602, "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("params.arguments.city must be a string")),
        "{e}"
    );
    let unknown = "test://nonexistent-resource-for-conformance-testing";
    let e = error_of(
        &c.request("resources/read", json!({"uri": unknown}), &none)
            .await?,
    )?;
    assert_eq!(e["code"], -32602, "{e}");
    assert_eq!(e["data"]["uri"], unknown, "{e}");
    let e = error_of(
        &c.request("prompts/list", json!({"cursor": "not-ours"}), &none)
            .await?,
    )?;
    assert_eq!(e["code"], -32602, "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("invalid cursor")),
        "{e}"
    );

    // A 2025-11-25 session is offered both, and gets the same prompts.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-2025", "version": "1"}}});
    let base = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let r = other
        .client()
        .post_raw(&base, serde_json::to_vec(&init)?)
        .await?;
    let caps = &r.body["result"]["capabilities"];
    assert!(
        caps["prompts"].is_object() && caps["resources"].is_object(),
        "{}",
        r.body
    );
    let sid = r
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .context("no Mcp-Session-Id")?
        .to_owned();
    let mut headers = base.to_vec();
    headers.push(("mcp-session-id", sid.as_str()));
    headers.push(("mcp-protocol-version", "2025-11-25"));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
        "params": {"name": "ev_simple-prompt"}});
    let r = c.post_raw(&headers, serde_json::to_vec(&body)?).await?;
    assert_eq!(
        r.body["result"]["messages"][0]["content"]["text"],
        "This is a simple prompt without arguments.",
        "{}",
        r.body
    );
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
        "params": {"uri": unknown}});
    let r = c.post_raw(&headers, serde_json::to_vec(&body)?).await?;
    // 2025-11-25: an unknown resource is -32002 (2026-07-28: -32602), with data.uri.
    assert_eq!(r.body["error"]["code"], -32002, "{}", r.body);
    assert_eq!(r.body["error"]["data"]["uri"], unknown, "{}", r.body);
    drop(other);
    s.stop()
}

/// An entry with `resources = true` only (no `tools`): resources are offered and read,
/// prompts are not (-32601); a `prompts/list`-shaped cursor is no `resources/list` cursor.
#[tokio::test(flavor = "multi_thread")]
async fn a_resources_only_entry_serves_resources_alone() -> Result<()> {
    let s = start(
        &format!(
            "[[upstream]]\nname = \"res\"\n{}\nresources = true\n",
            everything_command()?
        ),
        "echo",
    )
    .await?;
    let none = mcp_tasks_tests::caps_none();
    let c = &s.client;
    let d = poll_until(WITHIN, || async {
        let d = result_of(&c.request("server/discover", json!({}), &none).await.ok()?).ok()?;
        d["capabilities"]["resources"].is_object().then_some(d)
    })
    .await?;
    assert!(d["capabilities"].get("prompts").is_none(), "{d}");
    let r = c.request("prompts/list", json!({}), &none).await?;
    assert_eq!(error_of(&r)?["code"], -32601, "{}", r.body);
    let listed = result_of(&c.request("resources/list", json!({}), &none).await?)?;
    let first = listed["resources"][0]["uri"]
        .as_str()
        .with_context(|| format!("no resource listed: {listed}"))?;
    let read = result_of(
        &c.request("resources/read", json!({"uri": first}), &none)
            .await?,
    )?;
    assert_eq!(read["contents"][0]["uri"], first, "{read}");
    // A cursor of another list (as our prompts/list would write it for this upstream).
    let foreign = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        json!({"m": "prompts/list", "u": "res", "c": null}).to_string(),
    );
    let e = error_of(
        &c.request("resources/list", json!({"cursor": foreign}), &none)
            .await?,
    )?;
    assert_eq!(e["code"], -32602, "{e}");
    s.stop()
}

/// An entry with `prompts = true` only: resources stay unoffered (-32601). When its
/// upstream process dies and cannot be started again, `prompts/get` is a -32603 naming the
/// upstream and why, not a hang; the worker's other tools still run.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_upstream_is_a_clear_error() -> Result<()> {
    let marker = TempFile::new("dead")?;
    let mut s = start(
        &format!(
            "[[upstream]]\nname = \"dying\"\ncommand = [\"sh\", \"-c\", \"test -e \\\"$0\\\" && {{ echo the server is gone >&2; exit 1; }}; exec node \\\"$1\\\" stdio\", {:?}, {:?}]\nprompts = true\n",
            marker.path().display().to_string(),
            everything()?.display().to_string()
        ),
        "echo",
    )
    .await?;
    let none = mcp_tasks_tests::caps_none();
    let c = &s.client;
    let d = result_of(&c.request("server/discover", json!({}), &none).await?)?;
    assert!(d["capabilities"]["prompts"].is_object(), "{d}");
    assert!(d["capabilities"].get("resources").is_none(), "{d}");
    let r = c.request("resources/list", json!({}), &none).await?;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(error_of(&r)?["code"], -32601);
    let got = c
        .request("prompts/get", json!({"name": "simple-prompt"}), &none)
        .await?;
    result_of(&got)?;

    // The upstream dies, and cannot come back.
    std::fs::write(marker.path(), "")?;
    let upstreams = children_of(s.worker.process.child().id());
    assert_eq!(upstreams.len(), 1, "one upstream process: {upstreams:?}");
    std::process::Command::new("kill")
        .arg("-9")
        .arg(upstreams[0].to_string())
        .status()?;
    poll_until(WITHIN, || async { (!alive(upstreams[0])).then_some(()) }).await?;
    let e = poll_until(WITHIN, || async {
        let r = c
            .request("prompts/get", json!({"name": "simple-prompt"}), &none)
            .await
            .ok()?;
        let e = r.body.get("error")?.clone();
        // The first call may meet the dead session before the worker noticed.
        e["message"].as_str()?.contains("cannot start").then_some(e)
    })
    .await?;
    assert_eq!(e["code"], -32603, "{e}");
    let m = e["message"].as_str().unwrap_or_default();
    assert!(m.starts_with("upstream dying cannot start"), "{m}");
    assert!(
        m.contains("the server is gone"),
        "the reason is passed on: {m}"
    );
    let r = c.call("echo", json!({"text": "still here"}), &none).await?;
    assert!(
        r.body["result"]["content"][0]["text"] == "still here",
        "{}",
        r.body
    );
    s.stop()
}
