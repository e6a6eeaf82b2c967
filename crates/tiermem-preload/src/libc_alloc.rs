//! The C library's own allocator, reached past this library's interposers,
//! and Rust's global allocator on top of it.
//!
//! This library defines `malloc` and also the `__libc_malloc` family, so
//! the C library's functions are looked up by version
//! (`dlvsym(RTLD_NEXT, "__libc_malloc", "GLIBC_2.2.5")`) on first use. An
//! allocation made while that lookup runs (the dynamic linker may
//! allocate) is served from a small static bump buffer whose blocks are
//! never freed.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type MemalignFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type UsableFn = unsafe extern "C" fn(*mut c_void) -> usize;

/// The resolved functions (0 until resolved).
static MALLOC: AtomicUsize = AtomicUsize::new(0);
static FREE: AtomicUsize = AtomicUsize::new(0);
static CALLOC: AtomicUsize = AtomicUsize::new(0);
static REALLOC: AtomicUsize = AtomicUsize::new(0);
static MEMALIGN: AtomicUsize = AtomicUsize::new(0);
static USABLE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread is resolving the functions: serve it from the buffer.
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

fn lookup(name: &CStr) -> usize {
    // SAFETY: NUL-terminated names; glibc's symbol versions exist on every
    // x86-64 glibc.
    unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), c"GLIBC_2.2.5".as_ptr()) as usize }
}

/// Resolves the C library's functions once; false while this thread is
/// in the middle of doing so (the caller then uses the bootstrap buffer).
fn resolved() -> bool {
    // Acquire: pairs with the Release stores below.
    if FREE.load(Ordering::Acquire) != 0 {
        return true;
    }
    if RESOLVING.with(|r| r.replace(true)) {
        return false;
    }
    let m = lookup(c"__libc_malloc");
    let c = lookup(c"__libc_calloc");
    let r = lookup(c"__libc_realloc");
    let a = lookup(c"__libc_memalign");
    // SAFETY: RTLD_NEXT with a NUL-terminated name.
    let u = unsafe { libc::dlsym(libc::RTLD_NEXT, c"malloc_usable_size".as_ptr()) } as usize;
    let f = lookup(c"__libc_free");
    assert!(
        m != 0 && c != 0 && r != 0 && a != 0 && u != 0 && f != 0,
        "tiermem: the C library's allocator is missing"
    );
    MALLOC.store(m, Ordering::Release);
    CALLOC.store(c, Ordering::Release);
    REALLOC.store(r, Ordering::Release);
    MEMALIGN.store(a, Ordering::Release);
    USABLE.store(u, Ordering::Release);
    // Last: `resolved()` checks it first.
    FREE.store(f, Ordering::Release);
    RESOLVING.with(|r| r.set(false));
    true
}

const BOOT_BYTES: usize = 256 << 10;

/// The bootstrap buffer (16-byte aligned words).
struct Boot([std::cell::UnsafeCell<u128>; BOOT_BYTES / 16]);
// SAFETY: blocks are handed out once each by an atomic bump pointer.
unsafe impl Sync for Boot {}
static BOOT: Boot = Boot([const { std::cell::UnsafeCell::new(0) }; BOOT_BYTES / 16]);
static BOOT_USED: AtomicUsize = AtomicUsize::new(0);

/// A block from the bootstrap buffer, its size in the 16 bytes before it.
fn boot_alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(16);
    loop {
        let used = BOOT_USED.load(Ordering::Relaxed);
        let start = (used + 16).next_multiple_of(align);
        let end = start + size.next_multiple_of(16);
        if end > BOOT_BYTES {
            return std::ptr::null_mut();
        }
        if BOOT_USED
            .compare_exchange(used, end, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            let base = BOOT.0.as_ptr() as *mut u8;
            // SAFETY: [start - 16, end) lies inside the buffer and belongs to
            // this call alone (the bump pointer moved past it).
            unsafe {
                (base.add(start - 16) as *mut usize).write(size);
                return base.add(start).cast();
            }
        }
    }
}

/// Whether `p` came from the bootstrap buffer; then its size.
pub(crate) fn boot_size(p: *mut c_void) -> Option<usize> {
    let base = BOOT.0.as_ptr() as usize;
    let a = p as usize;
    if a < base + 16 || a >= base + BOOT_BYTES {
        return None;
    }
    // SAFETY: every bootstrap block has its size 16 bytes before it.
    Some(unsafe { ((a - 16) as *const usize).read() })
}

/// The C library's `malloc`.
pub(crate) fn malloc(size: usize) -> *mut c_void {
    if !resolved() {
        return boot_alloc(size, 16);
    }
    // SAFETY: resolved to glibc's __libc_malloc, which has this signature.
    unsafe { std::mem::transmute::<usize, MallocFn>(MALLOC.load(Ordering::Relaxed))(size) }
}

/// The C library's `calloc`.
pub(crate) fn calloc(n: usize, size: usize) -> *mut c_void {
    if !resolved() {
        // The bootstrap buffer is zero and never reused.
        return n
            .checked_mul(size)
            .map_or(std::ptr::null_mut(), |b| boot_alloc(b, 16));
    }
    // SAFETY: as above, __libc_calloc.
    unsafe { std::mem::transmute::<usize, CallocFn>(CALLOC.load(Ordering::Relaxed))(n, size) }
}

/// The C library's `realloc` (`p` from the C library or the buffer).
pub(crate) fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if let Some(old) = boot_size(p) {
        let q = malloc(size);
        if !q.is_null() {
            // SAFETY: both blocks are at least min(old, size) bytes long.
            unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size)) };
        }
        return q;
    }
    if !resolved() {
        return boot_alloc(size, 16);
    }
    // SAFETY: as above, __libc_realloc.
    unsafe { std::mem::transmute::<usize, ReallocFn>(REALLOC.load(Ordering::Relaxed))(p, size) }
}

/// The C library's `memalign`.
pub(crate) fn memalign(align: usize, size: usize) -> *mut c_void {
    if !resolved() {
        return boot_alloc(size, align);
    }
    // SAFETY: as above, __libc_memalign.
    unsafe { std::mem::transmute::<usize, MemalignFn>(MEMALIGN.load(Ordering::Relaxed))(align, size) }
}

/// The C library's `free` (bootstrap blocks are never freed).
pub(crate) fn free(p: *mut c_void) {
    if p.is_null() || boot_size(p).is_some() {
        return;
    }
    if !resolved() {
        return; // cannot happen: p came from the C library, so it resolved
    }
    // SAFETY: as above, __libc_free, on a pointer the C library returned.
    unsafe { std::mem::transmute::<usize, FreeFn>(FREE.load(Ordering::Relaxed))(p) }
}

/// The C library's `malloc_usable_size`.
pub(crate) fn usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    if let Some(s) = boot_size(p) {
        return s;
    }
    if !resolved() {
        return 0;
    }
    // SAFETY: as above, glibc's malloc_usable_size.
    unsafe { std::mem::transmute::<usize, UsableFn>(USABLE.load(Ordering::Relaxed))(p) }
}

/// Rust's global allocator for this library: the C library's, never the
/// interposed one.
pub(crate) struct LibcAllocator;

// SAFETY: malloc/memalign return blocks of at least the size asked for,
// aligned as asked (memalign) or to 16 bytes (malloc), or null; free and
// realloc take what they returned.
unsafe impl GlobalAlloc for LibcAllocator {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.align() <= 16 {
            malloc(l.size()).cast()
        } else {
            memalign(l.align(), l.size()).cast()
        }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.align() <= 16 {
            calloc(1, l.size()).cast()
        } else {
            let p = memalign(l.align(), l.size());
            if !p.is_null() {
                // SAFETY: p is a fresh block of l.size() bytes.
                unsafe { std::ptr::write_bytes(p as *mut u8, 0, l.size()) };
            }
            p.cast()
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, _l: Layout) {
        free(p.cast())
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if l.align() <= 16 {
            realloc(p.cast(), new).cast()
        } else {
            // SAFETY: the GlobalAlloc contract: p, l describe a live block.
            unsafe {
                let q = self.alloc(Layout::from_size_align_unchecked(new, l.align()));
                if !q.is_null() {
                    std::ptr::copy_nonoverlapping(p, q, l.size().min(new));
                    self.dealloc(p, l);
                }
                q
            }
        }
    }
}
