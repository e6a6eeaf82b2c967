//! The process-wide heap: `tm_malloc_global` and `tm_free_global`.

use std::ffi::{c_int, c_void};

use crate::ffi::{guard, unless_null};

/// `void *tm_malloc_global(size_t size)`: `size` bytes of tiered memory
/// from the process-wide region (created at first use from the `TIERMEM_*`
/// variables), 64-byte aligned, page aligned from one page up; NULL on
/// failure with the detail in `tm_last_error`.
#[no_mangle]
pub extern "C" fn tm_malloc_global(size: usize) -> *mut c_void {
    guard("tm_malloc_global", || {
        Ok(tiermem::global::malloc_global(size)? as *mut c_void)
    })
}

/// `int tm_free_global(void *ptr)`: frees memory from
/// [`tm_malloc_global`]; NULL is a no-op returning 0, any other pointer
/// is `TM_EINVAL`.
///
/// # Safety
/// Nothing may use the memory after the call (it reads as zeros or is
/// handed out again); the pointer itself is checked, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn tm_free_global(ptr: *mut c_void) -> c_int {
    unless_null("tm_free_global", ptr, || {
        tiermem::global::free_global(ptr as usize)?;
        Ok(())
    })
}
