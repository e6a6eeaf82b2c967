//! tiermem's C ABI: `libtiermem.so` and `libtiermem.a`, declared by
//! `include/tiermem.h`.
//!
//! This crate is a thin, defensive translation layer over the [`tiermem`]
//! core crate and the only place in the workspace where pointers handed in
//! by C code are dereferenced. Every exported function
//!
//! - checks its pointers and enumerations (NULL or an unknown value is
//!   `TM_EINVAL`, never undefined behaviour),
//! - catches panics (`TM_EINTERNAL`, or NULL for functions that return a
//!   pointer): no unwind ever crosses `extern "C"`,
//! - reports failures as the stable negative codes of
//!   [`tiermem::ErrorCode`] and leaves the detailed message in a
//!   thread-local string read with [`tm_last_error`].
//!
//! Versioned structs (`struct tm_config`, `struct tm_stats`) start with a
//! `struct_size` field so that they can grow: a config smaller than the
//! version-1 size is refused, bytes a newer caller passes beyond what this
//! library knows must be zero; stats are filled as far as the caller's
//! struct reaches.
//!
//! ```c
//! #include <tiermem.h>
//!
//! struct tm_config cfg;
//! tm_config_init(&cfg, 64u << 20, 16u << 20);   /* 64 MiB over 16 MiB */
//! tm_region *r;
//! int rc = tm_region_create(&cfg, &r);
//! if (rc != TM_OK) {
//!     fprintf(stderr, "%s: %s\n", tm_strerror(rc), tm_last_error());
//!     return 1;
//! }
//! double *a = tm_region_base(r);
//! for (size_t i = 0; i < tm_region_size(r) / sizeof *a; i++) a[i] = i;
//! struct tm_stats st = { .struct_size = sizeof st };
//! tm_region_stats(r, &st);
//! printf("%llu evictions\n", (unsigned long long)st.evictions);
//! tm_region_destroy(r);
//! ```
//!
//! Rust programs should use the [`tiermem`] crate directly; the `rlib` of
//! this crate exists for its own tests and for linking it into Rust
//! binaries that also expose the C API.

use std::any::Any;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::mem::{offset_of, size_of};
use std::os::unix::ffi::OsStrExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr;
use std::sync::{Arc, Mutex};

use tiermem::far::FarMemory;
use tiermem::hugepages::HugePageSize;
use tiermem::overshadow::{Options as OvershadowOptions, Overshadow, Switch};
use tiermem::stats::Cost;
use tiermem::{
    Advice, Config, DirtyTracking, ErrorCode, FarStoreConfig, FaultPath, InstallMethod, PageSize, PolicyKind,
    Region, RegionStats, Segment, SegmentConfig,
};

// ---------------------------------------------------------------------------
// Version
// ---------------------------------------------------------------------------

/// Parses a decimal version component at compile time.
const fn parse_version_part(s: &str) -> c_int {
    let b = s.as_bytes();
    let mut v: c_int = 0;
    let mut i = 0;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "version component is not a number");
        v = v * 10 + (b[i] - b'0') as c_int;
        i += 1;
    }
    v
}

/// `TIERMEM_VERSION_MAJOR` (the package version's major number).
pub const TIERMEM_VERSION_MAJOR: c_int = parse_version_part(env!("CARGO_PKG_VERSION_MAJOR"));
/// `TIERMEM_VERSION_MINOR`.
pub const TIERMEM_VERSION_MINOR: c_int = parse_version_part(env!("CARGO_PKG_VERSION_MINOR"));
/// `TIERMEM_VERSION_PATCH`.
pub const TIERMEM_VERSION_PATCH: c_int = parse_version_part(env!("CARGO_PKG_VERSION_PATCH"));
/// `TIERMEM_VERSION`: major * 10000 + minor * 100 + patch.
pub const TIERMEM_VERSION: c_int =
    TIERMEM_VERSION_MAJOR * 10000 + TIERMEM_VERSION_MINOR * 100 + TIERMEM_VERSION_PATCH;

// ---------------------------------------------------------------------------
// Codes and enumerations (values fixed forever: they are the ABI)
// ---------------------------------------------------------------------------

/// Success.
pub const TM_OK: c_int = 0;
/// Invalid argument or configuration (also: a NULL pointer, an unknown
/// enumeration value, a pointer tiermem did not hand out).
pub const TM_EINVAL: c_int = ErrorCode::InvalidArgument as c_int;
/// Out of memory or address space.
pub const TM_ENOMEM: c_int = ErrorCode::OutOfMemory as c_int;
/// The kernel lacks a feature the configuration needs.
pub const TM_EUNSUPPORTED: c_int = ErrorCode::Unsupported as c_int;
/// Far-store I/O error.
pub const TM_EIO: c_int = ErrorCode::Io as c_int;
/// Far store full.
pub const TM_ENOSPC: c_int = ErrorCode::NoSpace as c_int;
/// The huge page pool is too small.
pub const TM_EHUGEPAGES: c_int = ErrorCode::HugePages as c_int;
/// Permission denied.
pub const TM_EPERM: c_int = ErrorCode::Permission as c_int;
/// Internal error (a bug, including a caught panic).
pub const TM_EINTERNAL: c_int = ErrorCode::Internal as c_int;
/// A team worker failed (error, crash or kill); the team stopped.
pub const TM_EWORKER: c_int = ErrorCode::WorkerFailed as c_int;
/// `tm_config.page_size_bytes`: 2 MiB transparent huge pages.
pub const TM_PAGE_THP: u64 = (2 << 20) + 1;
/// `tm_segment_create`: 2 MiB pages instead of 1 GiB.
pub const TM_SEGMENT_2M: c_int = 1;
/// `tm_segment_create`: fail rather than fall back to 2 MiB pages.
pub const TM_SEGMENT_NO_FALLBACK: c_int = 2;

/// `far_kind`: a memory pool in this process (default).
pub const TM_FAR_MEMORY: i32 = 0;
/// `far_kind`: a file (`far_path`, `far_direct`).
pub const TM_FAR_FILE: i32 = 1;
/// `policy`: first in, first out (default).
pub const TM_POLICY_FIFO: i32 = 0;
/// `policy`: CLOCK (second chance).
pub const TM_POLICY_CLOCK: i32 = 1;
/// `policy`: scan-resistant (cyclic sweeps larger than the budget).
pub const TM_POLICY_SCAN: i32 = 2;
/// `install`: movers install pages with `UFFDIO_COPY` (default).
pub const TM_INSTALL_COPY: i32 = 0;
/// `install`: movers recycle page frames with `UFFDIO_MOVE`.
pub const TM_INSTALL_MOVE: i32 = 1;
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
/// `fault_path`: faults served on the faulting thread (default).
pub const TM_FAULT_IN_CONTEXT: i32 = 0;
/// `fault_path`: faults served by handler threads.
pub const TM_FAULT_HANDLER_THREAD: i32 = 1;
/// `tm_overshadow_create_ex` flags: switch each chunk of pages to its near
/// copy as soon as it is copied (default).
pub const TM_OVERSHADOW_PER_PAGE: c_int = 0;
/// `tm_overshadow_create_ex` flags: switch all pages after the whole copy.
pub const TM_OVERSHADOW_WHOLE: c_int = 1;
/// `dirty_tracking`: write-protect faults (default).
pub const TM_DIRTY_WP_FAULT: i32 = 0;
/// `dirty_tracking`: `UFFD_FEATURE_WP_ASYNC` plus `PAGEMAP_SCAN`.
pub const TM_DIRTY_WP_ASYNC: i32 = 1;

/// The largest `struct_size` accepted: anything bigger is taken for an
/// uninitialised struct rather than a struct from the far future.
const MAX_STRUCT_SIZE: u32 = 4096;

// ---------------------------------------------------------------------------
// ABI types
// ---------------------------------------------------------------------------

/// An opaque region handle (`tm_region *` in C), created by
/// [`tm_region_create`] and consumed by [`tm_region_destroy`].
#[allow(non_camel_case_types)]
pub struct tm_region {
    region: Region,
}

/// `struct tm_config`: everything that defines a region. Initialise it with
/// [`tm_config_init`]; defaults are those of [`tiermem::Config::new`].
///
/// Fields are naturally aligned with explicit padding (`reserved0`,
/// `reserved1`), so the C and Rust layouts agree without relying on
/// implicit padding rules; new fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct tm_config {
    /// `sizeof(struct tm_config)` as the caller compiled it.
    pub struct_size: u32,
    /// Padding; must be 0.
    pub reserved0: u32,
    /// Size of the virtual range in bytes (multiple of the page size).
    pub virt_bytes: u64,
    /// Near-memory budget in bytes.
    pub near_bytes: u64,
    /// Page size in bytes: 4096 (default) or 2097152.
    pub page_size_bytes: u64,
    /// `TM_FAR_MEMORY` (default) or `TM_FAR_FILE`.
    pub far_kind: i32,
    /// Padding; must be 0.
    pub reserved1: u32,
    /// `TM_FAR_FILE`: a directory or a new file name (NUL-terminated, any
    /// bytes); NULL otherwise (default).
    pub far_path: *const c_char,
    /// `TM_FAR_FILE`: 1 opens the file with `O_DIRECT`; default 0.
    pub far_direct: i32,
    /// `TM_POLICY_FIFO` (default).
    pub policy: i32,
    /// `TM_FAULT_IN_CONTEXT` (default) or `TM_FAULT_HANDLER_THREAD`.
    pub fault_path: i32,
    /// `TM_DIRTY_WP_FAULT` (default) or `TM_DIRTY_WP_ASYNC`.
    pub dirty_tracking: i32,
    /// Pages evicted together, 1 to 512; default 64.
    pub evict_batch_pages: u32,
    /// Handler threads (`TM_FAULT_HANDLER_THREAD` only), at least 1;
    /// default 1.
    pub handler_threads: u32,
    // Version 2 (tiermem 0.2): movers and prefetch. Zero means the default,
    // so version-1 callers get it.
    /// Dedicated data-mover threads; default 0 (movement in faults only).
    pub movers: u32,
    /// 1 turns fault-triggered prefetch off; default 0 (on with movers).
    pub prefetch_off: i32,
    /// Largest prefetch window in pages, 4 to 2048; 0 = default (512).
    pub prefetch_max_pages: u32,
    /// `TM_INSTALL_COPY` (default) or `TM_INSTALL_MOVE`.
    pub install: i32,
    /// CPUs to pin movers to (`mover_cpu_count` entries); NULL = unpinned.
    pub mover_cpus: *const i32,
    /// Entries of `mover_cpus`.
    pub mover_cpu_count: u32,
    /// Padding; must be 0.
    pub reserved2: u32,
}

/// The size of version 1 of `struct tm_config`, the smallest accepted.
/// Computed from the last version-1 field so that it stays put when
/// fields are appended.
const CONFIG_SIZE_V1: usize = offset_of!(tm_config, handler_threads) + size_of::<u32>();
const _: () = assert!(CONFIG_SIZE_V1 == 72 && size_of::<tm_config>() == 104);

/// `struct tm_stats`: a snapshot of a region's statistics. All counters
/// count since the region was created.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
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

// ---------------------------------------------------------------------------
// Errors: the thread's last message, panics
// ---------------------------------------------------------------------------

thread_local! {
    /// The calling thread's last failure, returned by `tm_last_error`.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failed call: its code and the detail for `tm_last_error`.
#[derive(Debug)]
struct Failure {
    code: c_int,
    message: String,
}

impl Failure {
    fn invalid(message: impl Into<String>) -> Failure {
        Failure {
            code: TM_EINVAL,
            message: message.into(),
        }
    }
}

impl From<tiermem::Error> for Failure {
    fn from(e: tiermem::Error) -> Failure {
        Failure {
            code: e.code() as c_int,
            message: e.to_string(),
        }
    }
}

/// Records `message` as this thread's last error, prefixed by the function
/// that failed. Never panics: a thread whose locals are being destroyed
/// keeps its old message.
fn set_last_error(func: &str, message: &str) {
    let text = format!("{func}: {message}").replace('\0', "\\0");
    let c = CString::new(text).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut slot) = e.try_borrow_mut() {
            *slot = c;
        }
    });
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Runs the body of exported function `func`: a failure or a panic becomes
/// a negative code with the detail left for `tm_last_error`.
fn call<T>(func: &str, body: impl FnOnce() -> Result<T, Failure>) -> Result<T, c_int> {
    // AssertUnwindSafe: after a panic, the caller only gets an error code;
    // a region the panic left half-updated reports its state through later
    // calls, as it would after any internal error.
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(f)) => {
            set_last_error(func, &f.message);
            Err(f.code)
        }
        Err(payload) => {
            set_last_error(
                func,
                &format!(
                    "internal error (panic: {}); please report it",
                    panic_message(&*payload)
                ),
            );
            // Dropping a payload can itself panic; keep that inside too.
            let _ = panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
            Err(TM_EINTERNAL)
        }
    }
}

/// Folds a call's outcome into the C convention: 0 or a negative code.
fn status(r: Result<(), c_int>) -> c_int {
    r.map_or_else(|code| code, |()| TM_OK)
}

// ---------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------

impl tm_config {
    /// The C view of [`Config::new`]'s defaults. A file store's path is
    /// not carried over (far_path stays NULL): the defaults never name one.
    fn from_defaults(c: &Config) -> tm_config {
        tm_config {
            struct_size: size_of::<tm_config>() as u32,
            reserved0: 0,
            virt_bytes: c.virt_bytes,
            near_bytes: c.near_bytes,
            page_size_bytes: match c.page_size {
                PageSize::Thp2M => TM_PAGE_THP,
                p => p.bytes() as u64,
            },
            far_kind: match c.far {
                FarStoreConfig::Memory => TM_FAR_MEMORY,
                FarStoreConfig::File { .. } => TM_FAR_FILE,
            },
            reserved1: 0,
            far_path: ptr::null(),
            far_direct: i32::from(matches!(c.far, FarStoreConfig::File { direct: true, .. })),
            policy: match c.policy {
                PolicyKind::Fifo => TM_POLICY_FIFO,
                PolicyKind::Clock => TM_POLICY_CLOCK,
                PolicyKind::Scan => TM_POLICY_SCAN,
            },
            fault_path: match c.fault_path {
                FaultPath::InContext => TM_FAULT_IN_CONTEXT,
                FaultPath::HandlerThread => TM_FAULT_HANDLER_THREAD,
            },
            dirty_tracking: match c.dirty_tracking {
                DirtyTracking::WpFault => TM_DIRTY_WP_FAULT,
                DirtyTracking::WpAsync => TM_DIRTY_WP_ASYNC,
            },
            evict_batch_pages: u32::try_from(c.evict_batch_pages).unwrap_or(u32::MAX),
            handler_threads: u32::try_from(c.handler_threads).unwrap_or(u32::MAX),
            movers: u32::try_from(c.movers).unwrap_or(u32::MAX),
            prefetch_off: i32::from(!c.prefetch),
            prefetch_max_pages: u32::try_from(c.prefetch_max_pages).unwrap_or(u32::MAX),
            install: match c.install {
                InstallMethod::Copy => TM_INSTALL_COPY,
                InstallMethod::Move => TM_INSTALL_MOVE,
            },
            mover_cpus: ptr::null(),
            mover_cpu_count: 0,
            reserved2: 0,
        }
    }

    /// All zeros, far_path NULL.
    const fn zeroed() -> tm_config {
        tm_config {
            struct_size: 0,
            reserved0: 0,
            virt_bytes: 0,
            near_bytes: 0,
            page_size_bytes: 0,
            far_kind: 0,
            reserved1: 0,
            far_path: ptr::null(),
            far_direct: 0,
            policy: 0,
            fault_path: 0,
            dirty_tracking: 0,
            evict_batch_pages: 0,
            handler_threads: 0,
            movers: 0,
            prefetch_off: 0,
            prefetch_max_pages: 0,
            install: 0,
            mover_cpus: ptr::null(),
            mover_cpu_count: 0,
            reserved2: 0,
        }
    }
}

/// Copies the caller's `struct tm_config` out, checking its size.
///
/// # Safety
/// `cfg` is NULL or points to at least `cfg->struct_size` readable bytes,
/// aligned for `struct tm_config`.
unsafe fn read_config(cfg: *const tm_config) -> Result<tm_config, Failure> {
    if cfg.is_null() {
        return Err(Failure::invalid("cfg is NULL"));
    }
    // SAFETY: cfg is non-NULL and, by the caller's contract, aligned and
    // valid for at least the leading u32 that every version has.
    let size = unsafe { ptr::addr_of!((*cfg).struct_size).read() };
    if (size as usize) < CONFIG_SIZE_V1 {
        return Err(Failure::invalid(format!(
            "cfg->struct_size = {size} is smaller than struct tm_config version 1 ({CONFIG_SIZE_V1} bytes): \
             initialise the struct with tm_config_init"
        )));
    }
    if size > MAX_STRUCT_SIZE {
        return Err(Failure::invalid(format!(
            "cfg->struct_size = {size} is implausibly large: initialise the struct with tm_config_init"
        )));
    }
    let size = size as usize;
    let known = size_of::<tm_config>();
    // SAFETY: the caller guarantees `size` readable bytes at cfg; u8 has no
    // alignment or validity requirements.
    let bytes = unsafe { std::slice::from_raw_parts(cfg.cast::<u8>(), size) };
    if let Some(at) = bytes.iter().skip(known).position(|&b| b != 0) {
        return Err(Failure::invalid(format!(
            "struct tm_config byte {} is set, but this library (version {}) knows only the first {known} bytes",
            known + at,
            env!("CARGO_PKG_VERSION")
        )));
    }
    let mut local = tm_config::zeroed();
    // SAFETY: `bytes` holds at least min(size, known) bytes; `local` is a
    // distinct, writable tm_config of `known` bytes; every bit pattern of
    // the copied integer fields is valid and a pointer field copied from a
    // valid C struct is a valid raw pointer value.
    unsafe {
        ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            ptr::addr_of_mut!(local).cast::<u8>(),
            size.min(known),
        );
    }
    Ok(local)
}

/// Builds a core configuration from a checked C config.
///
/// # Safety
/// `c.far_path` is NULL or points to a NUL-terminated string.
unsafe fn config_from_c(c: &tm_config) -> Result<Config, Failure> {
    if c.reserved0 != 0 || c.reserved1 != 0 || c.reserved2 != 0 {
        return Err(Failure::invalid(
            "reserved fields of struct tm_config must be 0 (use tm_config_init)",
        ));
    }
    let mut config = Config::new(c.virt_bytes, c.near_bytes);
    config.page_size = match c.page_size_bytes {
        TM_PAGE_THP => PageSize::Thp2M,
        b => PageSize::from_bytes(b).ok_or_else(|| {
            Failure::invalid(format!(
                "page_size_bytes = {b}: expected 4096, 2097152 or TM_PAGE_THP"
            ))
        })?,
    };
    let direct = flag("far_direct", c.far_direct)?;
    config.far = match c.far_kind {
        TM_FAR_MEMORY => {
            // A path or O_DIRECT with the memory store means the caller
            // forgot far_kind: say so rather than ignore the setting.
            if !c.far_path.is_null() || direct {
                return Err(Failure::invalid(
                    "far_path or far_direct is set but far_kind is TM_FAR_MEMORY (set far_kind = TM_FAR_FILE)",
                ));
            }
            FarStoreConfig::Memory
        }
        TM_FAR_FILE => {
            if c.far_path.is_null() {
                return Err(Failure::invalid("far_kind is TM_FAR_FILE but far_path is NULL"));
            }
            // SAFETY: non-NULL and NUL-terminated by the caller's contract;
            // the bytes are copied into the PathBuf before we return.
            let raw = unsafe { CStr::from_ptr(c.far_path) };
            // Paths are bytes on Linux: no UTF-8 requirement.
            let path = PathBuf::from(OsStr::from_bytes(raw.to_bytes()));
            FarStoreConfig::File { path, direct }
        }
        v => {
            return Err(Failure::invalid(format!(
                "far_kind = {v}: expected TM_FAR_MEMORY ({TM_FAR_MEMORY}) or TM_FAR_FILE ({TM_FAR_FILE})"
            )))
        }
    };
    config.policy = decode(
        "policy",
        c.policy,
        &[
            (TM_POLICY_FIFO, "TM_POLICY_FIFO", PolicyKind::Fifo),
            (TM_POLICY_CLOCK, "TM_POLICY_CLOCK", PolicyKind::Clock),
            (TM_POLICY_SCAN, "TM_POLICY_SCAN", PolicyKind::Scan),
        ],
    )?;
    config.fault_path = decode(
        "fault_path",
        c.fault_path,
        &[
            (TM_FAULT_IN_CONTEXT, "TM_FAULT_IN_CONTEXT", FaultPath::InContext),
            (
                TM_FAULT_HANDLER_THREAD,
                "TM_FAULT_HANDLER_THREAD",
                FaultPath::HandlerThread,
            ),
        ],
    )?;
    config.dirty_tracking = decode(
        "dirty_tracking",
        c.dirty_tracking,
        &[
            (TM_DIRTY_WP_FAULT, "TM_DIRTY_WP_FAULT", DirtyTracking::WpFault),
            (TM_DIRTY_WP_ASYNC, "TM_DIRTY_WP_ASYNC", DirtyTracking::WpAsync),
        ],
    )?;
    config.evict_batch_pages = c.evict_batch_pages as usize;
    config.handler_threads = c.handler_threads as usize;
    config.movers = c.movers as usize;
    config.prefetch = !flag("prefetch_off", c.prefetch_off)?;
    if c.prefetch_max_pages != 0 {
        config.prefetch_max_pages = c.prefetch_max_pages as usize;
    }
    config.install = decode(
        "install",
        c.install,
        &[
            (TM_INSTALL_COPY, "TM_INSTALL_COPY", InstallMethod::Copy),
            (TM_INSTALL_MOVE, "TM_INSTALL_MOVE", InstallMethod::Move),
        ],
    )?;
    if c.mover_cpu_count > 0 {
        if c.mover_cpus.is_null() {
            return Err(Failure::invalid("mover_cpu_count > 0 but mover_cpus is NULL"));
        }
        // SAFETY: non-NULL, and by the caller's contract valid for
        // mover_cpu_count reads; the values are copied out now.
        let cpus = unsafe { std::slice::from_raw_parts(c.mover_cpus, c.mover_cpu_count as usize) };
        config.mover_cpus = cpus
            .iter()
            .map(|&c| {
                usize::try_from(c).map_err(|_| Failure::invalid(format!("mover_cpus: {c} is not a CPU")))
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(config)
}

/// Decodes the C enum field `field`: `table` lists (value, name, meaning).
/// The error names every accepted value.
fn decode<T: Copy>(field: &str, v: c_int, table: &[(c_int, &str, T)]) -> Result<T, Failure> {
    if let Some(&(_, _, t)) = table.iter().find(|e| e.0 == v) {
        return Ok(t);
    }
    let names: Vec<String> = table
        .iter()
        .map(|(n, name, _)| {
            if name.is_empty() {
                n.to_string()
            } else {
                format!("{name} ({n})")
            }
        })
        .collect();
    let (last, rest) = names.split_last().expect("a non-empty table");
    Err(Failure::invalid(format!(
        "{field} = {v}: expected {} or {last}",
        rest.join(", ")
    )))
}

/// Decodes a 0/1 field.
fn flag(field: &str, v: c_int) -> Result<bool, Failure> {
    decode(field, v, &[(0, "", false), (1, "", true)])
}

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
    // fine.
    unsafe { r.as_ref() }
        .map(|h| &h.region)
        .ok_or_else(|| Failure::invalid("region handle is NULL"))
}

// ---------------------------------------------------------------------------
// Exported functions
// ---------------------------------------------------------------------------

/// `int tm_version(void)`: the library's version as
/// major * 10000 + minor * 100 + patch.
#[no_mangle]
pub extern "C" fn tm_version() -> c_int {
    // A constant cannot panic; the guard keeps the rule without exception.
    panic::catch_unwind(|| TIERMEM_VERSION).unwrap_or(TM_EINTERNAL)
}

/// `const char *tm_strerror(int code)`: a static description of a code
/// (`"success"` for 0, `"unknown error code"` for a value that is not one).
#[no_mangle]
pub extern "C" fn tm_strerror(code: c_int) -> *const c_char {
    panic::catch_unwind(|| strerror(code))
        .unwrap_or(c"internal error")
        .as_ptr()
}

fn strerror(code: c_int) -> &'static CStr {
    if code == TM_OK {
        c"success"
    } else {
        match ErrorCode::from_raw(code) {
            Some(ErrorCode::InvalidArgument) => c"invalid argument",
            Some(ErrorCode::OutOfMemory) => c"out of memory",
            Some(ErrorCode::Unsupported) => c"kernel feature missing",
            Some(ErrorCode::Io) => c"far store I/O error",
            Some(ErrorCode::NoSpace) => c"far store full",
            Some(ErrorCode::HugePages) => c"not enough huge pages",
            Some(ErrorCode::Permission) => c"permission denied",
            Some(ErrorCode::Internal) => c"internal error",
            Some(ErrorCode::WorkerFailed) => c"a team worker failed",
            None => c"unknown error code",
        }
    }
}

/// `const char *tm_last_error(void)`: the detailed message of the calling
/// thread's last failed call, `""` if none. The string belongs to the
/// thread and stays valid until its next tiermem call.
#[no_mangle]
pub extern "C" fn tm_last_error() -> *const c_char {
    // The pointer targets the CString's heap buffer, which lives until
    // set_last_error replaces it on this thread's next failure.
    panic::catch_unwind(|| {
        LAST_ERROR
            .try_with(|e| e.try_borrow().map(|s| s.as_ptr()).ok())
            .ok()
            .flatten()
    })
    .ok()
    .flatten()
    .unwrap_or(c"".as_ptr())
}

/// `void tm_config_init(struct tm_config *cfg, uint64_t virt_bytes,
/// uint64_t near_bytes)`: fills `*cfg` with the defaults of
/// [`tiermem::Config::new`] and the two sizes. Does nothing for NULL
/// (and records the mistake for `tm_last_error`).
///
/// # Safety
/// `cfg` is NULL or points to a writable `struct tm_config` of this
/// version.
#[no_mangle]
pub unsafe extern "C" fn tm_config_init(cfg: *mut tm_config, virt_bytes: u64, near_bytes: u64) {
    let _ = call("tm_config_init", || {
        if cfg.is_null() {
            return Err(Failure::invalid("cfg is NULL"));
        }
        let c = tm_config::from_defaults(&Config::new(virt_bytes, near_bytes));
        // This writes the whole struct of this library's version. When the
        // struct grows, a program built against an older header would be
        // overrun: that version must add an init function taking the
        // caller's sizeof rather than grow what this one writes.
        // SAFETY: cfg is non-NULL and, by the caller's contract, points to
        // a writable, aligned struct tm_config; write does not read or drop
        // the old (possibly uninitialised) contents.
        unsafe { cfg.write(c) };
        Ok(())
    });
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
    status(call("tm_region_create", || {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        // SAFETY: out is non-NULL and writable (caller's contract).
        unsafe { out.write(ptr::null_mut()) };
        // SAFETY: forwarded caller's contract on cfg.
        let c = unsafe { read_config(cfg) }?;
        // SAFETY: far_path is NULL or NUL-terminated (caller's contract).
        let config = unsafe { config_from_c(&c) }?;
        let region = Region::new(config)?;
        let handle = Box::into_raw(Box::new(tm_region { region }));
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(())
    }))
}

/// `int tm_region_destroy(tm_region *r)`: unmaps the region and frees its
/// near memory and far store. NULL is a no-op returning 0.
///
/// # Safety
/// `r` is NULL or a live handle; no other thread uses it or its memory
/// during or after the call.
#[no_mangle]
pub unsafe extern "C" fn tm_region_destroy(r: *mut tm_region) -> c_int {
    if r.is_null() {
        return TM_OK;
    }
    status(call("tm_region_destroy", || {
        // SAFETY: r is a live handle from tm_region_create (a leaked Box)
        // that the caller gives up here, so we own it again.
        drop(unsafe { Box::from_raw(r) });
        Ok(())
    }))
}

/// `void *tm_region_base(const tm_region *r)`: the start of the region's
/// range, page aligned; NULL for a NULL handle.
///
/// # Safety
/// `r` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_region_base(r: *const tm_region) -> *mut c_void {
    call("tm_region_base", || {
        // SAFETY: forwarded caller's contract.
        let region = unsafe { region(r) }?;
        Ok(region.as_ptr().cast::<c_void>())
    })
    .unwrap_or(ptr::null_mut())
}

/// `size_t tm_region_size(const tm_region *r)`: the size of the range in
/// bytes; 0 for a NULL handle.
///
/// # Safety
/// `r` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_region_size(r: *const tm_region) -> usize {
    call("tm_region_size", || {
        // SAFETY: forwarded caller's contract.
        let region = unsafe { region(r) }?;
        Ok(region.len())
    })
    .unwrap_or(0)
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
    status(call("tm_region_stats", || {
        // SAFETY: forwarded caller's contract.
        let region = unsafe { region(r) }?;
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
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
    }))
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
    call("tm_region_evict_all", || {
        // SAFETY: forwarded caller's contract.
        let n = unsafe { region(r) }?.evict_all()?;
        Ok(c_int::try_from(n).unwrap_or(c_int::MAX))
    })
    .unwrap_or_else(|code| code)
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
    status(call("tm_region_discard", || {
        // SAFETY: forwarded caller's contract.
        unsafe { region(r) }?.discard(offset, len)?;
        Ok(())
    }))
}

/// `int tm_prefetch(const void *addr, size_t len)`: asks for the bytes to
/// be brought into near memory (queued to the region's movers, or done now
/// without movers). The range must lie in one tiermem region.
///
/// # Safety
/// None beyond the C contract: the address is looked up, never dereferenced.
#[no_mangle]
pub extern "C" fn tm_prefetch(addr: *const c_void, len: usize) -> c_int {
    status(call("tm_prefetch", || {
        tiermem::prefetch(addr as usize, len)?;
        Ok(())
    }))
}

/// `int tm_advise(const void *addr, size_t len, int advice)`: access advice
/// for a range of one tiermem region (`TM_ADVICE_*`).
#[no_mangle]
pub extern "C" fn tm_advise(addr: *const c_void, len: usize, advice: c_int) -> c_int {
    status(call("tm_advise", || {
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
    }))
}

/// `void *tm_malloc_global(size_t size)`: `size` bytes of tiered memory
/// from the process-wide region (created at first use from the `TIERMEM_*`
/// variables), 64-byte aligned, page aligned from one page up; NULL on
/// failure with the detail in `tm_last_error`.
#[no_mangle]
pub extern "C" fn tm_malloc_global(size: usize) -> *mut c_void {
    call("tm_malloc_global", || Ok(tiermem::global::malloc_global(size)?))
        .map_or(ptr::null_mut(), |addr| addr as *mut c_void)
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
    if ptr.is_null() {
        return TM_OK;
    }
    status(call("tm_free_global", || {
        tiermem::global::free_global(ptr as usize)?;
        Ok(())
    }))
}

// ---------------------------------------------------------------------------
// Far memory and Overshadow (paper 2)
// ---------------------------------------------------------------------------

/// Far allocations handed out to C, by address.
static FARS: Mutex<BTreeMap<usize, FarMemory>> = Mutex::new(BTreeMap::new());
/// Overshadows handed out to C, by `to`. An `Arc` so that `wait` does not
/// hold the lock.
static OVERSHADOWS: Mutex<BTreeMap<usize, Arc<Overshadow>>> = Mutex::new(BTreeMap::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn keep_far(f: FarMemory) -> *mut c_void {
    let p = f.as_ptr().cast::<c_void>();
    lock(&FARS).insert(p as usize, f);
    p
}

/// `void *tm_far_alloc(size_t size)`: `size` bytes (rounded up to pages)
/// of zeroed far memory that tiermem can overshadow; NULL on failure.
#[no_mangle]
pub extern "C" fn tm_far_alloc(size: usize) -> *mut c_void {
    call("tm_far_alloc", || Ok(keep_far(FarMemory::alloc(size)?))).unwrap_or(ptr::null_mut())
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
    status(call("tm_far_map_file", || {
        if path.is_null() || out.is_null() {
            return Err(Failure::invalid("path and out must not be NULL"));
        }
        // SAFETY: caller's contract: out is writable.
        unsafe { *out = ptr::null_mut() };
        // SAFETY: caller's contract: a NUL-terminated string.
        let path = PathBuf::from(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()));
        let f = FarMemory::map_file(&path, offset, len, writable != 0)?;
        // SAFETY: as above.
        unsafe { *out = keep_far(f) };
        Ok(())
    }))
}

/// `int tm_far_free(void *ptr)`: frees far memory from `tm_far_alloc` or
/// unmaps a `tm_far_map_file` range. Overshadows of it stay valid. NULL is
/// a no-op; any other pointer is `TM_EINVAL`.
#[no_mangle]
pub extern "C" fn tm_far_free(p: *mut c_void) -> c_int {
    if p.is_null() {
        return TM_OK;
    }
    status(call("tm_far_free", || {
        // Taken out under the lock, dropped after it.
        let f = lock(&FARS).remove(&(p as usize));
        f.map(drop).ok_or_else(|| {
            Failure::invalid(format!(
                "{p:p} was not returned by tm_far_alloc or tm_far_map_file (or was freed already)"
            ))
        })
    }))
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
    status(call(func, || {
        if to.is_null() {
            return Err(Failure::invalid("to must not be NULL"));
        }
        // SAFETY: caller's contract: to is writable.
        unsafe { *to = ptr::null_mut() };
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
        lock(&OVERSHADOWS).insert(p as usize, Arc::new(os));
        // SAFETY: as above.
        unsafe { *to = p };
        Ok(())
    }))
}

fn unknown_to(to: *mut c_void) -> Failure {
    Failure::invalid(format!(
        "{to:p} is not the `to` of a live overshadow (destroyed already, or never created)"
    ))
}

fn overshadow_of(to: *mut c_void) -> Result<Arc<Overshadow>, Failure> {
    let os = lock(&OVERSHADOWS).get(&(to as usize)).cloned();
    os.ok_or_else(|| unknown_to(to))
}

/// `int tm_overshadow_wait(void *to)`: waits until every page is near.
#[no_mangle]
pub extern "C" fn tm_overshadow_wait(to: *mut c_void) -> c_int {
    status(call("tm_overshadow_wait", || Ok(overshadow_of(to)?.wait()?)))
}

/// `int tm_overshadow_test(void *to)`: 1 if every page is near (or the copy
/// failed: `tm_overshadow_wait` says how), 0 while copying; never blocks.
#[no_mangle]
pub extern "C" fn tm_overshadow_test(to: *mut c_void) -> c_int {
    call("tm_overshadow_test", || {
        Ok(c_int::from(overshadow_of(to)?.test()))
    })
    .unwrap_or_else(|c| c)
}

/// `int tm_overshadow_destroy(void *to)`: ends an overshadow at any time
/// (a copy in progress stops after its current chunk) and unmaps `to`.
#[no_mangle]
pub extern "C" fn tm_overshadow_destroy(to: *mut c_void) -> c_int {
    status(call("tm_overshadow_destroy", || {
        // Taken out under the lock, destroyed after it (destroy waits for
        // the mover's current chunk).
        let os = lock(&OVERSHADOWS).remove(&(to as usize));
        os.map(drop).ok_or_else(|| unknown_to(to))
    }))
}

// ---------------------------------------------------------------------------
// Segments and huge page pools
// ---------------------------------------------------------------------------

/// `tm_segment`: a segment (opaque to C).
#[allow(non_camel_case_types)]
pub struct tm_segment {
    segment: Segment,
}

/// `int tm_segment_create(size_t bytes, int flags, tm_segment **out)`: a
/// populated, locked range on 1 GiB pages (or 2 MiB: `TM_SEGMENT_2M`, or
/// the fallback unless `TM_SEGMENT_NO_FALLBACK`).
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_create(bytes: usize, flags: c_int, out: *mut *mut tm_segment) -> c_int {
    status(call("tm_segment_create", || {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        // SAFETY: out is non-NULL and writable (caller's contract).
        unsafe { out.write(ptr::null_mut()) };
        if flags & !(TM_SEGMENT_2M | TM_SEGMENT_NO_FALLBACK) != 0 {
            return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
        }
        let mut config = SegmentConfig::new(bytes);
        if flags & TM_SEGMENT_2M != 0 {
            config.page = HugePageSize::Size2M;
        }
        config.fallback = flags & TM_SEGMENT_NO_FALLBACK == 0;
        let segment = Segment::with_config(&config)?;
        let handle = Box::into_raw(Box::new(tm_segment { segment }));
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(())
    }))
}

/// The segment behind a handle, or `TM_EINVAL` for NULL.
///
/// # Safety
/// `s` is NULL or a live handle from [`tm_segment_create`].
unsafe fn segment<'a>(s: *const tm_segment) -> Result<&'a Segment, Failure> {
    // SAFETY: a non-NULL s is a live handle (caller's contract), a leaked
    // Box valid until tm_segment_destroy; it is only read here.
    unsafe { s.as_ref() }
        .map(|h| &h.segment)
        .ok_or_else(|| Failure::invalid("segment handle is NULL"))
}

/// `void *tm_segment_base(const tm_segment *s)`; NULL for NULL.
///
/// # Safety
/// `s` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_base(s: *const tm_segment) -> *mut c_void {
    // SAFETY: forwarded caller's contract.
    call("tm_segment_base", || Ok(unsafe { segment(s) }?.as_ptr().cast())).unwrap_or(ptr::null_mut())
}

/// `size_t tm_segment_size(const tm_segment *s)`; 0 for NULL.
///
/// # Safety
/// `s` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_size(s: *const tm_segment) -> usize {
    // SAFETY: forwarded caller's contract.
    call("tm_segment_size", || Ok(unsafe { segment(s) }?.len())).unwrap_or(0)
}

/// `size_t tm_segment_page_size(const tm_segment *s)`; 0 for NULL.
///
/// # Safety
/// `s` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_page_size(s: *const tm_segment) -> usize {
    call("tm_segment_page_size", || {
        // SAFETY: forwarded caller's contract.
        Ok(unsafe { segment(s) }?.page_size().bytes())
    })
    .unwrap_or(0)
}

/// `int tm_segment_destroy(tm_segment *s)`: unmaps it. NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a live handle that no one uses during or after the call.
#[no_mangle]
pub unsafe extern "C" fn tm_segment_destroy(s: *mut tm_segment) -> c_int {
    if s.is_null() {
        return TM_OK;
    }
    status(call("tm_segment_destroy", || {
        // SAFETY: a live handle (a leaked Box) the caller gives up here.
        drop(unsafe { Box::from_raw(s) });
        Ok(())
    }))
}

/// `int tm_hugepages_reserve(size_t page_size, uint64_t pages, uint64_t
/// *available)`: grows a pool so that `pages` pages are available.
///
/// # Safety
/// `available` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_hugepages_reserve(page_size: usize, pages: u64, available: *mut u64) -> c_int {
    status(call("tm_hugepages_reserve", || {
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
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;
    use tiermem_sys::hugetlb::{self, HugePageSize};

    const PAGE: u64 = 4096;

    fn last_error() -> String {
        // SAFETY: tm_last_error returns a valid NUL-terminated string that
        // lives until this thread's next tiermem call; we copy it at once.
        unsafe { CStr::from_ptr(tm_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    fn config(virt: u64, near: u64) -> tm_config {
        let mut c = MaybeUninit::<tm_config>::uninit();
        // SAFETY: c is a writable tm_config of this version.
        unsafe { tm_config_init(c.as_mut_ptr(), virt, near) };
        // SAFETY: tm_config_init wrote every field.
        unsafe { c.assume_init() }
    }

    /// Creates a region, returning the code and the handle.
    fn create(c: &tm_config) -> (c_int, *mut tm_region) {
        let mut r: *mut tm_region = ptr::dangling_mut();
        // SAFETY: c is an initialised tm_config whose far_path (if any)
        // outlives the call; r is writable.
        let rc = unsafe { tm_region_create(c, &mut r) };
        (rc, r)
    }

    /// Expects creation to fail with `code` and a message containing `what`.
    #[track_caller]
    fn expect_create_error(c: &tm_config, code: c_int, what: &str) {
        let (rc, r) = create(c);
        assert_eq!(rc, code, "{}", last_error());
        assert!(r.is_null(), "*out must be NULL after a failure");
        let msg = last_error();
        assert!(msg.starts_with("tm_region_create: "), "{msg}");
        assert!(msg.contains(what), "{msg:?} should mention {what:?}");
    }

    fn stats(r: *const tm_region) -> tm_stats {
        let mut s = tm_stats {
            struct_size: size_of::<tm_stats>() as u32,
            ..tm_stats::default()
        };
        // SAFETY: r is a live handle; s is a full tm_stats.
        assert_eq!(unsafe { tm_region_stats(r, &mut s) }, TM_OK, "{}", last_error());
        s
    }

    #[test]
    fn config_init_gives_core_defaults() {
        let c = config(1 << 30, 1 << 28);
        let d = Config::new(1 << 30, 1 << 28);
        assert_eq!(c.struct_size as usize, size_of::<tm_config>());
        assert_eq!((c.virt_bytes, c.near_bytes), (1 << 30, 1 << 28));
        assert_eq!(c.page_size_bytes, 4096);
        assert_eq!(c.far_kind, TM_FAR_MEMORY);
        assert!(c.far_path.is_null());
        assert_eq!(c.far_direct, 0);
        assert_eq!(c.policy, TM_POLICY_FIFO);
        assert_eq!(c.fault_path, TM_FAULT_IN_CONTEXT);
        assert_eq!(c.dirty_tracking, TM_DIRTY_WP_FAULT);
        assert_eq!(c.evict_batch_pages as usize, d.evict_batch_pages);
        assert_eq!(c.handler_threads as usize, d.handler_threads);
        // SAFETY: c is initialised; far_path is NULL.
        assert_eq!(unsafe { config_from_c(&c) }.unwrap(), d, "round trip");
        // NULL is refused without a crash.
        // SAFETY: NULL is allowed.
        unsafe { tm_config_init(ptr::null_mut(), 1, 1) };
        assert!(last_error().contains("cfg is NULL"));
    }

    #[test]
    fn create_write_through_evictions_and_destroy() {
        let (virt, near) = (8u64 << 20, 2u64 << 20);
        let (rc, r) = create(&config(virt, near));
        assert_eq!(rc, TM_OK, "{}", last_error());
        // SAFETY: r is live.
        let (base, size) = unsafe { (tm_region_base(r), tm_region_size(r)) };
        assert!(!base.is_null());
        assert_eq!(base as usize % PAGE as usize, 0);
        assert_eq!(size as u64, virt);
        let words = size / 8;
        let p = base.cast::<u64>();
        for i in 0..words {
            // SAFETY: i < words, inside the region's range, which the
            // region keeps mapped until destroy; faults are served.
            unsafe { p.add(i).write_volatile(i as u64 ^ 0xa5a5) };
        }
        for i in 0..words {
            // SAFETY: as above.
            assert_eq!(unsafe { p.add(i).read_volatile() }, i as u64 ^ 0xa5a5, "word {i}");
        }
        let s = stats(r);
        assert_eq!(s.struct_size as usize, size_of::<tm_stats>());
        assert_eq!(s.faults_zero_fill, virt / PAGE);
        assert!(s.evictions > 0 && s.evict_calls > 0 && s.write_backs > 0);
        assert!(s.faults_far_fill > 0 && s.bytes_in > 0 && s.bytes_out > 0);
        assert!(s.resident_bytes <= near);
        assert!(s.threads >= 1);
        assert!(s.fault_p50_ns <= s.fault_p90_ns && s.fault_p90_ns <= s.fault_p99_ns);
        let split = s.time_lock_list_ns + s.time_pte_ns + s.time_tlb_ns + s.time_transfer_ns + s.time_misc_ns;
        assert!(split >= s.fault_ns_total, "costs cover fault time: {s:?}");

        // SAFETY: r is live.
        let n = unsafe { tm_region_evict_all(r) };
        assert!(n > 0, "{n}: {}", last_error());
        assert_eq!(stats(r).resident_bytes, 0);
        // SAFETY: r is live; the first page is inside the range.
        assert_eq!(unsafe { tm_region_discard(r, 0, PAGE as usize) }, TM_OK);
        // SAFETY: as above.
        assert_eq!(unsafe { p.read_volatile() }, 0, "discarded pages read as zero");
        // SAFETY: as above.
        let last = unsafe { p.add(words - 1).read_volatile() };
        assert_eq!(last, (words as u64 - 1) ^ 0xa5a5);
        // SAFETY: r is live; the arguments are checked.
        assert_eq!(unsafe { tm_region_discard(r, 1, PAGE as usize) }, TM_EINVAL);
        assert!(last_error().contains("page aligned"));

        // SAFETY: r is live and not used afterwards.
        assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
        // SAFETY: NULL is a no-op.
        assert_eq!(unsafe { tm_region_destroy(ptr::null_mut()) }, TM_OK);
    }

    #[test]
    fn handler_thread_and_wp_async_configs_work() {
        for (fp, dt) in [
            (TM_FAULT_HANDLER_THREAD, TM_DIRTY_WP_FAULT),
            (TM_FAULT_IN_CONTEXT, TM_DIRTY_WP_ASYNC),
        ] {
            let mut c = config(1 << 20, 64 << 10);
            c.fault_path = fp;
            c.dirty_tracking = dt;
            c.evict_batch_pages = 4;
            let (rc, r) = create(&c);
            if rc == TM_EUNSUPPORTED {
                eprintln!("skipping {fp}/{dt}: {}", last_error());
                continue;
            }
            assert_eq!(rc, TM_OK, "{}", last_error());
            // SAFETY: r is live; every byte of the range is written and read
            // through the mapping the region keeps.
            unsafe {
                let p = tm_region_base(r).cast::<u8>();
                let n = tm_region_size(r);
                for i in (0..n).step_by(512) {
                    p.add(i).write_volatile((i / 512) as u8);
                }
                for i in (0..n).step_by(512) {
                    assert_eq!(p.add(i).read_volatile(), (i / 512) as u8);
                }
            }
            assert!(stats(r).evictions > 0);
            // SAFETY: r is live and not used afterwards.
            assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
        }
    }

    #[test]
    fn bad_configs_give_einval_with_a_message() {
        expect_create_error(&config(0, 1 << 20), TM_EINVAL, "virt_bytes must not be zero");
        expect_create_error(
            &config(PAGE + 1, 1 << 20),
            TM_EINVAL,
            "not a multiple of the page size",
        );
        expect_create_error(&config(1 << 20, 3 * PAGE), TM_EINVAL, "minimum");
        expect_create_error(&config(1 << 20, 0), TM_EINVAL, "near_bytes must not be zero");

        let mut c = config(1 << 20, 1 << 20);
        c.page_size_bytes = 8192;
        expect_create_error(&c, TM_EINVAL, "page_size_bytes = 8192");
        let mut c = config(1 << 20, 1 << 20);
        c.far_kind = 7;
        expect_create_error(&c, TM_EINVAL, "far_kind = 7");
        let mut c = config(1 << 20, 1 << 20);
        c.policy = -1;
        expect_create_error(&c, TM_EINVAL, "policy = -1");
        let mut c = config(1 << 20, 1 << 20);
        c.fault_path = 2;
        expect_create_error(&c, TM_EINVAL, "fault_path = 2");
        let mut c = config(1 << 20, 1 << 20);
        c.dirty_tracking = 9;
        expect_create_error(&c, TM_EINVAL, "dirty_tracking = 9");
        let mut c = config(1 << 20, 1 << 20);
        c.evict_batch_pages = 0;
        expect_create_error(&c, TM_EINVAL, "evict_batch_pages");
        let mut c = config(1 << 20, 1 << 20);
        c.far_direct = 2;
        expect_create_error(&c, TM_EINVAL, "far_direct = 2");
        let mut c = config(1 << 20, 1 << 20);
        c.far_direct = 1;
        expect_create_error(&c, TM_EINVAL, "TM_FAR_MEMORY");
        let mut c = config(1 << 20, 1 << 20);
        c.far_kind = TM_FAR_FILE;
        expect_create_error(&c, TM_EINVAL, "far_path is NULL");
        let mut c = config(1 << 20, 1 << 20);
        c.reserved1 = 1;
        expect_create_error(&c, TM_EINVAL, "reserved");
        let mut c = config(1 << 20, 1 << 20);
        c.struct_size = 16;
        expect_create_error(&c, TM_EINVAL, "struct_size = 16");
        let mut c = config(1 << 20, 1 << 20);
        c.struct_size = 1 << 20;
        expect_create_error(&c, TM_EINVAL, "implausibly large");
    }

    #[test]
    fn larger_struct_from_a_newer_caller() {
        #[repr(C)]
        struct Newer {
            base: tm_config,
            extra: u64,
        }
        let mut n = Newer {
            base: config(1 << 20, 1 << 20),
            extra: 0,
        };
        n.base.struct_size = size_of::<Newer>() as u32;
        let (rc, r) = create(&n.base);
        assert_eq!(rc, TM_OK, "zeroed unknown fields are accepted: {}", last_error());
        // SAFETY: r is live and not used afterwards.
        assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
        n.extra = 1;
        expect_create_error(
            &n.base,
            TM_EINVAL,
            &format!("byte {} is set", size_of::<tm_config>()),
        );
    }

    #[test]
    fn null_pointers_give_einval() {
        let mut r: *mut tm_region = ptr::null_mut();
        // SAFETY: NULL cfg is allowed; r is writable.
        assert_eq!(unsafe { tm_region_create(ptr::null(), &mut r) }, TM_EINVAL);
        assert_eq!(last_error(), "tm_region_create: cfg is NULL");
        let c = config(1 << 20, 1 << 20);
        // SAFETY: NULL out is allowed.
        assert_eq!(unsafe { tm_region_create(&c, ptr::null_mut()) }, TM_EINVAL);
        assert_eq!(last_error(), "tm_region_create: out is NULL");
        // SAFETY: NULL handles are allowed everywhere.
        unsafe {
            assert!(tm_region_base(ptr::null()).is_null());
            assert_eq!(tm_region_size(ptr::null()), 0);
            assert!(last_error().contains("NULL"));
            let mut s = tm_stats {
                struct_size: size_of::<tm_stats>() as u32,
                ..Default::default()
            };
            assert_eq!(tm_region_stats(ptr::null(), &mut s), TM_EINVAL);
            assert_eq!(tm_region_evict_all(ptr::null_mut()), TM_EINVAL);
            assert_eq!(tm_region_discard(ptr::null_mut(), 0, 0), TM_EINVAL);
        }
        let (rc, r) = create(&c);
        assert_eq!(rc, TM_OK);
        // SAFETY: r is live; NULL out is allowed.
        assert_eq!(unsafe { tm_region_stats(r, ptr::null_mut()) }, TM_EINVAL);
        let mut s = tm_stats::default();
        // SAFETY: as above; struct_size 0 is refused before any write.
        assert_eq!(unsafe { tm_region_stats(r, &mut s) }, TM_EINVAL);
        assert!(last_error().contains("sizeof(struct tm_stats)"));
        // SAFETY: r is live and not used afterwards.
        assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
    }

    #[test]
    fn stats_fill_what_fits() {
        let (rc, r) = create(&config(1 << 20, 1 << 20));
        assert_eq!(rc, TM_OK);
        // SAFETY: r is live; the first word is inside the range.
        unsafe { tm_region_base(r).cast::<u64>().write_volatile(1) };
        // An older, shorter struct: the header and the first two counters.
        let mut short = [u64::MAX; 3];
        short[0] = 24; // struct_size = 24, reserved0 = 0 (little endian)
                       // SAFETY: `short` is 24 writable bytes, aligned for tm_stats.
        assert_eq!(unsafe { tm_region_stats(r, short.as_mut_ptr().cast()) }, TM_OK);
        assert_eq!(short, [24, 1, 0]);
        // A newer, longer struct: unknown tail zeroed.
        let mut long = [u64::MAX; 30];
        long[0] = 240;
        // SAFETY: `long` is 240 writable bytes, aligned for tm_stats.
        assert_eq!(unsafe { tm_region_stats(r, long.as_mut_ptr().cast()) }, TM_OK);
        assert_eq!(long[0], 240, "struct_size is not written");
        assert_eq!(long[1], 1, "one zero fill");
        assert!(long[23..].iter().all(|&w| w == 0), "{long:?}");
        let mut odd = [0u64; 3];
        odd[0] = 20;
        // SAFETY: as above; a size that is not a multiple of 8 is refused.
        assert_eq!(unsafe { tm_region_stats(r, odd.as_mut_ptr().cast()) }, TM_EINVAL);
        // SAFETY: r is live and not used afterwards.
        assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
    }

    #[test]
    fn far_files_take_any_bytes_and_missing_directories_fail() {
        let missing = c"/nonexistent-tiermem-dir-\xff/far";
        let mut c = config(1 << 20, 1 << 19);
        c.far_kind = TM_FAR_FILE;
        c.far_path = missing.as_ptr();
        expect_create_error(&c, TM_EINVAL, "directory does not exist");

        // A file name that is not UTF-8, in a directory that exists.
        let dir = std::env::temp_dir();
        let mut name = dir.as_os_str().as_bytes().to_vec();
        name.extend_from_slice(b"/tiermem-capi-\xe9\xff-");
        name.extend_from_slice(std::process::id().to_string().as_bytes());
        let path = CString::new(name.clone()).unwrap();
        c.far_path = path.as_ptr();
        let (rc, r) = create(&c);
        assert_eq!(rc, TM_OK, "{}", last_error());
        let file = PathBuf::from(OsStr::from_bytes(&name));
        assert!(file.exists(), "the far file is created under its exact name");
        // SAFETY: r is live.
        unsafe {
            let p = tm_region_base(r).cast::<u8>();
            for i in (0..tm_region_size(r)).step_by(PAGE as usize) {
                p.add(i).write_volatile(3);
            }
        }
        assert!(stats(r).bytes_out > 0, "pages went to the file");
        // SAFETY: r is live and not used afterwards.
        assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
        assert!(!file.exists(), "the far file goes with the region");
    }

    #[test]
    fn huge_pages_beyond_the_pool_give_ehugepages() {
        let available = hugetlb::pool(HugePageSize::Size2M).map_or(0, |p| p.available());
        let huge = 2u64 << 20;
        let near = (available + 4) * huge;
        let mut c = config(2 * near, near);
        c.page_size_bytes = huge;
        expect_create_error(&c, TM_EHUGEPAGES, "nr_hugepages");
    }

    #[test]
    fn error_strings() {
        assert_eq!(tm_strerror_str(TM_OK), "success");
        for code in TM_EWORKER..=TM_EINVAL {
            let e = ErrorCode::from_raw(code).unwrap();
            assert_eq!(tm_strerror_str(code), e.message(), "code {code}");
        }
        assert_eq!(tm_strerror_str(1), "unknown error code");
        assert_eq!(tm_strerror_str(-10), "unknown error code");
        // A fresh thread has no error yet.
        std::thread::spawn(|| assert_eq!(last_error(), ""))
            .join()
            .unwrap();
    }

    fn tm_strerror_str(code: c_int) -> String {
        // SAFETY: tm_strerror always returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(tm_strerror(code)) }
            .to_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn panics_become_einternal() {
        let r: Result<(), c_int> = call("tm_test", || panic!("boom {}", 42));
        assert_eq!(r, Err(TM_EINTERNAL));
        let msg = last_error();
        assert!(
            msg.starts_with("tm_test: internal error (panic: boom 42)"),
            "{msg}"
        );
        let r: Result<(), c_int> = call("tm_test", || std::panic::panic_any(7u8));
        assert_eq!(r, Err(TM_EINTERNAL));
        assert!(last_error().contains("(no message)"));
        // A NUL inside a message does not truncate or lose it.
        let r: Result<(), c_int> = call("tm_test", || Err(Failure::invalid("a\0b")));
        assert_eq!(r, Err(TM_EINVAL));
        assert_eq!(last_error(), "tm_test: a\\0b");
    }

    /// The only test that touches the process-wide region: it sets the
    /// environment before the first use.
    #[test]
    fn global_malloc_and_free() {
        std::env::set_var("TIERMEM_FAR", "16M");
        std::env::set_var("TIERMEM_NEAR", "4M");
        // SAFETY: NULL is a no-op.
        assert_eq!(unsafe { tm_free_global(ptr::null_mut()) }, TM_OK);
        let n = 8 << 20;
        let p = tm_malloc_global(n).cast::<u8>();
        assert!(!p.is_null(), "{}", last_error());
        assert_eq!(p as usize % PAGE as usize, 0);
        for i in (0..n).step_by(1000) {
            // SAFETY: i < n, inside the allocation.
            unsafe { p.add(i).write_volatile(i as u8) };
        }
        for i in (0..n).step_by(1000) {
            // SAFETY: as above.
            assert_eq!(unsafe { p.add(i).read_volatile() }, i as u8);
        }
        assert!(
            tm_malloc_global(12 << 20).is_null(),
            "TIERMEM_FAR=16M was applied"
        );
        assert!(last_error().contains("no free range"), "{}", last_error());
        let small = tm_malloc_global(10);
        assert!(!small.is_null());
        let mut local = 0u64;
        // SAFETY: the pointer is checked, never dereferenced.
        let rc = unsafe { tm_free_global(ptr::addr_of_mut!(local).cast()) };
        assert_eq!(rc, TM_EINVAL);
        assert!(
            last_error().contains("not in the global region"),
            "{}",
            last_error()
        );
        // SAFETY: both came from tm_malloc_global and are not used again.
        unsafe {
            assert_eq!(tm_free_global(small), TM_OK);
            assert_eq!(tm_free_global(p.cast()), TM_OK);
            assert_eq!(tm_free_global(p.cast()), TM_EINVAL, "double free is detected");
        }
        assert!(last_error().contains("not allocated by tm_malloc_global"));
    }

    #[test]
    fn overshadow_through_the_c_api() {
        let far = tm_far_alloc(3 * PAGE as usize);
        assert!(!far.is_null(), "{}", last_error());
        let words = far.cast::<u64>();
        // SAFETY: far maps 3 pages read-write.
        unsafe { words.add(700).write(77) };
        let mut to: *mut c_void = ptr::null_mut();
        // SAFETY: to is writable.
        let rc = unsafe { tm_overshadow_create(far, 3 * PAGE as usize, &mut to) };
        assert_eq!(rc, TM_OK);
        // SAFETY: to maps 3 pages, readable at once; a write waits.
        unsafe {
            assert_eq!(to.cast::<u64>().add(700).read_volatile(), 77);
            to.cast::<u64>().add(1).write_volatile(5);
        }
        assert_eq!(tm_overshadow_wait(to), TM_OK);
        assert_eq!(tm_overshadow_test(to), 1);
        // SAFETY: as above; from is unchanged by writes to `to`.
        unsafe {
            assert_eq!(to.cast::<u64>().add(1).read_volatile(), 5);
            assert_eq!(words.add(1).read(), 0);
        }
        assert_eq!(tm_overshadow_destroy(to), TM_OK);
        assert_eq!(tm_overshadow_destroy(to), TM_EINVAL, "double destroy");
        assert!(last_error().contains("not the `to` of a live overshadow"));
        assert_eq!(tm_overshadow_test(to), TM_EINVAL);
        assert_eq!(tm_overshadow_wait(ptr::null_mut()), TM_EINVAL);
        // SAFETY: NULL out pointer is refused before any write.
        let rc = unsafe { tm_overshadow_create(far, 4096, ptr::null_mut()) };
        assert_eq!(rc, TM_EINVAL);
        // SAFETY: to is writable.
        unsafe {
            assert_eq!(tm_overshadow_create_ex(far, 4096, 9, &mut to), TM_EINVAL);
            assert!(to.is_null());
            assert_eq!(tm_overshadow_create(far, 0, &mut to), TM_EINVAL);
            assert_eq!(
                tm_overshadow_create(far.cast::<u8>().add(1).cast(), 4096, &mut to),
                TM_EINVAL
            );
            let stack = [0u8; 8];
            let page = (stack.as_ptr() as usize & !4095) as *const c_void;
            assert_eq!(tm_overshadow_create(page, 4096, &mut to), TM_EINVAL);
            assert!(last_error().contains("not far memory"));
        }
        assert_eq!(tm_far_free(far), TM_OK);
        assert_eq!(tm_far_free(far), TM_EINVAL, "double free");
        assert_eq!(tm_far_free(ptr::null_mut()), TM_OK);
        let mut out: *mut c_void = ptr::dangling_mut();
        let path = CString::new("/nonexistent/far").unwrap();
        // SAFETY: valid string and out pointer.
        let rc = unsafe { tm_far_map_file(path.as_ptr(), 0, 4096, 0, &mut out) };
        assert_eq!(rc, TM_EINVAL);
        assert!(out.is_null());
    }

    /// The header and this crate must agree on every number and on the
    /// layout of both structs.
    #[test]
    fn header_matches_the_abi() {
        let header = include_str!("../../../include/tiermem.h");
        let mut defines = std::collections::HashMap::new();
        for line in header.lines() {
            let mut it = line.split_whitespace();
            if it.next() != Some("#define") {
                continue;
            }
            let (Some(name), Some(value)) = (it.next(), it.next()) else {
                continue;
            };
            if let Ok(v) = value.trim_matches(['(', ')']).parse::<i64>() {
                defines.insert(name.to_owned(), v);
            }
        }
        let expected: &[(&str, c_int)] = &[
            ("TIERMEM_VERSION_MAJOR", TIERMEM_VERSION_MAJOR),
            ("TIERMEM_VERSION_MINOR", TIERMEM_VERSION_MINOR),
            ("TIERMEM_VERSION_PATCH", TIERMEM_VERSION_PATCH),
            ("TM_OK", TM_OK),
            ("TM_EINVAL", TM_EINVAL),
            ("TM_ENOMEM", TM_ENOMEM),
            ("TM_EUNSUPPORTED", TM_EUNSUPPORTED),
            ("TM_EIO", TM_EIO),
            ("TM_ENOSPC", TM_ENOSPC),
            ("TM_EHUGEPAGES", TM_EHUGEPAGES),
            ("TM_EPERM", TM_EPERM),
            ("TM_EINTERNAL", TM_EINTERNAL),
            ("TM_FAR_MEMORY", TM_FAR_MEMORY),
            ("TM_FAR_FILE", TM_FAR_FILE),
            ("TM_POLICY_FIFO", TM_POLICY_FIFO),
            ("TM_POLICY_CLOCK", TM_POLICY_CLOCK),
            ("TM_POLICY_SCAN", TM_POLICY_SCAN),
            ("TM_INSTALL_COPY", TM_INSTALL_COPY),
            ("TM_INSTALL_MOVE", TM_INSTALL_MOVE),
            ("TM_SEGMENT_2M", TM_SEGMENT_2M),
            ("TM_SEGMENT_NO_FALLBACK", TM_SEGMENT_NO_FALLBACK),
            ("TM_ADVICE_NORMAL", TM_ADVICE_NORMAL),
            ("TM_ADVICE_SEQUENTIAL", TM_ADVICE_SEQUENTIAL),
            ("TM_ADVICE_RANDOM", TM_ADVICE_RANDOM),
            ("TM_ADVICE_WILLNEED", TM_ADVICE_WILLNEED),
            ("TM_ADVICE_DONTNEED", TM_ADVICE_DONTNEED),
            ("TM_FAULT_IN_CONTEXT", TM_FAULT_IN_CONTEXT),
            ("TM_FAULT_HANDLER_THREAD", TM_FAULT_HANDLER_THREAD),
            ("TM_DIRTY_WP_FAULT", TM_DIRTY_WP_FAULT),
            ("TM_DIRTY_WP_ASYNC", TM_DIRTY_WP_ASYNC),
            ("TM_EWORKER", TM_EWORKER),
            ("TM_TEAM_SHARER_AWARE", TM_TEAM_SHARER_AWARE),
            ("TM_TEAM_PIN", TM_TEAM_PIN),
            ("TM_TEAM_PROCESSES", TM_TEAM_PROCESSES),
            ("TM_TEAM_THREADS", TM_TEAM_THREADS),
            ("TM_OVERSHADOW_PER_PAGE", TM_OVERSHADOW_PER_PAGE),
            ("TM_OVERSHADOW_WHOLE", TM_OVERSHADOW_WHOLE),
            ("TM_SVM_NONCOHERENT", TM_SVM_NONCOHERENT),
            ("TM_SVM_PIN", TM_SVM_PIN),
            ("TM_SVM_SPM", TM_SVM_SPM),
            ("TM_SVM_DSM", TM_SVM_DSM),
        ];
        for (name, value) in expected {
            assert_eq!(defines.get(*name), Some(&i64::from(*value)), "{name}");
        }
        assert_eq!(defines.get("TM_PAGE_THP"), Some(&(TM_PAGE_THP as i64)));
        assert_eq!(
            defines.len(),
            expected.len() + 1,
            "numeric macros in the header without a Rust twin: {defines:?}"
        );
        assert_eq!(TIERMEM_VERSION, tm_version());
        assert_eq!(
            format!("{TIERMEM_VERSION_MAJOR}.{TIERMEM_VERSION_MINOR}.{TIERMEM_VERSION_PATCH}"),
            env!("CARGO_PKG_VERSION")
        );

        macro_rules! offsets {
            ($t:ty: $($f:ident),*) => { vec![$((stringify!($f), offset_of!($t, $f))),*] };
        }
        let config = offsets!(tm_config: struct_size, reserved0, virt_bytes, near_bytes,
            page_size_bytes, far_kind, reserved1, far_path, far_direct, policy, fault_path,
            dirty_tracking, evict_batch_pages, handler_threads, movers, prefetch_off,
            prefetch_max_pages, install, mover_cpus, mover_cpu_count, reserved2);
        let stats = offsets!(tm_stats: struct_size, reserved0, faults_zero_fill, faults_far_fill,
            faults_write_protect, evictions, evict_calls, write_backs, bytes_in, bytes_out,
            io_errors, poisoned_pages, resident_bytes, fault_ns_total, fault_p50_ns, fault_p90_ns,
            fault_p99_ns, time_lock_list_ns, time_pte_ns, time_tlb_ns, time_transfer_ns,
            time_misc_ns, threads, tlb_shootdowns_machine, prefetch_issued, prefetch_used,
            prefetch_wasted, mover_fills, mover_evictions, inline_evictions);
        assert_eq!(c_layout(header, "tm_config"), config);
        assert_eq!(c_layout(header, "tm_stats"), stats);
    }

    /// Field names and offsets of `struct NAME { ... };` in the header,
    /// laid out with natural alignment (the types used are all
    /// fixed-width or pointers).
    fn c_layout(header: &str, name: &str) -> Vec<(&'static str, usize)> {
        let start = header
            .find(&format!("struct {name} {{"))
            .expect("struct in header");
        let body = &header[start..];
        let mut body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
        // Drop the comments, then read one declaration per ';'.
        let mut code = String::new();
        while let Some(open) = body.find("/*") {
            code += &body[..open];
            body = &body[open + body[open..].find("*/").unwrap() + 2..];
        }
        code += body;
        let mut at = 0usize;
        let mut out = Vec::new();
        for decl in code.split(';').map(str::trim).filter(|d| !d.is_empty()) {
            let (ty, field) = decl.rsplit_once([' ', '*']).unwrap();
            let size = match ty.trim() {
                "uint32_t" | "int32_t" => 4,
                "uint64_t" => 8,
                "const char" | "const int32_t" => size_of::<*const c_char>(),
                other => panic!("unexpected type {other:?} in struct {name}"),
            };
            at = at.next_multiple_of(size);
            out.push((&*String::leak(field.to_owned()), at));
            at += size;
        }
        out
    }
}

// ---------------------------------------------------------------------------
// Team regions (partially separated page tables)
// ---------------------------------------------------------------------------

/// `tm_team_create` flag: sharer-aware replacement instead of FIFO.
pub const TM_TEAM_SHARER_AWARE: c_int = 1;
/// `tm_team_create` flag: pin worker `r` to CPU `r % online CPUs`.
pub const TM_TEAM_PIN: c_int = 2;
/// `tm_team_run` kind: workers are processes (a page table each).
pub const TM_TEAM_PROCESSES: c_int = 0;
/// `tm_team_run` kind: workers are threads of this process.
pub const TM_TEAM_THREADS: c_int = 1;

/// A team region (opaque).
#[allow(non_camel_case_types)]
pub struct tm_team {
    team: tiermem::team::TeamRegion,
}

/// A worker inside `tm_team_run` (opaque; valid during the callback).
#[allow(non_camel_case_types)]
pub struct tm_team_worker {
    worker: *const c_void,
}

/// A worker function: 0 for success, anything else fails the team.
#[allow(non_camel_case_types)]
pub type tm_team_fn = Option<unsafe extern "C" fn(w: *mut tm_team_worker, arg: *mut c_void) -> c_int>;

/// Team statistics, summed over all members.
#[repr(C)]
#[derive(Default)]
#[allow(non_camel_case_types)]
pub struct tm_team_stats {
    /// Fills (from far memory or zeros).
    pub missing_faults: u64,
    /// Near pages mapped for one more member.
    pub minor_faults: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Eviction runs (one unmap each).
    pub evict_calls: u64,
    /// Bytes read from far memory.
    pub bytes_in: u64,
    /// Bytes written to far memory.
    pub bytes_out: u64,
    /// Evicted pages no member mapped.
    pub victims_unmapped: u64,
    /// Evicted pages only the evicting member mapped.
    pub victims_self: u64,
    /// Evicted pages one other member mapped.
    pub victims_other: u64,
    /// Evicted pages several members mapped.
    pub victims_many: u64,
}

// The header's struct tm_team_stats: ten uint64_t.
const _: () = assert!(size_of::<tm_team_stats>() == 10 * 8);

fn team_flags(
    workers: c_int,
    flags: c_int,
    virt: usize,
    near: usize,
) -> Result<tiermem::team::TeamConfig, Failure> {
    if workers <= 0 {
        return Err(Failure::invalid(format!("{workers} workers")));
    }
    if flags & !(TM_TEAM_SHARER_AWARE | TM_TEAM_PIN) != 0 {
        return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
    }
    let mut cfg = tiermem::team::TeamConfig::new(virt, near, workers as usize);
    if flags & TM_TEAM_SHARER_AWARE != 0 {
        cfg.policy = tiermem::team::TeamPolicy::SharerAware;
    }
    if flags & TM_TEAM_PIN != 0 {
        cfg.cpus = (0..tiermem_sys::thread::online_cpus()).collect();
    }
    Ok(cfg)
}

fn new_team(
    out: *mut *mut tm_team,
    make: impl FnOnce() -> Result<tiermem::team::TeamRegion, Failure>,
) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid("out is NULL"));
    }
    // SAFETY: out is non-NULL and writable (caller's contract).
    unsafe { out.write(ptr::null_mut()) };
    let team = make()?;
    // SAFETY: as above.
    unsafe { out.write(Box::into_raw(Box::new(tm_team { team }))) };
    Ok(())
}

/// `int tm_team_create(size_t virt_bytes, size_t near_bytes, int workers,
/// int flags, tm_team **out)`: a team region for `workers` workers started
/// by `tm_team_run`; this process (the host) may use it too.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_team_create(
    virt_bytes: usize,
    near_bytes: usize,
    workers: c_int,
    flags: c_int,
    out: *mut *mut tm_team,
) -> c_int {
    status(call("tm_team_create", || {
        new_team(out, || {
            let cfg = team_flags(workers, flags, virt_bytes, near_bytes)?;
            Ok(tiermem::team::TeamRegion::new(cfg)?)
        })
    }))
}

fn name_arg<'a>(name: *const c_char) -> Result<&'a str, Failure> {
    if name.is_null() {
        return Err(Failure::invalid("name is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated (caller's contract).
    unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| Failure::invalid("name is not UTF-8"))
}

/// `int tm_team_create_named(const char *name, size_t virt_bytes, size_t
/// near_bytes, int ranks, int flags, tm_team **out)`: a named team region
/// of `ranks` ranks for processes that already exist (MPI ranks on one
/// node); the caller is rank 0, the others call `tm_team_attach`.
///
/// # Safety
/// `name` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_team_create_named(
    name: *const c_char,
    virt_bytes: usize,
    near_bytes: usize,
    ranks: c_int,
    flags: c_int,
    out: *mut *mut tm_team,
) -> c_int {
    status(call("tm_team_create_named", || {
        new_team(out, || {
            let name = name_arg(name)?;
            let cfg = team_flags(ranks, flags, virt_bytes, near_bytes)?;
            Ok(tiermem::team::TeamRegion::create_named(name, cfg)?)
        })
    }))
}

/// `int tm_team_attach(const char *name, int rank, tm_team **out)`.
///
/// # Safety
/// `name` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_team_attach(name: *const c_char, rank: c_int, out: *mut *mut tm_team) -> c_int {
    status(call("tm_team_attach", || {
        new_team(out, || {
            let name = name_arg(name)?;
            let rank = usize::try_from(rank).map_err(|_| Failure::invalid(format!("rank {rank}")))?;
            Ok(tiermem::team::TeamRegion::attach(name, rank)?)
        })
    }))
}

fn team_ref<'a>(t: *const tm_team) -> Result<&'a tm_team, Failure> {
    // SAFETY: NULL or a live handle (caller's contract).
    unsafe { t.as_ref() }.ok_or_else(|| Failure::invalid("team is NULL"))
}

/// `void *tm_team_base(const tm_team *t)`: the region's address (the same
/// in every member); NULL for NULL.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_team_base(t: *const tm_team) -> *mut c_void {
    call("tm_team_base", || Ok(team_ref(t)?.team.base() as *mut c_void)).unwrap_or(ptr::null_mut())
}

/// `size_t tm_team_size(const tm_team *t)`: bytes; 0 for NULL.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_team_size(t: *const tm_team) -> usize {
    call("tm_team_size", || Ok(team_ref(t)?.team.len())).unwrap_or(0)
}

/// `int tm_team_rank(const tm_team *t)`: this process's rank.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_team_rank(t: *const tm_team) -> c_int {
    call("tm_team_rank", || Ok(team_ref(t)?.team.rank() as c_int)).unwrap_or_else(|e| e)
}

/// `int tm_team_sync(tm_team *t)`: barrier among the ranks of a named
/// team; TM_EWORKER if a rank died.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_team_sync(t: *mut tm_team) -> c_int {
    status(call("tm_team_sync", || Ok(team_ref(t)?.team.barrier()?)))
}

struct RunArg(*mut c_void);
// SAFETY: the pointer is handed to the caller's function in each worker;
// sharing it is the caller's contract (documented in the header).
unsafe impl Sync for RunArg {}

impl RunArg {
    // A method, so that closures capture the whole (Sync) wrapper.
    fn get(&self) -> *mut c_void {
        self.0
    }
}

/// `int tm_team_run(tm_team *t, int kind, tm_team_fn fn, void *arg)`:
/// runs `fn(worker, arg)` on every worker (processes or threads) and waits.
/// TM_EWORKER if a worker returned non-zero, crashed or was killed.
///
/// # Safety
/// `t` is NULL or a live handle from `tm_team_create`; `fn` is NULL or a
/// function safe to call concurrently in every worker with `arg`.
#[no_mangle]
pub unsafe extern "C" fn tm_team_run(t: *mut tm_team, kind: c_int, f: tm_team_fn, arg: *mut c_void) -> c_int {
    status(call("tm_team_run", || {
        let team = &team_ref(t)?.team;
        let f = f.ok_or_else(|| Failure::invalid("fn is NULL"))?;
        let kind = match kind {
            TM_TEAM_PROCESSES => tiermem::team::TeamKind::Processes,
            TM_TEAM_THREADS => tiermem::team::TeamKind::Threads,
            k => return Err(Failure::invalid(format!("kind {k}"))),
        };
        let arg = RunArg(arg);
        team.run(kind, |w| {
            let mut handle = tm_team_worker {
                worker: w as *const tiermem::team::Worker<'_> as *const c_void,
            };
            // SAFETY: the caller's contract on fn and arg; the handle lives
            // for the call.
            let rc = unsafe { f(&mut handle, arg.get()) };
            if rc == 0 {
                Ok(())
            } else {
                Err(tiermem::Error::Usage(format!(
                    "the worker function returned {rc}"
                )))
            }
        })?;
        Ok(())
    }))
}

fn worker_ref<'a>(w: *const tm_team_worker) -> Result<&'a tiermem::team::Worker<'a>, Failure> {
    // SAFETY: NULL or the handle tm_team_run passed to the worker function,
    // whose `worker` points to the live Worker for the call's duration.
    let h = unsafe { w.as_ref() }.ok_or_else(|| Failure::invalid("worker is NULL"))?;
    // SAFETY: as above.
    Ok(unsafe { &*(h.worker as *const tiermem::team::Worker<'a>) })
}

/// `int tm_team_worker_rank(const tm_team_worker *w)`.
///
/// # Safety
/// `w` is NULL or the handle passed to the running worker function.
#[no_mangle]
pub unsafe extern "C" fn tm_team_worker_rank(w: *const tm_team_worker) -> c_int {
    call("tm_team_worker_rank", || Ok(worker_ref(w)?.rank() as c_int)).unwrap_or_else(|e| e)
}

/// `int tm_team_worker_count(const tm_team_worker *w)`.
///
/// # Safety
/// As `tm_team_worker_rank`.
#[no_mangle]
pub unsafe extern "C" fn tm_team_worker_count(w: *const tm_team_worker) -> c_int {
    call("tm_team_worker_count", || Ok(worker_ref(w)?.workers() as c_int)).unwrap_or_else(|e| e)
}

/// `void *tm_team_worker_base(const tm_team_worker *w)`.
///
/// # Safety
/// As `tm_team_worker_rank`.
#[no_mangle]
pub unsafe extern "C" fn tm_team_worker_base(w: *const tm_team_worker) -> *mut c_void {
    call("tm_team_worker_base", || Ok(worker_ref(w)?.base() as *mut c_void)).unwrap_or(ptr::null_mut())
}

/// `int tm_team_barrier(tm_team_worker *w)`: waits for every worker;
/// TM_EWORKER if one died.
///
/// # Safety
/// As `tm_team_worker_rank`.
#[no_mangle]
pub unsafe extern "C" fn tm_team_barrier(w: *mut tm_team_worker) -> c_int {
    status(call("tm_team_barrier", || Ok(worker_ref(w)?.barrier()?)))
}

/// `int tm_team_stats(const tm_team *t, struct tm_team_stats *out)`.
///
/// # Safety
/// `t` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_team_stats(t: *const tm_team, out: *mut tm_team_stats) -> c_int {
    status(call("tm_team_stats", || {
        let team = &team_ref(t)?.team;
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        let s = team.stats().total();
        let v = tm_team_stats {
            missing_faults: s.missing_faults,
            minor_faults: s.minor_faults,
            evictions: s.evictions,
            evict_calls: s.evict_calls,
            bytes_in: s.bytes_in,
            bytes_out: s.bytes_out,
            victims_unmapped: s.victims_unmapped,
            victims_self: s.victims_self,
            victims_other: s.victims_other,
            victims_many: s.victims_many,
        };
        // SAFETY: out is non-NULL and writable (caller's contract).
        unsafe { out.write(v) };
        Ok(())
    }))
}

/// `int tm_team_destroy(tm_team *t)`: leaves (attached) or removes
/// (creator) the team region. NULL is a no-op.
///
/// # Safety
/// `t` is NULL or a live handle not used by anyone during or after.
#[no_mangle]
pub unsafe extern "C" fn tm_team_destroy(t: *mut tm_team) -> c_int {
    if t.is_null() {
        return TM_OK;
    }
    status(call("tm_team_destroy", || {
        // SAFETY: a live handle from new_team (a leaked Box), given up here.
        drop(unsafe { Box::from_raw(t) });
        Ok(())
    }))
}

// ---------------------------------------------------------------------------
// Shared virtual memory (paper 5, Rhymes): tm_svm_*
// ---------------------------------------------------------------------------

/// `tm_svm_create` flag: SPM pages in the noncoherent flavour.
pub const TM_SVM_NONCOHERENT: c_int = 1;
/// `tm_svm_create` flag: pin process `r` to CPU `r % online CPUs`.
pub const TM_SVM_PIN: c_int = 2;
/// `tm_svm_set_mode` mode: shared physical memory.
pub const TM_SVM_SPM: c_int = 0;
/// `tm_svm_set_mode` mode: private cached copy (scope consistency).
pub const TM_SVM_DSM: c_int = 1;

/// An SVM team (opaque).
#[allow(non_camel_case_types)]
pub struct tm_svm {
    svm: tiermem::svm::Svm,
}

/// The function each SVM process runs.
#[allow(non_camel_case_types)]
pub type tm_svm_fn = Option<unsafe extern "C" fn(arg: *mut c_void) -> c_int>;

/// Protocol counters (all processes of the last run), as in the header.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Default)]
pub struct tm_svm_stats {
    /// DSM/read-only-private read faults.
    pub read_faults: u64,
    /// DSM write faults (twins made).
    pub write_faults: u64,
    /// Write faults on write-protected SPM pages.
    pub spm_write_faults: u64,
    /// Home pages copied into private copies.
    pub fetches: u64,
    /// Pages diffed against their twins.
    pub diffs: u64,
    /// Byte runs applied to home copies.
    pub diff_runs: u64,
    /// Bytes of diff applied.
    pub diff_bytes: u64,
    /// Write notices attached to locks.
    pub notices_sent: u64,
    /// Write notices read at acquires.
    pub notices_received: u64,
    /// Cached copies invalidated.
    pub invalidations: u64,
    /// Cache lines written back (noncoherent).
    pub lines_flushed: u64,
    /// Cache lines invalidated (noncoherent).
    pub lines_invalidated: u64,
}

// The header's struct tm_svm_stats: twelve uint64_t.
const _: () = assert!(size_of::<tm_svm_stats>() == 12 * 8);

thread_local! {
    /// The SVM process this (forked) process runs as, during tm_svm_run.
    static SVM_PROC: std::cell::Cell<*const c_void> = const { std::cell::Cell::new(ptr::null()) };
}

fn svm_ref<'a>(s: *const tm_svm) -> Result<&'a tm_svm, Failure> {
    // SAFETY: NULL or a live handle from tm_svm_create (caller's contract).
    unsafe { s.as_ref() }.ok_or_else(|| Failure::invalid("svm is NULL"))
}

/// Runs `f` with the calling process's SVM process, or fails outside
/// `tm_svm_run`.
fn with_proc<T>(
    func: &str,
    f: impl FnOnce(&tiermem::svm::SvmProc<'_>) -> Result<T, Failure>,
) -> Result<T, c_int> {
    call(func, || {
        let p = SVM_PROC.with(|c| c.get());
        if p.is_null() {
            return Err(Failure::invalid(format!(
                "{func} outside a tm_svm_run process function"
            )));
        }
        // SAFETY: set by tm_svm_run to a SvmProc that lives for the whole
        // process function (this thread's), and cleared after it.
        f(unsafe { &*(p as *const tiermem::svm::SvmProc<'_>) })
    })
}

/// `int tm_svm_create(size_t heap_bytes, int procs, int flags, tm_svm **out)`.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_svm_create(
    heap_bytes: usize,
    procs: c_int,
    flags: c_int,
    out: *mut *mut tm_svm,
) -> c_int {
    status(call("tm_svm_create", || {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        // SAFETY: out is non-NULL and writable (caller's contract).
        unsafe { out.write(ptr::null_mut()) };
        // 0: every rank of an MPI job (Svm::new refuses it for a forked team).
        if procs < 0 {
            return Err(Failure::invalid(format!("{procs} processes")));
        }
        if flags & !(TM_SVM_NONCOHERENT | TM_SVM_PIN) != 0 {
            return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
        }
        let mut cfg = tiermem::svm::SvmConfig::new(heap_bytes, procs as usize);
        if flags & TM_SVM_NONCOHERENT != 0 {
            cfg.flavour = tiermem::svm::SpmFlavour::Noncoherent;
        }
        if flags & TM_SVM_PIN != 0 {
            cfg.cpus = (0..tiermem_sys::thread::online_cpus()).collect();
        }
        let svm = tiermem::svm::Svm::new(cfg)?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(tm_svm { svm }))) };
        Ok(())
    }))
}

/// `int tm_svm_run(tm_svm *s, tm_svm_fn fn, void *arg)`: forks the team's
/// processes, each runs `fn(arg)` and may call the `tm_svm_*` functions
/// below; waits for all. TM_EWORKER if one returned non-zero, crashed or
/// was killed.
///
/// # Safety
/// `s` is NULL or a live handle; `fn` is NULL or a function safe to call
/// in every process with `arg`.
#[no_mangle]
pub unsafe extern "C" fn tm_svm_run(s: *mut tm_svm, f: tm_svm_fn, arg: *mut c_void) -> c_int {
    status(call("tm_svm_run", || {
        let svm = &svm_ref(s)?.svm;
        let f = f.ok_or_else(|| Failure::invalid("fn is NULL"))?;
        let arg = RunArg(arg);
        svm.run(|p| {
            SVM_PROC.with(|c| c.set(p as *const tiermem::svm::SvmProc<'_> as *const c_void));
            // SAFETY: the caller's contract on fn and arg.
            let rc = unsafe { f(arg.get()) };
            SVM_PROC.with(|c| c.set(ptr::null()));
            if rc == 0 {
                Ok(())
            } else {
                Err(tiermem::Error::Usage(format!(
                    "the process function returned {rc}"
                )))
            }
        })?;
        Ok(())
    }))
}

/// `int tm_svm_rank(void)`: this process's rank (inside `tm_svm_run`).
#[no_mangle]
pub extern "C" fn tm_svm_rank() -> c_int {
    with_proc("tm_svm_rank", |p| Ok(p.rank() as c_int)).unwrap_or_else(|e| e)
}

/// `int tm_svm_nodes(void)`: nodes the team spans (1 for a forked team).
#[no_mangle]
pub extern "C" fn tm_svm_nodes() -> c_int {
    with_proc("tm_svm_nodes", |p| Ok(p.nodes() as c_int)).unwrap_or_else(|e| e)
}

/// `void *tm_svm_malloc_cyclic(size_t size)`: collective allocation whose
/// pages are homed on the ranks of an MPI job in turn (page `i` on rank
/// `i % ranks`); like `tm_svm_malloc` in a forked team.
#[no_mangle]
pub extern "C" fn tm_svm_malloc_cyclic(size: usize) -> *mut c_void {
    with_proc("tm_svm_malloc_cyclic", |p| {
        Ok(p.malloc_distributed(size, tiermem::svm::Distribution::Cyclic)? as *mut c_void)
    })
    .unwrap_or(ptr::null_mut())
}

/// `int tm_svm_procs(void)`: processes in the team.
#[no_mangle]
pub extern "C" fn tm_svm_procs() -> c_int {
    with_proc("tm_svm_procs", |p| Ok(p.procs() as c_int)).unwrap_or_else(|e| e)
}

/// `void *tm_svm_malloc(size_t size)`: collective allocation (every process
/// calls it in the same order with the same size; the same address in
/// all). NULL on error (`tm_last_error` says why).
#[no_mangle]
pub extern "C" fn tm_svm_malloc(size: usize) -> *mut c_void {
    with_proc("tm_svm_malloc", |p| Ok(p.malloc(size)? as *mut c_void)).unwrap_or(ptr::null_mut())
}

/// `int tm_svm_free(void *ptr)`: collective free.
#[no_mangle]
pub extern "C" fn tm_svm_free(ptr: *mut c_void) -> c_int {
    status(with_proc("tm_svm_free", |p| Ok(p.free(ptr as usize)?)))
}

fn lock_id(id: c_int) -> Result<usize, Failure> {
    usize::try_from(id).map_err(|_| Failure::invalid(format!("lock id {id}")))
}

/// `int tm_svm_lock(int id)`.
#[no_mangle]
pub extern "C" fn tm_svm_lock(id: c_int) -> c_int {
    status(with_proc("tm_svm_lock", |p| Ok(p.lock(lock_id(id)?)?)))
}

/// `int tm_svm_unlock(int id)`.
#[no_mangle]
pub extern "C" fn tm_svm_unlock(id: c_int) -> c_int {
    status(with_proc("tm_svm_unlock", |p| Ok(p.unlock(lock_id(id)?)?)))
}

/// `int tm_svm_barrier(void)`.
#[no_mangle]
pub extern "C" fn tm_svm_barrier() -> c_int {
    status(with_proc("tm_svm_barrier", |p| Ok(p.barrier()?)))
}

/// `int tm_svm_set_mode(void *ptr, size_t len, int mode)`: whole pages,
/// this process only.
#[no_mangle]
pub extern "C" fn tm_svm_set_mode(ptr: *mut c_void, len: usize, mode: c_int) -> c_int {
    status(with_proc("tm_svm_set_mode", |p| {
        let m = match mode {
            TM_SVM_SPM => tiermem::svm::SvmMode::Spm,
            TM_SVM_DSM => tiermem::svm::SvmMode::Dsm,
            m => return Err(Failure::invalid(format!("mode {m}"))),
        };
        Ok(p.set_mode(ptr as usize, len, m)?)
    }))
}

/// `int tm_svm_hint_read_only(void *ptr, size_t len)`: the paper's
/// "read-only private" hint.
#[no_mangle]
pub extern "C" fn tm_svm_hint_read_only(ptr: *mut c_void, len: usize) -> c_int {
    status(with_proc("tm_svm_hint_read_only", |p| {
        Ok(p.hint_read_only(ptr as usize, len)?)
    }))
}

/// `int tm_svm_stats(const tm_svm *s, struct tm_svm_stats *out)`: counters
/// of the last run, all processes.
///
/// # Safety
/// `s` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_svm_stats(s: *const tm_svm, out: *mut tm_svm_stats) -> c_int {
    status(call("tm_svm_stats", || {
        let t = svm_ref(s)?.svm.total_stats();
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        let c = tm_svm_stats {
            read_faults: t.read_faults,
            write_faults: t.write_faults,
            spm_write_faults: t.spm_write_faults,
            fetches: t.fetches,
            diffs: t.diffs,
            diff_runs: t.diff_runs,
            diff_bytes: t.diff_bytes,
            notices_sent: t.notices_sent,
            notices_received: t.notices_received,
            invalidations: t.invalidations,
            lines_flushed: t.lines_flushed,
            lines_invalidated: t.lines_invalidated,
        };
        // SAFETY: out is non-NULL and writable (caller's contract).
        unsafe { out.write(c) };
        Ok(())
    }))
}

/// `int tm_svm_destroy(tm_svm *s)`. NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a live handle, not used after.
#[no_mangle]
pub unsafe extern "C" fn tm_svm_destroy(s: *mut tm_svm) -> c_int {
    if s.is_null() {
        return TM_OK;
    }
    status(call("tm_svm_destroy", || {
        // SAFETY: a live handle from tm_svm_create (a leaked Box), given up here.
        drop(unsafe { Box::from_raw(s) });
        Ok(())
    }))
}
