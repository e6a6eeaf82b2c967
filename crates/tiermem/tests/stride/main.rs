//! Stride detection: a walk down the columns of a 3-D array (one page every
//! 1 MiB, as FT's z-direction FFT) under a small budget gets the next pages
//! of the stride installed with each fault (far fewer faults than with
//! stride detection off), and every byte survives, in every fault path x
//! dirty tracking x store.

#[path = "../common/mod.rs"]
mod common;

use common::{assert_settled, config, mix, variants};
use tiermem::{Config, Region};

const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;
const WORDS: usize = PAGE / 8;
/// Pages per plane: the stride of a column walk (1 MiB).
const PLANE: usize = 256;
const PLANES: usize = 48;
const PAGES: usize = PLANE * PLANES;

/// The word `w` of page `p` after the write pass (pages with `p % 5 == 0`
/// are never written: installed ahead writable, they must stay zero).
fn want(p: usize, w: usize) -> u64 {
    if p.is_multiple_of(5) {
        0
    } else {
        mix((p * WORDS + w) as u64)
    }
}

/// Column-major page order: for each page of a plane, that page in every
/// plane (down the planes, or up when `up`).
fn columns(up: bool) -> impl Iterator<Item = usize> {
    (0..PLANE).flat_map(move |j| (0..PLANES).map(move |k| if up { PLANES - 1 - k } else { k } * PLANE + j))
}

/// Writes every page down the columns, reads it back down them, bumps one
/// word of each walking up them, then checks every byte in address order.
fn walk_and_check(r: &mut Region, what: &str) {
    let words: &mut [u64] = r.as_mut_slice();
    for p in columns(false).filter(|p| p % 5 != 0) {
        for w in 0..WORDS {
            words[p * WORDS + w] = want(p, w);
        }
    }
    for p in columns(false) {
        for w in (0..WORDS).step_by(61) {
            assert_eq!(
                words[p * WORDS + w],
                want(p, w),
                "{what}: read pass page {p} word {w}"
            );
        }
    }
    for p in columns(true).filter(|p| p % 5 != 0) {
        words[p * WORDS + 1] = want(p, 1).wrapping_add(1);
    }
    for p in 0..PAGES {
        for w in 0..WORDS {
            let mut x = want(p, w);
            if w == 1 && p % 5 != 0 {
                x = x.wrapping_add(1);
            }
            assert_eq!(words[p * WORDS + w], x, "{what}: final check page {p} word {w}");
        }
    }
}

#[test]
fn a_column_walk_installs_along_the_stride_and_keeps_every_byte() {
    for (fp, dt, store) in variants() {
        let what = format!("{} {} {}", fp.name(), dt.name(), store);
        // A sixth of the region: columns fit, the array does not.
        let mut c = config((PAGES * PAGE) as u64, 8 * MIB, fp, dt, store);
        c.fault_around = true;
        c.stride = true;
        let mut r = Region::new(c).expect(&what);
        walk_and_check(&mut r, &what);
        r.settle();
        let s = r.stats();
        let st = s.stride;
        assert!(st.streams > 0 && st.installed > 0, "{what}: {st:?}");
        assert!(st.used > st.installed / 2, "{what}: {st:?}");
        assert!(s.evictions > 0, "{what}: the budget should have overflowed");
        assert_settled(&r, s.resident_bytes, 8 * MIB, &what);
    }
}

/// Faults of one walk with stride detection on or off (default config).
fn faults(stride: bool) -> (u64, tiermem::stats::StrideStats) {
    let mut c = Config::new((PAGES * PAGE) as u64, 8 * MIB);
    c.stride = stride;
    let mut r = Region::new(c).unwrap();
    walk_and_check(&mut r, if stride { "on" } else { "off" });
    let s = r.stats();
    assert!(r.errors().is_empty());
    (s.faults(), s.stride)
}

#[test]
fn stride_detection_cuts_the_faults_of_a_column_walk() {
    let (off, none) = faults(false);
    assert_eq!(none.installed, 0);
    let (on, st) = faults(true);
    assert!(
        on * 3 < off,
        "{on} faults with stride detection against {off} without: {st:?}"
    );
}

#[test]
fn fault_around_off_switches_stride_detection_off() {
    let mut c = Config::new((PAGES * PAGE) as u64, 8 * MIB);
    c.fault_around = false;
    let mut r = Region::new(c).unwrap();
    walk_and_check(&mut r, "fault-around off");
    assert_eq!(r.stats().stride.installed, 0);
}
