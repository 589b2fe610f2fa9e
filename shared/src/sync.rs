//! A lock that outlives a panic elsewhere.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock `m`, taking what a holder that panicked left. For data of plain values (maps,
/// counters, sets of ids), where a panic elsewhere leaves nothing half-done, so the lock
/// goes on working rather than panicking every later caller.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
