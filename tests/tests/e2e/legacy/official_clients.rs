//! The official TypeScript SDK 2025 clients, unmodified, driven by
//! `tests/legacy/legacy.mjs` against two gateways alternately.
//!
//! Checklist ids cited: none (2025 compatibility is outside the 2026 checklists).

use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{TestContext, caps_none, repo_root};
use serde_json::json;

/// The official TypeScript SDK 1.32.2 (2025-11-25) and 1.22.0 (2025-06-18) clients,
/// unmodified, over Streamable HTTP against two gateways alternately.
#[tokio::test(flavor = "multi_thread")]
async fn official_2025_clients_work_against_two_gateways() -> Result<()> {
    let sdk = repo_root().join("tests/legacy/node_modules/@modelcontextprotocol/sdk");
    assert!(
        sdk.exists(),
        "tests/legacy/node_modules is missing: run `npm ci --prefix tests/legacy` (tests/run-all.sh does)"
    );
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (out, text) = run_against_two(
        "node",
        "tests/legacy/legacy.mjs",
        &ctx,
        Duration::from_secs(120),
    )
    .await?;
    assert!(out.status.success(), "legacy.mjs failed:\n{text}");
    assert!(text.contains(" 0 failed"), "no final tally:\n{text}");
    // A 2026 client still gets a 2026 answer on the same endpoint.
    let r = ctx
        .client()
        .request("tools/list", json!({}), &caps_none())
        .await?;
    assert_eq!(r.body["result"]["resultType"], "complete", "{}", r.body);
    ctx.cleanup().await;
    Ok(())
}

/// The official Python SDK (`mcp` 1.30.0, pinned in `tests/python/requirements.txt`),
/// unmodified, over Streamable HTTP against two gateways alternately: initialize, tools,
/// echo, a synchronous `sleep` with progress, a synchronous `ask` through its elicitation
/// callback, both failure modes, and the experimental tasks API (issue 18).
#[tokio::test(flavor = "multi_thread")]
async fn official_python_sdk_works_against_two_gateways() -> Result<()> {
    let python = repo_root().join("target/py/bin/python");
    assert!(
        python.exists(),
        "target/py is missing: run `python3 -m venv target/py && target/py/bin/pip install -r tests/python/requirements.txt` (tests/run-all.sh does)"
    );
    let ctx = TestContext::start(2, 1).await?;
    ctx.wait_for_tools().await?;
    let (out, text) = run_against_two(
        &python.display().to_string(),
        "tests/python/sdk_client.py",
        &ctx,
        Duration::from_secs(150),
    )
    .await?;
    assert!(out.status.success(), "sdk_client.py failed:\n{text}");
    assert!(
        text.contains(" 11 passed, 0 failed"),
        "not every scenario ran:\n{text}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// Run `program script URL_A URL_B` (the context's two gateways) from the repository root
/// within `limit`: its exit status and its stdout and stderr as one text (also printed).
async fn run_against_two(
    program: &str,
    script: &str,
    ctx: &TestContext,
    limit: Duration,
) -> Result<(std::process::Output, String)> {
    let out = tokio::time::timeout(
        limit,
        tokio::process::Command::new(program)
            .arg(script)
            .arg(ctx.gateways[0].url())
            .arg(ctx.gateways[1].url())
            .current_dir(repo_root())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| format!("{script} did not finish within {limit:?}"))??;
    let text = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    Ok((out, text))
}
