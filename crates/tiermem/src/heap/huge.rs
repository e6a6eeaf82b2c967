//! The huge-page backing of the transparent heap (paper 3): a reserved
//! range whose chunks are mapped on first use with the largest page size
//! the pool can give, falling back 1g -> 2m -> THP -> 4k with one warning
//! per fallback and a counter, never a crash (hugetlb pages are reserved
//! when a chunk is mapped, so a short pool is seen there, not as a SIGBUS
//! at a later fault).

use crate::config::HugeKind;
use crate::Error;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use tiermem_sys::hugetlb::HugePageSize;
use tiermem_sys::mm::{Advice, Mapping, Protection, UserAccess};

/// Chunks mapped per page kind, and fallbacks.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct HugeStats {
    /// Bytes mapped with 1 GiB pages.
    pub bytes_1g: u64,
    /// Bytes mapped with 2 MiB pages.
    pub bytes_2m: u64,
    /// Bytes mapped for transparent huge pages.
    pub bytes_thp: u64,
    /// Bytes mapped with base pages.
    pub bytes_4k: u64,
    /// Chunks that got a smaller page size than asked for.
    pub fallbacks: u64,
}

/// The reserved range and what is mapped in it.
pub(super) struct HugeSpace {
    map: Mapping,
    /// Access for tests that look at the memory.
    #[cfg_attr(not(test), allow(dead_code))]
    user: UserAccess,
    first: HugeKind,
    chunk: usize,
    /// Chunk index -> the page kind it got.
    chunks: Mutex<BTreeMap<usize, HugeKind>>,
    /// Freed byte ranges not zeroed yet (they share a page with memory in
    /// use): start -> length.
    dirty: Mutex<BTreeMap<usize, usize>>,
    mapped: [AtomicU64; 4],
    fallbacks: AtomicU64,
    warned: [AtomicBool; 4],
}

impl HugeSpace {
    /// Reserves `bytes` (rounded up to whole chunks) of address space.
    pub(super) fn reserve(bytes: usize, first: HugeKind) -> Result<HugeSpace, Error> {
        // Chunks are as large as the largest page tried, so that every
        // fallback can still map a whole chunk.
        let chunk = first.page_bytes().max(2 << 20);
        let len = bytes.max(chunk).next_multiple_of(chunk);
        let (map, user) = Mapping::reserve(len, chunk)?;
        Ok(HugeSpace {
            map,
            user,
            first,
            chunk,
            chunks: Mutex::new(BTreeMap::new()),
            dirty: Mutex::new(BTreeMap::new()),
            mapped: Default::default(),
            fallbacks: AtomicU64::new(0),
            warned: Default::default(),
        })
    }

    pub(super) fn base(&self) -> usize {
        self.map.addr()
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn first_kind(&self) -> HugeKind {
        self.first
    }

    /// Maps the chunks `[addr, addr + len)` needs, and zeroes what freed
    /// neighbours left in it. False if no page kind could be mapped.
    pub(super) fn back(&self, addr: usize, len: usize) -> bool {
        let off = addr - self.base();
        let first = off / self.chunk;
        let last = (off + len - 1) / self.chunk;
        {
            let mut chunks = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
            for c in first..=last {
                if chunks.contains_key(&c) {
                    continue;
                }
                let Some(kind) = self.map_chunk(c) else {
                    return false;
                };
                chunks.insert(c, kind);
            }
        }
        self.clean(addr, len);
        true
    }

    /// Maps chunk `c` with the first page kind that works.
    fn map_chunk(&self, c: usize) -> Option<HugeKind> {
        let at = c * self.chunk;
        let start = HugeKind::ORDER.iter().position(|&k| k == self.first).unwrap_or(0);
        for (n, &kind) in HugeKind::ORDER[start..].iter().enumerate() {
            let ok = match kind {
                HugeKind::Huge1G => self
                    .map
                    .replace_huge(at, self.chunk, HugePageSize::Size1G)
                    .is_ok(),
                HugeKind::Huge2M => self
                    .map
                    .replace_huge(at, self.chunk, HugePageSize::Size2M)
                    .is_ok(),
                HugeKind::Thp | HugeKind::Base4K => {
                    let advice = if kind == HugeKind::Thp {
                        Advice::HugePage
                    } else {
                        Advice::NoHugePage
                    };
                    self.map
                        .replace_private(at, self.chunk, Protection::ReadWrite)
                        .is_ok()
                        && (self.map.advise(at, self.chunk, advice).is_ok() || kind == HugeKind::Base4K)
                }
            };
            if ok {
                self.mapped[kind as usize].fetch_add(self.chunk as u64, Ordering::Relaxed);
                if n > 0 {
                    self.fallbacks.fetch_add(1, Ordering::Relaxed);
                    if !self.warned[kind as usize].swap(true, Ordering::Relaxed) {
                        eprintln!(
                            "tiermem: warning: the {} huge page pool is short; heap memory falls back to {} pages \
                             (reserve more with `tiermem hugepages reserve`, or `tiermem run --reserve`)",
                            self.first.name(),
                            kind.name()
                        );
                    }
                }
                return Some(kind);
            }
        }
        None
    }

    /// Zeroes the parts of `[addr, addr + len)` that were freed dirty.
    fn clean(&self, addr: usize, len: usize) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        let end = addr + len;
        let overlapping: Vec<(usize, usize)> = dirty
            .range(..end)
            .rev()
            .take_while(|(&s, &l)| s + l > addr)
            .map(|(&s, &l)| (s, l))
            .collect();
        for (s, l) in overlapping {
            dirty.remove(&s);
            let (a, b) = (s.max(addr), (s + l).min(end));
            self.map.fill(a - self.base(), b - a, 0);
            if s < a {
                dirty.insert(s, a - s);
            }
            if s + l > b {
                dirty.insert(b, s + l - b);
            }
        }
    }

    /// A freed range: whole pages go back (and read as zeros); the parts
    /// that share a page with memory in use are remembered as dirty.
    pub(super) fn release(&self, addr: usize, len: usize) {
        let off = addr - self.base();
        let page = {
            let chunks = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
            chunks
                .get(&(off / self.chunk))
                .map_or(4096, |k| k.page_bytes().min(self.chunk))
        };
        let a = addr.next_multiple_of(page).min(addr + len);
        let b = ((addr + len) / page * page).max(a);
        if b > a {
            self.map.zero(a - self.base(), b - a, page);
        }
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if a > addr {
            dirty.insert(addr, a - addr);
        }
        if addr + len > b {
            dirty.insert(b, addr + len - b);
        }
    }

    /// The range as 64-bit atomics; only backed parts may be touched.
    #[cfg(test)]
    pub(super) fn atomics(&self) -> &[std::sync::atomic::AtomicU64] {
        self.map.user_atomics(&self.user)
    }

    pub(super) fn stats(&self) -> HugeStats {
        let m = |k: HugeKind| self.mapped[k as usize].load(Ordering::Relaxed);
        HugeStats {
            bytes_1g: m(HugeKind::Huge1G),
            bytes_2m: m(HugeKind::Huge2M),
            bytes_thp: m(HugeKind::Thp),
            bytes_4k: m(HugeKind::Base4K),
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
        }
    }
}
