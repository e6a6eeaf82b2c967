//! Fault-around: a demand fault outside any prefetch stream installs a
//! small cluster of missing neighbours with it, in the same UFFDIO_COPY
//! (one per run of untouched or far pages), when the thread's recent
//! faults show spatial locality (the kernel's fault-around for file pages,
//! made adaptive). Demand faults a prefetch stream takes are left to it.
//!
//! Each thread (hashed into one of [`SLOTS`] cache-line slots, plain
//! atomics, no lock) keeps its last [`HISTORY`] demand-fault pages and a
//! locality score. A fault within [`NEAR`] pages of one of them raises the
//! score by one, any other fault lowers it by two (random access switches
//! fault-around off within a few faults; GUPS never turns it on). The
//! cluster is the aligned window of `2^(score-1)` pages (at most
//! [`MAX_CLUSTER`]) around the fault, narrowed to the contiguous pages
//! that are untouched or far (far ones only from a store that fetches runs
//! without staging) and can be locked at once: a busy neighbour ends the
//! cluster, nothing ever waits. Neighbours take free near slots only, and
//! never the last three (the faulting instruction may need three more
//! pages, see `progress`): the faulting page evicts as before when the
//! budget is full, its neighbours never evict.
//!
//! Install mode: a read fault installs the cluster write-protected (the
//! neighbours are `Clean`, their first write is a write-protect fault as
//! for any read fill); a write fault installs it writable, the neighbours
//! `Dirty` + VERIFY (eviction compares them with their far copy or with
//! zeros and writes back only those that changed), so a write sweep takes
//! no further fault on them.
//!
//! Accounting (statistics only): a bit per page marks neighbours installed
//! by fault-around. A later demand fault of the same thread within
//! [`WALKED`] pages past one of its last clusters (it walked through it)
//! or a write-protect fault on a
//! marked page counts the pages as *used*. A marked page found out of near
//! memory (at its next fill, or when statistics are read) was *evicted
//! unused*: reads in the middle of a cluster leave no trace in user space,
//! so that count is an upper bound.

use super::stride::Stride;
use super::{Outcome, RegionCore, Server};
use crate::config::PageSize;
use crate::page::{PageState, PageTable, PageWord};
use crate::stats::{Cost, FaultAroundStats, FaultKind, FaultTimer, StrideStats};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use tiermem_sys::uffd::{CopyMode, Resolved};
use tiermem_sys::zeroed::ZeroedArray;

/// Largest cluster, in pages (the kernel's default fault-around is 64 KiB).
pub(crate) const MAX_CLUSTER: usize = 16;
/// Per-thread locality slots (threads hash into them).
pub(super) const SLOTS: usize = 64;
/// Demand faults remembered per slot: enough for every array a loop walks
/// side by side (SP's solver about ten; with four, its faults found no
/// neighbour in the history and it took 6.4x the faults).
pub(super) const HISTORY: usize = 16;
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
    marks: ZeroedArray<AtomicU64>,
    /// Words of `marks` ever written (bounds the walk in `stats`).
    marks_used: AtomicUsize,
    clusters: AtomicU64,
    installed: AtomicU64,
    used: AtomicU64,
    evicted_unused: AtomicU64,
    /// Largest cluster now: halved while more than a third of the neighbours
    /// leave near memory unused (a budget too small for the clusters:
    /// they evict each other), doubled back while few do (see `adapt`).
    cap: AtomicUsize,
    /// `installed` and `evicted_unused` at the last look.
    seen_installed: AtomicU64,
    seen_unused: AtomicU64,
    /// Halvings of `cap`.
    shrinks: AtomicU64,
    /// Stride detection over the same history (None: off).
    stride: Option<Stride>,
}

/// The pages of a cluster around fault page `at`: `[first, end)`, every
/// page but `at` locked by the caller, with its word before locking.
pub(super) struct Cluster {
    at: usize,
    first: usize,
    end: usize,
    base: usize,
    words: [PageWord; MAX_CLUSTER],
}

impl Cluster {
    fn single(at: usize) -> Cluster {
        Cluster {
            at,
            first: at,
            end: at + 1,
            base: at,
            words: [PageWord::new(PageState::Untouched, false); MAX_CLUSTER],
        }
    }
    pub(super) fn len(&self) -> usize {
        self.end - self.first
    }
    fn word(&self, p: usize) -> PageWord {
        self.words[p - self.base]
    }
    fn neighbours(&self) -> impl Iterator<Item = (usize, PageWord)> + '_ {
        (self.first..self.end)
            .filter(move |&p| p != self.at)
            .map(|p| (p, self.word(p)))
    }
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
            marks: ZeroedArray::new(pages.div_ceil(64))?,
            marks_used: AtomicUsize::new(0),
            clusters: AtomicU64::new(0),
            installed: AtomicU64::new(0),
            used: AtomicU64::new(0),
            evicted_unused: AtomicU64::new(0),
            cap: AtomicUsize::new(MAX_CLUSTER),
            seen_installed: AtomicU64::new(0),
            seen_unused: AtomicU64::new(0),
            shrinks: AtomicU64::new(0),
        })
    }

    /// Records a demand fault of `tid` at `page` and returns the cluster
    /// size its locality calls for (1: no fault-around).
    fn window(&self, tid: u32, page: usize) -> usize {
        let s = &self.slots[tid as usize % SLOTS];
        // A fault right next to one of the thread's last clusters: it
        // walked through it.
        for (first, end) in s.last_first.iter().zip(&s.last_end) {
            let (a, b) = (first.load(Ordering::Relaxed), end.load(Ordering::Relaxed));
            if b > a && (page >= b && page - b < WALKED || page < a && a - page <= WALKED) {
                self.take_used(a, b);
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
        if score < 2 {
            1
        } else {
            (1 << (score - 1)).min(MAX_CLUSTER)
        }
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
    fn adapt(&self, many_threads: bool) {
        let installed = self.installed.load(Ordering::Relaxed);
        let seen = self.seen_installed.load(Ordering::Relaxed);
        // A counter reset since the last look: start afresh.
        if installed < seen {
            self.seen_installed.store(installed, Ordering::Relaxed);
            self.seen_unused
                .store(self.evicted_unused.load(Ordering::Relaxed), Ordering::Relaxed);
            return;
        }
        if installed - seen < ADAPT_EVERY
            || self
                .seen_installed
                .compare_exchange(seen, installed, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let unused = self.evicted_unused.load(Ordering::Relaxed);
        let wasted = unused.saturating_sub(self.seen_unused.swap(unused, Ordering::Relaxed));
        let cap = self.cap.load(Ordering::Relaxed);
        let bound = if many_threads { 2 } else { 3 };
        let next = if bound * wasted > installed - seen {
            self.shrinks.fetch_add(1, Ordering::Relaxed);
            (cap / 2).max(2)
        } else if 8 * wasted < installed - seen {
            (cap * 2).min(MAX_CLUSTER)
        } else {
            cap
        };
        self.cap.store(next, Ordering::Relaxed);
    }

    pub(super) fn stride(&self) -> Option<&Stride> {
        self.stride.as_ref()
    }

    /// Thread `tid`'s recent demand faults (pages + 1; 0: empty).
    pub(super) fn history(&self, tid: u32) -> [usize; HISTORY] {
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

    fn remember(&self, tid: u32, first: usize, end: usize) {
        let s = &self.slots[tid as usize % SLOTS];
        let k = s.last_next.load(Ordering::Relaxed);
        s.last_next.store(k.wrapping_add(1), Ordering::Relaxed);
        let k = k as usize % HISTORY;
        s.last_first[k].store(first, Ordering::Relaxed);
        s.last_end[k].store(end, Ordering::Relaxed);
    }

    fn mark(&self, p: usize) {
        if p / 64 >= self.marks_used.load(Ordering::Relaxed) {
            self.marks_used.fetch_max(p / 64 + 1, Ordering::Relaxed);
        }
        self.marks[p / 64].fetch_or(1 << (p % 64), Ordering::Relaxed);
    }

    /// Clears page `p`'s mark; true if it was set.
    fn take(&self, p: usize) -> bool {
        let bit = 1u64 << (p % 64);
        let word = &self.marks[p / 64];
        // Look before clearing: most pages carry no mark, and a plain load
        // keeps the line shared (random faults from several threads).
        word.load(Ordering::Relaxed) & bit != 0 && word.fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }

    fn take_used(&self, a: usize, b: usize) {
        let n = (a..b).filter(|&p| self.take(p)).count();
        self.used.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A page about to be filled again: if it still carries its mark (or
    /// stride detection's), it was evicted without being known used.
    pub(super) fn refilled(&self, p: usize) {
        if let Some(s) = &self.stride {
            s.refilled(p);
        }
        if self.take(p) {
            self.evicted_unused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Page `p` was written (a write-protect fault, or eviction found it
    /// changed): it was used.
    pub(crate) fn written(&self, p: usize) {
        if let Some(s) = &self.stride {
            s.written(p);
        }
        if self.take(p) {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters; marked pages no longer in near memory are counted as
    /// evicted unused first.
    pub(crate) fn stats(&self, table: &PageTable) -> FaultAroundStats {
        marked_out_of_near(
            &self.marks[..self.marks_used.load(Ordering::Relaxed)],
            table,
            |p| self.refilled(p),
        );
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

impl RegionCore {
    /// Locks the cluster a demand fault on page `i` (owned, was `w`, its
    /// near slot taken) should bring in with it, and takes free slots for
    /// the neighbours. A single page when fault-around is off, the page is
    /// not 4 KiB, a prefetch stream takes the fault, or the thread shows no
    /// locality.
    pub(super) fn claim_around(&self, i: usize, w: PageWord, tid: u32) -> Cluster {
        let mut c = Cluster::single(i);
        let Some(fa) = &self.around else {
            return c;
        };
        fa.refilled(i);
        fa.adapt(self.faulting_threads.many());
        let n = fa.window(tid, i).min(fa.cap());
        let far = w.state() == PageState::Far;
        if n < 2 || (far && self.staging.is_some()) {
            return c;
        }
        if self.prefetcher.as_ref().is_some_and(|pf| pf.claims(tid, i)) {
            return c;
        }
        let lo = i & !(n - 1);
        let hi = (lo + n).min(self.pages.len());
        c.base = lo;
        c.words[i - lo] = w;
        // Untouched and far pages mix (one copy per run of a kind); a store
        // that reads through per-page staging buffers cannot fetch a run on
        // the fault path: zero fills only there.
        let far_ok = self.staging.is_none();
        let take = |p: usize, c: &mut Cluster| {
            let nw = self.pages.load(p);
            let fits = match nw.state() {
                PageState::Untouched => true,
                PageState::Far => far_ok,
                _ => false,
            };
            if fits && self.pages.try_lock(p, nw) {
                c.words[p - lo] = nw;
                true
            } else {
                false
            }
        };
        while c.end < hi && take(c.end, &mut c) {
            c.end += 1;
        }
        while c.first > lo && take(c.first - 1, &mut c) {
            c.first -= 1;
        }
        let want = c.len() - 1;
        if want == 0 {
            return c;
        }
        // Free slots only, and never the last three: neighbours never
        // evict, and the instruction that faults may need three more pages
        // (MIN_NEAR_PAGES); on a budget of a few pages, clusters that took
        // them were evicted by its next fault, and its first page with
        // them, forever (issue 30).
        let room = self
            .free_slots()
            .saturating_sub(crate::config::MIN_NEAR_PAGES - 1);
        let got = if room == 0 {
            0
        } else {
            self.take_slots(want.min(room))
        };
        let mut excess = want - got;
        while excess > 0 && c.end > i + 1 {
            c.end -= 1;
            self.pages.unlock(c.end, c.word(c.end));
            excess -= 1;
        }
        while excess > 0 && c.first < i {
            self.pages.unlock(c.first, c.word(c.first));
            c.first += 1;
            excess -= 1;
        }
        for (p, _) in c.neighbours() {
            fa.refilled(p);
        }
        c
    }

    /// Fills a cluster claimed by [`Self::claim_around`] (more than one
    /// page) and publishes it: one UFFDIO_COPY per run of pages of one
    /// kind (one in all when the neighbours are all untouched or all far).
    /// None: the faulting page itself could not be installed; the
    /// neighbours that were are published, the others handed back, and the
    /// caller fills the page alone.
    pub(super) fn fill_cluster(
        &self,
        c: &Cluster,
        write: bool,
        tid: u32,
        server: Server,
        timer: &mut FaultTimer,
    ) -> Option<Outcome> {
        let ps = self.page_bytes;
        let mut ok = [false; MAX_CLUSTER];
        // A read of a page written during its last stay installs the
        // cluster writable, as a write does (the rewrite hint).
        let rewrite = !write && self.expects_rewrite(c.at, c.word(c.at));
        let writable = write || rewrite;
        let mode = CopyMode {
            write_protect: !writable,
            dont_wake: server == Server::InContext,
        };
        let mut at_read_failed = false;
        // Frame recycling (synchronous path): the cluster's leading pages
        // go into frames evicted earlier, moved into place (writable).
        let m = self
            .sync_ring()
            .map(|ring| {
                let mut run = [(0, PageWord::new(PageState::Untouched, false)); MAX_CLUSTER];
                for (k, p) in (c.first..c.end).enumerate() {
                    run[k] = (p, c.word(p));
                }
                self.install_by_move(ring, &run[..c.len()], timer)
            })
            .unwrap_or_default();
        ok[c.first - c.base..c.first - c.base + m.done]
            .iter_mut()
            .for_each(|x| *x = true);
        let was_moved = |p: usize| p < c.first + m.done;
        // Pages whose read failed (reported) are not read again.
        at_read_failed |= (c.first + m.done..c.first + m.resume_at()).contains(&c.at);
        let mut s = c.first + m.resume_at();
        while s < c.end {
            let far = c.word(s).state() == PageState::Far;
            let mut e = s + 1;
            while e < c.end && (c.word(e).state() == PageState::Far) == far {
                e += 1;
            }
            let (off, len) = (s * ps, (e - s) * ps);
            let src = if far {
                let r = self.store.fetch(off as u64, len, None);
                timer.lap(Cost::Transfer);
                // Reported like any failed read (io_errors and the error
                // log), once. The neighbours stay far, for their own demand
                // fills to try again; the faulting page, if in this run, is
                // poisoned below as a failed fill of it would be.
                match r {
                    Ok(src) => Some(src),
                    Err(err) => {
                        self.store_failed(off as u64, super::errors::OP_READ, &err);
                        at_read_failed |= (s..e).contains(&c.at);
                        None
                    }
                }
            } else {
                Some(self.zeros.range(0, len))
            };
            // Bytes installed from the start of the run.
            let mut done = 0;
            while let Some(src) = src.filter(|_| done < len) {
                match self
                    .uffd
                    .copy(&self.reg, off + done, src.sub(done, len - done), mode)
                {
                    Ok(Resolved::Done) => done = len,
                    Ok(Resolved::Partial { bytes }) if bytes > 0 => done += bytes,
                    Ok(Resolved::Partial { .. }) => std::thread::yield_now(),
                    Ok(Resolved::AlreadyMapped) => done += ps,
                    Err(err) => {
                        self.errors.record(
                            (off + done) as u64,
                            super::errors::OP_INSTALL,
                            err.errno().map_or(0, |e| e.raw()),
                        );
                        break;
                    }
                }
            }
            timer.lap(Cost::Pte);
            let n = done / ps;
            ok[s - c.base..s - c.base + n].iter_mut().for_each(|x| *x = true);
            if far {
                self.stats.bytes_in.fetch_add(done as u64, Ordering::Relaxed);
            }
            s = e;
        }
        let is_ok = |p: usize| ok[p - c.base];
        {
            let mut policy = self.policy();
            for p in (c.first..c.end).filter(|&p| is_ok(p)) {
                policy.on_fill(p);
            }
        }
        let fa = self.around.as_ref().expect("a cluster needs fault-around");
        let mut extra = 0;
        for (p, _) in c.neighbours().filter(|&(p, _)| is_ok(p)) {
            fa.mark(p);
            extra += 1;
        }
        if extra > 0 {
            fa.clusters.fetch_add(1, Ordering::Relaxed);
            fa.installed.fetch_add(extra, Ordering::Relaxed);
            fa.remember(tid, c.first, c.end);
        }
        timer.lap(Cost::LockList);
        let w = c.word(c.at);
        if is_ok(c.at) {
            // Record before publishing (see `fill`).
            let kind = if w.state() == PageState::Far {
                FaultKind::FarFill
            } else {
                FaultKind::ZeroFill
            };
            self.stats
                .record_fault(kind, tid, std::mem::replace(timer, FaultTimer::start()));
        }
        for (p, nw) in c.neighbours() {
            if is_ok(p) {
                let next = if writable || was_moved(p) {
                    // Installed writable but not written: dirty until
                    // eviction finds it unchanged.
                    PageWord::dirty_unverified(nw.far_valid())
                } else {
                    PageWord::new(PageState::Clean, nw.far_valid())
                };
                self.pages.unlock(p, next);
            } else {
                self.release_slots(1);
                self.pages.unlock(p, nw);
            }
        }
        if at_read_failed {
            self.release_slots(1);
            return Some(self.poison(c.at, w, server));
        }
        if !is_ok(c.at) {
            return None;
        }
        let next = if write {
            PageWord::new(PageState::Dirty, w.far_valid())
        } else if rewrite {
            self.count_rewrites((c.first..c.end).filter(|&p| is_ok(p)).count());
            PageWord::dirty_unverified(w.far_valid())
        } else if was_moved(c.at) {
            PageWord::dirty_unverified(w.far_valid())
        } else {
            PageWord::new(PageState::Clean, w.far_valid())
        };
        self.pages.unlock(c.at, next);
        Some(Outcome::Resolved)
    }

    /// Whether fault-around applies to this region's pages at all.
    pub(super) fn around_enabled(config: &crate::config::Config) -> bool {
        config.fault_around && config.page_size == PageSize::Base4K
    }
}

/// Calls `gone` for every page marked in `marks` (a bit per page) that is
/// no longer in near memory: the stats' count of installs evicted unused,
/// for fault-around and stride detection alike.
pub(super) fn marked_out_of_near(marks: &[AtomicU64], table: &PageTable, mut gone: impl FnMut(usize)) {
    for (k, word) in marks.iter().enumerate() {
        let mut bits = word.load(Ordering::Relaxed);
        while bits != 0 {
            let p = k * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if p < table.len() && matches!(table.load(p).state(), PageState::Untouched | PageState::Far) {
                gone(p);
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
