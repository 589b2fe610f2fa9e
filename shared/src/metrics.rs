//! The OpenTelemetry instruments of both binaries, in one place so their names, units and
//! attributes stay consistent (`deploy/grafana/mcp-tasks.json` queries them).
//!
//! Instruments bind to the global meter provider the first time [`get`] is called, so
//! [`crate::telemetry::init`] must run first; before it (in library tests) they record into
//! a no-op provider. On the Prometheus endpoint dots become underscores, counters gain
//! `_total` and units a suffix (`mcpt.task.duration` in `s` is
//! `mcpt_task_duration_seconds`).
//!
//! | instrument | kind | attributes | recorded by |
//! | --- | --- | --- | --- |
//! | `mcpt.tasks.created` | counter | `tool.name`, `queue.name` | gateway |
//! | `mcpt.tasks.finished` | counter | `tool.name`, `task.status` | worker; the cancel script for tasks no worker runs |
//! | `mcpt.task.duration` (s) | histogram | `tool.name`, `task.status` | worker |
//! | `mcpt.task.queue_wait` (s) | histogram | `queue.name` | worker, first delivery |
//! | `mcpt.tasks.running` | up-down | `queue.name` | worker |
//! | `mcpt.tasks.input_required` | up-down | `queue.name` | worker |
//! | `mcpt.requests` | counter | `rpc.method`, `outcome` (`ok`, `stream`, `error`; `unauthorized`, `unavailable` for refused credentials) | gateway |
//! | `mcpt.request.duration` (s) | histogram | `rpc.method`, `outcome` | gateway |
//! | `mcpt.listeners.open` | up-down | | gateway |
//! | `mcpt.connections.open` | up-down | | gateway |
//! | `mcpt.connections.refused` | counter | | gateway, at `MCPT_MAX_CONNECTIONS` with no silent connection to close |
//! | `mcpt.connections.closed` | counter | `reason` (`header_timeout`, `idle`, `evicted`) | gateway, connections it closed itself |
//! | `mcpt.queue.length`, `mcpt.queue.lag`, `mcpt.queue.pending` | gauge | `queue.name` | worker |
//! | `mcpt.deliveries.reclaimed` | counter | `queue.name` | worker |
//! | `mcpt.redis.errors` | counter | `error.kind` | both |
//! | `mcpt.redis.unreplicated` | counter | `op` (`create`, `answer`, `cancel`, `finish`) | both, when `MCPT_REDIS_WAIT_REPLICAS` replicas did not confirm a change in time |

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use mcp_tasks_protocol::method::Method;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{
    Counter, Histogram, Meter, ObservableCounter, ObservableGauge, ObservableUpDownCounter,
    UpDownCounter,
};

pub use mcp_tasks_store::QueueDepth;

/// The instruments; see the module docs for what each one counts.
#[allow(missing_docs)]
pub struct Metrics {
    pub tasks_created: Counter<u64>,
    pub tasks_finished: Counter<u64>,
    pub task_duration: Histogram<f64>,
    pub queue_wait: Histogram<f64>,
    pub tasks_input_required: UpDownCounter<i64>,
    pub request_duration: Histogram<f64>,
    pub listeners_open: UpDownCounter<i64>,
    pub connections_open: UpDownCounter<i64>,
    pub connections_refused: Counter<u64>,
    pub connections_closed: Counter<u64>,
    pub deliveries_reclaimed: Counter<u64>,
    pub redis_errors: Counter<u64>,
    pub redis_unreplicated: Counter<u64>,
    queue_gauges: Vec<ObservableGauge<u64>>,
    _requests: ObservableCounter<u64>,
    _tasks_running: ObservableUpDownCounter<i64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("queue_gauges", &self.queue_gauges.len())
            .finish_non_exhaustive()
    }
}

/// Last sampled depth per queue, read by the queue gauges at collection.
static DEPTHS: Mutex<BTreeMap<String, QueueDepth>> = Mutex::new(BTreeMap::new());

/// Record the depth of `queue` for the queue gauges.
pub fn set_queue_depth(queue: &str, depth: QueueDepth) {
    if let Ok(mut map) = DEPTHS.lock() {
        map.insert(queue.to_owned(), depth);
    }
}

/// Stop reporting `queue` (its depth cannot be read: a stale figure would look healthy).
pub fn forget_queue_depth(queue: &str) {
    if let Ok(mut map) = DEPTHS.lock() {
        map.remove(queue);
    }
}

/// Seconds from a tool call to a task's end span minutes to hours.
const TASK_SECONDS: &[f64] = &[
    0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
];
/// Queue waits are short unless workers are missing.
const WAIT_SECONDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0,
];
/// Requests answer in milliseconds; synchronous calls and input waits take longer.
const REQUEST_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
];

/// The process' instruments.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| build(&opentelemetry::global::meter("mcp-tasks")))
}

/// Every instrument, registered with `meter`.
fn build(meter: &Meter) -> Metrics {
    let counter = |name: &'static str, desc: &'static str| {
        meter.u64_counter(name).with_description(desc).build()
    };
    let up_down = |name: &'static str, desc: &'static str| {
        meter
            .i64_up_down_counter(name)
            .with_description(desc)
            .build()
    };
    Metrics {
        tasks_created: counter("mcpt.tasks.created", "Tasks created, by tool and queue"),
        tasks_finished: counter(
            "mcpt.tasks.finished",
            "Tasks that reached a terminal status, by tool and status",
        ),
        task_duration: meter
            .f64_histogram("mcpt.task.duration")
            .with_unit("s")
            .with_description("From tools/call to the terminal status")
            .with_boundaries(TASK_SECONDS.to_vec())
            .build(),
        queue_wait: meter
            .f64_histogram("mcpt.task.queue_wait")
            .with_unit("s")
            .with_description("From tools/call to a worker's first start of the job")
            .with_boundaries(WAIT_SECONDS.to_vec())
            .build(),
        tasks_input_required: up_down(
            "mcpt.tasks.input_required",
            "Running jobs parked until the client answers an input request",
        ),
        request_duration: meter
            .f64_histogram("mcpt.request.duration")
            .with_unit("s")
            .with_description("JSON-RPC request latency, by method and outcome")
            .with_boundaries(REQUEST_SECONDS.to_vec())
            .build(),
        listeners_open: up_down(
            "mcpt.listeners.open",
            "Open subscriptions/listen notification streams",
        ),
        connections_open: up_down("mcpt.connections.open", "Open client connections"),
        connections_refused: counter(
            "mcpt.connections.refused",
            "Connections closed at accept: MCPT_MAX_CONNECTIONS reached",
        ),
        connections_closed: counter(
            "mcpt.connections.closed",
            "Connections the gateway closed, by reason",
        ),
        deliveries_reclaimed: counter(
            "mcpt.deliveries.reclaimed",
            "Jobs taken over from a worker that stopped renewing them",
        ),
        redis_errors: counter("mcpt.redis.errors", "Redis calls that failed, by kind"),
        redis_unreplicated: counter(
            "mcpt.redis.unreplicated",
            "Acknowledged changes fewer replicas confirmed than MCPT_REDIS_WAIT_REPLICAS asks",
        ),
        _requests: observed_requests(meter),
        _tasks_running: observed_running(meter),
        queue_gauges: queue_gauges(meter),
    }
}

/// `mcpt.requests`, read from the per-method, per-outcome counts.
fn observed_requests(meter: &Meter) -> ObservableCounter<u64> {
    meter
        .u64_observable_counter("mcpt.requests")
        .with_description("JSON-RPC requests, by method and outcome")
        .with_callback(|observer| {
            for (slot, count) in REQUESTS.iter().enumerate() {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    let (method, outcome) = request_slot(slot);
                    observer.observe(
                        count,
                        &[
                            KeyValue::new("rpc.method", method),
                            KeyValue::new("outcome", outcome.as_str()),
                        ],
                    );
                }
            }
        })
        .build()
}

/// `mcpt.tasks.running`, read from the per-queue running counts.
fn observed_running(meter: &Meter) -> ObservableUpDownCounter<i64> {
    meter
        .i64_observable_up_down_counter("mcpt.tasks.running")
        .with_description("Jobs a worker is running (including those waiting for input)")
        .with_callback(|observer| {
            let running = RUNNING.read().unwrap_or_else(PoisonError::into_inner);
            for (queue, count) in running.iter() {
                observer.observe(
                    count.load(Ordering::Relaxed),
                    &[KeyValue::new("queue.name", queue.clone())],
                );
            }
        })
        .build()
}

/// The queue depth gauges, read from the last sampled [`QueueDepth`] of each queue.
fn queue_gauges(meter: &Meter) -> Vec<ObservableGauge<u64>> {
    let gauge = |name: &'static str, desc: &'static str, pick: fn(&QueueDepth) -> u64| {
        meter
            .u64_observable_gauge(name)
            .with_description(desc)
            .with_callback(move |observer| {
                let Ok(map) = DEPTHS.lock() else { return };
                for (queue, depth) in map.iter() {
                    observer.observe(pick(depth), &[KeyValue::new("queue.name", queue.clone())]);
                }
            })
            .build()
    };
    vec![
        gauge("mcpt.queue.length", "Entries in the queue's stream", |d| {
            d.length
        }),
        gauge(
            "mcpt.queue.lag",
            "Entries not yet delivered to any worker",
            |d| d.lag,
        ),
        gauge(
            "mcpt.queue.pending",
            "Entries delivered and not yet finished",
            |d| d.pending,
        ),
    ]
}

/// How a request ended, for `mcpt.requests` and `mcpt.request.duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with a JSON result.
    Ok,
    /// Answered with an SSE stream.
    Stream,
    /// Answered with a JSON-RPC error.
    Error,
    /// Refused: no or bad credentials.
    Unauthorized,
    /// Refused: the credentials could not be checked (signing keys unavailable).
    Unavailable,
}

impl Outcome {
    const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Stream,
        Outcome::Error,
        Outcome::Unauthorized,
        Outcome::Unavailable,
    ];

    /// The `outcome` attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Stream => "stream",
            Outcome::Error => "error",
            Outcome::Unauthorized => "unauthorized",
            Outcome::Unavailable => "unavailable",
        }
    }
}

/// `mcpt.requests`, one count per method (and one for requests refused before their method
/// was read, `other`) and outcome: an atomic increment per request, reported by an
/// observable counter at collection. Counted through the SDK, each request hashed its two
/// attributes (SipHash) and looked them up: about 800 instructions a request more
/// (`tests/callgrind/run.sh gateway`).
static REQUESTS: [AtomicU64; (Method::ALL.len() + 1) * Outcome::ALL.len()] =
    [const { AtomicU64::new(0) }; (Method::ALL.len() + 1) * Outcome::ALL.len()];

/// The method (`None`: `other`) and outcome a [`REQUESTS`] slot counts.
fn request_slot(slot: usize) -> (&'static str, Outcome) {
    let method = Method::ALL
        .get(slot / Outcome::ALL.len())
        .map_or("other", |m| m.as_str());
    (method, Outcome::ALL[slot % Outcome::ALL.len()])
}

/// Count a request in `mcpt.requests` (`None`: refused before its method was read).
pub fn count_request(method: Option<Method>, outcome: Outcome) {
    // `Method::ALL` lists the variants in declaration order (a test checks), so a variant's
    // discriminant is its index there.
    let row = method.map_or(Method::ALL.len(), |m| m as usize);
    REQUESTS[row * Outcome::ALL.len() + outcome as usize].fetch_add(1, Ordering::Relaxed);
}

/// `mcpt.tasks.running`, one count per queue a job ran from: two atomic operations per
/// job, reported by an observable counter at collection. Counted through the SDK, each job
/// built its attribute and hashed it twice (start and end): about 2,000 instructions a job
/// more (`tests/callgrind/run.sh worker`).
static RUNNING: RwLock<Vec<(String, Arc<AtomicI64>)>> = RwLock::new(Vec::new());

/// A job counted in `mcpt.tasks.running` while this lives.
#[derive(Debug)]
pub struct RunningJob(Arc<AtomicI64>);

impl RunningJob {
    /// Count a job of `queue` as running until the guard drops.
    pub fn start(queue: &str) -> RunningJob {
        let count = running_count(queue);
        count.fetch_add(1, Ordering::Relaxed);
        RunningJob(count)
    }
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `queue`'s running count, made on its first job (a worker serves a handful of queues:
/// a scan, no hashing).
fn running_count(queue: &str) -> Arc<AtomicI64> {
    let find = |list: &[(String, Arc<AtomicI64>)]| {
        list.iter()
            .find(|(q, _)| q == queue)
            .map(|(_, count)| Arc::clone(count))
    };
    if let Some(count) = find(&RUNNING.read().unwrap_or_else(PoisonError::into_inner)) {
        return count;
    }
    let mut list = RUNNING.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(count) = find(&list) {
        return count;
    }
    let count = Arc::new(AtomicI64::new(0));
    list.push((queue.to_owned(), Arc::clone(&count)));
    count
}

/// `[tool.name, task.status]`, the attributes of the finish instruments.
pub fn finish_attrs(tool: &str, status: &'static str) -> [KeyValue; 2] {
    [
        KeyValue::new("tool.name", tool.to_owned()),
        KeyValue::new("task.status", status),
    ]
}

/// `[queue.name]`.
pub fn queue_attrs(queue: &str) -> [KeyValue; 1] {
    [KeyValue::new("queue.name", queue.to_owned())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_slots_name_the_method_and_outcome_they_count() {
        for (i, m) in Method::ALL.iter().enumerate() {
            assert_eq!(*m as usize, i, "Method::ALL is in declaration order");
        }
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i, "Outcome::ALL is in declaration order");
        }
        let before: Vec<u64> = REQUESTS.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        count_request(Some(Method::TasksGet), Outcome::Stream);
        count_request(None, Outcome::Unauthorized);
        let moved: Vec<(&str, &str)> = REQUESTS
            .iter()
            .enumerate()
            .filter(|(i, c)| c.load(Ordering::Relaxed) != before[*i])
            .map(|(i, _)| {
                let (m, o) = request_slot(i);
                (m, o.as_str())
            })
            .collect();
        assert_eq!(moved, [("tasks/get", "stream"), ("other", "unauthorized")]);
    }

    #[test]
    fn running_jobs_count_per_queue_while_their_guards_live() {
        let read = |queue: &str| running_count(queue).load(Ordering::Relaxed);
        let a = RunningJob::start("metrics-test-a");
        let b = RunningJob::start("metrics-test-a");
        let c = RunningJob::start("metrics-test-b");
        assert_eq!((read("metrics-test-a"), read("metrics-test-b")), (2, 1));
        drop(a);
        drop(c);
        assert_eq!((read("metrics-test-a"), read("metrics-test-b")), (1, 0));
        drop(b);
        assert_eq!(read("metrics-test-a"), 0);
    }
}
