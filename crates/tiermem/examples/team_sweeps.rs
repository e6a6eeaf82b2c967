//! Sweeps over a team region with and without dirty tracking: what the
//! write-protected read fills save where pages are only read, and what
//! they cost where pages are read, then written.
//!
//! ```sh
//! cargo run --release -p tiermem --example team_sweeps -- [rounds]
//! ```
//!
//! 256 MiB over 128 MiB, 2 worker processes on CPUs 0 and 1. Each worker
//! writes its half once, then sweeps it three times reading a word per
//! 64 bytes (`read`), or also writing one word per page (`read+write`).
//! Prints one line per run (rounds interleave the four configurations).

use std::sync::atomic::Ordering;
use std::time::Instant;
use tiermem::team::{TeamConfig, TeamKind, TeamRegion};

const VIRT: usize = 256 << 20;
const NEAR: usize = 128 << 20;

fn run(dirty_tracking: bool, write: bool) -> Result<(), tiermem::Error> {
    let mut cfg = TeamConfig::new(VIRT, NEAR, 2);
    cfg.cpus = (0..tiermem_sys::thread::online_cpus()).collect();
    cfg.dirty_tracking = dirty_tracking;
    let team = TeamRegion::new(cfg)?;
    let words = VIRT / 8;
    team.run(TeamKind::Processes, |w| {
        let a = w.atomics();
        let mine = words * w.rank() / 2..words * (w.rank() + 1) / 2;
        for k in mine.clone().step_by(8) {
            a[k].store(k as u64, Ordering::Relaxed);
        }
        w.barrier()?;
        let t = Instant::now();
        let mut sum = 0u64;
        for _ in 0..3 {
            for k in mine.clone().step_by(8) {
                sum = sum.wrapping_add(a[k].load(Ordering::Relaxed));
                if write && k % 512 == 0 {
                    a[k].store(k as u64, Ordering::Relaxed);
                }
            }
        }
        w.barrier()?;
        if w.rank() == 0 {
            w.scratch()[0].store(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        // Every word was written with its own index: the sum is known.
        let want = mine.step_by(8).map(|k| k as u64).fold(0u64, u64::wrapping_add);
        if sum != want.wrapping_mul(3) {
            return Err(tiermem::Error::Usage(format!("worker {}: wrong sum", w.rank())));
        }
        Ok(())
    })?;
    let t = team.stats().total();
    println!(
        "{:<10} {:<11} {:>7.3} s  evictions {:>7}  clean {:>7}  wp faults {:>6}  written back {:>4} MiB  evict {:.2} us/page",
        if team.config().dirty_tracking { "dirty" } else { "no-dirty" },
        if write { "read+write" } else { "read" },
        team.scratch()[0].load(Ordering::Relaxed) as f64 / 1e9,
        t.evictions,
        t.clean_evictions,
        t.wp_faults,
        t.bytes_out >> 20,
        t.evict_ns as f64 / t.evictions.max(1) as f64 / 1e3
    );
    Ok(())
}

fn main() -> Result<(), tiermem::Error> {
    let rounds: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    for _ in 0..rounds {
        for (dirty, write) in [(true, false), (false, false), (true, true), (false, true)] {
            run(dirty, write)?;
        }
    }
    Ok(())
}
