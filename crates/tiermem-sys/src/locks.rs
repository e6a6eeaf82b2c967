//! Memory locks (`mlock`, `mlockall`) and tiermem's own mappings.
//!
//! A locked range is populated and kept in memory by the kernel, which is
//! the opposite of tiering: a tiered region's pages must leave near memory
//! (`MADV_DONTNEED` and `UFFDIO_MOVE` refuse a locked range with `EINVAL`),
//! and its reserved range, its far store and its metadata are sized for the
//! virtual range, not for what is in use (`mlockall(MCL_CURRENT)` populated
//! about 100 GB of them). So every mapping tiermem makes for memory it
//! manages ([`crate::mm::Mapping`]s made without `populate`, and ranges
//! taken over in place) is recorded here, from its creation to its unmap,
//! and is *kept unlocked*:
//!
//! - a program's memory lock should leave them out: [`kept_unlocked`] lists
//!   them (the preload library's `mlockall` locks everything else), and
//!   [`unlock_kept`] takes a lock off them all;
//! - a lock that reached one anyway (a raw `mlockall` system call no
//!   interposer sees) is taken off the whole mapping the first time a
//!   discard or move there fails for it ([`unlock_containing`]), so that
//!   eviction goes on.
//!
//! The table is lock-free (fixed slots of atomics): it is read from fault
//! handlers, which may interrupt a thread that is adding a mapping.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Slots of the table: a region holds a dozen mappings; a mapping that finds
/// no slot is only not kept out of a program's lock.
const SLOTS: usize = 1024;

struct Slot {
    /// Start address; 0: free.
    addr: AtomicUsize,
    /// Length; 0: being added or removed (readers skip it).
    len: AtomicUsize,
    /// The fork generation of a mapping a child does not inherit
    /// (`MADV_DONTFORK`); 0 for one every generation has.
    generation: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        addr: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        generation: AtomicU64::new(0),
    }
}; SLOTS];

/// Records `[addr, addr + len)` as tiermem's, to be kept unlocked; with
/// `generation`, only in that fork generation.
pub(crate) fn record(addr: usize, len: usize, generation: Option<u64>) {
    if addr == 0 || len == 0 {
        return;
    }
    for s in &TABLE {
        // Acquire/Release on the claim: the slot's other fields are ours
        // only once the claim is seen, and readers see them set before the
        // length (Release below) makes the slot valid.
        if s.addr
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // 0 means every generation: a generation is stored plus one.
            s.generation
                .store(generation.map_or(0, |g| g + 1), Ordering::Relaxed);
            s.len.store(len, Ordering::Release);
            return;
        }
    }
}

/// Forgets the range recorded at `addr` (before it is unmapped).
pub(crate) fn forget(addr: usize) {
    for s in &TABLE {
        if s.addr.load(Ordering::Acquire) == addr && s.len.load(Ordering::Relaxed) != 0 {
            // The length first: readers skip the slot from then on; the
            // Release on the address orders it before the slot is free.
            s.len.store(0, Ordering::Relaxed);
            s.addr.store(0, Ordering::Release);
            return;
        }
    }
}

/// Calls `f` with every range recorded for this process.
fn each(mut f: impl FnMut(usize, usize)) {
    let now = crate::thread::fork_generation() + 1;
    for s in &TABLE {
        let addr = s.addr.load(Ordering::Acquire);
        // Acquire: pairs with the Release in `record` (generation set).
        let len = s.len.load(Ordering::Acquire);
        let g = s.generation.load(Ordering::Relaxed);
        // The address again: a slot freed and taken meanwhile would pair
        // one range's start with another's length.
        let same = s.addr.load(Ordering::Acquire) == addr;
        if addr != 0 && len != 0 && same && (g == 0 || g == now) {
            f(addr, len);
        }
    }
}

/// The ranges tiermem keeps out of memory locks, sorted by address.
pub fn kept_unlocked() -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    each(|a, l| v.push((a, l)));
    v.sort_unstable();
    v
}

/// Takes any memory lock off every range tiermem keeps unlocked (after a
/// program's `mlockall`). Pages stay where they are; the kernel no longer
/// holds them in memory, and tiermem may evict them again.
pub fn unlock_kept() {
    each(|a, l| {
        munlock(a, l);
    });
}

/// Takes any memory lock off the whole recorded range containing `addr`.
/// True if there is one (then a discard or move that failed for the lock
/// may be tried again). Async-signal-safe.
pub fn unlock_containing(addr: usize) -> bool {
    let mut found = None;
    each(|a, l| {
        if addr.wrapping_sub(a) < l {
            found = Some((a, l));
        }
    });
    found.is_some_and(|(a, l)| munlock(a, l))
}

/// `munlock(2)` made directly (the preload library interposes the C
/// library's memory-lock calls). True on success.
pub(crate) fn munlock(addr: usize, len: usize) -> bool {
    // SAFETY: munlock changes no contents; on a range that is not mapped it
    // fails with ENOMEM and changes nothing.
    unsafe { libc::syscall(libc::SYS_munlock, addr, len) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_recorded_forgotten_and_scoped_to_their_generation() {
        let base = 0x7000_dead_0000usize;
        record(base, 4096, None);
        record(base + 8192, 8192, Some(crate::thread::fork_generation()));
        record(base + 65536, 4096, Some(crate::thread::fork_generation() + 7));
        let v = kept_unlocked();
        assert!(v.contains(&(base, 4096)) && v.contains(&(base + 8192, 8192)));
        assert!(!v.contains(&(base + 65536, 4096)), "another generation's");
        forget(base);
        forget(base + 8192);
        forget(base + 65536);
        assert!(!kept_unlocked()
            .iter()
            .any(|&(a, _)| (base..base + 65537).contains(&a)));
        assert!(!unlock_containing(base));
    }
}
