//! Memory-management system calls made directly, not through the C
//! library: the preload library interposes the C library's `mmap`,
//! `munmap`, `mremap`, `madvise`, `mlock`, `mlock2` and `mlockall` (an
//! unmodified program's large anonymous mappings become tiered heap, which
//! its memory locks leave out), and tiermem's own calls,
//! which also manage the heap's range, must never come back to it. Each
//! returns like the C function (`MAP_FAILED` or -1 with `errno` set).

use libc::{c_int, c_void, off_t, size_t};

/// `mmap(2)`.
///
/// # Safety
/// As for the C function.
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: forwarded from the caller; the kernel returns an address or -1.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void }
}

/// `munmap(2)`.
///
/// # Safety
/// As for the C function.
pub unsafe fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// `mremap(2)` (the new address is used with `MREMAP_FIXED` only).
///
/// # Safety
/// As for the C function.
pub unsafe fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: forwarded from the caller.
    unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void }
}

/// `madvise(2)`.
///
/// # Safety
/// As for the C function.
pub unsafe fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int }
}

/// `mprotect(2)`.
///
/// # Safety
/// As for the C function.
pub unsafe fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) as c_int }
}

/// `mlock(2)`.
///
/// # Safety
/// As for the C function.
pub unsafe fn mlock(addr: *const c_void, len: size_t) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { libc::syscall(libc::SYS_mlock, addr, len) as c_int }
}

/// `mlock2(2)`.
///
/// # Safety
/// As for the C function.
pub unsafe fn mlock2(addr: *const c_void, len: size_t, flags: libc::c_uint) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { libc::syscall(libc::SYS_mlock2, addr, len, flags) as c_int }
}

/// `mlockall(2)`.
///
/// # Safety
/// As for the C function.
pub unsafe fn mlockall(flags: c_int) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { libc::syscall(libc::SYS_mlockall, flags) as c_int }
}

/// `munlockall(2)`.
///
/// # Safety
/// As for the C function.
pub unsafe fn munlockall() -> c_int {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_munlockall) as c_int }
}
