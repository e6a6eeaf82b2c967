//! The system-call trampoline: `syscall(nr, a..f)` at an address that
//! tiermem's seccomp filters ([`crate::seccomp`]) always let through.
//! tiermem's own calls on tiered memory (a write-back `pwrite` straight from
//! a region page, its signal calls) go this way so that they are never
//! trapped. A low module: [`crate::mm`], [`crate::signal`] and
//! [`crate::uffd`] call through it, and [`crate::seccomp`] places its
//! fixed-address copy ([`set_copy`]).

use std::sync::atomic::{AtomicUsize, Ordering};

std::arch::global_asm!(
    ".pushsection .text.tiermem_trap_syscall6,\"ax\",@progbits",
    ".globl tiermem_trap_syscall6",
    ".type tiermem_trap_syscall6,@function",
    "tiermem_trap_syscall6:",
    "    mov rax, rdi",
    "    mov rdi, rsi",
    "    mov rsi, rdx",
    "    mov rdx, rcx",
    "    mov r10, r8",
    "    mov r8, r9",
    "    mov r9, [rsp + 8]",
    "    syscall",
    ".globl tiermem_trap_syscall_return",
    "tiermem_trap_syscall_return:",
    "    ret",
    ".size tiermem_trap_syscall6, . - tiermem_trap_syscall6",
    ".popsection",
);

extern "C" {
    /// `syscall(nr, a..f)` at an address the filter always allows.
    fn tiermem_trap_syscall6(nr: i64, a: u64, b: u64, c: u64, d: u64, e: u64, f: u64) -> i64;
    /// The instruction after the trampoline's `syscall`: what the filter
    /// sees as `instruction_pointer` for calls made from it.
    static tiermem_trap_syscall_return: u8;
}

/// A raw system call that the filter never traps: tiermem's own calls on
/// tiered memory (a write-back `pwrite` straight from a region page) must
/// not be trapped and pinned by the thread that owns the page.
///
/// Returns like `syscall(2)`: -1 with `errno` set on failure.
///
/// # Safety
/// As for the system call made.
pub(crate) unsafe fn untrapped_syscall(nr: i64, args: [u64; 6]) -> i64 {
    // SAFETY: forwarded from the caller.
    let r = unsafe { call_trampoline(nr, args) };
    if (-4095..0).contains(&r) {
        // SAFETY: errno is thread-local and always valid.
        unsafe { *libc::__errno_location() = -r as i32 };
        return -1;
    }
    r
}

/// The trampoline's copy at the fixed address (0: not made yet; the
/// linked one serves, as no filter of this image exists yet).
static TRAMPOLINE: AtomicUsize = AtomicUsize::new(0);

type Syscall6 = unsafe extern "C" fn(i64, u64, u64, u64, u64, u64, u64) -> i64;

/// Calls the trampoline: the fixed copy once it exists. Returns the raw
/// result (a negative errno on failure). Never trapped by a filter of
/// tiermem's: tiermem's own signal calls ([`crate::signal`]) go this way.
///
/// # Safety
/// As for the system call made.
pub(crate) unsafe fn call_trampoline(nr: i64, a: [u64; 6]) -> i64 {
    // Acquire: the copy's bytes are in place before its address is seen.
    let f = match TRAMPOLINE.load(Ordering::Acquire) {
        0 => tiermem_trap_syscall6 as Syscall6,
        // SAFETY: TRAMPOLINE holds the address of an executable copy of
        // tiermem_trap_syscall6 (position-independent code).
        p => unsafe { std::mem::transmute::<usize, Syscall6>(p) },
    };
    // SAFETY: forwarded from the caller.
    unsafe { f(nr, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// The trampoline's code, through its final `ret`.
pub(crate) fn code() -> &'static [u8] {
    let start = tiermem_trap_syscall6 as *const () as usize;
    // Taking the address of the symbol defined in global_asm above.
    let ret = std::ptr::addr_of!(tiermem_trap_syscall_return) as usize;
    // SAFETY: `start..=ret` is the trampoline's code in our text.
    unsafe { std::slice::from_raw_parts(start as *const u8, ret + 1 - start) }
}

/// Offset in the trampoline of the instruction after its `syscall`: what a
/// filter sees as `instruction_pointer` for calls made from it.
pub(crate) fn return_offset() -> usize {
    let start = tiermem_trap_syscall6 as *const () as usize;
    std::ptr::addr_of!(tiermem_trap_syscall_return) as usize - start
}

/// Address of the fixed copy (0: not made yet).
pub(crate) fn copy_at() -> usize {
    TRAMPOLINE.load(Ordering::Acquire)
}

/// Records the fixed copy at `at`, whose bytes are in place: calls go
/// through it from now on.
pub(crate) fn set_copy(at: usize) {
    // Release: pairs with call_trampoline's Acquire.
    TRAMPOLINE.store(at, Ordering::Release);
}
