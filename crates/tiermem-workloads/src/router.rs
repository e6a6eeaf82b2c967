//! The fault router's lookup cost: how long the signal handler takes to
//! find the range of a faulting address among 1, 100 or 10,000 registered
//! ranges (`tiermem bench router`).
//!
//! It measures the router's own table type ([`RangeTable`]) with the
//! router's value type (an `Arc`, cloned and dropped per lookup, as the
//! handler does), on addresses spread over all ranges in a random order so
//! that the binary search does not run from a warm path.

use crate::report::{quantile, Machine, Table};
use crate::rng::Rng;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use tiermem_sys::ranges::RangeTable;

/// Lookups timed together (one sample): long enough for the clock, short
/// enough for a preemption to spoil only one sample.
const BATCH: usize = 256;

/// The lookup cost with `ranges` ranges registered.
#[derive(Clone, Debug, Serialize)]
pub struct LookupCost {
    /// Ranges in the table.
    pub ranges: usize,
    /// Median ns per lookup (over samples of 256 lookups).
    pub p50_ns: f64,
    /// 99th percentile of the per-sample mean.
    pub p99_ns: f64,
    /// Fastest sample.
    pub min_ns: f64,
    /// Samples taken.
    pub samples: usize,
}

/// A whole run, as written to JSON.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// The command.
    pub command: String,
    /// One entry per table size.
    pub results: Vec<LookupCost>,
}

/// Measures lookups among `ranges` registered ranges, `samples` batches.
pub fn measure(ranges: usize, samples: usize) -> LookupCost {
    let table: RangeTable<Arc<u64>> = RangeTable::new();
    // Ranges of 64 KiB every 1 MiB, from an address no mapping uses: the
    // table only stores numbers.
    let base = 0x1000_0000_0000usize;
    for k in 0..ranges {
        let start = base + (k << 20);
        table
            .insert(start, start + (64 << 10), Arc::new(k as u64))
            .expect("disjoint ranges");
    }
    let mut rng = Rng::new(0x7ab1e);
    let addrs: Vec<usize> = (0..4096)
        .map(|_| {
            let k = rng.below(ranges as u64) as usize;
            base + (k << 20) + rng.below(64 << 10) as usize
        })
        .collect();
    let mut hits = 0u64;
    let mut per_lookup = Vec::with_capacity(samples);
    for s in 0..samples + samples / 10 {
        let at = (s * BATCH) % addrs.len();
        let t = Instant::now();
        for &a in &addrs[at..at + BATCH] {
            if let Some(v) = table.get(a) {
                hits += *v & 1;
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / BATCH as f64;
        // The first tenth warms caches and branch predictors.
        if s >= samples / 10 {
            per_lookup.push(ns);
        }
    }
    std::hint::black_box(hits);
    let min_ns = per_lookup.iter().cloned().fold(f64::INFINITY, f64::min);
    LookupCost {
        ranges,
        p50_ns: quantile(&mut per_lookup, 0.5),
        p99_ns: quantile(&mut per_lookup, 0.99),
        min_ns,
        samples,
    }
}

/// Runs [`measure`] for each table size and prints a table.
pub fn run(sizes: &[usize], samples: usize) -> Report {
    let results: Vec<LookupCost> = sizes.iter().map(|&n| measure(n, samples)).collect();
    let mut t = Table::new(&["ranges", "p50 ns", "p99 ns", "min ns", "samples"]);
    for r in &results {
        t.row(vec![
            r.ranges.to_string(),
            format!("{:.1}", r.p50_ns),
            format!("{:.1}", r.p99_ns),
            format!("{:.1}", r.min_ns),
            r.samples.to_string(),
        ]);
    }
    println!("fault router lookup (RangeTable::get + Arc clone/drop), {BATCH} lookups per sample");
    print!("{}", t.render());
    Report {
        machine: Machine::collect(),
        command: crate::report::command_line(),
        results,
    }
}

/// Draws the median lookup time per table size (whisker: p99) to `path`.
pub fn plot(r: &Report, path: &std::path::Path) -> Result<(), String> {
    let bars: Vec<crate::plot::Bar> = r
        .results
        .iter()
        .map(|c| crate::plot::Bar {
            group: format!("{} ranges", c.ranges),
            series: "lookup".into(),
            value: c.p50_ns,
            upper: Some(c.p99_ns),
        })
        .collect();
    crate::plot::grouped_bars(
        path,
        "Fault router lookup",
        "ns per lookup (p50, whisker p99)",
        &bars,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_find_their_ranges_and_time_something() {
        let r = measure(100, 50);
        assert_eq!(r.ranges, 100);
        assert_eq!(r.samples, 50);
        assert!(r.p50_ns > 0.0 && r.p50_ns <= r.p99_ns && r.min_ns <= r.p50_ns);
    }
}
