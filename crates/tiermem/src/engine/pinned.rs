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
//! resident, held outside the budget for a while (below), and the ring is
//! emptied after each eviction, so that it holds no memory. A region that
//! only its own threads fault on evicts as before. Needs `UFFDIO_MOVE`,
//! 4 KiB pages and wp-fault dirty tracking (the ring's conditions); without
//! them the loss stays possible (docs/transparent.md).
//!
//! The same holds for other pins outside tiermem's view (a direct read no
//! trap saw, io_uring fixed buffers), wherever an eviction moves its
//! victims out (the frame ring too). The kernel also refuses a page a
//! fork()ed child shares, or once shared, which only the pin ring holds,
//! and not while pagemap shows it shared (`ring_evict`). A refused page
//! stays resident, off the lists and outside the budget (the fill that
//! wanted its slot goes on), and goes back on the lists after
//! [`PINNED_RETRY`] more evictions or refusals; if it is still pinned then,
//! the next try finds out the same way. The kernel pins a call's pages up
//! to 4 MiB (1,024 pages) at a time and lets them all go before it pins the
//! next ones, so a page held that long ago is free, and a page of the batch
//! in progress is not: retried sooner, it is only refused again (the 64 of
//! a first version churned: millions of refusals). Refusals count because
//! while every victim is pinned nothing is evicted: counting evictions
//! alone, a 16 MiB message at a 16 KiB budget was held whole (15.9 MiB at
//! the peak).

use super::ring::FrameRing;
use super::{RegionCore, Server};
use crate::config::{DirtyTracking, PageSize};
use crate::page::PageState;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Evictions and refusals after which a page found pinned goes back on the
/// policy's lists: the pages the kernel pins at most at once.
const PINNED_RETRY: u64 = 1024;

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

/// The pages an eviction found pinned by the kernel.
pub(super) struct Refused {
    /// Oldest first, each with the count of evictions and refusals when
    /// it was held.
    pages: Mutex<VecDeque<(usize, u64)>>,
    any: AtomicBool,
    /// Evictions refused because the kernel had the page pinned.
    refusals: AtomicU64,
}

impl Refused {
    pub(super) fn new() -> Refused {
        Refused {
            pages: Mutex::new(VecDeque::new()),
            any: AtomicBool::new(false),
            refusals: AtomicU64::new(0),
        }
    }
}

impl RegionCore {
    /// Evictions refused because the kernel had the page pinned.
    pub(crate) fn pinned_refusals(&self) -> u64 {
        self.refused.refusals.load(Ordering::Relaxed)
    }

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

    /// An eviction found page `i` pinned by the kernel: it stays resident
    /// (the caller unlocks it as it was), off the policy's lists (the
    /// victim selection took it off) and outside the budget, so that the
    /// fill waiting for a slot goes on (see the module doc).
    pub(super) fn hold_pinned(&self, i: usize) {
        let mut pinned = self.refused.pages.lock().unwrap_or_else(|p| p.into_inner());
        self.slots.change_held(1);
        let refusals = self.refused.refusals.fetch_add(1, Ordering::Relaxed) + 1;
        pinned.push_back((i, self.stats.evictions.load(Ordering::Relaxed) + refusals));
        self.refused.any.store(true, Ordering::Release);
    }

    /// Puts the pages found pinned [`PINNED_RETRY`] evictions and refusals
    /// ago back on the policy's lists: an eviction that finds one still
    /// pinned holds it again.
    pub(super) fn retry_pinned(&self) {
        if !self.refused.any.load(Ordering::Acquire) {
            return;
        }
        let now =
            self.stats.evictions.load(Ordering::Relaxed) + self.refused.refusals.load(Ordering::Relaxed);
        let mut pinned = self.refused.pages.lock().unwrap_or_else(|p| p.into_inner());
        let due = pinned
            .iter()
            .take_while(|&&(_, at)| at + PINNED_RETRY <= now)
            .count();
        if due == 0 {
            return;
        }
        let pages: Vec<usize> = pinned.drain(..due).map(|(p, _)| p).collect();
        self.refused.any.store(!pinned.is_empty(), Ordering::Release);
        drop(pinned);
        self.release_pinned(pages);
    }

    /// Ends the holds of pages found pinned in `[first, end)` (a discard
    /// is about to drop them).
    pub(super) fn unhold_pinned(&self, first: usize, end: usize) {
        if !self.refused.any.load(Ordering::Acquire) {
            return;
        }
        let mut pinned = self.refused.pages.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<usize> = pinned
            .iter()
            .map(|&(p, _)| p)
            .filter(|&p| p >= first && p < end)
            .collect();
        pinned.retain(|&(p, _)| p < first || p >= end);
        self.refused.any.store(!pinned.is_empty(), Ordering::Release);
        drop(pinned);
        self.release_pinned(gone);
    }

    fn release_pinned(&self, pages: Vec<usize>) {
        if pages.is_empty() {
            return;
        }
        let mut policy = self.policy();
        for &p in &pages {
            // Resident pages go back on the lists. One in transition (a
            // fault marking it written) stays off them: never evicted, it
            // costs a slot, where a page on the lists that a discard racing
            // with this has just dropped would cost a wrong victim.
            if matches!(self.pages.load(p).state(), PageState::Clean | PageState::Dirty) {
                policy.on_fill(p);
            }
        }
        drop(policy);
        self.slots.change_held(-(pages.len() as isize));
    }
}
