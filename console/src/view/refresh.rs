//! The refresher, one per gateway (not per open page): every [`REFRESH`] it reads the
//! processes' tallies (`HGETALL mcpt:{tallies}`, see `rates.rs`), and per queue stream
//! `XLEN`, `XINFO GROUPS`, `XRANGE … COUNT 1` while jobs wait, the entries added since its
//! last read (`XRANGE (LAST + COUNT 100`, whole entries: a stream cannot return some fields
//! only) and `XINFO CONSUMERS`; plus `SMEMBERS` and `HGETALL mcpt:tools` twice. It reads
//! each task it had not seen once (`HGETALL`), and from then on follows the unfinished ones
//! through the gateway's event hub (one subscription per task, shared with MCP listeners),
//! so a task's changes reach open pages without another read. What it finds goes into the
//! console's memory ([`View`], `view.rs`).
//!
//! A task is seen when its creating gateway names it in its tally (every task created in
//! the last minute, the newest 200 per gateway) or when its job's entry is read from a
//! queue stream (an entry lives from creation to the task's end): every replica lists the
//! tasks every gateway created, short ones included, unless a gateway creates more than
//! 200 in the 5 s between its tally writes and they also end before a refresh.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::events::{EventHub, TaskEvent, Watches};
use mcp_tasks_store::registry::{ADVERT_STALE_MS, ToolAdvert};
use mcp_tasks_store::tally::Tally;
use mcp_tasks_store::{Consumer, Store, StoreError};
use tokio_util::sync::CancellationToken;

use super::{Fleet, HISTORY, QueueRow, Sample, ToolRow, View, WorkerRow, strike_rows};

/// How often the refresher reads the queues.
pub(crate) const REFRESH: Duration = Duration::from_secs(2);
/// Entries read from the end of each queue stream per refresh.
const RECENT_PER_STREAM: usize = 100;
/// Bound on one refresh.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(10);

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
    match store.tasks().get(task, &known.record.owner).await {
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

/// Tasks not seen before, to be read: id → (owner digest, queue).
type Unseen = BTreeMap<String, (String, String)>;

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
    let tallies = store.fleet().tallies().await?;
    let mut unseen = named_by_tallies(view, &tallies);
    let adverts = store.fleet().adverts().await?;
    let (queues, workers) = read_queues(view, store, cursors, &adverts, now, &mut unseen).await?;
    let tools = tool_rows(&adverts, now);
    let strikes = strike_rows(store.controls().strikes().await?);
    let fleet = Fleet {
        queues,
        workers,
        tools,
        strikes,
        refreshed_ms: now_millis(),
        // The last refresh's, until the refresher records how this one ended.
        error: None,
    };
    view.show(fleet, tallies, now);
    read_unseen(view, store, watches, &unseen).await
}

/// Tasks every gateway created lately, whether or not they still have a stream entry.
fn named_by_tallies(view: &View, tallies: &[(String, Tally)]) -> Unseen {
    tallies
        .iter()
        .flat_map(|(_, t)| &t.recent)
        .filter(|c| !view.knows(&c.task))
        .map(|c| (c.task.clone(), (c.owner.clone(), c.queue.clone())))
        .collect()
}

/// Every queue's row and the workers consuming them; the tasks new in a queue stream
/// since `cursors` that are not remembered go into `unseen`.
async fn read_queues(
    view: &View,
    store: &Store,
    cursors: &mut HashMap<String, String>,
    adverts: &[ToolAdvert],
    now: i64,
    unseen: &mut Unseen,
) -> Result<(Vec<QueueRow>, Vec<WorkerRow>), StoreError> {
    let mut queues = Vec::new();
    let mut workers: BTreeMap<String, WorkerRow> = BTreeMap::new();
    for name in store.fleet().queue_names().await? {
        let q = store
            .console()
            .queue(&name, cursors, RECENT_PER_STREAM)
            .await?;
        let consumers = store.fleet().queue_consumers(&name).await?;
        let held = store.controls().held_count(&name).await?;
        let tools = live_tools(adverts, &name, now);
        for c in &consumers {
            count_consumer(&mut workers, c, &name, &tools);
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
                unseen.insert(j.task_id, (j.owner, name.clone()));
            }
        }
    }
    Ok((queues, workers.into_values().collect()))
}

/// The tools of `queue` whose adverts are not stale.
fn live_tools(adverts: &[ToolAdvert], queue: &str, now: i64) -> BTreeSet<String> {
    adverts
        .iter()
        .filter(|a| a.queue == queue && now - a.heartbeat_ms <= ADVERT_STALE_MS)
        .map(|a| a.tool.name.clone())
        .collect()
}

/// Add consumer `c` of `queue` (with the queue's live `tools`) to its worker's row.
fn count_consumer(
    workers: &mut BTreeMap<String, WorkerRow>,
    c: &Consumer,
    queue: &str,
    tools: &BTreeSet<String>,
) {
    let w = workers.entry(c.name.clone()).or_insert_with(|| WorkerRow {
        name: c.name.clone(),
        queues: Vec::new(),
        tools: Vec::new(),
        slots_in_use: 0,
        idle_ms: u64::MAX,
    });
    w.queues.push(queue.to_owned());
    w.tools.extend(tools.iter().cloned());
    w.slots_in_use += c.pending;
    w.idle_ms = w.idle_ms.min(c.idle_ms);
}

/// Every advertised tool's row, by name.
fn tool_rows(adverts: &[ToolAdvert], now: i64) -> Vec<ToolRow> {
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
    tools
}

impl View {
    /// Record a refresh's `fleet`, its chart sample and the `tallies`, keeping the last
    /// refresh's error; open pages are told when what they show changed.
    fn show(&self, mut fleet: Fleet, tallies: Vec<(String, Tally)>, now: i64) {
        let mut inner = self.write();
        if inner.history.len() >= HISTORY {
            inner.history.pop_front();
        }
        inner.history.push_back(Sample {
            at_ms: now,
            waiting: fleet.queues.iter().map(|q| q.lag).sum(),
            running: fleet.queues.iter().map(|q| q.pending).sum(),
        });
        fleet.error = inner.fleet.error.clone();
        // The tallies, the fleet and the signal together: a reader who sees the new
        // figures subscribed after the signal for them (no late event for a change it saw).
        let shown = inner.rates.absorb(tallies, now)
            || shape(&fleet) != shape(&inner.fleet)
            || fleet.queues.iter().any(|q| q.oldest_waiting_ms.is_some());
        inner.fleet = fleet;
        if shown {
            self.bump();
        }
    }
}

/// Follow the `unseen` tasks and read each once; whether any changed what is shown.
async fn read_unseen(
    view: &View,
    store: &Store,
    watches: &mut Watches,
    unseen: &Unseen,
) -> Result<bool, StoreError> {
    // Follow first, then read: no change between the read and the subscription is lost.
    let ids: Vec<String> = unseen.keys().cloned().collect();
    watches.add(&ids).await?;
    let reads = unseen
        .iter()
        .map(|(id, (owner, _))| store.tasks().get(id, owner));
    let records = futures_util::future::join_all(reads).await;
    let mut changed = false;
    let mut failed = None;
    for ((id, (_, queue)), record) in unseen.iter().zip(records) {
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
