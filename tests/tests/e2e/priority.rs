//! Priorities end to end: a call's `_meta["io.github.mcp-tasks/priority"]` or its tool's
//! catalog `priority` puts its job ahead of every `normal` one queued, and the gateway
//! checks what is asked (a bad value, or `high` from a caller
//! `MCPT_HIGH_PRIORITY_PRINCIPALS` does not list, is -32602 and creates nothing).
//!
//! The worker runs one job at a time (`MCPT_CONCURRENCY=1`), and its first job waits for a
//! gate file, so the backlog stays queued until the test opens the gate; each job appends
//! its label to a file, which then tells the order the worker took them in.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_protocol::meta::PRIORITY_KEY as PRIORITY;
use mcp_tasks_store::Priority;
use mcp_tasks_store::keys::priority_queue_key;
use mcp_tasks_tests::{
    ALICE_TOKEN, BOB_TOKEN, CatalogStack, Client, TempFile, TwoTokens, caps_tasks, poll_until,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(30);

/// `note` (normal) and `vip` (high in the catalog): both wait for `gate`, then append
/// their `label` to `out`.
fn catalog(gate: &Path, out: &Path) -> String {
    let argv = format!(
        r#"["sh", "-c", "while [ ! -e \"$1\" ]; do sleep 0.05; done; printf '%s\n' \"$2\" >> \"$3\"", "sh", "{}", "{{label}}", "{}"]"#,
        gate.display(),
        out.display()
    );
    let schema = r#"input_schema = { type = "object", properties = { label = { type = "string" } }, required = ["label"] }"#;
    format!(
        "[[command]]\nname = \"note\"\nargv = {argv}\n{schema}\n\n\
         [[command]]\nname = \"vip\"\npriority = \"high\"\nargv = {argv}\n{schema}\n"
    )
}

/// A gate and an output file, and a stack whose one worker runs one job at a time (its
/// client authenticating with `token`).
async fn start(
    gate: &TempFile,
    out: &TempFile,
    gateway_env: &[(&str, String)],
    token: Option<&str>,
) -> Result<CatalogStack> {
    CatalogStack::start_as(
        &catalog(gate.path(), out.path()),
        "vip",
        &[("MCPT_CONCURRENCY", "1".to_owned())],
        gateway_env,
        token,
    )
    .await
}

/// Start `tool` with `label`, `_meta` priority `asked` when given: the reply.
async fn call(client: &Client, tool: &str, label: &str, asked: Option<&str>) -> Result<Value> {
    let args = json!({"label": label});
    let r = match asked {
        Some(p) => {
            client
                .call_with_meta(tool, args, &caps_tasks(), PRIORITY, json!(p))
                .await?
        }
        None => client.call(tool, args, &caps_tasks()).await?,
    };
    Ok(r.body)
}

/// Start `tool` as a task; fails unless a task was created.
async fn task(client: &Client, tool: &str, label: &str, asked: Option<&str>) -> Result<String> {
    let body = call(client, tool, label, asked).await?;
    body["result"]["taskId"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no task for {label}: {body}"))
}

/// Wait until the worker holds the first job (delivered, not acknowledged).
async fn first_job_taken(s: &CatalogStack) -> Result<()> {
    poll_until(WITHIN, || async {
        let pending = s
            .redis
            .cli(&[
                "XPENDING",
                &priority_queue_key("default", Priority::Normal),
                "workers",
            ])
            .ok()?;
        (pending.lines().next()? == "1").then_some(())
    })
    .await
}

/// The labels written so far, once there are at least `n`.
async fn labels(out: &Path, n: usize) -> Result<Vec<String>> {
    poll_until(WITHIN, || async {
        let text = std::fs::read_to_string(out).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        (lines.len() >= n).then_some(lines)
    })
    .await
}

/// Behind 10,000 queued `normal` calls, one asking `high` in `_meta` and one of a tool
/// whose catalog entry is `high` run next, before any of them.
#[tokio::test(flavor = "multi_thread")]
async fn high_calls_behind_ten_thousand_normal_ones_run_first() -> Result<()> {
    let (gate, out) = (TempFile::new("gate")?, TempFile::new("out")?);
    let s = start(&gate, &out, &[], None).await?;
    task(&s.client, "note", "first", None).await?;
    first_job_taken(&s).await?;
    for chunk in 0..100 {
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..100 {
            let client = s.client.clone();
            calls.spawn(async move { task(&client, "note", &format!("n{chunk}-{i}"), None).await });
        }
        while let Some(r) = calls.join_next().await {
            r??;
        }
    }
    task(&s.client, "note", "asked-high", Some("high")).await?;
    task(&s.client, "vip", "vip", None).await?;
    std::fs::write(gate.path(), "")?;

    let lines = labels(out.path(), 4).await?;
    assert_eq!(lines[0], "first", "{lines:?}");
    let mut next = [lines[1].as_str(), lines[2].as_str()];
    next.sort_unstable();
    assert_eq!(next, ["asked-high", "vip"], "{lines:?}");
    assert!(lines[3].starts_with('n'), "{lines:?}");
    Ok(())
}

/// What a call may ask: a value other than high, normal or low is -32602; `high` from a
/// caller the list leaves out is -32602 and creates nothing, while `low`, and a tool that
/// is `high` itself, are open to every caller; a listed caller gets `high`. Each job lands
/// on its priority's stream.
#[tokio::test(flavor = "multi_thread")]
async fn asking_for_a_priority_is_checked() -> Result<()> {
    let tokens = TwoTokens::new()?;
    let mut env = tokens.env();
    env.push(("MCPT_HIGH_PRIORITY_PRINCIPALS", "alice".to_owned()));
    let (gate, out) = (TempFile::new("gate")?, TempFile::new("out")?);
    let s = start(&gate, &out, &env, Some(ALICE_TOKEN)).await?;
    let (alice, bob) = (
        s.client.with_token(ALICE_TOKEN),
        s.client.with_token(BOB_TOKEN),
    );
    task(&alice, "note", "first", None).await?;
    first_job_taken(&s).await?;
    let tasks_before = s.redis.cli(&["KEYS", "mcpt:task:*"])?.lines().count();

    let body = call(&bob, "note", "x", Some("urgent")).await?;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("expected \"high\", \"normal\" or \"low\""),
        "{body}"
    );
    let body = call(&bob, "note", "x", Some("high")).await?;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("MCPT_HIGH_PRIORITY_PRINCIPALS"), "{body}");
    let tasks_after = s.redis.cli(&["KEYS", "mcpt:task:*"])?.lines().count();
    assert_eq!(tasks_after, tasks_before, "a refused call created a task");

    task(&bob, "vip", "bob-vip", None).await?;
    task(&bob, "note", "bob-low", Some("low")).await?;
    task(&alice, "note", "alice-high", Some("high")).await?;
    let len = |p: Priority| -> Result<String> {
        let stream = priority_queue_key("default", p);
        Ok(s.redis.cli(&["XLEN", &stream])?.trim().to_owned())
    };
    assert_eq!(len(Priority::High)?, "2");
    assert_eq!(len(Priority::Low)?, "1");
    assert_eq!(len(Priority::Normal)?, "1", "only the running first job");

    std::fs::write(gate.path(), "")?;
    let lines = labels(out.path(), 4).await?;
    assert_eq!(lines[0], "first");
    let mut next = [lines[1].as_str(), lines[2].as_str()];
    next.sort_unstable();
    assert_eq!(next, ["alice-high", "bob-vip"], "{lines:?}");
    assert_eq!(lines[3], "bob-low");
    Ok(())
}
