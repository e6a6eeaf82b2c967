//! Tiered regions with 2 MiB hugetlbfs pages and 2 MiB transparent huge
//! pages: data moves 2 MiB at a time, dirty tracking and eviction work as
//! with 4 KiB pages. Segments on 1 GiB pages and their 2 MiB fallback, and
//! the pool errors. Reserves pools when running as root and restores them;
//! skips with a message otherwise.

#[path = "../common/mod.rs"]
mod common;

use common::{mix, HugePool};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use tiermem::hugepages::{self, HugePageSize, PoolRequest};
use tiermem::{
    Config, DirtyTracking, Error, FarStoreConfig, FaultPath, PageSize, Region, Segment, SegmentConfig,
};

const MIB: u64 = 1 << 20;
static POOL: Mutex<()> = Mutex::new(());
/// The budget is 8 huge pages; the pool gets a margin because the kernel
/// can need a free huge page beyond the resident ones for a moment (a
/// fill racing the free of an evicted page, or pages of the previous
/// test still being released), and an empty pool turns that into SIGBUS.
const POOL_PAGES: u64 = 12;

fn cfg(fp: FaultPath, dt: DirtyTracking, file: bool) -> Config {
    cfg_of(PageSize::Huge2M, fp, dt, file)
}

fn cfg_of(page: PageSize, fp: FaultPath, dt: DirtyTracking, file: bool) -> Config {
    let mut c = Config::new(64 * MIB, 16 * MIB);
    c.page_size = page;
    c.fault_path = fp;
    c.dirty_tracking = dt;
    c.evict_batch_pages = 2;
    if file {
        c.far = FarStoreConfig::File {
            path: std::env::temp_dir(),
            direct: false,
        };
    }
    c
}

/// Writes a pattern over 64 MiB through a 16 MiB budget, reads it back
/// twice, flips scattered words, and checks every word.
fn churn_every_word(r: &mut Region, what: &str) {
    let w: &mut [u64] = r.as_mut_slice();
    for (i, x) in w.iter_mut().enumerate() {
        *x = mix(i as u64);
    }
    for pass in 0..2 {
        for (i, x) in w.iter().enumerate().step_by(61) {
            assert_eq!(*x, mix(i as u64), "{what} pass {pass} word {i}");
        }
    }
    for x in w.iter_mut().step_by(4099) {
        *x = !*x;
    }
    for (i, x) in w.iter().enumerate() {
        let want = if i % 4099 == 0 {
            !mix(i as u64)
        } else {
            mix(i as u64)
        };
        assert_eq!(*x, want, "{what} word {i}");
    }
    let s = r.stats();
    if s.mover_fills == 0 {
        assert_eq!(s.faults_zero_fill, 32, "{what}: 32 huge pages first-touched");
    } else {
        assert!(s.faults_zero_fill + s.mover_fills >= 32, "{what}: {s:?}");
    }
    assert!(s.evictions > 0 && s.bytes_in > 0, "{what}: {s:?}");
    assert_eq!(s.bytes_in % (2 << 20), 0, "{what}: moves whole huge pages");
    assert!(s.resident_bytes <= 16 * MIB, "{what}");
    assert!(r.errors().is_empty(), "{what}: {:?}", r.errors());
}

#[test]
fn huge_pages_tier_in_every_variant() {
    let _g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_pool) = HugePool::reserve(POOL_PAGES) else {
        return;
    };
    for fp in [FaultPath::InContext, FaultPath::HandlerThread] {
        for dt in [DirtyTracking::WpFault, DirtyTracking::WpAsync] {
            for file in [false, true] {
                let what = format!("{} {} file={file}", fp.name(), dt.name());
                let mut r = Region::new(cfg(fp, dt, file)).expect(&what);
                assert_eq!(r.page_bytes(), 2 << 20);
                churn_every_word(&mut r, &what);
            }
        }
    }
}

fn thp_enabled() -> bool {
    let on = hugepages::thp_enabled();
    if !on {
        eprintln!("skipped: transparent huge pages are disabled ([never])");
    }
    on
}

#[test]
fn thp_pages_tier_in_every_variant() {
    if !thp_enabled() {
        return;
    }
    let mut collapsed = 0;
    for fp in [FaultPath::InContext, FaultPath::HandlerThread] {
        for dt in [DirtyTracking::WpFault, DirtyTracking::WpAsync] {
            for (file, movers) in [(false, 0), (true, 0), (false, 1)] {
                let what = format!("THP {} {} file={file} movers={movers}", fp.name(), dt.name());
                let mut c = cfg_of(PageSize::Thp2M, fp, dt, file);
                c.movers = movers;
                let mut r = Region::new(c).expect(&what);
                assert_eq!(r.page_bytes(), 2 << 20);
                assert_eq!(r.base() % (2 << 20), 0, "{what}: blocks are aligned");
                churn_every_word(&mut r, &what);
                let s = r.stats();
                assert!(
                    s.thp_moves + s.thp_collapses + s.thp_collapse_failures >= 32,
                    "{what}: {s:?}"
                );
                collapsed += s.thp_moves + s.thp_collapses;
            }
        }
    }
    assert!(collapsed > 0, "no block was ever collapsed into a huge page");
}

#[test]
fn thp_blocks_are_huge_and_clean_ones_are_not_written_back() {
    if !thp_enabled() {
        return;
    }
    let mut c = cfg_of(
        PageSize::Thp2M,
        FaultPath::InContext,
        DirtyTracking::WpFault,
        false,
    );
    c.evict_batch_pages = 1;
    let mut r = Region::new(c).unwrap();
    let words: &mut [u64] = r.as_mut_slice();
    for (i, x) in words[..(8 * MIB as usize / 8)].iter_mut().enumerate() {
        *x = i as u64;
    }
    let s = r.stats();
    let huge = tiermem_sys::pagemap::anon_huge_bytes(r.base()).unwrap().unwrap();
    assert!(
        huge > 0 && huge <= (s.thp_moves + s.thp_collapses) * (2 << 20),
        "{huge} {s:?}"
    );
    r.evict_all().unwrap();
    let before = r.stats().write_backs;
    // Read everything back (fills for reads) and evict again: the blocks are
    // unchanged, so nothing is written back.
    let words: &mut [u64] = r.as_mut_slice();
    let sum: u64 = words[..(8 * MIB as usize / 8)].iter().sum();
    let n = 8 * MIB / 8;
    assert_eq!(sum, n * (n - 1) / 2);
    r.evict_all().unwrap();
    let s = r.stats();
    assert_eq!(s.write_backs, before, "clean THP blocks were written back: {s:?}");
    assert!(s.faults_far_fill >= 4, "{s:?}");
}

#[test]
fn huge_pages_under_concurrent_churn() {
    let _g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_pool) = HugePool::reserve(POOL_PAGES) else {
        return;
    };
    concurrent_churn(Region::new(cfg(FaultPath::InContext, DirtyTracking::WpFault, false)).unwrap());
}

#[test]
fn thp_pages_under_concurrent_churn() {
    if !thp_enabled() {
        return;
    }
    for dt in [DirtyTracking::WpFault, DirtyTracking::WpAsync] {
        concurrent_churn(Region::new(cfg_of(PageSize::Thp2M, FaultPath::InContext, dt, false)).unwrap());
    }
}

/// Three threads increment random words for two seconds, each increment
/// also counted on the side; after evicting everything, every word equals
/// its count.
fn concurrent_churn(r: Region) {
    let words = r.as_atomic_u64();
    let n = words.len();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let side: Vec<std::sync::atomic::AtomicU32> = (0..n / 64).map(|_| Default::default()).collect();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (words, side, stop) = (words, &side, &stop);
            s.spawn(move || {
                let mut x = t * 7919 + 1;
                while !stop.load(Ordering::Relaxed) {
                    x = mix(x);
                    let k = (x as usize % side.len()) * 64;
                    side[k / 64].fetch_add(1, Ordering::SeqCst);
                    words[k].fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
    });
    r.evict_all().unwrap();
    for (k, s) in side.iter().enumerate() {
        assert_eq!(
            words[k * 64].load(Ordering::SeqCst),
            s.load(Ordering::SeqCst) as u64,
            "word {}",
            k * 64
        );
    }
    assert!(r.stats().evictions > 10, "{:?}", r.stats());
}

#[test]
fn segment_on_1g_pages_is_populated_and_locked() {
    let _g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_pool) = HugePool::reserve_of(HugePageSize::Size1G, 1) else {
        return;
    };
    let free_before = hugepages::pool(HugePageSize::Size1G).free;
    let mut seg = Segment::with_config(&SegmentConfig {
        fallback: false,
        ..SegmentConfig::new(1 << 30)
    })
    .unwrap();
    assert_eq!(seg.page_size(), HugePageSize::Size1G);
    assert!(!seg.fell_back());
    assert!(seg.locked());
    assert_eq!(seg.len(), 1 << 30);
    assert_eq!(seg.base() % (1 << 30), 0);
    // Populated at creation: the page is taken from the pool already.
    assert_eq!(hugepages::pool(HugePageSize::Size1G).free, free_before - 1);
    let w: &mut [u64] = seg.as_mut_slice();
    for (i, x) in w.iter_mut().enumerate().step_by(511) {
        *x = mix(i as u64);
    }
    assert!(w
        .iter()
        .enumerate()
        .step_by(511)
        .all(|(i, &x)| x == mix(i as u64)));
    drop(seg);
    assert_eq!(hugepages::pool(HugePageSize::Size1G).free, free_before);
}

#[test]
fn segment_falls_back_to_2m_or_fails_as_asked() {
    let _g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_none) = HugePool::set_of(HugePageSize::Size1G, 0) else {
        return;
    };
    let Some(_pool) = HugePool::reserve(3) else {
        return;
    };
    // No 1 GiB pages: with fallback, 2 MiB pages (size rounded up).
    let mut seg = Segment::new(5 * MIB as usize).unwrap();
    assert_eq!(seg.page_size(), HugePageSize::Size2M);
    assert!(seg.fell_back());
    assert_eq!(seg.len(), 6 * MIB as usize);
    seg.as_mut_slice::<u8>()[5 * MIB as usize] = 7;
    drop(seg);
    // Without fallback: an error naming the command that fixes it.
    let e = Segment::with_config(&SegmentConfig {
        fallback: false,
        ..SegmentConfig::new(1 << 30)
    })
    .unwrap_err();
    assert!(matches!(e, Error::HugePages { size: "1G", .. }), "{e:?}");
    assert!(e.to_string().contains("tiermem hugepages reserve 1G:1"), "{e}");
    // Neither pool large enough: the 1 GiB shortage is reported.
    if hugepages::pool(HugePageSize::Size2M).available() < 512 {
        let e = Segment::new(1 << 30).unwrap_err();
        assert!(e.to_string().contains("needed for a segment"), "{e}");
    }
}

#[test]
fn segment_of_zero_bytes_is_refused() {
    let e = Segment::new(0).unwrap_err();
    assert!(e.to_string().contains("segment size must not be zero"), "{e}");
}

#[test]
fn pools_grow_and_shrink_as_reported() {
    let _g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::is_root() {
        eprintln!("skipped: needs root to change huge page pools");
        return;
    }
    let before = hugepages::pool(HugePageSize::Size2M);
    // Puts the pool back even if an assertion below fails.
    let Some(_restore) = HugePool::set_of(HugePageSize::Size2M, before.total) else {
        return;
    };
    let change = hugepages::reserve(&PoolRequest {
        size: HugePageSize::Size2M,
        pages: before.available() + 2,
    })
    .unwrap();
    assert_eq!(change.before, before);
    assert!(change.complete(), "{change}");
    assert_eq!(change.after.total, before.total + 2);
    assert!(change
        .to_string()
        .contains(&format!("{} -> {}", before.total, before.total + 2)));
    let back = hugepages::release(HugePageSize::Size2M, Some(2)).unwrap();
    assert_eq!(back.after.total, before.total, "{back}");
}

/// One process mixes page sizes: a 4 KiB, a hugetlb 2 MiB and a THP region
/// alive at once, each churned through its budget and checked.
#[test]
fn page_sizes_mix_in_one_process() {
    let _g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_pool) = HugePool::reserve(POOL_PAGES) else {
        return;
    };
    let mut sizes = vec![PageSize::Base4K, PageSize::Huge2M];
    if thp_enabled() {
        sizes.push(PageSize::Thp2M);
    }
    let mut regions: Vec<Region> = sizes
        .iter()
        .map(|&p| Region::new(cfg_of(p, FaultPath::InContext, DirtyTracking::WpFault, false)).unwrap())
        .collect();
    for round in 0..2u64 {
        for (k, r) in regions.iter_mut().enumerate() {
            for (i, x) in r.as_mut_slice::<u64>().iter_mut().enumerate().step_by(509) {
                *x = mix(i as u64 ^ (k as u64) << 40 ^ round);
            }
        }
        for (k, r) in regions.iter_mut().enumerate() {
            let bad = r
                .as_mut_slice::<u64>()
                .iter()
                .enumerate()
                .step_by(509)
                .filter(|&(i, &x)| x != mix(i as u64 ^ (k as u64) << 40 ^ round))
                .count();
            assert_eq!(bad, 0, "{} round {round}", sizes[k]);
        }
    }
    for (r, p) in regions.iter().zip(&sizes) {
        let s = r.stats();
        assert!(s.evictions > 0, "{p}: {s:?}");
        assert_eq!(s.bytes_in % r.page_bytes() as u64, 0, "{p}");
    }
}

/// `TIERMEM_GLOBAL_HEAP=2m`: `tm_malloc_global` is served by a huge-page
/// heap (paper 3): 2 MiB pages from the pool while it lasts, then THP with
/// a fallback counted; memory reads as zeros, frees are checked. Runs in a
/// child process (the process-wide heap is made once, from the
/// environment).
#[test]
fn global_heap_on_huge_pages_falls_back_when_the_pool_runs_dry() {
    const NAME: &str = "global_heap_on_huge_pages_falls_back_when_the_pool_runs_dry";
    if !common::is_child(NAME) {
        let _one = POOL.lock().unwrap_or_else(|p| p.into_inner());
        // Exactly 4 pages for the child: its 16 MiB need 8 chunks.
        let Some(_pool) = HugePool::set_of(tiermem_sys::hugetlb::HugePageSize::Size2M, 4) else {
            eprintln!("skipped: {NAME} needs a 2 MiB pool of exactly 4 pages");
            return;
        };
        let (status, err) = common::run_child(NAME);
        assert!(status.success(), "child failed: {err}");
        assert!(err.contains("falls back to thp"), "one warning line: {err}");
        return;
    }
    std::env::set_var("TIERMEM_GLOBAL_HEAP", "2m");
    std::env::set_var("TIERMEM_FAR", "64M");
    let len = 16 << 20;
    let a = tiermem::global::malloc_global(len).expect("16 MiB from a 64 MiB heap");
    assert_eq!(a % (2 << 20), 0, "2 MiB aligned");
    for i in (0..len).step_by(4096) {
        let p = (a + i) as *mut u64;
        // SAFETY: [a, a + len) was just allocated to us and is mapped.
        let fresh = unsafe { p.read_volatile() };
        assert_eq!(fresh, 0, "fresh memory is zero at {i}");
        // SAFETY: as above.
        unsafe { p.write_volatile(mix(i as u64)) };
    }
    for i in (0..len).step_by(4096) {
        // SAFETY: as above.
        let v = unsafe { ((a + i) as *const u64).read_volatile() };
        assert_eq!(v, mix(i as u64));
    }
    let h = tiermem::global::global_huge_stats().expect("a huge-page heap");
    assert_eq!(h.bytes_2m, 8 << 20, "the pool's 4 pages: {h:?}");
    assert!(
        h.fallbacks >= 1 && h.bytes_thp >= 8 << 20,
        "the rest fell back: {h:?}"
    );
    assert!(tiermem::global::global_stats().is_none(), "no tiered region");
    assert!(tiermem::global::malloc_global(64 << 20).is_err(), "full");
    tiermem::global::free_global(a).unwrap();
    assert!(
        tiermem::global::free_global(a).is_err(),
        "double free is detected"
    );
    assert!(tiermem::global::free_global(a + 4096).is_err());
    let b = tiermem::global::malloc_global(len).unwrap();
    // SAFETY: as above, for the new allocation.
    let reused = unsafe { (b as *const u64).read_volatile() };
    assert_eq!(reused, 0, "reused memory is zero");
}
