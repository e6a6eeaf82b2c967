//! Stress in the spirit of the kernel's uffd-stress: threads do random reads
//! and writes over a region eight times its near budget for a bounded time,
//! then every page is verified.
//!
//! The first half of the region holds counters: threads atomically
//! increment random words and mirror each increment in a side table
//! outside the region (side first, so a word can never exceed its mirror;
//! lost or stale data shows up as a mismatch at the end). The second half
//! holds pattern pages: a writer rewrites a whole page with a pattern of
//! (page, generation) under a per-page lock, a reader checks a whole page
//! against its current generation. Both halves run concurrently with
//! eviction, write-protect faults and (wp-async) freezes.
//!
//! `TIERMEM_STRESS_SECS` sets the time per variant (default 2).

#[path = "../common/mod.rs"]
mod common;

use common::{config, mix, variants};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tiermem::{Config, Region};

fn secs() -> f64 {
    std::env::var("TIERMEM_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0)
}

fn pattern(page: usize, gen: u64, w: usize) -> u64 {
    if gen == 0 {
        0
    } else {
        mix((page as u64) << 32 ^ gen << 12 ^ w as u64)
    }
}

struct Outcome {
    ops: u64,
    corrupt: Vec<String>,
}

fn stress(cfg: Config, threads: usize, dur: Duration) -> (Outcome, tiermem::RegionStats) {
    let page_words = cfg.page_size.bytes() / 8;
    let r = Region::new(cfg).expect("region");
    let words = r.as_atomic_u64();
    let pages = words.len() / page_words;
    let counter_words = pages / 2 * page_words;
    let side: Vec<AtomicU32> = (0..counter_words).map(|_| AtomicU32::new(0)).collect();
    let locks: Vec<Mutex<u64>> = (pages / 2..pages).map(|_| Mutex::new(0)).collect();
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let bad = Mutex::new(Vec::new());
    let report = |m: String| {
        let mut b = bad.lock().unwrap();
        if b.len() < 20 {
            b.push(m);
        }
    };
    std::thread::scope(|s| {
        for t in 0..threads {
            let (side, locks, stop, ops, report) = (&side, &locks, &stop, &ops, &report);
            s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ ((t as u64 + 1) * 0x1234_5678);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    match x % 9 {
                        8 => {
                            // A short sequential sweep: gives the prefetcher
                            // streams to follow among the random accesses.
                            let start = (x >> 8) as usize % counter_words;
                            let end = (start + 64 * page_words).min(counter_words);
                            for w in (start..end).step_by(page_words / 4) {
                                let v = words[w].load(Ordering::SeqCst);
                                let m = side[w].load(Ordering::SeqCst) as u64;
                                if v > m {
                                    report(format!("sweep: counter word {w}: region {v} > mirror {m}"));
                                }
                            }
                        }
                        0..=3 => {
                            let w = (x >> 8) as usize % counter_words;
                            side[w].fetch_add(1, Ordering::SeqCst);
                            words[w].fetch_add(1, Ordering::SeqCst);
                        }
                        4 | 5 => {
                            let w = (x >> 8) as usize % counter_words;
                            let v = words[w].load(Ordering::SeqCst);
                            let m = side[w].load(Ordering::SeqCst) as u64;
                            if v > m {
                                report(format!("counter word {w}: region {v} > mirror {m}"));
                            }
                        }
                        6 => {
                            let p = (x >> 8) as usize % locks.len();
                            let page = pages / 2 + p;
                            let mut g = locks[p].lock().unwrap();
                            *g += 1;
                            for k in 0..page_words {
                                words[page * page_words + k].store(pattern(page, *g, k), Ordering::Relaxed);
                            }
                        }
                        _ => {
                            let p = (x >> 8) as usize % locks.len();
                            let page = pages / 2 + p;
                            let g = locks[p].lock().unwrap();
                            for k in 0..page_words {
                                let v = words[page * page_words + k].load(Ordering::Relaxed);
                                if v != pattern(page, *g, k) {
                                    report(format!("pattern page {page} word {k} gen {}: {v:#x}", *g));
                                    break;
                                }
                            }
                        }
                    }
                    n += 1;
                }
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
    });
    // Verify every page, after one more full eviction round trip.
    r.evict_all().expect("evict_all");
    for w in 0..counter_words {
        let (v, m) = (
            words[w].load(Ordering::SeqCst),
            side[w].load(Ordering::SeqCst) as u64,
        );
        if v != m {
            report(format!("final: counter word {w}: region {v}, expected {m}"));
        }
    }
    for (p, l) in locks.iter().enumerate() {
        let page = pages / 2 + p;
        let g = *l.lock().unwrap();
        for k in 0..page_words {
            let v = words[page * page_words + k].load(Ordering::Relaxed);
            if v != pattern(page, g, k) {
                report(format!("final: pattern page {page} word {k} gen {g}: {v:#x}"));
                break;
            }
        }
    }
    let stats = r.stats();
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    drop(r);
    let corrupt = bad.into_inner().unwrap();
    (
        Outcome {
            ops: ops.load(Ordering::Relaxed),
            corrupt,
        },
        stats,
    )
}

#[test]
fn stress_every_variant_eight_times_the_budget() {
    let dur = Duration::from_secs_f64(secs());
    for (fp, dt, store) in variants() {
        let what = format!("{} {} {}", fp.name(), dt.name(), store);
        let mut cfg = config(16 << 20, 2 << 20, fp, dt, store);
        cfg.evict_batch_pages = 32;
        let t0 = Instant::now();
        let (o, s) = stress(cfg, 4, dur);
        eprintln!(
            "{what:<36} {:>9} ops, {:>7} fills, {:>7} wp faults, {:>7} evictions, {:>6} waits, {:.1}s",
            o.ops,
            s.fills(),
            s.faults_write_protect,
            s.evictions,
            s.waits_in_flight,
            t0.elapsed().as_secs_f64()
        );
        assert!(o.corrupt.is_empty(), "{what}: corrupted pages: {:#?}", o.corrupt);
        assert!(
            s.evictions > 1000,
            "{what}: too little churn to mean anything: {s:?}"
        );
        assert!(o.ops > 1000, "{what}");
    }
}

#[test]
fn stress_with_movers_prefetch_and_every_policy() {
    let dur = Duration::from_secs_f64(secs());
    let cpus = tiermem_sys::thread::online_cpus();
    for &policy in tiermem::PolicyKind::ALL {
        for (dt, install) in [
            (tiermem::DirtyTracking::WpFault, tiermem::InstallMethod::Copy),
            (tiermem::DirtyTracking::WpFault, tiermem::InstallMethod::Move),
            (tiermem::DirtyTracking::WpAsync, tiermem::InstallMethod::Copy),
        ] {
            for movers in [1, 2] {
                let what = format!("{policy} {} {} movers={movers}", dt.name(), install.name());
                let mut cfg = Config::new(16 << 20, 2 << 20);
                cfg.install = install;
                cfg.policy = policy;
                cfg.dirty_tracking = dt;
                cfg.movers = movers;
                cfg.mover_cpus = vec![cpus - 1];
                cfg.evict_batch_pages = 32;
                cfg.prefetch_max_pages = 64;
                let t0 = Instant::now();
                let (o, s) = stress(cfg, 3, dur / 2);
                eprintln!(
                    "{what:<32} {:>8} ops, {:>7} demand fills, {:>7} mover fills, {:>7} evictions ({} inline), prefetch used {} wasted {}, {:.1}s",
                    o.ops,
                    s.fills(),
                    s.mover_fills,
                    s.evictions,
                    s.inline_evictions,
                    s.prefetch.used,
                    s.prefetch.wasted,
                    t0.elapsed().as_secs_f64()
                );
                assert!(o.corrupt.is_empty(), "{what}: corrupted pages: {:#?}", o.corrupt);
                assert!(s.evictions > 500, "{what}: too little churn: {s:?}");
                assert!(s.mover_fills > 0, "{what}: movers never filled: {s:?}");
            }
        }
    }
}

#[test]
fn stress_with_single_page_batches_and_minimum_budget() {
    // The smallest legal budget (4 pages) and one page per eviction: the
    // hardest case for the protocol (every fault evicts).
    let mut cfg = Config::new(1 << 20, 4 * 4096);
    cfg.evict_batch_pages = 1;
    let (o, s) = stress(cfg, 3, Duration::from_secs_f64(secs() / 2.0));
    assert!(o.corrupt.is_empty(), "{:#?}", o.corrupt);
    assert!(s.evictions > 1000, "{s:?}");
}

/// Regression: a read and a write racing on a never-written page. The read
/// fault installs the page; if that took two steps (zero page, then write
/// protection), a write landing between them was invisible to dirty
/// tracking and the page was later dropped as all-zeros: a lost write.
#[test]
fn first_read_racing_a_first_write_loses_nothing() {
    for &dt in tiermem::DirtyTracking::ALL {
        let pages = 4096;
        let mut c = Config::new(pages as u64 * 4096, 64 * 4096);
        c.dirty_tracking = dt;
        let r = Region::new(c).unwrap();
        let words = r.as_atomic_u64();
        let turn = AtomicU64::new(0);
        let done = AtomicU64::new(0);
        std::thread::scope(|s| {
            // Reader: touches page p as soon as the writer is about to.
            s.spawn(|| {
                let _ = tiermem_sys::thread::set_affinity(&[0]);
                for p in 0..pages {
                    while turn.load(Ordering::Acquire) < p as u64 {
                        std::hint::spin_loop();
                    }
                    std::hint::black_box(words[p * 512].load(Ordering::Relaxed));
                    done.fetch_add(1, Ordering::AcqRel);
                }
            });
            s.spawn(|| {
                let cpus = tiermem_sys::thread::online_cpus();
                let _ = tiermem_sys::thread::set_affinity(&[cpus - 1]);
                for p in 0..pages {
                    turn.store(p as u64, Ordering::Release);
                    // Sweep the write across the reader's fault handling
                    // (signal delivery takes ~3 us here): 0 to 8 us later.
                    let t = std::time::Instant::now();
                    let delay = std::time::Duration::from_nanos((p as u64 % 80) * 100);
                    while t.elapsed() < delay {
                        std::hint::spin_loop();
                    }
                    words[p * 512 + 1].store(p as u64 + 1, Ordering::Relaxed);
                    while done.load(Ordering::Acquire) <= p as u64 {
                        std::hint::spin_loop();
                    }
                }
            });
        });
        // wp-fault: how often the write landed between the zero page and
        // its protection (the page is then published dirty).
        eprintln!(
            "{}: {} first writes raced a read zero-fill's protection",
            dt.name(),
            r.stats().zero_fill_races
        );
        r.evict_all().unwrap();
        let lost: Vec<usize> = (0..pages)
            .filter(|&p| words[p * 512 + 1].load(Ordering::Relaxed) != p as u64 + 1)
            .collect();
        assert!(
            lost.is_empty(),
            "{}: {} of {pages} writes lost, e.g. pages {:?}",
            dt.name(),
            lost.len(),
            &lost[..lost.len().min(8)]
        );
    }
}

/// Frame recycling without movers (`install = move`, synchronous faults):
/// faulting threads move their eviction batches out into the frame ring
/// and fill from it, single pages and fault-around clusters, every policy;
/// every page checked.
#[test]
fn stress_synchronous_frame_recycling() {
    let dur = Duration::from_secs_f64(secs());
    for &policy in tiermem::PolicyKind::ALL {
        for fault_around in [true, false] {
            let what = format!("{policy} fault-around {fault_around}");
            let mut cfg = Config::new(16 << 20, 2 << 20);
            cfg.install = tiermem::InstallMethod::Move;
            cfg.policy = policy;
            cfg.fault_around = fault_around;
            cfg.evict_batch_pages = 32;
            let (o, s) = stress(cfg, 3, dur / 3);
            eprintln!(
                "{what:<28} {:>8} ops, {:>7} fills ({} recycled), {:>7} evictions",
                o.ops,
                s.fills(),
                s.recycled_installs,
                s.evictions
            );
            assert!(o.corrupt.is_empty(), "{what}: corrupted pages: {:#?}", o.corrupt);
            assert!(s.evictions > 1000, "{what}: too little churn: {s:?}");
            if tiermem_sys::uffd::Features::probe()
                .is_ok_and(|f| f.contains(tiermem_sys::uffd::Features::MOVE))
            {
                assert!(
                    s.recycled_installs > s.faults_far_fill / 4,
                    "{what}: the ring was not used: {s:?}"
                );
            }
        }
    }
}

/// Sequential sweeps (forward, backward, a read stream beside a write
/// stream) over four times the budget with one mover, every policy: the
/// prefetcher's windows, its triggers and the catch-up fills of threads
/// that fault late inside a window (they fill up to the trigger
/// themselves) all run; every word is checked after each pass.
#[test]
fn sweeps_with_prefetch_and_catch_up_keep_every_page() {
    let mut caught_up = 0;
    for &policy in tiermem::PolicyKind::ALL {
        for install in [tiermem::InstallMethod::Copy, tiermem::InstallMethod::Move] {
            let mut cfg = Config::new(16 << 20, 4 << 20);
            cfg.policy = policy;
            cfg.install = install;
            cfg.movers = 1;
            cfg.prefetch_max_pages = 128;
            let what = format!("{policy} {}", install.name());
            let page_words = cfg.page_size.bytes() / 8;
            let r = Region::new(cfg).expect("region");
            let words = r.as_atomic_u64();
            let n = words.len();
            let half = n / 2;
            let val = |w: usize, pass: u64| (w as u64).wrapping_mul(0x9e37_79b9) ^ (pass << 48);
            // Pass 0 writes everything forward.
            for (w, x) in words.iter().enumerate() {
                x.store(val(w, 0), Ordering::Relaxed);
            }
            for pass in 1..4u64 {
                // Read the first half (checking pass - 1), write the second
                // half with the new pass, in lock step page by page; the
                // direction alternates.
                let pages = half / page_words;
                for k in 0..pages {
                    let pg = if pass % 2 == 0 { k } else { pages - 1 - k };
                    for j in 0..page_words {
                        let a = pg * page_words + j;
                        let v = words[a].load(Ordering::Relaxed);
                        assert_eq!(v, val(a, pass - 1), "{what}: pass {pass} word {a}");
                        words[a].store(val(a, pass), Ordering::Relaxed);
                        let b = half + a;
                        let v = words[b].load(Ordering::Relaxed);
                        assert_eq!(v, val(b, pass - 1), "{what}: pass {pass} word {b}");
                        words[b].store(val(b, pass), Ordering::Relaxed);
                    }
                }
            }
            for (w, x) in words.iter().enumerate() {
                assert_eq!(x.load(Ordering::Relaxed), val(w, 3), "{what}: final word {w}");
            }
            let s = r.stats();
            assert!(r.errors().is_empty(), "{what}: {:?}", r.errors());
            eprintln!(
                "{what:<12} evictions {}, demand fills {}, mover fills {}, prefetch issued {} used {} wasted {} late {} catch-up pages {} spared {}",
                s.evictions,
                s.fills(),
                s.mover_fills,
                s.prefetch.issued,
                s.prefetch.used,
                s.prefetch.wasted,
                s.prefetch.late,
                s.prefetch.inline,
                s.prefetch.spared
            );
            assert!(s.evictions > 4096, "{what}: too little churn: {s:?}");
            assert!(s.prefetch.used > 0, "{what}: prefetch never used: {s:?}");
            caught_up += s.prefetch.inline;
        }
    }
    eprintln!("catch-up pages over all variants: {caught_up}");
    assert!(caught_up > 0, "no thread ever caught up with the mover");
}

/// `install = move` over a far store that cannot compare in place (a file):
/// pages moved in for a read stream are Dirty + VERIFY, every word is
/// checked after each read pass, and no read counts as a racing write.
#[test]
fn move_install_over_a_file_store_counts_no_false_races() {
    let mut cfg = Config::new(8 << 20, 2 << 20);
    cfg.far = tiermem::FarStoreConfig::File {
        path: std::env::temp_dir(),
        direct: false,
    };
    cfg.install = tiermem::InstallMethod::Move;
    cfg.movers = 1;
    cfg.prefetch_max_pages = 64;
    let r = Region::new(cfg).expect("region");
    let words = r.as_atomic_u64();
    let val = |w: usize| (w as u64).wrapping_mul(0x9e37_79b9) ^ 0x5a5a;
    for (w, x) in words.iter().enumerate() {
        x.store(val(w), Ordering::Relaxed);
    }
    for pass in 0..3 {
        for (w, x) in words.iter().enumerate() {
            assert_eq!(x.load(Ordering::Relaxed), val(w), "pass {pass} word {w}");
        }
    }
    let s = r.stats();
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    assert!(s.mover_fills > 0, "the mover never filled: {s:?}");
    assert_eq!(s.zero_fill_races, 0, "no thread wrote during the reads: {s:?}");
}
