//! Tools declared in a catalog file (`MCPT_TOOLS_FILE`, `[[command]]` entries): output and
//! exit codes, arguments passed literally, output lines as status messages, cancellation
//! and timeout ending the whole process group, and a catalog with mistakes refused at start.
//!
//! Each test writes its catalog to a temp file and starts its own Redis, gateway and worker.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use mcp_tasks_tests::{
    CatalogStack, Client, Gateway, RedisServer, TempFile, Worker, assert_catalog_refused,
    caps_none, poll_until, write_catalog,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(15);

const TEXT_SCHEMA: &str = r#"input_schema = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }"#;

/// A Redis, a gateway and a worker offering the catalog `text`, once `wanted` is listed.
async fn start(
    text: &str,
    wanted: &str,
    gateway_env: &[(&str, String)],
    worker_env: &[(&str, String)],
) -> Result<CatalogStack> {
    CatalogStack::start(text, wanted, worker_env, gateway_env).await
}

/// Run `tool` as a task to completion and return its `CallToolResult`.
async fn run(client: &Client, tool: &str, args: Value) -> Result<Value> {
    let id = client.start_task(tool, args).await?;
    let t = client.wait_status(&id, "completed", WITHIN).await?;
    Ok(t["result"].clone())
}

/// A command's stdout is the result text and its exit code is in `structuredContent`; a
/// non-zero exit completes the task with `isError: true` and stderr's tail.
#[tokio::test(flavor = "multi_thread")]
async fn command_output_and_exit_code_become_the_result() -> Result<()> {
    let s = start(
        &format!(
            r#"
            [[command]]
            name = "say"
            argv = ["printf", "%s", "{{text}}"]
            {TEXT_SCHEMA}

            [[command]]
            name = "exit3"
            description = "Fail with exit code 3."
            argv = ["sh", "-c", "echo partial; echo oops >&2; exit 3"]
            "#
        ),
        "exit3",
        &[],
        &[],
    )
    .await?;

    let r = run(&s.client, "say", json!({"text": "hello world"})).await?;
    assert_eq!(r["content"][0]["text"], "hello world", "{r}");
    assert_eq!(r["structuredContent"]["exitCode"], 0, "{r}");
    assert_eq!(r["structuredContent"]["stdout"], "hello world", "{r}");
    assert_eq!(r["structuredContent"]["truncated"], false, "{r}");
    assert!(r.get("isError").is_none_or(|e| e == false), "{r}");

    let r = run(&s.client, "exit3", json!({})).await?;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["exitCode"], 3, "{r}");
    assert_eq!(r["structuredContent"]["stdout"], "partial\n", "{r}");
    assert_eq!(r["structuredContent"]["stderr"], "oops\n", "{r}");

    // A required argument left out is refused by the gateway's schema check; an absent
    // placeholder of an optional one is a tool error naming it.
    let r = s.client.call("say", json!({}), &caps_none()).await?;
    assert!(
        r.body["error"].is_object() || r.body["result"]["isError"] == true,
        "{}",
        r.body
    );
    Ok(())
}

/// Argument values reach the program as one argv element (or stdin) each, unchanged:
/// shell syntax, quotes, newlines and a 1 MB value come back byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_argument_values_come_back_literally() -> Result<()> {
    let big_limits = [
        ("MCPT_MAX_ARGS_BYTES", "4194304".to_owned()),
        ("MCPT_MAX_BODY_BYTES", "8388608".to_owned()),
    ];
    let s = start(
        &format!(
            r#"
            [[command]]
            name = "say"
            argv = ["printf", "%s", "{{text}}"]
            {TEXT_SCHEMA}

            [[command]]
            name = "cat_stdin"
            argv = ["cat"]
            stdin = "{{text}}"
            max_output = 2097152
            {TEXT_SCHEMA}
            "#
        ),
        "cat_stdin",
        &big_limits,
        &[("MCPT_MAX_RESULT_BYTES", "8388608".to_owned())],
    )
    .await?;

    let hostile = [
        "$(id)",
        "; rm -rf /",
        "`id`",
        "line one\nline two",
        "'\"\\ %s %n * ? ~ | & > /dev/null",
        "-n",
        "{text}",
        "",
    ];
    for value in hostile {
        let r = run(&s.client, "say", json!({"text": value})).await?;
        assert_eq!(r["structuredContent"]["stdout"], value, "{value:?}: {r}");
        assert_eq!(r["structuredContent"]["exitCode"], 0, "{value:?}: {r}");
    }

    // Linux caps one argv element at 128 KiB, so a large value goes through stdin.
    let unit = "$(id);`id`\n\"'\\";
    let big: String = unit.repeat(1_000_000 / unit.len());
    let r = run(&s.client, "cat_stdin", json!({"text": big})).await?;
    assert_eq!(r["structuredContent"]["truncated"], false);
    assert!(
        r["structuredContent"]["stdout"] == big.as_str(),
        "the 1 MB value came back changed ({} bytes)",
        r["structuredContent"]["stdout"]
            .as_str()
            .map_or(0, str::len)
    );
    Ok(())
}

/// While a command runs, its latest output line is the task's status message.
#[tokio::test(flavor = "multi_thread")]
async fn output_lines_become_status_messages() -> Result<()> {
    let s = start(
        r#"
        [[command]]
        name = "steps"
        argv = ["sh", "-c", "for i in 1 2 3 4 5; do echo step $i; sleep 0.4; done"]
        "#,
        "steps",
        &[],
        &[],
    )
    .await?;
    let id = s.client.start_task("steps", json!({})).await?;
    let mut seen: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + WITHIN;
    let last = loop {
        let t = s.client.get(&id).await?;
        if let Some(m) = t["statusMessage"].as_str()
            && seen.last().map(String::as_str) != Some(m)
        {
            seen.push(m.to_owned());
        }
        if t["status"] != "working" {
            break t;
        }
        if std::time::Instant::now() > deadline {
            bail!("steps still working after {WITHIN:?}; saw {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(last["status"], "completed", "{last}");
    let steps: Vec<&String> = seen.iter().filter(|m| m.starts_with("step ")).collect();
    assert!(
        steps.len() >= 2,
        "expected changing 'step N' messages, saw {seen:?}"
    );
    Ok(())
}

/// Members of process group `pgid` that are still running (zombies, already dead and
/// waiting for their parent to collect them, do not count).
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "PID (COMM) STATE PPID PGRP ...": COMM may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse() == Ok(pgid) {
            out.push(pid);
        }
    }
    out
}

/// Cancelling a task ends the command's whole process group (the shell and the `sleep`
/// it started): nothing of it is left running.
#[tokio::test(flavor = "multi_thread")]
async fn cancelled_command_leaves_no_process_behind() -> Result<()> {
    let s = start(
        r#"
        [[command]]
        name = "hang"
        argv = ["sh", "-c", "echo $$; sleep 30 & wait"]
        "#,
        "hang",
        &[],
        &[],
    )
    .await?;
    let id = s.client.start_task("hang", json!({})).await?;
    // The shell prints its pid, which is also its group's id (the status message).
    let pgid: u32 = poll_until(WITHIN, || async {
        let t = s.client.get(&id).await.ok()?;
        t["statusMessage"].as_str()?.parse().ok()
    })
    .await
    .context("the command never reported its pid")?;
    poll_until(WITHIN, || async {
        (group_members(pgid).len() >= 2).then_some(())
    })
    .await
    .with_context(|| format!("group {pgid} never had the shell and its sleep"))?;

    let r = s.client.cancel(&id).await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    s.client.wait_status(&id, "cancelled", WITHIN).await?;
    if poll_until(Duration::from_secs(10), || async {
        group_members(pgid).is_empty().then_some(())
    })
    .await
    .is_err()
    {
        bail!(
            "processes of group {pgid} still run 10 s after the cancel: {:?}",
            group_members(pgid)
        );
    }
    Ok(())
}

/// A command running past its `timeout` is stopped and the task ends `failed` with a
/// JSON-RPC internal error "command timed out after 1s".
#[tokio::test(flavor = "multi_thread")]
async fn command_past_its_timeout_fails_the_task() -> Result<()> {
    let s = start(
        r#"
        [[command]]
        name = "slow"
        argv = ["sleep", "10"]
        timeout = "1s"
        "#,
        "slow",
        &[],
        &[],
    )
    .await?;
    let id = s.client.start_task("slow", json!({})).await?;
    let t = s.client.wait_status(&id, "failed", WITHIN).await?;
    assert_eq!(t["error"]["code"], -32603, "{t}");
    assert_eq!(t["error"]["message"], "command timed out after 1s", "{t}");
    Ok(())
}

/// Retention and size are set per entry: a result over the tool's own `max_result_bytes`
/// fails its task with an error naming that bound and nothing of it stored, while the same
/// output from a tool without one completes under `MCPT_MAX_RESULT_BYTES`; each tool's
/// `ttl` is its tasks' `ttlMs` (T-09, T-52).
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_bounds_its_own_results_and_keeps_them_its_own_time() -> Result<()> {
    let s = start(
        &format!(
            r#"
            [[command]]
            name = "small"
            argv = ["printf", "%s", "{{text}}"]
            max_result_bytes = 2048
            ttl = "2h"
            {TEXT_SCHEMA}

            [[command]]
            name = "say"
            argv = ["printf", "%s", "{{text}}"]
            {TEXT_SCHEMA}
            "#
        ),
        "say",
        &[],
        &[],
    )
    .await?;
    let text = "z".repeat(3000);
    let id = s.client.start_task("small", json!({"text": text})).await?;
    let t = s.client.wait_status(&id, "failed", WITHIN).await?;
    assert_eq!(t["error"]["code"], -32603, "{t}");
    let message = t["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("at most 2048 are stored (max_result_bytes of tool small)"),
        "{t}"
    );
    assert_eq!(t["ttlMs"], 7_200_000, "{t}");
    let key = s.redis.cli(&["KEYS", &format!("mcpt:task:{{{id}}}:*")])?;
    let status = s.redis.cli(&["HGET", key.trim(), "status"])?;
    assert_eq!(status.trim(), "failed", "no task hash at {key:?}");
    let stored = s.redis.cli(&["HGET", key.trim(), "result"])?;
    assert_eq!(stored.trim(), "", "the oversized result was stored");

    let r = run(&s.client, "say", json!({"text": text})).await?;
    assert_eq!(r["structuredContent"]["stdout"], text.as_str());
    Ok(())
}

/// A catalog with a mistake stops the worker at start: exit code 64 and one line on
/// stderr naming the file, the entry and the field.
#[tokio::test(flavor = "multi_thread")]
async fn catalog_with_mistakes_is_refused_at_start() -> Result<()> {
    let ok = "[[command]]\nname = \"fine\"\nargv = [\"true\"]\n";
    let cases = [
        (
            format!("{ok}[[command]]\nname = \"a\"\nargv = [\"true\"]\nshell = true\n"),
            "[[command]] #2 (\"a\"): field shell: unknown field",
        ),
        (
            "[[command]]\nname = \"a\"\nargv = [\"echo\", \"{text} extra\"]\n".to_owned(),
            "[[command]] #1 (\"a\"): field argv: element 1 \"{text} extra\"",
        ),
        (
            format!("{ok}{ok}"),
            "[[command]] #2 (\"fine\"): field name: \"fine\" is used by an earlier entry",
        ),
        (
            "[[command]]\nname = \"a\"\nargv = [\"true\"]\ntimeout = \"soon\"\n".to_owned(),
            "[[command]] #1 (\"a\"): field timeout: \"soon\": expected a duration",
        ),
        (
            "[[command]]\nname = \"a\"\nargv = [\"true\"]\nqueue = \"gpu\"\n".to_owned(),
            "[[command]] #1 (\"a\"): field queue: \"gpu\" is not served by this worker",
        ),
        (
            "[[command]]\nname = \"echo\"\nargv = [\"true\"]\n".to_owned(),
            "[[command]] #1 (\"echo\"): field name: \"echo\" is also the name of a built-in tool",
        ),
        (
            "[[http]]\nname = \"a\"\n".to_owned(),
            "[[http]] #1 (\"a\"): field url: missing",
        ),
    ];
    for (text, want) in cases {
        assert_catalog_refused(&text, want)?;
    }
    Ok(())
}

/// T-36: a task cancelled while its job waited in the queue never runs, even on a worker
/// that runs young jobs before taking their fence: its command's side effect (a file)
/// never happens.
#[tokio::test(flavor = "multi_thread")]
async fn task_cancelled_while_queued_never_runs() -> Result<()> {
    let marker_file = TempFile::new("ran")?;
    let marker = marker_file.path();
    let catalog = write_catalog(&format!(
        r#"
        [[command]]
        name = "touch_marker"
        argv = ["touch", "{}"]
        "#,
        marker.display()
    ))?;
    let redis = RedisServer::start()?;
    let env = [("MCPT_TOOLS_FILE", catalog.path().display().to_string())];
    let mut first = Worker::start(&redis.url(), &env)?;
    let gateway = Gateway::start(&redis.url(), &[])?;
    let client = gateway.client();
    client.wait_for_tool("touch_marker").await?;
    // No worker while the job waits (its advertisement is still fresh).
    first.process.terminate(Duration::from_secs(20))?;
    let id = client.start_task("touch_marker", json!({})).await?;
    let r = client.cancel(&id).await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    client.wait_status(&id, "cancelled", WITHIN).await?;
    let _second = Worker::start(&redis.url(), &env)?;
    // The job is taken and dropped: the queue drains.
    poll_until(WITHIN, || async {
        let len = redis
            .cli(&["XLEN", &mcp_tasks_store::keys::queue_key("default")])
            .ok()?;
        (len.trim() == "0").then_some(())
    })
    .await
    .context("the cancelled job was never taken off the queue")?;
    assert!(!marker.exists(), "the cancelled task's command ran");
    assert_eq!(client.get(&id).await?["status"], "cancelled");
    Ok(())
}
