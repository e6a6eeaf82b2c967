//! wp-async dirty tracking in eviction: a run is frozen read-only with
//! `mprotect` while it is written back (writers get SIGSEGV and wait on
//! the page state), `PAGEMAP_SCAN` names the pages written since they were
//! installed, and the freeze is lifted after.

use super::errors::OP_EVICT;
use super::RegionCore;
use tiermem_sys::mm::Protection;
use tiermem_sys::pagemap::{Categories, PageRegion, ScanRequest};

impl RegionCore {
    /// wp-async: lifts the freeze of a run. A range left read-only would
    /// make its next writers spin on SIGSEGV, so insist, and record a
    /// failure (they then end with SIGSEGV rather than hang).
    pub(super) fn unfreeze(&self, off: usize, bytes: usize) {
        for _ in 0..100 {
            match self.mapping.protect(off, bytes, Protection::ReadWrite) {
                Ok(()) => return,
                Err(_) => std::thread::yield_now(),
            }
        }
        self.errors.record(off as u64, OP_EVICT, libc::ENOMEM);
    }

    /// wp-async: marks pages of `[first, first+n)` that were written since
    /// they were installed (excluding zero-page mappings).
    #[inline(never)] // its 1.5 KiB of results stay off the frame of every eviction (signal stacks)
    pub(super) fn scan_written(&self, first: usize, n: usize, dirty: &mut [bool]) {
        let scanner = self.scanner.as_ref().expect("wp-async has a pagemap scanner");
        let start = self.mapping.addr() + first * self.page_bytes;
        let end = start + n * self.page_bytes;
        let mut out = [PageRegion::default(); 64];
        let mut at = start;
        while at < end {
            let req = ScanRequest::new(at, end)
                .require(Categories::WRITTEN)
                .exclude(Categories::PFNZERO)
                .report(Categories::WRITTEN);
            match scanner.scan(&req, &mut out) {
                Ok(r) => {
                    for reg in &out[..r.regions] {
                        let a = (reg.start - start) / self.page_bytes;
                        let b = (reg.end - start).div_ceil(self.page_bytes);
                        dirty[a..b.min(n)].iter_mut().for_each(|d| *d = true);
                    }
                    if r.walk_end <= at {
                        // No progress: the rest cannot be told clean.
                        let a = (at - start) / self.page_bytes;
                        dirty[a..n].iter_mut().for_each(|d| *d = true);
                        break;
                    }
                    at = r.walk_end;
                }
                Err(_) => {
                    // Cannot tell: write everything back.
                    dirty[..n].iter_mut().for_each(|d| *d = true);
                    break;
                }
            }
        }
    }
}
