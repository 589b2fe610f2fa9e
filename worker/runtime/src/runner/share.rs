//! Fair share of a worker's slots (`MCPT_FAIR_SHARE`): while another principal's job waits
//! in the queue, one principal's tasks hold at most a share of the slots.
//!
//! A queue is one stream, first in first out: a principal that queued 60 long tasks would
//! otherwise hold every slot until its backlog drained, and another principal's task
//! queued behind them would wait as long. So when a fresh job's owner already holds its
//! share of this worker's slots, the store looks at the entries behind the job
//! ([`Jobs::defer`](mcp_tasks_store::Jobs::defer), one script): when another owner's
//! job is among them (within [`WINDOW`] entries), the job moves to the end of the queue
//! unstarted and the slot reads on, reaching the other owner's job after at most the jobs
//! in front of it. Owners at their share do not count as waiting, so owners all at their
//! share cannot keep moving each other's jobs. With no
//! other owner waiting the job runs at once, and the stream is not looked at again for
//! [`QUIET`]: a principal alone keeps every slot at almost no cost.
//!
//! Slots given back while a task waits for input ([`Slot`] is dropped) leave the share
//! too: a parked task holds neither. Running tools are never stopped for fairness: a
//! principal alone may hold every slot. Another principal's job then starts on a guest
//! slot (`MCPT_GUEST_SLOTS`, see [`guest`](super::guest)) while one is free, or else takes
//! the first slot that frees, ahead of the backlog.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_tasks_shared::sync::lock;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// How many entries behind a job are looked at for another owner's.
pub(crate) const WINDOW: usize = 256;

/// How long a stream found with no other owner waiting is not looked at again.
/// Short: a job of another owner queued meanwhile is seen at the next free slot after it.
const QUIET: Duration = Duration::from_millis(20);

/// The slots each owner holds on this worker, and the streams recently found quiet.
pub(crate) struct Shares {
    /// The most slots one owner holds while others wait; `None`: no bound.
    most: Option<usize>,
    held: Mutex<HashMap<String, usize>>,
    quiet: Mutex<HashMap<String, Instant>>,
}

impl Shares {
    /// `share` of `concurrency` slots (at least one) per owner; no bound for a share of 1
    /// (the slots each owner holds are still counted, for the guest slots).
    pub(crate) fn new(concurrency: usize, share: f64) -> Arc<Shares> {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a share of a slot count up to 10,000"
        )]
        let most = (share < 1.0).then(|| ((concurrency as f64) * share).ceil().max(1.0) as usize);
        Arc::new(Shares {
            most,
            held: Mutex::default(),
            quiet: Mutex::default(),
        })
    }

    /// Whether one owner's slots are bounded while others wait (`MCPT_FAIR_SHARE` below 1).
    pub(crate) fn bounded(&self) -> bool {
        self.most.is_some()
    }

    /// Whether `owner` already holds its share.
    pub(crate) fn full(&self, owner: &str) -> bool {
        self.most
            .is_some_and(|most| lock(&self.held).get(owner).copied().unwrap_or(0) >= most)
    }

    /// Every owner holding its share now.
    pub(crate) fn full_owners(&self) -> Vec<String> {
        let Some(most) = self.most else {
            return Vec::new();
        };
        lock(&self.held)
            .iter()
            .filter(|(_, n)| **n >= most)
            .map(|(owner, _)| owner.clone())
            .collect()
    }

    /// Whether `owner` holds no slot on this worker (a guest slot's condition).
    pub(crate) fn runs_nothing(&self, owner: &str) -> bool {
        !lock(&self.held).contains_key(owner)
    }

    /// Every owner holding a slot now.
    pub(crate) fn running_owners(&self) -> Vec<String> {
        lock(&self.held).keys().cloned().collect()
    }

    /// Whether `stream` was found with no other owner waiting a moment ago.
    pub(crate) fn quiet(&self, stream: &str) -> bool {
        lock(&self.quiet)
            .get(stream)
            .is_some_and(|until| Instant::now() < *until)
    }

    /// `stream` has no other owner's job waiting: do not look again for a moment.
    pub(crate) fn note_quiet(&self, stream: &str) {
        let mut quiet = lock(&self.quiet);
        let now = Instant::now();
        quiet.retain(|_, until| *until > now);
        quiet.insert(stream.to_owned(), now + QUIET);
    }

    fn hold(self: &Arc<Self>, owner: &str) -> ShareGuard {
        *lock(&self.held).entry(owner.to_owned()).or_default() += 1;
        ShareGuard {
            shares: self.clone(),
            owner: owner.to_owned(),
        }
    }
}

/// One slot of an owner's share; given back on drop.
struct ShareGuard {
    shares: Arc<Shares>,
    owner: String,
}

impl Drop for ShareGuard {
    fn drop(&mut self) {
        let mut held = lock(&self.shares.held);
        if let Some(n) = held.get_mut(&self.owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.owner);
            }
        }
    }
}

/// A concurrency slot held for one owner's job; given back on drop.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    _share: ShareGuard,
    _running: Option<RunningGuard>,
}

/// One of the `MCPT_CONCURRENCY` slots running a job (not a guest slot, and not a permit
/// the read loop holds while it waits for a job).
struct RunningGuard(Arc<AtomicUsize>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, AtomicOrdering::AcqRel);
    }
}

/// Where a job's slots come from: the worker's semaphore (and the guest slots' one),
/// counted per owner.
#[derive(Clone)]
pub(crate) struct Slots {
    pub(crate) semaphore: Arc<Semaphore>,
    pub(crate) shares: Arc<Shares>,
    /// `MCPT_GUEST_SLOTS`; `None` for 0.
    pub(crate) guests: Option<Arc<Semaphore>>,
    /// `MCPT_CONCURRENCY`.
    concurrency: usize,
    /// Of those, the slots running a job now.
    running: Arc<AtomicUsize>,
}

impl Slots {
    /// `concurrency` slots, `guests` guest slots and the fair `share`.
    pub(crate) fn new(concurrency: usize, guests: usize, share: f64) -> Slots {
        Slots {
            semaphore: Arc::new(Semaphore::new(concurrency)),
            shares: Shares::new(concurrency, share),
            guests: (guests > 0).then(|| Arc::new(Semaphore::new(guests))),
            concurrency,
            running: Arc::default(),
        }
    }

    /// Whether every one of the `MCPT_CONCURRENCY` slots runs a job (the guest slots'
    /// condition).
    pub(crate) fn all_running(&self) -> bool {
        self.running.load(AtomicOrdering::Acquire) >= self.concurrency
    }

    /// `permit` (of either semaphore), taken for `owner`'s job.
    pub(crate) fn slot(&self, permit: OwnedSemaphorePermit, owner: &str) -> Slot {
        let running = Arc::ptr_eq(permit.semaphore(), &self.semaphore).then(|| {
            self.running.fetch_add(1, AtomicOrdering::AcqRel);
            RunningGuard(self.running.clone())
        });
        Slot {
            _permit: permit,
            _share: self.shares.hold(owner),
            _running: running,
        }
    }

    /// Wait for a free slot for `owner`'s job (a task resuming after input).
    pub(crate) async fn acquire(&self, owner: &str) -> Result<Slot, AcquireError> {
        let permit = self.semaphore.clone().acquire_owned().await?;
        Ok(self.slot(permit, owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_full_at_its_share_and_slots_given_back_leave_it() {
        let slots = Slots::new(8, 1, 0.5);
        let shares = slots.shares.clone();
        let mut alice = Vec::new();
        for _ in 0..4 {
            assert!(!shares.full("alice"));
            let permit = slots.semaphore.clone().try_acquire_owned().expect("free");
            alice.push(slots.slot(permit, "alice"));
        }
        assert!(shares.full("alice"));
        assert!(!shares.full("bob"));
        assert_eq!(shares.full_owners(), vec!["alice".to_owned()]);
        alice.pop();
        assert!(!shares.full("alice"));
        alice.clear();
        assert!(lock(&shares.held).is_empty());
        // A share of one slot at least; 1 is no bound.
        assert_eq!(Shares::new(1, 0.01).most, Some(1));
        assert!(!Shares::new(8, 1.0).bounded());
    }

    #[test]
    fn owners_are_counted_for_the_guest_slots_without_a_fair_share() {
        let slots = Slots::new(2, 1, 1.0);
        let shares = slots.shares.clone();
        assert!(shares.runs_nothing("alice"));
        let permit = slots.semaphore.clone().try_acquire_owned().expect("free");
        let alice = slots.slot(permit, "alice");
        let permit = slots.semaphore.clone().try_acquire_owned().expect("free");
        let _carol = slots.slot(permit, "carol");
        assert!(!shares.runs_nothing("alice"));
        assert!(shares.runs_nothing("bob"));
        // Unbounded: nobody is ever at a share.
        assert!(!shares.full("alice"));
        assert!(shares.full_owners().is_empty());
        let mut running = shares.running_owners();
        running.sort();
        assert_eq!(running, ["alice", "carol"]);
        drop(alice);
        assert!(shares.runs_nothing("alice"));
        assert!(Slots::new(2, 0, 1.0).guests.is_none());
    }

    #[test]
    fn only_slots_running_jobs_count_as_taken() {
        let slots = Slots::new(2, 1, 0.5);
        // A permit held while waiting for a job is not a running slot.
        let waiting = slots.semaphore.clone().try_acquire_owned().expect("free");
        let permit = slots.semaphore.clone().try_acquire_owned().expect("free");
        let one = slots.slot(permit, "alice");
        assert!(!slots.all_running());
        let two = slots.slot(waiting, "alice");
        assert!(slots.all_running());
        // A guest slot is not one of them.
        let guests = slots.guests.clone().expect("one");
        let guest = slots.slot(guests.try_acquire_owned().expect("free"), "bob");
        drop(one);
        assert!(!slots.all_running());
        drop((two, guest));
        assert_eq!(slots.running.load(AtomicOrdering::Acquire), 0);
    }

    #[test]
    fn a_quiet_stream_is_not_looked_at_again_for_a_moment() {
        let shares = Shares::new(8, 0.5);
        assert!(!shares.quiet("s"));
        shares.note_quiet("s");
        assert!(shares.quiet("s"));
        assert!(!shares.quiet("t"));
    }
}
