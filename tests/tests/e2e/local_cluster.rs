//! The local cluster command (issue 4, item 5): `cluster --workers 2 --listen 127.0.0.1:0`
//! starts Redis, 2 gateways, 2 workers and its load balancer; everything here goes through the
//! load balancer. Workers are added and removed on stdin while sleep tasks run; all of them
//! complete, and `quit` stops everything with exit 0.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use mcp_tasks_tests::{Client, binary, caps_none};
use serde_json::json;

/// The cluster process. On drop (a failed test) it is sent `quit`, so it stops its children,
/// and killed if it has not exited within 30 s.
struct Cluster {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Receiver<String>,
    err: Receiver<String>,
    err_seen: Vec<String>,
}

fn lines(r: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

impl Cluster {
    fn start() -> Result<Cluster> {
        let bin = binary("cluster");
        let mut child = Command::new(&bin)
            .args(["--workers", "2", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {} (cargo build --bins)", bin.display()))?;
        let out = lines(child.stdout.take().expect("stdout"));
        let err = lines(child.stderr.take().expect("stderr"));
        Ok(Cluster {
            stdin: child.stdin.take(),
            child,
            out,
            err,
            err_seen: Vec::new(),
        })
    }

    fn send(&mut self, cmd: &str) -> Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| anyhow!("stdin closed"))?;
        writeln!(stdin, "{cmd}")?;
        stdin.flush()?;
        Ok(())
    }

    /// The rest of the first stdout line starting with `prefix`.
    fn stdout_line(&mut self, prefix: &str, within: Duration) -> Result<String> {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.out.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.to_owned());
                    }
                }
                Err(_) => break,
            }
        }
        bail!("no stdout line {prefix:?}; stderr: {}", self.stderr_text())
    }

    /// Wait for a stderr line containing `all` of the given parts.
    fn event(&mut self, all: &[&str], within: Duration) -> Result<String> {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.err.recv_timeout(left) {
                Ok(line) => {
                    self.err_seen.push(line.clone());
                    if all.iter().all(|p| line.contains(p)) {
                        return Ok(line);
                    }
                }
                Err(_) => break,
            }
        }
        bail!("no stderr event {all:?}; stderr: {}", self.stderr_text())
    }

    fn stderr_text(&mut self) -> String {
        while let Ok(line) = self.err.try_recv() {
            self.err_seen.push(line);
        }
        self.err_seen.join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.send("quit");
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if self.child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_local_cluster_balances_and_scales_workers_under_load() -> Result<()> {
    let mut cluster = Cluster::start()?;
    let url = cluster.stdout_line("cluster: MCP endpoint http://", Duration::from_secs(60))?;
    let addr = url
        .strip_suffix("/mcp")
        .ok_or_else(|| anyhow!("endpoint {url}"))?
        .parse()?;
    let client = Client::new(addr);

    // server/discover and one task, through the balancer (tasks/get carries Mcp-Name).
    let r = client
        .request("server/discover", json!({}), &caps_none())
        .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert!(
        r.body["result"]["supportedVersions"].is_array(),
        "{}",
        r.body
    );
    let id = client
        .start_task("sleep", json!({"ms": 100, "steps": 2}))
        .await?;
    let done = client
        .wait_status(&id, "completed", Duration::from_secs(20))
        .await?;
    assert_eq!(done["status"], "completed", "{done}");

    // An SSE response streams through the balancer.
    let mut stream = client.listen("l-1", &[&id]).await?;
    let first = stream.next(Duration::from_secs(10)).await;
    assert!(first.is_some(), "nothing on the listen stream");
    drop(stream);

    // Scale up, run load, scale down while it runs.
    cluster.send("add")?;
    cluster.event(&["worker cluster-w3 started"], Duration::from_secs(20))?;
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(
            client
                .start_task("sleep", json!({"ms": 2500, "steps": 5}))
                .await?,
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.send("remove")?;
    cluster.event(&["worker cluster-w3", "exited"], Duration::from_secs(20))?;
    for id in &ids {
        let t = client
            .wait_status(id, "completed", Duration::from_secs(40))
            .await
            .with_context(|| cluster.stderr_text())?;
        assert_eq!(t["result"]["content"][0]["text"], "slept 2500 ms", "{t}");
    }

    cluster.send("status")?;
    let summary = cluster.stdout_line("cluster: 2 gateways, ", Duration::from_secs(10))?;
    assert_eq!(summary, "2 workers", "status summary");

    cluster.send("quit")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = cluster.child.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            bail!("cluster did not exit after quit; {}", cluster.stderr_text());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit {status}; {}", cluster.stderr_text());
    cluster.event(&["redis stopped"], Duration::from_secs(5))?;
    Ok(())
}
