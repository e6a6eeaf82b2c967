//! `fork()` with a live region (documented in docs/fork.md): the child does
//! not inherit the range (MADV_DONTFORK), touching it there raises SIGSEGV,
//! dropping the copied handle in the child releases nothing of the
//! parent's, the child can make regions of its own, and the parent carries
//! on undisturbed. Runs in a child test process so that fork() happens in
//! a process with one thread.

#[path = "../common/mod.rs"]
mod common;

use common::{is_child, mix, run_child};
use std::os::unix::process::ExitStatusExt;
use tiermem::{Config, FarStoreConfig, FaultPath, Region};

const MIB: u64 = 1 << 20;

fn fork_and_wait(child: impl FnOnce() -> i32) -> libc::c_int {
    // SAFETY: test code; the child runs `child` and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child();
        // SAFETY: leaving the child without running the parent's atexit.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

fn scenario(fp: FaultPath) {
    let dir = std::env::temp_dir().join(format!("tiermem-fork-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let far = dir.join("far.bin");
    let mut c = Config::new(8 * MIB, 2 * MIB);
    c.fault_path = fp;
    c.far = FarStoreConfig::File {
        path: far.clone(),
        direct: false,
    };
    let mut region = Region::new(c).unwrap();
    let base = region.base();
    region
        .as_mut_slice::<u64>()
        .iter_mut()
        .enumerate()
        .for_each(|(i, w)| *w = mix(i as u64));

    // Child 1: the range is absent; the handle drops harmlessly; new regions work.
    let status = fork_and_wait(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        if maps.contains(&format!("{base:x}-")) {
            return 10;
        }
        // Every operation on the parent's handle is refused and touches
        // nothing (issue 18.1: discard punched holes in the shared file).
        let len = region.len();
        let forked = |r: Result<(), tiermem::Error>| matches!(r, Err(ref e) if e.code() == tiermem::ErrorCode::Forked && e.to_string().contains("fork()"));
        if !forked(region.discard(0, len))
            || !forked(region.evict_all().map(drop))
            || !forked(region.prefetch(0, len))
            || !forked(region.advise(0, len, tiermem::Advice::DontNeed))
            || !forked(tiermem::region::prefetch(base, 4096))
        {
            return 13;
        }
        let mut own = Region::new(Config::new(4 * MIB, MIB)).unwrap();
        own.as_mut_slice::<u64>()
            .iter_mut()
            .enumerate()
            .for_each(|(i, w)| *w = i as u64);
        if own
            .as_mut_slice::<u64>()
            .iter()
            .enumerate()
            .any(|(i, &w)| w != i as u64)
        {
            return 11;
        }
        drop(own);
        // SAFETY: test code; dropping the parent's handle in the child must
        // not unmap, unlink or stop anything of the parent's.
        drop(unsafe { std::ptr::read(&region) });
        0
    });
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child 1 status {status:#x}"
    );

    // Child 2: touching the region raises SIGSEGV, not silent zeros.
    let ptr = region.as_ptr() as usize;
    let status = fork_and_wait(|| {
        // SAFETY: test code; the access is expected to kill the child.
        let v = unsafe { std::ptr::read_volatile((ptr + 4096) as *const u64) };
        std::hint::black_box(v);
        12
    });
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "child 2 status {status:#x}"
    );

    // The parent is undisturbed: its far file exists, every word is intact
    // after more eviction round trips.
    assert!(far.exists(), "a child removed the parent's far file");
    for _ in 0..2 {
        let w: &mut [u64] = region.as_mut_slice();
        assert!(w.iter().enumerate().all(|(i, &x)| x == mix(i as u64)));
    }
    assert!(region.stats().evictions > 0);
    drop(region);
    assert!(!far.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn child_fork_in_context() {
    if is_child("child_fork_in_context") {
        scenario(FaultPath::InContext);
    }
}

#[test]
fn child_fork_handler_thread() {
    if is_child("child_fork_handler_thread") {
        scenario(FaultPath::HandlerThread);
    }
}

#[test]
fn fork_with_a_live_region() {
    for name in ["child_fork_in_context", "child_fork_handler_thread"] {
        let (status, err) = run_child(name);
        assert!(
            status.success(),
            "{name}: {status:?} (signal {:?})\n{err}",
            status.signal()
        );
    }
}

/// A `vfork` child that closes every descriptor and then reads and writes
/// evicted pages (Python 3.11's `subprocess` child does): its faults are
/// served by the owner's lender thread (`tiermem::vfork`), never by the
/// child with the far store's descriptor closed (which poisoned the page
/// for the parent). The interposed `vfork` (tiermem-interpose) calls the
/// hooks around the system call; this test calls them by hand.
fn vfork_scenario() {
    const PAGES: usize = 256;
    let mut c = Config::new((PAGES * 4096) as u64, 4 * 4096);
    // Batches of one (paper 1's, and any default batch at four pages): they
    // once met the child's two pinned pages at the policy's head for good.
    c.evict_batch_pages = 1;
    c.fault_path = FaultPath::InContext;
    let mut region = Region::new(c).unwrap();
    let words = region.as_mut_slice::<u64>();
    let per_page = 4096 / 8;
    for p in 0..PAGES {
        words[p * per_page] = mix(p as u64);
    }
    let base = region.as_ptr() as usize;
    for round in 0..40 {
        // Other pages in, so that the child's are evicted.
        let w: &mut [u64] = region.as_mut_slice();
        for p in (round % 2..PAGES).step_by(7) {
            std::hint::black_box(w[p * per_page]);
        }
        tiermem_sys::thread::vfork_started();
        // vfork's flags, with a stack of the child's own (libc::vfork is
        // deprecated in Rust: the compiler does not know it returns twice).
        let mut stack = vec![0u8; 256 << 10];
        let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
        let mut job = (base, round);
        // SAFETY: test code; the child runs `vfork_child` on its own stack
        // and leaves with _exit; `job` outlives it (the parent waits in
        // clone until the child has ended).
        let pid = unsafe {
            libc::clone(
                vfork_child,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                (&mut job as *mut (usize, usize)).cast(),
            )
        };
        tiermem_sys::thread::vfork_returned(pid);
        assert!(pid > 0, "vfork failed");
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "round {round}: child status {status:#x}"
        );
        let stamp = region.as_mut_slice::<u64>()[(round * 5 % PAGES) * per_page + 1];
        assert_eq!(
            stamp,
            0x5a5a_0000 + round as u64,
            "round {round}: the child's write is lost"
        );
    }
    let w: &mut [u64] = region.as_mut_slice();
    assert!((0..PAGES).all(|p| w[p * per_page] == mix(p as u64)));
    assert!(region.stats().evictions > 0);
}

/// The child's side: closes every descriptor above 2, checks 32 pages,
/// writes a stamp, leaves.
extern "C" fn vfork_child(job: *mut libc::c_void) -> libc::c_int {
    // SAFETY: test code in a vfork child: `job` is the parent's (base,
    // round); raw system calls, reads and one write of the parent's region
    // (mapped, 8-aligned words), _exit.
    unsafe {
        let (base, round) = *(job as *const (usize, usize));
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        let mut bad = false;
        for k in 0..32 {
            let p = (k * 37 + round * 11) % 256;
            bad |= std::ptr::read_volatile((base + p * 4096) as *const u64) != mix(p as u64);
        }
        std::ptr::write_volatile(
            (base + (round * 5 % 256) * 4096 + 8) as *mut u64,
            0x5a5a_0000 + round as u64,
        );
        libc::_exit(if bad { 3 } else { 0 })
    }
}

#[test]
fn child_vfork_in_context() {
    if is_child("child_vfork_in_context") {
        vfork_scenario();
    }
}

#[test]
fn vfork_children_touch_evicted_pages() {
    let run = common::run_child_within("child_vfork_in_context", &[], std::time::Duration::from_secs(120));
    let status = run.status.expect("the vfork scenario hung (killed after 120 s)");
    assert!(
        status.success(),
        "{status:?} (signal {:?})\n{}",
        status.signal(),
        run.stderr
    );
}
