//! Pages held resident for good: ranges the kernel writes on its own,
//! where no fault can be served. The kernel builds a signal frame on the
//! thread's stack (or its alternate signal stack), and a thread whose stack
//! the program gave (`pthread_attr_setstack`) has its control block there
//! too (the kernel writes `rseq` and the exit futex into it). A missing page
//! there is not a fault the kernel waits on: with SIGBUS delivery the frame
//! cannot be written and the kernel kills the process with SIGSEGV.
//!
//! So a range used as a stack is held: brought in writable, pinned, and out
//! of the policy's lists until it is discarded (freed, unmapped). It is held
//! outside the near budget, which grows by it: a 2 MiB coroutine stack does
//! not take a 16 KiB budget whole, and the program's other pages keep the
//! room they had.
//!
//! Pages an eviction found pinned by the kernel are held too, for a while
//! (`pinned`): they share the room beyond the budget.

use super::RegionCore;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The held page ranges of one region.
pub(crate) struct Held {
    /// `[first, end)` page ranges, disjoint, unsorted.
    ranges: Mutex<Vec<(usize, usize)>>,
    /// Whether `ranges` may be non-empty: discards look only then.
    any: AtomicBool,
}

impl Held {
    pub(crate) fn new() -> Held {
        Held {
            ranges: Mutex::new(Vec::new()),
            any: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(usize, usize)>> {
        self.ranges.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The parts of `[a, b)` outside every range of `held`.
fn outside(a: usize, b: usize, held: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut sorted: Vec<_> = held.iter().copied().filter(|&(s, e)| s < b && e > a).collect();
    sorted.sort_unstable();
    let mut out = Vec::new();
    let mut at = a;
    for (s, e) in sorted {
        if s > at {
            out.push((at, s));
        }
        at = at.max(e);
    }
    if at < b {
        out.push((at, b));
    }
    out
}

impl RegionCore {
    /// Most pages held at once.
    pub(crate) fn held_peak_pages(&self) -> usize {
        self.slots.held().1
    }

    /// Holds pages `[first, first + count)` resident, writable and out of
    /// eviction until they are discarded (see the module doc). Returns how
    /// many pages were held now (not before), and whether all of the range
    /// is held: a page that cannot be brought in (poisoned, or outside what
    /// the program can reach) ends the range there.
    pub(crate) fn hold(&self, first: usize, count: usize, tid: u32) -> (usize, bool) {
        let end = (first + count).min(self.pages.len());
        let mut ranges = self.held.lock();
        let mut new = 0;
        for (a, b) in outside(first, end, &ranges) {
            let mut at = a;
            while at < b && self.hold_page(at, tid) {
                at += 1;
            }
            if at > a {
                ranges.push((a, at));
                self.held.any.store(true, Ordering::Relaxed);
                new += at - a;
            }
            if at < b {
                return (new, false);
            }
        }
        (new, end == first + count)
    }

    /// The held parts of pages `[first, end)`.
    pub(crate) fn held_in(&self, first: usize, end: usize) -> Vec<(usize, usize)> {
        if !self.held.any.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let ranges = self.held.lock();
        ranges
            .iter()
            .filter(|&&(s, e)| s < end && e > first)
            .map(|&(s, e)| (s.max(first), e.min(end)))
            .collect()
    }

    /// Ends the holds on pages `[first, end)` (a discard is about to drop
    /// them): they are ordinary resident pages again.
    pub(crate) fn unhold(&self, first: usize, end: usize) {
        self.unhold_pinned(first, end);
        if !self.held.any.load(Ordering::Relaxed) {
            return;
        }
        let mut ranges = self.held.lock();
        let mut kept = Vec::with_capacity(ranges.len() + 1);
        for &(s, e) in ranges.iter() {
            let (x, y) = (s.max(first), e.min(end));
            if x >= y {
                kept.push((s, e));
                continue;
            }
            for p in x..y {
                self.pages.unpin(p);
                self.policy().on_fill(p);
            }
            self.slots.change_held(-((y - x) as isize));
            if s < x {
                kept.push((s, x));
            }
            if y < e {
                kept.push((y, e));
            }
        }
        self.held.any.store(!kept.is_empty(), Ordering::Relaxed);
        *ranges = kept;
    }

    /// Holds page `i`; false if it cannot be brought in.
    fn hold_page(&self, i: usize, tid: u32) -> bool {
        if !self.access.reachable(i) {
            return false;
        }
        // Room first: the fill below must not evict for it.
        self.slots.change_held(1);
        // Writable: the kernel's writes must not meet write protection.
        if self.bring_in_pinned(i, true, tid) {
            // Off the lists: victim scans need not pass it over.
            self.policy().on_remove(i, false);
            true
        } else {
            self.slots.change_held(-1);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::outside;

    #[test]
    fn outside_leaves_the_gaps_between_held_ranges() {
        assert_eq!(outside(0, 10, &[]), vec![(0, 10)]);
        assert_eq!(outside(0, 10, &[(6, 8), (2, 3)]), vec![(0, 2), (3, 6), (8, 10)]);
        assert_eq!(outside(2, 5, &[(0, 3), (4, 9)]), vec![(3, 4)]);
        assert!(outside(2, 5, &[(0, 9)]).is_empty());
    }
}
