//! The memory far store: a memfd-backed pool, sparse, in this process.
//!
//! Stands for the host memory of paper 1. Evicting copies the page into
//! the pool (the paper's DMA); filling hands UFFDIO_COPY a source range
//! inside the pool, so a fill is one copy with no staging buffer.
//!
//! The pool is as large as the region (twice the machine's memory for the
//! transparent heap), and its mapping is opened chunk by chunk as pages
//! are first stored there, `PROT_NONE` until then: a memory lock the
//! program takes with a raw `mlockall` system call populates every
//! accessible mapping, which here allocated the whole pool (see
//! `tiermem_sys::locks`). Only stored pages are ever read back.

use super::{FarStore, StagingSlot, StoreError};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use tiermem_sys::memfd::Memfd;
use tiermem_sys::mm::{MapOptions, Mapping, MemRange, Protection};
use tiermem_sys::zeroed::ZeroedArray;

/// Bytes of the pool's mapping opened at a time.
const CHUNK: usize = 2 << 20;

/// A memfd pool as large as the region.
pub struct MemoryStore {
    // Field order: the mapping is unmapped before the memfd is closed.
    map: Mapping,
    memfd: Memfd,
    capacity: u64,
    /// One bit per chunk of the mapping: set once it is readable and
    /// writable.
    open: ZeroedArray<AtomicU64>,
}

impl MemoryStore {
    /// A pool of `capacity` bytes (no memory is used until pages are stored).
    pub fn new(capacity: u64) -> Result<MemoryStore, StoreError> {
        let memfd =
            Memfd::create("tiermem-far", false).map_err(|e| StoreError::Create(format!("memfd: {e}")))?;
        memfd
            .set_len(capacity)
            .map_err(|e| StoreError::Create(format!("memfd size {capacity}: {e}")))?;
        let (map, _) = Mapping::shared(
            memfd.as_fd(),
            0,
            capacity as usize,
            4096,
            &MapOptions {
                noreserve: true,
                dontfork: true,
                ..Default::default()
            },
        )
        .map_err(|e| StoreError::Create(e.to_string()))?;
        map.protect(0, map.len(), Protection::None)
            .map_err(|e| StoreError::Create(e.to_string()))?;
        let open = ZeroedArray::new(map.len().div_ceil(CHUNK).div_ceil(64))
            .map_err(|e| StoreError::Create(e.to_string()))?;
        Ok(MemoryStore {
            map,
            memfd,
            capacity,
            open,
        })
    }

    /// Opens the chunks `[offset, offset + len)` lies in. Lock-free (it
    /// runs in fault handlers): two threads may open a chunk at once, which
    /// is the same `mprotect` twice.
    fn open(&self, offset: usize, len: usize) -> Result<(), StoreError> {
        for c in offset / CHUNK..(offset + len).div_ceil(CHUNK) {
            let (word, bit) = (&self.open[c / 64], 1u64 << (c % 64));
            // Acquire: pairs with the Release below; a chunk seen open is.
            if word.load(Ordering::Acquire) & bit != 0 {
                continue;
            }
            let at = c * CHUNK;
            let len = CHUNK.min(self.map.len() - at);
            if let Err(e) = self.map.open(at, len) {
                let errno = match e {
                    tiermem_sys::mm::MmError::Protect { errno, .. } => errno,
                    _ => tiermem_sys::Errno(libc::ENOMEM),
                };
                return Err(StoreError::Write {
                    offset: at as u64,
                    len,
                    errno,
                });
            }
            // Release: the mprotect is done before anyone skips it.
            word.fetch_or(bit, Ordering::Release);
        }
        Ok(())
    }
}

impl FarStore for MemoryStore {
    fn needs_staging(&self) -> bool {
        false
    }

    fn fetch<'a>(
        &'a self,
        offset: u64,
        len: usize,
        _staging: Option<&'a StagingSlot<'a>>,
    ) -> Result<MemRange<'a>, StoreError> {
        Ok(self.map.range(offset as usize, len))
    }

    fn store(&self, offset: u64, src: MemRange<'_>) -> Result<(), StoreError> {
        self.open(offset as usize, src.len())?;
        // Evicted data goes cold: stream it past the caches.
        self.map.copy_in_streaming(offset as usize, src);
        Ok(())
    }

    fn store_from_pipe(
        &self,
        offset: u64,
        pipe: &tiermem_sys::splice::Pipe,
        len: usize,
    ) -> Option<Result<(), StoreError>> {
        Some(self.open(offset as usize, len).map(|()| {
            // The bytes are queued and the destination is open memory of
            // the store's: a failure here is a bug, and the data is gone.
            pipe.read_exact_into(&self.map, offset as usize, len)
                .expect("reading evicted pages from the splice pipe into the memory store")
        }))
    }

    fn read_into(&self, offset: u64, len: usize, dst: &Mapping, dst_offset: usize) -> Result<(), StoreError> {
        dst.copy_in(dst_offset, self.map.range(offset as usize, len));
        Ok(())
    }

    fn read_after_fork(
        &self,
        offset: u64,
        len: usize,
        dst: &Mapping,
        dst_offset: usize,
    ) -> Result<(), StoreError> {
        // The pool's mapping is not inherited; its memfd is.
        super::read_fully(self.memfd.as_fd(), offset, len, dst, dst_offset, None)
    }

    fn same_as(&self, offset: u64, src: MemRange<'_>) -> Option<bool> {
        Some(self.map.range(offset as usize, src.len()).same_bytes(src))
    }

    fn compares_in_place(&self) -> bool {
        true
    }

    fn forget(&self, offset: u64, len: u64) {
        // Best effort: failing to free space loses nothing.
        let _ = self.memfd.punch_hole(offset, len);
    }

    fn describe(&self) -> String {
        format!("memory (memfd pool of {} bytes)", self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_fetches_in_place() {
        let s = MemoryStore::new(1 << 20).unwrap();
        let page = [9u8; 4096];
        s.store(8192, MemRange::from_bytes(&page)).unwrap();
        let r = s.fetch(8192, 4096, None).unwrap();
        let mut out = [0u8; 4096];
        r.copy_to(&mut out);
        assert_eq!(out, page);
        s.forget(8192, 4096);
        assert!(s.fetch(8192, 4096, None).unwrap().is_zero());
        // Only the chunk stored to is open: the rest is address space only.
        assert_eq!(s.open[0].load(Ordering::Relaxed), 1);
        assert!(!s.needs_staging());
        assert!(s.describe().contains("memory"));
    }
}
