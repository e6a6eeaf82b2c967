//! Tests that set up swap areas and cgroups (root only; elsewhere they print `skipped: <why>`).

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::cgroup::{locate_memory_cgroup, read_pids, remove_cgroup_dir, CGROUP_SWAPPINESS};
use super::control::{fmt_bytes, read_trimmed, read_u64, write_control};
use super::device::Backing;
use super::mounts::fstype_of;
use super::preflight::check_privilege;
use super::swap_file::{allocate_swap_file, NO_SWAPFILE_FSTYPES, SWAP_FILE_PREFIX};
use super::swaps::{is_swap_active, Tools};
use super::zram::ZramMarker;
use super::zram::{zram_sys, ZRAM_CONTROL};
use super::*;

/// Tests that set up swap or cgroups run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Environment variable that turns [`child_hog_helper`] into the
/// memory-hungry child of [`cgroup_limit_forces_swap`].
const HOG_ENV: &str = "TIERMEM_TEST_HOG_MIB";
const PAGE: usize = 4096;

/// Why the baseline with `kind` cannot be tested here, if it cannot.
fn unavailable(kind: &SwapKind) -> Option<String> {
    preflight(kind).err()
}

macro_rules! skip_if {
    ($reason:expr) => {
        if let Some(reason) = $reason {
            println!("skipped: {reason}");
            return;
        }
    };
}

fn tmp_kind() -> SwapKind {
    SwapKind::File(std::env::temp_dir())
}

/// The swap areas a baseline may have added, by path: another swap area's
/// use changes as the machine swaps, which says nothing about cleanup.
fn our_swaps() -> Vec<std::path::PathBuf> {
    active_swaps()
        .into_iter()
        .filter(|s| {
            s.path.to_string_lossy().contains(SWAP_FILE_PREFIX)
                || s.path.to_string_lossy().starts_with("/dev/zram")
        })
        .map(|s| s.path)
        .collect()
}

/// The pid of a process that has exited (and been reaped).
pub(super) fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait true");
    pid
}

#[test]
fn preflight_ok_as_root() {
    let _g = serial();
    if let Err(why) = check_privilege() {
        // Unprivileged: preflight must say so rather than pass.
        let err = preflight(&SwapKind::Zram).unwrap_err();
        assert!(err.contains(&why), "{err}");
        println!("skipped: {why}");
        return;
    }
    let has_zram = Path::new(ZRAM_CONTROL).exists() || zram_sys(0).exists();
    skip_if!((!has_zram).then_some("no zram on this machine"));
    skip_if!(locate_memory_cgroup().err());
    assert_eq!(preflight(&SwapKind::Zram), Ok(()));
    match fstype_of(&std::env::temp_dir()) {
        Some(t) if NO_SWAPFILE_FSTYPES.contains(&t.as_str()) => {
            let err = preflight(&tmp_kind()).unwrap_err();
            assert!(err.contains(&t), "{err}");
        }
        _ => assert_eq!(preflight(&tmp_kind()), Ok(())),
    }
    let err = preflight(&SwapKind::File("/nonexistent/dir".into())).unwrap_err();
    assert!(err.contains("/nonexistent/dir"), "{err}");
}

fn zram_identity(dev: &SwapDevice) -> (u32, bool) {
    match dev.backing() {
        Backing::Zram { index, hot_added, .. } => (*index, *hot_added),
        Backing::File => panic!("{} is not zram", dev.describe()),
    }
}

/// Sets up zram swap of `size_bytes` and checks /proc/swaps and the marker.
fn setup_checked_zram(size_bytes: u64) -> SwapDevice {
    let t0 = Instant::now();
    let dev = SwapDevice::setup(&SwapKind::Zram, size_bytes).expect("zram setup");
    let setup = t0.elapsed();
    let (index, hot_added) = zram_identity(&dev);
    let desc = dev.describe();
    println!("set up {desc} in {setup:?} (hot_added: {hot_added})");
    assert!(
        desc.starts_with(&format!("zram {} (", dev.path().display())),
        "{desc}"
    );
    assert!(desc.ends_with(&format!(", {})", fmt_bytes(size_bytes))), "{desc}");
    let ours = active_swaps()
        .into_iter()
        .find(|s| s.path == dev.path())
        .expect("listed in /proc/swaps");
    assert_eq!(ours.priority, SWAP_PRIORITY);
    // mkswap keeps one page for its header.
    assert_eq!(ours.size_bytes, size_bytes - PAGE as u64, "{ours:?}");
    let marker = ZramMarker::new(index, hot_added, 0).path();
    assert!(marker.exists(), "marker {} written", marker.display());
    dev
}

/// Removes a zram swap and checks that nothing of it is left.
fn remove_checked_zram(dev: SwapDevice) {
    let (index, hot_added) = zram_identity(&dev);
    let path = dev.path().to_path_buf();
    let desc = dev.describe();
    let t0 = Instant::now();
    dev.remove().expect("zram teardown");
    println!("tore down {desc} in {:?}", t0.elapsed());
    assert!(!is_swap_active(&path), "still in /proc/swaps");
    let marker = ZramMarker::new(index, hot_added, 0).path();
    assert!(!marker.exists(), "marker {} left behind", marker.display());
    if hot_added {
        assert!(!zram_sys(index).exists(), "zram{index} not hot-removed");
    } else {
        assert_eq!(read_u64(&zram_sys(index).join("disksize")), Ok(0));
    }
}

#[test]
fn zram_swap_setup_and_teardown() {
    let _g = serial();
    skip_if!(unavailable(&SwapKind::Zram));
    let before = our_swaps();
    let first = setup_checked_zram(256 << 20);
    // With the first one active, the second must come from hot_add.
    let second = setup_checked_zram(2 << 30);
    assert!(zram_identity(&second).1, "second device not hot-added");
    assert_ne!(first.path(), second.path());
    remove_checked_zram(second);
    remove_checked_zram(first);
    assert_eq!(our_swaps(), before);
}

#[test]
fn file_swap_setup_and_teardown() {
    let _g = serial();
    skip_if!(unavailable(&tmp_kind()));
    let t0 = Instant::now();
    let dev = SwapDevice::setup(&tmp_kind(), 64 << 20).expect("swap file setup");
    let path = dev.path().to_path_buf();
    println!("set up {} in {:?}", dev.describe(), t0.elapsed());
    assert!(dev.describe().starts_with("swap file "));
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let ours = active_swaps()
        .into_iter()
        .find(|s| s.path == path)
        .expect("listed in /proc/swaps");
    assert_eq!(ours.kind, "file");
    let t1 = Instant::now();
    drop(dev);
    println!("tore down in {:?}", t1.elapsed());
    assert!(!is_swap_active(&path), "still in /proc/swaps");
    assert!(!path.exists(), "swap file deleted");
}

/// Runs as the child of [`cgroup_limit_forces_swap`] (a re-execution of
/// this test binary with [`HOG_ENV`] set); a no-op in a normal test run.
#[test]
fn child_hog_helper() {
    let Some(mib) = std::env::var(HOG_ENV).ok().and_then(|v| v.parse::<usize>().ok()) else {
        return;
    };
    assert!(
        join_cgroup_from_env().expect("join cgroup"),
        "{CGROUP_PROCS_ENV} unset"
    );
    let mut buf = vec![0u8; mib << 20];
    for (i, page) in buf.chunks_mut(PAGE).enumerate() {
        page[0] = (i as u8) | 1;
    }
    let buf = std::hint::black_box(buf);
    // Read every page back: those swapped out come back in.
    let sum: u64 = buf.chunks(PAGE).map(|p| u64::from(p[0])).sum();
    println!("child_hog_helper: {mib} MiB touched and read back, checksum {sum}");
}

#[test]
fn cgroup_limit_forces_swap() {
    let _g = serial();
    skip_if!(unavailable(&SwapKind::Zram));
    const LIMIT_MIB: u64 = 64;
    const HOG_MIB: u64 = 150;
    let swap = SwapDevice::setup(&SwapKind::Zram, 256 << 20).expect("zram setup");
    let cgroup = MemCgroup::create("unit-test", LIMIT_MIB << 20).expect("cgroup");
    let dir = cgroup.dir().to_path_buf();
    assert!(dir.ends_with("tiermem-bench-unit-test"));
    let read = |f: &str| read_trimmed(&dir.join(f)).unwrap();
    match cgroup.version() {
        CgroupVersion::V1 => {
            assert_eq!(read("memory.limit_in_bytes"), (LIMIT_MIB << 20).to_string());
            assert_eq!(read("memory.swappiness"), CGROUP_SWAPPINESS);
            // Unlimited memory+swap: the page-rounded maximum of a u64.
            assert!(read("memory.memsw.limit_in_bytes").parse::<u64>().unwrap() > 1 << 60);
        }
        CgroupVersion::V2 => {
            assert_eq!(read("memory.max"), (LIMIT_MIB << 20).to_string());
            assert_eq!(read("memory.swap.max"), "max");
        }
    }
    let before = vmstat_swap();
    let t0 = Instant::now();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "kernel_swap::tests::child_hog_helper",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOG_ENV, HOG_MIB.to_string())
        .env(CGROUP_PROCS_ENV, cgroup.procs_file())
        .output()
        .expect("spawn child");
    let elapsed = t0.elapsed();
    let after = vmstat_swap();
    let stats = cgroup.stats();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("child_hog_helper: 150 MiB"),
        "child did not run the hog: {stdout}"
    );
    let out_pages = after.pswpout - before.pswpout;
    let in_pages = after.pswpin - before.pswpin;
    println!(
        "{} / {LIMIT_MIB} MiB cgroup, child touched {HOG_MIB} MiB in {elapsed:?}: \
         pswpout {} -> {} (+{out_pages}), pswpin {} -> {} (+{in_pages}); cgroup {stats:?}",
        swap.describe(),
        before.pswpout,
        after.pswpout,
        before.pswpin,
        after.pswpin
    );
    let excess_pages = (HOG_MIB - LIMIT_MIB) * (1 << 20) / PAGE as u64;
    assert!(
        out_pages >= excess_pages / 2,
        "only {out_pages} pages swapped out"
    );
    assert!(in_pages > 0, "nothing swapped back in");
    assert!(stats.pgmajfault > 0, "{stats:?}");
    assert!(stats.max_usage_bytes <= LIMIT_MIB << 20, "{stats:?}");
    assert!(stats.max_usage_bytes > (LIMIT_MIB << 20) / 2, "{stats:?}");
    let swap_path = swap.path().to_path_buf();
    cgroup.remove().expect("cgroup removal");
    assert!(!dir.exists(), "cgroup directory left behind");
    let t1 = Instant::now();
    swap.remove().expect("swap teardown");
    println!("zram teardown after the run: {:?}", t1.elapsed());
    assert!(!is_swap_active(&swap_path));
}

#[test]
fn drop_moves_remaining_tasks_out() {
    let _g = serial();
    skip_if!(unavailable(&SwapKind::Zram));
    let cgroup = MemCgroup::create("unit-test-tasks", 64 << 20).expect("cgroup");
    let dir = cgroup.dir().to_path_buf();
    let mut child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
    cgroup.add_pid(child.id()).expect("add_pid");
    assert_eq!(read_pids(cgroup.procs_file()), [child.id()]);
    let own = fs::read_to_string(format!("/proc/{}/cgroup", child.id())).unwrap();
    assert!(own.contains("tiermem-bench-unit-test-tasks"), "{own}");
    drop(cgroup); // the sleeper is still inside
    assert!(!dir.exists(), "cgroup directory left behind");
    let own = fs::read_to_string(format!("/proc/{}/cgroup", child.id())).unwrap();
    assert!(!own.contains("tiermem-bench"), "{own}");
    child.kill().expect("kill sleep");
    child.wait().expect("wait sleep");
}

#[test]
fn leftover_cgroup_is_replaced() {
    let _g = serial();
    skip_if!(unavailable(&SwapKind::Zram));
    let (root, _) = locate_memory_cgroup().unwrap();
    let stale = root.join("tiermem-bench-unit-test-stale");
    let _ = remove_cgroup_dir(&stale);
    fs::create_dir(&stale).expect("mkdir stale cgroup");
    let mut child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
    write_control(&stale.join("cgroup.procs"), &child.id().to_string()).unwrap();
    let cgroup = MemCgroup::create("unit-test-stale", 32 << 20).expect("create over leftover");
    assert!(read_pids(cgroup.procs_file()).is_empty(), "stale task moved out");
    child.kill().expect("kill sleep");
    child.wait().expect("wait sleep");
    drop(cgroup);
    assert!(!stale.exists());
}

#[test]
fn leftover_zram_is_cleaned() {
    let _g = serial();
    skip_if!(unavailable(&SwapKind::Zram));
    let before = our_swaps();
    // Held meanwhile, so that the leaked device is a hot-added one.
    let holder = SwapDevice::setup(&SwapKind::Zram, 64 << 20).expect("zram setup");
    let leaked = SwapDevice::setup(&SwapKind::Zram, 64 << 20).expect("zram setup");
    let (index, hot_added) = zram_identity(&leaked);
    assert!(hot_added);
    // Pretend the owner crashed: a dead pid in the marker, and no Drop.
    let marker = ZramMarker::new(index, hot_added, leaked.size_bytes()).owned_by(dead_pid());
    fs::write(marker.path(), marker.to_text()).unwrap();
    let leaked_path = leaked.path().to_path_buf();
    std::mem::forget(leaked);
    assert!(is_swap_active(&leaked_path));
    let dev = SwapDevice::setup(&SwapKind::Zram, 64 << 20).expect("setup over leftover");
    let now = our_swaps();
    assert_eq!(now.len(), before.len() + 2, "leftover still active: {now:?}");
    // hot_add hands out the lowest free number, so the new device may
    // reuse the leaked one's.
    assert!(!zram_sys(index).exists() || dev.path() == leaked_path);
    remove_checked_zram(dev);
    remove_checked_zram(holder);
    assert!(!zram_sys(index).exists());
    assert_eq!(our_swaps(), before);
}

#[test]
fn leftover_swap_file_is_cleaned() {
    let _g = serial();
    skip_if!(unavailable(&tmp_kind()));
    let tools = Tools::find().unwrap();
    let dir = std::env::temp_dir().canonicalize().unwrap();
    let stale = dir.join(format!("{SWAP_FILE_PREFIX}{}-0", dead_pid()));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&stale)
        .unwrap();
    allocate_swap_file(file, &stale, 4 << 20).unwrap();
    tools.mkswap(&stale).unwrap();
    tools.swapon(&stale).unwrap();
    assert!(is_swap_active(&stale));
    let dev = SwapDevice::setup(&tmp_kind(), 8 << 20).expect("setup over leftover");
    assert!(!is_swap_active(&stale), "leftover still active");
    assert!(!stale.exists(), "leftover not deleted");
    let path = dev.path().to_path_buf();
    drop(dev);
    assert!(!path.exists() && !is_swap_active(&path));
}

/// The serial lock, and the swap kind to run under: zram where it is
/// available, else a swap file in the temporary directory; `None` after
/// printing why neither can be.
fn serial_run_kind() -> Option<(MutexGuard<'static, ()>, SwapKind)> {
    let guard = serial();
    match (unavailable(&SwapKind::Zram), unavailable(&tmp_kind())) {
        (None, _) => Some((guard, SwapKind::Zram)),
        (Some(_), None) => Some((guard, tmp_kind())),
        (Some(zram), Some(file)) => {
            println!("skipped: {zram}; {file}");
            None
        }
    }
}

/// The cgroup directory a run named `name` uses.
fn run_cgroup_dir(name: &str) -> PathBuf {
    let (root, _) = locate_memory_cgroup().expect("memory cgroup");
    root.join(format!("{NAME_PREFIX}-{name}"))
}

#[test]
fn limited_run_rejects_bad_input_and_says_why_it_cannot_run() {
    let _g = serial();
    let err = LimitedRun::new(SwapKind::Zram, 4096)
        .run_argv(&["true"])
        .unwrap_err();
    assert!(matches!(err, KernelSwapError::InvalidLimit { .. }), "{err}");
    let err = LimitedRun::new(SwapKind::Zram, 64 << 20)
        .run_argv::<&str>(&[])
        .unwrap_err();
    assert!(matches!(err, KernelSwapError::EmptyCommand), "{err}");
    let err = LimitedRun::new(tmp_kind(), 64 << 20)
        .swap_bytes(4096)
        .run_argv(&["true"])
        .unwrap_err();
    assert!(
        matches!(
            err,
            KernelSwapError::InvalidSize { .. } | KernelSwapError::Unavailable { .. }
        ),
        "{err}"
    );
    // Where the machine cannot run it, the error says why, as preflight does.
    for kind in [SwapKind::Zram, SwapKind::File("/nonexistent/dir".into())] {
        let Some(why) = unavailable(&kind) else {
            continue;
        };
        let run = LimitedRun::new(kind, 64 << 20);
        let err = run.run_argv(&["true"]).unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        assert!(matches!(err, KernelSwapError::Unavailable { .. }), "{err}");
        assert_eq!(format!("kernel-swap baseline unavailable: {err}"), why);
        assert!(run.preflight().is_err());
        println!("kernel-swap baseline skipped: {err}");
    }
}

#[test]
fn limited_run_joins_before_exec_and_reports_the_status() {
    let Some((_serial, kind)) = serial_run_kind() else {
        return;
    };
    let before = our_swaps();
    let dir = run_cgroup_dir("unit-test-run");
    // The shell never joins anything itself: the cgroup it reports for its
    // own pid ($$) is the one it was put in before exec.
    let run = LimitedRun::new(kind.clone(), 64 << 20)
        .swap_bytes(16 << 20)
        .name("unit-test-run")
        .capture_output()
        .run(Command::new("sh").args(["-c", "cat /proc/$$/cgroup; echo err >&2; exit 3"]))
        .expect("run");
    println!("{}", run.summary());
    assert_eq!(run.status.code(), Some(3));
    assert!(!run.timed_out);
    assert!(
        run.stdout_text().contains("tiermem-bench-unit-test-run"),
        "{}",
        run.stdout_text()
    );
    assert_eq!(run.stderr_text(), "err\n");
    assert_eq!(run.limit_bytes, 64 << 20);
    assert!(run.cgroup.max_usage_bytes > 0, "{:?}", run.cgroup);
    assert!(!dir.exists(), "cgroup directory left behind");
    assert_eq!(our_swaps(), before, "swap area left behind");
    // Not captured: nothing collected.
    let run = LimitedRun::new(kind, 64 << 20)
        .swap_bytes(16 << 20)
        .stdout(Stream::Null)
        .run_argv(&["echo", "to /dev/null"])
        .expect("run");
    assert!(run.status.success() && run.stdout.is_none() && run.stderr.is_none());
}

#[test]
fn limited_run_timeout_kills_everything_in_the_cgroup() {
    use std::os::unix::process::ExitStatusExt;
    let Some((_serial, kind)) = serial_run_kind() else {
        return;
    };
    let dir = run_cgroup_dir("unit-test-timeout");
    let t0 = Instant::now();
    // The background sleep holds the captured stdout open: the run only
    // returns because it is killed too.
    let run = LimitedRun::new(kind.clone(), 64 << 20)
        .swap_bytes(16 << 20)
        .name("unit-test-timeout")
        .capture_output()
        .timeout(std::time::Duration::from_millis(300))
        .run_argv(&["sh", "-c", "sleep 30 & sleep 30"])
        .expect("run");
    println!("{} after {:?}", run.summary(), t0.elapsed());
    assert!(run.timed_out);
    assert_eq!(run.status.signal(), Some(libc::SIGKILL));
    assert!(run.wall.as_secs_f64() >= 0.3, "{:?}", run.wall);
    assert!(t0.elapsed().as_secs() < 20, "{:?}", t0.elapsed());
    assert!(!dir.exists(), "cgroup directory left behind");
    // A program that exits and leaves a process behind: the straggler is
    // killed, so the captured pipe closes and the run returns.
    let t0 = Instant::now();
    let run = LimitedRun::new(kind, 64 << 20)
        .swap_bytes(16 << 20)
        .stdout(Stream::Capture)
        .run_argv(&["sh", "-c", "sleep 30 & echo started"])
        .expect("run");
    assert!(run.status.success() && !run.timed_out);
    assert_eq!(run.stdout_text(), "started\n");
    assert!(t0.elapsed().as_secs() < 20, "{:?}", t0.elapsed());
}

#[test]
fn limited_run_cleans_up_when_the_program_cannot_start() {
    let Some((_serial, kind)) = serial_run_kind() else {
        return;
    };
    let before = our_swaps();
    // A crashed run's cgroup: removed by the next run.
    let (root, _) = locate_memory_cgroup().unwrap();
    let stale = root.join(format!("{}{}-0", run::RUN_CGROUP_PREFIX, dead_pid()));
    let _ = remove_cgroup_dir(&stale);
    fs::create_dir(&stale).expect("mkdir stale run cgroup");
    let dir = run_cgroup_dir("unit-test-enoent");
    let err = LimitedRun::new(kind, 64 << 20)
        .swap_bytes(16 << 20)
        .name("unit-test-enoent")
        .run_argv(&["/nonexistent/tiermem-test-program"])
        .unwrap_err();
    match &err {
        KernelSwapError::Spawn { program, source } => {
            assert_eq!(program, "/nonexistent/tiermem-test-program");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected a spawn error, got {other}"),
    }
    assert!(!err.is_unavailable());
    assert!(!dir.exists(), "cgroup directory left behind");
    assert!(!stale.exists(), "stale run cgroup not removed");
    assert_eq!(our_swaps(), before, "swap area left behind");
}
