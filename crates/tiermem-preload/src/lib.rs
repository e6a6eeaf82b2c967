//! tiermem's preload library (`libtiermem_preload.so`): tiers, or puts on
//! huge pages, the memory of an unmodified program.
//!
//! ```sh
//! tiermem run --near 8G -- ./solver input        # sets all of this up
//! LD_PRELOAD=libtiermem_preload.so TIERMEM_NEAR=8G ./solver input
//! ```
//!
//! At load time (a constructor, before the program's own) it reads the
//! `TIERMEM_*` settings ([`settings`]) and reserves one heap
//! ([`tiermem::heap::Heap`]): a tiered region with one near budget for the
//! whole process (paper 1), or huge pages without tiering (paper 3). Then:
//!
//! - [`malloc`]: the whole allocation interface (`malloc`, `calloc`,
//!   `realloc`, `free`, `posix_memalign`, `aligned_alloc`, `memalign`,
//!   `valloc`, `pvalloc`, `malloc_usable_size`, `reallocarray`, their
//!   `__libc_*` forms; C++ `new` reaches `malloc`) sends requests of at
//!   least the threshold to the heap and everything else to the C library;
//!   `free` tells them apart by address range, never by guess;
//! - [`mmap`]: private anonymous `mmap`s of at least the threshold come
//!   from the heap too, with `munmap`, `mremap` and `madvise(DONTNEED)`;
//! - [`mlock`]: `mlockall`, `mlock` and `mlock2` lock the program's other
//!   memory and leave tiered memory out (it moves; its reserved ranges must
//!   never be populated);
//! - `fork`: a child gets a private copy of the tiered memory as of the
//!   fork (evicted pages copied in before `fork` returns);
//! - `stacks`: a stack the program makes in tiered memory (`sigaltstack`,
//!   `pthread_attr_setstack`, `makecontext`, `clone`) is held resident
//!   until freed: the kernel writes signal frames there;
//! - [`statics`]: the executable's large `.bss`/`.data` (static arrays,
//!   Fortran `COMMON` blocks) are taken over in place;
//! - the signal interposers of `tiermem-interpose` keep SIGBUS/SIGSEGV
//!   deliverable, and system calls on tiered buffers are served (the
//!   kernel-access trap of the core, and [`iov`] for vectored calls);
//! - at exit, [`report`] prints a summary and writes `TIERMEM_REPORT`.
//!
//! The library's own allocations (Rust's global allocator) go straight to
//! the C library's allocator ([`libc_alloc`]), so nothing inside tiermem
//! ever re-enters these interposers.

// The C ABI is unsafe by nature: every exported function takes raw
// pointers from C. Each block says what it relies on.
#![allow(clippy::missing_safety_doc)]

mod children;
mod exec;
#[cfg(target_arch = "x86_64")]
mod execl;
mod fork;
mod iov;
mod libc_alloc;
pub mod malloc;
pub mod mlock;
pub mod mmap;
mod report;
pub mod settings;
mod stacks;
mod statics;

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use tiermem::heap::Heap;

#[global_allocator]
static ALLOCATOR: libc_alloc::LibcAllocator = libc_alloc::LibcAllocator;

/// The heap, once the constructor has built it (null before, and when
/// transparent mode is off).
static HEAP: AtomicPtr<Heap> = AtomicPtr::new(std::ptr::null_mut());
/// Requests of at least this many bytes go to the heap (`usize::MAX`
/// until the heap exists).
static THRESHOLD: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The heap if it exists.
pub(crate) fn heap() -> Option<&'static Heap> {
    // Acquire: pairs with the Release in `init`; the heap is fully built.
    let p = HEAP.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked Box<Heap> that lives for the
    // rest of the process (never freed: destructors may free after main).
    unsafe { p.as_ref() }
}

/// The heap if a request of `size` bytes belongs there.
pub(crate) fn heap_for(size: usize) -> Option<&'static Heap> {
    if size < THRESHOLD.load(Ordering::Relaxed) {
        return None;
    }
    heap()
}

/// The heap if `addr` lies in it.
pub(crate) fn heap_of(addr: usize) -> Option<&'static Heap> {
    heap().filter(|h| h.contains(addr))
}

extern "C" fn init() {
    // First of all: a process that another tiered program ran inherits its
    // seccomp filter but not its SIGSYS handler; install ours before this
    // image allocates or reads anything (even when it is not tiered).
    tiermem::serve_inherited_traps();
    // The CPUs runtime threads may use (`launch_cpus`), before anything
    // builds a region.
    tiermem_sys::thread::note_launch_cpus(cpus_before_openmp_bound_this_thread());
    // Keep libtiermem-interpose's signal-mask interposers in this library.
    tiermem_interpose::link();
    // An earlier image of this process (before an exec) may have left
    // its live page (`tiermem top`); this image publishes its own, if any.
    tiermem::live::remove_page();
    let mut s = settings::Settings::from_env();
    // A program another tiered program forked and exec'd is tiered only
    // with TIERMEM_FOLLOW_EXEC; the signal interposers stay (harmless).
    if !s.enabled {
        return;
    }
    let root = settings::is_root_process();
    if root {
        for w in &s.launch_warnings {
            eprintln!("tiermem: warning: job launcher: {w}");
        }
    }
    if !root {
        children::record_exec();
    }
    if !(root || s.follow_exec) {
        return;
    }
    if !root {
        s.unnamed_far_file();
    }
    // One near budget for the heap and the static arrays.
    let budget = match s.near {
        settings::Near::Bytes(b) => Some(tiermem::region::NearBudget::new(b)),
        settings::Near::Full => None,
    };
    match s.build_heap(budget.clone()) {
        Ok(h) => {
            let h = Box::leak(Box::new(h));
            // Release: the heap is fully built before any thread can see it.
            HEAP.store(h, Ordering::Release);
            THRESHOLD.store(s.threshold, Ordering::Release);
            if s.verbose {
                eprintln!(
                    "tiermem: transparent heap at {:#x}, {} MiB, {}; requests of {} bytes and more",
                    h.base(),
                    h.len() >> 20,
                    s.describe(),
                    s.threshold
                );
            }
        }
        Err(e) => {
            // The program the user asked to tier never runs untiered
            // unasked (a batch job would lose its night); a program it
            // runs (fork + exec, TIERMEM_FOLLOW_EXEC) is not killed for it.
            if root && !s.fallback_untiered {
                eprintln!(
                    "tiermem: cannot set up the heap: {e}; stopping with exit status 1 instead of \
                     running untiered (fix that, or run untiered on purpose with --fallback untiered \
                     or TIERMEM_FALLBACK=untiered)"
                );
                std::process::exit(1);
            }
            eprintln!("tiermem: cannot set up the heap: {e}; running without tiermem");
            return;
        }
    }
    if s.statics {
        statics::take_over(&s, budget.as_ref());
    }
    if root {
        children::start_root();
    }
    children::record_forks();
    report::at_exit(s);
}

/// The CPUs `tiermem run` started on (`TIERMEM_LAUNCH_CPUS`), if this
/// process is the program it started and an OpenMP runtime has bound this
/// thread to one of them already: libgomp does so in its own constructor,
/// which runs before this one (`OMP_PROC_BIND`). Otherwise None, and the
/// thread's own CPUs count: those of a process that `taskset`, `numactl`
/// or an MPI launcher bound, or one that a tiered program started.
fn cpus_before_openmp_bound_this_thread() -> Option<Vec<usize>> {
    use tiermem::config::options;
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() } as u32;
    let launcher = tiermem_sys::env::var(options::LAUNCHER_PID.var).and_then(|v| v.parse::<u32>().ok());
    let binds = ["OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"]
        .iter()
        .filter_map(tiermem_sys::env::var)
        .any(|v| !v.trim().eq_ignore_ascii_case("false"));
    if launcher != Some(parent) || !binds {
        return None;
    }
    let given = tiermem::config::parse_cpu_list(&tiermem_sys::env::var(options::LAUNCH_CPUS.var)?).ok()?;
    let own = tiermem_sys::thread::affinity().ok()?;
    (own.len() == 1 && given.contains(&own[0])).then_some(given)
}

/// Runs `init` before the program's own constructors (a preloaded
/// library's initialisers run before the executable's).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
