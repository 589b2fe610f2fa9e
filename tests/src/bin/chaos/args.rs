//! The chaos command line: its options (clap derive) and the texts of `--help`.

use std::time::Duration;

use clap::Parser;
use mcp_tasks_tests::cli;

use crate::plan::random_seed;

const ABOUT: &str =
    "chaos: prove that mcp-tasks loses, duplicates and corrupts no task while processes die.";

const AFTER_HELP: &str = "\
HOW TO RUN
  cargo build --release --bins     # the gateway and worker binaries the run starts
  cargo run --release -p mcp-tasks-tests --bin chaos -- [OPTIONS]

  The binaries are taken from the directory of the chaos executable (target/release or
  target/debug), or from MCPT_BIN_DIR; build them first with the same profile. Needs
  redis-server (REDIS_SERVER_BIN overrides). Everything listens on 127.0.0.1 only.

WHAT IT DOES
  Starts redis-server with AOF (appendfsync always), 2 gateways and 3 workers
  (MCPT_LEASE=--lease, MCPT_MAX_DELIVERIES=--max-deliveries, MCPT_TOOLS=conformance,demo),
  submits N tasks at --rate per second from --concurrency submitters, alternating gateways:
    sleep         50%  sleep 200..4000 ms in 1..5 steps
    ask           25%  ask; answered 0.2..3 s after it is seen input_required
    cancel-sleep  15%  sleep 500..4000 ms; tasks/cancel 0..3 s after submission
    cancel-ask    10%  ask; never answered; tasks/cancel 0.2..2 s after input_required
  While tasks run: SIGKILL a random worker every --kill-every (x0.5..1.5, random) and start
  a replacement at once, up to --max-kills kills (so the run ends: a task whose worker keeps
  dying keeps starting over); once 20% of the tasks are terminal restart one gateway (SIGTERM,
  start again); once 50% are terminal restart Redis (SIGKILL, start again on the same port
  from its AOF). When every task has been seen terminal (or --max-duration passed) it keeps
  listening for 2 x lease + 1 s more, then reads every task with tasks/get and judges it.
  Progress: one line a second (submitted, terminal, waiting for input, kills, restarts).

  --failover: Redis is instead a primary (nothing on disk) with 2 replicas and 3 sentinels
  (quorum 2; down after 3 s and tilt mode 5 s, so that a sentinel stalled by a slow disk
  neither fails over a second time nor stays passive); the run starts once both replicas
  are in sync. Gateways and workers connect through the sentinels
  (redis+sentinel://.../mcpt-primary) with MCPT_REDIS_WAIT_REPLICAS=1 and
  MCPT_REDIS_WAIT_TIMEOUT=1s: acknowledged means one replica has it. Once 50% are
  terminal, instead of the Redis restart, SIGKILL the primary and wait (up to 30 s) until
  the sentinels name a replica primary; the log line gives the time. Meanwhile requests
  are refused with JSON-RPC errors and retried (submit retries). The command's own reads
  (recovery, fences) follow to the port the sentinels name. Progress and report count
  'failovers' instead of 'redis_restarts'; the report adds each node's role and each
  sentinel's view at the end (config-epoch above 1: the sentinels failed over twice).

DEFINITIONS
  expected  sleep: completed, text 'slept <ms> ms'. ask: completed, text 'answer: <X>'
            where X is the answer sent with tasks/update
            {\"answer-1\": {\"action\":\"accept\",\"content\":{\"answer\": X}}}.
            cancel-ask: cancelled. cancel-sleep: cancelled, or completed with the sleep's
            text when the work finished first (the spec allows it; the report counts how
            many completed although the cancel was acknowledged before completion).
            Anything else - e.g. failed 'interrupted N times' - is wrong.
  lost      never seen in a terminal state before the deadline, or vanished (tasks/get
            answers -32602 in the final check; task TTL is the default 1 h).
  duplicated
            more than one terminal transition. Every task is held on a
            subscriptions/listen stream (chunks of at most 200 ids, spread over both
            gateways, reopened with the same ids whenever a stream ends or breaks, e.g.
            at the gateway restart; each reopen re-sends the current state); tasks not
            heard of for 3 s are polled with tasks/get, and all are read once more at the
            end. Each terminal observation is keyed by (status, lastUpdatedAt, result
            content/isError, error); a task with two different keys changed its terminal
            state, i.e. has two terminal versions. A non-terminal state newer than a
            terminal one (by lastUpdatedAt) counts as duplicated too.
  wrong     the terminal state or result is not the expected one (any terminal version).
  recovered_p99_ms
            just before each SIGKILL the task hashes of all unfinished tasks are read
            (HMGET status fence worker cancel); those held by the victim (field 'worker';
            each worker runs with HOSTNAME=chaos-wN, which starts its consumer name) and
            not terminal were interrupted. Their hashes are then polled every 25 ms:
            recovered = kill -> first time 'fence' (the start counter) grew, i.e. another
            worker started the task again (or, for a task whose cancel flag was set, ended
            it cancelled). Tasks that ended without a new start (they finished before the
            kill landed) are left out. p99 over the recovered tasks; 0 when none. It
            includes the wait for a free worker slot, so it grows with the queue backlog;
            the report breaks it down per kill, with the backlog at that moment.

OUTPUT
  A table per kind: submitted, completed, failed, cancelled, lost, duplicated, wrong;
  details and process log lines for every problem task; then exactly one last line
    tasks=N lost=L duplicated=D wrong=W recovered_p99_ms=R
  Exit status 0 when lost+duplicated+wrong = 0, 1 when not (or when a planned task never
  got a task handle), 2 when the fleet could not be run, 64 for bad options.

  DUR is like 500ms, 2s, 5m.
";

/// The options. Defaults, names and meanings are those of docs/performance.md, `### chaos`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "chaos",
    about = ABOUT,
    after_help = AFTER_HELP,
    args_override_self = true
)]
pub(crate) struct Args {
    /// tasks to submit
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(crate) tasks: usize,
    /// seed of the plan and of the chaos schedule [default: random; printed]
    #[arg(long, value_name = "S", default_value_t = random_seed(), hide_default_value = true)]
    pub(crate) seed: u64,
    /// MCPT_LEASE for the workers
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = lease)]
    pub(crate) lease: String,
    /// MCPT_MAX_DELIVERIES for the workers
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub(crate) max_deliveries: u32,
    /// mean time between worker kills (at least 100ms)
    #[arg(long, value_name = "DUR", default_value = "2s",
          value_parser = cli::duration_at_least(Duration::from_millis(100)))]
    pub(crate) kill_every: Duration,
    /// most worker kills in one run
    #[arg(long, value_name = "K", default_value_t = 20)]
    pub(crate) max_kills: u64,
    /// submissions per second
    #[arg(long, value_name = "R", default_value = "100", value_parser = rate)]
    pub(crate) rate: f64,
    /// concurrent submitters
    #[arg(long, value_name = "C", default_value = "16", value_parser = cli::at_least(1usize))]
    pub(crate) concurrency: usize,
    /// overall deadline for the run
    #[arg(long, value_name = "DUR", default_value = "5m", value_parser = cli::duration)]
    pub(crate) max_duration: Duration,
    /// a primary with 2 replicas and 3 sentinels instead of one durable Redis; kill the
    /// primary instead of restarting Redis
    #[arg(long)]
    pub(crate) failover: bool,
}

/// `--lease`: kept as written (it is passed on as `MCPT_LEASE`), checked to be a positive
/// duration.
fn lease(s: &str) -> Result<String, String> {
    if cli::duration(s)?.is_zero() {
        return Err("must be positive".into());
    }
    Ok(s.to_owned())
}

fn rate(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if r.is_nan() || r <= 0.0 {
        return Err("must be positive".into());
    }
    Ok(r)
}

impl Args {
    /// The command line, or the exit status when it was `--help` or bad.
    pub(crate) fn parse() -> Result<Args, std::process::ExitCode> {
        cli::parse("chaos", |_: &Args| Ok(()))
    }

    /// What the run does to Redis at 50% terminal, as counted: the progress line's key and
    /// the report's noun (`failovers`/`failover` with `--failover`).
    pub(crate) fn redis_chaos(&self) -> (&'static str, &'static str) {
        if self.failover {
            ("failovers", "failover")
        } else {
            ("redis_restarts", "redis restart")
        }
    }

    /// `--lease` as a duration.
    pub(crate) fn lease_dur(&self) -> Duration {
        cli::duration(&self.lease).unwrap_or(Duration::from_secs(2))
    }
}
