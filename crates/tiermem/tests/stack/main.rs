//! How much of the faulting thread's stack each kind of fault needs.
//!
//! Each case runs its accesses on a thread whose stack (allocated here,
//! 256 KiB) is painted with a pattern first; after the thread ends, the
//! bytes still painted at the low end tell how deep the thread went. The
//! figure per kind is that depth minus the depth of the same thread doing a
//! plain access to a resident page. Every kind must stay within 8 KiB
//! (in a release build; a debug build's frames are larger, its bound is
//! `DEBUG_LIMIT`) beyond what the kernel's own signal frame takes over
//! [`REFERENCE_FRAME`]: that frame holds the CPU's register state, and on
//! a CPU with AVX-512 it is larger than on the AVX2 machine the limit was
//! set on (an in-context fault is a signal; 9,400 bytes at base on an
//! AVX-512 Xeon, where a no-op handler's delivery takes the difference).
//! Run with `--nocapture` for the table.

#[path = "../common/mod.rs"]
mod common;

use common::{is_child, run_child};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use tiermem::{Config, FaultPath, PageSize, Region};

const STACK: usize = 256 << 10;
const PAINT: u8 = 0xa5;
const LIMIT: usize = 8 << 10;
/// Unoptimized frames are several times larger.
const DEBUG_LIMIT: usize = 16 << 10;
const MIB: u64 = 1 << 20;

type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

extern "C" fn trampoline(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the `Box<Job>` leaked by `deepest`, which joins this
    // thread before the job's borrows end; it is taken exactly once.
    let job: Box<Job<'static>> = unsafe { Box::from_raw(arg.cast()) };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
        std::process::abort();
    }
    std::ptr::null_mut()
}

/// Runs `f` on a fresh thread with a painted stack; returns the deepest
/// stack use in bytes.
fn deepest<'a>(f: impl FnOnce() + Send + 'a) -> usize {
    // SAFETY: a fresh private anonymous mapping, checked below.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(stack, libc::MAP_FAILED);
    // SAFETY: the mapping is STACK bytes, readable and writable, ours.
    unsafe { std::ptr::write_bytes(stack.cast::<u8>(), PAINT, STACK) };
    let job: Box<Job<'a>> = Box::new(Box::new(f));
    let arg = Box::into_raw(job).cast::<c_void>();
    // SAFETY: plain pthread calls on local storage; the stack outlives the
    // thread (joined below, unmapped after).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_attr_init(&mut attr), 0);
        assert_eq!(libc::pthread_attr_setstack(&mut attr, stack, STACK), 0);
        let mut t: libc::pthread_t = 0;
        assert_eq!(libc::pthread_create(&mut t, &attr, trampoline, arg), 0);
        assert_eq!(libc::pthread_join(t, std::ptr::null_mut()), 0);
        libc::pthread_attr_destroy(&mut attr);
    }
    // SAFETY: the thread is gone; the mapping is still ours.
    let bytes = unsafe { std::slice::from_raw_parts(stack.cast::<u8>(), STACK) };
    let untouched = bytes.iter().take_while(|&&b| b == PAINT).count();
    // SAFETY: unmapping what was mapped above; `bytes` is not used after.
    unsafe { libc::munmap(stack, STACK) };
    STACK - untouched
}

fn cfg(virt: u64, near: u64, fp: FaultPath) -> Config {
    let mut c = Config::new(virt, near);
    c.fault_path = fp;
    c
}

/// Reads one word of every page of `[first, first+n)` on the painted thread.
fn read_pages(r: &Region, first: usize, n: usize) -> usize {
    let words = r.as_atomic_u64();
    let per = r.page_bytes() / 8;
    deepest(|| {
        let mut sum = 0u64;
        for p in first..first + n {
            sum = sum.wrapping_add(words[p * per].load(Ordering::Relaxed));
        }
        std::hint::black_box(sum);
    })
}

/// Writes one word of every page of `[first, first+n)` on the painted thread.
fn write_pages(r: &Region, first: usize, n: usize, v: u64) -> usize {
    let words = r.as_atomic_u64();
    let per = r.page_bytes() / 8;
    deepest(|| {
        for p in first..first + n {
            words[p * per].store(v + p as u64, Ordering::Relaxed);
        }
    })
}

/// The table: (kind, fault path, bytes of stack beyond a plain access).
fn measure() -> Vec<(&'static str, &'static str, usize)> {
    let mut out = Vec::new();
    for fp in [FaultPath::InContext, FaultPath::HandlerThread] {
        let path = fp.name();
        // Baseline: a resident page.
        let mut r = Region::new(cfg(16 * MIB, 4 * MIB, fp)).unwrap();
        r.as_mut_slice::<u64>()[0] = 1;
        let base = read_pages(&r, 0, 1);
        let mut push = |kind: &'static str, used: usize| out.push((kind, path, used.saturating_sub(base)));
        push("zero-fill", write_pages(&r, 1, 64, 7));
        // Fill: evicted pages read back with room in the budget.
        r.evict_all().unwrap();
        push("fill", read_pages(&r, 1, 64));
        // Fill that evicts: stream over 4x the budget.
        let pages = 16 * MIB as usize / 4096;
        push("fill that evicts (write)", write_pages(&r, 0, pages, 11));
        push("fill that evicts (read)", read_pages(&r, 0, pages));
        drop(r);
        // 2 MiB pages (THP), evicting.
        let mut c = cfg(32 * MIB, 8 * MIB, fp);
        c.page_size = PageSize::Thp2M;
        let r = Region::new(c).unwrap();
        push("2M/THP fill that evicts", write_pages(&r, 0, 16, 3));
        drop(r);
        // Movers and prefetch: a stream whose pages the prefetcher brings.
        let mut c = cfg(64 * MIB, 8 * MIB, fp);
        c.movers = 1;
        c.prefetch = true;
        let r = Region::new(c).unwrap();
        let pages = 64 * MIB as usize / 4096;
        push("movers: stream (prefetch hits)", write_pages(&r, 0, pages, 5));
        push("movers: stream read back", read_pages(&r, 0, pages));
        drop(r);
        // The kernel-access trap: read(2) into evicted pages.
        if fp == FaultPath::InContext {
            let mut r = Region::new(cfg(16 * MIB, 4 * MIB, fp)).unwrap();
            r.as_mut_slice::<u64>()
                .iter_mut()
                .step_by(512)
                .for_each(|w| *w = 9);
            r.evict_all().unwrap();
            let base = r.as_ptr() as usize;
            let used = deepest(|| {
                let f = std::fs::File::open("/dev/zero").unwrap();
                for p in 0..8 {
                    // SAFETY: the region is mapped and 16 MiB long.
                    let n = unsafe {
                        libc::read(
                            std::os::fd::AsRawFd::as_raw_fd(&f),
                            (base + p * 4096) as *mut c_void,
                            4096,
                        )
                    };
                    assert_eq!(n, 4096, "read into an evicted page");
                }
            });
            push("kernel-access trap (read(2))", used);
        }
    }
    // Overshadow: reads of pages still being copied.
    {
        use tiermem::overshadow::{LinkEmulation, Options, Overshadow};
        let len = 8 << 20;
        let far = tiermem::far::FarMemory::alloc(len).unwrap();
        // A slow link: the reads below find pages still being copied.
        let opts = Options {
            link: Some(LinkEmulation {
                bandwidth_bytes_per_s: len as f64 / 0.1,
                latency_us: 5.0,
            }),
            ..Default::default()
        };
        let os = Overshadow::create(far.addr(), len, &opts).unwrap();
        let words = os.as_atomic_u64();
        let used = deepest(|| {
            let s: u64 = words.iter().step_by(512).map(|w| w.load(Ordering::Relaxed)).sum();
            std::hint::black_box(s);
        });
        os.wait().unwrap();
        out.push(("overshadow read", "in-context", used.saturating_sub(read_base())));
    }
    // Team: the host's own faults in a team region under eviction.
    {
        use tiermem::team::{TeamConfig, TeamRegion};
        let team = TeamRegion::new(TeamConfig::new(8 << 20, 1 << 20, 1)).unwrap();
        let words: &[AtomicU64] = team.atomics();
        let used = deepest(|| {
            for (i, w) in words.iter().enumerate().step_by(512) {
                w.store(i as u64, Ordering::Relaxed);
            }
        });
        out.push((
            "team host fill that evicts",
            "in-context",
            used.saturating_sub(read_base()),
        ));
    }
    // SVM: a rank reads pages another rank wrote (DSM fetches from the
    // home), and writes them (write faults).
    {
        use tiermem::svm::{Svm, SvmConfig, SvmMode};
        let svm = Svm::new(SvmConfig::new(4 << 20, 2)).unwrap();
        let pages = 64;
        svm.run(|p| {
            let a = p.malloc(pages * 4096)?;
            p.set_mode(a, pages * 4096, SvmMode::Dsm)?;
            let words = p.u64s(a, pages * 512)?;
            if p.rank() == 0 {
                words
                    .iter()
                    .step_by(512)
                    .for_each(|w| w.store(3, Ordering::Relaxed));
            }
            p.barrier()?;
            if p.rank() == 1 {
                let read = deepest(|| {
                    let s: u64 = words.iter().step_by(512).map(|w| w.load(Ordering::Relaxed)).sum();
                    assert_eq!(s, 3 * pages as u64);
                });
                let write = deepest(|| {
                    words
                        .iter()
                        .step_by(512)
                        .for_each(|w| w.store(4, Ordering::Relaxed))
                });
                p.scratch()[0].store(read as u64, Ordering::Relaxed);
                p.scratch()[1].store(write as u64, Ordering::Relaxed);
            }
            p.barrier()
        })
        .unwrap();
        let base = read_base();
        for (k, kind) in ["svm dsm read (remote)", "svm dsm write"].into_iter().enumerate() {
            let used = svm.scratch()[k].load(Ordering::Relaxed) as usize;
            out.push((kind, "in-context", used.saturating_sub(base)));
        }
    }
    out
}

/// About the signal frame of the machine the limits were set on (AVX2:
/// 832 bytes of register state, the rest siginfo, ucontext and the
/// handler's own frame); an AVX-512 frame is about 1.6 KiB larger (3,344
/// bytes measured on a Xeon), with AMX state in use 8 KiB more.
const REFERENCE_FRAME: usize = 1536;

/// The stack a no-op signal handler's delivery takes here, beyond a plain
/// access: the kernel's frame, whose size follows the CPU's register state.
fn signal_frame() -> usize {
    extern "C" fn noop(_: libc::c_int) {}
    // SAFETY: a handler that does nothing, for a signal nothing else uses.
    unsafe { libc::signal(libc::SIGUSR2, noop as *const () as libc::sighandler_t) };
    let used = deepest(|| {
        // SAFETY: raises the signal just handled.
        unsafe { libc::raise(libc::SIGUSR2) };
    });
    used.saturating_sub(read_base())
}

/// A plain access on a painted thread.
fn read_base() -> usize {
    let x = AtomicU64::new(1);
    deepest(|| {
        std::hint::black_box(x.load(Ordering::Relaxed));
    })
}

#[test]
fn every_kind_of_fault_needs_at_most_8_kib_of_stack() {
    if is_child("every_kind_of_fault_needs_at_most_8_kib_of_stack") {
        let limit = if cfg!(debug_assertions) {
            DEBUG_LIMIT
        } else {
            LIMIT
        };
        let table = measure();
        let build = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let frame = signal_frame();
        // Signal-delivered faults get what this machine's frame takes
        // beyond the reference machine's.
        let limit = limit + frame.saturating_sub(REFERENCE_FRAME);
        eprintln!("stack beyond a plain access, {build} build (a no-op signal handler: {frame} B):");
        for (kind, path, used) in &table {
            eprintln!("  {kind:<32} {path:<15} {used:>6} B");
        }
        for (kind, path, used) in &table {
            assert!(
                *used <= limit,
                "{kind} on the {path} path used {used} bytes of stack (limit {limit}, with a signal \
                 frame of {frame} B here)"
            );
        }
        return;
    }
    let (st, out) = run_child("every_kind_of_fault_needs_at_most_8_kib_of_stack");
    println!("{out}");
    assert!(st.success(), "{out}");
}
