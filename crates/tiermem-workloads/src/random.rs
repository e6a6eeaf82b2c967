//! `tiermem bench random`: random read-modify-write updates over a tiered
//! region (HPCC RandomAccess-style: `T[r & (N-1)] ^= r` for a pseudo-random
//! stream `r`), where neither prefetch nor a replacement policy can help:
//! it shows what they cost when they cannot win. Verified by replaying the
//! stream (XOR twice restores `T[i] = i`).

use crate::report::{first_seen, median_by, Machine, Table};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tiermem::{Config, PolicyKind, Region};

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct RandomRecord {
    /// Replacement policy.
    pub policy: String,
    /// Mover threads.
    pub movers: usize,
    /// Updates applied.
    pub updates: u64,
    /// Wall time of the timed updates.
    pub seconds: f64,
    /// Millions of updates per second.
    pub mups: f64,
    /// Demand faults.
    pub faults: u64,
    /// Bytes moved in and out.
    pub bytes_moved: u64,
    /// Prefetched pages (should be few: there are no streams).
    pub prefetch_issued: u64,
    /// Whether the replay restored every word.
    pub valid: bool,
    /// Fault time per cost category, ns.
    pub cost_ns: Vec<(String, u64)>,
    /// Unmap calls for evictions.
    pub evict_calls: u64,
    /// TLB-shootdown IPIs on the machine during the timed updates.
    pub tlb_ipis: u64,
    /// Pages evicted by movers (the rest by faulting threads).
    pub mover_evictions: u64,
    /// Times the movers paused asynchronous eviction (scattered victims).
    pub eviction_pauses: u64,
    /// Whether fault-around was on.
    pub fault_around: bool,
    /// Neighbours fault-around installed (should be few: no locality).
    pub fault_around_installed: u64,
    /// Median fault service time, ns (robust to a loaded machine, unlike
    /// the wall time).
    pub fault_p50_ns: u64,
}

/// The result file.
#[derive(Clone, Debug, Serialize)]
pub struct RandomResult {
    /// Always "random".
    pub benchmark: &'static str,
    /// Command line.
    pub command: String,
    /// Machine.
    pub machine: Machine,
    /// Table size in bytes.
    pub virt_bytes: u64,
    /// Budget.
    pub near_bytes: u64,
    /// Application threads.
    pub threads: usize,
    /// Records.
    pub results: Vec<RandomRecord>,
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn updates(words: &[std::sync::atomic::AtomicU64], n: u64, threads: usize) {
    let mask = words.len() as u64 - 1;
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut x = 0x2545_f491_4f6c_dd1d ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                for _ in 0..n / threads as u64 {
                    let r = next(&mut x);
                    words[(r & mask) as usize].fetch_xor(r, Ordering::Relaxed);
                }
            });
        }
    });
}

/// Runs `updates` random updates per policy and mover setting.
#[allow(clippy::too_many_arguments)]
pub fn run(
    virt: u64,
    near: u64,
    n: u64,
    threads: usize,
    policies: &[PolicyKind],
    movers: &[usize],
    fault_around: &[bool],
    rounds: usize,
    mut progress: impl FnMut(&str),
) -> Result<RandomResult, tiermem::Error> {
    let mut results = Vec::new();
    for round in 0..rounds {
        for &m in movers {
            for (&p, &fa) in policies
                .iter()
                .flat_map(|p| fault_around.iter().map(move |fa| (p, fa)))
            {
                let mut c = Config::new(virt, near);
                // TIERMEM_* settings apply (TIERMEM_INSTALL, _DIRTY, ...);
                // the bench's own options over them.
                for w in c.apply_vars(|v| std::env::var(v).ok()) {
                    eprintln!("{w}");
                }
                c.policy = p;
                c.movers = m;
                c.fault_around = fa;
                let r = Region::new(c)?;
                let words = r.as_atomic_u64();
                assert!(words.len().is_power_of_two(), "table size must be a power of two");
                for (i, w) in words.iter().enumerate() {
                    w.store(i as u64, Ordering::Relaxed);
                }
                r.reset_stats();
                let t = Instant::now();
                updates(words, n, threads);
                let seconds = t.elapsed().as_secs_f64();
                r.settle();
                let s = r.stats();
                updates(words, n, threads);
                let valid = words
                    .iter()
                    .enumerate()
                    .all(|(i, w)| w.load(Ordering::Relaxed) == i as u64);
                progress(&format!(
                    "round {}/{rounds}: {p:<5} movers={m} fault-around={}: {seconds:.2}s, valid {valid}",
                    round + 1,
                    on_off(fa)
                ));
                results.push(RandomRecord {
                    policy: p.name().into(),
                    movers: m,
                    updates: n,
                    seconds,
                    mups: n as f64 / seconds / 1e6,
                    faults: s.faults(),
                    bytes_moved: s.bytes_in + s.bytes_out,
                    prefetch_issued: s.prefetch.issued,
                    valid,
                    cost_ns: s.cost.iter().map(|c| (c.category.to_owned(), c.ns)).collect(),
                    evict_calls: s.evict_calls,
                    tlb_ipis: s.tlb_shootdowns_machine,
                    mover_evictions: s.mover_evictions,
                    eviction_pauses: s.eviction_pauses,
                    fault_around: fa,
                    fault_around_installed: s.fault_around.installed,
                    fault_p50_ns: s.fault_latency.p50_ns,
                });
            }
        }
    }
    Ok(RandomResult {
        benchmark: "random",
        command: crate::report::command_line(),
        machine: Machine::collect(),
        virt_bytes: virt,
        near_bytes: near,
        threads,
        results,
    })
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// Median per policy, mover setting and fault-around, with the cost
/// against FIFO (same movers and fault-around), then fault-around on
/// against off.
pub fn table(r: &RandomResult) -> String {
    let mut t = Table::new(&[
        "policy",
        "movers",
        "fault-around",
        "seconds",
        "min..max",
        "Mupdates/s",
        "vs fifo",
        "faults",
        "fault p50 us",
        "GiB moved",
        "prefetched",
        "neighbours",
        "TLB IPIs",
        "by movers",
        "pauses",
        "valid",
    ]);
    let keys = first_seen(
        r.results
            .iter()
            .map(|x| (x.policy.as_str(), x.movers, x.fault_around)),
    );
    let runs_of = |p: &str, m: usize, fa: bool| -> Vec<&RandomRecord> {
        r.results
            .iter()
            .filter(|x| x.policy == p && x.movers == m && x.fault_around == fa)
            .collect()
    };
    let mut vs_off = String::new();
    for &(p, m, fa) in &keys {
        let runs = runs_of(p, m, fa);
        let x = median_by(&runs, |y| y.seconds);
        let (lo, hi) = runs.iter().fold((f64::MAX, 0.0f64), |(lo, hi), y| {
            (lo.min(y.seconds), hi.max(y.seconds))
        });
        let fifo = keys
            .contains(&("fifo", m, fa))
            .then(|| median_by(&runs_of("fifo", m, fa), |y| y.seconds).seconds);
        if fa && keys.contains(&(p, m, false)) {
            let offs = runs_of(p, m, false);
            let off = median_by(&offs, |y| y.seconds).seconds;
            let p50 = |v: &[&RandomRecord]| median_by(v, |y| y.fault_p50_ns as f64).fault_p50_ns as f64 / 1e3;
            vs_off += &format!(
                "{p} movers={m}: fault-around on vs off: {:+.1}% seconds (medians {:.2} vs {off:.2}), fault p50 {:.2} vs {:.2} us\n",
                (x.seconds / off - 1.0) * 100.0,
                x.seconds,
                p50(&runs),
                p50(&offs)
            );
        }
        t.row(vec![
            p.to_owned(),
            m.to_string(),
            on_off(fa).to_owned(),
            format!("{:.2}", x.seconds),
            format!("{lo:.2}..{hi:.2}"),
            format!("{:.2}", x.mups),
            fifo.map_or("-".into(), |f| format!("{:+.1}%", (x.seconds / f - 1.0) * 100.0)),
            x.faults.to_string(),
            format!(
                "{:.2}",
                median_by(&runs, |y| y.fault_p50_ns as f64).fault_p50_ns as f64 / 1e3
            ),
            format!("{:.2}", x.bytes_moved as f64 / (1u64 << 30) as f64),
            x.prefetch_issued.to_string(),
            x.fault_around_installed.to_string(),
            x.tlb_ipis.to_string(),
            x.mover_evictions.to_string(),
            x.eviction_pauses.to_string(),
            runs.iter().all(|y| y.valid).to_string(),
        ]);
    }
    t.render() + &vs_off
}

/// Draws the seconds per policy (median, whisker max), grouped by movers.
pub fn plot(r: &RandomResult, path: &std::path::Path) -> Result<(), String> {
    let samples: Vec<(String, String, f64)> = r
        .results
        .iter()
        .map(|x| (format!("movers={}", x.movers), x.policy.clone(), x.seconds))
        .collect();
    crate::plot::grouped_bars(
        path,
        &format!(
            "random updates: {} updates over {} MiB, {} MiB near",
            r.results.first().map_or(0, |x| x.updates),
            r.virt_bytes >> 20,
            r.near_bytes >> 20
        ),
        "seconds (median, whisker max)",
        &crate::plot::median_bars(&samples),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_verifies() {
        let r = run(
            4 << 20,
            1 << 20,
            20_000,
            2,
            PolicyKind::ALL,
            &[0, 1],
            &[true],
            1,
            |_| {},
        )
        .unwrap();
        assert_eq!(r.results.len(), PolicyKind::ALL.len() * 2);
        assert!(
            r.results.iter().all(|x| x.valid && x.faults > 1000),
            "{:?}",
            r.results
        );
        assert!(table(&r).contains("scan"));
        let p = std::env::temp_dir().join(format!("tiermem-random-{}.svg", std::process::id()));
        plot(&r, &p).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert!(svg.contains("movers=1") && svg.contains("clock"));
    }
}
