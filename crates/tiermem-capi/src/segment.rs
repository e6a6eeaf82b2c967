//! Segments on huge pages (`tm_segment_*`) and the huge page pools (`tm_hugepages_reserve`).

use std::ffi::{c_int, c_void};

use tiermem::hugepages::HugePageSize;
use tiermem::{Segment, SegmentConfig};

use crate::codes::TM_EHUGEPAGES;
use crate::ffi::{destroy_owned, guard, owned, Failure, Out, Owned};
use tiermem::fork::ProcessBound;

/// `tm_segment_create`: 2 MiB pages instead of 1 GiB.
pub const TM_SEGMENT_2M: c_int = 1;
/// `tm_segment_create`: fail rather than fall back to 2 MiB pages.
pub const TM_SEGMENT_NO_FALLBACK: c_int = 2;

/// `tm_segment`: a segment (opaque to C).
pub struct tm_segment {
    segment: Segment,
    born: ProcessBound,
}

impl Owned for tm_segment {
    const OBJECT: &'static str = "segment";
    fn born(&self) -> &ProcessBound {
        &self.born
    }
}

/// `int tm_segment_create(size_t bytes, int flags, tm_segment **out)`: a
/// populated, locked range on 1 GiB pages (or 2 MiB: `TM_SEGMENT_2M`, or
/// the fallback unless `TM_SEGMENT_NO_FALLBACK`).
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_create(bytes: usize, flags: c_int, out: *mut *mut tm_segment) -> c_int {
    guard("tm_segment_create", || {
        // SAFETY: out is NULL or writable (caller's contract).
        let out = unsafe { Out::new(out, "out is NULL") }?;
        if flags & !(TM_SEGMENT_2M | TM_SEGMENT_NO_FALLBACK) != 0 {
            return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
        }
        let mut config = SegmentConfig::new(bytes);
        if flags & TM_SEGMENT_2M != 0 {
            config.page = HugePageSize::Size2M;
        }
        config.fallback = flags & TM_SEGMENT_NO_FALLBACK == 0;
        let segment = Segment::with_config(&config)?;
        out.set_box(tm_segment {
            segment,
            born: ProcessBound::here(),
        });
        Ok(())
    })
}

/// `int tm_segment_destroy(tm_segment *s)`: unmaps it. NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a live handle that no one uses during or after the call.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_destroy(s: *mut tm_segment) -> c_int {
    // SAFETY: NULL or a live handle the caller gives up here.
    unsafe { destroy_owned("tm_segment_destroy", s) }
}

/// The segment behind a handle, or `TM_EINVAL` for NULL.
///
/// # Safety
/// `s` is NULL or a live handle from [`tm_segment_create`].
unsafe fn segment<'a>(s: *const tm_segment) -> Result<&'a Segment, Failure> {
    // SAFETY: a non-NULL s is a live handle (caller's contract), a leaked
    // Box valid until tm_segment_destroy; it is only read here.
    Ok(&unsafe { owned(s, "segment handle") }?.segment)
}

/// `void *tm_segment_base(const tm_segment *s)`; NULL for NULL.
///
/// # Safety
/// `s` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_base(s: *const tm_segment) -> *mut c_void {
    guard("tm_segment_base", || {
        // SAFETY: forwarded caller's contract.
        Ok(unsafe { segment(s) }?.as_ptr().cast::<c_void>())
    })
}

/// `size_t tm_segment_size(const tm_segment *s)`; 0 for NULL.
///
/// # Safety
/// `s` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_size(s: *const tm_segment) -> usize {
    // SAFETY: forwarded caller's contract.
    guard("tm_segment_size", || Ok(unsafe { segment(s) }?.len()))
}

/// `size_t tm_segment_page_size(const tm_segment *s)`; 0 for NULL.
///
/// # Safety
/// `s` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_page_size(s: *const tm_segment) -> usize {
    guard("tm_segment_page_size", || {
        // SAFETY: forwarded caller's contract.
        Ok(unsafe { segment(s) }?.page_size().bytes())
    })
}

/// `int tm_hugepages_reserve(size_t page_size, uint64_t pages, uint64_t
/// *available)`: grows a pool so that `pages` pages are available.
///
/// # Safety
/// `available` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_hugepages_reserve(page_size: usize, pages: u64, available: *mut u64) -> c_int {
    guard("tm_hugepages_reserve", || {
        let size = HugePageSize::from_bytes(page_size).ok_or_else(|| {
            Failure::invalid(format!("page_size = {page_size}: expected 2097152 or 1073741824"))
        })?;
        let change = tiermem::hugepages::reserve(&tiermem::hugepages::PoolRequest { size, pages })?;
        if !available.is_null() {
            // SAFETY: non-NULL and writable (caller's contract).
            unsafe { available.write(change.after.available()) };
        }
        if change.after.available() < pages {
            return Err(Failure {
                code: TM_EHUGEPAGES,
                message: change.to_string(),
            });
        }
        Ok(())
    })
}
