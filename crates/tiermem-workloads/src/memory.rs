//! The memory under a translation-overhead workload (GUPS, BFS, CG, pointer
//! chasing): which pages back it ([`Backing`]) and who set it up
//! ([`Provider`]).
//!
//! - [`Provider::Hand`] is what a plain program does by itself: `mmap`
//!   anonymous memory with `MADV_NOHUGEPAGE` (4 KiB), 2 MiB-aligned with
//!   `MADV_HUGEPAGE` (THP), or `MAP_HUGETLB` with 2 MiB or 1 GiB pages, and
//!   populate it before the timed kernel. It is the baseline with no
//!   management overhead.
//! - [`Provider::Tiered`] is a [`tiermem::Region`] with a near budget that may
//!   be smaller than the footprint.
//! - [`Provider::Segment`] is tiermem's segment region ([`tiermem::Segment`]:
//!   1 GiB or 2 MiB hugetlb pages, populated and locked, never remapped).
//!
//! A workload asks for its footprint, gets a [`Memory`], and carves all its
//! big arrays out of it with an [`Arena`].

use std::fmt;
use std::time::Instant;
use thiserror::Error;
use tiermem::{Config, PageSize, Region, Segment, SegmentConfig};
use tiermem_sys::hugetlb::{self, HugePageSize};
use tiermem_sys::mm::{Advice, MapOptions, Mapping, UserAccess};

/// Errors of setting up the memory.
#[derive(Debug, Error)]
pub enum MemoryError {
    /// A backing name that is not one of 4k, thp, 2m, 1g.
    #[error("unknown backing {0:?}: expected 4k, thp, 2m or 1g")]
    UnknownBacking(String),
    /// A provider name that is not one of hand, tiered, segment.
    #[error("unknown provider {0:?}: expected hand, tiered or segment")]
    UnknownProvider(String),
    /// The huge page pool has too few free pages.
    #[error(
        "{backing} backing needs {need} free {size} pages, the pool has {free}; \
         reserve them with `tiermem hugepages reserve {size}:{need}` or \
         `echo {need} > /sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages` (root)"
    )]
    Pool {
        /// The backing asked for.
        backing: Backing,
        /// Page size name.
        size: HugePageSize,
        /// `size` in KiB (the sysfs directory name).
        kb: usize,
        /// Pages needed.
        need: u64,
        /// Pages free.
        free: u64,
    },
    /// A combination that does not exist (yet).
    #[error("{0}")]
    Unsupported(String),
    /// The mapping failed.
    #[error(transparent)]
    Map(#[from] tiermem_sys::mm::MmError),
    /// The tiered region failed.
    #[error(transparent)]
    Region(#[from] tiermem::Error),
    /// An arena ran out of room (a sizing bug in a workload).
    #[error("arena of {have} bytes cannot hold {want} more bytes")]
    ArenaFull {
        /// Bytes left.
        have: usize,
        /// Bytes asked for.
        want: usize,
    },
}

/// The pages behind a workload's arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backing {
    /// 4 KiB base pages (THP disabled for the range).
    Small4K,
    /// Transparent huge pages: 2 MiB-aligned, `MADV_HUGEPAGE`.
    Thp,
    /// 2 MiB hugetlb pages.
    Huge2M,
    /// 1 GiB hugetlb pages.
    Huge1G,
}

impl Backing {
    /// All backings, smallest page first.
    pub const ALL: [Backing; 4] = [Backing::Small4K, Backing::Thp, Backing::Huge2M, Backing::Huge1G];

    /// `4k`, `thp`, `2m` or `1g`.
    pub fn name(self) -> &'static str {
        match self {
            Backing::Small4K => "4k",
            Backing::Thp => "thp",
            Backing::Huge2M => "2m",
            Backing::Huge1G => "1g",
        }
    }

    /// The backing called `s` (case-insensitive).
    pub fn parse(s: &str) -> Result<Backing, MemoryError> {
        Backing::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| MemoryError::UnknownBacking(s.to_owned()))
    }

    /// Parses a comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<Backing>, MemoryError> {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(Backing::parse)
            .collect()
    }

    /// The page size the backing maps with (THP: the size it aims for).
    pub fn page_bytes(self) -> usize {
        match self {
            Backing::Small4K => 4096,
            Backing::Thp | Backing::Huge2M => 2 << 20,
            Backing::Huge1G => 1 << 30,
        }
    }

    fn hugetlb(self) -> Option<HugePageSize> {
        match self {
            Backing::Huge2M => Some(HugePageSize::Size2M),
            Backing::Huge1G => Some(HugePageSize::Size1G),
            _ => None,
        }
    }
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who sets the memory up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    /// A plain program's own `mmap` (the no-overhead baseline).
    Hand,
    /// A tiered [`tiermem::Region`] with this near budget in bytes.
    Tiered {
        /// Near budget.
        near: u64,
        /// Fault-around on (`tiered`) or off (`tiered-fa-off`).
        fault_around: bool,
    },
    /// tiermem's segment region (not in this branch yet).
    Segment,
}

impl Provider {
    /// `hand`, `tiered`, `tiered-fa-off` or `segment`.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Hand => "hand",
            Provider::Tiered {
                fault_around: false, ..
            } => "tiered-fa-off",
            Provider::Tiered { .. } => "tiered",
            Provider::Segment => "segment",
        }
    }

    /// The provider called `s`; `near` is the budget of a tiered one.
    pub fn parse(s: &str, near: u64) -> Result<Provider, MemoryError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "hand" => Ok(Provider::Hand),
            "tiered" => Ok(Provider::Tiered {
                near,
                fault_around: true,
            }),
            "tiered-fa-off" => Ok(Provider::Tiered {
                near,
                fault_around: false,
            }),
            "segment" => Ok(Provider::Segment),
            _ => Err(MemoryError::UnknownProvider(s.to_owned())),
        }
    }
}

/// Tiering counters of a tiered memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TierStats {
    /// Demand faults served.
    pub faults: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Bytes moved in and out.
    pub bytes_moved: u64,
    /// Neighbours fault-around installed with the faulting pages.
    #[serde(default)]
    pub fault_around: u64,
}

/// One contiguous range of memory a workload runs in.
pub trait Memory {
    /// The whole range (zero-filled when new).
    fn bytes_mut(&mut self) -> &mut [u8];
    /// The granule of the backing pages.
    fn page_bytes(&self) -> usize;
    /// Tiering counters since the last reset (`None`: not tiered).
    fn tier_stats(&self) -> Option<TierStats> {
        None
    }
    /// Zeroes the tiering counters (before the timed kernel).
    fn reset_tier_stats(&self) {}
}

/// A plain program's mapping.
pub struct HandMemory {
    map: Mapping,
    user: UserAccess,
}

impl Memory for HandMemory {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.user_slice_mut(&mut self.user)
    }
    fn page_bytes(&self) -> usize {
        self.map.page_size()
    }
}

/// A tiermem segment.
pub struct SegmentMemory {
    segment: Segment,
}

impl Memory for SegmentMemory {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.segment.as_mut_slice()
    }
    fn page_bytes(&self) -> usize {
        self.segment.page_size().bytes()
    }
}

/// A tiered region.
pub struct TieredMemory {
    region: Region,
}

impl Memory for TieredMemory {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.region.as_mut_slice()
    }
    fn page_bytes(&self) -> usize {
        self.region.page_bytes()
    }
    fn tier_stats(&self) -> Option<TierStats> {
        self.region.settle();
        let s = self.region.stats();
        Some(TierStats {
            faults: s.faults(),
            evictions: s.evictions,
            bytes_moved: s.bytes_in + s.bytes_out,
            fault_around: s.fault_around.installed,
        })
    }
    fn reset_tier_stats(&self) {
        self.region.reset_stats();
    }
}

/// Memory set up for a workload, with what the setup cost.
pub struct Allocation {
    /// The memory.
    pub memory: Box<dyn Memory>,
    /// Bytes mapped (the footprint rounded up to whole pages).
    pub mapped_bytes: usize,
    /// Seconds to map and populate (hand) or create (tiered) it.
    pub setup_seconds: f64,
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Checks that the pool of `backing` can serve `pages` more pages.
fn check_pool(backing: Backing, size: HugePageSize, pages: u64) -> Result<(), MemoryError> {
    let free = hugetlb::pool(size).map(|p| p.available()).unwrap_or(0);
    if free < pages {
        return Err(MemoryError::Pool {
            backing,
            size,
            kb: size.bytes() / 1024,
            need: pages,
            free,
        });
    }
    Ok(())
}

/// Sets up at least `bytes` bytes of `backing` memory from `provider`.
///
/// Hand memory is populated here (every page written once, or
/// `MAP_POPULATE` for hugetlb), so the workload's kernel never takes a
/// first-touch fault; tiered memory is only created, since populating it
/// beyond the near budget would evict.
pub fn allocate(backing: Backing, provider: Provider, bytes: usize) -> Result<Allocation, MemoryError> {
    let page = backing.page_bytes();
    let len = round_up(bytes.max(1), page);
    let t = Instant::now();
    let memory: Box<dyn Memory> = match provider {
        Provider::Hand => {
            let mut opts = MapOptions::default();
            if let Some(h) = backing.hugetlb() {
                check_pool(backing, h, (len / page) as u64)?;
                opts.huge = Some(h);
                opts.populate = true;
            }
            if backing == Backing::Thp {
                opts.align = 2 << 20;
            }
            let (map, user) = Mapping::anonymous(len, &opts)?;
            match backing {
                Backing::Small4K => map.advise(0, len, Advice::NoHugePage)?,
                Backing::Thp => map.advise(0, len, Advice::HugePage)?,
                _ => {}
            }
            let mut m = HandMemory { map, user };
            if backing.hugetlb().is_none() {
                // First touch, one write per base page: with MADV_HUGEPAGE the
                // fault of a 2 MiB-aligned block allocates a whole huge page.
                for b in m.bytes_mut().iter_mut().step_by(4096) {
                    *b = 0;
                }
            }
            Box::new(m)
        }
        Provider::Tiered { near, fault_around } => {
            let page_size = match backing {
                Backing::Small4K => PageSize::Base4K,
                Backing::Huge2M => PageSize::Huge2M,
                Backing::Thp => PageSize::Thp2M,
                Backing::Huge1G => {
                    return Err(MemoryError::Unsupported(
                        "1g backing is segment-only: tiered regions use 4k or 2m pages".into(),
                    ))
                }
            };
            let near = round_up(near as usize, page_size.bytes()) as u64;
            if page_size == PageSize::Huge2M {
                check_pool(backing, HugePageSize::Size2M, near / page as u64)?;
            }
            let mut c = Config::new(len as u64, near);
            c.page_size = page_size;
            c.fault_around = fault_around;
            Box::new(TieredMemory {
                region: Region::new(c)?,
            })
        }
        Provider::Segment => {
            let Some(h) = backing.hugetlb() else {
                return Err(MemoryError::Unsupported(format!(
                    "{backing} backing: segments are hugetlb only (2m or 1g)"
                )));
            };
            check_pool(backing, h, (len / page) as u64)?;
            // No fallback: a benchmark must measure the page size it names.
            let segment = Segment::with_config(&SegmentConfig {
                page: h,
                fallback: false,
                ..SegmentConfig::new(len)
            })?;
            Box::new(SegmentMemory { segment })
        }
    };
    Ok(Allocation {
        memory,
        mapped_bytes: len,
        setup_seconds: t.elapsed().as_secs_f64(),
    })
}

/// Alignment of every array an [`Arena`] hands out: a page, so arrays share
/// no page and each starts on a page boundary.
pub const ARENA_ALIGN: usize = 4096;

/// The bytes an arena needs for arrays of these byte sizes.
pub fn arena_bytes(arrays: &[usize]) -> usize {
    arrays
        .iter()
        .map(|&b| round_up(b, ARENA_ALIGN))
        .sum::<usize>()
        .max(ARENA_ALIGN)
}

/// Carves one memory range into page-aligned typed arrays.
pub struct Arena<'a> {
    rest: &'a mut [u8],
}

impl<'a> Arena<'a> {
    /// An arena over `bytes`.
    pub fn new(bytes: &'a mut [u8]) -> Arena<'a> {
        Arena { rest: bytes }
    }

    /// The next `n` values of `T`, zero-filled if the memory was.
    pub fn take<T: bytemuck::Pod>(&mut self, n: usize) -> Result<&'a mut [T], MemoryError> {
        let need = n * std::mem::size_of::<T>();
        let rest = std::mem::take(&mut self.rest);
        let want = round_up(need, ARENA_ALIGN).min(rest.len());
        if need > rest.len() {
            let have = rest.len();
            self.rest = rest;
            return Err(MemoryError::ArenaFull { have, want });
        }
        let (head, tail) = rest.split_at_mut(want);
        self.rest = tail;
        Ok(bytemuck::cast_slice_mut(&mut head[..need]))
    }
}

/// Runs `f(t)` on `threads` scoped threads, thread `t` pinned to CPU
/// `t % online CPUs`; returns each result with the CPU the thread ran on
/// when it finished.
pub fn pinned_team<R: Send>(threads: usize, f: impl Fn(usize) -> R + Sync) -> Vec<(R, Option<usize>)> {
    let cpus = tiermem_sys::thread::online_cpus().max(1);
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|t| {
                s.spawn(move || {
                    // Best effort: a restricted cpuset may refuse the CPU.
                    let _ = tiermem_sys::thread::set_affinity(&[t % cpus]);
                    let r = f(t);
                    (r, tiermem_sys::thread::current_cpu())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backings_parse() {
        assert_eq!(
            Backing::parse_list("4k,THP,2m,1g").unwrap(),
            Backing::ALL.to_vec()
        );
        assert!(matches!(
            Backing::parse("3m"),
            Err(MemoryError::UnknownBacking(_))
        ));
        assert!(Provider::parse("tiered", 1 << 20).is_ok());
        assert!(Provider::parse("kernel", 0).is_err());
    }

    #[test]
    fn hand_4k_and_thp_carve_into_arrays() {
        for b in [Backing::Small4K, Backing::Thp] {
            let mut a = allocate(b, Provider::Hand, arena_bytes(&[800, 4096 * 3])).unwrap();
            assert_eq!(a.mapped_bytes % b.page_bytes(), 0);
            let mut ar = Arena::new(a.memory.bytes_mut());
            let x: &mut [u64] = ar.take(100).unwrap();
            let y: &mut [u32] = ar.take(3072).unwrap();
            x[99] = 7;
            y[3071] = 9;
            assert_eq!(x.as_ptr() as usize % ARENA_ALIGN, 0);
            assert_eq!(y.as_ptr() as usize % ARENA_ALIGN, 0);
            assert!(a.memory.tier_stats().is_none());
        }
    }

    #[test]
    fn arena_refuses_overflow() {
        let mut v = vec![0u64; 1024];
        let mut ar = Arena::new(bytemuck::cast_slice_mut(&mut v));
        assert!(ar.take::<u64>(1025).is_err());
        assert_eq!(ar.take::<u64>(511).unwrap().len(), 511);
        assert_eq!(ar.take::<u64>(512).unwrap().len(), 512);
        assert!(ar.take::<u64>(1).is_err());
    }

    #[test]
    fn tiered_4k_counts_faults_and_1g_is_refused() {
        let mut a = allocate(
            Backing::Small4K,
            Provider::Tiered {
                near: 1 << 20,
                fault_around: true,
            },
            4 << 20,
        )
        .unwrap();
        a.memory.reset_tier_stats();
        for b in a.memory.bytes_mut().iter_mut().step_by(4096) {
            *b = 1;
        }
        let s = a.memory.tier_stats().unwrap();
        assert!(s.faults + s.fault_around >= 1024 && s.evictions > 0, "{s:?}");
        assert!(matches!(
            allocate(
                Backing::Huge1G,
                Provider::Tiered {
                    near: 1 << 30,
                    fault_around: true
                },
                1 << 30
            ),
            Err(MemoryError::Unsupported(_))
        ));
    }

    #[test]
    fn segments_are_hugetlb_only_and_name_the_pool_fix() {
        assert!(matches!(
            allocate(Backing::Small4K, Provider::Segment, 1 << 20),
            Err(MemoryError::Unsupported(_))
        ));
        let avail = hugetlb::pool(HugePageSize::Size1G)
            .map(|p| p.available())
            .unwrap_or(0);
        let e = allocate(Backing::Huge1G, Provider::Segment, (avail as usize + 1) << 30)
            .err()
            .expect("more 1 GiB pages than the pool has");
        assert!(e.to_string().contains("tiermem hugepages reserve 1G:"), "{e}");
    }

    #[test]
    fn tiered_thp_moves_whole_blocks() {
        let mut a = allocate(
            Backing::Thp,
            Provider::Tiered {
                near: 8 << 20,
                fault_around: true,
            },
            32 << 20,
        )
        .unwrap();
        assert_eq!(a.memory.page_bytes(), 2 << 20);
        for (i, b) in a.memory.bytes_mut().iter_mut().enumerate().step_by(4096) {
            *b = i as u8 | 1;
        }
        let bad = a
            .memory
            .bytes_mut()
            .iter()
            .enumerate()
            .step_by(4096)
            .filter(|&(i, &b)| b != i as u8 | 1)
            .count();
        assert_eq!(bad, 0);
        let s = a.memory.tier_stats().unwrap();
        assert!(s.evictions > 0 && s.bytes_moved.is_multiple_of(2 << 20), "{s:?}");
    }

    #[test]
    fn missing_pool_names_the_fix() {
        match hugetlb::pool(HugePageSize::Size1G) {
            Ok(p) if p.available() < 64 => {
                let e = allocate(Backing::Huge1G, Provider::Hand, 64 << 30).err().unwrap();
                let m = e.to_string();
                assert!(m.contains("hugepages-1048576kB") && m.contains("1G:64"), "{m}");
            }
            _ => eprintln!("skipped: no 1 GiB pool or a huge one"),
        }
    }
}
