//! Kill tests (issue 16): SIGKILL a team worker, an SVM process, a
//! mover-heavy process and the kernel-swap benchmark at a random moment,
//! then check that
//!
//! - the survivors fail with a clear error within [`BOUND`] (a team or SVM
//!   run whose worker died exits non-zero naming the failure; the
//!   kernel-swap child dies with its parent), and
//! - nothing is left behind: no file the killed processes held by name
//!   (`/dev/shm`, far files) exists any more, no process of theirs runs,
//!   no cgroup, swap area or zram marker of theirs remains once the next
//!   run has started, and the huge page reservations are back where they
//!   were.
//!
//! The moment is drawn from `TIERMEM_KILL_SEED` (default: the clock; the
//! seed is printed). The whole file runs in well under a minute.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tiermem");
/// How long survivors may take to notice a death and stop.
const BOUND: Duration = Duration::from_secs(10);

struct Rng(u64);

impl Rng {
    fn from_env() -> Rng {
        let seed = std::env::var("TIERMEM_KILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("kill test seed {seed} (TIERMEM_KILL_SEED={seed} reproduces the moments)");
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A duration in `[lo, hi)` milliseconds.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for our purposes (its parent has not reaped it yet).
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().and_then(|r| r.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        })
        .unwrap_or(false)
}

/// The children of `pid` (all its threads').
fn children(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                v.extend(s.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
    }
    v
}

/// `pid` and all its descendants.
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let kids = children(all[i]);
        all.extend(kids);
        i += 1;
    }
    all
}

/// Files a process holds by a name that would outlive it: its descriptors
/// and mappings on /dev/shm, or whose name says tiermem (far files, swap
/// files); unlinked ("(deleted)"), anonymous and memfd ones cannot.
fn held_paths(pid: u32, out: &mut BTreeSet<PathBuf>) {
    let keep = |p: &str| {
        p.starts_with('/')
            && !p.ends_with(" (deleted)")
            && !p.starts_with("/memfd:")
            && !p.starts_with("/proc/")
            && !p.starts_with("/sys/")
            && !p.starts_with("/dev/null")
            && (p.starts_with("/dev/shm/") || p.contains("tiermem-") || p.contains("far"))
            && !p.contains("/target/")
    };
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(l) = std::fs::read_link(fd.path()) {
                let s = l.to_string_lossy().into_owned();
                if keep(&s) {
                    out.insert(l);
                }
            }
        }
    }
    if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        for line in maps.lines() {
            if let Some(p) = line.split_whitespace().nth(5) {
                let rest = &line[line.find(p).unwrap_or(0)..];
                if keep(rest) {
                    out.insert(PathBuf::from(rest));
                }
            }
        }
    }
}

fn resv_hugepages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// What a killed process `pid` left in the kernel-swap harness: cgroups
/// named after it, swap areas and files named after it, zram markers
/// naming it.
fn swap_leftovers(pid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for root in [
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
    ] {
        for name in [
            format!("tiermem-bench-{pid}"),
            format!("tiermem-bench-run-{pid}-0"),
        ] {
            let d = Path::new(root).join(&name);
            if d.is_dir() {
                v.push(format!("cgroup {}", d.display()));
            }
        }
    }
    let tag = format!("tiermem-bench-swap-{pid}-");
    if let Ok(swaps) = std::fs::read_to_string("/proc/swaps") {
        v.extend(
            swaps
                .lines()
                .filter(|l| l.contains(&tag))
                .map(|l| format!("active swap {l}")),
        );
    }
    for dir in [std::env::temp_dir(), PathBuf::from("/var/tmp")] {
        if let Ok(es) = std::fs::read_dir(&dir) {
            for e in es.flatten() {
                if e.file_name().to_string_lossy().starts_with(&tag) {
                    v.push(format!("swap file {}", e.path().display()));
                }
            }
        }
    }
    for dir in ["/run", "/tmp"] {
        if let Ok(es) = std::fs::read_dir(dir) {
            for e in es.flatten() {
                if e.file_name().to_string_lossy().starts_with("tiermem-bench-zram") {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    if text.lines().any(|l| l == format!("pid={pid}")) {
                        v.push(format!("zram marker {}", e.path().display()));
                    }
                }
            }
        }
    }
    v
}

/// A benchmark started for killing: its process tree is watched so that
/// everything it held is known at the kill.
struct Victim {
    child: Child,
    started: Instant,
    pids: BTreeSet<u32>,
    held: BTreeSet<PathBuf>,
}

impl Victim {
    fn start(args: &[&str]) -> Victim {
        let child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting tiermem");
        Victim {
            child,
            started: Instant::now(),
            pids: BTreeSet::new(),
            held: BTreeSet::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Records the tree and what it holds.
    fn observe(&mut self) {
        for p in tree(self.pid()) {
            self.pids.insert(p);
            held_paths(p, &mut self.held);
        }
    }

    /// Watches until `ready` says the moment came (or the run ended).
    fn watch_until(&mut self, mut ready: impl FnMut(&Victim) -> bool, limit: Duration) -> bool {
        while self.started.elapsed() < limit {
            self.observe();
            if !alive(self.pid()) {
                return false;
            }
            if ready(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Waits for the benchmark's own process to end, within `bound`.
    fn wait(
        mut self,
        bound: Duration,
    ) -> (
        std::process::ExitStatus,
        String,
        Duration,
        BTreeSet<u32>,
        BTreeSet<PathBuf>,
    ) {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return (st, err, t.elapsed(), self.pids, self.held);
            }
            if t.elapsed() > bound {
                let _ = self.child.kill();
                panic!(
                    "tiermem {} did not end within {bound:?} after the kill",
                    self.pid()
                );
            }
            self.observe();
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Every process of the tree is gone within `bound`, and no file it held
/// by name exists any more.
fn check_nothing_left(what: &str, pids: &BTreeSet<u32>, held: &BTreeSet<PathBuf>, bound: Duration) {
    check_gone(what, pids, bound);
    check_files(what, held);
    eprintln!(
        "{what}: {} processes gone, none of the {} named files they held is left",
        pids.len(),
        held.len()
    );
}

fn check_files(what: &str, held: &BTreeSet<PathBuf>) {
    let left: Vec<_> = held.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "{what}: files left behind: {left:?}");
}

fn check_gone(what: &str, pids: &BTreeSet<u32>, bound: Duration) {
    let t = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            t.elapsed() < bound,
            "{what}: processes still running {bound:?} after the kill: {:?}",
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A team of worker processes (pspt: one page table each), one worker
/// killed: the run stops with an error naming the dead worker.
#[test]
fn killed_team_worker() {
    let mut rng = Rng::from_env();
    let resv = resv_hugepages();
    let mut v = Victim::start(&[
        "bench",
        "stencil",
        "--virt",
        "32M",
        "--near",
        "8M",
        "--threads",
        "2",
        "--iters",
        "400",
        "--modes",
        "pspt",
    ]);
    let workers_up = |v: &Victim| children(v.pid()).len() >= 2;
    assert!(
        v.watch_until(workers_up, Duration::from_secs(20)),
        "the team never started"
    );
    std::thread::sleep(rng.millis(0, 1500));
    v.observe();
    let workers = children(v.pid());
    let target = workers[(rng.next() % workers.len() as u64) as usize];
    tiermem_sys::process::kill(target, libc::SIGKILL).unwrap();
    let killed = Instant::now();
    let (st, err, took, pids, held) = v.wait(BOUND);
    assert!(
        !st.success(),
        "the team run succeeded although worker {target} was killed: {err}"
    );
    assert!(
        err.contains("signal 9") || err.contains("killed") || err.contains("died") || err.contains("SIGKILL"),
        "no clear error: {err}"
    );
    eprintln!(
        "team: worker {target} killed; the run failed after {took:?}: {}",
        last_line(&err)
    );
    check_nothing_left("team", &pids, &held, BOUND.saturating_sub(killed.elapsed()));
    assert!(resv_hugepages() <= resv, "huge page reservations left");
}

/// SVM processes, one killed: the others fail with an error naming it.
#[test]
fn killed_svm_process() {
    let mut rng = Rng::from_env();
    let mut v = Victim::start(&[
        "bench",
        "svm",
        "--workloads",
        "bucket,malstone",
        "--modes",
        "spm-coherent,hybrid",
        "--procs",
        "2",
        "--keys",
        "1048576",
        "--records",
        "1048576",
        "--reps",
        "50",
    ]);
    let procs_up = |v: &Victim| children(v.pid()).len() >= 2;
    assert!(
        v.watch_until(procs_up, Duration::from_secs(20)),
        "the SVM processes never started"
    );
    std::thread::sleep(rng.millis(0, 1000));
    v.observe();
    let procs = children(v.pid());
    if procs.is_empty() {
        // Between two runs: wait for the next.
        assert!(
            v.watch_until(procs_up, Duration::from_secs(30)),
            "no SVM process to kill"
        );
    }
    let procs = children(v.pid());
    let target = procs[(rng.next() % procs.len() as u64) as usize];
    // A process that already finished its part (a zombie its parent has
    // not reaped yet) is no kill: the run may then end well.
    let finished = || {
        std::fs::read_to_string(format!("/proc/{target}/stat")).map_or(true, |st| {
            st.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    };
    let was_finished = finished();
    tiermem_sys::process::kill(target, libc::SIGKILL).unwrap();
    let killed = Instant::now();
    let (st, err, took, pids, held) = v.wait(BOUND);
    if st.success() && was_finished {
        eprintln!(
            "skipped: process {target} had finished its part before the kill (seed: TIERMEM_KILL_SEED)"
        );
        check_nothing_left("svm", &pids, &held, BOUND);
        return;
    }
    assert!(
        !st.success(),
        "the SVM run succeeded although process {target} was killed: {err}"
    );
    assert!(
        err.contains("signal 9") || err.contains("killed") || err.contains("died") || err.contains("SIGKILL"),
        "no clear error: {err}"
    );
    eprintln!(
        "svm: process {target} killed; the run failed after {took:?}: {}",
        last_line(&err)
    );
    check_nothing_left("svm", &pids, &held, BOUND.saturating_sub(killed.elapsed()));
}

/// A process with two movers, prefetch and a file far store, killed: its
/// far file (unnamed, in a directory) is gone with it.
#[test]
fn killed_mover_heavy_process() {
    let mut rng = Rng::from_env();
    let dir = std::env::temp_dir().join(format!("tiermem-kill-far-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let mut v = Victim::start(&[
        "bench", "stencil", "--virt", "32M", "--near", "8M", "--iters", "400", "--modes", "prefetch",
        "--movers", "2", "--far", &d,
    ]);
    let deadline = rng.millis(200, 2000);
    let at = |v: &Victim| v.started.elapsed() >= deadline;
    assert!(
        v.watch_until(at, Duration::from_secs(20)),
        "the run ended before the kill"
    );
    tiermem_sys::process::kill(v.pid(), libc::SIGKILL).unwrap();
    let (st, _, _, pids, held) = v.wait(BOUND);
    assert!(!st.success());
    check_nothing_left("mover-heavy", &pids, &held, BOUND);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "far files left in {d}: {left:?}");
    std::fs::remove_dir(&dir).unwrap();
}

/// The kernel-swap benchmark (swap area, memory cgroup, a child inside it)
/// killed at a random moment: the child dies with it, and the next
/// kernel-swap run removes its cgroup and swap area and leaves nothing of
/// its own.
#[test]
fn killed_kernel_swap_bench() {
    if !is_root() {
        eprintln!("skipped: the kernel-swap baseline needs root");
        return;
    }
    let mut rng = Rng::from_env();
    let args = [
        "bench",
        "stencil",
        "--virt",
        "64M",
        "--near",
        "16M",
        "--iters",
        "200",
        "--modes",
        "kernel-swap",
        "--swap",
    ];
    let next = |swap: &str| {
        let out = Command::new(BIN)
            .args([
                "bench",
                "stencil",
                "--virt",
                "8M",
                "--near",
                "4M",
                "--iters",
                "1",
                "--modes",
                "kernel-swap",
            ])
            .args(["--swap", swap])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = next("file");
    if !ok || err.contains("skipped") {
        eprintln!(
            "skipped: the kernel-swap baseline does not run here: {}",
            last_line(&err)
        );
        return;
    }
    for swap in ["file", "zram"] {
        let resv = resv_hugepages();
        let mut argv = args.to_vec();
        argv.push(swap);
        let mut v = Victim::start(&argv);
        let deadline = rng.millis(50, 1500);
        let at = |v: &Victim| v.started.elapsed() >= deadline;
        if !v.watch_until(at, Duration::from_secs(20)) {
            let (_, err, ..) = v.wait(BOUND);
            eprintln!("kernel-swap ({swap}): ended before the kill: {}", last_line(&err));
            continue;
        }
        let bench = v.pid();
        tiermem_sys::process::kill(bench, libc::SIGKILL).unwrap();
        let (_, _, _, pids, held) = v.wait(BOUND);
        // The child in the cgroup dies with its parent.
        check_gone(&format!("kernel-swap ({swap})"), &pids, Duration::from_secs(5));
        // The next run sweeps what the killed one could not remove.
        let before_sweep = swap_leftovers(bench);
        let (ok, err) = next(swap);
        if !ok && swap == "zram" && err.contains("zram") {
            eprintln!("kernel-swap (zram): no zram here: {}", last_line(&err));
        } else {
            assert!(ok, "the next kernel-swap run failed: {err}");
        }
        let left = swap_leftovers(bench);
        assert!(
            left.is_empty(),
            "kernel-swap ({swap}): left behind by {bench}: {left:?}"
        );
        check_files(&format!("kernel-swap ({swap})"), &held);
        assert!(resv_hugepages() <= resv, "huge page reservations left");
        eprintln!(
            "kernel-swap ({swap}): killed at {deadline:?}, leaving {before_sweep:?}; nothing of it left after the next run"
        );
    }
}

fn hugepages(file: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{file}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// A region on 2 MiB pages from the pool, killed: the pool gets every page
/// and reservation back. Reserves 16 pool pages for the test (root) and
/// restores the pool size after.
#[test]
fn killed_huge_page_process() {
    let (Some(before), true) = (hugepages("nr_hugepages"), is_root()) else {
        eprintln!("skipped: needs root and a 2 MiB pool");
        return;
    };
    let path = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let grown = std::fs::write(path, (before + 16).to_string()).is_ok()
        && hugepages("free_hugepages").unwrap_or(0) >= 16;
    if !grown {
        let _ = std::fs::write(path, before.to_string());
        eprintln!("skipped: could not reserve 16 huge pages");
        return;
    }
    let (free0, resv0) = (
        hugepages("free_hugepages").unwrap(),
        hugepages("resv_hugepages").unwrap(),
    );
    let mut rng = Rng::from_env();
    let mut v = Victim::start(&[
        "bench",
        "gups",
        "--table",
        "16M",
        "--backing",
        "2m",
        "--provider",
        "tiered,segment",
        "--near",
        "50%",
        "--updates",
        "400000000",
        "--rounds",
        "20",
    ]);
    let deadline = rng.millis(100, 1500);
    let at = |v: &Victim| v.started.elapsed() >= deadline;
    let ran = v.watch_until(at, Duration::from_secs(20));
    let used =
        hugepages("free_hugepages").unwrap_or(0) < free0 || hugepages("resv_hugepages").unwrap_or(0) > resv0;
    let _ = tiermem_sys::process::kill(v.pid(), libc::SIGKILL);
    let (_, err, _, pids, held) = v.wait(BOUND);
    check_nothing_left("huge pages", &pids, &held, BOUND);
    let t = Instant::now();
    let back = loop {
        let now = (
            hugepages("free_hugepages").unwrap(),
            hugepages("resv_hugepages").unwrap(),
        );
        if now == (free0, resv0) || t.elapsed() > BOUND {
            break now;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::write(path, before.to_string());
    assert!(ran, "the run ended before the kill: {err}");
    assert_eq!(
        back,
        (free0, resv0),
        "huge pages (free, reserved) not given back to the pool"
    );
    eprintln!("huge pages: killed at {deadline:?} holding pool pages: {used}; the pool got all back");
}

fn last_line(s: &str) -> &str {
    s.lines()
        .find(|l| l.contains("signal 9") || l.contains("died"))
        .or_else(|| s.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("")
}
