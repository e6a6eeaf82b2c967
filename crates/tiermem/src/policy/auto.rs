//! `auto`: FIFO until refaults show a cyclic sweep larger than the budget,
//! then scan resistance, and back to FIFO as soon as scan starts evicting
//! pages that come straight back.
//!
//! Why not one fixed policy: on NPB class A, scan moves 12-19% less data
//! than FIFO on CG at 50% and MG and FT at 25% (sweeps over more than the
//! budget), 9-28% more on MG and FT at 50%, and 20x more on IS at 25%,
//! where it evicts the hot buckets a moment after filling them.
//!
//! The policy sees every fill and, through [`Policy::on_evicted`], every
//! page that really left near memory; it stamps each evicted page with the
//! eviction count. A fill of a stamped page is a *refault* at distance
//! `d` (evictions since it left). Per epoch (half the budget in
//! evictions) it looks at three fractions of the refaults:
//! - *sequential*: the page left next to (in eviction order) the page that
//!   refaulted before it. A loop through FIFO refaults in the order it
//!   evicted; random accesses do not.
//! - *short*: `d` below a quarter of the budget: the page came straight
//!   back. Scan on a hot set does that; FIFO on a loop never does.
//! - the refault rate (refaults per eviction): thrashing or not.
//!
//! FIFO switches to scan when most evictions come back, mostly in order,
//! and few come back straight. Scan switches back (the *scan guard*) when
//! short refaults rise above what FIFO showed; each trip holds scan off
//! for twice as long as the last (1, 2, 4 ... 64 epochs), so a program that
//! scan hurts pays for at most a few short epochs. In scan mode every
//! 32nd victim is the oldest page rather than the newest, so the set scan
//! keeps turns over when the program moves on to other data.
//!
//! Both modes use the same two lists as `scan` (a window of recent fills,
//! then everything older in the order it left the window): FIFO takes
//! victims from the old end, scan from the young end, so a switch costs
//! nothing. Every decision is logged (the last [`LOG`]) for the report.

use super::scan::Aged;
use super::Policy;
use serde::{Deserialize, Serialize};
use tiermem_sys::zeroed::ZeroedArray;

/// Decisions kept for the report (the oldest are dropped).
pub const LOG: usize = 32;
/// In scan mode, one victim in this many is the oldest page (aging).
const AGING: u32 = 32;
/// Longest hold-off after a guard trip, in epochs.
const MAX_HOLD: u64 = 64;
/// Smallest epoch, in evictions.
const MIN_EPOCH: u64 = 256;

/// Which order victims come in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Oldest fill first.
    Fifo,
    /// Newest fill outside the protected window first.
    Scan,
}

impl Mode {
    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Fifo => "fifo",
            Mode::Scan => "scan",
        }
    }
}

/// Why `auto` switched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Most evictions came back, in the order they left: a loop larger
    /// than the budget.
    CyclicRefaults,
    /// Scan evicted pages that came straight back.
    ScanGuard,
}

/// One switch, with the epoch's figures that caused it (per mille of the
/// epoch's refaults; the refault rate per mille of its evictions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Evictions so far when the switch happened.
    pub at_eviction: u64,
    /// The new mode.
    pub to: Mode,
    /// Why.
    pub reason: Reason,
    /// Refaults per 1,000 evictions in the epoch.
    pub refault_permille: u32,
    /// Refaults that came straight back, per 1,000 refaults.
    pub short_permille: u32,
    /// Refaults in eviction order, per 1,000 refaults.
    pub sequential_permille: u32,
}

/// What `auto` did, for statistics and reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoStats {
    /// The mode now (`None` before any eviction decision was possible).
    pub mode: Option<Mode>,
    /// Evictions chosen in FIFO mode.
    pub evictions_fifo: u64,
    /// Evictions chosen in scan mode.
    pub evictions_scan: u64,
    /// Switches to scan.
    pub to_scan: u64,
    /// Scan-guard trips (switches back to FIFO).
    pub guard_trips: u64,
    /// Evicted pages that were filled again.
    pub refaults: u64,
    /// Of those, the ones that came straight back.
    pub short_refaults: u64,
    /// The last switches, oldest first.
    pub decisions: Vec<Decision>,
}

#[derive(Clone, Copy, Default)]
struct Epoch {
    evictions: u64,
    refaults: u64,
    short: u64,
    sequential: u64,
}

impl Epoch {
    fn permille(part: u64, whole: u64) -> u32 {
        (part * 1000).checked_div(whole).unwrap_or(0) as u32
    }
}

/// The adaptive policy.
pub struct Auto {
    lists: Aged,
    mode: Mode,
    /// Eviction count when each page last left (0: not evicted since its
    /// last fill).
    left_at: ZeroedArray<u64>,
    evictions: u64,
    last_refault_left_at: u64,
    epoch: Epoch,
    epoch_len: u64,
    short_limit: u64,
    sequential_slack: u64,
    /// Short refaults per mille under FIFO, last epoch.
    fifo_short: u32,
    strikes: u32,
    hold: u64,
    aging: u32,
    stats: AutoStats,
    log: [Option<Decision>; LOG],
    log_next: usize,
}

impl Auto {
    /// A policy for `pages` pages with a budget of `near` pages, protecting
    /// the last `window` fills while in scan mode.
    pub fn new(pages: usize, near: usize, window: usize) -> Auto {
        let near = near.max(1) as u64;
        Auto {
            lists: Aged::new(pages, window),
            mode: Mode::Fifo,
            left_at: ZeroedArray::new(pages)
                .unwrap_or_else(|e| panic!("mapping the refault stamps of {pages} pages: {e}")),
            evictions: 0,
            last_refault_left_at: 0,
            epoch: Epoch::default(),
            epoch_len: (near / 2).max(MIN_EPOCH),
            short_limit: (near / 4).max(64),
            sequential_slack: 64,
            fifo_short: 0,
            strikes: 0,
            hold: 0,
            aging: 0,
            stats: AutoStats::default(),
            log: [None; LOG],
            log_next: 0,
        }
    }

    /// The mode now.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn switch(&mut self, to: Mode, reason: Reason, e: &Epoch) {
        self.mode = to;
        let d = Decision {
            at_eviction: self.evictions,
            to,
            reason,
            refault_permille: Epoch::permille(e.refaults, e.evictions),
            short_permille: Epoch::permille(e.short, e.refaults),
            sequential_permille: Epoch::permille(e.sequential, e.refaults),
        };
        self.log[self.log_next % LOG] = Some(d);
        self.log_next += 1;
    }

    /// The end of an epoch: keep the mode or switch.
    fn decide(&mut self) {
        let e = std::mem::take(&mut self.epoch);
        let refault = Epoch::permille(e.refaults, e.evictions);
        let short = Epoch::permille(e.short, e.refaults);
        let sequential = Epoch::permille(e.sequential, e.refaults);
        match self.mode {
            Mode::Fifo => {
                self.fifo_short = short;
                if self.hold > 0 {
                    self.hold -= 1;
                } else if refault >= 500 && sequential >= 500 && short < 250 {
                    self.stats.to_scan += 1;
                    self.switch(Mode::Scan, Reason::CyclicRefaults, &e);
                }
            }
            Mode::Scan => {
                if short >= (self.fifo_short + 150).max(250) {
                    self.stats.guard_trips += 1;
                    self.strikes += 1;
                    self.hold = (1u64 << self.strikes.min(6)).min(MAX_HOLD);
                    self.switch(Mode::Fifo, Reason::ScanGuard, &e);
                }
            }
        }
    }

    fn record_refault(&mut self, left_at: u64) {
        let d = self.evictions - left_at;
        self.stats.refaults += 1;
        self.epoch.refaults += 1;
        if d < self.short_limit {
            self.stats.short_refaults += 1;
            self.epoch.short += 1;
        }
        if left_at.abs_diff(self.last_refault_left_at) <= self.sequential_slack {
            self.epoch.sequential += 1;
        }
        self.last_refault_left_at = left_at;
    }

    fn next_victim(&mut self) -> Option<usize> {
        let from_old_end = match self.mode {
            Mode::Fifo => true,
            Mode::Scan => {
                self.aging = (self.aging + 1) % AGING;
                self.aging == 0
            }
        };
        let older = &mut self.lists.older;
        let p = if from_old_end {
            older.pop_front()
        } else {
            older.pop_back()
        };
        p.or_else(|| self.lists.recent.pop_front())
    }
}

impl Policy for Auto {
    fn on_fill(&mut self, page: usize) {
        // Read before writing: the stamps are zero-mapped, and a page that
        // never left should cost no memory for its stamp.
        let left_at = self.left_at[page];
        if left_at != 0 {
            self.left_at[page] = 0;
            self.record_refault(left_at);
        }
        self.lists.fill(page);
    }

    fn on_remove(&mut self, page: usize, still_resident: bool) {
        self.lists.remove(page);
        if still_resident {
            // A failed eviction: last in line in either mode's order.
            match self.mode {
                Mode::Fifo => self.lists.older.push_back(page),
                Mode::Scan => self.lists.older.push_front(page),
            }
        }
    }

    fn on_evicted(&mut self, page: usize) {
        self.evictions += 1;
        self.left_at[page] = self.evictions;
        match self.mode {
            Mode::Fifo => self.stats.evictions_fifo += 1,
            Mode::Scan => self.stats.evictions_scan += 1,
        }
        self.epoch.evictions += 1;
        if self.epoch.evictions >= self.epoch_len {
            self.decide();
        }
    }

    fn evictable(&self, page: usize) -> bool {
        self.mode == Mode::Fifo || !self.lists.recent.contains(page)
    }

    fn select_victims(&mut self, out: &mut [usize]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.next_victim() {
                Some(p) => {
                    out[n] = p;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    fn tracked(&self) -> usize {
        self.lists.len()
    }

    fn auto_stats(&self) -> Option<AutoStats> {
        let first = self.log_next.saturating_sub(LOG);
        let decisions = (first..self.log_next).filter_map(|k| self.log[k % LOG]).collect();
        Some(AutoStats {
            mode: Some(self.mode),
            decisions,
            ..self.stats.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::fifo::Fifo;
    use crate::policy::scan::Scan;
    use crate::policy::testing::{misses, xorshift, Sim};

    #[test]
    fn a_loop_larger_than_the_budget_turns_scan_on() {
        let (n, b, passes) = (2000, 1000, 20);
        let loops = || (0..passes).flat_map(|_| 0..n);
        let mut auto = Auto::new(n, b, 50);
        let a = misses(&mut auto, loops(), n, b);
        let f = misses(&mut Fifo::new(n), loops(), n, b);
        let s = misses(&mut Scan::new(n, 50), loops(), n, b);
        assert_eq!(auto.mode(), Mode::Scan);
        let st = auto.auto_stats().unwrap();
        assert_eq!(st.to_scan, 1, "{st:?}");
        assert_eq!(st.decisions[0].reason, Reason::CyclicRefaults);
        // Within a few passes of scan's misses, far below FIFO's.
        assert!(a < s + 4 * n, "auto {a} scan {s} fifo {f}");
        assert!((a as f64) < 0.7 * f as f64, "auto {a} fifo {f}");
    }

    /// IS's ranking: a sequential read of the keys, each key written at
    /// the head of one of many bucket streams that advance slowly. Scan
    /// evicts the stream heads a moment after it filled them.
    fn bucket_streams(passes: usize) -> (Vec<usize>, usize) {
        let (keys, streams, per_stream, per_page, writes_per_key_page) = (3000, 400, 12, 48, 64);
        let n = keys + streams * per_stream;
        let mut r = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut v = Vec::new();
        for _ in 0..passes {
            let mut written = vec![0usize; streams];
            for k in 0..keys {
                v.push(k);
                for _ in 0..writes_per_key_page {
                    let j = (r.next().unwrap() % streams as u64) as usize;
                    let page = (written[j] / per_page).min(per_stream - 1);
                    written[j] += 1;
                    v.push(keys + j * per_stream + page);
                }
            }
        }
        (v, n)
    }

    #[test]
    fn the_scan_guard_keeps_bucket_streams_from_thrashing() {
        let b = 1000;
        let (acc, n) = bucket_streams(6);
        let mut auto = Auto::new(n, b, 50);
        let a = misses(&mut auto, acc.iter().copied(), n, b);
        let f = misses(&mut Fifo::new(n), acc.iter().copied(), n, b);
        let s = misses(&mut Scan::new(n, 50), acc.iter().copied(), n, b);
        assert!(
            s as f64 > 1.5 * f as f64,
            "the workload must hurt scan: scan {s} fifo {f}"
        );
        assert!(
            (a as f64) < 1.1 * f as f64,
            "auto {a} fifo {f} scan {s}: {:?}",
            auto.auto_stats()
        );
    }

    #[test]
    fn uniform_random_accesses_stay_fifo() {
        let (n, b) = (4000, 1000);
        let acc: Vec<usize> = xorshift(88172645463325252)
            .take(200_000)
            .map(|x| (x % n as u64) as usize)
            .collect();
        let mut auto = Auto::new(n, b, 50);
        let a = misses(&mut auto, acc.iter().copied(), n, b);
        let f = misses(&mut Fifo::new(n), acc.iter().copied(), n, b);
        let st = auto.auto_stats().unwrap();
        assert_eq!(st.to_scan, 0, "{st:?}");
        assert_eq!(a, f);
        assert!(st.refaults > 100_000, "{st:?}");
    }

    #[test]
    fn phase_change_turns_the_kept_set_over() {
        // A loop over 0..2000, then a loop over 2000..4000: scan's aging
        // lets the second loop keep part of its own pages.
        let (n, b) = (4000, 1000);
        let acc = (0..10)
            .flat_map(|_| 0..2000)
            .chain((0..30).flat_map(|_| 2000..4000));
        let mut auto = Auto::new(n, b, 50);
        let mut sim = Sim::new(&mut auto, n, b);
        let misses_second = acc
            .enumerate()
            .filter(|&(k, p)| sim.access(p) && k >= 35 * 2000)
            .count();
        // The last 5 passes: FIFO would miss all 10,000 accesses.
        assert!(misses_second < 8_000, "{misses_second} {:?}", auto.auto_stats());
    }

    #[test]
    fn failed_evictions_and_removals_keep_the_lists_consistent() {
        let mut a = Auto::new(16, 8, 2);
        for p in 0..6 {
            a.on_fill(p);
        }
        a.on_remove(3, false);
        a.on_remove(1, true);
        let mut out = [0; 8];
        let k = a.select_victims(&mut out);
        let mut got = out[..k].to_vec();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2, 4, 5]);
        assert_eq!(a.tracked(), 0);
    }
}
