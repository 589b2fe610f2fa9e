//! Fleet controls across processes: the kill switch (`mcp-tasks strike` / `restore`) seen
//! by every gateway and worker.
//!
//! Each test writes a catalog of `[[command]]` tools to a temp file and starts its own
//! Redis, a gateway and several workers; the tools leave stamps in a temp directory, so
//! what ran (and when) is read from the tools' own side.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use mcp_tasks_tests::{
    Client, Gateway, RedisServer, TempDir, Worker, caps_tasks, mcp_tasks as cli,
    mcp_tasks_ok as cli_ok, poll_until, write_catalog,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(15);

/// A call's answer: refused with a tool error (its text), or the task it started.
async fn call(client: &Client, tool: &str, args: Value) -> Result<Result<String, String>> {
    let r = client.call(tool, args, &caps_tasks()).await?;
    let result = &r.body["result"];
    if result["isError"] == true {
        return Ok(Ok(result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()));
    }
    let id = result["taskId"].as_str();
    ensure!(id.is_some(), "neither a task nor a tool error: {}", r.body);
    Ok(Err(id.unwrap_or_default().to_owned()))
}

/// Lines a tool appended to `dir/name` (one per run).
fn runs(dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(name)).map_or(0, |t| t.lines().count())
}

/// A Redis, one gateway and `workers` workers (one slot each) serving `catalog`.
struct Fleet {
    redis: RedisServer,
    gateway: Gateway,
    workers: Vec<Worker>,
    client: Client,
    catalog: mcp_tasks_tests::TempFile,
    /// The workers' `MCPT_LEASE`.
    lease: &'static str,
}

impl Fleet {
    async fn start(catalog: &str, workers: usize, wanted: &[&str]) -> Result<Fleet> {
        Fleet::start_with_lease(catalog, workers, wanted, "3s").await
    }

    async fn start_with_lease(
        catalog: &str,
        workers: usize,
        wanted: &[&str],
        lease: &'static str,
    ) -> Result<Fleet> {
        let catalog = write_catalog(catalog)?;
        let redis = RedisServer::start()?;
        let workers = (0..workers)
            .map(|_| Worker::start(&redis.url(), &Fleet::worker_env(&catalog, lease)))
            .collect::<Result<Vec<_>>>()?;
        let gateway = Gateway::start(&redis.url(), &[])?;
        let client = gateway.client();
        client.wait_for_tools(wanted, WITHIN).await?;
        Ok(Fleet {
            redis,
            gateway,
            workers,
            client,
            catalog,
            lease,
        })
    }

    /// Workers: the catalog, one slot each, `lease`.
    fn worker_env(catalog: &mcp_tasks_tests::TempFile, lease: &str) -> Vec<(&'static str, String)> {
        vec![
            ("MCPT_TOOLS_FILE", catalog.path().display().to_string()),
            ("MCPT_CONCURRENCY", "1".to_owned()),
            ("MCPT_LEASE", lease.to_owned()),
        ]
    }

    /// One more worker.
    fn add_worker(&mut self) -> Result<()> {
        let w = Worker::start(
            &self.redis.url(),
            &Fleet::worker_env(&self.catalog, self.lease),
        )?;
        self.workers.push(w);
        Ok(())
    }

    /// Wait until every worker has logged `line`.
    async fn workers_logged(&self, line: &str) -> Result<()> {
        self.workers_logged_times(line, 1).await
    }

    /// Wait until every worker has logged `line` at least `times` times.
    async fn workers_logged_times(&self, line: &str, times: usize) -> Result<()> {
        poll_until(WITHIN, || async {
            self.workers
                .iter()
                .all(|w| w.process.log_text().matches(line).count() >= times)
                .then_some(())
        })
        .await
        .with_context(|| format!("not every worker logged {line:?} {times} times"))
    }
}

/// Kill switch: `strike work --where key=a` refuses new calls with key `a` on the gateway
/// (a tool error, a `completed`-style result and no task: T-21), while key `b` still runs;
/// jobs of key `a` queued before the strike are held by whichever of the two workers reads
/// them — `working` with a status message naming the strike, never run (T-17) — and
/// `restore` runs every one of them. A strike with `--cancel-running` also cancels the
/// call running now (T-37).
#[tokio::test(flavor = "multi_thread")]
async fn fleet_strike_holds_queued_calls_everywhere_and_restore_runs_them() -> Result<()> {
    let stamps = TempDir::new("mcpt-fleet-strike")?;
    let gate = stamps.path().join("open");
    let fleet = Fleet::start(
        &format!(
            r#"
            [[command]]
            name = "block"
            argv = ["sh", "-c", "while [ ! -e \"$0\" ]; do sleep 0.02; done", "{gate}"]

            [[command]]
            name = "work"
            argv = ["sh", "-c", "echo ran >> \"$0/$1\"", "{dir}", "{{key}}"]
            input_schema = {{ type = "object", properties = {{ key = {{ type = "string" }} }}, required = ["key"] }}

            [[command]]
            name = "hang"
            argv = ["sh", "-c", "echo started; sleep 30"]
            "#,
            gate = gate.display(),
            dir = stamps.path().display(),
        ),
        2,
        &["block", "work", "hang"],
    )
    .await?;
    let (client, redis) = (&fleet.client, fleet.redis.url());

    // Both workers' one slot busy, so what comes next waits in the queue.
    let blockers = [
        client.start_task("block", json!({})).await?,
        client.start_task("block", json!({})).await?,
    ];
    let mut queued_a = Vec::new();
    for _ in 0..3 {
        queued_a.push(client.start_task("work", json!({"key": "a"})).await?);
    }
    let queued_b = client.start_task("work", json!({"key": "b"})).await?;

    let out = cli_ok(&redis, &["strike", "work", "--where", "key=a"])?;
    ensure!(out.contains("struck tool work where key=a"), "{out}");
    let listed = cli_ok(&redis, &["strikes"])?;
    ensure!(
        listed.contains("work") && listed.contains("key=a"),
        "{listed}"
    );

    // New calls: refused within a second on the gateway, key b still accepted.
    // (A call accepted before the gateway read the strike is one more queued call.)
    let deadline = std::time::Instant::now() + WITHIN;
    let why = loop {
        match call(client, "work", json!({"key": "a"})).await? {
            Ok(why) => break why,
            Err(id) => queued_a.push(id),
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the strike was never seen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    ensure!(why.contains("tool work where key=a is struck"), "{why}");
    let new_b = client.start_task("work", json!({"key": "b"})).await?;

    // Queued calls: held by every worker once each has read the strike.
    fleet.workers_logged("strikes changed: 1 in force").await?;
    std::fs::write(&gate, "")?;
    for id in &blockers {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    for id in [&queued_b, &new_b] {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    for id in &queued_a {
        poll_until(WITHIN, || async {
            let t = client.get(id).await.ok()?;
            let msg = t["statusMessage"].as_str().unwrap_or("");
            (t["status"] == "working"
                && msg.starts_with("held: tool work where key=a is struck")
                && msg.contains("(`mcp-tasks restore work --where key=a`)"))
            .then_some(())
        })
        .await
        .with_context(|| format!("task {id} was not held"))?;
    }
    ensure!(runs(stamps.path(), "b") == 2, "both b calls ran");
    ensure!(runs(stamps.path(), "a") == 0, "a held call ran");

    // A held call cancelled ends `cancelled` at once (no worker runs it) and never runs.
    let cancelled = queued_a.remove(0);
    client.cancel(&cancelled).await?;
    let t = client.get(&cancelled).await?;
    ensure!(t["status"] == "cancelled", "a held call cancelled: {t}");

    // A --where naming no argument of the tool strikes nothing: refused, exit 64.
    let (code, _, err) = cli(&redis, &["strike", "work", "--where", "kye=a"])?;
    ensure!(
        code == 64 && err.contains("no argument \"kye\"") && err.contains("key"),
        "{code} {err}"
    );

    // Restore: every held call runs, once; the cancelled one stays cancelled.
    let out = cli_ok(&redis, &["restore", "work", "--where", "key=a"])?;
    ensure!(out.contains("restored tool work where key=a"), "{out}");
    for id in &queued_a {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    ensure!(
        runs(stamps.path(), "a") == queued_a.len(),
        "each held call ran once, the cancelled one never"
    );
    let t = client.get(&cancelled).await?;
    ensure!(t["status"] == "cancelled", "{t}");
    let again = poll_until(WITHIN, || async {
        call(client, "work", json!({"key": "a"})).await.ok()?.err()
    })
    .await
    .context("a restored tool is callable")?;
    client.wait_status(&again, "completed", WITHIN).await?;
    ensure!(cli_ok(&redis, &["strikes"])?.contains("no strikes"));
    // Restoring what is not struck says so.
    let (code, _, err) = cli(&redis, &["restore", "work"])?;
    ensure!(
        code == 1 && err.contains("no strike on tool work"),
        "{code} {err}"
    );

    // A strike without --cancel-running lets the running call finish; striking the same
    // tool again with --cancel-running then cancels it, and new calls are refused.
    let running = client.start_task("hang", json!({})).await?;
    poll_until(WITHIN, || async {
        let t = client.get(&running).await.ok()?;
        (t["statusMessage"] == "started").then_some(())
    })
    .await?;
    cli_ok(&redis, &["strike", "hang"])?;
    // Every worker has read it (its second "1 in force": the first was work's strike).
    fleet
        .workers_logged_times("strikes changed: 1 in force", 2)
        .await?;
    let t = client.get(&running).await?;
    ensure!(
        t["status"] == "working",
        "a plain strike cancelled a run: {t}"
    );
    let out = cli_ok(&redis, &["strike", "hang", "--cancel-running"])?;
    ensure!(out.contains("struck again tool hang"), "{out}");
    client.wait_status(&running, "cancelled", WITHIN).await?;
    poll_until(WITHIN, || async {
        call(client, "hang", json!({})).await.ok()?.ok()
    })
    .await
    .context("calls of a struck tool are refused")?;
    drop(fleet.gateway);
    Ok(())
}

/// A job asked to cancel that reaches a worker while its tool is struck ends `cancelled`,
/// not held until a restore (as start.lua would end it): the worker running it is
/// SIGKILLed, the call is cancelled (flagged: no worker runs it to see), and the other
/// worker reclaims the job under the strike.
#[tokio::test(flavor = "multi_thread")]
async fn fleet_struck_job_asked_to_cancel_ends_cancelled_not_held() -> Result<()> {
    let catalog = r#"
        [[command]]
        name = "hang"
        argv = ["sh", "-c", "echo started; exec sleep 30"]
        "#;
    let mut fleet = Fleet::start_with_lease(catalog, 2, &["hang"], "2s").await?;
    let redis = fleet.redis.url();
    let id = fleet.client.start_task("hang", json!({})).await?;
    message_seen(&fleet.client, &id, "started").await?;
    cli_ok(&redis, &["strike", "hang"])?;
    fleet.workers_logged("strikes changed: 1 in force").await?;
    let holder = fleet.workers.iter_mut().find_map(|w| {
        let children = crate::upstream::children_of(w.process.child().id());
        (!children.is_empty()).then_some((w, children))
    });
    let (holder, orphans) = holder.context("the worker running the call")?;
    holder.process.kill();
    for pid in orphans {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    }
    fleet.client.cancel(&id).await?;
    let t = fleet.client.wait_status(&id, "cancelled", WITHIN).await?;
    ensure!(t["statusMessage"] == "Cancelled by request", "{t}");
    Ok(())
}

/// A `[[command]]` tool failing with a retryable exit code: it appends a line per run to
/// the file `{file}`, exits 75 on the first two runs and succeeds on the third. Runs 2 and 3
/// first wait for the file `{file}.goN` to exist, so a test reads the status message of
/// the wait before them at its leisure (the message stays until the run writes output).
/// `down` always exits 75 with a long wait between its attempts.
const FLAKY: &str = r#"
[[command]]
name = "flaky"
argv = ["sh", "-c", "touch \"$0\"; n=$(( $(wc -l < \"$0\") + 1 )); echo run $n >> \"$0\"; if [ $n -ge 2 ]; then while [ ! -e \"$0.go$n\" ]; do sleep 0.02; done; fi; if [ $n -lt 3 ]; then echo \"try $n failed\" >&2; exit 75; fi; echo ok $n", "{file}"]
input_schema = { type = "object", properties = { file = { type = "string" } }, required = ["file"] }
retry = { attempts = 3, initial = "WAIT", max = "WAIT" }
retry_on_exit = [75]

[[command]]
name = "always75"
argv = ["sh", "-c", "echo run >> \"$0\"; echo down >&2; exit 75", "{file}"]
input_schema = { type = "object", properties = { file = { type = "string" } }, required = ["file"] }
retry = { attempts = 2, initial = "100ms", max = "100ms" }
retry_on_exit = [75]

[[command]]
name = "down"
argv = ["sh", "-c", "echo run >> \"$0\"; echo down >&2; exit 75", "{file}"]
input_schema = { type = "object", properties = { file = { type = "string" } }, required = ["file"] }
retry = { attempts = 3, initial = "3s", max = "3s" }
retry_on_exit = [75]
"#;

/// Open `flaky`'s gate for run `n` (see [`FLAKY`]).
fn open_gate(counter: &str, n: u32) -> Result<()> {
    std::fs::write(format!("{counter}.go{n}"), "").context("cannot open a gate")
}

/// Poll task `id` until its status message contains `text`; the task then.
async fn message_seen(client: &Client, id: &str, text: &str) -> Result<Value> {
    poll_until(WITHIN, || async {
        let t = client.get(id).await.ok()?;
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains(text))
            .then_some(t)
    })
    .await
    .with_context(|| format!("task {id} never said {text:?}"))
}

/// Retries: exit 75 is retryable for `flaky`, so it waits (`working`, "retrying in …
/// (attempt 2 of 3): exit code 75: try 1 failed") and runs again, completing on attempt 3
/// (T-17: it never leaves `working` meanwhile). A tool out of attempts ends as without
/// retries: `completed` with the last run's `isError` result (T-21). A call cancelled
/// while it waits for its next attempt ends `cancelled` at once and never runs again.
#[tokio::test(flavor = "multi_thread")]
async fn fleet_retry_completes_on_the_third_attempt() -> Result<()> {
    let stamps = TempDir::new("mcpt-fleet-retry")?;
    let fleet = Fleet::start(
        &FLAKY.replace("WAIT", "300ms"),
        1,
        &["flaky", "always75", "down"],
    )
    .await?;
    let client = &fleet.client;
    let counter = stamps.path().join("flaky").display().to_string();
    let id = client.start_task("flaky", json!({"file": counter})).await?;
    let t = message_seen(client, &id, "(attempt 2 of 3): exit code 75: try 1 failed").await?;
    ensure!(t["status"] == "working", "{t}");
    let m = t["statusMessage"].as_str().unwrap_or("");
    ensure!(m.starts_with("retrying in "), "{m}");
    open_gate(&counter, 2)?;
    message_seen(client, &id, "(attempt 3 of 3): exit code 75: try 2 failed").await?;
    open_gate(&counter, 3)?;
    let done = client.wait_status(&id, "completed", WITHIN).await?;
    ensure!(done["result"]["content"][0]["text"] == "ok 3\n", "{done}");
    ensure!(
        runs(stamps.path(), "flaky") == 3,
        "three runs in all, each once"
    );

    let log = stamps.path().join("always").display().to_string();
    let id = client.start_task("always75", json!({"file": log})).await?;
    let done = client.wait_status(&id, "completed", WITHIN).await?;
    ensure!(done["result"]["isError"] == true, "{done}");
    ensure!(
        done["result"]["structuredContent"]["exitCode"] == 75,
        "{done}"
    );
    ensure!(runs(stamps.path(), "always") == 2, "two attempts in all");

    // Cancelled during the wait (1.5 to 3 s): cancelled at once, no second run.
    let log = stamps.path().join("down").display().to_string();
    let id = client.start_task("down", json!({"file": log})).await?;
    message_seen(client, &id, "(attempt 2 of 3)").await?;
    client.cancel(&id).await?;
    let t = client.get(&id).await?;
    ensure!(t["status"] == "cancelled", "cancelled during the wait: {t}");
    // Until the job came due, went back to its queue and was skipped (neither waiting nor
    // queued any more): it must not have run.
    poll_until(WITHIN, || async {
        let waiting = fleet.redis.cli(&["ZCARD", "mcpt:delayed:{default}"]).ok()?;
        let queued = fleet.redis.cli(&["XLEN", "mcpt:queue:{default}"]).ok()?;
        (waiting.trim() == "0" && queued.trim() == "0").then_some(())
    })
    .await?;
    ensure!(
        runs(stamps.path(), "down") == 1,
        "a cancelled call ran again"
    );
    ensure!(client.get(&id).await?["status"] == "cancelled");
    Ok(())
}

/// Retries are durable: the worker that ran attempt 1 is SIGKILLed while the job waits for
/// attempt 2 (2.5 to 5 s; the counter file read right after the kill proves attempt 2 had
/// not started); a worker started afterwards runs attempts 2 and 3 and the task completes.
/// The lease is a minute, so the job cannot have come back by the dead worker's claim
/// lapsing (a wait kept in the worker's memory would be lost for that minute).
#[tokio::test(flavor = "multi_thread")]
async fn fleet_retry_survives_its_worker_being_killed_during_the_wait() -> Result<()> {
    let stamps = TempDir::new("mcpt-fleet-retry-kill")?;
    let mut fleet =
        Fleet::start_with_lease(&FLAKY.replace("WAIT", "5s"), 1, &["flaky"], "60s").await?;
    let counter = stamps.path().join("flaky").display().to_string();
    open_gate(&counter, 2)?;
    open_gate(&counter, 3)?;
    let id = fleet
        .client
        .start_task("flaky", json!({"file": counter}))
        .await?;
    message_seen(&fleet.client, &id, "(attempt 2 of 3)").await?;
    fleet.workers[0].process.kill();
    ensure!(
        runs(stamps.path(), "flaky") == 1,
        "attempt 2 started before the kill: the kill was not during the wait"
    );
    fleet.add_worker()?;
    // Two waits of up to 5 s each and a worker's start.
    let done = fleet
        .client
        .wait_status(&id, "completed", Duration::from_secs(30))
        .await?;
    ensure!(done["result"]["content"][0]["text"] == "ok 3\n", "{done}");
    ensure!(runs(stamps.path(), "flaky") == 3, "three runs in all");
    Ok(())
}

/// The most runs at once in the `start NS` / `end NS` stamps of `files`, and how many runs.
fn overlap(files: &[std::path::PathBuf]) -> Result<(usize, usize)> {
    let mut events: Vec<(u128, i32)> = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(f)?.lines() {
            let (what, at) = line.split_once(' ').context("a stamp line")?;
            let at: u128 = at.trim().parse()?;
            // At the same nanosecond an end comes before a start.
            events.push((at, if what == "end" { -1 } else { 1 }));
        }
    }
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in &events {
        now += step;
        most = most.max(now);
    }
    let runs = events.iter().filter(|(_, s)| *s == 1).count();
    Ok((usize::try_from(most)?, runs))
}

/// A limited tool stamping its start and end (ns) in `{dir}/{key}`.
fn stamping_tool(name: &str, dir: &Path, limits: &str) -> String {
    format!(
        r#"
        [[command]]
        name = "{name}"
        argv = ["sh", "-c", "echo start $(date +%s%N) >> \"$0/$1\"; sleep 0.2; echo end $(date +%s%N) >> \"$0/$1\"", "{dir}", "{{key}}"]
        input_schema = {{ type = "object", properties = {{ key = {{ type = "string" }} }}, required = ["key"] }}
        {limits}
        "#,
        dir = dir.display()
    )
}

/// `max_running = 2` holds across three workers (three slots): over 20 calls the tool's
/// own stamps never show more than two runs at once, and waiting tasks stay `working` with
/// "waiting for a slot" (T-17). A worker SIGKILLed while it holds the one slot of a
/// `max_running = 1` tool gives it back within the lease: the next call runs.
#[tokio::test(flavor = "multi_thread")]
async fn fleet_max_running_holds_across_workers_and_a_dead_workers_slot_comes_back() -> Result<()> {
    let stamps = TempDir::new("mcpt-fleet-limit")?;
    let marker = stamps.path().join("hung-once");
    let catalog = format!(
        r#"{}
        [[command]]
        name = "single"
        argv = ["sh", "-c", "if [ -e \"$0\" ]; then echo again; exit 0; fi; touch \"$0\"; echo started; exec sleep 30", "{marker}"]
        max_running = 1
        "#,
        stamping_tool("gpu", stamps.path(), "max_running = 2"),
        marker = marker.display(),
    );
    let mut fleet = Fleet::start(&catalog, 3, &["gpu", "single"]).await?;
    let client = &fleet.client;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(client.start_task("gpu", json!({"key": "all"})).await?);
    }
    let waiting = message_seen(client, &ids[19], "waiting for a slot").await?;
    ensure!(waiting["status"] == "working", "{waiting}");
    for id in &ids {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    let (most, runs) = overlap(&[stamps.path().join("all")])?;
    ensure!(runs == 20, "{runs} runs");
    ensure!(most <= 2, "{most} runs at once under max_running = 2");

    // The slot of a killed worker comes back.
    let hung = client.start_task("single", json!({})).await?;
    message_seen(client, &hung, "started").await?;
    let next = client.start_task("single", json!({})).await?;
    message_seen(client, &next, "waiting for a slot").await?;
    let holder = fleet.workers.iter_mut().find_map(|w| {
        let children = crate::upstream::children_of(w.process.child().id());
        (!children.is_empty()).then_some((w, children))
    });
    let (holder, orphans) = holder.context("the worker running the hung call")?;
    holder.process.kill();
    for pid in orphans {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    }
    client.wait_status(&next, "completed", WITHIN).await?;
    client.wait_status(&hung, "completed", WITHIN).await?;
    Ok(())
}

/// `concurrency_key = "{key}"` with `max_running = 1`: at most one run per key value at a
/// time, while runs of different keys overlap.
#[tokio::test(flavor = "multi_thread")]
async fn fleet_concurrency_key_limits_each_value_on_its_own() -> Result<()> {
    let stamps = TempDir::new("mcpt-fleet-key")?;
    let catalog = stamping_tool(
        "repo",
        stamps.path(),
        "max_running = 1\nconcurrency_key = \"{key}\"",
    );
    let fleet = Fleet::start(&catalog, 3, &["repo"]).await?;
    let client = &fleet.client;
    let mut ids = Vec::new();
    for _ in 0..4 {
        for key in ["a", "b"] {
            ids.push(client.start_task("repo", json!({"key": key})).await?);
        }
    }
    for id in &ids {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    let (a, b) = (stamps.path().join("a"), stamps.path().join("b"));
    ensure!(overlap(std::slice::from_ref(&a))? == (1, 4), "key a");
    ensure!(overlap(std::slice::from_ref(&b))? == (1, 4), "key b");
    let (both, _) = overlap(&[a, b])?;
    ensure!(both == 2, "keys a and b never ran at the same time");
    Ok(())
}

/// `rate = "3/2s"` across three workers: of 7 calls, no window of 2 s (less a little for
/// process start-up jitter in the tool's own stamps) holds more than 3 starts, and the
/// calls that wait say so while `working` (T-17).
#[tokio::test(flavor = "multi_thread")]
async fn fleet_rate_limit_holds_across_workers() -> Result<()> {
    let stamps = TempDir::new("mcpt-fleet-rate")?;
    let catalog = stamping_tool("quota", stamps.path(), "rate = \"3/2s\"");
    let fleet = Fleet::start(&catalog, 3, &["quota"]).await?;
    let client = &fleet.client;
    let mut ids = Vec::new();
    for _ in 0..7 {
        ids.push(client.start_task("quota", json!({"key": "q"})).await?);
    }
    let waiting = message_seen(client, &ids[6], "waiting for the rate limit (3 per 2s)").await?;
    ensure!(waiting["status"] == "working", "{waiting}");
    for id in &ids {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    let mut starts: Vec<u128> = std::fs::read_to_string(stamps.path().join("q"))?
        .lines()
        .filter_map(|l| l.strip_prefix("start ")?.trim().parse().ok())
        .collect();
    starts.sort_unstable();
    ensure!(starts.len() == 7, "{starts:?}");
    let window: u128 = 1_850_000_000; // 2 s less 150 ms of jitter, in ns
    for (i, t) in starts.iter().enumerate() {
        let within = starts[i..].iter().take_while(|u| **u < t + window).count();
        ensure!(
            within <= 3,
            "{within} starts within 2 s from start {i}: {starts:?}"
        );
    }
    Ok(())
}

/// `rate = "2/min"`: a minute-scale window. Of three calls on two workers, two start at
/// once and the third waits, `working` with the limit named, for the rest of the minute:
/// seconds later it still has not started. Cancelled during the wait, it ends `cancelled`
/// and never runs (T-17, T-36).
#[tokio::test(flavor = "multi_thread")]
async fn fleet_rate_per_minute_holds_the_third_call_for_the_minute() -> Result<()> {
    let stamps = TempDir::new("mcpt-fleet-rate-minute")?;
    let catalog = stamping_tool("minute", stamps.path(), "rate = \"2/min\"");
    let fleet = Fleet::start(&catalog, 2, &["minute"]).await?;
    let client = &fleet.client;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(client.start_task("minute", json!({"key": "m"})).await?);
    }
    for id in &ids[..2] {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    let third = message_seen(client, &ids[2], "waiting for the rate limit (2 per").await?;
    ensure!(third["status"] == "working", "{third}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let starts = std::fs::read_to_string(stamps.path().join("m"))?
        .lines()
        .filter(|l| l.starts_with("start "))
        .count();
    ensure!(starts == 2, "{starts} starts within seconds under 2/min");
    let t = client.get(&ids[2]).await?;
    ensure!(t["status"] == "working", "the third call: {t}");
    client.cancel(&ids[2]).await?;
    client
        .wait_status(&ids[2], "cancelled", Duration::from_secs(5))
        .await?;
    Ok(())
}
