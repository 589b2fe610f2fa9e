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

/// [`spawn_redis`] on `port`, or on another free one when that was taken between
/// [`free_port`] and redis-server's bind (another process of a parallel test bound it).
/// `args` gives the arguments for a port.
fn spawn_on_a_free_port(mut port: u16, args: impl Fn(u16) -> Vec<String>) -> Result<(u16, Child)> {
    let mut tries = 0;
    loop {
        match spawn_redis(port, &args(port)) {
            Err(e) if tries < 4 && e.to_string().contains(PORT_TAKEN) => {
                tries += 1;
                port = free_port()?;
            }
            Ok(child) => return Ok((port, child)),
            Err(e) => return Err(e),
        }
    }
}

/// Start `redis-server` (binary from `REDIS_SERVER_BIN`, default `redis-server`) on
/// `port` of 127.0.0.1, keeping no snapshots, never evicting, with `args` added, and wait
/// until it answers `PING`.
fn spawn_redis(port: u16, args: &[String]) -> Result<Child> {
    let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
    let mut child = Command::new(&bin)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--maxmemory-policy", "noeviction", "--loglevel", "warning"])
        // As docs/operations.md, "Redis in production", recommends: finished tasks stay compact.
        .args(["--hash-max-listpack-value", "1024"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {bin} (is redis-server installed?)"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        // Listening is not enough: the port may be another process's, with this
        // redis-server gone after failing to bind it.
        if let Some(status) = child.try_wait().ok().flatten() {
            bail!("redis-server on {port} exited at start ({status}): {PORT_TAKEN}");
        }
        if answers_ping(port) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    bail!("redis-server did not answer on {port} within 10 s")
}

/// `SIGSTOP` (`stopped`) or `SIGCONT` process `pid`.
fn signal(pid: u32, stopped: bool) -> Result<()> {
    let signal = if stopped { "-STOP" } else { "-CONT" };
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "kill {signal} {pid}: {status}");
    Ok(())
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

    /// Start on the port picked, or another free one when it was taken meanwhile.
    fn spawn_on_a_free_port(&mut self) -> Result<()> {
        let (port, child) = spawn_on_a_free_port(self.port, |_| self.args())?;
        self.port = port;
        self.child = Some(child);
        Ok(())
    }

    /// Start again on its port.
    fn spawn(&mut self) -> Result<()> {
        self.child = Some(spawn_redis(self.port, &self.args())?);
        Ok(())
    }

    /// Its `redis-server` arguments beyond those every private Redis gets.
    fn args(&self) -> Vec<String> {
        let persistence: &[&str] = if self.durable {
            &["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            &["--appendonly", "no"]
        };
        let mut args: Vec<String> = persistence.iter().map(|a| (*a).to_owned()).collect();
        args.extend(self.extra.iter().cloned());
        args.push("--dir".into());
        args.push(self.dir.display().to_string());
        args
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

    /// Wait (up to `within`) until `n` replicas are in sync with this primary
    /// (`state=online` in `INFO replication`): before that, one cannot confirm a write.
    pub fn wait_replicas_online(&self, n: usize, within: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let info = self
                .cli(&["INFO", "replication"])
                .context("reading the primary's INFO replication")?;
            let online = info.matches("state=online").count();
            if online >= n {
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < within,
                "only {online} of {n} replicas synced with the primary within {within:?}:\n{info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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
        signal(pid, stopped)
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

/// A private Redis Cluster of `N` masters, each with `R` replicas, on free ports, each node
/// keeping nothing on disk. Killed on drop.
///
/// Built by hand rather than with `redis-cli --cluster create` (which wants at least three
/// masters), so the benchmark can compare one master with three: each master takes an equal
/// contiguous range of slots (`CLUSTER ADDSLOTSRANGE`), the first node meets the others,
/// each replica is told whom to follow (`CLUSTER REPLICATE`), and the cluster is ready once
/// every node reports `cluster_state:ok` and every replica is in sync.
///
/// Nodes are numbered masters first: master `m` is node `m`, its replicas are nodes
/// `N + m * R ..`.
pub struct RedisCluster {
    ports: Vec<u16>,
    dir: PathBuf,
    children: Vec<Option<Child>>,
    masters: usize,
    replicas: usize,
}

impl RedisCluster {
    /// Start `masters` nodes and join them into one cluster (no replicas).
    pub fn start(masters: usize) -> Result<RedisCluster> {
        Self::start_with_replicas(masters, 0)
    }

    /// Start `masters` masters with `replicas` replicas each. With replicas, a node is
    /// taken as failed after 1 s without an answer (`cluster-node-timeout`), so a replica
    /// is promoted within seconds of its master's death.
    pub fn start_with_replicas(masters: usize, replicas: usize) -> Result<RedisCluster> {
        if masters == 0 {
            bail!("a cluster needs at least one master");
        }
        let mut cluster = RedisCluster {
            ports: Vec::new(),
            dir: temp_dir("mcpt-redis-cluster")?,
            children: Vec::new(),
            masters,
            replicas,
        };
        let node_timeout = if replicas == 0 { "5000" } else { "1000" };
        for _ in 0..masters * (1 + replicas) {
            let dir = cluster.dir.clone();
            let (port, child) = spawn_on_a_free_port(free_port()?, |port| {
                vec![
                    "--cluster-enabled".into(),
                    "yes".into(),
                    "--cluster-config-file".into(),
                    dir.join(format!("nodes-{port}.conf")).display().to_string(),
                    "--cluster-node-timeout".into(),
                    node_timeout.into(),
                    // A replica that lagged (stopped, in the failover test) may still be
                    // promoted: losing its tail is what the test measures.
                    "--cluster-replica-validity-factor".into(),
                    "0".into(),
                    "--dir".into(),
                    dir.display().to_string(),
                ]
            })?;
            cluster.children.push(Some(child));
            cluster.ports.push(port);
        }
        const SLOTS: usize = 16384;
        for i in 0..masters {
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
        let nodes = cluster.ports.len();
        cluster.wait_until("every node knows every other", |c| {
            (0..nodes).all(|i| {
                c.cli(i, &["CLUSTER", "INFO"])
                    .is_ok_and(|info| info.contains(&format!("cluster_known_nodes:{nodes}\r")))
            })
        })?;
        for m in 0..masters {
            let id = cluster.cli(m, &["CLUSTER", "MYID"])?.trim().to_owned();
            for r in cluster.replicas_of(m) {
                // Knowing a node (cluster_known_nodes) comes before learning its id at the
                // end of the handshake: asked too early, a replica answers "Unknown node".
                cluster.wait_until("each replica follows its master", |c| {
                    c.cli(r, &["CLUSTER", "REPLICATE", &id])
                        .is_ok_and(|out| out.trim().eq_ignore_ascii_case("ok"))
                })?;
            }
        }
        cluster.wait_until("the cluster is ok and every replica in sync", |c| {
            (0..nodes).all(|i| {
                c.cli(i, &["CLUSTER", "INFO"])
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            }) && (0..masters).all(|m| {
                c.cli(m, &["INFO", "replication"])
                    .is_ok_and(|info| info.matches("state=online").count() == replicas)
            })
        })?;
        Ok(cluster)
    }

    fn wait_until(&self, what: &str, done: impl Fn(&RedisCluster) -> bool) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(self) {
            if Instant::now() > deadline {
                bail!("Redis Cluster: not ready within 30 s: {what}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// How many nodes it has, masters and replicas.
    pub fn nodes(&self) -> usize {
        self.ports.len()
    }

    /// The nodes started as replicas of master `m`.
    pub fn replicas_of(&self, m: usize) -> std::ops::Range<usize> {
        let first = self.masters + m * self.replicas;
        first..first + self.replicas
    }

    /// Whether node `i` is a master now (`ROLE`); `false` when it does not answer.
    pub fn is_master(&self, i: usize) -> bool {
        self.cli(i, &["ROLE"])
            .is_ok_and(|role| role.lines().next() == Some("master"))
    }

    /// Kill node `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children.get_mut(i).and_then(Option::take) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stop (`SIGSTOP`) or continue (`SIGCONT`) node `i`, as [`RedisServer::set_stopped`].
    pub fn set_stopped(&self, i: usize, stopped: bool) -> Result<()> {
        let pid = self
            .children
            .get(i)
            .and_then(Option::as_ref)
            .context("the node is not running")?
            .id();
        signal(pid, stopped)
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` for `MCPT_REDIS_URL` (the masters).
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self.ports[..self.masters]
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// `redis://127.0.0.1:PORT` of each master.
    pub fn node_urls(&self) -> Vec<String> {
        self.ports[..self.masters]
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

    /// Keys held by each master (`DBSIZE`), in node order.
    pub fn keys_per_node(&self) -> Result<Vec<u64>> {
        (0..self.masters)
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
        for i in 0..self.children.len() {
            self.kill(i);
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
