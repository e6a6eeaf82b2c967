//! Tiered regions with 2 MiB hugetlbfs pages: data moves 2 MiB at a time,
//! dirty tracking and eviction work as with 4 KiB pages. Reserves a pool
//! when running as root and restores it; skips with a message otherwise.

#[path = "../common/mod.rs"]
mod common;

use common::{mix, HugePool};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use tiermem::{Config, DirtyTracking, FarStoreConfig, FaultPath, PageSize, Region};

const MIB: u64 = 1 << 20;
static POOL: Mutex<()> = Mutex::new(());
/// The budget is 8 huge pages; the pool gets a margin because the kernel
/// can need a free huge page beyond the resident ones for a moment (a
/// fill racing the free of an evicted page, or pages of the previous
/// test still being released), and an empty pool turns that into SIGBUS.
const POOL_PAGES: u64 = 12;

fn cfg(fp: FaultPath, dt: DirtyTracking, file: bool) -> Config {
    let mut c = Config::new(64 * MIB, 16 * MIB);
    c.page_size = PageSize::Huge2M;
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

#[test]
fn huge_pages_tier_in_every_variant() {
    let _g = POOL.lock().unwrap();
    let Some(_pool) = HugePool::reserve(POOL_PAGES) else {
        return;
    };
    for fp in [FaultPath::InContext, FaultPath::HandlerThread] {
        for dt in [DirtyTracking::WpFault, DirtyTracking::WpAsync] {
            for file in [false, true] {
                let what = format!("{} {} file={file}", fp.name(), dt.name());
                let mut r = Region::new(cfg(fp, dt, file)).expect(&what);
                assert_eq!(r.page_bytes(), 2 << 20);
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
                assert_eq!(s.faults_zero_fill, 32, "{what}: 32 huge pages first-touched");
                assert!(s.evictions > 0 && s.bytes_in > 0, "{what}: {s:?}");
                assert_eq!(s.bytes_in % (2 << 20), 0, "{what}: moves whole huge pages");
                assert!(s.resident_bytes <= 16 * MIB, "{what}");
                assert!(r.errors().is_empty(), "{what}: {:?}", r.errors());
            }
        }
    }
}

#[test]
fn huge_pages_under_concurrent_churn() {
    let _g = POOL.lock().unwrap();
    let Some(_pool) = HugePool::reserve(POOL_PAGES) else {
        return;
    };
    let r = Region::new(cfg(FaultPath::InContext, DirtyTracking::WpFault, false)).unwrap();
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
