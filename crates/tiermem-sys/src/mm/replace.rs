//! Replacing part of a mapping in place (shared views and private copies
//! for the SVM, hugetlb, zero pages) and the narrower atomic views.

use super::*;

/// Replacing part of a mapping in place, for shared virtual memory (paper
/// 5): one process maps a page of the SVM range either as a view of the
/// shared home file (SPM mode) or as a private cached copy (DSM mode).
impl Mapping {
    pub(super) fn replace(
        &self,
        offset: usize,
        len: usize,
        prot: Protection,
        flags: libc::c_int,
        fd: libc::c_int,
        file_offset: u64,
    ) -> Result<(), MmError> {
        self.check_range(offset, len);
        if len == 0 || !len.is_multiple_of(self.page_size) || !offset.is_multiple_of(self.page_size) {
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
            Self::mmap_checked(
                self.as_ptr().add(offset).cast(),
                len,
                first_prot,
                flags | libc::MAP_FIXED,
                fd,
                file_offset,
            )
        }?;
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
        if !offset.is_multiple_of(size.bytes())
            || !len.is_multiple_of(size.bytes())
            || !(self.addr() + offset).is_multiple_of(size.bytes())
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
