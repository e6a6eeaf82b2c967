//! A region's near slots: how many of its pages may be resident, how many
//! are, and the room held pages get beyond the budget. The lowest part of
//! the engine with state: the installer takes slots, the evictor gives
//! them back, and neither asks the other.
//!
//! A region's own budget is its resident count against a page limit (one
//! CAS a fill); a budget shared with other regions (`budget.rs`) counts
//! bytes across them, and the region still counts its own pages (for its
//! report and to give them back when it goes).

use super::budget::Budget;
use super::RegionCore;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The near slots of one region.
pub(crate) struct Slots {
    /// The budget shared with other regions, or this region's own (whose
    /// byte count it does not use: `resident` is its count). Either way it
    /// keeps the forward-progress state and the pin count.
    pub(crate) budget: Arc<Budget>,
    shared: bool,
    /// This region's share of the budget in its own pages (all of it when
    /// the budget is shared): sizes eviction and mover batches.
    own_pages: usize,
    page_bytes: usize,
    /// Pages of this region resident (or reserved for a fill).
    resident: AtomicUsize,
    /// Pages held resident for good outside the budget (stacks, pages the
    /// kernel pinned): the budget grows by them.
    held: AtomicUsize,
    /// Most pages held at once.
    held_peak: AtomicUsize,
    /// What the region keeps for good out of a shared budget.
    _kept: Kept,
}

/// Slots a region keeps for good (its frame ring's) out of a shared
/// budget: all or nothing, never past a quarter of it (`Budget::keep`),
/// and given back when this goes. A region's own budget keeps nothing:
/// its owner makes the budget smaller instead.
pub(crate) struct Kept {
    shared: Option<Arc<Budget>>,
    pages: usize,
    page_bytes: usize,
}

impl Kept {
    pub(crate) fn new(shared: Option<&Arc<Budget>>, page_bytes: usize) -> Kept {
        Kept {
            shared: shared.cloned(),
            pages: 0,
            page_bytes,
        }
    }

    /// Keeps `n` slots more; false if the shared budget cannot spare them.
    pub(crate) fn keep(&mut self, n: usize) -> bool {
        match &self.shared {
            Some(b) if !b.keep(n, self.page_bytes) => false,
            _ => {
                self.pages += n;
                true
            }
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some(b) = &self.shared {
            b.give_back_kept(self.pages, self.page_bytes);
        }
    }
}

impl Slots {
    /// `own_pages` of `page_bytes` each, out of `shared` if given (the
    /// caller sized them from it), else a budget of their own; with what
    /// the region keeps for good.
    pub(crate) fn new(shared: Option<Arc<Budget>>, own_pages: usize, page_bytes: usize, kept: Kept) -> Slots {
        Slots {
            shared: shared.is_some(),
            budget: shared.unwrap_or_else(|| Budget::new((own_pages * page_bytes) as u64)),
            own_pages,
            page_bytes,
            resident: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            held_peak: AtomicUsize::new(0),
            _kept: kept,
        }
    }

    /// This region's share of the budget, in its pages.
    pub(crate) fn own_pages(&self) -> usize {
        self.own_pages
    }

    /// Pages resident now (or reserved for fills).
    pub(crate) fn resident(&self) -> usize {
        self.resident.load(Ordering::Relaxed)
    }

    /// Pages held outside the budget now, and at most.
    pub(crate) fn held(&self) -> (usize, usize) {
        (
            self.held.load(Ordering::Relaxed),
            self.held_peak.load(Ordering::Relaxed),
        )
    }

    /// Slots free now.
    pub(crate) fn free(&self) -> usize {
        if self.shared {
            self.budget.free(self.page_bytes)
        } else {
            (self.own_pages + self.held.load(Ordering::Relaxed)).saturating_sub(self.resident())
        }
    }

    /// Takes up to `n` slots; returns how many, and the resident count
    /// with them.
    pub(crate) fn take(&self, n: usize) -> (usize, usize) {
        if self.shared {
            let got = self.budget.take(n, self.page_bytes);
            return (got, self.resident.fetch_add(got, Ordering::Relaxed) + got);
        }
        // A region's own budget is its resident count: one CAS.
        let mut r = self.resident.load(Ordering::Relaxed);
        loop {
            let got = n.min((self.own_pages + self.held.load(Ordering::Relaxed)).saturating_sub(r));
            if got == 0 {
                return (0, r);
            }
            // Relaxed: the counter is a budget, not a publication; page
            // data is ordered by the page-state words.
            match self
                .resident
                .compare_exchange_weak(r, r + got, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return (got, r + got),
                Err(now) => r = now,
            }
        }
    }

    /// Gives back `n` slots (pages that left, or fills that failed).
    pub(crate) fn release(&self, n: usize) {
        self.resident.fetch_sub(n, Ordering::Relaxed);
        if self.shared {
            self.budget.give_back(n, self.page_bytes);
        }
    }

    /// Grows (or shrinks) the room held pages get beyond the budget.
    pub(crate) fn change_held(&self, pages: isize) {
        let bytes = (pages.unsigned_abs() * self.page_bytes) as u64;
        if pages >= 0 {
            let now = self.held.fetch_add(pages as usize, Ordering::Relaxed) + pages as usize;
            self.held_peak.fetch_max(now, Ordering::Relaxed);
            if self.shared {
                self.budget.hold(bytes);
            }
        } else {
            self.held.fetch_sub(pages.unsigned_abs(), Ordering::Relaxed);
            if self.shared {
                self.budget.unhold(bytes);
            }
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // A shared budget outlives the region: give its pages' room back,
        // and the room its held pages added (the kept slots go with
        // `_kept`).
        if self.shared {
            self.budget.give_back(self.resident(), self.page_bytes);
            self.budget
                .unhold((self.held.load(Ordering::Relaxed) * self.page_bytes) as u64);
        }
    }
}

impl RegionCore {
    /// Near slots free now.
    pub(crate) fn free_slots(&self) -> usize {
        self.slots.free()
    }

    /// Gives back `n` slots (pages that left, or fills that failed).
    pub(crate) fn release_slots(&self, n: usize) {
        self.slots.release(n);
    }

    /// Takes up to `n` near slots for this region; returns how many.
    pub(super) fn take_slots(&self, n: usize) -> usize {
        let (got, r) = self.slots.take(n);
        // Read first: the high-water mark rarely moves, and a write to a
        // shared line on every fault would cost more than the check.
        if got > 0 && r as u64 > self.stats.resident_peak.load(Ordering::Relaxed) {
            self.stats.resident_peak.fetch_max(r as u64, Ordering::Relaxed);
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_slots_are_the_resident_count_and_grow_by_held_pages() {
        let s = Slots::new(None, 4, 4096, Kept::new(None, 4096));
        assert_eq!(s.take(3), (3, 3));
        assert_eq!(s.take(3), (1, 4), "only what is left");
        assert_eq!(s.take(1), (0, 4));
        s.change_held(2);
        assert_eq!(s.free(), 2);
        assert_eq!(s.take(5), (2, 6));
        s.release(6);
        s.change_held(-2);
        assert_eq!((s.resident(), s.free(), s.held()), (0, 4, (0, 2)));
    }

    #[test]
    fn shared_slots_count_in_the_budget_and_go_back_when_dropped() {
        let b = Budget::new(8 * 4096);
        let a = Slots::new(Some(b.clone()), 8, 4096, Kept::new(Some(&b), 4096));
        let c = Slots::new(Some(b.clone()), 8, 4096, Kept::new(Some(&b), 4096));
        assert_eq!(a.take(5).0, 5);
        assert_eq!(c.take(5).0, 3, "the other region took the rest");
        assert_eq!(a.free(), 0);
        c.change_held(1);
        assert_eq!(a.take(2).0, 1, "held room is the budget's");
        drop(a);
        assert_eq!(c.free(), 6, "the dropped region's 6 pages came back");
        c.release(3);
        c.change_held(-1);
        assert_eq!(c.free(), 8);
        drop(c);
        assert_eq!(b.free(4096), 8);
    }

    #[test]
    fn a_dropped_region_gives_back_its_held_room_and_kept_slots() {
        let b = Budget::new(16 * 4096);
        let mut kept = Kept::new(Some(&b), 4096);
        assert!(kept.keep(4));
        assert!(!kept.keep(1), "never past a quarter");
        let a = Slots::new(Some(b.clone()), 12, 4096, kept);
        assert_eq!(b.free(4096), 12);
        a.change_held(3);
        assert_eq!(a.take(15).0, 15);
        drop(a);
        assert_eq!(b.free(4096), 16, "resident, held and kept all came back");
        let mut failed = Kept::new(Some(&b), 4096);
        assert!(failed.keep(4));
        drop(failed);
        assert_eq!(
            b.free(4096),
            16,
            "a construction that failed gives its kept slots back"
        );
    }
}
