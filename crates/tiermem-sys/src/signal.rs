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
//!
//! Serving a fault is atomic with respect to asynchronous signals: the
//! handlers are installed with every signal but the synchronous ones
//! ([`SYNCHRONOUS`]) in `sa_mask`, so a timer, `pthread_kill` or glibc's
//! cancellation signal arriving during a service is delivered when it
//! ends, never inside it (a handler that touched tiered memory there would
//! meet a blocked SIGBUS and be killed; one that `siglongjmp`ed out would
//! leave a page busy). The same mask, [`AsyncSignalsBlocked`], guards
//! runtime code outside handlers that owns pages or locks the fault path
//! takes, and threads tiermem creates start with it ([`crate::thread`]).
//!
//! A fault signal that is blocked when the kernel raises it kills the
//! process (the kernel forces the default action); so does a blocked
//! SIGSYS raised by the kernel-access trap ([`crate::seccomp`]).
//! [`strip_fault_signals`] keeps SIGBUS, SIGSEGV and SIGSYS out of a mask; the C library's interposers of
//! `sigprocmask`, `pthread_sigmask` and `sigaction` use it, and installing
//! tiermem's handlers strips them from the `sa_mask` of handlers already
//! installed.

use crate::errno::Errno;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// `sigaction(2)` made by tiermem itself, straight to the kernel through
/// the kernel-access trap's trampoline: neither an interposer nor a filter
/// of tiermem's ever sees it (the signal guard, [`crate::seccomp`]'s guard, traps
/// the program's own calls). Checks the signal number as the C library
/// does; an action without a restorer gets tiermem's.
///
/// # Safety
/// `act` and `oact` null or valid.
pub unsafe fn kernel_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    oact: *mut libc::sigaction,
) -> libc::c_int {
    // The C library keeps 32 and 33 (cancellation, set*id) for itself.
    if !(1..=64).contains(&sig) || sig == 32 || sig == 33 {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    let new = (!act.is_null()).then(|| {
        // SAFETY: non-null and valid by the caller's promise.
        let mut k = KernelSigaction::from_libc(unsafe { &*act });
        if k.flags & SA_RESTORER == 0 || k.restorer == 0 {
            k.flags |= SA_RESTORER;
            k.restorer = tiermem_restore_rt as *const () as usize;
        }
        k
    });
    let mut old = KernelSigaction::default();
    let kact = new.as_ref().map_or(0, |k| k as *const KernelSigaction as u64);
    let koact = if oact.is_null() {
        0
    } else {
        &mut old as *mut KernelSigaction as u64
    };
    // SAFETY: valid kernel structs or null; an 8-byte mask.
    let r = unsafe {
        crate::trampoline::call_trampoline(libc::SYS_rt_sigaction, [sig as u64, kact, koact, 8, 0, 0])
    };
    if r < 0 {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = -r as i32 };
        return -1;
    }
    if !oact.is_null() {
        // SAFETY: valid by the caller's promise.
        unsafe { *oact = old.to_libc() };
    }
    0
}

pub(crate) use kernel_sigaction as c_sigaction;

/// `SA_RESTORER`: the kernel returns from a handler through `sa_restorer`.
const SA_RESTORER: u64 = 0x0400_0000;

// What a handler returns to: `rt_sigreturn`, in the exact bytes of the C
// library's `__restore_rt` (`mov rax, 15; syscall`), which unwinders and
// debuggers recognise as a signal frame. The `nop` before it is there for
// the same reason as glibc's: an unwinder looks up the caller's pc - 1.
std::arch::global_asm!(
    ".pushsection .text.tiermem_restore_rt,\"ax\",@progbits",
    ".globl tiermem_restore_rt",
    ".hidden tiermem_restore_rt",
    ".type tiermem_restore_rt,@function",
    "    nop",
    "tiermem_restore_rt:",
    "    .byte 0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00",
    "    .byte 0x0f, 0x05",
    ".size tiermem_restore_rt, . - tiermem_restore_rt",
    ".popsection",
);

extern "C" {
    /// The restorer above.
    fn tiermem_restore_rt();
}

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
/// The actions tiermem's handlers chain to.
static CHAINED: [ChainedAction; 2] = [ChainedAction::new(), ChainedAction::new()];
static INSTALLED: [OnceLock<()>; 2] = [OnceLock::new(), OnceLock::new()];
static INSTALL: Mutex<()> = Mutex::new(());

/// Signals the kernel raises synchronously at the faulting instruction:
/// left open while a fault is served (and never blocked by tiermem).
pub const SYNCHRONOUS: [libc::c_int; 6] = [
    libc::SIGBUS,
    libc::SIGSEGV,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// glibc's cancellation signal (`SIGCANCEL`, the first real-time signal),
/// which its `sigfillset`/`sigaddset` leave out of any set.
pub const SIGCANCEL: libc::c_int = 32;

/// Every signal except the synchronous ones and glibc's `SIGSETXID`: what
/// a fault service (and every thread tiermem creates) blocks.
///
/// glibc's `sigfillset` leaves out its internal signals; `SIGCANCEL` is
/// added back by hand: an asynchronous `pthread_cancel` must not unwind a
/// thread out of a fault service. `SIGSETXID` stays open: `setuid()` in
/// another thread waits until every thread has run it, and its handler
/// only makes a system call.
pub fn async_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigfillset/sigdelset initialise and
    // edit it in place; the first 64 bits of glibc's sigset_t are the
    // kernel's mask, bit n-1 for signal n.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for s in SYNCHRONOUS {
            libc::sigdelset(&mut set, s);
        }
        let words = (&mut set as *mut libc::sigset_t).cast::<u64>();
        *words |= 1u64 << (SIGCANCEL - 1);
        set
    }
}

/// Unblocks SIGBUS, SIGSEGV and SIGSYS in the calling thread (one that
/// may have started with every signal blocked and will touch tiered
/// memory).
pub fn unblock_fault_signals() {
    // SAFETY: plain data, initialised by sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set; unblocking changes no memory of ours.
    unsafe {
        libc::sigemptyset(&mut set);
        for s in [libc::SIGBUS, libc::SIGSEGV, libc::SIGSYS] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Removes SIGBUS, SIGSEGV and SIGSYS from `set`: a thread (or a handler)
/// that blocks them is killed by the first fault tiermem must serve for it,
/// or by the first system call on tiered memory that the kernel-access
/// trap (`seccomp`, SIGSYS) must serve (an MPI progress thread that blocks
/// every signal and `recv`s into a tiered buffer). Returns whether
/// anything changed.
pub fn strip_fault_signals(set: &mut libc::sigset_t) -> bool {
    let mut changed = false;
    for s in [libc::SIGBUS, libc::SIGSEGV, libc::SIGSYS] {
        // SAFETY: `set` is a valid, initialised sigset_t.
        unsafe {
            if libc::sigismember(set, s) == 1 {
                libc::sigdelset(set, s);
                changed = true;
            }
        }
    }
    changed
}

/// Blocks every asynchronous signal in the calling thread until dropped
/// (then restores the mask it found): code that owns pages or holds a lock
/// the fault path takes must not be interrupted by a handler that could
/// touch tiered memory. Two system calls; not for per-fault use (signal
/// handlers get the mask from `sa_mask` for free).
#[must_use]
pub struct AsyncSignalsBlocked {
    old: libc::sigset_t,
}

impl AsyncSignalsBlocked {
    /// Blocks them now.
    pub fn new() -> AsyncSignalsBlocked {
        let set = async_signals();
        // SAFETY: as above.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both sets are valid; rt_sigprocmask cannot fail with them.
        unsafe { raw_sigprocmask(libc::SIG_BLOCK, &set, &mut old) };
        AsyncSignalsBlocked { old }
    }
}

impl Default for AsyncSignalsBlocked {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for AsyncSignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe { raw_sigprocmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// `rt_sigprocmask` without the C library (which an interposer may
/// replace, and whose calls the signal guard traps): the kernel's 8-byte
/// mask. Returns 0, or -1 with `errno` set.
///
/// # Safety
/// `set` and `old` must be null or point to valid sigset_t values.
pub unsafe fn raw_sigprocmask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    // SAFETY: the caller passes valid or null pointers; the kernel reads and
    // writes 8 bytes (_NSIG / 8) of each.
    let r = unsafe {
        crate::trampoline::call_trampoline(
            libc::SYS_rt_sigprocmask,
            [how as u64, set as u64, old as u64, 8, 0, 0],
        )
    };
    if r < 0 {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = -r as i32 };
        return -1;
    }
    0
}

/// The action tiermem chains to for `kind` (what was installed before it,
/// or what an interposed `sigaction` installed after it).
pub fn chained(kind: FaultSignalKind) -> Option<libc::sigaction> {
    CHAINED[kind.slot()].get()
}

/// Whether a fault of `kind` that tiermem does not serve takes the
/// default action (no handler of the program's to chain to): the process
/// dies of it. Two atomic loads, async-signal-safe.
pub fn chained_is_default(kind: FaultSignalKind) -> bool {
    let (h, _) = CHAINED[kind.slot()].handler();
    h == libc::SIG_DFL || h == libc::SIG_IGN
}

/// Replaces the action tiermem chains to for `kind` (an interposed
/// `sigaction` installing the application's handler after tiermem's: the
/// application's handler runs for every fault tiermem does not serve).
/// Returns the action chained to before. `None` if tiermem's handler is
/// not installed: the caller should then call the real `sigaction`.
pub fn set_chained(kind: FaultSignalKind, act: libc::sigaction) -> Option<libc::sigaction> {
    INSTALLED[kind.slot()].get()?;
    CHAINED[kind.slot()].replace(act)
}

/// The program's own action for a signal whose handler is tiermem's: what
/// tiermem's handler chains to. The handler reads the action's handler and
/// flags from two atomics, without locks. The whole action, for `sigaction`
/// queries, sits under a lock taken only with asynchronous signals
/// blocked: a signal handler that calls `sigaction` for the same signal
/// (a crash handler restoring the default action) could otherwise
/// interrupt its own thread holding the lock and wait for it forever.
pub(crate) struct ChainedAction {
    handler: AtomicUsize,
    flags: AtomicUsize,
    whole: Mutex<Option<libc::sigaction>>,
}

impl ChainedAction {
    /// Nothing recorded: the default action.
    pub(crate) const fn new() -> ChainedAction {
        ChainedAction {
            handler: AtomicUsize::new(libc::SIG_DFL),
            flags: AtomicUsize::new(0),
            whole: Mutex::new(None),
        }
    }

    /// The action recorded, if any.
    pub(crate) fn get(&self) -> Option<libc::sigaction> {
        let _blocked = AsyncSignalsBlocked::new();
        let guard = self.whole.lock().unwrap_or_else(|p| p.into_inner());
        let act = *guard;
        // Before the signals are let in again (a tail expression's
        // temporary guard would outlive `_blocked`).
        drop(guard);
        act
    }

    /// Records `act` (without the fault signals in its mask: see
    /// [`strip_fault_signals`]) and returns the action recorded before.
    pub(crate) fn replace(&self, mut act: libc::sigaction) -> Option<libc::sigaction> {
        strip_fault_signals(&mut act.sa_mask);
        let _blocked = AsyncSignalsBlocked::new();
        let mut g = self.whole.lock().unwrap_or_else(|p| p.into_inner());
        let old = g.replace(act);
        self.flags.store(act.sa_flags as usize, Ordering::Relaxed);
        // Release: the handler reads the flags after it sees the new handler.
        self.handler.store(act.sa_sigaction, Ordering::Release);
        old
    }

    /// The handler and flags to chain to, for a signal handler.
    pub(crate) fn handler(&self) -> (usize, libc::c_int) {
        // Acquire: pairs with `replace`'s Release (flags before handler).
        let h = self.handler.load(Ordering::Acquire);
        (h, self.flags.load(Ordering::Relaxed) as libc::c_int)
    }
}

static APP_CALLBACKS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Installs `callback` as the application's own handler for `kind`: the
/// handler tiermem chains to for the faults it does not serve (a poisoned
/// page). `Retry` restarts the access (the callback repaired it, e.g. with
/// `tiermem::clear_poison_at`); `Forward` takes the default action (the
/// process dies of the signal). Installed with `sigaction` like any
/// application handler, whether tiermem's router is installed yet or not.
pub fn install_application_handler(kind: FaultSignalKind, callback: FaultCallback) -> Result<(), Errno> {
    APP_CALLBACKS[kind.slot()].store(callback as usize, Ordering::Release);
    // SAFETY: sigaction is plain data; zeroed is a valid empty action.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_app_fault as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    sa.sa_mask = async_signals();
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if INSTALLED[kind.slot()].get().is_some() {
        set_chained(kind, sa);
        return Ok(());
    }
    // SAFETY: a valid action for a fault signal; tiermem's router, when
    // installed later, chains to it.
    if unsafe { c_sigaction(kind.signo(), &sa, std::ptr::null_mut()) } != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Runs the callback stored in `slot` for a fault, or forwards the signal
/// when none is installed or it was sent by kill()/tgkill() (si_code <= 0:
/// never a fault of ours).
fn dispatch(slot: &AtomicUsize, fault: SignalFault) -> Disposition {
    let cb = slot.load(Ordering::Acquire);
    if cb == 0 || fault.code <= 0 {
        return Disposition::Forward;
    }
    // SAFETY: only `install` and `install_application_handler` store into
    // the callback slots, always a FaultCallback.
    let f: FaultCallback = unsafe { std::mem::transmute::<usize, FaultCallback>(cb) };
    f(&fault)
}

extern "C" fn on_app_fault(signo: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let kind = if signo == libc::SIGBUS {
        FaultSignalKind::Bus
    } else {
        FaultSignalKind::Segv
    };
    // SAFETY: the kernel (or tiermem's router, passing the kernel's
    // arguments on) gives a valid siginfo for SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    let disposition = dispatch(
        &APP_CALLBACKS[kind.slot()],
        SignalFault {
            kind,
            addr,
            code,
            write: false,
        },
    );
    if disposition == Disposition::Forward {
        chain_to(libc::SIG_DFL, 0, signo, info, ctx, code <= 0);
    }
}

/// Strips SIGBUS, SIGSEGV and SIGSYS from the `sa_mask` of every handler installed
/// now: such a handler, touching tiered memory, would be killed by the
/// fault. Returns the signals whose handlers were changed.
pub fn strip_fault_signals_from_handlers() -> Vec<libc::c_int> {
    let mut changed = Vec::new();
    for sig in 1..=libc::SIGRTMAX() {
        // The C library owns 32 and 33 (cancellation, set*id) and refuses them.
        if matches!(sig, libc::SIGKILL | libc::SIGSTOP | 32 | 33) {
            continue;
        }
        // SAFETY: a zeroed sigaction is a valid out-parameter.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reading the current action into a valid struct.
        if unsafe { c_sigaction(sig, std::ptr::null(), &mut act) } != 0 {
            continue;
        }
        if act.sa_sigaction == libc::SIG_DFL || act.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        if strip_fault_signals(&mut act.sa_mask) {
            // SAFETY: re-installing the same action with a smaller mask.
            if unsafe { c_sigaction(sig, &act, std::ptr::null_mut()) } == 0 {
                changed.push(sig);
            }
        }
    }
    changed
}

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
    if INSTALLED[kind.slot()].get().is_some() {
        return Ok(());
    }
    // SAFETY: sigaction is plain data; zeroed is a valid empty action.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_fault as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | if on_altstack { libc::SA_ONSTACK } else { 0 };
    // Serving a fault is atomic with respect to asynchronous signals.
    sa.sa_mask = async_signals();
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both structs are valid; installing a handler for a fault signal.
    if unsafe { c_sigaction(kind.signo(), &sa, &mut old) } != 0 {
        let e = Errno::last();
        // Not installed after all: say so to `installed`.
        CALLBACKS[kind.slot()].store(0, Ordering::Release);
        return Err(e);
    }
    let _ = INSTALLED[kind.slot()].set(());
    set_chained(kind, old);
    strip_fault_signals_from_handlers();
    Ok(())
}

/// Whether a callback is installed for `kind`.
pub fn installed(kind: FaultSignalKind) -> bool {
    CALLBACKS[kind.slot()].load(Ordering::Acquire) != 0 && INSTALLED[kind.slot()].get().is_some()
}

/// Whether tiermem's handler for `kind` is installed and still the
/// kernel's action (not replaced behind the interposers' back, say by a
/// raw system call the signal guard does not see): only then is the
/// program's action the one tiermem chains to. One system call.
pub fn owns(kind: FaultSignalKind) -> bool {
    installed(kind) && current_handler(kind.signo()) == Some(on_fault as *const () as usize)
}

/// The handler the kernel has for `sig` now.
pub(crate) fn current_handler(sig: libc::c_int) -> Option<usize> {
    // SAFETY: a zeroed sigaction is a valid out-parameter.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reading the current action into a valid struct.
    (unsafe { kernel_sigaction(sig, std::ptr::null(), &mut cur) } == 0).then_some(cur.sa_sigaction)
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
    let disposition = dispatch(
        &CALLBACKS[kind.slot()],
        SignalFault {
            kind,
            addr,
            code,
            write,
        },
    );
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
    let (h, flags) = CHAINED[kind.slot()].handler();
    if h == libc::SIG_IGN && code <= 0 {
        // Sent by kill(): ignored, as it was before tiermem.
        return;
    }
    // A fault re-executes its instruction under the default action; a
    // signal sent by kill() does not recur, so it is raised again.
    chain_to(h, flags, signo, info, ctx, code <= 0);
}

/// Hands a signal to the action `h` (with `flags`) installed before
/// tiermem's: its handler, or the default action (`SIG_IGN` too: the kernel
/// never lets a synchronous signal be ignored). With the default action,
/// `reraise` raises the signal again now (it will not recur by itself).
pub(crate) fn chain_to(
    h: usize,
    flags: libc::c_int,
    signo: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    reraise: bool,
) {
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: sigaction with a valid struct; raise is async-signal-safe.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            c_sigaction(signo, &dfl, std::ptr::null_mut());
            if reraise {
                raw_sigprocmask(libc::SIG_UNBLOCK, &one_signal(signo), std::ptr::null_mut());
                // Not raise(), which blocks every signal first: inside the
                // SIGSYS handler the guard would trap that with SIGSYS
                // blocked.
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    libc::syscall(libc::SYS_gettid),
                    signo,
                );
            }
        }
    } else if flags & libc::SA_SIGINFO != 0 {
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

fn one_signal(signo: libc::c_int) -> libc::sigset_t {
    // SAFETY: plain data, initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signo);
        set
    }
}

/// The kernel's `struct sigaction` on x86-64 (`rt_sigaction` takes this,
/// with an 8-byte mask, not the C library's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KernelSigaction {
    pub(crate) handler: usize,
    pub(crate) flags: u64,
    pub(crate) restorer: usize,
    pub(crate) mask: u64,
}

impl KernelSigaction {
    pub(crate) fn from_libc(a: &libc::sigaction) -> KernelSigaction {
        KernelSigaction {
            handler: a.sa_sigaction,
            flags: a.sa_flags as u32 as u64,
            restorer: a.sa_restorer.map_or(0, |f| f as usize),
            mask: mask_word(&a.sa_mask),
        }
    }

    pub(crate) fn to_libc(self) -> libc::sigaction {
        // SAFETY: a zeroed sigaction is valid plain data.
        let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
        a.sa_sigaction = self.handler;
        a.sa_flags = self.flags as u32 as libc::c_int;
        // SAFETY: a restorer is a function address or 0 (None).
        a.sa_restorer = unsafe { std::mem::transmute::<usize, Option<extern "C" fn()>>(self.restorer) };
        // SAFETY: the first 64 bits of glibc's sigset_t are the kernel mask.
        unsafe { *(&mut a.sa_mask as *mut libc::sigset_t).cast::<u64>() = self.mask };
        a
    }
}

fn mask_word(set: &libc::sigset_t) -> u64 {
    // SAFETY: the first 64 bits of glibc's sigset_t are the kernel mask.
    unsafe { *(set as *const libc::sigset_t).cast::<u64>() }
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
            crate::raw::mprotect(
                base as *mut libc::c_void,
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        Disposition::Retry
    }

    static REPLACED_BY_HANDLER: ChainedAction = ChainedAction::new();
    static HANDLER_RUNS: AtomicUsize = AtomicUsize::new(0);

    fn action(handler: usize) -> libc::sigaction {
        // SAFETY: a zeroed sigaction is valid plain data.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler;
        act
    }

    extern "C" fn replaces_the_chained_action(_: libc::c_int) {
        REPLACED_BY_HANDLER.replace(action(libc::SIG_IGN));
        HANDLER_RUNS.fetch_add(1, Ordering::Relaxed);
    }

    /// A signal handler that sets the chained action while its thread was
    /// interrupted setting it (a crash handler resetting SIGSEGV, say) must
    /// not wait forever for the lock its own thread holds.
    #[test]
    fn a_handler_that_sets_the_chained_action_does_not_deadlock() {
        let sig = libc::SIGRTMIN() + 3;
        let handler = replaces_the_chained_action as extern "C" fn(libc::c_int);
        let mut sa = action(handler as usize);
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: valid struct; a test-only real-time signal.
        assert_eq!(unsafe { c_sigaction(sig, &sa, std::ptr::null_mut()) }, 0);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let worker_done = done.clone();
        std::thread::spawn(move || {
            tid_tx.send(crate::thread::gettid()).unwrap();
            for _ in 0..300_000 {
                REPLACED_BY_HANDLER.replace(action(libc::SIG_DFL));
                let _ = REPLACED_BY_HANDLER.get();
            }
            worker_done.store(true, Ordering::Release);
        });
        let tid = tid_rx.recv().unwrap();
        let mut sent = 0u64;
        let t0 = std::time::Instant::now();
        while !done.load(Ordering::Acquire) && t0.elapsed() < std::time::Duration::from_secs(30) {
            // SAFETY: tgkill with plain integers; the worker is ours.
            unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sig) };
            sent += 1;
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
        assert!(
            done.load(Ordering::Acquire),
            "the worker hung in the chained action's lock after {sent} signals"
        );
        assert!(
            HANDLER_RUNS.load(Ordering::Relaxed) > 0,
            "no signal reached the worker"
        );
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
