//! The private `redis-server` of `mcp-tasks up`: started on a free loopback port, in a
//! process group of its own (a Ctrl-C at the terminal reaches `up` only, which stops Redis
//! last), and stopped with the `SHUTDOWN` command, so it writes its append-only file out.
//! Redis is only ever stopped through its own port, never by signalling a pid: a pid may
//! have been recycled, a port answers for the Redis behind it (and std has no `kill`).
//!
//! Kept data: `--appendonly yes --appendfsync everysec` in the data directory (at most the
//! last second of writes is lost if the machine dies; nothing when `up` stops).
//! Ephemeral: no persistence, in a fresh temp directory that `up` deletes on exit.
//!
//! [`PrivateRedis`] is a guard: on every path out of `up` (an error while starting, a
//! Ctrl-C before the gateway runs, a second Ctrl-C) dropping it stops Redis and removes an
//! ephemeral directory and a pid file Redis could not remove.
//!
//! A Redis left running by an `up` that was killed (SIGKILL, a crash) still holds the data
//! directory: [`stop_stale`] finds it through its pid file and the dead `up`'s runtime
//! file, checks over that Redis URL that it is the Redis of this directory (`CONFIG GET
//! dir`), and stops it (`SHUTDOWN`: its data is kept); then `up` starts a fresh one with
//! its usual options on the same data. Stopping rather than reusing it keeps one way to
//! start, whatever options or port the old one had.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

use crate::data::{Runtime, is_alive};

/// The pid file `redis-server` writes in the data directory (and removes when it stops).
const PID_FILE: &str = "redis.pid";
/// Its log, kept next to the data.
const LOG_FILE: &str = "redis.log";
/// How long Redis may take to start (loading a large append-only file counts).
const START_WITHIN: Duration = Duration::from_secs(30);
/// How long Redis may take to stop after `SHUTDOWN` before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(10);
/// How long one question to Redis (`PING`, `CONFIG GET`, `SHUTDOWN`) may take.
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// A running private Redis; dropped without [`PrivateRedis::stop`], it is stopped at once.
pub(crate) struct PrivateRedis {
    child: Child,
    /// Kept apart: `Child::id` forgets it once the process is reaped.
    pid: Option<u32>,
    port: u16,
    /// Its data directory.
    pub(crate) dir: PathBuf,
    /// Whether `dir` is a temp directory to delete on exit.
    pub(crate) ephemeral: bool,
}

impl PrivateRedis {
    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Stop it (`SHUTDOWN`, then SIGKILL after [`STOP_WITHIN`]); dropping it then deletes
    /// an ephemeral directory.
    pub(crate) async fn stop(mut self) {
        let pid = self.pid.unwrap_or(0);
        // No answer to wait for: Redis closes the connection once its data is out.
        let _ = shutdown(("127.0.0.1", self.port)).await;
        if tokio::time::timeout(STOP_WITHIN, self.child.wait())
            .await
            .is_err()
        {
            eprintln!(
                "mcp-tasks: redis-server (pid {pid}) did not stop within {} s of SHUTDOWN; killing it",
                STOP_WITHIN.as_secs()
            );
            let _ = self.child.kill().await;
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // Blocking, but short: `up` is on its way out.
            let _ = shutdown_blocking(self.port);
            // `kill_on_drop`, were it still alive, would SIGKILL it; wait for the exit
            // SHUTDOWN started, as long as the question may take.
            let deadline = std::time::Instant::now() + ASK_WITHIN;
            while std::time::Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None))
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.start_kill();
        }
        if self.ephemeral {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else if self.pid.is_some() && pid_file(&self.dir) == self.pid {
            // Killed, it could not remove its pid file.
            let _ = std::fs::remove_file(self.dir.join(PID_FILE));
        }
    }
}

/// The pid in `dir`'s Redis pid file.
fn pid_file(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Stop a Redis left in `dir` by an `up` that did not stop cleanly (`stale` is that
/// `up`'s runtime file), saying so. A live pid in the pid file that is not the Redis of
/// `dir` (a recycled pid) is left alone.
///
/// # Errors
/// It does not stop within [`STOP_WITHIN`], or it holds `dir` but cannot be asked to stop.
pub(crate) async fn stop_stale(dir: &Path, stale: Option<&Runtime>) -> Result<(), String> {
    let Some(pid) = pid_file(dir).filter(|pid| is_alive(*pid)) else {
        return Ok(());
    };
    // The address the dead `up` wrote down for this very Redis.
    let addr = stale
        .filter(|r| r.redis_pid == Some(pid))
        .and_then(|r| loopback_addr(&r.redis_url));
    let ours = match &addr {
        Some(addr) => config_dir(addr).await.is_some_and(|d| same_dir(&d, dir)),
        None => false,
    };
    let Some(addr) = addr.filter(|_| ours) else {
        // Redis changes its working directory to its data directory.
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"));
        if cwd.is_ok_and(|cwd| same_dir(&cwd, dir)) {
            return Err(format!(
                "a process (pid {pid}) left by an `up` that did not stop cleanly still holds {} and cannot be asked to stop; stop it (kill {pid}) and run `up` again",
                dir.display()
            ));
        }
        return Ok(());
    };
    eprintln!(
        "mcp-tasks: a redis-server (pid {pid}) left by an `up` that did not stop cleanly still holds {}; stopping it (its data is kept)",
        dir.display()
    );
    let _ = shutdown(addr.as_str()).await;
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

/// `HOST:PORT` of a password-less loopback `redis://` URL (what `up` writes for its
/// private Redis); `None` for anything else, which is not ours to stop.
fn loopback_addr(url: &str) -> Option<String> {
    let rest = url.strip_prefix("redis://")?;
    let hostport = rest.split('/').next()?;
    let port_ok = hostport
        .strip_prefix("127.0.0.1:")
        .is_some_and(|p| p.parse::<u16>().is_ok());
    port_ok.then(|| hostport.to_owned())
}

/// Whether two paths name the same directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The data directory of the Redis at `addr` (`CONFIG GET dir`), `None` when it does not
/// answer as a Redis.
async fn config_dir(addr: &str) -> Option<PathBuf> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"CONFIG GET dir\r\n").await?;
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        // `*2 $3 dir $N PATH`: five lines.
        while reply.windows(2).filter(|w| w == b"\r\n").count() < 5 {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(reply)
    };
    let reply = tokio::time::timeout(ASK_WITHIN, ask).await.ok()?.ok()?;
    let text = String::from_utf8(reply).ok()?;
    let lines: Vec<&str> = text.split("\r\n").collect();
    (lines.first() == Some(&"*2") && lines.get(2) == Some(&"dir"))
        .then(|| lines.get(4).map(PathBuf::from))
        .flatten()
}

/// Send `SHUTDOWN` to the Redis at `addr` and wait until it closes the connection (its
/// data is written out by then).
async fn shutdown(addr: impl tokio::net::ToSocketAddrs) -> std::io::Result<()> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"SHUTDOWN\r\n").await?;
        let mut sink = Vec::new();
        s.read_to_end(&mut sink).await.map(|_| ())
    };
    tokio::time::timeout(ASK_WITHIN, ask)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// [`shutdown`] for a `Drop`, which cannot await.
fn shutdown_blocking(port: u16) -> std::io::Result<()> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, ASK_WITHIN)?;
    s.set_read_timeout(Some(ASK_WITHIN))?;
    s.write_all(b"SHUTDOWN\r\n")?;
    let mut sink = Vec::new();
    s.read_to_end(&mut sink).map(|_| ())
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
    let spawned = cmd
        .arg("--dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // Not in `up`'s process group: Ctrl-C reaches `up`, which stops Redis last.
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            if ephemeral {
                let _ = std::fs::remove_dir_all(&dir);
            }
            return Err(match e.kind() {
                std::io::ErrorKind::NotFound => "redis-server is not installed; install it (apt-get install redis-server) or set MCPT_REDIS_URL".to_owned(),
                _ => format!("cannot start redis-server: {e}"),
            });
        }
    };
    // From here on the guard cleans up, whichever way this returns (or is dropped).
    let mut redis = PrivateRedis {
        pid: child.id(),
        child,
        port,
        dir,
        ephemeral,
    };
    let deadline = tokio::time::Instant::now() + START_WITHIN;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(status)) = redis.child.try_wait() {
            let log = if ephemeral {
                String::new()
            } else {
                format!("; its log: {}", redis.dir.join(LOG_FILE).display())
            };
            return Err(format!("redis-server exited at start ({status}){log}"));
        }
        if pong(port).await {
            return Ok(redis);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_passwordless_loopback_redis_is_ours_to_stop() {
        assert_eq!(
            loopback_addr("redis://127.0.0.1:6390").as_deref(),
            Some("127.0.0.1:6390")
        );
        assert_eq!(
            loopback_addr("redis://127.0.0.1:6390/0").as_deref(),
            Some("127.0.0.1:6390")
        );
        for other in [
            "redis://:pw@127.0.0.1:6390",
            "redis://example.com:6379",
            "rediss://127.0.0.1:6390",
            "redis://127.0.0.1:x",
        ] {
            assert_eq!(loopback_addr(other), None, "{other}");
        }
    }
}
