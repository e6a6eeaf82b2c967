//! Shared virtual memory (paper 5, Rhymes): litmus tests through the API
//! with an expected outcome per mode, multiple writers on one page, page
//! edges, mode switches, a randomized shuffle-and-sum, lock-counter
//! stress, a process that dies holding a lock, and bad input. Every test
//! runs at 2, 3 and 4 processes in every mode:
//!
//! | mode             | flavour     | pages                           |
//! |------------------|-------------|---------------------------------|
//! | `spm-coherent`   | coherent    | SPM in every process            |
//! | `spm-noncoherent`| noncoherent | SPM in every process            |
//! | `dsm`            | coherent    | DSM in every process            |
//! | `mixed`          | coherent    | DSM in even ranks, SPM in odd   |
//! | `mixed-nc`       | noncoherent | DSM in even ranks, SPM in odd   |
//!
//! Tests that fork run their body in a child test process with one thread
//! (`run_child`), so that fork() happens in a single-threaded process.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/svm_litmus.rs"]
mod litmus;

use common::{is_child, mix, run_child};
use litmus::{check, refused, spin_until, Kind, PAGE};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use tiermem::svm::{Svm, SvmConfig, SvmMode, SvmProc};
use tiermem::Error;

const KINDS: [Kind; 5] = [
    Kind::SpmCoherent,
    Kind::SpmNoncoherent,
    Kind::Dsm,
    Kind::Mixed,
    Kind::MixedNc,
];

fn svm(kind: Kind, procs: usize, heap: usize) -> Svm {
    let mut cfg = SvmConfig::new(heap, procs);
    cfg.flavour = kind.flavour();
    cfg.cpus = (0..tiermem_sys::thread::online_cpus()).collect();
    Svm::new(cfg).unwrap()
}

/// Allocates `pages` pages and puts them in this rank's mode.
fn alloc(p: &SvmProc<'_>, kind: Kind, pages: usize) -> Result<usize, Error> {
    litmus::alloc(p, kind.mode(p.rank()), pages)
}

/// Runs `f` for every kind at 2, 3 and 4 processes; the run must succeed.
fn each(name: &str, f: impl Fn(&SvmProc<'_>, Kind) -> Result<(), Error> + Sync) {
    for procs in [2, 3, 4] {
        for kind in KINDS {
            let s = svm(kind, procs, 4 << 20);
            if let Err(e) = s.run(|p| f(p, kind)) {
                panic!("{name}: {kind:?} at {procs} processes: {e}");
            }
        }
    }
}

macro_rules! child_test {
    ($name:ident, $body:block) => {
        #[test]
        fn $name() {
            if is_child(stringify!($name)) {
                $body
                return;
            }
            let (st, err) = run_child(stringify!($name));
            assert!(st.success(), "{err}");
        }
    };
}

// Litmus 1, message passing under one lock. Rank 0 writes data then a
// flag under lock 0; the others poll the flag under lock 0. Expected in
// every mode: a reader that sees the flag sees the data.
child_test!(message_passing_under_one_lock, {
    each("message passing", |p, kind| {
        litmus::message_passing(p, kind.mode(p.rank()), 0, Duration::from_secs(10))
    });
});

// Litmus 2, scope: x written under lock 1, y under lock 2; a process that
// cached x's page and acquires only lock 2 sees y = 1 and then x:
// - SPM reader (release consistency): x = 1 (stale forbidden);
// - DSM reader (scope consistency): stale x allowed. This implementation
//   invalidates only pages named in lock 2's notices, so x = 0 exactly,
//   except in `mixed` with 3+ processes where y's writer is SPM-coherent
//   and reports conservatively (x = 0 or 1).
// With 3 or more processes the chain is transitive: rank 0 writes x under
// lock 1; rank 1 takes lock 1, sees x, writes y under lock 2; rank 2
// takes lock 2 and reads y, then x.
child_test!(scope_consistency_allows_stale_data_outside_the_lock_scope, {
    each("scope", |p, kind| {
        // The SPM-coherent writer of y cannot tell which pages it wrote
        // untracked, and reports every page that became DSM-cached (x's
        // too): stale or not.
        let lenient = kind == Kind::Mixed && p.procs() > 2;
        litmus::scope(p, kind.mode(p.rank()), kind, lenient, |p| {
            // Past the barrier's validation everywhere before x is written
            // (a slow process would otherwise refetch x's page there).
            p.scratch()[40].fetch_add(1, Relaxed);
            let deadline = Instant::now() + Duration::from_secs(10);
            while p.scratch()[40].load(Relaxed) < p.procs() as u64 {
                spin_until(deadline, "everyone past the barrier")?;
            }
            Ok(deadline)
        })
    });
});

// Litmus 3, barriers: everyone writes its own words of shared pages
// without locks; after a barrier everyone sees every word.
child_test!(barriers_order_everything, {
    each("barriers", |p, kind| litmus::barriers(p, kind.mode(p.rank()), 2));
});

// Several processes write disjoint bytes of the same page, each under its
// own lock (multiple writers; diffs must be byte-exact): after a barrier
// every byte is right, in every process.
child_test!(multiple_writers_of_one_page_under_different_locks, {
    each("multiple writers", |p, kind| {
        let mode = kind.mode(p.rank());
        litmus::false_sharing(p, mode)?;
        let s = p.stats();
        if mode == SvmMode::Dsm {
            check(s.diffs > 0 && s.twins > 0 && s.notices_sent > 0, || {
                format!("DSM stats {s:?}")
            })?;
        }
        Ok(())
    });
});

// Byte-granular writes at page edges: each rank writes the bytes just
// before and just after a page boundary (and the heap block's first and
// last bytes), one byte apart from its neighbours.
child_test!(byte_granular_writes_at_page_edges, {
    each("page edges", |p, kind| {
        litmus::adjacent_bytes(p, kind.mode(p.rank()))
    });
});

// Mode switches between barriers: every round each process puts each page
// in a mode of its own choosing (some pages dirty in DSM when switched),
// writes its words, and after the barrier everyone checks everything.
child_test!(mode_switches_between_barriers, {
    each("mode switches", |p, kind| {
        litmus::mode_switches(p, kind.mode(p.rank()))
    });
});

// Randomized: each round a random permutation assigns every word of an
// array to a process, which writes it (some under a random lock, some
// without); after a barrier every process sums the array and compares.
child_test!(random_shuffle_write_then_sum, {
    each("shuffle", |p, kind| {
        let words = 3 * PAGE / 8 + 5;
        let a = alloc(p, kind, words.div_ceil(PAGE / 8))?;
        let w = p.u64s(a, words)?;
        let n = p.procs();
        for round in 0..4u64 {
            let mut perm: Vec<usize> = (0..words).collect();
            for i in (1..words).rev() {
                perm.swap(i, (mix(round * 1_000_003 + i as u64) % (i as u64 + 1)) as usize);
            }
            let lock = (round % 3) as usize;
            let locked = round % 2 == 1;
            if locked {
                p.lock(lock)?;
            }
            for (j, &k) in perm.iter().enumerate() {
                if j % n == p.rank() {
                    w[k].store(mix(k as u64 + round) >> 8, Relaxed);
                }
            }
            if locked {
                p.unlock(lock)?;
            }
            p.barrier()?;
            let sum: u64 = w.iter().map(|x| x.load(Relaxed)).fold(0, u64::wrapping_add);
            let want: u64 = (0..words)
                .map(|k| mix(k as u64 + round) >> 8)
                .fold(0, u64::wrapping_add);
            check(sum == want, || {
                format!("round {round}: sum {sum:#x}, want {want:#x}")
            })?;
            p.barrier()?;
        }
        Ok(())
    });
});

// Lock-counter stress: counters on one page, each under its own lock
// (false sharing between locks), incremented by everybody.
child_test!(lock_counter_stress, {
    each("counters", |p, kind| {
        let a = alloc(p, kind, 1)?;
        let c = p.u64s(a, 4)?;
        let iters = 150u64;
        for i in 0..iters {
            let id = (i as usize + p.rank()) % 4;
            p.lock(id)?;
            c[id].store(c[id].load(Relaxed) + 1, Relaxed);
            p.unlock(id)?;
        }
        p.barrier()?;
        let total: u64 = c.iter().map(|x| x.load(Relaxed)).sum();
        check(total == iters * p.procs() as u64, || format!("total {total}"))?;
        for (id, x) in c.iter().enumerate() {
            let want = (0..p.procs())
                .map(|r| (0..iters).filter(|&i| (i as usize + r) % 4 == id).count() as u64)
                .sum::<u64>();
            let v = x.load(Relaxed);
            check(v == want, || format!("counter {id} = {v}, want {want}"))?;
        }
        p.barrier()
    });
});

// The read-only private hint: a table written before a barrier is read
// by everyone through private copies. (Writes to such pages raise
// SIGSEGV; that is not tested here.)
child_test!(read_only_private_pages_are_cached_and_validated_at_barriers, {
    each("read-only private", |p, kind| {
        let a = alloc(p, kind, 2)?;
        let w = p.u64s(a, 2 * PAGE / 8)?;
        if p.rank() == 0 {
            for (k, x) in w.iter().enumerate() {
                x.store(k as u64 * 3, Relaxed);
            }
        }
        p.barrier()?;
        p.hint_read_only(a, 2 * PAGE)?;
        for round in 0..2 {
            let s: u64 = w.iter().map(|x| x.load(Relaxed)).sum();
            let want: u64 = (0..2 * PAGE as u64 / 8).map(|k| k * 3).sum();
            check(s == want, || format!("round {round}: sum {s}, want {want}"))?;
            p.barrier()?;
        }
        let st = p.stats();
        check(st.read_faults >= 2, || {
            format!("read-only private pages fetched: {st:?}")
        })?;
        p.barrier()
    });
});

// A process that dies holding a lock: the others' lock() fails within
// seconds naming it, and the run reports the dead worker.
child_test!(a_process_dying_with_a_lock_is_reported_not_waited_for, {
    for procs in [2, 3, 4] {
        for kind in [Kind::SpmCoherent, Kind::Dsm] {
            let s = svm(kind, procs, 1 << 20);
            let t0 = Instant::now();
            let r = s.run(|p| {
                litmus::rank_1_takes_lock(p, kind.mode(p.rank()), 5)?;
                if p.rank() == 1 {
                    p.scratch()[63].store(1, Relaxed);
                    std::process::abort();
                }
                while p.scratch()[63].load(Relaxed) == 0 {
                    std::thread::yield_now();
                }
                match p.lock(5) {
                    Err(e) => {
                        let msg = e.to_string();
                        if msg.contains("died") {
                            p.scratch()[p.rank()].store(1, Relaxed);
                        }
                        Err(e)
                    }
                    Ok(()) => Err(Error::Usage("took a lock held by a dead process".into())),
                }
            });
            let e = r.expect_err("the run fails");
            assert!(e.to_string().contains("worker 1"), "{kind:?}/{procs}: {e}");
            assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
            let told = (0..procs).filter(|&r| s.scratch()[r].load(Relaxed) == 1).count();
            assert!(told >= 1, "{kind:?}/{procs}: a waiter was told of the death");
        }
    }
});

// Bad input is refused with a message, never a hang or a crash.
child_test!(bad_input_is_refused, {
    assert!(Svm::new(SvmConfig::new(0, 2)).is_err());
    assert!(Svm::new(SvmConfig::new(4097, 2)).is_err());
    assert!(Svm::new(SvmConfig::new(1 << 20, 0)).is_err());
    assert!(Svm::new(SvmConfig::new(1 << 20, 500)).is_err());
    let s = svm(Kind::Dsm, 2, 64 * PAGE);
    s.run(|p| {
        let a = litmus::refuses_bad_arguments(p)?;
        refused(p.set_mode(a, 100, SvmMode::Dsm), "partial page set_mode")?;
        refused(p.set_mode(4096, PAGE, SvmMode::Dsm), "set_mode outside the heap")?;
        refused(p.free(12345), "free of a foreign pointer")?;
        refused(p.u64s(a + 4, 1), "unaligned u64 view")?;
        // A mismatched collective malloc is refused.
        p.barrier()?;
        if p.rank() == 0 {
            p.malloc(PAGE)?;
            p.scratch()[0].store(1, Relaxed);
        } else {
            while p.scratch()[0].load(Relaxed) == 0 {
                std::thread::yield_now();
            }
            refused(p.malloc(3 * PAGE), "mismatched collective malloc")?;
        }
        p.barrier()?;
        p.free(a)?;
        Ok(())
    })
    .unwrap();
});

// Allocations: same address everywhere, reuse after a collective free.
child_test!(collective_malloc_gives_one_address_and_reuses_freed_blocks, {
    let s = svm(Kind::Dsm, 3, 64 * PAGE);
    s.run(|p| {
        let a = p.malloc(3 * PAGE)?;
        let b = p.malloc(100)?;
        p.scratch()[p.rank() * 2].store(a as u64, Relaxed);
        p.scratch()[p.rank() * 2 + 1].store(b as u64, Relaxed);
        p.barrier()?;
        for r in 0..p.procs() {
            check(p.scratch()[r * 2].load(Relaxed) == a as u64, || {
                "address of a differs".into()
            })?;
            check(p.scratch()[r * 2 + 1].load(Relaxed) == b as u64, || {
                "address of b differs".into()
            })?;
        }
        check(b == a + 3 * PAGE, || "first fit".into())?;
        p.set_mode(a, 3 * PAGE, SvmMode::Dsm)?;
        p.u64s(a, 1)?[0].store(9, Relaxed); // dirty when freed
        p.barrier()?;
        p.free(a)?;
        p.barrier()?;
        let c = p.malloc(2 * PAGE)?;
        check(c == a, || format!("freed block reused: {c:#x} vs {a:#x}"))?;
        check(p.mode_of(c)? == SvmMode::Spm, || {
            "a freed block is SPM again".into()
        })?;
        let d = p.malloc(62 * PAGE);
        check(d.is_err(), || "heap overflow refused".into())?;
        Ok(())
    })
    .unwrap();
});

// The noncoherent flavour flushes and invalidates lines; the counters say
// how many, and the data is right.
child_test!(noncoherent_flavour_flushes_written_lines, {
    let s = svm(Kind::SpmNoncoherent, 2, 64 * PAGE);
    s.run(|p| {
        let a = alloc(p, Kind::SpmNoncoherent, 2)?;
        if p.rank() == 0 {
            p.lock(0)?;
            p.u64s(a, 1)?[0].store(5, Relaxed);
            p.unlock(0)?;
        }
        p.barrier()?;
        check(p.u64s(a, 1)?[0].load(Relaxed) == 5, || "value".into())?;
        Ok(())
    })
    .unwrap();
    let st = s.stats();
    assert_eq!(st[0].spm_write_faults, 1, "{:?}", st[0]);
    assert_eq!(st[0].lines_flushed, 64, "one page written back");
    assert!(st[1].lines_invalidated >= 64, "{:?}", st[1]);
    let mut out = [0u8; 8];
    s.read_home(s.base(), &mut out).unwrap();
});
