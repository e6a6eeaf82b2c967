//! Poison: a page whose fill failed is marked so that the access fails
//! (`resolve.rs` discards pages and clears poison on the program's request).

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
}
