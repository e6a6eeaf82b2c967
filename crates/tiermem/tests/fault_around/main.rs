//! Fault-around: sequential sweeps install clusters of neighbours with each
//! demand fault (far fewer faults), random access does not; every page's
//! content survives, in every fault path x dirty tracking x store.

#[path = "../common/mod.rs"]
mod common;

use common::{assert_settled, config, mix, variants};
use tiermem::{Config, Region};

const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;
const WORDS: usize = PAGE / 8;

/// The word a test writes at `word` of page `p` (pages with `p % 3 == 0`
/// are left zero: installed writable by a cluster, never written).
fn want(p: usize, word: usize) -> u64 {
    if p.is_multiple_of(3) {
        0
    } else {
        mix((p * WORDS + word) as u64)
    }
}

#[test]
fn sequential_sweeps_fault_around_and_keep_every_page() {
    for (fp, dt, store) in variants() {
        let what = format!("{} {} {}", fp.name(), dt.name(), store);
        let mut c = config(16 * MIB, 4 * MIB, fp, dt, store);
        c.fault_around = true;
        let mut r = Region::new(c).expect(&what);
        let pages = (16 * MIB) as usize / PAGE;
        {
            let words: &mut [u64] = r.as_mut_slice();
            for p in 0..pages {
                // Two words per page: the first touch is a write.
                if p % 3 != 0 {
                    words[p * WORDS] = want(p, 0);
                    words[p * WORDS + 7] = want(p, 7);
                }
            }
        }
        r.settle();
        let s = r.stats();
        let zero = s.faults_zero_fill;
        assert!(
            zero < pages as u64 / 4,
            "{what}: write sweep took {zero} zero fills for {pages} pages: {:?}",
            s.fault_around
        );
        assert!(
            s.fault_around.clusters > 0 && s.fault_around.installed > 0,
            "{what}"
        );
        // A read pass: far fills (clusters only from the memory store) and
        // zero pages evicted untouched.
        for pass in 0..2 {
            let words: &[u64] = r.as_mut_slice();
            for p in 0..pages {
                for k in [0, 7, WORDS - 1] {
                    let w = if k == WORDS - 1 { 0 } else { want(p, k) };
                    assert_eq!(words[p * WORDS + k], w, "{what}: pass {pass} page {p} word {k}");
                }
            }
        }
        r.settle();
        let s = r.stats();
        if store == "memory" {
            assert!(
                s.fills() < 3 * pages as u64 / 4,
                "{what}: {} fills over three sweeps of {pages} pages",
                s.fills()
            );
        }
        // Walking through the clusters proves most neighbours used.
        assert!(
            s.fault_around.used > s.fault_around.installed / 2,
            "{what}: {:?}",
            s.fault_around
        );
        assert_settled(&r, s.resident_bytes, 4 * MIB, &what);
    }
}

#[test]
fn off_means_one_fill_per_page() {
    let mut c = Config::new(8 * MIB, 2 * MIB);
    c.fault_around = false;
    let mut r = Region::new(c).unwrap();
    let words: &mut [u64] = r.as_mut_slice();
    for p in 0..words.len() / WORDS {
        words[p * WORDS] = p as u64;
    }
    let s = r.stats();
    assert_eq!(s.faults_zero_fill, 8 * MIB / PAGE as u64);
    assert_eq!(s.fault_around.installed, 0);
}

#[test]
fn random_access_mostly_does_not_fault_around() {
    let mut c = Config::new(64 * MIB, 16 * MIB);
    c.fault_around = true;
    let mut r = Region::new(c).unwrap();
    let pages = (64 * MIB) as usize / PAGE;
    let mut written = vec![false; pages];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    {
        let words: &mut [u64] = r.as_mut_slice();
        for _ in 0..40_000 {
            x = mix(x);
            let p = (x % pages as u64) as usize;
            if x & (1 << 40) != 0 {
                words[p * WORDS + 3] = mix(p as u64);
                written[p] = true;
            } else {
                let want = if written[p] { mix(p as u64) } else { 0 };
                assert_eq!(words[p * WORDS + 3], want, "page {p}");
            }
        }
    }
    let s = r.stats();
    assert!(
        s.fault_around.installed * 50 < s.fills(),
        "random access installed {} neighbours over {} fills",
        s.fault_around.installed,
        s.fills()
    );
    let words: &[u64] = r.as_mut_slice();
    for (p, &w) in written.iter().enumerate() {
        let want = if w { mix(p as u64) } else { 0 };
        assert_eq!(words[p * WORDS + 3], want, "page {p}");
    }
    assert!(r.errors().is_empty());
}

#[test]
fn two_threads_sweeping_interleaved_pages() {
    // Each thread writes then reads back its own pages of every cluster
    // window (even / odd 8-page blocks): clusters of one thread meet pages
    // the other holds busy, and must never wait on them or lose a write.
    let mut c = Config::new(16 * MIB, 4 * MIB);
    c.fault_around = true;
    let r = Region::new(c).unwrap();
    let pages = (16 * MIB) as usize / PAGE;
    let words = r.as_atomic_u64();
    std::thread::scope(|s| {
        for t in 0..2usize {
            s.spawn(move || {
                for round in 0..2u64 {
                    for p in (0..pages).filter(|p| (p / 8) % 2 == t) {
                        use std::sync::atomic::Ordering::Relaxed;
                        if round == 0 {
                            words[p * WORDS + 1].store(mix(p as u64), Relaxed);
                        } else {
                            assert_eq!(words[p * WORDS + 1].load(Relaxed), mix(p as u64), "page {p}");
                        }
                    }
                }
            });
        }
    });
    let s = r.stats();
    assert!(s.fault_around.installed > 0, "{s:?}");
    assert!(r.errors().is_empty());
}

#[test]
fn a_loop_over_ten_arrays_faults_around_in_each() {
    // A stencil-like loop walks ten arrays side by side (SP's solver reads
    // and writes about that many): consecutive faults land in different
    // arrays, each one page past that array's previous fault. The locality
    // history must hold every stream (with four remembered faults it held
    // none: SP.A took 6.4x the faults).
    const STREAMS: usize = 10;
    let mut c = Config::new(40 * MIB, 40 * MIB);
    c.fault_around = true;
    let mut r = Region::new(c).unwrap();
    let per_stream = (4 * MIB) as usize / PAGE;
    {
        let words: &mut [u64] = r.as_mut_slice();
        for step in 0..per_stream {
            for s in 0..STREAMS {
                let p = s * per_stream + step;
                words[p * WORDS + 5] = mix(p as u64);
            }
        }
    }
    let s = r.stats();
    let pages = (STREAMS * per_stream) as u64;
    assert!(
        s.faults_zero_fill < pages / 4,
        "{} zero fills for {pages} pages in {STREAMS} interleaved streams: {:?}",
        s.faults_zero_fill,
        s.fault_around
    );
    let words: &[u64] = r.as_mut_slice();
    for p in 0..STREAMS * per_stream {
        assert_eq!(words[p * WORDS + 5], mix(p as u64), "page {p}");
        assert_eq!(words[p * WORDS + 4], 0, "page {p}");
    }
    assert!(r.errors().is_empty());
}
