//! Accessors, typed views and the raw byte copies in and out of a mapping.

use super::*;

impl Mapping {
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

    /// Fills `iov` with the `(offset, len)` ranges of this mapping (as
    /// many as fit); returns their total length.
    pub(crate) fn iovecs(&self, ranges: &[(usize, usize)], iov: &mut [libc::iovec]) -> usize {
        let mut total = 0;
        for (v, &(offset, len)) in iov.iter_mut().zip(ranges) {
            self.check_range(offset, len);
            // SAFETY: inside the mapping (checked above).
            v.iov_base = unsafe { self.as_ptr().add(offset) }.cast();
            v.iov_len = len;
            total += len;
        }
        total
    }

    pub(crate) fn check_range(&self, offset: usize, len: usize) {
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
            std::mem::align_of::<T>() <= self.page_size
                && self.len.is_multiple_of(std::mem::size_of::<T>().max(1)),
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
            if (src.len | src.addr | dst).is_multiple_of(64) {
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
                crate::trampoline::untrapped_syscall(
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
