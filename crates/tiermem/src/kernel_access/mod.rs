//! Kernel-mode accesses to tiered memory.
//!
//! userfaultfd's SIGBUS mode serves faults the *thread* takes; when the
//! kernel itself touches a missing or write-protected page (`read(2)` into
//! a region, `write(2)` from an evicted page, `fread`, `recv`), no signal
//! can be raised and the call fails with `EFAULT`. On the handler-thread
//! path the kernel's fault is served, but a direct read (`O_DIRECT`) pins
//! each page for the device as it faults it in, and the fills of its later
//! pages could evict the earlier ones under it (`region::kernel_calls_trapped`).
//! So regions whose calls are trapped are placed in a window of the address space ([`WINDOW`]), and a seccomp
//! filter traps the system calls that move data between the kernel and a
//! buffer in that window ([`RULES`]) when the C library of this program
//! image makes them (no other image, which inherits the filter but not its
//! handler, is ever trapped: `tiermem_sys::seccomp::call_sites`). The
//! SIGSYS handler asks the fault router to pin the buffer (the pages are
//! brought in, made writable for a call that writes them, and kept from
//! eviction), runs the call under the program's own signal mask, unpins,
//! and returns the call's result.
//!
//! Calls that do not touch the window cost nothing but the filter's few
//! instructions; a trapped call costs about a signal delivery more (~2.5 us
//! here). A call on a regular file larger than a region's pin allowance
//! (half its budget) runs in pieces. Calls on pipes, sockets and devices,
//! which may block for long, pin nothing: their data goes through a bounce
//! buffer (see [`on_trap`]).
//!
//! glibc's POSIX asynchronous I/O (`aio_read`, `aio_write`, `lio_listio`)
//! and `getaddrinfo_a` run their calls in helper threads that block every
//! signal with a raw `rt_sigprocmask`; the same filter traps that call
//! (`tiermem_sys::seccomp::guard`) and keeps SIGBUS, SIGSEGV and SIGSYS open, so
//! their calls on tiered buffers are served like any other.
//!
//! Linux AIO (`io_submit`) pins its buffers beyond the call: see [`aio`].
//! io_uring uses them with no call to trap: it is refused, see [`uring`].
//!
//! Calls that take pointers to small structures or paths (`poll`, `select`,
//! `wait4`, `fstat`, `open`, ... [`STRUCT_CALLS`]) trap when a pointer argument
//! lies in the window, and run on copies of them (`futex` on its words,
//! brought in first).
//!
//! Not covered (they fail with `EFAULT` on a page that is not resident, as
//! without tiermem's help): calls that take buffers through an `iovec` or a
//! message header (`readv`, `recvmsg`, ...; the interposers of the preload
//! library serve those), raw system calls made outside the C library, a C
//! library loaded after the trap is installed (a new link namespace:
//! `dlmopen(LM_ID_NEWLM)`; see `tiermem_sys::seccomp::call_sites`),
//! other processes reading this one's memory (`process_vm_readv` from
//! outside, `/proc/PID/mem`).

mod aio;
mod uring;

pub(crate) use aio::discarding as discarding_io_buffers;
pub(crate) use uring::refuse as refuse_io_uring;
pub use uring::refused as io_uring_refused;

use crate::config::KernelAccess;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use tiermem_sys::bounce::FdKind;
use tiermem_sys::seccomp::{self, Bounced, CopiedArg, Split, TrapRule, TrappedSyscall, Window};

/// Where in-context regions are placed: 64 TiB between 17 and 81 TiB,
/// below where the kernel maps executables (~85 TiB) and libraries
/// (~127 TiB) and above AddressSanitizer's shadow (up to 16 TiB).
pub(crate) const WINDOW: Window = Window {
    lo: 0x1100_0000_0000,
    hi: 0x5100_0000_0000,
};

/// Where the trap's trampoline lives in every tiermem process image: the
/// 2 MiB below the window.
const TRAMPOLINE_AT: usize = WINDOW.lo as usize - (2 << 20);

/// A trapped call: its buffer and length arguments, whether the kernel
/// writes the buffer, and whether it has a file offset argument (3).
#[derive(Clone, Copy)]
struct Rule {
    nr: i64,
    buf: usize,
    len: usize,
    kernel_writes: bool,
    offset: bool,
}

const RULES: [Rule; 7] = [
    rule(libc::SYS_read, 1, 2, true, false),
    rule(libc::SYS_pread64, 1, 2, true, true),
    rule(libc::SYS_recvfrom, 1, 2, true, false),
    rule(libc::SYS_getrandom, 0, 1, true, false),
    rule(libc::SYS_write, 1, 2, false, false),
    rule(libc::SYS_pwrite64, 1, 2, false, true),
    rule(libc::SYS_sendto, 1, 2, false, false),
];

/// The filter's view of the rules.
fn trap_rules() -> Vec<TrapRule> {
    let pointers = |nr, ptrs: &[Ptr]| TrapRule::pointers(nr, ptrs.iter().fold(0, |m, p| m | 1 << p.0));
    RULES
        .iter()
        .map(|r| match ADDRESSED_CALLS.iter().find(|c| c.nr == r.nr) {
            Some(c) => pointers(c.nr, c.ptrs),
            None => TrapRule::buffer(r.nr, r.buf),
        })
        // The filter compares numbers in this order: the hottest first
        // (every futex of a threaded program runs it now). futex on its
        // word only: what its fourth and fifth registers hold depends on
        // the operation (a number, or nothing the C library set).
        .chain([TrapRule::buffer(libc::SYS_futex, 0)])
        .chain(STRUCT_CALLS.iter().map(|c| pointers(c.nr, c.ptrs)))
        // Always-trapped calls only where no thread can block SIGSYS.
        .chain(seccomp::guard_loaded().then(aio::rules).into_iter().flatten())
        .chain([uring::rule()])
        .collect()
}

const fn rule(nr: i64, buf: usize, len: usize, kernel_writes: bool, offset: bool) -> Rule {
    Rule {
        nr,
        buf,
        len,
        kernel_writes,
        offset,
    }
}

/// How many bytes a pointer argument of a [`STRUCT_CALLS`] call covers.
#[derive(Clone, Copy)]
enum Len {
    /// A fixed-size structure.
    Fixed(usize),
    /// Argument `.0` times `.1` bytes (an array).
    Times(usize, usize),
    /// Argument `.0` bytes.
    Arg(usize),
    /// An `fd_set` for the descriptor count in argument `.0`.
    FdSet(usize),
    /// A C string (a path, at most `PATH_MAX` bytes).
    Str,
    /// The `socklen_t` that argument `.0` points to (a socket address's
    /// or option's length, which the kernel reads and then writes).
    Behind(usize),
    /// Argument `.0` bytes, of which the kernel writes as many as the call
    /// returns (a received message).
    Received(usize),
}

/// A pointer argument: which, how long, whether the kernel writes it.
#[derive(Clone, Copy)]
struct Ptr(usize, Len, bool);

/// Calls that take pointers to small structures or paths, any of which
/// may lie in tiered memory (a Python object lives in a 1 MiB arena that
/// tiermem serves): `poll`'s array, `select`'s sets, `wait4`'s status, a
/// path. They trap when a pointer argument lies in the window
/// (`TrapRule::pointer_args`), and run with every pointer argument that
/// lies in tiered memory copied through a bounce buffer
/// (`TrappedSyscall::execute_copied`): a call that blocks (`blocks`)
/// holds nothing of the program's while it waits, and
/// what the kernel writes at its end (`poll`'s `revents`) cannot meet an
/// evicted page. x86-64 sizes.
struct StructCall {
    nr: i64,
    ptrs: &'static [Ptr],
    blocks: bool,
}

const fn sc(nr: i64, ptrs: &'static [Ptr], blocks: bool) -> StructCall {
    StructCall { nr, ptrs, blocks }
}

use Len::{Arg, Behind, FdSet, Fixed, Received, Str, Times};
const R: bool = false;
const W: bool = true;
const TIMESPEC: usize = 16;
const STAT: usize = 144;
const RUSAGE: usize = 144;
const SIGINFO: usize = 128;
const EPOLL_EVENT: usize = 12;

const STRUCT_CALLS: &[StructCall] = &[
    // Waits.
    sc(libc::SYS_poll, &[Ptr(0, Times(1, 8), W)], true),
    sc(
        libc::SYS_ppoll,
        &[
            Ptr(0, Times(1, 8), W),
            Ptr(2, Fixed(TIMESPEC), R),
            Ptr(3, Arg(4), R),
        ],
        true,
    ),
    sc(
        libc::SYS_select,
        &[
            Ptr(1, FdSet(0), W),
            Ptr(2, FdSet(0), W),
            Ptr(3, FdSet(0), W),
            Ptr(4, Fixed(16), W),
        ],
        true,
    ),
    sc(
        libc::SYS_pselect6,
        &[
            Ptr(1, FdSet(0), W),
            Ptr(2, FdSet(0), W),
            Ptr(3, FdSet(0), W),
            Ptr(4, Fixed(TIMESPEC), W),
            Ptr(5, Fixed(16), R),
        ],
        true,
    ),
    sc(libc::SYS_epoll_wait, &[Ptr(1, Times(2, EPOLL_EVENT), W)], true),
    sc(
        libc::SYS_epoll_pwait,
        &[Ptr(1, Times(2, EPOLL_EVENT), W), Ptr(4, Arg(5), R)],
        true,
    ),
    sc(
        libc::SYS_epoll_pwait2,
        &[
            Ptr(1, Times(2, EPOLL_EVENT), W),
            Ptr(3, Fixed(TIMESPEC), R),
            Ptr(4, Arg(5), R),
        ],
        true,
    ),
    sc(libc::SYS_epoll_ctl, &[Ptr(3, Fixed(EPOLL_EVENT), R)], false),
    sc(
        libc::SYS_nanosleep,
        &[Ptr(0, Fixed(TIMESPEC), R), Ptr(1, Fixed(TIMESPEC), W)],
        true,
    ),
    sc(
        libc::SYS_clock_nanosleep,
        &[Ptr(2, Fixed(TIMESPEC), R), Ptr(3, Fixed(TIMESPEC), W)],
        true,
    ),
    sc(
        libc::SYS_wait4,
        &[Ptr(1, Fixed(4), W), Ptr(3, Fixed(RUSAGE), W)],
        true,
    ),
    sc(
        libc::SYS_waitid,
        &[Ptr(2, Fixed(SIGINFO), W), Ptr(4, Fixed(RUSAGE), W)],
        true,
    ),
    sc(
        libc::SYS_rt_sigtimedwait,
        &[
            Ptr(0, Arg(3), R),
            Ptr(1, Fixed(SIGINFO), W),
            Ptr(2, Fixed(TIMESPEC), R),
        ],
        true,
    ),
    sc(libc::SYS_connect, &[Ptr(1, Arg(2), R)], true),
    sc(
        libc::SYS_accept,
        &[Ptr(1, Behind(2), W), Ptr(2, Fixed(4), W)],
        true,
    ),
    sc(
        libc::SYS_accept4,
        &[Ptr(1, Behind(2), W), Ptr(2, Fixed(4), W)],
        true,
    ),
    // Descriptors, times, limits.
    sc(libc::SYS_bind, &[Ptr(1, Arg(2), R)], false),
    sc(libc::SYS_setsockopt, &[Ptr(3, Arg(4), R)], false),
    sc(
        libc::SYS_getsockopt,
        &[Ptr(3, Behind(4), W), Ptr(4, Fixed(4), W)],
        false,
    ),
    sc(
        libc::SYS_getsockname,
        &[Ptr(1, Behind(2), W), Ptr(2, Fixed(4), W)],
        false,
    ),
    sc(
        libc::SYS_getpeername,
        &[Ptr(1, Behind(2), W), Ptr(2, Fixed(4), W)],
        false,
    ),
    sc(libc::SYS_pipe, &[Ptr(0, Fixed(8), W)], false),
    sc(libc::SYS_pipe2, &[Ptr(0, Fixed(8), W)], false),
    sc(libc::SYS_socketpair, &[Ptr(3, Fixed(8), W)], false),
    sc(libc::SYS_fstat, &[Ptr(1, Fixed(STAT), W)], false),
    sc(libc::SYS_fstatfs, &[Ptr(1, Fixed(120), W)], false),
    sc(libc::SYS_getdents64, &[Ptr(1, Arg(2), W)], false),
    sc(libc::SYS_getcwd, &[Ptr(0, Arg(1), W)], false),
    sc(libc::SYS_uname, &[Ptr(0, Fixed(390), W)], false),
    sc(libc::SYS_sysinfo, &[Ptr(0, Fixed(112), W)], false),
    sc(libc::SYS_getrusage, &[Ptr(1, Fixed(RUSAGE), W)], false),
    sc(libc::SYS_times, &[Ptr(0, Fixed(32), W)], false),
    sc(libc::SYS_getrlimit, &[Ptr(1, Fixed(16), W)], false),
    sc(libc::SYS_setrlimit, &[Ptr(1, Fixed(16), R)], false),
    sc(
        libc::SYS_prlimit64,
        &[Ptr(2, Fixed(16), R), Ptr(3, Fixed(16), W)],
        false,
    ),
    sc(libc::SYS_sched_getaffinity, &[Ptr(2, Arg(1), W)], false),
    sc(libc::SYS_sched_setaffinity, &[Ptr(2, Arg(1), R)], false),
    sc(libc::SYS_clock_gettime, &[Ptr(1, Fixed(TIMESPEC), W)], false),
    sc(libc::SYS_clock_getres, &[Ptr(1, Fixed(TIMESPEC), W)], false),
    sc(
        libc::SYS_gettimeofday,
        &[Ptr(0, Fixed(16), W), Ptr(1, Fixed(8), W)],
        false,
    ),
    sc(
        libc::SYS_timerfd_settime,
        &[Ptr(2, Fixed(32), R), Ptr(3, Fixed(32), W)],
        false,
    ),
    sc(libc::SYS_timerfd_gettime, &[Ptr(1, Fixed(32), W)], false),
    sc(libc::SYS_sendfile, &[Ptr(2, Fixed(8), W)], true),
    sc(
        libc::SYS_splice,
        &[Ptr(1, Fixed(8), W), Ptr(3, Fixed(8), W)],
        true,
    ),
    sc(
        libc::SYS_copy_file_range,
        &[Ptr(1, Fixed(8), W), Ptr(3, Fixed(8), W)],
        false,
    ),
    // Paths.
    sc(libc::SYS_open, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_openat, &[Ptr(1, Str, R)], false),
    sc(libc::SYS_creat, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_stat, &[Ptr(0, Str, R), Ptr(1, Fixed(STAT), W)], false),
    sc(libc::SYS_lstat, &[Ptr(0, Str, R), Ptr(1, Fixed(STAT), W)], false),
    sc(
        libc::SYS_newfstatat,
        &[Ptr(1, Str, R), Ptr(2, Fixed(STAT), W)],
        false,
    ),
    sc(libc::SYS_statx, &[Ptr(1, Str, R), Ptr(4, Fixed(256), W)], false),
    sc(libc::SYS_statfs, &[Ptr(0, Str, R), Ptr(1, Fixed(120), W)], false),
    sc(libc::SYS_access, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_faccessat, &[Ptr(1, Str, R)], false),
    sc(libc::SYS_faccessat2, &[Ptr(1, Str, R)], false),
    sc(libc::SYS_readlink, &[Ptr(0, Str, R), Ptr(1, Arg(2), W)], false),
    sc(libc::SYS_readlinkat, &[Ptr(1, Str, R), Ptr(2, Arg(3), W)], false),
    sc(libc::SYS_unlink, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_unlinkat, &[Ptr(1, Str, R)], false),
    sc(libc::SYS_mkdir, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_mkdirat, &[Ptr(1, Str, R)], false),
    sc(libc::SYS_rmdir, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_rename, &[Ptr(0, Str, R), Ptr(1, Str, R)], false),
    sc(libc::SYS_renameat, &[Ptr(1, Str, R), Ptr(3, Str, R)], false),
    sc(libc::SYS_renameat2, &[Ptr(1, Str, R), Ptr(3, Str, R)], false),
    sc(libc::SYS_link, &[Ptr(0, Str, R), Ptr(1, Str, R)], false),
    sc(libc::SYS_linkat, &[Ptr(1, Str, R), Ptr(3, Str, R)], false),
    sc(libc::SYS_symlink, &[Ptr(0, Str, R), Ptr(1, Str, R)], false),
    sc(libc::SYS_symlinkat, &[Ptr(0, Str, R), Ptr(2, Str, R)], false),
    sc(libc::SYS_chdir, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_truncate, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_chmod, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_fchmodat, &[Ptr(1, Str, R)], false),
    sc(libc::SYS_chown, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_lchown, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_fchownat, &[Ptr(1, Str, R)], false),
    sc(
        libc::SYS_utimensat,
        &[Ptr(1, Str, R), Ptr(2, Fixed(2 * TIMESPEC), R)],
        false,
    ),
    sc(libc::SYS_mknod, &[Ptr(0, Str, R)], false),
    sc(libc::SYS_mknodat, &[Ptr(1, Str, R)], false),
];

/// `recvfrom` and `sendto` as [`STRUCT_CALLS`]: the way they go when their
/// socket address lies in tiered memory (usually only the data buffer
/// does, and they go through [`RULES`]). The message is copied with the
/// address, so a datagram of up to [`seccomp::COPIED_MAX`] bytes in all.
const ADDRESSED_CALLS: [StructCall; 2] = [
    sc(
        libc::SYS_recvfrom,
        &[Ptr(1, Received(2), W), Ptr(4, Behind(5), W), Ptr(5, Fixed(4), W)],
        true,
    ),
    sc(libc::SYS_sendto, &[Ptr(1, Arg(2), R), Ptr(4, Arg(5), R)], true),
];

/// Pointer arguments of `futex` (the word, the timeout, the second word):
/// the word is the futex's identity, so it cannot be copied. The pages
/// are brought in before the call, which fails with `EFAULT` before doing
/// anything if one is evicted again meanwhile (every operation reads or
/// changes the words before it queues or wakes), and is then made again.
/// The call traps on its word only (see `trap_rules`); a timeout or a
/// second word in tiered memory is brought in when it does.
const FUTEX_PTRS: [(usize, usize, bool); 3] = [(0, 4, true), (3, TIMESPEC, false), (4, 4, true)];

/// Tries of a `futex` whose words keep being evicted before the call.
const FUTEX_TRIES: usize = 8;

/// Whether the trap is active in this process (installed on first use).
pub(crate) fn active(mode: KernelAccess) -> bool {
    static STATE: OnceLock<bool> = OnceLock::new();
    if mode == KernelAccess::Off {
        return false;
    }
    *STATE.get_or_init(|| {
        // The guard first (`install` loads it too, but after the rules are
        // made): whether it is loaded decides the rules (`aio`).
        let _ = seccomp::install_guard(TRAMPOLINE_AT);
        match seccomp::install(WINDOW, TRAMPOLINE_AT, &trap_rules(), on_trap) {
            Ok(()) => true,
            Err(e) => {
                eprintln!(
                    "tiermem: warning: kernel accesses to tiered memory are not served ({e}): \
                     read(2) into a page that is not resident fails with EFAULT; \
                     TIERMEM_KERNEL_ACCESS=off silences this"
                );
                false
            }
        }
    })
}

/// Loads the signal guard alone (`tiermem_sys::seccomp::guard`) where it is
/// wanted, once: for a region whose data a `fork()`ed child copies (the
/// transparent heap), so that forks that run no fork handlers still copy
/// it, and before any kernel access is trapped on the handler-thread path
/// (see `region::kernel_calls_trapped`). Returns whether the guard is
/// loaded; nothing and `false` with `mode` off.
pub(crate) fn guard(mode: KernelAccess) -> bool {
    static DONE: OnceLock<()> = OnceLock::new();
    if mode == KernelAccess::Off {
        return false;
    }
    DONE.get_or_init(|| {
        if let Err(e) = seccomp::install_guard(TRAMPOLINE_AT) {
            eprintln!(
                "tiermem: warning: no signal guard ({e}): a fork that runs no fork handlers \
                 (syscall(SYS_fork)) gives a child zeros where tiered memory is evicted"
            );
        }
    });
    seccomp::guard_loaded()
}

/// Makes a kernel-access filter inherited from the program image that ran
/// this one harmless (its trap is run unchanged) before this image maps
/// anything: for the preload library's constructor. See
/// `tiermem_sys::seccomp::serve_inherited`.
pub fn serve_inherited_traps() {
    if let Err(e) = seccomp::serve_inherited(TRAMPOLINE_AT) {
        eprintln!("tiermem: warning: cannot serve an inherited kernel-access trap ({e})");
    }
}

/// A buffer prepared for a system call that reads or writes it in kernel
/// mode (see [`pin_buffer`]); released on drop.
pub struct PinnedBuffer {
    pins: crate::fault::KernelPins,
}

impl PinnedBuffer {
    /// Bytes from the buffer's start that the call may use: all of it, or
    /// less when a region could not pin more (the call should then be
    /// shortened to this).
    pub fn ready(&self) -> usize {
        self.pins.ready
    }
}

/// Prepares `[addr, addr + len)` for a system call that writes it
/// (`kernel_writes`) or reads it, when the caller makes the call itself
/// rather than through the trap: the preload library's `readv`, `recvmsg`,
/// ... (the filter cannot see buffers behind an `iovec`). Parts in tiered
/// regions are brought in (writable for a write) and pinned until the
/// returned value drops; other memory is left alone.
pub fn pin_buffer(addr: usize, len: usize, kernel_writes: bool) -> PinnedBuffer {
    PinnedBuffer {
        pins: crate::fault::pin_for_kernel(addr, len, kernel_writes),
    }
}

/// Traps the same calls on `[lo, hi)` too: tiered memory outside the
/// window (a program's static arrays taken over in place). The window's
/// trap must be active.
pub(crate) fn add_range(lo: usize, hi: usize) -> Result<(), crate::Error> {
    seccomp::add_ranges(&[(lo as u64, hi as u64)], &trap_rules())
        .map_err(|e| crate::Error::Usage(e.to_string()))
}

/// Free address space in the window: start -> length.
static FREE: Mutex<Option<BTreeMap<usize, usize>>> = Mutex::new(None);

/// A range of the window reserved for one mapping; given back on drop.
#[derive(Debug)]
pub(crate) struct Placement {
    addr: usize,
    len: usize,
}

impl Placement {
    /// Reserves `len` bytes aligned to `align` (a power of two) in the
    /// window, first fit. None when the window is full.
    pub(crate) fn reserve(len: usize, align: usize) -> Option<Placement> {
        let mut g = FREE.lock().unwrap_or_else(|p| p.into_inner());
        let free =
            g.get_or_insert_with(|| BTreeMap::from([(WINDOW.lo as usize, (WINDOW.hi - WINDOW.lo) as usize)]));
        let (start, flen, addr) = free.iter().find_map(|(&s, &l)| {
            let a = s.next_multiple_of(align);
            (a.checked_add(len)? <= s + l).then_some((s, l, a))
        })?;
        free.remove(&start);
        if addr > start {
            free.insert(start, addr - start);
        }
        if addr + len < start + flen {
            free.insert(addr + len, start + flen - (addr + len));
        }
        Some(Placement { addr, len })
    }

    /// The reserved address.
    pub(crate) fn addr(&self) -> usize {
        self.addr
    }

    /// Keeps the range reserved for good (something else is mapped there).
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        let mut g = FREE.lock().unwrap_or_else(|p| p.into_inner());
        let Some(free) = g.as_mut() else { return };
        let (mut start, mut len) = (self.addr, self.len);
        // Coalesce with the neighbours.
        if let Some((&s, &l)) = free.range(..start).next_back() {
            if s + l == start {
                free.remove(&s);
                start = s;
                len += l;
            }
        }
        if let Some(l) = free.remove(&(start + len)) {
            len += l;
        }
        free.insert(start, len);
    }
}

/// The SIGSYS callback: a call from the rule table with its buffer in the
/// window. Calls on regular files (and `getrandom`) do not wait for other
/// processes: their pages are pinned for the call ([`pinned`]). Calls on
/// pipes, sockets and devices may block for as long as another thread or
/// process likes, so nothing of the program's is held across them: they
/// go through a bounce buffer (a read from a pipe or a stream socket in
/// one call of up to 256 KiB, as short reads go there; from a device in
/// pieces until one comes back short, whole as programs expect of
/// `/dev/urandom`), with the data copied in user mode
/// (`tiermem_sys::bounce`). A blocked `recv` then holds no pins that
/// another thread's `send` would wait for (issue 30.3), and a handler
/// that `siglongjmp`s out of the call leaves no page pinned.
fn on_trap(call: &mut TrappedSyscall<'_>) {
    if let Some(r) = uring::on_trap(call).or_else(|| aio::on_trap(call)) {
        call.set_result(r);
        return;
    }
    if let Some(c) = ADDRESSED_CALLS.iter().find(|c| c.nr == call.nr) {
        if let Some(r) = addressed(call, c) {
            call.set_result(r);
            return;
        }
    }
    let Some(rule) = RULES.iter().find(|r| r.nr == call.nr).copied() else {
        let r = if call.nr == libc::SYS_futex {
            futex(call)
        } else if let Some(c) = STRUCT_CALLS.iter().find(|c| c.nr == call.nr) {
            copied(call, c)
        } else {
            call.execute(call.nr, call.args, true)
        };
        call.set_result(r);
        return;
    };
    // Trapped on another argument (`recvfrom`'s or `sendto`'s address,
    // not tiered after all): the buffer is the kernel's to check.
    if !tiered(call.args[rule.buf] as usize, call.args[rule.len] as usize, false) {
        let r = call.execute(call.nr, call.args, true);
        call.set_result(r);
        return;
    }
    let kind = match rule.nr {
        libc::SYS_getrandom => FdKind::File,
        _ => tiermem_sys::bounce::fd_kind(call.args[0] as i32),
    };
    // send/recv flags (sendto and recvfrom: the fourth argument).
    let flags = match rule.nr {
        libc::SYS_recvfrom | libc::SYS_sendto => call.args[3] as i32,
        _ => 0,
    };
    let zerocopy = rule.nr == libc::SYS_sendto && flags & libc::MSG_ZEROCOPY != 0;
    let bounced = |split| Bounced {
        buf: rule.buf,
        len: rule.len,
        offset: rule.offset.then_some(3),
        // A stream's MSG_TRUNC discards what it receives: nothing to copy
        // back (the bounce buffer holds an earlier call's bytes).
        kernel_writes: rule.kernel_writes && !(kind == FdKind::Stream && flags & libc::MSG_TRUNC != 0),
        split,
        private: zerocopy,
        interruptible: kind != FdKind::File,
        hold: Some(hold_for_copy),
    };
    let len = call.args[rule.len] as usize;
    let result = match kind {
        FdKind::File => pinned(call, rule, bounced(Split::Pieces)),
        // One message, one call; and a zero-copy send, whose notification
        // counts calls.
        FdKind::Messages => call.execute_bounced(call.nr, call.args, bounced(Split::Whole)),
        _ if zerocopy => call.execute_bounced(call.nr, call.args, bounced(Split::Whole)),
        // A device that wants each request and reply in one call
        // (/dev/fuse: a read of less than its largest request fails) gets
        // it, up to a bound on the bounce buffer; beyond it, read until a
        // piece comes back short: all of `/dev/urandom`, a terminal's line.
        FdKind::Device if len <= tiermem_sys::bounce::DEVICE_WHOLE_MAX => {
            call.execute_bounced(call.nr, call.args, bounced(Split::Whole))
        }
        FdKind::Device => call.execute_bounced(call.nr, call.args, bounced(Split::Pieces)),
        FdKind::Stream => {
            let wait_all = rule.nr == libc::SYS_recvfrom && flags & libc::MSG_WAITALL != 0;
            // A peek repeated would read the stream's head again.
            let peek = rule.nr == libc::SYS_recvfrom && flags & libc::MSG_PEEK != 0;
            let split = if peek {
                Split::Whole
            } else if rule.kernel_writes && !wait_all {
                Split::Once
            } else {
                Split::Pieces
            };
            call.execute_bounced(call.nr, call.args, bounced(split))
        }
    };
    call.set_result(result);
}

/// An [`ADDRESSED_CALLS`] call whose socket address lies in tiered
/// memory, copied with its message; None where it goes the buffer way: no
/// tiered address, or more than the copies take (a message near
/// [`seccomp::COPIED_MAX`], an address length beyond any socket address's,
/// which the kernel refuses or clamps anyway).
fn addressed(call: &TrappedSyscall<'_>, c: &StructCall) -> Option<i64> {
    let a = call.args;
    let recv = c.nr == libc::SYS_recvfrom;
    let tiered_arg = |k: usize| tiered(a[k] as usize, 1, false);
    // Most of these traps are on the message alone: decided before any
    // length is read.
    if !(tiered_arg(4) || recv && tiered_arg(5)) {
        return None;
    }
    let address_len = if recv {
        length_behind(a[5] as usize)
    } else {
        a[5] as usize
    };
    let fits = address_len <= SOCKADDR_MAX && (a[2] as usize) <= seccomp::COPIED_MAX - 4 * SOCKADDR_MAX;
    fits.then(|| copied(call, c))
}

/// `sizeof(struct sockaddr_storage)`.
const SOCKADDR_MAX: usize = 128;

/// A [`STRUCT_CALLS`] call with its pointer arguments copied.
fn copied(call: &TrappedSyscall<'_>, c: &StructCall) -> i64 {
    let args = call.args;
    let mut bufs = [CopiedArg {
        arg: 0,
        len: 0,
        kernel_writes: false,
        c_string: false,
        result_len: false,
    }; 6];
    // Null pointers are left alone by `execute_copied`; so are pointers to
    // memory that is not tiered (the call trapped on another argument):
    // the kernel checks those itself, and fails with EFAULT where a copy
    // in user mode would crash (an unmapped pointer, a read-only result).
    let mut n = 0;
    for &Ptr(arg, len, kernel_writes) in c.ptrs {
        let bytes = match len {
            Fixed(b) => b,
            Times(j, size) => (args[j] as usize).saturating_mul(size),
            Arg(j) => args[j] as usize,
            FdSet(j) => (args[j] as usize).div_ceil(64).saturating_mul(8),
            // One longer than PATH_MAX fails in the kernel (ENAMETOOLONG).
            Str => libc::PATH_MAX as usize,
            Behind(j) => length_behind(args[j] as usize),
            Received(j) => args[j] as usize,
        };
        if n == bufs.len() || !tiered(args[arg] as usize, bytes, matches!(len, Str)) {
            continue;
        }
        bufs[n] = CopiedArg {
            arg,
            len: bytes,
            kernel_writes,
            c_string: matches!(len, Str),
            result_len: matches!(len, Received(_)),
        };
        n += 1;
    }
    call.execute_copied(call.nr, args, &bufs[..n], c.blocks, Some(hold_for_copy))
}

/// The `socklen_t` at `at`, read through the kernel (`read_untiered`)
/// with its page brought in and pinned first where it is tiered; 0 where
/// it cannot be read (null, unmapped: the argument it sizes then reaches
/// the kernel as given, which fails with `EFAULT` as without tiermem).
fn length_behind(at: usize) -> usize {
    if at == 0 {
        return 0;
    }
    let mut len = [0u8; 4];
    let _pin = crate::fault::pin_for_kernel(at, len.len(), false);
    if seccomp::read_untiered(at, &mut len) < len.len() {
        return 0;
    }
    u32::from_ne_bytes(len) as usize
}

/// Whether an argument of `bytes` at `addr` reaches tiered memory. A C
/// string (`bytes` its longest) that starts below a tiered range reaches
/// it only if every byte up to the range is readable and none ends the
/// string: an unmapped pointer just below a region is the kernel's to
/// refuse, not a copy's to crash on.
fn tiered(addr: usize, bytes: usize, c_string: bool) -> bool {
    match crate::fault::first_registered_in(addr, bytes) {
        None => false,
        Some(start) if start <= addr || !c_string => true,
        Some(start) => seccomp::c_string_runs_to(addr, start),
    }
}

/// A `futex` call with its words brought in first ([`FUTEX_PTRS`]).
fn futex(call: &TrappedSyscall<'_>) -> i64 {
    let mut r = 0;
    for _ in 0..FUTEX_TRIES {
        for (arg, len, write) in FUTEX_PTRS {
            // Arguments that are numbers (the timeout slot holds one for
            // some operations) lie in no tiered range: nothing happens.
            drop(crate::fault::pin_for_kernel(call.args[arg] as usize, len, write));
        }
        r = call.execute(call.nr, call.args, true);
        if r != -(libc::EFAULT as i64) {
            break;
        }
    }
    r
}

/// Pins `[addr, addr + len)` for a bounce buffer's copy to or from it
/// (`write`: the copy writes it): the pages come in without a fault signal
/// of their own, and stay for the copy only. What cannot be pinned, the
/// copy faults in.
fn hold_for_copy(addr: usize, len: usize, write: bool, copy: &mut dyn FnMut()) {
    let _pins = crate::fault::pin_for_kernel(addr, len, write);
    copy();
}

/// A call on a regular file (or `getrandom`) with its buffer pinned, in
/// pieces as large as a region's pin allowance (half its budget): a file
/// gives the same bytes in several calls as in one. Where nothing can be
/// pinned (the allowance is taken by other threads' calls, or the range
/// is not one whose pages tiermem pins), the rest goes through a bounce
/// buffer: never does a call meet a tiered page unprepared.
fn pinned(call: &mut TrappedSyscall<'_>, rule: Rule, fallback: Bounced) -> i64 {
    let addr = call.args[rule.buf] as usize;
    let len = call.args[rule.len] as usize;
    let pieces = rule.nr != libc::SYS_getrandom;
    let mut done = 0usize;
    loop {
        let mut args = call.args;
        args[rule.buf] += done as u64;
        args[rule.len] = (len - done) as u64;
        if rule.offset {
            args[3] += done as u64;
        }
        let pins = crate::fault::pin_for_kernel(addr + done, len - done, rule.kernel_writes);
        if pins.ready == 0 && len > done {
            drop(pins);
            let r = call.execute_bounced(call.nr, args, fallback);
            break if r < 0 && done == 0 {
                r
            } else {
                done as i64 + r.max(0)
            };
        }
        args[rule.len] = pins.ready as u64;
        let r = call.execute(call.nr, args, false);
        drop(pins);
        if r < 0 {
            break if done == 0 { r } else { done as i64 };
        }
        done += r as usize;
        if !pieces || r as usize != args[rule.len] as usize || done >= len {
            break done as i64;
        }
    }
}
