//! The signal guard: the program's own signal system calls, trapped by the
//! kernel-access filter ([`crate::seccomp`]) and redone so that tiermem's
//! fault signals stay tiermem's.
//!
//! The interposers of `tiermem-interpose` see the C library's public
//! functions only. Every other way in ends in one of three system calls
//! made from the C library's code: glibc's internal `__libc_sigaction`
//! (`__sysv_signal`, which `signal()` is under `-std=c99`; `sigvec`;
//! `sigignore`), its internal masks (the helper threads of `SIGEV_THREAD`
//! timers, POSIX aio and `getaddrinfo_a` start with every signal blocked;
//! `pthread_create`, `raise` and `siglongjmp` set masks), and
//! `syscall(SYS_rt_sigaction, ...)`. The filter traps those calls when this
//! image's C library makes them, and [`emulate`] runs them so that:
//!
//! - `rt_sigaction` for SIGBUS or SIGSEGV (while tiermem's fault handler is
//!   installed) or SIGSYS (while the trap's handler is) records the
//!   program's action as the one tiermem chains to, exactly as the
//!   interposed `sigaction` does, and reports the recorded one as the old
//!   action; for any other signal the call runs with the three taken out
//!   of `sa_mask`;
//! - `rt_sigprocmask` changes the mask the interrupted code returns to
//!   (the handler's frame), without SIGBUS, SIGSEGV and SIGSYS;
//! - `rt_sigsuspend` waits under the mask asked for, less the three;
//! - `close`, `close_range`, `dup2` and `dup3` on the numbers where
//!   tiermem's descriptors are leave those open ([`crate::fdguard`]).
//!
//! In a child sharing the memory (`vfork`, `posix_spawn`) an action is set
//! for the child, as asked: it is about to `exec`.
//!
//! Filters outlive `execve` and trap only calls from the C library of the
//! image that loaded them, which another image has elsewhere (addresses
//! are randomised). Without address randomisation another image could
//! have its C library at the same place and, with no handler for the trap,
//! die at its first `sigprocmask`: the guard is left out then ([`wanted`]).

use super::TrappedSyscall;
use crate::signal::{self, FaultSignalKind, KernelSigaction};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// The bit of signal `sig` in a kernel mask.
const fn bit(sig: libc::c_int) -> u64 {
    1 << (sig - 1)
}

/// What no mask may hold: tiermem's fault signals, and what the kernel
/// never blocks.
const NEVER_BLOCKED: u64 =
    bit(libc::SIGBUS) | bit(libc::SIGSEGV) | bit(libc::SIGSYS) | bit(libc::SIGKILL) | bit(libc::SIGSTOP);

/// The process the guard was armed in (updated in `fork`ed children): a
/// call trapped under another pid comes from a child that shares the
/// memory (`vfork`, `posix_spawn`) and is about to `exec`.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Whether the filter should carry the guard: only where the C library's
/// code was found (`sites`), where addresses are randomised (see the
/// module's documentation), and while this thread is the process's only
/// one and keeps SIGSYS open. A trap raised while SIGSYS is blocked kills
/// the process, and once the guard is in nothing can block it; but another
/// thread could have blocked it before, for a moment (`pthread_create`
/// blocks every signal around the `clone`, and so starts the new thread):
/// its next `rt_sigprocmask` would then be trapped with SIGSYS blocked.
/// A process with one thread has no such moment in flight. Under the
/// preload library the filter comes in its constructor, before `main`.
pub(crate) fn wanted(sites: &[(u64, u64)]) -> bool {
    !sites.is_empty() && randomised() && alone_with_sigsys_open()
}

fn alone_with_sigsys_open() -> bool {
    let alone = std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.count() == 1);
    let mut now = 0u64;
    // SAFETY: a query: no set, an 8-byte out-parameter.
    let r = unsafe {
        crate::trampoline::call_trampoline(
            libc::SYS_rt_sigprocmask,
            [libc::SIG_BLOCK as u64, 0, &mut now as *mut u64 as u64, 8, 0, 0],
        )
    };
    alone && r == 0 && now & bit(libc::SIGSYS) == 0
}

/// Whether program images of this process get randomised addresses: the
/// system's setting, and this process's personality (`setarch -R`, gdb).
fn randomised() -> bool {
    let system =
        std::fs::read_to_string("/proc/sys/kernel/randomize_va_space").map_or(true, |s| s.trim() != "0");
    // SAFETY: personality(0xffffffff) only reads the current persona.
    let persona = unsafe { libc::personality(0xffff_ffff) };
    system && persona != -1 && persona & libc::ADDR_NO_RANDOMIZE == 0
}

/// Arms the guard in this process: called once, before the filter loads.
pub(crate) fn arm() {
    extern "C" fn in_child() {
        // SAFETY: getpid has no preconditions.
        OWNER.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    }
    extern "C" fn in_child_done() {
        in_child();
        fork_done();
    }
    if OWNER.swap(std::process::id() as i32, Ordering::Relaxed) == 0 {
        crate::thread::at_fork(Some(fork_prepared), Some(fork_done), Some(in_child_done));
    }
}

/// The thread inside the C library's `fork()` now, whose fork handlers
/// have run (tiermem's copy the far data into the child), 0 when none.
static FORKING: AtomicU32 = AtomicU32::new(0);

extern "C" fn fork_prepared() {
    FORKING.store(crate::thread::gettid(), Ordering::Release);
}

extern "C" fn fork_done() {
    FORKING.store(0, Ordering::Release);
}

/// A fork system call the filter trapped: the C library's `fork`, whose
/// handlers have run, goes ahead. Any other (`syscall(SYS_fork)`,
/// `clone(SIGCHLD)` on the caller's stack, glibc's `_Fork`, which run no
/// fork handlers) gets tiermem's own around it: without them the child
/// would read zeros where its parent's evicted data is, take the
/// parent's regions for its own, and free into the far store they share.
fn fork(call: &mut TrappedSyscall<'_>) -> i64 {
    use crate::thread::{run_fork_hooks, ForkStage};
    if FORKING.load(Ordering::Acquire) == crate::thread::gettid() {
        return call.execute(call.nr, call.args, false);
    }
    run_fork_hooks(ForkStage::Prepare);
    // The child returns from the call here too, and leaves the handler
    // through its copy of the signal frame.
    let r = call.execute(call.nr, call.args, false);
    run_fork_hooks(if r == 0 {
        ForkStage::Child
    } else {
        ForkStage::Parent
    });
    r
}

/// Runs a trapped `rt_sigaction`, `rt_sigprocmask` or `rt_sigsuspend` as
/// the module's documentation says, and sets its result. In the SIGSYS
/// handler: no allocation, no lock the interrupted code may hold.
pub(crate) fn emulate(call: &mut TrappedSyscall<'_>) {
    let mask_size = match call.nr {
        libc::SYS_rt_sigsuspend => call.args[1],
        libc::SYS_rt_sigaction | libc::SYS_rt_sigprocmask => call.args[3],
        _ => 8,
    };
    let r = if mask_size != 8 {
        -(libc::EINVAL as i64)
    } else {
        match call.nr {
            libc::SYS_rt_sigaction => sigaction(call),
            libc::SYS_rt_sigprocmask => sigprocmask(call),
            libc::SYS_rt_sigsuspend => sigsuspend(call),
            libc::SYS_clone | libc::SYS_fork => fork(call),
            libc::SYS_close | libc::SYS_close_range | libc::SYS_dup2 | libc::SYS_dup3 => descriptors(call),
            nr => call.execute(nr, call.args, true),
        }
    };
    call.set_result(r);
}

/// A `close`, `close_range`, `dup2` or `dup3` that met the numbers of
/// tiermem's descriptors: what the interposers of `tiermem-interpose` do
/// (a close of one of tiermem's is reported done and leaves it open; a
/// duplicate onto one fails with EBUSY), for calls made around them.
fn descriptors(call: &mut TrappedSyscall<'_>) -> i64 {
    use crate::fdguard::{close_range_around, is_guarded};
    let a = call.args;
    // The kernel reads these arguments as unsigned int.
    let (x, y) = (a[0] as u32, a[1] as u32);
    match call.nr {
        libc::SYS_close if is_guarded(x as i32) => 0,
        libc::SYS_dup2 | libc::SYS_dup3 if x != y && is_guarded(y as i32) => -(libc::EBUSY as i64),
        libc::SYS_close_range => close_range_around(x, y, a[2] as u32, &mut |lo, hi| {
            call.execute(
                libc::SYS_close_range,
                [lo as u64, hi as u64, a[2], 0, 0, 0],
                false,
            )
        }),
        nr => call.execute(nr, a, false),
    }
}

fn sigprocmask(call: &mut TrappedSyscall<'_>) -> i64 {
    let [how, set, old, ..] = call.args;
    let now = call.interrupted_mask();
    if set != 0 {
        // SAFETY: the program's set, as it passed it to the kernel (read
        // before `old` is written: they may be the same).
        let s = unsafe { std::ptr::read_volatile(set as *const u64) };
        let new = match how as libc::c_int {
            libc::SIG_BLOCK => now | s,
            libc::SIG_UNBLOCK => now & !s,
            libc::SIG_SETMASK => s,
            _ => return -(libc::EINVAL as i64),
        };
        call.set_interrupted_mask(new & !NEVER_BLOCKED);
    }
    if old != 0 {
        // SAFETY: the program's out-parameter.
        unsafe { std::ptr::write_volatile(old as *mut u64, now) };
    }
    0
}

fn sigsuspend(call: &mut TrappedSyscall<'_>) -> i64 {
    // SAFETY: the program's mask, as it passed it to the kernel.
    let mask = unsafe { std::ptr::read_volatile(call.args[0] as *const u64) } & !NEVER_BLOCKED;
    let args = [&mask as *const u64 as u64, 8, 0, 0, 0, 0];
    call.execute(libc::SYS_rt_sigsuspend, args, true)
}

/// The action tiermem chains to for `sig`, when tiermem's own handler is
/// the one installed: (current, replace).
type Chain = (
    fn() -> Option<libc::sigaction>,
    fn(libc::sigaction) -> Option<libc::sigaction>,
);

fn chain_of(sig: libc::c_int) -> Option<Chain> {
    match sig {
        libc::SIGBUS if signal::owns(FaultSignalKind::Bus) => Some((
            || signal::chained(FaultSignalKind::Bus),
            |a| signal::set_chained(FaultSignalKind::Bus, a),
        )),
        libc::SIGSEGV if signal::owns(FaultSignalKind::Segv) => Some((
            || signal::chained(FaultSignalKind::Segv),
            |a| signal::set_chained(FaultSignalKind::Segv, a),
        )),
        libc::SIGSYS if super::owns_sigsys() => Some((super::chained, super::set_chained)),
        _ => None,
    }
}

fn sigaction(call: &mut TrappedSyscall<'_>) -> i64 {
    let [sig, act, old, ..] = call.args;
    // SAFETY: getpid has no preconditions.
    let in_owner = unsafe { libc::getpid() } == OWNER.load(Ordering::Relaxed);
    // SAFETY: the program's action, as it passed it to the kernel.
    let new = (act != 0).then(|| unsafe { std::ptr::read_volatile(act as *const KernelSigaction) });
    match chain_of(sig as libc::c_int).filter(|_| in_owner) {
        Some((current, replace)) => {
            let was = match new {
                Some(k) => replace(k.to_libc()),
                None => current(),
            };
            if old != 0 {
                let was = was.map(|a| KernelSigaction::from_libc(&a)).unwrap_or_default();
                // SAFETY: the program's out-parameter.
                unsafe { std::ptr::write_volatile(old as *mut KernelSigaction, was) };
            }
            0
        }
        None => {
            let mut args = call.args;
            let mut k = new.unwrap_or_default();
            if new.is_some() {
                k.mask &= !NEVER_BLOCKED;
                args[1] = &k as *const KernelSigaction as u64;
            }
            call.execute(libc::SYS_rt_sigaction, args, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_and_c_library_actions_convert_both_ways() {
        // SAFETY: a zeroed sigaction is valid plain data.
        let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
        a.sa_sigaction = 0x1234;
        a.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND;
        // SAFETY: valid set.
        unsafe { libc::sigaddset(&mut a.sa_mask, libc::SIGUSR1) };
        let k = KernelSigaction::from_libc(&a);
        assert_eq!(k.flags, (libc::SA_SIGINFO | libc::SA_RESETHAND) as u32 as u64);
        assert_eq!(k.mask, bit(libc::SIGUSR1));
        let b = k.to_libc();
        assert_eq!(b.sa_sigaction, 0x1234);
        assert_eq!(b.sa_flags, a.sa_flags);
        // SAFETY: valid set.
        assert_eq!(unsafe { libc::sigismember(&b.sa_mask, libc::SIGUSR1) }, 1);
        assert_eq!(KernelSigaction::from_libc(&b), k);
    }
}
