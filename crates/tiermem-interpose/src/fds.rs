//! `close`, `close_range`, `closefrom`, `dup2` and `dup3` leave tiermem's
//! own descriptors alone (`tiermem_sys::fdguard`): a program that closes
//! every descriptor above 2, or `dup2`s onto one of tiermem's, took away
//! the userfaultfd or the far store, and every evicted page came back
//! wrong. A close of one is reported as done; `dup2` onto one fails with
//! `EBUSY` (and says why, once).

use crate::next;
use libc::{c_int, c_uint};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tiermem_sys::fdguard::is_guarded;

/// `close(2)`.
#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    if is_guarded(fd) {
        return 0;
    }
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    match next(&NEXT, c"close") {
        // SAFETY: a system call on a plain integer.
        0 => unsafe { libc::syscall(libc::SYS_close, fd) as c_int },
        f => {
            // SAFETY: the C library's close.
            let real: extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(f) };
            real(fd)
        }
    }
}

/// `close_range(lo, hi, flags)` through the system call, in pieces around
/// tiermem's descriptors.
fn close_range_around(lo: c_uint, hi: c_uint, flags: c_int) -> c_int {
    tiermem_sys::fdguard::close_range_around(lo, hi, flags as c_uint, &mut |a, b| {
        // SAFETY: a system call on plain integers.
        unsafe { libc::syscall(libc::SYS_close_range, a, b, flags as c_uint) }
    }) as c_int
}

/// `close_range(2)`.
#[no_mangle]
pub extern "C" fn close_range(lo: c_uint, hi: c_uint, flags: c_int) -> c_int {
    close_range_around(lo, hi, flags)
}

/// `closefrom(3)`.
#[no_mangle]
pub extern "C" fn closefrom(lo: c_int) {
    let lo = lo.max(0) as c_uint;
    if close_range_around(lo, c_uint::MAX, 0) == 0 {
        return;
    }
    // No close_range (kernels before 5.9): one by one, as glibc does.
    // SAFETY: getdtablesize has no preconditions.
    let top = unsafe { libc::getdtablesize() }.max(0) as c_uint;
    for fd in lo..top {
        close(fd as c_int);
    }
}

fn refuse_dup_onto(fd: c_int) -> c_int {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "tiermem: the program duplicated a descriptor onto {fd}, which tiermem uses for its \
             tiered memory; refused with EBUSY"
        );
    }
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = libc::EBUSY };
    -1
}

/// `dup2(2)`.
#[no_mangle]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new && is_guarded(new) {
        return refuse_dup_onto(new);
    }
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    match next(&NEXT, c"dup2") {
        // SAFETY: a system call on plain integers.
        0 => unsafe { libc::syscall(libc::SYS_dup3, old, new, 0) as c_int },
        f => {
            // SAFETY: the C library's dup2.
            let real: extern "C" fn(c_int, c_int) -> c_int = unsafe { std::mem::transmute(f) };
            real(old, new)
        }
    }
}

/// `dup3(2)`.
#[no_mangle]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new && is_guarded(new) {
        return refuse_dup_onto(new);
    }
    // SAFETY: a system call on plain integers.
    unsafe { libc::syscall(libc::SYS_dup3, old, new, flags) as c_int }
}
