//! The allocation interface: requests of at least the threshold go to the
//! heap, the rest to the C library; a pointer is freed by whichever owns
//! its address range.

use crate::{heap_for, heap_of, libc_alloc};
use libc::{c_int, c_void, size_t};

/// Alignment of heap blocks handed out by `malloc` (the heap is page
/// granular anyway).
const PAGE: usize = 4096;

fn enomem<T>(v: T) -> T {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() = libc::ENOMEM };
    v
}

/// A heap block of `size` bytes (zero with `zero`; otherwise possibly a
/// freed block of the same length, its pages still in place), or None to
/// fall back.
fn heap_alloc(size: usize, align: usize, zero: bool) -> Option<*mut c_void> {
    let h = heap_for(size)?;
    let got = if zero {
        h.alloc(size, align.max(PAGE))
    } else {
        h.alloc_uninit(size, align.max(PAGE))
    };
    match got {
        Some(p) => Some(p as *mut c_void),
        None => {
            crate::report::note_heap_full(size);
            None
        }
    }
}

fn alloc(size: size_t) -> *mut c_void {
    if let Some(p) = heap_alloc(size, PAGE, false) {
        return p;
    }
    libc_alloc::LIBC.malloc(size)
}

fn aligned(align: size_t, size: size_t) -> *mut c_void {
    if let Some(p) = heap_alloc(size, align, false) {
        return p;
    }
    libc_alloc::LIBC.memalign(align, size)
}

fn release(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    if let Some(h) = heap_of(p as usize) {
        if !h.free(p as usize) {
            crate::report::bad_free(p as usize);
        }
        return;
    }
    libc_alloc::LIBC.free(p)
}

fn resize(p: *mut c_void, size: size_t) -> *mut c_void {
    if p.is_null() {
        return alloc(size);
    }
    if size == 0 {
        release(p);
        return std::ptr::null_mut();
    }
    let old = usable(p);
    let in_heap = heap_of(p as usize);
    let wants_heap = heap_for(size).is_some();
    if let Some(h) = in_heap {
        if wants_heap && h.resize_in_place(p as usize, size) {
            return p;
        }
    } else if !wants_heap {
        return libc_alloc::LIBC.realloc(p, size);
    }
    // Across the threshold, or no room in place: move.
    let q = alloc(size);
    if q.is_null() {
        return enomem(q);
    }
    // SAFETY: both blocks are valid for min(old, size) bytes and distinct.
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size)) };
    release(p);
    q
}

fn usable(p: *mut c_void) -> size_t {
    if p.is_null() {
        return 0;
    }
    if let Some(h) = heap_of(p as usize) {
        return h.usable_size(p as usize).unwrap_or(0);
    }
    libc_alloc::LIBC.usable_size(p)
}

fn zeroed(n: size_t, size: size_t) -> *mut c_void {
    let Some(bytes) = n.checked_mul(size) else {
        return enomem(std::ptr::null_mut());
    };
    // Heap memory is always zero: no memset, which would fault it all in.
    if let Some(p) = heap_alloc(bytes, PAGE, true) {
        return p;
    }
    libc_alloc::LIBC.calloc(n, size)
}

fn page_size() -> usize {
    PAGE
}

/// `malloc(3)`.
#[no_mangle]
pub extern "C" fn malloc(size: size_t) -> *mut c_void {
    alloc(size)
}

/// `calloc(3)`.
#[no_mangle]
pub extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    zeroed(n, size)
}

/// `realloc(3)`.
///
/// # Safety
/// `p` is null or a live allocation.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    resize(p, size)
}

/// `reallocarray(3)`.
///
/// # Safety
/// As for `realloc`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    match n.checked_mul(size) {
        Some(b) => resize(p, b),
        None => enomem(std::ptr::null_mut()),
    }
}

/// `free(3)`.
///
/// # Safety
/// `p` is null or a live allocation.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    release(p)
}

/// `cfree(3)` (obsolete, still exported by glibc).
///
/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    release(p)
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `p` is null or a live allocation.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> size_t {
    usable(p)
}

/// `posix_memalign(3)`.
///
/// # Safety
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: size_t, size: size_t) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = aligned(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid out pointer.
    unsafe { *out = p };
    0
}

/// `aligned_alloc(3)`.
#[no_mangle]
pub extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    if !align.is_power_of_two() {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return std::ptr::null_mut();
    }
    aligned(align, size)
}

/// `memalign(3)`.
#[no_mangle]
pub extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    aligned_alloc(align, size)
}

/// `valloc(3)`.
#[no_mangle]
pub extern "C" fn valloc(size: size_t) -> *mut c_void {
    aligned(page_size(), size)
}

/// `pvalloc(3)`.
#[no_mangle]
pub extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    aligned(page_size(), size.max(1).next_multiple_of(page_size()))
}

/// glibc's `__libc_malloc`.
#[no_mangle]
pub extern "C" fn __libc_malloc(size: size_t) -> *mut c_void {
    alloc(size)
}

/// glibc's `__libc_calloc`.
#[no_mangle]
pub extern "C" fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void {
    zeroed(n, size)
}

/// glibc's `__libc_realloc`.
///
/// # Safety
/// As for `realloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    resize(p, size)
}

/// glibc's `__libc_free`.
///
/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    release(p)
}

/// glibc's `__libc_memalign`.
#[no_mangle]
pub extern "C" fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void {
    aligned_alloc(align, size)
}

/// glibc's `__libc_valloc`.
#[no_mangle]
pub extern "C" fn __libc_valloc(size: size_t) -> *mut c_void {
    valloc(size)
}

/// glibc's `__libc_pvalloc`.
#[no_mangle]
pub extern "C" fn __libc_pvalloc(size: size_t) -> *mut c_void {
    pvalloc(size)
}
