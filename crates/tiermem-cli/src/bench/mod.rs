//! `tiermem bench`: the benchmark workloads, one module each (one per
//! family where workloads share their options and tables, as the
//! translation workloads do). Adding a workload: a module with its `Args`
//! struct and a `run`, and a variant in [`Bench`] with its arm in [`run`].

use clap::Subcommand;
use std::path::PathBuf;

mod dirty;
mod faults;
mod metadata;
mod npb;
mod overshadow;
mod random;
mod router;
mod stencil;
mod svm;
mod team_evict;
mod translation;

#[derive(Subcommand)]
pub enum Bench {
    /// Latency of one 4 KiB fault by kind and fault-serving design.
    Faults(Box<faults::FaultsArgs>),
    /// Paper 1's 2D 9-point heat stencil: none, sync, prefetch, kernel-swap.
    Stencil(Box<stencil::StencilArgs>),
    /// The two dirty-tracking designs on read, write, read-then-write sweeps.
    Dirty(dirty::DirtyArgs),
    /// Random read-modify-write updates (GUPS-style) per policy and movers.
    Random(random::RandomArgs),
    /// Team mode: evicting pages only the evicting worker maps, workers as
    /// threads (one page table) vs processes (a page table each).
    TeamEvict(team_evict::TeamEvictArgs),
    /// Paper 2's Overshadow: naive, copy-then-access, overshadow (whole /
    /// per-page switch) over memory, a cold file and an emulated link.
    Overshadow(Box<overshadow::OvershadowArgs>),
    /// HPCC RandomAccess (GUPS) per page backing and provider.
    Gups(Box<translation::GupsArgs>),
    /// Graph500 BFS (Kronecker graph, CSR, 64 validated searches, TEPS).
    Bfs(Box<translation::BfsArgs>),
    /// NPB-style conjugate gradient over a random sparse SPD matrix.
    Cg(Box<translation::CgArgs>),
    /// Pointer chasing: ns per dependent access per backing and size.
    Chase(Box<translation::ChaseArgs>),
    /// Tables (and a chart) again from a gups/bfs/cg/chase JSON file.
    TranslationReport {
        /// The JSON file.
        json: PathBuf,
        /// Draw the SVG chart here.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// Paper 5's SVM workloads (bucket sort, Malstone, BFS with a black
    /// list) in SPM and hybrid page modes across processes; with `--mpi`,
    /// inside an MPI job (one rank per process, one node or many).
    Svm(Box<svm::SvmArgs>),
    /// Tables and a chart from the JSON-line records of `bench svm --mpi`
    /// and ArgoDSM's benchmark (benches/argodsm): tiermem against ArgoDSM,
    /// every run verified against the one-rank run.
    SvmCompare {
        /// Record files (JSON lines).
        records: Vec<PathBuf>,
        /// Write the comparison as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Draw an SVG chart.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// The fault router's lookup cost with 1, 100, 10,000 registered ranges.
    Router(router::RouterArgs),
    /// Resident memory a region's metadata costs by virtual size (1 GiB,
    /// 1 TiB, 64 TiB): at creation and after touching 16 MiB.
    Metadata(metadata::MetadataArgs),
    /// The NAS Parallel Benchmarks (NPB-CPP), unmodified, under `tiermem
    /// run`: the heap on 4k/THP/2m/1g pages (paper 3) and tiering against
    /// kernel swap (paper 1), every run verified by the benchmark.
    Npb(Box<npb::NpbArgs>),
    /// (internal) the kernel-swap child of `bench stencil`.
    #[command(hide = true)]
    StencilChild {
        /// Parameters as JSON.
        #[arg(long)]
        params: String,
    },
}

/// Runs the benchmark chosen.
pub fn run(b: Bench) -> Result<(), String> {
    match b {
        Bench::Faults(a) => faults::run(*a),
        Bench::Stencil(a) => stencil::run(*a),
        Bench::Dirty(a) => dirty::run(a),
        Bench::Random(a) => random::run(a),
        Bench::Gups(a) => translation::bench_gups(*a),
        Bench::Bfs(a) => translation::bench_bfs(*a),
        Bench::Cg(a) => translation::bench_cg(*a),
        Bench::Chase(a) => translation::bench_chase(*a),
        Bench::TranslationReport { json, plot } => translation::translation_report(&json, &plot),
        Bench::TeamEvict(a) => team_evict::run(a),
        Bench::Svm(a) => svm::run(*a),
        Bench::SvmCompare { records, json, plot } => svm::compare(&records, json, plot),
        Bench::Overshadow(a) => overshadow::run(*a),
        Bench::Router(a) => router::run(a),
        Bench::Metadata(a) => metadata::run(a),
        Bench::Npb(a) => npb::run(*a),
        Bench::StencilChild { params } => stencil::child(&params),
    }
}
