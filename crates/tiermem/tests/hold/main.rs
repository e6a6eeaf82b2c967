//! Held ranges (`tiermem::hold_resident`, for stacks the kernel writes
//! signal frames on): every held page stays resident through heavy
//! eviction, outside the near budget (the other pages keep the room they
//! had), with its data; a discard ends the hold, after which the region
//! keeps to its budget again. On every fault path, dirty tracking and
//! store, and with a budget shared by two regions.

#[path = "../common/mod.rs"]
mod common;

use common::{config, variants, xor_updates};
use std::sync::atomic::{AtomicU64, Ordering};
use tiermem::region::NearBudget;
use tiermem::Region;

const PAGE: usize = 4096;
const PAGES: usize = 256;
const NEAR: usize = 16;
/// Held: pages [HELD_AT, HELD_AT + HELD).
const HELD_AT: usize = 8;
const HELD: usize = 64;

/// Resident pages of `[addr, addr + pages * PAGE)` by `mincore`.
fn resident(addr: usize, pages: usize) -> usize {
    let mut v = vec![0u8; pages];
    // SAFETY: the range lies in a live region; `v` has one byte per page.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, pages * PAGE, v.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore");
    v.iter().filter(|&&b| b & 1 != 0).count()
}

/// Rewrites every word outside the held pages, then checks every word
/// against `shadow` (updated the same way).
fn churn(words: &[AtomicU64], shadow: &mut [u64], round: u64) {
    let per_page = PAGE / 8;
    for (i, w) in words.iter().enumerate() {
        let page = i / per_page;
        if !(HELD_AT..HELD_AT + HELD).contains(&page) {
            let v = common::mix(i as u64 ^ (round << 40));
            w.store(v, Ordering::Relaxed);
            shadow[i] = v;
        }
    }
}

fn check(words: &[AtomicU64], shadow: &[u64], what: &str) {
    for (i, w) in words.iter().enumerate() {
        assert_eq!(w.load(Ordering::Relaxed), shadow[i], "{what}: word {i}");
    }
}

/// Holds, churns, checks residency, data and the budget; discards the
/// held pages and checks the budget binds again.
fn exercise(r: &Region, what: &str) {
    let words = r.as_atomic_u64();
    let mut shadow: Vec<u64> = (0..words.len()).map(|i| common::mix(i as u64)).collect();
    for (i, w) in words.iter().enumerate() {
        w.store(shadow[i], Ordering::Relaxed);
    }
    let held_addr = r.base() + HELD_AT * PAGE;
    let h = tiermem::hold_resident(held_addr, HELD * PAGE).expect("a region of this process");
    assert!(h.complete, "{what}: every page held");
    assert_eq!(h.new_bytes, HELD * PAGE, "{what}");
    let again = tiermem::hold_resident(held_addr + PAGE, PAGE).expect("region");
    assert_eq!(again.new_bytes, 0, "{what}: held already");
    assert_eq!(resident(held_addr, HELD), HELD, "{what}: held pages resident");
    for round in 1..4 {
        churn(words, &mut shadow, round);
        xor_updates(&words[(HELD_AT + HELD) * PAGE / 8..], round, 20_000);
        xor_updates(&words[(HELD_AT + HELD) * PAGE / 8..], round, 20_000);
        assert_eq!(
            resident(held_addr, HELD),
            HELD,
            "{what}: round {round}: a held page left"
        );
        // The held pages are written too: they stay writable.
        for w in &words[HELD_AT * PAGE / 8..(HELD_AT + HELD) * PAGE / 8] {
            w.fetch_add(1, Ordering::Relaxed);
        }
        for s in &mut shadow[HELD_AT * PAGE / 8..(HELD_AT + HELD) * PAGE / 8] {
            *s += 1;
        }
        check(words, &shadow, what);
    }
    let s = r.stats();
    assert!(s.evictions > 0, "{what}: the churn evicted");
    assert_eq!(
        s.held_peak_bytes,
        (HELD * PAGE) as u64,
        "{what}: held, in the statistics"
    );
    // The other pages keep the room they had (the frame ring, if any, is
    // inside the budget).
    assert!(
        resident(r.base(), PAGES) <= NEAR + HELD,
        "{what}: {} resident, budget {NEAR} + held {HELD}",
        resident(r.base(), PAGES)
    );
    // A discard ends the hold: the pages read as zeros and may leave.
    r.discard(HELD_AT * PAGE, HELD * PAGE).expect("discard");
    for s in &mut shadow[HELD_AT * PAGE / 8..(HELD_AT + HELD) * PAGE / 8] {
        *s = 0;
    }
    for round in 4..6 {
        churn(words, &mut shadow, round);
    }
    check(words, &shadow, what);
    assert!(
        resident(r.base(), PAGES) <= NEAR,
        "{what}: {} resident after the hold ended, budget {NEAR}",
        resident(r.base(), PAGES)
    );
}

#[test]
fn held_pages_stay_resident_outside_the_budget() {
    for (fp, dt, store) in variants() {
        let r =
            Region::new(config((PAGES * PAGE) as u64, (NEAR * PAGE) as u64, fp, dt, store)).expect("region");
        exercise(&r, &format!("{fp:?}/{dt:?}/{store}"));
    }
}

#[test]
fn held_pages_of_a_shared_budget() {
    let budget = NearBudget::new((NEAR * PAGE) as u64);
    let c = || tiermem::Config::new((PAGES * PAGE) as u64, (NEAR * PAGE) as u64);
    let a = Region::with_budget(c(), &budget).expect("region a");
    let b = Region::with_budget(c(), &budget).expect("region b");
    common::fill_mixed(b.as_atomic_u64());
    exercise(&a, "shared budget");
    common::check_mixed(b.as_atomic_u64(), "the other member");
    assert!(
        resident(a.base(), PAGES) + resident(b.base(), PAGES) <= NEAR,
        "both members within the shared budget"
    );
}

#[test]
fn addresses_outside_regions_are_not_held() {
    let v = vec![0u8; 4 * PAGE];
    assert!(tiermem::hold_resident(v.as_ptr() as usize, v.len()).is_none());
}
