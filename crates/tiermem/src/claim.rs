//! Claiming one of a few preallocated scratch sets without waiting: the
//! engine's eviction and fill sets and team mode's eviction windows. A
//! fault claims one with a non-blocking `try_lock` (no allocation, no
//! waiting: safe in a signal handler; a fault taken while the same thread
//! holds a set finds it taken) and falls back to a small set on its own
//! stack when every set is taken.

use std::sync::{Mutex, MutexGuard, TryLockError};

/// The first free set of `sets`, trying them from slot `start` on
/// (wrapping), without waiting; `None` when every set is taken.
pub(crate) fn try_claim<T>(sets: &[Mutex<T>], start: usize) -> Option<MutexGuard<'_, T>> {
    (0..sets.len()).find_map(|i| match sets[(start + i) % sets.len()].try_lock() {
        Ok(g) => Some(g),
        // A panic while holding a set leaves plain data behind: reuse it.
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    })
}
