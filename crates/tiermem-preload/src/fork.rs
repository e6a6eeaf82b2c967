//! `fork`: the child of a tiered program gets a private copy of its tiered
//! memory as of the fork (see `tiermem::fork`). Refused with ENOMEM and a
//! message when the data only the far stores hold would not fit in the
//! child (more than half the memory available); `_Fork`, which runs no
//! fork handlers, is refused when there is any such data.

use libc::pid_t;
use std::sync::atomic::{AtomicUsize, Ordering};

fn real(cache: &AtomicUsize, name: &std::ffi::CStr) -> Option<unsafe extern "C" fn() -> pid_t> {
    let mut f = cache.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: RTLD_NEXT with a NUL-terminated name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, Ordering::Release);
    }
    // SAFETY: the C library's fork/_Fork: no arguments, returns a pid.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> pid_t>(f) })
}

fn refuse(why: String) -> pid_t {
    eprintln!("tiermem: fork refused: {why}");
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = libc::ENOMEM };
    -1
}

fn available_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(u64::MAX, |kb| kb * 1024)
}

/// `fork(2)`.
#[no_mangle]
pub extern "C" fn fork() -> pid_t {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    if crate::heap().is_some() {
        let need = tiermem::fork::copy_bytes();
        let avail = available_bytes();
        if need > avail / 2 {
            return refuse(format!(
                "the child would copy {} MiB of evicted tiered memory, more than half the {} MiB available \
                 (fork+exec: use posix_spawn or vfork, which copy nothing)",
                need >> 20,
                avail >> 20
            ));
        }
    }
    match real(&REAL, c"fork") {
        // SAFETY: the C library's fork.
        Some(f) => unsafe { f() },
        None => refuse("the C library's fork is missing".into()),
    }
}

/// glibc's `_Fork`: no fork handlers run, so a child would miss evicted
/// tiered memory: refused when there is any.
#[no_mangle]
pub extern "C" fn _Fork() -> pid_t {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    if crate::heap().is_some() && tiermem::fork::copy_bytes() > 0 {
        return refuse("_Fork runs no fork handlers and tiered memory is evicted: use fork".into());
    }
    match real(&REAL, c"_Fork") {
        // SAFETY: the C library's _Fork.
        Some(f) => unsafe { f() },
        None => refuse("the C library's _Fork is missing".into()),
    }
}
