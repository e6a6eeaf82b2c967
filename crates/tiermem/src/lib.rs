//! tiermem: application-transparent hierarchical memory for HPC, in user
//! space on a stock Linux kernel.
//!
//! A [`Region`] is a virtual range of `virt` bytes backed by at most `near`
//! bytes of fast memory; the rest of its pages live in a far store (a
//! memory pool or a file) and move in on page faults (userfaultfd) and out
//! when the budget is full, chosen by a replacement policy. This is paper
//! 1's OS-assisted hierarchical memory (Gerofi et al., CCGrid'13, sections
//! III.A-B), with synchronous data movement and FIFO replacement.
//!
//! ```no_run
//! use tiermem::{Config, Region};
//! let mut cfg = Config::new(1 << 30, 256 << 20); // 1 GiB over 256 MiB
//! cfg.evict_batch_pages = 64;
//! let mut region = Region::new(cfg)?;
//! let grid: &mut [f64] = region.as_mut_slice();
//! grid.iter_mut().enumerate().for_each(|(i, x)| *x = i as f64);
//! let s = region.stats();
//! println!("{} zero fills, {} evictions, {} bytes written back",
//!          s.faults_zero_fill, s.evictions, s.bytes_out);
//! # Ok::<(), tiermem::Error>(())
//! ```
//!
//! Layers, from the bottom; a layer calls only those below it:
//! 1. **Kernel interface**: the `tiermem-sys` crate (userfaultfd, mappings,
//!    signals, seccomp); this crate has no `unsafe` code.
//! 2. **Fault router** (`fault`, private): the one owner of SIGBUS and
//!    SIGSEGV; every feature registers its address ranges with it, and it
//!    names none of them.
//! 3. **The engine** (`engine`, private) and what it stands on:
//!    [`config`] (configuration, validation, `TIERMEM_*` variables),
//!    `page` (page states), [`store`] (far stores, memory and file, behind
//!    one trait), [`policy`] (replacement policies behind one trait),
//!    [`stats`]. Fault resolution, fills and fault-around, eviction,
//!    movers and prefetch, in-context (SIGBUS) and handler-thread designs.
//! 4. **Features**, users of the engine or the router:
//!    - [`region`]: the region handle ([`Region`]);
//!    - [`segment`]: 1 GiB and 2 MiB segment regions;
//!    - [`heap`]: the transparent heap (large allocations of unmodified
//!      programs) on a tiered region or on huge pages;
//!    - [`global`]: the process-wide region behind `tm_malloc_global`;
//!    - [`team`]: one region shared by worker processes, a page table each
//!      (partially separated page tables), with the engine's fault-around
//!      decisions and batch growth;
//!    - [`overshadow`]: paper 2's Overshadow: read far memory at once,
//!      switch each page to its near copy when copied;
//!    - [`svm`]: paper 5's shared virtual memory (Rhymes): SPM and DSM page
//!      modes across processes, scope consistency, twins and diffs;
//!    - `kernel_access` (private): system calls on tiered buffers, trapped
//!      (seccomp) and run with their pages pinned;
//!    - [`fork`] and [`vfork`]: what a forked child sees of the regions it
//!      inherits; a thread of the owner serves its `vfork` children;
//!    - [`far`]: far memory tiermem can map twice (memfd allocations, file
//!      ranges).
//! 5. **Around them**: [`launcher`] (the job launcher, MPI or Slurm, and a
//!    rank's share of its node), `party` (private: workers on one node,
//!    threads or forked processes, their barrier and abort; team mode and
//!    the SVM's forked team run on it), [`live`] (the live view),
//!    [`hugepages`] (pools).
//!

#![deny(unsafe_code)]

mod claim;
pub mod config;
mod engine;
pub mod error;
pub mod far;
mod fault;
pub mod fork;
pub mod global;
pub mod heap;
pub mod hugepages;
mod kernel_access;
pub mod launcher;
pub mod live;
pub mod overshadow;
mod page;
mod party;
pub mod policy;
mod pool_request;
pub mod region;
pub mod segment;
pub mod stats;
pub mod store;
pub mod svm;
pub mod team;

pub use config::{
    Config, DirtyTracking, FarStoreConfig, FaultPath, InstallMethod, KernelAccess, OnFork, PageSize,
};
pub use engine::IoErrorRecord;
pub use error::{Error, ErrorCode};
pub use fault::{set_last_words, vfork};
pub use kernel_access::{io_uring_refused, pin_buffer, serve_inherited_traps, PinnedBuffer};
pub use page::PageState;
pub use policy::PolicyKind;
pub use region::{advise, clear_poison_at, hold_resident, prefetch, touch, Advice, Held, PageCensus, Region};
pub use segment::{Segment, SegmentConfig};
pub use stats::RegionStats;
pub use tiermem_sys::probe::SystemInfo;
