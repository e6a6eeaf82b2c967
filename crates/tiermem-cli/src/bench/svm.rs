//! `tiermem bench svm`: the SVM workloads in SPM and hybrid page modes.

use crate::common::{list, save};
use clap::Args;
use std::path::PathBuf;
use tiermem::config::parse_cpu_list;

#[derive(Args)]
pub struct SvmArgs {
    /// Workloads (comma-separated): bucket, malstone, bfs.
    #[arg(long, default_value = "bucket,malstone,bfs")]
    workloads: String,
    /// Modes: spm-coherent, spm-noncoherent, hybrid (SPM pages coherent),
    /// hybrid-noncoherent (SPM pages noncoherent).
    #[arg(
        long,
        default_value = "spm-coherent,spm-noncoherent,hybrid,hybrid-noncoherent"
    )]
    modes: String,
    /// Process counts (more processes than CPUs oversubscribe them).
    #[arg(long, default_value = "1,2,4")]
    procs: String,
    /// Repetitions (the tables show medians).
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Bucket sort: keys.
    #[arg(long, default_value_t = 4 << 20)]
    keys: usize,
    /// Bucket sort: keys per bucket.
    #[arg(long, default_value_t = 256)]
    bucket_keys: usize,
    /// Malstone: log records.
    #[arg(long, default_value_t = 8 << 20)]
    records: usize,
    /// Malstone: sites.
    #[arg(long, default_value_t = 1 << 16)]
    sites: usize,
    /// BFS: scale (2^scale vertices, 16 edges each).
    #[arg(long, default_value_t = 17)]
    scale: u32,
    /// BFS: roots.
    #[arg(long, default_value_t = 4)]
    roots: usize,
    /// BFS: black-list entries (8 bytes each).
    #[arg(long, default_value_t = 16384)]
    black_list: usize,
    /// CPUs to pin processes to, round-robin (default: all).
    #[arg(long)]
    cpus: Option<String>,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: SvmArgs) -> Result<(), String> {
    use tiermem_workloads::svm::{self as w, BenchMode, SvmBenchParams, Workload};
    let workloads = list(&a.workloads, "workload", Workload::parse)?;
    let modes = list(&a.modes, "mode", BenchMode::parse)?;
    let procs = list(&a.procs, "process count", |x| {
        x.parse::<usize>().ok().filter(|&n| (1..=32).contains(&n))
    })?;
    let cpus = match &a.cpus {
        Some(c) => parse_cpu_list(c)?,
        None => (0..tiermem_sys::thread::online_cpus()).collect(),
    };
    if a.keys == 0 || a.bucket_keys == 0 || a.records == 0 || a.sites == 0 || a.black_list == 0 {
        return Err("sizes must be positive".into());
    }
    if !(4..=24).contains(&a.scale) || a.roots == 0 {
        return Err("BFS scale must be 4 to 24 and roots positive".into());
    }
    let prm = SvmBenchParams {
        keys: a.keys,
        bucket_keys: a.bucket_keys,
        records: a.records,
        sites: a.sites,
        scale: a.scale,
        roots: a.roots,
        black_list: a.black_list,
    };
    if procs.iter().any(|&n| n > cpus.len()) {
        eprintln!(
            "bench svm: more processes than the {} CPUs used: they share CPUs (oversubscribed)",
            cpus.len()
        );
    }
    let b = w::bench(&workloads, &modes, &procs, a.reps, &prm, &cpus, |r| {
        eprintln!(
            "[{} {} x{}] {:.3} s, {} faults, {} diffs{}",
            r.workload.name(),
            r.mode.name(),
            r.procs,
            r.seconds,
            r.faults(),
            r.stats.diffs,
            if r.valid { "" } else { "  INVALID" }
        );
    })?;
    print!("{}", w::render(&b));
    println!("times: the measured part (bucket: all four steps; malstone: all three; bfs: the BFS kernel over all roots); counters: whole run, all processes; verified against a 1-process spm-coherent run");
    save(&b, &a.json, &a.plot, |b, pl| {
        w::plot(b, pl).map(|()| vec![pl.to_owned()])
    })?;
    if b.runs.iter().any(|r| !r.valid) {
        return Err("a run failed verification".into());
    }
    Ok(())
}
