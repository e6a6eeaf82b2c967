//! Prefetch and access advice for ranges of regions: `tm_prefetch`, `tm_advise` and `TM_ADVICE_*`.

use std::ffi::{c_int, c_void};

use tiermem::Advice;

use crate::ffi::{guard, Failure};

/// `tm_advise`: back to the default heuristics.
pub const TM_ADVICE_NORMAL: c_int = 0;
/// `tm_advise`: sequential access: prefetch aggressively.
pub const TM_ADVICE_SEQUENTIAL: c_int = 1;
/// `tm_advise`: random access: no prefetch.
pub const TM_ADVICE_RANDOM: c_int = 2;
/// `tm_advise`: needed soon: prefetch now.
pub const TM_ADVICE_WILLNEED: c_int = 3;
/// `tm_advise`: not needed soon: evict now, keeping the data.
pub const TM_ADVICE_DONTNEED: c_int = 4;

/// `int tm_prefetch(const void *addr, size_t len)`: asks for the bytes to
/// be brought into near memory (queued to the region's movers, or done now
/// without movers). The range must lie in one tiermem region.
///
/// # Safety
/// None beyond the C contract: the address is looked up, never dereferenced.
#[no_mangle]
pub extern "C" fn tm_prefetch(addr: *const c_void, len: usize) -> c_int {
    guard("tm_prefetch", || {
        tiermem::prefetch(addr as usize, len)?;
        Ok(())
    })
}

/// `int tm_touch(const void *addr, size_t len)`: makes the range resident
/// now, on the calling thread and without a fault (a debugger's way to look
/// at any page: `/proc/<pid>/mem` and `ptrace` cannot bring one in).
/// Returns the number of pages of the range resident afterwards.
#[no_mangle]
pub extern "C" fn tm_touch(addr: *const c_void, len: usize) -> c_int {
    guard("tm_touch", || {
        let n = tiermem::touch(addr as usize, len)?;
        Ok(c_int::try_from(n).unwrap_or(c_int::MAX))
    })
}

/// `int tm_advise(const void *addr, size_t len, int advice)`: access advice
/// for a range of one tiermem region (`TM_ADVICE_*`).
#[no_mangle]
pub extern "C" fn tm_advise(addr: *const c_void, len: usize, advice: c_int) -> c_int {
    guard("tm_advise", || {
        let a = match advice {
            TM_ADVICE_NORMAL => Advice::Normal,
            TM_ADVICE_SEQUENTIAL => Advice::Sequential,
            TM_ADVICE_RANDOM => Advice::Random,
            TM_ADVICE_WILLNEED => Advice::WillNeed,
            TM_ADVICE_DONTNEED => Advice::DontNeed,
            v => {
                return Err(Failure::invalid(format!(
                    "advice = {v}: expected a TM_ADVICE_* value"
                )))
            }
        };
        tiermem::advise(addr as usize, len, a)?;
        Ok(())
    })
}
