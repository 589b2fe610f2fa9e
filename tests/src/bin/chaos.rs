//! `chaos`: run a real fleet on loopback (durable Redis, 2 gateways, 3 workers), submit N
//! tasks of mixed kinds, and while they run SIGKILL workers at random (starting
//! replacements), restart a gateway and restart Redis; then check that every task reached
//! its expected terminal state exactly once with the right result (issue 3, item 6).
//!
//! `cargo build --release --bins && cargo run --release -p mcp-tasks-tests --bin chaos -- --help`

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher as _, Hasher as _};
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use mcp_tasks_tests::{
    Client, Gateway, Process, RedisServer, Reply, Worker, binary, caps_none, caps_tasks, poll_until,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::{Value, json};

const HELP: &str = "\
chaos: prove that mcp-tasks loses, duplicates and corrupts no task while processes die.

USAGE
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

OPTIONS
  --tasks N            tasks to submit (default 1000)
  --seed S             seed of the plan and of the chaos schedule (default: random; printed)
  --lease DUR          MCPT_LEASE for the workers (default 2s)
  --max-deliveries N   MCPT_MAX_DELIVERIES for the workers (default 20)
  --kill-every DUR     mean time between worker kills (default 2s)
  --max-kills K        most worker kills in one run (default 20)
  --rate R             submissions per second (default 100)
  --concurrency C      concurrent submitters (default 16)
  --max-duration DUR   overall deadline for the run (default 5m)
  -h, --help           this text
  DUR is like 500ms, 2s, 5m.
";

/// Submitted tasks are held on listen streams of at most this many ids.
const CHUNK: usize = 200;
/// Tasks not heard of for this long are polled with tasks/get.
const STALE: Duration = Duration::from_secs(3);
const WORKERS: usize = 3;
const GATEWAYS: usize = 2;

// ---------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Args {
    tasks: usize,
    seed: u64,
    lease: String,
    lease_dur: Duration,
    max_deliveries: u32,
    kill_every: Duration,
    max_kills: u64,
    rate: f64,
    concurrency: usize,
    max_duration: Duration,
}

fn parse_duration(s: &str) -> Result<Duration> {
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| anyhow!("duration {s:?} has no unit (ms, s, m, h)"))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().with_context(|| format!("bad duration {s:?}"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => bail!("bad duration unit in {s:?} (ms, s, m, h)"),
    })
}

/// `Ok(None)` for `--help`.
fn parse_args() -> Result<Option<Args>> {
    let mut a = Args {
        tasks: 1000,
        seed: random_seed(),
        lease: "2s".into(),
        lease_dur: Duration::from_secs(2),
        max_deliveries: 20,
        kill_every: Duration::from_secs(2),
        max_kills: 20,
        rate: 100.0,
        concurrency: 16,
        max_duration: Duration::from_secs(300),
    };
    let Some(flags) = mcp_tasks_tests::flags()? else {
        return Ok(None);
    };
    for (name, v) in flags {
        let value = || -> Result<String> { Ok(v.clone()) };
        match name.as_str() {
            "--tasks" => a.tasks = value()?.parse().context("--tasks")?,
            "--seed" => a.seed = value()?.parse().context("--seed")?,
            "--lease" => {
                a.lease = value()?;
                a.lease_dur = parse_duration(&a.lease)?;
                if a.lease_dur.is_zero() {
                    bail!("--lease must be positive");
                }
            }
            "--max-deliveries" => {
                a.max_deliveries = value()?.parse().context("--max-deliveries")?
            }
            "--kill-every" => a.kill_every = parse_duration(&value()?)?,
            "--max-kills" => a.max_kills = value()?.parse().context("--max-kills")?,
            "--rate" => {
                a.rate = value()?.parse().context("--rate")?;
                if a.rate.is_nan() || a.rate <= 0.0 {
                    bail!("--rate must be positive");
                }
            }
            "--concurrency" => {
                a.concurrency = value()?.parse().context("--concurrency")?;
                if a.concurrency == 0 {
                    bail!("--concurrency must be at least 1");
                }
            }
            "--max-duration" => a.max_duration = parse_duration(&value()?)?,
            other => bail!("unknown option {other}"),
        }
    }
    if a.kill_every < Duration::from_millis(100) {
        bail!("--kill-every must be at least 100ms");
    }
    Ok(Some(a))
}

// ---------------------------------------------------------------------------------------
// Randomness: xorshift64*, seeded by --seed (or RandomState when none is given)
// ---------------------------------------------------------------------------------------

fn random_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish() % 1_000_000_000
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, never 0.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

// ---------------------------------------------------------------------------------------
// The plan
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Sleep,
    Ask,
    CancelSleep,
    CancelAsk,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Sleep, Kind::Ask, Kind::CancelSleep, Kind::CancelAsk];

    fn name(self) -> &'static str {
        match self {
            Kind::Sleep => "sleep",
            Kind::Ask => "ask",
            Kind::CancelSleep => "cancel-sleep",
            Kind::CancelAsk => "cancel-ask",
        }
    }
}

#[derive(Debug, Clone)]
struct Plan {
    kind: Kind,
    ms: u64,
    steps: u64,
    answer: String,
    /// ask: after input_required is seen; cancel-ask: same; cancel-sleep: after submission.
    delay: Duration,
}

impl Plan {
    fn make(i: usize, seed: u64) -> Plan {
        let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407));
        let roll = rng.range(0, 99);
        let kind = match roll {
            0..=49 => Kind::Sleep,
            50..=74 => Kind::Ask,
            75..=89 => Kind::CancelSleep,
            _ => Kind::CancelAsk,
        };
        let (ms, delay) = match kind {
            Kind::Sleep => (rng.range(4, 80) * 50, Duration::ZERO),
            Kind::CancelSleep => (rng.range(10, 80) * 50, rng.millis(0, 3000)),
            Kind::Ask => (0, rng.millis(200, 3000)),
            Kind::CancelAsk => (0, rng.millis(200, 2000)),
        };
        Plan {
            kind,
            ms,
            steps: rng.range(1, 5),
            answer: format!("a{i}-{:x}", rng.next() & 0xffff_ffff),
            delay,
        }
    }

    fn call(&self, i: usize) -> (&'static str, Value) {
        match self.kind {
            Kind::Sleep | Kind::CancelSleep => {
                ("sleep", json!({"ms": self.ms, "steps": self.steps}))
            }
            Kind::Ask | Kind::CancelAsk => {
                ("ask", json!({"question": format!("chaos question {i}")}))
            }
        }
    }

    /// Why `seen` is not an acceptable terminal state, if it is not.
    fn judge(&self, seen: &Seen) -> Option<String> {
        let slept = format!("slept {} ms", self.ms);
        let answered = format!("answer: {}", self.answer);
        let completed_with = |text: &str| {
            seen.status == "completed" && !seen.is_error && seen.text.as_deref() == Some(text)
        };
        let ok = match self.kind {
            Kind::Sleep => completed_with(&slept),
            Kind::Ask => completed_with(&answered),
            Kind::CancelSleep => seen.status == "cancelled" || completed_with(&slept),
            Kind::CancelAsk => seen.status == "cancelled",
        };
        (!ok).then(|| format!("expected {}, got {}", self.expected(), seen.describe()))
    }

    fn expected(&self) -> String {
        match self.kind {
            Kind::Sleep => format!("completed 'slept {} ms'", self.ms),
            Kind::Ask => format!("completed 'answer: {}'", self.answer),
            Kind::CancelSleep => format!("cancelled or completed 'slept {} ms'", self.ms),
            Kind::CancelAsk => "cancelled".into(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// What was observed
// ---------------------------------------------------------------------------------------

/// One terminal version of a task, as seen on a stream, a poll or the final read.
#[derive(Debug, Clone)]
struct Seen {
    status: String,
    updated: String,
    text: Option<String>,
    is_error: bool,
    error: Option<String>,
    source: String,
    at: Duration,
}

impl Seen {
    fn key(&self) -> (&str, &str, Option<&str>, bool, Option<&str>) {
        (
            &self.status,
            &self.updated,
            self.text.as_deref(),
            self.is_error,
            self.error.as_deref(),
        )
    }

    fn describe(&self) -> String {
        let mut s = format!("{} at {}", self.status, self.updated);
        if let Some(t) = &self.text {
            s.push_str(&format!(" text {t:?}"));
        }
        if self.is_error {
            s.push_str(" isError");
        }
        if let Some(e) = &self.error {
            s.push_str(&format!(" error {e}"));
        }
        s
    }
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

#[derive(Debug)]
struct Track {
    plan: Plan,
    id: Option<String>,
    submitted_at: Option<Instant>,
    input_seen_at: Option<Instant>,
    answer_started: bool,
    answered_at: Option<Instant>,
    cancel_started: bool,
    cancel_acked_at: Option<Instant>,
    /// Distinct terminal versions, in the order seen.
    terminals: Vec<Seen>,
    first_terminal_at: Option<Instant>,
    /// Newest non-terminal `lastUpdatedAt` seen, with its status.
    newest_open: Option<(String, String)>,
    regressions: Vec<String>,
    last_status: String,
    last_heard: Option<Instant>,
    polling: bool,
    last_poll: Option<Instant>,
    not_found: Vec<String>,
    notes: Vec<String>,
    final_task: Option<Value>,
    final_fence: Option<u64>,
}

impl Track {
    fn new(plan: Plan) -> Track {
        Track {
            plan,
            id: None,
            submitted_at: None,
            input_seen_at: None,
            answer_started: false,
            answered_at: None,
            cancel_started: false,
            cancel_acked_at: None,
            terminals: Vec::new(),
            first_terminal_at: None,
            newest_open: None,
            regressions: Vec::new(),
            last_status: String::new(),
            last_heard: None,
            polling: false,
            last_poll: None,
            not_found: Vec::new(),
            notes: Vec::new(),
            final_task: None,
            final_fence: None,
        }
    }
}

#[derive(Default)]
struct Tasks {
    list: Vec<Track>,
    by_id: HashMap<String, usize>,
    /// Ids submitted but not yet on a listen stream.
    unlistened: Vec<String>,
    terminal: usize,
}

/// A worker SIGKILLed while it held a task; resolved by the recovery watcher.
#[derive(Debug, Clone)]
struct Interrupted {
    index: usize,
    id: String,
    fence: u64,
    killed_at: Instant,
    /// Index into [`Recovery::kills`].
    kill: usize,
}

/// One SIGKILL: what the victim held and how fast its tasks were taken over.
#[derive(Debug, Default)]
struct Kill {
    at: f64,
    label: String,
    held: usize,
    /// Unfinished tasks no worker had started yet (the backlog) at the kill.
    queued: usize,
    recovered_ms: Vec<u64>,
}

#[derive(Default)]
struct Recovery {
    pending: Vec<Interrupted>,
    recovered_ms: Vec<u64>,
    finished_first: usize,
    kills: Vec<Kill>,
}

struct Shared {
    args: Args,
    started: Instant,
    deadline: Instant,
    tasks: Mutex<Tasks>,
    gateways: Vec<Mutex<Client>>,
    recovery: Mutex<Recovery>,
    /// Listen streams and pollers stop when set.
    done: AtomicBool,
    submitting: AtomicBool,
    submitted: AtomicUsize,
    submit_errors: AtomicU64,
    last_submit_error: Mutex<String>,
    kills: AtomicU64,
    gateway_restarts: AtomicU64,
    redis_restarts: AtomicU64,
    streams_open: AtomicU64,
    stream_reopens: AtomicU64,
    redis: ConnectionManager,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }

    fn client(&self, k: usize) -> Client {
        lock(&self.gateways[k % GATEWAYS]).clone()
    }

    /// Record a task state (a notification's params or a tasks/get result).
    fn observe(&self, task: &Value, source: &str) {
        let Some(id) = task["taskId"].as_str() else {
            return;
        };
        let status = task["status"].as_str().unwrap_or_default().to_owned();
        let updated = task["lastUpdatedAt"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let now = Instant::now();
        let mut tasks = lock(&self.tasks);
        let Some(&i) = tasks.by_id.get(id) else {
            return;
        };
        let mut newly_terminal = false;
        {
            let t = &mut tasks.list[i];
            t.last_heard = Some(now);
            if is_terminal(&status) {
                let seen = Seen {
                    status: status.clone(),
                    updated: updated.clone(),
                    text: task["result"]["content"][0]["text"]
                        .as_str()
                        .map(str::to_owned),
                    is_error: task["result"]["isError"] == true,
                    error: task.get("error").map(Value::to_string),
                    source: source.to_owned(),
                    at: now - self.started,
                };
                if !t.terminals.iter().any(|s| s.key() == seen.key()) {
                    if let Some((open_at, open_status)) = &t.newest_open
                        && *open_at > updated
                    {
                        t.regressions.push(format!(
                            "{open_status} at {open_at} is newer than terminal {}",
                            seen.describe()
                        ));
                    }
                    newly_terminal = t.terminals.is_empty();
                    if newly_terminal {
                        t.first_terminal_at = Some(now);
                    }
                    t.terminals.push(seen);
                }
                t.last_status = status;
            } else {
                if let Some(term) = t.terminals.iter().find(|s| s.updated < updated) {
                    t.regressions.push(format!(
                        "{status} at {updated} ({source}) after terminal {}",
                        term.describe()
                    ));
                }
                if t.newest_open.as_ref().is_none_or(|(u, _)| *u < updated) {
                    t.newest_open = Some((updated, status.clone()));
                }
                if status == "input_required" && t.input_seen_at.is_none() {
                    t.input_seen_at = Some(now);
                }
                if t.terminals.is_empty() {
                    t.last_status = status;
                }
            }
        }
        if newly_terminal {
            tasks.terminal += 1;
        }
    }

    fn note(&self, i: usize, note: String) {
        lock(&self.tasks).list[i].notes.push(note);
    }
}

// ---------------------------------------------------------------------------------------
// Requests with retries
// ---------------------------------------------------------------------------------------

/// Send a request, trying the gateways in turn while the answer is a transport failure or
/// an internal error (Redis away, gateway restarting); other answers are returned.
async fn rpc(shared: &Shared, pref: usize, method: &str, params: Value) -> Option<Reply> {
    let mut backoff = Duration::from_millis(50);
    let mut attempt = 0;
    while !shared.past_deadline() {
        let client = shared.client(pref + attempt);
        attempt += 1;
        match client.request(method, params.clone(), &caps_tasks()).await {
            Ok(r) if r.body.get("result").is_some() => return Some(r),
            Ok(r) if r.error_code().is_some_and(|c| c != -32603) => return Some(r),
            _ => {}
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(800));
    }
    None
}

async fn submit(shared: &Shared, i: usize, plan: &Plan) -> Option<String> {
    let (tool, args) = plan.call(i);
    let params = json!({"name": tool, "arguments": args});
    let mut backoff = Duration::from_millis(50);
    let mut attempt = 0;
    while !shared.past_deadline() {
        let client = shared.client(i + attempt);
        attempt += 1;
        let why = match client
            .request("tools/call", params.clone(), &caps_tasks())
            .await
        {
            Ok(r) => match r.body["result"]["taskId"].as_str() {
                Some(id) => return Some(id.to_owned()),
                None => format!("HTTP {}: {}", r.status, r.body),
            },
            Err(e) => format!("{e:#}"),
        };
        shared.submit_errors.fetch_add(1, Ordering::Relaxed);
        *lock(&shared.last_submit_error) = why;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(800));
    }
    None
}

async fn submitter(shared: Arc<Shared>, next: Arc<AtomicUsize>, plans: Arc<Vec<Plan>>) {
    let t0 = Instant::now();
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= plans.len() || shared.past_deadline() {
            return;
        }
        let due = t0 + Duration::from_secs_f64(i as f64 / shared.args.rate);
        tokio::time::sleep_until(due.into()).await;
        let Some(id) = submit(&shared, i, &plans[i]).await else {
            return;
        };
        let mut tasks = lock(&shared.tasks);
        if tasks.by_id.insert(id.clone(), i).is_some() {
            tasks.list[i]
                .notes
                .push("the server handed out this task id twice".into());
        }
        let t = &mut tasks.list[i];
        t.id = Some(id.clone());
        t.submitted_at = Some(Instant::now());
        t.last_heard = Some(Instant::now());
        tasks.unlistened.push(id);
        drop(tasks);
        shared.submitted.fetch_add(1, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// Listen streams
// ---------------------------------------------------------------------------------------

/// Collect newly submitted ids into chunks and hold each on its own listen stream.
async fn stream_manager(shared: Arc<Shared>) {
    let mut chunk_no = 0usize;
    let mut streams = Vec::new();
    while !shared.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let fresh = std::mem::take(&mut lock(&shared.tasks).unlistened);
        for ids in fresh.chunks(CHUNK) {
            streams.push(tokio::spawn(hold_stream(
                shared.clone(),
                ids.to_vec(),
                chunk_no,
            )));
            chunk_no += 1;
        }
    }
    for s in streams {
        let _ = s.await;
    }
}

async fn hold_stream(shared: Arc<Shared>, ids: Vec<String>, chunk: usize) {
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut attempt = 0usize;
    while !shared.done.load(Ordering::Relaxed) {
        let gateway = chunk + attempt;
        let listen_id = format!("chaos-{chunk}-{attempt}");
        attempt += 1;
        if attempt > 1 {
            shared.stream_reopens.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let Ok(mut sse) = shared.client(gateway).listen(listen_id, &refs).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let Some(ack) = sse.next(Duration::from_secs(10)).await else {
            continue;
        };
        if ack["method"] != "notifications/subscriptions/acknowledged" {
            continue;
        }
        let acked: Vec<&str> = ack["params"]["notifications"]["taskIds"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if acked.len() < ids.len() {
            let missing: Vec<&String> = ids
                .iter()
                .filter(|id| !acked.contains(&id.as_str()))
                .collect();
            let tasks = &mut *lock(&shared.tasks);
            for id in missing {
                if let Some(&i) = tasks.by_id.get(id) {
                    let at = shared.elapsed().as_secs_f64();
                    tasks.list[i]
                        .notes
                        .push(format!("left out of a listen acknowledgement at {at:.1}s"));
                }
            }
        }
        shared.streams_open.fetch_add(1, Ordering::Relaxed);
        let source = format!("listen(gateway {})", gateway % GATEWAYS);
        loop {
            let asked = Instant::now();
            match sse.next(Duration::from_millis(500)).await {
                Some(msg) if msg["method"] == "notifications/tasks" => {
                    shared.observe(&msg["params"], &source)
                }
                // The listen result: the server ended the stream.
                Some(msg) if msg.get("id").is_some() => break,
                Some(_) => {}
                None if asked.elapsed() < Duration::from_millis(450) => break,
                None if shared.done.load(Ordering::Relaxed) => break,
                None => {}
            }
        }
        shared.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// The client side of each task: answers, cancels, polls
// ---------------------------------------------------------------------------------------

enum Action {
    Answer(usize, String, String),
    Cancel(usize, String),
    Poll(usize, String),
}

async fn scheduler(shared: Arc<Shared>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(32));
    while !shared.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = Instant::now();
        let mut actions = Vec::new();
        {
            let mut tasks = lock(&shared.tasks);
            for (i, t) in tasks.list.iter_mut().enumerate() {
                let (Some(id), Some(submitted)) = (t.id.clone(), t.submitted_at) else {
                    continue;
                };
                let open = t.terminals.is_empty();
                match t.plan.kind {
                    Kind::Ask => {
                        if open
                            && !t.answer_started
                            && t.input_seen_at.is_some_and(|s| now >= s + t.plan.delay)
                        {
                            t.answer_started = true;
                            actions.push(Action::Answer(i, id.clone(), t.plan.answer.clone()));
                        }
                    }
                    Kind::CancelAsk => {
                        if open
                            && !t.cancel_started
                            && t.input_seen_at.is_some_and(|s| now >= s + t.plan.delay)
                        {
                            t.cancel_started = true;
                            actions.push(Action::Cancel(i, id.clone()));
                        }
                    }
                    // Cancelled even when already seen terminal: that must change nothing.
                    Kind::CancelSleep => {
                        if !t.cancel_started && now >= submitted + t.plan.delay {
                            t.cancel_started = true;
                            actions.push(Action::Cancel(i, id.clone()));
                        }
                    }
                    Kind::Sleep => {}
                }
                let quiet = t.last_heard.is_none_or(|h| now >= h + STALE)
                    && t.last_poll.is_none_or(|p| now >= p + STALE);
                if open && !t.polling && quiet {
                    t.polling = true;
                    t.last_poll = Some(now);
                    actions.push(Action::Poll(i, id));
                }
            }
        }
        for action in actions {
            let Ok(permit) = limit.clone().acquire_owned().await else {
                return;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                act(&shared, action).await;
                drop(permit);
            });
        }
    }
}

async fn act(shared: &Shared, action: Action) {
    match action {
        Action::Answer(i, id, answer) => {
            let responses =
                json!({"answer-1": {"action": "accept", "content": {"answer": answer}}});
            let r = rpc(
                shared,
                i,
                "tasks/update",
                json!({"taskId": id, "inputResponses": responses}),
            )
            .await;
            match r {
                Some(r) if r.body["result"]["resultType"] == "complete" => {
                    lock(&shared.tasks).list[i].answered_at = Some(Instant::now());
                }
                Some(r) => shared.note(i, format!("tasks/update answered {}", r.body)),
                None => shared.note(i, "tasks/update never succeeded".into()),
            }
        }
        Action::Cancel(i, id) => {
            match rpc(shared, i, "tasks/cancel", json!({"taskId": id})).await {
                Some(r) if r.body["result"]["resultType"] == "complete" => {
                    lock(&shared.tasks).list[i].cancel_acked_at = Some(Instant::now());
                }
                Some(r) => shared.note(i, format!("tasks/cancel answered {}", r.body)),
                None => shared.note(i, "tasks/cancel never succeeded".into()),
            }
        }
        Action::Poll(i, id) => {
            let r = rpc(shared, i, "tasks/get", json!({"taskId": id})).await;
            match r {
                Some(r) if r.body.get("result").is_some() => {
                    shared.observe(&r.body["result"], "poll")
                }
                Some(r) => {
                    let at = shared.elapsed().as_secs_f64();
                    lock(&shared.tasks).list[i]
                        .not_found
                        .push(format!("poll at {at:.1}s: {}", r.body));
                }
                None => {}
            }
            lock(&shared.tasks).list[i].polling = false;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Redis reads (fence counters) for the recovery measurement
// ---------------------------------------------------------------------------------------

type HashRow = (Option<String>, Option<u64>, Option<String>, Option<String>);

/// `HMGET status fence worker cancel` of each task, pipelined; `None` when Redis is away.
async fn read_hashes(con: &ConnectionManager, ids: &[String]) -> Option<Vec<HashRow>> {
    if ids.is_empty() {
        return Some(Vec::new());
    }
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.cmd("HMGET")
            .arg(mcp_tasks_shared::store::keys::task_key(
                id,
                mcp_tasks_shared::protocol::meta::ANONYMOUS_OWNER,
            ))
            .arg("status")
            .arg("fence")
            .arg("worker")
            .arg("cancel");
    }
    let mut con = con.clone();
    tokio::time::timeout(Duration::from_secs(2), pipe.query_async(&mut con))
        .await
        .ok()?
        .ok()
}

async fn recovery_watcher(shared: Arc<Shared>) {
    while !shared.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let pending = lock(&shared.recovery).pending.clone();
        if pending.is_empty() {
            continue;
        }
        let ids: Vec<String> = pending.iter().map(|p| p.id.clone()).collect();
        let Some(rows) = read_hashes(&shared.redis, &ids).await else {
            continue;
        };
        let now = Instant::now();
        let mut rec = lock(&shared.recovery);
        // Kills only append; what they added while this read ran stays pending.
        let newer = rec.pending.split_off(ids.len());
        let mut still = Vec::new();
        let mut notes = Vec::new();
        for (p, (status, fence, _, cancel)) in pending.into_iter().zip(rows) {
            let status = status.unwrap_or_default();
            let fence = fence.unwrap_or(0);
            let killed = (p.killed_at - shared.started).as_secs_f64();
            if fence > p.fence || (status == "cancelled" && cancel.as_deref() == Some("1")) {
                let ms = (now - p.killed_at).as_millis() as u64;
                rec.recovered_ms.push(ms);
                if let Some(k) = rec.kills.get_mut(p.kill) {
                    k.recovered_ms.push(ms);
                }
                notes.push((p.index, format!("run {} interrupted by the kill at {killed:.2}s; taken over after {ms} ms (fence {fence}, status {status})", p.fence)));
            } else if is_terminal(&status) || status.is_empty() {
                rec.finished_first += 1;
                notes.push((p.index, format!("held by the worker killed at {killed:.2}s but ended {status:?} without a new start")));
            } else {
                still.push(p);
            }
        }
        still.extend(newer);
        rec.pending = still;
        drop(rec);
        for (i, n) in notes {
            shared.note(i, n);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The fleet and the chaos
// ---------------------------------------------------------------------------------------

struct Fleet {
    redis: RedisServer,
    gateways: Vec<Gateway>,
    /// Running workers with their labels (`chaos-wN`, also their HOSTNAME).
    workers: Vec<(String, Worker)>,
    /// Killed or replaced processes, kept for their logs.
    retired: Vec<(String, Process)>,
    next_worker: usize,
    worker_env: Vec<(&'static str, String)>,
    gateway_env: Vec<(&'static str, String)>,
}

impl Fleet {
    fn start_worker(&mut self) -> Result<()> {
        self.next_worker += 1;
        let label = format!("chaos-w{}", self.next_worker);
        let mut env = self.worker_env.clone();
        env.push(("HOSTNAME", label.clone()));
        let w = Worker::start(&self.redis.url(), &env)?;
        self.workers.push((label, w));
        Ok(())
    }

    fn logs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, g) in self.gateways.iter().enumerate() {
            out.push((format!("gateway{i}"), g.process.log_text()));
        }
        for (label, w) in &self.workers {
            out.push((label.clone(), w.process.log_text()));
        }
        for (label, p) in &self.retired {
            out.push((label.clone(), p.log_text()));
        }
        out
    }
}

fn block<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// SIGKILL a random worker (recording the tasks it held) and start a replacement.
async fn kill_worker(shared: &Shared, fleet: &mut Fleet, rng: &mut Rng) -> Result<String> {
    let victim = rng.range(0, fleet.workers.len() as u64 - 1) as usize;
    let label = fleet.workers[victim].0.clone();
    let (indices, ids): (Vec<usize>, Vec<String>) = {
        let tasks = lock(&shared.tasks);
        tasks
            .list
            .iter()
            .enumerate()
            .filter(|(_, t)| t.terminals.is_empty())
            .filter_map(|(i, t)| Some((i, t.id.clone()?)))
            .unzip()
    };
    let rows = read_hashes(&shared.redis, &ids).await.unwrap_or_default();
    let queued = rows
        .iter()
        .filter(|(status, fence, _, _)| {
            status.as_deref().is_some_and(|s| !is_terminal(s)) && fence.unwrap_or(0) == 0
        })
        .count();
    let prefix = format!("{label}-");
    let held: Vec<(usize, String, u64)> = indices
        .into_iter()
        .zip(ids)
        .zip(rows)
        .filter_map(|((i, id), (status, fence, worker, _))| {
            let status = status?;
            (!is_terminal(&status) && worker?.starts_with(&prefix))
                .then(|| (i, id, fence.unwrap_or(0)))
        })
        .collect();
    let (_, mut worker) = fleet.workers.remove(victim);
    block(|| worker.process.kill());
    let killed_at = Instant::now();
    shared.kills.fetch_add(1, Ordering::Relaxed);
    let n = held.len();
    {
        let mut rec = lock(&shared.recovery);
        let kill = rec.kills.len();
        rec.kills.push(Kill {
            at: (killed_at - shared.started).as_secs_f64(),
            label: label.clone(),
            held: n,
            queued,
            recovered_ms: Vec::new(),
        });
        for (index, id, fence) in held {
            rec.pending.push(Interrupted {
                index,
                id,
                fence,
                killed_at,
                kill,
            });
        }
    }
    fleet
        .retired
        .push((format!("{label}(killed)"), worker.process));
    block(|| fleet.start_worker())?;
    Ok(format!(
        "SIGKILL {label} holding {n} unfinished tasks ({queued} queued, not yet started); started chaos-w{}",
        fleet.next_worker
    ))
}

async fn restart_gateway(shared: &Shared, fleet: &mut Fleet, rng: &mut Rng) -> Result<String> {
    let k = rng.range(0, GATEWAYS as u64 - 1) as usize;
    let url = fleet.redis.url();
    let env = fleet.gateway_env.clone();
    let old = &mut fleet.gateways[k];
    let status = block(|| old.process.terminate(Duration::from_secs(20)));
    let status = match status {
        Ok(s) => format!("{s}"),
        Err(e) => {
            old.process.kill();
            format!("killed: {e:#}")
        }
    };
    let fresh = block(|| Gateway::start(&url, &env))?;
    let client = fresh.client();
    let old = std::mem::replace(&mut fleet.gateways[k], fresh);
    fleet
        .retired
        .push((format!("gateway{k}(before restart)"), old.process));
    *lock(&shared.gateways[k]) = client;
    shared.gateway_restarts.fetch_add(1, Ordering::Relaxed);
    Ok(format!(
        "restarted gateway{k} (SIGTERM: {status}); now on {}",
        fleet.gateways[k].addr
    ))
}

async fn restart_redis(shared: &Shared, fleet: &mut Fleet) -> Result<String> {
    let t = Instant::now();
    block(|| fleet.redis.restart())?;
    shared.redis_restarts.fetch_add(1, Ordering::Relaxed);
    Ok(format!(
        "restarted redis (SIGKILL, AOF reload) in {} ms",
        t.elapsed().as_millis()
    ))
}

fn log_event(shared: &Shared, what: &str) {
    println!("[{:6.1}s] {what}", shared.elapsed().as_secs_f64());
}

/// Kills, restarts; returns when every task is terminal (and each chaos action happened
/// once) or at the deadline.
async fn chaos(shared: &Shared, fleet: &mut Fleet, rng: &mut Rng) -> Result<()> {
    let n = shared.args.tasks;
    let every = shared.args.kill_every.as_millis() as u64;
    let mut next_kill = Instant::now() + Duration::from_secs(1);
    let mut gateway_restarted_at: Option<Instant> = None;
    let mut redis_restarted = false;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if shared.past_deadline() {
            log_event(shared, "deadline reached");
            return Ok(());
        }
        let submitting = shared.submitting.load(Ordering::Relaxed);
        let submitted = shared.submitted.load(Ordering::Relaxed);
        let terminal = lock(&shared.tasks).terminal;
        let all_done = !submitting && terminal >= submitted;
        let kills = shared.kills.load(Ordering::Relaxed);
        let may_kill = kills < shared.args.max_kills;
        if all_done && gateway_restarted_at.is_some() && redis_restarted && (kills > 0 || !may_kill)
        {
            return Ok(());
        }
        if may_kill && Instant::now() >= next_kill && (!all_done || kills == 0) {
            let what = kill_worker(shared, fleet, rng).await?;
            log_event(shared, &what);
            next_kill = Instant::now() + Duration::from_millis(rng.range(every / 2, every * 3 / 2));
        }
        if gateway_restarted_at.is_none() && (terminal * 5 >= n || all_done) {
            let what = restart_gateway(shared, fleet, rng).await?;
            log_event(shared, &what);
            gateway_restarted_at = Some(Instant::now());
        }
        if !redis_restarted
            && gateway_restarted_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(1))
            && (terminal * 2 >= n || all_done)
        {
            let what = restart_redis(shared, fleet).await?;
            log_event(shared, &what);
            redis_restarted = true;
        }
    }
}

async fn progress(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    while !shared.done.load(Ordering::Relaxed) {
        tick.tick().await;
        let (terminal, waiting) = {
            let tasks = lock(&shared.tasks);
            let waiting = tasks
                .list
                .iter()
                .filter(|t| t.last_status == "input_required")
                .count();
            (tasks.terminal, waiting)
        };
        let recovering = lock(&shared.recovery).pending.len();
        println!(
            "[{:6.1}s] submitted={}/{} terminal={terminal} input_required={waiting} kills={} gateway_restarts={} redis_restarts={} recovering={recovering} streams={} submit_retries={}",
            shared.elapsed().as_secs_f64(),
            shared.submitted.load(Ordering::Relaxed),
            shared.args.tasks,
            shared.kills.load(Ordering::Relaxed),
            shared.gateway_restarts.load(Ordering::Relaxed),
            shared.redis_restarts.load(Ordering::Relaxed),
            shared.streams_open.load(Ordering::Relaxed),
            shared.submit_errors.load(Ordering::Relaxed),
        );
        let _ = std::io::stdout().flush();
    }
}

// ---------------------------------------------------------------------------------------
// The final check and the report
// ---------------------------------------------------------------------------------------

async fn final_read(shared: Arc<Shared>) {
    let ids: Vec<(usize, String)> = {
        let tasks = lock(&shared.tasks);
        tasks
            .list
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((i, t.id.clone()?)))
            .collect()
    };
    let limit = Arc::new(tokio::sync::Semaphore::new(16));
    let mut handles = Vec::new();
    for (i, id) in ids.iter().cloned() {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        let shared = shared.clone();
        handles.push(tokio::spawn(async move {
            // Bounded even after the deadline: a few tries per task.
            let mut got = None;
            for attempt in 0..6 {
                let client = shared.client(i + attempt);
                match client
                    .request("tasks/get", json!({"taskId": id}), &caps_tasks())
                    .await
                {
                    Ok(r) if r.body.get("result").is_some() || r.error_code() == Some(-32602) => {
                        got = Some(r);
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(300)).await,
                }
            }
            match got {
                Some(r) if r.body.get("result").is_some() => {
                    shared.observe(&r.body["result"], "final tasks/get");
                    lock(&shared.tasks).list[i].final_task = Some(r.body["result"].clone());
                }
                Some(r) => lock(&shared.tasks).list[i]
                    .not_found
                    .push(format!("final tasks/get: {}", r.body)),
                None => shared.note(i, "final tasks/get never answered".into()),
            }
            drop(permit);
        }));
    }
    for h in handles {
        let _ = h.await;
    }
    let only_ids: Vec<String> = ids.iter().map(|(_, id)| id.clone()).collect();
    for (chunk_ids, chunk_idx) in only_ids.chunks(500).zip(ids.chunks(500)) {
        if let Some(rows) = read_hashes(&shared.redis, chunk_ids).await {
            let mut tasks = lock(&shared.tasks);
            for ((i, _), (_, fence, _, _)) in chunk_idx.iter().zip(rows) {
                tasks.list[*i].final_fence = fence;
            }
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Row {
    submitted: usize,
    completed: usize,
    failed: usize,
    cancelled: usize,
    lost: usize,
    duplicated: usize,
    wrong: usize,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Print the report; returns lost + duplicated + wrong.
fn report(shared: &Shared, fleet: &Fleet) -> usize {
    let tasks = lock(&shared.tasks);
    let mut rows: BTreeMap<Kind, Row> = Kind::ALL.iter().map(|k| (*k, Row::default())).collect();
    let mut problems: Vec<(usize, Vec<String>)> = Vec::new();
    let mut cancel_ack_then_completed = 0;
    let mut cancel_after_completed = 0;
    let mut restarted_tasks = 0;
    let mut extra_starts = 0;
    let mut max_fence = 0;
    let mut unsubmitted = 0;
    for (i, t) in tasks.list.iter().enumerate() {
        if t.id.is_none() {
            unsubmitted += 1;
            continue;
        }
        let row = rows.get_mut(&t.plan.kind).expect("every kind has a row");
        row.submitted += 1;
        let mut why = Vec::new();
        let vanished = !t.not_found.is_empty();
        let lost = t.terminals.is_empty() || vanished;
        if lost {
            row.lost += 1;
            why.push(if t.terminals.is_empty() {
                format!("LOST: never terminal; last status {:?}", t.last_status)
            } else {
                "LOST: vanished (tasks/get -32602)".to_owned()
            });
        } else {
            let last = t
                .terminals
                .iter()
                .max_by(|a, b| a.updated.cmp(&b.updated))
                .expect("not empty");
            match last.status.as_str() {
                "completed" => row.completed += 1,
                "failed" => row.failed += 1,
                _ => row.cancelled += 1,
            }
        }
        if t.terminals.len() > 1 || !t.regressions.is_empty() {
            row.duplicated += 1;
            why.push(format!(
                "DUPLICATED: {} terminal versions, {} later non-terminal states",
                t.terminals.len(),
                t.regressions.len()
            ));
        }
        let wrong: Vec<String> = t.terminals.iter().filter_map(|s| t.plan.judge(s)).collect();
        if !wrong.is_empty() {
            row.wrong += 1;
            why.push(format!("WRONG: {}", wrong.join("; ")));
        }
        if t.plan.kind == Kind::CancelSleep
            && let (Some(first), Some(ack)) = (t.first_terminal_at, t.cancel_acked_at)
            && t.terminals.iter().all(|s| s.status == "completed")
        {
            if ack < first {
                cancel_ack_then_completed += 1;
            } else {
                cancel_after_completed += 1;
            }
        }
        if let Some(f) = t.final_fence {
            max_fence = max_fence.max(f);
            if f > 1 {
                restarted_tasks += 1;
                extra_starts += f - 1;
            }
        }
        if !why.is_empty() {
            problems.push((i, why));
        }
    }
    let total = rows.values().fold(Row::default(), |a, r| Row {
        submitted: a.submitted + r.submitted,
        completed: a.completed + r.completed,
        failed: a.failed + r.failed,
        cancelled: a.cancelled + r.cancelled,
        lost: a.lost + r.lost,
        duplicated: a.duplicated + r.duplicated,
        wrong: a.wrong + r.wrong,
    });

    println!();
    println!(
        "{:<14}{:>10}{:>11}{:>8}{:>11}{:>6}{:>12}{:>7}",
        "kind", "submitted", "completed", "failed", "cancelled", "lost", "duplicated", "wrong"
    );
    let line = |name: &str, r: &Row| {
        println!(
            "{:<14}{:>10}{:>11}{:>8}{:>11}{:>6}{:>12}{:>7}",
            name, r.submitted, r.completed, r.failed, r.cancelled, r.lost, r.duplicated, r.wrong
        )
    };
    for (k, r) in &rows {
        line(k.name(), r);
    }
    line("total", &total);
    println!();

    let rec = lock(&shared.recovery);
    let mut ms = rec.recovered_ms.clone();
    ms.sort_unstable();
    let p99 = percentile(&ms, 0.99);
    println!(
        "chaos: {} worker kills, {} gateway restart, {} redis restart in {:.1} s (seed {})",
        shared.kills.load(Ordering::Relaxed),
        shared.gateway_restarts.load(Ordering::Relaxed),
        shared.redis_restarts.load(Ordering::Relaxed),
        shared.elapsed().as_secs_f64(),
        shared.args.seed
    );
    println!(
        "recovery (kill -> started again): {} interrupted runs measured, p50={} p90={} p99={} max={} ms; {} finished before the kill landed; {} never started again",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.9),
        p99,
        ms.last().copied().unwrap_or(0),
        rec.finished_first,
        rec.pending.len()
    );
    for k in &rec.kills {
        let mut v = k.recovered_ms.clone();
        v.sort_unstable();
        println!(
            "  kill at {:6.1}s of {:<10} held {:>3}, backlog {:>4}: {:>3} taken over, p50={} max={} ms",
            k.at,
            k.label,
            k.held,
            k.queued,
            v.len(),
            percentile(&v, 0.5),
            v.last().copied().unwrap_or(0)
        );
    }
    println!(
        "runs: {restarted_tasks} tasks started more than once ({extra_starts} extra starts, most starts of one task {max_fence}; MCPT_MAX_DELIVERIES={})",
        shared.args.max_deliveries
    );
    println!(
        "cancel-sleep completed anyway: {cancel_ack_then_completed} with the cancel acknowledged before completion (allowed: cancellation is cooperative), {cancel_after_completed} had completed before the cancel was acknowledged"
    );
    println!(
        "client side: {} submit retries{}, {} listen streams reopened",
        shared.submit_errors.load(Ordering::Relaxed),
        {
            let e = lock(&shared.last_submit_error);
            if e.is_empty() {
                String::new()
            } else {
                format!(" (last: {})", truncate(&e, 160))
            }
        },
        shared.stream_reopens.load(Ordering::Relaxed)
    );
    let logs = fleet.logs();
    let mut suspicious = Vec::new();
    for (label, text) in &logs {
        let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
        let (errors, panics, dropped) =
            (count("ERROR"), count("panicked"), count("result dropped"));
        if errors + panics > 0 {
            suspicious.push(format!("{label}: {errors} ERROR lines, {panics} panics"));
        }
        if dropped > 0 {
            suspicious.push(format!(
                "{label}: {dropped} results dropped by fencing (a newer run owned the task)"
            ));
        }
    }
    for s in &suspicious {
        println!("log: {s}");
    }
    if unsubmitted > 0 {
        println!(
            "{unsubmitted} planned tasks were never submitted (no task handle before the deadline)"
        );
    }
    if !problems.is_empty() {
        println!();
        println!("{} problem tasks (details of up to 20):", problems.len());
        for (i, why) in problems.iter().take(20) {
            let t = &tasks.list[*i];
            let id = t.id.as_deref().unwrap_or("?");
            println!(
                "- task {id} (#{i}, {}): {}",
                t.plan.kind.name(),
                why.join(" | ")
            );
            println!(
                "    plan: ms={} steps={} expected {}; submitted at {:.2}s, input_required seen {}, answered {}, cancel acknowledged {}",
                t.plan.ms,
                t.plan.steps,
                t.plan.expected(),
                at(shared, t.submitted_at),
                opt_at(shared, t.input_seen_at),
                opt_at(shared, t.answered_at),
                opt_at(shared, t.cancel_acked_at),
            );
            for s in &t.terminals {
                println!(
                    "    terminal: {} via {} at {:.2}s",
                    s.describe(),
                    s.source,
                    s.at.as_secs_f64()
                );
            }
            for r in &t.regressions {
                println!("    regression: {r}");
            }
            for n in t.not_found.iter().chain(&t.notes) {
                println!("    note: {}", truncate(n, 300));
            }
            if let Some(f) = &t.final_task {
                println!("    final tasks/get: {}", truncate(&f.to_string(), 600));
            }
            println!("    starts (fence): {:?}", t.final_fence);
            let mut shown = 0;
            for (label, text) in &logs {
                for l in text.lines().filter(|l| l.contains(id)) {
                    if shown < 40 {
                        println!("    {label}: {}", truncate(l, 400));
                    }
                    shown += 1;
                }
            }
            if shown > 40 {
                println!("    … {} more log lines", shown - 40);
            }
        }
    }
    println!();
    println!(
        "tasks={} lost={} duplicated={} wrong={} recovered_p99_ms={p99}",
        total.submitted, total.lost, total.duplicated, total.wrong
    );
    let _ = std::io::stdout().flush();
    total.lost + total.duplicated + total.wrong + unsubmitted
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn at(shared: &Shared, t: Option<Instant>) -> f64 {
    t.map(|t| (t - shared.started).as_secs_f64())
        .unwrap_or(-1.0)
}

fn opt_at(shared: &Shared, t: Option<Instant>) -> String {
    t.map(|_| format!("at {:.2}s", at(shared, t)))
        .unwrap_or_else(|| "never".into())
}

// ---------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------

async fn wait_for_tools(client: &Client) -> Result<()> {
    poll_until(Duration::from_secs(30), || async {
        let r = client
            .request("tools/list", json!({}), &caps_none())
            .await
            .ok()?;
        let tools = r.body["result"]["tools"].as_array()?;
        let has = |n: &str| tools.iter().any(|t| t["name"] == n);
        (has("sleep") && has("ask")).then_some(())
    })
    .await
    .context("the workers' tools never appeared in tools/list")
}

async fn run(args: Args) -> Result<bool> {
    for name in ["mcp-tasks-gateway", "mcp-tasks-worker"] {
        let path = binary(name);
        if !path.exists() {
            bail!(
                "{} not found: build the binaries with the same profile first (cargo build --release --bins), or set MCPT_BIN_DIR",
                path.display()
            );
        }
    }
    println!(
        "chaos: tasks={} seed={} lease={} max_deliveries={} kill_every={:?} max_kills={} rate={}/s concurrency={} max_duration={:?} binaries in {}",
        args.tasks,
        args.seed,
        args.lease,
        args.max_deliveries,
        args.kill_every,
        args.max_kills,
        args.rate,
        args.concurrency,
        args.max_duration,
        mcp_tasks_tests::bin_dir().display()
    );
    let plans: Arc<Vec<Plan>> =
        Arc::new((0..args.tasks).map(|i| Plan::make(i, args.seed)).collect());

    let redis = block(RedisServer::start_durable)?;
    let mut fleet = Fleet {
        redis,
        gateways: Vec::new(),
        workers: Vec::new(),
        retired: Vec::new(),
        next_worker: 0,
        worker_env: vec![
            ("MCPT_LEASE", args.lease.clone()),
            ("MCPT_MAX_DELIVERIES", args.max_deliveries.to_string()),
            ("MCPT_SHUTDOWN_GRACE", "5s".into()),
        ],
        gateway_env: vec![("MCPT_SHUTDOWN_GRACE", "5s".into())],
    };
    for _ in 0..WORKERS {
        block(|| fleet.start_worker())?;
    }
    for _ in 0..GATEWAYS {
        let g = block(|| Gateway::start(&fleet.redis.url(), &fleet.gateway_env))?;
        fleet.gateways.push(g);
    }
    for g in &fleet.gateways {
        wait_for_tools(&g.client()).await?;
    }
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500));
    let con =
        ConnectionManager::new_with_config(redis::Client::open(fleet.redis.url())?, config).await?;
    println!(
        "fleet: redis {} (AOF, fsync always), gateways {}, workers {}",
        fleet.redis.url(),
        fleet
            .gateways
            .iter()
            .map(|g| g.addr.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        fleet
            .workers
            .iter()
            .map(|(l, _)| l.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );

    let started = Instant::now();
    let shared = Arc::new(Shared {
        started,
        deadline: started + args.max_duration,
        tasks: Mutex::new(Tasks {
            list: plans.iter().cloned().map(Track::new).collect(),
            ..Tasks::default()
        }),
        gateways: fleet
            .gateways
            .iter()
            .map(|g| Mutex::new(g.client()))
            .collect(),
        recovery: Mutex::new(Recovery::default()),
        done: AtomicBool::new(false),
        submitting: AtomicBool::new(true),
        submitted: AtomicUsize::new(0),
        submit_errors: AtomicU64::new(0),
        last_submit_error: Mutex::new(String::new()),
        kills: AtomicU64::new(0),
        gateway_restarts: AtomicU64::new(0),
        redis_restarts: AtomicU64::new(0),
        streams_open: AtomicU64::new(0),
        stream_reopens: AtomicU64::new(0),
        redis: con,
        args: args.clone(),
    });

    let next = Arc::new(AtomicUsize::new(0));
    let submitters: Vec<_> = (0..args.concurrency)
        .map(|_| tokio::spawn(submitter(shared.clone(), next.clone(), plans.clone())))
        .collect();
    {
        let shared = shared.clone();
        tokio::spawn(async move {
            for s in submitters {
                let _ = s.await;
            }
            shared.submitting.store(false, Ordering::Relaxed);
            log_event(
                &shared,
                &format!(
                    "submission finished: {} tasks",
                    shared.submitted.load(Ordering::Relaxed)
                ),
            );
        });
    }
    let background = vec![
        tokio::spawn(stream_manager(shared.clone())),
        tokio::spawn(scheduler(shared.clone())),
        tokio::spawn(recovery_watcher(shared.clone())),
        tokio::spawn(progress(shared.clone())),
    ];

    let mut rng = Rng::new(args.seed ^ 0xC4A0_5C4A_05C4_A05C);
    let outcome = chaos(&shared, &mut fleet, &mut rng).await;
    if let Err(e) = &outcome {
        log_event(&shared, &format!("chaos action failed: {e:#}"));
    }
    // Late notifications (a second terminal version) would arrive within a lease or two.
    let settle = args.lease_dur * 2 + Duration::from_secs(1);
    log_event(
        &shared,
        &format!("all seen terminal or deadline; listening {settle:?} more"),
    );
    tokio::time::sleep(settle).await;
    shared.done.store(true, Ordering::Relaxed);
    for h in background {
        let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
    }
    log_event(&shared, "final tasks/get of every task");
    final_read(shared.clone()).await;
    let bad = report(&shared, &fleet);
    outcome?;
    Ok(bad == 0)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("chaos: {e:#} (see --help)");
            return ExitCode::from(64);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chaos: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}
