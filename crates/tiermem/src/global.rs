//! The process-wide default region behind `tm_malloc_global` /
//! `tm_free_global` (paper 1's `malloc_global()` / `free_global()`), sized
//! by `TIERMEM_FAR` and `TIERMEM_NEAR` and created on first use.
//!
//! Allocation is first fit over free ranges kept outside the region (so
//! that bookkeeping never faults region memory), 64-byte aligned, page
//! aligned from one page up. Freeing coalesces neighbours and discards the
//! pages a free range covers entirely, returning their near memory and
//! far-store space.
//!
//! With `TIERMEM_GLOBAL_HEAP=2m|1g|thp` the process-wide heap is instead a
//! huge-page heap without tiering (paper 3): `TIERMEM_FAR` bytes of address
//! space backed on demand by pages of that size from the pool, falling back
//! 1g -> 2m -> THP -> 4k with one warning line when the pool runs dry
//! ([`crate::heap`]); allocations are page aligned and take whole pages.

use crate::config::{options, parse_size, Config};
use crate::heap::{HeapConfig, HugeKind};
use crate::region::Region;
use crate::stats::RegionStats;
use crate::Error;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

struct Heap {
    region: Region,
    /// Free ranges: offset -> length.
    free: BTreeMap<usize, usize>,
    /// Allocations: offset -> length.
    used: HashMap<usize, usize>,
}

/// The process-wide heap: tiered (the default) or huge pages.
enum Global {
    Tiered(Heap),
    Huge(Box<crate::heap::Heap>),
}

static HEAP: Mutex<Option<Global>> = Mutex::new(None);
/// The ranges of tiered heaps a parent made before fork()ing this process:
/// frees there are refused (the far store is the parent's).
static PARENTS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

impl Global {
    /// A tiered heap inherited across fork(): its range is absent here and
    /// its far store is the parent's.
    fn inherited(&self) -> Option<(usize, usize)> {
        match self {
            Global::Tiered(h) if h.region.is_forked_copy() => Some((h.region.base(), h.region.len())),
            _ => None,
        }
    }
}

/// In a forked child, drops the parent's tiered heap (dropping touches
/// nothing of the parent's) so that the child starts an empty one of its
/// own, and remembers its range.
fn forget_parents_heap(g: &mut Option<Global>) {
    if let Some(range) = g.as_ref().and_then(Global::inherited) {
        PARENTS.lock().unwrap_or_else(|p| p.into_inner()).push(range);
        *g = None;
    }
}

/// `TIERMEM_GLOBAL_HEAP`: which heap serves `tm_malloc_global`.
pub const GLOBAL_HEAP_VAR: &str = options::GLOBAL_HEAP.var;

/// The huge page kind `TIERMEM_GLOBAL_HEAP` asks for (None: tiered), with
/// a warning for a value that is not understood (the default is kept).
fn huge_kind_from_env(warnings: &mut Vec<String>) -> Option<HugeKind> {
    let o = &options::GLOBAL_HEAP;
    let v = o.value()?;
    options::parse_global_heap(&v).unwrap_or_else(|why| {
        warnings.push(o.ignoring(&v, &why, &o.keeping()));
        None
    })
}

/// Creates the heap the environment asks for.
fn global_from_env() -> Result<Global, Error> {
    let (config, mut warnings) = global_config();
    let huge = huge_kind_from_env(&mut warnings);
    for w in warnings {
        eprintln!("{w}");
    }
    match huge {
        None => Ok(Global::Tiered(Heap::new(config)?)),
        Some(kind) => {
            // The huge heap's size is TIERMEM_FAR (no near budget: nothing moves).
            let bytes = options::FAR
                .value()
                .and_then(|v| options::FAR.kind.size(&v).ok())
                .unwrap_or(config.virt_bytes);
            Ok(Global::Huge(Box::new(crate::heap::Heap::new(HeapConfig::huge(
                bytes, kind,
            ))?)))
        }
    }
}

/// The configuration of the process-wide region: twice the physical
/// memory virtual (the preload heap's default too) over a 1 GiB budget
/// unless `TIERMEM_*` variables say otherwise.
pub fn global_config() -> (Config, Vec<String>) {
    let far = crate::config::default_far_bytes(crate::SystemInfo::probe().mem_total_bytes);
    let near = options::NEAR.region_default().and_then(|v| parse_size(v).ok());
    let mut c = Config::new(far, near.expect("TIERMEM_NEAR's region default is a size"));
    let warnings = c.apply_env();
    (c, warnings)
}

/// Creates the process-wide region now, with `config` (instead of the
/// environment). Fails if it exists already.
pub fn init_global(config: Config) -> Result<(), Error> {
    let mut g = HEAP.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_some() {
        return Err(Error::Usage("the global region exists already".into()));
    }
    *g = Some(Global::Tiered(Heap::new(config)?));
    Ok(())
}

impl Heap {
    fn new(config: Config) -> Result<Heap, Error> {
        let region = Region::new(config)?;
        let mut free = BTreeMap::new();
        free.insert(0, region.len());
        Ok(Heap {
            region,
            free,
            used: HashMap::new(),
        })
    }

    fn alloc(&mut self, size: usize) -> Option<usize> {
        let ps = self.region.page_bytes();
        let size = size.max(1).checked_next_multiple_of(64)?;
        let align = if size >= ps { ps } else { 64 };
        // Checked: a size near usize::MAX must not wrap into a "fit".
        let (&start, &len) = self.free.iter().find(|(&o, &l)| {
            let a = o.next_multiple_of(align);
            a.checked_add(size).is_some_and(|end| end <= o + l)
        })?;
        let a = start.next_multiple_of(align);
        self.free.remove(&start);
        if a > start {
            self.free.insert(start, a - start);
        }
        if a + size < start + len {
            self.free.insert(a + size, start + len - (a + size));
        }
        self.used.insert(a, size);
        Some(a)
    }

    fn release(&mut self, offset: usize) -> Result<(), Error> {
        let size = self.used.remove(&offset).ok_or_else(|| {
            Error::Usage(format!(
                "tm_free_global: {:#x} was not allocated by tm_malloc_global",
                self.region.base() + offset
            ))
        })?;
        let (mut start, mut end) = (offset, offset + size);
        if let Some((&p, &l)) = self.free.range(..start).next_back() {
            if p + l == start {
                self.free.remove(&p);
                start = p;
            }
        }
        if let Some(&l) = self.free.get(&end) {
            self.free.remove(&end);
            end += l;
        }
        self.free.insert(start, end - start);
        let ps = self.region.page_bytes();
        let (a, b) = (start.next_multiple_of(ps), end / ps * ps);
        if b > a {
            self.region.discard(a, b - a)?;
        }
        Ok(())
    }
}

fn with_heap<T>(f: impl FnOnce(&mut Global) -> Result<T, Error>) -> Result<T, Error> {
    let mut g = HEAP.lock().unwrap_or_else(|p| p.into_inner());
    forget_parents_heap(&mut g);
    if g.is_none() {
        *g = Some(global_from_env()?);
    }
    f(g.as_mut().expect("heap initialised above"))
}

/// Allocates `size` bytes of tiered memory from the process-wide region and
/// returns its address.
pub fn malloc_global(size: usize) -> Result<usize, Error> {
    with_heap(|g| {
        let (got, len) = match g {
            Global::Tiered(h) => (h.alloc(size).map(|o| h.region.base() + o), h.region.len()),
            Global::Huge(h) => (h.alloc(size.max(1), 64), h.len()),
        };
        got.ok_or_else(|| {
            Error::GlobalHeapFull(format!(
                "tm_malloc_global({size}): the global region ({len} bytes, TIERMEM_FAR) has no free range that large"
            ))
        })
    })
}

/// Frees an address returned by [`malloc_global`].
pub fn free_global(addr: usize) -> Result<(), Error> {
    let mut g = HEAP.lock().unwrap_or_else(|p| p.into_inner());
    let not_allocated = || {
        Error::Usage(format!(
            "tm_free_global: {addr:#x} was not allocated by tm_malloc_global"
        ))
    };
    let outside = || {
        let parents = PARENTS.lock().unwrap_or_else(|p| p.into_inner());
        if parents.iter().any(|&(b, l)| addr.wrapping_sub(b) < l) {
            crate::fork::inherited("tm_free_global", "allocation")
        } else {
            Error::Usage(format!("tm_free_global: {addr:#x} is not in the global region"))
        }
    };
    forget_parents_heap(&mut g);
    match g.as_mut() {
        None if PARENTS.lock().unwrap_or_else(|p| p.into_inner()).is_empty() => Err(Error::Usage(format!(
            "tm_free_global: {addr:#x} was not allocated by tm_malloc_global (nothing was)"
        ))),
        None => Err(outside()),
        Some(Global::Tiered(h)) => {
            let base = h.region.base();
            if addr < base || addr >= base + h.region.len() {
                return Err(outside());
            }
            h.release(addr - base)
        }
        Some(Global::Huge(h)) if !h.contains(addr) => Err(outside()),
        Some(Global::Huge(h)) => h.free(addr).then_some(()).ok_or_else(not_allocated),
    }
}

/// Statistics of the process-wide region, if it exists (a huge-page heap
/// has no region: None).
pub fn global_stats() -> Option<RegionStats> {
    match HEAP.lock().ok()?.as_ref()? {
        Global::Tiered(h) if h.region.is_forked_copy() => None,
        Global::Tiered(h) => Some(h.region.stats()),
        Global::Huge(_) => None,
    }
}

/// Huge pages mapped by the process-wide heap, if it is a huge-page heap
/// (`TIERMEM_GLOBAL_HEAP`).
pub fn global_huge_stats() -> Option<crate::heap::HugeStats> {
    match HEAP.lock().ok()?.as_ref()? {
        Global::Tiered(_) => None,
        Global::Huge(h) => h.stats().huge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap() -> Heap {
        Heap::new(Config::new(1 << 20, 1 << 20)).unwrap()
    }

    #[test]
    fn first_fit_alignment_and_coalescing() {
        let mut h = heap();
        let a = h.alloc(10).unwrap();
        let b = h.alloc(100).unwrap();
        let c = h.alloc(5000).unwrap();
        assert_eq!(a, 0);
        assert_eq!(b, 64);
        assert_eq!(c % 4096, 0, "page-sized and larger allocations are page aligned");
        h.release(b).unwrap();
        assert_eq!(h.alloc(64).unwrap(), 64, "first fit reuses the hole");
        h.release(a).unwrap();
        h.release(64).unwrap();
        h.release(c).unwrap();
        assert_eq!(h.free.len(), 1, "everything coalesced: {:?}", h.free);
        assert!(h.release(12345).is_err());
        assert!(h.alloc(2 << 20).is_none());
    }
}
