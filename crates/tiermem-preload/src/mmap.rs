//! Large private anonymous mappings from the heap: what Fortran runtimes,
//! numpy and allocators that map their own big blocks ask for. Everything
//! else (files, shared memory, fixed addresses, huge-page and stack
//! mappings, anything below the threshold) goes to the kernel as asked.

use crate::{heap_for, heap_of};
use libc::{c_int, c_void, off_t, size_t};
use tiermem_sys::raw;

/// Flags under which a mapping stays the kernel's.
const KERNEL_ONLY: c_int = libc::MAP_SHARED
    | libc::MAP_FIXED
    | libc::MAP_FIXED_NOREPLACE
    | libc::MAP_HUGETLB
    | libc::MAP_STACK
    | libc::MAP_GROWSDOWN;

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() = e };
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
    let ours = addr.is_null()
        && fd == -1
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_PRIVATE != 0
        && flags & KERNEL_ONLY == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE;
    if ours {
        if let Some(p) = heap_for(len).and_then(|h| h.alloc(len, 4096)) {
            return p as *mut c_void;
        }
    }
    // SAFETY: forwarded as asked.
    unsafe { raw::mmap(addr, len, prot, flags, fd, off) }
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

/// `munmap(2)`: a whole heap block is freed; part of one is dropped (it
/// reads as zeros if touched again, where the kernel would fault).
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let a = addr as usize;
    if let Some(h) = heap_of(a) {
        if a % 4096 != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        match h.allocation_containing(a) {
            Some((start, blen)) if start == a && len.next_multiple_of(4096) >= blen => {
                h.free(a);
            }
            Some(_) => h.discard(a, len),
            None => {}
        }
        return 0;
    }
    // SAFETY: forwarded as asked.
    unsafe { raw::munmap(addr, len) }
}

/// `mremap(2)` of a heap block: resized in place, or moved (with
/// `MREMAP_MAYMOVE`) within the heap.
///
/// # Safety
/// As for the C function. C declares it variadic (the new address comes
/// only with `MREMAP_FIXED`); on x86-64 a fixed fifth argument reads the
/// same register, and it is used only with that flag.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let a = old as usize;
    let new_addr = if flags & libc::MREMAP_FIXED != 0 {
        new_addr
    } else {
        std::ptr::null_mut()
    };
    let Some(h) = heap_of(a) else {
        // SAFETY: forwarded as asked.
        return unsafe { raw::mremap(old, old_len, new_len, flags, new_addr) };
    };
    if flags & libc::MREMAP_FIXED != 0 || h.allocation_containing(a).map(|(s, _)| s) != Some(a) {
        set_errno(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    if h.resize_in_place(a, new_len) {
        return old;
    }
    if flags & libc::MREMAP_MAYMOVE == 0 {
        set_errno(libc::ENOMEM);
        return libc::MAP_FAILED;
    }
    let Some(q) = h.alloc(new_len, 4096) else {
        set_errno(libc::ENOMEM);
        return libc::MAP_FAILED;
    };
    // SAFETY: both blocks are valid for min(old_len, new_len) bytes and
    // distinct.
    unsafe { std::ptr::copy_nonoverlapping(old as *const u8, q as *mut u8, old_len.min(new_len)) };
    h.free(a);
    q as *mut c_void
}

/// `madvise(2)`: `MADV_DONTNEED`/`MADV_FREE`/`MADV_REMOVE` on heap memory
/// drop the pages (they read as zeros after, as for private anonymous
/// memory); other advice on heap memory is accepted and ignored (tiermem
/// decides what is resident).
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    let a = addr as usize;
    if let Some(h) = heap_of(a) {
        if matches!(advice, libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE) {
            h.discard(a, len);
        }
        return 0;
    }
    // SAFETY: forwarded as asked.
    unsafe { raw::madvise(addr, len, advice) }
}
