//! The error log: a region's latest I/O and install failures, recorded without allocating.

use super::RegionCore;
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

impl RegionCore {
    /// Counts and records a far-store failure at region offset `off`.
    pub(super) fn store_failed(&self, off: u64, op: u8, err: &StoreError) {
        self.stats.io_errors.fetch_add(1, Ordering::Relaxed);
        self.errors.record(off, op, err.errno().map_or(0, |e| e.raw()));
    }
}
