//! What the console shows, kept in this gateway's memory: the queues, workers and tools as
//! of the last refresh ([`Fleet`], rows in `fleet.rs`), and the tasks it has seen
//! ([`Known`]). One refresher per gateway (not per open page, `refresh.rs`) keeps it.
//! Pages and the JSON API read this memory only; open pages are told by
//! [`View::changes`] when something they show changed (not when only ages moved).
//!
//! A task a gateway never listed (older, or forgotten) is read by id when the request
//! names its owner digest (`?owner=`, as the console's links do). TODO-scalability: a
//! gateway remembers [`MAX_TASKS`].

mod fleet;
mod refresh;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use mcp_tasks_store::TaskRecord;
use mcp_tasks_store::events::Watches;
use tokio::sync::watch;

use super::rates::{Counts, Point, Quantiles, Rates};

pub(crate) use fleet::{
    Fleet, HISTORY, QueueRow, Sample, StrikeRow, ToolRow, WorkerRow, strike_rows,
};
pub(crate) use refresh::refresher;

/// Tasks remembered; past it the oldest finished ones are forgotten first.
pub(crate) const MAX_TASKS: usize = 1000;

/// A task the console has seen: a summary (status, message, tool, owner, times; no
/// result, error, input requests or answers, which a task's page reads from Redis).
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) record: Arc<TaskRecord>,
    pub(crate) queue: String,
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

    /// Whether the task `id` is remembered (no copy made).
    pub(crate) fn knows(&self, id: &str) -> bool {
        self.read().tasks.contains_key(id)
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
}
