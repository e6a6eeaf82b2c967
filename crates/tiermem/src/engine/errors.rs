//! The error log: a region's latest I/O and install failures, recorded without allocating.

use super::RegionCore;
use crate::stats::Bytes;
use crate::store::StoreError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tiermem_sys::Errno;

/// One recorded I/O error.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IoErrorRecord {
    /// Offset of the page in the region.
    pub offset: u64,
    /// `read` (fill) or `write` (write-back) or `evict` (no room).
    pub op: &'static str,
    /// errno (0 when not from a system call).
    pub errno: i32,
    /// Human-readable message.
    pub message: String,
}

const ERROR_RING: usize = 32;

/// A fixed ring of the latest errors; slots hold plain data so recording
/// never allocates (messages are built when read).
pub(super) struct ErrorLog {
    ring: Mutex<[(u64, u8, i32); ERROR_RING]>,
    count: AtomicU64,
}

impl ErrorLog {
    pub(super) fn new() -> ErrorLog {
        ErrorLog {
            ring: Mutex::new([(0, 0, 0); ERROR_RING]),
            count: AtomicU64::new(0),
        }
    }
    pub(super) fn record(&self, offset: u64, op: u8, errno: i32) {
        let n = self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut r) = self.ring.lock() {
            r[(n as usize) % ERROR_RING] = (offset, op, errno);
        }
    }
    pub(super) fn list(&self) -> Vec<IoErrorRecord> {
        let n = self.count.load(Ordering::Relaxed) as usize;
        let Ok(r) = self.ring.lock() else {
            return Vec::new();
        };
        let first = n.saturating_sub(ERROR_RING);
        (first..n)
            .map(|k| {
                let (offset, op, errno) = r[k % ERROR_RING];
                let op = ["read", "write", "evict", "install"][op as usize % 4];
                let message = match (op, errno) {
                    ("evict", 0) => "no near memory could be freed (all resident pages busy)".to_owned(),
                    (_, 0) => format!("{op} failed"),
                    _ => format!("{op} failed: {}", Errno(errno)),
                };
                IoErrorRecord {
                    offset,
                    op,
                    errno,
                    message,
                }
            })
            .collect()
    }
}

pub(super) const OP_READ: u8 = 0;
pub(super) const OP_WRITE: u8 = 1;
pub(super) const OP_EVICT: u8 = 2;
pub(super) const OP_INSTALL: u8 = 3;

pub(super) use tiermem_sys::process::LineBuf;

/// What to do about a full far store (the option and variable names are
/// checked by crates/tiermem-cli/tests/names.rs).
const FULL_HINT: &str =
    "Give the far store room (a directory on a larger file system: tiermem run --far DIR, \
                         TIERMEM_FAR_FILE) or a larger near budget (--near, TIERMEM_NEAR)";

impl RegionCore {
    /// Counts and records a far-store failure at region offset `off`.
    pub(super) fn store_failed(&self, off: u64, op: u8, err: &StoreError) {
        self.stats.io_errors.fetch_add(1, Ordering::Relaxed);
        self.errors.record(off, op, err.errno().map_or(0, |e| e.raw()));
    }

    /// "the far store is full: STORE (a file system of SIZE, FREE free)",
    /// without allocating.
    fn describe_full(&self, w: &mut impl std::fmt::Write) -> std::fmt::Result {
        write!(w, "the far store is full: {}", self.store_name)?;
        if let Some(s) = self.store.space() {
            write!(
                w,
                " (a file system of {}, {} free)",
                Bytes(s.total),
                Bytes(s.free)
            )?;
        }
        Ok(())
    }

    /// A fault found no page it could write back because the far store is
    /// full, and fails: says so once per region, in one line on stderr,
    /// before the access fails (SIGBUS, which may end the process). Runs
    /// on the fault path (a signal handler in-context): the line is built
    /// in a stack buffer (a frame of its own, off the common path's
    /// stack) and written with write(2).
    #[cold]
    #[inline(never)]
    pub(super) fn say_store_full(&self) {
        if self.said_full.swap(true, Ordering::Relaxed) {
            return;
        }
        use std::fmt::Write;
        let mut line = LineBuf::new();
        let _ = line.write_str("tiermem: ");
        let _ = self.describe_full(&mut line);
        let _ = write!(
            line,
            "; no page could be written back to make room, so the access that needed one fails \
             (SIGBUS; EFAULT in a system call). {FULL_HINT}"
        );
        tiermem_sys::process::write_stderr(line.line());
    }

    /// The error for a far-store failure of an explicit call (eviction,
    /// advice): a full store is named, with its space and what to do.
    pub(crate) fn store_error(&self, e: StoreError) -> crate::Error {
        if !e.is_full() {
            return crate::Error::Store(e);
        }
        let mut s = String::new();
        let _ = self.describe_full(&mut s);
        crate::Error::FarStoreFull(format!(
            "{s}: {e}; the pages not written back stay resident. {FULL_HINT}"
        ))
    }

    /// The error log, a full store named in its records.
    pub(crate) fn errors(&self) -> Vec<IoErrorRecord> {
        let mut list = self.errors.list();
        for r in &mut list {
            if matches!(r.op, "write" | "evict")
                && matches!(r.errno, libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
            {
                r.message.push_str("; ");
                let _ = self.describe_full(&mut r.message);
            }
        }
        list
    }
}
