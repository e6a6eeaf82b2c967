//! Creating mappings: anonymous, reserved, shared file views, at fixed or
//! aligned addresses.

use super::*;

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
        Ok(map.with_user())
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
        if !addr.is_multiple_of(page) || !len.is_multiple_of(page) || len == 0 {
            return Err(MmError::BadLength { len, unit: page });
        }
        // SAFETY: the caller gives up the old contents of the range.
        let p = unsafe {
            Self::mmap_checked(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        }?;
        let map = Mapping::fresh(p.cast(), len, page, false, true);
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
        Ok(map.with_user())
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
        Ok(map.with_user())
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
        if len == 0 || !len.is_multiple_of(page_size) || addr == 0 {
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
        let map = Mapping::fresh(p, len, page_size, true, false);
        let user = UserAccess { addr };
        Ok((map, user))
    }

    /// The `Mapping` of what `mmap` just mapped at `addr` (not `MADV_DONTFORK`).
    fn fresh(addr: *mut u8, len: usize, page_size: usize, shared: bool, kept_unlocked: bool) -> Mapping {
        Mapping {
            addr: NonNull::new(addr).expect("mmap returned null"),
            len,
            page_size,
            dontfork_generation: None,
            shared,
            kept_unlocked,
        }
    }

    /// `mmap(2)` (made directly, [`crate::raw::mmap`]), a failure as
    /// [`MmError::Map`] of `len` bytes.
    ///
    /// # Safety
    /// As for `mmap(2)`: a fixed address must be a range the caller may
    /// replace.
    pub(super) unsafe fn mmap_checked(
        addr: *mut libc::c_void,
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: libc::c_int,
        offset: u64,
    ) -> Result<*mut libc::c_void, MmError> {
        // SAFETY: forwarded from the caller.
        let p = unsafe { crate::raw::mmap(addr, len, prot, flags, fd, offset as libc::off_t) };
        if p == libc::MAP_FAILED {
            return Err(MmError::Map {
                len,
                errno: Errno::last(),
            });
        }
        Ok(p)
    }

    pub(super) fn map(
        len: usize,
        page_size: usize,
        mut flags: libc::c_int,
        fd: Option<BorrowedFd<'_>>,
        offset: u64,
        opts: &MapOptions,
    ) -> Result<Mapping, MmError> {
        if len == 0 || !len.is_multiple_of(page_size) {
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
            // existing memory; `mmap_checked` turns MAP_FAILED into an error.
            let p = unsafe { Self::mmap_checked(std::ptr::null_mut(), len, prot, flags, raw_fd, offset) }?;
            p as *mut u8
        };
        let shared = fd.is_some() && flags & libc::MAP_SHARED != 0;
        let mut map = Mapping::fresh(addr, len, page_size, shared, keep_unlocked);
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
    pub(super) fn map_at(
        at: usize,
        len: usize,
        page_size: usize,
        flags: libc::c_int,
        prot: libc::c_int,
        raw_fd: libc::c_int,
        offset: u64,
    ) -> Result<*mut u8, MmError> {
        if !at.is_multiple_of(page_size) {
            return Err(MmError::BadLength {
                len: at,
                unit: page_size,
            });
        }
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping;
        // the result is checked below.
        let p = unsafe {
            Self::mmap_checked(
                at as *mut libc::c_void,
                len,
                prot,
                flags | libc::MAP_FIXED_NOREPLACE,
                raw_fd,
                offset,
            )
        }?;
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
    pub(super) fn map_aligned(
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
            Self::mmap_checked(
                std::ptr::null_mut(),
                span,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        }?;
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

    /// The mapping with its [`UserAccess`] token.
    fn with_user(self) -> (Mapping, UserAccess) {
        let addr = self.addr();
        (self, UserAccess { addr })
    }
}
