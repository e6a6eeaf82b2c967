//! Paper 5's workloads on the shared virtual memory ([`tiermem::svm`]):
//! bucket sort, a Malstone-style log analysis and a Graph500-style BFS
//! with a read-only black list, each in
//!
//! - `spm-coherent`: every page SPM, plain shared memory (what a
//!   cache-coherent machine runs);
//! - `spm-noncoherent`: every page SPM with the noncoherent flavour
//!   (written lines flushed at release, others' lines invalidated at
//!   acquire): the paper's "SPM" baseline (Intel SMC on the SCC);
//! - `hybrid`: the paper's choice of modes per phase, SPM pages coherent
//!   (what the protocol costs over plain shared memory);
//! - `hybrid-noncoherent`: the same modes, SPM pages noncoherent (the
//!   paper's "Hybrid" on non-coherent hardware).
//!
//! Every run is verified against the single-process `spm-coherent` run
//! (a checksum of the result) and by the workload's own checks.
//!
//! The BFS runs on a Graph500 graph ([`crate::graph500`]: Kronecker
//! generator with permuted vertices, CSR by kernel 1) with its own
//! level-synchronous bottom-up BFS over the shared heap, checked by the
//! level rules (every reached vertex has a neighbour one level up, no edge
//! spans two levels, unreached vertices have no reached neighbour).

use crate::report::{command_line, Machine, Table};
use serde::Serialize;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::Instant;
use tiermem::svm::{SpmFlavour, Svm, SvmConfig, SvmMode, SvmProc, SvmStats};
use tiermem::Error;

mod compare;
mod kernels;

pub use compare::*;
use kernels::{bfs, bucket, locks, malstone, pages, GRAPH_SEED, S_ERR, S_PHASE, S_SUM};

const PAGE: usize = 4096;

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Workload {
    /// Parallel bucket sort (keys generated, bucketed, sorted per bucket,
    /// merged).
    Bucket,
    /// Malstone-A-style: ratio of compromised visits per site.
    Malstone,
    /// Bottom-up BFS with a black-list check per visited vertex.
    Bfs,
    /// A histogram built under locks: processes take tasks from a shared
    /// queue (a counter under lock 0) and add each task's counts into the
    /// shared bins, one lock per page of bins.
    Locks,
}

impl Workload {
    /// Name on command lines.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Bucket => "bucket",
            Workload::Malstone => "malstone",
            Workload::Bfs => "bfs",
            Workload::Locks => "locks",
        }
    }
    /// Parses a name.
    pub fn parse(s: &str) -> Option<Workload> {
        [
            Workload::Bucket,
            Workload::Malstone,
            Workload::Bfs,
            Workload::Locks,
        ]
        .into_iter()
        .find(|w| w.name() == s)
    }
}

/// Page-mode policy of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BenchMode {
    /// All SPM, coherent flavour.
    SpmCoherent,
    /// All SPM, noncoherent flavour.
    SpmNoncoherent,
    /// Paper's per-phase modes, SPM pages coherent.
    Hybrid,
    /// Paper's per-phase modes, SPM pages noncoherent.
    HybridNoncoherent,
    /// Every allocation DSM in every process (coherent flavour): what a
    /// DSM without SPM (ArgoDSM) does.
    Dsm,
}

impl BenchMode {
    /// Name on command lines.
    pub fn name(self) -> &'static str {
        match self {
            BenchMode::SpmCoherent => "spm-coherent",
            BenchMode::SpmNoncoherent => "spm-noncoherent",
            BenchMode::Hybrid => "hybrid",
            BenchMode::HybridNoncoherent => "hybrid-noncoherent",
            BenchMode::Dsm => "dsm",
        }
    }
    /// Parses a name.
    pub fn parse(s: &str) -> Option<BenchMode> {
        [
            BenchMode::SpmCoherent,
            BenchMode::SpmNoncoherent,
            BenchMode::Hybrid,
            BenchMode::HybridNoncoherent,
            BenchMode::Dsm,
        ]
        .into_iter()
        .find(|m| m.name() == s)
    }
    fn flavour(self) -> SpmFlavour {
        match self {
            BenchMode::SpmCoherent | BenchMode::Hybrid | BenchMode::Dsm => SpmFlavour::Coherent,
            _ => SpmFlavour::Noncoherent,
        }
    }
    fn hybrid(self) -> bool {
        matches!(self, BenchMode::Hybrid | BenchMode::HybridNoncoherent)
    }
}

/// Problem sizes.
#[derive(Clone, Debug, Serialize)]
pub struct SvmBenchParams {
    /// Bucket sort: keys (u32).
    pub keys: usize,
    /// Bucket sort: keys per bucket on average (a power of two).
    pub bucket_keys: usize,
    /// Malstone: log records (8 bytes each).
    pub records: usize,
    /// Malstone: sites.
    pub sites: usize,
    /// BFS: scale (2^scale vertices, 16 edges per vertex).
    pub scale: u32,
    /// BFS: roots searched.
    pub roots: usize,
    /// BFS: black-list entries (u64 ids; 16384 is the paper's 128 KiB).
    pub black_list: usize,
    /// Locks: items counted (u64 values hashed into bins).
    pub lock_items: usize,
    /// Locks: items per task taken from the shared queue.
    pub lock_task: usize,
    /// Locks: pages of bins (512 u64 bins each), one lock per page
    /// (at most [`LOCK_STRIPES_MAX`]).
    pub lock_stripes: usize,
}

/// The most bin pages of the lock workload (locks 1..=this; lock 0 guards
/// the queue).
pub const LOCK_STRIPES_MAX: usize = 64;
/// Bins per page of the lock workload.
const LOCK_BINS: usize = PAGE / 8;

impl Default for SvmBenchParams {
    fn default() -> Self {
        SvmBenchParams {
            keys: 4 << 20,
            bucket_keys: 256,
            records: 8 << 20,
            sites: 1 << 16,
            scale: 17,
            roots: 4,
            black_list: 16384,
            lock_items: 1 << 20,
            lock_task: 4096,
            lock_stripes: 16,
        }
    }
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct SvmRun {
    /// Workload.
    pub workload: Workload,
    /// Mode.
    pub mode: BenchMode,
    /// Processes.
    pub procs: usize,
    /// Nodes the processes spanned (1: a forked team or a one-node MPI job).
    pub nodes: usize,
    /// Repetition.
    pub rep: usize,
    /// Time of the measured part (see the workload), seconds.
    pub seconds: f64,
    /// Phases of the measured part, seconds.
    pub phases: Vec<(String, f64)>,
    /// Checksum of the result.
    pub checksum: u64,
    /// Matches the single-process run and passed the workload's checks.
    pub valid: bool,
    /// Protocol counters, summed over the processes, whole run.
    pub stats: SvmStats,
}

impl SvmRun {
    /// Page faults of the protocol (read, write, SPM write).
    pub fn faults(&self) -> u64 {
        self.stats.read_faults + self.stats.write_faults + self.stats.spm_write_faults
    }
}

fn heap_bytes(w: Workload, prm: &SvmBenchParams, procs: usize) -> usize {
    let slack = 16 * PAGE;
    slack
        + match w {
            Workload::Bucket => {
                let nb = (prm.keys / prm.bucket_keys).next_power_of_two().max(1);
                2 * pages(prm.keys * 4) + pages(procs * nb * 4)
            }
            Workload::Malstone => pages(prm.records * 8) + (procs + 1) * pages(2 * prm.sites * 4),
            Workload::Bfs => {
                let nv = 1usize << prm.scale;
                pages((nv + 1) * 4) + pages(32 * nv * 4) + pages(nv * 4) + pages(prm.black_list * 8)
            }
            Workload::Locks => PAGE + prm.lock_stripes.clamp(1, LOCK_STRIPES_MAX) * PAGE,
        }
}

/// Runs `w` once in `mode` on `procs` processes (pinned round-robin to
/// `cpus`). `valid` reflects the workload's own checks only; the caller
/// compares the checksum with the single-process run.
pub fn run_one(
    w: Workload,
    mode: BenchMode,
    procs: usize,
    prm: &SvmBenchParams,
    cpus: &[usize],
    rep: usize,
) -> Result<SvmRun, String> {
    let mut cfg = SvmConfig::new(heap_bytes(w, prm, procs), procs);
    cfg.flavour = mode.flavour();
    cfg.cpus = cpus.to_vec();
    let svm = Svm::new(cfg).map_err(|e| e.to_string())?;
    svm.run(|p| match w {
        Workload::Bucket => bucket(p, prm, mode),
        Workload::Malstone => malstone(p, prm, mode),
        Workload::Bfs => bfs(p, prm, mode),
        Workload::Locks => locks(p, prm, mode),
    })
    .map_err(|e| format!("{} {} x{procs}: {e}", w.name(), mode.name()))?;
    let sc = svm.scratch();
    let phases: Vec<(String, f64)> = phase_names(w)
        .iter()
        .enumerate()
        .map(|(k, n)| (n.to_string(), sc[S_PHASE + k].load(Relaxed) as f64 / 1e9))
        .collect();
    Ok(SvmRun {
        workload: w,
        mode,
        procs,
        nodes: 1,
        rep,
        seconds: phases.iter().map(|x| x.1).sum(),
        phases,
        checksum: sc[S_SUM].load(Relaxed),
        valid: sc[S_ERR].load(Relaxed) == 0,
        stats: svm.total_stats(),
    })
}

/// A comparison of two modes at one process count (median times).
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// Workload.
    pub workload: Workload,
    /// Processes.
    pub procs: usize,
    /// `numerator / denominator` of times.
    pub what: String,
    /// The ratio.
    pub ratio: f64,
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct SvmBench {
    /// "svm".
    pub benchmark: &'static str,
    /// The machine.
    pub machine: Machine,
    /// The command.
    pub command: String,
    /// Sizes.
    pub params: SvmBenchParams,
    /// CPUs processes were pinned to (round-robin).
    pub cpus: Vec<usize>,
    /// Every run.
    pub runs: Vec<SvmRun>,
    /// Mode comparisons.
    pub ratios: Vec<Ratio>,
}

impl SvmBench {
    fn median(&self, w: Workload, m: BenchMode, procs: usize) -> Option<f64> {
        let mut v: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.workload == w && r.mode == m && r.procs == procs)
            .map(|r| r.seconds)
            .collect();
        (!v.is_empty()).then(|| crate::report::quantile(&mut v, 0.5))
    }
}

/// Runs every workload x mode x process count `reps` times, interleaved,
/// after a single-process `spm-coherent` reference run per workload.
pub fn bench(
    workloads: &[Workload],
    modes: &[BenchMode],
    procs: &[usize],
    reps: usize,
    prm: &SvmBenchParams,
    cpus: &[usize],
    mut progress: impl FnMut(&SvmRun),
) -> Result<SvmBench, String> {
    let mut reference = Vec::new();
    for &w in workloads {
        let r = run_one(w, BenchMode::SpmCoherent, 1, prm, cpus, 0)?;
        reference.push((w, r.checksum));
    }
    let mut runs = Vec::new();
    for rep in 0..reps.max(1) {
        for &n in procs {
            for &w in workloads {
                for &m in modes {
                    let mut r = run_one(w, m, n, prm, cpus, rep)?;
                    let want = reference.iter().find(|x| x.0 == w).map(|x| x.1);
                    r.valid &= want == Some(r.checksum);
                    progress(&r);
                    runs.push(r);
                }
            }
        }
    }
    let mut b = SvmBench {
        benchmark: "svm",
        machine: Machine::collect(),
        command: command_line(),
        params: prm.clone(),
        cpus: cpus.to_vec(),
        runs,
        ratios: Vec::new(),
    };
    let pairs = [
        (BenchMode::Hybrid, BenchMode::SpmCoherent),
        (BenchMode::SpmNoncoherent, BenchMode::Hybrid),
        (BenchMode::SpmNoncoherent, BenchMode::HybridNoncoherent),
        (BenchMode::SpmNoncoherent, BenchMode::SpmCoherent),
    ];
    for &w in workloads {
        for &n in procs {
            for (a, c) in pairs {
                if let (Some(x), Some(y)) = (b.median(w, a, n), b.median(w, c, n)) {
                    b.ratios.push(Ratio {
                        workload: w,
                        procs: n,
                        what: format!("{} / {}", a.name(), c.name()),
                        ratio: x / y,
                    });
                }
            }
        }
    }
    Ok(b)
}

/// The results as tables: runs (median per configuration) and ratios.
pub fn render(b: &SvmBench) -> String {
    let mut t = Table::new(&[
        "workload",
        "mode",
        "procs",
        "time s",
        "speedup",
        "faults",
        "twins",
        "diffs",
        "diff KiB",
        "notices",
        "invalid.",
        "lines flushed",
        "lines inval.",
        "valid",
    ]);
    let mut seen = Vec::new();
    for r in &b.runs {
        let key = (r.workload, r.mode, r.procs);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let med = b.median(r.workload, r.mode, r.procs).unwrap_or(r.seconds);
        let one = b.median(r.workload, r.mode, 1);
        let all_valid = b
            .runs
            .iter()
            .filter(|x| (x.workload, x.mode, x.procs) == key)
            .all(|x| x.valid);
        let s = &r.stats;
        t.row(vec![
            r.workload.name().into(),
            r.mode.name().into(),
            r.procs.to_string(),
            format!("{med:.3}"),
            one.map_or("-".into(), |o| format!("{:.2}", o / med)),
            r.faults().to_string(),
            s.twins.to_string(),
            s.diffs.to_string(),
            format!("{:.0}", s.diff_bytes as f64 / 1024.0),
            s.notices_sent.to_string(),
            s.invalidations.to_string(),
            s.lines_flushed.to_string(),
            s.lines_invalidated.to_string(),
            if all_valid { "yes".into() } else { "NO".into() },
        ]);
    }
    let mut out = t.render();
    let mut q = Table::new(&["workload", "procs", "ratio of times", "value"]);
    for r in &b.ratios {
        q.row(vec![
            r.workload.name().into(),
            r.procs.to_string(),
            r.what.clone(),
            format!("{:.3}", r.ratio),
        ]);
    }
    out.push('\n');
    out.push_str(&q.render());
    out
}

/// Bars of the median time per (workload, processes), one per mode.
pub fn plot(b: &SvmBench, path: &std::path::Path) -> Result<(), String> {
    let samples: Vec<(String, String, f64)> = b
        .runs
        .iter()
        .map(|r| {
            (
                format!("{} x{}", r.workload.name(), r.procs),
                r.mode.name().to_string(),
                r.seconds,
            )
        })
        .collect();
    crate::plot::grouped_bars(
        path,
        "SVM workloads: time by page-mode policy (lower is better)",
        "seconds",
        &crate::plot::median_bars(&samples),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock workload on a forked team: every mode at 2 and 3 processes
    /// gives the one-process checksum, passes its checks and takes locks.
    #[test]
    fn lock_workload_matches_one_process() {
        let prm = SvmBenchParams {
            lock_items: 40_000,
            lock_task: 1000,
            lock_stripes: 4,
            ..SvmBenchParams::default()
        };
        let cpus: Vec<usize> = (0..tiermem_sys::thread::online_cpus()).collect();
        let one = run_one(Workload::Locks, BenchMode::SpmCoherent, 1, &prm, &cpus, 0).unwrap();
        assert!(one.valid);
        for procs in [2, 3] {
            for mode in [
                BenchMode::SpmCoherent,
                BenchMode::SpmNoncoherent,
                BenchMode::Hybrid,
                BenchMode::Dsm,
            ] {
                let r = run_one(Workload::Locks, mode, procs, &prm, &cpus, 0).unwrap();
                assert!(r.valid, "{} x{procs}: checks failed", mode.name());
                assert_eq!(r.checksum, one.checksum, "{} x{procs}", mode.name());
                // 40 tasks + the final empty take per process, 4 locks a task.
                assert_eq!(r.stats.locks, 40 * 5 + procs as u64, "{} x{procs}", mode.name());
            }
        }
    }
}
