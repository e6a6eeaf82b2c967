//! Library-wide ABI: version, the text of the status codes (defined in
//! [`crate::codes`]), and `struct tm_config` <-> [`Config`].

use std::ffi::{c_char, c_int, CStr, OsStr};
use std::mem::{offset_of, size_of};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::ptr;

use tiermem::{
    Config, DirtyTracking, ErrorCode, FarStoreConfig, FaultPath, InstallMethod, PageSize, PolicyKind,
};

use crate::codes::*;
use crate::ffi::{guard, infallible, last_error, non_null, Failure, MAX_STRUCT_SIZE};

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

/// The values [`decode`] accepts for a field: (value, name, meaning).
type Table<T> = &'static [(c_int, &'static str, T)];

/// A [`Table`] of constants, each named by its identifier:
/// `named![Enum: TM_A => A, TM_B => B]`.
macro_rules! named {
    ($enum:ident: $($value:ident => $variant:ident),+) => {
        &[$(($value, stringify!($value), $enum::$variant)),+]
    };
}

/// `tm_config.page_size_bytes`: 2 MiB transparent huge pages.
pub const TM_PAGE_THP: u64 = (2 << 20) + 1;

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
/// `policy`: adaptive (FIFO or scan resistance, from the refaults).
pub const TM_POLICY_AUTO: i32 = 3;
/// The `policy` values [`config_from_c`] accepts.
const POLICIES: Table<PolicyKind> = named![PolicyKind: TM_POLICY_FIFO => Fifo, TM_POLICY_CLOCK => Clock,
    TM_POLICY_SCAN => Scan, TM_POLICY_AUTO => Auto];
/// `install`: pages installed with `UFFDIO_COPY`.
pub const TM_INSTALL_COPY: i32 = 0;
/// `install`: page frames recycled with `UFFDIO_MOVE`.
pub const TM_INSTALL_MOVE: i32 = 1;
/// `install`: recycling without movers, copies with them (default).
pub const TM_INSTALL_AUTO: i32 = 2;
/// `tm_config.movers`: one mover per region that works only while a CPU
/// is free for it and while it pays (`--movers auto`; docs/movers.md).
pub const TM_MOVERS_AUTO: u32 = 65535;
/// The `install` values [`config_from_c`] accepts.
const INSTALLS: Table<InstallMethod> =
    named![InstallMethod: TM_INSTALL_COPY => Copy, TM_INSTALL_MOVE => Move, TM_INSTALL_AUTO => Auto];
/// `fault_path`: faults served on the faulting thread (default).
pub const TM_FAULT_IN_CONTEXT: i32 = 0;
/// `fault_path`: faults served by handler threads.
pub const TM_FAULT_HANDLER_THREAD: i32 = 1;
/// The `fault_path` values [`config_from_c`] accepts.
const FAULT_PATHS: Table<FaultPath> =
    named![FaultPath: TM_FAULT_IN_CONTEXT => InContext, TM_FAULT_HANDLER_THREAD => HandlerThread];
/// `dirty_tracking`: write-protect faults (default).
pub const TM_DIRTY_WP_FAULT: i32 = 0;
/// `dirty_tracking`: `UFFD_FEATURE_WP_ASYNC` plus `PAGEMAP_SCAN`.
pub const TM_DIRTY_WP_ASYNC: i32 = 1;
/// The `dirty_tracking` values [`config_from_c`] accepts.
const DIRTY_TRACKINGS: Table<DirtyTracking> =
    named![DirtyTracking: TM_DIRTY_WP_FAULT => WpFault, TM_DIRTY_WP_ASYNC => WpAsync];

// ---------------------------------------------------------------------------
// struct tm_config
// ---------------------------------------------------------------------------

/// `struct tm_config`: everything that defines a region. Initialise it with
/// [`tm_config_init`]; defaults are those of [`tiermem::Config::new`].
///
/// Fields are naturally aligned with explicit padding (`reserved0`,
/// `reserved1`), so the C and Rust layouts agree without relying on
/// implicit padding rules; new fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
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
    /// Dedicated data-mover threads; default 0 (movement in faults only);
    /// `TM_MOVERS_AUTO`: one, working only while a CPU is free and it pays.
    pub movers: u32,
    /// 1 turns fault-triggered prefetch off; default 0 (on with movers).
    pub prefetch_off: i32,
    /// Largest prefetch window in pages, 4 to 2048; 0 = default (512).
    pub prefetch_max_pages: u32,
    /// `TM_INSTALL_AUTO` (default), `TM_INSTALL_COPY` or `TM_INSTALL_MOVE`.
    pub install: i32,
    /// CPUs to pin movers to (`mover_cpu_count` entries); NULL = unpinned.
    pub mover_cpus: *const i32,
    /// Entries of `mover_cpus`.
    pub mover_cpu_count: u32,
    /// 1 turns fault-around off; default 0 (on). Was padding (`reserved2`)
    /// before: the layout and size are unchanged, and 0 keeps the default.
    pub fault_around_off: i32,
}

/// The size of version 1 of `struct tm_config`, the smallest accepted.
/// Computed from the last version-1 field so that it stays put when
/// fields are appended.
const CONFIG_SIZE_V1: usize = offset_of!(tm_config, handler_threads) + size_of::<u32>();
const _: () = assert!(CONFIG_SIZE_V1 == 72 && size_of::<tm_config>() == 104);

// ---------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------

impl tm_config {
    /// The C view of [`Config::new`]'s defaults. A file store's path is
    /// not carried over (far_path stays NULL): the defaults never name one.
    pub(crate) fn from_defaults(c: &Config) -> tm_config {
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
                PolicyKind::Auto => TM_POLICY_AUTO,
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
            movers: if c.movers_auto {
                TM_MOVERS_AUTO
            } else {
                u32::try_from(c.movers).unwrap_or(u32::MAX)
            },
            prefetch_off: i32::from(!c.prefetch),
            prefetch_max_pages: u32::try_from(c.prefetch_max_pages).unwrap_or(u32::MAX),
            install: match c.install {
                InstallMethod::Auto => TM_INSTALL_AUTO,
                InstallMethod::Copy => TM_INSTALL_COPY,
                InstallMethod::Move => TM_INSTALL_MOVE,
            },
            mover_cpus: ptr::null(),
            mover_cpu_count: 0,
            fault_around_off: i32::from(!c.fault_around),
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
            fault_around_off: 0,
        }
    }
}

/// Copies the caller's `struct tm_config` out, checking its size.
///
/// # Safety
/// `cfg` is NULL or points to at least `cfg->struct_size` readable bytes,
/// aligned for `struct tm_config`.
pub(crate) unsafe fn read_config(cfg: *const tm_config) -> Result<tm_config, Failure> {
    non_null(cfg, "cfg")?;
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
pub(crate) unsafe fn config_from_c(c: &tm_config) -> Result<Config, Failure> {
    if c.reserved0 != 0 || c.reserved1 != 0 {
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
    config.policy = decode("policy", c.policy, POLICIES)?;
    config.fault_path = decode("fault_path", c.fault_path, FAULT_PATHS)?;
    config.dirty_tracking = decode("dirty_tracking", c.dirty_tracking, DIRTY_TRACKINGS)?;
    config.evict_batch_pages = c.evict_batch_pages as usize;
    config.handler_threads = c.handler_threads as usize;
    config.movers_auto = c.movers == TM_MOVERS_AUTO;
    config.movers = if config.movers_auto { 1 } else { c.movers as usize };
    config.prefetch = !flag("prefetch_off", c.prefetch_off)?;
    config.fault_around = !flag("fault_around_off", c.fault_around_off)?;
    if c.prefetch_max_pages != 0 {
        config.prefetch_max_pages = c.prefetch_max_pages as usize;
    }
    config.install = decode("install", c.install, INSTALLS)?;
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

// ---------------------------------------------------------------------------
// Exported functions: the version, codes as text, the last error, tm_config_init
// ---------------------------------------------------------------------------

/// `int tm_version(void)`: the library's version as
/// major * 10000 + minor * 100 + patch.
#[no_mangle]
pub extern "C" fn tm_version() -> c_int {
    // A constant cannot panic; the guard keeps the rule without exception.
    infallible(TM_EINTERNAL, || TIERMEM_VERSION)
}

/// `const char *tm_strerror(int code)`: a static description of a code
/// (`"success"` for 0, `"unknown error code"` for a value that is not one).
#[no_mangle]
pub extern "C" fn tm_strerror(code: c_int) -> *const c_char {
    infallible(c"internal error", || strerror(code)).as_ptr()
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
            Some(ErrorCode::Forked) => c"handle inherited across fork()",
            None => c"unknown error code",
        }
    }
}

/// `const char *tm_last_error(void)`: the detailed message of the calling
/// thread's last failed call, `""` if none. The string belongs to the
/// thread and stays valid until its next tiermem call.
#[no_mangle]
pub extern "C" fn tm_last_error() -> *const c_char {
    infallible(None, last_error).unwrap_or(c"".as_ptr())
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
    let _ = guard("tm_config_init", || {
        non_null(cfg, "cfg")?;
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
