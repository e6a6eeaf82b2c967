//! Per-region statistics: faults by kind, evictions, bytes moved, faults per
//! application thread, time per cost category (paper 1, Fig. 6: lock/list,
//! PTE, TLB shootdown, data transfer, misc) and a fault-latency histogram.
//!
//! Everything here is updated from the fault path, also inside the SIGBUS
//! handler: atomics, a fixed-size thread table, and a histogram that never
//! allocates after creation (its only lock is never held by code that can
//! fault on region memory).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Cost categories of a fault, after paper 1, Fig. 6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Page-state and replacement-list bookkeeping, including waiting for
    /// the policy lock.
    LockList = 0,
    /// Installing ptes: UFFDIO_COPY / ZEROPAGE / WRITEPROTECT. For the memory
    /// store UFFDIO_COPY also performs the 4 KiB copy.
    Pte = 1,
    /// Unmapping and write-protecting for eviction (MADV_DONTNEED,
    /// UFFDIO_WRITEPROTECT, mprotect): where TLB shootdowns are paid.
    Tlb = 2,
    /// Moving data to and from the far store (pread/pwrite, memcpy).
    Transfer = 3,
    /// Everything else inside the handler.
    Misc = 4,
}

impl Cost {
    /// All categories, in order.
    pub const ALL: [Cost; 5] = [Cost::LockList, Cost::Pte, Cost::Tlb, Cost::Transfer, Cost::Misc];
    /// Names as in paper 1.
    pub fn name(self) -> &'static str {
        match self {
            Cost::LockList => "lock/list",
            Cost::Pte => "pte",
            Cost::Tlb => "tlb",
            Cost::Transfer => "transfer",
            Cost::Misc => "misc",
        }
    }
}

/// Measures one fault: laps are charged to categories, the rest is misc.
pub(crate) struct FaultTimer {
    start: Instant,
    last: Instant,
    charged: [u64; 5],
}

impl FaultTimer {
    pub(crate) fn start() -> FaultTimer {
        let now = Instant::now();
        FaultTimer {
            start: now,
            last: now,
            charged: [0; 5],
        }
    }

    /// Charges the time since the previous lap to `cost`.
    pub(crate) fn lap(&mut self, cost: Cost) {
        let now = Instant::now();
        self.charged[cost as usize] += (now - self.last).as_nanos() as u64;
        self.last = now;
    }

    /// Charges the time since the previous lap to misc and returns the
    /// total time and the per-category split.
    pub(crate) fn finish(mut self) -> (u64, [u64; 5]) {
        self.lap(Cost::Misc);
        ((self.last - self.start).as_nanos() as u64, self.charged)
    }
}

const THREAD_SLOTS: usize = 256;

/// Faults per thread id, fixed size, lock free.
struct ThreadTable {
    tids: Box<[AtomicU32]>,
    faults: Box<[AtomicU64]>,
    overflow: AtomicU64,
}

impl ThreadTable {
    fn new() -> ThreadTable {
        ThreadTable {
            tids: (0..THREAD_SLOTS).map(|_| AtomicU32::new(0)).collect(),
            faults: (0..THREAD_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            overflow: AtomicU64::new(0),
        }
    }

    fn add(&self, tid: u32) {
        if tid == 0 {
            self.overflow.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let h = (tid as usize).wrapping_mul(0x9e37_79b9) % THREAD_SLOTS;
        for k in 0..THREAD_SLOTS {
            let i = (h + k) % THREAD_SLOTS;
            let cur = self.tids[i].load(Ordering::Relaxed);
            // Relaxed: slots are claimed once and counts are statistics;
            // readers tolerate a count that lags its tid.
            if cur == tid
                || (cur == 0
                    && self.tids[i]
                        .compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
                        .map_or_else(|seen| seen == tid, |_| true))
            {
                self.faults[i].fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.overflow.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Vec<ThreadFaults> {
        let mut v: Vec<ThreadFaults> = (0..THREAD_SLOTS)
            .filter_map(|i| {
                let tid = self.tids[i].load(Ordering::Relaxed);
                let faults = self.faults[i].load(Ordering::Relaxed);
                (tid != 0 && faults != 0).then_some(ThreadFaults { tid, faults })
            })
            .collect();
        let o = self.overflow.load(Ordering::Relaxed);
        if o != 0 {
            v.push(ThreadFaults { tid: 0, faults: o });
        }
        v.sort_by_key(|t| t.tid);
        v
    }

    fn reset(&self) {
        for i in 0..THREAD_SLOTS {
            self.faults[i].store(0, Ordering::Relaxed);
        }
        self.overflow.store(0, Ordering::Relaxed);
    }
}

/// The kinds of fault the engine counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// First touch of a never-written page.
    ZeroFill,
    /// Fill from the far store.
    FarFill,
    /// Write to a clean page (write-protect fault).
    WriteProtect,
    /// Already resolved by another thread, or waited for one.
    Spurious,
}

/// Live counters of a region.
pub(crate) struct Stats {
    pub(crate) zero_fills: AtomicU64,
    pub(crate) far_fills: AtomicU64,
    pub(crate) wp_faults: AtomicU64,
    pub(crate) spurious: AtomicU64,
    pub(crate) waits: AtomicU64,
    /// Wall time threads spent waiting for pages in flight (`waits`).
    pub(crate) wait_ns: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) evict_calls: AtomicU64,
    pub(crate) evict_protect_calls: AtomicU64,
    pub(crate) write_backs: AtomicU64,
    pub(crate) write_backs_piped: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) io_errors: AtomicU64,
    pub(crate) poisoned: AtomicU64,
    pub(crate) inline_evictions: AtomicU64,
    pub(crate) mover_evictions: AtomicU64,
    pub(crate) mover_fills: AtomicU64,
    pub(crate) eviction_pauses: AtomicU64,
    /// Work of the mover threads themselves (not of application threads
    /// that fill or evict in the same functions): time busy, pages moved
    /// in and out, and the kernel calls that moved them.
    pub(crate) mover_busy_ns: AtomicU64,
    pub(crate) mover_busy_wall_ns: AtomicU64,
    pub(crate) mover_pages_in: AtomicU64,
    pub(crate) mover_pages_out: AtomicU64,
    pub(crate) mover_copy_calls: AtomicU64,
    pub(crate) mover_unmap_calls: AtomicU64,
    pub(crate) mover_stand_downs: AtomicU64,
    pub(crate) mover_trials: AtomicU64,
    pub(crate) mover_unpaid: AtomicU64,
    pub(crate) mover_stood_down_ns: AtomicU64,
    pub(crate) zero_fill_races: AtomicU64,
    pub(crate) rewrite_installs: AtomicU64,
    pub(crate) recycled_installs: AtomicU64,
    pub(crate) thp_collapses: AtomicU64,
    pub(crate) thp_moves: AtomicU64,
    pub(crate) thp_collapse_failures: AtomicU64,
    /// Most pages resident at once (the near high-water mark).
    pub(crate) resident_peak: AtomicU64,
    cost_ns: [AtomicU64; 5],
    mover_cost_ns: [AtomicU64; 5],
    fault_ns: AtomicU64,
    threads: ThreadTable,
    hist: Mutex<Histogram<u64>>,
    tlb_at_reset: AtomicU64,
}

/// Adds a timer's split per cost category to `totals`.
fn add_split(totals: &[AtomicU64; 5], split: [u64; 5]) {
    for (c, ns) in totals.iter().zip(split) {
        c.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Stats {
    pub(crate) fn new() -> Stats {
        Stats {
            zero_fills: AtomicU64::new(0),
            far_fills: AtomicU64::new(0),
            wp_faults: AtomicU64::new(0),
            spurious: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            evict_calls: AtomicU64::new(0),
            evict_protect_calls: AtomicU64::new(0),
            write_backs_piped: AtomicU64::new(0),
            write_backs: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            io_errors: AtomicU64::new(0),
            poisoned: AtomicU64::new(0),
            inline_evictions: AtomicU64::new(0),
            mover_evictions: AtomicU64::new(0),
            mover_fills: AtomicU64::new(0),
            eviction_pauses: AtomicU64::new(0),
            mover_busy_ns: AtomicU64::new(0),
            mover_busy_wall_ns: AtomicU64::new(0),
            mover_pages_in: AtomicU64::new(0),
            mover_pages_out: AtomicU64::new(0),
            mover_copy_calls: AtomicU64::new(0),
            mover_unmap_calls: AtomicU64::new(0),
            mover_stand_downs: AtomicU64::new(0),
            mover_trials: AtomicU64::new(0),
            mover_unpaid: AtomicU64::new(0),
            mover_stood_down_ns: AtomicU64::new(0),
            zero_fill_races: AtomicU64::new(0),
            rewrite_installs: AtomicU64::new(0),
            recycled_installs: AtomicU64::new(0),
            thp_collapses: AtomicU64::new(0),
            thp_moves: AtomicU64::new(0),
            thp_collapse_failures: AtomicU64::new(0),
            resident_peak: AtomicU64::new(0),
            cost_ns: Default::default(),
            mover_cost_ns: Default::default(),
            fault_ns: AtomicU64::new(0),
            threads: ThreadTable::new(),
            // 1 ns .. 100 s at 2 significant digits: ~20 KiB, allocated now
            // so that recording never allocates.
            hist: Mutex::new(
                Histogram::new_with_bounds(1, 100_000_000_000, 2).expect("valid histogram bounds"),
            ),
            tlb_at_reset: AtomicU64::new(tiermem_sys::interrupts::tlb_shootdowns()),
        }
    }

    /// Time application threads spent in faults so far, ns.
    pub(crate) fn fault_ns(&self) -> u64 {
        self.fault_ns.load(Ordering::Relaxed)
    }

    /// Time application threads spent moving data to and from the far
    /// store in faults and explicit evictions, ns (`Cost::Transfer`).
    pub(crate) fn transfer_ns(&self) -> u64 {
        self.cost_ns[Cost::Transfer as usize].load(Ordering::Relaxed)
    }

    /// Records one served fault.
    pub(crate) fn record_fault(&self, kind: FaultKind, tid: u32, timer: FaultTimer) {
        let counter = match kind {
            FaultKind::ZeroFill => &self.zero_fills,
            FaultKind::FarFill => &self.far_fills,
            FaultKind::WriteProtect => &self.wp_faults,
            FaultKind::Spurious => &self.spurious,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if kind == FaultKind::Spurious {
            return;
        }
        self.threads.add(tid);
        let (total, split) = timer.finish();
        add_split(&self.cost_ns, split);
        self.fault_ns.fetch_add(total, Ordering::Relaxed);
        if let Ok(mut h) = self.hist.lock() {
            h.saturating_record(total.max(1));
        }
    }

    /// Charges a mover's work.
    pub(crate) fn charge_mover(&self, timer: FaultTimer) {
        add_split(&self.mover_cost_ns, timer.finish().1);
    }

    /// Charges time spent outside a fault (explicit eviction calls).
    pub(crate) fn charge(&self, timer: FaultTimer) {
        add_split(&self.cost_ns, timer.finish().1);
    }

    pub(crate) fn reset(&self) {
        for a in [
            &self.zero_fills,
            &self.far_fills,
            &self.wp_faults,
            &self.spurious,
            &self.waits,
            &self.wait_ns,
            &self.evictions,
            &self.evict_calls,
            &self.evict_protect_calls,
            &self.write_backs,
            &self.write_backs_piped,
            &self.bytes_in,
            &self.bytes_out,
            &self.io_errors,
            &self.poisoned,
            &self.inline_evictions,
            &self.mover_evictions,
            &self.mover_fills,
            &self.eviction_pauses,
            &self.mover_busy_ns,
            &self.mover_busy_wall_ns,
            &self.mover_pages_in,
            &self.mover_pages_out,
            &self.mover_copy_calls,
            &self.mover_unmap_calls,
            &self.mover_stand_downs,
            &self.mover_trials,
            &self.mover_unpaid,
            &self.mover_stood_down_ns,
            &self.zero_fill_races,
            &self.rewrite_installs,
            &self.recycled_installs,
            &self.thp_collapses,
            &self.thp_moves,
            &self.thp_collapse_failures,
            &self.fault_ns,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        for c in self.cost_ns.iter().chain(&self.mover_cost_ns) {
            c.store(0, Ordering::Relaxed);
        }
        self.threads.reset();
        if let Ok(mut h) = self.hist.lock() {
            h.reset();
        }
        self.tlb_at_reset
            .store(tiermem_sys::interrupts::tlb_shootdowns(), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, resident_pages: usize, page_bytes: usize) -> RegionStats {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (p50, p90, p99, max, count) = match self.hist.lock() {
            Ok(h) if !h.is_empty() => (
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.9),
                h.value_at_quantile(0.99),
                h.max(),
                h.len(),
            ),
            _ => (0, 0, 0, 0, 0),
        };
        let shares = |a: &[AtomicU64; 5]| -> Vec<CostShare> {
            Cost::ALL
                .iter()
                .map(|c| CostShare {
                    category: c.name(),
                    ns: ld(&a[*c as usize]),
                })
                .collect()
        };
        let cost = shares(&self.cost_ns);
        let mover_cost = shares(&self.mover_cost_ns);
        RegionStats {
            faults_zero_fill: ld(&self.zero_fills),
            faults_far_fill: ld(&self.far_fills),
            faults_write_protect: ld(&self.wp_faults),
            faults_spurious: ld(&self.spurious),
            waits_in_flight: ld(&self.waits),
            wait_in_flight_ns: ld(&self.wait_ns),
            evictions: ld(&self.evictions),
            evict_calls: ld(&self.evict_calls),
            evict_protect_calls: ld(&self.evict_protect_calls),
            write_backs: ld(&self.write_backs),
            write_backs_piped: ld(&self.write_backs_piped),
            bytes_in: ld(&self.bytes_in),
            bytes_out: ld(&self.bytes_out),
            io_errors: ld(&self.io_errors),
            poisoned_pages: ld(&self.poisoned),
            resident_bytes: (resident_pages * page_bytes) as u64,
            resident_peak_bytes: ld(&self.resident_peak).max(resident_pages as u64) * page_bytes as u64,
            held_peak_bytes: 0,
            pinned_refusals: 0,
            fault_ns_total: ld(&self.fault_ns),
            fault_latency: Latency {
                count,
                p50_ns: p50,
                p90_ns: p90,
                p99_ns: p99,
                max_ns: max,
            },
            cost,
            mover_cost,
            inline_evictions: ld(&self.inline_evictions),
            mover_evictions: ld(&self.mover_evictions),
            mover_fills: ld(&self.mover_fills),
            eviction_pauses: ld(&self.eviction_pauses),
            mover: MoverWork {
                busy_ns: ld(&self.mover_busy_ns),
                busy_wall_ns: ld(&self.mover_busy_wall_ns),
                pages_in: ld(&self.mover_pages_in),
                pages_out: ld(&self.mover_pages_out),
                copy_calls: ld(&self.mover_copy_calls),
                unmap_calls: ld(&self.mover_unmap_calls),
                stand_downs: ld(&self.mover_stand_downs),
                trials: ld(&self.mover_trials),
                unpaid: ld(&self.mover_unpaid),
                stood_down_ns: ld(&self.mover_stood_down_ns),
            },
            zero_fill_races: ld(&self.zero_fill_races),
            rewrite_installs: ld(&self.rewrite_installs),
            recycled_installs: ld(&self.recycled_installs),
            thp_collapses: ld(&self.thp_collapses),
            thp_moves: ld(&self.thp_moves),
            thp_collapse_failures: ld(&self.thp_collapse_failures),
            prefetch: PrefetchStats::default(),
            fault_around: FaultAroundStats::default(),
            stride: StrideStats::default(),
            policy_auto: None,
            faults_per_thread: self.threads.snapshot(),
            tlb_shootdowns_machine: tiermem_sys::interrupts::tlb_shootdowns()
                .saturating_sub(self.tlb_at_reset.load(Ordering::Relaxed)),
        }
    }
}

/// Prefetch counters (pages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PrefetchStats {
    /// Pages asked for (by stream detection or explicitly).
    pub issued: u64,
    /// Prefetched pages a stream then passed (so were used).
    pub used: u64,
    /// Prefetched pages evicted before use.
    pub wasted: u64,
    /// Pages not prefetched because the queue was full.
    pub dropped: u64,
    /// The current cap on the prefetch window (adaptive), in pages.
    pub window_cap: u64,
    /// Demand faults on a stream's trigger page (one per half window: the
    /// expected ones).
    pub triggers: u64,
    /// Demand faults inside a stream's issued window on a page that was not
    /// the trigger: the mover had not filled it yet, or it was evicted
    /// before use (then it is also counted in `wasted`).
    pub late: u64,
    /// Times the window cap was halved because of waste.
    pub shrinks: u64,
    /// Pages threads that faulted inside a stream's window filled
    /// themselves, up to the trigger (not counted in `issued`).
    pub inline: u64,
    /// Prefetched victims not used yet that eviction gave a second chance
    /// (bit cleared, back to the policy as just filled).
    pub spared: u64,
    /// Requested pages movers skipped: the stream's thread had passed them
    /// (and they had been evicted) by the time a mover got there.
    pub stale: u64,
}

/// Fault-around counters (pages; see `TIERMEM_FAULT_AROUND`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FaultAroundStats {
    /// Demand faults that installed a cluster of neighbours with the page.
    pub clusters: u64,
    /// Neighbours installed with them (the faulting pages not included).
    pub installed: u64,
    /// Neighbours known used: the thread's next fault came right after the
    /// cluster (it walked through it), or a write reached the page.
    pub used: u64,
    /// Neighbours that left near memory (or were filled again) without
    /// being known used. Reads inside a cluster leave no trace, so this is
    /// an upper bound on the waste.
    pub evicted_unused: u64,
    /// The largest cluster at the end (16 unless the waste shrank it).
    pub cluster_cap: u64,
    /// Halvings of that cap: more than half the neighbours went unused.
    pub shrinks: u64,
}

/// Stride-detection counters (pages; see `TIERMEM_STRIDE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StrideStats {
    /// Strided streams detected (a fault with three earlier faults of the
    /// same thread at `p - d`, `p - 2d`, `p - 3d`, `|d|` beyond
    /// fault-around's window).
    pub streams: u64,
    /// Demand faults that installed pages ahead along a stream.
    pub installs: u64,
    /// Points of the stride installed ahead along a stream (the faulting
    /// pages not included).
    pub installed: u64,
    /// Neighbours installed with them: the aligned window around each point
    /// (the next columns of a column walk). Not tracked for use: reads
    /// leave no trace.
    pub neighbours: u64,
    /// Points known used: the thread's next fault on the stream came past
    /// them, or a write reached the page.
    pub used: u64,
    /// Pages that left near memory (or were filled again) without being
    /// known used: an upper bound on the waste, as for fault-around.
    pub evicted_unused: u64,
    /// The most points installed ahead per fault at the end (32 unless the
    /// waste of points shrank it); the window around each point is this
    /// wide, at most 16 pages.
    pub ahead_cap: u64,
    /// Halvings of that cap: more than half the pages went unused.
    pub shrinks: u64,
}

/// Faults served for one application thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadFaults {
    /// Kernel thread id (0: threads beyond the table's capacity).
    pub tid: u32,
    /// Faults (zero fill, far fill, write protect) of that thread.
    pub faults: u64,
}

/// Time in one cost category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CostShare {
    /// Category name.
    pub category: &'static str,
    /// Nanoseconds.
    pub ns: u64,
}

/// Fault service time percentiles (inside the handler; the application
/// additionally pays the trap and, in-context, signal delivery).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Latency {
    /// Faults recorded.
    pub count: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Maximum.
    pub max_ns: u64,
}

/// A snapshot of a region's statistics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegionStats {
    /// First touches of never-written pages (zero fill, no far-store read).
    pub faults_zero_fill: u64,
    /// Fills from the far store.
    pub faults_far_fill: u64,
    /// Writes to clean pages (dirty tracking).
    pub faults_write_protect: u64,
    /// Faults already resolved by another thread by the time they were served.
    pub faults_spurious: u64,
    /// Times a fault waited for a page in flight.
    pub waits_in_flight: u64,
    /// Wall time those waits took, ns: what application threads lose to
    /// pages a mover (or another thread) is still filling or evicting.
    pub wait_in_flight_ns: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Unmap calls issued for evictions (each can cost a TLB shootdown).
    pub evict_calls: u64,
    /// Calls that stopped the writers of dirty victims before their copy
    /// was taken (write-protect or freeze; each can cost a TLB shootdown).
    /// Victims read through the splice pipe need none.
    #[serde(default)]
    pub evict_protect_calls: u64,
    /// Evicted pages written back (dirty); the rest were dropped.
    pub write_backs: u64,
    /// Of those, pages read after the batch's unmap through the splice
    /// pipe (no write protection first).
    #[serde(default)]
    pub write_backs_piped: u64,
    /// Bytes read from the far store.
    pub bytes_in: u64,
    /// Bytes written to the far store.
    pub bytes_out: u64,
    /// Far-store I/O errors.
    pub io_errors: u64,
    /// Pages poisoned because of errors.
    pub poisoned_pages: u64,
    /// Bytes resident now.
    pub resident_bytes: u64,
    /// Most bytes resident at once since creation (the near high-water
    /// mark; not reset with the other counters).
    pub resident_peak_bytes: u64,
    /// Most bytes held resident outside the budget at once (stacks the
    /// program made in the region: `tiermem::hold_resident`; pages an
    /// eviction found pinned by the kernel, for a while).
    pub held_peak_bytes: u64,
    /// Evictions the kernel refused because it had the page pinned (another
    /// process copying into it, direct I/O): the page stayed resident.
    pub pinned_refusals: u64,
    /// Total time inside the fault handler.
    pub fault_ns_total: u64,
    /// Fault service time percentiles.
    pub fault_latency: Latency,
    /// Time per cost category inside faults (paper 1, Fig. 6).
    pub cost: Vec<CostShare>,
    /// Time per cost category spent by mover threads.
    pub mover_cost: Vec<CostShare>,
    /// Pages evicted by faulting threads themselves (movers too slow or absent).
    pub inline_evictions: u64,
    /// Pages evicted by mover threads.
    pub mover_evictions: u64,
    /// Pages filled by mover threads (prefetch).
    pub mover_fills: u64,
    /// Times movers paused asynchronous eviction because its runs were
    /// short (scattered victims: random access), leaving it to faults.
    pub eviction_pauses: u64,
    /// What the mover threads did, and what it cost them.
    pub mover: MoverWork,
    /// wp-fault read zero-fills that found the zero page written by another
    /// thread before it was write-protected (published Dirty instead).
    pub zero_fill_races: u64,
    /// Read fills that installed the page writable because it was written
    /// during its last stay in near memory (`Config::rewrite_hint`): each
    /// saves a write-protect fault if the page is written again.
    pub rewrite_installs: u64,
    /// Pages installed by frame recycling (`install = move`, or `auto`
    /// without movers where the ring pays): their data
    /// copied into a frame an eviction moved out, the frame moved in.
    pub recycled_installs: u64,
    /// THP regions: 2 MiB blocks collapsed into a huge page after a fill.
    pub thp_collapses: u64,
    /// THP regions: blocks built as a huge page in a staging buffer and
    /// moved into place whole (UFFDIO_MOVE), with no copy into the region
    /// and no collapse.
    pub thp_moves: u64,
    /// THP regions: blocks left on small pages because the kernel could not
    /// collapse them (no free huge page at that moment).
    pub thp_collapse_failures: u64,
    /// Prefetch counters.
    pub prefetch: PrefetchStats,
    /// Fault-around counters.
    pub fault_around: FaultAroundStats,
    /// Stride-detection counters.
    pub stride: StrideStats,
    /// What the `auto` policy chose and why (`None` for the fixed ones).
    pub policy_auto: Option<crate::policy::auto::AutoStats>,
    /// Faults per application thread.
    pub faults_per_thread: Vec<ThreadFaults>,
    /// TLB-shootdown IPIs on the whole machine since creation or reset
    /// (`/proc/interrupts`; includes other processes).
    pub tlb_shootdowns_machine: u64,
}

/// The work of a region's mover threads (their own, not that of
/// application threads filling or evicting in their faults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoverWork {
    /// CPU time the movers spent filling and evicting (their threads'
    /// clock: what the work cost, also on a machine where other processes
    /// take turns on the movers' CPUs).
    pub busy_ns: u64,
    /// Wall-clock time the movers spent filling and evicting (not idle).
    #[serde(default)]
    pub busy_wall_ns: u64,
    /// Pages the movers filled.
    pub pages_in: u64,
    /// Pages the movers evicted.
    pub pages_out: u64,
    /// Install calls the movers issued (UFFDIO_COPY, including the resumed
    /// ones after a partial copy).
    pub copy_calls: u64,
    /// Unmap calls the movers issued for their evictions.
    pub unmap_calls: u64,
    /// `movers = auto`: times the movers stood down because the
    /// application kept every CPU busy.
    #[serde(default)]
    pub stand_downs: u64,
    /// `movers = auto`: trials of the other state (working or not), to
    /// see whether the movers pay (see `docs/movers.md`).
    #[serde(default)]
    pub trials: u64,
    /// `movers = auto`: times a trial found that the movers did not pay,
    /// so they stood down (or stayed so).
    #[serde(default)]
    pub unpaid: u64,
    /// `movers = auto`: time the movers spent stood down (counted a
    /// sampling window at a time).
    #[serde(default)]
    pub stood_down_ns: u64,
}

impl MoverWork {
    /// The movers' CPU time per 4 KiB-page round trip (one page in plus one
    /// page out), in ns: busy time over the mean of pages in and out,
    /// scaled to 4 KiB pages. None when the movers moved nothing.
    pub fn ns_per_page_moved(&self, page_bytes: usize) -> Option<f64> {
        let moved = (self.pages_in + self.pages_out) as f64 / 2.0;
        (moved > 0.0).then(|| self.busy_ns as f64 / moved * 4096.0 / page_bytes as f64)
    }
}

impl RegionStats {
    /// Faults that moved or created a page (zero + far fills).
    pub fn fills(&self) -> u64 {
        self.faults_zero_fill + self.faults_far_fill
    }
    /// All faults served (fills + write-protect).
    pub fn faults(&self) -> u64 {
        self.fills() + self.faults_write_protect
    }
}

/// A byte count for people (`24.0 MiB`), formatted without allocating.
pub(crate) struct Bytes(pub(crate) u64);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0 as f64;
        match self.0 {
            n if n >= 1 << 30 => write!(f, "{:.1} GiB", b / (1u64 << 30) as f64),
            n if n >= 1 << 20 => write!(f, "{:.1} MiB", b / (1u64 << 20) as f64),
            n if n >= 1 << 10 => write!(f, "{:.1} KiB", b / (1u64 << 10) as f64),
            n => write!(f, "{n} B"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_faults_costs_and_threads() {
        let s = Stats::new();
        for tid in [7, 7, 9] {
            let mut t = FaultTimer::start();
            std::thread::sleep(std::time::Duration::from_micros(50));
            t.lap(Cost::Transfer);
            s.record_fault(FaultKind::FarFill, tid, t);
        }
        s.record_fault(FaultKind::Spurious, 7, FaultTimer::start());
        let snap = s.snapshot(3, 4096);
        assert_eq!(snap.faults_far_fill, 3);
        assert_eq!(snap.faults_spurious, 1);
        assert_eq!(snap.faults(), 3);
        assert_eq!(snap.resident_bytes, 3 * 4096);
        assert_eq!(
            snap.faults_per_thread,
            vec![
                ThreadFaults { tid: 7, faults: 2 },
                ThreadFaults { tid: 9, faults: 1 }
            ]
        );
        assert!(snap.cost[Cost::Transfer as usize].ns >= 150_000);
        assert!(snap.fault_latency.p50_ns >= 50_000);
        assert_eq!(snap.fault_latency.count, 3);
        s.reset();
        let snap = s.snapshot(0, 4096);
        assert_eq!(snap.faults(), 0);
        assert!(snap.faults_per_thread.is_empty());
    }

    #[test]
    fn thread_table_overflows_gracefully() {
        let t = ThreadTable::new();
        for tid in 1..=(THREAD_SLOTS as u32 + 10) {
            t.add(tid);
        }
        let snap = t.snapshot();
        assert_eq!(
            snap.iter().map(|x| x.faults).sum::<u64>(),
            THREAD_SLOTS as u64 + 10
        );
        assert_eq!(snap.iter().find(|x| x.tid == 0).unwrap().faults, 10);
    }
}
