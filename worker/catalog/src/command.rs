//! Running one `[[command]]` tool: build the argv from the arguments, run the program
//! directly (no shell) in its own process group with an allowlisted environment, report
//! output lines as the status message, and end the whole group on cancel or timeout.
//!
//! Signals go to the group through the `kill` program (`kill -TERM -- -PGID`): the
//! workspace forbids `unsafe`, and std has no safe call for a process group.
//!
//! Checking the entry is `command/check.rs`; the process group and its signals are
//! `command/group.rs`.

mod check;
mod group;

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_protocol::tools::text_block;
use regex::Regex;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

pub(super) use self::check::entry;
use self::group::Group;
use crate::{AbortOnDrop, STATUS_CHARS, report, sleep_or_never};
use mcp_tasks_worker::{CallToolResult, Retry, TaskContext, Tool, ToolError, ToolFuture, ToolSpec};

/// Longest line considered for a status message, in bytes (the rest is ignored).
const LINE_BYTES: usize = 4096;

/// One argv element (or the stdin text): fixed, or one argument's whole value.
#[derive(Debug, Clone)]
pub(super) enum Part {
    /// Literal text.
    Text(String),
    /// The value of the named argument.
    Arg(String),
}

/// An argument a [`Part`] names is missing (or null); the text is the tool's error.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("missing argument {0}")]
struct MissingArgument(String);

impl Part {
    /// The element for `args`, or the missing argument.
    fn expand(&self, args: &Value) -> Result<String, MissingArgument> {
        match self {
            Part::Text(t) => Ok(t.clone()),
            Part::Arg(name) => match args.get(name) {
                None | Some(Value::Null) => Err(MissingArgument(name.clone())),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Ok(other.to_string()),
            },
        }
    }
}

/// A checked `[[command]]` entry, minus its [`ToolSpec`].
#[derive(Debug)]
pub(super) struct Command {
    pub(super) argv: Vec<Part>,
    pub(super) stdin: Option<Part>,
    pub(super) cwd: Option<PathBuf>,
    /// Variables copied from the worker's environment (besides PATH).
    pub(super) env: Vec<String>,
    pub(super) progress: Option<Regex>,
    pub(super) max_output: usize,
    /// The limit and how the catalog wrote it (for the error message).
    pub(super) timeout: Option<(Duration, String)>,
    /// Exit codes worth another try (`retry_on_exit`, under the entry's `retry`).
    pub(super) retry_on_exit: Vec<i32>,
}

/// A catalog tool that runs a [`Command`].
pub(super) struct CommandTool {
    pub(super) spec: ToolSpec,
    pub(super) command: Arc<Command>,
}

impl Tool for CommandTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture {
        let command = self.command.clone();
        Box::pin(async move { command.run(ctx, args).await })
    }
}

impl Command {
    async fn run(&self, ctx: TaskContext, args: Value) -> Result<CallToolResult, ToolError> {
        let (argv, stdin) = match self.expand(&args) {
            Ok(expanded) => expanded,
            Err(missing) => return Ok(CallToolResult::error_text(missing.to_string())),
        };
        let mut child = self
            .command(&argv, stdin.is_some())
            .spawn()
            .map_err(|e| ToolError::internal(format!("cannot start {}: {e}", argv[0])))?;
        let Some(pgid) = child.id() else {
            return Err(ToolError::internal("the command ended before it started"));
        };
        let (stdin_pipe, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let mut group = Group::new(pgid, child);
        if let (Some(text), Some(mut pipe)) = (stdin, stdin_pipe) {
            // Written beside the reads, so a program that answers before it has read
            // everything cannot deadlock with us. A closed pipe just ends the write.
            tokio::spawn(async move {
                let _ = pipe.write_all(text.as_bytes()).await;
            });
        }
        let (status_tx, status_rx) = watch::channel(String::new());
        let status_tx = Arc::new(status_tx);
        let out = tokio::spawn(capture(
            stdout,
            self.max_output,
            self.progress.clone(),
            status_tx.clone(),
        ));
        let err = tokio::spawn(capture(
            stderr,
            self.max_output,
            self.progress.clone(),
            status_tx,
        ));
        let _reporter = AbortOnDrop(tokio::spawn(report(ctx.clone(), status_rx)));

        let limit = self.timeout.as_ref().map(|(d, _)| *d);
        let status = tokio::select! {
            status = group.wait() => status,
            () = sleep_or_never(limit) => {
                group.stop().await;
                let written = self.timeout.as_ref().map(|(_, s)| s.as_str()).unwrap_or_default();
                return Err(ToolError::internal(format!("command timed out after {written}")));
            }
            () = ctx.cancelled() => {
                group.stop().await;
                return Err(ToolError::Stopped);
            }
        };
        // The program ended: end whatever it left running in its group, so the pipes close.
        group.stop().await;
        let status =
            status.map_err(|e| ToolError::internal(format!("cannot wait for the command: {e}")))?;
        let out = out.await.unwrap_or_default();
        let err = err.await.unwrap_or_default();
        self.outcome(result(status, &out, &err, self.max_output), &err)
    }

    /// The argv and the stdin text for `args`, or a missing argument.
    fn expand(&self, args: &Value) -> Result<(Vec<String>, Option<String>), MissingArgument> {
        let argv = self
            .argv
            .iter()
            .map(|p| p.expand(args))
            .collect::<Result<_, _>>()?;
        let stdin = self.stdin.as_ref().map(|p| p.expand(args)).transpose()?;
        Ok((argv, stdin))
    }

    /// The program to start: no shell, its own process group, an environment of PATH and
    /// the allowlisted variables, stdin piped only when there is text for it.
    fn command(&self, argv: &[String], stdin: bool) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // The last resort should everything else be dropped: the group is handled below.
            .kill_on_drop(true);
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        for name in &self.env {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        cmd
    }

    /// What the run comes to: `r`, or a retryable failure carrying it when its exit code is
    /// one of `retry_on_exit` (the reason ends with stderr's last line).
    fn outcome(&self, r: CallToolResult, err: &Captured) -> Result<CallToolResult, ToolError> {
        let code = r
            .structured_content
            .as_ref()
            .and_then(|s| s["exitCode"].as_i64());
        match code.and_then(|c| i32::try_from(c).ok()) {
            Some(code) if self.retry_on_exit.contains(&code) => {
                let last_line = String::from_utf8_lossy(&err.tail)
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(|l| format!(": {}", l.chars().take(STATUS_CHARS).collect::<String>()))
                    .unwrap_or_default();
                Err(ToolError::Retryable(Box::new(Retry {
                    reason: format!("exit code {code}{last_line}"),
                    after: None,
                    last: Some(r),
                })))
            }
            _ => Ok(r),
        }
    }
}

/// The `CallToolResult`: stdout as text, everything in `structuredContent`.
fn result(status: ExitStatus, out: &Captured, err: &Captured, max: usize) -> CallToolResult {
    use std::os::unix::process::ExitStatusExt as _;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1);
    let stdout = tail_text(&out.tail, max);
    let stderr = tail_text(&err.tail, max);
    let truncated = out.total > max as u64;
    let mut r = if code == 0 {
        CallToolResult::text(stdout.clone())
    } else {
        CallToolResult::error_text(stdout.clone())
    };
    if truncated {
        r.content.push(text_block(format!(
            "[output truncated: the last {max} of {} bytes are shown]",
            out.total
        )));
    }
    if code != 0 {
        r.content.push(text_block(format!(
            "[exit code {code}]{}{stderr}",
            if stderr.is_empty() { "" } else { "\n" }
        )));
    }
    r.structured_content = Some(json!({
        "exitCode": code,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": truncated,
    }));
    r
}

/// The last `max` bytes as text, starting at a character boundary.
fn tail_text(bytes: &[u8], max: usize) -> String {
    let mut start = bytes.len().saturating_sub(max);
    let stop = (start + 3).min(bytes.len());
    while start < stop && start > 0 && bytes[start] & 0xC0 == 0x80 {
        start += 1;
    }
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// What one pipe carried: its last bytes (at least `max` of them, when there were) and
/// how many there were in all.
#[derive(Debug, Default)]
struct Captured {
    tail: Vec<u8>,
    total: u64,
}

/// Read `pipe` to its end, keeping the tail and offering each non-empty line (or each
/// line `progress` matches) as the status message.
async fn capture(
    pipe: Option<impl AsyncRead + Unpin>,
    max: usize,
    progress: Option<Regex>,
    status: Arc<watch::Sender<String>>,
) -> Captured {
    let mut got = Captured::default();
    let Some(mut pipe) = pipe else {
        return got;
    };
    let mut buf = vec![0u8; 16 * 1024];
    let mut line = Vec::new();
    let offer = |line: &[u8]| {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        let shown = match &progress {
            None => Some(text),
            Some(re) => re
                .captures(text)
                .and_then(|c| c.get(1).or_else(|| c.get(0)))
                .map(|m| m.as_str().trim()),
        };
        if let Some(s) = shown.filter(|s| !s.is_empty()) {
            status.send_replace(s.chars().take(STATUS_CHARS).collect());
        }
    };
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        got.total += n as u64;
        got.tail.extend_from_slice(&buf[..n]);
        if got.tail.len() > max.saturating_mul(2).max(64 * 1024) {
            let cut = got.tail.len() - max;
            got.tail.drain(..cut);
        }
        for &b in &buf[..n] {
            if b == b'\n' || b == b'\r' {
                offer(&line);
                line.clear();
            } else if line.len() < LINE_BYTES {
                line.push(b);
            }
        }
    }
    offer(&line);
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_to_one_element() {
        let args = json!({"s": "a b; $(id)", "n": 3, "b": true, "o": {"k": [1]}, "z": null});
        let arg = |n: &str| Part::Arg(n.to_owned()).expand(&args);
        assert_eq!(arg("s").as_deref(), Ok("a b; $(id)"));
        assert_eq!(arg("n").as_deref(), Ok("3"));
        assert_eq!(arg("b").as_deref(), Ok("true"));
        assert_eq!(arg("o").as_deref(), Ok(r#"{"k":[1]}"#));
        assert_eq!(arg("z"), Err(MissingArgument("z".to_owned())));
        assert_eq!(
            arg("missing").map_err(|e| e.to_string()),
            Err("missing argument missing".to_owned())
        );
    }

    #[test]
    fn the_tail_starts_at_a_character_boundary() {
        let text = "aé€z".as_bytes();
        assert_eq!(tail_text(text, 100), "aé€z");
        assert_eq!(tail_text(text, 4), "€z");
        assert_eq!(tail_text(text, 3), "z");
    }
}
