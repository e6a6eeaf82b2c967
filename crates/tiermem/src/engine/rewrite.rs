//! The rewrite hint: which far pages to install writable at a read fill.
//!
//! In wp-fault dirty tracking a read fill installs a page write-protected,
//! and the first write to it takes a write-protect fault (a signal and an
//! ioctl, 3-5 us) that marks it dirty. NPB's solvers read a page and write
//! it moments later over and over (LU.A at near = 50%: 3.6 M of its 5.6 M
//! faults were write-protect faults). A page whose eviction found it
//! written is likely to be written in its next stay too: its next read fill
//! installs it writable, `Dirty` + VERIFY, and eviction compares it with
//! its far copy (a `memcmp`, ~0.2 us) and writes it back only if it
//! changed. A wrong guess costs that compare.
//!
//! Each page has a small credit: a stay that ended with a write-back sets
//! it to `CREDIT`, a stay without a write takes one off, and a read fill
//! installs the page writable while the credit lasts. One unwritten stay
//! (a sweep that only read the page before it was evicted) therefore does
//! not end the hint for a page that is written on most stays; pages
//! written once (initialisation) lose it after `CREDIT` read-only stays.
//! Only the owner of a page (its state `Busy`) reads or changes its credit.

use super::RegionCore;
use crate::page::{PageState, PageWord};
use std::sync::atomic::{AtomicU8, Ordering};
use tiermem_sys::mm::MmError;
use tiermem_sys::zeroed::ZeroedArray;

/// Stays without a write before a page is installed write-protected again.
const CREDIT: u8 = 2;

/// Per-page write history (one byte per page, mapped lazily).
pub(crate) struct RewriteHistory {
    credit: ZeroedArray<AtomicU8>,
}

impl RewriteHistory {
    pub(crate) fn new(pages: usize) -> Result<RewriteHistory, MmError> {
        Ok(RewriteHistory {
            credit: ZeroedArray::new(pages)?,
        })
    }

    /// Page `p` left near memory written (it was written back).
    pub(crate) fn written(&self, p: usize) {
        // Look first: a page written on every stay keeps its line clean.
        if self.credit[p].load(Ordering::Relaxed) != CREDIT {
            self.credit[p].store(CREDIT, Ordering::Relaxed);
        }
    }

    /// Page `p` left near memory unwritten.
    pub(crate) fn unwritten(&self, p: usize) {
        let c = self.credit[p].load(Ordering::Relaxed);
        if c > 0 {
            self.credit[p].store(c - 1, Ordering::Relaxed);
        }
    }

    /// Whether a read fill of page `p` should install it writable.
    pub(crate) fn expected(&self, p: usize) -> bool {
        self.credit[p].load(Ordering::Relaxed) > 0
    }
}

impl RegionCore {
    /// Whether a read fill of page `p`, which was `w`, installs it
    /// writable: it is far, and was written during its recent stays in
    /// near memory (see `rewrite`).
    pub(crate) fn expects_rewrite(&self, p: usize, w: PageWord) -> bool {
        w.state() == PageState::Far && self.rewrites.as_ref().is_some_and(|h| h.expected(p))
    }

    /// Counts `n` pages installed writable for a read by the rewrite hint.
    pub(crate) fn count_rewrites(&self, n: usize) {
        if n > 0 {
            self.stats.rewrite_installs.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_lasts_for_unwritten_stays_and_comes_back_with_a_write() {
        let h = RewriteHistory::new(1 << 20).unwrap();
        assert!(!h.expected(7), "no history: write-protected");
        h.written(7);
        for _ in 0..CREDIT {
            assert!(h.expected(7));
            h.unwritten(7);
        }
        assert!(!h.expected(7));
        h.unwritten(7);
        assert!(!h.expected(7), "the credit does not go below zero");
        h.written(7);
        assert!(h.expected(7));
        assert!(!h.expected(8) && !h.expected((1 << 20) - 1));
    }
}
