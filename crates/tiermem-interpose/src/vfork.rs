//! `vfork`, bracketed by `tiermem_sys::thread::vfork_started` and
//! `vfork_returned` in the parent: while a `vfork` is in flight, the core
//! serves a child's faults on tiered memory through a thread of the owner
//! (the child's descriptors are not the engine's; `tiermem::vfork`).
//!
//! The child returns from the call first and runs on the parent's stack
//! until it `exec`s; the parent then returns through the same frame, which
//! the child may have overwritten. So, as in the C library, the function
//! is naked: the return address is kept in a register across the system
//! call, and nothing else is kept on the stack.

use libc::pid_t;

/// `vfork(2)` (module doc).
///
/// # Safety
/// As for the C function: the child may only `exec` or `_exit`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn vfork() -> pid_t {
    std::arch::naked_asm!(
        // Entered with rsp 8 below a 16-byte boundary: align for the call.
        "sub rsp, 8",
        "call {started}",
        "add rsp, 8",
        // The return address into rdi, which the system call keeps.
        "pop rdi",
        "mov eax, {nr}",
        "syscall",
        "push rdi",
        "test rax, rax",
        "jz 2f",
        // The parent (or a failure): the child has exec'd or ended.
        "push rax",
        "mov rdi, rax",
        "call {returned}",
        "pop rax",
        "cmp rax, -4095",
        "jae 3f",
        "2:",
        "ret",
        "3:",
        "mov rdi, rax",
        "jmp {failed}",
        started = sym started,
        returned = sym returned,
        failed = sym failed,
        nr = const libc::SYS_vfork,
    )
}

extern "C" fn started() {
    tiermem_sys::thread::vfork_started();
}

extern "C" fn returned(result: i64) {
    tiermem_sys::thread::vfork_returned(result.clamp(-1, i32::MAX as i64) as i32);
}

/// A failed `vfork`: errno from the kernel's `-errno`, -1.
extern "C" fn failed(result: i64) -> pid_t {
    crate::set_errno(-(result as libc::c_int));
    -1
}
