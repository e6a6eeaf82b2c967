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

/// Ranges per `process_madvise` call of [`Mapping::discard_ranges`] (on the
/// stack: a fault handler on a small alternate stack may evict).
pub const DISCARD_VECTOR: usize = 32;
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

impl Mapping {
    /// Maps `len` bytes of private anonymous memory.
    pub fn anonymous(len: usize, opts: &MapOptions) -> Result<(Mapping, UserAccess), MmError> {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let mut page_size = base_page_size();
        if let Some(h) = opts.huge {
            flags |= libc::MAP_HUGETLB | h.mmap_flag();
            page_size = h.bytes();
        }
        let map = Self::map(len, page_size, flags, None, 0, opts)?;
        let user = UserAccess {
            addr: map.addr.as_ptr() as usize,
        };
        Ok((map, user))
    }

    /// Replaces whatever is mapped at `[addr, addr + len)` with fresh
    /// private anonymous memory (zeros) and owns it from now on (it is
    /// unmapped when the `Mapping` drops).
    ///
    /// # Safety
    /// The range must be memory nothing else relies on the old contents of
    /// (the caller saved what it needs), and nothing else may unmap it: e.g.
    /// a program's `.bss` taken over before its code runs.
    pub unsafe fn take_over(addr: usize, len: usize) -> Result<(Mapping, UserAccess), MmError> {
        let page = base_page_size();
        if addr % page != 0 || len % page != 0 || len == 0 {
            return Err(MmError::BadLength { len, unit: page });
        }
        // SAFETY: the caller gives up the old contents of the range.
        let p = unsafe {
            crate::raw::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MmError::Map {
                len,
                errno: Errno::last(),
            });
        }
        let map = Mapping {
            addr: NonNull::new(p as *mut u8).expect("mmap returned null"),
            len,
            page_size: page,
            dontfork_generation: None,
            shared: false,
            kept_unlocked: true,
        };
        crate::locks::record(addr, len, None);
        Ok((map, UserAccess { addr }))
    }

    /// Reserves `len` bytes of address space aligned to `align`, with no
    /// access and no memory behind it (`PROT_NONE`, `MAP_NORESERVE`); parts
    /// become memory with [`Mapping::replace_private`] or
    /// [`Mapping::replace_huge`].
    pub fn reserve(len: usize, align: usize) -> Result<(Mapping, UserAccess), MmError> {
        let opts = MapOptions {
            noreserve: true,
            align,
            ..Default::default()
        };
        let map = Self::map(
            len,
            base_page_size(),
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            None,
            0,
            &opts,
        )?;
        map.protect(0, len, Protection::None)?;
        let user = UserAccess {
            addr: map.addr.as_ptr() as usize,
        };
        Ok((map, user))
    }

    /// Maps `len` bytes of `fd` from `offset`, shared (`MAP_SHARED`).
    ///
    /// `page_size` is the granule of the file's pages (4 KiB for memfd and
    /// regular files, the huge page size for hugetlbfs files).
    pub fn shared(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        page_size: usize,
        opts: &MapOptions,
    ) -> Result<(Mapping, UserAccess), MmError> {
        let map = Self::map(len, page_size, libc::MAP_SHARED, Some(fd), offset, opts)?;
        let user = UserAccess {
            addr: map.addr.as_ptr() as usize,
        };
        Ok((map, user))
    }

    /// Maps `len` bytes of `fd` from `offset`, shared, at exactly `addr`
    /// (`MAP_FIXED_NOREPLACE`): how a process attaching to a named team
    /// region gets it at the address the other members use. Fails with
    /// `EEXIST` if anything is mapped there already.
    pub fn shared_at(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        page_size: usize,
        addr: usize,
    ) -> Result<(Mapping, UserAccess), MmError> {
        if len == 0 || len % page_size != 0 || addr == 0 {
            return Err(MmError::BadLength { len, unit: page_size });
        }
        let p = Self::map_at(
            addr,
            len,
            page_size,
            libc::MAP_SHARED,
            libc::PROT_READ | libc::PROT_WRITE,
            fd.as_raw_fd(),
            offset,
        )?;
        let map = Mapping {
            addr: NonNull::new(p).expect("mmap returned null"),
            len,
            page_size,
            dontfork_generation: None,
            shared: true,
            kept_unlocked: false,
        };
        let user = UserAccess { addr };
        Ok((map, user))
    }

    fn map(
        len: usize,
        page_size: usize,
        mut flags: libc::c_int,
        fd: Option<BorrowedFd<'_>>,
        offset: u64,
        opts: &MapOptions,
    ) -> Result<Mapping, MmError> {
        if len == 0 || len % page_size != 0 {
            return Err(MmError::BadLength { len, unit: page_size });
        }
        if opts.noreserve {
            flags |= libc::MAP_NORESERVE;
        }
        if opts.populate {
            flags |= libc::MAP_POPULATE;
        }
        let raw_fd = fd.map_or(-1, |f| f.as_raw_fd());
        let align = opts.align.max(page_size);
        let prot = if opts.read_only {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        // After mlockall(MCL_FUTURE) the kernel populates and locks every
        // new accessible mapping: a tiered region would sit in RSS whole,
        // outside its budget, and could not be evicted. Mapped PROT_NONE
        // (never populated), unlocked, then opened, it stays out of the
        // lock (issue 20.4). MAP_POPULATE mappings want their pages.
        let keep_unlocked = !opts.populate;
        let final_prot = prot;
        let prot = if keep_unlocked { libc::PROT_NONE } else { prot };
        let addr = if opts.at != 0 {
            Self::map_at(opts.at, len, page_size, flags, prot, raw_fd, offset)?
        } else if align > page_size {
            Self::map_aligned(len, align, flags, prot, raw_fd, offset)?
        } else {
            // SAFETY: a fresh mapping at a kernel-chosen address touches no
            // existing memory; the result is checked below.
            let p = unsafe {
                crate::raw::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    flags,
                    raw_fd,
                    offset as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(MmError::Map {
                    len,
                    errno: Errno::last(),
                });
            }
            p as *mut u8
        };
        let mut map = Mapping {
            addr: NonNull::new(addr).expect("mmap returned null"),
            len,
            page_size,
            dontfork_generation: None,
            shared: fd.is_some() && flags & libc::MAP_SHARED != 0,
            kept_unlocked: keep_unlocked,
        };
        if keep_unlocked {
            // SAFETY: our fresh mapping; munlock changes no contents (it
            // fails harmlessly with nothing locked, or without the right
            // to lock, which then locked nothing either).
            unsafe { libc::munlock(addr.cast(), len) };
            // SAFETY: our fresh mapping, nothing in it yet.
            let r = unsafe { crate::raw::mprotect(addr.cast(), len, final_prot) };
            check(r).map_err(|errno| MmError::Protect { len, errno })?;
        }
        if opts.dontfork {
            map.advise(0, len, Advice::DontFork)?;
            map.dontfork_generation = Some(crate::thread::fork_generation());
        }
        if keep_unlocked {
            crate::locks::record(map.addr(), len, map.dontfork_generation);
        }
        Ok(map)
    }

    /// Maps at exactly `at` (MAP_FIXED_NOREPLACE: never over an existing
    /// mapping).
    fn map_at(
        at: usize,
        len: usize,
        page_size: usize,
        flags: libc::c_int,
        prot: libc::c_int,
        raw_fd: libc::c_int,
        offset: u64,
    ) -> Result<*mut u8, MmError> {
        if at % page_size != 0 {
            return Err(MmError::BadLength {
                len: at,
                unit: page_size,
            });
        }
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping;
        // the result is checked below.
        let p = unsafe {
            crate::raw::mmap(
                at as *mut libc::c_void,
                len,
                prot,
                flags | libc::MAP_FIXED_NOREPLACE,
                raw_fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MmError::Map {
                len,
                errno: Errno::last(),
            });
        }
        if p as usize != at {
            // Kernels before 4.17 take the flag as a hint.
            // SAFETY: the mapping just made, at the address returned.
            unsafe { crate::raw::munmap(p, len) };
            return Err(MmError::Map {
                len,
                errno: Errno(libc::EEXIST),
            });
        }
        Ok(p.cast())
    }

    /// Reserves `len + align` bytes of address space with PROT_NONE, then maps
    /// the aligned part over it with MAP_FIXED and trims the rest.
    fn map_aligned(
        len: usize,
        align: usize,
        flags: libc::c_int,
        prot: libc::c_int,
        raw_fd: libc::c_int,
        offset: u64,
    ) -> Result<*mut u8, MmError> {
        let span = len + align;
        // SAFETY: a fresh PROT_NONE reservation at a kernel-chosen address.
        let res = unsafe {
            crate::raw::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if res == libc::MAP_FAILED {
            return Err(MmError::Map {
                len: span,
                errno: Errno::last(),
            });
        }
        let base = res as usize;
        let start = (base + align - 1) & !(align - 1);
        // SAFETY: [start, start+len) lies inside the reservation made above,
        // which no one else knows about, so MAP_FIXED replaces only our own
        // PROT_NONE pages.
        let p = unsafe {
            crate::raw::mmap(
                start as *mut libc::c_void,
                len,
                prot,
                flags | libc::MAP_FIXED,
                raw_fd,
                offset as libc::off_t,
            )
        };
        let errno = Errno::last();
        // SAFETY: both trimmed pieces lie inside our reservation and outside
        // [start, start+len).
        unsafe {
            if start > base {
                crate::raw::munmap(base as *mut libc::c_void, start - base);
            }
            let end = start + len;
            if base + span > end {
                crate::raw::munmap(end as *mut libc::c_void, base + span - end);
            }
        }
        if p == libc::MAP_FAILED {
            // SAFETY: the middle of our own reservation.
            unsafe { crate::raw::munmap(start as *mut libc::c_void, len) };
            return Err(MmError::Map { len, errno });
        }
        Ok(p as *mut u8)
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.addr.as_ptr() as usize
    }

    /// Start as a raw pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: mappings are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Granule of the backing pages.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Whether `addr` lies inside the mapping.
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.addr() && addr < self.addr() + self.len
    }

    fn check_range(&self, offset: usize, len: usize) {
        assert!(
            offset <= self.len && len <= self.len - offset,
            "range {offset}+{len} outside mapping of {} bytes",
            self.len
        );
    }

    /// A view of `len` bytes from `offset`, usable as a copy source.
    ///
    /// Panics if the range leaves the mapping.
    pub fn range(&self, offset: usize, len: usize) -> MemRange<'_> {
        self.check_range(offset, len);
        MemRange {
            addr: self.addr() + offset,
            len,
            _map: PhantomData,
        }
    }

    /// A typed mutable view of the whole mapping.
    ///
    /// The token proves this is the only typed view; the engine's raw copies
    /// follow the page protocol of the crate that owns the mapping.
    pub fn user_slice_mut<'a, T: bytemuck::Pod>(&'a self, user: &'a mut UserAccess) -> &'a mut [T] {
        assert_eq!(user.addr, self.addr(), "UserAccess of another mapping");
        assert!(
            std::mem::align_of::<T>() <= self.page_size && self.len % std::mem::size_of::<T>().max(1) == 0,
            "type does not tile the mapping"
        );
        // SAFETY: the range is mapped read-write for the lifetime of &self,
        // aligned to a page, and a multiple of size_of::<T>(); T is Pod so any
        // bytes are a valid T; the unique &mut UserAccess makes this the only
        // typed reference into the mapping while it lives.
        unsafe {
            std::slice::from_raw_parts_mut(self.as_ptr().cast::<T>(), self.len / std::mem::size_of::<T>())
        }
    }

    /// The mapping as shared 64-bit atomics, for concurrent application use.
    pub fn user_atomics<'a>(&'a self, user: &'a UserAccess) -> &'a [AtomicU64] {
        assert_eq!(user.addr, self.addr(), "UserAccess of another mapping");
        // SAFETY: mapped, page aligned (so 8-byte aligned), length a multiple
        // of the page size; atomics tolerate shared mutation, and no &mut view
        // can coexist because user_slice_mut needs &mut UserAccess.
        unsafe { std::slice::from_raw_parts(self.as_ptr().cast::<AtomicU64>(), self.len / 8) }
    }

    /// Copies `src` into the mapping at `offset`.
    pub fn copy_in(&self, offset: usize, src: MemRange<'_>) {
        self.check_range(offset, src.len);
        // SAFETY: both ranges are mapped (checked bounds, live borrows);
        // `ptr::copy` allows them to overlap. Concurrent writers to these
        // bytes are excluded by the caller's page protocol (the page is
        // write-protected or unmapped).
        unsafe { std::ptr::copy(src.addr as *const u8, self.as_ptr().add(offset), src.len) }
    }

    /// `copy_in` with non-temporal stores where both sides are 64-byte
    /// aligned whole lines (x86-64): the destination lines are written
    /// without being read first, a third less memory traffic for data that
    /// goes cold (a far store's copy of an evicted page: ~0.45 us instead of
    /// ~0.65 us per cold 4 KiB page here, runs of 16 pages and more). Ends
    /// with a store fence, so that the data is visible before whatever the
    /// caller publishes next (non-temporal stores are not ordered by a
    /// release store alone).
    pub fn copy_in_streaming(&self, offset: usize, src: MemRange<'_>) {
        self.check_range(offset, src.len);
        #[cfg(target_arch = "x86_64")]
        {
            let dst = self.addr() + offset;
            if (src.len | src.addr | dst) % 64 == 0 {
                // SAFETY: both ranges are mapped (checked bounds, live
                // borrows) and 64-byte aligned, whole lines; aligned 16-byte
                // loads and streaming stores stay inside them. SSE2 is part
                // of x86-64. Writers are excluded as for `copy_in`; the
                // ranges of two mappings do not overlap.
                unsafe { stream_lines(dst as *mut u8, src.addr as *const u8, src.len) };
                return;
            }
        }
        self.copy_in(offset, src)
    }

    /// Copies the byte runs `(offset, len)` of `src` into the mapping at
    /// `offset + run offset`, and nothing else: how a diff is applied.
    /// Runs are checked once against `src`, so many short runs (a diff of
    /// words whose high bytes did not change) cost a few instructions each.
    pub fn copy_runs(&self, offset: usize, src: MemRange<'_>, runs: &[(u32, u32)]) {
        self.check_range(offset, src.len);
        assert!(
            runs.iter().all(|&(o, l)| (o as usize) + (l as usize) <= src.len),
            "run outside the source range"
        );
        let dst = self.as_ptr().wrapping_add(offset);
        for &(o, l) in runs {
            let (o, l) = (o as usize, l as usize);
            // SAFETY: every run lies inside src (checked above) and inside
            // [offset, offset + src.len) of this mapping (checked above);
            // both are mapped; writers of these bytes are excluded by the
            // caller's protocol (the SVM applies its own diff); the ranges do
            // not overlap (src is another mapping's page).
            unsafe {
                let (from, to) = ((src.addr as *const u8).add(o), dst.add(o));
                if l <= 8 {
                    for k in 0..l {
                        *to.add(k) = *from.add(k);
                    }
                } else {
                    std::ptr::copy_nonoverlapping(from, to, l);
                }
            }
        }
    }

    /// Writes into the mapping at `offset` exactly the bytes where `cur`
    /// differs from `twin` (same length), taken from `cur`: [`MemRange::diff_runs`]
    /// and [`Mapping::copy_runs`] in one pass, without the list of runs.
    /// Returns the bytes written and the number of byte runs they form.
    pub fn apply_diff(&self, offset: usize, cur: MemRange<'_>, twin: MemRange<'_>) -> (usize, usize) {
        assert_eq!(cur.len, twin.len, "diff of ranges of different lengths");
        self.check_range(offset, cur.len);
        // SAFETY: cur and twin are mapped and readable for their lifetimes
        // (the caller's protocol keeps writers out: its own private copy and
        // twin); u8 accepts any contents.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(cur.addr as *const u8, cur.len),
                std::slice::from_raw_parts(twin.addr as *const u8, twin.len),
            )
        };
        let dst = self.as_ptr().wrapping_add(offset);
        let (mut bytes, mut runs, mut run_end) = (0usize, 0usize, usize::MAX);
        let mut note = |start: usize, end: usize| {
            if start != run_end {
                runs += 1;
            }
            run_end = end;
        };
        for (k, (x, y)) in a.chunks_exact(8).zip(b.chunks_exact(8)).enumerate() {
            let xv = u64::from_ne_bytes(x.try_into().expect("8 bytes"));
            let d = xv ^ u64::from_ne_bytes(y.try_into().expect("8 bytes"));
            if d == 0 {
                continue;
            }
            let m = byte_mask(d);
            bytes += m.count_ones() as usize;
            if m == 0xff {
                note(k * 8, k * 8 + 8);
                // SAFETY: k * 8 + 8 <= cur.len, inside the checked range of
                // this mapping; writers excluded by the caller's protocol.
                unsafe { std::ptr::write_unaligned(dst.add(k * 8).cast::<u64>(), xv) };
                continue;
            }
            for (j, &byte) in x.iter().enumerate() {
                if m & (1 << j) != 0 {
                    note(k * 8 + j, k * 8 + j + 1);
                    // SAFETY: as above, one byte inside the range.
                    unsafe { *dst.add(k * 8 + j) = byte };
                }
            }
        }
        for i in (a.len() / 8) * 8..a.len() {
            if a[i] != b[i] {
                bytes += 1;
                note(i, i + 1);
                // SAFETY: as above.
                unsafe { *dst.add(i) = a[i] };
            }
        }
        (bytes, runs)
    }

    /// Copies bytes from the mapping into `dst`.
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        self.check_range(offset, dst.len());
        // SAFETY: source range checked and mapped; dst is a Rust slice
        // distinct from any mapping.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) }
    }

    /// Copies `src` (ordinary memory) into the mapping at `offset`.
    pub fn write_bytes(&self, offset: usize, src: &[u8]) {
        self.copy_in(offset, MemRange::from_bytes(src));
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) {
        self.check_range(offset, len);
        // SAFETY: range checked and mapped; writers excluded as in copy_in.
        unsafe { std::ptr::write_bytes(self.as_ptr().add(offset), byte, len) }
    }

    /// `pread`s `len` bytes of `fd` at `file_offset` into the mapping.
    ///
    /// Returns the bytes read (short at end of file).
    pub fn pread(
        &self,
        fd: BorrowedFd<'_>,
        offset: usize,
        len: usize,
        file_offset: u64,
    ) -> Result<usize, Errno> {
        self.check_range(offset, len);
        retry_eintr(|| {
            // SAFETY: the destination range is mapped writable and in bounds.
            // A raw system call: glibc's pread is a cancellation point, and
            // this runs inside fault services; one the kernel-access filter
            // lets through.
            unsafe {
                crate::seccomp::untrapped_syscall(
                    libc::SYS_pread64,
                    [
                        fd.as_raw_fd() as u64,
                        self.as_ptr().add(offset) as u64,
                        len as u64,
                        file_offset,
                        0,
                        0,
                    ],
                ) as libc::ssize_t
            }
        })
    }

    /// `pwrite`s `len` bytes of the mapping at `offset` to `fd` at `file_offset`.
    pub fn pwrite(
        &self,
        fd: BorrowedFd<'_>,
        offset: usize,
        len: usize,
        file_offset: u64,
    ) -> Result<usize, Errno> {
        self.range(offset, len).pwrite_to(fd, file_offset)
    }

    /// Gives non-destructive advice about a range.
    pub fn advise(&self, offset: usize, len: usize, advice: Advice) -> Result<(), MmError> {
        assert!(
            !matches!(advice, Advice::DontNeed | Advice::Remove),
            "destructive advice goes through discard()"
        );
        self.madvise(offset, len, advice)
    }

    fn madvise(&self, offset: usize, len: usize, advice: Advice) -> Result<(), MmError> {
        self.check_range(offset, len);
        // SAFETY: the range is inside our mapping; the advice kinds accepted
        // here either change no contents or are discard(), whose callers own
        // the contents.
        let call = || unsafe { crate::raw::madvise(self.as_ptr().add(offset).cast(), len, advice.raw()) };
        let mut r = call();
        // A memory lock (a raw mlockall the preload library did not see)
        // makes the kernel refuse to drop pages: take it off the mapping
        // and try again (see crate::locks).
        if r != 0
            && self.kept_unlocked
            && matches!(advice, Advice::DontNeed | Advice::Remove)
            && Errno::last().raw() == libc::EINVAL
            && crate::locks::munlock(self.addr(), self.len)
        {
            r = call();
        }
        check(r)
            .map(|_| ())
            .map_err(|errno| MmError::Advise { advice, len, errno })
    }

    /// Drops the pages of a range (`MADV_DONTNEED`; `MADV_REMOVE` for shared
    /// mappings): private anonymous memory reads back as zeros, or faults to
    /// the userfaultfd handler if the range is registered for missing faults.
    ///
    /// # Safety
    /// No Rust reference may rely on the discarded contents: the caller owns
    /// the bytes (a staging buffer) or has saved them and will restore them on
    /// the next fault (a registered region).
    pub unsafe fn discard(&self, offset: usize, len: usize, shared: bool) -> Result<(), MmError> {
        self.madvise(
            offset,
            len,
            if shared { Advice::Remove } else { Advice::DontNeed },
        )
    }

    /// [`Mapping::discard`] of several ranges of a private mapping at once,
    /// `(offset, len)` each: one `process_madvise(2)` on this process
    /// (`PIDFD_SELF`, Linux 6.13+) per [`DISCARD_VECTOR`] ranges, which since
    /// Linux 6.16 flushes the TLB once for all of them instead of once per
    /// range: one shootdown of the other CPUs per batch of victims, not per
    /// victim. Where the kernel refuses the call (older kernels), one
    /// `madvise` per range, as [`Mapping::discard`]. Returns the system
    /// calls made.
    ///
    /// # Safety
    /// As for [`Mapping::discard`], for every range.
    pub unsafe fn discard_ranges(&self, ranges: &[(usize, usize)]) -> Result<usize, MmError> {
        let mut calls = 0;
        for chunk in ranges.chunks(DISCARD_VECTOR) {
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; DISCARD_VECTOR];
            let mut total = 0;
            for (v, &(offset, len)) in iov.iter_mut().zip(chunk) {
                self.check_range(offset, len);
                // SAFETY: inside the mapping (checked above).
                v.iov_base = unsafe { self.as_ptr().add(offset) }.cast();
                v.iov_len = len;
                total += len;
            }
            if PROCESS_MADVISE.load(Ordering::Relaxed) != NO {
                // SAFETY: every range lies in this mapping and the caller
                // owns its contents (the function's contract).
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_process_madvise,
                        PIDFD_SELF_THREAD_GROUP,
                        iov.as_ptr(),
                        chunk.len(),
                        libc::MADV_DONTNEED,
                        0,
                    )
                };
                calls += 1;
                if r >= 0 && r as usize == total {
                    // Written once: every eviction batch of every thread
                    // passes here.
                    if PROCESS_MADVISE.load(Ordering::Relaxed) != YES {
                        PROCESS_MADVISE.store(YES, Ordering::Relaxed);
                    }
                    continue;
                }
                // Refused as a whole (an older kernel: EINVAL for the
                // advice, EBADF for PIDFD_SELF): never again.
                let e = Errno::last().raw();
                if r < 0
                    && PROCESS_MADVISE.load(Ordering::Relaxed) == UNKNOWN
                    && matches!(e, libc::EINVAL | libc::EBADF | libc::ENOSYS | libc::EPERM)
                {
                    PROCESS_MADVISE.store(NO, Ordering::Relaxed);
                }
                // Otherwise a part was done: discarding it again is harmless
                // (the caller owns the ranges; nothing refills them).
            }
            for &(offset, len) in chunk {
                // SAFETY: forwarded from the caller.
                unsafe { self.discard(offset, len, false)? };
                calls += 1;
            }
        }
        Ok(calls)
    }

    /// Changes the protection of a range.
    ///
    /// Making a range read-only while the application writes it is sound: the
    /// writer takes a SIGSEGV, which the caller must be prepared to handle.
    pub fn protect(&self, offset: usize, len: usize, prot: Protection) -> Result<(), MmError> {
        self.check_range(offset, len);
        // SAFETY: the range is inside our mapping; changing protection never
        // changes contents.
        let r = unsafe { crate::raw::mprotect(self.as_ptr().add(offset).cast(), len, prot.raw()) };
        check(r)
            .map(|_| ())
            .map_err(|errno| MmError::Protect { len, errno })
    }

    /// Makes `[offset, offset + len)` readable and writable: a part of a
    /// mapping kept `PROT_NONE` until it is needed (so that a raw
    /// `mlockall` system call does not populate it, see [`crate::locks`]).
    /// The lock such a call left on the part is taken off first: made
    /// writable while locked, a private range would be populated whole.
    pub fn open(&self, offset: usize, len: usize) -> Result<(), MmError> {
        self.check_range(offset, len);
        if self.kept_unlocked {
            crate::locks::munlock(self.addr() + offset, len);
        }
        self.protect(offset, len, Protection::ReadWrite)
    }

    /// Grows or shrinks the mapping in place or by moving it (`mremap` with
    /// `MREMAP_MAYMOVE`). The user token follows the mapping.
    pub fn remap(&mut self, user: &mut UserAccess, new_len: usize) -> Result<(), MmError> {
        assert_eq!(user.addr, self.addr(), "UserAccess of another mapping");
        if new_len == 0 || new_len % self.page_size != 0 {
            return Err(MmError::BadLength {
                len: new_len,
                unit: self.page_size,
            });
        }
        // SAFETY: we own the mapping exclusively (&mut self, &mut user), so no
        // reference into it survives the move.
        let p = unsafe {
            crate::raw::mremap(
                self.as_ptr().cast(),
                self.len,
                new_len,
                libc::MREMAP_MAYMOVE,
                std::ptr::null_mut(),
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MmError::Remap {
                new_len,
                errno: Errno::last(),
            });
        }
        if self.kept_unlocked {
            crate::locks::forget(self.addr());
            crate::locks::record(p as usize, new_len, self.dontfork_generation);
        }
        self.addr = NonNull::new(p.cast()).expect("mremap returned null");
        self.len = new_len;
        user.addr = self.addr();
        Ok(())
    }
}

impl Mapping {
    /// Moves the pages of `len` bytes at `offset` over `dst` at `dst_offset`
    /// in one `mremap(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP)`.
    ///
    /// Whatever `dst` mapped there is unmapped and replaced by this
    /// mapping's pages (and protection) under the address-space lock, so a
    /// concurrent reader of `dst` sees either the old or the new page, never
    /// a hole; one TLB flush covers the whole range. This mapping keeps its
    /// range (`DONTUNMAP`): its pages are gone and read back as zeros, so no
    /// hole appears that another `mmap` could take. Ranges moved out of one
    /// anonymous mapping into adjacent places of `dst` merge into one VMA
    /// again, because they keep their linear page offsets.
    ///
    /// The bytes `dst` shows change to this mapping's bytes; callers use it
    /// where both hold the same data (the overshadow switch), so references
    /// into `dst` stay valid and see no change of contents. Kernel 5.13 or
    /// later (`DONTUNMAP` of any private anonymous mapping).
    pub fn move_pages_to(
        &self,
        offset: usize,
        len: usize,
        dst: &Mapping,
        dst_offset: usize,
    ) -> Result<(), MmError> {
        self.check_range(offset, len);
        dst.check_range(dst_offset, len);
        // SAFETY: both ranges are inside mappings we own, so MREMAP_FIXED
        // replaces only pages of `dst` (never memory of someone else) and
        // DONTUNMAP leaves our own range mapped; the contents `dst` shows
        // change only to equal bytes (caller's protocol, see above).
        let p = unsafe {
            crate::raw::mremap(
                self.as_ptr().add(offset).cast(),
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | crate::uapi::MREMAP_DONTUNMAP,
                dst.as_ptr().add(dst_offset).cast::<libc::c_void>(),
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MmError::Remap {
                new_len: len,
                errno: Errno::last(),
            });
        }
        Ok(())
    }

    /// Drops the page-table entries of a shared file mapping
    /// (`MADV_DONTNEED`): the data stays in the file (and page cache) and
    /// faults back in on the next access, but the pages are no longer
    /// mapped here, so `posix_fadvise(DONTNEED)` can drop them from the
    /// cache. Panics on a private mapping, where this would lose data.
    pub fn unmap_shared_pages(&self, offset: usize, len: usize) -> Result<(), MmError> {
        assert!(self.shared, "unmap_shared_pages on a private mapping");
        self.madvise(offset, len, Advice::DontNeed)
    }

    /// Locks a range in memory (`mlock`): its pages are faulted in now and
    /// never swapped out. The lock ends with the mapping.
    pub fn lock(&self, offset: usize, len: usize) -> Result<(), MmError> {
        self.check_range(offset, len);
        // SAFETY: the range is inside our mapping; locking changes no contents.
        let r = unsafe { crate::raw::mlock(self.as_ptr().add(offset).cast(), len) };
        check(r).map(|_| ()).map_err(|errno| MmError::Lock { len, errno })
    }

    /// Faults in a range for writing (`MADV_POPULATE_WRITE`, kernel 5.14):
    /// one call instead of one page fault per page.
    pub fn populate_write(&self, offset: usize, len: usize) -> Result<(), MmError> {
        self.check_range(offset, len);
        // SAFETY: the range is inside our mapping; populating changes no
        // contents (missing pages read as zeros before and after).
        let r = unsafe {
            crate::raw::madvise(
                self.as_ptr().add(offset).cast(),
                len,
                crate::uapi::MADV_POPULATE_WRITE,
            )
        };
        check(r).map(|_| ()).map_err(|errno| MmError::Advise {
            advice: Advice::WillNeed,
            len,
            errno,
        })
    }
}

/// Replacing part of a mapping in place, for shared virtual memory (paper
/// 5): one process maps a page of the SVM range either as a view of the
/// shared home file (SPM mode) or as a private cached copy (DSM mode).
impl Mapping {
    fn replace(
        &self,
        offset: usize,
        len: usize,
        prot: Protection,
        flags: libc::c_int,
        fd: libc::c_int,
        file_offset: u64,
    ) -> Result<(), MmError> {
        self.check_range(offset, len);
        if len == 0 || len % self.page_size != 0 || offset % self.page_size != 0 {
            return Err(MmError::BadLength {
                len,
                unit: self.page_size,
            });
        }
        // Private memory made accessible stays out of a program's
        // mlockall(MCL_FUTURE), as in `map` (the huge heap's fallback
        // chunks). Hugetlb mappings are never locked, PROT_NONE ones never
        // populated; shared ones show data in use (the SVM's home file).
        let out_of_lock = self.kept_unlocked
            && flags & (libc::MAP_HUGETLB | libc::MAP_SHARED) == 0
            && prot != Protection::None;
        let first_prot = if out_of_lock { libc::PROT_NONE } else { prot.raw() };
        // SAFETY: the range lies inside our own mapping (checked above), so
        // MAP_FIXED replaces only our pages, never memory of someone else.
        // The bytes the range shows change; callers use it under a page
        // protocol that says what the new bytes are (the SVM's modes), as
        // with `move_pages_to`.
        let p = unsafe {
            crate::raw::mmap(
                self.as_ptr().add(offset).cast(),
                len,
                first_prot,
                flags | libc::MAP_FIXED,
                fd,
                file_offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MmError::Map {
                len,
                errno: Errno::last(),
            });
        }
        if out_of_lock {
            crate::locks::munlock(p as usize, len);
            self.protect(offset, len, prot)?;
        }
        Ok(())
    }

    /// Replaces `len` bytes at `offset` with fresh private anonymous memory
    /// (zeros) with protection `prot` (`MAP_PRIVATE | MAP_ANONYMOUS |
    /// MAP_FIXED`).
    pub fn replace_private(&self, offset: usize, len: usize, prot: Protection) -> Result<(), MmError> {
        self.replace(offset, len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    }

    /// Replaces `len` bytes at `offset` with private hugetlb memory of
    /// `size` pages (zeros). The pages are reserved from the pool now (no
    /// `MAP_NORESERVE`): a short pool fails here with `ENOMEM`, never later
    /// with SIGBUS at a fault. `offset` and `len` must be multiples of the
    /// huge page size.
    pub fn replace_huge(&self, offset: usize, len: usize, size: HugePageSize) -> Result<(), MmError> {
        if offset % size.bytes() != 0 || len % size.bytes() != 0 || (self.addr() + offset) % size.bytes() != 0
        {
            return Err(MmError::BadLength {
                len,
                unit: size.bytes(),
            });
        }
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | size.mmap_flag();
        self.replace(offset, len, Protection::ReadWrite, flags, -1, 0)
    }

    /// Makes `[offset, offset + len)` of private anonymous memory read as
    /// zeros: whole `page`-sized pages are dropped (`MADV_DONTNEED`, which
    /// gives hugetlb pages back to the pool), the rest is overwritten.
    pub fn zero(&self, offset: usize, len: usize, page: usize) {
        self.check_range(offset, len);
        let start = self.addr() + offset;
        let a = start.next_multiple_of(page).min(start + len);
        let b = ((start + len) / page * page).max(a);
        let dropped = b > a && self.madvise(a - self.addr(), b - a, Advice::DontNeed).is_ok();
        if dropped {
            self.fill(offset, a - start, 0);
            self.fill(b - self.addr(), start + len - b, 0);
        } else {
            self.fill(offset, len, 0);
        }
    }

    /// Replaces `len` bytes at `offset` with a shared view of `fd` from
    /// `file_offset` (`MAP_SHARED | MAP_FIXED`).
    pub fn replace_shared(
        &self,
        offset: usize,
        len: usize,
        fd: BorrowedFd<'_>,
        file_offset: u64,
        prot: Protection,
    ) -> Result<(), MmError> {
        self.replace(offset, len, prot, libc::MAP_SHARED, fd.as_raw_fd(), file_offset)
    }

    /// The mapping as shared 32-bit atomics (see [`Mapping::user_atomics`]).
    pub fn user_atomics_u32<'a>(&'a self, user: &'a UserAccess) -> &'a [AtomicU32] {
        assert_eq!(user.addr, self.addr(), "UserAccess of another mapping");
        // SAFETY: as in user_atomics: mapped, page aligned, a multiple of 4
        // bytes long; atomics tolerate shared mutation.
        unsafe { std::slice::from_raw_parts(self.as_ptr().cast::<AtomicU32>(), self.len / 4) }
    }

    /// The mapping as shared byte atomics (see [`Mapping::user_atomics`]).
    pub fn user_atomics_u8<'a>(&'a self, user: &'a UserAccess) -> &'a [AtomicU8] {
        assert_eq!(user.addr, self.addr(), "UserAccess of another mapping");
        // SAFETY: as in user_atomics; any address is aligned for AtomicU8.
        unsafe { std::slice::from_raw_parts(self.as_ptr().cast::<AtomicU8>(), self.len) }
    }
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

/// Runs a read/write-style call until it is not interrupted by a signal.
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

/// A borrowed byte range of mapped memory, used as the source of a copy.
#[derive(Clone, Copy, Debug)]
pub struct MemRange<'a> {
    addr: usize,
    len: usize,
    _map: PhantomData<&'a Mapping>,
}

impl<'a> MemRange<'a> {
    /// A range over ordinary Rust memory.
    pub fn from_bytes(bytes: &'a [u8]) -> MemRange<'a> {
        MemRange {
            addr: bytes.as_ptr() as usize,
            len: bytes.len(),
            _map: PhantomData,
        }
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A sub-range.
    pub fn sub(&self, offset: usize, len: usize) -> MemRange<'a> {
        assert!(offset <= self.len && len <= self.len - offset);
        MemRange {
            addr: self.addr + offset,
            len,
            _map: PhantomData,
        }
    }

    /// `pwrite`s the range to `fd` at `file_offset`; returns bytes written.
    pub fn pwrite_to(&self, fd: BorrowedFd<'_>, file_offset: u64) -> Result<usize, Errno> {
        retry_eintr(|| {
            // SAFETY: the source range is mapped readable for 'a. A raw
            // system call: glibc's pwrite is a cancellation point, and the
            // source may be a region page this thread owns (write-back), so
            // the kernel-access filter must let it through.
            unsafe {
                crate::seccomp::untrapped_syscall(
                    libc::SYS_pwrite64,
                    [
                        fd.as_raw_fd() as u64,
                        self.addr as u64,
                        self.len as u64,
                        file_offset,
                        0,
                        0,
                    ],
                ) as libc::ssize_t
            }
        })
    }

    /// Copies the bytes out.
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len);
        // SAFETY: the range is mapped for 'a; dst is distinct Rust memory.
        unsafe { std::ptr::copy_nonoverlapping(self.addr as *const u8, dst.as_mut_ptr(), self.len) }
    }

    /// Whether the bytes equal those of `other` (same length).
    pub fn same_bytes(&self, other: MemRange<'_>) -> bool {
        if self.len != other.len {
            return false;
        }
        // SAFETY: both ranges are mapped and readable for their lifetimes;
        // u8 accepts any contents; the caller's protocol keeps writers out.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(self.addr as *const u8, self.len),
                std::slice::from_raw_parts(other.addr as *const u8, other.len),
            )
        };
        // Not `a == b`: that calls libc's bcmp, and this runs on the fault
        // path (eviction's VERIFY check inside a SIGBUS handler), where a
        // first call's lazy binding and a sanitizer's interceptor overflowed
        // a PTHREAD_STACK_MIN thread's stack (test_signals under ASan). An
        // OR of XORs per 256 bytes vectorizes and calls nothing.
        a.chunks(256)
            .zip(b.chunks(256))
            .all(|(x, y)| x.iter().zip(y).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0)
    }

    /// The byte-exact runs where this range differs from `twin` (same
    /// length), as `(offset, len)` pairs appended to `out`; returns the
    /// bytes that differ. Words are compared first, so equal stretches cost
    /// one compare per 8 bytes; inside a differing word only the bytes that
    /// changed join a run, so applying the runs never writes a byte that was
    /// not changed here (multiple writers of one page, paper 5's diffs).
    pub fn diff_runs(&self, twin: MemRange<'_>, out: &mut Vec<(u32, u32)>) -> usize {
        assert_eq!(self.len, twin.len, "diff of ranges of different lengths");
        // SAFETY: both ranges are mapped and readable for their lifetimes;
        // u8 accepts any contents; the caller's protocol keeps writers out
        // (the SVM diffs its own private copy against its own twin).
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(self.addr as *const u8, self.len),
                std::slice::from_raw_parts(twin.addr as *const u8, twin.len),
            )
        };
        let mut run: Option<(usize, usize)> = None; // (start, end)
        let mut differ = 0;
        let mut push = |start: usize, end: usize, run: &mut Option<(usize, usize)>| match run {
            Some((_, e)) if *e == start => *e = end,
            _ => {
                if let Some((s, e)) = run.take() {
                    out.push((s as u32, (e - s) as u32));
                }
                *run = Some((start, end));
            }
        };
        let words = self.len / 8;
        for (k, (x, y)) in a.chunks_exact(8).zip(b.chunks_exact(8)).enumerate() {
            let d = u64::from_ne_bytes(x.try_into().expect("8 bytes"))
                ^ u64::from_ne_bytes(y.try_into().expect("8 bytes"));
            if d == 0 {
                continue;
            }
            let mut m = byte_mask(d);
            differ += m.count_ones() as usize;
            while m != 0 {
                let s = m.trailing_zeros();
                let len = (!(m >> s)).trailing_zeros();
                push(k * 8 + s as usize, k * 8 + (s + len) as usize, &mut run);
                m &= !(((1u32 << len) - 1) << s);
            }
        }
        for i in words * 8..self.len {
            if a[i] != b[i] {
                differ += 1;
                push(i, i + 1, &mut run);
            }
        }
        if let Some((s, e)) = run {
            out.push((s as u32, (e - s) as u32));
        }
        differ
    }

    /// Whether every byte is zero.
    pub fn is_zero(&self) -> bool {
        // SAFETY: the range is mapped for 'a and readable; reading it as u8 is
        // valid for any contents; no writer touches it (caller's protocol).
        let bytes = unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) };
        // An OR over each 512-byte chunk, without an early exit inside it,
        // vectorises (a byte-by-byte `all` does not: ~10x slower on a page).
        bytes.chunks(512).all(|c| c.iter().fold(0u8, |a, &b| a | b) == 0)
    }
}

/// Copies `len` bytes (a multiple of 64) from `src` to `dst`, both 64-byte
/// aligned, with non-temporal stores, then fences.
///
/// # Safety
/// Both ranges must be mapped, readable (`src`) and writable (`dst`) for
/// `len` bytes, 64-byte aligned, and must not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_lines(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_load_si128, _mm_sfence, _mm_stream_si128};
    let mut i = 0;
    while i < len {
        // SAFETY: i + 64 <= len (len is a multiple of 64); both pointers are
        // 16-byte aligned at every step (64-byte aligned bases); the caller
        // guarantees the ranges.
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b, c, e) = (
                _mm_load_si128(s),
                _mm_load_si128(s.add(1)),
                _mm_load_si128(s.add(2)),
                _mm_load_si128(s.add(3)),
            );
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        i += 64;
    }
    // SAFETY: a fence has no preconditions.
    unsafe { _mm_sfence() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_runs_are_byte_exact() {
        let mut a = vec![0u8; 4096];
        let b = a.clone();
        a[0] = 1;
        a[2] = 1; // byte 1 unchanged: two runs
        a[7] = 1;
        a[8] = 1; // across a word boundary: one run
        a[4095] = 9;
        for x in &mut a[64..80] {
            *x = 0xff; // two whole words
        }
        a[80] = 3;
        let mut out = Vec::new();
        let n = MemRange::from_bytes(&a).diff_runs(MemRange::from_bytes(&b), &mut out);
        assert_eq!(n, 22);
        assert_eq!(out, vec![(0, 1), (2, 1), (7, 2), (64, 17), (4095, 1)]);
        // Applying the runs to a third copy writes exactly those bytes.
        let (m, _) = Mapping::anonymous(4096, &MapOptions::default()).unwrap();
        m.fill(0, 4096, 0x55);
        m.copy_runs(0, MemRange::from_bytes(&a), &out);
        let mut got = vec![0u8; 4096];
        m.copy_out(0, &mut got);
        for (i, (&g, &w)) in got.iter().zip(&a).enumerate() {
            assert_eq!(g, if w != 0 { w } else { 0x55 }, "byte {i}");
        }
        out.clear();
        assert_eq!(
            MemRange::from_bytes(&b).diff_runs(MemRange::from_bytes(&b), &mut out),
            0
        );
        assert!(out.is_empty());
    }

    #[test]
    fn diff_runs_match_a_byte_by_byte_diff() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let b: Vec<u8> = (0..4096).map(|_| rnd() as u8).collect();
            let mut a = b.clone();
            for _ in 0..(rnd() % 300) {
                let i = (rnd() % 4096) as usize;
                a[i] = a[i].wrapping_add(1 + (rnd() % 255) as u8);
            }
            let mut want = Vec::new();
            for i in 0..4096 {
                if a[i] != b[i] {
                    match want.last_mut() {
                        Some((s, l)) if *s + *l == i as u32 => *l += 1,
                        _ => want.push((i as u32, 1u32)),
                    }
                }
            }
            let mut out = Vec::new();
            let n = MemRange::from_bytes(&a).diff_runs(MemRange::from_bytes(&b), &mut out);
            assert_eq!(out, want);
            assert_eq!(n, want.iter().map(|r| r.1 as usize).sum::<usize>());
            // The fused form writes the same bytes and counts the same.
            let (m, _) = Mapping::anonymous(4096, &MapOptions::default()).unwrap();
            m.write_bytes(0, &b);
            let (bytes, runs) = m.apply_diff(0, MemRange::from_bytes(&a), MemRange::from_bytes(&b));
            assert_eq!((bytes, runs), (n, want.len()));
            let mut got = vec![0u8; 4096];
            m.copy_out(0, &mut got);
            assert_eq!(got, a);
        }
    }

    #[test]
    fn replace_switches_between_shared_and_private() {
        let fd = crate::memfd::Memfd::create("svm-test", false).unwrap();
        fd.set_len(8192).unwrap();
        let (home, _) = Mapping::shared(fd.as_fd(), 0, 8192, 4096, &MapOptions::default()).unwrap();
        home.fill(0, 8192, 7);
        let (m, user) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
        m.replace_shared(0, 8192, fd.as_fd(), 0, Protection::ReadWrite)
            .unwrap();
        assert_eq!(
            m.user_atomics_u8(&user)[100].load(std::sync::atomic::Ordering::Relaxed),
            7
        );
        m.user_atomics_u8(&user)[5].store(9, std::sync::atomic::Ordering::Relaxed);
        let mut b = [0u8; 1];
        home.copy_out(5, &mut b);
        assert_eq!(b[0], 9);
        m.replace_private(4096, 4096, Protection::ReadWrite).unwrap();
        assert_eq!(
            m.user_atomics_u32(&user)[1024].load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        m.user_atomics_u8(&user)[4096].store(1, std::sync::atomic::Ordering::Relaxed);
        home.copy_out(4096, &mut b);
        assert_eq!(b[0], 7, "private page does not write through");
        assert!(m.replace_private(100, 4096, Protection::None).is_err());
    }

    #[test]
    fn anonymous_mapping_reads_zero_and_keeps_writes() {
        let (m, mut user) = Mapping::anonymous(64 << 10, &MapOptions::default()).unwrap();
        assert_eq!(m.len(), 64 << 10);
        assert!(m.range(0, m.len()).is_zero());
        m.user_slice_mut::<u32>(&mut user)[100] = 0xdead_beef;
        let mut b = [0u8; 4];
        m.copy_out(400, &mut b);
        assert_eq!(u32::from_ne_bytes(b), 0xdead_beef);
    }

    #[test]
    fn discard_ranges_drops_exactly_the_ranges_in_few_calls() {
        let (m, _) = Mapping::anonymous(256 * 4096, &MapOptions::default()).unwrap();
        m.fill(0, m.len(), 7);
        // Every other page, and one run of three: 67 ranges.
        let mut ranges: Vec<(usize, usize)> = (0..64).map(|k| (2 * k * 4096, 4096)).collect();
        ranges.extend([(130 * 4096, 4096), (140 * 4096, 3 * 4096), (200 * 4096, 4096)]);
        // SAFETY: the test owns the mapping's contents.
        let calls = unsafe { m.discard_ranges(&ranges) }.unwrap();
        let dropped = |p: usize| ranges.iter().any(|&(o, l)| p * 4096 >= o && p * 4096 < o + l);
        for p in 0..256 {
            let mut b = [0u8; 1];
            m.copy_out(p * 4096 + 17, &mut b);
            assert_eq!(b[0], if dropped(p) { 0 } else { 7 }, "page {p}");
        }
        if batched_discard() {
            assert_eq!(calls, ranges.len().div_ceil(DISCARD_VECTOR));
        } else {
            eprintln!("process_madvise(PIDFD_SELF, MADV_DONTNEED) refused here: one madvise per range");
            assert_eq!(calls, ranges.len());
        }
    }

    #[test]
    fn zero_and_unaligned_lengths_are_rejected() {
        assert!(matches!(
            Mapping::anonymous(0, &MapOptions::default()),
            Err(MmError::BadLength { .. })
        ));
        assert!(matches!(
            Mapping::anonymous(4097, &MapOptions::default()),
            Err(MmError::BadLength { .. })
        ));
    }

    #[test]
    fn aligned_mapping_starts_on_the_boundary() {
        let opts = MapOptions {
            align: 2 << 20,
            ..Default::default()
        };
        let (m, _) = Mapping::anonymous(4 << 20, &opts).unwrap();
        assert_eq!(m.addr() % (2 << 20), 0);
        m.fill(0, m.len(), 1);
    }

    #[test]
    fn locked_mapping_is_resident() {
        let (m, mut user) = Mapping::anonymous(64 << 10, &MapOptions::default()).unwrap();
        m.lock(0, m.len())
            .expect("mlock of 64 KiB (RLIMIT_MEMLOCK is at least that)");
        m.user_slice_mut::<u64>(&mut user)[100] = 7;
        assert_eq!(m.user_slice_mut::<u64>(&mut user)[100], 7);
    }

    /// Pages filled one by one collapse into one transparent huge page; a
    /// block with a hole does not (when THP is not disabled outright).
    #[test]
    fn collapse_makes_a_full_block_huge() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if thp.contains("[never]") {
            eprintln!("skipped: transparent huge pages are disabled ([never])");
            return;
        }
        let block = 2 << 20;
        let opts = MapOptions {
            align: block,
            ..Default::default()
        };
        let (m, mut user) = Mapping::anonymous(2 * block, &opts).unwrap();
        m.advise(0, m.len(), Advice::NoHugePage).unwrap();
        let words = m.user_slice_mut::<u64>(&mut user);
        for (i, w) in words.iter_mut().enumerate() {
            *w = i as u64;
        }
        m.advise(0, m.len(), Advice::HugePage).unwrap();
        match m.advise(0, block, Advice::Collapse) {
            Ok(()) => assert!(crate::pagemap::anon_huge_bytes(m.addr()).unwrap().unwrap() >= block as u64),
            // No free huge page right now: nothing to check beyond the data.
            Err(MmError::Advise { errno, .. })
                if errno.raw() == libc::EAGAIN || errno.raw() == libc::ENOMEM => {}
            Err(e) => panic!("collapse of a full block: {e}"),
        }
        let words = m.user_slice_mut::<u64>(&mut user);
        assert!(words.iter().enumerate().all(|(i, &w)| w == i as u64));
    }

    #[test]
    fn discard_zeroes_private_memory() {
        let (m, _) = Mapping::anonymous(16 << 10, &MapOptions::default()).unwrap();
        m.fill(0, 16 << 10, 0xab);
        // SAFETY: no references into m exist.
        unsafe { m.discard(4096, 4096, false).unwrap() };
        assert!(m.range(4096, 4096).is_zero());
        assert!(!m.range(0, 4096).is_zero());
    }

    #[test]
    fn copy_between_mappings_and_files() {
        let (a, _) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
        let (b, _) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
        a.write_bytes(10, b"hello");
        b.copy_in(4096, a.range(10, 5));
        let mut out = [0u8; 5];
        b.copy_out(4096, &mut out);
        assert_eq!(&out, b"hello");

        let f = tempfile_fd();
        assert_eq!(b.pwrite(f.as_fd(), 4096, 4096, 8192).unwrap(), 4096);
        assert_eq!(a.pread(f.as_fd(), 0, 4096, 8192).unwrap(), 4096);
        a.copy_out(0, &mut out);
        assert_eq!(&out, b"hello");
    }

    #[test]
    fn protect_and_remap() {
        let (mut m, mut user) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
        m.protect(0, 4096, Protection::Read).unwrap();
        m.protect(0, 4096, Protection::ReadWrite).unwrap();
        m.fill(0, 8192, 3);
        m.remap(&mut user, 16384).unwrap();
        assert_eq!(m.len(), 16384);
        assert_eq!(m.user_slice_mut::<u8>(&mut user)[8191], 3);
        assert_eq!(m.user_slice_mut::<u8>(&mut user)[8192], 0);
    }

    /// VMAs of this process that overlap `[addr, addr + len)` (other tests
    /// map and unmap meanwhile: count only our range).
    fn vmas_in(addr: usize, len: usize) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| {
                let (a, b) = l.split(' ').next()?.split_once('-')?;
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            })
            .filter(|&(a, b)| a < addr + len && b > addr)
            .count()
    }

    #[test]
    fn moved_pages_replace_a_read_only_view_and_merge() {
        use crate::memfd::Memfd;
        let len = 1 << 20;
        let fd = Memfd::create("move", false).unwrap();
        fd.set_len(len as u64).unwrap();
        let (far, _) = Mapping::shared(fd.as_fd(), 0, len, 4096, &MapOptions::default()).unwrap();
        far.fill(0, len, 0x5a);
        let ro = MapOptions {
            read_only: true,
            align: 2 << 20,
            ..Default::default()
        };
        let (view, _) = Mapping::shared(fd.as_fd(), 0, len, 4096, &ro).unwrap();
        assert_eq!(view.addr() % (2 << 20), 0);
        let (near, _) = Mapping::anonymous(len, &MapOptions::default()).unwrap();
        for k in 0..4 {
            let off = k * (len / 4);
            near.populate_write(off, len / 4).unwrap();
            near.copy_in(off, far.range(off, len / 4));
            near.move_pages_to(off, len / 4, &view, off).unwrap();
        }
        assert!(view.range(0, len).same_bytes(far.range(0, len)));
        // The moved pieces merged into one VMA; the near range stays mapped
        // (zeros), the far view was replaced.
        assert_eq!(vmas_in(view.addr(), len), 1, "moved pieces merged");
        assert!(near.range(0, 4096).is_zero());
        far.unmap_shared_pages(0, len).unwrap();
        assert!(
            far.range(0, 1).same_bytes(MemRange::from_bytes(&[0x5a])),
            "data stays in the file"
        );
        view.fill(0, 4096, 1); // writable now: the pages are the near copies
        assert!(far.range(0, 1).same_bytes(MemRange::from_bytes(&[0x5a])));
        assert!(matches!(
            near.move_pages_to(0, 4096, &view, 4096 * 3 + 1),
            Err(MmError::Remap { .. })
        ));
    }

    #[test]
    fn dontfork_mapping_is_absent_in_the_child() {
        let opts = MapOptions {
            dontfork: true,
            ..Default::default()
        };
        let (m, _) = Mapping::anonymous(4096, &opts).unwrap();
        let maps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let line = maps
            .lines()
            .skip_while(|l| !l.starts_with(&format!("{:x}-", m.addr())))
            .find(|l| l.starts_with("VmFlags"))
            .unwrap()
            .to_owned();
        assert!(line.contains(" dc"), "{line}");
    }

    use std::os::fd::{AsFd, OwnedFd};
    fn tempfile_fd() -> OwnedFd {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags_tmp()
            .open(std::env::temp_dir())
            .unwrap();
        OwnedFd::from(f)
    }
    trait TmpFlag {
        fn custom_flags_tmp(&mut self) -> &mut Self;
    }
    impl TmpFlag for std::fs::OpenOptions {
        fn custom_flags_tmp(&mut self) -> &mut Self {
            use std::os::unix::fs::OpenOptionsExt;
            self.custom_flags(libc::O_TMPFILE)
        }
    }

    #[test]
    fn streaming_copy_matches_memcpy_aligned_or_not() {
        let len = 3 * 4096;
        let (src, _) = Mapping::anonymous(len, &MapOptions::default()).unwrap();
        let (a, _) = Mapping::anonymous(len, &MapOptions::default()).unwrap();
        let (b, _) = Mapping::anonymous(len, &MapOptions::default()).unwrap();
        for i in 0..len {
            src.fill(i, 1, (i * 7 % 251) as u8);
        }
        // Whole aligned pages (streamed), then an unaligned tail (memcpy).
        a.copy_in_streaming(0, src.range(0, 2 * 4096));
        a.copy_in_streaming(2 * 4096 + 8, src.range(2 * 4096 + 8, 100));
        b.copy_in(0, src.range(0, 2 * 4096));
        b.copy_in(2 * 4096 + 8, src.range(2 * 4096 + 8, 100));
        assert!(a.range(0, len).same_bytes(b.range(0, len)));
        assert!(!a.range(0, 4096).is_zero() && a.range(2 * 4096 + 108, 4096 - 108).is_zero());
    }

    #[test]
    fn shared_at_maps_the_same_file_at_a_chosen_address() {
        let fd = crate::memfd::Memfd::create("at", false).unwrap();
        fd.set_len(8192).unwrap();
        let (a, _ua) = Mapping::shared(fd.as_fd(), 0, 8192, 4096, &MapOptions::default()).unwrap();
        a.write_bytes(10, b"x");
        let want = a.addr();
        // Occupied: refused, the existing mapping untouched.
        assert!(Mapping::shared_at(fd.as_fd(), 0, 8192, 4096, want).is_err());
        drop(a);
        let (b, _ub) = Mapping::shared_at(fd.as_fd(), 0, 8192, 4096, want).unwrap();
        assert_eq!(b.addr(), want);
        let mut got = [0u8];
        b.copy_out(10, &mut got);
        assert_eq!(&got, b"x");
        assert!(Mapping::shared_at(fd.as_fd(), 0, 100, 4096, want).is_err());
        assert!(Mapping::shared_at(fd.as_fd(), 0, 4096, 4096, want + 1).is_err());
    }
}
