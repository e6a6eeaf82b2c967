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
//! This file holds `RegionCore`, its construction and the fault entry
//! (`resolve`); the rest of the fault path lives in sibling files: `fill`
//! (near slots, fills and installs), `evict` (victim runs, write-back,
//! publish), `piped` (dirty victims read through a pipe), `ring_evict`
//! (eviction into the frame ring), `discard` (discard and poison) and `errors` (the error log).

mod access;
mod around;
pub(crate) mod budget;
pub(crate) mod cpu_gate;
mod discard;
mod errors;
mod evict;
mod fill;
pub(crate) mod handler_thread;
mod hold;
pub(crate) mod in_context;
mod inherit;
pub(crate) mod locality;
pub(crate) mod mover;
mod pin;
mod pinned;
mod piped;
pub(crate) mod prefetch;
mod progress;
mod request_fill;
mod rewrite;
pub(crate) mod ring;
mod ring_evict;
mod scratch;
mod stride;

pub(crate) use around::out_of_near;
pub use errors::IoErrorRecord;
pub(crate) use evict::{Evicted, GROW_FACTOR, GROW_FROM, LONG_RUN};

use crate::config::{Config, DirtyTracking, FaultPath, PageSize};
use crate::page::{PageState, PageTable, PageWord};
use crate::policy::Policy;
use crate::stats::{Cost, FaultKind, FaultTimer, Stats};
use crate::store::{FarStore, StagingPool, StagingSlot, StoreError};
use errors::{ErrorLog, OP_INSTALL};
use mover::MoverShared;
use prefetch::{Advice, Prefetcher};
use ring::FrameRing;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
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
    /// This region's share of the budget in its own pages (all of it when
    /// the budget is shared): sizes mover batches.
    budget_pages: usize,
    /// The near budget shared with other regions, or this region's own
    /// (whose slots it does not use: its resident count is its budget).
    /// Either way it keeps the forward-progress state and the pin count.
    pub(crate) budget: Arc<budget::Budget>,
    shared_budget: bool,
    /// Pages of this region resident (or reserved for a fill).
    resident: AtomicUsize,
    /// Pages held resident for good outside the budget (stacks).
    held: hold::Held,
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

/// Takes `n` pages for good from a shared budget (the frame ring's: near
/// memory like resident pages); all or nothing, and never past a quarter
/// of it (see `Budget::keep`). True for a region's own budget, which the
/// caller shrinks instead.
fn take_from_shared(shared: &Option<Arc<budget::Budget>>, n: usize, page_bytes: usize) -> bool {
    shared.as_ref().is_none_or(|b| b.keep(n, page_bytes))
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

impl Drop for RegionCore {
    fn drop(&mut self) {
        // A shared budget outlives the region: give its pages' room back,
        // and its frame ring's.
        if self.shared_budget {
            let ring = self.ring.as_ref().map_or(0, |r| r.cap);
            self.budget
                .give_back(self.resident.load(Ordering::Relaxed), self.page_bytes);
            self.budget.give_back_kept(ring, self.page_bytes);
        }
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
        let ring = if recycle
            && parts.uffd.features().contains(tiermem_sys::uffd::Features::MOVE)
            && config.page_size == PageSize::Base4K
            && config.dirty_tracking == DirtyTracking::WpFault
            && ring_pages >= 16
            && take_from_shared(&shared, ring_pages, page_bytes)
        {
            budget -= ring_pages;
            match FrameRing::new(&parts.uffd, ring_pages, page_bytes) {
                Ok(ring) => Some(ring),
                Err(e) => {
                    if let Some(b) = &shared {
                        b.give_back_kept(ring_pages, page_bytes);
                    }
                    return Err(e);
                }
            }
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
            budget_pages: budget,
            shared_budget: shared.is_some(),
            budget: shared.unwrap_or_else(|| budget::Budget::new((budget * page_bytes) as u64)),
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
            resident: AtomicUsize::new(0),
            held: hold::Held::new(),
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
        self.resident.load(Ordering::Relaxed)
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
        self.budget.progress.spares(keep, self.page_key(i))
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

    /// Waits (counted) until page `i`, in transition, is published.
    pub(crate) fn wait_page(&self, i: usize) {
        let t = std::time::Instant::now();
        self.pages.wait_not_busy(i);
        self.stats.waits.fetch_add(1, Ordering::Relaxed);
        self.stats
            .wait_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// A fault on the region's descriptor outside the region: a hole of
    /// the frame ring, which only the kernel itself touches (a raw
    /// `mlockall` system call populates every accessible mapping,
    /// `tiermem_sys::locks`). It gets a zero page, so that the call goes on;
    /// the eviction that finds the hole taken empties it again.
    pub(crate) fn resolve_outside(&self, addr: usize) {
        let Some(ring) = &self.ring else {
            return;
        };
        if ring.map.contains(addr) {
            let off = (addr - ring.map.addr()) & !(self.page_bytes - 1);
            let _ = self.uffd.zeropage(&ring.reg, off, self.page_bytes, false);
        }
    }

    /// Serves a fault at `addr` (in the region) for thread `tid`.
    pub(crate) fn resolve(&self, addr: usize, write: bool, tid: u32, server: Server) -> Outcome {
        let i = self.page_of(addr);
        let mut timer = FaultTimer::start();
        loop {
            let w = self.pages.load(i);
            match w.state() {
                PageState::Busy => {
                    self.wait_page(i);
                    timer.lap(Cost::LockList);
                }
                PageState::Untouched | PageState::Far => {
                    if !self.pages.try_lock(i, w) {
                        continue;
                    }
                    timer.lap(Cost::LockList);
                    let foreign = self.note_faulting_process(tid, server);
                    let outcome = self.fill(i, w, write, tid, foreign, server, timer);
                    if outcome == Outcome::Resolved {
                        if !foreign {
                            self.budget.progress.filled(tid, self.page_key(i));
                        }
                        self.stride_ahead(tid, i, write);
                        self.after_demand_fault(tid, i, write);
                    }
                    return outcome;
                }
                PageState::Clean | PageState::Dirty => {
                    // wp-fault mode: a write to a resident page is a
                    // write-protect fault (on a Clean page normally; on a
                    // Dirty page when an abandoned eviction left it
                    // protected, or a racing fill made it Dirty first:
                    // unprotecting again is harmless). Anything else, and
                    // everything in wp-async mode, was resolved by another
                    // thread after this one faulted.
                    let wp = write && self.config.dirty_tracking == DirtyTracking::WpFault;
                    if !wp {
                        if server == Server::HandlerThread {
                            let _ = self.uffd.wake(&self.reg, i * self.page_bytes, self.page_bytes);
                        }
                        self.stats.record_fault(FaultKind::Spurious, tid, timer);
                        return Outcome::Spurious;
                    }
                    if !self.pages.try_lock(i, w) {
                        continue;
                    }
                    timer.lap(Cost::LockList);
                    let r = self.uffd.writeprotect(
                        &self.reg,
                        i * self.page_bytes,
                        self.page_bytes,
                        false,
                        server == Server::InContext,
                    );
                    timer.lap(Cost::Pte);
                    let dirty = PageWord::new(PageState::Dirty, w.far_valid());
                    if let Err(e) = r {
                        // The page is intact, only unwritable: report it and
                        // fail the access rather than loop on the fault.
                        self.errors.record(
                            (i * self.page_bytes) as u64,
                            OP_INSTALL,
                            e.errno().map_or(0, |e| e.raw()),
                        );
                        self.pages.unlock(i, dirty);
                        return Outcome::Poisoned;
                    }
                    let kind = if w.state() == PageState::Clean {
                        FaultKind::WriteProtect
                    } else {
                        FaultKind::Spurious
                    };
                    // Record before publishing (see `fill`).
                    self.stats.record_fault(kind, tid, timer);
                    self.pages.unlock(i, dirty);
                    // A write to a clean page is an access the policy can use.
                    self.policy().on_access(i);
                    if let Some(fa) = &self.around {
                        fa.written(i);
                    }
                    return Outcome::Resolved;
                }
                PageState::Poisoned => {
                    if server == Server::HandlerThread {
                        // The pte may already carry the poison marker; make
                        // sure the waiting thread is released into SIGBUS.
                        self.place_poison_marker(i * self.page_bytes);
                        let _ = self.uffd.wake(&self.reg, i * self.page_bytes, self.page_bytes);
                    }
                    return Outcome::Poisoned;
                }
            }
        }
    }

    /// Feeds a demand fault to the prefetcher and queues what it asks for.
    fn after_demand_fault(&self, tid: u32, page: usize, write: bool) {
        let (Some(pf), Some(m)) = (&self.prefetcher, &self.movers) else {
            return;
        };
        if m.stood_down() {
            return;
        }
        let reqs = pf.on_fault(&self.pages, tid, page, write);
        for r in reqs.as_slice() {
            if !m.submit(*r) {
                pf.dropped.fetch_add(r.count as u64, Ordering::Relaxed);
            }
        }
        if !reqs.as_slice().is_empty() {
            m.wake();
        }
        if reqs.inline.count > 0 {
            // Not marked prefetched: the thread is right there.
            let n = self.fill_on_caller(&reqs.inline, false);
            pf.inline.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Near slots free now.
    pub(crate) fn free_slots(&self) -> usize {
        if self.shared_budget {
            self.budget.free(self.page_bytes)
        } else {
            (self.budget_pages + self.held.pages()).saturating_sub(self.resident.load(Ordering::Relaxed))
        }
    }

    /// Takes up to `n` near slots for this region; returns how many.
    fn take_slots(&self, n: usize) -> usize {
        let (got, r) = if self.shared_budget {
            let got = self.budget.take(n, self.page_bytes);
            (got, self.resident.fetch_add(got, Ordering::Relaxed) + got)
        } else {
            // A region's own budget is its resident count: one CAS.
            let mut r = self.resident.load(Ordering::Relaxed);
            loop {
                let got = n.min((self.budget_pages + self.held.pages()).saturating_sub(r));
                if got == 0 {
                    return 0;
                }
                // Relaxed: the counter is a budget, not a publication; page
                // data is ordered by the page-state words.
                match self
                    .resident
                    .compare_exchange_weak(r, r + got, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => break (got, r + got),
                    Err(now) => r = now,
                }
            }
        };
        // Read first: the high-water mark rarely moves, and a write to a
        // shared line on every fault would cost more than the check.
        if got > 0 && r as u64 > self.stats.resident_peak.load(Ordering::Relaxed) {
            self.stats.resident_peak.fetch_max(r as u64, Ordering::Relaxed);
        }
        got
    }

    /// Gives back `n` slots (pages that left, or fills that failed).
    pub(crate) fn release_slots(&self, n: usize) {
        self.resident.fetch_sub(n, Ordering::Relaxed);
        if self.shared_budget {
            self.budget.give_back(n, self.page_bytes);
        }
    }

    /// A mover's staging buffer for file-store runs.
    pub(crate) fn mover_staging(&self) -> Option<StagingSlot<'_>> {
        self.mover_pool.as_ref().map(StagingPool::claim)
    }

    /// Access advice for `[first, first+count)`.
    pub(crate) fn advise(&self, first: usize, count: usize, advice: Advice) -> Result<(), StoreError> {
        match advice {
            Advice::WillNeed => self.prefetch_range(first, count),
            Advice::DontNeed => {
                self.evict_range(first, count)?;
            }
            _ => {
                if let Some(pf) = &self.prefetcher {
                    pf.set_advice(first, first + count, advice);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn fault_path(&self) -> FaultPath {
        self.config.fault_path
    }

    pub(crate) fn uffd(&self) -> &Uffd {
        &self.uffd
    }
}
