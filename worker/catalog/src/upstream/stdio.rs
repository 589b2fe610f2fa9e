//! The stdio transport: the upstream is a child process speaking newline-delimited
//! JSON-RPC on its stdin and stdout. Its stderr goes to the worker's log (debug) and its
//! last lines explain an early exit. The child runs in its own process group with an
//! allowlisted environment, as `[[command]]` tools do; stopping it closes stdin (a stdio
//! server exits on end of input), then signals the group.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio as Pipe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::session::Core;

/// Time a server gets to exit after end of input, then after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Lines of stderr kept to explain an exit.
const STDERR_LINES: usize = 3;

/// Why a stdio upstream could not be started.
#[derive(Debug, thiserror::Error)]
pub(super) enum StdioError {
    /// The program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// The child came without its stdin, stdout or stderr.
    #[error("the process has no pipes")]
    NoPipes,
}

/// A running stdio upstream. Dropped before [`Stdio::stop`] ended it (the worker exits
/// with sessions open), it sends SIGTERM to the process group: a server need not exit at
/// end of input while it has work pending, and must not outlive the worker.
pub(super) struct Stdio {
    lines: Option<mpsc::UnboundedSender<String>>,
    pgid: Option<u32>,
    exited: tokio_util::sync::CancellationToken,
}

impl Stdio {
    /// Start `argv` and the tasks that feed `core`.
    pub(super) fn start(
        argv: &[String],
        env: &[String],
        cwd: Option<&Path>,
        core: Arc<Core>,
    ) -> Result<Stdio, StdioError> {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .stdin(Pipe::piped())
            .stdout(Pipe::piped())
            .stderr(Pipe::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        for name in env {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().map_err(|source| StdioError::Spawn {
            program: argv[0].clone(),
            source,
        })?;
        let pgid = child.id();
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(StdioError::NoPipes);
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err()
                    || stdin.write_all(b"\n").await.is_err()
                    || stdin.flush().await.is_err()
                {
                    break;
                }
            }
            // Dropping stdin here is the end of input that asks the server to exit.
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let name = argv[0].clone();
        let stderr_done = tokio::spawn(read_stderr(stderr, tail.clone(), name));
        let exited = tokio_util::sync::CancellationToken::new();
        // Weak: the writer must see every sender gone when the session stops.
        let replies = tx.downgrade();
        let stdio = Stdio {
            lines: Some(tx),
            pgid,
            exited: exited.clone(),
        };
        tokio::spawn(async move {
            let mut out = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = out.next_line().await {
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    tracing::debug!("upstream wrote a line that is not JSON-RPC");
                    continue;
                };
                if let (Some(reply), Some(tx)) = (core.dispatch(message), replies.upgrade()) {
                    let _ = tx.send(reply.to_string());
                }
            }
            let status = child.wait().await;
            // Its last words, unless something it started keeps stderr open.
            let _ = tokio::time::timeout(Duration::from_millis(500), stderr_done).await;
            let last: Vec<String> = tail
                .lock()
                .map(|t| t.iter().cloned().collect())
                .unwrap_or_default();
            let mut why = match status {
                Ok(s) => format!("the process exited ({s})"),
                Err(e) => format!("the process ended: {e}"),
            };
            if !last.is_empty() {
                why.push_str(": ");
                why.push_str(&last.join(" | "));
            }
            core.close(why);
            exited.cancel();
        });
        Ok(stdio)
    }

    /// Write one message (in order; never blocks).
    pub(super) fn send(&self, message: &Value) {
        if let Some(lines) = &self.lines {
            let _ = lines.send(message.to_string());
        }
    }

    /// End the process: end of input, then SIGTERM, then SIGKILL to its group.
    pub(super) async fn stop(mut self) {
        drop(self.lines.take());
        let exited = self.exited.clone();
        if tokio::time::timeout(EXIT_GRACE, exited.cancelled())
            .await
            .is_ok()
        {
            return;
        }
        let Some(pgid) = self.pgid else { return };
        signal("TERM", pgid).await;
        if tokio::time::timeout(EXIT_GRACE, exited.cancelled())
            .await
            .is_err()
        {
            signal("KILL", pgid).await;
            let _ = tokio::time::timeout(EXIT_GRACE, exited.cancelled()).await;
        }
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        if self.exited.is_cancelled() {
            return;
        }
        if let Some(pgid) = self.pgid {
            // Synchronous: when the worker is exiting, a spawned task may never run.
            let _ = std::process::Command::new("kill")
                .args(["-TERM", "--", &format!("-{pgid}")])
                .stdin(Pipe::null())
                .stdout(Pipe::null())
                .stderr(Pipe::null())
                .status();
        }
    }
}

/// Copy the server's stderr to the log, keeping the last lines.
async fn read_stderr(
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    program: String,
) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.trim().chars().take(300).collect();
        if line.is_empty() {
            continue;
        }
        tracing::debug!(upstream.program = %program, "upstream stderr: {line}");
        if let Ok(mut t) = tail.lock() {
            if t.len() == STDERR_LINES {
                t.pop_front();
            }
            t.push_back(line);
        }
    }
}

/// `kill -SIG -- -PGID` (std has no safe call for a process group; `unsafe` is forbidden).
async fn signal(sig: &str, pgid: u32) {
    let _ = tokio::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdin(Pipe::null())
        .stdout(Pipe::null())
        .stderr(Pipe::null())
        .status()
        .await;
}
