//! Overshadow (paper 2): readers during the copy, writes during the copy,
//! destroy during the copy, several in flight, file ranges, misuse.
//!
//! The tests take one lock each: the leak test counts the process's
//! mappings and descriptors, which the others would disturb.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tiermem::far::FarMemory;
use tiermem::overshadow::{copy_to_near, LinkEmulation, Options, Overshadow, Switch};
use tiermem::Error;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn pattern(i: usize) -> u64 {
    (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555
}

fn filled(len: usize) -> FarMemory {
    let far = FarMemory::alloc(len).unwrap();
    for (i, w) in far.as_atomic_u64().iter().enumerate() {
        w.store(pattern(i), Relaxed);
    }
    far
}

/// A link slow enough that the copy of `len` bytes takes about `ms`.
fn slow(len: usize, ms: f64, switch: Switch) -> Options {
    Options {
        switch,
        link: Some(LinkEmulation {
            bandwidth_bytes_per_s: len as f64 / (ms * 1e-3),
            latency_us: 5.0,
        }),
        ..Default::default()
    }
}

fn check_all(words: &[AtomicU64]) -> usize {
    let mut bad = 0;
    for (i, w) in words.iter().enumerate() {
        if w.load(Relaxed) != pattern(i) {
            bad += 1;
        }
    }
    bad
}

#[test]
fn readers_during_the_copy_always_see_the_far_bytes() {
    let _s = serial();
    for switch in [Switch::PerPage, Switch::Whole] {
        let len = 16 << 20;
        let far = filled(len);
        let os = Overshadow::create(far.addr(), len, &slow(len, 150.0, switch)).unwrap();
        assert!(!os.test(), "{switch:?}: a 150 ms copy is not done at once");
        let done = AtomicBool::new(false);
        let passes = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    // Keep reading until one full pass after the copy ended.
                    loop {
                        let finished = done.load(Relaxed);
                        assert_eq!(check_all(os.as_atomic_u64()), 0, "{switch:?}: wrong bytes at to");
                        passes.fetch_add(1, Relaxed);
                        if finished {
                            break;
                        }
                    }
                });
            }
            os.wait().unwrap();
            done.store(true, Relaxed);
        });
        assert!(passes.load(Relaxed) >= 4, "readers ran during the copy");
        assert!((0..len).step_by(4096).all(|o| os.is_near(o)));
        let st = os.stats();
        assert_eq!(st.bytes_copied, len as u64);
        match switch {
            // 256 KiB, 256 KiB, 512 KiB, 1 MiB, then 2 MiB chunks.
            Switch::PerPage => assert!(st.switches >= 11, "{st:?}"),
            Switch::Whole => assert_eq!(st.switches, 1, "{st:?}"),
        }
    }
}

#[test]
fn writes_during_the_copy_are_all_present_after_wait() {
    let _s = serial();
    for switch in [Switch::PerPage, Switch::Whole] {
        let len = 8 << 20;
        let far = filled(len);
        let os = Overshadow::create(far.addr(), len, &slow(len, 100.0, switch)).unwrap();
        let words = os.as_atomic_u64();
        // Writes land on far pages (in the future of the copy) and on
        // near ones, from two threads, while the copy runs.
        let written: Vec<usize> = (0..words.len()).step_by(997).collect();
        std::thread::scope(|s| {
            for half in written.chunks(written.len() / 2 + 1) {
                let os = &os;
                s.spawn(move || {
                    for &i in half.iter().rev() {
                        os.as_atomic_u64()[i].store(!pattern(i), Relaxed);
                    }
                });
            }
        });
        let forced = os.stats().forced_pages;
        os.wait().unwrap();
        for (i, w) in words.iter().enumerate() {
            let want = if i % 997 == 0 { !pattern(i) } else { pattern(i) };
            assert_eq!(w.load(Relaxed), want, "{switch:?}: word {i}");
        }
        assert!(forced > 0, "{switch:?}: some writes hit far pages");
        assert_eq!(
            check_all(far.as_atomic_u64()),
            0,
            "{switch:?}: from is never written"
        );
    }
}

fn census() -> (usize, usize) {
    let maps = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count();
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    (maps, fds)
}

#[test]
fn destroy_during_the_copy_leaks_nothing() {
    let _s = serial();
    let len = 8 << 20;
    // Start the movers and let them run (a new thread maps its signal
    // stack and malloc arena when it first runs, which may be later than
    // its creation), with several overshadows queued at once.
    let warm: Vec<FarMemory> = (0..4).map(|_| filled(len)).collect();
    let oss: Vec<Overshadow> = warm
        .iter()
        .map(|f| Overshadow::create(f.addr(), len, &Options::default()).unwrap())
        .collect();
    oss.iter().for_each(|o| o.wait().unwrap());
    drop((oss, warm));
    let before = census();
    let maps_before = std::fs::read_to_string("/proc/self/maps").unwrap();
    let t = Instant::now();
    for round in 0..12 {
        let far = filled(len);
        let switch = if round % 2 == 0 {
            Switch::PerPage
        } else {
            Switch::Whole
        };
        let os = Overshadow::create(far.addr(), len, &slow(len, 40.0, switch)).unwrap();
        let words = os.as_atomic_u64();
        words[round * 1000].store(1, Relaxed);
        std::thread::sleep(Duration::from_millis(round as u64 * 3));
        assert_eq!(words[len / 8 - 1].load(Relaxed), pattern(len / 8 - 1));
        if round % 3 == 0 {
            drop(far); // freeing `from` first is allowed
        }
        drop(os);
    }
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "destroy does not wait for the copy"
    );
    // A test thread that finished just before may still be unmapping its
    // stack: give the count a moment to settle.
    let mut after = census();
    for _ in 0..20 {
        if after == before {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
        after = census();
    }
    if after != before {
        eprintln!("now:\n{}", std::fs::read_to_string("/proc/self/maps").unwrap());
        eprintln!("before:\n{maps_before}");
    }
    assert_eq!(after, before, "(mappings, descriptors) after 12 destroys");
}

#[test]
fn several_overshadows_in_flight() {
    let _s = serial();
    let fars: Vec<FarMemory> = (0..4).map(|k| filled((k + 1) << 20)).collect();
    let oss: Vec<Overshadow> = fars
        .iter()
        .map(|f| Overshadow::create(f.addr(), f.len(), &slow(f.len(), 30.0, Switch::PerPage)).unwrap())
        .collect();
    for os in &oss {
        os.wait().unwrap();
        assert!(os.test());
        assert_eq!(check_all(os.as_atomic_u64()), 0);
        assert_eq!(os.near_pages(), os.len() / 4096);
    }
    // A sub-range of an allocation, too.
    let os = Overshadow::create(fars[3].addr() + 8192, 16384, &Options::default()).unwrap();
    os.wait().unwrap();
    assert_eq!(os.as_atomic_u64()[0].load(Relaxed), pattern(1024));
}

#[test]
fn file_ranges_and_plain_copies() {
    let _s = serial();
    let path = std::env::temp_dir().join(format!("tiermem-os-{}", std::process::id()));
    let len = 4 << 20;
    let bytes: Vec<u8> = (0..len + 8192).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &bytes).unwrap();
    let far = FarMemory::map_file(&path, 8192, len, false).unwrap();
    tiermem_sys::file::drop_cache(far.fd()).unwrap();
    let os = Overshadow::create(far.addr(), len, &Options::default()).unwrap();
    os.as_atomic_u64()[3].store(0, Relaxed); // a private copy: the file is read-only
    os.wait().unwrap();
    let want = |i: usize| {
        let b: [u8; 8] = bytes[8192 + 8 * i..8192 + 8 * i + 8].try_into().unwrap();
        u64::from_ne_bytes(b)
    };
    for (i, w) in os.as_atomic_u64().iter().enumerate() {
        assert_eq!(w.load(Relaxed), if i == 3 { 0 } else { want(i) }, "word {i}");
    }
    let c = copy_to_near(far.addr(), len, &Options::default()).unwrap();
    assert!(c.test());
    assert_eq!(c.as_atomic_u64()[3].load(Relaxed), want(3));
    drop((os, c, far));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn misuse_is_an_error() {
    let _s = serial();
    let far = filled(1 << 20);
    let o = Options::default();
    let usage = |r: Result<Overshadow, Error>| match r {
        Err(e @ Error::Usage(_)) => {
            assert_eq!(e.code(), tiermem::ErrorCode::InvalidArgument);
            e.to_string()
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    };
    assert!(usage(Overshadow::create(far.addr(), 0, &o)).contains("0 bytes"));
    assert!(usage(Overshadow::create(far.addr() + 8, 4096, &o)).contains("multiples"));
    assert!(usage(Overshadow::create(far.addr(), 4095, &o)).contains("multiples"));
    assert!(usage(Overshadow::create(far.addr(), 2 << 20, &o)).contains("not far memory"));
    let heap = vec![0u8; 1 << 16];
    let aligned = (heap.as_ptr() as usize).next_multiple_of(4096);
    assert!(usage(Overshadow::create(aligned, 4096, &o)).contains("not far memory"));
    let bad = Options {
        chunk_min_bytes: 100,
        ..Default::default()
    };
    assert!(usage(Overshadow::create(far.addr(), 4096, &bad)).contains("chunks"));
    let bad = Options {
        link: Some(LinkEmulation {
            bandwidth_bytes_per_s: 0.0,
            latency_us: 1.0,
        }),
        ..Default::default()
    };
    assert!(usage(Overshadow::create(far.addr(), 4096, &bad)).contains("link"));
    // A freed allocation is no longer far memory.
    let addr = far.addr();
    drop(far);
    assert!(usage(Overshadow::create(addr, 4096, &o)).contains("not far memory"));
}

#[test]
fn a_failed_copy_is_reported_by_wait() {
    let _s = serial();
    let path = std::env::temp_dir().join(format!("tiermem-os-trunc-{}", std::process::id()));
    let len = 8 << 20;
    std::fs::write(&path, vec![3u8; len]).unwrap();
    let far = FarMemory::map_file(&path, 0, len, false).unwrap();
    let os = Overshadow::create(far.addr(), len, &slow(len, 200.0, Switch::PerPage)).unwrap();
    // The file shrinks under the copy: the mover's reads come back short.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    let e = os.wait().unwrap_err();
    assert_eq!(e.code(), tiermem::ErrorCode::Io, "{e}");
    assert!(os.test(), "a failed copy counts as finished");
    drop((os, far));
    std::fs::remove_file(path).unwrap();
}

/// A `fork()`ed child inherits the movers' registry but not their threads:
/// its overshadows start movers of its own (they waited forever for the
/// parent's). Runs in a fresh process (one test thread) to fork safely.
#[test]
fn a_forked_child_gets_movers_of_its_own() {
    const NAME: &str = "a_forked_child_gets_movers_of_its_own";
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(NAME) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env("TIERMEM_CHILD", NAME)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        return;
    }
    let far = filled(4 << 20);
    let os = Overshadow::create(far.addr(), far.len(), &Options::default()).unwrap();
    os.wait().unwrap();
    // SAFETY: fork in a process with one test thread; the child makes an
    // overshadow, waits for it (bounded by an alarm) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: alarm only arms a timer; SIGALRM ends the child.
        unsafe { libc::alarm(20) };
        let far = filled(4 << 20);
        let os = Overshadow::create(far.addr(), far.len(), &Options::default()).unwrap();
        let ok = os.wait().is_ok() && check_all(os.as_atomic_u64()) == 0;
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's overshadow: status {status:#x} (signal 14: it never finished)"
    );
    drop(os);
}
