//! `UFFDIO_MOVE`: moving pages in and out of a registration without
//! copying, and counting the pages a failed move moved but did not report.

use super::*;

impl Uffd {
    /// Moves `len` bytes of anonymous pages from `src` (at `src_offset`) into
    /// missing pages of the registration at `offset` (`UFFDIO_MOVE`), without
    /// copying. The source range is left unmapped. Requires [`Features::MOVE`].
    pub fn move_in(
        &self,
        reg: &Registration,
        offset: usize,
        src: &Mapping,
        src_offset: usize,
        len: usize,
        allow_src_holes: bool,
    ) -> Result<Resolved, UffdError> {
        let dst = reg.addr(offset, len);
        let src_addr = src.range(src_offset, len).addr();
        self.move_raw(dst, src_addr, len, allow_src_holes)
    }

    /// Moves pages out of the registration `reg` into holes of `dst`, another
    /// range registered with this descriptor (the kernel requires the
    /// destination of a move to be registered with the same userfaultfd).
    /// The source range is left missing, so its next access faults.
    pub fn move_out(
        &self,
        reg: &Registration,
        offset: usize,
        dst: &Registration,
        dst_offset: usize,
        len: usize,
    ) -> Result<Resolved, UffdError> {
        let src_addr = reg.addr(offset, len);
        let dst_addr = dst.addr(dst_offset, len);
        self.move_raw(dst_addr, src_addr, len, true)
    }

    pub(super) fn move_raw(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        allow_src_holes: bool,
    ) -> Result<Resolved, UffdError> {
        let mut m = uapi::UffdioMove {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode: bit(allow_src_holes, uapi::UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES),
            moved: 0,
        };
        // SAFETY: struct ours; both ranges are live mappings borrowed by the
        // caller; the kernel moves only anonymous-exclusive pages into holes.
        let mut r = unsafe { libc::ioctl(self.fd.as_raw_fd(), uapi::UFFDIO_MOVE as _, &mut m) };
        // The kernel moves only between ranges both locked or both not: a
        // memory lock that reached one of them (a raw mlockall) is taken off
        // both mappings, and the move tried again (see crate::locks).
        if r != 0 && m.moved == 0 && Errno::last().raw() == libc::EINVAL {
            let unlocked = crate::locks::unlock_containing(src) | crate::locks::unlock_containing(dst);
            if unlocked {
                // SAFETY: as above.
                r = unsafe { libc::ioctl(self.fd.as_raw_fd(), uapi::UFFDIO_MOVE as _, &mut m) };
            }
        }
        if r == 0 {
            return Ok(Resolved::Done);
        }
        let errno = Errno::last();
        let reported = m.moved.max(0) as usize;
        // The kernel may have moved more than it says. Linux 6.18's move
        // loop keeps the EAGAIN of a source page it found under migration
        // (it waits, then tries the page again) across the try that moves
        // it, so it goes back to the page once more, finds the destination
        // taken by the page it just moved, and stops with EEXIST: the page
        // (or a batch of pages from it) moved, reported not moved. Taken at
        // its word, an eviction "emptied" the destination frame (the page's
        // data lost) and moved the now empty source as a hole, and the
        // write-back of that hole died of SIGBUS (compaction under load;
        // test `moves_racing_page_migration_report_every_page_moved`).
        // Count those pages: a source page now empty whose destination is
        // mapped. (Only a caller moving a source hole to a mapped
        // destination, which tiermem never does, would be miscounted.)
        if reported < len && matches!(errno.raw(), libc::EEXIST | libc::EAGAIN) {
            let bytes = reported + unreported_moves(dst, src, reported, len);
            if bytes == len {
                return Ok(Resolved::Done);
            }
            if bytes > reported {
                return Ok(Resolved::Partial { bytes });
            }
        }
        // A move that fails part way (a pinned page: EBUSY; a mapped
        // destination page: EEXIST) has moved the pages before it, and says
        // how many bytes in `moved`: report those as done, so that the
        // caller counts them and retries from the page that failed (which
        // then reports the error with nothing moved). Dropping the count
        // leaves pages moved that the caller believes in place: an
        // eviction that then writes them back from the region faults on
        // a page it owns itself and waits for it forever.
        if reported > 0 && reported < len {
            return Ok(Resolved::Partial { bytes: reported });
        }
        resolved_errno("UFFDIO_MOVE", dst, len, r, m.moved, errno)
    }
}

/// The bytes from `from` on (up to `len`) of a move from `src` to `dst`
/// that the kernel moved without counting them (see `Uffd::move_raw`):
/// consecutive pages whose source pte is now empty and whose destination
/// is mapped, read from `/proc/self/pagemap`. 0 when the pagemap cannot be
/// read. Async-signal-safe (raw system calls, no allocation): it runs in
/// fault handlers.
#[cold]
#[inline(never)]
pub(super) fn unreported_moves(dst: usize, src: usize, from: usize, len: usize) -> usize {
    const PAGE: usize = 4096;
    const BATCH: usize = 16;
    // Bits 63 (present) and 62 (swapped, or a migration entry).
    const MAPPED: u64 = 3 << 62;
    let mut at = from;
    let (mut s, mut d) = ([0u64; BATCH], [0u64; BATCH]);
    while at < len {
        let n = ((len - at) / PAGE).clamp(1, BATCH);
        if !pagemap_entries(src + at, &mut s[..n]) || !pagemap_entries(dst + at, &mut d[..n]) {
            break;
        }
        for k in 0..n {
            if s[k] & MAPPED != 0 || d[k] & MAPPED == 0 {
                return at + k * PAGE - from;
            }
        }
        at += n * PAGE;
    }
    at.min(len) - from
}

/// Reads the pagemap entries of the pages from `addr` into `out`. Opens
/// `/proc/self/pagemap` each time: this runs only after a failed move, and
/// a descriptor kept open could be closed, or its number reused, by the
/// program (`closefrom` in a daemon, for one).
#[inline(never)]
pub(super) fn pagemap_entries(addr: usize, out: &mut [u64]) -> bool {
    // SAFETY: a NUL-terminated path; raw system calls (this runs in fault
    // handlers, where the kernel-access filter must not trap it).
    let fd = unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as u64,
                c"/proc/self/pagemap".as_ptr() as u64,
                (libc::O_RDONLY | libc::O_CLOEXEC) as u64,
                0,
                0,
                0,
            ],
        )
    };
    if fd < 0 {
        return false;
    }
    let bytes = std::mem::size_of_val(out);
    // SAFETY: reads into `out`, which we own, at the entries of `addr`.
    let r = unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_pread64,
            [
                fd as u64,
                out.as_mut_ptr() as u64,
                bytes as u64,
                (addr / 4096 * 8) as u64,
                0,
                0,
            ],
        )
    };
    // SAFETY: the descriptor opened above, used by nothing else.
    unsafe { crate::trampoline::untrapped_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]) };
    r == bytes as i64
}
