//! The C library's own allocator, reached past this library's interposers,
//! and Rust's global allocator on top of it.
//!
//! All six functions (the `__libc_malloc` family and `malloc_usable_size`)
//! come from `libc.so.6` itself, looked up in it by name on first use, so
//! that a block is always sized, grown and freed by the allocator that
//! made it. Not the next definitions after this library: a program linked
//! with jemalloc or tcmalloc has its allocator there (tcmalloc defines
//! `__libc_malloc` too, unversioned, which a versioned lookup also takes),
//! and `malloc_usable_size` looked up that way came from it while the
//! blocks came from the C library: every such program died before `main`.
//! Serving the program's small blocks from jemalloc instead was tried and
//! dropped: it maps its arenas with `mmap`, which this library tiers, and
//! the C library allocates on tiermem's own threads too (thread-exit
//! records), so a handler thread faulted on a region it serves and hung.
//! Such a program's `malloc` and `free` therefore go to the C library
//! under `tiermem run`; what it allocates through jemalloc's own interface
//! (`mallocx`, its `operator new`) stays jemalloc's.
//!
//! An allocation made while the lookup runs (the dynamic linker may
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

thread_local! {
    /// This thread is resolving an allocator: serve it from the buffer.
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// One allocator's functions, resolved on first use (0 until then).
pub(crate) struct Allocator {
    names: [&'static CStr; 6],
    /// malloc, calloc, realloc, memalign, malloc_usable_size, free.
    fns: [AtomicUsize; 6],
}

const MALLOC: usize = 0;
const CALLOC: usize = 1;
const REALLOC: usize = 2;
const MEMALIGN: usize = 3;
const USABLE: usize = 4;
const FREE: usize = 5;

/// The C library's.
pub(crate) static LIBC: Allocator = Allocator {
    names: [
        c"__libc_malloc",
        c"__libc_calloc",
        c"__libc_realloc",
        c"__libc_memalign",
        c"malloc_usable_size",
        c"__libc_free",
    ],
    fns: [const { AtomicUsize::new(0) }; 6],
};

impl Allocator {
    /// Resolves the functions once; false while this thread is in the
    /// middle of doing so (the caller then uses the bootstrap buffer).
    fn resolved(&self) -> bool {
        // Acquire: pairs with the Release store of `free`, made last.
        if self.fns[FREE].load(Ordering::Acquire) != 0 {
            return true;
        }
        if RESOLVING.with(|r| r.replace(true)) {
            return false;
        }
        // SAFETY: a NUL-terminated name; RTLD_NOLOAD only looks up the C
        // library every process here has loaded.
        let handle = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        // SAFETY: a handle from dlopen and NUL-terminated names.
        let found = self
            .names
            .map(|n| unsafe { libc::dlsym(handle, n.as_ptr()) } as usize);
        assert!(
            !handle.is_null() && found.iter().all(|&f| f != 0),
            "tiermem: the C library's allocator is missing"
        );
        for (slot, f) in self.fns.iter().zip(found) {
            // Release; `free` last: `resolved()` checks it first.
            slot.store(f, Ordering::Release);
        }
        RESOLVING.with(|r| r.set(false));
        true
    }

    fn get(&self, k: usize) -> usize {
        self.fns[k].load(Ordering::Relaxed)
    }

    /// `malloc`.
    pub(crate) fn malloc(&self, size: usize) -> *mut c_void {
        if !self.resolved() {
            return boot_alloc(size, 16);
        }
        // SAFETY: resolved to a malloc, which has this signature.
        unsafe { std::mem::transmute::<usize, MallocFn>(self.get(MALLOC))(size) }
    }

    /// `calloc`.
    pub(crate) fn calloc(&self, n: usize, size: usize) -> *mut c_void {
        if !self.resolved() {
            // The bootstrap buffer is zero and never reused.
            return n
                .checked_mul(size)
                .map_or(std::ptr::null_mut(), |b| boot_alloc(b, 16));
        }
        // SAFETY: as above, calloc.
        unsafe { std::mem::transmute::<usize, CallocFn>(self.get(CALLOC))(n, size) }
    }

    /// `realloc` (`p` from this allocator or the buffer).
    pub(crate) fn realloc(&self, p: *mut c_void, size: usize) -> *mut c_void {
        if let Some(old) = boot_size(p) {
            let q = self.malloc(size);
            if !q.is_null() {
                // SAFETY: both blocks are at least min(old, size) bytes long.
                unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size)) };
            }
            return q;
        }
        if !self.resolved() {
            return boot_alloc(size, 16);
        }
        // SAFETY: as above, realloc, on a block of this allocator's.
        unsafe { std::mem::transmute::<usize, ReallocFn>(self.get(REALLOC))(p, size) }
    }

    /// `memalign`.
    pub(crate) fn memalign(&self, align: usize, size: usize) -> *mut c_void {
        if !self.resolved() {
            return boot_alloc(size, align);
        }
        // SAFETY: as above, memalign.
        unsafe { std::mem::transmute::<usize, MemalignFn>(self.get(MEMALIGN))(align, size) }
    }

    /// `free` (bootstrap blocks are never freed).
    pub(crate) fn free(&self, p: *mut c_void) {
        if p.is_null() || boot_size(p).is_some() {
            return;
        }
        if !self.resolved() {
            return; // cannot happen: p came from this allocator, so it resolved
        }
        // SAFETY: as above, free, on a block of this allocator's.
        unsafe { std::mem::transmute::<usize, FreeFn>(self.get(FREE))(p) }
    }

    /// `malloc_usable_size`.
    pub(crate) fn usable_size(&self, p: *mut c_void) -> usize {
        if p.is_null() {
            return 0;
        }
        if let Some(s) = boot_size(p) {
            return s;
        }
        if !self.resolved() {
            return 0;
        }
        // SAFETY: as above, malloc_usable_size, on a block of this
        // allocator's.
        unsafe { std::mem::transmute::<usize, UsableFn>(self.get(USABLE))(p) }
    }
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

/// Rust's global allocator for this library: [`LIBC`], never the
/// interposed one.
pub(crate) struct LibcAllocator;

// SAFETY: malloc/memalign return blocks of at least the size asked for,
// aligned as asked (memalign) or to 16 bytes (malloc), or null; free and
// realloc take what they returned.
unsafe impl GlobalAlloc for LibcAllocator {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.align() <= 16 {
            LIBC.malloc(l.size()).cast()
        } else {
            LIBC.memalign(l.align(), l.size()).cast()
        }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.align() <= 16 {
            LIBC.calloc(1, l.size()).cast()
        } else {
            let p = LIBC.memalign(l.align(), l.size());
            if !p.is_null() {
                // SAFETY: p is a fresh block of l.size() bytes.
                unsafe { std::ptr::write_bytes(p as *mut u8, 0, l.size()) };
            }
            p.cast()
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, _l: Layout) {
        LIBC.free(p.cast())
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if l.align() <= 16 {
            LIBC.realloc(p.cast(), new).cast()
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
