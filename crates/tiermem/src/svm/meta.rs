//! The SVM's shared metadata: one array of 64-bit atomics in a shared memfd
//! that every process of the team maps. It holds what the paper keeps in
//! its page control records and lock structures (section III):
//!
//! - a header (sizes, the DSM epoch, the SPM write log's head);
//! - per-process pids and statistics;
//! - the allocation table of [`super::Svm`]'s collective `malloc`;
//! - per lock: the holder and a bounded ring of write notices;
//! - the SPM write log (pages written in SPM mode, for `noncoherent`
//!   acquires);
//! - per page: the home copy's version and the mask of processes caching it
//!   in DSM mode.

use std::sync::atomic::{AtomicU64, Ordering};

/// Processes at most (one bit each in a page's DSM mask; the team's limit
/// is lower).
pub(crate) const MAX_PROCS: usize = 64;
/// Numbered locks (ids `0..MAX_LOCKS`).
pub const MAX_LOCKS: usize = 128;
/// Write notices a lock remembers; an acquirer that is further behind
/// validates every cached page instead (overflow).
pub const NOTICE_CAP: usize = 256;
/// Entries of the SPM write log; an acquirer further behind invalidates
/// the lines of every SPM page (overflow).
pub const SPM_LOG_CAP: usize = 4096;
/// Live allocations at most.
pub const MAX_BLOCKS: usize = 1024;
/// Statistics words per process.
pub(crate) const NSTAT: usize = 32;

pub(crate) const MAGIC: u64 = 0x7469_6572_7376_6d21; // "tiersvm!"
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_NPAGES: usize = 1;
pub(crate) const H_PROCS: usize = 2;
/// 0 free, else 1 + the rank holding the allocation table.
pub(crate) const H_ALLOC_LOCK: usize = 3;
/// Bumped whenever a page's DSM mask goes from empty to non-empty: SPM
/// processes then look for pages they must start write-protecting.
pub(crate) const H_DSM_EPOCH: usize = 4;
pub(crate) const H_SPM_LOG_HEAD: usize = 5;
/// 0, or 1 + the rank of the first process whose run failed (an MPI job:
/// waiters stop instead of hanging; the word of rank 0's node counts).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const H_FAILED: usize = 6;
const HEADER: usize = 16;

const PIDS: usize = HEADER;
const STATS: usize = PIDS + MAX_PROCS;
const BLOCKS: usize = STATS + MAX_PROCS * NSTAT;
/// Words per allocation entry: offset in pages + 1 (0: unused), pages,
/// call index, takers | freers << 32.
pub(crate) const BLOCK_WORDS: usize = 4;
const LOCKS: usize = BLOCKS + MAX_BLOCKS * BLOCK_WORDS;
/// Words per lock: holder (0 or 1 + rank), notice head, then the ring.
const LOCK_WORDS: usize = 2 + NOTICE_CAP;
const SPM_LOG: usize = LOCKS + MAX_LOCKS * LOCK_WORDS;
const PAGES: usize = SPM_LOG + SPM_LOG_CAP;

/// Words the block needs for `npages` pages.
pub(crate) fn words(npages: usize) -> usize {
    PAGES + 2 * npages
}

/// Typed access to the metadata words.
#[derive(Clone, Copy)]
pub(crate) struct Meta<'a> {
    pub(crate) w: &'a [AtomicU64],
    npages: usize,
}

impl<'a> Meta<'a> {
    pub(crate) fn new(w: &'a [AtomicU64], npages: usize) -> Meta<'a> {
        Meta { w, npages }
    }
    pub(crate) fn h(&self, i: usize) -> &'a AtomicU64 {
        &self.w[i]
    }
    /// Word index of `word` (a word of this block): the displacement that
    /// another node's process uses to reach it through an MPI window.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn index(&self, word: &AtomicU64) -> usize {
        (word as *const AtomicU64 as usize - self.w.as_ptr() as usize) / 8
    }
    pub(crate) fn pid(&self, rank: usize) -> &'a AtomicU64 {
        &self.w[PIDS + rank]
    }
    pub(crate) fn stat(&self, rank: usize, slot: usize) -> &'a AtomicU64 {
        &self.w[STATS + rank * NSTAT + slot]
    }
    pub(crate) fn block(&self, i: usize, k: usize) -> &'a AtomicU64 {
        &self.w[BLOCKS + i * BLOCK_WORDS + k]
    }
    pub(crate) fn lock_holder(&self, id: usize) -> &'a AtomicU64 {
        &self.w[LOCKS + id * LOCK_WORDS]
    }
    pub(crate) fn notice_head(&self, id: usize) -> &'a AtomicU64 {
        &self.w[LOCKS + id * LOCK_WORDS + 1]
    }
    pub(crate) fn notice(&self, id: usize, seq: u64) -> &'a AtomicU64 {
        &self.w[LOCKS + id * LOCK_WORDS + 2 + (seq % NOTICE_CAP as u64) as usize]
    }
    pub(crate) fn spm_log(&self, seq: u64) -> &'a AtomicU64 {
        &self.w[SPM_LOG + (seq % SPM_LOG_CAP as u64) as usize]
    }
    pub(crate) fn version(&self, page: usize) -> &'a AtomicU64 {
        &self.w[PAGES + page]
    }
    pub(crate) fn dsm_mask(&self, page: usize) -> &'a AtomicU64 {
        &self.w[PAGES + self.npages + page]
    }
    pub(crate) fn add(&self, rank: usize, slot: usize, v: u64) {
        // Relaxed: statistics, read after the run (the team's exit orders them).
        self.stat(rank, slot).fetch_add(v, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_do_not_overlap() {
        let w: Vec<AtomicU64> = (0..words(10)).map(|_| AtomicU64::new(0)).collect();
        let m = Meta::new(&w, 10);
        let addr = |a: &AtomicU64| a as *const AtomicU64 as usize;
        assert!(addr(m.h(HEADER - 1)) < addr(m.pid(0)));
        assert!(addr(m.stat(MAX_PROCS - 1, NSTAT - 1)) < addr(m.block(0, 0)));
        assert!(addr(m.block(MAX_BLOCKS - 1, BLOCK_WORDS - 1)) < addr(m.lock_holder(0)));
        assert!(addr(m.notice(MAX_LOCKS - 1, NOTICE_CAP as u64 - 1)) < addr(m.spm_log(0)));
        assert!(addr(m.spm_log(SPM_LOG_CAP as u64 - 1)) < addr(m.version(0)));
        assert!(addr(m.version(9)) < addr(m.dsm_mask(0)));
        assert_eq!(addr(m.dsm_mask(9)), addr(&w[w.len() - 1]));
    }
}
