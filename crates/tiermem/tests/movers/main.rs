//! Mover threads: asynchronous eviction steps aside for scattered victims,
//! `movers = auto` stands down while the application needs every CPU, and
//! unpinned movers run on the CPUs the process started on.

#[path = "../common/mod.rs"]
mod common;

use common::{check_mixed, fill_mixed, xor_updates};
use tiermem::{Config, Region};

const MIB: u64 = 1 << 20;

/// Tests with mover threads run one at a time: on two CPUs, two of them
/// at once would starve each other's movers.
static MOVER_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn movers_leave_scattered_eviction_to_faults() {
    let _one_at_a_time = MOVER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    for policy in tiermem::PolicyKind::ALL {
        let mut c = Config::new(32 * MIB, 8 * MIB);
        c.movers = 1;
        c.policy = *policy;
        let r = Region::new(c).unwrap();
        let words = r.as_atomic_u64();
        fill_mixed(words);
        r.reset_stats();
        // Random read-modify-writes: victims are scattered, so the mover's
        // unmap calls would evict a page each. Twice the same sequence
        // restores every word.
        xor_updates(words, 0x9e37_79b9_7f4a_7c15, 100_000);
        r.settle();
        let s = r.stats();
        xor_updates(words, 0x9e37_79b9_7f4a_7c15, 100_000);
        check_mixed(words, policy.name());
        eprintln!(
            "{policy}: faults {}, inline evictions {}, mover evictions {}, pauses {}",
            s.faults(),
            s.inline_evictions,
            s.mover_evictions,
            s.eviction_pauses
        );
        assert!(s.eviction_pauses > 0, "{policy}: {s:?}");
        assert!(
            s.inline_evictions > s.mover_evictions,
            "{policy}: faults should evict while movers pause: {s:?}"
        );
        assert!(r.errors().is_empty(), "{:?}", r.errors());
    }
}

#[test]
fn explicit_prefetch_and_advice() {
    let mut c = Config::new(32 * MIB, 8 * MIB);
    c.movers = 0;
    let mut r = Region::new(c).unwrap();
    r.as_mut_slice::<u64>()
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = i as u64);
    r.evict_all().unwrap();
    // Without movers, prefetch fills synchronously (pages written before
    // their eviction come back writable: the rewrite hint).
    r.prefetch(0, 4 * MIB as usize).unwrap();
    let resident = |r: &Region| {
        let c = r.page_census();
        c.clean + c.dirty
    };
    assert_eq!(resident(&r), 1024);
    r.reset_stats();
    assert_eq!(r.as_mut_slice::<u64>()[1000], 1000);
    assert_eq!(r.stats().faults(), 0, "prefetched page read without a fault");
    // DontNeed evicts and keeps the data.
    r.advise(0, 4 * MIB as usize, tiermem::Advice::DontNeed).unwrap();
    assert_eq!(resident(&r), 0);
    assert_eq!(r.as_mut_slice::<u64>()[1000], 1000);
    assert!(r.prefetch(0, 64 * MIB as usize).is_err());
    // WillNeed with movers: queued, done in the background.
    let mut c = Config::new(32 * MIB, 16 * MIB);
    c.movers = 1;
    let r = Region::new(c).unwrap();
    r.advise(0, 8 * MIB as usize, tiermem::Advice::WillNeed).unwrap();
    let t = std::time::Instant::now();
    while r.page_census().clean < 2048 && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(r.page_census().clean, 2048);
    r.advise(0, 32 * MIB as usize, tiermem::Advice::Random).unwrap();
    r.advise(0, 32 * MIB as usize, tiermem::Advice::Sequential)
        .unwrap();
    r.advise(0, 32 * MIB as usize, tiermem::Advice::Normal).unwrap();
}

/// `movers = auto`: the mover works beside one faulting thread, stands
/// down while busy threads take every CPU (then it moves nothing and the
/// faults move the data), works again once they stop, and no word is lost.
#[test]
fn the_auto_mover_stands_down_while_every_cpu_is_busy() {
    let _one = MOVER_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    let cpus = tiermem_sys::thread::launch_cpus().len();
    if cpus < 2 || tiermem_sys::thread::RunDelay::open().is_none() {
        eprintln!("skipped: one usable CPU, or no /proc/thread-self/schedstat: the gate never stands down");
        return;
    }
    // The rule for busy CPUs alone: a trial's verdict (the mover does not
    // pay) would stand it down for reasons of its own.
    tiermem::region::set_mover_trials(false);
    let mut c = Config::new(64 * MIB, 16 * MIB);
    c.policy = tiermem::PolicyKind::Fifo;
    c.movers = 1;
    c.movers_auto = true;
    let r = Region::new(c).unwrap();
    let words = r.as_atomic_u64();
    fill_mixed(words);
    check_mixed(words, "alone");
    let alone = r.stats().mover;
    assert!(
        alone.pages_in + alone.pages_out > 0,
        "the mover never worked: {alone:?}"
    );
    let moved = |r: &Region| {
        let m = r.stats().mover;
        m.pages_in + m.pages_out
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    // A stand-down of the quiet part (a noisy machine) does not count: the
    // busy threads must cause one of their own.
    let earlier = r.stats().mover.stand_downs;
    // Measured inside, asserted outside: a failed assertion in the scope
    // would wait forever for the spinners.
    let (passes, down, after, moved_down) = std::thread::scope(|s| {
        for _ in 0..cpus {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let t = std::time::Instant::now();
        let mut passes = 0;
        while r.stats().mover.stand_downs == earlier && t.elapsed() < std::time::Duration::from_secs(20) {
            check_mixed(words, "busy");
            passes += 1;
        }
        let down = r.stats();
        // Stood down: the faults move everything, the mover nothing.
        if down.mover.stand_downs > earlier {
            check_mixed(words, "stood down");
            check_mixed(words, "stood down");
        }
        let out = (passes, down, r.stats(), moved(&r));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    });
    assert!(
        down.mover.stand_downs > earlier,
        "no stand-down in {passes} passes with {cpus} CPUs busy: {:?}",
        down.mover
    );
    assert!(
        after.evictions > down.evictions,
        "nothing was evicted in two passes"
    );
    assert_eq!(
        moved_down,
        down.mover.pages_in + down.mover.pages_out,
        "a stood-down mover moved pages"
    );
    // The spinners are gone: a CPU is free, and the mover works again.
    let before = moved(&r);
    let t = std::time::Instant::now();
    while moved(&r) == before && t.elapsed() < std::time::Duration::from_secs(20) {
        check_mixed(words, "after");
    }
    assert!(
        moved(&r) > before,
        "the mover never worked again: {:?}",
        r.stats().mover
    );
}

/// The CPUs each of this process's threads named `prefix*` may run on.
fn cpus_of_threads(prefix: &str) -> Vec<(u32, Vec<usize>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let dir = e.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let Some(list) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) else {
            continue;
        };
        let tid = e.file_name().to_string_lossy().parse().unwrap_or(0);
        out.push((tid, tiermem::config::parse_cpu_list(list.trim()).unwrap()));
    }
    out
}

/// Waits (up to 5 s) for a mover thread that is not in `before` to have
/// the CPUs `want`; returns the new movers' CPUs.
fn wait_for_new_mover_cpus(before: &[(u32, Vec<usize>)], want: &[usize]) -> Vec<(u32, Vec<usize>)> {
    let t = std::time::Instant::now();
    loop {
        let new: Vec<_> = cpus_of_threads("tiermem-mover")
            .into_iter()
            .filter(|(tid, _)| before.iter().all(|(b, _)| b != tid))
            .collect();
        if new.iter().any(|(_, c)| c == want) || t.elapsed().as_secs() >= 5 {
            return new;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A thread bound to one CPU (as an OpenMP runtime binds its threads)
/// builds regions: their unpinned movers still run on every CPU the
/// process started on, and the `auto` mover on the last of them.
#[test]
fn unpinned_movers_run_on_the_cpus_the_process_started_on() {
    let _one = MOVER_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    let launch = tiermem_sys::thread::launch_cpus();
    if launch.len() < 2 {
        eprintln!("skipped: one usable CPU");
        return;
    }
    std::thread::spawn(move || {
        tiermem_sys::thread::set_affinity(&[launch[0]]).unwrap();
        for auto in [false, true] {
            let mut c = Config::new(8 * MIB, 4 * MIB);
            c.movers = 1;
            c.movers_auto = auto;
            let want = if auto {
                vec![*launch.last().unwrap()]
            } else {
                launch.clone()
            };
            let before = cpus_of_threads("tiermem-mover");
            let r = Region::new(c).unwrap();
            let new = wait_for_new_mover_cpus(&before, &want);
            assert!(
                new.iter().any(|(_, c)| *c == want),
                "auto {auto}: new movers {new:?}, want {want:?} (launched on {launch:?})"
            );
            fill_mixed(r.as_atomic_u64());
            check_mixed(r.as_atomic_u64(), "bound creator");
        }
    })
    .join()
    .unwrap();
}
