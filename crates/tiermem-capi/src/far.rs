//! Far memory (`tm_far_*`) and overshadows of it (`tm_overshadow_*`, paper 2), with their registries.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tiermem::far::FarMemory;
use tiermem::overshadow::{Options as OvershadowOptions, Overshadow, Switch};

use crate::ffi::{guard, unless_null, Failure, Out};
use tiermem::fork::ProcessBound;

/// `tm_overshadow_create_ex` flags: switch each chunk of pages to its near
/// copy as soon as it is copied (default).
pub const TM_OVERSHADOW_PER_PAGE: c_int = 0;
/// `tm_overshadow_create_ex` flags: switch all pages after the whole copy.
pub const TM_OVERSHADOW_WHOLE: c_int = 1;

/// Far allocations handed out to C, by address.
static FARS: Mutex<BTreeMap<usize, (ProcessBound, FarMemory)>> = Mutex::new(BTreeMap::new());
/// Overshadows handed out to C, by `to`. An `Arc` so that `wait` does not
/// hold the lock.
static OVERSHADOWS: Mutex<BTreeMap<usize, (ProcessBound, Arc<Overshadow>)>> = Mutex::new(BTreeMap::new());

/// An entry made by a parent before fork() is refused in the child (and
/// stays where it is: dropping it is the parent's business).
fn made_here(born: &ProcessBound, object: &str) -> Result<(), Failure> {
    Ok(born.check("", object)?)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn keep_far(f: FarMemory) -> *mut c_void {
    let p = f.as_ptr().cast::<c_void>();
    lock(&FARS).insert(p as usize, (ProcessBound::here(), f));
    p
}

/// `void *tm_far_alloc(size_t size)`: `size` bytes (rounded up to pages)
/// of zeroed far memory that tiermem can overshadow; NULL on failure.
#[no_mangle]
pub extern "C" fn tm_far_alloc(size: usize) -> *mut c_void {
    guard("tm_far_alloc", || Ok(keep_far(FarMemory::alloc(size)?)))
}

/// `int tm_far_map_file(const char *path, uint64_t offset, size_t len, int
/// writable, void **out)`: maps a page-aligned range of a file as far
/// memory.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_far_map_file(
    path: *const c_char,
    offset: u64,
    len: usize,
    writable: c_int,
    out: *mut *mut c_void,
) -> c_int {
    guard("tm_far_map_file", || {
        const IF_NULL: &str = "path and out must not be NULL";
        if path.is_null() {
            return Err(Failure::invalid(IF_NULL));
        }
        // SAFETY: caller's contract: out is NULL or writable.
        let out = unsafe { Out::new(out, IF_NULL) }?;
        // SAFETY: caller's contract: a NUL-terminated string.
        let path = PathBuf::from(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()));
        let f = FarMemory::map_file(&path, offset, len, writable != 0)?;
        out.set(keep_far(f));
        Ok(())
    })
}

/// `int tm_far_free(void *ptr)`: frees far memory from `tm_far_alloc` or
/// unmaps a `tm_far_map_file` range. Overshadows of it stay valid. NULL is
/// a no-op; any other pointer is `TM_EINVAL`.
#[no_mangle]
pub extern "C" fn tm_far_free(p: *mut c_void) -> c_int {
    unless_null("tm_far_free", p, || {
        // Taken out under the lock, dropped after it.
        let f = {
            let mut fars = lock(&FARS);
            if let Some((born, _)) = fars.get(&(p as usize)) {
                made_here(born, "far memory")?;
            }
            fars.remove(&(p as usize))
        };
        f.map(drop).ok_or_else(|| {
            Failure::invalid(format!(
                "{p:p} was not returned by tm_far_alloc or tm_far_map_file (or was freed already)"
            ))
        })
    })
}

/// `int tm_overshadow_create(const void *from, size_t size, void **to)`:
/// paper 2's `overshadow_create` with per-page switch.
///
/// # Safety
/// `to` is NULL or writable; `from` is looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn tm_overshadow_create(
    from: *const c_void,
    size: usize,
    to: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller's contract.
    unsafe { overshadow_create("tm_overshadow_create", from, size, TM_OVERSHADOW_PER_PAGE, to) }
}

/// `int tm_overshadow_create_ex(const void *from, size_t size, int flags,
/// void **to)`: as `tm_overshadow_create`, with `TM_OVERSHADOW_PER_PAGE`
/// or `TM_OVERSHADOW_WHOLE`.
///
/// # Safety
/// As [`tm_overshadow_create`].
#[no_mangle]
pub unsafe extern "C" fn tm_overshadow_create_ex(
    from: *const c_void,
    size: usize,
    flags: c_int,
    to: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller's contract.
    unsafe { overshadow_create("tm_overshadow_create_ex", from, size, flags, to) }
}

/// # Safety
/// `to` is NULL or writable.
unsafe fn overshadow_create(
    func: &str,
    from: *const c_void,
    size: usize,
    flags: c_int,
    to: *mut *mut c_void,
) -> c_int {
    guard(func, || {
        // SAFETY: caller's contract: to is NULL or writable.
        let to = unsafe { Out::new(to, "to must not be NULL") }?;
        let switch = match flags {
            TM_OVERSHADOW_PER_PAGE => Switch::PerPage,
            TM_OVERSHADOW_WHOLE => Switch::Whole,
            v => {
                return Err(Failure::invalid(format!(
                    "flags = {v}: expected TM_OVERSHADOW_PER_PAGE or TM_OVERSHADOW_WHOLE"
                )))
            }
        };
        let opts = OvershadowOptions {
            switch,
            ..Default::default()
        };
        let os = Overshadow::create(from as usize, size, &opts)?;
        let p = os.as_ptr().cast::<c_void>();
        lock(&OVERSHADOWS).insert(p as usize, (ProcessBound::here(), Arc::new(os)));
        to.set(p);
        Ok(())
    })
}

fn unknown_to(to: *mut c_void) -> Failure {
    Failure::invalid(format!(
        "{to:p} is not the `to` of a live overshadow (destroyed already, or never created)"
    ))
}

fn overshadow_of(to: *mut c_void) -> Result<Arc<Overshadow>, Failure> {
    let os = lock(&OVERSHADOWS).get(&(to as usize)).cloned();
    let (born, os) = os.ok_or_else(|| unknown_to(to))?;
    made_here(&born, "overshadow")?;
    Ok(os)
}

/// `int tm_overshadow_wait(void *to)`: waits until every page is near.
#[no_mangle]
pub extern "C" fn tm_overshadow_wait(to: *mut c_void) -> c_int {
    guard("tm_overshadow_wait", || Ok(overshadow_of(to)?.wait()?))
}

/// `int tm_overshadow_test(void *to)`: 1 if every page is near (or the copy
/// failed: `tm_overshadow_wait` says how), 0 while copying; never blocks.
#[no_mangle]
pub extern "C" fn tm_overshadow_test(to: *mut c_void) -> c_int {
    guard("tm_overshadow_test", || {
        Ok(c_int::from(overshadow_of(to)?.test()))
    })
}

/// `int tm_overshadow_destroy(void *to)`: ends an overshadow at any time
/// (a copy in progress stops after its current chunk) and unmaps `to`.
#[no_mangle]
pub extern "C" fn tm_overshadow_destroy(to: *mut c_void) -> c_int {
    guard("tm_overshadow_destroy", || {
        // Taken out under the lock, destroyed after it (destroy waits for
        // the mover's current chunk).
        let os = {
            let mut all = lock(&OVERSHADOWS);
            if let Some((born, _)) = all.get(&(to as usize)) {
                made_here(born, "overshadow")?;
            }
            all.remove(&(to as usize))
        };
        os.map(drop).ok_or_else(|| unknown_to(to))
    })
}
