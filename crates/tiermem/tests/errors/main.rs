//! Bad input and failures: clear errors, never a hang, a crash or silent
//! data loss. Accesses that must fail with SIGBUS run in child processes.

#[path = "../common/mod.rs"]
mod common;

use common::{is_child, is_root, run_child, FailingStore, TmpMount};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::Ordering;
use tiermem::config::ConfigError;
use tiermem::{Config, Error, ErrorCode, FarStoreConfig, FaultPath, PageSize, Region};
use tiermem_sys::file::FileError;

const MIB: u64 = 1 << 20;

fn file_config(path: impl Into<std::path::PathBuf>) -> Config {
    let mut c = Config::new(4 * MIB, MIB);
    c.far = FarStoreConfig::File {
        path: path.into(),
        direct: false,
    };
    c
}

#[test]
fn zero_unaligned_and_tiny_sizes_are_rejected() {
    let cases: [(u64, u64, &str); 5] = [
        (0, 4096, "virt_bytes must not be zero"),
        (4 * MIB, 0, "near_bytes must not be zero"),
        (4 * MIB + 1, MIB, "not a multiple of the page size"),
        (4 * MIB, 100, "below the minimum"),
        (4 * MIB, 4096, "below the minimum"),
    ];
    for (virt, near, msg) in cases {
        let e = Region::new(Config::new(virt, near)).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(e.to_string().contains(msg), "{virt}/{near}: {e}");
    }
    let mut c = Config::new(3 * MIB, 2 * MIB);
    c.page_size = PageSize::Huge2M;
    assert!(matches!(
        Region::new(c).unwrap_err(),
        Error::Config(ConfigError::Unaligned { .. })
    ));
}

#[test]
fn far_file_in_missing_or_read_only_directory() {
    let e = Region::new(file_config("/nonexistent-tiermem-dir/far.bin")).unwrap_err();
    assert!(matches!(e, Error::File(FileError::NoDirectory { .. })), "{e:?}");
    assert!(e.to_string().contains("does not exist"), "{e}");
    // procfs refuses new files whoever we are.
    let e = Region::new(file_config("/proc/tiermem-far.bin")).unwrap_err();
    assert!(matches!(e, Error::File(FileError::NotWritable { .. })), "{e:?}");
    assert_eq!(e.code(), ErrorCode::Permission);
    // A read-only file system (root can write anywhere else).
    if let Some(ro) = TmpMount::new("ro", "ro,size=1m") {
        let e = Region::new(file_config(ro.path.join("far.bin"))).unwrap_err();
        assert!(matches!(e, Error::File(FileError::NotWritable { .. })), "{e:?}");
        assert!(e.to_string().contains("cannot be created"), "{e}");
    }
    // An existing file is never overwritten.
    let existing = std::env::temp_dir().join(format!("tiermem-exists-{}", std::process::id()));
    std::fs::write(&existing, b"precious").unwrap();
    let e = Region::new(file_config(&existing)).unwrap_err();
    assert!(matches!(e, Error::File(FileError::Exists { .. })), "{e:?}");
    assert_eq!(std::fs::read(&existing).unwrap(), b"precious");
    std::fs::remove_file(existing).unwrap();
}

/// Found by `tiermem stress` with fault injection: a page whose write-back
/// failed stayed write-protected (wp-fault) while published Dirty, and a
/// kernel-mode write into it (`read(2)` from a pipe) got EFAULT every time.
#[test]
fn kernel_write_into_a_page_whose_write_back_failed() {
    for fp in [FaultPath::InContext, FaultPath::HandlerThread] {
        let (store, faults) = FailingStore::new(4 * MIB);
        let mut c = Config::new(4 * MIB, 4 * MIB);
        c.fault_path = fp;
        let mut r = Region::with_store(c, Box::new(store)).unwrap();
        r.as_mut_slice::<u8>().fill(7);
        faults.writes.store(true, Ordering::Relaxed);
        assert!(r.evict_all().is_err());
        faults.writes.store(false, Ordering::Relaxed);
        let (mut rx, mut tx) = std::os::unix::net::UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut tx, &[9u8; 4096]).unwrap();
        let page = &mut r.as_mut_slice::<u8>()[8192..12288];
        rx.read_exact(page)
            .unwrap_or_else(|e| panic!("{fp:?}: read(2) into the page: {e}"));
        let w: &[u8] = r.as_mut_slice();
        assert!(w[8192..12288].iter().all(|&b| b == 9) && w[..8192].iter().all(|&b| b == 7));
    }
}

#[test]
fn huge_pages_with_a_pool_too_small() {
    let avail = tiermem_sys::hugetlb::pool(tiermem_sys::hugetlb::HugePageSize::Size2M)
        .map(|p| p.available())
        .unwrap_or(0);
    let near = (avail + 1).max(4) * 2 * MIB;
    let mut c = Config::new(near * 2, near);
    c.page_size = PageSize::Huge2M;
    let e = Region::new(c).unwrap_err();
    assert!(matches!(e, Error::HugePages { .. }), "{e:?}");
    assert_eq!(e.code(), ErrorCode::HugePages);
    let msg = e.to_string();
    assert!(
        msg.contains("nr_hugepages") && msg.contains(&format!("{avail} available")),
        "{msg}"
    );
}

#[test]
fn failed_write_back_keeps_the_data_and_reports() {
    let (store, faults) = FailingStore::new(4 * MIB);
    let mut r = Region::with_store(Config::new(4 * MIB, 4 * MIB), Box::new(store)).unwrap();
    r.as_mut_slice::<u64>()
        .iter_mut()
        .enumerate()
        .for_each(|(i, w)| *w = i as u64 * 3);
    faults.writes.store(true, Ordering::Relaxed);
    let e = r.evict_all().unwrap_err();
    assert_eq!(e.code(), ErrorCode::NoSpace, "{e}");
    // A full store is named in the error and the error log.
    for msg in [e.to_string(), r.errors().last().unwrap().message.clone()] {
        assert!(msg.contains("far store is full: failing memory store"), "{msg}");
    }
    assert!(!r.errors().is_empty());
    assert!(
        r.errors()[0].message.contains("No space left"),
        "{:?}",
        r.errors()
    );
    assert_eq!(r.page_census().dirty, 1024, "nothing dropped");
    // Writes still work on the pages whose eviction failed (they were
    // write-protected during the attempt).
    r.as_mut_slice::<u64>()[5] = 5;
    faults.writes.store(false, Ordering::Relaxed);
    assert_eq!(r.evict_all().unwrap(), 1024);
    let w: &mut [u64] = r.as_mut_slice();
    assert_eq!(w[5], 5);
    assert!(w.iter().enumerate().all(|(i, &x)| i == 5 || x == i as u64 * 3));
}

/// Child: a far-store read fails while a page is faulted in: the access
/// must end the process with SIGBUS (not hang, not read zeros).
#[test]
fn child_read_error_raises_sigbus() {
    if !is_child("child_read_error_raises_sigbus") {
        return;
    }
    let (store, faults) = FailingStore::new(4 * MIB);
    let mut r = Region::with_store(Config::new(4 * MIB, MIB), Box::new(store)).unwrap();
    let w: &mut [u64] = r.as_mut_slice();
    w.iter_mut().for_each(|x| *x = 1);
    faults.reads.store(true, Ordering::Relaxed);
    eprintln!("reading an evicted page");
    let v = std::hint::black_box(w[0]);
    eprintln!("BUG: read {v} instead of failing");
}

#[test]
fn read_error_raises_sigbus() {
    let (status, err) = run_child("child_read_error_raises_sigbus");
    assert_eq!(
        status.signal(),
        Some(libc::SIGBUS),
        "status {status:?}, stderr:\n{err}"
    );
    assert!(
        err.contains("reading an evicted page") && !err.contains("BUG"),
        "{err}"
    );
}

/// Child: the far store is full while a fault needs room: SIGBUS.
#[test]
fn child_store_full_during_fault_raises_sigbus() {
    if !is_child("child_store_full_during_fault_raises_sigbus") {
        return;
    }
    // Test only: a signal handler may not print; this one runs once, in a
    // process about to die.
    tiermem::set_last_words(|| eprintln!("last words: ran"));
    // As in a C program: no handler of Rust's stack-overflow detection
    // for tiermem to chain to (with one, the program might survive the
    // signal, and no last words are said).
    // SAFETY: restores the default action of SIGBUS in this child process.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
    let (store, faults) = FailingStore::new(4 * MIB);
    let mut c = Config::new(4 * MIB, MIB);
    c.fault_path = test_path();
    let mut r = Region::with_store(c, Box::new(store)).unwrap();
    let w: &mut [u64] = r.as_mut_slice();
    faults.writes.store(true, Ordering::Relaxed);
    eprintln!("filling past the budget");
    for (i, x) in w.iter_mut().enumerate() {
        *x = i as u64;
    }
    eprintln!("BUG: wrote past a full far store");
}

/// The fault path a child runs (`TIERMEM_TEST_PATH`, default in-context).
fn test_path() -> FaultPath {
    let name = std::env::var("TIERMEM_TEST_PATH").unwrap_or_default();
    *FaultPath::ALL
        .iter()
        .find(|f| f.name() == name)
        .unwrap_or(&FaultPath::InContext)
}

/// Runs child test `name` on each fault path (`env` besides) and returns
/// the stderr of each, checked to end by SIGBUS.
fn sigbus_per_fault_path(name: &str, env: &[(&str, String)]) -> Vec<String> {
    FaultPath::ALL
        .iter()
        .map(|fp| {
            let mut env = env.to_vec();
            env.push(("TIERMEM_TEST_PATH", fp.name().to_owned()));
            let run = common::run_child_within(name, &env, std::time::Duration::from_secs(120));
            let err = run.stderr;
            assert_eq!(
                run.status.and_then(|s| s.signal()),
                Some(libc::SIGBUS),
                "{fp:?}: {:?} (None: hung), stderr:\n{err}",
                run.status
            );
            assert!(!err.contains("BUG"), "{fp:?}: {err}");
            err
        })
        .collect()
}

/// The one line a full far store gets before the fault fails, naming the
/// store and what to do (issue 30 item 7: the process died by SIGBUS with
/// nothing on stderr). Returns it.
fn the_full_store_line<'a>(err: &'a str, store: &str) -> &'a str {
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("far store is full")).collect();
    assert_eq!(lines.len(), 1, "one line, not {}:\n{err}", lines.len());
    let l = lines[0];
    for says in [store, "SIGBUS", "--far", "--near", "TIERMEM_FAR_FILE"] {
        assert!(l.contains(says), "the line names {says:?}: {l}");
    }
    l
}

#[test]
fn store_full_during_fault_raises_sigbus() {
    for err in sigbus_per_fault_path("child_store_full_during_fault_raises_sigbus", &[]) {
        the_full_store_line(&err, "failing memory store");
        // Registered last words run once, before the default action.
        assert_eq!(err.matches("last words: ran").count(), 1, "{err}");
    }
}

#[test]
fn child_full_file_store_during_fault() {
    if !is_child("child_full_file_store_during_fault") {
        return;
    }
    let dir = std::env::var("TIERMEM_TEST_DIR").unwrap();
    let mut c = file_config(dir);
    c.virt_bytes = 8 * MIB;
    c.fault_path = test_path();
    let mut r = Region::new(c).unwrap();
    eprintln!("filling past the budget");
    for (i, x) in r.as_mut_slice::<u64>().iter_mut().enumerate() {
        *x = i as u64;
    }
    eprintln!("BUG: wrote past a full far store");
}

/// A real full file system under a file store, on both fault paths: the
/// line names the directory, the file system's size and free space.
#[test]
fn a_full_file_store_is_named_before_sigbus() {
    let Some(small) = TmpMount::new("fullfault", "size=512k") else {
        return;
    };
    let dir = small.path.display().to_string();
    let env = [("TIERMEM_TEST_DIR", dir.clone())];
    for err in sigbus_per_fault_path("child_full_file_store_during_fault", &env) {
        let l = the_full_store_line(&err, &format!("an unnamed file in {dir}"));
        assert!(l.contains("a file system of 512.0 KiB, 0 B free"), "{l}");
    }
}

/// A file far store in a directory whose file system is full already is
/// refused when the region is created, with an error naming it; a region
/// that never evicts does not need the room.
#[test]
fn a_full_directory_is_refused_at_creation() {
    let Some(small) = TmpMount::new("fulldir", "size=256k") else {
        return;
    };
    let _ = std::fs::write(small.path.join("filler"), vec![1u8; 256 << 10]);
    let e = Region::new(file_config(&small.path)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NoSpace, "{e}");
    let msg = e.to_string();
    for says in [
        small.path.to_str().unwrap(),
        "0 B free",
        "a file system of 256.0 KiB",
    ] {
        assert!(msg.contains(says), "{says:?} in: {msg}");
    }
    let mut c = file_config(&small.path);
    c.near_bytes = c.virt_bytes;
    Region::new(c).expect("a region that never evicts needs no room");
}

/// A real full disk: a 256 KiB tmpfs under a file store.
#[test]
fn full_disk_is_reported_and_loses_nothing() {
    let Some(small) = TmpMount::new("full", "size=256k") else {
        return;
    };
    let mut r = Region::new(file_config(small.path.join("far.bin"))).unwrap();
    // 1 MiB budget = the whole of what we write: no eviction at fault time.
    r.as_mut_slice::<u64>()[..(MIB / 8) as usize]
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = !(i as u64));
    let e = r.evict_all().unwrap_err();
    assert_eq!(e.code(), ErrorCode::NoSpace, "{e}");
    // The error and the error log name the store and its space.
    let far = small.path.join("far.bin");
    for msg in [e.to_string(), r.errors().last().unwrap().message.clone()] {
        for says in ["far store is full", far.to_str().unwrap(), "0 B free"] {
            assert!(msg.contains(says), "{says:?} in: {msg}");
        }
    }
    let w: &mut [u64] = r.as_mut_slice();
    assert!(w[..(MIB / 8) as usize]
        .iter()
        .enumerate()
        .all(|(i, &x)| x == !(i as u64)));
}

/// Kernel-mode accesses: a read(2) into a page that is not resident works
/// on both fault paths (in-context: trapped and pinned; handler-thread:
/// served by the handler). With the trap off, the in-context path fails
/// with EFAULT (documented), in a child process (the trap, once loaded,
/// stays for the whole process).
#[test]
fn kernel_mode_access_per_design() {
    if is_child("kernel_mode_access_per_design") {
        let mut c = Config::new(MIB, MIB);
        c.kernel_access = tiermem::KernelAccess::Off;
        let mut r = Region::new(c).unwrap();
        let mut zero = std::fs::File::open("/dev/zero").unwrap();
        let buf: &mut [u8] = r.as_mut_slice();
        assert_eq!(
            zero.read(&mut buf[..8192]).unwrap_err().raw_os_error(),
            Some(libc::EFAULT)
        );
        // After a user-mode touch the page is resident and syscalls work.
        buf[0] = 1;
        assert_eq!(zero.read(&mut buf[..4096]).unwrap(), 4096);
        return;
    }
    for fp in [FaultPath::InContext, FaultPath::HandlerThread] {
        let mut c = Config::new(MIB, MIB);
        c.fault_path = fp;
        let mut r = Region::new(c).unwrap();
        let mut zero = std::fs::File::open("/dev/zero").unwrap();
        let buf: &mut [u8] = r.as_mut_slice();
        assert_eq!(zero.read(&mut buf[..8192]).unwrap(), 8192, "{}", fp.name());
    }
    let (status, out) = run_child("kernel_mode_access_per_design");
    assert!(status.success(), "{out}");
}

/// Handler-thread design: a read error reaches a kernel-mode access as
/// EFAULT, and the error is reported through the API, in-process, once:
/// also when the fill recycles a frame (`install = move`), whose failed
/// read must not be tried again by the copy path.
#[test]
fn read_error_is_reported_through_the_api() {
    for install in [tiermem::InstallMethod::Copy, tiermem::InstallMethod::Move] {
        let (store, faults) = FailingStore::new(4 * MIB);
        let mut c = Config::new(4 * MIB, MIB);
        c.fault_path = FaultPath::HandlerThread;
        c.install = install;
        let mut r = Region::with_store(c, Box::new(store)).unwrap();
        r.as_mut_slice::<u8>().fill(9);
        let recycled = r.stats().recycled_installs;
        assert_eq!(
            recycled > 0,
            install == tiermem::InstallMethod::Move,
            "{recycled}"
        );
        faults.reads.store(true, Ordering::Relaxed);
        let mut zero = std::fs::File::open("/dev/zero").unwrap();
        let e = zero.read(&mut r.as_mut_slice::<u8>()[..4096]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        r.settle();
        let errs = r.errors();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].op, "read");
        assert_eq!(errs[0].errno, libc::EIO);
        assert_eq!(r.stats().io_errors, 1);
        assert_eq!(r.page_census().poisoned, 1, "{:?}", r.page_census());
        // Once the store works again the page can be recovered intact.
        faults.reads.store(false, Ordering::Relaxed);
        assert_eq!(r.clear_poison(), 1);
        assert!(r.as_mut_slice::<u8>()[..4096].iter().all(|&b| b == 9));
    }
    let _ = is_root();
}

/// The pids controller's directory for a new cgroup (v1 hierarchy or v2
/// with the controller enabled), if this machine has one we may use.
fn pids_cgroup_root() -> Option<std::path::PathBuf> {
    let v1 = std::path::Path::new("/sys/fs/cgroup/pids");
    if v1.join("cgroup.procs").exists() {
        return Some(v1.to_owned());
    }
    let v2 = std::path::Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).ok()?;
    if !controllers.split_whitespace().any(|c| c == "pids") {
        return None;
    }
    let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+pids");
    Some(v2.to_owned())
}

#[test]
fn child_thread_limit_is_a_resource_error() {
    const NAME: &str = "child_thread_limit_is_a_resource_error";
    if !is_child(NAME) {
        return;
    }
    let dir = std::path::PathBuf::from(std::env::var("TIERMEM_TEST_CGROUP").unwrap());
    // Exactly the threads we have: the next one is refused (EAGAIN).
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    std::fs::write(dir.join("pids.max"), threads.to_string()).unwrap();
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).unwrap();
    for fp in FaultPath::ALL {
        let mut c = Config::new(4 * MIB, MIB);
        c.fault_path = *fp;
        c.movers = 1;
        let e = Region::new(c).expect_err("no thread can start");
        assert_eq!(e.code(), ErrorCode::OutOfMemory, "{fp:?}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("task limit") && msg.contains("pids.max"),
            "{fp:?}: {msg}"
        );
    }
    eprintln!("refused as expected");
}

/// Issue 18.6: thread creation refused at a pids cgroup limit is
/// `ErrorCode::OutOfMemory` (`TM_ENOMEM`) naming the limit, not an
/// internal error. Root only (makes a cgroup and removes it).
#[test]
fn thread_limit_is_a_resource_error() {
    let Some(root) = pids_cgroup_root().filter(|_| is_root()) else {
        eprintln!("skipped: needs root and a pids cgroup controller");
        return;
    };
    let dir = root.join(format!("tiermem-test-{}", std::process::id()));
    if std::fs::create_dir(&dir).is_err() {
        eprintln!("skipped: cannot create {}", dir.display());
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_thread_limit_is_a_resource_error",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TIERMEM_CHILD", "child_thread_limit_is_a_resource_error")
        .env("TIERMEM_TEST_CGROUP", &dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("refused as expected"),
        "{err}"
    );
    assert!(!dir.exists(), "the test cgroup was left behind");
}

/// Child: passes of sequential writes over a store whose writes fail one
/// time in ten (an EIO that goes away when tried again). A sequential
/// eviction batch is one run written in one call, so a failure fails the
/// whole batch: the fault retries the eviction instead of dying of SIGBUS.
#[test]
fn child_transient_write_errors_are_retried() {
    if !is_child("child_transient_write_errors_are_retried") {
        return;
    }
    let mut c = Config::new(4 * MIB, MIB);
    c.fault_path = test_path();
    c.fault_inject = Some("write:0.1,seed:11".into());
    let mut r = Region::new(c).unwrap();
    for pass in 0..4u64 {
        let w: &mut [u64] = r.as_mut_slice();
        for (i, x) in w.iter_mut().enumerate() {
            *x = i as u64 ^ (pass << 40);
        }
    }
    let w: &[u64] = r.as_mut_slice();
    let wrong = w
        .iter()
        .enumerate()
        .filter(|&(i, &x)| x != i as u64 ^ (3 << 40))
        .count();
    let failed = r.errors().iter().filter(|e| e.message.contains("write")).count();
    eprintln!("transient write errors: {failed} failed writes, {wrong} wrong words");
}

#[test]
fn transient_write_errors_are_retried() {
    for fp in FaultPath::ALL {
        let env = [("TIERMEM_TEST_PATH", fp.name().to_owned())];
        let run = common::run_child_within(
            "child_transient_write_errors_are_retried",
            &env,
            std::time::Duration::from_secs(120),
        );
        let line = run
            .stderr
            .lines()
            .find(|l| l.starts_with("transient write errors:"));
        assert!(
            run.status.is_some_and(|s| s.success()) && line.is_some_and(|l| l.ends_with(" 0 wrong words")),
            "{fp:?}: {:?}\n{}",
            run.status,
            run.stderr
        );
        let failed: usize = line.unwrap().split(' ').nth(3).unwrap().parse().unwrap();
        assert!(
            failed > 0,
            "{fp:?}: the injection failed no write: {}",
            line.unwrap()
        );
    }
}
