//! Running the stencil in each mode and reporting the runs side by side.

use crate::kernel_swap::{self, MemCgroup, SwapDevice, SwapKind};
use crate::report::{mib, Machine, Table};
use crate::stencil::{checksum, init, iterate, StencilOutcome, StencilParams, StencilResult, Workers};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;
use tiermem::{Config, DirtyTracking, FaultPath, PageSize, Region};

/// A mode to run.
#[derive(Clone, Debug)]
pub enum ModeSpec {
    /// Budget holds everything: no data movement.
    None,
    /// Tiered with synchronous data movement.
    Sync {
        /// Name in results (`sync`, or `sync:<fault-path>:<dirty>`).
        name: String,
        /// Fault path.
        fault_path: FaultPath,
        /// Dirty tracking.
        dirty: DirtyTracking,
    },
    /// Linux swap under a memory cgroup.
    KernelSwap {
        /// zram or swap file.
        swap: SwapKind,
    },
}

impl ModeSpec {
    /// The mode's name in results.
    pub fn name(&self) -> String {
        match self {
            ModeSpec::None => "none".into(),
            ModeSpec::Sync { name, .. } => name.clone(),
            ModeSpec::KernelSwap { .. } => "kernel-swap".into(),
        }
    }
}

/// How to start the kernel-swap child: this program with arguments that
/// reach [`child_main`].
#[derive(Clone, Debug)]
pub struct Launcher {
    /// Executable.
    pub exe: PathBuf,
}

/// Everything `tiermem bench stencil` was asked for.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// Virtual bytes (both grids fit in it).
    pub virt: u64,
    /// Near budget.
    pub near: u64,
    /// Stencil parameters.
    pub params: StencilParams,
    /// Modes in the order to run them.
    pub modes: Vec<ModeSpec>,
    /// Rounds over all modes.
    pub repeat: usize,
    /// Region settings for tiered modes (page size, far store, policy,
    /// eviction batch); sizes and fault path are set per mode.
    pub base: Config,
    /// The kernel-swap child launcher.
    pub launcher: Launcher,
}

fn read_self_faults() -> (u64, u64) {
    // /proc/self/stat: after "(comm)": state ppid pgrp session tty tpgid
    // flags minflt cminflt majflt ...
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |k: usize| f.get(k).and_then(|x| x.parse().ok()).unwrap_or(0);
    (field(7), field(9))
}

/// Runs the stencil on a tiermem region.
pub fn run_tiered(
    mode: &str,
    config: Config,
    p: &StencilParams,
    progress: &mut dyn FnMut(&str),
) -> Result<StencilOutcome, tiermem::Error> {
    let mut region = Region::new(config)?;
    let w = Workers::new(p.threads, &p.cpus);
    let n = p.n;
    let t = Instant::now();
    init(&mut region.as_mut_slice::<f64>()[..2 * n * n], n, &w);
    let init_seconds = t.elapsed().as_secs_f64();
    progress(&format!(
        "[{mode}] initialised {} MiB in {init_seconds:.2}s",
        mib(p.footprint())
    ));
    region.reset_stats();
    let tlb0 = tiermem_sys::interrupts::tlb_shootdowns();
    let t = Instant::now();
    let iter_seconds = iterate(
        &mut region.as_mut_slice::<f64>()[..2 * n * n],
        n,
        p.iters,
        &w,
        |it, s| {
            progress(&format!("[{mode}] iteration {}/{}: {s:.3}s", it + 1, p.iters));
        },
    );
    let seconds = t.elapsed().as_secs_f64();
    let tlb = tiermem_sys::interrupts::tlb_shootdowns() - tlb0;
    let s = region.stats();
    let sum = checksum(region.as_mut_slice::<f64>(), n, p.iters);
    let tids = w.tids();
    let faults_per_thread = tids
        .iter()
        .map(|t| {
            s.faults_per_thread
                .iter()
                .find(|x| x.tid == *t)
                .map_or(0, |x| x.faults)
        })
        .collect();
    Ok(StencilOutcome {
        mode: mode.into(),
        seconds,
        init_seconds,
        iter_seconds,
        checksum: sum,
        faults: s.faults(),
        evictions: s.evictions,
        bytes_in: s.bytes_in,
        bytes_out: s.bytes_out,
        tlb_shootdowns: tlb,
        evict_calls: s.evict_calls,
        wp_faults: s.faults_write_protect,
        faults_per_thread,
        thread_cpus: (0..p.threads)
            .map(|i| (!p.cpus.is_empty()).then(|| p.cpus[i % p.cpus.len()]))
            .collect(),
        cost_ns: s.cost.iter().map(|c| (c.category.to_owned(), c.ns)).collect(),
        fault_p50_ns: s.fault_latency.p50_ns,
        fault_p99_ns: s.fault_latency.p99_ns,
        config: region.describe(),
        overhead_vs_none: None,
    })
}

/// The kernel-swap child: joins the cgroup named in the environment, runs
/// the stencil on plain memory and returns its outcome (printed as JSON on
/// stdout by the caller).
pub fn child_main(p: &StencilParams) -> Result<StencilOutcome, String> {
    let joined = kernel_swap::join_cgroup_from_env().map_err(|e| e.to_string())?;
    let n = p.n;
    let w = Workers::new(p.threads, &p.cpus);
    let mut grid = vec![0.0f64; 2 * n * n];
    let t = Instant::now();
    init(&mut grid, n, &w);
    let init_seconds = t.elapsed().as_secs_f64();
    eprintln!(
        "[kernel-swap] initialised {} MiB in {init_seconds:.2}s (in cgroup: {joined})",
        mib(p.footprint())
    );
    let (min0, maj0) = read_self_faults();
    let v0 = kernel_swap::vmstat_swap();
    let tlb0 = tiermem_sys::interrupts::tlb_shootdowns();
    let t = Instant::now();
    let iter_seconds = iterate(&mut grid, n, p.iters, &w, |it, s| {
        eprintln!("[kernel-swap] iteration {}/{}: {s:.3}s", it + 1, p.iters);
    });
    let seconds = t.elapsed().as_secs_f64();
    let tlb = tiermem_sys::interrupts::tlb_shootdowns() - tlb0;
    let (min1, maj1) = read_self_faults();
    let v1 = kernel_swap::vmstat_swap();
    let page = 4096u64;
    Ok(StencilOutcome {
        mode: "kernel-swap".into(),
        seconds,
        init_seconds,
        iter_seconds,
        checksum: checksum(&grid, n, p.iters),
        faults: (min1 - min0) + (maj1 - maj0),
        evictions: v1.pswpout.saturating_sub(v0.pswpout),
        bytes_in: v1.pswpin.saturating_sub(v0.pswpin) * page,
        bytes_out: v1.pswpout.saturating_sub(v0.pswpout) * page,
        tlb_shootdowns: tlb,
        thread_cpus: (0..p.threads)
            .map(|i| (!p.cpus.is_empty()).then(|| p.cpus[i % p.cpus.len()]))
            .collect(),
        config: format!("major faults {}", maj1 - maj0),
        ..Default::default()
    })
}

/// Runs the stencil in a child process inside a memory cgroup with swap.
pub fn run_kernel_swap(
    p: &StencilParams,
    near: u64,
    swap: &SwapKind,
    launcher: &Launcher,
    progress: &mut dyn FnMut(&str),
) -> Result<StencilOutcome, String> {
    kernel_swap::preflight(swap)?;
    let swap_bytes = (p.footprint() + p.footprint() / 4 + (256 << 20)).next_multiple_of(1 << 20);
    progress(&format!(
        "[kernel-swap] setting up swap ({} MiB) and a {} MiB cgroup",
        swap_bytes >> 20,
        near >> 20
    ));
    let dev = SwapDevice::setup(swap, swap_bytes).map_err(|e| e.to_string())?;
    let cg = MemCgroup::create(&format!("tiermem-bench-{}", std::process::id()), near)
        .map_err(|e| e.to_string())?;
    let out = Command::new(&launcher.exe)
        .args(crate::stencil::child_args(p))
        .env(kernel_swap::CGROUP_PROCS_ENV, cg.procs_file())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("starting {}: {e}", launcher.exe.display()))?;
    let cstats = cg.stats();
    drop(cg);
    let described = dev.describe();
    drop(dev);
    if !out.status.success() {
        return Err(format!("the kernel-swap child failed: {}", out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or("the kernel-swap child printed no result")?;
    let mut o: StencilOutcome = serde_json::from_str(line).map_err(|e| format!("bad child result: {e}"))?;
    o.config = format!(
        "memory cgroup limit {} MiB, {described}, {}, cgroup pgmajfault {}",
        near >> 20,
        o.config,
        cstats.pgmajfault
    );
    Ok(o)
}

/// Runs every mode `repeat` times, interleaved, and checks the checksums.
pub fn run_all(spec: &BenchSpec, progress: &mut dyn FnMut(&str)) -> StencilResult {
    let mut results = Vec::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    for round in 0..spec.repeat {
        if spec.repeat > 1 {
            progress(&format!("round {}/{}", round + 1, spec.repeat));
        }
        for m in &spec.modes {
            let name = m.name();
            if skipped.iter().any(|(s, _)| *s == name) {
                continue;
            }
            let r = match m {
                ModeSpec::None => {
                    let mut c = spec.base.clone();
                    c.virt_bytes = spec.virt;
                    c.near_bytes = spec.virt;
                    run_tiered("none", c, &spec.params, progress).map_err(|e| e.to_string())
                }
                ModeSpec::Sync {
                    name,
                    fault_path,
                    dirty,
                } => {
                    let mut c = spec.base.clone();
                    c.virt_bytes = spec.virt;
                    c.near_bytes = spec.near;
                    c.fault_path = *fault_path;
                    c.dirty_tracking = *dirty;
                    run_tiered(name, c, &spec.params, progress).map_err(|e| e.to_string())
                }
                ModeSpec::KernelSwap { swap } => {
                    if spec.base.page_size != PageSize::Base4K {
                        Err("kernel swap only swaps 4 KiB pages".to_owned())
                    } else {
                        run_kernel_swap(&spec.params, spec.near, swap, &spec.launcher, progress)
                    }
                }
            };
            match r {
                Ok(o) => {
                    progress(&format!("[{name}] {:.2}s, checksum {}", o.seconds, o.checksum));
                    results.push(o);
                }
                Err(e) => {
                    progress(&format!("[{name}] skipped: {e}"));
                    skipped.push((name, e));
                }
            }
        }
    }
    let none: Vec<f64> = results
        .iter()
        .filter(|o| o.mode == "none")
        .map(|o| o.seconds)
        .collect();
    if !none.is_empty() {
        let base = none.iter().sum::<f64>() / none.len() as f64;
        for o in results.iter_mut().filter(|o| o.mode != "none") {
            o.overhead_vs_none = Some(o.seconds / base - 1.0);
        }
    }
    let checksums_match = results.windows(2).all(|w| w[0].checksum == w[1].checksum);
    StencilResult {
        benchmark: "stencil",
        command: crate::report::command_line(),
        machine: Machine::collect(),
        virt_bytes: spec.virt,
        near_bytes: spec.near,
        page_size: spec.base.page_size.name().into(),
        params: spec.params.clone(),
        checksums_match,
        results,
        skipped,
    }
}

/// The runs as a table, plus the comparisons the issue asks for.
pub fn table(r: &StencilResult) -> String {
    let mut t = Table::new(&[
        "mode",
        "seconds",
        "vs none",
        "faults",
        "evictions",
        "MiB in",
        "MiB out",
        "TLB IPIs",
        "init s",
        "checksum",
    ]);
    for o in &r.results {
        t.row(vec![
            o.mode.clone(),
            format!("{:.2}", o.seconds),
            o.overhead_vs_none
                .map_or("-".into(), |x| format!("{:+.0}%", x * 100.0)),
            o.faults.to_string(),
            o.evictions.to_string(),
            mib(o.bytes_in),
            mib(o.bytes_out),
            o.tlb_shootdowns.to_string(),
            format!("{:.2}", o.init_seconds),
            o.checksum.clone(),
        ]);
    }
    let mut s = t.render();
    let mean = |m: &str| {
        let v: Vec<f64> = r
            .results
            .iter()
            .filter(|o| o.mode == m)
            .map(|o| o.seconds)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let modes: Vec<String> = {
        let mut v: Vec<String> = r.results.iter().map(|o| o.mode.clone()).collect();
        v.dedup();
        v
    };
    if let Some(k) = mean("kernel-swap") {
        for m in modes.iter().filter(|m| m.starts_with("sync")) {
            if let Some(x) = mean(m) {
                s += &format!("{m} vs kernel-swap: {:.2}x faster\n", k / x);
            }
        }
    }
    s += &format!(
        "checksums {}\n",
        if r.checksums_match {
            "match in every mode"
        } else {
            "DIFFER: results are wrong"
        }
    );
    for (m, why) in &r.skipped {
        s += &format!("{m}: skipped ({why})\n");
    }
    for o in &r.results {
        let cpus: Vec<String> = o
            .thread_cpus
            .iter()
            .map(|c| c.map_or("-".into(), |c| c.to_string()))
            .collect();
        if !o.faults_per_thread.is_empty() {
            s += &format!(
                "{}: threads on CPUs [{}], faults per thread {:?}, fault service p50 {:.1} us p99 {:.1} us\n",
                o.mode,
                cpus.join(","),
                o.faults_per_thread,
                o.fault_p50_ns as f64 / 1e3,
                o.fault_p99_ns as f64 / 1e3
            );
        }
    }
    s
}

/// Runtime per mode (mean of the rounds), as an SVG bar chart.
pub fn plot(r: &StencilResult, path: &std::path::Path) -> Result<(), String> {
    let mut bars: Vec<crate::plot::Bar> = Vec::new();
    for o in &r.results {
        if let Some(b) = bars.iter_mut().find(|b| b.group == o.mode) {
            b.upper = Some(b.upper.unwrap_or(b.value).max(o.seconds));
            b.value = b.value.min(o.seconds);
        } else {
            bars.push(crate::plot::Bar {
                group: o.mode.clone(),
                series: "runtime".into(),
                value: o.seconds,
                upper: None,
            });
        }
    }
    crate::plot::grouped_bars(
        path,
        &format!(
            "2D heat stencil, {} iterations, {} MiB over {} MiB near, {} threads",
            r.params.iters,
            r.virt_bytes >> 20,
            r.near_bytes >> 20,
            r.params.threads
        ),
        "seconds (min, whisker max over rounds)",
        &bars,
        false,
    )
}
