//! Copies into the region (`UFFDIO_COPY`, and the retry of any install
//! the kernel says to try again): one page, or a run. The
//! installer fills with them, and the evictor puts a page back with them
//! when its write-back failed: a primitive under both.

use super::errors::OP_INSTALL;
use super::RegionCore;
use std::sync::atomic::Ordering;
use tiermem_sys::uffd::{CopyMode, Resolved, UffdError};

/// A copy into the region that stopped part-way: `done` bytes from the
/// start are mapped, the rest is not.
#[derive(Debug)]
pub(super) struct CopyShort {
    pub(super) done: usize,
    pub(super) err: UffdError,
}

impl RegionCore {
    /// UFFDIO_COPY of `src` to region offset `off`, one page or a run. The
    /// kernel stops a run at the first page it cannot install (ENOMEM, a
    /// page mapped already) and says EAGAIN with the bytes done; the copy
    /// resumes there, skipping a page found mapped already (EEXIST: it
    /// counts as installed) by one base page, the unit the kernel maps.
    /// Ok when all of `src` is mapped, else the bytes mapped from the start.
    pub(super) fn copy_in(
        &self,
        off: usize,
        src: tiermem_sys::mm::MemRange<'_>,
        wp: bool,
        dont_wake: bool,
    ) -> Result<(), CopyShort> {
        let mode = CopyMode {
            write_protect: wp,
            dont_wake,
        };
        // A THP block is mapped as small pages until it is collapsed.
        let unit = if self.thp() {
            tiermem_sys::mm::base_page_size()
        } else {
            self.page_bytes
        };
        let mover = super::mover::on_mover();
        let len = src.len();
        let mut done = 0;
        while done < len {
            if mover {
                self.stats.mover_copy_calls.fetch_add(1, Ordering::Relaxed);
            }
            match self
                .uffd
                .copy(&self.reg, off + done, src.sub(done, len - done), mode)
            {
                Ok(Resolved::Done) => return Ok(()),
                Ok(Resolved::Partial { bytes }) if bytes > 0 => done += bytes,
                // No progress while the mappings change: try again.
                Ok(Resolved::Partial { .. }) => std::thread::yield_now(),
                Ok(Resolved::AlreadyMapped) => done += unit,
                Err(err) => return Err(CopyShort { done, err }),
            }
        }
        Ok(())
    }

    /// Runs an install of one page until it is done, while the kernel says
    /// EAGAIN (the mappings change). A page that is somehow already mapped
    /// counts as installed.
    pub(super) fn retry_again(
        &self,
        mut op: impl FnMut() -> Result<Resolved, UffdError>,
    ) -> Result<(), UffdError> {
        loop {
            match op()? {
                Resolved::Done | Resolved::AlreadyMapped => return Ok(()),
                Resolved::Partial { .. } => std::thread::yield_now(),
            }
        }
    }

    /// [`Self::copy_in`] of a run of whole pages, recording a failure;
    /// returns the pages installed from the start. A THP block installed
    /// in part is dropped again, so that it is all missing, as its page
    /// word says.
    pub(super) fn copy_run(&self, off: usize, src: tiermem_sys::mm::MemRange<'_>, mode: CopyMode) -> usize {
        let short = match self.copy_in(off, src, mode.write_protect, mode.dont_wake) {
            Ok(()) => return src.len() / self.page_bytes,
            Err(short) => short,
        };
        self.errors.record(
            (off + short.done) as u64,
            OP_INSTALL,
            short.err.errno().map_or(0, |e| e.raw()),
        );
        let whole = short.done / self.page_bytes;
        self.drop_part_of_block(off + whole * self.page_bytes, short.done % self.page_bytes);
        whole
    }

    /// After a copy of a THP block that stopped `part` bytes in: drops the
    /// small pages it mapped. Nothing else maps them yet (the block's page
    /// is locked: a fault on it waits), but a thread could have written
    /// into one of them in the microseconds they were mapped; that write
    /// is lost with them, a narrow window only an install failing part-way
    /// (out of memory) opens, against a block published with holes,
    /// whose faults would never be served, before.
    pub(super) fn drop_part_of_block(&self, off: usize, part: usize) {
        if part > 0 {
            let _ = self.uffd.discard(&self.reg, &self.mapping, off, part);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Region};
    use tiermem_sys::mm::{MapOptions, Mapping, Protection};

    const PS: usize = 4096;

    /// The first byte of page `k` of a region (read only where the test
    /// mapped the page: elsewhere the read would fault the page in).
    fn first_byte(region: &Region, k: usize) -> u8 {
        let word = region.as_atomic_u64()[k * PS / 8].load(Ordering::Relaxed);
        word.to_le_bytes()[0]
    }

    #[test]
    fn a_copy_resumes_past_a_page_mapped_already_and_says_where_it_stopped() {
        let region = Region::new(Config::new((64 * PS) as u64, (64 * PS) as u64)).unwrap();
        let core = crate::fault::lookup::<RegionCore>(region.as_ptr() as usize).unwrap();
        let (src, _u) = Mapping::anonymous(16 * PS, &MapOptions::default()).unwrap();
        for k in 0..16 {
            src.fill(k * PS, PS, k as u8 + 1);
        }
        // Page 5 is mapped already (with page 15's bytes): a copy of pages
        // 0-7 stops there (the kernel's EAGAIN with 5 pages done, then
        // EEXIST), goes on after it, and maps all the others.
        core.copy_in(5 * PS, src.range(15 * PS, PS), false, false)
            .unwrap();
        core.copy_in(0, src.range(0, 8 * PS), false, false).unwrap();
        for k in 0..8 {
            let want = if k == 5 { 16 } else { k as u8 + 1 };
            assert_eq!(first_byte(&region, k), want, "page {k}");
        }
        // A source that cannot be read from its third page: the copy of
        // pages 8-15 maps two and says so.
        src.protect(10 * PS, PS, Protection::None).unwrap();
        let short = core
            .copy_in(8 * PS, src.range(8 * PS, 8 * PS), false, false)
            .unwrap_err();
        assert_eq!(short.done, 2 * PS);
        assert_eq!(short.err.errno().map(|e| e.raw()), Some(libc::EFAULT));
        assert_eq!((first_byte(&region, 8), first_byte(&region, 9)), (9, 10));
        // The run's form: whole pages installed, the failure recorded.
        assert_eq!(
            core.copy_run(12 * PS, src.range(8 * PS, 4 * PS), CopyMode::default()),
            2
        );
        assert_eq!(first_byte(&region, 13), 10);
        src.protect(10 * PS, PS, Protection::ReadWrite).unwrap();
    }
}
