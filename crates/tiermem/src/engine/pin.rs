//! Pins for kernel-mode accesses: pages a system call is about to read or
//! write are brought in (writable for a write) and held in place until it
//! returns, so the kernel never meets a missing or write-protected page.

use super::{Outcome, RegionCore, Server};
use crate::config::DirtyTracking;
use crate::fault::PinKind;
use crate::page::PageState;

impl RegionCore {
    /// Pins the pages of `[addr, addr + len)` (inside the region) for a
    /// kernel access that writes them (`write`) or only reads them, in
    /// order, and returns how many bytes from `addr` are pinned: all of
    /// them, or fewer when a page cannot be brought in (poisoned) or the
    /// pin allowance (half the budget, shared with the other regions of a
    /// shared one) is used up. Unpin exactly
    /// that with [`RegionCore::unpin`].
    ///
    /// With [`PinKind::Io`] the pins outlive the call (Linux AIO: the
    /// device reads or writes the pages after `io_submit` returns, until
    /// the completion is reaped) and are not held to the allowance: the
    /// budget grows by each page pinned so (as for held pages, `hold`), so
    /// an I/O larger than the budget still gets all its pages.
    pub(crate) fn pin(&self, addr: usize, len: usize, write: bool, tid: u32, kind: PinKind) -> usize {
        if len == 0 {
            return 0;
        }
        let first = self.page_of(addr);
        let last = self.page_of(addr + len - 1);
        let mut pinned_to = addr;
        for i in first..=last {
            // None at all (the allowance is taken by other threads' calls):
            // the caller moves the data through a bounce buffer instead.
            let pinned = match kind {
                PinKind::Call => self.pin_page(i, write, tid),
                PinKind::Io => self.pin_page_for_io(i, write, tid),
            };
            if !pinned {
                break;
            }
            pinned_to = self.mapping.addr() + (i + 1) * self.page_bytes;
        }
        pinned_to.min(addr + len) - addr
    }

    /// Drops the pins of `[addr, addr + len)` taken by [`RegionCore::pin`].
    pub(crate) fn unpin(&self, addr: usize, len: usize, kind: PinKind) {
        if len == 0 {
            return;
        }
        for i in self.page_of(addr)..=self.page_of(addr + len - 1) {
            self.pages.unpin(i);
            match kind {
                PinKind::Call => self.slots.budget.unpin(self.page_bytes),
                PinKind::Io => self.slots.change_held(-1),
            }
        }
    }

    fn pin_page_for_io(&self, i: usize, write: bool, tid: u32) -> bool {
        if !self.access.reachable(i) {
            return false;
        }
        // Room first: bringing the page in must not evict for it.
        self.slots.change_held(1);
        let pinned = self.bring_in_pinned(i, write, tid);
        if !pinned {
            self.slots.change_held(-1);
        }
        pinned
    }

    fn pin_page(&self, i: usize, write: bool, tid: u32) -> bool {
        // A part of the range the program cannot reach (a heap chunk not
        // handed out yet) is not filled for a system call either.
        if !self.access.reachable(i) {
            return false;
        }
        // At most half the budget pinned (with the other regions of a
        // shared one): faults must always find victims.
        if !self.slots.budget.try_pin(self.page_bytes) {
            return false;
        }
        let pinned = self.bring_in_pinned(i, write, tid);
        if !pinned {
            self.slots.budget.unpin(self.page_bytes);
        }
        pinned
    }

    /// Brings page `i` in (writable for `write`) and adds a pin to it;
    /// false if it cannot be brought in (poisoned). Counting the pin
    /// against an allowance is the caller's.
    pub(super) fn bring_in_pinned(&self, i: usize, write: bool, tid: u32) -> bool {
        let addr = self.mapping.addr() + i * self.page_bytes;
        let wp_fault = self.config.dirty_tracking == DirtyTracking::WpFault;
        loop {
            let w = self.pages.load(i);
            let ok = match w.state() {
                PageState::Busy => {
                    self.wait_page(i);
                    true
                }
                PageState::Poisoned => false,
                // A kernel write into a write-protected page fails with
                // EFAULT: make it writable (and Dirty) first. The kernel's
                // reads do not need that, but a user write racing the
                // system call would spin on the pinned page otherwise.
                PageState::Clean if wp_fault => {
                    self.resolve(addr, true, tid, Server::InContext) != Outcome::Poisoned
                }
                PageState::Clean | PageState::Dirty => {
                    if self.pages.try_pin(i, w) {
                        return true;
                    }
                    true // raced: look again
                }
                PageState::Untouched | PageState::Far => {
                    self.resolve(addr, write, tid, Server::InContext) != Outcome::Poisoned
                }
            };
            if !ok {
                return false;
            }
        }
    }
}
