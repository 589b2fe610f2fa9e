//! What the bench runs against: [`Stack`] starts the services (Redis or a Redis Cluster, a
//! gateway, a worker) or points at an existing stack; [`Env`] is what every phase shares
//! (HTTP client, store, Redis connection, watched processes) and its readings.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use mcp_tasks_store::Store;
use mcp_tasks_tests::{
    ALICE_TOKEN, Gateway, Process, RedisCluster, RedisServer, TwoTokens, Worker,
};
use redis::aio::MultiplexedConnection;

use crate::args::{Args, parse_url};
use crate::http::Http;
use crate::readings::{Snap, clk_tck, info, info_field, machine_busy, proc_ticks};

/// The queue the demo tools are served from.
pub(crate) const QUEUE: &str = "default";

/// What the bench runs against. Field order is drop order: gateway and worker stop before
/// Redis.
pub(crate) struct Stack {
    pub(crate) gateway: Option<Gateway>,
    /// The workers' processes (the floor's with `--floor`).
    pub(crate) workers: Vec<Process>,
    pub(crate) _replicas: Vec<RedisServer>,
    pub(crate) _redis: Option<RedisServer>,
    pub(crate) _cluster: Option<RedisCluster>,
    /// The tokens file of `--auth tokens*`.
    pub(crate) _tokens: Option<TwoTokens>,
    /// The bearer token the bench sends (`--auth tokens*`).
    pub(crate) token: Option<&'static str>,
    pub(crate) addr: SocketAddr,
    pub(crate) path: String,
    /// `MCPT_REDIS_URL` of the stack (cluster nodes with --redis-cluster).
    pub(crate) redis_url: String,
    /// The one Redis INFO is read from: the Redis, or the cluster's first master.
    pub(crate) info_url: String,
    /// The stack's `MCPT_QUEUE_SHARDS` (1 for one Redis).
    pub(crate) shards: u16,
}

impl Stack {
    pub(crate) async fn start(a: &Args) -> Result<Stack> {
        if let (Some(url), Some(redis_url)) = (&a.url, &a.redis) {
            let (addr, path) = parse_url(url)?;
            return Ok(Stack {
                gateway: None,
                workers: Vec::new(),
                _replicas: Vec::new(),
                _redis: None,
                _cluster: None,
                _tokens: None,
                token: None,
                addr,
                path,
                redis_url: redis_url.clone(),
                info_url: redis_url.clone(),
                shards: 1,
            });
        }
        let (redis, cluster, url, info_url, shards) = match a.redis_cluster {
            Some(n) => {
                let cluster = RedisCluster::start(n).context("starting the Redis Cluster")?;
                let (url, first) = (cluster.url(), cluster.node_urls()[0].clone());
                (None, Some(cluster), url, first, a.queue_shards)
            }
            None => {
                let redis = RedisServer::start().context("starting redis-server")?;
                for (name, value) in &a.redis_config {
                    let said = redis.cli(&["CONFIG", "SET", name, value])?;
                    anyhow::ensure!(
                        said.trim() == "OK",
                        "--redis-config {name}={value}: Redis said {}",
                        said.trim()
                    );
                }
                let url = redis.url();
                (Some(redis), None, url.clone(), url, 1)
            }
        };
        if a.floor {
            return Stack::start_floor(a, redis, url);
        }
        let mut limits_off = vec![
            ("MCPT_LIMIT_TASKS_PER_MINUTE", "0".to_owned()),
            ("MCPT_LIMIT_ACTIVE_TASKS", "0".to_owned()),
            ("MCPT_LIMIT_LISTENERS", "0".to_owned()),
            ("MCPT_QUEUE_SHARDS", shards.to_string()),
        ];
        // --wait-replicas: replicas of the one Redis, synced before the run, and every
        // acknowledged change waiting for them (MCPT_REDIS_WAIT_REPLICAS).
        let mut replicas = Vec::new();
        if let (Some(primary), n @ 1..) = (&redis, a.wait_replicas) {
            for _ in 0..n {
                replicas
                    .push(RedisServer::start_replica_of(primary).context("starting a replica")?);
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while primary
                .cli(&["INFO", "replication"])?
                .matches("state=online")
                .count()
                < n
            {
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "the replicas did not sync within 30 s"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            limits_off.push(("MCPT_REDIS_WAIT_REPLICAS", n.to_string()));
        }
        // --auth: one principal (the bench), quotas at their defaults or off.
        let tokens = match a.auth.as_str() {
            "none" => None,
            mode => {
                let tokens = TwoTokens::new().context("writing the tokens file")?;
                limits_off.extend(tokens.env());
                if mode == "tokens-no-quotas" {
                    limits_off.push(("MCPT_LIMIT_SESSIONS", "0".to_owned()));
                    limits_off.push(("MCPT_LIMIT_STORED_BYTES", "0".to_owned()));
                }
                Some(tokens)
            }
        };
        let mut wenv = vec![
            ("MCPT_TOOLS", "demo".to_owned()),
            ("MCPT_CONCURRENCY", a.worker_concurrency.to_string()),
            ("MCPT_FAIR_SHARE", a.fair_share.clone()),
            ("MCPT_GUEST_SLOTS", a.guest_slots.clone()),
        ];
        wenv.extend(limits_off.iter().cloned());
        let workers = (0..a.workers)
            .map(|_| {
                Worker::start(&url, &wenv)
                    .map(|w| w.process)
                    .context("starting mcp-tasks-worker")
            })
            .collect::<Result<Vec<_>>>()?;
        let gateway = Gateway::start(&url, &limits_off).context("starting mcp-tasks-gateway")?;
        Ok(Stack {
            addr: gateway.addr,
            path: "/mcp".into(),
            gateway: Some(gateway),
            workers,
            _replicas: replicas,
            _redis: redis,
            _cluster: cluster,
            token: tokens.as_ref().map(|_| ALICE_TOKEN),
            _tokens: tokens,
            redis_url: url,
            info_url,
            shards,
        })
    }

    /// `--floor`: the floor's gateway and `--workers` floor workers on `redis`.
    fn start_floor(a: &Args, redis: Option<RedisServer>, url: String) -> Result<Stack> {
        let env = |role: &str| {
            vec![
                ("MCPT_FLOOR_ROLE", role.to_owned()),
                ("MCPT_REDIS_URL", url.clone()),
                ("MCPT_LISTEN_ADDR", "127.0.0.1:0".to_owned()),
            ]
        };
        let workers = (0..a.workers)
            .map(|_| {
                let (mut p, _) = Process::spawn("floor", &env("worker"))?;
                p.wait_line("ready")?;
                Ok(p)
            })
            .collect::<Result<Vec<_>>>()
            .context("starting a floor worker")?;
        let (mut process, _) = Process::spawn("floor", &env("gateway"))?;
        let addr = process
            .wait_line("listening on http://")
            .context("starting the floor gateway")?
            .parse()?;
        Ok(Stack {
            addr,
            path: "/mcp".into(),
            gateway: Some(Gateway { process, addr }),
            workers,
            _replicas: Vec::new(),
            _redis: redis,
            _cluster: None,
            _tokens: None,
            token: None,
            redis_url: url.clone(),
            info_url: url,
            shards: 1,
        })
    }

    pub(crate) fn own(&self) -> bool {
        self.gateway.is_some()
    }
}

/// Everything the phases share.
pub(crate) struct Env {
    pub(crate) http: Http,
    pub(crate) store: Store,
    pub(crate) red: MultiplexedConnection,
    /// Watched processes: (name, pid). Always "bench"; gateway, worker, redis for an own stack.
    pub(crate) pids: Vec<(&'static str, u32)>,
    pub(crate) clk: f64,
    pub(crate) warm: Duration,
    pub(crate) dur: Duration,
    pub(crate) own: bool,
    /// `--floor`: the floor's processes, which serve only the create, get and poll phases.
    pub(crate) floor: bool,
}

impl Env {
    /// Connect to the stack's Redis and store, and note the processes to watch (the
    /// bench itself always; the gateway, worker and Redis of an own stack). Also returns the
    /// gateway's pid (own stack) and the Redis version.
    pub(crate) async fn connect(
        stack: &mut Stack,
        args: &Args,
    ) -> Result<(Env, Option<u32>, String)> {
        let http = Http::new(stack.addr, &stack.path, stack.token)?;
        let client = redis::Client::open(stack.info_url.as_str())?;
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(Duration::from_secs(10)))
            .set_connection_timeout(Some(Duration::from_secs(5)));
        let mut red = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .with_context(|| format!("connecting to {}", stack.info_url))?;
        let server_info = info(&mut red, "server").await?;
        let redis_pid: Option<u32> =
            info_field(&server_info, "process_id").and_then(|p| p.parse().ok());
        let redis_version = info_field(&server_info, "redis_version")
            .unwrap_or("?")
            .to_owned();
        let store = Store::connect_sharded(&stack.redis_url, stack.shards)
            .await
            .context("connecting the store")?;
        let mut pids: Vec<(&'static str, u32)> = Vec::new();
        let mut gw_pid = None;
        if stack.own() {
            if let Some(g) = stack.gateway.as_mut() {
                let p = g.process.child().id();
                gw_pid = Some(p);
                pids.push(("gateway", p));
            }
            let several = stack.workers.len() > 1;
            for (i, w) in stack.workers.iter_mut().enumerate() {
                // A column name per worker, for the life of the bench.
                let name: &'static str = if several {
                    Box::leak(format!("worker{}", i + 1).into_boxed_str())
                } else {
                    "worker"
                };
                pids.push((name, w.child().id()));
            }
            if let Some(p) = redis_pid {
                pids.push(("redis", p));
            }
        }
        pids.push(("bench", std::process::id()));
        let env = Env {
            http,
            store,
            red,
            pids,
            clk: clk_tck(),
            warm: (args.duration / 5).min(Duration::from_secs(1)),
            dur: args.duration,
            own: stack.own(),
            floor: args.floor,
        };
        Ok((env, gw_pid, redis_version))
    }

    pub(crate) async fn snap(&self) -> Result<Snap> {
        let mut con = self.red.clone();
        let stats = info(&mut con, "commandstats").await?;
        let cpu = info(&mut con, "cpu").await?;
        let mem = info(&mut con, "memory").await?;
        let (ticks, sys_ticks) = self
            .pids
            .iter()
            .map(|(_, p)| proc_ticks(*p).unwrap_or((0, 0)))
            .unzip();
        let mut cmds = BTreeMap::new();
        for line in stats.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            if name == "info" {
                continue;
            }
            let field = |k: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            cmds.insert(name.to_owned(), (field("calls"), field("usec")));
        }
        let num = |t: &str, k: &str| {
            info_field(t, k)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok(Snap {
            at: Instant::now(),
            cmds,
            redis_cpu: num(&cpu, "used_cpu_user") + num(&cpu, "used_cpu_sys"),
            used_memory: num(&mem, "used_memory") as i64,
            ticks,
            sys_ticks,
            machine: machine_busy(),
        })
    }

    /// `MEMORY STATS` dataset.bytes (memory of the data without Redis' own overheads, e.g.
    /// the key tables that grow in power-of-two steps) and the number of keys of db 0.
    pub(crate) async fn dataset(&self) -> Result<(i64, i64)> {
        let mut con = self.red.clone();
        let v: redis::Value = redis::cmd("MEMORY")
            .arg("STATS")
            .query_async(&mut con)
            .await
            .context("MEMORY STATS")?;
        let pairs: Vec<(redis::Value, redis::Value)> = match v {
            redis::Value::Array(items) => {
                let mut it = items.into_iter();
                std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
            }
            redis::Value::Map(m) => m,
            other => bail!("MEMORY STATS answered {other:?}"),
        };
        let dataset = pairs
            .into_iter()
            .find_map(|(k, v)| {
                let k: String = redis::from_redis_value(k).ok()?;
                if k != "dataset.bytes" {
                    return None;
                }
                redis::from_redis_value::<i64>(v).ok()
            })
            .ok_or_else(|| anyhow!("MEMORY STATS has no dataset.bytes"))?;
        let keyspace = info(&mut con, "keyspace").await?;
        let keys = info_field(&keyspace, "db0")
            .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("keys=")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Ok((dataset, keys))
    }

    /// CPU use between two readings, % of one core: each watched process, and Redis by
    /// INFO cpu when its process is not watched.
    pub(crate) fn cpu_pct(&self, a: &Snap, b: &Snap) -> Vec<(&'static str, f64)> {
        let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        let mut out = self.pct_per_pid(&a.ticks, &b.ticks, secs);
        if !self.pids.iter().any(|(n, _)| *n == "redis") {
            out.push(("redis", (b.redis_cpu - a.redis_cpu) / secs * 100.0));
        }
        // Everything else the machine did meanwhile: other processes, interrupts.
        let ours: f64 = out.iter().map(|(_, v)| v).sum();
        let busy = b.machine.saturating_sub(a.machine) as f64 / self.clk / secs * 100.0;
        out.push(("rest", (busy - ours).max(0.0)));
        out
    }

    /// System time between two readings, % of one core, of each watched process: the
    /// kernel working for it (system calls, the loopback network, scheduling).
    pub(crate) fn sys_pct(&self, a: &Snap, b: &Snap) -> Vec<(&'static str, f64)> {
        let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        self.pct_per_pid(&a.sys_ticks, &b.sys_ticks, secs)
    }

    /// Each watched process's ticks from `a` to `b` over `secs`, % of one core.
    fn pct_per_pid(&self, a: &[u64], b: &[u64], secs: f64) -> Vec<(&'static str, f64)> {
        self.pids
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let d = b[i].saturating_sub(a[i]) as f64 / self.clk;
                (*name, d / secs * 100.0)
            })
            .collect()
    }

    /// Wait until the job queue is empty (nothing queued, nothing pending).
    pub(crate) async fn drain(&self, label: &str) -> Result<()> {
        let t0 = Instant::now();
        let mut first = None;
        loop {
            let d = self
                .store
                .fleet()
                .queue_depth(QUEUE)
                .await
                .context("reading the queue depth")?;
            first.get_or_insert(d.length);
            if d.length == 0 && d.pending == 0 {
                break;
            }
            if t0.elapsed() > Duration::from_secs(180) {
                bail!(
                    "{label}: the queue did not drain within 180 s (length {}, pending {})",
                    d.length,
                    d.pending
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The last jobs' finish scripts and unsubscriptions.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if t0.elapsed() > Duration::from_millis(500) {
            eprintln!(
                "[drain after {label}] {:.1} s for {} queued jobs",
                t0.elapsed().as_secs_f64(),
                first.unwrap_or(0)
            );
        }
        Ok(())
    }
}
