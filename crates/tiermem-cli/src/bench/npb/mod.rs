//! `tiermem bench npb`: the NAS Parallel Benchmarks, unmodified, under
//! `tiermem run`. Two experiments, interleaved round by round:
//! - `pages` (paper 3): the heap on 4k, THP, 2m and 1g pages without
//!   tiering, beside the plain run; speedups over 4k.
//! - `tiering` (paper 1): tiermem (sync, movers with fifo and scan)
//!   against Linux swap on zram under a memory cgroup, both given the same
//!   memory (see [`TIERING_RULE`]), and against no limit.

use crate::common::{progress_printer, save};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tiermem_workloads::npb::{self, Launch, RunResult, Variant};
use tiermem_workloads::plot::{grouped_bars, Bar};
use tiermem_workloads::report::{mib, Machine, Table};

mod report;
use report::{draw, print_tables};

#[derive(Args)]
pub struct NpbArgs {
    /// The NPB-CPP tree (the repository root or its NPB-OMP directory);
    /// it is copied into --build-dir and built there, never modified.
    #[arg(long, required_unless_present = "from_json")]
    npb_dir: Option<PathBuf>,
    /// Print the tables (and draw the charts) of an earlier run's JSON
    /// instead of running anything.
    #[arg(long)]
    from_json: Option<PathBuf>,
    /// Where the benchmarks are built.
    #[arg(long, default_value = "target/npb")]
    build_dir: PathBuf,
    /// Benchmarks, comma separated (cg,mg,ft,sp,bt,lu,is,ep).
    #[arg(long, default_value = "cg,mg,ft,sp,bt,lu,is,ep")]
    kernels: String,
    /// Problem class: one letter for all (S, W, A, B, C), then per-kernel
    /// exceptions: `B,sp=A,bt=A`.
    #[arg(long, default_value = "B")]
    class: String,
    /// Experiments: pages, tiering.
    #[arg(long, default_value = "pages,tiering")]
    experiments: String,
    /// OpenMP threads of the page-size experiment.
    #[arg(long, default_value = "1,2")]
    threads: String,
    /// Backings of the page-size experiment: plain (no tiermem), 4k, thp,
    /// 2m, 1g (the heap on those pages, no tiering), 4k-tiered (tiered,
    /// with a near budget twice the footprint: the cost of the fault path
    /// alone).
    #[arg(long, default_value = "plain,4k,thp,2m,1g")]
    pages: String,
    /// Near budgets of the tiering experiment, in percent of each
    /// benchmark's tiered footprint.
    #[arg(long, default_value = "50,25")]
    near: String,
    /// Configurations of the tiering experiment: plain (no limit), sync
    /// (FIFO, no movers), auto (the auto policy, no movers), auto-movers (the auto policy and `--movers auto`), fifo and scan (one mover, prefetch), swap (kernel swap on
    /// zram under a memory cgroup).
    #[arg(long, default_value = "plain,sync,auto,fifo,scan,swap")]
    modes: String,
    /// Extra room in the kernel-swap baseline's cgroup beyond its share L
    /// of the charged footprint (not given to tiermem: anything but 0 makes
    /// the comparison unequal in the kernel's favour).
    #[arg(long, default_value = "0")]
    swap_slack: String,
    /// When kernel swap is OOM-killed at a share, run it again at larger
    /// shares of the charged footprint, in steps of this many percent,
    /// until it completes (below 100%; 0: no retries). The table's
    /// `swap completes` column gives the first share that did and its
    /// time; tiermem is not run there.
    #[arg(long, default_value_t = 12.5)]
    swap_ladder: f64,
    /// `tiermem run --threshold` in the tiering experiment: allocations at
    /// least this large are tiered. Below tiermem's default (1 MiB) so
    /// that the arrays NPB allocates in pieces are tiered too (SP.W: 8.3
    /// of its 9.0 MiB charged, against 5.6 MiB at 1 MiB); what is not
    /// tiered is taken out of the near budget (see TIERING_RULE).
    #[arg(long, default_value = "256K")]
    tiering_threshold: String,
    /// OpenMP threads of the tiering experiment (its mover runs on the last
    /// CPU).
    #[arg(long, default_value_t = 1)]
    tiering_threads: usize,
    /// Builds: dynamic (arrays on the heap), static (arrays in .bss, taken
    /// over by `tiermem run --static on`).
    #[arg(long, default_value = "dynamic")]
    variants: String,
    /// Rounds; every round runs every configuration once.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Kill a run after this many seconds, or after this many times the
    /// plain run's wall time, whichever is larger.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// See --timeout.
    #[arg(long, default_value_t = 30)]
    timeout_factor: u64,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw SVG charts: PATH-pages.svg and PATH-tiering.svg.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// How the tiering experiment gives both sides the same memory (printed
/// with the table; docs/transparent.md).
pub const TIERING_RULE: &str = "Same memory on both sides: F = the charged footprint, the peak memory \
(cgroup memory.max_usage_in_bytes / memory.peak) of the plain run alone in an unlimited memory cgroup; \
kernel swap runs in a memory cgroup limited to L = p x F (swap on zram, which the cgroup does not \
charge); tiermem gets near = L - U, where U = F - T is the charged memory tiermem does not tier \
(T: heap allocations at or above --tiering-threshold, plus taken-over static sections), which stays \
in plain memory; tiermem's far store (like zram's pool) is not counted. Every run starts with the \
program and its libraries out of the page cache, as a fresh job does, so that F and the kernel's \
cgroup hold the program's own text (a cgroup charged with anonymous memory alone is OOM-killed by \
Linux 6.18/cgroup v1 at its first swap-in storm). Without a memory cgroup (not root), F falls back \
to the plain run's peak RSS.";

/// Paper 3's speedups of the 2 MiB heap over 4 KiB (its table), where it
/// gives one.
fn paper_speedup(kernel: &str) -> &'static str {
    match kernel {
        "cg" => "+25%",
        "sp" => "+20%",
        "mg" => "+17%",
        "ft" | "bt" => "flat",
        _ => "",
    }
}

#[derive(Serialize, Deserialize, Clone)]
struct Row {
    experiment: String,
    kernel: String,
    class: char,
    variant: Variant,
    threads: usize,
    /// Backing (pages) or mode (tiering).
    config: String,
    /// Tiering: percent of the tiered footprint.
    near_percent: Option<u64>,
    /// Tiering: tiermem's near budget (L - U).
    near_bytes: Option<u64>,
    /// Tiering: the kernel-swap baseline's cgroup limit L (older reports:
    /// none).
    #[serde(default)]
    limit_bytes: Option<u64>,
    /// Tiering, config `swap-retry`: the share of the charged footprint
    /// the kernel-swap run was retried at after an OOM kill.
    #[serde(default)]
    retry_percent: Option<f64>,
    round: usize,
    result: RunResult,
}

#[derive(Serialize, Deserialize)]
struct Footprint {
    kernel: String,
    class: char,
    variant: Variant,
    max_rss_bytes: u64,
    tiered_bytes: u64,
    plain_wall_seconds: f64,
    /// Peak charged memory of the plain run alone in an unlimited memory
    /// cgroup (None: no cgroup here, or an older report).
    #[serde(default)]
    charged_bytes: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct Report {
    machine: Machine,
    command: String,
    cpus: String,
    footprints: Vec<Footprint>,
    rows: Vec<Row>,
}

struct Bench {
    kernel: String,
    class: char,
    variant: Variant,
    binary: PathBuf,
    rss: u64,
    tiered: u64,
    plain_wall: f64,
    /// The charged footprint F (the peak RSS without a memory cgroup).
    charged: u64,
}

/// The tiering experiment's memory at `pct` percent of benchmark `b`'s
/// footprint ([`TIERING_RULE`]): the kernel's cgroup limit L, and
/// tiermem's near budget L - U (None when U leaves it less than 64 pages).
fn tiering_memory(charged: u64, tiered: u64, pct: u64) -> (u64, Option<u64>) {
    let limit = charged * pct / 100;
    let untiered = charged.saturating_sub(tiered);
    let near = limit.saturating_sub(untiered) & !4095;
    (limit, (near >= 64 * 4096).then_some(near))
}

fn classes(spec: &str, kernels: &[String]) -> Result<BTreeMap<String, char>, String> {
    let letter = |s: &str| {
        let c = s.trim().to_ascii_uppercase();
        match c.as_str() {
            "S" | "W" | "A" | "B" | "C" | "D" => Ok(c.chars().next().unwrap()),
            _ => Err(format!("--class: unknown class {s:?} (S, W, A, B, C or D)")),
        }
    };
    let mut default = 'B';
    let mut per = BTreeMap::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some((k, c)) => {
                let k = k.trim().to_ascii_lowercase();
                if !npb::KERNELS.contains(&k.as_str()) {
                    return Err(format!("--class: unknown benchmark {k:?}"));
                }
                per.insert(k, letter(c)?);
            }
            None => default = letter(part)?,
        }
    }
    Ok(kernels
        .iter()
        .map(|k| (k.clone(), *per.get(k).unwrap_or(&default)))
        .collect())
}

fn round_up(n: u64, unit: u64) -> u64 {
    n.div_ceil(unit) * unit
}

/// `tiermem run` options of a page-size backing.
fn backing_options(backing: &str, b: &Bench) -> Vec<String> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    match backing {
        "4k" | "thp" => s(&["--page-size", backing]),
        "2m" | "1g" => {
            let unit = if backing == "2m" { 2 << 20 } else { 1 << 30 };
            // Room for every allocation rounded up to whole pages.
            let slack = if backing == "2m" { 16 * unit } else { unit };
            let pool = round_up(b.tiered + b.tiered / 8, unit) + slack;
            let mut v = s(&["--page-size", backing, "--reserve"]);
            v.push(format!("{}M", pool >> 20));
            v
        }
        "4k-tiered" => vec![
            "--near".into(),
            format!("{}M", ((2 * b.rss.max(b.tiered)) >> 20) + 64),
        ],
        _ => unreachable!(),
    }
}

/// Why the kernel-swap baseline cannot run under a cgroup limit of
/// `limit` bytes, if it cannot: below [`MIN_LIMIT_BYTES`] (class S
/// benchmarks at 25-50% of a 2 MiB footprint) it refuses to start.
fn swap_skip(limit: u64) -> Option<String> {
    use tiermem_workloads::kernel_swap::MIN_LIMIT_BYTES;
    (limit < MIN_LIMIT_BYTES).then(|| {
        format!(
            "skipped, its limit ({} KiB) is below the kernel-swap baseline's minimum ({} KiB)",
            limit >> 10,
            MIN_LIMIT_BYTES >> 10
        )
    })
}

/// `tiermem run` options of a tiering mode at `near` bytes.
fn tiering_options(mode: &str, near: u64, threshold: &str, mover_cpu: usize) -> Vec<String> {
    let mut v = vec!["--near".to_string(), format!("{}K", near >> 10)];
    v.extend(["--threshold".to_string(), threshold.to_string()]);
    match mode {
        // sync: FIFO, no movers (the default); auto: the auto policy, no
        // movers.
        "sync" => v.extend(["--policy", "fifo"].map(String::from)),
        "auto" => v.extend(["--policy", "auto"].map(String::from)),
        // The auto policy and the auto mover (on the last CPU, standing
        // down while the program keeps every CPU busy).
        "auto-movers" => v.extend(["--policy", "auto", "--movers", "auto"].map(String::from)),
        "fifo" | "scan" => {
            v.extend(["--movers", "1", "--policy", mode].map(String::from));
            v.extend(["--mover-cpus".to_string(), mover_cpu.to_string()]);
        }
        _ => unreachable!(),
    }
    v
}

fn fmt_s(r: Option<f64>) -> String {
    r.map_or("-".into(), |s| format!("{s:.2}"))
}

fn describe(r: &RunResult) -> String {
    let mut s = format!(
        "npb {} s, wall {:.2} s, rss {} MiB",
        fmt_s(r.npb_seconds),
        r.wall_seconds,
        mib(r.max_rss_bytes)
    );
    if let Some(t) = &r.tiermem {
        s += &format!(
            ", {} faults, {} evictions, in {} MiB",
            t.faults,
            t.evictions,
            mib(t.bytes_in)
        );
        if t.fallbacks > 0 {
            s += &format!(", {} fallbacks", t.fallbacks);
        }
    }
    if let Some(sw) = &r.swap {
        s += &format!(", {} pages swapped out", sw.swapped_out_pages);
    }
    if !r.verified {
        s += &format!(
            "; NOT VERIFIED ({}{})",
            r.status,
            if r.timed_out { ", timed out" } else { "" }
        );
    }
    s
}

pub fn run(a: NpbArgs) -> Result<(), String> {
    if let Some(path) = &a.from_json {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let report: Report = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let backings = tiermem_workloads::report::first_seen(
            report
                .rows
                .iter()
                .filter(|x| x.experiment == "pages")
                .map(|x| x.config.clone()),
        );
        let modes = tiermem_workloads::report::first_seen(
            report
                .rows
                .iter()
                .filter(|x| x.experiment == "tiering" && x.config != "swap-retry")
                .map(|x| x.config.clone()),
        );
        print_tables(&report, &backings, &modes);
        return save(&report, &None, &a.plot, draw);
    }
    let npb_dir = a.npb_dir.clone().unwrap_or_default();
    let kernels: Vec<String> = crate::common::list(&a.kernels, "benchmark", |k| {
        let k = k.to_ascii_lowercase();
        npb::KERNELS.contains(&k.as_str()).then_some(k)
    })?;
    let classes = classes(&a.class, &kernels)?;
    let experiments = crate::common::list(&a.experiments, "experiment", |e| {
        ["pages", "tiering"].contains(&e).then(|| e.to_string())
    })?;
    let threads = crate::common::list(&a.threads, "thread count", |t| {
        t.parse::<usize>().ok().filter(|&n| n > 0)
    })?;
    let backings = crate::common::list(&a.pages, "backing", |p| {
        ["plain", "4k", "thp", "2m", "1g", "4k-tiered"]
            .contains(&p)
            .then(|| p.to_string())
    })?;
    let fractions = crate::common::list(&a.near, "near percentage", |p| {
        p.trim_end_matches('%')
            .parse::<u64>()
            .ok()
            .filter(|&n| (1..100).contains(&n))
    })?;
    let modes = crate::common::list(&a.modes, "mode", |m| {
        ["plain", "sync", "auto", "auto-movers", "fifo", "scan", "swap"]
            .contains(&m)
            .then(|| m.to_string())
    })?;
    let mut modes = modes;
    if modes.iter().any(|m| m == "swap") {
        let probe = tiermem_workloads::kernel_swap::LimitedRun::new(
            tiermem_workloads::kernel_swap::SwapKind::Zram,
            1 << 30,
        );
        if let Err(e) = probe.preflight() {
            eprintln!("kernel-swap baseline skipped: {e}");
            modes.retain(|m| m != "swap");
        }
    }
    let variants = crate::common::list(&a.variants, "variant", Variant::parse)?;
    let swap_slack = tiermem::config::parse_size(&a.swap_slack).map_err(|e| format!("--swap-slack: {e}"))?;
    tiermem::config::parse_size(&a.tiering_threshold).map_err(|e| format!("--tiering-threshold: {e}"))?;
    let tiering = experiments.iter().any(|e| e == "tiering");
    // The charged footprint needs a memory cgroup (the kernel-swap
    // baseline's machinery): without one, the peak RSS stands in.
    let cgroup_ok = tiering
        && tiermem_workloads::kernel_swap::LimitedRun::new(
            tiermem_workloads::kernel_swap::SwapKind::Zram,
            1 << 30,
        )
        .preflight()
        .is_ok();
    let exe = std::env::current_exe().map_err(|e| format!("finding the tiermem binary: {e}"))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mover_cpu = cpus - 1;
    if a.repeat == 0 {
        return Err("--repeat must be at least 1".into());
    }
    let progress = std::cell::RefCell::new(progress_printer());
    let progress = |m: &str| (progress.borrow_mut())(m);

    // Build and measure every benchmark once, plain: its footprint sizes
    // the near budgets and the huge page pools.
    let mut benches = Vec::new();
    let mut footprints = Vec::new();
    for &variant in &variants {
        let tree = npb::prepare(&npb_dir, &a.build_dir, variant)?;
        for k in &kernels {
            let class = classes[k];
            progress(&format!("building {k}.{class} ({})", variant.name()));
            let binary = npb::build(&tree, variant, k, class)?;
            // What tiermem tiers (with the tiering experiment's threshold
            // when it runs: the pools of the page-size experiment, sized
            // from it, are then only roomier).
            let mut probe_options = vec!["--page-size".to_string(), "4k".to_string()];
            if tiering {
                probe_options.extend(["--threshold".to_string(), a.tiering_threshold.clone()]);
            }
            let probe = npb::run(
                &binary,
                1,
                &Launch::Tiermem {
                    exe: exe.clone(),
                    options: probe_options,
                },
                Duration::from_secs(a.timeout),
            )?;
            let plain = npb::run(&binary, 1, &Launch::Plain, Duration::from_secs(a.timeout))?;
            if !plain.verified || !probe.verified {
                let failed = if plain.verified { &probe } else { &plain };
                return Err(format!(
                    "{k}.{class} ({}) did not verify{}: {}\n{}",
                    variant.name(),
                    if plain.verified { " under tiermem run" } else { "" },
                    failed.status,
                    failed.output_tail.as_deref().unwrap_or("")
                ));
            }
            let tiered = probe.tiermem.as_ref().map_or(0, |t| t.tiered_bytes);
            let charged = if cgroup_ok {
                let run = npb::run(
                    &binary,
                    a.tiering_threads,
                    &Launch::KernelSwap {
                        limit_bytes: 1 << 40,
                        swap_bytes: 16 << 20,
                    },
                    Duration::from_secs(a.timeout),
                )?;
                if !run.verified {
                    return Err(format!(
                        "{k}.{class} ({}) did not verify in an unlimited memory cgroup: {}",
                        variant.name(),
                        run.status
                    ));
                }
                Some(run.max_rss_bytes)
            } else {
                None
            };
            progress(&format!(
                "{k}.{class} ({}): peak RSS {}, charged {} (tiered by tiermem: {}), plain {:.2} s",
                variant.name(),
                mib(plain.max_rss_bytes),
                charged.map_or("-".into(), mib),
                mib(tiered),
                plain.wall_seconds
            ));
            footprints.push(Footprint {
                kernel: k.clone(),
                class,
                variant,
                max_rss_bytes: plain.max_rss_bytes,
                tiered_bytes: tiered,
                plain_wall_seconds: plain.wall_seconds,
                charged_bytes: charged,
            });
            benches.push(Bench {
                kernel: k.clone(),
                class,
                variant,
                binary,
                rss: plain.max_rss_bytes,
                tiered,
                plain_wall: plain.wall_seconds,
                charged: charged.unwrap_or(plain.max_rss_bytes),
            });
        }
    }

    // Written to --json after every run, so that a run stopped half-way
    // keeps what it measured (tables: --from-json).
    let mut partial = Report {
        machine: Machine::collect(),
        command: tiermem_workloads::report::command_line(),
        cpus: format!(
            "OpenMP threads bound one per CPU from CPU 0 (OMP_PROC_BIND=true, OMP_PLACES=cores); \
             the tiering experiment's mover on CPU {mover_cpu}; {cpus} CPUs"
        ),
        footprints,
        rows: Vec::new(),
    };
    let mut rows: Vec<Row> = Vec::new();
    for round in 0..a.repeat {
        for b in &benches {
            let limit = Duration::from_secs(a.timeout.max((b.plain_wall * a.timeout_factor as f64) as u64));
            let name = format!(
                "{}.{}{}",
                b.kernel,
                b.class,
                if b.variant == Variant::Static {
                    " static"
                } else {
                    ""
                }
            );
            let mut record = |experiment: &str,
                              threads,
                              config: &str,
                              near: Option<(u64, u64, u64)>,
                              retry: Option<f64>,
                              launch: &Launch|
             -> Result<bool, String> {
                let result = npb::run(&b.binary, threads, launch, limit)?;
                let oom = result.swap.as_ref().is_some_and(|sw| sw.oom_kill);
                progress(&format!(
                    "round {} {name} {experiment} {config}{}{} {threads} thr: {}",
                    round + 1,
                    near.map_or(String::new(), |(p, _, _)| format!(" at {p}%")),
                    retry.map_or(String::new(), |r| format!(" retried at {r}%")),
                    describe(&result)
                ));
                let row = Row {
                    experiment: experiment.to_string(),
                    kernel: b.kernel.clone(),
                    class: b.class,
                    variant: b.variant,
                    threads,
                    config: config.to_string(),
                    near_percent: near.map(|n| n.0),
                    near_bytes: near.map(|n| n.1),
                    limit_bytes: near.map(|n| n.2),
                    retry_percent: retry,
                    round,
                    result,
                };
                rows.push(row);
                if let Some(j) = &a.json {
                    partial.rows = rows.clone();
                    tiermem_workloads::report::write_json(j, &partial)
                        .map_err(|e| format!("{}: {e}", j.display()))?;
                }
                Ok(oom)
            };
            if experiments.iter().any(|e| e == "pages") {
                for &t in &threads {
                    for backing in &backings {
                        let launch = match backing.as_str() {
                            "plain" => Launch::Plain,
                            _ => Launch::Tiermem {
                                exe: exe.clone(),
                                options: backing_options(backing, b),
                            },
                        };
                        record("pages", t, backing, None, None, &launch)?;
                    }
                }
            }
            if tiering {
                for &pct in &fractions {
                    // TIERING_RULE: the kernel's cgroup limit L, tiermem's
                    // near budget L - U.
                    let (limit, near) = tiering_memory(b.charged, b.tiered, pct);
                    for mode in &modes {
                        let launch = match (mode.as_str(), near) {
                            ("plain", _) => Launch::Plain,
                            ("swap", _) if swap_skip(limit + swap_slack).is_some() => {
                                let why = swap_skip(limit + swap_slack).unwrap_or_default();
                                progress(&format!("{name} swap at {pct}%: {why}"));
                                continue;
                            }
                            ("swap", _) => Launch::KernelSwap {
                                limit_bytes: limit + swap_slack,
                                swap_bytes: round_up(b.charged * 2 + (256 << 20), 1 << 20),
                            },
                            (m, Some(near)) => Launch::Tiermem {
                                exe: exe.clone(),
                                options: tiering_options(m, near, &a.tiering_threshold, mover_cpu),
                            },
                            (m, None) => {
                                progress(&format!(
                                    "{name} {m} at {pct}%: skipped, the memory tiermem does not tier ({}) \
                                     leaves less than 64 pages of the limit ({})",
                                    mib(b.charged.saturating_sub(b.tiered)),
                                    mib(limit)
                                ));
                                continue;
                            }
                        };
                        let near = near.unwrap_or(0);
                        let oom = record(
                            "tiering",
                            a.tiering_threads,
                            mode,
                            Some((pct, near, limit)),
                            None,
                            &launch,
                        )?;
                        // Where does the kernel complete? Larger shares
                        // until it does (the table's `swap completes`).
                        let mut share = pct as f64 + a.swap_ladder;
                        let mut killed = oom && mode == "swap" && a.swap_ladder > 0.0;
                        while killed && share < 100.0 {
                            let limit = (b.charged as f64 * share / 100.0) as u64;
                            if swap_skip(limit + swap_slack).is_some() {
                                share += a.swap_ladder;
                                continue;
                            }
                            let launch = Launch::KernelSwap {
                                limit_bytes: limit + swap_slack,
                                swap_bytes: round_up(b.charged * 2 + (256 << 20), 1 << 20),
                            };
                            killed = record(
                                "tiering",
                                a.tiering_threads,
                                "swap-retry",
                                Some((pct, 0, limit)),
                                Some(share),
                                &launch,
                            )?;
                            share += a.swap_ladder;
                        }
                    }
                }
            }
        }
    }

    let report = Report { rows, ..partial };
    print_tables(&report, &backings, &modes);
    save(&report, &a.json, &a.plot, draw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_take_a_default_and_exceptions() {
        let ks: Vec<String> = ["cg", "sp", "ep"].map(String::from).to_vec();
        let c = classes("B,sp=a", &ks).unwrap();
        assert_eq!((c["cg"], c["sp"], c["ep"]), ('B', 'A', 'B'));
        assert!(classes("Q", &ks).unwrap_err().contains("unknown class"));
        assert!(classes("B,xx=A", &ks).unwrap_err().contains("unknown benchmark"));
    }

    #[test]
    fn huge_page_pools_cover_the_footprint() {
        let b = Bench {
            kernel: "cg".into(),
            class: 'B',
            variant: Variant::Dynamic,
            binary: PathBuf::new(),
            rss: 400 << 20,
            tiered: 380 << 20,
            plain_wall: 1.0,
            charged: 400 << 20,
        };
        let o = backing_options("2m", &b);
        let mb: u64 = o[3].trim_end_matches('M').parse().unwrap();
        assert!(mb << 20 >= 380 << 20 && mb.is_multiple_of(2), "{o:?}");
        let o = backing_options("1g", &b);
        let mb: u64 = o[3].trim_end_matches('M').parse().unwrap();
        assert!(mb.is_multiple_of(1024) && mb >= 1024, "{o:?}");
        assert_eq!(
            tiering_options("auto", 10 << 20, "256K", 1),
            ["--near", "10240K", "--threshold", "256K", "--policy", "auto"]
        );
        assert_eq!(
            tiering_options("sync", 10 << 20, "256K", 1),
            ["--near", "10240K", "--threshold", "256K", "--policy", "fifo"]
        );
        assert!(tiering_options("scan", 10 << 20, "256K", 1).contains(&"scan".to_string()));
        assert_eq!(
            tiering_options("auto-movers", 10 << 20, "256K", 1)[4..],
            ["--policy", "auto", "--movers", "auto"]
        );
    }

    #[test]
    fn kernel_swap_below_its_minimum_limit_is_skipped_not_failed() {
        // cg.S: 1.8 MiB charged, 50% is 0.9 MiB.
        let (limit, _) = tiering_memory(1843 << 10, 1 << 20, 50);
        let why = swap_skip(limit).expect("below the minimum");
        assert!(why.contains("skipped") && why.contains("1024 KiB"), "{why}");
        assert_eq!(swap_skip(1 << 20), None);
        assert_eq!(swap_skip(64 << 20), None);
    }

    #[test]
    fn both_sides_of_the_tiering_experiment_get_the_same_memory() {
        // SP.W: 9.0 MiB charged, 8.3 MiB tiered at 256K.
        let (f, t) = (9 << 20, (83 << 20) / 10);
        let (limit, near) = tiering_memory(f, t, 50);
        let near = near.unwrap();
        assert_eq!(limit, f / 2);
        // What tiermem leaves untiered comes out of its budget.
        assert_eq!(near, (limit - (f - t)) & !4095);
        assert!(near % 4096 == 0 && near + (f - t) <= limit);
        // Untiered memory larger than the limit leaves no budget at all.
        assert_eq!(tiering_memory(f, 2 << 20, 25), (f / 4, None));
        // All of it tiered: near is the limit.
        assert_eq!(tiering_memory(8 << 20, 8 << 20, 25), (2 << 20, Some(2 << 20)));
    }
}
