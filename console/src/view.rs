//! What the console shows, kept in this gateway's memory: the queues, workers and tools as
//! of the last refresh, and the tasks it has seen.
//!
//! One refresher per gateway (not per open page) reads every [`REFRESH`]: the processes'
//! tallies (`HGETALL mcpt:{tallies}`, see `rates.rs`), and per queue stream `XLEN`,
//! `XINFO GROUPS`, `XRANGE … COUNT 1` while jobs wait, the entries added since its last read
//! (`XRANGE (LAST + COUNT 100`, whole entries: a stream cannot return some fields only) and
//! `XINFO CONSUMERS`; plus `SMEMBERS` and `HGETALL mcpt:tools` twice. It reads each task it
//! had not seen once (`HGETALL`), and from then on follows the unfinished ones through the
//! gateway's event hub (one subscription per task, shared with MCP listeners), so a task's
//! changes reach open pages without another read. Pages and the JSON API read this memory
//! only; open pages are told by [`View::changes`] when something they show changed (not
//! when only ages moved).
//!
//! A task is seen when its creating gateway names it in its tally (every task created in
//! the last minute, the newest 200 per gateway) or when its job's entry is read from a
//! queue stream (an entry lives from creation to the task's end): every replica lists the
//! tasks every gateway created, short ones included, unless a gateway creates more than
//! 200 in the 5 s between its tally writes and they also end before a refresh. A task a
//! gateway never listed (older, or forgotten) is read by id when the request names its
//! owner digest (`?owner=`, as the console's links do). TODO-scalability: a gateway
//! remembers [`MAX_TASKS`].

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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct QueueRow {
    pub(crate) name: String,
    pub(crate) length: u64,
    pub(crate) lag: u64,
    pub(crate) pending: u64,
    /// Age of the oldest job no worker has received yet.
    pub(crate) oldest_waiting_ms: Option<i64>,
    pub(crate) consumers: usize,
    /// Jobs put aside by a strike (`mcpt:held:*`), run again on restore.
    pub(crate) held: u64,
}

/// One worker (a consumer of one or more queues' groups).
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolRow {
    pub(crate) name: String,
    pub(crate) queue: String,
    pub(crate) policy: String,
    /// Since its worker last confirmed it.
    pub(crate) heartbeat_age_ms: i64,
    pub(crate) stale: bool,
}

/// One strike in force (`mcp-tasks strike`, or the console's form).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StrikeRow {
    pub(crate) tool: String,
    /// `ARG=VALUE`, when only such calls are struck.
    #[serde(rename = "where")]
    pub(crate) when: Option<String>,
    /// How messages name it: `tool T` or `tool T where ARG=VALUE`.
    pub(crate) describe: String,
    pub(crate) since_ms: i64,
    pub(crate) cancel_running: bool,
}

/// The rows of the strikes in force.
pub(crate) fn strike_rows(strikes: mcp_tasks_store::strikes::Strikes) -> Vec<StrikeRow> {
    strikes
        .0
        .into_iter()
        .map(|s| StrikeRow {
            describe: s.describe(),
            when: s.when.map(|(arg, value)| format!("{arg}={value}")),
            tool: s.tool,
            since_ms: s.at_ms,
            cancel_running: s.cancel_running,
        })
        .collect()
}

/// A task the console has seen: a summary (status, message, tool, owner, times; no
/// result, error, input requests or answers, which a task's page reads from Redis).
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) record: Arc<TaskRecord>,
    pub(crate) queue: String,
}

/// The queues, workers and tools of the last refresh.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Fleet {
    pub(crate) queues: Vec<QueueRow>,
    pub(crate) workers: Vec<WorkerRow>,
    pub(crate) tools: Vec<ToolRow>,
    pub(crate) strikes: Vec<StrikeRow>,
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
    /// Show `strikes` now (after a strike or restore from this console), not at the next
    /// refresh: the page the operator is sent back to shows what they did.
    pub(crate) fn set_strikes(&self, strikes: Vec<StrikeRow>) {
        let changed = {
            let mut inner = self.write();
            let was = std::mem::replace(&mut inner.fleet.strikes, strikes);
            was != inner.fleet.strikes
        };
        if changed {
            self.bump();
        }
    }

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
    /// Whether the task `id` is remembered (no copy made).
    pub(crate) fn knows(&self, id: &str) -> bool {
        self.read().tasks.contains_key(id)
    }

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

    /// Record a task's summary unless what is remembered is newer, and stop following the
    /// tasks forgotten to make room; whether it changed.
    fn remember(&self, record: TaskRecord, queue: Option<&str>, watches: &mut Watches) -> bool {
        let record = summary(record);
        let forgotten = {
            let mut inner = self.write();
            match inner.tasks.get_mut(&record.id) {
                Some(known) if known.record.version >= record.version => return false,
                Some(known) => {
                    known.record = Arc::new(record);
                    return true;
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
                    forget_oldest(&mut inner.tasks)
                }
            }
        };
        for id in &forgotten {
            watches.remove(id);
        }
        true
    }
}

/// What the console keeps of a task: the record without its payloads (result, error,
/// input requests, answers), which can be large and which only a task's page shows.
pub(crate) fn summary(record: TaskRecord) -> TaskRecord {
    TaskRecord {
        result: None,
        error: None,
        inputs: Default::default(),
        answers: Default::default(),
        ..record
    }
}

/// Keep at most [`MAX_TASKS`]: finished tasks go first, oldest first. Returns the ids
/// forgotten (their watches are to be dropped).
fn forget_oldest(tasks: &mut HashMap<String, Known>) -> Vec<String> {
    if tasks.len() <= MAX_TASKS {
        return Vec::new();
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
    let excess = tasks.len() - MAX_TASKS;
    let forgotten: Vec<String> = order
        .into_iter()
        .take(excess)
        .map(|(_, _, id)| id)
        .collect();
    for id in &forgotten {
        tasks.remove(id);
    }
    forgotten
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
    let mut cursors = HashMap::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {
                let refreshed = tokio::time::timeout(
                    REFRESH_TIMEOUT,
                    refresh(&view, &store, &mut watches, &mut cursors),
                )
                .await;
                let (changed, error) = match refreshed {
                    Ok(Ok(changed)) => (changed, None),
                    Ok(Err(e)) => (false, Some(format!("redis unavailable: {}", mcp_tasks_shared::error_chain(&e)))),
                    Err(_) => (false, Some("redis did not answer within 10 s".to_owned())),
                };
                if let Some(why) = &error {
                    tracing::warn!(error = %why, "console: refresh failed");
                }
                let error_changed = {
                    let mut inner = view.write();
                    let was = std::mem::replace(&mut inner.fleet.error, error);
                    was != inner.fleet.error
                };
                // Open pages redraw only when what they show changed.
                if changed || error_changed {
                    view.bump();
                }
            }
            event = watches.recv() => match event {
                None => return,
                Some((task, TaskEvent::Changed(record))) => {
                    if record.is_terminal() || !view.knows(&task) {
                        watches.remove(&task);
                    }
                    // A late event of a task forgotten meanwhile does not bring it back.
                    if view.knows(&task)
                        && view.remember((*record).clone(), None, &mut watches)
                    {
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
            if view.remember(record, None, watches) {
                view.bump();
            }
        }
        Ok(None) => watches.remove(task),
        Err(e) => tracing::debug!(error = %e, task.id = task, "console: task not re-read"),
    }
}

/// What an open page shows of a fleet, without the ages that move on every refresh: two
/// refreshes with the same shape need no redraw.
fn shape(fleet: &Fleet) -> Fleet {
    let mut f = fleet.clone();
    f.refreshed_ms = 0;
    f.error = None;
    for q in &mut f.queues {
        q.oldest_waiting_ms = None;
    }
    for w in &mut f.workers {
        w.idle_ms = 0;
    }
    for t in &mut f.tools {
        t.heartbeat_age_ms = 0;
    }
    f
}

/// One refresh: the processes' tallies, the queues (with their held jobs), their
/// consumers and tools, the strikes in force; the tasks not seen before (named by a tally
/// or new in a queue stream since `cursors`). Open pages are told (`bump`) in the same
/// step as the figures change (a job waiting counts: its age moves); returns whether the
/// tasks read afterwards changed anything shown.
async fn refresh(
    view: &View,
    store: &Store,
    watches: &mut Watches,
    cursors: &mut HashMap<String, String>,
) -> Result<bool, StoreError> {
    let now = now_millis();
    let tallies = store.tallies().await?;
    // Tasks every gateway created lately, whether or not they still have a stream entry.
    let mut new_tasks: BTreeMap<String, (String, String)> = tallies
        .iter()
        .flat_map(|(_, t)| &t.recent)
        .filter(|c| !view.knows(&c.task))
        .map(|c| (c.task.clone(), (c.owner.clone(), c.queue.clone())))
        .collect();
    let mut changed = false;
    let adverts = store.adverts().await?;
    let mut queues = Vec::new();
    let mut workers: BTreeMap<String, WorkerRow> = BTreeMap::new();
    for name in store.queue_names().await? {
        let q = store
            .console_queue(&name, cursors, RECENT_PER_STREAM)
            .await?;
        let consumers = store.queue_consumers(&name).await?;
        let held = store.held_count(&name).await?;
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
            held,
        });
        for j in q.recent {
            if !view.knows(&j.task_id) {
                new_tasks.insert(j.task_id, (j.owner, name.clone()));
            }
        }
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
    let strikes = strike_rows(store.strikes().await?);
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
        let fleet = Fleet {
            queues,
            workers: workers.into_values().collect(),
            tools,
            strikes,
            refreshed_ms: now_millis(),
            error: inner.fleet.error.clone(),
        };
        // The tallies, the fleet and the signal together: a reader who sees the new
        // figures subscribed after the signal for them (no late event for a change it saw).
        let shown = inner.rates.absorb(tallies, now)
            || shape(&fleet) != shape(&inner.fleet)
            || fleet.queues.iter().any(|q| q.oldest_waiting_ms.is_some());
        inner.fleet = fleet;
        if shown {
            view.bump();
        }
    }
    // Follow first, then read: no change between the read and the subscription is lost.
    let ids: Vec<String> = new_tasks.keys().cloned().collect();
    watches.add(&ids).await?;
    let reads = new_tasks
        .iter()
        .map(|(id, (owner, _))| store.get_task(id, owner));
    let records = futures_util::future::join_all(reads).await;
    let mut failed = None;
    for ((id, (_, queue)), record) in new_tasks.iter().zip(records) {
        match record {
            Ok(Some(record)) => {
                if record.is_terminal() {
                    watches.remove(id);
                }
                changed |= view.remember(record, Some(queue), watches);
            }
            Ok(None) => watches.remove(id),
            // Not followed unread; a creator's tally names it for a minute, so a later
            // refresh reads it again.
            Err(e) => {
                watches.remove(id);
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(changed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_protocol::tasks::TaskStatus;

    fn known(id: &str, created_ms: i64, status: TaskStatus) -> (String, Known) {
        let record = TaskRecord {
            id: id.to_owned(),
            status: Some(status),
            created_ms,
            ..TaskRecord::default()
        };
        (
            id.to_owned(),
            Known {
                record: Arc::new(record),
                queue: "default".to_owned(),
            },
        )
    }

    /// Past [`MAX_TASKS`], finished tasks are forgotten first, oldest first, and the ids
    /// forgotten are returned so that their watches are dropped too.
    #[test]
    fn forgetting_names_the_tasks_forgotten() {
        let mut tasks: HashMap<String, Known> = (0..MAX_TASKS as i64)
            .map(|i| known(&format!("w{i}"), i, TaskStatus::Working))
            .collect();
        assert!(forget_oldest(&mut tasks).is_empty());
        tasks.extend([
            known("done-new", 5_000, TaskStatus::Completed),
            known("done-old", 4_000, TaskStatus::Completed),
        ]);
        assert_eq!(forget_oldest(&mut tasks), ["done-old", "done-new"]);
        tasks.insert(
            "w-new".to_owned(),
            known("w-new", 9_000, TaskStatus::Working).1,
        );
        assert_eq!(
            forget_oldest(&mut tasks),
            ["w0"],
            "then the oldest unfinished"
        );
        assert_eq!(tasks.len(), MAX_TASKS);
    }

    /// Remembered tasks keep no payloads: a 1 MB result costs the console nothing.
    #[test]
    fn summaries_leave_payloads_out() {
        let full = TaskRecord {
            id: "t".to_owned(),
            status: Some(TaskStatus::Completed),
            message: Some("done".to_owned()),
            result: Some("x".repeat(1 << 20)),
            error: Some("{}".to_owned()),
            inputs: [("k".to_owned(), "{}".to_owned())].into(),
            answers: [("k".to_owned(), "{}".to_owned())].into(),
            ..TaskRecord::default()
        };
        let s = summary(full.clone());
        assert_eq!((s.result, s.error), (None, None));
        assert!(s.inputs.is_empty() && s.answers.is_empty());
        assert_eq!(
            (s.id, s.status, s.message),
            (full.id, full.status, full.message)
        );
    }

    /// An idle refresh (ages moved, nothing else) has the same shape: open pages are not
    /// told; a job more in a queue is a change.
    #[test]
    fn ages_alone_are_no_change() {
        let fleet = |idle_ms, length| Fleet {
            queues: vec![QueueRow {
                name: "default".to_owned(),
                length,
                lag: 0,
                pending: length,
                oldest_waiting_ms: None,
                consumers: 1,
                held: 0,
            }],
            workers: vec![WorkerRow {
                name: "w".to_owned(),
                queues: vec!["default".to_owned()],
                tools: vec!["sleep".to_owned()],
                slots_in_use: length,
                idle_ms,
            }],
            tools: Vec::new(),
            strikes: Vec::new(),
            refreshed_ms: idle_ms as i64,
            error: None,
        };
        assert_eq!(shape(&fleet(10, 0)), shape(&fleet(2_010, 0)));
        assert_ne!(shape(&fleet(10, 0)), shape(&fleet(10, 1)));
    }
}
