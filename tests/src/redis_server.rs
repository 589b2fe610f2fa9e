//! Private Redis for tests and tools: [`RedisServer`] (one redis-server, optionally durable,
//! restartable on the same port) and [`RedisCluster`] (N masters joined by hand).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::{free_port, temp_dir};

/// How a start that lost its port to another process says so.
const PORT_TAKEN: &str = "the port may have been taken";

/// Whether a Redis answers `PING` on `port` (not just anything listening there).
fn answers_ping(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut con) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = con.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0u8; 7];
    con.write_all(b"PING\r\n").is_ok()
        && con.read_exact(&mut reply).is_ok()
        && (&reply == b"+PONG\r\n" || reply.starts_with(b"-LOADIN"))
}

/// A private redis-server on a free port. Killed on drop.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    durable: bool,
    /// More `redis-server` arguments (`--replicaof HOST PORT` for a replica).
    extra: Vec<String>,
}

impl RedisServer {
    /// Start one (binary from `REDIS_SERVER_BIN`, default `redis-server`) that keeps
    /// nothing on disk.
    pub fn start() -> Result<RedisServer> {
        Self::start_with(false)
    }

    /// Start one with an append-only file fsynced on every write, so data survives
    /// [`RedisServer::restart`] (as production Redis with AOF would).
    pub fn start_durable() -> Result<RedisServer> {
        Self::start_with(true)
    }

    /// Start a replica of `primary` (keeping nothing on disk).
    pub fn start_replica_of(primary: &RedisServer) -> Result<RedisServer> {
        let mut server = RedisServer {
            port: free_port()?,
            dir: temp_dir("mcpt-redis")?,
            child: None,
            durable: false,
            extra: vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                primary.port.to_string(),
            ],
        };
        server.spawn_on_a_free_port()?;
        Ok(server)
    }

    fn start_with(durable: bool) -> Result<RedisServer> {
        let mut server = RedisServer {
            port: free_port()?,
            dir: temp_dir("mcpt-redis")?,
            child: None,
            durable,
            extra: Vec::new(),
        };
        server.spawn_on_a_free_port()?;
        Ok(server)
    }

    /// [`RedisServer::spawn`], on another free port when the one picked was taken between
    /// [`free_port`] and redis-server's bind (another process of a parallel test bound it).
    fn spawn_on_a_free_port(&mut self) -> Result<()> {
        let mut tries = 0;
        loop {
            match self.spawn() {
                Err(e) if tries < 4 && e.to_string().contains(PORT_TAKEN) => {
                    tries += 1;
                    self.port = free_port()?;
                }
                other => return other,
            }
        }
    }

    fn spawn(&mut self) -> Result<()> {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(if self.durable {
                ["--appendonly", "yes", "--appendfsync", "always"].as_slice()
            } else {
                ["--appendonly", "no"].as_slice()
            })
            .args(["--maxmemory-policy", "noeviction", "--loglevel", "warning"])
            // As README "Redis in production" recommends: finished tasks stay compact.
            .args(["--hash-max-listpack-value", "1024"])
            .args(&self.extra)
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {bin} (is redis-server installed?)"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // Listening is not enough: the port may be another process's, with this
            // redis-server gone after failing to bind it.
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                bail!(
                    "redis-server on {} exited at start ({status}): {PORT_TAKEN}",
                    self.port
                );
            }
            if answers_ping(self.port) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("redis-server did not listen on {} within 10 s", self.port)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Run `redis-cli` against this server and return its stdout.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One field of a task's hash (`""` when absent), read behind the server's back.
    pub fn task_field(&self, task_id: &str, field: &str) -> Result<String> {
        Ok(self
            .cli(&["HGET", &self.task_key(task_id)?, field])?
            .trim()
            .to_owned())
    }

    /// The key of a task's hash, whoever owns it (`mcpt:task:{ID}:OWNER`; the anonymous
    /// owner's name when there is no such hash).
    pub fn task_key(&self, task_id: &str) -> Result<String> {
        let pattern = format!("mcpt:task:{{{task_id}}}:*");
        let found = self.cli(&["--scan", "--pattern", &pattern])?;
        Ok(found.lines().next().map(str::to_owned).unwrap_or_else(|| {
            mcp_tasks_store::keys::task_key(task_id, mcp_tasks_protocol::meta::ANONYMOUS_OWNER)
        }))
    }

    /// Kill the server (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stop (`SIGSTOP`) or continue (`SIGCONT`) the server: a stopped replica reads nothing,
    /// so it falls behind its primary as a slow or distant one would.
    pub fn set_stopped(&self, stopped: bool) -> Result<()> {
        let pid = self
            .child
            .as_ref()
            .context("the server is not running")?
            .id();
        let signal = if stopped { "-STOP" } else { "-CONT" };
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill {signal} {pid}: {status}");
        Ok(())
    }

    /// Kill and start again on the same port (data is kept only when durable).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A private Redis Cluster of `N` masters (no replicas) on free ports, each node keeping
/// nothing on disk. Killed on drop.
///
/// Built by hand rather than with `redis-cli --cluster create` (which wants at least three
/// masters), so the benchmark can compare one master with three: each node takes an equal
/// contiguous range of slots (`CLUSTER ADDSLOTSRANGE`), the first meets the others, and
/// the cluster is ready once every node reports `cluster_state:ok`.
pub struct RedisCluster {
    ports: Vec<u16>,
    dir: PathBuf,
    children: Vec<Child>,
}

impl RedisCluster {
    /// Start `masters` nodes and join them into one cluster.
    pub fn start(masters: usize) -> Result<RedisCluster> {
        if masters == 0 {
            bail!("a cluster needs at least one master");
        }
        let mut cluster = RedisCluster {
            ports: Vec::new(),
            dir: temp_dir("mcpt-redis-cluster")?,
            children: Vec::new(),
        };
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        for _ in 0..masters {
            let port = free_port()?;
            let child = Command::new(&bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(cluster.dir.join(format!("nodes-{port}.conf")))
                .args(["--cluster-node-timeout", "5000"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--maxmemory-policy", "noeviction", "--loglevel", "warning"])
                .args(["--hash-max-listpack-value", "1024"])
                .arg("--dir")
                .arg(&cluster.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot start {bin} (is redis-server installed?)"))?;
            cluster.children.push(child);
            cluster.ports.push(port);
        }
        for &port in &cluster.ports {
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                if Instant::now() > deadline {
                    bail!("cluster node did not listen on {port} within 10 s");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        const SLOTS: usize = 16384;
        for (i, _) in cluster.ports.iter().enumerate() {
            let (from, to) = (i * SLOTS / masters, (i + 1) * SLOTS / masters - 1);
            let epoch = (i + 1).to_string();
            cluster.cli_checked(i, &["CLUSTER", "SET-CONFIG-EPOCH", &epoch])?;
            cluster.cli_checked(
                i,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &from.to_string(),
                    &to.to_string(),
                ],
            )?;
        }
        for &port in &cluster.ports[1..] {
            cluster.cli_checked(0, &["CLUSTER", "MEET", "127.0.0.1", &port.to_string()])?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = (0..masters).all(|i| {
                cluster.cli(i, &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok")
                        && info.contains(&format!("cluster_known_nodes:{masters}\r"))
                })
            });
            if ready {
                return Ok(cluster);
            }
            if Instant::now() > deadline {
                bail!("the cluster did not reach cluster_state:ok within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` for `MCPT_REDIS_URL`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// `redis://127.0.0.1:PORT` of each node.
    pub fn node_urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// Run `redis-cli` against node `i` and return its stdout.
    pub fn cli(&self, i: usize, args: &[&str]) -> Result<String> {
        let port = self.ports.get(i).context("no such node")?;
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn cli_checked(&self, i: usize, args: &[&str]) -> Result<()> {
        let out = self.cli(i, args)?;
        if !out.trim().eq_ignore_ascii_case("ok") {
            bail!("redis-cli {args:?} on node {i}: {}", out.trim());
        }
        Ok(())
    }

    /// Keys held by each node (`DBSIZE`), in node order.
    pub fn keys_per_node(&self) -> Result<Vec<u64>> {
        (0..self.ports.len())
            .map(|i| {
                let out = self.cli(i, &["DBSIZE"])?;
                out.trim()
                    .parse()
                    .with_context(|| format!("DBSIZE on node {i}: {out:?}"))
            })
            .collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port another process holds is not taken for our Redis: the start moves on to a
    /// free one and the server answers there.
    #[test]
    fn a_port_taken_before_redis_binds_it_is_replaced() -> Result<()> {
        let squatter = std::net::TcpListener::bind("127.0.0.1:0")?;
        let taken = squatter.local_addr()?.port();
        let mut server = RedisServer {
            port: taken,
            dir: temp_dir("mcpt-redis")?,
            child: None,
            durable: false,
            extra: Vec::new(),
        };
        server.spawn_on_a_free_port()?;
        assert_ne!(server.port(), taken);
        assert!(answers_ping(server.port()));
        Ok(())
    }
}
