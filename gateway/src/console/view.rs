//! What the console shows, kept in this gateway's memory: the queues, workers and tools as
//! of the last refresh, and the tasks it has seen.
//!
//! One refresher per gateway (not per open page) reads the queues every [`REFRESH`]
//! (per queue stream `XLEN`, `XINFO GROUPS`, `XRANGE … COUNT 1`, `XREVRANGE … COUNT 100`,
//! `XINFO CONSUMERS`; plus `SMEMBERS` and `HGETALL mcpt:tools` twice per refresh, and
//! `HGETALL mcpt:tallies` for the rates, see `rates.rs`), reads
//! each task it had not seen once (`HGETALL`), and from then on follows the unfinished ones
//! through the gateway's event hub (one subscription per task, shared with MCP listeners),
//! so a task's changes reach open pages without another read. Pages and the JSON API read
//! this memory only; every open page is told of a change by [`View::changes`].
//!
//! Recent tasks are those a refresh found in a queue stream (a job's entry lives from its
//! creation to its end) and remembered after: a task that is created and ends between two
//! refreshes, or before this gateway started, is not listed. TODO-scalability: a gateway
//! remembers [`MAX_TASKS`]; replicas each keep their own.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::events::{EventHub, TaskEvent, Watches};
use mcp_tasks_store::registry::ADVERT_STALE_MS;
use mcp_tasks_store::{Store, StoreError, TaskRecord};
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::rates::{Counts, Point, Quantiles, Rates};

/// How often the refresher reads the queues.
pub(crate) const REFRESH: Duration = Duration::from_secs(2);
/// Entries read from the end of each queue stream per refresh.
const RECENT_PER_STREAM: usize = 100;
/// Tasks remembered; past it the oldest finished ones are forgotten first.
pub(crate) const MAX_TASKS: usize = 1000;
/// Bound on one refresh.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(10);

/// One queue as of the last refresh.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct QueueRow {
    pub(crate) name: String,
    pub(crate) length: u64,
    pub(crate) lag: u64,
    pub(crate) pending: u64,
    /// Age of the oldest job no worker has received yet.
    pub(crate) oldest_waiting_ms: Option<i64>,
    pub(crate) consumers: usize,
}

/// One worker (a consumer of one or more queues' groups).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WorkerRow {
    pub(crate) name: String,
    pub(crate) queues: Vec<String>,
    /// The live tools of its queues.
    pub(crate) tools: Vec<String>,
    /// Jobs delivered to it and not yet acknowledged.
    pub(crate) slots_in_use: u64,
    /// Since it last read or claimed a job.
    pub(crate) idle_ms: u64,
}

/// One advertised tool.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ToolRow {
    pub(crate) name: String,
    pub(crate) queue: String,
    pub(crate) policy: String,
    /// Since its worker last confirmed it.
    pub(crate) heartbeat_age_ms: i64,
    pub(crate) stale: bool,
}

/// A task the console has seen.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) record: Arc<TaskRecord>,
    pub(crate) queue: String,
}

/// The queues, workers and tools of the last refresh.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Fleet {
    pub(crate) queues: Vec<QueueRow>,
    pub(crate) workers: Vec<WorkerRow>,
    pub(crate) tools: Vec<ToolRow>,
    /// When the refresh ended (ms since the epoch); 0 before the first.
    pub(crate) refreshed_ms: i64,
    /// Why the last refresh failed, if it did.
    pub(crate) error: Option<String>,
}

/// Samples kept for the chart: 15 minutes of refreshes.
pub(crate) const HISTORY: usize = (15 * 60 / REFRESH.as_secs()) as usize;

/// One refresh's totals over all queues, for the chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// When (ms since the epoch).
    pub(crate) at_ms: i64,
    /// Jobs no worker has received yet (lag).
    pub(crate) waiting: u64,
    /// Jobs delivered and not yet acknowledged (running).
    pub(crate) running: u64,
}

#[derive(Default)]
struct Inner {
    fleet: Fleet,
    tasks: HashMap<String, Known>,
    /// The last [`HISTORY`] refreshes, oldest first: kept in this process, no Redis write.
    history: std::collections::VecDeque<Sample>,
    /// Tasks per second and run times, from every process' tally.
    rates: Rates,
}

/// The console's memory, shared by the refresher and every request.
pub(crate) struct View {
    inner: RwLock<Inner>,
    changed: watch::Sender<u64>,
}

impl View {
    pub(crate) fn new() -> View {
        View {
            inner: RwLock::new(Inner::default()),
            changed: watch::Sender::new(0),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A receiver told of every change (the value is a generation counter).
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|g| *g += 1);
    }

    /// The queues, workers and tools of the last refresh.
    pub(crate) fn fleet(&self) -> Fleet {
        self.read().fleet.clone()
    }

    /// The chart's samples, oldest first.
    pub(crate) fn history(&self) -> Vec<Sample> {
        self.read().history.iter().copied().collect()
    }

    /// Per-second rates over the last 15 minutes, oldest first.
    pub(crate) fn rate_points(&self, now_ms: i64) -> Vec<Point> {
        self.read().rates.points(now_ms)
    }

    /// Tasks counted over the last 15 minutes.
    pub(crate) fn rate_totals(&self) -> Counts {
        self.read().rates.totals()
    }

    /// Run-time quantiles over the last 15 minutes, of one queue or all.
    pub(crate) fn run_time(&self, queue: Option<&str>) -> Option<Quantiles> {
        self.read().rates.quantiles(queue)
    }

    /// One remembered task.
    pub(crate) fn task(&self, id: &str) -> Option<Known> {
        self.read().tasks.get(id).cloned()
    }

    /// Remembered tasks passing `keep`, newest first, at most `limit`.
    pub(crate) fn tasks(&self, limit: usize, keep: impl Fn(&Known) -> bool) -> Vec<Known> {
        let mut out: Vec<Known> = self
            .read()
            .tasks
            .values()
            .filter(|k| keep(k))
            .cloned()
            .collect();
        out.sort_by(|a, b| {
            (b.record.created_ms, &b.record.id).cmp(&(a.record.created_ms, &a.record.id))
        });
        out.truncate(limit);
        out
    }

    /// Record a task's state unless what is remembered is newer; whether it changed.
    fn remember(&self, record: TaskRecord, queue: Option<&str>) -> bool {
        let mut inner = self.write();
        match inner.tasks.get_mut(&record.id) {
            Some(known) if known.record.version >= record.version => false,
            Some(known) => {
                known.record = Arc::new(record);
                true
            }
            None => {
                let id = record.id.clone();
                inner.tasks.insert(
                    id,
                    Known {
                        record: Arc::new(record),
                        queue: queue.unwrap_or_default().to_owned(),
                    },
                );
                forget_oldest(&mut inner.tasks);
                true
            }
        }
    }
}

/// Keep at most [`MAX_TASKS`]: finished tasks go first, oldest first.
fn forget_oldest(tasks: &mut HashMap<String, Known>) {
    if tasks.len() <= MAX_TASKS {
        return;
    }
    let mut order: Vec<(bool, i64, String)> = tasks
        .values()
        .map(|k| {
            (
                !k.record.is_terminal(),
                k.record.created_ms,
                k.record.id.clone(),
            )
        })
        .collect();
    order.sort();
    for (_, _, id) in order.into_iter().take(tasks.len() - MAX_TASKS) {
        tasks.remove(&id);
    }
}

/// The refresher: reads the queues every [`REFRESH`] and follows the unfinished tasks it
/// found through the event hub, until `stop`.
pub(crate) async fn refresher(
    view: Arc<View>,
    store: Store,
    hub: EventHub,
    stop: CancellationToken,
) {
    let mut watches = match hub.watch_all(&[]).await {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "console: event hub unavailable; not refreshing");
            return;
        }
    };
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {
                let refreshed =
                    tokio::time::timeout(REFRESH_TIMEOUT, refresh(&view, &store, &mut watches)).await;
                let error = match refreshed {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(format!("redis unavailable: {}", mcp_tasks_shared::error_chain(&e))),
                    Err(_) => Some("redis did not answer within 10 s".to_owned()),
                };
                if let Some(why) = &error {
                    tracing::warn!(error = %why, "console: refresh failed");
                }
                view.write().fleet.error = error;
                view.bump();
            }
            event = watches.recv() => match event {
                None => return,
                Some((task, TaskEvent::Changed(record))) => {
                    if record.is_terminal() {
                        watches.remove(&task);
                    }
                    if view.remember((*record).clone(), None) {
                        view.bump();
                    }
                }
                Some((task, TaskEvent::Resync)) => {
                    reread(&view, &store, &mut watches, &task).await;
                }
            },
        }
    }
}

/// Read a task again after missed events.
async fn reread(view: &View, store: &Store, watches: &mut Watches, task: &str) {
    let Some(known) = view.task(task) else {
        watches.remove(task);
        return;
    };
    match store.get_task(task, &known.record.owner).await {
        Ok(Some(record)) => {
            if record.is_terminal() {
                watches.remove(task);
            }
            if view.remember(record, None) {
                view.bump();
            }
        }
        Ok(None) => watches.remove(task),
        Err(e) => tracing::debug!(error = %e, task.id = task, "console: task not re-read"),
    }
}

/// One refresh: the queues, their consumers and tools; the tasks not seen before.
async fn refresh(view: &View, store: &Store, watches: &mut Watches) -> Result<(), StoreError> {
    let now = now_millis();
    let tallies = store.tallies().await?;
    let (_, stale) = view.write().rates.absorb(tallies, now);
    store.forget_tallies(&stale).await?;
    let adverts = store.adverts().await?;
    let mut queues = Vec::new();
    let mut workers: BTreeMap<String, WorkerRow> = BTreeMap::new();
    let mut new_jobs = Vec::new();
    for name in store.queue_names().await? {
        let q = store.console_queue(&name, RECENT_PER_STREAM).await?;
        let consumers = store.queue_consumers(&name).await?;
        let tools: BTreeSet<String> = adverts
            .iter()
            .filter(|a| a.queue == name && now - a.heartbeat_ms <= ADVERT_STALE_MS)
            .map(|a| a.tool.name.clone())
            .collect();
        for c in &consumers {
            let w = workers.entry(c.name.clone()).or_insert_with(|| WorkerRow {
                name: c.name.clone(),
                queues: Vec::new(),
                tools: Vec::new(),
                slots_in_use: 0,
                idle_ms: u64::MAX,
            });
            w.queues.push(name.clone());
            w.tools.extend(tools.iter().cloned());
            w.slots_in_use += c.pending;
            w.idle_ms = w.idle_ms.min(c.idle_ms);
        }
        queues.push(QueueRow {
            name: name.clone(),
            length: q.depth.length,
            lag: q.depth.lag,
            pending: q.depth.pending,
            oldest_waiting_ms: q.oldest_waiting_ms.map(|t| (now - t).max(0)),
            consumers: consumers.len(),
        });
        new_jobs.extend(
            q.recent
                .into_iter()
                .filter(|j| view.task(&j.task_id).is_none())
                .map(|j| (j, name.clone())),
        );
    }
    let mut tools: Vec<ToolRow> = adverts
        .iter()
        .map(|a| ToolRow {
            name: a.tool.name.clone(),
            queue: a.queue.clone(),
            policy: serde_json::to_value(a.policy)
                .ok()
                .and_then(|p| p.as_str().map(str::to_owned))
                .unwrap_or_default(),
            heartbeat_age_ms: (now - a.heartbeat_ms).max(0),
            stale: now - a.heartbeat_ms > ADVERT_STALE_MS,
        })
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    {
        let mut inner = view.write();
        if inner.history.len() >= HISTORY {
            inner.history.pop_front();
        }
        inner.history.push_back(Sample {
            at_ms: now,
            waiting: queues.iter().map(|q| q.lag).sum(),
            running: queues.iter().map(|q| q.pending).sum(),
        });
        inner.fleet = Fleet {
            queues,
            workers: workers.into_values().collect(),
            tools,
            refreshed_ms: now_millis(),
            error: None,
        };
    }
    // Follow first, then read: no change between the read and the subscription is lost.
    let ids: Vec<String> = new_jobs.iter().map(|(j, _)| j.task_id.clone()).collect();
    watches.add(&ids).await?;
    let reads = new_jobs
        .iter()
        .map(|(j, _)| store.get_task(&j.task_id, &j.owner));
    let records = futures_util::future::join_all(reads).await;
    for ((job, queue), record) in new_jobs.iter().zip(records) {
        match record? {
            Some(record) => {
                if record.is_terminal() {
                    watches.remove(&job.task_id);
                }
                view.remember(record, Some(queue));
            }
            None => watches.remove(&job.task_id),
        }
    }
    Ok(())
}
