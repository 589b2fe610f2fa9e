//! The private `redis-server` of `mcp-tasks up`: started on a free loopback port, in a
//! process group of its own (a Ctrl-C at the terminal reaches `up` only, which stops Redis
//! last), and stopped with SIGTERM so it writes its append-only file out.
//!
//! Kept data: `--appendonly yes --appendfsync everysec` in the data directory (at most the
//! last second of writes is lost if the machine dies; nothing when `up` stops).
//! Ephemeral: no persistence, in a fresh temp directory that `up` deletes on exit.
//!
//! A Redis left running by an `up` that was killed (SIGKILL, a crash) still holds the data
//! directory: [`stop_stale`] finds it through its pid file and stops it (SIGTERM: it writes
//! its data out), then `up` starts a fresh one with its usual options on the same data.
//! Stopping rather than reusing it keeps one way to start, whatever options or port the
//! old one had.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

use crate::data::{is_alive, runs};

/// The pid file `redis-server` writes in the data directory (and removes when it stops).
const PID_FILE: &str = "redis.pid";
/// Its log, kept next to the data.
const LOG_FILE: &str = "redis.log";
/// How long Redis may take to start (loading a large append-only file counts).
const START_WITHIN: Duration = Duration::from_secs(30);
/// How long Redis may take to stop after SIGTERM before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// A running private Redis.
pub(crate) struct PrivateRedis {
    child: Child,
    /// `redis://127.0.0.1:PORT`.
    pub(crate) url: String,
    /// Its data directory.
    pub(crate) dir: PathBuf,
    /// Whether `dir` is a temp directory to delete on exit.
    pub(crate) ephemeral: bool,
}

impl PrivateRedis {
    /// Its process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stop it (SIGTERM, then SIGKILL after [`STOP_WITHIN`]) and delete an ephemeral
    /// directory.
    pub(crate) async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            terminate(pid);
            if tokio::time::timeout(STOP_WITHIN, self.child.wait())
                .await
                .is_err()
            {
                eprintln!(
                    "mcp-tasks: redis-server (pid {pid}) did not stop within {} s of SIGTERM; killing it",
                    STOP_WITHIN.as_secs()
                );
                let _ = self.child.kill().await;
            }
        }
        if self.ephemeral {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Send SIGTERM to `pid` (through `kill`, as the harness does: no libc here).
pub(crate) fn terminate(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Stop a Redis left in `dir` by an `up` that did not stop cleanly, saying so.
///
/// # Errors
/// It does not stop within [`STOP_WITHIN`].
pub(crate) async fn stop_stale(dir: &Path) -> Result<(), String> {
    let Some(pid) = std::fs::read_to_string(dir.join(PID_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    else {
        return Ok(());
    };
    if !is_alive(pid) || !runs(pid, "redis-server") {
        return Ok(());
    }
    eprintln!(
        "mcp-tasks: a redis-server (pid {pid}) left by an `up` that did not stop cleanly still holds {}; stopping it (its data is kept)",
        dir.display()
    );
    terminate(pid);
    let deadline = tokio::time::Instant::now() + STOP_WITHIN;
    while is_alive(pid) {
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "the old redis-server (pid {pid}) did not stop within {} s; stop it (kill {pid}) and run `up` again",
                STOP_WITHIN.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Start `redis-server` keeping its data in `dir` (`None`: ephemeral, in a fresh temp
/// directory); wait until it answers `PING`.
///
/// # Errors
/// No free port, `redis-server` missing or failing to start.
pub(crate) async fn start(dir: Option<&Path>) -> Result<PrivateRedis, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))?
        .port();
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--maxmemory-policy", "noeviction", "--loglevel", "warning"])
        // A finished task's hash (its result included) stays a compact listpack.
        .args(["--hash-max-listpack-value", "1024"]);
    let (dir, ephemeral) = match dir {
        Some(dir) => {
            cmd.args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
            ])
            .arg("--pidfile")
            .arg(dir.join(PID_FILE))
            .arg("--logfile")
            .arg(dir.join(LOG_FILE));
            (dir.to_path_buf(), false)
        }
        None => {
            let dir = std::env::temp_dir().join(format!("mcp-tasks-redis-{port}"));
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            cmd.args(["--appendonly", "no", "--save", ""]);
            (dir, true)
        }
    };
    let mut child = cmd
        .arg("--dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // Not in `up`'s process group: Ctrl-C reaches `up`, which stops Redis last.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "redis-server is not installed; install it (apt-get install redis-server) or set MCPT_REDIS_URL".to_owned()
            }
            _ => format!("cannot start redis-server: {e}"),
        })?;
    let deadline = tokio::time::Instant::now() + START_WITHIN;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let log = if ephemeral {
                String::new()
            } else {
                format!("; its log: {}", dir.join(LOG_FILE).display())
            };
            if ephemeral {
                let _ = std::fs::remove_dir_all(&dir);
            }
            return Err(format!("redis-server exited at start ({status}){log}"));
        }
        if pong(port).await {
            return Ok(PrivateRedis {
                child,
                url: format!("redis://127.0.0.1:{port}"),
                dir,
                ephemeral,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill().await;
    Err(format!(
        "redis-server did not answer on port {port} within {} s",
        START_WITHIN.as_secs()
    ))
}

/// Whether Redis on `port` answers `PING` (an inline command): it accepts connections
/// while it loads its data, but answers `-LOADING` until done.
async fn pong(port: u16) -> bool {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(b"PING\r\n").await?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await?;
        Ok::<_, std::io::Error>(buf[..n].starts_with(b"+PONG"))
    };
    tokio::time::timeout(Duration::from_secs(1), ask)
        .await
        .is_ok_and(|r| r.unwrap_or(false))
}
