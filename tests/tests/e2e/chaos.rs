//! Small rounds of the chaos command (issue 3, item 6): its own Redis, 2 gateways and 3
//! workers; 60 tasks of mixed kinds while workers are SIGKILLed, a gateway restarts, and
//! Redis restarts (or, with `--failover`, its primary dies and the sentinels promote a
//! replica). Every task must end as expected, exactly once: `lost=0 duplicated=0 wrong=0`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::binary;

/// The value of `key=` in the chaos command's final line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// Run one round of 60 tasks with `extra` options and `--max-duration max_duration`; assert
/// that it judged every task right, that each of `happened` (a noun of the report's
/// `chaos: …` line, e.g. `redis restart`) happened once, and that it ended within `within`.
fn chaos_round(
    extra: &[&str],
    max_duration: &str,
    happened: &[&str],
    within: Duration,
) -> Result<()> {
    let bin = binary("chaos");
    let started = Instant::now();
    let out = Command::new(&bin)
        .args([
            "--tasks",
            "60",
            "--lease",
            "1s",
            "--kill-every",
            "1500ms",
            "--max-kills",
            "8",
        ])
        .args(["--max-duration", max_duration])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!(
                "cannot run {} (cargo build --workspace --bins)",
                bin.display()
            )
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = format!(
        "exit {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("tasks="), "no final line; {report}");
    assert_eq!(field(last, "tasks"), Some("60"), "{report}");
    for key in ["lost", "duplicated", "wrong"] {
        assert_eq!(field(last, key), Some("0"), "{key}; {report}");
    }
    assert!(
        field(last, "recovered_p99_ms").is_some_and(|v| v.parse::<u64>().is_ok()),
        "{report}"
    );
    assert!(out.status.success(), "{report}");
    for chaos in happened {
        assert!(
            stdout.contains(&format!("1 {chaos}")),
            "no {chaos}; {report}"
        );
    }
    assert!(started.elapsed() < within, "took {:?}", started.elapsed());
    Ok(())
}

#[test]
fn a_chaos_round_loses_duplicates_and_corrupts_nothing() -> Result<()> {
    chaos_round(
        &[],
        "45s",
        &["gateway restart", "redis restart"],
        Duration::from_secs(90),
    )
}

/// With `--failover` the acknowledged tasks survive the primary's death: the gateways and
/// workers follow the sentinels to the promoted replica, which had every acknowledged change
/// (`MCPT_REDIS_WAIT_REPLICAS=1`).
#[test]
fn a_chaos_round_with_a_failover_loses_duplicates_and_corrupts_nothing() -> Result<()> {
    chaos_round(
        &["--failover"],
        "60s",
        &["gateway restart", "failover"],
        Duration::from_secs(120),
    )
}
