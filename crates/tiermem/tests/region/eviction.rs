//! Eviction as the faulting threads do it: victims unmapped together,
//! dirty victims through the pipe, batches bounded by the budget and grown
//! over long runs.

use super::*;

/// Random read-modify-writes evict scattered victims, one page per run:
/// their unmaps are made together, one system call (one TLB shootdown of
/// the other CPUs) per 64 runs where the kernel batches `process_madvise`
/// (issue 36), not one per page; every word survives, on both fault paths
/// and with both dirty trackings.
#[test]
fn scattered_victims_are_unmapped_together() {
    let batched = tiermem_sys::mm::batched_discard();
    for (fp, dt, store) in variants().into_iter().filter(|v| v.2 == "memory") {
        let what = format!("{} {}", fp.name(), dt.name());
        let mut c = config(32 * MIB, 8 * MIB, fp, dt, store);
        c.install = tiermem::InstallMethod::Copy;
        c.evict_batch_pages = 64;
        let r = Region::new(c).unwrap();
        let words = r.as_atomic_u64();
        fill_mixed(words);
        r.reset_stats();
        xor_updates(words, 0x9e37_79b9_7f4a_7c15, 50_000);
        let s = r.stats();
        xor_updates(words, 0x9e37_79b9_7f4a_7c15, 50_000);
        check_mixed(words, &what);
        eprintln!(
            "{what}: {} evictions in {} unmap calls (batched: {batched})",
            s.evictions, s.evict_calls
        );
        assert!(s.evictions > 10_000, "{what}: {s:?}");
        if batched {
            assert!(
                s.evict_calls * 8 < s.evictions,
                "{what}: {} unmap calls for {} evictions",
                s.evict_calls,
                s.evictions
            );
        } else {
            eprintln!("skipped the call count: this kernel does not batch process_madvise(MADV_DONTNEED)");
        }
        assert!(r.errors().is_empty(), "{:?}", r.errors());
    }
}

/// Dirty victims are read after their batch's unmap through a pipe that
/// holds the pages themselves (issue 36): no write protection per victim
/// run first (a TLB shootdown of every other CPU each), and no write that
/// lands before the unmap is lost: two threads update the same words,
/// both fault paths, both stores, and with the far store failing writes
/// now and then (a page whose write-back fails is mapped back).
#[test]
fn dirty_victims_leave_through_the_pipe_without_write_protection() {
    let wp_fault = |v: &(FaultPath, DirtyTracking, &str)| v.1 == DirtyTracking::WpFault;
    for (fp, dt, store) in variants().into_iter().filter(wp_fault) {
        for inject in [None, Some("write:0.02,seed:7")] {
            let what = format!("{} {store} inject {inject:?}", fp.name());
            let mut c = config(32 * MIB, 8 * MIB, fp, dt, store);
            c.install = tiermem::InstallMethod::Copy;
            c.evict_batch_pages = 64;
            c.fault_inject = inject.map(String::from);
            let r = Region::new(c).unwrap();
            let words = r.as_atomic_u64();
            // No sequential fill first: one run of 64 pages whose write-back
            // fails is a batch that frees nothing, and the fault waiting
            // for it gets SIGBUS (by design: the store is failing). The
            // updates start from zeros; done twice, they restore them.
            let both = || {
                std::thread::scope(|s| {
                    s.spawn(|| xor_updates(words, 0x1234_5678_9abc_def1, 40_000));
                    xor_updates(words, 0x0fed_cba9_8765_4321, 40_000);
                })
            };
            if inject.is_none() {
                fill_mixed(words);
            } else {
                // Every page once through the far store first: only pages
                // installed from far data are piped (see `pipe_dirty`).
                both();
                both();
            }
            r.reset_stats();
            both();
            let st = r.stats();
            both();
            if inject.is_none() {
                check_mixed(words, &what);
            } else {
                let wrong = words
                    .iter()
                    .position(|w| w.load(std::sync::atomic::Ordering::Relaxed) != 0);
                assert_eq!(wrong, None, "{what}: a word lost an update");
            }
            eprintln!(
                "{what}: {} write-backs, {} through the pipe, {} protect calls, {} evictions",
                st.write_backs, st.write_backs_piped, st.evict_protect_calls, st.evictions
            );
            assert!(st.write_backs > 10_000, "{what}: {st:?}");
            assert!(
                st.write_backs_piped * 10 >= st.write_backs * 9,
                "{what}: {} of {} write-backs through the pipe",
                st.write_backs_piped,
                st.write_backs
            );
            assert!(
                st.evict_protect_calls * 20 <= st.write_backs,
                "{what}: {} protect calls for {} write-backs",
                st.evict_protect_calls,
                st.write_backs
            );
            if inject.is_none() {
                assert!(r.errors().is_empty(), "{what}: {:?}", r.errors());
            } else {
                assert!(!r.errors().is_empty(), "{what}: no write failed");
            }
        }
    }
}

/// Pages never installed from far data (first read as the shared zero
/// page, then written) are not piped at their first eviction: until the
/// kernel's copy-on-write gives the writer its own page, the pipe would
/// hold the zero page and the write would be lost (a race `tiermem run --
/// tiermem stress --plain` hit). Two threads fault, so evictions pipe.
#[test]
fn pages_first_read_as_the_zero_page_are_not_piped() {
    let mut c = Config::new(16 * MIB, 4 * MIB);
    c.install = tiermem::InstallMethod::Copy;
    c.fault_around = false;
    let r = Region::new(c).unwrap();
    let words = r.as_atomic_u64();
    let per_page = 4096 / 8;
    let half = words.len() / 2;
    let pass = |from: usize| {
        for p in (from..from + half).step_by(per_page) {
            let seen = words[p].load(std::sync::atomic::Ordering::Relaxed);
            words[p].store(seen + mix(p as u64), std::sync::atomic::Ordering::Relaxed);
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| pass(half));
        pass(0);
    });
    let st = r.stats();
    for p in (0..words.len()).step_by(per_page) {
        assert_eq!(
            words[p].load(std::sync::atomic::Ordering::Relaxed),
            mix(p as u64),
            "page {}",
            p / per_page
        );
    }
    assert!(st.write_backs > 1000, "{st:?}");
    assert_eq!(st.write_backs_piped, 0, "{st:?}");
}

/// `install = auto` copies, alone and with two faulting threads (frame
/// recycling measured slower on Linux 6.18: `InstallMethod::Auto`), and
/// two threads unmap their victims in batches; `install = move` still
/// recycles. Every word is checked after the updates undo themselves.
#[test]
fn auto_installs_by_copy_alone_and_with_two_threads() {
    let r = Region::new(Config::new(32 * MIB, 8 * MIB)).unwrap();
    let words = r.as_atomic_u64();
    fill_mixed(words);
    let update = |seed: u64, n: usize| xor_updates(words, seed, n);
    r.reset_stats();
    update(0x9e37_79b9_7f4a_7c15, 20_000);
    let alone = r.stats();
    r.reset_stats();
    std::thread::scope(|s| {
        s.spawn(|| update(0x1234_5678_9abc_def1, 20_000));
        update(0x0fed_cba9_8765_4321, 20_000);
    });
    let two = r.stats();
    update(0x9e37_79b9_7f4a_7c15, 20_000);
    update(0x1234_5678_9abc_def1, 20_000);
    update(0x0fed_cba9_8765_4321, 20_000);
    for (i, w) in words.iter().enumerate() {
        assert_eq!(
            w.load(std::sync::atomic::Ordering::Relaxed),
            mix(i as u64),
            "word {i}"
        );
    }
    assert!(
        alone.evictions > 1000 && two.evictions > 1000,
        "{alone:?} {two:?}"
    );
    assert_eq!((alone.recycled_installs, two.recycled_installs), (0, 0));
    if tiermem_sys::mm::batched_discard() {
        assert!(two.evict_calls * 8 < two.evictions, "{two:?}");
    }
    let mut c = Config::new(32 * MIB, 8 * MIB);
    c.install = tiermem::InstallMethod::Move;
    let m = Region::new(c).unwrap();
    let mwords = m.as_atomic_u64();
    fill_mixed(mwords);
    xor_updates(mwords, 0x5555_6666_7777_8889, 20_000);
    let moved = m.stats();
    if tiermem_sys::uffd::Features::probe().is_ok_and(|f| f.contains(tiermem_sys::uffd::Features::MOVE)) {
        assert!(moved.recycled_installs > 0, "{moved:?}");
    }
    xor_updates(mwords, 0x5555_6666_7777_8889, 20_000);
    for (i, w) in mwords.iter().enumerate() {
        assert_eq!(
            w.load(std::sync::atomic::Ordering::Relaxed),
            mix(i as u64),
            "word {i}"
        );
    }
}

/// A faulting thread's batch is at most a quarter of the budget, whatever
/// `evict_batch_pages` asks: with 2 MiB pages the default 64 were the whole
/// budget, and one thread's batch left another nothing to evict.
#[test]
fn a_faulting_threads_batch_is_at_most_a_quarter_of_the_budget() {
    const PAGE: usize = 4096;
    let budget = 16;
    for fp in [FaultPath::InContext, FaultPath::HandlerThread] {
        let mut c = Config::new(MIB, (budget * PAGE) as u64);
        c.fault_path = fp;
        assert!(
            c.evict_batch_pages >= budget,
            "the default must be larger than this budget"
        );
        let r = Region::new(c).unwrap();
        let words = r.as_atomic_u64();
        let per_page = PAGE / 8;
        let pages = words.len() / per_page;
        // Scattered (no runs to grow a batch over), every page twice.
        let order: Vec<usize> = (0..2 * pages).map(|k| (k * 37) % pages).collect();
        let mut lowest = usize::MAX;
        for (k, &p) in order.iter().enumerate() {
            words[p * per_page].store(mix(k as u64), std::sync::atomic::Ordering::Relaxed);
            let s = r.stats();
            if s.evictions > 0 {
                lowest = lowest.min(s.resident_bytes as usize / PAGE);
            }
        }
        // Full, less one batch of 4, plus the page just filled.
        assert!(
            lowest > budget - budget / 4,
            "{fp:?}: {lowest} pages resident after an eviction at a budget of {budget}"
        );
        let mut last = vec![0u64; pages];
        for (k, &p) in order.iter().enumerate() {
            last[p] = mix(k as u64);
        }
        for (p, want) in last.iter().enumerate() {
            assert_eq!(
                words[p * per_page].load(std::sync::atomic::Ordering::Relaxed),
                *want,
                "page {p}"
            );
        }
    }
}

/// A faulting thread's eviction batch grows over long runs of victims (a
/// sequential sweep: one unmap call per several batches' worth of pages)
/// and stays at `evict_batch_pages` for scattered ones (random updates).
#[test]
fn eviction_batches_grow_over_long_runs_only() {
    let r = Region::new(Config::new(32 * MIB, 8 * MIB)).unwrap();
    let words = r.as_atomic_u64();
    fill_mixed(words);
    r.reset_stats();
    for (i, w) in words.iter().enumerate().step_by(512) {
        assert_eq!(
            w.load(std::sync::atomic::Ordering::Relaxed),
            mix(i as u64),
            "word {i}"
        );
    }
    let sweep = r.stats();
    let batch = Config::new(32 * MIB, 8 * MIB).evict_batch_pages as u64;
    assert!(sweep.evictions > 4000, "{sweep:?}");
    assert!(
        sweep.evictions > 4 * batch * sweep.evict_calls,
        "a sweep's batches did not grow: {} evictions in {} unmap calls",
        sweep.evictions,
        sweep.evict_calls
    );
    // Random updates, once the sweep's pages have left (in fill order).
    xor_updates(words, 0x1357_9bdf_2468_ace0, 20_000);
    r.reset_stats();
    xor_updates(words, 0x2468_ace0_1357_9bdf, 20_000);
    let scattered = r.stats();
    assert!(scattered.evictions > 4000, "{scattered:?}");
    assert!(
        // (a batch's runs take in the resident pages in small gaps)
        scattered.evictions <= 2 * batch * scattered.evict_calls,
        "scattered victims grew a batch: {} evictions in {} unmap calls",
        scattered.evictions,
        scattered.evict_calls
    );
    xor_updates(words, 0x2468_ace0_1357_9bdf, 20_000);
    xor_updates(words, 0x1357_9bdf_2468_ace0, 20_000);
    eprintln!(
        "sweep: {} evictions in {} unmap calls; scattered: {} in {}",
        sweep.evictions, sweep.evict_calls, scattered.evictions, scattered.evict_calls
    );
    for (i, w) in words.iter().enumerate() {
        assert_eq!(
            w.load(std::sync::atomic::Ordering::Relaxed),
            mix(i as u64),
            "word {i}"
        );
    }
}
