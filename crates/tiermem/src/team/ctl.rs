//! The team's control block: one array of 64-bit atomics in shared memory,
//! mapped by every member process. Everything the members agree on lives
//! here (page states with their sharer masks, the replacement list, the
//! budget, the barrier, member pids, statistics), so a member needs nothing
//! but this block, the region file and the far file.
//!
//! Page word: bits 0-1 where the page is ([`Where`]), bit 2 busy (the
//! page's lock), bits 3-8 the busy owner's rank, bit 9 [`DIRTY`] (a near
//! page that differs from its far copy, or may), bits 10-63 the sharer
//! mask (bit `10 + rank`: that member maps the page).

use crate::party::Party;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) const MAGIC: u64 = 0x7469_6572_7465_616d; // "tierteam"

/// Members at most (workers plus the host): one sharer bit each.
pub const MAX_MEMBERS: usize = 54;

// Header words.
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_NPAGES: usize = 1;
pub(crate) const H_PAGE: usize = 2;
pub(crate) const H_BUDGET: usize = 3;
pub(crate) const H_WORKERS: usize = 4;
pub(crate) const H_BASE: usize = 5;
pub(crate) const H_RESIDENT: usize = 6;
/// 0, or 1 + the rank whose failure ended the team.
pub(crate) const H_ABORT: usize = 7;
pub(crate) const H_BAR_COUNT: usize = 8;
pub(crate) const H_BAR_GEN: usize = 9;
/// 0, or 1 + the rank holding the replacement-list lock.
pub(crate) const H_LOCK: usize = 10;
pub(crate) const H_RING_HEAD: usize = 11;
pub(crate) const H_RING_TAIL: usize = 12;
pub(crate) const H_BATCH: usize = 13;
pub(crate) const H_READAHEAD: usize = 14;
pub(crate) const H_POLICY: usize = 15;
pub(crate) const H_WINDOW: usize = 16;
/// Members that joined the barrier's party (workers of a running team).
pub(crate) const H_PARTY: usize = 17;
/// 1: members install clusters around their faults (fault-around).
pub(crate) const H_AROUND: usize = 18;
/// 1: members track which near pages are written (write-protected
/// installs), and evictions write back only those.
pub(crate) const H_DIRTY: usize = 19;
const HEADER: usize = 32;

const PIDS: usize = HEADER;
/// Statistics words per member.
pub(crate) const NSTAT: usize = 32;
const STATS: usize = PIDS + 64;
/// Words of scratch space for the application (results, flags).
pub const SCRATCH_WORDS: usize = 4096;
/// Snapshots of the statistics ([`MARKS`] copies of the stats area).
const MARKS_AT: usize = STATS + 64 * NSTAT;
/// Statistics snapshots a worker can take.
pub const MARKS: usize = 2;
const SCRATCH: usize = MARKS_AT + MARKS * 64 * NSTAT;
const PAGES: usize = SCRATCH + SCRATCH_WORDS;

/// Statistic slots.
#[derive(Clone, Copy, Debug)]
#[repr(usize)]
pub(crate) enum Stat {
    MissingFaults = 0,
    ZeroFills,
    MinorFaults,
    Evictions,
    EvictCalls,
    BytesIn,
    BytesOut,
    /// Five cost categories, in `stats::Cost` order.
    CostBase,
    FaultNs = 12,
    /// Victims by sharers: none, only the evicting member, one other, more.
    Victims0,
    VictimsSelf,
    VictimsOther,
    VictimsMany,
    ReadaheadPages,
    /// Time in eviction (splice, punch, splice), all victims.
    EvictNs,
    Errors,
    /// Remote members mapping an evicted page, summed over victims.
    VictimRemoteSharers,
    /// Faults that brought neighbours (fault-around), and the neighbours.
    AroundClusters,
    AroundInstalled,
    /// Neighbours seen used (the member's next faults walked past them),
    /// and those found out of near memory at their next fault unused.
    AroundUsed,
    AroundUnused,
    /// Writes to a near page mapped write-protected (dirty tracking).
    WpFaults,
    /// Evicted pages whose far copy was current: punched, not written back.
    CleanEvictions,
}

pub(crate) const BUSY: u64 = 1 << 2;
const OWNER_SHIFT: u32 = 3;
const OWNER_MASK: u64 = 0x3f << OWNER_SHIFT;
/// A near page that may differ from its far copy: some member mapped it
/// writable. Clean near pages are mapped write-protected everywhere, and
/// their eviction writes nothing back.
pub(crate) const DIRTY: u64 = 1 << 9;
const SHARER_SHIFT: u32 = 10;

/// Where a page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Where {
    /// Never written: zero.
    Untouched = 0,
    /// In the far file only.
    Far = 1,
    /// In the region file (near memory); the sharers map it.
    Resident = 2,
    /// Lost (a member died while moving it): accesses raise SIGBUS.
    Lost = 3,
}

pub(crate) fn where_(w: u64) -> Where {
    match w & 3 {
        0 => Where::Untouched,
        1 => Where::Far,
        2 => Where::Resident,
        _ => Where::Lost,
    }
}

pub(crate) fn with_where(w: u64, at: Where) -> u64 {
    (w & !3) | at as u64
}

pub(crate) fn sharers(w: u64) -> u64 {
    w >> SHARER_SHIFT
}

pub(crate) fn sharer_bit(rank: usize) -> u64 {
    1 << (SHARER_SHIFT as usize + rank)
}

pub(crate) fn busy_by(w: u64, rank: usize) -> u64 {
    (w & !OWNER_MASK) | BUSY | ((rank as u64) << OWNER_SHIFT)
}

pub(crate) fn owner(w: u64) -> usize {
    ((w & OWNER_MASK) >> OWNER_SHIFT) as usize
}

pub(crate) fn unbusy(w: u64) -> u64 {
    w & !(BUSY | OWNER_MASK)
}

/// Words the block needs for `npages` pages.
pub(crate) fn words(npages: usize) -> usize {
    PAGES + 2 * npages
}

/// Typed access to a control block.
pub(crate) struct Ctl<'a> {
    pub(crate) w: &'a [AtomicU64],
    npages: usize,
}

impl<'a> Ctl<'a> {
    /// The words of the workers' party: abort flag, barrier, pids.
    pub(crate) fn party(&self) -> Party<'a> {
        Party {
            abort: &self.w[H_ABORT],
            arrived: &self.w[H_BAR_COUNT],
            generation: &self.w[H_BAR_GEN],
            size: &self.w[H_PARTY],
            pids: &self.w[PIDS..PIDS + MAX_MEMBERS],
        }
    }

    pub(crate) fn new(w: &'a [AtomicU64]) -> Ctl<'a> {
        let npages = w[H_NPAGES].load(Ordering::Acquire) as usize;
        Ctl { w, npages }
    }
    pub(crate) fn get(&self, h: usize) -> u64 {
        self.w[h].load(Ordering::Acquire)
    }
    pub(crate) fn set(&self, h: usize, v: u64) {
        self.w[h].store(v, Ordering::Release)
    }
    pub(crate) fn page(&self, i: usize) -> &AtomicU64 {
        &self.w[PAGES + i]
    }
    pub(crate) fn ring(&self, pos: u64) -> &AtomicU64 {
        &self.w[PAGES + self.npages + (pos % self.npages as u64) as usize]
    }
    pub(crate) fn pid(&self, rank: usize) -> &AtomicU64 {
        &self.w[PIDS + rank]
    }
    pub(crate) fn stat(&self, rank: usize, s: Stat) -> &AtomicU64 {
        &self.w[STATS + rank * NSTAT + s as usize]
    }
    pub(crate) fn stat_at(&self, rank: usize, slot: usize) -> &AtomicU64 {
        &self.w[STATS + rank * NSTAT + slot]
    }
    /// Statistic `slot` of `rank`, live (`mark` None) or as snapshotted.
    pub(crate) fn stat_in(&self, mark: Option<usize>, rank: usize, slot: usize) -> u64 {
        let base = mark.map_or(STATS, |m| MARKS_AT + m * 64 * NSTAT);
        self.w[base + rank * NSTAT + slot].load(Ordering::Relaxed)
    }
    /// Copies the live statistics into snapshot `mark`.
    pub(crate) fn snapshot(&self, mark: usize) {
        let to = MARKS_AT + mark * 64 * NSTAT;
        for k in 0..64 * NSTAT {
            let v = self.w[STATS + k].load(Ordering::Relaxed);
            self.w[to + k].store(v, Ordering::Relaxed);
        }
    }
    pub(crate) fn add(&self, rank: usize, s: Stat, v: u64) {
        self.stat(rank, s).fetch_add(v, Ordering::Relaxed);
    }
    pub(crate) fn scratch(&self) -> &'a [AtomicU64] {
        &self.w[SCRATCH..SCRATCH + SCRATCH_WORDS]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_words_pack_and_unpack() {
        let w = with_where(0, Where::Resident) | sharer_bit(0) | sharer_bit(53);
        assert_eq!(where_(w), Where::Resident);
        assert_eq!(sharers(w).count_ones(), 2);
        let b = busy_by(w, 53);
        assert!(b & BUSY != 0);
        assert_eq!(owner(b), 53);
        assert_eq!(unbusy(b), w);
        assert_eq!(where_(with_where(b, Where::Far)), Where::Far);
        // The dirty bit is none of the others, and locking keeps it.
        let d = w | DIRTY;
        assert_eq!(
            (where_(d), sharers(d), owner(busy_by(d, 53))),
            (Where::Resident, sharers(w), 53)
        );
        assert_eq!(unbusy(busy_by(d, 53)), d);
        assert!(DIRTY & (OWNER_MASK | BUSY | 3) == 0 && sharers(DIRTY) == 0);
        assert!(SHARER_SHIFT as usize + MAX_MEMBERS <= 64);
        assert!((MAX_MEMBERS as u64) << OWNER_SHIFT <= OWNER_MASK);
    }
}
