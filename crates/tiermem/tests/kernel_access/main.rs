//! System calls that read or write region memory in kernel mode: `read`,
//! `pread`, `fread` (glibc's internal `__read`), `recv`, `getrandom` into
//! region pages and `write`/`send` from them, in every page state
//! (untouched, resident clean, resident dirty, evicted), on every fault
//! path x dirty tracking x far store. The program gets its data, never
//! `EFAULT`, a short count or zeros, and what the kernel wrote into a page
//! survives its eviction.

#[path = "../common/mod.rs"]
mod common;

use common::{config, mix, variants};
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use tiermem::{Config, DirtyTracking, FaultPath, Region};

const PAGE: usize = 4096;
const PAGES: usize = 256;
const NEAR: usize = 16;

/// A file of `len` bytes of `mix` words, from word `seed` on.
fn data_file(len: usize, seed: u64) -> std::fs::File {
    let mut f = tempfile();
    let words: Vec<u8> = (0..len / 8)
        .flat_map(|i| mix(seed + i as u64).to_ne_bytes())
        .collect();
    f.write_all(&words).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f
}

fn tempfile() -> std::fs::File {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "tiermem-kaccess-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Puts page `p` of `r` into `state` ("untouched", "zero-read", "clean",
/// "dirty", "evicted"), with the page's words set to `mix(p * 512 + k)` unless
/// untouched.
fn prepare(r: &mut Region, p: usize, state: &str) {
    let w: &mut [u64] = r.as_mut_slice();
    if state == "untouched" {
        return;
    }
    if state == "zero-read" {
        // Only read: zero-filled, resident, clean (write-protected for
        // dirty tracking). Issue 18.4: read(2) into it returned EFAULT.
        assert_eq!(std::hint::black_box(w[p * PAGE / 8]), 0);
        return;
    }
    for k in 0..PAGE / 8 {
        w[p * PAGE / 8 + k] = mix((p * 512 + k) as u64);
    }
    match state {
        "dirty" => {}
        "clean" => {
            // Written, evicted, read back: resident and clean.
            r.evict_all().unwrap();
            let w: &[u64] = r.as_mut_slice();
            assert_eq!(w[p * PAGE / 8], mix((p * 512) as u64));
        }
        "evicted" => {
            r.evict_all().unwrap();
        }
        _ => unreachable!(),
    }
}

const STATES: [&str; 5] = ["untouched", "zero-read", "clean", "dirty", "evicted"];

fn region(fp: FaultPath, dt: DirtyTracking, store: &str) -> Region {
    Region::new(config((PAGES * PAGE) as u64, (NEAR * PAGE) as u64, fp, dt, store)).unwrap()
}

/// A region of the variant with every page written and then evicted.
fn evicted_region(fp: FaultPath, dt: DirtyTracking, store: &str) -> Region {
    let mut r = region(fp, dt, store);
    for p in 0..PAGES {
        prepare(&mut r, p, "dirty");
    }
    r.evict_all().unwrap();
    r
}

fn check_page(r: &mut Region, p: usize, seed: u64, what: &str) {
    let w: &[u64] = r.as_mut_slice();
    for k in 0..PAGE / 8 {
        assert_eq!(w[p * PAGE / 8 + k], mix(seed + k as u64), "{what}: word {k}");
    }
}

#[test]
fn read_into_every_page_state() {
    for (fp, dt, store) in variants() {
        for (n, state) in STATES.iter().enumerate() {
            let what = format!("{} {} {store} read into {state}", fp.name(), dt.name());
            let mut r = region(fp, dt, store);
            let p = 10 + n;
            prepare(&mut r, p, state);
            let f = data_file(PAGE, 7000);
            let buf = r.as_ptr() as usize + p * PAGE;
            // SAFETY: reading into a page of our own region.
            let got = unsafe { libc::read(f.as_raw_fd(), buf as *mut libc::c_void, PAGE) };
            assert_eq!(got, PAGE as isize, "{what}: {}", std::io::Error::last_os_error());
            check_page(&mut r, p, 7000, &what);
            // What the kernel wrote survives eviction.
            r.evict_all().unwrap();
            check_page(&mut r, p, 7000, &format!("{what}, after eviction"));
        }
    }
}

#[test]
fn pread_fread_recv_getrandom() {
    for (fp, dt, store) in variants() {
        let what = format!("{} {} {store}", fp.name(), dt.name());
        let mut r = evicted_region(fp, dt, store);
        let base = r.as_ptr() as usize;
        // pread at an offset, into two evicted pages.
        let f = data_file(4 * PAGE, 500);
        // SAFETY: into our region.
        let got = unsafe {
            libc::pread(
                f.as_raw_fd(),
                (base + 20 * PAGE) as *mut libc::c_void,
                2 * PAGE,
                PAGE as i64,
            )
        };
        assert_eq!(
            got,
            2 * PAGE as isize,
            "{what} pread: {}",
            std::io::Error::last_os_error()
        );
        check_page(&mut r, 20, 500 + 512, &what);
        check_page(&mut r, 21, 500 + 1024, &what);
        // fread: glibc reads through its internal __read.
        r.evict_all().unwrap();
        let f = data_file(PAGE, 900);
        // SAFETY: a stdio stream on a dup of our file; fread into our region.
        unsafe {
            let fp = libc::fdopen(libc::dup(f.as_raw_fd()), c"r".as_ptr());
            assert!(!fp.is_null());
            let n = libc::fread((base + 30 * PAGE) as *mut libc::c_void, 1, PAGE, fp);
            libc::fclose(fp);
            assert_eq!(n, PAGE, "{what} fread");
        }
        check_page(&mut r, 30, 900, &what);
        // recv from a socket pair.
        r.evict_all().unwrap();
        let mut sv = [0; 2];
        // SAFETY: a socket pair of our own.
        let made = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) };
        assert_eq!(made, 0);
        let words: Vec<u8> = (0..PAGE / 8)
            .flat_map(|i| mix(1300 + i as u64).to_ne_bytes())
            .collect();
        // SAFETY: plain buffers and our sockets.
        unsafe {
            assert_eq!(libc::send(sv[0], words.as_ptr().cast(), PAGE, 0), PAGE as isize);
            let n = libc::recv(
                sv[1],
                (base + 40 * PAGE) as *mut libc::c_void,
                PAGE,
                libc::MSG_WAITALL,
            );
            assert_eq!(
                n,
                PAGE as isize,
                "{what} recv: {}",
                std::io::Error::last_os_error()
            );
            libc::close(sv[0]);
            libc::close(sv[1]);
        }
        check_page(&mut r, 40, 1300, &what);
        // getrandom into an evicted page: no EFAULT.
        r.evict_all().unwrap();
        // SAFETY: into our region.
        let n = unsafe { libc::getrandom((base + 50 * PAGE) as *mut libc::c_void, PAGE, 0) };
        assert_eq!(n, PAGE as isize, "{what} getrandom");
    }
}

#[test]
fn write_and_send_from_evicted_pages() {
    for (fp, dt, store) in variants() {
        let what = format!("{} {} {store}", fp.name(), dt.name());
        let r = evicted_region(fp, dt, store);
        let base = r.as_ptr() as usize;
        let f = tempfile();
        // 8 evicted pages in one write(2).
        // SAFETY: from our region into our file.
        let n = unsafe { libc::write(f.as_raw_fd(), (base + 60 * PAGE) as *const libc::c_void, 8 * PAGE) };
        assert_eq!(
            n,
            8 * PAGE as isize,
            "{what} write: {}",
            std::io::Error::last_os_error()
        );
        let back = std::fs::read(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
        for p in 0..8 {
            for k in 0..PAGE / 8 {
                let at = (p * PAGE) + k * 8;
                let v = u64::from_ne_bytes(back[at..at + 8].try_into().unwrap());
                assert_eq!(
                    v,
                    mix(((60 + p) * 512 + k) as u64),
                    "{what} written page {p} word {k}"
                );
            }
        }
    }
}

/// A read larger than the region's pin allowance (half the budget) from a
/// regular file still returns everything, in pieces.
#[test]
fn large_read_from_a_file_is_whole() {
    for &fp in FaultPath::ALL {
        let mut c = Config::new((PAGES * PAGE) as u64, (NEAR * PAGE) as u64);
        c.fault_path = fp;
        let mut r = Region::new(c).unwrap();
        let len = 100 * PAGE;
        let f = data_file(len, 4242);
        // SAFETY: into our region.
        let n = unsafe { libc::read(f.as_raw_fd(), r.as_ptr().cast(), len) };
        assert_eq!(
            n,
            len as isize,
            "{}: {}",
            fp.name(),
            std::io::Error::last_os_error()
        );
        let w: &mut [u64] = r.as_mut_slice();
        for (i, x) in w[..len / 8].iter().enumerate() {
            assert_eq!(*x, mix(4242 + i as u64), "{} word {i}", fp.name());
        }
    }
}

/// With the trap off, the in-context path keeps its documented behaviour:
/// a read into a page that is not resident fails with EFAULT (and the
/// data already there is untouched).
#[test]
fn trap_off_gives_efault_as_documented() {
    if common::is_child("trap_off_gives_efault_as_documented") {
        let mut c = Config::new((PAGES * PAGE) as u64, (NEAR * PAGE) as u64);
        c.kernel_access = tiermem::KernelAccess::Off;
        let r = Region::new(c).unwrap();
        let f = data_file(PAGE, 1);
        // SAFETY: into our region.
        let n = unsafe { libc::read(f.as_raw_fd(), r.as_ptr().cast(), PAGE) };
        let e = std::io::Error::last_os_error().raw_os_error();
        std::process::exit(if n == -1 && e == Some(libc::EFAULT) { 0 } else { 1 });
    }
    // A fresh process: the trap, once on, stays on for the whole process.
    let (status, out) = common::run_child("trap_off_gives_efault_as_documented");
    assert!(status.success(), "{out}");
}

/// `io_uring_setup(1, params)`'s errno (0: a ring, closed again), made
/// through the C library's `syscall()` or, `raw`, with an instruction of
/// this program's own, as liburing makes it.
fn io_uring_setup_errno(raw: bool) -> i32 {
    let mut params = [0u8; 120];
    let r: i64 = if raw {
        let r: i64;
        // SAFETY: io_uring_setup writes at most its 120-byte params, which
        // `params` holds; rcx and r11 are clobbered by `syscall`.
        unsafe {
            std::arch::asm!("syscall", inlateout("rax") libc::SYS_io_uring_setup => r,
                in("rdi") 1i64, in("rsi") params.as_mut_ptr(), out("rcx") _, out("r11") _,
                options(nostack));
        }
        r
    } else {
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) };
        if r < 0 {
            -(std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64)
        } else {
            r
        }
    };
    if r >= 0 {
        // SAFETY: the ring's descriptor, ours.
        unsafe { libc::close(r as i32) };
        return 0;
    }
    -r as i32
}

/// io_uring is refused once a tiered range exists, made either way, with
/// the kernel-access trap on and off (then a filter refuses it alone);
/// before, it works (where the kernel allows it at all).
#[test]
fn io_uring_is_refused_once_memory_is_tiered() {
    const NAME: &str = "io_uring_is_refused_once_memory_is_tiered";
    if common::is_child(NAME) {
        let before = io_uring_setup_errno(false);
        if before != 0 {
            eprintln!("skipped: io_uring_setup fails here before any region: errno {before}");
            std::process::exit(0);
        }
        let mut c = Config::new((PAGES * PAGE) as u64, (NEAR * PAGE) as u64);
        if std::env::var("URING_TRAP").as_deref() == Ok("off") {
            c.kernel_access = tiermem::KernelAccess::Off;
        }
        let _r = Region::new(c).unwrap();
        let after = [io_uring_setup_errno(false), io_uring_setup_errno(true)];
        eprintln!("after: {after:?}");
        std::process::exit(if after == [libc::ENOSYS; 2] { 0 } else { 1 });
    }
    for trap in ["on", "off"] {
        let run = common::run_child_within(
            NAME,
            &[("URING_TRAP", trap.into())],
            std::time::Duration::from_secs(60),
        );
        assert!(
            run.status.is_some_and(|s| s.success()),
            "trap {trap}: {}",
            run.stderr
        );
    }
}

/// Reads `len` bytes at `addr` of process `pid` through `/proc/PID/mem`.
fn proc_mem_read(pid: u32, addr: usize, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{pid}/mem"))?;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, addr as u64)?;
    Ok(buf)
}

/// Issue 20.4: `/proc/PID/mem` (how gdb reads memory; `ptrace(PEEKDATA)`
/// takes the same kernel path, `access_remote_vm`) cannot have a missing
/// page brought in by a userfaultfd on either path: the kernel faults
/// without `FAULT_FLAG_ALLOW_RETRY` there, and `handle_userfault` then
/// answers `VM_FAULT_SIGBUS`, so the read fails with EIO. `tiermem::touch`
/// (`tm_touch`) brings the range in first, without a fault; then it reads.
#[test]
fn proc_mem_reads_evicted_pages_after_touch() {
    for &fp in FaultPath::ALL {
        let mut r = evicted_region(fp, DirtyTracking::WpFault, "memory");
        let p = 3;
        let addr = r.as_ptr() as usize + p * PAGE;
        let pid = std::process::id();
        let e = proc_mem_read(pid, addr, 8).expect_err("an evicted page is not served");
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{}: {e}", fp.name());
        // Another process's process_vm_readv (MPI libraries' single-copy
        // path) pins with retry allowed: the handler thread serves it; the
        // in-context path has no thread to, and the seccomp trap only sees
        // this process's own calls.
        let mut v = 0u64;
        // SAFETY: test code; the child only reads into its own copy of `v`
        // and leaves with _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let local = libc::iovec {
                iov_base: (&mut v as *mut u64).cast(),
                iov_len: 8,
            };
            let remote = libc::iovec {
                iov_base: addr as *mut libc::c_void,
                iov_len: 8,
            };
            // SAFETY: reads into our own `v`; the remote range is the parent's.
            let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
            let ok = n == 8 && v == mix((p * 512) as u64);
            // SAFETY: leaving the forked child without the parent's atexit.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        let served = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        assert_eq!(
            served,
            fp == FaultPath::HandlerThread,
            "{}: process_vm_readv from another process",
            fp.name()
        );
        let resident = tiermem::touch(addr, PAGE).unwrap();
        assert_eq!(resident, 1, "{}", fp.name());
        let got = proc_mem_read(pid, addr, 8).unwrap();
        assert_eq!(
            u64::from_ne_bytes(got.try_into().unwrap()),
            mix((p * 512) as u64),
            "{}",
            fp.name()
        );
        check_page(&mut r, p, (p * 512) as u64, "after touch");
    }
}

/// `evict_all` while another thread's `recv` into the region is blocked.
/// The call once held its page pinned while it blocked, and `evict_all`
/// spun forever on it (then: waited a second and left it resident). A call
/// on a socket now holds nothing while it blocks (its data goes through a
/// bounce buffer): every page is evicted at once, and the `recv` still
/// gets its data into the region.
#[test]
fn evict_all_returns_while_a_blocked_recv_holds_a_page() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DONE: AtomicBool = AtomicBool::new(false);
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(60));
        if !DONE.load(Ordering::SeqCst) {
            eprintln!("evict_all_returns_while_a_blocked_recv_holds_a_page: hangs (60 s)");
            std::process::exit(1);
        }
    });
    let mut r = evicted_region(FaultPath::InContext, DirtyTracking::WpFault, "memory");
    let base = r.as_ptr() as usize;
    let mut sv = [0; 2];
    // SAFETY: a socket pair of our own.
    let made = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) };
    assert_eq!(made, 0);
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        tid_tx.send(tiermem_sys_gettid()).unwrap();
        // SAFETY: into page 40 of the region, which outlives the thread.
        unsafe {
            libc::recv(
                sv[1],
                (base + 40 * PAGE) as *mut libc::c_void,
                PAGE,
                libc::MSG_WAITALL,
            )
        }
    });
    // Wait until the reader blocks in recvfrom.
    let tid = tid_rx.recv().unwrap();
    let blocked = || {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
            .is_ok_and(|s| s.split_whitespace().next() == Some(&libc::SYS_recvfrom.to_string()))
    };
    let t = std::time::Instant::now();
    while !blocked() {
        assert!(t.elapsed().as_secs() < 30, "the reader never blocked in recv");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let t = std::time::Instant::now();
    r.evict_all().unwrap();
    let took = t.elapsed();
    let c = r.page_census();
    assert_eq!(c.clean + c.dirty, 0, "a blocked recv kept pages resident: {c:?}");
    assert!(took.as_secs() < 10, "evict_all took {took:?}");
    let words: Vec<u8> = (0..PAGE / 8)
        .flat_map(|i| mix(7000 + i as u64).to_ne_bytes())
        .collect();
    // SAFETY: a plain buffer and our socket.
    let sent = unsafe { libc::send(sv[0], words.as_ptr().cast(), PAGE, 0) };
    assert_eq!(sent, PAGE as isize);
    assert_eq!(reader.join().unwrap(), PAGE as isize);
    check_page(&mut r, 40, 7000, "recv after evict_all");
    // SAFETY: our sockets.
    unsafe {
        libc::close(sv[0]);
        libc::close(sv[1]);
    }
    DONE.store(true, Ordering::SeqCst);
}

fn tiermem_sys_gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Calls that take small structures or paths (`poll`'s array, `select`'s
/// sets, `nanosleep`'s times, `wait4`'s status, `pipe2`'s descriptors,
/// `fstatat`'s path and result, `futex`'s word), each with every pointer
/// argument in a page evicted just before: the call succeeds, reads what
/// the program wrote and its results reach the program (the corpus's
/// python-mp got `EFAULT` from `poll` on a pool thread's array).
#[test]
fn calls_with_structures_and_paths_in_evicted_pages() {
    for (fp, dt, store) in variants() {
        let what = format!("{} {} {store}", fp.name(), dt.name());
        let r = evicted_region(fp, dt, store);
        let base = r.as_ptr() as usize;
        let at = |p: usize| base + p * PAGE;
        // SAFETY: every pointer is into our region, at the start of a page
        // of its own (the path across a boundary: 5 bytes before one),
        // large enough for the structure; the child only exits.
        unsafe {
            // pipe2 writes two descriptors.
            let fds = at(40) as *mut [libc::c_int; 2];
            r.evict_all().unwrap();
            assert_eq!(
                libc::pipe2(fds.cast(), 0),
                0,
                "{what} pipe2: {}",
                std::io::Error::last_os_error()
            );
            let [rd, wr] = *fds;
            assert!(rd > 2 && wr > 2 && rd != wr, "{what}: pipe2 gave {rd} {wr}");
            assert_eq!(libc::write(wr, c"x".as_ptr().cast(), 1), 1);
            // poll reads the array and writes revents at its end.
            let pfd = at(41) as *mut libc::pollfd;
            *pfd = libc::pollfd {
                fd: rd,
                events: libc::POLLIN,
                revents: 0,
            };
            r.evict_all().unwrap();
            assert_eq!(
                libc::poll(pfd, 1, 1000),
                1,
                "{what} poll: {}",
                std::io::Error::last_os_error()
            );
            assert_eq!(
                (*pfd).revents & libc::POLLIN,
                libc::POLLIN,
                "{what}: poll's revents"
            );
            // select reads and rewrites its set; the timeout is updated.
            let set = at(42) as *mut libc::fd_set;
            let tv = at(43) as *mut libc::timeval;
            libc::FD_ZERO(set);
            libc::FD_SET(rd, set);
            *tv = libc::timeval {
                tv_sec: 1,
                tv_usec: 0,
            };
            r.evict_all().unwrap();
            let n = libc::select(rd + 1, set, std::ptr::null_mut(), std::ptr::null_mut(), tv);
            assert_eq!(n, 1, "{what} select: {}", std::io::Error::last_os_error());
            assert!(libc::FD_ISSET(rd, set), "{what}: select's set");
            // nanosleep reads its time.
            let ts = at(44) as *mut libc::timespec;
            *ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1000,
            };
            r.evict_all().unwrap();
            assert_eq!(
                libc::nanosleep(ts, ts.add(1)),
                0,
                "{what} nanosleep: {}",
                std::io::Error::last_os_error()
            );
            // fstatat: the path and the result in evicted pages.
            let path = at(45) as *mut u8;
            let name = b"/proc/self/exe\0";
            std::ptr::copy_nonoverlapping(name.as_ptr(), path, name.len());
            let st = at(46) as *mut libc::stat;
            (*st).st_size = -1;
            r.evict_all().unwrap();
            assert_eq!(
                libc::stat(path.cast(), st),
                0,
                "{what} stat: {}",
                std::io::Error::last_os_error()
            );
            assert!((*st).st_size > 0, "{what}: stat's result");
            // A path across a page boundary.
            let split = (at(48) - 5) as *mut u8;
            std::ptr::copy_nonoverlapping(name.as_ptr(), split, name.len());
            r.evict_all().unwrap();
            let fd = libc::open(split.cast(), libc::O_RDONLY | libc::O_CLOEXEC);
            assert!(fd >= 0, "{what} open: {}", std::io::Error::last_os_error());
            libc::close(fd);
            // wait4 writes the child's status.
            let status = at(49) as *mut libc::c_int;
            *status = -1;
            let child = libc::fork();
            if child == 0 {
                libc::_exit(7);
            }
            r.evict_all().unwrap();
            assert_eq!(
                libc::waitpid(child, status, 0),
                child,
                "{what} waitpid: {}",
                std::io::Error::last_os_error()
            );
            assert!(
                libc::WIFEXITED(*status) && libc::WEXITSTATUS(*status) == 7,
                "{what}: status {:#x}",
                *status
            );
            // futex: the word is read in kernel mode (EAGAIN: it differs).
            let word = at(50) as *mut u32;
            *word = 5;
            r.evict_all().unwrap();
            let f = libc::syscall(
                libc::SYS_futex,
                word,
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                4u32,
                0usize,
            );
            let e = std::io::Error::last_os_error().raw_os_error();
            assert_eq!((f, e), (-1, Some(libc::EAGAIN)), "{what} futex");
            libc::close(rd);
            libc::close(wr);
            sockets_with_addresses_in(&r, &what, at(51), at(52));
        }
    }
}

/// `getsockname`, `accept`, `getpeername` and `getsockopt` on a loopback
/// TCP connection, each result and its length (read, then written by the
/// kernel) in the region's evicted pages `addr` and `len`; `sendto` and
/// `recvfrom` of a datagram with their addresses there.
///
/// # Safety
/// `addr` and `len` are pages of `r`, unused by anything else.
unsafe fn sockets_with_addresses_in(r: &Region, what: &str, addr: usize, len: usize) {
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    let sa = addr as *mut libc::sockaddr_in;
    let sl = len as *mut libc::socklen_t;
    let errno = || std::io::Error::last_os_error();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // SAFETY: the caller's pages, large enough for a sockaddr_in and a
    // socklen_t, and descriptors of our own.
    unsafe {
        *sl = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        r.evict_all().unwrap();
        let g = libc::getsockname(listener.as_raw_fd(), sa.cast(), sl);
        assert_eq!(g, 0, "{what} getsockname: {}", errno());
        assert_eq!(u16::from_be((*sa).sin_port), port, "{what} getsockname's port");
        let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        *sa = std::mem::zeroed();
        *sl = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        r.evict_all().unwrap();
        let fd = libc::accept(listener.as_raw_fd(), sa.cast(), sl);
        assert!(fd >= 0, "{what} accept: {}", errno());
        let client_port = client.local_addr().unwrap().port();
        assert_eq!(
            ((*sa).sin_family as i32, u16::from_be((*sa).sin_port)),
            (libc::AF_INET, client_port),
            "{what} accept's address"
        );
        *sl = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        r.evict_all().unwrap();
        assert_eq!(
            libc::getpeername(fd, sa.cast(), sl),
            0,
            "{what} getpeername: {}",
            errno()
        );
        assert_eq!(
            u16::from_be((*sa).sin_port),
            client_port,
            "{what} getpeername's port"
        );
        let ty = addr as *mut libc::c_int;
        *ty = -1;
        *sl = 4;
        r.evict_all().unwrap();
        let o = libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, ty.cast(), sl);
        assert_eq!(
            (o, *ty, *sl),
            (0, libc::SOCK_STREAM, 4),
            "{what} getsockopt: {}",
            errno()
        );
        libc::close(fd);
        // Datagrams: sendto's destination, recvfrom's source and its
        // length in the evicted pages; the message in plain memory, then
        // in the region too (after the address, in its page).
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (rx_port, tx_port) = (rx.local_addr().unwrap().port(), tx.local_addr().unwrap().port());
        let in_region = (addr + 1024) as *mut u8;
        for (k, msg) in [std::ptr::null_mut(), in_region].into_iter().enumerate() {
            let mut plain = [0u8; 64];
            let msg = if msg.is_null() { plain.as_mut_ptr() } else { msg };
            let text = format!("datagram {k}");
            *sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: rx_port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
                },
                sin_zero: [0; 8],
            };
            std::ptr::copy_nonoverlapping(text.as_ptr(), msg, text.len());
            r.evict_all().unwrap();
            let sent = libc::sendto(
                tx.as_raw_fd(),
                msg.cast(),
                text.len(),
                0,
                sa.cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            assert_eq!(sent, text.len() as isize, "{what} sendto {k}: {}", errno());
            *sa = std::mem::zeroed();
            std::ptr::write_bytes(msg, b'.', 64);
            *sl = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            r.evict_all().unwrap();
            let got = libc::recvfrom(rx.as_raw_fd(), msg.cast(), 64, 0, sa.cast(), sl);
            assert_eq!(got, text.len() as isize, "{what} recvfrom {k}: {}", errno());
            assert_eq!(
                std::slice::from_raw_parts(msg, text.len()),
                text.as_bytes(),
                "{what} {k}"
            );
            assert_eq!(
                *msg.add(text.len()),
                b'.',
                "{what} {k}: only the message is written"
            );
            assert_eq!(
                u16::from_be((*sa).sin_port),
                tx_port,
                "{what} recvfrom {k}'s source"
            );
        }
    }
}

/// The trap looks at the pointer arguments of a call only: the registers
/// of arguments a call does not take hold leftovers, which may point into
/// tiered memory. A trap on one in a thread with SIGSYS blocked ends the
/// process (the workloads' tests died of SIGSYS when the rules looked at
/// all six registers; futex's timeout and second-word slots hold numbers,
/// or nothing, for most operations). A child blocks SIGSYS and makes calls
/// whose unused registers point into a region: it must exit normally.
#[test]
fn leftovers_in_unused_argument_registers_do_not_trap() {
    let (fp, dt, store) = (FaultPath::InContext, DirtyTracking::WpFault, "memory");
    let r = evicted_region(fp, dt, store);
    let inside = r.as_ptr() as usize + 3 * PAGE;
    // SAFETY: the child only blocks a signal, makes two system calls on
    // its own stack's memory and exits.
    unsafe {
        let child = libc::fork();
        if child == 0 {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGSYS);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            let word = 0u32;
            let woke = libc::syscall(
                libc::SYS_futex,
                &word as *const u32,
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
                inside,
                inside,
                inside,
            );
            let mut fds = [0; 2];
            let piped = libc::syscall(
                libc::SYS_pipe2,
                fds.as_mut_ptr(),
                0,
                inside,
                inside,
                inside,
                inside,
            );
            libc::_exit(if woke == 0 && piped == 0 { 0 } else { 1 });
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(child, &mut status, 0), child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child ended with status {status:#x} (signal 31: killed by a trap on a leftover register)"
        );
    }
}

#[test]
fn child_untiered_pointers_of_a_trapped_call() {
    if !common::is_child("child_untiered_pointers_of_a_trapped_call") {
        return;
    }
    for (fp, dt, store) in variants() {
        let what = format!("{} {} {store}", fp.name(), dt.name());
        let r = evicted_region(fp, dt, store);
        let at = |p: usize| r.as_ptr() as usize + p * PAGE;
        // SAFETY: the region pointers are into our regions, a page each;
        // the others are into mappings made here, unmapped or read-only
        // on purpose: the kernel must see them as the program passed them.
        // The page taken over for the second region is ours, unused
        // elsewhere, and is unmapped only after that region is dropped.
        unsafe {
            let map = |prot| {
                libc::mmap(
                    std::ptr::null_mut(),
                    PAGE,
                    prot,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            let (none, read_only) = (map(libc::PROT_NONE), map(libc::PROT_READ));
            assert!(none != libc::MAP_FAILED && read_only != libc::MAP_FAILED);
            // select: the read set tiered, the write set unreadable:
            // EFAULT from the kernel (a copy in the handler crashed).
            let set = at(60) as *mut libc::fd_set;
            libc::FD_ZERO(set);
            libc::FD_SET(0, set);
            let mut tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            };
            r.evict_all().unwrap();
            let n = libc::select(1, set, none.cast(), std::ptr::null_mut(), &mut tv);
            let e = std::io::Error::last_os_error().raw_os_error();
            assert_eq!((n, e), (-1, Some(libc::EFAULT)), "{what} select");
            // nanosleep: the time tiered, the time left in read-only
            // memory, which the kernel writes only when interrupted (the
            // copy back wrote it always, and crashed).
            let ts = at(61) as *mut libc::timespec;
            *ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1000,
            };
            r.evict_all().unwrap();
            assert_eq!(libc::nanosleep(ts, read_only.cast()), 0, "{what} nanosleep");
            // stat: the path tiered, the result unmapped: EFAULT.
            let path = at(62) as *mut u8;
            let name = b"/proc/self/exe\0";
            std::ptr::copy_nonoverlapping(name.as_ptr(), path, name.len());
            r.evict_all().unwrap();
            let s = libc::stat(path.cast(), none.cast());
            let e = std::io::Error::last_os_error().raw_os_error();
            assert_eq!((s, e), (-1, Some(libc::EFAULT)), "{what} stat");
            // stat: the result tiered, the path in the page just below
            // another region: unreadable, EFAULT (a copy measured the path
            // as if it ran into the region, and crashed); then readable,
            // running into that region's evicted page: the copy serves it.
            let two = libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert!(two != libc::MAP_FAILED);
            let (below, above) = (two, two as usize + PAGE);
            let (mapping, user) = tiermem_sys::mm::Mapping::take_over(above, PAGE).unwrap();
            let next = Region::adopt(
                config(PAGE as u64, PAGE as u64, fp, dt, store),
                mapping,
                user,
                None,
            )
            .unwrap();
            let path = (above - 7) as *mut u8;
            assert_eq!(libc::mprotect(below, PAGE, libc::PROT_NONE), 0);
            next.evict_all().unwrap();
            r.evict_all().unwrap();
            let s = libc::stat(path.cast(), at(1) as *mut libc::stat);
            let e = std::io::Error::last_os_error().raw_os_error();
            assert_eq!(
                (s, e),
                (-1, Some(libc::EFAULT)),
                "{what} stat, path below a region"
            );
            assert_eq!(libc::mprotect(below, PAGE, libc::PROT_READ | libc::PROT_WRITE), 0);
            std::ptr::copy_nonoverlapping(name.as_ptr(), path, name.len());
            next.evict_all().unwrap();
            r.evict_all().unwrap();
            let s = libc::stat(path.cast(), at(1) as *mut libc::stat);
            assert_eq!(
                s,
                0,
                "{what} stat, path into a region: {}",
                std::io::Error::last_os_error()
            );
            drop(next);
            // recvfrom trapped on its source address, with a message too
            // large to copy and its buffer read-only: the buffer is the
            // kernel's to refuse (it was bounced, and the copy back
            // crashed).
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            udp.send_to(b"hello", udp.local_addr().unwrap()).unwrap();
            let (sa, sl) = (at(63) as *mut libc::sockaddr_in, at(64) as *mut libc::socklen_t);
            *sl = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            r.evict_all().unwrap();
            let n = libc::recvfrom(
                std::os::fd::AsRawFd::as_raw_fd(&udp),
                read_only,
                300 << 10,
                libc::MSG_DONTWAIT,
                sa.cast(),
                sl,
            );
            let e = std::io::Error::last_os_error().raw_os_error();
            assert_eq!(
                (n, e),
                (-1, Some(libc::EFAULT)),
                "{what} recvfrom into read-only memory"
            );
            libc::munmap(below, PAGE);
            libc::munmap(none, PAGE);
            libc::munmap(read_only, PAGE);
        }
    }
    eprintln!("untiered pointers: ok");
}

/// A call that traps on a tiered pointer argument runs on copies of its
/// tiered arguments only: another argument that points to plain memory
/// reaches the kernel as given, so an unmapped or read-only pointer gets
/// the kernel's EFAULT (or is never written) as without tiermem, where the
/// copy in the trap's handler crashed the program.
#[test]
fn untiered_pointers_of_a_trapped_call_reach_the_kernel_as_given() {
    let run = common::run_child_within(
        "child_untiered_pointers_of_a_trapped_call",
        &[],
        std::time::Duration::from_secs(120),
    );
    assert!(
        run.status.is_some_and(|s| s.success()) && run.stderr.contains("untiered pointers: ok"),
        "{:?}\n{}",
        run.status,
        run.stderr
    );
}
