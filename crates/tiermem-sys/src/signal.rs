//! In-context fault handling: SIGBUS (userfaultfd with `UFFD_FEATURE_SIGBUS`,
//! poisoned pages) and SIGSEGV (write to a range made read-only) delivered
//! to a Rust callback on the faulting thread.
//!
//! The callback answers [`Disposition::Retry`] when it resolved the fault
//! (the instruction is restarted) or [`Disposition::Forward`] when the fault
//! is not its business; forwarding hands the signal to whatever handler was
//! installed before (the application's, Rust's stack-overflow handler, or
//! the default action, which ends the process with the right signal).
//!
//! The callback runs in a signal handler, so it must be async-signal-safe:
//! no allocation, no locks that the interrupted code may hold, no stdio.
//! `errno` is saved and restored around it. A panic in the callback
//! aborts the process (it cannot unwind out of the handler), which is the
//! right outcome for a dead fault handler: the alternative is a hang.

use crate::errno::Errno;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Which signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultSignalKind {
    /// SIGBUS
    Bus,
    /// SIGSEGV
    Segv,
}

impl FaultSignalKind {
    fn signo(self) -> libc::c_int {
        match self {
            FaultSignalKind::Bus => libc::SIGBUS,
            FaultSignalKind::Segv => libc::SIGSEGV,
        }
    }
    fn slot(self) -> usize {
        match self {
            FaultSignalKind::Bus => 0,
            FaultSignalKind::Segv => 1,
        }
    }
}

/// `si_code` of a SIGBUS from a userfaultfd range in SIGBUS mode.
pub const BUS_ADRERR: i32 = libc::BUS_ADRERR;
/// `si_code` of a SIGBUS from a poisoned page.
pub const BUS_MCEERR_AR: i32 = 4;

/// What the handler learned about a fault.
#[derive(Clone, Copy, Debug)]
pub struct SignalFault {
    /// The signal.
    pub kind: FaultSignalKind,
    /// The faulting address (`si_addr`).
    pub addr: usize,
    /// `si_code`.
    pub code: i32,
    /// The access was a write (x86 page-fault error code bit 1).
    pub write: bool,
}

/// The callback's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Resolved: restart the faulting instruction.
    Retry,
    /// Not ours: pass to the previously installed handler.
    Forward,
}

/// A fault callback.
pub type FaultCallback = fn(&SignalFault) -> Disposition;

static CALLBACKS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static PREVIOUS: [OnceLock<libc::sigaction>; 2] = [OnceLock::new(), OnceLock::new()];
static INSTALL: Mutex<()> = Mutex::new(());

/// Installs `callback` for `kind`, process-wide. A second call replaces the
/// callback and keeps the first call's chain to the previous handler.
///
/// `on_altstack` runs the handler on the thread's alternate signal stack if
/// it has one (right for SIGSEGV, which a stack overflow also raises; wrong
/// for a callback that needs a few KiB of stack).
pub fn install(kind: FaultSignalKind, callback: FaultCallback, on_altstack: bool) -> Result<(), Errno> {
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    // Release: the handler's Acquire load sees the callback's code and data
    // initialised before it can be called.
    CALLBACKS[kind.slot()].store(callback as usize, Ordering::Release);
    if PREVIOUS[kind.slot()].get().is_some() {
        return Ok(());
    }
    // SAFETY: sigaction is plain data; zeroed is a valid empty action.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_fault as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | if on_altstack { libc::SA_ONSTACK } else { 0 };
    // SAFETY: sa_mask is ours to initialise.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both structs are valid; installing a handler for a fault signal.
    if unsafe { libc::sigaction(kind.signo(), &sa, &mut old) } != 0 {
        let e = Errno::last();
        // Not installed after all: say so to `installed`.
        CALLBACKS[kind.slot()].store(0, Ordering::Release);
        return Err(e);
    }
    let _ = PREVIOUS[kind.slot()].set(old);
    Ok(())
}

/// Whether a callback is installed for `kind`.
pub fn installed(kind: FaultSignalKind) -> bool {
    CALLBACKS[kind.slot()].load(Ordering::Acquire) != 0
}

extern "C" fn on_fault(signo: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno location is thread-local and always valid.
    let saved_errno = unsafe { *libc::__errno_location() };
    let kind = if signo == libc::SIGBUS {
        FaultSignalKind::Bus
    } else {
        FaultSignalKind::Segv
    };
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    let write = if ctx.is_null() {
        false
    } else {
        // SAFETY: for SA_SIGINFO handlers ctx points to the interrupted
        // thread's ucontext_t; REG_ERR holds the page-fault error code.
        let err = unsafe { (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize] };
        err & 2 != 0
    };
    let cb = CALLBACKS[kind.slot()].load(Ordering::Acquire);
    // A signal sent by kill()/tgkill() (si_code <= 0) is never a fault of ours.
    let disposition = if cb != 0 && code > 0 {
        // SAFETY: only `install` stores into CALLBACKS, always a FaultCallback.
        let f: FaultCallback = unsafe { std::mem::transmute::<usize, FaultCallback>(cb) };
        f(&SignalFault {
            kind,
            addr,
            code,
            write,
        })
    } else {
        Disposition::Forward
    };
    if disposition == Disposition::Forward {
        forward(kind, signo, info, ctx, code);
    }
    // SAFETY: restore the interrupted code's errno.
    unsafe { *libc::__errno_location() = saved_errno };
}

fn forward(
    kind: FaultSignalKind,
    signo: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    code: i32,
) {
    let Some(prev) = PREVIOUS[kind.slot()].get() else {
        return;
    };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Restore the default action; returning re-executes the faulting
        // instruction, which now takes the default action with the original
        // siginfo. A signal sent by kill() does not recur, so raise it again.
        // SAFETY: sigaction with a valid struct; raise is async-signal-safe.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signo, &dfl, std::ptr::null_mut());
            if code <= 0 {
                libc::raise(signo);
            }
        }
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it
        // has this signature; we pass the kernel's own arguments.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(signo, info, ctx);
    } else {
        // SAFETY: a plain sa_handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(signo);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::{MapOptions, Mapping, Protection};
    use std::sync::atomic::AtomicU64;

    static HITS: AtomicUsize = AtomicUsize::new(0);
    static TARGET: AtomicUsize = AtomicUsize::new(0);
    static WRITE_SEEN: AtomicUsize = AtomicUsize::new(0);

    /// Unprotects the page on a SIGSEGV in the test mapping.
    fn unprotect(f: &SignalFault) -> Disposition {
        let base = TARGET.load(Ordering::Acquire);
        if f.addr < base || f.addr >= base + 4096 {
            return Disposition::Forward;
        }
        HITS.fetch_add(1, Ordering::Relaxed);
        if f.write {
            WRITE_SEEN.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: test code; mprotect of our own page is async-signal-safe.
        unsafe {
            libc::mprotect(
                base as *mut libc::c_void,
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        Disposition::Retry
    }

    #[test]
    fn segv_callback_resolves_and_sees_write() {
        let (m, _) = Mapping::anonymous(4096, &MapOptions::default()).unwrap();
        TARGET.store(m.addr(), Ordering::Release);
        install(FaultSignalKind::Segv, unprotect, true).unwrap();
        assert!(installed(FaultSignalKind::Segv));
        m.protect(0, 4096, Protection::Read).unwrap();
        // SAFETY: test code; page-aligned word in our mapping.
        let w = unsafe { &*(m.as_ptr().cast::<AtomicU64>()) };
        w.store(5, Ordering::Relaxed);
        assert_eq!(w.load(Ordering::Relaxed), 5);
        assert_eq!(HITS.load(Ordering::Relaxed), 1);
        assert_eq!(WRITE_SEEN.load(Ordering::Relaxed), 1);
    }
}
