//! Team mode (partially separated page tables): worker processes sharing
//! one tiered region, with heavy eviction, shared pages written by several
//! processes at once, checksums of every page; a worker that dies does not
//! hang the rest; named regions attached by other processes; bad input.
//!
//! Tests that fork run their body in a child test process with one thread
//! (`run_child`), so that fork() happens in a single-threaded process.

#[path = "../common/mod.rs"]
mod common;

use common::{is_child, mix, run_child};
use std::sync::atomic::Ordering;
use tiermem::team::{TeamConfig, TeamKind, TeamPolicy, TeamRegion, Worker};
use tiermem::ErrorCode;

const MIB: usize = 1 << 20;
const WORDS: usize = 512; // 64-bit words per 4 KiB page

fn value(page: usize, word: usize, round: usize) -> u64 {
    mix(((page as u64) << 24) ^ ((word as u64) << 4) ^ round as u64)
}

/// Pages written in `round`: half of them, alternating.
fn in_round(page: usize, round: usize) -> bool {
    page % 2 == round % 2
}

/// The round that last wrote `page` before the end of `round` (None: never).
fn last_round(page: usize, round: usize) -> Option<usize> {
    (0..=round).rev().find(|&r| in_round(page, r))
}

/// Checks every word of every page against the rounds done; returns the
/// number of bad pages.
fn check_all(words: &[std::sync::atomic::AtomicU64], pages: usize, round: usize) -> u64 {
    let mut bad = 0;
    for p in 0..pages {
        let want = |k: usize| last_round(p, round).map_or(0, |r| value(p, k, r));
        if (0..WORDS).any(|k| words[p * WORDS + k].load(Ordering::Relaxed) != want(k)) {
            bad += 1;
        }
    }
    bad
}

/// The churn: in each round every worker writes its share of the words of
/// every page of the round (so each page is written by all workers at
/// once), then after a barrier every worker checks every page.
fn churn(w: &Worker<'_>, pages: usize, rounds: usize, audit: bool) -> Result<(), tiermem::Error> {
    let words = w.atomics();
    let (me, n) = (w.rank(), w.workers());
    for round in 0..rounds {
        for p in (0..pages).filter(|&p| in_round(p, round)) {
            for k in (me..WORDS).step_by(n) {
                words[p * WORDS + k].store(value(p, k, round), Ordering::Relaxed);
            }
        }
        w.barrier()?;
        let bad = check_all(words, pages, round);
        w.scratch()[me].fetch_add(bad, Ordering::Relaxed);
        w.barrier()?;
        if audit {
            // Nobody faults between these barriers: every sharer bit must
            // match this process's page table.
            w.scratch()[AUDIT + me].fetch_add(w.sharer_mismatches()? as u64, Ordering::Relaxed);
            w.barrier()?;
        }
    }
    Ok(())
}

/// Scratch words where workers count sharer bits that disagree with their
/// page tables (`Worker::sharer_mismatches`).
const AUDIT: usize = 64;

fn audited(team: &TeamRegion, workers: usize) -> u64 {
    (0..workers)
        .map(|r| team.scratch()[AUDIT + r].load(Ordering::Relaxed))
        .sum()
}

fn churn_team(kind: TeamKind, workers: usize, policy: TeamPolicy, batch: usize) {
    churn_team_with(kind, workers, policy, batch, (true, false));
}

/// Whether the kernel write-protects shared memory (what dirty tracking
/// needs).
fn shmem_wp() -> bool {
    tiermem_sys::probe::SystemInfo::probe()
        .uffd_features
        .is_ok_and(|f| f.contains(tiermem_sys::uffd::Features::WP_HUGETLBFS_SHMEM))
}

/// The churn on a team of `workers`, with fault-around and dirty tracking
/// as `(around, dirty)` say.
fn churn_team_with(
    kind: TeamKind,
    workers: usize,
    policy: TeamPolicy,
    batch: usize,
    (fault_around, dirty_tracking): (bool, bool),
) {
    let virt = 8 * MIB;
    let pages = virt / 4096;
    let mut cfg = TeamConfig::new(virt, MIB, workers);
    cfg.cpus = (0..tiermem_sys::thread::online_cpus()).collect();
    cfg.policy = policy;
    cfg.evict_batch_pages = batch;
    cfg.fault_around = fault_around;
    cfg.dirty_tracking = dirty_tracking;
    let team = TeamRegion::new(cfg).unwrap();
    // Off only where asked, or where the kernel cannot (Linux < 5.19).
    let tracking = team.config().dirty_tracking;
    assert_eq!(tracking, dirty_tracking && shmem_wp());
    let rounds = 3;
    let audit = kind == TeamKind::Processes;
    let report = team.run(kind, |w| churn(w, pages, rounds, audit)).unwrap();
    assert_eq!(report.workers.len(), workers);
    assert_eq!(
        audited(&team, workers),
        0,
        "{kind:?}: sharer bits that disagree with page tables"
    );
    let bad: u64 = (0..workers)
        .map(|r| team.scratch()[r].load(Ordering::Relaxed))
        .sum();
    assert_eq!(bad, 0, "{kind:?}: pages with wrong contents seen by the workers");
    // The host reads everything once more, through its own faults.
    assert_eq!(
        check_all(team.atomics(), pages, rounds - 1),
        0,
        "{kind:?}: host check"
    );
    let s = team.stats();
    let t = s.total();
    assert!(s.resident_pages <= s.budget_pages, "budget kept");
    // Idle: the budget counts exactly the pages near (none leaked).
    assert_eq!(
        s.resident_pages,
        s.resident_by_sharers.iter().sum::<u64>(),
        "{s:?}"
    );
    assert!(t.evictions > 2 * pages as u64, "heavy eviction: {t:?}");
    assert!(t.minor_faults > 0, "pages shared between members: {t:?}");
    assert!(
        t.victims_other + t.victims_many > 0,
        "evicted pages mapped by others: {t:?}"
    );
    assert_eq!(t.errors, 0);
    // Only dirty victims are written back. Every page is read back after
    // its eviction in every round, so some are evicted clean.
    assert_eq!(t.bytes_out, (t.evictions - t.clean_evictions) * 4096, "{t:?}");
    if tracking {
        assert!(t.clean_evictions > 0, "{t:?}");
    } else {
        assert_eq!((t.clean_evictions, t.wp_faults), (0, 0), "{t:?}");
    }
    for (r, m) in s.members.iter().enumerate().take(workers) {
        assert!(m.missing_faults > 0, "worker {r} faulted: {m:?}");
    }
    // The churn walks pages in order: fault-around brings clusters (of
    // missing pages and of near pages another member filled), or none
    // when it is off.
    if fault_around {
        assert!(
            t.around_clusters > 0 && t.around_installed > t.around_clusters,
            "{t:?}"
        );
    } else {
        assert_eq!(t.around_installed, 0, "{t:?}");
    }
}

#[test]
fn processes_share_pages_under_heavy_eviction_without_corruption() {
    if is_child("processes_share_pages_under_heavy_eviction_without_corruption") {
        churn_team(TeamKind::Processes, 3, TeamPolicy::Fifo, 16);
        churn_team(TeamKind::Processes, 2, TeamPolicy::SharerAware, 1);
        churn_team_with(TeamKind::Processes, 2, TeamPolicy::Fifo, 8, (false, true));
        churn_team_with(TeamKind::Processes, 2, TeamPolicy::SharerAware, 16, (true, true));
        return;
    }
    let (st, err) = run_child("processes_share_pages_under_heavy_eviction_without_corruption");
    assert!(st.success(), "{err}");
}

/// Pages written, evicted, read back by every worker (from far memory:
/// mapped write-protected in each) and then written again, each worker its
/// own word: every such write is a write-protect fault, and the pages must
/// be written back when evicted again. Everyone checks every word after
/// each eviction sweep. With fault-around a write-protect fault makes the
/// neighbours this member maps writable too.
fn write_after_read(kind: TeamKind, workers: usize, fault_around: bool) {
    let (virt, near) = (8 * MIB, MIB);
    let pages = virt / 4096;
    let shared = 64; // a quarter of the budget
    let mut cfg = TeamConfig::new(virt, near, workers);
    cfg.cpus = (0..tiermem_sys::thread::online_cpus()).collect();
    cfg.fault_around = fault_around;
    cfg.dirty_tracking = true;
    let team = TeamRegion::new(cfg).unwrap();
    let tracking = team.config().dirty_tracking;
    assert_eq!(tracking, shmem_wp());
    if !tracking {
        eprintln!("this kernel cannot write-protect shared memory (Linux < 5.19): dirty tracking is off, only the data is checked");
    }
    let report = team
        .run(kind, |w| {
            let words = w.atomics();
            let me = w.rank();
            let mut bad = 0;
            for round in [1, 2] {
                for p in 0..shared {
                    words[p * WORDS + me].store(value(p, me, round), Ordering::Relaxed);
                }
                w.barrier()?;
                // Every worker sweeps its share of the rest: the budget is
                // an eighth of the region, so the shared pages leave.
                for p in (shared + me..pages).step_by(w.workers()) {
                    words[p * WORDS].fetch_add(1, Ordering::Relaxed);
                }
                w.barrier()?;
                // Read back from far memory by everyone (round 1: before
                // round 2 writes them again).
                bad += (0..shared)
                    .flat_map(|p| (0..w.workers()).map(move |r| (p, r)))
                    .filter(|&(p, r)| words[p * WORDS + r].load(Ordering::Relaxed) != value(p, r, round))
                    .count();
                w.barrier()?;
            }
            w.scratch()[me].store(bad as u64, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    assert_eq!(report.workers.len(), workers);
    let bad: u64 = (0..workers)
        .map(|r| team.scratch()[r].load(Ordering::Relaxed))
        .sum();
    assert_eq!(bad, 0, "{kind:?}: words written after a read were lost");
    let t = team.stats().total();
    assert_eq!(t.errors, 0);
    assert!(t.evictions >= 2 * (pages - near / 4096) as u64, "{t:?}");
    if tracking && kind == TeamKind::Processes {
        // Every worker wrote every shared page it had mapped read-only,
        // one fault per page, or per cluster with fault-around.
        let pages = workers * shared;
        if fault_around {
            assert!(
                t.wp_faults > 0 && t.wp_faults < pages as u64 / 2,
                "{kind:?}: {t:?}"
            );
        } else {
            assert!(t.wp_faults >= pages as u64, "{kind:?}: {t:?}");
        }
    } else if tracking {
        // Threads share one page table: the first write to a page
        // unprotects it for all, as a write-protect fault if that thread's
        // read mapped it, else as a minor fault of that thread; with
        // fault-around either one unprotects a cluster. Without it each
        // page's first write in round 2 faults.
        let faults = t.wp_faults + t.minor_faults;
        if fault_around {
            assert!(faults > 0, "{kind:?}: {t:?}");
        } else {
            assert!(faults >= shared as u64, "{kind:?}: {t:?}");
        }
    } else {
        assert_eq!(t.wp_faults, 0);
    }
}

#[test]
fn writes_after_reads_are_written_back() {
    if is_child("writes_after_reads_are_written_back") {
        for around in [true, false] {
            write_after_read(TeamKind::Processes, 2, around);
            write_after_read(TeamKind::Processes, 3, around);
            write_after_read(TeamKind::Threads, 2, around);
        }
        return;
    }
    let (st, err) = run_child("writes_after_reads_are_written_back");
    assert!(st.success(), "{err}");
}

#[test]
fn threads_mode_runs_the_same_churn() {
    if is_child("threads_mode_runs_the_same_churn") {
        churn_team(TeamKind::Threads, 2, TeamPolicy::Fifo, 64);
        churn_team_with(TeamKind::Threads, 2, TeamPolicy::Fifo, 16, (true, true));
        return;
    }
    let (st, err) = run_child("threads_mode_runs_the_same_churn");
    assert!(st.success(), "{err}");
}

#[test]
fn a_killed_worker_stops_the_team_without_hanging() {
    if is_child("a_killed_worker_stops_the_team_without_hanging") {
        let team = TeamRegion::new(TeamConfig::new(4 * MIB, MIB, 3)).unwrap();
        let t0 = std::time::Instant::now();
        let r = team.run(TeamKind::Processes, |w| {
            let words = w.atomics();
            for i in (w.rank() * 64..words.len()).step_by(WORDS * 3) {
                words[i].store(1, Ordering::Relaxed);
            }
            if w.rank() == 1 {
                tiermem_sys::process::kill(tiermem_sys::thread::getpid(), libc::SIGKILL).unwrap();
            }
            // The others wait for the dead one.
            w.barrier()?;
            w.barrier()
        });
        let e = r.unwrap_err();
        assert_eq!(e.code(), ErrorCode::WorkerFailed);
        let msg = e.to_string();
        assert!(msg.contains("worker 1") && msg.contains("SIGKILL"), "{msg}");
        assert!(t0.elapsed().as_secs() < 20, "stopped promptly");
        assert_eq!(team.failed_rank(), Some(1));
        // A worker that returns an error is reported the same way.
        let team = TeamRegion::new(TeamConfig::new(4 * MIB, MIB, 2)).unwrap();
        let e = team
            .run(TeamKind::Processes, |w| {
                if w.rank() == 0 {
                    return Err(tiermem::Error::Usage("worker gave up".into()));
                }
                w.barrier()
            })
            .unwrap_err();
        assert!(
            e.to_string().contains("worker 0") && e.to_string().contains("exit code 1"),
            "{e}"
        );
        // A panicking thread worker too.
        let e = team
            .run(TeamKind::Threads, |w| {
                if w.rank() == 1 {
                    panic!("thread worker panics");
                }
                w.barrier()
            })
            .unwrap_err();
        assert!(e.to_string().contains("worker 1"), "{e}");
        return;
    }
    let (st, err) = run_child("a_killed_worker_stops_the_team_without_hanging");
    assert!(st.success(), "{err}");
}

/// Pages of the shared prefix in [`sweeps`].
const SHARED: usize = 256;

/// One thread writes every page of a region larger than the budget, in
/// order; then worker 0 reads the first [`SHARED`] pages back, worker 1
/// the same pages after it (near pages another member filled: minor
/// faults), and each worker its half of the rest, in order; then both
/// read pages at random. Returns the totals of the two read phases, after
/// checking every word.
fn sweeps(fault_around: bool) -> [tiermem::team::MemberStats; 2] {
    // Random reads over fewer pages than this look local to fault-around
    // (its 16 remembered faults, 32 pages either side, cover a quarter).
    let virt = 32 * MIB;
    let pages = virt / 4096;
    let mut cfg = TeamConfig::new(virt, 4 * MIB, 2);
    cfg.fault_around = fault_around;
    let team = TeamRegion::new(cfg).unwrap();
    let marks = std::sync::Mutex::new(Vec::new());
    let note = || marks.lock().unwrap().push(team.stats().total());
    let wrong = |words: &[std::sync::atomic::AtomicU64], p: usize| {
        (0..WORDS).any(|k| words[p * WORDS + k].load(Ordering::Relaxed) != value(p, k, 0))
    };
    // Threads mode (one page table) keeps the stats readable between the
    // phases; the minor faults come from the second phase below.
    team.run(TeamKind::Threads, |w| {
        let words = w.atomics();
        if w.rank() == 0 {
            for p in 0..pages {
                for k in 0..WORDS {
                    words[p * WORDS + k].store(value(p, k, 0), Ordering::Relaxed);
                }
            }
        }
        w.barrier()
    })
    .unwrap();
    note();
    team.run(TeamKind::Processes, |w| {
        let words = w.atomics();
        let mut read = |p: usize| {
            if wrong(words, p) {
                w.scratch()[w.rank()].fetch_add(1, Ordering::Relaxed);
            }
        };
        for r in 0..2 {
            if w.rank() == r {
                (0..SHARED).for_each(&mut read);
            }
            w.barrier()?;
        }
        let half = (pages - SHARED) / 2;
        (SHARED + w.rank() * half..SHARED + (w.rank() + 1) * half).for_each(read);
        w.barrier()?;
        w.scratch()[AUDIT + w.rank()].fetch_add(w.sharer_mismatches()? as u64, Ordering::Relaxed);
        w.barrier()?;
        if w.rank() == 0 {
            w.mark(0);
        }
        w.barrier()?;
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ w.rank() as u64;
        for _ in 0..2048 {
            x = mix(x);
            let p = (x % pages as u64) as usize;
            if words[p * WORDS].load(Ordering::Relaxed) != value(p, 0, 0) {
                w.scratch()[w.rank()].fetch_add(1, Ordering::Relaxed);
            }
        }
        w.barrier()?;
        if w.rank() == 0 {
            w.mark(1);
        }
        w.barrier()
    })
    .unwrap();
    let bad: u64 = (0..2).map(|r| team.scratch()[r].load(Ordering::Relaxed)).sum();
    assert_eq!(bad, 0, "the workers read wrong words back");
    assert_eq!(audited(&team, 2), 0, "sharer bits that disagree with page tables");
    let s = team.stats();
    assert_eq!(
        s.resident_pages,
        s.resident_by_sharers.iter().sum::<u64>(),
        "{s:?}"
    );
    // Everything once more through the host's own faults.
    let bad = (0..pages).filter(|&p| wrong(team.atomics(), p)).count();
    assert_eq!(bad, 0, "pages read back wrong by the host");
    let first = marks.into_inner().unwrap().pop().unwrap();
    let (a, b) = (team.stats_at_mark(0), team.stats_at_mark(1));
    let (mut sweep, mut random) = (a.total(), b.total());
    random = random.since(&sweep);
    sweep = sweep.since(&first);
    assert_eq!(sweep.errors + random.errors, 0);
    [sweep, random]
}

#[test]
fn fault_around_brings_clusters_to_sweeps_and_stays_off_for_random_reads() {
    if is_child("fault_around_brings_clusters_to_sweeps_and_stays_off_for_random_reads") {
        let pages = (32 * MIB / 4096) as u64;
        let [sweep, random] = sweeps(true);
        let [sweep_off, random_off] = sweeps(false);
        // Without fault-around: one fault per page read back.
        assert!(sweep_off.faults() >= pages, "{sweep_off:?}");
        assert_eq!(sweep_off.around_installed + random_off.around_installed, 0);
        // With it, a sweep faults once per cluster: missing pages filled
        // in one copy, and near pages of the other member mapped in one
        // UFFDIO_CONTINUE (minor clusters).
        assert!(sweep.faults() * 4 < pages, "{sweep:?}");
        assert!(sweep.around_installed * 2 > pages, "{sweep:?}");
        assert!(sweep.minor_faults > 0, "{sweep:?}");
        assert!(sweep.minor_faults * 4 < SHARED as u64, "{sweep:?}");
        assert!(sweep_off.minor_faults >= SHARED as u64, "{sweep_off:?}");
        // Nearly all the neighbours were used; random reads turn it off
        // within a few faults.
        assert!(sweep.around_unused * 20 < sweep.around_installed, "{sweep:?}");
        assert!(random.around_installed * 10 < random.faults(), "{random:?}");
        return;
    }
    let (st, err) = run_child("fault_around_brings_clusters_to_sweeps_and_stays_off_for_random_reads");
    assert!(st.success(), "{err}");
}

#[test]
fn sharer_aware_replacement_evicts_private_pages_first() {
    if is_child("sharer_aware_replacement_evicts_private_pages_first") {
        let mut many = Vec::new();
        for policy in [TeamPolicy::Fifo, TeamPolicy::SharerAware] {
            let mut cfg = TeamConfig::new(8 * MIB, MIB, 2);
            cfg.policy = policy;
            cfg.sharer_window = 256;
            cfg.evict_batch_pages = 8;
            let team = TeamRegion::new(cfg).unwrap();
            let before = team.stats().total();
            team.run(TeamKind::Processes, |w| {
                let words = w.atomics();
                // Both read the first 128 pages (shared), then worker 0
                // streams through private pages beyond them.
                for p in 0..128 {
                    let _ = words[p * WORDS].load(Ordering::Relaxed);
                }
                w.barrier()?;
                if w.rank() == 0 {
                    for p in 128..128 + 512 {
                        words[p * WORDS].store(p as u64, Ordering::Relaxed);
                    }
                }
                w.barrier()
            })
            .unwrap();
            let t = team.stats().total().since(&before);
            assert!(t.evictions > 0);
            many.push(t.victims_many);
        }
        assert!(many[0] > 0, "FIFO evicts the old shared pages: {many:?}");
        assert!(
            many[1] < many[0],
            "sharer-aware keeps shared pages longer: {many:?}"
        );
        return;
    }
    let (st, err) = run_child("sharer_aware_replacement_evicts_private_pages_first");
    assert!(st.success(), "{err}");
}

#[test]
fn named_regions_are_shared_with_attached_processes() {
    if let Ok(name) = std::env::var("TIERMEM_TEAM_ATTACH") {
        if !is_child("named_regions_are_shared_with_attached_processes") {
            return;
        }
        let team = TeamRegion::attach(&name, 1).unwrap();
        assert_eq!(team.rank(), 1);
        let words = team.atomics();
        for p in 0..64 {
            words[p * WORDS + 1].store(value(p, 1, 1), Ordering::Relaxed);
        }
        team.barrier().unwrap();
        for p in 0..64 {
            assert_eq!(words[p * WORDS].load(Ordering::Relaxed), value(p, 0, 0));
        }
        team.barrier().unwrap();
        return;
    }
    let name = format!("test-{}", std::process::id());
    let mut cfg = TeamConfig::new(2 * MIB, 128 * 4096, 2);
    cfg.evict_batch_pages = 4;
    let team = TeamRegion::create_named(&name, cfg.clone()).unwrap();
    assert!(TeamRegion::create_named(&name, cfg).is_err(), "name taken");
    assert!(TeamRegion::attach(&name, 0).is_err() && TeamRegion::attach(&name, 2).is_err());
    // In this process the address is taken by the creator's own mapping.
    assert!(TeamRegion::attach(&name, 1).is_err());
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "named_regions_are_shared_with_attached_processes",
            "--nocapture",
        ])
        .env(
            "TIERMEM_CHILD",
            "named_regions_are_shared_with_attached_processes",
        )
        .env("TIERMEM_TEAM_ATTACH", &name)
        .spawn()
        .unwrap();
    let words = team.atomics();
    for p in 0..64 {
        words[p * WORDS].store(value(p, 0, 0), Ordering::Relaxed);
    }
    team.barrier().unwrap();
    for p in 0..64 {
        assert_eq!(words[p * WORDS + 1].load(Ordering::Relaxed), value(p, 1, 1));
    }
    team.barrier().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let s = team.stats();
    assert!(
        s.members[1].missing_faults + s.members[1].minor_faults > 0,
        "{s:?}"
    );
    drop(team);
    assert!(!std::path::Path::new(&format!("/dev/shm/tiermem-team.{name}.ctl")).exists());
    assert!(TeamRegion::attach(&name, 1).is_err(), "gone with its creator");
}

/// A far file that stops taking write-backs part-way through a run (here
/// RLIMIT_FSIZE three and a half pages short of the region's end, as a
/// full file system would: the write-back's splice writes up to the limit,
/// then fails) loses nothing: the pages written are evicted, the rest,
/// the half-written page too, are put back from the pipe, each at its own
/// place. A named team's far file lies in /dev/shm, a sized tmpfs: its
/// write-backs splice into the file (an unbounded memfd's go through its
/// mapping, where no such failure is possible).
#[test]
fn a_far_file_full_part_way_through_a_write_back_loses_nothing() {
    const NAME: &str = "a_far_file_full_part_way_through_a_write_back_loses_nothing";
    if !is_child(NAME) {
        let (st, err) = run_child(NAME);
        assert!(st.success(), "{err}");
        return;
    }
    let shm = std::fs::File::open("/dev/shm").unwrap();
    if tiermem_sys::memfd::unbounded_memory(std::os::fd::AsFd::as_fd(&shm)) {
        // Then a named team writes back through the far file's mapping,
        // which RLIMIT_FSIZE does not limit.
        eprintln!("skipped: /dev/shm has no size here, so the far file cannot fill up");
        return;
    }
    const PAGES: usize = 256;
    let mut cfg = TeamConfig::new(PAGES * 4096, 32 * 4096, 1);
    cfg.evict_batch_pages = 16;
    let team = TeamRegion::create_named(&format!("full-{}", std::process::id()), cfg).unwrap();
    // SAFETY: plain calls on this single-threaded test process: writes
    // past the limit fail with EFBIG instead of killing it.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let limit = ((PAGES - 4) * 4096 + 2048) as libc::rlim_t;
        let r = libc::rlimit {
            rlim_cur: limit,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &r), 0);
    }
    let words = team.atomics();
    for round in 0..3 {
        for p in 0..PAGES {
            for k in 0..WORDS {
                words[p * WORDS + k].store(value(p, k, round), Ordering::Relaxed);
            }
        }
        for p in 0..PAGES {
            let bad =
                (0..WORDS).filter(|&k| words[p * WORDS + k].load(Ordering::Relaxed) != value(p, k, round));
            assert_eq!(bad.count(), 0, "page {p} after round {round}");
        }
    }
    let s = team.stats();
    let errors: u64 = s.members.iter().map(|m| m.errors).sum();
    assert!(errors > 0, "no write-back failed: {s:?}");
}

#[test]
fn bad_input_is_refused_with_a_message() {
    let bad = |cfg: TeamConfig, what: &str| {
        let e = TeamRegion::new(cfg).err().expect(what);
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{what}: {e}");
        e.to_string()
    };
    bad(TeamConfig::new(0, MIB, 2), "zero size");
    bad(TeamConfig::new(MIB + 1, MIB, 2), "unaligned size");
    assert!(bad(TeamConfig::new(MIB, 4096, 2), "tiny budget").contains("too small"));
    bad(TeamConfig::new(MIB, MIB, 0), "no workers");
    bad(TeamConfig::new(MIB, MIB, 200), "too many workers");
    let mut c = TeamConfig::new(MIB, MIB, 2);
    c.evict_batch_pages = 0;
    bad(c, "batch 0");
    let mut c = TeamConfig::new(MIB, MIB, 2);
    c.cpus = vec![100_000];
    bad(c, "no such CPU");
    assert!(TeamRegion::create_named("a/b", TeamConfig::new(MIB, MIB, 2)).is_err());
    assert!(TeamRegion::attach("no-such-team-here", 1)
        .err()
        .unwrap()
        .to_string()
        .contains("cannot attach"));
}

/// Found by the kill tests (issue 16): a named team whose creator was
/// killed left its /dev/shm files forever. The next `create_named` (any
/// name) removes the files no process holds; a live team's are kept.
#[test]
fn files_of_a_killed_named_team_are_swept() {
    let name = format!("killed-{}", std::process::id());
    if is_child("files_of_a_killed_named_team_are_swept") {
        let team = TeamRegion::create_named(&name, TeamConfig::new(2 * MIB, 128 * 4096, 2)).unwrap();
        team.atomics()[0].store(1, Ordering::Relaxed);
        println!("ready");
        std::thread::sleep(std::time::Duration::from_secs(60));
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "files_of_a_killed_named_team_are_swept",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TIERMEM_CHILD", "files_of_a_killed_named_team_are_swept")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The child names the team after its own pid.
    let name = format!("killed-{}", child.id());
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap() == 0 {
            break;
        }
    }
    let files: Vec<_> = ["ctl", "data", "far"]
        .iter()
        .map(|p| std::path::PathBuf::from(format!("/dev/shm/tiermem-team.{name}.{p}")))
        .collect();
    assert!(files.iter().all(|f| f.exists()), "the child made no team: {line}");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        files.iter().all(|f| f.exists()),
        "killed: its files stay until the next create"
    );
    let live = format!("live-{}", std::process::id());
    let team = TeamRegion::create_named(&live, TeamConfig::new(2 * MIB, 128 * 4096, 2)).unwrap();
    assert!(
        files.iter().all(|f| !f.exists()),
        "the killed team's files were not swept"
    );
    // A second create does not sweep the live team's files.
    let other =
        TeamRegion::create_named(&format!("{live}-2"), TeamConfig::new(2 * MIB, 128 * 4096, 2)).unwrap();
    assert!(std::path::Path::new(&format!("/dev/shm/tiermem-team.{live}.ctl")).exists());
    drop(other);
    drop(team);
    assert!(!std::path::Path::new(&format!("/dev/shm/tiermem-team.{live}.ctl")).exists());
}

/// Issue 20.4, as for far files: dropping a named team removes its
/// /dev/shm files by name only if each name still names the file the
/// creator made (device, inode). Here the files are renamed behind
/// tiermem's back and other files (the next job's team of the same name)
/// take the names: the drop leaves all of them alone (it used to delete the
/// other job's files and leave its own behind).
#[test]
fn dropping_a_named_team_never_deletes_files_it_did_not_create() {
    let name = format!("renamed-{}", std::process::id());
    let parts = ["ctl", "data", "far"];
    let path = |p: &str| std::path::PathBuf::from(format!("/dev/shm/tiermem-team.{name}.{p}"));
    let moved = |p: &str| std::path::PathBuf::from(format!("/dev/shm/tiermem-moved.{name}.{p}"));
    let team = TeamRegion::create_named(&name, TeamConfig::new(2 * MIB, 128 * 4096, 2)).unwrap();
    let words = team.atomics();
    for (i, w) in words.iter().enumerate().step_by(512) {
        w.store(i as u64 + 1, Ordering::Relaxed);
    }
    // The other files are held open, as a live team's are: a sweep by a
    // test running beside this one leaves them alone.
    let mut others = Vec::new();
    for p in parts {
        std::fs::rename(path(p), moved(p)).unwrap();
        std::fs::write(path(p), format!("the next job's {p} file")).unwrap();
        others.push(std::fs::File::open(path(p)).unwrap());
    }
    // The team still works through its descriptors and mappings.
    assert!(words
        .iter()
        .enumerate()
        .step_by(512)
        .all(|(i, w)| w.load(Ordering::Relaxed) == i as u64 + 1));
    drop(team);
    for p in parts {
        assert_eq!(
            std::fs::read_to_string(path(p)).unwrap(),
            format!("the next job's {p} file"),
            "dropping the team deleted a file it did not create"
        );
        assert!(
            moved(p).exists(),
            "the team's own {p} file, renamed, is left where it was moved"
        );
        std::fs::remove_file(path(p)).unwrap();
        std::fs::remove_file(moved(p)).unwrap();
    }
    drop(others);
    // Not renamed: removed as before.
    let team = TeamRegion::create_named(&name, TeamConfig::new(2 * MIB, 128 * 4096, 2)).unwrap();
    assert!(parts.iter().all(|p| path(p).exists()));
    drop(team);
    assert!(parts.iter().all(|p| !path(p).exists()));
}
