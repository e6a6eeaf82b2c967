//! Fills of requests rather than of single faults: a mover's prefetch,
//! a faulting thread catching up with a stream, an explicit prefetch or
//! touch (`tm_prefetch`, `tm_touch`). Runs of pages go in through
//! `install_run` (fill.rs) with room made first by `reserve_up_to`.

use super::prefetch::Request;
use super::progress::Keep;
use super::scratch::SmallFill;
use super::RegionCore;
use crate::page::{PageState, PageWord};
use crate::stats::FaultTimer;
use crate::store::StagingSlot;
use std::sync::atomic::Ordering;

/// Pages per run a mover fills by frame recycling (one move call each):
/// short enough that a thread that catches up with the mover waits ~30 us
/// for a run at most, long enough that the calls cost little.
const MOVER_RUN: usize = 64;

impl RegionCore {
    /// Fills the pages of a request that are not resident yet (a mover's
    /// prefetch, or an explicit prefetch). Returns pages filled.
    pub(crate) fn mover_fill(&self, r: &Request, staging: Option<&StagingSlot<'_>>) -> usize {
        self.fill_request(r, staging, self.prefetcher.is_some())
    }

    /// `mover_fill`; `prefetch` marks the pages prefetched (a catch-up
    /// fill by a faulting thread does not: see `Requests::inline`).
    fn fill_request(&self, r: &Request, staging: Option<&StagingSlot<'_>>, prefetch: bool) -> usize {
        // The arrays come from the region's scratch sets, or from a small
        // set on the stack (shorter runs) when all are taken.
        match self.scratch.claim_fill().as_deref_mut() {
            Some(set) => self.fill_request_in(&mut set.owned, &mut set.ok, r, staging, prefetch),
            None => self.fill_request_small(r, staging, prefetch),
        }
    }

    /// `fill_request` with the small on-stack set: a frame of its own, so
    /// that the common case does not carry it (signal stacks).
    #[inline(never)]
    fn fill_request_small(&self, r: &Request, staging: Option<&StagingSlot<'_>>, prefetch: bool) -> usize {
        let mut small = SmallFill::new();
        self.fill_request_in(&mut small.owned, &mut small.ok, r, staging, prefetch)
    }

    fn fill_request_in(
        &self,
        owned: &mut [(usize, PageWord)],
        ok: &mut [bool],
        r: &Request,
        staging: Option<&StagingSlot<'_>>,
        prefetch: bool,
    ) -> usize {
        let mut timer = FaultTimer::start();
        let mut filled = 0;
        let max_run = self.max_run.min(owned.len());
        // With frame recycling a mover fills in short runs, so that a
        // thread that catches up with it waits for one short run at most
        // (and then fills ahead of it itself, cheaply: see
        // `Requests::inline`). With UFFDIO_COPY a faulting thread's fills
        // cost it about twice what they cost a mover (page allocation on
        // the application's CPU), so long runs, fewer calls, stay better.
        let run_len = if super::mover::on_mover() && self.ring.is_some() {
            MOVER_RUN.min(max_run)
        } else {
            max_run
        };
        let limit = self.pages.len();
        let page_at = |k: usize| {
            let p = r.first as isize + k as isize * r.stride;
            (p >= 0 && (p as usize) < limit).then_some(p as usize)
        };
        let mut k = 0;
        while k < r.count {
            // Skip what needs no filling (resident, in flight, or passed by
            // the stream's thread), then count the run that follows.
            while k < r.count {
                let Some(p) = page_at(k) else {
                    k = r.count;
                    break;
                };
                if self.needs_fill(r, p, prefetch) {
                    break;
                }
                if prefetch {
                    self.count_if_stale(r, p);
                }
                k += 1;
            }
            let mut want = 0;
            while k + want < r.count && want < run_len {
                let Some(p) = page_at(k + want) else { break };
                if want > 0 && p != page_at(k + want - 1).map_or(usize::MAX, |q| q + 1) {
                    break; // runs are contiguous in memory
                }
                if !self.needs_fill(r, p, prefetch) {
                    break;
                }
                want += 1;
            }
            if want == 0 {
                k += 1; // changed under us: leave it to its fault
                continue;
            }
            // Make room before taking the pages: they stay Busy only while
            // their data moves, not while victims are written back.
            let slots = self.reserve_up_to(want, &mut timer);
            if slots == 0 {
                break; // eviction failed: the rest stays for demand faults
            }
            // Lock the run (pages another thread took meanwhile end it).
            let mut n = 0;
            while k < r.count && n < slots {
                let Some(p) = page_at(k) else {
                    k = r.count;
                    break;
                };
                if n > 0 && p != owned[n - 1].0 + 1 {
                    break;
                }
                let w = self.pages.load(p);
                if !matches!(w.state(), PageState::Untouched | PageState::Far) || !self.pages.try_lock(p, w) {
                    if n == 0 {
                        k += 1;
                    }
                    break;
                }
                owned[n] = (p, w);
                n += 1;
                k += 1;
            }
            if n > 0 {
                filled += self.install_run(&owned[..n], ok, r.write, prefetch, staging, &mut timer);
            }
            self.release_slots(slots - n);
        }
        // A faulting thread's catch-up fill is its own cost, not a mover's.
        if super::mover::on_mover() {
            self.stats.charge_mover(timer);
        } else {
            self.stats.charge(timer);
        }
        self.stats.mover_fills.fetch_add(filled as u64, Ordering::Relaxed);
        filled
    }

    /// Whether page `p` of request `r` still needs filling: neither
    /// resident nor in flight, and, for prefetch, not stale: the stream's
    /// thread passed it before a mover got there. A page evicted behind the
    /// thread (the scan policy does that to pages it will not keep) would
    /// cost a slot and a copy for nothing; before this check, a mover
    /// running behind refilled such pages, and the eviction that followed
    /// gave them a second chance as unused prefetches, pushing pages the
    /// thread was about to use out of scan's protected window.
    fn needs_fill(&self, r: &Request, p: usize, prefetch: bool) -> bool {
        matches!(self.pages.load(p).state(), PageState::Untouched | PageState::Far)
            && !(prefetch && self.prefetcher.as_ref().is_some_and(|pf| pf.passed(r, p)))
            && self.access.reachable(p)
    }

    /// Counts page `p` of prefetch request `r` as stale if it is one (see
    /// `needs_fill`).
    fn count_if_stale(&self, r: &Request, p: usize) {
        let Some(pf) = &self.prefetcher else { return };
        if matches!(self.pages.load(p).state(), PageState::Untouched | PageState::Far) && pf.passed(r, p) {
            pf.stale.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes up to `want` near slots for a mover, evicting to make room.
    /// Only a failed eviction leaves it short: a run cut at the free slots
    /// would leave its tail to demand faults (one install call each) while
    /// the next batch of victims frees room for the whole run anyway.
    /// A run longer than half the budget is cut there: making room for it
    /// would evict pages still in use.
    fn reserve_up_to(&self, want: usize, timer: &mut FaultTimer) -> usize {
        let want = want.min((self.slots.own_pages() / 2).max(1));
        let mut got = 0;
        loop {
            got += self.take_slots(want - got);
            if got == want {
                return got;
            }
            let want = want - got;
            // A whole batch amortizes the unmap calls of long victim runs;
            // while eviction is paused the victims are scattered (one
            // shootdown per page), so evict only what is needed.
            let batch = match &self.movers {
                Some(m) if !m.eviction_paused() => m.batch.max(want),
                _ => want,
            };
            match self
                .evict_batch_by(batch, Keep::Turn, timer, true)
                .map(|e| e.pages)
            {
                Ok(n) if n > 0 => {
                    self.stats.mover_evictions.fetch_add(n as u64, Ordering::Relaxed);
                }
                _ if self.evict_elsewhere(Keep::Turn, None, timer) > 0 => {}
                _ => return got,
            }
        }
    }

    /// Brings `[first, first+count)` in now, on the calling thread, without a
    /// fault (`tm_touch`: what a debugger calls before reading a page through
    /// `/proc/<pid>/mem`, which no userfaultfd can serve).
    pub(crate) fn fill_range_now(&self, first: usize, count: usize) {
        let mut k = 0;
        while k < count {
            let n = (count - k).min(self.max_run);
            self.fill_now(&Request {
                first: first + k,
                count: n,
                stride: 1,
                write: false,
                ..Default::default()
            });
            k += n;
        }
    }

    /// Fills a prefetch request on the calling thread (no mover, or their
    /// queue is full). A file store reads through the per-page staging
    /// buffers (the movers' run buffers belong to the movers), so page by
    /// page there.
    fn fill_now(&self, r: &Request) {
        self.fill_on_caller(r, self.prefetcher.is_some());
    }

    /// `fill_now`; `prefetch` marks the pages prefetched. Returns pages
    /// filled.
    pub(super) fn fill_on_caller(&self, r: &Request, prefetch: bool) -> usize {
        match &self.staging {
            None => self.fill_request(r, None, prefetch),
            Some(pool) => {
                let mut filled = 0;
                for k in 0..r.count {
                    let slot = pool.claim();
                    // Requests run forward (stride > 0).
                    let one = Request {
                        first: (r.first as isize + k as isize * r.stride) as usize,
                        count: 1,
                        ..*r
                    };
                    filled += self.fill_request(&one, Some(&slot), prefetch);
                }
                filled
            }
        }
    }

    /// Explicit prefetch of `[first, first+count)`: queued to the movers, or
    /// done now by the caller when the region has none.
    pub(crate) fn prefetch_range(&self, first: usize, count: usize) {
        let mut k = 0;
        while k < count {
            let n = (count - k).min(self.max_run);
            let r = Request {
                first: first + k,
                count: n,
                stride: 1,
                write: false,
                ..Default::default()
            };
            match &self.movers {
                Some(m) if !m.stood_down() && m.submit(r) => {
                    if let Some(pf) = &self.prefetcher {
                        pf.issued.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
                _ => self.fill_now(&r),
            }
            k += n;
        }
        if let Some(m) = &self.movers {
            m.wake();
        }
    }
}
