//! `tiermem bench svm`: the SVM workloads in SPM and hybrid page modes.

use crate::common::{list, save_chart};
use clap::Args;
use std::path::PathBuf;
use tiermem::config::parse_cpu_list;

#[derive(Args)]
pub struct SvmArgs {
    /// Workloads (comma-separated): bucket, malstone, bfs, locks.
    #[arg(long, default_value = "bucket,malstone,bfs,locks")]
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
    /// Locks: items counted into the shared histogram.
    #[arg(long, default_value_t = 1 << 20)]
    lock_items: usize,
    /// Locks: items per task taken from the shared queue.
    #[arg(long, default_value_t = 4096)]
    lock_task: usize,
    /// Locks: pages of bins (512 bins each, one lock per page; at most 64).
    #[arg(long, default_value_t = 16)]
    lock_stripes: usize,
    /// CPUs to pin processes to, round-robin (default: all).
    #[arg(long)]
    cpus: Option<String>,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run inside an MPI job (start with mpirun; needs the `mpi` feature):
    /// every rank is one SVM process, `--procs` is the world size, modes
    /// default to spm-coherent,dsm,hybrid.
    #[arg(long)]
    mpi: bool,
    /// Append one JSON line per run to this file (with --mpi: rank 0; a
    /// forked team's runs as system "tiermem-local"), for `tiermem bench
    /// svm-compare`.
    #[arg(long)]
    record_file: Option<PathBuf>,
    /// Write the BFS workload's graph (at --scale) to this file for
    /// ArgoDSM's benchmark, and exit.
    #[arg(long)]
    export_graph: Option<PathBuf>,
}

impl SvmArgs {
    /// The workloads' sizes given on the command line.
    fn params(&self) -> tiermem_workloads::svm::SvmBenchParams {
        tiermem_workloads::svm::SvmBenchParams {
            keys: self.keys,
            bucket_keys: self.bucket_keys,
            records: self.records,
            sites: self.sites,
            scale: self.scale,
            roots: self.roots,
            black_list: self.black_list,
            lock_items: self.lock_items,
            lock_task: self.lock_task,
            lock_stripes: self.lock_stripes,
        }
    }
}

/// Appends one JSON line per record to `f`.
fn append_records(
    f: &std::path::Path,
    records: impl Iterator<Item = tiermem_workloads::svm::Record>,
) -> Result<(), String> {
    use std::io::Write;
    let mut fh = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(f)
        .map_err(|e| format!("{}: {e}", f.display()))?;
    for rec in records {
        let line = serde_json::to_string(&rec).map_err(|e| e.to_string())?;
        writeln!(fh, "{line}").map_err(|e| format!("{}: {e}", f.display()))?;
    }
    Ok(())
}

/// `bench svm --mpi`: every workload and mode `reps` times inside this MPI
/// job, interleaved; rank 0 reports.
fn run_mpi(a: SvmArgs) -> Result<(), String> {
    use tiermem_workloads::svm::{self as w, BenchMode, Workload};
    let workloads = list(&a.workloads, "workload", Workload::parse)?;
    let default_modes = "spm-coherent,spm-noncoherent,hybrid,hybrid-noncoherent";
    let modes_arg = if a.modes == default_modes {
        "spm-coherent,dsm,hybrid"
    } else {
        &a.modes
    };
    let modes = list(modes_arg, "mode", BenchMode::parse)?;
    let prm = a.params();
    let mut runs = Vec::new();
    for rep in 0..a.reps.max(1) {
        for &wl in &workloads {
            for &m in &modes {
                if let Some(r) = w::run_one_mpi(wl, m, &prm, rep)? {
                    eprintln!(
                        "[{} {} {} ranks {} nodes] {:.3} s, {} fetches ({} over the network), {} diffs{}",
                        wl.name(),
                        m.name(),
                        r.procs,
                        r.nodes,
                        r.seconds,
                        r.stats.fetches,
                        r.stats.net_fetch_pages,
                        r.stats.diffs,
                        if r.valid { "" } else { "  INVALID" }
                    );
                    if let Some(f) = &a.record_file {
                        append_records(f, std::iter::once(w::Record::of(&r)))?;
                    }
                    runs.push(r);
                }
            }
        }
    }
    if runs.is_empty() {
        return Ok(()); // not rank 0
    }
    let records: Vec<w::Record> = runs.iter().map(w::Record::of).collect();
    let c = w::compare(records)?;
    print!("{}", w::render_comparison(&c));
    save_chart(&c, &a.json, &a.plot, w::plot_comparison)?;
    if runs.iter().any(|r| !r.valid) {
        return Err("a run failed its checks".into());
    }
    Ok(())
}

/// `bench svm-compare`: tables and a chart from JSON-line records.
pub fn compare(records: &[PathBuf], json: Option<PathBuf>, plot: Option<PathBuf>) -> Result<(), String> {
    use tiermem_workloads::svm as w;
    let mut all = Vec::new();
    for f in records {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let r: w::Record =
                serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", f.display(), i + 1))?;
            all.push(r);
        }
    }
    let c = w::compare(all)?;
    print!("{}", w::render_comparison(&c));
    println!("times: medians of the measured part, seconds; valid: the workload's checks and the checksum of the one-rank run");
    save_chart(&c, &json, &plot, w::plot_comparison)?;
    if c.records.iter().any(|r| !r.valid) {
        return Err("a run failed verification".into());
    }
    Ok(())
}

pub fn run(a: SvmArgs) -> Result<(), String> {
    use tiermem_workloads::svm::{self as w, BenchMode, Workload};
    if let Some(g) = &a.export_graph {
        w::export_graph(a.scale, g)?;
        eprintln!("wrote {}", g.display());
        return Ok(());
    }
    if a.mpi {
        return run_mpi(a);
    }
    let workloads = list(&a.workloads, "workload", Workload::parse)?;
    let modes = list(&a.modes, "mode", BenchMode::parse)?;
    let procs = list(&a.procs, "process count", |x| {
        x.parse::<usize>().ok().filter(|&n| (1..=32).contains(&n))
    })?;
    let cpus = match &a.cpus {
        Some(c) => parse_cpu_list(c)?,
        None => (0..tiermem_sys::thread::online_cpus()).collect(),
    };
    if a.keys == 0
        || a.bucket_keys == 0
        || a.records == 0
        || a.sites == 0
        || a.black_list == 0
        || a.lock_items == 0
        || a.lock_task == 0
        || !(1..=w::LOCK_STRIPES_MAX).contains(&a.lock_stripes)
    {
        return Err("sizes must be positive (and at most 64 lock stripes)".into());
    }
    if !(4..=24).contains(&a.scale) || a.roots == 0 {
        return Err("BFS scale must be 4 to 24 and roots positive".into());
    }
    let prm = a.params();
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
    if let Some(f) = &a.record_file {
        // The forked team's runs, for the MPI comparison (system
        // "tiermem-local": the same protocol over LocalShm).
        append_records(
            f,
            b.runs.iter().map(|r| {
                let mut rec = w::Record::of(r);
                rec.system = "tiermem-local".into();
                rec
            }),
        )?;
    }
    save_chart(&b, &a.json, &a.plot, w::plot)?;
    if b.runs.iter().any(|r| !r.valid) {
        return Err("a run failed verification".into());
    }
    Ok(())
}
