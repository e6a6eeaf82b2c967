//! The top of the engine: a fault, or a request from the program, enters
//! here and walks down through the parts (see docs/design.md, "The
//! engine's parts"): the installer, which takes slots and has the evictor
//! make room, and the movers' queues. Nothing below calls back up here.

use super::errors::OP_INSTALL;
use super::prefetch::Advice;
use super::{Outcome, RegionCore, Server};
use crate::config::DirtyTracking;
use crate::page::{PageState, PageWord};
use crate::stats::{Cost, FaultKind, FaultTimer};
use crate::store::StoreError;
use std::sync::atomic::Ordering;

impl RegionCore {
    /// Waits (counted) until page `i`, in transition, is published.
    pub(crate) fn wait_page(&self, i: usize) {
        let t = std::time::Instant::now();
        self.pages.wait_not_busy(i);
        self.stats.waits.fetch_add(1, Ordering::Relaxed);
        self.stats
            .wait_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// A fault on the region's descriptor outside the region: a hole of
    /// the frame ring, which only the kernel itself touches (a raw
    /// `mlockall` system call populates every accessible mapping,
    /// `tiermem_sys::locks`). It gets a zero page, so that the call goes on;
    /// the eviction that finds the hole taken empties it again.
    pub(crate) fn resolve_outside(&self, addr: usize) {
        // The frame ring, or the pin ring (handler-thread mode).
        for ring in [self.ring.as_ref(), self.pin_ring()].into_iter().flatten() {
            if ring.map.contains(addr) {
                let off = (addr - ring.map.addr()) & !(self.page_bytes - 1);
                let _ = self.uffd.zeropage(&ring.reg, off, self.page_bytes, false);
                return;
            }
        }
    }

    /// Serves a fault at `addr` (in the region) for thread `tid`.
    pub(crate) fn resolve(&self, addr: usize, write: bool, tid: u32, server: Server) -> Outcome {
        let i = self.page_of(addr);
        let mut timer = FaultTimer::start();
        loop {
            let w = self.pages.load(i);
            match w.state() {
                PageState::Busy => {
                    self.wait_page(i);
                    timer.lap(Cost::LockList);
                }
                PageState::Untouched | PageState::Far => {
                    if !self.pages.try_lock(i, w) {
                        continue;
                    }
                    timer.lap(Cost::LockList);
                    let foreign = self.note_faulting_process(tid, server);
                    let outcome = self.fill(i, w, write, tid, foreign, server, timer);
                    if outcome == Outcome::Resolved {
                        if !foreign {
                            self.slots.budget.progress.filled(tid, self.page_key(i));
                        }
                        self.stride_ahead(tid, i, write);
                        self.after_demand_fault(tid, i, write);
                    }
                    return outcome;
                }
                PageState::Clean | PageState::Dirty => {
                    // wp-fault mode: a write to a resident page is a
                    // write-protect fault (on a Clean page normally; on a
                    // Dirty page when an abandoned eviction left it
                    // protected, or a racing fill made it Dirty first:
                    // unprotecting again is harmless). Anything else, and
                    // everything in wp-async mode, was resolved by another
                    // thread after this one faulted.
                    let wp = write && self.config.dirty_tracking == DirtyTracking::WpFault;
                    if !wp {
                        if server == Server::HandlerThread {
                            let _ = self.uffd.wake(&self.reg, i * self.page_bytes, self.page_bytes);
                        }
                        self.stats.record_fault(FaultKind::Spurious, tid, timer);
                        return Outcome::Spurious;
                    }
                    if w.pinned() {
                        match self.unprotect_pinned(i, w, server) {
                            None => {
                                std::thread::yield_now();
                                continue;
                            }
                            Some(false) => return Outcome::Poisoned,
                            Some(true) => {
                                timer.lap(Cost::Pte);
                                self.stats.record_fault(FaultKind::Spurious, tid, timer);
                                return Outcome::Resolved;
                            }
                        }
                    }
                    if !self.pages.try_lock(i, w) {
                        continue;
                    }
                    timer.lap(Cost::LockList);
                    let unprotected = self.unprotect_pte(i, server);
                    timer.lap(Cost::Pte);
                    let dirty = PageWord::new(PageState::Dirty, w.far_valid());
                    if !unprotected {
                        // The page is intact, only unwritable: fail the
                        // access rather than loop on the fault.
                        self.pages.unlock(i, dirty);
                        self.wake_refused(i, server);
                        return Outcome::Poisoned;
                    }
                    let kind = if w.state() == PageState::Clean {
                        FaultKind::WriteProtect
                    } else {
                        FaultKind::Spurious
                    };
                    // Record before publishing (see `fill`).
                    self.stats.record_fault(kind, tid, timer);
                    self.pages.unlock(i, dirty);
                    // A write to a clean page is an access the policy can use.
                    self.policy().on_access(i);
                    if let Some(fa) = &self.around {
                        fa.written(i);
                    }
                    return Outcome::Resolved;
                }
                PageState::Poisoned => {
                    if server == Server::HandlerThread {
                        // The pte may already carry the poison marker; make
                        // sure the waiting thread is released into SIGBUS.
                        self.place_poison_marker(i * self.page_bytes);
                        let _ = self.uffd.wake(&self.reg, i * self.page_bytes, self.page_bytes);
                    }
                    return Outcome::Poisoned;
                }
            }
        }
    }

    /// A write-protect fault on page `i` that a system call has pinned
    /// (`w`): it cannot be locked while the call lasts, which may be as
    /// long as the call blocks (a `read` from a pipe this very thread is
    /// to fill), so waiting for the lock would hold the thread, spinning,
    /// until then. A pinned page is not evicted, and the pinner made it
    /// Dirty (pins in wp-fault mode make pages writable first): a pin of
    /// this thread's own keeps it so while its pte is made writable (an
    /// abandoned eviction may have left it protected). Some(true): done;
    /// Some(false): the kernel refused (recorded); None: the word changed,
    /// or the page is Clean: look again.
    fn unprotect_pinned(&self, i: usize, w: PageWord, server: Server) -> Option<bool> {
        if w.state() != PageState::Dirty || !self.pages.try_pin(i, w) {
            return None;
        }
        let unprotected = self.unprotect_pte(i, server);
        self.pages.unpin(i);
        if !unprotected {
            self.wake_refused(i, server);
        }
        Some(unprotected)
    }

    /// Makes page `i`'s pte writable (a write-protect fault's answer,
    /// waking a handler-thread fault); a refusal (the mapping changed
    /// under it) is recorded.
    fn unprotect_pte(&self, i: usize, server: Server) -> bool {
        let r = self.uffd.writeprotect(
            &self.reg,
            i * self.page_bytes,
            self.page_bytes,
            false,
            server == Server::InContext,
        );
        if let Err(e) = &r {
            self.errors.record(
                (i * self.page_bytes) as u64,
                OP_INSTALL,
                e.errno().map_or(0, |e| e.raw()),
            );
        }
        r.is_ok()
    }

    /// After a refused unprotect: a handler-thread fault's thread is
    /// woken, so that its access fails as the kernel decides (the mapping
    /// changed under it) rather than sleep for good.
    fn wake_refused(&self, i: usize, server: Server) {
        if server == Server::HandlerThread {
            let _ = self.uffd.wake(&self.reg, i * self.page_bytes, self.page_bytes);
        }
    }

    /// Feeds a demand fault to the prefetcher and queues what it asks for.
    fn after_demand_fault(&self, tid: u32, page: usize, write: bool) {
        let (Some(pf), Some(m)) = (&self.prefetcher, &self.movers) else {
            return;
        };
        if m.stood_down() {
            return;
        }
        let reqs = pf.on_fault(&self.pages, tid, page, write);
        for r in reqs.as_slice() {
            if !m.submit(*r) {
                pf.dropped.fetch_add(r.count as u64, Ordering::Relaxed);
            }
        }
        if !reqs.as_slice().is_empty() {
            m.wake();
        }
        if reqs.inline.count > 0 {
            // Not marked prefetched: the thread is right there.
            let n = self.fill_on_caller(&reqs.inline, false);
            pf.inline.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Access advice for `[first, first+count)`.
    pub(crate) fn advise(&self, first: usize, count: usize, advice: Advice) -> Result<(), StoreError> {
        match advice {
            Advice::WillNeed => self.prefetch_range(first, count),
            Advice::DontNeed => {
                self.evict_range(first, count)?;
            }
            _ => {
                if let Some(pf) = &self.prefetcher {
                    pf.set_advice(first, first + count, advice);
                }
            }
        }
        Ok(())
    }

    /// Returns the pages of `[offset, offset+len)` to the never-written state,
    /// freeing their near memory and far-store space.
    pub(crate) fn discard(&self, offset: usize, len: usize) {
        let first = offset >> self.page_shift;
        let last = (offset + len).div_ceil(self.page_bytes);
        // A held range that is discarded is no longer a stack.
        self.unhold(first, last);
        for i in first..last.min(self.pages.len()) {
            loop {
                let w = self.pages.load(i);
                match w.state() {
                    PageState::Untouched => break,
                    PageState::Busy => {
                        self.pages.wait_not_busy(i);
                    }
                    _ => {
                        if !self.pages.try_lock(i, w) {
                            if w.pinned() {
                                // A system call is using the page: discard
                                // it once the call returns.
                                std::thread::yield_now();
                            }
                            continue;
                        }
                        let off = i * self.page_bytes;
                        if matches!(w.state(), PageState::Clean | PageState::Dirty) {
                            self.policy().on_remove(i, false);
                            self.release_slots(1);
                        }
                        if w.state() != PageState::Far {
                            // Drops the page or the poison marker.
                            let _ = self.uffd.discard(&self.reg, &self.mapping, off, self.page_bytes);
                        }
                        if w.far_valid() {
                            self.store.forget(off as u64, self.page_bytes as u64);
                        }
                        self.pages.unlock(i, PageWord::new(PageState::Untouched, false));
                        break;
                    }
                }
            }
        }
    }

    /// Makes poisoned pages accessible again (their far copy, if any, is
    /// read on the next access). Returns how many were cleared.
    pub(crate) fn clear_poison(&self) -> usize {
        self.clear_poison_range(0, self.pages.len())
    }

    /// [`Self::clear_poison`] for pages `[first, first + count)`. Lock-free
    /// and allocation-free: an application's SIGBUS handler may call it.
    pub(crate) fn clear_poison_range(&self, first: usize, count: usize) -> usize {
        let mut n = 0;
        for i in first..(first + count).min(self.pages.len()) {
            let w = self.pages.load(i);
            if w.state() == PageState::Poisoned && self.pages.try_lock(i, w) {
                let _ = self
                    .uffd
                    .discard(&self.reg, &self.mapping, i * self.page_bytes, self.page_bytes);
                let next = if w.far_valid() {
                    PageState::Far
                } else {
                    PageState::Untouched
                };
                self.pages.unlock(i, PageWord::new(next, w.far_valid()));
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DirtyTracking;
    use crate::fault::PinKind;
    use crate::{Config, Region};
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    /// A system call's pin may last as long as the call blocks: a write to
    /// the page meanwhile must not wait for it (it spun in the fault
    /// handler until the pin went).
    #[test]
    fn a_write_to_a_page_a_system_call_holds_does_not_wait_for_the_call() {
        let mut cfg = Config::new(16 * 4096, 16 * 4096);
        cfg.dirty_tracking = DirtyTracking::WpFault;
        let region = Region::new(cfg).unwrap();
        let words = region.as_atomic_u64();
        words[0].store(1, Ordering::Relaxed);
        let core = crate::fault::lookup::<RegionCore>(region.as_ptr() as usize).unwrap();
        let at = region.as_ptr() as usize;
        let tid = tiermem_sys::thread::gettid();
        assert_eq!(core.pin(at, 4096, false, tid, PinKind::Call), 4096);
        // As an abandoned eviction leaves a page: Dirty, pinned, protected.
        core.uffd.writeprotect(&core.reg, 0, 4096, true, false).unwrap();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                words[1].store(2, Ordering::Relaxed);
                done.store(true, Ordering::Release);
            });
            let t0 = Instant::now();
            while !done.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let served = done.load(Ordering::Acquire);
            // Lets a writer that waits for the pin go on.
            core.unpin(at, 4096, PinKind::Call);
            assert!(served, "the write waited for the system call's pin");
        });
        assert_eq!(words[1].load(Ordering::Relaxed), 2);
        assert_eq!(words[0].load(Ordering::Relaxed), 1);
    }
}
