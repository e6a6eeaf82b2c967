//! Stacks the program makes in tiered memory: `sigaltstack`,
//! `pthread_attr_setstack`, `pthread_attr_setstackaddr`, `makecontext` and
//! `clone` with a stack from `malloc` or `mmap` (of at least the
//! threshold), or in a static array taken over.
//!
//! The kernel writes a signal frame onto the stack a signal is delivered
//! on, and into the control block glibc keeps at the top of a thread's own
//! stack (`rseq`, the exit futex that `pthread_join` waits on). Those
//! writes are not faults tiermem can serve: on the in-context path (SIGBUS
//! delivery) a frame meeting an evicted page kills the process with
//! SIGSEGV. So the range is held resident until it is freed or unmapped
//! (`tiermem::hold_resident`): outside the near budget, which grows by it,
//! said once on stderr.

use crate::exec::next;
use libc::{c_int, c_void, pthread_attr_t, size_t, stack_t, ucontext_t};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Holds `[addr, addr + len)`, a stack, if it is tiered; says so the first
/// time.
fn hold(addr: usize, len: usize, call: &str) {
    hold_for(
        addr,
        len,
        call,
        "a stack",
        "the kernel writes signal frames there, which no fault can serve",
    );
}

/// Holds `[addr, addr + len)` (`what`) if it is tiered, for reason `why`;
/// says so the first time, and always when part of it cannot be held.
pub(crate) fn hold_for(addr: usize, len: usize, call: &str, what: &str, why: &str) {
    if addr == 0 || len == 0 {
        return;
    }
    let Some(held) = tiermem::hold_resident(addr, len) else {
        return;
    };
    static SAID: AtomicBool = AtomicBool::new(false);
    if !held.complete {
        eprintln!(
            "tiermem: {call}: part of {what} at {addr:#x} ({len} bytes) is in tiered memory that cannot be \
             brought in (poisoned or not allocated): {why}"
        );
    } else if held.new_bytes > 0 && !crate::report::quiet() && !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "tiermem: {call}: {what} of {:.2} MiB in tiered memory is held in near memory until it is freed, \
             outside the near budget ({why})",
            held.new_bytes as f64 / (1u64 << 20) as f64
        );
    }
}

/// Holds the stack whose top is `top` and whose size is `len` if known:
/// else the heap allocation below the top, or the 256 KiB below it.
fn hold_below(top: usize, len: Option<usize>, call: &str) {
    if top == 0 {
        return;
    }
    let allocation = crate::heap_of(top - 1).and_then(|h| h.holding(top - 1));
    let start = match (len, allocation) {
        (Some(l), Some((s, _))) => s.max(top.saturating_sub(l)),
        (Some(l), None) => top.saturating_sub(l),
        (None, Some((s, _))) => s,
        (None, None) => top.saturating_sub(256 << 10),
    };
    hold(start, top - start, call);
}

/// `sigaltstack(2)`.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn sigaltstack(ss: *const stack_t, old: *mut stack_t) -> c_int {
    // SAFETY: the caller passes a valid stack_t or null.
    if let Some(s) = unsafe { ss.as_ref() } {
        if s.ss_flags & libc::SS_DISABLE == 0 {
            hold(s.ss_sp as usize, s.ss_size, "sigaltstack");
        }
    }
    // SAFETY: forwarded as asked (glibc's is this system call).
    unsafe { libc::syscall(libc::SYS_sigaltstack, ss, old) as c_int }
}

/// `pthread_attr_setstack(3)`.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn pthread_attr_setstack(
    attr: *mut pthread_attr_t,
    addr: *mut c_void,
    size: size_t,
) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"pthread_attr_setstack");
    if f == 0 {
        return libc::ENOSYS;
    }
    // SAFETY: the C library's function of this signature.
    let real: unsafe extern "C" fn(*mut pthread_attr_t, *mut c_void, size_t) -> c_int =
        unsafe { std::mem::transmute(f) };
    // SAFETY: forwarded as asked.
    let r = unsafe { real(attr, addr, size) };
    if r == 0 {
        hold(addr as usize, size, "pthread_attr_setstack");
    }
    r
}

/// `pthread_attr_setstackaddr(3)` (obsolete: the stack's top, whose size
/// is the attribute's stack size).
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn pthread_attr_setstackaddr(attr: *mut pthread_attr_t, top: *mut c_void) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"pthread_attr_setstackaddr");
    if f == 0 {
        return libc::ENOSYS;
    }
    // SAFETY: the C library's function of this signature.
    let real: unsafe extern "C" fn(*mut pthread_attr_t, *mut c_void) -> c_int =
        unsafe { std::mem::transmute(f) };
    // SAFETY: forwarded as asked.
    let r = unsafe { real(attr, top) };
    if r == 0 {
        let mut size: size_t = 0;
        // SAFETY: `attr` was just set by the C library; `size` is ours.
        unsafe { libc::pthread_attr_getstacksize(attr, &mut size) };
        hold_below(top as usize, Some(size), "pthread_attr_setstackaddr");
    }
    r
}

/// Called by the `makecontext` trampoline with its first argument; returns
/// the C library's `makecontext` to jump to.
extern "C" fn before_makecontext(ucp: *const ucontext_t) -> usize {
    // SAFETY: the program's context, whose stack it has just set.
    if let Some(u) = unsafe { ucp.as_ref() } {
        hold(u.uc_stack.ss_sp as usize, u.uc_stack.ss_size, "makecontext");
    }
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"makecontext");
    if f == 0 {
        eprintln!("tiermem: makecontext: the C library's makecontext was not found");
        std::process::abort();
    }
    f
}

/// Called by the `clone` trampoline with the new stack's top; returns the
/// C library's `clone`.
extern "C" fn before_clone(top: usize) -> usize {
    hold_below(top, None, "clone");
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"clone");
    if f == 0 {
        eprintln!("tiermem: clone: the C library's clone was not found");
        std::process::abort();
    }
    f
}

/// `makecontext(3)`, variadic: saves the argument registers, holds the
/// context's stack, and jumps to the C library's with every register and
/// the stack as the caller left them.
///
/// # Safety
/// As for the C function.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn makecontext() {
    // Seven pushes on an entry stack of 8 mod 16 align the call.
    std::arch::naked_asm!(
        "push rdi", "push rsi", "push rdx", "push rcx", "push r8", "push r9", "push rax",
        "call {hook}",
        "mov r11, rax",
        "pop rax", "pop r9", "pop r8", "pop rcx", "pop rdx", "pop rsi", "pop rdi",
        "jmp r11",
        hook = sym before_makecontext,
    )
}

/// `clone(2)`'s C library wrapper, variadic: holds the new stack (the
/// second argument), then jumps to the C library's as `makecontext` does.
///
/// # Safety
/// As for the C function.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn clone() {
    std::arch::naked_asm!(
        "push rdi", "push rsi", "push rdx", "push rcx", "push r8", "push r9", "push rax",
        "mov rdi, rsi",
        "call {hook}",
        "mov r11, rax",
        "pop rax", "pop r9", "pop r8", "pop rcx", "pop rdx", "pop rsi", "pop rdi",
        "jmp r11",
        hook = sym before_clone,
    )
}
