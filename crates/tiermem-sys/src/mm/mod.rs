//! Memory mappings: `mmap`, `munmap`, `madvise`, `mprotect`, `mremap`.
//!
//! A [`Mapping`] owns one `mmap`ed range and unmaps it on drop. tiermem's
//! engine moves data in and out of mappings with raw byte copies
//! ([`Mapping::copy_in`], [`Mapping::copy_out`], [`Mapping::pread`], ...)
//! that never create Rust references, in the style of rust-vmm's
//! `vm-memory` for guest memory: the memory is shared with code Rust cannot
//! see (the application, the kernel, a DMA engine), so the only typed view,
//! [`Mapping::user_slice_mut`], is gated by a unique [`UserAccess`] token.
//!
//! ```
//! use tiermem_sys::mm::{Mapping, MapOptions};
//! let (map, mut user) = Mapping::anonymous(1 << 20, &MapOptions::default()).unwrap();
//! let words: &mut [u64] = map.user_slice_mut(&mut user);
//! words[7] = 42;
//! let mut out = [0u8; 8];
//! map.copy_out(56, &mut out);
//! assert_eq!(u64::from_ne_bytes(out), 42);
//! ```

use crate::errno::{check, check_size, Errno};
use crate::hugetlb::HugePageSize;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use thiserror::Error;

mod advise;
mod copy;
mod map;
mod range;
mod replace;
#[cfg(test)]
mod tests;

pub use range::MemRange;

/// Ranges per `process_madvise` call of [`Mapping::discard_ranges`] (on the
/// stack: a fault handler on a small alternate stack may evict).
pub const DISCARD_VECTOR: usize = 64;
/// `PIDFD_SELF_THREAD_GROUP` (linux/fcntl.h, 6.15+; the headers here are
/// older): the calling process, with no descriptor to reopen after `fork`.
const PIDFD_SELF_THREAD_GROUP: libc::c_int = -10001;
const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;
/// Whether the kernel takes `process_madvise(PIDFD_SELF, MADV_DONTNEED)`.
static PROCESS_MADVISE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether [`Mapping::discard_ranges`] unmaps many ranges per system call
/// here (`process_madvise` with `PIDFD_SELF`): probed on a scratch page the
/// first time, then remembered.
pub fn batched_discard() -> bool {
    if PROCESS_MADVISE.load(Ordering::Relaxed) == UNKNOWN {
        if let Ok((m, _)) = Mapping::anonymous(4096, &MapOptions::default()) {
            // SAFETY: a scratch mapping nobody reads.
            let _ = unsafe { m.discard_ranges(&[(0, 4096)]) };
        }
    }
    PROCESS_MADVISE.load(Ordering::Relaxed) == YES
}

/// Errors of the mapping calls.
#[derive(Debug, Error)]
pub enum MmError {
    /// `mmap` failed.
    #[error("mmap of {len} bytes failed: {errno}")]
    Map {
        /// Requested length.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// `madvise` failed.
    #[error("madvise({advice:?}) over {len} bytes failed: {errno}")]
    Advise {
        /// The advice given.
        advice: Advice,
        /// Length of the range.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// `mprotect` failed.
    #[error("mprotect over {len} bytes failed: {errno}")]
    Protect {
        /// Length of the range.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// `mremap` failed.
    #[error("mremap to {new_len} bytes failed: {errno}")]
    Remap {
        /// Requested new length.
        new_len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// `mlock` failed.
    #[error("mlock of {len} bytes failed: {errno}")]
    Lock {
        /// Length of the range.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// A length of zero or not a multiple of the page size.
    #[error("invalid length {len}: must be a non-zero multiple of {unit} bytes")]
    BadLength {
        /// The length given.
        len: usize,
        /// The granule it must be a multiple of.
        unit: usize,
    },
}

/// The base page size of this machine.
pub fn base_page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

/// The process's address-space limit (`ulimit -v`, `RLIMIT_AS`) in bytes;
/// None when there is none.
pub fn address_space_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is ours; getrlimit only writes it.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) } != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(rl.rlim_cur)
}

/// How to create a mapping.
#[derive(Clone, Debug, Default)]
pub struct MapOptions {
    /// Back the mapping with hugetlb pages of this size.
    pub huge: Option<HugePageSize>,
    /// `MAP_NORESERVE`: do not reserve swap or hugetlb pages for the range.
    pub noreserve: bool,
    /// `MAP_POPULATE`: fault everything in now.
    pub populate: bool,
    /// `MADV_DONTFORK`: a `fork()`ed child does not inherit the mapping.
    pub dontfork: bool,
    /// Align the start to this many bytes (a power of two; 0 = natural).
    pub align: usize,
    /// Map read-only (`PROT_READ`); writes raise SIGSEGV.
    pub read_only: bool,
    /// Map at exactly this address (`MAP_FIXED_NOREPLACE`; 0: the kernel
    /// chooses). Fails with `EEXIST` if anything is mapped there; `align`
    /// is then the caller's business.
    pub at: usize,
}

/// Non-destructive `madvise` advice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_DONTFORK`
    DontFork,
    /// `MADV_DOFORK`
    DoFork,
    /// `MADV_NOHUGEPAGE`
    NoHugePage,
    /// `MADV_HUGEPAGE`
    HugePage,
    /// `MADV_WILLNEED`
    WillNeed,
    /// `MADV_RANDOM`: no readahead on faults of a file mapping
    Random,
    /// `MADV_COLLAPSE` (kernel 6.1): replace the small pages of a fully
    /// populated, aligned 2 MiB block by one transparent huge page, now.
    /// Contents are unchanged; fails (EINVAL) if a pte is missing or
    /// userfaultfd-write-protected, EAGAIN/ENOMEM if no huge page is free.
    Collapse,
    /// `MADV_DONTNEED` (destructive; see [`Mapping::discard`])
    DontNeed,
    /// `MADV_REMOVE` (destructive; punches a hole in shared memory)
    Remove,
}

impl Advice {
    fn raw(self) -> libc::c_int {
        match self {
            Advice::DontFork => libc::MADV_DONTFORK,
            Advice::DoFork => libc::MADV_DOFORK,
            Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
            Advice::HugePage => libc::MADV_HUGEPAGE,
            Advice::WillNeed => libc::MADV_WILLNEED,
            Advice::Random => libc::MADV_RANDOM,
            Advice::Collapse => libc::MADV_COLLAPSE,
            Advice::DontNeed => libc::MADV_DONTNEED,
            Advice::Remove => libc::MADV_REMOVE,
        }
    }
}

/// Page protection for [`Mapping::protect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// `PROT_NONE`
    None,
    /// `PROT_READ`
    Read,
    /// `PROT_READ | PROT_WRITE`
    ReadWrite,
}

impl Protection {
    fn raw(self) -> libc::c_int {
        match self {
            Protection::None => libc::PROT_NONE,
            Protection::Read => libc::PROT_READ,
            Protection::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// One owned `mmap`ed range, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    addr: NonNull<u8>,
    len: usize,
    /// Granule of the backing pages (4 KiB, or the hugetlb size).
    page_size: usize,
    /// Set for `MADV_DONTFORK` mappings: the fork generation that owns the
    /// range. A forked child does not have the range, so it must not unmap
    /// whatever the child may have mapped there since.
    dontfork_generation: Option<u64>,
    /// `MAP_SHARED` of a file: dropping its page-table entries loses nothing.
    shared: bool,
    /// Memory tiermem manages, kept out of the program's memory locks
    /// (recorded in [`crate::locks`] while mapped).
    kept_unlocked: bool,
}

// SAFETY: a Mapping is an address range plus metadata; all accesses go through
// raw copies whose callers order them (see the module docs), so sharing the
// handle across threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above; &Mapping exposes no references to the mapped bytes.
unsafe impl Sync for Mapping {}

/// The right to take a typed `&mut` view of a mapping (one per mapping).
///
/// Returned by the constructors that map memory meant for application data.
#[derive(Debug)]
pub struct UserAccess {
    addr: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(g) = self.dontfork_generation {
            if g != crate::thread::fork_generation() {
                return; // a forked child: the range was never ours here
            }
        }
        if self.kept_unlocked {
            // Before the unmap: the address may be someone else's after it.
            crate::locks::forget(self.addr());
        }
        // SAFETY: we own the range; every borrow of it has ended.
        unsafe { crate::raw::munmap(self.as_ptr().cast(), self.len) };
    }
}

/// Which pages of `[addr, addr + len)` (page aligned, mapped) are in
/// memory (`mincore`); all false if the call fails.
pub fn resident_pages(addr: usize, len: usize) -> Vec<bool> {
    let pages = len.div_ceil(base_page_size());
    let mut v = vec![0u8; pages];
    // SAFETY: mincore only writes one byte per page into `v`.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
    if r != 0 {
        return vec![false; pages];
    }
    v.into_iter().map(|b| b & 1 != 0).collect()
}

/// Copies `buf.len()` bytes at `addr` into `buf`.
///
/// # Safety
/// `[addr, addr + buf.len())` must be mapped and readable, and not written
/// concurrently.
pub unsafe fn read_raw(addr: usize, buf: &mut [u8]) {
    // SAFETY: the caller guarantees the source; `buf` is ours.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) }
}

/// Non-destructive `madvise` of any range of this process (huge page
/// advice on memory tiermem does not own, such as a program's data).
pub fn advise_raw(addr: usize, len: usize, advice: Advice) -> Result<(), MmError> {
    assert!(
        !matches!(advice, Advice::DontNeed | Advice::Remove),
        "destructive advice needs Mapping::discard"
    );
    // SAFETY: advice that never changes contents.
    let r = unsafe { crate::raw::madvise(addr as *mut libc::c_void, len, advice.raw()) };
    check(r)
        .map(|_| ())
        .map_err(|errno| MmError::Advise { advice, len, errno })
}

/// Runs a read/write-style call until it is not interrupted by a signal.
fn retry_eintr(mut call: impl FnMut() -> libc::ssize_t) -> Result<usize, Errno> {
    loop {
        match check_size(call()) {
            Err(e) if e.is_interrupted() => continue,
            other => return other,
        }
    }
}

/// Bit j set where byte j (in memory order) of the XOR `d` of two words
/// read with `from_ne_bytes` is non-zero.
fn byte_mask(d: u64) -> u32 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // High bit of each non-zero byte, gathered into one byte.
    let hi = (((d & LOW7) + LOW7) | d) & HIGHS;
    let m = ((hi >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32;
    if cfg!(target_endian = "big") {
        m.reverse_bits() >> 24
    } else {
        m
    }
}
