//! Shared virtual memory across processes: paper 5's Rhymes (Lam et al.),
//! a page-based SVM with two page modes that run in harmony:
//!
//! - **SPM** (shared physical memory): the process maps the home copy
//!   directly; release consistency. Flavour `coherent` is a plain shared
//!   mapping; flavour `noncoherent` adds what non-coherent shared memory
//!   needs (written lines flushed at release, lines of pages others wrote
//!   invalidated at acquire, see [`protocol`]).
//! - **DSM**: a private cached copy per process, scope consistency with
//!   lock ids, home-based multiple writers with twins and diffs, write
//!   notices per lock.
//!
//! Modes are per process and per page ([`SvmProc::set_mode`]), plus the
//! paper's "read-only private" hint ([`SvmProc::hint_read_only`]).
//!
//! ```no_run
//! use tiermem::svm::{Svm, SvmConfig, SvmMode};
//! use std::sync::atomic::Ordering;
//! let svm = Svm::new(SvmConfig::new(64 << 20, 2))?;
//! svm.run(|p| {
//!     let a = p.malloc(4096)?; // collective: the same address everywhere
//!     p.set_mode(a, 4096, SvmMode::Dsm)?;
//!     p.lock(0)?;
//!     let c = &p.u64s(a, 1)?[0];
//!     c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
//!     p.unlock(0)?;
//!     p.barrier()?;
//!     assert_eq!(p.u64s(a, 1)?[0].load(Ordering::Relaxed), p.procs() as u64);
//!     Ok(())
//! })?;
//! # Ok::<(), tiermem::Error>(())
//! ```
//!
//! Modules: [`protocol`] (the per-process state machine), [`transport`]
//! (how home copies and metadata are reached: [`LocalShm`] on one node),
//! `mpi` (cargo feature `mpi`: the same inside an MPI job, across nodes),
//! `meta` (the shared metadata layout). The forked team of processes is a
//! [`crate::team`] region, whose workers run on the crate's party launcher
//! (fork, barrier, failure handling), which neither feature owns.
//!
//! Inside an MPI job (the program started by `mpirun`, tiermem built with
//! the `mpi` feature), [`Svm::new`] is collective over `MPI_COMM_WORLD`,
//! every rank is one SVM process, and [`Svm::run`] runs the function once
//! in each rank, without forking.

mod meta;
#[cfg(feature = "mpi")]
mod mpi;
pub mod protocol;
pub mod transport;

pub use meta::{MAX_BLOCKS, MAX_LOCKS, NOTICE_CAP, SPM_LOG_CAP};
pub use transport::{LocalShm, Notices, Transport};

use crate::error::Error;
use crate::team::{TeamConfig, TeamKind, TeamRegion, TeamReport, Worker, MAX_MEMBERS, SCRATCH_WORDS};
use protocol::{Local, Shared};
use serde::Serialize;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiermem_sys::mm::{MapOptions, Mapping};

/// Page mode of a range, per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SvmMode {
    /// Shared physical memory: the home copy, mapped directly.
    Spm,
    /// Distributed shared memory: a private cached copy.
    Dsm,
}

/// How SPM pages are kept coherent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SpmFlavour {
    /// Plain shared mapping: correct on cache-coherent hardware.
    Coherent,
    /// Written lines flushed (`clwb`) at release, lines of pages others
    /// wrote invalidated (`clflushopt`) at acquire: what non-coherent
    /// shared memory needs.
    Noncoherent,
}

impl SpmFlavour {
    /// Name used on command lines.
    pub fn name(self) -> &'static str {
        match self {
            SpmFlavour::Coherent => "coherent",
            SpmFlavour::Noncoherent => "noncoherent",
        }
    }
}

/// Where the processes of an SVM come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SvmTransport {
    /// MPI if this process was started by an MPI launcher and tiermem was
    /// built with the `mpi` feature; otherwise a forked team.
    Auto,
    /// A team forked by [`Svm::run`], sharing memory on this node.
    Local,
    /// The ranks of `MPI_COMM_WORLD` (feature `mpi`).
    Mpi,
}

/// How an allocation's pages are dealt to home ranks in an MPI job (one
/// node: every page is homed in the node's shared memory anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Distribution {
    /// Contiguous blocks, one per rank in rank order (the default).
    Block,
    /// Page `i` of the allocation on rank `i % ranks`.
    Cyclic,
}

/// Configuration of an SVM team.
#[derive(Clone, Debug)]
pub struct SvmConfig {
    /// Bytes of shared heap (a multiple of 4 KiB).
    pub heap_bytes: usize,
    /// Processes (in an MPI job: 0 or the world size).
    pub procs: usize,
    /// SPM flavour.
    pub flavour: SpmFlavour,
    /// CPUs to pin process `r` to (`cpus[r % len]`); empty: unpinned
    /// (an MPI job: the launcher's binding).
    pub cpus: Vec<usize>,
    /// Forked team or MPI ranks.
    pub transport: SvmTransport,
}

impl SvmConfig {
    /// `heap_bytes` shared by `procs` processes, coherent SPM.
    pub fn new(heap_bytes: usize, procs: usize) -> SvmConfig {
        SvmConfig {
            heap_bytes,
            procs,
            flavour: SpmFlavour::Coherent,
            cpus: Vec::new(),
            transport: SvmTransport::Auto,
        }
    }
}

/// The ranks of the MPI job this process belongs to (initialises MPI if
/// needed); an error without the `mpi` feature.
pub fn mpi_ranks() -> Result<usize, Error> {
    #[cfg(feature = "mpi")]
    {
        let m = tiermem_sys::mpi::init()?;
        Ok(tiermem_sys::mpi::Comm::world(&m)?.size())
    }
    #[cfg(not(feature = "mpi"))]
    {
        Err(Error::Usage(
            "an SVM over MPI needs tiermem built with the `mpi` cargo feature".into(),
        ))
    }
}

/// Whether this process runs inside an MPI job that [`Svm::new`] would
/// join (`SvmTransport::Auto`).
pub fn in_mpi_job() -> bool {
    #[cfg(feature = "mpi")]
    {
        mpi::launched()
    }
    #[cfg(not(feature = "mpi"))]
    {
        false
    }
}

macro_rules! svm_stats {
    ($($(#[$doc:meta])* $field:ident = $slot:ident,)*) => {
        /// Statistic slots (per process, in the shared metadata).
        #[derive(Clone, Copy, Debug)]
        #[repr(usize)]
        pub(crate) enum Stat { $($slot,)* }

        /// Protocol counters of one process (or of all, summed).
        #[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
        pub struct SvmStats {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl SvmStats {
            fn read(m: &meta::Meta<'_>, rank: usize) -> SvmStats {
                SvmStats { $($field: m.stat(rank, Stat::$slot as usize).load(Ordering::Relaxed),)* }
            }
            #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
            pub(crate) fn from_words(w: &[u64]) -> SvmStats {
                SvmStats { $($field: w[Stat::$slot as usize],)* }
            }
            #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
            fn words(&self) -> Vec<u64> {
                let mut w = vec![0u64; meta::NSTAT];
                $(w[Stat::$slot as usize] = self.$field;)*
                w
            }
            /// Adds `o`'s counters to these.
            pub fn add(&mut self, o: &SvmStats) {
                $(self.$field += o.$field;)*
            }
            /// `self - earlier`, counter by counter.
            pub fn since(&self, earlier: &SvmStats) -> SvmStats {
                SvmStats { $($field: self.$field.wrapping_sub(earlier.$field),)* }
            }
        }
    };
}

svm_stats! {
    /// DSM/read-only-private read faults (home page copied in).
    read_faults = ReadFaults,
    /// DSM write faults (twin made, page on the dirty list).
    write_faults = WriteFaults,
    /// Write faults on write-protected SPM pages.
    spm_write_faults = SpmWriteFaults,
    /// Home pages copied into private copies.
    fetches = Fetches,
    /// Twins made.
    twins = Twins,
    /// Pages diffed against their twins.
    diffs = Diffs,
    /// Byte runs applied to home copies.
    diff_runs = DiffRuns,
    /// Bytes of diff applied to home copies.
    diff_bytes = DiffBytes,
    /// Write notices attached to locks.
    notices_sent = NoticesSent,
    /// Write notices read at acquires.
    notices_received = NoticesReceived,
    /// Cached copies invalidated.
    invalidations = Invalidations,
    /// Cache lines written back at releases (noncoherent).
    lines_flushed = LinesFlushed,
    /// Cache lines invalidated at acquires (noncoherent).
    lines_invalidated = LinesInvalidated,
    /// Notice rings or SPM logs that overflowed (everything validated).
    overflows = Overflows,
    /// SPM pages write-protected because others cache them in DSM.
    spm_tracked = SpmTracked,
    /// Pages that changed mode.
    mode_switch_pages = ModeSwitchPages,
    /// Locks acquired.
    locks = Locks,
    /// Barriers passed.
    barriers = Barriers,
    /// Nanoseconds spent taking locks (waiting and the lock's own
    /// messages; acquire invalidations not included).
    lock_ns = LockNs,
    /// Nanoseconds spent in barriers (waiting for the others and the
    /// barrier's exchange; releases and validation not included).
    barrier_ns = BarrierNs,
    /// Pages fetched from another node (MPI_Get).
    net_fetch_pages = NetFetchPages,
    /// Bytes received from other nodes by one-sided operations (pages,
    /// versions, notices).
    net_bytes_in = NetBytesIn,
    /// Bytes sent to other nodes by one-sided operations (diff runs,
    /// notices).
    net_bytes_out = NetBytesOut,
    /// One-sided operations to other nodes (gets, puts, atomics).
    net_ops = NetOps,
    /// Flushes waited for (round trips to other nodes).
    net_flushes = NetFlushes,
}

/// Who runs the processes.
enum Runner {
    /// A team forked by [`Svm::run`].
    Team(TeamRegion),
    /// The ranks of an MPI job.
    #[cfg(feature = "mpi")]
    Mpi(mpi::Job),
}

/// A team of processes sharing an SVM heap. Made by the parent; the
/// processes are started by [`Svm::run`]. In an MPI job, made by every
/// rank (collectively), and each rank is one process.
pub struct Svm {
    shared: Arc<Shared>,
    runner: Runner,
    config: SvmConfig,
}

/// Scratch words a forked team reserves at the end of its scratch area for
/// [`SvmProc::allreduce_sum`] (two generations of one slot per process).
const REDUCE_WORDS: usize = 2 * meta::MAX_PROCS;

impl Svm {
    /// Creates the home file, the metadata and the heap mapping; in an MPI
    /// job (see [`SvmTransport`]), joins the other ranks (collective).
    pub fn new(config: SvmConfig) -> Result<Svm, Error> {
        let ps = tiermem_sys::mm::base_page_size();
        if config.heap_bytes == 0 || !config.heap_bytes.is_multiple_of(ps) {
            return Err(Error::Usage(format!(
                "SVM heap of {} bytes is not a positive multiple of the {ps}-byte page",
                config.heap_bytes
            )));
        }
        let npages = config.heap_bytes / ps;
        if npages > u32::MAX as usize {
            return Err(Error::Usage("SVM heap too large".into()));
        }
        let use_mpi = match config.transport {
            SvmTransport::Local => false,
            SvmTransport::Mpi => true,
            SvmTransport::Auto => in_mpi_job(),
        };
        if use_mpi {
            return Self::new_mpi(config, npages);
        }
        if config.procs == 0 || config.procs >= MAX_MEMBERS.min(meta::MAX_PROCS) {
            return Err(Error::Usage(format!(
                "SVM team of {} processes: 1 to {} are supported",
                config.procs,
                MAX_MEMBERS.min(meta::MAX_PROCS) - 1
            )));
        }
        let t = LocalShm::create(npages, config.procs)?;
        let (heap, heap_user) =
            Mapping::shared(t.home_fd(), 0, config.heap_bytes, ps, &MapOptions::default())?;
        let mut tc = TeamConfig::new(128 * ps, 128 * ps, config.procs);
        tc.cpus = config.cpus.clone();
        let team = TeamRegion::new(tc)?;
        let shared = Arc::new(Shared {
            heap,
            heap_user,
            t: Arc::new(t),
            flavour: config.flavour,
        });
        Ok(Svm {
            shared,
            runner: Runner::Team(team),
            config,
        })
    }

    #[cfg(feature = "mpi")]
    fn new_mpi(config: SvmConfig, npages: usize) -> Result<Svm, Error> {
        let j = mpi::Job::join(&config, npages)?;
        let shared = Arc::new(Shared {
            heap: j.heap,
            heap_user: j.heap_user,
            t: j.job.link.clone(),
            flavour: config.flavour,
        });
        Ok(Svm {
            shared,
            runner: Runner::Mpi(j.job),
            config,
        })
    }

    #[cfg(not(feature = "mpi"))]
    fn new_mpi(_config: SvmConfig, _npages: usize) -> Result<Svm, Error> {
        Err(Error::Usage(
            "an SVM over MPI needs tiermem built with the `mpi` cargo feature".into(),
        ))
    }

    /// The configuration.
    pub fn config(&self) -> &SvmConfig {
        &self.config
    }

    /// The heap's base address (the same in every process).
    pub fn base(&self) -> usize {
        self.shared.heap.addr()
    }

    /// Processes (an MPI job: ranks).
    pub fn procs(&self) -> usize {
        match &self.runner {
            Runner::Team(_) => self.config.procs,
            #[cfg(feature = "mpi")]
            Runner::Mpi(j) => j.procs(),
        }
    }

    /// Nodes the processes span (1 for a forked team).
    pub fn nodes(&self) -> usize {
        match &self.runner {
            Runner::Team(_) => 1,
            #[cfg(feature = "mpi")]
            Runner::Mpi(j) => j.nodes(),
        }
    }

    /// This process's rank in an MPI job (`None` for a forked team, whose
    /// parent is no SVM process).
    pub fn mpi_rank(&self) -> Option<usize> {
        match &self.runner {
            Runner::Team(_) => None,
            #[cfg(feature = "mpi")]
            Runner::Mpi(j) => Some(j.rank()),
        }
    }

    /// Runs `f` in each of the team's processes (forked, pinned), and waits
    /// for all. A process that fails (error, panic, crash, kill) stops the
    /// others at their next barrier or lock wait, and the run returns an
    /// error naming it. At the end of `f` each process releases (its diffs
    /// reach the home copies).
    ///
    /// In an MPI job, `f` runs once, in this rank (collective: every rank
    /// calls `run`); a rank whose `f` fails stops the others at their next
    /// wait with an error naming it, and a rank that dies ends the job
    /// (the MPI launcher's doing).
    pub fn run<F>(&self, f: F) -> Result<TeamReport, Error>
    where
        F: Fn(&SvmProc<'_>) -> Result<(), Error> + Sync,
    {
        // A single pattern without the `mpi` feature.
        #[allow(clippy::infallible_destructuring_match)]
        let team = match &self.runner {
            Runner::Team(team) => team,
            #[cfg(feature = "mpi")]
            Runner::Mpi(job) => return self.run_mpi(job, f),
        };
        let m = self.shared.meta();
        for r in 0..self.config.procs {
            for s in 0..meta::NSTAT {
                m.stat(r, s).store(0, Ordering::Relaxed);
            }
        }
        let start = protocol::Cursors::now(&*self.shared.t)?;
        team.run(TeamKind::Processes, |w| {
            let local = Local::join(self.shared.clone(), w.rank(), &start, false)?;
            let p = SvmProc {
                w: Member::Team(w),
                local,
                reductions: AtomicU64::new(0),
            };
            let r = f(&p).and_then(|()| p.local.release(None));
            p.local.leave();
            r
        })
    }

    #[cfg(feature = "mpi")]
    fn run_mpi<F>(&self, job: &mpi::Job, f: F) -> Result<TeamReport, Error>
    where
        F: Fn(&SvmProc<'_>) -> Result<(), Error>,
    {
        let t0 = Instant::now();
        job.begin_run()?;
        let start = protocol::Cursors::now(&*self.shared.t)?;
        let local = Local::join(self.shared.clone(), job.rank(), &start, true)?;
        let p = SvmProc {
            w: Member::Mpi(job),
            local,
            reductions: AtomicU64::new(0),
        };
        let r = f(&p).and_then(|()| p.local.release(None));
        p.local.leave();
        if let Err(e) = r {
            job.link.fail(job.rank());
            return Err(e);
        }
        job.end_run()?;
        Ok(TeamReport {
            workers: Vec::new(),
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// Counters per process, from the last run.
    pub fn stats(&self) -> Vec<SvmStats> {
        match &self.runner {
            Runner::Team(_) => {
                let m = self.shared.meta();
                (0..self.config.procs).map(|r| SvmStats::read(&m, r)).collect()
            }
            #[cfg(feature = "mpi")]
            Runner::Mpi(j) => j.stats(),
        }
    }

    /// Counters of all processes, summed.
    pub fn total_stats(&self) -> SvmStats {
        let mut t = SvmStats::default();
        for s in self.stats() {
            t.add(&s);
        }
        t
    }

    /// The team's scratch words (what processes left there). In an MPI
    /// job: after a run, each word is the sum over ranks of what the ranks
    /// left in it (a word only rank 0 writes reads as rank 0's value).
    pub fn scratch(&self) -> &[AtomicU64] {
        match &self.runner {
            Runner::Team(t) => t.scratch(),
            #[cfg(feature = "mpi")]
            Runner::Mpi(j) => j.scratch(),
        }
    }

    /// Copies home bytes at address `ptr` (after a run: the result).
    pub fn read_home(&self, ptr: usize, out: &mut [u8]) -> Result<(), Error> {
        let off = self.offset(ptr, out.len())?;
        self.shared.t.read_home(off, out)
    }

    fn offset(&self, ptr: usize, len: usize) -> Result<usize, Error> {
        offset_in(&self.shared, ptr, len)
    }
}

fn offset_in(shared: &Shared, ptr: usize, len: usize) -> Result<usize, Error> {
    let heap = &shared.heap;
    if ptr < heap.addr() || len > heap.len() || ptr - heap.addr() > heap.len() - len {
        return Err(Error::Usage(format!(
            "{ptr:#x}+{len} is not inside the SVM heap {:#x}+{}",
            heap.addr(),
            heap.len()
        )));
    }
    Ok(ptr - heap.addr())
}

/// One process of a running SVM team.
pub struct SvmProc<'a> {
    w: Member<'a>,
    local: Arc<Local>,
    /// Calls of [`SvmProc::allreduce_sum`] so far.
    reductions: AtomicU64,
}

/// The process's place in its team: a forked worker or an MPI rank.
enum Member<'a> {
    Team(&'a Worker<'a>),
    #[cfg(feature = "mpi")]
    Mpi(&'a mpi::Job),
}

impl SvmProc<'_> {
    /// This process's rank, `0..procs()`.
    pub fn rank(&self) -> usize {
        match self.w {
            Member::Team(w) => w.rank(),
            #[cfg(feature = "mpi")]
            Member::Mpi(j) => j.rank(),
        }
    }
    /// Processes in the team.
    pub fn procs(&self) -> usize {
        match self.w {
            Member::Team(w) => w.workers(),
            #[cfg(feature = "mpi")]
            Member::Mpi(j) => j.procs(),
        }
    }
    /// Nodes the team spans (1 for a forked team).
    pub fn nodes(&self) -> usize {
        match self.w {
            Member::Team(_) => 1,
            #[cfg(feature = "mpi")]
            Member::Mpi(j) => j.nodes(),
        }
    }
    fn shared(&self) -> &Shared {
        &self.local.shared
    }
    fn ps(&self) -> usize {
        self.shared().page_bytes()
    }

    /// Collective allocation: every process calls `malloc` in the same
    /// order with the same size, and the k-th call returns the same address
    /// everywhere. Whole pages, not zeroed (a new heap reads zero). In an
    /// MPI job the pages are homed in blocks, one per rank.
    pub fn malloc(&self, size: usize) -> Result<usize, Error> {
        self.malloc_distributed(size, Distribution::Block)
    }

    /// [`SvmProc::malloc`] with the pages homed by `dist` in an MPI job
    /// (every process passes the same; a forked team ignores it).
    pub fn malloc_distributed(&self, size: usize, dist: Distribution) -> Result<usize, Error> {
        if size == 0 {
            return Err(Error::Usage("tm_svm_malloc of 0 bytes".into()));
        }
        let ps = self.ps();
        let pages = size.div_ceil(ps) as u64;
        let call = self.local.malloc_calls.load(Ordering::Relaxed);
        #[cfg(feature = "mpi")]
        if let Member::Mpi(j) = self.w {
            let d = match dist {
                Distribution::Block => mpi::Distribution::Block,
                Distribution::Cyclic => mpi::Distribution::Cyclic,
            };
            let first = j.malloc(pages as usize, call, self.shared().npages(), d)?;
            self.local.malloc_calls.store(call + 1, Ordering::Relaxed);
            // The pages' homes changed: map the local ones, cache the rest.
            self.local.set_mode(first, pages as usize, protocol::SPM)?;
            return Ok(self.shared().heap.addr() + first * ps);
        }
        let _ = dist;
        let m = self.shared().meta();
        let _g = AllocGuard::take(&m, self.rank())?;
        let slot = |i: usize, k: usize| m.block(i, k);
        // Someone made this call already: take its block.
        for i in 0..MAX_BLOCKS {
            if slot(i, 0).load(Ordering::Relaxed) != 0 && slot(i, 2).load(Ordering::Relaxed) == call {
                if slot(i, 1).load(Ordering::Relaxed) != pages {
                    return Err(Error::Usage(format!(
                        "tm_svm_malloc call {call} asks for {pages} pages here and {} in another process: calls must match",
                        slot(i, 1).load(Ordering::Relaxed)
                    )));
                }
                slot(i, 3).fetch_add(1, Ordering::Relaxed);
                self.local.malloc_calls.store(call + 1, Ordering::Relaxed);
                return Ok(self.shared().heap.addr() + (slot(i, 0).load(Ordering::Relaxed) - 1) as usize * ps);
            }
        }
        // First fit among the live blocks.
        let mut live: Vec<(u64, u64)> = (0..MAX_BLOCKS)
            .filter(|&i| slot(i, 0).load(Ordering::Relaxed) != 0)
            .map(|i| {
                (
                    slot(i, 0).load(Ordering::Relaxed) - 1,
                    slot(i, 1).load(Ordering::Relaxed),
                )
            })
            .collect();
        live.sort_unstable();
        let npages = self.shared().npages() as u64;
        let mut at = 0u64;
        for &(o, n) in &live {
            if o >= at + pages {
                break;
            }
            at = at.max(o + n);
        }
        if at + pages > npages {
            return Err(Error::GlobalHeapFull(format!(
                "the SVM heap of {npages} pages has no free run of {pages} pages"
            )));
        }
        let Some(i) = (0..MAX_BLOCKS).find(|&i| slot(i, 0).load(Ordering::Relaxed) == 0) else {
            return Err(Error::GlobalHeapFull(format!(
                "more than {MAX_BLOCKS} SVM allocations"
            )));
        };
        slot(i, 1).store(pages, Ordering::Relaxed);
        slot(i, 2).store(call, Ordering::Relaxed);
        slot(i, 3).store(1, Ordering::Relaxed);
        slot(i, 0).store(at + 1, Ordering::Relaxed);
        self.local.malloc_calls.store(call + 1, Ordering::Relaxed);
        Ok(self.shared().heap.addr() + at as usize * ps)
    }

    /// Collective free: every process frees what it allocated; this
    /// process's pages of the block go back to SPM mode (diffs applied
    /// first), and the block is reused once every process freed it.
    pub fn free(&self, ptr: usize) -> Result<(), Error> {
        let ps = self.ps();
        let m = self.shared().meta();
        let off = offset_in(self.shared(), ptr, 1)?;
        #[cfg(feature = "mpi")]
        if let Member::Mpi(j) = self.w {
            if off % ps != 0 {
                return Err(Error::Usage(format!(
                    "tm_svm_free({ptr:#x}): not an SVM allocation"
                )));
            }
            let pages = j.free(off / ps, ptr)?;
            return self.local.set_mode(off / ps, pages, protocol::SPM);
        }
        let first = (off / ps) as u64 + 1;
        let found = {
            let _g = AllocGuard::take(&m, self.rank())?;
            (0..MAX_BLOCKS).find(|&i| off % ps == 0 && m.block(i, 0).load(Ordering::Relaxed) == first)
        };
        let Some(i) = found else {
            return Err(Error::Usage(format!(
                "tm_svm_free({ptr:#x}): not an SVM allocation"
            )));
        };
        let pages = m.block(i, 1).load(Ordering::Relaxed) as usize;
        self.local.set_mode(off / ps, pages, protocol::SPM)?;
        let _g = AllocGuard::take(&m, self.rank())?;
        let both = m.block(i, 3).fetch_add(1 << 32, Ordering::Relaxed) + (1 << 32);
        if both >> 32 >= self.procs() as u64 {
            m.block(i, 0).store(0, Ordering::Relaxed);
            m.block(i, 3).store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Takes numbered lock `id` and invalidates the cached copies named in
    /// its write notices (scope consistency). An error if `id` is out of
    /// range, if this process holds it, or if its holder died.
    pub fn lock(&self, id: usize) -> Result<(), Error> {
        check_lock(id)?;
        let t0 = Instant::now();
        self.shared().t.lock(id, self.rank())?;
        self.shared()
            .meta()
            .add(self.rank(), Stat::LockNs as usize, t0.elapsed().as_nanos() as u64);
        self.local.acquire(id)?;
        self.shared().meta().add(self.rank(), Stat::Locks as usize, 1);
        Ok(())
    }

    /// Applies the diffs of this process's dirty pages to their home copies,
    /// attaches write notices to lock `id`, and releases it.
    pub fn unlock(&self, id: usize) -> Result<(), Error> {
        check_lock(id)?;
        let holder = self.shared().t.lock_holder(id)?;
        if holder != self.rank() as u64 + 1 {
            return Err(Error::Usage(format!(
                "unlock of lock {id}, which this process does not hold"
            )));
        }
        self.local.release(Some(id))?;
        self.shared().t.unlock(id, self.rank())
    }

    /// Every process's diffs are applied, then every cached copy whose home
    /// changed is invalidated. An error if another process died.
    pub fn barrier(&self) -> Result<(), Error> {
        self.local.release(None)?;
        #[cfg(feature = "mpi")]
        if let Member::Mpi(j) = self.w {
            if j.nodes() > 1 {
                // The barrier carries every process's changes (write
                // notices with versions): no version reads from home.
                let t0 = Instant::now();
                let changes = j.barrier_exchange()?;
                self.add_barrier_ns(t0);
                return self.local.after_barrier(Some(&changes));
            }
        }
        let t0 = Instant::now();
        self.sync()?;
        self.add_barrier_ns(t0);
        self.local.after_barrier(None)
    }

    fn add_barrier_ns(&self, t0: Instant) {
        self.shared().meta().add(
            self.rank(),
            Stat::BarrierNs as usize,
            t0.elapsed().as_nanos() as u64,
        );
    }

    /// The team's barrier alone (no release, no validation).
    fn sync(&self) -> Result<(), Error> {
        match self.w {
            Member::Team(w) => w.barrier(),
            #[cfg(feature = "mpi")]
            Member::Mpi(j) => j.barrier(),
        }
    }

    /// The sum of `v` over the processes (collective: every process calls
    /// it, in the same order with its other collectives). Outside the SVM
    /// protocol: a barrier's synchronisation without its release and
    /// validation (`MPI_Allreduce` in an MPI job).
    pub fn allreduce_sum(&self, v: u64) -> Result<u64, Error> {
        match self.w {
            Member::Team(w) => {
                // Two generations of slots: a process that reads generation
                // g has passed g's barrier; slots of g are written again at
                // g + 2, after g + 1's barrier, which every reader of g
                // enters after reading.
                let g = self.reductions.fetch_add(1, Ordering::Relaxed) as usize;
                let base = SCRATCH_WORDS - REDUCE_WORDS + (g % 2) * meta::MAX_PROCS;
                let sc = w.scratch();
                // Relaxed: the team barrier orders the slots.
                sc[base + w.rank()].store(v, Ordering::Relaxed);
                w.barrier()?;
                Ok((0..w.workers())
                    .map(|r| sc[base + r].load(Ordering::Relaxed))
                    .sum())
            }
            #[cfg(feature = "mpi")]
            Member::Mpi(j) => Ok(j.allreduce(tiermem_sys::mpi::ReduceOp::Sum, vec![v], "allreduce_sum")?[0]),
        }
    }

    fn pages(&self, ptr: usize, len: usize) -> Result<(usize, usize), Error> {
        let ps = self.ps();
        let off = offset_in(self.shared(), ptr, len)?;
        if len == 0 || off % ps != 0 || !len.is_multiple_of(ps) {
            return Err(Error::Usage(format!(
                "mode change of {ptr:#x}+{len}: the range must be whole pages of {ps} bytes"
            )));
        }
        Ok((off / ps, len / ps))
    }

    /// Puts the pages of `ptr..ptr + len` (whole pages) in `mode` for this
    /// process only.
    pub fn set_mode(&self, ptr: usize, len: usize, mode: SvmMode) -> Result<(), Error> {
        let (first, n) = self.pages(ptr, len)?;
        let m = match mode {
            SvmMode::Spm => protocol::SPM,
            SvmMode::Dsm => protocol::DSM,
        };
        self.local.set_mode(first, n, m)
    }

    /// The paper's "read-only private" hint: this process caches the pages
    /// privately and never invalidates them at acquires (only barriers
    /// validate them). Writing them is a protection error (SIGSEGV).
    pub fn hint_read_only(&self, ptr: usize, len: usize) -> Result<(), Error> {
        let (first, n) = self.pages(ptr, len)?;
        self.local.set_mode(first, n, protocol::RO_PRIVATE)
    }

    /// The mode of the page holding `ptr` here (read-only private reads as
    /// DSM).
    pub fn mode_of(&self, ptr: usize) -> Result<SvmMode, Error> {
        let off = offset_in(self.shared(), ptr, 1)?;
        Ok(if self.local.mode_of(off / self.ps()) == protocol::SPM {
            SvmMode::Spm
        } else {
            SvmMode::Dsm
        })
    }

    /// `len` bytes at `ptr` as byte atomics (relaxed loads and stores are
    /// plain moves; locks and barriers order them).
    pub fn bytes(&self, ptr: usize, len: usize) -> Result<&[AtomicU8], Error> {
        let off = offset_in(self.shared(), ptr, len)?;
        let s = self.shared();
        Ok(&s.heap.user_atomics_u8(&s.heap_user)[off..off + len])
    }

    /// `n` 32-bit words at `ptr` (4-byte aligned).
    pub fn u32s(&self, ptr: usize, n: usize) -> Result<&[AtomicU32], Error> {
        let off = offset_in(self.shared(), ptr, n * 4)?;
        if off % 4 != 0 {
            return Err(Error::Usage(format!("{ptr:#x} is not 4-byte aligned")));
        }
        let s = self.shared();
        Ok(&s.heap.user_atomics_u32(&s.heap_user)[off / 4..off / 4 + n])
    }

    /// `n` 64-bit words at `ptr` (8-byte aligned).
    pub fn u64s(&self, ptr: usize, n: usize) -> Result<&[AtomicU64], Error> {
        let off = offset_in(self.shared(), ptr, n * 8)?;
        if off % 8 != 0 {
            return Err(Error::Usage(format!("{ptr:#x} is not 8-byte aligned")));
        }
        let s = self.shared();
        Ok(&s.heap.user_atomics(&s.heap_user)[off / 8..off / 8 + n])
    }

    /// The team's scratch words (results and flags outside the protocol).
    /// The last words are reserved for [`SvmProc::allreduce_sum`]. In an
    /// MPI job the words are this rank's own during the run, and summed
    /// over the ranks after it ([`Svm::scratch`]).
    pub fn scratch(&self) -> &[AtomicU64] {
        match self.w {
            Member::Team(w) => &w.scratch()[..SCRATCH_WORDS - REDUCE_WORDS],
            #[cfg(feature = "mpi")]
            Member::Mpi(j) => &j.scratch()[..SCRATCH_WORDS - REDUCE_WORDS],
        }
    }

    /// This process's counters so far.
    pub fn stats(&self) -> SvmStats {
        SvmStats::read(&self.shared().meta(), self.rank())
    }

    /// Every process's counters, summed (for a phase measured between
    /// barriers; collective in an MPI job).
    pub fn total_stats(&self) -> Result<SvmStats, Error> {
        #[cfg(feature = "mpi")]
        if let Member::Mpi(j) = self.w {
            let sum = j.allreduce(
                tiermem_sys::mpi::ReduceOp::Sum,
                self.stats().words(),
                "total_stats",
            )?;
            return Ok(SvmStats::from_words(&sum));
        }
        let m = self.shared().meta();
        let mut t = SvmStats::default();
        for r in 0..self.procs() {
            t.add(&SvmStats::read(&m, r));
        }
        Ok(t)
    }
}

fn check_lock(id: usize) -> Result<(), Error> {
    if id >= MAX_LOCKS {
        return Err(Error::Usage(format!("lock id {id} out of range 0..{MAX_LOCKS}")));
    }
    Ok(())
}

/// The allocation table's lock (held for a few microseconds).
struct AllocGuard<'a> {
    word: &'a AtomicU64,
}

impl<'a> AllocGuard<'a> {
    fn take(m: &meta::Meta<'a>, rank: usize) -> Result<AllocGuard<'a>, Error> {
        let word = m.h(meta::H_ALLOC_LOCK);
        let start = Instant::now();
        let mut backoff = crate::party::Backoff::new(Duration::from_micros(20));
        // Acquire/Release: the table's relaxed accesses happen inside.
        while word
            .compare_exchange(0, rank as u64 + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            backoff.snooze();
            if start.elapsed() > Duration::from_secs(5) {
                let holder = word.load(Ordering::Relaxed);
                if holder != 0 {
                    let pid = m.pid(holder as usize - 1).load(Ordering::Relaxed) as u32;
                    if !tiermem_sys::process::running(pid) {
                        return Err(Error::Team(format!(
                            "the SVM allocator is held by process {pid}, which died"
                        )));
                    }
                }
            }
        }
        Ok(AllocGuard { word })
    }
}

impl Drop for AllocGuard<'_> {
    fn drop(&mut self) {
        self.word.store(0, Ordering::Release);
    }
}
