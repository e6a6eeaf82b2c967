//! The status codes every function returns (`TM_OK`, `TM_E*`): values fixed
//! forever, they are the ABI. The lowest module of the crate: [`crate::ffi`]
//! maps failures to them and the exported functions return them.

use std::ffi::c_int;

use tiermem::ErrorCode;

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
/// A handle or allocation inherited across `fork()`: it belongs to the
/// parent; the child's call touched nothing.
pub const TM_EFORKED: c_int = ErrorCode::Forked as c_int;
