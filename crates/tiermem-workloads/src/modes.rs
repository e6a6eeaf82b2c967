//! Running the stencil in each mode and reporting the runs side by side.

use crate::kernel_swap::{self, MemCgroup, SwapDevice, SwapKind};
use crate::plot::{Bar, Segment};
use crate::report::{mib, Machine, Table};
use crate::stencil::{checksum, init, iterate, StencilOutcome, StencilParams, StencilResult, Workers};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;
use tiermem::{Config, DirtyTracking, FaultPath, InstallMethod, PageSize, PolicyKind, Region};

/// Where mover threads run relative to the application threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On CPUs no application thread uses (paper 1's dedicated cores).
    Own,
    /// On the application threads' CPUs.
    Shared,
}

impl Placement {
    /// `own` or `shared`.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Own => "own",
            Placement::Shared => "shared",
        }
    }
}

/// A mode to run.
#[derive(Clone, Debug)]
pub enum ModeSpec {
    /// Budget holds everything: no data movement.
    None,
    /// A tiered region: `sync` (movement in faults) or `prefetch` (movers).
    Tiered {
        /// Name in results.
        name: String,
        /// Fault path.
        fault_path: FaultPath,
        /// Dirty tracking.
        dirty: DirtyTracking,
        /// Replacement policy.
        policy: PolicyKind,
        /// Movers (0 for sync) and where they run.
        movers: Option<(usize, Placement)>,
        /// How movers install pages.
        install: InstallMethod,
        /// Fault-around on.
        fault_around: bool,
    },
    /// A team region: workers as threads (`regular`) or processes (`pspt`).
    Team(crate::team_stencil::TeamMode),
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
            ModeSpec::Tiered { name, .. } => name.clone(),
            ModeSpec::Team(m) => m.name.clone(),
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
    /// Stencil parameters (threads and CPUs are set per thread count).
    pub params: StencilParams,
    /// Application thread counts to run.
    pub thread_counts: Vec<usize>,
    /// Modes in the order to run them.
    pub modes: Vec<ModeSpec>,
    /// Rounds over all modes.
    pub repeat: usize,
    /// Region settings for tiered modes (page size, far store, eviction
    /// batch); sizes, fault path, policy and movers are set per mode.
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

fn costs(v: &[tiermem::stats::CostShare]) -> Vec<(String, u64)> {
    v.iter().map(|c| (c.category.to_owned(), c.ns)).collect()
}

/// Runs the stencil on a tiermem region.
pub fn run_tiered(
    mode: &str,
    config: Config,
    p: &StencilParams,
    progress: &mut dyn FnMut(&str),
) -> Result<StencilOutcome, tiermem::Error> {
    let policy = config.policy.name().to_owned();
    let (movers, mover_cpus) = (config.movers, config.mover_cpus.clone());
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
    let cpu0 = w.cpu_time();
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
    let app_cpu_ns = w.cpu_time().saturating_sub(cpu0).as_nanos() as u64;
    let tlb = tiermem_sys::interrupts::tlb_shootdowns() - tlb0;
    region.settle();
    let s = region.stats();
    let sum = checksum(region.as_mut_slice::<f64>(), n, p.iters);
    let faults_per_thread: Vec<u64> = w
        .tids()
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
        demand_faults_per_thread: faults_per_thread.clone(),
        faults_per_thread,
        thread_cpus: w.cpus().to_vec(),
        cost_ns: costs(&s.cost),
        mover_cost_ns: costs(&s.mover_cost),
        mover_work: s.mover,
        mover_ns_per_page: s.mover.ns_per_page_moved(region.page_bytes()),
        fault_p50_ns: s.fault_latency.p50_ns,
        fault_p99_ns: s.fault_latency.p99_ns,
        config: region.describe(),
        threads: p.threads,
        policy,
        movers,
        mover_cpus,
        prefetch_issued: s.prefetch.issued,
        prefetch_used: s.prefetch.used,
        prefetch_wasted: s.prefetch.wasted,
        prefetch_triggers: s.prefetch.triggers,
        prefetch_late: s.prefetch.late,
        prefetch_shrinks: s.prefetch.shrinks,
        prefetch_inline: s.prefetch.inline,
        prefetch_spared: s.prefetch.spared,
        prefetch_stale: s.prefetch.stale,
        fault_around: [
            s.fault_around.clusters,
            s.fault_around.installed,
            s.fault_around.used,
            s.fault_around.evicted_unused,
        ],
        stride: [
            s.stride.installed,
            s.stride.neighbours,
            s.stride.used,
            s.stride.evicted_unused,
        ],
        mover_fills: s.mover_fills,
        inline_evictions: s.inline_evictions,
        app_cpu_ns,
        waits_in_flight: s.waits_in_flight,
        wait_in_flight_ns: s.wait_in_flight_ns,
        eviction_pauses: s.eviction_pauses,
        ..Default::default()
    })
}

/// The kernel-swap child: joins the cgroup named in the environment, runs
/// the stencil on plain memory and returns its outcome (printed as JSON on
/// stdout by the caller).
pub fn child_main(p: &StencilParams) -> Result<StencilOutcome, String> {
    // A parent killed mid-run must not leave this child running in the
    // cgroup (found by the kill tests).
    if let Some(parent) = std::env::var(PARENT_ENV).ok().and_then(|v| v.parse().ok()) {
        tiermem_sys::process::die_with_parent(parent);
    }
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
        thread_cpus: w.cpus().to_vec(),
        threads: p.threads,
        config: format!("major faults {}", maj1 - maj0),
        ..Default::default()
    })
}

/// The pid of the benchmark that started a kernel-swap child: the child
/// dies with it.
const PARENT_ENV: &str = "TIERMEM_BENCH_PARENT";

/// Runs the stencil in a child process inside a memory cgroup with swap.
pub fn run_kernel_swap(
    p: &StencilParams,
    near: u64,
    swap: &SwapKind,
    launcher: &Launcher,
    progress: &mut dyn FnMut(&str),
) -> Result<StencilOutcome, String> {
    kernel_swap::preflight(swap)?;
    // What killed runs left behind (their cgroups; swap areas are swept by
    // SwapDevice::setup).
    kernel_swap::clean_leftovers().map_err(|e| e.to_string())?;
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
        .env(PARENT_ENV, std::process::id().to_string())
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

/// The CPUs of `threads` application threads (thread i on CPU i, wrapping).
fn app_cpus(allowed: &[usize], threads: usize) -> Vec<usize> {
    (0..threads).map(|i| allowed[i % allowed.len()]).collect()
}

/// Runs every mode for every thread count, `repeat` times interleaved, and
/// checks the checksums.
pub fn run_all(spec: &BenchSpec, progress: &mut dyn FnMut(&str)) -> StencilResult {
    let allowed = tiermem_sys::thread::affinity().unwrap_or_else(|_| vec![0]);
    progress("measuring memcpy bandwidth for the lower bounds");
    let bw = crate::report::memcpy_bandwidth(spec.virt);
    progress(&format!("memcpy: {:.2} GB/s", bw / 1e9));
    let mut results = Vec::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    for round in 0..spec.repeat {
        if spec.repeat > 1 {
            progress(&format!("round {}/{}", round + 1, spec.repeat));
        }
        for &threads in &spec.thread_counts {
            let mut params = spec.params.clone();
            params.threads = threads;
            if params.cpus.is_empty() {
                params.cpus = app_cpus(&allowed, threads);
            }
            for m in &spec.modes {
                let name = m.name();
                let key = format!("{name} threads={threads}");
                if skipped.iter().any(|(s, _)| *s == key) {
                    continue;
                }
                let r = run_mode(spec, m, &params, &allowed, progress);
                match r {
                    Ok(o) => {
                        progress(&format!(
                            "[{name}] {threads} threads: {:.2}s, checksum {}",
                            o.seconds, o.checksum
                        ));
                        results.push(o);
                    }
                    Err(e) => {
                        progress(&format!("[{name}] {threads} threads: skipped: {e}"));
                        skipped.push((key, e));
                    }
                }
            }
        }
    }
    // Overheads and lower bounds against `none` of the same thread count.
    let nones: Vec<(usize, Option<f64>)> = spec
        .thread_counts
        .iter()
        .map(|&t| (t, mean_of(&results, "none", t, |o| o.seconds)))
        .collect();
    let team_nones: Vec<(usize, Option<f64>)> = spec
        .thread_counts
        .iter()
        .map(|&t| (t, mean_of(&results, "team-none", t, |o| o.seconds)))
        .collect();
    for o in results
        .iter_mut()
        .filter(|o| o.mode != "none" && o.mode != "team-none")
    {
        // Team modes run the same kernel as team-none: compare with it.
        let base = if o.team.is_some() && team_nones.iter().any(|(t, v)| *t == o.threads && v.is_some()) {
            &team_nones
        } else {
            &nones
        };
        let none = base.iter().find(|(t, _)| *t == o.threads).and_then(|(_, v)| *v);
        if let Some(base) = none {
            o.overhead_vs_none = Some(o.seconds / base - 1.0);
        }
        let moved = (o.bytes_in + o.bytes_out) as f64 / bw;
        let lb = none.unwrap_or(0.0).max(moved);
        if lb > 0.0 {
            o.lower_bound_seconds = Some(lb);
            o.vs_lower_bound = Some(o.seconds / lb);
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
        memcpy_bytes_per_s: bw,
        results,
        skipped,
    }
}

fn run_mode(
    spec: &BenchSpec,
    m: &ModeSpec,
    params: &StencilParams,
    allowed: &[usize],
    progress: &mut dyn FnMut(&str),
) -> Result<StencilOutcome, String> {
    match m {
        ModeSpec::None => {
            let mut c = spec.base.clone();
            c.virt_bytes = spec.virt;
            c.near_bytes = spec.virt;
            c.movers = 0;
            run_tiered("none", c, params, progress).map_err(|e| e.to_string())
        }
        ModeSpec::Tiered {
            name,
            fault_path,
            dirty,
            policy,
            movers,
            install,
            fault_around,
        } => {
            let mut c = spec.base.clone();
            c.fault_around = *fault_around;
            c.virt_bytes = spec.virt;
            c.near_bytes = spec.near;
            c.fault_path = *fault_path;
            c.dirty_tracking = *dirty;
            c.policy = *policy;
            c.install = *install;
            if let Some((n, place)) = movers {
                c.movers = *n;
                c.mover_cpus = match place {
                    Placement::Shared => params.cpus.clone(),
                    Placement::Own => {
                        let spare: Vec<usize> = allowed
                            .iter()
                            .copied()
                            .filter(|c| !params.cpus.contains(c))
                            .collect();
                        if spare.is_empty() {
                            return Err(format!(
                                "no CPU left for movers beside {} application threads",
                                params.threads
                            ));
                        }
                        spare
                    }
                };
            } else {
                c.movers = 0;
            }
            run_tiered(name, c, params, progress).map_err(|e| e.to_string())
        }
        ModeSpec::Team(m) => {
            if spec.base.page_size != PageSize::Base4K {
                return Err("team modes use 4 KiB pages".to_owned());
            }
            crate::team_stencil::run(
                m,
                spec.virt,
                spec.near,
                spec.base.evict_batch_pages,
                params,
                progress,
            )
        }
        ModeSpec::KernelSwap { swap } => {
            if spec.base.page_size != PageSize::Base4K {
                Err("kernel swap only swaps 4 KiB pages".to_owned())
            } else {
                run_kernel_swap(params, spec.near, swap, &spec.launcher, progress)
            }
        }
    }
}

fn mean_of(
    results: &[StencilOutcome],
    mode: &str,
    threads: usize,
    f: impl Fn(&StencilOutcome) -> f64,
) -> Option<f64> {
    let v: Vec<f64> = results
        .iter()
        .filter(|o| o.mode == mode && o.threads == threads)
        .map(f)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn distinct_modes(r: &StencilResult) -> Vec<String> {
    crate::report::first_seen(r.results.iter().map(|o| o.mode.clone()))
}

fn thread_counts(r: &StencilResult) -> Vec<usize> {
    let mut v: Vec<usize> = r.results.iter().map(|o| o.threads).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The runs as tables: every run, then paper 1's Table I/II form (extra
/// runtime over `none` per thread count), then the comparisons.
pub fn table(r: &StencilResult) -> String {
    let mut t = Table::new(&[
        "mode",
        "thr",
        "seconds",
        "vs none",
        "vs bound",
        "demand faults",
        "evictions",
        "MiB in",
        "MiB out",
        "TLB IPIs",
        "prefetch used/issued",
        "checksum",
    ]);
    for o in &r.results {
        t.row(vec![
            o.mode.clone(),
            o.threads.to_string(),
            format!("{:.2}", o.seconds),
            o.overhead_vs_none
                .map_or("-".into(), |x| format!("{:+.0}%", x * 100.0)),
            o.vs_lower_bound.map_or("-".into(), |x| format!("{x:.2}x")),
            o.faults.to_string(),
            o.evictions.to_string(),
            mib(o.bytes_in),
            mib(o.bytes_out),
            o.tlb_shootdowns.to_string(),
            if o.prefetch_issued > 0 {
                format!("{}/{}", o.prefetch_used, o.prefetch_issued)
            } else {
                "-".into()
            },
            o.checksum.clone(),
        ]);
    }
    let mut s = t.render();
    let threads = thread_counts(r);
    let modes = distinct_modes(r);
    // Table I/II: extra runtime over none.
    let mut header = vec!["extra runtime over none".to_owned()];
    header.extend(threads.iter().map(|t| format!("{t} thr")));
    let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t2 = Table::new(&hdr);
    for m in modes.iter().filter(|m| *m != "none") {
        let mut row = vec![m.clone()];
        for &th in &threads {
            let none = mean_of(&r.results, "none", th, |o| o.seconds);
            let x = mean_of(&r.results, m, th, |o| o.seconds);
            row.push(match (none, x) {
                (Some(n), Some(x)) => format!("{:+.0}%", (x / n - 1.0) * 100.0),
                _ => "-".into(),
            });
        }
        t2.row(row);
    }
    s += "\n";
    s += &t2.render();
    s += &format!(
        "memcpy bandwidth in this run: {:.2} GB/s\n",
        r.memcpy_bytes_per_s / 1e9
    );
    for &th in &threads {
        if let Some(k) = mean_of(&r.results, "kernel-swap", th, |o| o.seconds) {
            for m in modes.iter().filter(|m| *m != "none" && *m != "kernel-swap") {
                if let Some(x) = mean_of(&r.results, m, th, |o| o.seconds) {
                    s += &format!("{th} threads: {m} vs kernel-swap: {:.2}x faster\n", k / x);
                }
            }
        }
        if let Some(sync_faults) = mean_of(&r.results, "sync", th, |o| {
            o.demand_faults_per_thread.iter().sum::<u64>() as f64 / o.threads.max(1) as f64
        }) {
            for m in modes.iter().filter(|m| m.starts_with("prefetch")) {
                if let Some(f) = mean_of(&r.results, m, th, |o| {
                    o.demand_faults_per_thread.iter().sum::<u64>() as f64 / o.threads.max(1) as f64
                }) {
                    s += &format!(
                        "{th} threads: {m}: {:.0}x fewer demand faults per application thread than sync\n",
                        sync_faults / f.max(1.0)
                    );
                }
            }
        }
    }
    s += &team_table(r);
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
                "{} ({} thr): threads on CPUs [{}]{}, demand faults per thread {:?}, fault service {}, inline evictions {}, eviction pauses {}\n",
                o.mode,
                o.threads,
                cpus.join(","),
                if o.movers > 0 {
                    format!(", {} mover(s) on CPUs {:?}", o.movers, o.mover_cpus)
                } else {
                    String::new()
                },
                o.faults_per_thread,
                fault_service(o),
                o.inline_evictions,
                o.eviction_pauses
            );
            if let Some(ns) = o.mover_ns_per_page {
                let w = &o.mover_work;
                s += &format!(
                    "{} ({} thr): mover cost {:.2} us CPU per 4 KiB page moved (in + out); movers busy {:.2} s CPU, {:.2} s wall ({:.0}% of the run per mover), {} pages in with {} COPY calls ({:.1} pages per call), {} pages out with {} unmap calls ({:.1} pages per call)\n",
                    o.mode,
                    o.threads,
                    ns / 1e3,
                    w.busy_ns as f64 / 1e9,
                    w.busy_wall_ns as f64 / 1e9,
                    w.busy_wall_ns as f64 / 1e9 / o.seconds.max(1e-9) / o.movers.max(1) as f64 * 100.0,
                    w.pages_in,
                    w.copy_calls,
                    w.pages_in as f64 / w.copy_calls.max(1) as f64,
                    w.pages_out,
                    w.unmap_calls,
                    w.pages_out as f64 / w.unmap_calls.max(1) as f64
                );
                // The movers' timers run on the wall clock: their shares,
                // scaled to the CPU time, say where that cost goes.
                let wall: u64 = o.mover_cost_ns.iter().map(|c| c.1).sum();
                if wall > 0 {
                    let parts: Vec<String> = o
                        .mover_cost_ns
                        .iter()
                        .map(|(c, v)| format!("{c} {:.2}", ns / 1e3 * *v as f64 / wall as f64))
                        .collect();
                    s += &format!(
                        "{} ({} thr): mover cost per page moved by category (us; pte = install, tlb = write-protect and unmap, transfer = far-store copies): {}\n",
                        o.mode,
                        o.threads,
                        parts.join(", ")
                    );
                }
            }
            if o.movers == 0 && o.app_cpu_ns > 0 {
                s += &format!(
                    "{} ({} thr): application threads: {:.2} s CPU\n",
                    o.mode,
                    o.threads,
                    o.app_cpu_ns as f64 / 1e9
                );
            }
            if o.movers > 0 {
                // Where the application threads' time in tiermem went (wall
                // clock): their own fills and evictions, and waiting for
                // pages the movers had in flight.
                let own: u64 = o.cost_ns.iter().map(|c| c.1).sum();
                let parts: Vec<String> = o
                    .cost_ns
                    .iter()
                    .map(|(c, v)| format!("{c} {:.2}", *v as f64 / 1e9))
                    .collect();
                s += &format!(
                    "{} ({} thr): application threads: {:.2} s CPU; in tiermem {:.2} s filling and evicting themselves ({}), {:.2} s waiting for {} pages in flight (wall clock)\n",
                    o.mode,
                    o.threads,
                    o.app_cpu_ns as f64 / 1e9,
                    own as f64 / 1e9,
                    parts.join(", "),
                    o.wait_in_flight_ns as f64 / 1e9,
                    o.waits_in_flight
                );
            }
            if o.prefetch_issued > 0 {
                s += &format!(
                    "{} ({} thr): prefetch issued {} used {} wasted (evicted before use) {}, demand faults on triggers {}, late (in window, off trigger) {}, window shrinks {}, pages filled by faulting threads up to the trigger {}, unused prefetched victims spared once {}, stale requested pages skipped {}\n",
                    o.mode,
                    o.threads,
                    o.prefetch_issued,
                    o.prefetch_used,
                    o.prefetch_wasted,
                    o.prefetch_triggers,
                    o.prefetch_late,
                    o.prefetch_shrinks,
                    o.prefetch_inline,
                    o.prefetch_spared,
                    o.prefetch_stale
                );
            }
            if o.fault_around[0] > 0 {
                let [clusters, installed, used, unused] = o.fault_around;
                s += &format!(
                    "{} ({} thr): fault-around: {clusters} faults brought {installed} neighbours, {used} known used, {unused} evicted unused\n",
                    o.mode, o.threads
                );
            }
            if o.stride[0] > 0 {
                let [points, neighbours, used, unused] = o.stride;
                s += &format!(
                    "{} ({} thr): stride detection: {points} points installed ahead with {neighbours} neighbours, {used} known used, {unused} evicted unused\n",
                    o.mode, o.threads
                );
            }
        }
    }
    s
}

/// The fault service time of a run: p50/p99 where a histogram was kept; a
/// team keeps only the total time in faults, so its mean.
fn fault_service(o: &StencilOutcome) -> String {
    match &o.team {
        Some(t) if o.fault_p50_ns == 0 => format!("mean {:.1} us (team: no histogram)", t.ns_per_fault / 1e3),
        _ => format!(
            "p50 {:.1} us p99 {:.1} us",
            o.fault_p50_ns as f64 / 1e3,
            o.fault_p99_ns as f64 / 1e3
        ),
    }
}

/// Team modes: what partially separated page tables change per fault and
/// per eviction.
fn team_table(r: &StencilResult) -> String {
    let runs: Vec<&StencilOutcome> = r.results.iter().filter(|o| o.team.is_some()).collect();
    if runs.is_empty() {
        return String::new();
    }
    let mut t = Table::new(&[
        "team mode",
        "thr",
        "workers",
        "seconds",
        "faults (minor)",
        "evictions",
        "clean (not written)",
        "wp faults",
        "TLB IPIs/evicted page",
        "evict us/page",
        "fault us",
        "victims none/self/other/many",
        "faults per worker",
    ]);
    for o in runs {
        let d = o.team.as_ref().expect("filtered");
        t.row(vec![
            o.mode.clone(),
            o.threads.to_string(),
            d.workers_are.clone(),
            format!("{:.2}", o.seconds),
            format!("{} ({})", o.faults, d.minor_faults),
            o.evictions.to_string(),
            d.clean_evictions.to_string(),
            d.wp_faults.to_string(),
            format!("{:.3}", d.ipis_per_eviction),
            format!("{:.2}", d.evict_ns_per_page / 1e3),
            format!("{:.2}", d.ns_per_fault / 1e3),
            format!(
                "{}/{}/{}/{}",
                d.victims[0], d.victims[1], d.victims[2], d.victims[3]
            ),
            format!("{:?}", o.faults_per_thread),
        ]);
    }
    let mut s = String::from("\n");
    s += &t.render();
    for &th in &thread_counts(r) {
        if let (Some(reg), Some(ps)) = (
            mean_of(&r.results, "regular", th, |o| o.seconds),
            mean_of(&r.results, "pspt", th, |o| o.seconds),
        ) {
            s += &format!("{th} workers: pspt is {:.2}x faster than regular\n", reg / ps);
        }
        if let (Some(reg), Some(ps)) = (
            mean_of(&r.results, "regular", th, |o| o.seconds),
            mean_of(&r.results, "pspt+sharer", th, |o| o.seconds),
        ) {
            s += &format!(
                "{th} workers: pspt+sharer is {:.2}x faster than regular\n",
                reg / ps
            );
        }
    }
    if let Some(m) = crate::pspt_model::fit(&r.results) {
        s += &crate::pspt_model::table(&m);
    }
    s
}

/// Plots: runtime per mode and thread count (with the lower bound), faults
/// per application thread (paper 1 Fig. 8), and the cost breakdown per
/// mode (Fig. 6). `path` is the runtime plot; the others get `-faults` and
/// `-costs` before the extension.
pub fn plot(r: &StencilResult, path: &std::path::Path) -> Result<Vec<PathBuf>, String> {
    let sibling = |tag: &str| {
        let stem = path
            .file_stem()
            .map_or("stencil".into(), |s| s.to_string_lossy().into_owned());
        path.with_file_name(format!("{stem}-{tag}.svg"))
    };
    let threads = thread_counts(r);
    let modes = distinct_modes(r);
    let mut bars = Vec::new();
    for m in &modes {
        for &th in &threads {
            if let Some(x) = mean_of(&r.results, m, th, |o| o.seconds) {
                bars.push(Bar {
                    group: format!("{th} thr"),
                    series: m.clone(),
                    value: x,
                    upper: mean_of(&r.results, m, th, |o| o.lower_bound_seconds.unwrap_or(0.0))
                        .filter(|lb| *lb > x),
                });
            }
        }
    }
    crate::plot::grouped_bars(
        path,
        &format!(
            "2D heat stencil, {} iterations, {} MiB over {} MiB near",
            r.params.iters,
            r.virt_bytes >> 20,
            r.near_bytes >> 20
        ),
        "seconds",
        &bars,
        false,
    )?;
    let mut out = vec![path.to_path_buf()];
    // Fig. 8: demand faults per application thread, per mode.
    let mut fbars = Vec::new();
    for o in r
        .results
        .iter()
        .filter(|o| o.mode != "none" && !o.demand_faults_per_thread.is_empty())
    {
        for (i, f) in o.demand_faults_per_thread.iter().enumerate() {
            let group = format!("{} thr, thread {i}", o.threads);
            if !fbars.iter().any(|b: &Bar| b.group == group && b.series == o.mode) {
                fbars.push(Bar {
                    group,
                    series: o.mode.clone(),
                    value: (*f).max(1) as f64,
                    upper: None,
                });
            }
        }
    }
    if !fbars.is_empty() {
        let p = sibling("faults");
        crate::plot::grouped_bars(
            &p,
            "demand faults per application thread (paper 1, Fig. 8)",
            "faults (log)",
            &fbars,
            true,
        )?;
        out.push(p);
    }
    // Fig. 6: time per cost category inside faults, per mode.
    let mut segs = Vec::new();
    for o in r
        .results
        .iter()
        .filter(|o| o.cost_ns.iter().any(|(_, ns)| *ns > 0))
    {
        let bar = format!("{} {}thr", o.mode, o.threads);
        if segs.iter().any(|s: &Segment| s.bar == bar) {
            continue;
        }
        for (cat, ns) in &o.cost_ns {
            segs.push(Segment {
                bar: bar.clone(),
                layer: cat.clone(),
                value: *ns as f64 / 1e9,
            });
        }
    }
    if !segs.is_empty() {
        let p = sibling("costs");
        crate::plot::stacked_bars(
            &p,
            "time in faults by cost category (paper 1, Fig. 6)",
            "seconds (all threads)",
            &segs,
        )?;
        out.push(p);
    }
    // Team modes: the cost of one fault by category (Fig. 6 per fault),
    // and the calibrated model next to the paper's Fig. 7.
    let mut per_fault = Vec::new();
    for o in r.results.iter().filter(|o| o.team.is_some() && o.faults > 0) {
        let bar = format!("{} {}w", o.mode, o.threads);
        for (cat, ns) in &o.cost_ns {
            per_fault.push(Segment {
                bar: bar.clone(),
                layer: cat.clone(),
                value: *ns as f64 / o.faults as f64 / 1e3,
            });
        }
    }
    if !per_fault.is_empty() {
        let p = sibling("fault-costs");
        crate::plot::stacked_bars(
            &p,
            "cost of one fault by category, team modes (paper 1, Fig. 6)",
            "microseconds per fault",
            &per_fault,
        )?;
        out.push(p);
    }
    if let Some(m) = crate::pspt_model::fit(&r.results) {
        let p = sibling("model");
        crate::pspt_model::plot(&m, &p)?;
        out.push(p);
    }
    Ok(out)
}
