//! The `tiermem` command: what this machine offers tiermem, and the
//! benchmarks (`tiermem bench faults`, `tiermem bench stencil`).

use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use tiermem::config::{format_size, parse_cpu_list, parse_size};
use tiermem::{Config, DirtyTracking, FarStoreConfig, FaultPath, InstallMethod, PageSize, PolicyKind};
use tiermem_workloads::faults::{self, FaultBenchParams};
use tiermem_workloads::kernel_swap::SwapKind;
use tiermem_workloads::memory::{Backing, MemoryError, Provider};
use tiermem_workloads::modes::{self, BenchSpec, Launcher, ModeSpec, Placement};
use tiermem_workloads::report::write_json;
use tiermem_workloads::stencil::StencilParams;
use tiermem_workloads::team_stencil::TeamMode;
use tiermem_workloads::{cg, graph500, gups, translation};

#[derive(Parser)]
#[command(
    name = "tiermem",
    version,
    about = "Application-transparent hierarchical memory for HPC"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Kernel, userfaultfd features, huge page pools, CPUs.
    Info {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The TIERMEM_* environment variables (Markdown table).
    Env,
    /// Huge page pools: show the 2 MiB and 1 GiB pools (default), or
    /// reserve and release pages (as root), reporting what the kernel gave.
    Hugepages {
        #[command(subcommand)]
        action: Option<HugeAction>,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum HugeAction {
    /// Show both pools and the THP setting.
    Show {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Make SIZE:PAGES pages available (free and unpromised) in addition to
    /// those in use, e.g. `reserve 2M:512 1G:2`.
    Reserve {
        /// SIZE:PAGES, SIZE 2M or 1G.
        #[arg(required = true)]
        requests: Vec<String>,
    },
    /// Give free pages back to the kernel: `release 2M:256`, or `release 1G`
    /// for all free ones of a size. Pages in use stay.
    Release {
        /// SIZE or SIZE:PAGES.
        #[arg(required = true)]
        sizes: Vec<String>,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// Latency of one 4 KiB fault by kind and fault-serving design.
    Faults(Box<FaultsArgs>),
    /// Paper 1's 2D 9-point heat stencil: none, sync, prefetch, kernel-swap.
    Stencil(Box<StencilArgs>),
    /// The two dirty-tracking designs on read, write, read-then-write sweeps.
    Dirty(DirtyArgs),
    /// Random read-modify-write updates (GUPS-style) per policy and movers.
    Random(RandomArgs),
    /// Team mode: evicting pages only the evicting worker maps, workers as
    /// threads (one page table) vs processes (a page table each).
    TeamEvict(TeamEvictArgs),
    /// Paper 2's Overshadow: naive, copy-then-access, overshadow (whole /
    /// per-page switch) over memory, a cold file and an emulated link.
    Overshadow(Box<OvershadowArgs>),
    /// HPCC RandomAccess (GUPS) per page backing and provider.
    Gups(Box<GupsArgs>),
    /// Graph500 BFS (Kronecker graph, CSR, 64 validated searches, TEPS).
    Bfs(Box<BfsArgs>),
    /// NPB-style conjugate gradient over a random sparse SPD matrix.
    Cg(Box<CgArgs>),
    /// Pointer chasing: ns per dependent access per backing and size.
    Chase(Box<ChaseArgs>),
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
    Svm(Box<SvmArgs>),
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
    /// (internal) the kernel-swap child of `bench stencil`.
    #[command(hide = true)]
    StencilChild {
        /// Parameters as JSON.
        #[arg(long)]
        params: String,
    },
}

#[derive(Args)]
struct FaultsArgs {
    /// Pages timed per kind, design and round.
    #[arg(long, default_value_t = 8192)]
    pages: usize,
    /// Measured rounds (after one warm-up round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Eviction batch (pages) for the evict kinds.
    #[arg(long, default_value_t = 64)]
    evict_batch: usize,
    /// Designs (comma-separated) among in-context, handler-thread,
    /// handler-thread-same-cpu, handler-thread-other-cpu.
    #[arg(long)]
    designs: Option<String>,
    /// Kinds (comma-separated) among zero-fill, fill-memory,
    /// fill-evict-clean, fill-evict-dirty, write-protect.
    #[arg(long)]
    kinds: Option<String>,
    /// CPU of the faulting thread (default: the first allowed).
    #[arg(long)]
    cpu: Option<usize>,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args)]
struct DirtyArgs {
    /// Virtual size.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    virt: u64,
    /// Near budget.
    #[arg(long, default_value = "128M", value_parser = parse_size)]
    near: u64,
    /// Timed sweeps per pattern.
    #[arg(long, default_value_t = 3)]
    passes: usize,
    /// Rounds, interleaved (the table shows the median).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args)]
struct SvmArgs {
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

#[derive(Args)]
struct TeamEvictArgs {
    /// Pages per eviction call, comma-separated.
    #[arg(long, default_value = "1,64")]
    evict_batch: String,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What the translation-overhead benchmarks share.
#[derive(Args)]
struct TransArgs {
    /// Page backings, comma-separated: 4k, thp, 2m (hugetlb), 1g (hugetlb).
    #[arg(long, default_value = "4k,thp,2m,1g")]
    backing: String,
    /// Who sets the memory up: hand (a plain program's own mmap, populated
    /// up front), tiered (a tiermem region with --near), segment.
    #[arg(long, default_value = "hand")]
    provider: String,
    /// Near budget of tiered runs: a size (256M) or a share of each
    /// footprint (50%).
    #[arg(long, default_value = "50%")]
    near: String,
    /// Thread counts, comma-separated (threads pinned to CPUs 0, 1, ...).
    #[arg(long, default_value = "1")]
    threads: String,
    /// Rounds over all sizes, backings and providers (tables show the median).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Refuse footprints above this (the host distorts numbers above ~4G).
    #[arg(long, default_value = "2G", value_parser = parse_size)]
    max_footprint: u64,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart of kernel time normalized to 1 GiB pages.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args)]
struct GupsArgs {
    /// Table sizes in bytes, comma-separated (powers of two: 2^n words).
    #[arg(long, default_value = "512M")]
    table: String,
    /// Updates (default: the rules' 4 x table words; fewer for slow tiered runs).
    #[arg(long)]
    updates: Option<u64>,
    #[command(flatten)]
    common: TransArgs,
}

#[derive(Args)]
struct BfsArgs {
    /// SCALEs (2^SCALE vertices), comma-separated.
    #[arg(long, default_value = "20")]
    scale: String,
    /// Edges per vertex.
    #[arg(long, default_value_t = 16)]
    edgefactor: u32,
    /// Search keys (the specification's 64).
    #[arg(long, default_value_t = 64)]
    roots: usize,
    #[command(flatten)]
    common: TransArgs,
}

#[derive(Args)]
struct CgArgs {
    /// Footprints, comma-separated (the row count follows).
    #[arg(long, default_value = "256M")]
    sizes: String,
    /// Off-diagonal nonzeros per row (even).
    #[arg(long, default_value_t = 32)]
    nonzeros: usize,
    /// CG iterations (NPB's cgitmax is 25).
    #[arg(long, default_value_t = 25)]
    iterations: usize,
    #[command(flatten)]
    common: TransArgs,
}

#[derive(Args)]
struct ChaseArgs {
    /// Footprints, comma-separated.
    #[arg(long, default_value = "64M,256M,1G,2G")]
    sizes: String,
    /// Dependent accesses timed per run.
    #[arg(long, default_value_t = 4_000_000)]
    steps: u64,
    #[command(flatten)]
    common: TransArgs,
}

#[derive(Args)]
struct RandomArgs {
    /// Table size (a power of two).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    virt: u64,
    /// Near budget.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    near: u64,
    /// Updates.
    #[arg(long, default_value_t = 4_000_000)]
    updates: u64,
    /// Application threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Policies, comma-separated.
    #[arg(long, default_value = "fifo,clock,scan")]
    policy: String,
    /// Mover counts, comma-separated (0: movement in faults only).
    #[arg(long, default_value = "0,1")]
    movers: String,
    /// Rounds, interleaved (the table shows the median).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart of seconds per policy and movers.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args)]
struct StencilArgs {
    /// Virtual size (both grids).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    virt: u64,
    /// Near-memory budget (and the cgroup limit of kernel-swap).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    near: u64,
    /// Application threads; a list runs each count (e.g. `1,2`). The
    /// default leaves a CPU of a 2-CPU machine to the mover.
    #[arg(long, default_value = "1")]
    threads: String,
    /// Iterations (paper 1: 25).
    #[arg(long, default_value_t = 25)]
    iters: usize,
    /// Page size: 4K, 2M (hugetlbfs) or THP (transparent huge pages).
    #[arg(long, default_value = "4K")]
    page_size: String,
    /// Modes, comma-separated: none, sync, prefetch (sync faults + mover
    /// threads), kernel-swap; team modes (partially separated page
    /// tables): regular (workers are threads: one page table), pspt
    /// (workers are processes: a page table each), team-none (pspt with
    /// everything near), each optionally +prefetch (read-ahead) and/or
    /// +sharer (sharer-aware replacement), e.g. regular,pspt,pspt+prefetch.
    #[arg(long, default_value = "none,sync,prefetch,kernel-swap")]
    modes: String,
    /// Pages filled per missing fault in the team modes with +prefetch.
    #[arg(long, default_value_t = 16)]
    readahead: usize,
    /// Mover threads for the prefetch mode.
    #[arg(long, default_value_t = 1)]
    movers: usize,
    /// Where movers run, comma-separated: own (CPUs no application thread
    /// uses; skipped when there is none) and/or shared (the application's
    /// CPUs).
    #[arg(long, default_value = "own")]
    mover_placement: String,
    /// How movers install pages, comma-separated: copy, move.
    #[arg(long, default_value = "copy")]
    install: String,
    /// Fault paths for sync (comma-separated: in-context, handler-thread).
    #[arg(long, default_value = "in-context")]
    fault_path: String,
    /// Dirty tracking for sync (comma-separated: wp-fault, wp-async).
    #[arg(long, default_value = "wp-fault")]
    dirty: String,
    /// Far store: `memory`, or a directory / new file name for a file store.
    #[arg(long, default_value = "memory")]
    far: String,
    /// Open the far file with O_DIRECT.
    #[arg(long)]
    far_direct: bool,
    /// Pages evicted per batch.
    #[arg(long, default_value_t = 64)]
    evict_batch: usize,
    /// Replacement policies, comma-separated: fifo, clock, scan.
    #[arg(long, default_value = "fifo")]
    policy: String,
    /// Swap for kernel-swap: `zram` or `file[:DIR]`.
    #[arg(long, default_value = "zram")]
    swap: String,
    /// CPUs for the application threads (default: thread i on CPU i).
    #[arg(long)]
    cpus: Option<String>,
    /// Rounds over all modes.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart of runtime per mode.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args)]
struct OvershadowArgs {
    /// Sizes read (comma-separated, K/M/G suffixes).
    #[arg(long, default_value = "1M,1G")]
    sizes: String,
    /// Methods (comma-separated): naive, copy, overshadow-whole, overshadow-page.
    #[arg(long, default_value = "naive,copy,overshadow-whole,overshadow-page")]
    methods: String,
    /// Far memory (comma-separated): memory, file, link (emulated).
    #[arg(long, default_value = "memory,file,link")]
    fars: String,
    /// Rounds, methods interleaved (the table shows medians).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Rounds for sizes below 64 MiB (milliseconds each, the noisiest).
    #[arg(long, default_value_t = 15)]
    rounds_small: usize,
    /// First chunk of per-page switch (chunks double up to --chunk-max).
    #[arg(long, default_value = "256K", value_parser = parse_size)]
    chunk_min: u64,
    /// Largest chunk.
    #[arg(long, default_value = "2M", value_parser = parse_size)]
    chunk_max: u64,
    /// Bandwidth of the emulated link, bytes per second (K/M/G suffixes).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    link_bandwidth: u64,
    /// Latency of the emulated link per transfer, microseconds.
    #[arg(long, default_value_t = 10.0)]
    link_latency_us: f64,
    /// Directory on a local disk for the `file` far memory.
    #[arg(long, default_value = "/var/tmp")]
    file_dir: PathBuf,
    /// CPU of the reading thread.
    #[arg(long, default_value_t = 0)]
    reader_cpu: usize,
    /// CPUs of the mover threads (comma-separated; default: the last CPU).
    #[arg(long)]
    mover_cpus: Option<String>,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw SVG charts: <stem>-<size>-<far>.svg next to this path.
    #[arg(long)]
    plot: Option<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Info { json } => info(json),
        Cmd::Env => {
            print!("{}", tiermem::config::env_reference_markdown());
            Ok(())
        }
        Cmd::Hugepages { action } => hugepages(action.unwrap_or(HugeAction::Show { json: false })),
        Cmd::Bench(Bench::Faults(a)) => bench_faults(*a),
        Cmd::Bench(Bench::Stencil(a)) => bench_stencil(*a),
        Cmd::Bench(Bench::Dirty(a)) => bench_dirty(a),
        Cmd::Bench(Bench::Random(a)) => bench_random(a),
        Cmd::Bench(Bench::Gups(a)) => bench_gups(*a),
        Cmd::Bench(Bench::Bfs(a)) => bench_bfs(*a),
        Cmd::Bench(Bench::Cg(a)) => bench_cg(*a),
        Cmd::Bench(Bench::Chase(a)) => bench_chase(*a),
        Cmd::Bench(Bench::TranslationReport { json, plot }) => translation_report(&json, &plot),
        Cmd::Bench(Bench::TeamEvict(a)) => bench_team_evict(a),
        Cmd::Bench(Bench::Svm(a)) => bench_svm(*a),
        Cmd::Bench(Bench::SvmCompare { records, json, plot }) => bench_svm_compare(&records, json, plot),
        Cmd::Bench(Bench::Overshadow(a)) => bench_overshadow(*a),
        Cmd::Bench(Bench::StencilChild { params }) => stencil_child(&params),
    };
    if let Err(e) = r {
        eprintln!("tiermem: {e}");
        std::process::exit(1);
    }
}

fn progress_printer() -> impl FnMut(&str) {
    let start = std::time::Instant::now();
    let spinner = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.enable_steady_tick(std::time::Duration::from_millis(200));
        Some(pb)
    } else {
        None
    };
    move |msg: &str| {
        let line = format!("[{:7.1}s] {msg}", start.elapsed().as_secs_f64());
        match &spinner {
            Some(pb) => pb.println(line),
            None => eprintln!("{line}"),
        }
    }
}

fn hugepages(action: HugeAction) -> Result<(), String> {
    use tiermem::hugepages::{self, PoolRequest, SIZES};
    let changes = match action {
        HugeAction::Show { json } => {
            let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .unwrap_or_else(|_| "unavailable".into());
            if json {
                let pools: Vec<_> = SIZES
                    .iter()
                    .map(|&s| {
                        let p = hugepages::pool(s);
                        serde_json::json!({"size": s.to_string(), "total": p.total, "free": p.free,
                            "reserved": p.reserved, "surplus": p.surplus, "available": p.available()})
                    })
                    .collect();
                let v = serde_json::json!({"pools": pools, "thp_enabled": thp.trim()});
                println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
            } else {
                println!(
                    "{:<5} {:>8} {:>8} {:>9} {:>8} {:>10} {:>12}",
                    "size", "total", "free", "reserved", "surplus", "available", "avail bytes"
                );
                for s in SIZES {
                    let p = hugepages::pool(s);
                    println!(
                        "{:<5} {:>8} {:>8} {:>9} {:>8} {:>10} {:>12}",
                        s.to_string(),
                        p.total,
                        p.free,
                        p.reserved,
                        p.surplus,
                        p.available(),
                        format_size(p.available() * s.bytes() as u64)
                    );
                }
                println!("transparent huge pages: {}", thp.trim());
                println!("change with `tiermem hugepages reserve 2M:N 1G:N` / `release 2M[:N]` (as root)");
            }
            return Ok(());
        }
        HugeAction::Reserve { requests } => requests
            .iter()
            .map(|r| {
                let req: PoolRequest = r.parse()?;
                hugepages::reserve(&req).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()?,
        HugeAction::Release { sizes } => sizes
            .iter()
            .map(|r| {
                let (size, pages) = match r.parse::<PoolRequest>() {
                    Ok(req) => (req.size, Some(req.pages)),
                    Err(_) => (format!("{r}:0").parse::<PoolRequest>()?.size, None),
                };
                hugepages::release(size, pages).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()?,
    };
    let mut short = false;
    for c in &changes {
        println!("{c}");
        short |= !c.complete();
    }
    if short {
        return Err("the kernel did not give every page asked for (see above)".into());
    }
    Ok(())
}

fn info(json: bool) -> Result<(), String> {
    let i = tiermem::SystemInfo::probe();
    let cg_v1 = std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
    let zram = std::path::Path::new("/sys/class/zram-control").exists();
    if json {
        let v = serde_json::json!({
            "kernel": i.kernel_release,
            "uffd_features": i.uffd_features.as_ref().map(|f| f.names()).map_err(|e| e.clone()),
            "pagemap_scan": i.pagemap_scan,
            "hugepages_2m": i.pool_2m.map(|p| serde_json::json!({"total": p.total, "free": p.free, "reserved": p.reserved})),
            "hugepages_1g": i.pool_1g.map(|p| serde_json::json!({"total": p.total, "free": p.free, "reserved": p.reserved})),
            "cpus": i.cpus,
            "cpu_model": i.cpu_model,
            "mem_total_bytes": i.mem_total_bytes,
            "thp": i.thp_mode,
            "root": i.root,
            "memory_cgroup_v1": cg_v1,
            "zram": zram,
        });
        println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!("kernel           {}", i.kernel_release);
    println!("cpus             {} x {}", i.cpus, i.cpu_model);
    println!("memory           {}", format_size(i.mem_total_bytes));
    println!("transparent huge pages: {}", i.thp_mode);
    match &i.uffd_features {
        Ok(f) => {
            println!("userfaultfd      available");
            use tiermem_sys::uffd::Features as F;
            for (name, feat, use_) in [
                ("SIGBUS", F::SIGBUS, "in-context fault path (default)"),
                (
                    "THREAD_ID",
                    F::THREAD_ID,
                    "handler-thread fault path, per-thread stats",
                ),
                (
                    "PAGEFAULT_FLAG_WP",
                    F::PAGEFAULT_FLAG_WP,
                    "dirty tracking (wp-fault)",
                ),
                ("WP_ASYNC", F::WP_ASYNC, "dirty tracking (wp-async)"),
                ("WP_UNPOPULATED", F::WP_UNPOPULATED, "(enabled with WP_ASYNC)"),
                ("MISSING_HUGETLBFS", F::MISSING_HUGETLBFS, "2 MiB pages"),
                (
                    "WP_HUGETLBFS_SHMEM",
                    F::WP_HUGETLBFS_SHMEM,
                    "dirty tracking of 2 MiB pages",
                ),
                ("MINOR_SHMEM", F::MINOR_SHMEM, "shared regions (later)"),
                ("POISON", F::POISON, "failing accesses visibly (handler-thread)"),
                ("MOVE", F::MOVE, "zero-copy install (install=move)"),
            ] {
                println!(
                    "  {} {name:<20} {use_}",
                    if f.contains(feat) { "yes" } else { "NO " }
                );
            }
        }
        Err(e) => println!("userfaultfd      UNAVAILABLE: {e}"),
    }
    println!("PAGEMAP_SCAN     {}", if i.pagemap_scan { "yes" } else { "no" });
    for (name, p) in [("2M", i.pool_2m), ("1G", i.pool_1g)] {
        match p {
            Some(p) => println!(
                "hugepages {name}     {} total, {} free, {} reserved",
                p.total, p.free, p.reserved
            ),
            None => println!("hugepages {name}     no pool"),
        }
    }
    println!(
        "kernel-swap baseline: root {}, memory cgroup v1 {}, zram {}",
        if i.root { "yes" } else { "no" },
        if cg_v1 { "yes" } else { "no" },
        if zram { "yes" } else { "no" }
    );
    println!(
        "TLB shootdowns so far: {:?} per CPU",
        tiermem_sys::interrupts::tlb_shootdowns_per_cpu().unwrap_or_default()
    );
    Ok(())
}

/// Writes the JSON and the plots a benchmark was asked for, naming each
/// file written.
fn save<R: serde::Serialize>(
    r: &R,
    json: &Option<PathBuf>,
    plot: &Option<PathBuf>,
    draw: impl FnOnce(&R, &Path) -> Result<Vec<PathBuf>, String>,
) -> Result<(), String> {
    if let Some(j) = json {
        write_json(j, r).map_err(|e| format!("{}: {e}", j.display()))?;
        eprintln!("wrote {}", j.display());
    }
    if let Some(pl) = plot {
        for p in draw(r, pl)? {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

fn list<T>(s: &str, what: &str, f: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| f(x).ok_or_else(|| format!("unknown {what} {x:?}")))
        .collect()
}

fn bench_faults(a: FaultsArgs) -> Result<(), String> {
    let allowed = tiermem_sys::thread::affinity().map_err(|e| e.to_string())?;
    let app_cpu = a.cpu.unwrap_or(allowed[0]);
    if !allowed.contains(&app_cpu) {
        return Err(format!(
            "--cpu {app_cpu} is not one of the allowed CPUs {allowed:?}"
        ));
    }
    let mut designs = faults::designs(app_cpu, &allowed);
    if let Some(d) = &a.designs {
        let want = list(d, "design", |x| {
            designs.iter().any(|d| d.name == x).then(|| x.to_owned())
        })?;
        designs.retain(|d| want.contains(&d.name));
    }
    let kinds: Vec<&str> = match &a.kinds {
        Some(k) => list(k, "kind", |x| faults::KINDS.iter().copied().find(|k| *k == x))?,
        None => faults::KINDS.to_vec(),
    };
    let params = FaultBenchParams {
        pages: a.pages,
        rounds: a.rounds.max(1),
        evict_batch: a.evict_batch,
        app_cpu,
    };
    eprintln!(
        "bench faults: {} pages x {} rounds, faulting thread on CPU {app_cpu}",
        a.pages, params.rounds
    );
    let mut p = progress_printer();
    let r = faults::run(&params, &designs, &kinds, &mut p).map_err(|e| e.to_string())?;
    print!("{}", faults::table(&r));
    save(&r, &a.json, &a.plot, |r, pl| {
        faults::plot(r, pl).map(|()| vec![pl.to_owned()])
    })?;
    Ok(())
}

fn bench_stencil(a: StencilArgs) -> Result<(), String> {
    let page_size = PageSize::parse(&a.page_size).ok_or("--page-size must be 4K, 2M or THP")?;
    let mut base = Config::new(a.virt, a.near);
    base.page_size = page_size;
    base.evict_batch_pages = a.evict_batch;
    let policies = list(&a.policy, "policy", PolicyKind::from_name)?;
    let installs = list(&a.install, "install method", InstallMethod::from_name)?;
    if installs.contains(&InstallMethod::Move) {
        eprintln!(
            "warning: install=move is experimental: slower here (one IPI per page), and one run in about ten hung (see docs/movers.md)"
        );
    }
    let placements = list(&a.mover_placement, "mover placement", |x| match x {
        "own" => Some(Placement::Own),
        "shared" => Some(Placement::Shared),
        _ => None,
    })?;
    let thread_counts = list(&a.threads, "thread count", |x| {
        x.parse::<usize>().ok().filter(|&n| n > 0)
    })?;
    base.far = if a.far == "memory" {
        FarStoreConfig::Memory
    } else {
        FarStoreConfig::File {
            path: a.far.clone().into(),
            direct: a.far_direct,
        }
    };
    let mut probe = base.clone();
    probe.near_bytes = a.near.min(a.virt);
    probe.validate().map_err(|e| e.to_string())?;
    if thread_counts.is_empty() || a.iters == 0 {
        return Err("--threads and --iters must be at least 1".into());
    }
    if a.movers == 0 {
        return Err("--movers must be at least 1 (prefetch mode)".into());
    }
    let n = StencilParams::edge_for(a.virt);
    if n < 3 {
        return Err("--virt is too small for a grid".into());
    }
    if a.virt > 2 << 30 {
        eprintln!("warning: footprints above 2 GiB are distorted by the host on these machines");
    }
    let allowed = tiermem_sys::thread::affinity().map_err(|e| e.to_string())?;
    let cpus = match &a.cpus {
        Some(c) => parse_cpu_list(c)?,
        None => Vec::new(), // thread i on CPU i, per thread count
    };
    let fault_paths = list(&a.fault_path, "fault path", FaultPath::from_name)?;
    let dirties = list(&a.dirty, "dirty tracking", DirtyTracking::from_name)?;
    let swap = match a.swap.as_str() {
        "zram" => SwapKind::Zram,
        s if s == "file" || s.starts_with("file:") => SwapKind::File(
            s.strip_prefix("file:")
                .map_or_else(std::env::temp_dir, PathBuf::from),
        ),
        s => return Err(format!("--swap must be zram or file[:DIR], not {s:?}")),
    };
    let mut modes_v = Vec::new();
    // A variant's name carries the settings that vary.
    let name = |base: &str, parts: &[(bool, &str)]| {
        let mut n = base.to_owned();
        for (varies, v) in parts {
            if *varies {
                n += ":";
                n += v;
            }
        }
        n
    };
    for m in list(&a.modes, "mode", |x| Some(x.to_owned()))? {
        match m.as_str() {
            "none" => modes_v.push(ModeSpec::None),
            "sync" | "prefetch" => {
                // sync has no mover settings: one empty placement, copy.
                let (places, insts): (Vec<Option<Placement>>, &[InstallMethod]) = if m == "prefetch" {
                    (placements.iter().copied().map(Some).collect(), &installs)
                } else {
                    (vec![None], &[InstallMethod::Copy])
                };
                for fp in &fault_paths {
                    for d in &dirties {
                        for pol in &policies {
                            for place in &places {
                                for inst in insts {
                                    modes_v.push(ModeSpec::Tiered {
                                        name: name(
                                            &m,
                                            &[
                                                (fault_paths.len() > 1, fp.name()),
                                                (dirties.len() > 1, d.name()),
                                                (policies.len() > 1, pol.name()),
                                                (places.len() > 1, place.map_or("", Placement::name)),
                                                (insts.len() > 1, inst.name()),
                                            ],
                                        ),
                                        fault_path: *fp,
                                        dirty: *d,
                                        policy: *pol,
                                        movers: place.map(|p| (a.movers, p)),
                                        install: *inst,
                                    });
                                }
                            }
                        }
                    }
                }
            }
            "kernel-swap" => modes_v.push(ModeSpec::KernelSwap { swap: swap.clone() }),
            other => match TeamMode::parse(other, a.readahead) {
                Some(t) => modes_v.push(ModeSpec::Team(t)),
                None => {
                    return Err(format!(
                        "unknown mode {other:?} (none, sync, prefetch, kernel-swap; team modes: regular, pspt, team-none, each with +prefetch and/or +sharer)"
                    ))
                }
            },
        }
    }
    let spec = BenchSpec {
        virt: a.virt,
        near: a.near,
        params: StencilParams {
            n,
            threads: thread_counts[0],
            iters: a.iters,
            cpus,
        },
        thread_counts: thread_counts.clone(),
        modes: modes_v,
        repeat: a.repeat.max(1),
        base,
        launcher: Launcher {
            exe: std::env::current_exe().map_err(|e| e.to_string())?,
        },
    };
    eprintln!(
        "bench stencil: grid {n} x {n} x 2 doubles = {} MiB, near {} MiB, threads {:?} (CPUs {}), {} iterations, page {}, CPUs allowed {:?}",
        spec.params.footprint() >> 20,
        a.near >> 20,
        thread_counts,
        if spec.params.cpus.is_empty() { "thread i on CPU i".to_owned() } else { format!("{:?}", spec.params.cpus) },
        a.iters,
        page_size,
        allowed
    );
    let mut p = progress_printer();
    let r = modes::run_all(&spec, &mut p);
    print!("{}", modes::table(&r));
    save(&r, &a.json, &a.plot, modes::plot)?;
    if !r.checksums_match {
        return Err("checksums differ between modes: a mode computed a wrong result".into());
    }
    if r.results.is_empty() {
        return Err("no mode could run".into());
    }
    Ok(())
}

fn bench_dirty(a: DirtyArgs) -> Result<(), String> {
    Config::new(a.virt, a.near)
        .validate()
        .map_err(|e| e.to_string())?;
    eprintln!(
        "bench dirty: {} MiB over {} MiB, {} passes x {} rounds, faulting thread unpinned",
        a.virt >> 20,
        a.near >> 20,
        a.passes,
        a.rounds
    );
    let mut p = progress_printer();
    let r = tiermem_workloads::dirty::run(
        a.virt,
        a.near,
        a.passes.max(1),
        a.rounds.max(1),
        DirtyTracking::ALL,
        &mut p,
    )
    .map_err(|e| e.to_string())?;
    print!("{}", tiermem_workloads::dirty::table(&r));
    save(&r, &a.json, &a.plot, |r, pl| {
        tiermem_workloads::dirty::plot(r, pl).map(|()| vec![pl.to_owned()])
    })?;
    Ok(())
}

/// Runs one translation-overhead benchmark over its sizes, backings and
/// providers; prints the tables, saves JSON and the chart.
fn run_translation<S>(
    a: &TransArgs,
    workload: &str,
    sizes: &[S],
    footprint: impl Fn(&S) -> usize,
    label: impl Fn(&S) -> String,
    mut job: impl FnMut(
        &mut dyn tiermem_workloads::memory::Memory,
        &S,
    ) -> Result<Vec<translation::Record>, MemoryError>,
) -> Result<(), String> {
    let backings = Backing::parse_list(&a.backing).map_err(|e| e.to_string())?;
    for s in sizes {
        let b = footprint(s) as u64;
        if b > a.max_footprint {
            return Err(format!(
                "{workload} {} needs {} of memory, above --max-footprint {}",
                label(s),
                format_size(b),
                format_size(a.max_footprint)
            ));
        }
    }
    let mut p = progress_printer();
    let mut all: Option<translation::TranslationResult> = None;
    for (round, s) in (0..a.rounds.max(1)).flat_map(|r| sizes.iter().map(move |s| (r, s))) {
        let bytes = footprint(s) as u64;
        let near = match a.near.strip_suffix('%') {
            Some(pc) => {
                let pc: f64 = pc.parse().map_err(|_| format!("bad --near {:?}", a.near))?;
                (bytes as f64 * pc / 100.0) as u64
            }
            None => parse_size(&a.near)?,
        };
        let providers = list(&a.provider, "provider", |x| Provider::parse(x, near).ok())?;
        let mut r = translation::sweep(
            workload,
            std::slice::from_ref(s),
            &backings,
            &providers,
            &footprint,
            &label,
            &mut job,
            &mut p,
        );
        for x in &mut r.records {
            x.round = round;
        }
        match &mut all {
            None => all = Some(r),
            Some(x) => {
                x.records.extend(r.records);
                x.skipped.extend(r.skipped);
            }
        }
    }
    let r = all.ok_or("no sizes given")?;
    print_translation(&r);
    for s in &r.skipped {
        eprintln!("skipped: {s}");
    }
    save(&r, &a.json, &a.plot, |r, pl| {
        translation::plot(r, pl).map(|()| vec![pl.to_owned()])
    })?;
    if r.records.is_empty() {
        return Err("nothing ran".into());
    }
    if r.records.iter().any(|x| !x.valid) {
        return Err("a run failed verification".into());
    }
    Ok(())
}

fn print_translation(r: &translation::TranslationResult) {
    print!("{}", translation::table(r));
    print!(
        "speedup over 4 KiB pages (kernel time):\n{}",
        translation::speedup_table(r)
    );
}

fn translation_report(json: &Path, plot: &Option<PathBuf>) -> Result<(), String> {
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let r: translation::TranslationResult =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    println!("# {}", r.command);
    print_translation(&r);
    if let Some(p) = plot {
        translation::plot(&r, p)?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

fn thread_list(a: &TransArgs) -> Result<Vec<usize>, String> {
    list(&a.threads, "thread count", |x| {
        x.parse::<usize>().ok().filter(|&t| t > 0)
    })
}

fn bench_gups(a: GupsArgs) -> Result<(), String> {
    let tables = list(&a.table, "table size", |x| parse_size(x).ok())?;
    let mut logs = Vec::new();
    for t in tables {
        if !t.is_power_of_two() || t < 1024 {
            return Err(format!(
                "--table {t}: must be a power of two of at least 1K (2^n 8-byte words)"
            ));
        }
        logs.push((t / 8).trailing_zeros());
    }
    let threads = thread_list(&a.common)?;
    run_translation(
        &a.common,
        "gups",
        &logs,
        |&l| gups::footprint(l),
        |l| format!("2^{l} words"),
        |m, &l| translation::gups_job(m, l, a.updates, &threads),
    )
}

fn bench_bfs(a: BfsArgs) -> Result<(), String> {
    let scales = list(&a.scale, "SCALE", |x| {
        x.parse::<u32>().ok().filter(|s| (4..=30).contains(s))
    })?;
    if a.edgefactor == 0 || a.roots == 0 {
        return Err("--edgefactor and --roots must be positive".into());
    }
    let threads = thread_list(&a.common)?;
    let mut inner = progress_printer();
    run_translation(
        &a.common,
        "bfs",
        &scales,
        |&s| graph500::footprint(s, a.edgefactor),
        |s| format!("SCALE {s}"),
        |m, &s| translation::bfs_job(m, s, a.edgefactor, a.roots, &threads, &mut inner),
    )
}

fn bench_cg(a: CgArgs) -> Result<(), String> {
    if a.nonzeros == 0 || a.nonzeros % 2 != 0 {
        return Err("--nonzeros must be even and positive".into());
    }
    let sizes = list(&a.sizes, "size", |x| parse_size(x).ok())?;
    let rows: Vec<usize> = sizes
        .iter()
        .map(|&b| cg::rows_for(b as usize, a.nonzeros))
        .collect();
    if let Some(r) = rows.iter().find(|&&n| n <= 2 * a.nonzeros + 2) {
        return Err(format!(
            "a size gives {r} rows: too small for {} nonzeros per row",
            a.nonzeros
        ));
    }
    let threads = thread_list(&a.common)?;
    run_translation(
        &a.common,
        "cg",
        &rows,
        |&n| cg::footprint(n, a.nonzeros),
        |&n| format!("n={n} nz={}", a.nonzeros),
        |m, &n| translation::cg_job(m, n, a.nonzeros, a.iterations, &threads),
    )
}

fn bench_chase(a: ChaseArgs) -> Result<(), String> {
    let sizes = list(&a.sizes, "size", |x| parse_size(x).ok().filter(|&b| b >= 4096))?;
    if a.steps == 0 {
        return Err("--steps must be positive".into());
    }
    run_translation(
        &a.common,
        "chase",
        &sizes.iter().map(|&b| b as usize).collect::<Vec<_>>(),
        |&b| b,
        |&b| format_size(b as u64),
        |m, &b| translation::chase_job(m, b, a.steps),
    )
}

fn bench_random(a: RandomArgs) -> Result<(), String> {
    if !a.virt.is_power_of_two() || a.virt % 4096 != 0 {
        return Err("--virt must be a power of two of at least 4K".into());
    }
    Config::new(a.virt, a.near)
        .validate()
        .map_err(|e| e.to_string())?;
    let policies = list(&a.policy, "policy", PolicyKind::from_name)?;
    let movers = list(&a.movers, "mover count", |x| x.parse::<usize>().ok())?;
    eprintln!(
        "bench random: {} updates over {} MiB with {} MiB near, {} thread(s), {} rounds",
        a.updates,
        a.virt >> 20,
        a.near >> 20,
        a.threads,
        a.rounds
    );
    let mut p = progress_printer();
    let r = tiermem_workloads::random::run(
        a.virt,
        a.near,
        a.updates,
        a.threads.max(1),
        &policies,
        &movers,
        a.rounds.max(1),
        &mut p,
    )
    .map_err(|e| e.to_string())?;
    print!("{}", tiermem_workloads::random::table(&r));
    save(&r, &a.json, &a.plot, |r, pl| {
        tiermem_workloads::random::plot(r, pl).map(|()| vec![pl.to_owned()])
    })?;
    if r.results.iter().any(|x| !x.valid) {
        return Err("a run failed verification".into());
    }
    Ok(())
}

/// `bench svm --mpi`: every workload and mode `reps` times inside this MPI
/// job, interleaved; rank 0 reports.
fn bench_svm_mpi(a: SvmArgs) -> Result<(), String> {
    use std::io::Write;
    use tiermem_workloads::svm::{self as w, BenchMode, SvmBenchParams, Workload};
    let workloads = list(&a.workloads, "workload", Workload::parse)?;
    let default_modes = "spm-coherent,spm-noncoherent,hybrid,hybrid-noncoherent";
    let modes_arg = if a.modes == default_modes {
        "spm-coherent,dsm,hybrid"
    } else {
        &a.modes
    };
    let modes = list(modes_arg, "mode", BenchMode::parse)?;
    let prm = SvmBenchParams {
        keys: a.keys,
        bucket_keys: a.bucket_keys,
        records: a.records,
        sites: a.sites,
        scale: a.scale,
        roots: a.roots,
        black_list: a.black_list,
    };
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
                        let mut fh = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(f)
                            .map_err(|e| format!("{}: {e}", f.display()))?;
                        let line = serde_json::to_string(&w::Record::of(&r)).map_err(|e| e.to_string())?;
                        writeln!(fh, "{line}").map_err(|e| format!("{}: {e}", f.display()))?;
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
    save(&c, &a.json, &a.plot, |c, pl| {
        w::plot_comparison(c, pl).map(|()| vec![pl.to_owned()])
    })?;
    if runs.iter().any(|r| !r.valid) {
        return Err("a run failed its checks".into());
    }
    Ok(())
}

fn bench_svm_compare(
    records: &[PathBuf],
    json: Option<PathBuf>,
    plot: Option<PathBuf>,
) -> Result<(), String> {
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
    save(&c, &json, &plot, |c, pl| {
        w::plot_comparison(c, pl).map(|()| vec![pl.to_owned()])
    })?;
    if c.records.iter().any(|r| !r.valid) {
        return Err("a run failed verification".into());
    }
    Ok(())
}

fn bench_svm(a: SvmArgs) -> Result<(), String> {
    use tiermem_workloads::svm::{self as w, BenchMode, SvmBenchParams, Workload};
    if let Some(g) = &a.export_graph {
        w::export_graph(a.scale, g)?;
        eprintln!("wrote {}", g.display());
        return Ok(());
    }
    if a.mpi {
        return bench_svm_mpi(a);
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
    if let Some(f) = &a.record_file {
        // The forked team's runs, for the MPI comparison (system
        // "tiermem-local": the same protocol over LocalShm).
        use std::io::Write;
        let mut fh = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(f)
            .map_err(|e| format!("{}: {e}", f.display()))?;
        for r in &b.runs {
            let mut rec = w::Record::of(r);
            rec.system = "tiermem-local".into();
            let line = serde_json::to_string(&rec).map_err(|e| e.to_string())?;
            writeln!(fh, "{line}").map_err(|e| format!("{}: {e}", f.display()))?;
        }
    }
    save(&b, &a.json, &a.plot, |b, pl| {
        w::plot(b, pl).map(|()| vec![pl.to_owned()])
    })?;
    if b.runs.iter().any(|r| !r.valid) {
        return Err("a run failed verification".into());
    }
    Ok(())
}

fn bench_team_evict(a: TeamEvictArgs) -> Result<(), String> {
    use tiermem::team::TeamKind;
    use tiermem_workloads::team_stencil::evict_own_pages;
    let batches = list(&a.evict_batch, "batch", |x| {
        x.parse::<usize>().ok().filter(|&b| b > 0)
    })?;
    let n = tiermem_sys::thread::online_cpus();
    if n < 2 {
        return Err("needs 2 CPUs: one evicting worker, one busy worker".into());
    }
    let cpus = vec![0, 1];
    eprintln!("bench team-evict: worker 0 (CPU 0) evicts pages only it maps; worker 1 (CPU 1) stays busy on its own pages");
    let mut runs = Vec::new();
    for &b in &batches {
        for kind in [TeamKind::Threads, TeamKind::Processes] {
            let r = evict_own_pages(kind, b, &cpus)?;
            eprintln!(
                "[{} batch {b}] {} evictions, {:.3} IPIs/page",
                r.mode, r.evictions, r.ipis_per_eviction
            );
            runs.push(r);
        }
    }
    let mut t = tiermem_workloads::report::Table::new(&[
        "mode",
        "batch",
        "evicted pages",
        "of them shared",
        "TLB IPIs/page",
        "unmap us/page",
        "evict us/page",
    ]);
    for r in &runs {
        t.row(vec![
            r.mode.clone(),
            r.evict_batch.to_string(),
            r.evictions.to_string(),
            r.victims_shared.to_string(),
            format!("{:.3}", r.ipis_per_eviction),
            format!("{:.2}", r.unmap_ns_per_page / 1e3),
            format!("{:.2}", r.evict_ns_per_page / 1e3),
        ]);
    }
    print!("{}", t.render());
    println!("regular: workers are threads of one process (one page table); pspt: processes (a page table each); CPUs: worker 0 on 0, worker 1 on 1");
    #[derive(serde::Serialize)]
    struct Out {
        benchmark: &'static str,
        machine: tiermem_workloads::report::Machine,
        runs: Vec<tiermem_workloads::team_stencil::OwnEviction>,
    }
    let out = Out {
        benchmark: "team-evict",
        machine: tiermem_workloads::report::Machine::collect(),
        runs,
    };
    save(
        &out,
        &a.json,
        &None,
        |_: &Out, _: &std::path::Path| Ok(Vec::new()),
    )
}

fn bench_overshadow(a: OvershadowArgs) -> Result<(), String> {
    use tiermem_workloads::overshadow as os;
    let sizes = list(&a.sizes, "size", |x| parse_size(x).ok())?;
    if let Some(s) = sizes.iter().find(|&&s| s == 0 || s % 4096 != 0) {
        return Err(format!("size {s}: must be a non-zero multiple of 4K"));
    }
    let pick =
        |s: &str, what: &str, known: &[&str]| list(s, what, |x| known.contains(&x).then(|| x.to_owned()));
    let methods = pick(&a.methods, "method", os::METHODS)?;
    let fars = pick(&a.fars, "far memory", os::FARS)?;
    if methods.is_empty() || fars.is_empty() || sizes.is_empty() {
        return Err("nothing to run".into());
    }
    if a.chunk_min == 0 || a.chunk_min % 4096 != 0 || a.chunk_max < a.chunk_min || a.chunk_max % 4096 != 0 {
        return Err("--chunk-min and --chunk-max: multiples of 4K with min <= max".into());
    }
    if a.link_bandwidth == 0 || !(a.link_latency_us >= 0.0 && a.link_latency_us.is_finite()) {
        return Err("the emulated link needs a bandwidth above 0 and a latency of 0 us or more".into());
    }
    if fars.iter().any(|f| f == "file") && !a.file_dir.is_dir() {
        return Err(format!("--file-dir {}: not a directory", a.file_dir.display()));
    }
    let cpus = tiermem_sys::thread::online_cpus();
    if a.reader_cpu >= cpus {
        return Err(format!(
            "--reader-cpu {}: this machine has {cpus} CPUs",
            a.reader_cpu
        ));
    }
    if let Some(m) = &a.mover_cpus {
        let cpus = parse_cpu_list(m).map_err(|e| e.to_string())?;
        tiermem::overshadow::configure_movers(tiermem::overshadow::MoverConfig {
            movers: cpus.len(),
            cpus,
        })
        .map_err(|e| e.to_string())?;
    }
    let p = os::Params {
        sizes,
        methods,
        fars,
        rounds: a.rounds.max(1),
        link_bandwidth_bytes_per_s: a.link_bandwidth as f64,
        link_latency_us: a.link_latency_us,
        file_dir: a.file_dir.clone(),
        reader_cpu: Some(a.reader_cpu),
        chunk_min_bytes: a.chunk_min as usize,
        chunk_max_bytes: a.chunk_max as usize,
        rounds_small: a.rounds_small.max(1),
    };
    eprintln!(
        "bench overshadow: sizes {}, far {}, {} rounds; reader pinned to CPU {}, movers to CPUs {:?}; \
         link EMULATED at {:.2} GB/s + {} us per transfer",
        p.sizes
            .iter()
            .map(|&s| os::size_name(s))
            .collect::<Vec<_>>()
            .join(","),
        p.fars.join(","),
        p.rounds,
        a.reader_cpu,
        tiermem::overshadow::mover_config().cpus,
        p.link_bandwidth_bytes_per_s / 1e9,
        p.link_latency_us
    );
    let mut pr = progress_printer();
    let r = os::run(&p, &mut pr)?;
    print!("{}", os::table(&r));
    save(&r, &a.json, &a.plot, os::plot)?;
    if r.results.iter().any(|x| !x.valid) {
        return Err("a run read wrong bytes".into());
    }
    Ok(())
}

fn stencil_child(params: &str) -> Result<(), String> {
    let p: StencilParams = serde_json::from_str(params).map_err(|e| format!("bad --params: {e}"))?;
    let o = modes::child_main(&p)?;
    println!("{}", serde_json::to_string(&o).map_err(|e| e.to_string())?);
    Ok(())
}
