//! C-ABI interposers that keep tiermem's fault signals deliverable.
//!
//! tiermem serves faults in the faulting thread, through SIGBUS
//! (userfaultfd's SIGBUS mode) and SIGSEGV (protected pages). The kernel
//! raises these synchronously, and when the faulting thread blocks them it
//! does not queue them: it resets the action to the default and kills the
//! process. Programs block signals all the time: MPI progress threads and
//! thread pools block everything (`pthread_sigmask` with a full set),
//! handlers are installed with a full `sa_mask`, `sigsuspend` and `ppoll`
//! wait under a temporary mask. So the library that serves the faults
//! (`libtiermem` and the preload library) defines these functions itself,
//! ahead of the C library, and takes SIGBUS and SIGSEGV out of every mask
//! before the kernel sees it, and SIGSYS too: the kernel-access trap
//! (`tiermem_sys::seccomp`) serves a system call on tiered memory in a
//! SIGSYS handler, and a thread that blocks SIGSYS (an MPI progress thread
//! blocking everything, then `recv`ing into a tiered buffer) would be
//! killed by it just the same:
//!
//! | function | what changes |
//! |---|---|
//! | `pthread_sigmask`, `sigprocmask`, `sigblock`, `sigsetmask`, `sighold` | SIGBUS/SIGSEGV/SIGSYS never blocked (glibc's rule for its internal signals is kept too) |
//! | `sigaction`, `__sigaction`, `signal`, `ssignal`, `bsd_signal`, `sysv_signal`, `__sysv_signal`, `sigset`, `sigignore`, `siginterrupt` | `sa_mask` without SIGBUS/SIGSEGV/SIGSYS; an action for SIGBUS/SIGSEGV/SIGSYS installed after tiermem's handler becomes the one tiermem chains to, so tiermem stays first (for SIGSYS: every SIGSYS that is not a trap of tiermem's filter, with `SIG_IGN`/`SIG_DFL` meaning what they mean without tiermem) |
//! | `sigsuspend`, `ppoll`, `pselect`, `epoll_pwait`, `epoll_pwait2`, `pthread_attr_setsigmask_np` | the temporary or initial mask without SIGBUS/SIGSEGV/SIGSYS |
//!
//! Everything else about the calls is unchanged (return values, errno,
//! the old mask or action reported). What no interposer sees, the C
//! library's internal calls (glibc's `SIGEV_THREAD` timer threads and aio
//! helpers start with every signal blocked; `sigvec`, `setcontext`,
//! `siglongjmp`) and `syscall(SYS_rt_sigaction, ...)`, the kernel-access
//! filter traps and redoes the same way where it is installed (the
//! in-context fault path; `tiermem_sys::seccomp::guard`); a `syscall` instruction
//! of the program's own code is not covered. A handler for SIGBUS/SIGSEGV/SIGSYS that
//! tiermem chains to runs on tiermem's stack, without its own `sa_mask`,
//! `SA_RESETHAND` or `SA_ONSTACK`. docs/design.md, "Signals", says more.
//!
//! `close`, `close_range`, `closefrom`, `dup2` and `dup3` keep tiermem's
//! own descriptors open ([`fds`]).
//!
//! `vfork` is interposed too ([`vfork`]): the core serves a `vfork`
//! child's faults on tiered memory through a thread of the owner, and must
//! know when one is in flight.
//!
//! A crate that links this one must reference it (call [`link`]), or the
//! linker may leave the interposers out.

use libc::{c_int, c_void, sigset_t};

pub mod fds;
#[cfg(target_arch = "x86_64")]
pub mod vfork;
use std::sync::atomic::{AtomicUsize, Ordering};
use tiermem_sys::seccomp;
use tiermem_sys::signal::{self, FaultSignalKind};

/// Makes sure the interposers are linked into the calling library. Does
/// nothing at run time.
#[inline(never)]
pub fn link() {
    std::hint::black_box(pthread_sigmask as *const ());
    #[cfg(target_arch = "x86_64")]
    std::hint::black_box(vfork::vfork as *const ());
    std::hint::black_box(fds::close as *const ());
}

extern "C" {
    /// glibc's own `sigsuspend`.
    fn __sigsuspend(mask: *const sigset_t) -> c_int;
}

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> c_int {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

/// A copy of `*set` that blocks neither SIGBUS/SIGSEGV/SIGSYS nor glibc's
/// internal signals (32 and 33, which glibc's own `pthread_sigmask` never
/// blocks either: `setuid()` and cancellation need them).
///
/// # Safety
/// `set` must point to a valid sigset_t.
unsafe fn filtered(set: *const sigset_t) -> sigset_t {
    // SAFETY: the caller passes a valid set.
    let mut s = unsafe { *set };
    signal::strip_fault_signals(&mut s);
    // SAFETY: the first 64 bits of glibc's sigset_t are the kernel mask.
    unsafe { *(&mut s as *mut sigset_t).cast::<u64>() &= !(0b11u64 << 31) };
    s
}

/// `rt_sigprocmask` with a filtered set; returns 0 or an error number.
///
/// # Safety
/// `set` and `old` null or valid.
unsafe fn sigprocmask_filtered(how: c_int, set: *const sigset_t, old: *mut sigset_t) -> c_int {
    let f;
    let set = if !set.is_null() && how != libc::SIG_UNBLOCK {
        // SAFETY: non-null, and the caller promises it is valid.
        f = unsafe { filtered(set) };
        &f as *const sigset_t
    } else {
        set
    };
    // SAFETY: set and old are null or valid.
    if unsafe { signal::raw_sigprocmask(how, set, old) } == 0 {
        0
    } else {
        errno()
    }
}

/// `pthread_sigmask(3)`, keeping SIGBUS, SIGSEGV and SIGSYS deliverable.
///
/// # Safety
/// As for the C function: `set` and `oset` null or valid.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(how: c_int, set: *const sigset_t, oset: *mut sigset_t) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { sigprocmask_filtered(how, set, oset) }
}

/// `sigprocmask(2)`, keeping SIGBUS, SIGSEGV and SIGSYS deliverable.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(how: c_int, set: *const sigset_t, oset: *mut sigset_t) -> c_int {
    // SAFETY: forwarded from the caller.
    match unsafe { sigprocmask_filtered(how, set, oset) } {
        0 => 0,
        e => {
            set_errno(e);
            -1
        }
    }
}

/// BSD `sigblock(3)`: the old mask as an int.
#[no_mangle]
pub extern "C" fn sigblock(mask: c_int) -> c_int {
    bsd_mask(libc::SIG_BLOCK, mask)
}

/// BSD `sigsetmask(3)`.
#[no_mangle]
pub extern "C" fn sigsetmask(mask: c_int) -> c_int {
    bsd_mask(libc::SIG_SETMASK, mask)
}

fn bsd_mask(how: c_int, mask: c_int) -> c_int {
    let mut set = empty_set();
    for sig in 1..32 {
        if mask & (1 << (sig - 1)) != 0 {
            // SAFETY: a valid set and a valid signal number.
            unsafe { libc::sigaddset(&mut set, sig) };
        }
    }
    let mut old = empty_set();
    // SAFETY: both sets are valid.
    if unsafe { sigprocmask_filtered(how, &set, &mut old) } != 0 {
        return -1;
    }
    // SAFETY: the kernel mask is the first word of `old`.
    (unsafe { *(&old as *const sigset_t).cast::<u64>() } & 0xffff_ffff) as u32 as c_int
}

/// SysV `sighold(3)`.
#[no_mangle]
pub extern "C" fn sighold(sig: c_int) -> c_int {
    let mut set = empty_set();
    // SAFETY: a valid set; an invalid signal fails with EINVAL.
    if unsafe { libc::sigaddset(&mut set, sig) } != 0 {
        return -1;
    }
    // SAFETY: a valid set.
    unsafe { sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) }
}

fn empty_set() -> sigset_t {
    // SAFETY: plain data, initialised by sigemptyset.
    unsafe {
        let mut s: sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut s);
        s
    }
}

fn fault_kind(sig: c_int) -> Option<FaultSignalKind> {
    match sig {
        libc::SIGBUS => Some(FaultSignalKind::Bus),
        libc::SIGSEGV => Some(FaultSignalKind::Segv),
        _ => None,
    }
}

/// `sigaction(2)`: handlers never block SIGBUS/SIGSEGV/SIGSYS, and tiermem's
/// SIGBUS/SIGSEGV handler, and its SIGSYS handler (the kernel-access trap),
/// stay installed (the new action is chained to).
///
/// # Safety
/// As for the C function: `act` and `oact` null or valid.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    oact: *mut libc::sigaction,
) -> c_int {
    // Tiermem's handlers stay first while they are the kernel's; one that
    // was replaced behind the interposers' back (the handler-thread path
    // does without them) leaves the signal to the program.
    // A vfork child shares the record of the program's actions with its
    // parent: what it sets before exec (Python's subprocess resets every
    // handler to the default) must not become the parent's. Tiermem's
    // handlers stay in it (its faults are served through the parent).
    let record = !tiermem_sys::thread::in_vfork_child();
    if sig == libc::SIGSYS && seccomp::owns_sigsys() {
        // The kernel-access trap's handler stays; the program's action is
        // chained to for the SIGSYS that are not tiermem's traps.
        let old = if act.is_null() || !record {
            seccomp::chained()
        } else {
            // SAFETY: non-null and valid by the caller's promise.
            seccomp::set_chained(unsafe { *act })
        };
        if let Some(old) = old {
            if !oact.is_null() {
                // SAFETY: valid by the caller's promise.
                unsafe { *oact = old };
            }
            return 0;
        }
    }
    if let Some(kind) = fault_kind(sig).filter(|&k| signal::owns(k)) {
        let old = if act.is_null() || !record {
            signal::chained(kind)
        } else {
            // SAFETY: non-null and valid by the caller's promise.
            signal::set_chained(kind, unsafe { *act })
        };
        if let Some(old) = old {
            if !oact.is_null() {
                // SAFETY: valid by the caller's promise.
                unsafe { *oact = old };
            }
            return 0;
        }
    }
    if act.is_null() {
        // SAFETY: forwarded unchanged.
        return unsafe { signal::kernel_sigaction(sig, act, oact) };
    }
    // SAFETY: non-null and valid.
    let mut a = unsafe { *act };
    signal::strip_fault_signals(&mut a.sa_mask);
    // SAFETY: `a` is a valid copy; `oact` as the caller passed it.
    unsafe { signal::kernel_sigaction(sig, &a, oact) }
}

/// glibc's exported name of its own `sigaction` (a program may call it).
///
/// # Safety
/// As for `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn __sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    oact: *mut libc::sigaction,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { sigaction(sig, act, oact) }
}

/// Installs `handler` with `flags` and a mask of `mask_self ? {sig} : {}`
/// through [`sigaction`]; returns the old handler or `SIG_ERR`.
fn install_simple(
    sig: c_int,
    handler: libc::sighandler_t,
    flags: c_int,
    mask_self: bool,
) -> libc::sighandler_t {
    // SAFETY: a zeroed sigaction is a valid empty action.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    act.sa_mask = empty_set();
    if mask_self {
        // SAFETY: valid set; an invalid signal is reported by sigaction below.
        unsafe { libc::sigaddset(&mut act.sa_mask, sig) };
    }
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both structs valid.
    if unsafe { sigaction(sig, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// `signal(3)` with glibc's BSD semantics (`SA_RESTART`, the signal masked
/// while its handler runs).
#[no_mangle]
pub extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    install_simple(sig, handler, libc::SA_RESTART, true)
}

/// `bsd_signal(3)`: the same as `signal`.
#[no_mangle]
pub extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    install_simple(sig, handler, libc::SA_RESTART, true)
}

/// `ssignal(3)`: the same as `signal` in glibc.
#[no_mangle]
pub extern "C" fn ssignal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    install_simple(sig, handler, libc::SA_RESTART, true)
}

/// `sysv_signal(3)`: one-shot, not masked while it runs.
#[no_mangle]
pub extern "C" fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    install_simple(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER, false)
}

/// `__sysv_signal`: what `signal()` is in a program built in strict ISO C
/// (`-std=c99`): zstd's crash handlers come this way.
#[no_mangle]
pub extern "C" fn __sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    sysv_signal(sig, handler)
}

/// SysV `sigignore(3)`.
#[no_mangle]
pub extern "C" fn sigignore(sig: c_int) -> c_int {
    if install_simple(sig, libc::SIG_IGN, 0, false) == libc::SIG_ERR {
        -1
    } else {
        0
    }
}

/// `siginterrupt(3)`: whether the signal interrupts system calls
/// (`SA_RESTART` cleared) or not, on the program's own action.
#[no_mangle]
pub extern "C" fn siginterrupt(sig: c_int, interrupt: c_int) -> c_int {
    // SAFETY: a zeroed sigaction is a valid out-parameter.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid structs; this crate's sigaction reports the program's
    // action (the chained one for tiermem's signals).
    if unsafe { sigaction(sig, std::ptr::null(), &mut act) } != 0 {
        return -1;
    }
    if interrupt != 0 {
        act.sa_flags &= !libc::SA_RESTART;
    } else {
        act.sa_flags |= libc::SA_RESTART;
    }
    // SAFETY: as above.
    unsafe { sigaction(sig, &act, std::ptr::null_mut()) }
}

/// `SIG_HOLD` of `<signal.h>` (not in the libc crate).
const SIG_HOLD: libc::sighandler_t = 2;

/// SysV `sigset(3)`: install a disposition, or hold the signal.
#[no_mangle]
pub extern "C" fn sigset(sig: c_int, disp: libc::sighandler_t) -> libc::sighandler_t {
    let mut one = empty_set();
    // SAFETY: valid set.
    if unsafe { libc::sigaddset(&mut one, sig) } != 0 {
        return libc::SIG_ERR;
    }
    let mut was = empty_set();
    // SAFETY: valid sets.
    unsafe { signal::raw_sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut was) };
    // SAFETY: valid set.
    let held = unsafe { libc::sigismember(&was, sig) } == 1;
    let old = if disp == SIG_HOLD {
        // SAFETY: a zeroed sigaction is valid as an out-parameter.
        let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reading the current action.
        unsafe { sigaction(sig, std::ptr::null(), &mut cur) };
        // SAFETY: valid set.
        unsafe { sigprocmask_filtered(libc::SIG_BLOCK, &one, std::ptr::null_mut()) };
        cur.sa_sigaction
    } else {
        let old = install_simple(sig, disp, 0, false);
        // SAFETY: valid set.
        unsafe { signal::raw_sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut()) };
        old
    };
    if held {
        SIG_HOLD
    } else {
        old
    }
}

/// `sigsuspend(2)` under a mask that leaves SIGBUS/SIGSEGV/SIGSYS open.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn sigsuspend(mask: *const sigset_t) -> c_int {
    if mask.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: non-null and valid by the caller's promise.
    let m = unsafe { filtered(mask) };
    // SAFETY: a valid set.
    unsafe { __sigsuspend(&m) }
}

/// The next definition of `name` (the C library's, for an interposer),
/// looked up once into `cache`; 0 when missing.
pub fn next(cache: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let f = cache.load(Ordering::Acquire);
    if f != 0 {
        return f;
    }
    // SAFETY: RTLD_NEXT with a NUL-terminated name; dlsym is thread-safe.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    cache.store(f, Ordering::Release);
    f
}

/// A copy of an optional mask without SIGBUS/SIGSEGV/SIGSYS (null stays null).
///
/// # Safety
/// `mask` null or valid.
unsafe fn filtered_opt(mask: *const sigset_t, buf: &mut sigset_t) -> *const sigset_t {
    if mask.is_null() {
        return mask;
    }
    // SAFETY: non-null and valid by the caller's promise.
    *buf = unsafe { filtered(mask) };
    buf
}

macro_rules! masked_wait {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*; $mask:ident) -> $ret:ty = $cname:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the C function.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty,)* $mask: *const sigset_t) -> $ret {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let f = next(&NEXT, $cname);
            if f == 0 {
                set_errno(libc::ENOSYS);
                return -1;
            }
            let mut buf = empty_set();
            // SAFETY: forwarded from the caller.
            let m = unsafe { filtered_opt($mask, &mut buf) };
            // SAFETY: `f` is the C library's function of this very signature.
            let real: unsafe extern "C" fn($($ty,)* *const sigset_t) -> $ret = unsafe { std::mem::transmute(f) };
            // SAFETY: the caller's arguments, with a valid (filtered) mask.
            unsafe { real($($arg,)* m) }
        }
    };
}

masked_wait! {
    /// `ppoll(2)` under a mask that leaves SIGBUS/SIGSEGV/SIGSYS open.
    fn ppoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: *const libc::timespec; sigmask) -> c_int = c"ppoll"
}

masked_wait! {
    /// `pselect(2)` under a mask that leaves SIGBUS/SIGSEGV/SIGSYS open.
    fn pselect(
        nfds: c_int,
        readfds: *mut libc::fd_set,
        writefds: *mut libc::fd_set,
        exceptfds: *mut libc::fd_set,
        timeout: *const libc::timespec; sigmask) -> c_int = c"pselect"
}

masked_wait! {
    /// `epoll_pwait(2)` under a mask that leaves SIGBUS/SIGSEGV/SIGSYS open.
    fn epoll_pwait(epfd: c_int, events: *mut libc::epoll_event, maxevents: c_int, timeout: c_int; sigmask) -> c_int = c"epoll_pwait"
}

masked_wait! {
    /// `epoll_pwait2(2)` under a mask that leaves SIGBUS/SIGSEGV/SIGSYS open.
    fn epoll_pwait2(
        epfd: c_int,
        events: *mut libc::epoll_event,
        maxevents: c_int,
        timeout: *const libc::timespec; sigmask) -> c_int = c"epoll_pwait2"
}

masked_wait! {
    /// `pthread_attr_setsigmask_np(3)`: new threads never start with
    /// SIGBUS/SIGSEGV blocked.
    fn pthread_attr_setsigmask_np(attr: *mut c_void; sigmask) -> c_int = c"pthread_attr_setsigmask_np"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(set: &sigset_t, sig: c_int) -> bool {
        // SAFETY: valid set.
        unsafe { libc::sigismember(set, sig) == 1 }
    }

    #[test]
    fn full_masks_keep_fault_signals_open() {
        std::thread::spawn(|| {
            let mut all = empty_set();
            // SAFETY: valid set.
            unsafe { libc::sigfillset(&mut all) };
            let mut old = empty_set();
            // SAFETY: valid sets; calling this crate's interposer directly.
            assert_eq!(unsafe { pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) }, 0);
            let now = tiermem_sys::thread::signal_mask();
            assert!(member(&now, libc::SIGINT) && member(&now, libc::SIGALRM));
            assert!(!member(&now, libc::SIGBUS) && !member(&now, libc::SIGSEGV));
            // The kernel-access trap's SIGSYS too.
            assert!(!member(&now, libc::SIGSYS));
            // SAFETY: as above.
            assert_eq!(unsafe { sigprocmask(99, &all, std::ptr::null_mut()) }, -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(sigblock(-1) & (1 << (libc::SIGINT - 1)), 1 << (libc::SIGINT - 1));
            let now = tiermem_sys::thread::signal_mask();
            assert!(!member(&now, libc::SIGBUS));
        })
        .join()
        .unwrap();
    }

    extern "C" fn nop(_: c_int) {}

    #[test]
    fn handlers_never_block_fault_signals() {
        // SAFETY: a zeroed sigaction is a valid empty action.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = nop as extern "C" fn(c_int) as usize;
        // SAFETY: valid set.
        unsafe { libc::sigfillset(&mut act.sa_mask) };
        // SAFETY: valid structs.
        assert_eq!(unsafe { sigaction(libc::SIGUSR2, &act, std::ptr::null_mut()) }, 0);
        // SAFETY: zeroed out-parameter.
        let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reading back through the C library.
        unsafe { libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut now) };
        assert!(!member(&now.sa_mask, libc::SIGBUS) && !member(&now.sa_mask, libc::SIGSEGV));
        assert!(!member(&now.sa_mask, libc::SIGSYS));
        assert!(member(&now.sa_mask, libc::SIGINT));
        assert_eq!(
            signal(libc::SIGUSR2, libc::SIG_DFL),
            nop as extern "C" fn(c_int) as usize
        );
    }
}
