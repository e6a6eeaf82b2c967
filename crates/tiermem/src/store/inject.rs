//! Fault injection into far stores: **for tests only**, off by default.
//!
//! A specification such as `read:0.01,write:0.01,short:0.05,full:after=5000`
//! (the `TIERMEM_FAULT_INJECT` variable or [`crate::Config::fault_inject`])
//! makes a region's far store
//!
//! - `read:P`: fail a fraction `P` of reads (`EIO`): the page is poisoned,
//!   the access raises SIGBUS (a kernel-mode access gets `EFAULT`), the
//!   error is recorded;
//! - `write:P`: fail a fraction `P` of writes (`EIO`): the victim stays
//!   resident and dirty, the error is recorded;
//! - `short:P`: return short I/O on a fraction `P` of the file store's
//!   `pread`/`pwrite` calls (the store must finish the transfer: no error);
//! - `full:after=N`: refuse every write with `ENOSPC` once `N` writes have
//!   succeeded, until [`make_room`] is called (an operator freeing space);
//! - `seed:S`: the seed of the draws.
//!
//! Every injected failure is counted by the region's injector
//! (`Region::injected`) and process-wide ([`totals`]), so that a test can
//! check that each one was reported (`RegionStats::io_errors`).

use super::{FarStore, StagingSlot, StoreError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tiermem_sys::mm::{Mapping, MemRange};
use tiermem_sys::Errno;

/// A parsed specification.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultInjectSpec {
    /// Fraction of reads that fail.
    pub read: f64,
    /// Fraction of writes that fail.
    pub write: f64,
    /// Fraction of file I/O calls that come back short.
    pub short: f64,
    /// Writes that succeed before the store is full.
    pub full_after: Option<u64>,
    /// Seed of the draws.
    pub seed: u64,
}

impl FaultInjectSpec {
    /// Parses `read:P,write:P,short:P,full:after=N,seed:S` (any subset).
    pub fn parse(s: &str) -> Result<FaultInjectSpec, String> {
        let mut spec = FaultInjectSpec {
            seed: 0x7133_5eed,
            ..Default::default()
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once(':')
                .ok_or_else(|| format!("{part:?}: expected KEY:VALUE (read:0.01, full:after=100)"))?;
            let fraction = |v: &str| -> Result<f64, String> {
                v.parse::<f64>()
                    .ok()
                    .filter(|f| (0.0..=1.0).contains(f))
                    .ok_or_else(|| format!("{part:?}: expected a fraction from 0 to 1"))
            };
            match key {
                "read" => spec.read = fraction(value)?,
                "write" => spec.write = fraction(value)?,
                "short" => spec.short = fraction(value)?,
                "full" => {
                    let n = value
                        .strip_prefix("after=")
                        .and_then(|n| n.parse::<u64>().ok())
                        .ok_or_else(|| format!("{part:?}: expected full:after=N (a count of writes)"))?;
                    spec.full_after = Some(n);
                }
                "seed" => spec.seed = value.parse().map_err(|_| format!("{part:?}: expected seed:N"))?,
                _ => return Err(format!("{part:?}: unknown key (read, write, short, full, seed)")),
            }
        }
        Ok(spec)
    }
}

/// Failures injected so far in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InjectTotals {
    /// Reads failed (`EIO`).
    pub read: u64,
    /// Writes failed (`EIO`).
    pub write: u64,
    /// Writes refused because the store was full (`ENOSPC`).
    pub full: u64,
    /// Short reads and writes (absorbed by the store).
    pub short: u64,
}

impl InjectTotals {
    /// Failures that must be reported (reads, writes, full).
    pub fn failures(&self) -> u64 {
        self.read + self.write + self.full
    }

    /// `self - earlier`.
    pub fn since(&self, earlier: &InjectTotals) -> InjectTotals {
        InjectTotals {
            read: self.read - earlier.read,
            write: self.write - earlier.write,
            full: self.full - earlier.full,
            short: self.short - earlier.short,
        }
    }
}

/// Counters of failures (one set per injector, one process-wide).
#[derive(Debug, Default)]
struct Counters {
    read: AtomicU64,
    write: AtomicU64,
    full: AtomicU64,
    short: AtomicU64,
}

impl Counters {
    const fn new() -> Counters {
        Counters {
            read: AtomicU64::new(0),
            write: AtomicU64::new(0),
            full: AtomicU64::new(0),
            short: AtomicU64::new(0),
        }
    }
    fn get(&self) -> InjectTotals {
        InjectTotals {
            read: self.read.load(Ordering::Relaxed),
            write: self.write.load(Ordering::Relaxed),
            full: self.full.load(Ordering::Relaxed),
            short: self.short.load(Ordering::Relaxed),
        }
    }
}

static TOTALS: Counters = Counters::new();
/// Bumped by [`make_room`]: every full store gets its space back.
static ROOM: AtomicU64 = AtomicU64::new(0);
static ANY_FULL: AtomicBool = AtomicBool::new(false);

/// Failures injected so far in this process, by every injecting store.
pub fn totals() -> InjectTotals {
    TOTALS.get()
}

/// Frees the space of a store filled by `full:after=N`: the next `N`
/// writes succeed again. Returns whether a store was full. Lock-free (a
/// signal handler may call it).
pub fn make_room() -> bool {
    let full = ANY_FULL.swap(false, Ordering::Relaxed);
    if full {
        ROOM.fetch_add(1, Ordering::Relaxed);
    }
    full
}

/// The draws of one store.
#[derive(Debug)]
pub struct Injector {
    spec: FaultInjectSpec,
    draws: AtomicU64,
    counts: Counters,
    /// Writes that succeeded since the store last got room.
    writes: AtomicU64,
    /// The [`ROOM`] generation `writes` counts from.
    room: AtomicU64,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Injector {
    /// An injector drawing with `spec`.
    pub fn new(spec: FaultInjectSpec) -> Injector {
        Injector {
            spec,
            draws: AtomicU64::new(0),
            counts: Counters::new(),
            writes: AtomicU64::new(0),
            room: AtomicU64::new(ROOM.load(Ordering::Relaxed)),
        }
    }

    /// Failures this injector caused.
    pub fn injected(&self) -> InjectTotals {
        self.counts.get()
    }

    fn count(&self, f: impl Fn(&Counters) -> &AtomicU64) {
        f(&self.counts).fetch_add(1, Ordering::Relaxed);
        f(&TOTALS).fetch_add(1, Ordering::Relaxed);
    }

    /// The specification.
    pub fn spec(&self) -> &FaultInjectSpec {
        &self.spec
    }

    fn draw(&self) -> f64 {
        let n = self.draws.fetch_add(1, Ordering::Relaxed);
        (mix(self.spec.seed ^ mix(n)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn hit(&self, p: f64) -> bool {
        p > 0.0 && self.draw() < p
    }

    /// Whether this read fails.
    fn fail_read(&self) -> bool {
        let hit = self.hit(self.spec.read);
        if hit {
            self.count(|c| &c.read);
        }
        hit
    }

    /// The error this write gets, if any.
    fn fail_write(&self) -> Option<i32> {
        if let Some(n) = self.spec.full_after {
            let room = ROOM.load(Ordering::Relaxed);
            if self.room.swap(room, Ordering::Relaxed) != room {
                self.writes.store(0, Ordering::Relaxed);
            }
            if self.writes.load(Ordering::Relaxed) >= n {
                ANY_FULL.store(true, Ordering::Relaxed);
                self.count(|c| &c.full);
                return Some(libc::ENOSPC);
            }
        }
        if self.hit(self.spec.write) {
            self.count(|c| &c.write);
            return Some(libc::EIO);
        }
        None
    }

    /// How many of `len` bytes one I/O call should transfer: `len`, or
    /// fewer (a multiple of `align`, at least one) when a short transfer is
    /// injected.
    pub fn io_len(&self, len: usize, align: usize) -> usize {
        let align = align.max(1);
        if len <= align || !self.hit(self.spec.short) {
            return len;
        }
        let units = len.div_ceil(align) - 1;
        let short = (1 + (self.draw() * units as f64) as usize).min(units) * align;
        self.count(|c| &c.short);
        short
    }
}

/// A far store that fails on purpose, in front of a real one.
pub struct InjectingStore {
    inner: Box<dyn FarStore>,
    inject: Arc<Injector>,
}

impl InjectingStore {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn FarStore>, inject: Arc<Injector>) -> InjectingStore {
        InjectingStore { inner, inject }
    }

    /// An EIO read failure when the injector draws one.
    fn injected_read_failure(&self, offset: u64, len: usize) -> Result<(), StoreError> {
        if self.inject.fail_read() {
            return Err(StoreError::Read {
                offset,
                len,
                errno: Errno(libc::EIO),
            });
        }
        Ok(())
    }
}

impl FarStore for InjectingStore {
    fn needs_staging(&self) -> bool {
        self.inner.needs_staging()
    }

    fn fetch<'a>(
        &'a self,
        offset: u64,
        len: usize,
        staging: Option<&'a StagingSlot<'a>>,
    ) -> Result<MemRange<'a>, StoreError> {
        self.injected_read_failure(offset, len)?;
        self.inner.fetch(offset, len, staging)
    }

    fn store(&self, offset: u64, src: MemRange<'_>) -> Result<(), StoreError> {
        if let Some(errno) = self.inject.fail_write() {
            return Err(StoreError::Write {
                offset,
                len: src.len(),
                errno: Errno(errno),
            });
        }
        self.inner.store(offset, src)?;
        self.inject.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn read_into(&self, offset: u64, len: usize, dst: &Mapping, dst_offset: usize) -> Result<(), StoreError> {
        self.injected_read_failure(offset, len)?;
        self.inner.read_into(offset, len, dst, dst_offset)
    }

    fn read_after_fork(
        &self,
        offset: u64,
        len: usize,
        dst: &Mapping,
        dst_offset: usize,
    ) -> Result<(), StoreError> {
        self.inner.read_after_fork(offset, len, dst, dst_offset)
    }

    fn same_as(&self, offset: u64, src: MemRange<'_>) -> Option<bool> {
        self.inner.same_as(offset, src)
    }

    fn compares_in_place(&self) -> bool {
        self.inner.compares_in_place()
    }

    fn forget(&self, offset: u64, len: u64) {
        self.inner.forget(offset, len)
    }

    fn space(&self) -> Option<tiermem_sys::file::FsSpace> {
        self.inner.space()
    }

    fn describe(&self) -> String {
        format!(
            "{} with fault injection {:?} (test only)",
            self.inner.describe(),
            self.inject.spec
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[test]
    fn parses_and_refuses() {
        let s = FaultInjectSpec::parse("read:0.01, write:0.5,short:1,full:after=7,seed:3").unwrap();
        assert_eq!(
            (s.read, s.write, s.short, s.full_after, s.seed),
            (0.01, 0.5, 1.0, Some(7), 3)
        );
        assert_eq!(FaultInjectSpec::parse("").unwrap().full_after, None);
        for bad in ["read", "read:2", "write:x", "full:7", "full:after=x", "disk:0.1"] {
            assert!(FaultInjectSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn injects_at_about_the_rate_and_counts() {
        let inj = Arc::new(Injector::new(
            FaultInjectSpec::parse("read:0.25,short:0.5").unwrap(),
        ));
        let s = InjectingStore::new(Box::new(MemoryStore::new(1 << 20).unwrap()), inj.clone());
        let page = [5u8; 4096];
        s.store(0, MemRange::from_bytes(&page)).unwrap();
        let before = totals();
        let failed = (0..4000).filter(|_| s.fetch(0, 4096, None).is_err()).count();
        assert!((800..1200).contains(&failed), "{failed}");
        assert!(totals().since(&before).read >= failed as u64);
        assert_eq!(inj.injected().read, failed as u64);
        let lens: Vec<usize> = (0..100).map(|_| inj.io_len(16384, 4096)).collect();
        assert!(lens.iter().all(|&l| l % 4096 == 0 && (4096..=16384).contains(&l)));
        assert!(lens.iter().any(|&l| l < 16384));
        assert_eq!(inj.io_len(4096, 4096), 4096);
        assert!(s.describe().contains("test only"));
    }
}
