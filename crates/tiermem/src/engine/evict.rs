//! Eviction: victim runs, gap filling, write-back, unmap and publish (protocol: the engine's docs).

use super::errors::{OP_EVICT, OP_WRITE};
use super::progress::Keep;
use super::scratch::{EvictBufs, SmallEvict, Splice};
use super::RegionCore;
use crate::config::DirtyTracking;
use crate::page::{PageState, PageWord};
use crate::stats::{Cost, FaultTimer};
use crate::store::StoreError;
use std::sync::atomic::Ordering;
use tiermem_sys::mm::Protection;

/// The per-run arrays of an eviction (at least as long as the run).
pub(super) struct RunBufs<'a> {
    pub(super) dirty: &'a mut [bool],
    pub(super) failed: &'a mut [bool],
    pub(super) pos_of: &'a mut [usize],
    /// Dirty pages whose data waits in `splice`'s pipe.
    pub(super) piped: &'a mut [bool],
    pub(super) splice: Option<&'a Splice>,
}

/// What one eviction batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Evicted {
    /// Pages that left near memory.
    pub(crate) pages: usize,
    /// Contiguous runs they formed (unmapped together, see `Unmaps`).
    pub(crate) runs: usize,
}

/// The unmaps of an eviction batch, made together once every run of it is
/// stored: one `process_madvise` for up to [`DISCARD_VECTOR`](tiermem_sys::mm::DISCARD_VECTOR) ranges, so
/// that the other CPUs running the program take one TLB shootdown per
/// batch, not one per victim (issue 36: 1.9 shootdown IPIs per fault at 2
/// threads). The ranges live in the eviction set, off the signal stack.
pub(super) struct Unmaps<'a> {
    ranges: &'a mut [(usize, usize)],
    n: usize,
}

impl<'a> Unmaps<'a> {
    fn over(ranges: &'a mut [(usize, usize)]) -> Unmaps<'a> {
        Unmaps { ranges, n: 0 }
    }
}

/// A faulting thread's eviction batch of at least this many victims may
/// grow (see `evict_batch_in`) ...
pub(crate) const GROW_FROM: usize = 16;
/// ... up to this many times its size ...
pub(crate) const GROW_FACTOR: usize = 8;
/// ... while its victims form runs of this many pages on average.
pub(crate) const LONG_RUN: usize = 8;

/// A faulting thread's eviction batch is at most this share of the budget
/// (a quarter). With the default 64 pages and 2 MiB pages a batch was the
/// whole 128 MiB budget: one thread's batch took every page another could
/// evict, and that one waited on the policy lock (THP stencil at 2 threads
/// 0.53 s against 0.28 s at 1; at a quarter 0.20-0.27 s, and at an eighth
/// 1 thread lost growth: docs/results/i36-thp-batch.txt).
pub(crate) const FAULT_BATCH_SHARE: usize = 4;

/// How long `evict_all` waits for pages that cannot leave (pinned by a
/// system call in progress) when nothing else is left to evict.
const EVICT_ALL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

impl RegionCore {
    /// Pages a faulting thread evicts when the budget is reached:
    /// `Config::evict_batch_pages`, at most a quarter of the budget (at
    /// least one page).
    pub(crate) fn fault_batch(&self) -> usize {
        self.config
            .evict_batch_pages
            .min((self.slots.own_pages() / FAULT_BATCH_SHARE).max(1))
    }

    /// Evicts up to `want` pages chosen by the policy, sparing those `keep`
    /// names (see `progress`). Returns how many left near memory; fails
    /// only when write-back failed for all of them.
    pub(crate) fn evict_batch(
        &self,
        want: usize,
        keep: Keep,
        timer: &mut FaultTimer,
    ) -> Result<usize, StoreError> {
        self.evict_batch_by(want, keep, timer, false).map(|e| e.pages)
    }

    /// `evict_batch`; a mover (`by_mover`) moves victims into the frame
    /// ring when the region has one.
    pub(super) fn evict_batch_by(
        &self,
        want: usize,
        keep: Keep,
        timer: &mut FaultTimer,
        by_mover: bool,
    ) -> Result<Evicted, StoreError> {
        // The arrays come from the region's scratch sets, or from a small
        // set on the stack (smaller batches) when all are taken.
        match self.scratch.claim_evict() {
            Some(mut set) => {
                let splice = self.splice_wanted(by_mover);
                self.evict_batch_in(set.bufs(splice), want, keep, timer, by_mover)
            }
            None => self.evict_batch_small(want, keep, timer, by_mover),
        }
    }

    /// `evict_batch_by` with the small on-stack set: a frame of its own, so
    /// that the common case does not carry the arrays on the stack.
    #[inline(never)]
    fn evict_batch_small(
        &self,
        want: usize,
        keep: Keep,
        timer: &mut FaultTimer,
        by_mover: bool,
    ) -> Result<Evicted, StoreError> {
        let mut small = SmallEvict::new();
        self.evict_batch_in(small.bufs(false), want, keep, timer, by_mover)
    }

    fn evict_batch_in(
        &self,
        b: EvictBufs<'_>,
        want: usize,
        keep: Keep,
        timer: &mut FaultTimer,
        by_mover: bool,
    ) -> Result<Evicted, StoreError> {
        let victims = b.victims;
        let want = want.clamp(1, victims.len());
        // A faulting thread's batch grows, `want` victims at a time, while
        // they come in long runs (sequential sweeps): a longer batch costs
        // the other CPUs no more TLB shootdowns (one unmap call for up to
        // 64 runs) and its dirty runs one write-protect each. Scattered
        // victims (random updates, IS's buckets) stay at `want`: there
        // every dirty page past the pipe's 64 is a write-protect and a
        // shootdown of its own; so does a batch whose dirty pages fill the
        // pipe while other threads fault. NPB class A at near 50% with 512-page
        // batches: CG and MG 12-25% faster, IS at 2 threads 25-35% slower
        // (docs/results/i36-install-batch.txt).
        let grow_to = if by_mover || want < GROW_FROM {
            want
        } else {
            (want * GROW_FACTOR).min(victims.len())
        };
        let owned = b.owned;
        let mut n = 0;
        let mut k = 0;
        let mut goal = want;
        loop {
            let got = self.select_victims(&mut victims[n..goal], keep);
            timer.lap(Cost::LockList);
            // Take every victim that is still resident. Prefetched pages
            // not used yet get a second chance (their bit is cleared and
            // they go back to the policy as if just filled), up to half the
            // victims so that the batch still frees slots.
            let mut spare = if self.prefetcher.is_some() { got / 2 } else { 0 };
            let mut refused = 0;
            for &v in &victims[n..n + got] {
                if spare > 0 && self.spare_prefetched(v) {
                    spare -= 1;
                    continue;
                }
                if let Some(w) = self.take_resident(v) {
                    owned[k] = (v, w);
                    k += 1;
                } else {
                    refused += 1;
                }
            }
            n += got;
            if n < goal {
                break;
            }
            if refused > 0 && k == 0 && n < victims.len() {
                // Every victim was pinned or busy (they went back to the
                // policy's tail): look further for as many. A small batch
                // that gave up here kept meeting the same pinned pages at
                // the head while the spared ones cycled past it (a 4-page
                // budget with a vfork child's two pins spun for good with
                // batches of one). Only when none was taken: looking
                // further for every busy victim of a batch (the other
                // thread's pages in flight) cost the THP stencil at 2
                // threads 100 ms of policy-lock time of 0.3 s.
                goal = (n + refused).min(victims.len());
                continue;
            }
            if goal >= grow_to {
                break;
            }
            owned[..k].sort_unstable_by_key(|e| e.0);
            let runs = 1 + owned[..k].windows(2).filter(|p| p[1].0 != p[0].0 + 1).count();
            // With a pipe (other threads fault too), dirty pages past its
            // capacity would each be a write-protect: a shootdown per run
            // (FT.A at 2 threads took 45% more with them).
            let piped_full = b.splice.is_some_and(|sp| {
                let dirty = owned[..k]
                    .iter()
                    .filter(|e| e.1.state() == PageState::Dirty)
                    .count();
                dirty * self.page_bytes >= sp.pipe.capacity()
            });
            if k == 0 || runs * LONG_RUN > k || piped_full {
                break;
            }
            goal = (goal + want).min(grow_to);
        }
        if k == 0 {
            return Ok(Evicted::default());
        }
        owned[..k].sort_unstable_by_key(|e| e.0);
        // Fill small gaps between victims with the resident pages in between
        // when the policy lets them go: victims that are near each other in
        // fill order are near each other in memory, and one longer run costs
        // one unmap call (one TLB shootdown) instead of several. The pages in
        // the gaps are typically a stream's trigger page or pages a thread
        // faulted in itself a moment after the mover filled their
        // neighbours.
        let k = self.fill_gaps(owned, b.extra, k, keep);
        timer.lap(Cost::LockList);
        let ring = if by_mover {
            self.ring.as_ref()
        } else {
            self.sync_ring()
        }
        .or_else(|| self.pin_ring());
        // Classic path: every run's first half, then all their unmaps at
        // once, then every run's second half.
        let mut unmaps = Unmaps::over(b.unmaps);
        let mut evicted = 0;
        let mut runs = 0;
        let mut first_error = None;
        let run_end = |start: usize| {
            let mut end = start + 1;
            while end < k && owned[end].0 == owned[end - 1].0 + 1 {
                end += 1;
            }
            end
        };
        let mut start = 0;
        while start < k {
            let end = run_end(start);
            let mut run_bufs = RunBufs {
                dirty: &mut b.dirty[start..],
                failed: &mut b.failed[start..],
                pos_of: &mut b.pos_of[start..],
                piped: &mut b.piped[start..],
                splice: b.splice,
            };
            let (done, err) = match ring {
                Some(ring) => {
                    self.evict_run_to_ring(ring, &owned[start..end], &mut run_bufs, &mut unmaps, timer)
                }
                None => {
                    let r = self.start_run(&owned[start..end], &mut run_bufs, timer, &mut unmaps);
                    b.started[start] = r.is_some();
                    r.unwrap_or((0, None))
                }
            };
            evicted += done;
            runs += 1;
            if first_error.is_none() {
                first_error = err;
            }
            start = end;
        }
        if ring.is_none() {
            self.flush_unmaps(&mut unmaps);
            // The unmap is the batch's TLB shootdown: its own lap, not the
            // first piped write-back's.
            timer.lap(Cost::Tlb);
            let mut start = 0;
            while start < k {
                let end = run_end(start);
                if b.started[start] {
                    let (late, err) = self.end_run(
                        &owned[start..end],
                        &mut b.dirty[start..end],
                        &mut b.failed[start..end],
                        &b.piped[start..end],
                        b.splice,
                        timer,
                    );
                    evicted -= late;
                    if first_error.is_none() {
                        first_error = err;
                    }
                }
                start = end;
            }
        }
        match first_error {
            Some(e) if evicted == 0 => Err(e),
            _ => Ok(Evicted { pages: evicted, runs }),
        }
    }

    /// Whether an eviction should read its dirty victims through the set's
    /// pipe: when other CPUs run the program's threads (a mover, or two
    /// threads have faulted in the region), where write-protecting each
    /// dirty run would shoot their TLBs down; never on the ring path,
    /// whose moves stop writers themselves. A program that faults from
    /// one thread makes no pipe. Never after the process forked while the
    /// region was copied into children: its pages may be shared
    /// copy-on-write, and a writer's copy would not be the piped page.
    fn splice_wanted(&self, by_mover: bool) -> bool {
        let ring = if by_mover {
            self.ring.as_ref()
        } else {
            self.sync_ring()
        };
        ring.is_none()
            && (by_mover || self.movers.is_some() || self.faulting_threads.ever_many())
            && !self.forked.load(Ordering::Relaxed)
    }

    /// Asks the policy for victims until `out` is full or it has no more,
    /// leaving out those `keep` spares. They are handed back once the
    /// batch is chosen: handed back at once, a policy that prefers recent
    /// pages (scan) offered them again and again, and never the page that
    /// could go.
    fn select_victims(&self, out: &mut [usize], keep: Keep) -> usize {
        // More than the pages `progress` ever spares at once (3 + 4).
        const SPARED: usize = 8;
        let mut spared = [0usize; SPARED];
        let mut s = 0;
        let mut n = 0;
        let mut policy = self.policy();
        while n < out.len() {
            let got = policy.select_victims(&mut out[n..]);
            let mut kept = n;
            for j in n..n + got {
                let v = out[j];
                if s < SPARED && self.spares(keep, v) {
                    spared[s] = v;
                    s += 1;
                } else {
                    out[kept] = v;
                    kept += 1;
                }
            }
            let none_spared = kept == n + got;
            n = kept;
            if got == 0 || none_spared {
                break;
            }
        }
        for &v in &spared[..s] {
            policy.on_fill(v);
        }
        n
    }

    /// Gives victim `v` a second chance if it is resident and was
    /// prefetched but not used yet: clears its bit and hands it back to the
    /// policy as just filled (FIFO: to the back; scan: into the protected
    /// window). A prefetched page then leaves only once it was used or
    /// aged through the policy a second time (then it counts as wasted
    /// only if it was prefetched again).
    fn spare_prefetched(&self, v: usize) -> bool {
        let w = self.pages.load(v);
        if !matches!(w.state(), PageState::Clean | PageState::Dirty) || !w.prefetched() {
            return false;
        }
        if !self.pages.take_prefetched(v) {
            return false;
        }
        self.policy().on_fill(v);
        if let Some(pf) = &self.prefetcher {
            pf.spared.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Locks page `v` for eviction if it is resident. None if it is not
    /// resident, or pinned by a kernel-mode access, or busy (a write-protect
    /// fault, a discard, another thread's fill or eviction holds it): then
    /// it goes back on the policy's list, and the page is looked at again
    /// later. Never waits: the caller may hold other victims locked, and
    /// two evictors whose victim lists meet (a stale list entry for a page
    /// another thread is filling, which evicts to make room) would wait for
    /// each other forever. `tiermem stress` found that hang (4 threads, 2
    /// movers, a batch of 512 over 870 pages).
    fn take_resident(&self, v: usize) -> Option<PageWord> {
        loop {
            let w = self.pages.load(v);
            match w.state() {
                PageState::Clean | PageState::Dirty if w.pinned() => {
                    self.policy().on_fill(v);
                    return None;
                }
                PageState::Clean | PageState::Dirty => {
                    if self.pages.try_lock(v, w) {
                        return Some(w);
                    }
                }
                PageState::Busy => {
                    // Every policy's on_fill is idempotent, and a list entry
                    // for a page that is no longer resident is skipped.
                    self.policy().on_fill(v);
                    return None;
                }
                _ => return None, // discarded meanwhile
            }
        }
    }

    /// Adds to the sorted victims `owned[..k]` the evictable resident pages
    /// of gaps of up to `GAP` pages between them. Returns the new count.
    fn fill_gaps(
        &self,
        owned: &mut [(usize, PageWord)],
        extra: &mut [(usize, PageWord)],
        k: usize,
        keep: Keep,
    ) -> usize {
        const GAP: usize = 32;
        if k < 2 {
            return k;
        }
        let cap = owned.len().min(extra.len());
        let mut e = 0;
        {
            let mut policy = self.policy();
            for j in 1..k {
                let (a, b) = (owned[j - 1].0, owned[j].0);
                if b - a <= 1 || b - a - 1 > GAP || k + e + (b - a - 1) > cap {
                    continue;
                }
                // Only whole gaps: a partial one would not join the runs.
                let start = e;
                let mut whole = true;
                for p in a + 1..b {
                    let w = self.pages.load(p);
                    if matches!(w.state(), PageState::Clean | PageState::Dirty)
                        && policy.evictable(p)
                        && !self.spares(keep, p)
                        && self.pages.try_lock(p, w)
                    {
                        extra[e] = (p, w);
                        e += 1;
                    } else {
                        whole = false;
                        break;
                    }
                }
                if whole {
                    for &(p, _) in &extra[start..e] {
                        policy.on_remove(p, false);
                    }
                } else {
                    for &(p, w) in &extra[start..e] {
                        self.pages.unlock(p, w);
                    }
                    e = start;
                }
            }
        }
        owned[k..k + e].copy_from_slice(&extra[..e]);
        owned[..k + e].sort_unstable_by_key(|x| x.0);
        k + e
    }

    /// Evicts one run of contiguous owned pages (see the eviction protocol in
    /// the engine's module docs), unmapped on its own.
    /// Returns the pages evicted and the first write-back error.
    pub(super) fn evict_run(
        &self,
        run: &[(usize, PageWord)],
        bufs: &mut RunBufs<'_>,
        unmaps: &mut Unmaps<'_>,
        timer: &mut FaultTimer,
    ) -> (usize, Option<StoreError>) {
        let Some(done) = self.start_run(run, bufs, timer, unmaps) else {
            return (0, None);
        };
        self.flush_unmaps(unmaps);
        let n = run.len();
        let (late, err) = self.end_run(
            run,
            &mut bufs.dirty[..n],
            &mut bufs.failed[..n],
            &bufs.piped[..n],
            bufs.splice,
            timer,
        );
        (done.0 - late, done.1.or(err))
    }

    /// The first half of evicting a run of contiguous owned pages: stops
    /// writers, writes dirty pages back, and queues the unmap of every page
    /// safely stored in `unmaps`, which the caller flushes (for a whole
    /// batch of runs at once: one TLB shootdown) before [`Self::end_run`].
    /// None: the kernel refused to stop writers, and the run was given up
    /// (its pages stay resident as they were, unlocked). Else the pages
    /// that will leave and the first write-back error.
    fn start_run(
        &self,
        run: &[(usize, PageWord)],
        bufs: &mut RunBufs<'_>,
        timer: &mut FaultTimer,
        unmaps: &mut Unmaps<'_>,
    ) -> Option<(usize, Option<StoreError>)> {
        let n = run.len();
        let first = run[0].0;
        let off = first * self.page_bytes;
        let bytes = n * self.page_bytes;
        let dirty = &mut bufs.dirty[..n];
        for (d, (_, w)) in dirty.iter_mut().zip(run) {
            *d = w.state() == PageState::Dirty;
        }
        let asynchronous = self.config.dirty_tracking == DirtyTracking::WpAsync;
        // Dirty pages go into the splice pipe where there is one: their
        // data is read after the batch's unmap, so their writers need not
        // be stopped first (no write protection: no shootdown per run).
        let piped = &mut bufs.piped[..n];
        piped.iter_mut().for_each(|p| *p = false);
        if let (false, Some(sp)) = (asynchronous, bufs.splice) {
            self.pipe_dirty(sp, run, dirty, piped);
        }
        // Stop writers before anything is copied out: otherwise a write
        // landing between the copy and the unmap would be lost. If the
        // kernel refuses, give the run up (its pages stay resident as they
        // were) rather than evict unprotected pages.
        let stopped = if asynchronous {
            // Freeze: from here on writers take SIGSEGV and wait for the page
            // state, so the scan below cannot miss a write.
            self.stats.evict_protect_calls.fetch_add(1, Ordering::Relaxed);
            let r = self
                .mapping
                .protect(off, bytes, Protection::Read)
                .map_err(|e| match e {
                    tiermem_sys::mm::MmError::Protect { errno, .. } => errno.raw(),
                    _ => 0,
                });
            timer.lap(Cost::Tlb);
            if r.is_ok() {
                self.scan_written(first, n, dirty);
                timer.lap(Cost::LockList);
            }
            r
        } else if let (Some(a), Some(b)) = (
            (0..n).position(|k| dirty[k] && !piped[k]),
            (0..n).rposition(|k| dirty[k] && !piped[k]),
        ) {
            self.stats.evict_protect_calls.fetch_add(1, Ordering::Relaxed);
            let r = self
                .uffd
                .writeprotect(
                    &self.reg,
                    (first + a) * self.page_bytes,
                    (b - a + 1) * self.page_bytes,
                    true,
                    false,
                )
                .map_err(|e| e.errno().map_or(0, |e| e.raw()));
            timer.lap(Cost::Tlb);
            r
        } else {
            Ok(())
        };
        let kept_back = stopped.is_err() && piped.iter().any(|&p| p);
        if let Err(errno) = stopped {
            self.errors.record(off as u64, OP_EVICT, errno);
            if asynchronous {
                self.unfreeze(off, bytes);
            }
        }
        if stopped.is_err() && !kept_back {
            let mut policy = self.policy();
            for &(p, w) in run {
                policy.on_remove(p, true);
                self.pages.unlock(p, w);
            }
            return None;
        }
        // Writers are locked out now: pages marked VERIFY that still equal
        // their far copy need no write-back.
        for (k, &(p, w)) in run.iter().enumerate() {
            if dirty[k]
                && !piped[k]
                && !kept_back
                && w.verify()
                && self.unchanged(p, w, self.mapping.range(p * self.page_bytes, self.page_bytes))
            {
                dirty[k] = false;
            }
        }
        // Write back dirty pages, contiguous ones with one call.
        // Where writers could not be stopped, the piped pages leave (the
        // pipe holds them in order with the batch's others) and the dirty
        // pages that needed stopping stay resident.
        let failed = &mut bufs.failed[..n];
        for k in 0..n {
            failed[k] = kept_back && dirty[k] && !piped[k];
        }
        let stopped_dirty = |k: usize| dirty[k] && !piped[k] && !kept_back;
        let mut first_error = None;
        let mut s = 0;
        while s < n {
            if !stopped_dirty(s) {
                s += 1;
                continue;
            }
            let mut e = s + 1;
            while e < n && stopped_dirty(e) {
                e += 1;
            }
            let src = self
                .mapping
                .range((first + s) * self.page_bytes, (e - s) * self.page_bytes);
            if let Err(err) = self.write_back(first + s, src) {
                failed[s..e].iter_mut().for_each(|f| *f = true);
                first_error.get_or_insert(err);
            }
            s = e;
        }
        timer.lap(Cost::Transfer);
        // Queue the unmap of every page that is safely stored, one range
        // per sub-run.
        let mut s = 0;
        let mut evicted = 0;
        while s < n {
            if failed[s] {
                s += 1;
                continue;
            }
            let mut e = s + 1;
            while e < n && !failed[e] {
                e += 1;
            }
            self.queue_unmap(unmaps, (first + s) * self.page_bytes, (e - s) * self.page_bytes);
            evicted += e - s;
            s = e;
        }
        Some((evicted, first_error))
    }

    /// The second half, once the run's unmaps are flushed: piped pages are
    /// written back from the pipe, writers are let back in (wp-async) and
    /// the pages' new states published. Returns how many piped pages stay
    /// resident after all (their write-back failed).
    #[inline(never)] // off the frame that holds the batch's unmaps (signal stacks)
    fn end_run(
        &self,
        run: &[(usize, PageWord)],
        dirty: &mut [bool],
        failed: &mut [bool],
        piped: &[bool],
        splice: Option<&Splice>,
        timer: &mut FaultTimer,
    ) -> (usize, Option<StoreError>) {
        let mut late = 0;
        let mut first_error = None;
        if let Some(sp) = splice {
            let n = run.len();
            let mut s = 0;
            while s < n {
                if !piped[s] {
                    s += 1;
                    continue;
                }
                let e = (s..n).find(|&j| !piped[j]).unwrap_or(n);
                if let Some(err) = self.write_back_piped(sp, &run[s..e], &mut dirty[s..e], &mut failed[s..e])
                {
                    first_error.get_or_insert(err);
                }
                late += failed[s..e].iter().filter(|&&f| f).count();
                s = e;
            }
            timer.lap(Cost::Transfer);
        }
        if self.config.dirty_tracking == DirtyTracking::WpAsync {
            self.unfreeze(run[0].0 * self.page_bytes, run.len() * self.page_bytes);
        }
        timer.lap(Cost::Tlb);
        self.publish_eviction(run, dirty, failed);
        timer.lap(Cost::LockList);
        (late, first_error)
    }

    fn queue_unmap(&self, unmaps: &mut Unmaps<'_>, offset: usize, len: usize) {
        if unmaps.n == unmaps.ranges.len() {
            self.flush_unmaps(unmaps);
        }
        unmaps.ranges[unmaps.n] = (offset, len);
        unmaps.n += 1;
    }

    /// Unmaps the queued ranges: one system call (one TLB shootdown) per
    /// [`DISCARD_VECTOR`](tiermem_sys::mm::DISCARD_VECTOR) where the kernel batches them.
    fn flush_unmaps(&self, unmaps: &mut Unmaps<'_>) {
        if unmaps.n == 0 {
            return;
        }
        // A failing discard would leave stale data mapped: that is a bug in
        // our bookkeeping, not a recoverable condition.
        let calls = self
            .uffd
            .discard_ranges(&self.reg, &self.mapping, &unmaps.ranges[..unmaps.n])
            .expect("MADV_DONTNEED on a tiered region") as u64;
        unmaps.n = 0;
        self.stats.evict_calls.fetch_add(calls, Ordering::Relaxed);
        if super::mover::on_mover() {
            self.stats.mover_unmap_calls.fetch_add(calls, Ordering::Relaxed);
        }
    }

    /// Writes the pages from `first_page` on, whose data is `src`, to the
    /// far store, and accounts for it; a failure is counted and recorded.
    pub(super) fn write_back(
        &self,
        first_page: usize,
        src: tiermem_sys::mm::MemRange<'_>,
    ) -> Result<(), StoreError> {
        let off = (first_page * self.page_bytes) as u64;
        let bytes = src.len() as u64;
        match self.store.store(off, src) {
            Ok(()) => {
                self.count_write_back(bytes as usize);
                Ok(())
            }
            Err(err) => {
                self.store_failed(off, OP_WRITE, &err);
                Err(err)
            }
        }
    }

    pub(super) fn count_write_back(&self, bytes: usize) {
        self.stats
            .write_backs
            .fetch_add((bytes / self.page_bytes) as u64, Ordering::Relaxed);
        self.stats.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The end of an eviction run whose pages are unmapped except the
    /// `failed` ones: counts, and publishes each page's new state (a failed
    /// page stays resident and dirty; in wp-fault mode it is now
    /// write-protected, and its next write unprotects it again).
    pub(super) fn publish_eviction(&self, run: &[(usize, PageWord)], dirty: &[bool], failed: &[bool]) {
        let evicted = failed.iter().filter(|&&f| !f).count();
        self.release_slots(evicted);
        self.stats.evictions.fetch_add(evicted as u64, Ordering::Relaxed);
        if super::mover::on_mover() {
            self.stats
                .mover_pages_out
                .fetch_add(evicted as u64, Ordering::Relaxed);
        }
        if let Some(pf) = &self.prefetcher {
            let wasted = run
                .iter()
                .zip(failed)
                .filter(|((_, w), &f)| !f && w.prefetched())
                .count();
            pf.wasted.fetch_add(wasted as u64, Ordering::Relaxed);
        }
        // wp-fault: a page whose write-back failed is still write-protected.
        // A user write would unprotect it (a write-protect fault on a Dirty
        // page), but a kernel-mode write (`read(2)` into it, pinned as
        // Dirty) would get EFAULT every time: unprotect it now (failures
        // only; found by `tiermem stress` with fault injection).
        if self.config.dirty_tracking == DirtyTracking::WpFault {
            for (k, &(p, _)) in run.iter().enumerate() {
                if failed[k] {
                    let _ =
                        self.uffd
                            .writeprotect(&self.reg, p * self.page_bytes, self.page_bytes, false, false);
                }
            }
        }
        // The policy learns which pages really left before any of them can
        // be filled again (their words are still locked), under one lock.
        if self.config.policy.sees_evictions() {
            let mut policy = self.policy();
            for (k, &(p, _)) in run.iter().enumerate() {
                if !failed[k] {
                    policy.on_evicted(p);
                }
            }
        }
        let mut policy = None;
        for (k, &(p, w)) in run.iter().enumerate() {
            let next = if failed[k] {
                policy.get_or_insert_with(|| self.policy()).on_remove(p, true);
                PageWord::new(PageState::Dirty, w.far_valid())
            } else if dirty[k] {
                // Written, so used: a neighbour fault-around installed
                // writable takes no write-protect fault to say so.
                if let Some(fa) = &self.around {
                    fa.written(p);
                }
                if let Some(h) = &self.rewrites {
                    h.written(p);
                }
                PageWord::new(PageState::Far, true)
            } else if w.far_valid() {
                if let Some(h) = &self.rewrites {
                    h.unwritten(p);
                }
                PageWord::new(PageState::Far, true)
            } else {
                PageWord::new(PageState::Untouched, false)
            };
            self.pages.unlock(p, next);
        }
    }

    /// Whether a `Dirty` page marked VERIFY is still equal to its far copy
    /// (or to zeros if it was never stored). `data` is the page, read where
    /// no writer can change it (unmapped, or write-protected).
    pub(super) fn unchanged(&self, page: usize, w: PageWord, data: tiermem_sys::mm::MemRange<'_>) -> bool {
        if w.far_valid() {
            self.store.same_as((page * self.page_bytes) as u64, data) == Some(true)
        } else {
            data.is_zero()
        }
    }

    /// Evicts every resident page (writing back dirty ones). Pages that
    /// cannot leave now (pinned by a system call in progress, such as a
    /// `recv` blocked on a socket into the region) are waited for up to
    /// [`EVICT_ALL_PATIENCE`] without progress, then left resident.
    ///
    /// Called on an application thread: asynchronous signals are blocked
    /// while a batch owns pages (a handler's `siglongjmp` must not abandon
    /// them), and open between batches, so that a program stuck here can
    /// still be interrupted.
    pub(crate) fn evict_all(&self) -> Result<usize, StoreError> {
        let mut total = 0;
        let mut timer = FaultTimer::start();
        let mut stuck_since: Option<std::time::Instant> = None;
        let result = loop {
            let (batch, tracked) = {
                let _blocked = tiermem_sys::signal::AsyncSignalsBlocked::new();
                let b = self.evict_batch(crate::config::MAX_EVICT_BATCH, Keep::Nothing, &mut timer);
                let t = if matches!(b, Ok(0)) {
                    self.policy().tracked()
                } else {
                    0
                };
                (b, t)
            };
            match batch {
                Ok(0) => {
                    if tracked == 0 {
                        break Ok(total);
                    }
                    let since = *stuck_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() > EVICT_ALL_PATIENCE {
                        break Ok(total);
                    }
                    std::thread::yield_now();
                }
                Ok(n) => {
                    total += n;
                    stuck_since = None;
                }
                Err(e) => break Err(e),
            }
        };
        self.stats.charge(timer);
        result
    }

    /// A mover's eviction duty: one batch. A batch whose write-backs all
    /// failed counts as nothing evicted; the failures are already in the
    /// error log and the stats, and its pages stay resident.
    pub(crate) fn mover_evict(&self, batch: usize) -> Evicted {
        let mut timer = FaultTimer::start();
        let e = self
            .evict_batch_by(batch, Keep::Turn, &mut timer, true)
            .unwrap_or_default();
        self.stats.charge_mover(timer);
        self.stats
            .mover_evictions
            .fetch_add(e.pages as u64, Ordering::Relaxed);
        e
    }

    /// Evicts the resident pages of `[first, first+count)` (writing back
    /// dirty ones); their data stays available from the far store.
    pub(crate) fn evict_range(&self, first: usize, count: usize) -> Result<usize, StoreError> {
        let mut timer = FaultTimer::start();
        let mut evicted = 0;
        let mut small = SmallEvict::new();
        let mut claimed = self.scratch.claim_evict();
        let b = match claimed.as_deref_mut() {
            Some(set) => set.bufs(self.splice_wanted(false)),
            None => small.bufs(false),
        };
        let owned = &mut b.owned[..b.victims.len()];
        let mut run_bufs = RunBufs {
            dirty: b.dirty,
            failed: b.failed,
            pos_of: b.pos_of,
            piped: b.piped,
            splice: b.splice,
        };
        let mut unmaps = Unmaps::over(b.unmaps);
        let end = (first + count).min(self.pages.len());
        let mut p = first;
        let mut first_error = None;
        while p < end {
            let mut n = 0;
            while p < end && n < owned.len() {
                let w = self.pages.load(p);
                match w.state() {
                    PageState::Clean | PageState::Dirty if self.pages.try_lock(p, w) => {
                        owned[n] = (p, w);
                        n += 1;
                        p += 1;
                    }
                    // Evict what this call holds first: the page's owner
                    // may be a fill that needs room only those pages can
                    // give. Then wait, holding nothing.
                    PageState::Busy if n > 0 => break,
                    PageState::Busy => {
                        self.pages.wait_not_busy(p);
                    }
                    // Raced with a fault; retry the same page.
                    PageState::Clean | PageState::Dirty if !w.pinned() => {}
                    // Not resident, or pinned by a kernel-mode access: skip.
                    _ => {
                        p += 1;
                        if n > 0 {
                            break;
                        }
                    }
                }
            }
            if n == 0 {
                continue;
            }
            {
                let mut policy = self.policy();
                for &(q, _) in &owned[..n] {
                    policy.on_remove(q, false);
                }
            }
            let (done, err) = self.evict_run(&owned[..n], &mut run_bufs, &mut unmaps, &mut timer);
            evicted += done;
            if first_error.is_none() {
                first_error = err;
            }
        }
        self.stats.charge(timer);
        match first_error {
            Some(e) => Err(e),
            None => Ok(evicted),
        }
    }
}
