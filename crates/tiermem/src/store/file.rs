//! The file far store: `pread`/`pwrite` on a sparse file created mode 0600,
//! optionally `O_DIRECT` (buffers and offsets are page aligned, which
//! satisfies any logical block size up to the page size).

use super::inject::Injector;
use super::{FarStore, StagingSlot, StoreError};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use tiermem_sys::file::FarFile;
use tiermem_sys::memfd;
use tiermem_sys::mm::{Mapping, MemRange};
use tiermem_sys::Errno;

/// A far store in a file.
pub struct FileStore {
    file: FarFile,
    capacity: u64,
    inject: Option<Arc<Injector>>,
}

impl FileStore {
    /// Creates the far file (see [`FarFile::create`]) and sizes it sparsely.
    pub fn create(path: &Path, direct: bool, capacity: u64) -> Result<FileStore, crate::Error> {
        let file = FarFile::create(path, direct)?;
        if let Some(pid) = file.swept() {
            eprintln!(
                "tiermem: removed {}, the far file of process {pid}, which no longer runs (a killed \
                 run's leftover)",
                path.display()
            );
        }
        memfd::set_len(file.as_fd(), capacity).map_err(|errno| crate::Error::Sys {
            what: "sizing the far file",
            errno,
        })?;
        Ok(FileStore {
            file,
            capacity,
            inject: None,
        })
    }

    /// Shortens some of its `pread`/`pwrite` calls as `inject` draws
    /// (fault injection, tests only).
    pub fn set_injector(&mut self, inject: Arc<Injector>) {
        self.inject = Some(inject);
    }

    /// Transfer unit of one call: O_DIRECT needs whole blocks.
    fn align(&self) -> usize {
        if self.file.direct() {
            4096
        } else {
            1
        }
    }
}

impl FarStore for FileStore {
    fn needs_staging(&self) -> bool {
        true
    }

    fn fetch<'a>(
        &'a self,
        offset: u64,
        len: usize,
        staging: Option<&'a StagingSlot<'a>>,
    ) -> Result<MemRange<'a>, StoreError> {
        // Callers always pass a large enough buffer; failing (not panicking)
        // if one does not keeps a page from being left busy.
        let Some(slot) = staging.filter(|s| len <= s.len()) else {
            return Err(StoreError::Read {
                offset,
                len,
                errno: Errno(libc::EINVAL),
            });
        };
        self.read_into(offset, len, slot.mapping(), slot.offset())?;
        Ok(slot.mapping().range(slot.offset(), len))
    }

    fn read_into(&self, offset: u64, len: usize, dst: &Mapping, dst_offset: usize) -> Result<(), StoreError> {
        // A sparse file never ends before its size: a short read means
        // something truncated it.
        let inject = self.inject.as_deref().map(|i| (i, self.align()));
        super::read_fully(self.file.as_fd(), offset, len, dst, dst_offset, inject)
    }

    fn store(&self, offset: u64, src: MemRange<'_>) -> Result<(), StoreError> {
        let mut done = 0;
        while done < src.len() {
            let want = self
                .inject
                .as_ref()
                .map_or(src.len() - done, |i| i.io_len(src.len() - done, self.align()));
            let part = src.sub(done, want);
            let n = part
                .pwrite_to(self.file.as_fd(), offset + done as u64)
                .map_err(|errno| StoreError::Write {
                    offset,
                    len: src.len(),
                    errno,
                })?;
            if n == 0 {
                return Err(StoreError::Write {
                    offset,
                    len: src.len(),
                    errno: Errno(libc::ENOSPC),
                });
            }
            done += n;
        }
        Ok(())
    }

    fn forget(&self, offset: u64, len: u64) {
        let _ = memfd::punch_hole(self.file.as_fd(), offset, len);
    }

    fn describe(&self) -> String {
        let place = match self.file.path() {
            Some(p) => format!("file {}", p.display()),
            None => format!("an unnamed file in {}", self.file.location().display()),
        };
        format!(
            "{place} (sparse, up to {}{})",
            crate::stats::Bytes(self.capacity),
            if self.file.direct() { ", O_DIRECT" } else { "" }
        )
    }

    fn space(&self) -> Option<tiermem_sys::file::FsSpace> {
        self.file.fs_space().ok()
    }
}
