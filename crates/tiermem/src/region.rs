//! Tiered regions: the public handle.

use crate::config::{Config, DirtyTracking, FarStoreConfig, FaultPath, PageSize};
use crate::engine::handler_thread::HandlerThreads;
use crate::engine::mover::Movers;
pub use crate::engine::prefetch::Advice;
use crate::engine::{IoErrorRecord, Parts, RegionCore};
use crate::fault::RangeGuard;
use crate::page::PageState;
use crate::stats::RegionStats;
use crate::store::file::FileStore;
use crate::store::memory::MemoryStore;
use crate::store::FarStore;
use crate::Error;
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tiermem_sys::hugetlb::HugePageSize;
use tiermem_sys::mm::{MapOptions, Mapping, UserAccess};
use tiermem_sys::uffd::{Features, RegisterMode, Uffd, UffdOptions};

/// A virtual range larger than its near-memory budget. Pages move between
/// near memory and the far store on page faults, transparently to the code
/// that reads and writes the range.
///
/// ```no_run
/// use tiermem::{Config, Region};
/// let mut r = Region::new(Config::new(64 << 20, 16 << 20)).unwrap();
/// let data: &mut [u64] = r.as_mut_slice();
/// for (i, x) in data.iter_mut().enumerate() {
///     *x = i as u64; // 64 MiB written through a 16 MiB budget
/// }
/// assert_eq!(data[(8 << 20) / 8], 1 << 20);
/// println!("{} pages evicted", r.stats().evictions);
/// ```
///
/// Dropping the region unmaps it and frees its near memory and far store.
/// A `fork()`ed child does not inherit the range (it is `MADV_DONTFORK`):
/// touching it there raises SIGSEGV, and dropping the copied handle in the
/// child releases nothing of the parent's.
pub struct Region {
    core: Arc<RegionCore>,
    /// The range's registration with the fault router (dropped after the
    /// threads, before the core).
    routed: Option<RangeGuard>,
    user: UserAccess,
    handlers: Option<HandlerThreads>,
    movers: Option<Movers>,
    /// Fault injection into the far store (tests only).
    inject: Option<Arc<crate::store::inject::Injector>>,
}

/// Near memory shared by several regions: each region made with
/// [`Region::with_budget`] takes its slots from it, and evicts another
/// member's pages when it has none of its own to give.
#[derive(Clone)]
pub struct NearBudget(Arc<crate::engine::budget::Budget>);

impl NearBudget {
    /// A budget of `bytes` of near memory.
    pub fn new(bytes: u64) -> NearBudget {
        NearBudget(crate::engine::budget::Budget::new(bytes))
    }

    /// The budget in bytes.
    pub fn bytes(&self) -> u64 {
        self.0.limit_bytes()
    }
}

impl std::fmt::Debug for NearBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NearBudget")
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// How many pages are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PageCensus {
    /// Never written.
    pub untouched: usize,
    /// In the far store only.
    pub far: usize,
    /// Resident, unmodified.
    pub clean: usize,
    /// Resident, modified.
    pub dirty: usize,
    /// In transition.
    pub busy: usize,
    /// Unreadable (errors).
    pub poisoned: usize,
}

impl Region {
    /// Creates a region with the far store its configuration names.
    pub fn new(config: Config) -> Result<Region, Error> {
        Self::create(config, None, None)
    }

    /// Creates a region whose near memory comes from `budget`, shared with
    /// the other regions made with it (`config.near_bytes` is then only
    /// checked, not used): one budget for several ranges.
    ///
    /// ```no_run
    /// use tiermem::{region::NearBudget, Config, Region};
    /// let budget = NearBudget::new(256 << 20);
    /// let a = Region::with_budget(Config::new(1 << 30, 256 << 20), &budget)?;
    /// let b = Region::with_budget(Config::new(1 << 30, 256 << 20), &budget)?;
    /// // a and b together keep at most 256 MiB resident.
    /// # Ok::<(), tiermem::Error>(())
    /// ```
    pub fn with_budget(config: Config, budget: &NearBudget) -> Result<Region, Error> {
        Self::create(config, None, Some(budget))
    }

    /// Makes a region of an existing private anonymous mapping (a range
    /// taken over in place, such as a program's static arrays), with its
    /// near memory from `budget` if given. The mapping must be as long as
    /// `config.virt_bytes` says; its contents are dropped (the caller saves
    /// and restores what it needs). Kernel accesses to it are served only
    /// if the caller traps them too (the range is not in the kernel-access
    /// window).
    pub fn adopt(
        config: Config,
        mapping: Mapping,
        user: UserAccess,
        budget: Option<&NearBudget>,
    ) -> Result<Region, Error> {
        if mapping.len() as u64 != config.virt_bytes {
            return Err(Error::Usage(format!(
                "adopting a mapping of {} bytes for a region of {}",
                mapping.len(),
                config.virt_bytes
            )));
        }
        Self::build(config, None, budget, Some((mapping, user)))
    }

    /// Creates a region over a far store built by the caller (a custom or
    /// fault-injecting store); `config.far` is ignored.
    pub fn with_store(config: Config, store: Box<dyn FarStore>) -> Result<Region, Error> {
        Self::create(config, Some(store), None)
    }

    fn create(
        config: Config,
        store: Option<Box<dyn FarStore>>,
        shared: Option<&NearBudget>,
    ) -> Result<Region, Error> {
        Self::build(config, store, shared, None)
    }

    fn build(
        config: Config,
        store: Option<Box<dyn FarStore>>,
        shared: Option<&NearBudget>,
        adopted: Option<(Mapping, UserAccess)>,
    ) -> Result<Region, Error> {
        config.validate()?;
        let mut config = config;
        // `movers = auto`: one mover, and only with a CPU the application
        // may leave free.
        if config.movers_auto {
            config.movers = usize::from(auto_mover_fits());
        }
        // Which process makes descriptors for the engine's shared state
        // (a `vfork` child faulting on it must not).
        tiermem_sys::thread::claim_memory();
        crate::fault::vfork::register();
        if let Err(e) = crate::hugepages::reserve_static(&config.reserve_huge_pages) {
            eprintln!("tiermem: warning: {e}");
        }
        let huge = config.page_size == PageSize::Huge2M;
        let thp = config.page_size == PageSize::Thp2M;
        if huge {
            check_pool(&config)?;
        }
        if thp && !crate::hugepages::thp_enabled() {
            return Err(Error::Usage(
                "page size THP: transparent huge pages are disabled on this machine \
                 (/sys/kernel/mm/transparent_hugepage/enabled is [never]); use 4K or 2M pages, \
                 or `echo madvise > /sys/kernel/mm/transparent_hugepage/enabled` as root"
                    .into(),
            ));
        }
        let mut required = Features::PAGEFAULT_FLAG_WP;
        match config.fault_path {
            FaultPath::InContext => required |= Features::SIGBUS,
            FaultPath::HandlerThread => required |= Features::THREAD_ID | Features::POISON,
        }
        if config.dirty_tracking == DirtyTracking::WpAsync {
            required |= Features::WP_ASYNC;
        }
        if huge {
            required |= Features::MISSING_HUGETLBFS | Features::WP_HUGETLBFS_SHMEM;
        }
        let uffd = Uffd::open(&UffdOptions {
            required,
            optional: Features::POISON | Features::MOVE,
            nonblocking: config.fault_path == FaultPath::HandlerThread,
        })?;
        let opts = MapOptions {
            huge: huge.then_some(HugePageSize::Size2M),
            noreserve: true,
            // A child copies an OnFork::Copy region (see crate::fork).
            dontfork: config.on_fork == crate::config::OnFork::Absent,
            // THP blocks must be aligned to collapse.
            align: if thp { 2 << 20 } else { 0 },
            ..Default::default()
        };
        let (mapping, user, placement) = match adopted {
            Some((m, u)) => (m, u, None),
            None => map_region(&config, &opts)?,
        };
        if thp {
            mapping.advise(0, mapping.len(), tiermem_sys::mm::Advice::HugePage)?;
        } else if !huge {
            // Tiering works on 4 KiB ptes; keep THP out of the range.
            mapping.advise(0, mapping.len(), tiermem_sys::mm::Advice::NoHugePage)?;
        }
        let reg = uffd.register(&mapping, RegisterMode::MISSING | RegisterMode::WP)?;
        // Fault injection (tests only): the config's, else the environment's.
        let inject = match config
            .fault_inject
            .clone()
            .or_else(|| crate::config::options::FAULT_INJECT.value())
        {
            Some(spec) => Some(Arc::new(crate::store::inject::Injector::new(
                crate::store::inject::FaultInjectSpec::parse(&spec)
                    .map_err(|e| Error::Usage(format!("fault injection {spec:?}: {e}")))?,
            ))),
            None => None,
        };
        let store: Box<dyn FarStore> = match store {
            Some(s) => s,
            None => match &config.far {
                FarStoreConfig::Memory => Box::new(MemoryStore::new(config.virt_bytes)?),
                FarStoreConfig::File { path, direct } => {
                    let mut f = FileStore::create(path, *direct, config.virt_bytes)?;
                    refuse_a_full_store(&f, &config, shared.is_some())?;
                    if let Some(i) = &inject {
                        f.set_injector(i.clone());
                    }
                    Box::new(f)
                }
            },
        };
        let store: Box<dyn FarStore> = match &inject {
            Some(i) => Box::new(crate::store::inject::InjectingStore::new(store, i.clone())),
            None => store,
        };
        let policy = config.policy.build(
            config.virt_pages(),
            config.near_pages(),
            config.protected_window_pages(),
        );
        let core = Arc::new(RegionCore::new(
            config.clone(),
            Parts {
                mapping,
                reg,
                uffd,
                store,
                policy,
                placement,
                shared_budget: shared.map(|b| b.0.clone()),
            },
        )?);
        if let Some(b) = shared {
            b.0.join(&core);
        }
        if config.on_fork == crate::config::OnFork::Copy {
            crate::fork::register(&core);
        }
        let routed = crate::fault::register(core.mapping.addr(), core.mapping.len(), core.clone())?;
        let handlers = if config.fault_path == FaultPath::HandlerThread {
            Some(HandlerThreads::start(
                &core,
                config.handler_threads,
                &config.handler_cpus,
            )?)
        } else {
            None
        };
        let movers = if config.movers > 0 {
            match Movers::start(&core, config.movers, &config.mover_cpus) {
                Ok(m) => Some(m),
                Err(e) => {
                    if let Some(h) = handlers {
                        h.stop();
                    }
                    return Err(e);
                }
            }
        } else {
            None
        };
        let region = Region {
            core,
            routed: Some(routed),
            user,
            handlers,
            movers,
            inject,
        };
        // For `tiermem top` (crate::live): no cost on the fault path.
        crate::live::register(&region.core);
        if crate::config::verbose_from_env() {
            eprintln!("tiermem: region at {:#x}: {}", region.base(), region.describe());
        }
        Ok(region)
    }

    /// Serves kernel-mode accesses to this region's range (`read(2)` into
    /// it, ...) although it lies outside the kernel-access window (an
    /// adopted range): one more seccomp filter, trapping calls whose buffer
    /// starts in `[from, self.base() + self.len())`. `from` may lie below
    /// the base, so that a buffer starting before the region (in the same
    /// data section) and running into it is trapped too. In-context
    /// regions only; a no-op when `kernel_access` is off.
    pub fn trap_kernel_access(&self, from: usize) -> Result<(), Error> {
        let c = &self.core.config;
        if !kernel_calls_trapped(c) {
            return Ok(());
        }
        crate::kernel_access::add_range(from.min(self.base()), self.base() + self.len())
    }

    /// Makes the whole range inaccessible (`PROT_NONE`) until parts of it
    /// are opened with [`Region::open`]: for a range handed out piece by
    /// piece (the transparent heap). A raw `mlockall` system call, which no
    /// interposer sees, populates every accessible mapping; through the
    /// fault handler, the whole reserved range (see `tiermem_sys::locks`).
    pub(crate) fn close(&self) -> Result<(), Error> {
        let m = &self.core.mapping;
        // The engine first: from now on it fills opened parts only.
        self.core.access.close_all();
        m.protect(0, m.len(), tiermem_sys::mm::Protection::None)?;
        Ok(())
    }

    /// Makes `[offset, offset + len)` readable and writable again (see
    /// [`Region::close`]); page aligned.
    pub(crate) fn open(&self, offset: usize, len: usize) -> Result<(), Error> {
        self.core.mapping.open(offset, len)?;
        // The engine last: a page it may fill is reachable.
        let pb = self.page_bytes();
        self.core.access.open(offset / pb, len.div_ceil(pb));
        Ok(())
    }

    /// Whether this handle was inherited by a `fork()`ed child.
    pub fn is_forked_copy(&self) -> bool {
        self.core.generation != crate::fault::fork_generation()
    }

    /// Refuses `what` on a handle inherited across `fork()` (docs/fork.md).
    fn here(&self, what: &str) -> Result<(), Error> {
        if self.is_forked_copy() {
            return Err(crate::fork::inherited(what, "region"));
        }
        Ok(())
    }

    /// In a forked child of an `OnFork::Copy` region (plain memory there):
    /// makes `[offset, offset + len)` read as zeros, touching nothing of
    /// the parent's (its far store is shared).
    pub(crate) fn zero_in_child(&self, offset: usize, len: usize) {
        if self.core.config.on_fork == crate::config::OnFork::Copy {
            self.core.mapping.zero(offset, len, self.page_bytes());
        }
    }

    /// Start address.
    pub fn base(&self) -> usize {
        self.core.mapping.addr()
    }

    /// Start as a pointer (for C code or raw access).
    pub fn as_ptr(&self) -> *mut u8 {
        self.core.mapping.as_ptr()
    }

    /// Size of the virtual range in bytes.
    pub fn len(&self) -> usize {
        self.core.mapping.len()
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Page size in bytes.
    pub fn page_bytes(&self) -> usize {
        self.core.page_bytes()
    }

    /// The configuration the region was made with.
    pub fn config(&self) -> &Config {
        &self.core.config
    }

    /// The range as a mutable slice of plain-old-data values.
    pub fn as_mut_slice<T: bytemuck::Pod>(&mut self) -> &mut [T] {
        self.core.mapping.user_slice_mut(&mut self.user)
    }

    /// The range as 64-bit atomics, for sharing among threads.
    pub fn as_atomic_u64(&self) -> &[AtomicU64] {
        self.core.mapping.user_atomics(&self.user)
    }

    /// A snapshot of the statistics. With the handler-thread design a
    /// fault is recorded just after the faulting thread may have resumed,
    /// so a snapshot taken right after an access can lag it by one fault
    /// for a few microseconds (see [`Region::settle`]).
    pub fn stats(&self) -> RegionStats {
        let mut s = self
            .core
            .stats
            .snapshot(self.core.resident_pages(), self.core.page_bytes());
        s.held_peak_bytes = (self.core.held_peak_pages() * self.core.page_bytes()) as u64;
        s.pinned_refusals = self.core.pinned_refusals();
        if let Some(pf) = &self.core.prefetcher {
            use std::sync::atomic::Ordering::Relaxed;
            s.prefetch = crate::stats::PrefetchStats {
                issued: pf.issued.load(Relaxed),
                used: pf.used.load(Relaxed),
                wasted: pf.wasted.load(Relaxed),
                dropped: pf.dropped.load(Relaxed),
                triggers: pf.triggers.load(Relaxed),
                late: pf.late.load(Relaxed),
                shrinks: pf.shrinks.load(Relaxed),
                inline: pf.inline.load(Relaxed),
                spared: pf.spared.load(Relaxed),
                stale: pf.stale.load(Relaxed),
                window_cap: pf.cap() as u64,
            };
        }
        if let Some(fa) = &self.core.around {
            s.fault_around = fa.stats(|p| crate::engine::out_of_near(&self.core.pages, p));
            s.stride = fa.stride_stats(&self.core.pages);
        }
        s.policy_auto = self.core.auto_policy_stats();
        s
    }

    /// Waits (up to 100 ms) until no page is in transition, so that page
    /// states and statistics include every fault served so far. Useful
    /// with handler threads, whose bookkeeping can trail the application.
    pub fn settle(&self) {
        let t = std::time::Instant::now();
        while self.core.pages.any_busy() && t.elapsed().as_millis() < 100 {
            std::thread::yield_now();
        }
    }

    /// Zeroes the statistics (counts, costs, histogram, per-thread faults),
    /// after letting faults in flight finish ([`Region::settle`]) so that
    /// none of them lands in the fresh counts.
    pub fn reset_stats(&self) {
        self.settle();
        self.core.stats.reset();
        if let Some(pf) = &self.core.prefetcher {
            pf.reset_counters();
        }
        if let Some(fa) = &self.core.around {
            fa.reset_counters();
        }
    }

    /// The latest far-store and eviction errors (up to 32).
    pub fn errors(&self) -> Vec<IoErrorRecord> {
        self.core.errors()
    }

    /// Writes back and drops every resident page. Fails if a write-back
    /// fails; the pages concerned stay resident. Pages pinned by a system
    /// call in progress (a `recv` into the region, blocked) are waited for
    /// up to a second, then left resident.
    pub fn evict_all(&self) -> Result<usize, Error> {
        self.here("evict_all")?;
        // Fills in flight (handler threads may trail the application) are
        // not on the replacement list yet: let them land first.
        self.settle();
        // Blocks asynchronous signals batch by batch.
        self.core.evict_all().map_err(|e| self.core.store_error(e))
    }

    /// Forgets `[offset, offset+len)`: the pages read as zeros again and
    /// give back their near memory and far-store space. Both must be
    /// page aligned.
    pub fn discard(&self, offset: usize, len: usize) -> Result<(), Error> {
        self.here("discard")?;
        let ps = self.page_bytes();
        if !offset.is_multiple_of(ps)
            || !len.is_multiple_of(ps)
            || offset.checked_add(len).is_none_or(|e| e > self.len())
        {
            return Err(Error::Usage(format!(
                "discard({offset}, {len}): range must be page aligned ({ps} bytes) and inside the region of {} bytes",
                self.len()
            )));
        }
        let _blocked = owning_pages();
        crate::kernel_access::discarding_io_buffers(self.core.mapping.addr() + offset, len);
        self.core.discard(offset, len);
        Ok(())
    }

    /// Asks for `[offset, offset+len)` to be brought into near memory
    /// (`tm_prefetch`): queued to the mover threads, or done now by the
    /// caller when the region has none. Pages already resident are skipped.
    pub fn prefetch(&self, offset: usize, len: usize) -> Result<(), Error> {
        self.here("prefetch")?;
        let (first, count) = self.pages_of(offset, len, "prefetch")?;
        let _blocked = owning_pages();
        self.core.prefetch_range(first, count);
        Ok(())
    }

    /// Access advice for `[offset, offset+len)` (`tm_advise`): `Sequential`
    /// prefetches aggressively from the first fault, `Random` turns
    /// prefetch off there, `WillNeed` prefetches now, `DontNeed` evicts now
    /// (the data stays in the far store; unlike `madvise(MADV_DONTNEED)`,
    /// nothing is lost), `Normal` clears earlier advice.
    pub fn advise(&self, offset: usize, len: usize, advice: Advice) -> Result<(), Error> {
        self.here("advise")?;
        let (first, count) = self.pages_of(offset, len, "advise")?;
        let _blocked = owning_pages();
        self.core
            .advise(first, count, advice)
            .map_err(|e| self.core.store_error(e))?;
        Ok(())
    }

    fn pages_of(&self, offset: usize, len: usize, what: &str) -> Result<(usize, usize), Error> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.len())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "{what}({offset}, {len}): range outside the region of {} bytes",
                    self.len()
                ))
            })?;
        let ps = self.page_bytes();
        Ok((offset / ps, end.div_ceil(ps) - offset / ps))
    }

    /// The far-store failures injected so far, when fault injection is on
    /// (`Config::fault_inject`, `TIERMEM_FAULT_INJECT`; tests only): each
    /// read, write and full-store failure must also be in
    /// `stats().io_errors`.
    pub fn injected(&self) -> Option<crate::store::inject::InjectTotals> {
        self.inject.as_ref().map(|i| i.injected())
    }

    /// Makes pages poisoned by errors accessible again (they are re-read
    /// from the far store on the next access). Returns how many.
    pub fn clear_poison(&self) -> usize {
        let _blocked = owning_pages();
        self.core.clear_poison()
    }

    /// Pages per state.
    pub fn page_census(&self) -> PageCensus {
        let c = self.core.pages.census();
        PageCensus {
            untouched: c[PageState::Untouched as usize],
            far: c[PageState::Far as usize],
            clean: c[PageState::Clean as usize],
            dirty: c[PageState::Dirty as usize],
            busy: c[PageState::Busy as usize],
            poisoned: c[PageState::Poisoned as usize],
        }
    }

    /// Resident pages in `[offset, offset + len)` (for tests).
    #[cfg(test)]
    pub(crate) fn resident_in(&self, offset: usize, len: usize) -> usize {
        let pb = self.page_bytes();
        (offset / pb..(offset + len).div_ceil(pb))
            .filter(|&p| {
                matches!(
                    self.core.pages.load(p).state(),
                    PageState::Clean | PageState::Dirty
                )
            })
            .count()
    }

    /// A one-line description: configuration and far store.
    pub fn describe(&self) -> String {
        format!(
            "{} store=[{}]",
            self.core.config.describe(),
            self.core.store_description()
        )
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.core.generation != crate::fault::fork_generation() {
            // A fork()ed child: the threads, the range and the files belong
            // to the parent. Closing our copies of descriptors is all we do.
            std::mem::forget(self.handlers.take());
            if let Some(m) = self.movers.take() {
                m.abandon();
            }
            return;
        }
        // Movers first: they may fill pages, which handler threads could be
        // waiting for.
        if let Some(m) = self.movers.take() {
            m.stop();
        }
        if let Some(h) = self.handlers.take() {
            h.stop();
        }
        drop(self.routed.take());
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("base", &format_args!("{:#x}", self.base()))
            .field("len", &self.len())
            .field("config", &self.core.config)
            .finish()
    }
}

/// Whether system calls on the region's memory are trapped and run with
/// its pages pinned:
/// - on the in-context path: the kernel cannot take a fault for it;
/// - with wp-async dirty tracking on the handler-thread path: eviction
///   freezes a victim run read-only with `mprotect`, and a kernel write
///   into a frozen page fails with EFAULT instead of taking a fault the
///   handler could serve; a pinned page is never frozen;
/// - on the handler-thread path wherever the signal guard is loaded: the
///   kernel takes a direct read's (`O_DIRECT`) faults one page at a time
///   and pins each for the device, and the fills of the later pages could
///   evict the earlier ones, pinned but unmapped, so that the data landed
///   in frames the region no longer has (silently stale pages). Without the
///   guard (a program that had started threads before its first region) a
///   thread of the C library's that blocks every signal (POSIX aio's) would
///   be killed by its first trapped call, so such a process is left as it
///   was: docs/design.md, "Kernel accesses".
fn kernel_calls_trapped(config: &Config) -> bool {
    let wanted = match config.fault_path {
        FaultPath::InContext => true,
        FaultPath::HandlerThread => {
            config.dirty_tracking == crate::config::DirtyTracking::WpAsync
                || crate::kernel_access::guard(config.kernel_access)
        }
    };
    wanted && crate::kernel_access::active(config.kernel_access)
}

/// Maps the region's range: in the kernel-access window when system calls
/// on it are trapped, anywhere otherwise.
fn map_region(
    config: &Config,
    opts: &MapOptions,
) -> Result<(Mapping, UserAccess, Option<crate::kernel_access::Placement>), Error> {
    let len = config.virt_bytes as usize;
    if kernel_calls_trapped(config) {
        // Another mapping may sit in the window (the window is not
        // reserved): step over it a few times, then map anywhere.
        for _ in 0..8 {
            let Some(p) = crate::kernel_access::Placement::reserve(len, opts.align.max(2 << 20)) else {
                break;
            };
            let at = MapOptions {
                at: p.addr(),
                ..opts.clone()
            };
            match Mapping::anonymous(len, &at) {
                Ok((m, u)) => return Ok((m, u, Some(p))),
                Err(tiermem_sys::mm::MmError::Map { errno, .. }) if errno.raw() == libc::EEXIST => p.leak(),
                Err(e) => return Err(e.into()),
            }
        }
        eprintln!(
            "tiermem: warning: no room for {len} bytes in the kernel-access window; \
             read(2) into pages of this region that are not resident fails with EFAULT"
        );
    }
    let (m, u) = Mapping::anonymous(len, opts)?;
    Ok((m, u, None))
}

fn check_pool(config: &Config) -> Result<(), Error> {
    crate::hugepages::check_available(HugePageSize::Size2M, config.near_pages() as u64, "a near budget")
}

/// Whether this process has CPU time enough for a `movers = auto` mover
/// (`tiermem_sys::thread::usable_cpus`): without, such a region has none.
pub fn auto_mover_fits() -> bool {
    tiermem_sys::thread::usable_cpus() >= crate::engine::cpu_gate::MIN_CPUS
}

/// Tests only: whether `movers = auto` gates made from now on run their
/// trials (on by default; docs/movers.md), so that a test of the rule for
/// busy CPUs is not also a test of the trials.
#[doc(hidden)]
pub fn set_mover_trials(on: bool) {
    crate::engine::cpu_gate::TRIALS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Prefetches `[addr, addr+len)`, which must lie in one region of this
/// process (`tm_prefetch`): the address-based form of [`Region::prefetch`].
pub fn prefetch(addr: usize, len: usize) -> Result<(), Error> {
    // Before the lookup too: it is a read-side section of the range table,
    // which a region's unregistration waits for.
    let _blocked = owning_pages();
    let (core, first, count) = locate(addr, len, "prefetch")?;
    core.prefetch_range(first, count);
    Ok(())
}

/// Makes `[addr, addr+len)`, which must lie in one region of this process,
/// resident now, on the calling thread and without a fault (`tm_touch`).
/// For debuggers: `/proc/<pid>/mem` and `ptrace(PEEKDATA)` cannot have a
/// page brought in (docs/design.md "Kernel accesses"); after this call
/// they read it (until it is evicted again). Returns the pages of the
/// range that are resident afterwards.
pub fn touch(addr: usize, len: usize) -> Result<usize, Error> {
    // Before the lookup too: it is a read-side section of the range table,
    // which a region's unregistration waits for.
    let _blocked = owning_pages();
    let (core, first, count) = locate(addr, len, "touch")?;
    core.fill_range_now(first, count);
    // A page another thread has in transition (a fill it is publishing, an
    // eviction) was passed over: wait for it, then fill what that left out.
    let busy = |p: &usize| core.pages.load(*p).state() == PageState::Busy;
    if (first..first + count).any(|p| busy(&p)) {
        (first..first + count)
            .filter(busy)
            .for_each(|p| core.wait_page(p));
        core.fill_range_now(first, count);
    }
    Ok((first..first + count)
        .filter(|&p| matches!(core.pages.load(p).state(), PageState::Clean | PageState::Dirty))
        .count())
}

/// What [`hold_resident`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Bytes held now that were not held before.
    pub new_bytes: usize,
    /// Whether every page of the range (within the region) is held.
    pub complete: bool,
}

/// Keeps the pages of `[addr, addr+len)` (within the region holding `addr`,
/// or else its last byte)
/// resident, writable and never evicted until they are discarded (freed,
/// unmapped): for memory the kernel writes on its own, where no fault can
/// be served, such as a signal stack or a stack the program made for a
/// thread or a coroutine (engine `hold`). The near budget grows by what is
/// held. `None` when `addr` is not in a tiermem region of this process (in
/// a forked child the memory is plain already).
///
/// ```no_run
/// # let stack_addr = 0usize;
/// // A 1 MiB alternate signal stack allocated in tiered memory:
/// if let Some(h) = tiermem::hold_resident(stack_addr, 1 << 20) {
///     assert!(h.complete);
/// }
/// ```
pub fn hold_resident(addr: usize, len: usize) -> Option<Held> {
    let _blocked = owning_pages();
    let end = addr.saturating_add(len);
    // The range may start below the region (a stack known by its top).
    let core = crate::fault::lookup::<RegionCore>(addr)
        .or_else(|| crate::fault::lookup::<RegionCore>(end.checked_sub(1)?))?;
    let base = core.mapping.addr();
    let end = end.min(base + core.mapping.len());
    let ps = core.page_bytes();
    let first = (addr.max(base) - base) / ps;
    let count = (end - base).div_ceil(ps).saturating_sub(first);
    let (new, complete) = core.hold(first, count, tiermem_sys::thread::gettid());
    Some(Held {
        new_bytes: new * ps,
        complete,
    })
}

impl Region {
    /// The held parts of `[offset, offset+len)`, as byte ranges.
    pub(crate) fn held_in(&self, offset: usize, len: usize) -> Vec<(usize, usize)> {
        let ps = self.page_bytes();
        self.core
            .held_in(offset / ps, (offset + len).div_ceil(ps))
            .into_iter()
            .map(|(a, b)| (a * ps, (b - a) * ps))
            .collect()
    }

    /// Holds `[offset, offset+len)` (see [`hold_resident`]).
    pub(crate) fn hold(&self, offset: usize, len: usize) {
        let ps = self.page_bytes();
        let first = offset / ps;
        let count = (offset + len).div_ceil(ps) - first;
        let _blocked = owning_pages();
        self.core.hold(first, count, tiermem_sys::thread::gettid());
    }
}

/// Refuses a file far store whose file system has no room for one
/// eviction batch, when the region will evict: every fault past the budget
/// would fail (SIGBUS). A clear error now instead, naming the store.
fn refuse_a_full_store(store: &FileStore, config: &Config, shared_budget: bool) -> Result<(), Error> {
    let evicts = shared_budget || config.near_bytes < config.virt_bytes;
    let Some(space) = store.space().filter(|_| evicts) else {
        return Ok(());
    };
    let batch = (config.evict_batch_pages * config.page_size.bytes()) as u64;
    if space.free >= batch.min(config.virt_bytes) {
        return Ok(());
    }
    Err(Error::FarStoreFull(format!(
        "the far store is full already: {} is on a file system of {} with {} free, less than one \
         eviction batch ({}). Give the far store a directory with room, or the region a near \
         budget as large as it",
        store.describe(),
        crate::stats::Bytes(space.total),
        crate::stats::Bytes(space.free),
        crate::stats::Bytes(batch)
    )))
}

/// Access advice for `[addr, addr+len)`, which must lie in one region of
/// this process (`tm_advise`): the address-based form of [`Region::advise`].
pub fn advise(addr: usize, len: usize, advice: Advice) -> Result<(), Error> {
    // Before the lookup too: it is a read-side section of the range table,
    // which a region's unregistration waits for.
    let _blocked = owning_pages();
    let (core, first, count) = locate(addr, len, "advise")?;
    core.advise(first, count, advice)
        .map_err(|e| core.store_error(e))?;
    Ok(())
}

/// Makes the poisoned pages of `[addr, addr+len)` accessible again (they
/// are re-read from the far store on the next access): the address-based
/// form of [`Region::clear_poison`], for an application's SIGBUS handler
/// that repairs and retries. Returns how many pages it cleared; `None` if
/// the range is not in a region of this process (no allocation then).
pub fn clear_poison_at(addr: usize, len: usize) -> Option<usize> {
    let _blocked = owning_pages();
    let core = crate::fault::lookup::<RegionCore>(addr)?;
    let base = core.mapping.addr();
    let end = addr
        .checked_add(len)
        .filter(|&e| e <= base + core.mapping.len())?;
    let ps = core.page_bytes();
    let first = (addr - base) / ps;
    Some(core.clear_poison_range(first, (end - base).div_ceil(ps) - first))
}

/// Blocks the application's asynchronous signals while an API call owns
/// pages (Busy), near slots, scratch sets or the policy lock, as a fault
/// service does: a timer handler that `siglongjmp`s out of the call, or an
/// asynchronous `pthread_cancel`, would abandon them (pages busy forever:
/// the next access hangs, or dies of SIGBUS once no page can be evicted).
/// The same holds for a read-side section of the range table (an address
/// lookup), which a region's unregistration waits for. Signals that arrive
/// meanwhile are delivered when the call returns.
fn owning_pages() -> tiermem_sys::signal::AsyncSignalsBlocked {
    tiermem_sys::signal::AsyncSignalsBlocked::new()
}

fn locate(addr: usize, len: usize, what: &str) -> Result<(Arc<RegionCore>, usize, usize), Error> {
    let core = crate::fault::lookup::<RegionCore>(addr).ok_or_else(|| {
        if crate::fault::registered_by_parent(addr) {
            crate::fork::inherited(what, "region")
        } else {
            Error::Usage(format!(
                "{what}: {addr:#x} is not in a tiermem region of this process"
            ))
        }
    })?;
    let base = core.mapping.addr();
    let end = addr
        .checked_add(len)
        .filter(|&e| e <= base + core.mapping.len())
        .ok_or_else(|| Error::Usage(format!("{what}: {addr:#x}+{len} leaves the region")))?;
    let ps = core.page_bytes();
    let first = (addr - base) / ps;
    let count = (end - base).div_ceil(ps) - first;
    Ok((core, first, count))
}
