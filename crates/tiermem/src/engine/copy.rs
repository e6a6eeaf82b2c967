//! Copies into the region (`UFFDIO_COPY`, and the retry of any install
//! the kernel says to try again): one page, or a run. The
//! installer fills with them, and the evictor puts a page back with them
//! when its write-back failed: a primitive under both.

use super::errors::OP_INSTALL;
use super::RegionCore;
use std::sync::atomic::Ordering;
use tiermem_sys::uffd::{CopyMode, Resolved, UffdError};

impl RegionCore {
    /// UFFDIO_COPY of one page, retrying while the kernel says EAGAIN. A page
    /// that is somehow already mapped counts as installed.
    pub(super) fn copy_in(
        &self,
        off: usize,
        src: tiermem_sys::mm::MemRange<'_>,
        wp: bool,
        dont_wake: bool,
    ) -> Result<(), UffdError> {
        let mode = CopyMode {
            write_protect: wp,
            dont_wake,
        };
        self.retry_again(|| self.uffd.copy(&self.reg, off, src, mode))
    }

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

    /// UFFDIO_COPY of a multi-page run, resuming after partial copies and
    /// skipping pages that turn out to be mapped already.
    pub(super) fn copy_run(
        &self,
        off: usize,
        src: tiermem_sys::mm::MemRange<'_>,
        wp: bool,
    ) -> Result<(), ()> {
        let mode = CopyMode {
            write_protect: wp,
            dont_wake: false,
        };
        let mover = super::mover::on_mover();
        let mut done = 0;
        while done < src.len() {
            if mover {
                self.stats.mover_copy_calls.fetch_add(1, Ordering::Relaxed);
            }
            match self
                .uffd
                .copy(&self.reg, off + done, src.sub(done, src.len() - done), mode)
            {
                Ok(Resolved::Done) => return Ok(()),
                Ok(Resolved::Partial { bytes }) => done += bytes,
                Ok(Resolved::AlreadyMapped) => done += self.page_bytes,
                Err(e) => {
                    self.errors
                        .record((off + done) as u64, OP_INSTALL, e.errno().map_or(0, |e| e.raw()));
                    return Err(());
                }
            }
        }
        Ok(())
    }
}
