//! Evictions that cannot lose a page the kernel has pinned.
//!
//! Another process copying into this one (`process_vm_writev`: an MPI
//! library's single-copy transport, Open MPI's CMA for large messages and
//! one-sided `MPI_Put`) pins up to 4 MiB of this process's pages, faulting
//! them in one by one through the handler thread, before it copies into
//! any of them. With a budget smaller than that, filling the later pages
//! evicted the earlier ones, pinned: unmapped, each took its share of the
//! copy after the region had let it go, and the data read stale while the
//! writer was told all was written (6 MiB of 8 at a 1 MiB budget).
//!
//! Nothing in this process sees such a pin. The kernel does: it refuses to
//! move a pinned page (`UFFDIO_MOVE` fails with EBUSY, checked after the
//! page table entry is cleared, so no pin slips in between). So once a
//! thread of another process has faulted on the region, every eviction
//! moves its victims out into a ring of its own (the *pin ring*) before
//! writing them back (`evict_run_to_ring`), a page the kernel refuses stays
//! resident, held outside the budget for a while (`hold`), and the ring is
//! emptied after each eviction, so that it holds no memory. A region that
//! only its own threads fault on evicts as before. Needs `UFFDIO_MOVE`,
//! 4 KiB pages and wp-fault dirty tracking (the ring's conditions); without
//! them the loss stays possible (docs/transparent.md).

use super::ring::FrameRing;
use super::{RegionCore, Server};
use crate::config::{DirtyTracking, PageSize};
use std::sync::atomic::Ordering;

impl RegionCore {
    /// Notes a fault of thread `tid`: the first fault of another process's
    /// thread makes the pin ring. One system call when the faulting thread
    /// changes, until then; nothing after.
    pub(super) fn note_faulting_process(&self, tid: u32, server: Server) {
        if server != Server::HandlerThread || tid == 0 || self.pin_ring.get().is_some() {
            return;
        }
        // A plain load first: the same thread faulting again (the common
        // case) writes nothing to the shared line.
        if self.checked_tid.load(Ordering::Relaxed) == tid {
            return;
        }
        self.checked_tid.store(tid, Ordering::Relaxed);
        if tiermem_sys::thread::in_this_process(tid) {
            return;
        }
        self.pin_ring.get_or_init(|| self.make_pin_ring());
    }

    fn make_pin_ring(&self) -> Option<FrameRing> {
        if !self.uffd.features().contains(tiermem_sys::uffd::Features::MOVE)
            || self.config.page_size != PageSize::Base4K
            || self.config.dirty_tracking != DirtyTracking::WpFault
        {
            return None;
        }
        let ring = FrameRing::new(&self.uffd, crate::config::MAX_EVICT_BATCH, self.page_bytes).ok()?;
        // Populated to be registered: emptied now, it holds nothing.
        // (Nothing is printed or read from the environment here: this runs
        // on the fault path, and the environment's strings may lie in
        // tiered pages, a vfork child's among them.)
        self.drain_pin_ring(&ring);
        Some(ring)
    }

    /// The pin ring, once made.
    pub(super) fn pin_ring(&self) -> Option<&FrameRing> {
        self.pin_ring.get().and_then(Option::as_ref)
    }

    /// Whether `ring` is the pin ring.
    pub(super) fn is_pin_ring(&self, ring: &FrameRing) -> bool {
        self.pin_ring().is_some_and(|r| std::ptr::eq(r, ring))
    }

    /// Gives every frame of the pin ring back to the kernel (no fill ever
    /// takes one).
    pub(super) fn drain_pin_ring(&self, ring: &FrameRing) {
        let mut st = ring.lock();
        loop {
            let (pos, spare) = st.spare_run(ring.cap);
            if spare == 0 {
                break;
            }
            let ps = self.page_bytes;
            if self
                .uffd
                .discard(&ring.reg, &ring.map, pos * ps, spare * ps)
                .is_err()
            {
                break;
            }
            st.dropped(spare);
        }
    }
}
