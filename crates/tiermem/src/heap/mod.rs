//! The transparent heap: large allocations of an unmodified program (the
//! preload library's `malloc`, `mmap`, ...) carved out of one reserved
//! range, either a tiered region (paper 1: a near budget over a far store)
//! or huge pages without tiering (paper 3: a static pool of 2 MiB or 1 GiB
//! pages, falling back 1g -> 2m -> THP -> 4k when the pool runs dry).
//!
//! ```no_run
//! use tiermem::heap::{Heap, HeapConfig};
//! let h = Heap::new(HeapConfig::tiered(tiermem::Config::new(64 << 30, 8 << 30)))?;
//! let p = h.alloc(256 << 20, 64).expect("room");   // zeroed, like calloc
//! assert!(h.contains(p));
//! h.free(p);                                         // near memory and far space given back
//! # Ok::<(), tiermem::Error>(())
//! ```
//!
//! Allocation is best fit over extents, page granular, in arenas: one for
//! large objects (an eighth of an arena's range or more) and one per CPU
//! for the rest, each a slice of the range under its own short lock, so
//! that threads on different CPUs rarely meet. Freed ranges are discarded
//! (tiered: the pages go back to the never-written state; huge: whole huge
//! pages are dropped), so memory handed out is always zero and `calloc`
//! needs no `memset` (on the huge backend, ranges that share a huge page
//! with a freed neighbour are zeroed explicitly). A range is discarded
//! before its arena may hand it out again, never after.
//!
//! A tiered heap keeps the last few freed ranges as they are, pages and
//! all (at most a sixteenth of its near budget, 64 MiB), for the next
//! `malloc` of the same length ([`Heap::alloc_uninit`]): a program that
//! allocates and frees a large temporary array every step faults it in
//! once, as glibc's arenas do, not every step. Bookkeeping lives outside
//! the heap's range, so it never faults.

mod extent;
mod huge;

pub use crate::config::HugeKind;
use crate::config::{Config, PageSize};
use crate::region::{NearBudget, Region};
use crate::stats::RegionStats;
use crate::Error;
use extent::Extents;
pub use huge::HugeStats;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tiermem_sys::zeroed::ZeroedArray;

/// What backs the heap.
#[derive(Clone, Debug)]
pub enum HeapBacking {
    /// A tiered region with this configuration (`virt_bytes` is the
    /// heap's size, `near_bytes` its budget).
    Tiered(Config),
    /// Huge pages without tiering: `bytes` of address space, backed on
    /// demand by pages of `kind`, falling back to smaller ones.
    Huge {
        /// Address space reserved.
        bytes: u64,
        /// The page size tried first.
        kind: HugeKind,
    },
}

/// How to build a heap.
#[derive(Clone, Debug)]
pub struct HeapConfig {
    /// The backing.
    pub backing: HeapBacking,
    /// Arenas for ordinary allocations (0: one per online CPU, at most 8).
    pub arenas: usize,
    /// A near budget shared with other regions (tiered heaps; None: the
    /// configuration's own `near_bytes`).
    pub budget: Option<NearBudget>,
}

impl HeapConfig {
    /// A tiered heap over a region made with `config`.
    pub fn tiered(config: Config) -> HeapConfig {
        HeapConfig {
            backing: HeapBacking::Tiered(config),
            arenas: 0,
            budget: None,
        }
    }

    /// A huge-page heap of `bytes` of address space, pages of `kind` first.
    pub fn huge(bytes: u64, kind: HugeKind) -> HeapConfig {
        HeapConfig {
            backing: HeapBacking::Huge { bytes, kind },
            arenas: 0,
            budget: None,
        }
    }
}

enum Backing {
    Tiered(Region),
    Huge(huge::HugeSpace),
}

/// A heap over one reserved range. All methods take `&self` and are
/// thread-safe.
pub struct Heap {
    backing: Backing,
    base: usize,
    len: usize,
    unit: usize,
    /// Arena 0 takes large objects; the others, one per CPU, the rest.
    arenas: Box<[Mutex<Extents>]>,
    /// Objects of at least this size go to arena 0.
    large: usize,
    /// Arena `k` covers `[base + k * slice, base + (k + 1) * slice)`,
    /// arena 0 the first half of the range.
    slice: usize,
    /// Freed ranges kept for `alloc_uninit`, and the most they may hold
    /// in bytes (0: none kept).
    retained: Mutex<Retained>,
    retain_limit: usize,
    /// Tiered: one bit per [`OPEN_CHUNK`] of the range, set once it is
    /// accessible. The range is `PROT_NONE` until allocations reach it, so
    /// that a raw `mlockall` system call finds nothing there to populate
    /// (through the fault handler, it filled the whole reservation).
    open: Option<ZeroedArray<AtomicU64>>,
}

/// Bytes of a tiered heap's range opened at a time.
const OPEN_CHUNK: usize = 2 << 20;

/// Freed ranges kept with their pages: still allocated in their arena,
/// oldest first.
#[derive(Default)]
struct Retained {
    ranges: [(usize, usize); RETAIN_RANGES],
    n: usize,
    bytes: usize,
}

/// Freed ranges a heap keeps at most.
const RETAIN_RANGES: usize = 8;
/// Bytes they hold at most (and a sixteenth of the near budget).
const RETAIN_MAX_BYTES: u64 = 64 << 20;

impl Retained {
    fn holds(&self, addr: usize) -> bool {
        self.ranges[..self.n].iter().any(|&(a, _)| a == addr)
    }

    /// The newest kept range of length `len` aligned to `align`, taken out.
    fn take(&mut self, len: usize, align: usize) -> Option<usize> {
        let i = (0..self.n)
            .rev()
            .find(|&i| self.ranges[i].1 == len && self.ranges[i].0.is_multiple_of(align))?;
        let (addr, len) = self.ranges[i];
        self.ranges.copy_within(i + 1..self.n, i);
        self.n -= 1;
        self.bytes -= len;
        Some(addr)
    }

    /// Keeps `(addr, len)`, pushing the oldest ranges out until at most
    /// `limit` bytes are kept; the pushed-out ones go to `out`. Returns how
    /// many.
    fn keep(
        &mut self,
        addr: usize,
        len: usize,
        limit: usize,
        out: &mut [(usize, usize); RETAIN_RANGES],
    ) -> usize {
        let mut pushed = 0;
        while self.n > 0 && (self.n == RETAIN_RANGES || self.bytes + len > limit) {
            out[pushed] = self.ranges[0];
            self.bytes -= self.ranges[0].1;
            self.ranges.copy_within(1..self.n, 0);
            self.n -= 1;
            pushed += 1;
        }
        self.ranges[self.n] = (addr, len);
        self.n += 1;
        self.bytes += len;
        pushed
    }
}

impl std::fmt::Debug for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heap")
            .field("base", &format_args!("{:#x}", self.base))
            .field("len", &self.len)
            .field("arenas", &self.arenas.len())
            .finish()
    }
}

/// A snapshot of what the heap holds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct HeapStats {
    /// Bytes allocated now (page-rounded).
    pub allocated_bytes: u64,
    /// Allocations live now.
    pub allocations: u64,
    /// Freed bytes kept with their pages for the next `malloc` of their
    /// length (not in `allocated_bytes`).
    pub retained_bytes: u64,
    /// The tiered region's statistics (tiered heaps).
    pub region: Option<RegionStats>,
    /// Huge pages by size, and fallbacks (huge heaps).
    pub huge: Option<HugeStats>,
}

impl Heap {
    /// Reserves the range and sets up the arenas.
    pub fn new(config: HeapConfig) -> Result<Heap, Error> {
        let (backing, base, len, unit, retain_limit) = match config.backing {
            HeapBacking::Tiered(c) => {
                let near = config.budget.as_ref().map_or(c.near_bytes, NearBudget::bytes);
                let r = match &config.budget {
                    Some(b) => Region::with_budget(c, b)?,
                    None => Region::new(c)?,
                };
                let (base, len, unit) = (r.base(), r.len(), r.page_bytes());
                let retain = (near / 16).min(RETAIN_MAX_BYTES) as usize;
                r.close()?;
                (Backing::Tiered(r), base, len, unit, retain)
            }
            HeapBacking::Huge { bytes, kind } => {
                let h = huge::HugeSpace::reserve(bytes as usize, kind)?;
                let (base, len) = (h.base(), h.len());
                (Backing::Huge(h), base, len, 4096, 0)
            }
        };
        let cpus = tiermem_sys::thread::online_cpus().clamp(1, 8);
        let n = if config.arenas == 0 {
            cpus
        } else {
            config.arenas.clamp(1, 64)
        };
        // Half the range for large objects, the rest in equal slices.
        let half = (len / 2) / unit * unit;
        let slice = ((len - half) / n) / unit * unit;
        let mut arenas = Vec::with_capacity(n + 1);
        arenas.push(Mutex::new(Extents::new(base, half, unit)));
        for k in 0..n {
            arenas.push(Mutex::new(Extents::new(base + half + k * slice, slice, unit)));
        }
        let open = match backing {
            Backing::Tiered(_) => Some(ZeroedArray::new(len.div_ceil(OPEN_CHUNK).div_ceil(64))?),
            Backing::Huge(_) => None,
        };
        Ok(Heap {
            open,
            backing,
            base,
            len,
            unit,
            large: (slice / 8).max(unit),
            slice,
            arenas: arenas.into_boxed_slice(),
            retained: Mutex::new(Retained::default()),
            retain_limit,
        })
    }

    /// Whether `addr` lies in the heap's range.
    pub fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base) < self.len
    }

    /// Start of the heap's range.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Length of the heap's range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The page size of the heap's extents.
    pub fn unit(&self) -> usize {
        self.unit
    }

    /// The tiered region behind the heap, if tiered.
    pub fn region(&self) -> Option<&Region> {
        match &self.backing {
            Backing::Tiered(r) => Some(r),
            Backing::Huge(_) => None,
        }
    }

    fn arena_of(&self, addr: usize) -> usize {
        let off = addr - self.base;
        let half = self.len / 2 / self.unit * self.unit;
        if off < half {
            0
        } else {
            (1 + (off - half) / self.slice.max(1)).min(self.arenas.len() - 1)
        }
    }

    fn lock(&self, k: usize) -> std::sync::MutexGuard<'_, Extents> {
        self.arenas[k].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn retained(&self) -> std::sync::MutexGuard<'_, Retained> {
        self.retained.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Like [`Heap::alloc`], but the memory may hold what a freed
    /// allocation left (for `malloc`, not `calloc`): a kept freed range of
    /// the same length comes first, with its pages already in place.
    pub fn alloc_uninit(&self, size: usize, align: usize) -> Option<usize> {
        if self.retain_limit > 0 {
            let len = extent::round_len(size, self.unit)?;
            let _blocked = tiermem_sys::signal::AsyncSignalsBlocked::new();
            if let Some(addr) = self.retained().take(len, align.max(self.unit)) {
                return Some(addr);
            }
        }
        self.alloc(size, align)
    }

    /// Allocates `size` bytes aligned to `align` (a power of two); the
    /// memory reads as zeros. None when the heap is full.
    pub fn alloc(&self, size: usize, align: usize) -> Option<usize> {
        let n = self.arenas.len() - 1;
        let first = if size >= self.large {
            0
        } else {
            1 + tiermem_sys::thread::current_cpu().unwrap_or(0) % n
        };
        let _blocked = tiermem_sys::signal::AsyncSignalsBlocked::new();
        // The chosen arena, then the others.
        for k in (0..=n).map(|i| (first + i) % (n + 1)) {
            let got = self.lock(k).alloc(size, align);
            if let Some((addr, len)) = got {
                if self.back(addr, len) {
                    return Some(addr);
                }
                self.lock(k).free(addr);
                return None;
            }
        }
        None
    }

    /// Makes `[addr, addr + len)` usable and zero (huge backing: maps the
    /// huge pages it needs, zeroes what a freed neighbour left).
    fn back(&self, addr: usize, len: usize) -> bool {
        match &self.backing {
            Backing::Tiered(r) => self.open_chunks(r, addr, len),
            Backing::Huge(h) => h.back(addr, len),
        }
    }

    /// Opens the chunks of a tiered heap's range that `[addr, addr + len)`
    /// lies in (see `open`). Two threads may open a chunk at once: the same
    /// `mprotect` twice.
    fn open_chunks(&self, r: &Region, addr: usize, len: usize) -> bool {
        let Some(open) = &self.open else {
            return true;
        };
        let off = addr - self.base;
        for c in off / OPEN_CHUNK..(off + len).div_ceil(OPEN_CHUNK) {
            let (word, bit) = (&open[c / 64], 1u64 << (c % 64));
            // Acquire: pairs with the Release below; a chunk seen open is.
            if word.load(Ordering::Acquire) & bit != 0 {
                continue;
            }
            let at = c * OPEN_CHUNK;
            if r.open(at, OPEN_CHUNK.min(self.len - at)).is_err() {
                return false;
            }
            // Release: the mprotect is done before anyone skips it.
            word.fetch_or(bit, Ordering::Release);
        }
        true
    }

    /// Frees the allocation at `addr`. False if the heap did not hand it
    /// out (a double free, or an address inside an allocation).
    pub fn free(&self, addr: usize) -> bool {
        if !self.contains(addr) {
            return false;
        }
        let _blocked = tiermem_sys::signal::AsyncSignalsBlocked::new();
        let Some(len) = self.lock(self.arena_of(addr)).len_of(addr) else {
            return false;
        };
        if len > self.retain_limit {
            return self.give_back(addr, len);
        }
        let mut out = [(0, 0); RETAIN_RANGES];
        let pushed = {
            let mut r = self.retained();
            if r.holds(addr) {
                // Freed already.
                return false;
            }
            r.keep(addr, len, self.retain_limit, &mut out)
        };
        for &(a, l) in &out[..pushed] {
            self.give_back(a, l);
        }
        true
    }

    /// Discards a freed range, then returns it to its arena: in that
    /// order, so that a discard never hits the range's next owner.
    fn give_back(&self, addr: usize, len: usize) -> bool {
        self.release(addr, len);
        self.lock(self.arena_of(addr)).free(addr).is_some()
    }

    /// Gives the memory of a freed range back (it reads as zeros next time).
    fn release(&self, addr: usize, len: usize) {
        match &self.backing {
            // A forked child's copy of the heap is plain memory, and the far
            // store it shares with the parent must not be touched.
            Backing::Tiered(r) if r.is_forked_copy() => r.zero_in_child(addr - self.base, len),
            Backing::Tiered(r) => {
                let _ = r.discard(addr - self.base, len);
            }
            Backing::Huge(h) => h.release(addr, len),
        }
    }

    /// Bytes usable at `addr` (an address the heap handed out).
    pub fn usable_size(&self, addr: usize) -> Option<usize> {
        if !self.contains(addr) {
            return None;
        }
        self.lock(self.arena_of(addr)).len_of(addr)
    }

    /// The allocation containing `addr`: its start and length.
    pub fn allocation_containing(&self, addr: usize) -> Option<(usize, usize)> {
        if !self.contains(addr) {
            return None;
        }
        self.lock(self.arena_of(addr)).containing(addr)
    }

    /// Resizes the allocation at `addr` to `size` bytes without moving it,
    /// if the space after it is free (or it shrinks). True on success.
    pub fn resize_in_place(&self, addr: usize, size: usize) -> bool {
        if !self.contains(addr) {
            return false;
        }
        let _blocked = tiermem_sys::signal::AsyncSignalsBlocked::new();
        let k = self.arena_of(addr);
        // A shrink discards the tail before the arena may hand it out.
        let old = self.lock(k).len_of(addr);
        let new = extent::round_len(size, self.unit);
        if let Some((old, new)) = old.zip(new).filter(|(old, new)| new < old) {
            self.release(addr + new, old - new);
        }
        let r = self.lock(k).resize_in_place(addr, size);
        match r {
            Some((old, new)) if new < old => true,
            Some((old, new)) if new > old => {
                if self.back(addr + old, new - old) {
                    true
                } else {
                    self.lock(k).resize_in_place(addr, old);
                    false
                }
            }
            Some(_) => true,
            None => false,
        }
    }

    /// The allocation the program holds that contains `addr` (not one it
    /// freed that the heap keeps for reuse): its start and length.
    pub fn holding(&self, addr: usize) -> Option<(usize, usize)> {
        let (s, l) = self.allocation_containing(addr)?;
        (!self.retained().holds(s)).then_some((s, l))
    }

    /// Whether every page of `[addr, addr + len)` lies in allocations the
    /// program holds (one or several, end to end).
    pub fn owns(&self, addr: usize, len: usize) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        if len == 0 || !self.contains(addr) || !self.contains(end - 1) {
            return false;
        }
        let blocks = self.allocations_in(addr, end);
        let r = self.retained();
        let mut at = addr;
        for (s, l) in blocks {
            if s > at || r.holds(s) {
                return false;
            }
            at = s + l;
        }
        at >= end
    }

    /// `munmap(2)` of `[addr, addr + len)` for the allocations it covers, as
    /// the kernel unmaps mappings: an allocation covered whole is freed; a
    /// covered part (whole pages of the heap's unit, and the tail up to the
    /// allocation's end) is cut off, so that the allocation shrinks, starts
    /// later or splits in two, and goes back to its arena, discarded first.
    /// What the program does not hold there is left alone, as `munmap`
    /// leaves holes alone.
    pub fn unmap(&self, addr: usize, len: usize) {
        let Some(end) = addr.checked_add(len) else {
            return;
        };
        let _blocked = tiermem_sys::signal::AsyncSignalsBlocked::new();
        let u = self.unit;
        for (s, l) in self.allocations_in(addr, end) {
            // Whole units only; a range that reaches into the allocation's
            // last unit takes the tail (the program's length may end inside
            // that unit).
            let x = if addr <= s { s } else { addr.next_multiple_of(u) };
            let y = if end.next_multiple_of(u) >= s + l {
                s + l
            } else {
                end / u * u
            };
            if x >= y || self.retained().holds(s) {
                continue;
            }
            if x == s && y == s + l {
                self.free(s);
            } else {
                // Discarded before its arena may hand it out again.
                self.release(x, y - x);
                self.lock(self.arena_of(s)).cut(s, x, y);
            }
        }
    }

    /// The allocations overlapping `[a, b)` (kept freed ones included), in
    /// address order.
    fn allocations_in(&self, a: usize, b: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for k in 0..self.arenas.len() {
            self.lock(k).overlapping(a, b, &mut out);
        }
        out.sort_unstable();
        out
    }

    /// Drops the contents of `[addr, addr + len)` inside an allocation
    /// (whole pages only; `madvise(MADV_DONTNEED)` and partial `munmap` of
    /// heap memory): it reads as zeros afterwards.
    pub fn discard(&self, addr: usize, len: usize) {
        let a = addr.next_multiple_of(self.unit);
        let b = (addr + len) / self.unit * self.unit;
        if b > a && self.contains(a) && self.contains(b - 1) {
            // A held range (a stack) reads as zeros too, and stays held.
            let held = match &self.backing {
                Backing::Tiered(r) if !r.is_forked_copy() => r.held_in(a - self.base, b - a),
                _ => Vec::new(),
            };
            self.release(a, b - a);
            if let Backing::Tiered(r) = &self.backing {
                for (o, l) in held {
                    r.hold(o, l);
                }
            }
        }
    }

    /// What the heap holds now.
    pub fn stats(&self) -> HeapStats {
        let mut s = HeapStats::default();
        for k in 0..self.arenas.len() {
            let g = self.lock(k);
            s.allocated_bytes += g.used_bytes as u64;
            s.allocations += g.count() as u64;
        }
        {
            let r = self.retained();
            s.retained_bytes = r.bytes as u64;
            // Saturating: the arenas were read a moment earlier.
            s.allocated_bytes = s.allocated_bytes.saturating_sub(s.retained_bytes);
            s.allocations = s.allocations.saturating_sub(r.n as u64);
        }
        match &self.backing {
            Backing::Tiered(r) => s.region = Some(r.stats()),
            Backing::Huge(h) => s.huge = Some(h.stats()),
        }
        s
    }

    /// The page size used (tiered) or tried first (huge).
    pub fn page_size(&self) -> PageSize {
        match &self.backing {
            Backing::Tiered(r) => r.config().page_size,
            Backing::Huge(h) => h.first_kind().page_size(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiered(virt: u64, near: u64) -> Heap {
        Heap::new(HeapConfig::tiered(Config::new(virt, near))).unwrap()
    }

    /// A mover's prefetch stream runs ahead of a sweep past the end of the
    /// allocation, into chunks of the range still `PROT_NONE`: it filled
    /// pages there, and the mover's write-back of one died of SIGSEGV
    /// (`tiermem run --movers 1`, every other run). It fills only opened
    /// chunks now.
    #[test]
    fn prefetch_stays_in_the_opened_chunks() {
        let mut c = Config::new(1 << 30, 8 << 20);
        c.movers = 1;
        let h = Heap::new(HeapConfig::tiered(c)).unwrap();
        let len = 12 << 20;
        for round in 0..3u64 {
            let a = h.alloc(len, 4096).unwrap();
            let r = h.region().unwrap();
            let off = a - h.base();
            let words = r.as_atomic_u64();
            let first = off / 8;
            for i in 0..len / 8 {
                words[first + i].store(round ^ i as u64, Ordering::Relaxed);
            }
            let bad = (0..len / 8)
                .filter(|&i| words[first + i].load(Ordering::Relaxed) != round ^ i as u64)
                .count();
            assert_eq!(bad, 0);
            // Nothing past the allocation's chunks was filled.
            let reach = (off + len).div_ceil(OPEN_CHUNK) * OPEN_CHUNK;
            let filled = r.resident_in(reach, h.len() - reach);
            assert_eq!(filled, 0, "pages filled in closed chunks");
            h.free(a);
        }
    }

    #[test]
    fn allocations_are_zero_disjoint_and_reusable() {
        let h = tiered(64 << 20, 8 << 20);
        let sizes = [100 << 10, 3 << 20, 1 << 20, 8 << 20, 5000];
        let ptrs: Vec<usize> = sizes.iter().map(|&s| h.alloc(s, 64).unwrap()).collect();
        let r = h.region().unwrap();
        let w = r.as_atomic_u64();
        for (&p, &s) in ptrs.iter().zip(&sizes) {
            assert!(h.contains(p) && p % 4096 == 0);
            assert!(h.usable_size(p).unwrap() >= s);
            let first = (p - h.base()) / 8;
            for i in (first..first + s / 8).step_by(512) {
                assert_eq!(w[i].load(std::sync::atomic::Ordering::Relaxed), 0);
                w[i].store(0xdead, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let mut sorted: Vec<(usize, usize)> = ptrs.iter().zip(&sizes).map(|(&p, &s)| (p, s)).collect();
        sorted.sort();
        for pair in sorted.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "overlap {pair:?}");
        }
        for &p in &ptrs {
            assert!(h.free(p));
            assert!(!h.free(p), "double free refused");
        }
        // Freed memory comes back zeroed.
        let p = h.alloc(3 << 20, 4096).unwrap();
        let first = (p - h.base()) / 8;
        assert!((first..first + (3 << 20) / 8)
            .step_by(512)
            .all(|i| w[i].load(std::sync::atomic::Ordering::Relaxed) == 0));
        assert_eq!(h.stats().allocations, 1);
    }

    #[test]
    fn resize_in_place_keeps_contents() {
        let h = tiered(64 << 20, 64 << 20);
        let p = h.alloc(1 << 20, 4096).unwrap();
        let w = h.region().unwrap().as_atomic_u64();
        let i = (p - h.base()) / 8;
        w[i].store(7, std::sync::atomic::Ordering::Relaxed);
        assert!(h.resize_in_place(p, 2 << 20));
        assert_eq!(h.usable_size(p), Some(2 << 20));
        assert_eq!(w[i].load(std::sync::atomic::Ordering::Relaxed), 7);
        assert!(h.resize_in_place(p, 4096));
        assert_eq!(h.usable_size(p), Some(4096));
        assert!(!h.free(p + 4096));
        assert!(h.free(p));
    }

    /// `munmap` of parts of allocations: a middle splits one in two, a head
    /// or tail shrinks it, a whole one is freed, kept freed ranges are not
    /// the program's; the cut parts are discarded and can be reused.
    #[test]
    fn unmap_cuts_allocations_as_munmap_cuts_mappings() {
        use std::sync::atomic::Ordering::Relaxed;
        const U: usize = 4096;
        let h = tiered(256 << 20, 256 << 20);
        let w = h.region().unwrap().as_atomic_u64();
        let word = |addr: usize| &w[(addr - h.base()) / 8];
        let p = h.alloc(64 * U, 4096).unwrap();
        for off in (0..64 * U).step_by(U) {
            word(p + off).store(off as u64 + 1, Relaxed);
        }
        assert!(h.owns(p, 64 * U) && !h.owns(p, 65 * U));
        // The middle: two allocations.
        h.unmap(p + 16 * U, 8 * U);
        assert_eq!(h.holding(p + U), Some((p, 16 * U)));
        assert_eq!(h.holding(p + 16 * U), None);
        assert_eq!(h.holding(p + 30 * U), Some((p + 24 * U, 40 * U)));
        assert!(!h.owns(p, 64 * U) && h.owns(p + 24 * U, 40 * U));
        // A head and a tail; an unmap across the hole and a partial unit.
        h.unmap(p + 24 * U, 4 * U);
        h.unmap(p + 60 * U - 100, 4 * U + 100);
        assert_eq!(h.holding(p + 30 * U), Some((p + 28 * U, 32 * U)));
        h.unmap(p + 12 * U, 16 * U + 1);
        assert_eq!(h.holding(p), Some((p, 12 * U)));
        assert_eq!(
            h.holding(p + 28 * U),
            Some((p + 28 * U, 32 * U)),
            "a partial unit stays"
        );
        assert_eq!(h.stats().allocated_bytes as usize, 44 * U);
        // What stayed kept its data.
        for off in (0..12 * U).chain(28 * U..60 * U).step_by(U) {
            assert_eq!(word(p + off).load(Relaxed), off as u64 + 1, "{off:#x}");
        }
        // Cut parts come back zeroed.
        let q = h.alloc(4 * U, 4096).unwrap();
        assert!((0..4 * U).step_by(8).all(|off| word(q + off).load(Relaxed) == 0));
        // A whole allocation and holes: freed; a freed range kept for
        // reuse is not the program's (not unmapped twice).
        let k = h.alloc_uninit(8 * U, 4096).unwrap();
        assert!(h.free(k));
        assert_eq!(h.holding(k), None);
        assert!(!h.owns(k, U));
        h.unmap(k, 8 * U);
        assert_eq!(h.alloc_uninit(8 * U, 4096), Some(k), "still kept");
        h.unmap(p, 64 * U);
        h.unmap(k, 8 * U);
        h.unmap(q, 4 * U);
        assert_eq!(h.stats().allocated_bytes, 0);
        assert_eq!(h.stats().allocations, 0);
    }

    /// The huge backing falls back when the pool is short, and memory it
    /// hands out is zero also after a neighbour sharing its page was freed.
    #[test]
    fn huge_heap_falls_back_and_zeroes() {
        use std::sync::atomic::Ordering::Relaxed;
        let free_1g = crate::hugepages::pool(tiermem_sys::hugetlb::HugePageSize::Size1G).free;
        let h = Heap::new(HeapConfig::huge(4 << 30, HugeKind::Huge1G)).unwrap();
        let Backing::Huge(space) = &h.backing else {
            unreachable!()
        };
        let w = space.atomics();
        let word = |addr: usize| &w[(addr - h.base()) / 8];
        let a = h.alloc(3 << 20, 4096).unwrap();
        let b = h.alloc(5 << 20, 4096).unwrap();
        let s = h.stats().huge.unwrap();
        if free_1g == 0 {
            assert!(s.fallbacks > 0, "{s:?}");
        }
        assert!(
            s.bytes_1g + s.bytes_2m + s.bytes_thp + s.bytes_4k >= 1 << 30,
            "{s:?}"
        );
        for p in [a, b] {
            for off in (0..3 << 20).step_by(4096) {
                word(p + off).store(0xfeed, Relaxed);
            }
        }
        assert!(h.free(a));
        // a's range shares pages with b: it comes back zeroed.
        let c = h.alloc(3 << 20, 4096).unwrap();
        assert!((0..3 << 20)
            .step_by(4096)
            .all(|off| word(c + off).load(Relaxed) == 0));
        assert_eq!(word(b).load(Relaxed), 0xfeed, "the neighbour is intact");
        assert!(h.free(b) && h.free(c));
        assert_eq!(h.stats().allocations, 0);
    }

    /// `malloc` after `free` of the same length takes the freed range back
    /// with its pages (no fault); `calloc` never does; a kept range is
    /// still refused as a double free; the oldest kept ranges are given
    /// back (discarded) past eight or the byte limit.
    #[test]
    fn freed_ranges_are_kept_for_the_next_malloc_of_their_length() {
        use std::sync::atomic::Ordering::Relaxed;
        let h = tiered(256 << 20, 64 << 20);
        assert_eq!(h.retain_limit, 4 << 20, "a sixteenth of the budget");
        let w = h.region().unwrap().as_atomic_u64();
        let word = |addr: usize| &w[(addr - h.base()) / 8];
        let touch = |p: usize, len: usize, v: u64| {
            for off in (0..len).step_by(4096) {
                word(p + off).store(v, Relaxed);
            }
        };
        let fills = || {
            let s = h.region().unwrap().stats();
            s.faults_zero_fill + s.faults_far_fill
        };
        let p = h.alloc_uninit(1 << 20, 4096).unwrap();
        touch(p, 1 << 20, 7);
        assert!(h.free(p));
        assert!(!h.free(p), "a kept range freed again is a double free");
        let s = h.stats();
        assert_eq!(
            (s.allocations, s.allocated_bytes, s.retained_bytes),
            (0, 0, 1 << 20)
        );
        let before = fills();
        let q = h.alloc_uninit(1 << 20, 4096).unwrap();
        assert_eq!(q, p, "the kept range comes back");
        assert_eq!(word(q).load(Relaxed), 7, "with its pages");
        assert_eq!(fills(), before, "without a fault");
        assert!(h.free(q));
        // calloc's path: zero memory, never the kept range.
        let z = h.alloc(1 << 20, 4096).unwrap();
        assert_ne!(z, p);
        assert!((0..1 << 20)
            .step_by(4096)
            .all(|off| word(z + off).load(Relaxed) == 0));
        assert!(h.free(z));
        // Another length or alignment does not take it either.
        let other = h.alloc_uninit(2 << 20, 4096).unwrap();
        assert_ne!(other, p);
        assert!(h.free(other));
        // Past the byte limit (4 MiB: p, z and other hold 4 MiB) the oldest
        // go back to their arena, discarded.
        let big = h.alloc_uninit(3 << 20, 4096).unwrap();
        touch(big, 3 << 20, 9);
        assert!(h.free(big));
        let s = h.stats();
        assert!(s.retained_bytes <= 4 << 20, "{s:?}");
        assert_eq!(s.allocated_bytes, 0);
        let again = h.alloc_uninit(1 << 20, 4096).unwrap();
        if again == p {
            assert_eq!(word(again).load(Relaxed), 0, "a range pushed out was discarded");
        }
        assert!(h.free(again));
        // Larger than the limit: never kept.
        let huge = h.alloc_uninit(8 << 20, 4096).unwrap();
        touch(huge, 8 << 20, 3);
        assert!(h.free(huge));
        let back = h.alloc(8 << 20, 4096).unwrap();
        assert!((0..8 << 20)
            .step_by(4096)
            .all(|off| word(back + off).load(Relaxed) == 0));
        assert!(h.free(back));
        // Nine small frees: at most eight kept.
        let ptrs: Vec<usize> = (0..9).map(|_| h.alloc_uninit(64 << 10, 4096).unwrap()).collect();
        for &p in &ptrs {
            assert!(h.free(p));
        }
        assert!(h.retained().n <= RETAIN_RANGES);
        assert_eq!(h.stats().allocations, 0);
    }

    /// A range freed by one thread is discarded before another thread can
    /// get it from the arena. In the other order a late discard wiped what
    /// the range's next owner had written (or handed it out unzeroed).
    #[test]
    fn a_freed_range_is_discarded_before_anyone_else_gets_it() {
        use std::sync::atomic::Ordering::Relaxed;
        use std::time::{Duration, Instant};
        let h = tiered(64 << 20, 64 << 20);
        let base = h.base();
        let w = h.region().unwrap().as_atomic_u64();
        let deadline = Instant::now() + Duration::from_secs(2);
        const LEN: usize = 16 << 12;
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (h, w) = (&h, &w);
                s.spawn(move || {
                    let mut round = 0u64;
                    while Instant::now() < deadline {
                        round += 1;
                        let tag = (t + 1) << 48 | round;
                        // calloc's path: zero memory, never a kept range.
                        let p = h.alloc(LEN, 4096).expect("room");
                        let first = (p - base) / 8;
                        for i in (first..first + LEN / 8).step_by(512) {
                            assert_eq!(w[i].load(Relaxed), 0, "thread {t} round {round}: not zero");
                            w[i].store(tag, Relaxed);
                        }
                        for i in (first..first + LEN / 8).step_by(512) {
                            assert_eq!(w[i].load(Relaxed), tag, "thread {t} round {round}: data lost");
                        }
                        assert!(h.free(p));
                    }
                });
            }
        });
        assert_eq!(h.stats().allocated_bytes, 0);
    }

    #[test]
    fn threads_allocate_and_free_concurrently() {
        let h = tiered(256 << 20, 32 << 20);
        std::thread::scope(|s| {
            for t in 0..4usize {
                let h = &h;
                s.spawn(move || {
                    let mut live = Vec::new();
                    for k in 0..400usize {
                        let size = ((k * 7919 + t * 13) % 64 + 1) * 4096;
                        let p = h.alloc(size, 4096).expect("room");
                        live.push(p);
                        if k % 3 == 0 {
                            let q = live.swap_remove((k * 31) % live.len());
                            assert!(h.free(q));
                        }
                    }
                    for p in live {
                        assert!(h.free(p));
                    }
                });
            }
        });
        assert_eq!(h.stats().allocated_bytes, 0);
    }
}
