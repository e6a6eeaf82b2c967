//! Advice, discarding, protection, remapping, moving and locking pages.

use super::*;

impl Mapping {
    /// Gives non-destructive advice about a range.
    pub fn advise(&self, offset: usize, len: usize, advice: Advice) -> Result<(), MmError> {
        assert!(
            !matches!(advice, Advice::DontNeed | Advice::Remove),
            "destructive advice goes through discard()"
        );
        self.madvise(offset, len, advice)
    }

    pub(super) fn madvise(&self, offset: usize, len: usize, advice: Advice) -> Result<(), MmError> {
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
        const EMPTY_IOVEC: libc::iovec = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut calls = 0;
        for chunk in ranges.chunks(DISCARD_VECTOR) {
            let mut iov = [EMPTY_IOVEC; DISCARD_VECTOR];
            let total = self.iovecs(chunk, &mut iov);
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
        if new_len == 0 || !new_len.is_multiple_of(self.page_size) {
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
