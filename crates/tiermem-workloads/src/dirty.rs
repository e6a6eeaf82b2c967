//! `tiermem bench dirty`: the two dirty-tracking designs on the access
//! patterns where they differ, over a region twice its budget.
//!
//! - `read`: one load per page; pages stay clean, evictions drop them.
//! - `write`: one store per page; pages are filled writable, written back.
//! - `read-then-write`: a load, then later a store to the same page (two
//!   instructions): with `wp-fault` the store takes a second fault; with
//!   `wp-async` it is resolved in the kernel, and eviction pays a freeze
//!   (`mprotect`) and a `PAGEMAP_SCAN` instead.
//!
//! Sweeps are cyclic and larger than the budget, so every access misses.

use crate::report::{first_seen, median_by, mib, Machine, Table};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tiermem::{Config, DirtyTracking, Region};

/// Access patterns.
pub const PATTERNS: &[&str] = &["read", "write", "read-then-write"];

/// One measurement.
#[derive(Clone, Debug, Serialize)]
pub struct DirtyRecord {
    /// Dirty tracking mode.
    pub dirty: String,
    /// Access pattern.
    pub pattern: String,
    /// Wall time of the timed passes.
    pub seconds: f64,
    /// Per page touched.
    pub us_per_page: f64,
    /// Fills from the far store.
    pub far_fills: u64,
    /// Write-protect faults.
    pub wp_faults: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Pages written back.
    pub write_backs: u64,
    /// Unmap calls.
    pub evict_calls: u64,
    /// TLB-shootdown IPIs on the machine.
    pub tlb_shootdowns: u64,
}

/// The result file.
#[derive(Clone, Debug, Serialize)]
pub struct DirtyResult {
    /// Always "dirty".
    pub benchmark: &'static str,
    /// Command line.
    pub command: String,
    /// Machine.
    pub machine: Machine,
    /// Region size.
    pub virt_bytes: u64,
    /// Budget.
    pub near_bytes: u64,
    /// Timed passes per pattern.
    pub passes: usize,
    /// Rounds (interleaved).
    pub rounds: usize,
    /// Records (one per round, mode and pattern).
    pub results: Vec<DirtyRecord>,
}

fn sweep(words: &[std::sync::atomic::AtomicU64], pattern: &str) {
    let stride = 512;
    match pattern {
        "read" => {
            for k in (0..words.len()).step_by(stride) {
                std::hint::black_box(words[k].load(Ordering::Relaxed));
            }
        }
        "write" => {
            for k in (0..words.len()).step_by(stride) {
                words[k].store(k as u64, Ordering::Relaxed);
            }
        }
        _ => {
            for k in (0..words.len()).step_by(stride) {
                let v = words[k].load(Ordering::Relaxed);
                words[k + 1].store(v.wrapping_add(1), Ordering::Relaxed);
            }
        }
    }
}

/// Runs every pattern under every mode, `rounds` times interleaved.
pub fn run(
    virt: u64,
    near: u64,
    passes: usize,
    rounds: usize,
    modes: &[DirtyTracking],
    mut progress: impl FnMut(&str),
) -> Result<DirtyResult, tiermem::Error> {
    let mut results = Vec::new();
    for round in 0..rounds {
        for pattern in PATTERNS {
            for &m in modes {
                let mut c = Config::new(virt, near);
                c.dirty_tracking = m;
                // Per-page signatures: one fault per page touched, and the
                // dirty-tracking mechanism itself (the rewrite hint would
                // install pages written before writable: no wp fault).
                c.fault_around = false;
                c.rewrite_hint = false;
                c.install = tiermem::InstallMethod::Copy;
                let r = Region::new(c)?;
                let words = r.as_atomic_u64();
                // Populate every page (written once) so that passes move data.
                sweep(words, "write");
                r.evict_all()?;
                r.reset_stats();
                let tlb0 = tiermem_sys::interrupts::tlb_shootdowns();
                let t = Instant::now();
                for _ in 0..passes {
                    sweep(words, pattern);
                }
                let seconds = t.elapsed().as_secs_f64();
                let tlb = tiermem_sys::interrupts::tlb_shootdowns() - tlb0;
                let s = r.stats();
                let pages = (virt / 4096) as f64 * passes as f64;
                progress(&format!(
                    "round {}/{rounds}: {pattern:<16} {:<9} {seconds:.2}s",
                    round + 1,
                    m.name()
                ));
                results.push(DirtyRecord {
                    dirty: m.name().into(),
                    pattern: pattern.to_string(),
                    seconds,
                    us_per_page: seconds * 1e6 / pages,
                    far_fills: s.faults_far_fill,
                    wp_faults: s.faults_write_protect,
                    evictions: s.evictions,
                    write_backs: s.write_backs,
                    evict_calls: s.evict_calls,
                    tlb_shootdowns: tlb,
                });
            }
        }
    }
    Ok(DirtyResult {
        benchmark: "dirty",
        command: crate::report::command_line(),
        machine: Machine::collect(),
        virt_bytes: virt,
        near_bytes: near,
        passes,
        rounds,
        results,
    })
}

/// Median of the rounds per pattern and mode, as a table.
pub fn table(r: &DirtyResult) -> String {
    let mut t = Table::new(&[
        "pattern",
        "dirty",
        "seconds",
        "us/page",
        "fills",
        "wp faults",
        "evictions",
        "written back",
        "evict calls",
        "TLB IPIs",
    ]);
    for (pattern, dirty) in first_seen(r.results.iter().map(|x| (&x.pattern, &x.dirty))) {
        let same: Vec<&DirtyRecord> = r
            .results
            .iter()
            .filter(|y| &y.pattern == pattern && &y.dirty == dirty)
            .collect();
        let m = median_by(&same, |y| y.seconds);
        t.row(vec![
            m.pattern.clone(),
            m.dirty.clone(),
            format!("{:.2}", m.seconds),
            format!("{:.2}", m.us_per_page),
            m.far_fills.to_string(),
            m.wp_faults.to_string(),
            m.evictions.to_string(),
            format!("{} MiB", mib(m.write_backs * 4096)),
            m.evict_calls.to_string(),
            m.tlb_shootdowns.to_string(),
        ]);
    }
    t.render()
}

/// Bars of us/page per pattern and mode (median of rounds).
pub fn plot(r: &DirtyResult, path: &std::path::Path) -> Result<(), String> {
    let samples: Vec<(String, String, f64)> = r
        .results
        .iter()
        .map(|x| (x.pattern.clone(), x.dirty.clone(), x.us_per_page))
        .collect();
    let bars = crate::plot::median_bars(&samples);
    crate::plot::grouped_bars(
        path,
        &format!(
            "dirty tracking: cost per page, {} MiB over {} MiB",
            r.virt_bytes >> 20,
            r.near_bytes >> 20
        ),
        "microseconds per page (median, whisker max)",
        &bars,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_show_their_signature() {
        let r = run(4 << 20, 2 << 20, 1, 1, DirtyTracking::ALL, |_| {}).unwrap();
        let get = |p: &str, d: &str| {
            r.results
                .iter()
                .find(|x| x.pattern == p && x.dirty == d)
                .unwrap()
                .clone()
        };
        let pages = 1024;
        // Reads never write back; writes always do.
        for d in ["wp-fault", "wp-async"] {
            assert_eq!(get("read", d).write_backs, 0, "{d}");
            assert!(get("write", d).write_backs > 0, "{d}");
            assert_eq!(get("read", d).far_fills, pages, "{d}: every access misses");
        }
        // Only wp-fault takes a fault for the write after a read.
        assert_eq!(get("read-then-write", "wp-fault").wp_faults, pages);
        assert_eq!(get("read-then-write", "wp-async").wp_faults, 0);
        assert!(
            get("read-then-write", "wp-async").write_backs > 0,
            "async found the writes"
        );
        assert!(table(&r).contains("read-then-write"));
    }
}
