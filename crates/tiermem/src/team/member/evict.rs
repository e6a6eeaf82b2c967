//! A member's evictions: a window of the oldest pages on the team's ring
//! (FIFO, or fewest other sharers first), locked, sorted by page, and
//! evicted run by run (splice into a pipe, punch, splice into the far
//! file; a run of clean pages is only punched); batches grow over long
//! runs.

use super::{Lane, Member, MAX_WINDOW};
use crate::engine::{GROW_FACTOR, GROW_FROM, LONG_RUN};
use crate::stats::{Cost, FaultTimer};
use crate::team::ctl::{
    self, Ctl, Stat, Where, BUSY, DIRTY, H_BATCH, H_BUDGET, H_POLICY, H_RESIDENT, H_RING_HEAD, H_RING_TAIL,
    H_WINDOW,
};
use crate::team::TeamPolicy;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// The arrays of one eviction window, whatever their backing.
struct WindowBufs<'a> {
    entries: &'a mut [u64],
    victims: &'a mut [(u64, u64)],
    order: &'a mut [u16],
    keys: &'a mut [u32],
    taken: &'a mut [bool],
    words: &'a mut [u64],
}

/// An eviction window of `N` entries: preallocated ([`WindowScratch`],
/// `MAX_WINDOW` entries, about 20 KiB, on the heap) or the on-stack
/// fallback ([`SmallWindow`], about 1 KiB).
pub(super) struct Window<const N: usize> {
    entries: [u64; N],
    victims: [(u64, u64); N],
    order: [u16; N],
    keys: [u32; N],
    taken: [bool; N],
    words: [u64; N],
}

/// A preallocated eviction window.
pub(super) type WindowScratch = Box<Window<MAX_WINDOW>>;

/// Entries of the on-stack fallback window.
const SMALL_WINDOW: usize = 32;

/// The on-stack fallback window.
type SmallWindow = Window<SMALL_WINDOW>;

impl<const N: usize> Window<N> {
    pub(super) fn new() -> Window<N> {
        Window {
            entries: [0; N],
            victims: [(0, 0); N],
            order: [0; N],
            keys: [0; N],
            taken: [false; N],
            words: [0; N],
        }
    }

    fn bufs(&mut self) -> WindowBufs<'_> {
        WindowBufs {
            entries: &mut self.entries,
            victims: &mut self.victims,
            order: &mut self.order,
            keys: &mut self.keys,
            taken: &mut self.taken,
            words: &mut self.words,
        }
    }
}

/// A free window set, without waiting (safe in a signal handler; a fault
/// nested in one that holds a set finds it taken).
fn claim_window(sets: &[Mutex<WindowScratch>]) -> Option<std::sync::MutexGuard<'_, WindowScratch>> {
    crate::claim::try_claim(sets, 0)
}

impl Member {
    /// Evicts up to `want` pages chosen by the team's policy; returns how
    /// many left near memory.
    pub(super) fn evict_some(
        &self,
        ctl: &Ctl<'_>,
        rank: usize,
        want: usize,
        timer: &mut FaultTimer,
    ) -> usize {
        let start = std::time::Instant::now();
        // The arrays come from this member's scratch sets, or from a small
        // set on the stack (a smaller window) when all are taken: a fault
        // needs little of the faulting thread's stack.
        let mut small = SmallWindow::new();
        let mut claimed = claim_window(&self.scratch);
        let WindowBufs {
            entries,
            victims,
            order,
            keys,
            taken,
            words,
        } = match claimed.as_deref_mut() {
            Some(set) => set.bufs(),
            None => small.bufs(),
        };
        let cap = entries.len();
        // `victims`: (page, its word when locked), sorted by page below.
        let want = want.min(cap);
        self.lock_list(ctl, rank);
        let head = ctl.get(H_RING_HEAD);
        let avail = (ctl.get(H_RING_TAIL) - head) as usize;
        let sharer_aware = ctl.get(H_POLICY) == TeamPolicy::SharerAware as u64;
        let window = if sharer_aware {
            // A few candidates per victim find the evicting member's own
            // pages; scanning more only lengthens the critical section.
            (8 * want).max(16).min(ctl.get(H_WINDOW) as usize).max(2 * want)
        } else {
            want + 16
        }
        .min(avail)
        .min(cap);
        for (k, e) in entries[..window].iter_mut().enumerate() {
            *e = ctl.ring(head + k as u64).load(Ordering::Relaxed);
        }
        // Candidates in preference order: FIFO order, or fewest sharers
        // first (FIFO among equals). `order` holds window positions.
        for (k, o) in order[..window].iter_mut().enumerate() {
            *o = k as u16;
        }
        if sharer_aware {
            // Members other than this one that map the page: evicting it
            // interrupts exactly those (pages only this member maps cost
            // no remote shootdown).
            let me = ctl::sharer_bit(rank);
            // Keys are read once: other members change sharer masks while we
            // sort, and a comparison that changes its mind is not a total
            // order (Rust's sort then panics, here inside a signal handler).
            for (key, &e) in keys[..window].iter_mut().zip(&entries[..window]) {
                let w = ctl.page(e as usize).load(Ordering::Relaxed);
                *key = ctl::sharers(w & !me).count_ones();
            }
            order[..window].sort_unstable_by_key(|&k| (keys[k as usize], k));
        }
        taken[..window].iter_mut().for_each(|t| *t = false);
        let mut nv = 0;
        for &k in &order[..window] {
            if nv == want {
                break;
            }
            let p = entries[k as usize] as usize;
            let w = ctl.page(p).load(Ordering::Acquire);
            if w & BUSY != 0 || ctl::where_(w) != Where::Resident {
                continue;
            }
            if ctl
                .page(p)
                .compare_exchange(w, ctl::busy_by(w, rank), Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                taken[k as usize] = true;
                victims[nv] = (p as u64, w);
                nv += 1;
            }
        }
        // Keep the rest in order, right after the new head.
        let mut pos = head + nv as u64;
        for k in 0..window {
            if !taken[k] {
                ctl.ring(pos).store(entries[k], Ordering::Relaxed);
                pos += 1;
            }
        }
        ctl.set(H_RING_HEAD, head + nv as u64);
        self.unlock_list(ctl);
        timer.lap(Cost::LockList);
        if nv == 0 {
            return 0;
        }
        // By page, so that neighbours form runs (one punch each).
        let victims = &mut victims[..nv];
        victims.sort_unstable_by_key(|v| v.0);
        self.grow_batch(ctl, victims);
        for (w, v) in words.iter_mut().zip(victims.iter()) {
            *w = v.1;
        }
        let lane = self.lane(rank);
        let max_run = (lane.pipe.capacity() / self.view.page).max(1);
        let mut evicted = 0;
        let mut a = 0;
        while a < nv {
            // A run: neighbours of one kind, clean (punched only) or dirty
            // (written back through the pipe, whose size bounds it).
            let dirty = words[a] & DIRTY != 0;
            let mut b = a + 1;
            while b < nv
                && (b - a < max_run || !dirty)
                && victims[b].0 == victims[b - 1].0 + 1
                && (words[b] & DIRTY != 0) == dirty
            {
                b += 1;
            }
            let first = victims[a].0 as usize;
            evicted += self.evict_run(ctl, rank, dirty.then_some(lane), first, &words[a..b], timer);
            a = b;
        }
        lane.busy.store(false, Ordering::Release);
        ctl.add(rank, Stat::EvictNs, start.elapsed().as_nanos() as u64);
        evicted
    }

    /// Sizes this member's next eviction by the runs of `victims` (sorted,
    /// see [`next_batch`]).
    fn grow_batch(&self, ctl: &Ctl<'_>, victims: &[(u64, u64)]) {
        let next = next_batch(ctl.get(H_BATCH) as usize, ctl.get(H_BUDGET) as usize, victims);
        if self.grown.load(Ordering::Relaxed) != next {
            self.grown.store(next, Ordering::Relaxed);
        }
    }

    /// Evicts the locked pages `first..first+words.len()`. Dirty ones
    /// (`write_back`: the lane that writes them back) are spliced into its
    /// pipe (page references) before the punch and from the pipe into the
    /// far file after it; clean ones have current far copies, so the punch
    /// (which unmaps the pages wherever they are mapped) is all.
    fn evict_run(
        &self,
        ctl: &Ctl<'_>,
        rank: usize,
        write_back: Option<&Lane>,
        first: usize,
        words: &[u64],
        timer: &mut FaultTimer,
    ) -> usize {
        let ps = self.view.page;
        let n = words.len();
        let (off, bytes) = ((first * ps) as u64, n * ps);
        let data = self.view.data.as_fd();
        if let Some(lane) = write_back {
            if lane.pipe.fill_from(&data, off, bytes).is_err() {
                // Nothing changed yet: the pages stay near.
                lane.pipe.clear();
                self.keep(ctl, rank, first, words, None);
                return 0;
            }
            timer.lap(Cost::Transfer);
        }
        if tiermem_sys::memfd::punch_hole(data, off, bytes as u64).is_err() {
            if let Some(lane) = write_back {
                lane.pipe.clear();
            }
            self.keep(ctl, rank, first, words, None);
            return 0;
        }
        timer.lap(Cost::Tlb);
        if let Some(lane) = write_back {
            // Through the far file's mapping where that cannot fail for
            // space: no inode lock (the members' write-backs took turns
            // on it) and no page cache look-up per page.
            let drained = if self.view.far_in_place {
                lane.pipe.read_exact_into(&self.view.far_map, off as usize, bytes)
            } else {
                lane.pipe.drain_to(&self.view.far.as_fd(), off, bytes)
            };
            if let Err(short) = drained {
                return self.put_back(ctl, rank, lane, first, words, short.done);
            }
            timer.lap(Cost::Transfer);
        }
        self.evicted(ctl, rank, first, words);
        if write_back.is_some() {
            ctl.add(rank, Stat::BytesOut, bytes as u64);
        } else {
            ctl.add(rank, Stat::CleanEvictions, n as u64);
        }
        n
    }

    /// After a write-back of the punched pages `first..first+words.len()`
    /// that stopped after `written` bytes (the far file is full or
    /// failing): the pages written are evicted; the bytes still in
    /// `lane`'s pipe are put back (the pages are unmapped everywhere now,
    /// so a copy fills them again, mapped here only), and those it could
    /// not put back are marked lost. Returns the pages evicted.
    fn put_back(
        &self,
        ctl: &Ctl<'_>,
        rank: usize,
        lane: &Lane,
        first: usize,
        words: &[u64],
        written: usize,
    ) -> usize {
        let ps = self.view.page;
        let whole = (written / ps).min(words.len());
        if whole > 0 {
            self.evicted(ctl, rank, first, &words[..whole]);
            ctl.add(rank, Stat::BytesOut, (whole * ps) as u64);
        }
        let (first, words) = (first + whole, &words[whole..]);
        let n = words.len();
        let bytes = n * ps;
        let mut done = 0;
        let mut failed = false;
        // A page cut in two: its head reached the far file, its tail is
        // next in the pipe.
        let head = written % ps;
        if head > 0 && n > 0 {
            lane.bounce.copy_in(0, self.view.far_map.range(first * ps, head));
            failed = lane.pipe.read_exact_into(&lane.bounce, head, ps - head).is_err()
                || self.copy_some(first * ps, lane.bounce.range(0, ps)) < ps;
            if !failed {
                done = ps;
            }
        }
        while !failed && done < bytes {
            let chunk = (bytes - done).min(lane.bounce.len());
            let got = lane.pipe.read_into(&lane.bounce, chunk);
            // Pages mapped before a copy fails are restored too: they are
            // in the file, mapped here.
            let mapped = self.copy_some(first * ps + done, lane.bounce.range(0, got));
            done += mapped;
            if got == 0 || mapped < got {
                break;
            }
        }
        lane.pipe.clear();
        let restored = done / ps;
        let mine = ctl::sharer_bit(rank);
        self.keep(ctl, rank, first, &words[..restored], Some(mine));
        // Bytes that could not be put back are gone: say so on access
        // (SIGBUS) rather than return stale far contents.
        for k in restored..n {
            ctl.page(first + k).store(Where::Lost as u64, Ordering::Release);
        }
        ctl.w[H_RESIDENT].fetch_sub((n - restored) as u64, Ordering::AcqRel);
        whole
    }

    /// Publishes the pages `first..first+words.len()` as far, and counts
    /// them by sharers.
    fn evicted(&self, ctl: &Ctl<'_>, rank: usize, first: usize, words: &[u64]) {
        let n = words.len();
        let me = ctl::sharers(ctl::sharer_bit(rank));
        for (k, &w) in words.iter().enumerate() {
            let s = ctl::sharers(w);
            let class = if s == 0 {
                Stat::Victims0
            } else if s == me {
                Stat::VictimsSelf
            } else if s.count_ones() == 1 {
                Stat::VictimsOther
            } else {
                Stat::VictimsMany
            };
            ctl.add(rank, class, 1);
            ctl.add(rank, Stat::VictimRemoteSharers, (s & !me).count_ones() as u64);
            ctl.page(first + k).store(Where::Far as u64, Ordering::Release);
        }
        ctl.w[H_RESIDENT].fetch_sub(n as u64, Ordering::AcqRel);
        ctl.add(rank, Stat::Evictions, n as u64);
        ctl.add(rank, Stat::EvictCalls, 1);
    }

    /// An eviction that could not complete: the pages stay near, back on
    /// the list, with their sharers, or `sharers` if they were copied back
    /// (then only this member maps them, writable: dirty).
    fn keep(&self, ctl: &Ctl<'_>, rank: usize, first: usize, words: &[u64], sharers: Option<u64>) {
        ctl.add(rank, Stat::Errors, 1);
        self.push_ring(ctl, rank, first, words.len());
        for (k, &w) in words.iter().enumerate() {
            let w = ctl::unbusy(w);
            let w = sharers.map_or(w, |s| ctl::with_where(0, Where::Resident) | s | DIRTY);
            ctl.page(first + k).store(w, Ordering::Release);
        }
    }
}

/// The victims of a member's next eviction after one of `victims` (pages,
/// sorted) under a team batch of `base` and a budget of `budget` pages:
/// twice as many while they average [`LONG_RUN`] pages per run or more (a
/// punch covers a longer run), up to [`GROW_FACTOR`] times the batch, an
/// eighth of the budget and half the eviction window; 0 (the batch) when
/// they are scattered or the batch is under [`GROW_FROM`]. The engine's
/// rule for its faulting threads' batches.
fn next_batch(base: usize, budget: usize, victims: &[(u64, u64)]) -> usize {
    let runs = 1 + victims.windows(2).filter(|p| p[1].0 != p[0].0 + 1).count();
    if base < GROW_FROM || victims.is_empty() || runs * LONG_RUN > victims.len() {
        return 0;
    }
    (2 * victims.len())
        .min(base * GROW_FACTOR)
        .min(budget / 8)
        .min(MAX_WINDOW / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(ps: impl IntoIterator<Item = u64>) -> Vec<(u64, u64)> {
        ps.into_iter().map(|p| (p, 0)).collect()
    }

    #[test]
    fn batches_grow_over_long_runs_only() {
        let budget = 1 << 20;
        // Two runs of 32: doubled, then capped by the factor and the window.
        let two_runs = pages((0..32).chain(100..132));
        assert_eq!(next_batch(64, budget, &two_runs), 128);
        assert_eq!(
            next_batch(64, budget, &pages(0..200)),
            (MAX_WINDOW / 2).min(64 * GROW_FACTOR)
        );
        assert_eq!(next_batch(16, budget, &pages(0..200)), 16 * GROW_FACTOR);
        // Scattered victims, or a batch too small to judge: the batch.
        assert_eq!(next_batch(64, budget, &pages((0..64).map(|p| 3 * p))), 0);
        assert_eq!(next_batch(8, budget, &pages(0..8)), 0);
        assert_eq!(next_batch(64, budget, &[]), 0);
        // A small budget keeps its batches small.
        assert_eq!(next_batch(64, 512, &pages(0..64)), 64);
    }
}
