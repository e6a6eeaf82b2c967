//! io_uring is refused in a process whose tiered memory the kernel's
//! accesses are trapped for.
//!
//! An io_uring request names its buffer in a queue entry in shared memory,
//! and the kernel reads or writes that buffer when it gets to it: during
//! `io_uring_enter`, in its own worker threads, or, with `SQPOLL`, with no
//! system call of the program at all; a direct read pins the pages for the
//! device until it completes, and a completion is reaped from shared memory
//! too. No trap sees when a buffer starts or stops being used, so no pin
//! can cover it: under `tiermem run`, direct reads through io_uring read
//! back corrupt pages on the handler-thread path (their pages were evicted
//! while the device filled them) and failed with `EFAULT` in-context.
//!
//! So `io_uring_setup` fails with `ENOSYS`, as on a kernel built without
//! io_uring, and programs take their other way (libuv, used by Node.js,
//! falls back to its thread pool; fio's `io_uring` engine stops with that
//! error). Made through this image's C library (fio, libuv) it traps and is
//! counted for the exit summary ([`refused`]); made with a library's own
//! `syscall` instruction (liburing) it fails in the filter, uncounted.
//! Program images this one runs inherit the filter: their `io_uring_setup`
//! fails the same way, tiered or not. Where no kernel access is trapped
//! (`TIERMEM_KERNEL_ACCESS=off`, the handler-thread path without the
//! signal guard, team mode, Overshadow, the SVM), a filter of its own
//! refuses it quietly ([`refuse`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use tiermem_sys::seccomp::{self, Refusal, TrapRule, TrappedSyscall};

/// `io_uring_setup`'s refusal: trapped where no thread can block SIGSYS,
/// quiet elsewhere.
pub(super) fn rule() -> TrapRule {
    let how = if seccomp::guard_loaded() {
        Refusal::Trapped
    } else {
        Refusal::Quiet
    };
    TrapRule::refused(libc::SYS_io_uring_setup, how)
}

/// Refuses io_uring in this process image, once, where the trap that
/// refuses it ([`rule`]) is not installed: every kind of tiered range
/// (engine regions whose calls are not trapped, team views, Overshadow
/// views, the SVM heap) calls this when it is registered. A ring set up
/// before keeps working.
pub(crate) fn refuse() {
    static DONE: OnceLock<()> = OnceLock::new();
    if seccomp::installed().is_some() {
        return;
    }
    DONE.get_or_init(|| {
        if let Err(e) = seccomp::refuse(&[libc::SYS_io_uring_setup]) {
            eprintln!(
                "tiermem: warning: io_uring is not refused ({e}): its reads into tiered memory may lose data"
            );
        }
    });
}

/// This process's refusals: its pid in the high half, the count in the
/// low half, so that a forked child counts its own from zero instead of
/// repeating its parent's.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// The result of a trapped `io_uring_setup`; None for other calls.
pub(super) fn on_trap(call: &TrappedSyscall<'_>) -> Option<i64> {
    (call.nr == libc::SYS_io_uring_setup).then(|| {
        let pid = u64::from(std::process::id());
        let _ = REFUSED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(if v >> 32 == pid { v + 1 } else { pid << 32 | 1 })
        });
        -(libc::ENOSYS as i64)
    })
}

/// How many `io_uring_setup` calls of this image's C library this process
/// had refused (a forked child's count starts at zero).
pub fn refused() -> u64 {
    let v = REFUSED.load(Ordering::Relaxed);
    if v >> 32 == u64::from(std::process::id()) {
        v & u64::from(u32::MAX)
    } else {
        0
    }
}
