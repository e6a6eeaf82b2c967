//! Discard and poison: pages back to never-written, failed fills poisoned, poison cleared.

use super::{Outcome, RegionCore, Server};
use crate::page::{PageState, PageWord};
use std::sync::atomic::Ordering;

impl RegionCore {
    /// Marks page `i` (owned, was `w`) poisoned so that the access fails.
    pub(super) fn poison(&self, i: usize, w: PageWord, server: Server) -> Outcome {
        self.stats.poisoned.fetch_add(1, Ordering::Relaxed);
        let off = i * self.page_bytes;
        if server == Server::HandlerThread {
            // The marker makes the sleeping thread's retry fail with SIGBUS
            // (EFAULT for a kernel-mode access). Wake it only once the state
            // says Poisoned, so that it never observes Busy afterwards.
            self.place_poison_marker(off);
        }
        self.pages
            .unlock(i, PageWord::new(PageState::Poisoned, w.far_valid()));
        if server == Server::HandlerThread {
            let _ = self.uffd.wake(&self.reg, off, self.page_bytes);
        }
        Outcome::Poisoned
    }

    /// Puts the poison marker on page `off`, without waking anyone. A
    /// write-protect marker left on the empty pte (wp-async keeps one where
    /// a page was evicted; seen with 2 MiB pages) makes `UFFDIO_POISON` fail
    /// with `EEXIST` while the access still faults as missing: the waiting
    /// thread would retry forever. Clearing write protection turns that
    /// marker into an empty pte (and leaves a poison marker alone), then the
    /// poison goes in.
    pub(super) fn place_poison_marker(&self, off: usize) {
        let placed = self.uffd.poison(&self.reg, off, self.page_bytes, true);
        if let Ok(tiermem_sys::uffd::Resolved::AlreadyMapped) = placed {
            let _ = self
                .uffd
                .writeprotect(&self.reg, off, self.page_bytes, false, true);
            let _ = self.uffd.poison(&self.reg, off, self.page_bytes, true);
        }
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
