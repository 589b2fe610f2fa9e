//! Private Redis Sentinels for failover tests: [`Sentinels`] starts N `redis-server
//! --sentinel` processes on free ports monitoring one primary under the name
//! [`MASTER_NAME`], with short timeouts so a failover takes seconds.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::{RedisServer, free_port, temp_dir};

/// The name the sentinels monitor the primary under.
pub const MASTER_NAME: &str = "mcpt-primary";

/// A primary keeping nothing on disk, `replicas` replicas of it and `n` sentinels, returned
/// once the replicas are in sync and the sentinels know them and each other: a primary
/// killed before would leave nothing to promote.
pub fn start_replicated(
    replicas: usize,
    n: usize,
) -> Result<(RedisServer, Vec<RedisServer>, Sentinels)> {
    let within = Duration::from_secs(30);
    let primary = RedisServer::start()?;
    let copies = (0..replicas)
        .map(|_| RedisServer::start_replica_of(&primary).context("starting a replica"))
        .collect::<Result<Vec<_>>>()?;
    let sentinels = Sentinels::start(&primary, n).context("starting the sentinels")?;
    sentinels.wait_ready(replicas, within)?;
    primary.wait_replicas_online(replicas, within)?;
    Ok((primary, copies, sentinels))
}

/// Sentinels watching one primary. Killed on drop.
pub struct Sentinels {
    ports: Vec<u16>,
    children: Vec<Child>,
    dir: PathBuf,
}

impl Sentinels {
    /// Start `n` sentinels (quorum: a majority) monitoring `primary`: the primary is taken
    /// as down after 1 s without an answer, a failover may take 3 s.
    pub fn start(primary: &RedisServer, n: usize) -> Result<Sentinels> {
        // A sentinel fsyncs its config file at each vote and switch: on a disk busy with
        // builds and AOF fsyncs that can stall past 2 s, which puts it in tilt mode (no
        // failover for 30 s). Memory-backed where the machine has it.
        let dir = match memory_dir("mcpt-sentinel") {
            Some(dir) => dir,
            None => temp_dir("mcpt-sentinel")?,
        };
        let mut sentinels = Sentinels {
            ports: Vec::new(),
            children: Vec::new(),
            dir,
        };
        let quorum = n / 2 + 1;
        for i in 0..n {
            let port = free_port()?;
            let conf = sentinels.dir.join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} {quorum}\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 3000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    dir = sentinels.dir.display(),
                    primary = primary.port(),
                ),
            )?;
            let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
            let child = Command::new(&bin)
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot start {bin} --sentinel"))?;
            sentinels.children.push(child);
            sentinels.ports.push(port);
        }
        for port in &sentinels.ports {
            wait_listening(*port)?;
        }
        Ok(sentinels)
    }

    /// `redis+sentinel://127.0.0.1:P1,…/MASTER_NAME`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// `redis-cli` against sentinel `i`.
    pub fn cli(&self, i: usize, args: &[&str]) -> Result<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.ports[i].to_string()])
            .args(args)
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Wait (up to `within`) until every sentinel knows `replicas` replicas and all the
    /// other sentinels: only then can they agree on a failover.
    pub fn wait_ready(&self, replicas: usize, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let ready = (0..self.ports.len()).all(|i| {
                let count = |what: &str| {
                    self.cli(i, &["SENTINEL", what, MASTER_NAME])
                        .map(|out| out.lines().filter(|l| *l == "name").count())
                        .unwrap_or(0)
                };
                count("replicas") == replicas && count("sentinels") == self.ports.len() - 1
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the sentinels did not find the replica and each other within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The port the sentinels name as primary now (sentinel 0's view).
    pub fn primary_port(&self) -> Result<u16> {
        let out = self.cli(0, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME])?;
        out.lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .with_context(|| format!("no primary address in {out:?}"))
    }
}

/// A fresh folder under `/dev/shm` (tmpfs), when there is one.
fn memory_dir(prefix: &str) -> Option<PathBuf> {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::path::Path::new("/dev/shm").join(format!("{prefix}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

fn wait_listening(port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("sentinel did not listen on {port} within 10 s")
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
