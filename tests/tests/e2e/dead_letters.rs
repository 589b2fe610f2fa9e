//! Dead letters end to end (issue 38): a task that fails for good is listed by
//! `mcp-tasks dead` with its tool, attempts and error, and `mcp-tasks redrive` runs it
//! again as one new task of the same arguments, linked both ways in `tasks/get`.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use mcp_tasks_protocol::meta::RELATED_TASK_IDS_KEY as RELATED;
use mcp_tasks_tests::{
    Gateway, RedisServer, TempDir, Worker, mcp_tasks as cli, mcp_tasks_ok as cli_ok, write_catalog,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(15);

fn runs(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("runs"))
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The catalog entry of `flaky`: each run appends its `key` to `DIR/runs`, prints
/// `broke on KEY` and exits 75, which is retried once; its tool errors are kept as dead
/// letters.
pub(super) fn flaky_entry(dir: &std::path::Path) -> String {
    format!(
        r#"
        [[command]]
        name = "flaky"
        argv = ["sh", "-c", "echo \"$1\" >> \"$0/runs\"; echo \"broke on $1\"; exit 75", "{dir}", "{{key}}"]
        input_schema = {{ type = "object", properties = {{ key = {{ type = "string" }} }}, required = ["key"] }}
        retry = {{ attempts = 2, initial = "100ms", max = "100ms" }}
        retry_on_exit = [75]
        dead_letter_tool_errors = true
"#,
        dir = dir.display()
    )
}

/// `flaky` fails twice (exit 75, retried once) and keeps its tool errors as dead letters;
/// `quiet` fails too but keeps none (tool errors are not kept by default). `dead` lists the
/// one, `redrive` runs it again once, however often it is asked.
#[tokio::test]
async fn a_failed_task_is_listed_and_redriven_once_with_its_arguments() -> Result<()> {
    let stamps = TempDir::new("mcpt-dead")?;
    let catalog = write_catalog(&format!(
        r#"{}
        [[command]]
        name = "quiet"
        argv = ["sh", "-c", "exit 1"]
        "#,
        flaky_entry(stamps.path())
    ))?;
    let redis = RedisServer::start()?;
    let _worker = Worker::start(
        &redis.url(),
        &[("MCPT_TOOLS_FILE", catalog.path().display().to_string())],
    )?;
    let gateway = Gateway::start(&redis.url(), &[])?;
    let client = gateway.client();
    client.wait_for_tools(&["flaky", "quiet"], WITHIN).await?;
    let url = redis.url();

    let flaky = client.start_task("flaky", json!({"key": "k1"})).await?;
    let quiet = client.start_task("quiet", json!({})).await?;
    for id in [&flaky, &quiet] {
        let t = client.wait_status(id, "completed", WITHIN).await?;
        ensure!(t["result"]["isError"] == true, "{t}");
    }
    ensure!(
        runs(stamps.path()) == ["k1", "k1"],
        "{:?}",
        runs(stamps.path())
    );

    let listed = cli_ok(&url, &["dead"])?;
    let row = listed
        .lines()
        .find(|l| l.contains(flaky.as_str()))
        .with_context(|| format!("flaky's task is not listed:\n{listed}"))?;
    ensure!(row.contains("flaky") && row.contains(" 2 "), "{row}");
    ensure!(
        !listed.contains(quiet.as_str()),
        "quiet keeps no letters:\n{listed}"
    );
    let none = cli_ok(&url, &["dead", "--tool", "quiet", "--since", "1h"])?;
    ensure!(
        none.trim() == "no dead letters of tool quiet in the last 1h00m",
        "{none}"
    );
    let lines = cli_ok(&url, &["dead", "--json"])?;
    let letter: Value = serde_json::from_str(lines.lines().next().unwrap_or_default())?;
    ensure!(letter["job"]["args"] == json!({"key": "k1"}), "{letter}");
    ensure!(
        letter["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{letter}"
    );

    let out = cli_ok(&url, &["redrive", &flaky])?;
    let new = out
        .split_whitespace()
        .find(|w| w.starts_with("tsk_") && *w != flaky)
        .with_context(|| format!("no new task id in {out:?}"))?
        .to_owned();
    let again = cli_ok(&url, &["redrive", &flaky])?;
    ensure!(
        again.contains("redriven before") && again.contains(&new),
        "{again}"
    );
    // The new task runs the same call (twice, as its retry policy says), once.
    let t = client.wait_status(&new, "completed", WITHIN).await?;
    ensure!(t["_meta"][RELATED] == json!([flaky]), "{t}");
    let old = client.get(&flaky).await?;
    ensure!(old["_meta"][RELATED] == json!([new]), "{old}");
    // Completed only after both its attempts ran: nothing more runs.
    ensure!(
        runs(stamps.path()) == ["k1", "k1", "k1", "k1"],
        "{:?}",
        runs(stamps.path())
    );

    let (code, _, err) = cli(&url, &["redrive", "tsk_nope"])?;
    ensure!(
        code == 1 && err.contains("no dead letter for task tsk_nope"),
        "{code}: {err}"
    );
    Ok(())
}
