//! The exported `execl`, `execle` and `execlp`: C variadic functions
//! (src/execl.c gathers their arguments and calls the `execve`/`execvpe`
//! interposers of src/exec.rs). Symbols of a C object are not exported
//! from a Rust `cdylib`, so these exported functions, naked (x86-64), jump
//! to the C ones, leaving every argument register and the stack as the
//! caller left them.

use libc::c_int;

extern "C" {
    fn tiermem_c_execl();
    fn tiermem_c_execle();
    fn tiermem_c_execlp();
}

/// `execl(3)`, on copies (src/exec.rs, through src/execl.c).
///
/// # Safety
/// As for the C function (whose variadic arguments it passes on).
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execl() -> c_int {
    std::arch::naked_asm!("jmp {f}", f = sym tiermem_c_execl)
}

/// `execle(3)`, on copies.
///
/// # Safety
/// As for `execl`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execle() -> c_int {
    std::arch::naked_asm!("jmp {f}", f = sym tiermem_c_execle)
}

/// `execlp(3)`, on copies.
///
/// # Safety
/// As for `execl`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execlp() -> c_int {
    std::arch::naked_asm!("jmp {f}", f = sym tiermem_c_execlp)
}
