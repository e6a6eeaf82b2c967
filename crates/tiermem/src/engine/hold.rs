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
//! Pages the kernel has pinned are held too, for a while. A pin taken
//! outside tiermem's view (another process's `process_vm_writev`, which an
//! MPI library's single-copy transport makes, pins up to 4 MiB of this
//! process's pages before it copies into any of them; a direct read no
//! trap saw; io_uring fixed buffers) must not lose its page: evicted and
//! unmapped, the page would take the copy after the region had let it go,
//! and the data would read stale. An eviction that moves its victims out
//! (UFFDIO_MOVE, the frame ring) learns of the pin from the kernel, which
//! refuses to move a pinned page (EBUSY; it also refuses a page a fork()ed
//! child shares, or once shared, which only the pin ring holds, and not
//! while pagemap shows it shared: `ring_evict`): the page stays resident, off the
//! lists and outside the budget (the fill that wanted its slot goes on),
//! and goes back on the lists after [`PINNED_RETRY`] more evictions or
//! refusals; if it is still pinned then, the next try finds out the same
//! way. The kernel pins a call's pages up to 4 MiB (1,024 pages) at a time
//! and lets them all go before it pins the next ones, so a page held that
//! long ago is free, and a page of the batch in progress is not: retried
//! sooner, it is only refused again (the 64 of a first version churned:
//! millions of refusals). Refusals count because while every victim is
//! pinned nothing is evicted: counting evictions alone, a 16 MiB message at
//! a 16 KiB budget was held whole (15.9 MiB at the peak).

use super::RegionCore;
use crate::page::PageState;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Evictions and refusals after which a page found pinned goes back on the
/// policy's lists: the pages the kernel pins at most at once.
const PINNED_RETRY: u64 = 1024;

/// The held page ranges of one region.
pub(crate) struct Held {
    /// `[first, end)` page ranges, disjoint, unsorted.
    ranges: Mutex<Vec<(usize, usize)>>,
    /// Whether `ranges` may be non-empty: discards look only then.
    any: AtomicBool,
    /// Pages held now (the region's own budget grows by them).
    pages: AtomicUsize,
    /// Most pages held at once.
    peak: AtomicUsize,
    /// Pages an eviction found pinned by the kernel (see the module doc),
    /// oldest first, each with the count of evictions and refusals when it
    /// was held.
    pinned: Mutex<VecDeque<(usize, u64)>>,
    pinned_any: AtomicBool,
    /// Evictions refused because the kernel had the page pinned.
    pinned_refusals: AtomicU64,
}

impl Held {
    pub(crate) fn new() -> Held {
        Held {
            ranges: Mutex::new(Vec::new()),
            any: AtomicBool::new(false),
            pages: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            pinned: Mutex::new(VecDeque::new()),
            pinned_any: AtomicBool::new(false),
            pinned_refusals: AtomicU64::new(0),
        }
    }

    /// Pages held now.
    pub(crate) fn pages(&self) -> usize {
        self.pages.load(Ordering::Relaxed)
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
        self.held.peak.load(Ordering::Relaxed)
    }

    /// Evictions refused because the kernel had the page pinned.
    pub(crate) fn pinned_refusals(&self) -> u64 {
        self.held.pinned_refusals.load(Ordering::Relaxed)
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
            self.change_held(-((y - x) as isize));
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

    /// An eviction found page `i` pinned by the kernel: it stays resident
    /// (the caller unlocks it as it was), off the policy's lists (the
    /// victim selection took it off) and outside the budget, so that the
    /// fill waiting for a slot goes on (see the module doc).
    pub(super) fn hold_pinned(&self, i: usize) {
        let mut pinned = self.held.pinned.lock().unwrap_or_else(|p| p.into_inner());
        self.change_held(1);
        let refusals = self.held.pinned_refusals.fetch_add(1, Ordering::Relaxed) + 1;
        pinned.push_back((i, self.stats.evictions.load(Ordering::Relaxed) + refusals));
        self.held.pinned_any.store(true, Ordering::Release);
    }

    /// Puts the pages found pinned [`PINNED_RETRY`] evictions and refusals
    /// ago back on the policy's lists: an eviction that finds one still
    /// pinned holds it again.
    pub(super) fn retry_pinned(&self) {
        if !self.held.pinned_any.load(Ordering::Acquire) {
            return;
        }
        let now =
            self.stats.evictions.load(Ordering::Relaxed) + self.held.pinned_refusals.load(Ordering::Relaxed);
        let mut pinned = self.held.pinned.lock().unwrap_or_else(|p| p.into_inner());
        let due = pinned
            .iter()
            .take_while(|&&(_, at)| at + PINNED_RETRY <= now)
            .count();
        if due == 0 {
            return;
        }
        let pages: Vec<usize> = pinned.drain(..due).map(|(p, _)| p).collect();
        self.held.pinned_any.store(!pinned.is_empty(), Ordering::Release);
        drop(pinned);
        self.release_pinned(pages);
    }

    /// Ends the holds of pages found pinned in `[first, end)` (a discard
    /// is about to drop them).
    fn unhold_pinned(&self, first: usize, end: usize) {
        if !self.held.pinned_any.load(Ordering::Acquire) {
            return;
        }
        let mut pinned = self.held.pinned.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<usize> = pinned
            .iter()
            .map(|&(p, _)| p)
            .filter(|&p| p >= first && p < end)
            .collect();
        pinned.retain(|&(p, _)| p < first || p >= end);
        self.held.pinned_any.store(!pinned.is_empty(), Ordering::Release);
        drop(pinned);
        self.release_pinned(gone);
    }

    fn release_pinned(&self, pages: Vec<usize>) {
        if pages.is_empty() {
            return;
        }
        let mut policy = self.policy();
        for &p in &pages {
            // Resident pages go back on the lists. One in transition (a
            // fault marking it written) stays off them: never evicted, it
            // costs a slot, where a page on the lists that a discard racing
            // with this has just dropped would cost a wrong victim.
            if matches!(self.pages.load(p).state(), PageState::Clean | PageState::Dirty) {
                policy.on_fill(p);
            }
        }
        drop(policy);
        self.change_held(-(pages.len() as isize));
    }

    /// Holds page `i`; false if it cannot be brought in.
    fn hold_page(&self, i: usize, tid: u32) -> bool {
        if !self.access.reachable(i) {
            return false;
        }
        // Room first: the fill below must not evict for it.
        self.change_held(1);
        // Writable: the kernel's writes must not meet write protection.
        if self.bring_in_pinned(i, true, tid) {
            // Off the lists: victim scans need not pass it over.
            self.policy().on_remove(i, false);
            true
        } else {
            self.change_held(-1);
            false
        }
    }

    /// Grows (or shrinks) the room held pages get beyond the budget.
    pub(super) fn change_held(&self, pages: isize) {
        let bytes = (pages.unsigned_abs() * self.page_bytes) as u64;
        if pages >= 0 {
            let now = self.held.pages.fetch_add(pages as usize, Ordering::Relaxed) + pages as usize;
            self.held.peak.fetch_max(now, Ordering::Relaxed);
            if self.shared_budget {
                self.budget.hold(bytes);
            }
        } else {
            self.held.pages.fetch_sub(pages.unsigned_abs(), Ordering::Relaxed);
            if self.shared_budget {
                self.budget.unhold(bytes);
            }
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
