//! Regions (`tm_region_*`): create and destroy, base and size, `struct tm_stats`, evict and discard.

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};
use std::ptr;

use tiermem::stats::Cost;
use tiermem::{Region, RegionStats};

use crate::config::{config_from_c, read_config, tm_config};
use crate::ffi::{destroy_owned, guard, non_null, owned, Failure, Out, Owned, MAX_STRUCT_SIZE};
use tiermem::fork::ProcessBound;

/// An opaque region handle (`tm_region *` in C), created by
/// [`tm_region_create`] and consumed by [`tm_region_destroy`].
pub struct tm_region {
    region: Region,
    born: ProcessBound,
}

impl Owned for tm_region {
    const OBJECT: &'static str = "region";
    fn born(&self) -> &ProcessBound {
        &self.born
    }
}

/// `struct tm_stats`: a snapshot of a region's statistics. All counters
/// count since the region was created.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tm_stats {
    /// Set by the caller to `sizeof(struct tm_stats)`; not written.
    pub struct_size: u32,
    /// Padding; written as 0 when it fits.
    pub reserved0: u32,
    /// First touches of never-written pages (no far-store read).
    pub faults_zero_fill: u64,
    /// Fills from the far store.
    pub faults_far_fill: u64,
    /// Writes to clean pages (dirty tracking).
    pub faults_write_protect: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Unmap calls issued for evictions (each can cost a TLB shootdown).
    pub evict_calls: u64,
    /// Evicted pages written back (dirty); the others were dropped.
    pub write_backs: u64,
    /// Bytes read from the far store.
    pub bytes_in: u64,
    /// Bytes written to the far store.
    pub bytes_out: u64,
    /// Far-store I/O errors.
    pub io_errors: u64,
    /// Pages poisoned because of errors.
    pub poisoned_pages: u64,
    /// Bytes resident in near memory now.
    pub resident_bytes: u64,
    /// Nanoseconds spent serving faults, in total.
    pub fault_ns_total: u64,
    /// Median fault service time, nanoseconds.
    pub fault_p50_ns: u64,
    /// 90th percentile fault service time, nanoseconds.
    pub fault_p90_ns: u64,
    /// 99th percentile fault service time, nanoseconds.
    pub fault_p99_ns: u64,
    /// Nanoseconds in page-state and replacement-list bookkeeping.
    pub time_lock_list_ns: u64,
    /// Nanoseconds installing page table entries.
    pub time_pte_ns: u64,
    /// Nanoseconds unmapping and write-protecting (TLB shootdowns).
    pub time_tlb_ns: u64,
    /// Nanoseconds moving data to and from the far store.
    pub time_transfer_ns: u64,
    /// Other nanoseconds inside the fault handler.
    pub time_misc_ns: u64,
    /// Application threads that took a fault (exact up to 256).
    pub threads: u64,
    /// TLB-shootdown IPIs on the whole machine since creation.
    pub tlb_shootdowns_machine: u64,
    // Version 2 (tiermem 0.2): movers and prefetch.
    /// Pages asked for by the prefetcher (stream detection or tm_prefetch).
    pub prefetch_issued: u64,
    /// Prefetched pages a stream then passed (used).
    pub prefetch_used: u64,
    /// Prefetched pages evicted before use.
    pub prefetch_wasted: u64,
    /// Pages filled by mover threads.
    pub mover_fills: u64,
    /// Pages evicted by mover threads.
    pub mover_evictions: u64,
    /// Pages evicted by faulting threads themselves.
    pub inline_evictions: u64,
}

const STATS_HEADER: usize = offset_of!(tm_stats, faults_zero_fill);
const _: () = assert!(STATS_HEADER == 8 && size_of::<tm_stats>() == 8 + 28 * 8);

fn stats_to_c(s: &RegionStats) -> tm_stats {
    let cost = |c: Cost| {
        s.cost
            .iter()
            .find(|share| share.category == c.name())
            .map_or(0, |share| share.ns)
    };
    tm_stats {
        struct_size: size_of::<tm_stats>() as u32,
        reserved0: 0,
        faults_zero_fill: s.faults_zero_fill,
        faults_far_fill: s.faults_far_fill,
        faults_write_protect: s.faults_write_protect,
        evictions: s.evictions,
        evict_calls: s.evict_calls,
        write_backs: s.write_backs,
        bytes_in: s.bytes_in,
        bytes_out: s.bytes_out,
        io_errors: s.io_errors,
        poisoned_pages: s.poisoned_pages,
        resident_bytes: s.resident_bytes,
        fault_ns_total: s.fault_ns_total,
        fault_p50_ns: s.fault_latency.p50_ns,
        fault_p90_ns: s.fault_latency.p90_ns,
        fault_p99_ns: s.fault_latency.p99_ns,
        time_lock_list_ns: cost(Cost::LockList),
        time_pte_ns: cost(Cost::Pte),
        time_tlb_ns: cost(Cost::Tlb),
        time_transfer_ns: cost(Cost::Transfer),
        time_misc_ns: cost(Cost::Misc),
        // The core's table holds 256 threads; the rest share one entry
        // (tid 0), counted here as one thread.
        threads: s.faults_per_thread.len() as u64,
        tlb_shootdowns_machine: s.tlb_shootdowns_machine,
        prefetch_issued: s.prefetch.issued,
        prefetch_used: s.prefetch.used,
        prefetch_wasted: s.prefetch.wasted,
        mover_fills: s.mover_fills,
        mover_evictions: s.mover_evictions,
        inline_evictions: s.inline_evictions,
    }
}

/// The region behind a handle, or `TM_EINVAL` for NULL.
///
/// # Safety
/// `r` is NULL or a live handle from [`tm_region_create`].
unsafe fn region<'a>(r: *const tm_region) -> Result<&'a Region, Failure> {
    const _: () = {
        // Handles are shared between C threads without locking.
        const fn shareable<T: Send + Sync>() {}
        shareable::<Region>();
    };
    // SAFETY: a non-NULL r is a live handle (caller's contract): a Box
    // leaked by tm_region_create that stays valid until tm_region_destroy,
    // and Region is Sync, so shared references from several threads are
    // fine. In a forked child the parent's handle is refused.
    Ok(&unsafe { owned(r, "region handle") }?.region)
}

/// `int tm_region_create(const struct tm_config *cfg, tm_region **out)`:
/// creates a region. On success stores the handle in `*out` and returns 0;
/// on failure stores NULL there (when `out` is not NULL) and returns a
/// negative code.
///
/// # Safety
/// `cfg` is NULL or points to an initialised `struct tm_config` of at
/// least `cfg->struct_size` bytes whose `far_path` is NULL or a
/// NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_region_create(cfg: *const tm_config, out: *mut *mut tm_region) -> c_int {
    guard("tm_region_create", || {
        // SAFETY: out is NULL or writable (caller's contract).
        let out = unsafe { Out::new(out, "out is NULL") }?;
        // SAFETY: forwarded caller's contract on cfg.
        let c = unsafe { read_config(cfg) }?;
        // SAFETY: far_path is NULL or NUL-terminated (caller's contract).
        let config = unsafe { config_from_c(&c) }?;
        let region = Region::new(config)?;
        out.set_box(tm_region {
            region,
            born: ProcessBound::here(),
        });
        Ok(())
    })
}

/// `int tm_region_destroy(tm_region *r)`: unmaps the region and frees its
/// near memory and far store. NULL is a no-op returning 0.
///
/// # Safety
/// `r` is NULL or a live handle; no other thread uses it or its memory
/// during or after the call.
#[no_mangle]
pub unsafe extern "C" fn tm_region_destroy(r: *mut tm_region) -> c_int {
    // SAFETY: r is NULL or a live handle from tm_region_create that the
    // caller gives up here (caller's contract).
    unsafe { destroy_owned("tm_region_destroy", r) }
}

/// `void *tm_region_base(const tm_region *r)`: the start of the region's
/// range, page aligned; NULL for a NULL handle.
///
/// # Safety
/// `r` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_region_base(r: *const tm_region) -> *mut c_void {
    guard("tm_region_base", || {
        // SAFETY: forwarded caller's contract.
        let region = unsafe { region(r) }?;
        Ok(region.as_ptr().cast::<c_void>())
    })
}

/// `size_t tm_region_size(const tm_region *r)`: the size of the range in
/// bytes; 0 for a NULL handle.
///
/// # Safety
/// `r` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_region_size(r: *const tm_region) -> usize {
    guard("tm_region_size", || {
        // SAFETY: forwarded caller's contract.
        let region = unsafe { region(r) }?;
        Ok(region.len())
    })
}

/// `int tm_region_stats(const tm_region *r, struct tm_stats *out)`: a
/// snapshot of the statistics. `out->struct_size` says how large the
/// caller's struct is: the fields that fit are filled, bytes beyond this
/// library's struct are zeroed, `struct_size` itself is left as it is.
///
/// # Safety
/// `r` is NULL or a live handle; `out` is NULL or points to at least
/// `out->struct_size` writable bytes, aligned for `struct tm_stats`.
#[no_mangle]
pub unsafe extern "C" fn tm_region_stats(r: *const tm_region, out: *mut tm_stats) -> c_int {
    guard("tm_region_stats", || {
        // SAFETY: forwarded caller's contract.
        let region = unsafe { region(r) }?;
        non_null(out, "out")?;
        // SAFETY: out is non-NULL, aligned and valid for its leading u32
        // (caller's contract).
        let size = unsafe { ptr::addr_of!((*out).struct_size).read() };
        if (size as usize) < STATS_HEADER + size_of::<u64>() || size > MAX_STRUCT_SIZE || size % 8 != 0 {
            return Err(Failure::invalid(format!(
                "out->struct_size = {size}: set it to sizeof(struct tm_stats) ({} here)",
                size_of::<tm_stats>()
            )));
        }
        let s = stats_to_c(&region.stats());
        let size = size as usize;
        let known = size_of::<tm_stats>();
        // SAFETY: the caller guarantees `size` writable bytes at out; we
        // write bytes 4..size (struct_size stays), copying from a local
        // tm_stats for the part this library knows and zeroing the rest.
        unsafe {
            let dst = out.cast::<u8>();
            let src = ptr::addr_of!(s).cast::<u8>();
            let filled = size.min(known);
            ptr::copy_nonoverlapping(src.add(4), dst.add(4), filled - 4);
            if size > known {
                ptr::write_bytes(dst.add(known), 0, size - known);
            }
        }
        Ok(())
    })
}

/// `int tm_region_evict_all(tm_region *r)`: writes back and drops every
/// resident page. Returns the number of pages evicted (saturated at
/// `INT_MAX`) or a negative code; pages whose write-back failed stay
/// resident.
///
/// # Safety
/// `r` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_region_evict_all(r: *mut tm_region) -> c_int {
    guard("tm_region_evict_all", || {
        // SAFETY: forwarded caller's contract.
        let n = unsafe { region(r) }?.evict_all()?;
        Ok(c_int::try_from(n).unwrap_or(c_int::MAX))
    })
}

/// `int tm_region_discard(tm_region *r, size_t offset, size_t len)`:
/// forgets `[offset, offset + len)` (page aligned, inside the region): the
/// pages read as zeros again and give back their near memory and far-store
/// space.
///
/// # Safety
/// `r` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_region_discard(r: *mut tm_region, offset: usize, len: usize) -> c_int {
    guard("tm_region_discard", || {
        // SAFETY: forwarded caller's contract.
        unsafe { region(r) }?.discard(offset, len)?;
        Ok(())
    })
}
