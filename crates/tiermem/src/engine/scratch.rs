//! Scratch space for eviction and fill runs, preallocated per region so that
//! a fault needs little of the faulting thread's stack (a thread created
//! with `PTHREAD_STACK_MIN`, or a handler on a `SIGSTKSZ` alternate stack,
//! can fault and evict).
//!
//! A region keeps a few full-size sets; a fault claims one with a
//! non-blocking `try_lock` (no allocation, no waiting: safe in a signal
//! handler, and a fault taken while the same thread holds a set simply
//! finds it taken). When every set is taken the caller falls back to a small
//! set on its own stack and works in smaller batches.

use crate::page::{PageState, PageWord};
use std::sync::{Mutex, MutexGuard};
use tiermem_sys::mm::{MapOptions, Mapping};
use tiermem_sys::splice::Pipe;

/// Pages of a splice set's landing buffer.
pub(super) const LANDING_PAGES: usize = 16;

/// What an eviction batch needs to read dirty victims after their batched
/// unmap (see `evict`): a pipe that takes references to them, and a
/// buffer their data lands in when the far store cannot read the pipe
/// itself (or to map a page back whose write-back failed).
pub(super) struct Splice {
    pub(super) pipe: Pipe,
    pub(super) landing: Mapping,
}

impl Splice {
    /// A pipe for up to `pages` pages (at most 256 KiB, less where the
    /// system limits pipe sizes), or None where pipes cannot be had. Pipe
    /// buffers count against the user's pipe allowance
    /// (/proc/sys/fs/pipe-user-pages-soft), which the program's own pipes
    /// share: sets make theirs only when their first batch needs one.
    fn new(pages: usize) -> Option<Splice> {
        let want = (pages * 4096).clamp(1 << 16, 1 << 18);
        let pipe = [want, 1 << 16]
            .into_iter()
            .filter(|&c| c <= want)
            .find_map(|c| Pipe::new(c).ok())?;
        let (landing, _) = Mapping::anonymous(
            LANDING_PAGES * 4096,
            &MapOptions {
                dontfork: true,
                noreserve: true,
                ..Default::default()
            },
        )
        .ok()?;
        // Populated now: a read of evicted pages out of the pipe into it
        // runs after their unmap, when they are nowhere else, and must not
        // fail for a page the kernel cannot allocate then.
        landing.fill(0, LANDING_PAGES * 4096, 0);
        Some(Splice { pipe, landing })
    }
}

/// Victims per batch of the on-stack fallback.
const SMALL_BATCH: usize = 8;
/// Pages per run of the on-stack fallback (victims plus gaps).
const SMALL_RUN: usize = 2 * SMALL_BATCH;
/// Unmap ranges the on-stack fallback queues before a call.
const SMALL_UNMAPS: usize = SMALL_BATCH;

const EMPTY: (usize, PageWord) = (0, PageWord::new(PageState::Untouched, false));

/// The arrays of one eviction batch, whatever their backing.
pub(super) struct EvictBufs<'a> {
    pub(super) victims: &'a mut [usize],
    pub(super) owned: &'a mut [(usize, PageWord)],
    pub(super) extra: &'a mut [(usize, PageWord)],
    pub(super) dirty: &'a mut [bool],
    pub(super) failed: &'a mut [bool],
    pub(super) pos_of: &'a mut [usize],
    /// Per run of a batch (at its first page): its first half is done
    /// and its unmap queued (see `evict_batch_in`).
    pub(super) started: &'a mut [bool],
    /// Per page of a run: its data waits in the splice pipe.
    pub(super) piped: &'a mut [bool],
    /// The set's pipe, if it has one.
    pub(super) splice: Option<&'a Splice>,
    /// Unmap ranges queued for one `process_madvise` (see `evict`).
    pub(super) unmaps: &'a mut [(usize, usize)],
}

/// An eviction set: the arrays of one batch, on the heap
/// ([`EvictScratch`]) or on the stack ([`SmallEvict`]); `V` holds the
/// victims, `P`, `B` and `R` the per-page words, flags and positions of
/// a run, `U` the queued unmap ranges.
pub(super) struct EvictSet<V, P, B, R, U> {
    victims: V,
    owned: P,
    extra: P,
    dirty: B,
    failed: B,
    pos_of: R,
    started: B,
    piped: B,
    splice: LazySplice,
    unmaps: U,
}

/// A set's splice pipe, made when a batch first asks for it.
pub(super) enum LazySplice {
    /// This region's evictions do not pipe (or the set is on the stack).
    Off,
    /// Not made yet, for batches of up to this many pages.
    Later(usize),
    /// Made (None: pipes could not be had; the write-protect path then).
    Made(Option<Splice>),
}

impl LazySplice {
    fn get(&mut self, want: bool) -> Option<&Splice> {
        if let LazySplice::Later(pages) = *self {
            // A `vfork` child (a program's `execve` copying its arguments
            // out of tiered memory) evicts the write-protect way: a pipe it
            // made would be gone for the process that goes on.
            if !want || !tiermem_sys::thread::owns_memory() {
                return None;
            }
            *self = LazySplice::Made(Splice::new(pages));
        }
        match self {
            LazySplice::Made(Some(sp)) if want => Some(sp),
            _ => None,
        }
    }
}

/// A preallocated eviction set.
pub(super) type EvictScratch =
    EvictSet<Vec<usize>, Vec<(usize, PageWord)>, Vec<bool>, Vec<usize>, Vec<(usize, usize)>>;

/// The on-stack fallback eviction set (about 0.9 KiB).
pub(super) type SmallEvict = EvictSet<
    [usize; SMALL_BATCH],
    [(usize, PageWord); SMALL_RUN],
    [bool; SMALL_RUN],
    [usize; SMALL_RUN],
    [(usize, usize); SMALL_UNMAPS],
>;

impl EvictScratch {
    fn new(batch: usize, splice: bool) -> EvictScratch {
        let run = 2 * batch;
        EvictSet {
            victims: vec![0; batch],
            owned: vec![EMPTY; run],
            extra: vec![EMPTY; run],
            dirty: vec![false; run],
            failed: vec![false; run],
            pos_of: vec![0; run],
            started: vec![false; run],
            piped: vec![false; run],
            splice: if splice {
                LazySplice::Later(run)
            } else {
                LazySplice::Off
            },
            unmaps: vec![(0, 0); tiermem_sys::mm::DISCARD_VECTOR],
        }
    }
}

impl SmallEvict {
    pub(super) fn new() -> SmallEvict {
        EvictSet {
            victims: [0; SMALL_BATCH],
            owned: [EMPTY; SMALL_RUN],
            extra: [EMPTY; SMALL_RUN],
            dirty: [false; SMALL_RUN],
            failed: [false; SMALL_RUN],
            pos_of: [0; SMALL_RUN],
            started: [false; SMALL_RUN],
            piped: [false; SMALL_RUN],
            splice: LazySplice::Off,
            unmaps: [(0, 0); SMALL_UNMAPS],
        }
    }
}

impl<V, P, B, R, U> EvictSet<V, P, B, R, U>
where
    V: AsMut<[usize]>,
    P: AsMut<[(usize, PageWord)]>,
    B: AsMut<[bool]>,
    R: AsMut<[usize]>,
    U: AsMut<[(usize, usize)]>,
{
    /// The set's arrays, with its splice pipe if `splice` asks for one
    /// (made now if need be).
    pub(super) fn bufs(&mut self, splice: bool) -> EvictBufs<'_> {
        EvictBufs {
            victims: self.victims.as_mut(),
            owned: self.owned.as_mut(),
            extra: self.extra.as_mut(),
            dirty: self.dirty.as_mut(),
            failed: self.failed.as_mut(),
            pos_of: self.pos_of.as_mut(),
            started: self.started.as_mut(),
            piped: self.piped.as_mut(),
            splice: self.splice.get(splice),
            unmaps: self.unmaps.as_mut(),
        }
    }
}

/// A preallocated fill set: the pages of one install run and which of them
/// were installed.
pub(super) struct FillScratch {
    pub(super) owned: Vec<(usize, PageWord)>,
    pub(super) ok: Vec<bool>,
}

impl FillScratch {
    fn new(run: usize) -> FillScratch {
        FillScratch {
            owned: vec![EMPTY; run],
            ok: vec![false; run],
        }
    }
}

/// The on-stack fallback fill set.
pub(super) struct SmallFill {
    pub(super) owned: [(usize, PageWord); SMALL_BATCH],
    pub(super) ok: [bool; SMALL_BATCH],
}

impl SmallFill {
    pub(super) fn new() -> SmallFill {
        SmallFill {
            owned: [EMPTY; SMALL_BATCH],
            ok: [false; SMALL_BATCH],
        }
    }
}

/// A region's scratch sets.
pub(super) struct Scratch {
    evict: Box<[Mutex<EvictScratch>]>,
    fill: Box<[Mutex<FillScratch>]>,
}

impl Scratch {
    /// Sets sized for batches of up to `batch` victims and fill runs of up
    /// to `run` pages, for a region of `pages` pages; eviction sets with a
    /// splice pipe if `splice`.
    pub(super) fn new(pages: usize, batch: usize, run: usize, splice: bool) -> Scratch {
        // One set per CPU that can fault at once, plus one for a mover;
        // contention beyond that falls back to small batches.
        let sets = tiermem_sys::thread::online_cpus().clamp(1, 8) + 1;
        let batch = batch.min(pages).max(1);
        let run = run.min(pages).max(1);
        Scratch {
            evict: (0..sets)
                .map(|_| Mutex::new(EvictScratch::new(batch, splice)))
                .collect(),
            fill: (0..sets).map(|_| Mutex::new(FillScratch::new(run))).collect(),
        }
    }

    /// A free eviction set, without waiting.
    pub(super) fn claim_evict(&self) -> Option<MutexGuard<'_, EvictScratch>> {
        claim(&self.evict)
    }

    /// A free fill set, without waiting.
    pub(super) fn claim_fill(&self) -> Option<MutexGuard<'_, FillScratch>> {
        claim(&self.fill)
    }
}

fn claim<T>(sets: &[Mutex<T>]) -> Option<MutexGuard<'_, T>> {
    // Start at a slot that depends on the thread (its stack address: no
    // system call) so that concurrent faults try different sets first.
    let here = 0u8;
    let start = std::ptr::addr_of!(here) as usize >> 16;
    crate::claim::try_claim(sets, start)
}
