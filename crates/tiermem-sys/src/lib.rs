//! tiermem's kernel interface: the only crate of the workspace that makes
//! system calls, and the only one with `unsafe` code.
//!
//! Two levels, as in rustix: private raw definitions in [`uapi`] mirror the
//! kernel ABI one to one (the installed headers lack UFFDIO_MOVE, POISON,
//! WP_ASYNC and PAGEMAP_SCAN), and the public modules wrap them in safe
//! types that enforce what they can:
//!
//! - [`uffd`]: userfaultfd (open, feature probe, register, COPY, ZEROPAGE,
//!   WAKE, WRITEPROTECT, MOVE, CONTINUE, POISON, event reading);
//! - [`mm`]: owned mappings (`mmap`, `munmap`, `madvise`, `mprotect`,
//!   `mremap`) and raw copies in and out of them;
//! - [`locks`]: tiermem's mappings, kept out of the program's memory
//!   locks (`mlock`, `mlockall`);
//! - [`memfd`]: memfd, `ftruncate`, `fallocate`;
//! - [`file`]: far-store files (0600, sparse, optional `O_DIRECT`);
//! - [`hugetlb`]: huge page pools;
//! - [`pagemap`]: the `PAGEMAP_SCAN` ioctl;
//! - [`cache`]: cache-line write-back and invalidation (clwb, clflushopt);
//! - [`signal`]: in-context SIGBUS/SIGSEGV fault callbacks;
//! - `seccomp::guard` (private): the program's own signal system calls, kept from
//!   taking the fault signals away (trapped by the seccomp filter);
//! - [`process`]: worker processes (fork, wait, kill, `_exit`);
//! - [`ranges`]: a table of address ranges searchable from signal handlers;
//! - [`raw`]: memory-management system calls that bypass the C library;
//! - [`seccomp`]: trapping system calls on buffers in a window (SIGSYS);
//! - [`bounce`]: plain buffers that blocking calls use in place of tiered
//!   ones;
//! - [`splice`]: a pipe of page references for team-mode eviction;
//! - [`thread`]: thread ids, CPUs, affinity, futexes, fork generation;
//! - [`event`]: eventfd and poll;
//! - [`interrupts`]: TLB-shootdown IPI counts;
//! - [`probe`]: what the running system offers;
//! - [`atomic`]: atomic views of exclusively borrowed words;
//! - `mpi` (cargo feature `mpi`): MPI-3 communicators and one-sided
//!   windows for the shared virtual memory across nodes.

pub mod atomic;
pub mod bounce;
pub mod cache;
pub mod env;
pub mod errno;
pub mod event;
pub mod fdguard;
pub mod file;
pub mod hugetlb;
pub mod interrupts;
pub mod locks;
pub mod memfd;
pub mod mm;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod pagemap;
pub mod probe;
pub mod process;
pub mod ranges;
pub mod raw;
pub mod seccomp;
pub mod signal;
pub mod splice;
pub mod thread;
mod trampoline;
mod uapi;
pub mod uffd;
pub mod zeroed;

pub use errno::Errno;
