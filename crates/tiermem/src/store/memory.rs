//! The memory far store: a memfd-backed pool, sparse, in this process.
//!
//! Stands for the host memory of paper 1. Evicting copies the page into
//! the pool (the paper's DMA); filling hands UFFDIO_COPY a source range
//! inside the pool, so a fill is one copy with no staging buffer.

use super::{FarStore, StagingSlot, StoreError};
use std::os::fd::AsFd;
use tiermem_sys::memfd::Memfd;
use tiermem_sys::mm::{MapOptions, Mapping, MemRange};

/// A memfd pool as large as the region.
pub struct MemoryStore {
    // Field order: the mapping is unmapped before the memfd is closed.
    map: Mapping,
    memfd: Memfd,
    capacity: u64,
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
        Ok(MemoryStore { map, memfd, capacity })
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
        // Evicted data goes cold: stream it past the caches.
        self.map.copy_in_streaming(offset as usize, src);
        Ok(())
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
        assert!(!s.needs_staging());
        assert!(s.describe().contains("memory"));
    }
}
