//! The smallest budget (`MIN_NEAR_PAGES`, 4 pages) must always make
//! progress: one x86 instruction can need four pages resident at once (a
//! `movsq` whose source and destination both cross a page boundary), and
//! whatever the engine keeps for itself (fault-around clusters, frame
//! rings, pins) must leave them room. Issue 30 item 9: with fault-around,
//! each fault's cluster filled the free slots and the next fault evicted
//! the whole batch, so the instruction's first pages were gone again by
//! the time its last one came in: 400 such `movsq` hung on both fault
//! paths, as did an overlapping `memmove` in a 4-page budget.
//!
//! Every case runs in a child process with a deadline: a hang is a
//! failure, not a stuck suite.

#[path = "../common/mod.rs"]
mod common;

use common::mix;
use std::time::Duration;
use tiermem::{Config, DirtyTracking, FaultPath, InstallMethod, PolicyKind, Region};

const PAGE: usize = 4096;
/// The region: 64 pages.
const PAGES: usize = 64;
const LIMIT: Duration = Duration::from_secs(180);

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        (mix(self.0) % n as u64) as usize
    }
}

/// One `movsq`: 8 bytes from `src` to `dst`.
fn movsq(dst: usize, src: usize) {
    // SAFETY: the callers pass addresses with 8 bytes inside a live
    // region (or buffer) they own; movsq reads [rsi] and writes [rdi] and
    // advances both registers (the direction flag is clear by the ABI).
    unsafe {
        std::arch::asm!(
            "movsq",
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags)
        );
    }
}

/// `n` moves of 8 bytes between two page-crossing operands within pages
/// `[first, first + pages)` of the region at `base`, mirrored in `shadow`
/// (the same pages, plain memory): each touches four distinct pages.
fn crossing_moves(base: usize, shadow: &mut [u8], first: usize, pages: usize, seed: u64, n: usize) {
    let mut rng = Rng(seed);
    for _ in 0..n {
        // Source across pages sp/sp+1, destination across dp/dp+1, the
        // four distinct.
        let sp = rng.below(pages - 1);
        let dp = loop {
            let d = rng.below(pages - 1);
            if d.abs_diff(sp) >= 2 {
                break d;
            }
        };
        let s = (sp + 1) * PAGE - 1 - rng.below(7);
        let d = (dp + 1) * PAGE - 1 - rng.below(7);
        movsq(base + (first * PAGE) + d, base + (first * PAGE) + s);
        shadow.copy_within(s..s + 8, d);
    }
}

/// Fills the region and a shadow with the same bytes.
fn fill(r: &mut Region) -> Vec<u8> {
    let words = r.as_mut_slice::<u64>();
    for (i, w) in words.iter_mut().enumerate() {
        *w = mix(i as u64);
    }
    r.as_mut_slice::<u8>().to_vec()
}

fn check(r: &mut Region, shadow: &[u8], what: &str) {
    let got = r.as_mut_slice::<u8>();
    if let Some(i) = (0..shadow.len()).find(|&i| got[i] != shadow[i]) {
        panic!("{what}: byte {i} differs ({} != {})", got[i], shadow[i]);
    }
    assert!(r.errors().is_empty(), "{what}: {:?}", r.errors());
}

fn region(near_pages: usize, fp: FaultPath, install: InstallMethod) -> Config {
    let mut c = Config::new((PAGES * PAGE) as u64, (near_pages * PAGE) as u64);
    c.fault_path = fp;
    c.install = install;
    assert!(c.fault_around, "fault-around is on by default");
    c
}

fn fault_path(name: &str) -> FaultPath {
    *FaultPath::ALL.iter().find(|f| f.name() == name).unwrap()
}

/// Runs child test `name` once per fault path, each within [`LIMIT`].
fn per_fault_path(name: &str) {
    for fp in FaultPath::ALL {
        let run = common::run_child_within(name, &[("TIERMEM_TEST_PATH", fp.name().into())], LIMIT);
        let last = run
            .stderr
            .lines()
            .rev()
            .find(|l| l.starts_with("case "))
            .unwrap_or("");
        match run.status {
            None => panic!(
                "{name} on {fp:?}: hung (killed after {LIMIT:?}); last {last}\n{}",
                run.stderr
            ),
            Some(s) => assert!(s.success(), "{name} on {fp:?}: {s}; last {last}\n{}", run.stderr),
        }
        assert!(
            run.stderr.contains("min budget: ok"),
            "{name} on {fp:?}\n{}",
            run.stderr
        );
    }
}

fn child_path(name: &str) -> Option<FaultPath> {
    if !common::is_child(name) {
        return None;
    }
    Some(fault_path(&std::env::var("TIERMEM_TEST_PATH").unwrap()))
}

#[test]
fn child_page_crossing_movsq() {
    let Some(fp) = child_path("child_page_crossing_movsq") else {
        return;
    };
    for near in [4, 5, 6, 8, 16] {
        for &install in InstallMethod::ALL {
            for &policy in PolicyKind::ALL {
                for &dt in DirtyTracking::ALL {
                    // Every policy and dirty tracking at 4 and 8 pages.
                    let every = near == 4 || near == 8;
                    if !every && (policy != PolicyKind::Fifo || dt != DirtyTracking::WpFault) {
                        continue;
                    }
                    let what = format!("{fp:?} near {near} {install:?} {policy:?} {dt:?}");
                    // One-page batches (where the batch is not all of
                    // the budget) too.
                    for batch in [64, 1] {
                        if batch == 1 && (near > 8 || dt != DirtyTracking::WpFault) {
                            continue;
                        }
                        let what = format!("{what} batch {batch}");
                        eprintln!("case {what}");
                        let mut c = region(near, fp, install);
                        c.policy = policy;
                        c.dirty_tracking = dt;
                        c.evict_batch_pages = batch;
                        let mut r = Region::new(c).unwrap();
                        let mut shadow = fill(&mut r);
                        r.evict_all().unwrap();
                        crossing_moves(r.base(), &mut shadow, 0, PAGES, near as u64, 400);
                        check(&mut r, &shadow, &what);
                    }
                }
            }
        }
    }
    // The smallest budget with a frame ring of its own (`install = move`:
    // a quarter of 64 pages), over a region four times larger.
    for &install in InstallMethod::ALL {
        let what = format!("{fp:?} near 64 of 256 {install:?}");
        eprintln!("case {what}");
        let mut c = Config::new((4 * PAGES * PAGE) as u64, (64 * PAGE) as u64);
        c.fault_path = fp;
        c.install = install;
        let mut r = Region::new(c).unwrap();
        let mut shadow = fill(&mut r);
        r.evict_all().unwrap();
        crossing_moves(r.base(), &mut shadow, 0, 4 * PAGES, 64, 4000);
        check(&mut r, &shadow, &what);
        if install == InstallMethod::Move && fp == FaultPath::InContext {
            assert!(r.stats().recycled_installs > 0, "{what}: the ring was used");
        }
    }
    eprintln!("min budget: ok");
}

/// 400 `movsq` with both operands crossing a page, pages evicted, on a
/// 4..16-page budget, every install method (and at 4 and 8 pages every
/// policy and dirty tracking), batches of 64 pages and of one; 4000 on a
/// 64-page budget with a frame ring.
#[test]
fn page_crossing_movsq_completes_on_the_minimum_budget() {
    per_fault_path("child_page_crossing_movsq");
}

#[test]
fn child_overlapping_memmove() {
    let Some(fp) = child_path("child_overlapping_memmove") else {
        return;
    };
    for near in [4, 5, 8] {
        for &install in InstallMethod::ALL {
            let what = format!("{fp:?} near {near} {install:?}");
            eprintln!("case {what}");
            let mut r = Region::new(region(near, fp, install)).unwrap();
            let mut shadow = fill(&mut r);
            r.evict_all().unwrap();
            let base = r.base();
            let mut rng = Rng(near as u64);
            for _ in 0..200 {
                let len = 1 + rng.below(3 * PAGE);
                let s = rng.below(PAGES * PAGE - len - 2 * PAGE);
                // Overlapping, either way: the copy runs backwards when
                // the destination is above the source.
                let d = if rng.below(2) == 0 {
                    s + 1 + rng.below(PAGE + 64)
                } else {
                    s.saturating_sub(1 + rng.below(PAGE + 64))
                };
                // SAFETY: both ranges lie inside the region, which lives
                // for the whole loop; ptr::copy allows overlap.
                unsafe { std::ptr::copy((base + s) as *const u8, (base + d) as *mut u8, len) };
                shadow.copy_within(s..s + len, d);
            }
            check(&mut r, &shadow, &what);
        }
    }
    eprintln!("min budget: ok");
}

/// Overlapping `memmove`s inside one evicted region of a 4..8-page budget.
#[test]
fn overlapping_memmove_completes_on_the_minimum_budget() {
    per_fault_path("child_overlapping_memmove");
}

#[test]
fn child_two_threads_crossing_movsq() {
    let Some(fp) = child_path("child_two_threads_crossing_movsq") else {
        return;
    };
    for threads in [2, 4] {
        for near in 4..=8 {
            for &install in InstallMethod::ALL {
                let what = format!("{fp:?} {threads} threads near {near} {install:?}");
                eprintln!("case {what}");
                let mut r = Region::new(region(near, fp, install)).unwrap();
                let mut shadow = fill(&mut r);
                r.evict_all().unwrap();
                let base = r.base();
                let part = PAGES / threads;
                std::thread::scope(|s| {
                    // Each thread moves within its own part: four pages
                    // each wanted at once, more than the budget holds.
                    for (k, sh) in shadow.chunks_mut(part * PAGE).enumerate() {
                        s.spawn(move || crossing_moves(base, sh, k * part, part, 11 + k as u64, 400));
                    }
                });
                check(&mut r, &shadow, &what);
            }
        }
    }
    eprintln!("min budget: ok");
}

/// Two and four threads each needing four pages at once over a 4..8-page
/// budget: they take turns, none hangs. Without the turn (threads sparing
/// only their own pages) four threads on the handler-thread path took up
/// to 23 s instead of 2.5 s for one case here: a near-livelock.
#[test]
fn two_threads_of_page_crossing_movsq_take_turns() {
    per_fault_path("child_two_threads_crossing_movsq");
}

#[test]
fn child_shared_budget_of_move_regions() {
    let Some(fp) = child_path("child_shared_budget_of_move_regions") else {
        return;
    };
    // 64 pages shared by five regions that recycle frames: each ring is
    // a quarter of the budget (16 frames), so four rings would leave no
    // near memory for pages at all.
    let budget = tiermem::region::NearBudget::new(64 * PAGE as u64);
    let mut regions: Vec<Region> = (0..5)
        .map(|_| {
            let mut c = Config::new((4 * PAGES * PAGE) as u64, (64 * PAGE) as u64);
            c.fault_path = fp;
            c.install = InstallMethod::Move;
            Region::with_budget(c, &budget).unwrap()
        })
        .collect();
    for (k, r) in regions.iter_mut().enumerate() {
        eprintln!("case {fp:?} shared budget, region {k}");
        let mut shadow = fill(r);
        r.evict_all().unwrap();
        crossing_moves(r.base(), &mut shadow, 0, 4 * PAGES, k as u64, 400);
        check(r, &shadow, &format!("region {k}"));
    }
    eprintln!("min budget: ok");
}

/// Frame rings taken from a shared budget leave room for pages: five
/// regions with `install = move` over 64 pages, each region's accesses
/// complete.
#[test]
fn frame_rings_leave_a_shared_budget_room_for_pages() {
    per_fault_path("child_shared_budget_of_move_regions");
}

/// `n` moves of 8 bytes from a page-crossing source in one region to a
/// page-crossing destination in another (`a` to `b` or back, at random),
/// mirrored in the shadows: two pages of each region at once.
fn moves_between(a: (usize, &mut [u8]), b: (usize, &mut [u8]), seed: u64, n: usize) {
    let mut rng = Rng(seed);
    let (mut a, mut b) = (a, b);
    for _ in 0..n {
        let s = (rng.below(PAGES - 1) + 1) * PAGE - 1 - rng.below(7);
        let d = (rng.below(PAGES - 1) + 1) * PAGE - 1 - rng.below(7);
        let ((sb, src), (db, dst)) = if rng.below(2) == 0 {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        movsq(*db + d, *sb + s);
        dst[d..d + 8].copy_from_slice(&src[s..s + 8]);
    }
}

/// `n` regions configured as `c` sharing a budget of `near` pages, each
/// filled (with its shadow) and evicted.
fn sharing(n: usize, near: usize, c: &Config) -> (Vec<Region>, Vec<Vec<u8>>) {
    let budget = tiermem::region::NearBudget::new((near * PAGE) as u64);
    let mut regions: Vec<Region> = (0..n)
        .map(|_| Region::with_budget(c.clone(), &budget).unwrap())
        .collect();
    let shadows = regions.iter_mut().map(fill).collect();
    for r in &mut regions {
        r.evict_all().unwrap();
    }
    (regions, shadows)
}

fn check_all(regions: &mut [Region], shadows: &[Vec<u8>], what: &str) {
    for (k, (r, s)) in regions.iter_mut().zip(shadows).enumerate() {
        check(r, s, &format!("{what}: region {k}"));
    }
}

#[test]
fn child_two_regions_share_the_minimum_budget() {
    let Some(fp) = child_path("child_two_regions_share_the_minimum_budget") else {
        return;
    };
    for near in [4, 5, 8] {
        for &install in InstallMethod::ALL {
            for &policy in PolicyKind::ALL {
                let what = format!("{fp:?} two regions sharing {near} pages {install:?} {policy:?}");
                eprintln!("case {what}");
                let mut c = region(near, fp, install);
                c.policy = policy;
                let (mut regions, mut shadows) = sharing(2, near, &c);
                let (sa, sb) = shadows.split_at_mut(1);
                moves_between(
                    (regions[0].base(), &mut sa[0]),
                    (regions[1].base(), &mut sb[0]),
                    near as u64,
                    400,
                );
                check_all(&mut regions, &shadows, &what);
            }
        }
    }
    eprintln!("min budget: ok");
}

/// One instruction across two regions of one shared budget (the
/// transparent heap and the static arrays `tiermem run` takes over): a
/// `movsq` from a page-crossing source in one to a page-crossing
/// destination in the other needs four pages of a four-page budget, two
/// in each. Before the budget kept the progress state, each region spared
/// the thread's last three fills of its own, six pages of four, and the
/// fault failed after the stuck limit (SIGBUS under `tiermem run --near
/// 16K`).
#[test]
fn one_instruction_across_two_regions_of_a_shared_budget() {
    per_fault_path("child_two_regions_share_the_minimum_budget");
}

#[test]
fn child_pins_of_a_shared_budget() {
    let Some(fp) = child_path("child_pins_of_a_shared_budget") else {
        return;
    };
    for &install in InstallMethod::ALL {
        let what = format!("{fp:?} pins over three regions sharing 4 pages {install:?}");
        eprintln!("case {what}");
        let (mut regions, mut shadows) = sharing(3, 4, &region(4, fp, install));
        // System calls into each region at once (as three threads' reads
        // into the heap and the static arrays would): together they may
        // pin half the budget, not half each.
        let held: Vec<_> = regions
            .iter()
            .map(|r| tiermem::pin_buffer(r.base(), 4 * PAGE, true))
            .collect();
        let ready: Vec<usize> = held.iter().map(|p| p.ready() / PAGE).collect();
        assert_eq!(ready.iter().sum::<usize>(), 2, "{what}: pages pinned {ready:?}");
        // With those held, faults still find room, in every region, though
        // this thread's last fills and the pins are all four pages.
        for (k, (r, s)) in regions.iter_mut().zip(&mut shadows).enumerate() {
            let at = 40 * PAGE + k;
            let b = r.as_mut_slice::<u8>();
            assert_eq!(b[at], s[at], "{what}: region {k}");
            b[at] ^= 0x5a;
            s[at] ^= 0x5a;
        }
        drop(held);
        check_all(&mut regions, &shadows, &what);
    }
    eprintln!("min budget: ok");
}

/// Kernel-mode accesses pin pages for the call; at most half the budget,
/// so that faults always find victims. That half is the budget's, across
/// the regions that share it: a half per region let three regions of a
/// four-page budget pin all of it, and the next fault found nothing to
/// evict (stuck, then SIGBUS).
#[test]
fn pins_of_a_shared_budget_leave_room_for_faults() {
    per_fault_path("child_pins_of_a_shared_budget");
}
