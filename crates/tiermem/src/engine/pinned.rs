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
use std::sync::atomic::{AtomicU32, Ordering};

/// Threads recently checked for belonging to another process, hashed by
/// thread id: the thread id, with [`FOREIGN`] set for another process's.
/// Threads that share a slot only check again.
pub(super) struct CheckedThreads([AtomicU32; CHECKED_SLOTS]);

const CHECKED_SLOTS: usize = 16;
/// Thread ids stay below 2^22 (`pid_max`).
const FOREIGN: u32 = 1 << 31;

impl CheckedThreads {
    pub(super) fn new() -> CheckedThreads {
        CheckedThreads(std::array::from_fn(|_| AtomicU32::new(0)))
    }

    /// Whether `tid` is another process's thread: one system call the
    /// first time a thread is seen (or after another took its slot).
    fn foreign(&self, tid: u32) -> bool {
        let slot = &self.0[tid as usize % CHECKED_SLOTS];
        // A plain load first: the same thread faulting again (the common
        // case) writes nothing to the shared line.
        let seen = slot.load(Ordering::Relaxed);
        if seen & !FOREIGN == tid {
            return seen & FOREIGN != 0;
        }
        let foreign = !tiermem_sys::thread::in_this_process(tid);
        slot.store(if foreign { tid | FOREIGN } else { tid }, Ordering::Relaxed);
        foreign
    }
}

impl RegionCore {
    /// Notes a fault of thread `tid` and says whether the thread is another
    /// process's: the first such fault makes the pin ring. Such a thread is
    /// in a system call that pins this process's pages one by one
    /// (`process_vm_writev`/`readv`): it needs no instruction's pages kept
    /// for it, and its pages, once pinned, cannot go anyway.
    pub(super) fn note_faulting_process(&self, tid: u32, server: Server) -> bool {
        if server != Server::HandlerThread || tid == 0 || !self.checked_threads.foreign(tid) {
            return false;
        }
        self.pin_ring.get_or_init(|| self.make_pin_ring());
        true
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
