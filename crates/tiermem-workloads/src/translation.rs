//! The translation-overhead benchmarks (`tiermem bench gups|bfs|cg|chase`)
//! over every backing and provider: one [`Record`] per run, a table with
//! setup time apart from the timed kernel and time normalized to the 1 GiB
//! backing (paper 4, Fig. 5-6), a table of speedups over 4 KiB pages per
//! thread count (paper 3), JSON and an SVG chart.

use crate::memory::{allocate, Backing, Memory, MemoryError, Provider, TierStats};
use crate::report::{first_seen, Machine, Table};
use crate::{cg, chase, graph500, gups};
use serde::{Deserialize, Serialize};

/// One run of a workload over one backing and provider at one thread count.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Record {
    /// `gups`, `bfs`, `cg` or `chase`.
    pub workload: String,
    /// The problem size as the workload states it.
    pub size: String,
    /// `4k`, `thp`, `2m` or `1g`.
    pub backing: String,
    /// `hand`, `tiered` or `segment`.
    pub provider: String,
    /// Near budget of a tiered run.
    pub near_bytes: Option<u64>,
    /// Threads of the timed kernel.
    pub threads: usize,
    /// Bytes the workload's arrays take.
    pub footprint_bytes: u64,
    /// Bytes mapped (the footprint rounded up to whole pages).
    pub mapped_bytes: u64,
    /// Page granule of the backing.
    pub page_bytes: u64,
    /// Mapping and population (hand) or region creation (tiered).
    pub setup_seconds: f64,
    /// Building the input (table, graph, matrix, cycle); not timed.
    pub init_seconds: f64,
    /// The timed kernel.
    pub seconds: f64,
    /// Verification passed.
    pub valid: bool,
    /// Giga-updates per second (gups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gups: Option<f64>,
    /// Harmonic mean of traversed edges per second (bfs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub teps_hmean: Option<f64>,
    /// Floating-point rate (cg).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gflops: Option<f64>,
    /// Nanoseconds per dependent access (chase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_per_access: Option<f64>,
    /// CPUs the kernel's threads ran on.
    pub cpus: Vec<Option<usize>>,
    /// Tiering counters of the timed kernel (tiered runs).
    pub tier: Option<TierStats>,
    /// Round of a repeated measurement (0, 1, ...).
    #[serde(default)]
    pub round: usize,
    /// The workload's own outcome.
    pub detail: serde_json::Value,
}

impl Record {
    fn rate(&self) -> String {
        if let Some(g) = self.gups {
            if g >= 0.001 {
                format!("{g:.4} GUPS")
            } else {
                format!("{g:.2e} GUPS")
            }
        } else if let Some(t) = self.teps_hmean {
            format!("{:.1} MTEPS", t / 1e6)
        } else if let Some(g) = self.gflops {
            format!("{g:.3} GFLOP/s")
        } else if let Some(n) = self.ns_per_access {
            format!("{n:.1} ns")
        } else {
            "-".into()
        }
    }
}

/// The result file of one benchmark command.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TranslationResult {
    /// `gups`, `bfs`, `cg` or `chase`.
    pub benchmark: String,
    /// Command line.
    pub command: String,
    /// Machine (absent when read back from a file).
    #[serde(skip_deserializing)]
    pub machine: Option<Machine>,
    /// Runs.
    pub records: Vec<Record>,
    /// Backing/provider/size combinations that could not be set up, and why.
    pub skipped: Vec<String>,
}

/// Runs `job` for every size, backing and provider, each in fresh memory of
/// `footprint(size)` bytes. A combination that cannot be set up (no huge
/// pages in the pool, an unsupported provider) is reported and skipped.
#[allow(clippy::too_many_arguments)]
pub fn sweep<S>(
    workload: &str,
    sizes: &[S],
    backings: &[Backing],
    providers: &[Provider],
    footprint: impl Fn(&S) -> usize,
    label: impl Fn(&S) -> String,
    mut job: impl FnMut(&mut dyn Memory, &S) -> Result<Vec<Record>, MemoryError>,
    progress: &mut dyn FnMut(&str),
) -> TranslationResult {
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    for s in sizes {
        let bytes = footprint(s);
        for &b in backings {
            for &p in providers {
                let what = format!("{workload} {} {b} {}", label(s), p.name());
                let mut a = match allocate(b, p, bytes) {
                    Ok(a) => a,
                    Err(e) => {
                        progress(&format!("{what}: skipped: {e}"));
                        skipped.push(format!("{what}: {e}"));
                        continue;
                    }
                };
                progress(&format!(
                    "{what}: {} MiB set up in {:.2}s",
                    bytes >> 20,
                    a.setup_seconds
                ));
                match job(a.memory.as_mut(), s) {
                    Ok(rs) => {
                        for mut r in rs {
                            r.workload = workload.into();
                            r.size = label(s);
                            r.backing = b.name().into();
                            r.provider = p.name().into();
                            r.near_bytes = match p {
                                Provider::Tiered { near, .. } => Some(near),
                                _ => None,
                            };
                            r.footprint_bytes = bytes as u64;
                            r.mapped_bytes = a.mapped_bytes as u64;
                            r.page_bytes = a.memory.page_bytes() as u64;
                            r.setup_seconds = a.setup_seconds;
                            progress(&format!(
                                "{what} threads={}: kernel {:.3}s, {}, valid {}",
                                r.threads,
                                r.seconds,
                                r.rate(),
                                r.valid
                            ));
                            records.push(r);
                        }
                    }
                    Err(e) => {
                        progress(&format!("{what}: failed: {e}"));
                        skipped.push(format!("{what}: {e}"));
                    }
                }
            }
        }
    }
    TranslationResult {
        benchmark: workload.into(),
        command: crate::report::command_line(),
        machine: Some(Machine::collect()),
        records,
        skipped,
    }
}

fn detail(v: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// GUPS records for a table of `2^log2` words at each thread count.
pub fn gups_job(
    mem: &mut dyn Memory,
    log2: u32,
    updates: Option<u64>,
    threads: &[usize],
) -> Result<Vec<Record>, MemoryError> {
    threads
        .iter()
        .map(|&t| {
            let o = gups::run(mem, log2, updates, t)?;
            Ok(Record {
                threads: t,
                init_seconds: o.init_seconds,
                seconds: o.seconds,
                valid: o.valid,
                gups: Some(o.gups),
                cpus: o.cpus.clone(),
                tier: o.tier,
                detail: detail(&o),
                ..Record::default()
            })
        })
        .collect()
}

/// BFS records for a graph of `scale` at each thread count.
pub fn bfs_job(
    mem: &mut dyn Memory,
    scale: u32,
    edgefactor: u32,
    roots: usize,
    threads: &[usize],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Record>, MemoryError> {
    let outs = graph500::run(mem, scale, edgefactor, 1, roots, threads, progress)?;
    Ok(outs
        .into_iter()
        .map(|(t, o)| Record {
            threads: t,
            init_seconds: o.generate_seconds + o.construction_seconds,
            seconds: o.bfs_seconds.iter().sum(),
            valid: o.valid,
            teps_hmean: Some(o.teps_hmean),
            cpus: o.cpus.clone(),
            detail: detail(&o),
            ..Record::default()
        })
        .collect())
}

/// CG records for `n` rows at each thread count.
pub fn cg_job(
    mem: &mut dyn Memory,
    n: usize,
    nonzeros: usize,
    iterations: usize,
    threads: &[usize],
) -> Result<Vec<Record>, MemoryError> {
    Ok(cg::run(mem, n, nonzeros, iterations, 1, threads)?
        .into_iter()
        .map(|o| Record {
            threads: o.threads,
            init_seconds: o.init_seconds,
            seconds: o.seconds,
            valid: o.check.valid,
            gflops: Some(o.gflops),
            cpus: o.cpus.clone(),
            tier: o.tier,
            detail: detail(&o),
            ..Record::default()
        })
        .collect())
}

/// The pointer-chasing record for `bytes` bytes.
pub fn chase_job(mem: &mut dyn Memory, bytes: usize, steps: u64) -> Result<Vec<Record>, MemoryError> {
    let o = chase::run(mem, bytes, steps, 1)?;
    Ok(vec![Record {
        threads: 1,
        init_seconds: o.init_seconds,
        seconds: o.seconds,
        valid: o.valid,
        ns_per_access: Some(o.ns_per_access),
        cpus: vec![tiermem_sys::thread::current_cpu()],
        tier: o.tier,
        detail: detail(&o),
        ..Record::default()
    }])
}

fn find<'a>(recs: &'a [Record], x: &Record, backing: &str, provider: &str) -> Option<&'a Record> {
    recs.iter().find(|y| {
        y.size == x.size && y.threads == x.threads && y.backing == backing && y.provider == provider
    })
}

/// The 1 GiB reference of `x`: a segment run, else a run by hand.
fn reference_1g<'a>(recs: &'a [Record], x: &Record) -> Option<&'a Record> {
    find(recs, x, "1g", "segment").or_else(|| find(recs, x, "1g", "hand"))
}

type Key<'a> = (&'a str, &'a str, &'a str, usize, Option<u64>);

fn key(x: &Record) -> Key<'_> {
    (&x.size, &x.backing, &x.provider, x.threads, x.near_bytes)
}

/// The best run (least kernel time: the one the other tenants of a shared
/// machine disturbed least) of each size, backing, provider and thread
/// count over the rounds, with the (min, max) kernel seconds and whether
/// every round verified.
fn best(recs: &[Record]) -> Vec<(Record, (f64, f64), bool)> {
    first_seen(recs.iter().map(key))
        .into_iter()
        .map(|k| {
            let runs: Vec<&Record> = recs.iter().filter(|x| key(x) == k).collect();
            let m = runs
                .iter()
                .copied()
                .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
                .expect("a run");
            let lo = runs.iter().map(|x| x.seconds).fold(f64::MAX, f64::min);
            let hi = runs.iter().map(|x| x.seconds).fold(0.0, f64::max);
            (m.clone(), (lo, hi), runs.iter().all(|x| x.valid))
        })
        .collect()
}

/// All runs (the best of repeated rounds): setup, input, kernel, rate,
/// time normalized to 1 GiB pages, tiering counters.
pub fn table(r: &TranslationResult) -> String {
    let med = best(&r.records);
    let recs: Vec<Record> = med.iter().map(|m| m.0.clone()).collect();
    let mut t = Table::new(&[
        "size",
        "backing",
        "provider",
        "thr",
        "footprint MiB",
        "setup s",
        "init s",
        "kernel s",
        "min..max",
        "rounds",
        "rate",
        "vs 1g",
        "faults",
        "evictions",
        "GiB moved",
        "valid",
    ]);
    for (x, (lo, hi), valid) in &med {
        let rounds = r.records.iter().filter(|y| key(y) == key(x)).count();
        let tier = x.tier.unwrap_or_default();
        let has_tier = x.tier.is_some();
        t.row(vec![
            x.size.clone(),
            x.backing.clone(),
            match x.near_bytes {
                Some(n) => format!("{} near {}M", x.provider, n >> 20),
                None => x.provider.clone(),
            },
            x.threads.to_string(),
            (x.footprint_bytes >> 20).to_string(),
            format!("{:.3}", x.setup_seconds),
            format!("{:.2}", x.init_seconds),
            format!("{:.3}", x.seconds),
            format!("{lo:.3}..{hi:.3}"),
            rounds.to_string(),
            x.rate(),
            reference_1g(&recs, x).map_or("-".into(), |g| format!("{:.2}", x.seconds / g.seconds)),
            if has_tier {
                tier.faults.to_string()
            } else {
                "-".into()
            },
            if has_tier {
                tier.evictions.to_string()
            } else {
                "-".into()
            },
            if has_tier {
                format!("{:.2}", tier.bytes_moved as f64 / (1u64 << 30) as f64)
            } else {
                "-".into()
            },
            valid.to_string(),
        ]);
    }
    t.render()
}

/// Speedup of each larger page over 4 KiB pages (kernel time of 4k divided
/// by the backing's), per size, provider and thread count.
pub fn speedup_table(r: &TranslationResult) -> String {
    let recs: Vec<Record> = best(&r.records).into_iter().map(|m| m.0).collect();
    let mut t = Table::new(&["size", "provider", "thr", "thp/4k", "2m/4k", "1g/4k"]);
    for (size, provider, threads) in first_seen(recs.iter().map(|x| (&x.size, &x.provider, x.threads))) {
        let Some(base) = recs.iter().find(|y| {
            &y.size == size && &y.provider == provider && y.threads == threads && y.backing == "4k"
        }) else {
            continue;
        };
        let cell = |b: &str| {
            find(&recs, base, b, provider).map_or("-".into(), |y| format!("{:.2}x", base.seconds / y.seconds))
        };
        t.row(vec![
            size.clone(),
            provider.clone(),
            threads.to_string(),
            cell("thp"),
            cell("2m"),
            cell("1g"),
        ]);
    }
    t.render()
}

/// Bars of kernel time normalized to the 1 GiB run (or to 4 KiB when there
/// is none), grouped by size, provider and threads, one series per backing.
pub fn plot(r: &TranslationResult, path: &std::path::Path) -> Result<(), String> {
    let recs: Vec<Record> = best(&r.records).into_iter().map(|m| m.0).collect();
    let mut bars = Vec::new();
    for x in &recs {
        let reference = reference_1g(&recs, x).or_else(|| find(&recs, x, "4k", &x.provider));
        let Some(g) = reference else { continue };
        bars.push(crate::plot::Bar {
            group: format!("{} {} t={}", x.size, x.provider, x.threads),
            series: x.backing.clone(),
            value: x.seconds / g.seconds,
            upper: None,
        });
    }
    let fp = r.records.iter().map(|x| x.footprint_bytes).max().unwrap_or(0);
    crate::plot::grouped_bars(
        path,
        &format!(
            "{}: kernel time (best of rounds) normalized to 1 GiB pages (footprints up to {} MiB)",
            r.benchmark,
            fp >> 20
        ),
        "time / time with 1g (4k where no 1g run)",
        &bars,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_runs_verified_by_hand_and_tiered() {
        let providers = [
            Provider::Hand,
            Provider::Tiered {
                near: 1 << 20,
                fault_around: true,
            },
        ];
        let backings = [Backing::Small4K, Backing::Thp];
        let mut quiet = |_: &str| {};
        let g = sweep(
            "gups",
            &[18u32],
            &backings,
            &providers,
            |&l| gups::footprint(l),
            |l| format!("2^{l}"),
            |m, &l| gups_job(m, l, Some(20_000), &[1, 2]),
            &mut quiet,
        );
        // Both backings by hand and tiered, at 1 and 2 threads.
        assert_eq!(g.records.len(), 8, "{:?}", g.skipped);
        assert!(g.skipped.is_empty(), "{:?}", g.skipped);
        assert!(g.records.iter().all(|x| x.valid));
        assert!(g
            .records
            .iter()
            .any(|x| x.provider == "tiered" && x.backing == "thp"));
        let tiered = g.records.iter().find(|x| x.provider == "tiered").unwrap();
        assert!(tiered.tier.unwrap().faults > 0);
        assert!(speedup_table(&g).contains("thp/4k"));
        assert!(table(&g).contains("near 1M"));
        let c = sweep(
            "cg",
            &[2048usize],
            &[Backing::Small4K],
            &[Provider::Hand],
            |&n| cg::footprint(n, 8),
            |n| format!("n={n}"),
            |m, &n| cg_job(m, n, 8, 30, &[1, 2]),
            &mut quiet,
        );
        assert!(c.records.len() == 2 && c.records.iter().all(|x| x.valid));
        let ch = sweep(
            "chase",
            &[1usize << 20],
            &backings,
            &[Provider::Hand],
            |&b| b,
            |b| format!("{}K", b >> 10),
            |m, &b| chase_job(m, b, 50_000),
            &mut quiet,
        );
        assert!(ch.records.len() == 2 && ch.records.iter().all(|x| x.valid));
        let p = std::env::temp_dir().join(format!("tiermem-chase-{}.svg", std::process::id()));
        plot(&ch, &p).unwrap();
        std::fs::remove_file(&p).unwrap();
        let mut progress = |_: &str| {};
        let b = sweep(
            "bfs",
            &[8u32],
            &[Backing::Small4K],
            &[Provider::Hand],
            |&s| graph500::footprint(s, 16),
            |s| format!("SCALE {s}"),
            |m, &s| bfs_job(m, s, 16, 8, &[1, 2], &mut progress),
            &mut quiet,
        );
        assert!(b.records.len() == 2 && b.records.iter().all(|x| x.valid && x.teps_hmean.unwrap() > 0.0));
    }
}
