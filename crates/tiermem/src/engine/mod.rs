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
//!    writers fault and wait on the page state; dirty pages are
//!    write-protected now (one UFFDIO_WRITEPROTECT over the run).
//!    `wp-async`: the run is made read-only with `mprotect` (writers get
//!    SIGSEGV and wait), then `PAGEMAP_SCAN` names the written pages.
//! 2. Dirty pages are written to the far store, contiguous ones together.
//! 3. The run is dropped with one `MADV_DONTNEED` (one TLB shootdown).
//! 4. `wp-async`: protection is restored.
//! 5. Page states are published (`Far` or `Untouched`) and waiters woken.
//!
//! A page whose write-back fails stays resident and dirty (never lost);
//! the error is recorded, and a fault that cannot get near memory at all
//! fails visibly (SIGBUS) instead of hanging.

pub(crate) mod handler_thread;
pub(crate) mod in_context;
pub(crate) mod mover;
pub(crate) mod prefetch;
pub(crate) mod ring;

use crate::config::{Config, DirtyTracking, FaultPath, PageSize};
use crate::page::{PageState, PageTable, PageWord};
use crate::policy::Policy;
use crate::stats::{Cost, FaultKind, FaultTimer, Stats};
use crate::store::{FarStore, StagingPool, StagingSlot, StoreError};
use mover::MoverShared;
use prefetch::{Advice, Prefetcher, Request};
use ring::FrameRing;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tiermem_sys::mm::{Mapping, Protection};
use tiermem_sys::pagemap::{Categories, PageRegion, PagemapScanner, ScanRequest};
use tiermem_sys::uffd::{CopyMode, Registration, Resolved, Uffd, UffdError};
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

/// What one eviction batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Evicted {
    /// Pages that left near memory.
    pub(crate) pages: usize,
    /// Contiguous runs they formed: one unmap call (one TLB shootdown) each.
    pub(crate) runs: usize,
}

/// Why no near slot could be made free.
#[derive(Debug)]
pub(crate) enum NoRoom {
    /// Write-back failed for every victim.
    Store(StoreError),
    /// Every resident page stayed busy for too long.
    Stuck,
}

/// One recorded I/O error.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IoErrorRecord {
    /// Offset of the page in the region.
    pub offset: u64,
    /// `read` (fill) or `write` (write-back) or `evict` (no room).
    pub op: &'static str,
    /// errno (0 when not from a system call).
    pub errno: i32,
    /// Human-readable message.
    pub message: String,
}

const ERROR_RING: usize = 32;

/// A fixed ring of the latest errors; slots hold plain data so recording
/// never allocates (messages are built when read).
struct ErrorLog {
    ring: Mutex<[(u64, u8, i32); ERROR_RING]>,
    count: AtomicU64,
}

impl ErrorLog {
    fn new() -> ErrorLog {
        ErrorLog {
            ring: Mutex::new([(0, 0, 0); ERROR_RING]),
            count: AtomicU64::new(0),
        }
    }
    fn record(&self, offset: u64, op: u8, errno: i32) {
        let n = self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut r) = self.ring.lock() {
            r[(n as usize) % ERROR_RING] = (offset, op, errno);
        }
    }
    fn list(&self) -> Vec<IoErrorRecord> {
        let n = self.count.load(Ordering::Relaxed) as usize;
        let Ok(r) = self.ring.lock() else {
            return Vec::new();
        };
        let first = n.saturating_sub(ERROR_RING);
        (first..n)
            .map(|k| {
                let (offset, op, errno) = r[k % ERROR_RING];
                let op = ["read", "write", "evict", "install"][op as usize % 4];
                let message = match (op, errno) {
                    ("evict", 0) => "no near memory could be freed (all resident pages busy)".to_owned(),
                    (_, 0) => format!("{op} failed"),
                    _ => format!("{op} failed: {}", Errno(errno)),
                };
                IoErrorRecord {
                    offset,
                    op,
                    errno,
                    message,
                }
            })
            .collect()
    }
}

const OP_READ: u8 = 0;
const OP_WRITE: u8 = 1;
const OP_EVICT: u8 = 2;
const OP_INSTALL: u8 = 3;

/// Most pages one eviction run can hold: a batch of victims plus the gaps
/// filled between them.
const MAX_RUN: usize = 2 * crate::config::MAX_EVICT_BATCH;

/// How long a fault keeps trying to free a near slot while every resident
/// page is busy before it gives up and fails the access.
const STUCK_LIMIT: Duration = Duration::from_secs(10);

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
    std::thread::Builder::new().name(name.clone()).spawn(move || {
        if let Some(c) = cpu {
            if let Err(e) = tiermem_sys::thread::set_affinity(&[c]) {
                eprintln!("tiermem: {name}: pinning to CPU {c} failed ({e}); running unpinned");
            }
        }
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_err() {
            eprintln!("tiermem: {name} panicked; aborting ({on_panic})");
            std::process::abort();
        }
    })
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
    budget_pages: usize,
    resident: AtomicUsize,
    policy: Mutex<Box<dyn Policy>>,
    store: Box<dyn FarStore>,
    staging: Option<StagingPool>,
    /// Zeros (never written, so they map the zero page), the source of
    /// COPY-based zero fills: one mover run long.
    zeros: Mapping,
    /// Staging buffers for movers reading runs from a file store.
    mover_pool: Option<StagingPool>,
    /// Pages per mover fill run.
    max_run: usize,
    pub(crate) movers: Option<MoverShared>,
    pub(crate) prefetcher: Option<Prefetcher>,
    /// Frames for zero-copy installs by the movers (`install = move`).
    ring: Option<FrameRing>,
    scanner: Option<PagemapScanner>,
    pub(crate) stats: Stats,
    errors: ErrorLog,
    /// Fork generation that owns the kernel state.
    pub(crate) generation: u64,
}

/// What `RegionCore::new` needs besides the config.
pub(crate) struct Parts {
    pub(crate) mapping: Mapping,
    pub(crate) reg: Registration,
    pub(crate) uffd: Uffd,
    pub(crate) store: Box<dyn FarStore>,
    pub(crate) policy: Box<dyn Policy>,
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
        let mut budget = config.near_pages().max(1);
        // Frame recycling needs 4 KiB anonymous pages (UFFDIO_MOVE handles
        // neither hugetlb nor ranges frozen read-only by wp-async), and
        // takes its frames from the budget.
        let ring_pages = (2 * max_run).min(budget / 4);
        let ring = if config.movers > 0
            && config.install == crate::config::InstallMethod::Move
            && config.page_size == PageSize::Base4K
            && config.dirty_tracking == DirtyTracking::WpFault
            && ring_pages >= 16
        {
            budget -= ring_pages;
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
        let movers = (config.movers > 0).then(|| MoverShared::new(budget));
        let prefetcher =
            (config.movers > 0 && config.prefetch).then(|| Prefetcher::new(pages, config.prefetch_max_pages));
        let scanner = if config.dirty_tracking == DirtyTracking::WpAsync {
            Some(PagemapScanner::open().map_err(|e| crate::Error::Sys {
                what: "opening /proc/self/pagemap for PAGEMAP_SCAN",
                errno: Errno(e.raw_os_error().unwrap_or(libc::EIO)),
            })?)
        } else {
            None
        };
        Ok(RegionCore {
            thp_staging,
            thp_stale: AtomicU64::new(0),
            budget_pages: budget,
            ring,
            page_shift: page_bytes.trailing_zeros(),
            page_bytes,
            mapping: parts.mapping,
            reg: parts.reg,
            uffd: parts.uffd,
            pages: PageTable::new(pages),
            resident: AtomicUsize::new(0),
            policy: Mutex::new(parts.policy),
            store: parts.store,
            staging,
            zeros,
            mover_pool,
            max_run,
            movers,
            prefetcher,
            scanner,
            stats: Stats::new(),
            errors: ErrorLog::new(),
            generation: tiermem_sys::thread::fork_generation(),
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

    pub(crate) fn errors(&self) -> Vec<IoErrorRecord> {
        self.errors.list()
    }

    pub(crate) fn page_of(&self, addr: usize) -> usize {
        (addr - self.mapping.addr()) >> self.page_shift
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, Box<dyn Policy>> {
        // A poisoned lock means a panic on the fault path, which aborts the
        // process; recover the guard rather than panic again.
        self.policy.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits (counted) until page `i`, in transition, is published.
    pub(crate) fn wait_page(&self, i: usize) {
        self.stats.waits.fetch_add(1, Ordering::Relaxed);
        self.pages.wait_not_busy(i);
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
                    let outcome = self.fill(i, w, write, tid, server, timer);
                    if outcome == Outcome::Resolved {
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
                    return Outcome::Resolved;
                }
                PageState::Poisoned => {
                    if server == Server::HandlerThread {
                        // The pte may already carry the poison marker; make
                        // sure the waiting thread is released into SIGBUS.
                        let _ = self
                            .uffd
                            .poison(&self.reg, i * self.page_bytes, self.page_bytes, true);
                        let _ = self.uffd.wake(&self.reg, i * self.page_bytes, self.page_bytes);
                    }
                    return Outcome::Poisoned;
                }
            }
        }
    }

    /// Fills page `i` (owned, was `w`): reserves a near slot, brings the
    /// data in, installs the pte, publishes the state.
    fn fill(
        &self,
        i: usize,
        w: PageWord,
        write: bool,
        tid: u32,
        server: Server,
        mut timer: FaultTimer,
    ) -> Outcome {
        if let Err(why) = self.reserve_slot(&mut timer) {
            let errno = match &why {
                NoRoom::Store(e) => e.errno().map_or(0, |e| e.raw()),
                NoRoom::Stuck => 0,
            };
            self.errors.record((i * self.page_bytes) as u64, OP_EVICT, errno);
            return self.poison(i, w, server);
        }
        let off = i * self.page_bytes;
        // Handler threads let the ioctl wake the faulting thread: waking it
        // only after publishing the state would cost an extra ioctl and
        // still not order anything, because a faulting thread that has not
        // gone to sleep yet simply retries once the pte is there. The page
        // state and the statistics therefore lag the application by
        // microseconds in that design.
        let dont_wake = server == Server::InContext;
        // THP blocks are installed writable: write-protected small pages
        // cannot collapse.
        let wp_on_install = !write && !self.thp();
        let (installed, kind) = match w.state() {
            PageState::Untouched => {
                // The shared zero page costs no memory, but only wp-async can
                // use it: its dirty tracking reads the pte at eviction, and a
                // write COWs the zero page into a "written" page. wp-fault
                // needs the page write-protected from the moment it is
                // mapped; ZEROPAGE followed by WRITEPROTECT leaves a window
                // in which another thread's write is a plain kernel COW,
                // invisible to us, and the page would later be dropped as
                // still zero (a lost write; see the stress test
                // `first_read_racing_a_first_write_loses_nothing`). So
                // wp-fault, writes, hugetlb (no ZEROPAGE there) and handler
                // threads (which need COPY's wake-up) install a copy of
                // zeros in one atomic UFFDIO_COPY, write-protected for reads.
                let zero_page = !write
                    && self.config.dirty_tracking == DirtyTracking::WpAsync
                    && self.config.page_size == PageSize::Base4K
                    && server == Server::InContext;
                let r = if zero_page {
                    self.retry_again(|| self.uffd.zeropage(&self.reg, off, self.page_bytes, dont_wake))
                } else if self.thp() {
                    self.install_thp(off, None, dont_wake)
                } else {
                    self.copy_in(
                        off,
                        self.zeros.range(0, self.page_bytes),
                        wp_on_install,
                        dont_wake,
                    )
                };
                timer.lap(Cost::Pte);
                (r, FaultKind::ZeroFill)
            }
            PageState::Far => {
                let slot = self.staging.as_ref().map(StagingPool::claim);
                let fetched = self.store.fetch(off as u64, self.page_bytes, slot.as_ref());
                timer.lap(Cost::Transfer);
                match fetched {
                    Ok(src) => {
                        let r = if self.thp() {
                            self.install_thp(off, Some(src), dont_wake)
                        } else {
                            self.copy_in(off, src, wp_on_install, dont_wake)
                        };
                        timer.lap(Cost::Pte);
                        self.stats
                            .bytes_in
                            .fetch_add(self.page_bytes as u64, Ordering::Relaxed);
                        (r, FaultKind::FarFill)
                    }
                    Err(e) => {
                        self.store_failed(off as u64, OP_READ, &e);
                        self.resident.fetch_sub(1, Ordering::Relaxed);
                        return self.poison(i, w, server);
                    }
                }
            }
            _ => unreachable!("fill of a resident page"),
        };
        if let Err(e) = installed {
            // Typically ENOMEM: the hugetlb pool ran dry.
            self.errors
                .record(off as u64, OP_INSTALL, e.errno().map_or(0, |e| e.raw()));
            self.resident.fetch_sub(1, Ordering::Relaxed);
            return self.poison(i, w, server);
        }
        // List the page before publishing it, so an evictor that pops it
        // finds it Busy and waits rather than missing it.
        self.policy().on_fill(i);
        let next = self.filled_state(write, w);
        timer.lap(Cost::LockList);
        // Record before publishing: a page that is no longer Busy has its
        // fault counted (Region::settle relies on it).
        self.stats.record_fault(kind, tid, timer);
        self.pages.unlock(i, next);
        Outcome::Resolved
    }

    /// The state of a page just filled for a read or a write. A THP block
    /// is mapped writable, so it counts as dirty until eviction finds it
    /// still equal to its far copy (VERIFY).
    fn filled_state(&self, write: bool, w: PageWord) -> PageWord {
        if write {
            PageWord::new(PageState::Dirty, w.far_valid())
        } else if self.thp() {
            PageWord::new(PageState::Dirty, w.far_valid()).with_verify()
        } else {
            PageWord::new(PageState::Clean, w.far_valid())
        }
    }

    /// Installs one THP block at region offset `off` with the contents of
    /// `src` (zeros for None): moved in whole when the kernel allows it,
    /// else 512 small pages copied and collapsed.
    fn install_thp(
        &self,
        off: usize,
        src: Option<tiermem_sys::mm::MemRange<'_>>,
        dont_wake: bool,
    ) -> Result<(), UffdError> {
        let data = src.unwrap_or(self.zeros.range(0, self.page_bytes));
        let moved = match &self.thp_staging {
            Some(pool) => self.move_thp(pool, off, src),
            None => 0,
        };
        if moved == self.page_bytes {
            return Ok(());
        }
        let r = self.copy_in(
            off + moved,
            data.sub(moved, self.page_bytes - moved),
            false,
            dont_wake,
        );
        if r.is_ok() && moved == 0 {
            self.collapse(off, 1);
        }
        r
    }

    /// The fast path of [`Self::install_thp`]: builds the block in a staging
    /// buffer advised for huge pages and moves it in whole (`UFFDIO_MOVE`
    /// of one PMD: no copy into the region, no collapse). Returns the bytes
    /// moved: the whole block, part of it (the buffer got small pages), or
    /// nothing (the block's range still has a page table from small pages:
    /// EEXIST).
    fn move_thp(&self, pool: &StagingPool, off: usize, src: Option<tiermem_sys::mm::MemRange<'_>>) -> usize {
        let slot = pool.claim();
        let (buf, at) = (slot.mapping(), slot.offset());
        let bit = 1u64 << (at / self.page_bytes);
        // Populating allocates a zeroed huge page (small pages if none is
        // free). A buffer whose page was not moved away still holds old data.
        if buf.populate_write(at, self.page_bytes).is_err() {
            return 0;
        }
        match src {
            Some(src) => buf.copy_in(at, src),
            None if self.thp_stale.load(Ordering::Relaxed) & bit != 0 => buf.fill(at, self.page_bytes, 0),
            None => {}
        }
        let mut done = 0;
        while done < self.page_bytes {
            match self.uffd.move_in(
                &self.reg,
                off + done,
                buf,
                at + done,
                self.page_bytes - done,
                false,
            ) {
                Ok(Resolved::Done) => done = self.page_bytes,
                Ok(Resolved::Partial { bytes }) => done += bytes,
                _ => break,
            }
        }
        if done == self.page_bytes {
            self.thp_stale.fetch_and(!bit, Ordering::Relaxed);
            self.stats.thp_moves.fetch_add(1, Ordering::Relaxed);
        } else {
            self.thp_stale.fetch_or(bit, Ordering::Relaxed);
        }
        done
    }

    /// Collapses the `n` freshly filled THP blocks from region offset `off`
    /// into huge pages. A block the kernel cannot collapse (no free huge
    /// page) keeps its small pages: correct, only slower to translate.
    fn collapse(&self, off: usize, n: usize) {
        for k in 0..n {
            let ok = self
                .mapping
                .advise(
                    off + k * self.page_bytes,
                    self.page_bytes,
                    tiermem_sys::mm::Advice::Collapse,
                )
                .is_ok();
            let counter = if ok {
                &self.stats.thp_collapses
            } else {
                &self.stats.thp_collapse_failures
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// UFFDIO_COPY of one page, retrying while the kernel says EAGAIN. A page
    /// that is somehow already mapped counts as installed.
    fn copy_in(
        &self,
        off: usize,
        src: tiermem_sys::mm::MemRange<'_>,
        wp: bool,
        dont_wake: bool,
    ) -> Result<(), UffdError> {
        let mode = CopyMode {
            write_protect: wp,
            dont_wake,
        };
        self.retry_again(|| self.uffd.copy(&self.reg, off, src, mode))
    }

    fn retry_again(&self, mut op: impl FnMut() -> Result<Resolved, UffdError>) -> Result<(), UffdError> {
        loop {
            match op()? {
                Resolved::Done | Resolved::AlreadyMapped => return Ok(()),
                Resolved::Partial { .. } => std::thread::yield_now(),
            }
        }
    }

    /// Marks page `i` (owned, was `w`) poisoned so that the access fails.
    fn poison(&self, i: usize, w: PageWord, server: Server) -> Outcome {
        self.stats.poisoned.fetch_add(1, Ordering::Relaxed);
        let off = i * self.page_bytes;
        if server == Server::HandlerThread {
            // The marker makes the sleeping thread's retry fail with SIGBUS
            // (EFAULT for a kernel-mode access). Wake it only once the state
            // says Poisoned, so that it never observes Busy afterwards.
            let _ = self.uffd.poison(&self.reg, off, self.page_bytes, true);
        }
        self.pages
            .unlock(i, PageWord::new(PageState::Poisoned, w.far_valid()));
        if server == Server::HandlerThread {
            let _ = self.uffd.wake(&self.reg, off, self.page_bytes);
        }
        Outcome::Poisoned
    }

    /// Takes one near slot, evicting a batch first if the budget is full.
    fn reserve_slot(&self, timer: &mut FaultTimer) -> Result<(), NoRoom> {
        let mut stuck_since: Option<Instant> = None;
        loop {
            let r = self.resident.load(Ordering::Relaxed);
            if r < self.budget_pages {
                // Relaxed: the counter is a budget, not a publication; page
                // data is ordered by the page-state word.
                if self
                    .resident
                    .compare_exchange_weak(r, r + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    if let Some(m) = &self.movers {
                        if self.budget_pages - r - 1 < m.low_free && !m.eviction_paused() {
                            m.wake();
                        }
                    }
                    return Ok(());
                }
                continue;
            }
            if let Some(m) = self.movers.as_ref().filter(|m| !m.eviction_paused()) {
                m.wake();
            }
            match self.evict_batch(self.config.evict_batch_pages, timer) {
                Ok(n) if n > 0 => {
                    stuck_since = None;
                    self.stats.inline_evictions.fetch_add(n as u64, Ordering::Relaxed);
                }
                Ok(_) => {
                    // Every resident page is being filled by another thread
                    // right now: let them finish.
                    let t0 = *stuck_since.get_or_insert_with(Instant::now);
                    if t0.elapsed() > STUCK_LIMIT {
                        return Err(NoRoom::Stuck);
                    }
                    std::thread::yield_now();
                }
                Err(e) => return Err(NoRoom::Store(e)),
            }
        }
    }

    /// Evicts up to `want` pages chosen by the policy. Returns how many left
    /// near memory; fails only when write-back failed for all of them.
    pub(crate) fn evict_batch(&self, want: usize, timer: &mut FaultTimer) -> Result<usize, StoreError> {
        self.evict_batch_by(want, timer, false).map(|e| e.pages)
    }

    /// `evict_batch`; a mover (`by_mover`) moves victims into the frame
    /// ring when the region has one.
    fn evict_batch_by(
        &self,
        want: usize,
        timer: &mut FaultTimer,
        by_mover: bool,
    ) -> Result<Evicted, StoreError> {
        let mut victims = [0usize; crate::config::MAX_EVICT_BATCH];
        let want = want.clamp(1, victims.len());
        let n = self.policy().select_victims(&mut victims[..want]);
        timer.lap(Cost::LockList);
        if n == 0 {
            return Ok(Evicted::default());
        }
        // Take every victim that is still resident.
        let mut owned = [(0usize, PageWord::new(PageState::Untouched, false)); MAX_RUN];
        let mut k = 0;
        for &v in &victims[..n] {
            if let Some(w) = self.take_resident(v) {
                owned[k] = (v, w);
                k += 1;
            }
        }
        owned[..k].sort_unstable_by_key(|e| e.0);
        // Fill small gaps between victims with the resident pages in between
        // when the policy lets them go: victims that are near each other in
        // fill order are near each other in memory, and one longer run costs
        // one unmap call (one TLB shootdown) instead of several. The pages in
        // the gaps are typically a stream's trigger page or pages a thread
        // faulted in itself a moment after the mover filled their
        // neighbours.
        let k = self.fill_gaps(&mut owned, k);
        timer.lap(Cost::LockList);
        let mut evicted = 0;
        let mut runs = 0;
        let mut first_error = None;
        let mut start = 0;
        while start < k {
            let mut end = start + 1;
            while end < k && owned[end].0 == owned[end - 1].0 + 1 {
                end += 1;
            }
            let ring = if by_mover { self.ring.as_ref() } else { None };
            let (done, err) = match ring {
                Some(ring) => self.evict_run_to_ring(ring, &owned[start..end], timer),
                None => self.evict_run(&owned[start..end], timer),
            };
            evicted += done;
            runs += 1;
            if first_error.is_none() {
                first_error = err;
            }
            start = end;
        }
        match first_error {
            Some(e) if evicted == 0 => Err(e),
            _ => Ok(Evicted { pages: evicted, runs }),
        }
    }

    /// Locks page `v` for eviction if it is resident, waiting out a brief
    /// transition. None if it is not resident.
    fn take_resident(&self, v: usize) -> Option<PageWord> {
        loop {
            let w = self.pages.load(v);
            match w.state() {
                PageState::Clean | PageState::Dirty => {
                    if self.pages.try_lock(v, w) {
                        return Some(w);
                    }
                }
                // A write-protect fault or a discard holds it briefly.
                PageState::Busy => {
                    self.pages.wait_not_busy(v);
                }
                _ => return None, // discarded meanwhile
            }
        }
    }

    /// Adds to the sorted victims `owned[..k]` the evictable resident pages
    /// of gaps of up to `GAP` pages between them. Returns the new count.
    fn fill_gaps(&self, owned: &mut [(usize, PageWord)], k: usize) -> usize {
        const GAP: usize = 32;
        if k < 2 {
            return k;
        }
        let cap = owned.len();
        let mut extra = [(0usize, PageWord::new(PageState::Untouched, false)); MAX_RUN];
        let mut e = 0;
        {
            let mut policy = self.policy();
            for j in 1..k {
                let (a, b) = (owned[j - 1].0, owned[j].0);
                if b - a <= 1 || b - a - 1 > GAP || k + e + (b - a - 1) > cap {
                    continue;
                }
                // Only whole gaps: a partial one would not join the runs.
                let start = e;
                let mut whole = true;
                for p in a + 1..b {
                    let w = self.pages.load(p);
                    if matches!(w.state(), PageState::Clean | PageState::Dirty)
                        && policy.evictable(p)
                        && self.pages.try_lock(p, w)
                    {
                        extra[e] = (p, w);
                        e += 1;
                    } else {
                        whole = false;
                        break;
                    }
                }
                if whole {
                    for &(p, _) in &extra[start..e] {
                        policy.on_remove(p, false);
                    }
                } else {
                    for &(p, w) in &extra[start..e] {
                        self.pages.unlock(p, w);
                    }
                    e = start;
                }
            }
        }
        owned[k..k + e].copy_from_slice(&extra[..e]);
        owned[..k + e].sort_unstable_by_key(|x| x.0);
        k + e
    }

    /// Evicts one run of contiguous owned pages (see the module docs).
    /// Returns the pages evicted and the first write-back error.
    fn evict_run(&self, run: &[(usize, PageWord)], timer: &mut FaultTimer) -> (usize, Option<StoreError>) {
        let n = run.len();
        let first = run[0].0;
        let off = first * self.page_bytes;
        let bytes = n * self.page_bytes;
        let mut dirty = [false; MAX_RUN];
        for (d, (_, w)) in dirty.iter_mut().zip(run) {
            *d = w.state() == PageState::Dirty;
        }
        let asynchronous = self.config.dirty_tracking == DirtyTracking::WpAsync;
        // Stop writers before anything is copied out: otherwise a write
        // landing between the copy and the unmap would be lost. If the
        // kernel refuses, give the run up (its pages stay resident as they
        // were) rather than evict unprotected pages.
        let stopped = if asynchronous {
            // Freeze: from here on writers take SIGSEGV and wait for the page
            // state, so the scan below cannot miss a write.
            let r = self
                .mapping
                .protect(off, bytes, Protection::Read)
                .map_err(|e| match e {
                    tiermem_sys::mm::MmError::Protect { errno, .. } => errno.raw(),
                    _ => 0,
                });
            timer.lap(Cost::Tlb);
            if r.is_ok() {
                self.scan_written(first, n, &mut dirty);
                timer.lap(Cost::LockList);
            }
            r
        } else if let (Some(a), Some(b)) = (
            dirty[..n].iter().position(|&d| d),
            dirty[..n].iter().rposition(|&d| d),
        ) {
            let r = self
                .uffd
                .writeprotect(
                    &self.reg,
                    (first + a) * self.page_bytes,
                    (b - a + 1) * self.page_bytes,
                    true,
                    false,
                )
                .map_err(|e| e.errno().map_or(0, |e| e.raw()));
            timer.lap(Cost::Tlb);
            r
        } else {
            Ok(())
        };
        if let Err(errno) = stopped {
            self.errors.record(off as u64, OP_EVICT, errno);
            if asynchronous {
                self.unfreeze(off, bytes);
            }
            let mut policy = self.policy();
            for &(p, w) in run {
                policy.on_remove(p, true);
                self.pages.unlock(p, w);
            }
            return (0, None);
        }
        // Writers are locked out now: pages marked VERIFY that still equal
        // their far copy need no write-back.
        for (k, &(p, w)) in run.iter().enumerate() {
            if dirty[k]
                && w.verify()
                && self.unchanged(p, w, self.mapping.range(p * self.page_bytes, self.page_bytes))
            {
                dirty[k] = false;
            }
        }
        // Write back dirty pages, contiguous ones with one call.
        let mut failed = [false; MAX_RUN];
        let mut first_error = None;
        let mut s = 0;
        while s < n {
            if !dirty[s] {
                s += 1;
                continue;
            }
            let mut e = s + 1;
            while e < n && dirty[e] {
                e += 1;
            }
            let src = self
                .mapping
                .range((first + s) * self.page_bytes, (e - s) * self.page_bytes);
            if let Err(err) = self.write_back(first + s, src) {
                failed[s..e].iter_mut().for_each(|f| *f = true);
                first_error.get_or_insert(err);
            }
            s = e;
        }
        timer.lap(Cost::Transfer);
        // Drop every page that is safely stored, one call per sub-run.
        let mut s = 0;
        let mut evicted = 0;
        while s < n {
            if failed[s] {
                s += 1;
                continue;
            }
            let mut e = s + 1;
            while e < n && !failed[e] {
                e += 1;
            }
            // A failing discard would leave stale data mapped: that is a
            // bug in our bookkeeping, not a recoverable condition.
            self.uffd
                .discard(
                    &self.reg,
                    &self.mapping,
                    (first + s) * self.page_bytes,
                    (e - s) * self.page_bytes,
                )
                .expect("MADV_DONTNEED on a tiered region");
            self.stats.evict_calls.fetch_add(1, Ordering::Relaxed);
            evicted += e - s;
            s = e;
        }
        if asynchronous {
            self.unfreeze(off, bytes);
        }
        timer.lap(Cost::Tlb);
        self.publish_eviction(run, &dirty[..n], &failed[..n]);
        timer.lap(Cost::LockList);
        (evicted, first_error)
    }

    /// Writes the pages from `first_page` on, whose data is `src`, to the
    /// far store, and accounts for it; a failure is counted and recorded.
    fn write_back(&self, first_page: usize, src: tiermem_sys::mm::MemRange<'_>) -> Result<(), StoreError> {
        let off = (first_page * self.page_bytes) as u64;
        let bytes = src.len() as u64;
        match self.store.store(off, src) {
            Ok(()) => {
                self.stats
                    .write_backs
                    .fetch_add(bytes / self.page_bytes as u64, Ordering::Relaxed);
                self.stats.bytes_out.fetch_add(bytes, Ordering::Relaxed);
                Ok(())
            }
            Err(err) => {
                self.store_failed(off, OP_WRITE, &err);
                Err(err)
            }
        }
    }

    /// Counts and records a far-store failure at region offset `off`.
    fn store_failed(&self, off: u64, op: u8, err: &StoreError) {
        self.stats.io_errors.fetch_add(1, Ordering::Relaxed);
        self.errors.record(off, op, err.errno().map_or(0, |e| e.raw()));
    }

    /// The end of an eviction run whose pages are unmapped except the
    /// `failed` ones: counts, and publishes each page's new state (a failed
    /// page stays resident and dirty; in wp-fault mode it is now
    /// write-protected, and its next write unprotects it again).
    fn publish_eviction(&self, run: &[(usize, PageWord)], dirty: &[bool], failed: &[bool]) {
        let evicted = failed.iter().filter(|&&f| !f).count();
        self.resident.fetch_sub(evicted, Ordering::Relaxed);
        self.stats.evictions.fetch_add(evicted as u64, Ordering::Relaxed);
        if let Some(pf) = &self.prefetcher {
            let wasted = run
                .iter()
                .zip(failed)
                .filter(|((_, w), &f)| !f && w.prefetched())
                .count();
            pf.wasted.fetch_add(wasted as u64, Ordering::Relaxed);
        }
        let mut policy = None;
        for (k, &(p, w)) in run.iter().enumerate() {
            let next = if failed[k] {
                policy.get_or_insert_with(|| self.policy()).on_remove(p, true);
                PageWord::new(PageState::Dirty, w.far_valid())
            } else if dirty[k] || w.far_valid() {
                PageWord::new(PageState::Far, true)
            } else {
                PageWord::new(PageState::Untouched, false)
            };
            self.pages.unlock(p, next);
        }
    }

    /// Evicts a run of contiguous owned pages by moving them into the frame
    /// ring (one UFFDIO_MOVE per contiguous piece: an atomic unmap, so dirty
    /// pages need no write protection first) and writing dirty ones back
    /// from there. Pages the kernel refuses to move (pinned) take the
    /// classic path. wp-fault only (see `FrameRing`).
    fn evict_run_to_ring(
        &self,
        ring: &FrameRing,
        run: &[(usize, PageWord)],
        timer: &mut FaultTimer,
    ) -> (usize, Option<StoreError>) {
        let ps = self.page_bytes;
        let n = run.len();
        let first = run[0].0;
        let mut st = ring.lock();
        // Make room: release frames at the head (back to the kernel) when
        // the ring has fewer holes than the run needs.
        while ring.cap - st.frames < n {
            let (pos, avail) = st.frames_run(ring.cap);
            let release = avail.min(n - (ring.cap - st.frames));
            if release == 0 {
                break;
            }
            if self
                .uffd
                .discard(&ring.reg, &ring.map, pos * ps, release * ps)
                .is_err()
            {
                break;
            }
            st.took(release, ring.cap);
        }
        // Move the run out, in at most two pieces (the ring wraps).
        let mut pos_of = [0usize; MAX_RUN];
        let mut moved = 0;
        while moved < n {
            let (pos, holes) = st.holes_run(ring.cap);
            let k = holes.min(n - moved);
            if k == 0 {
                break;
            }
            let mut done = 0;
            while done < k {
                let r = self.uffd.move_out(
                    &self.reg,
                    (first + moved + done) * ps,
                    &ring.reg,
                    (pos + done) * ps,
                    (k - done) * ps,
                );
                match r {
                    Ok(Resolved::Done) => done = k,
                    Ok(Resolved::Partial { bytes }) if bytes > 0 => done += bytes / ps,
                    _ => break,
                }
            }
            self.stats.evict_calls.fetch_add(1, Ordering::Relaxed);
            for j in 0..done {
                pos_of[moved + j] = pos + j;
            }
            st.filled(done, ring.cap);
            moved += done;
            if done < k {
                break;
            }
        }
        timer.lap(Cost::Tlb);
        // Which pages need writing back: the dirty ones, except those marked
        // VERIFY that turn out equal to their far copy (now unmapped, so the
        // comparison cannot race with a writer).
        let mut dirty = [false; MAX_RUN];
        for k in 0..moved {
            let w = run[k].1;
            dirty[k] = w.state() == PageState::Dirty
                && !(w.verify() && self.unchanged(first + k, w, ring.map.range(pos_of[k] * ps, ps)));
        }
        // Write back dirty pages from their frames, contiguous ones together.
        let mut failed = [false; MAX_RUN];
        let mut first_error = None;
        let mut s = 0;
        while s < moved {
            if !dirty[s] {
                s += 1;
                continue;
            }
            let mut e = s + 1;
            while e < moved && dirty[e] && pos_of[e] == pos_of[e - 1] + 1 {
                e += 1;
            }
            let src = ring.map.range(pos_of[s] * ps, (e - s) * ps);
            if let Err(err) = self.write_back(first + s, src) {
                // Put the data back in the region (a copy: the frames stay
                // in the ring): nothing is lost. A failing copy cannot
                // happen short of a kernel failure; the data still sits in
                // the frame, so keep trying rather than publish a loss.
                for k in s..e {
                    while self
                        .copy_run((first + k) * ps, ring.map.range(pos_of[k] * ps, ps), false)
                        .is_err()
                    {
                        std::thread::yield_now();
                    }
                    failed[k] = true;
                }
                first_error.get_or_insert(err);
            }
            s = e;
        }
        drop(st);
        timer.lap(Cost::Transfer);
        let evicted = failed[..moved].iter().filter(|&&f| !f).count();
        self.publish_eviction(&run[..moved], &dirty[..moved], &failed[..moved]);
        timer.lap(Cost::LockList);
        if moved < n {
            // The kernel would not move the rest (a pinned page): classic path.
            let (more, err) = self.evict_run(&run[moved..], timer);
            return (evicted + more, first_error.or(err));
        }
        (evicted, first_error)
    }

    /// Mover fill by frame recycling: copies the data of a run of owned
    /// pages into ring frames and moves them into place. Returns how many
    /// leading pages of `run` were installed (the rest, if any, are left
    /// for UFFDIO_COPY: the ring ran short or the store failed).
    fn install_by_move(&self, ring: &FrameRing, run: &[(usize, PageWord)], timer: &mut FaultTimer) -> usize {
        let ps = self.page_bytes;
        let mut st = ring.lock();
        let (pos, avail) = st.frames_run(ring.cap);
        let mut k = avail.min(run.len());
        // Bring the data into the frames.
        let mut s = 0;
        while s < k {
            let far = run[s].1.state() == PageState::Far;
            let mut e = s + 1;
            while e < k && (run[e].1.state() == PageState::Far) == far {
                e += 1;
            }
            if far {
                let off = (run[s].0 * ps) as u64;
                if let Err(err) = self.store.read_into(off, (e - s) * ps, &ring.map, (pos + s) * ps) {
                    self.store_failed(off, OP_READ, &err);
                    k = s;
                    break;
                }
                self.stats
                    .bytes_in
                    .fetch_add(((e - s) * ps) as u64, Ordering::Relaxed);
            } else {
                ring.map.fill((pos + s) * ps, (e - s) * ps, 0);
            }
            s = e;
        }
        timer.lap(Cost::Transfer);
        if k == 0 {
            return 0;
        }
        // Move the frames into the region.
        let dst = run[0].0 * ps;
        let mut done = 0;
        while done < k {
            match self.uffd.move_in(
                &self.reg,
                dst + done * ps,
                &ring.map,
                (pos + done) * ps,
                (k - done) * ps,
                false,
            ) {
                Ok(Resolved::Done) => done = k,
                Ok(Resolved::Partial { bytes }) if bytes > 0 => done += bytes / ps,
                _ => break,
            }
        }
        st.took(done, ring.cap);
        drop(st);
        // Moved pages are writable and cannot be installed write-protected;
        // protecting them afterwards would leave a window in which a write
        // goes unseen. The caller marks read-stream pages Dirty + VERIFY
        // instead: eviction compares them with their far copy.
        timer.lap(Cost::Pte);
        done
    }

    /// Whether a `Dirty` page marked VERIFY is still equal to its far copy
    /// (or to zeros if it was never stored). `data` is the page, read where
    /// no writer can change it (unmapped, or write-protected).
    fn unchanged(&self, page: usize, w: PageWord, data: tiermem_sys::mm::MemRange<'_>) -> bool {
        if w.far_valid() {
            self.store.same_as((page * self.page_bytes) as u64, data) == Some(true)
        } else {
            data.is_zero()
        }
    }

    /// wp-async: lifts the freeze of a run. A range left read-only would
    /// make its next writers spin on SIGSEGV, so insist, and record a
    /// failure (they then end with SIGSEGV rather than hang).
    fn unfreeze(&self, off: usize, bytes: usize) {
        for _ in 0..100 {
            match self.mapping.protect(off, bytes, Protection::ReadWrite) {
                Ok(()) => return,
                Err(_) => std::thread::yield_now(),
            }
        }
        self.errors.record(off as u64, OP_EVICT, libc::ENOMEM);
    }

    /// wp-async: marks pages of `[first, first+n)` that were written since
    /// they were installed (excluding zero-page mappings).
    fn scan_written(&self, first: usize, n: usize, dirty: &mut [bool]) {
        let scanner = self.scanner.as_ref().expect("wp-async has a pagemap scanner");
        let start = self.mapping.addr() + first * self.page_bytes;
        let end = start + n * self.page_bytes;
        let mut out = [PageRegion::default(); 64];
        let mut at = start;
        while at < end {
            let req = ScanRequest::new(at, end)
                .require(Categories::WRITTEN)
                .exclude(Categories::PFNZERO)
                .report(Categories::WRITTEN);
            match scanner.scan(&req, &mut out) {
                Ok(r) => {
                    for reg in &out[..r.regions] {
                        let a = (reg.start - start) / self.page_bytes;
                        let b = (reg.end - start).div_ceil(self.page_bytes);
                        dirty[a..b.min(n)].iter_mut().for_each(|d| *d = true);
                    }
                    if r.walk_end <= at {
                        break;
                    }
                    at = r.walk_end;
                }
                Err(_) => {
                    // Cannot tell: write everything back.
                    dirty[..n].iter_mut().for_each(|d| *d = true);
                    break;
                }
            }
        }
    }

    /// Evicts every resident page (writing back dirty ones).
    pub(crate) fn evict_all(&self) -> Result<usize, StoreError> {
        let mut total = 0;
        let mut timer = FaultTimer::start();
        let result = loop {
            match self.evict_batch(crate::config::MAX_EVICT_BATCH, &mut timer) {
                Ok(0) => {
                    if self.policy().tracked() == 0 {
                        break Ok(total);
                    }
                    std::thread::yield_now();
                }
                Ok(n) => total += n,
                Err(e) => break Err(e),
            }
        };
        self.stats.charge(timer);
        result
    }

    /// Returns the pages of `[offset, offset+len)` to the never-written state,
    /// freeing their near memory and far-store space.
    pub(crate) fn discard(&self, offset: usize, len: usize) {
        let first = offset >> self.page_shift;
        let last = (offset + len).div_ceil(self.page_bytes);
        for i in first..last.min(self.pages.len()) {
            loop {
                let w = self.pages.load(i);
                match w.state() {
                    PageState::Untouched => break,
                    PageState::Busy => {
                        self.pages.wait_not_busy(i);
                    }
                    _ => {
                        if !self.pages.try_lock(i, w) {
                            continue;
                        }
                        let off = i * self.page_bytes;
                        if matches!(w.state(), PageState::Clean | PageState::Dirty) {
                            self.policy().on_remove(i, false);
                            self.resident.fetch_sub(1, Ordering::Relaxed);
                        }
                        if w.state() != PageState::Far {
                            // Drops the page or the poison marker.
                            let _ = self.uffd.discard(&self.reg, &self.mapping, off, self.page_bytes);
                        }
                        if w.far_valid() {
                            self.store.forget(off as u64, self.page_bytes as u64);
                        }
                        self.pages.unlock(i, PageWord::new(PageState::Untouched, false));
                        break;
                    }
                }
            }
        }
    }

    /// Makes poisoned pages accessible again (their far copy, if any, is
    /// read on the next access). Returns how many were cleared.
    pub(crate) fn clear_poison(&self) -> usize {
        let mut n = 0;
        for i in 0..self.pages.len() {
            let w = self.pages.load(i);
            if w.state() == PageState::Poisoned && self.pages.try_lock(i, w) {
                let _ = self
                    .uffd
                    .discard(&self.reg, &self.mapping, i * self.page_bytes, self.page_bytes);
                let next = if w.far_valid() {
                    PageState::Far
                } else {
                    PageState::Untouched
                };
                self.pages.unlock(i, PageWord::new(next, w.far_valid()));
                n += 1;
            }
        }
        n
    }

    /// Feeds a demand fault to the prefetcher and queues what it asks for.
    fn after_demand_fault(&self, tid: u32, page: usize, write: bool) {
        let (Some(pf), Some(m)) = (&self.prefetcher, &self.movers) else {
            return;
        };
        let reqs = pf.on_fault(&self.pages, tid, page, write);
        for r in reqs.as_slice() {
            if !m.submit(*r) {
                pf.dropped.fetch_add(r.count as u64, Ordering::Relaxed);
            }
        }
        if !reqs.as_slice().is_empty() {
            m.wake();
        }
    }

    /// Near slots free now.
    pub(crate) fn free_slots(&self) -> usize {
        self.budget_pages
            .saturating_sub(self.resident.load(Ordering::Relaxed))
    }

    /// A mover's staging buffer for file-store runs.
    pub(crate) fn mover_staging(&self) -> Option<StagingSlot<'_>> {
        self.mover_pool.as_ref().map(StagingPool::claim)
    }

    /// A mover's eviction duty: one batch. A batch whose write-backs all
    /// failed counts as nothing evicted; the failures are already in the
    /// error log and the stats, and its pages stay resident.
    pub(crate) fn mover_evict(&self, batch: usize) -> Evicted {
        let mut timer = FaultTimer::start();
        let e = self.evict_batch_by(batch, &mut timer, true).unwrap_or_default();
        self.stats.charge_mover(timer);
        self.stats
            .mover_evictions
            .fetch_add(e.pages as u64, Ordering::Relaxed);
        e
    }

    /// Fills the pages of a request that are not resident yet (a mover's
    /// prefetch, or an explicit prefetch). Returns pages filled.
    pub(crate) fn mover_fill(&self, r: &Request, staging: Option<&StagingSlot<'_>>) -> usize {
        let mut timer = FaultTimer::start();
        let prefetch = self.prefetcher.is_some();
        let mut filled = 0;
        let mut owned =
            [(0usize, PageWord::new(PageState::Untouched, false)); crate::config::MAX_EVICT_BATCH];
        let limit = self.pages.len();
        let mut k = 0;
        while k < r.count {
            // Lock a run of consecutive pages that need filling.
            let mut n = 0;
            while k < r.count && n < self.max_run {
                let p = r.first as isize + k as isize * r.stride;
                if p < 0 || p as usize >= limit {
                    k = r.count;
                    break;
                }
                let p = p as usize;
                if n > 0 && p != owned[n - 1].0 + 1 {
                    break; // runs are contiguous in memory
                }
                let w = self.pages.load(p);
                if !matches!(w.state(), PageState::Untouched | PageState::Far) || !self.pages.try_lock(p, w) {
                    k += 1;
                    if n > 0 {
                        break;
                    }
                    continue;
                }
                owned[n] = (p, w);
                n += 1;
                k += 1;
            }
            if n > 0 {
                filled += self.install_run(&owned[..n], r.write, prefetch, staging, &mut timer);
            }
        }
        self.stats.charge_mover(timer);
        self.stats.mover_fills.fetch_add(filled as u64, Ordering::Relaxed);
        filled
    }

    /// Takes up to `want` near slots for a mover, evicting to make room.
    fn reserve_up_to(&self, want: usize, timer: &mut FaultTimer) -> usize {
        loop {
            let r = self.resident.load(Ordering::Relaxed);
            let free = self.budget_pages.saturating_sub(r);
            if free == 0 {
                // A whole batch amortizes the unmap calls of long victim
                // runs; while eviction is paused the victims are scattered
                // (one shootdown per page), so evict only what is needed.
                let batch = match &self.movers {
                    Some(m) if !m.eviction_paused() => m.batch.max(want),
                    _ => want,
                };
                match self.evict_batch_by(batch, timer, true).map(|e| e.pages) {
                    Ok(n) if n > 0 => {
                        self.stats.mover_evictions.fetch_add(n as u64, Ordering::Relaxed);
                        continue;
                    }
                    _ => return 0,
                }
            }
            let take = want.min(free);
            if self
                .resident
                .compare_exchange_weak(r, r + take, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return take;
            }
        }
    }

    /// Installs a run of owned, consecutive, non-resident pages with as few
    /// UFFDIO_COPY calls as possible. Pages it cannot fill are handed back
    /// unchanged. Returns pages installed.
    fn install_run(
        &self,
        run: &[(usize, PageWord)],
        write: bool,
        prefetch: bool,
        staging: Option<&StagingSlot<'_>>,
        timer: &mut FaultTimer,
    ) -> usize {
        let got = self.reserve_up_to(run.len(), timer);
        for &(p, w) in &run[got..] {
            self.pages.unlock(p, w);
        }
        let run = &run[..got];
        let mut ok = [false; crate::config::MAX_EVICT_BATCH];
        let by_move = match &self.ring {
            Some(ring) => self.install_by_move(ring, run, timer),
            None => 0,
        };
        ok[..by_move].iter_mut().for_each(|x| *x = true);
        let mut s = by_move;
        while s < run.len() {
            // A sub-run of pages of the same kind (all far, or all untouched).
            let far = run[s].1.state() == PageState::Far;
            let mut e = s + 1;
            while e < run.len() && (run[e].1.state() == PageState::Far) == far {
                e += 1;
            }
            let off = run[s].0 * self.page_bytes;
            let len = (e - s) * self.page_bytes;
            let installed = if far {
                let src = self.store.fetch(off as u64, len, staging);
                timer.lap(Cost::Transfer);
                match src {
                    Ok(src) => self.copy_run(off, src, !write && !self.thp()),
                    Err(err) => {
                        // A prefetch is a hint: leave the pages in the far
                        // store; a demand fault will try again and report.
                        self.store_failed(off as u64, OP_READ, &err);
                        Err(())
                    }
                }
            } else {
                self.copy_run(off, self.zeros.range(0, len), !write && !self.thp())
            };
            if installed.is_ok() && self.thp() {
                self.collapse(off, e - s);
            }
            timer.lap(Cost::Pte);
            if installed.is_ok() {
                ok[s..e].iter_mut().for_each(|x| *x = true);
                if far {
                    self.stats.bytes_in.fetch_add(len as u64, Ordering::Relaxed);
                }
            }
            s = e;
        }
        let mut installed = 0;
        {
            let mut policy = self.policy();
            for (k, &(p, _)) in run.iter().enumerate() {
                if ok[k] {
                    policy.on_fill(p);
                }
            }
        }
        for (k, &(p, w)) in run.iter().enumerate() {
            if ok[k] {
                let mut next = if !write && k < by_move {
                    // Moved in writable: dirty until proven otherwise.
                    PageWord::new(PageState::Dirty, w.far_valid()).with_verify()
                } else {
                    self.filled_state(write, w)
                };
                if prefetch {
                    next = next.with_prefetched();
                }
                self.pages.unlock(p, next);
                installed += 1;
            } else {
                self.resident.fetch_sub(1, Ordering::Relaxed);
                self.pages.unlock(p, w);
            }
        }
        timer.lap(Cost::LockList);
        installed
    }

    /// UFFDIO_COPY of a multi-page run, resuming after partial copies and
    /// skipping pages that turn out to be mapped already.
    fn copy_run(&self, off: usize, src: tiermem_sys::mm::MemRange<'_>, wp: bool) -> Result<(), ()> {
        let mode = CopyMode {
            write_protect: wp,
            dont_wake: false,
        };
        let mut done = 0;
        while done < src.len() {
            match self
                .uffd
                .copy(&self.reg, off + done, src.sub(done, src.len() - done), mode)
            {
                Ok(Resolved::Done) => return Ok(()),
                Ok(Resolved::Partial { bytes }) => done += bytes,
                Ok(Resolved::AlreadyMapped) => done += self.page_bytes,
                Err(e) => {
                    self.errors
                        .record((off + done) as u64, OP_INSTALL, e.errno().map_or(0, |e| e.raw()));
                    return Err(());
                }
            }
        }
        Ok(())
    }

    /// Explicit prefetch of `[first, first+count)`: queued to the movers, or
    /// done now by the caller when the region has none.
    pub(crate) fn prefetch_range(&self, first: usize, count: usize) {
        let mut k = 0;
        while k < count {
            let n = (count - k).min(self.max_run);
            let r = Request {
                first: first + k,
                count: n,
                stride: 1,
                write: false,
            };
            match &self.movers {
                Some(m) if m.submit(r) => {
                    if let Some(pf) = &self.prefetcher {
                        pf.issued.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
                _ => {
                    self.mover_fill(&r, None);
                }
            }
            k += n;
        }
        if let Some(m) = &self.movers {
            m.wake();
        }
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

    /// Evicts the resident pages of `[first, first+count)` (writing back
    /// dirty ones); their data stays available from the far store.
    pub(crate) fn evict_range(&self, first: usize, count: usize) -> Result<usize, StoreError> {
        let mut timer = FaultTimer::start();
        let mut evicted = 0;
        let mut owned =
            [(0usize, PageWord::new(PageState::Untouched, false)); crate::config::MAX_EVICT_BATCH];
        let end = (first + count).min(self.pages.len());
        let mut p = first;
        let mut first_error = None;
        while p < end {
            let mut n = 0;
            while p < end && n < owned.len() {
                let w = self.pages.load(p);
                match w.state() {
                    PageState::Clean | PageState::Dirty if self.pages.try_lock(p, w) => {
                        owned[n] = (p, w);
                        n += 1;
                        p += 1;
                    }
                    PageState::Busy => {
                        self.pages.wait_not_busy(p);
                    }
                    PageState::Clean | PageState::Dirty => {}
                    _ => {
                        p += 1;
                        if n > 0 {
                            break;
                        }
                    }
                }
            }
            if n == 0 {
                continue;
            }
            {
                let mut policy = self.policy();
                for &(q, _) in &owned[..n] {
                    policy.on_remove(q, false);
                }
            }
            let (done, err) = self.evict_run(&owned[..n], &mut timer);
            evicted += done;
            if first_error.is_none() {
                first_error = err;
            }
        }
        self.stats.charge(timer);
        match first_error {
            Some(e) => Err(e),
            None => Ok(evicted),
        }
    }

    pub(crate) fn fault_path(&self) -> FaultPath {
        self.config.fault_path
    }

    pub(crate) fn uffd(&self) -> &Uffd {
        &self.uffd
    }
}
