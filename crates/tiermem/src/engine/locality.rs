//! Fault-around's decisions, apart from any installer: which cluster a
//! thread's demand fault calls for (its locality score over its recent
//! faults), how large clusters may be (halved while their neighbours go
//! unused), and the accounting of what they brought. The engine's
//! installer (`around`) and team mode's member fill both use it; a team
//! member process keeps its own, for its own faults.
//!
//! Each thread (hashed into one of [`SLOTS`] cache-line slots, plain
//! atomics, no lock) keeps its last [`HISTORY`] demand-fault pages and a
//! locality score. A fault within [`NEAR`] pages of one of them raises the
//! score by one, any other fault lowers it by two (random access switches
//! fault-around off within a few faults; GUPS never turns it on). The
//! cluster is the aligned window of `2^(score-1)` pages (at most
//! [`MAX_CLUSTER`]) around the fault.
//!
//! Accounting (statistics, and the cap's adaptation): a bit per page marks
//! neighbours installed by fault-around. A later demand fault of the same
//! thread within [`WALKED`] pages past one of its last clusters (it walked
//! through it) or a write of a marked page counts the pages as *used*. A
//! marked page found out of near memory (at its next fill, or when
//! statistics are read) was *evicted unused*: reads in the middle of a
//! cluster leave no trace in user space, so that count is an upper bound.

use super::stride::Stride;
use crate::page::PageTable;
use crate::stats::{FaultAroundStats, StrideStats};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use tiermem_sys::zeroed::ZeroedArray;

/// Largest cluster, in pages (the kernel's default fault-around is 64 KiB).
pub(crate) const MAX_CLUSTER: usize = 16;
/// Per-thread locality slots (threads hash into them).
pub(crate) const SLOTS: usize = 64;
/// Demand faults remembered per slot: enough for every array a loop walks
/// side by side (SP's solver about ten; with four, its faults found no
/// neighbour in the history and it took 6.4x the faults).
pub(crate) const HISTORY: usize = 16;
/// A fault this close (pages) to a remembered one shows locality: two
/// clusters, so that a sweep whose faults land one cluster apart counts.
const NEAR: usize = 2 * MAX_CLUSTER;
const MAX_SCORE: u32 = 8;
/// A fault at most this many pages past the thread's last cluster (either
/// side) means the thread walked through it.
const WALKED: usize = 4;
/// Neighbours installed between two looks at the waste (see `adapt`).
const ADAPT_EVERY: u64 = 4096;

/// One thread's recent demand faults (pages + 1; 0: empty) and score.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    hist: [AtomicUsize; HISTORY],
    next: AtomicU32,
    score: AtomicU32,
    /// The last clusters installed for this thread, `[first, end)` each
    /// (one per stream a loop may interleave: a stencil reads three rows
    /// and writes one).
    last_first: [AtomicUsize; HISTORY],
    last_end: [AtomicUsize; HISTORY],
    last_next: AtomicU32,
}

/// Fault-around state of one region.
pub(crate) struct FaultAround {
    slots: [Slot; SLOTS],
    /// One bit per page: installed by fault-around, not known used yet.
    marks: MarkBits,
    clusters: AtomicU64,
    installed: AtomicU64,
    used: AtomicU64,
    evicted_unused: AtomicU64,
    /// Largest cluster now: halved while more than a third of the neighbours
    /// leave near memory unused (a budget too small for the clusters:
    /// they evict each other), doubled back while few do (see `adapt`).
    cap: AtomicUsize,
    /// `installed` and `evicted_unused` at the last look.
    look: WasteLook,
    /// Halvings of `cap`.
    shrinks: AtomicU64,
    /// Stride detection over the same history (None: off).
    stride: Option<Stride>,
}

impl FaultAround {
    pub(crate) fn new(pages: usize, stride: bool) -> Result<FaultAround, tiermem_sys::mm::MmError> {
        Ok(FaultAround {
            stride: if stride {
                Some(Stride::new(pages, NEAR)?)
            } else {
                None
            },
            slots: std::array::from_fn(|_| Slot::default()),
            marks: MarkBits::new(pages)?,
            clusters: AtomicU64::new(0),
            installed: AtomicU64::new(0),
            used: AtomicU64::new(0),
            evicted_unused: AtomicU64::new(0),
            cap: AtomicUsize::new(MAX_CLUSTER),
            look: WasteLook::default(),
            shrinks: AtomicU64::new(0),
        })
    }

    /// Records a demand fault of `tid` at `page` and returns the cluster
    /// size its locality calls for (1: no fault-around).
    pub(crate) fn window(&self, tid: u32, page: usize) -> usize {
        self.window_counting(tid, page).0
    }

    /// [`Self::window`], and how many installed neighbours the fault showed
    /// used (the thread walked through them).
    pub(crate) fn window_counting(&self, tid: u32, page: usize) -> (usize, u64) {
        let s = &self.slots[tid as usize % SLOTS];
        let mut used = 0;
        // A fault right next to one of the thread's last clusters: it
        // walked through it.
        for (first, end) in s.last_first.iter().zip(&s.last_end) {
            let (a, b) = (first.load(Ordering::Relaxed), end.load(Ordering::Relaxed));
            if b > a && (page >= b && page - b < WALKED || page < a && a - page <= WALKED) {
                used += self.take_used(a, b);
                end.store(0, Ordering::Relaxed);
            }
        }
        let near = s.hist.iter().any(|h| {
            let h = h.load(Ordering::Relaxed);
            h != 0 && (h - 1).abs_diff(page) <= NEAR
        });
        // Load and store, not a read-modify-write: a slot is one thread's
        // (threads sharing a slot only blur each other's history).
        let k = s.next.load(Ordering::Relaxed);
        s.next.store(k.wrapping_add(1), Ordering::Relaxed);
        let k = k as usize % HISTORY;
        s.hist[k].store(page + 1, Ordering::Relaxed);
        let score = s.score.load(Ordering::Relaxed);
        let score = if near {
            (score + 1).min(MAX_SCORE)
        } else {
            score.saturating_sub(2)
        };
        s.score.store(score, Ordering::Relaxed);
        let n = if score < 2 {
            1
        } else {
            (1 << (score - 1)).min(MAX_CLUSTER)
        };
        (n, used)
    }

    /// Every [`ADAPT_EVERY`] neighbours installed: halves the cluster cap
    /// (down to 2: one neighbour, so that the waste is still measured)
    /// when more than a third of those evicted or refilled since the last
    /// look went unused, or more than half while several threads take
    /// turns at faulting in the region (`many_threads`), doubles it (up to
    /// [`MAX_CLUSTER`]) when under an eighth did. One thread wins the look;
    /// the others go on.
    ///
    /// The bounds: ImageMagick's column passes (one faulting thread) wasted
    /// about a third, under the old bound of a half, and took 25x their
    /// plain time; the budget held the pages they use, not the clusters. A
    /// quarter cost MG.A 14% more faults in its first touches and doubled
    /// SP.A's. With two threads the measure overstates the waste (the
    /// stencil counts 29% unused at two threads, 0.02% at one, where every
    /// page is used): at a third its clusters shrank and its faults doubled.
    pub(crate) fn adapt(&self, many_threads: bool) {
        let installed = self.installed.load(Ordering::Relaxed);
        let unused = || self.evicted_unused.load(Ordering::Relaxed);
        let Some(look) = self.look.look(installed, ADAPT_EVERY, unused) else {
            return;
        };
        let cap = self.cap.load(Ordering::Relaxed);
        let bound = if many_threads { 2 } else { 3 };
        let next = adapted_cap(cap, look, bound, (2, MAX_CLUSTER), &self.shrinks);
        self.cap.store(next, Ordering::Relaxed);
    }

    pub(crate) fn stride(&self) -> Option<&Stride> {
        self.stride.as_ref()
    }

    /// Thread `tid`'s recent demand faults (pages + 1; 0: empty).
    pub(crate) fn history(&self, tid: u32) -> [usize; HISTORY] {
        let s = &self.slots[tid as usize % SLOTS];
        std::array::from_fn(|k| s.hist[k].load(Ordering::Relaxed))
    }

    /// Stride-detection counters (zeros when it is off).
    pub(crate) fn stride_stats(&self, table: &PageTable) -> StrideStats {
        self.stride.as_ref().map(|s| s.stats(table)).unwrap_or_default()
    }

    /// The largest cluster now (see `adapt`).
    pub(crate) fn cap(&self) -> usize {
        self.cap.load(Ordering::Relaxed)
    }

    /// Records a cluster installed for thread `tid`: `[first, end)`, of
    /// which the pages `neighbours` came with the fault.
    pub(crate) fn installed_cluster(
        &self,
        tid: u32,
        first: usize,
        end: usize,
        neighbours: impl Iterator<Item = usize>,
    ) {
        let mut extra = 0;
        for p in neighbours {
            self.marks.mark(p);
            extra += 1;
        }
        if extra > 0 {
            self.clusters.fetch_add(1, Ordering::Relaxed);
            self.installed.fetch_add(extra, Ordering::Relaxed);
            self.remember(tid, first, end);
        }
    }

    fn remember(&self, tid: u32, first: usize, end: usize) {
        let s = &self.slots[tid as usize % SLOTS];
        let k = s.last_next.load(Ordering::Relaxed);
        s.last_next.store(k.wrapping_add(1), Ordering::Relaxed);
        let k = k as usize % HISTORY;
        s.last_first[k].store(first, Ordering::Relaxed);
        s.last_end[k].store(end, Ordering::Relaxed);
    }

    fn take_used(&self, a: usize, b: usize) -> u64 {
        let n = (a..b).filter(|&p| self.marks.take(p)).count() as u64;
        self.used.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// A page about to be filled again: if it still carries its mark (or
    /// stride detection's), it was evicted without being known used.
    /// True if it was.
    pub(crate) fn refilled(&self, p: usize) -> bool {
        if let Some(s) = &self.stride {
            s.refilled(p);
        }
        let unused = self.marks.take(p);
        if unused {
            self.evicted_unused.fetch_add(1, Ordering::Relaxed);
        }
        unused
    }

    /// Page `p` was written (a write-protect fault, or eviction found it
    /// changed): it was used.
    pub(crate) fn written(&self, p: usize) {
        if let Some(s) = &self.stride {
            s.written(p);
        }
        if self.marks.take(p) {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters; marked pages no longer in near memory (`gone`) are
    /// counted as evicted unused first.
    pub(crate) fn stats(&self, gone: impl Fn(usize) -> bool) -> FaultAroundStats {
        self.marks.gone(gone, |p| {
            self.refilled(p);
        });
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultAroundStats {
            clusters: ld(&self.clusters),
            installed: ld(&self.installed),
            used: ld(&self.used),
            evicted_unused: ld(&self.evicted_unused),
            cluster_cap: self.cap() as u64,
            shrinks: ld(&self.shrinks),
        }
    }

    /// Zeroes the counters (statistics reset); marks stay.
    pub(crate) fn reset_counters(&self) {
        if let Some(s) = &self.stride {
            s.reset_counters();
        }
        for c in [
            &self.clusters,
            &self.installed,
            &self.used,
            &self.evicted_unused,
            &self.shrinks,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// The counters at the last look at the waste of pages installed ahead
/// of their use (fault-around's neighbours, stride's pages ahead), whose
/// caps adapt to it.
#[derive(Default)]
pub(crate) struct WasteLook {
    seen_installed: AtomicU64,
    seen_unused: AtomicU64,
}

impl WasteLook {
    /// Every `every` pages installed: `(installed, wasted)` since the last
    /// look, for the one thread that wins the look (None for the others and
    /// between looks). A counter reset starts afresh. `unused` reads the
    /// count of pages evicted unused, only when needed.
    pub(crate) fn look(&self, installed: u64, every: u64, unused: impl Fn() -> u64) -> Option<(u64, u64)> {
        let seen = self.seen_installed.load(Ordering::Relaxed);
        if installed < seen {
            self.seen_installed.store(installed, Ordering::Relaxed);
            self.seen_unused.store(unused(), Ordering::Relaxed);
            return None;
        }
        if installed - seen < every
            || self
                .seen_installed
                .compare_exchange(seen, installed, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        let unused = unused();
        let wasted = unused.saturating_sub(self.seen_unused.swap(unused, Ordering::Relaxed));
        Some((installed - seen, wasted))
    }
}

/// The cap after a look that found `wasted` of `installed` pages unused:
/// halved (down to `min`, counted in `shrinks`) when more than one in
/// `shrink_over` were, doubled (up to `max`) when under an eighth were.
pub(crate) fn adapted_cap(
    cap: usize,
    (installed, wasted): (u64, u64),
    shrink_over: u64,
    (min, max): (usize, usize),
    shrinks: &AtomicU64,
) -> usize {
    if shrink_over * wasted > installed {
        shrinks.fetch_add(1, Ordering::Relaxed);
        (cap / 2).max(min)
    } else if 8 * wasted < installed {
        (cap * 2).min(max)
    } else {
        cap
    }
}

/// One bit per page, set for pages installed ahead of use (by
/// fault-around or stride detection) and cleared once known used or
/// counted unused.
pub(crate) struct MarkBits {
    bits: ZeroedArray<AtomicU64>,
    /// Words ever written (bounds the walk in `gone`).
    used: AtomicUsize,
}

impl MarkBits {
    pub(crate) fn new(pages: usize) -> Result<MarkBits, tiermem_sys::mm::MmError> {
        Ok(MarkBits {
            bits: ZeroedArray::new(pages.div_ceil(64))?,
            used: AtomicUsize::new(0),
        })
    }

    pub(crate) fn mark(&self, p: usize) {
        if p / 64 >= self.used.load(Ordering::Relaxed) {
            self.used.fetch_max(p / 64 + 1, Ordering::Relaxed);
        }
        self.bits[p / 64].fetch_or(1 << (p % 64), Ordering::Relaxed);
    }

    /// Clears page `p`'s mark; true if it was set (false for a page past
    /// the end).
    pub(crate) fn take(&self, p: usize) -> bool {
        let Some(word) = self.bits.get(p / 64) else {
            return false;
        };
        let bit = 1u64 << (p % 64);
        // Look before clearing: most pages carry no mark, and a plain load
        // keeps the line shared (random faults from several threads).
        word.load(Ordering::Relaxed) & bit != 0 && word.fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }

    /// Calls `gone` for every marked page that `is_gone` says is no longer
    /// in near memory: the stats' count of installs evicted unused.
    pub(crate) fn gone(&self, is_gone: impl Fn(usize) -> bool, mut gone: impl FnMut(usize)) {
        for (k, word) in self.bits[..self.used.load(Ordering::Relaxed)].iter().enumerate() {
            let mut bits = word.load(Ordering::Relaxed);
            while bits != 0 {
                let p = k * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if is_gone(p) {
                    gone(p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adds `n` installed neighbours of which `unused` were evicted unused,
    /// then lets the cap adapt.
    fn round(fa: &FaultAround, n: u64, unused: u64) -> usize {
        round_of(fa, n, unused, false)
    }

    /// `round`, with several threads taking turns at faulting or not.
    fn round_of(fa: &FaultAround, n: u64, unused: u64, many_threads: bool) -> usize {
        fa.installed.fetch_add(n, Ordering::Relaxed);
        fa.evicted_unused.fetch_add(unused, Ordering::Relaxed);
        fa.adapt(many_threads);
        fa.cap()
    }

    #[test]
    fn clusters_shrink_while_their_neighbours_go_unused_and_grow_back() {
        let fa = FaultAround::new(1 << 16, false).unwrap();
        assert_eq!(fa.cap(), MAX_CLUSTER);
        // Too few installs since the last look: nothing changes.
        assert_eq!(round(&fa, ADAPT_EVERY - 1, ADAPT_EVERY), MAX_CLUSTER);
        // Mostly wasted: halved each look, never below one neighbour.
        assert_eq!(round(&fa, 1, 0), MAX_CLUSTER / 2);
        assert_eq!(round(&fa, ADAPT_EVERY, ADAPT_EVERY * 3 / 4), MAX_CLUSTER / 4);
        for _ in 0..8 {
            round(&fa, ADAPT_EVERY, ADAPT_EVERY);
        }
        assert_eq!(fa.cap(), 2);
        // In between: kept.
        assert_eq!(round(&fa, ADAPT_EVERY, ADAPT_EVERY / 4), 2);
        // Little waste: doubled back up to the largest cluster.
        assert_eq!(round(&fa, ADAPT_EVERY, 0), 4);
        for _ in 0..8 {
            round(&fa, ADAPT_EVERY, ADAPT_EVERY / 16);
        }
        assert_eq!(fa.cap(), MAX_CLUSTER);
        // Over a third wasted is too much (a half was the bound before):
        // neighbours that come in too early displace the working set
        // (ImageMagick's column passes over a budget that held the pages
        // they use, not the clusters).
        assert_eq!(round(&fa, ADAPT_EVERY, ADAPT_EVERY * 3 / 8), MAX_CLUSTER / 2);
        // With several threads faulting, a half as before.
        assert_eq!(
            round_of(&fa, ADAPT_EVERY, ADAPT_EVERY * 3 / 8, true),
            MAX_CLUSTER / 2
        );
        assert!(fa.shrinks.load(Ordering::Relaxed) >= 6);
        // A statistics reset starts afresh without a change.
        fa.reset_counters();
        assert_eq!(round(&fa, 10, 10), MAX_CLUSTER / 2);
    }
}
