//! Large private anonymous mappings from the heap: what Fortran runtimes,
//! numpy and allocators that map their own big blocks ask for. Everything
//! else (files, shared memory, huge-page and stack mappings, anything
//! below the threshold) goes to the kernel as asked.
//!
//! A heap block is a mapping to the program: `munmap`, `mremap` and
//! `madvise` of it, whole or in part, are served on the heap with the
//! kernel's semantics (docs/transparent.md, "Mappings"). No call may
//! replace the heap's own memory behind its back: a kernel mapping put at
//! a fixed address inside the heap's range (`mmap(MAP_FIXED)`, `mremap`
//! with `MREMAP_FIXED`, `shmat(SHM_REMAP)`) would unmap tiered pages the
//! heap still accounts for. Where the program holds that memory and the
//! result is plain anonymous memory, the call is served on the heap;
//! otherwise it fails with `EINVAL` and one line on stderr.

use crate::{heap, heap_for};
use libc::{c_int, c_void, off_t, size_t};
use std::sync::atomic::{AtomicBool, Ordering};
use tiermem::heap::Heap;
use tiermem_sys::raw;

/// Flags under which a mapping stays the kernel's.
const KERNEL_ONLY: c_int = libc::MAP_SHARED
    | libc::MAP_FIXED
    | libc::MAP_FIXED_NOREPLACE
    | libc::MAP_HUGETLB
    | libc::MAP_STACK
    | libc::MAP_GROWSDOWN;

/// The kernel's page size on the platforms tiermem runs on.
const PAGE: usize = 4096;

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() }
}

/// Whether `[a, a + len)` overlaps the heap's range.
fn overlaps(h: &Heap, a: usize, len: usize) -> bool {
    a < h.base() + h.len() && a.saturating_add(len) > h.base()
}

/// The heap, if `[a, a + len)` overlaps it (at least its first byte).
fn heap_overlapping(a: usize, len: usize) -> Option<&'static Heap> {
    heap().filter(|h| overlaps(h, a, len.max(1)))
}

/// Refuses a call that would put a kernel mapping inside the heap's range
/// where the program holds no heap memory: `EINVAL` ("the address is
/// invalid"), and one line on stderr per kind of call.
fn refuse(call: &str, said: &AtomicBool, addr: usize, len: usize) -> c_int {
    if !said.swap(true, Ordering::Relaxed) {
        eprintln!(
            "tiermem: {call} at {addr:#x} (+{len} bytes) would replace memory of tiermem's heap \
             that the program does not hold there; it fails with EINVAL (docs/transparent.md, \"Mappings\")"
        );
    }
    libc::EINVAL
}

/// Applies `heap_part` to the part of `[a, a + len)` inside the heap and
/// `kernel_part` to the parts before and after it; the first failure (-1)
/// is returned.
fn split_at_heap(
    h: &Heap,
    a: usize,
    len: usize,
    mut kernel_part: impl FnMut(usize, usize) -> c_int,
    heap_part: impl FnOnce(usize, usize),
) -> c_int {
    let (lo, hi) = (h.base(), h.base() + h.len());
    let end = a.saturating_add(len);
    if a < lo && kernel_part(a, lo - a) != 0 {
        return -1;
    }
    if end > hi && kernel_part(hi, end - hi) != 0 {
        return -1;
    }
    heap_part(a.max(lo), end.min(hi) - a.max(lo));
    0
}

/// `mmap(2)`.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // MAP_FIXED_NOREPLACE never replaces: the kernel says EEXIST there.
    if flags & libc::MAP_FIXED != 0 {
        if let Some(h) = heap_overlapping(addr as usize, len) {
            return fixed_over_heap(h, addr, len, prot, flags);
        }
    }
    let ours = addr.is_null()
        && fd == -1
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_PRIVATE != 0
        && flags & KERNEL_ONLY == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE;
    if ours {
        if let Some(p) = heap_for(len).and_then(|h| h.alloc(len, PAGE)) {
            return p as *mut c_void;
        }
    }
    // SAFETY: forwarded as asked.
    unsafe { raw::mmap(addr, len, prot, flags, fd, off) }
}

/// `mmap(MAP_FIXED)` over the heap's range: fresh private anonymous
/// read-write memory over heap memory the program holds is what a program
/// does to clear a range, served by dropping the pages (they read as
/// zeros); anything else would replace tiered memory with a kernel
/// mapping, and is refused.
fn fixed_over_heap(h: &Heap, addr: *mut c_void, len: size_t, prot: c_int, flags: c_int) -> *mut c_void {
    static SAID: AtomicBool = AtomicBool::new(false);
    let a = addr as usize;
    // The kernel's checks first.
    let Some(len) = len
        .checked_next_multiple_of(PAGE)
        .filter(|&l| l > 0 && a.is_multiple_of(PAGE))
    else {
        set_errno(libc::EINVAL);
        return libc::MAP_FAILED;
    };
    let plain = flags & (libc::MAP_SHARED | libc::MAP_PRIVATE) == libc::MAP_PRIVATE
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & (libc::MAP_HUGETLB | libc::MAP_GROWSDOWN | libc::MAP_STACK) == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE;
    if plain && h.owns(a, len) {
        h.discard(a, len);
        return addr;
    }
    set_errno(refuse("mmap(MAP_FIXED)", &SAID, a, len));
    libc::MAP_FAILED
}

/// `mmap64(2)` (the same on 64-bit).
///
/// # Safety
/// As for `mmap`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`: heap blocks covered whole are freed, parts of blocks are
/// cut off them (`Heap::unmap`); the parts of the range outside the heap
/// are the kernel's.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let a = addr as usize;
    if let Some(h) = heap_overlapping(a, len) {
        // The kernel unmaps whole pages.
        let Some(len) = len
            .checked_next_multiple_of(PAGE)
            .filter(|&l| l > 0 && a.is_multiple_of(PAGE))
        else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if a.checked_add(len).is_none() {
            set_errno(libc::EINVAL);
            return -1;
        }
        return split_at_heap(
            h,
            a,
            len,
            // SAFETY: forwarded as asked (the part outside the heap).
            |x, n| unsafe { raw::munmap(x as *mut c_void, n) },
            |x, n| h.unmap(x, n),
        );
    }
    // SAFETY: forwarded as asked.
    unsafe { raw::munmap(addr, len) }
}

/// `mremap(2)`: see [`remap_heap`] for a range of the heap. A kernel
/// mapping goes to the kernel, unless the new address it names lies in
/// the heap's range (that would unmap tiered memory: refused).
///
/// # Safety
/// As for the C function. C declares it variadic (the new address comes
/// only with `MREMAP_FIXED` or `MREMAP_DONTUNMAP`, as glibc reads it); on
/// x86-64 a fixed fifth argument reads the same register, and it is used
/// only with those flags.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    static SAID: AtomicBool = AtomicBool::new(false);
    // glibc refuses unknown flags itself.
    if flags & !(libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP) != 0 {
        set_errno(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    let fixed = flags & libc::MREMAP_FIXED != 0;
    let new_addr = if flags & (libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP) != 0 {
        new_addr
    } else {
        std::ptr::null_mut()
    };
    let a = old as usize;
    let Some(h) = heap_overlapping(a, old_len) else {
        if fixed {
            let d = new_addr as usize;
            // An invalid call keeps the kernel's error (a misaligned
            // address, no MREMAP_MAYMOVE, no length).
            let valid = d.is_multiple_of(PAGE) && flags & libc::MREMAP_MAYMOVE != 0 && new_len > 0;
            if valid && heap_overlapping(d, new_len).is_some() {
                set_errno(refuse("mremap(MREMAP_FIXED)", &SAID, d, new_len));
                return libc::MAP_FAILED;
            }
        }
        // SAFETY: forwarded as asked.
        return unsafe { raw::mremap(old, old_len, new_len, flags, new_addr) };
    };
    match remap_heap(h, a, old_len, new_len, flags, new_addr as usize) {
        Ok(p) => p as *mut c_void,
        Err(e) => {
            set_errno(e);
            libc::MAP_FAILED
        }
    }
}

/// `mremap` of `[a, a + old_len)`, a range of one heap block (the
/// program's mapping), with the kernel's semantics and errors:
///
/// - shrinking cuts the tail off (as `munmap` of it);
/// - growing happens in place where the range ends its block and the heap
///   has room after it, else (`MREMAP_MAYMOVE`) the data moves to a new
///   block and the range is cut out of the old one;
/// - `MREMAP_FIXED` moves the data to `d`: outside the heap it leaves the
///   tiered heap (plain memory is mapped there, as the kernel's move maps
///   the range there); inside, `d` must be heap memory the program holds,
///   which the data replaces;
/// - `MREMAP_DONTUNMAP` moves it (to a new block, or to `d`) and leaves
///   the range mapped and empty (its pages read as zeros, as the kernel
///   leaves a private anonymous source).
fn remap_heap(
    h: &Heap,
    a: usize,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    d: usize,
) -> Result<usize, c_int> {
    static SAID: AtomicBool = AtomicBool::new(false);
    let may_move = flags & libc::MREMAP_MAYMOVE != 0;
    let fixed = flags & libc::MREMAP_FIXED != 0;
    let dont_unmap = flags & libc::MREMAP_DONTUNMAP != 0;
    let page_up = |n: usize| n.checked_next_multiple_of(PAGE);
    // The kernel's checks, in its order (mm/mremap.c).
    if !a.is_multiple_of(PAGE) {
        return Err(libc::EINVAL);
    }
    let new_len = page_up(new_len).filter(|&n| n > 0).ok_or(libc::EINVAL)?;
    let old_len = page_up(old_len).ok_or(libc::EINVAL)?;
    if fixed || dont_unmap {
        if !d.is_multiple_of(PAGE) || !may_move || (dont_unmap && old_len != new_len) {
            return Err(libc::EINVAL);
        }
        let disjoint = d.checked_add(new_len).is_some_and(|e| e <= a) || a + old_len <= d;
        if fixed && !disjoint {
            return Err(libc::EINVAL);
        }
    }
    // The range must lie in one block the program holds (one mapping).
    let (s, l) = h.holding(a).ok_or(libc::EFAULT)?;
    if old_len == 0 {
        // A private mapping cannot be duplicated.
        return Err(libc::EINVAL);
    }
    if a + old_len > s + l {
        return Err(libc::EFAULT);
    }
    let keep = old_len.min(new_len);
    if !fixed && !dont_unmap {
        if new_len <= old_len {
            h.unmap(a + new_len, old_len - new_len);
            return Ok(a);
        }
        // The range ends its block (up to the heap's unit): grow in place.
        if (a + old_len).next_multiple_of(h.unit()) >= s + l && h.resize_in_place(s, a - s + new_len) {
            return Ok(a);
        }
        if !may_move {
            return Err(libc::ENOMEM);
        }
    }
    let to = if fixed {
        if overlaps(h, d, new_len) {
            if !h.owns(d, new_len) {
                return Err(refuse("mremap(MREMAP_FIXED)", &SAID, d, new_len));
            }
            // What the kernel would unmap there reads as zeros past the data.
            if new_len > keep {
                h.discard(d + keep, new_len - keep);
            }
            d
        } else {
            // Out of the heap: plain memory at `d`, replacing whatever was
            // mapped there, as the kernel's move does.
            // SAFETY: the program asked for `[d, d + new_len)` to be replaced.
            let p = unsafe {
                raw::mmap(
                    d as *mut c_void,
                    new_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(errno());
            }
            d
        }
    } else {
        new_block(h, new_len)?
    };
    // SAFETY: `[a, a + keep)` is heap memory the program holds, `[to, to +
    // keep)` memory just made or checked to be its own; the checks above
    // keep them apart (a new block is disjoint from every other).
    unsafe { std::ptr::copy_nonoverlapping(a as *const u8, to as *mut u8, keep) };
    if dont_unmap {
        h.discard(a, old_len);
    } else {
        h.unmap(a, old_len);
    }
    Ok(to)
}

/// A new mapping of `len` bytes: a heap block, or kernel memory when the
/// heap has no room (as `mmap` does).
fn new_block(h: &Heap, len: usize) -> Result<usize, c_int> {
    if let Some(p) = h.alloc(len, PAGE) {
        return Ok(p);
    }
    // SAFETY: a fresh mapping at a kernel-chosen address.
    let p = unsafe {
        raw::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    Ok(p as usize)
}

/// `madvise(2)`: `MADV_DONTNEED`/`MADV_FREE`/`MADV_REMOVE` on heap memory
/// drop the pages (they read as zeros after, as for private anonymous
/// memory); other advice on heap memory is accepted and ignored (tiermem
/// decides what is resident). The parts of the range outside the heap are
/// the kernel's.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    let a = addr as usize;
    if let Some(h) = heap_overlapping(a, len) {
        // The kernel advises whole pages.
        let Some(len) = len
            .checked_next_multiple_of(PAGE)
            .filter(|&l| a.is_multiple_of(PAGE) && a.checked_add(l).is_some())
        else {
            set_errno(libc::EINVAL);
            return -1;
        };
        return split_at_heap(
            h,
            a,
            len,
            // SAFETY: forwarded as asked (the part outside the heap).
            |x, n| unsafe { raw::madvise(x as *mut c_void, n, advice) },
            |x, n| {
                if matches!(advice, libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE) {
                    h.discard(x, n);
                }
            },
        );
    }
    // SAFETY: forwarded as asked.
    unsafe { raw::madvise(addr, len, advice) }
}

/// `mprotect(2)`. Tiered memory made inaccessible (`PROT_NONE`: guard
/// pages, a reserve, a collector's fence) is held resident first
/// (`tiermem::hold_resident`): tiermem reads a page to evict it, and an
/// eviction that met such a page killed the process (SIGSEGV); it stays
/// held until freed. Other protections are the kernel's.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    if prot & (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) == 0 {
        crate::stacks::hold_for(
            addr as usize,
            len,
            "mprotect(PROT_NONE)",
            "memory",
            "tiermem cannot move pages the program made inaccessible",
        );
    }
    // SAFETY: forwarded as asked.
    unsafe { raw::mprotect(addr, len, prot) }
}

/// `shmat(2)`: attaching with `SHM_REMAP` over the heap's range would
/// replace tiered memory, and is refused; everything else is the kernel's.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn shmat(shmid: c_int, addr: *const c_void, flags: c_int) -> *mut c_void {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !addr.is_null() && flags & libc::SHM_REMAP != 0 {
        let mut a = addr as usize;
        if flags & libc::SHM_RND != 0 {
            a = a / PAGE * PAGE;
        }
        // SAFETY: an all-zero shmid_ds is valid; IPC_STAT fills it.
        let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
        // SAFETY: `ds` is ours; IPC_STAT only writes it.
        let sized = unsafe { libc::shmctl(shmid, libc::IPC_STAT, &mut ds) } == 0;
        if sized && heap_overlapping(a, ds.shm_segsz).is_some() {
            set_errno(refuse("shmat(SHM_REMAP)", &SAID, a, ds.shm_segsz));
            // shmat's failure value.
            return usize::MAX as *mut c_void;
        }
    }
    // SAFETY: forwarded as asked.
    unsafe { libc::syscall(libc::SYS_shmat, shmid, addr, flags) as *mut c_void }
}
