//! Overshadow (paper 2, Hori et al.): read far memory at once, and switch
//! each page to its near copy as soon as that copy is done.
//!
//! [`Overshadow::create`] maps the far pages a second time at `to`
//! (read-only, `MAP_SHARED` over the far memory's descriptor), hands the
//! range to the mover threads, and returns: `to` is readable at once and
//! shows the far bytes. A mover (the DMA engine's analogue) copies the far
//! memory in chunks into a near staging mapping (`pread` from the
//! descriptor, paced by an optional [`LinkEmulation`]) and switches each
//! chunk with one `mremap(MREMAP_FIXED | MREMAP_DONTUNMAP)` of the staging
//! pages over `to`: the kernel replaces the far pages by the near ones under
//! the address-space lock, so a reader sees either page, both holding the
//! same bytes, and one TLB flush covers the chunk. Chunks start small (the
//! first page is near early) and double up to a limit (few `mremap`s and
//! TLB flushes for large regions); moved chunks merge back into one VMA.
//!
//! [`Switch::Whole`] is the paper's first prototype: copy everything, then
//! switch all pages at the end.
//!
//! # Writes during the copy (undefined in the paper)
//! Pages of `to` that have not switched are read-only. A write to one raises
//! SIGSEGV; tiermem's in-context handler (on the writing thread) copies that
//! page (with the rest of its 64 KiB block that is still far) and switches
//! it itself, or waits while a mover is copying it, then restarts the write.
//! A write therefore waits for its page only and is never lost. Writes go to
//! the near copy only, never to `from`. Writes to `from` itself during an
//! overshadow may or may not be seen at `to`.
//!
//! # Page states
//! One byte per page: `FAR` (mapped far, read-only) -> `CLAIMED` (a mover
//! or a write fault copies it; only the claimer changes it) -> `COPIED`
//! (in staging, whole-region switch only) -> `CLAIMED` (being switched) ->
//! `NEAR` (switched, writable). `FAILED` if the copy failed (the data is
//! still readable at `to`; a write to it is forwarded as a crash, as a
//! failed read of a file mapping would be).
//!
//! # Destroy
//! 1. set `cancel` and take the job off the mover queue (under its lock, so
//!    no mover picks it afterwards);
//! 2. wait until no mover is inside one of its chunks (a mover finishes the
//!    chunk it holds, so no page stays `CLAIMED`);
//! 3. remove it from the fault registry and wait until no fault handler
//!    holds it;
//! 4. unmap `to` and staging, drop the far descriptor's reference.
//!
//! ```
//! use tiermem::far::FarMemory;
//! use tiermem::overshadow::{Options, Overshadow};
//! use std::sync::atomic::Ordering::Relaxed;
//! let far = FarMemory::alloc(4 << 20)?;
//! far.as_atomic_u64()[9].store(42, Relaxed);
//! let os = Overshadow::create(far.addr(), far.len(), &Options::default())?;
//! assert_eq!(os.as_atomic_u64()[9].load(Relaxed), 42); // readable at once
//! os.as_atomic_u64()[10].store(1, Relaxed);             // waits for its page only
//! os.wait()?;
//! assert!(os.test() && os.is_near(0));
//! # Ok::<(), tiermem::Error>(())
//! ```

use crate::far::{self, FarSource};
use crate::fault::{Fault, FaultHandler, RangeGuard, Served, Signal};
use crate::Error;
use crossbeam_utils::Backoff;
use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tiermem_sys::mm::{base_page_size, Advice, MapOptions, Mapping, UserAccess};

use tiermem_sys::thread::{futex_wait, futex_wake};
use tiermem_sys::Errno;

mod job;
mod movers;

pub use movers::{configure_movers, mover_config, MoverConfig};
use movers::{pool, PoolUse};

/// When pages switch to their near copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// Each chunk as soon as its copy is done (default).
    PerPage,
    /// All pages after the whole copy (the paper's first prototype).
    Whole,
}

impl Switch {
    /// `per-page` or `whole`.
    pub fn name(self) -> &'static str {
        match self {
            Switch::PerPage => "per-page",
            Switch::Whole => "whole",
        }
    }
}

/// An emulated slow link between far and near memory: every transfer of
/// the movers costs `latency_us` plus its bytes at `bandwidth_bytes_per_s`
/// (the mover waits that long; transfers of one overshadow are serialised).
/// This is an emulation, not a measurement of any real link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkEmulation {
    /// Bytes per second.
    pub bandwidth_bytes_per_s: f64,
    /// Per transfer, microseconds.
    pub latency_us: f64,
}

impl LinkEmulation {
    /// Emulated time of one transfer of `bytes`.
    pub fn transfer_time(&self, bytes: usize) -> Duration {
        Duration::from_secs_f64(self.latency_us * 1e-6 + bytes as f64 / self.bandwidth_bytes_per_s)
    }
}

/// How an overshadow copies and switches.
#[derive(Clone, Debug)]
pub struct Options {
    /// Per-page (default) or whole-region switch.
    pub switch: Switch,
    /// Emulated slow link for the movers' copies (None: full speed).
    pub link: Option<LinkEmulation>,
    /// First chunk, bytes (chunks double from here). Default 256 KiB: a
    /// switch costs ~30-150 us here (TLB-shootdown IPIs between vCPUs,
    /// unmapping the far pages the reader mapped), so smaller first chunks
    /// add more switch time than they save.
    pub chunk_min_bytes: usize,
    /// Largest chunk, bytes. Default 2 MiB.
    pub chunk_max_bytes: usize,
    /// Transparent huge pages for the near copy beyond the first 2 MiB
    /// (fewer faults, 2 MiB page-table moves). Default off: on these VMs a
    /// huge page fault on memory the guest had returned to the host is slow
    /// and erratic (a 512 MiB copy took 1.0-2.3 s with huge pages, 0.3-0.55 s
    /// with 4 KiB pages faulted in by `MADV_POPULATE_WRITE`); with warm
    /// memory huge pages are faster (256 MiB in 70 ms).
    pub huge_pages: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            switch: Switch::PerPage,
            link: None,
            chunk_min_bytes: 256 << 10,
            chunk_max_bytes: 2 << 20,
            huge_pages: false,
        }
    }
}

/// What one overshadow did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OvershadowStats {
    /// Chunks copied by movers.
    pub chunks: u64,
    /// `mremap` switches (each one TLB flush).
    pub switches: u64,
    /// Pages copied and switched by write faults.
    pub forced_pages: u64,
    /// Bytes copied.
    pub bytes_copied: u64,
    /// Seconds from create until every page was copied (`T_DMA` plus
    /// per-chunk switches for per-page switch).
    pub copy_seconds: f64,
    /// Seconds spent in `mremap` switches, summed.
    pub switch_seconds: f64,
    /// Seconds from create until every page was near.
    pub done_seconds: f64,
}

// Page states (see the module docs).
const FAR: u8 = 0;
const CLAIMED: u8 = 1;
const COPIED: u8 = 2;
const NEAR: u8 = 3;
const FAILED: u8 = 4;

// Values of `Job::done`.
const RUNNING: u32 = 0;
const DONE: u32 = 1;
const BROKEN: u32 = 2;

/// Pages a write fault copies at most: the rest of its block still far.
const FORCE_BLOCK_BYTES: usize = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Overshadow(Switch),
    /// Plain DMA: copy into the near buffer, switch nothing.
    Copy,
}

/// The read-only second mapping of the far pages, at `to`.
struct View {
    map: Mapping,
    user: UserAccess,
}

struct Job {
    // Field order: `to` and staging are unmapped before `source` drops the
    // last reference to the far descriptor.
    view: Option<View>,
    staging: Mapping,
    staging_user: UserAccess,
    source: FarSource,
    mode: Mode,
    page: usize,
    pages: usize,
    chunk_min_pages: usize,
    chunk_max_pages: usize,
    states: Box<[AtomicU8]>,
    /// Next page a mover claims from.
    cursor: AtomicUsize,
    /// Pages whose copy is done (COPIED or NEAR, or FAILED).
    settled: AtomicUsize,
    /// Pages NEAR.
    near: AtomicUsize,
    /// RUNNING, DONE or BROKEN; a futex word for `wait`.
    done: AtomicU32,
    /// Bumped on every state publish; a futex word for page waiters.
    changed: AtomicU32,
    page_waiters: AtomicU32,
    cancel: AtomicBool,
    /// Movers inside one of this job's chunks.
    active: AtomicUsize,
    link: Option<LinkEmulation>,
    /// Nanoseconds after `created` when the emulated link is free again.
    link_free_ns: AtomicU64,
    /// First failure: errno, and whether it was the copy (1) or switch (2).
    error_errno: AtomicI32,
    error_op: AtomicU8,
    created: Instant,
    chunks: AtomicU64,
    switches: AtomicU64,
    forced_pages: AtomicU64,
    switch_ns: AtomicU64,
    copied_ns: AtomicU64,
    done_ns: AtomicU64,
}

/// One overshadow of far memory, destroyed (at any time) on drop.
pub struct Overshadow {
    job: Arc<Job>,
    /// `to`'s registration with the fault router (none for plain copies).
    routed: Option<RangeGuard>,
    /// The movers, kept running while this overshadow lives (dropped last).
    pool: PoolUse,
}

impl std::fmt::Debug for Overshadow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overshadow")
            .field("to", &format_args!("{:#x}", self.to()))
            .field("len", &self.len())
            .field("mode", &self.job.mode)
            .finish()
    }
}

impl Overshadow {
    /// Overshadows `size` bytes of far memory at `from` (page aligned, all
    /// inside one allocation of [`crate::far`]). The result's
    /// [`Overshadow::to`] is readable at once.
    pub fn create(from: usize, size: usize, opts: &Options) -> Result<Overshadow, Error> {
        Self::start(from, size, opts, Mode::Overshadow(opts.switch))
    }

    fn start(from: usize, size: usize, opts: &Options, mode: Mode) -> Result<Overshadow, Error> {
        let pool = pool()?;
        let job = Arc::new(Job::new(from, size, opts, mode)?);
        let routed = match &job.view {
            Some(v) => Some(crate::fault::register(v.map.addr(), v.map.len(), job.clone())?),
            None => None,
        };
        pool.submit(job.clone());
        Ok(Overshadow { job, routed, pool })
    }

    /// The near address (`to`).
    pub fn to(&self) -> usize {
        self.view_map().addr()
    }

    /// `to` as a pointer (for C).
    pub fn as_ptr(&self) -> *mut u8 {
        self.view_map().as_ptr()
    }

    fn view_map(&self) -> &Mapping {
        self.job.view.as_ref().map_or(&self.job.staging, |v| &v.map)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.job.pages * self.job.page
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `to` as 64-bit atomics: loads see the far bytes until a page
    /// switches and the same bytes after; stores wait for their page.
    pub fn as_atomic_u64(&self) -> &[AtomicU64] {
        match &self.job.view {
            Some(v) => v.map.user_atomics(&v.user),
            None => self.job.staging.user_atomics(&self.job.staging_user),
        }
    }

    /// Waits until every page is near.
    pub fn wait(&self) -> Result<(), Error> {
        self.job.wait()
    }

    /// Whether every page is near (never blocks). A failed copy counts as
    /// finished: `wait` returns its error.
    pub fn test(&self) -> bool {
        self.job.done.load(Ordering::Acquire) != RUNNING
    }

    /// Whether the page holding byte `offset` of `to` is near.
    pub fn is_near(&self, offset: usize) -> bool {
        self.job
            .states
            .get(offset / self.job.page)
            .is_some_and(|s| s.load(Ordering::Acquire) == NEAR)
    }

    /// Pages near so far.
    pub fn near_pages(&self) -> usize {
        self.job.near.load(Ordering::Acquire)
    }

    /// What it did so far.
    pub fn stats(&self) -> OvershadowStats {
        self.job.stats()
    }
}

impl Drop for Overshadow {
    fn drop(&mut self) {
        self.pool.withdraw(&self.job);
        // Returns once no write-fault handler runs on `to` any more.
        drop(self.routed.take());
        // Movers that withdrew may still drop their clones.
        while Arc::strong_count(&self.job) > 1 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// Plain DMA (the paper's baseline): copies `size` bytes of far memory at
/// `from` into a new near buffer with the same movers, chunks, huge pages
/// and link emulation as an overshadow, and returns when it is done. The
/// result's [`Overshadow::to`] is the near buffer.
pub fn copy_to_near(from: usize, size: usize, opts: &Options) -> Result<Overshadow, Error> {
    let c = start_copy_to_near(from, size, opts)?;
    c.wait()?;
    Ok(c)
}

/// [`copy_to_near`] without waiting: the copy is done when
/// [`Overshadow::test`] says so; reading the buffer before is reading
/// zeros or partial data.
pub fn start_copy_to_near(from: usize, size: usize, opts: &Options) -> Result<Overshadow, Error> {
    Overshadow::start(from, size, opts, Mode::Copy)
}
