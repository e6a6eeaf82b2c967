//! Far stores: where evicted pages live.
//!
//! One small trait, [`FarStore`], with page-granular reads and writes; the
//! caller builds the store and hands it to the region, so tests inject
//! stores that fail on purpose. Stores:
//!
//! - [`memory`]: a memfd-backed pool in this process, standing for the host
//!   memory of paper 1; data moves by copy (the DMA of the paper), and a
//!   fill copies straight from the pool into the faulting page.
//! - [`file`](mod@file): a file, `pread`/`pwrite`, optionally `O_DIRECT`.
//!
//! Stores never see the page state protocol: the engine guarantees that no
//! two calls touch the same page at once and that a page being stored is
//! not written meanwhile.

pub mod file;
pub mod inject;
pub mod memory;

use crossbeam_utils::Backoff;
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;
use tiermem_sys::mm::{MapOptions, Mapping, MemRange};
use tiermem_sys::Errno;

/// A far-store failure.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Reading a page back failed.
    #[error("far store read of {len} bytes at offset {offset} failed: {errno}")]
    Read {
        /// Offset in the store.
        offset: u64,
        /// Length.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// Writing a page out failed.
    #[error("far store write of {len} bytes at offset {offset} failed: {errno}")]
    Write {
        /// Offset in the store.
        offset: u64,
        /// Length.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// The store cannot be created.
    #[error("cannot create the far store: {0}")]
    Create(String),
}

impl StoreError {
    /// The store ran out of space (ENOSPC, EDQUOT, EFBIG).
    pub fn is_full(&self) -> bool {
        match self {
            StoreError::Write { errno, .. } => {
                matches!(errno.raw(), libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
            }
            _ => false,
        }
    }

    /// The errno behind the failure, if any.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            StoreError::Read { errno, .. } | StoreError::Write { errno, .. } => Some(*errno),
            StoreError::Create(_) => None,
        }
    }
}

/// Where evicted pages live. Offsets are byte offsets into the region.
pub trait FarStore: Send + Sync {
    /// Whether [`FarStore::fetch`] needs a staging buffer.
    fn needs_staging(&self) -> bool;

    /// Makes the `len` bytes stored at `offset` available for copying into
    /// a faulting page and returns where they are: inside the store itself
    /// (zero extra copies) or in `staging`, which the caller claimed (when
    /// [`FarStore::needs_staging`]) and keeps until it has copied the bytes.
    fn fetch<'a>(
        &'a self,
        offset: u64,
        len: usize,
        staging: Option<&'a StagingSlot<'a>>,
    ) -> Result<MemRange<'a>, StoreError>;

    /// Stores `src` (contiguous pages) at `offset`.
    fn store(&self, offset: u64, src: MemRange<'_>) -> Result<(), StoreError>;

    /// Stores the next `len` bytes queued in `pipe` at `offset` without a
    /// staging copy, where the store can (evictions that read dirty
    /// victims through a pipe). None: it cannot, and nothing was read; the
    /// caller reads them into a buffer and calls [`FarStore::store`].
    /// An error leaves the bytes in the pipe.
    fn store_from_pipe(
        &self,
        _offset: u64,
        _pipe: &tiermem_sys::splice::Pipe,
        _len: usize,
    ) -> Option<Result<(), StoreError>> {
        None
    }

    /// Copies `len` stored bytes at `offset` into `dst` at `dst_offset`
    /// (a staging frame that is then moved into place).
    fn read_into(&self, offset: u64, len: usize, dst: &Mapping, dst_offset: usize) -> Result<(), StoreError>;

    /// [`FarStore::read_into`] in a `fork()`ed child, where the store's
    /// own mappings (`MADV_DONTFORK`) are gone but its descriptors remain:
    /// the child copying the data it inherits (`Config::on_fork = Copy`).
    fn read_after_fork(
        &self,
        offset: u64,
        len: usize,
        dst: &Mapping,
        dst_offset: usize,
    ) -> Result<(), StoreError> {
        self.read_into(offset, len, dst, dst_offset)
    }

    /// Whether the `src.len()` bytes stored at `offset` equal `src`, when
    /// the store can tell cheaply (a memory store compares in place);
    /// `None` when it cannot (the caller then assumes they differ).
    fn same_as(&self, _offset: u64, _src: MemRange<'_>) -> Option<bool> {
        None
    }

    /// Whether [`FarStore::same_as`] answers (cheaply, in place).
    fn compares_in_place(&self) -> bool {
        false
    }

    /// Forgets `len` bytes at `offset` (the pages became never-written);
    /// frees their space where the store can.
    fn forget(&self, offset: u64, len: u64);

    /// One-line description for logs and results.
    fn describe(&self) -> String;

    /// The size and free space of the file system the store writes to,
    /// when it has one (the file store). Must not allocate: asked on the
    /// fault path when the store is full (a signal handler).
    fn space(&self) -> Option<tiermem_sys::file::FsSpace> {
        None
    }
}

/// Reads `len` bytes of `fd` at `offset` into `dst` at `dst_offset`, all
/// of them: a short read (the file was truncated behind the store's back)
/// is an error, never silent zeros. `inject` may shorten calls (tests).
pub(crate) fn read_fully(
    fd: std::os::fd::BorrowedFd<'_>,
    offset: u64,
    len: usize,
    dst: &Mapping,
    dst_offset: usize,
    inject: Option<(&inject::Injector, usize)>,
) -> Result<(), StoreError> {
    let mut done = 0;
    while done < len {
        let want = inject.map_or(len - done, |(i, align)| i.io_len(len - done, align));
        match dst.pread(fd, dst_offset + done, want, offset + done as u64) {
            Ok(0) => {
                return Err(StoreError::Read {
                    offset,
                    len,
                    errno: Errno(libc::EIO),
                })
            }
            Ok(n) => done += n,
            Err(errno) => return Err(StoreError::Read { offset, len, errno }),
        }
    }
    Ok(())
}

/// Page-sized staging buffers for stores that read into memory first,
/// usable from a signal handler (a fixed pool claimed with atomics).
pub struct StagingPool {
    map: Mapping,
    slot_bytes: usize,
    free: AtomicU64,
    slots: usize,
}

/// One claimed staging buffer; returned to the pool on drop.
pub struct StagingSlot<'a> {
    pool: &'a StagingPool,
    index: usize,
}

impl StagingPool {
    /// A pool of `slots` (at most 64) buffers of `slot_bytes` each.
    pub fn new(slots: usize, slot_bytes: usize) -> Result<StagingPool, StoreError> {
        Self::with_options(slots, slot_bytes, false)
    }

    /// A pool of 2 MiB buffers, aligned and advised for transparent huge
    /// pages: each buffer is populated with one huge page when possible.
    pub fn huge(slots: usize) -> Result<StagingPool, StoreError> {
        Self::with_options(slots, 2 << 20, true)
    }

    fn with_options(slots: usize, slot_bytes: usize, thp: bool) -> Result<StagingPool, StoreError> {
        let slots = slots.clamp(1, 64);
        let (map, _) = Mapping::anonymous(
            slots * slot_bytes,
            &MapOptions {
                dontfork: true,
                align: if thp { 2 << 20 } else { 0 },
                ..Default::default()
            },
        )
        .map_err(|e| StoreError::Create(e.to_string()))?;
        if thp {
            map.advise(0, map.len(), tiermem_sys::mm::Advice::HugePage)
                .map_err(|e| StoreError::Create(e.to_string()))?;
        }
        let free = if slots == 64 {
            u64::MAX
        } else {
            (1u64 << slots) - 1
        };
        Ok(StagingPool {
            map,
            slot_bytes,
            free: AtomicU64::new(free),
            slots,
        })
    }

    /// Claims a buffer, spinning and yielding while all are in use.
    pub fn claim(&self) -> StagingSlot<'_> {
        let backoff = Backoff::new();
        loop {
            let f = self.free.load(Ordering::Relaxed);
            if f != 0 {
                let i = f.trailing_zeros() as usize;
                // Acquire: the previous user's release of this slot (and its
                // last copy out of it) happens before our use.
                if self
                    .free
                    .compare_exchange_weak(f, f & !(1 << i), Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return StagingSlot { pool: self, index: i };
                }
            }
            backoff.snooze();
        }
    }

    /// Number of buffers.
    pub fn slots(&self) -> usize {
        self.slots
    }
}

impl StagingSlot<'_> {
    /// The pool's mapping.
    pub fn mapping(&self) -> &Mapping {
        &self.pool.map
    }
    /// Offset of this buffer in the mapping.
    pub fn offset(&self) -> usize {
        self.index * self.pool.slot_bytes
    }
    /// Size of the buffer.
    pub fn len(&self) -> usize {
        self.pool.slot_bytes
    }
    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for StagingSlot<'_> {
    fn drop(&mut self) {
        // Release: our copies out of the slot finish before the next claim.
        self.pool.free.fetch_or(1 << self.index, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_slots_are_exclusive_and_returned() {
        let p = StagingPool::new(3, 4096).unwrap();
        let a = p.claim();
        let b = p.claim();
        let c = p.claim();
        let mut offs = [a.offset(), b.offset(), c.offset()];
        offs.sort_unstable();
        assert_eq!(offs, [0, 4096, 8192]);
        drop(b);
        let d = p.claim();
        assert_eq!(d.len(), 4096);
        assert_eq!(p.slots(), 3);
        let e = StoreError::Write {
            offset: 0,
            len: 1,
            errno: Errno(libc::ENOSPC),
        };
        assert!(e.is_full());
        assert_eq!(e.errno(), Some(Errno(libc::ENOSPC)));
    }
}
