//! Tasks created, completed, failed and cancelled per second, and run-time quantiles, over
//! the last 15 minutes: built from the per-process tallies every gateway and worker writes
//! (`mcp_tasks_store::tally`), never from a record per task.
//!
//! Each refresh reads every process' snapshot; what a process counted since its previous
//! snapshot is added to the [`BIN`] its new snapshot was taken in. A process seen for the
//! first time after the console's first read started since then, so all its counts are
//! new; at the console's first read every process is only a baseline (its earlier counts
//! are not charted). Run-time histograms have the same fixed buckets in every process
//! (`RUN_TIME_BOUNDS_MS`), so merging is adding; quantiles are interpolated inside a
//! bucket, as Prometheus' `histogram_quantile` does.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use mcp_tasks_store::tally::{RUN_TIME_BOUNDS_MS, TALLY_STALE_MS, Tally};
use serde::Serialize;

/// Width of one chart point.
pub(crate) const BIN: Duration = Duration::from_secs(10);
/// How far back rates and quantiles reach.
pub(crate) const WINDOW: Duration = Duration::from_secs(15 * 60);

const BIN_MS: i64 = BIN.as_millis() as i64;
const WINDOW_MS: i64 = WINDOW.as_millis() as i64;

/// What all processes counted in one [`BIN`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bin {
    start_ms: i64,
    counts: Counts,
    run_time: BTreeMap<String, Vec<u64>>,
}

/// Tasks counted, by what happened to them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Counts {
    pub(crate) created: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) cancelled: u64,
}

impl Counts {
    fn of(t: &Tally) -> Counts {
        Counts {
            created: t.created,
            completed: t.completed,
            failed: t.failed,
            cancelled: t.cancelled,
        }
    }

    fn since(self, before: Counts) -> Counts {
        Counts {
            created: self.created.saturating_sub(before.created),
            completed: self.completed.saturating_sub(before.completed),
            failed: self.failed.saturating_sub(before.failed),
            cancelled: self.cancelled.saturating_sub(before.cancelled),
        }
    }

    fn add(&mut self, other: Counts) {
        self.created += other.created;
        self.completed += other.completed;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
    }

    fn is_zero(self) -> bool {
        self == Counts::default()
    }
}

/// One chart point: per-second rates over the bin ending at `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Point {
    pub(crate) at_ms: i64,
    pub(crate) created: f64,
    pub(crate) completed: f64,
    pub(crate) failed: f64,
    pub(crate) cancelled: f64,
}

/// Run-time median and 99th percentile, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Quantiles {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// Tasks measured.
    pub(crate) count: u64,
}

/// The bins of the last [`WINDOW`] and the last snapshot seen of each process.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    seen: HashMap<String, Tally>,
    bins: VecDeque<Bin>,
    started: bool,
}

impl Rates {
    /// Take in a read of every process' snapshot at `now_ms`; whether anything new was
    /// counted. Stale snapshots are left out (their writers are gone; the live ones drop
    /// them from Redis, `Fleet::publish_tally`). A process missing from one read (a Redis
    /// that restarted empty, say) is remembered until it is stale, so when it shows up
    /// again only what it counted since is new.
    pub(crate) fn absorb(&mut self, tallies: Vec<(String, Tally)>, now_ms: i64) -> bool {
        let mut changed = false;
        for (process, tally) in tallies {
            if now_ms - tally.at_ms > TALLY_STALE_MS {
                continue;
            }
            let before = self.seen.get(&process);
            let newer = before.is_none_or(|b| tally.at_ms > b.at_ms);
            let new = match before {
                Some(b) if tally.at_ms <= b.at_ms => None,
                Some(b) => Some(delta(&tally, b)),
                None if self.started => Some(delta(&tally, &Tally::default())),
                None => None,
            };
            if let Some((counts, run_time)) = new
                && (!counts.is_zero() || !run_time.is_empty())
            {
                changed |= self.add(tally.at_ms, counts, run_time, now_ms);
            }
            if newer {
                self.seen.insert(process, tally);
            }
        }
        self.seen
            .retain(|_, t| now_ms - t.at_ms <= TALLY_STALE_MS + WINDOW_MS);
        self.started = true;
        while self
            .bins
            .front()
            .is_some_and(|b| b.start_ms + BIN_MS <= now_ms - WINDOW_MS)
        {
            self.bins.pop_front();
            changed = true;
        }
        changed
    }

    fn add(
        &mut self,
        at_ms: i64,
        counts: Counts,
        run_time: BTreeMap<String, Vec<u64>>,
        now_ms: i64,
    ) -> bool {
        let start_ms = at_ms - at_ms.rem_euclid(BIN_MS);
        if start_ms + BIN_MS <= now_ms - WINDOW_MS {
            return false;
        }
        let at = self.bins.partition_point(|b| b.start_ms < start_ms);
        if self.bins.get(at).is_none_or(|b| b.start_ms != start_ms) {
            self.bins.insert(
                at,
                Bin {
                    start_ms,
                    ..Bin::default()
                },
            );
        }
        let bin = &mut self.bins[at];
        bin.counts.add(counts);
        for (queue, buckets) in run_time {
            merge(bin.run_time.entry(queue).or_default(), &buckets);
        }
        true
    }

    /// Per-second rates of every bin of the window that has ended by `now_ms`, oldest first
    /// (bins where nothing was counted read zero).
    pub(crate) fn points(&self, now_ms: i64) -> Vec<Point> {
        let secs = BIN.as_secs_f64();
        let last_end = now_ms - now_ms.rem_euclid(BIN_MS);
        let first_end = last_end - WINDOW_MS + BIN_MS;
        let mut bins = self.bins.iter().peekable();
        let mut out = Vec::new();
        let mut end = first_end;
        while end <= last_end {
            while bins.peek().is_some_and(|b| b.start_ms + BIN_MS < end) {
                bins.next();
            }
            let c = match bins.peek() {
                Some(b) if b.start_ms + BIN_MS == end => b.counts,
                _ => Counts::default(),
            };
            out.push(Point {
                at_ms: end,
                created: c.created as f64 / secs,
                completed: c.completed as f64 / secs,
                failed: c.failed as f64 / secs,
                cancelled: c.cancelled as f64 / secs,
            });
            end += BIN_MS;
        }
        out
    }

    /// Everything counted over the window.
    pub(crate) fn totals(&self) -> Counts {
        let mut all = Counts::default();
        for b in &self.bins {
            all.add(b.counts);
        }
        all
    }

    /// Run-time quantiles over the window, for one queue or (`None`) all of them; `None`
    /// when no task ended with a run time.
    pub(crate) fn quantiles(&self, queue: Option<&str>) -> Option<Quantiles> {
        let mut merged = vec![0; RUN_TIME_BOUNDS_MS.len() + 1];
        for b in &self.bins {
            for (q, buckets) in &b.run_time {
                if queue.is_none_or(|want| want == q) {
                    merge(&mut merged, buckets);
                }
            }
        }
        let count: u64 = merged.iter().sum();
        (count > 0).then(|| Quantiles {
            p50_ms: quantile(&merged, 0.5),
            p99_ms: quantile(&merged, 0.99),
            count,
        })
    }
}

/// What `now` counted since `before`.
fn delta(now: &Tally, before: &Tally) -> (Counts, BTreeMap<String, Vec<u64>>) {
    let mut run_time = BTreeMap::new();
    for (queue, buckets) in &now.run_time {
        let earlier = before.run_time.get(queue);
        let d: Vec<u64> = buckets
            .iter()
            .enumerate()
            .map(|(i, n)| n.saturating_sub(earlier.and_then(|e| e.get(i)).copied().unwrap_or(0)))
            .collect();
        if d.iter().any(|n| *n > 0) {
            run_time.insert(queue.clone(), d);
        }
    }
    (Counts::of(now).since(Counts::of(before)), run_time)
}

fn merge(into: &mut Vec<u64>, buckets: &[u64]) {
    if into.len() < buckets.len() {
        into.resize(buckets.len(), 0);
    }
    for (i, n) in buckets.iter().enumerate() {
        into[i] += n;
    }
}

/// The `q` quantile of a histogram over [`RUN_TIME_BOUNDS_MS`] (ms), linear inside its
/// bucket; in the overflow bucket, the highest bound.
fn quantile(buckets: &[u64], q: f64) -> f64 {
    let count: u64 = buckets.iter().sum();
    let rank = q * count as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let Some(&upper) = RUN_TIME_BOUNDS_MS.get(i) else {
                break;
            };
            let lower = if i == 0 { 0 } else { RUN_TIME_BOUNDS_MS[i - 1] };
            let into = (rank - below as f64) / n as f64;
            return lower as f64 + (upper - lower) as f64 * into;
        }
        below += n;
    }
    RUN_TIME_BOUNDS_MS.last().copied().unwrap_or(0) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_store::tally::run_time_bucket;

    fn tally(at_ms: i64, created: u64, completed: u64, run_ms: &[u64]) -> Tally {
        let mut buckets = vec![0; RUN_TIME_BOUNDS_MS.len() + 1];
        for ms in run_ms {
            buckets[run_time_bucket(*ms)] += 1;
        }
        Tally {
            at_ms,
            created,
            completed,
            run_time: BTreeMap::from([("default".to_owned(), buckets)]),
            ..Tally::default()
        }
    }

    /// Counts come from differences between a process' snapshots, land in the bin of the
    /// newer snapshot, and are summed over processes; a first read is a baseline only.
    #[test]
    fn rates_are_differences_between_snapshots() {
        let t0 = 1_000_000_000;
        let mut r = Rates::default();
        let changed = r.absorb(vec![("gw".into(), tally(t0, 100, 0, &[]))], t0);
        assert!(!changed, "a baseline counts nothing");
        assert_eq!(r.totals(), Counts::default());
        let changed = r.absorb(
            vec![
                ("gw".into(), tally(t0 + 5_000, 130, 0, &[])),
                ("w1".into(), tally(t0 + 5_000, 0, 20, &[40; 20])),
            ],
            t0 + 6_000,
        );
        assert!(changed);
        assert_eq!(r.totals().created, 30);
        assert_eq!(
            r.totals().completed,
            20,
            "a new process counts from its start"
        );
        // The same snapshots again: nothing new.
        let changed = r.absorb(
            vec![
                ("gw".into(), tally(t0 + 5_000, 130, 0, &[])),
                ("w1".into(), tally(t0 + 5_000, 0, 20, &[40; 20])),
            ],
            t0 + 8_000,
        );
        assert!(!changed);
        // A read without the gateway (Redis restarted empty), then the gateway again: only
        // what it counted since is new, not its whole life.
        r.absorb(
            vec![("w1".into(), tally(t0 + 5_000, 0, 20, &[40; 20]))],
            t0 + 9_000,
        );
        r.absorb(
            vec![
                ("gw".into(), tally(t0 + 10_000, 131, 0, &[])),
                ("w1".into(), tally(t0 + 5_000, 0, 20, &[40; 20])),
            ],
            t0 + 11_000,
        );
        assert_eq!(
            r.totals().created,
            31,
            "a process back after a gap is not new"
        );
        let points = r.points(t0 + 20_000);
        assert_eq!(points.len(), (WINDOW_MS / BIN_MS) as usize);
        assert!((points.iter().map(|p| p.created).sum::<f64>() - 3.1).abs() < 1e-9);
        // A stale process counts nothing.
        let changed = r.absorb(
            vec![("old".into(), tally(t0, 1, 1, &[]))],
            t0 + TALLY_STALE_MS + 1,
        );
        assert!(!changed);
        assert_eq!(r.totals().created, 31);
        // Past the window, everything is gone.
        r.absorb(Vec::new(), t0 + WINDOW_MS + 20_000);
        assert_eq!(r.totals(), Counts::default());
    }

    /// Buckets merge across processes; p50 and p99 land in the right buckets.
    #[test]
    fn quantiles_merge_fixed_buckets() {
        let t0 = 2_000_000_000;
        let mut r = Rates::default();
        r.absorb(Vec::new(), t0);
        let mut fast = vec![30; 98];
        fast.extend([3_000, 3_000]);
        r.absorb(
            vec![
                ("w1".into(), tally(t0 + 1_000, 0, 50, &fast[..50])),
                ("w2".into(), tally(t0 + 1_000, 0, 50, &fast[50..])),
            ],
            t0 + 2_000,
        );
        let q = r.quantiles(None).unwrap();
        assert_eq!(q.count, 100);
        assert!(q.p50_ms > 20.0 && q.p50_ms <= 50.0, "{q:?}");
        assert!(q.p99_ms > 2_000.0 && q.p99_ms <= 5_000.0, "{q:?}");
        assert_eq!(r.quantiles(Some("default")), Some(q));
        assert_eq!(r.quantiles(Some("other")), None);
    }
}
