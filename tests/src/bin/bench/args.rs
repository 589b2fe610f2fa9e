//! The bench command line: its options (clap derive), the texts of `--help`, and the
//! checks that span several options.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use clap::{ArgAction, Parser};
use mcp_tasks_tests::cli;

const ABOUT: &str = "\
bench: throughput, latency and per-task costs of mcp-tasks on this machine. It prints
figures and asserts nothing.";

const AFTER_HELP: &str = "\
HOW TO RUN
  cargo build --release --workspace       # the gateway and worker binaries it starts
  cargo run --release -p mcp-tasks-tests --bin bench -- [OPTIONS]

  By default it starts its own stack from the binaries beside the bench executable (or
  MCPT_BIN_DIR): a private redis-server (REDIS_SERVER_BIN), one gateway and one worker
  (MCPT_TOOLS=demo, MCPT_CONCURRENCY=--worker-concurrency, limits off; --workers N for more). RUST_LOG and
  MCPT_ACCESS_LOG are passed on to them (the access log, a line per request, created task
  and finished job, is off unless MCPT_ACCESS_LOG=on). Everything shares this
  machine's cores with the bench process itself; the CPU table shows who used what.
  DUR is like 500ms, 2s, 1m.

WHAT IT MEASURES
  Per concurrency C in --clients: C client tasks sharing one keep-alive HTTP/1.1 pool.
  Each phase runs a warm-up (a fifth of --duration, at most 1 s) and then --duration;
  operations completing inside the measured window count. The job queue is drained
  between phases.
    create      tools/call sleep {\"ms\":0} declaring the tasks extension: calls/s, p50/p99
                of the HTTP request
    get         tasks/get of one completed task: gets/s, p50/p99
    e2e poll    create, then tasks/get back to back (no sleep) until completed: tasks/s,
                p50/p99 of create -> completed observed, gets per task
    e2e listen  create, then subscriptions/listen on that id, read until the terminal
                notifications/tasks: tasks/s, p50/p99 (the task is mostly complete before
                the stream opens: its terminal state then comes in the listen's snapshot;
                counted)
    push        the same with sleep {\"ms\":M}, M = 2 x the e2e listen p99 (at least 20),
                so the terminal state is pushed on the open stream: notify = receive time (this machine's clock) minus the
                notification's lastUpdatedAt (Redis' clock, whole ms, so up to 1 ms too
                high: 1 ms resolution), over pushed terminal notifications
  Once:
    per task    --tasks N lifecycles over 16 clients: create, wait 20 ms, one tasks/get
                (again every 10 ms while not completed; the extra gets are counted).
                Redis commands (INFO commandstats deltas; commands run inside Lua scripts
                count as well; INFO itself is left out), Redis command time (usec),
                Redis CPU (INFO cpu), gateway/worker/redis CPU (/proc/PID/stat), Redis
                used_memory growth (the tasks keep their TTL), each divided by N. Then N
                tasks/get alone: commands per get. An idle window of 2 s before gives the
                background command rate (heartbeats, blocked reads), included above.
    listeners   --listeners L idle subscriptions/listen streams ({\"notifications\":{}}),
                opened 200 at a time, each acknowledged before measuring: gateway VmRSS
                growth per stream (needs L + 256 open files for the bench and the gateway).
                With --listen-tasks K, K live tasks (sleep for an hour, cancelled after)
                are created first and every stream names all K: growth per stream and per
                watched task
    limit       the same Redis command mix without HTTP, gateway or worker: --limit-loops
                K loops in this process on mcp_tasks_store::Store (create_task,
                JobReader::read (XREADGROUP), finish(Completed), view_task (what
                tasks/get reads); like the worker, no start for a run under 20 ms:
                finish with fence 0) on a queue no
                worker serves, for --duration: lifecycles/s, and the best e2e rates as a
                share of it. The per-command breakdowns of this run and of the
                per-task run show where the mixes differ. Then
                redis-benchmark SET/GET (-c 50 -P 16) for raw Redis ops/s (own stack only).

OUTPUT
  Progress on stderr; the tables on stdout; DIR/bench.json (every figure, nproc, git
  commit, command line) and DIR/bench.png (throughput and p99 latency against clients;
  font from BENCH_FONT, default /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf; a failed
  PNG is reported and does not fail the run). Exit 0; 1 when a phase failed (the processes
  it started are stopped); 64 for bad options.

THE FLOOR
  --floor measures, in place of the gateway and workers, close to the least this design's
  stack can spend on a task (a lower bound; see the `floor` binary): compare its CPU per
  task with the real one's, in the same run, to see how much of it is hyper, tokio,
  redis-rs, Redis and the kernel themselves.

SMALL RUN (CI)
  bench --clients 1,4 --duration 1s --tasks 200 --listeners 200
";

/// The options. Defaults, names and meanings are those of docs/performance.md, `### bench`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bench",
    about = ABOUT,
    after_help = AFTER_HELP,
    args_override_self = true
)]
pub(crate) struct Args {
    /// concurrencies, comma-separated
    #[arg(long, value_name = "LIST", default_value = "1,16,64", value_parser = client_list)]
    pub(crate) clients: ClientList,
    /// measured time per phase and concurrency
    #[arg(long, value_name = "DUR", default_value = "5s",
          value_parser = cli::duration_at_least(Duration::from_millis(100)))]
    pub(crate) duration: Duration,
    /// lifecycles for the per-task costs (0 skips)
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub(crate) tasks: usize,
    /// idle listen streams (0 skips)
    #[arg(long, value_name = "L", default_value_t = 10_000)]
    pub(crate) listeners: usize,
    /// live tasks each idle listen stream names (0: none, {"notifications":{}})
    #[arg(long, value_name = "K", default_value_t = 0, value_parser = cli::between(0usize, 100_000))]
    pub(crate) listen_tasks: usize,
    /// authentication of the stack it starts: none; tokens (one principal, the
    /// per-principal quotas MCPT_LIMIT_SESSIONS and MCPT_LIMIT_STORED_BYTES at
    /// their defaults); tokens-no-quotas (the same with both at 0, off).
    /// Compare the last two for what the quotas cost. Not with --url
    #[arg(long, value_name = "MODE", default_value = "none", verbatim_doc_comment,
          value_parser = ["none", "tokens", "tokens-no-quotas"])]
    pub(crate) auth: String,
    /// concurrent loops of the Redis limit run (0 skips)
    #[arg(long, value_name = "K", default_value_t = 64)]
    pub(crate) limit_loops: usize,
    /// Store connections the loops share
    #[arg(long, value_name = "N", default_value = "4", value_parser = cli::at_least(1usize))]
    pub(crate) limit_conns: usize,
    /// call Jobs::start before finish in the limit run
    #[arg(long, value_name = "yes|no", default_value = "no", value_parser = yes_no,
          action = ArgAction::Set)]
    pub(crate) limit_start: bool,
    /// MCPT_CONCURRENCY of each worker it starts
    #[arg(long, value_name = "N", default_value = "64", value_parser = cli::at_least(1usize))]
    pub(crate) worker_concurrency: usize,
    /// workers it starts (each gets a CPU column of its own)
    #[arg(long, value_name = "N", default_value = "1", value_parser = cli::between(1usize, 16))]
    pub(crate) workers: usize,
    /// MCPT_FAIR_SHARE of the worker it starts (1: off); the bench is one
    /// principal, so this measures what the fair share costs a principal alone
    #[arg(long, value_name = "S", default_value = "0.5", verbatim_doc_comment)]
    pub(crate) fair_share: String,
    /// MCPT_GUEST_SLOTS of each worker it starts (0: off); with one principal no job
    /// takes one, so this measures what the guest loop costs a principal alone
    #[arg(long, value_name = "N", default_value = "1", verbatim_doc_comment)]
    pub(crate) guest_slots: String,
    /// requests per redis-benchmark test (0 skips)
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    pub(crate) redis_benchmark: u64,
    /// where bench.json and bench.png go [default: target/bench]
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// drive an existing stack instead (http://HOST:PORT/mcp; with --redis,
    /// the Redis it uses); server CPU is then read for Redis only (INFO cpu),
    /// the listener RSS is not measured, the queue is 'default'
    #[arg(long, value_name = "URL", value_parser = url, verbatim_doc_comment)]
    pub(crate) url: Option<String>,
    /// the Redis of the stack --url drives (redis://...)
    #[arg(long, value_name = "URL", value_parser = redis_url)]
    pub(crate) redis: Option<String>,
    /// start a Redis Cluster of N masters (no replicas) instead of one
    /// redis-server, and run the gateway and worker in cluster mode
    /// (MCPT_REDIS_URL=redis+cluster://...). Redis-side figures (INFO:
    /// commands, Redis CPU and memory) are then of the first master
    /// only, and the per-task costs, the Redis limit and
    /// redis-benchmark are skipped; the throughput phases are the same.
    /// Compare runs with N=1 and N=3 for scaling.
    #[arg(long, value_name = "N", value_parser = cli::between(1usize, 16), verbatim_doc_comment)]
    pub(crate) redis_cluster: Option<usize>,
    /// start N replicas of the Redis and run with MCPT_REDIS_WAIT_REPLICAS=N
    /// (every acknowledged change waits for them); compare with 0 for what
    /// WAIT costs per task. Not with --redis-cluster or --url
    #[arg(long, value_name = "N", default_value_t = 0, verbatim_doc_comment,
          value_parser = cli::between(0usize, 4))]
    pub(crate) wait_replicas: usize,
    /// MCPT_QUEUE_SHARDS with --redis-cluster
    #[arg(long, value_name = "S", default_value = "16", value_parser = cli::between(1u16, 1024))]
    pub(crate) queue_shards: u16,
    /// CONFIG SET NAME VALUE on the bench's own Redis before the run (repeat
    /// for more), e.g. hash-max-listpack-value=1024 to compare a setting
    /// against Redis' defaults. Not with --url or --redis-cluster
    #[arg(long, value_name = "NAME=VALUE", value_parser = config_pair, verbatim_doc_comment)]
    pub(crate) redis_config: Vec<(String, String)>,
    /// run the floor of this design's stack instead of the gateway and
    /// workers: the `floor` binary, hyper, redis-rs and Redis doing close to
    /// the least a task needs (one Redis round trip per HTTP request, one pipeline per
    /// worker read; no checks, scripts or notifications), measured by the
    /// same load and readings. Only the create, get and e2e poll phases run.
    /// Not with --url, --redis-cluster, --wait-replicas or --auth
    #[arg(long, verbatim_doc_comment)]
    pub(crate) floor: bool,
}

fn config_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!(
            "takes NAME=VALUE (a Redis setting and its value); got {s:?}"
        )),
    }
}

/// The concurrencies of `--clients`, in the order given.
#[derive(Debug, Clone)]
pub(crate) struct ClientList(pub(crate) Vec<usize>);

fn client_list(s: &str) -> Result<ClientList, String> {
    s.split(',')
        .map(|c| match c.trim().parse::<usize>() {
            Ok(n) if (1..=10_000).contains(&n) => Ok(n),
            _ => Err(format!(
                "takes numbers from 1 to 10000, comma-separated; got {c:?}"
            )),
        })
        .collect::<Result<_, _>>()
        .map(ClientList)
}

fn yes_no(s: &str) -> Result<bool, String> {
    match s {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("takes yes or no".into()),
    }
}

fn url(s: &str) -> Result<String, String> {
    parse_url(s).map_err(|e| format!("{e:#}"))?;
    Ok(s.to_owned())
}

fn redis_url(s: &str) -> Result<String, String> {
    if !s.starts_with("redis://") {
        return Err("takes a redis:// URL".into());
    }
    Ok(s.to_owned())
}

impl Args {
    /// The command line, or the exit status when it was `--help` or bad.
    pub(crate) fn parse() -> Result<Args, std::process::ExitCode> {
        cli::parse("bench", Args::check)
    }

    fn check(&self) -> Result<(), String> {
        if self.url.is_some() != self.redis.is_some() {
            return Err("--url and --redis go together (the Redis of that stack)".into());
        }
        if self.url.is_some() && self.redis_cluster.is_some() {
            return Err("--redis-cluster starts its own stack; it does not go with --url".into());
        }
        if self.auth != "none" && self.url.is_some() {
            return Err("--auth configures the bench's own stack; not with --url".into());
        }
        if !self.redis_config.is_empty() && (self.url.is_some() || self.redis_cluster.is_some()) {
            return Err(
                "--redis-config sets the bench's own Redis; not with --url or --redis-cluster"
                    .into(),
            );
        }
        if self.wait_replicas > 0 && (self.url.is_some() || self.redis_cluster.is_some()) {
            return Err(
                "--wait-replicas starts replicas of the bench's own Redis; not with --url or --redis-cluster"
                    .into(),
            );
        }
        if self.floor
            && (self.url.is_some()
                || self.redis_cluster.is_some()
                || self.wait_replicas > 0
                || self.auth != "none")
        {
            return Err(
                "--floor runs the floor on the bench's own Redis; not with --url, --redis-cluster, --wait-replicas or --auth"
                    .into(),
            );
        }
        Ok(())
    }
}

/// `http://HOST:PORT/PATH` → address and path.
pub(crate) fn parse_url(url: &str) -> Result<(SocketAddr, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("--url must start with http:// (got {url:?})"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, "/mcp".to_owned()),
    };
    let addr = hostport
        .to_socket_addrs()
        .with_context(|| format!("--url: cannot resolve {hostport:?} (HOST:PORT)"))?
        .next()
        .ok_or_else(|| anyhow!("--url: {hostport:?} resolves to nothing"))?;
    Ok((addr, path))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::Args;

    fn args(words: &[&str]) -> Result<Args, String> {
        let a = Args::try_parse_from(std::iter::once("bench").chain(words.iter().copied()))
            .map_err(|e| e.to_string())?;
        a.check()?;
        Ok(a)
    }

    #[test]
    fn redis_config_takes_name_value_pairs_for_the_bench_s_own_redis() {
        let a = args(&[
            "--redis-config",
            "hash-max-listpack-value=1024",
            "--redis-config",
            "hz=50",
        ])
        .map(|a| a.redis_config);
        assert_eq!(
            a,
            Ok(vec![
                ("hash-max-listpack-value".into(), "1024".into()),
                ("hz".into(), "50".into())
            ])
        );
        let e = args(&["--redis-config", "hz"]).unwrap_err();
        assert!(e.contains("takes NAME=VALUE"), "{e}");
        let e = args(&["--redis-config", "hz=50", "--redis-cluster", "3"]).unwrap_err();
        assert!(e.contains("not with --url or --redis-cluster"), "{e}");
    }

    #[test]
    fn floor_is_for_the_bench_s_own_stack_only() {
        assert_eq!(args(&["--floor"]).map(|a| a.floor), Ok(true));
        assert_eq!(args(&[]).map(|a| a.floor), Ok(false));
        for other in [
            &["--auth", "tokens"][..],
            &["--wait-replicas", "1"],
            &["--redis-cluster", "3"],
            &[
                "--url",
                "http://127.0.0.1:1/mcp",
                "--redis",
                "redis://127.0.0.1:1",
            ],
        ] {
            let words: Vec<&str> = std::iter::once("--floor")
                .chain(other.iter().copied())
                .collect();
            let e = args(&words).unwrap_err();
            assert!(e.contains("--floor runs the floor"), "{other:?}: {e}");
        }
    }

    #[test]
    fn wait_replicas_is_for_the_bench_s_own_redis_only() {
        assert_eq!(
            args(&["--wait-replicas", "1"]).map(|a| a.wait_replicas),
            Ok(1)
        );
        assert!(args(&["--wait-replicas", "5"]).is_err());
        assert!(args(&["--wait-replicas", "1", "--redis-cluster", "3"]).is_err());
        let url = [
            "--url",
            "http://127.0.0.1:1/mcp",
            "--redis",
            "redis://127.0.0.1:2",
        ];
        assert!(args(&url).is_ok());
        assert!(args(&[&url[..], &["--wait-replicas", "1"]].concat()).is_err());
    }
}
