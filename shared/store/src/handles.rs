//! The store's concerns, each a small handle over the one connection and key table:
//! `store.tasks().get(id, owner)`, `store.jobs().finish(&delivery, outcome)`.
//! They are borrowed, cheap to make and carry nothing of their own.

use crate::Store;

/// Tasks as their callers see them: create, read, answer, cancel.
#[derive(Clone, Copy)]
pub struct Tasks<'a> {
    pub(crate) store: &'a Store,
}

/// What workers do to the jobs they run: read, start, ask, finish, retry, reclaim.
#[derive(Clone, Copy)]
pub struct Jobs<'a> {
    pub(crate) store: &'a Store,
}

/// Concurrency slots, rate windows, open-stream slots and stored-bytes budgets.
#[derive(Clone, Copy)]
pub struct Limits<'a> {
    pub(crate) store: &'a Store,
}

/// 2025 sessions: their lifetimes, their tasks, their calls and listings.
#[derive(Clone, Copy)]
pub struct Sessions<'a> {
    pub(crate) store: &'a Store,
}

/// Fleet controls: strikes, and the jobs held while their tool is struck.
#[derive(Clone, Copy)]
pub struct Controls<'a> {
    pub(crate) store: &'a Store,
}

/// What the fleet advertises and counts: tool and upstream adverts, tallies, queues.
#[derive(Clone, Copy)]
pub struct Fleet<'a> {
    pub(crate) store: &'a Store,
}

/// The operator console's reads: a queue's jobs, one task in full.
#[derive(Clone, Copy)]
pub struct ConsoleReads<'a> {
    pub(crate) store: &'a Store,
}

/// Dead letters: tasks that failed for good, listed and run again.
#[derive(Clone, Copy)]
pub struct DeadLetters<'a> {
    pub(crate) store: &'a Store,
}

impl Store {
    /// Tasks as their callers see them: create, read, answer, cancel.
    pub fn tasks(&self) -> Tasks<'_> {
        Tasks { store: self }
    }

    /// What workers do to the jobs they run: read, start, ask, finish, retry, reclaim.
    pub fn jobs(&self) -> Jobs<'_> {
        Jobs { store: self }
    }

    /// Concurrency slots, rate windows, open-stream slots and stored-bytes budgets.
    pub fn limits(&self) -> Limits<'_> {
        Limits { store: self }
    }

    /// 2025 sessions: their lifetimes, their tasks, their calls and listings.
    pub fn sessions(&self) -> Sessions<'_> {
        Sessions { store: self }
    }

    /// Fleet controls: strikes, and the jobs held while their tool is struck.
    pub fn controls(&self) -> Controls<'_> {
        Controls { store: self }
    }

    /// What the fleet advertises and counts: tool and upstream adverts, tallies, queues.
    pub fn fleet(&self) -> Fleet<'_> {
        Fleet { store: self }
    }

    /// The operator console's reads: a queue's jobs, one task in full.
    pub fn console(&self) -> ConsoleReads<'_> {
        ConsoleReads { store: self }
    }

    /// Dead letters: tasks that failed for good, listed and run again.
    pub fn dead(&self) -> DeadLetters<'_> {
        DeadLetters { store: self }
    }
}
