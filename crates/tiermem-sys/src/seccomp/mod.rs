//! Trapping system calls whose buffer lies in a window of the address space
//! (seccomp `SECCOMP_RET_TRAP`), so that they can be made safe for tiered
//! memory and run from the SIGSYS handler.
//!
//! With userfaultfd's SIGBUS mode, a *kernel-mode* access to a page that is
//! missing or write-protected cannot raise a signal: `read(2)` into such a
//! page returns `EFAULT`, even from inside the C library (`fread` calls its
//! internal `__read`, which no interposer sees). A seccomp filter sees every
//! system call. [`install`] loads one that traps the listed calls when
//! their buffer argument points into `[window.lo, window.hi)` (where
//! tiermem places its tiered ranges) and lets everything else through at
//! the cost of a few BPF instructions. The SIGSYS handler hands the trapped
//! call to a callback ([`TrapCallback`]) that prepares the buffer and runs
//! the call itself ([`TrappedSyscall::execute`]) through a trampoline whose
//! address the filter always allows; its result is returned to the program
//! as if the call had run normally.
//!
//! The trampoline is copied to a fixed address ([`install`]'s
//! `trampoline_at`), the same in every program image: a filter survives
//! `execve`, and one loaded by a previous image of the process (a wrapper
//! script that `exec`s the real program) must let the new image's calls
//! through too.
//!
//! The call runs under the program's own signal mask (its handlers can
//! interrupt a blocking call, which restarts or fails with `EINTR` exactly
//! as it would have), except that glibc's cancellation signal stays blocked
//! during it: an asynchronous cancel must not unwind the thread out of the
//! handler while pages are pinned (a `pthread_cancel` of a thread blocked in
//! such a call takes effect when the call returns).
//!
//! Filters cannot be removed, and they are inherited across `fork` and
//! `execve`, handlers only across `fork`: a program image with no SIGSYS
//! handler (or with SIGSYS blocked) is killed by a trap. So a filter traps
//! only calls made from the C library of the image that loaded it
//! ([`call_sites`]), which other images do not share (their libraries sit
//! at other, randomised addresses), and [`serve_inherited`] lets a new
//! image that may share the layout (address randomisation off) run an
//! inherited trap unchanged from its first instruction on. Loading
//! a filter needs `CAP_SYS_ADMIN` or the no-new-privileges bit, which is
//! then set for the process and its children (setuid programs they run do
//! not gain privileges).

use crate::bounce;
use crate::errno::Errno;
use crate::signal::{async_signals, raw_sigprocmask, SIGCANCEL};
use crate::trampoline::{self, call_trampoline};
use crate::uapi::{self, SockFilter, SockFprog};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

mod bpf;
mod guard;
mod sites;
#[cfg(test)]
mod tests;

use bpf::{filter, load};
pub use sites::call_sites;

/// The part of the address space whose buffers are trapped; both ends are
/// multiples of 4 GiB (the filter compares the high 32 bits only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First address.
    pub lo: u64,
    /// One past the last address.
    pub hi: u64,
}

/// A system call to trap, and which of its arguments are pointers to test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrapRule {
    /// System call number.
    pub nr: i64,
    /// The arguments tested, bit k for argument k (0-5): the call traps
    /// when one of them lies in a trapped range; none (0): it always traps
    /// ([`TrapRule::always`]). Only arguments the call
    /// takes as pointers: the registers of arguments it does not take hold
    /// leftovers, which may point anywhere (a trap where SIGSYS is blocked
    /// ends the process).
    pub pointer_args: u8,
    /// Whether the call is refused (then `pointer_args` is not looked at).
    pub refusal: Refusal,
}

/// A [`TrapRule`]'s call refused in this process: it fails with `ENOSYS`
/// wherever it is made from, as on a kernel without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not refused: trapped as its pointer arguments say.
    No,
    /// `ENOSYS` with no signal.
    Quiet,
    /// Made from this image's C library, it traps first, and the callback
    /// sets the result (says why, and returns `-ENOSYS`); from anywhere
    /// else (a library's own `syscall` instruction, another image),
    /// `ENOSYS` with no signal. Only where no thread can block SIGSYS.
    Trapped,
}

impl TrapRule {
    /// A call with one buffer, argument `arg` (`read`: 1).
    pub const fn buffer(nr: i64, arg: usize) -> TrapRule {
        TrapRule {
            nr,
            pointer_args: 1 << arg,
            refusal: Refusal::No,
        }
    }

    /// A call with pointer arguments `args` (bit k for argument k).
    pub const fn pointers(nr: i64, args: u8) -> TrapRule {
        TrapRule {
            nr,
            pointer_args: args,
            refusal: Refusal::No,
        }
    }

    /// A call that traps whatever its arguments (made from this image's C
    /// library): one whose buffers lie behind its arguments (`io_submit`).
    pub const fn always(nr: i64) -> TrapRule {
        TrapRule::pointers(nr, 0)
    }

    /// A call that must not run in this process ([`Refusal`]): one whose
    /// buffers the kernel uses with no system call to trap
    /// (`io_uring_setup`).
    pub const fn refused(nr: i64, how: Refusal) -> TrapRule {
        TrapRule {
            nr,
            pointer_args: 0,
            refusal: how,
        }
    }
}

/// `SECCOMP_RET_DATA` of tiermem's filter, seen as `si_errno`: tells its
/// traps from other filters'.
const TRAP_DATA: u32 = 0x7134;

/// `SECCOMP_RET_DATA` of the signal guard's traps ([`guard`]):
/// the program's own `rt_sigaction`, `rt_sigprocmask` and `rt_sigsuspend`.
const GUARD_DATA: u32 = 0x7135;

/// The trapped call, as the callback sees it.
pub struct TrappedSyscall<'a> {
    /// System call number.
    pub nr: i64,
    /// Its six arguments.
    pub args: [u64; 6],
    ctx: &'a mut libc::ucontext_t,
}

impl TrappedSyscall<'_> {
    /// Runs system call `nr` with `args` through the allowed trampoline and
    /// returns its raw result (negative errno on failure). `interruptible`:
    /// the call may block for long (a pipe, a socket), so it runs under the
    /// interrupted code's signal mask (less glibc's cancellation signal and
    /// the fault signals), and the program's handlers can interrupt it as
    /// they would have; otherwise (a regular file) it runs under the
    /// handler's mask, which saves two system calls.
    pub fn execute(&self, nr: i64, args: [u64; 6], interruptible: bool) -> i64 {
        if !interruptible {
            // SAFETY: the trampoline makes the call the program asked for
            // (or the callback's bounded version of it).
            return unsafe { call_trampoline(nr, args) };
        }
        let mut mask = self.ctx.uc_sigmask;
        crate::signal::strip_fault_signals(&mut mask);
        // SAFETY: the first 64 bits of glibc's sigset_t are the kernel mask;
        // SIGSYS must stay open for a handler of the program's that runs a
        // trapped call while this one blocks.
        unsafe {
            let w = (&mut mask as *mut libc::sigset_t).cast::<u64>();
            *w |= 1u64 << (SIGCANCEL - 1);
            *w &= !(1u64 << (libc::SIGSYS - 1));
        }
        let blocked = async_signals();
        // SAFETY: valid masks; the trampoline makes exactly the system call
        // the program asked for (or the callback's bounded version of it).
        unsafe {
            raw_sigprocmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            let r = call_trampoline(nr, args);
            raw_sigprocmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
            r
        }
    }

    /// Sets the value the program's system call returns.
    pub fn set_result(&mut self, r: i64) {
        self.ctx.uc_mcontext.gregs[libc::REG_RAX as usize] = r;
    }

    /// The kernel's signal mask of the interrupted code (the one restored
    /// when the handler returns).
    pub(crate) fn interrupted_mask(&self) -> u64 {
        // SAFETY: the first 64 bits of glibc's sigset_t are the kernel mask.
        unsafe { *(&self.ctx.uc_sigmask as *const libc::sigset_t).cast::<u64>() }
    }

    /// Replaces the mask the interrupted code runs under once the handler
    /// returns: what a `rt_sigprocmask` made by that code would have set.
    pub(crate) fn set_interrupted_mask(&mut self, mask: u64) {
        // SAFETY: as above.
        unsafe { *(&mut self.ctx.uc_sigmask as *mut libc::sigset_t).cast::<u64>() = mask };
    }
}

/// How a call made through a bounce buffer may be split
/// ([`TrappedSyscall::execute_bounced`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// One call with the whole buffer (a datagram is one message).
    Whole,
    /// One call with up to [`bounce::CHUNK`] bytes: a read from a pipe or
    /// a stream socket, which may return less than asked anyway.
    Once,
    /// Calls of up to a chunk each, until one moves less than it was given:
    /// a write, which must move everything it can, and a read that waits
    /// for all of it (`MSG_WAITALL`, a regular file).
    Pieces,
}

/// A call whose buffer goes through a bounce buffer.
#[derive(Clone, Copy, Debug)]
pub struct Bounced {
    /// Index of the buffer argument.
    pub buf: usize,
    /// Index of the length argument.
    pub len: usize,
    /// Index of a file offset argument, moved on by what earlier pieces did.
    pub offset: Option<usize>,
    /// The kernel writes the buffer (a read) rather than reads it.
    pub kernel_writes: bool,
    /// How it may be split.
    pub split: Split,
    /// The kernel may keep references to the buffer's pages after the
    /// call (`MSG_ZEROCOPY`: until the data is acknowledged): a buffer of
    /// its own, never a pooled one another call refills meanwhile.
    pub private: bool,
    /// It may block for long (see [`TrappedSyscall::execute`]).
    pub interruptible: bool,
    /// Runs the copy between the program's buffer and the bounce buffer
    /// (its argument) with the program's `[addr, addr + len)` held ready
    /// for it (`write`: the copy writes it): the pages brought in without a
    /// fault and kept in place for the copy, never across the call. None:
    /// the copy takes the faults.
    pub hold: Option<HoldForCopy>,
}

/// See [`Bounced::hold`]: `(addr, len, write, copy)`.
pub type HoldForCopy = fn(usize, usize, bool, &mut dyn FnMut());

/// Runs `copy` inside `hold` for `[addr, addr + len)`, or as it is.
fn held(hold: Option<HoldForCopy>, addr: usize, len: usize, write: bool, copy: &mut dyn FnMut()) {
    match hold {
        Some(hold) => hold(addr, len, write, copy),
        None => copy(),
    }
}

impl TrappedSyscall<'_> {
    /// Runs `nr` with `args` as [`TrappedSyscall::execute`] does, but with
    /// its buffer replaced by a bounce buffer ([`bounce`]): what the call
    /// writes is copied to the program's buffer afterwards, what it reads
    /// copied from it before, in user mode. Nothing of the program's
    /// buffer is held while the call blocks. Returns the raw result: bytes
    /// moved, or a negative errno when nothing was.
    pub fn execute_bounced(&self, nr: i64, args: [u64; 6], how: Bounced) -> i64 {
        let total = args[how.len] as usize;
        let want = match how.split {
            Split::Whole => total,
            Split::Once | Split::Pieces => total.min(bounce::CHUNK),
        };
        let b = if how.private {
            bounce::Bounce::private(want)
        } else {
            bounce::Bounce::get(want)
        };
        let Some(mut b) = b else {
            return -(libc::ENOMEM as i64);
        };
        let user = args[how.buf] as usize;
        let mut done = 0usize;
        loop {
            let n = (total - done).min(b.len());
            let mut a = args;
            a[how.buf] = b.addr();
            a[how.len] = n as u64;
            if let Some(o) = how.offset {
                a[o] += done as u64;
            }
            if !how.kernel_writes {
                // SAFETY: the program's buffer, which it handed the kernel
                // to read: tiered memory, whose faults are served here.
                held(how.hold, user + done, n, false, &mut || unsafe {
                    b.load_at(0, user + done, n)
                });
            }
            let r = self.execute(nr, a, how.interruptible);
            if r < 0 {
                return if done > 0 { done as i64 } else { r };
            }
            // A receive with MSG_TRUNC returns the datagram's whole
            // length, which may be more than the buffer took.
            let got = (r as usize).min(n);
            if how.kernel_writes {
                // SAFETY: the program's buffer, which it handed the kernel
                // to write, `got <= n` bytes of it.
                held(how.hold, user + done, got, true, &mut || unsafe {
                    b.store_at(0, user + done, got)
                });
            }
            if how.split == Split::Whole {
                return r;
            }
            done += got;
            if how.split != Split::Pieces || got != n || done >= total {
                return done as i64;
            }
        }
    }
}

/// A small buffer argument of a call made through
/// [`TrappedSyscall::execute_copied`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopiedArg {
    /// Index of the pointer argument.
    pub arg: usize,
    /// Bytes it points to.
    pub len: usize,
    /// The kernel may write them (they are copied back after the call).
    pub kernel_writes: bool,
    /// Only the call's result, in bytes, is copied back (a received
    /// message), and nothing when it fails: the rest of a buffer the
    /// program may be writing meanwhile is left alone.
    pub result_len: bool,
    /// A C string (a path): `len` is its longest, its NUL ends it. One
    /// with no NUL that soon is left to the kernel unchanged.
    pub c_string: bool,
}

/// The most bytes [`TrappedSyscall::execute_copied`] copies for one call.
pub const COPIED_MAX: usize = bounce::CHUNK;

impl TrappedSyscall<'_> {
    /// Runs `nr` with `args` as [`TrappedSyscall::execute`] does, each of
    /// `bufs` (null or empty ones left alone) replaced by a copy in a bounce
    /// buffer: every one is copied in before the call (so what the kernel
    /// leaves alone goes back unchanged), those the kernel writes are
    /// copied back after it whatever its result (`nanosleep` writes the
    /// time left and fails with `EINTR`). The copies run in user mode,
    /// each inside `hold`; nothing of the program's is held while the call
    /// blocks. A call of more than [`COPIED_MAX`] bytes in all runs
    /// unchanged.
    pub fn execute_copied(
        &self,
        nr: i64,
        args: [u64; 6],
        bufs: &[CopiedArg],
        interruptible: bool,
        hold: Option<HoldForCopy>,
    ) -> i64 {
        let slot = |n: usize| n.next_multiple_of(64);
        // Strings measured (in user mode, like the copies).
        let mut sized = [None::<CopiedArg>; 6];
        for (s, c) in sized.iter_mut().zip(bufs) {
            if c.arg >= 6 || args[c.arg] == 0 || c.len == 0 {
                continue;
            }
            let len = if c.c_string {
                // SAFETY: the program passes the kernel a C string here.
                match unsafe { c_string_len(args[c.arg] as usize, c.len, hold) } {
                    Some(n) => n,
                    None => continue,
                }
            } else {
                c.len
            };
            *s = Some(CopiedArg { len, ..*c });
        }
        let live = || sized.iter().flatten();
        let total: usize = live().map(|c| slot(c.len)).sum();
        if total == 0 || total > COPIED_MAX {
            return self.execute(nr, args, interruptible);
        }
        let Some(mut b) = bounce::Bounce::get(total) else {
            return -(libc::ENOMEM as i64);
        };
        // (program's address, offset in the bounce buffer, the argument)
        let mut placed = [(0usize, 0usize, None::<CopiedArg>); 6];
        let mut n = 0;
        let mut a = args;
        let mut at = 0;
        for c in live() {
            let user = args[c.arg] as usize;
            if a[c.arg] != args[c.arg] || n == placed.len() {
                continue; // named twice
            }
            // SAFETY: memory the program handed the kernel to read or
            // write, `c.len` bytes by the call's definition; tiered pages
            // fault in as the program's own accesses would.
            held(hold, user, c.len, false, &mut || unsafe {
                b.load_at(at, user, c.len)
            });
            a[c.arg] = b.addr() + at as u64;
            placed[n] = (user, at, Some(*c));
            n += 1;
            at += slot(c.len);
        }
        let r = self.execute(nr, a, interruptible);
        for &(user, at, c) in &placed[..n] {
            let Some(c) = c.filter(|c| c.kernel_writes) else {
                continue;
            };
            let len = if c.result_len {
                usize::try_from(r).unwrap_or(0).min(c.len)
            } else {
                c.len
            };
            if len > 0 {
                // SAFETY: as above; the program gave the kernel these bytes
                // to write.
                held(hold, user, len, true, &mut || unsafe {
                    b.store_at(at, user, len)
                });
            }
        }
        r
    }
}

/// The length, NUL included, of the C string at `addr` (a path), read in
/// user mode a page at a time (never past its NUL's page), each piece
/// inside `hold`; None when no NUL comes within `max` bytes.
///
/// # Safety
/// `addr` points to a NUL-terminated string, or to at least `max`
/// readable bytes.
unsafe fn c_string_len(addr: usize, max: usize, hold: Option<HoldForCopy>) -> Option<usize> {
    let page = crate::mm::base_page_size();
    let mut at = addr;
    while at - addr < max {
        let end = (at / page + 1) * page;
        let n = (end - at).min(max - (at - addr));
        let mut found = None;
        let mut scan = || {
            // SAFETY: within the page holding `at`, which is readable
            // (the string or the caller's `max` bytes reach it), and no
            // further than `max`.
            let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, n) };
            found = bytes.iter().position(|&c| c == 0);
        };
        held(hold, at, n, false, &mut scan);
        if let Some(k) = found {
            return Some(at + k + 1 - addr);
        }
        at += n;
    }
    None
}

/// Whether the bytes `[addr, end)` are all readable and none is NUL: a C
/// string at `addr` then runs on to `end` (or beyond). Read with
/// [`read_untiered`], so a caller can tell a string that runs into tiered
/// memory from a pointer the kernel itself would refuse with `EFAULT`.
pub fn c_string_runs_to(addr: usize, end: usize) -> bool {
    let mut chunk = [0u8; 256];
    let mut at = addr;
    while at < end {
        let n = (end - at).min(chunk.len());
        let got = read_untiered(at, &mut chunk[..n]);
        if got == 0 || chunk[..got].contains(&0) {
            return false;
        }
        at += got;
    }
    true
}

/// Reads the bytes at `addr` into `buf` through `process_vm_readv` of this
/// very process, which reports an unmapped or unreadable byte as a short
/// count or an error instead of a fault signal. Returns the bytes read
/// (from the start). Meant for untiered memory: a read of a tiered page
/// here is not served as a fault would be.
pub fn read_untiered(addr: usize, buf: &mut [u8]) -> usize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let args = [
        // SAFETY: getpid takes no arguments and cannot fail.
        unsafe { call_trampoline(libc::SYS_getpid, [0; 6]) } as u64,
        &local as *const libc::iovec as u64,
        1,
        &remote as *const libc::iovec as u64,
        1,
        0,
    ];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf` (ours)
    // and reads the program's memory on its own terms: an unreadable byte
    // is a short count or an error, never a signal.
    let got = unsafe { call_trampoline(libc::SYS_process_vm_readv, args) };
    usize::try_from(got).unwrap_or(0).min(buf.len())
}

/// What to do with a trapped call: typically prepare the buffer, run
/// [`TrappedSyscall::execute`], and [`TrappedSyscall::set_result`]. Runs in
/// a signal handler (async-signal-safe, no allocation).
pub type TrapCallback = fn(&mut TrappedSyscall<'_>);

/// Copies the trampoline to `at` (one page, mapped read-only and
/// executable), or checks that an earlier copy is there (a `fork`ed child
/// inherits it). Returns the address the filter must allow: the
/// instruction after the copy's `syscall`.
fn place_trampoline(at: usize) -> Result<u64, TrapError> {
    let code = trampoline::code();
    let len = code.len();
    let page = crate::mm::base_page_size();
    // SAFETY: a fresh private page at a fixed address, never over another
    // mapping (MAP_FIXED_NOREPLACE); checked below.
    let p = unsafe {
        crate::raw::mmap(
            at as *mut libc::c_void,
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p as usize == at {
        // SAFETY: our fresh page, writable, at least `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(code.as_ptr(), at as *mut u8, len);
            if crate::raw::mprotect(p, page, libc::PROT_READ | libc::PROT_EXEC) != 0 {
                return Err(TrapError::Sys {
                    what: "making the trampoline executable",
                    errno: Errno::last(),
                });
            }
        }
    } else {
        if p != libc::MAP_FAILED {
            // SAFETY: the mapping just made elsewhere (an old kernel took
            // the flag as a hint).
            unsafe { crate::raw::munmap(p, page) };
        }
        // Already there (a forked child's inherited copy)? It must be ours.
        // SAFETY: reading `len` bytes at `at` only if mincore says mapped.
        let mapped = unsafe {
            let mut v = 0u8;
            libc::mincore(at as *mut libc::c_void, page, &mut v) == 0
        };
        // SAFETY: mapped per mincore; comparing bytes only.
        let same = mapped && unsafe { std::slice::from_raw_parts(at as *const u8, len) } == code;
        if !same {
            return Err(TrapError::Sys {
                what: "placing the trampoline (its fixed address is taken)",
                errno: Errno(libc::EEXIST),
            });
        }
    }
    trampoline::set_copy(at);
    Ok((at + trampoline::return_offset()) as u64)
}

static CALLBACK: AtomicUsize = AtomicUsize::new(0);
/// The program's SIGSYS action, which tiermem's handler chains to for the
/// SIGSYS that are not its traps: what was installed before it, or what an
/// interposed `sigaction` installed after it ([`set_chained`]).
static CHAINED: crate::signal::ChainedAction = crate::signal::ChainedAction::new();
static INSTALLED: Mutex<Option<Window>> = Mutex::new(None);

/// Why the trap could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum TrapError {
    /// A system call failed.
    #[error("{what}: {errno}")]
    Sys {
        /// The call.
        what: &'static str,
        /// Its error.
        errno: Errno,
    },
    /// Already installed with another window.
    #[error("a kernel-access trap is already installed for another window")]
    OtherWindow,
    /// The window is not 4 GiB aligned or empty.
    #[error("trap window {0:#x}..{1:#x} must be non-empty and 4 GiB aligned")]
    BadWindow(u64, u64),
    /// A rule names an argument past the sixth.
    #[error("trap rule for system call {nr} names arguments {args:#b}; there are 6 (0-5)")]
    BadRule {
        /// The system call.
        nr: i64,
        /// The arguments it names, bit k for argument k.
        args: u8,
    },
    /// The filter does not fit classic BPF's limits (jumps of at most 255
    /// instructions, programs of at most 4096).
    #[error(
        "the kernel-access filter for {sites} call sites and {ranges} ranges exceeds BPF's limits \
         (TIERMEM_KERNEL_ACCESS=off runs without it)"
    )]
    FilterTooLarge {
        /// Code ranges of the C library.
        sites: usize,
        /// Trapped buffer ranges.
        ranges: usize,
    },
}

/// The kernel's limit on one classic BPF program (`BPF_MAXINSNS`).
const BPF_MAXINSNS: usize = 4096;

/// Loads the filter (for every thread of the process) and the SIGSYS
/// handler, once per process image, with the trampoline copied to
/// `trampoline_at` (a page-aligned address that nothing else maps, the same
/// in every image). A second call with the same window is a no-op (the
/// callback is replaced).
pub fn install(
    window: Window,
    trampoline_at: usize,
    rules: &[TrapRule],
    callback: TrapCallback,
) -> Result<(), TrapError> {
    if window.lo >= window.hi || !window.lo.is_multiple_of(1 << 32) || !window.hi.is_multiple_of(1 << 32) {
        return Err(TrapError::BadWindow(window.lo, window.hi));
    }
    let mut g = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    // Release: the handler's Acquire load sees the callback's code.
    CALLBACK.store(callback as usize, Ordering::Release);
    match *g {
        Some(w) if w == window => return Ok(()),
        Some(_) => return Err(TrapError::OtherWindow),
        None => {}
    }
    let ip = place_trampoline(trampoline_at)?;
    install_handler()?;
    guard_with(ip)?;
    load(&filter(
        &[(window.lo, window.hi)],
        ip,
        call_sites(),
        rules,
        false,
    )?)?;
    *g = Some(window);
    Ok(())
}

/// Whether the signal guard's filter has been considered (loaded, or left
/// out because [`guard`] did not want it).
static GUARD: Mutex<bool> = Mutex::new(false);

/// Loads the signal guard ([`guard`]) on its own, once per
/// process image, where it is wanted: what a process whose kernel accesses
/// need no trap (the handler-thread path) still needs for forks that run
/// no fork handlers. [`install`] loads it too.
pub fn install_guard(trampoline_at: usize) -> Result<(), TrapError> {
    let ip = place_trampoline(trampoline_at)?;
    install_handler()?;
    guard_with(ip)
}

fn guard_with(ip: u64) -> Result<(), TrapError> {
    let mut done = GUARD.lock().unwrap_or_else(|p| p.into_inner());
    if *done {
        return Ok(());
    }
    *done = true;
    if !guard::wanted(call_sites()) {
        return Ok(());
    }
    let prog = filter(&[], ip, call_sites(), &[], true)?;
    guard::arm();
    load(&prog)?;
    GUARD_LOADED.store(true, Ordering::Release);
    Ok(())
}

/// Whether the signal guard's filter is loaded in this process: no thread
/// can then block SIGSYS (its masks are trapped and redone without it), so
/// a trapped call never meets a blocked SIGSYS, whichever thread makes it.
static GUARD_LOADED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the signal guard is loaded (see [`install_guard`]); `false`
/// before it was considered, and where it was left out.
pub fn guard_loaded() -> bool {
    GUARD_LOADED.load(Ordering::Acquire)
}

/// Loads a filter that only refuses `nrs` quietly ([`Refusal::Quiet`]),
/// for a process whose kernel accesses are not trapped (no [`install`]).
pub fn refuse(nrs: &[i64]) -> Result<(), TrapError> {
    let rules: Vec<TrapRule> = nrs
        .iter()
        .map(|&nr| TrapRule::refused(nr, Refusal::Quiet))
        .collect();
    load(&filter(&[], 0, &[], &rules, false)?)
}

/// Traps the same calls when their buffer lies in one of `ranges` (exact
/// byte ranges, for tiered memory outside the window: a program's static
/// arrays taken over in place). Loads one more filter; [`install`] must
/// have run.
pub fn add_ranges(ranges: &[(u64, u64)], rules: &[TrapRule]) -> Result<(), TrapError> {
    let _g = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    let at = trampoline::copy_at();
    if _g.is_none() || at == 0 {
        return Err(TrapError::Sys {
            what: "adding trapped ranges before the trap is installed",
            errno: Errno(libc::EINVAL),
        });
    }
    let ip = (at + trampoline::return_offset()) as u64;
    load(&filter(ranges, ip, call_sites(), rules, false)?)
}

/// The window trapped in this process, if any.
pub fn installed() -> Option<Window> {
    *INSTALLED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this image's SIGSYS handler has been installed (by [`install`]
/// or [`serve_inherited`]): from then on the program's own SIGSYS action
/// is only chained to ([`set_chained`]).
static HANDLER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether tiermem's SIGSYS handler is installed in this image: an
/// interposed `sigaction(SIGSYS, ...)` must then record the program's
/// action with [`set_chained`] instead of replacing tiermem's handler (a
/// trapped `read` would "return" its system call number with the buffer
/// untouched, or kill the process under `SIG_IGN`).
pub fn handler_installed() -> bool {
    HANDLER.load(Ordering::Acquire)
}

/// Whether tiermem's SIGSYS handler is installed and still the kernel's
/// action (see `signal::owns`). One system call.
pub fn owns_sigsys() -> bool {
    handler_installed()
        && crate::signal::current_handler(libc::SIGSYS) == Some(on_sigsys as *const () as usize)
}

/// The program's SIGSYS action that tiermem's handler chains to (see
/// [`set_chained`]); `None` before tiermem's handler is installed.
pub fn chained() -> Option<libc::sigaction> {
    if !handler_installed() {
        return None;
    }
    Some(CHAINED.get().unwrap_or_else(default_action))
}

/// Makes `act` the program's SIGSYS action: tiermem's handler stays
/// installed and hands it every SIGSYS that is not one of its traps (one
/// sent by `kill`/`raise`, or trapped by another seccomp filter), with the
/// semantics of `act` (`SIG_IGN` ignores a sent SIGSYS; a trap of another
/// filter under `SIG_IGN` or `SIG_DFL` ends the process, as the kernel
/// would). Returns the action recorded before; `None` (nothing recorded)
/// when tiermem's handler is not installed: call the real `sigaction`.
pub fn set_chained(act: libc::sigaction) -> Option<libc::sigaction> {
    if !handler_installed() {
        return None;
    }
    Some(CHAINED.replace(act).unwrap_or_else(default_action))
}

fn default_action() -> libc::sigaction {
    // SAFETY: a zeroed sigaction is SIG_DFL with no flags and an empty mask.
    unsafe { std::mem::zeroed() }
}

/// Installs tiermem's SIGSYS handler unless it is the live disposition
/// now (checked with the kernel, not with a flag: a handler put in place
/// behind the interposers' back, say with a raw `rt_sigaction`, is moved
/// behind tiermem's again and chained to).
fn install_handler() -> Result<(), TrapError> {
    if crate::signal::current_handler(libc::SIGSYS) == Some(on_sigsys as *const () as usize) {
        HANDLER.store(true, Ordering::Release);
        return Ok(());
    }
    let mut sa = default_action();
    sa.sa_sigaction = on_sigsys as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO;
    // Pins are taken and dropped with asynchronous signals blocked;
    // `execute` opens them for the call itself.
    sa.sa_mask = async_signals();
    let mut old = default_action();
    // SAFETY: valid structs; the C library's own sigaction.
    if unsafe { crate::signal::c_sigaction(libc::SIGSYS, &sa, &mut old) } != 0 {
        return Err(TrapError::Sys {
            what: "installing the SIGSYS handler",
            errno: Errno::last(),
        });
    }
    HANDLER.store(true, Ordering::Release);
    if old.sa_sigaction != on_sigsys as *const () as usize {
        set_chained(old);
    }
    Ok(())
}

/// For a program image that may have inherited tiermem's filter from the
/// image that ran it (filters survive `execve`, handlers do not): when the
/// process is under a seccomp filter, places the trampoline at
/// `trampoline_at` and installs the SIGSYS handler now, before this image
/// maps anything, so that a call an inherited filter traps is run
/// unchanged instead of killing the process. A later [`install`] makes the
/// same handler serve this image's own tiered memory. Does nothing without
/// a filter. Meant for a library's constructor (the preload library's):
/// the inherited filters trap only calls of their own image's C library,
/// so this matters when two images share a layout (address randomisation
/// off: gdb, `setarch -R`), where the new image's C library sits where the
/// old one's did.
pub fn serve_inherited(trampoline_at: usize) -> Result<(), TrapError> {
    // SAFETY: prctl with plain integer arguments; 2 is SECCOMP_MODE_FILTER.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } != 2 {
        return Ok(());
    }
    let g = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_some() {
        return Ok(());
    }
    // The fixed trampoline is what every tiermem filter lets through
    // (filters of older builds trap calls from any other code).
    place_trampoline(trampoline_at)?;
    install_handler()
}
/// `si_syscall`: an int after the call address in the SIGSYS union.
///
/// # Safety
/// `info` is the kernel's siginfo of a SIGSYS.
unsafe fn si_syscall(info: *const libc::siginfo_t) -> i64 {
    // SAFETY: the union starts at byte 16; _call_addr is a pointer (8
    // bytes), then int _syscall.
    unsafe { *(info.cast::<u8>().add(24).cast::<i32>()) as i64 }
}

extern "C" fn on_sigsys(signo: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno location is thread-local and always valid.
    let saved_errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (code, data) = unsafe { ((*info).si_code, (*info).si_errno as u32) };
    let ours = code == uapi::SYS_SECCOMP && (data == TRAP_DATA || data == GUARD_DATA);
    if !ours || ctx.is_null() {
        forward(signo, info, ctx);
    } else {
        // SAFETY: ctx is the interrupted thread's ucontext for SA_SIGINFO.
        let uc = unsafe { &mut *(ctx.cast::<libc::ucontext_t>()) };
        let g = &uc.uc_mcontext.gregs;
        let args = [
            g[libc::REG_RDI as usize] as u64,
            g[libc::REG_RSI as usize] as u64,
            g[libc::REG_RDX as usize] as u64,
            g[libc::REG_R10 as usize] as u64,
            g[libc::REG_R8 as usize] as u64,
            g[libc::REG_R9 as usize] as u64,
        ];
        // SAFETY: a seccomp SIGSYS carries the call number.
        let nr = unsafe { si_syscall(info) };
        let mut call = TrappedSyscall { nr, args, ctx: uc };
        let cb = CALLBACK.load(Ordering::Acquire);
        if data == GUARD_DATA {
            guard::emulate(&mut call);
        } else if cb == 0 {
            // A filter inherited from the image that ran this one trapped
            // it (serve_inherited): nothing of this image is tiered yet.
            let r = call.execute(nr, args, true);
            call.set_result(r);
        } else {
            // SAFETY: only `install` stores into CALLBACK, always a
            // TrapCallback.
            let f: TrapCallback = unsafe { std::mem::transmute::<usize, TrapCallback>(cb) };
            f(&mut call);
        }
    }
    // SAFETY: restore the interrupted code's errno.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Hands a SIGSYS that is not tiermem's to the program's action (see
/// [`set_chained`]): its handler; for a SIGSYS sent by `kill`/`raise`
/// under `SIG_IGN`, nothing; otherwise the default action, which ends the
/// process (the kernel never lets a seccomp trap's SIGSYS be ignored).
fn forward(signo: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let (h, flags) = CHAINED.handler();
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let code = unsafe { (*info).si_code };
    if h == libc::SIG_IGN && code != uapi::SYS_SECCOMP {
        return;
    }
    // A SIGSYS does not recur by itself: under the default action it is
    // raised again.
    crate::signal::chain_to(h, flags, signo, info, ctx, true);
}
