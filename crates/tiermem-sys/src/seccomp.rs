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

/// The part of the address space whose buffers are trapped; both ends are
/// multiples of 4 GiB (the filter compares the high 32 bits only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First address.
    pub lo: u64,
    /// One past the last address.
    pub hi: u64,
}

/// A system call to trap, and which argument holds its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrapRule {
    /// System call number.
    pub nr: i64,
    /// Index (0-5) of the buffer argument.
    pub buffer_arg: usize,
}

/// `SECCOMP_RET_DATA` of tiermem's filter, seen as `si_errno`: tells its
/// traps from other filters'.
const TRAP_DATA: u32 = 0x7134;

/// `SECCOMP_RET_DATA` of the signal guard's traps ([`crate::sigguard`]):
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
        let Some(mut b) = bounce::Bounce::get(want) else {
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
            let held = |addr: usize, len: usize, write: bool, copy: &mut dyn FnMut()| match how.hold {
                Some(hold) => hold(addr, len, write, copy),
                None => copy(),
            };
            if !how.kernel_writes {
                // SAFETY: the program's buffer, which it handed the kernel
                // to read: tiered memory, whose faults are served here.
                held(user + done, n, false, &mut || unsafe { b.load(user + done, n) });
            }
            let r = self.execute(nr, a, how.interruptible);
            if r < 0 {
                return if done > 0 { done as i64 } else { r };
            }
            let r = (r as usize).min(n);
            if how.kernel_writes {
                // SAFETY: the program's buffer, which it handed the kernel
                // to write, `r <= n` bytes of it.
                held(user + done, r, true, &mut || unsafe { b.store(user + done, r) });
            }
            done += r;
            if how.split != Split::Pieces || r != n || done >= total {
                return done as i64;
            }
        }
    }
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

/// The code ranges whose calls the filters of this image trap (see
/// [`call_sites`]).
static SITES: OnceLock<Vec<(u64, u64)>> = OnceLock::new();

const PT_LOAD: u32 = 1;
const PT_INTERP: u32 = 3;
const PF_X: u32 = 1;

/// Where this image's C library makes its system calls: the executable
/// segments of the loaded objects that define `read`, `fread`, `recvfrom`,
/// `getrandom`, `write`, `syscall`, ... (glibc's `libc.so.6`; `libpthread`
/// too before glibc 2.34; the executable itself when the C library is
/// linked in statically), and of the objects named like a C library
/// (`libc.so.*`, `libpthread.so.*`, musl's), in case another library wraps
/// those functions; the vDSO's code (glibc 2.41 and later make
/// `getrandom` from it); and every executable mapping in `/proc/self/maps`
/// of a file named like a C library, which covers the C libraries of link
/// namespaces that `dl_iterate_phdr` does not show (an `LD_AUDIT`
/// module's, a `dlmopen(LM_ID_NEWLM)`). Empty if none is found (the
/// filters then trap calls from any code). Computed once per image, when
/// the first filter is loaded: a C library loaded later (a new namespace)
/// is not a call site, and its calls on a page that is not resident fail
/// with `EFAULT`.
///
/// The executable of a dynamically linked program is never a call site
/// (a non-PIE one that takes the address of `read` holds a canonical PLT
/// entry that `&read` and `dlsym` resolve to). A statically linked program
/// is its own C library: its whole code is a call site, at fixed addresses
/// when it is not a static PIE, so a static non-PIE program it `exec`s
/// whose code overlaps and that makes such a call on a buffer in the
/// trapped ranges is killed (build static programs with `-static-pie`).
///
/// Only calls made from there are trapped: every `read`, `fread`, `recv`,
/// `getrandom`, ... of the program and of its libraries, but not a raw
/// `syscall` instruction elsewhere (a static Go binary, a JIT), which meets
/// a non-resident page with `EFAULT` as without tiermem. And not the calls
/// of another program image: the filters outlive `execve`, and a program
/// the process runs next (a shell, any tool) has its C library at other,
/// randomised addresses.
pub fn call_sites() -> &'static [(u64, u64)] {
    SITES.get_or_init(|| {
        // The definitions, both as the linker resolved them for this
        // library and as the dynamic linker finds them by name (a non-PIE
        // executable may hold a canonical PLT entry for the former).
        let mut targets: Vec<usize> = vec![
            libc::read as *const () as usize,
            libc::pread64 as *const () as usize,
            libc::fread as *const () as usize,
            libc::recvfrom as *const () as usize,
            libc::getrandom as *const () as usize,
            libc::write as *const () as usize,
            libc::syscall as *const () as usize,
        ];
        for name in [c"read", c"fread", c"recvfrom", c"write", c"syscall"] {
            // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the
            // global scope.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            if !p.is_null() {
                targets.push(p as usize);
            }
        }
        let mut search = SiteSearch {
            targets,
            found: Vec::new(),
        };
        // SAFETY: the callback only reads the loader's program headers
        // for the duration of each call; `search` outlives the iteration.
        unsafe {
            libc::dl_iterate_phdr(Some(visit_object), (&mut search as *mut SiteSearch).cast());
        }
        let mut found = search.found;
        if !found.is_empty() {
            // glibc >= 2.41 makes `getrandom` from the vDSO (its fallback
            // system call is the vDSO's own instruction).
            for r in vdso_code() {
                add_site(&mut found, r);
            }
            // C libraries of other link namespaces (`dlmopen`, `LD_AUDIT`),
            // which dl_iterate_phdr does not show: their mapped code.
            for r in c_libraries_mapped() {
                add_site(&mut found, r);
            }
        }
        found
    })
}

/// Adds `r` unless it overlaps a site already there (the same code seen
/// twice: program headers and `/proc/self/maps` round differently).
fn add_site(found: &mut Vec<(u64, u64)>, r: (u64, u64)) {
    if r.0 < r.1 && !found.iter().any(|&(lo, hi)| r.0 < hi && lo < r.1) {
        found.push(r);
    }
}

/// Whether a file name (the last path component) is a C library's:
/// glibc's `libc.so.6` (`libc-2.*.so` before 2.34), `libpthread`, musl's.
fn named_like_c_library(file: &[u8]) -> bool {
    [
        "libc.so",
        "libc-2.",
        "libpthread.so",
        "libpthread-",
        "libc.musl",
        "ld-musl",
    ]
    .iter()
    .any(|p| file.starts_with(p.as_bytes()))
}

/// The executable segments of the vDSO (`AT_SYSINFO_EHDR`), from its
/// program headers.
fn vdso_code() -> Vec<(u64, u64)> {
    // SAFETY: getauxval reads the auxiliary vector; 0 when absent.
    let ehdr = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if ehdr == 0 {
        return Vec::new();
    }
    // SAFETY: the kernel maps the vDSO's ELF image at `ehdr`, readable,
    // for the life of the process: its header and program headers.
    let phdrs = unsafe {
        let h = &*(ehdr as *const libc::Elf64_Ehdr);
        std::slice::from_raw_parts(
            (ehdr + h.e_phoff as usize) as *const libc::Elf64_Phdr,
            h.e_phnum as usize,
        )
    };
    // The load bias: where the segment holding file offset 0 (the ELF
    // header) was meant to be.
    let Some(first) = phdrs.iter().find(|p| p.p_type == PT_LOAD && p.p_offset == 0) else {
        return Vec::new();
    };
    let bias = (ehdr as u64).wrapping_sub(first.p_vaddr);
    phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD && p.p_flags & PF_X != 0)
        .map(|p| {
            (
                bias.wrapping_add(p.p_vaddr),
                bias.wrapping_add(p.p_vaddr + p.p_memsz),
            )
        })
        .collect()
}

/// The executable mappings of files named like a C library, from
/// `/proc/self/maps`: also those of link namespaces other than this
/// library's (`dlmopen(LM_ID_NEWLM)`, an `LD_AUDIT` module's), which
/// `dl_iterate_phdr` does not show. Empty without `/proc`.
fn c_libraries_mapped() -> Vec<(u64, u64)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some(path) = f.nth(3) else { continue };
        if perms.as_bytes().get(2) != Some(&b'x') || !path.starts_with('/') {
            continue;
        }
        let file = path.rsplit('/').next().unwrap_or(path);
        if !named_like_c_library(file.as_bytes()) {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) {
            out.push((lo, hi));
        }
    }
    out
}

struct SiteSearch {
    targets: Vec<usize>,
    found: Vec<(u64, u64)>,
}

/// `dl_iterate_phdr` callback: adds the executable segments of an object
/// that holds one of the targets.
unsafe extern "C" fn visit_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is the SiteSearch passed to dl_iterate_phdr, and
    // `info` the loader's description of one object, valid for this call.
    let (search, info) = unsafe { (&mut *data.cast::<SiteSearch>(), &*info) };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: the loader's program headers of this object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    // SAFETY: a non-null dlpi_name is the loader's NUL-terminated name.
    let unnamed = info.dlpi_name.is_null() || unsafe { *info.dlpi_name } == 0;
    if unnamed && phdrs.iter().any(|p| p.p_type == PT_INTERP) {
        // The executable of a dynamically linked program is not its C
        // library, even when it seems to define `read`: a non-PIE
        // executable that takes the address of `read` holds a canonical
        // PLT entry, which is where `&read` and `dlsym` point. Its code is
        // not randomised, so another non-PIE program this process runs
        // would share the call site and be killed by a trap.
        return 0;
    }
    let base = info.dlpi_addr;
    let holds = |t: usize| {
        phdrs.iter().any(|p| {
            p.p_type == PT_LOAD
                && p.p_flags & PF_X != 0
                && (base + p.p_vaddr..base + p.p_vaddr + p.p_memsz).contains(&(t as u64))
        })
    };
    // By name too: another preloaded library that wraps `read` (an I/O
    // tracer) makes the targets its own, but the C library still makes the
    // calls.
    let is_libc = !info.dlpi_name.is_null() && {
        // SAFETY: the loader's NUL-terminated path of this object.
        let path = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes();
        named_like_c_library(path.rsplit(|&b| b == b'/').next().unwrap_or(path))
    };
    if is_libc || search.targets.iter().any(|&t| holds(t)) {
        for p in phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD && p.p_flags & PF_X != 0)
        {
            let r = (base + p.p_vaddr, base + p.p_vaddr + p.p_memsz);
            if !search.found.contains(&r) {
                search.found.push(r);
            }
        }
    }
    0
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
    #[error("trap rule for system call {nr} names argument {arg}; there are 6 (0-5)")]
    BadRule {
        /// The system call.
        nr: i64,
        /// The argument index.
        arg: usize,
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
    if window.lo >= window.hi || window.lo % (1 << 32) != 0 || window.hi % (1 << 32) != 0 {
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
/// out because [`crate::sigguard`] did not want it).
static GUARD: Mutex<bool> = Mutex::new(false);

/// Loads the signal guard ([`crate::sigguard`]) on its own, once per
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
    if !crate::sigguard::wanted(call_sites()) {
        return Ok(());
    }
    let prog = filter(&[], ip, call_sites(), &[], true)?;
    crate::sigguard::arm();
    load(&prog)
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

/// A BPF program under construction, with forward jumps to labels.
struct Asm {
    code: Vec<SockFilter>,
    /// (instruction, label, true-branch?) to patch.
    fixups: Vec<(usize, usize, bool)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn here(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len());
    }
    fn stmt(&mut self, code: u16, k: u32) {
        self.code.push(SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        });
    }
    /// `if A op k goto t else goto f` (None: fall through).
    fn jump(&mut self, code: u16, k: u32, t: Option<usize>, f: Option<usize>) {
        let at = self.code.len();
        self.code.push(SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        });
        if let Some(t) = t {
            self.fixups.push((at, t, true));
        }
        if let Some(f) = f {
            self.fixups.push((at, f, false));
        }
    }
    /// Resolves the jumps; None when one is farther than 255 instructions
    /// or the program longer than the kernel takes.
    fn finish(mut self) -> Option<Vec<SockFilter>> {
        if self.code.len() > BPF_MAXINSNS {
            return None;
        }
        for (at, l, t) in self.fixups {
            let target = self.labels[l]?;
            let off = u8::try_from(target.checked_sub(at + 1)?).ok()?;
            if t {
                self.code[at].jt = off;
            } else {
                self.code[at].jf = off;
            }
        }
        Some(self.code)
    }
}

/// Emits a test of the 64-bit word at `lo_off` (low half) and `lo_off + 4`
/// (high half) of `seccomp_data` against each of `ranges`: jumps to `hit`
/// when it lies in one, falls through otherwise.
fn in_ranges(a: &mut Asm, lo_off: u32, ranges: &[(u64, u64)], hit: usize) {
    let hi_off = lo_off + 4;
    for &(lo, hi) in ranges {
        let (lh, ll, hh, hl) = ((lo >> 32) as u32, lo as u32, (hi >> 32) as u32, hi as u32);
        let (next, upper) = (a.label(), a.label());
        // x >= lo: x.hi > lo.hi, or x.hi == lo.hi and x.lo >= lo.lo.
        a.stmt(uapi::BPF_LD_W_ABS, hi_off);
        a.jump(uapi::BPF_JMP_JGT_K, lh, Some(upper), None);
        a.jump(uapi::BPF_JMP_JEQ_K, lh, None, Some(next));
        a.stmt(uapi::BPF_LD_W_ABS, lo_off);
        a.jump(uapi::BPF_JMP_JGE_K, ll, Some(upper), Some(next));
        // x < hi: x.hi < hi.hi, or x.hi == hi.hi and x.lo < hi.lo.
        a.here(upper);
        a.stmt(uapi::BPF_LD_W_ABS, hi_off);
        a.jump(uapi::BPF_JMP_JGT_K, hh, Some(next), None);
        a.jump(uapi::BPF_JMP_JEQ_K, hh, None, Some(hit));
        a.stmt(uapi::BPF_LD_W_ABS, lo_off);
        a.jump(uapi::BPF_JMP_JGE_K, hl, Some(next), Some(hit));
        a.here(next);
    }
}

/// Emits the test every trap starts with: calls made through the
/// trampoline (whose `syscall` returns to `ip`), and calls made from
/// anywhere but this image's C library (`sites`; none: any code is), go to
/// `pass`; the others fall through.
fn from_this_c_library(a: &mut Asm, ip: u64, sites: &[(u64, u64)], pass: usize) {
    let not_ours = a.label();
    a.stmt(uapi::BPF_LD_W_ABS, uapi::SECCOMP_DATA_IP);
    a.jump(uapi::BPF_JMP_JEQ_K, ip as u32, None, Some(not_ours));
    a.stmt(uapi::BPF_LD_W_ABS, uapi::SECCOMP_DATA_IP + 4);
    a.jump(uapi::BPF_JMP_JEQ_K, (ip >> 32) as u32, Some(pass), None);
    a.here(not_ours);
    if !sites.is_empty() {
        let from_libc = a.label();
        in_ranges(a, uapi::SECCOMP_DATA_IP, sites, from_libc);
        // An unsigned A >= 0: always taken.
        a.jump(uapi::BPF_JMP_JGE_K, 0, Some(pass), None);
        a.here(from_libc);
    }
}

/// The filter: `rules`' calls trap when their buffer argument lies in one
/// of `ranges` and the call is made from one of `sites` (the C library's
/// code in the image that loads the filter; any code when `sites` is
/// empty), unless made from the trampoline (whose `syscall` returns to
/// `ip`); 64-bit comparisons done on the two halves.
///
/// `sites` is what keeps other program images safe: the filter outlives
/// `execve`, and a program the process runs next (a shell, any tool) that
/// has no SIGSYS handler for it, or none yet, would be killed by a trap.
/// Its own C library sits elsewhere (the addresses are randomised per
/// image), so its calls are never trapped, whatever its buffers.
///
/// One check block per buffer argument position the rules use (17 + 10 per
/// site + 10 per range instructions each); an error, not a panic, when the
/// program does not fit classic BPF.
/// With `guard`, it also traps the signal calls of this image's C library
/// that could take SIGBUS, SIGSEGV or SIGSYS away from tiermem
/// ([`crate::sigguard`]): `rt_sigaction` that sets any action or asks for
/// one of those three, `rt_sigprocmask` that may block (how is not
/// `SIG_UNBLOCK`, a set is given), and every `rt_sigsuspend`; and the
/// forks that run no fork handlers: `fork` and a `clone` that shares
/// nothing but starts the child on the caller's stack, as a fork does (a
/// `clone3`, whose flags a filter cannot read, fails with ENOSYS: the C
/// library then makes a `clone`).
fn filter(
    ranges: &[(u64, u64)],
    ip: u64,
    sites: &[(u64, u64)],
    rules: &[TrapRule],
    guard: bool,
) -> Result<Vec<SockFilter>, TrapError> {
    if let Some(r) = rules.iter().find(|r| r.buffer_arg > 5) {
        return Err(TrapError::BadRule {
            nr: r.nr,
            arg: r.buffer_arg,
        });
    }
    let mut a = Asm {
        code: Vec::new(),
        fixups: Vec::new(),
        labels: Vec::new(),
    };
    let allow = a.label();
    let mut used: Vec<usize> = rules.iter().map(|r| r.buffer_arg).collect();
    used.sort_unstable();
    used.dedup();
    // Label of each used argument position's block.
    let mut args = [usize::MAX; 6];
    for &k in &used {
        args[k] = a.label();
    }
    // The system call number first, and nothing else for the calls not
    // trapped: the kernel then finds (by emulating the filter with the
    // number alone) that they are always allowed and skips the filter for
    // them altogether (seccomp's action cache), so the fault path's ioctls
    // and rt_sigreturn pay nothing.
    a.stmt(uapi::BPF_LD_W_ABS, uapi::SECCOMP_DATA_ARCH);
    a.jump(uapi::BPF_JMP_JEQ_K, uapi::AUDIT_ARCH_X86_64, None, Some(allow));
    a.stmt(uapi::BPF_LD_W_ABS, uapi::SECCOMP_DATA_NR);
    for r in rules {
        a.jump(uapi::BPF_JMP_JEQ_K, r.nr as u32, Some(args[r.buffer_arg]), None);
    }
    let guards = [
        libc::SYS_rt_sigaction,
        libc::SYS_rt_sigprocmask,
        libc::SYS_rt_sigsuspend,
        libc::SYS_clone,
        libc::SYS_fork,
        libc::SYS_clone3,
    ]
    .map(|nr| (nr, a.label()));
    if guard {
        for &(nr, l) in &guards {
            a.jump(uapi::BPF_JMP_JEQ_K, nr as u32, Some(l), None);
        }
    }
    a.here(allow);
    a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ALLOW);
    if guard {
        // Jumps go forward only: the guard has its own returns.
        let (pass, trap, enosys) = (a.label(), a.label(), a.label());
        let arg = |k: u32| uapi::SECCOMP_DATA_ARGS + 8 * k;
        for &(nr, l) in &guards {
            a.here(l);
            from_this_c_library(&mut a, ip, sites, pass);
            match nr {
                libc::SYS_rt_sigaction => {
                    // An action given: trap. A query: only for the three.
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1));
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, None, Some(trap));
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1) + 4);
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, None, Some(trap));
                    a.stmt(uapi::BPF_LD_W_ABS, arg(0));
                    for sig in [libc::SIGBUS, libc::SIGSEGV, libc::SIGSYS] {
                        a.jump(uapi::BPF_JMP_JEQ_K, sig as u32, Some(trap), None);
                    }
                    a.jump(uapi::BPF_JMP_JGE_K, 0, Some(pass), None);
                }
                libc::SYS_rt_sigprocmask => {
                    // SIG_UNBLOCK, or no set: nothing gets blocked.
                    a.stmt(uapi::BPF_LD_W_ABS, arg(0));
                    a.jump(uapi::BPF_JMP_JEQ_K, libc::SIG_UNBLOCK as u32, Some(pass), None);
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1));
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, None, Some(trap));
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1) + 4);
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, Some(pass), Some(trap));
                }
                libc::SYS_clone => {
                    // A thread, a vfork (CLONE_VM), or a child on a stack
                    // of its own: run.
                    a.stmt(uapi::BPF_LD_W_ABS, arg(0));
                    a.jump(uapi::BPF_JMP_JSET_K, libc::CLONE_VM as u32, Some(pass), None);
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1));
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, None, Some(pass));
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1) + 4);
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, Some(trap), Some(pass));
                }
                libc::SYS_clone3 => a.jump(uapi::BPF_JMP_JGE_K, 0, Some(enosys), None),
                _ => a.jump(uapi::BPF_JMP_JGE_K, 0, Some(trap), None),
            }
        }
        a.here(enosys);
        a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        a.here(pass);
        a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ALLOW);
        a.here(trap);
        a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_TRAP | GUARD_DATA);
    }
    // Classic BPF jumps only forward: each argument check ends in its own
    // returns.
    for &k in &used {
        let l = args[k];
        let arg_off = uapi::SECCOMP_DATA_ARGS + 8 * k as u32;
        a.here(l);
        let (pass, trap) = (a.label(), a.label());
        from_this_c_library(&mut a, ip, sites, pass);
        in_ranges(&mut a, arg_off, ranges, trap);
        a.here(pass);
        a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ALLOW);
        a.here(trap);
        a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_TRAP | TRAP_DATA);
    }
    a.finish().ok_or(TrapError::FilterTooLarge {
        sites: sites.len(),
        ranges: ranges.len(),
    })
}

fn load(prog: &[SockFilter]) -> Result<(), TrapError> {
    let fprog = SockFprog {
        len: prog.len() as u16,
        filter: prog.as_ptr(),
    };
    let seccomp = || {
        // SAFETY: fprog points to `prog`, alive for the call; TSYNC applies
        // the filter to every thread of the process.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                uapi::SECCOMP_SET_MODE_FILTER,
                uapi::SECCOMP_FILTER_FLAG_TSYNC,
                &fprog as *const SockFprog,
            )
        }
    };
    let mut r = seccomp();
    if r != 0 && Errno::last().raw() == libc::EACCES {
        // Without CAP_SYS_ADMIN, filters need no-new-privileges.
        // SAFETY: prctl with plain integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(TrapError::Sys {
                what: "prctl(PR_SET_NO_NEW_PRIVS)",
                errno: Errno::last(),
            });
        }
        r = seccomp();
    }
    match r {
        0 => Ok(()),
        // With TSYNC, a positive result names a thread that could not be
        // synchronised.
        r if r > 0 => Err(TrapError::Sys {
            what: "seccomp(TSYNC): a thread has another filter",
            errno: Errno(libc::ESRCH),
        }),
        _ => Err(TrapError::Sys {
            what: "seccomp(SET_MODE_FILTER)",
            errno: Errno::last(),
        }),
    }
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
            crate::sigguard::emulate(&mut call);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `read` (buffer: argument 1) and `getrandom` (argument 0): one rule
    /// per argument position the filter checks.
    fn read_and_getrandom() -> [TrapRule; 2] {
        [
            TrapRule {
                nr: libc::SYS_read,
                buffer_arg: 1,
            },
            TrapRule {
                nr: libc::SYS_getrandom,
                buffer_arg: 0,
            },
        ]
    }

    /// Runs a filter over a fake seccomp_data (the BPF subset used here).
    fn run(prog: &[SockFilter], nr: i64, ip: u64, args: [u64; 6]) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                0 => nr as u32,
                4 => uapi::AUDIT_ARCH_X86_64,
                8 => ip as u32,
                12 => (ip >> 32) as u32,
                o => {
                    let k = ((o - 16) / 8) as usize;
                    if (o - 16) % 8 == 0 {
                        args[k] as u32
                    } else {
                        (args[k] >> 32) as u32
                    }
                }
            }
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            pc += 1;
            let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
            match i.code {
                uapi::BPF_LD_W_ABS => acc = word(i.k),
                uapi::BPF_RET_K => return i.k,
                uapi::BPF_JMP_JEQ_K => pc += jump(acc == i.k),
                uapi::BPF_JMP_JGE_K => pc += jump(acc >= i.k),
                uapi::BPF_JMP_JGT_K => pc += jump(acc > i.k),
                uapi::BPF_JMP_JSET_K => pc += jump(acc & i.k != 0),
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn exact_ranges_trap_only_inside() {
        let rules = [TrapRule {
            nr: libc::SYS_read,
            buffer_arg: 1,
        }];
        let ranges = [
            (0x5555_5555_8000, 0x5555_9555_8000),
            (0x7_ffff_f000, 0x8_0000_1000),
        ];
        let ip = 0x10ff_ffe0_0019;
        let p = filter(&ranges, ip, &[], &rules, false).unwrap();
        let trap = uapi::SECCOMP_RET_TRAP | TRAP_DATA;
        let read = |buf: u64| run(&p, libc::SYS_read, 0x1234, [3, buf, 10, 0, 0, 0]);
        for (lo, hi) in ranges {
            assert_eq!(read(lo), trap);
            assert_eq!(read(hi - 1), trap);
            assert_eq!(read(lo - 1), uapi::SECCOMP_RET_ALLOW);
            assert_eq!(read(hi), uapi::SECCOMP_RET_ALLOW);
        }
        assert_eq!(read(0x5555_0000_0000), uapi::SECCOMP_RET_ALLOW);
        assert_eq!(read(0x6000_0000_0000), uapi::SECCOMP_RET_ALLOW);
        // Other calls, and the trampoline's own, pass.
        assert_eq!(
            run(&p, libc::SYS_write, 0, [1, ranges[0].0, 1, 0, 0, 0]),
            uapi::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(&p, libc::SYS_read, ip, [1, ranges[0].0, 1, 0, 0, 0]),
            uapi::SECCOMP_RET_ALLOW
        );
        // And the window.
        let w = filter(&[(0x1100_0000_0000, 0x5100_0000_0000)], ip, &[], &rules, false).unwrap();
        assert_eq!(
            run(&w, libc::SYS_read, 0, [0, 0x1100_0000_0000, 1, 0, 0, 0]),
            trap
        );
        assert_eq!(
            run(&w, libc::SYS_read, 0, [0, 0x50ff_ffff_ffff, 1, 0, 0, 0]),
            trap
        );
        assert_eq!(
            run(&w, libc::SYS_read, 0, [0, 0x5100_0000_0000, 1, 0, 0, 0]),
            uapi::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(&w, libc::SYS_read, 0, [0, 0x10ff_ffff_ffff, 1, 0, 0, 0]),
            uapi::SECCOMP_RET_ALLOW
        );
    }

    #[test]
    fn only_calls_from_the_c_library_trap() {
        let rules = read_and_getrandom();
        let window = (0x1100_0000_0000, 0x5100_0000_0000);
        let statics = (0x5555_5555_8000, 0x5555_5655_8000);
        // Two text segments (glibc before 2.34: libc and libpthread), one
        // straddling a 4 GiB boundary.
        let sites = [
            (0x7f12_3450_0000, 0x7f12_3468_0000),
            (0x7f12_ffff_f000, 0x7f13_0000_1000),
        ];
        let ip = 0x10ff_ffe0_0019;
        let p = filter(&[window, statics], ip, &sites, &rules, false).unwrap();
        let trap = uapi::SECCOMP_RET_TRAP | TRAP_DATA;
        let allow = uapi::SECCOMP_RET_ALLOW;
        let read = |from: u64, buf: u64| run(&p, libc::SYS_read, from, [3, buf, 10, 0, 0, 0]);
        for &(lo, hi) in &sites {
            for from in [lo, lo + 2, hi - 1] {
                assert_eq!(read(from, window.0), trap, "{from:#x}");
                assert_eq!(read(from, statics.1 - 1), trap, "{from:#x}");
                assert_eq!(read(from, 0x7ffc_0000_0000), allow, "{from:#x}");
                assert_eq!(
                    run(&p, libc::SYS_getrandom, from, [window.0 + 64, 8, 0, 0, 0, 0]),
                    trap
                );
            }
            // Another image's code: its own C library, its executable.
            for from in [lo - 1, hi, 0x5555_5555_5000, 0x7f99_0000_1234, 0x1500_0000_0000] {
                assert_eq!(read(from, window.0), allow, "{from:#x}");
                assert_eq!(read(from, statics.0), allow, "{from:#x}");
                assert_eq!(
                    run(&p, libc::SYS_getrandom, from, [window.0 + 64, 8, 0, 0, 0, 0]),
                    allow
                );
            }
        }
        // The trampoline's calls run.
        assert_eq!(read(ip, window.0), allow);
    }

    #[test]
    fn this_images_c_library_is_found() {
        let sites = call_sites();
        assert!(!sites.is_empty());
        let inside = |f: usize| sites.iter().any(|&(lo, hi)| (lo..hi).contains(&(f as u64)));
        assert!(inside(libc::read as *const () as usize));
        assert!(inside(libc::fread as *const () as usize));
        // Not this crate's code: a raw system call from it is not the C
        // library's.
        assert!(!inside(call_sites as *const () as usize));
    }

    #[test]
    fn the_vdso_is_a_call_site() {
        // SAFETY: reading the auxiliary vector.
        let vdso = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
        if vdso == 0 {
            return;
        }
        let code = vdso_code();
        assert!(!code.is_empty());
        // The vDSO's text lies in its mapping, just after its header.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps.lines().find(|l| l.ends_with("[vdso]")).unwrap();
        let (lo, hi) = line.split_whitespace().next().unwrap().split_once('-').unwrap();
        let (lo, hi) = (
            u64::from_str_radix(lo, 16).unwrap(),
            u64::from_str_radix(hi, 16).unwrap(),
        );
        assert!(
            code.iter().all(|&(a, b)| lo <= a && a < b && b <= hi),
            "{code:x?} in {lo:#x}..{hi:#x}"
        );
        let sites = call_sites();
        assert!(
            code.iter().all(|r| sites.contains(r)),
            "{code:x?} not in {sites:x?}"
        );
        // The C library's mapped code, seen in /proc/self/maps, is covered.
        let mapped = c_libraries_mapped();
        assert!(!mapped.is_empty());
        let inside = |a: u64| sites.iter().any(|&(lo, hi)| (lo..hi).contains(&a));
        assert!(mapped.iter().all(|&(lo, _)| inside(lo) || inside(lo + 4096)));
        assert!(inside(libc::read as *const () as u64));
    }

    #[test]
    fn oversized_filters_are_errors_not_panics() {
        let rules = read_and_getrandom();
        let ip = 0x10ff_ffe0_0019;
        let window = [(0x1100_0000_0000u64, 0x5100_0000_0000u64)];
        let sites = |n: u64| -> Vec<(u64, u64)> {
            (0..n)
                .map(|k| (0x7f00_0000_0000 + k * 0x10_0000, 0x7f00_0000_8000 + k * 0x10_0000))
                .collect()
        };
        let ranges = |n: u64| -> Vec<(u64, u64)> {
            (0..n)
                .map(|k| (0x5555_0000_0000 + k * 0x10_0000, 0x5555_0000_8000 + k * 0x10_0000))
                .collect()
        };
        // Many sites: still a working filter while the jumps fit.
        let many = sites(20);
        let p = filter(&window, ip, &many, &rules, false).unwrap();
        let trap = uapi::SECCOMP_RET_TRAP | TRAP_DATA;
        for &(lo, hi) in &many {
            assert_eq!(run(&p, libc::SYS_read, lo, [3, window[0].0, 8, 0, 0, 0]), trap);
            assert_eq!(
                run(&p, libc::SYS_read, hi, [3, window[0].0, 8, 0, 0, 0]),
                uapi::SECCOMP_RET_ALLOW
            );
            assert_eq!(
                run(&p, libc::SYS_getrandom, hi - 1, [window[0].0, 8, 0, 0, 0, 0]),
                trap
            );
        }
        // Past BPF's reach: an error naming the sizes.
        for (s, r) in [
            (sites(64), window.to_vec()),
            (sites(2), ranges(64)),
            (sites(500), ranges(500)),
        ] {
            match filter(&r, ip, &s, &rules, false) {
                Err(TrapError::FilterTooLarge { sites, ranges }) => {
                    assert_eq!((sites, ranges), (s.len(), r.len()))
                }
                other => panic!(
                    "{} sites, {} ranges: {:?}",
                    s.len(),
                    r.len(),
                    other.map(|p| p.len())
                ),
            }
        }
        let bad = [TrapRule {
            nr: libc::SYS_read,
            buffer_arg: 6,
        }];
        assert!(matches!(
            filter(&window, ip, &[], &bad, false),
            Err(TrapError::BadRule { arg: 6, .. })
        ));
    }

    #[test]
    fn the_signal_guard_traps_what_could_take_the_fault_signals_away() {
        let rules = read_and_getrandom();
        let sites = [(0x7f12_3450_0000, 0x7f12_3468_0000)];
        let ip = 0x10ff_ffe0_0019;
        let p = filter(&[(0x1100_0000_0000, 0x5100_0000_0000)], ip, &sites, &rules, true).unwrap();
        let guard = uapi::SECCOMP_RET_TRAP | GUARD_DATA;
        let allow = uapi::SECCOMP_RET_ALLOW;
        let libc_ip = sites[0].0 + 0x100;
        let act = 0x7ffc_1234_5678;
        let call = |nr: i64, from: u64, args: [u64; 4]| {
            run(&p, nr, from, [args[0], args[1], args[2], args[3], 0, 0])
        };
        // rt_sigaction: any new action, and queries of the three signals.
        for sig in [
            libc::SIGINT,
            libc::SIGBUS,
            libc::SIGSEGV,
            libc::SIGSYS,
            libc::SIGUSR1,
        ] {
            assert_eq!(
                call(libc::SYS_rt_sigaction, libc_ip, [sig as u64, act, 0, 8]),
                guard
            );
            // A pointer above 4 GiB with a zero low half is still a pointer.
            assert_eq!(
                call(libc::SYS_rt_sigaction, libc_ip, [sig as u64, 1 << 40, 0, 8]),
                guard
            );
        }
        for sig in [libc::SIGBUS, libc::SIGSEGV, libc::SIGSYS] {
            assert_eq!(
                call(libc::SYS_rt_sigaction, libc_ip, [sig as u64, 0, act, 8]),
                guard
            );
        }
        assert_eq!(
            call(libc::SYS_rt_sigaction, libc_ip, [libc::SIGINT as u64, 0, act, 8]),
            allow
        );
        // rt_sigprocmask: whatever may block.
        for how in [libc::SIG_BLOCK, libc::SIG_SETMASK, 7] {
            assert_eq!(
                call(libc::SYS_rt_sigprocmask, libc_ip, [how as u64, act, 0, 8]),
                guard
            );
            assert_eq!(
                call(libc::SYS_rt_sigprocmask, libc_ip, [how as u64, 0, act, 8]),
                allow
            );
        }
        assert_eq!(
            call(
                libc::SYS_rt_sigprocmask,
                libc_ip,
                [libc::SIG_UNBLOCK as u64, act, 0, 8]
            ),
            allow
        );
        assert_eq!(call(libc::SYS_rt_sigsuspend, libc_ip, [act, 8, 0, 0]), guard);
        // Forks that run no fork handlers; threads and vforks run.
        let fork_flags = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
        assert_eq!(call(libc::SYS_clone, libc_ip, [fork_flags, 0, 0, act]), guard);
        assert_eq!(call(libc::SYS_fork, libc_ip, [0, 0, 0, 0]), guard);
        let thread_flags = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        assert_eq!(call(libc::SYS_clone, libc_ip, [thread_flags, act, 0, 0]), allow);
        let vfork_flags = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64;
        assert_eq!(call(libc::SYS_clone, libc_ip, [vfork_flags, act, 0, 0]), allow);
        assert_eq!(
            call(libc::SYS_clone, libc_ip, [libc::SIGCHLD as u64, act, 0, 0]),
            allow
        );
        assert_eq!(
            call(libc::SYS_clone, libc_ip, [libc::SIGCHLD as u64, 1 << 40, 0, 0]),
            allow
        );
        assert_eq!(
            call(libc::SYS_clone3, libc_ip, [act, 88, 0, 0]),
            uapi::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
        assert_eq!(call(libc::SYS_clone3, 0x5555_5555_5000, [act, 88, 0, 0]), allow);
        // Not from this image's C library, or through the trampoline: run.
        for from in [ip, sites[0].1, 0x5555_5555_5000] {
            assert_eq!(
                call(libc::SYS_rt_sigaction, from, [libc::SIGSEGV as u64, act, 0, 8]),
                allow
            );
            assert_eq!(call(libc::SYS_rt_sigprocmask, from, [0, act, 0, 8]), allow);
            assert_eq!(call(libc::SYS_rt_sigsuspend, from, [act, 8, 0, 0]), allow);
        }
        // The buffer traps are unchanged.
        assert_eq!(
            call(libc::SYS_read, libc_ip, [3, 0x1100_0000_0000, 1, 0]),
            uapi::SECCOMP_RET_TRAP | TRAP_DATA
        );
        assert_eq!(call(libc::SYS_write, libc_ip, [1, act, 1, 0]), allow);
        // Without the guard none of them traps.
        let q = filter(&[(0x1100_0000_0000, 0x5100_0000_0000)], ip, &sites, &rules, false).unwrap();
        assert_eq!(
            run(&q, libc::SYS_rt_sigaction, libc_ip, [11, act, 0, 8, 0, 0]),
            allow
        );
        assert_eq!(
            run(&q, libc::SYS_rt_sigprocmask, libc_ip, [0, act, 0, 8, 0, 0]),
            allow
        );
    }

    #[test]
    fn filter_jumps_resolve() {
        let w = Window {
            lo: 0x1100_0000_0000,
            hi: 0x5100_0000_0000,
        };
        let p = filter(
            &[(w.lo, w.hi)],
            0x10ff_ffe0_0000,
            &[(0x7f00_0000_0000, 0x7f00_0020_0000)],
            &read_and_getrandom(),
            false,
        )
        .unwrap();
        // One check block per argument position used (0 and 1), not six.
        assert_eq!(
            p.iter()
                .filter(|i| i.k == uapi::SECCOMP_RET_TRAP | TRAP_DATA)
                .count(),
            2
        );
        assert!(matches!(
            install(Window { lo: 5, hi: 1 << 33 }, 0, &[], |_| {}),
            Err(TrapError::BadWindow(..))
        ));
    }
}
