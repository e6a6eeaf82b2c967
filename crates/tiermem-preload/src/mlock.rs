//! The program's memory locks: `mlockall`, `mlock`, `mlock2`.
//!
//! Tiered memory cannot be locked: its pages move between near and far
//! memory, and tiermem's ranges (the heap's reservation, its far store and
//! metadata, sized for twice the machine's memory) must never be
//! populated. The kernel's `mlockall(MCL_CURRENT)` populates every mapping
//! there is (about 100 GB here, an OOM kill in a 1 GiB cgroup) and locks
//! the heap, whose pages can then no longer be evicted. So these calls lock
//! everything else, as asked, and leave out what tiermem keeps unlocked
//! ([`tiermem_sys::locks`]: the tiered heap, the static arrays taken over,
//! and tiermem's own mappings); one line on stderr says so, once.
//! `MCL_FUTURE` reaches the kernel unchanged: the program's later mappings
//! are locked, tiermem makes its own out of the lock.
//!
//! The kernel's errors are kept: `EINVAL` for bad flags, `EPERM` without
//! the right to lock (`RLIMIT_MEMLOCK` 0 and no `CAP_IPC_LOCK`), `ENOMEM`
//! over the limit. The limit is compared with the program's own memory,
//! not with tiermem's reservation and this library's file, which the
//! kernel would count: a program that may lock all of its memory without
//! tiermem may with it.
//! `munlock` and `munlockall` need nothing (they go to the kernel).

use crate::heap;
use libc::{c_int, c_uint, c_void, size_t};
use std::sync::atomic::{AtomicBool, Ordering};
use tiermem_sys::{locks, raw};

const PAGE: usize = 4096;

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() }
}

/// Says once that tiered memory is left out of the program's locks.
fn say_once(call: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let what = match heap().and_then(|h| h.region()) {
        Some(_) => {
            "tiermem's tiered memory (the heap and the static arrays it took over) stays unlocked: \
                    its pages move between near and far memory, within the near budget"
        }
        None => "tiermem's huge-page heap stays unlocked (hugetlb pages are never swapped out)",
    };
    eprintln!("tiermem: {call}: the program's other memory is locked; {what}");
}

/// `RLIMIT_MEMLOCK` in bytes when it binds (not `CAP_IPC_LOCK`); `None`
/// when the process may lock without limit.
fn lock_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is ours; getrlimit only writes it.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    (!has_cap_ipc_lock()).then_some(rl.rlim_cur)
}

/// Whether the process has `CAP_IPC_LOCK` in its effective set.
fn has_cap_ipc_lock() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_IPC_LOCK: u32 = 14;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes two Data structs for version 3; both are ours.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) };
    r == 0 && d[0].effective & (1 << CAP_IPC_LOCK) != 0
}

/// The process's mappings less what tiermem keeps unlocked, page-aligned
/// pieces in address order (from /proc/self/maps), and how many bytes of
/// them are the program's own (not this library's file).
fn own_pieces(kept: &[(usize, usize)]) -> (Vec<(usize, usize)>, u64) {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return (Vec::new(), 0);
    };
    let this_library = library_path();
    let mut out = Vec::new();
    let mut own = 0;
    for line in maps.lines() {
        let Some((range, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        let n = out.len();
        subtract(a, b, kept, &mut out);
        // The path is the sixth field (after perms, offset, dev, inode).
        let path = rest.split_whitespace().nth(4);
        if this_library.is_none() || path != this_library.as_deref() {
            own += out[n..].iter().map(|&(_, l)| l as u64).sum::<u64>();
        }
    }
    (out, own)
}

/// The file this library was loaded from.
fn library_path() -> Option<String> {
    // SAFETY: an all-zero Dl_info is valid; dladdr only writes it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the address of one of our own functions.
    if unsafe { libc::dladdr(library_path as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string the loader keeps.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    std::fs::canonicalize(name.to_str().ok()?)
        .ok()
        .and_then(|p| p.to_str().map(str::to_owned))
}

/// Pushes the parts of `[a, b)` outside every range of `kept` (sorted).
fn subtract(mut a: usize, b: usize, kept: &[(usize, usize)], out: &mut Vec<(usize, usize)>) {
    for &(s, l) in kept {
        let e = s + l;
        if e <= a || s >= b {
            continue;
        }
        if s > a {
            out.push((a, s - a));
        }
        a = a.max(e);
        if a >= b {
            return;
        }
    }
    if a < b {
        out.push((a, b - a));
    }
}

/// Locks `pieces` with `mlock2(flags)`, ignoring failures as the kernel's
/// `mlockall` ignores a mapping it cannot populate.
fn lock_each(pieces: &[(usize, usize)], flags: c_uint) {
    for &(a, l) in pieces {
        // SAFETY: locking changes no contents.
        unsafe { raw::mlock2(a as *const c_void, l, flags) };
    }
}

/// `mlockall(2)`.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn mlockall(flags: c_int) -> c_int {
    if heap().is_none() {
        // SAFETY: forwarded as asked.
        return unsafe { raw::mlockall(flags) };
    }
    let known = libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT;
    if flags == 0 || flags & !known != 0 || flags == libc::MCL_ONFAULT {
        set_errno(libc::EINVAL);
        return -1;
    }
    let on_fault = flags & libc::MCL_ONFAULT != 0;
    let future = flags & libc::MCL_FUTURE != 0;
    if flags & libc::MCL_CURRENT == 0 {
        // Only the program's later mappings; tiermem's are made unlocked.
        // SAFETY: forwarded as asked.
        let r = unsafe { raw::mlockall(flags) };
        if r == 0 {
            say_once("mlockall");
        }
        return r;
    }
    // Lock without populating anything (MCL_ONFAULT), so that none of
    // tiermem's ranges is populated; take the lock off them; then lock and
    // populate the rest as asked.
    // SAFETY: the program's own request, minus population.
    let mut r = unsafe { raw::mlockall(flags | libc::MCL_ONFAULT) };
    if r == 0 && future && !on_fault {
        // Later mappings populated at once, as asked (no MCL_CURRENT: the
        // mappings there are are left as they are).
        // SAFETY: as asked.
        r = unsafe { raw::mlockall(libc::MCL_FUTURE) };
    }
    let kept = locks::kept_unlocked();
    if r != 0 {
        // The kernel compares RLIMIT_MEMLOCK with the whole address space,
        // tiermem's reservation included; compare it with the program's own.
        let e = errno();
        let limit = lock_limit();
        let (pieces, own) = own_pieces(&kept);
        if e != libc::ENOMEM || limit.is_none_or(|lim| own > lim) {
            set_errno(e);
            return -1;
        }
        // The lock on later mappings; MCL_CURRENT ends an earlier
        // MCL_FUTURE, as the kernel's call would.
        let later = if future {
            // SAFETY: as asked.
            unsafe { raw::mlockall(flags & (libc::MCL_FUTURE | libc::MCL_ONFAULT)) }
        } else {
            // SAFETY: ends every lock; all but tiermem's are taken below.
            unsafe { raw::munlockall() }
        };
        if later != 0 {
            return -1;
        }
        lock_each(&pieces, if on_fault { libc::MLOCK_ONFAULT } else { 0 });
        say_once("mlockall");
        return 0;
    }
    locks::unlock_kept();
    if !on_fault {
        lock_each(&own_pieces(&kept).0, 0);
    }
    say_once("mlockall");
    0
}

/// `mlock(2)`: see [`mlock2`].
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn mlock(addr: *const c_void, len: size_t) -> c_int {
    lock_range(addr, len, 0, "mlock")
}

/// `mlock2(2)`: the parts of the range outside what tiermem keeps unlocked
/// are locked as asked; its tiered parts are not (they count against
/// `RLIMIT_MEMLOCK` all the same, as they would without tiermem).
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn mlock2(addr: *const c_void, len: size_t, flags: c_uint) -> c_int {
    lock_range(addr, len, flags, "mlock2")
}

fn lock_range(addr: *const c_void, len: size_t, flags: c_uint, call: &str) -> c_int {
    let start = addr as usize / PAGE * PAGE;
    let end = (addr as usize)
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(PAGE));
    let kept = locks::kept_unlocked();
    let touches_kept = |e: usize| kept.iter().any(|&(s, l)| s < e && start < s + l);
    if heap().is_none() || !end.is_some_and(touches_kept) {
        // SAFETY: forwarded as asked.
        return unsafe { raw::mlock2(addr, len, flags) };
    }
    let end = end.unwrap_or(usize::MAX);
    // The kernel's checks, in its order (mm/mlock.c).
    if flags & !libc::MLOCK_ONFAULT != 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    let limit = lock_limit();
    if limit == Some(0) {
        set_errno(libc::EPERM);
        return -1;
    }
    if let Some(lim) = limit {
        if locked_bytes() + (end - start) as u64 > lim {
            set_errno(libc::ENOMEM);
            return -1;
        }
    }
    let mut pieces = Vec::new();
    subtract(start, end, &kept, &mut pieces);
    for (a, l) in pieces {
        // SAFETY: locking changes no contents.
        if unsafe { raw::mlock2(a as *const c_void, l, flags) } != 0 {
            return -1;
        }
    }
    say_once(call);
    0
}

/// Bytes this process has locked (`VmLck`).
fn locked_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |k| k << 10)
}

#[cfg(test)]
mod tests {
    use super::subtract;

    #[test]
    fn subtract_leaves_the_parts_outside() {
        let kept = [(100, 50), (200, 10), (300, 100)];
        let mut out = Vec::new();
        subtract(0, 1000, &kept, &mut out);
        assert_eq!(out, [(0, 100), (150, 50), (210, 90), (400, 600)]);
        out.clear();
        subtract(120, 140, &kept, &mut out);
        assert!(out.is_empty());
        out.clear();
        subtract(140, 320, &kept, &mut out);
        assert_eq!(out, [(150, 50), (210, 90)]);
    }
}
