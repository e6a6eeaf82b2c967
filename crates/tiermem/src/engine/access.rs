//! Which parts of a region the program can reach: all of it, or, for a
//! range handed out piece by piece (the transparent heap, `PROT_NONE`
//! until allocations reach it, so that a raw `mlockall` finds nothing to
//! populate there), the 2 MiB chunks opened so far.
//!
//! The engine fills only pages the program can reach. A prefetch stream
//! running ahead past the end of an allocation into a chunk still
//! `PROT_NONE` installed pages there that the kernel maps inaccessible;
//! the mover's write-back then read one through the mapping and died of
//! SIGSEGV (`tiermem run --movers 1`, every other run).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tiermem_sys::zeroed::ZeroedArray;

/// Pages per chunk opened at a time (2 MiB of 4 KiB pages).
pub(crate) const CHUNK_BYTES: usize = 2 << 20;

pub(crate) struct Access {
    /// Some of the range is closed: consult `open`.
    closed: AtomicBool,
    /// One bit per chunk, set once it is open.
    open: ZeroedArray<AtomicU64>,
    /// log2 of the region's pages per chunk (at least one page).
    pages_per_chunk_shift: u32,
}

impl Access {
    pub(crate) fn new(pages: usize, page_bytes: usize) -> Result<Access, tiermem_sys::mm::MmError> {
        let shift = (CHUNK_BYTES / page_bytes).max(1).trailing_zeros();
        Ok(Access {
            closed: AtomicBool::new(false),
            open: ZeroedArray::new((pages >> shift).div_ceil(64) + 1)?,
            pages_per_chunk_shift: shift,
        })
    }

    /// From now on only opened chunks are reachable.
    pub(crate) fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Pages `[first, first + count)` are reachable.
    pub(crate) fn open(&self, first: usize, count: usize) {
        if count == 0 {
            return;
        }
        let (lo, hi) = (
            first >> self.pages_per_chunk_shift,
            (first + count - 1) >> self.pages_per_chunk_shift,
        );
        for c in lo..=hi {
            // Release: pairs with `reachable`'s Acquire.
            self.open[c / 64].fetch_or(1 << (c % 64), Ordering::Release);
        }
    }

    /// Whether the program can reach page `p` (one load while nothing is
    /// closed).
    pub(crate) fn reachable(&self, p: usize) -> bool {
        if !self.closed.load(Ordering::Acquire) {
            return true;
        }
        let c = p >> self.pages_per_chunk_shift;
        self.open[c / 64].load(Ordering::Acquire) & (1 << (c % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_opened_chunks_are_reachable_once_closed() {
        let a = Access::new(4096, 4096).unwrap();
        assert!(a.reachable(4000));
        a.close_all();
        assert!(!a.reachable(0) && !a.reachable(4000));
        a.open(600, 10);
        assert!(a.reachable(512) && a.reachable(1023) && !a.reachable(1024) && !a.reachable(511));
        // 2 MiB pages: one page per chunk.
        let h = Access::new(8, 2 << 20).unwrap();
        h.close_all();
        h.open(3, 2);
        assert!(h.reachable(3) && h.reachable(4) && !h.reachable(5));
    }
}
