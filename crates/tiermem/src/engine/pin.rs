//! Pins for kernel-mode accesses: pages a system call is about to read or
//! write are brought in (writable for a write) and held in place until it
//! returns, so the kernel never meets a missing or write-protected page.

use super::{Outcome, RegionCore, Server};
use crate::config::DirtyTracking;
use crate::page::PageState;
use std::sync::atomic::Ordering;

impl RegionCore {
    /// Pins the pages of `[addr, addr + len)` (inside the region) for a
    /// kernel access that writes them (`write`) or only reads them, in
    /// order, and returns how many bytes from `addr` are pinned: all of
    /// them, or fewer when a page cannot be brought in (poisoned) or the
    /// region's pin allowance (half its budget) is used up. Unpin exactly
    /// that with [`RegionCore::unpin`].
    pub(crate) fn pin(&self, addr: usize, len: usize, write: bool, tid: u32) -> usize {
        if len == 0 {
            return 0;
        }
        let first = self.page_of(addr);
        let last = self.page_of(addr + len - 1);
        let mut pinned_to = addr;
        for i in first..=last {
            let pinned = self.pin_page(i, write, tid) || (i == first && self.pin_first_page(i, write, tid));
            if !pinned {
                break;
            }
            pinned_to = self.mapping.addr() + (i + 1) * self.page_bytes;
        }
        pinned_to.min(addr + len) - addr
    }

    /// Drops the pins of `[addr, addr + len)` taken by [`RegionCore::pin`].
    pub(crate) fn unpin(&self, addr: usize, len: usize) {
        if len == 0 {
            return;
        }
        for i in self.page_of(addr)..=self.page_of(addr + len - 1) {
            self.pages.unpin(i);
            self.pinned.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The first page of a call found the pin allowance used up by other
    /// threads' calls (a small budget of huge pages, many threads): rather
    /// than let the call meet a missing page (EFAULT), wait a while for one
    /// of them to return. Bounded: a call that blocks while it holds pins
    /// (a `recv` waiting for another thread's `send`, which needs a pin)
    /// must not wait forever; after ~100 ms the call runs unpinned, as it
    /// did before. `tiermem stress` found this with 2 MiB pages.
    fn pin_first_page(&self, i: usize, write: bool, tid: u32) -> bool {
        if self.pages.load(i).state() == PageState::Poisoned {
            return false;
        }
        for k in 0..200u32 {
            if self.pin_page(i, write, tid) {
                return true;
            }
            if self.pages.load(i).state() == PageState::Poisoned {
                return false;
            }
            if k < 20 {
                std::thread::yield_now();
            } else {
                tiermem_sys::thread::sleep(std::time::Duration::from_micros(500));
            }
        }
        false
    }

    fn pin_page(&self, i: usize, write: bool, tid: u32) -> bool {
        // At most half the budget pinned: faults must always find victims.
        if self.pinned.fetch_add(1, Ordering::Relaxed) >= (self.budget_pages / 2).max(1) {
            self.pinned.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
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
                self.pinned.fetch_sub(1, Ordering::Relaxed);
                return false;
            }
        }
    }
}
