//! The engine: resolving faults, filling pages, evicting batches.
//!
//! [`RegionCore`] holds everything one region needs on the fault path and is
//! shared (behind an `Arc`) by the region handle, the in-context SIGBUS
//! dispatcher ([`in_context`]) and the handler threads
//! ([`handler_thread`]). Both designs call [`RegionCore::resolve`]; they
//! differ only in who runs it and in how the faulting thread is woken.
//!
//! Data movement is synchronous (paper 1's baseline): a fault that finds the
//! near budget full evicts a batch of FIFO victims first, writing back the
//! dirty ones, and only then fills the faulting page.
//!
//! Eviction protocol for one run of contiguous victims (all `Busy`):
//! 1. `wp-fault`: clean pages are write-protected since they were filled, so
//!    writers fault and wait on the page state; dirty pages are handed to
//!    the eviction set's pipe with `vmsplice`, which takes references to
//!    the pages themselves (where the pipe is full, they are
//!    write-protected now instead: one UFFDIO_WRITEPROTECT over the run,
//!    one TLB shootdown of every other CPU).
//!    `wp-async`: the run is made read-only with `mprotect` (writers get
//!    SIGSEGV and wait), then `PAGEMAP_SCAN` names the written pages.
//! 2. Dirty pages whose writers were stopped are written to the far store,
//!    contiguous ones together.
//! 3. The batch's runs are dropped together, one `process_madvise(
//!    MADV_DONTNEED)` per 64 runs (one TLB shootdown). From here no thread
//!    can write a victim: a write faults and waits on the page state.
//! 4. Piped pages are written to the far store from the pipe: it holds
//!    every write that landed before the unmap (issue 36: no shootdown
//!    per dirty victim). A page whose write-back fails is mapped back.
//! 5. `wp-async`: protection is restored.
//! 6. Page states are published (`Far` or `Untouched`) and waiters woken.
//!
//! A page whose write-back fails stays resident and dirty (never lost);
//! the error is recorded, and a fault that cannot get near memory at all
//! fails visibly (SIGBUS) instead of hanging.
//!
//! The engine is cut into parts, bottom to top, and calls between parts
//! only go down (`layers.rs` lists them and tests it; docs/design.md, "The
//! engine's parts", draws them):
//! 1. core: this file (`RegionCore`, its construction, accessors), `slots`
//!    (the near budget's slots: resident and held pages), `copy`
//!    (`UFFDIO_COPY` primitives), `ring` (frames for zero-copy installs),
//!    `rewrite`, `errors`, `scratch`, `locality`, `progress`, `budget`,
//!    `access`;
//! 2. the evictor: `evict` (victim runs, write-back, publish), `piped`
//!    (dirty victims read through a pipe), `ring_evict` (eviction into the
//!    frame ring), `pinned` (pages the kernel pins), `wp_async` (runs
//!    frozen by `mprotect`, written pages named by `PAGEMAP_SCAN`);
//! 3. the installer: `fill` (demand fills, installs), `around`
//!    (fault-around clusters), `request_fill` (runs asked for by movers and
//!    prefetch), `stride`, `poison`;
//! 4. the movers: `mover`, `prefetch`, `cpu_gate`;
//! 5. the top: `resolve` (a fault, a discard or advice from the program),
//!    the fault paths (`in_context`, `handler_thread`) and kernel accesses
//!    (`pin`, `hold`), a forked child's copy (`inherit`).

mod access;
mod around;
pub(crate) mod budget;
mod copy;
pub(crate) mod cpu_gate;
mod errors;
mod evict;
mod fill;
pub(crate) mod handler_thread;
mod hold;
pub(crate) mod in_context;
mod inherit;
#[cfg(test)]
mod layers;
pub(crate) mod locality;
pub(crate) mod mover;
mod pin;
mod pinned;
mod piped;
mod poison;
pub(crate) mod prefetch;
mod progress;
mod request_fill;
mod resolve;
mod rewrite;
pub(crate) mod ring;
mod ring_evict;
mod scratch;
mod slots;
mod stride;
mod wp_async;

pub(crate) use around::out_of_near;
pub use errors::IoErrorRecord;
pub(crate) use evict::{Evicted, GROW_FACTOR, GROW_FROM, LONG_RUN};

use crate::config::{Config, DirtyTracking, FaultPath, PageSize};
use crate::page::PageTable;
use crate::policy::Policy;
use crate::stats::Stats;
use crate::store::{FarStore, StagingPool, StagingSlot};
use errors::ErrorLog;
use mover::MoverShared;
use prefetch::Prefetcher;
use ring::FrameRing;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tiermem_sys::mm::Mapping;
use tiermem_sys::pagemap::PagemapScanner;
use tiermem_sys::uffd::{Registration, Uffd};
use tiermem_sys::Errno;

/// Who is serving a fault (decides how the faulting thread is woken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Server {
    /// The faulting thread itself, in its SIGBUS handler: nobody sleeps in
    /// the kernel, so no wake-ups are needed.
    InContext,
    /// A handler thread: the faulting thread sleeps until woken.
    HandlerThread,
}

/// The result of serving a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The page is mapped: retry the access.
    Resolved,
    /// The page was mapped already (another thread resolved the fault
    /// first): retry the access.
    Spurious,
    /// The page is poisoned: the access must fail with SIGBUS.
    Poisoned,
}

/// Starts runtime thread `k` of a kind (`name-k`), pinned round robin to
/// `cpus` if given. A panic in it aborts the process with `on_panic`:
/// pages it owned would stay busy, faulting threads would hang.
pub(crate) fn spawn_runtime_thread(
    name: &str,
    k: usize,
    cpus: &[usize],
    on_panic: &'static str,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let cpu = (!cpus.is_empty()).then(|| cpus[k % cpus.len()]);
    let name = format!("{name}-{k}");
    // Runtime threads never run the application's signal handlers: they
    // serve faults and own pages such a handler could touch.
    let builder = std::thread::Builder::new().name(name.clone());
    tiermem_sys::thread::spawn_with_async_signals_blocked(builder, move || {
        match cpu {
            Some(c) => {
                if let Err(e) = tiermem_sys::thread::set_affinity(&[c]) {
                    eprintln!("tiermem: {name}: pinning to CPU {c} failed ({e}); running unpinned");
                }
            }
            // Unpinned: any CPU the process started on. Spawned from a
            // thread an OpenMP runtime bound to one CPU (`OMP_PROC_BIND`),
            // it would inherit that CPU and take turns with the thread on
            // it: NPB CG.A on one thread, `--movers 1`, took 7.0-7.4 s
            // (NPB's time) instead of 3.4-4.6.
            None => widen_to_launch_cpus(&name),
        }
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_err() {
            eprintln!("tiermem: {name} panicked; aborting ({on_panic})");
            std::process::abort();
        }
    })
}

/// Lets the calling runtime thread run on every CPU the process started
/// on (`tiermem_sys::thread::launch_cpus`), if its mask is narrower.
fn widen_to_launch_cpus(name: &str) {
    let want = tiermem_sys::thread::launch_cpus();
    if tiermem_sys::thread::affinity().is_ok_and(|now| now.len() < want.len()) {
        if let Err(e) = tiermem_sys::thread::set_affinity(&want) {
            eprintln!("tiermem: {name}: widening its CPUs to {want:?} failed ({e}); it keeps its creator's");
        }
    }
}

/// Everything the fault path of one region needs.
pub(crate) struct RegionCore {
    // Field order: the region mapping goes first, then the descriptor.
    pub(crate) mapping: Mapping,
    reg: Registration,
    uffd: Uffd,
    pub(crate) config: Config,
    /// THP with UFFDIO_MOVE: buffers in which fills build huge pages.
    thp_staging: Option<StagingPool>,
    /// Staging buffers (bits) that still hold data from a refused move.
    thp_stale: AtomicU64,
    page_bytes: usize,
    page_shift: u32,
    pub(crate) pages: PageTable,
    /// Which pages the program can reach (see `access`).
    pub(crate) access: access::Access,
    /// This region's near slots: its budget, its resident and held pages.
    pub(crate) slots: slots::Slots,
    /// Pages held resident for good outside the budget (stacks).
    held: hold::Held,
    /// Pages an eviction found pinned by the kernel, held for a while.
    refused: pinned::Refused,
    policy: Mutex<Box<dyn Policy>>,
    store: Box<dyn FarStore>,
    /// `store.describe()`, made at creation: the fault path names the
    /// store without allocating.
    store_name: Box<str>,
    /// The store was said to be full (once per region).
    said_full: AtomicBool,
    staging: Option<StagingPool>,
    /// Zeros (never written, so they map the zero page), the source of
    /// COPY-based zero fills: one mover run long.
    zeros: Mapping,
    /// Staging buffers for movers reading runs from a file store.
    mover_pool: Option<StagingPool>,
    /// Pages per mover fill run.
    max_run: usize,
    /// Preallocated eviction and fill arrays (keeps them off the faulting
    /// thread's stack).
    scratch: scratch::Scratch,
    pub(crate) movers: Option<MoverShared>,
    pub(crate) prefetcher: Option<Prefetcher>,
    /// Fault-around for demand faults outside prefetch streams.
    pub(crate) around: Option<locality::FaultAround>,
    /// Frames for zero-copy installs by the movers (`install = move`).
    ring: Option<FrameRing>,
    /// Where evictions move their victims once another process has
    /// faulted on the region (see `pinned`): made then.
    pin_ring: std::sync::OnceLock<Option<FrameRing>>,
    /// Faulting threads checked for being another process's.
    checked_threads: pinned::CheckedThreads,
    /// Which threads fault now: fault-around adapts to threads taking
    /// turns, and dirty victims go through a pipe once two threads have
    /// faulted (see `scratch`).
    faulting_threads: FaultingThreads,
    /// The process forked while this region was copied into children
    /// (`crate::fork`): its resident pages may be shared copy-on-write, so
    /// evictions no longer read dirty victims through the pipe.
    pub(crate) forked: AtomicBool,
    scanner: Option<PagemapScanner>,
    /// Which far pages a read fill installs writable (`Config::rewrite_hint`,
    /// where eviction can compare).
    rewrites: Option<rewrite::RewriteHistory>,
    pub(crate) stats: Stats,
    errors: ErrorLog,
    /// Fork generation that owns the kernel state.
    pub(crate) generation: u64,
    /// The region's address range in the kernel-access window, given back
    /// after the mapping (the first field) is gone.
    _placement: Option<crate::kernel_access::Placement>,
}

/// What `RegionCore::new` needs besides the config.
pub(crate) struct Parts {
    pub(crate) mapping: Mapping,
    pub(crate) reg: Registration,
    pub(crate) uffd: Uffd,
    pub(crate) store: Box<dyn FarStore>,
    pub(crate) policy: Box<dyn Policy>,
    pub(crate) placement: Option<crate::kernel_access::Placement>,
    /// A budget shared with other regions (None: the region's own, of
    /// `near_bytes`).
    pub(crate) shared_budget: Option<Arc<budget::Budget>>,
}

/// Whether several threads fault in a region now: the thread that faulted
/// last, and when another one last took its place (milliseconds since the
/// region was made). A program whose main thread fills the data and whose
/// worker then computes alone counts as one thread again 200 ms after the
/// hand-over.
struct FaultingThreads {
    since: std::time::Instant,
    last: AtomicU32,
    switched_ms: AtomicU64,
}

/// How long after two threads took turns at faulting a region still counts
/// as faulted by several.
const TAKING_TURNS_MS: u64 = 200;

impl FaultingThreads {
    fn new() -> FaultingThreads {
        FaultingThreads {
            since: std::time::Instant::now(),
            last: AtomicU32::new(0),
            switched_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.since.elapsed().as_millis() as u64 + 1
    }

    /// Notes a fault of thread `tid` (0: unknown, ignored). Writes only
    /// when the faulting thread changes.
    fn note(&self, tid: u32) {
        let last = self.last.load(Ordering::Relaxed);
        if tid == 0 || last == tid {
            return;
        }
        self.last.store(tid, Ordering::Relaxed);
        if last != 0 {
            self.switched_ms.store(self.now_ms(), Ordering::Relaxed);
        }
    }

    /// Whether two threads ever faulted in the region.
    fn ever_many(&self) -> bool {
        self.switched_ms.load(Ordering::Relaxed) != 0
    }

    fn many(&self) -> bool {
        let at = self.switched_ms.load(Ordering::Relaxed);
        at != 0 && self.now_ms() - at < TAKING_TURNS_MS
    }
}

impl RegionCore {
    pub(crate) fn new(config: Config, parts: Parts) -> Result<RegionCore, crate::Error> {
        let page_bytes = config.page_size.bytes();
        let pages = config.virt_pages();
        let staging = if parts.store.needs_staging() {
            let slots = 2 * tiermem_sys::thread::online_cpus() + 2;
            Some(StagingPool::new(
                if page_bytes > 4096 { slots.min(8) } else { slots },
                page_bytes,
            )?)
        } else {
            None
        };
        // Movers fill runs of up to 2 MiB (one huge page for 2 MiB pages).
        let max_run = ((2 << 20) / page_bytes).clamp(1, crate::config::MAX_EVICT_BATCH);
        let (zeros, _) = Mapping::anonymous(
            page_bytes * max_run,
            &tiermem_sys::mm::MapOptions {
                dontfork: true,
                noreserve: true,
                ..Default::default()
            },
        )?;
        let mover_pool = if config.movers > 0 && parts.store.needs_staging() {
            Some(StagingPool::new(config.movers, page_bytes * max_run)?)
        } else {
            None
        };
        let shared = parts.shared_budget.clone();
        let mut budget = match &shared {
            Some(b) => ((b.limit_bytes() / page_bytes as u64) as usize).clamp(1, pages),
            None => config.near_pages().max(1),
        };
        // Frame recycling needs UFFDIO_MOVE (Linux 6.8; without it movers
        // copy) and 4 KiB anonymous pages (UFFDIO_MOVE handles neither
        // hugetlb nor ranges frozen read-only by wp-async), and takes its
        // frames from the budget. Movers fill in runs of up to `max_run`;
        // without them, faulting threads recycle the frames of their own
        // eviction batches.
        let ring_pages = if config.movers > 0 {
            2 * max_run
        } else {
            2 * config.evict_batch_pages
        }
        .min(budget / 4);
        // Only when asked (`install = move`): auto copies, which measured
        // faster (see `InstallMethod::Auto`).
        let recycle = config.install == crate::config::InstallMethod::Move;
        // The ring's slots, kept out of a shared budget: given back when
        // `kept` goes, with the slots or on an error return below.
        let mut kept = slots::Kept::new(shared.as_ref(), page_bytes);
        let ring = if recycle
            && parts.uffd.features().contains(tiermem_sys::uffd::Features::MOVE)
            && config.page_size == PageSize::Base4K
            && config.dirty_tracking == DirtyTracking::WpFault
            && ring_pages >= 16
            && kept.keep(ring_pages)
        {
            budget -= ring_pages;
            // On an error, `kept` gives the slots back.
            Some(FrameRing::new(&parts.uffd, ring_pages, page_bytes)?)
        } else {
            None
        };
        // THP fills build the huge page in a staging buffer and move it in
        // whole (UFFDIO_MOVE of one PMD) when the kernel can move pages.
        let thp_staging = if config.page_size == PageSize::Thp2M
            && parts.uffd.features().contains(tiermem_sys::uffd::Features::MOVE)
        {
            Some(StagingPool::huge(tiermem_sys::thread::online_cpus() + 2)?)
        } else {
            None
        };
        let gate_cpus = config.movers_auto.then(tiermem_sys::thread::usable_cpus);
        let movers = (config.movers > 0).then(|| MoverShared::new(budget, gate_cpus));
        // Windows are capped by the budget (`prefetch::BUDGET_SHARE`); a
        // budget whose share is below the smallest window (4 pages, so
        // under 64 pages) gets no prefetch at all.
        let prefetch_room = budget / prefetch::BUDGET_SHARE >= 4;
        let prefetcher = (config.movers > 0 && config.prefetch && prefetch_room).then(|| {
            Prefetcher::new(
                pages,
                config.prefetch_max_pages.min(budget / prefetch::BUDGET_SHARE),
            )
        });
        let around = if RegionCore::around_enabled(&config) {
            Some(locality::FaultAround::new(pages, config.stride)?)
        } else {
            None
        };
        let scanner = if config.dirty_tracking == DirtyTracking::WpAsync {
            Some(PagemapScanner::open().map_err(|e| crate::Error::Sys {
                what: "opening /proc/self/pagemap for PAGEMAP_SCAN",
                errno: Errno(e.raw_os_error().unwrap_or(libc::EIO)),
            })?)
        } else {
            None
        };
        let rewrites = if config.rewrite_hint
            && config.dirty_tracking == DirtyTracking::WpFault
            && config.page_size != PageSize::Thp2M
            && parts.store.compares_in_place()
        {
            Some(rewrite::RewriteHistory::new(pages)?)
        } else {
            None
        };
        Ok(RegionCore {
            rewrites,
            thp_staging,
            thp_stale: AtomicU64::new(0),
            slots: slots::Slots::new(shared, budget, page_bytes, kept),
            ring,
            pin_ring: std::sync::OnceLock::new(),
            checked_threads: pinned::CheckedThreads::new(),
            faulting_threads: FaultingThreads::new(),
            forked: AtomicBool::new(false),
            page_shift: page_bytes.trailing_zeros(),
            page_bytes,
            mapping: parts.mapping,
            reg: parts.reg,
            uffd: parts.uffd,
            pages: PageTable::try_new(pages)?,
            access: access::Access::new(pages, page_bytes)?,
            held: hold::Held::new(),
            refused: pinned::Refused::new(),
            policy: Mutex::new(parts.policy),
            store_name: parts.store.describe().into(),
            said_full: AtomicBool::new(false),
            store: parts.store,
            staging,
            zeros,
            mover_pool,
            max_run,
            // wp-fault with 4 KiB pages reads dirty victims through a
            // pipe after their batched unmap (see `evict`).
            scratch: scratch::Scratch::new(
                pages,
                crate::config::MAX_EVICT_BATCH,
                max_run,
                config.dirty_tracking == DirtyTracking::WpFault && config.page_size == PageSize::Base4K,
            ),
            movers,
            prefetcher,
            around,
            scanner,
            stats: Stats::new(),
            errors: ErrorLog::new(),
            generation: tiermem_sys::thread::fork_generation(),
            _placement: parts.placement,
            config,
        })
    }

    /// Transparent huge pages: blocks are installed writable, moved in
    /// whole or collapsed.
    fn thp(&self) -> bool {
        self.config.page_size == PageSize::Thp2M
    }

    pub(crate) fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    pub(crate) fn resident_pages(&self) -> usize {
        self.slots.resident()
    }

    pub(crate) fn store_description(&self) -> String {
        self.store.describe()
    }

    pub(crate) fn page_of(&self, addr: usize) -> usize {
        (addr - self.mapping.addr()) >> self.page_shift
    }

    /// Page `i` as the budget's forward-progress state names it.
    fn page_key(&self, i: usize) -> progress::PageKey {
        progress::PageKey(self.mapping.addr() + (i << self.page_shift))
    }

    /// Whether an eviction that spares `keep` must leave page `i` alone.
    fn spares(&self, keep: progress::Keep, i: usize) -> bool {
        self.slots.budget.progress.spares(keep, self.page_key(i))
    }

    /// What the `auto` policy did, if the region has it.
    pub(crate) fn auto_policy_stats(&self) -> Option<crate::policy::auto::AutoStats> {
        if self.config.policy.sees_evictions() {
            self.policy().auto_stats()
        } else {
            None
        }
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, Box<dyn Policy>> {
        // A poisoned lock means a panic on the fault path, which aborts the
        // process; recover the guard rather than panic again.
        self.policy.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A mover's staging buffer for file-store runs.
    pub(crate) fn mover_staging(&self) -> Option<StagingSlot<'_>> {
        self.mover_pool.as_ref().map(StagingPool::claim)
    }

    pub(crate) fn fault_path(&self) -> FaultPath {
        self.config.fault_path
    }

    pub(crate) fn uffd(&self) -> &Uffd {
        &self.uffd
    }

    /// Whether fault-around applies to this region's pages at all.
    fn around_enabled(config: &crate::config::Config) -> bool {
        config.fault_around && config.page_size == PageSize::Base4K
    }
}
