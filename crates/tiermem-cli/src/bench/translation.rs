//! `tiermem bench gups|bfs|cg|chase|translation-report`: the address
//! translation workloads, which share their options, sweep and tables.

use crate::common::{list, progress_printer, save_chart};
use clap::Args;
use std::path::{Path, PathBuf};
use tiermem::config::{format_size, parse_size};
use tiermem_workloads::memory::{Backing, MemoryError, Provider};
use tiermem_workloads::{cg, graph500, gups, translation};

/// What the translation-overhead benchmarks share.
#[derive(Args)]
struct TransArgs {
    /// Page backings, comma-separated: 4k, thp, 2m (hugetlb), 1g (hugetlb).
    #[arg(long, default_value = "4k,thp,2m,1g")]
    backing: String,
    /// Who sets the memory up: hand (a plain program's own mmap, populated
    /// up front), tiered (a tiermem region with --near), tiered-fa-off (the
    /// same with fault-around off), segment.
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
pub struct GupsArgs {
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
pub struct BfsArgs {
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
pub struct CgArgs {
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
pub struct ChaseArgs {
    /// Footprints, comma-separated.
    #[arg(long, default_value = "64M,256M,1G,2G")]
    sizes: String,
    /// Dependent accesses timed per run.
    #[arg(long, default_value_t = 4_000_000)]
    steps: u64,
    #[command(flatten)]
    common: TransArgs,
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
    save_chart(&r, &a.json, &a.plot, translation::plot)?;
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

pub fn translation_report(json: &Path, plot: &Option<PathBuf>) -> Result<(), String> {
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

pub fn bench_gups(a: GupsArgs) -> Result<(), String> {
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

pub fn bench_bfs(a: BfsArgs) -> Result<(), String> {
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

pub fn bench_cg(a: CgArgs) -> Result<(), String> {
    if a.nonzeros == 0 || !a.nonzeros.is_multiple_of(2) {
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

pub fn bench_chase(a: ChaseArgs) -> Result<(), String> {
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
