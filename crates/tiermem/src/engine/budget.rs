//! The near budget: a region's own, or one shared by several regions of a
//! process (the transparent heap and the static arrays it takes over get
//! one budget, as if they were one range).
//!
//! A region counts its resident pages itself and takes slots from the
//! budget in bytes (regions of one budget may have different page sizes).
//! When a shared budget is full and the faulting region has nothing it can
//! evict, it evicts a batch of another member's pages, in its own thread:
//! eviction is thread-safe, and a page being filled is never a victim, so
//! two regions evicting each other cannot wait on each other. Which pages
//! those evictions spare (`progress`) is the budget's too.

use super::progress::Progress;
use super::RegionCore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Near memory available to one or several regions.
pub(crate) struct Budget {
    limit_bytes: u64,
    used_bytes: AtomicU64,
    /// Of `used_bytes`, what members keep for good (frame rings).
    kept_bytes: AtomicU64,
    /// Of `used_bytes`, what kernel-mode accesses hold pinned now.
    pinned_bytes: AtomicU64,
    /// Pages held resident for good outside the limit (stacks, see
    /// `hold`): the limit grows by them.
    held_bytes: AtomicU64,
    /// Regions sharing it (empty for a region's own budget).
    members: Mutex<Vec<Weak<RegionCore>>>,
    /// Which pages evictions spare so that every fault makes progress:
    /// one state for all members (an instruction may need pages of two).
    pub(crate) progress: Progress,
}

impl Budget {
    pub(crate) fn new(limit_bytes: u64) -> Arc<Budget> {
        Arc::new(Budget {
            limit_bytes,
            used_bytes: AtomicU64::new(0),
            kept_bytes: AtomicU64::new(0),
            pinned_bytes: AtomicU64::new(0),
            held_bytes: AtomicU64::new(0),
            members: Mutex::new(Vec::new()),
            progress: Progress::new(),
        })
    }

    /// The limit in bytes.
    pub(crate) fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// The limit plus what is held outside it.
    fn room_bytes(&self) -> u64 {
        self.limit_bytes + self.held_bytes.load(Ordering::Relaxed)
    }

    /// Lets `bytes` more be resident, held outside the limit.
    pub(crate) fn hold(&self, bytes: u64) {
        self.held_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Ends what [`Budget::hold`] let in; the pages count against the limit
    /// again (evictions bring the total back under it).
    pub(crate) fn unhold(&self, bytes: u64) {
        self.held_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Takes up to `n` slots of `page` bytes; returns how many it got.
    pub(crate) fn take(&self, n: usize, page: usize) -> usize {
        let mut used = self.used_bytes.load(Ordering::Relaxed);
        loop {
            let fit = (self.room_bytes().saturating_sub(used) / page as u64) as usize;
            let got = n.min(fit);
            if got == 0 {
                return 0;
            }
            // Relaxed: the counter is a budget, not a publication; page
            // data is ordered by the page-state words.
            match self.used_bytes.compare_exchange_weak(
                used,
                used + (got * page) as u64,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return got,
                Err(now) => used = now,
            }
        }
    }

    /// Takes `n` slots of `page` bytes for as long as a member lives (its
    /// frame ring), all or nothing: only while all that members keep
    /// stays within a quarter of the limit, so that pages always find room
    /// (one ring is at most a quarter of a region's budget, but several
    /// regions' rings took a small shared budget whole, and every fault
    /// then failed). Give them back with [`Budget::give_back_kept`].
    pub(crate) fn keep(&self, n: usize, page: usize) -> bool {
        let bytes = (n * page) as u64;
        let kept = self.kept_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if kept <= self.limit_bytes / 4 {
            let got = self.take(n, page);
            if got == n {
                return true;
            }
            self.give_back(got, page);
        }
        self.kept_bytes.fetch_sub(bytes, Ordering::Relaxed);
        false
    }

    /// Gives back what [`Budget::keep`] took.
    pub(crate) fn give_back_kept(&self, n: usize, page: usize) {
        self.kept_bytes.fetch_sub((n * page) as u64, Ordering::Relaxed);
        self.give_back(n, page);
    }

    /// Gives `n` slots of `page` bytes back.
    pub(crate) fn give_back(&self, n: usize, page: usize) {
        self.used_bytes.fetch_sub((n * page) as u64, Ordering::Relaxed);
    }

    /// Counts a page of `page` bytes pinned for a kernel-mode access, if
    /// the pins of all members stay within half the limit (at least one
    /// page): faults must always find victims. A limit per region let the
    /// members of a small shared budget pin all of it between them.
    pub(crate) fn try_pin(&self, page: usize) -> bool {
        let allowance = (self.limit_bytes / 2).max(page as u64);
        let was = self.pinned_bytes.fetch_add(page as u64, Ordering::Relaxed);
        if was + page as u64 > allowance {
            self.pinned_bytes.fetch_sub(page as u64, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Whether any page is pinned now.
    pub(crate) fn has_pins(&self) -> bool {
        self.pinned_bytes.load(Ordering::Relaxed) > 0
    }

    /// Ends what [`Budget::try_pin`] counted.
    pub(crate) fn unpin(&self, page: usize) {
        self.pinned_bytes.fetch_sub(page as u64, Ordering::Relaxed);
    }

    /// Slots of `page` bytes free now.
    pub(crate) fn free(&self, page: usize) -> usize {
        (self
            .room_bytes()
            .saturating_sub(self.used_bytes.load(Ordering::Relaxed))
            / page as u64) as usize
    }

    /// Adds a region to a shared budget.
    pub(crate) fn join(&self, core: &Arc<RegionCore>) {
        let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|w| w.strong_count() > 0);
        m.push(Arc::downgrade(core));
    }

    /// The other live members of a shared budget, in turn.
    pub(crate) fn others(&self, me: &RegionCore) -> Vec<Arc<RegionCore>> {
        let m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        m.iter()
            .filter_map(Weak::upgrade)
            .filter(|c| !std::ptr::eq(Arc::as_ptr(c), me))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_and_gives_back_in_bytes() {
        let b = Budget::new(10 * 4096);
        assert_eq!(b.take(4, 4096), 4);
        assert_eq!(b.take(10, 4096), 6);
        assert_eq!(b.take(1, 4096), 0);
        b.give_back(3, 4096);
        assert_eq!(b.free(4096), 3);
        assert_eq!(b.take(1, 2 << 20), 0, "a 2 MiB page does not fit in 12 KiB");
        assert_eq!(b.limit_bytes(), 40960);
    }

    #[test]
    fn pins_of_all_members_stay_within_half() {
        let b = Budget::new(4 * 4096);
        assert!(b.try_pin(4096) && b.try_pin(4096));
        assert!(!b.try_pin(4096), "half of four pages pinned");
        b.unpin(4096);
        assert!(b.try_pin(4096));
        let small = Budget::new(4096);
        assert!(small.try_pin(4096), "one page at least");
        assert!(!small.try_pin(4096));
    }

    #[test]
    fn held_bytes_grow_the_room_until_released() {
        let b = Budget::new(4 * 4096);
        assert_eq!(b.take(4, 4096), 4);
        b.hold(2 * 4096);
        assert_eq!(b.take(4, 4096), 2, "two held pages fit beyond the limit");
        b.unhold(2 * 4096);
        assert_eq!(b.free(4096), 0);
        assert_eq!(b.take(1, 4096), 0, "over the limit until evictions catch up");
        b.give_back(3, 4096);
        assert_eq!(b.free(4096), 1);
    }

    #[test]
    fn members_keep_at_most_a_quarter() {
        let b = Budget::new(64 * 4096);
        assert!(b.keep(8, 4096));
        assert!(b.keep(8, 4096));
        assert!(!b.keep(1, 4096), "a quarter kept already");
        assert_eq!(b.free(4096), 48);
        b.give_back_kept(8, 4096);
        assert!(b.keep(8, 4096));
        // All or nothing when the pages are out.
        b.give_back_kept(16, 4096);
        assert_eq!(b.take(64, 4096), 64);
        assert!(!b.keep(4, 4096));
        assert_eq!(b.free(4096), 0);
    }
}
