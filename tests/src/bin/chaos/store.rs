//! The Redis of the run ([`Store`]): one durable redis-server that the chaos restarts, or,
//! with `--failover`, a primary with two replicas under three sentinels, whose primary the
//! chaos kills so that the sentinels promote a replica.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use mcp_tasks_tests::sentinel::MASTER_NAME;
use mcp_tasks_tests::{RedisServer, Sentinels};

/// Replicas of the primary with `--failover`. Two, not one: acknowledged writes wait for one
/// replica (`MCPT_REDIS_WAIT_REPLICAS=1`), and the promoted replica still has one to confirm.
const REPLICAS: usize = 2;
/// Sentinels with `--failover`: a majority of them (2) agrees on the failover.
const SENTINELS: usize = 3;
/// `MCPT_REDIS_WAIT_REPLICAS` and `MCPT_REDIS_WAIT_TIMEOUT` with `--failover`.
const WAIT_REPLICAS: &str = "1";
const WAIT_TIMEOUT: &str = "1s";
/// How long the sentinels may take to promote a replica once the primary is dead.
const FAILOVER_WITHIN: Duration = Duration::from_secs(30);

pub(crate) enum Store {
    /// One redis-server with AOF (fsync always), restarted from it.
    Durable(RedisServer),
    /// A primary and its replicas (`nodes`; the killed primary stays among them, dead, so
    /// its directory lives until the end) watched by `sentinels`.
    Replicated {
        nodes: Vec<RedisServer>,
        sentinels: Sentinels,
    },
}

impl Store {
    /// Start the durable Redis, or with `failover` the primary, its replicas and the
    /// sentinels, returning once the replicas are in sync and the sentinels ready to fail
    /// over (a primary killed before would leave nothing to promote).
    pub(crate) fn start(failover: bool) -> Result<Store> {
        if !failover {
            return Ok(Store::Durable(RedisServer::start_durable()?));
        }
        // The primary keeps nothing on disk: what survives its death is what it replicated.
        let (primary, replicas, sentinels) =
            mcp_tasks_tests::sentinel::start_replicated(REPLICAS, SENTINELS)?;
        steady(&sentinels)?;
        let mut nodes = vec![primary];
        nodes.extend(replicas);
        Ok(Store::Replicated { nodes, sentinels })
    }

    /// The `MCPT_REDIS_URL` of the gateways and workers: the Redis itself, or the sentinels,
    /// which name the primary of the moment.
    pub(crate) fn service_url(&self) -> String {
        match self {
            Store::Durable(redis) => redis.url(),
            Store::Replicated { sentinels, .. } => sentinels.url(),
        }
    }

    /// More environment for the gateways and workers: with replicas, a change is
    /// acknowledged only once a replica has it, so a failover loses no acknowledged task.
    pub(crate) fn service_env(&self) -> Vec<(&'static str, String)> {
        match self {
            Store::Durable(_) => Vec::new(),
            Store::Replicated { .. } => vec![
                ("MCPT_REDIS_WAIT_REPLICAS", WAIT_REPLICAS.into()),
                ("MCPT_REDIS_WAIT_TIMEOUT", WAIT_TIMEOUT.into()),
            ],
        }
    }

    /// `redis://…` of the primary now, for the reads the chaos command makes itself.
    /// Blocking (asks a sentinel with redis-cli).
    pub(crate) fn primary_url(&self) -> Result<String> {
        Ok(format!("redis://127.0.0.1:{}", self.primary_port()?))
    }

    /// The primary's port: the durable Redis's, or the one the sentinels name now.
    fn primary_port(&self) -> Result<u16> {
        match self {
            Store::Durable(redis) => Ok(redis.port()),
            Store::Replicated { sentinels, .. } => sentinels
                .primary_port()
                .context("asking the sentinels for the primary"),
        }
    }

    /// One line on what runs, for the start of the run.
    pub(crate) fn describe(&self) -> String {
        match self {
            Store::Durable(redis) => format!("redis {} (AOF, fsync always)", redis.url()),
            Store::Replicated { nodes, sentinels } => format!(
                "redis primary port {} with replicas on ports {} (nothing on disk; WAIT {WAIT_REPLICAS} replica, {WAIT_TIMEOUT}), sentinels {}",
                nodes[0].port(),
                nodes[1..]
                    .iter()
                    .map(|n| n.port().to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
                sentinels.url()
            ),
        }
    }

    /// The Redis chaos (blocking): restart the durable Redis (SIGKILL, reload from the AOF),
    /// or SIGKILL the primary and wait until the sentinels promote a replica. Returns what
    /// happened for the log.
    pub(crate) fn disrupt(&mut self) -> Result<String> {
        match self {
            Store::Durable(redis) => {
                let t = Instant::now();
                redis.restart()?;
                Ok(format!(
                    "restarted redis (SIGKILL, AOF reload) in {} ms",
                    t.elapsed().as_millis()
                ))
            }
            Store::Replicated { nodes, sentinels } => {
                let old = sentinels
                    .primary_port()
                    .context("asking the sentinels for the primary to kill")?;
                nodes
                    .iter_mut()
                    .find(|n| n.port() == old)
                    .with_context(|| format!("the sentinels name port {old}, none of the fleet's"))?
                    .kill();
                let t = Instant::now();
                let new = loop {
                    // A sentinel may not answer while it votes: asked again, as any failure.
                    match sentinels.primary_port() {
                        Ok(port) if port != old => break port,
                        _ if t.elapsed() > FAILOVER_WITHIN => bail!(
                            "the sentinels promoted no replica within {FAILOVER_WITHIN:?} of killing the primary on port {old}; what they see:\n{}",
                            sentinel_views(sentinels)
                        ),
                        _ => std::thread::sleep(Duration::from_millis(50)),
                    }
                };
                Ok(format!(
                    "killed the redis primary (port {old}); sentinels promoted port {new} in {} ms",
                    t.elapsed().as_millis()
                ))
            }
        }
    }

    /// How Redis stands now, for the report (blocking): nothing for the durable Redis; with
    /// replicas, each node's role and each sentinel's view (a `config-epoch` above 1 means
    /// the sentinels needed more than one failover, e.g. two replicas were promoted in turn).
    pub(crate) fn topology(&self) -> Option<String> {
        let Store::Replicated { nodes, sentinels } = self else {
            return None;
        };
        let roles = nodes.iter().map(|n| {
            let info = n.cli(&["INFO", "replication"]).unwrap_or_default();
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
            };
            let role = match (field("role"), field("master_port")) {
                (None, _) => "down".to_owned(),
                (Some("slave"), Some(port)) => format!(
                    "replica of port {port} (link {})",
                    field("master_link_status").unwrap_or("?")
                ),
                (Some(role), _) => format!(
                    "{role} with {} replicas",
                    field("connected_slaves").unwrap_or("?")
                ),
            };
            format!("  node port {}: {role}", n.port())
        });
        Some(
            roles
                .chain(std::iter::once(sentinel_views(sentinels)))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }
}

/// Make the sentinels fail over once, and in bounded time, on a busy machine. A sentinel
/// rewrites and fsyncs its config file when it votes and when it switches to the promoted
/// replica; while a build writes gigabytes that fsync can take seconds (measured: up to
/// 2.2 s). With the harness's 1 s down-after, a sentinel stalled so right after the switch
/// takes the new primary as down, and the sentinels promote the other replica too: what the
/// first promoted primary took without a replica's confirmation (a finish) is dropped and
/// the task runs and ends again (seen: `+switch-master` to one replica, `+sdown` of it 1 s
/// later, epoch 2 promoting the other). So down-after 3 s. A stall over 2 s puts a sentinel
/// in tilt mode, passive for 30 s, which outlasts [`FAILOVER_WITHIN`]: 5 s instead, still
/// longer than down-after so that it ends on fresh link states (`SENTINEL DEBUG`, Redis 7;
/// older sentinels keep 30 s).
fn steady(sentinels: &Sentinels) -> Result<()> {
    for i in 0..SENTINELS {
        let set = sentinels.cli(
            i,
            &[
                "SENTINEL",
                "SET",
                MASTER_NAME,
                "down-after-milliseconds",
                "3000",
            ],
        )?;
        ensure!(
            set.trim() == "OK",
            "sentinel {i}: SENTINEL SET down-after-milliseconds answered {set:?}"
        );
        sentinels.cli(i, &["SENTINEL", "DEBUG", "tilt-period", "5000"])?;
    }
    Ok(())
}

/// Each sentinel's view of the primary and its replicas, one line each: why no failover
/// happened (tilt mode, not enough votes, no replica good enough to promote), or how many.
fn sentinel_views(sentinels: &Sentinels) -> String {
    /// `SENTINEL MASTER`/`REPLICAS` answer field and value on alternate lines; these say
    /// what a failover needs.
    const FIELDS: [&str; 9] = [
        "port",
        "flags",
        "config-epoch",
        "failover-state",
        "num-other-sentinels",
        "master-link-status",
        "master-link-down-time",
        "info-refresh",
        "slave-priority",
    ];
    let pairs = |out: String| -> String {
        let lines: Vec<&str> = out.lines().collect();
        lines
            .chunks(2)
            .filter(|kv| kv.len() == 2 && FIELDS.contains(&kv[0]))
            .map(|kv| format!("{}={}", kv[0], kv[1]))
            .collect::<Vec<_>>()
            .join(" ")
    };
    (0..SENTINELS)
        .map(|i| {
            let ask = |args: &[&str]| {
                sentinels
                    .cli(i, args)
                    .unwrap_or_else(|e| format!("(redis-cli failed: {e:#})"))
            };
            let tilt: Vec<String> = ask(&["INFO", "sentinel"])
                .lines()
                .filter(|l| l.starts_with("sentinel_tilt"))
                .map(str::to_owned)
                .collect();
            format!(
                "  sentinel {i}: {}; primary: {}; replicas: {}",
                tilt.join(" "),
                pairs(ask(&["SENTINEL", "MASTER", MASTER_NAME])),
                pairs(ask(&["SENTINEL", "REPLICAS", MASTER_NAME]))
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
