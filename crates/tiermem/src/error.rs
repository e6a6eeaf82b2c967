//! The crate's error type and its stable numeric codes (the C API's).

use crate::config::ConfigError;
use crate::store::StoreError;
use thiserror::Error;
use tiermem_sys::file::FileError;
use tiermem_sys::mm::MmError;
use tiermem_sys::uffd::UffdError;
use tiermem_sys::Errno;

/// Everything that can go wrong creating or using a region.
#[derive(Debug, Error)]
pub enum Error {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// userfaultfd is unavailable or failed.
    #[error(transparent)]
    Uffd(#[from] UffdError),
    /// A mapping call failed.
    #[error(transparent)]
    Map(#[from] MmError),
    /// The far file could not be created.
    #[error(transparent)]
    File(#[from] FileError),
    /// The far store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Not enough huge pages in the pool.
    #[error(
        "{need} huge pages of {size} needed for {purpose}, but the pool has {available} available; \
         reserve more with `tiermem hugepages reserve {size}:{suggest}` (as root) or \
         `echo {suggest} > {}`",
        crate::hugepages::nr_path(size)
    )]
    HugePages {
        /// Page size ("2M" or "1G").
        size: &'static str,
        /// What needs them ("a near budget", "a segment").
        purpose: &'static str,
        /// Pages needed.
        need: u64,
        /// Pages available.
        available: u64,
        /// A pool size that would do.
        suggest: u64,
    },
    /// A system call outside the other categories failed.
    #[error("{what}: {errno}")]
    Sys {
        /// What was attempted.
        what: &'static str,
        /// What the kernel said.
        errno: Errno,
    },
    /// Misuse of the API (a pointer that is not ours, ...).
    #[error("{0}")]
    Usage(String),
    /// The far store has no room left (its file system is full): names
    /// the store, its file system's size and free space, and what to do.
    #[error("{0}")]
    FarStoreFull(String),
    /// The process-wide region has no free range large enough.
    #[error("{0}")]
    GlobalHeapFull(String),
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    /// A team worker failed (its error, crash or kill stopped the team).
    #[error("team: {0}")]
    Team(String),
    /// An MPI call failed (the SVM across nodes): a rank died, or the
    /// network or the MPI library failed.
    #[error("MPI: {0}")]
    Mpi(String),
    /// A handle or allocation inherited across `fork()`: it belongs to the
    /// parent, and the child may not use it (docs/fork.md).
    #[error("{0}")]
    Forked(String),
    /// A thread could not be started because the process, its user or its
    /// cgroup is at its task limit.
    #[error("{0}")]
    TaskLimit(String),
}

impl From<std::io::Error> for Error {
    /// A thread that could not be started: at a task limit (EAGAIN: the
    /// pids cgroup, `RLIMIT_NPROC`, `kernel.threads-max`) it is a resource
    /// error naming the limits, otherwise an internal one.
    fn from(e: std::io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOMEM) => Error::TaskLimit(format!(
                "cannot start a thread: {e}; the process is at a task limit (its cgroup's pids.max, \
                 `ulimit -u` (RLIMIT_NPROC) or kernel.threads-max): raise the limit, or use fewer \
                 movers and handler threads"
            )),
            _ => Error::Thread(e),
        }
    }
}

/// Stable error codes, as returned by the C API (negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ErrorCode {
    /// Invalid argument or configuration.
    InvalidArgument = -1,
    /// Out of memory or address space.
    OutOfMemory = -2,
    /// The kernel lacks a needed feature.
    Unsupported = -3,
    /// Far-store I/O error.
    Io = -4,
    /// Far store full.
    NoSpace = -5,
    /// Huge page pool too small.
    HugePages = -6,
    /// Permission denied.
    Permission = -7,
    /// Internal error (a bug: please report).
    Internal = -8,
    /// A team worker failed; the team stopped.
    WorkerFailed = -9,
    /// A handle or allocation inherited across `fork()`.
    Forked = -10,
}

impl Error {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Config(_) | Error::Usage(_) => ErrorCode::InvalidArgument,
            Error::GlobalHeapFull(_) => ErrorCode::OutOfMemory,
            Error::Uffd(UffdError::MissingFeatures { .. }) => ErrorCode::Unsupported,
            Error::Uffd(UffdError::Open { .. }) => ErrorCode::Permission,
            Error::Uffd(_) => ErrorCode::Unsupported,
            Error::Map(MmError::BadLength { .. }) => ErrorCode::InvalidArgument,
            Error::Map(_) => ErrorCode::OutOfMemory,
            Error::File(FileError::NotWritable { .. }) => ErrorCode::Permission,
            Error::File(FileError::DirectUnsupported { .. }) => ErrorCode::Unsupported,
            Error::File(_) => ErrorCode::InvalidArgument,
            Error::Store(e) if e.is_full() => ErrorCode::NoSpace,
            Error::FarStoreFull(_) => ErrorCode::NoSpace,
            Error::Store(_) => ErrorCode::Io,
            Error::HugePages { .. } => ErrorCode::HugePages,
            Error::Sys { errno, .. } if errno.raw() == libc::ENOMEM => ErrorCode::OutOfMemory,
            Error::Sys { errno, .. } if errno.raw() == libc::EACCES || errno.raw() == libc::EPERM => {
                ErrorCode::Permission
            }
            Error::Sys { .. } | Error::Thread(_) => ErrorCode::Internal,
            Error::Team(_) | Error::Mpi(_) => ErrorCode::WorkerFailed,
            Error::Forked(_) => ErrorCode::Forked,
            Error::TaskLimit(_) => ErrorCode::OutOfMemory,
        }
    }
}

impl ErrorCode {
    /// A short description of the code.
    pub fn message(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid argument",
            ErrorCode::OutOfMemory => "out of memory",
            ErrorCode::Unsupported => "kernel feature missing",
            ErrorCode::Io => "far store I/O error",
            ErrorCode::NoSpace => "far store full",
            ErrorCode::HugePages => "not enough huge pages",
            ErrorCode::Permission => "permission denied",
            ErrorCode::Internal => "internal error",
            ErrorCode::WorkerFailed => "a team worker failed",
            ErrorCode::Forked => "handle inherited across fork()",
        }
    }

    /// The code for a raw value.
    pub fn from_raw(v: i32) -> Option<ErrorCode> {
        use ErrorCode::*;
        [
            InvalidArgument,
            OutOfMemory,
            Unsupported,
            Io,
            NoSpace,
            HugePages,
            Permission,
            Internal,
            WorkerFailed,
            Forked,
        ]
        .into_iter()
        .find(|c| *c as i32 == v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_round_trip() {
        for v in -9..=-1 {
            let c = ErrorCode::from_raw(v).unwrap();
            assert_eq!(c as i32, v);
            assert!(!c.message().is_empty());
        }
        assert_eq!(ErrorCode::from_raw(0), None);
        let e = Error::Config(ConfigError::Zero { what: "virt_bytes" });
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        let e = Error::HugePages {
            size: "2M",
            purpose: "a near budget",
            need: 10,
            available: 0,
            suggest: 10,
        };
        let msg = e.to_string();
        assert!(msg.contains("tiermem hugepages reserve 2M:10"), "{msg}");
        assert!(
            msg.contains("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
            "{msg}"
        );
        assert_eq!(e.code(), ErrorCode::HugePages);
    }
}
